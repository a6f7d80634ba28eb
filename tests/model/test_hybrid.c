/*
 * test_hybrid.c — lfm2, the first hybrid architecture: its short-conv layers
 * keep each token's B*x row in the token's cell, so every cached prefix is
 * reusable at any length. Each check compares against a fresh context that
 * computed the same list from nothing (batch_invariant: the bits must agree).
 */
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { N = 40, N_CELLS = 128 };

static tkv_model *model;
static tkv_token toks[N];

static tkv_context *make(uint32_t n_batch) {
    tkv_context_params cp = tkv_context_default_params();
    cp.n_cells = N_CELLS;
    cp.n_threads = 2;
    cp.n_batch = n_batch;
    cp.batch_invariant = true;
    tkv_context *ctx = NULL;
    if (tkv_context_create(model, &cp, &ctx) != TKV_OK) fail_msg("%s", tkv_last_error(NULL));
    return ctx;
}

/* The last logits of tokens[0..n) synced in a fresh context, into out. */
static void fresh(size_t n, float *out) {
    tkv_context *ctx = make(512);
    assert_int_equal(tkv_seq_sync(ctx, 0, 0, toks, n, NULL), TKV_OK);
    memcpy(out, tkv_get_logits_last(ctx), tkv_vocab_size(model) * sizeof *out);
    tkv_context_free(ctx);
}

static int setup(void **state) {
    (void)state;
    if (tkv_model_load(tu_shared("models/arch/lfm2.gguf"), NULL, &model) != TKV_OK) fail_msg("%s", tkv_last_error(NULL));
    toks[0] = 1; /* BOS */
    for (size_t i = 1; i < N; i++) toks[i] = (tkv_token)(3 + (i * 37 + 11) % 500);
    return 0;
}

static int teardown(void **state) {
    (void)state;
    tkv_model_free(model);
    return 0;
}

/* A prefix of every length k cached by sequence 0, then the whole list in
   sequence 1: k tokens reused, the rest decoded (in batches of 3, so batch
   edges fall inside and outside the conv's window), the same logits. */
static void test_reuse_every_length(void **state) {
    (void)state;
    const size_t nv = tkv_vocab_size(model);
    float *want = malloc(nv * sizeof *want);
    fresh(N, want);
    for (size_t k = 1; k < N; k++) {
        tkv_context *ctx = make(3);
        size_t reused = 0;
        assert_int_equal(tkv_seq_sync(ctx, 0, 0, toks, k, NULL), TKV_OK);
        assert_int_equal(tkv_seq_sync(ctx, 1, 0, toks, N, &reused), TKV_OK);
        assert_int_equal(reused, k);
        if (memcmp(tkv_get_logits_last(ctx), want, nv * sizeof *want) != 0)
            fail_msg("prefix of %zu tokens reused: the last logits differ from a fresh context's", k);
        tkv_context_free(ctx);
    }
    free(want);
}

/* A sequence saved and loaded into another context continues as if it had
   been computed there: the next token's logits, and a longer list synced
   over the loaded prefix. */
static void test_save_load(void **state) {
    (void)state;
    const size_t nv = tkv_vocab_size(model), m = 17;
    float *want = malloc(nv * sizeof *want), *want_all = malloc(nv * sizeof *want_all);
    fresh(m + 1, want);
    fresh(N, want_all);
    char path[] = "/tmp/tkv_hybrid_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    tkv_context *a = make(512);
    assert_int_equal(tkv_seq_sync(a, 0, 0, toks, m, NULL), TKV_OK);
    assert_int_equal(tkv_seq_save(a, 0, path), TKV_OK);
    tkv_context_free(a);

    tkv_context *b = make(512);
    if (tkv_seq_load(b, 0, path) != TKV_OK) fail_msg("%s", tkv_last_error(b));
    tkv_pos pos = (tkv_pos)m;
    tkv_seq s = 0;
    tkv_batch one = {1, &toks[m], &pos, &s, NULL};
    assert_int_equal(tkv_decode(b, &one), TKV_OK);
    if (memcmp(tkv_get_logits_last(b), want, nv * sizeof *want) != 0)
        fail_msg("the token after a loaded sequence: logits differ from a fresh context's");
    size_t reused = 0;
    assert_int_equal(tkv_seq_sync(b, 1, 0, toks, N, &reused), TKV_OK);
    assert_int_equal(reused, m + 1);
    if (memcmp(tkv_get_logits_last(b), want_all, nv * sizeof *want_all) != 0)
        fail_msg("a list synced over a loaded prefix: logits differ from a fresh context's");
    tkv_context_free(b);
    unlink(path);
    free(want), free(want_all);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reuse_every_length),
        cmocka_unit_test(test_save_load),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
