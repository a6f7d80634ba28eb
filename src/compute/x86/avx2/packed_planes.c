/*
 * compute/x86/avx2/packed_planes.c — the products over grid types' rows packed element by element
 * (compute/quant/repack.h): IQ2_XXS, IQ2_XS and IQ2_S as planes of codes and signs, IQ3_XXS and IQ3_S as
 * nibbles of code and sign, IQ1_S and IQ1_M as planes of magnitudes and signs; any number of tokens, bit for
 * bit the avx2 vec_dots (compute/x86/avx2/dot_iq2.c, dot_iq3.c, compute/x86/iq1.h; the avx512 table keeps the
 * IQ2 dots, and the IQ2 product with them).
 *
 * The vec_dots spend most of a one-token product taking the file's indices apart: a grid point is a load
 * addressed by bits of the block, four or eight per sub-block, and the signs come from a table by another
 * index. From the packed rows a sub-block's 32 magnitudes are a shift, an and and a vpshufb of the codes
 * (vpshufb turns a code back into its grid level), its signs a shift and an or that put each element's sign
 * bit at bit 7 of a byte that is never zero, which vpsignb reads. Then, as in the vec_dots, vpsignb puts the
 * signs on the activations (the same bytes as their xor and sub: the activations lie in -127..127),
 * vpmaddubsw, vpmaddwd by the sub-block's 2 ls + 1 (IQ2: one per 16 elements) and an add give the block's 8
 * int32 lanes: the same integers in the same lanes, so the same fma per block with d_w d_a, the same
 * horizontal sum and the same last factor (IQ2's 1/8, IQ3_XXS's 1/4).
 *
 * A row's block is decoded once for up to 4 tokens (one ymm of lanes and one of floats each); rows go in
 * groups of 16 against chunks of TC tokens, so that a group's rows are read from memory once per chunk and
 * the chunk's activations stay in L2.
 */
#include "compute/gemm.h"
#include "util.h"
#include "compute/quant/quant.h"
#include "compute/quant/repack.h"
#include "compute/quant/iq.h"

#include <math.h>
#include <stdalign.h>
#include <stdint.h>
#include <string.h>

#if defined(__x86_64__) && defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include <immintrin.h>

#define TK 4  /* tokens per pass over a row */
#define TC 32 /* tokens per chunk */

enum { AB = sizeof(tkv__block_q8_K), Q8K_QS = 4 };

/* Which packed layout, and which levels its codes stand for. */
typedef enum planes_kind { IQ2, IQ3_XXS, IQ3_S, IQ1_S, IQ1_M } planes_kind;

/* From bytes sc (byte j at j and 8 + j of both 128-bit lanes): byte 2b to every int16 of the low lane, byte 2b +
   1 to the high lane's (IQ2: sub-block b's halves, iq2_scales16's pairs), or byte b to all of them (IQ3: one scale a
   sub-block); the odd bytes of the control (0x80) zero the high byte of each int16. */
INLINE __m256i sub_scales(__m256i sc, planes_kind kind, int b) {
    const __m256i ctl0 = _mm256_setr_epi8(0, -128, 0, -128, 0, -128, 0, -128, 0, -128, 0, -128, 0, -128, 0, -128, /**/
                                          1, -128, 1, -128, 1, -128, 1, -128, 1, -128, 1, -128, 1, -128, 1, -128);
    if (kind == IQ2) return _mm256_shuffle_epi8(sc, _mm256_add_epi8(ctl0, _mm256_set1_epi8((char)(2 * b))));
    return _mm256_shuffle_epi8(sc, _mm256_set1_epi16((short)(0x8000 | b)));
}

/* The grid level of each code, in both 128-bit lanes (IQ3: codes 8..15 are 0..7 with the sign bit set). */
INLINE __m256i levels(planes_kind kind) {
    if (kind == IQ2) return _mm256_setr_epi8(8, 25, 43, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, /**/
                                             8, 25, 43, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0);
    if (kind == IQ3_XXS) return _mm256_setr_epi8(4, 12, 20, 28, 36, 44, 52, 62, 4, 12, 20, 28, 36, 44, 52, 62, /**/
                                                 4, 12, 20, 28, 36, 44, 52, 62, 4, 12, 20, 28, 36, 44, 52, 62);
    return _mm256_setr_epi8(1, 3, 5, 7, 9, 11, 13, 15, 1, 3, 5, 7, 9, 11, 13, 15, /**/
                            1, 3, 5, 7, 9, 11, 13, 15, 1, 3, 5, 7, 9, 11, 13, 15);
}

/* The bytes of one block of a layout. */
INLINE size_t block_bytes(planes_kind kind) {
    return kind == IQ2     ? TKV__IQ2_PACK_BLOCK
           : kind == IQ1_S ? TKV__IQ1_PACK_BLOCK(TKV_TYPE_IQ1_S)
           : kind == IQ1_M ? TKV__IQ1_PACK_BLOCK(TKV_TYPE_IQ1_M)
                           : TKV__IQ3_PACK_BLOCK;
}

/*
 * IQ2 and IQ3: one row (blocks at row, nb of them) against T tokens (yt[t]: token t's q8_K row): out[t] the
 * vec_dot's float accumulator, 8 lanes a token, before its horizontal sum.
 */
INLINE void row_pass(planes_kind kind, const uint8_t *row, size_t nb, const uint8_t *const *yt, int T, __m256 *out) {
    const __m256i level = levels(kind);
    const __m256i one = _mm256_set1_epi8(1), m3 = _mm256_set1_epi8(3), m15 = _mm256_set1_epi8(15);
    const size_t bs = block_bytes(kind);
    __m256 acc[TK];
    UNROLL
    for (int t = 0; t < T; t++) acc[t] = _mm256_setzero_ps();
    for (size_t i = 0; i < nb; i++) {
        const uint8_t *blk = row + i * bs;
        __m256i sc, sg = _mm256_setzero_si256(), c[4];
        uint16_t dh;
        if (kind == IQ2) {
            c[0] = LOAD256(blk + TKV__IQ2_PACK_CODES), c[1] = LOAD256(blk + TKV__IQ2_PACK_CODES + 32);
            sg = LOAD256(blk + TKV__IQ2_PACK_SIGNS);
            sc = iq2_scales16(blk + TKV__IQ2_PACK_SCALES);
            memcpy(&dh, blk + TKV__IQ2_PACK_D, 2);
        } else {
            UNROLL
            for (int p = 0; p < 4; p++) c[p] = LOAD256(blk + TKV__IQ3_PACK_CODES + 32 * p);
            sc = _mm256_broadcastq_epi64(_mm_loadl_epi64((const __m128i *)(const void *)(blk + TKV__IQ3_PACK_SCALES)));
            memcpy(&dh, blk + TKV__IQ3_PACK_D, 2);
        }
        __m256i sumi[TK];
        UNROLL
        for (int t = 0; t < T; t++) sumi[t] = _mm256_setzero_si256();
        UNROLL
        for (int b = 0; b < 8; b++) {
            __m256i q, s;
            if (kind == IQ2) {
                q = _mm256_shuffle_epi8(level, _mm256_and_si256(_mm256_srli_epi16(c[b / 4], 2 * (b % 4)), m3));
                /* sign bit b to bit 7 of its byte (a 16-bit shift by 7 - b keeps each byte's bit b in its byte) */
                s = _mm256_or_si256(b == 7 ? sg : _mm256_slli_epi16(sg, 7 - b), one);
            } else {
                const __m256i nib = _mm256_and_si256(b % 2 ? _mm256_srli_epi16(c[b / 2], 4) : c[b / 2], m15);
                q = _mm256_shuffle_epi8(level, nib);
                /* the nibble's bit 3 (the sign) to bit 7: a byte under 16 shifted by 4 stays in its byte */
                s = _mm256_or_si256(_mm256_slli_epi16(nib, 4), one);
            }
            const __m256i scb = sub_scales(sc, kind, b);
            UNROLL
            for (int t = 0; t < T; t++) {
                const __m256i ya = _mm256_sign_epi8(LOAD256(yt[t] + i * AB + Q8K_QS + 32 * b), s);
                sumi[t] = _mm256_add_epi32(sumi[t], _mm256_madd_epi16(_mm256_maddubs_epi16(q, ya), scb));
            }
        }
        const float dw = f16(dh);
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

/*
 * IQ1_S and IQ1_M (compute/x86/iq1.h's dots): one row against T tokens. The grid's products come from the
 * planes: vpmaddubsw of the magnitude (0 or 1) with the activation signed by the sign plane gives the dots'
 * int16 pairs (theirs: |g| with g's sign moved onto the activation; where g is 0 both are 0). The shift's part is
 * the dots': IQ1_S's activation sums by sub-block times the signed 2 s + 1, an exact integer per block and token
 * into a float by fmaf; IQ1_M's pairs of activations times each half's 2 ls + 1, signed by its group's shift,
 * in 8 lanes. out[t]: the grid part's 8 float lanes; outd[t]: the shift part's (IQ1_S: lane 0 only).
 */
INLINE void row_pass_iq1(planes_kind kind, const uint8_t *row, size_t nb, const uint8_t *const *yt, int T,
                         __m256 *out, __m256 *outd) {
    const __m256i one = _mm256_set1_epi8(1), one32 = _mm256_set1_epi32(1);
    /* IQ1_M: int16 lane 2j of sub-block b takes half 2b + (the lane's 128-bit half) (iq1_m_dot's ctl0), and
       int32 lane k of sub-block b is group 4b + k / 2, its shift's sign at bit 31 after a shift left by cnt0 - 2b */
    const __m256i ctl0 = _mm256_setr_epi8(0, -128, 0, -128, 0, -128, 0, -128, 0, -128, 0, -128, 0, -128, 0, -128, /**/
                                          1, -128, 1, -128, 1, -128, 1, -128, 1, -128, 1, -128, 1, -128, 1, -128);
    const __m256i cnt0 = _mm256_setr_epi32(31, 31, 15, 15, 30, 30, 14, 14);
    const size_t bs = block_bytes(kind);
    __m256 acc[TK], accd[TK];
    float accs[TK];
    UNROLL
    for (int t = 0; t < T; t++) acc[t] = accd[t] = _mm256_setzero_ps(), accs[t] = 0.0f;
    for (size_t i = 0; i < nb; i++) {
        const uint8_t *blk = row + i * bs;
        const __m256i mags = LOAD256(blk + TKV__IQ1_PACK_MAGS), sgns = LOAD256(blk + TKV__IQ1_PACK_SIGNS);
        __m256i ls, sls2 = _mm256_setzero_si256(), shifts = _mm256_setzero_si256();
        uint16_t dh;
        if (kind == IQ1_S) {
            /* 2 s + 1 per sub-block (word b), and the same signed by the shift (bit 3 to bit 15) */
            const __m128i v = _mm_cvtepu8_epi16(_mm_loadl_epi64((const __m128i *)(const void *)(blk + TKV__IQ1S_PACK_SCALES)));
            const __m128i ls8 = _mm_or_si128(_mm_slli_epi16(_mm_and_si128(v, _mm_set1_epi16(7)), 1), _mm_set1_epi16(1));
            const __m128i sls = _mm_sign_epi16(ls8, _mm_or_si128(_mm_slli_epi16(v, 12), _mm_set1_epi16(1)));
            ls = _mm256_broadcastsi128_si256(ls8);
            sls2 = _mm256_set_m128i(_mm_unpackhi_epi16(sls, sls), _mm_unpacklo_epi16(sls, sls));
            memcpy(&dh, blk + TKV__IQ1S_PACK_D, 2);
        } else {
            ls = _mm256_broadcastsi128_si256(LOAD128(blk + TKV__IQ1M_PACK_LS));
            int32_t sh;
            memcpy(&sh, blk + TKV__IQ1M_PACK_SHIFTS, 4);
            shifts = _mm256_set1_epi32(sh);
            memcpy(&dh, blk + TKV__IQ1M_PACK_D, 2);
        }
        __m256i sumi[TK], sumd[TK];
        UNROLL
        for (int t = 0; t < T; t++) sumi[t] = sumd[t] = _mm256_setzero_si256();
        UNROLL
        for (int b = 0; b < 8; b++) {
            const __m256i g = _mm256_and_si256(b ? _mm256_srli_epi16(mags, b) : mags, one);
            const __m256i s = _mm256_or_si256(b == 7 ? sgns : _mm256_slli_epi16(sgns, 7 - b), one);
            const __m256i lsb = kind == IQ1_S ? _mm256_shuffle_epi8(ls, _mm256_set1_epi16((short)(0x0100 + 0x0202 * b)))
                                              : _mm256_shuffle_epi8(ls, _mm256_add_epi8(ctl0, _mm256_set1_epi8((char)(2 * b))));
            const __m256i sd = _mm256_or_si256(_mm256_sllv_epi32(shifts, _mm256_sub_epi32(cnt0, _mm256_set1_epi32(2 * b))),
                                               one32);
            UNROLL
            for (int t = 0; t < T; t++) {
                const __m256i q = LOAD256(yt[t] + i * AB + Q8K_QS + 32 * b);
                sumi[t] = _mm256_add_epi32(sumi[t], _mm256_madd_epi16(_mm256_maddubs_epi16(g, _mm256_sign_epi8(q, s)), lsb));
                if (kind == IQ1_M)
                    sumd[t] = _mm256_add_epi32(
                        sumd[t], _mm256_sign_epi32(_mm256_madd_epi16(_mm256_maddubs_epi16(one, q), lsb), sd));
            }
        }
        const float dw = f16(dh);
        UNROLL
        for (int t = 0; t < T; t++) {
            float yd;
            memcpy(&yd, yt[t] + i * AB, sizeof yd);
            const float d = yd * dw;
            acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi[t]), acc[t]);
            if (kind == IQ1_M) {
                accd[t] = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumd[t]), accd[t]);
            } else { /* the activation sums (bsums, after the 256 quants) times the signed scales, one integer */
                const __m256i bsd = _mm256_madd_epi16(LOAD256(yt[t] + i * AB + Q8K_QS + TKV__QK_K), sls2);
                __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(bsd), _mm256_extracti128_si256(bsd, 1));
                s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0x4e));
                s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0xb1));
                accs[t] = fmaf(d, (float)_mm_cvtsi128_si32(s4), accs[t]);
            }
        }
    }
    UNROLL
    for (int t = 0; t < T; t++) out[t] = acc[t], outd[t] = kind == IQ1_M ? accd[t] : _mm256_set1_ps(accs[t]);
}

/* Rows [0, nr) of a group (row k at grp + block_bytes nb k) against T tokens; y[t * ldy + k]. */
INLINE void group_pass(planes_kind kind, const uint8_t *grp, size_t nb, size_t nr, const uint8_t *const *yt, int T,
                       float *y, size_t ldy) {
    /* the vec_dots' last factor: IQ2's 1/8 (its 2 ls + 1 halves ls + 1/2, its grid is 4x), IQ3_XXS's 1/4 */
    const float last = kind == IQ2 ? 0.125f : kind == IQ3_XXS ? 0.25f : 1.0f;
    for (size_t k = 0; k < nr; k++) {
        const uint8_t *row = grp + k * nb * block_bytes(kind);
        __m256 a[TK], ad[TK];
        if (kind == IQ1_S || kind == IQ1_M) row_pass_iq1(kind, row, nb, yt, T, a, ad);
        else row_pass(kind, row, nb, yt, T, a);
        /* reduce8 pairs rows: this row's token t at r[2t], nothing beside it */
        __m256 r[8];
        for (int q = 0; q < 8; q++) r[q] = q % 2 == 0 && q / 2 < T ? a[q / 2] : _mm256_setzero_ps();
        const __m256 sums = reduce8(r);
        __m256 v;
        if (kind == IQ1_S || kind == IQ1_M) { /* the dots' hsum(acc) + 1/8 (IQ1_M: hsum(accd); IQ1_S: accd) */
            __m256 dsum;
            if (kind == IQ1_M) {
                for (int q = 0; q < 8; q++) r[q] = q % 2 == 0 && q / 2 < T ? ad[q / 2] : _mm256_setzero_ps();
                dsum = reduce8(r);
            } else {
                alignas(32) float l0[8] = {0};
                for (int t = 0; t < T; t++) l0[t] = _mm256_cvtss_f32(ad[t]);
                dsum = _mm256_load_ps(l0);
            }
            v = _mm256_add_ps(sums, _mm256_mul_ps(_mm256_set1_ps(TKV__IQ1_DELTA), dsum));
        } else {
            v = kind == IQ3_S ? sums : _mm256_mul_ps(_mm256_set1_ps(last), sums);
        }
        store_tile(y + k, ldy, v, 1, T);
    }
}

NOINLINE void group_pass_any(planes_kind kind, const uint8_t *grp, size_t nb, size_t nr, const uint8_t *const *yt,
                             int T, float *y, size_t ldy) {
#define PASS(K)                                                                                                        \
    switch (T) {                                                                                                       \
    case 4: group_pass(K, grp, nb, nr, yt, 4, y, ldy); break;                                                          \
    case 3: group_pass(K, grp, nb, nr, yt, 3, y, ldy); break;                                                          \
    case 2: group_pass(K, grp, nb, nr, yt, 2, y, ldy); break;                                                          \
    default: group_pass(K, grp, nb, nr, yt, 1, y, ldy); break;                                                         \
    }
    switch (kind) {
    case IQ2: PASS(IQ2) break;
    case IQ3_XXS: PASS(IQ3_XXS) break;
    case IQ3_S: PASS(IQ3_S) break;
    case IQ1_S: PASS(IQ1_S) break;
    case IQ1_M: PASS(IQ1_M) break;
    }
#undef PASS
}

/* kernels.h's packed entry: w the first group, gs from one group to the next. */
static void packed(planes_kind kind, size_t n, const void *w, size_t gs, size_t nr, const void *xq, size_t xrs,
                   size_t n_tok, float *y, size_t ldy) {
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
                group_pass_any(kind, grp, nb, rows, yt, T, y + t0 * ldy + r, ldy);
            }
        }
    }
}

void tkv__packed_iq2_avx2(size_t n, const void *w, size_t gs, size_t nr, const void *xq, size_t xrs, size_t n_tok,
                          float *y, size_t ldy) {
    packed(IQ2, n, w, gs, nr, xq, xrs, n_tok, y, ldy);
}

void tkv__packed_iq3_xxs_avx2(size_t n, const void *w, size_t gs, size_t nr, const void *xq, size_t xrs,
                              size_t n_tok, float *y, size_t ldy) {
    packed(IQ3_XXS, n, w, gs, nr, xq, xrs, n_tok, y, ldy);
}

void tkv__packed_iq3_s_avx2(size_t n, const void *w, size_t gs, size_t nr, const void *xq, size_t xrs, size_t n_tok,
                            float *y, size_t ldy) {
    packed(IQ3_S, n, w, gs, nr, xq, xrs, n_tok, y, ldy);
}

void tkv__packed_iq1_s_avx2(size_t n, const void *w, size_t gs, size_t nr, const void *xq, size_t xrs, size_t n_tok,
                            float *y, size_t ldy) {
    packed(IQ1_S, n, w, gs, nr, xq, xrs, n_tok, y, ldy);
}

void tkv__packed_iq1_m_avx2(size_t n, const void *w, size_t gs, size_t nr, const void *xq, size_t xrs, size_t n_tok,
                            float *y, size_t ldy) {
    packed(IQ1_M, n, w, gs, nr, xq, xrs, n_tok, y, ldy);
}

#endif
