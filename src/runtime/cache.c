/*
 * cache.c — asking the cache what it holds: matching, pinning, clearing,
 * statistics, the check of every invariant, and walking the prefix tree.
 * The KV cache (kv/kvcache.h) does the work; these check arguments.
 */
#include "context.h"

#include "base/error.h"

#include <stddef.h>
#include <string.h>


static tkv_status cache_match(const tkv_context *ctx, uint64_t ns, const tkv_token *tokens, size_t n, size_t *len) {
    if (!ctx || (!tokens && n) || !len)
        return tkv__ctx_fail(ctx, tkv__fail(TKV_ERR_INVALID, "tkv_cache_match: NULL argument"));
    if (ctx->kv->st || ctx->kv->win) { /* a hybrid model: what is reusable ends at the deepest checkpoint; a
                                          window pool: where the window before it has its rows */
        const size_t room = n < ctx->kv->rows.n_cells ? n : ctx->kv->rows.n_cells; /* no prefix is longer */
        const size_t m = tkv__kv_match_cells(ctx->kv, ns, tokens, room, ctx->path_cells);
        *len = tkv__kv_reuse_floor(ctx->kv, ctx->path_cells, (uint32_t)m);
        return TKV_OK;
    }
    *len = tkv__kv_match(ctx->kv, ns, tokens, n);
    return TKV_OK;
}

tkv_status tkv_cache_match(const tkv_context *ctx, uint64_t ns, const tkv_token *tokens, size_t n, size_t *len) {
    TKV__GUARDED_READ(ctx, "tkv_cache_match", cache_match(ctx, ns, tokens, n, len));
}

static tkv_status cache_pin(tkv_context *ctx, uint64_t ns, const tkv_token *tokens, size_t n, size_t *len,
                            tkv_pin *pin) {
    if (!ctx || (!tokens && n) || !pin)
        return tkv__ctx_fail(ctx, tkv__fail(TKV_ERR_INVALID, "tkv_cache_pin: NULL argument"));
    tkv_status st = tkv__kv_pin(ctx->kv, ns, tokens, n, len, pin);
    return st ? tkv__ctx_fail(ctx, st) : TKV_OK;
}

tkv_status tkv_cache_pin(tkv_context *ctx, uint64_t ns, const tkv_token *tokens, size_t n, size_t *len, tkv_pin *pin) {
    TKV__GUARDED(ctx, "tkv_cache_pin", cache_pin(ctx, ns, tokens, n, len, pin));
}

static tkv_status cache_unpin(tkv_context *ctx, tkv_pin pin) {
    if (!ctx) return tkv__fail(TKV_ERR_INVALID, "tkv_cache_unpin: ctx is NULL");
    if (pin == 0 || tkv__kv_unpin(ctx->kv, pin)) return TKV_OK;
    return tkv__ctx_fail(ctx, tkv__fail(TKV_ERR_INVALID, "tkv_cache_unpin: no pin has handle %llu (released already?)",
                                        (unsigned long long)pin));
}

tkv_status tkv_cache_unpin(tkv_context *ctx, tkv_pin pin) { TKV__GUARDED(ctx, "tkv_cache_unpin", cache_unpin(ctx, pin)); }

static tkv_status cache_clear(tkv_context *ctx) {
    if (!ctx) return tkv__fail(TKV_ERR_INVALID, "tkv_cache_clear: ctx is NULL");
    tkv__kv_clear(ctx->kv);
    return TKV_OK;
}

tkv_status tkv_cache_clear(tkv_context *ctx) { TKV__GUARDED(ctx, "tkv_cache_clear", cache_clear(ctx)); }

/* the struct as first published: what tkv_cache_stats writes, and the least tkv_cache_stats_ex takes */
#define STATS_V1_SIZE (offsetof(tkv_stats, meta_bytes) + sizeof(uint64_t))

static tkv_status cache_stats(const tkv_context *ctx, tkv_stats *out, size_t size, const char *fn) {
    if (!ctx || !out) return tkv__ctx_fail(ctx, tkv__fail(TKV_ERR_INVALID, "%s: NULL argument", fn));
    if (size < STATS_V1_SIZE)
        return tkv__ctx_fail(ctx, tkv__fail(TKV_ERR_INVALID, "%s: size %zu is smaller than tkv_stats's first %zu bytes",
                                            fn, size, (size_t)STATS_V1_SIZE));
    tkv_stats st = ctx->stats; /* lookups, tokens reused and computed: the context counts them */
    tkv__kv_stats(ctx->kv, &st);
    memcpy(out, &st, size < sizeof st ? size : sizeof st); /* never past the caller's struct */
    return TKV_OK;
}

tkv_status tkv_cache_stats(const tkv_context *ctx, tkv_stats *out) {
    TKV__GUARDED_READ(ctx, "tkv_cache_stats", cache_stats(ctx, out, STATS_V1_SIZE, "tkv_cache_stats"));
}

tkv_status tkv_cache_stats_ex(const tkv_context *ctx, tkv_stats *out, size_t size) {
    TKV__GUARDED_READ(ctx, "tkv_cache_stats_ex", cache_stats(ctx, out, size, "tkv_cache_stats_ex"));
}

static tkv_status cache_check(const tkv_context *ctx) {
    if (!ctx) return tkv__fail(TKV_ERR_INVALID, "tkv_cache_check: ctx is NULL");
    return tkv__ctx_fail(ctx, tkv__kv_check(ctx->kv));
}

tkv_status tkv_cache_check(const tkv_context *ctx) { TKV__GUARDED(ctx, "tkv_cache_check", cache_check(ctx)); }

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

static tkv_status cache_walk(const tkv_context *ctx, tkv_cache_visit_fn fn, void *user) {
    if (!ctx || !fn) return tkv__ctx_fail(ctx, tkv__fail(TKV_ERR_INVALID, "tkv_cache_walk: NULL argument"));
    walk_ctx w = {fn, user};
    ((tkv_context *)ctx)->walking = true; /* the visitor may read (tkv__ctx_enter_read) */
    tkv__pindex_foreach(tkv__kv_index(ctx->kv), visit_node, &w);
    ((tkv_context *)ctx)->walking = false;
    return TKV_OK;
}

tkv_status tkv_cache_walk(const tkv_context *ctx, tkv_cache_visit_fn fn, void *user) {
    TKV__GUARDED(ctx, "tkv_cache_walk", cache_walk(ctx, fn, user));
}

static tkv_status node_tokens(const tkv_context *ctx, uint32_t id, tkv_token *out, size_t cap, size_t *n) {
    if (!ctx || !n || (!out && cap)) return tkv__ctx_fail(ctx, tkv__fail(TKV_ERR_INVALID, "tkv_cache_node_tokens: NULL argument"));
    const tkv__pindex *ix = tkv__kv_index(ctx->kv);
    const tkv__pnode *nd = tkv__pindex_node(ix, id);
    if (!nd) return tkv__ctx_fail(ctx, tkv__fail(TKV_ERR_INVALID, "tkv_cache_node_tokens: no node has id %u", id));
    *n = nd->n;
    if (cap < nd->n)
        return tkv__ctx_fail(ctx, tkv__fail(TKV_ERR_FULL, "tkv_cache_node_tokens: %u tokens do not fit in %zu", nd->n, cap));
    tkv__pindex_run(ix, id, NULL, out);
    return TKV_OK;
}

tkv_status tkv_cache_node_tokens(const tkv_context *ctx, uint32_t id, tkv_token *out, size_t cap, size_t *n) {
    TKV__GUARDED_READ(ctx, "tkv_cache_node_tokens", node_tokens(ctx, id, out, cap, n));
}
