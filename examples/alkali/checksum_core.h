/* The checksum kernel shared by the firmware (BPF) and the native benchmark build (same C). */
#ifndef CHECKSUM_CORE_H
#define CHECKSUM_CORE_H

/* Fletcher-64 style: two running sums over 32-bit little-endian words, then the tail bytes. */
static inline unsigned long checksum_words(const unsigned char *buf, unsigned long len)
{
    unsigned long a = 1, b = 0;
    unsigned long i = 0;
    for (; i + 4 <= len; i += 4) {
        unsigned int w = (unsigned int)buf[i] | (unsigned int)buf[i + 1] << 8 |
                         (unsigned int)buf[i + 2] << 16 | (unsigned int)buf[i + 3] << 24;
        a = (a + w) % 0xFFFFFFFBul;
        b = (b + a) % 0xFFFFFFFBul;
    }
    for (; i < len; i++) {
        a = (a + buf[i]) % 0xFFFFFFFBul;
        b = (b + a) % 0xFFFFFFFBul;
    }
    return b << 32 | a;
}

#endif
