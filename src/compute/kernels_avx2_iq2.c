/*
 * kernels_avx2_iq2.c — the avx2 IQ2_XS vec_dot (compiled with -mavx2 -mfma
 * -mf16c, reached only through the table), in the lanes of kernels_avx2.c's
 * IQ2 dots and gemm_iq2_avx2.c's tiled product, bit for bit.
 *
 * One token's products are decode-bound: the straightforward loop spends
 * some forty scalar instructions per 32 elements pulling the grid and sign
 * indices out of the 16-bit words, looking signs up byte by byte and
 * building the scale vector. Here each block's 32 words are split in two
 * vector passes: the 9-bit grid indices to a small array (the codebook
 * reads stay scalar loads: AVX2 gathers are no faster), the 7-bit sign
 * indices to bytes whose eighth bit is their parity (tkv__iq_signs'
 * rule, so the same sign bytes as that table), and the eight scale bytes
 * to 2 ls + 1 once, one vpshufb per sub-block then placing its two int16
 * halves.
 */
#include "gemm.h"
#include "quant.h"
#include "quant_grids.h"
#include "quant_iq.h"

#include <stdalign.h>
#include <stdint.h>
#include <string.h>

#if defined(__x86_64__) && defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include <immintrin.h>

#define LOAD256(p) _mm256_loadu_si256((const __m256i *)(const void *)(p))

static inline float hsum_f32(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* 0xff in byte j when bit j of the uint32 at p is set, else 0. */
static inline __m256i bit_mask32(const uint32_t *p) {
    const __m256i shuf = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2,
                                          3, 3, 3, 3, 3, 3, 3, 3);
    const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ULL);
    const __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi32((int)*p), shuf);
    return _mm256_cmpeq_epi8(_mm256_and_si256(v, bit), bit);
}

float tkv__dot_iq2_xs_avx2(size_t n, const void *w, const void *a) {
    const tkv__block_iq2_xs *x = w;
    const tkv__block_q8_K *y = a;
    const __m256i m511 = _mm256_set1_epi16(511), m15 = _mm256_set1_epi8(15);
    /* parity of a nibble, as 0x80 */
    const __m256i par = _mm256_setr_epi8(0, -128, -128, 0, -128, 0, 0, -128, -128, 0, 0, -128, 0, -128, -128, 0, /**/
                                         0, -128, -128, 0, -128, 0, 0, -128, -128, 0, 0, -128, 0, -128, -128, 0);
    /* sub-block b's scales: byte 2b (first 16 elements) to the low lane's int16, 2b + 1 to the high lane's;
       the odd bytes (0x80 + 2b) zero the high byte of each int16 */
    const __m256i ctl0 = _mm256_setr_epi8(0, -128, 0, -128, 0, -128, 0, -128, 0, -128, 0, -128, 0, -128, 0, -128, /**/
                                          1, -128, 1, -128, 1, -128, 1, -128, 1, -128, 1, -128, 1, -128, 1, -128);
    __m256 acc = _mm256_setzero_ps();
    for (size_t i = 0; i < n / TKV__QK_K; i++) {
        const uint8_t *qs = (const uint8_t *)x[i].qs;
        const __m256i q0 = LOAD256(qs), q1 = LOAD256(qs + 32);
        alignas(32) uint16_t gi[32];
        alignas(32) uint32_t sw[8]; /* sub-block b's four sign bytes */
        _mm256_store_si256((__m256i *)(void *)gi, _mm256_and_si256(q0, m511));
        _mm256_store_si256((__m256i *)(void *)(gi + 16), _mm256_and_si256(q1, m511));
        /* packus interleaves the 128-bit lanes: groups 0-7, 16-23 | 8-15, 24-31; the permute restores order */
        __m256i sb = _mm256_permute4x64_epi64(_mm256_packus_epi16(_mm256_srli_epi16(q0, 9), _mm256_srli_epi16(q1, 9)),
                                              0xd8);
        const __m256i p = _mm256_xor_si256(_mm256_shuffle_epi8(par, _mm256_and_si256(sb, m15)),
                                           _mm256_shuffle_epi8(par, _mm256_and_si256(_mm256_srli_epi16(sb, 4), m15)));
        sb = _mm256_or_si256(sb, p);
        _mm256_store_si256((__m256i *)(void *)sw, sb);
        /* 2 ls + 1 per 16 elements: byte 2b the low nibble of scales[b], 2b + 1 the high one */
        const __m128i s8 = _mm_loadl_epi64((const __m128i *)(const void *)x[i].scales);
        const __m128i lh = _mm_unpacklo_epi8(_mm_and_si128(s8, _mm_set1_epi8(15)),
                                             _mm_and_si128(_mm_srli_epi16(s8, 4), _mm_set1_epi8(15)));
        const __m256i ls = _mm256_broadcastsi128_si256(_mm_add_epi8(_mm_add_epi8(lh, lh), _mm_set1_epi8(1)));
        __m256i sumi0 = _mm256_setzero_si256(), sumi1 = _mm256_setzero_si256();
        const int8_t *yq = y[i].qs;
        for (int b = 0; b < 8; b++) {
            const uint16_t *g = gi + 4 * b;
            const __m256i q = _mm256_set_epi64x((long long)tkv__iq2xs_grid[g[3]], (long long)tkv__iq2xs_grid[g[2]],
                                                (long long)tkv__iq2xs_grid[g[1]], (long long)tkv__iq2xs_grid[g[0]]);
            const __m256i neg = bit_mask32(sw + b);
            const __m256i sa = _mm256_sub_epi8(_mm256_xor_si256(LOAD256(yq + 32 * b), neg), neg);
            const __m256i sc = _mm256_shuffle_epi8(ls, _mm256_add_epi8(ctl0, _mm256_set1_epi8((char)(2 * b))));
            const __m256i d = _mm256_madd_epi16(_mm256_maddubs_epi16(q, sa), sc);
            /* two chains: integer sums, so the order is free */
            if (b & 1)
                sumi1 = _mm256_add_epi32(sumi1, d);
            else
                sumi0 = _mm256_add_epi32(sumi0, d);
        }
        const __m256i sumi = _mm256_add_epi32(sumi0, sumi1);
        acc = _mm256_fmadd_ps(_mm256_set1_ps(_cvtsh_ss(x[i].d) * y[i].d), _mm256_cvtepi32_ps(sumi), acc);
    }
    return 0.125f * hsum_f32(acc);
}

#endif
