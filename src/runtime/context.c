/*
 * context.c — a context: KV cache, prefix index, thread pool and forward
 * scratch over one model, and the transactional decode.
 *
 * tkv_decode is one KV cache transaction (kv/kvcache.h) around the forward
 * pass:
 *   1. check the tokens' ids and make room for the logits;
 *   2. stage the batch in the cache (sequence ids, positions, cells: free
 *      ones, or virtual ones standing for cells to evict, so that nothing
 *      cached is overwritten yet);
 *   3. run the forward pass in chunks of n_batch tokens, writing the staged
 *      cells' K/V rows;
 *   4. commit, which cannot fail (evict, move, index, grow the sequences),
 *      or, when the forward pass failed (or was aborted), roll back: cache,
 *      index and sequences are exactly as before.
 */
#include "context.h"

#include "base/alloc.h"
#include "base/error.h"
#include "base/params.h"
#include "compute/cpus.h"
#include "model/forward.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

int tkv_default_threads(char *why, size_t cap) {
    tkv__cpus c;
    tkv__cpus_detect("", NULL, 0, &c);
    if (why && cap) tkv__cpus_describe(&c, why, cap);
    return c.threads;
}

static tkv_context_params context_defaults(void) {
    return (tkv_context_params){
        .size = sizeof(tkv_context_params),
        .n_cells = 4096,
        .n_seq_max = 256,
        .n_batch = 512,
        .n_threads = tkv_default_threads(NULL, 0),
        .kv_type = TKV_TYPE_F16,
        .batch_invariant = true, /* reuse never changes an answer; it costs nothing measurable (bench/RESULTS.md) */
        .kv_type_v = TKV_TYPE_COUNT, /* as kv_type */
        .state_cache_mib = 1024,
        .state_interval = 32, /* divergences land within 32 tokens of a checkpoint: >= 80% of 100-200-token
                                 common prefixes reused on average */
    };
}

tkv_status tkv_context_params_init(tkv_context_params *p, size_t size) {
    const tkv_context_params d = context_defaults();
    return tkv__params_init(p, size, &d, sizeof d, "tkv_context_params");
}


void tkv_context_free(tkv_context *ctx) {
    if (!ctx) return;
    tkv__pool_free(ctx->pool);
    tkv__fwd_free(ctx->fwd);
    tkv__kv_free(ctx->kv);
    tkv__free(ctx->sync_pos);
    tkv__free(ctx->sync_seq);
    tkv__free(ctx->sync_logits);
    tkv__free(ctx->logits);
    tkv__free(ctx->logits_row);
    tkv__free(ctx->row_cell);
    tkv__free(ctx->cell_lists);
    tkv__free(ctx->out);
    tkv__free(ctx->seq_tokens);
    tkv__free(ctx->snap_kind);
    tkv__free(ctx->seq_seen);
    tkv__free(ctx->branch_at);
    tkv__free(ctx->path_cells);
    ctx->h.magic = 0;
    tkv__free(ctx);
}

/* The window pool of swa_rows rows (none for 0): which cache layers are window layers (those whose own
   attention layer is one; a KV-shared layer reads a layer of its own kind), and the minimum. */
static tkv_status window_pool(const tkv_model *model, const tkv_context_params *p, bool *layer_win,
                              tkv__kvwin_params *wp) {
    if (!p->swa_rows) return TKV_OK;
    const uint32_t n = model->ext.kv_layers, W = model->ext.swa_window;
    uint32_t n_win = 0;
    for (uint32_t l = 0; l < n; l++) layer_win[l] = false;
    for (uint32_t l = 0; l < model->hp.n_layer; l++) {
        const tkv__attn_layer *A = &model->ext.attn[l];
        if (A->own_kv && A->kv_layer < n && A->swa) layer_win[A->kv_layer] = true, n_win++;
    }
    if (!W || !n_win)
        return tkv__fail(TKV_ERR_UNSUPPORTED, "tkv_context_create: swa_rows = %u, but the model (%s) has no "
                         "sliding-window layers", p->swa_rows, model->hp.arch);
    const uint64_t min = (uint64_t)p->n_seq_max * W;
    if (p->swa_rows < min)
        return tkv__fail(TKV_ERR_INVALID, "tkv_context_create: swa_rows = %u is under the minimum of %llu "
                         "(n_seq_max %u x the window of %u positions)", p->swa_rows, (unsigned long long)min,
                         p->n_seq_max, W);
    /* a cell holds one row at most: rows beyond n_cells would never be used */
    *wp = (tkv__kvwin_params){.window = W, .n_rows = p->swa_rows < p->n_cells ? p->swa_rows : p->n_cells,
                              .layer_win = layer_win};
    return TKV_OK;
}

/* The cache's report, as the caller's callback sees it. */
static void relay_event(void *user, const tkv__kvevent *e) {
    tkv_context *ctx = user;
    const tkv_cache_event ev = {(tkv_cache_event_kind)e->kind, e->ns, e->tokens, e->from, e->end};
    ctx->event = e;
    ctx->params.on_cache_event(ctx, &ev, ctx->params.cache_event_user);
    ctx->event = NULL;
}

tkv_status tkv_context_create(const tkv_model *model, const tkv_context_params *params, tkv_context **out) {
    if (!out) return tkv__fail(TKV_ERR_INVALID, "tkv_context_create: out is NULL");
    *out = NULL;
    if (!model) return tkv__fail(TKV_ERR_INVALID, "tkv_context_create: model is NULL");
    if (model->vocab_only || !model->w.layers)
        return tkv__fail(TKV_ERR_INVALID, "tkv_context_create: the model was loaded vocab_only (no weights)");
    tkv_context_params p = context_defaults();
    tkv_status st = params ? tkv__params_read(&p, sizeof p, params, "tkv_context_params") : TKV_OK;
    if (st) return st;
    if (!p.n_cells || !p.n_seq_max || !p.n_batch)
        return tkv__fail(TKV_ERR_INVALID, "tkv_context_create: n_cells (%u), n_seq_max (%u) and n_batch (%u) must be > 0",
                         p.n_cells, p.n_seq_max, p.n_batch);
    if (p.n_threads < 1) p.n_threads = 1;
    if (p.n_batch > p.n_cells) p.n_batch = p.n_cells;

    tkv_context *ctx = tkv__calloc(1, sizeof *ctx);
    if (!ctx) return tkv__fail(TKV_ERR_NOMEM, "out of memory for the context");
    ctx->h.magic = TKV__CONTEXT_MAGIC;
    ctx->model = model;
    ctx->params = p;
    const tkv_type type_v = p.kv_type_v == TKV_TYPE_COUNT ? p.kv_type : p.kv_type_v;
    bool layer_win[TKV__MAX_LAYERS];
    tkv__kvwin_params wp;
    st = window_pool(model, &p, layer_win, &wp);
    /* K/V rows for the layers that own them (gemma4's KV-shared layers read others') */
    if (!st)
        st = tkv__kv_create(p.n_cells, model->ext.kv_layers, model->ext.kv_width, p.kv_type, type_v, p.n_seq_max,
                            p.swa_rows ? &wp : NULL, &ctx->kv);
    if (!st && model->ext.state_floats) {
        const size_t bytes = model->ext.state_floats * sizeof(float);
        const uint64_t budget = (uint64_t)p.state_cache_mib << 20;
        const uint64_t slots = budget / bytes;
        st = tkv__kv_states_create(ctx->kv, model->ext.state_floats, slots > UINT32_MAX ? UINT32_MAX : (uint32_t)slots);
    }
    if (!st) st = tkv__fwd_create(model, p.n_batch, p.n_cells, p.n_threads, &ctx->fwd);
    if (!st) st = tkv__pool_create(p.n_threads, &ctx->pool);
    if (!st && p.on_cache_event) {
        /* computed once: an eviction's image must not hash the vocabulary on the decode path */
        st = tkv_model_fingerprint(model, ctx->fp);
        ctx->fp_known = !st;
        tkv__kv_set_events(ctx->kv, relay_event, ctx);
    }
    if (!st) {
        ctx->stats.cells_total = p.n_cells;
        ctx->cell_lists = tkv__malloc(p.n_batch * sizeof *ctx->cell_lists);
        ctx->out = tkv__malloc(p.n_cells * sizeof *ctx->out);
        ctx->logits_row = tkv__malloc(p.n_cells * sizeof *ctx->logits_row);
        ctx->row_cell = tkv__malloc(p.n_cells * sizeof *ctx->row_cell);
        ctx->seq_tokens = tkv__malloc(p.n_cells * sizeof *ctx->seq_tokens);
        ctx->sync_pos = tkv__malloc(p.n_batch * sizeof *ctx->sync_pos);
        ctx->sync_seq = tkv__malloc(p.n_batch * sizeof *ctx->sync_seq);
        ctx->sync_logits = tkv__malloc(p.n_batch * sizeof *ctx->sync_logits);
        ctx->snap_kind = tkv__malloc(p.n_cells * sizeof *ctx->snap_kind);
        ctx->seq_seen = tkv__calloc(p.n_seq_max, sizeof *ctx->seq_seen);
        ctx->path_cells = tkv__malloc(p.n_cells * sizeof *ctx->path_cells);
        ctx->branch_at = tkv__calloc(p.n_seq_max, sizeof *ctx->branch_at);
        if (!ctx->snap_kind || !ctx->seq_seen || !ctx->branch_at || !ctx->path_cells ||!ctx->cell_lists || !ctx->out || !ctx->logits_row || !ctx->row_cell || !ctx->seq_tokens || !ctx->sync_pos || !ctx->sync_seq ||
            !ctx->sync_logits)
            st = tkv__fail(TKV_ERR_NOMEM, "out of memory for the context");
    }
    if (st) {
        tkv_context_free(ctx);
        return st;
    }
    *out = ctx;
    return TKV_OK;
}

const tkv_model *tkv_context_model(const tkv_context *ctx) { return ctx->model; }

const char *tkv_context_error(const tkv_context *ctx) { return ctx ? ctx->h.error : tkv_last_error(NULL); }

int tkv_version(void) { return TKV_VERSION_MAJOR * 10000 + TKV_VERSION_MINOR * 100 + TKV_VERSION_PATCH; }

/* ---- decode --------------------------------------------------------------- */

/* The batch's token ids; the cache checks sequences and positions. */
static tkv_status check_tokens(const tkv_context *ctx, const tkv_batch *b) {
    const uint32_t n_vocab = ctx->model->hp.n_vocab;
    for (size_t i = 0; i < b->n; i++)
        if (b->token[i] < 0 || (uint32_t)b->token[i] >= n_vocab)
            return tkv__fail(TKV_ERR_INVALID, "batch token %zu: id %d is out of range (vocabulary of %u)", i,
                             (int)b->token[i], n_vocab);
    return TKV_OK;
}

/* Make room for n_out rows of logits. */
static tkv_status logits_room(tkv_context *ctx, size_t n_out) {
    const size_t n_vocab = ctx->model->hp.n_vocab;
    if (n_out <= ctx->logits_cap) return TKV_OK;
    float *l = tkv__realloc(ctx->logits, n_out * n_vocab * sizeof *l);
    if (!l) return tkv__fail(TKV_ERR_NOMEM, "out of memory for %zu rows of logits", n_out);
    ctx->logits = l;
    ctx->logits_cap = n_out;
    return TKV_OK;
}

/* The logits row of batch index i of the last decode, or NULL. */
static const float *logits_of(const tkv_context *ctx, size_t i) {
    if (i >= ctx->last_n || ctx->logits_row[i] < 0) return NULL;
    return ctx->logits + (size_t)ctx->logits_row[i] * ctx->model->hp.n_vocab;
}

const float *tkv__ctx_logits(const tkv_context *ctx, size_t i) { return logits_of(ctx, i); }

uint32_t tkv__ctx_row_cell(const tkv_context *ctx, size_t i) { return i < ctx->last_n ? ctx->row_cell[i] : UINT32_MAX; }

uintptr_t tkv__thread_tag(void) {
    static _Thread_local char tag; /* its address: one per live thread */
    return (uintptr_t)&tag;
}

tkv_status tkv_decode(tkv_context *ctx, const tkv_batch *b) {
    if (!ctx) return tkv__fail(TKV_ERR_INVALID, "tkv_decode: ctx is NULL");
    TKV__GUARDED(ctx, "tkv_decode", tkv__ctx_decode(ctx, b));
}

/*
 * Which tokens of a hybrid model's batch leave a checkpoint besides each
 * sequence's last (kv/kvstate.h): every state_interval positions; the token
 * before a sequence's last when that one wants logits (a repeated prompt is
 * reused to its last token, which is decoded again for its logits); and the
 * branch point the sequence's attach named (the next request that diverges
 * there reuses everything before it).
 */
static void mark_checkpoints(tkv_context *ctx, const tkv_batch *b) {
    uint32_t K = ctx->params.state_interval;
    /* thinned where a batch would save more than a quarter of the budget's checkpoints (a long prompt of a
       model with large states): the interval grows to spread what the budget holds over the whole batch */
    const uint32_t cap = ctx->kv->st->n_slots / 4 > 0 ? ctx->kv->st->n_slots / 4 : 1;
    uint32_t count = 0;
    for (size_t i = 0; K && i < b->n; i++) count += ((uint32_t)b->pos[i] + 1) % K == 0;
    if (count > cap) K *= (count + cap - 1) / cap;
    for (size_t i = b->n; i-- > 0;) {
        const tkv_seq s = b->seq[i];
        const uint32_t from_end = ctx->seq_seen[s]++; /* 0: the sequence's last token of the batch */
        const uint32_t pos = (uint32_t)b->pos[i];
        bool keep = (K && (pos + 1) % K == 0) || pos + 1 == ctx->branch_at[s];
        if (from_end == 1) { /* the last one is b's token after this one in the same sequence */
            for (size_t j = i + 1; j < b->n; j++)
                if (b->seq[j] == s) {
                    keep = keep || (b->logits ? b->logits[j] : j + 1 == b->n);
                    break;
                }
        }
        ctx->snap_kind[i] = from_end > 0 && keep ? TKV__CKPT_KEEP : TKV__CKPT_NONE;
    }
    for (size_t i = 0; i < b->n; i++) ctx->seq_seen[b->seq[i]] = 0;
}

/*
 * A sequence that cannot be decoded on as it is (tkv__kv_seq_ready): a
 * hybrid model's whose state after its last token is not held (truncated to
 * a position without a checkpoint, or loaded from a file), or one cut back
 * past the window rows it holds (swa_rows): recompute it from its floor
 * (tkv__kv_reuse_floor), decoding the cached tokens after it again (their
 * cells are kept: they need no new ones). On failure the sequence holds what
 * it held before.
 */
static tkv_status replay_state(tkv_context *ctx, tkv_seq seq) {
    tkv__kvcache *kv = ctx->kv;
    const uint32_t n = kv->seq[seq].n, from = tkv__kv_reuse_floor(kv, kv->seq[seq].cells, n);
    tkv_token *tokens = ctx->seq_tokens; /* (n_cells): free outside saves and loads */
    tkv__kv_seq_tokens(kv, seq, tokens);
    /* back to the checkpoint in the sequence's own namespace (a truncate to 0 would leave it in none, and the
       replay would cache its tokens under namespace 0) */
    const uint64_t ns = kv->seq[seq].ns;
    const tkv__kvpath back = {.name = "tkv_decode", .seq = seq, .ns = ns, .tokens = tokens, .n = n, .reuse_max = from};
    uint32_t kept = 0;
    tkv_status st = tkv__kv_stage_path(kv, &back, &kept);
    if (st) return tkv__ctx_fail(ctx, st);
    tkv__kv_commit(kv);
    for (uint32_t c0 = from; c0 < n && !st; c0 += ctx->params.n_batch) {
        const uint32_t c1 = c0 + ctx->params.n_batch < n ? c0 + ctx->params.n_batch : n;
        for (uint32_t i = c0; i < c1; i++) {
            ctx->sync_pos[i - c0] = (tkv_pos)i;
            ctx->sync_seq[i - c0] = seq;
            ctx->sync_logits[i - c0] = false;
        }
        const tkv_batch rb = {c1 - c0, tokens + c0, ctx->sync_pos, ctx->sync_seq, ctx->sync_logits};
        st = tkv__ctx_decode(ctx, &rb);
    }
    if (st) { /* back to its old tokens: still cached (a replay evicts nothing) */
        const tkv__kvpath path = {.name = "tkv_decode", .seq = seq, .ns = ns, .tokens = tokens, .n = n, .reuse_max = n};
        if (tkv__kv_stage_path(kv, &path, &kept) == TKV_OK) tkv__kv_commit(kv);
    }
    return st;
}

tkv_status tkv__ctx_decode(tkv_context *ctx, const tkv_batch *b) {
    if ((ctx->kv->st || ctx->kv->win) && b && b->seq && b->n) { /* every sequence starts from a held state */
        tkv__kvcache *kv = ctx->kv;
        for (size_t i = 0; i < b->n; i++) {
            const tkv_seq q = b->seq[i];
            if (q < 0 || (uint32_t)q >= kv->n_seq) continue; /* the stage names it */
            if (tkv__kv_seq_ready(kv, q)) continue;
            tkv_status st = replay_state(ctx, q);
            if (st) return st;
        }
    }
    ctx->n_logits_rows = 0;
    ctx->logits_base = 0;
    ctx->last_n = 0;
    ctx->last_logits = NULL;
    if (!b || !b->token || !b->pos || !b->seq)
        return tkv__ctx_fail(ctx, tkv__fail(TKV_ERR_INVALID, "tkv_decode: NULL batch or arrays"));
    if (b->n == 0) return TKV_OK;
    tkv__kvcache *kv = ctx->kv;
    /* which tokens want logits: row o of ctx->logits is token out[o] */
    size_t n_out = 0;
    tkv_status st = check_tokens(ctx, b);
    if (!st && b->n > kv->rows.n_cells)
        st = tkv__fail(TKV_ERR_FULL, "tkv_decode: %zu tokens exceed the cache's %u cells", b->n, kv->rows.n_cells);
    if (!st) {
        for (size_t i = 0; i < b->n; i++) {
            bool want = b->logits ? b->logits[i] : i + 1 == b->n;
            ctx->logits_row[i] = want ? (int32_t)n_out : -1;
            if (want) ctx->out[n_out++] = (uint32_t)i;
        }
        st = logits_room(ctx, n_out);
    }
    if (!st) st = tkv__kv_stage_batch(kv, b);
    if (st) return tkv__ctx_fail(ctx, st);
    if (kv->st) { /* a hybrid model: each sequence's recurrent state, and the checkpoints this batch leaves */
        mark_checkpoints(ctx, b);
        if ((st = tkv__kv_stage_states(kv, b, ctx->snap_kind))) {
            tkv__kv_rollback(kv);
            return tkv__ctx_fail(ctx, st);
        }
    }

    /* the forward pass, n_batch tokens at a time, into the staged cells */
    const size_t n_vocab = ctx->model->hp.n_vocab;
    size_t out_done = 0;
    for (size_t c0 = 0; c0 < b->n && !st; c0 += ctx->params.n_batch) {
        const size_t c1 = c0 + ctx->params.n_batch < b->n ? c0 + ctx->params.n_batch : b->n;
        for (size_t i = c0; i < c1; i++) ctx->cell_lists[i - c0] = kv->seq[b->seq[i]].cells;
        /* out indices of this chunk, relative to it */
        size_t o0 = out_done, o1 = out_done;
        while (o1 < n_out && ctx->out[o1] < c1) o1++;
        for (size_t o = o0; o < o1; o++) ctx->out[o] -= (uint32_t)c0;
        tkv__fwd_batch fb = {
            .n = (uint32_t)(c1 - c0),
            .token = b->token + c0,
            .pos = b->pos + c0,
            .cells = (const uint32_t *const *)ctx->cell_lists,
            .cell = kv->cells + c0,
            .n_out = (uint32_t)(o1 - o0),
            .out = ctx->out + o0,
            .logits = ctx->logits + o0 * n_vocab,
            .attn_float = ctx->params.batch_invariant,
        };
        if (kv->st) fb.n_runs = kv->st->n_runs, fb.run = kv->st->run + c0, fb.state = kv->st->work,
                    fb.snap = kv->st->snap + c0;
        st = tkv__forward(ctx->fwd, &kv->rows, ctx->pool, &fb, ctx->params.abort_cb, ctx->params.abort_user);
        for (size_t o = o0; o < o1; o++) ctx->out[o] += (uint32_t)c0;
        out_done = o1;
    }
    if (st) {
        tkv__kv_rollback(kv);
        return tkv__ctx_fail(ctx, st);
    }
    tkv__kv_commit(kv);
    memcpy(ctx->row_cell, kv->cells, b->n * sizeof *ctx->row_cell); /* each token's final cell */
    if (kv->st) /* a branch point reached is done with */
        for (size_t i = 0; i < b->n; i++)
            if ((uint32_t)b->pos[i] + 1 >= ctx->branch_at[b->seq[i]]) ctx->branch_at[b->seq[i]] = 0;
    ctx->stats.tokens_computed += b->n;
    ctx->n_logits_rows = n_out;
    ctx->last_n = b->n;
    ctx->last_logits = logits_of(ctx, b->n - 1);
    return TKV_OK;
}

const float *tkv_get_logits(const tkv_context *ctx, size_t i) {
    if (!ctx || tkv__ctx_enter(ctx, "tkv_get_logits")) return NULL;
    const float *l = i >= ctx->logits_base ? logits_of(ctx, i - ctx->logits_base) : NULL;
    tkv__ctx_leave(ctx);
    return l;
}

const float *tkv_get_logits_last(const tkv_context *ctx) {
    if (!ctx || tkv__ctx_enter(ctx, "tkv_get_logits_last")) return NULL;
    const float *l = ctx->last_logits;
    tkv__ctx_leave(ctx);
    return l;
}
