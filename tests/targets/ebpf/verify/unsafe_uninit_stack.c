/* UNSAFE: returns a stack word that was never written. */
int bpf_prog(unsigned char *in, unsigned char *out, unsigned long len)
{
    volatile unsigned long slot[4];
    slot[0] = len;
    return (int)slot[2];
}
