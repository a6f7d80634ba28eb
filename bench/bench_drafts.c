/*
 * bench_drafts.c — generation with and without drafts from the cache
 * (`bench_drafts MODEL [-n TOKENS] [-d DRAFT] [-t THREADS] [-r REPS]`),
 * greedy, on three workloads:
 *   retry    the same prompt again: the tree holds the earlier answer
 *   copy     a prompt that holds a passage twice and the start of it a third
 *            time (drafts from the text itself, wherever the model copies)
 *   none     a fresh prompt of random tokens in a fresh context: little to copy
 * Each workload runs plain and drafted alternately REPS times (so a load
 * that changes during the run touches both alike) and reports the median
 * tokens per second of each, their ratio, the drafts accepted per step, and
 * whether the tokens were the same (they must be).
 */
#include "bench_clock.h"
#include "tokenkv.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

typedef struct run {
    double tps;
    size_t n, steps;
    tkv_token gen[1024];
} run;

/* Greedy generation of up to n tokens after p in sequence s (drafts of up to `draft` tokens, 0 = none). */
static int generate(tkv_context *ctx, tkv_seq s, const tkv_token *p, size_t n_p, size_t n, size_t draft, run *r) {
    const tkv_model *m = tkv_context_model(ctx);
    tkv_sampler_params sp = tkv_sampler_default_params();
    sp.temperature = 0;
    tkv_sampler *smp = NULL;
    if (tkv_sampler_create(&sp, tkv_vocab_size(m), &smp) != TKV_OK) return -1;
    if (tkv_seq_sync(ctx, s, 0, p, n_p, NULL) != TKV_OK) goto fail;
    const double t0 = now();
    r->n = r->steps = 0;
    tkv_token t = tkv_sampler_sample(smp, tkv_get_logits_last(ctx)), d[TKV_DRAFT_MAX], o[TKV_DRAFT_MAX + 1];
    tkv_draft_budget budget = {0};
    size_t offered = 0, accepted = 0; /* the last step's, for the budget */
    while (!tkv_token_is_eog(m, t)) {
        r->gen[r->n++] = t;
        if (r->n == n) break;
        size_t nd = 0, no = 0;
        const size_t ask = tkv_draft_budget_next(&budget, draft, offered, accepted);
        if (ask && tkv_seq_draft(ctx, s, &t, 1, d, ask, &nd, 0) != TKV_OK) goto fail;
        if (tkv_seq_decode_draft(ctx, s, t, d, nd, smp, n - r->n, o, &no) != TKV_OK) goto fail;
        offered = nd < n - r->n - 1 ? nd : n - r->n - 1, accepted = no - 1;
        r->steps++;
        for (size_t i = 0; i + 1 < no; i++) r->gen[r->n++] = o[i];
        t = o[no - 1];
        if (r->n == n) break;
    }
    r->tps = (double)r->n / (now() - t0);
    tkv_sampler_free(smp);
    return 0;
fail:
    fprintf(stderr, "bench_drafts: %s\n", tkv_last_error(ctx));
    tkv_sampler_free(smp);
    return -1;
}

enum { RETRY, COPY, NONE, WORKLOADS };
static const char *const names[WORKLOADS] = {"retry", "copy", "none"};

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: bench_drafts MODEL [-n TOKENS] [-d DRAFT] [-t THREADS] [-r REPS]\n");
        return 2;
    }
    size_t n = 128, draft = 8;
    int threads = 0, reps = 5;
    for (int i = 2; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "-n")) n = (size_t)atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-d")) draft = (size_t)atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-t")) threads = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-r")) reps = atoi(argv[i + 1]);
    }
    if (n < 2 || n > 1024 || draft < 1 || draft > TKV_DRAFT_MAX || reps < 1 || reps > 99) {
        fprintf(stderr, "bench_drafts: -n 2..1024, -d 1..%d, -r 1..99\n", TKV_DRAFT_MAX);
        return 2;
    }
    tkv_model *m = NULL;
    if (tkv_model_load(argv[1], NULL, &m) != TKV_OK) {
        fprintf(stderr, "bench_drafts: %s\n", tkv_last_error(NULL));
        return 1;
    }
    const size_t V = tkv_vocab_size(m);
    tkv_context_params cp = tkv_context_default_params();
    cp.n_cells = 4096;
    cp.n_seq_max = 2;
    if (threads > 0) cp.n_threads = threads;
    printf("| workload | plain tok/s | drafted tok/s | ratio | drafts accepted per step | same tokens |\n");
    printf("| --- | ---: | ---: | ---: | ---: | --- |\n");
    unsigned rng = 12345;
    for (int w = 0; w < WORKLOADS; w++) {
        double plain[99], drafted[99], acc = 0;
        bool same = true;
        for (int r = 0; r < reps; r++) {
            tkv_token p[400];
            size_t n_p = 0;
            p[n_p++] = tkv_token_bos(m) >= 0 ? tkv_token_bos(m) : 1;
            const size_t body = w == COPY ? 60 : 30;
            for (size_t i = 0; i < body; i++) p[n_p++] = (tkv_token)((rng = rng * 1103515245u + 12345u) >> 8) % (tkv_token)V;
            if (w == COPY) { /* the passage twice, then its first 10 tokens */
                memcpy(p + n_p, p + 1, body * sizeof *p);
                n_p += body;
                memcpy(p + n_p, p + 1, 10 * sizeof *p);
                n_p += 10;
            }
            static run a, b;
            for (int k = 0; k < 2; k++) { /* plain then drafted, each in a fresh context */
                tkv_context *ctx = NULL;
                if (tkv_context_create(m, &cp, &ctx) != TKV_OK) return 1;
                if (w == RETRY) { /* the earlier request: its answer stays cached */
                    static run warm;
                    if (generate(ctx, 0, p, n_p, n, 0, &warm) || tkv_seq_clear(ctx, 0)) return 1;
                }
                if (generate(ctx, 1, p, n_p, n, k ? draft : 0, k ? &b : &a)) return 1;
                tkv_context_free(ctx);
            }
            plain[r] = a.tps;
            drafted[r] = b.tps;
            acc += (double)(b.n - b.steps) / (double)(b.steps ? b.steps : 1);
            same = same && a.n == b.n && !memcmp(a.gen, b.gen, a.n * sizeof *a.gen);
        }
        qsort(plain, (size_t)reps, sizeof *plain, cmp_double);
        qsort(drafted, (size_t)reps, sizeof *drafted, cmp_double);
        const double mp = plain[reps / 2], md = drafted[reps / 2];
        printf("| %s | %.1f | %.1f | %.2fx | %.2f | %s |\n", names[w], mp, md, md / mp, acc / reps, same ? "yes" : "NO");
        fflush(stdout);
    }
    tkv_model_free(m);
    return 0;
}
