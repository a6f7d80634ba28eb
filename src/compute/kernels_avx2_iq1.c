/*
 * kernels_avx2_iq1.c — AVX2 dot products of IQ1_S and IQ1_M with Q8_K
 * activations (compiled with kernels_avx2.c's flags; reached only through
 * its table, which the AVX-512 level inherits).
 *
 * Both follow the reference's lanes, so the parity files agree with it to
 * the bit where its rounding matters: lane k of a super-block's integer sum
 * holds, over the eight sub-blocks, the scaled products of elements
 * 4k..4k+3 of each (int16 pairs from maddubs, the scale applied in madd's
 * pairwise sum); each lane is converted and added with one fma of d_w d_a
 * per super-block, and the 8 lanes summed at the end. The shift's part
 * (activation sums times scale and sign) stays an exact integer until the
 * same kind of accumulation and is scaled by 1/8 last. The integers are the
 * scalar oracle's; only float rounding differs from it.
 */
#include "kernels.h"
#include "quant.h"
#include "quant_grids.h"
#include "quant_iq.h"

#include <math.h>
#include <string.h>

#if defined(__x86_64__) && defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include <immintrin.h>

static inline float hsum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* Four grid points, elements 0-7 of i0 in bytes 0-7 and so on. */
static inline __m256i grid4(unsigned i0, unsigned i1, unsigned i2, unsigned i3) {
    return _mm256_set_epi64x((long long)tkv__iq1s_grid[i3], (long long)tkv__iq1s_grid[i2],
                             (long long)tkv__iq1s_grid[i1], (long long)tkv__iq1s_grid[i0]);
}

/* Products of grid bytes g (-1..1) with activations q as int16 pairs:
   maddubs needs an unsigned operand, so |g| with g's sign moved onto q. */
static inline __m256i grid_pairs(__m256i g, __m256i q) {
    return _mm256_maddubs_epi16(_mm256_sign_epi8(g, g), _mm256_sign_epi8(q, g));
}

static inline __m256i load_q(const int8_t *p) {
    return _mm256_loadu_si256((const __m256i *)(const void *)p);
}

float tkv__dot_iq1_s_avx2(size_t n, const void *w, const void *a) {
    const tkv__block_iq1_s *x = w;
    const tkv__block_q8_K *y = a;
    __m256 acc = _mm256_setzero_ps();
    float accd = 0.0f;
    for (size_t i = 0; i < n / TKV__QK_K; i++) {
        __m256i sumi = _mm256_setzero_si256();
        int sumd = 0;
        for (int b = 0; b < 8; b++) {
            const unsigned h = x[i].qh[b];
            const uint8_t *qs = x[i].qs + 4 * b;
            const __m256i g = grid4(qs[0] | (h << 8 & 0x700), qs[1] | (h << 5 & 0x700), qs[2] | (h << 2 & 0x700),
                                    qs[3] | (h >> 1 & 0x700));
            const int ls = 2 * (int)((h >> 12) & 7) + 1;
            sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(grid_pairs(g, load_q(y[i].qs + 32 * b)),
                                                            _mm256_set1_epi16((short)ls)));
            const int bs = y[i].bsums[2 * b] + y[i].bsums[2 * b + 1];
            sumd += (h & 0x8000 ? -ls : ls) * bs;
        }
        const float d = y[i].d * _cvtsh_ss(x[i].d);
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
        /* one fma: the reference's scalar "accum += d * sum" as GCC contracts
           it by default (GNU C); on the parity files the unfused form lands
           on the same logits to the printed precision too */
        accd = fmaf(d, (float)sumd, accd);
    }
    return hsum8(acc) + TKV__IQ1_DELTA * accd;
}

/* 4 copies of v in a 64-bit lane: one group of 8 elements' int16 pairs. */
static inline long long rep4(int v) {
    return (long long)((uint64_t)(uint16_t)v * 0x0001000100010001ull);
}

float tkv__dot_iq1_m_avx2(size_t n, const void *w, const void *a) {
    const tkv__block_iq1_m *x = w;
    const tkv__block_q8_K *y = a;
    const __m256i ones = _mm256_set1_epi8(1);
    __m256 acc = _mm256_setzero_ps(), accd = _mm256_setzero_ps();
    for (size_t i = 0; i < n / TKV__QK_K; i++) {
        uint16_t sc[4];
        memcpy(sc, x[i].scales, sizeof sc);
        __m256i sumi = _mm256_setzero_si256(), sumd = _mm256_setzero_si256();
        for (int b = 0; b < 8; b++) {
            const uint8_t *qs = x[i].qs + 4 * b, *qh = x[i].qh + 2 * b;
            const __m256i g = grid4(qs[0] | (qh[0] << 8 & 0x700u), qs[1] | (qh[0] << 4 & 0x700u),
                                    qs[2] | (qh[1] << 8 & 0x700u), qs[3] | (qh[1] << 4 & 0x700u));
            const unsigned s6 = sc[b / 2] >> (6 * (b % 2));
            const int ls1 = 2 * (int)(s6 & 7) + 1, ls2 = 2 * (int)((s6 >> 3) & 7) + 1;
            const __m256i q = load_q(y[i].qs + 32 * b);
            const __m256i lsv = _mm256_set_m128i(_mm_set1_epi16((short)ls2), _mm_set1_epi16((short)ls1));
            sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(grid_pairs(g, q), lsv));
            /* each group's activation pairs times its half's scale, signed by its shift */
            const __m256i sgn = _mm256_set_epi64x(rep4(qh[1] & 0x80 ? -ls2 : ls2), rep4(qh[1] & 0x08 ? -ls2 : ls2),
                                                  rep4(qh[0] & 0x80 ? -ls1 : ls1), rep4(qh[0] & 0x08 ? -ls1 : ls1));
            sumd = _mm256_add_epi32(sumd, _mm256_madd_epi16(_mm256_maddubs_epi16(ones, q), sgn));
        }
        const __m256 d = _mm256_set1_ps(y[i].d * _cvtsh_ss(tkv__iq1_m_d(&x[i])));
        acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(sumi), acc);
        accd = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(sumd), accd);
    }
    return hsum8(acc) + TKV__IQ1_DELTA * hsum8(accd);
}

#endif
