/*
 * metrics.h — the server's counters and histograms, rendered in the
 * Prometheus text format for GET /metrics. Thread-safe.
 */
#ifndef TKV_SRV_METRICS_H
#define TKV_SRV_METRICS_H

#include "tokenkv.h"

#include <stddef.h>
#include <stdint.h>

typedef struct srv_metrics srv_metrics;

srv_metrics *srv_metrics_new(void);
void srv_metrics_free(srv_metrics *m);

/* One finished HTTP request with its status. */
void srv_metrics_request(srv_metrics *m, int status);
/* One finished generation: its tokens. */
void srv_metrics_tokens(srv_metrics *m, uint64_t prompt, uint64_t cached, uint64_t generated);
/* A request preempted for want of cache room or for another client's share (it resumes later). */
void srv_metrics_preemption(srv_metrics *m);
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
