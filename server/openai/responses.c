/*
 * responses.c — OpenAI response bodies: the complete response of finished
 * choices, stream chunks, the usage chunk.
 */
#include "responses.h"
#include "reasoning.h"
#include "tool_fields.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- responses ---------------------------------------------------------------- */

/* With return_tokens (an extension), the choice lists the generated ids. */
static void add_tokens(json_t *choice, const srv_req *r) {
    if (!choice || !r->return_tokens) return;
    json_t *a = json_array();
    for (size_t i = 0; i < r->n_gen_tokens; i++) json_array_append_new(a, json_integer(r->gen[i]));
    json_object_set_new(choice, "tokens", a);
}

/* The usage of a request's choices: the prompt once (they share it), the completions together; cached_tokens:
   the prompt tokens the first choice found cached on arrival (the others reuse its cells: /metrics counts them). */
static json_t *usage(srv_req *const *reqs, size_t n) {
    json_int_t gen = 0;
    for (size_t i = 0; i < n; i++) {
        pthread_mutex_lock(&reqs[i]->mu);
        gen += reqs[i]->n_gen;
        pthread_mutex_unlock(&reqs[i]->mu);
    }
    const srv_req *r = reqs[0];
    return json_pack("{s:I,s:I,s:I,s:{s:I}}", "prompt_tokens", (json_int_t)r->n_prompt, "completion_tokens", gen,
                     "total_tokens", (json_int_t)r->n_prompt + gen, "prompt_tokens_details", "cached_tokens",
                     (json_int_t)r->n_cached);
}

static char *dump(json_t *o) {
    char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    return s;
}

/* A token's text and bytes (OpenAI's "token" and "bytes"). */
static json_t *token_text(const srv_api *a, tkv_token t, json_t **bytes) {
    char buf[256];
    size_t n = 0;
    if (tkv_token_to_piece(a->model, t, 0, buf, sizeof buf, &n) != TKV_OK) n = 0;
    if (bytes) {
        *bytes = json_array();
        for (size_t i = 0; i < n; i++) json_array_append_new(*bytes, json_integer((unsigned char)buf[i]));
    }
    return srv_json_text(buf, n);
}

/* choice.logprobs of generated tokens [from, to): chat's {content: [...]} or the completions' legacy columns. */
static json_t *logprobs_json(const srv_api *a, const srv_req *r, size_t from, size_t to) {
    if (r->chat) {
        json_t *content = json_array();
        for (size_t i = from; i < to; i++) {
            const srv_logprob *lp = &r->lps[i];
            json_t *bytes, *tops = json_array();
            json_t *tok = token_text(a, lp->token, &bytes);
            for (int k = 0; k < lp->n_top; k++) {
                json_t *tb, *tt = token_text(a, lp->top[k], &tb);
                json_array_append_new(tops, json_pack("{s:o,s:f,s:o}", "token", tt, "logprob", (double)lp->top_logprob[k],
                                                      "bytes", tb));
            }
            json_array_append_new(content, json_pack("{s:o,s:f,s:o,s:o}", "token", tok, "logprob", (double)lp->logprob,
                                                     "bytes", bytes, "top_logprobs", tops));
        }
        return json_pack("{s:o,s:n}", "content", content, "refusal");
    }
    json_t *tokens = json_array(), *lps = json_array(), *tops = json_array(), *offs = json_array();
    size_t off = 0;
    for (size_t i = 0; i < from; i++) { /* a stream's later chunks: offsets continue from the earlier tokens */
        json_t *tok = token_text(a, r->lps[i].token, NULL);
        off += json_string_length(tok);
        json_decref(tok);
    }
    for (size_t i = from; i < to; i++) {
        const srv_logprob *lp = &r->lps[i];
        json_t *tok = token_text(a, lp->token, NULL);
        json_array_append_new(offs, json_integer((json_int_t)off));
        off += json_string_length(tok);
        json_array_append_new(tokens, tok);
        json_array_append_new(lps, json_real(lp->logprob));
        json_t *top = json_object();
        for (int k = 0; k < lp->n_top; k++) {
            json_t *tt = token_text(a, lp->top[k], NULL);
            json_object_set_new(top, json_string_value(tt), json_real(lp->top_logprob[k]));
            json_decref(tt);
        }
        json_array_append_new(tops, top);
    }
    return json_pack("{s:o,s:o,s:o,s:o}", "tokens", tokens, "token_logprobs", lps, "top_logprobs", tops, "text_offset",
                     offs);
}

/* One choice of a finished request: its text, or message (reasoning and tool calls apart). */
static json_t *choice_json(const srv_api *a, srv_req *r) {
    pthread_mutex_lock(&r->mu);
    json_t *text, *choice;
    srv_think_split sp = {0, 0, 0, r->text_len};
    if (r->think) sp = srv_think_split_text(r->text, r->text_len, r->think_open, true);
    srv_tool_parse tp = {.content_end = sp.c1 - sp.c0, .rest = sp.c1 - sp.c0};
    if (r->tools && !srv_tools_parse((srv_tool_format)r->tool_format, r->tool_defs, r->text + sp.c0, sp.c1 - sp.c0, true, &tp))
        tp = (srv_tool_parse){.content_end = sp.c1 - sp.c0, .rest = sp.c1 - sp.c0}; /* out of memory: all content */
    const char *reason = srv_api_finish_reason(r, tp.n_calls);
    if (r->chat) {
        /* the content around the calls; none at all (null) beside calls, as OpenAI answers */
        const size_t before = tp.content_end, after = sp.c1 - sp.c0 - tp.rest;
        char *joined = malloc(before + after + 1);
        if (joined) {
            memcpy(joined, r->text + sp.c0, before);
            memcpy(joined + before, r->text + sp.c0 + tp.rest, after);
        }
        text = !joined ? NULL : tp.n_calls && !(before + after) ? json_null() : srv_json_text(joined, before + after);
        free(joined);
        choice = json_pack("{s:i,s:{s:s,s:o},s:n,s:s}", "index", r->index, "message", "role", "assistant", "content",
                           text, "logprobs", "finish_reason", reason);
        if (choice && sp.r1 > sp.r0)
            json_object_set_new(json_object_get(choice, "message"), "reasoning_content",
                                srv_json_text(r->text + sp.r0, sp.r1 - sp.r0));
        if (choice && tp.n_calls)
            json_object_set_new(json_object_get(choice, "message"), "tool_calls", srv_api_tool_calls_json(r, &tp));
    } else {
        char *joined = malloc(r->echo_len + sp.c1 - sp.c0 + 1);
        if (joined) {
            if (r->echo_len) memcpy(joined, r->echo, r->echo_len);
            memcpy(joined + r->echo_len, r->text + sp.c0, sp.c1 - sp.c0);
        }
        text = joined ? srv_json_text(joined, r->echo_len + sp.c1 - sp.c0) : NULL;
        free(joined);
        choice = json_pack("{s:o,s:i,s:n,s:s}", "text", text, "index", r->index, "logprobs", "finish_reason", reason);
    }
    srv_tool_parse_free(&tp);
    if (choice && r->logprobs >= 0) json_object_set_new(choice, "logprobs", logprobs_json(a, r, 0, r->n_lps));
    add_tokens(choice, r);
    pthread_mutex_unlock(&r->mu);
    return choice;
}

json_t *srv_api_native_probs(const srv_api *a, const srv_req *r, size_t from, size_t to) {
    json_t *out = json_array();
    /* post_sampling_probs: the sampler's probabilities, under llama-server's other names */
    const char *value = r->post_probs ? "prob" : "logprob", *tops_key = r->post_probs ? "top_probs" : "top_logprobs";
    for (size_t i = from; i < to && i < r->n_lps; i++) {
        const srv_logprob *lp = &r->lps[i];
        json_t *bytes, *tops = json_array(), *tok = token_text(a, lp->token, &bytes);
        for (int k = 0; k < lp->n_top; k++) {
            json_t *tb, *tt = token_text(a, lp->top[k], &tb);
            json_array_append_new(tops, json_pack("{s:i,s:o,s:f,s:o}", "id", (int)lp->top[k], "token", tt, value,
                                                  (double)lp->top_logprob[k], "bytes", tb));
        }
        json_array_append_new(out, json_pack("{s:i,s:o,s:f,s:o,s:o}", "id", (int)lp->token, "token", tok, value,
                                             (double)lp->logprob, "bytes", bytes, tops_key, tops));
    }
    return out;
}

static double per(double num, double den) { return den > 0 ? num / den : 0; }

json_t *srv_api_timings(srv_req *const *reqs, size_t n) {
    const srv_req *r = reqs[0];
    int predicted = 0;
    double t_done = r->t_done;
    for (size_t i = 0; i < n; i++) {
        predicted += reqs[i]->n_gen;
        if (reqs[i]->t_done > t_done) t_done = reqs[i]->t_done;
    }
    /* prompt time runs from arrival to the first token (queueing included), generation from there to the end */
    const double prompt_ms = 1e3 * (r->t_first - r->t_arrival), gen_ms = 1e3 * (t_done - r->t_first);
    const size_t prompt_n = r->n_prompt - r->n_cached;
    json_t *t = json_pack("{s:I,s:I,s:f,s:f,s:f,s:i,s:f,s:f,s:f}", "cache_n", (json_int_t)r->n_cached, "prompt_n",
                     (json_int_t)prompt_n, "prompt_ms", prompt_ms, "prompt_per_token_ms", per(prompt_ms, (double)prompt_n),
                     "prompt_per_second", per(1e3 * (double)prompt_n, prompt_ms), "predicted_n", predicted,
                     "predicted_ms", gen_ms, "predicted_per_token_ms", per(gen_ms, predicted), "predicted_per_second",
                     per(1e3 * predicted, gen_ms));
    int draft_n = 0, accepted = 0;
    for (size_t i = 0; i < n; i++) draft_n += reqs[i]->draft_n, accepted += reqs[i]->draft_n_accepted;
    if (t && draft_n > 0) { /* llama-server's, only when something was drafted */
        json_object_set_new(t, "draft_n", json_integer(draft_n));
        json_object_set_new(t, "draft_n_accepted", json_integer(accepted));
    }
    return t;
}

json_t *srv_api_prompt_text(const srv_api *a, const srv_req *r) {
    size_t len = 0, cap = 256;
    char *p = malloc(cap), piece[256];
    for (size_t i = 0; p && i < r->n_prompt; i++) { /* the pieces as they are, so that the text shows every token */
        size_t k = 0;
        if (tkv_token_to_piece(a->model, r->prompt[i], TKV_DETOKENIZE_SPECIAL, piece, sizeof piece, &k) != TKV_OK)
            continue;
        if (len + k + 1 > cap) {
            while (len + k + 1 > cap) cap *= 2;
            char *t = realloc(p, cap);
            if (!t) {
                free(p);
                p = NULL;
                break;
            }
            p = t;
        }
        memcpy(p + len, piece, k), len += k;
    }
    json_t *o = p ? srv_json_text(p, len) : json_null();
    free(p);
    return o;
}

json_t *srv_api_verbose(const srv_api *a, const srv_req *r) {
    return json_pack("{s:o,s:o}", "prompt", srv_api_prompt_text(a, r), "content", srv_json_text(r->text, r->text_len));
}

char *srv_api_response(const srv_api *a, srv_req *const *reqs, size_t n) {
    const srv_req *r = reqs[0];
    json_t *choices = json_array();
    for (size_t i = 0; i < n; i++) json_array_append_new(choices, choice_json(a, reqs[i]));
    json_t *o = json_pack("{s:s,s:s,s:I,s:s,s:o,s:o,s:s}", "id", r->id, "object",
                          r->chat ? "chat.completion" : "text_completion", "created", (json_int_t)r->created, "model",
                          a->model_id, "choices", choices, "usage", usage(reqs, n), "system_fingerprint", "tokenkv");
    if (o) json_object_set_new(o, "timings", srv_api_timings(reqs, n));
    if (o && a->verbose) {
        pthread_mutex_lock(&reqs[0]->mu);
        json_object_set_new(o, "__verbose", srv_api_verbose(a, reqs[0]));
        pthread_mutex_unlock(&reqs[0]->mu);
    }
    return dump(o);
}

char *srv_api_usage_chunk(const srv_api *a, srv_req *const *reqs, size_t n) {
    const srv_req *r = reqs[0];
    json_t *o = json_pack("{s:s,s:s,s:I,s:s,s:s,s:[],s:o}", "id", r->id, "object",
                          r->chat ? "chat.completion.chunk" : "text_completion", "created", (json_int_t)r->created,
                          "model", a->model_id, "system_fingerprint", "tokenkv", "choices", "usage", usage(reqs, n));
    if (o) json_object_set_new(o, "timings", srv_api_timings(reqs, n)); /* llama-server's, with the usage */
    char *body = dump(o);
    if (!body) return NULL;
    char *ev = malloc(strlen(body) + 9);
    if (ev) sprintf(ev, "data: %s\n\n", body);
    free(body);
    return ev;
}

char *srv_api_progress_event(const srv_api *a, const srv_req *r, size_t i) {
    const srv_progress *p = &r->prog[i];
    json_t *prog = json_pack("{s:I,s:I,s:I,s:f}", "total", (json_int_t)r->n_prompt, "cache", (json_int_t)r->prog[0].processed,
                             "processed", (json_int_t)p->processed, "time_ms", (p->t - r->prog[0].t) * 1000);
    json_t *o = r->native ? json_pack("{s:s,s:[],s:b}", "content", "", "tokens", "stop", 0)
                          : json_pack("{s:s,s:s,s:I,s:s,s:s,s:[]}", "id", r->id, "object",
                                      r->chat ? "chat.completion.chunk" : "text_completion", "created",
                                      (json_int_t)r->created, "model", a->model_id, "system_fingerprint", "tokenkv",
                                      "choices");
    if (o) json_object_set_new(o, "prompt_progress", prog);
    else json_decref(prog);
    char *body = dump(o);
    if (!body) return NULL;
    size_t len = strlen(body);
    char *ev = malloc(len + 9);
    if (ev) memcpy(ev, "data: ", 6), memcpy(ev + 6, body, len), memcpy(ev + 6 + len, "\n\n", 3);
    free(body);
    return ev;
}

char *srv_api_chunk(const srv_api *a, srv_req *r, srv_chunk_kind kind, const char *text, size_t n, bool first,
                    size_t *lp_sent) {
    json_t *choices = json_array(), *choice = NULL;
    {
        const char *reason = kind == SRV_CHUNK_FINISH ? srv_api_finish_reason(r, n) : NULL;
        json_t *t = kind == SRV_CHUNK_DELTA ? srv_json_text(text, n) : NULL;
        if (r->chat) {
            json_t *delta = json_object();
            if (first) json_object_set_new(delta, "role", json_string("assistant"));
            if (kind == SRV_CHUNK_ROLE) json_object_set_new(delta, "content", json_null()); /* llama-server's first chunk */
            if (t) json_object_set_new(delta, "content", t);
            if (kind == SRV_CHUNK_REASONING) json_object_set_new(delta, "reasoning_content", srv_json_text(text, n));
            choice = json_pack("{s:i,s:o,s:n,s:o}", "index", r->index, "delta", delta, "logprobs", "finish_reason",
                               srv_json_str_or_null(reason));
        } else {
            choice = json_pack("{s:o,s:i,s:n,s:o}", "text", t ? t : json_string(""), "index", r->index, "logprobs",
                               "finish_reason", srv_json_str_or_null(reason));
        }
        if (kind == SRV_CHUNK_FINISH) add_tokens(choice, r);
        /* the logprobs of the tokens generated since the last chunk that carried some */
        if (choice && lp_sent && r->logprobs >= 0 && *lp_sent < r->n_lps) {
            json_object_set_new(choice, "logprobs", logprobs_json(a, r, *lp_sent, r->n_lps));
            *lp_sent = r->n_lps;
        }
        json_array_append_new(choices, choice);
    }
    json_t *o = json_pack("{s:s,s:s,s:I,s:s,s:s,s:o}", "id", r->id, "object",
                          r->chat ? "chat.completion.chunk" : "text_completion", "created", (json_int_t)r->created,
                          "model", a->model_id, "system_fingerprint", "tokenkv", "choices", choices);
    /* with include_usage every chunk carries "usage": null but the last (srv_api_usage_chunk) */
    if (o && r->include_usage) json_object_set_new(o, "usage", json_null());
    char *body = dump(o);
    if (!body) return NULL;
    size_t len = strlen(body);
    char *ev = malloc(len + 9);
    if (ev) memcpy(ev, "data: ", 6), memcpy(ev + 6, body, len), memcpy(ev + 6 + len, "\n\n", 3);
    free(body);
    return ev;
}
