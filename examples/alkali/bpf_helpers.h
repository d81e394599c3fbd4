/* Helpers of the Alkali firmware (apu-app vm/register.cpp indices), for clang -target bpf. */
#ifndef ALKALI_BPF_HELPERS_H
#define ALKALI_BPF_HELPERS_H

typedef unsigned long u64;
typedef unsigned int u32;
typedef unsigned char u8;

/* Declared as constant function pointers, as the Alkali examples do: clang emits `call N` directly. */
static long (*const print)(const char *msg) = (void *)1;
static long (*const tflite_apu)(char *ibuf, char *obuf, int isize, int osize, int model_size) = (void *)2;
static long (*const tflite_vta)(char *ibuf, char *obuf, int isize, int osize, int model_size) = (void *)3;

/* The Alkali device's buffers (identify: 64 MiB each). The verifier proves every access against them,
 * so firmware bounds its output writes by OUTPUT_BYTES and its input reads by the length in r3. */
#define OUTPUT_BYTES (64ul << 20)

#endif
