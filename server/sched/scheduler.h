/*
 * scheduler.h — the scheduler: one inference thread owns the context and runs
 * continuous batching over the requests the HTTP side queues.
 *
 * Each step decodes one token for every generating request plus chunks of
 * prompt for newly admitted ones, up to the batch size. Every prompt first
 * takes the longest prefix any earlier request left in the cache
 * (tkv_seq_attach); admission prefers the waiting request with the longest
 * cached prefix without starving the others, and holds back a request whose
 * prompt shares a prefix that a running request is computing right now, so
 * that prefix is computed once.
 */
#ifndef TKV_SRV_SCHEDULER_H
#define TKV_SRV_SCHEDULER_H

#include "job.h"
#include "metrics.h"
#include "request.h"

typedef struct srv_sched srv_sched;

typedef struct srv_sched_opts {
    int parallel;         /* sequences decoded together */
    size_t max_queue;     /* waiting requests beyond which submissions are refused */
    uint32_t n_ctx;       /* positions per sequence (prompt + completion) */
    uint32_t shift_window; /* --context-shift: a generating sequence that reaches this many positions drops
                              tokens after its kept prefix and recomputes the rest (0: it ends, "length") */
    uint32_t n_batch;     /* tokens per step (the context's n_batch) */
    bool no_prefix_cache; /* every request in its own namespace: nothing is reused */
    bool draft_always;    /* every draft within its budget goes in, not only those worth their rows (draftcost.h) */
    bool no_known;        /* drafting requests do not take known tokens from the tree (tkv_seq_follow_known) */
    struct srv_store *store; /* the shared prefix store (redis_store.h), or NULL */
    struct srv_disk *disk; /* --cache-disk: prefixes evicted from RAM come back from it; NULL: none */
} srv_sched_opts;

/* Start the inference thread over ctx (which it then owns until
   srv_sched_stop). NULL when out of memory or the thread cannot start. */
srv_sched *srv_sched_start(tkv_context *ctx, const srv_sched_opts *o, srv_metrics *metrics);

/* Queue a request (the scheduler takes its own reference), unless the queue
   is full (max_queue waiting), its client holds its share of the queue
   (srv_policy_queue_admits: half of it) or the scheduler is stopping. */
typedef enum { SRV_SUBMIT_OK, SRV_SUBMIT_QUEUE_FULL, SRV_SUBMIT_STOPPING } srv_submit;
srv_submit srv_sched_submit(srv_sched *s, srv_req *r);

/* Run fn(ctx, user) on the inference thread between two steps and wait for
   it: the only way another thread may look at the context. Not run once the
   scheduler stops (the context is then the caller's). */
void srv_sched_call(srv_sched *s, void (*fn)(tkv_context *ctx, void *user), void *user);

/* The same without waiting, for the HTTP side, which must never block (job.h). */
void srv_sched_post(srv_sched *s, srv_job *job);
/* srv_sched_post as a sink, for the tiers (which do not know the scheduler). */
srv_job_sink srv_sched_sink(srv_sched *s);

/* Requests waiting and running now. */
void srv_sched_load(srv_sched *s, size_t *waiting, size_t *running);

/* The sequence id and length of each running request (for /v1/cache); call
   on the inference thread (inside srv_sched_call). Returns how many. */
size_t srv_sched_slots(srv_sched *s, tkv_seq *seq, const srv_req **req, size_t cap);

/* A slot as GET /slots shows it: its request (NULL: idle), the tokens its
   sequence holds and the tokens generated so far. */
typedef struct srv_slot_state {
    const srv_req *req;
    size_t n_past;
    int n_gen;
} srv_slot_state;

/* Every slot, idle or not, in slot order; call on the inference thread.
   Returns how many (at most cap). */
size_t srv_sched_slot_states(srv_sched *s, srv_slot_state *out, size_t cap);

/* Fail waiting and running requests (SRV_FAIL_STOPPING), join the thread; later
   submissions are refused (SRV_SUBMIT_STOPPING). The context is the caller's again. */
void srv_sched_stop(srv_sched *s);

/* Free a stopped scheduler, once no other thread can reach it. */
void srv_sched_free(srv_sched *s);

#endif
