/*
 * kvcache.h — the KV cache: K/V rows per layer for n_cells cells, and per
 * cell the token it was computed from, its position and how many sequences
 * use it. A sequence is an ordered list of cells, positions 0..n-1; cells
 * need not be contiguous and may be shared by sequences.
 *
 * Writes are transactional (see context.c): a decode takes cells and stages
 * them after each sequence's published cells; only when the forward pass
 * succeeded are they published (metadata set, sequence lengths grown). A
 * failed decode gives the cells back and the cache is as it was.
 */
#ifndef TKV_KVCACHE_H
#define TKV_KVCACHE_H

#include "tokenkv.h"

typedef struct tkv__kvseq {
    uint32_t n;      /* published cells: positions 0..n-1 */
    uint32_t cap;    /* room in cells[] (staged cells go after n) */
    uint32_t *cells; /* (cap) cell index per position */
} tkv__kvseq;

typedef struct tkv__kvcache {
    tkv_type type;      /* F16 or F32 */
    uint32_t n_cells, n_layer, n_embd_kv;
    size_t row_size;    /* bytes of one K (or V) row: one cell, one layer */
    uint8_t *k, *v;     /* (n_layer, n_cells, n_embd_kv) */
    tkv_token *token;   /* (n_cells) TKV_TOKEN_NULL for a free cell */
    tkv_pos *pos;       /* (n_cells) */
    uint32_t *n_users;  /* (n_cells) sequences holding the cell */
    uint32_t *free;     /* stack of free cells */
    uint32_t n_free;
    uint32_t n_seq;
    tkv__kvseq *seq;    /* (n_seq) */
} tkv__kvcache;

tkv_status tkv__kv_create(uint32_t n_cells, uint32_t n_layer, uint32_t n_embd_kv, tkv_type type, uint32_t n_seq,
                          tkv__kvcache **out);
void tkv__kv_free(tkv__kvcache *kv);

static inline void *tkv__kv_k(const tkv__kvcache *kv, uint32_t layer, uint32_t cell) {
    return kv->k + ((size_t)layer * kv->n_cells + cell) * kv->row_size;
}
static inline void *tkv__kv_v(const tkv__kvcache *kv, uint32_t layer, uint32_t cell) {
    return kv->v + ((size_t)layer * kv->n_cells + cell) * kv->row_size;
}

/* Take n free cells into out[] (unpublished). TKV_ERR_FULL, nothing taken,
   when fewer are free. */
tkv_status tkv__kv_take(tkv__kvcache *kv, uint32_t n, uint32_t *out);

/* Give back cells taken and never published. */
void tkv__kv_give_back(tkv__kvcache *kv, const uint32_t *cells, uint32_t n);

/* Make room for `extra` staged cells after seq's published ones.
   TKV_ERR_NOMEM leaves the sequence as it was. */
tkv_status tkv__kv_seq_reserve(tkv__kvcache *kv, tkv_seq seq, uint32_t extra);

/* Publish a staged cell: it holds `token` at `pos` (== seq's length), and
   the sequence grows by one. */
void tkv__kv_publish(tkv__kvcache *kv, tkv_seq seq, uint32_t cell, tkv_token token, tkv_pos pos);

/* Drop positions n.. of seq; cells no sequence uses any more become free. */
void tkv__kv_seq_truncate(tkv__kvcache *kv, tkv_seq seq, uint32_t n);

#endif
