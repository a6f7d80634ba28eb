/*
 * compute/x86/avx2/gemm_iq4_xs_lanes.c — the tiled product of IQ4_XS weights in the reference's
 * lane-wise order (kernels.h's gemm_ref) for
 * prefill and decode steps of several sequences (see gemm.h), AVX2 + FMA +
 * F16C, bit for bit compute/x86/avx2/kernels.c's tkv__dot_iq4_xs_lanes_avx2: per
 * (row, token) and super-block the same 8 integer lanes (lane j: elements
 * 4j .. 4j + 3 of every sub-block, each sub-block's products times its
 * scale), one fma of d_w d_a per super-block and lane, and the vec_dot's
 * horizontal sum.
 *
 * As at avx512 (compute/x86/avx512/gemm_iq4_xs_lanes.c) the panel holds each
 * element's codebook value times its sub-block's scale as an int16, so a
 * half sub-block of one row and one token is one vpmaddwd with the token's
 * 16 quants widened to words (8 lanes of 2 elements), added into a lane sum
 * for the first 16 elements and one for the last 16. Once per super-block
 * vphaddd pairs them into the vec_dot's lanes, in the order
 * 0, 1, 4, 5, 2, 3, 6, 7: the float accumulators keep that order (every
 * float operation is per lane) and the finish puts it right.
 *
 * Tile: 2 rows x 2 tokens: 8 integer accumulators, the token's widened
 * quants and the panel's words as memory operands fill the 16 ymm; the
 * float accumulators live in the stash (a load and a store per super-block).
 */
#include "compute/gemm.h"
#include "util.h"
#include "compute/x86/tile_driver.h"
#include "compute/quant/quant.h"

#include <assert.h>
#include <stdalign.h>
#include <stdint.h>
#include <string.h>

#if defined(__x86_64__) && defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include <immintrin.h>

#define TK 2       /* tokens per tile */
#define KC 8       /* blocks per chunk of K */
#define TC_MAXK 64 /* tokens per chunk when K is cut (the stash holds them all); TILE_TC_DIRECT when it is not */

enum { XB = sizeof(tkv__block_iq4_xs), AB = sizeof(tkv__block_q8_K), Q8K_QS = 4 };

/* One super-block of a group's 2 rows (1 KiB + 32 bytes). */
typedef struct px {
    int16_t w[8][2][32]; /* sub-block c, row k: its 32 elements' (ls - 32) x codebook value, in element order */
    float d[8];          /* row k's fp16 d as a float at d[k] */
} px;

/* Row k's block (at blk) into e. */
static inline void px_row(px *e, int k, const uint8_t *blk) {
    const tkv__block_iq4_xs *x = (const tkv__block_iq4_xs *)(const void *)blk;
    const __m256i book = _mm256_broadcastsi128_si256(LOAD128(tkv__iq4nl_values));
    alignas(16) int16_t sc[8];
    _mm_store_si128((__m128i *)(void *)sc, iq4xs_scales(x));
    UNROLL
    for (int c = 0; c < 8; c++) {
        const __m256i q = _mm256_shuffle_epi8(book, nibbles32(x->qs + 16 * c));
        const __m256i s = _mm256_set1_epi16(sc[c]);
        _mm256_store_si256((__m256i *)(void *)e->w[c][k], _mm256_mullo_epi16(_mm256_cvtepi8_epi16(_mm256_castsi256_si128(q)), s));
        _mm256_store_si256((__m256i *)(void *)(e->w[c][k] + 16),
                           _mm256_mullo_epi16(_mm256_cvtepi8_epi16(_mm256_extracti128_si256(q, 1)), s));
    }
    e->d[k] = f16(x->d);
}

#define LOADW(p) _mm256_load_si256((const __m256i *)(const void *)(p))

/*
 * The tile: 2 rows x T tokens over blocks k0..k1-1 (block i's rows at
 * pan[i - k0]). st: the 2 T float accumulators, [row][token], 8 floats each
 * in vphaddd's lane order.
 */
INLINE void tile(const px *pan, size_t k0, size_t k1, const uint8_t *const *yt, float *st, int init, int T) {
    if (init)
        for (int q = 0; q < 2 * T; q++) _mm256_store_ps(st + 8 * q, _mm256_setzero_ps());
    for (size_t i = k0; i < k1; i++) {
        const px *e = pan + (i - k0);
        const uint8_t *yb[TK];
        __m256i lo[2][TK], hi[2][TK];
        UNROLL
        for (int t = 0; t < T; t++) {
            yb[t] = yt[t] + i * AB;
            UNROLL
            for (int k = 0; k < 2; k++) lo[k][t] = hi[k][t] = _mm256_setzero_si256();
        }
        /* not unrolled: unrolled, gcc schedules all 8 sub-blocks' products first and spills them */
        _Pragma("GCC unroll 1") for (int c = 0; c < 8; c++)
            UNROLL
            for (int t = 0; t < T; t++) {
                const __m256i yl = _mm256_cvtepi8_epi16(LOAD128(yb[t] + Q8K_QS + 32 * c));
                const __m256i yh = _mm256_cvtepi8_epi16(LOAD128(yb[t] + Q8K_QS + 32 * c + 16));
                UNROLL
                for (int k = 0; k < 2; k++) {
                    lo[k][t] = _mm256_add_epi32(lo[k][t], _mm256_madd_epi16(LOADW(e->w[c][k]), yl));
                    hi[k][t] = _mm256_add_epi32(hi[k][t], _mm256_madd_epi16(LOADW(e->w[c][k] + 16), yh));
                }
            }
        UNROLL
        for (int t = 0; t < T; t++) {
            float yd;
            memcpy(&yd, yb[t], sizeof yd);
            UNROLL
            for (int k = 0; k < 2; k++) {
                float *a = st + 8 * (k * T + t);
                const __m256 d = _mm256_set1_ps(e->d[k] * yd);
                const __m256 v = _mm256_cvtepi32_ps(_mm256_hadd_epi32(lo[k][t], hi[k][t]));
                _mm256_store_ps(a, _mm256_fmadd_ps(d, v, _mm256_load_ps(a)));
            }
        }
    }
}

/* The horizontal sums, out: the lanes back in order (vphaddd's 0, 1, 4, 5 | 2, 3, 6, 7), then reduce8's. */
static void finish(const float *st, int T, float *y, size_t ldy, size_t nrow) {
    __m256 a[8];
    for (int q = 0; q < 8; q++)
        a[q] = q / 2 < T ? _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(_mm256_load_ps(st + 8 * ((q % 2) * T + q / 2))),
                                                                  _MM_SHUFFLE(3, 1, 2, 0)))
                         : _mm256_setzero_ps();
    store_tile(y, ldy, reduce8(a), (int)min_sz(2, nrow), T);
}

enum { STT = 2 * TK * 8 /* stash floats per tile */ };

/* The product's buffers (on the stack). */
typedef struct xs_bufs {
    alignas(64) px pan[KC];                         /* 8 KiB */
    alignas(64) float st[(TC_MAXK / TK + 2) * STT]; /* 4 KiB */
} xs_bufs;

/* The product's state: its buffers. */
typedef struct xs_state {
    xs_bufs *b;
} xs_state;

INLINE void xs_panel(void *f, const uint8_t *const *rows, size_t i, size_t k0) {
    xs_state *s = f;
    const size_t o = i * XB;
    px_row(&s->b->pan[i - k0], 0, rows[0] + o);
    px_row(&s->b->pan[i - k0], 1, rows[1] + o);
}

INLINE void xs_tile(void *f, const tile_chunk *c, const tile_step *s) {
    xs_state *q = f;
    (void)c;
    if (s->T == 2) tile(q->b->pan, s->k0, s->k1, s->yt, s->st, s->k0 == 0, 2);
    else tile(q->b->pan, s->k0, s->k1, s->yt, s->st, s->k0 == 0, 1);
}

INLINE void xs_finish(void *f, const float *st, int T, float *y, size_t ldy, size_t nrow) {
    (void)f;
    finish(st, T, y, ldy, nrow);
}

/* The tiled product over the job's rows. */
INLINE void gemm_xs(const tile_job *job) {
    xs_bufs bufs;
    _Static_assert(sizeof bufs + sizeof(tile_chunk) <= 80 * 1024,
                   "the buffers of a product live on the stack (kernels.h: under 80 KiB)");
    xs_state s = {.b = &bufs};
    const size_t nb = job->n / TKV__QK_K;
    const int direct = nb <= KC;
    const tile_shape sh = {.nb = nb, .bs = XB, .kc = KC, .tc = direct ? TILE_TC_DIRECT : TC_MAXK, .rows = 2, .big = TK,
                           .st = bufs.st, .stt = STT, .by_token = 0};
    const tile_ops ops = {.table = NULL, .panel = xs_panel, .tile = xs_tile, .finish = xs_finish};
    tile_product(job, &sh, &ops, &s);
}

void tkv__gemm_iq4_xs_lanes_avx2(size_t n, const void *w, size_t wrs, size_t nr, const void *xq, size_t xrs, size_t n_tok,
                           float *y, size_t ldy) {
    gemm_xs(&(tile_job){n, w, wrs, nr, xq, xrs, n_tok, y, ldy});
}

#endif
