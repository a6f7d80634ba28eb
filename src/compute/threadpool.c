/*
 * threadpool.c — see threadpool.h.
 *
 * A task starts when the caller bumps `generation`; it ends with a barrier
 * of the threads that run it. Two decisions keep threads from fighting over
 * CPUs, and both come from what the kernel says about this process:
 *
 *   How many threads run a task. Never more than the CPUs the process may
 *   use (its affinity mask, re-read every 100 ms, and its cgroup quota):
 *   more can only take turns, and every barrier then costs two context
 *   switches. Workers beyond that count sleep through the task.
 *
 *   Whether a wait spins. Every wait (for a task, at a barrier) spins up to
 *   200 us and then sleeps on a futex. Spinning is right when every thread
 *   has a core: a barrier resolves in microseconds, far below a futex
 *   wake-up. It is ruinous when something else wants the CPUs: the spinner
 *   burns the timeslice the thread it waits for needs, and a decode step
 *   has over a hundred barriers.
 *
 * The signal for the second is each worker's run-queue delay
 * (/proc/thread-self/schedstat, second field: time spent runnable but not
 * running). Over windows of 4 ms of the CPU time it wanted, a worker that
 * waited for a CPU more than a fifth of it, in two windows in a row (a
 * burst, such as a process starting, is not contention), declares it: spinning
 * goes off for the pool, and comes back after a back-off (20 ms, doubling to
 * 1 s while the probes keep finding contention). When they find it again
 * right after a back-off and past three tenths, tasks also run on as many
 * threads as the CPU share the window saw (active x (1 - delay fraction), at
 * least 1) until the next back-off ends: a task's width holds to its end,
 * and a whole decode step is one task, so a burst of a few milliseconds
 * must not narrow a step of hundreds (tkv__pool_narrow_to). Windows are
 * judged only while spinning: a sleeping thread's wake-up latency is
 * run-queue delay too, and would look like contention.
 * Where schedstat cannot be read, the pool spins and uses the static count.
 */
#define _GNU_SOURCE /* syscall, sched_getaffinity */
#include "threadpool.h"

#include "base/alloc.h"
#include "base/error.h"
#include "cpus.h"

#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define SPIN_NS 200000ll          /* a wait spins this long (when spinning is on) before sleeping */
#define WINDOW_NS 4000000ll       /* a worker judges contention over this much wanted CPU time */
#define CONTENDED_PERMILLE 200    /* ... and finds it when it waited for a CPU > 20% of it */
#define STRIKES 2                 /* ... in this many windows in a row */
#define NARROW_PERMILLE 300       /* past this, tasks also run on fewer threads */
#define BACKOFF_MIN_NS 20000000ll /* spinning stays off this long, then is tried again ... */
#define BACKOFF_MAX_NS 1000000000ll /* ... doubling up to this while contention persists */

/* What a worker knows of its own scheduling, for judging contention. */
typedef struct worker {
    struct tkv__pool *p;
    int ith;
    int schedstat;           /* fd of /proc/thread-self/schedstat, -1 if none */
    long long run0, delay0;  /* the window's start: CPU time and run-queue delay (ns) */
    long long next_check;    /* monotonic ns of the next look at the window */
    unsigned epoch0;         /* the spin epoch the window started in */
    bool spin0;              /* whether spinning was on when it started */
    int strikes;             /* contended windows in a row */
    char pad[64];            /* workers' windows on different cache lines */
} worker;

/* The worker running on this thread (NULL on the caller's), so that a
   barrier can look at its window without a parameter. */
static _Thread_local worker *this_worker;

struct tkv__pool {
    int n;
    pthread_t *threads;
    worker *workers; /* (n) [0] unused: the caller's thread does not measure */
    tkv__task_fn fn;
    void *arg;
    atomic_int active; /* threads that run the current task (set before the bump) */
    int quota_cpus;    /* whole CPUs of the cgroup quota at creation, 0 for none */
    int cap;           /* at most this many threads run a task: CPUs we may use */
    long long cap_at;  /* monotonic ns when cap was computed */
    _Alignas(64) atomic_uint generation; /* bumped once per task (and to stop) */
    atomic_int gen_sleepers;
    atomic_bool stop;
    _Alignas(64) atomic_int barrier_count;
    atomic_uint barrier_phase;
    atomic_int phase_sleepers;
    /* the spinning policy (see the top of the file); relaxed: races only
       delay a decision by a window */
    _Alignas(64) atomic_llong spin_off_until; /* monotonic ns; spinning is off before it */
    atomic_llong backoff;                      /* the next off period */
    atomic_uint spin_epoch;                    /* bumped on every switch, to discard straddling windows */
    atomic_int shrunk;                         /* threads per task while spinning is off */
    atomic_bool measured;                      /* some worker reads its schedstat */
};

static long long now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000ll + ts.tv_nsec;
}

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

static void futex_wait(atomic_uint *word, unsigned seen) {
    syscall(SYS_futex, (unsigned *)word, FUTEX_WAIT_PRIVATE, seen, NULL, NULL, 0);
}

static void futex_wake_all(atomic_uint *word) {
    syscall(SYS_futex, (unsigned *)word, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
}

static bool spinning(const tkv__pool *p, long long now) {
    if (!atomic_load_explicit(&p->measured, memory_order_relaxed)) return true;
    return now >= atomic_load_explicit(&p->spin_off_until, memory_order_relaxed);
}

/*
 * Wait until *word is no longer `seen`: spin (while spinning is on, up to
 * SPIN_NS), then sleep on the futex. The sleeper count lets the waker skip
 * the system call when nobody sleeps; with sequentially consistent
 * operations on both sides, either the waker sees the sleeper or the
 * sleeper sees the new value (and the kernel rechecks the value anyway).
 */
static void wait_change(tkv__pool *p, atomic_uint *word, unsigned seen, atomic_int *sleepers) {
    if (atomic_load_explicit(word, memory_order_acquire) != seen) return;
    long long start = now_ns();
    if (spinning(p, start)) {
        for (unsigned i = 1;; i++) {
            cpu_relax();
            if (atomic_load_explicit(word, memory_order_acquire) != seen) return;
            if (i % 64 == 0 && now_ns() - start > SPIN_NS) break;
        }
    }
    while (atomic_load(word) == seen) {
        atomic_fetch_add(sleepers, 1);
        if (atomic_load(word) == seen) futex_wait(word, seen);
        atomic_fetch_sub(sleepers, 1);
    }
}

/* Publish a new value of *word and wake whoever sleeps on it. */
static void bump(atomic_uint *word, atomic_int *sleepers) {
    atomic_fetch_add(word, 1);
    if (atomic_load(sleepers) > 0) futex_wake_all(word);
}

/* This thread's CPU time and run-queue delay in ns; false if unreadable. */
static bool read_schedstat(int fd, long long *run, long long *delay) {
    char buf[96];
    ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
    if (n <= 0) return false;
    buf[n] = '\0';
    return sscanf(buf, "%lld %lld", run, delay) == 2;
}

/*
 * A worker's look at its window (at most once per millisecond of wall time):
 * when it has wanted WINDOW_NS of CPU since the window started, judge it.
 */
static void check_contention(worker *w) {
    tkv__pool *p = w->p;
    long long now = now_ns();
    if (w->schedstat < 0 || now < w->next_check) return;
    w->next_check = now + 1000000;
    long long run, delay;
    if (!read_schedstat(w->schedstat, &run, &delay)) return;
    unsigned epoch = atomic_load_explicit(&p->spin_epoch, memory_order_relaxed);
    long long ran = run - w->run0, waited = delay - w->delay0, wanted = ran + waited;
    bool spin = spinning(p, now);
    bool same = epoch == w->epoch0 && spin == w->spin0;
    if (same && wanted < WINDOW_NS) return;
    w->run0 = run;
    w->delay0 = delay;
    w->epoch0 = epoch;
    w->spin0 = spin;
    if (!same || !spin) return; /* only a whole window of spinning is judged */
    long long backoff = atomic_load_explicit(&p->backoff, memory_order_relaxed);
    if (waited * 1000 <= wanted * CONTENDED_PERMILLE) {
        w->strikes = 0;
        if (backoff != BACKOFF_MIN_NS) atomic_store_explicit(&p->backoff, BACKOFF_MIN_NS, memory_order_relaxed);
    } else if (++w->strikes >= STRIKES) { /* contention that lasts, not a burst */
        w->strikes = 0;
        /* a back-off above the least means no calm window since the last one: the contention outlasted it */
        const int active = atomic_load_explicit(&p->active, memory_order_relaxed);
        atomic_store_explicit(&p->shrunk, tkv__pool_narrow_to(active, waited, wanted, backoff > BACKOFF_MIN_NS),
                              memory_order_relaxed);
        atomic_store_explicit(&p->spin_off_until, now + backoff, memory_order_relaxed);
        atomic_store_explicit(&p->backoff, backoff * 2 < BACKOFF_MAX_NS ? backoff * 2 : BACKOFF_MAX_NS,
                              memory_order_relaxed);
        w->epoch0 = atomic_fetch_add_explicit(&p->spin_epoch, 1, memory_order_relaxed) + 1;
        w->spin0 = false;
    }
}

/* Past three tenths (another busy process on two CPUs) tasks run on the share of the CPUs the window saw, in
   whole threads; below it (a client process beside a server) narrowing loses more than it gains. Only contention
   that outlasted a back-off narrows: a decode step is one task of up to hundreds of milliseconds, and narrowing on a
   burst (a client handling an answer) ran whole steps on one thread (bench/RESULTS.md, Zen 1 drafts). */
int tkv__pool_narrow_to(int active, long long waited, long long wanted, bool lasting) {
    if (!lasting || wanted <= 0 || waited * 1000 <= wanted * NARROW_PERMILLE) return active < 1 ? 1 : active;
    const long long share = (long long)active * (wanted - waited) / wanted; /* the CPU time it got */
    return share < 1 ? 1 : (int)share;
}

static void *worker_main(void *varg) {
    worker *w = varg;
    tkv__pool *p = w->p;
    this_worker = w;
    w->schedstat = open("/proc/thread-self/schedstat", O_RDONLY | O_CLOEXEC);
    if (w->schedstat >= 0 && read_schedstat(w->schedstat, &w->run0, &w->delay0))
        atomic_store(&p->measured, true);
    unsigned seen = 0; /* the generation at creation: a task may start before this thread runs */
    for (;;) {
        check_contention(w);
        wait_change(p, &p->generation, seen, &p->gen_sleepers);
        seen = atomic_load(&p->generation);
        if (atomic_load(&p->stop)) break;
        int k = atomic_load_explicit(&p->active, memory_order_relaxed);
        if (w->ith >= k) continue; /* not needed for this task */
        p->fn(p->arg, w->ith, k);
        tkv__pool_barrier(p);
    }
    if (w->schedstat >= 0) close(w->schedstat);
    return NULL;
}

/* At most this many threads can run at once: the CPUs of the affinity mask
   and of the cgroup quota (n if unknown). */
static int cpu_cap(const tkv__pool *p) {
    cpu_set_t set;
    int cap = p->n;
    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) < cap) cap = CPU_COUNT(&set);
    if (p->quota_cpus > 0 && p->quota_cpus < cap) cap = p->quota_cpus;
    return cap < 1 ? 1 : cap;
}

tkv_status tkv__pool_create(int n_threads, tkv__pool **out) {
    if (n_threads < 1) n_threads = 1;
    tkv__pool *p = tkv__calloc(1, sizeof *p);
    if (!p) return tkv__fail(TKV_ERR_NOMEM, "out of memory for the thread pool");
    p->n = n_threads;
    if (n_threads > 1) {
        tkv__cpus c;
        tkv__cpus_detect("", NULL, 0, &c);
        p->quota_cpus = c.quota > 0 ? (c.quota < 1 ? 1 : (int)c.quota) : 0;
    }
    p->cap = cpu_cap(p);
    p->cap_at = now_ns();
    atomic_store(&p->backoff, BACKOFF_MIN_NS);
    p->threads = tkv__calloc((size_t)n_threads, sizeof *p->threads);
    p->workers = tkv__calloc((size_t)n_threads, sizeof *p->workers);
    if (!p->threads || !p->workers) {
        tkv__pool_free(p);
        return tkv__fail(TKV_ERR_NOMEM, "out of memory for the thread pool");
    }
    for (int i = 1; i < n_threads; i++) {
        p->workers[i] = (worker){.p = p, .ith = i, .schedstat = -1, .spin0 = true};
        int rc = pthread_create(&p->threads[i], NULL, worker_main, &p->workers[i]);
        if (rc != 0) {
            p->n = i; /* join the ones started */
            tkv__pool_free(p);
            return tkv__fail(TKV_ERR_NOMEM, "cannot start thread %d of %d: %s", i, n_threads, strerror(rc));
        }
    }
    *out = p;
    return TKV_OK;
}

void tkv__pool_free(tkv__pool *p) {
    if (!p) return;
    if (p->threads && p->workers) {
        atomic_store(&p->stop, true);
        bump(&p->generation, &p->gen_sleepers);
        for (int i = 1; i < p->n; i++) pthread_join(p->threads[i], NULL);
    }
    tkv__free(p->threads);
    tkv__free(p->workers);
    tkv__free(p);
}

int tkv__pool_size(const tkv__pool *p) { return p->n; }

void tkv__pool_run(tkv__pool *p, tkv__task_fn fn, void *arg) {
    if (p->n == 1) {
        fn(arg, 0, 1);
        return;
    }
    long long now = now_ns();
    if (now - p->cap_at > 100000000) { /* a taskset may change the mask while we run */
        p->cap = cpu_cap(p);
        p->cap_at = now;
    }
    int k = p->cap;
    if (!spinning(p, now)) {
        int shrunk = atomic_load_explicit(&p->shrunk, memory_order_relaxed);
        if (shrunk < k) k = shrunk;
    }
    atomic_store_explicit(&p->active, k, memory_order_relaxed);
    if (k <= 1) { /* the workers sleep through it */
        fn(arg, 0, 1);
        return;
    }
    p->fn = fn;
    p->arg = arg;
    bump(&p->generation, &p->gen_sleepers); /* seq_cst: active, fn and arg are visible to whoever sees it */
    fn(arg, 0, k);
    tkv__pool_barrier(p); /* the task ends when every thread has finished its share */
}

void tkv__pool_barrier_warm(tkv__pool *p, const void *addr, size_t bytes) {
    int k = atomic_load_explicit(&p->active, memory_order_relaxed);
    if (p->n == 1 || k <= 1) return;
    unsigned phase = atomic_load_explicit(&p->barrier_phase, memory_order_acquire);
    if (atomic_fetch_add_explicit(&p->barrier_count, 1, memory_order_acq_rel) == k - 1) {
        atomic_store_explicit(&p->barrier_count, 0, memory_order_relaxed);
        bump(&p->barrier_phase, &p->phase_sleepers);
        return;
    }
    for (size_t o = 0; o < bytes; o += 64) __builtin_prefetch((const char *)addr + o, 0, 3);
    if (this_worker && this_worker->p == p) check_contention(this_worker);
    wait_change(p, &p->barrier_phase, phase, &p->phase_sleepers);
}

void tkv__pool_barrier(tkv__pool *p) {
    tkv__pool_barrier_warm(p, NULL, 0);
}
