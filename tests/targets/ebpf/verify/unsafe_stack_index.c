/* UNSAFE: an input byte indexes a 16-byte stack table without a mask. */
int bpf_prog(unsigned char *in, unsigned char *out, unsigned long len)
{
    volatile unsigned char table[16];
    for (int i = 0; i < 16; i++)
        table[i] = (unsigned char)i;
    if (len < 1)
        return 0;
    return table[in[0]];
}
