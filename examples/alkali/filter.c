/* Filter firmware: copies the input bytes at or above a threshold into the output buffer.
 *
 * The threshold is the first input byte; the kept bytes follow in the output, after a 4-byte
 * little-endian count. Exercises a BPF-to-BPF call (a non-inlined static function), an extern
 * helper declaration (an R_BPF_64_32 relocation by name) and string literals in .rodata.
 */
typedef unsigned long u64;
#define OUTPUT_BYTES (64ul << 20) /* the device's output buffer (identify: 64 MiB) */

extern long print(const char *msg);

/* Bounds the kernel verifier way: every input read is checked against len (the ABI's r3) and every
 * output write against OUTPUT_BYTES, so the program is proven safe before it runs. */
static __attribute__((noinline)) u64 keep(const unsigned char *in, unsigned char *out, u64 len,
                                          unsigned char threshold)
{
    u64 kept = 0;
    for (u64 i = 1; i < len; i++) {
        if (in[i] < threshold)
            continue;
        if (kept >= OUTPUT_BYTES - 4)
            break;
        out[4 + kept] = in[i];
        kept++;
    }
    return kept;
}

int bpf_prog(char *imem, char *omem, u64 len)
{
    if (len == 0) {
        print("filter: empty input\n");
        return -1;
    }
    u64 kept = keep((const unsigned char *)imem, (unsigned char *)omem, len, (unsigned char)imem[0]);
    omem[0] = (char)kept;
    omem[1] = (char)(kept >> 8);
    omem[2] = (char)(kept >> 16);
    omem[3] = (char)(kept >> 24);
    print(kept ? "filter: kept some bytes\n" : "filter: kept nothing\n");
    return (int)kept;
}
