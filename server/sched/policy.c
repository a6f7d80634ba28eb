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

long srv_policy_choose(const srv_pwait *w, size_t n_wait, const srv_pslot *slots, size_t n_slots, size_t n_running,
                       bool share_prefixes, srv_policy_look look, void *user) {
    for (size_t i = 0; i < n_wait; i++)
        if (w[i].waits_for_room && n_running) return -1;
    for (size_t i = 0; i < n_wait; i++)
        if (w[i].skipped >= SRV_STARVE_AFTER && !w[i].fetching)
            return (long)i; /* the oldest starving (or preempted) one, unless its prefix is still on its way */
    long best = -1;
    size_t best_len = 0;
    bool best_more = false; /* the best one is a choice of a request that runs already */
    for (size_t i = 0; i < n_wait; i++) {
        if (w[i].fetching) continue;
        bool skip = false;
        const size_t cached = look(user, i, &skip);
        if (skip) continue;
        if (share_prefixes && srv_policy_held_back(slots, n_slots, &w[i], cached)) continue;
        /* a request's choices share one slot while other requests wait: n = 16 does not take every slot */
        const bool more = group_runs(slots, n_slots, &w[i]);
        if (best < 0 || (best_more && !more) || (more == best_more && cached > best_len))
            best = (long)i, best_len = cached, best_more = more;
    }
    return best;
}

srv_room srv_policy_make_room(const srv_pslot *slots, size_t n_slots) {
    int p = -1, gen = -1, n_prompts = 0;
    for (size_t i = 0; i < n_slots; i++) {
        const srv_pslot *sl = &slots[i];
        if (!sl->busy) continue;
        if (sl->n_gen > 0) {
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
