/*
 * compute/x86/avx512/attention.c — attention's vector operations
 * (compute/attention.h) at the AVX-512 level: the float forms of long
 * batches 16 lanes at a time and the 16-row forms; the F16 forms stay the
 * avx2 level's (exact twins of the scalar ones).
 */
#include "compute/attention.h"

#include <stddef.h>
#include <stdint.h>

#if defined(__x86_64__) && defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && \
    defined(__AVX512VNNI__) && defined(__AVX2__) && defined(__F16C__)
#include <immintrin.h>

static inline __m512 load16(const uint16_t *p) { return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p)); }

static float dot_f32_avx512(const float *q, const uint16_t *k, size_t n) {
    __m512 acc = _mm512_setzero_ps();
    size_t i = 0;
    for (; i + 16 <= n; i += 16) acc = _mm512_fmadd_ps(_mm512_loadu_ps(q + i), load16(k + i), acc);
    return _mm512_reduce_add_ps(acc) + tkv__attn_dot_f32_scalar(q + i, k + i, n - i);
}

static void mad_f32_avx512(float *acc, const uint16_t *v, float w, size_t n) {
    const __m512 vw = _mm512_set1_ps(w);
    size_t i = 0;
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(acc + i, _mm512_fmadd_ps(load16(v + i), vw, _mm512_loadu_ps(acc + i)));
    tkv__attn_mad_f32_scalar(acc + i, v + i, w, n - i);
}

static void widen16_avx512(const uint16_t *const rows[16], size_t m, size_t n, float *dst) {
    for (size_t c = 0; c < m; c++)
        for (size_t d = 0; d < n; d += 16) _mm512_storeu_ps(dst + c * n + d, load16(rows[c] + d));
}

/* Element d of cell c: from its widened row (k + c n), or straight from its
   F16 row when rows is given (the same float either way). */
static inline __m512 cell16(const float *k, const uint16_t *const *rows, size_t c, size_t n, size_t d) {
    return rows ? load16(rows[c] + d) : _mm512_loadu_ps(k + c * n + d);
}

/*
 * Scores of 16 cells: one 16-lane accumulator per cell, then the 16 of them
 * reduced together in a transpose-and-add network (pairs by unpack, quads by
 * shuffle, 128-bit lanes by shuffle_f32x4) that leaves cell c's sum in lane c:
 * about 45 shuffles and adds where 16 separate reductions take ~140.
 */
static inline void scores16_core(const float *q, const float *k, const uint16_t *const *rows, size_t n,
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
static inline void wsum16_core(float *acc, const float *v, const uint16_t *const *rows, const float *w, size_t m,
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

static void scores16_avx512(const float *q, const float *k, size_t n, float scale, float out[16]) {
    scores16_core(q, k, NULL, n, scale, out);
}

static void wsum16_avx512(float *acc, const float *v, const float *w, size_t m, size_t n) {
    wsum16_core(acc, v, NULL, w, m, n);
}

static void scores16_rows_avx512(const float *q, const uint16_t *const rows[16], size_t n, float scale,
                                        float out[16]) {
    scores16_core(q, NULL, rows, n, scale, out);
}

static void wsum16_rows_avx512(float *acc, const uint16_t *const rows[16], const float *w, size_t m, size_t n) {
    wsum16_core(acc, NULL, rows, w, m, n);
}

/* the F16 forms (dot, mad, scale) stay the avx2 level's */
const tkv__attn_ops tkv__attn_avx512_part = {
    .dot_f32 = dot_f32_avx512,
    .mad_f32 = mad_f32_avx512,
    .widen16 = widen16_avx512,
    .scores16 = scores16_avx512,
    .wsum16 = wsum16_avx512,
    .scores16_rows = scores16_rows_avx512,
    .wsum16_rows = wsum16_rows_avx512,
};

#else /* not an x86-64 build with the avx512 level's flags: an empty part, never selected */

const tkv__attn_ops tkv__attn_avx512_part = {0};

#endif
