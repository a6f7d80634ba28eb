/*
 * test_cache_truth.c — random operations of every kind against an
 * independent model of the cache, on several models and seeds, checked
 * after every operation (the truth check of issue 30, as a test).
 *
 * The model keeps what a service knows without asking the cache: every
 * sequence's namespace and tokens, every pin (handle and prefix), the
 * files saved. What is cached it rebuilds from the cache's own events
 * alone (STORED adds a run, REMOVED takes one away, CLEARED empties), as a
 * set of (namespace, prefix) entries, one per cell. From these it predicts
 * and checks, after every operation:
 *   - the event set is exactly what the tree holds (walked node by node);
 *   - cells_used, cells_evictable (cached and held by no sequence and no
 *     pin: such cells are always evictable), cells_pinned, cells_shared (on
 *     the paths of two or more sequences), exactly;
 *   - evictions counted one per REMOVED position;
 *   - every sync, decode and load succeeds exactly when its new cells fit
 *     in free plus evictable cells (a token already cached where it goes
 *     needs none), and a failure changes nothing it should not;
 *   - tokens, matches and tkv_cache_check; now and then, the logits after
 *     reuse against a fresh context's, bit for bit.
 * On a hybrid model (qwen35: a recurrent state, reusable only up to a
 * checkpoint, kv/kvstate.h) the event model still knows the attention K/V
 * cached, and the reuse is checked against the cache's own answers and its
 * counters: a sync reuses exactly what tkv_cache_match promised for its
 * list less the last token, never more than the attention common length,
 * and computes exactly the rest (tokens_computed); a decode onto a
 * sequence without its state replays exactly from the deepest checkpoint;
 * the logits after reuse are compared more often. With a window pool
 * (swa_rows, kv/kvwin.c; gemma3 written here with a window of 8 and the
 * smallest pool, 40 rows for 96 cells) the same holds: reuse ends where the
 * window before it still has its rows, and saves are refused by name.
 * Op kinds: sync, decode, fork, extend-a-fork-and-clear (the pattern that
 * once left cells stuck), truncate, clear, pin, unpin, cache clear, save
 * and load, injected aborts and allocation failures.
 *   TKV_TRUTH_OPS    operations per seed (default 1500)
 *   TKV_TRUTH_SEEDS  seeds per model (default 5)
 */
#include "testutil.h"

#include "base/alloc.h"
#include "tools/model_write.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { N_CELLS = 96, NS = 5, MAXT = 48, MAX_PINS = 6, BATCH = 16, MAX_SET = N_CELLS, MAX_FILES = 3 };

/* A prefix as one number: (namespace, tokens[0..k)) hashed incrementally. Collisions among the few hundred
   prefixes of a run are negligible (2^-50), and would show as a failure, never hide one. */
static uint64_t mix(uint64_t x) {
    x ^= x >> 30, x *= 0xbf58476d1ce4e5b9ull, x ^= x >> 27, x *= 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}
static uint64_t h_root(uint64_t ns) { return mix(ns ^ 0x2545f4914f6cdd1dull); }
static uint64_t h_next(uint64_t h, tkv_token t) { return mix(h ^ ((uint64_t)(uint32_t)t + 0x9e3779b97f4a7c15ull)); }

typedef struct list {
    uint64_t ns;
    size_t n;
    tkv_token t[MAXT];
} list;

typedef struct truth {
    uint64_t set[MAX_SET + 8]; /* the cached prefixes, from events */
    size_t n_set;
    uint64_t removed;          /* REMOVED positions since the last check */
    char failure[200];
    list seq[NS];
    list pin[MAX_PINS];
    tkv_pin pin_id[MAX_PINS];
    int n_pins;
    list file[MAX_FILES];
    bool file_ok[MAX_FILES];
} truth;

static bool in_set(const truth *m, uint64_t h) {
    for (size_t i = 0; i < m->n_set; i++)
        if (m->set[i] == h) return true;
    return false;
}

static void on_event(const tkv_context *ctx, const tkv_cache_event *ev, void *user) {
    (void)ctx;
    truth *m = user;
    if (ev->kind == TKV_CACHE_EVENT_CLEARED) {
        m->n_set = 0;
        return;
    }
    uint64_t h = h_root(ev->ns);
    for (uint32_t k = 0; k < ev->end; k++) {
        h = h_next(h, ev->tokens[k]);
        if (k < ev->from) continue;
        const bool had = in_set(m, h);
        if (ev->kind == TKV_CACHE_EVENT_STORED) {
            if (had && !m->failure[0]) snprintf(m->failure, sizeof m->failure, "STORED position %u twice", k);
            else if (m->n_set < MAX_SET + 8) m->set[m->n_set++] = h;
        } else {
            if (!had && !m->failure[0]) snprintf(m->failure, sizeof m->failure, "REMOVED position %u, never stored", k);
            for (size_t i = 0; i < m->n_set; i++)
                if (m->set[i] == h) m->set[i] = m->set[--m->n_set];
            m->removed++;
        }
    }
}

/* How many leading tokens of l are cached, by the event set. */
static size_t cached_len(const truth *m, uint64_t ns, const tkv_token *t, size_t n) {
    uint64_t h = h_root(ns);
    size_t k = 0;
    while (k < n && in_set(m, h = h_next(h, t[k]))) k++;
    return k;
}

/* The distinct prefixes held (by sequences except `skip`, pins, and `extra`), and how many sequences hold
   each: held[] with counts. */
typedef struct held {
    uint64_t h[NS * MAXT + MAX_PINS * MAXT + MAXT];
    int by_seqs[NS * MAXT + MAX_PINS * MAXT + MAXT];
    bool pinned[NS * MAXT + MAX_PINS * MAXT + MAXT];
    size_t n;
} held;

static size_t held_add(held *H, uint64_t h) {
    for (size_t i = 0; i < H->n; i++)
        if (H->h[i] == h) return i;
    H->h[H->n] = h, H->by_seqs[H->n] = 0, H->pinned[H->n] = false;
    return H->n++;
}

static void held_list(held *H, const list *l, int as_seq, bool as_pin) {
    uint64_t h = h_root(l->ns);
    for (size_t k = 0; k < l->n; k++) {
        size_t i = held_add(H, h = h_next(h, l->t[k]));
        H->by_seqs[i] += as_seq;
        H->pinned[i] |= as_pin;
    }
}

static void held_of(const truth *m, int skip, const list *extra, held *H) {
    H->n = 0;
    for (int s = 0; s < NS; s++)
        if (s != skip) held_list(H, &m->seq[s], 1, false);
    for (int p = 0; p < m->n_pins; p++) held_list(H, &m->pin[p], 0, true);
    if (extra) held_list(H, extra, 0, false);
}

/* Free plus evictable cells once seq `skip` holds only `keep` (NULL: nothing), with `guard` tokens
   (protected, not held) kept too: what a stage may use. */
static size_t room(const truth *m, int skip, const list *keep, const list *guard) {
    held H;
    held_of(m, skip, keep, &H);
    size_t held_n = H.n;
    if (guard) {
        held_list(&H, guard, 0, false);
        held_n = H.n;
    }
    return N_CELLS - held_n;
}

static void check_all(tkv_context *ctx, truth *m, uint64_t *evictions, int op) {
    if (m->failure[0]) fail_msg("op %d: event model: %s", op, m->failure);
    if (tkv_cache_check(ctx) != TKV_OK) fail_msg("op %d: %s", op, tkv_last_error(NULL));
    tkv_stats st;
    assert_int_equal(tkv_cache_stats_ex(ctx, &st, sizeof st), TKV_OK);
    held H;
    held_of(m, -1, NULL, &H);
    size_t shared = 0, pinned = 0;
    for (size_t i = 0; i < H.n; i++) {
        if (!in_set(m, H.h[i])) fail_msg("op %d: a held prefix is not cached (by the events)", op);
        shared += H.by_seqs[i] >= 2;
        pinned += H.pinned[i];
    }
    if (st.cells_used != m->n_set || st.cells_evictable != m->n_set - H.n || st.cells_pinned != pinned ||
        st.cells_shared != shared || st.evictions - *evictions != m->removed)
        fail_msg("op %d: stats used %llu evictable %llu pinned %llu shared %llu evicted %llu; the model %zu %zu %zu %zu "
                 "%llu",
                 op, (unsigned long long)st.cells_used, (unsigned long long)st.cells_evictable,
                 (unsigned long long)st.cells_pinned, (unsigned long long)st.cells_shared,
                 (unsigned long long)(st.evictions - *evictions), m->n_set, m->n_set - H.n, pinned, shared,
                 (unsigned long long)m->removed);
    *evictions = st.evictions;
    m->removed = 0;
    for (int s = 0; s < NS; s++) {
        tkv_token back[MAXT];
        size_t n;
        uint64_t ns;
        assert_int_equal(tkv_seq_tokens(ctx, s, back, MAXT, &n), TKV_OK);
        assert_int_equal(tkv_seq_namespace(ctx, s, &ns), TKV_OK);
        if (n != m->seq[s].n || ns != m->seq[s].ns || memcmp(back, m->seq[s].t, n * sizeof *back))
            fail_msg("op %d: sequence %d holds %zu tokens in namespace %llu, the model %zu in %llu", op, s, n,
                     (unsigned long long)ns, m->seq[s].n, (unsigned long long)m->seq[s].ns);
    }
}

/* Every prefix the tree holds, walked node by node, against the event set. */
typedef struct walk {
    tkv_cache_node nodes[2 * N_CELLS + 8];
    size_t n;
} walk;

static void visit(const tkv_cache_node *nd, void *user) {
    walk *w = user;
    if (w->n < sizeof w->nodes / sizeof *w->nodes) w->nodes[w->n++] = *nd;
}

static void check_tree(const tkv_context *ctx, const truth *m, int op) {
    static walk w;
    static uint64_t end_hash[2 * N_CELLS + 8];
    w.n = 0;
    assert_int_equal(tkv_cache_walk(ctx, visit, &w), TKV_OK);
    size_t n_prefixes = 0;
    for (size_t i = 0; i < w.n; i++) { /* parents come before children */
        const tkv_cache_node *nd = &w.nodes[i];
        uint64_t h = h_root(nd->ns);
        if (nd->parent != TKV_CACHE_NODE_NONE)
            for (size_t j = 0; j < i; j++)
                if (w.nodes[j].id == nd->parent) h = end_hash[j];
        tkv_token run[N_CELLS];
        size_t n;
        assert_int_equal(tkv_cache_node_tokens(ctx, nd->id, run, N_CELLS, &n), TKV_OK);
        for (size_t k = 0; k < n; k++) {
            h = h_next(h, run[k]);
            if (!in_set(m, h)) fail_msg("op %d: the tree holds a prefix no event stored", op);
            n_prefixes++;
        }
        end_hash[i] = h;
    }
    if (n_prefixes != m->n_set) fail_msg("op %d: the tree holds %zu prefixes, the events %zu", op, n_prefixes, m->n_set);
}

static size_t random_list(tkv_token *t, unsigned *seed, tkv_token vocab) {
    static const tkv_token stems[3][6] = {{1, 10, 20, 30, 40, 50}, {1, 10, 20, 31, 41, 51}, {1, 99, 98, 97, 96, 95}};
    const tkv_token *stem = stems[rand_r(seed) % 3];
    const size_t n = 1 + (size_t)rand_r(seed) % (MAXT - 1);
    for (size_t i = 0; i < n; i++) t[i] = i < 6 ? stem[i] % vocab : (tkv_token)(3 + rand_r(seed) % 30);
    return n;
}

typedef struct run_cfg {
    tkv_model *model;
    const char *name;
    unsigned seed;
    int ops;
    bool hybrid; /* recurrent state: reuse ends at a checkpoint (or where a window pool holds rows) */
    uint32_t swa_rows; /* a window pool of this many rows (0: none): files are refused */
    tkv_token vocab;   /* the logits' width and the tokens' range; 0: the model's vocabulary */
    char dir[64];
} run_cfg;

/* What tkv_cache_match says is reusable of t[0..n). */
static size_t match_len(const tkv_context *ctx, uint64_t ns, const tkv_token *t, size_t n) {
    size_t len;
    assert_int_equal(tkv_cache_match(ctx, ns, t, n, &len), TKV_OK);
    return len;
}

static uint64_t computed(const tkv_context *ctx) {
    tkv_stats st;
    assert_int_equal(tkv_cache_stats_ex(ctx, &st, sizeof st), TKV_OK);
    return st.tokens_computed;
}

static tkv_context *make_ctx(tkv_model *model, truth *m, uint32_t swa_rows) {
    tkv_context_params p = tkv_context_default_params();
    p.swa_rows = swa_rows;
    p.n_cells = N_CELLS;
    p.n_seq_max = NS;
    p.n_batch = BATCH;
    p.n_threads = 1;
    p.on_cache_event = m ? on_event : NULL;
    p.cache_event_user = m;
    tkv_context *ctx;
    if (tkv_context_create(model, &p, &ctx) != TKV_OK) fail_msg("%s", tkv_last_error(NULL));
    return ctx;
}

/* The last logits of a fresh context that syncs l: what reuse must give, bit for bit. */
static void compare_fresh(tkv_model *model, const tkv_context *ctx, const list *l, size_t n_vocab, int op) {
    tkv_context *fresh = make_ctx(model, NULL, 0); /* every cell with every row: the truth */
    size_t reused;
    assert_int_equal(tkv_seq_sync(fresh, 0, l->ns, l->t, l->n, &reused), TKV_OK);
    const float *a = tkv_get_logits_last(ctx), *b = tkv_get_logits_last(fresh);
    assert_non_null(a), assert_non_null(b);
    if (memcmp(a, b, n_vocab * sizeof *a)) fail_msg("op %d: logits after reuse differ from a fresh context's", op);
    tkv_context_free(fresh);
}

static void run(const run_cfg *cfg, int *kinds) {
    static truth m;
    memset(&m, 0, sizeof m);
    tkv_context *ctx = make_ctx(cfg->model, &m, cfg->swa_rows);
    const tkv_token vocab = cfg->vocab ? cfg->vocab : (tkv_token)tkv_vocab_size(cfg->model);
    const size_t n_vocab = (size_t)vocab;
    unsigned seed = cfg->seed;
    uint64_t evictions = 0;
    for (int op = 0; op < cfg->ops; op++) {
        const int kind = rand_r(&seed) % 12;
        const int s = rand_r(&seed) % NS;
        list *q = &m.seq[s];
        kinds[kind]++;
        if (kind <= 2) { /* sync, sometimes failing by an injected allocation failure */
            list l = {.ns = rand_r(&seed) % 4 == 0 ? 7 : 0};
            l.n = random_list(l.t, &seed, vocab);
            const size_t cached = cached_len(&m, l.ns, l.t, l.n);
            const size_t keep = cached < l.n ? cached : l.n - 1;
            list kept = l;
            kept.n = keep;
            const size_t need = cached == l.n ? 0 : l.n - keep, avail = room(&m, s, &kept, NULL);
            /* the reuse: the attention common length, or on a hybrid what the match promises (it ends at a
               checkpoint, never beyond the common length) */
            const size_t promised = match_len(ctx, l.ns, l.t, l.n - 1), whole = match_len(ctx, l.ns, l.t, l.n);
            if (promised > keep || whole > cached || promised > whole || (!cfg->hybrid && promised != keep))
                fail_msg("op %d: match %zu of %zu tokens (%zu of all %zu), the attention common length %zu", op,
                         promised, l.n - 1, whole, l.n, cached);
            const uint64_t c0 = computed(ctx);
            const bool inject = rand_r(&seed) % 10 == 0;
            if (inject) tkv__alloc_fail_after(0);
            size_t reused;
            const tkv_status st = tkv_seq_sync(ctx, s, l.ns, l.t, l.n, &reused);
            tkv__alloc_fail_after(-1);
            if (st == TKV_OK) {
                if (need > avail) fail_msg("op %d: sync of %zu new cells with %zu available succeeded", op, need, avail);
                if (reused != promised) fail_msg("op %d: sync reused %zu, the match promised %zu", op, reused, promised);
                if (computed(ctx) - c0 != l.n - reused)
                    fail_msg("op %d: sync of %zu reused %zu and computed %llu", op, l.n, reused,
                             (unsigned long long)(computed(ctx) - c0));
                *q = l;
                if (rand_r(&seed) % (cfg->hybrid ? 8 : 25) == 0) compare_fresh(cfg->model, ctx, &l, n_vocab, op);
            } else {
                if (!inject && (st != TKV_ERR_FULL || need <= avail))
                    fail_msg("op %d: sync failed (%d: %s) with %zu new cells and %zu available", op, (int)st,
                             tkv_last_error(NULL), need, avail);
                /* the sequence holds the list's prefix cached or decoded so far: the reuse, then every whole
                   pass that fit (the cached tokens after the reuse, up to keep, need no new cells) */
                const size_t len = (size_t)tkv_seq_len(ctx, s);
                if (!inject && len != promised + (avail + keep - promised) / BATCH * BATCH)
                    fail_msg("op %d: a failed sync left %zu tokens (reused %zu, %zu available)", op, len, keep, avail);
                tkv_token back[MAXT];
                size_t n_back;
                uint64_t ns;
                assert_int_equal(tkv_seq_tokens(ctx, s, back, MAXT, &n_back), TKV_OK);
                assert_int_equal(tkv_seq_namespace(ctx, s, &ns), TKV_OK);
                const bool unchanged = ns == q->ns && n_back == q->n && !memcmp(back, q->t, n_back * sizeof *back);
                const bool prefix = ns == l.ns && n_back <= l.n && !memcmp(back, l.t, n_back * sizeof *back);
                if (!(inject && unchanged) && !prefix)
                    fail_msg("op %d: a failed sync left sequence %d neither as it was nor a prefix of the list", op, s);
                if (!(inject && unchanged && !prefix)) *q = l, q->n = n_back;
            }
        } else if (kind == 3 && q->n + 3 <= MAXT) { /* decode 1-3 tokens at the end */
            tkv_token t[3];
            tkv_pos pos[3];
            tkv_seq sq[3] = {s, s, s};
            const size_t k = 1 + (size_t)rand_r(&seed) % 3;
            list after = *q;
            for (size_t i = 0; i < k; i++)
                t[i] = (tkv_token)(3 + rand_r(&seed) % 30), pos[i] = (tkv_pos)(q->n + i), after.t[q->n + i] = t[i];
            after.n = q->n + k;
            const size_t dup = cached_len(&m, after.ns, after.t, after.n) > q->n ?
                                   cached_len(&m, after.ns, after.t, after.n) - q->n : 0;
            list guard = after;
            guard.n = q->n + dup;
            const size_t need = k - dup, avail = room(&m, -1, NULL, &guard);
            tkv_batch b = {k, t, pos, sq, NULL};
            /* a sequence without its state at its end replays from its deepest checkpoint first */
            const size_t replay = q->n - match_len(ctx, q->ns, q->t, q->n);
            if (!cfg->hybrid && replay) fail_msg("op %d: a sequence's own tokens are not all reusable", op);
            const uint64_t c0 = computed(ctx);
            const tkv_status st = tkv_decode(ctx, &b);
            if (st == TKV_OK && computed(ctx) - c0 != k + replay)
                fail_msg("op %d: a decode of %zu tokens after a replay of %zu computed %llu", op, k, replay,
                         (unsigned long long)(computed(ctx) - c0));
            if (st == TKV_OK && need > avail) fail_msg("op %d: decode of %zu new cells with %zu available", op, need, avail);
            if (st != TKV_OK && (st != TKV_ERR_FULL || need <= avail))
                fail_msg("op %d: decode failed (%s) with %zu new cells and %zu available", op, tkv_last_error(NULL), need,
                         avail);
            if (st == TKV_OK) *q = after;
        } else if (kind == 4) { /* fork, then sometimes extend the fork and let it go (the stuck-cells pattern) */
            const int d = rand_r(&seed) % NS;
            assert_int_equal(tkv_seq_fork(ctx, s, d), TKV_OK);
            m.seq[d] = *q;
            if (d != s && rand_r(&seed) % 2 && q->n + 4 <= MAXT) {
                for (int i = 0; i < 4; i++) {
                    list after = m.seq[d];
                    after.t[after.n++] = (tkv_token)(3 + rand_r(&seed) % 30);
                    tkv_pos p = (tkv_pos)m.seq[d].n;
                    tkv_seq sd = d;
                    tkv_batch b = {1, &after.t[after.n - 1], &p, &sd, NULL};
                    if (tkv_decode(ctx, &b) != TKV_OK) break;
                    m.seq[d] = after;
                }
                assert_int_equal(tkv_seq_clear(ctx, d), TKV_OK);
                m.seq[d].n = 0, m.seq[d].ns = 0;
            }
        } else if (kind == 5) {
            const size_t n = q->n ? (size_t)rand_r(&seed) % (q->n + 1) : 0;
            assert_int_equal(tkv_seq_truncate(ctx, s, (tkv_pos)n), TKV_OK);
            q->n = n;
            if (!n) q->ns = 0;
        } else if (kind == 6) {
            assert_int_equal(tkv_seq_clear(ctx, s), TKV_OK);
            q->n = 0, q->ns = 0;
        } else if (kind == 7 && q->n && m.n_pins < MAX_PINS) { /* pin a prefix of what s holds */
            list l = *q;
            l.n = 1 + (size_t)rand_r(&seed) % q->n;
            size_t len;
            assert_int_equal(tkv_cache_pin(ctx, l.ns, l.t, l.n, &len, &m.pin_id[m.n_pins]), TKV_OK);
            assert_int_equal(len, l.n);
            m.pin[m.n_pins++] = l;
        } else if (kind == 8 && m.n_pins) {
            const int k = rand_r(&seed) % m.n_pins;
            assert_int_equal(tkv_cache_unpin(ctx, m.pin_id[k]), TKV_OK);
            assert_int_equal(tkv_cache_unpin(ctx, m.pin_id[k]), TKV_ERR_INVALID); /* exactly once */
            --m.n_pins;
            m.pin[k] = m.pin[m.n_pins], m.pin_id[k] = m.pin_id[m.n_pins];
        } else if (kind == 9 && rand_r(&seed) % 4 == 0) {
            assert_int_equal(tkv_cache_clear(ctx), TKV_OK);
        } else if (kind == 10) { /* save a sequence */
            const int f = rand_r(&seed) % MAX_FILES;
            char path[96];
            snprintf(path, sizeof path, "%s/seq%d.tkvc", cfg->dir, f);
            if (cfg->swa_rows) { /* no file version carries a window pool's rows yet */
                assert_int_equal(tkv_seq_save(ctx, s, path), TKV_ERR_UNSUPPORTED);
                assert_non_null(strstr(tkv_last_error(ctx), "swa_rows"));
                check_all(ctx, &m, &evictions, op);
                continue;
            }
            assert_int_equal(tkv_seq_save(ctx, s, path), TKV_OK);
            m.file[f] = *q, m.file_ok[f] = true;
        } else if (kind == 11) { /* load a saved sequence into s */
            const int f = rand_r(&seed) % MAX_FILES;
            if (!m.file_ok[f]) continue;
            char path[96];
            snprintf(path, sizeof path, "%s/seq%d.tkvc", cfg->dir, f);
            const list *l = &m.file[f];
            const size_t cached = cached_len(&m, l->ns, l->t, l->n);
            list kept = *l;
            kept.n = cached;
            const size_t need = l->n - cached, avail = room(&m, s, &kept, NULL);
            const tkv_status st = tkv_seq_load(ctx, s, path);
            if (st == TKV_OK && need > avail) fail_msg("op %d: load of %zu new cells with %zu available", op, need, avail);
            if (st != TKV_OK && (st != TKV_ERR_FULL || need <= avail))
                fail_msg("op %d: load failed (%s) with %zu new cells and %zu available", op, tkv_last_error(NULL), need,
                         avail);
            if (st == TKV_OK) *q = *l;
        }
        check_all(ctx, &m, &evictions, op);
        if (op % 8 == 0) check_tree(ctx, &m, op);
    }
    tkv_context_free(ctx);
}

static void truth_with(const char *rel, uint32_t swa_rows, tkv_token vocab, void **state) {
    (void)state;
    tkv_model *model;
    if (tkv_model_load(rel[0] == '/' ? rel : tu_shared(rel), NULL, &model) != TKV_OK)
        fail_msg("%s", tkv_last_error(NULL));
    const char *e = getenv("TKV_TRUTH_OPS");
    const int ops = e ? atoi(e) : 1500;
    e = getenv("TKV_TRUTH_SEEDS");
    const int seeds = e ? atoi(e) : 5;
    int kinds[12] = {0};
    run_cfg cfg = {.model = model, .name = rel, .ops = ops, .hybrid = strstr(rel, "qwen35") != NULL || swa_rows,
                   .swa_rows = swa_rows, .vocab = vocab};
    assert_int_equal(tu_mkdtemp(cfg.dir, "truth"), 0);
    for (int k = 0; k < seeds; k++) {
        cfg.seed = 1000u + 7919u * (unsigned)k;
        run(&cfg, kinds);
    }
    tu_rmtree(cfg.dir);
    for (int k = 0; k < 12; k++) assert_true(kinds[k] > 0);
    print_message("%s: %d seeds x %d operations agreed with the model\n", rel, seeds, ops);
    tkv_model_free(model);
}

static void truth_on(const char *rel, void **state) { truth_with(rel, 0, 0, state); }

static void test_truth_stories(void **state) { truth_on("models/stories260K.gguf", state); }
static void test_truth_qwen3(void **state) { truth_on("models/arch/qwen3.gguf", state); }
static void test_truth_gemma2(void **state) { truth_on("models/arch/gemma2.gguf", state); }
static void test_truth_qwen35(void **state) { truth_on("models/arch/qwen35.gguf", state); }
/* gemma4: its last layers read the cache rows of earlier ones, and its cache has fewer layers than the model */
static void test_truth_gemma4(void **state) { truth_on("models/arch/gemma4.gguf", state); }

/* gemma3 with a window of 8 (5 window layers, 1 global) and the smallest window pool, NS x 8 = 40 rows for
   96 cells: lists of up to 48 tokens cross the window, and rows are released all the time */
static void test_truth_gemma3_pool(void **state) {
    const tkv__model_spec spec = {.arch = "gemma3", .dim = 64, .layers = 6, .heads = 2, .kv_heads = 1,
                                  .head_dim = 32, .ff = 64, .ctx = 256, .n_vocab = 64, .swa_window = 8,
                                  .mix = {TKV_TYPE_F16, TKV_TYPE_F16, TKV_TYPE_F16}, .seed = 34};
    char dir[64], path[96];
    assert_int_equal(tu_mkdtemp(dir, "swa"), 0);
    snprintf(path, sizeof path, "%s/gemma3-w8.gguf", dir);
    tu_write_spec_model(&spec, path);
    truth_with(path, NS * 8, (tkv_token)spec.n_vocab, state); /* a written model has no tokenizer */
    tu_rmtree(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_truth_stories),
        cmocka_unit_test(test_truth_qwen3),
        cmocka_unit_test(test_truth_gemma2),
        cmocka_unit_test(test_truth_qwen35),
        cmocka_unit_test(test_truth_gemma4),
        cmocka_unit_test(test_truth_gemma3_pool),
    };
    return TU_RESULT(cmocka_run_group_tests(tests, NULL, NULL));
}
