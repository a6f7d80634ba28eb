/*
 * test_cache.c — the token-aware cache: tkv_seq_sync reuses the longest
 * cached prefix from any sequence of the namespace and computes the same
 * logits as a fresh context; 10,000 random operations (sync, decode, fork,
 * truncate, clear, pins, eviction under pressure, injected failures, calls
 * from inside a decode's abort callback) against a model of every
 * sequence's tokens, with tkv_cache_check after each, eviction counted to
 * the cell and checked for LRU order; a failed decode under eviction
 * pressure changes nothing.
 */
#include "testutil.h"

#include "base/alloc.h"
#include "runtime/context.h"

#include <stdlib.h>
#include <string.h>

typedef struct abort_ctl {
    int countdown;     /* abort when it reaches 0; < 0: never */
    tkv_context *ctx;  /* with reenter: the callback calls back into it */
    bool reenter;
    unsigned seed;
    int n_busy;        /* calls refused with TKV_ERR_BUSY */
} abort_ctl;

/* From inside a decode (its abort callback), every call on the context is
   refused and changes nothing: the random operations' model then still holds. */
static void reenter(abort_ctl *a) {
    tkv_context *ctx = a->ctx;
    const tkv_seq s = (tkv_seq)(rand_r(&a->seed) % 4);
    tkv_token t[3] = {1, 10, 20};
    tkv_pos p[1] = {0};
    tkv_seq q[1] = {s};
    tkv_batch b = {1, t, p, q, NULL};
    size_t n;
    tkv_stats st;
    tkv_status r;
    switch (rand_r(&a->seed) % 10) {
    case 0: r = tkv_seq_clear(ctx, s); break;
    case 1: r = tkv_seq_truncate(ctx, s, 1); break;
    case 2: r = tkv_seq_fork(ctx, s, (s + 1) % 4); break;
    case 3: r = tkv_cache_clear(ctx); break;
    case 4: {
        tkv_pin pin = 0;
        r = tkv_cache_pin(ctx, 0, t, 3, &n, &pin);
        assert_int_equal(pin, 0);
        break;
    }
    case 5: r = tkv_seq_sync(ctx, s, 0, t, 3, &n); break;
    case 6: r = tkv_decode(ctx, &b); break;
    case 7: r = tkv_cache_stats_ex(ctx, &st, sizeof st); break;
    case 8: r = tkv_cache_check(ctx); break;
    default:
        assert_int_equal(tkv_seq_len(ctx, s), 0);
        assert_null(tkv_get_logits_last(ctx));
        r = tkv_seq_attach(ctx, s, 0, t, 3, &n);
        break;
    }
    assert_int_equal(r, TKV_ERR_BUSY);
    a->n_busy++;
}

static bool abort_cb(void *user) {
    abort_ctl *a = user;
    if (a->reenter) reenter(a);
    return a->countdown >= 0 && a->countdown-- == 0;
}

static int n_threads = 2;

static tkv_context *new_ctx(uint32_t n_cells, uint32_t n_seq, abort_ctl *a) {
    tkv_context_params p = tkv_context_default_params();
    p.n_cells = n_cells;
    p.n_seq_max = n_seq;
    p.n_threads = n_threads; /* the random run uses 1: tiny batches of a tiny model gain nothing from 2 */
    p.n_batch = 16;
    p.batch_invariant = true; /* logits compared to the bit across batch shapes (F32 weights) */
    p.abort_cb = a ? abort_cb : NULL;
    p.abort_user = a;
    tkv_context *ctx = NULL;
    if (tkv_context_create(tu_model, &p, &ctx) != TKV_OK) fail_msg("%s", tkv_last_error(NULL));
    return ctx;
}

static void check(tkv_context *ctx) {
    if (tkv_cache_check(ctx) != TKV_OK) fail_msg("%s", tkv_last_error(NULL));
}

/* Random lists that share prefixes: a few stems, each extended randomly. */
static size_t random_list(tkv_token *t, size_t max, unsigned *seed) {
    static const tkv_token stems[3][6] = {{1, 10, 20, 30, 40, 50}, {1, 10, 20, 31, 41, 51}, {1, 99, 98, 97, 96, 95}};
    const tkv_token *stem = stems[rand_r(seed) % 3];
    size_t n = 6 + (size_t)rand_r(seed) % (max - 6);
    for (size_t i = 0; i < n; i++) t[i] = i < 6 ? stem[i] : (tkv_token)(3 + rand_r(seed) % 40);
    return n;
}

/* (a) reuse gives the logits a fresh context computes */
static void test_sync_reuse_equals_fresh(void **state) {
    (void)state;
    tkv_context *ctx = new_ctx(512, 8, NULL);
    unsigned seed = 1;
    size_t reused_total = 0;
    for (int iter = 0; iter < 40; iter++) {
        tkv_token t[48];
        size_t n = random_list(t, 48, &seed), reused;
        tkv_seq s = iter % 8;
        assert_int_equal(tkv_seq_sync(ctx, s, 0, t, n, &reused), TKV_OK);
        reused_total += reused;
        float *got = malloc(tu_n_vocab * sizeof *got);
        memcpy(got, tkv_get_logits_last(ctx), tu_n_vocab * sizeof *got);
        check(ctx);
        tkv_token back[48];
        size_t nb;
        assert_int_equal(tkv_seq_tokens(ctx, s, back, 48, &nb), TKV_OK);
        assert_int_equal(nb, n);
        assert_memory_equal(back, t, n * sizeof *t);

        tkv_context *fresh = new_ctx(64, 1, NULL);
        assert_int_equal(tkv_seq_sync(fresh, 0, 0, t, n, &reused), TKV_OK);
        assert_int_equal(reused, 0);
        assert_memory_equal(got, tkv_get_logits_last(fresh), tu_n_vocab * sizeof *got);
        tkv_context_free(fresh);
        free(got);
    }
    assert_true(reused_total > 200); /* the stems were shared */
    tkv_stats st;
    tkv_cache_stats_ex(ctx, &st, sizeof st);
    /* what knows the tokens costs under 1% of the K/V of a cell of the
       bench-1b shape (22 layers x 4 KV heads x 64 x 2 (K, V) x 2 bytes) */
    const double kv_per_cell_1b = 22.0 * 4 * 64 * 2 * 2;
    assert_true((double)st.meta_bytes / (double)st.cells_total < 0.01 * kv_per_cell_1b);
    assert_int_equal(st.tokens_reused, reused_total);
    assert_int_equal(st.lookups, 40);
    tkv_context_free(ctx);
}

/* Namespaces never share; forks share cells; a whole cached list is
   decoded again for its last token only. */
static void test_namespaces_and_forks(void **state) {
    (void)state;
    tkv_context *ctx = new_ctx(128, 4, NULL);
    tkv_token t[20];
    for (int i = 0; i < 20; i++) t[i] = (tkv_token)(5 + i);
    size_t reused, len;
    assert_int_equal(tkv_seq_sync(ctx, 0, 7, t, 20, &reused), TKV_OK);
    assert_int_equal(reused, 0);
    assert_int_equal(tkv_seq_sync(ctx, 1, 8, t, 20, &reused), TKV_OK);
    assert_int_equal(reused, 0); /* another tenant */
    assert_int_equal(tkv_cache_match(ctx, 7, t, 20, &len), TKV_OK), assert_int_equal(len, 20);
    assert_int_equal(tkv_cache_match(ctx, 9, t, 20, &len), TKV_OK), assert_int_equal(len, 0);
    tkv_stats st;
    tkv_cache_stats_ex(ctx, &st, sizeof st);
    uint64_t used = st.cells_used;
    assert_int_equal(tkv_seq_sync(ctx, 2, 7, t, 20, &reused), TKV_OK);
    assert_int_equal(reused, 19); /* all but the last token, whose logits are recomputed */
    tkv_cache_stats_ex(ctx, &st, sizeof st);
    assert_int_equal(st.cells_used, used); /* ... into the cell already there */
    assert_int_equal(tkv_seq_fork(ctx, 0, 3), TKV_OK);
    tkv_cache_stats_ex(ctx, &st, sizeof st);
    assert_int_equal(st.cells_used, used);
    assert_int_equal(st.cells_shared, 20); /* sequences 0, 2 and 3 share them */
    assert_int_equal(tkv_seq_len(ctx, 3), 20);
    check(ctx);
    tkv_context_free(ctx);
}

/* Eviction: least recently used unreferenced prefixes go; pinned ones stay. */
static void test_eviction_and_pins(void **state) {
    (void)state;
    tkv_context *ctx = new_ctx(64, 2, NULL);
    tkv_token a[30], b[30], c[30];
    for (int i = 0; i < 30; i++) a[i] = 3 + i, b[i] = 100 + i, c[i] = 200 + i;
    size_t reused, len;
    assert_int_equal(tkv_seq_sync(ctx, 0, 0, a, 30, &reused), TKV_OK);
    size_t pinned;
    tkv_pin pin_a;
    assert_int_equal(tkv_cache_pin(ctx, 0, a, 30, &pinned, &pin_a), TKV_OK);
    assert_int_equal(pinned, 30);
    assert_int_equal(tkv_seq_clear(ctx, 0), TKV_OK);
    assert_int_equal(tkv_seq_sync(ctx, 0, 0, b, 30, &reused), TKV_OK);
    assert_int_equal(tkv_seq_clear(ctx, 0), TKV_OK);
    /* 60 cells used: c needs 30, 4 free; a is pinned, so b goes */
    assert_int_equal(tkv_seq_sync(ctx, 1, 0, c, 30, &reused), TKV_OK);
    check(ctx);
    assert_int_equal(tkv_cache_match(ctx, 0, a, 30, &len), TKV_OK), assert_int_equal(len, 30);
    /* token-granular: of b, the 26 tokens needed went, from its end */
    assert_int_equal(tkv_cache_match(ctx, 0, b, 30, &len), TKV_OK), assert_int_equal(len, 4);
    tkv_stats st;
    tkv_cache_stats_ex(ctx, &st, sizeof st);
    assert_true(st.evictions >= 26);
    assert_int_equal(st.cells_pinned, 30);
    /* nothing evictable left but a (pinned) and c (held): full */
    tkv_token d[40];
    for (int i = 0; i < 40; i++) d[i] = 300 + i;
    assert_int_equal(tkv_seq_sync(ctx, 0, 0, d, 40, &reused), TKV_ERR_FULL);
    check(ctx);
    assert_int_equal(tkv_cache_unpin(ctx, pin_a), TKV_OK);
    assert_int_equal(tkv_seq_sync(ctx, 0, 0, d, 30, &reused), TKV_OK);
    check(ctx);
    tkv_context_free(ctx);
}

/* A pin holds exactly the prefix cached when it was taken: decodes that extend the list later are not pinned,
   and each pin is a handle: releasing one never releases another (cells once stayed pinned forever, and one
   caller's unpin once took another's pin). */
static void test_pins_exact(void **state) {
    (void)state;
    tkv_context *ctx = new_ctx(64, 2, NULL);
    tkv_token t[35];
    for (int i = 0; i < 35; i++) t[i] = 3 + i;
    size_t reused, pinned;
    tkv_stats st;
    assert_int_equal(tkv_seq_sync(ctx, 0, 0, t, 20, &reused), TKV_OK);
    tkv_pin p1, p2, p3;
    assert_int_equal(tkv_cache_pin(ctx, 0, t, 20, &pinned, &p1), TKV_OK);
    assert_int_equal(pinned, 20);
    assert_true(p1 != 0);
    assert_int_equal(tkv_seq_sync(ctx, 0, 0, t, 35, &reused), TKV_OK); /* the same sequence, 15 more */
    assert_int_equal(reused, 20);
    check(ctx);
    tkv_cache_stats_ex(ctx, &st, sizeof st);
    assert_int_equal(st.cells_pinned, 20);
    assert_int_equal(tkv_cache_pin(ctx, 0, t, 20, &pinned, &p2), TKV_OK); /* a second caller's pin */
    assert_true(p2 != 0 && p2 != p1);
    assert_int_equal(tkv_cache_unpin(ctx, p1), TKV_OK); /* the first lets go: the second's stays */
    tkv_cache_stats_ex(ctx, &st, sizeof st);
    assert_int_equal(st.cells_pinned, 20);
    assert_int_equal(tkv_cache_unpin(ctx, p1), TKV_ERR_INVALID); /* released already: refused, nothing changes */
    tkv_cache_stats_ex(ctx, &st, sizeof st);
    assert_int_equal(st.cells_pinned, 20);
    assert_int_equal(tkv_cache_unpin(ctx, p2), TKV_OK);
    tkv_cache_stats_ex(ctx, &st, sizeof st);
    assert_int_equal(st.cells_pinned, 0);
    assert_int_equal(tkv_cache_unpin(ctx, 0), TKV_OK); /* no pin: nothing to do */
    check(ctx);
    /* released, the 15 unpinned tokens go first when room is needed; the pinned 20 never */
    assert_int_equal(tkv_cache_pin(ctx, 0, t, 20, &pinned, &p3), TKV_OK);
    assert_int_equal(tkv_seq_clear(ctx, 0), TKV_OK);
    tkv_token u[40];
    for (int i = 0; i < 40; i++) u[i] = 200 + i;
    assert_int_equal(tkv_seq_sync(ctx, 1, 0, u, 40, &reused), TKV_OK); /* 35 used + 40: 11 of t's tail go */
    check(ctx);
    size_t len;
    assert_int_equal(tkv_cache_match(ctx, 0, t, 35, &len), TKV_OK);
    assert_int_equal(len, 24);
    /* more: the rest of t's unpinned tail (older), then u's end; never the pinned 20 */
    assert_int_equal(tkv_seq_clear(ctx, 1), TKV_OK);
    tkv_token v[30];
    for (int i = 0; i < 30; i++) v[i] = 300 + i;
    assert_int_equal(tkv_seq_sync(ctx, 0, 0, v, 20, &reused), TKV_OK);
    assert_int_equal(tkv_cache_match(ctx, 0, t, 35, &len), TKV_OK);
    assert_int_equal(len, 20);
    assert_int_equal(tkv_cache_match(ctx, 0, u, 40, &len), TKV_OK);
    assert_int_equal(len, 24);
    check(ctx);
    tkv_context_free(ctx);
}

/* Least recently used first, also across a split: a node cut where a newer list leaves it keeps its old
   tail's last use (the tail once took the splitter's time, and an older prefix outlived a newer one). */
static void test_lru_across_split(void **state) {
    (void)state;
    tkv_context *ctx = new_ctx(64, 2, NULL);
    tkv_token px[30], q[20], py[20], r[10];
    for (int i = 0; i < 30; i++) px[i] = 3 + i;                       /* P = px[0..10), X = px[10..30) */
    for (int i = 0; i < 20; i++) q[i] = 100 + i, py[i] = i < 10 ? px[i] : 200 + i; /* py = P then Y */
    for (int i = 0; i < 10; i++) r[i] = 300 + i;
    size_t reused, len;
    assert_int_equal(tkv_seq_sync(ctx, 0, 0, px, 30, &reused), TKV_OK); /* 1: P X */
    assert_int_equal(tkv_seq_clear(ctx, 0), TKV_OK);
    assert_int_equal(tkv_seq_sync(ctx, 0, 0, q, 20, &reused), TKV_OK);  /* 2: Q */
    assert_int_equal(tkv_seq_clear(ctx, 0), TKV_OK);
    assert_int_equal(tkv_seq_sync(ctx, 0, 0, py, 20, &reused), TKV_OK); /* 3: P Y, cutting P X after P */
    assert_int_equal(reused, 10);
    assert_int_equal(tkv_seq_clear(ctx, 0), TKV_OK);
    check(ctx);
    /* 60 of 64 cells used; R needs 10, 6 more than are free: they come from X, used at 1, not from Q, used at
       2, and only 6 of X's 20 (token-granular) */
    assert_int_equal(tkv_seq_sync(ctx, 1, 0, r, 10, &reused), TKV_OK);
    check(ctx);
    assert_int_equal(tkv_cache_match(ctx, 0, q, 20, &len), TKV_OK), assert_int_equal(len, 20);
    assert_int_equal(tkv_cache_match(ctx, 0, px, 30, &len), TKV_OK), assert_int_equal(len, 24);
    assert_int_equal(tkv_cache_match(ctx, 0, py, 20, &len), TKV_OK), assert_int_equal(len, 20);
    tkv_context_free(ctx);
}

/* A decode that must evict and then fails (abort at each layer, or an
   allocation failure) leaves cache, index and sequences as they were. */
static void test_failure_under_pressure(void **state) {
    (void)state;
    abort_ctl a = {.countdown = -1};
    for (int fail_at = 0; fail_at < 8; fail_at++) {
        tkv_context *ctx = new_ctx(48, 2, &a);
        tkv_token x[40], y[24];
        for (int i = 0; i < 40; i++) x[i] = 3 + i;
        for (int i = 0; i < 24; i++) y[i] = 60 + i;
        size_t reused;
        assert_int_equal(tkv_seq_sync(ctx, 0, 0, x, 40, &reused), TKV_OK);
        assert_int_equal(tkv_seq_truncate(ctx, 0, 10), TKV_OK); /* 30 cached, evictable */
        tkv_stats before, after;
        tkv_cache_stats_ex(ctx, &before, sizeof before);
        /* y needs 24 cells: 8 free, so 16 must come from x's tail */
        tkv_pos pos[24];
        tkv_seq seq[24];
        for (int i = 0; i < 24; i++) pos[i] = i, seq[i] = 1;
        tkv_batch b = {24, y, pos, seq, NULL};
        tkv_status st;
        if (fail_at < 5) {
            a.countdown = fail_at;
            st = tkv_decode(ctx, &b);
            a.countdown = -1;
            assert_int_equal(st, TKV_ERR_ABORTED);
        } else {
            tkv__alloc_fail_after(fail_at - 5);
            st = tkv_decode(ctx, &b);
            tkv__alloc_fail_after(-1);
            if (st == TKV_OK) {
                tkv_context_free(ctx);
                break;
            }
            assert_int_equal(st, TKV_ERR_NOMEM);
        }
        check(ctx);
        tkv_cache_stats_ex(ctx, &after, sizeof after);
        before.meta_bytes = after.meta_bytes = 0; /* capacity a failed decode reserved is not content */
        assert_memory_equal(&before, &after, sizeof before);
        size_t len;
        assert_int_equal(tkv_cache_match(ctx, 0, x, 40, &len), TKV_OK);
        assert_int_equal(len, 40); /* nothing was evicted */
        assert_int_equal(tkv_seq_len(ctx, 1), 0);
        /* and then it works, evicting */
        assert_int_equal(tkv_decode(ctx, &b), TKV_OK);
        check(ctx);
        tkv_context_free(ctx);
    }
}

typedef struct walk_rec {
    tkv_cache_node nodes[512];
    size_t n;
} walk_rec;

static void record_node(const tkv_cache_node *nd, void *user) {
    walk_rec *w = user;
    assert_true(w->n < 512);
    w->nodes[w->n++] = *nd;
}

static const tkv_cache_node *find_node(const walk_rec *w, uint32_t id) {
    for (size_t i = 0; i < w->n; i++)
        if (w->nodes[i].id == id) return &w->nodes[i];
    return NULL;
}

/* The tokens of the path ending at node id, into t (room for MAXT); returns its length. */
static size_t node_path(const tkv_context *ctx, const walk_rec *w, uint32_t id, tkv_token *t, size_t max) {
    uint32_t chain[64];
    size_t depth = 0, len = 0;
    for (const tkv_cache_node *nd = find_node(w, id); nd && nd->n_tokens; nd = find_node(w, nd->parent)) {
        assert_true(depth < 64);
        chain[depth++] = nd->id;
    }
    while (depth-- > 0) {
        size_t n;
        assert_int_equal(tkv_cache_node_tokens(ctx, chain[depth], t + len, max - len, &n), TKV_OK);
        len += n;
    }
    return len;
}

/* The evictable leaves (no sequence, no pin, no children) of a walk. */
static bool is_evictable_leaf(const walk_rec *w, const tkv_cache_node *nd) {
    if (!nd->n_tokens || nd->refs || nd->pins) return false;
    for (size_t i = 0; i < w->n; i++)
        if (w->nodes[i].parent == nd->id) return false;
    return true;
}

/* (b) random operations against a model of each sequence's tokens */
enum { NS = 6, MAXT = 48 };

typedef struct model_seq {
    uint64_t ns;
    size_t n;
    tkv_token t[MAXT];
} model_seq;

/* The cells the pins hold, in the model: one per distinct (namespace, prefix) of every pinned list. */
static size_t pinned_cells(const model_seq *pins, int n_pins) {
    size_t n = 0;
    for (int a = 0; a < n_pins; a++)
        for (size_t k = 1; k <= pins[a].n; k++) { /* count (ns, t[0..k)) once: at its first pin */
            bool seen = false;
            for (int b = 0; b < a && !seen; b++)
                seen = pins[b].ns == pins[a].ns && pins[b].n >= k && !memcmp(pins[b].t, pins[a].t, k * sizeof(tkv_token));
            n += !seen;
        }
    return n;
}

static void test_random_operations(void **state) {
    (void)state;
    abort_ctl a = {.countdown = -1, .seed = 5};
    n_threads = 1;
    tkv_context *ctx = new_ctx(160, NS, &a);
    n_threads = 2;
    a.ctx = ctx;
    int n_lru_checks = 0, n_partial = 0;
    model_seq m[NS] = {{0}};
    enum { MAX_PINS = 6 };
    model_seq pins[MAX_PINS]; /* the pinned prefixes: what each pin held when it was taken */
    tkv_pin pin_ids[MAX_PINS]; /* and their handles */
    int n_pins = 0, n_pin_ops = 0;
    unsigned seed = 99;
    int n_fail = 0, n_evict_ops = 0;
    for (int iter = 0; iter < 10000; iter++) {
        int op = rand_r(&seed) % 12;
        tkv_seq s = rand_r(&seed) % NS;
        tkv_status st = TKV_OK;
        if (op < 3) { /* sync to a related list */
            tkv_token t[MAXT];
            size_t n = random_list(t, MAXT, &seed);
            uint64_t ns = rand_r(&seed) % 4 == 0 ? 1 : 0;
            if (rand_r(&seed) % 8 == 0) a.countdown = rand_r(&seed) % 5;
            if (rand_r(&seed) % 16 == 0) tkv__alloc_fail_after(rand_r(&seed) % 3);
            a.reenter = rand_r(&seed) % 6 == 0;
            size_t reused;
            st = tkv_seq_sync(ctx, s, ns, t, n, &reused);
            tkv__alloc_fail_after(-1);
            a.countdown = -1;
            a.reenter = false;
            if (st == TKV_OK) {
                m[s].ns = ns, m[s].n = n;
                memcpy(m[s].t, t, n * sizeof *t);
            } else {
                assert_true(st == TKV_ERR_ABORTED || st == TKV_ERR_NOMEM || st == TKV_ERR_FULL);
                n_fail++;
                /* the sequence holds a prefix of t */
                size_t len = (size_t)tkv_seq_len(ctx, s);
                assert_true(len <= n);
                m[s].ns = ns, m[s].n = len;
                memcpy(m[s].t, t, len * sizeof *t);
            }
        } else if (op < 5 && m[s].n + 3 <= MAXT) { /* append with a decode */
            tkv_token t[3];
            tkv_pos p[3];
            tkv_seq q[3] = {s, s, s};
            for (int i = 0; i < 3; i++) t[i] = 3 + rand_r(&seed) % 40, p[i] = (tkv_pos)(m[s].n + (size_t)i);
            tkv_batch b = {3, t, p, q, NULL};
            /* eviction: exactly the cells missing, taken from the tail of the least recently used evictable
               leaf; every other evictable leaf stays whole */
            tkv_stats before, after;
            tkv_cache_stats_ex(ctx, &before, sizeof before);
            const uint64_t free_before = before.cells_total - before.cells_used;
            /* tokens the cache holds right after the sequence's end need no cell: the decode keeps those */
            tkv_token whole[MAXT];
            size_t cached;
            memcpy(whole, m[s].t, m[s].n * sizeof *whole);
            memcpy(whole + m[s].n, t, sizeof t);
            assert_int_equal(tkv_cache_match(ctx, m[s].ns, whole, m[s].n + 3, &cached), TKV_OK);
            const uint64_t fresh = 3 - (cached > m[s].n ? cached - m[s].n : 0);
            const uint64_t need = free_before < fresh ? fresh - free_before : 0;
            walk_rec w = {.n = 0};
            model_seq leaves[64];
            int n_leaves = 0;
            const tkv_cache_node *lru = NULL;
            bool lru_unique = true;
            if (need && fresh == 3) { /* (kept cells are held while the decode makes room: not the LRU rule) */
                assert_int_equal(tkv_cache_walk(ctx, record_node, &w), TKV_OK);
                for (size_t i = 0; i < w.n; i++) {
                    const tkv_cache_node *nd = &w.nodes[i];
                    if (!is_evictable_leaf(&w, nd)) continue;
                    if (lru && nd->last_use == lru->last_use) lru_unique = false;
                    if (!lru || nd->last_use < lru->last_use) lru = nd, lru_unique = true;
                }
                /* the prefixes the other leaves end, spelled now (the decode may split their ancestors) */
                for (size_t i = 0; i < w.n && n_leaves < 64; i++)
                    if (&w.nodes[i] != lru && is_evictable_leaf(&w, &w.nodes[i])) {
                        leaves[n_leaves].ns = w.nodes[i].ns;
                        leaves[n_leaves].n = node_path(ctx, &w, w.nodes[i].id, leaves[n_leaves].t, MAXT);
                        n_leaves++;
                    }
            }
            a.reenter = rand_r(&seed) % 6 == 0;
            st = tkv_decode(ctx, &b);
            a.reenter = false;
            if (st == TKV_OK) memcpy(m[s].t + m[s].n, t, sizeof t), m[s].n += 3;
            else assert_int_equal(st, TKV_ERR_FULL);
            tkv_cache_stats_ex(ctx, &after, sizeof after);
            assert_int_equal(after.evictions - before.evictions, st == TKV_OK ? need : 0);
            if (st == TKV_OK && lru && lru_unique && need <= lru->n_tokens) {
                for (int l = 0; l < n_leaves; l++) {
                    size_t got;
                    assert_int_equal(tkv_cache_match(ctx, leaves[l].ns, leaves[l].t, leaves[l].n, &got), TKV_OK);
                    if (got != leaves[l].n)
                        fail_msg("iteration %d: a leaf used more recently than the LRU one lost tokens (%zu of %zu left)",
                                 iter, got, leaves[l].n);
                }
                n_lru_checks++;
                n_partial += need < lru->n_tokens; /* token-granular: the leaf lost only part of its run */
            }
        } else if (op == 5) {
            size_t n = m[s].n ? (size_t)rand_r(&seed) % (m[s].n + 1) : 0;
            assert_int_equal(tkv_seq_truncate(ctx, s, (tkv_pos)n), TKV_OK);
            m[s].n = n;
            if (n == 0) m[s].ns = 0; /* empty: back in the default namespace */
        } else if (op == 6) {
            tkv_seq d = rand_r(&seed) % NS;
            assert_int_equal(tkv_seq_fork(ctx, s, d), TKV_OK);
            m[d] = m[s];
        } else if (op == 7) {
            assert_int_equal(tkv_seq_clear(ctx, s), TKV_OK);
            m[s].n = 0, m[s].ns = 0;
        } else if (op == 8 && m[s].n) {
            size_t len;
            tkv_pin pin;
            assert_int_equal(tkv_cache_pin(ctx, m[s].ns, m[s].t, m[s].n, &len, &pin), TKV_OK);
            assert_int_equal(len, m[s].n);
            assert_int_equal(tkv_cache_unpin(ctx, pin), TKV_OK);
        } else if (op == 9 && iter % 50 == 0) {
            assert_int_equal(tkv_cache_clear(ctx), TKV_OK);
            n_evict_ops++;
        } else if (op == 10 && m[s].n && n_pins < MAX_PINS && rand_r(&seed) % 4 == 0) {
            /* pin what s holds (all of it is cached); it stays pinned, exactly that, until unpinned */
            size_t len;
            assert_int_equal(tkv_cache_pin(ctx, m[s].ns, m[s].t, m[s].n, &len, &pin_ids[n_pins]), TKV_OK);
            assert_int_equal(len, m[s].n);
            pins[n_pins++] = m[s];
            n_pin_ops++;
        } else if (op == 11 && n_pins) {
            /* release one by its handle: exactly that pin goes, whatever else pins the same prefix */
            const int k = rand_r(&seed) % n_pins;
            assert_int_equal(tkv_cache_unpin(ctx, pin_ids[k]), TKV_OK);
            --n_pins;
            pins[k] = pins[n_pins], pin_ids[k] = pin_ids[n_pins];
        }
        check(ctx);
        /* pins hold exactly their prefixes: all cached, and no more cells pinned than they cover */
        {
            tkv_stats ps;
            tkv_cache_stats_ex(ctx, &ps, sizeof ps);
            for (int p = 0; p < n_pins; p++) {
                size_t len;
                assert_int_equal(tkv_cache_match(ctx, pins[p].ns, pins[p].t, pins[p].n, &len), TKV_OK);
                if (len != pins[p].n) fail_msg("iteration %d: a pinned prefix of %zu tokens keeps %zu", iter, pins[p].n, len);
            }
            if (ps.cells_pinned != pinned_cells(pins, n_pins))
                fail_msg("iteration %d: %llu cells pinned, the pins cover %zu", iter,
                         (unsigned long long)ps.cells_pinned, pinned_cells(pins, n_pins));
        }
        /* the cache's own answers agree with the model */
        for (int q = 0; q < NS; q++) {
            tkv_token back[MAXT];
            size_t nb, len;
            assert_int_equal(tkv_seq_tokens(ctx, q, back, MAXT, &nb), TKV_OK);
            assert_int_equal(nb, m[q].n);
            assert_memory_equal(back, m[q].t, nb * sizeof *back);
            assert_int_equal(tkv_cache_match(ctx, m[q].ns, m[q].t, m[q].n, &len), TKV_OK);
            assert_int_equal(len, m[q].n);
        }
    }
    tkv_stats st;
    tkv_cache_stats_ex(ctx, &st, sizeof st);
    assert_true(st.evictions > 100); /* 160 cells: the run lived under pressure */
    assert_true(n_fail > 50);
    assert_true(n_evict_ops > 0);
    assert_true(n_pin_ops > 20);
    assert_true(a.n_busy > 100);      /* the callbacks called back, and were refused */
    assert_true(n_lru_checks > 50);   /* evictions under the LRU check */
    assert_true(n_partial > 20);
    tkv_context_free(ctx);
}

/* Greedy continuation of t[0..n) by a fresh batch-invariant context that
   decodes the whole prompt in one pass: the reference for the next test.
   logits: (steps, tu_n_vocab) of each step's sampled position. */
static void reference_run(const tkv_token *t, size_t n, int steps, float *logits) {
    tkv_context_params p = tkv_context_default_params();
    p.n_cells = 256, p.n_seq_max = 1, p.n_threads = n_threads, p.batch_invariant = true;
    tkv_context *ctx = NULL;
    assert_int_equal(tkv_context_create(tu_model, &p, &ctx), TKV_OK);
    assert_int_equal(tkv_seq_sync(ctx, 0, 0, t, n, NULL), TKV_OK);
    for (int k = 0; k < steps; k++) {
        const float *l = tkv_get_logits_last(ctx);
        memcpy(logits + (size_t)k * tu_n_vocab, l, tu_n_vocab * sizeof *l);
        size_t best = 0;
        for (size_t v = 1; v < tu_n_vocab; v++) best = l[v] > l[best] ? v : best;
        tkv_token tok = (tkv_token)best;
        tkv_pos pos = (tkv_pos)(n + (size_t)k);
        tkv_seq sq = 0;
        tkv_batch b = {1, &tok, &pos, &sq, NULL};
        assert_int_equal(tkv_decode(ctx, &b), TKV_OK);
    }
    tkv_context_free(ctx);
}

/* With batch_invariant, what a server does — attach the cached prefix, then
   decode prompt chunks of several sequences mixed with one generated token
   of others in each batch — gives, bit for bit, the logits of each prompt
   decoded alone in one pass. */
static void test_batch_invariant_attach(void **state) {
    (void)state;
    enum { NSEQ = 6, MAXP = 90, STEPS = 6, CHUNK = 7 };
    tkv_token prompt[NSEQ][MAXP + STEPS];
    size_t plen[NSEQ];
    unsigned seed = 7;
    float *want = malloc((size_t)NSEQ * STEPS * tu_n_vocab * sizeof *want);
    for (int q = 0; q < NSEQ; q++) {
        plen[q] = random_list(prompt[q], MAXP, &seed);
        reference_run(prompt[q], plen[q], STEPS, want + (size_t)q * STEPS * tu_n_vocab);
    }

    tkv_context_params p = tkv_context_default_params();
    p.n_cells = 1024, p.n_seq_max = NSEQ, p.n_threads = n_threads, p.batch_invariant = true;
    tkv_context *ctx = NULL;
    assert_int_equal(tkv_context_create(tu_model, &p, &ctx), TKV_OK);
    size_t done[NSEQ] = {0}; /* prompt tokens held */
    int gen[NSEQ] = {0};     /* tokens generated */
    size_t reused_total = 0;
    /* sequences join one step apart, so prompts and generation overlap */
    for (int step = 0;; step++) {
        tkv_token tok[NSEQ * CHUNK];
        tkv_pos pos[NSEQ * CHUNK];
        tkv_seq sq[NSEQ * CHUNK];
        bool want_logits[NSEQ * CHUNK];
        int owner_last[NSEQ];
        size_t n = 0;
        for (int q = 0; q < NSEQ && q <= step; q++) {
            owner_last[q] = -1;
            if (gen[q] == STEPS) continue;
            if (q == step) { /* joins: attach whatever is cached */
                size_t r;
                assert_int_equal(tkv_seq_attach(ctx, q, 0, prompt[q], plen[q], &r), TKV_OK);
                assert_true(r < plen[q]);
                assert_int_equal(tkv_seq_len(ctx, q), (tkv_pos)r);
                done[q] = r;
                reused_total += r;
            }
            size_t len = (size_t)tkv_seq_len(ctx, q);
            size_t take = done[q] < plen[q] ? (plen[q] - done[q] < CHUNK ? plen[q] - done[q] : CHUNK) : 1;
            for (size_t i = 0; i < take; i++) {
                tok[n] = prompt[q][len + i], pos[n] = (tkv_pos)(len + i), sq[n] = q;
                want_logits[n] = i + 1 == take && len + take >= plen[q];
                if (want_logits[n]) owner_last[q] = (int)n;
                n++;
            }
            if (done[q] < plen[q]) done[q] += take;
        }
        if (n == 0) break;
        tkv_batch b = {n, tok, pos, sq, want_logits};
        assert_int_equal(tkv_decode(ctx, &b), TKV_OK);
        for (int q = 0; q < NSEQ && q <= step; q++) {
            if (owner_last[q] < 0) continue;
            const float *l = tkv_get_logits(ctx, (size_t)owner_last[q]);
            assert_non_null(l);
            assert_memory_equal(l, want + ((size_t)q * STEPS + (size_t)gen[q]) * tu_n_vocab, tu_n_vocab * sizeof *l);
            size_t best = 0;
            for (size_t v = 1; v < tu_n_vocab; v++) best = l[v] > l[best] ? v : best;
            prompt[q][plen[q] + (size_t)gen[q]] = (tkv_token)best; /* the next token to decode */
            gen[q]++;
        }
        check(ctx);
    }
    assert_true(reused_total > 0); /* later prompts reused the stems of earlier ones */
    tkv_context_free(ctx);
    free(want);
}

/* With tkv_context_default_params(), reuse never changes an answer: 15 requests, conversations that extend
   earlier requests and their replies, and fresh prompts sharing stems, give in one long-lived context the
   greedy ids a fresh context gives each of them alone (float, F16 and Q8_0 weights). */
static void test_default_reuse_same_answer(void **state) {
    (void)state;
    static const char *const models[] = {"models/stories260K.gguf", "models/parity/parity-Q8_0.gguf",
                                         "models/parity/parity-F16.gguf", "models/parity/parity-Q4_0.gguf"};
    enum { N_REQ = 15, STEPS = 8, MAXN = 200 };
    for (size_t mi = 0; mi < sizeof models / sizeof *models; mi++) {
        tkv_model *m = NULL;
        if (tkv_model_load(tu_shared(models[mi]), NULL, &m) != TKV_OK) fail_msg("%s", tkv_last_error(NULL));
        const size_t n_vocab = tkv_vocab_size(m);
        tkv_context_params p = tkv_context_default_params();
        p.n_cells = 2048, p.n_seq_max = 3, p.n_threads = 2;
        tkv_context *shared = NULL;
        assert_int_equal(tkv_context_create(m, &p, &shared), TKV_OK);
        unsigned seed = 21 + (unsigned)mi;
        tkv_token conv[3][MAXN]; /* each sequence's conversation so far (prompt + reply) */
        size_t conv_n[3] = {0};
        size_t reused_total = 0;
        for (int k = 0; k < N_REQ; k++) {
            const tkv_seq s = k % 3;
            tkv_token t[MAXN + STEPS];
            size_t n;
            if (conv_n[s] && conv_n[s] + 12 + STEPS <= MAXN && rand_r(&seed) % 3) { /* the next turn */
                n = conv_n[s];
                memcpy(t, conv[s], n * sizeof *t);
                for (int i = 0; i < 4 + rand_r(&seed) % 8; i++) t[n++] = (tkv_token)(3 + rand_r(&seed) % 200);
            } else {
                n = random_list(t, 60, &seed);
            }
            tkv_token fresh_t[MAXN + STEPS];
            memcpy(fresh_t, t, n * sizeof *t);
            size_t reused;
            tu_greedy(shared, s, t, n, STEPS, n_vocab, &reused);
            reused_total += reused;
            tkv_context *fresh = NULL;
            p.n_seq_max = 1;
            assert_int_equal(tkv_context_create(m, &p, &fresh), TKV_OK);
            p.n_seq_max = 3;
            tu_greedy(fresh, 0, fresh_t, n, STEPS, n_vocab, NULL);
            tkv_context_free(fresh);
            if (memcmp(t + n, fresh_t + n, STEPS * sizeof *t) != 0)
                fail_msg("%s request %d: reusing %zu of %zu prompt tokens changed the greedy reply", models[mi], k,
                         reused, n);
            memcpy(conv[s], t, (n + STEPS) * sizeof *t);
            conv_n[s] = n + STEPS;
            check(shared);
        }
        assert_true(reused_total > 100); /* the requests did reuse */
        tkv_context_free(shared);
        tkv_model_free(m);
    }
}

/* The same request twice: the second walks the cached reply token by token (each step cuts the run at the
   sequence's end) and must not leave the reply cut into one node per token; it takes no new cells. */
static void test_same_request_twice(void **state) {
    (void)state;
    tkv_context *ctx = new_ctx(512, 2, NULL);
    unsigned seed = 4;
    tkv_token t[60 + 24], again[60 + 24];
    const size_t n = random_list(t, 60, &seed);
    memcpy(again, t, n * sizeof *t);
    tu_greedy(ctx, 0, t, n, 24, tu_n_vocab, NULL);
    assert_int_equal(tkv_seq_clear(ctx, 0), TKV_OK);
    tkv_stats first, second;
    tkv_cache_stats_ex(ctx, &first, sizeof first);
    for (int round = 0; round < 2; round++) {
        size_t reused;
        tu_greedy(ctx, round, again, n, 24, tu_n_vocab, &reused);
        assert_int_equal(reused, n - 1);
        assert_memory_equal(again + n, t + n, 24 * sizeof *t);
        check(ctx);
    }
    tkv_cache_stats_ex(ctx, &second, sizeof second);
    assert_int_equal(second.cells_used, first.cells_used); /* every token was cached already */
    /* sequences 0 and 1 end at the reply's end; at most a boundary where the prompt ends */
    if (second.nodes > first.nodes + 1)
        fail_msg("the cached reply was cut into %llu nodes (%llu before)", (unsigned long long)second.nodes,
                 (unsigned long long)first.nodes);
    tkv_context_free(ctx);
}

/* tkv_cache_walk and tkv_cache_node_tokens describe the tree the cache
   holds: parents before children, depths that add up, runs whose tokens
   spell every sequence, and run lengths that account for every used cell. */
static void test_cache_walk(void **state) {
    (void)state;
    tkv_context *ctx = new_ctx(512, 8, NULL);
    unsigned seed = 3;
    tkv_token lists[8][48];
    size_t len[8];
    for (int q = 0; q < 8; q++) {
        len[q] = random_list(lists[q], 48, &seed);
        assert_int_equal(tkv_seq_sync(ctx, q, q == 7 ? 42 : 0, lists[q], len[q], NULL), TKV_OK);
    }
    assert_int_equal(tkv_seq_clear(ctx, 3), TKV_OK); /* an unreferenced branch */
    walk_rec w = {.n = 0};
    assert_int_equal(tkv_cache_walk(ctx, record_node, &w), TKV_OK);
    tkv_stats st;
    tkv_cache_stats_ex(ctx, &st, sizeof st);
    uint64_t cells = 0, roots = 0;
    for (size_t i = 0; i < w.n; i++) {
        const tkv_cache_node *nd = &w.nodes[i];
        if (nd->parent == TKV_CACHE_NODE_NONE) {
            roots++;
            assert_int_equal(nd->n_tokens, 0);
            continue;
        }
        const tkv_cache_node *p = find_node(&w, nd->parent);
        assert_non_null(p);
        assert_true(p < nd); /* visited before */
        assert_int_equal(nd->depth, p->depth + p->n_tokens);
        assert_true(nd->ns == p->ns);
        cells += nd->n_tokens;
    }
    assert_int_equal(roots, 2); /* namespaces 0 and 42 */
    assert_int_equal(cells, st.cells_used);
    assert_int_equal(w.n - roots, st.nodes);
    /* every list, read back through the runs from its deepest node */
    for (int q = 0; q < 8; q++) {
        size_t best = SIZE_MAX, got_n = 0;
        tkv_token got[48];
        for (size_t i = 0; i < w.n; i++) {
            const tkv_cache_node *nd = &w.nodes[i];
            if (nd->parent == TKV_CACHE_NODE_NONE || nd->depth + nd->n_tokens != len[q] || nd->ns != (q == 7 ? 42u : 0u))
                continue;
            /* spell the path ending at nd */
            size_t n = 0;
            for (const tkv_cache_node *a = nd; a->parent != TKV_CACHE_NODE_NONE; a = find_node(&w, a->parent)) {
                size_t k;
                assert_int_equal(tkv_cache_node_tokens(ctx, a->id, got + a->depth, 48 - a->depth, &k), TKV_OK);
                assert_int_equal(k, a->n_tokens);
                n += k;
            }
            assert_int_equal(n, len[q]);
            if (!memcmp(got, lists[q], len[q] * sizeof *got)) best = i, got_n = n;
        }
        assert_true(best != SIZE_MAX);
        assert_int_equal(got_n, len[q]);
    }
    size_t k;
    assert_int_equal(tkv_cache_node_tokens(ctx, UINT32_MAX - 1, NULL, 0, &k), TKV_ERR_INVALID);
    tkv_context_free(ctx);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sync_reuse_equals_fresh),   cmocka_unit_test(test_namespaces_and_forks),
        cmocka_unit_test(test_eviction_and_pins),         cmocka_unit_test(test_failure_under_pressure),
        cmocka_unit_test(test_random_operations),         cmocka_unit_test(test_batch_invariant_attach),
        cmocka_unit_test(test_cache_walk),                cmocka_unit_test(test_lru_across_split),
        cmocka_unit_test(test_pins_exact),                cmocka_unit_test(test_default_reuse_same_answer),
        cmocka_unit_test(test_same_request_twice),
    };
    return cmocka_run_group_tests(tests, tu_stories_setup, tu_stories_teardown);
}
