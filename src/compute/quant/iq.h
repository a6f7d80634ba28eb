/*
 * compute/quant/iq.h — block layouts of the grid ("IQ") weight types IQ1_S, IQ1_M,
 * IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS and IQ3_S, byte for byte as GGUF stores
 * them, and their scalar reference code (compute/quant/iq1.c, compute/quant/iq2.c,
 * compute/quant/iq3.c). Every one is a 256-element super-block; groups of 8 (IQ1,
 * IQ2) or 4 (IQ3) weights are an index into a codebook (compute/quant/grids.h) times
 * a sign pattern and a scale. All pair with Q8_K activations.
 *
 * The reference's mixes IQ2_M (IQ2_S rows with others), IQ3_M and IQ3_XS
 * (IQ3_S/IQ3_XXS rows with others) need no type of their own.
 */
#ifndef TKV_QUANT_IQ_H
#define TKV_QUANT_IQ_H

#include <stddef.h>
#include <stdint.h>

/*
 * The IQ2 types. A super-block of 256 is 8 sub-blocks of 32, each 4 groups
 * of 8; group g (0..31) is elements 8g..8g+7. A group's 8 magnitudes are one
 * codebook entry (byte j of the uint64: element j, each 8, 25 or 43), its
 * signs a byte whose bit j set makes element j negative, and
 *   x = d * (ls + 1/2) / 4 * grid[j] * sign_j,   ls a 4-bit scale.
 * The dot products sum (2 ls + 1) * grid * sign * a in integers and take
 * the 1/8 out once per row, as the reference does.
 *
 * IQ2_XXS: sub-block b is the 8 bytes of qs[4b..4b+3]. Its first 4 bytes
 * are the tkv__iq2xxs_grid indices of its groups 0..3; the little-endian
 * uint32 of the other 4 holds in bits 7l..7l+6 group l's sign index into
 * tkv__iq_signs (7 stored bits, the eighth their parity) and in bits 28-31
 * the sub-block's ls.
 */
typedef struct __attribute__((packed)) tkv__block_iq2_xxs {
    uint16_t d; /* fp16 */
    uint16_t qs[32];
} tkv__block_iq2_xxs;

/*
 * IQ2_XS: qs[g] is group g: bits 0-8 its tkv__iq2xs_grid index, bits 9-15
 * its sign index into tkv__iq_signs. scales[b] holds two ls: the low nibble
 * for the first 16 elements of sub-block b (groups 4b, 4b + 1), the high
 * nibble for the last 16.
 */
typedef struct __attribute__((packed)) tkv__block_iq2_xs {
    uint16_t d; /* fp16 */
    uint16_t qs[32];
    uint8_t scales[8];
} tkv__block_iq2_xs;

/*
 * IQ2_S: a 10-bit tkv__iq2s_grid index per group, low 8 bits in qs[g], bits
 * 8-9 in bits 2l, 2l + 1 of qh[b] for group g = 4b + l. qs[32 + g] is group
 * g's sign byte itself (all 8 bits stored, no parity rule). scales as in
 * IQ2_XS. The reference's IQ2_M files are IQ2_S rows beside others.
 */
typedef struct __attribute__((packed)) tkv__block_iq2_s {
    uint16_t d;      /* fp16 */
    uint8_t qs[64];  /* 32 index low bytes, then 32 sign bytes */
    uint8_t qh[8];   /* index bits 8-9, four groups per byte */
    uint8_t scales[8];
} tkv__block_iq2_s;

/*
 * IQ3_XXS: 256 elements in 8 sub-blocks of 32, each 8 groups of 4. Element
 * 32 b + 4 g + k (b < 8, g < 8, k < 4) is
 *   x = d * (0.5 + ls_b) * 0.5 * grid[qs[8 b + g]] byte k, negated when its
 *       sign bit is set,
 * grid = tkv__iq3xxs_grid. After the 64 index bytes come 8 little-endian
 * uint32 words, word b (bytes 64 + 4 b ..) for sub-block b: its top 4 bits
 * are ls_b, and bits 7 h .. 7 h + 6 (h < 4) index tkv__iq_signs, whose byte
 * holds the signs of groups 2 h and 2 h + 1 (bit 4 (g % 2) + k; the 8th bit
 * is implied: an even number of the 8 is negative). The dot product is
 * d_w d_a / 4 * sum_b (2 ls_b + 1) sumi_b: the reference's integer scale.
 */
typedef struct __attribute__((packed)) tkv__block_iq3_xxs {
    uint16_t d; /* fp16 */
    uint8_t qs[96]; /* 64 grid indices, then 8 words of signs and scale */
} tkv__block_iq3_xxs;

/*
 * IQ3_S: 256 elements in 8 sub-blocks of 32, each 8 groups of 4. Element
 * 32 b + 4 g + k (b < 8, g < 8, k < 4) is
 *   x = d * (1 + 2 ls_b) * grid[qs[8 b + g] | bit g of qh[b] << 8] byte k,
 *       negated when bit 4 (g % 2) + k of signs[4 b + g / 2] is set,
 * grid = tkv__iq3s_grid (9-bit indices); ls_b is the low nibble of
 * scales[b / 2] for even b, the high one for odd b. Signs are free here:
 * one bit per element, no parity rule.
 */
typedef struct __attribute__((packed)) tkv__block_iq3_s {
    uint16_t d;         /* fp16 */
    uint8_t qs[64];     /* low 8 bits of the grid indices */
    uint8_t qh[8];      /* their 9th bits, one byte per sub-block */
    uint8_t signs[32];  /* one bit per element, 4 bytes per sub-block */
    uint8_t scales[4];  /* 4-bit sub-block scales, two per byte */
} tkv__block_iq3_s;

/*
 * IQ1_S: 256 elements in 8 sub-blocks of 32, each 4 groups of 8; group g
 * (0..31) is the 11-bit index into tkv__iq1s_grid whose low 8 bits are
 * qs[g] and high 3 bits are bits 3l..3l+2 of qh[g / 4] (l = g % 4). The top
 * nibble of qh[b] belongs to sub-block b: bits 12-14 a scale s, bit 15 the
 * sign of the shift, so that
 *   x = d * (2s + 1) * (grid[k] + delta),  delta = -0.125 if bit 15 else +0.125.
 * The shift lets a sub-block lean to one side of zero, which the symmetric
 * ternary grid alone cannot; no dequantized value is 0.
 */
typedef struct __attribute__((packed)) tkv__block_iq1_s {
    uint16_t d; /* fp16 */
    uint8_t qs[32];
    uint16_t qh[8];
} tkv__block_iq1_s;

/*
 * IQ1_M: 256 elements in 8 sub-blocks of 32, each 4 groups of 8, as IQ1_S
 * but with a scale per 16 elements and a shift per group. Group g's index:
 * low 8 bits qs[g], high 3 bits bits 0-2 of qh[g / 2] for even g and bits
 * 4-6 for odd g; bit 3 (even g) or bit 7 (odd g) is the sign of its shift.
 * Read scales as four little-endian 16-bit words w[0..3]: sub-block b's
 * scale for its first 16 elements is bits 6(b % 2)..+2 of w[b / 2], for its
 * last 16 bits 6(b % 2) + 3..+2. There is no d field: the four top nibbles
 * (bits 12-15 of w[j] = bits 4j..4j+3) assemble the fp16 d. Then
 *   x = d * (2s + 1) * (grid[k] + delta),  delta = -0.125 if the sign bit is set else +0.125.
 */
typedef struct __attribute__((packed)) tkv__block_iq1_m {
    uint8_t qs[32];
    uint8_t qh[16];
    uint8_t scales[8];
} tkv__block_iq1_m;

_Static_assert(sizeof(tkv__block_iq2_xxs) == 66, "IQ2_XXS block");
_Static_assert(sizeof(tkv__block_iq2_xs) == 74, "IQ2_XS block");
_Static_assert(sizeof(tkv__block_iq2_s) == 82, "IQ2_S block");
_Static_assert(sizeof(tkv__block_iq3_xxs) == 98, "IQ3_XXS block");
_Static_assert(sizeof(tkv__block_iq3_s) == 110, "IQ3_S block");
_Static_assert(sizeof(tkv__block_iq1_s) == 50, "IQ1_S block");
_Static_assert(sizeof(tkv__block_iq1_m) == 56, "IQ1_M block");

/*
 * Scalar reference code (compute/quant/iq2.c), the oracles of the SIMD kernels.
 * Dequantize n elements (a multiple of 256) at src into y; dot a weight row
 * with a Q8_K activation row (quants in -127..127):
 *   0.125 * sum over super-blocks of (d_w * d_a) * sum((2 ls + 1) * grid * sign * q).
 */
void tkv__quant_dequantize_iq2_xxs(const void *src, float *y, size_t n);
void tkv__quant_dequantize_iq2_xs(const void *src, float *y, size_t n);
void tkv__quant_dequantize_iq2_s(const void *src, float *y, size_t n);
float tkv__quant_vec_dot_iq2_xxs(size_t n, const void *w, const void *a);
float tkv__quant_vec_dot_iq2_xs(size_t n, const void *w, const void *a);
float tkv__quant_vec_dot_iq2_s(size_t n, const void *w, const void *a);

/* The shift of IQ1 grid points (both types): an exact power of two, so the
   dot products can keep it out of their integer sums and apply it once. */
#define TKV__IQ1_DELTA 0.125f

/* The fp16 d of an IQ1_M block, from the top nibbles of its scale words. */
static inline uint16_t tkv__iq1_m_d(const tkv__block_iq1_m *x) {
    uint16_t h = 0;
    for (int j = 0; j < 4; j++) h |= (uint16_t)((x->scales[2 * j + 1] >> 4) << (4 * j));
    return h;
}

/*
 * Scalar reference code (compute/quant/iq1.c), the oracles of the SIMD kernels.
 * Dequantize n elements (a multiple of 256) to floats; the dot products of
 * an n-element row with Q8_K activations add per super-block
 *   IQ1_S: d_w * d_a * (sum_b ls_b * sumi_b + 0.125 * sum_b ls_b * sign_b * bsum_b)
 *   IQ1_M: d_w * d_a * (sum_h ls_h * sumi_h + 0.125 * sum_g ls_g * sign_g * asum_g)
 * (ls = 2s + 1; sumi the integer products with the grid points; bsum/asum
 * the activations' integer sums over the sub-block or group; h the halves of
 * 16, g the groups of 8), the integer parts exact.
 */
void tkv__quant_dequant_iq1_s(const void *src, float *y, size_t n);
void tkv__quant_dequant_iq1_m(const void *src, float *y, size_t n);
float tkv__quant_vec_dot_iq1_s(size_t n, const void *w, const void *a);
float tkv__quant_vec_dot_iq1_m(size_t n, const void *w, const void *a);

/* Their AVX2 twins (compute/x86/avx2/dot_iq1.c; x86-64 builds only, called only
   through the avx2 and avx512 kernel tables). */
float tkv__dot_iq1_s_avx2(size_t n, const void *w, const void *a);
float tkv__dot_iq1_m_avx2(size_t n, const void *w, const void *a);
/* ---- IQ3_XXS, IQ3_S (compute/quant/iq3.c) ---------------------------------------- */

/* Expand n elements (n % 256 == 0) at src into floats at y, with the
   reference's float operations (so a token embedding row is its bits). */
void tkv__quant_dequantize_iq3_xxs(const void *src, float *y, size_t n);
void tkv__quant_dequantize_iq3_s(const void *src, float *y, size_t n);

/* Dot product of n weights with n Q8_K activations: exact integer sums per
   sub-block times 2 ls + 1, one float term per super-block (see the layouts
   above). The scalar oracles of the SIMD twins below. */
float tkv__quant_vec_dot_iq3_xxs(size_t n, const void *w, const void *a);
float tkv__quant_vec_dot_iq3_s(size_t n, const void *w, const void *a);

/* The AVX2 twins (compute/x86/avx2/dot_iq3.c, built only for x86-64 with AVX2, FMA
   and F16C; reached only through the avx2 table), in the reference's lanes. */
float tkv__kernel_dot_iq3_xxs_avx2(size_t n, const void *w, const void *a);
float tkv__kernel_dot_iq3_s_avx2(size_t n, const void *w, const void *a);

#endif
