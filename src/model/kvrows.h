/*
 * kvrows.h — the K/V rows the forward pass writes and attends over: for each
 * layer, one K row and one V row (n_embd_kv elements in the cache's type)
 * per cell, for n_cells cells and cap_virtual staging cells after them
 * (cell ids n_cells.., see kv/kvcache.h).
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
} tkv__kvrows;

/* The K (V) row of `cell` in `layer`; cells from n_cells on are staging cells. */
static inline void *tkv__kvrows_k(const tkv__kvrows *r, uint32_t layer, uint32_t cell) {
    if (cell >= r->n_cells) return r->vk + ((size_t)layer * r->cap_virtual + (cell - r->n_cells)) * r->row_size_k;
    return r->k + ((size_t)layer * r->n_cells + cell) * r->row_size_k;
}
static inline void *tkv__kvrows_v(const tkv__kvrows *r, uint32_t layer, uint32_t cell) {
    if (cell >= r->n_cells) return r->vv + ((size_t)layer * r->cap_virtual + (cell - r->n_cells)) * r->row_size_v;
    return r->v + ((size_t)layer * r->n_cells + cell) * r->row_size_v;
}

#endif
