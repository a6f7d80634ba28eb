/*
 * compute/quant/quant.h — number formats of weights and activations: fp16/bf16, the block
 * layouts of the quantized GGUF types, and the scalar reference code over
 * them (dequantize, quantize activations, vec_dot).
 *
 * Everything here is scalar and exact where exactness is defined: it is the
 * oracle the SIMD kernels (the level folders of compute/x86/) are tested against.
 *
 * Pairing of a weight type with the type its activations are quantized to
 * before a dot product (the "vec_dot type"; the pairs llama.cpp's CPU backend
 * uses, so results match it closely):
 *
 *   weight  F32  F16  BF16  Q8_0  Q4_0  Q5_0  Q4_1  Q5_1  Q4_K  Q5_K  Q6_K
 *   acts    F32  F16  BF16  Q8_0  Q8_0  Q8_0  Q8_1  Q8_1  Q8_K  Q8_K  Q8_K
 *
 *   weight  Q2_K  Q3_K  IQ4_NL  IQ4_XS  MXFP4  TQ1_0  TQ2_0  IQ1_S  IQ1_M
 *   acts    Q8_K  Q8_K  Q8_0    Q8_K    Q8_0   Q8_K   Q8_K   Q8_K   Q8_K
 *
 * (The grid types' layouts and scalar code: compute/quant/iq.h.)
 *
 *   weight  IQ2_XXS  IQ2_XS  IQ2_S   (layouts and code: compute/quant/iq.h)
 *   acts    Q8_K     Q8_K    Q8_K
 *
 * Block layouts are declared as packed structs, byte for byte as GGUF stores
 * them (little-endian; fp16 fields are IEEE binary16 bits). Packed structs
 * have alignment 1, so a block may sit at any address in a mapped file.
 */
#ifndef TKV_QUANT_H
#define TKV_QUANT_H

#include "tokenkv_types.h"

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* GGUF is little-endian, and so is every host this code reads blocks on. */
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "tokenkv's quantized kernels assume a little-endian host"
#endif

/* Elements per block: the 32-element formats and the 256-element K formats. */
#define TKV__QK 32
#define TKV__QK_K 256

/*
 * The block layouts. In every 32-element format with 4-bit quants, byte j of
 * qs holds element j in its low nibble and element j + 16 in its high nibble.
 */

/* Q4_0: x = d * (q - 8), q in 0..15. */
typedef struct __attribute__((packed)) tkv__block_q4_0 {
    uint16_t d;      /* fp16 scale */
    uint8_t qs[16];  /* nibbles */
} tkv__block_q4_0;

/* IQ4_NL: x = d * tkv__iq4nl_values[q], q in 0..15: Q4_0's layout with a
   non-linear codebook in place of q - 8. */
typedef struct __attribute__((packed)) tkv__block_iq4_nl {
    uint16_t d;      /* fp16 scale */
    uint8_t qs[16];  /* nibbles: codebook indices */
} tkv__block_iq4_nl;

/*
 * Q2_K: 256 elements in 16 sub-blocks of 16; x = d * sc * q - dmin * mn
 * with q in 0..3, sc and mn the low and high nibbles of scales[sub].
 * Element 128 c + 32 j + l (chunk c < 2, j < 4, l < 32) is bits 2j, 2j + 1 of
 * qs[32 c + l]; its sub-block is 8 c + 2 j + l / 16.
 */
typedef struct __attribute__((packed)) tkv__block_q2_K {
    uint8_t scales[16]; /* per sub-block: sc (low nibble), mn (high nibble) */
    uint8_t qs[64];     /* 2-bit quants */
    uint16_t d, dmin;   /* fp16 */
} tkv__block_q2_K;

/*
 * Q3_K: 256 elements in 16 sub-blocks of 16; x = d * (sc - 32) * q with q =
 * (2 low bits, as Q2_K's) - (4 unless the element's bit of hmask is set):
 * element 128 c + 32 j + l has bit 4 c + j of hmask[l]. The 6-bit scales: the
 * low nibbles of scales[0..7] (sub-blocks 0-7, then 8-15 in the high
 * nibbles), the two high bits in scales[8..11] (see tkv__q3_K_scales).
 */
typedef struct __attribute__((packed)) tkv__block_q3_K {
    uint8_t hmask[32];
    uint8_t qs[64];
    uint8_t scales[12];
    uint16_t d;         /* fp16 */
} tkv__block_q3_K;

/* The 16 sub-block scales of a Q3_K block, sc - 32 (-32..31). */
static inline void tkv__q3_K_scales(const uint8_t s12[12], int8_t out[16]) {
    for (int b = 0; b < 16; b++) {
        const int lo = (s12[b % 8] >> (4 * (b / 8))) & 0x0f;
        const int hi = (s12[8 + b % 4] >> (2 * (b / 4))) & 3;
        out[b] = (int8_t)((lo | hi << 4) - 32);
    }
}

/*
 * TQ2_0 (ternary): 256 elements, x = d * (q - 1), q in 0..2; element
 * 128 c + 32 j + l has bits 2j, 2j + 1 of qs[32 c + l] (Q2_K's order).
 */
typedef struct __attribute__((packed)) tkv__block_tq2_0 {
    uint8_t qs[64];
    uint16_t d; /* fp16 */
} tkv__block_tq2_0;

/*
 * TQ1_0 (ternary): 256 elements, x = d * (q - 1), q in 0..2, five base-3
 * digits per byte (a byte b holds digit k as ((uint8_t)(b * 3^k) * 3) >> 8):
 * elements 32 k + m (k < 5, m < 32) are digit k of qs[m]; 160 + 16 k + m
 * (m < 16) digit k of qs[32 + m]; 240 + 4 k + m (k < 4, m < 4) digit k of qh[m].
 */
typedef struct __attribute__((packed)) tkv__block_tq1_0 {
    uint8_t qs[48];
    uint8_t qh[4];
    uint16_t d; /* fp16 */
} tkv__block_tq1_0;

/*
 * IQ4_XS: 256 elements in 8 sub-blocks of 32; sub-block b has the 6-bit
 * scale ls = (low 4 bits: nibble b % 2 of scales_l[b / 2]) | (bits 2b, 2b + 1
 * of scales_h) << 4, and x = d * (ls - 32) * tkv__iq4nl_values[q], with the
 * nibbles of its 16 bytes of qs laid out as Q4_0's.
 */
typedef struct __attribute__((packed)) tkv__block_iq4_xs {
    uint16_t d;          /* fp16 scale */
    uint16_t scales_h;   /* the two high bits of each sub-block scale */
    uint8_t scales_l[4]; /* the four low bits, two sub-blocks per byte */
    uint8_t qs[128];     /* nibbles: codebook indices */
} tkv__block_iq4_xs;

/* Sub-block b's scale of an IQ4_XS block, ls - 32 (-32..31). */
static inline int tkv__iq4_xs_scale(const tkv__block_iq4_xs *x, int b) {
    return (((x->scales_l[b / 2] >> 4 * (b % 2)) & 0x0f) | (((x->scales_h >> 2 * b) & 3) << 4)) - 32;
}

/* The 16 values of the IQ4_NL codebook (the GGUF format's, in index order). */
extern const int8_t tkv__iq4nl_values[16];

/* MXFP4: x = 2^(e - 128) * tkv__mxfp4_values[q]: the E2M1 values doubled
   (so integers), with the E8M0 exponent halving them back; nibbles as Q4_0. */
typedef struct __attribute__((packed)) tkv__block_mxfp4 {
    uint8_t e;       /* E8M0 exponent */
    uint8_t qs[16];  /* nibbles: E2M1 codes */
} tkv__block_mxfp4;

extern const int8_t tkv__mxfp4_values[16];

/* The integer sum of 32 codebook products: book[q] times y for the 16
   bytes of nibbles qs (elements j in the low nibbles, j + 16 in the high),
   shared by IQ4_NL, IQ4_XS's sub-blocks and MXFP4. */
static inline int tkv__book4_sum(const int8_t book[16], const uint8_t qs[16], const int8_t y[32]) {
    int s = 0;
    for (int j = 0; j < 16; j++) s += book[qs[j] & 0x0f] * y[j] + book[qs[j] >> 4] * y[j + 16];
    return s;
}

/* 2^(e - 128) as a float (e < 2: the subnormals 2^-128 and 2^-127). */
static inline float tkv__e8m0_half(uint8_t e) {
    const uint32_t bits = e < 2 ? 0x00200000u << e : (uint32_t)(e - 1) << 23;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

/* Q4_1: x = d * q + m, q in 0..15. */
typedef struct __attribute__((packed)) tkv__block_q4_1 {
    uint16_t d;      /* fp16 scale */
    uint16_t m;      /* fp16 offset (the block minimum) */
    uint8_t qs[16];  /* nibbles */
} tkv__block_q4_1;

/*
 * Q5_0: x = d * (q - 16), q in 0..31: low 4 bits in qs (as Q4_0), bit 4 of
 * element j is bit j of qh read as a little-endian uint32.
 */
typedef struct __attribute__((packed)) tkv__block_q5_0 {
    uint16_t d;      /* fp16 scale */
    uint8_t qh[4];   /* fifth bits, element j at bit j */
    uint8_t qs[16];  /* low nibbles */
} tkv__block_q5_0;

/* Q5_1: x = d * q + m, q in 0..31, bits as Q5_0. */
typedef struct __attribute__((packed)) tkv__block_q5_1 {
    uint16_t d;      /* fp16 scale */
    uint16_t m;      /* fp16 offset */
    uint8_t qh[4];   /* fifth bits */
    uint8_t qs[16];  /* low nibbles */
} tkv__block_q5_1;

/* Q8_0: x = d * q, q in -128..127 (activations: -127..127). */
typedef struct __attribute__((packed)) tkv__block_q8_0 {
    uint16_t d;      /* fp16 scale */
    int8_t qs[32];
} tkv__block_q8_0;

/* Q8_1 (activations only): as Q8_0, plus s = d * sum(qs) as fp16. */
typedef struct __attribute__((packed)) tkv__block_q8_1 {
    uint16_t d;      /* fp16 scale */
    uint16_t s;      /* fp16 d * sum(qs) */
    int8_t qs[32];
} tkv__block_q8_1;

/*
 * Q4_K: 256 elements in 8 groups of 32. Group g has a 6-bit scale sc[g] and
 * a 6-bit min mn[g] packed in `scales` (see tkv__quant_k4_scale_min):
 * x = d * sc[g] * q - dmin * mn[g], q in 0..15. The quants come in 4 chunks
 * of 32 bytes: chunk c holds group 2c in its low nibbles and group 2c + 1 in
 * its high nibbles (byte l of the chunk: elements 64c + l and 64c + 32 + l).
 */
typedef struct __attribute__((packed)) tkv__block_q4_K {
    uint16_t d;          /* fp16 super-scale of the scales */
    uint16_t dmin;       /* fp16 super-scale of the mins */
    uint8_t scales[12];  /* 8 scales and 8 mins, 6 bits each */
    uint8_t qs[128];     /* nibbles */
} tkv__block_q4_K;

/*
 * Q5_K: as Q4_K with q in 0..31; bit 4 of element 64c + l is bit 2c of
 * qh[l], of element 64c + 32 + l bit 2c + 1 of qh[l] (l in 0..31).
 */
typedef struct __attribute__((packed)) tkv__block_q5_K {
    uint16_t d;          /* fp16 super-scale of the scales */
    uint16_t dmin;       /* fp16 super-scale of the mins */
    uint8_t scales[12];  /* as Q4_K */
    uint8_t qh[32];      /* fifth bits */
    uint8_t qs[128];     /* low nibbles */
} tkv__block_q5_K;

/*
 * Q6_K: 256 elements in 16 groups of 16 (element e is in group e / 16):
 * x = d * scales[e / 16] * (q - 32), q in 0..63. Two halves of 128
 * elements; half h uses ql[64h..64h+63] and qh[32h..32h+31]. For l in 0..31
 * and element offsets within the half:
 *   l      : low nibble of ql[l],      bits 0-1 of qh[l]
 *   l + 32 : low nibble of ql[l + 32], bits 2-3 of qh[l]
 *   l + 64 : high nibble of ql[l],     bits 4-5 of qh[l]
 *   l + 96 : high nibble of ql[l + 32], bits 6-7 of qh[l]
 * (the 2 qh bits are bits 4-5 of q).
 */
typedef struct __attribute__((packed)) tkv__block_q6_K {
    uint8_t ql[128];    /* low 4 bits */
    uint8_t qh[64];     /* high 2 bits */
    int8_t scales[16];  /* signed 8-bit group scales */
    uint16_t d;         /* fp16 super-scale */
} tkv__block_q6_K;

/*
 * Q8_K (activations only): x = d * q with a float d, plus bsums[g] = the sum
 * of qs[16g..16g+15]. Following ggml, d carries the sign of the element of
 * largest magnitude negated (q = round(-127 * x / max)), so that element is
 * always -127.
 */
typedef struct __attribute__((packed)) tkv__block_q8_K {
    float d;
    int8_t qs[256];
    int16_t bsums[16];
} tkv__block_q8_K;

_Static_assert(sizeof(tkv__block_q4_0) == 18, "Q4_0 block");
_Static_assert(sizeof(tkv__block_iq4_nl) == 18, "IQ4_NL block");
_Static_assert(sizeof(tkv__block_mxfp4) == 17, "MXFP4 block");
_Static_assert(sizeof(tkv__block_iq4_xs) == 136, "IQ4_XS block");
_Static_assert(sizeof(tkv__block_q2_K) == 84, "Q2_K block");
_Static_assert(sizeof(tkv__block_q3_K) == 110, "Q3_K block");
_Static_assert(sizeof(tkv__block_tq2_0) == 66, "TQ2_0 block");
_Static_assert(sizeof(tkv__block_tq1_0) == 54, "TQ1_0 block");
_Static_assert(sizeof(tkv__block_q4_1) == 20, "Q4_1 block");
_Static_assert(sizeof(tkv__block_q5_0) == 22, "Q5_0 block");
_Static_assert(sizeof(tkv__block_q5_1) == 24, "Q5_1 block");
_Static_assert(sizeof(tkv__block_q8_0) == 34, "Q8_0 block");
_Static_assert(sizeof(tkv__block_q8_1) == 36, "Q8_1 block");
_Static_assert(sizeof(tkv__block_q4_K) == 144, "Q4_K block");
_Static_assert(sizeof(tkv__block_q5_K) == 176, "Q5_K block");
_Static_assert(sizeof(tkv__block_q6_K) == 210, "Q6_K block");
_Static_assert(sizeof(tkv__block_q8_K) == 292, "Q8_K block");

/* ---- fp16 and bf16 ------------------------------------------------------ */

/* IEEE binary16 bits to float; exact for every pattern (NaN payloads kept). */
static inline float tkv__quant_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t man = h & 0x3ffu;
    uint32_t bits;
    if (exp == 0x1f) {
        bits = sign | 0x7f800000u | (man << 13);
    } else if (exp == 0) {
        /* zero or subnormal: man * 2^-24 is exact in float */
        float f = (float)man * 0x1p-24f;
        memcpy(&bits, &f, 4);
        bits |= sign;
    } else {
        bits = sign | ((exp + 112u) << 23) | (man << 13);
    }
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

/*
 * Float to binary16 bits, rounding to nearest, ties to even (as F16C's
 * vcvtps2ph with rounding mode 0): values from 65520 up become infinity,
 * results below 2^-14 become subnormals or zero, NaNs stay NaN (quiet, top
 * payload bits kept).
 */
static inline uint16_t tkv__quant_f32_to_f16(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000u;
    uint32_t ax = x & 0x7fffffffu;
    if (ax > 0x7f800000u) return (uint16_t)(sign | 0x7e00u | ((ax >> 13) & 0x3ffu));
    if (ax >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* >= 65520: inf */
    if (ax >= 0x38800000u) {                                  /* normal result */
        uint32_t h = (ax >> 13) - (112u << 10);
        uint32_t rem = ax & 0x1fffu;
        if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) h++; /* may carry into the exponent: fine */
        return (uint16_t)(sign | h);
    }
    if (ax <= 0x33000000u) return (uint16_t)sign; /* <= 2^-25: rounds to zero (tie goes to even 0) */
    /* subnormal result: units of 2^-24 */
    uint32_t e = ax >> 23; /* 102..112 */
    uint32_t m = (ax & 0x7fffffu) | 0x800000u;
    uint32_t shift = 126u - e; /* 14..24 */
    uint32_t h = m >> shift;
    uint32_t rem = m & ((1u << shift) - 1u);
    uint32_t half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (h & 1u))) h++;
    return (uint16_t)(sign | h);
}

/* bfloat16 bits to float (exact). */
static inline float tkv__quant_bf16_to_f32(uint16_t h) {
    uint32_t bits = (uint32_t)h << 16;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

/* Float to bfloat16 bits, round to nearest even; NaNs stay NaN (quieted). */
static inline uint16_t tkv__quant_f32_to_bf16(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40u);
    return (uint16_t)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

/*
 * The 6-bit scale and min of group j (0..7) of a Q4_K/Q5_K block: groups
 * 0-3 keep theirs in the low 6 bits of bytes j and j + 4; groups 4-7 have
 * their low 4 bits in the nibbles of byte j + 4 and their top 2 bits in the
 * top 2 bits of bytes j - 4 (scale) and j (min).
 */
static inline void tkv__quant_k4_scale_min(int j, const uint8_t *scales, uint8_t *sc, uint8_t *mn) {
    if (j < 4) {
        *sc = scales[j] & 63;
        *mn = scales[j + 4] & 63;
    } else {
        *sc = (uint8_t)((scales[j + 4] & 0x0f) | ((scales[j - 4] >> 6) << 4));
        *mn = (uint8_t)((scales[j + 4] >> 4) | ((scales[j] >> 6) << 4));
    }
}

/*
 * All 8 scales and 8 mins of a Q4_K/Q5_K block at once: out[0..7] are the
 * scales, out[8..15] the mins (same values as tkv__quant_k4_scale_min).
 */
static inline void tkv__quant_k4_unpack(const uint8_t scales[12], uint8_t out[16]) {
    /* u[0..2] = the 12 bytes; rebuilt into 16 bytes: scales 0-7, mins 0-7 */
    uint32_t u[4];
    memcpy(u, scales, 12);
    const uint32_t low6 = 0x3f3f3f3fu, low4 = 0x0f0f0f0fu, low2 = 0x03030303u;
    uint32_t mins_lo = u[1] & low6;                                          /* mins 0-3 */
    uint32_t mins_hi = ((u[2] >> 4) & low4) | (((u[1] >> 6) & low2) << 4);   /* mins 4-7 */
    uint32_t sc_hi = (u[2] & low4) | (((u[0] >> 6) & low2) << 4);            /* scales 4-7 */
    uint32_t sc_lo = u[0] & low6;                                            /* scales 0-3 */
    u[0] = sc_lo;
    u[1] = sc_hi;
    u[2] = mins_lo;
    u[3] = mins_hi;
    memcpy(out, u, 16);
}

/* ---- type facts --------------------------------------------------------- */

/* True when this module can dequantize and vec_dot the weight type. */
int tkv__quant_supported(tkv_type type);

/*
 * The activation type paired with weight type `type` (table above), or
 * TKV_TYPE_COUNT when the weight type is not supported.
 */
tkv_type tkv__quant_vec_dot_type(tkv_type type);

/* Elements per block (1 for F32/F16/BF16); 0 for an unknown type. */
size_t tkv__quant_block_elems(tkv_type type);

/*
 * Bytes of a row of n elements of `type` (weights or activation types:
 * Q8_1 and Q8_K included). Precondition: n % block_elems == 0.
 * 0 for an unknown type.
 */
size_t tkv__quant_row_size(tkv_type type, size_t n);

/* ---- dequantization (scalar) -------------------------------------------- */

/*
 * Expand n elements of `type` at src into floats at y (n floats).
 * Supported: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K,
 * Q5_K, Q6_K, IQ4_NL, IQ4_XS, MXFP4, TQ1_0, TQ2_0, IQ1_S, IQ1_M, IQ2_XXS,
 * IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S (quant_iq*.c), and the activation types Q8_1 (x = d * q; s is
 * not used) and Q8_K. Preconditions: n % block_elems == 0 and a supported type
 * (asserted). src may be at any address; y must not overlap it.
 */
void tkv__quant_dequantize_row(tkv_type type, const void *src, float *y, size_t n);

/* ---- activation quantization (scalar) ------------------------------------ */

/*
 * Quantize n floats at x to the activation type `vdtype` (F32: copy, F16,
 * BF16, Q8_0, Q8_1, Q8_K) at y (tkv__quant_row_size(vdtype, n) bytes), the
 * way ggml's x86 CPU backend does:
 *   Q8_0: per block, amax = max |x|, d = amax / 127 stored as fp16,
 *         q = round-half-even(x * (127 / amax)) (0 when amax is 0).
 *   Q8_1: as Q8_0, and s = fp16(d * sum(q)).
 *   Q8_K: max = the first element of largest magnitude; iscale = -127 / max,
 *         q = min(127, round-half-even(iscale * x)), d = 1 / iscale (float),
 *         bsums = sums of 16 quants; all zero when the block is all zero.
 * Every q lies in -127..127 (the SIMD dot products rely on that).
 * Preconditions: n % block_elems == 0; finite inputs (NaN/inf give
 * unspecified quants, never undefined behaviour).
 */
void tkv__quant_quantize_row(tkv_type vdtype, const float *x, void *y, size_t n);

/*
 * Quantize n floats (a multiple of 32) into the 32-element block formats
 * Q8_0, Q4_0, Q4_1, Q5_0, Q5_1 or IQ4_NL (compute/quant/blocks.c): the rounding of
 * the reference's scalar weight quantizers (Q8_0 rounds half away from zero
 * here, unlike the activation quantizer above). What a quantized KV cache
 * stores, and what the tools write for weights of these types.
 */
void tkv__quant_quantize_block_row(tkv_type type, const float *x, void *y, size_t n);

/* The element of largest magnitude among x[0..n), with its sign (the first one on ties). */
float tkv__quant_signed_absmax(const float *x, int n);

/* The same, one function per type (these are the scalar kernel entries). */
void tkv__quant_quantize_f32(const float *x, void *y, size_t n);
void tkv__quant_quantize_f16(const float *x, void *y, size_t n);
void tkv__quant_quantize_bf16(const float *x, void *y, size_t n);
void tkv__quant_quantize_q8_0(const float *x, void *y, size_t n);
void tkv__quant_quantize_q8_1(const float *x, void *y, size_t n);
void tkv__quant_quantize_q8_K(const float *x, void *y, size_t n);

/* ---- dot products (scalar) ------------------------------------------------ */

/*
 * Dot product of a weight row w (n elements of the weight type) with an
 * activation row a (n elements quantized to the paired vec_dot type).
 * Integer partial sums are exact; per block the result adds
 *   Q4_0, IQ4_NL, MXFP4: fmaf((float)sumi, d_w * d_a, s): the order every
 *                   level keeps, bit for bit (sumi = sum((q - 8) * y),
 *                   IQ4_NL's and MXFP4's sum(values[q] * y), exact; d_w * d_a
 *                   one float product of the scales, MXFP4's d_w =
 *                   2^(e - 128); s the running float sum from +0, blocks in
 *                   order; kernels.h and gemm.h rely on it for batch
 *                   invariance). The reference's x86 backend sums all three
 *                   so over its repacked rows (any row count that is a
 *                   multiple of 8: every model's), for one token and many.
 *   Q8_0:           block-reduced as Q4_0 (sumi = sum(q * y)), bit for bit
 *                   at every level: tokenkv's own order (the reference's x86
 *                   build repacks no Q8_0 rows; its plain C sums
 *                   s += sumi * (d_w * d_a), tkv__quant_vec_dot_q8_0_ref,
 *                   and its SIMD vec_dot lane-wise: kernels.h's vec_dot_ref)
 *   Q5_0:           s += sumi * (d_w * d_a), the reference's plain C (the
 *                   scalar level's default and vec_dot_ref); the avx512
 *                   level sums lane-wise, as the reference's x86 vec_dot
 *                   (every level's vec_dot_ref above scalar); the avx2
 *                   level block-reduced as Q4_0 (sumi = sum((q - 16) * y)),
 *                   over its packed rows (compute/quant/repack.h), its own
 *                   order: the reference repacks no Q5_0 rows
 *   Q4_1/Q5_1:      sumi * d_w * d_a + m_w * s_a
 *   Q4_K/Q5_K:      block-reduced as Q4_0, two running sums from +0:
 *                   s = fmaf((float)sum_g(sc_g * sumi_g), d_w * d_a, s),
 *                   m = fmaf((float)sum_g(mn_g * bsum_g), dmin_w * d_a, m),
 *                   the result s - m; bit for bit at every level; the
 *                   reference's x86 order over its repacked Q4_K rows
 *                   (which it uses for every Q4_K matrix of 8k rows) and
 *                   its ARM order for Q5_K. Its x86 build sums Q5_K
 *                   lane-wise: tkv__quant_vec_dot_q5_K_lanes (kernels.h's
 *                   vec_dot_ref), d_a * d_w * sum_g(sc_g * sumi_g) -
 *                   d_a * dmin_w * sum_g(mn_g * bsum_g).
 *   Q6_K:           block-reduced, one running sum from +0:
 *                   s = fmaf((float)sum_g(scales_g * sumi_g), d_w * d_a, s)
 *                   (q - 32 folded in); bit for bit at every level. The
 *                   reference sums it lane-wise (it never repacks Q6_K on
 *                   x86): tkv__quant_vec_dot_q6_K_lanes (kernels.h's
 *                   vec_dot_ref), d_a * d_w * sum_g(scales_g * sumi_g)
 *   IQ4_XS:         block-reduced, one running sum from +0:
 *                   s = fmaf((float)sum_b((ls_b - 32) * sumi_b), d_w * d_a, s);
 *                   bit for bit at every level. The reference sums it
 *                   lane-wise (it never repacks IQ4_XS on x86):
 *                   tkv__quant_vec_dot_iq4_xs_lanes (kernels.h's vec_dot_ref),
 *                   d_w * d_a * sum_b((ls_b - 32) * sumi_b)
 *   Q2_K:           block-reduced as Q4_K (sc_b and mn_b over its 16
 *                   sub-blocks of 16): the reference's x86 order over its
 *                   repacked Q2_K rows (on CPUs with AVX-512, every matrix
 *                   of 8k rows). Its plain x86 vec_dot sums lane-wise:
 *                   tkv__quant_vec_dot_q2_K_lanes (kernels.h's vec_dot_ref),
 *                   d_a * d_w * sum_b(sc_b * sumi_b) - d_a * dmin_w * sum_b(mn_b * bsum_b)
 *   Q3_K:           block-reduced, one running sum from +0:
 *                   s = fmaf((float)sum_b((sc_b - 32) * sumi_b), d_w * d_a, s);
 *                   bit for bit at every level. The reference sums it
 *                   lane-wise (it never repacks Q3_K on x86):
 *                   tkv__quant_vec_dot_q3_K_lanes (kernels.h's vec_dot_ref),
 *                   d_a * d_w * sum_b((sc_b - 32) * sumi_b)
 *   TQ1_0/TQ2_0:    d_a * d_w * (sum(q * a) - sum(a))
 *   IQ2_*:          d_w * d_a * sum_g((2 ls_g + 1) * sumi_g), times 1/8 once per row
 *   IQ3_XXS/IQ3_S:  d_w * d_a * sum_b((2 ls_b + 1) * sumi_b)   (IQ3_XXS: times 0.25 at the end)
 *   F32/F16/BF16:   a double-precision sum of products.
 * Preconditions: n % block_elems == 0; activation quants in -127..127.
 * Returns the dot product as float.
 */
float tkv__quant_vec_dot(tkv_type wtype, size_t n, const void *w, const void *a);

float tkv__quant_vec_dot_f32(size_t n, const void *w, const void *a);
float tkv__quant_vec_dot_f16(size_t n, const void *w, const void *a);
float tkv__quant_vec_dot_bf16(size_t n, const void *w, const void *a);
float tkv__quant_vec_dot_q8_0(size_t n, const void *w, const void *a);
float tkv__quant_vec_dot_q8_0_ref(size_t n, const void *w, const void *a);
float tkv__quant_vec_dot_q4_0(size_t n, const void *w, const void *a);
float tkv__quant_vec_dot_q4_1(size_t n, const void *w, const void *a);
float tkv__quant_vec_dot_q5_0(size_t n, const void *w, const void *a);
float tkv__quant_vec_dot_q5_1(size_t n, const void *w, const void *a);
float tkv__quant_vec_dot_q4_K(size_t n, const void *w, const void *a);
float tkv__quant_vec_dot_q5_K(size_t n, const void *w, const void *a);
float tkv__quant_vec_dot_q5_K_lanes(size_t n, const void *w, const void *a);
float tkv__quant_vec_dot_q6_K(size_t n, const void *w, const void *a);
float tkv__quant_vec_dot_q6_K_lanes(size_t n, const void *w, const void *a);
float tkv__quant_vec_dot_iq4_nl(size_t n, const void *w, const void *a);
float tkv__quant_vec_dot_iq4_xs(size_t n, const void *w, const void *a);
float tkv__quant_vec_dot_iq4_xs_lanes(size_t n, const void *w, const void *a);
float tkv__quant_vec_dot_mxfp4(size_t n, const void *w, const void *a);
float tkv__quant_vec_dot_q2_K(size_t n, const void *w, const void *a);
float tkv__quant_vec_dot_q2_K_lanes(size_t n, const void *w, const void *a);
float tkv__quant_vec_dot_q3_K(size_t n, const void *w, const void *a);
float tkv__quant_vec_dot_q3_K_lanes(size_t n, const void *w, const void *a);
float tkv__quant_vec_dot_tq1_0(size_t n, const void *w, const void *a);
float tkv__quant_vec_dot_tq2_0(size_t n, const void *w, const void *a);

#endif
