/*
 * draftcost.c — the step's cost by its rows, and the drafts worth carrying (draftcost.h).
 */
#include "draftcost.h"

#include <math.h>

/* Whether size r has a figure: two or more measurements, the last within SRV_STEPCOST_FORGET steps. */
static int fresh(const srv_stepcost *c, size_t r) { return c->n[r] >= 2 && c->steps - c->at[r] <= SRV_STEPCOST_FORGET; }

/* Size r's figure (fresh(c, r)): the least of its last measurements. */
static double figure(const srv_stepcost *c, size_t r) {
    const unsigned k = c->n[r] < SRV_STEPCOST_KEEP ? c->n[r] : SRV_STEPCOST_KEEP;
    double least = c->t[r][0];
    for (unsigned i = 1; i < k; i++)
        if (c->t[r][i] < least) least = c->t[r][i];
    return least;
}

void srv_stepcost_add(srv_stepcost *c, size_t rows, double seconds) {
    c->steps++;
    if (!rows || rows > SRV_STEPCOST_ROWS || !(seconds > 0)) return;
    if (c->n[rows] && c->steps - c->at[rows] > SRV_STEPCOST_FORGET) c->n[rows] = 0; /* forgotten: start again */
    c->t[rows][c->n[rows] % SRV_STEPCOST_KEEP] = seconds;
    c->n[rows]++;
    c->at[rows] = c->steps;
}

/* The figure of size `rows` alone: its own when fresh; else a straight line between the nearest fresh sizes below
   and above it; else (above the largest) the line through the two largest, never falling (the largest's figure when
   it is the only one); 0 when no fresh size is at or below it. */
static double own(const srv_stepcost *c, size_t rows) {
    if (fresh(c, rows)) return figure(c, rows);
    size_t lo = rows, hi = rows;
    while (lo > 0 && !fresh(c, lo)) lo--;
    while (hi <= SRV_STEPCOST_ROWS && !fresh(c, hi)) hi++;
    if (!lo) return 0;
    const double tl = figure(c, lo);
    if (hi <= SRV_STEPCOST_ROWS) return tl + (figure(c, hi) - tl) * (double)(rows - lo) / (double)(hi - lo);
    size_t below = lo - 1;
    while (below > 0 && !fresh(c, below)) below--;
    if (!below) return tl;
    const double slope = (tl - figure(c, below)) / (double)(lo - below);
    return slope > 0 ? tl + slope * (double)(rows - lo) : tl;
}

double srv_stepcost_of(const srv_stepcost *c, size_t rows) {
    if (!rows || rows > SRV_STEPCOST_ROWS) return 0;
    double t = own(c, rows);
    if (!(t > 0)) return 0;
    for (size_t r = rows + 1; r <= SRV_STEPCOST_ROWS; r++) { /* a larger step that cost less bounds it */
        const double u = own(c, r);
        if (u < t) t = u;
    }
    return t;
}

/* The sequence whose next draft is the likeliest to be accepted (its chance in *best), or n when none is left;
   ties go to the first. */
static size_t likeliest(const srv_draftcand *c, size_t n, double *best) {
    size_t at = n;
    *best = 0;
    for (size_t i = 0; i < n; i++) {
        if (c[i].take >= c[i].n) continue;
        const double v = pow(c[i].p, (double)(c[i].take + 1));
        if (v > *best) *best = v, at = i;
    }
    return at;
}

size_t srv_draft_choose(const srv_stepcost *cost, size_t rows, size_t tokens, size_t room, srv_draftcand *c, size_t n) {
    for (size_t i = 0; i < n; i++) c[i].take = 0;
    const double t0 = srv_stepcost_of(cost, rows);
    if (!tokens || !(t0 > 0) || rows >= SRV_STEPCOST_ROWS) return 0;
    size_t most = SRV_STEPCOST_ROWS - rows;
    if (most > room) most = room;
    /* For a given number of drafts the best choice is the likeliest ones, which take each sequence's in
       order (a draft is never likelier than the one before it): add them one by one and keep the count whose
       tokens per second are the highest. */
    double expect = (double)tokens, best_rate = expect / t0 * (1 + SRV_DRAFT_MARGIN);
    size_t best_k = 0;
    for (size_t k = 1; k <= most; k++) {
        double v;
        const size_t i = likeliest(c, n, &v);
        if (i == n) break;
        c[i].take++;
        expect += v;
        const double rate = expect / srv_stepcost_of(cost, rows + k);
        if (rate > best_rate * (1 + 1e-9)) best_rate = rate, best_k = k; /* ties keep fewer rows */
    }
    for (size_t i = 0; i < n; i++) c[i].take = 0;
    for (size_t k = 0; k < best_k; k++) { /* the same picks again, up to the best count */
        double v;
        c[likeliest(c, n, &v)].take++;
    }
    return best_k;
}

bool srv_draft_can_pay(const srv_stepcost *cost, size_t rows, size_t tokens, size_t room, size_t n) {
    srv_draftcand sure = {.n = n, .p = 1};
    return srv_draft_choose(cost, rows, tokens, room, &sure, 1) > 0;
}

bool srv_probe_next(srv_probe *p, size_t taken, bool room, bool pays) {
    const unsigned wait = p->wait ? p->wait : SRV_PROBE_FIRST, need = pays ? wait : SRV_PROBE_LAST;
    if (taken) {
        p->declined = 0, p->wait = SRV_PROBE_FIRST;
        return false;
    }
    if (p->declined < SRV_PROBE_LAST) p->declined++;
    if (p->declined < need || !room) return false;
    p->declined = 0, p->wait = wait * 2 < SRV_PROBE_LAST ? wait * 2 : SRV_PROBE_LAST;
    return true;
}
