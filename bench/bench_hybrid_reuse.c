/*
 * bench_hybrid_reuse.c — how much of the reusable prefix a delta-net hybrid
 * reuses (issue 34: "any other divergence is reused to within K tokens ...
 * at least 80% of the longest common prefixes over a mix of 100-200-token
 * prompts that diverge at arbitrary points").
 *
 *   bench_hybrid_reuse [MODEL] [-n PROMPTS] [-s SEED] [-m STATE_MIB] [-t THREADS]
 *
 * Workload: PROMPTS (default 200) token lists of random length 100-200;
 * each after the first copies a random earlier one up to a random point
 * and goes on with tokens of its own. Each is tkv_seq_sync'ed into one
 * sequence of a context big enough to keep every token cached (so the
 * longest common prefix with anything synced before is all cached K/V).
 * For every state_interval K (0: checkpoints only at prompt ends and branch
 * points; 8, 16, 32, 64) it reports sum(n_reused) / sum(ideal), the ideal
 * being each prompt's longest common prefix with an earlier one (at most
 * its length less one: the last token is decoded for its logits), the
 * largest shortfall of one prompt, the checkpoints held and their memory.
 * Every sync's n_reused must equal the tokens it did not compute
 * (tkv_cache_stats), and no cell may be evicted.
 *
 * The replay: a prompt that reuses less than its ideal computes the tokens
 * between its deepest checkpoint and its common prefix again (their K/V is
 * cached; the recurrent layers need them). "replay/div" is their mean per
 * prompt that had a common prefix, "replay_ms" that many tokens at the
 * run's own prefill rate (its time over the tokens it computed).
 */
#include "bench_clock.h"
#include "tokenkv.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { MAX_PROMPTS = 2000, MIN_LEN = 100, MAX_LEN = 200 };

typedef struct prompt {
    size_t n, ideal;
    tkv_token t[MAX_LEN];
} prompt;

static size_t common(const prompt *a, const prompt *b) {
    size_t i = 0;
    while (i < a->n && i < b->n && a->t[i] == b->t[i]) i++;
    return i;
}

/* The mix: prompt i > 0 follows a random earlier one for a random number of tokens, then goes its own way. */
static void make_mix(prompt *p, size_t n, unsigned seed, tkv_token vocab) {
    for (size_t i = 0; i < n; i++) {
        prompt *q = &p[i];
        q->n = MIN_LEN + (size_t)rand_r(&seed) % (MAX_LEN - MIN_LEN + 1);
        size_t d = 0;
        const prompt *from = NULL;
        if (i > 0) {
            from = &p[(size_t)rand_r(&seed) % i];
            const size_t most = (q->n < from->n ? q->n : from->n) - 1;
            d = 1 + (size_t)rand_r(&seed) % most; /* 1 .. most: the divergence point */
        }
        for (size_t k = 0; k < q->n; k++) {
            if (k < d) {
                q->t[k] = from->t[k];
                continue;
            }
            do q->t[k] = (tkv_token)(3 + rand_r(&seed) % (unsigned)(vocab - 3));
            while (from && k == d && k < from->n && q->t[k] == from->t[k]);
        }
        q->ideal = 0;
        for (size_t j = 0; j < i; j++) {
            const size_t c = common(q, &p[j]);
            if (c > q->ideal) q->ideal = c;
        }
        if (q->ideal > q->n - 1) q->ideal = q->n - 1;
    }
}

static void die(const char *what, const char *msg) {
    fprintf(stderr, "bench_hybrid_reuse: %s: %s\n", what, msg);
    exit(1);
}

int main(int argc, char **argv) {
    const char *path = "../shared/models/arch/qwen35.gguf";
    size_t n = 200;
    unsigned seed = 34;
    uint32_t mib = 0, threads = 1;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-n") && i + 1 < argc) n = (size_t)atoi(argv[++i]);
        else if (!strcmp(argv[i], "-s") && i + 1 < argc) seed = (unsigned)atoi(argv[++i]);
        else if (!strcmp(argv[i], "-m") && i + 1 < argc) mib = (uint32_t)atoi(argv[++i]);
        else if (!strcmp(argv[i], "-t") && i + 1 < argc) threads = (uint32_t)atoi(argv[++i]);
        else if (argv[i][0] != '-') path = argv[i];
        else die(argv[i], "unknown option (usage: bench_hybrid_reuse [MODEL] [-n PROMPTS] [-s SEED] [-m STATE_MIB] [-t THREADS])");
    }
    if (n < 1 || n > MAX_PROMPTS) die("-n", "between 1 and 2000 prompts");
    tkv_model *model;
    if (tkv_model_load(path, NULL, &model) != TKV_OK) die(path, tkv_last_error(NULL));
    prompt *p = calloc(n, sizeof *p);
    if (!p) die("prompts", "out of memory");
    make_mix(p, n, seed, (tkv_token)tkv_vocab_size(model));
    size_t total = 0, ideal = 0;
    for (size_t i = 0; i < n; i++) total += p[i].n, ideal += p[i].ideal;
    printf("%s: %zu prompts of %d-%d tokens (%zu in all), seed %u; ideal reuse %zu tokens\n", path, n, MIN_LEN, MAX_LEN,
           total, seed, ideal);
    size_t n_div = 0;
    for (size_t i = 0; i < n; i++) n_div += p[i].ideal > 0;
    printf("%4s %8s %8s %7s %9s %10s %9s %7s %8s %10s %8s %7s\n", "K", "reused", "ideal", "share", "shortfall",
           "replay/div", "replay_ms", "held", "evicted", "state_MiB", "kv_MiB", "time_s");
    static const uint32_t intervals[] = {0, 8, 16, 32, 64};
    const double one_kib = (double)tkv_model_state_size(model) / 1024;
    if (one_kib == 0) die(path, "not a model with recurrent state");
    for (size_t r = 0; r < sizeof intervals / sizeof *intervals; r++) {
        tkv_context_params cp = tkv_context_default_params();
        cp.n_cells = (uint32_t)total + 8; /* every token stays cached */
        cp.n_seq_max = 1;
        cp.n_threads = threads;
        cp.state_interval = intervals[r];
        if (mib) cp.state_cache_mib = mib;
        tkv_context *ctx;
        if (tkv_context_create(model, &cp, &ctx) != TKV_OK) die("context", tkv_last_error(NULL));
        size_t reused_all = 0, worst = 0;
        tkv_stats st;
        const double t0 = now();
        for (size_t i = 0; i < n; i++) {
            tkv_cache_stats_ex(ctx, &st, sizeof st);
            const uint64_t c0 = st.tokens_computed;
            size_t reused;
            if (tkv_seq_sync(ctx, 0, 0, p[i].t, p[i].n, &reused) != TKV_OK) die("sync", tkv_last_error(ctx));
            tkv_cache_stats_ex(ctx, &st, sizeof st);
            if (st.tokens_computed - c0 != p[i].n - reused) die("sync", "n_reused is not the tokens not computed");
            if (reused > p[i].ideal) die("sync", "reused more than the longest common prefix");
            reused_all += reused;
            if (p[i].ideal - reused > worst) worst = p[i].ideal - reused;
        }
        const double secs = now() - t0;
        if (tkv_cache_check(ctx) != TKV_OK) die("tkv_cache_check", tkv_last_error(ctx));
        tkv_cache_stats_ex(ctx, &st, sizeof st);
        if (st.evictions) die("cells", "evicted: the reuse would not be the checkpoints' alone");
        const double replay = n_div ? (double)(ideal - reused_all) / (double)n_div : 0;
        const double ms_per_token = 1e3 * secs / (double)st.tokens_computed;
        printf("%4u %8zu %8zu %6.1f%% %9zu %10.1f %9.2f %7llu %8llu %10.1f %8.1f %7.2f\n", intervals[r], reused_all,
               ideal, ideal ? 100.0 * (double)reused_all / (double)ideal : 100.0, worst, replay, replay * ms_per_token,
               (unsigned long long)st.checkpoints, (unsigned long long)st.checkpoint_evictions,
               (double)st.checkpoint_bytes / (1 << 20), (double)st.kv_bytes / (1 << 20), secs);
        tkv_context_free(ctx);
    }
    printf("one state: %.1f KiB; %zu prompts with a common prefix; shortfall: the most one prompt fell short of its "
           "ideal; replay/div: tokens computed again per such prompt; held: checkpoints at the end; state_MiB: the "
           "slots' memory\n", one_kib, n_div);
    free(p);
    tkv_model_free(model);
    return 0;
}
