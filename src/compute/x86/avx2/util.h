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

#endif
#endif
