/*
 * compute/x86/iq1.h — the IQ1_S and IQ1_M dot products with Q8_K activations, and the unpacking their
 * tiled products share: compiled by the avx2 level (compute/x86/avx2/dot_iq1.c, with the tiled
 * products) and again by the avx512 level (compute/x86/avx512/dot_iq1.c), where the same C has 32 vector
 * registers (AVX-512VL's EVEX forms) instead of 16 and so no spills in the sub-block loop, and BMI2's
 * pdep to put IQ1_S's grid indices together; and by compute/x86/avx2/dot_iq1_bmi2.c, the avx2 level's
 * dots with pdep for both types, on CPUs where pdep is fast: the same integer and float operations in
 * the same order, the same bits.
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
 *
 * Included only by files compiled with at least -mavx2 -mfma -mf16c.
 */
#ifndef TKV_X86_IQ1_H
#define TKV_X86_IQ1_H

#include "compute/quant/quant.h"
#include "compute/quant/grids.h"
#include "compute/quant/iq.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

#if defined(__x86_64__) && defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include <immintrin.h>

static inline float hsum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/*
 * A super-block's grid indices, scales and shift signs are unpacked with a
 * few vector operations into small stack tables before the sub-block loop:
 * doing it per group with scalar shifts and masks cost more than the
 * multiplies themselves (perf: the dot was mostly integer bit-picking).
 */

/* Four grid points from four 11-bit indices, index k in bits 16k.. of v (BMI2's pdep puts them together):
   elements 0-7 of index 0 in bytes 0-7 and so on. The loads' addresses come from general registers, not from
   vector lanes. */
static inline __m256i grid4_of(uint64_t v) {
    const uint64_t *g = tkv__iq1s_grid;
    return _mm256_set_epi64x((long long)g[v >> 48], (long long)g[(v >> 32) & 0xffff], (long long)g[(v >> 16) & 0xffff],
                             (long long)g[v & 0xffff]);
}

/* The same from four indices in memory: one 8-byte load split in general registers, which measured 9% faster
   than four loads of a u16 each (plain IQ1_S and IQ1_M dots, bench/kernel-ab, Zen 3) */
static inline __m256i grid4(const uint16_t *ix) {
    uint64_t v;
    memcpy(&v, ix, sizeof v);
    return grid4_of(v);
}

/* Products of grid bytes g (-1..1) with activations q as int16 pairs:
   maddubs needs an unsigned operand, so |g| with g's sign moved onto q. */
static inline __m256i grid_pairs(__m256i g, __m256i q) {
    return _mm256_maddubs_epi16(_mm256_sign_epi8(g, g), _mm256_sign_epi8(q, g));
}

static inline __m256i load_q(const int8_t *p) {
    return _mm256_loadu_si256((const __m256i *)(const void *)p);
}

/* 3-bit fields by lane: w holds in each int16 lane the 16-bit word that
   lane's field is in, mul = 2^(13 - field's bit offset) moves the field
   to bits 13-15 (bits above it fall off), the shift brings it down. */
static inline __m256i field3(__m256i w, __m256i mul) {
    return _mm256_srli_epi16(_mm256_mullo_epi16(w, mul), 13);
}

/* The 32 grid indices of an IQ1_S super-block: qs[g] | bits 3(g%4).. of qh[g/4] << 8. */
static inline void iq1_s_indices(const tkv__block_iq1_s *x, uint16_t idx[32]) {
    const __m256i qh = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(const void *)x->qh));
    /* lane g (of 16) takes word g/4: bytes 2(g/4), 2(g/4)+1 */
    const __m256i pick_lo = _mm256_setr_epi8(0, 1, 0, 1, 0, 1, 0, 1, 2, 3, 2, 3, 2, 3, 2, 3, 4, 5, 4, 5, 4, 5, 4, 5,
                                             6, 7, 6, 7, 6, 7, 6, 7);
    const __m256i pick_hi = _mm256_add_epi8(pick_lo, _mm256_set1_epi8(8));
    const __m256i mul = _mm256_setr_epi16(8192, 1024, 128, 16, 8192, 1024, 128, 16, 8192, 1024, 128, 16, 8192, 1024,
                                          128, 16);
    const __m256i h0 = _mm256_slli_epi16(field3(_mm256_shuffle_epi8(qh, pick_lo), mul), 8);
    const __m256i h1 = _mm256_slli_epi16(field3(_mm256_shuffle_epi8(qh, pick_hi), mul), 8);
    const __m256i q0 = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)(const void *)x->qs));
    const __m256i q1 = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)(const void *)(x->qs + 16)));
    _mm256_store_si256((__m256i *)(void *)idx, _mm256_or_si256(q0, h0));
    _mm256_store_si256((__m256i *)(void *)(idx + 16), _mm256_or_si256(q1, h1));
}

#if defined(__BMI2__)
/*
 * Where the build has BMI2 (the avx512 level; the avx2 level's
 * compute/x86/avx2/dot_iq1_bmi2.c), sub-block b's four grid
 * indices are put together by pdep in a general register instead: qs[4b..]
 * in the low bytes of four words, qh[b]'s four 3-bit fields above them. The
 * same points, the extraction off the vector ports: the dot 35% faster
 * (bench/RESULTS.md).
 */
static inline __m256i iq1_s_grid4(const tkv__block_iq1_s *x, int b, const uint16_t *idx) {
    (void)idx;
    uint32_t q;
    memcpy(&q, x->qs + 4 * b, sizeof q);
    const uint64_t v = _pdep_u64(q, 0x00ff00ff00ff00ffULL) | _pdep_u64(x->qh[b] & 0x0fffu, 0x0700070007000700ULL);
    return grid4_of(v);
}
#define IQ1_S_UNPACK(x, idx) ((void)0)
#else
static inline __m256i iq1_s_grid4(const tkv__block_iq1_s *x, int b, const uint16_t *idx) {
    (void)x;
    return grid4(idx + 4 * b);
}
#define IQ1_S_UNPACK(x, idx) iq1_s_indices(x, idx)
#endif

static inline float iq1_s_dot(size_t n, const void *w, const void *a) {
    const tkv__block_iq1_s *x = w;
    const tkv__block_q8_K *y = a;
    __m256 acc = _mm256_setzero_ps();
    float accd = 0.0f;
    _Alignas(32) uint16_t idx[32];
    for (size_t i = 0; i < n / TKV__QK_K; i++) {
        IQ1_S_UNPACK(&x[i], idx);
        /* 2s + 1 per sub-block; the shift's part sum_b (+-ls_b) bsum_b, an
           exact integer like the scalar loop's */
        const __m128i qh = _mm_loadu_si128((const __m128i *)(const void *)x[i].qh);
        const __m128i ls8 = _mm_or_si128(_mm_slli_epi16(_mm_and_si128(_mm_srli_epi16(qh, 12), _mm_set1_epi16(7)), 1),
                                         _mm_set1_epi16(1));
        const __m256i ls2 = _mm256_broadcastsi128_si256(ls8); /* sub-block b's factor: word b in every lane */
        const __m128i sls = _mm_sign_epi16(ls8, _mm_or_si128(qh, _mm_set1_epi16(1))); /* bit 15: negative */
        const __m256i sls2 = _mm256_set_m128i(_mm_unpackhi_epi16(sls, sls), _mm_unpacklo_epi16(sls, sls));
        const __m256i bs = _mm256_madd_epi16(load_q((const int8_t *)(const void *)y[i].bsums), sls2);
        __m128i bs4 = _mm_add_epi32(_mm256_castsi256_si128(bs), _mm256_extracti128_si256(bs, 1));
        bs4 = _mm_add_epi32(bs4, _mm_shuffle_epi32(bs4, 0x4e));
        bs4 = _mm_add_epi32(bs4, _mm_shuffle_epi32(bs4, 0xb1));
        const int sumd = _mm_cvtsi128_si32(bs4);
        __m256i sumi = _mm256_setzero_si256();
        _Pragma("GCC unroll 8") /* unrolled, the sub-block's shuffle control folds */
        for (int b = 0; b < 8; b++) {
            const __m256i g = iq1_s_grid4(&x[i], b, idx);
            sumi = _mm256_add_epi32(sumi,
                                    _mm256_madd_epi16(grid_pairs(g, load_q(y[i].qs + 32 * b)),
                                                      _mm256_shuffle_epi8(ls2, _mm256_set1_epi16((short)(0x0100 + 0x0202 * b)))));
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

/*
 * An IQ1_M super-block unpacked: idx[g] group g's grid index, ls[g] the
 * 2s + 1 of the half sub-block group g is in, sls[g] the same signed by
 * group g's shift.
 */
static inline void iq1_m_unpack(const tkv__block_iq1_m *x, uint16_t idx[32], int16_t ls[32], int16_t sls[32]) {
    /* the nibble of qh each group uses, in group order: low, high, low, ... */
    const __m128i qh = _mm_loadu_si128((const __m128i *)(const void *)x->qh), m4 = _mm_set1_epi8(0x0f);
    const __m128i lo = _mm_and_si128(qh, m4), hi = _mm_and_si128(_mm_srli_epi16(qh, 4), m4);
    const __m256i h0 = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(lo, hi)); /* groups 0-15 */
    const __m256i h1 = _mm256_cvtepu8_epi16(_mm_unpackhi_epi8(lo, hi)); /* groups 16-31 */
    const __m256i m7 = _mm256_set1_epi16(7), m8 = _mm256_set1_epi16(8), one = _mm256_set1_epi16(1);
    const __m256i q0 = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)(const void *)x->qs));
    const __m256i q1 = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)(const void *)(x->qs + 16)));
    _mm256_store_si256((__m256i *)(void *)idx, _mm256_or_si256(q0, _mm256_slli_epi16(_mm256_and_si256(h0, m7), 8)));
    _mm256_store_si256((__m256i *)(void *)(idx + 16),
                       _mm256_or_si256(q1, _mm256_slli_epi16(_mm256_and_si256(h1, m7), 8)));
    /* group g's scale field is field g/2 of the words: word g/8, bits 3((g/2)%4).. */
    long long sc;
    memcpy(&sc, x->scales, sizeof sc);
    const __m256i w = _mm256_set1_epi64x(sc);
    const __m256i pick0 = _mm256_setr_epi8(0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3,
                                           2, 3, 2, 3, 2, 3);
    const __m256i pick1 = _mm256_add_epi8(pick0, _mm256_set1_epi8(4));
    const __m256i mul = _mm256_setr_epi16(8192, 8192, 1024, 1024, 128, 128, 16, 16, 8192, 8192, 1024, 1024, 128, 128,
                                          16, 16);
    const __m256i l0 = _mm256_or_si256(_mm256_slli_epi16(field3(_mm256_shuffle_epi8(w, pick0), mul), 1), one);
    const __m256i l1 = _mm256_or_si256(_mm256_slli_epi16(field3(_mm256_shuffle_epi8(w, pick1), mul), 1), one);
    _mm256_store_si256((__m256i *)(void *)ls, l0);
    _mm256_store_si256((__m256i *)(void *)(ls + 16), l1);
    /* sign bit 3 of the nibble: -1, else +1 */
    const __m256i s0 = _mm256_or_si256(_mm256_cmpeq_epi16(_mm256_and_si256(h0, m8), m8), one);
    const __m256i s1 = _mm256_or_si256(_mm256_cmpeq_epi16(_mm256_and_si256(h1, m8), m8), one);
    _mm256_store_si256((__m256i *)(void *)sls, _mm256_sign_epi16(l0, s0));
    _mm256_store_si256((__m256i *)(void *)(sls + 16), _mm256_sign_epi16(l1, s1));
}

/* Four int16 values v[0..3] spread over a sub-block's 16 int16 pair lanes,
   4 lanes each: the madd factor of each group of 8 elements. */
static inline __m256i spread4(const int16_t *v) {
    long long q;
    memcpy(&q, v, sizeof q);
    const __m256i pick = _mm256_setr_epi8(0, 1, 0, 1, 0, 1, 0, 1, 2, 3, 2, 3, 2, 3, 2, 3, 4, 5, 4, 5, 4, 5, 4, 5, 6, 7,
                                          6, 7, 6, 7, 6, 7);
    return _mm256_shuffle_epi8(_mm256_set1_epi64x(q), pick);
}

/*
 * The dot unpacks less than the tiled product's panel: the madd factors
 * came from stack tables through a broadcast and a shuffle each, twice per
 * sub-block, which perf showed among the hottest instructions. Here a sub-block's
 * 2 ls + 1 is one vpshufb of the block's 16 scale bytes (its two halves,
 * one per 128-bit lane, as the madd factor of both products), and the
 * shift's sign is applied to the int32 lanes after that madd (both int16s
 * of a lane are one group's, so the same exact integer as madd with the
 * signed factor): a variable shift brings group's sign bit to bit 31.
 */

/* 2 ls + 1 of the block's 16 halves of sub-blocks, byte h for half h, in both 128-bit lanes. */
static inline __m256i iq1_m_ls16(const tkv__block_iq1_m *x) {
    long long sc;
    memcpy(&sc, x->scales, sizeof sc);
    /* half h's field is field h%4 of word h/4 */
    const __m256i pick = _mm256_setr_epi8(0, 1, 0, 1, 0, 1, 0, 1, 2, 3, 2, 3, 2, 3, 2, 3, 4, 5, 4, 5, 4, 5, 4, 5, 6, 7,
                                          6, 7, 6, 7, 6, 7);
    const __m256i mul = _mm256_setr_epi16(8192, 1024, 128, 16, 8192, 1024, 128, 16, 8192, 1024, 128, 16, 8192, 1024,
                                          128, 16);
    const __m256i f = field3(_mm256_shuffle_epi8(_mm256_set1_epi64x(sc), pick), mul);
    const __m256i l = _mm256_or_si256(_mm256_add_epi16(f, f), _mm256_set1_epi16(1));
    /* packus keeps halves 0-7 in the low lane, 8-15 in the high one: qwords 0 and 2 */
    return _mm256_permute4x64_epi64(_mm256_packus_epi16(l, l), 0x88);
}

/* The 32 grid indices of an IQ1_M super-block: qs[g] | (3 low bits of group g's qh nibble) << 8. */
static inline void iq1_m_indices(const tkv__block_iq1_m *x, const __m128i qh, uint16_t idx[32]) {
    const __m128i m7 = _mm_set1_epi8(7);
    const __m128i lo = _mm_and_si128(qh, m7), hi = _mm_and_si128(_mm_srli_epi16(qh, 4), m7);
    const __m256i q0 = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)(const void *)x->qs));
    const __m256i q1 = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)(const void *)(x->qs + 16)));
    _mm256_store_si256((__m256i *)(void *)idx,
                       _mm256_or_si256(q0, _mm256_slli_epi16(_mm256_cvtepu8_epi16(_mm_unpacklo_epi8(lo, hi)), 8)));
    _mm256_store_si256((__m256i *)(void *)(idx + 16),
                       _mm256_or_si256(q1, _mm256_slli_epi16(_mm256_cvtepu8_epi16(_mm_unpackhi_epi8(lo, hi)), 8)));
}

#if defined(__BMI2__)
/* Where the build has BMI2 (compute/x86/avx2/dot_iq1_bmi2.c), sub-block b's four IQ1_M grid indices by pdep in a
   general register, as the avx512 level's iq1_m_grid8: qs[4b..] in the low bytes of four words, the low 3 bits of
   the groups' qh nibbles (qh[2b], qh[2b + 1], low nibble first) above them. The same points. */
static inline __m256i iq1_m_grid4(const tkv__block_iq1_m *x, int b, const uint16_t *idx) {
    (void)idx;
    uint32_t q;
    uint16_t h;
    memcpy(&q, x->qs + 4 * b, sizeof q);
    memcpy(&h, x->qh + 2 * b, sizeof h);
    const uint64_t v = _pdep_u64(q, 0x00ff00ff00ff00ffULL) | _pdep_u64(h & 0x7777u, 0x0f000f000f000f00ULL);
    return grid4_of(v);
}
#define IQ1_M_INDICES(x, qh, idx) ((void)0)
#else
static inline __m256i iq1_m_grid4(const tkv__block_iq1_m *x, int b, const uint16_t *idx) {
    (void)x;
    return grid4(idx + 4 * b);
}
#define IQ1_M_INDICES(x, qh, idx) iq1_m_indices(x, qh, idx)
#endif

static inline float iq1_m_dot(size_t n, const void *w, const void *a) {
    const tkv__block_iq1_m *x = w;
    const tkv__block_q8_K *y = a;
    const __m256i ones = _mm256_set1_epi8(1), one32 = _mm256_set1_epi32(1);
    /* int16 lane 2j of sub-block b: half 2b + (lane's 128-bit half), high byte zero */
    const __m256i ctl0 = _mm256_setr_epi8(0, -128, 0, -128, 0, -128, 0, -128, 0, -128, 0, -128, 0, -128, 0, -128, /**/
                                          1, -128, 1, -128, 1, -128, 1, -128, 1, -128, 1, -128, 1, -128, 1, -128);
    /* int32 lane k of sub-block b is group 4b + k/2, its sign bit at bit (k/2 % 2) * 16 + 2b + k/4 of the
       mask below; 31 minus that for b = 0 */
    const __m256i cnt0 = _mm256_setr_epi32(31, 31, 15, 15, 30, 30, 14, 14);
    __m256 acc = _mm256_setzero_ps(), accd = _mm256_setzero_ps();
    _Alignas(32) uint16_t idx[32];
    for (size_t i = 0; i < n / TKV__QK_K; i++) {
        const __m128i qh = _mm_loadu_si128((const __m128i *)(const void *)x[i].qh);
        IQ1_M_INDICES(&x[i], qh, idx);
        /* bit j: group 2j's shift sign (qh byte j bit 3); bit 16 + j: group 2j + 1's (bit 7) */
        const uint32_t sg = (uint32_t)_mm_movemask_epi8(_mm_slli_epi16(qh, 4)) |
                            (uint32_t)_mm_movemask_epi8(qh) << 16;
        const __m256i sgv = _mm256_set1_epi32((int)sg);
        const __m256i ls16 = iq1_m_ls16(&x[i]);
        __m256i sumi = _mm256_setzero_si256(), sumd = _mm256_setzero_si256();
        _Pragma("GCC unroll 8") /* unrolled, the sub-block's constants (shuffle and shift controls) fold */
        for (int b = 0; b < 8; b++) {
            const __m256i g = iq1_m_grid4(&x[i], b, idx);
            const __m256i q = load_q(y[i].qs + 32 * b);
            const __m256i ls = _mm256_shuffle_epi8(ls16, _mm256_add_epi8(ctl0, _mm256_set1_epi8((char)(2 * b))));
            sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(grid_pairs(g, q), ls));
            /* each group's activation pairs times its half's scale, signed by its shift (| 1: never zero) */
            const __m256i s = _mm256_or_si256(_mm256_sllv_epi32(sgv, _mm256_sub_epi32(cnt0, _mm256_set1_epi32(2 * b))),
                                              one32);
            sumd = _mm256_add_epi32(sumd, _mm256_sign_epi32(_mm256_madd_epi16(_mm256_maddubs_epi16(ones, q), ls), s));
        }
        const __m256 d = _mm256_set1_ps(y[i].d * _cvtsh_ss(tkv__iq1_m_d(&x[i])));
        acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(sumi), acc);
        accd = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(sumd), accd);
    }
    return hsum8(acc) + TKV__IQ1_DELTA * hsum8(accd);
}

#endif
#endif
