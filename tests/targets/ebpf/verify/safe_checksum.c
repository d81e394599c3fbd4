/* SAFE: bounded checksum over the input, the loop index tested against the ABI length (r3). */
int bpf_prog(unsigned char *in, unsigned char *out, unsigned long len)
{
    unsigned long sum = 0;
    for (unsigned long i = 0; i < len; i++)
        sum = sum * 31 + in[i];
    return (int)sum;
}
