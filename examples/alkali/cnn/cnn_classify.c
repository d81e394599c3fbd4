/* CNN firmware: classify several images with one int8 model on the VTA delegate.
 *
 * Input buffer: the .tflite model, then COUNT images of IMAGE bytes each (the seed's helper ABI reads
 * the model at the start of the buffer and the model's input right after it, so image k is first
 * copied over image 0). Output buffer: COUNT results of OUT bytes each.
 * Arguments (the start command's list, read with helper 4 get_args): model bytes, COUNT, IMAGE, OUT,
 * each a 4-byte value. Returns COUNT, or a negative number when the arguments do not fit the input.
 */
#include "../bpf_helpers.h"

/* npukit's helper 4: copies the argument list (u32 entry length incl. header, value) to dst. */
static long (*const get_args)(char *dst, int max) = (void *)4;

int bpf_prog(char *imem, char *omem, unsigned long isize)
{
    u32 a[8];
    long n = get_args((char *)a, sizeof(a));

    if (n < (long)sizeof(a)) {
        print("cnn: expected 4 arguments (model bytes, count, image bytes, output bytes)\n");
        return -1;
    }
    u32 model = a[1], count = a[3], image = a[5], out = a[7];
    if ((unsigned long)model + (unsigned long)count * image > isize) {
        print("cnn: the input buffer is shorter than the model and images the arguments describe\n");
        return -2;
    }
    print("cnn: classifying\n");
    /* Each access is checked right before it against isize (r3), the way the kernel verifier wants:
     * the asm barrier keeps clang from dropping a check it thinks the test above implies. */
    for (u32 k = 0; k < count; k++) {
        if (k) {
            for (u32 i = 0; i < image; i++) {
                unsigned long to = (unsigned long)model + i;
                unsigned long from = to + (unsigned long)k * image;
                __asm__ volatile("" : "+r"(to), "+r"(from));
                if (from >= isize || to >= isize)
                    return -2;
                ((volatile char *)imem)[to] = imem[from];
            }
        }
        unsigned long span = model, at = (unsigned long)k * out, osize = out;
        __asm__ volatile("" : "+r"(span), "+r"(at), "+r"(osize));
        /* each half of the 64 MiB output bound on its own: their sum then provably fits */
        if (span > isize || at > OUTPUT_BYTES / 2 || osize > OUTPUT_BYTES / 2)
            return -2;
        tflite_vta(imem, omem + at, image, osize, span);
    }
    print("cnn: done\n");
    return count;
}
