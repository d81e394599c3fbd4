/* SAFE: reads a 16-byte header only after checking the length. */
int bpf_prog(unsigned char *in, unsigned char *out, unsigned long len)
{
    if (len < 16)
        return -1;
    unsigned long a = *(unsigned long *)in, b = *(unsigned long *)(in + 8);
    return (int)(a ^ b);
}
