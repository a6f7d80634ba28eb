/*
 * test_gemma4.c — gemma4 and the cache: its last layers own no K/V (they
 * read what earlier layers wrote at the same cells), so the cache holds
 * K/V rows for fewer layers than the model has, and every reuse of them
 * must give the logits of a fresh context bit for bit (batch_invariant).
 * Its parity with the reference is test_parity's; here: the cache's size
 * against the file's own metadata, reuse at every length across the
 * window, a saved and loaded sequence, and files whose layer metadata
 * cannot describe a gemma4 refused by name.
 */
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { N = 48, N_CELLS = 128 }; /* N: beyond the window of 32, so reuse crosses it */

static const char *const REL = "models/arch/gemma4.gguf";
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
    if (tkv_model_load(tu_shared(REL), NULL, &model) != TKV_OK) fail_msg("%s", tkv_last_error(NULL));
    toks[0] = 1; /* BOS */
    for (size_t i = 1; i < N; i++) toks[i] = (tkv_token)(3 + (i * 37 + 11) % 500);
    return 0;
}

static int teardown(void **state) {
    (void)state;
    tkv_model_free(model);
    return 0;
}

static int64_t meta_int(const char *key) {
    int64_t v = -1;
    if (tkv_model_meta_int(model, key, &v) != TKV_OK) fail_msg("%s", tkv_last_error(NULL));
    return v;
}

static int64_t meta_at(const char *key, size_t i) {
    int64_t v = -1;
    if (tkv_model_meta_arr_int(model, key, i, &v) != TKV_OK) fail_msg("%s", tkv_last_error(NULL));
    return v;
}

/* The K/V the cache holds, from the file's metadata alone: layers that own
   K/V (block_count - shared_kv_layers), each row as wide as the widest of
   them (KV heads times the head size of the layer's kind), F16, K and V. */
static void test_cache_size(void **state) {
    (void)state;
    const int64_t n_layer = meta_int("gemma4.block_count"), shared = meta_int("gemma4.attention.shared_kv_layers");
    const int64_t hd = meta_int("gemma4.attention.key_length"), hd_swa = meta_int("gemma4.attention.key_length_swa");
    assert_true(shared > 0 && shared < n_layer);
    int64_t width = 0;
    for (int64_t l = 0; l < n_layer - shared; l++) {
        const bool swa = meta_at("gemma4.attention.sliding_window_pattern", (size_t)l) != 0;
        const int64_t w = meta_at("gemma4.attention.head_count_kv", (size_t)l) * (swa ? hd_swa : hd);
        width = w > width ? w : width;
    }
    tkv_context *ctx = make(512);
    tkv_stats st;
    assert_int_equal(tkv_cache_stats(ctx, &st), TKV_OK);
    const uint64_t want = (uint64_t)N_CELLS * (uint64_t)(n_layer - shared) * 2 * (uint64_t)width * 2;
    if (st.kv_bytes != want)
        fail_msg("kv_bytes %llu, expected %llu (%lld of %lld layers own K/V rows of %lld)", (unsigned long long)st.kv_bytes,
                 (unsigned long long)want, (long long)(n_layer - shared), (long long)n_layer, (long long)width);
    tkv_context_free(ctx);
}

/* A prefix of every length k cached by sequence 0, then the whole list in
   sequence 1: k tokens reused, the rest decoded in batches of 3 (edges on
   both sides of the window's), the logits of a fresh context. */
static void test_reuse_every_length(void **state) {
    (void)state;
    const size_t nv = tkv_vocab_size(model);
    float *want = malloc(nv * sizeof *want);
    fresh(N, want);
    const char *e = getenv("TKV_GEMMA4_STRIDE"); /* the sanitizers' run: every 4th length and the window's edge */
    const size_t stride = e && atoi(e) > 0 ? (size_t)atoi(e) : 1;
    for (size_t k = 1; k < N; k++) {
        if (k % stride && (k < 30 || k > 34)) continue;
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
   been computed there: the next token, and a longer list synced over it. */
static void test_save_load(void **state) {
    (void)state;
    const size_t nv = tkv_vocab_size(model), m = 37;
    float *want = malloc(nv * sizeof *want), *want_all = malloc(nv * sizeof *want_all);
    fresh(m + 1, want);
    fresh(N, want_all);
    char path[] = "/tmp/tkv_gemma4_XXXXXX";
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

/* The file's image, read whole. */
static uint8_t *read_image(size_t *size) {
    FILE *f = fopen(tu_shared(REL), "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    *size = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *p = malloc(*size);
    assert_int_equal(fread(p, 1, *size, f), *size);
    fclose(f);
    return p;
}

/* Where metadata key `key`'s name ends in the image (its type follows). */
static size_t key_end(const uint8_t *p, size_t size, const char *key) {
    const size_t n = strlen(key);
    for (size_t i = 8; i + n + 4 <= size; i++)
        if (tu_get(p, i - 8, 8) == n && !memcmp(p + i, key, n)) return i + n;
    fail_msg("key %s not in the image", key);
    return 0;
}

/* Loading the image with one change fails with `want`, naming `needle`. */
static void refused(const uint8_t *img, size_t size, tkv_status want, const char *needle) {
    tkv_model *m = NULL;
    const tkv_status st = tkv_model_load_from_memory(img, size, NULL, &m);
    if (st == TKV_OK) tkv_model_free(m);
    const char *msg = tkv_last_error(NULL);
    if (st != want || !strstr(msg, needle))
        fail_msg("status %s, message \"%s\": expected %s naming '%s'", tkv_status_str(st), msg, tkv_status_str(want),
                 needle);
    assert_null(m);
}

/* Layer metadata a gemma4 cannot have: each refused at load with the key in its message, nothing crashed. */
static void test_bad_layer_metadata(void **state) {
    (void)state;
    size_t size;
    uint8_t *img = read_image(&size);
    uint8_t *p = malloc(size);
    const size_t shared = key_end(img, size, "gemma4.attention.shared_kv_layers") + 4; /* after its u32 type */
    static const struct {
        uint32_t shared;
        tkv_status st;
        const char *needle;
    } cases[] = {
        {5, TKV_ERR_FORMAT, "shared_kv_layers"},      /* every layer shared: none owns K/V */
        {4, TKV_ERR_UNSUPPORTED, "shared_kv_layers"}, /* layer 1 (window) would read layer -1 */
        {1, TKV_ERR_UNSUPPORTED, "shared_kv_layers"}, /* layer 4 (full) would read layer 3 (window) */
        {0, TKV_ERR_FORMAT, "blk.3.attn_k.weight"},   /* no sharing: layers 3 and 4 lack their K */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        memcpy(p, img, size);
        tu_put(p, shared, cases[i].shared, 4);
        refused(p, size, cases[i].st, cases[i].needle);
    }
    /* the window pattern missing (its name changed) */
    memcpy(p, img, size);
    const size_t pat = key_end(p, size, "gemma4.attention.sliding_window_pattern");
    if (pat > 0) p[pat - 1] = 'X';
    refused(p, size, TKV_ERR_FORMAT, "sliding_window_pattern");
    /* layer 0 with 3 KV heads for 4 query heads: the array follows the key, its type and length */
    memcpy(p, img, size);
    const size_t hkv = key_end(p, size, "gemma4.attention.head_count_kv");
    assert_int_equal(tu_get(p, hkv, 4), TKV_META_ARRAY);
    tu_put(p, hkv + 4 + 4 + 8, 3, 4);
    refused(p, size, TKV_ERR_FORMAT, "head_count_kv");
    /* the unchanged image loads */
    memcpy(p, img, size);
    tkv_model *m = NULL;
    if (tkv_model_load_from_memory(p, size, NULL, &m) != TKV_OK) fail_msg("%s", tkv_last_error(NULL));
    tkv_model_free(m);
    free(p), free(img);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cache_size),
        cmocka_unit_test(test_reuse_every_length),
        cmocka_unit_test(test_save_load),
        cmocka_unit_test(test_bad_layer_metadata),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
