/*
 * test_contract.c — the library contract as a service calls it (issue 30):
 * each case here once failed.
 *   - A sequence that extends another one's prefix from where it ends, then
 *     lets go, leaves its cells evictable (they once stayed held by the
 *     shorter sequence: "8 cells needed, 0 free and 0 evictable", a clear
 *     that freed nothing, wrong stats, and a check that said OK).
 *   - A wholly cached prompt synced again in a full cache succeeds: its last
 *     token, decoded for its logits, needs no cell (it once failed with
 *     TKV_ERR_FULL and left the sequence one token short).
 *   - After tkv_seq_sync of n tokens, tkv_get_logits(ctx, n - 1) is the last
 *     token's row (it once indexed the last pass only).
 *   - A call refused as busy leaves the context's message alone.
 * The expectations come from counting by hand what each step holds.
 */
#include "testutil.h"

#include "runtime/context.h"

#include <stdio.h>
#include <string.h>

static tkv_context *new_ctx(uint32_t n_cells, uint32_t n_seq, uint32_t n_batch) {
    tkv_context_params p = tkv_context_default_params();
    p.n_cells = n_cells;
    p.n_seq_max = n_seq;
    p.n_batch = n_batch;
    p.n_threads = 1;
    tkv_context *ctx = NULL;
    if (tkv_context_create(tu_model, &p, &ctx) != TKV_OK) fail_msg("%s", tkv_last_error(NULL));
    return ctx;
}

static void check(const tkv_context *ctx) {
    if (tkv_cache_check(ctx) != TKV_OK) fail_msg("%s", tkv_last_error(NULL));
}

static void list(tkv_token *t, size_t n, unsigned seed) {
    for (size_t i = 0; i < n; i++) t[i] = (tkv_token)(3 + (seed * 131u + i * 17u) % (unsigned)(tu_n_vocab - 3));
}

/* Append t[0..n) to seq, one token per decode (as a generation loop does). */
static void generate(tkv_context *ctx, tkv_seq seq, const tkv_token *t, size_t n) {
    for (size_t i = 0; i < n; i++) {
        tkv_pos p = tkv_seq_len(ctx, seq);
        tkv_batch b = {1, &t[i], &p, &seq, NULL};
        if (tkv_decode(ctx, &b) != TKV_OK) fail_msg("generate: %s", tkv_last_error(ctx));
    }
}

static tkv_stats stats(const tkv_context *ctx) {
    tkv_stats st;
    assert_int_equal(tkv_cache_stats_ex(ctx, &st, sizeof st), TKV_OK);
    return st;
}

/* Keep a prompt warm in sequence 0, fork it for a request, generate, clear the fork: the generated cells
   are held by nobody. This is also the OpenAI `n` path (the prompt forked per sample). */
static void test_extend_then_release(void **state) {
    (void)state;
    tkv_context *ctx = new_ctx(24, 4, 16);
    tkv_token prompt[8], gen[8], other[16];
    list(prompt, 8, 1), list(gen, 8, 2), list(other, 16, 3);
    size_t reused;
    assert_int_equal(tkv_seq_sync(ctx, 0, 0, prompt, 8, &reused), TKV_OK);
    for (int round = 0; round < 3; round++) {
        assert_int_equal(tkv_seq_fork(ctx, 0, 1), TKV_OK);
        generate(ctx, 1, gen, 8);
        check(ctx);
        tkv_stats st = stats(ctx);
        assert_int_equal(st.cells_used, 16);
        assert_int_equal(st.cells_shared, 8); /* the prompt, in both */
        assert_int_equal(st.cells_evictable, 0);
        assert_int_equal(tkv_seq_clear(ctx, 1), TKV_OK);
        check(ctx);
        st = stats(ctx);
        assert_int_equal(st.cells_used, 16);
        assert_int_equal(st.cells_shared, 0);
        assert_int_equal(st.cells_evictable, 8); /* the generated 8: nobody holds them */
    }
    /* 16 new cells: 8 free and the 8 evictable ones */
    assert_int_equal(tkv_seq_sync(ctx, 2, 0, other, 16, &reused), TKV_OK);
    assert_int_equal(reused, 0);
    check(ctx);
    size_t len;
    assert_int_equal(tkv_cache_match(ctx, 0, prompt, 8, &len), TKV_OK);
    assert_int_equal(len, 8); /* sequence 0 still holds its prompt */
    /* and a clear frees exactly what nobody holds */
    assert_int_equal(tkv_seq_fork(ctx, 0, 1), TKV_OK);
    assert_int_equal(tkv_seq_clear(ctx, 2), TKV_OK);
    generate(ctx, 1, gen, 8);
    assert_int_equal(tkv_seq_clear(ctx, 1), TKV_OK);
    assert_int_equal(tkv_cache_clear(ctx), TKV_OK);
    tkv_stats st = stats(ctx);
    assert_int_equal(st.cells_used, 8);
    assert_int_equal(st.cells_evictable, 0);
    check(ctx);
    tkv_context_free(ctx);
}

/* The same with a pin in place of the warm sequence, and with two sequences ending at one place. */
static void test_extend_pinned_and_shared(void **state) {
    (void)state;
    tkv_context *ctx = new_ctx(32, 4, 16);
    tkv_token prompt[8], gen[6];
    list(prompt, 8, 4), list(gen, 6, 5);
    size_t reused, len;
    tkv_pin pin;
    assert_int_equal(tkv_seq_sync(ctx, 0, 0, prompt, 8, &reused), TKV_OK);
    assert_int_equal(tkv_seq_fork(ctx, 0, 2), TKV_OK); /* two ends at the prompt's end */
    assert_int_equal(tkv_cache_pin(ctx, 0, prompt, 8, &len, &pin), TKV_OK);
    assert_int_equal(tkv_seq_clear(ctx, 0), TKV_OK);
    assert_int_equal(tkv_seq_sync(ctx, 1, 0, prompt, 8, &reused), TKV_OK); /* whole prompt cached */
    generate(ctx, 1, gen, 6);
    check(ctx);
    assert_int_equal(tkv_seq_clear(ctx, 1), TKV_OK);
    tkv_stats st = stats(ctx);
    assert_int_equal(st.cells_used, 14);
    assert_int_equal(st.cells_pinned, 8);
    assert_int_equal(st.cells_evictable, 6);
    assert_int_equal(tkv_seq_clear(ctx, 2), TKV_OK);
    assert_int_equal(tkv_cache_clear(ctx), TKV_OK);
    st = stats(ctx);
    assert_int_equal(st.cells_used, 8); /* the pinned prompt only */
    assert_int_equal(tkv_cache_unpin(ctx, pin), TKV_OK);
    assert_int_equal(stats(ctx).cells_evictable, 8);
    check(ctx);
    tkv_context_free(ctx);
}

/* A wholly cached prompt, synced again when no cell is free and none is evictable. */
static void test_cached_prompt_in_full_cache(void **state) {
    (void)state;
    tkv_context *ctx = new_ctx(24, 4, 16);
    tkv_token p[12], q[12];
    list(p, 12, 6), list(q, 12, 7);
    size_t reused;
    assert_int_equal(tkv_seq_sync(ctx, 0, 0, p, 12, &reused), TKV_OK);
    const float *l = tkv_get_logits_last(ctx);
    assert_non_null(l);
    float first[512];
    assert_true(tu_n_vocab <= 512);
    memcpy(first, l, tu_n_vocab * sizeof *first);
    assert_int_equal(tkv_seq_sync(ctx, 1, 0, q, 12, &reused), TKV_OK);
    assert_int_equal(stats(ctx).cells_used, 24); /* full, and everything is held */
    assert_int_equal(stats(ctx).cells_evictable, 0);
    for (int again = 0; again < 3; again++) {
        const uint64_t ev = stats(ctx).evictions;
        assert_int_equal(tkv_seq_sync(ctx, 0, 0, p, 12, &reused), TKV_OK);
        assert_int_equal(reused, 11);
        assert_int_equal(tkv_seq_len(ctx, 0), 12);
        l = tkv_get_logits_last(ctx);
        assert_non_null(l);
        assert_memory_equal(l, first, tu_n_vocab * sizeof *first); /* batch invariant: the same row */
        assert_int_equal(stats(ctx).evictions, ev);
        assert_int_equal(stats(ctx).cells_used, 24);
        check(ctx);
    }
    /* the same through tkv_decode: the sequence one short, its last token decoded again */
    assert_int_equal(tkv_seq_truncate(ctx, 1, 11), TKV_OK);
    generate(ctx, 1, &q[11], 1);
    assert_int_equal(tkv_seq_len(ctx, 1), 12);
    /* a token that is not cached there still needs a cell: full, and nothing changes. The one evictable
       cell (q[11] while sequence 1 is one short) is the token the batch keeps, so it is not evicted. */
    assert_int_equal(tkv_seq_truncate(ctx, 1, 11), TKV_OK);
    assert_int_equal(stats(ctx).cells_evictable, 1);
    tkv_token two[2] = {q[11], (tkv_token)(q[11] == 5 ? 6 : 5)};
    tkv_pos pos[2] = {11, 12};
    tkv_seq sq[2] = {1, 1};
    tkv_batch b = {2, two, pos, sq, NULL};
    assert_int_equal(tkv_decode(ctx, &b), TKV_ERR_FULL);
    assert_int_equal(tkv_seq_len(ctx, 1), 11);
    assert_int_equal(stats(ctx).cells_evictable, 1);
    size_t len;
    assert_int_equal(tkv_cache_match(ctx, 0, q, 12, &len), TKV_OK);
    assert_int_equal(len, 12);
    check(ctx);
    tkv_context_free(ctx);
}

/* After a sync, logits are indexed by the list: n - 1 is the last token, whatever the passes were. */
static void test_sync_logits_index(void **state) {
    (void)state;
    tkv_context *ctx = new_ctx(128, 2, 8);
    tkv_token t[30];
    list(t, 30, 8);
    const size_t lens[] = {1, 5, 8, 9, 30};
    for (size_t k = 0; k < sizeof lens / sizeof *lens; k++) {
        const size_t n = lens[k];
        for (int twice = 0; twice < 2; twice++) { /* fresh, then wholly cached */
            size_t reused;
            assert_int_equal(tkv_seq_sync(ctx, 0, 0, t, n, &reused), TKV_OK);
            const float *last = tkv_get_logits_last(ctx);
            assert_non_null(last);
            assert_ptr_equal(tkv_get_logits(ctx, n - 1), last);
            if (n > 1) assert_null(tkv_get_logits(ctx, 0));
            if (n > 1) assert_null(tkv_get_logits(ctx, n - 2));
            assert_null(tkv_get_logits(ctx, n));
        }
        assert_int_equal(tkv_seq_clear(ctx, 0), TKV_OK);
    }
    /* a decode indexes its batch again */
    tkv_pos p = 0;
    tkv_seq s = 1;
    tkv_batch b = {1, t, &p, &s, NULL};
    assert_int_equal(tkv_decode(ctx, &b), TKV_OK);
    assert_non_null(tkv_get_logits(ctx, 0));
    tkv_context_free(ctx);
}

typedef struct refusal {
    tkv_context *ctx;
    int calls, refused;
} refusal;

static bool call_back(void *user) {
    refusal *r = user;
    tkv_stats st;
    size_t len;
    r->calls++;
    r->refused += tkv_cache_stats_ex(r->ctx, &st, sizeof st) == TKV_ERR_BUSY;
    r->refused += tkv_cache_match(r->ctx, 0, NULL, 0, &len) == TKV_ERR_BUSY;
    r->refused += tkv_cache_check(r->ctx) == TKV_ERR_BUSY;
    return false;
}

/* A refused call writes the thread's message, never the context's, which the call in progress owns. */
static void test_busy_leaves_message(void **state) {
    (void)state;
    refusal r = {0};
    tkv_context_params p = tkv_context_default_params();
    p.n_cells = 32;
    p.n_seq_max = 2;
    p.n_threads = 1;
    p.abort_cb = call_back;
    p.abort_user = &r;
    tkv_context *ctx;
    assert_int_equal(tkv_context_create(tu_model, &p, &ctx), TKV_OK);
    r.ctx = ctx;
    assert_int_equal(tkv_seq_truncate(ctx, 9, 0), TKV_ERR_INVALID); /* a message of the context's own */
    char before[256];
    snprintf(before, sizeof before, "%s", tkv_context_error(ctx));
    assert_non_null(strstr(before, "sequence 9"));
    tkv_token t[4] = {3, 4, 5, 6};
    size_t reused;
    assert_int_equal(tkv_seq_sync(ctx, 0, 0, t, 4, &reused), TKV_OK);
    assert_true(r.calls > 0);
    assert_int_equal(r.refused, 3 * r.calls);
    assert_string_equal(tkv_context_error(ctx), before);
    assert_non_null(strstr(tkv_last_error(NULL), "another call"));
    tkv_context_free(ctx);
}

typedef struct reader {
    tkv_context *ctx;
    size_t tokens, nodes;
    int refused;
} reader;

static void read_node(const tkv_cache_node *nd, void *user) {
    reader *r = user;
    tkv_token run[64];
    size_t n, len;
    tkv_stats st;
    r->nodes++;
    assert_int_equal(tkv_cache_node_tokens(r->ctx, nd->id, run, 64, &n), TKV_OK);
    assert_int_equal(n, nd->n_tokens);
    r->tokens += n;
    assert_int_equal(tkv_cache_match(r->ctx, nd->ns, run, n, &len), TKV_OK);
    assert_int_equal(tkv_cache_stats_ex(r->ctx, &st, sizeof st), TKV_OK);
    r->refused += tkv_cache_clear(r->ctx) == TKV_ERR_BUSY; /* it would change the tree under the walk */
    r->refused += tkv_seq_clear(r->ctx, 0) == TKV_ERR_BUSY;
}

/* A walk's visitor reads the node it is given (the server's cache view does); it changes nothing. */
static void test_walk_visitor_reads(void **state) {
    (void)state;
    tkv_context *ctx = new_ctx(64, 2, 16);
    tkv_token a[10], b[10];
    list(a, 10, 9), list(b, 10, 10);
    b[0] = a[0], b[1] = a[1]; /* a shared stem: three nodes */
    size_t reused;
    assert_int_equal(tkv_seq_sync(ctx, 0, 0, a, 10, &reused), TKV_OK);
    assert_int_equal(tkv_seq_sync(ctx, 1, 0, b, 10, &reused), TKV_OK);
    reader r = {.ctx = ctx};
    assert_int_equal(tkv_cache_walk(ctx, read_node, &r), TKV_OK);
    assert_int_equal(r.tokens, stats(ctx).cells_used);
    assert_int_equal(r.refused, 2 * (int)r.nodes);
    assert_int_equal(tkv_seq_len(ctx, 0), 10);
    assert_int_equal(tkv_cache_clear(ctx), TKV_OK); /* after the walk, calls enter again */
    check(ctx);
    tkv_context_free(ctx);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_extend_then_release),
        cmocka_unit_test(test_extend_pinned_and_shared),
        cmocka_unit_test(test_cached_prompt_in_full_cache),
        cmocka_unit_test(test_sync_logits_index),
        cmocka_unit_test(test_busy_leaves_message),
        cmocka_unit_test(test_walk_visitor_reads),
    };
    return TU_RESULT(cmocka_run_group_tests(tests, tu_stories_setup, tu_stories_teardown));
}
