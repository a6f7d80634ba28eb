/*
 * compute/x86/avx512/gemm_q3_k_lanes.c — the tiled product of Q3_K weights in the reference's
 * lane-wise order (kernels.h's gemm_ref; the default, block-reduced order is gemm_q2_q3_k.c's),
 * AVX-512 F/BW/VL + VNNI, bit for bit the vec_dot_ref this level keeps from avx2
 * (compute/x86/avx2/kernels.c's tkv__dot_q3_K_lanes_avx2): the same 8 integer lanes per (row,
 * token) and block, the same fmas in the same order.
 *
 * Register layout as compute/x86/avx512/gemm_q8_0_q4_q5_q6_k.c's: a zmm holds rows 2p (lanes 0-7) and
 * 2p + 1 (lanes 8-15) of one token. Tile: 4 rows (2 pairs) x 4 tokens.
 *
 * The panel holds each element's quant times its scale (compute/x86/q2_q3_k.h) as an
 * unsigned byte, so a lane's 4 products per quarter-chunk are one vpdpbusd
 * with the token's bytes broadcast: 8 per pair, token and block, against
 * the 16 of a vpmaddubsw and a scale multiply. Q3_K's q sc lies in
 * -124..128, stored as q sc + 124 (0..252), and each block's lanes start
 * from -124 * (the lane's sum of activations), from a per-token table.
 * Then, per block, as the vec_dot: the fma of d_a d with the lanes.
 */
#include "compute/gemm.h"
#include "util.h"
#include "compute/x86/tile_driver.h"
#include "compute/x86/q2_q3_k.h"
#include "compute/quant/quant.h"

#include <assert.h>
#include <stdalign.h>
#include <stdint.h>
#include <string.h>

#if defined(__x86_64__) && defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && \
    defined(__AVX512VNNI__) && defined(__AVX2__) && defined(__F16C__)
#include <immintrin.h>

#define TK 4          /* tokens per tile */
#define KC 8          /* blocks per chunk of K */
#define TC_MAXK 64    /* tokens per chunk when K is cut (the stash holds them all); TILE_TC_DIRECT when it is not */
#define TAB_BYTES 49152

enum { Q3B = sizeof(tkv__block_q3_K), AB = sizeof(tkv__block_q8_K) };

/* One block of a row pair (576 bytes). */
typedef struct pq {
    uint8_t w[8][64]; /* per quarter-chunk: row a's 32 scaled quants, then row b's */
    float d[16];      /* d: row a's x 8, row b's x 8 */
} pq;

/* Q3_K, one block of a tile's tokens: -124 x each lane's sum of activations. */
typedef struct tq {
    int32_t c[TK][8];
} tq;

/* One block of rows a and b: each element's q sc + 124 as a byte, by quarter-chunk, and the rows' d. */
static void pq_fill(pq *e, const uint8_t *a, const uint8_t *b) {
    /* (v - 4) sc + 124 = q sc + 124 */
    const __m256i mul = _mm256_setr_epi16(-4, -3, -2, -1, 0, 1, 2, 3, -4, -3, -2, -1, 0, 1, 2, 3);
    __m256i wa[8], wb[8];
    tkv__q23k_scaled(a, 1, mul, 124, wa);
    tkv__q23k_scaled(b, 1, mul, 124, wb);
    for (int g = 0; g < 8; g++) _mm512_store_si512(e->w[g], halves_epi(wa[g], wb[g]));
    const tkv__block_q3_K *xa = (const tkv__block_q3_K *)(const void *)a, *xb = (const tkv__block_q3_K *)(const void *)b;
    _mm512_store_ps(e->d, halves_ps(f16(xa->d), f16(xb->d)));
}

/* A token's lanes' start for one block, -124 x (sum of its 4 activations per quarter-chunk). */
static inline void tq_fill(int32_t c[8], const uint8_t *blk) {
    const __m256i k = _mm256_set1_epi8(124);
    __m256i s = _mm256_setzero_si256();
    for (int g = 0; g < 8; g++) s = _mm256_dpbusd_epi32(s, k, LOAD256(blk + Q23K_Q8K_QS + 32 * g));
    _mm256_storeu_si256((__m256i *)(void *)c, _mm256_sub_epi32(_mm256_setzero_si256(), s));
}

/*
 * The tile: 4 rows x T tokens over blocks k0..k1-1 (row pair p of block i
 * at pan[2 (i - k0) + p]; the token table tab[i]). st: the 2 T
 * accumulators, [pair][token], 16 floats each.
 */
INLINE void tile(const pq *pan, size_t k0, size_t k1, const uint8_t *const *yt, const tq *tab, float *st, int init,
                 int T) {
    __m512 acc[2][TK];
    UNROLL
    for (int p = 0; p < 2; p++)
        UNROLL
        for (int t = 0; t < T; t++) acc[p][t] = init ? _mm512_setzero_ps() : _mm512_load_ps(st + 16 * (p * T + t));
    for (size_t i = k0; i < k1; i++) {
        const pq *e = pan + 2 * (i - k0);
        const uint8_t *yb[TK];
        __m512i s[2][TK];
        UNROLL
        for (int t = 0; t < T; t++) {
            yb[t] = yt[t] + i * AB;
            s[0][t] = s[1][t] = BCAST256(tab[i].c[t]);
        }
        UNROLL
        for (int g = 0; g < 8; g++) {
            const __m512i w0 = _mm512_load_si512(e[0].w[g]), w1 = _mm512_load_si512(e[1].w[g]);
            UNROLL
            for (int t = 0; t < T; t++) {
                const __m512i yv = BCAST256(yb[t] + Q23K_Q8K_QS + 32 * g);
                s[0][t] = _mm512_dpbusd_epi32(s[0][t], w0, yv);
                s[1][t] = _mm512_dpbusd_epi32(s[1][t], w1, yv);
            }
        }
        UNROLL
        for (int t = 0; t < T; t++) {
            float yd;
            memcpy(&yd, yb[t], sizeof yd);
            const __m512 dt = _mm512_set1_ps(yd);
            UNROLL
            for (int p = 0; p < 2; p++)
                acc[p][t] = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_load_ps(e[p].d), dt), _mm512_cvtepi32_ps(s[p][t]), acc[p][t]);
        }
    }
    UNROLL
    for (int p = 0; p < 2; p++)
        UNROLL
        for (int t = 0; t < T; t++) _mm512_store_ps(st + 16 * (p * T + t), acc[p][t]);
}

INLINE void tile_any(const pq *pan, size_t k0, size_t k1, const uint8_t *const *yt, const tq *tab, float *st, int init,
                     int T) {
    switch (T) {
    case 4: tile(pan, k0, k1, yt, tab, st, init, 4); break;
    case 2: tile(pan, k0, k1, yt, tab, st, init, 2); break;
    default: tile(pan, k0, k1, yt, tab, st, init, 1); break;
    }
}

enum { STT = 2 * TK * 16 /* stash floats per tile */ };

/* A Q3_K product's buffers (on the stack). */
typedef struct q3_bufs {
    alignas(64) pq pan[2 * KC];                     /* 9 KiB */
    alignas(64) float st[(TC_MAXK / TK + 2) * STT]; /* 9 KiB */
    alignas(64) tq tab[TAB_BYTES / sizeof(tq)];     /* 48 KiB */
} q3_bufs;

/* The product's state: its buffers and constants (a local whose fields the compiler keeps in registers). */
typedef struct q3_state {
    q3_bufs *b;
    size_t nb; /* blocks per row */
} q3_state;

/* Tile j's table at tab + j nb. */
INLINE void q3_table(void *f, const tile_job *job, const tile_chunk *c) {
    q3_state *s = f;
    const size_t nb = s->nb;
    assert((size_t)c->ntile * nb <= sizeof s->b->tab / sizeof s->b->tab[0]);
    for (int j = 0; j < c->ntile; j++)
        for (int t = 0; t < c->len[j]; t++) {
            const uint8_t *row = job->xq + (c->t0 + c->start[j] + (size_t)t) * job->xrs;
            for (size_t i = 0; i < nb; i++) tq_fill(s->b->tab[(size_t)j * nb + i].c[t], row + i * AB);
        }
}

INLINE void q3_panel(void *f, const uint8_t *const *rows, size_t i, size_t k0) {
    q3_state *s = f;
    const size_t o = i * Q3B;
    pq_fill(&s->b->pan[2 * (i - k0)], rows[0] + o, rows[1] + o);
    pq_fill(&s->b->pan[2 * (i - k0) + 1], rows[2] + o, rows[3] + o);
}

INLINE void q3_tile(void *f, const tile_chunk *c, const tile_step *s) {
    q3_state *q = f;
    (void)c;
    tile_any(q->b->pan, s->k0, s->k1, s->yt, q->b->tab + (size_t)s->j * q->nb, s->st, s->k0 == 0, s->T);
}

INLINE void q3_finish(void *f, const float *st, int T, float *y, size_t ldy, size_t nrow) {
    (void)f;
    store_pairs4(st, T, y, ldy, nrow);
}

INLINE void gemm3(const tile_job *job) {
    q3_bufs bufs;
    _Static_assert(sizeof bufs + sizeof(tile_chunk) <= 80 * 1024,
                   "the buffers of a product live on the stack (kernels.h: under 80 KiB)");
    q3_state s = {.b = &bufs, .nb = job->n / TKV__QK_K};
    const size_t nb = s.nb;
    const int direct = nb <= KC;
    /* tokens per chunk: the tiles' tables must fit (the last, shorter chunk may have 2 more tiles than tc / TK) */
    const size_t cap = direct ? TILE_TC_DIRECT : TC_MAXK, tiles = TAB_BYTES / sizeof(tq) / nb;
    size_t tc = tiles >= 3 ? TK * (tiles - 2) : 1;
    if (tc > cap) tc = cap;
    assert(direct || (tc / TK + 2) * STT <= sizeof bufs.st / sizeof bufs.st[0]);
    const tile_shape sh = {.nb = nb, .bs = Q3B, .kc = KC, .tc = tc, .rows = 4, .big = TK,
                           .st = bufs.st, .stt = STT, .by_token = 0};
    const tile_ops ops = {.table = q3_table, .panel = q3_panel, .tile = q3_tile, .finish = q3_finish};
    tile_product(job, &sh, &ops, &s);
}

/* Q3_K in the reference's lane-wise order (kernels.h's gemm_ref; the default order is gemm_q2_q3_k.c's) */
void tkv__gemm_q3_K_lanes_avx512(size_t n, const void *w, size_t wrs, size_t nr, const void *xq, size_t xrs,
                                 size_t n_tok, float *y, size_t ldy) {
    gemm3(&(tile_job){n, w, wrs, nr, xq, xrs, n_tok, y, ldy});
}

#endif
