/*
 * sampler.c — choosing the next token from a row of logits.
 *
 * The chain, in the reference's default order: repetition penalty, top-k,
 * top-p, min-p, temperature, then a draw from the softmax with a seeded
 * generator (xoshiro256**, seeded by splitmix64): the same seed and logits
 * give the same tokens. Temperature <= 0 means greedy: the argmax, lowest
 * id on ties. Candidate storage is allocated once, at creation.
 *
 * A grammar (grammar.h) is applied by rejection: the unconstrained choice
 * is kept when the grammar allows it (one token's bytes through the
 * matcher); only otherwise is the allowed set computed (the vocabulary trie
 * walk) and the chain run again over the allowed tokens alone.
 *
 * The state a choice depends on besides the logits is the parameters, the
 * generator's state and the tokens seen (the repetition penalty's window,
 * the presence and frequency counts): tkv__sampler_key names it, so that a
 * choice recorded under a key is the choice any sampler with that key makes
 * on the same logits (sampler.h; kv/kvknown.c's known tokens). The tokens
 * seen enter it as a running hash (hist), one step per tkv_sampler_accept
 * and one more per token returned, so the key costs the same at any length.
 */
#include "tokenkv.h"

#include "base/alloc.h"
#include "base/error.h"
#include "base/params.h"
#include "grammar.h"
#include "sampler.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct cand {
    float logit;
    tkv_token id;
} cand;

struct tkv_sampler {
    tkv_sampler_params p;
    size_t n_vocab;
    cand *c;          /* (n_vocab) */
    float *prob;      /* (n_vocab) */
    tkv_token *recent; /* ring of the last repeat_last_n tokens */
    size_t n_recent, recent_head;
    uint64_t s[4]; /* xoshiro256** state */
    uint64_t params_key; /* a hash of what in p and bias changes a choice (tkv__sampler_key) */
    uint64_t hist;       /* a running hash of the tokens seen and returned, in order */
    const tkv_grammar *g; /* NULL: unconstrained */
    tkv__gmatch *gm;
    uint64_t g_key;       /* with g: its id and the history it started from (state_key) */
    bool g_lost;          /* the matcher missed a token (out of memory): its state is no longer the tokens' */
    uint8_t *allowed; /* (n_vocab) with a grammar */
    uint32_t *count;  /* (n_vocab) times each token was returned, with presence/frequency penalties */
    tkv_logit_bias *bias; /* (p.n_logit_bias) a copy */
    /* what the last choice drew from (tkv_sampler_last_probs): c[0..last_cand) after the chain's penalties, biases
       and grammar, of which the first last_n are kept (LAST_CUT: sorted, prob[] normalised) */
    int last_kind;    /* LAST_NONE, LAST_GREEDY (last_chosen), LAST_FULL (prob[] over all, summing to last_sum), LAST_CUT */
    size_t last_cand, last_n;
    double last_sum;
    tkv_token last_chosen;
};

enum { LAST_NONE, LAST_GREEDY, LAST_FULL, LAST_CUT };

static tkv_sampler_params sampler_defaults(void) {
    return (tkv_sampler_params){.size = sizeof(tkv_sampler_params),
                                .temperature = 0.8f,
                                .top_k = 40,
                                .top_p = 0.95f,
                                .min_p = 0.05f,
                                .repeat_penalty = 1.0f,
                                .repeat_last_n = 64,
                                .seed = 0};
}

tkv_status tkv_sampler_params_init(tkv_sampler_params *p, size_t size) {
    const tkv_sampler_params d = sampler_defaults();
    return tkv__params_init(p, size, &d, sizeof d, "tkv_sampler_params");
}

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

/* One step of xoshiro256** on state x; its output. */
static uint64_t step_u64(uint64_t x[4]) {
    uint64_t r = rotl(x[1] * 5, 7) * 9, t = x[1] << 17;
    x[2] ^= x[0];
    x[3] ^= x[1];
    x[1] ^= x[2];
    x[0] ^= x[3];
    x[2] ^= t;
    x[3] = rotl(x[3], 45);
    return r;
}

static uint64_t next_u64(tkv_sampler *s) { return step_u64(s->s); }

/* uniform in [0, 1) */
static double next_unit(tkv_sampler *s) { return (double)(next_u64(s) >> 11) * 0x1.0p-53; }

/* The running hash of the tokens seen, one more token in: h after `tok` (returned: also counted). */
static uint64_t hist_step(uint64_t h, tkv_token tok, bool returned) {
    uint64_t x = h ^ ((uint64_t)(uint32_t)tok | (uint64_t)returned << 32);
    return splitmix64(&x);
}

/* What in the parameters changes a choice: every field the chain reads, and the bias copy. */
static uint64_t params_key(const tkv_sampler *s) {
    const tkv_sampler_params *p = &s->p;
    uint64_t h = 0x746b76736d706c31ull; /* "tkvsmpl1" */
    const float f[] = {p->temperature, p->top_p, p->min_p, p->repeat_penalty, p->presence_penalty, p->frequency_penalty};
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++) {
        uint32_t b;
        memcpy(&b, &f[i], sizeof b);
        h ^= b, h = splitmix64(&h);
    }
    h ^= (uint64_t)(uint32_t)p->top_k << 32 | (uint32_t)p->repeat_last_n, h = splitmix64(&h);
    for (size_t i = 0; i < p->n_logit_bias; i++) {
        uint32_t b;
        memcpy(&b, &s->bias[i].bias, sizeof b);
        h ^= (uint64_t)(uint32_t)s->bias[i].token << 32 | b, h = splitmix64(&h);
    }
    return h;
}

tkv_status tkv_sampler_create(const tkv_sampler_params *params, size_t n_vocab, tkv_sampler **out) {
    if (!out || n_vocab == 0) return tkv__fail(TKV_ERR_INVALID, "tkv_sampler_create: no output or an empty vocabulary");
    tkv_sampler_params p = sampler_defaults();
    tkv_status st = params ? tkv__params_read(&p, sizeof p, params, "tkv_sampler_params") : TKV_OK;
    if (st) return st;
    tkv_sampler *s = tkv__calloc(1, sizeof *s);
    if (!s) return tkv__fail(TKV_ERR_NOMEM, "out of memory for the sampler");
    s->p = p;
    if (s->p.repeat_last_n < 0) s->p.repeat_last_n = 0;
    s->n_vocab = n_vocab;
    s->c = tkv__malloc(n_vocab * sizeof *s->c);
    s->prob = tkv__malloc(n_vocab * sizeof *s->prob);
    s->recent = tkv__malloc(((size_t)s->p.repeat_last_n + 1) * sizeof *s->recent);
    const bool counts = s->p.presence_penalty != 0 || s->p.frequency_penalty != 0;
    if (counts) s->count = tkv__calloc(n_vocab, sizeof *s->count);
    if (s->p.n_logit_bias && s->p.logit_bias) {
        s->bias = tkv__malloc(s->p.n_logit_bias * sizeof *s->bias);
        if (s->bias) memcpy(s->bias, s->p.logit_bias, s->p.n_logit_bias * sizeof *s->bias);
    } else {
        s->p.n_logit_bias = 0;
    }
    s->p.logit_bias = NULL; /* the copy is what counts: the caller's array may go */
    if (!s->c || !s->prob || !s->recent || (counts && !s->count) || (s->p.n_logit_bias && !s->bias)) {
        tkv_sampler_free(s);
        return tkv__fail(TKV_ERR_NOMEM, "out of memory for the sampler");
    }
    uint64_t x = s->p.seed;
    for (int i = 0; i < 4; i++) s->s[i] = splitmix64(&x);
    s->params_key = params_key(s);
    *out = s;
    return TKV_OK;
}

void tkv_sampler_free(tkv_sampler *s) {
    if (!s) return;
    tkv__free(s->c);
    tkv__free(s->prob);
    tkv__free(s->recent);
    tkv__free(s->count);
    tkv__free(s->bias);
    tkv__gmatch_free(s->gm);
    tkv__free(s->allowed);
    tkv__free(s);
}

tkv_status tkv_sampler_set_grammar(tkv_sampler *s, const tkv_grammar *g) {
    if (!s) return tkv__fail(TKV_ERR_INVALID, "tkv_sampler_set_grammar: the sampler is NULL");
    if (g && tkv__grammar_n_vocab(g) != s->n_vocab)
        return tkv__fail(TKV_ERR_INVALID,
                         "tkv_sampler_set_grammar: the grammar's vocabulary has %zu tokens, the sampler's %zu",
                         tkv__grammar_n_vocab(g), s->n_vocab);
    tkv__gmatch_free(s->gm);
    s->gm = NULL;
    s->g = NULL;
    s->g_lost = false;
    if (!g) return TKV_OK;
    if (!s->allowed && !(s->allowed = tkv__malloc(s->n_vocab)))
        return tkv__fail(TKV_ERR_NOMEM, "out of memory for the sampler's grammar");
    tkv_status st = tkv__gmatch_create(tkv__grammar_gbnf(g), &s->gm);
    if (st) return st;
    s->g = g;
    /* the matcher starts here: its state is then a function of the grammar and the tokens returned since */
    uint64_t k = tkv__grammar_id(g) ^ s->hist;
    s->g_key = splitmix64(&k);
    return TKV_OK;
}

void tkv_sampler_accept(tkv_sampler *s, tkv_token token) {
    if (!s) return;
    s->hist = hist_step(s->hist, token, false);
    if (s->p.repeat_last_n == 0) return;
    const size_t cap = (size_t)s->p.repeat_last_n;
    s->recent[(s->recent_head + s->n_recent) % cap] = token;
    if (s->n_recent < cap) s->n_recent++;
    else s->recent_head = (s->recent_head + 1) % cap;
}

static int by_logit_desc(const void *a, const void *b) {
    const cand *x = a, *y = b;
    if (x->logit != y->logit) return x->logit > y->logit ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

/* Keep the k best of c[0..n) at the front, sorted (n log k with a min-heap). */
static size_t keep_top_k(cand *c, size_t n, size_t k) {
    if (k >= n) {
        qsort(c, n, sizeof *c, by_logit_desc);
        return n;
    }
    /* heap of the k best so far, worst at the root */
    for (size_t i = 0; i < n; i++) {
        size_t len = i < k ? i : k;
        if (i >= k) {
            if (by_logit_desc(&c[i], &c[0]) >= 0) continue; /* not better than the worst kept */
            const cand out = c[0]; /* swapped, not overwritten: c stays a permutation (tkv_sampler_last_probs) */
            c[0] = c[i], c[i] = out;
            len = k;
            size_t j = 0; /* sift down */
            for (;;) {
                size_t l = 2 * j + 1, r = l + 1, w = j;
                if (l < len && by_logit_desc(&c[l], &c[w]) > 0) w = l;
                if (r < len && by_logit_desc(&c[r], &c[w]) > 0) w = r;
                if (w == j) break;
                cand t = c[j];
                c[j] = c[w], c[w] = t, j = w;
            }
        } else {
            c[len] = c[i]; /* sift up */
            for (size_t j = len; j > 0 && by_logit_desc(&c[j], &c[(j - 1) / 2]) > 0; j = (j - 1) / 2) {
                cand t = c[j];
                c[j] = c[(j - 1) / 2], c[(j - 1) / 2] = t;
            }
        }
    }
    qsort(c, k, sizeof *c, by_logit_desc);
    return k;
}

/* probabilities of c[0..n) (sorted, best first) at temperature t */
static void softmax_cands(tkv_sampler *s, size_t n, float t) {
    double sum = 0;
    for (size_t i = 0; i < n; i++) {
        s->prob[i] = expf((s->c[i].logit - s->c[0].logit) / t);
        sum += s->prob[i];
    }
    for (size_t i = 0; i < n; i++) s->prob[i] = (float)(s->prob[i] / sum);
}

/* A draw from candidates 0..n-1 weighted by prob[] (summing to total); the last on rounding. */
static tkv_token draw(tkv_sampler *s, size_t n, double total) {
    const double u = next_unit(s) * total;
    double cum = 0;
    for (size_t i = 0; i < n; i++) {
        cum += s->prob[i];
        if (u < cum) return s->c[i].id;
    }
    return s->c[n - 1].id;
}

/* The chain over the tokens with allowed[id] (all when allowed is NULL); NULL too when none is. */
static tkv_token choose(tkv_sampler *s, const float *logits, const uint8_t *allowed) {
    const size_t n_vocab = s->n_vocab;
    for (size_t i = 0; i < n_vocab; i++) s->c[i] = (cand){logits[i], (tkv_token)i};

    /* repetition penalty, once per distinct recent token */
    if (s->p.repeat_penalty != 1.0f && s->n_recent) {
        const size_t cap = (size_t)s->p.repeat_last_n;
        for (size_t r = 0; r < s->n_recent; r++) {
            tkv_token id = s->recent[(s->recent_head + r) % cap];
            bool seen = false;
            for (size_t q = 0; q < r && !seen; q++) seen = s->recent[(s->recent_head + q) % cap] == id;
            if (seen || id < 0 || (size_t)id >= n_vocab) continue;
            float *l = &s->c[id].logit;
            *l = *l > 0 ? *l / s->p.repeat_penalty : *l * s->p.repeat_penalty;
        }
    }
    /* OpenAI's presence and frequency penalties over what was returned, then the logit biases */
    if (s->count)
        for (size_t i = 0; i < n_vocab; i++)
            if (s->count[i])
                s->c[i].logit -= (float)s->count[i] * s->p.frequency_penalty + s->p.presence_penalty;
    for (size_t b = 0; b < s->p.n_logit_bias; b++)
        if (s->bias[b].token >= 0 && (size_t)s->bias[b].token < n_vocab) s->c[s->bias[b].token].logit += s->bias[b].bias;
    size_t n_cand = n_vocab;
    if (allowed) { /* keep the allowed candidates, in id order */
        n_cand = 0;
        for (size_t i = 0; i < n_vocab; i++)
            if (allowed[i]) s->c[n_cand++] = s->c[i];
    }

    tkv_token chosen;
    if (s->p.temperature <= 0) {
        size_t best = 0;
        for (size_t i = 1; i < n_cand; i++)
            if (s->c[i].logit > s->c[best].logit) best = i;
        chosen = s->c[best].id;
        s->last_kind = LAST_GREEDY, s->last_n = 1;
    } else if ((s->p.top_k <= 0 || (size_t)s->p.top_k >= n_cand) && s->p.top_p >= 1.0f && s->p.min_p <= 0) {
        /* nothing cut (OpenAI's defaults): a draw over every candidate in id order, no sort (sorting a
           32k vocabulary per token cost ~5 ms, more than the model's own step) */
        float mx = s->c[0].logit;
        for (size_t i = 1; i < n_cand; i++) mx = s->c[i].logit > mx ? s->c[i].logit : mx;
        double sum = 0;
        for (size_t i = 0; i < n_cand; i++) sum += s->prob[i] = expf((s->c[i].logit - mx) / s->p.temperature);
        chosen = draw(s, n_cand, sum);
        s->last_kind = LAST_FULL, s->last_n = n_cand, s->last_sum = sum;
    } else {
        size_t n = keep_top_k(s->c, n_cand, s->p.top_k > 0 ? (size_t)s->p.top_k : n_cand);
        if (s->p.top_p < 1.0f) {
            softmax_cands(s, n, 1.0f);
            double cum = 0;
            size_t keep = n;
            for (size_t i = 0; i < n; i++) {
                cum += s->prob[i];
                if (cum >= s->p.top_p) {
                    keep = i + 1;
                    break;
                }
            }
            n = keep;
        }
        if (s->p.min_p > 0) {
            softmax_cands(s, n, 1.0f);
            size_t keep = 1;
            while (keep < n && s->prob[keep] >= s->p.min_p * s->prob[0]) keep++;
            n = keep;
        }
        softmax_cands(s, n, s->p.temperature);
        chosen = draw(s, n, 1.0);
        s->last_kind = LAST_CUT, s->last_n = n;
    }
    s->last_cand = n_cand, s->last_chosen = chosen;
    return chosen;
}

/* The probability of candidate i of the last choice (0 for a candidate its chain cut). */
static double last_prob(const tkv_sampler *s, size_t i) {
    switch (s->last_kind) {
    case LAST_GREEDY: return s->c[i].id == s->last_chosen ? 1.0 : 0.0;
    case LAST_FULL: return s->prob[i] / s->last_sum;
    default: return i < s->last_n ? s->prob[i] : 0.0;
    }
}

float tkv_sampler_last_prob(const tkv_sampler *s, tkv_token token) {
    for (size_t i = 0; s && s->last_kind != LAST_NONE && i < s->last_cand; i++)
        if (s->c[i].id == token) return (float)last_prob(s, i);
    return 0;
}

tkv_status tkv_sampler_last_probs(const tkv_sampler *s, size_t k, tkv_token *ids, float *probs, size_t *n) {
    if (!s || !ids || !probs || !n) return tkv__fail(TKV_ERR_INVALID, "tkv_sampler_last_probs: a NULL argument");
    if (s->last_kind == LAST_NONE) return tkv__fail(TKV_ERR_INVALID, "tkv_sampler_last_probs: nothing sampled yet");
    if (k > s->last_cand) k = s->last_cand;
    /* the k best by (probability, logit, lowest id), by selection: k is small (a client's top-n), the candidates many */
    for (size_t j = 0; j < k; j++) {
        size_t best = (size_t)-1;
        double bp = 0;
        for (size_t i = 0; i < s->last_cand; i++) {
            bool taken = false;
            for (size_t q = 0; q < j && !taken; q++) taken = ids[q] == s->c[i].id;
            if (taken) continue;
            const double p = last_prob(s, i);
            if (best == (size_t)-1 || p > bp || (p == bp && (s->c[i].logit > s->c[best].logit ||
                                                             (s->c[i].logit == s->c[best].logit && s->c[i].id < s->c[best].id))))
                best = i, bp = p;
        }
        if (best == (size_t)-1) { /* fewer distinct candidates than k */
            k = j;
            break;
        }
        ids[j] = s->c[best].id, probs[j] = (float)bp;
    }
    *n = k;
    return TKV_OK;
}

/* With a grammar: the unconstrained choice if allowed, else the choice among the allowed tokens. Where the matcher
   cannot follow (out of memory), the choice is unconstrained and the matcher's state stops being the tokens':
   g_lost, and no key after it. */
static tkv_token choose_in_grammar(tkv_sampler *s, const float *logits) {
    tkv_token chosen = choose(s, logits, NULL);
    bool ok = false;
    if (!tkv__grammar_token(s->g, s->gm, chosen, true, &ok) && ok) return chosen;
    size_t n = 0;
    if (tkv__grammar_allowed(s->g, s->gm, s->allowed, &n)) { /* out of memory: unconstrained */
        s->g_lost = true;
        return chosen;
    }
    if (n == 0 && tkv__grammar_mark_eog(s->g, s->allowed) == 0) return chosen; /* nothing may follow, no EOG */
    chosen = choose(s, logits, s->allowed);
    if (tkv__grammar_token(s->g, s->gm, chosen, true, &ok)) s->g_lost = true;
    return chosen;
}

bool tkv__sampler_argmax(const tkv_sampler *s) {
    if (!(s->p.temperature <= 0) || s->g || s->count || s->p.presence_penalty != 0 || s->p.frequency_penalty != 0) return false;
    if (s->p.repeat_penalty != 1.0f && s->p.repeat_last_n != 0) return false;
    for (size_t b = 0; b < s->p.n_logit_bias; b++)
        if (s->bias[b].bias != 0) return false;
    return true;
}

/* What returning tok does to the state, after the choice: its count, the running hash, the window. */
static void returned(tkv_sampler *s, tkv_token tok) {
    if (s->count && tok >= 0 && (size_t)tok < s->n_vocab) s->count[tok]++;
    s->hist = hist_step(s->hist, tok, true);
    tkv_sampler_accept(s, tok);
}

/* The key of a state (tkv__sampler_key): never TKV__SAMPLER_KEY_NONE or _ARGMAX. With a grammar, its id and the
   history its matcher started from: the matcher's state is then the grammar's after the tokens returned since,
   which hist follows; at a temperature, the generator's state. */
static uint64_t state_key(const tkv_sampler *s, const uint64_t g[4], uint64_t hist) {
    uint64_t h = s->params_key;
    if (s->g) h ^= s->g_key, h = splitmix64(&h);
    /* the generator only where a choice draws: a greedy choice is the same whatever the seed (a server gives each
       request without one a seed of its own) */
    if (s->p.temperature > 0)
        for (int i = 0; i < 4; i++) h ^= g[i], h = splitmix64(&h);
    h ^= hist, h = splitmix64(&h);
    return h > TKV__SAMPLER_KEY_ARGMAX ? h : h + 2;
}

/* Whether a choice draws from the generator, once (a grammar's rejection may draw twice: not keyed). */
static bool draws_once(const tkv_sampler *s) { return s->p.temperature > 0 && !s->g; }

/* Whether a state has a key: a choice that depends on the generator only through one draw (none when greedy; a
   grammar's rejection may draw twice at a temperature), and a grammar's matcher that kept up with the tokens. */
static bool keyed(const tkv_sampler *s) { return !s->g || (!(s->p.temperature > 0) && !s->g_lost); }

void tkv__sampler_sim_start(const tkv_sampler *s, tkv__sampler_sim *sim) {
    memcpy(sim->s, s->s, sizeof sim->s);
    sim->hist = s->hist;
}

uint64_t tkv__sampler_sim_key(const tkv_sampler *s, const tkv__sampler_sim *sim) {
    if (!keyed(s)) return TKV__SAMPLER_KEY_NONE;
    if (tkv__sampler_argmax(s)) return TKV__SAMPLER_KEY_ARGMAX;
    return state_key(s, sim->s, sim->hist);
}

uint64_t tkv__sampler_key(const tkv_sampler *s) {
    tkv__sampler_sim now;
    tkv__sampler_sim_start(s, &now);
    return tkv__sampler_sim_key(s, &now);
}

void tkv__sampler_sim_took(const tkv_sampler *s, tkv__sampler_sim *sim, tkv_token tok) {
    if (draws_once(s)) step_u64(sim->s);
    sim->hist = hist_step(hist_step(sim->hist, tok, true), tok, false); /* as returned() */
}

void tkv__sampler_took(tkv_sampler *s, tkv_token tok) {
    if (draws_once(s)) next_u64(s); /* the draw its choice made */
    if (s->g) { /* the matcher goes past it as the choice's did (a keyed choice: the grammar allowed it) */
        bool ok = false;
        if (tkv__grammar_token(s->g, s->gm, tok, true, &ok) || !ok) s->g_lost = true;
    }
    returned(s, tok);
    s->last_kind = LAST_NONE;
}

tkv_token tkv_sampler_sample(tkv_sampler *s, const float *logits) {
    if (!s || !logits) return -1; /* NULL logits: what tkv_get_logits* give after a failed decode */
    const tkv_token chosen = s->g ? choose_in_grammar(s, logits) : choose(s, logits, NULL);
    returned(s, chosen);
    return chosen;
}
