/*
 * policy.c — the scheduler's choices (policy.h): pure functions of the
 * views the scheduler fills, so that a test checks them without threads,
 * a model or a cache.
 */
#include "policy.h"

static size_t common_prefix(const tkv_token *a, size_t na, const tkv_token *b, size_t nb) {
    size_t n = na < nb ? na : nb, i = 0;
    while (i < n && a[i] == b[i]) i++;
    return i;
}

bool srv_policy_held_back(const srv_pslot *slots, size_t n_slots, const srv_pwait *r, size_t cached) {
    for (size_t i = 0; i < n_slots; i++) {
        const srv_pslot *sl = &slots[i];
        if (!sl->busy || sl->n_gen || sl->ns != r->ns) continue;
        /* the last token is decoded for its logits, so it is never shared */
        const size_t shared = common_prefix(r->toks, r->n_toks - 1, sl->toks, sl->n_toks);
        /* the choices of one request (n > 1) wait for whichever computes their prompt, however short */
        const bool sibling = r->group && r->group == sl->group;
        if ((shared >= cached + SRV_HOLD_MIN_TOKENS || (sibling && shared > cached)) && sl->n_past < shared) return true;
    }
    return false;
}

/* Whether a choice of waiting request r would be its request's second slot or more: its group runs already. */
static bool group_runs(const srv_pslot *slots, size_t n_slots, const srv_pwait *r) {
    for (size_t i = 0; r->group && i < n_slots; i++)
        if (slots[i].busy && slots[i].group == r->group) return true;
    return false;
}

size_t srv_policy_client_slots(const srv_pslot *slots, size_t n_slots, uint64_t client) {
    size_t n = 0;
    for (size_t i = 0; i < n_slots; i++) n += slots[i].busy && slots[i].client == client;
    return n;
}

/* Whether client was seen before index i of the slots, then of the waiting list (each client counted once). */
static bool seen_before(const srv_pwait *w, size_t i_wait, const srv_pslot *slots, size_t i_slot, uint64_t client) {
    for (size_t k = 0; k < i_slot; k++)
        if (slots[k].busy && slots[k].client == client) return true;
    for (size_t k = 0; k < i_wait; k++)
        if (!w[k].fetching && w[k].client == client) return true;
    return false;
}

/* Quadratic in the slots and the waiting list, as the rest of the choice: both are bounded (--parallel,
   --max-queue) and the choice runs once per admission. */
size_t srv_policy_share(const srv_pwait *w, size_t n_wait, const srv_pslot *slots, size_t n_slots) {
    size_t clients = 0;
    for (size_t i = 0; i < n_slots; i++)
        clients += slots[i].busy && !seen_before(w, 0, slots, i, slots[i].client);
    for (size_t i = 0; i < n_wait; i++)
        clients += !w[i].fetching && !seen_before(w, i, slots, n_slots, w[i].client);
    if (!clients) return n_slots;
    return n_slots / clients ? n_slots / clients : 1;
}

long srv_policy_choose(const srv_pwait *w, size_t n_wait, const srv_pslot *slots, size_t n_slots, size_t n_running,
                       bool share_prefixes, srv_policy_look look, void *user) {
    for (size_t i = 0; i < n_wait; i++)
        if (w[i].waits_for_room && n_running) return -1;
    const size_t share = srv_policy_share(w, n_wait, slots, n_slots);
    bool any_under = false; /* a request of a client under its share waits, not fetching */
    for (size_t i = 0; i < n_wait && !any_under; i++)
        any_under = !w[i].fetching && srv_policy_client_slots(slots, n_slots, w[i].client) < share;
    for (size_t i = 0; i < n_wait; i++)
        if (w[i].skipped >= SRV_STARVE_AFTER && !w[i].fetching &&
            (!any_under || srv_policy_client_slots(slots, n_slots, w[i].client) < share))
            return (long)i; /* the oldest starving (or preempted) one, unless its prefix is still on its way */
    long best = -1;
    size_t best_len = 0;
    bool best_more = false, best_over = false; /* the best one's request runs already; its client is not under */
    for (size_t i = 0; i < n_wait; i++) {
        if (w[i].fetching) continue;
        bool skip = false;
        const size_t cached = look(user, i, &skip);
        if (skip) continue;
        if (share_prefixes && srv_policy_held_back(slots, n_slots, &w[i], cached)) continue;
        const bool over = srv_policy_client_slots(slots, n_slots, w[i].client) >= share;
        /* a request's choices share one slot while other requests wait: n = 16 does not take every slot */
        const bool more = group_runs(slots, n_slots, &w[i]);
        if (best < 0 || (best_over && !over) ||
            (over == best_over && ((best_more && !more) || (more == best_more && cached > best_len))))
            best = (long)i, best_len = cached, best_more = more, best_over = over;
    }
    return best;
}

long srv_policy_fair_preempt(const srv_pwait *w, size_t n_wait, const srv_pslot *slots, size_t n_slots) {
    for (size_t i = 0; i < n_slots; i++)
        if (!slots[i].busy) return -1; /* a free slot: admission needs no one to give way */
    const size_t share = srv_policy_share(w, n_wait, slots, n_slots);
    bool any_under = false;
    for (size_t i = 0; i < n_wait && !any_under; i++)
        any_under = !w[i].fetching && !w[i].waits_for_room && srv_policy_client_slots(slots, n_slots, w[i].client) < share;
    if (!any_under) return -1;
    size_t most = 0; /* the most slots one client holds */
    for (size_t i = 0; i < n_slots; i++) {
        const size_t held = srv_policy_client_slots(slots, n_slots, slots[i].client);
        if (held > most) most = held;
    }
    if (most <= share) return -1; /* only a client over its share gives way */
    long victim = -1; /* the youngest slot of such a client */
    for (size_t i = 0; i < n_slots; i++)
        if (srv_policy_client_slots(slots, n_slots, slots[i].client) == most &&
            (victim < 0 || slots[i].order > slots[victim].order))
            victim = (long)i;
    return victim;
}

bool srv_policy_queue_admits(size_t n_wait, size_t max_queue, size_t client_waiting) {
    const size_t cap = max_queue / 2 ? max_queue / 2 : 1;
    return n_wait < max_queue && client_waiting < cap;
}

srv_room srv_policy_make_room(const srv_pslot *slots, size_t n_slots) {
    int p = -1, gen = -1, n_prompts = 0;
    for (size_t i = 0; i < n_slots; i++) {
        const srv_pslot *sl = &slots[i];
        if (!sl->busy) continue;
        if (srv_pslot_generating(sl)) {
            if (gen < 0 || sl->order > slots[gen].order) gen = (int)i;
        } else if (sl->in_batch) {
            n_prompts++;
            if (p < 0 || sl->order > slots[p].order) p = (int)i;
        }
    }
    if (n_prompts > 1 || (p >= 0 && gen >= 0)) return (srv_room){SRV_ROOM_HOLD_PROMPT, p, p};
    /* the youngest request holding cells, other than the prompt that needs them */
    int victim = -1, holders = 0;
    for (size_t i = 0; i < n_slots; i++) {
        const srv_pslot *sl = &slots[i];
        if (!sl->busy || !sl->n_past) continue;
        holders++;
        if ((int)i != p && (victim < 0 || sl->order > slots[victim].order)) victim = (int)i;
    }
    const int stuck = p >= 0 ? p : gen;
    if (victim < 0 || (p < 0 && holders < 2)) return (srv_room){SRV_ROOM_NONE, -1, stuck};
    return (srv_room){SRV_ROOM_PREEMPT, victim, stuck};
}
