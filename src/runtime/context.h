/*
 * context.h — the inside of a tkv_context.
 */
#ifndef TKV_CONTEXT_H
#define TKV_CONTEXT_H

#include "base/error.h"
#include "model/forward.h"
#include "kv/kvcache.h"
#include "model/model.h"
#include "compute/threadpool.h"

#include <stdatomic.h>

struct tkv_context {
    tkv__handle h; /* first: tkv_last_error(ctx) finds the context's message */
    atomic_bool busy; /* a decode runs: every other call is refused (tkv__ctx_busy) */
    const tkv_model *model;
    tkv_context_params params;
    tkv__kvcache *kv;       /* every cell, sequence and cached prefix: their one owner */
    tkv__fwd *fwd;
    tkv__pool *pool;
    /* decode scratch, sized at creation */
    uint32_t **cell_lists;  /* (n_batch) each chunk token's sequence cells */
    uint32_t *out;          /* (n_cells) batch indices that want logits */
    int32_t *logits_row;    /* (n_cells) batch index -> logits row, -1: none */
    tkv_token *seq_tokens;  /* (n_cells) a token list read from the cache (saving) or a file (loading) */
    tkv_pos *sync_pos;      /* (n_batch) tkv_seq_sync's batches */
    tkv_seq *sync_seq;      /* (n_batch) */
    bool *sync_logits;      /* (n_batch) */
    tkv_stats stats;
    /* the last batch's logits */
    float *logits;          /* (logits_cap, n_vocab) */
    size_t logits_cap, n_logits_rows, last_n;
    const float *last_logits; /* the last token's row of the last batch, or NULL */
    /* cache events (params.on_cache_event) */
    const tkv__kvevent *event; /* the one being reported, during the callback only */
    uint64_t fp[2];            /* the model's fingerprint, known when fp_known (images of evictions need it) */
    bool fp_known;
};

/*
 * The one failure path of every call on a context, const ones included:
 * the calling thread's last message becomes the context's too
 * (tkv_context_error). Returns st; a failure (st < 0) only is recorded.
 * The message buffer is the handle's one mutable part, which a const
 * context still may write: a context is used by one thread at a time.
 */
static inline tkv_status tkv__ctx_fail(const tkv_context *ctx, tkv_status st) {
    return ctx && st < 0 ? tkv__handle_fail((tkv__handle *)&ctx->h, st) : st;
}

/*
 * TKV_ERR_BUSY, with the context left as it is, when a decode on ctx is
 * running: the call comes from its abort callback, or from another thread
 * (a context is used by one thread at a time). The cache's structures are
 * half-updated during a decode; a call in between corrupted them. fn names
 * the caller in the message. TKV_OK otherwise.
 */
static inline tkv_status tkv__ctx_busy(const tkv_context *ctx, const char *fn) {
    if (!atomic_load_explicit(&ctx->busy, memory_order_acquire)) return TKV_OK;
    return tkv__ctx_fail(ctx, tkv__fail(TKV_ERR_BUSY,
                                        "%s: the context is decoding (a call from its abort callback, or another thread)",
                                        fn));
}

#endif
