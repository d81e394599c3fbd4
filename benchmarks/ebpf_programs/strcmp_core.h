/* strcmp-like scan: the first index where the two halves of buf differ (n when equal). */
static inline unsigned long first_difference(const unsigned char *buf, unsigned long len)
{
    unsigned long half = len / 2, i = 0;
    while (i < half && buf[i] == buf[half + i])
        i++;
    return i;
}
