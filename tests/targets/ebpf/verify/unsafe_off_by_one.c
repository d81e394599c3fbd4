/* UNSAFE: the loop runs to i <= len, one byte past the end. */
int bpf_prog(unsigned char *in, unsigned char *out, unsigned long len)
{
    unsigned long sum = 0;
    for (unsigned long i = 0; i <= len; i++)
        sum += in[i];
    return (int)sum;
}
