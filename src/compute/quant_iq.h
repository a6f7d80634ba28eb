/*
 * quant_iq.h — block layouts of the grid ("IQ") weight types IQ1_S, IQ1_M,
 * IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS and IQ3_S, byte for byte as GGUF stores
 * them, and their scalar reference code (quant_iq1.c, quant_iq2.c,
 * quant_iq3.c). Every one is a 256-element super-block; groups of 8 (IQ1,
 * IQ2) or 4 (IQ3) weights are an index into a codebook (quant_grids.h) times
 * a sign pattern and a scale. All pair with Q8_K activations.
 *
 * The reference's mixes IQ2_M (IQ2_S rows with others), IQ3_M and IQ3_XS
 * (IQ3_S/IQ3_XXS rows with others) need no type of their own.
 */
#ifndef TKV_QUANT_IQ_H
#define TKV_QUANT_IQ_H

#include <stddef.h>
#include <stdint.h>

typedef struct __attribute__((packed)) tkv__block_iq2_xxs {
    uint16_t d; /* fp16 */
    uint16_t qs[32];
} tkv__block_iq2_xxs;

typedef struct __attribute__((packed)) tkv__block_iq2_xs {
    uint16_t d; /* fp16 */
    uint16_t qs[32];
    uint8_t scales[8];
} tkv__block_iq2_xs;

typedef struct __attribute__((packed)) tkv__block_iq2_s {
    uint16_t d; /* fp16 */
    uint8_t qs[64];
    uint8_t qh[8];
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

typedef struct __attribute__((packed)) tkv__block_iq1_s {
    uint16_t d; /* fp16 */
    uint8_t qs[32];
    uint16_t qh[8];
} tkv__block_iq1_s;

/* IQ1_M has no d field: its fp16 scale is spread over the top nibbles of
   the four 16-bit words of scales. */
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

/* ---- IQ3_XXS, IQ3_S (quant_iq3.c) ---------------------------------------- */

/* Expand n elements (n % 256 == 0) at src into floats at y, with the
   reference's float operations (so a token embedding row is its bits). */
void tkv__quant_dequantize_iq3_xxs(const void *src, float *y, size_t n);
void tkv__quant_dequantize_iq3_s(const void *src, float *y, size_t n);

/* Dot product of n weights with n Q8_K activations: exact integer sums per
   sub-block times 2 ls + 1, one float term per super-block (see the layouts
   above). The scalar oracles of the SIMD twins below. */
float tkv__quant_vec_dot_iq3_xxs(size_t n, const void *w, const void *a);
float tkv__quant_vec_dot_iq3_s(size_t n, const void *w, const void *a);

/* The AVX2 twins (kernels_avx2_iq3.c, built only for x86-64 with AVX2, FMA
   and F16C; reached only through the avx2 table), in the reference's lanes. */
float tkv__kernel_dot_iq3_xxs_avx2(size_t n, const void *w, const void *a);
float tkv__kernel_dot_iq3_s_avx2(size_t n, const void *w, const void *a);

#endif
