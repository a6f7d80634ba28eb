/*
 * test_context.c — contexts and tkv_decode: results independent of how
 * tokens are batched, chunked, threaded or truncated; every failure
 * (bad input, a full cache, the abort callback, each allocation) leaves the
 * cache exactly as it was.
 *
 * The oracle for logits is the engine itself in the plainest setting: one
 * sequence, one batch, a fresh context. Per-token results do not depend on
 * the batch around a token (products are per row, attention per token), so
 * those comparisons are exact, as long as every forward pass is shorter
 * than TKV__ATTN_BATCHED_MIN (longer ones attend in float, see forward.h):
 * the contexts here use n_batch 16. test_batched_attention compares the two
 * forms.
 */
#include "testutil.h"

#include "base/alloc.h"
#include "runtime/context.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool invariant = true; /* new_ctx's batch_invariant */

static tkv_context *new_ctx(uint32_t n_cells, uint32_t n_batch, int n_threads) {
    tkv_context_params p = tkv_context_default_params();
    p.n_cells = n_cells;
    p.n_batch = n_batch;
    p.n_threads = n_threads;
    p.n_seq_max = 8;
    /* these tests compare logits across batch shapes to the bit: the
       stories260K weights are F32, whose products take the reference's
       batch order (one token vs several) unless asked not to */
    p.batch_invariant = invariant;
    tkv_context *ctx = NULL;
    if (tkv_context_create(tu_model, &p, &ctx) != TKV_OK) fail_msg("%s", tkv_last_error(NULL));
    return ctx;
}

/* A deterministic token list. */
static void tokens(tkv_token *t, size_t n, unsigned seed) {
    for (size_t i = 0; i < n; i++) t[i] = (tkv_token)(3 + (seed * 7919u + i * 104729u) % (unsigned)(tu_n_vocab - 3));
}

/* Decode `n` tokens into seq starting at its current length; all logits kept
   in out (n, tu_n_vocab) when out is not NULL. */
static tkv_status decode_seq(tkv_context *ctx, tkv_seq seq, const tkv_token *t, size_t n, float *out) {
    tkv_pos *pos = malloc(n * sizeof *pos);
    tkv_seq *sq = malloc(n * sizeof *sq);
    bool *want = malloc(n * sizeof *want);
    tkv_pos base = tkv_seq_len(ctx, seq);
    for (size_t i = 0; i < n; i++) pos[i] = base + (tkv_pos)i, sq[i] = seq, want[i] = true;
    tkv_batch b = {n, t, pos, sq, want};
    tkv_status st = tkv_decode(ctx, &b);
    if (st == TKV_OK && out)
        for (size_t i = 0; i < n; i++) memcpy(out + i * tu_n_vocab, tkv_get_logits(ctx, i), tu_n_vocab * sizeof(float));
    free(pos), free(sq), free(want);
    return st;
}

/* The logits of one sequence decoded alone, in one batch, in a fresh context. */
static float *oracle(const tkv_token *t, size_t n) {
    tkv_context *ctx = new_ctx(256, 16, 1);
    float *out = malloc(n * tu_n_vocab * sizeof *out);
    assert_int_equal(decode_seq(ctx, 0, t, n, out), TKV_OK);
    tkv_context_free(ctx);
    return out;
}

/* A snapshot of what the cache holds, to compare before and after a failure. */
typedef struct snapshot {
    uint32_t n_free;
    tkv_pos len[8];
    tkv_token tokens[8][64];
} snapshot;

static snapshot snap(const tkv_context *ctx) {
    snapshot s = {.n_free = ctx->kv->n_free};
    for (tkv_seq q = 0; q < 8; q++) {
        s.len[q] = tkv_seq_len(ctx, q);
        for (tkv_pos p = 0; p < s.len[q] && p < 64; p++) s.tokens[q][p] = ctx->kv->token[ctx->kv->seq[q].cells[p]];
    }
    return s;
}

static void expect_same(const snapshot *a, snapshot b) {
    assert_int_equal(a->n_free, b.n_free);
    assert_memory_equal(a->len, b.len, sizeof a->len);
    assert_memory_equal(a->tokens, b.tokens, sizeof a->tokens);
}

/* ---- results do not depend on batching ---------------------------------- */

static void test_interleaved_sequences(void **state) {
    (void)state;
    enum { N = 12 };
    tkv_token t[3][N];
    float *want[3];
    for (int s = 0; s < 3; s++) tokens(t[s], N, (unsigned)s + 1), want[s] = oracle(t[s], N);
    /* one batch, the three sequences interleaved, every token with logits */
    tkv_token bt[3 * N];
    tkv_pos bp[3 * N];
    tkv_seq bs[3 * N];
    for (int i = 0; i < N; i++)
        for (int s = 0; s < 3; s++) bt[3 * i + s] = t[s][i], bp[3 * i + s] = i, bs[3 * i + s] = s + 2;
    tkv_context *ctx = new_ctx(128, 16, 2);
    tkv_batch b = {3 * N, bt, bp, bs, NULL};
    bool all[3 * N];
    for (int i = 0; i < 3 * N; i++) all[i] = true;
    b.logits = all;
    assert_int_equal(tkv_decode(ctx, &b), TKV_OK);
    for (int i = 0; i < N; i++)
        for (int s = 0; s < 3; s++)
            assert_memory_equal(tkv_get_logits(ctx, 3 * i + s), want[s] + i * tu_n_vocab, tu_n_vocab * sizeof(float));
    for (int s = 0; s < 3; s++) assert_int_equal(tkv_seq_len(ctx, s + 2), N), free(want[s]);
    tkv_context_free(ctx);
}

static void test_chunks_threads_and_steps(void **state) {
    (void)state;
    enum { N = 21 };
    tkv_token t[N];
    tokens(t, N, 9);
    float *want = oracle(t, N);
    float *got = malloc(N * tu_n_vocab * sizeof *got);
    /* n_batch 4: the batch runs in 6 chunks; 2 threads */
    tkv_context *ctx = new_ctx(64, 4, 2);
    assert_int_equal(decode_seq(ctx, 0, t, N, got), TKV_OK);
    assert_memory_equal(got, want, N * tu_n_vocab * sizeof *got);
    tkv_context_free(ctx);
    /* one token at a time */
    ctx = new_ctx(64, 512, 2);
    for (size_t i = 0; i < N; i++) {
        assert_int_equal(decode_seq(ctx, 1, &t[i], 1, got), TKV_OK);
        assert_memory_equal(got, want + i * tu_n_vocab, tu_n_vocab * sizeof *got);
    }
    /* logits only where asked: the default is the last token */
    tkv_pos p = N;
    tkv_seq s = 1;
    tkv_batch b = {1, &t[0], &p, &s, NULL};
    assert_int_equal(tkv_decode(ctx, &b), TKV_OK);
    assert_non_null(tkv_get_logits(ctx, 0));
    assert_null(tkv_get_logits(ctx, 1));
    free(got);
    free(want);
    tkv_context_free(ctx);
}

static void test_truncate_and_regrow(void **state) {
    (void)state;
    enum { N = 16 };
    tkv_token a[N], b[N];
    tokens(a, N, 3);
    tokens(b, N, 4);
    memcpy(b, a, 8 * sizeof *a); /* b shares a's first 8 tokens */
    float *want = oracle(b, N);
    float *got = malloc(N * tu_n_vocab * sizeof *got);
    tkv_context *ctx = new_ctx(40, 512, 2);
    assert_int_equal(decode_seq(ctx, 0, a, N, NULL), TKV_OK);
    uint32_t free_before = ctx->kv->n_free;
    assert_int_equal(tkv_seq_truncate(ctx, 0, 8), TKV_OK);
    assert_int_equal(tkv_seq_len(ctx, 0), 8);
    /* the dropped tokens stay cached, held by no sequence */
    tkv_stats st;
    assert_int_equal(tkv_cache_stats_ex(ctx, &st, sizeof st), TKV_OK);
    assert_int_equal(ctx->kv->n_free, free_before);
    assert_int_equal(st.cells_evictable, 8);
    size_t len;
    assert_int_equal(tkv_cache_match(ctx, 0, a, N, &len), TKV_OK);
    assert_int_equal(len, N);
    assert_int_equal(decode_seq(ctx, 0, b + 8, N - 8, got), TKV_OK);
    assert_memory_equal(got, want + 8 * tu_n_vocab, (N - 8) * tu_n_vocab * sizeof *got);
    assert_int_equal(tkv_cache_check(ctx), TKV_OK);
    assert_int_equal(tkv_seq_clear(ctx, 0), TKV_OK);
    assert_int_equal(tkv_cache_clear(ctx), TKV_OK);
    assert_int_equal(ctx->kv->n_free, 40);
    assert_int_equal(tkv_cache_check(ctx), TKV_OK);
    assert_int_equal(tkv_seq_truncate(ctx, 99, 0), TKV_ERR_INVALID);
    assert_int_equal(tkv_seq_truncate(ctx, 0, -1), TKV_ERR_INVALID);
    free(got);
    free(want);
    tkv_context_free(ctx);
}

/* Long forward passes attend in float (one softmax) rather than in the F16
   one-pass form: the two agree within F16's rounding. */
static void test_batched_attention(void **state) {
    (void)state;
    enum { N = 60 };
    tkv_token t[N];
    tokens(t, N, 11);
    invariant = false; /* the default form, which depends on the batch */
    float *want = oracle(t, N); /* chunks of 16: the F16 form */
    float *got = malloc(N * tu_n_vocab * sizeof *got);
    tkv_context *ctx = new_ctx(128, 64, 2); /* one pass of 60 */
    assert_int_equal(decode_seq(ctx, 0, t, N, got), TKV_OK);
    double worst = 0;
    for (size_t i = 0; i < N * tu_n_vocab; i++) worst = fmax(worst, fabs(got[i] - want[i]) / (1 + fabs(want[i])));
    assert_true(worst < 1e-2);
    assert_true(worst > 0); /* the forms do differ: this test compares two paths */
    invariant = true;
    free(got);
    free(want);
    tkv_context_free(ctx);
}

/* ---- failures leave everything as it was --------------------------------- */

static void test_bad_batches(void **state) {
    (void)state;
    tkv_context *ctx = new_ctx(32, 512, 2);
    tkv_token t[4];
    tokens(t, 4, 5);
    assert_int_equal(decode_seq(ctx, 0, t, 4, NULL), TKV_OK);
    snapshot before = snap(ctx);

    tkv_token bad[3] = {t[0], (tkv_token)tu_n_vocab, t[1]};
    assert_int_equal(decode_seq(ctx, 0, bad, 3, NULL), TKV_ERR_INVALID);
    assert_non_null(strstr(tkv_last_error(ctx), "batch token 1"));
    expect_same(&before, snap(ctx));
    assert_null(tkv_get_logits(ctx, 0));
    bad[1] = -1;
    assert_int_equal(decode_seq(ctx, 0, bad, 3, NULL), TKV_ERR_INVALID);

    tkv_pos pos[2] = {4, 6}; /* a gap */
    tkv_seq seq[2] = {0, 0};
    tkv_batch b = {2, t, pos, seq, NULL};
    assert_int_equal(tkv_decode(ctx, &b), TKV_ERR_INVALID);
    assert_non_null(strstr(tkv_last_error(ctx), "expected 5"));
    pos[0] = 2, pos[1] = 3; /* rewriting positions is not allowed */
    assert_int_equal(tkv_decode(ctx, &b), TKV_ERR_INVALID);
    pos[0] = 0, seq[0] = 8; /* sequence out of range */
    assert_int_equal(tkv_decode(ctx, &b), TKV_ERR_INVALID);
    assert_non_null(strstr(tkv_last_error(ctx), "sequence 8"));
    expect_same(&before, snap(ctx));

    /* full: 28 cells free */
    tkv_token many[40];
    tokens(many, 40, 6);
    assert_int_equal(decode_seq(ctx, 1, many, 29, NULL), TKV_ERR_FULL);
    assert_non_null(strstr(tkv_last_error(ctx), "full"));
    expect_same(&before, snap(ctx));
    assert_int_equal(decode_seq(ctx, 1, many, 28, NULL), TKV_OK);
    assert_int_equal(ctx->kv->n_free, 0);

    b = (tkv_batch){0, t, pos, seq, NULL};
    assert_int_equal(tkv_decode(ctx, &b), TKV_OK); /* empty batch: nothing to do */
    assert_int_equal(tkv_decode(ctx, NULL), TKV_ERR_INVALID);
    tkv_context_free(ctx);
}

typedef struct abort_state {
    int calls, abort_at;
} abort_state;

static bool abort_cb(void *user) {
    abort_state *a = user;
    return ++a->calls == a->abort_at;
}

/* Abort at every check point in turn: ABORTED, and nothing changed. */
static void test_abort_at_each_layer(void **state) {
    (void)state;
    enum { N = 9 };
    tkv_token t[N];
    tokens(t, N, 7);
    float *want = oracle(t, N);
    float *got = malloc(N * tu_n_vocab * sizeof *got);
    const int n_layer = 5;
    for (int at = 1; at <= n_layer; at++) {
        abort_state a = {0, -1};
        tkv_context_params p = tkv_context_default_params();
        p.n_cells = 32;
        p.n_seq_max = 8;
        p.n_threads = 2;
        p.abort_cb = abort_cb;
        p.abort_user = &a;
        p.batch_invariant = true; /* compared with the oracle's, to the bit */
        tkv_context *ctx;
        assert_int_equal(tkv_context_create(tu_model, &p, &ctx), TKV_OK);
        assert_int_equal(decode_seq(ctx, 0, t, 4, NULL), TKV_OK);
        assert_int_equal(a.calls, n_layer); /* asked once per layer */
        a.calls = 0;
        a.abort_at = at;
        snapshot before = snap(ctx);
        assert_int_equal(decode_seq(ctx, 0, t + 4, N - 4, NULL), TKV_ERR_ABORTED);
        assert_int_equal(a.calls, at);
        expect_same(&before, snap(ctx));
        /* and the next decode computes exactly what it would have */
        a.abort_at = -1;
        assert_int_equal(decode_seq(ctx, 0, t + 4, N - 4, got), TKV_OK);
        assert_memory_equal(got, want + 4 * tu_n_vocab, (N - 4) * tu_n_vocab * sizeof *got);
        tkv_context_free(ctx);
    }
    free(got);
    free(want);
}

/* A callback that calls back into its own context: every call must be refused with TKV_ERR_BUSY and
   change nothing (tkv_seq_clear from here once left a sequence with shifted tokens and reused wrong K/V). */
typedef struct reentry {
    tkv_context *ctx;
    const tkv_token *t;
    int calls;
    tkv_status got[16];
} reentry;

static bool reenter(void *user) {
    reentry *r = user;
    tkv_context *ctx = r->ctx;
    if (r->calls++) return false; /* once is enough */
    size_t n = 0, len = 0;
    tkv_stats st;
    tkv_token buf[64];
    const tkv_batch one = {.n = 1, .token = r->t, .pos = (tkv_pos[]){0}, .seq = (tkv_seq[]){1}};
    int k = 0;
    r->got[k++] = tkv_seq_clear(ctx, 0);
    r->got[k++] = tkv_seq_truncate(ctx, 0, 1);
    r->got[k++] = tkv_seq_sync(ctx, 1, 0, r->t, 3, &n);
    r->got[k++] = tkv_seq_attach(ctx, 1, 0, r->t, 3, &n);
    r->got[k++] = tkv_seq_fork(ctx, 0, 2);
    r->got[k++] = tkv_decode(ctx, &one);
    r->got[k++] = tkv_cache_clear(ctx);
    tkv_pin pin;
    r->got[k++] = tkv_cache_pin(ctx, 0, r->t, 3, &len, &pin);
    r->got[k++] = tkv_cache_match(ctx, 0, r->t, 3, &len);
    r->got[k++] = tkv_cache_stats_ex(ctx, &st, sizeof st);
    r->got[k++] = tkv_cache_check(ctx);
    r->got[k++] = tkv_seq_tokens(ctx, 0, buf, 64, &n);
    r->got[k++] = tkv_get_logits_last(ctx) ? TKV_OK : TKV_ERR_BUSY;
    r->got[k++] = tkv_seq_len(ctx, 0) ? TKV_OK : TKV_ERR_BUSY;
    return false;
}

static void test_reentry_is_busy(void **state) {
    (void)state;
    enum { N = 12 };
    tkv_token t[N];
    tokens(t, N, 11);
    float *want = oracle(t, N);
    reentry r = {.t = t};
    tkv_context_params p = tkv_context_default_params();
    p.n_cells = 64;
    p.n_seq_max = 4;
    p.n_threads = 1;
    p.abort_cb = reenter;
    p.abort_user = &r;
    p.batch_invariant = true;
    assert_int_equal(tkv_context_create(tu_model, &p, &r.ctx), TKV_OK);
    size_t reused;
    assert_int_equal(tkv_seq_sync(r.ctx, 0, 0, t, N, &reused), TKV_OK);
    assert_true(r.calls > 0);
    for (int k = 0; k < 14; k++)
        if (r.got[k] != TKV_ERR_BUSY) fail_msg("call %d from the abort callback: %s, expected TKV_ERR_BUSY", k,
                                             tkv_status_str(r.got[k]));
    assert_int_equal(tkv_cache_check(r.ctx), TKV_OK);
    assert_int_equal(tkv_seq_len(r.ctx, 0), N);
    tkv_token back[N];
    size_t n;
    assert_int_equal(tkv_seq_tokens(r.ctx, 0, back, N, &n), TKV_OK);
    assert_memory_equal(back, t, sizeof back);
    assert_memory_equal(tkv_get_logits_last(r.ctx), want + (N - 1) * tu_n_vocab, tu_n_vocab * sizeof(float));
    /* outside a decode the same calls work */
    assert_int_equal(tkv_seq_fork(r.ctx, 0, 2), TKV_OK);
    assert_int_equal(tkv_seq_len(r.ctx, 2), N);
    tkv_context_free(r.ctx);
    free(want);
}

/* A decode-only user picks a sequence's namespace by attaching the empty list; decodes then cache there. */
static void test_seq_namespace(void **state) {
    (void)state;
    enum { N = 10 };
    tkv_token t[N];
    tokens(t, N, 5);
    tkv_context *ctx = new_ctx(64, 64, 1);
    uint64_t ns = 1;
    assert_int_equal(tkv_seq_namespace(ctx, 3, &ns), TKV_OK);
    assert_int_equal(ns, 0);
    assert_int_equal(tkv_seq_attach(ctx, 3, 42, NULL, 0, NULL), TKV_OK);
    assert_int_equal(decode_seq(ctx, 3, t, N, NULL), TKV_OK);
    assert_int_equal(tkv_seq_namespace(ctx, 3, &ns), TKV_OK);
    assert_int_equal(ns, 42);
    size_t len;
    assert_int_equal(tkv_cache_match(ctx, 42, t, N, &len), TKV_OK);
    assert_int_equal(len, N);
    assert_int_equal(tkv_cache_match(ctx, 0, t, N, &len), TKV_OK);
    assert_int_equal(len, 0);
    assert_int_equal(tkv_seq_truncate(ctx, 3, 4), TKV_OK); /* shorter, still in its namespace */
    assert_int_equal(tkv_seq_namespace(ctx, 3, &ns), TKV_OK);
    assert_int_equal(ns, 42);
    /* cleared, it is in the default namespace again: whoever decodes into sequence 3 next, without choosing
       a namespace, never lands in namespace 42 (a tenant once ended up in another's) */
    assert_int_equal(tkv_seq_clear(ctx, 3), TKV_OK);
    assert_int_equal(tkv_seq_namespace(ctx, 3, &ns), TKV_OK);
    assert_int_equal(ns, 0);
    tkv_token u[N];
    tokens(u, N, 77);
    assert_int_equal(decode_seq(ctx, 3, u, N, NULL), TKV_OK);
    assert_int_equal(tkv_cache_match(ctx, 42, u, N, &len), TKV_OK);
    assert_int_equal(len, 0);
    assert_int_equal(tkv_cache_match(ctx, 0, u, N, &len), TKV_OK);
    assert_int_equal(len, N);
    assert_int_equal(tkv_seq_truncate(ctx, 3, 0), TKV_OK); /* truncating to 0 is a clear */
    assert_int_equal(tkv_seq_attach(ctx, 3, 42, NULL, 0, NULL), TKV_OK);
    assert_int_equal(tkv_seq_truncate(ctx, 3, 0), TKV_OK);
    assert_int_equal(tkv_seq_namespace(ctx, 3, &ns), TKV_OK);
    assert_int_equal(ns, 0);
    assert_int_equal(tkv_seq_namespace(ctx, 99, &ns), TKV_ERR_INVALID);
    assert_int_equal(tkv_seq_namespace(ctx, 0, NULL), TKV_ERR_INVALID);
    assert_int_equal(tkv_cache_check(ctx), TKV_OK);
    tkv_context_free(ctx);
    /* the library this test links is the header's */
    assert_int_equal(tkv_version(), TKV_VERSION_MAJOR * 10000 + TKV_VERSION_MINOR * 100 + TKV_VERSION_PATCH);
}

/* Fail each allocation a decode makes in turn (sequence growth, logits). */
static void test_allocation_failures(void **state) {
    (void)state;
    enum { N = 70 }; /* past the first 64-cell sequence capacity */
    tkv_token t[N];
    tokens(t, N, 8);
    float *want = oracle(t, N);
    float *got = malloc(N * tu_n_vocab * sizeof *got);
    for (long k = 0;; k++) {
        tkv_context *ctx = new_ctx(128, 16, 2);
        assert_int_equal(decode_seq(ctx, 0, t, 10, NULL), TKV_OK);
        snapshot before = snap(ctx);
        tkv__alloc_fail_after(k);
        tkv_status st = decode_seq(ctx, 0, t + 10, N - 10, got);
        tkv__alloc_fail_after(-1);
        if (st == TKV_OK) {
            assert_memory_equal(got, want + 10 * tu_n_vocab, (N - 10) * tu_n_vocab * sizeof *got);
            tkv_context_free(ctx);
            assert_true(k >= 1); /* at least one allocation was there to fail */
            break;
        }
        assert_int_equal(st, TKV_ERR_NOMEM);
        expect_same(&before, snap(ctx));
        assert_int_equal(decode_seq(ctx, 0, t + 10, N - 10, got), TKV_OK);
        assert_memory_equal(got, want + 10 * tu_n_vocab, (N - 10) * tu_n_vocab * sizeof *got);
        tkv_context_free(ctx);
    }
    /* creating a context fails cleanly at every allocation too */
    for (long k = 0;; k++) {
        tkv_context_params p = tkv_context_default_params();
        p.n_cells = 64;
        p.n_threads = 2;
        tkv_context *ctx = (tkv_context *)0x1;
        tkv__alloc_fail_after(k);
        tkv_status st = tkv_context_create(tu_model, &p, &ctx);
        tkv__alloc_fail_after(-1);
        if (st == TKV_OK) {
            tkv_context_free(ctx);
            break;
        }
        assert_int_equal(st, TKV_ERR_NOMEM);
        assert_null(ctx);
    }
    free(got);
    free(want);
}

static void test_create_errors(void **state) {
    (void)state;
    tkv_context *ctx;
    tkv_context_params p = tkv_context_default_params();
    p.n_cells = 0;
    assert_int_equal(tkv_context_create(tu_model, &p, &ctx), TKV_ERR_INVALID);
    assert_null(ctx);
    p = tkv_context_default_params();
    p.kv_type = TKV_TYPE_Q4_K; /* 256-element blocks: not a KV cache type */
    assert_int_equal(tkv_context_create(tu_model, &p, &ctx), TKV_ERR_UNSUPPORTED);
    assert_non_null(strstr(tkv_last_error(NULL), "Q4_K"));
    p = tkv_context_default_params();
    p.kv_type_v = TKV_TYPE_BF16;
    assert_int_equal(tkv_context_create(tu_model, &p, &ctx), TKV_ERR_UNSUPPORTED);
    assert_non_null(strstr(tkv_last_error(NULL), "BF16 (V)"));
    tkv_model_params mp = tkv_model_default_params();
    mp.vocab_only = true;
    tkv_model *vocab;
    assert_int_equal(tkv_model_load(tu_shared("models/stories260K.gguf"), &mp, &vocab), TKV_OK);
    assert_int_equal(tkv_context_create(vocab, NULL, &ctx), TKV_ERR_INVALID);
    assert_non_null(strstr(tkv_last_error(NULL), "vocab_only"));
    tkv_model_free(vocab);
    tkv_context_free(NULL);
}

/* Every failing call on a context leaves its message in the context, const
   ones included; another context's failure, or the thread's next one, does
   not touch it. */
static void test_context_errors(void **state) {
    (void)state;
    tkv_context *a = new_ctx(64, 16, 1), *b = new_ctx(64, 16, 1);
    assert_string_equal(tkv_context_error(a), "");
    tkv_token t[2] = {1, 2}, out[1];
    size_t n, len;
    uint64_t ns;
    tkv_stats st;
    assert_int_equal(tkv_seq_sync(a, 0, 0, t, 2, NULL), TKV_OK);
    static const char *const names[] = {"tkv_seq_tokens",  "tkv_seq_namespace", "tkv_cache_node_tokens",
                                        "tkv_cache_match", "tkv_cache_stats",   "tkv_seq_truncate",
                                        "tkv_seq_sync"};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        tkv_status s;
        switch (i) { /* const calls first */
        case 0: s = tkv_seq_tokens(a, 0, out, 1, &n); break; /* does not fit */
        case 1: s = tkv_seq_namespace(a, 99, &ns); break;
        case 2: s = tkv_cache_node_tokens(a, 9999, out, 1, &n); break;
        case 3: s = tkv_cache_match(a, 0, NULL, 1, &len); break;
        case 4: s = tkv_cache_stats(a, NULL); break;
        case 5: s = tkv_seq_truncate(a, 99, 0); break;
        default: s = tkv_seq_sync(a, 0, 0, (tkv_token[]){-1}, 1, NULL); break;
        }
        assert_true(s < 0);
        if (!strstr(tkv_context_error(a), names[i]))
            fail_msg("%s: the context's message is '%s'", names[i], tkv_context_error(a));
        assert_string_equal(tkv_context_error(a), tkv_last_error(NULL)); /* and the thread's */
        assert_string_equal(tkv_last_error(a), tkv_context_error(a));
    }
    /* kept: a failure on b, a success on a, and a thread failure elsewhere leave a's message */
    char keep[512];
    snprintf(keep, sizeof keep, "%s", tkv_context_error(a));
    assert_int_equal(tkv_seq_truncate(b, 99, 0), TKV_ERR_INVALID);
    assert_int_equal(tkv_cache_stats_ex(a, &st, sizeof st), TKV_OK);
    assert_int_equal(tkv_context_create(NULL, NULL, NULL), TKV_ERR_INVALID);
    assert_string_equal(tkv_context_error(a), keep);
    assert_non_null(strstr(tkv_context_error(b), "tkv_seq_truncate"));
    assert_string_equal(tkv_context_error(NULL), tkv_last_error(NULL));
    tkv_context_free(a);
    tkv_context_free(b);
}

/* Params structs carry their size: an older caller's shorter struct keeps
   the newer fields' defaults, a newer caller's longer one is accepted while
   the fields unknown here are zero, and a struct not started from the
   defaults (size 0) is refused with a message. */
static void test_params_size(void **state) {
    (void)state;
    tkv_context *ctx = NULL;
    tkv_context_params zero;
    memset(&zero, 0, sizeof zero);
    zero.n_cells = 64, zero.n_seq_max = 1, zero.n_batch = 8, zero.n_threads = 1;
    assert_int_equal(tkv_context_create(tu_model, &zero, &ctx), TKV_ERR_INVALID);
    assert_null(ctx);
    assert_non_null(strstr(tkv_last_error(NULL), "tkv_context_params"));

    tkv_context_params old = tkv_context_default_params();
    old.n_cells = 64, old.n_threads = 1;
    old.batch_invariant = false; /* past an older caller's end: not read, the default stays */
    old.size = (uint32_t)offsetof(tkv_context_params, batch_invariant);
    assert_int_equal(tkv_context_create(tu_model, &old, &ctx), TKV_OK);
    assert_int_equal(ctx->params.n_cells, 64);
    assert_true(ctx->params.batch_invariant);
    assert_int_equal(ctx->params.size, sizeof(tkv_context_params));
    tkv_context_free(ctx);

    struct {
        tkv_context_params p;
        uint64_t field_of_a_newer_header;
    } newer;
    memset(&newer, 0, sizeof newer);
    newer.p = tkv_context_default_params();
    newer.p.n_cells = 32, newer.p.n_threads = 1;
    newer.p.size = sizeof newer;
    assert_int_equal(tkv_context_create(tu_model, &newer.p, &ctx), TKV_OK);
    assert_int_equal(ctx->params.n_cells, 32);
    tkv_context_free(ctx);
    newer.field_of_a_newer_header = 1;
    assert_int_equal(tkv_context_create(tu_model, &newer.p, &ctx), TKV_ERR_INVALID);
    assert_null(ctx);
    assert_non_null(strstr(tkv_last_error(NULL), "newer"));

    tkv_sampler_params sp;
    memset(&sp, 0, sizeof sp);
    tkv_sampler *s = NULL;
    assert_int_equal(tkv_sampler_create(&sp, 10, &s), TKV_ERR_INVALID);
    assert_null(s);
    tkv_model_params mp;
    memset(&mp, 0, sizeof mp);
    tkv_model *m = NULL;
    assert_int_equal(tkv_model_load(tu_shared("models/stories260K.gguf"), &mp, &m), TKV_ERR_INVALID);
    assert_null(m);
}

/* A Q8_0 cache holds K/V in 8 bits: close to F16's logits, and the cache
   works the same (reuse, eviction, check). */
static void test_q8_0_cache(void **state) {
    (void)state;
    enum { N = 24 };
    tkv_token t[N];
    tokens(t, N, 12);
    float *want = oracle(t, N);
    tkv_context_params p = tkv_context_default_params();
    p.n_cells = 32;
    p.n_batch = 16;
    p.kv_type = TKV_TYPE_Q8_0;
    p.batch_invariant = true;
    tkv_context *ctx;
    assert_int_equal(tkv_context_create(tu_model, &p, &ctx), TKV_OK);
    float *got = malloc(N * tu_n_vocab * sizeof *got);
    assert_int_equal(decode_seq(ctx, 0, t, N, got), TKV_OK);
    double d2 = 0, r2 = 0;
    for (size_t i = 0; i < N * tu_n_vocab; i++) d2 += (got[i] - want[i]) * (got[i] - want[i]), r2 += want[i] * want[i];
    assert_true(sqrt(d2 / r2) < 0.02); /* 8-bit K/V: within 2% of the F16 cache's logits */
    size_t reused;
    assert_int_equal(tkv_seq_sync(ctx, 1, 0, t, N, &reused), TKV_OK);
    assert_int_equal(reused, N - 1);
    assert_memory_equal(tkv_get_logits_last(ctx), got + (N - 1) * tu_n_vocab, tu_n_vocab * sizeof *got);
    assert_int_equal(tkv_cache_check(ctx), TKV_OK);
    free(got);
    free(want);
    tkv_context_free(ctx);
}

/* An F32 cache computes the same tokens' logits within F16's rounding. */
static void test_f32_cache(void **state) {
    (void)state;
    enum { N = 8 };
    tkv_token t[N];
    tokens(t, N, 10);
    float *want = oracle(t, N);
    tkv_context_params p = tkv_context_default_params();
    p.n_cells = 16;
    p.kv_type = TKV_TYPE_F32;
    tkv_context *ctx;
    assert_int_equal(tkv_context_create(tu_model, &p, &ctx), TKV_OK);
    float *got = malloc(N * tu_n_vocab * sizeof *got);
    assert_int_equal(decode_seq(ctx, 0, t, N, got), TKV_OK);
    for (size_t i = 0; i < N * tu_n_vocab; i++) assert_true(fabsf(got[i] - want[i]) < 2e-2f * (1 + fabsf(want[i])));
    free(got);
    free(want);
    tkv_context_free(ctx);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_interleaved_sequences),
        cmocka_unit_test(test_chunks_threads_and_steps),
        cmocka_unit_test(test_truncate_and_regrow),
        cmocka_unit_test(test_batched_attention),
        cmocka_unit_test(test_bad_batches),
        cmocka_unit_test(test_abort_at_each_layer),
        cmocka_unit_test(test_reentry_is_busy),
        cmocka_unit_test(test_seq_namespace),
        cmocka_unit_test(test_allocation_failures),
        cmocka_unit_test(test_create_errors),
        cmocka_unit_test(test_context_errors),
        cmocka_unit_test(test_params_size),
        cmocka_unit_test(test_f32_cache),
        cmocka_unit_test(test_q8_0_cache),
    };
    return cmocka_run_group_tests(tests, tu_stories_setup, tu_stories_teardown);
}
