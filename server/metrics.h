/*
 * metrics.h — the server's counters and histograms, rendered in the
 * Prometheus text format for GET /metrics. Thread-safe.
 */
#ifndef TKV_SRV_METRICS_H
#define TKV_SRV_METRICS_H

#include "tokenkv.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/*
 * The Prometheus text format, written once for every part that exposes
 * metrics (the counters below, the Redis store, the directory saver): a
 * growing string that remembers a failed allocation.
 */
typedef struct srv_prom {
    char *s; /* the text so far (NUL-terminated once anything was put) */
    size_t n, cap;
    bool failed; /* an allocation failed: srv_prom_done gives NULL */
} srv_prom;

/* printf-style text as it is: labelled samples, a histogram's lines. */
void srv_prom_put(srv_prom *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* A metric's "# HELP" and "# TYPE" lines (type: "counter", "gauge", "histogram"). */
void srv_prom_head(srv_prom *p, const char *name, const char *type, const char *help);
/* A whole metric of one sample: its head, then "name value" (%.17g: the double exactly). */
void srv_prom_metric(srv_prom *p, const char *name, const char *type, const char *help, double v);
/* The same for a count (printed as an integer, exact at any size). */
void srv_prom_count(srv_prom *p, const char *name, const char *type, const char *help, unsigned long long v);
/* The text, which the caller frees; NULL when an allocation failed (then nothing is left to free). */
char *srv_prom_done(srv_prom *p);

typedef struct srv_metrics srv_metrics;

srv_metrics *srv_metrics_new(void);
void srv_metrics_free(srv_metrics *m);

/* One finished HTTP request with its status. */
void srv_metrics_request(srv_metrics *m, int status);
/* One finished generation: its tokens. */
void srv_metrics_tokens(srv_metrics *m, uint64_t prompt, uint64_t cached, uint64_t generated);
/* A request preempted for want of cache room or for another client's share (it resumes later). */
void srv_metrics_preemption(srv_metrics *m);
/* Drafts verified in a step, and how many of them were accepted. */
void srv_metrics_drafts(srv_metrics *m, uint64_t drafted, uint64_t accepted);
/* Known tokens taken from the cache without a step (tkv_seq_follow_known). */
void srv_metrics_known(srv_metrics *m, uint64_t n);
/* Time to first token and the mean time per output token, seconds. */
void srv_metrics_ttft(srv_metrics *m, double s);
void srv_metrics_tpot(srv_metrics *m, double s);
/* One pass of the inference thread that decoded a batch, seconds: the calls run before it (a save's
   snapshot, a /metrics view) included, so it is the gap a streaming client sees between two tokens. */
void srv_metrics_step(srv_metrics *m, double s);

/*
 * The whole exposition: the counters above, the cache's stats and the
 * queue depth (read by the caller on the inference thread). Returns a
 * malloc'd string, or NULL when out of memory.
 */
char *srv_metrics_render(srv_metrics *m, const tkv_stats *cache, size_t queue_depth, size_t running);

#endif
