/*
 * compute/x86/q2_q3_k.h — Q2_K and Q3_K weights as their tiled products
 * (compute/x86/avx2/gemm_q2_q3_k.c, compute/x86/avx512/gemm_q2_q3_k.c) multiply them: each quant already
 * times its sub-block's scale, one byte per element. The vec_dot
 * (compute/x86/avx2/kernels.c) multiplies pairs of products by the scale instead; the
 * integers per lane are the same, and the tiles save that multiply per
 * (row, token), which is paid here once per row and block.
 *
 * Included only by files compiled with at least -mavx2.
 */
#ifndef TKV_GEMM_Q23K_H
#define TKV_GEMM_Q23K_H

#include "compute/quant/quant.h"

#include <stdint.h>

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

#endif
#endif
