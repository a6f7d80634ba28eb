/*
 * compute/x86/avx2/attention.c — attention's vector operations (compute/attention.h)
 * at the AVX2 level (with FMA and F16C): 8 lanes per register, the F16 dot
 * in the 4 x 16-lane order of the scalar twin (two registers per
 * accumulator), so scores agree with it to the bit; the rows' tails end in
 * the scalar functions.
 */
#include "compute/attention.h"
#include "compute/quant/quant.h"

#include <stddef.h>
#include <stdint.h>

#if defined(__x86_64__) && defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include <immintrin.h>

static inline __m256 load8(const uint16_t *p) { return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p)); }

static inline void store8(uint16_t *p, __m256 v) {
    _mm_storeu_si128((__m128i *)p, _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
}

static float dot_avx2(const uint16_t *q, const uint16_t *k, size_t n) {
    const size_t np = n & ~(size_t)(TKV__ATTN_STEP - 1);
    double sum = 0;
    if (np) {
        /* accumulator j, lanes 0-7 in lo[j] and 8-15 in hi[j] */
        __m256 lo[4], hi[4];
        for (int j = 0; j < 4; j++) lo[j] = hi[j] = _mm256_setzero_ps();
        for (size_t i = 0; i < np; i += TKV__ATTN_STEP)
            for (int j = 0; j < 4; j++) {
                const size_t e = i + 16 * (size_t)j;
                lo[j] = _mm256_fmadd_ps(load8(q + e), load8(k + e), lo[j]);
                hi[j] = _mm256_fmadd_ps(load8(q + e + 8), load8(k + e + 8), hi[j]);
            }
        __m256 l = _mm256_add_ps(_mm256_add_ps(lo[0], lo[2]), _mm256_add_ps(lo[1], lo[3]));
        __m256 h = _mm256_add_ps(_mm256_add_ps(hi[0], hi[2]), _mm256_add_ps(hi[1], hi[3]));
        __m256 v8 = _mm256_add_ps(l, h);                                                     /* 16 -> 8 */
        __m128 v4 = _mm_add_ps(_mm256_castps256_ps128(v8), _mm256_extractf128_ps(v8, 1));  /* 8 -> 4 */
        __m128 v2 = _mm_add_ps(v4, _mm_movehl_ps(v4, v4));                                  /* 4 -> 2 */
        __m128 v1 = _mm_add_ss(v2, _mm_shuffle_ps(v2, v2, 1));                              /* 2 -> 1 */
        sum = (double)_mm_cvtss_f32(v1);
    }
    for (size_t i = np; i < n; i++) sum += (double)(tkv__quant_f16_to_f32(q[i]) * tkv__quant_f16_to_f32(k[i]));
    return (float)sum;
}

static void mad_avx2(uint16_t *acc, const uint16_t *v, float w, size_t n) {
    const __m256 vw = _mm256_set1_ps(w);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) store8(acc + i, _mm256_fmadd_ps(load8(v + i), vw, load8(acc + i)));
    tkv__attn_mad_scalar(acc + i, v + i, w, n - i);
}

static void scale_avx2(uint16_t *acc, float s, size_t n) {
    const __m256 vs = _mm256_set1_ps(s);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) store8(acc + i, _mm256_mul_ps(load8(acc + i), vs));
    tkv__attn_scale_scalar(acc + i, s, n - i);
}

static float dot_f32_avx2(const float *q, const uint16_t *k, size_t n) {
    __m256 acc = _mm256_setzero_ps();
    size_t i = 0;
    for (; i + 8 <= n; i += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(q + i), load8(k + i), acc);
    __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
    s4 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    float s = _mm_cvtss_f32(_mm_add_ss(s4, _mm_shuffle_ps(s4, s4, 1)));
    return s + tkv__attn_dot_f32_scalar(q + i, k + i, n - i);
}

static void mad_f32_avx2(float *acc, const uint16_t *v, float w, size_t n) {
    const __m256 vw = _mm256_set1_ps(w);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(acc + i, _mm256_fmadd_ps(load8(v + i), vw, _mm256_loadu_ps(acc + i)));
    tkv__attn_mad_f32_scalar(acc + i, v + i, w, n - i);
}

/* the F16 forms are exact twins of the scalar ones; the avx512 level keeps them */
const tkv__attn_ops tkv__attn_avx2_part = {
    .dot = dot_avx2,
    .mad = mad_avx2,
    .scale = scale_avx2,
    .dot_f32 = dot_f32_avx2,
    .mad_f32 = mad_f32_avx2,
};

#else /* not an x86-64 build with AVX2 flags: an empty part, never selected */

const tkv__attn_ops tkv__attn_avx2_part = {0};

#endif
