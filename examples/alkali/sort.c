/* Sort firmware: copies the input's 32-bit words to the output buffer and sorts them there.
 * Returns the number of words sorted. */
#include "bpf_helpers.h"
#include "sort_core.h"

int bpf_prog(char *imem, char *omem, unsigned long len)
{
    unsigned long n = len / 4;
    unsigned int *in = (unsigned int *)imem, *out = (unsigned int *)omem;
    for (unsigned long i = 0; i < n; i++)
        out[i] = in[i];
    sort_words(out, n);
    return (int)n;
}
