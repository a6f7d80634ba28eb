/*
 * test_sampler.c — sampling: greedy is the argmax; the same seed gives the
 * same choices; draws follow the softmax; top-k, top-p and min-p keep
 * exactly the tokens their definitions keep; the repetition penalty
 * applies to recent tokens.
 */
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static tkv_sampler *make(float temp, int top_k, float top_p, float min_p, float penalty, uint64_t seed, size_t n) {
    tkv_sampler_params p = tkv_sampler_default_params();
    p.temperature = temp;
    p.top_k = top_k;
    p.top_p = top_p;
    p.min_p = min_p;
    p.repeat_penalty = penalty;
    p.seed = seed;
    tkv_sampler *s = NULL;
    assert_int_equal(tkv_sampler_create(&p, n, &s), TKV_OK);
    return s;
}

static void test_greedy(void **state) {
    (void)state;
    float l[6] = {0.1f, 2.0f, -1.0f, 2.0f, 1.9f, 0.0f};
    tkv_sampler *s = make(0, 40, 0.95f, 0.05f, 1.0f, 1, 6);
    for (int i = 0; i < 10; i++) assert_int_equal(tkv_sampler_sample(s, l), 1); /* ties: lowest id */
    tkv_sampler_free(s);
    /* top_k 1 is greedy at any temperature */
    s = make(5.0f, 1, 1.0f, 0.0f, 1.0f, 2, 6);
    for (int i = 0; i < 10; i++) assert_int_equal(tkv_sampler_sample(s, l), 1);
    /* NULL logits (a failed decode's) and a NULL sampler: -1, not a crash */
    assert_int_equal(tkv_sampler_sample(s, NULL), -1);
    assert_int_equal(tkv_sampler_sample(NULL, l), -1);
    assert_int_equal(tkv_sampler_sample(s, l), 1);
    tkv_sampler_free(s);
    tkv_sampler_free(NULL);
}

static void test_seeds(void **state) {
    (void)state;
    enum { V = 50, N = 200 };
    float l[V];
    for (int i = 0; i < V; i++) l[i] = (float)sin(i * 0.7) * 2;
    tkv_token a[N], b[N], c[N];
    tkv_sampler *sa = make(1.0f, 0, 1.0f, 0.0f, 1.0f, 42, V), *sb = make(1.0f, 0, 1.0f, 0.0f, 1.0f, 42, V),
                *sc = make(1.0f, 0, 1.0f, 0.0f, 1.0f, 43, V);
    for (int i = 0; i < N; i++) a[i] = tkv_sampler_sample(sa, l), b[i] = tkv_sampler_sample(sb, l), c[i] = tkv_sampler_sample(sc, l);
    assert_memory_equal(a, b, sizeof a);
    assert_memory_not_equal(a, c, sizeof a);
    tkv_sampler_free(sa), tkv_sampler_free(sb), tkv_sampler_free(sc);
}

/* Frequencies of n draws over 4 tokens. */
static void draw(tkv_sampler *s, const float *l, int n, int counts[4]) {
    memset(counts, 0, 4 * sizeof *counts);
    for (int i = 0; i < n; i++) {
        tkv_token t = tkv_sampler_sample(s, l);
        assert_true(t >= 0 && t < 4);
        counts[t]++;
    }
}

static void test_distribution_and_filters(void **state) {
    (void)state;
    const float l[4] = {logf(0.5f), logf(0.3f), logf(0.15f), logf(0.05f)};
    const int n = 100000;
    int c[4];
    /* no filter, temperature 1: the softmax itself (4-sigma bounds) */
    tkv_sampler *s = make(1.0f, 0, 1.0f, 0.0f, 1.0f, 7, 4);
    draw(s, l, n, c);
    const double p[4] = {0.5, 0.3, 0.15, 0.05};
    for (int i = 0; i < 4; i++) assert_true(fabs(c[i] - n * p[i]) < 4 * sqrt(n * p[i] * (1 - p[i])));
    tkv_sampler_free(s);
    /* temperature 2: p ~ sqrt of the above, renormalised */
    s = make(2.0f, 0, 1.0f, 0.0f, 1.0f, 8, 4);
    draw(s, l, n, c);
    double q[4], sum = 0;
    for (int i = 0; i < 4; i++) sum += q[i] = sqrt(p[i]);
    for (int i = 0; i < 4; i++) q[i] /= sum, assert_true(fabs(c[i] - n * q[i]) < 4 * sqrt(n * q[i] * (1 - q[i])));
    tkv_sampler_free(s);
    /* top_k 2: only the two best */
    s = make(1.0f, 2, 1.0f, 0.0f, 1.0f, 9, 4);
    draw(s, l, 20000, c);
    assert_int_equal(c[2] + c[3], 0);
    assert_true(c[0] > c[1] && c[1] > 0);
    tkv_sampler_free(s);
    /* top_p 0.7: the smallest set reaching 0.7 is {0, 1} (0.5 + 0.3) */
    s = make(1.0f, 0, 0.7f, 0.0f, 1.0f, 10, 4);
    draw(s, l, 20000, c);
    assert_int_equal(c[2] + c[3], 0);
    assert_true(c[1] > 0);
    tkv_sampler_free(s);
    /* min_p 0.25: keep p >= 0.125, i.e. {0, 1, 2} */
    s = make(1.0f, 0, 1.0f, 0.25f, 1.0f, 11, 4);
    draw(s, l, 20000, c);
    assert_int_equal(c[3], 0);
    assert_true(c[2] > 0);
    tkv_sampler_free(s);
}

/* OpenAI's penalties count what the sampler returned (not what was accepted); logit_bias moves one token. */
static void test_openai_penalties_and_bias(void **state) {
    (void)state;
    const float l[4] = {3.0f, 2.5f, 1.0f, -1.0f};
    tkv_sampler_params p = tkv_sampler_default_params();
    p.temperature = 0;
    p.frequency_penalty = 0.3f;
    tkv_sampler *s;
    assert_int_equal(tkv_sampler_create(&p, 4, &s), TKV_OK);
    tkv_sampler_accept(s, 0); /* a prompt token: no penalty */
    assert_int_equal(tkv_sampler_sample(s, l), 0); /* 3.0 */
    assert_int_equal(tkv_sampler_sample(s, l), 0); /* 3.0 - 0.3 = 2.7 > 2.5 */
    assert_int_equal(tkv_sampler_sample(s, l), 1); /* 3.0 - 0.6 = 2.4 < 2.5 */
    assert_int_equal(tkv_sampler_sample(s, l), 0); /* 2.4 vs 2.5 - 0.3 = 2.2 */
    tkv_sampler_free(s);
    p.frequency_penalty = 0, p.presence_penalty = 0.6f; /* once is enough, however many times */
    assert_int_equal(tkv_sampler_create(&p, 4, &s), TKV_OK);
    assert_int_equal(tkv_sampler_sample(s, l), 0);
    assert_int_equal(tkv_sampler_sample(s, l), 1); /* 2.4 < 2.5 */
    assert_int_equal(tkv_sampler_sample(s, l), 0); /* 2.4 vs 1.9 */
    assert_int_equal(tkv_sampler_sample(s, l), 0); /* still 2.4: presence counts once */
    tkv_sampler_free(s);
    /* logit_bias: a ban and a push, copied at creation; ids out of range ignored */
    tkv_logit_bias b[3] = {{0, -INFINITY}, {3, 10.0f}, {99, 50.0f}};
    p.presence_penalty = 0, p.logit_bias = b, p.n_logit_bias = 3;
    assert_int_equal(tkv_sampler_create(&p, 4, &s), TKV_OK);
    b[1].bias = -100.0f; /* the sampler kept its own copy */
    for (int i = 0; i < 5; i++) assert_int_equal(tkv_sampler_sample(s, l), 3);
    tkv_sampler_free(s);
    p.temperature = 1.0f, p.top_k = 0, p.top_p = 1.0f, p.min_p = 0;
    tkv_logit_bias ban = {0, -INFINITY};
    p.logit_bias = &ban, p.n_logit_bias = 1;
    assert_int_equal(tkv_sampler_create(&p, 4, &s), TKV_OK);
    for (int i = 0; i < 2000; i++) assert_true(tkv_sampler_sample(s, l) != 0); /* banned at any temperature */
    tkv_sampler_free(s);
}

static void test_repeat_penalty(void **state) {
    (void)state;
    float l[4] = {3.0f, 2.9f, -1.0f, -2.0f};
    tkv_sampler *s = make(0, 0, 1.0f, 0.0f, 1.5f, 1, 4);
    assert_int_equal(tkv_sampler_sample(s, l), 0); /* records 0: now penalised */
    assert_int_equal(tkv_sampler_sample(s, l), 1); /* 3.0 / 1.5 = 2.0 < 2.9 */
    tkv_sampler_free(s);
    /* negative logits are multiplied */
    float m[3] = {-1.0f, -1.2f, -5.0f};
    s = make(0, 0, 1.0f, 0.0f, 1.5f, 1, 3);
    tkv_sampler_accept(s, 0);
    assert_int_equal(tkv_sampler_sample(s, m), 1); /* -1.5 < -1.2 */
    tkv_sampler_free(s);
    /* the input row is never modified */
    assert_true(l[0] == 3.0f && m[0] == -1.0f);
}

/* The float64 oracle of a chain without penalties: top-k, top-p and min-p over the softmax at temperature 1, then
   the softmax at temperature t of what is kept (p[i] 0 for a cut token). */
static void oracle(const float *l, size_t n, int top_k, double top_p, double min_p, double t, double *p) {
    size_t order[16];
    for (size_t i = 0; i < n; i++) order[i] = i;
    for (size_t i = 0; i < n; i++) /* by logit, descending */
        for (size_t j = i + 1; j < n; j++)
            if (l[order[j]] > l[order[i]]) { size_t x = order[i]; order[i] = order[j], order[j] = x; }
    size_t keep = top_k > 0 && (size_t)top_k < n ? (size_t)top_k : n;
    double sum = 0, cum = 0;
    for (size_t i = 0; i < keep; i++) sum += exp(l[order[i]] - l[order[0]]);
    for (size_t i = 0; i < keep && top_p < 1; i++)
        if ((cum += exp(l[order[i]] - l[order[0]]) / sum) >= top_p) keep = i + 1;
    size_t k2 = 1;
    while (min_p > 0 && k2 < keep && exp(l[order[k2]] - l[order[0]]) >= min_p) k2++;
    if (min_p > 0) keep = k2;
    double z = 0;
    for (size_t i = 0; i < n; i++) p[i] = 0;
    for (size_t i = 0; i < keep; i++) z += p[order[i]] = exp((l[order[i]] - l[order[0]]) / t);
    for (size_t i = 0; i < keep; i++) p[order[i]] /= z;
}

/* tkv_sampler_last_probs: the distribution drawn from, against the oracle, for each path of the chain. */
static void test_last_probs(void **state) {
    (void)state;
    enum { V = 8 };
    const float l[V] = {0.3f, 2.0f, -1.0f, 1.2f, 1.9f, 0.0f, -0.4f, 1.0f};
    static const struct { float t; int top_k; float top_p, min_p; } cases[] = {
        {0.7f, 0, 1.0f, 0.0f}, {1.5f, 3, 1.0f, 0.0f}, {1.0f, 0, 0.8f, 0.0f}, {0.9f, 5, 1.0f, 0.3f},
    };
    tkv_token ids[V];
    float pr[V];
    size_t n = 0;
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        tkv_sampler *s = make(cases[c].t, cases[c].top_k, cases[c].top_p, cases[c].min_p, 1.0f, 11, V);
        assert_int_equal(tkv_sampler_last_probs(s, V, ids, pr, &n), TKV_ERR_INVALID); /* nothing sampled yet */
        const tkv_token chosen = tkv_sampler_sample(s, l);
        double p[V];
        oracle(l, V, cases[c].top_k, cases[c].top_p, cases[c].min_p, cases[c].t, p);
        assert_true(p[chosen] > 0);
        assert_int_equal(tkv_sampler_last_probs(s, V, ids, pr, &n), TKV_OK);
        assert_int_equal(n, V);
        for (size_t i = 0; i < V; i++) {
            if (fabs(pr[i] - p[ids[i]]) > 1e-5) fail_msg("case %zu: token %d: %g, oracle %g", c, ids[i], pr[i], p[ids[i]]);
            if (i && pr[i] > pr[i - 1]) fail_msg("case %zu: not in order at %zu", c, i);
        }
        for (size_t i = 0; i < V; i++) /* every token listed once */
            for (size_t j = 0; j < i; j++) assert_int_not_equal(ids[i], ids[j]);
        for (tkv_token t = 0; t < V; t++) assert_true(fabs(tkv_sampler_last_prob(s, t) - p[t]) <= 1e-5);
        assert_true(tkv_sampler_last_prob(s, V) == 0.0f);
        tkv_sampler_free(s);
    }
    /* greedy: the argmax at 1, the others at 0 by logit; k above the vocabulary lists it all */
    tkv_sampler *s = make(0, 40, 0.95f, 0.05f, 1.0f, 1, V);
    assert_int_equal(tkv_sampler_sample(s, l), 1);
    assert_int_equal(tkv_sampler_last_probs(s, 3, ids, pr, &n), TKV_OK);
    assert_int_equal(n, 3);
    assert_int_equal(ids[0], 1), assert_int_equal(ids[1], 4), assert_int_equal(ids[2], 3);
    assert_true(pr[0] == 1.0f && pr[1] == 0.0f && pr[2] == 0.0f);
    tkv_token many_ids[100];
    float many[100];
    assert_int_equal(tkv_sampler_last_probs(s, 100, many_ids, many, &n), TKV_OK);
    assert_int_equal(n, V);
    assert_int_equal(tkv_sampler_last_probs(NULL, 3, ids, pr, &n), TKV_ERR_INVALID);
    tkv_sampler_free(s);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_greedy),
        cmocka_unit_test(test_seeds),
        cmocka_unit_test(test_distribution_and_filters),
        cmocka_unit_test(test_openai_penalties_and_bias),
        cmocka_unit_test(test_repeat_penalty),
        cmocka_unit_test(test_last_probs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
