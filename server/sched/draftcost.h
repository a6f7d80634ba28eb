/*
 * draftcost.h — how many draft rows a step should carry, from what its rows
 * cost on this machine and how likely each draft is to be accepted.
 *
 * A draft is one more row in the step's batch. While the step is bound by
 * reading the weights (one sequence, or a few, on a large model) a row costs
 * almost nothing and any draft that may be accepted pays; once the step is
 * bound by arithmetic (several sequences on two cores) a row costs about
 * what one more token of any sequence costs, so a draft pays only when it is
 * nearly sure to be accepted, and a wrong one slows every sequence in the
 * batch. Neither the model's size nor the machine's load is known in
 * advance, so the step's cost by row count is learned from the steps
 * decoded (srv_stepcost), and the drafts of a step are chosen to maximise
 * the tokens it is expected to produce per second (srv_draft_choose).
 *
 * Pure functions, no threads: the scheduler (scheduler.c) owns one
 * srv_stepcost and calls these on its thread; tests/server/test_draftcost.c
 * holds them to a brute-force search over every choice.
 */
#ifndef TKV_SRV_SCHED_DRAFTCOST_H
#define TKV_SRV_SCHED_DRAFTCOST_H

#include <stdbool.h>
#include <stddef.h>

/* Steps of up to this many rows are measured; a step that would be larger carries no drafts. */
#define SRV_STEPCOST_ROWS 64

/* A size not measured for this many steps is measured again (its figure is forgotten): a figure taken in a
   moment of load would otherwise keep the step from ever trying that size again. */
#define SRV_STEPCOST_FORGET 1024

/* A size's figure is the least of its last SRV_STEPCOST_KEEP measurements, used from the second one on: a step's
   time only grows with what else the machine does, and the first step of a size can carry one-time costs, so a
   single figure taken then would keep that size from being tried again until forgotten. */
#define SRV_STEPCOST_KEEP 4

/* Seconds per step by its rows: each size's last measurements, how many were taken since it was last forgotten,
   and the step count at which it was last measured. Zero it to start. */
typedef struct srv_stepcost {
    double t[SRV_STEPCOST_ROWS + 1][SRV_STEPCOST_KEEP];
    unsigned n[SRV_STEPCOST_ROWS + 1];      /* measurements of the size (t holds the last KEEP of them) */
    unsigned long at[SRV_STEPCOST_ROWS + 1];
    unsigned long steps;                    /* steps recorded */
} srv_stepcost;

/* Record a step of `rows` rows that took `seconds` (rows 0 or beyond SRV_STEPCOST_ROWS, or seconds <= 0: only
   counted). A size last measured more than SRV_STEPCOST_FORGET steps ago starts again from this measurement. */
void srv_stepcost_add(srv_stepcost *c, size_t rows, double seconds);

/* What a step of `rows` rows is expected to cost. Each size's own figure is the least of its last measurements
   when it has two or more within the last SRV_STEPCOST_FORGET steps; else a straight line between the nearest sizes measured below and above it;
   else, above the largest size measured, the line through the two largest sizes measured, or flat where that line
   falls or only one size is measured (a guess that the first step of the new size corrects: flat while the steps
   are bound by reading the weights, where a row costs almost nothing, rising by what a row has cost where they are
   bound by arithmetic; the largest's figure alone would take a step of 4 sequences and 12 drafts for the price of
   4 and 1, bench/RESULTS.md). The cost is the least own figure of this size and every larger one: a larger step does not
   cost less, so a smaller size measured higher than a larger one was measured in a moment of load, and a larger
   size measured lower is tried, and so measured again, rather than avoided. 0 when no size of `rows` or fewer
   is known, and beyond SRV_STEPCOST_ROWS. */
double srv_stepcost_of(const srv_stepcost *c, size_t rows);

/* Drafts go into a step only when its expected tokens per second beat the step without them by this much. The
   figures underestimate what a draft row costs (the least of a few measurements: a step of 4 sequences and one
   draft was expected at +12% and took +17%, bench/RESULTS.md), and a draft that ends an answer a step early costs
   outside its step too (closed-loop clients that finished together send their next prompts apart, read in more and
   smaller steps); a draft whose expected gain is within them is as likely to lose as to win. */
#define SRV_DRAFT_MARGIN 0.05

/* A sequence's drafts as the choice sees them. */
typedef struct srv_draftcand {
    size_t n;     /* drafts proposed (each needs the ones before it) */
    double p;     /* the chance that one draft is accepted once the one before it was: draft k (0-based) is
                     accepted with probability p^(k+1) */
    size_t take;  /* out: how many of them the step carries (0 .. n) */
} srv_draftcand;

/*
 * Choose the drafts a step carries: `rows` rows are in it already (every generating sequence's pending token,
 * and the prompt chunks), `tokens` of which produce a token (the generating ones); c[i] proposes c[i].n drafts.
 * Sets every c[i].take so that the expected tokens per second, (tokens + the accepted drafts expected) /
 * srv_stepcost_of(rows + the drafts), is the largest over every choice (a sequence's drafts taken in order, at
 * most `room` in all), the step without drafts counted SRV_DRAFT_MARGIN faster than it is; among equal choices
 * the one with fewer rows. Returns the drafts taken in all.
 * Nothing is taken when tokens is 0, when the step with one more row would pass SRV_STEPCOST_ROWS, or when no
 * step of `rows` rows or fewer has been measured (the step is then decoded plain and measured).
 */
size_t srv_draft_choose(const srv_stepcost *cost, size_t rows, size_t tokens, size_t room, srv_draftcand *c, size_t n);

/* Whether a step of `rows` rows, `tokens` of them generating, would carry n drafts that are sure to be accepted (at
   most `room` of them): srv_draft_choose for one sequence whose chance is 1. Where it would not, no chance learned
   changes the choice, and a probe (below) is a row that buys little: four sequences on two cores, where a row
   costs a quarter of the step (bench/RESULTS.md). */
bool srv_draft_can_pay(const srv_stepcost *cost, size_t rows, size_t tokens, size_t room, size_t n);

/* A request whose drafts the choice leaves out step after step carries one of them after SRV_PROBE_FIRST such steps,
   then after twice as many each time, up to SRV_PROBE_LAST, until the choice takes its drafts again: a draft's
   chance is learned only from drafts decoded, so a chance guessed too low (an n-gram of text that the model copies)
   would otherwise never be corrected. A probe costs one row in that many steps. Where the request's drafts would not
   pay even were they sure (srv_draft_can_pay), it comes only after SRV_PROBE_LAST such steps: no chance learned
   changes that choice, but the table it rests on may hold a figure taken in a moment of load, or a guess for a size
   not measured, which only a step of that size corrects. */
#define SRV_PROBE_FIRST 4
#define SRV_PROBE_LAST 64

/* One request's probing: steps left out since its last probe, and how many make the next (0: SRV_PROBE_FIRST).
   Zero it to start. */
typedef struct srv_probe {
    unsigned declined, wait;
} srv_probe;

/* Record a step at which the request proposed drafts and the choice took `taken` of them; `room`: whether the step
   has a row to spare; `pays`: whether sure drafts would pay in it. Returns whether the step carries one draft anyway
   (a probe): never when taken > 0 (which starts probing over) or without room (the probe waits for a step with
   room), and where they would not pay, only after SRV_PROBE_LAST steps. */
bool srv_probe_next(srv_probe *p, size_t taken, bool room, bool pays);

#endif
