/*
 * test_draftcost.c — the step's cost by rows and the choice of drafts (server/sched/draftcost.h), against a
 * hand-computed model of the cost table and a brute-force search over every choice of drafts.
 */
#include "testutil.h"

#include "sched/draftcost.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static void close_to(double got, double want) {
    if (!(fabs(got - want) <= 1e-12 * (fabs(want) + 1)))
        fail_msg("got %.15g, want %.15g", got, want);
}

/* Add the same figure twice: a size is used from its second measurement. */
static void add2(srv_stepcost *c, size_t rows, double seconds) {
    srv_stepcost_add(c, rows, seconds);
    srv_stepcost_add(c, rows, seconds);
}

/* A size's figure is the least of its last SRV_STEPCOST_KEEP measurements, from the second one on; nothing for
   sizes out of range. */
static void test_stepcost_least(void **state) {
    (void)state;
    _Static_assert(SRV_STEPCOST_KEEP == 4, "the figures below keep 4");
    srv_stepcost c = {0};
    close_to(srv_stepcost_of(&c, 3), 0);
    srv_stepcost_add(&c, 3, 0.030); /* one measurement: a first step's one-time costs, maybe */
    close_to(srv_stepcost_of(&c, 3), 0);
    srv_stepcost_add(&c, 3, 0.010);
    close_to(srv_stepcost_of(&c, 3), 0.010);
    srv_stepcost_add(&c, 3, 0.012);
    srv_stepcost_add(&c, 3, 0.009);
    close_to(srv_stepcost_of(&c, 3), 0.009);
    for (int i = 0; i < 3; i++) srv_stepcost_add(&c, 3, 0.020); /* the machine got busier */
    close_to(srv_stepcost_of(&c, 3), 0.009);                   /* 0.009 is still among the last 4 */
    srv_stepcost_add(&c, 3, 0.020);
    close_to(srv_stepcost_of(&c, 3), 0.020);
    srv_stepcost_add(&c, 0, 1.0);                     /* ignored */
    srv_stepcost_add(&c, SRV_STEPCOST_ROWS + 1, 1.0); /* ignored */
    srv_stepcost_add(&c, 5, -1.0);                    /* ignored */
    close_to(srv_stepcost_of(&c, 0), 0);
    close_to(srv_stepcost_of(&c, SRV_STEPCOST_ROWS + 1), 0);
    close_to(srv_stepcost_of(&c, 2), 0); /* nothing measured at or below 2 */
    close_to(srv_stepcost_of(&c, 5), 0.020); /* above the largest measured: its figure */
    close_to(srv_stepcost_of(&c, SRV_STEPCOST_ROWS), 0.020);
}

/* Between measured sizes a straight line, and no size costs more than a larger one: a smaller size measured
   higher (a moment of load) is taken at the larger one's figure. */
static void test_stepcost_interpolates(void **state) {
    (void)state;
    srv_stepcost c = {0};
    add2(&c, 2, 0.004);
    add2(&c, 6, 0.012);
    add2(&c, 10, 0.008);
    close_to(srv_stepcost_of(&c, 3), 0.006); /* the line from 2 to 6 */
    close_to(srv_stepcost_of(&c, 4), 0.008); /* the line says 0.010 at 5, but 10 rows cost 0.008 */
    close_to(srv_stepcost_of(&c, 6), 0.008);
    close_to(srv_stepcost_of(&c, 8), 0.008);
    close_to(srv_stepcost_of(&c, 10), 0.008);
    close_to(srv_stepcost_of(&c, 11), 0.008);
    close_to(srv_stepcost_of(&c, 1), 0);
    srv_stepcost_add(&c, 12, 0.001); /* a single measurement is not a figure yet */
    close_to(srv_stepcost_of(&c, 11), 0.008);
    srv_stepcost_add(&c, 12, 0.020);
    srv_stepcost_add(&c, 12, 0.020); /* 0.001 stays the least: one too low is taken, and tried again */
    close_to(srv_stepcost_of(&c, 11), 0.001);
    for (int i = 0; i < SRV_STEPCOST_KEEP; i++) srv_stepcost_add(&c, 12, 0.020);
    close_to(srv_stepcost_of(&c, 11), 0.014); /* the line from 10 to 12 */
    for (size_t r = 2; r < SRV_STEPCOST_ROWS; r++)
        assert_true(srv_stepcost_of(&c, r) <= srv_stepcost_of(&c, r + 1));
}

/* Above the largest size measured, the line through the two largest: a row costs there what it cost between
   them; flat where that line falls (a moment of load on the smaller one). */
static void test_stepcost_extrapolates(void **state) {
    (void)state;
    srv_stepcost c = {0};
    add2(&c, 4, 0.004);
    close_to(srv_stepcost_of(&c, 12), 0.004); /* one size: its figure */
    add2(&c, 2, 0.003);
    close_to(srv_stepcost_of(&c, 12), 0.008); /* 4 rows plus 8 at 0.0005 */
    add2(&c, 5, 0.005);
    close_to(srv_stepcost_of(&c, 12), 0.012); /* the two largest now: 0.001 a row */
    close_to(srv_stepcost_of(&c, 3), 0.0035);
    add2(&c, 6, 0.001); /* 6 rows measured below 5: the line falls, so flat */
    close_to(srv_stepcost_of(&c, 12), 0.001);
    close_to(srv_stepcost_of(&c, 5), 0.001); /* and no smaller size costs more */
    for (size_t r = 1; r < SRV_STEPCOST_ROWS; r++)
        assert_true(srv_stepcost_of(&c, r) <= srv_stepcost_of(&c, r + 1));
}

/* A figure not measured again within SRV_STEPCOST_FORGET steps is forgotten: the size is guessed again, and its
   next measurements start afresh. */
static void test_stepcost_forgets(void **state) {
    (void)state;
    srv_stepcost c = {0};
    add2(&c, 1, 0.002);
    add2(&c, 4, 0.100); /* a moment of load */
    for (int i = 0; i < SRV_STEPCOST_FORGET; i++) srv_stepcost_add(&c, 1, 0.002);
    close_to(srv_stepcost_of(&c, 4), 0.100); /* measured SRV_STEPCOST_FORGET steps ago: still known */
    srv_stepcost_add(&c, 1, 0.002);
    close_to(srv_stepcost_of(&c, 4), 0.002); /* forgotten: the largest size below it */
    srv_stepcost_add(&c, 4, 0.003);
    close_to(srv_stepcost_of(&c, 4), 0.002); /* one new measurement: still guessed */
    srv_stepcost_add(&c, 4, 0.004);
    close_to(srv_stepcost_of(&c, 4), 0.003); /* the old 0.100 is not among its figures */
}

/* The model: expected tokens of a choice, and the best choice by trying every one. */
static double expected(size_t tokens, const srv_draftcand *c, const size_t *take, size_t n) {
    double e = (double)tokens;
    for (size_t i = 0; i < n; i++)
        for (size_t k = 0; k < take[i]; k++) e += pow(c[i].p, (double)(k + 1));
    return e;
}

typedef struct best {
    double rate;
    size_t rows; /* drafts taken */
} best;

static void search(const srv_stepcost *cost, size_t rows, size_t tokens, size_t room, const srv_draftcand *c, size_t n,
                   size_t i, size_t *take, size_t k, best *b) {
    if (i == n) {
        if (rows + k > SRV_STEPCOST_ROWS || k > room) return;
        const double t = srv_stepcost_of(cost, rows + k);
        if (!(t > 0)) return;
        const double rate = expected(tokens, c, take, n) / t;
        if (rate > b->rate * (1 + 1e-9) || (rate >= b->rate * (1 - 1e-9) && k < b->rows)) b->rate = rate, b->rows = k;
        return;
    }
    for (take[i] = 0; take[i] <= c[i].n; take[i]++) search(cost, rows, tokens, room, c, n, i + 1, take, k + take[i], b);
}

static double urand(void) { return (double)rand() / RAND_MAX; }

/* Random cost tables (bound by reading, by arithmetic, or noisy), random candidates: the choice's rate is the
   best any choice reaches, with no more drafts than the fewest that reach it. */
static void test_choose_is_best(void **state) {
    (void)state;
    const char *env = getenv("TKV_DRAFTCOST_SEED"); /* a failure names its seed; this repeats it */
    const unsigned seed = env && *env ? (unsigned)strtoul(env, NULL, 0) : (unsigned)time(NULL);
    srand(seed);
    for (int trial = 0; trial < 3000; trial++) {
        srv_stepcost cost = {0};
        const double mem = 0.001 + urand() * 0.01, per_row = urand() * 0.004, noise = trial % 3 == 2 ? 0.3 : 0;
        for (size_t r = 1; r <= SRV_STEPCOST_ROWS; r++)
            if (rand() % 3) {
                const double t = fmax(mem, per_row * (double)r) + 0.0002;
                for (int k = 0; k < 2; k++) srv_stepcost_add(&cost, r, t * (1 + noise * (urand() - 0.5)));
            }
        srv_draftcand c[5];
        const size_t n = 1 + (size_t)rand() % 5;
        for (size_t i = 0; i < n; i++) {
            c[i].n = (size_t)rand() % 5;
            const int kind = rand() % 4;
            c[i].p = kind == 0 ? 0.0 : kind == 1 ? 1.0 : urand();
            c[i].take = 99;
        }
        const size_t tokens = (size_t)rand() % 6, rows = tokens + (size_t)rand() % 8 + (trial % 50 == 0 ? 60 : 0);
        const size_t room = (size_t)rand() % 24;
        const size_t got = srv_draft_choose(&cost, rows, tokens, room, c, n);
        size_t take[5], sum = 0;
        for (size_t i = 0; i < n; i++) {
            assert_true(c[i].take <= c[i].n);
            take[i] = c[i].take, sum += c[i].take;
        }
        assert_int_equal(got, sum);
        if (!tokens || rows >= SRV_STEPCOST_ROWS || !(srv_stepcost_of(&cost, rows) > 0)) {
            if (got) fail_msg("seed %u trial %d: drafts taken where none may be", seed, trial);
            continue;
        }
        /* the step without drafts counts SRV_DRAFT_MARGIN faster than it is (draftcost.h) */
        const double plain = expected(tokens, c, (size_t[5]){0}, n) / srv_stepcost_of(&cost, rows) * (1 + SRV_DRAFT_MARGIN);
        best b = {plain, 0};
        size_t scratch[5];
        search(&cost, rows, tokens, room, c, n, 0, scratch, 0, &b);
        const double rate = sum ? expected(tokens, c, take, n) / srv_stepcost_of(&cost, rows + sum) : plain;
        if (!(rate >= b.rate * (1 - 1e-9)) || sum != b.rows)
            fail_msg("seed %u (TKV_DRAFTCOST_SEED) trial %d: chose %zu drafts at %.9g tokens/s; the best is %zu at %.9g", seed, trial, sum,
                     rate, b.rows, b.rate);
    }
}

/* The two regimes the choice is for. A step bound by reading the weights (the same cost for 1 to 16 rows):
   every draft that may be accepted rides along. A step bound by arithmetic (4 sequences, each row a fifth of the
   step): a draft accepted one time in four is not worth its row, and a retry's sure drafts are. */
static void test_choose_regimes(void **state) {
    (void)state;
    srv_stepcost mem = {0}, alu = {0};
    for (size_t r = 1; r <= 16; r++) add2(&mem, r, 0.010);
    for (size_t r = 1; r <= SRV_STEPCOST_ROWS; r++) add2(&alu, r, 0.002 + 0.002 * (double)r);
    srv_draftcand c[1] = {{.n = 8, .p = 0.25}};
    assert_int_equal(srv_draft_choose(&mem, 1, 1, 32, c, 1), 8);
    assert_int_equal(srv_draft_choose(&mem, 1, 1, 5, c, 1), 5); /* within the batch's room */
    srv_draftcand four[4] = {{.n = 8, .p = 0.25}, {.n = 8, .p = 0.25}, {.n = 8, .p = 0.25}, {.n = 8, .p = 0.25}};
    assert_int_equal(srv_draft_choose(&alu, 4, 4, 32, four, 4), 0);
    for (int i = 0; i < 4; i++) four[i].p = 1;
    assert_int_equal(srv_draft_choose(&alu, 4, 4, 32, four, 4), 32); /* the step's fixed part shared by more */
    for (int i = 0; i < 4; i++) assert_int_equal(four[i].take, 8);
    srv_draftcand none[1] = {{.n = 8, .p = 0}};
    assert_int_equal(srv_draft_choose(&mem, 1, 1, 32, none, 1), 0);
    assert_int_equal(srv_draft_choose(&mem, 1, 0, 32, c, 1), 0); /* no generating row: nothing to draft for */
}

/* Where a probe may go (srv_draft_can_pay): where sure drafts would be taken. Bound by reading, one sure draft
   pays; bound by arithmetic at 4 sequences, one sure draft is worth no more than its row (5 tokens for 5 rows' time)
   and is not probed for, while 8 sure ones share the step's fixed part and are; on random tables, whether some count
   of sure drafts beats the plain step by the margin. */
static void test_can_pay(void **state) {
    (void)state;
    srv_stepcost mem = {0}, alu = {0};
    for (size_t r = 1; r <= 16; r++) add2(&mem, r, 0.010);
    for (size_t r = 1; r <= SRV_STEPCOST_ROWS; r++) add2(&alu, r, 0.002 + 0.002 * (double)r);
    assert_true(srv_draft_can_pay(&mem, 1, 1, 32, 1));
    assert_false(srv_draft_can_pay(&mem, 1, 1, 0, 1));  /* no room */
    assert_false(srv_draft_can_pay(&mem, 1, 1, 32, 0)); /* nothing proposed */
    assert_false(srv_draft_can_pay(&mem, 1, 0, 32, 1)); /* no generating row */
    assert_false(srv_draft_can_pay(&alu, 4, 4, 32, 1));
    assert_true(srv_draft_can_pay(&alu, 4, 4, 32, 8));
    srand(7);
    for (int trial = 0; trial < 500; trial++) {
        srv_stepcost cost = {0};
        const double fixed = urand() * 0.01, per_row = urand() * 0.004;
        for (size_t r = 1; r <= SRV_STEPCOST_ROWS; r++) add2(&cost, r, fixed + per_row * (double)r + 0.0001);
        const size_t tokens = 1 + (size_t)rand() % 6, rows = tokens + (size_t)rand() % 8, n = (size_t)rand() % 9;
        /* the model: any count of sure drafts beats the plain step by the margin */
        bool pays = false;
        for (size_t k = 1; k <= n && rows + k <= SRV_STEPCOST_ROWS; k++)
            pays |= (double)(tokens + k) / srv_stepcost_of(&cost, rows + k) >
                    (double)tokens / srv_stepcost_of(&cost, rows) * (1 + SRV_DRAFT_MARGIN) * (1 + 1e-9);
        assert_int_equal(srv_draft_can_pay(&cost, rows, tokens, 32, n), pays);
    }
}

/* Probes (draftcost.h): left out at every step, a request probes after 4 steps, then 8, 16, 32 and every 64 after
   that; drafts taken start the count over; a step without room holds the probe to the next step with room, and the
   waits after it go on doubling from there. */
static void test_probe_schedule(void **state) {
    (void)state;
    srv_probe p = {0};
    static const unsigned want[] = {4, 12, 28, 60, 124, 188, 252};
    size_t k = 0;
    for (unsigned step = 1; step <= 252; step++)
        if (srv_probe_next(&p, 0, true, true)) {
            assert_true(k < sizeof want / sizeof want[0]);
            assert_int_equal(step, want[k++]);
        }
    assert_int_equal(k, sizeof want / sizeof want[0]);

    /* drafts taken at step 3 of a fresh request: never a probe then, and the next one 4 left-out steps later */
    p = (srv_probe){0};
    assert_false(srv_probe_next(&p, 0, true, true));
    assert_false(srv_probe_next(&p, 0, true, true));
    assert_false(srv_probe_next(&p, 2, true, true));
    for (int i = 0; i < 3; i++) assert_false(srv_probe_next(&p, 0, true, true));
    assert_true(srv_probe_next(&p, 0, true, true));
    /* and after a few probes, drafts taken bring the wait back to 4 */
    for (int i = 0; i < 7; i++) assert_false(srv_probe_next(&p, 0, true, true));
    assert_true(srv_probe_next(&p, 0, true, true)); /* the second, 8 after the first */
    assert_false(srv_probe_next(&p, 1, true, true));
    for (int i = 0; i < 3; i++) assert_false(srv_probe_next(&p, 0, true, true));
    assert_true(srv_probe_next(&p, 0, true, true));

    /* no room at the probe's step and the two after it: it comes at the first step with room */
    p = (srv_probe){0};
    for (int i = 0; i < 3; i++) assert_false(srv_probe_next(&p, 0, true, true));
    for (int i = 0; i < 3; i++) assert_false(srv_probe_next(&p, 0, false, true));
    assert_true(srv_probe_next(&p, 0, true, true));
    for (int i = 0; i < 7; i++) assert_false(srv_probe_next(&p, 0, true, true));
    assert_true(srv_probe_next(&p, 0, true, true)); /* then 8 steps on */

    /* where sure drafts would not pay, a probe only every SRV_PROBE_LAST steps, whatever the schedule (each one a
       probe that doubles the wait: 4, 8, 16, then 32); where they would again, the schedule goes on from there */
    _Static_assert(SRV_PROBE_FIRST == 4 && SRV_PROBE_LAST == 64, "the waits below");
    srv_probe q = {0};
    for (int round = 0; round < 3; round++) {
        for (int i = 1; i < SRV_PROBE_LAST; i++) assert_false(srv_probe_next(&q, 0, true, false));
        assert_true(srv_probe_next(&q, 0, true, false));
    }
    for (int i = 1; i < 32; i++) assert_false(srv_probe_next(&q, 0, true, true));
    assert_false(srv_probe_next(&q, 0, false, true)); /* the 32nd step, without room */
    assert_true(srv_probe_next(&q, 0, true, true));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stepcost_least),       cmocka_unit_test(test_stepcost_interpolates),
        cmocka_unit_test(test_stepcost_forgets),     cmocka_unit_test(test_stepcost_extrapolates),
        cmocka_unit_test(test_choose_is_best),       cmocka_unit_test(test_choose_regimes),
        cmocka_unit_test(test_can_pay), cmocka_unit_test(test_probe_schedule),
    };
    return TU_RESULT(cmocka_run_group_tests(tests, NULL, NULL));
}
