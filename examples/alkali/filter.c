/* Filter firmware: copies the input bytes at or above a threshold into the output buffer.
 *
 * The threshold is the first input byte; the kept bytes follow in the output, after a 4-byte
 * little-endian count. Exercises a BPF-to-BPF call (a non-inlined static function), an extern
 * helper declaration (an R_BPF_64_32 relocation by name) and string literals in .rodata.
 */
typedef unsigned long u64;

extern long print(const char *msg);

static __attribute__((noinline)) u64 keep(const unsigned char *in, unsigned char *out, u64 n,
                                          unsigned char threshold)
{
    u64 kept = 0;
    for (u64 i = 0; i < n; i++) {
        if (in[i] >= threshold)
            out[kept++] = in[i];
    }
    return kept;
}

int bpf_prog(char *imem, char *omem, u64 len)
{
    if (len == 0) {
        print("filter: empty input\n");
        return -1;
    }
    u64 kept = keep((const unsigned char *)imem + 1, (unsigned char *)omem + 4, len - 1,
                    (unsigned char)imem[0]);
    omem[0] = (char)kept;
    omem[1] = (char)(kept >> 8);
    omem[2] = (char)(kept >> 16);
    omem[3] = (char)(kept >> 24);
    print(kept ? "filter: kept some bytes\n" : "filter: kept nothing\n");
    return (int)kept;
}
