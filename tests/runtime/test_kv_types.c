/*
 * test_kv_types.c — quantized KV caches (K and V types chosen apart):
 *   - the block quantizers round-trip within each format's error bound;
 *   - on stories260K every type decodes, with logits near the F16 cache's
 *     (per-type bounds; bench/bench_kv_types measures the drift, greedy
 *     agreement included);
 *   - reuse stays exact with any type (a prefix attached, then decoded,
 *     gives the logits of decoding it whole);
 *   - a saved sequence records both types: it loads back into a context of
 *     the same types and is refused, naming them, by any other.
 */
#include "testutil.h"

#include "compute/quant/quant.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const tkv_type block_types[] = {TKV_TYPE_Q8_0, TKV_TYPE_Q5_1, TKV_TYPE_Q5_0,
                                       TKV_TYPE_Q4_1, TKV_TYPE_Q4_0, TKV_TYPE_IQ4_NL};
enum { N_BLOCK_TYPES = sizeof block_types / sizeof *block_types };

/* Relative RMS error of a dequantized round trip of random Gaussian-ish rows. */
static double roundtrip_error(tkv_type t, unsigned seed) {
    enum { N = 32 * 64 };
    float x[N], y[N];
    uint8_t q[N * 2];
    for (int i = 0; i < N; i++) {
        float s = 0;
        for (int k = 0; k < 4; k++) s += (float)rand_r(&seed) / (float)RAND_MAX - 0.5f;
        x[i] = s * (i % 97 == 0 ? 8.0f : 1.0f); /* a few outliers, as K rows have */
    }
    tkv__quant_quantize_block_row(t, x, q, N);
    tkv__quant_dequantize_row(t, q, y, N);
    double d2 = 0, r2 = 0;
    for (int i = 0; i < N; i++) d2 += (double)(x[i] - y[i]) * (x[i] - y[i]), r2 += (double)x[i] * x[i];
    return sqrt(d2 / r2);
}

static void test_quantizers(void **state) {
    (void)state;
    const double bound[N_BLOCK_TYPES] = {0.012, 0.06, 0.09, 0.12, 0.16, 0.14}; /* 1.3x what they measure */
    for (int k = 0; k < N_BLOCK_TYPES; k++) {
        const double e = roundtrip_error(block_types[k], 7 + (unsigned)k);
        if (getenv("TKV_KV_TYPES_REPORT")) print_message("%s round trip %.4f\n", tkv_type_name(block_types[k]), e);
        if (!(e < bound[k])) fail_msg("%s: round-trip error %.4f over %.2f", tkv_type_name(block_types[k]), e, bound[k]);
    }
    /* all-zero and constant blocks come back exactly */
    float z[32] = {0}, c[32], y[32];
    uint8_t q[64];
    for (int i = 0; i < 32; i++) c[i] = -0.75f;
    for (int k = 0; k < N_BLOCK_TYPES; k++) {
        tkv__quant_quantize_block_row(block_types[k], z, q, 32);
        tkv__quant_dequantize_row(block_types[k], q, y, 32);
        for (int i = 0; i < 32; i++) assert_true(y[i] == 0.0f);
        tkv__quant_quantize_block_row(block_types[k], c, q, 32);
        tkv__quant_dequantize_row(block_types[k], q, y, 32);
        for (int i = 0; i < 32; i++)
            if (fabsf(y[i] - c[i]) > 1e-3f) fail_msg("%s: constant block: %g for %g", tkv_type_name(block_types[k]), y[i], c[i]);
    }
}

static tkv_context *ctx_of(tkv_type k, tkv_type v, uint32_t n_cells) {
    tkv_context_params p = tkv_context_default_params();
    p.n_cells = n_cells;
    p.n_seq_max = 4;
    p.n_batch = 16;
    p.n_threads = 2;
    p.kv_type = k;
    p.kv_type_v = v;
    tkv_context *ctx = NULL;
    if (tkv_context_create(tu_model, &p, &ctx) != TKV_OK) fail_msg("%s", tkv_last_error(NULL));
    return ctx;
}

/* Logits of every position of t[0..n), decoded in one sequence (chunks of n_batch). */
static float *logits_all(tkv_context *ctx, tkv_seq s, const tkv_token *t, size_t n) {
    float *out = malloc(n * tu_n_vocab * sizeof *out);
    tkv_pos pos[64];
    tkv_seq sq[64];
    bool all[64];
    for (size_t c0 = 0; c0 < n; c0 += 64) {
        const size_t m = n - c0 < 64 ? n - c0 : 64;
        for (size_t i = 0; i < m; i++) pos[i] = (tkv_pos)(c0 + i), sq[i] = s, all[i] = true;
        tkv_batch b = {m, t + c0, pos, sq, all};
        assert_int_equal(tkv_decode(ctx, &b), TKV_OK);
        for (size_t i = 0; i < m; i++) memcpy(out + (c0 + i) * tu_n_vocab, tkv_get_logits(ctx, i), tu_n_vocab * sizeof *out);
    }
    return out;
}

static size_t prompt(tkv_token *t, const char *text) {
    size_t n = 0;
    assert_int_equal(tkv_tokenize(tu_model, text, strlen(text), TKV_TOKENIZE_ADD_SPECIAL, t, 64, &n), TKV_OK);
    return n;
}

/* Every type as K and V, and mixed pairs: logits near F16's, greedy generation runs, and reuse as exact as with
   F16. */
static void test_types_decode(void **state) {
    (void)state;
    static const char *const texts[] = {"Once upon a time", "The little dog ran to the park and",
                                        "Lily wanted to play with her ball"};
    struct {
        tkv_type k, v;
        double bound; /* relative RMS of the logits against the F16 cache's */
    } pairs[] = { /* bounds about 1.4x what stories260K measures: its 8-element heads share each block's scale
                     four at a time, which costs K far more than a 64-element head does */
        {TKV_TYPE_Q8_0, TKV_TYPE_Q8_0, 0.022},  {TKV_TYPE_Q5_1, TKV_TYPE_Q5_1, 0.20},
        {TKV_TYPE_Q5_0, TKV_TYPE_Q5_0, 0.26},   {TKV_TYPE_Q4_1, TKV_TYPE_Q4_1, 0.30},
        {TKV_TYPE_Q4_0, TKV_TYPE_Q4_0, 0.34},   {TKV_TYPE_IQ4_NL, TKV_TYPE_IQ4_NL, 0.22},
        {TKV_TYPE_Q8_0, TKV_TYPE_Q4_0, 0.04},   {TKV_TYPE_F16, TKV_TYPE_Q4_0, 0.04},
        {TKV_TYPE_Q4_0, TKV_TYPE_F32, 0.36},
    };
    enum { STEPS = 48 };
    tkv_context *ref = ctx_of(TKV_TYPE_F16, TKV_TYPE_COUNT, 512);
    for (size_t pi = 0; pi < sizeof pairs / sizeof *pairs; pi++) {
        tkv_context *ctx = ctx_of(pairs[pi].k, pairs[pi].v, 512);
        for (size_t ti = 0; ti < sizeof texts / sizeof *texts; ti++) {
            tkv_token a[64 + STEPS], b[64 + STEPS];
            const size_t n = prompt(a, texts[ti]);
            memcpy(b, a, n * sizeof *a);
            assert_int_equal(tkv_seq_clear(ref, 0), TKV_OK);
            assert_int_equal(tkv_cache_clear(ref), TKV_OK);
            assert_int_equal(tkv_seq_clear(ctx, 0), TKV_OK);
            assert_int_equal(tkv_cache_clear(ctx), TKV_OK);
            float *want = logits_all(ref, 0, a, n), *got = logits_all(ctx, 0, a, n);
            double d2 = 0, r2 = 0;
            for (size_t i = 0; i < n * tu_n_vocab; i++)
                d2 += (double)(got[i] - want[i]) * (got[i] - want[i]), r2 += (double)want[i] * want[i];
            if (getenv("TKV_KV_TYPES_REPORT"))
                print_message("K %s V %s '%s': %.4f\n", tkv_type_name(pairs[pi].k), tkv_type_name(pairs[pi].v), texts[ti],
                              sqrt(d2 / r2));
            if (!(sqrt(d2 / r2) < pairs[pi].bound))
                fail_msg("K %s V %s, '%s': logits %.4f from F16's (bound %.2f)", tkv_type_name(pairs[pi].k),
                         tkv_type_name(pairs[pi].v), texts[ti], sqrt(d2 / r2), pairs[pi].bound);
            /* reuse: all but the last token attached, the last decoded alone: the whole pass's last row */
            size_t reused;
            assert_int_equal(tkv_seq_sync(ctx, 1, 0, a, n, &reused), TKV_OK);
            assert_int_equal(reused, n - 1);
            assert_memory_equal(tkv_get_logits_last(ctx), got + (n - 1) * tu_n_vocab, tu_n_vocab * sizeof *got);
            free(want);
            free(got);
            tu_greedy(ctx, 3, b, n, STEPS, tu_n_vocab, NULL); /* one token at a time over the quantized rows */
            assert_int_equal(tkv_cache_check(ctx), TKV_OK);
        }
        tkv_context_free(ctx);
    }
    tkv_context_free(ref);
}

/* A saved sequence records K's and V's types: it loads into a context of the same types (and continues as the
   original does), never into one of other types. */
static void test_types_persist(void **state) {
    (void)state;
    char dir[] = "/tmp/tkv-kvtypes-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char path[128];
    snprintf(path, sizeof path, "%s/seq.tkvc", dir);
    tkv_context *a = ctx_of(TKV_TYPE_Q4_0, TKV_TYPE_Q8_0, 256);
    tkv_token t[64 + 8];
    const size_t n = prompt(t, "Once upon a time, there was a big dog named Max.");
    assert_int_equal(tkv_seq_sync(a, 0, 0, t, n, NULL), TKV_OK);
    assert_int_equal(tkv_seq_save(a, 0, path), TKV_OK);

    tkv_context *b = ctx_of(TKV_TYPE_Q4_0, TKV_TYPE_Q8_0, 256);
    assert_int_equal(tkv_seq_load(b, 0, path), TKV_OK);
    assert_int_equal(tkv_seq_len(b, 0), (tkv_pos)n);
    /* one more token in both: the same logits, to the bit */
    tkv_token next = 7;
    tkv_pos pos = (tkv_pos)n;
    tkv_seq s0 = 0;
    tkv_batch one = {1, &next, &pos, &s0, NULL};
    assert_int_equal(tkv_decode(a, &one), TKV_OK);
    assert_int_equal(tkv_decode(b, &one), TKV_OK);
    assert_memory_equal(tkv_get_logits_last(a), tkv_get_logits_last(b), tu_n_vocab * sizeof(float));

    tkv_context *c = ctx_of(TKV_TYPE_Q8_0, TKV_TYPE_Q4_0, 256); /* the same two types, swapped */
    assert_int_equal(tkv_seq_load(c, 0, path), TKV_ERR_INVALID);
    if (!strstr(tkv_context_error(c), "KV types K Q4_0, V Q8_0 differ from the context's K Q8_0, V Q4_0"))
        fail_msg("message: %s", tkv_context_error(c));
    assert_int_equal(tkv_seq_len(c, 0), 0);
    tkv_context_free(a);
    tkv_context_free(b);
    tkv_context_free(c);
    unlink(path);
    rmdir(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_quantizers),
        cmocka_unit_test(test_types_decode),
        cmocka_unit_test(test_types_persist),
    };
    return cmocka_run_group_tests(tests, tu_stories_setup, tu_stories_teardown);
}
