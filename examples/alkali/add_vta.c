/* ADD firmware: run the ADD model on the VTA delegate and check the sums.
 *
 * Input buffer: the .tflite model (MODEL_SIZE bytes) followed by the two int8 input vectors.
 * Output buffer: the model's int8 output (N bytes). Returns the index of the first output that
 * differs from the expected values, or -1 when all match (entry ABI of the Alkali uBPF fork:
 * r1 = input, r2 = output, r3 = input length). An input shorter than the model and the vectors: -2.
 */
#include "bpf_helpers.h"

#define MODEL_SIZE 1024
#define N 4

/* The expected sums {7, 12, 4, 5}, one byte each from the low end: a constant, not a table, so no
 * read walks .rodata with an index the verifier cannot bound. */
#define EXPECTED 0x05040c07u

int bpf_prog(char *imem, char *omem, unsigned long len)
{
    print("ADD on VTA: running the model\n"); /* first: string 0, which the fork's relocations repeat */
    /* the kernel verifier's way: prove the helper's input span (model + vectors) lies within len */
    if (len < MODEL_SIZE + 2 * N) {
        print("ADD on VTA: input shorter than the model and its two vectors\n");
        return -2;
    }
    tflite_vta(imem, omem, 2 * N, N, MODEL_SIZE);
    for (int i = 0; i < N; i++) {
        if (omem[i] != (char)(EXPECTED >> (8 * i))) {
            print("ADD on VTA: output differs from the expected sums\n");
            return i;
        }
    }
    print("ADD on VTA: all outputs match\n");
    return -1;
}
