/*
 * compute/x86/avx2/util.h — the helpers of the avx2 tiled products (the
 * gemm_*.c files of this folder): a ymm holds one (row, token) pair's 8 lanes
 * and a tile is 2 rows x up to 4 tokens, so they share the horizontal sums in
 * the vec_dot's order and the store of a tile.
 *
 * Included only by files compiled with -mavx2 -mfma -mf16c (kernels.cmake);
 * without those flags it declares nothing.
 */
#ifndef TKV_GEMM_AVX2_UTIL_H
#define TKV_GEMM_AVX2_UTIL_H

#include "compute/x86/util.h"

#include <stdalign.h>
#include <stddef.h>

#if defined(__x86_64__) && defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include <immintrin.h>

/*
 * Horizontal sums of 8 pairs of 8 float lanes, in the order of the vec_dot's
 * hsum: ((v0 + v4) + (v2 + v6)) + ((v1 + v5) + (v3 + v7)). a[i]: row i % 2,
 * token i / 2. Returns lane 4k + u = row k, token u.
 */
static inline __m256 reduce8(const __m256 a[8]) {
    __m256 s[4];
    for (int m = 0; m < 4; m++) /* [v0..3 + v4..7 of a[2m] | of a[2m + 1]] */
        s[m] = _mm256_add_ps(_mm256_permute2f128_ps(a[2 * m], a[2 * m + 1], 0x20),
                             _mm256_permute2f128_ps(a[2 * m], a[2 * m + 1], 0x31));
    const __m256 w01 = _mm256_add_ps(_mm256_shuffle_ps(s[0], s[1], _MM_SHUFFLE(1, 0, 1, 0)),
                                     _mm256_shuffle_ps(s[0], s[1], _MM_SHUFFLE(3, 2, 3, 2)));
    const __m256 w23 = _mm256_add_ps(_mm256_shuffle_ps(s[2], s[3], _MM_SHUFFLE(1, 0, 1, 0)),
                                     _mm256_shuffle_ps(s[2], s[3], _MM_SHUFFLE(3, 2, 3, 2)));
    /* lane 4k + m: a[2m + k], i.e. token m, row k */
    return _mm256_add_ps(_mm256_shuffle_ps(w01, w23, _MM_SHUFFLE(2, 0, 2, 0)),
                         _mm256_shuffle_ps(w01, w23, _MM_SHUFFLE(3, 1, 3, 1)));
}

/* Store lane 4k + u (k < nrow, u < ntok) of v to y[u * ldy + k]. */
static inline void store_tile(float *y, size_t ldy, __m256 v, int nrow, int ntok) {
    alignas(32) float o[8];
    _mm256_store_ps(o, v);
    for (int u = 0; u < ntok; u++) {
        y[(size_t)u * ldy] = o[u];
        if (nrow > 1) y[(size_t)u * ldy + 1] = o[4 + u];
    }
}

/*
 * The transposed K-quant products' group tiles (gemm_q4_q5_k.c, gemm_q2_q3_k.c): a ymm lane per row of one
 * half of a group of 16, two running sums a token and half (the scales' acc and the mins' accm; a type without
 * mins leaves accm +0, so acc - accm is acc), carried between chunks of superblocks in a stash of 32 floats a
 * token (half hf's acc at 16 hf, its accm 8 on).
 */

/* A token's 4 activation bytes at p in every dword lane. */
static inline __m256i bcast32(const uint8_t *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return _mm256_set1_epi32(v);
}

/* The 2 ls + 1 of an IQ2 block's 16 halves of sub-blocks from its 8 scale bytes, in both 128-bit lanes: byte 2b
   the low nibble of scales[b], 2b + 1 the high one (dot_iq2.c's vec_dots and packed_planes.c's IQ2 planes). */
static inline __m256i iq2_scales16(const uint8_t *scales) {
    const __m128i s8 = _mm_loadl_epi64((const __m128i *)(const void *)scales);
    const __m128i lh = _mm_unpacklo_epi8(_mm_and_si128(s8, _mm_set1_epi8(15)),
                                         _mm_and_si128(_mm_srli_epi16(s8, 4), _mm_set1_epi8(15)));
    return _mm256_broadcastsi128_si256(_mm_add_epi8(_mm_add_epi8(lh, lh), _mm_set1_epi8(1)));
}

/* Bit k (0..7) of each byte of h moved to bit 4, the rest zero: a fifth bit as 16 (Q5_K's packed qh, Q5_0's packed
   fifth bits: compute/quant/repack.h). */
static inline __m256i fifth_bit(__m256i h, int k) {
    const __m256i v = k < 4 ? _mm256_slli_epi16(h, 4 - k) : k > 4 ? _mm256_srli_epi16(h, k - 4) : h;
    return _mm256_and_si256(v, _mm256_set1_epi8(0x10));
}

/* The first nrow (0..8) of v's lanes to y. */
static inline void store_rows(float *y, __m256 v, size_t nrow) {
    if (nrow >= 8) {
        _mm256_storeu_ps(y, v);
        return;
    }
    alignas(32) float o[8];
    _mm256_store_ps(o, v);
    for (size_t k = 0; k < nrow; k++) y[k] = o[k];
}

/* Half hf of a tile's T tokens' running sums: zero when first, else from the stash st. */
static inline void sums_start(const float *st, int first, int T, int hf, __m256 *acc, __m256 *accm) {
    for (int t = 0; t < T; t++) {
        acc[t] = first ? _mm256_setzero_ps() : _mm256_load_ps(st + 32 * t + 16 * hf);
        accm[t] = first ? _mm256_setzero_ps() : _mm256_load_ps(st + 32 * t + 16 * hf + 8);
    }
}

/* ... and their end: when last, acc - accm to y[t ldy + 8 hf + k] for the group's first nrow rows; else back to
   the stash. */
static inline void sums_end(float *st, int last, int T, int hf, const __m256 *acc, const __m256 *accm, float *y,
                            size_t ldy, size_t nrow) {
    for (int t = 0; t < T; t++) {
        if (last) {
            store_rows(y + (size_t)t * ldy + 8 * hf, _mm256_sub_ps(acc[t], accm[t]), nrow - 8 * (size_t)hf);
        } else {
            _mm256_store_ps(st + 32 * t + 16 * hf, acc[t]);
            _mm256_store_ps(st + 32 * t + 16 * hf + 8, accm[t]);
        }
    }
}

#endif
#endif
