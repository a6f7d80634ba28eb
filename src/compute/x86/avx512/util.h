/*
 * compute/x86/avx512/util.h — the helpers of the avx512 tiled products (compute/x86/avx512/gemm_q8_0_q4_q5_q6_k.c
 * and the gemm_*_avx512.c files): a zmm holds two (row, token) pairs of 8
 * lanes, rows 2p and 2p + 1 of one token, so they share the two-halves
 * builders, the horizontal sums in the vec_dot's order and the store of a
 * tile.
 *
 * Included only by files compiled with the avx512 level's flags
 * (kernels.cmake); without them it declares nothing.
 */
#ifndef TKV_GEMM_AVX512_UTIL_H
#define TKV_GEMM_AVX512_UTIL_H

#include "compute/x86/util.h"

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#if defined(__x86_64__) && defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && \
    defined(__AVX512VNNI__) && defined(__AVX2__) && defined(__F16C__)
#include <immintrin.h>

/* 32 bytes at p in both halves of a zmm: a load, no shuffle */
#define BCAST256(p) _mm512_broadcast_i64x4(LOAD256(p))

/* [a x 8 | b x 8] */
static inline __m512 halves_ps(float a, float b) {
    return _mm512_castpd_ps(_mm512_insertf64x4(_mm512_castps_pd(_mm512_set1_ps(a)), _mm256_castps_pd(_mm256_set1_ps(b)), 1));
}

static inline __m512i halves_epi(__m256i a, __m256i b) {
    return _mm512_inserti64x4(_mm512_castsi256_si512(a), b, 1);
}

/*
 * Horizontal sums of 16 (row, token) pairs of 8 float lanes, in the order of
 * the vec_dot's hsum256: ((v0 + v4) + (v2 + v6)) + ((v1 + v5) + (v3 + v7)).
 * a[i]: rows 2 (i % 2) and 2 (i % 2) + 1 of token i / 2. Returns the sums
 * with (token u, row k) at lane 4u + k.
 */
static inline __m512 reduce16(const __m512 a[8]) {
    __m512 s[4];
    for (int m = 0; m < 4; m++) /* 128-bit lanes: v0..3 + v4..7 of a[2m] low/high, a[2m+1] low/high */
        s[m] = _mm512_add_ps(_mm512_shuffle_f32x4(a[2 * m], a[2 * m + 1], _MM_SHUFFLE(2, 0, 2, 0)),
                             _mm512_shuffle_f32x4(a[2 * m], a[2 * m + 1], _MM_SHUFFLE(3, 1, 3, 1)));
    /* within each 128-bit lane k: (s0 + s2, s1 + s3) of two vectors, then their sum */
    const __m512 w01 = _mm512_add_ps(_mm512_shuffle_ps(s[0], s[1], _MM_SHUFFLE(1, 0, 1, 0)),
                                     _mm512_shuffle_ps(s[0], s[1], _MM_SHUFFLE(3, 2, 3, 2)));
    const __m512 w23 = _mm512_add_ps(_mm512_shuffle_ps(s[2], s[3], _MM_SHUFFLE(1, 0, 1, 0)),
                                     _mm512_shuffle_ps(s[2], s[3], _MM_SHUFFLE(3, 2, 3, 2)));
    const __m512 r = _mm512_add_ps(_mm512_shuffle_ps(w01, w23, _MM_SHUFFLE(2, 0, 2, 0)),
                                   _mm512_shuffle_ps(w01, w23, _MM_SHUFFLE(3, 1, 3, 1)));
    /* lane 4k + m holds a[2m + k / 2]'s half k % 2: token m, row k */
    const __m512i idx = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
    return _mm512_permutexvar_ps(idx, r);
}

/* [fp16 at a, as a float, x 8 | fp16 at b x 8]: one conversion for a row pair's two scales (each float the one
   the scalar conversion gives) */
static inline __m512 halves_f16(const void *a, const void *b) {
    uint16_t ha, hb;
    memcpy(&ha, a, sizeof ha), memcpy(&hb, b, sizeof hb);
    return _mm512_cvtph_ps(_mm256_inserti128_si256(_mm256_castsi128_si256(_mm_set1_epi16((short)ha)), _mm_set1_epi16((short)hb), 1));
}

/* [32 bytes at a | 32 bytes at b]: two loads, one insert */
static inline __m512i load_halves(const uint8_t *a, const uint8_t *b) {
    return _mm512_inserti64x4(_mm512_castsi256_si512(LOAD256(a)), LOAD256(b), 1);
}

/*
 * The 6-bit quants of two Q6_K blocks, row a's in the low halves and row b's
 * in the high ones: q[c] = [a's chunk c | b's chunk c], compute/x86/util.h's
 * q6k_quants of each row side by side, so the unpacking runs once for the
 * row pair (the one-token product and the tiled one's panel).
 */
static inline void q6k_quants_pair(const tkv__block_q6_K *a, const tkv__block_q6_K *b, __m512i q[8]) {
    const __m512i m4 = _mm512_set1_epi8(0x0f), m2 = _mm512_set1_epi8(3);
    for (int h = 0; h < 2; h++) {
        const __m512i l0 = load_halves(a->ql + 64 * h, b->ql + 64 * h);
        const __m512i l1 = load_halves(a->ql + 64 * h + 32, b->ql + 64 * h + 32);
        const __m512i hb = load_halves(a->qh + 32 * h, b->qh + 32 * h);
        q[4 * h] = _mm512_or_si512(_mm512_and_si512(l0, m4), _mm512_slli_epi16(_mm512_and_si512(hb, m2), 4));
        q[4 * h + 1] = _mm512_or_si512(_mm512_and_si512(l1, m4),
                                       _mm512_slli_epi16(_mm512_and_si512(_mm512_srli_epi16(hb, 2), m2), 4));
        q[4 * h + 2] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(l0, 4), m4),
                                       _mm512_slli_epi16(_mm512_and_si512(_mm512_srli_epi16(hb, 4), m2), 4));
        q[4 * h + 3] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(l1, 4), m4),
                                       _mm512_slli_epi16(_mm512_and_si512(_mm512_srli_epi16(hb, 6), m2), 4));
    }
}

/* Store lanes 4u + k (k < nrow, u < ntok) of v to y[u * ldy + k]. */
static inline void store_tile(float *y, size_t ldy, __m512 v, int nrow, int ntok) {
    const __mmask8 m = (__mmask8)((1u << nrow) - 1u);
    _mm_mask_storeu_ps(y, m, _mm512_castps512_ps128(v));
    if (ntok > 1) _mm_mask_storeu_ps(y + ldy, m, _mm512_extractf32x4_ps(v, 1));
    if (ntok > 2) _mm_mask_storeu_ps(y + 2 * ldy, m, _mm512_extractf32x4_ps(v, 2));
    if (ntok > 3) _mm_mask_storeu_ps(y + 3 * ldy, m, _mm512_extractf32x4_ps(v, 3));
}

/*
 * A 4-row tile's finish: its stash st holds 2 row pairs x T tokens of 16
 * float lanes, [pair][token]; their sums (reduce16's order) out to the T
 * tokens' rows, nrow of the 4 written.
 */
static inline void store_pairs4(const float *st, int T, float *y, size_t ldy, size_t nrow) {
    __m512 a[8];
    for (int q = 0; q < 8; q++) a[q] = q / 2 < T ? _mm512_load_ps(st + 16 * ((q % 2) * T + q / 2)) : _mm512_setzero_ps();
    store_tile(y, ldy, reduce16(a), (int)min_sz(4, nrow), T);
}

/*
 * The transposed K-quant products' group tiles (gemm_q4_q5_k.c, gemm_q2_q3_k.c): a zmm lane per row of a
 * group of 16, two running sums a token (the scales' acc and the mins' accm; a type without mins leaves accm
 * +0, so acc - accm is acc), carried between chunks of superblocks in a stash of 2 zmm a token.
 */

/* A token's 4 activation bytes at p in every dword lane. */
static inline __m512i bcast32(const uint8_t *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return _mm512_set1_epi32(v);
}

/*
 * acc plus vpdpbusd of the unsigned bytes v by the 4 signed bytes at p in every lane, through the instruction's
 * embedded broadcast: gcc 12 folds neither bcast32 nor a may_alias load into it, and its vpbroadcastd of each
 * token's bytes was one instruction in six of the one-token Q2_K product's. The Q2_K/Q3_K and Q6_K products take it
 * (one thread in L2: Q3_K 68 -> 84 GB/s, Q6_K 94 -> 98); Q4_K's and IQ4_XS's keep bcast32, with which they ran
 * 2% and 9% faster (an asm statement leaves gcc's scheduling and registers around it worse there).
 */
static inline __m512i dpbusd_bcast(__m512i acc, __m512i v, const uint8_t *p) {
    __asm__("vpdpbusd %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(v), "m"(*(const struct { uint8_t b[4]; } *)p));
    return acc;
}

/* A tile's T tokens' running sums: zero when first, else from the stash st. */
static inline void sums_start(const float *st, int first, int T, __m512 *acc, __m512 *accm) {
    for (int t = 0; t < T; t++) {
        acc[t] = first ? _mm512_setzero_ps() : _mm512_load_ps(st + 32 * t);
        accm[t] = first ? _mm512_setzero_ps() : _mm512_load_ps(st + 32 * t + 16);
    }
}

/* ... and their end: when last, acc - accm to y[t ldy + k] for the rows in rmask; else back to the stash. */
static inline void sums_end(float *st, int last, int T, const __m512 *acc, const __m512 *accm, float *y, size_t ldy,
                            __mmask16 rmask) {
    for (int t = 0; t < T; t++) {
        if (last) {
            _mm512_mask_storeu_ps(y + (size_t)t * ldy, rmask, _mm512_sub_ps(acc[t], accm[t]));
        } else {
            _mm512_store_ps(st + 32 * t, acc[t]);
            _mm512_store_ps(st + 32 * t + 16, accm[t]);
        }
    }
}

#endif
#endif
