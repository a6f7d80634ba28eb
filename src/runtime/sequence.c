/*
 * sequence.c — sequences over the token-aware cache: length, tokens,
 * truncate, clear, fork, and tkv_seq_sync, which makes a sequence hold a
 * token list by reusing the longest cached prefix and decoding the rest.
 *
 * The KV cache (kv/kvcache.h) owns the sequences: these functions check
 * their arguments and ask it.
 */
#include "context.h"

#include "base/alloc.h"
#include "base/error.h"

#include <string.h>


static tkv_status check_seq(tkv_context *ctx, tkv_seq seq, const char *fn) {
    if (seq < 0 || (uint32_t)seq >= ctx->kv->n_seq)
        return tkv__ctx_fail(ctx, tkv__fail(TKV_ERR_INVALID, "%s: sequence %d is out of range (n_seq_max %u)", fn, (int)seq,
                                       ctx->kv->n_seq));
    return TKV_OK;
}

tkv_pos tkv_seq_len(const tkv_context *ctx, tkv_seq seq) {
    bool entered;
    if (!ctx || tkv__ctx_enter_read(ctx, "tkv_seq_len", &entered)) return 0;
    const tkv_pos n = seq >= 0 && (uint32_t)seq < ctx->kv->n_seq ? (tkv_pos)ctx->kv->seq[seq].n : 0;
    if (entered) tkv__ctx_leave(ctx);
    return n;
}

static tkv_status seq_namespace(const tkv_context *ctx, tkv_seq seq, uint64_t *ns) {
    if (!ctx || !ns) return tkv__ctx_fail(ctx, tkv__fail(TKV_ERR_INVALID, "tkv_seq_namespace: NULL argument"));
    if (seq < 0 || (uint32_t)seq >= ctx->kv->n_seq)
        return tkv__ctx_fail(ctx, tkv__fail(TKV_ERR_INVALID, "tkv_seq_namespace: sequence %d is out of range", (int)seq));
    *ns = ctx->kv->seq[seq].ns;
    return TKV_OK;
}

tkv_status tkv_seq_namespace(const tkv_context *ctx, tkv_seq seq, uint64_t *ns) {
    TKV__GUARDED_READ(ctx, "tkv_seq_namespace", seq_namespace(ctx, seq, ns));
}

static tkv_status seq_tokens(const tkv_context *ctx, tkv_seq seq, tkv_token *out, size_t cap, size_t *n) {
    if (!ctx || !n) return tkv__ctx_fail(ctx, tkv__fail(TKV_ERR_INVALID, "tkv_seq_tokens: NULL argument"));
    if (seq < 0 || (uint32_t)seq >= ctx->kv->n_seq)
        return tkv__ctx_fail(ctx, tkv__fail(TKV_ERR_INVALID, "tkv_seq_tokens: sequence %d is out of range", (int)seq));
    const uint32_t len = ctx->kv->seq[seq].n;
    *n = len;
    if (cap < len)
        return tkv__ctx_fail(ctx, tkv__fail(TKV_ERR_FULL, "tkv_seq_tokens: %u tokens do not fit in %zu", len, cap));
    tkv__kv_seq_tokens(ctx->kv, seq, out);
    return TKV_OK;
}

tkv_status tkv_seq_tokens(const tkv_context *ctx, tkv_seq seq, tkv_token *out, size_t cap, size_t *n) {
    TKV__GUARDED_READ(ctx, "tkv_seq_tokens", seq_tokens(ctx, seq, out, cap, n));
}

static tkv_status seq_truncate(tkv_context *ctx, tkv_seq seq, tkv_pos n, const char *fn) {
    if (!ctx) return tkv__fail(TKV_ERR_INVALID, "%s: ctx is NULL", fn);
    tkv_status st = check_seq(ctx, seq, fn);
    if (st) return st;
    if (n < 0) return tkv__ctx_fail(ctx, tkv__fail(TKV_ERR_INVALID, "%s: negative length %d", fn, (int)n));
    tkv__kv_seq_truncate(ctx->kv, seq, (uint32_t)n);
    if (ctx->branch_at) ctx->branch_at[seq] = 0; /* its branch point belonged to the list it held */
    return TKV_OK;
}

tkv_status tkv_seq_truncate(tkv_context *ctx, tkv_seq seq, tkv_pos n) {
    TKV__GUARDED(ctx, "tkv_seq_truncate", seq_truncate(ctx, seq, n, "tkv_seq_truncate"));
}

tkv_status tkv_seq_clear(tkv_context *ctx, tkv_seq seq) {
    TKV__GUARDED(ctx, "tkv_seq_clear", seq_truncate(ctx, seq, 0, "tkv_seq_clear"));
}

static tkv_status seq_fork(tkv_context *ctx, tkv_seq src, tkv_seq dst) {
    if (!ctx) return tkv__fail(TKV_ERR_INVALID, "tkv_seq_fork: ctx is NULL");
    tkv_status st = check_seq(ctx, src, "tkv_seq_fork");
    if (!st) st = check_seq(ctx, dst, "tkv_seq_fork");
    if (st || src == dst) return st;
    st = tkv__kv_seq_fork(ctx->kv, src, dst);
    return st ? tkv__ctx_fail(ctx, st) : TKV_OK;
}

tkv_status tkv_seq_fork(tkv_context *ctx, tkv_seq src, tkv_seq dst) {
    TKV__GUARDED(ctx, "tkv_seq_fork", seq_fork(ctx, src, dst));
}

/* Validate a token list for seq. */
static tkv_status check_tokens(tkv_context *ctx, tkv_seq seq, const tkv_token *tokens, size_t n, const char *fn) {
    tkv_status st = check_seq(ctx, seq, fn);
    if (st) return st;
    if (!tokens && n) return tkv__ctx_fail(ctx, tkv__fail(TKV_ERR_INVALID, "%s: tokens is NULL", fn));
    const uint32_t n_vocab = ctx->model->hp.n_vocab;
    for (size_t i = 0; i < n; i++)
        if (tokens[i] < 0 || (uint32_t)tokens[i] >= n_vocab)
            return tkv__ctx_fail(ctx, tkv__fail(TKV_ERR_INVALID, "%s: token %zu: id %d is out of range (vocabulary of %u)", fn,
                                           i, (int)tokens[i], n_vocab));
    if (n > ctx->kv->rows.n_cells)
        return tkv__ctx_fail(ctx, tkv__fail(TKV_ERR_FULL, "%s: %zu tokens exceed the cache's %u cells", fn, n,
                                       ctx->kv->rows.n_cells));
    return TKV_OK;
}

/* The attach step shared by tkv_seq_attach and tkv_seq_sync: seq holds the longest cached prefix of tokens,
   at most n - 1 of them (a transaction that stages no cells). */
static tkv_status attach(tkv_context *ctx, tkv_seq seq, uint64_t ns, const tkv_token *tokens, size_t n,
                         const char *fn, size_t *n_reused) {
    tkv_status st = check_tokens(ctx, seq, tokens, n, fn);
    uint32_t keep = 0;
    /* at most n - 1: the last token is left to decode for its logits */
    uint32_t reuse_max = n ? (uint32_t)n - 1 : 0;
    if (!st) ctx->branch_at[seq] = 0;
    if (!st && (ctx->kv->st || ctx->kv->win) && reuse_max) {
        /* a hybrid model: reusable up to the deepest checkpoint on the common prefix; where that falls short
           of it, the decode leaves one at the branch point for the next request that diverges there. A window
           pool: up to where the window before it still has its rows */
        const uint32_t common = (uint32_t)tkv__kv_match_cells(ctx->kv, ns, tokens, reuse_max, ctx->path_cells);
        reuse_max = tkv__kv_reuse_floor(ctx->kv, ctx->path_cells, common);
        if (reuse_max && ctx->kv->st) tkv__kv_state_touch(ctx->kv, ctx->path_cells[reuse_max - 1]);
        if (reuse_max < common && ctx->kv->st) ctx->branch_at[seq] = common;
    }
    const tkv__kvpath path = {.name = fn, .seq = seq, .ns = ns, .tokens = tokens, .n = (uint32_t)n,
                              .reuse_max = reuse_max};
    if (!st) st = tkv__kv_stage_path(ctx->kv, &path, &keep);
    if (st) return tkv__ctx_fail(ctx, st);
    tkv__kv_commit(ctx->kv);
    ctx->stats.lookups++;
    ctx->stats.tokens_reused += keep;
    if (n_reused) *n_reused = keep;
    return TKV_OK;
}

static tkv_status seq_attach(tkv_context *ctx, tkv_seq seq, uint64_t ns, const tkv_token *tokens, size_t n,
                             size_t *n_reused) {
    if (!ctx) return tkv__fail(TKV_ERR_INVALID, "tkv_seq_attach: ctx is NULL");
    if (n_reused) *n_reused = 0;
    return attach(ctx, seq, ns, tokens, n, "tkv_seq_attach", n_reused);
}

tkv_status tkv_seq_attach(tkv_context *ctx, tkv_seq seq, uint64_t ns, const tkv_token *tokens, size_t n,
                          size_t *n_reused) {
    TKV__GUARDED(ctx, "tkv_seq_attach", seq_attach(ctx, seq, ns, tokens, n, n_reused));
}

static tkv_status seq_sync(tkv_context *ctx, tkv_seq seq, uint64_t ns, const tkv_token *tokens, size_t n,
                           size_t *n_reused) {
    if (!ctx) return tkv__fail(TKV_ERR_INVALID, "tkv_seq_sync: ctx is NULL");
    if (n_reused) *n_reused = 0;
    ctx->last_logits = NULL;
    ctx->last_n = 0;
    /* the last token is decoded even when cached, so that its logits are there (its cached cell is kept:
       the decode needs no new one) */
    size_t keep;
    tkv_status st = attach(ctx, seq, ns, tokens, n, "tkv_seq_sync", &keep);
    if (st) return st;
    if (n_reused) *n_reused = keep;

    for (size_t c0 = keep; c0 < n; c0 += ctx->params.n_batch) {
        size_t c1 = c0 + ctx->params.n_batch < n ? c0 + ctx->params.n_batch : n;
        for (size_t i = c0; i < c1; i++) {
            ctx->sync_pos[i - c0] = (tkv_pos)i;
            ctx->sync_seq[i - c0] = seq;
            ctx->sync_logits[i - c0] = i + 1 == n;
        }
        tkv_batch b = {c1 - c0, tokens + c0, ctx->sync_pos, ctx->sync_seq, ctx->sync_logits};
        if ((st = tkv__ctx_decode(ctx, &b))) break; /* seq holds tokens[0..c0) */
        ctx->logits_base = c0; /* tkv_get_logits indexes the list: its last token is n - 1 */
    }
    ctx->branch_at[seq] = 0;
    return st;
}

tkv_status tkv_seq_sync(tkv_context *ctx, tkv_seq seq, uint64_t ns, const tkv_token *tokens, size_t n,
                        size_t *n_reused) {
    TKV__GUARDED(ctx, "tkv_seq_sync", seq_sync(ctx, seq, ns, tokens, n, n_reused));
}
