/*
 * compute/x86/avx2/dot_iq3.c — AVX2 twins of the IQ3_XXS and IQ3_S dot products
 * (compiled with -mavx2 -mfma -mf16c; the avx2 table of compute/x86/avx2/kernels.c
 * points at them, and the avx512 level keeps them).
 *
 * The arithmetic is the reference's, so the model's logits can match its to
 * the bit: per 32-element sub-block the grid bytes (unsigned) times the
 * activations with the weights' signs moved onto them form int16 pairs
 * (maddubs), whose sums take the sub-block's 2 ls + 1 (madd); the eight
 * sub-blocks add into one int32 per lane (lane k: elements 4k..4k+3 of each
 * sub-block, an exact integer either way). Per super-block one fma of
 * d_w d_a with those lanes, then the reference's horizontal sum; IQ3_XXS
 * multiplies the result by 0.25 last.
 */
#include "compute/quant/quant.h"
#include "compute/quant/grids.h"
#include "compute/quant/iq.h"
#include "compute/x86/iq_signs.h"

#include <stddef.h>
#include <string.h>

#if defined(__x86_64__) && defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include <immintrin.h>

#define LOAD256(p) _mm256_loadu_si256((const __m256i *)(const void *)(p))

/* The reference's order of the 8-lane float sum: halves, then pairs, then the last two. */
static inline float hsum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_extractf128_ps(v, 1), _mm256_castps256_ps128(v));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* 0xff in byte j where bit j of the 32 sign bits is set (byte j / 8, bit j % 8). */
static inline __m256i sign_mask(uint32_t bits) {
    const __m256i spread = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2,
                                            3, 3, 3, 3, 3, 3, 3, 3);
    const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ULL);
    const __m256i v = _mm256_and_si256(_mm256_shuffle_epi8(_mm256_set1_epi32((int)bits), spread), bit);
    return _mm256_cmpeq_epi8(v, bit);
}

/* One sub-block's lanes: grid bytes g (0..62) with activations a (-127..127,
   so negating one cannot overflow), times the scale 2 ls + 1. */
static inline __m256i sub_block(__m256i g, const int8_t *a, uint32_t sign_bits, int ls) {
    const __m256i neg = sign_mask(sign_bits);
    const __m256i as = _mm256_sub_epi8(_mm256_xor_si256(LOAD256(a), neg), neg);
    return _mm256_madd_epi16(_mm256_maddubs_epi16(g, as), _mm256_set1_epi16((short)(2 * ls + 1)));
}

float tkv__kernel_dot_iq3_xxs_avx2(size_t n, const void *w, const void *a) {
    const tkv__block_iq3_xxs *x = w;
    const tkv__block_q8_K *y = a;
    __m256 acc = _mm256_setzero_ps();
    for (size_t i = 0; i < n / TKV__QK_K; i++) {
        const uint8_t *qs = x[i].qs;
        /* the 8 sub-blocks' sign bits at once (a table lookup per group was most of the scalar work) */
        _Alignas(32) uint32_t sw[8];
        _mm256_store_si256((__m256i *)(void *)sw, iq_word_signs(LOAD256(qs + 64)));
        __m256i sumi = _mm256_setzero_si256();
        for (int b = 0; b < 8; b++) {
            const uint8_t *ix = qs + 8 * b;
            const __m256i g = _mm256_setr_epi32(
                (int)tkv__iq3xxs_grid[ix[0]], (int)tkv__iq3xxs_grid[ix[1]], (int)tkv__iq3xxs_grid[ix[2]],
                (int)tkv__iq3xxs_grid[ix[3]], (int)tkv__iq3xxs_grid[ix[4]], (int)tkv__iq3xxs_grid[ix[5]],
                (int)tkv__iq3xxs_grid[ix[6]], (int)tkv__iq3xxs_grid[ix[7]]);
            sumi = _mm256_add_epi32(sumi, sub_block(g, y[i].qs + 32 * b, sw[b], (int)(qs[64 + 4 * b + 3] >> 4)));
        }
        const float d = _cvtsh_ss(x[i].d) * y[i].d;
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
    }
    return 0.25f * hsum8(acc);
}

float tkv__kernel_dot_iq3_s_avx2(size_t n, const void *w, const void *a) {
    const tkv__block_iq3_s *x = w;
    const tkv__block_q8_K *y = a;
    /* a pair of sub-blocks' 16 indices as words, sub-block 2p in the low lane: each word its sub-block's qh byte
       (from a word holding qh[2p] and qh[2p + 1]), times 2^(8 - k) for its k-th index, so that bit k is bit 8 */
    const __m256i spread = _mm256_setr_epi8(0, -1, 0, -1, 0, -1, 0, -1, 0, -1, 0, -1, 0, -1, 0, -1, 1, -1, 1, -1, 1, -1, 1,
                                            -1, 1, -1, 1, -1, 1, -1, 1, -1);
    const __m256i pow = _mm256_setr_epi16(256, 128, 64, 32, 16, 8, 4, 2, 256, 128, 64, 32, 16, 8, 4, 2);
    const __m256i bit8 = _mm256_set1_epi16(0x100);
    __m256 acc = _mm256_setzero_ps();
    for (size_t i = 0; i < n / TKV__QK_K; i++) {
        /* the superblock's 64 grid indices at once, stored, then 8 loads a sub-block: the scalar index arithmetic
           was most of the time, and a gather (vpgatherdd) per sub-block was slower than these loads on Zen 1,
           where it is microcoded (bench_kernels -n 2048 -r 1024 -t 1 -l avx2 IQ3_S: 1.17 GB/s gathered, 1.49-1.53
           with each sub-block's indices stored, 1.98 with all 64 at once), as for IQ3_XXS's 8-bit indices on
           Zen 4 */
        _Alignas(32) uint16_t ix[64];
        for (int p = 0; p < 4; p++) {
            uint16_t pair;
            memcpy(&pair, x[i].qh + 2 * p, 2);
            const __m256i lo = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)(const void *)(x[i].qs + 16 * p)));
            const __m256i hb = _mm256_shuffle_epi8(_mm256_set1_epi16((short)pair), spread);
            const __m256i hi = _mm256_and_si256(_mm256_mullo_epi16(hb, pow), bit8);
            _mm256_store_si256((__m256i *)(void *)(ix + 16 * p), _mm256_or_si256(lo, hi));
        }
        __m256i sumi = _mm256_setzero_si256();
        for (int b = 0; b < 8; b++) {
            const uint16_t *k = ix + 8 * b;
            const __m256i g = _mm256_setr_epi32((int)tkv__iq3s_grid[k[0]], (int)tkv__iq3s_grid[k[1]],
                                                (int)tkv__iq3s_grid[k[2]], (int)tkv__iq3s_grid[k[3]],
                                                (int)tkv__iq3s_grid[k[4]], (int)tkv__iq3s_grid[k[5]],
                                                (int)tkv__iq3s_grid[k[6]], (int)tkv__iq3s_grid[k[7]]);
            uint32_t sign_bits;
            memcpy(&sign_bits, x[i].signs + 4 * b, 4);
            const int ls = (x[i].scales[b / 2] >> (4 * (b % 2))) & 0x0f;
            sumi = _mm256_add_epi32(sumi, sub_block(g, y[i].qs + 32 * b, sign_bits, ls));
        }
        const float d = _cvtsh_ss(x[i].d) * y[i].d;
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
    }
    return hsum8(acc);
}

#endif
