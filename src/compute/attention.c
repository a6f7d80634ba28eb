/*
 * attention.c — see attention.h. The AVX2 functions are compiled for their
 * target with function attributes and only called when the CPU has it.
 */
#include "attention.h"

#include "kernels.h"
#include "compute/quant/quant.h"

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

static const tkv__attn_ops scalar_ops = {dot_scalar, mad_scalar, scale_scalar, dot_f32_scalar, mad_f32_scalar,
                                         NULL,       NULL,       NULL,         NULL,           NULL};

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

static const tkv__attn_ops avx2_ops = {dot_avx2, mad_avx2, scale_avx2, dot_f32_avx2, mad_f32_avx2,
                                       NULL,     NULL,     NULL,       NULL,         NULL};

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

AVX512 static void widen16_avx512(const uint16_t *const rows[16], size_t m, size_t n, float *dst) {
    for (size_t c = 0; c < m; c++)
        for (size_t d = 0; d < n; d += 16) _mm512_storeu_ps(dst + c * n + d, load16(rows[c] + d));
}

/* Element d of cell c: from its widened row (k + c n), or straight from its
   F16 row when rows is given (the same float either way). */
AVX512 static inline __m512 cell16(const float *k, const uint16_t *const *rows, size_t c, size_t n, size_t d) {
    return rows ? load16(rows[c] + d) : _mm512_loadu_ps(k + c * n + d);
}

/*
 * Scores of 16 cells: one 16-lane accumulator per cell, then the 16 of them
 * reduced together in a transpose-and-add network (pairs by unpack, quads by
 * shuffle, 128-bit lanes by shuffle_f32x4) that leaves cell c's sum in lane c:
 * about 45 shuffles and adds where 16 separate reductions take ~140.
 */
AVX512 static inline void scores16_core(const float *q, const float *k, const uint16_t *const *rows, size_t n,
                                        float scale, float out[16]) {
    __m512 a[16];
    for (int c = 0; c < 16; c++) a[c] = _mm512_setzero_ps();
    for (size_t d = 0; d < n; d += 16) {
        const __m512 qv = _mm512_loadu_ps(q + d);
        for (size_t c = 0; c < 16; c++) a[c] = _mm512_fmadd_ps(qv, cell16(k, rows, c, n, d), a[c]);
    }
    __m512 s1[8], s2[4];
    for (int i = 0; i < 8; i++) /* per 128-bit lane: (c0 0+2, c1 0+2, c0 1+3, c1 1+3) */
        s1[i] = _mm512_add_ps(_mm512_unpacklo_ps(a[2 * i], a[2 * i + 1]), _mm512_unpackhi_ps(a[2 * i], a[2 * i + 1]));
    for (int i = 0; i < 4; i++) /* per 128-bit lane: cells 4i .. 4i+3 */
        s2[i] = _mm512_add_ps(_mm512_shuffle_ps(s1[2 * i], s1[2 * i + 1], 0x44), _mm512_shuffle_ps(s1[2 * i], s1[2 * i + 1], 0xee));
    const __m512 u0 = _mm512_add_ps(_mm512_shuffle_f32x4(s2[0], s2[1], 0x88), _mm512_shuffle_f32x4(s2[0], s2[1], 0xdd));
    const __m512 u1 = _mm512_add_ps(_mm512_shuffle_f32x4(s2[2], s2[3], 0x88), _mm512_shuffle_f32x4(s2[2], s2[3], 0xdd));
    const __m512 v = _mm512_add_ps(_mm512_shuffle_f32x4(u0, u1, 0x88), _mm512_shuffle_f32x4(u0, u1, 0xdd));
    _mm512_storeu_ps(out, _mm512_mul_ps(v, _mm512_set1_ps(scale)));
}

/* acc += w[c] v[c] for m cells, 64 elements at a time kept in registers */
AVX512 static inline void wsum16_core(float *acc, const float *v, const uint16_t *const *rows, const float *w, size_t m,
                                      size_t n) {
    size_t d = 0;
    for (; d + 64 <= n; d += 64) {
        __m512 o0 = _mm512_loadu_ps(acc + d), o1 = _mm512_loadu_ps(acc + d + 16), o2 = _mm512_loadu_ps(acc + d + 32),
               o3 = _mm512_loadu_ps(acc + d + 48);
        for (size_t c = 0; c < m; c++) {
            const __m512 wc = _mm512_set1_ps(w[c]);
            o0 = _mm512_fmadd_ps(cell16(v, rows, c, n, d), wc, o0);
            o1 = _mm512_fmadd_ps(cell16(v, rows, c, n, d + 16), wc, o1);
            o2 = _mm512_fmadd_ps(cell16(v, rows, c, n, d + 32), wc, o2);
            o3 = _mm512_fmadd_ps(cell16(v, rows, c, n, d + 48), wc, o3);
        }
        _mm512_storeu_ps(acc + d, o0), _mm512_storeu_ps(acc + d + 16, o1);
        _mm512_storeu_ps(acc + d + 32, o2), _mm512_storeu_ps(acc + d + 48, o3);
    }
    for (; d < n; d += 16) {
        __m512 o = _mm512_loadu_ps(acc + d);
        for (size_t c = 0; c < m; c++) o = _mm512_fmadd_ps(cell16(v, rows, c, n, d), _mm512_set1_ps(w[c]), o);
        _mm512_storeu_ps(acc + d, o);
    }
}

AVX512 static void scores16_avx512(const float *q, const float *k, size_t n, float scale, float out[16]) {
    scores16_core(q, k, NULL, n, scale, out);
}

AVX512 static void wsum16_avx512(float *acc, const float *v, const float *w, size_t m, size_t n) {
    wsum16_core(acc, v, NULL, w, m, n);
}

AVX512 static void scores16_rows_avx512(const float *q, const uint16_t *const rows[16], size_t n, float scale,
                                        float out[16]) {
    scores16_core(q, NULL, rows, n, scale, out);
}

AVX512 static void wsum16_rows_avx512(float *acc, const uint16_t *const rows[16], const float *w, size_t m, size_t n) {
    wsum16_core(acc, NULL, rows, w, m, n);
}

static const tkv__attn_ops avx512_ops = {dot_avx2,        mad_avx2,       scale_avx2,      dot_f32_avx512,
                                         mad_f32_avx512,  widen16_avx512, scores16_avx512, wsum16_avx512,
                                         scores16_rows_avx512, wsum16_rows_avx512};
#endif

const tkv__attn_ops *tkv__attn_get(void) {
#if defined(__x86_64__)
    if (tkv__kernel_level_active() >= TKV__KERNEL_AVX512) return &avx512_ops;
    if (tkv__kernel_level_active() >= TKV__KERNEL_AVX2) return &avx2_ops;
#endif
    return &scalar_ops;
}
