/*
 * draft.c — drafts from the cache: the tokens a sequence is likely to
 * continue with, taken from what the cache already holds, and their
 * verification in one batch.
 *
 * A token-aware cache knows what followed a prefix before: a retried
 * request, a regenerated answer at temperature 0, an agent repeating a
 * step find their next tokens in the prefix tree; an edit that copies its
 * input finds them in its own prompt (the tokens that followed the last
 * time the sequence's last few tokens appeared). Verifying k drafts costs
 * one forward pass over k + 1 tokens, about the price of one token where
 * generation is bound by reading the weights.
 *
 * Lossless by construction: the default arithmetic is batch-invariant (a
 * token's logits do not depend on how its batch was formed), and every
 * verified row is sampled by the caller's sampler in order, exactly as one
 * token at a time would sample it, so the tokens (and the sampler's
 * random draws and grammar state) are the same with drafts as without.
 *
 * The same invariance makes a choice a fact about its prefix and the
 * sampler's state (its key, sampler.h: one for every argmax; else the
 * parameters, the generator and the tokens seen): the verification records
 * it in the row's cell (kv/kvknown.c), and a sequence that reaches the
 * prefix again with a sampler of the same key takes it without a pass
 * (tkv_seq_follow_known): a greedy retry, or one with the same seed.
 */
#include "context.h"

#include "base/error.h"
#include "kv/prefix_index.h"
#include "sampler.h"

#include <string.h>

/* the n-gram source matches the sequence's last NGRAM_MAX .. NGRAM_MIN tokens, longest first */
enum { NGRAM_MAX = 4, NGRAM_MIN = 2 };

/* the token at i of the sequence's tokens (L of them) followed by pending */
static inline tkv_token text_at(const tkv_token *seq, size_t L, const tkv_token *pending, size_t i) {
    return i < L ? seq[i] : pending[i - L];
}

/* The tokens that followed the most recent earlier occurrence of the text's last g tokens
   (g from NGRAM_MAX down to NGRAM_MIN), at most cap of them. */
static size_t ngram_draft(const tkv_token *seq, size_t L, const tkv_token *pending, size_t P, tkv_token *out,
                          size_t cap) {
    const size_t T = L + P;
    for (size_t g = NGRAM_MAX; g >= NGRAM_MIN; g--) {
        if (T < g + 1) continue;
        for (size_t j = T - g; j-- > 0;) { /* most recent first; j + g < T: something follows */
            size_t k = 0;
            while (k < g && text_at(seq, L, pending, j + k) == text_at(seq, L, pending, T - g + k)) k++;
            if (k < g) continue;
            size_t n = 0;
            for (size_t i = j + g; i < T && n < cap; i++) out[n++] = text_at(seq, L, pending, i);
            return n;
        }
    }
    return 0;
}

static tkv_status seq_draft(tkv_context *ctx, tkv_seq seq, const tkv_token *pending, size_t n_pending,
                            tkv_token *out, size_t cap, size_t *n, unsigned sources) {
    if (!ctx || !n || (!pending && n_pending) || (!out && cap))
        return tkv__ctx_fail(ctx, tkv__fail(TKV_ERR_INVALID, "tkv_seq_draft: NULL argument"));
    *n = 0;
    if (seq < 0 || (uint32_t)seq >= ctx->kv->n_seq)
        return tkv__ctx_fail(ctx, tkv__fail(TKV_ERR_INVALID, "tkv_seq_draft: sequence %d is out of range", (int)seq));
    if (sources & ~(unsigned)(TKV_DRAFT_CACHE | TKV_DRAFT_NGRAM))
        return tkv__ctx_fail(ctx, tkv__fail(TKV_ERR_INVALID, "tkv_seq_draft: unknown source bits 0x%x",
                                            sources & ~(unsigned)(TKV_DRAFT_CACHE | TKV_DRAFT_NGRAM)));
    if (!sources) sources = TKV_DRAFT_CACHE | TKV_DRAFT_NGRAM;
    if (!cap) return TKV_OK;
    const tkv__pindex *ix = tkv__kv_index(ctx->kv);
    const uint64_t ns = ctx->kv->seq[seq].ns;
    if (sources & TKV_DRAFT_CACHE) {
        tkv__ppos to;
        const tkv__ppos end = tkv__pindex_seq_end(ix, seq);
        if (tkv__pindex_follow(ix, ns, end, pending, n_pending, &to) == n_pending) {
            *n = tkv__pindex_continuation(ix, ns, to, out, cap);
            if (*n) return TKV_OK;
        }
    }
    if (sources & TKV_DRAFT_NGRAM) {
        const size_t L = ctx->kv->seq[seq].n;
        tkv__kv_seq_tokens(ctx->kv, seq, ctx->seq_tokens); /* (n_cells) scratch: L <= n_cells */
        *n = ngram_draft(ctx->seq_tokens, L, pending, n_pending, out, cap);
    }
    return TKV_OK;
}

tkv_status tkv_seq_draft(tkv_context *ctx, tkv_seq seq, const tkv_token *pending, size_t n_pending, tkv_token *out,
                         size_t cap, size_t *n, unsigned sources) {
    TKV__GUARDED(ctx, "tkv_seq_draft", seq_draft(ctx, seq, pending, n_pending, out, cap, n, sources));
}

/* ---- the draft budget ------------------------------------------------------ */

size_t tkv_draft_budget_next(tkv_draft_budget *b, size_t max, size_t offered, size_t accepted) {
    if (!b) return 0;
    if (max > TKV_DRAFT_MAX) max = TKV_DRAFT_MAX;
    if (b->max != max) { /* the first step, or a new limit: start over at the whole of it */
        *b = (tkv_draft_budget){.max = max, .cap = max, .wait = 0, .backoff = 1};
        offered = 0;
    }
    if (offered) { /* last step's outcome */
        if (accepted >= offered) {
            b->cap = b->cap * 2 < b->max ? b->cap * 2 : b->max;
            b->backoff = 1;
        } else if (accepted == 0) {
            b->cap /= 2;
            if (!b->cap) { /* nothing repeats here: no drafts for backoff steps, then a one-token probe */
                b->wait = b->backoff;
                b->backoff = b->backoff < TKV_DRAFT_MAX ? 2 * b->backoff : TKV_DRAFT_MAX;
                b->cap = 1;
            }
        } else {
            b->cap = accepted + 1;
        }
    }
    if (!b->max) return 0;
    if (b->wait) {
        b->wait--;
        return 0;
    }
    return b->cap;
}

/* ---- verification ---------------------------------------------------------- */

/* *held: the public call holds the context, and gives it up while on_token runs (so that on_token may call it);
   false afterwards when it could not take it back. */
static tkv_status seq_accept_draft(tkv_context *ctx, tkv_seq seq, size_t row, const tkv_token *draft, size_t n_draft,
                                   tkv_sampler *smp, size_t max_out, tkv_draft_token_fn on_token, void *user,
                                   tkv_token *out, size_t *n_out, bool *held) {
    static const char fn[] = "tkv_seq_accept_draft";
    if (!ctx || !smp || !out || !n_out || (!draft && n_draft))
        return tkv__ctx_fail(ctx, tkv__fail(TKV_ERR_INVALID, "%s: NULL argument", fn));
    *n_out = 0;
    if (seq < 0 || (uint32_t)seq >= ctx->kv->n_seq)
        return tkv__ctx_fail(ctx, tkv__fail(TKV_ERR_INVALID, "%s: sequence %d is out of range", fn, (int)seq));
    if (!max_out) return tkv__ctx_fail(ctx, tkv__fail(TKV_ERR_INVALID, "%s: max_out is 0", fn));
    if (n_draft > TKV_DRAFT_MAX)
        return tkv__ctx_fail(ctx, tkv__fail(TKV_ERR_INVALID, "%s: %zu draft tokens are more than TKV_DRAFT_MAX (%d)",
                                            fn, n_draft, TKV_DRAFT_MAX));
    const uint32_t L1 = ctx->kv->seq[seq].n; /* pending and the drafts included */
    if (L1 < n_draft + 1)
        return tkv__ctx_fail(ctx, tkv__fail(TKV_ERR_INVALID, "%s: sequence %d holds %u tokens, fewer than the pending "
                                            "token and %zu drafts", fn, (int)seq, L1, n_draft));
    for (size_t i = 0; i <= n_draft; i++)
        if (!tkv__ctx_logits(ctx, row + i))
            return tkv__ctx_fail(ctx, tkv__fail(TKV_ERR_INVALID, "%s: row %zu of the last decode has no logits (the "
                                                "pending token and each draft need them)", fn, row + i));
    if (n_draft) { /* the drafts are the sequence's last tokens, in order */
        tkv__kv_seq_tokens(ctx->kv, seq, ctx->seq_tokens); /* (n_cells) scratch: L1 <= n_cells */
        if (memcmp(ctx->seq_tokens + (L1 - n_draft), draft, n_draft * sizeof *draft))
            return tkv__ctx_fail(ctx, tkv__fail(TKV_ERR_INVALID, "%s: the draft is not what sequence %d ends with",
                                                fn, (int)seq));
    }
    const uint32_t L0 = L1 - (uint32_t)n_draft - 1; /* before pending */
    /* choices in the batch-invariant arithmetic are facts about their prefixes and the sampler's state (its key,
       taken before each choice): their cells record them */
    const bool known = ctx->params.batch_invariant;
    size_t n = 0;
    for (size_t i = 0; i <= n_draft; i++) {
        const float *logits = tkv__ctx_logits(ctx, row + i);
        const uint64_t key = known ? tkv__sampler_key(smp) : TKV__SAMPLER_KEY_NONE;
        const tkv_token s = tkv_sampler_sample(smp, logits);
        /* recorded in the cell the row was computed for, when that is this sequence's at L0 + i (not another's;
           on_token may have cut the sequence short meanwhile) */
        if (key != TKV__SAMPLER_KEY_NONE && L0 + i < ctx->kv->seq[seq].n) {
            const uint32_t cell = ctx->kv->seq[seq].cells[L0 + i];
            /* a cell holds one record: an argmax's serves every greedy request and takes the cell, another's
               serves only a sampler of the same state (a retry with the same seed) and takes only an empty one,
               so that requests drawing with seeds of their own never push a greedy answer's out */
            const bool room = key == TKV__SAMPLER_KEY_ARGMAX || ctx->kv->chosen[cell] == TKV_TOKEN_NULL;
            if (room && tkv__ctx_row_cell(ctx, row + i) == cell) tkv__kv_known_note(ctx->kv, cell, key, s);
        }
        out[n++] = s;
        /* the next row was computed after draft[i]: it counts only if the sampler chose that same token */
        const bool last = i == n_draft || n == max_out || s != draft[i] || tkv_token_is_eog(ctx->model, s);
        /* the sequence keeps pending and the accepted drafts; out[n - 1] is the caller's next pending token, not
           decoded yet (as in decoding one token at a time) */
        if (last && L0 + n < ctx->kv->seq[seq].n) tkv__kv_seq_truncate(ctx->kv, seq, (uint32_t)(L0 + n));
        bool go_on = true;
        if (on_token) {
            *n_out = n;
            tkv__ctx_leave(ctx);
            go_on = on_token(user, i, s, logits);
            if (tkv__ctx_enter(ctx, fn)) { /* another thread took it meanwhile: nothing more is done */
                *held = false;
                return TKV_ERR_BUSY;
            }
        }
        if (!go_on) {
            /* stopped early: what it holds past the last token returned goes (nothing when on_token cleared it) */
            if (!last && L0 + n < ctx->kv->seq[seq].n) tkv__kv_seq_truncate(ctx->kv, seq, (uint32_t)(L0 + n));
            break;
        }
        if (last) break;
        if (!tkv__ctx_logits(ctx, row + i + 1)) /* on_token decoded: the rows are another batch's */
            return *n_out = n, tkv__ctx_fail(ctx, tkv__fail(TKV_ERR_INVALID, "%s: on_token decoded a batch; the "
                                                            "draft's rows are gone", fn));
    }
    *n_out = n;
    return TKV_OK;
}

tkv_status tkv_seq_accept_draft(tkv_context *ctx, tkv_seq seq, size_t row, const tkv_token *draft, size_t n_draft,
                                tkv_sampler *smp, size_t max_out, tkv_draft_token_fn on_token, void *user,
                                tkv_token *out, size_t *n_out) {
    /* TKV__GUARDED, except that on_token runs outside the call */
    tkv_status st = tkv__ctx_enter(ctx, "tkv_seq_accept_draft");
    if (st) return st;
    bool held = true;
    st = seq_accept_draft(ctx, seq, row, draft, n_draft, smp, max_out, on_token, user, out, n_out, &held);
    if (held) tkv__ctx_leave(ctx);
    return st;
}

static tkv_status seq_decode_draft(tkv_context *ctx, tkv_seq seq, tkv_token pending, const tkv_token *draft,
                                   size_t n_draft, tkv_sampler *smp, size_t max_out, tkv_token *out, size_t *n_out) {
    static const char fn[] = "tkv_seq_decode_draft";
    if (!ctx || !smp || !out || !n_out || (!draft && n_draft))
        return tkv__ctx_fail(ctx, tkv__fail(TKV_ERR_INVALID, "%s: NULL argument", fn));
    *n_out = 0;
    if (seq < 0 || (uint32_t)seq >= ctx->kv->n_seq)
        return tkv__ctx_fail(ctx, tkv__fail(TKV_ERR_INVALID, "%s: sequence %d is out of range", fn, (int)seq));
    if (!max_out) return tkv__ctx_fail(ctx, tkv__fail(TKV_ERR_INVALID, "%s: max_out is 0", fn));
    if (n_draft >= ctx->params.n_batch || n_draft > TKV_DRAFT_MAX)
        return tkv__ctx_fail(ctx, tkv__fail(TKV_ERR_INVALID, "%s: %zu draft tokens are more than TKV_DRAFT_MAX (%d) or "
                                            "do not fit one batch of n_batch %u with the pending token", fn, n_draft,
                                            TKV_DRAFT_MAX, ctx->params.n_batch));
    /* more rows than tokens it may return would be computed for nothing */
    const size_t k = 1 + (n_draft < max_out - 1 ? n_draft : max_out - 1);
    const uint32_t L = ctx->kv->seq[seq].n;
    /* the batch on the stack: the context's scratch lists are a hybrid's replay's (tkv__ctx_decode may
       recompute the sequence's state from a checkpoint first, with them) */
    tkv_token tok[TKV_DRAFT_MAX + 1];
    tkv_pos pos[TKV_DRAFT_MAX + 1];
    tkv_seq sq[TKV_DRAFT_MAX + 1];
    bool want[TKV_DRAFT_MAX + 1];
    tok[0] = pending;
    if (k > 1) memcpy(tok + 1, draft, (k - 1) * sizeof *tok);
    for (size_t i = 0; i < k; i++) pos[i] = (tkv_pos)(L + i), sq[i] = seq, want[i] = true;
    const tkv_batch b = {k, tok, pos, sq, want};
    tkv_status st = tkv__ctx_decode(ctx, &b);
    if (st) return tkv__ctx_fail(ctx, st); /* transactional: the sequence and the sampler are as they were */
    /* the same verification the server runs over its many-sequence batches */
    bool held = true; /* no on_token: the context is never given up */
    return seq_accept_draft(ctx, seq, 0, draft, k - 1, smp, max_out, NULL, NULL, out, n_out, &held);
}

tkv_status tkv_seq_decode_draft(tkv_context *ctx, tkv_seq seq, tkv_token pending, const tkv_token *draft,
                                size_t n_draft, tkv_sampler *smp, size_t max_out, tkv_token *out, size_t *n_out) {
    TKV__GUARDED(ctx, "tkv_seq_decode_draft",
                 seq_decode_draft(ctx, seq, pending, draft, n_draft, smp, max_out, out, n_out));
}

/* ---- known tokens ------------------------------------------------------------ */

/* tkv__kv_known_fn over a copy of the sampler's state: a record is taken where its key is the copy's, which then
   goes on as the sampler would after returning the token */
typedef struct key_walk {
    const tkv_sampler *smp;
    tkv__sampler_sim sim;
} key_walk;

static bool take_if_same_key(void *user, uint64_t key, tkv_token tok) {
    key_walk *w = user;
    if (key != tkv__sampler_sim_key(w->smp, &w->sim)) return false;
    tkv__sampler_sim_took(w->smp, &w->sim, tok);
    return true;
}

static tkv_status seq_follow_known(tkv_context *ctx, tkv_seq seq, tkv_token pending, tkv_sampler *smp, size_t max_out,
                                   tkv_token *out, size_t *n_out) {
    static const char fn[] = "tkv_seq_follow_known";
    if (!ctx || !smp || !out || !n_out) return tkv__ctx_fail(ctx, tkv__fail(TKV_ERR_INVALID, "%s: NULL argument", fn));
    *n_out = 0;
    if (seq < 0 || (uint32_t)seq >= ctx->kv->n_seq)
        return tkv__ctx_fail(ctx, tkv__fail(TKV_ERR_INVALID, "%s: sequence %d is out of range", fn, (int)seq));
    if (!max_out) return tkv__ctx_fail(ctx, tkv__fail(TKV_ERR_INVALID, "%s: max_out is 0", fn));
    tkv__kvcache *kv = ctx->kv;
    /* (a context that is not batch_invariant records nothing: seq_accept_draft) */
    if (tkv__sampler_key(smp) == TKV__SAMPLER_KEY_NONE || !tkv__kv_seq_ready(kv, seq)) return TKV_OK;
    /* the path: the sequence's cells, then those of pending and the known tokens (ctx->path_cells, n_cells) */
    const uint32_t L = kv->seq[seq].n;
    uint32_t *path = ctx->path_cells;
    const size_t room = kv->rows.n_cells - L; /* the chain's cells are not the sequence's */
    key_walk w = {.smp = smp};
    tkv__sampler_sim_start(smp, &w.sim);
    size_t n = tkv__kv_known_after(kv, seq, pending, take_if_same_key, &w, out, path + L, max_out < room ? max_out : room);
    for (size_t i = 0; i < n; i++)
        if (tkv_token_is_eog(ctx->model, out[i])) n = i + 1; /* decoding one at a time would stop there */
    if (n && (kv->st || kv->win)) {
        /* a hybrid goes on from a saved state, and a window layer attends to the pool's rows of the last W - 1
           positions: as far as the deepest point of the chain with both */
        memcpy(path, kv->seq[seq].cells, L * sizeof *path);
        const uint32_t floor = tkv__kv_reuse_floor(kv, path, (uint32_t)(L + n));
        n = floor > L ? floor - L : 0;
    }
    if (!n) return TKV_OK;
    /* the sequence takes pending's cell and those of the known tokens but the last, the next pending token */
    tkv_token *taken = ctx->seq_tokens; /* (n_cells) scratch: n cached tokens follow the sequence's end */
    taken[0] = pending;
    memcpy(taken + 1, out, (n - 1) * sizeof *out);
    tkv_status st = tkv__kv_seq_adopt(kv, seq, taken, (uint32_t)n);
    if (st) return tkv__ctx_fail(ctx, st);
    for (size_t i = 0; i < n; i++) tkv__sampler_took(smp, out[i]);
    *n_out = n;
    return TKV_OK;
}

tkv_status tkv_seq_follow_known(tkv_context *ctx, tkv_seq seq, tkv_token pending, tkv_sampler *smp, size_t max_out,
                                tkv_token *out, size_t *n_out) {
    TKV__GUARDED(ctx, "tkv_seq_follow_known", seq_follow_known(ctx, seq, pending, smp, max_out, out, n_out));
}
