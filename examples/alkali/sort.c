/* Sort firmware: copies the input's 32-bit words to the output buffer and sorts them there.
 * Returns the number of words sorted. */
#include "bpf_helpers.h"
#include "sort_core.h"

/* Bounds the kernel verifier way: each input word is read only when it ends within len (the ABI's r3),
 * each output word written only below OUTPUT_BYTES; words past the output buffer are not sorted. */
int bpf_prog(char *imem, char *omem, unsigned long len)
{
    unsigned long n = 0;
    for (unsigned long i = 0; i + 4 <= len && i + 4 <= OUTPUT_BYTES; i += 4) {
        *(unsigned int *)(omem + i) = *(const unsigned int *)(imem + i);
        n++;
    }
    sort_words((unsigned int *)omem, n);
    return (int)n;
}
