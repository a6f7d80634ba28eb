/*
 * threadpool.h — a persistent pool of threads that run one task together.
 *
 * The forward pass is a chain of steps separated by barriers (norm ->
 * quantize -> matmul -> ...). The pool runs a task on its threads at once
 * (the calling thread is thread 0) and offers a barrier inside the task, so a
 * whole forward pass is one dispatch. Waits spin briefly and then sleep, so
 * an idle pool costs nothing; the pool never runs more threads than the
 * CPUs it may use, and stops spinning when others need them.
 */
#ifndef TKV_THREADPOOL_H
#define TKV_THREADPOOL_H

#include "tokenkv_types.h"

typedef struct tkv__pool tkv__pool;

/* ith in [0, nth): which share of the work this thread does. */
typedef void (*tkv__task_fn)(void *arg, int ith, int nth);

/* A pool of n_threads (>= 1; the caller counts as one). */
tkv_status tkv__pool_create(int n_threads, tkv__pool **out);

/* Stop and join the workers; NULL is a no-op. */
void tkv__pool_free(tkv__pool *p);

int tkv__pool_size(const tkv__pool *p);

/* Run fn(arg, ith, nth) for ith in [0, nth) on nth threads, nth <= the
   pool's size (fewer when the process may use fewer CPUs, or while other
   work takes them: see threadpool.c); returns when all have finished. The
   caller's thread runs ith 0. Not re-entrant: one task at a time per pool. */
void tkv__pool_run(tkv__pool *p, tkv__task_fn fn, void *arg);

/* The contention rule's decision on a worker's window of `wanted` ns of CPU time it wanted, `waited` of them
   runnable but not running, judged contended twice in a row (threadpool.c's top comment): how many of the
   `active` threads run tasks until the back-off ends. `lasting`: the contention outlasted the last back-off (no
   calm window since), else it may be a burst and only spinning stops (all `active`). Pure; at least 1. */
int tkv__pool_narrow_to(int active, long long waited, long long wanted, bool lasting);

/* Inside a task: wait until every thread running it has reached it. */
void tkv__pool_barrier(tkv__pool *p);

/* tkv__pool_barrier, and a thread that has to wait first asks for [addr, addr + bytes) into its cache (what it
   reads first after the barrier), so that the wait fetches it; the last thread to arrive asks for nothing (it
   would only delay the others). */
void tkv__pool_barrier_warm(tkv__pool *p, const void *addr, size_t bytes);

/* [*r0, *r1): the share of n items of thread ith among nth. */
static inline void tkv__split(size_t n, int ith, int nth, size_t *r0, size_t *r1) {
    *r0 = n * (size_t)ith / (size_t)nth;
    *r1 = n * (size_t)(ith + 1) / (size_t)nth;
}

/* [*r0, *r1): the share of n rows of thread ith among nth in whole groups of g rows (the last group may be short:
   *r1 stops at n), as the products over packed rows take them. */
static inline void tkv__split_groups(size_t n, size_t g, int ith, int nth, size_t *r0, size_t *r1) {
    tkv__split((n + g - 1) / g, ith, nth, r0, r1);
    *r0 *= g, *r1 = *r1 * g < n ? *r1 * g : n;
}

#endif
