/* Checksum firmware: Fletcher-64 style sum of the whole input, written as 8 bytes to the output.
 * Entry ABI of the Alkali fork: r1 = input, r2 = output, r3 = input length. Returns the low 32 bits. */
#include "bpf_helpers.h"
#include "checksum_core.h"

int bpf_prog(char *imem, char *omem, unsigned long len)
{
    unsigned long sum = checksum_words((const unsigned char *)imem, len);
    for (int i = 0; i < 8; i++)
        omem[i] = (char)(sum >> (8 * i));
    print("checksum done\n");
    return (int)sum;
}
