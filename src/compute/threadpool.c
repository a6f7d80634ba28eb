/*
 * threadpool.c — see threadpool.h.
 *
 * A task starts when the caller bumps `generation`; each worker runs it and
 * bumps `n_done`. Waiting is spin-then-sleep: spinning keeps the latency of
 * the many short dispatches of a decode step in microseconds, and after a
 * while a worker sleeps on the condition variable so an idle pool uses no CPU.
 */
#include "threadpool.h"

#include "base/alloc.h"
#include "base/error.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <string.h>

#define SPINS_BEFORE_SLEEP 20000 /* spins (then yields) before a worker sleeps */

struct tkv__pool {
    int n;
    pthread_t *threads;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    atomic_uint generation; /* bumped once per task (and to stop) */
    atomic_int n_done;      /* workers finished with the current task */
    atomic_int n_sleeping;
    atomic_bool stop;
    tkv__task_fn fn;
    void *arg;
    /* barrier */
    atomic_int barrier_count;
    atomic_uint barrier_phase;
};

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

/* Spin politely: after a while yield the CPU, so a thread we wait for that
   the OS has descheduled (more threads than free cores) can run. */
static inline void spin_wait(unsigned *spins) {
    if (++*spins < 20000) cpu_relax();
    else sched_yield();
}

typedef struct worker_arg {
    tkv__pool *p;
    int ith;
} worker_arg;

static void *worker(void *varg) {
    worker_arg wa = *(worker_arg *)varg;
    tkv__free(varg);
    tkv__pool *p = wa.p;
    unsigned seen = 0; /* the generation at creation: a task may start before this thread runs */
    for (;;) {
        /* wait for the next generation: spin, then sleep */
        unsigned spins = 0;
        while (atomic_load_explicit(&p->generation, memory_order_acquire) == seen) {
            if (spins < SPINS_BEFORE_SLEEP) {
                spin_wait(&spins);
                continue;
            }
            pthread_mutex_lock(&p->mu);
            atomic_fetch_add(&p->n_sleeping, 1);
            while (atomic_load(&p->generation) == seen) pthread_cond_wait(&p->cv, &p->mu);
            atomic_fetch_sub(&p->n_sleeping, 1);
            pthread_mutex_unlock(&p->mu);
        }
        seen = atomic_load(&p->generation);
        if (atomic_load(&p->stop)) return NULL;
        p->fn(p->arg, wa.ith, p->n);
        atomic_fetch_add_explicit(&p->n_done, 1, memory_order_release);
    }
}

tkv_status tkv__pool_create(int n_threads, tkv__pool **out) {
    if (n_threads < 1) n_threads = 1;
    tkv__pool *p = tkv__calloc(1, sizeof *p);
    if (!p) return tkv__fail(TKV_ERR_NOMEM, "out of memory for the thread pool");
    p->n = n_threads;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    p->threads = tkv__calloc((size_t)n_threads, sizeof *p->threads);
    if (!p->threads) {
        tkv__pool_free(p);
        return tkv__fail(TKV_ERR_NOMEM, "out of memory for the thread pool");
    }
    for (int i = 1; i < n_threads; i++) {
        worker_arg *wa = tkv__malloc(sizeof *wa);
        if (wa) *wa = (worker_arg){p, i};
        int rc = wa ? pthread_create(&p->threads[i], NULL, worker, wa) : -1;
        if (rc != 0) {
            tkv__free(wa);
            p->n = i; /* join the ones started */
            tkv__pool_free(p);
            return tkv__fail(TKV_ERR_NOMEM, "cannot start thread %d of %d: %s", i, n_threads,
                             rc > 0 ? strerror(rc) : "out of memory");
        }
    }
    *out = p;
    return TKV_OK;
}

static void bump(tkv__pool *p) {
    atomic_fetch_add(&p->generation, 1); /* seq_cst: ordered before the n_sleeping read */
    if (atomic_load(&p->n_sleeping) > 0) {
        pthread_mutex_lock(&p->mu);
        pthread_cond_broadcast(&p->cv);
        pthread_mutex_unlock(&p->mu);
    }
}

void tkv__pool_free(tkv__pool *p) {
    if (!p) return;
    if (p->threads) {
        atomic_store(&p->stop, true);
        pthread_mutex_lock(&p->mu);
        atomic_fetch_add(&p->generation, 1);
        pthread_cond_broadcast(&p->cv);
        pthread_mutex_unlock(&p->mu);
        for (int i = 1; i < p->n; i++) pthread_join(p->threads[i], NULL);
    }
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv);
    tkv__free(p->threads);
    tkv__free(p);
}

int tkv__pool_size(const tkv__pool *p) { return p->n; }

void tkv__pool_run(tkv__pool *p, tkv__task_fn fn, void *arg) {
    if (p->n == 1) {
        fn(arg, 0, 1);
        return;
    }
    p->fn = fn;
    p->arg = arg;
    atomic_store(&p->n_done, 0);
    bump(p);
    fn(arg, 0, p->n);
    unsigned spins = 0;
    while (atomic_load_explicit(&p->n_done, memory_order_acquire) < p->n - 1) spin_wait(&spins);
}

void tkv__pool_barrier(tkv__pool *p) {
    if (p->n == 1) return;
    unsigned phase = atomic_load_explicit(&p->barrier_phase, memory_order_acquire);
    if (atomic_fetch_add_explicit(&p->barrier_count, 1, memory_order_acq_rel) == p->n - 1) {
        atomic_store_explicit(&p->barrier_count, 0, memory_order_relaxed);
        atomic_fetch_add_explicit(&p->barrier_phase, 1, memory_order_release);
        return;
    }
    unsigned spins = 0;
    while (atomic_load_explicit(&p->barrier_phase, memory_order_acquire) == phase) spin_wait(&spins);
}
