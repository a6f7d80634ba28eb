/*
 * bench_kv_types.c — what a quantized KV cache costs in quality: for each K/V
 * type, against the F16 cache on the same prompts, the relative RMS of the
 * logits over every prompt position, the mean KL divergence of the next-
 * token distributions, and how many greedy tokens agree before the first
 * difference. The F16 cache in the reference's arithmetic is listed too: its
 * own distance from the default (batch-invariant) F16 shows which
 * differences are near-ties any arithmetic change flips.
 *
 *   bench_kv_types MODEL [STEPS]     (prompts: stories-style sentences)
 */
#include "tokenkv.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const prompts[] = {
    "Once upon a time",
    "Lily wanted to play with her ball",
    "Tom had a red car",
    "The sun was shining and the birds",
    "One day, a little girl named Sue",
    "The cat sat on the mat",
    "Ben and Mia went to the zoo",
    "There was a big tree in the garden",
};
enum { N_PROMPTS = sizeof prompts / sizeof *prompts, MAXP = 64 };

typedef struct variant {
    const char *name;
    tkv_type k, v;
    bool reference_order;
} variant;

static tkv_context *make(const tkv_model *m, const variant *va) {
    tkv_context_params p = tkv_context_default_params();
    p.n_cells = 1024, p.n_seq_max = 1, p.n_threads = 2;
    p.kv_type = va->k, p.kv_type_v = va->v;
    p.batch_invariant = !va->reference_order;
    tkv_context *ctx = NULL;
    if (tkv_context_create(m, &p, &ctx) != TKV_OK) {
        fprintf(stderr, "%s: %s\n", va->name, tkv_last_error(NULL));
        exit(1);
    }
    return ctx;
}

/* Prompt logits (all positions) and a greedy continuation of `steps` tokens. */
static size_t run(const tkv_model *m, const variant *va, const char *text, int steps, float *logits, tkv_token *gen) {
    const size_t nv = tkv_vocab_size(m);
    tkv_context *ctx = make(m, va);
    tkv_token t[MAXP];
    size_t n = 0;
    if (tkv_tokenize(m, text, strlen(text), TKV_TOKENIZE_ADD_SPECIAL, t, MAXP, &n) != TKV_OK) exit(1);
    tkv_pos pos[MAXP];
    tkv_seq sq[MAXP] = {0};
    bool all[MAXP];
    for (size_t i = 0; i < n; i++) pos[i] = (tkv_pos)i, all[i] = true;
    tkv_batch b = {n, t, pos, sq, all};
    if (tkv_decode(ctx, &b) != TKV_OK) exit(1);
    for (size_t i = 0; i < n; i++) memcpy(logits + i * nv, tkv_get_logits(ctx, i), nv * sizeof *logits);
    const float *l = tkv_get_logits(ctx, n - 1);
    for (int s = 0; s < steps; s++) {
        size_t best = 0;
        for (size_t v = 1; v < nv; v++) best = l[v] > l[best] ? v : best;
        gen[s] = (tkv_token)best;
        tkv_pos p = (tkv_pos)(n + (size_t)s);
        tkv_seq s0 = 0;
        tkv_batch one = {1, &gen[s], &p, &s0, NULL};
        if (tkv_decode(ctx, &one) != TKV_OK) exit(1);
        l = tkv_get_logits_last(ctx);
    }
    tkv_context_free(ctx);
    return n;
}

static double kl(const float *p_logits, const float *q_logits, size_t nv) {
    double mp = -INFINITY, mq = -INFINITY, sp = 0, sq = 0, d = 0;
    for (size_t i = 0; i < nv; i++) mp = fmax(mp, p_logits[i]), mq = fmax(mq, q_logits[i]);
    for (size_t i = 0; i < nv; i++) sp += exp(p_logits[i] - mp), sq += exp(q_logits[i] - mq);
    for (size_t i = 0; i < nv; i++) {
        const double lp = p_logits[i] - mp - log(sp), lq = q_logits[i] - mq - log(sq);
        d += exp(lp) * (lp - lq);
    }
    return d;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: bench_kv_types MODEL [STEPS]\n");
        return 2;
    }
    const int steps = argc > 2 ? atoi(argv[2]) : 64;
    tkv_model *m = NULL;
    if (tkv_model_load(argv[1], NULL, &m) != TKV_OK) {
        fprintf(stderr, "%s\n", tkv_last_error(NULL));
        return 1;
    }
    static const variant vs[] = {
        {"F16 (reference order)", TKV_TYPE_F16, TKV_TYPE_COUNT, true},
        {"Q8_0", TKV_TYPE_Q8_0, TKV_TYPE_COUNT, false},
        {"Q5_1", TKV_TYPE_Q5_1, TKV_TYPE_COUNT, false},
        {"Q5_0", TKV_TYPE_Q5_0, TKV_TYPE_COUNT, false},
        {"Q4_1", TKV_TYPE_Q4_1, TKV_TYPE_COUNT, false},
        {"Q4_0", TKV_TYPE_Q4_0, TKV_TYPE_COUNT, false},
        {"IQ4_NL", TKV_TYPE_IQ4_NL, TKV_TYPE_COUNT, false},
        {"K Q8_0, V Q4_0", TKV_TYPE_Q8_0, TKV_TYPE_Q4_0, false},
        {"K F16, V Q4_0", TKV_TYPE_F16, TKV_TYPE_Q4_0, false},
    };
    const variant f16 = {"F16", TKV_TYPE_F16, TKV_TYPE_COUNT, false};
    const size_t nv = tkv_vocab_size(m);
    float *ref = malloc(MAXP * nv * sizeof *ref), *got = malloc(MAXP * nv * sizeof *got);
    tkv_token *ref_gen = malloc((size_t)steps * sizeof *ref_gen), *gen = malloc((size_t)steps * sizeof *gen);
    printf("| K/V cache | logits rel. RMS | mean KL | greedy tokens equal (of %d, %d prompts) | prompts fully equal |\n",
           steps, N_PROMPTS);
    printf("|---|---:|---:|---:|---:|\n");
    for (size_t vi = 0; vi < sizeof vs / sizeof *vs; vi++) {
        double d2 = 0, r2 = 0, kls = 0;
        size_t rows = 0, agree = 0, full = 0;
        for (int p = 0; p < N_PROMPTS; p++) {
            const size_t n = run(m, &f16, prompts[p], steps, ref, ref_gen);
            run(m, &vs[vi], prompts[p], steps, got, gen);
            for (size_t i = 0; i < n * nv; i++) d2 += (double)(got[i] - ref[i]) * (got[i] - ref[i]), r2 += (double)ref[i] * ref[i];
            for (size_t i = 0; i < n; i++) kls += kl(ref + i * nv, got + i * nv, nv), rows++;
            int k = 0;
            while (k < steps && gen[k] == ref_gen[k]) k++;
            agree += (size_t)k;
            full += k == steps;
        }
        printf("| %s | %.4f | %.2e | %.1f | %zu |\n", vs[vi].name, sqrt(d2 / r2), kls / (double)rows,
               (double)agree / N_PROMPTS, full);
    }
    free(ref), free(got), free(ref_gen), free(gen);
    tkv_model_free(m);
    return 0;
}
