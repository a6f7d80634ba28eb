/*
 * context.c — a context: KV cache, prefix index, thread pool and forward
 * scratch over one model, and the transactional decode.
 *
 * tkv_decode in five steps, only the last of which changes anything visible:
 *   1. check the whole batch (tokens, sequence ids, positions);
 *   2. find room: free cells first; if there are too few, make sure enough
 *      cached prefixes could be evicted (else TKV_ERR_FULL) and stage the
 *      rest of the tokens in virtual cells (kvcache.h), so nothing cached is
 *      overwritten yet;
 *   3. stage each token's cell after its sequence's cells;
 *   4. run the forward pass in chunks of n_batch tokens;
 *   5. publish, which cannot fail: evict what the virtual cells need and
 *      move them into the freed cells, then add each sequence's new tokens
 *      to the prefix index (where the index already held them, its cells are
 *      kept and the new ones freed) and grow the sequences.
 * A failure in 1-4 gives the cells back: cache, index and sequences are
 * exactly as before.
 */
#include "context.h"

#include "base/alloc.h"
#include "base/error.h"
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

tkv_context_params tkv_context_default_params(void) {
    return (tkv_context_params){
        .n_cells = 4096,
        .n_seq_max = 256,
        .n_batch = 512,
        .n_threads = tkv_default_threads(NULL, 0),
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
    tkv__pindex_free(ctx->ix);
    tkv__free(ctx->spare);
    tkv__free(ctx->seq_tokens);
    tkv__free(ctx->seq_cells);
    tkv__free(ctx->sync_pos);
    tkv__free(ctx->sync_seq);
    tkv__free(ctx->sync_logits);
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
    if (!st) st = tkv__pindex_create(p.n_cells, p.n_seq_max, &ctx->ix);
    if (!st) st = tkv__fwd_create(model, p.n_batch, p.n_cells, p.n_threads, &ctx->fwd);
    if (!st) st = tkv__pool_create(p.n_threads, &ctx->pool);
    if (!st) {
        ctx->cells = tkv__malloc(p.n_cells * sizeof *ctx->cells);
        ctx->stats.cells_total = p.n_cells;
        ctx->cell_lists = tkv__malloc(p.n_batch * sizeof *ctx->cell_lists);
        ctx->out = tkv__malloc(p.n_cells * sizeof *ctx->out);
        ctx->seq_count = tkv__calloc(p.n_seq_max, sizeof *ctx->seq_count);
        ctx->logits_row = tkv__malloc(p.n_cells * sizeof *ctx->logits_row);
        ctx->spare = tkv__malloc(p.n_cells * sizeof *ctx->spare);
        ctx->seq_tokens = tkv__malloc(p.n_cells * sizeof *ctx->seq_tokens);
        ctx->seq_cells = tkv__malloc(p.n_cells * sizeof *ctx->seq_cells);
        ctx->sync_pos = tkv__malloc(p.n_batch * sizeof *ctx->sync_pos);
        ctx->sync_seq = tkv__malloc(p.n_batch * sizeof *ctx->sync_seq);
        ctx->sync_logits = tkv__malloc(p.n_batch * sizeof *ctx->sync_logits);
        if (!ctx->cells || !ctx->cell_lists || !ctx->out || !ctx->seq_count || !ctx->logits_row || !ctx->spare ||
            !ctx->seq_tokens || !ctx->seq_cells || !ctx->sync_pos || !ctx->sync_seq || !ctx->sync_logits)
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

int tkv_version(void) { return TKV_VERSION_MAJOR * 10000 + TKV_VERSION_MINOR * 100 + TKV_VERSION_PATCH; }

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

/* Count cells the index could free: prefixes no sequence holds, unpinned. */
static uint64_t evictable_cells(const tkv_context *ctx) {
    tkv__pindex_stats st;
    tkv__pindex_stats_get(ctx->ix, &st);
    return st.evictable_cells;
}

/* Step 5: publish a computed batch. Cannot fail. */
static void publish(tkv_context *ctx, const tkv_batch *b, uint32_t n_virtual) {
    tkv__kvcache *kv = ctx->kv;
    if (n_virtual) {
        /* make room: evict, then move each virtual cell into a freed one */
        uint32_t short_by = n_virtual > kv->n_free ? n_virtual - kv->n_free : 0;
        uint32_t freed = tkv__pindex_evict(ctx->ix, short_by, ctx->spare);
        tkv__kv_give_back(kv, ctx->spare, freed);
        ctx->stats.evictions += freed;
        for (size_t i = 0; i < b->n; i++) {
            if (ctx->cells[i] < kv->rows.n_cells) continue;
            uint32_t real;
            tkv__kv_take(kv, 1, &real);
            tkv__kv_copy(kv, ctx->cells[i], real);
            ctx->cells[i] = real;
        }
    }
    /* each sequence's tokens, in batch order (their positions are consecutive) */
    for (size_t i = 0; i < b->n; i++) {
        const tkv_seq sq = b->seq[i];
        if (ctx->seq_count[sq] == 0) continue; /* already published with an earlier token */
        uint32_t k = 0;
        for (size_t j = i; j < b->n && k < ctx->seq_count[sq]; j++)
            if (b->seq[j] == sq) ctx->seq_tokens[k] = b->token[j], ctx->seq_cells[k] = ctx->cells[j], k++;
        tkv__kvseq *s = &kv->seq[sq];
        uint32_t n_dup;
        tkv__ppos to = tkv__pindex_insert(ctx->ix, s->ns, tkv__pindex_seq_end(ctx->ix, sq), ctx->seq_tokens,
                                          ctx->seq_cells, k, ctx->spare, &n_dup);
        tkv__kv_give_back(kv, ctx->spare, n_dup); /* the index already held those tokens */
        for (uint32_t j = 0; j < k; j++) {
            const uint32_t c = ctx->seq_cells[j];
            kv->token[c] = ctx->seq_tokens[j];
            kv->pos[c] = (tkv_pos)(s->n + j);
            s->cells[s->n + j] = c;
        }
        s->n += k;
        tkv__pindex_seq_set(ctx->ix, sq, to);
        ctx->seq_count[sq] = 0;
    }
    ctx->stats.tokens_computed += b->n;
}

/* The logits row of batch index i of the last decode, or NULL. */
static const float *logits_of(const tkv_context *ctx, size_t i) {
    if (i >= ctx->last_n || ctx->logits_row[i] < 0) return NULL;
    return ctx->logits + (size_t)ctx->logits_row[i] * ctx->model->hp.n_vocab;
}

static tkv_status decode(tkv_context *ctx, const tkv_batch *b);

tkv_status tkv_decode(tkv_context *ctx, const tkv_batch *b) {
    if (!ctx) return tkv__fail(TKV_ERR_INVALID, "tkv_decode: ctx is NULL");
    tkv_status st = tkv__ctx_busy(ctx, "tkv_decode");
    if (st) return st;
    atomic_store_explicit(&ctx->busy, true, memory_order_release);
    st = decode(ctx, b);
    atomic_store_explicit(&ctx->busy, false, memory_order_release);
    return st;
}

/* tkv_decode, the context marked busy. */
static tkv_status decode(tkv_context *ctx, const tkv_batch *b) {
    ctx->n_logits_rows = 0;
    ctx->last_n = 0;
    ctx->last_logits = NULL;
    if (!b || !b->token || !b->pos || !b->seq)
        return ctx_fail(ctx, tkv__fail(TKV_ERR_INVALID, "tkv_decode: NULL batch or arrays"));
    if (b->n == 0) return TKV_OK;
    tkv__kvcache *kv = ctx->kv;
    if (b->n > kv->rows.n_cells)
        return ctx_fail(ctx, tkv__fail(TKV_ERR_FULL, "tkv_decode: %zu tokens exceed the cache's %u cells", b->n,
                                       kv->rows.n_cells));
    tkv_status st = check_batch(ctx, b);
    if (!st) st = reserve(ctx);
    /* room: free cells, then virtual cells standing for cells to evict */
    const uint32_t n_real = (uint32_t)b->n <= kv->n_free ? (uint32_t)b->n : kv->n_free;
    const uint32_t n_virtual = (uint32_t)b->n - n_real;
    if (!st && n_virtual) {
        uint64_t ev = evictable_cells(ctx);
        if (ev < n_virtual)
            st = tkv__fail(TKV_ERR_FULL, "KV cache full: %zu cells needed, %u free and %llu evictable of %u", b->n,
                           kv->n_free, (unsigned long long)ev, kv->rows.n_cells);
        else
            st = tkv__kv_reserve_virtual(kv, n_virtual);
    }
    /* which tokens want logits: row o of ctx->logits is token out[o] */
    size_t n_out = 0;
    if (!st) {
        for (size_t i = 0; i < b->n; i++) {
            bool want = b->logits ? b->logits[i] : i + 1 == b->n;
            ctx->logits_row[i] = want ? (int32_t)n_out : -1;
            if (want) ctx->out[n_out++] = (uint32_t)i;
        }
        st = logits_room(ctx, n_out);
    }
    if (st) return ctx_fail(ctx, st);
    tkv__kv_take(kv, n_real, ctx->cells);
    for (uint32_t i = 0; i < n_virtual; i++) ctx->cells[n_real + i] = kv->rows.n_cells + i;

    /* stage every token's cell after its sequence's published cells */
    memset(ctx->seq_count, 0, kv->n_seq * sizeof *ctx->seq_count);
    for (size_t i = 0; i < b->n; i++) {
        tkv__kvseq *s = &kv->seq[b->seq[i]];
        s->cells[s->n + ctx->seq_count[b->seq[i]]++] = ctx->cells[i];
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
            .attn_float = ctx->params.batch_invariant,
        };
        st = tkv__forward(ctx->fwd, &kv->rows, ctx->pool, &fb, ctx->params.abort_cb, ctx->params.abort_user);
        for (size_t o = o0; o < o1; o++) ctx->out[o] += (uint32_t)c0;
        out_done = o1;
    }
    if (st) {
        tkv__kv_give_back(kv, ctx->cells, n_real);
        return ctx_fail(ctx, st);
    }

    publish(ctx, b, n_virtual);
    ctx->n_logits_rows = n_out;
    ctx->last_n = b->n;
    ctx->last_logits = logits_of(ctx, b->n - 1);
    return TKV_OK;
}

const float *tkv_get_logits(const tkv_context *ctx, size_t i) {
    if (!ctx || tkv__ctx_busy(ctx, "tkv_get_logits")) return NULL;
    return logits_of(ctx, i);
}

const float *tkv_get_logits_last(const tkv_context *ctx) {
    return ctx && !tkv__ctx_busy(ctx, "tkv_get_logits_last") ? ctx->last_logits : NULL;
}
