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

#endif
