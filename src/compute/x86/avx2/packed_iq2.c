/*
 * compute/x86/avx2/packed_iq2.c — the product over IQ2_XXS, IQ2_XS and IQ2_S rows packed as planes of codes
 * and signs (compute/quant/repack.h, "IQ2 planes"), any number of tokens, bit for bit the avx2 vec_dots of
 * compute/x86/avx2/dot_iq2.c (which the avx512 table keeps too).
 *
 * The vec_dots spend most of a one-token product taking the file's indices apart: a grid point is a 64-bit
 * load addressed by bits of a word, four per sub-block, and the signs come from a table by another index. From
 * the planes a sub-block's 32 magnitudes are a 16-bit shift, an and and a vpshufb of the codes, its signs a
 * 16-bit shift and an or of the sign plane (bit b to each byte's bit 7, which vpsignb reads, and bit 0 set so
 * that no byte is zero). Then, as in the vec_dot, vpsignb puts the signs on the activations (the same bytes as
 * its xor and sub: they lie in -127..127), vpmaddubsw, vpmaddwd by the sub-block's two 2 ls + 1 and an add
 * give the block's 8 int32 lanes: the same integers in the same lanes, so the same fma per block with d_w d_a
 * and the same 1/8 of the lanes' sum at the end.
 *
 * A row's block is decoded once for up to 4 tokens (one ymm of lanes and one of floats each); rows go in
 * groups of 16 against chunks of TC tokens, so that a group's rows are read from memory once per chunk and
 * the chunk's activations stay in L2.
 */
#include "compute/gemm.h"
#include "util.h"
#include "compute/quant/quant.h"
#include "compute/quant/repack.h"

#include <stdint.h>
#include <string.h>

#if defined(__x86_64__) && defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include <immintrin.h>

#define TK 4  /* tokens per pass over a row */
#define TC 32 /* tokens per chunk */

enum { AB = sizeof(tkv__block_q8_K), Q8K_QS = 4 };

/* The 2 ls + 1 of a block's 16 halves of sub-blocks, in both 128-bit lanes: byte 2b the low nibble of
   scales[b], 2b + 1 the high one (dot_iq2.c's scales16). */
INLINE __m256i scales16(const uint8_t *scales) {
    const __m128i s8 = _mm_loadl_epi64((const __m128i *)(const void *)scales);
    const __m128i lh = _mm_unpacklo_epi8(_mm_and_si128(s8, _mm_set1_epi8(15)),
                                         _mm_and_si128(_mm_srli_epi16(s8, 4), _mm_set1_epi8(15)));
    return _mm256_broadcastsi128_si256(_mm_add_epi8(_mm_add_epi8(lh, lh), _mm_set1_epi8(1)));
}

/* Sub-block b's scales from scales16: byte 2b to the low lane's int16, 2b + 1 to the high lane's. */
INLINE __m256i sub_scales(__m256i ls, int b) {
    const __m256i ctl0 = _mm256_setr_epi8(0, -128, 0, -128, 0, -128, 0, -128, 0, -128, 0, -128, 0, -128, 0, -128, /**/
                                          1, -128, 1, -128, 1, -128, 1, -128, 1, -128, 1, -128, 1, -128, 1, -128);
    return _mm256_shuffle_epi8(ls, _mm256_add_epi8(ctl0, _mm256_set1_epi8((char)(2 * b))));
}

/*
 * One row (blocks at row, nb of them) against T tokens (yt[t]: token t's q8_K row): out[t] the vec_dot's
 * float accumulator, 8 lanes a token, before its horizontal sum.
 */
INLINE void row_pass(const uint8_t *row, size_t nb, const uint8_t *const *yt, int T, __m256 *out) {
    const __m256i level = _mm256_setr_epi8(8, 25, 43, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, /**/
                                           8, 25, 43, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0);
    const __m256i m3 = _mm256_set1_epi8(3), one = _mm256_set1_epi8(1);
    __m256 acc[TK];
    UNROLL
    for (int t = 0; t < T; t++) acc[t] = _mm256_setzero_ps();
    for (size_t i = 0; i < nb; i++) {
        const uint8_t *blk = row + i * TKV__IQ2_PACK_BLOCK;
        const __m256i c0 = LOAD256(blk + TKV__IQ2_PACK_CODES), c1 = LOAD256(blk + TKV__IQ2_PACK_CODES + 32);
        const __m256i sg = LOAD256(blk + TKV__IQ2_PACK_SIGNS);
        const __m256i ls = scales16(blk + TKV__IQ2_PACK_SCALES);
        __m256i sumi[TK];
        UNROLL
        for (int t = 0; t < T; t++) sumi[t] = _mm256_setzero_si256();
        UNROLL
        for (int b = 0; b < 8; b++) {
            const __m256i q = _mm256_shuffle_epi8(level, _mm256_and_si256(_mm256_srli_epi16(b < 4 ? c0 : c1, 2 * (b % 4)), m3));
            /* sign bit b to bit 7 of its byte (a 16-bit shift by 7 - b keeps each byte's bit b in its byte) */
            const __m256i sb = _mm256_or_si256(b == 7 ? sg : _mm256_slli_epi16(sg, 7 - b), one);
            const __m256i sc = sub_scales(ls, b);
            UNROLL
            for (int t = 0; t < T; t++) {
                const __m256i ya = _mm256_sign_epi8(LOAD256(yt[t] + i * AB + Q8K_QS + 32 * b), sb);
                sumi[t] = _mm256_add_epi32(sumi[t], _mm256_madd_epi16(_mm256_maddubs_epi16(q, ya), sc));
            }
        }
        const float dw = blk_d(blk + TKV__IQ2_PACK_D);
        UNROLL
        for (int t = 0; t < T; t++) {
            float yd;
            memcpy(&yd, yt[t] + i * AB, sizeof yd);
            acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(dw * yd), _mm256_cvtepi32_ps(sumi[t]), acc[t]);
        }
    }
    UNROLL
    for (int t = 0; t < T; t++) out[t] = acc[t];
}

/* Rows [0, nr) of a group (row k at grp + TKV__IQ2_PACK_BLOCK nb k) against T tokens; y[t * ldy + k]. */
INLINE void group_pass(const uint8_t *grp, size_t nb, size_t nr, const uint8_t *const *yt, int T, float *y, size_t ldy) {
    for (size_t k = 0; k < nr; k++) {
        __m256 a[8];
        row_pass(grp + k * nb * TKV__IQ2_PACK_BLOCK, nb, yt, T, a);
        /* reduce8 pairs rows: this row's token t at a[2t], nothing beside it */
        __m256 r[8];
        for (int q = 0; q < 8; q++) r[q] = q % 2 == 0 && q / 2 < T ? a[q / 2] : _mm256_setzero_ps();
        store_tile(y + k, ldy, _mm256_mul_ps(_mm256_set1_ps(0.125f), reduce8(r)), 1, T);
    }
}

NOINLINE void group_pass_any(const uint8_t *grp, size_t nb, size_t nr, const uint8_t *const *yt, int T, float *y,
                             size_t ldy) {
    switch (T) {
    case 4: group_pass(grp, nb, nr, yt, 4, y, ldy); break;
    case 3: group_pass(grp, nb, nr, yt, 3, y, ldy); break;
    case 2: group_pass(grp, nb, nr, yt, 2, y, ldy); break;
    default: group_pass(grp, nb, nr, yt, 1, y, ldy); break;
    }
}

/* kernels.h's packed entry for IQ2_XXS, IQ2_XS and IQ2_S: w the first group, gs from one group to the next. */
void tkv__packed_iq2_avx2(size_t n, const void *w, size_t gs, size_t nr, const void *xq, size_t xrs, size_t n_tok,
                          float *y, size_t ldy) {
    const size_t nb = n / TKV__QK_K;
    const uint8_t *x = xq;
    for (size_t c0 = 0; c0 < n_tok; c0 += TC) {
        const size_t c1 = min_sz(n_tok, c0 + TC);
        for (size_t r = 0; r < nr; r += TKV__PACK_ROWS) {
            const uint8_t *grp = (const uint8_t *)w + r / TKV__PACK_ROWS * gs;
            const size_t rows = min_sz(TKV__PACK_ROWS, nr - r);
            for (size_t t0 = c0; t0 < c1; t0 += TK) {
                const int T = (int)min_sz(TK, c1 - t0);
                const uint8_t *yt[TK];
                for (int t = 0; t < T; t++) yt[t] = x + (t0 + (size_t)t) * xrs;
                group_pass_any(grp, nb, rows, yt, T, y + t0 * ldy + r, ldy);
            }
        }
    }
}

#endif
