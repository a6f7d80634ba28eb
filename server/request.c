/*
 * request.c — the request object shared by the HTTP side and the
 * inference thread; stop strings.
 */
#include "request.h"

#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

double srv_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

srv_req *srv_req_new(void) {
    srv_req *r = calloc(1, sizeof *r);
    if (!r) return NULL;
    r->text = malloc(256);
    if (!r->text) {
        free(r);
        return NULL;
    }
    r->text[0] = 0;
    r->text_cap = 256;
    r->refs = 1;
    r->logprobs = -1;
    r->n_choices = 1;
    r->stop_word = -1;
    pthread_mutex_init(&r->mu, NULL);
    r->t_arrival = srv_now();
    return r;
}

void srv_req_ref(srv_req *r) {
    pthread_mutex_lock(&r->mu);
    r->refs++;
    pthread_mutex_unlock(&r->mu);
}

void srv_req_unref(srv_req *r) {
    if (!r) return;
    pthread_mutex_lock(&r->mu);
    int left = --r->refs;
    pthread_mutex_unlock(&r->mu);
    if (left) return;
    pthread_mutex_destroy(&r->mu);
    for (size_t i = 0; i < r->n_stop; i++) free(r->stop[i]);
    tkv_grammar_free(r->own_grammar);
    json_decref(r->tool_defs);
    free(r->bias);
    free(r->echo);
    free(r->conv);
    free(r->response_fields);
    free(r->tok_id);
    free(r->prog);
    free(r->tok_end);
    free(r->lps);
    free(r->prompt);
    free(r->text);
    free(r->gen);
    free(r);
}

/* Longest suffix of s[from..n) that is a proper prefix of a stop string:
   those bytes may still become a stop string and are held back. */
static size_t held_back(const srv_req *r, size_t from) {
    size_t best = 0;
    for (size_t k = 0; k < r->n_stop; k++) {
        const size_t ls = strlen(r->stop[k]);
        if (ls == 0) continue;
        for (size_t len = ls - 1; len > best; len--)
            if (r->text_len - from >= len && !memcmp(r->text + r->text_len - len, r->stop[k], len)) {
                best = len;
                break;
            }
    }
    return best;
}

bool srv_req_append(srv_req *r, const char *s, size_t n) {
    pthread_mutex_lock(&r->mu);
    r->n_pushed++;
    /* a chat answer is a message of its own: without the space that joins it
       to "Assistant:" (the template puts it back when the message comes back
       in the next turn, so that turn's tokens match the cached ones) */
    if (r->chat && !r->prefill && r->text_len == 0 && n && s[0] == ' ') s++, n--;
    if (r->text_len + n + 1 > r->text_cap) {
        size_t cap = r->text_cap;
        while (r->text_len + n + 1 > cap) cap *= 2;
        char *t = realloc(r->text, cap);
        if (!t) { /* keep what we have; the text is cut short, never corrupt */
            pthread_mutex_unlock(&r->mu);
            return false;
        }
        r->text = t, r->text_cap = cap;
    }
    memcpy(r->text + r->text_len, s, n);
    r->text_len += n;
    r->text[r->text_len] = 0;
    /* a stop string can only start where the ready text ends (it would have
       been found, or held back, otherwise) */
    bool stopped = false;
    size_t cut = r->text_len;
    for (size_t k = 0; k < r->n_stop; k++) {
        const char *hit = strstr(r->text + r->text_ready, r->stop[k]);
        if (hit && (size_t)(hit - r->text) < cut) cut = (size_t)(hit - r->text), stopped = true, r->stop_word = (int)k;
    }
    if (stopped) {
        r->text_len = cut;
        r->text[cut] = 0;
        r->text_ready = cut;
    } else {
        r->text_ready = r->text_len - held_back(r, r->text_ready);
    }
    if (!r->t_first) r->t_first = srv_now();
    if (r->wake) r->wake(r->wake_arg);
    pthread_mutex_unlock(&r->mu);
    return stopped;
}

void srv_req_add_logprob(srv_req *r, tkv_token token, const float *logits, size_t n_vocab, const tkv_sampler *smp) {
    if (r->logprobs < 0 || !logits || token < 0 || (size_t)token >= n_vocab) return;
    srv_logprob lp = {.token = token, .n_top = r->logprobs};
    size_t n_top = 0;
    if (r->post_probs) { /* the sampler's distribution after its chain, as probabilities */
        lp.logprob = tkv_sampler_last_prob(smp, token);
        if (tkv_sampler_last_probs(smp, (size_t)lp.n_top, lp.top, lp.top_logprob, &n_top)) n_top = 0;
        lp.n_top = (int)n_top;
    } else {
        /* log-softmax: logit - max - log(sum exp(logit - max)) */
        float mx = logits[0];
        for (size_t i = 1; i < n_vocab; i++) mx = logits[i] > mx ? logits[i] : mx;
        double sum = 0;
        for (size_t i = 0; i < n_vocab; i++) sum += exp((double)logits[i] - mx);
        const double lse = mx + log(sum);
        lp.logprob = (float)(logits[token] - lse);
        /* the n_top best, by insertion into a short sorted list (the lower id first on a tie) */
        int n = 0;
        for (size_t i = 0; i < n_vocab && lp.n_top; i++) {
            if (n == lp.n_top && logits[i] <= logits[lp.top[n - 1]]) continue;
            int at = n < lp.n_top ? n++ : n - 1;
            while (at > 0 && logits[i] > logits[lp.top[at - 1]]) lp.top[at] = lp.top[at - 1], at--;
            lp.top[at] = (tkv_token)i;
        }
        for (int k = 0; k < lp.n_top; k++) lp.top_logprob[k] = (float)(logits[lp.top[k]] - lse);
    }
    pthread_mutex_lock(&r->mu);
    if (r->n_lps == r->cap_lps) {
        size_t cap = r->cap_lps ? 2 * r->cap_lps : 64;
        srv_logprob *p = realloc(r->lps, cap * sizeof *p);
        if (p) r->lps = p, r->cap_lps = cap;
    }
    if (r->n_lps < r->cap_lps) r->lps[r->n_lps++] = lp; /* out of memory: that token is not listed */
    pthread_mutex_unlock(&r->mu);
}

void srv_req_note_token(srv_req *r, tkv_token token) {
    if (!r->native || !r->stream) return;
    pthread_mutex_lock(&r->mu);
    if (r->n_tok == r->cap_tok) {
        const size_t cap = r->cap_tok ? 2 * r->cap_tok : 64;
        tkv_token *ids = realloc(r->tok_id, cap * sizeof *ids);
        if (ids) r->tok_id = ids;
        size_t *ends = ids ? realloc(r->tok_end, cap * sizeof *ends) : NULL;
        if (ends) r->tok_end = ends, r->cap_tok = cap;
    }
    if (r->n_tok < r->cap_tok) { /* out of memory: the token's text goes with the next one's event */
        r->tok_id[r->n_tok] = token;
        r->tok_end[r->n_tok++] = r->text_len;
    }
    if (r->wake) r->wake(r->wake_arg); /* the stream may send this token's event now */
    pthread_mutex_unlock(&r->mu);
}

void srv_req_set_tokens(srv_req *r, const tkv_token *t, size_t n) {
    tkv_token *g = malloc((n ? n : 1) * sizeof *g);
    if (!g) return; /* the response then lists none */
    if (n) memcpy(g, t, n * sizeof *t);
    pthread_mutex_lock(&r->mu);
    free(r->gen);
    r->gen = g, r->n_gen_tokens = n;
    pthread_mutex_unlock(&r->mu);
}

void srv_req_progress(srv_req *r, size_t processed) {
    if (!r->return_progress) return;
    pthread_mutex_lock(&r->mu);
    if (r->n_prog == r->cap_prog) {
        const size_t cap = r->cap_prog ? 2 * r->cap_prog : 16;
        srv_progress *p = realloc(r->prog, cap * sizeof *p);
        if (p) r->prog = p, r->cap_prog = cap;
    }
    if (r->n_prog < r->cap_prog) r->prog[r->n_prog++] = (srv_progress){processed, srv_now()}; /* else: one step less */
    if (r->wake) r->wake(r->wake_arg);
    pthread_mutex_unlock(&r->mu);
}

void srv_req_set_cached(srv_req *r, size_t n_cached) {
    pthread_mutex_lock(&r->mu);
    r->n_cached = n_cached;
    pthread_mutex_unlock(&r->mu);
}

void srv_req_finish(srv_req *r, const char *reason, int n_gen) {
    pthread_mutex_lock(&r->mu);
    if (!r->done) {
        r->done = true;
        r->n_gen = n_gen;
        r->finish_reason = reason;
        r->text_ready = r->text_len; /* nothing more can complete a stop string */
        r->t_done = srv_now();
        if (!r->t_first) r->t_first = r->t_done;
    }
    if (r->wake) r->wake(r->wake_arg);
    pthread_mutex_unlock(&r->mu);
}

void srv_req_fail(srv_req *r, srv_fail why, const char *fmt, ...) {
    pthread_mutex_lock(&r->mu);
    if (!r->done) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(r->err_msg, sizeof r->err_msg, fmt, ap);
        va_end(ap);
        r->failed = why;
        r->done = true;
        r->t_done = srv_now();
    }
    if (r->wake) r->wake(r->wake_arg);
    pthread_mutex_unlock(&r->mu);
}

bool srv_req_is_cancelled(srv_req *r) {
    pthread_mutex_lock(&r->mu);
    bool c = r->cancelled;
    pthread_mutex_unlock(&r->mu);
    return c;
}

void srv_req_cancel(srv_req *r) {
    pthread_mutex_lock(&r->mu);
    r->cancelled = true;
    pthread_mutex_unlock(&r->mu);
}

void srv_req_detach(srv_req *r) {
    pthread_mutex_lock(&r->mu);
    r->wake = NULL, r->wake_arg = NULL;
    pthread_mutex_unlock(&r->mu);
}
