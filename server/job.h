/*
 * job.h — work for the inference thread: the only thread that may touch the
 * context runs a job between two decode steps. Shared vocabulary, so that a
 * tier (tiers/) can hand the scheduler work without knowing the scheduler.
 */
#ifndef TKV_SRV_JOB_H
#define TKV_SRV_JOB_H

#include "tokenkv.h"

#include <stdbool.h>

typedef struct srv_job {
    void (*fn)(tkv_context *ctx, void *user);
    /* Then done(job, true), on the inference thread; done(job, false) without
       fn when the scheduler stopped first (on the thread that stopped it, or
       inside the post). The job is the caller's again inside done. */
    void (*done)(struct srv_job *job, bool ran);
    void *user;
    bool view;            /* a view (GET /v1/cache, /metrics, /slots): while requests run, one per step */
    struct srv_job *next; /* the scheduler's */
} srv_job;

/* Where jobs go (the scheduler's srv_sched_post), as a function and its
   argument: what a tier holds instead of the scheduler itself. */
typedef struct srv_job_sink {
    void (*post)(void *to, srv_job *job);
    void *to;
} srv_job_sink;

#endif
