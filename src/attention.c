/*
 * attention.c — see attention.h. The AVX2 functions are compiled for their
 * target with function attributes and only called when the CPU has it.
 */
#include "attention.h"

#include "kernels.h"
#include "quant.h"

#include <math.h>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#define STEP 64 /* elements per step of the reference's AVX-512 loop: 4 accumulators x 16 lanes */

/* ---- scalar ------------------------------------------------------------- */

static float dot_scalar(const uint16_t *q, const uint16_t *k, size_t n) {
    const size_t np = n & ~(size_t)(STEP - 1);
    float acc[4][16] = {{0}};
    for (size_t i = 0; i < np; i += STEP)
        for (int j = 0; j < 4; j++)
            for (int l = 0; l < 16; l++) {
                size_t e = i + 16 * (size_t)j + (size_t)l;
                acc[j][l] = fmaf(tkv__quant_f16_to_f32(q[e]), tkv__quant_f16_to_f32(k[e]), acc[j][l]);
            }
    double sum = 0;
    if (np) {
        float v[16];
        for (int l = 0; l < 16; l++) v[l] = (acc[0][l] + acc[2][l]) + (acc[1][l] + acc[3][l]);
        for (int l = 0; l < 8; l++) v[l] += v[l + 8];
        for (int l = 0; l < 4; l++) v[l] += v[l + 4];
        v[0] += v[2], v[1] += v[3];
        sum = (double)(v[0] + v[1]);
    }
    for (size_t i = np; i < n; i++) sum += (double)(tkv__quant_f16_to_f32(q[i]) * tkv__quant_f16_to_f32(k[i]));
    return (float)sum;
}

static void mad_scalar(uint16_t *acc, const uint16_t *v, float w, size_t n) {
    for (size_t i = 0; i < n; i++)
        acc[i] = tkv__quant_f32_to_f16(fmaf(tkv__quant_f16_to_f32(v[i]), w, tkv__quant_f16_to_f32(acc[i])));
}

static void scale_scalar(uint16_t *acc, float s, size_t n) {
    for (size_t i = 0; i < n; i++) acc[i] = tkv__quant_f32_to_f16(tkv__quant_f16_to_f32(acc[i]) * s);
}

static float dot_f32_scalar(const float *q, const uint16_t *k, size_t n) {
    float s = 0;
    for (size_t i = 0; i < n; i++) s += q[i] * tkv__quant_f16_to_f32(k[i]);
    return s;
}

static void mad_f32_scalar(float *acc, const uint16_t *v, float w, size_t n) {
    for (size_t i = 0; i < n; i++) acc[i] += w * tkv__quant_f16_to_f32(v[i]);
}

static const tkv__attn_ops scalar_ops = {dot_scalar, mad_scalar, scale_scalar, dot_f32_scalar, mad_f32_scalar};

const tkv__attn_ops *tkv__attn_scalar(void) { return &scalar_ops; }

/* ---- AVX2 + F16C + FMA ---------------------------------------------------- */

#if defined(__x86_64__)
#define AVX2 __attribute__((target("avx2,fma,f16c")))

AVX2 static inline __m256 load8(const uint16_t *p) { return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p)); }

AVX2 static inline void store8(uint16_t *p, __m256 v) {
    _mm_storeu_si128((__m128i *)p, _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
}

AVX2 static float dot_avx2(const uint16_t *q, const uint16_t *k, size_t n) {
    const size_t np = n & ~(size_t)(STEP - 1);
    double sum = 0;
    if (np) {
        /* accumulator j, lanes 0-7 in lo[j] and 8-15 in hi[j] */
        __m256 lo[4], hi[4];
        for (int j = 0; j < 4; j++) lo[j] = hi[j] = _mm256_setzero_ps();
        for (size_t i = 0; i < np; i += STEP)
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

AVX2 static void mad_avx2(uint16_t *acc, const uint16_t *v, float w, size_t n) {
    const __m256 vw = _mm256_set1_ps(w);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) store8(acc + i, _mm256_fmadd_ps(load8(v + i), vw, load8(acc + i)));
    mad_scalar(acc + i, v + i, w, n - i);
}

AVX2 static void scale_avx2(uint16_t *acc, float s, size_t n) {
    const __m256 vs = _mm256_set1_ps(s);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) store8(acc + i, _mm256_mul_ps(load8(acc + i), vs));
    scale_scalar(acc + i, s, n - i);
}

AVX2 static float dot_f32_avx2(const float *q, const uint16_t *k, size_t n) {
    __m256 acc = _mm256_setzero_ps();
    size_t i = 0;
    for (; i + 8 <= n; i += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(q + i), load8(k + i), acc);
    __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
    s4 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    float s = _mm_cvtss_f32(_mm_add_ss(s4, _mm_shuffle_ps(s4, s4, 1)));
    return s + dot_f32_scalar(q + i, k + i, n - i);
}

AVX2 static void mad_f32_avx2(float *acc, const uint16_t *v, float w, size_t n) {
    const __m256 vw = _mm256_set1_ps(w);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(acc + i, _mm256_fmadd_ps(load8(v + i), vw, _mm256_loadu_ps(acc + i)));
    mad_f32_scalar(acc + i, v + i, w, n - i);
}

static const tkv__attn_ops avx2_ops = {dot_avx2, mad_avx2, scale_avx2, dot_f32_avx2, mad_f32_avx2};

/* ---- AVX-512: the float forms (long batches) 16 lanes at a time; the F16
   forms stay AVX2's, which are exact twins of the scalar ones ------------ */

#define AVX512 __attribute__((target("avx512f")))

AVX512 static inline __m512 load16(const uint16_t *p) { return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p)); }

AVX512 static float dot_f32_avx512(const float *q, const uint16_t *k, size_t n) {
    __m512 acc = _mm512_setzero_ps();
    size_t i = 0;
    for (; i + 16 <= n; i += 16) acc = _mm512_fmadd_ps(_mm512_loadu_ps(q + i), load16(k + i), acc);
    return _mm512_reduce_add_ps(acc) + dot_f32_scalar(q + i, k + i, n - i);
}

AVX512 static void mad_f32_avx512(float *acc, const uint16_t *v, float w, size_t n) {
    const __m512 vw = _mm512_set1_ps(w);
    size_t i = 0;
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(acc + i, _mm512_fmadd_ps(load16(v + i), vw, _mm512_loadu_ps(acc + i)));
    mad_f32_scalar(acc + i, v + i, w, n - i);
}

static const tkv__attn_ops avx512_ops = {dot_avx2, mad_avx2, scale_avx2, dot_f32_avx512, mad_f32_avx512};
#endif

const tkv__attn_ops *tkv__attn_get(void) {
#if defined(__x86_64__)
    if (tkv__kernel_level_active() >= TKV__KERNEL_AVX512) return &avx512_ops;
    if (tkv__kernel_level_active() >= TKV__KERNEL_AVX2) return &avx2_ops;
#endif
    return &scalar_ops;
}
