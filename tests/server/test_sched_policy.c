/*
 * test_sched_policy.c — server/sched/policy: the scheduler's choices over
 * hand-built slots and waiting lists, without threads, a model or a cache.
 * Hand-written cases with the expected choice spelled out (admission by
 * cached prefix, starvation, a preempted request waiting for room, holding
 * back a request whose prefix a slot is computing, the choices of one
 * request sharing a slot while others wait, clients' shares of the slots
 * and of the queue, who gives way when the cache is full or for another
 * client's share); then random states from a printed seed against a model
 * of the same rules written as filters and sorts, which also checks that
 * the policy asks for the lookups of exactly the requests it weighs, in
 * order.
 */
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sched/policy.h"

/* ---- the look: preset answers, and a record of what was asked ---- */

typedef struct looks {
    size_t cached[64];
    bool skip[64];
    size_t asked[64], n_asked;
} looks;

static size_t look(void *user, size_t i, bool *skip) {
    looks *l = user;
    l->asked[l->n_asked++] = i;
    *skip = l->skip[i];
    return l->cached[i];
}

static const tkv_token A[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22};

static srv_pwait wait_on(const tkv_token *t, size_t n) { return (srv_pwait){.toks = t, .n_toks = n}; }

static void test_choose_by_cached(void **state) {
    (void)state;
    looks l = {.cached = {3, 10, 10}};
    srv_pwait w[3] = {wait_on(A, 4), wait_on(A, 12), wait_on(A, 12)};
    assert_int_equal(srv_policy_choose(w, 0, NULL, 0, 0, true, look, &l), -1); /* nobody waits */
    assert_int_equal(srv_policy_choose(w, 3, NULL, 0, 0, true, look, &l), 1); /* the longest, the oldest of equals */
    assert_int_equal(l.n_asked, 3);
    l.n_asked = 0;
    w[1].fetching = true; /* on its way from another tier: not weighed, not looked up */
    assert_int_equal(srv_policy_choose(w, 3, NULL, 0, 0, true, look, &l), 2);
    assert_int_equal(l.n_asked, 2);
    assert_int_equal(l.asked[0], 0);
    assert_int_equal(l.asked[1], 2);
    l.skip[2] = true; /* its lookup in another tier just started */
    assert_int_equal(srv_policy_choose(w, 3, NULL, 0, 0, true, look, &l), 0);
    l.skip[0] = true;
    assert_int_equal(srv_policy_choose(w, 3, NULL, 0, 0, true, look, &l), -1);
}

static void test_choose_starving_and_preempted(void **state) {
    (void)state;
    looks l = {.cached = {0, 0, 50}};
    srv_pwait w[3] = {wait_on(A, 4), wait_on(A, 4), wait_on(A, 4)};
    w[1].skipped = SRV_STARVE_AFTER, w[2].skipped = SRV_STARVE_AFTER;
    assert_int_equal(srv_policy_choose(w, 3, NULL, 0, 0, true, look, &l), 1); /* the oldest starving one */
    assert_int_equal(l.n_asked, 0);                                          /* before any lookup */
    w[1].fetching = true;
    assert_int_equal(srv_policy_choose(w, 3, NULL, 0, 0, true, look, &l), 2);
    w[2].fetching = true; /* every starving one fetches: back to the cached prefixes */
    assert_int_equal(srv_policy_choose(w, 3, NULL, 0, 0, true, look, &l), 0);
    w[1].fetching = w[2].fetching = false;
    w[2].waits_for_room = true; /* preempted, nobody ended since: nothing goes while anyone runs */
    l.n_asked = 0;
    assert_int_equal(srv_policy_choose(w, 3, NULL, 0, 1, true, look, &l), -1);
    assert_int_equal(l.n_asked, 0);
    assert_int_equal(srv_policy_choose(w, 3, NULL, 0, 0, true, look, &l), 1); /* nobody runs: the room is there */
}

/* A slot computing the prompt t[0..n), of which it holds n_past. */
static srv_pslot prefilling(const tkv_token *t, size_t n, size_t n_past) {
    return (srv_pslot){.busy = true, .toks = t, .n_toks = n, .n_past = n_past, .in_batch = n - n_past};
}

static void test_held_back(void **state) {
    (void)state;
    srv_pslot sl = prefilling(A, 20, 4);
    srv_pwait r = wait_on(A, 22); /* shares 20 tokens with the slot's prompt */
    assert_true(srv_policy_held_back(&sl, 1, &r, 0));
    assert_true(srv_policy_held_back(&sl, 1, &r, 12));   /* 20 >= 12 + SRV_HOLD_MIN_TOKENS */
    assert_false(srv_policy_held_back(&sl, 1, &r, 13));  /* the rest is too short to wait for */
    r.group = sl.group = 7;                              /* choices of one request wait however short */
    assert_true(srv_policy_held_back(&sl, 1, &r, 19));
    assert_false(srv_policy_held_back(&sl, 1, &r, 20));
    r.group = sl.group = 0;
    sl.n_past = 20; /* it holds the prefix already: the cache will give it */
    assert_false(srv_policy_held_back(&sl, 1, &r, 0));
    sl.n_past = 4;
    sl.n_gen = 1; /* past its prompt: what it computes now is its own */
    assert_false(srv_policy_held_back(&sl, 1, &r, 0));
    sl.n_gen = 0;
    sl.ns = 9; /* another namespace shares nothing */
    assert_false(srv_policy_held_back(&sl, 1, &r, 0));
    sl.ns = 0;
    srv_pwait same = wait_on(A, 20); /* its last token is its own (decoded for the logits): 19 shared */
    assert_true(srv_policy_held_back(&sl, 1, &same, 11));
    assert_false(srv_policy_held_back(&sl, 1, &same, 12));
    sl.busy = false;
    assert_false(srv_policy_held_back(&sl, 1, &r, 0));

    /* in the choice: the held-back one waits, another goes; without prefix sharing nobody is held */
    sl = prefilling(A, 20, 4);
    looks l = {.cached = {0, 2}};
    srv_pwait w[2] = {wait_on(A, 22), wait_on((const tkv_token[]){30, 31, 32}, 3)};
    assert_int_equal(srv_policy_choose(w, 2, &sl, 1, 1, true, look, &l), 1);
    assert_int_equal(srv_policy_choose(w, 1, &sl, 1, 1, true, look, &l), -1);
    assert_int_equal(srv_policy_choose(w, 1, &sl, 1, 1, false, look, &l), 0);
}

/* Issue 38: one request's n choices held every slot while others waited; now a request's choices share a slot
   while another request waits, and take the free ones when nobody else does. */
static void test_choices_share_a_slot(void **state) {
    (void)state;
    srv_pslot sl[2] = {{.busy = true, .toks = A, .n_toks = 8, .n_past = 8, .n_gen = 3, .group = 5}};
    looks l = {.cached = {7, 0, 7}};
    srv_pwait w[3] = {wait_on(A, 10), wait_on((const tkv_token[]){30, 31, 32}, 3), wait_on(A, 10)};
    w[0].group = 5; /* the next choice of the running request, its prompt cached */
    w[2].group = 6; /* the first choice of another one */
    assert_int_equal(srv_policy_choose(w, 2, sl, 2, 1, true, look, &l), 1);  /* the other request first */
    assert_int_equal(srv_policy_choose(w, 3, sl, 2, 1, true, look, &l), 2);  /* by cached among the others */
    assert_int_equal(srv_policy_choose(w, 1, sl, 2, 1, true, look, &l), 0);  /* alone: it takes the free slot */
    l.skip[1] = true;
    assert_int_equal(srv_policy_choose(w, 2, sl, 2, 1, true, look, &l), 0);  /* nobody else can go now */
    l.skip[1] = false;
    sl[0].busy = false;
    assert_int_equal(srv_policy_choose(w, 2, sl, 2, 0, true, look, &l), 0);  /* its request runs nowhere yet */
}

/* Issue 38: one client's requests held every slot while another's waited minutes. The slots are shared among
   the active clients; a request of a client under its share goes first, and one over its share gives way. */
static void test_client_shares(void **state) {
    (void)state;
    srv_pslot sl[4];
    for (int i = 0; i < 4; i++)
        sl[i] = (srv_pslot){.busy = true, .toks = A, .n_toks = 8, .n_past = 8, .n_gen = 2, .client = 11,
                            .order = (uint64_t)(10 + i), .group = 5};
    srv_pwait w[3] = {wait_on(A, 10), wait_on(A, 10), wait_on((const tkv_token[]){30, 31, 32}, 3)};
    w[0].client = w[1].client = 11, w[0].group = w[1].group = 5; /* more choices of the running request */
    assert_int_equal(srv_policy_share(w, 2, sl, 4), 4);         /* one client: every slot is its share */
    assert_int_equal(srv_policy_fair_preempt(w, 2, sl, 4), -1);  /* nobody under a share waits */
    w[2].client = 22;                                            /* a probe from another client */
    assert_int_equal(srv_policy_share(w, 3, sl, 4), 2);
    assert_int_equal(srv_policy_client_slots(sl, 4, 11), 4);
    assert_int_equal(srv_policy_fair_preempt(w, 3, sl, 4), 3);   /* the over-share client's youngest slot */
    w[2].fetching = true;                                        /* its prefix is on its way: not yet */
    assert_int_equal(srv_policy_fair_preempt(w, 3, sl, 4), -1);
    w[2].fetching = false;
    w[2].waits_for_room = true;
    assert_int_equal(srv_policy_fair_preempt(w, 3, sl, 4), -1);
    w[2].waits_for_room = false;
    /* the slot given up: the probe goes before the older, starving, better-cached choices of the client over */
    sl[3].busy = false;
    w[0].skipped = SRV_STARVE_AFTER;
    looks l = {.cached = {9, 9, 0}};
    assert_int_equal(srv_policy_choose(w, 3, sl, 4, 3, true, look, &l), 2);
    /* three slots to the client of two: still over, and nobody else waits: its own choice takes the free slot */
    assert_int_equal(srv_policy_choose(w, 2, sl, 4, 3, true, look, &l), 0);
    /* the probe runs: two clients at 3 and 1 of 4 slots, nobody under a share waits: nobody gives way */
    sl[3] = (srv_pslot){.busy = true, .toks = A, .n_toks = 4, .n_past = 3, .n_gen = 1, .client = 22, .order = 20};
    assert_int_equal(srv_policy_fair_preempt(w, 2, sl, 4), -1);
    /* a second request of the probe's client: it is under its share (1 of 2), the other over (3): it gives way */
    w[1].client = 22, w[1].group = 0;
    assert_int_equal(srv_policy_fair_preempt(w, 2, sl, 4), 2);
    /* five clients over four slots: a share of one each; a client at its share is never preempted */
    for (int i = 0; i < 4; i++) sl[i].client = (uint64_t)(100 + i);
    w[0].client = 200;
    assert_int_equal(srv_policy_share(w, 1, sl, 4), 1);
    assert_int_equal(srv_policy_fair_preempt(w, 1, sl, 4), -1);
    /* the queue: a client holds half of it at most, and nobody more than it all */
    assert_true(srv_policy_queue_admits(0, 8, 0));
    assert_true(srv_policy_queue_admits(5, 8, 3));
    assert_false(srv_policy_queue_admits(5, 8, 4));
    assert_false(srv_policy_queue_admits(8, 8, 0));
    assert_true(srv_policy_queue_admits(0, 1, 0)); /* a queue of one: one place */
    assert_false(srv_policy_queue_admits(1, 1, 0));
}

static srv_pslot generating_slot(uint64_t order, size_t n_past) {
    return (srv_pslot){.busy = true, .toks = A, .n_toks = n_past + 1, .n_past = n_past, .n_gen = 1, .order = order,
                       .in_batch = 1};
}

static void expect_room(srv_room got, srv_room_kind kind, int slot, int stuck) {
    if (got.kind != kind || (kind != SRV_ROOM_NONE && got.slot != slot) || (kind != SRV_ROOM_HOLD_PROMPT && got.stuck != stuck))
        fail_msg("make_room: kind %d slot %d stuck %d; expected %d %d %d", got.kind, got.slot, got.stuck, kind, slot,
                 stuck);
}

static void test_make_room(void **state) {
    (void)state;
    srv_pslot s[4] = {0};
    /* two prompts in the batch: the youngest waits a step */
    s[0] = prefilling(A, 10, 0), s[0].order = 5;
    s[1] = prefilling(A, 10, 2), s[1].order = 7;
    expect_room(srv_policy_make_room(s, 4), SRV_ROOM_HOLD_PROMPT, 1, -1);
    /* a prompt beside a generating request: the prompt waits */
    s[1] = generating_slot(9, 6);
    expect_room(srv_policy_make_room(s, 4), SRV_ROOM_HOLD_PROMPT, 0, -1);
    /* a prompt alone in the batch, another (older or younger) holds cells: the youngest other holder goes */
    s[1] = prefilling(A, 10, 3), s[1].order = 2, s[1].in_batch = 0; /* held back this step, holding cells */
    s[2] = prefilling(A, 10, 1), s[2].order = 3, s[2].in_batch = 0;
    expect_room(srv_policy_make_room(s, 4), SRV_ROOM_PREEMPT, 2, 0);
    /* ... and the prompt itself holding cells changes nothing: it is not its own victim */
    s[0].n_past = 4, s[0].order = 9;
    expect_room(srv_policy_make_room(s, 4), SRV_ROOM_PREEMPT, 2, 0);
    /* a prompt that is the only holder: out of room */
    s[1].busy = s[2].busy = false;
    expect_room(srv_policy_make_room(s, 4), SRV_ROOM_NONE, -1, 0);
    /* generation alone: with two holders the youngest goes (it may be the stuck one itself) */
    memset(s, 0, sizeof s);
    s[0] = generating_slot(1, 8), s[3] = generating_slot(4, 8);
    expect_room(srv_policy_make_room(s, 4), SRV_ROOM_PREEMPT, 3, 3);
    /* one holder generating alone: nobody can give way */
    s[3].busy = false;
    expect_room(srv_policy_make_room(s, 4), SRV_ROOM_NONE, -1, 0);
    /* requests resuming after preemptions recompute their lists in chunks: prompts, though past their prompts
       (counted as generating, the batch had no prompt and one holder, and the youngest was ended, "length") */
    memset(s, 0, sizeof s);
    s[0] = generating_slot(1, 11), s[0].n_toks = 49, s[0].n_gen = 37, s[0].in_batch = 38;
    s[1] = generating_slot(2, 0), s[1].n_toks = 36, s[1].n_gen = 25, s[1].in_batch = 36;
    s[2] = generating_slot(3, 0), s[2].n_toks = 21, s[2].n_gen = 14, s[2].in_batch = 21;
    expect_room(srv_policy_make_room(s, 4), SRV_ROOM_HOLD_PROMPT, 2, -1);
    /* one resuming request alone in the batch, another holds cells: that one gives way */
    s[1].in_batch = s[2].in_batch = 0, s[2].n_past = 5;
    expect_room(srv_policy_make_room(s, 4), SRV_ROOM_PREEMPT, 2, 0);
}

/* ---- the model: the same rules as filters and sorts over random states ---- */

static uint64_t rng;
static uint32_t rnd(uint32_t n) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (uint32_t)(rng % n);
}

#define MAX_T 24
typedef struct world {
    tkv_token wt[16][MAX_T], st[8][MAX_T];
    srv_pwait w[16];
    srv_pslot s[8];
    size_t n_wait, n_slots, n_running;
    bool share, one_client;
    looks l;
} world;

static void random_tokens(tkv_token *t, size_t *n) {
    *n = 1 + rnd(MAX_T);
    for (size_t i = 0; i < *n; i++) t[i] = (tkv_token)(1 + (rnd(8) ? 0 : rnd(2))); /* long shared runs */
}

static void random_world(world *x) {
    memset(x, 0, sizeof *x);
    x->n_wait = rnd(7), x->n_slots = 1 + rnd(5), x->share = rnd(4) != 0, x->one_client = rnd(3) == 0;
    for (size_t i = 0; i < x->n_slots; i++) {
        srv_pslot *s = &x->s[i];
        s->busy = rnd(4) != 0;
        random_tokens(x->st[i], &s->n_toks);
        s->toks = x->st[i];
        s->n_past = rnd((uint32_t)s->n_toks + 1);
        s->n_gen = rnd(2) ? 0 : (int)(1 + rnd(3));
        s->ns = rnd(3) ? 0 : 1, s->group = rnd(3) ? 0 : 1 + rnd(2);
        s->client = x->one_client ? 7 : rnd(3);
        s->order = rnd(100);
        s->in_batch = rnd(2) ? 0 : 1 + rnd(4);
        x->n_running += s->busy;
    }
    if (rnd(2)) x->n_running = rnd(2);
    for (size_t i = 0; i < x->n_wait; i++) {
        srv_pwait *w = &x->w[i];
        random_tokens(x->wt[i], &w->n_toks);
        w->toks = x->wt[i];
        w->ns = rnd(3) ? 0 : 1, w->group = rnd(3) ? 0 : 1 + rnd(2);
        w->client = x->one_client ? 7 : rnd(3);
        w->skipped = rnd(4) ? rnd(SRV_STARVE_AFTER) : SRV_STARVE_AFTER + rnd(2);
        w->fetching = rnd(5) == 0;
        w->waits_for_room = rnd(10) == 0;
        x->l.cached[i] = rnd((uint32_t)w->n_toks + 1);
        x->l.skip[i] = rnd(6) == 0;
    }
}

/* Held back: some prompt being computed in r's namespace will hold a longer prefix of r than the cache does. */
static bool model_held(const world *x, size_t i) {
    const srv_pwait *r = &x->w[i];
    for (size_t k = 0; k < x->n_slots; k++) {
        const srv_pslot *s = &x->s[k];
        if (!s->busy || s->n_gen > 0 || s->ns != r->ns) continue;
        size_t shared = 0; /* of r's tokens but its last */
        while (shared + 1 < r->n_toks && shared < s->n_toks && r->toks[shared] == s->toks[shared]) shared++;
        const size_t need = r->group && r->group == s->group ? x->l.cached[i] + 1 : x->l.cached[i] + SRV_HOLD_MIN_TOKENS;
        if (shared >= need && s->n_past < shared) return true;
    }
    return false;
}

/* The model's shares: distinct clients of busy slots and of waiting requests not fetching, by a sorted list. */
static size_t model_share(const world *x) {
    uint64_t c[32];
    size_t n = 0;
    for (size_t i = 0; i < x->n_slots; i++)
        if (x->s[i].busy) c[n++] = x->s[i].client;
    for (size_t i = 0; i < x->n_wait; i++)
        if (!x->w[i].fetching) c[n++] = x->w[i].client;
    for (size_t a = 1; a < n; a++)
        for (size_t b = a; b > 0 && c[b] < c[b - 1]; b--) {
            uint64_t t = c[b];
            c[b] = c[b - 1], c[b - 1] = t;
        }
    size_t distinct = 0;
    for (size_t i = 0; i < n; i++) distinct += !i || c[i] != c[i - 1];
    if (!distinct) return x->n_slots;
    return x->n_slots / distinct ? x->n_slots / distinct : 1;
}

static size_t model_held_slots(const world *x, uint64_t client) {
    size_t n = 0;
    for (size_t i = 0; i < x->n_slots; i++) n += x->s[i].busy && x->s[i].client == client;
    return n;
}

static bool model_under(const world *x, size_t i) { return model_held_slots(x, x->w[i].client) < model_share(x); }

static long model_choose(const world *x, size_t *expect_asked, size_t *n_expect) {
    *n_expect = 0;
    if (x->n_running)
        for (size_t i = 0; i < x->n_wait; i++)
            if (x->w[i].waits_for_room) return -1;
    /* starving ones: of a client under its share, when any such request waits not fetching */
    bool any_under = false;
    for (size_t i = 0; i < x->n_wait; i++) any_under |= !x->w[i].fetching && model_under(x, i);
    for (size_t i = 0; i < x->n_wait; i++)
        if (x->w[i].skipped >= SRV_STARVE_AFTER && !x->w[i].fetching && (!any_under || model_under(x, i)))
            return (long)i;
    /* candidates: weighed (looked up), not skipped, not held; sorted by cached descending, then age */
    long cand[16];
    size_t n = 0;
    for (size_t i = 0; i < x->n_wait; i++) {
        if (x->w[i].fetching) continue;
        expect_asked[(*n_expect)++] = i;
        if (!x->l.skip[i] && !(x->share && model_held(x, i))) cand[n++] = (long)i;
    }
    /* a client over its share ranks after every client under it; then a request's next choice (its group runs
       in a slot) after every request with nothing running */
    int rank[16] = {0};
    for (size_t c = 0; c < n; c++) {
        for (size_t k = 0; k < x->n_slots; k++)
            if (x->w[cand[c]].group && x->s[k].busy && x->s[k].group == x->w[cand[c]].group) rank[cand[c]] = 1;
        if (!model_under(x, (size_t)cand[c])) rank[cand[c]] += 2;
    }
    for (size_t a = 1; a < n; a++) /* insertion sort, stable: equals keep their age order */
        for (size_t b = a; b > 0 && (rank[cand[b]] < rank[cand[b - 1]] ||
                                     (rank[cand[b]] == rank[cand[b - 1]] &&
                                      x->l.cached[cand[b]] > x->l.cached[cand[b - 1]]));
             b--) {
            long t = cand[b];
            cand[b] = cand[b - 1], cand[b - 1] = t;
        }
    return n ? cand[0] : -1;
}

/* Slots by age, youngest first, as the rules read. */
static size_t by_youth(const world *x, bool (*pick)(const srv_pslot *), int *out) {
    size_t n = 0;
    for (size_t i = 0; i < x->n_slots; i++)
        if (x->s[i].busy && pick(&x->s[i])) out[n++] = (int)i;
    for (size_t a = 1; a < n; a++)
        for (size_t b = a; b > 0 && x->s[out[b]].order > x->s[out[b - 1]].order; b--) {
            int t = out[b];
            out[b] = out[b - 1], out[b - 1] = t;
        }
    return n;
}
/* generating: past its prompt, with all but the last token of its list held (a request resuming after a
   preemption recomputes its list first: as a prompt) */
static bool is_gen(const srv_pslot *s) { return s->n_gen > 0 && s->n_past + 1 == s->n_toks; }
static bool is_prompt_in_batch(const srv_pslot *s) { return !is_gen(s) && s->in_batch; }
static bool holds(const srv_pslot *s) { return s->n_past > 0; }
static bool is_any(const srv_pslot *s) { return s->busy; }

static srv_room model_room(const world *x) {
    int prompts[8], gens[8], holders[8];
    const size_t np = by_youth(x, is_prompt_in_batch, prompts), ng = by_youth(x, is_gen, gens),
                 nh = by_youth(x, holds, holders);
    const int p = np ? prompts[0] : -1;
    if (np >= 2 || (np && ng)) return (srv_room){SRV_ROOM_HOLD_PROMPT, p, p};
    const int stuck = np ? p : ng ? gens[0] : -1;
    int victim = -1;
    for (size_t k = 0; k < nh && victim < 0; k++)
        if (holders[k] != p) victim = holders[k];
    if (victim < 0 || (!np && nh < 2)) return (srv_room){SRV_ROOM_NONE, -1, stuck};
    return (srv_room){SRV_ROOM_PREEMPT, victim, stuck};
}

/* The model's fairness preemption: with no free slot and a request of a client under its share waiting (not
   fetching, not waiting for room), the youngest slot among those of the clients holding the most slots, when
   that is more than the share. */
static long model_fair_preempt(const world *x) {
    for (size_t i = 0; i < x->n_slots; i++)
        if (!x->s[i].busy) return -1;
    bool any = false;
    for (size_t i = 0; i < x->n_wait; i++) any |= !x->w[i].fetching && !x->w[i].waits_for_room && model_under(x, i);
    if (!any) return -1;
    size_t most = 0;
    for (size_t i = 0; i < x->n_slots; i++) {
        const size_t h = model_held_slots(x, x->s[i].client);
        most = h > most ? h : most;
    }
    if (most <= model_share(x)) return -1;
    int order[8];
    const size_t n = by_youth(x, is_any, order);
    for (size_t k = 0; k < n; k++)
        if (model_held_slots(x, x->s[order[k]].client) == most) return order[k];
    return -1;
}

static void test_against_model(void **state) {
    (void)state;
    const char *env = getenv("TKV_POLICY_SEED");
    const uint64_t seed = env ? strtoull(env, NULL, 10) : (uint64_t)time(NULL);
    printf("test_sched_policy: seed %llu (TKV_POLICY_SEED repeats it)\n", (unsigned long long)seed);
    rng = seed * 2654435761u + 1;
    static world x;
    int n_fair = 0; /* states where a client gives way: the rule is exercised, not only its refusals */
    for (int it = 0; it < 20000; it++) {
        random_world(&x);
        /* the orders the rules compare are distinct in a scheduler (admission counts up) */
        for (size_t i = 0; i < x.n_slots; i++) x.s[i].order = i * 7 % x.n_slots * 10 + rnd(10);
        size_t expect_asked[16], n_expect;
        const long want = model_choose(&x, expect_asked, &n_expect);
        x.l.n_asked = 0;
        const long got = srv_policy_choose(x.w, x.n_wait, x.s, x.n_slots, x.n_running, x.share, look, &x.l);
        if (got != want) fail_msg("iteration %d: choose %ld, the model %ld", it, got, want);
        if (x.l.n_asked != n_expect) fail_msg("iteration %d: %zu lookups, the model %zu", it, x.l.n_asked, n_expect);
        for (size_t k = 0; k < n_expect; k++)
            if (x.l.asked[k] != expect_asked[k])
                fail_msg("iteration %d: lookup %zu asked for %zu, the model %zu", it, k, x.l.asked[k], expect_asked[k]);
        const long fp = srv_policy_fair_preempt(x.w, x.n_wait, x.s, x.n_slots), mfp = model_fair_preempt(&x);
        if (fp != mfp) fail_msg("iteration %d: fair_preempt %ld, the model %ld", it, fp, mfp);
        n_fair += fp >= 0;
        const srv_room r = srv_policy_make_room(x.s, x.n_slots), m = model_room(&x);
        if (r.kind != m.kind || r.slot != m.slot || (r.kind != SRV_ROOM_HOLD_PROMPT && r.stuck != m.stuck))
            fail_msg("iteration %d: make_room %d/%d/%d, the model %d/%d/%d", it, r.kind, r.slot, r.stuck, m.kind,
                     m.slot, m.stuck);
    }
    printf("test_sched_policy: a client gave way in %d of 20000 states\n", n_fair);
    assert_true(n_fair > 200);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_choose_by_cached),
        cmocka_unit_test(test_choose_starving_and_preempted),
        cmocka_unit_test(test_held_back),
        cmocka_unit_test(test_choices_share_a_slot),
        cmocka_unit_test(test_client_shares),
        cmocka_unit_test(test_make_room),
        cmocka_unit_test(test_against_model),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
