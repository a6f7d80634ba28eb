/*
 * redis_store.h — the shared prefix store (--kv-store redis://HOST:PORT[/DB]): a
 * second tier behind the RAM cache that replicas of one model share.
 *
 * A prompt is cut into blocks of SRV_STORE_BLOCK tokens; block i is stored
 * under a key that names the model fingerprint, the KV type, the namespace
 * and a hash chain over blocks 0..i (so the key says which tokens the value
 * must hold), and its value is the cache-file image of tokens 0..end of
 * block i with the K/V of block i only (tkv_cache_export). A request whose
 * cached prefix stops short of its full blocks asks the store for the
 * following ones before it is admitted; a prompt just computed has its new
 * full blocks written in the background.
 *
 * All network I/O happens on the store's own thread, with a deadline per
 * lookup and per write, caps on what a reply may allocate, and a circuit breaker: the inference thread only exports
 * images (a copy) and imports fetched ones (tkv_cache_import checks every
 * value against what its key promised). A missing, slow or broken Redis
 * costs hits, never a request.
 */
#ifndef TKV_SRV_STORE_H
#define TKV_SRV_STORE_H

#include "job.h"
#include "request.h"

#define SRV_STORE_BLOCK 64

typedef struct srv_store srv_store;

typedef struct srv_store_opts {
    const char *url;       /* redis://HOST:PORT[/DB] */
    int timeout_ms;        /* the deadline of each lookup and each write, connect included */
    size_t max_pending;    /* bytes of values waiting to be written; more are dropped */
    size_t max_value;      /* the largest value a reply may bring (0: 256 MiB); larger replies are refused */
} srv_store_opts;

/* Parse the URL and start the store thread (it connects on first use). The keys name the model's
   fingerprint and the K and V cache types, so replicas of other types never ask for each other's values.
   NULL with a message in err when the URL is bad or out of memory. */
srv_store *srv_store_start(const srv_store_opts *o, const tkv_model *model, tkv_type type_k, tkv_type type_v, char *err,
                           size_t cap);

/* Where fetched prefixes are delivered: jobs posted to this sink (the scheduler's). */
void srv_store_attach(srv_store *st, srv_job_sink sink);

/*
 * Inference thread, a waiting request seen for the first time, `cached` of
 * its tokens t[0..n) cached in ns: when full blocks lie beyond the cached
 * ones and the store is usable, queue a lookup and return true; the
 * request must then wait until r->store_state is SRV_STORE_DONE, which a
 * job posted to the scheduler sets after importing what was found.
 */
bool srv_store_lookup(srv_store *st, srv_req *r, uint64_t ns, const tkv_token *t, size_t n, size_t cached);

/* Inference thread, after a prompt t[0..n) of ns was computed: queue the
   full blocks from the one holding token `from` on for writing. */
void srv_store_put(srv_store *st, tkv_context *ctx, uint64_t ns, const tkv_token *t, size_t n, size_t from);

/* The store's counters in the Prometheus text format (malloc'd; NULL when
   out of memory). */
char *srv_store_render(srv_store *st);

/* Stop the thread (queued lookups end with nothing found, queued writes are
   dropped) and free. Call after srv_sched_stop. NULL: nothing. */
void srv_store_free(srv_store *st);

#endif
