/*
 * context.c — a context: KV cache, thread pool and forward scratch over one
 * model, and the transactional decode.
 *
 * tkv_decode in four steps, only the last of which changes anything visible:
 *   1. check the whole batch (tokens, sequence ids, positions);
 *   2. take a free cell per token and stage it after its sequence's cells
 *      (room reserved first, so staging cannot fail half-way);
 *   3. run the forward pass in chunks of n_batch tokens;
 *   4. publish: each cell gets its token and position, each sequence grows.
 * A failure in 1-3 gives the cells back: the cache is exactly as before.
 */
#include "context.h"

#include "alloc.h"
#include "error.h"
#include "forward.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

tkv_context_params tkv_context_default_params(void) {
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    return (tkv_context_params){
        .n_cells = 4096,
        .n_seq_max = 256,
        .n_batch = 512,
        .n_threads = cpus > 0 ? (int)cpus : 1,
        .kv_type = TKV_TYPE_F16,
    };
}

/* Record the thread's last error as the context's too, and return st. */
static tkv_status ctx_fail(tkv_context *ctx, tkv_status st) { return tkv__handle_fail(&ctx->h, st); }

void tkv_context_free(tkv_context *ctx) {
    if (!ctx) return;
    tkv__pool_free(ctx->pool);
    tkv__fwd_free(ctx->fwd);
    tkv__kv_free(ctx->kv);
    tkv__free(ctx->logits);
    tkv__free(ctx->logits_row);
    tkv__free(ctx->cells);
    tkv__free(ctx->cell_lists);
    tkv__free(ctx->out);
    tkv__free(ctx->seq_count);
    ctx->h.magic = 0;
    tkv__free(ctx);
}

tkv_status tkv_context_create(const tkv_model *model, const tkv_context_params *params, tkv_context **out) {
    if (!out) return tkv__fail(TKV_ERR_INVALID, "tkv_context_create: out is NULL");
    *out = NULL;
    if (!model) return tkv__fail(TKV_ERR_INVALID, "tkv_context_create: model is NULL");
    if (model->vocab_only || !model->w.layers)
        return tkv__fail(TKV_ERR_INVALID, "tkv_context_create: the model was loaded vocab_only (no weights)");
    tkv_context_params p = params ? *params : tkv_context_default_params();
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
    const tkv_hparams *hp = &model->hp;
    tkv_status st = tkv__kv_create(p.n_cells, hp->n_layer, hp->n_head_kv * hp->head_dim, p.kv_type, p.n_seq_max, &ctx->kv);
    if (!st) st = tkv__fwd_create(model, p.n_batch, p.n_cells, p.n_threads, &ctx->fwd);
    if (!st) st = tkv__pool_create(p.n_threads, &ctx->pool);
    if (!st) {
        ctx->cells = tkv__malloc(p.n_cells * sizeof *ctx->cells);
        ctx->cell_lists = tkv__malloc(p.n_batch * sizeof *ctx->cell_lists);
        ctx->out = tkv__malloc(p.n_cells * sizeof *ctx->out);
        ctx->seq_count = tkv__calloc(p.n_seq_max, sizeof *ctx->seq_count);
        ctx->logits_row = tkv__malloc(p.n_cells * sizeof *ctx->logits_row);
        if (!ctx->cells || !ctx->cell_lists || !ctx->out || !ctx->seq_count || !ctx->logits_row)
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

/* ---- decode --------------------------------------------------------------- */

static tkv_status check_batch(tkv_context *ctx, const tkv_batch *b) {
    const tkv__kvcache *kv = ctx->kv;
    const uint32_t n_vocab = ctx->model->hp.n_vocab;
    memset(ctx->seq_count, 0, kv->n_seq * sizeof *ctx->seq_count);
    for (size_t i = 0; i < b->n; i++) {
        if (b->token[i] < 0 || (uint32_t)b->token[i] >= n_vocab)
            return tkv__fail(TKV_ERR_INVALID, "batch token %zu: id %d is out of range (vocabulary of %u)", i,
                             (int)b->token[i], n_vocab);
        if (b->seq[i] < 0 || (uint32_t)b->seq[i] >= kv->n_seq)
            return tkv__fail(TKV_ERR_INVALID, "batch token %zu: sequence %d is out of range (n_seq_max %u)", i,
                             (int)b->seq[i], kv->n_seq);
        const tkv_seq s = b->seq[i];
        const tkv_pos want = (tkv_pos)(kv->seq[s].n + ctx->seq_count[s]);
        if (b->pos[i] != want)
            return tkv__fail(TKV_ERR_INVALID,
                             "batch token %zu: position %d in sequence %d, expected %d (sequences grow at their end)", i,
                             (int)b->pos[i], (int)s, (int)want);
        ctx->seq_count[s]++;
    }
    return TKV_OK;
}

/* Reserve room in every sequence of the batch; nothing changes on failure
   (a grown array is still valid: reservation is not publication). */
static tkv_status reserve(tkv_context *ctx) {
    for (uint32_t s = 0; s < ctx->kv->n_seq; s++) {
        if (!ctx->seq_count[s]) continue;
        tkv_status st = tkv__kv_seq_reserve(ctx->kv, (tkv_seq)s, ctx->seq_count[s]);
        if (st) return st;
    }
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

tkv_status tkv_decode(tkv_context *ctx, const tkv_batch *b) {
    if (!ctx) return tkv__fail(TKV_ERR_INVALID, "tkv_decode: ctx is NULL");
    ctx->n_logits_rows = 0;
    ctx->last_n = 0;
    if (!b || !b->token || !b->pos || !b->seq)
        return ctx_fail(ctx, tkv__fail(TKV_ERR_INVALID, "tkv_decode: NULL batch or arrays"));
    if (b->n == 0) return TKV_OK;
    if (b->n > ctx->params.n_cells)
        return ctx_fail(ctx, tkv__fail(TKV_ERR_FULL, "tkv_decode: %zu tokens exceed the cache's %u cells", b->n,
                                       ctx->params.n_cells));
    tkv__kvcache *kv = ctx->kv;
    tkv_status st = check_batch(ctx, b);
    if (!st) st = reserve(ctx);
    if (!st) st = tkv__kv_take(kv, (uint32_t)b->n, ctx->cells);
    if (st) return ctx_fail(ctx, st);

    /* which tokens want logits: row o of ctx->logits is token out[o] */
    size_t n_out = 0;
    for (size_t i = 0; i < b->n; i++) {
        bool want = b->logits ? b->logits[i] : i + 1 == b->n;
        ctx->logits_row[i] = want ? (int32_t)n_out : -1;
        if (want) ctx->out[n_out++] = (uint32_t)i;
    }
    st = logits_room(ctx, n_out);

    /* stage every token's cell after its sequence's published cells */
    if (!st) {
        memset(ctx->seq_count, 0, kv->n_seq * sizeof *ctx->seq_count);
        for (size_t i = 0; i < b->n; i++) {
            tkv__kvseq *s = &kv->seq[b->seq[i]];
            s->cells[s->n + ctx->seq_count[b->seq[i]]++] = ctx->cells[i];
        }
    }

    /* the forward pass, n_batch tokens at a time */
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
            .cell = ctx->cells + c0,
            .n_out = (uint32_t)(o1 - o0),
            .out = ctx->out + o0,
            .logits = ctx->logits + o0 * n_vocab,
        };
        st = tkv__forward(ctx->fwd, kv, ctx->pool, &fb, ctx->params.abort_cb, ctx->params.abort_user);
        for (size_t o = o0; o < o1; o++) ctx->out[o] += (uint32_t)c0;
        out_done = o1;
    }
    if (st) {
        tkv__kv_give_back(kv, ctx->cells, (uint32_t)b->n);
        return ctx_fail(ctx, st);
    }

    /* publish */
    for (size_t i = 0; i < b->n; i++) tkv__kv_publish(kv, b->seq[i], ctx->cells[i], b->token[i], b->pos[i]);
    ctx->n_logits_rows = n_out;
    ctx->last_n = b->n;
    return TKV_OK;
}

const float *tkv_get_logits(const tkv_context *ctx, size_t i) {
    if (!ctx || i >= ctx->last_n || ctx->logits_row[i] < 0) return NULL;
    return ctx->logits + (size_t)ctx->logits_row[i] * ctx->model->hp.n_vocab;
}

/* ---- sequences ------------------------------------------------------------ */

tkv_pos tkv_seq_len(const tkv_context *ctx, tkv_seq seq) {
    if (!ctx || seq < 0 || (uint32_t)seq >= ctx->kv->n_seq) return 0;
    return (tkv_pos)ctx->kv->seq[seq].n;
}

tkv_status tkv_seq_truncate(tkv_context *ctx, tkv_seq seq, tkv_pos n) {
    if (!ctx) return tkv__fail(TKV_ERR_INVALID, "tkv_seq_truncate: ctx is NULL");
    if (seq < 0 || (uint32_t)seq >= ctx->kv->n_seq)
        return ctx_fail(ctx, tkv__fail(TKV_ERR_INVALID, "sequence %d is out of range (n_seq_max %u)", (int)seq, ctx->kv->n_seq));
    if (n < 0) return ctx_fail(ctx, tkv__fail(TKV_ERR_INVALID, "tkv_seq_truncate: negative length %d", (int)n));
    tkv__kv_seq_truncate(ctx->kv, seq, (uint32_t)n);
    return TKV_OK;
}

tkv_status tkv_seq_clear(tkv_context *ctx, tkv_seq seq) { return tkv_seq_truncate(ctx, seq, 0); }
