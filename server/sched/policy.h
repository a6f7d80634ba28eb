/*
 * policy.h — the scheduler's decisions as pure functions over a view of its
 * slots and its waiting list: which waiting request runs next, which one is
 * held back, and who gives way when the cache is full.
 *
 * No threads, no context, no HTTP: the scheduler (scheduler.c) fills the
 * views, does the lookups a choice needs when the policy asks for them,
 * and acts on the answers; tests/server/test_sched_policy.c drives the
 * functions directly against a hand-written model of the same rules.
 */
#ifndef TKV_SRV_SCHED_POLICY_H
#define TKV_SRV_SCHED_POLICY_H

#include "tokenkv.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A waiting request passed over this many times is admitted next. */
#define SRV_STARVE_AFTER 8
/* Hold a request back only for a shared prefix at least this long. */
#define SRV_HOLD_MIN_TOKENS 8

/* A slot as the policy sees it. */
typedef struct srv_pslot {
    bool busy;            /* a request runs in it */
    const tkv_token *toks; /* (n_toks) what its sequence must hold: prompt, then generated tokens */
    size_t n_toks;
    size_t n_past;        /* tokens of toks its sequence holds */
    int n_gen;            /* tokens generated; 0 while its prompt is computed (after a preemption or a shift it
                             recomputes its list first: srv_pslot_generating) */
    uint64_t ns;          /* cache namespace */
    uint64_t group;       /* the choices of one request share a non-zero group */
    uint64_t client;      /* who sent it: its API key's or its address's hash (fairness) */
    uint64_t order;       /* admission order: the youngest gives way */
    size_t in_batch;      /* its tokens in this step's batch */
} srv_pslot;

/* Whether the slot's next step is one generated token (its list is computed but for the last token); else it
   computes a prompt, or the list of a request resuming after a preemption or a shift, in chunks. */
static inline bool srv_pslot_generating(const srv_pslot *s) { return s->n_gen > 0 && s->n_past + 1 == s->n_toks; }

/* A waiting request as the policy sees it, oldest first. */
typedef struct srv_pwait {
    const tkv_token *toks; /* (n_toks) its token list: the prompt, or where a preempted one was */
    size_t n_toks;
    uint64_t ns, group;
    uint64_t client;       /* as srv_pslot's */
    uint32_t skipped;      /* times passed over (SRV_STARVE_AFTER: preempted, first in line) */
    bool fetching;         /* its prefix is on its way from the shared store or the disk tier */
    bool waits_for_room;   /* preempted, and no request has ended since */
} srv_pwait;

/*
 * What the choice learns of waiting request i only when it weighs it by its
 * cached prefix: how many of its tokens the cache holds, or *skip when it
 * cannot be admitted now (a lookup of its prefix in another tier just
 * started). The scheduler's lookups happen here, in the order the policy
 * asks.
 */
typedef size_t (*srv_policy_look)(void *user, size_t i, bool *skip);

/*
 * Fairness between clients: the slots are shared equally among the active
 * clients (those with a request running or waiting not fetching): a
 * client's share is n_slots / active clients, at least 1. A client under
 * its share is one holding fewer slots than that. A request's choices are
 * its client's, so `n` counts against the same share.
 */
size_t srv_policy_share(const srv_pwait *w, size_t n_wait, const srv_pslot *slots, size_t n_slots);
/* The slots client holds. */
size_t srv_policy_client_slots(const srv_pslot *slots, size_t n_slots, uint64_t client);

/*
 * The index of the waiting request to admit next, or -1 (none can go now).
 * In order: while a preempted request waits for room and some request runs
 * (n_running), nothing (it would take the room back); the oldest starving
 * one (passed over SRV_STARVE_AFTER times) that is not fetching, of a
 * client under its share if any request of such a client waits not
 * fetching; else, among those not fetching, not skipped by look and not
 * held back (share_prefixes: srv_policy_held_back): a request of a client
 * under its share before any other; then any request with nothing running
 * before a choice whose request (group) runs already (the choices of one
 * request share a slot while other requests wait); then the longest cached
 * prefix; then the oldest.
 */
long srv_policy_choose(const srv_pwait *w, size_t n_wait, const srv_pslot *slots, size_t n_slots, size_t n_running,
                       bool share_prefixes, srv_policy_look look, void *user);

/*
 * Whether a running request is computing, right now, a prefix of r longer
 * than the `cached` tokens the cache holds: then r waits for it instead of
 * computing it too. Only a slot of r's namespace still on its prompt
 * counts, for a shared prefix SRV_HOLD_MIN_TOKENS beyond the cached one
 * (any longer one for the choices of one request), that it does not hold
 * yet.
 */
bool srv_policy_held_back(const srv_pslot *slots, size_t n_slots, const srv_pwait *r, size_t cached);

/*
 * With every slot busy, the slot to preempt so that a waiting request (not
 * fetching, not waiting for room) of a client under its share is admitted
 * at once, or -1: the youngest slot of the client holding the most slots,
 * if that is more than its share. The preempted request waits as any other
 * (it resumes where it was); a client at or under its share is never
 * preempted for another, so shares settle instead of trading slots.
 */
long srv_policy_fair_preempt(const srv_pwait *w, size_t n_wait, const srv_pslot *slots, size_t n_slots);

/*
 * Whether a client with client_waiting requests (choices) among the n_wait
 * waiting may queue one more (max_queue in all): a client holds at most
 * half the queue (at least one place), so that one client alone cannot
 * fill it.
 */
bool srv_policy_queue_admits(size_t n_wait, size_t max_queue, size_t client_waiting);

/* What to do when this step's batch does not fit in the cache. */
typedef enum {
    SRV_ROOM_HOLD_PROMPT, /* leave slot's prompt out of this step */
    SRV_ROOM_PREEMPT,     /* preempt slot (if the queue takes it back; else stuck is out of room) */
    SRV_ROOM_NONE,        /* nobody can give way: stuck is out of room */
} srv_room_kind;
typedef struct srv_room {
    srv_room_kind kind;
    int slot;  /* the slot held back or preempted, or -1 */
    int stuck; /* the slot that cannot go on without room, or -1 */
} srv_room;

/*
 * Prompts give way first, youngest first, while generating requests go on
 * (they end and free their cells). A prompt that cannot go on with no one
 * generating preempts the youngest other request holding cells. When
 * generation alone does not fit, the youngest generating request is stuck,
 * and the youngest holder is preempted if there are two holders or more
 * (preempting the only holder would free nothing for anyone else).
 */
srv_room srv_policy_make_room(const srv_pslot *slots, size_t n_slots);

#endif
