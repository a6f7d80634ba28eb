/*
 * compute/x86/iq3.h — the panel of IQ3_XXS and IQ3_S rows that their tiled products
 * (compute/x86/avx2/gemm_iq3.c, compute/x86/avx512/gemm_iq3.c) share: each super-block's grid values
 * and signs decoded once per call and chunk of tokens, not once per token.
 * Included only by files compiled with at least -mavx2 -mfma -mf16c.
 *
 * Why the activations move, not the weights' signs: the avx2 dot
 * (compute/x86/avx2/dot_iq3.c) forms maddubs(g, y * s) with g the unsigned grid byte
 * and s the sign, then madd by the sub-block scale 2 ls + 1. A tile reads
 * the signed weight w = g * s (|w| <= 62) from the panel and the activation
 * as an unsigned byte y + 128 (y ^ 0x80), so maddubs(y + 128, w) needs no
 * per-token sign step; each int16 pair is at most 2 * 255 * 62 = 31620, no
 * saturation. The excess 128 * w is a constant of the row: per lane k,
 * corr_k = 128 * sum_b (2 ls_b + 1) * (w[32 b + 4 k] + ... + w[32 b + 4 k + 3]),
 * and lanes - corr are the dot's int32 lanes exactly (integers, no rounding).
 * The float part then is the dot's: d = fp16(d_w) * d_a rounded, one fma per
 * super-block into 8 lanes, its horizontal sum, IQ3_XXS's 0.25 last.
 */
#ifndef TKV_GEMM_IQ3_H
#define TKV_GEMM_IQ3_H

#include "compute/quant/quant.h"
#include "compute/quant/grids.h"
#include "compute/quant/iq.h"

#include <stdalign.h>
#include <stdint.h>
#include <string.h>

#if defined(__x86_64__) && defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include <immintrin.h>

/* One super-block of one row, unpacked (576 bytes). */
typedef struct iq3_pan {
    alignas(64) int8_t w[256]; /* signed grid values, element order */
    uint32_t sc[8][8];         /* sub-block b's 2 ls + 1 in both int16 halves of all 8 lanes */
    int32_t corr[8];           /* 128 * the scaled lane sums of w (above) */
    float d;                   /* fp16(d_w) as float */
    float pad_[7];
} iq3_pan;

/* 0xff in byte j where bit j of the 32 sign bits is set. */
static inline __m256i iq3_sign_mask(uint32_t bits) {
    const __m256i spread = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2,
                                            3, 3, 3, 3, 3, 3, 3, 3);
    const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ULL);
    const __m256i v = _mm256_and_si256(_mm256_shuffle_epi8(_mm256_set1_epi32((int)bits), spread), bit);
    return _mm256_cmpeq_epi8(v, bit);
}

/* Sub-block b from its 8 grid words, 32 sign bits and scale; returns its scaled lane sums of w. */
static inline __m256i iq3_pan_sub(iq3_pan *e, int b, __m256i g, uint32_t sign_bits, int ls) {
    const __m256i neg = iq3_sign_mask(sign_bits);
    const __m256i w = _mm256_sub_epi8(_mm256_xor_si256(g, neg), neg);
    _mm256_store_si256((__m256i *)(void *)(e->w + 32 * b), w);
    const __m256i sc = _mm256_set1_epi16((short)(2 * ls + 1));
    _mm256_store_si256((__m256i *)(void *)e->sc[b], sc);
    return _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8(1), w), sc);
}

static inline void iq3_pan_done(iq3_pan *e, __m256i lanes, uint16_t d) {
    _mm256_store_si256((__m256i *)(void *)e->corr, _mm256_slli_epi32(lanes, 7));
    e->d = _cvtsh_ss(d);
}

static inline void iq3_pan_xxs(iq3_pan *e, const tkv__block_iq3_xxs *x) {
    const uint8_t *qs = x->qs;
    __m256i lanes = _mm256_setzero_si256();
    for (int b = 0; b < 8; b++) {
        const uint8_t *ix = qs + 8 * b;
        const __m256i g = _mm256_setr_epi32(
            (int)tkv__iq3xxs_grid[ix[0]], (int)tkv__iq3xxs_grid[ix[1]], (int)tkv__iq3xxs_grid[ix[2]],
            (int)tkv__iq3xxs_grid[ix[3]], (int)tkv__iq3xxs_grid[ix[4]], (int)tkv__iq3xxs_grid[ix[5]],
            (int)tkv__iq3xxs_grid[ix[6]], (int)tkv__iq3xxs_grid[ix[7]]);
        uint32_t word;
        memcpy(&word, qs + 64 + 4 * b, 4);
        /* four 7-bit patterns, each completed to 8 signs by the table */
        const uint32_t sign_bits = (uint32_t)tkv__iq_signs[word & 127] | (uint32_t)tkv__iq_signs[(word >> 7) & 127] << 8 |
                                   (uint32_t)tkv__iq_signs[(word >> 14) & 127] << 16 |
                                   (uint32_t)tkv__iq_signs[(word >> 21) & 127] << 24;
        lanes = _mm256_add_epi32(lanes, iq3_pan_sub(e, b, g, sign_bits, (int)(word >> 28)));
    }
    iq3_pan_done(e, lanes, x->d);
}

static inline void iq3_pan_s(iq3_pan *e, const tkv__block_iq3_s *x) {
    __m256i lanes = _mm256_setzero_si256();
    for (int b = 0; b < 8; b++) {
        const uint8_t *lo = x->qs + 8 * b;
        const unsigned hi = x->qh[b];
        const __m256i g = _mm256_setr_epi32(
            (int)tkv__iq3s_grid[lo[0] | (hi & 1) << 8], (int)tkv__iq3s_grid[lo[1] | (hi >> 1 & 1) << 8],
            (int)tkv__iq3s_grid[lo[2] | (hi >> 2 & 1) << 8], (int)tkv__iq3s_grid[lo[3] | (hi >> 3 & 1) << 8],
            (int)tkv__iq3s_grid[lo[4] | (hi >> 4 & 1) << 8], (int)tkv__iq3s_grid[lo[5] | (hi >> 5 & 1) << 8],
            (int)tkv__iq3s_grid[lo[6] | (hi >> 6 & 1) << 8], (int)tkv__iq3s_grid[lo[7] | (hi >> 7 & 1) << 8]);
        uint32_t sign_bits;
        memcpy(&sign_bits, x->signs + 4 * b, 4);
        const int ls = (x->scales[b / 2] >> (4 * (b % 2))) & 0x0f;
        lanes = _mm256_add_epi32(lanes, iq3_pan_sub(e, b, g, sign_bits, ls));
    }
    iq3_pan_done(e, lanes, x->d);
}

/* Super-block i of a row of either type. */
static inline void iq3_pan_fill(iq3_pan *e, const uint8_t *row, size_t i, int xxs) {
    if (xxs)
        iq3_pan_xxs(e, (const tkv__block_iq3_xxs *)(const void *)(row + i * sizeof(tkv__block_iq3_xxs)));
    else
        iq3_pan_s(e, (const tkv__block_iq3_s *)(const void *)(row + i * sizeof(tkv__block_iq3_s)));
}

/* The dot's horizontal sum: halves, then pairs, then the last two. */
static inline float iq3_hsum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_extractf128_ps(v, 1), _mm256_castps256_ps128(v));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

#endif
#endif
