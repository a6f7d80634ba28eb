/*
 * test_checkpoints.c — exact prefix reuse on the recurrent hybrids (qwen35's
 * delta nets, granitehybrid's and nemotron_h's Mamba-2 layers):
 * the recurrent state cannot be cut back, so a prefix is reusable up to its
 * deepest checkpoint (kv/kvstate.h). Every check holds the answer to a fresh
 * context that computed the same list from nothing (batch_invariant: to the
 * bit), the reported reuse to the tokens that were not computed (the stats'
 * tokens_computed), and the reuse itself to what the checkpoint policy
 * promises: a repeated prompt and the next turn of a conversation to the
 * last token, a divergence where an earlier request diverged exactly, any
 * other within state_interval tokens.
 */
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { N = 120, N_CELLS = 512, K = 32 };

static tkv_model *model;
static size_t nv;
static const char *model_rel; /* the group's model, under ../shared */

static tkv_context *make(uint32_t state_mib) {
    tkv_context_params cp = tkv_context_default_params();
    cp.n_cells = N_CELLS;
    cp.n_seq_max = 8;
    cp.n_threads = 2;
    cp.n_batch = 48; /* prompts of more than one pass */
    cp.state_interval = K;
    if (state_mib) cp.state_cache_mib = state_mib;
    tkv_context *ctx = NULL;
    if (tkv_context_create(model, &cp, &ctx) != TKV_OK) fail_msg("%s", tkv_last_error(NULL));
    return ctx;
}

/* A token list: the shared part s[0..shared), then a tail of its own (seed). */
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

/* Sync tokens[0..n) into seq and check it against a fresh context; returns the reuse. */
static size_t sync_checked(tkv_context *ctx, tkv_seq seq, const tkv_token *tokens, size_t n, const char *what) {
    const uint64_t before = computed(ctx);
    size_t reused = 0;
    if (tkv_seq_sync(ctx, seq, 0, tokens, n, &reused) != TKV_OK) fail_msg("%s: %s", what, tkv_last_error(ctx));
    if (computed(ctx) - before != n - reused)
        fail_msg("%s: %zu reported reused of %zu, but %llu computed", what, reused, n,
                 (unsigned long long)(computed(ctx) - before));
    tkv_context *f = make(0);
    assert_int_equal(tkv_seq_sync(f, 0, 0, tokens, n, NULL), TKV_OK);
    if (memcmp(tkv_get_logits_last(ctx), tkv_get_logits_last(f), nv * sizeof(float)) != 0)
        fail_msg("%s: %zu of %zu tokens reused: the logits differ from a fresh context's", what, reused, n);
    tkv_context_free(f);
    if (tkv_cache_check(ctx) != TKV_OK) fail_msg("%s: %s", what, tkv_last_error(ctx));
    return reused;
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

/* The same prompt again, in another sequence and in the same one: reused to its last token. */
static void test_repeated_prompt(void **state) {
    (void)state;
    tkv_token t[N];
    list(t, N, N, 0);
    tkv_context *ctx = make(0);
    assert_int_equal(sync_checked(ctx, 0, t, 77, "first"), 0);
    assert_int_equal(sync_checked(ctx, 1, t, 77, "again, sequence 1"), 76);
    assert_int_equal(sync_checked(ctx, 0, t, 77, "again, sequence 0"), 76);
    size_t len = 0;
    assert_int_equal(tkv_cache_match(ctx, 0, t, 77, &len), TKV_OK);
    assert_int_equal(len, 77); /* the end of the prompt has its state */
    tkv_context_free(ctx);
}

/* A conversation: prompt, generated answer (one token per decode), then the next turn over both: the
   whole conversation so far is reused. */
static void test_conversation(void **state) {
    (void)state;
    tkv_token t[N];
    list(t, N, N, 1);
    tkv_context *ctx = make(0);
    const size_t p = 41, a = 9;
    assert_int_equal(sync_checked(ctx, 0, t, p, "prompt"), 0);
    for (size_t i = p; i < p + a; i++) { /* the answer: t[p..p+a) stand for sampled tokens */
        tkv_pos pos = (tkv_pos)i;
        tkv_seq s = 0;
        tkv_batch b = {1, &t[i], &pos, &s, NULL};
        assert_int_equal(tkv_decode(ctx, &b), TKV_OK);
    }
    assert_int_equal(sync_checked(ctx, 0, t, p + a + 20, "next turn"), p + a);
    assert_int_equal(sync_checked(ctx, 3, t, p + a + 20, "the same conversation elsewhere"), p + a + 19);
    tkv_context_free(ctx);
}

/* Divergences from a cached path: within K of it the first time, exactly where an earlier request
   diverged the next time; a fork continues as its source. */
static void test_branches(void **state) {
    (void)state;
    tkv_token a[N], b[N], c[N], d[N];
    const size_t shared = 45;
    list(a, 100, shared, 2), list(b, 90, shared, 3), list(c, 80, shared, 4), list(d, 100, 70, 2);
    tkv_context *ctx = make(0);
    assert_int_equal(sync_checked(ctx, 0, a, 100, "a"), 0);
    const size_t rb = sync_checked(ctx, 1, b, 90, "b diverges at 45");
    assert_true(rb <= shared && rb + K > shared); /* the checkpoint every K positions */
    assert_int_equal(sync_checked(ctx, 2, c, 80, "c diverges at 45 too"), shared);
    const size_t rd = sync_checked(ctx, 3, d, 100, "d diverges from a at 70");
    assert_true(rd <= 70 && rd + K > 70);
    /* a fork shares its source's state */
    assert_int_equal(tkv_seq_fork(ctx, 0, 4), TKV_OK);
    tkv_token e[N];
    memcpy(e, a, sizeof a);
    e[100] = 9;
    tkv_pos pos = 100;
    tkv_seq s4 = 4;
    tkv_batch one = {1, &e[100], &pos, &s4, NULL};
    assert_int_equal(tkv_decode(ctx, &one), TKV_OK);
    float *got = malloc(nv * sizeof *got);
    memcpy(got, tkv_get_logits_last(ctx), nv * sizeof *got);
    tkv_context *f = make(0);
    assert_int_equal(tkv_seq_sync(f, 0, 0, e, 101, NULL), TKV_OK);
    assert_memory_equal(got, tkv_get_logits_last(f), nv * sizeof *got);
    tkv_context_free(f);
    free(got);
    assert_int_equal(tkv_cache_check(ctx), TKV_OK);
    tkv_context_free(ctx);
}

/* A divergence past the deepest checkpoint replays the tokens from the checkpoint to the common length
   (docs/library.md, "What a replay costs"): their K/V is cached, so the cells grow by the new tokens only,
   nothing is evicted, and only the prompt's last token has logits. */
static void test_replay_takes_no_cells(void **state) {
    (void)state;
    tkv_token a[N], b[N];
    const size_t shared = 45;
    list(a, 100, shared, 2), list(b, 90, shared, 3);
    tkv_context *ctx = make(0);
    assert_int_equal(sync_checked(ctx, 0, a, 100, "a"), 0);
    tkv_stats before, after;
    assert_int_equal(tkv_cache_stats_ex(ctx, &before, sizeof before), TKV_OK);
    const size_t rb = sync_checked(ctx, 1, b, 90, "b diverges at 45");
    assert_true(rb < shared); /* a replay: 45 is no multiple of K */
    assert_int_equal(tkv_cache_stats_ex(ctx, &after, sizeof after), TKV_OK);
    assert_int_equal(after.cells_used - before.cells_used, 90 - shared);
    assert_int_equal(after.evictions, before.evictions);
    assert_int_equal(after.tokens_computed - before.tokens_computed, 90 - rb);
    assert_null(tkv_get_logits(ctx, 88));
    assert_non_null(tkv_get_logits(ctx, 89));
    tkv_context_free(ctx);
}

/* Truncated where no checkpoint is, a sequence's next decode recomputes its state from the deepest one
   before (the answer a fresh context gives); a sequence saved and loaded into another context brings its
   checkpoints along and continues without recomputing anything. */
static void test_truncate_and_load(void **state) {
    (void)state;
    tkv_token t[N];
    list(t, N, N, 5);
    tkv_context *ctx = make(0);
    assert_int_equal(sync_checked(ctx, 0, t, 90, "prompt"), 0);
    assert_int_equal(tkv_seq_truncate(ctx, 0, 50), TKV_OK);
    tkv_pos pos = 50;
    tkv_seq s = 0;
    tkv_batch b = {1, &t[50], &pos, &s, NULL};
    assert_int_equal(tkv_decode(ctx, &b), TKV_OK);
    float *got = malloc(nv * sizeof *got);
    memcpy(got, tkv_get_logits_last(ctx), nv * sizeof *got);
    tkv_context *f = make(0);
    assert_int_equal(tkv_seq_sync(f, 0, 0, t, 51, NULL), TKV_OK);
    assert_memory_equal(got, tkv_get_logits_last(f), nv * sizeof *got);
    assert_int_equal(tkv_seq_len(ctx, 0), 51);
    assert_int_equal(tkv_cache_check(ctx), TKV_OK);

    char path[] = "/tmp/tkv-ckpt-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    assert_int_equal(tkv_seq_save(ctx, 0, path), TKV_OK);
    tkv_context *g = make(0);
    if (tkv_seq_load(g, 2, path) != TKV_OK) fail_msg("%s", tkv_last_error(g));
    size_t len = 99;
    assert_int_equal(tkv_cache_match(g, 0, t, 51, &len), TKV_OK);
    assert_int_equal(len, 51); /* the file carries the state at its end (version 3): reusable to the last token */
    pos = 51;
    s = 2;
    tkv_batch c = {1, &t[51], &pos, &s, NULL};
    const uint64_t before = computed(g);
    assert_int_equal(tkv_decode(g, &c), TKV_OK);
    assert_int_equal(computed(g) - before, 1); /* nothing replayed */
    memcpy(got, tkv_get_logits_last(g), nv * sizeof *got);
    assert_int_equal(tkv_seq_sync(f, 1, 0, t, 52, NULL), TKV_OK);
    assert_memory_equal(got, tkv_get_logits_last(f), nv * sizeof *got);
    assert_int_equal(tkv_cache_check(g), TKV_OK);
    unlink(path);
    free(got);
    tkv_context_free(g);
    tkv_context_free(f);
    tkv_context_free(ctx);
}

/* A sequence of another namespace replayed from the empty prefix (no checkpoint before where it was cut) stays in
   its namespace: the tokens it decodes again are cached there, not under namespace 0. */
static void test_replay_keeps_namespace(void **state) {
    (void)state;
    tkv_token t[N];
    list(t, N, N, 7);
    tkv_context *ctx = make(0);
    assert_int_equal(tkv_seq_sync(ctx, 0, 7, t, 20, NULL), TKV_OK);
    assert_int_equal(tkv_seq_truncate(ctx, 0, 10), TKV_OK); /* checkpoints at 19 and 20 only: replay from 0 */
    tkv_pos pos = 10;
    tkv_seq s = 0;
    tkv_batch b = {1, &t[10], &pos, &s, NULL};
    const uint64_t before = computed(ctx);
    assert_int_equal(tkv_decode(ctx, &b), TKV_OK);
    assert_int_equal(computed(ctx) - before, 11); /* 10 replayed, 1 new */
    uint64_t ns = 0;
    assert_int_equal(tkv_seq_namespace(ctx, 0, &ns), TKV_OK);
    assert_int_equal(ns, 7);
    size_t len = 99;
    assert_int_equal(tkv_cache_match(ctx, 7, t, 11, &len), TKV_OK);
    assert_int_equal(len, 11);
    assert_int_equal(tkv_cache_match(ctx, 0, t, 11, &len), TKV_OK);
    assert_int_equal(len, 0);
    assert_int_equal(tkv_cache_check(ctx), TKV_OK);
    tkv_context *f = make(0);
    assert_int_equal(tkv_seq_sync(f, 0, 7, t, 11, NULL), TKV_OK);
    assert_memory_equal(tkv_get_logits_last(ctx), tkv_get_logits_last(f), nv * sizeof(float));
    tkv_context_free(f);
    tkv_context_free(ctx);
}

/* An exported prefix (a shared store's value) imported into another context: the checkpoints come along,
   and a prompt over it reuses it to its end with a fresh context's answer. */
static void test_export_import(void **state) {
    (void)state;
    tkv_token t[N];
    list(t, N, N, 7);
    tkv_context *a = make(0), *b = make(0);
    assert_int_equal(sync_checked(a, 0, t, 70, "prompt"), 0);
    size_t size = 0;
    assert_int_equal(tkv_cache_export(a, 0, t, 70, 0, NULL, 0, &size), TKV_ERR_FULL);
    void *img = malloc(size);
    assert_int_equal(tkv_cache_export(a, 0, t, 70, 0, img, size, &size), TKV_OK);
    assert_int_equal(tkv_cache_import(b, 0, t, 70, 0, img, size), TKV_OK);
    size_t len = 0;
    assert_int_equal(tkv_cache_match(b, 0, t, 70, &len), TKV_OK);
    assert_int_equal(len, 70);
    assert_int_equal(sync_checked(b, 1, t, 90, "over the imported prefix"), 70);
    /* an image cut inside its checkpoints, and one byte of a checkpoint changed: refused, nothing imported */
    tkv_context *c = make(0);
    assert_int_equal(tkv_cache_import(c, 0, t, 70, 0, img, size - 1), TKV_ERR_FORMAT);
    assert_non_null(strstr(tkv_last_error(c), "whole checkpoints"));
    ((uint8_t *)img)[size - 12] ^= 1;
    assert_int_equal(tkv_cache_import(c, 0, t, 70, 0, img, size), TKV_ERR_FORMAT);
    assert_non_null(strstr(tkv_last_error(c), "checkpoints"));
    assert_int_equal(tkv_cache_match(c, 0, t, 70, &len), TKV_OK);
    assert_int_equal(len, 0);
    free(img);
    tkv_context_free(a);
    tkv_context_free(b);
    tkv_context_free(c);
}

/* A cache directory (tkv_cache_save, one file per prefix-tree node) carries the checkpoints of each node's
   positions: a context loading it reuses a saved conversation to its end and a shared prefix where the
   saving context had a checkpoint, with a fresh context's answers. */
static void test_cache_dir(void **state) {
    (void)state;
    tkv_token a[N], b[N];
    list(a, 100, 60, 8), list(b, 90, 60, 9);
    tkv_context *ctx = make(0);
    sync_checked(ctx, 0, a, 100, "a");
    sync_checked(ctx, 1, b, 90, "b diverges at 60");
    char dir[64];
    assert_int_equal(tu_mkdtemp(dir, "ckpt-dir"), 0);
    char path[128];
    snprintf(path, sizeof path, "%s/cache", dir);
    if (tkv_cache_save(ctx, path, 0) != TKV_OK) fail_msg("%s", tkv_last_error(ctx));
    tkv_context *g = make(0);
    if (tkv_cache_load(g, path) != TKV_OK) fail_msg("%s", tkv_last_error(g));
    size_t len = 0;
    assert_int_equal(tkv_cache_match(g, 0, a, 100, &len), TKV_OK);
    assert_int_equal(len, 100); /* the end of a's prompt had its state */
    assert_int_equal(tkv_cache_match(g, 0, b, 90, &len), TKV_OK);
    assert_int_equal(len, 90);
    assert_int_equal(sync_checked(g, 2, a, 100, "a again, after the load"), 99);
    assert_int_equal(tu_rmtree(dir), 0);
    tkv_context_free(ctx);
    tkv_context_free(g);
}

static bool abort_now(void *user) { return *(bool *)user; }

/* An aborted decode leaves every state and checkpoint as it was: the same decode afterwards gives a
   fresh context's answer, and the checkpoints count is unchanged. */
static void test_abort_leaves_states(void **state) {
    (void)state;
    tkv_token t[N];
    list(t, N, N, 6);
    bool stop = false;
    tkv_context_params cp = tkv_context_default_params();
    cp.n_cells = N_CELLS, cp.n_threads = 2, cp.n_seq_max = 4, cp.state_interval = K;
    cp.abort_cb = abort_now, cp.abort_user = &stop;
    tkv_context *ctx = NULL;
    assert_int_equal(tkv_context_create(model, &cp, &ctx), TKV_OK);
    assert_int_equal(tkv_seq_sync(ctx, 0, 0, t, 40, NULL), TKV_OK);
    tkv_pos pos[8];
    tkv_seq seq[8] = {0};
    for (int i = 0; i < 8; i++) pos[i] = 40 + i;
    tkv_batch b = {8, &t[40], pos, seq, NULL};
    stop = true;
    assert_int_equal(tkv_decode(ctx, &b), TKV_ERR_ABORTED);
    assert_int_equal(tkv_seq_len(ctx, 0), 40);
    assert_int_equal(tkv_cache_check(ctx), TKV_OK);
    stop = false;
    assert_int_equal(tkv_decode(ctx, &b), TKV_OK);
    float *got = malloc(nv * sizeof *got);
    memcpy(got, tkv_get_logits_last(ctx), nv * sizeof *got);
    tkv_context *f = make(0);
    assert_int_equal(tkv_seq_sync(f, 0, 0, t, 48, NULL), TKV_OK);
    assert_memory_equal(got, tkv_get_logits_last(f), nv * sizeof *got);
    free(got);
    tkv_context_free(f);
    tkv_context_free(ctx);
}

/* A budget of one MiB (13 of qwen35's 78 KiB states, 27 of granitehybrid's; at least n_seq + 2 kept) under many
   prompts: checkpoints are evicted, every answer still equals a fresh context's, the check holds, and the stats
   show the memory within the budget the state size and the rule (whole states, at least n_seq + 2) give. */
static void test_small_budget(void **state) {
    (void)state;
    tkv_context *ctx = make(1);
    const uint64_t one = tkv_model_state_size(model);
    const uint64_t slots = (1u << 20) / one > 8 + 2 ? (1u << 20) / one : 8 + 2;
    tkv_token t[N];
    tkv_stats st;
    for (unsigned r = 0; r < 12; r++) {
        list(t, 60 + r * 5, 20 + r * 3, r % 4);
        char what[32];
        snprintf(what, sizeof what, "prompt %u", r);
        sync_checked(ctx, (tkv_seq)(r % 8), t, 60 + r * 5, what);
        assert_int_equal(tkv_cache_stats_ex(ctx, &st, sizeof st), TKV_OK);
        assert_int_equal(st.checkpoint_budget_bytes, slots * one);
        assert_true(st.checkpoint_bytes <= st.checkpoint_budget_bytes);
        assert_true(st.checkpoints >= 1 && st.checkpoints * one <= st.checkpoint_bytes);
        assert_true(st.state_scratch_bytes >= one); /* the working state of the last decode's run */
    }
    /* 12 prompts of 60-115 tokens leave 3-5 checkpoints each (interval, before-last, end): more than the slots */
    assert_int_equal(st.checkpoints, slots);
    assert_true(st.checkpoint_evictions > 0);
    tkv_context_free(ctx);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_repeated_prompt), cmocka_unit_test(test_conversation),
        cmocka_unit_test(test_branches),        cmocka_unit_test(test_truncate_and_load),
        cmocka_unit_test(test_abort_leaves_states), cmocka_unit_test(test_small_budget),
        cmocka_unit_test(test_export_import),     cmocka_unit_test(test_cache_dir),
        cmocka_unit_test(test_replay_keeps_namespace), cmocka_unit_test(test_replay_takes_no_cells),
    };
    static const char *const models[] = {"models/arch/qwen35.gguf", "models/arch/granitehybrid.gguf",
                                         "models/arch/nemotron_h.gguf"};
    int failed = 0;
    for (size_t i = 0; i < sizeof models / sizeof models[0]; i++) {
        model_rel = models[i];
        failed += _cmocka_run_group_tests(models[i], tests, sizeof tests / sizeof tests[0], setup, teardown);
    }
    return failed;
}
