/*
 * native_completion.c — llama-server's native POST /completion on the same path as
 * /v1/completions: its request fields are mapped onto the OpenAI ones
 * (n_predict -> max_tokens, llama-server's sampling defaults), then
 * srv_api_parse validates them as for any completion; only the response
 * shapes are its own.
 */
#include "native_completion.h"
#include "parse.h"
#include "responses.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* llama-server's documented defaults for /completion, where the OpenAI routes default to plain sampling. */
static const struct {
    const char *key;
    double value;
} native_defaults[] = {{"temperature", 0.8}, {"top_k", 40}, {"top_p", 0.95}, {"min_p", 0.05}};

/* llama-server fields that ask for something this server does not do: refused by name, not ignored. */
static bool refuse_native(const json_t *body, srv_err *e) {
    static const char *const never[] = {"image_data", "multimodal_data", "lora", "samplers", "input_prefix",
                                        "input_suffix"};
    for (size_t i = 0; i < sizeof never / sizeof never[0]; i++) {
        const json_t *v = json_object_get(body, never[i]);
        if (v && !json_is_null(v)) {
            srv_err_set(e, 400, never[i], "unsupported_parameter", "'%s' is not supported by this server", never[i]);
            return false;
        }
    }
    /* sampling extras that change the output when on: accepted only when off */
    static const char *const off[] = {"mirostat", "dry_multiplier", "xtc_probability"};
    for (size_t i = 0; i < sizeof off / sizeof off[0]; i++) {
        const json_t *v = json_object_get(body, off[i]);
        if (v && !json_is_null(v) && !(json_is_number(v) && json_number_value(v) == 0)) {
            srv_err_set(e, 400, off[i], "unsupported_parameter", "'%s' is not supported by this server (only 0)",
                        off[i]);
            return false;
        }
    }
    const json_t *np = json_object_get(body, "n_probs");
    if (np && !json_is_null(np) && (!json_is_integer(np) || json_integer_value(np) < 0 ||
                                    json_integer_value(np) > SRV_MAX_TOP_LOGPROBS)) {
        srv_err_set(e, 400, "n_probs", "invalid_value", "'n_probs' must be an integer in [0, %d]", SRV_MAX_TOP_LOGPROBS);
        return false;
    }
    bool post = false;
    if (!srv_field_bool(body, "post_sampling_probs", &post, e)) return false;
    const json_t *rf = json_object_get(body, "response_fields"); /* paths a/b; an empty list: the whole response */
    bool rf_ok = !rf || json_is_null(rf) || json_is_array(rf);
    for (size_t i = 0; rf_ok && i < json_array_size(rf); i++) rf_ok = json_is_string(json_array_get(rf, i));
    if (!rf_ok) {
        srv_err_set(e, 400, "response_fields", "invalid_type", "'response_fields' must be an array of strings");
        return false;
    }
    const json_t *slot = json_object_get(body, "id_slot");
    if (slot && !json_is_null(slot) && !(json_is_integer(slot) && json_integer_value(slot) == -1)) {
        srv_err_set(e, 400, "id_slot", "unsupported_parameter",
                    "'id_slot' is not supported: every request takes a free slot and reuses the longest cached "
                    "prefix, whichever slot computed it");
        return false;
    }
    return true;
}

bool srv_api_parse_native(const srv_api *a, const json_t *body, srv_req *r, srv_err *e) {
    if (!json_is_object(body)) {
        srv_err_set(e, 400, NULL, "invalid_json", "the request body must be a JSON object");
        return false;
    }
    if (!refuse_native(body, e)) return false;
    const json_t *cp = json_object_get(body, "cache_prompt"), *np = json_object_get(body, "n_predict");
    /* accepted for compatibility: every request reuses the longest cached prefix anyway */
    if (cp && !json_is_null(cp) && !json_is_boolean(cp)) {
        srv_err_set(e, 400, "cache_prompt", "invalid_type", "'cache_prompt' must be a boolean");
        return false;
    }
    if (np && !json_is_null(np) && (!json_is_integer(np) || json_integer_value(np) < -1 || !json_integer_value(np))) {
        srv_err_set(e, 400, "n_predict", "invalid_value",
                    "'n_predict' must be -1 (until the end of generation or the server's --max-tokens) or at least 1");
        return false;
    }
    const json_t *so = json_object_get(body, "stream_options");
    if (so && !json_is_null(so)) { /* the native stream has no usage chunk: its last event carries the counts */
        srv_err_set(e, 400, "stream_options", "unsupported_parameter", "'stream_options' is not a /completion field");
        return false;
    }
    json_t *b = json_copy((json_t *)body);
    if (!b) {
        srv_err_set(e, 500, NULL, NULL, "out of memory");
        return false;
    }
    json_object_del(b, "cache_prompt");
    json_object_del(b, "n"); /* not a /completion field (its n_probs is): one completion */
    json_object_del(b, "n_predict");
    if (np && json_is_integer(np) && json_integer_value(np) > 0) {
        if (json_integer_value(np) > a->max_tokens) {
            srv_err_set(e, 400, "n_predict", "invalid_value", "'n_predict' must be at most %d (this server's --max-tokens)",
                        a->max_tokens);
            json_decref(b);
            return false;
        }
        json_object_set(b, "max_tokens", (json_t *)np);
    } else if (np && json_integer_value(np) == -1) {
        json_object_set_new(b, "max_tokens", json_integer(a->max_tokens)); /* -1: as long as the server allows */
    } else if (!json_object_get(b, "max_tokens")) { /* the server's --n-predict, else as long as it allows */
        json_object_set_new(b, "max_tokens", json_integer(a->defaults.n_predict > 0 ? a->defaults.n_predict : a->max_tokens));
    }
    /* the server's own defaults (--temp, ...) where given, else llama-server's */
    const double server[] = {a->defaults.temperature, a->defaults.top_k >= 0 ? a->defaults.top_k : NAN,
                             a->defaults.top_p, a->defaults.min_p};
    for (size_t i = 0; i < sizeof native_defaults / sizeof native_defaults[0]; i++) {
        const double v = isnan(server[i]) ? native_defaults[i].value : server[i];
        if (!json_object_get(b, native_defaults[i].key))
            json_object_set_new(b, native_defaults[i].key,
                                !strcmp(native_defaults[i].key, "top_k") ? json_integer((json_int_t)v) : json_real(v));
    }
    json_object_del(b, "response_fields");
    json_object_del(b, "n_probs");
    json_object_del(b, "post_sampling_probs");
    r->native = true;
    const bool ok = srv_api_parse(a, b, false, r, e);
    const json_t *rf = json_object_get(body, "response_fields");
    if (ok && json_array_size(rf) && !(r->response_fields = json_dumps(rf, JSON_COMPACT))) {
        srv_err_set(e, 500, NULL, NULL, "out of memory");
        return false;
    }
    if (ok && json_integer_value(json_object_get(body, "n_probs")) > 0) /* the model's top n per generated token */
        r->logprobs = (int)json_integer_value(json_object_get(body, "n_probs"));
    /* post_sampling_probs: the sampler's distribution (after top-k, top-p, ..., temperature) instead */
    if (ok) r->post_probs = json_is_true(json_object_get(body, "post_sampling_probs"));
    json_decref(b);
    /* a field the mapping renamed keeps its client's name in the error */
    if (!ok && e->param && !strcmp(e->param, "max_tokens") && np) {
        e->param = "n_predict";
    }
    return ok;
}

/* The response object, or the final event of a stream (content: the whole text, or "" at a stream's end). */
static json_t *native_object(const srv_api *a, const srv_req *r, json_t *content) {
    const char *stop_type = !strcmp(r->finish_reason ? r->finish_reason : "", "length") ? "limit"
                            : r->stop_word >= 0                                       ? "word"
                                                                                      : "eos";
    json_t *tokens = json_array();
    for (size_t i = 0; r->return_tokens && i < r->n_gen_tokens; i++) json_array_append_new(tokens, json_integer(r->gen[i]));
    json_t *stop = json_array();
    for (size_t i = 0; i < r->n_stop; i++) json_array_append_new(stop, json_string(r->stop[i]));
    srv_req *one = (srv_req *)r;
    json_t *timings = srv_api_timings(&one, 1);
    json_t *settings = json_pack("{s:I,s:i,s:f,s:i,s:f,s:f,s:I,s:o}", "n_ctx", (json_int_t)a->n_ctx, "n_predict",
                                 r->max_tokens, "temperature", (double)r->sp.temperature, "top_k", (int)r->sp.top_k,
                                 "top_p", (double)r->sp.top_p, "min_p", (double)r->sp.min_p, "seed",
                                 (json_int_t)r->sp.seed, "stop", stop);
    return json_pack("{s:i,s:o,s:o,s:b,s:s,s:i,s:I,s:I,s:b,s:s,s:s,s:o,s:o,s:b}", "index", r->index, "content", content,
                     "tokens", tokens, "stop", 1, "model", a->model_id, "tokens_predicted", r->n_gen, "tokens_evaluated",
                     (json_int_t)r->n_prompt, "tokens_cached", (json_int_t)r->n_cached, "truncated", r->truncated, "stop_type",
                     stop_type, "stopping_word", r->stop_word >= 0 ? r->stop[r->stop_word] : "", "generation_settings",
                     settings, "timings", timings, "has_new_line", r->text && memchr(r->text, '\n', r->text_len) != NULL);
}

static char *dump(json_t *o) {
    char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    return s;
}

char *srv_api_native_response(const srv_api *a, srv_req *r) {
    pthread_mutex_lock(&r->mu);
    json_t *o = native_object(a, r, srv_json_text(r->text, r->text_len));
    if (o && r->logprobs > 0) json_object_set_new(o, "completion_probabilities", srv_api_native_probs(a, r, 0, r->n_lps));
    if (o) json_object_set_new(o, "prompt", srv_api_prompt_text(a, r));
    pthread_mutex_unlock(&r->mu);
    json_t *fields = r->response_fields ? json_loads(r->response_fields, 0, NULL) : NULL;
    if (o && fields) { /* llama-server's response_fields: only these, a path's parts split at '/' */
        json_t *only = json_object();
        for (size_t i = 0; i < json_array_size(fields); i++) {
            const char *path = json_string_value(json_array_get(fields, i));
            json_t *v = o;
            char part[128];
            for (const char *p = path; v && *p;) {
                const size_t k = strcspn(p, "/");
                snprintf(part, sizeof part, "%.*s", (int)(k < sizeof part ? k : sizeof part - 1), p);
                v = json_object_get(v, part);
                p += k + (p[k] == '/');
            }
            if (v) json_object_set(only, path, v);
        }
        json_decref(o);
        o = only;
    }
    json_decref(fields);
    return dump(o);
}

char *srv_api_native_responses(const srv_api *a, srv_req *const *reqs, size_t n) {
    if (n == 1) return srv_api_native_response(a, reqs[0]);
    size_t len = 2, cap = 256;
    char *out = malloc(cap);
    if (out) out[0] = '[';
    for (size_t i = 0; out && i < n; i++) {
        char *one = srv_api_native_response(a, reqs[i]);
        const size_t k = one ? strlen(one) : 0;
        char *grown = one && len + k + 2 > cap ? realloc(out, cap = 2 * (len + k + 2)) : out;
        if (!one || !grown) {
            free(one);
            free(grown ? grown : out);
            return NULL;
        }
        out = grown;
        if (i) out[len - 1] = ',', len++;
        memcpy(out + len - 1, one, k);
        len += k;
        free(one);
    }
    if (out) out[len - 1] = ']', out[len] = 0;
    return out;
}

char *srv_api_native_event(const srv_api *a, srv_req *r, const char *text, size_t n, bool final, long tok) {
    /* a stream's events hold the new text (and its token); the last, empty, holds the counts (the caller holds
       r->mu) */
    json_t *o = final ? native_object(a, r, json_string(""))
                      : json_pack("{s:o,s:[],s:b}", "content", srv_json_text(text, n), "tokens", "stop", 0);
    if (o && !final && tok >= 0 && (size_t)tok < r->n_tok) {
        json_array_append_new(json_object_get(o, "tokens"), json_integer(r->tok_id[tok]));
        if (r->logprobs > 0)
            json_object_set_new(o, "completion_probabilities", srv_api_native_probs(a, r, (size_t)tok, (size_t)tok + 1));
    }
    char *body = dump(o);
    if (!body) return NULL;
    const size_t len = strlen(body);
    char *ev = malloc(len + 9);
    if (ev) memcpy(ev, "data: ", 6), memcpy(ev + 6, body, len), memcpy(ev + 6 + len, "\n\n", 3);
    free(body);
    return ev;
}
