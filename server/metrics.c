/*
 * metrics.c — counters and histograms for GET /metrics (Prometheus text
 * exposition format 0.0.4).
 */
#include "metrics.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Histogram bucket bounds, seconds. TTFT spans a cached prompt (ms) to a
   long cold prefill (s); time per output token is ms-scale on CPUs. */
static const double ttft_bounds[] = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30};
static const double tpot_bounds[] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1};
static const double step_bounds[] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5};
#define N_STEP (sizeof step_bounds / sizeof step_bounds[0])
#define N_TTFT (sizeof ttft_bounds / sizeof ttft_bounds[0])
#define N_TPOT (sizeof tpot_bounds / sizeof tpot_bounds[0])

typedef struct hist {
    uint64_t count[16]; /* per bucket (not cumulative) */
    uint64_t n;
    double sum;
} hist;

/* HTTP statuses we count separately; the rest fall into "other". */
static const int statuses[] = {200, 400, 401, 404, 405, 413, 415, 429, 499, 500, 503}; /* 499: the client left */
#define N_STATUS (sizeof statuses / sizeof statuses[0])

struct srv_metrics {
    pthread_mutex_t mu;
    uint64_t requests[N_STATUS + 1];
    uint64_t prompt, cached, generated, preemptions, drafted, draft_accepted, known;
    hist ttft, tpot, step;
    double step_max;
};

srv_metrics *srv_metrics_new(void) {
    srv_metrics *m = calloc(1, sizeof *m);
    if (m) pthread_mutex_init(&m->mu, NULL);
    return m;
}

void srv_metrics_free(srv_metrics *m) {
    if (!m) return;
    pthread_mutex_destroy(&m->mu);
    free(m);
}

void srv_metrics_request(srv_metrics *m, int status) {
    size_t i = 0;
    while (i < N_STATUS && statuses[i] != status) i++;
    pthread_mutex_lock(&m->mu);
    m->requests[i]++;
    pthread_mutex_unlock(&m->mu);
}

void srv_metrics_tokens(srv_metrics *m, uint64_t prompt, uint64_t cached, uint64_t generated) {
    pthread_mutex_lock(&m->mu);
    m->prompt += prompt, m->cached += cached, m->generated += generated;
    pthread_mutex_unlock(&m->mu);
}

void srv_metrics_drafts(srv_metrics *m, uint64_t drafted, uint64_t accepted) {
    pthread_mutex_lock(&m->mu);
    m->drafted += drafted, m->draft_accepted += accepted;
    pthread_mutex_unlock(&m->mu);
}

void srv_metrics_known(srv_metrics *m, uint64_t n) {
    pthread_mutex_lock(&m->mu);
    m->known += n;
    pthread_mutex_unlock(&m->mu);
}

void srv_metrics_preemption(srv_metrics *m) {
    pthread_mutex_lock(&m->mu);
    m->preemptions++;
    pthread_mutex_unlock(&m->mu);
}

static void observe(srv_metrics *m, hist *h, const double *bounds, size_t nb, double s) {
    size_t b = 0;
    while (b < nb && s > bounds[b]) b++;
    pthread_mutex_lock(&m->mu);
    h->count[b]++;
    h->n++;
    h->sum += s;
    pthread_mutex_unlock(&m->mu);
}

void srv_metrics_ttft(srv_metrics *m, double s) { observe(m, &m->ttft, ttft_bounds, N_TTFT, s); }
void srv_metrics_tpot(srv_metrics *m, double s) { observe(m, &m->tpot, tpot_bounds, N_TPOT, s); }
void srv_metrics_step(srv_metrics *m, double s) {
    observe(m, &m->step, step_bounds, N_STEP, s);
    pthread_mutex_lock(&m->mu);
    if (s > m->step_max) m->step_max = s;
    pthread_mutex_unlock(&m->mu);
}

void srv_prom_put(srv_prom *b, const char *fmt, ...) {
    if (b->failed) return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int k = vsnprintf(b->s ? b->s + b->n : NULL, b->s ? b->cap - b->n : 0, fmt, ap);
        va_end(ap);
        if (k < 0) {
            b->failed = true;
            return;
        }
        if (b->s && b->n + (size_t)k < b->cap) {
            b->n += (size_t)k;
            return;
        }
        size_t cap = b->cap ? b->cap * 2 : 4096;
        while (cap < b->n + (size_t)k + 1) cap *= 2;
        char *t = realloc(b->s, cap);
        if (!t) {
            b->failed = true;
            return;
        }
        b->s = t, b->cap = cap;
    }
}

void srv_prom_head(srv_prom *p, const char *name, const char *type, const char *help) {
    srv_prom_put(p, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

void srv_prom_metric(srv_prom *p, const char *name, const char *type, const char *help, double v) {
    srv_prom_head(p, name, type, help);
    srv_prom_put(p, "%s %.17g\n", name, v);
}

void srv_prom_count(srv_prom *p, const char *name, const char *type, const char *help, unsigned long long v) {
    srv_prom_head(p, name, type, help);
    srv_prom_put(p, "%s %llu\n", name, v);
}

char *srv_prom_done(srv_prom *p) {
    if (p->failed) {
        free(p->s);
        *p = (srv_prom){0};
        return NULL;
    }
    return p->s;
}

static void put_hist(srv_prom *b, const char *name, const char *help, const hist *h, const double *bounds, size_t nb) {
    srv_prom_head(b, name, "histogram", help);
    uint64_t cum = 0;
    for (size_t i = 0; i < nb; i++) {
        cum += h->count[i];
        srv_prom_put(b, "%s_bucket{le=\"%g\"} %llu\n", name, bounds[i], (unsigned long long)cum);
    }
    srv_prom_put(b, "%s_bucket{le=\"+Inf\"} %llu\n%s_sum %.17g\n%s_count %llu\n", name, (unsigned long long)h->n, name, h->sum,
        name, (unsigned long long)h->n);
}

/* llama-server's names (llamacpp:*) of the same counts, for dashboards built on it: prompt tokens there are those
   computed, the cached ones apart. */
static void put_llamacpp(srv_prom *b, srv_metrics *m, size_t queue_depth, size_t running) {
    pthread_mutex_lock(&m->mu);
    const double prompt = (double)m->prompt, cached = (double)m->cached, generated = (double)m->generated;
    const double steps = (double)m->step.n;
    pthread_mutex_unlock(&m->mu);
    const struct {
        const char *name, *type, *help;
        double v;
    } rows[] = {
        {"llamacpp:prompt_tokens_total", "counter", "Prompt tokens computed (not taken from the cache).",
         prompt - cached},
        {"llamacpp:prompt_tokens_cache_total", "counter", "Prompt tokens taken from the cache.", cached},
        {"llamacpp:prompt_cache_hit_ratio", "gauge", "Cached prompt tokens / all prompt tokens since start.",
         prompt > 0 ? cached / prompt : 0},
        {"llamacpp:tokens_predicted_total", "counter", "Generated tokens.", generated},
        {"llamacpp:n_decode_total", "counter", "Decode steps.", steps},
        {"llamacpp:requests_processing", "gauge", "Requests being decoded.", (double)running},
        {"llamacpp:requests_deferred", "gauge", "Requests waiting for a sequence.", (double)queue_depth},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++)
        srv_prom_metric(b, rows[i].name, rows[i].type, rows[i].help, rows[i].v);
}

char *srv_metrics_render(srv_metrics *m, const tkv_stats *c, size_t queue_depth, size_t running) {
    srv_prom b = {0};
    pthread_mutex_lock(&m->mu);
    srv_prom_head(&b, "tokenkv_requests_total", "counter", "HTTP requests answered, by status.");
    for (size_t i = 0; i <= N_STATUS; i++) {
        if (i < N_STATUS) srv_prom_put(&b, "tokenkv_requests_total{status=\"%d\"} %llu\n", statuses[i], (unsigned long long)m->requests[i]);
        else srv_prom_put(&b, "tokenkv_requests_total{status=\"other\"} %llu\n", (unsigned long long)m->requests[i]);
    }
    srv_prom_metric(&b, "tokenkv_prompt_tokens_total", "counter", "Prompt tokens of finished generations.", (double)m->prompt);
    srv_prom_metric(&b, "tokenkv_cached_prompt_tokens_total", "counter", "Prompt tokens reused from the cache.", (double)m->cached);
    srv_prom_metric(&b, "tokenkv_generated_tokens_total", "counter", "Completion tokens generated.", (double)m->generated);
    srv_prom_metric(&b, "tokenkv_preemptions_total", "counter",
               "Requests preempted for want of cache room or for another client's share of the slots (they resume where they were).", (double)m->preemptions);
    srv_prom_metric(&b, "tokenkv_draft_tokens_total", "counter",
                    "Draft tokens from the cache verified (--draft, speculative.n_max).", (double)m->drafted);
    srv_prom_metric(&b, "tokenkv_draft_accepted_tokens_total", "counter",
                    "Draft tokens accepted: generated without a step of their own.", (double)m->draft_accepted);
    srv_prom_metric(&b, "tokenkv_draft_known_tokens_total", "counter",
                    "Tokens a greedy request took from the cache without computing them: what argmax decoding chose "
                    "after the same text before (--draft, --no-draft-known).", (double)m->known);
    put_hist(&b, "tokenkv_time_to_first_token_seconds", "From arrival to the first generated token.", &m->ttft,
             ttft_bounds, N_TTFT);
    put_hist(&b, "tokenkv_time_per_output_token_seconds", "Mean time per generated token after the first.", &m->tpot,
             tpot_bounds, N_TPOT);
    put_hist(&b, "tokenkv_step_seconds",
             "Decode steps: one pass of the inference thread that decoded a batch, with what ran before it.",
             &m->step, step_bounds, N_STEP);
    srv_prom_metric(&b, "tokenkv_step_seconds_max", "gauge", "The longest decode step since start.", m->step_max);
    pthread_mutex_unlock(&m->mu);
    srv_prom_metric(&b, "tokenkv_queue_depth", "gauge", "Requests waiting for a sequence.", (double)queue_depth);
    srv_prom_metric(&b, "tokenkv_running_requests", "gauge", "Requests being decoded.", (double)running);
    srv_prom_metric(&b, "tokenkv_cache_cells", "gauge", "KV cells in the cache.", (double)c->cells_total);
    srv_prom_metric(&b, "tokenkv_cache_cells_used", "gauge", "KV cells holding a token.", (double)c->cells_used);
    srv_prom_metric(&b, "tokenkv_cache_cells_evictable", "gauge", "Cached cells no sequence holds and nobody pinned.",
               (double)c->cells_evictable);
    srv_prom_metric(&b, "tokenkv_cache_cells_shared", "gauge", "Cells used by two or more sequences.", (double)c->cells_shared);
    srv_prom_metric(&b, "tokenkv_cache_nodes", "gauge", "Prefix-index nodes.", (double)c->nodes);
    srv_prom_metric(&b, "tokenkv_cache_evictions_total", "counter", "Cells evicted to make room.", (double)c->evictions);
    srv_prom_metric(&b, "tokenkv_cache_tokens_reused_total", "counter", "Tokens taken from the cache.", (double)c->tokens_reused);
    srv_prom_metric(&b, "tokenkv_cache_tokens_computed_total", "counter", "Tokens decoded.", (double)c->tokens_computed);
    if (c->checkpoint_budget_bytes) { /* a hybrid model's recurrent-state checkpoints */
        srv_prom_metric(&b, "tokenkv_cache_checkpoints", "gauge", "Recurrent-state checkpoints held.", (double)c->checkpoints);
        srv_prom_metric(&b, "tokenkv_cache_checkpoint_bytes", "gauge",
                   "Memory of the checkpoint slots made so far (held or free for reuse).", (double)c->checkpoint_bytes);
        srv_prom_metric(&b, "tokenkv_cache_checkpoint_budget_bytes", "gauge",
                   "The most the checkpoints may take (--state-cache, at least --parallel + 2 states).",
                   (double)c->checkpoint_budget_bytes);
        srv_prom_metric(&b, "tokenkv_cache_checkpoint_evictions_total", "counter",
                   "Checkpoints evicted, least recently used first, to make room.", (double)c->checkpoint_evictions);
        srv_prom_metric(&b, "tokenkv_cache_state_scratch_bytes", "gauge",
                   "The decode's working states and uncommitted checkpoint copies (outside the budget).",
                   (double)c->state_scratch_bytes);
    }
    put_llamacpp(&b, m, queue_depth, running);
    return srv_prom_done(&b);
}
