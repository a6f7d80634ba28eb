/*
 * kvcache.c — the KV cache's storage, its sequences, pins and check (see
 * kvcache.h); the transactions are in kvcache_txn.c.
 */
#include "kvcache_impl.h"

#include "base/alloc.h"
#include "base/error.h"
#include "compute/quant/quant.h"

#include <stdint.h>
#include <string.h>

bool tkv__kv_type_ok(tkv_type t) {
    switch (t) {
    case TKV_TYPE_F16:
    case TKV_TYPE_F32:
    case TKV_TYPE_Q8_0:
    case TKV_TYPE_Q5_1:
    case TKV_TYPE_Q5_0:
    case TKV_TYPE_Q4_1:
    case TKV_TYPE_Q4_0:
    case TKV_TYPE_IQ4_NL: return true;
    default: return false;
    }
}

/* TKV_OK when rows of n elements can be stored as t; `which` is "K" or "V". */
static tkv_status check_type(tkv_type t, uint32_t n, const char *which) {
    if (!tkv__kv_type_ok(t))
        return tkv__fail(TKV_ERR_UNSUPPORTED,
                         "KV cache type %s (%s) is not supported (F16, F32, Q8_0, Q5_1, Q5_0, Q4_1, Q4_0, IQ4_NL)",
                         (unsigned)t < TKV_TYPE_COUNT && tkv_type_name(t) ? tkv_type_name(t) : "?", which);
    if (t != TKV_TYPE_F16 && t != TKV_TYPE_F32 && n % 32)
        return tkv__fail(TKV_ERR_UNSUPPORTED, "KV cache type %s (%s) needs rows of a multiple of 32 (this model: %u)",
                         tkv_type_name(t), which, n);
    return TKV_OK;
}

tkv_status tkv__kv_create(uint32_t n_cells, uint32_t n_layer, uint32_t n_embd_kv, tkv_type type_k, tkv_type type_v,
                          uint32_t n_seq, const tkv__kvwin_params *win, tkv__kvcache **out) {
    tkv_status st = check_type(type_k, n_embd_kv, "K");
    if (!st) st = check_type(type_v, n_embd_kv, "V");
    if (st) return st;
    if (!n_cells || !n_seq) return tkv__fail(TKV_ERR_INVALID, "KV cache: n_cells and n_seq_max must be > 0");
    /* the rows live sequences need: their last W positions' cells, which are at most n_cells */
    const uint64_t win_min = win ? (uint64_t)n_seq * win->window < n_cells ? (uint64_t)n_seq * win->window : n_cells : 0;
    if (win && (!win->window || win->n_rows < win_min || win->n_rows > n_cells))
        return tkv__fail(TKV_ERR_INVALID, "KV cache: a window pool of %u rows for a window of %u, %u sequences and %u "
                         "cells (%llu to %u)", win->n_rows, win->window, n_seq, n_cells, (unsigned long long)win_min,
                         n_cells);
    tkv__kvcache *kv = tkv__calloc(1, sizeof *kv);
    if (!kv) return tkv__fail(TKV_ERR_NOMEM, "out of memory for the KV cache");
    kv->rows.type_k = type_k;
    kv->rows.type_v = type_v;
    kv->rows.n_cells = n_cells;
    kv->rows.n_layer = n_layer;
    kv->rows.n_embd_kv = n_embd_kv;
    kv->rows.row_size_k = tkv__quant_row_size(type_k, n_embd_kv);
    kv->rows.row_size_v = tkv__quant_row_size(type_v, n_embd_kv);
    kv->rows.n_full = n_layer;
    kv->n_seq = n_seq;
    if (win && (st = tkv__kv_win_create(kv, win))) { /* the window layers' rows leave the per-cell array */
        tkv__kv_free(kv);
        return st;
    }
    const uint32_t n_full = kv->rows.n_full;
    const size_t bytes_k = (size_t)n_full * n_cells * kv->rows.row_size_k,
                 bytes_v = (size_t)n_full * n_cells * kv->rows.row_size_v, bytes = bytes_k + bytes_v;
    kv->rows.k = tkv__malloc(bytes_k ? bytes_k : 1);
    kv->rows.v = tkv__malloc(bytes_v ? bytes_v : 1);
    /* 2 MiB pages: attention reads each sequence's cells, strided through every layer's rows, and with 4 KiB
       pages a decode step of a few sequences misses the TLB on nearly every row */
    tkv__advise_huge_pages(kv->rows.k, bytes_k);
    tkv__advise_huge_pages(kv->rows.v, bytes_v);
    kv->token = tkv__malloc(n_cells * sizeof *kv->token);
    kv->pos = tkv__malloc(n_cells * sizeof *kv->pos);
    kv->free = tkv__malloc(n_cells * sizeof *kv->free);
    kv->seq = tkv__calloc(n_seq, sizeof *kv->seq);
    kv->n_seq = n_seq;
    kv->cells = tkv__malloc(n_cells * sizeof *kv->cells);
    kv->spare = tkv__malloc(n_cells * sizeof *kv->spare);
    kv->seq_count = tkv__calloc(n_seq, sizeof *kv->seq_count);
    kv->seq_dup = tkv__calloc(n_seq, sizeof *kv->seq_dup);
    kv->dup = tkv__calloc(n_cells, 1);
    kv->chosen = tkv__malloc(n_cells * sizeof *kv->chosen);
    kv->chosen_key = tkv__malloc(n_cells * sizeof *kv->chosen_key);
    kv->run_tokens = tkv__malloc(n_cells * sizeof *kv->run_tokens);
    kv->run_cells = tkv__malloc(n_cells * sizeof *kv->run_cells);
    kv->ev_tokens = tkv__malloc(n_cells * sizeof *kv->ev_tokens);
    kv->ev_cells = tkv__malloc(n_cells * sizeof *kv->ev_cells);
    if (!kv->ev_tokens || !kv->ev_cells || !kv->rows.k || !kv->rows.v || !kv->token || !kv->pos || !kv->free || !kv->seq || !kv->cells || !kv->spare ||
        !kv->seq_count || !kv->seq_dup || !kv->dup || !kv->chosen || !kv->chosen_key || !kv->run_tokens || !kv->run_cells) {
        tkv__kv_free(kv);
        return tkv__fail(TKV_ERR_NOMEM, "out of memory for a KV cache of %u cells (%zu bytes)", n_cells, bytes);
    }
    for (uint32_t i = 0; i < n_cells; i++) {
        kv->token[i] = TKV_TOKEN_NULL;
        kv->pos[i] = -1;
        kv->chosen[i] = TKV_TOKEN_NULL;
        kv->chosen_key[i] = 0;
        kv->free[i] = n_cells - 1 - i; /* low cells first */
    }
    kv->n_free = n_cells;
    kv->next_pin = 1;
    st = tkv__pindex_create(n_cells, n_seq, kv->token, &kv->ix);
    if (st) {
        tkv__kv_free(kv);
        return st;
    }
    *out = kv;
    return TKV_OK;
}

void tkv__kv_free(tkv__kvcache *kv) {
    if (!kv) return;
    tkv__kv_states_free(kv);
    tkv__kv_win_free(kv);
    tkv__pindex_free(kv->ix);
    if (kv->seq)
        for (uint32_t s = 0; s < kv->n_seq; s++) tkv__free(kv->seq[s].cells);
    tkv__free(kv->seq);
    tkv__free(kv->rows.k);
    tkv__free(kv->rows.v);
    tkv__free(kv->rows.vk);
    tkv__free(kv->rows.vv);
    tkv__free(kv->token);
    tkv__free(kv->pos);
    tkv__free(kv->free);
    tkv__free(kv->cells);
    tkv__free(kv->spare);
    tkv__free(kv->seq_count);
    tkv__free(kv->seq_dup);
    tkv__free(kv->dup);
    tkv__free(kv->chosen);
    tkv__free(kv->chosen_key);
    tkv__free(kv->run_tokens);
    tkv__free(kv->run_cells);
    tkv__free(kv->ev_tokens);
    tkv__free(kv->ev_cells);
    tkv__free(kv);
}

/* ---- cells (kvcache_impl.h) ----------------------------------------------- */

tkv_status tkv__kv_reserve_virtual(tkv__kvcache *kv, uint32_t n) {
    if (n <= kv->rows.cap_virtual) return TKV_OK;
    uint8_t *vk = tkv__malloc((size_t)kv->rows.n_layer * n * kv->rows.row_size_k),
            *vv = tkv__malloc((size_t)kv->rows.n_layer * n * kv->rows.row_size_v);
    if (!vk || !vv) {
        tkv__free(vk);
        tkv__free(vv);
        return tkv__fail(TKV_ERR_NOMEM, "out of memory staging %u tokens while the cache is full", n);
    }
    tkv__free(kv->rows.vk);
    tkv__free(kv->rows.vv);
    kv->rows.vk = vk;
    kv->rows.vv = vv;
    kv->rows.cap_virtual = n;
    return TKV_OK;
}

void tkv__kv_take(tkv__kvcache *kv, uint32_t n, uint32_t *out) {
    for (uint32_t i = 0; i < n; i++) out[i] = kv->free[--kv->n_free];
}

void tkv__kv_give_back(tkv__kvcache *kv, const uint32_t *cells, uint32_t n) {
    for (uint32_t i = n; i-- > 0;) {
        if (cells[i] >= kv->rows.n_cells) continue; /* virtual: nothing to give back */
        if (kv->st) tkv__kv_state_drop_cell(kv, cells[i]); /* its prefix is gone, and so is the state after it */
        if (kv->win) tkv__kv_win_drop_cell(kv, cells[i]);
        kv->token[cells[i]] = TKV_TOKEN_NULL;
        kv->pos[cells[i]] = -1;
        kv->chosen[cells[i]] = TKV_TOKEN_NULL; /* its prefix is gone, and what its logits chose */
        kv->free[kv->n_free++] = cells[i];
    }
}

void tkv__kv_report(tkv__kvcache *kv, int kind, uint64_t ns, tkv__ppos at, uint32_t from) {
    if (!kv->on_event) return;
    const uint32_t end = tkv__pindex_len(kv->ix, at);
    if (from >= end && kind != TKV__KVEV_CLEARED) return;
    tkv__pindex_path(kv->ix, at, kv->ev_cells, kv->ev_tokens);
    const tkv__kvevent ev = {kind, ns, kv->ev_tokens, kv->ev_cells + from, from, end};
    kv->on_event(kv->event_user, &ev);
}

/* The index is about to cut node id to its first `keep` tokens: report what goes, while its cells hold it. */
static void before_evict(void *user, uint32_t id, uint32_t keep) {
    tkv__kvcache *kv = user;
    const tkv__pnode *nd = tkv__pindex_node(kv->ix, id);
    tkv__kv_report(kv, TKV__KVEV_REMOVED, nd->ns, (tkv__ppos){id, nd->n}, nd->depth + keep);
}

void tkv__kv_set_events(tkv__kvcache *kv, tkv__kv_event_fn fn, void *user) {
    kv->on_event = fn;
    kv->event_user = user;
}

uint32_t tkv__kv_evict(tkv__kvcache *kv, uint32_t want) {
    if (!want) return 0;
    uint32_t freed = tkv__pindex_evict(kv->ix, want, kv->spare, kv->on_event ? before_evict : NULL, kv);
    tkv__kv_give_back(kv, kv->spare, freed);
    kv->evictions += freed;
    return freed;
}

tkv_status tkv__kv_seq_room(tkv__kvcache *kv, tkv_seq seq, uint32_t len) {
    tkv__kvseq *s = &kv->seq[seq];
    if (len <= s->cap) return TKV_OK;
    uint32_t cap = s->cap ? s->cap : 64;
    while (cap < len) cap = cap > UINT32_MAX / 2 ? len : 2 * cap;
    uint32_t *cells = tkv__realloc(s->cells, (size_t)cap * sizeof *cells);
    if (!cells) return tkv__fail(TKV_ERR_NOMEM, "out of memory growing sequence %d to %u cells", (int)seq, cap);
    s->cells = cells;
    s->cap = cap;
    return TKV_OK;
}

void tkv__kv_seq_move(tkv__kvcache *kv, tkv_seq seq, uint64_t ns, tkv__ppos at) {
    tkv__kvseq *s = &kv->seq[seq];
    at = tkv__pindex_seq_set(kv->ix, seq, at); /* cuts the node at `at` */
    tkv__pindex_path(kv->ix, at, s->cells, NULL);
    s->n = tkv__pindex_len(kv->ix, at);
    s->ns = ns;
}

/* ---- sequences ------------------------------------------------------------ */

void tkv__kv_seq_truncate(tkv__kvcache *kv, tkv_seq seq, uint32_t n) {
    tkv__kvseq *s = &kv->seq[seq];
    /* an empty sequence is in the default namespace: the next user of its id starts there, never in the
       namespace of the one before (tkv_seq_attach of no tokens chooses another) */
    if (n == 0) s->ns = 0;
    if (n >= s->n) return;
    tkv__ppos at = tkv__pindex_ancestor(kv->ix, tkv__pindex_seq_end(kv->ix, seq), n);
    tkv__pindex_seq_set(kv->ix, seq, at); /* the dropped tail: its own node */
    s->n = n; /* the list's first n cells are the ancestor's path */
    tkv__kv_win_mark_short(kv, seq);
}

tkv_status tkv__kv_seq_fork(tkv__kvcache *kv, tkv_seq src, tkv_seq dst) {
    if (src == dst) return TKV_OK;
    tkv_status st = tkv__kv_seq_room(kv, dst, kv->seq[src].n);
    if (st) return st;
    const tkv__kvseq *s = &kv->seq[src];
    tkv__kvseq *d = &kv->seq[dst];
    if (s->n) memcpy(d->cells, s->cells, s->n * sizeof *d->cells);
    d->n = s->n;
    d->ns = s->ns;
    if (kv->win) kv->win->short_seq[dst] = kv->win->short_seq[src];
    tkv__pindex_seq_set(kv->ix, dst, tkv__pindex_seq_end(kv->ix, src));
    return TKV_OK;
}

void tkv__kv_seq_tokens(const tkv__kvcache *kv, tkv_seq seq, tkv_token *out) {
    const tkv__kvseq *s = &kv->seq[seq];
    for (uint32_t i = 0; i < s->n; i++) out[i] = kv->token[s->cells[i]];
}

/* ---- the prefix index ----------------------------------------------------- */

size_t tkv__kv_match(const tkv__kvcache *kv, uint64_t ns, const tkv_token *tokens, size_t n) {
    tkv__ppos at;
    return tkv__pindex_match(kv->ix, ns, tokens, n, false, &at); /* without touch it changes nothing */
}

size_t tkv__kv_match_cells(const tkv__kvcache *kv, uint64_t ns, const tkv_token *tokens, size_t n, uint32_t *cells) {
    tkv__ppos at;
    size_t m = tkv__pindex_match(kv->ix, ns, tokens, n, false, &at);
    tkv__pindex_path(kv->ix, at, cells, NULL);
    return m;
}

tkv_status tkv__kv_pin(tkv__kvcache *kv, uint64_t ns, const tkv_token *tokens, size_t n, size_t *len, uint64_t *id) {
    tkv__ppos at;
    size_t m = tkv__pindex_match(kv->ix, ns, tokens, n, false, &at);
    const uint64_t pin = m ? kv->next_pin : 0;
    tkv_status st = m ? tkv__pindex_pin_id(kv->ix, at, pin) : TKV_OK;
    if (st) return st;
    kv->next_pin += m != 0;
    if (len) *len = m;
    *id = pin;
    return TKV_OK;
}

bool tkv__kv_unpin(tkv__kvcache *kv, uint64_t id) { return tkv__pindex_unpin_id(kv->ix, id); }

void tkv__kv_hold(tkv__kvcache *kv, uint64_t ns, const tkv_token *tokens, size_t n, int delta) {
    tkv__ppos at;
    tkv__pindex_match(kv->ix, ns, tokens, n, false, &at);
    tkv__pindex_pin(kv->ix, at, delta); /* reserved, or a decrement: cannot fail */
}

tkv_status tkv__kv_hold_reserve(tkv__kvcache *kv, uint32_t n) { return tkv__pindex_pin_reserve(kv->ix, n); }

void tkv__kv_touch(tkv__kvcache *kv, uint64_t ns, const tkv_token *tokens, size_t n) {
    tkv__ppos at;
    tkv__pindex_match(kv->ix, ns, tokens, n, false, &at);
    tkv__pindex_touch(kv->ix, at);
}

/* After a clear: what stays cached (held or pinned), node by node. */
static void report_kept(const tkv__pindex *ix, uint32_t id, void *user) {
    tkv__kvcache *kv = user;
    const tkv__pnode *nd = tkv__pindex_node(ix, id);
    if (nd->parent != TKV__PNONE) tkv__kv_report(kv, TKV__KVEV_STORED, nd->ns, (tkv__ppos){id, nd->n}, nd->depth);
}

void tkv__kv_clear(tkv__kvcache *kv) {
    uint32_t n = tkv__pindex_evict_all(kv->ix, kv->spare);
    tkv__kv_give_back(kv, kv->spare, n);
    if (!kv->on_event) return;
    tkv__kv_report(kv, TKV__KVEV_CLEARED, 0, TKV__PPOS_EMPTY, 0);
    tkv__pindex_foreach(kv->ix, report_kept, kv);
}

static void count_shared(const tkv__pindex *ix, uint32_t id, void *user) {
    const tkv__pnode *nd = tkv__pindex_node(ix, id);
    if (nd->parent != TKV__PNONE && nd->refs >= 2) *(uint64_t *)user += nd->n;
}

void tkv__kv_stats(const tkv__kvcache *kv, tkv_stats *out) {
    tkv__pindex_stats ps;
    tkv__pindex_stats_get(kv->ix, &ps);
    out->cells_total = kv->rows.n_cells;
    out->cells_used = kv->rows.n_cells - kv->n_free;
    out->cells_evictable = ps.evictable_cells;
    out->cells_pinned = ps.pinned_cells;
    out->nodes = ps.nodes;
    out->cells_shared = 0;
    tkv__pindex_foreach(kv->ix, count_shared, &out->cells_shared);
    out->evictions = kv->evictions;
    out->kv_bytes = (uint64_t)kv->rows.n_full * kv->rows.n_cells * (kv->rows.row_size_k + kv->rows.row_size_v);
    if (kv->win) out->kv_bytes += tkv__kv_win_bytes(kv);
    out->meta_bytes = (uint64_t)kv->rows.n_cells * (sizeof *kv->token + sizeof *kv->pos + sizeof *kv->free) +
                      tkv__pindex_bytes(kv->ix);
    for (uint32_t s = 0; s < kv->n_seq; s++) out->meta_bytes += sizeof kv->seq[s] + (uint64_t)kv->seq[s].cap * sizeof(uint32_t);
    if (kv->win) /* the pool's row owners and free stack, each cell's row, need mark and staged cell */
        out->meta_bytes += (uint64_t)kv->rows.n_rows * 2 * sizeof(uint32_t) + (uint64_t)kv->rows.n_cells * 3 * sizeof(uint32_t);
    tkv__kv_states_stats(kv, out);
}

/* ---- the check ------------------------------------------------------------ */

typedef struct check {
    const tkv__kvcache *kv;
    uint8_t *owned; /* (n_cells) 1: in the index, 2: free */
    uint32_t *cells;
    tkv_token *tokens;
    tkv_status st;
} check;

/* Every cell of a node holds the token the index reads, at its position. */
static void check_node_cells(const tkv__pindex *ix, uint32_t id, void *user) {
    check *c = user;
    const tkv__pnode *nd = tkv__pindex_node(ix, id);
    if (c->st || nd->parent == TKV__PNONE) return;
    tkv__pindex_run(ix, id, c->cells, c->tokens);
    const tkv__kvcache *kv = c->kv;
    for (uint32_t k = 0; k < nd->n && !c->st; k++) {
        uint32_t cell = c->cells[k];
        if (c->owned[cell]) c->st = tkv__fail(TKV_ERR_FORMAT, "cache check: cell %u is in two nodes", cell);
        else if (kv->token[cell] == TKV_TOKEN_NULL || kv->pos[cell] != (tkv_pos)(nd->depth + k))
            c->st = tkv__fail(TKV_ERR_FORMAT, "cache check: cell %u holds token %d at position %d, its node says %u",
                              cell, (int)kv->token[cell], (int)kv->pos[cell], nd->depth + k);
        c->owned[cell] = 1;
    }
}

tkv_status tkv__kv_check(const tkv__kvcache *kv) {
    if (kv->txn.kind) return tkv__fail(TKV_ERR_FORMAT, "cache check: a transaction is staged");
    tkv_status st = tkv__pindex_check(kv->ix);
    if (st) return st;
    const uint32_t n_cells = kv->rows.n_cells;
    check c = {kv, tkv__calloc(n_cells, 1), tkv__malloc(n_cells * sizeof(uint32_t)),
               tkv__malloc(n_cells * sizeof(tkv_token)), TKV_OK};
    if (!c.owned || !c.cells || !c.tokens) {
        c.st = tkv__fail(TKV_ERR_NOMEM, "out of memory checking the cache");
        goto done;
    }
    tkv__pindex_foreach(kv->ix, check_node_cells, &c);
    /* free cells: not in the index, holding nothing; the two add up */
    uint32_t owned = 0;
    for (uint32_t i = 0; i < n_cells; i++) owned += c.owned[i];
    for (uint32_t i = 0; i < kv->n_free && !c.st; i++) {
        uint32_t cell = kv->free[i];
        if (cell >= n_cells || c.owned[cell] || kv->token[cell] != TKV_TOKEN_NULL || kv->pos[cell] != -1 ||
            kv->chosen[cell] != TKV_TOKEN_NULL)
            c.st = tkv__fail(TKV_ERR_FORMAT, "cache check: free cell %u is in use", cell);
        else
            c.owned[cell] = 2;
    }
    if (!c.st && owned + kv->n_free != n_cells)
        c.st = tkv__fail(TKV_ERR_FORMAT, "cache check: %u cells in the index and %u free, of %u (some are lost)", owned,
                         kv->n_free, n_cells);
    /* each sequence's list is its path in the index */
    for (uint32_t s = 0; s < kv->n_seq && !c.st; s++) {
        const tkv__kvseq *q = &kv->seq[s];
        tkv__ppos end = tkv__pindex_seq_end(kv->ix, (tkv_seq)s);
        if (tkv__pindex_len(kv->ix, end) != q->n) {
            c.st = tkv__fail(TKV_ERR_FORMAT, "cache check: sequence %u holds %u cells, its index path %u tokens", s, q->n,
                             tkv__pindex_len(kv->ix, end));
            break;
        }
        if (end.node != TKV__PNONE && tkv__pindex_node(kv->ix, end.node)->ns != q->ns)
            c.st = tkv__fail(TKV_ERR_FORMAT, "cache check: sequence %u is in another namespace than its path", s);
        tkv__pindex_path(kv->ix, end, c.cells, NULL);
        for (uint32_t p = 0; p < q->n && !c.st; p++)
            if (q->cells[p] != c.cells[p] || kv->pos[q->cells[p]] != (tkv_pos)p)
                c.st = tkv__fail(TKV_ERR_FORMAT, "cache check: sequence %u position %u: cell %u, its path has cell %u", s,
                                 p, q->cells[p], c.cells[p]);
    }
    if (!c.st) c.st = tkv__kv_states_check(kv); /* every checkpoint is the state after its cell's token */
    if (!c.st) c.st = tkv__kv_win_check(kv);    /* every window row belongs to one cell; live sequences have theirs */
done:
    tkv__free(c.owned);
    tkv__free(c.cells);
    tkv__free(c.tokens);
    return c.st;
}
