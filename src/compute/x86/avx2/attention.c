/*
 * compute/x86/avx2/attention.c — attention's vector operations (compute/attention.h)
 * at the AVX2 level (with FMA and F16C): 8 lanes per register, the F16 dot
 * in the 4 x 16-lane order of the scalar twin (two registers per
 * accumulator), so scores agree with it to the bit; the rows' tails end in
 * the scalar functions. The float forms of long batches and the 16-row
 * forms (any summation order) are the avx512 level's at half its width.
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

static void widen16_avx2(const uint16_t *const rows[16], size_t m, size_t n, float *dst) {
    for (size_t c = 0; c < m; c++)
        for (size_t d = 0; d < n; d += 8) _mm256_storeu_ps(dst + c * n + d, load8(rows[c] + d));
}

/* Elements d .. d + 7 of cell c: from its widened row (k + c n), or straight from its F16 row when rows is
   given (the same floats either way). */
static inline __m256 cell8(const float *k, const uint16_t *const *rows, size_t c, size_t n, size_t d) {
    return rows ? load8(rows[c] + d) : _mm256_loadu_ps(k + c * n + d);
}

/*
 * Scores of 16 cells, 8 at a time: one 8-lane accumulator per cell, then
 * the 8 of them reduced together in a transpose-and-add network (pairs by
 * unpack, quads by shuffle, the 128-bit halves by permute) that leaves cell
 * c's sum in lane c: 21 shuffles and adds where 8 separate reductions take
 * ~56 (the per-cell dot's, with a call and a scalar tail each).
 */
static inline void scores16_core(const float *q, const float *k, const uint16_t *const *rows, size_t n,
                                 float scale, float out[16]) {
    for (size_t c0 = 0; c0 < 16; c0 += 8) {
        __m256 a[8];
        for (int c = 0; c < 8; c++) a[c] = _mm256_setzero_ps();
        for (size_t d = 0; d < n; d += 8) {
            const __m256 qv = _mm256_loadu_ps(q + d);
            for (size_t c = 0; c < 8; c++) a[c] = _mm256_fmadd_ps(qv, cell8(k, rows, c0 + c, n, d), a[c]);
        }
        __m256 s1[4], s2[2];
        for (int i = 0; i < 4; i++) /* per 128-bit lane: (c0 0+2, c1 0+2, c0 1+3, c1 1+3) */
            s1[i] = _mm256_add_ps(_mm256_unpacklo_ps(a[2 * i], a[2 * i + 1]), _mm256_unpackhi_ps(a[2 * i], a[2 * i + 1]));
        for (int i = 0; i < 2; i++) /* per 128-bit lane: cells 4i .. 4i+3 */
            s2[i] = _mm256_add_ps(_mm256_shuffle_ps(s1[2 * i], s1[2 * i + 1], 0x44),
                                  _mm256_shuffle_ps(s1[2 * i], s1[2 * i + 1], 0xee));
        const __m256 v = _mm256_add_ps(_mm256_permute2f128_ps(s2[0], s2[1], 0x20), _mm256_permute2f128_ps(s2[0], s2[1], 0x31));
        _mm256_storeu_ps(out + c0, _mm256_mul_ps(v, _mm256_set1_ps(scale)));
    }
}

/* acc += w[c] v[c] for m cells, 64 elements at a time kept in registers (then 16) */
static inline void wsum16_core(float *acc, const float *v, const uint16_t *const *rows, const float *w, size_t m,
                               size_t n) {
    size_t d = 0;
    for (; d + 64 <= n; d += 64) {
        __m256 o[8];
        for (int r = 0; r < 8; r++) o[r] = _mm256_loadu_ps(acc + d + 8 * (size_t)r);
        for (size_t c = 0; c < m; c++) {
            const __m256 wc = _mm256_set1_ps(w[c]);
            for (int r = 0; r < 8; r++) o[r] = _mm256_fmadd_ps(cell8(v, rows, c, n, d + 8 * (size_t)r), wc, o[r]);
        }
        for (int r = 0; r < 8; r++) _mm256_storeu_ps(acc + d + 8 * (size_t)r, o[r]);
    }
    for (; d < n; d += 16) {
        __m256 o0 = _mm256_loadu_ps(acc + d), o1 = _mm256_loadu_ps(acc + d + 8);
        for (size_t c = 0; c < m; c++) {
            const __m256 wc = _mm256_set1_ps(w[c]);
            o0 = _mm256_fmadd_ps(cell8(v, rows, c, n, d), wc, o0);
            o1 = _mm256_fmadd_ps(cell8(v, rows, c, n, d + 8), wc, o1);
        }
        _mm256_storeu_ps(acc + d, o0), _mm256_storeu_ps(acc + d + 8, o1);
    }
}

static void scores16_avx2(const float *q, const float *k, size_t n, float scale, float out[16]) {
    scores16_core(q, k, NULL, n, scale, out);
}

static void wsum16_avx2(float *acc, const float *v, const float *w, size_t m, size_t n) {
    wsum16_core(acc, v, NULL, w, m, n);
}

static void scores16_rows_avx2(const float *q, const uint16_t *const rows[16], size_t n, float scale, float out[16]) {
    scores16_core(q, NULL, rows, n, scale, out);
}

static void wsum16_rows_avx2(float *acc, const uint16_t *const rows[16], const float *w, size_t m, size_t n) {
    wsum16_core(acc, NULL, rows, w, m, n);
}

/* the F16 forms are exact twins of the scalar ones, and the avx512 level keeps them; the float forms and the
   16-row forms are its own (the avx512 level has its own of those) */
const tkv__attn_ops tkv__attn_avx2_part = {
    .dot = dot_avx2,
    .mad = mad_avx2,
    .scale = scale_avx2,
    .dot_f32 = dot_f32_avx2,
    .mad_f32 = mad_f32_avx2,
    .widen16 = widen16_avx2,
    .scores16 = scores16_avx2,
    .wsum16 = wsum16_avx2,
    .scores16_rows = scores16_rows_avx2,
    .wsum16_rows = wsum16_rows_avx2,
};

#else /* not an x86-64 build with AVX2 flags: an empty part, never selected */

const tkv__attn_ops tkv__attn_avx2_part = {0};

#endif
