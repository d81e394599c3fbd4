/* SAFE: 4-byte words while i + 4 <= len, then the tail bytes. */
int bpf_prog(unsigned char *in, unsigned char *out, unsigned long len)
{
    unsigned long i = 0, s = 0;
    for (; i + 4 <= len; i += 4)
        s += in[i] | in[i + 1] << 8 | in[i + 2] << 16 | (unsigned long)in[i + 3] << 24;
    for (; i < len; i++)
        s += in[i];
    return (int)s;
}
