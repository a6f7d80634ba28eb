/*
 * handlers.c — what each route answers (the table srv_routes at the end):
 * generations, which wait for the scheduler with the connection suspended,
 * the tokenizer and template routes, the model list and props, and the
 * views built on the inference thread.
 */
#include "exchange.h"
#include "openai/anthropic.h"
#include "openai/body.h"
#include "openai/native_completion.h"
#include "openai/parse.h"
#include "openai/responses.h"
#include "openai/responses_api.h"
#include "routes.h"
#include "web/web.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- waiting ------------------------------------------------------------------ */

/* request.h's wake: the scheduler changed the request's output. */
static void wake_link(void *arg) { srv_link_wake(arg); }

/* Whether a generation can be answered: every choice done, or (a stream) one has its first text. */
static bool gen_ready(srv_req *const *reqs, size_t n) {
    bool all = true, any = false;
    for (size_t i = 0; i < n; i++) {
        srv_req *r = reqs[i];
        pthread_mutex_lock(&r->mu);
        all &= r->done;
        any |= r->done || (r->stream && (r->t_first || r->n_prog)); /* a stream starts with its first text or step */
        pthread_mutex_unlock(&r->mu);
    }
    return all || (reqs[0]->stream && any);
}

/* ---- routes -------------------------------------------------------------------- */

static json_t *parse_body(conn *cs, srv_err *e) { return srv_body_parse(cs->body, cs->n, e); }

/* What a generation route speaks: OpenAI's completions or chat, llama-server's native /completion, or
   Anthropic's messages. */
typedef enum { GEN_COMPLETIONS, GEN_CHAT, GEN_NATIVE, GEN_ANTHROPIC, GEN_RESPONSES } gen_kind;

/* An error in the shape of the route's API: Anthropic's for /v1/messages, else OpenAI's. */
static enum MHD_Result send_err(conn *cs, struct MHD_Connection *c, const srv_err *e, bool anthropic) {
    if (!anthropic) return http_send_err(cs, c, e);
    return http_send_body(cs, c, e->status, "application/json", srv_anthropic_error_json(e));
}

/* The answer of a submitted request (or, for a stream, its start) once the
   scheduler has it; until then the connection is suspended. */
static enum MHD_Result generated(conn *cs, struct MHD_Connection *c, srv_state *S) {
    srv_req *r = cs->reqs[0];
    cs->cont = NULL;
    while (!gen_ready(cs->reqs, cs->n_reqs)) {
        if (srv_link_gone(cs->link)) {
            http_cancel_all(cs->reqs, cs->n_reqs);
            cs->status = 499; /* client closed the request */
            return MHD_NO;
        }
        if (srv_link_suspend(cs->link, true)) {
            cs->cont = generated;
            return MHD_YES;
        }
    }
    if (r->stream) return http_send_stream(cs, c, S);
    for (size_t i = 0; i < cs->n_reqs; i++)
        if (cs->reqs[i]->failed) { /* done: the error fields are final */
            srv_err e;
            http_failed_err(&e, cs->reqs[i]);
            return send_err(cs, c, &e, r->anthropic);
        }
    return http_send_body(cs, c, 200, "application/json",
                     r->native      ? srv_api_native_responses(&S->api, cs->reqs, cs->n_reqs)
                     : r->anthropic ? srv_anthropic_response(&S->api, r)
                     : r->responses ? srv_responses_response(&S->api, r)
                                    : srv_api_response(&S->api, cs->reqs, cs->n_reqs));
}

/* Drop the requests a generation made (before any was submitted, or after a failed submission). */
static void drop_reqs(conn *cs) {
    http_cancel_all(cs->reqs, cs->n_reqs);
    for (size_t i = 0; i < cs->n_reqs; i++) srv_req_detach(cs->reqs[i]), srv_req_unref(cs->reqs[i]);
    cs->n_reqs = 0;
}

static enum MHD_Result generate(conn *cs, struct MHD_Connection *c, srv_state *S, gen_kind kind) {
    srv_err e;
    json_t *body = parse_body(cs, &e);
    if (!body) return send_err(cs, c, &e, kind == GEN_ANTHROPIC);
    /* one request per choice (n), each parsed from the body with its own sampler and grammar; they share the
       prompt, which the cache computes once. llama-server's /completion of several prompts: one request each */
    const size_t n_prompts = kind == GEN_NATIVE ? srv_api_prompt_count(body) : 1;
    size_t n = n_prompts;
    bool ok = true;
    if (n_prompts > 1 && (n_prompts > SRV_MAX_CHOICES || json_is_true(json_object_get(body, "stream")))) {
        if (n_prompts > SRV_MAX_CHOICES)
            srv_err_set(&e, 400, "prompt", "invalid_value", "at most %d prompts in one request (got %zu)",
                        SRV_MAX_CHOICES, n_prompts);
        else
            srv_err_set(&e, 400, "prompt", "unsupported_parameter", "several prompts in one streamed request are "
                        "not supported (got %zu); send them one per request", n_prompts);
        ok = false;
    }
    for (size_t i = 0; ok && i < n; i++) {
        srv_req *r = srv_req_new();
        json_t *one = n_prompts > 1 ? json_copy(body) : json_incref(body);
        if (!r || !one) {
            if (r) srv_req_unref(r);
            json_decref(one);
            srv_err_set(&e, 500, NULL, NULL, "out of memory");
            ok = false;
            break;
        }
        cs->reqs[cs->n_reqs++] = r;
        if (n_prompts > 1) json_object_set(one, "prompt", json_array_get(json_object_get(body, "prompt"), i));
        ok = kind == GEN_NATIVE      ? srv_api_parse_native(&S->api, one, r, &e)
             : kind == GEN_ANTHROPIC ? srv_api_parse_anthropic(&S->api, one, r, &e)
             : kind == GEN_RESPONSES ? srv_api_parse_responses(&S->api, one, r, &e)
                                     : srv_api_parse(&S->api, one, kind == GEN_CHAT, r, &e);
        json_decref(one);
        if (ok && n_prompts > 1) r->index = (int)i;
        if (ok && i == 0 && n_prompts == 1) n = r->n_choices;
        if (ok && i > 0 && n_prompts == 1) srv_api_choice(cs->reqs[0], r, i);
    }
    json_decref(body);
    if (!ok) {
        drop_reqs(cs);
        return send_err(cs, c, &e, kind == GEN_ANTHROPIC);
    }
    const uint64_t client = http_client_of(S, c); /* every choice counts against its client's share */
    for (size_t i = 0; i < cs->n_reqs; i++) {
        srv_req *r = cs->reqs[i];
        r->wake = wake_link, r->wake_arg = cs->link;
        r->client = client;
        const srv_submit rc = srv_sched_submit(S->sched, r);
        if (rc != SRV_SUBMIT_OK) {
            drop_reqs(cs);
            return rc == SRV_SUBMIT_QUEUE_FULL ? http_fail(cs, c, 429, NULL, "queue_full",
                                    "the server is busy: its queue of waiting requests is full, or this client holds "
                                    "its share, half of it (--max-queue); retry later")
                             : http_fail(cs, c, 503, NULL, "shutting_down", "the server is shutting down");
        }
    }
    return generated(cs, c, S);
}

/* POST /apply-template (llama-server's): the prompt a chat request's body renders to, not generated from. */
static enum MHD_Result apply_template(conn *cs, struct MHD_Connection *c, srv_state *S, const char *rest) {
    (void)rest;
    srv_err e;
    json_t *body = parse_body(cs, &e);
    if (!body) return http_send_err(cs, c, &e);
    size_t len = 0;
    char *text = srv_api_chat_prompt(&S->api, body, &len, NULL, &e);
    json_decref(body);
    if (!text) return http_send_err(cs, c, &e);
    json_t *prompt = srv_json_text(text, len);
    free(text);
    return http_send_json(cs, c, 200, json_pack("{s:o}", "prompt", prompt));
}

static enum MHD_Result tokenize(conn *cs, struct MHD_Connection *c, srv_state *S, const char *rest) {
    (void)rest;
    srv_err e;
    json_t *body = parse_body(cs, &e);
    if (!body) return http_send_err(cs, c, &e);
    const json_t *content = json_object_get(body, "content");
    bool add_special = true, parse_special = true, with_pieces = false;
    const json_t *as = json_object_get(body, "add_special"), *ps = json_object_get(body, "parse_special");
    if (!srv_field_bool(body, "with_pieces", &with_pieces, &e)) {
        json_decref(body);
        return http_send_err(cs, c, &e);
    }
    if (!json_is_string(content)) {
        json_decref(body);
        return http_fail(cs, c, 400, "content", "invalid_type", "'content' must be a string");
    }
    if ((as && !json_is_boolean(as)) || (ps && !json_is_boolean(ps))) {
        json_decref(body);
        return http_fail(cs, c, 400, as && !json_is_boolean(as) ? "add_special" : "parse_special", "invalid_type",
                    "'add_special' and 'parse_special' must be booleans");
    }
    if (as) add_special = json_is_true(as);
    if (ps) parse_special = json_is_true(ps);
    tkv_token *t = NULL;
    size_t n = 0;
    tkv_status st = srv_tokenize(S->model, json_string_value(content), json_string_length(content),
                                 (add_special ? TKV_TOKENIZE_ADD_SPECIAL : 0) |
                                     (parse_special ? TKV_TOKENIZE_PARSE_SPECIAL : 0),
                                 &t, &n);
    json_decref(body);
    if (st) {
        srv_err_set(&e, st == TKV_ERR_NOMEM ? 500 : 400, "content", NULL, "cannot tokenize: %s", tkv_last_error(S->model));
        return http_send_err(cs, c, &e);
    }
    json_t *arr = json_array();
    for (size_t i = 0; i < n; i++) {
        if (!with_pieces) {
            json_array_append_new(arr, json_integer(t[i]));
            continue;
        }
        /* llama-server's with_pieces: {id, piece}, the piece as text, or as its bytes where it is not UTF-8 */
        char piece[256];
        size_t k = 0;
        if (tkv_token_to_piece(S->model, t[i], TKV_DETOKENIZE_SPECIAL, piece, sizeof piece, &k) != TKV_OK) k = 0;
        json_t *p = json_stringn(piece, k);
        if (!p) {
            p = json_array();
            for (size_t b = 0; b < k; b++) json_array_append_new(p, json_integer((unsigned char)piece[b]));
        }
        json_array_append_new(arr, json_pack("{s:I,s:o}", "id", (json_int_t)t[i], "piece", p));
    }
    free(t);
    return http_send_json(cs, c, 200, json_pack("{s:o}", "tokens", arr));
}

static enum MHD_Result detokenize(conn *cs, struct MHD_Connection *c, srv_state *S, const char *rest) {
    (void)rest;
    srv_err e;
    json_t *body = parse_body(cs, &e);
    if (!body) return http_send_err(cs, c, &e);
    const json_t *arr = json_object_get(body, "tokens");
    if (!json_is_array(arr)) {
        json_decref(body);
        return http_fail(cs, c, 400, "tokens", "invalid_type", "'tokens' must be an array of token ids");
    }
    const size_t n = json_array_size(arr), n_vocab = tkv_vocab_size(S->model);
    tkv_token *t = malloc((n ? n : 1) * sizeof *t);
    for (size_t i = 0; t && i < n; i++) {
        const json_t *v = json_array_get(arr, i);
        if (!json_is_integer(v) || json_integer_value(v) < 0 || (unsigned long long)json_integer_value(v) >= n_vocab) {
            srv_err_set(&e, 400, "tokens", "invalid_value", "tokens[%zu] is not a token id in [0, %zu)", i, n_vocab);
            free(t);
            json_decref(body);
            return http_send_err(cs, c, &e);
        }
        t[i] = (tkv_token)json_integer_value(v);
    }
    json_decref(body);
    size_t len = 0;
    char *text = NULL;
    tkv_status st = t ? tkv_detokenize(S->model, t, n, 0, NULL, 0, &len) : TKV_ERR_NOMEM;
    if (st == TKV_OK || st == TKV_ERR_FULL) {
        text = malloc(len + 1);
        st = text ? tkv_detokenize(S->model, t, n, 0, text, len + 1, &len) : TKV_ERR_NOMEM;
    }
    free(t);
    json_t *o = st ? NULL : json_pack("{s:o}", "content", srv_json_text(text, len));
    free(text);
    return http_send_json(cs, c, 200, o);
}

/* The items of a comma-separated list (--alias, --tags) as a JSON array. */
static json_t *list_items(const char *list) {
    json_t *a = json_array();
    for (const char *p = list; p && *p;) {
        while (*p == ',' || *p == ' ') p++;
        size_t n = strcspn(p, ",");
        while (n && p[n - 1] == ' ') n--;
        if (n) json_array_append_new(a, json_stringn(p, n));
        p += strcspn(p, ",");
    }
    return a;
}

static enum MHD_Result models(conn *cs, struct MHD_Connection *c, srv_state *S, const char *id) {
    json_t *m = json_pack("{s:s,s:s,s:I,s:s}", "id", S->api.model_id, "object", "model", "created",
                          (json_int_t)S->started, "owned_by", "tokenkv");
    if (m) { /* llama-server's: every --alias, and --tags */
        json_t *al = list_items(S->o->alias);
        if (!json_array_size(al)) json_array_append_new(al, json_string(S->api.model_id));
        json_object_set_new(m, "aliases", al);
        json_object_set_new(m, "tags", list_items(S->o->tags));
    }
    if (!id) return http_send_json(cs, c, 200, json_pack("{s:s,s:[o]}", "object", "list", "data", m));
    bool known = !strcmp(id, S->api.model_id);
    for (size_t i = 0; !known && i < json_array_size(json_object_get(m, "aliases")); i++)
        known = !strcmp(id, json_string_value(json_array_get(json_object_get(m, "aliases"), i)));
    if (!known) {
        json_decref(m);
        srv_err e;
        srv_err_set(&e, 404, "model", "model_not_found", "the model '%s' does not exist; this server runs '%s'", id,
                    S->api.model_id);
        return http_send_err(cs, c, &e);
    }
    return http_send_json(cs, c, 200, m);
}

/* GET /props (llama-server's): what a client needs to know to talk to this server. */
static enum MHD_Result props(conn *cs, struct MHD_Connection *c, srv_state *S, const char *rest) {
    (void)rest;
    const char *tmpl = NULL;
    size_t len = 0;
    json_t *chat;
    if (S->api.jinja && tkv_model_meta_str(S->model, "tokenizer.chat_template", &tmpl, &len) == TKV_OK)
        chat = srv_json_text(tmpl, len);
    else
        chat = json_string(!S->api.jinja                 ? srv_chat_name(S->api.chat)
                           : S->o->chat_template_file      ? S->o->chat_template_file
                           : S->o->chat_template           ? S->o->chat_template
                                                           : "chatml");
    char build[64];
    snprintf(build, sizeof build, "tokenkv %d.%d.%d", TKV_VERSION_MAJOR, TKV_VERSION_MINOR, TKV_VERSION_PATCH);
    /* the file's name, not where it lies: the path tells a client about the host */
    const char *slash = strrchr(S->o->model_path, '/');
    json_t *o = json_pack("{s:s,s:s,s:I,s:i,s:o,s:s,s:{s:I,s:{s:i}},s:{s:b,s:b}}", "model_alias", S->api.model_id,
                          "model_path", slash ? slash + 1 : S->o->model_path, "n_ctx", (json_int_t)S->api.n_ctx, "total_slots",
                          S->o->parallel, "chat_template", chat, "build_info", build, "default_generation_settings",
                          "n_ctx", (json_int_t)S->api.n_ctx, "params", "n_predict", S->api.max_tokens, "modalities",
                          "vision", 0, "audio", 0);
    return http_send_json(cs, c, 200, o);
}


static bool flag(struct MHD_Connection *c, const char *key) {
    const char *v = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, key);
    return v && strcmp(v, "0") && strcmp(v, "false");
}


/* The job of a view is done (on the inference thread, or wherever the scheduler stopped). */
void http_view_done(srv_job *job, bool ran) {
    conn *cs = (conn *)((char *)job - offsetof(conn, job));
    (void)ran; /* not run: view.out stays NULL, a 500 */
    atomic_store(&cs->job_done, true);
    srv_link_wake(cs->link);
}

/* The view's body once its job is done; until then the connection is suspended. */
static enum MHD_Result view_built(conn *cs, struct MHD_Connection *c, srv_state *S) {
    (void)S;
    cs->cont = NULL;
    while (!atomic_load(&cs->job_done))
        if (srv_link_suspend(cs->link, false)) { /* a step at most: not worth cancelling */
            cs->cont = view_built;
            return MHD_YES;
        }
    const bool metrics = cs->job.fn == srv_metrics_view;
    char *out = cs->view.out; /* the response owns it from here */
    cs->view.out = NULL;
    return http_send_body(cs, c, 200, metrics ? "text/plain; version=0.0.4" : "application/json", out);
}

/* A view built on the inference thread, the only one that may read the context. */
static enum MHD_Result view(conn *cs, struct MHD_Connection *c, srv_state *S, void (*fn)(tkv_context *, void *)) {
    cs->job = (srv_job){.fn = fn, .done = http_view_done, .user = &cs->view, .view = true};
    cs->view.S = S;
    cs->view.out = NULL;
    atomic_store(&cs->job_done, false);
    srv_sched_post(S->sched, &cs->job);
    return view_built(cs, c, S);
}

/* GET /v1/cache: the namespace of ?cache_salt= (the default one without), or every one with the admin key. */
static enum MHD_Result cache_view(conn *cs, struct MHD_Connection *c, srv_state *S, const char *rest) {
    (void)rest;
    const char *salt = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "cache_salt");
    const bool admin = http_bearer_is(c, S->o->admin_key);
    /* with keys, the token ids (the namespace's prompts) and the full check (every cell, on the inference
       thread) are the admin's: any key holder polling them could read others' prompts or stall decoding */
    static const char *const admin_only[] = {"tokens", "check"};
    for (size_t i = 0; S->o->api_key && !admin && i < sizeof admin_only / sizeof *admin_only; i++)
        if (flag(c, admin_only[i])) {
            char msg[96];
            snprintf(msg, sizeof msg, "'%s=1' needs the admin key (--admin-key)", admin_only[i]);
            return http_fail(cs, c, 403, admin_only[i], "admin_only", msg);
        }
    cs->view = (srv_view){.ns = salt && *salt ? srv_api_namespace(&S->api, salt, strlen(salt)) : 0,
                          .detail = flag(c, "detail"), .ids = flag(c, "tokens"), .check = flag(c, "check"),
                          .all = admin};
    return view(cs, c, S, srv_cache_view);
}

/* ---- the route table -------------------------------------------------------------- */

/* The web page's files (server/web/, in the binary; / is index.html); http.c drops these routes with --no-webui. */
static enum MHD_Result web_page(conn *cs, struct MHD_Connection *c, srv_state *S, const char *rest) {
    (void)S, (void)rest;
    const char *url = !strcmp(cs->path, "/") ? "/index.html" : cs->path;
    const srv_web_file *f = NULL;
    for (size_t i = 0; i < srv_web_n_files; i++)
        if (!strcmp(srv_web_files[i].path, url)) f = &srv_web_files[i];
    if (!f) {
        srv_err e;
        srv_err_set(&e, 404, NULL, "not_found", "no route for %s %s", cs->method, cs->path);
        return http_send_err(cs, c, &e);
    }
    struct MHD_Response *r = MHD_create_response_from_buffer(f->size, (void *)f->data, MHD_RESPMEM_PERSISTENT);
    if (!r) return MHD_NO;
    MHD_add_response_header(r, "Content-Type", f->content_type);
    /* the page loads nothing from elsewhere; a policy that says so keeps an injected script from doing it */
    MHD_add_response_header(r, "Content-Security-Policy",
                            "default-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; "
                            "frame-ancestors 'none'");
    MHD_add_response_header(r, "X-Content-Type-Options", "nosniff");
    MHD_add_response_header(r, "Cache-Control", "no-cache");
    if (cs->close) MHD_add_response_header(r, "Connection", "close");
    if (cs->replica) MHD_add_response_header(r, "X-Tokenkv-Replica", cs->replica);
    cs->status = 200;
    enum MHD_Result ret = MHD_queue_response(c, 200, r);
    MHD_destroy_response(r);
    return ret;
}

static enum MHD_Result health(conn *cs, struct MHD_Connection *c, srv_state *S, const char *rest) {
    (void)S, (void)rest;
    return http_send_json(cs, c, 200, json_pack("{s:s}", "status", "ok"));
}
static enum MHD_Result metrics(conn *cs, struct MHD_Connection *c, srv_state *S, const char *rest) {
    (void)rest;
    return view(cs, c, S, srv_metrics_view);
}
/* GET /slots: the requests of ?cache_salt='s namespace (the default one without), or of every one with the
   admin key; another namespace's slot shows only that it is busy. */
static enum MHD_Result slots(conn *cs, struct MHD_Connection *c, srv_state *S, const char *rest) {
    (void)rest;
    if (S->o->no_slots) /* llama-server's answer with --no-slots */
        return http_fail(cs, c, 501, NULL, "not_supported", "the /slots endpoint is disabled (--no-slots)");
    const char *salt = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "cache_salt");
    cs->view = (srv_view){.ns = salt && *salt ? srv_api_namespace(&S->api, salt, strlen(salt)) : 0,
                          .all = http_bearer_is(c, S->o->admin_key)};
    return view(cs, c, S, srv_slots_view);
}
static enum MHD_Result model_list(conn *cs, struct MHD_Connection *c, srv_state *S, const char *rest) {
    (void)rest;
    return models(cs, c, S, NULL);
}
static enum MHD_Result model_one(conn *cs, struct MHD_Connection *c, srv_state *S, const char *id) {
    return models(cs, c, S, id);
}
static enum MHD_Result completions(conn *cs, struct MHD_Connection *c, srv_state *S, const char *rest) {
    (void)rest;
    return generate(cs, c, S, GEN_COMPLETIONS);
}
static enum MHD_Result chat(conn *cs, struct MHD_Connection *c, srv_state *S, const char *rest) {
    (void)rest;
    return generate(cs, c, S, GEN_CHAT);
}
static enum MHD_Result native(conn *cs, struct MHD_Connection *c, srv_state *S, const char *rest) {
    (void)rest;
    return generate(cs, c, S, GEN_NATIVE);
}
static enum MHD_Result responses(conn *cs, struct MHD_Connection *c, srv_state *S, const char *rest) {
    (void)rest;
    return generate(cs, c, S, GEN_RESPONSES);
}
static enum MHD_Result messages(conn *cs, struct MHD_Connection *c, srv_state *S, const char *rest) {
    (void)rest;
    return generate(cs, c, S, GEN_ANTHROPIC);
}
/* POST /v1/messages/count_tokens: the prompt's tokens, nothing generated. */
static enum MHD_Result count_tokens(conn *cs, struct MHD_Connection *c, srv_state *S, const char *rest) {
    (void)rest;
    srv_err e;
    json_t *body = parse_body(cs, &e), *o = body ? srv_anthropic_count_tokens(&S->api, body, &e) : NULL;
    json_decref(body);
    return o ? http_send_json(cs, c, 200, o) : send_err(cs, c, &e, true);
}

/* Every route (routes.h); the paths without /v1 are llama-server's aliases (POST /completions, as there, is its
   native /completion) and the openai client's. */
const srv_route srv_routes[] = {
    {"GET", "/health", SRV_AUTH_OPEN, health},
    {"GET", "/metrics", SRV_AUTH_METRICS, metrics},
    {"GET", "/v1/models", SRV_AUTH_KEY, model_list},
    {"GET", "/v1/models/*", SRV_AUTH_KEY, model_one},
    {"GET", "/models", SRV_AUTH_KEY, model_list},
    {"GET", "/props", SRV_AUTH_KEY, props},
    {"GET", "/v1/cache", SRV_AUTH_KEY, cache_view},
    {"GET", "/slots", SRV_AUTH_KEY, slots},
    {"POST", "/v1/completions", SRV_AUTH_KEY, completions},
    {"POST", "/completions", SRV_AUTH_KEY, native}, /* llama-server's alias of its native /completion */
    {"POST", "/v1/chat/completions", SRV_AUTH_KEY, chat},
    {"POST", "/chat/completions", SRV_AUTH_KEY, chat},
    {"POST", "/completion", SRV_AUTH_KEY, native},
    {"POST", "/tokenize", SRV_AUTH_KEY, tokenize},
    {"POST", "/detokenize", SRV_AUTH_KEY, detokenize},
    {"POST", "/apply-template", SRV_AUTH_KEY, apply_template},
    {"POST", "/v1/responses", SRV_AUTH_KEY, responses},
    {"POST", "/v1/messages", SRV_AUTH_KEY, messages}, /* Anthropic's */
    {"POST", "/v1/messages/count_tokens", SRV_AUTH_KEY, count_tokens},
    /* the web page: one route per file of server/web/ (test_routes checks the two lists agree) */
    {"GET", "/", SRV_AUTH_WEB, web_page},
    {"GET", "/index.html", SRV_AUTH_WEB, web_page},
    {"GET", "/app.js", SRV_AUTH_WEB, web_page},
    {"GET", "/style.css", SRV_AUTH_WEB, web_page},
};
const size_t srv_n_routes = sizeof srv_routes / sizeof srv_routes[0];
