/* Copy n bytes, 8 at a time while 8 remain, then bytewise (benchmark kernel, BPF and native). */
static inline unsigned long copy_bytes(unsigned char *dst, const unsigned char *src, unsigned long n)
{
    unsigned long i = 0;
    for (; i + 8 <= n; i += 8)
        *(unsigned long *)(dst + i) = *(const unsigned long *)(src + i);
    for (; i < n; i++)
        dst[i] = src[i];
    return i;
}
