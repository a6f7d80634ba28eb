/*
 * test_sched_views.c — server/sched/scheduler: work posted to the inference
 * thread never stops decoding. A job that posts itself again from its own
 * end (what three clients polling a view amount to: each posts its next
 * view as soon as the last is answered) used to be drained in the same
 * loop as the jobs before it, forever, and a request never got a step
 * (issue 38, "views starve decoding"). Now the jobs posted before a drain
 * run, the rest after the next step, and while requests run one view per
 * step: the request ends, with every token asked for, while the job goes
 * on reposting itself (and runs between the steps).
 */
#include "testutil.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "metrics.h"
#include "request.h"
#include "sched/scheduler.h"

/* A job that posts itself again when it has run, until told to stop. */
typedef struct poller {
    srv_job job;
    srv_sched *s;
    atomic_bool stop;
    atomic_long runs;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool ended; /* its last done() came */
} poller;

static void poll_fn(tkv_context *ctx, void *user) {
    (void)ctx;
    poller *p = user;
    atomic_fetch_add(&p->runs, 1);
}

static void poll_done(srv_job *job, bool ran) {
    poller *p = job->user;
    if (ran && !atomic_load(&p->stop)) {
        srv_sched_post(p->s, job);
        return;
    }
    pthread_mutex_lock(&p->mu);
    p->ended = true;
    pthread_cond_signal(&p->cv);
    pthread_mutex_unlock(&p->mu);
}

/* The request's end, signalled by its wake callback. */
typedef struct waiter {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool woke;
} waiter;

static void wake(void *arg) {
    waiter *w = arg;
    pthread_mutex_lock(&w->mu);
    w->woke = true;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

/* Wait until done(r), or `seconds` pass (a hang guard far above the expected time): whether it ended. */
static bool wait_done(srv_req *r, waiter *w, int seconds) {
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += seconds;
    for (;;) {
        pthread_mutex_lock(&r->mu);
        const bool done = r->done;
        pthread_mutex_unlock(&r->mu);
        if (done) return true;
        pthread_mutex_lock(&w->mu);
        int rc = 0;
        while (!w->woke && rc == 0) rc = pthread_cond_timedwait(&w->cv, &w->mu, &until);
        w->woke = false;
        pthread_mutex_unlock(&w->mu);
        if (rc) {
            pthread_mutex_lock(&r->mu);
            const bool d = r->done;
            pthread_mutex_unlock(&r->mu);
            return d;
        }
    }
}

static srv_req *new_request(waiter *w, int max_tokens) {
    srv_req *r = srv_req_new();
    assert_non_null(r);
    static const tkv_token prompt[] = {1, 403, 407, 261, 378, 363};
    r->prompt = malloc(sizeof prompt);
    assert_non_null(r->prompt);
    memcpy(r->prompt, prompt, sizeof prompt);
    r->n_prompt = sizeof prompt / sizeof prompt[0];
    r->max_tokens = max_tokens;
    r->sp = tkv_sampler_default_params();
    r->sp.temperature = 0;
    r->ignore_eos = true;
    r->stop_word = -1;
    strcpy(r->id, "cmpl-views");
    r->wake = wake;
    r->wake_arg = w;
    return r;
}

static void test_self_reposting_job_does_not_stop_decoding(void **state) {
    (void)state;
    tkv_context *ctx = tu_context(tu_model, 256, 2, TKV_TYPE_F16);
    srv_metrics *m = srv_metrics_new();
    assert_non_null(m);
    const srv_sched_opts o = {.parallel = 2, .max_queue = 8, .n_ctx = 128, .n_batch = 64};
    srv_sched *s = srv_sched_start(ctx, &o, m);
    assert_non_null(s);

    poller p = {.s = s};
    pthread_mutex_init(&p.mu, NULL);
    pthread_cond_init(&p.cv, NULL);
    p.job = (srv_job){.fn = poll_fn, .done = poll_done, .user = &p, .view = true};
    srv_sched_post(s, &p.job);

    waiter w = {0};
    pthread_mutex_init(&w.mu, NULL);
    pthread_cond_init(&w.cv, NULL);
    srv_req *r = new_request(&w, 24);
    assert_int_equal(srv_sched_submit(s, r), SRV_SUBMIT_OK);
    const bool ended = wait_done(r, &w, 120);
    const long runs_meanwhile = atomic_load(&p.runs);

    atomic_store(&p.stop, true);
    pthread_mutex_lock(&p.mu);
    while (!p.ended) pthread_cond_wait(&p.cv, &p.mu);
    pthread_mutex_unlock(&p.mu);
    srv_sched_stop(s);
    if (!ended) fail_msg("the request did not end while a job kept reposting itself (%ld runs)", runs_meanwhile);
    assert_int_equal(r->failed, SRV_FAIL_NONE);
    assert_int_equal(r->n_gen, 24);
    assert_true(runs_meanwhile > 0); /* the job ran too, between the steps */
    srv_req_unref(r);
    srv_sched_free(s);
    srv_metrics_free(m);
    tkv_context_free(ctx);
    pthread_mutex_destroy(&p.mu);
    pthread_cond_destroy(&p.cv);
    pthread_mutex_destroy(&w.mu);
    pthread_cond_destroy(&w.cv);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_self_reposting_job_does_not_stop_decoding),
    };
    return cmocka_run_group_tests(tests, tu_stories_setup, tu_stories_teardown);
}
