/*
 * cache.c — asking the cache what it holds: matching, pinning, clearing,
 * statistics, and the check of every invariant.
 */
#include "context.h"

#include "base/alloc.h"
#include "base/error.h"

#include <string.h>

static tkv_status ctx_fail(tkv_context *ctx, tkv_status st) { return tkv__handle_fail(&ctx->h, st); }

tkv_status tkv_cache_match(const tkv_context *ctx, uint64_t ns, const tkv_token *tokens, size_t n, size_t *len) {
    if (!ctx || (!tokens && n) || !len) return tkv__fail(TKV_ERR_INVALID, "tkv_cache_match: NULL argument");
    tkv_status busy = tkv__ctx_busy(ctx, "tkv_cache_match");
    if (busy) return busy;
    tkv__ppos at;
    *len = tkv__pindex_match(ctx->ix, ns, tokens, n, false, &at);
    return TKV_OK;
}

static tkv_status pin(tkv_context *ctx, uint64_t ns, const tkv_token *tokens, size_t n, int delta, size_t *len) {
    if (!ctx || (!tokens && n)) return tkv__fail(TKV_ERR_INVALID, "tkv_cache_pin: NULL argument");
    tkv_status busy = tkv__ctx_busy(ctx, delta > 0 ? "tkv_cache_pin" : "tkv_cache_unpin");
    if (busy) return busy;
    tkv__ppos at;
    size_t m = tkv__pindex_match(ctx->ix, ns, tokens, n, false, &at);
    if (delta < 0) { /* exactly what a pin of (a prefix of) these tokens took */
        tkv__pindex_unpin_on_path(ctx->ix, at);
        return TKV_OK;
    }
    if (len) *len = m;
    tkv_status st = tkv__pindex_pin_at(ctx->ix, at);
    return st ? ctx_fail(ctx, st) : TKV_OK;
}

tkv_status tkv_cache_pin(tkv_context *ctx, uint64_t ns, const tkv_token *tokens, size_t n, size_t *len) {
    return pin(ctx, ns, tokens, n, +1, len);
}

tkv_status tkv_cache_unpin(tkv_context *ctx, uint64_t ns, const tkv_token *tokens, size_t n) {
    return pin(ctx, ns, tokens, n, -1, NULL);
}

tkv_status tkv_cache_clear(tkv_context *ctx) {
    if (!ctx) return tkv__fail(TKV_ERR_INVALID, "tkv_cache_clear: ctx is NULL");
    tkv_status busy = tkv__ctx_busy(ctx, "tkv_cache_clear");
    if (busy) return busy;
    uint32_t n = tkv__pindex_evict_all(ctx->ix, ctx->spare);
    tkv__kv_give_back(ctx->kv, ctx->spare, n);
    return TKV_OK;
}

static void count_shared(const tkv__pindex *ix, uint32_t id, void *user) {
    const tkv__pnode *nd = tkv__pindex_node(ix, id);
    if (nd->parent != TKV__PNONE && nd->refs >= 2) *(uint64_t *)user += nd->n;
}

tkv_status tkv_cache_stats(const tkv_context *ctx, tkv_stats *out) {
    if (!ctx || !out) return tkv__fail(TKV_ERR_INVALID, "tkv_cache_stats: NULL argument");
    tkv_status busy = tkv__ctx_busy(ctx, "tkv_cache_stats");
    if (busy) return busy;
    *out = ctx->stats;
    tkv__pindex_stats ps;
    tkv__pindex_stats_get(ctx->ix, &ps);
    out->cells_total = ctx->kv->rows.n_cells;
    out->cells_used = ctx->kv->rows.n_cells - ctx->kv->n_free;
    out->cells_evictable = ps.evictable_cells;
    out->cells_pinned = ps.pinned_cells;
    out->nodes = ps.nodes;
    out->cells_shared = 0;
    tkv__pindex_foreach(ctx->ix, count_shared, &out->cells_shared);
    const tkv__kvcache *kv = ctx->kv;
    out->kv_bytes = 2ull * kv->rows.n_layer * kv->rows.n_cells * kv->rows.row_size;
    out->meta_bytes = (uint64_t)kv->rows.n_cells * (sizeof *kv->token + sizeof *kv->pos + sizeof *kv->free) +
                      tkv__pindex_bytes(ctx->ix);
    for (uint32_t s = 0; s < kv->n_seq; s++) out->meta_bytes += sizeof kv->seq[s] + (uint64_t)kv->seq[s].cap * sizeof(uint32_t);
    return TKV_OK;
}

/* ---- the check ------------------------------------------------------------ */

typedef struct check {
    const tkv_context *ctx;
    uint8_t *owned; /* (n_cells) 1: in the index */
    uint32_t *cells;
    tkv_token *tokens;
    tkv_status st;
} check;

/* Every cell of a node holds the token the index says, at its position. */
static void check_node_cells(const tkv__pindex *ix, uint32_t id, void *user) {
    check *c = user;
    const tkv__pnode *nd = tkv__pindex_node(ix, id);
    if (c->st || nd->parent == TKV__PNONE) return;
    tkv__pindex_run(ix, id, c->cells, c->tokens);
    const tkv__kvcache *kv = c->ctx->kv;
    for (uint32_t k = 0; k < nd->n && !c->st; k++) {
        uint32_t cell = c->cells[k];
        c->owned[cell] = 1;
        if (kv->token[cell] != c->tokens[k] || kv->pos[cell] != (tkv_pos)(nd->depth + k))
            c->st = tkv__fail(TKV_ERR_FORMAT,
                              "cache check: cell %u holds token %d at position %d, the index says token %d at %u", cell,
                              (int)kv->token[cell], (int)kv->pos[cell], (int)c->tokens[k], nd->depth + k);
    }
}

tkv_status tkv_cache_check(const tkv_context *ctx) {
    if (!ctx) return tkv__fail(TKV_ERR_INVALID, "tkv_cache_check: ctx is NULL");
    tkv_status st = tkv__ctx_busy(ctx, "tkv_cache_check");
    if (!st) st = tkv__pindex_check(ctx->ix);
    if (st) return st;
    const tkv__kvcache *kv = ctx->kv;
    check c = {ctx, tkv__calloc(kv->rows.n_cells, 1), tkv__malloc(kv->rows.n_cells * sizeof(uint32_t)),
               tkv__malloc(kv->rows.n_cells * sizeof(tkv_token)), TKV_OK};
    if (!c.owned || !c.cells || !c.tokens) {
        c.st = tkv__fail(TKV_ERR_NOMEM, "out of memory checking the cache");
        goto done;
    }
    tkv__pindex_foreach(ctx->ix, check_node_cells, &c);
    /* free cells: not in the index, holding nothing; the two add up */
    uint32_t owned = 0;
    for (uint32_t i = 0; i < kv->rows.n_cells; i++) owned += c.owned[i];
    for (uint32_t i = 0; i < kv->n_free && !c.st; i++) {
        uint32_t cell = kv->free[i];
        if (cell >= kv->rows.n_cells || c.owned[cell] || kv->token[cell] != TKV_TOKEN_NULL)
            c.st = tkv__fail(TKV_ERR_FORMAT, "cache check: free cell %u is in use", cell);
        else
            c.owned[cell] = 2;
    }
    if (!c.st && owned + kv->n_free != kv->rows.n_cells)
        c.st = tkv__fail(TKV_ERR_FORMAT, "cache check: %u cells in the index and %u free, of %u (some are lost)", owned,
                         kv->n_free, kv->rows.n_cells);
    /* each sequence's list is its path in the index */
    for (uint32_t s = 0; s < kv->n_seq && !c.st; s++) {
        const tkv__kvseq *q = &kv->seq[s];
        tkv__ppos end = tkv__pindex_seq_end(ctx->ix, (tkv_seq)s);
        if (tkv__pindex_len(ctx->ix, end) != q->n) {
            c.st = tkv__fail(TKV_ERR_FORMAT, "cache check: sequence %u holds %u cells, its index path %u tokens", s, q->n,
                             tkv__pindex_len(ctx->ix, end));
            break;
        }
        if (end.node != TKV__PNONE && tkv__pindex_node(ctx->ix, end.node)->ns != q->ns)
            c.st = tkv__fail(TKV_ERR_FORMAT, "cache check: sequence %u is in another namespace than its path", s);
        tkv__pindex_path(ctx->ix, end, c.cells, NULL);
        for (uint32_t p = 0; p < q->n && !c.st; p++)
            if (q->cells[p] != c.cells[p] || kv->pos[q->cells[p]] != (tkv_pos)p)
                c.st = tkv__fail(TKV_ERR_FORMAT, "cache check: sequence %u position %u: cell %u, its path has cell %u", s,
                                 p, q->cells[p], c.cells[p]);
    }
done:
    tkv__free(c.owned);
    tkv__free(c.cells);
    tkv__free(c.tokens);
    return c.st;
}

typedef struct walk_ctx {
    tkv_cache_visit_fn fn;
    void *user;
} walk_ctx;

static void visit_node(const tkv__pindex *ix, uint32_t id, void *user) {
    const walk_ctx *w = user;
    const tkv__pnode *nd = tkv__pindex_node(ix, id);
    tkv_cache_node out = {
        .id = id,
        .parent = nd->parent == TKV__PNONE ? TKV_CACHE_NODE_NONE : nd->parent,
        .ns = nd->ns,
        .depth = nd->depth,
        .n_tokens = nd->n,
        .refs = nd->refs,
        .pins = nd->pins,
        .hits = nd->hits,
        .last_use = nd->last_use,
    };
    w->fn(&out, w->user);
}

tkv_status tkv_cache_walk(const tkv_context *ctx, tkv_cache_visit_fn fn, void *user) {
    if (!ctx || !fn) return tkv__fail(TKV_ERR_INVALID, "tkv_cache_walk: NULL argument");
    tkv_status busy = tkv__ctx_busy(ctx, "tkv_cache_walk");
    if (busy) return busy;
    walk_ctx w = {fn, user};
    tkv__pindex_foreach(ctx->ix, visit_node, &w);
    return TKV_OK;
}

tkv_status tkv_cache_node_tokens(const tkv_context *ctx, uint32_t id, tkv_token *out, size_t cap, size_t *n) {
    if (!ctx || !n || (!out && cap)) return tkv__fail(TKV_ERR_INVALID, "tkv_cache_node_tokens: NULL argument");
    tkv_status busy = tkv__ctx_busy(ctx, "tkv_cache_node_tokens");
    if (busy) return busy;
    const tkv__pnode *nd = tkv__pindex_node(ctx->ix, id);
    if (!nd) return tkv__fail(TKV_ERR_INVALID, "tkv_cache_node_tokens: no node has id %u", id);
    *n = nd->n;
    if (cap < nd->n) return tkv__fail(TKV_ERR_FULL, "tkv_cache_node_tokens: %u tokens do not fit in %zu", nd->n, cap);
    tkv__pindex_run(ctx->ix, id, NULL, out);
    return TKV_OK;
}
