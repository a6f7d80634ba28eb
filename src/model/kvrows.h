/*
 * kvrows.h — the K/V rows the forward pass writes and attends over: for each
 * layer, one K row and one V row (n_embd_kv elements in the cache's type)
 * per cell, for n_cells cells and cap_virtual staging cells after them
 * (cell ids n_cells.., see kv/kvcache.h).
 *
 * With a window pool (kv/kvcache.h, swa_rows > 0) the window layers' rows
 * leave the per-cell array: a cell holds a row of the pool where win_row[]
 * says (-1: none; its attention weight is 0 wherever it is read, so it reads
 * the pool's zero row), and a staged token's rows lie in a staging area
 * until the commit keeps them. The forward pass only finds rows here.
 *
 * The kv layer owns these buffers and decides which cells a batch writes
 * and reads (it is above this layer); the forward pass sees only the rows.
 */
#ifndef TKV_KVROWS_H
#define TKV_KVROWS_H

#include "tokenkv_types.h"

#include <stddef.h>
#include <stdint.h>

typedef struct tkv__kvrows {
    tkv_type type_k, type_v; /* F16 (default), F32, or a 32-element block type (Q8_0, Q4_0, ...) */
    uint32_t n_cells, n_layer, n_embd_kv;
    size_t row_size_k, row_size_v; /* bytes of one K (V) row: one cell, one layer */
    uint8_t *k, *v;   /* (n_layer, n_cells, n_embd_kv) */
    uint8_t *vk, *vv; /* (n_layer, cap_virtual, n_embd_kv) staging cells */
    uint32_t cap_virtual;
    /* the window pool; lmap NULL: none (every layer's rows per cell, as above) */
    int32_t *lmap;     /* (n_layer) >= 0: the layer's index among window layers; else -1 - its index among the
                          others (whose rows are per cell: k, v are (n_full, n_cells, n_embd_kv)) */
    int32_t *win_row;  /* (n_cells) the cell's window row: -1 none, < n_rows the pool's, > n_rows staging row
                          win_row - n_rows - 1 */
    uint32_t n_win, n_full, n_rows, cap_stage;
    uint8_t *wk, *wv;  /* (n_win, n_rows + 1, n_embd_kv): row n_rows is zeros, never written */
    uint8_t *sk, *sv;  /* (n_win, cap_stage, n_embd_kv) the staged tokens' window rows */
} tkv__kvrows;

/* A row of the window pool's layout: layer `layer`'s row of `cell` in full (per cell), pool or stage. */
static inline uint8_t *tkv__kvrows_pooled(const tkv__kvrows *r, uint8_t *full, uint8_t *pool, uint8_t *stage,
                                          size_t rs, uint32_t layer, uint32_t cell) {
    const int32_t w = r->lmap[layer];
    if (w < 0) return full + ((size_t)(-1 - w) * r->n_cells + cell) * rs;
    int32_t row = r->win_row[cell];
    if (row < 0) row = (int32_t)r->n_rows; /* the zero row */
    if ((uint32_t)row <= r->n_rows) return pool + ((size_t)w * (r->n_rows + 1) + (uint32_t)row) * rs;
    return stage + ((size_t)w * r->cap_stage + ((uint32_t)row - r->n_rows - 1)) * rs;
}

/* The K (V) row of `cell` in `layer`; cells from n_cells on are staging cells. */
static inline void *tkv__kvrows_k(const tkv__kvrows *r, uint32_t layer, uint32_t cell) {
    if (cell >= r->n_cells) return r->vk + ((size_t)layer * r->cap_virtual + (cell - r->n_cells)) * r->row_size_k;
    if (r->lmap) return tkv__kvrows_pooled(r, r->k, r->wk, r->sk, r->row_size_k, layer, cell);
    return r->k + ((size_t)layer * r->n_cells + cell) * r->row_size_k;
}
static inline void *tkv__kvrows_v(const tkv__kvrows *r, uint32_t layer, uint32_t cell) {
    if (cell >= r->n_cells) return r->vv + ((size_t)layer * r->cap_virtual + (cell - r->n_cells)) * r->row_size_v;
    if (r->lmap) return tkv__kvrows_pooled(r, r->v, r->wv, r->sv, r->row_size_v, layer, cell);
    return r->v + ((size_t)layer * r->n_cells + cell) * r->row_size_v;
}

#endif
