/*
 * compute/x86/avx2/packed_interleaved.c — the products over packed rows (kernels.h's
 * `packed`; compute/quant/repack.h's interleaved layout) of Q6_K at the
 * avx2 level, bit for bit the level's vec_dot (compute/x86/avx2/kernels.c;
 * IQ4_XS, which this file had too, is block-reduced over a transposed
 * layout now: gemm_iq4_xs.c).
 *
 * One token (generation): a group of 16 rows is read once, in order, block
 * i of its rows from one span of 16 blocks; the rows' accumulators (more
 * than the 16 ymm registers hold) live in an L1 array, so the weights
 * stream once while the token's block stays in registers for 16 rows (the
 * whole matrix is one sequential stream; each row asks for its block a few
 * KiB on as it starts it, a row's lines at a time, which from memory takes
 * a Zen 1 core from 4.7 GB/s (the group's lines asked at once) or 7.1 (the
 * hardware prefetcher alone) to 8.6 for Q6_K). (Rows
 * in sub-groups of 4 over all the blocks, accumulators in registers, read
 * the group 4 times, strided: 1.7-2x slower for a 4096 x 4096 matrix.) A
 * ymm holds one row's 8 lanes, with the vec_dot's
 * integers per lane (exact: any route gives the same value) and its float
 * operations in its order: the block's scale product, convert, fma, the
 * hsum.
 *
 * Two tokens run it once per token, each group from cache the second time;
 * three and more go to the tiled products over the same packed rows
 * (gemm_q8_0_q4_q5_q6_k.c's Q6_K: tile_driver.h reads blocks
 * TKV__PACK_ROWS apart).
 */
#include "compute/gemm.h"
#include "util.h"
#include "compute/x86/q2_q3_k.h"
#include "compute/quant/quant.h"
#include "compute/quant/repack.h"

#include <stdint.h>
#include <string.h>

#if defined(__x86_64__) && defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include <immintrin.h>

enum {
    G = TKV__PACK_ROWS, /* rows per group */
    /* below this many tokens, the one-token product per token (each group
       from cache after the first): for 2 tokens it runs fewer instructions
       than the tiled product, which unpacks the weights per call (callgrind,
       avx2, 64 x 4096: Q8_0 -11%, Q4_K -12%, when they were lane-wise), from 3 on more */
    BY_TOKEN_MAX = 3,
};

#define Q8K_QS 4
#define Q8K_BSUMS 260

/* The vec_dot's horizontal sum: ((v0 + v4) + (v2 + v6)) + ((v1 + v5) + (v3 + v7)). */
static inline float hsum(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* ==== Q6_K ========================================================================== */

/* The first nk rows of a group of Q6_K rows, one token. */
static void q6k_rows(const uint8_t *g, size_t nb, int nk, const uint8_t *ya, float *out) {
    enum { BS = sizeof(tkv__block_q6_K), QBS = sizeof(tkv__block_q8_K), PF = (PREFETCH_AHEAD / (G * BS) + 1) * G * BS };
    __m256 acc[G];
    for (int k = 0; k < G; k++) acc[k] = _mm256_setzero_ps();
    for (size_t i = 0; i < nb; i++) {
        const uint8_t *yb = ya + i * QBS, *blk = g + i * G * BS;
        float yd;
        memcpy(&yd, yb, sizeof yd);
        const __m256i bsums = LOAD256(yb + Q8K_BSUMS);
        for (int k = 0; k < nk; k++) {
            const tkv__block_q6_K *x = (const tkv__block_q6_K *)(const void *)(blk + (size_t)k * BS);
            /* each row asks for its own block PF bytes on: the group's 53 lines asked at once, at the start of
               the step, held the demand loads behind them (Zen 1, bench_kernels -n 2048 -r 131072, one thread:
               4.7 GB/s; without prefetches 7.1; a row's lines at a time 8.6) */
            prefetch_span((const uint8_t *)x + PF, BS);
            /* the 16 scales as words (sign-extended, as set1_epi16 of each makes them) */
            const __m256i s16 = _mm256_cvtepi8_epi16(LOAD128(x->scales));
            /* scales 0-7 in both lanes, and 8-15: each chunk's pair of scales is then one in-lane shuffle
               (compute/x86/q2_q3_k.h's, whose 16 sub-block scales sit as these 16 groups' do) */
            __m256i half[2];
            tkv__q23k_halves(s16, half);
            __m256i sumi = _mm256_setzero_si256(), q[8];
            q6k_quants(x->ql, x->qh, q);
            for (int h = 0; h < 2; h++) {
                UNROLL
                for (int c = 0; c < 4; c++) {
                    /* groups 8h + 2c (low lane) and 8h + 2c + 1 (high lane): [scales[8h + 2c] x 8 | scales[8h + 2c + 1] x 8] */
                    const __m256i p16 = _mm256_maddubs_epi16(q[4 * h + c], LOAD256(yb + Q8K_QS + 128 * h + 32 * c));
                    const __m256i sc = tkv__q23k_pair(half, 4 * h + c);
                    sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(p16, sc));
                }
            }
            /* the -32 offset: 32 sum_g scales[g] bsums[g] off */
            const __m256i corr = _mm256_madd_epi16(bsums, s16);
            sumi = _mm256_sub_epi32(sumi, _mm256_slli_epi32(corr, 5));
            acc[k] = _mm256_fmadd_ps(_mm256_set1_ps(yd * f16(x->d)), _mm256_cvtepi32_ps(sumi), acc[k]);
        }
    }
    for (int k = 0; k < nk; k++) out[k] = hsum(acc[k]);
}

/* ==== the entries ===================================================================== */

typedef void rows_fn(const uint8_t *g, size_t nb, int nk, const uint8_t *ya, float *out);

/* Each token over each group in turn (the group in cache for the next; the last group's rows past nr not computed). */
static void by_token(rows_fn *f, size_t nb, const uint8_t *w, size_t gs, size_t nr, const uint8_t *xq, size_t xrs,
                     size_t n_tok, float *y, size_t ldy) {
    for (size_t r = 0; r < nr; r += G)
        for (size_t t = 0; t < n_tok; t++) f(w + r / G * gs, nb, (int)min_sz(G, nr - r), xq + t * xrs, y + t * ldy + r);
}

PACKED_ENTRY(tkv__packed_q6_K_avx2, tkv__gemm_q6_K_packed_avx2, q6k_rows, TKV__QK_K)

#endif
