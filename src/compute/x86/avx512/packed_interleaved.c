/*
 * compute/x86/avx512/packed_interleaved.c — the products over packed rows (kernels.h's
 * `packed`; compute/quant/repack.h's interleaved layout) of Q6_K at the
 * avx512 level, bit for bit the level's vec_dot (compute/x86/avx512/kernels.c;
 * IQ4_XS, which this file had too, is block-reduced over a transposed
 * layout now: gemm_iq4_xs.c).
 *
 * One token (generation): each group of 16 rows is read once, in order,
 * block i of its 16 rows from one span (the whole matrix is one sequential
 * stream), each row pair's bytes asked for PREFETCH_AHEAD on as it is read:
 * spread so, one thread reads Q6_K from memory at 41-42 GB/s, where the
 * whole span of 16 rows asked for at once, a span or more ahead, read 37-38
 * (bench_kernels -n 2048 -r 262144 -T 1 -c 2048, Zen 5; the read probe: 44);
 * a zmm holds a row pair's 8 lanes
 * each (row 2p in lanes 0-7, 2p + 1 in 8-15), as the tiled products do, so
 * the token's per-block work (its broadcast quants, its
 * scale) is done once for 16 rows and every multiply covers two rows. The
 * integers are the vec_dot's (exact, so any route to them gives the same
 * value) and the float operations the same in the same order per lane: the
 * block's scale product, convert, fma into the row's lanes, then the sums of
 * compute/x86/avx512/util.h's reduce16, the vec_dot's hsum order.
 *
 * Decode steps of a few tokens (a few sequences, or one with drafts) run
 * the same product two tokens at a time: each row pair unpacked once for
 * both, each token's operations the one-token product's (PACKED_ENTRY2 and
 * its per-type bound); Q4_0, IQ4_NL, Q8_0, Q4_K, Q5_K, Q2_K, Q3_K and IQ4_XS (gemm_q4_0_iq4_nl.c,
 * gemm_q4_q5_k.c, gemm_q2_q3_k.c, gemm_iq4_xs.c) read any batch from their transposed packed rows directly.
 * More tokens (prefill, bigger steps) go to the tiled product over the same packed rows
 * (gemm_q8_0_q4_q5_q6_k.c: tile_driver.h reads blocks TKV__PACK_ROWS blocks apart).
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
 * Q6_K 3 tokens 0.99 against 1.38 ms at the first shape, even at 4 tokens, behind from 5).
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


#endif
