/*
 * compute/x86/avx512/packed_interleaved.c — the products over packed rows (kernels.h's
 * `packed`; compute/quant/repack.h's interleaved layout) of Q6_K and IQ4_XS
 * at the avx512 level, bit for bit the level's vec_dots (compute/x86/avx512/kernels.c).
 *
 * One token (generation): each group of 16 rows is read once, in order,
 * block i of its 16 rows from one span (the whole matrix is one sequential
 * stream), each row pair's bytes asked for PREFETCH_AHEAD on as it is read:
 * spread so, one thread reads Q6_K from memory at 41-42 GB/s, where the
 * whole span of 16 rows asked for at once, a span or more ahead, read 37-38
 * (bench_kernels -n 2048 -r 262144 -T 1 -c 2048, Zen 5; the read probe: 44;
 * IQ4_XS, bound by its arithmetic, 34 -> 35); a zmm holds a row pair's 8 lanes
 * each (row 2p in lanes 0-7, 2p + 1 in 8-15), as the tiled products do, so
 * the token's per-block work (its broadcast quants, its
 * scale) is done once for 16 rows and every multiply covers two rows. The
 * integers are the vec_dot's (exact, so any route to them gives the same
 * value) and the float operations the same in the same order per lane: the
 * block's scale product, convert, fma into the row's lanes, then the sums of
 * compute/x86/avx512/util.h's reduce16, the vec_dot's hsum order. IQ4_XS
 * follows the vec_dot this level keeps from avx2.
 *
 * Decode steps of a few tokens (a few sequences, or one with drafts) run
 * the same product two tokens at a time: each row pair unpacked once for
 * both, each token's operations the one-token product's (PACKED_ENTRY2 and
 * its per-type bound); Q4_0, IQ4_NL, Q8_0, Q4_K, Q5_K, Q2_K and Q3_K (gemm_q4_0_iq4_nl.c, gemm_q4_q5_k.c, gemm_q2_q3_k.c)
 * read any batch from their transposed packed rows directly. More tokens (prefill, bigger steps) go to the
 * tiled products over the same packed rows (gemm_q8_0_q4_q5_q6_k.c,
 * gemm_iq4_xs.c: tile_driver.h reads blocks TKV__PACK_ROWS
 * blocks apart).
 */
#include "compute/gemm.h"
#include "util.h"
#include "compute/quant/quant.h"
#include "compute/quant/repack.h"

#include <stdalign.h>
#include <stdint.h>
#include <string.h>

#if defined(__x86_64__) && defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && \
    defined(__AVX512VNNI__) && defined(__AVX2__) && defined(__F16C__)
#include <immintrin.h>

enum {
    G = TKV__PACK_ROWS, /* rows per group */
    PAIRS = G / 2,
};

#define Q8K_QS 4
#define Q8K_BSUMS 260

/* The 16 rows' sums (v[p]: row pair p's 8 + 8 lanes) in the vec_dot's order, lane k = row k:
   reduce16 takes a[q] as rows 2 (q % 2), 2 (q % 2) + 1 of "token" q / 2, which is rows 2q, 2q + 1 here. */
static inline __m512 group_sums(const __m512 v[PAIRS]) {
    _Static_assert(PAIRS == 8, "reduce16 sums 8 row pairs");
    return reduce16(v);
}

/* Rows past nrow are not written. */
static inline void store_group(const __m512 v[PAIRS], float *y, size_t nrow) {
    _mm512_mask_storeu_ps(y, (__mmask16)((1u << (nrow < G ? nrow : G)) - 1u), group_sums(v));
}

typedef void group_fn(const uint8_t *g, size_t nb, const uint8_t *ya, float *out, size_t nrow);

typedef void group2_fn(const uint8_t *g, size_t nb, const uint8_t *const *ya, float *const *out, size_t nrow);

/*
 * Tokens two at a time over each group (two unpacks a row pair once for both), the last of an odd count by
 * one; each group's passes follow one another, so the group comes from cache after the first.
 */
static void by_pairs(group_fn *one, group2_fn *two, size_t nb, const uint8_t *w, size_t gs, size_t nr,
                     const uint8_t *xq, size_t xrs, size_t n_tok, float *y, size_t ldy) {
    for (size_t r = 0; r < nr; r += G) {
        const uint8_t *g = w + r / G * gs;
        size_t t = 0;
        for (; t + 2 <= n_tok; t += 2) {
            const uint8_t *ya[2] = {xq + t * xrs, xq + (t + 1) * xrs};
            float *out[2] = {y + t * ldy + r, y + (t + 1) * ldy + r};
            two(g, nb, ya, out, nr - r);
        }
        if (t < n_tok) one(g, nb, xq + t * xrs, y + t * ldy + r, nr - r);
    }
}

/*
 * A packed entry whose type has a two-token group product two: up to pairs_max tokens by pairs (and one),
 * more through the tiled product over the packed rows, which builds a panel of unpacked weights per call
 * and pays for it only over more tokens. Each type's pairs_max is where the two cross on one thread
 * (bench_kernels -n N -r R -t T, packed rows, at 768 x 32000, 2048 x 2048 and 5632 x 2048: by pairs
 * Q6_K 3 tokens 0.99 against 1.38 ms at the first shape, even at 4 tokens, behind from 5; IQ4_XS ahead to 4,
 * behind from 5).
 */
#define PACKED_ENTRY2(name, tiled, one, two, block_elems, pairs_max)                                             \
    void name(size_t n, const void *w, size_t gs, size_t nr, const void *xq, size_t xrs, size_t n_tok, float *y,  \
              size_t ldy) {                                                                                    \
        if (n_tok > (pairs_max)) tiled(n, w, gs, nr, xq, xrs, n_tok, y, ldy);                                  \
        else by_pairs(one, two, n / (block_elems), w, gs, nr, xq, xrs, n_tok, y, ldy);                         \
    }

/* ==== Q6_K ========================================================================== */

/*
 * Words [2c x 8 | 2c + 1 x 8 | 16 + 2c x 8 | 17 + 2c x 8] of sc (row a's 16
 * group scales at words 0-15, row b's at 16-31): the scales of chunk c's
 * groups 2c (lanes 0-3 of each row) and 2c + 1 (lanes 4-7).
 */
static inline __m512i group_pairs(__m512i sc, int c) {
    const __m512i idx0 = _mm512_set_epi16(17, 17, 17, 17, 17, 17, 17, 17, 16, 16, 16, 16, 16, 16, 16, 16, /**/
                                          1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0);
    return _mm512_permutexvar_epi16(_mm512_add_epi16(idx0, _mm512_set1_epi16((short)(2 * c))), sc);
}

/*
 * One group of Q6_K rows, T tokens (1 or 2: ya[t], out[t]). A row pair's
 * quants are unpacked once for the T tokens (the unpacking is about half of
 * a token's instructions); each token's sums are the one-token product's
 * (the same operations in the same order), so T = 2 gives the bits of two
 * one-token calls. The token's chunks are broadcast from memory per use:
 * 2 x 8 accumulators, the 8 unpacked chunks and the scales fill the
 * registers.
 */
INLINE void q6k_rows(const uint8_t *g, size_t nb, const uint8_t *const *ya, float *const *out, size_t nrow, int T) {
    enum { BS = sizeof(tkv__block_q6_K), QBS = sizeof(tkv__block_q8_K) };
    __m512 acc[2][PAIRS];
    for (int t = 0; t < T; t++)
        for (int p = 0; p < PAIRS; p++) acc[t][p] = _mm512_setzero_ps();
    for (size_t i = 0; i < nb; i++) {
        const uint8_t *blk = g + i * G * BS, *yb[2];
        __m512i bsums[2];
        __m512 yd[2];
        /* one token: its 8 chunks of 32 quants in both halves, kept in registers for the 8 row pairs */
        __m512i y[8];
        for (int t = 0; t < T; t++) {
            yb[t] = ya[t] + i * QBS;
            float d;
            memcpy(&d, yb[t], sizeof d);
            yd[t] = _mm512_set1_ps(d);
            bsums[t] = BCAST256(yb[t] + Q8K_BSUMS);
        }
        if (T == 1) {
            UNROLL
            for (int c = 0; c < 8; c++) y[c] = BCAST256(yb[0] + Q8K_QS + 32 * c);
        }
        for (int p = 0; p < PAIRS; p++) {
            const tkv__block_q6_K *a = (const tkv__block_q6_K *)(const void *)(blk + 2 * p * BS), *b = a + 1;
            prefetch_span(blk + 2 * p * BS + PREFETCH_AHEAD, 2 * BS); /* a row pair at a time: the top comment */
            const __m512i sc = halves_epi(_mm256_cvtepi8_epi16(LOAD128(a->scales)), _mm256_cvtepi8_epi16(LOAD128(b->scales)));
            const __m512 dw = halves_f16(&a->d, &b->d);
            __m512i q[8];
            q6k_quants_pair(a, b, q);
            for (int t = 0; t < T; t++) {
                /* from -32 (bsums . scales): the q - 32 offset */
                __m512i s = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_slli_epi32(_mm512_madd_epi16(bsums[t], sc), 5));
                UNROLL
                for (int c = 0; c < 8; c++) {
                    const __m512i yc = T == 1 ? y[c] : BCAST256(yb[t] + Q8K_QS + 32 * c);
                    s = _mm512_dpwssd_epi32(s, _mm512_maddubs_epi16(q[c], yc), group_pairs(sc, c));
                }
                acc[t][p] = _mm512_fmadd_ps(_mm512_mul_ps(dw, yd[t]), _mm512_cvtepi32_ps(s), acc[t][p]);
            }
        }
    }
    for (int t = 0; t < T; t++) store_group(acc[t], out[t], nrow);
}

static void q6k_group(const uint8_t *g, size_t nb, const uint8_t *ya, float *out, size_t nrow) {
    q6k_rows(g, nb, &ya, &out, nrow, 1);
}

static void q6k_group2(const uint8_t *g, size_t nb, const uint8_t *const *ya, float *const *out, size_t nrow) {
    q6k_rows(g, nb, ya, out, nrow, 2);
}

PACKED_ENTRY2(tkv__packed_q6_K_avx512, tkv__gemm_q6_K_packed_avx512, q6k_group, q6k_group2, TKV__QK_K, 4)

/* ==== IQ4_XS ======================================================================== */

/*
 * Two IQ4_XS blocks' sub-block scales as dwords [a's 8 | b's 8]: compute/x86/util.h's iq4xs_scales of each, both
 * rows at once in the 128-bit lanes of one ymm (the per-pair work is a fifth of the product's instructions).
 */
static inline __m512i iq4xs_scales_pair(const tkv__block_iq4_xs *a, const tkv__block_iq4_xs *b) {
    uint16_t ha, hb;
    uint32_t la, lb;
    memcpy(&ha, &a->scales_h, sizeof ha), memcpy(&hb, &b->scales_h, sizeof hb);
    memcpy(&la, a->scales_l, sizeof la), memcpy(&lb, b->scales_l, sizeof lb);
    const __m256i lv = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_cvtsi32_si128((int)la)), _mm_cvtsi32_si128((int)lb), 1);
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    /* per lane, bytes 2j, 2j + 1: scales_l[j]'s low and high nibble, then as words */
    const __m256i lo = _mm256_unpacklo_epi8(_mm256_and_si256(lv, m4), _mm256_and_si256(_mm256_srli_epi16(lv, 4), m4));
    const __m256i lo16 = _mm256_unpacklo_epi8(lo, _mm256_setzero_si256());
    const __m256i h = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_set1_epi16((short)ha)), _mm_set1_epi16((short)hb), 1);
    const __m256i up = _mm256_mullo_epi16(h, _mm256_setr_epi16(1 << 14, 1 << 12, 1 << 10, 1 << 8, 1 << 6, 1 << 4, 1 << 2, 1, /**/
                                                               1 << 14, 1 << 12, 1 << 10, 1 << 8, 1 << 6, 1 << 4, 1 << 2, 1));
    const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(up, 10), _mm256_set1_epi16(0x30));
    return _mm512_cvtepi16_epi32(_mm256_sub_epi16(_mm256_or_si256(lo16, hi), _mm256_set1_epi16(32)));
}

/*
 * One group of IQ4_XS rows, T tokens (1 or 2; a row pair's nibbles, codebook
 * values and scales unpacked once for both). Per sub-block and row pair each
 * lane's 4 products q y by vpdpbusd (the codebook + 128 by the token's
 * quants, from -128 x their sums), times the sub-block's scale: the vec_dot's
 * 8 integer lanes per row (its |q| by y signed as q in words, then vpdpwssd
 * with the scale), two instructions fewer per sub-block.
 */
INLINE void iq4xs_rows(const uint8_t *g, size_t nb, const uint8_t *const *ya, float *const *out, size_t nrow, int T) {
    enum { BS = sizeof(tkv__block_iq4_xs), QBS = sizeof(tkv__block_q8_K) };
    __m512 acc[2][PAIRS];
    for (int t = 0; t < T; t++)
        for (int p = 0; p < PAIRS; p++) acc[t][p] = _mm512_setzero_ps();
    /* the codebook + 128 (1..241, unsigned): vpdpbusd's left operand */
    const __m512i book = _mm512_xor_si512(_mm512_broadcast_i32x4(LOAD128(tkv__iq4nl_values)), _mm512_set1_epi8((char)0x80));
    const __m512i m4 = _mm512_set1_epi8(0x0f);
    for (size_t i = 0; i < nb; i++) {
        const uint8_t *blk = g + i * G * BS;
        float yd[2];
        /* each token's sub-block c in both halves, and -128 x the sum of each 4 of its quants (what the + 128
           adds to a lane of vpdpbusd) */
        __m512i yv[2][8], neg[2][8];
        for (int t = 0; t < T; t++) {
            const uint8_t *yb = ya[t] + i * QBS;
            memcpy(&yd[t], yb, sizeof yd[t]);
            UNROLL
            for (int c = 0; c < 8; c++) {
                yv[t][c] = BCAST256(yb + Q8K_QS + 32 * c);
                neg[t][c] = _mm512_sub_epi32(_mm512_setzero_si512(),
                                             _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_set1_epi8((char)0x80), yv[t][c]));
            }
        }
        for (int p = 0; p < PAIRS; p++) {
            const tkv__block_iq4_xs *a = (const tkv__block_iq4_xs *)(const void *)(blk + 2 * p * BS), *b = a + 1;
            prefetch_span(blk + 2 * p * BS + PREFETCH_AHEAD, 2 * BS); /* as q6k_rows' */
            /* dwords 0-7: a's sub-block scales, 8-15: b's */
            const __m512i sc = iq4xs_scales_pair(a, b);
            __m512i s[2] = {_mm512_setzero_si512(), _mm512_setzero_si512()};
            UNROLL
            for (int c = 0; c < 8; c++) {
                /* [a's 16 bytes, twice | b's, twice]; the low nibbles in 128-bit lanes 0 and 2, the high in 1 and 3 */
                const __m512i raw = halves_epi(_mm256_broadcastsi128_si256(LOAD128(a->qs + 16 * c)),
                                               _mm256_broadcastsi128_si256(LOAD128(b->qs + 16 * c)));
                const __m512i nib = _mm512_and_si512(_mm512_mask_srli_epi16(raw, 0xff00ff00u, raw, 4), m4);
                const __m512i q = _mm512_shuffle_epi8(book, nib);
                const __m512i scc = _mm512_permutexvar_epi32(
                    _mm512_add_epi32(_mm512_set_epi32(8, 8, 8, 8, 8, 8, 8, 8, 0, 0, 0, 0, 0, 0, 0, 0), _mm512_set1_epi32(c)), sc);
                /* each lane's 4 q y exactly (the vec_dot's two words of |q| by y signed as q, added), then its
                   sub-block's scale: the vec_dot's vpdpwssd lanes */
                for (int t = 0; t < T; t++)
                    s[t] = _mm512_add_epi32(s[t], _mm512_mullo_epi32(_mm512_dpbusd_epi32(neg[t][c], q, yv[t][c]), scc));
            }
            const __m512 dw = halves_f16(&a->d, &b->d);
            for (int t = 0; t < T; t++)
                acc[t][p] = _mm512_fmadd_ps(_mm512_mul_ps(dw, _mm512_set1_ps(yd[t])), _mm512_cvtepi32_ps(s[t]), acc[t][p]);
        }
    }
    for (int t = 0; t < T; t++) store_group(acc[t], out[t], nrow);
}

static void iq4xs_group(const uint8_t *g, size_t nb, const uint8_t *ya, float *out, size_t nrow) {
    iq4xs_rows(g, nb, &ya, &out, nrow, 1);
}

static void iq4xs_group2(const uint8_t *g, size_t nb, const uint8_t *const *ya, float *const *out, size_t nrow) {
    iq4xs_rows(g, nb, ya, out, nrow, 2);
}

PACKED_ENTRY2(tkv__packed_iq4_xs_avx512, tkv__gemm_iq4_xs_packed_avx512, iq4xs_group, iq4xs_group2, TKV__QK_K, 4)

#endif
