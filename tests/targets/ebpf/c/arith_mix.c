/* Arithmetic mix for the differential test: the same C built for BPF (-mcpu=v1/v2/v3) and natively.
 * Reads NIN 64-bit inputs, writes NOUT 64-bit results; every operation C defines for these types
 * (unsigned division by non-zero divisors: clang-14 has no signed division before BPF v4;
 * shifts masked below the width). */
typedef unsigned long u64;
typedef long s64;
typedef unsigned int u32;
typedef int s32;
typedef unsigned short u16;
typedef short s16;
typedef unsigned char u8;
typedef signed char s8;

#define NIN 4
#define NOUT 24

#ifdef NATIVE
#define ENTRY arith_native
#else
#define ENTRY bpf_prog
#endif

int ENTRY(char *imem, char *omem)
{
    const u64 *in = (const u64 *)imem;
    u64 *out = (u64 *)omem;
    u64 a = in[0], b = in[1], c = in[2], d = in[3];
    u32 a32 = (u32)a, b32 = (u32)b;
    s64 sa = (s64)a, sb = (s64)(b | 1);
    s32 sa32 = (s32)a32, sb32 = (s32)(b32 | 1);
    out[0] = a + b * c - d;
    out[1] = a / (b | 1) + a % (c | 1);
    out[2] = (u64)(a32 / (b32 | 1)) ^ (u64)(a32 % (u32)(c | 1));
    out[3] = (u64)(sa < 0 ? -sa : sa) / 7;
    out[4] = (u64)(sb * sa) % 1000003;
    out[5] = (u64)(s64)(sa32 * sb32);
    out[6] = (u64)(s64)(s32)(a32 + b32) + (u64)(s64)sb32;
    out[7] = a << (b & 63) | a >> (c & 63);
    out[8] = (u64)(sa >> (d & 63));
    out[9] = (u64)(a32 << (b & 31)) + (u64)(a32 >> (c & 31)) + (u64)(u32)(sa32 >> (d & 31));
    out[10] = (u64)(s64)(s8)a + (u64)(s64)(s16)b + (u64)(s64)(s32)c;
    out[11] = (u64)(u8)a * (u64)(u16)b + (u64)(u32)c;
    out[12] = (u64)(a32 * b32 + (u32)c);
    out[13] = (u64)-(s64)a ^ (u64)(u32)-(s32)a32;
    out[14] = __builtin_bswap64(a) + __builtin_bswap32(b32) + __builtin_bswap16((u16)c);
    out[15] = (a < b) + 2 * (sa < sb) + 4 * (a32 < b32) + 8 * (sa32 < sb32) + 16 * (a == c) + 32 * ((a & b) != 0);
    out[16] = (sa > (s64)c) ? a - c : c - a;
    out[17] = (sa32 >= (s32)d) ? (u64)(u32)(a32 - (u32)d) : (u64)(s64)(s32)(d - a32);
    u64 acc = 0;
    for (u64 i = 0; i < (d & 15); i++)
        acc = acc * 31 + (a >> i) + (b ^ i);
    out[18] = acc;
    out[19] = (u64)(s64)(s8)(a >> 8) * (u64)(s64)(s16)(b >> 16);
    out[20] = (a >> 7) * 9 + (b << 3) - (c >> 60);
    out[21] = (u64)(a32 > 0x7fffffffu) | (u64)(sa32 < -5) << 1 | (u64)(b >= c) << 2 | (u64)(sb <= (s64)d) << 3;
    out[22] = (a & 0xffff0000ffff0000ul) | (b & 0x0000ffff0000fffful);
    out[23] = (u64)(a32 ^ 0x80000000u) / 3 + (c & 0xffffffff00000000ul) / (d | 0x100000001ul);
    return (int)(out[0] ^ out[18]);
}
