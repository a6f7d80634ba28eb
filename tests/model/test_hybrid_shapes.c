/*
 * test_hybrid_shapes.c — the recurrent hybrids and gemma4 on shapes beyond
 * the shipped files, written by the tools library as `tokenkv mkmodel --arch`
 * writes them: qwen35 (delta nets with 2 and 3 q/k heads, v heads of 64),
 * qwen35moe (delta nets, 8 experts and a shared one), lfm2 (short convs),
 * granitehybrid (Mamba-2 with 1 and 2 groups, heads of 64), nemotron_h
 * (Mamba-2 with 4 groups, MLP layers, MQA), gemma4 (two layer shapes,
 * shared K/V, with and without per-layer inputs; and with experts beside its
 * FFN) and lfm2moe (a dense layer, then experts), at F16, Q8_0 and Q4_K_M. At every SIMD level the logits of a 16-token prompt and of 8
 * greedy tokens stay within a bound of the scalar level's, the greedy ids
 * equal but at a near-tie; and at the best level a prompt synced over a
 * cached prefix gives a fresh context's logits to the bit. The bounds follow
 * test_parity_shapes' reasoning (the levels sum products in other orders;
 * quantized activations then cross rounding steps now and then), widened
 * because a recurrent state carries each difference on to later tokens:
 * each is 2.4-2.5x the worst row measured here (TKV_SHAPES_REPORT=1 prints
 * them): F16 3e-3 (1.2e-3), Q8_0 5% (2.1%), Q4_K_M 8% (3.4%). gemma4's
 * worst rows, attention alone: F16 0.20%, Q8_0 3.4%, Q4_K_M 1.0%.
 * qwen35moe's random router has near-ties that the levels' orders of summation
 * flip (one expert for another: 10-35% on that row, at F16 too, for 2 of 5
 * seeds tried), so its spec names a seed whose expert choices hold at every
 * level, as the shipped MoE files' seeds were chosen by router margin; so
 * does gemma4's with experts (seeds 1-4 flip a choice somewhere: 6-29% on
 * one row).
 */
#include "testutil.h"

#include "compute/kernels.h"
#include "tools/model_write.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { N_PROMPT = 16, N_GEN = 8, N_ROWS = N_PROMPT + N_GEN, N_VOCAB = 256 };

static const tkv__model_spec specs[] = {
    {.arch = "qwen35", .dim = 512, .layers = 4, .heads = 8, .kv_heads = 2, .head_dim = 64, .ff = 768, .ctx = 2048,
     .n_vocab = N_VOCAB, .ssm_state = 64, .ssm_groups = 2, .ssm_heads = 4, .ssm_inner = 256, .attn_every = 2},
    {.arch = "qwen35", .dim = 384, .layers = 3, .heads = 6, .kv_heads = 3, .head_dim = 64, .ff = 512, .ctx = 2048,
     .n_vocab = N_VOCAB, .ssm_state = 64, .ssm_groups = 3, .ssm_heads = 6, .ssm_inner = 384, .attn_every = 3},
    {.arch = "granitehybrid", .dim = 256, .layers = 4, .heads = 4, .kv_heads = 2, .ff = 512, .ctx = 2048,
     .n_vocab = N_VOCAB, .ssm_state = 32, .ssm_groups = 2, .ssm_heads = 8, .ssm_inner = 512, .attn_every = 2},
    {.arch = "granitehybrid", .dim = 512, .layers = 3, .heads = 8, .kv_heads = 8, .ff = 1024, .ctx = 2048,
     .n_vocab = N_VOCAB, .ssm_state = 16, .ssm_groups = 1, .ssm_heads = 16, .ssm_inner = 1024, .attn_every = 3},
    /* gemma4: window layers of 8 (the prompt crosses them); layers SSFSSF, the last three reading layers 1 and 2,
       per-layer inputs; then SFSF with heads of 64 and 128, the last two shared, no per-layer inputs */
    {.arch = "gemma4", .dim = 256, .layers = 6, .heads = 4, .kv_heads = 2, .head_dim = 64, .ff = 512, .ctx = 2048,
     .n_vocab = N_VOCAB, .attn_every = 3, .shared_kv = 3, .per_layer = 32, .swa_window = 8},
    {.arch = "gemma4", .dim = 512, .layers = 4, .heads = 8, .kv_heads = 4, .head_dim = 128, .ff = 1024, .ctx = 2048,
     .n_vocab = N_VOCAB, .attn_every = 2, .shared_kv = 2, .swa_window = 8},
    /* qwen35moe: 8 experts (2 used) and a shared expert (ff) beside delta nets of 2 q/k heads, 4 v heads */
    {.arch = "qwen35moe", .dim = 256, .layers = 4, .heads = 4, .kv_heads = 2, .head_dim = 64, .ff = 64, .ctx = 2048,
     .n_vocab = N_VOCAB, .experts = 8, .experts_used = 2, .expert_ff = 64, .ssm_state = 32, .ssm_groups = 2,
     .ssm_heads = 4, .ssm_inner = 128, .attn_every = 2, .seed = 200},
    /* lfm2: short convs on layers 0, 2, 3 */
    {.arch = "lfm2", .dim = 256, .layers = 4, .heads = 4, .kv_heads = 2, .ff = 512, .ctx = 2048, .n_vocab = N_VOCAB,
     .pattern = "C*CC"},
    /* gemma4 with experts beside its FFN (8, 2 used), gate and up as one stack; lfm2moe: a dense first layer,
       then 8 experts (2 used) chosen by sigmoid gates and a choice bias */
    {.arch = "gemma4", .dim = 256, .layers = 4, .heads = 4, .kv_heads = 2, .head_dim = 64, .ff = 256, .ctx = 2048,
     .n_vocab = N_VOCAB, .attn_every = 2, .swa_window = 8, .experts = 8, .experts_used = 2, .expert_ff = 128,
     .fused_experts = true, .seed = 5},
    {.arch = "lfm2moe", .dim = 256, .layers = 4, .heads = 4, .kv_heads = 2, .ff = 512, .ctx = 2048, .n_vocab = N_VOCAB,
     .pattern = "C*CC", .experts = 8, .experts_used = 2, .expert_ff = 128, .dense_lead = 1, .seed = 1},
    /* nemotron_h: Mamba-2 with 4 groups, one MQA attention layer, MLP layers */
    {.arch = "nemotron_h", .dim = 256, .layers = 5, .heads = 4, .kv_heads = 1, .ff = 384, .ctx = 2048,
     .n_vocab = N_VOCAB, .ssm_state = 32, .ssm_groups = 4, .ssm_heads = 8, .ssm_inner = 512, .pattern = "M-M*-"},
};

static const struct {
    const char *name;
    tkv__type_mix mix;
    double tol;
} types[] = {
    {"F16", {TKV_TYPE_F16, TKV_TYPE_F16, TKV_TYPE_F16}, 3e-3},  /* worst measured 1.2e-3 */
    {"Q8_0", {TKV_TYPE_Q8_0, TKV_TYPE_Q8_0, TKV_TYPE_Q8_0}, 0.05},   /* 2.1% */
    {"Q4_K_M", {TKV_TYPE_Q4_K, TKV_TYPE_Q6_K, TKV_TYPE_Q6_K}, 0.08}, /* 3.4% */
};


static size_t argmax(const float *x, size_t n) {
    size_t b = 0;
    for (size_t i = 1; i < n; i++)
        if (x[i] > x[b]) b = i;
    return b;
}

static double rel(const float *got, const float *ref, size_t n) {
    double d2 = 0, r2 = 0;
    for (size_t k = 0; k < n; k++) d2 += (double)(got[k] - ref[k]) * (got[k] - ref[k]), r2 += (double)ref[k] * ref[k];
    return sqrt(d2 / (r2 > 0 ? r2 : 1));
}

static double top2_gap(const float *x, size_t n) {
    const size_t b = argmax(x, n);
    float second = -INFINITY;
    for (size_t i = 0; i < n; i++)
        if (i != b && x[i] > second) second = x[i];
    return (double)x[b] - second;
}

static tkv_context *make(const tkv_model *m) {
    tkv_context_params cp = tkv_context_default_params();
    cp.n_cells = 64, cp.n_threads = 2, cp.n_seq_max = 4;
    tkv_context *ctx;
    if (tkv_context_create(m, &cp, &ctx) != TKV_OK) fail_msg("%s", tkv_last_error(NULL));
    return ctx;
}

/* The prompt's rows and N_GEN greedy tokens' at the active level, into rows (N_ROWS, N_VOCAB) and ids. */
static void generate(const tkv_model *m, const tkv_token *prompt, float *rows, tkv_token *ids) {
    tkv_context *ctx = make(m);
    tkv_pos pos[N_ROWS];
    tkv_seq seq[N_ROWS] = {0};
    bool all[N_ROWS];
    for (int i = 0; i < N_ROWS; i++) pos[i] = i, all[i] = true;
    tkv_batch b = {N_PROMPT, (tkv_token *)prompt, pos, seq, all};
    if (tkv_decode(ctx, &b) != TKV_OK) fail_msg("%s", tkv_last_error(ctx));
    for (int i = 0; i < N_PROMPT; i++) memcpy(rows + i * N_VOCAB, tkv_get_logits(ctx, i), N_VOCAB * sizeof(float));
    for (int g = 0; g < N_GEN; g++) {
        ids[g] = (tkv_token)argmax(rows + (N_PROMPT - 1 + g) * N_VOCAB, N_VOCAB);
        tkv_batch one = {1, &ids[g], &pos[N_PROMPT + g], seq, NULL};
        if (tkv_decode(ctx, &one) != TKV_OK) fail_msg("%s", tkv_last_error(ctx));
        memcpy(rows + (N_PROMPT + g) * N_VOCAB, tkv_get_logits(ctx, 0), N_VOCAB * sizeof(float));
    }
    tkv_context_free(ctx);
}

/* Reuse of a cached prefix gives a fresh context's last logits, to the bit. */
static void check_reuse(const tkv_model *m, const tkv_token *prompt, const char *what) {
    tkv_context *ctx = make(m), *fresh = make(m);
    size_t reused = 0;
    assert_int_equal(tkv_seq_sync(ctx, 0, 0, prompt, 11, NULL), TKV_OK);
    assert_int_equal(tkv_seq_sync(ctx, 1, 0, prompt, N_PROMPT, &reused), TKV_OK);
    assert_int_equal(reused, 11); /* the end of the first prompt has its state */
    assert_int_equal(tkv_seq_sync(fresh, 0, 0, prompt, N_PROMPT, NULL), TKV_OK);
    if (memcmp(tkv_get_logits_last(ctx), tkv_get_logits_last(fresh), N_VOCAB * sizeof(float)) != 0)
        fail_msg("%s: 11 tokens reused, the logits differ from a fresh context's", what);
    tkv_context_free(ctx);
    tkv_context_free(fresh);
}

static void test_hybrid_shapes(void **state) {
    (void)state;
    char dir[64], path[128];
    assert_int_equal(tu_mkdtemp(dir, "hybrid-shapes"), 0);
    snprintf(path, sizeof path, "%s/m.gguf", dir);
    tkv_token prompt[N_PROMPT];
    for (int i = 0; i < N_PROMPT; i++) prompt[i] = (tkv_token)(1 + (i * 97 + 13) % (N_VOCAB - 1));
    float *scalar = malloc(N_ROWS * N_VOCAB * sizeof(float)), *simd = malloc(N_ROWS * N_VOCAB * sizeof(float));
    tkv_token ids_s[N_GEN], ids[N_GEN];
    const tkv__kernel_level best = tkv__kernel_level_best();
    const char *size = getenv("TKV_SHAPES_SIZE"); /* small (the sanitizers' run): gemma4's shapes and the specs
                                                     after them at F16 only */
    const bool small = size && !strcmp(size, "small");
    size_t first_gemma4 = 0;
    while (strcmp(specs[first_gemma4].arch, "gemma4")) first_gemma4++;
    for (size_t si = 0; si < sizeof specs / sizeof specs[0]; si++)
        for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
            if (small && ti > 0 && si >= first_gemma4) continue;
            tkv__model_spec s = specs[si];
            s.mix = types[ti].mix;
            s.seed = (specs[si].seed ? specs[si].seed : 100 + si * 10) + ti;
            tu_write_spec_model(&s, path);
            char what[96];
            snprintf(what, sizeof what, "%s dim %u %s", s.arch, s.dim, types[ti].name);
            for (int l = 0; l <= (int)best; l++) {
                assert_int_equal(tkv__kernel_force_level((tkv__kernel_level)l), 0);
                tkv_model *m;
                if (tkv_model_load(path, NULL, &m) != TKV_OK) fail_msg("%s: %s", what, tkv_last_error(NULL));
                generate(m, prompt, l == 0 ? scalar : simd, l == 0 ? ids_s : ids);
                if (l == (int)best) check_reuse(m, prompt, what);
                tkv_model_free(m);
                if (l == 0) continue;
                size_t rows = N_PROMPT; /* while the histories agree */
                for (int g = 0; g < N_GEN; g++, rows++) {
                    if (ids[g] == ids_s[g]) continue;
                    const float *last = scalar + (N_PROMPT - 1 + g) * N_VOCAB;
                    if (!(top2_gap(last, N_VOCAB) < 0.2))
                        fail_msg("%s %s: greedy token %d is %d, scalar %d (no near-tie)", what,
                                 tkv__kernel_level_name(l), g, ids[g], ids_s[g]);
                    break;
                }
                double worst = 0;
                for (size_t i = 0; i < rows; i++) {
                    const double e = rel(simd + i * N_VOCAB, scalar + i * N_VOCAB, N_VOCAB);
                    worst = e > worst ? e : worst;
                    if (!(e <= types[ti].tol))
                        fail_msg("%s %s: row %zu: ||d|| / ||scalar|| = %.5f > %.5f", what, tkv__kernel_level_name(l), i,
                                 e, types[ti].tol);
                }
                if (getenv("TKV_SHAPES_REPORT"))
                    printf("%-28s %-7s worst row %.5f%%  rows %zu\n", what, tkv__kernel_level_name(l), 100 * worst, rows);
            }
            assert_int_equal(tkv__kernel_force_level(best), 0);
        }
    free(scalar);
    free(simd);
    assert_int_equal(tu_rmtree(dir), 0);
}

/* The sections' 4 counts in a GGUF image: after the key's name come its type (array), the element type and
   the count; NULL when the key is not there. */
static uint8_t *sections_in(uint8_t *img, size_t size, const char *key) {
    const size_t k = strlen(key);
    for (size_t i = 0; i + k + 16 + 16 <= size; i++)
        if (!memcmp(img + i, key, k)) return img + i + k + 16;
    return NULL;
}

/* qwen35's interleaved MRoPE: the reference rotates pair i by the text position only when its sector s = i %
   (the counts' sum) falls in section t, h or w (s % 3 == 0, 1, 2 and s < 3 x that count); other pairs take a
   fourth position, 0 for text. mkmodel's sections rotate every pair; a file that leaves a pair to the fourth
   axis is refused by the key's name (the engine rotates every pair: it would not match the reference). */
static void test_rope_sections(void **state) {
    (void)state;
    char dir[64], path[128];
    assert_int_equal(tu_mkdtemp(dir, "sections"), 0);
    snprintf(path, sizeof path, "%s/m.gguf", dir);
    for (uint32_t hd = 8; hd <= 128; hd *= 2) { /* n_rot = hd: 4 to 64 pairs */
        tkv__model_spec s = {.arch = "qwen35", .dim = 128, .layers = 2, .heads = 4, .kv_heads = 1, .head_dim = hd,
                             .ff = 128, .ctx = 256, .n_vocab = N_VOCAB, .ssm_state = 16, .ssm_groups = 1,
                             .ssm_heads = 2, .ssm_inner = 32, .attn_every = 2,
                             .mix = {TKV_TYPE_F32, TKV_TYPE_F32, TKV_TYPE_F32}};
        tu_write_spec_model(&s, path);
        tkv_model *m;
        if (tkv_model_load(path, NULL, &m) != TKV_OK) fail_msg("head %u: %s", hd, tkv_last_error(NULL));
        int64_t sec[4], sum = 0;
        for (size_t k = 0; k < 4; k++) {
            assert_int_equal(tkv_model_meta_arr_int(m, "qwen35.rope.dimension_sections", k, &sec[k]), TKV_OK);
            sum += sec[k];
        }
        tkv_model_free(m);
        assert_true(sum > 0);
        for (int64_t i = 0; i < hd / 2; i++) {
            const int64_t t = i % sum;
            if (!((t % 3 == 0 && t < 3 * sec[0]) || (t % 3 == 1 && t < 3 * sec[1]) || (t % 3 == 2 && t < 3 * sec[2])))
                fail_msg("head %u: sections [%lld %lld %lld %lld] leave pair %lld unrotated", hd, (long long)sec[0],
                         (long long)sec[1], (long long)sec[2], (long long)sec[3], (long long)i);
        }
    }
    /* the file of the last shape (64 pairs) with sections [32, 0, 0, 0]: pairs 1, 2, 4, ... take axis e */
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    assert_int_equal(fseek(f, 0, SEEK_END), 0);
    const size_t size = (size_t)ftell(f);
    uint8_t *img = malloc(size); /* (size) the file's bytes */
    assert_non_null(img);
    rewind(f);
    assert_int_equal(fread(img, 1, size, f), size);
    assert_int_equal(fclose(f), 0);
    uint8_t *counts = sections_in(img, size, "qwen35.rope.dimension_sections");
    assert_non_null(counts);
    const int32_t one_axis[4] = {32, 0, 0, 0};
    memcpy(counts, one_axis, sizeof one_axis);
    f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(img, 1, size, f), size);
    assert_int_equal(fclose(f), 0);
    free(img);
    tkv_model *m = NULL;
    assert_int_equal(tkv_model_load(path, NULL, &m), TKV_ERR_UNSUPPORTED);
    assert_null(m);
    assert_non_null(strstr(tkv_last_error(NULL), "rope.dimension_sections"));
    assert_non_null(strstr(tkv_last_error(NULL), "pair 1 of 64"));
    assert_int_equal(tu_rmtree(dir), 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_rope_sections), cmocka_unit_test(test_hybrid_shapes)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
