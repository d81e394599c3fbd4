/* SAFE: a stack struct written field by field, then passed around by fixed offsets. */
struct hdr { unsigned long a, b; unsigned int c; };
int bpf_prog(unsigned char *in, unsigned char *out, unsigned long len)
{
    volatile struct hdr h;
    h.a = len;
    h.b = len * 3;
    h.c = 7;
    return (int)(h.a + h.b + h.c);
}
