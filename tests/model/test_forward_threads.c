/*
 * test_forward_threads.c — the forward pass gives the same logits, bit for bit,
 * whatever the number of threads, at every kernel level, on quantization
 * mixes whose products of one input quantize it for different activation
 * types (IQ4_NL's attn_q/attn_k read Q8_0 activations, its attn_v, Q5_K
 * where the model has 4+ query heads per K/V head, Q8_K): the threads share
 * one buffer of quantized activations, and none may overwrite it while
 * another still reads it. Also every logit finite and not all zero.
 *
 * The models are made here with `tokenkv mkmodel` and `tokenkv quantize`
 * (issue 31's shape: n_embd 512, n_ff 1024, 8 heads, 2 K/V heads); the
 * shipped architecture files (models/arch: post-norms, gemma, recurrent
 * layers, experts, per-layer inputs) are held to the same. Each run is a
 * prompt in one pass, then single tokens, as generation decodes them: the
 * phases of a layer hand their rows to the next with as few barriers as
 * the rows allow (a single token's FFN activation is shared out by
 * elements), and a missing one shows here, and under TSan.
 *
 *   TKV_THREADS_REPS  runs of each thread count (default 2; 1 under the sanitizers)
 */
#include "testutil.h"

#include "compute/kernels.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char dir[64];

static int setup(void **state) {
    (void)state;
    if (tu_mkdtemp(dir, "threads") != 0) return -1;
    char args[1024];
    snprintf(args, sizeof args, "mkmodel %s/f32.gguf --dim 512 --layers 2 --heads 8 --kv-heads 2 --ff 1024 --seed 5 --vocab-from %s",
             dir, tu_shared("models/stories260K.gguf"));
    tu_run_result r = tu_run(args);
    const int ok = r.status == 0;
    if (!ok) fprintf(stderr, "mkmodel: %s\n", r.err);
    tu_run_free(&r);
    return ok ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    return tu_rmtree(dir);
}

enum { N = 24, GEN = 4, ROWS = N + GEN };

/* The logits of every position of one prompt, then of GEN single tokens after it, at the active level, on
   n_threads: (ROWS, n_vocab). */
static float *logits_of(const tkv_model *m, int n_threads, size_t n_vocab) {
    tkv_context_params p = tkv_context_default_params();
    p.n_cells = 64;
    p.n_threads = n_threads;
    tkv_context *ctx;
    assert_int_equal(tkv_context_create(m, &p, &ctx), TKV_OK);
    tkv_token tok[N];
    tkv_pos pos[N];
    tkv_seq seq[N] = {0};
    bool all[N];
    for (int i = 0; i < N; i++) tok[i] = (tkv_token)((i * 37 + 11) % (int)n_vocab), pos[i] = i, all[i] = true;
    tkv_batch b = {N, tok, pos, seq, all};
    assert_int_equal(tkv_decode(ctx, &b), TKV_OK);
    float *out = malloc(ROWS * n_vocab * sizeof(float));
    assert_non_null(out);
    for (size_t t = 0; t < N; t++) memcpy(out + t * n_vocab, tkv_get_logits(ctx, t), n_vocab * sizeof(float));
    for (int g = 0; g < GEN; g++) {
        tkv_token t1 = (tkv_token)((g * 53 + 7) % (int)n_vocab);
        tkv_pos p1 = N + g;
        tkv_seq s1 = 0;
        bool l1 = true;
        tkv_batch one = {1, &t1, &p1, &s1, &l1};
        assert_int_equal(tkv_decode(ctx, &one), TKV_OK);
        memcpy(out + (N + g) * n_vocab, tkv_get_logits(ctx, 0), n_vocab * sizeof(float));
    }
    tkv_context_free(ctx);
    return out;
}

/* One thread against 2 and 3, twice, at every level: bit for bit. */
static void check_model(const char *mix, const char *path) {
    tkv_model *m;
    if (tkv_model_load(path, NULL, &m) != TKV_OK) fail_msg("%s: %s", path, tkv_last_error(NULL));
    tkv_hparams hp;
    assert_int_equal(tkv_model_hparams(m, &hp), TKV_OK);
    const size_t nv = hp.n_vocab;
    const tkv__kernel_level best = tkv__kernel_level_best();
    /* under the sanitizers one run: ASan and UBSan see a bad access on any run, and races are TSan's, whose
       stage does not run this test */
    const char *e = getenv("TKV_THREADS_REPS");
    const int reps = e ? atoi(e) : 2;
    for (int l = 0; l <= (int)best; l++) {
        assert_int_equal(tkv__kernel_force_level((tkv__kernel_level)l), 0);
        float *one = logits_of(m, 1, nv);
        size_t zero = 0;
        for (size_t i = 0; i < ROWS * nv; i++) {
            if (!isfinite(one[i])) fail_msg("%s %s: logit %zu of token %zu is %g", mix, tkv__kernel_level_name(l), i % nv, i / nv, one[i]);
            zero += one[i] == 0.0f;
        }
        if (zero == ROWS * nv) fail_msg("%s %s: every logit is 0", mix, tkv__kernel_level_name(l));
        /* several runs: a race shows only now and then */
        for (int rep = 0; rep < reps; rep++)
            for (int nth = 2; nth <= 3; nth++) {
                float *many = logits_of(m, nth, nv);
                for (size_t i = 0; i < ROWS * nv; i++)
                    if (memcmp(&many[i], &one[i], sizeof(float)) != 0)
                        fail_msg("%s %s, %d threads (run %d): token %zu logit %zu: %.9g, one thread %.9g", mix,
                                 tkv__kernel_level_name(l), nth, rep, i / nv, i % nv, many[i], one[i]);
                free(many);
            }
        free(one);
    }
    assert_int_equal(tkv__kernel_force_level(best), 0);
    tkv_model_free(m);
}

static void check_mix(const char *mix) {
    char args[512], path[128];
    snprintf(path, sizeof path, "%s/%s.gguf", dir, mix);
    snprintf(args, sizeof args, "quantize -q %s/f32.gguf %s %s --threads 2", dir, path, mix);
    tu_run_result r = tu_run(args);
    if (r.status != 0) fail_msg("quantize %s: %s", mix, r.err);
    tu_run_free(&r);
    check_model(mix, path);
}

static void test_iq4_nl(void **state) { (void)state; check_mix("IQ4_NL"); }
/* a mix whose products all read Q8_K activations: the same rule, no rewrite between them */
static void test_q4_k_m(void **state) { (void)state; check_mix("Q4_K_M"); }

/* every layer kind and block shape the forward pass has */
static void test_archs(void **state) {
    (void)state;
    static const char *const archs[] = {"gemma3", "olmo2", "qwen35", "granitehybrid", "lfm2", "qwen35moe", "gemma4",
                                        "nemotron_h"};
    for (size_t i = 0; i < sizeof archs / sizeof archs[0]; i++) {
        char rel[128];
        snprintf(rel, sizeof rel, "models/arch/%s.gguf", archs[i]);
        check_model(archs[i], tu_shared(rel));
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_iq4_nl),
        cmocka_unit_test(test_q4_k_m),
        cmocka_unit_test(test_archs),
    };
    return TU_RESULT(cmocka_run_group_tests(tests, setup, teardown));
}
