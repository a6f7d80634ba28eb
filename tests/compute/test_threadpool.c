/*
 * test_threadpool.c — the pool runs every share of every task exactly once,
 * its barrier separates stages (every thread sees every other's writes of
 * the stage before), and both hold whatever the waits do: spinning, sleeping
 * on the futex (a thread late by milliseconds), or many threads on one CPU.
 * Speed is not asserted here (bench/contention measures it).
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
    atomic_int calls[MAX_T]; /* shares run, per ith */
    atomic_int bad_nth;      /* calls with the wrong nth */
    int nth;
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
    if (nth != j->nth) atomic_fetch_add(&j->bad_nth, 1);
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

/* Run `tasks` tasks on a pool of n threads; every share once, every stage seen whole. */
static void check_pool(int n, int tasks, int late_ms) {
    tkv__pool *pool = NULL;
    assert_int_equal(tkv__pool_create(n, &pool), TKV_OK);
    assert_int_equal(tkv__pool_size(pool), n);
    static run r;
    memset(&r, 0, sizeof r);
    r.pool = pool;
    r.j.nth = n;
    r.j.late_ms = late_ms;
    for (int t = 0; t < tasks; t++) {
        r.j.task = 1000 * (t + 1);
        tkv__pool_run(pool, run_fn, &r);
        /* the task is over when run returns: every share has finished */
        for (int i = 0; i < n; i++) assert_int_equal(atomic_load(&r.j.calls[i]), t + 1);
    }
    assert_int_equal(atomic_load(&r.j.bad_nth), 0);
    assert_int_equal(atomic_load(&r.j.mismatches), 0);
    tkv__pool_free(pool);
}

static void test_shares_and_barriers(void **state) {
    (void)state;
    for (int n = 1; n <= 4; n++) check_pool(n, 2000, 0);
}

/* A thread late by milliseconds: the others stop spinning and sleep on the
   futex, and must be woken by the last arrival. */
static void test_late_thread_wakes_sleepers(void **state) {
    (void)state;
    check_pool(3, 20, 3);
}

/* More threads than CPUs: everything on one CPU, so every wait must give the
   CPU up for the thread it waits for (this hung or crawled with a pure spin). */
static void test_oversubscribed_one_cpu(void **state) {
    (void)state;
    cpu_set_t old, one;
    assert_int_equal(sched_getaffinity(0, sizeof old, &old), 0);
    CPU_ZERO(&one);
    for (int c = 0; c < CPU_SETSIZE; c++)
        if (CPU_ISSET(c, &old)) {
            CPU_SET(c, &one);
            break;
        }
    assert_int_equal(sched_setaffinity(0, sizeof one, &one), 0); /* the pool's threads inherit it */
    check_pool(4, 300, 0);
    check_pool(MAX_T, 50, 0);
    assert_int_equal(sched_setaffinity(0, sizeof old, &old), 0);
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
        cmocka_unit_test(test_oversubscribed_one_cpu),
        cmocka_unit_test(test_create_free_and_nomem),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
