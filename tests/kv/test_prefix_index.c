/*
 * test_prefix_index.c — the radix tree against a brute-force model.
 *
 * The model is a table: for every cell in the tree, the namespace and the
 * whole token prefix it ends. Thousands of random operations (sequences
 * growing from shared prefixes in two namespaces, sequences moving back to
 * earlier prefixes, pins, evictions) run on both; after each one:
 *   - tkv__pindex_check passes;
 *   - a match of any query equals the longest prefix of it in the table,
 *     and every cell it returns is the table's cell for that prefix;
 *   - every sequence's and every pin's prefix is still fully cached;
 *   - evicted cells were unreferenced, and a cell is never in the tree twice.
 */
#include "testutil.h"

#include "kv/prefix_index.h"

#include <stdlib.h>
#include <string.h>

enum { N_SEQ = 6, MAX_LEN = 40, N_CELLS = 4096, VOCAB = 5 };

typedef struct entry {
    bool used;
    uint64_t ns;
    uint32_t len;
    tkv_token tok[MAX_LEN]; /* the prefix this cell ends */
} entry;

static entry table[N_CELLS];
static uint32_t free_cells[N_CELLS], n_free;

typedef struct seq_model {
    uint64_t ns;
    uint32_t len;
    tkv_token tok[MAX_LEN];
} seq_model;

static seq_model seqs[N_SEQ];

static uint32_t take_cell(void) { return free_cells[--n_free]; }

/* Each cell's token: the array the KV cache owns, which the index reads. */
static tkv_token cell_tok[N_CELLS];

/* tkv__pindex_insert as the cache calls it: the new cells' tokens written first. */
static tkv__ppos insert(tkv__pindex *ix, uint64_t ns, tkv__ppos from, const tkv_token *t, uint32_t *cells, uint32_t n,
                        uint32_t *dup, uint32_t *n_dup) {
    for (uint32_t i = 0; i < n; i++) cell_tok[cells[i]] = t[i];
    return tkv__pindex_insert(ix, ns, from, t, cells, n, dup, n_dup);
}

/* Longest prefix of q (namespace ns) that some cell of the table ends. */
static uint32_t model_match(uint64_t ns, const tkv_token *q, uint32_t n, uint32_t *cells) {
    uint32_t best = 0;
    for (uint32_t len = 1; len <= n; len++) {
        bool found = false;
        for (uint32_t c = 0; c < N_CELLS && !found; c++)
            if (table[c].used && table[c].ns == ns && table[c].len == len && !memcmp(table[c].tok, q, len * sizeof *q)) {
                found = true;
                if (cells) cells[len - 1] = c;
            }
        if (!found) break;
        best = len;
    }
    return best;
}

static void check_match(tkv__pindex *ix, uint64_t ns, const tkv_token *q, uint32_t n) {
    tkv__ppos at;
    uint32_t want_cells[MAX_LEN], got_cells[MAX_LEN];
    uint32_t want = model_match(ns, q, n, want_cells);
    size_t got = tkv__pindex_match(ix, ns, q, n, false, &at);
    assert_int_equal(got, want);
    assert_int_equal(tkv__pindex_len(ix, at), want);
    tkv__pindex_path(ix, at, got_cells, NULL);
    assert_memory_equal(got_cells, want_cells, want * sizeof *got_cells);
}

static void check_all(tkv__pindex *ix) {
    if (tkv__pindex_check(ix) != TKV_OK) fail_msg("%s", tkv_last_error(NULL));
    for (int s = 0; s < N_SEQ; s++) {
        /* a sequence's whole prefix is cached, and its end is where it says */
        check_match(ix, seqs[s].ns, seqs[s].tok, seqs[s].len);
        assert_int_equal(tkv__pindex_len(ix, tkv__pindex_seq_end(ix, s)), seqs[s].len);
        assert_int_equal(model_match(seqs[s].ns, seqs[s].tok, seqs[s].len, NULL), seqs[s].len);
    }
    tkv__pindex_stats st;
    tkv__pindex_stats_get(ix, &st);
    uint32_t used = 0;
    for (uint32_t c = 0; c < N_CELLS; c++) used += table[c].used;
    assert_int_equal(st.cells, used);
    assert_int_equal(used + n_free, N_CELLS);
}

static void test_random_operations(void **state) {
    (void)state;
    tkv__pindex *ix;
    assert_int_equal(tkv__pindex_create(N_CELLS, N_SEQ, cell_tok, &ix), TKV_OK);
    memset(table, 0, sizeof table);
    memset(seqs, 0, sizeof seqs);
    for (uint32_t i = 0; i < N_CELLS; i++) free_cells[i] = N_CELLS - 1 - i;
    n_free = N_CELLS;
    srand(12345);
    tkv__ppos pinned[8];
    int n_pinned = 0;
    uint64_t max_cells = 0, max_nodes = 0, evicted = 0, dups = 0;
    uint32_t out[N_CELLS];
    for (int iter = 0; iter < 4000; iter++) {
        int op = rand() % 10;
        int s = rand() % N_SEQ;
        seq_model *m = &seqs[s];
        if (op < 5 && m->len < MAX_LEN) {
            /* grow sequence s by a few tokens (a small vocabulary: many shared prefixes) */
            uint32_t k = 1 + (uint32_t)rand() % 4;
            if (m->len + k > MAX_LEN) k = MAX_LEN - m->len;
            if (n_free < k) continue;
            tkv_token t[4];
            uint32_t cells[4], mine[4], dup[4], n_dup;
            for (uint32_t i = 0; i < k; i++) t[i] = rand() % VOCAB, cells[i] = mine[i] = take_cell();
            tkv__ppos to = insert(ix, m->ns, tkv__pindex_seq_end(ix, s), t, cells, k, dup, &n_dup);
            tkv__pindex_seq_set(ix, s, to);
            for (uint32_t i = 0; i < k; i++) {
                m->tok[m->len] = t[i];
                m->len++;
                if (cells[i] == mine[i]) { /* our cell is in the tree now */
                    assert_false(table[cells[i]].used);
                    table[cells[i]] = (entry){true, m->ns, m->len, {0}};
                    memcpy(table[cells[i]].tok, m->tok, m->len * sizeof *m->tok);
                } else { /* the tree had it: same prefix in the table */
                    assert_true(table[cells[i]].used);
                    assert_int_equal(table[cells[i]].len, m->len);
                    assert_memory_equal(table[cells[i]].tok, m->tok, m->len * sizeof *m->tok);
                }
            }
            for (uint32_t i = 0; i < n_dup; i++) free_cells[n_free++] = dup[i];
            dups += n_dup;
        } else if (op == 5) {
            /* move sequence s back to one of its prefixes (truncate) */
            uint32_t len = m->len ? (uint32_t)rand() % (m->len + 1) : 0;
            tkv__pindex_seq_set(ix, s, tkv__pindex_ancestor(ix, tkv__pindex_seq_end(ix, s), len));
            m->len = len;
        } else if (op == 6) {
            /* another sequence adopts s's path (a fork), maybe in another namespace later */
            int d = rand() % N_SEQ;
            tkv__pindex_seq_set(ix, d, tkv__pindex_seq_end(ix, s));
            seqs[d] = *m;
        } else if (op == 7) {
            /* evict some cells */
            uint32_t want = 1 + (uint32_t)rand() % 20;
            uint32_t got = tkv__pindex_evict(ix, want, out, NULL, NULL);
            evicted += got;
            for (uint32_t i = 0; i < got; i++) {
                assert_true(table[out[i]].used);
                table[out[i]].used = false;
                free_cells[n_free++] = out[i];
            }
        } else if (op == 8) {
            /* pin or unpin */
            if (n_pinned < 8 && rand() % 2) {
                tkv__ppos at = tkv__pindex_seq_end(ix, s);
                if (at.node != TKV__PNONE) assert_int_equal(tkv__pindex_pin(ix, at, +1), TKV_OK), pinned[n_pinned++] = at;
            } else if (n_pinned) {
                assert_int_equal(tkv__pindex_pin(ix, pinned[--n_pinned], -1), TKV_OK);
            }
        } else {
            /* a clear sequence in a new namespace */
            tkv__pindex_seq_set(ix, s, TKV__PPOS_EMPTY);
            m->len = 0;
            m->ns = (uint64_t)(rand() % 2) * 0x9E3779B97F4A7C15ull;
        }
        check_all(ix);
        tkv__pindex_stats now;
        tkv__pindex_stats_get(ix, &now);
        if (now.cells > max_cells) max_cells = now.cells;
        if (now.nodes > max_nodes) max_nodes = now.nodes;
        /* random queries, in both namespaces */
        tkv_token q[MAX_LEN];
        uint32_t qn = (uint32_t)rand() % MAX_LEN;
        for (uint32_t i = 0; i < qn; i++) q[i] = rand() % VOCAB;
        check_match(ix, 0, q, qn);
        check_match(ix, 0x9E3779B97F4A7C15ull, q, qn);
    }
    /* the run exercised what it claims to */
    assert_true(max_cells > 100 && max_nodes > 30 && evicted > 100 && dups > 100);
    /* everything unreferenced and unpinned can go; the rest stays */
    while (n_pinned) tkv__pindex_pin(ix, pinned[--n_pinned], -1);
    for (int s = 0; s < N_SEQ; s += 2) tkv__pindex_seq_set(ix, s, TKV__PPOS_EMPTY), seqs[s].len = 0;
    uint32_t got = tkv__pindex_evict_all(ix, out);
    for (uint32_t i = 0; i < got; i++) table[out[i]].used = false, free_cells[n_free++] = out[i];
    check_all(ix);
    tkv__pindex_stats st;
    tkv__pindex_stats_get(ix, &st);
    assert_int_equal(st.evictable_cells, 0);
    tkv__pindex_free(ix);
}

/* Splits move sequence ends; LRU order decides what goes first. */
static void test_split_and_lru(void **state) {
    (void)state;
    tkv__pindex *ix;
    assert_int_equal(tkv__pindex_create(64, 3, cell_tok, &ix), TKV_OK);
    tkv_token a[6] = {1, 2, 3, 4, 5, 6}, b[6] = {1, 2, 3, 9, 9, 9};
    uint32_t ca[6] = {0, 1, 2, 3, 4, 5}, cb[6] = {10, 11, 12, 13, 14, 15}, dup[6], n_dup;
    tkv__ppos to;
    to = insert(ix, 7, TKV__PPOS_EMPTY, a, ca, 6, dup, &n_dup);
    tkv__pindex_seq_set(ix, 0, to);
    tkv__pindex_seq_set(ix, 1, tkv__pindex_ancestor(ix, to, 5)); /* ends inside the node */
    to = insert(ix, 7, TKV__PPOS_EMPTY, b, cb, 6, dup, &n_dup);
    assert_int_equal(n_dup, 3); /* 1 2 3 were there: the tree's cells are kept */
    assert_int_equal(dup[0], 10);
    assert_int_equal(cb[0], 0), assert_int_equal(cb[3], 13);
    tkv__pindex_seq_set(ix, 2, to);
    assert_int_equal(tkv__pindex_check(ix), TKV_OK);
    assert_int_equal(tkv__pindex_len(ix, tkv__pindex_seq_end(ix, 1)), 5); /* moved into the tail node */
    /* release b, touch a: b's tail (13..15) is the LRU evictable leaf; one cell wanted, one goes, from its
       end (token-granular) */
    tkv__pindex_seq_set(ix, 2, TKV__PPOS_EMPTY);
    tkv__pindex_match(ix, 7, a, 6, true, &to);
    uint32_t out[16];
    assert_int_equal(tkv__pindex_evict(ix, 1, out, NULL, NULL), 1);
    assert_int_equal(out[0], 15);
    assert_int_equal(tkv__pindex_check(ix), TKV_OK);
    assert_int_equal(tkv__pindex_match(ix, 7, b, 6, false, &to), 5); /* 1 2 3 9 9 still cached */
    assert_int_equal(tkv__pindex_evict(ix, 2, out, NULL, NULL), 2);
    assert_int_equal(out[0], 13), assert_int_equal(out[1], 14); /* what was left of the leaf: all of it */
    assert_int_equal(tkv__pindex_evict(ix, 1, out, NULL, NULL), 0); /* a is referenced */
    tkv__pindex_seq_set(ix, 0, TKV__PPOS_EMPTY);
    tkv__pindex_seq_set(ix, 1, TKV__PPOS_EMPTY);
    assert_int_equal(tkv__pindex_evict(ix, 100, out, NULL, NULL), 6);
    assert_int_equal(tkv__pindex_check(ix), TKV_OK);

    /* two unreferenced leaves: the one used longer ago goes first */
    tkv_token x[2] = {5, 1}, y[2] = {6, 1};
    uint32_t cx[2] = {20, 21}, cy[2] = {30, 31};
    insert(ix, 7, TKV__PPOS_EMPTY, x, cx, 2, dup, &n_dup);
    insert(ix, 7, TKV__PPOS_EMPTY, y, cy, 2, dup, &n_dup);
    tkv__pindex_match(ix, 7, x, 2, true, &to); /* x is now the most recent */
    assert_int_equal(tkv__pindex_evict(ix, 2, out, NULL, NULL), 2);
    assert_int_equal(out[0], 30);
    tkv__pindex_free(ix);
}

/* The pools are sized for the worst case: every cell a node of its own
   namespace (a root each), filled, emptied and filled again. */
static void test_worst_case_capacity(void **state) {
    (void)state;
    enum { CELLS = 64 };
    tkv__pindex *ix;
    assert_int_equal(tkv__pindex_create(CELLS, 1, cell_tok, &ix), TKV_OK);
    uint32_t out[CELLS], dup[1], n_dup;
    for (int round = 0; round < 3; round++) {
        for (uint32_t c = 0; c < CELLS; c++) {
            tkv_token t = (tkv_token)round;
            uint32_t cell = c;
            insert(ix, (uint64_t)c * 1000003u + (uint64_t)round, TKV__PPOS_EMPTY, &t, &cell, 1, dup, &n_dup);
            assert_int_equal(n_dup, 0);
        }
        assert_int_equal(tkv__pindex_check(ix), TKV_OK);
        tkv__pindex_stats st;
        tkv__pindex_stats_get(ix, &st);
        assert_int_equal(st.nodes, CELLS);
        assert_int_equal(st.cells, CELLS);
        assert_int_equal(tkv__pindex_evict_all(ix, out), CELLS);
        tkv__pindex_stats_get(ix, &st);
        assert_int_equal(st.nodes, 0);
        assert_int_equal(tkv__pindex_check(ix), TKV_OK);
    }
    tkv__pindex_free(ix);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_split_and_lru),
        cmocka_unit_test(test_random_operations),
        cmocka_unit_test(test_worst_case_capacity),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
