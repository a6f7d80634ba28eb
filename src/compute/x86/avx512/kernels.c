/*
 * compute/x86/avx512/kernels.c — AVX-512 (F, BW, VL) + VNNI kernels, compiled with their
 * -m flags and reached only when the CPU has them all. The table overrides
 * the avx2 one for the dot products:
 *   - quantized types: the AVX2 structure on 256-bit registers, with
 *     vpdpbusd (u8 x s8, four products summed into int32) and vpdpwssd
 *     (int16 pairs times the group scales, accumulated) replacing the
 *     maddubs/madd/add chains. Measured faster than both AVX2 and 512-bit
 *     versions of the same loops (which pay for cross-lane inserts and
 *     vpmulld, and on some CPUs a lower clock): see bench/bench_kernels.c;
 *   - F32, F16 and BF16 rows: the reference's own arithmetic, in
 *     compute/x86/avx512/gemm_float.c (so that float models match it to the bit).
 *   - SiLU/SwiGLU with the reference's own e^x approximation.
 * Quantizers and the other element-wise ops stay on the AVX2 versions.
 *
 * As in the AVX2 file, integer sums are exact and loads are unaligned.
 */
#include "compute/gemm.h"
#include "compute/kernels.h"
#include "compute/quant/quant.h"
#include "compute/x86/q6_k_dot.h"

#include <math.h>
#include <stdalign.h>
#include <stddef.h>
#include <string.h>

#if defined(__x86_64__) && defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && \
    defined(__AVX512VNNI__) && defined(__AVX2__) && defined(__F16C__)
#include <immintrin.h>

#define LOAD256(p) _mm256_loadu_si256((const __m256i *)(const void *)(p))
#define LOAD128(p) _mm_loadu_si128((const __m128i *)(const void *)(p))
#define Q8K_BSUMS(b) ((const uint8_t *)(b) + offsetof(tkv__block_q8_K, bsums))

static inline float f16(uint16_t h) {
    return _cvtsh_ss(h);
}

/* 16 bytes of nibbles to 32 bytes: low nibbles (elements 0-15), then high. */
static inline __m256i nibbles32(const uint8_t *qs) {
    const __m128i b = LOAD128(qs);
    const __m128i m = _mm_set1_epi8(0x0f);
    return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(b, 4), m), _mm_and_si128(b, m));
}

/* Sums of 4 products of signed bytes: x any int8, y in -127..127 (|x| as u8, y with x's sign). */
static inline __m256i dot_i8_256(__m256i x, __m256i y) {
    return _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_sign_epi8(x, x), _mm256_sign_epi8(y, x));
}

static inline float hsum256(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* ---- quantized types: 256-bit VNNI ------------------------------------------------- */

static inline int k_mins_dot(const uint8_t mins[8], const tkv__block_q8_K *y) {
    const __m256i bs = LOAD256(Q8K_BSUMS(y));
    const __m128i pairs = _mm_hadd_epi16(_mm256_castsi256_si128(bs), _mm256_extracti128_si256(bs, 1));
    const __m128i m = _mm_cvtepu8_epi16(_mm_loadl_epi64((const __m128i *)(const void *)mins));
    __m128i s = _mm_madd_epi16(m, pairs);
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
    return _mm_cvtsi128_si32(s);
}

/* Q8_0 in the reference's lane-wise order (kernels.h's vec_dot_ref; the default is block-reduced:
   compute/x86/avx2/kernels.c's tkv__dot_q8_0_avx2) */
static float dot_q8_0(size_t n, const void *w, const void *a) {
    const tkv__block_q8_0 *x = w;
    const tkv__block_q8_0 *y = a;
    const size_t nb = n / TKV__QK;
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    size_t i = 0;
    for (; i + 2 <= nb; i += 2) {
        const __m256i p0 = dot_i8_256(LOAD256(x[i].qs), LOAD256(y[i].qs));
        const __m256i p1 = dot_i8_256(LOAD256(x[i + 1].qs), LOAD256(y[i + 1].qs));
        acc0 = _mm256_fmadd_ps(_mm256_set1_ps(f16(x[i].d) * f16(y[i].d)), _mm256_cvtepi32_ps(p0), acc0);
        acc1 = _mm256_fmadd_ps(_mm256_set1_ps(f16(x[i + 1].d) * f16(y[i + 1].d)), _mm256_cvtepi32_ps(p1), acc1);
    }
    for (; i < nb; i++) {
        const __m256i p = dot_i8_256(LOAD256(x[i].qs), LOAD256(y[i].qs));
        acc0 = _mm256_fmadd_ps(_mm256_set1_ps(f16(x[i].d) * f16(y[i].d)), _mm256_cvtepi32_ps(p), acc0);
    }
    return hsum256(_mm256_add_ps(acc0, acc1));
}

/* Q4_0: the avx2 dot_q4_0 (block-reduced, compute/quant/quant.h), whose gemv and gemm are in compute/x86/avx512/gemm_q4_0_iq4_nl.c. */

/* 0x10 in byte j when bit j of the little-endian uint32 at qh is set. */
static inline __m256i fifth_bits32(const uint8_t *qh) {
    uint32_t h;
    memcpy(&h, qh, 4);
    /* a bit mask does it in one step with AVX-512BW */
    return _mm256_maskz_mov_epi8((__mmask32)h, _mm256_set1_epi8(0x10));
}

static float dot_q4_1(size_t n, const void *w, const void *a) {
    const tkv__block_q4_1 *x = w;
    const tkv__block_q8_1 *y = a;
    __m256 acc = _mm256_setzero_ps();
    float summ = 0.0f;
    for (size_t i = 0; i < n / TKV__QK; i++) {
        const __m256i p = _mm256_dpbusd_epi32(_mm256_setzero_si256(), nibbles32(x[i].qs), LOAD256(y[i].qs));
        acc = _mm256_fmadd_ps(_mm256_set1_ps(f16(x[i].d) * f16(y[i].d)), _mm256_cvtepi32_ps(p), acc);
        summ += f16(x[i].m) * f16(y[i].s);
    }
    return hsum256(acc) + summ;
}

static float dot_q5_0(size_t n, const void *w, const void *a) {
    const tkv__block_q5_0 *x = w;
    const tkv__block_q8_0 *y = a;
    const __m256i sixteen = _mm256_set1_epi8(16), z = _mm256_setzero_si256();
    __m256 acc = _mm256_setzero_ps();
    for (size_t i = 0; i < n / TKV__QK; i++) {
        /* sum((q - 16) * y) = sum(q * y) - sum(16 * y) */
        const __m256i q = _mm256_or_si256(nibbles32(x[i].qs), fifth_bits32(x[i].qh));
        const __m256i yv = LOAD256(y[i].qs);
        const __m256i p = _mm256_sub_epi32(_mm256_dpbusd_epi32(z, q, yv), _mm256_dpbusd_epi32(z, sixteen, yv));
        acc = _mm256_fmadd_ps(_mm256_set1_ps(f16(x[i].d) * f16(y[i].d)), _mm256_cvtepi32_ps(p), acc);
    }
    return hsum256(acc);
}

static float dot_q5_1(size_t n, const void *w, const void *a) {
    const tkv__block_q5_1 *x = w;
    const tkv__block_q8_1 *y = a;
    __m256 acc = _mm256_setzero_ps();
    float summ = 0.0f;
    for (size_t i = 0; i < n / TKV__QK; i++) {
        const __m256i q = _mm256_or_si256(nibbles32(x[i].qs), fifth_bits32(x[i].qh));
        const __m256i p = _mm256_dpbusd_epi32(_mm256_setzero_si256(), q, LOAD256(y[i].qs));
        acc = _mm256_fmadd_ps(_mm256_set1_ps(f16(x[i].d) * f16(y[i].d)), _mm256_cvtepi32_ps(p), acc);
        summ += f16(x[i].m) * f16(y[i].s);
    }
    return hsum256(acc) + summ;
}

/* Q4_K / Q5_K: maddubs to int16 pairs, then vpdpwssd applies the group scale and accumulates. */
static inline float dot_k(size_t n, const uint8_t *p, size_t bsize, const tkv__block_q8_K *y, int five) {
    const __m256i m4 = _mm256_set1_epi8(0x0f), one = _mm256_set1_epi8(1);
    __m256 acc = _mm256_setzero_ps();
    float accm = 0.0f;
    uint8_t sm[16];
    for (size_t i = 0; i < n / TKV__QK_K; i++, p += bsize) {
        const tkv__block_q4_K *b4 = (const tkv__block_q4_K *)p;
        const uint8_t *qs = five ? ((const tkv__block_q5_K *)p)->qs : b4->qs;
        const float d = y[i].d * f16(b4->d), dmin = y[i].d * f16(b4->dmin);
        tkv__quant_k4_unpack(b4->scales, sm);
        __m256i h = five ? LOAD256(((const tkv__block_q5_K *)p)->qh) : _mm256_setzero_si256();
        __m256i sumi = _mm256_setzero_si256();
        for (int c = 0; c < 4; c++) {
            const __m256i q = LOAD256(qs + 32 * c);
            __m256i lo = _mm256_and_si256(q, m4);
            __m256i hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
            if (five) {
                lo = _mm256_or_si256(lo, _mm256_slli_epi16(_mm256_and_si256(h, one), 4));
                hi = _mm256_or_si256(hi, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 1), one), 4));
                h = _mm256_srli_epi16(h, 2);
            }
            sumi = _mm256_dpwssd_epi32(sumi, _mm256_maddubs_epi16(lo, LOAD256(y[i].qs + 64 * c)),
                                       _mm256_set1_epi16(sm[2 * c]));
            sumi = _mm256_dpwssd_epi32(sumi, _mm256_maddubs_epi16(hi, LOAD256(y[i].qs + 64 * c + 32)),
                                       _mm256_set1_epi16(sm[2 * c + 1]));
        }
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
        accm += dmin * (float)k_mins_dot(sm + 8, &y[i]);
    }
    return hsum256(acc) - accm;
}

/* Q5_K in the reference's lane-wise order (kernels.h's vec_dot_ref). */
static float dot_q5_K_lanes(size_t n, const void *w, const void *a) {
    return dot_k(n, w, sizeof(tkv__block_q5_K), a, 1);
}

/* One Q6_K block's exact integer lanes (vpdpwssd by the group scales): the sum of the 8 is the block's sum. */
static inline __m256i q6k_lanes(const tkv__block_q6_K *x, const tkv__block_q8_K *y) {
    /* start from -32 * sum_g scales[g] * bsums[g]: the q - 32 offset */
    const __m256i corr = _mm256_madd_epi16(LOAD256(Q8K_BSUMS(y)), _mm256_cvtepi8_epi16(LOAD128(x->scales)));
    __m256i sumi[2] = {_mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(corr, 5)), _mm256_setzero_si256()};
    for (int h = 0; h < 2; h++) { /* a chain of vpdpwssd per half: one of 8 held a block to its latency */
        __m256i q[4];
        tkv__q6k_half_values(x, h, q);
        for (int k = 0; k < 4; k++) {
            const int g = 8 * h + 2 * k; /* groups g (low 128 bits) and g + 1 (high) */
            const __m256i sc = _mm256_set_m128i(_mm_set1_epi16(x->scales[g + 1]), _mm_set1_epi16(x->scales[g]));
            sumi[h] = _mm256_dpwssd_epi32(sumi[h], _mm256_maddubs_epi16(q[k], LOAD256(y->qs + 128 * h + 32 * k)), sc);
        }
    }
    return _mm256_add_epi32(sumi[0], sumi[1]);
}

/* Q6_K in the reference's lane-wise order (vec_dot_ref): one fma a block and lane, the lanes summed at the end. */
static float dot_q6_K_lanes(size_t n, const void *w, const void *a) {
    const tkv__block_q6_K *x = w;
    const tkv__block_q8_K *y = a;
    __m256 acc = _mm256_setzero_ps();
    for (size_t i = 0; i < n / TKV__QK_K; i++)
        acc = _mm256_fmadd_ps(_mm256_set1_ps(y[i].d * f16(x[i].d)), _mm256_cvtepi32_ps(q6k_lanes(&x[i], &y[i])), acc);
    return hsum256(acc);
}

/* Q6_K block-reduced (compute/x86/q6_k_dot.h) with the vpdpwssd lanes: one row from L1 at 29 GB/s, where the
   avx2 level's lanes take 27 (bench_kernels -n 2048 -r 1024). */
static float dot_q6_K(size_t n, const void *w, const void *a) {
    return tkv__q6k_dot_reduced(n, w, a, q6k_lanes);
}

/* ---- element-wise: SiLU as the reference computes it on an AVX-512 CPU --------- */

/*
 * e^x for 16 floats, the approximation the reference uses here (so that an
 * activation agrees to the bit, and with it its rounding to F16 or BF16 on
 * the way into the next product): k = round(x / ln 2) by the 1.5 * 2^23
 * shift trick, r = x - k ln 2 with ln 2 in two parts, e^r by a degree-5
 * polynomial evaluated in two halves, then scaled by 2^k (vscalefps).
 * |k| > 192 gives +inf (x > 0) or 0. About 1.5 ulp from e^x.
 */
static inline __m512 exp16(__m512 x) {
    const __m512 shift = _mm512_set1_ps(0x1.8p23f);
    const __m512 z = _mm512_fmadd_ps(x, _mm512_set1_ps(0x1.715476p+0f), shift);
    const __m512 k = _mm512_sub_ps(z, shift);
    const __m512 r = _mm512_fnmadd_ps(k, _mm512_set1_ps(0x1.7f7d1cp-20f), _mm512_fnmadd_ps(k, _mm512_set1_ps(0x1.62e4p-1f), x));
    const __m512 r2 = _mm512_mul_ps(r, r);
    const __m512 hi = _mm512_fmadd_ps(_mm512_fmadd_ps(_mm512_set1_ps(0x1.0e4020p-7f), r, _mm512_set1_ps(0x1.573e2ep-5f)), r2,
                                      _mm512_fmadd_ps(_mm512_set1_ps(0x1.555e66p-3f), r, _mm512_set1_ps(0x1.fffdb6p-2f)));
    const __m512 p = _mm512_fmadd_ps(hi, r2, _mm512_fmadd_ps(_mm512_set1_ps(0x1.ffffecp-1f), r, _mm512_set1_ps(1.0f)));
    const __m512 res = _mm512_scalef_ps(p, k);
    const __mmask16 big = _mm512_cmp_ps_mask(_mm512_abs_ps(k), _mm512_set1_ps(192.0f), _CMP_GT_OQ);
    if (!big) return res;
    const __mmask16 neg = _mm512_cmp_ps_mask(k, _mm512_setzero_ps(), _CMP_LE_OQ);
    const __m512 limit = _mm512_mask_blend_ps(neg, _mm512_set1_ps(INFINITY), _mm512_setzero_ps());
    return _mm512_mask_blend_ps(big, res, limit);
}

/* x / (1 + e^(0 - x)) */
static inline __m512 silu16(__m512 x) {
    const __m512 e = exp16(_mm512_sub_ps(_mm512_setzero_ps(), x));
    return _mm512_div_ps(x, _mm512_add_ps(_mm512_set1_ps(1.0f), e));
}

/* 16 at a time as above, the tail with the C library's expf (as the reference) */
static void silu(float *y, const float *x, size_t n) {
    size_t i = 0;
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, silu16(_mm512_loadu_ps(x + i)));
    for (; i < n; i++) y[i] = x[i] / (1.0f + expf(-x[i]));
}

static void swiglu(float *y, const float *gate, const float *up, size_t n) {
    size_t i = 0;
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, _mm512_mul_ps(silu16(_mm512_loadu_ps(gate + i)), _mm512_loadu_ps(up + i)));
    for (; i < n; i++) y[i] = gate[i] / (1.0f + expf(-gate[i])) * up[i];
}

/*
 * c tanh(x / c), 16 at a time: with u = |x| / c, tanh u = 1 - 2 / (e^2u + 1)
 * (exp16 above), except below u = 0.25, where that form loses digits to
 * cancellation and the odd Taylor polynomial to u^9 is within 1e-8; the
 * sign restored afterwards. Within a few ulp of tanhf. The tail uses tanhf.
 */
static void softcap(float *x, size_t n, float c) {
    const __m512 vc = _mm512_set1_ps(c), one = _mm512_set1_ps(1.0f);
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m512 v = _mm512_loadu_ps(x + i);
        const __m512 u = _mm512_abs_ps(_mm512_div_ps(v, vc));
        const __m512 e = exp16(_mm512_add_ps(u, u));
        __m512 t = _mm512_sub_ps(one, _mm512_div_ps(_mm512_set1_ps(2.0f), _mm512_add_ps(e, one)));
        const __mmask16 small = _mm512_cmp_ps_mask(u, _mm512_set1_ps(0.25f), _CMP_LT_OQ);
        if (small) {
            const __m512 u2 = _mm512_mul_ps(u, u);
            __m512 p = _mm512_set1_ps(62.0f / 2835.0f);
            p = _mm512_fmadd_ps(p, u2, _mm512_set1_ps(-17.0f / 315.0f));
            p = _mm512_fmadd_ps(p, u2, _mm512_set1_ps(2.0f / 15.0f));
            p = _mm512_fmadd_ps(p, u2, _mm512_set1_ps(-1.0f / 3.0f));
            p = _mm512_fmadd_ps(_mm512_mul_ps(p, u2), u, u);
            t = _mm512_mask_blend_ps(small, t, p);
        }
        /* the sign of x, on tanh |x / c| */
        const __m512i sign = _mm512_and_si512(_mm512_castps_si512(v), _mm512_set1_epi32((int)0x80000000u));
        t = _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(t), sign));
        _mm512_storeu_ps(x + i, _mm512_mul_ps(vc, t));
    }
    for (; i < n; i++) x[i] = c * tanhf(x[i] / c);
}

/* compute/x86/avx512/recurrent.c */
void tkv__delta_step_avx512(float *S, const float *q, const float *k, const float *v, float decay, float beta, float scale,
                         uint32_t dk, uint32_t dv, float *o);
void tkv__ssm_step_avx512(float *S, const float *x, const float *B, const float *C, float dt, float dA, uint32_t hd,
                       uint32_t ds, float *y);

const tkv__kernels tkv__kernel_avx512_part = {
    .level = TKV__KERNEL_AVX512,
    .name = "avx512",
    .vec_dot =
        {
            /* float rows in the reference's order (compute/x86/avx512/gemm_float.c) */
            [TKV_TYPE_F32] = tkv__dot_f32_ref_avx512,
            [TKV_TYPE_F16] = tkv__dot_f16_ref_avx512,
            [TKV_TYPE_BF16] = tkv__dot_bf16_ref_avx512,
            [TKV_TYPE_Q8_0] = tkv__dot_q8_0_avx2, /* block-reduced, as Q4_0 (gemm_q4_0_iq4_nl.c) */
            [TKV_TYPE_Q4_0] = tkv__dot_q4_0_avx2,
            [TKV_TYPE_Q4_1] = dot_q4_1,
            [TKV_TYPE_Q5_0] = dot_q5_0, /* lane-wise, the reference's order (the avx2 level's is block-reduced) */
            [TKV_TYPE_Q5_1] = dot_q5_1,
            [TKV_TYPE_Q2_K] = tkv__dot_q2_K_avx2, /* compute/x86/avx2/kernels.c's, block-reduced: gemm_q2_q3_k.c's bits */
            [TKV_TYPE_Q3_K] = tkv__dot_q3_K_avx2,
            [TKV_TYPE_Q4_K] = tkv__dot_q4_K_avx2, /* with gemm_q4_q5_k.c's products */
            [TKV_TYPE_Q5_K] = tkv__dot_q5_K_avx2,
            [TKV_TYPE_Q6_K] = dot_q6_K, /* block-reduced, as gemm_q6_k.c */
            [TKV_TYPE_IQ4_NL] = tkv__dot_iq4_nl_avx2, /* block-reduced as Q4_0 (gemm_q4_0_iq4_nl.c) */
            [TKV_TYPE_IQ4_XS] = tkv__dot_iq4_xs_avx2, /* compute/x86/avx2/kernels.c's, block-reduced as gemm_iq4_xs.c */
            [TKV_TYPE_IQ3_XXS] = tkv__kernel_dot_iq3_xxs_avx2, /* compute/x86/avx2/dot_iq3.c's: the tiled products follow it */
            [TKV_TYPE_IQ3_S] = tkv__kernel_dot_iq3_s_avx2,
            [TKV_TYPE_IQ2_XXS] = tkv__dot_iq2_xxs_avx2, /* compute/x86/avx2/kernels.c's, with compute/x86/avx2/gemm_iq2.c's products */
            [TKV_TYPE_TQ1_0] = tkv__dot_tq1_0_avx2, /* with compute/x86/avx512/gemm_tq1.c's product */
            [TKV_TYPE_IQ2_XS] = tkv__dot_iq2_xs_avx2,
            [TKV_TYPE_IQ2_S] = tkv__dot_iq2_s_avx2,
            [TKV_TYPE_IQ1_S] = tkv__dot_iq1_s_avx512, /* compute/x86/iq1.h's, built here (dot_iq1.c) */
            [TKV_TYPE_IQ1_M] = tkv__dot_iq1_m_avx512,
        },
    /* tiled products (compute/x86/avx512/gemm_q8_0_q4_q5_q6_k.c), bit for bit these vec_dots */
    .gemm =
        {
            [TKV_TYPE_Q8_0] = tkv__gemm_q8_0_avx512, /* compute/x86/avx512/gemm_q4_0_iq4_nl.c */
            [TKV_TYPE_Q4_0] = tkv__gemm_q4_0_avx512,
            [TKV_TYPE_Q4_1] = tkv__gemm_q4_1_avx512, /* compute/x86/avx512/gemm_q4_1_q5.c */
            [TKV_TYPE_Q5_0] = tkv__gemm_q5_0_avx512,
            [TKV_TYPE_Q5_1] = tkv__gemm_q5_1_avx512,
            [TKV_TYPE_Q2_K] = tkv__gemm_q2_K_avx512, /* compute/x86/avx512/gemm_q2_q3_k.c */
            [TKV_TYPE_Q3_K] = tkv__gemm_q3_K_avx512, /* compute/x86/avx512/gemm_q2_q3_k.c */
            [TKV_TYPE_Q4_K] = tkv__gemm_q4_K_avx512,
            [TKV_TYPE_Q5_K] = tkv__gemm_q5_K_avx512,
            [TKV_TYPE_Q6_K] = tkv__gemm_q6_K_avx512, /* compute/x86/avx512/gemm_q6_k.c */
            [TKV_TYPE_IQ4_NL] = tkv__gemm_iq4_nl_avx512,
            [TKV_TYPE_IQ4_XS] = tkv__gemm_iq4_xs_avx512, /* compute/x86/avx512/gemm_iq4_xs.c */
            [TKV_TYPE_IQ3_XXS] = tkv__gemm_iq3_xxs_avx512, /* compute/x86/avx512/gemm_iq3.c */
            [TKV_TYPE_IQ3_S] = tkv__gemm_iq3_s_avx512,
            [TKV_TYPE_IQ2_XXS] = tkv__gemm_iq2_xxs_avx2,
            [TKV_TYPE_TQ1_0] = tkv__gemm_tq1_0_avx512,
            [TKV_TYPE_IQ2_XS] = tkv__gemm_iq2_xs_avx2,
            [TKV_TYPE_IQ2_S] = tkv__gemm_iq2_s_avx2,
            [TKV_TYPE_IQ1_S] = tkv__gemm_iq1_s_avx2, /* bit for bit the dots above: the same C */
            [TKV_TYPE_IQ1_M] = tkv__gemm_iq1_m_avx2,
        },
    .gemv =
        {
            [TKV_TYPE_Q4_0] = tkv__gemv_q4_0_avx512,
            [TKV_TYPE_IQ4_NL] = tkv__gemv_iq4_nl_avx512,
            [TKV_TYPE_Q8_0] = tkv__gemv_q8_0_avx512,
        },
    .packed =
        {
            [TKV_TYPE_Q4_0] = tkv__packed_q4_0_avx512,
            [TKV_TYPE_IQ4_NL] = tkv__packed_iq4_nl_avx512,
            [TKV_TYPE_Q8_0] = tkv__packed_q8_0_avx512, /* compute/x86/avx512/gemm_q4_0_iq4_nl.c */
            [TKV_TYPE_Q4_K] = tkv__packed_q4_K_avx512,
            [TKV_TYPE_Q5_K] = tkv__packed_q5_K_avx512,
            [TKV_TYPE_IQ4_XS] = tkv__packed_iq4_xs_avx512,
            [TKV_TYPE_Q2_K] = tkv__packed_q2_K_avx512,
            [TKV_TYPE_Q3_K] = tkv__packed_q3_K_avx512,
            [TKV_TYPE_Q6_K] = tkv__packed_q6_K_avx512,
            /* with the avx2 IQ2 vec_dots this table keeps (measured on avx2 only: bench/RESULTS.md) */
            [TKV_TYPE_IQ2_XXS] = tkv__packed_iq2_avx2, /* compute/x86/avx2/packed_planes.c */
            [TKV_TYPE_IQ2_XS] = tkv__packed_iq2_avx2,
            [TKV_TYPE_IQ2_S] = tkv__packed_iq2_avx2,
        },
    .lanes =
        {
            [TKV_TYPE_F32] = tkv__lanes_f32_avx512,
            [TKV_TYPE_F16] = tkv__lanes_f16_avx512,
            [TKV_TYPE_BF16] = tkv__lanes_bf16_pairs_avx512, /* gemm_bf16_pairs.c */
        },
    .lanes_kn = {[TKV_TYPE_F32] = 16, [TKV_TYPE_F16] = 16, [TKV_TYPE_BF16] = 16},
    .lanes_ref = {[TKV_TYPE_BF16] = tkv__lanes_bf16_avx512},
    /* Q2_K: the reference's order on CPUs with AVX-512 is the block-reduced one over its repacked rows (the avx2
       level's entries are its plain lane-wise order, as it computes without AVX-512) */
    .vec_dot_ref = {[TKV_TYPE_Q5_K] = dot_q5_K_lanes, [TKV_TYPE_Q2_K] = tkv__dot_q2_K_avx2,
                    [TKV_TYPE_Q3_K] = tkv__dot_q3_K_lanes_avx2, [TKV_TYPE_Q8_0] = dot_q8_0,
                    [TKV_TYPE_Q5_0] = dot_q5_0, [TKV_TYPE_IQ4_XS] = tkv__dot_iq4_xs_lanes_avx2,
                    [TKV_TYPE_Q6_K] = dot_q6_K_lanes},
    .gemm_ref = {[TKV_TYPE_Q5_K] = tkv__gemm_q5_K_lanes_avx512, [TKV_TYPE_Q2_K] = tkv__gemm_q2_K_avx512,
                 [TKV_TYPE_Q3_K] = tkv__gemm_q3_K_lanes_avx512, [TKV_TYPE_Q8_0] = tkv__gemm_q8_0_lanes_avx512,
                 [TKV_TYPE_Q5_0] = tkv__gemm_q5_0_avx512, [TKV_TYPE_IQ4_XS] = tkv__gemm_iq4_xs_lanes_avx512,
                 [TKV_TYPE_Q6_K] = tkv__gemm_q6_K_lanes_avx512},
    .silu = silu,
    .softcap = softcap,
    .swiglu = swiglu,
    .delta_step = tkv__delta_step_avx512,
    .ssm_step = tkv__ssm_step_avx512,
};


#else /* not an x86-64 build with AVX-512 flags: an empty part, never selected */

const tkv__kernels tkv__kernel_avx512_part = {.level = TKV__KERNEL_AVX512, .name = NULL};

#endif
