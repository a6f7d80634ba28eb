/*
 * test_threadpool.c — the pool runs every share of every task exactly once
 * (shares 0..nth-1 for one nth per task, 1 <= nth <= the pool's size, never
 * more than the CPUs the process may use), its barrier separates stages
 * (every thread sees every other's writes of the stage before), and both
 * hold whatever the waits do: spinning, sleeping on the futex (a thread late
 * by milliseconds), or more threads than CPUs. Speed is not asserted here
 * (bench/contention measures it).
 */
#define _GNU_SOURCE /* sched_setaffinity */
#include "testutil.h"

#include "base/alloc.h"
#include "compute/threadpool.h"

#include <sched.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>

#define MAX_T 16
#define STAGES 8

typedef struct job {
    atomic_int calls[MAX_T]; /* shares run in this task, per ith */
    atomic_int nth_seen;     /* the nth of the task's calls (0: none yet) */
    atomic_int bad_nth;      /* calls whose nth differs from another call's */
    /* stage s: thread i writes slot[s][i] = task id + s, then a barrier;
       after it, every thread checks every slot of stage s */
    int slot[STAGES][MAX_T];
    atomic_int mismatches;
    int task;
    int late_ms; /* thread nth-1 sleeps this long before each barrier */
} job;

static void sleep_ms(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static void task_fn(void *arg, int ith, int nth, tkv__pool *pool) {
    job *j = arg;
    atomic_fetch_add(&j->calls[ith], 1);
    int expect = 0;
    if (!atomic_compare_exchange_strong(&j->nth_seen, &expect, nth) && expect != nth)
        atomic_fetch_add(&j->bad_nth, 1);
    for (int s = 0; s < STAGES; s++) {
        j->slot[s][ith] = j->task + s;
        if (j->late_ms && ith == nth - 1) sleep_ms(j->late_ms);
        tkv__pool_barrier(pool);
        for (int i = 0; i < nth; i++)
            if (j->slot[s][i] != j->task + s) atomic_fetch_add(&j->mismatches, 1);
    }
}

/* the pool is reached through the job (the task signature has no pool) */
typedef struct run {
    job j;
    tkv__pool *pool;
} run;

static void run_fn(void *arg, int ith, int nth) {
    run *r = arg;
    task_fn(&r->j, ith, nth, r->pool);
}

static int cpus_allowed(void) {
    cpu_set_t set;
    assert_int_equal(sched_getaffinity(0, sizeof set, &set), 0);
    return CPU_COUNT(&set);
}

/*
 * Run `tasks` tasks on a pool of n threads: each runs shares 0..nth-1 once,
 * with one nth, at most min(n, CPUs allowed); every stage is seen whole.
 * Returns the largest nth seen.
 */
static int check_pool(int n, int tasks, int late_ms) {
    tkv__pool *pool = NULL;
    assert_int_equal(tkv__pool_create(n, &pool), TKV_OK);
    assert_int_equal(tkv__pool_size(pool), n);
    int most = n < cpus_allowed() ? n : cpus_allowed(), widest = 0;
    static run r;
    memset(&r, 0, sizeof r);
    r.pool = pool;
    r.j.late_ms = late_ms;
    for (int t = 0; t < tasks; t++) {
        r.j.task = 1000 * (t + 1);
        for (int i = 0; i < MAX_T; i++) atomic_store(&r.j.calls[i], 0);
        atomic_store(&r.j.nth_seen, 0);
        tkv__pool_run(pool, run_fn, &r);
        /* the task is over when run returns: every share has finished */
        int nth = atomic_load(&r.j.nth_seen);
        assert_true(nth >= 1 && nth <= most);
        for (int i = 0; i < MAX_T; i++) assert_int_equal(atomic_load(&r.j.calls[i]), i < nth ? 1 : 0);
        if (nth > widest) widest = nth;
    }
    assert_int_equal(atomic_load(&r.j.bad_nth), 0);
    assert_int_equal(atomic_load(&r.j.mismatches), 0);
    tkv__pool_free(pool);
    return widest;
}

static void test_shares_and_barriers(void **state) {
    (void)state;
    for (int n = 1; n <= 4; n++) check_pool(n, 2000, 0);
    /* more threads than CPUs: never more shares at once than CPUs */
    check_pool(MAX_T, 200, 0);
}

/* A thread late by milliseconds: the others stop spinning and sleep on the
   futex, and must be woken by the last arrival. */
static void test_late_thread_wakes_sleepers(void **state) {
    (void)state;
    if (cpus_allowed() < 2) TU_SKIP();
    assert_int_equal(check_pool(2, 20, 3), 2);
}

/* Run tasks, a millisecond apart, until one runs on `want` threads (the
   pool looks at its mask every 100 ms): true if one did within 400. */
static bool reaches_width(run *r, int want) {
    for (int t = 0; t < 400; t++) {
        atomic_store(&r->j.nth_seen, 0);
        tkv__pool_run(r->pool, run_fn, r);
        if (atomic_load(&r->j.nth_seen) == want) return true;
        sleep_ms(1);
    }
    return false;
}

/* Pinned to one CPU after the pool was made (a taskset on a running
   server): tasks go on, on one thread, and widen again when the CPUs come
   back. */
static void test_mask_shrinks_and_grows(void **state) {
    (void)state;
    if (cpus_allowed() < 2) TU_SKIP();
    cpu_set_t old, one;
    assert_int_equal(sched_getaffinity(0, sizeof old, &old), 0);
    CPU_ZERO(&one);
    for (int c = 0; c < CPU_SETSIZE; c++)
        if (CPU_ISSET(c, &old)) {
            CPU_SET(c, &one);
            break;
        }
    static run r;
    memset(&r, 0, sizeof r);
    assert_int_equal(tkv__pool_create(2, &r.pool), TKV_OK);
    assert_int_equal(sched_setaffinity(0, sizeof one, &one), 0);
    const bool narrowed = reaches_width(&r, 1);
    assert_int_equal(sched_setaffinity(0, sizeof old, &old), 0);
    /* two shares again (had the machine been busy enough for the pool to
       narrow itself, it widens back within its back-off) */
    const bool widened = reaches_width(&r, 2);
    tkv__pool_free(r.pool);
    assert_true(narrowed);
    assert_true(widened);
    assert_int_equal(atomic_load(&r.j.mismatches), 0);
}

/* The narrowing rule (tkv__pool_narrow_to): a burst only stops spinning; contention that outlasted a back-off
   past three tenths of the window runs tasks on the share of the threads the window got, in whole threads, at least
   one. The expectation in float64, from the rule's words. */
static void test_narrow_rule(void **state) {
    (void)state;
    const long long wanted = 4000000;
    for (int active = 1; active <= 8; active++)
        for (long long waited = 0; waited <= wanted; waited += wanted / 40) {
            assert_int_equal(tkv__pool_narrow_to(active, waited, wanted, false), active); /* a burst */
            const double frac = (double)waited / (double)wanted;
            int want = active;
            if (frac > 0.3 + 1e-12) {
                want = (int)((double)active * (1 - frac) + 1e-9);
                if (want < 1) want = 1;
            }
            assert_int_equal(tkv__pool_narrow_to(active, waited, wanted, true), want);
        }
    /* the drafting server's bursts: 2 threads, a window half waited: narrowed only when it lasted */
    assert_int_equal(tkv__pool_narrow_to(2, 2058771, 2096251 + 2058771, false), 2);
    assert_int_equal(tkv__pool_narrow_to(2, 2058771, 2096251 + 2058771, true), 1);
    assert_int_equal(tkv__pool_narrow_to(2, 0, 0, true), 2); /* nothing wanted: nothing to judge */
}

/* Pools come and go (a context each): threads are joined, nothing leaks
   (ASan), and a pool that could not be made reports NOMEM, leaving nothing. */
static void test_create_free_and_nomem(void **state) {
    (void)state;
    for (int i = 0; i < 50; i++) check_pool(1 + i % 4, 3, 0);
    tkv__pool_free(NULL);
    for (long k = 0; k < 3; k++) {
        tkv__pool *pool = NULL;
        tkv__alloc_fail_after(k);
        tkv_status st = tkv__pool_create(4, &pool);
        tkv__alloc_fail_after(-1);
        assert_int_equal(st, TKV_ERR_NOMEM);
        assert_null(pool);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_shares_and_barriers),
        cmocka_unit_test(test_late_thread_wakes_sleepers),
        cmocka_unit_test(test_mask_shrinks_and_grows),
        cmocka_unit_test(test_narrow_rule), cmocka_unit_test(test_create_free_and_nomem),
    };
    return TU_RESULT(cmocka_run_group_tests(tests, NULL, NULL));
}
