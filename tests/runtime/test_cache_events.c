/*
 * test_cache_events.c — the cache's event callback (tkv_context_params
 * .on_cache_event): replaying the reports of 3,000 random operations (syncs,
 * decodes, truncates, forks, clears, pins, loads of evicted images, all
 * under eviction pressure) rebuilds, after every operation, exactly the set
 * of cached prefixes that tkv_cache_walk shows; an evicted run's image
 * (tkv_cache_event_image) loads back under its own tokens only, and a
 * prefix loaded so gives the logits a fresh context computes.
 */
#include "testutil.h"

#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

enum { CELLS = 160, NS = 4, MAXT = 40, MAX_SET = 4096, MAX_IMG = 8 };

/* One cached position = the prefix that ends there, as a hash of (namespace, tokens 0..p). */
static uint64_t key(uint64_t ns, const tkv_token *t, size_t len) { return XXH3_64bits_withSeed(t, len * sizeof *t, ns); }

typedef struct saved_image {
    uint8_t *data;
    size_t size;
    uint64_t ns;
    tkv_token t[CELLS];
    uint32_t from, end;
} saved_image;

typedef struct mirror {
    uint64_t set[MAX_SET]; /* what the events say is cached */
    size_t n;
    int n_stored, n_removed, n_cleared;
    saved_image img[MAX_IMG]; /* the latest evicted runs */
    int n_img;
} mirror;

static size_t find(const mirror *m, uint64_t k) {
    for (size_t i = 0; i < m->n; i++)
        if (m->set[i] == k) return i;
    return SIZE_MAX;
}

static void on_event(const tkv_context *ctx, const tkv_cache_event *ev, void *user) {
    mirror *m = user;
    if (ev->kind == TKV_CACHE_EVENT_CLEARED) {
        m->n = 0;
        m->n_cleared++;
        return;
    }
    assert_true(ev->from < ev->end);
    for (uint32_t p = ev->from; p < ev->end; p++) {
        const uint64_t k = key(ev->ns, ev->tokens, p + 1);
        const size_t at = find(m, k);
        if (ev->kind == TKV_CACHE_EVENT_STORED) {
            assert_true(at == SIZE_MAX); /* never reported twice */
            assert_true(m->n < MAX_SET);
            m->set[m->n++] = k;
        } else {
            assert_int_equal(ev->kind, TKV_CACHE_EVENT_REMOVED);
            assert_true(at != SIZE_MAX); /* only what was reported stored */
            m->set[at] = m->set[--m->n];
        }
    }
    if (ev->kind == TKV_CACHE_EVENT_STORED) {
        m->n_stored++;
        size_t size;
        assert_int_equal(tkv_cache_event_image(ctx, NULL, 0, &size), TKV_ERR_INVALID); /* nothing is leaving */
        return;
    }
    m->n_removed++;
    /* keep the image of the evicted run (a ring of the latest) */
    saved_image *s = &m->img[m->n_img++ % MAX_IMG];
    size_t size = 0;
    assert_int_equal(tkv_cache_event_image(ctx, NULL, 0, &size), TKV_ERR_FULL);
    free(s->data);
    s->data = malloc(size);
    assert_int_equal(tkv_cache_event_image(ctx, s->data, size, &s->size), TKV_OK);
    assert_int_equal(s->size, size);
    s->ns = ev->ns, s->from = ev->from, s->end = ev->end;
    memcpy(s->t, ev->tokens, ev->end * sizeof *ev->tokens);
}

typedef struct walk {
    tkv_cache_node nodes[2 * CELLS + 8];
    size_t n;
} walk;

static void record(const tkv_cache_node *nd, void *user) {
    walk *w = user;
    w->nodes[w->n++] = *nd;
}

static const tkv_cache_node *node_of(const walk *w, uint32_t id) {
    for (size_t i = 0; i < w->n; i++)
        if (w->nodes[i].id == id) return &w->nodes[i];
    return NULL;
}

/* The cache's own view (nodes and their tokens) against the mirror the events built. */
static void compare(tkv_context *ctx, const mirror *m) {
    static walk w;
    w.n = 0;
    assert_int_equal(tkv_cache_walk(ctx, record, &w), TKV_OK);
    size_t total = 0;
    for (size_t i = 0; i < w.n; i++) {
        const tkv_cache_node *nd = &w.nodes[i];
        if (nd->parent == TKV_CACHE_NODE_NONE) continue;
        tkv_token path[CELLS];
        size_t k;
        for (const tkv_cache_node *a = nd; a->parent != TKV_CACHE_NODE_NONE; a = node_of(&w, a->parent))
            assert_int_equal(tkv_cache_node_tokens(ctx, a->id, path + a->depth, CELLS - a->depth, &k), TKV_OK);
        for (uint32_t j = 0; j < nd->n_tokens; j++)
            if (find(m, key(nd->ns, path, nd->depth + j + 1)) == SIZE_MAX)
                fail_msg("position %u of node %u (ns %llu) is cached, no event said so", nd->depth + j, nd->id,
                         (unsigned long long)nd->ns);
        total += nd->n_tokens;
    }
    assert_int_equal(total, m->n); /* and nothing more */
}

static tkv_context *new_ctx(uint32_t n_cells, mirror *m) {
    tkv_context_params p = tkv_context_default_params();
    p.n_cells = n_cells;
    p.n_seq_max = NS;
    p.n_threads = 1;
    p.n_batch = 16;
    p.on_cache_event = m ? on_event : NULL;
    p.cache_event_user = m;
    tkv_context *ctx = NULL;
    if (tkv_context_create(tu_model, &p, &ctx) != TKV_OK) fail_msg("%s", tkv_last_error(NULL));
    return ctx;
}

static size_t random_list(tkv_token *t, unsigned *seed) {
    static const tkv_token stems[3][6] = {{1, 10, 20, 30, 40, 50}, {1, 10, 20, 31, 41, 51}, {1, 99, 98, 97, 96, 95}};
    const tkv_token *stem = stems[rand_r(seed) % 3];
    size_t n = 6 + (size_t)rand_r(seed) % (MAXT - 6);
    for (size_t i = 0; i < n; i++) t[i] = i < 6 ? stem[i] : (tkv_token)(3 + rand_r(seed) % 40);
    return n;
}

/* An evicted run loads back only under its own namespace and tokens, and only onto its cached prefix. */
static void try_image(tkv_context *ctx, mirror *m, unsigned *seed, int *n_loaded, int *n_partial) {
    if (!m->n_img) return;
    /* a copy: loading evicts, and the evictions' images replace the ring's */
    static saved_image copy;
    const saved_image *r = &m->img[rand_r(seed) % (m->n_img < MAX_IMG ? m->n_img : MAX_IMG)];
    if (!r->data) return;
    free(copy.data);
    copy = *r;
    copy.data = malloc(r->size);
    memcpy(copy.data, r->data, r->size);
    const saved_image *s = &copy;
    size_t loaded = 0;
    tkv_token wrong[CELLS];
    memcpy(wrong, s->t, s->end * sizeof *wrong);
    assert_int_equal(tkv_cache_load_image(ctx, s->data, s->size, s->ns + 1, s->t, s->end, &loaded), TKV_ERR_INVALID);
    /* the first token of its K/V differs: nothing of it is theirs */
    wrong[s->from] = wrong[s->from] == 3 ? 4 : 3;
    assert_int_equal(tkv_cache_load_image(ctx, s->data, s->size, s->ns, wrong, s->end, &loaded), TKV_ERR_INVALID);
    assert_int_equal(tkv_cache_load_image(ctx, s->data, s->size, s->ns, s->t, s->from, &loaded), TKV_ERR_INVALID);
    size_t cached;
    assert_int_equal(tkv_cache_match(ctx, s->ns, s->t, s->from, &cached), TKV_OK);
    tkv_status st = tkv_cache_load_image(ctx, s->data, s->size, s->ns, s->t, s->end, &loaded);
    if (cached < s->from) {
        assert_int_equal(st, TKV_ERR_INVALID); /* its prefix is gone */
        return;
    }
    if (st == TKV_ERR_FULL) return;
    assert_int_equal(st, TKV_OK);
    assert_int_equal(loaded, s->end);
    assert_int_equal(tkv_cache_match(ctx, s->ns, s->t, s->end, &cached), TKV_OK);
    assert_int_equal(cached, s->end);
    (*n_loaded)++;
    /* tokens that agree with the image's only up to k: its first k tokens are theirs, no more */
    if (s->end - s->from < 2) return;
    const uint32_t k = s->from + 1 + (uint32_t)rand_r(seed) % (s->end - s->from - 1);
    wrong[s->from] = s->t[s->from];
    wrong[k] = wrong[k] == 3 ? 4 : 3;
    assert_int_equal(tkv_cache_clear(ctx), TKV_OK);
    assert_int_equal(tkv_cache_match(ctx, s->ns, s->t, s->from, &cached), TKV_OK);
    if (cached < s->from) return; /* its prefix was not held: gone with the clear */
    st = tkv_cache_load_image(ctx, s->data, s->size, s->ns, wrong, s->end, &loaded);
    if (st == TKV_ERR_FULL) return;
    assert_int_equal(st, TKV_OK);
    assert_int_equal(loaded, k);
    assert_int_equal(tkv_cache_match(ctx, s->ns, wrong, s->end, &cached), TKV_OK);
    assert_int_equal(cached, k);
    (*n_partial)++;
}

static void test_events_replay_the_cache(void **state) {
    (void)state;
    static mirror m;
    tkv_context *ctx = new_ctx(CELLS, &m);
    tkv_token lists[NS][MAXT + 64];
    size_t len[NS] = {0};
    unsigned seed = 7;
    int n_loaded = 0, n_partial = 0;
    for (int iter = 0; iter < 3000; iter++) {
        const int op = rand_r(&seed) % 10;
        const tkv_seq s = rand_r(&seed) % NS;
        if (op < 4) {
            tkv_token t[MAXT];
            const size_t n = random_list(t, &seed);
            size_t reused;
            if (tkv_seq_sync(ctx, s, s == 3 ? 9 : 0, t, n, &reused) == TKV_OK) memcpy(lists[s], t, n * sizeof *t), len[s] = n;
            else len[s] = (size_t)tkv_seq_len(ctx, s);
        } else if (op < 6 && len[s] + 2 <= MAXT + 60) {
            tkv_token t[2] = {(tkv_token)(3 + rand_r(&seed) % 40), (tkv_token)(3 + rand_r(&seed) % 40)};
            tkv_pos p[2] = {(tkv_pos)len[s], (tkv_pos)len[s] + 1};
            tkv_seq q[2] = {s, s};
            tkv_batch b = {2, t, p, q, NULL};
            if (tkv_decode(ctx, &b) == TKV_OK) memcpy(lists[s] + len[s], t, sizeof t), len[s] += 2;
        } else if (op == 6) {
            const size_t k = len[s] ? (size_t)rand_r(&seed) % len[s] : 0;
            assert_int_equal(tkv_seq_truncate(ctx, s, (tkv_pos)k), TKV_OK);
            len[s] = k;
        } else if (op == 7) {
            try_image(ctx, &m, &seed, &n_loaded, &n_partial);
        } else if (op == 8 && rand_r(&seed) % 8 == 0) {
            assert_int_equal(tkv_cache_clear(ctx), TKV_OK);
        } else if (op == 8) {
            const tkv_seq d = (s + 1) % NS;
            if (tkv_seq_fork(ctx, s, d) == TKV_OK) memcpy(lists[d], lists[s], len[s] * sizeof **lists), len[d] = len[s];
        } else {
            size_t pinned;
            tkv_pin pin;
            if (len[s] && tkv_cache_pin(ctx, s == 3 ? 9 : 0, lists[s], len[s] / 2, &pinned, &pin) == TKV_OK)
                assert_int_equal(tkv_cache_unpin(ctx, pin), TKV_OK);
        }
        if (tkv_cache_check(ctx) != TKV_OK) fail_msg("%s", tkv_last_error(NULL));
        compare(ctx, &m);
    }
    /* the run went through every kind of report and put evicted runs back */
    assert_true(m.n_stored > 1000);
    assert_true(m.n_removed > 300);
    assert_true(m.n_cleared > 10);
    assert_true(n_loaded > 20);
    assert_true(n_partial > 3);
    tkv_context_free(ctx);
    for (int i = 0; i < MAX_IMG; i++) free(m.img[i].data);
}

/* A prefix evicted, then loaded from its image, gives a fresh context's logits. */
static void test_image_round_trip_logits(void **state) {
    (void)state;
    static mirror m;
    memset(&m, 0, sizeof m);
    tkv_context *ctx = new_ctx(64, &m);
    tkv_token a[40], b[40];
    for (int i = 0; i < 40; i++) a[i] = (tkv_token)(3 + (i * 7) % 40), b[i] = (tkv_token)(3 + (i * 11) % 40);
    size_t reused;
    assert_int_equal(tkv_seq_sync(ctx, 0, 5, a, 39, &reused), TKV_OK);
    assert_int_equal(tkv_seq_clear(ctx, 0), TKV_OK);
    /* 40 more tokens in 64 cells: the tail of a (positions 15..38) is evicted */
    assert_int_equal(tkv_seq_sync(ctx, 1, 0, b, 40, &reused), TKV_OK);
    /* it went in pieces, one per batch of 16 that needed room, the end first */
    assert_true(m.n_img >= 2 && m.n_img <= MAX_IMG);
    assert_int_equal(m.img[0].end, 39);
    for (int i = 0; i < m.n_img; i++) {
        assert_int_equal(m.img[i].ns, 5);
        assert_memory_equal(m.img[i].t, a, m.img[i].end * sizeof *a);
        if (i) assert_int_equal(m.img[i].end, m.img[i - 1].from);
    }
    const int n_img = m.n_img;
    saved_image img[MAX_IMG];
    memcpy(img, m.img, sizeof img);
    memset(m.img, 0, sizeof m.img);
    assert_int_equal(tkv_seq_clear(ctx, 1), TKV_OK);
    size_t loaded;
    /* the last piece needs the one before it: refused until that is back */
    if (img[n_img - 1].from > 0)
        assert_int_equal(tkv_cache_load_image(ctx, img[0].data, img[0].size, 5, a, 40, &loaded), TKV_ERR_INVALID);
    for (int i = n_img; i-- > 0;) {
        assert_int_equal(tkv_cache_load_image(ctx, img[i].data, img[i].size, 5, a, 40, &loaded), TKV_OK);
        assert_int_equal(loaded, img[i].end);
    }
    const saved_image *s = &img[0];
    /* the last token is computed on the loaded K/V */
    tkv_stats st0, st1;
    tkv_cache_stats_ex(ctx, &st0, sizeof st0);
    assert_int_equal(tkv_seq_sync(ctx, 2, 5, a, 40, &reused), TKV_OK);
    tkv_cache_stats_ex(ctx, &st1, sizeof st1);
    assert_int_equal(reused, 39);
    assert_int_equal(st1.tokens_computed - st0.tokens_computed, 1);
    tkv_context *fresh = new_ctx(64, NULL);
    assert_int_equal(tkv_seq_sync(fresh, 0, 5, a, 40, &reused), TKV_OK);
    assert_memory_equal(tkv_get_logits_last(ctx), tkv_get_logits_last(fresh), tu_n_vocab * sizeof(float));
    /* a corrupted image is refused and changes nothing */
    uint8_t *bad = malloc(s->size);
    memcpy(bad, s->data, s->size);
    bad[s->size - 20] ^= 1;
    assert_int_equal(tkv_cache_load_image(fresh, bad, s->size, 5, a, 40, &loaded), TKV_ERR_FORMAT);
    free(bad);
    tkv_context_free(fresh);
    tkv_context_free(ctx);
    for (int i = 0; i < MAX_IMG; i++) free(m.img[i].data), free(img[i].data);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_events_replay_the_cache),
        cmocka_unit_test(test_image_round_trip_logits),
    };
    return cmocka_run_group_tests(tests, tu_stories_setup, tu_stories_teardown);
}
