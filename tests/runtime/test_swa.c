/*
 * test_swa.c — the window pool (tkv_context_params.swa_rows, kv/kvwin.c) on
 * the sliding-window test models (gemma2, gemma3, gemma4, gpt-oss: window
 * W = 32, models/arch/README.md): window layers keep rows only where they
 * are needed or the pool has room, so a cached prefix is reusable where the
 * rows of the W - 1 positions before its end are held.
 *
 * Every decode is checked against a fresh context without a pool (swa_rows
 * 0, batch_invariant: to the bit), the reported reuse against the tokens the
 * context did not compute, and the reuse itself against a model of the pool:
 * a single sequence's history keeps the rows of its last `rows` positions
 * (the clock releases the oldest landed rows first), so a divergence at d is
 * reused exactly when d - W + 1 >= n - rows, and otherwise from the deepest
 * prefix whose window lies in the held rows (0 when every older row is gone).
 * tkv_cache_check runs after each step.
 */
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { W = 32, N = 260, N_CELLS = 1024, N_SEQ = 4, ROWS_MIN = N_SEQ * W };

static tkv_model *model;
static size_t nv;
static const char *model_rel;

static tkv_type kv_type = TKV_TYPE_F16; /* of every context a test makes */

static tkv_context *make(uint32_t swa_rows) {
    tkv_context_params cp = tkv_context_default_params();
    cp.kv_type = kv_type;
    cp.n_cells = N_CELLS;
    cp.n_seq_max = N_SEQ;
    cp.n_threads = 2;
    cp.n_batch = 48; /* prompts of several passes */
    cp.swa_rows = swa_rows;
    tkv_context *ctx = NULL;
    if (tkv_context_create(model, &cp, &ctx) != TKV_OK) fail_msg("%s", tkv_last_error(NULL));
    return ctx;
}

/* A token list: the shared part [0..shared), then a tail of its own (seed). */
static void list(tkv_token *out, size_t n, size_t shared, unsigned seed) {
    out[0] = 1;
    for (size_t i = 1; i < n; i++)
        out[i] = (tkv_token)(3 + (i < shared ? i * 37 + 11 : i * 53 + seed * 101 + 7) % 500);
}

static uint64_t computed(const tkv_context *ctx) {
    tkv_stats st;
    assert_int_equal(tkv_cache_stats_ex(ctx, &st, sizeof st), TKV_OK);
    return st.tokens_computed;
}

static void check(tkv_context *ctx, const char *what) {
    if (tkv_cache_check(ctx) != TKV_OK) fail_msg("%s: %s", what, tkv_last_error(ctx));
}

/* The last logits of ctx against a fresh context's (no pool) over tokens[0..n). */
static void same_as_fresh(tkv_context *ctx, const tkv_token *tokens, size_t n, const char *what) {
    tkv_context *f = make(0);
    assert_int_equal(tkv_seq_sync(f, 0, 0, tokens, n, NULL), TKV_OK);
    if (memcmp(tkv_get_logits_last(ctx), tkv_get_logits_last(f), nv * sizeof(float)) != 0)
        fail_msg("%s: the logits differ from a fresh context's", what);
    tkv_context_free(f);
}

/* Sync tokens[0..n) into seq and check it: the reuse tkv_cache_match announced, the tokens computed, the
   logits; returns the reuse. */
static size_t sync_checked(tkv_context *ctx, tkv_seq seq, const tkv_token *tokens, size_t n, const char *what) {
    size_t announced = 0, reused = 0;
    assert_int_equal(tkv_cache_match(ctx, 0, tokens, n - 1, &announced), TKV_OK);
    const uint64_t before = computed(ctx);
    if (tkv_seq_sync(ctx, seq, 0, tokens, n, &reused) != TKV_OK) fail_msg("%s: %s", what, tkv_last_error(ctx));
    if (computed(ctx) - before != n - reused)
        fail_msg("%s: %zu reported reused of %zu, but %llu computed", what, reused, n,
                 (unsigned long long)(computed(ctx) - before));
    if (reused != announced) fail_msg("%s: tkv_cache_match said %zu, the sync reused %zu", what, announced, reused);
    same_as_fresh(ctx, tokens, n, what);
    check(ctx, what);
    return reused;
}

static void decode_one(tkv_context *ctx, tkv_seq seq, const tkv_token *t, size_t pos) {
    tkv_pos p = (tkv_pos)pos;
    tkv_batch b = {1, &t[pos], &p, &seq, NULL};
    if (tkv_decode(ctx, &b) != TKV_OK) fail_msg("decode at %zu: %s", pos, tkv_last_error(ctx));
}

/* The reuse the pool's model promises for a divergence at d (d < n) from one sequence's history of n
   tokens whose last `held` positions have rows (lo..n-1): a prefix L is reusable where the positions
   L - W + 1 .. L - 1 have rows, so d itself when they all do, else only the empty prefix (every position
   under lo is gone, and any L > 0 under lo + W - 1 attends to one). */
static size_t expected_floor(size_t n, size_t held, size_t d) {
    const size_t lo = n > held ? n - held : 0;
    return lo == 0 || d >= lo + W - 1 ? d : 0;
}

static int setup(void **state) {
    (void)state;
    if (tkv_model_load(tu_shared(model_rel), NULL, &model) != TKV_OK) fail_msg("%s", tkv_last_error(NULL));
    nv = tkv_vocab_size(model);
    return 0;
}

static int teardown(void **state) {
    (void)state;
    tkv_model_free(model);
    return 0;
}

/* The parameter: a pool under n_seq_max x W is refused naming the minimum; the pool takes less memory. */
static void test_params(void **state) {
    (void)state;
    tkv_context_params cp = tkv_context_default_params();
    cp.n_cells = N_CELLS;
    cp.n_seq_max = N_SEQ;
    cp.swa_rows = ROWS_MIN - 1;
    tkv_context *ctx = NULL;
    assert_int_equal(tkv_context_create(model, &cp, &ctx), TKV_ERR_INVALID);
    assert_null(ctx);
    char want[64];
    snprintf(want, sizeof want, "minimum of %d", ROWS_MIN);
    assert_non_null(strstr(tkv_last_error(NULL), "swa_rows"));
    assert_non_null(strstr(tkv_last_error(NULL), want));
    tkv_context *a = make(0), *b = make(ROWS_MIN);
    tkv_stats sa, sb;
    assert_int_equal(tkv_cache_stats_ex(a, &sa, sizeof sa), TKV_OK);
    assert_int_equal(tkv_cache_stats_ex(b, &sb, sizeof sb), TKV_OK);
    assert_true(sb.kv_bytes < sa.kv_bytes);
    tkv_context_free(a);
    tkv_context_free(b);
    /* more rows than cells: as many as cells (a cell holds one row at most) */
    tkv_context *c = make(N_CELLS), *d = make(5 * N_CELLS);
    tkv_stats sc, sd;
    assert_int_equal(tkv_cache_stats_ex(c, &sc, sizeof sc), TKV_OK);
    assert_int_equal(tkv_cache_stats_ex(d, &sd, sizeof sd), TKV_OK);
    assert_int_equal(sc.kv_bytes, sd.kv_bytes);
    tkv_context_free(c);
    tkv_context_free(d);
    /* a model without window layers */
    tkv_model *plain = NULL;
    if (tkv_model_load(tu_shared("models/arch/qwen3.gguf"), NULL, &plain) != TKV_OK) fail_msg("%s", tkv_last_error(NULL));
    cp.swa_rows = ROWS_MIN;
    assert_int_equal(tkv_context_create(plain, &cp, &ctx), TKV_ERR_UNSUPPORTED);
    assert_non_null(strstr(tkv_last_error(NULL), "no sliding-window layers"));
    assert_null(ctx);
    tkv_model_free(plain);
}

/* A conversation longer than W (prompt, an answer a token per decode, the next turn): the next turn reuses
   the whole conversation, and the same conversation in another sequence to its last token, with the
   smallest pool. */
static void test_conversation(void **state) {
    (void)state;
    tkv_token t[N];
    list(t, N, N, 1);
    tkv_context *ctx = make(ROWS_MIN);
    const size_t p = 41, a = 40;
    assert_int_equal(sync_checked(ctx, 0, t, p, "prompt"), 0);
    for (size_t i = p; i < p + a; i++) decode_one(ctx, 0, t, i);
    same_as_fresh(ctx, t, p + a, "the answer's last token");
    check(ctx, "the answer");
    assert_int_equal(sync_checked(ctx, 0, t, p + a + 30, "next turn"), p + a);
    assert_int_equal(sync_checked(ctx, 3, t, p + a + 30, "the same conversation elsewhere"), p + a + 29);
    tkv_context_free(ctx);
}

/* A divergence from a 200-token history: inside the rows the pool holds, reused exactly; older than
   them, replayed from the floor the model says (the global layers' K/V of the replayed tokens is
   cached: the cells grow by the new tokens only). A pool with room for everything reuses every
   divergence exactly. */
static void test_divergence(void **state) {
    (void)state;
    /* (pool, divergence): the smallest pool holds 72..199, 160 rows 40..199, 1024 every position */
    static const struct { uint32_t pool; size_t at; } cases[] = {
        {ROWS_MIN, 199}, {ROWS_MIN, 190}, {ROWS_MIN, 100}, {160, 120}, {160, 60}, {1024, 40},
    };
    const size_t n = 200;
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        const uint32_t pool = cases[k].pool;
        const size_t at = cases[k].at;
        tkv_token a[N], b[N];
        list(a, n, at, 2), list(b, n, at, 3);
        tkv_context *ctx = make(pool);
        char what[96];
        assert_int_equal(sync_checked(ctx, 0, a, n, "history"), 0);
        tkv_stats before, after;
        assert_int_equal(tkv_cache_stats_ex(ctx, &before, sizeof before), TKV_OK);
        snprintf(what, sizeof what, "pool %u, divergence at %zu", pool, at);
        const size_t r = sync_checked(ctx, 1, b, n, what);
        const size_t want = expected_floor(n, pool < n ? pool : n, at);
        if (r != want) fail_msg("%s: reused %zu, the pool's model says %zu", what, r, want);
        assert_int_equal(tkv_cache_stats_ex(ctx, &after, sizeof after), TKV_OK);
        assert_int_equal(after.cells_used - before.cells_used, n - at);
        tkv_context_free(ctx);
    }
}

/* A fork continues as its source; a truncate inside the held rows continues exactly, one past them is
   replayed from the floor on the next decode. */
static void test_fork_truncate(void **state) {
    (void)state;
    tkv_token t[N], e[N];
    list(t, N, N, 5);
    tkv_context *ctx = make(ROWS_MIN);
    assert_int_equal(sync_checked(ctx, 0, t, 200, "prompt"), 0);
    assert_int_equal(tkv_seq_fork(ctx, 0, 1), TKV_OK);
    check(ctx, "fork");
    memcpy(e, t, sizeof e);
    e[200] = 9;
    decode_one(ctx, 1, e, 200);
    same_as_fresh(ctx, e, 201, "the fork's next token");
    check(ctx, "the fork's decode");
    /* truncated to 190: positions 159..189 are among the last W of 200 when the fork decoded */
    assert_int_equal(tkv_seq_truncate(ctx, 0, 190), TKV_OK);
    check(ctx, "truncate to 190");
    uint64_t c0 = computed(ctx);
    decode_one(ctx, 0, t, 190);
    assert_int_equal(computed(ctx) - c0, 1);
    same_as_fresh(ctx, t, 191, "after a truncate inside the held rows");
    check(ctx, "decode after truncate to 190");
    /* truncated to 60: the rows of 29..59 are gone (the pool holds the last 128 positions of the fork's
       200 and 0's 191): the decode replays 0's tokens from the floor, 0, in the cells that hold them (the
       token at 60 is cached too: no cell is taken) */
    assert_int_equal(tkv_seq_truncate(ctx, 0, 60), TKV_OK);
    check(ctx, "truncate to 60");
    tkv_stats before, after;
    assert_int_equal(tkv_cache_stats_ex(ctx, &before, sizeof before), TKV_OK);
    decode_one(ctx, 0, t, 60);
    assert_int_equal(tkv_cache_stats_ex(ctx, &after, sizeof after), TKV_OK);
    assert_int_equal(after.tokens_computed - before.tokens_computed, 61);
    assert_int_equal(after.cells_used, before.cells_used);
    same_as_fresh(ctx, t, 61, "after a truncate past the held rows");
    check(ctx, "decode after truncate to 60");
    tkv_context_free(ctx);
}

static bool abort_if(void *user) { return *(const bool *)user; }

/* An aborted decode changes nothing: the same reuse is announced for every prefix, the same cells are
   used, and the next decode gives a fresh context's logits. */
static void test_abort(void **state) {
    (void)state;
    tkv_token t[N];
    list(t, N, N, 6);
    tkv_context_params cp = tkv_context_default_params();
    cp.n_cells = N_CELLS;
    cp.n_seq_max = N_SEQ;
    cp.n_threads = 2;
    cp.n_batch = 48;
    cp.swa_rows = ROWS_MIN;
    bool armed = false;
    cp.abort_cb = abort_if, cp.abort_user = &armed;
    tkv_context *ctx = NULL;
    assert_int_equal(tkv_context_create(model, &cp, &ctx), TKV_OK);
    assert_int_equal(sync_checked(ctx, 0, t, 180, "prompt"), 0);
    size_t m0[180];
    for (size_t i = 1; i < 180; i++) assert_int_equal(tkv_cache_match(ctx, 0, t, i, &m0[i]), TKV_OK);
    tkv_stats before, after;
    assert_int_equal(tkv_cache_stats_ex(ctx, &before, sizeof before), TKV_OK);
    /* 40 tokens would land 40 rows, releasing the oldest held ones */
    tkv_pos pos[40];
    tkv_seq seq[40];
    for (size_t i = 0; i < 40; i++) pos[i] = (tkv_pos)(180 + i), seq[i] = 0;
    tkv_batch b = {40, &t[180], pos, seq, NULL};
    armed = true;
    assert_int_equal(tkv_decode(ctx, &b), TKV_ERR_ABORTED);
    armed = false;
    check(ctx, "aborted");
    for (size_t i = 1; i < 180; i++) {
        size_t m = 0;
        assert_int_equal(tkv_cache_match(ctx, 0, t, i, &m), TKV_OK);
        if (m != m0[i]) fail_msg("prefix of %zu: reusable %zu after the abort, %zu before", i, m, m0[i]);
    }
    assert_int_equal(tkv_cache_stats_ex(ctx, &after, sizeof after), TKV_OK);
    assert_int_equal(after.cells_used, before.cells_used);
    assert_int_equal(tkv_decode(ctx, &b), TKV_OK);
    same_as_fresh(ctx, t, 220, "after the abort");
    check(ctx, "decode after the abort");
    tkv_context_free(ctx);
}

/* One batch of several sequences, interleaved: each token's logits are a fresh context's; two sequences
   that hold the same prefix and decode the same token share its cell (the index keeps one) and its rows. */
static void test_shared_batch(void **state) {
    (void)state;
    tkv_token a[N], b[N];
    list(a, N, 0, 8), list(b, N, 0, 9);
    tkv_context *ctx = make(ROWS_MIN);
    assert_int_equal(sync_checked(ctx, 0, a, 70, "a"), 0);
    assert_int_equal(sync_checked(ctx, 1, b, 50, "b"), 1); /* every list starts with token 1 */
    assert_int_equal(tkv_seq_fork(ctx, 0, 2), TKV_OK);
    /* a's next 3 tokens in 0 and in its fork 2 (the same tokens: shared cells), b's next 3 in 1 */
    tkv_token t[9];
    tkv_pos pos[9];
    tkv_seq seq[9];
    bool want[9];
    for (int i = 0; i < 3; i++) {
        t[3 * i] = a[70 + i], pos[3 * i] = 70 + i, seq[3 * i] = 0;
        t[3 * i + 1] = b[50 + i], pos[3 * i + 1] = 50 + i, seq[3 * i + 1] = 1;
        t[3 * i + 2] = a[70 + i], pos[3 * i + 2] = 70 + i, seq[3 * i + 2] = 2;
    }
    for (int i = 0; i < 9; i++) want[i] = i >= 6;
    tkv_batch batch = {9, t, pos, seq, want};
    assert_int_equal(tkv_decode(ctx, &batch), TKV_OK);
    check(ctx, "the shared batch");
    static const struct { int row; size_t n; bool is_a; } rows[] = {{6, 73, true}, {7, 53, false}, {8, 73, true}};
    for (int k = 0; k < 3; k++) {
        tkv_context *f = make(0);
        assert_int_equal(tkv_seq_sync(f, 0, 0, rows[k].is_a ? a : b, rows[k].n, NULL), TKV_OK);
        if (memcmp(tkv_get_logits(ctx, (size_t)rows[k].row), tkv_get_logits_last(f), nv * sizeof(float)))
            fail_msg("batch row %d: the logits differ from a fresh context's", rows[k].row);
        tkv_context_free(f);
    }
    tkv_stats st;
    assert_int_equal(tkv_cache_stats_ex(ctx, &st, sizeof st), TKV_OK);
    assert_int_equal(st.cells_used, 73 + 52); /* 0 and 2 share every cell, 1 shares the first with them */
    tkv_context_free(ctx);
}

/* A block type (Q8_0 rows, another row size and the float attention path): a conversation past the
   window and a divergence older than the held rows, against a fresh Q8_0 context without a pool. */
static void test_q8_0(void **state) {
    (void)state;
    kv_type = TKV_TYPE_Q8_0;
    tkv_token a[N], b[N];
    list(a, N, 150, 10), list(b, N, 150, 11);
    tkv_context *ctx = make(ROWS_MIN);
    assert_int_equal(sync_checked(ctx, 0, a, 200, "history"), 0);
    for (size_t i = 200; i < 210; i++) decode_one(ctx, 0, a, i);
    same_as_fresh(ctx, a, 210, "the answer");
    assert_int_equal(sync_checked(ctx, 0, a, 230, "next turn"), 210);
    assert_int_equal(sync_checked(ctx, 1, b, 200, "divergence at 150"), expected_floor(230, ROWS_MIN, 150));
    tkv_context_free(ctx);
    kv_type = TKV_TYPE_F16;
}

/* Cache files, images and transfers are refused by name with a pool. */
static void test_files_refused(void **state) {
    (void)state;
    tkv_token t[N];
    list(t, N, N, 7);
    tkv_context *ctx = make(ROWS_MIN);
    assert_int_equal(sync_checked(ctx, 0, t, 50, "prompt"), 0);
    char path[] = "/tmp/tkv-swa-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    assert_int_equal(tkv_seq_save(ctx, 0, path), TKV_ERR_UNSUPPORTED);
    assert_non_null(strstr(tkv_context_error(ctx), "swa_rows"));
    assert_int_equal(tkv_seq_load(ctx, 1, path), TKV_ERR_UNSUPPORTED);
    assert_non_null(strstr(tkv_context_error(ctx), "swa_rows"));
    unlink(path);
    check(ctx, "after the refusals");
    tkv_context_free(ctx);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_params),        cmocka_unit_test(test_conversation), cmocka_unit_test(test_divergence),
        cmocka_unit_test(test_fork_truncate), cmocka_unit_test(test_abort),        cmocka_unit_test(test_files_refused),
        cmocka_unit_test(test_shared_batch),  cmocka_unit_test(test_q8_0),
    };
    static const char *const models[] = {"models/arch/gemma3.gguf", "models/arch/gemma2.gguf",
                                         "models/arch/gpt-oss.gguf", "models/arch/gemma4.gguf"};
    /* under the sanitizers (TKV_SWA_MODELS=1) the first model only: gemma3's five window layers of six */
    const char *lim = getenv("TKV_SWA_MODELS");
    size_t n_models = sizeof models / sizeof models[0];
    if (lim && atoi(lim) > 0 && (size_t)atoi(lim) < n_models) n_models = (size_t)atoi(lim);
    int failed = 0;
    for (size_t i = 0; i < n_models; i++) {
        model_rel = models[i];
        failed += _cmocka_run_group_tests(models[i], tests, sizeof tests / sizeof tests[0], setup, teardown);
    }
    return failed;
}
