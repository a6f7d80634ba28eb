/*
 * sequence.c — sequences over the token-aware cache: length, tokens,
 * truncate, clear, fork, and tkv_seq_sync, which makes a sequence hold a
 * token list by reusing the longest cached prefix and decoding the rest.
 *
 * A sequence is a position in the prefix index (its end) and, mirrored in
 * the KV cache, the list of its cells; both change together here.
 */
#include "context.h"

#include "base/alloc.h"
#include "base/error.h"

#include <string.h>

static tkv_status ctx_fail(tkv_context *ctx, tkv_status st) { return tkv__handle_fail(&ctx->h, st); }

static tkv_status check_seq(tkv_context *ctx, tkv_seq seq, const char *fn) {
    if (seq < 0 || (uint32_t)seq >= ctx->kv->n_seq)
        return ctx_fail(ctx, tkv__fail(TKV_ERR_INVALID, "%s: sequence %d is out of range (n_seq_max %u)", fn, (int)seq,
                                       ctx->kv->n_seq));
    return TKV_OK;
}

/* Point seq at `at` (a prefix of `len` tokens in namespace ns); room for the
   cell list was reserved. */
static void move_seq(tkv_context *ctx, tkv_seq seq, uint64_t ns, tkv__ppos at, uint32_t len) {
    tkv__kvseq *s = &ctx->kv->seq[seq];
    tkv__pindex_path(ctx->ix, at, s->cells, NULL);
    s->n = len;
    s->ns = ns;
    tkv__pindex_seq_set(ctx->ix, seq, at);
}

tkv_pos tkv_seq_len(const tkv_context *ctx, tkv_seq seq) {
    if (!ctx || seq < 0 || (uint32_t)seq >= ctx->kv->n_seq || tkv__ctx_busy(ctx, "tkv_seq_len")) return 0;
    return (tkv_pos)ctx->kv->seq[seq].n;
}

tkv_status tkv_seq_namespace(const tkv_context *ctx, tkv_seq seq, uint64_t *ns) {
    if (!ctx || !ns) return tkv__fail(TKV_ERR_INVALID, "tkv_seq_namespace: NULL argument");
    tkv_status st = tkv__ctx_busy(ctx, "tkv_seq_namespace");
    if (st) return st;
    if (seq < 0 || (uint32_t)seq >= ctx->kv->n_seq)
        return tkv__fail(TKV_ERR_INVALID, "tkv_seq_namespace: sequence %d is out of range", (int)seq);
    *ns = ctx->kv->seq[seq].ns;
    return TKV_OK;
}

tkv_status tkv_seq_tokens(const tkv_context *ctx, tkv_seq seq, tkv_token *out, size_t cap, size_t *n) {
    if (!ctx || !n) return tkv__fail(TKV_ERR_INVALID, "tkv_seq_tokens: NULL argument");
    tkv_status busy = tkv__ctx_busy(ctx, "tkv_seq_tokens");
    if (busy) return busy;
    if (seq < 0 || (uint32_t)seq >= ctx->kv->n_seq)
        return tkv__fail(TKV_ERR_INVALID, "tkv_seq_tokens: sequence %d is out of range", (int)seq);
    const tkv__kvseq *s = &ctx->kv->seq[seq];
    *n = s->n;
    if (cap < s->n) return tkv__fail(TKV_ERR_FULL, "tkv_seq_tokens: %u tokens do not fit in %zu", s->n, cap);
    for (uint32_t i = 0; i < s->n; i++) out[i] = ctx->kv->token[s->cells[i]];
    return TKV_OK;
}

tkv_status tkv_seq_truncate(tkv_context *ctx, tkv_seq seq, tkv_pos n) {
    if (!ctx) return tkv__fail(TKV_ERR_INVALID, "tkv_seq_truncate: ctx is NULL");
    tkv_status st = tkv__ctx_busy(ctx, "tkv_seq_truncate");
    if (!st) st = check_seq(ctx, seq, "tkv_seq_truncate");
    if (st) return st;
    if (n < 0) return ctx_fail(ctx, tkv__fail(TKV_ERR_INVALID, "tkv_seq_truncate: negative length %d", (int)n));
    tkv__kvseq *s = &ctx->kv->seq[seq];
    if ((uint32_t)n >= s->n) return TKV_OK;
    tkv__ppos at = tkv__pindex_ancestor(ctx->ix, tkv__pindex_seq_end(ctx->ix, seq), (uint32_t)n);
    tkv__pindex_seq_set(ctx->ix, seq, tkv__pindex_cut(ctx->ix, at)); /* the dropped tail: its own node */
    s->n = (uint32_t)n; /* the list's first n cells are the ancestor's path */
    return TKV_OK;
}

tkv_status tkv_seq_clear(tkv_context *ctx, tkv_seq seq) { return tkv_seq_truncate(ctx, seq, 0); }

tkv_status tkv_seq_fork(tkv_context *ctx, tkv_seq src, tkv_seq dst) {
    if (!ctx) return tkv__fail(TKV_ERR_INVALID, "tkv_seq_fork: ctx is NULL");
    tkv_status st = tkv__ctx_busy(ctx, "tkv_seq_fork");
    if (!st) st = check_seq(ctx, src, "tkv_seq_fork");
    if (!st) st = check_seq(ctx, dst, "tkv_seq_fork");
    if (st || src == dst) return st;
    const tkv__kvseq *s = &ctx->kv->seq[src];
    tkv__kvseq *d = &ctx->kv->seq[dst];
    if (s->n > d->cap) {
        d->n = 0; /* reserve counts from n: ask for all of it */
        tkv__ppos old = tkv__pindex_seq_end(ctx->ix, dst);
        uint32_t old_n = tkv__pindex_len(ctx->ix, old);
        if ((st = tkv__kv_seq_reserve(ctx->kv, dst, s->n))) {
            d->n = old_n;
            return ctx_fail(ctx, st);
        }
    }
    if (s->n) memcpy(d->cells, s->cells, s->n * sizeof *d->cells);
    d->n = s->n;
    d->ns = s->ns;
    tkv__pindex_seq_set(ctx->ix, dst, tkv__pindex_seq_end(ctx->ix, src));
    return TKV_OK;
}

/* Validate a token list for seq and reserve room for it in seq's cell list. */
static tkv_status prepare(tkv_context *ctx, tkv_seq seq, const tkv_token *tokens, size_t n, const char *fn) {
    tkv_status st = check_seq(ctx, seq, fn);
    if (st) return st;
    if (!tokens && n) return ctx_fail(ctx, tkv__fail(TKV_ERR_INVALID, "%s: tokens is NULL", fn));
    const uint32_t n_vocab = ctx->model->hp.n_vocab;
    for (size_t i = 0; i < n; i++)
        if (tokens[i] < 0 || (uint32_t)tokens[i] >= n_vocab)
            return ctx_fail(ctx, tkv__fail(TKV_ERR_INVALID, "%s: token %zu: id %d is out of range (vocabulary of %u)", fn,
                                           i, (int)tokens[i], n_vocab));
    if (n > ctx->kv->rows.n_cells)
        return ctx_fail(ctx, tkv__fail(TKV_ERR_FULL, "%s: %zu tokens exceed the cache's %u cells", fn, n,
                                       ctx->kv->rows.n_cells));
    tkv__kvseq *s = &ctx->kv->seq[seq];
    if (n > s->cap) { /* room for the whole list, before anything moves */
        uint32_t keep_n = s->n;
        s->n = 0;
        st = tkv__kv_seq_reserve(ctx->kv, seq, (uint32_t)n);
        s->n = keep_n;
        if (st) return ctx_fail(ctx, st);
    }
    return TKV_OK;
}

/* The attach step shared by tkv_seq_attach and tkv_seq_sync: seq holds the
   longest cached prefix of tokens, at most n - 1 of them. */
static size_t attach(tkv_context *ctx, tkv_seq seq, uint64_t ns, const tkv_token *tokens, size_t n) {
    tkv__ppos at;
    size_t cached = tkv__pindex_match(ctx->ix, ns, tokens, n, true, &at);
    uint32_t keep = (uint32_t)(cached < n ? cached : (n ? n - 1 : 0));
    move_seq(ctx, seq, ns, tkv__pindex_ancestor(ctx->ix, at, keep), keep);
    tkv__pindex_cut(ctx->ix, tkv__pindex_seq_end(ctx->ix, seq));
    tkv__pindex_touch(ctx->ix, tkv__pindex_seq_end(ctx->ix, seq)); /* the kept prefix was used now, not its cut tail */
    ctx->stats.lookups++;
    ctx->stats.tokens_reused += keep;
    return keep;
}

tkv_status tkv_seq_attach(tkv_context *ctx, tkv_seq seq, uint64_t ns, const tkv_token *tokens, size_t n,
                          size_t *n_reused) {
    if (!ctx) return tkv__fail(TKV_ERR_INVALID, "tkv_seq_attach: ctx is NULL");
    if (n_reused) *n_reused = 0;
    tkv_status st = tkv__ctx_busy(ctx, "tkv_seq_attach");
    if (!st) st = prepare(ctx, seq, tokens, n, "tkv_seq_attach");
    if (st) return st;
    size_t keep = attach(ctx, seq, ns, tokens, n);
    if (n_reused) *n_reused = keep;
    return TKV_OK;
}

tkv_status tkv_seq_sync(tkv_context *ctx, tkv_seq seq, uint64_t ns, const tkv_token *tokens, size_t n,
                        size_t *n_reused) {
    if (!ctx) return tkv__fail(TKV_ERR_INVALID, "tkv_seq_sync: ctx is NULL");
    if (n_reused) *n_reused = 0;
    tkv_status st = tkv__ctx_busy(ctx, "tkv_seq_sync");
    if (st) return st;
    ctx->last_logits = NULL;
    st = prepare(ctx, seq, tokens, n, "tkv_seq_sync");
    if (st) return st;
    /* the last token is decoded even when cached, so that its logits are there */
    size_t keep = attach(ctx, seq, ns, tokens, n);
    if (n_reused) *n_reused = keep;

    for (size_t c0 = keep; c0 < n; c0 += ctx->params.n_batch) {
        size_t c1 = c0 + ctx->params.n_batch < n ? c0 + ctx->params.n_batch : n;
        for (size_t i = c0; i < c1; i++) {
            ctx->sync_pos[i - c0] = (tkv_pos)i;
            ctx->sync_seq[i - c0] = seq;
            ctx->sync_logits[i - c0] = i + 1 == n;
        }
        tkv_batch b = {c1 - c0, tokens + c0, ctx->sync_pos, ctx->sync_seq, ctx->sync_logits};
        if ((st = tkv_decode(ctx, &b))) return st; /* seq holds tokens[0..c0) */
    }
    return TKV_OK;
}
