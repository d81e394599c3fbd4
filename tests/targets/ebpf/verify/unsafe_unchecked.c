/* UNSAFE: reads in[4..8) without looking at the length. */
int bpf_prog(unsigned char *in, unsigned char *out, unsigned long len)
{
    return *(unsigned int *)(in + 4);
}
