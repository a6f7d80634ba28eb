/*
 * compute/x86/q2_q3_k.h — Q2_K and Q3_K weights as their tiled products
 * (compute/x86/avx2/gemm_q2_q3_k_lanes.c, compute/x86/avx512/gemm_q3_k_lanes.c) multiply them: each quant already
 * times its sub-block's scale, one byte per element. The vec_dot
 * (compute/x86/avx2/kernels.c) multiplies pairs of products by the scale instead; the
 * integers per lane are the same, and the tiles save that multiply per
 * (row, token), which is paid here once per row and block.
 *
 * The vec_dot's own integer lanes of one block (tkv__q2k_lanes,
 * tkv__q3k_lanes) are here too, for the vec_dot and the one-token products
 * over packed rows.
 *
 * Included only by files compiled with at least -mavx2.
 */
#ifndef TKV_GEMM_Q23K_H
#define TKV_GEMM_Q23K_H

#include "compute/quant/quant.h"

#include <stdint.h>
#include <string.h>

#if defined(__x86_64__) && defined(__AVX2__)
#include <immintrin.h>

/* Offsets in a Q8_K block: the quants and the sums of 16. */
#define Q23K_Q8K_QS 4
#define Q23K_Q8K_BSUMS 260

/*
 * The 256 elements of a Q2_K (three = 0) or Q3_K block, 32 bytes per
 * quarter-chunk g (elements 32 g .. 32 g + 31 of the block; 16 of
 * sub-block 2 g, then 16 of 2 g + 1). Element byte = low byte of
 * mul[v] * sc + bias: v its quant's index (Q2_K: q, 0..3; Q3_K: q + 4, 0..7)
 * and sc its sub-block's scale. mul: 8 int16 per 128-bit half, the same in
 * both. The caller picks mul and bias so the values fit its multiply.
 */
static inline void tkv__q23k_scaled(const uint8_t *blk, int three, __m256i mul, short bias, __m256i out[8]) {
    /* the low byte of each word, twice per 128-bit half: an 8-entry table per half */
    const __m256i low = _mm256_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, 0, 2, 4, 6, 8, 10, 12, 14, /**/
                                         0, 2, 4, 6, 8, 10, 12, 14, 0, 2, 4, 6, 8, 10, 12, 14);
    const __m256i m3 = _mm256_set1_epi8(3), one = _mm256_set1_epi8(1), vb = _mm256_set1_epi16(bias);
    int sc[16];
    const uint8_t *qs;
    __m256i hm = _mm256_setzero_si256();
    if (three) {
        const tkv__block_q3_K *x = (const tkv__block_q3_K *)(const void *)blk;
        int8_t s8[16];
        tkv__q3_K_scales(x->scales, s8);
        for (int b = 0; b < 16; b++) sc[b] = s8[b];
        qs = x->qs;
        hm = _mm256_loadu_si256((const __m256i *)(const void *)x->hmask);
    } else {
        const tkv__block_q2_K *x = (const tkv__block_q2_K *)(const void *)blk;
        for (int b = 0; b < 16; b++) sc[b] = x->scales[b] & 0x0f;
        qs = x->qs;
    }
    for (int c = 0; c < 2; c++) {
        const __m256i bits = _mm256_loadu_si256((const __m256i *)(const void *)(qs + 32 * c));
        for (int j = 0; j < 4; j++) {
            const int g = 4 * c + j;
            const __m256i s = _mm256_set_m128i(_mm_set1_epi16((short)sc[2 * g + 1]), _mm_set1_epi16((short)sc[2 * g]));
            const __m256i table = _mm256_shuffle_epi8(_mm256_add_epi16(_mm256_mullo_epi16(mul, s), vb), low);
            __m256i v = _mm256_and_si256(_mm256_srli_epi16(bits, 2 * j), m3);
            if (three) /* bit g of hmask[l]: element 32 g + l's q is not lowered by 4 */
                v = _mm256_or_si256(v, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hm, g), one), 2));
            out[g] = _mm256_shuffle_epi8(table, v);
        }
    }
}

/* The 16 mins of a Q2_K block as int16 (vpmaddwd with the activation's sums of 16). */
static inline __m256i tkv__q2k_mins(const uint8_t *blk) {
    const tkv__block_q2_K *x = (const tkv__block_q2_K *)(const void *)blk;
    const __m128i s = _mm_loadu_si128((const __m128i *)(const void *)x->scales);
    return _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(s, 4), _mm_set1_epi8(0x0f)));
}

/*
 * The vec_dot's scale multipliers for quarter-chunk g (0..7) from the
 * block's 16 sub-block scales as words (s16: sub-block b at word b): sub-block
 * 2g's scale in the low 128 bits, 2g + 1's in the high (vpmaddwd with the
 * chunk's pairs: lanes 0-3 take the first 16 elements, 4-7 the next).
 * tkv__q23k_halves first puts words 0-7 in both lanes of h[0] and 8-15 in
 * both of h[1] (once per block), so each chunk's multipliers are one in-lane
 * shuffle.
 */
static inline void tkv__q23k_halves(__m256i s16, __m256i h[2]) {
    h[0] = _mm256_permute4x64_epi64(s16, 0x44);
    h[1] = _mm256_permute4x64_epi64(s16, 0xee);
}

static inline __m256i tkv__q23k_pair(const __m256i h[2], int g) {
    const char a = (char)(4 * (g % 4)), b = (char)(4 * (g % 4) + 1), c = (char)(4 * (g % 4) + 2), d = (char)(4 * (g % 4) + 3);
    return _mm256_shuffle_epi8(h[g / 4], _mm256_setr_epi8(a, b, a, b, a, b, a, b, a, b, a, b, a, b, a, b, /**/
                                                          c, d, c, d, c, d, c, d, c, d, c, d, c, d, c, d));
}

/*
 * The 8 integer lanes of a Q2_K block's products with a Q8_K block's quants
 * yq (compute/x86/avx2/kernels.c's vec_dot and the products over packed rows
 * of both levels): per quarter-chunk g (elements 32 g .. 32 g + 31: bits 2j
 * of qs[32 c ..], g = 4 c + j) vpmaddubsw's pairs, times their sub-block's
 * scale by vpmaddwd (lanes 0-3 sub-block 2 g, 4-7 2 g + 1), added.
 */
static inline __m256i tkv__q2k_lanes(const tkv__block_q2_K *x, const void *yq_) {
    const uint8_t *yq = yq_;
    const __m256i m3 = _mm256_set1_epi8(3);
    __m256i h[2];
    tkv__q23k_halves(_mm256_cvtepu8_epi16(_mm_and_si128(_mm_loadu_si128((const __m128i *)(const void *)x->scales),
                                                        _mm_set1_epi8(0x0f))), h);
    __m256i sumi = _mm256_setzero_si256();
    for (int c = 0; c < 2; c++) {
        const __m256i bits = _mm256_loadu_si256((const __m256i *)(const void *)(x->qs + 32 * c));
        for (int j = 0; j < 4; j++) {
            const __m256i q = _mm256_and_si256(_mm256_srli_epi16(bits, 2 * j), m3);
            const __m256i pairs = _mm256_maddubs_epi16(q, _mm256_loadu_si256((const __m256i *)(const void *)(yq + 128 * c + 32 * j)));
            sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(tkv__q23k_pair(h, 4 * c + j), pairs));
        }
    }
    return sumi;
}

/*
 * tkv__q3_K_scales's 16 sub-block scales (-32..31) as words, sub-block b at
 * word b: the low nibbles of scales[0..7], then their high nibbles; the two
 * high bits of b from scales[8 + b % 4], bits 2 (b / 4) up (one variable
 * shift per 4 sub-blocks).
 */
static inline __m256i tkv__q3k_scales16(const uint8_t s12[12]) {
    uint32_t h;
    memcpy(&h, s12 + 8, sizeof h);
    const __m128i v = _mm_loadl_epi64((const __m128i *)(const void *)s12), m4 = _mm_set1_epi8(0x0f);
    const __m128i lo = _mm_unpacklo_epi64(_mm_and_si128(v, m4), _mm_and_si128(_mm_srli_epi16(v, 4), m4));
    const __m128i hi = _mm_and_si128(_mm_srlv_epi32(_mm_set1_epi32((int)h), _mm_setr_epi32(0, 2, 4, 6)), _mm_set1_epi8(3));
    return _mm256_cvtepi8_epi16(_mm_sub_epi8(_mm_or_si128(lo, _mm_slli_epi16(hi, 4)), _mm_set1_epi8(32)));
}

/* 4 (y_2m + y_2m+1) in each word m of quarter-chunk g's activations (g < 8): what tkv__q3k_lanes_y4's q + 4 adds to
   the chunk's pairs. A token's, computed once for every row it meets. */
static inline void tkv__q3k_y4(const void *yq_, __m256i y4[8]) {
    const uint8_t *yq = yq_;
    for (int g = 0; g < 8; g++)
        y4[g] = _mm256_maddubs_epi16(_mm256_set1_epi8(4), _mm256_loadu_si256((const __m256i *)(const void *)(yq + 32 * g)));
}

/* The same lanes for a Q3_K block from q + 4 (0..7: the low bits, + 4 where the element's hmask bit is set) by yq,
   less y4 (tkv__q3k_y4 of yq): the vec_dot's pairs, |q| by yq signed as q, as the same words (they stay within
   7 x 127 x 2), in fewer instructions. */
static inline __m256i tkv__q3k_lanes_y4(const tkv__block_q3_K *x, const void *yq_, const __m256i y4[8]) {
    const uint8_t *yq = yq_;
    const __m256i m3 = _mm256_set1_epi8(3), four = _mm256_set1_epi8(4);
    __m256i hs[2];
    tkv__q23k_halves(tkv__q3k_scales16(x->scales), hs);
    const __m256i hm = _mm256_loadu_si256((const __m256i *)(const void *)x->hmask);
    __m256i sumi = _mm256_setzero_si256();
    for (int c = 0; c < 2; c++) {
        const __m256i bits = _mm256_loadu_si256((const __m256i *)(const void *)(x->qs + 32 * c));
        for (int j = 0; j < 4; j++) {
            const int g = 4 * c + j;
            /* hmask bit g of each byte to bit 2 (a shift within the byte's own bits: by at most 5 right, 2 left) */
            const __m256i h = g >= 2 ? _mm256_srli_epi16(hm, g - 2) : _mm256_slli_epi16(hm, 2 - g);
            const __m256i u = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(bits, 2 * j), m3), _mm256_and_si256(h, four));
            const __m256i y = _mm256_loadu_si256((const __m256i *)(const void *)(yq + 32 * g));
            const __m256i pairs = _mm256_sub_epi16(_mm256_maddubs_epi16(u, y), y4[g]);
            sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(tkv__q23k_pair(hs, g), pairs));
        }
    }
    return sumi;
}

/* The same for a Q3_K block: q = low bits - 4 where the element's hmask bit is clear, by |q| and signed yq (the
   vec_dot's pairs, as tkv__q3k_lanes_y4 forms them). */
static inline __m256i tkv__q3k_lanes(const tkv__block_q3_K *x, const void *yq) {
    __m256i y4[8];
    tkv__q3k_y4(yq, y4);
    return tkv__q3k_lanes_y4(x, yq, y4);
}

#endif
#endif
