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
    atomic_bool busy;        /* a call runs in the context: every other one is refused (tkv__ctx_enter) */
    atomic_uintptr_t owner;  /* the thread of that call (tkv__thread_tag), 0 when none */
    bool walking;            /* tkv_cache_walk is calling its visitor (on the owner's thread): reads may nest */
    const tkv_model *model;
    tkv_context_params params;
    tkv__kvcache *kv;       /* every cell, sequence and cached prefix: their one owner */
    tkv__fwd *fwd;
    tkv__pool *pool;
    /* decode scratch, sized at creation */
    uint32_t **cell_lists;  /* (n_batch) each chunk token's sequence cells */
    uint32_t *out;          /* (n_cells) batch indices that want logits */
    int32_t *logits_row;    /* (n_cells) batch index -> logits row, -1: none */
    uint32_t *row_cell;     /* (n_cells) batch index -> the cell its token is in (the last decode's) */
    tkv_token *seq_tokens;  /* (n_cells) a token list read from the cache (saving) or a file (loading) */
    tkv_pos *sync_pos;      /* (n_batch) tkv_seq_sync's batches */
    tkv_seq *sync_seq;      /* (n_batch) */
    bool *sync_logits;      /* (n_batch) */
    /* hybrid models: which batch tokens leave a checkpoint (kv/kvstate.h), and tkv_seq_sync's branch point */
    uint8_t *snap_kind;     /* (n_cells) tkv__ckpt_kind per batch token */
    uint32_t *seq_seen;     /* (n_seq_max) a batch's tokens per sequence, counted from its end */
    uint32_t *path_cells;   /* (n_cells) a matched prefix's cells */
    uint32_t *branch_at;    /* (n_seq_max) 0, or the length of sequence s's branch point (its attach found the
                               cached path longer than its deepest checkpoint): the token that reaches it leaves
                               one; per sequence, since the server attaches many before one decode */
    tkv_stats stats;
    /* the last batch's logits */
    float *logits;          /* (logits_cap, n_vocab) */
    size_t logits_cap, n_logits_rows, last_n;
    const float *last_logits; /* the last token's row of the last batch, or NULL */
    size_t logits_base;       /* tkv_get_logits(i) reads batch index i - logits_base (tkv_seq_sync's last
                                 pass starts at this index of its list; 0 after tkv_decode) */
    /* cache events (params.on_cache_event) */
    const tkv__kvevent *event; /* the one being reported, during the callback only */
    uint64_t fp[2];            /* the model's fingerprint, known when fp_known (images of evictions need it) */
    bool fp_known;
};

/*
 * The one failure path of every call on a context, const ones included:
 * the calling thread's last message becomes the context's too
 * (tkv_context_error). Returns st; a failure (st < 0) only is recorded.
 * Only the call that holds the context (tkv__ctx_enter) may use it: the
 * message buffer is then this thread's to write, const context or not.
 */
static inline tkv_status tkv__ctx_fail(const tkv_context *ctx, tkv_status st) {
    return ctx && st < 0 ? tkv__handle_fail((tkv__handle *)&ctx->h, st) : st;
}

/* A tag of the calling thread, the same in every file and different for every live thread. */
uintptr_t tkv__thread_tag(void);

/*
 * Enter a call on ctx, in one atomic step: TKV_OK, and the context is this
 * call's until tkv__ctx_leave; or TKV_ERR_BUSY when another call holds it
 * (one from its abort or event callback, or from another thread). A
 * refusal changes nothing in the context, its message included (the call
 * in progress owns it): the message goes to the thread's slot only. fn
 * names the caller. A NULL ctx enters (the call then reports it).
 */
static inline tkv_status tkv__ctx_enter(const tkv_context *ctx, const char *fn) {
    tkv_context *c = (tkv_context *)ctx; /* the guard is the one part a const call changes */
    if (!c) return TKV_OK;
    if (!atomic_exchange_explicit(&c->busy, true, memory_order_acquire)) {
        atomic_store_explicit(&c->owner, tkv__thread_tag(), memory_order_relaxed);
        return TKV_OK;
    }
    return tkv__fail(TKV_ERR_BUSY,
                     "%s: the context is in another call (from its abort or event callback, or another thread: a "
                     "context is used by one thread at a time)",
                     fn);
}

/* Leave the call tkv__ctx_enter let in. */
static inline void tkv__ctx_leave(const tkv_context *ctx) {
    tkv_context *c = (tkv_context *)ctx;
    if (!c) return;
    atomic_store_explicit(&c->owner, 0, memory_order_relaxed);
    atomic_store_explicit(&c->busy, false, memory_order_release);
}

/* Whether the calling thread's call holds ctx (a callback of that call is running on it). */
static inline bool tkv__ctx_held_here(const tkv_context *ctx) {
    return atomic_load_explicit(&((tkv_context *)ctx)->busy, memory_order_acquire) &&
           atomic_load_explicit(&((tkv_context *)ctx)->owner, memory_order_relaxed) == tkv__thread_tag();
}

/*
 * Enter a read-only call: as tkv__ctx_enter, but from inside a
 * tkv_cache_walk visitor on the walk's own thread it runs within the
 * walk's hold (*entered false: nothing to leave). A visitor reads the node
 * it is given (its tokens, what is cached); nothing it may call changes
 * the tree under the walk.
 */
static inline tkv_status tkv__ctx_enter_read(const tkv_context *ctx, const char *fn, bool *entered) {
    *entered = false;
    if (ctx && tkv__ctx_held_here(ctx) && ctx->walking) return TKV_OK;
    tkv_status st = tkv__ctx_enter(ctx, fn);
    *entered = !st;
    return st;
}

/* The body of a public call on ctx: `call` runs inside the guard, and its status is returned. */
#define TKV__GUARDED(ctx, fn, call)                                                                                    \
    do {                                                                                                               \
        tkv_status guard_ = tkv__ctx_enter((ctx), (fn));                                                               \
        if (guard_) return guard_;                                                                                     \
        guard_ = (call);                                                                                               \
        tkv__ctx_leave(ctx);                                                                                           \
        return guard_;                                                                                                 \
    } while (0)

/* The body of a read-only public call (tkv__ctx_enter_read). */
#define TKV__GUARDED_READ(ctx, fn, call)                                                                               \
    do {                                                                                                               \
        bool entered_;                                                                                                 \
        tkv_status guard_ = tkv__ctx_enter_read((ctx), (fn), &entered_);                                               \
        if (guard_) return guard_;                                                                                     \
        guard_ = (call);                                                                                               \
        if (entered_) tkv__ctx_leave(ctx);                                                                             \
        return guard_;                                                                                                 \
    } while (0)

/* Row i of the last batch's logits, for a call that holds ctx (tkv_get_logits without the guard, batch
   index i as tkv__ctx_decode numbered it); NULL when token i asked for none. */
const float *tkv__ctx_logits(const tkv_context *ctx, size_t i);

/* The cell that holds batch index i's token of the last decode (as tkv__ctx_logits numbers it), or UINT32_MAX: it
   tells a row's sequence and position apart from another's with the same tokens. */
uint32_t tkv__ctx_row_cell(const tkv_context *ctx, size_t i);
/* The identity of ctx's arithmetic (arith_id.c): equal for two contexts whose argmax choices are the same facts
   about a prefix (the same build, kernel level and batch_invariant); 0 for a context that is not batch_invariant,
   whose choices are facts about nothing. Cache files carry known tokens under it. */
uint64_t tkv__arith_id(const tkv_context *ctx);

/* tkv_decode inside a call that holds ctx (tkv_seq_sync's passes). */
tkv_status tkv__ctx_decode(tkv_context *ctx, const tkv_batch *b);

#endif
