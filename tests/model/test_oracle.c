/*
 * test_oracle.c — the engine's arithmetic against an exact oracle (issue 31
 * part 4): for every weight type, on the shipped parity files and on
 * generated shapes (shapes.h), how far the logits of the default arithmetic
 * (batch_invariant = true) and of the reference order (batch_invariant =
 * false) each land from a double-precision forward pass over the same
 * dequantized weights (oracle.h). Distance: per row ||logits - oracle|| /
 * ||oracle||, its mean and its maximum over every row of a run: a prompt
 * decoded in one pass (all positions' logits), then a continuation one token
 * at a time, as `tokenkv run` and the server decode.
 *
 * Both modes quantize activations for quantized weights (the error that
 * dominates: 1-3% per row) and share the products; they differ in attention
 * (the reference order, in passes of fewer than 32 tokens, rounds q to F16
 * and accumulates the weighted sum of V in F16) and, for float weights, in
 * the products' order for one token. The property kept: the default is no
 * further from the oracle than the reference order (what is held, and with
 * what slack, is below). Every measurement is printed as a table row
 * (bench/RESULTS.md holds one run's table).
 *
 * TKV_ORACLE_SIZE=small (the sanitizer build): the shipped files and the
 * first shape, every third type.
 */
#include "testutil.h"

#include "oracle.h"
#include "shapes.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/*
 * What is held, from the measured table (bench/RESULTS.md):
 *
 * F32 and F16 weights (activations kept in float or rounded to F16, 2^-11):
 * the attention's arithmetic shows, and the default is closer in mean and in
 * worst row, by 1.4x to 2.6x; held strictly (no slack).
 *
 * BF16 and the quantized types: both modes round the activations of every
 * product (to BF16, 2^-8, or to 8-bit blocks), which puts 0.5% (BF16) to 3%
 * between either and the oracle; the modes' different attention moves
 * activations across those rounding steps here and there, so which mode lands
 * nearer on a given model is a coin flip: over 100 pairs (type, model) the
 * default's mean was the nearer in 61, its worst row in 46; per pair the
 * ratio default / reference was 0.97-1.04 in mean and 0.86-1.19 in worst
 * row. Pooled over a run's pairs the two are equal to 0.3% (default /
 * reference, sum of means: 0.997 shipped, 0.999 generated, 1.004 on the
 * sanitizer build's subset). Held: pooled within POOLED_SLACK, and per pair
 * within the noise measured, PAIR_MEAN_SLACK and PAIR_WORST_SLACK: a default
 * that lost precision (an F16 accumulation, a coarser order) would move
 * every pair, and the pooled bound, by more. Where the modes' products also
 * sum in different orders (Q5_K, Q3_K: block-reduced against the
 * reference's lanes, each an exact integer per block and a few roundings),
 * the same rounding steps move more rows: after Q3_K took the block-reduced
 * order, Q3_K_S shipped measured 1.04 in mean and 1.27 in worst row (one
 * row: 3.29% against 2.58%), its three generated shapes 0.97-1.00 in mean
 * and 0.92-1.10 in worst row, Q3_K_M 0.99 / 1.05; hence 1.30.
 */
#define POOLED_SLACK 1.01
#define PAIR_MEAN_SLACK 1.06
#define PAIR_WORST_SLACK 1.30

static bool small_run;
static double pooled_def, pooled_ref; /* sums of the rounding-bound pairs' means, per test */

typedef struct dist {
    double sum, max;
    size_t rows;
} dist;

/* A run of one context: prompt tok[0..np) in one pass, then tok[np..n) one at a time; each row against
   the oracle's (ref: (n, n_vocab)) into *d. */
static void engine_run(const tkv_model *m, bool invariant, const tkv_token *tok, size_t np, size_t n,
                       const double *ref, size_t n_vocab, dist *d) {
    tkv_context_params cp = tkv_context_default_params();
    cp.n_cells = 512;
    cp.n_threads = 2;
    cp.batch_invariant = invariant;
    tkv_context *ctx;
    if (tkv_context_create(m, &cp, &ctx) != TKV_OK) fail_msg("%s", tkv_last_error(NULL));
    tkv_pos pos[256];
    tkv_seq seq[256] = {0};
    bool all[256];
    assert_true(n <= 256);
    for (size_t i = 0; i < n; i++) pos[i] = (tkv_pos)i, all[i] = true;
    tkv_batch b = {np, (tkv_token *)tok, pos, seq, all};
    if (tkv_decode(ctx, &b) != TKV_OK) fail_msg("%s", tkv_last_error(ctx));
    for (size_t i = 0; i < n; i++) {
        if (i >= np) {
            tkv_batch one = {1, (tkv_token *)&tok[i], &pos[i], seq, NULL};
            if (tkv_decode(ctx, &one) != TKV_OK) fail_msg("%s", tkv_last_error(ctx));
        }
        const double e = shp_row_rel(tkv_get_logits(ctx, i >= np ? 0 : (int32_t)i), ref + i * n_vocab, n_vocab);
        d->sum += e, d->rows++;
        if (e > d->max) d->max = e;
    }
    tkv_context_free(ctx);
}

typedef struct seqs {
    size_t n;
    tkv_token tok[4][160];
    size_t np[4], len[4];
} seqs;

/* Both modes over every sequence of s; prints the table row and checks the property. */
static void measure(const char *what, const char *type, const tkv_model *m, const seqs *s) {
    oracle *o = oracle_new(m);
    tkv_hparams hp;
    assert_int_equal(tkv_model_hparams(m, &hp), TKV_OK);
    const size_t nv = hp.n_vocab; /* the generated files have no tokenizer */
    dist def = {0}, ref = {0};
    for (size_t k = 0; k < s->n; k++) {
        double *want = malloc(s->len[k] * nv * sizeof *want);
        assert_non_null(want);
        oracle_forward(o, s->tok[k], s->len[k], want);
        engine_run(m, true, s->tok[k], s->np[k], s->len[k], want, nv, &def);
        engine_run(m, false, s->tok[k], s->np[k], s->len[k], want, nv, &ref);
        free(want);
    }
    oracle_free(o);
    const double dm = def.sum / (double)def.rows, rm = ref.sum / (double)ref.rows;
    printf("| %-8s | %-16s | %7.4f%% | %7.4f%% | %7.4f%% | %7.4f%% |\n", type, what, 100 * dm, 100 * def.max, 100 * rm,
           100 * ref.max);
    fflush(stdout);
    if (getenv("TKV_ORACLE_REPORT")) return; /* measuring only */
    const bool exact = !strcmp(type, "F32") || !strcmp(type, "F16");
    const double slack_mean = exact ? 1.0 : PAIR_MEAN_SLACK, slack_worst = exact ? 1.0 : PAIR_WORST_SLACK;
    if (!exact) pooled_def += dm, pooled_ref += rm;
    if (!(dm <= rm * slack_mean) || !(def.max <= ref.max * slack_worst))
        fail_msg("%s %s: the default is further from the oracle than the reference order: mean %.5f%% vs %.5f%% "
                 "(allowed x%.2f), worst row %.5f%% vs %.5f%% (allowed x%.2f)",
                 type, what, 100 * dm, 100 * rm, slack_mean, 100 * def.max, 100 * ref.max, slack_worst);
}

/* The pooled property of a test's rounding-bound pairs. */
static void check_pooled(const char *what) {
    if (getenv("TKV_ORACLE_REPORT")) return;
    printf("%s, BF16 and quantized types pooled: default / reference order = %.4f (sums of means)\n", what,
           pooled_def / pooled_ref);
    if (!(pooled_def <= pooled_ref * POOLED_SLACK))
        fail_msg("%s: pooled, the default is further from the oracle than the reference order: %.5f vs %.5f", what,
                 pooled_def, pooled_ref);
    pooled_def = pooled_ref = 0;
}

static void header(void) {
    printf("| type     | model            | default: mean | worst row | reference order: mean | worst row |\n");
}

/* The shipped files: the reference's prompts, each followed by its greedy continuation. */
static void test_shipped(void **state) {
    (void)state;
    static const char *const types[] = {"F16",    "BF16",   "Q8_0",   "Q4_0",    "Q4_1",   "Q5_0",   "Q5_1",
                                        "Q4_K_M", "Q5_K_M", "Q6_K",   "Q4_K_S",  "Q5_K_S", "IQ4_NL", "IQ4_XS",
                                        "Q2_K",   "Q2_K_S", "Q3_K_S", "Q3_K_M",  "Q3_K_L", "MXFP4",  "TQ1_0",
                                        "TQ2_0",  "IQ2_XXS", "IQ2_XS", "IQ2_S",  "IQ2_M",  "IQ1_S",  "IQ1_M",
                                        "IQ3_XXS", "IQ3_S", "IQ3_M",  "IQ3_XS"};
    header();
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
        if (small_run && i % 3) continue;
        char rel[128];
        snprintf(rel, sizeof rel, "reference/parity-%s.generate.jsonl", types[i]);
        FILE *f = fopen(tu_shared(rel), "r");
        assert_non_null(f);
        static seqs s;
        memset(&s, 0, sizeof s);
        char *line = NULL;
        size_t cap = 0;
        while (getline(&line, &cap, f) > 0 && s.n < 4) {
            json_t *j = json_loads(line, 0, NULL);
            assert_non_null(j);
            json_t *toks = json_object_get(j, "tokens"), *gr = json_object_get(j, "greedy");
            size_t n = 0;
            for (size_t k = 0; k < json_array_size(toks); k++) s.tok[s.n][n++] = (tkv_token)json_integer_value(json_array_get(toks, k));
            s.np[s.n] = n;
            for (size_t k = 0; k < json_array_size(gr); k++) s.tok[s.n][n++] = (tkv_token)json_integer_value(json_array_get(gr, k));
            s.len[s.n++] = n;
            json_decref(j);
        }
        free(line);
        fclose(f);
        snprintf(rel, sizeof rel, "models/parity/parity-%s.gguf", types[i]);
        tkv_model *m;
        if (tkv_model_load(tu_shared(rel), NULL, &m) != TKV_OK) fail_msg("%s", tkv_last_error(NULL));
        measure("shipped", types[i], m, &s);
        tkv_model_free(m);
    }
    check_pooled("shipped files");
}

/* Generated shapes: 2 sequences of random ids, 20 in one pass and 12 one at a time. */
static void test_shapes(void **state) {
    (void)state;
    char dir[64], path[128];
    assert_int_equal(tu_mkdtemp(dir, "oracle"), 0);
    header();
    for (size_t si = 0; si < (small_run ? 1 : shp_n_shapes); si++)
        for (size_t ti = 0; ti < shp_n_types; ti++) {
            if (small_run && ti % 3) continue;
            const shp_spec *sp = &shp_shapes[si];
            snprintf(path, sizeof path, "%s/m.gguf", dir);
            shp_write(sp, shp_types[ti], 31 + si * 100 + ti, path);
            tkv_model *m;
            if (tkv_model_load(path, NULL, &m) != TKV_OK) fail_msg("%s", tkv_last_error(NULL));
            static seqs s;
            memset(&s, 0, sizeof s);
            s.n = 2;
            for (size_t k = 0; k < s.n; k++) {
                s.np[k] = 20, s.len[k] = 32;
                shp_tokens(7 + k, sp->n_vocab, s.tok[k], s.len[k]);
            }
            measure(sp->name, tkv_type_name(shp_types[ti]), m, &s);
            tkv_model_free(m);
        }
    assert_int_equal(tu_rmtree(dir), 0);
    check_pooled("generated shapes");
}

int main(void) {
    const char *size = getenv("TKV_ORACLE_SIZE");
    small_run = size && !strcmp(size, "small");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_shipped),
        cmocka_unit_test(test_shapes),
    };
    return TU_RESULT(cmocka_run_group_tests(tests, NULL, NULL));
}
