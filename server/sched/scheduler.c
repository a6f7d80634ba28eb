/*
 * scheduler.c — continuous batching on one inference thread.
 *
 * The thread owns the context. HTTP threads hand it requests through a
 * waiting list (under `mu`) and get text back through each request's own
 * lock (request.h). A running request occupies a slot, and a slot is a
 * sequence of the context; when the request ends the sequence is cleared,
 * which leaves everything it computed cached (unreferenced, evictable), so
 * the next request with the same prefix finds it whichever slot it lands on.
 *
 * A request is a token list its sequence must hold (the prompt, then each
 * generated token) and a sampler. Each step decodes, for every running
 * request, the tokens of its list that its sequence does not hold yet: one
 * for a generating request, a chunk of prompt for a new one. When the cache
 * runs out of room, the youngest request is preempted: its sequence is
 * cleared (what it computed stays cached while there is room) and it waits
 * at the head of the queue until another request ends; then it attaches
 * whatever of its list is still cached and goes on, with the same output it
 * would have had (decoding is batch-invariant).
 *
 * With --context-shift (opts.shift_window), a generating request whose
 * sequence reaches the window drops tokens after its kept prefix from its
 * list, as llama-server does, and its sequence attaches the new list again:
 * the kept prefix is reused and the rest recomputed at its new positions,
 * not re-roped, so every cell still holds exactly the K/V of its token list
 * (a re-roped tail would carry attention to the dropped tokens and poison
 * the prefix index for whoever asks for that list).
 *
 * With drafts (--draft N, a request's speculative.n_max), a generating request whose sequence holds all of its list
 * but the pending token asks the cache for the tokens likely to follow (tkv_seq_draft: what followed this text in
 * the prefix tree, or in the text itself) and puts up to its budget of them (tkv_draft_budget_next) after its
 * pending token in the step's batch, each with logits; after the decode, tkv_seq_accept_draft samples its rows in
 * order with the request's sampler and hands each token to on_token as a one-token step would, until a token
 * differs from the draft: the same tokens, text, logprobs and stops as without drafts, several per step. Drafts go
 * in after every generating request's pending token and before prompt chunks, at most a budget each, and only
 * those worth their rows (choose_drafts, draftcost.h: what a row adds to the step's time, learned from the steps
 * decoded, against the tokens a draft is expected to add); when the cache is full they are dropped before anyone
 * is preempted.
 *
 * Which request is admitted, held back or preempted is policy.c's, a pure
 * function of views this file fills (slot_views, choose); this file does
 * the lookups and the actions.
 */
#include "scheduler.h"
#include "draftcost.h"
#include "policy.h"
#include "tiers/disk_tier.h"
#include "tiers/redis_store.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* What a request needs to go on; survives preemption. */
typedef struct srv_run {
    tkv_token *toks;       /* (n_toks) what the sequence must hold: prompt, then generated tokens */
    size_t n_toks, cap;
    int n_gen;             /* tokens generated (the last one not decoded yet) */
    tkv_token *gen;        /* (n_gen) with a context shift: every generated token, as toks loses some */
    uint64_t ns;           /* namespace */
    bool preempted;        /* for want of cache room (not for fairness) */
    uint64_t resume_after; /* requests ended when it was preempted: it waits for one more */
    tkv_sampler *smp;
    tkv_detok *dt;
    tkv_draft_budget budget; /* how many drafts to ask for (tkv_draft_budget_next) */
    size_t offered, accepted; /* the last drafted step's drafts and how many were accepted, for the budget */
    double d_acc[2], d_rej[2]; /* by source (draft_src): drafts accepted, and drafted steps that ended on a
                                  rejected one, both fading (draft_chance) */
    srv_probe probe;       /* when a step whose drafts the cost rule leaves out carries one anyway */
} srv_run;

typedef struct slot {
    srv_req *req;    /* NULL: free */
    srv_run *run;    /* req->run */
    tkv_seq seq;
    size_t n_past;   /* tokens of run->toks the sequence holds */
    uint64_t order;  /* admission order: the youngest gives way */
    int logits_at;   /* batch index of this step's logits, -1: none */
    size_t in_batch; /* tokens in this step's batch */
    bool wait_step;  /* left out of this step: no room */
    tkv_token draft[TKV_DRAFT_MAX]; /* (n_draft) this step's drafts, after the pending token */
    size_t n_draft;  /* drafts proposed for this step */
    size_t drafted;  /* of them in this step's batch (after its pending token, each with logits) */
    int draft_src;   /* where they come from: DRAFT_TREE, DRAFT_TEXT */
} slot;

/* Where a step's drafts come from, and how likely such a draft is to be accepted before the request has drafted
   (per draft, once the one before it was). What followed the same tokens in the prefix tree is what the model
   answered before: at temperature 0 the same again, since decoding is batch-invariant; an n-gram of the text is a
   guess (bench/RESULTS.md, drafts in the server: 26-33% of such drafts were accepted on text that does not repeat,
   every tree draft on a retry). */
enum { DRAFT_TREE, DRAFT_TEXT };
static const double draft_prior[2] = {[DRAFT_TREE] = 0.9, [DRAFT_TEXT] = 0.3};

struct srv_sched {
    tkv_context *ctx;
    const tkv_model *model;
    srv_sched_opts o;
    srv_metrics *metrics;
    size_t n_vocab;
    uint32_t n_batch;

    pthread_t thread;
    pthread_mutex_t mu; /* wait list, calls, stopping, n_running */
    pthread_cond_t wake, call_done;
    srv_req **wait;     /* (max_queue) oldest first */
    uint32_t *skipped;  /* (max_queue) times each was passed over */
    size_t n_wait;
    srv_job *calls;
    bool stopping;
    size_t n_running;
    size_t n_disk_pending; /* waiting requests whose prefix is being read from disk */

    slot *slots;        /* (parallel) */
    srv_pslot *pslots;  /* (parallel) the slots as the policy sees them */
    srv_pwait *pwait;   /* (max_queue) the waiting list as the policy sees it */
    srv_draftcand *cand; /* (parallel) the slots' drafts as choose_drafts weighs them */
    srv_stepcost cost;  /* what a step costs by its rows, from the steps decoded */
    double g_acc[2], g_rej[2]; /* every request's drafts by source, as srv_run's d_acc and d_rej, fading more
                                  slowly: the prior of a new request's chance (draft_chance) */
    uint64_t admitted, ended, unique_ns;
    /* the step's batch, n_batch tokens */
    tkv_token *b_tok;
    tkv_pos *b_pos;
    tkv_seq *b_seq;
    bool *b_logits;
};

/* The token list a request's sequence must hold (its prompt until admitted). */
static const tkv_token *list_of(const srv_req *r, size_t *n) {
    if (r->run) return *n = r->run->n_toks, r->run->toks;
    return *n = r->n_prompt, r->prompt;
}

static void run_free(srv_req *r) {
    if (!r->run) return;
    tkv_sampler_free(r->run->smp);
    tkv_detok_free(r->run->dt);
    free(r->run->toks);
    free(r->run->gen);
    free(r->run);
    r->run = NULL;
}

/* ---- ending a request ----------------------------------------------------- */

static void release(srv_sched *s, slot *sl) {
    tkv_seq_clear(s->ctx, sl->seq); /* what it computed stays cached */
    run_free(sl->req);
    srv_req_unref(sl->req);
    sl->req = NULL, sl->run = NULL;
    s->ended++;
    pthread_mutex_lock(&s->mu);
    s->n_running--;
    pthread_mutex_unlock(&s->mu);
}

static void finish(srv_sched *s, slot *sl, const char *reason) {
    srv_req *r = sl->req;
    const int n_gen = sl->run->n_gen;
    /* the generated ids follow the prompt in the run's list */
    if (r->return_tokens)
        srv_req_set_tokens(r, sl->run->gen ? sl->run->gen : sl->run->toks + r->n_prompt, (size_t)n_gen);
    srv_req_finish(r, reason, n_gen);
    srv_metrics_tokens(s->metrics, r->n_prompt, r->n_cached, (uint64_t)n_gen);
    if (n_gen > 0) {
        srv_metrics_ttft(s->metrics, r->t_first - r->t_arrival);
        if (n_gen > 1) srv_metrics_tpot(s->metrics, (r->t_done - r->t_first) / (n_gen - 1));
    }
    release(s, sl);
}

static void fail(srv_sched *s, slot *sl, srv_fail why, const char *msg) {
    srv_req_fail(sl->req, why, "%s", msg);
    release(s, sl);
}

/* sl's request fails because the context refused `what`: its message says why. */
static void fail_call(srv_sched *s, slot *sl, const char *what) {
    char msg[256];
    snprintf(msg, sizeof msg, "%s failed: %s", what, tkv_last_error(s->ctx));
    fail(s, sl, SRV_FAIL_INTERNAL, msg);
}

/* Give the slot back and queue the request again, first in line; it goes on
   once another request has ended. False when the queue is full. */
/* Preempt sl's request: back to the head of the waiting list, its cells cached, to resume where it was. for_room:
   for want of cache room (it goes first when a request ended); else for another client's share (it waits as the
   oldest, its client over its share). false when the waiting list has no place for it. With mu held: locked. */
static bool preempt_locked(srv_sched *s, slot *sl, bool for_room) {
    if (s->n_wait == s->o.max_queue) return false;
    memmove(s->wait + 1, s->wait, s->n_wait * sizeof *s->wait);
    memmove(s->skipped + 1, s->skipped, s->n_wait * sizeof *s->skipped);
    s->wait[0] = sl->req;
    s->skipped[0] = for_room ? SRV_STARVE_AFTER : 0;
    s->n_wait++;
    s->n_running--;
    tkv_seq_clear(s->ctx, sl->seq);
    sl->run->preempted = for_room;
    sl->run->resume_after = s->ended;
    sl->req = NULL, sl->run = NULL;
    srv_metrics_preemption(s->metrics);
    return true;
}

static bool preempt(srv_sched *s, slot *sl) {
    pthread_mutex_lock(&s->mu);
    const bool ok = preempt_locked(s, sl, true);
    pthread_mutex_unlock(&s->mu);
    return ok;
}

/* ---- the disk tier ------------------------------------------------------- */

typedef struct disk_read {
    srv_job job;
    srv_sched *s;
    srv_req *r;
    srv_disk_fetch *f;
} disk_read;

/* Inference thread: put what was read into the cache; the request may go. */
static void disk_loaded(tkv_context *ctx, void *user) {
    disk_read *dr = user;
    srv_disk_load(dr->s->o.disk, ctx, dr->f);
}

static void disk_done(srv_job *job, bool ran) {
    disk_read *dr = job->user;
    (void)ran;
    pthread_mutex_lock(&dr->s->mu);
    dr->r->disk_state = SRV_DISK_DONE;
    dr->s->n_disk_pending--;
    pthread_mutex_unlock(&dr->s->mu);
    srv_req_unref(dr->r);
    srv_disk_fetch_free(dr->f);
    free(dr);
}

/* Disk thread: the files are read; the load happens between two steps. */
static void disk_ready(srv_disk_fetch *f) {
    disk_read *dr = f->user;
    srv_sched_post(dr->s, &dr->job);
}

/* Whether r waits for the disk: on its first look, a read starts when the disk holds more of its prompt than
   RAM (`cached` tokens); r is admitted once it is loaded. Called with mu held. */
static bool waits_for_disk(srv_sched *s, srv_req *r, uint64_t ns, size_t cached) {
    if (!s->o.disk || r->run || r->disk_state == SRV_DISK_DONE) return false;
    if (r->disk_state == SRV_DISK_FETCHING) return true;
    r->disk_state = SRV_DISK_DONE;
    srv_disk_fetch *f = srv_disk_lookup(s->o.disk, ns, r->prompt, r->n_prompt, cached);
    disk_read *dr = f ? calloc(1, sizeof *dr) : NULL;
    if (!dr) {
        srv_disk_fetch_free(f);
        return false;
    }
    *dr = (disk_read){.job = {.fn = disk_loaded, .done = disk_done, .user = dr}, .s = s, .r = r, .f = f};
    srv_req_ref(r);
    f->ready = disk_ready;
    f->user = dr;
    r->disk_state = SRV_DISK_FETCHING;
    s->n_disk_pending++;
    srv_disk_read(s->o.disk, f);
    return true;
}

static uint64_t ns_of(srv_sched *s, const srv_req *r) {
    if (r->run) return r->run->ns;
    /* without the prefix cache every request is its own namespace: the
       same computation, nothing shared */
    return s->o.no_prefix_cache ? (1ull << 63) | s->unique_ns : r->ns;
}

/* Whether r's prefix is on its way from the shared store or the disk tier (it is not admitted meanwhile). */
static bool fetching(const srv_req *r) { return r->store_state == SRV_STORE_FETCHING || r->disk_state == SRV_DISK_FETCHING; }

/* ---- admission: the policy's views, and the lookups it asks for ---------- */

/* The slots as the policy sees them (s->pslots). */
static const srv_pslot *slot_views(srv_sched *s) {
    for (int i = 0; i < s->o.parallel; i++) {
        const slot *sl = &s->slots[i];
        srv_pslot *v = &s->pslots[i];
        *v = (srv_pslot){.busy = sl->req != NULL, .n_past = sl->n_past, .order = sl->order, .in_batch = sl->in_batch};
        if (!sl->req) continue;
        v->toks = sl->run->toks, v->n_toks = sl->run->n_toks;
        v->n_gen = sl->run->n_gen, v->ns = sl->run->ns, v->group = sl->req->group, v->client = sl->req->client;
    }
    return s->pslots;
}

/* The policy's look (policy.h): the cached prefix of waiting request i, after the
   tiers behind the RAM cache were asked for more of it. Called with mu held. */
static size_t look(void *user, size_t i, bool *skip) {
    srv_sched *s = user;
    srv_req *r = s->wait[i];
    const uint64_t ns = s->pwait[i].ns;
    size_t n, cached = 0;
    const tkv_token *t = list_of(r, &n);
    tkv_cache_match(s->ctx, ns, t, n, &cached);
    if (!s->o.no_prefix_cache && waits_for_disk(s, r, ns, cached)) return *skip = true, 0;
    if (r->store_state == SRV_STORE_NEW) { /* first seen: the shared store may hold more of it */
        const bool asked = !r->run && !s->o.no_prefix_cache && srv_store_lookup(s->o.store, r, ns, t, n, cached);
        r->store_state = asked ? SRV_STORE_FETCHING : SRV_STORE_DONE;
        if (asked) return *skip = true, 0;
    }
    return cached;
}

/* Index of the waiting request to admit, or -1 (none, or all held back). Called with mu held. */
/* The views of the waiting list (s->pwait), with mu held. */
static void wait_views(srv_sched *s) {
    for (size_t i = 0; i < s->n_wait; i++) {
        const srv_req *r = s->wait[i];
        const srv_run *run = r->run;
        srv_pwait *v = &s->pwait[i];
        *v = (srv_pwait){.ns = ns_of(s, r), .group = r->group, .client = r->client, .skipped = s->skipped[i],
                         .fetching = fetching(r),
                         /* a preempted request waits for room until another request ends */
                         .waits_for_room = run && run->preempted && run->resume_after == s->ended};
        v->toks = list_of(r, &v->n_toks);
    }
}

static long choose(srv_sched *s) {
    wait_views(s);
    return srv_policy_choose(s->pwait, s->n_wait, slot_views(s), (size_t)s->o.parallel, s->n_running,
                             !s->o.no_prefix_cache, look, s);
}

/* A request's state at its first admission. */
static tkv_status new_run(srv_sched *s, srv_req *r) {
    srv_run *run = calloc(1, sizeof *run);
    if (!run) return TKV_ERR_NOMEM;
    run->ns = ns_of(s, r); /* before r->run is set: ns_of reads it */
    s->unique_ns++;
    r->run = run;
    run->cap = r->n_prompt + (size_t)r->max_tokens + 1; /* room for every token: no allocation per step */
    run->toks = malloc(run->cap * sizeof *run->toks);
    if (!run->toks) return TKV_ERR_NOMEM;
    memcpy(run->toks, r->prompt, r->n_prompt * sizeof *r->prompt);
    if (s->o.shift_window && !(run->gen = malloc(((size_t)r->max_tokens + 1) * sizeof *run->gen))) return TKV_ERR_NOMEM;
    run->n_toks = r->n_prompt;
    tkv_status st = tkv_sampler_create(&r->sp, s->n_vocab, &run->smp);
    if (!st && r->grammar) st = tkv_sampler_set_grammar(run->smp, r->grammar); /* it survives preemption with run */
    /* the text continues the prompt: keep the space before its first word */
    if (!st)
        st = tkv_detok_create(s->model, TKV_DETOKENIZE_CONTINUE | (r->special_text ? TKV_DETOKENIZE_SPECIAL : 0u),
                              &run->dt);
    return st;
}

static void start(srv_sched *s, slot *sl, srv_req *r) {
    const bool first = !r->run;
    sl->req = r;
    sl->order = s->admitted++;
    tkv_status st = first ? new_run(s, r) : TKV_OK;
    sl->run = r->run;
    size_t reused = 0;
    if (!st) st = tkv_seq_attach(s->ctx, sl->seq, sl->run->ns, sl->run->toks, sl->run->n_toks, &reused);
    if (st) {
        char msg[256];
        snprintf(msg, sizeof msg, "%s", st == TKV_ERR_NOMEM ? "out of memory" : tkv_last_error(s->ctx));
        fail(s, sl, st == TKV_ERR_FULL ? SRV_FAIL_CACHE_FULL : st == TKV_ERR_INVALID ? SRV_FAIL_INVALID : SRV_FAIL_INTERNAL,
             msg);
        return;
    }
    sl->n_past = reused;
    if (first) srv_req_set_cached(r, reused), srv_req_progress(r, reused); /* cached_tokens: of the prompt, at arrival */
}

static void admit(srv_sched *s) {
    pthread_mutex_lock(&s->mu);
    /* a client under its share waits while every slot is busy: one over its share gives way now, so that the
       waiting one starts this step (once per step: each preemption frees the slot it takes) */
    wait_views(s);
    const long v = srv_policy_fair_preempt(s->pwait, s->n_wait, slot_views(s), (size_t)s->o.parallel);
    if (v >= 0) {
        /* only if the slot would go to another client now: one whose request is held back (its prefix is being
           computed) or whose prefix is being fetched would leave it to the same client, every step */
        s->pslots[v].busy = false;
        const long k = srv_policy_choose(s->pwait, s->n_wait, s->pslots, (size_t)s->o.parallel, s->n_running,
                                         !s->o.no_prefix_cache, look, s);
        if (k >= 0 && s->wait[k]->client != s->slots[v].req->client) preempt_locked(s, &s->slots[v], false);
    }
    for (int i = 0; i < s->o.parallel && s->n_wait; i++) {
        slot *sl = &s->slots[i];
        if (sl->req) continue;
        long k = choose(s);
        if (k < 0) break;
        srv_req *r = s->wait[k];
        for (long j = 0; j < k; j++) s->skipped[j]++; /* older ones passed over */
        memmove(s->wait + k, s->wait + k + 1, (s->n_wait - (size_t)k - 1) * sizeof *s->wait);
        memmove(s->skipped + k, s->skipped + k + 1, (s->n_wait - (size_t)k - 1) * sizeof *s->skipped);
        s->n_wait--;
        s->n_running++;
        pthread_mutex_unlock(&s->mu);
        start(s, sl, r);
        pthread_mutex_lock(&s->mu);
    }
    pthread_mutex_unlock(&s->mu);
}

/* Waiting requests whose client left are dropped; running ones end. */
static void drop_cancelled(srv_sched *s) {
    pthread_mutex_lock(&s->mu);
    size_t k = 0;
    for (size_t i = 0; i < s->n_wait; i++) {
        if (srv_req_is_cancelled(s->wait[i])) {
            srv_req_fail(s->wait[i], SRV_FAIL_CANCELLED, "the client closed the connection");
            run_free(s->wait[i]);
            srv_req_unref(s->wait[i]);
            continue;
        }
        s->skipped[k] = s->skipped[i];
        s->wait[k++] = s->wait[i];
    }
    s->n_wait = k;
    pthread_mutex_unlock(&s->mu);
    for (int i = 0; i < s->o.parallel; i++)
        if (s->slots[i].req && srv_req_is_cancelled(s->slots[i].req)) finish(s, &s->slots[i], "cancelled");
}

/* ---- one step --------------------------------------------------------------- */

/* Whether sl's next step is one generated token: a request that resumes after a preemption or a shift first
   computes the rest of its list in chunks, as a prompt (and the policy sees it so: srv_pslot_generating). */
static bool generating(const slot *sl) { return sl->req && sl->run->n_gen > 0 && sl->n_past + 1 == sl->run->n_toks; }

/* Put tokens [n_past, n_past + take) of sl's list in the batch at n. */
static size_t add(srv_sched *s, size_t n, slot *sl, size_t take) {
    const srv_run *run = sl->run;
    for (size_t k = 0; k < take; k++) {
        const size_t p = sl->n_past + k;
        s->b_tok[n] = run->toks[p];
        s->b_pos[n] = (tkv_pos)p;
        s->b_seq[n] = sl->seq;
        s->b_logits[n] = p + 1 == run->n_toks;
        if (s->b_logits[n]) sl->logits_at = (int)n;
        n++;
    }
    sl->in_batch = take;
    return n;
}

/* The limit on positions before which a generating request's tokens never shift or end it for want of room: its
   drafts, or known tokens, after the pending one at n_past number at most this many. */
static size_t room_after(const srv_sched *s, const slot *sl) {
    const size_t limit = s->o.shift_window ? s->o.shift_window : s->o.n_ctx;
    return limit > sl->n_past + 2 ? limit - sl->n_past - 2 : 0;
}

/* sl's drafts for this step (sl->draft, sl->n_draft): a generating request with drafting on whose sequence holds
   its list but the pending token asks the cache for up to its budget, within what it may still generate after
   this step's token and the positions before its window's end (so that no token but the step's last one can shift
   or end it for want of room). Once per step: the budget counts steps. */
static void propose(srv_sched *s, slot *sl) {
    sl->n_draft = 0;
    const srv_req *r = sl->req;
    srv_run *run = sl->run;
    if (!generating(sl) || r->draft_max <= 0 || sl->n_past + 1 != run->n_toks) return;
    size_t ask = tkv_draft_budget_next(&run->budget, (size_t)r->draft_max, run->offered, run->accepted);
    run->offered = run->accepted = 0;
    const size_t left = (size_t)(r->max_tokens - run->n_gen); /* >= 1: it would have ended otherwise */
    const size_t room = room_after(s, sl);
    if (ask > left - 1) ask = left - 1;
    if (ask > room) ask = room;
    if (!ask) return;
    static const unsigned source[2] = {[DRAFT_TREE] = TKV_DRAFT_CACHE, [DRAFT_TEXT] = TKV_DRAFT_NGRAM};
    for (int k = DRAFT_TREE; k <= DRAFT_TEXT; k++) { /* the tree first, as tkv_seq_draft itself would */
        size_t n = 0;
        if (tkv_seq_draft(s->ctx, sl->seq, &run->toks[sl->n_past], 1, sl->draft, ask, &n, source[k]) != TKV_OK) return;
        if (!n) continue;
        if (n >= (size_t)r->draft_min) sl->n_draft = n, sl->draft_src = k;
        return;
    }
}

/* Put sl's drafts, at most `take` of them, in the batch at n, right after its pending token (at n - 1). */
static size_t add_drafts(srv_sched *s, size_t n, slot *sl, size_t take) {
    for (size_t k = 0; k < take; k++, n++) {
        s->b_tok[n] = sl->draft[k];
        s->b_pos[n] = (tkv_pos)(sl->n_past + 1 + k);
        s->b_seq[n] = sl->seq;
        s->b_logits[n] = true; /* each draft's row is sampled if the one before it is accepted */
    }
    sl->drafted = take;
    sl->in_batch += take;
    return n;
}

/* The chance that one of a request's drafts from source k is accepted once the one before it was: a geometric
   count's estimate from its drafted steps (accepted drafts over accepted drafts and rejections), with two drafts'
   worth of a prior, so that a request's first drafts are weighed at the prior and its own record soon outweighs
   it. The prior is the same estimate over the server's recent drafted steps of every request, itself starting
   from the source's fixed guess: requests alike (a workload that copies, or one that does not) need not each
   learn it again. */
static double draft_chance(const srv_sched *s, const srv_run *run, int k) {
    const double prior = (s->g_acc[k] + 2 * draft_prior[k]) / (s->g_acc[k] + s->g_rej[k] + 2);
    return (run->d_acc[k] + 2 * prior) / (run->d_acc[k] + run->d_rej[k] + 2);
}

/* Keep of this step's proposed drafts those worth their rows (draftcost.h): the step without them holds every
   generating request's pending token and the prompt chunks that fit, and a draft goes in when the tokens it is
   expected to add outweigh what its row adds to the step's time, as measured on the steps decoded so far; a request
   whose drafts are left out step after step carries one now and then (srv_probe_next), so that a chance guessed
   too low is corrected. A request left without drafts this step forgets a little of its record, so that it is
   weighed at the prior again in a while. */
static void choose_drafts(srv_sched *s) {
    size_t gen = 0, prompt = 0, proposed = 0;
    for (int i = 0; i < s->o.parallel; i++) {
        const slot *sl = &s->slots[i];
        if (!sl->req) continue;
        if (generating(sl)) gen++;
        else prompt += sl->run->n_toks - sl->n_past;
        proposed += sl->n_draft;
    }
    if (proposed && !s->o.draft_always) {
        const size_t rows = gen + (prompt < s->n_batch - gen ? prompt : s->n_batch - gen);
        for (int i = 0; i < s->o.parallel; i++) {
            const slot *sl = &s->slots[i];
            s->cand[i] = (srv_draftcand){.n = sl->n_draft, .p = sl->n_draft ? draft_chance(s, sl->run, sl->draft_src) : 0};
        }
        size_t taken = srv_draft_choose(&s->cost, rows, gen, s->n_batch - rows, s->cand, (size_t)s->o.parallel);
        for (int i = 0; i < s->o.parallel; i++) {
            slot *sl = &s->slots[i];
            if (!sl->n_draft) continue;
            const bool room = rows + taken + 1 <= s->n_batch && rows + taken + 1 <= SRV_STEPCOST_ROWS;
            const bool pays = room && !s->cand[i].take && /* taken drafts end the probing anyway */
                              srv_draft_can_pay(&s->cost, rows + taken, gen, s->n_batch - rows - taken, sl->n_draft);
            if (srv_probe_next(&sl->run->probe, s->cand[i].take, room, pays)) s->cand[i].take = 1, taken++; /* draftcost.h */
            sl->n_draft = s->cand[i].take;
        }
    }
    for (int i = 0; i < s->o.parallel; i++) {
        slot *sl = &s->slots[i];
        if (sl->req && generating(sl) && !sl->n_draft && sl->req->draft_max > 0)
            for (int k = DRAFT_TREE; k <= DRAFT_TEXT; k++) sl->run->d_acc[k] *= 0.99, sl->run->d_rej[k] *= 0.99;
    }
}

/* Fill the batch: the next token of every generating request, each followed by its drafts while the batch has
   room for every request's token, then prompt chunks in admission order while the batch has room. Returns its
   size. */
static size_t build(srv_sched *s) {
    size_t n = 0, n_gen = 0;
    for (int i = 0; i < s->o.parallel; i++) s->slots[i].logits_at = -1, s->slots[i].in_batch = 0, s->slots[i].drafted = 0;
    for (int i = 0; i < s->o.parallel; i++) n_gen += generating(&s->slots[i]) && !s->slots[i].wait_step;
    size_t spare = s->n_batch > n_gen ? s->n_batch - n_gen : 0; /* room for drafts */
    for (int i = 0; i < s->o.parallel; i++) {
        slot *sl = &s->slots[i];
        if (!generating(sl) || sl->wait_step) continue;
        n = add(s, n, sl, 1);
        const size_t take = sl->n_draft < spare ? sl->n_draft : spare;
        if (take) n = add_drafts(s, n, sl, take), spare -= take;
    }
    while (n < s->n_batch) {
        slot *first = NULL; /* the oldest prefilling slot not yet in the batch */
        for (int i = 0; i < s->o.parallel; i++) {
            slot *sl = &s->slots[i];
            if (sl->req && !generating(sl) && !sl->in_batch && !sl->wait_step && (!first || sl->order < first->order))
                first = sl;
        }
        if (!first) break;
        size_t take = first->run->n_toks - first->n_past;
        n = add(s, n, first, take < s->n_batch - n ? take : s->n_batch - n);
    }
    return n;
}

/* llama-server's context shift: sl's sequence fills the window, so the n_discard tokens after the kept ones (the
   BOS and n_keep of the prompt) leave its list, and the sequence attaches the shorter list: the kept prefix is
   reused, the rest recomputed from the next step on. Nothing to discard: the request ends, "length". */
static void shift(srv_sched *s, slot *sl) {
    srv_req *r = sl->req;
    srv_run *run = sl->run;
    size_t keep = (r->n_keep < 0 ? r->n_prompt : (size_t)r->n_keep) + (tkv_tokenizer_adds_bos(s->model) ? 1 : 0);
    if (keep > s->o.shift_window - 4) keep = s->o.shift_window - 4;
    const size_t left = sl->n_past > keep ? sl->n_past - keep : 0;
    size_t discard = r->n_discard > 0 ? (size_t)r->n_discard : left / 2;
    if (left && discard > left - 1) discard = left - 1;
    if (!discard) {
        finish(s, sl, "length");
        return;
    }
    memmove(run->toks + keep, run->toks + keep + discard, (run->n_toks - keep - discard) * sizeof *run->toks);
    run->n_toks -= discard;
    size_t reused = 0;
    const tkv_status st = tkv_seq_attach(s->ctx, sl->seq, run->ns, run->toks, run->n_toks, &reused);
    if (st) {
        char msg[256];
        snprintf(msg, sizeof msg, "context shift: %s", tkv_last_error(s->ctx));
        fail(s, sl, SRV_FAIL_INTERNAL, msg);
        return;
    }
    sl->n_past = reused;
    pthread_mutex_lock(&r->mu);
    r->truncated = true;
    pthread_mutex_unlock(&r->mu);
}

/* The token sampled for sl: text out, and whether the request goes on. */
static void on_token(srv_sched *s, slot *sl, tkv_token tok, const float *logits) {
    srv_req *r = sl->req;
    srv_run *run = sl->run;
    if (!r->ignore_eos && tkv_token_is_eog(s->model, tok)) {
        finish(s, sl, "stop");
        return;
    }
    if (run->gen) run->gen[run->n_gen] = tok;
    run->n_gen++;
    run->toks[run->n_toks++] = tok; /* decoded next step, unless the request ends here */
    srv_req_add_logprob(r, tok, logits, s->n_vocab, run->smp);
    const char *text = "";
    size_t len = 0;
    bool stopped = false;
    if (tkv_detok_push(run->dt, tok, &text, &len) == TKV_OK) stopped = srv_req_append(r, text, len);
    srv_req_note_token(r, tok);
    if (stopped) finish(s, sl, "stop");
    else if (run->n_gen >= r->max_tokens) finish(s, sl, "length");
    else if (s->o.shift_window && sl->n_past + 1 >= s->o.shift_window) shift(s, sl);
    else if (sl->n_past + 1 >= s->o.n_ctx) finish(s, sl, "length");
}

/* sl cannot go on for want of room, and no other request holds any. */
static void out_of_room(srv_sched *s, slot *sl) {
    if (sl->run->n_gen) finish(s, sl, "length"); /* it filled the cache by itself, like a context limit */
    else
        fail(s, sl, SRV_FAIL_CACHE_FULL,
             "the KV cache is full: this prompt does not fit beside what is pinned; retry with a shorter prompt, "
             "or start the server with more --ctx cells");
}

/* No room for the batch: whoever the policy says gives way (srv_policy_make_room); preempted requests resume
   later, where they were. */
static void make_room(srv_sched *s) {
    const srv_room room = srv_policy_make_room(slot_views(s), (size_t)s->o.parallel);
    if (room.kind == SRV_ROOM_HOLD_PROMPT) s->slots[room.slot].wait_step = true;
    else if (room.kind == SRV_ROOM_NONE || !preempt(s, &s->slots[room.slot])) out_of_room(s, &s->slots[room.stuck]);
}

/* Drafts are never worth a preemption: when the batch does not fit, they go first. True when there were any. */
static bool drop_drafts(srv_sched *s) {
    bool any = false;
    for (int i = 0; i < s->o.parallel; i++) any |= s->slots[i].drafted > 0, s->slots[i].n_draft = 0;
    return any;
}

typedef struct verifying {
    srv_sched *s;
    slot *sl;
    const srv_req *r; /* the request, to see whether it ended */
    size_t n_past;    /* the sequence's tokens before the pending one */
} verifying;

/* tkv_draft_token_fn: token i of a drafted step, handled as the i-th one-token step would handle it. */
static bool verified(void *user, size_t i, tkv_token tok, const float *logits) {
    verifying *v = user;
    slot *sl = v->sl;
    srv_run *run = sl->run;
    const int k = sl->draft_src;
    if (i == 0) { /* the record fades by a tenth per drafted step; a rejection until every draft is accepted */
        sl->req->draft_n += (int)sl->drafted;
        run->d_acc[k] *= 0.9, run->d_rej[k] = 0.9 * run->d_rej[k] + 1;
        v->s->g_acc[k] *= 0.98, v->s->g_rej[k] = 0.98 * v->s->g_rej[k] + 1; /* the server's: the last ~50 steps */
    } else { /* the token before it was its draft */
        sl->req->draft_n_accepted++, run->accepted++, run->d_acc[k]++, v->s->g_acc[k]++;
        if (i == sl->drafted) run->d_rej[k]--, v->s->g_rej[k]--;
    }
    sl->n_past = v->n_past + 1 + i; /* pending and the drafts accepted before this token */
    on_token(v->s, sl, tok, logits);
    return sl->req == v->r && sl->n_past == v->n_past + 1 + i; /* not ended, not shifted */
}

/* After the decode: sl's pending token and drafts are verified, its tokens handled in order. */
static void verify(srv_sched *s, slot *sl) {
    srv_run *run = sl->run;
    verifying v = {s, sl, sl->req, sl->n_past};
    run->offered = sl->drafted, run->accepted = 0;
    const size_t drafted = sl->drafted, left = (size_t)(sl->req->max_tokens - run->n_gen);
    tkv_token out[TKV_DRAFT_MAX + 1];
    size_t n_out = 0;
    const tkv_status st = tkv_seq_accept_draft(s->ctx, sl->seq, (size_t)sl->logits_at, sl->draft, drafted, run->smp,
                                               left, verified, &v, out, &n_out);
    if (st) {
        fail_call(s, sl, "draft verification");
        return;
    }
    if (s->metrics) srv_metrics_drafts(s->metrics, drafted, n_out ? n_out - 1 : 0);
}

/* A drafting greedy request takes the tokens its sampler is known to choose next from the tree (tkv_seq_follow_known:
   what argmax decoding chose after the same text before), handled as a drafted step's would be, with no step of
   its own; its pending token is then the last of them. So does one whose prompt is cached but its last token (a
   retry): its first token is known too, and the prompt's last row is not computed again. Requests that list
   logprobs compute every token (known tokens come without logits). */
static void follow_known(srv_sched *s, slot *sl) {
    enum { KNOWN_MAX = 256 }; /* per call: a longer chain goes on at the next */
    const srv_req *r = sl->req;
    srv_run *run = sl->run;
    /* the sequence holds the list but its last token: a generating request's pending one, or a prompt's last */
    if (s->o.no_known || sl->n_past + 1 != run->n_toks || r->draft_max <= 0 || r->logprobs >= 0) return;
    size_t cap = (size_t)(r->max_tokens - run->n_gen), room = room_after(s, sl) + 1;
    if (cap > room) cap = room;
    if (cap > KNOWN_MAX) cap = KNOWN_MAX;
    if (!cap) return;
    tkv_token out[KNOWN_MAX];
    size_t n = 0;
    if (tkv_seq_follow_known(s->ctx, sl->seq, run->toks[sl->n_past], run->smp, cap, out, &n) != TKV_OK) {
        fail_call(s, sl, "taking known tokens");
        return;
    }
    if (!n) return;
    if (s->metrics) srv_metrics_known(s->metrics, n);
    /* the prompt's last row is known, not computed: all of the prompt came from the cache (cached_tokens counts
       what arrival found, all but that last token, which the scheduler alone sets) */
    if (!run->n_gen && r->n_cached + 1 == run->n_toks)
        srv_req_set_cached(sl->req, run->n_toks), srv_req_progress(sl->req, run->n_toks);
    const size_t n_past = sl->n_past;
    for (size_t i = 0; i < n; i++) {
        sl->n_past = n_past + 1 + i; /* pending and the known tokens before this one */
        on_token(s, sl, out[i], NULL);
        if (sl->req != r || sl->n_past != n_past + 1 + i) return; /* ended, or shifted */
    }
}

/* One decode step; false when there was nothing to decode. */
static bool step(srv_sched *s) {
    for (int i = 0; i < s->o.parallel; i++) {
        s->slots[i].wait_step = false;
        s->slots[i].n_draft = 0;
        if (s->slots[i].req) follow_known(s, &s->slots[i]);
        if (s->slots[i].req) propose(s, &s->slots[i]);
    }
    choose_drafts(s);
    size_t n = build(s);
    tkv_status st = TKV_ERR_FULL;
    const double t0 = srv_now();
    bool retried = false;
    while (n) {
        tkv_batch b = {n, s->b_tok, s->b_pos, s->b_seq, s->b_logits};
        st = tkv_decode(s->ctx, &b);
        if (st != TKV_ERR_FULL) break;
        if (!drop_drafts(s)) make_room(s);
        n = build(s);
        retried = true;
    }
    if (!n) return false;
    if (st) { /* not a capacity problem: the requests in this batch cannot go on */
        char msg[256];
        snprintf(msg, sizeof msg, "decode failed: %s", tkv_last_error(s->ctx));
        for (int i = 0; i < s->o.parallel; i++)
            if (s->slots[i].req && s->slots[i].in_batch) fail(s, &s->slots[i], SRV_FAIL_INTERNAL, msg);
        return true;
    }
    for (int i = 0; i < s->o.parallel; i++) {
        slot *sl = &s->slots[i];
        if (!sl->req || !sl->in_batch) continue;
        if (sl->drafted) {
            verify(s, sl);
            continue;
        }
        sl->n_past += sl->in_batch;
        if (!sl->run->n_gen) srv_req_progress(sl->req, sl->n_past);
        if (sl->logits_at < 0) continue;
        if (!sl->run->n_gen && s->o.store) /* the prompt is computed: its new blocks go to the shared store */
            srv_store_put(s->o.store, s->ctx, sl->run->ns, sl->run->toks, sl->req->n_prompt, sl->req->n_cached);
        /* sampled as a step without drafts is verified, so that an argmax choice is recorded in its cell (known
           tokens: follow_known) */
        tkv_token tok;
        size_t n_tok = 0;
        if (tkv_seq_accept_draft(s->ctx, sl->seq, (size_t)sl->logits_at, NULL, 0, sl->run->smp, 1, NULL, NULL, &tok,
                                 &n_tok) != TKV_OK) {
            fail_call(s, sl, "sampling");
            continue;
        }
        on_token(s, sl, tok, tkv_get_logits(s->ctx, (size_t)sl->logits_at));
    }
    /* the step's cost by its rows, decode and sampling, for the next steps' drafts (a step that had to make
       room first is not a fair figure) */
    if (!retried) srv_stepcost_add(&s->cost, n, srv_now() - t0);
    return true;
}

/* ---- the thread --------------------------------------------------------------- */

/* Whether no waiting request can be admitted before a store lookup ends (with mu held): then the thread
   sleeps until the lookup's job (or a new request) wakes it. */
/* Whether every waiting request waits for its prefix to come from the shared store or the disk tier (none
   waiting: true). */
static bool all_fetching(const srv_sched *s) {
    for (size_t i = 0; i < s->n_wait; i++)
        if (!fetching(s->wait[i])) return false;
    return true;
}

/* The jobs posted before this call, with mu held: a job posted meanwhile (a poller's next view, a job that
   posts another) waits for the next step, and while requests run only one view runs per step (the others
   keep their place), so however views are polled, decoding goes on between them. */
static void run_calls(srv_sched *s) {
    srv_job *batch = s->calls, *later = NULL, **later_tail = &later;
    s->calls = NULL;
    bool viewed = false;
    while (batch) {
        srv_job *j = batch;
        batch = j->next;
        if (j->view && viewed && s->n_running) {
            j->next = NULL;
            *later_tail = j;
            later_tail = &j->next;
            continue;
        }
        viewed |= j->view;
        pthread_mutex_unlock(&s->mu);
        j->fn(s->ctx, j->user);
        j->done(j, true); /* j may be gone after this */
        pthread_mutex_lock(&s->mu);
    }
    *later_tail = s->calls; /* the views held back go first next time, then what was posted meanwhile */
    s->calls = later;
}

static void *thread_main(void *arg) {
    srv_sched *s = arg;
    for (;;) {
        const double t0 = srv_now();
        pthread_mutex_lock(&s->mu);
        run_calls(s);
        if (s->stopping) {
            pthread_mutex_unlock(&s->mu);
            break;
        }
        if (!s->n_running && all_fetching(s) && !s->calls) { /* nothing to do until a read is in */
            pthread_cond_wait(&s->wake, &s->mu);
            pthread_mutex_unlock(&s->mu);
            continue;
        }
        pthread_mutex_unlock(&s->mu);
        drop_cancelled(s);
        admit(s);
        if (step(s) && s->metrics) srv_metrics_step(s->metrics, srv_now() - t0);
    }
    for (int i = 0; i < s->o.parallel; i++)
        if (s->slots[i].req) fail(s, &s->slots[i], SRV_FAIL_STOPPING, "the server is shutting down");
    return NULL;
}

srv_sched *srv_sched_start(tkv_context *ctx, const srv_sched_opts *o, srv_metrics *metrics) {
    srv_sched *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->ctx = ctx;
    s->model = tkv_context_model(ctx);
    s->o = *o;
    s->metrics = metrics;
    s->n_vocab = tkv_vocab_size(s->model);
    s->n_batch = o->n_batch;
    s->wait = calloc(o->max_queue ? o->max_queue : 1, sizeof *s->wait);
    s->skipped = calloc(o->max_queue ? o->max_queue : 1, sizeof *s->skipped);
    s->slots = calloc((size_t)o->parallel, sizeof *s->slots);
    s->pslots = calloc((size_t)o->parallel, sizeof *s->pslots);
    s->pwait = calloc(o->max_queue ? o->max_queue : 1, sizeof *s->pwait);
    s->cand = calloc((size_t)o->parallel, sizeof *s->cand);
    s->b_tok = malloc(s->n_batch * sizeof *s->b_tok);
    s->b_pos = malloc(s->n_batch * sizeof *s->b_pos);
    s->b_seq = malloc(s->n_batch * sizeof *s->b_seq);
    s->b_logits = malloc(s->n_batch * sizeof *s->b_logits);
    if (!s->wait || !s->skipped || !s->slots || !s->pslots || !s->pwait || !s->cand || !s->b_tok || !s->b_pos || !s->b_seq || !s->b_logits) goto fail;
    for (int i = 0; i < o->parallel; i++) s->slots[i].seq = i;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->wake, NULL);
    pthread_cond_init(&s->call_done, NULL);
    if (pthread_create(&s->thread, NULL, thread_main, s) == 0) return s;
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->wake);
    pthread_cond_destroy(&s->call_done);
fail:
    free(s->wait), free(s->skipped), free(s->slots), free(s->pslots), free(s->pwait), free(s->cand);
    free(s->b_tok), free(s->b_pos), free(s->b_seq), free(s->b_logits);
    free(s);
    return NULL;
}

srv_submit srv_sched_submit(srv_sched *s, srv_req *r) {
    pthread_mutex_lock(&s->mu);
    size_t mine = 0; /* the client's waiting requests: one client alone cannot fill the queue */
    for (size_t i = 0; i < s->n_wait; i++) mine += s->wait[i]->client == r->client;
    srv_submit rc = s->stopping                                                      ? SRV_SUBMIT_STOPPING
                    : !srv_policy_queue_admits(s->n_wait, s->o.max_queue, mine) ? SRV_SUBMIT_QUEUE_FULL
                                                                                     : SRV_SUBMIT_OK;
    if (!rc) {
        srv_req_ref(r);
        s->skipped[s->n_wait] = 0;
        s->wait[s->n_wait++] = r;
        pthread_cond_signal(&s->wake);
    }
    pthread_mutex_unlock(&s->mu);
    return rc;
}

void srv_sched_post(srv_sched *s, srv_job *job) {
    pthread_mutex_lock(&s->mu);
    if (s->stopping) { /* the thread is gone or going */
        pthread_mutex_unlock(&s->mu);
        job->done(job, false);
        return;
    }
    job->next = NULL;
    srv_job **tail = &s->calls;
    while (*tail) tail = &(*tail)->next;
    *tail = job;
    pthread_cond_signal(&s->wake);
    pthread_mutex_unlock(&s->mu);
}

static void post_to(void *s, srv_job *job) { srv_sched_post(s, job); }

srv_job_sink srv_sched_sink(srv_sched *s) { return (srv_job_sink){post_to, s}; }

typedef struct sync_call {
    srv_job job;
    srv_sched *s;
    bool done;
} sync_call;

static void sync_done(srv_job *job, bool ran) {
    (void)ran;
    sync_call *c = (sync_call *)job;
    pthread_mutex_lock(&c->s->mu);
    c->done = true;
    pthread_cond_broadcast(&c->s->call_done);
    pthread_mutex_unlock(&c->s->mu);
}

void srv_sched_call(srv_sched *s, void (*fn)(tkv_context *ctx, void *user), void *user) {
    sync_call c = {.job = {.fn = fn, .done = sync_done, .user = user}, .s = s};
    srv_sched_post(s, &c.job);
    pthread_mutex_lock(&s->mu);
    while (!c.done) pthread_cond_wait(&s->call_done, &s->mu);
    pthread_mutex_unlock(&s->mu);
}

void srv_sched_load(srv_sched *s, size_t *waiting, size_t *running) {
    pthread_mutex_lock(&s->mu);
    *waiting = s->n_wait;
    *running = s->n_running;
    pthread_mutex_unlock(&s->mu);
}

size_t srv_sched_slots(srv_sched *s, tkv_seq *seq, const srv_req **req, size_t cap) {
    size_t n = 0;
    for (int i = 0; i < s->o.parallel && n < cap; i++)
        if (s->slots[i].req) seq[n] = s->slots[i].seq, req[n] = s->slots[i].req, n++;
    return n;
}

size_t srv_sched_slot_states(srv_sched *s, srv_slot_state *out, size_t cap) {
    size_t n = 0;
    for (int i = 0; i < s->o.parallel && n < cap; i++, n++) {
        const slot *sl = &s->slots[i];
        out[n] = (srv_slot_state){sl->req, sl->req ? sl->n_past : 0, sl->req ? sl->run->n_gen : 0};
    }
    return n;
}

void srv_sched_stop(srv_sched *s) {
    if (!s) return;
    pthread_mutex_lock(&s->mu);
    bool was = s->stopping;
    s->stopping = true;
    pthread_cond_signal(&s->wake);
    pthread_mutex_unlock(&s->mu);
    if (was) return;
    pthread_join(s->thread, NULL);
    pthread_mutex_lock(&s->mu);
    while (s->calls) { /* posted before the stop and never run: their posters wait */
        srv_job *j = s->calls;
        s->calls = j->next;
        pthread_mutex_unlock(&s->mu);
        j->done(j, false);
        pthread_mutex_lock(&s->mu);
    }
    for (size_t i = 0; i < s->n_wait; i++) {
        srv_req_fail(s->wait[i], SRV_FAIL_STOPPING, "the server is shutting down");
        run_free(s->wait[i]);
        srv_req_unref(s->wait[i]);
    }
    s->n_wait = 0;
    pthread_mutex_unlock(&s->mu);
}

void srv_sched_free(srv_sched *s) {
    if (!s) return;
    srv_sched_stop(s);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->wake);
    pthread_cond_destroy(&s->call_done);
    free(s->wait), free(s->skipped), free(s->slots), free(s->pslots), free(s->pwait), free(s->cand);
    free(s->b_tok), free(s->b_pos), free(s->b_seq), free(s->b_logits);
    free(s);
}
