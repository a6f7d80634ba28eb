/*
 * compute/x86/tile_driver.h — the loop of the tiled products (gemm.h), written
 * once for both SIMD levels: chunks of tokens cut into tiles, groups of rows,
 * chunks of K whose blocks are unpacked into a panel, the prefetch of the
 * next panel's weights, each tile over the panel and its finish.
 *
 * A family file (compute/x86/avx2/gemm_*.c, compute/x86/avx512/gemm_*.c)
 * gives the widths (rows per group, blocks per chunk of K, tokens per chunk
 * and per tile, the stash) and its level's arithmetic as four callbacks.
 * tile_product is always inlined into the family's entry with the callbacks
 * as constants, so the calls are direct and the family's own code is what
 * runs: a change to the tiling is made here once, a change to the arithmetic
 * in the family's file.
 *
 * Included only by files compiled with at least -mavx2 -mfma -mf16c (see
 * compute/kernels.cmake); without those flags it declares nothing.
 */
#ifndef TKV_X86_TILE_DRIVER_H
#define TKV_X86_TILE_DRIVER_H

#include "util.h"

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#if defined(__x86_64__) && defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)

/* Tiles of a chunk of tokens at most: a chunk never holds more than this many tokens. */
#define TILE_TC_DIRECT 256
/* Rows of a group at most (the avx512 level's Q8_0 tile: 4 row pairs). */
#define TILE_ROWS_MAX 8
/* Tokens of a tile at most (every family's widest tile is 4 tokens). */
#define TILE_T_MAX 4

/* One product's operands: the arguments of gemm.h's entries. */
typedef struct tile_job {
    size_t n;          /* elements per row */
    const uint8_t *w;  /* nr weight rows of wrs bytes */
    size_t wrs, nr;
    const uint8_t *xq; /* n_tok quantized activation rows of xrs bytes */
    size_t xrs, n_tok;
    float *y; /* out: y[t * ldy + r] */
    size_t ldy;
} tile_job;

/* Row r's first block (r < nr). */
static inline const uint8_t *tile_row(const tile_job *job, size_t r) {
    return job->w + r * job->wrs;
}

/* Ask for blocks [i0, i0 + nblk) of nrow rows (see prefetch_rows), bs bytes each. Not always_inline: forced
   into the tile loop it made 8-token tiles slower (Q3_K +40%, IQ4_XS +27%, Q6_K +30%, bench_kernels -n 2048
   -r 5632 -t 8, when these tiles also ran over packed rows), the loop's code, not its prefetches. */
static inline void tile_prefetch(const uint8_t *const *rows, int nrow, size_t i0, size_t nblk, size_t bs) {
    prefetch_rows(rows, nrow, i0 * bs, nblk * bs);
}

/* The tiles of one chunk of tokens: tile j is tokens t0 + start[j] ... + len[j] - 1. */
typedef struct tile_chunk {
    size_t t0;
    int ntile;
    size_t start[TILE_TC_DIRECT];
    int len[TILE_TC_DIRECT];
} tile_chunk;

/* One tile's pass over blocks k0 .. k1 - 1 of the panel. */
typedef struct tile_step {
    int j;                    /* the tile, in its chunk */
    int T;                    /* its tokens */
    size_t k0, k1;            /* the panel's blocks; k0 == 0: the first pass, the stash starts from zero */
    const uint8_t *const *yt; /* the T tokens' activation rows */
    float *st;                /* the tile's stash */
} tile_step;

/* The widths of a family at a level, and its buffers the driver hands out. */
typedef struct tile_shape {
    size_t nb;    /* blocks per row */
    size_t bs;    /* bytes per weight block */
    size_t kc;    /* blocks per chunk of K */
    size_t tc;    /* tokens per chunk of tokens (<= TILE_TC_DIRECT) */
    int rows;     /* rows per group: the panel's and a tile's (<= TILE_ROWS_MAX) */
    int big;      /* tokens of the widest tile (<= TILE_T_MAX) */
    float *st;    /* the stash: a tile's accumulators between chunks of K */
    size_t stt;   /* stash floats per slot */
    int by_token; /* a tile's slot: its first token (1) or its index (0) */
} tile_shape;

/*
 * The family's arithmetic, called with its own state f:
 * table   the per-token tables of a chunk (scales, sums), once per chunk;
 * panel   block i of the group's rows (rows[0 .. rows - 1]: their first
 *         blocks; past the last row, the last again) into the panel, at slot
 *         i - k0: block i of a row is i bs bytes on;
 * tile    one tile over the panel's blocks;
 * finish  a tile's horizontal sums out to y (nrow rows left from the group's first).
 */
typedef void tile_table_fn(void *f, const tile_job *job, const tile_chunk *c);
typedef void tile_panel_fn(void *f, const uint8_t *const *rows, size_t i, size_t k0);
typedef void tile_tile_fn(void *f, const tile_chunk *c, const tile_step *s);
typedef void tile_finish_fn(void *f, const float *st, int T, float *y, size_t ldy, size_t nrow);

typedef struct tile_ops {
    tile_table_fn *table; /* NULL: the family keeps no per-token table */
    tile_panel_fn *panel;
    tile_tile_fn *tile;
    tile_finish_fn *finish;
} tile_ops;


/*
 * The activations' block scales of a chunk's tokens as floats, for the
 * families whose activation blocks start with an fp16 d (Q8_0) or d and s
 * (Q8_1: then sa is not NULL): tile j's at da + nb * start[j] and
 * sa + nb * start[j], [block][token]. ab: bytes per activation block.
 */
INLINE void tile_scales(const tile_job *job, const tile_chunk *c, size_t nb, size_t ab, float *da, float *sa) {
    for (int j = 0; j < c->ntile; j++)
        for (int t = 0; t < c->len[j]; t++) {
            const uint8_t *row = job->xq + (c->t0 + c->start[j] + (size_t)t) * job->xrs;
            float *dj = da + nb * c->start[j], *sj = sa ? sa + nb * c->start[j] : NULL;
            for (size_t i = 0; i < nb; i++) {
                uint16_t h[2];
                memcpy(h, row + i * ab, sa ? 4 : 2);
                dj[i * (size_t)c->len[j] + (size_t)t] = f16(h[0]);
                if (sa) sj[i * (size_t)c->len[j] + (size_t)t] = f16(h[1]);
            }
        }
}

/*
 * The product. When K fits one chunk ("direct") each tile is finished as
 * soon as its pass ends, from one stash slot; otherwise every tile of the
 * chunk of tokens keeps its slot until the last chunk of K.
 */
INLINE void tile_product(const tile_job *job, const tile_shape *sh, const tile_ops *ops, void *f) {
    const size_t nb = sh->nb, kc = sh->kc, bs = sh->bs, nr = job->nr;
    const size_t rows_n = (size_t)sh->rows;
    const int direct = nb <= kc;
    tile_chunk c;
    for (c.t0 = 0; c.t0 < job->n_tok; c.t0 += sh->tc) {
        const size_t tn = min_sz(sh->tc, job->n_tok - c.t0);
        c.ntile = plan_tiles(tn, sh->big, c.start, c.len);
        if (ops->table) ops->table(f, job, &c);
        for (size_t r = 0; r < nr; r += rows_n) {
            const uint8_t *rows[TILE_ROWS_MAX]; /* past the end: the last row again (computed, not stored) */
            for (size_t k = 0; k < rows_n; k++) rows[k] = tile_row(job, min_sz(r + k, nr - 1));
            float *const yr = job->y + c.t0 * job->ldy + r;
            for (size_t k0 = 0; k0 < nb; k0 += kc) {
                const size_t k1 = min_sz(k0 + kc, nb);
                for (size_t i = k0; i < k1; i++) ops->panel(f, rows, i, k0);
                if (k1 < nb) {
                    tile_prefetch(rows, sh->rows, k1, min_sz(kc, nb - k1), bs);
                } else if (r + rows_n < nr) {
                    const uint8_t *nx[TILE_ROWS_MAX];
                    for (size_t k = 0; k < rows_n; k++) nx[k] = tile_row(job, min_sz(r + rows_n + k, nr - 1));
                    tile_prefetch(nx, sh->rows, 0, min_sz(kc, nb), bs);
                }
                for (int j = 0; j < c.ntile; j++) {
                    const uint8_t *yt[TILE_T_MAX];
                    tile_step s = {.j = j, .T = c.len[j], .k0 = k0, .k1 = k1, .yt = yt};
                    for (int t = 0; t < s.T; t++) yt[t] = job->xq + (c.t0 + c.start[j] + (size_t)t) * job->xrs;
                    s.st = direct ? sh->st : sh->st + sh->stt * (sh->by_token ? c.start[j] : (size_t)j);
                    ops->tile(f, &c, &s);
                    if (direct) ops->finish(f, s.st, s.T, yr + c.start[j] * job->ldy, job->ldy, nr - r);
                }
            }
            if (!direct)
                for (int j = 0; j < c.ntile; j++)
                    ops->finish(f, sh->st + sh->stt * (sh->by_token ? c.start[j] : (size_t)j), c.len[j],
                                yr + c.start[j] * job->ldy, job->ldy, nr - r);
        }
    }
}

#endif
#endif
