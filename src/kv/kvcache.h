/*
 * kvcache.h — the KV cache: K/V rows per layer for n_cells cells, and per
 * cell the token it was computed from and its position.
 *
 * Who holds a cell: the prefix index (prefix_index.h) owns every cell that
 * holds a token; free cells hold nothing. A sequence is a list of cells,
 * positions 0..n-1 (cells need not be contiguous, and sequences sharing a
 * prefix share its cells); the list mirrors the sequence's path in the index
 * so that attention reads it in O(1) per position.
 *
 * Staging (see context.c): a decode writes its tokens' K/V into free cells,
 * or, when it must evict to make room, into "virtual" cells (ids n_cells..)
 * backed by a scratch area: nothing cached is overwritten before the decode
 * has succeeded, so a failure leaves the cache exactly as it was.
 */
#ifndef TKV_KVCACHE_H
#define TKV_KVCACHE_H

#include "tokenkv.h"

#include "model/kvrows.h"

typedef struct tkv__kvseq {
    uint32_t n;      /* published cells: positions 0..n-1 */
    uint32_t cap;    /* room in cells[] (staged cells go after n) */
    uint32_t *cells; /* (cap) cell per position */
    uint64_t ns;     /* namespace of the sequence's prefixes */
} tkv__kvseq;

typedef struct tkv__kvcache {
    tkv__kvrows rows; /* the K/V rows of every cell (what the forward pass sees) */
    tkv_token *token; /* (n_cells) TKV_TOKEN_NULL for a free cell */
    tkv_pos *pos;     /* (n_cells) */
    uint32_t *free;   /* stack of free cells */
    uint32_t n_free;
    uint32_t n_seq;
    tkv__kvseq *seq;  /* (n_seq) */
} tkv__kvcache;

tkv_status tkv__kv_create(uint32_t n_cells, uint32_t n_layer, uint32_t n_embd_kv, tkv_type type, uint32_t n_seq,
                          tkv__kvcache **out);
void tkv__kv_free(tkv__kvcache *kv);

static inline void *tkv__kv_k(const tkv__kvcache *kv, uint32_t layer, uint32_t cell) {
    return tkv__kvrows_k(&kv->rows, layer, cell);
}
static inline void *tkv__kv_v(const tkv__kvcache *kv, uint32_t layer, uint32_t cell) {
    return tkv__kvrows_v(&kv->rows, layer, cell);
}

/* Room for n virtual cells. TKV_ERR_NOMEM leaves the cache as it was. */
tkv_status tkv__kv_reserve_virtual(tkv__kvcache *kv, uint32_t n);

/* Take n free cells into out[] (unpublished); the caller checked n <= n_free. */
void tkv__kv_take(tkv__kvcache *kv, uint32_t n, uint32_t *out);

/* Give back cells taken and never published, or cells the index let go. */
void tkv__kv_give_back(tkv__kvcache *kv, const uint32_t *cells, uint32_t n);

/* Copy the K/V rows (all layers) of cell `from` to cell `to`. */
void tkv__kv_copy(tkv__kvcache *kv, uint32_t from, uint32_t to);

/* Make room for `extra` staged cells after seq's published ones.
   TKV_ERR_NOMEM leaves the sequence as it was. */
tkv_status tkv__kv_seq_reserve(tkv__kvcache *kv, tkv_seq seq, uint32_t extra);

#endif
