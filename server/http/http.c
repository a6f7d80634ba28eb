/*
 * http.c — routing, bodies, authentication and streaming over
 * libmicrohttpd's event loop.
 *
 * Nothing here blocks an HTTP thread (a few serve thousands of
 * connections): a request that waits for the scheduler, for the next
 * streamed text or for a view of the cache suspends its connection
 * (conn.h) and sets cs->cont, the step to go on with when the connection
 * is resumed; the scheduler's thread wakes it at each change. A client
 * that leaves while it waits is noticed by conn.c's watchdog, and its
 * request is cancelled, so its generation stops within a step or so.
 */
#include "http.h"
#include "openai/native_completion.h"
#include "openai/parse.h"
#include "openai/responses.h"
#include "openai/tool_fields.h"
#include "openai/reasoning.h"
#include "web/web.h"

#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

typedef struct conn conn;
struct conn {
    char method[16], path[96];
    char *body;
    size_t n, cap;
    bool too_big, oom;
    bool close;    /* the request's framing is broken: answer, then close the connection */
    srv_err *reject; /* decided from the headers (key, type, size): the body is read and dropped, then this */
    const char *cors;  /* the Access-Control-Allow-Origin of the response (--cors-origin), or NULL */
    const char *replica; /* X-Tokenkv-Replica of every response (--replica-id), or NULL */
    int status;    /* of the response, for the log and the metrics */
    srv_req *reqs[SRV_MAX_CHOICES]; /* a generation in flight: a request per choice (n), or none */
    size_t n_reqs;
    double t0;
    srv_link *link;
    /* suspended: the step to go on with once resumed */
    enum MHD_Result (*cont)(struct conn *cs, struct MHD_Connection *c, srv_state *S);
    srv_job job; /* a view built on the inference thread */
    srv_view view;
    atomic_bool job_done;
};

/* CORS: a page of the allowed origin may read the response. And which replica answered (behind a balancer). */
static void add_cors(const conn *cs, struct MHD_Response *r) {
    if (cs->replica) MHD_add_response_header(r, "X-Tokenkv-Replica", cs->replica);
    if (!cs->cors) return;
    MHD_add_response_header(r, "Access-Control-Allow-Origin", cs->cors);
    MHD_add_response_header(r, "Vary", "Origin");
}

static const char oom_body[] =
    "{\"error\":{\"message\":\"out of memory\",\"type\":\"server_error\",\"param\":null,\"code\":null}}";

static enum MHD_Result send_body(conn *cs, struct MHD_Connection *c, int status, const char *ctype, char *body) {
    struct MHD_Response *r;
    if (body) {
        r = MHD_create_response_from_buffer(strlen(body), body, MHD_RESPMEM_MUST_FREE);
    } else {
        status = 500;
        ctype = "application/json";
        r = MHD_create_response_from_buffer(sizeof oom_body - 1, (void *)oom_body, MHD_RESPMEM_PERSISTENT);
    }
    if (!r) {
        free(body);
        return MHD_NO;
    }
    MHD_add_response_header(r, "Content-Type", ctype);
    if (cs->close) MHD_add_response_header(r, "Connection", "close");
    add_cors(cs, r);
    cs->status = status;
    enum MHD_Result ret = MHD_queue_response(c, (unsigned)status, r);
    MHD_destroy_response(r);
    return ret;
}

static enum MHD_Result send_json(conn *cs, struct MHD_Connection *c, int status, json_t *o) {
    char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    return send_body(cs, c, status, "application/json", s);
}

static enum MHD_Result send_err(conn *cs, struct MHD_Connection *c, const srv_err *e) {
    return send_body(cs, c, e->status, "application/json", srv_err_json(e));
}

static enum MHD_Result fail(conn *cs, struct MHD_Connection *c, int status, const char *param, const char *code,
                            const char *msg) {
    srv_err e;
    srv_err_set(&e, status, param, code, "%s", msg);
    return send_err(cs, c, &e);
}

/* A failed request's error as the client sees it: the scheduler says why
   (request.h), the HTTP edge picks the status and the OpenAI code. */
static void failed_err(srv_err *e, srv_req *r) {
    static const struct {
        int status;
        const char *code;
    } map[] = {[SRV_FAIL_NONE] = {500, "internal_error"},      [SRV_FAIL_CANCELLED] = {499, "cancelled"},
               [SRV_FAIL_INVALID] = {400, "invalid_value"},    [SRV_FAIL_CACHE_FULL] = {503, "cache_full"},
               [SRV_FAIL_INTERNAL] = {500, "internal_error"}, [SRV_FAIL_STOPPING] = {503, "shutting_down"}};
    srv_err_set(e, map[r->failed].status, NULL, map[r->failed].code, "%s", r->err_msg);
}

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
        any |= r->done || (r->stream && r->t_first);
        pthread_mutex_unlock(&r->mu);
    }
    return all || (reqs[0]->stream && any);
}

/* ---- streaming ----------------------------------------------------------------- */

/* What a stream sent of one choice. */
typedef struct choice_sent {
    size_t sent;       /* text bytes looked at */
    bool first;        /* nothing sent yet (the chat role goes with the first delta) */
    bool finished;     /* its final chunk is queued */
    size_t sent_r, sent_c; /* bytes of the reasoning (r->think) and of the content sent */
    size_t sent_calls; /* tool calls sent (r->tools) */
    size_t sent_lp;    /* logprobs: entries sent */
} choice_sent;

typedef struct stream {
    srv_state *S;
    srv_req *reqs[SRV_MAX_CHOICES]; /* the choices, a reference each */
    size_t n;
    choice_sent ch[SRV_MAX_CHOICES];
    srv_link *link;
    bool finished; /* the last events are queued */
    char *pend;    /* events not yet handed to MHD */
    size_t pend_n, pend_off, pend_cap;
} stream;

static void pend(stream *st, char *ev) {
    if (!ev) return; /* out of memory: this event is lost, the stream goes on */
    size_t n = strlen(ev);
    if (st->pend_n + n > st->pend_cap) {
        size_t cap = st->pend_cap ? st->pend_cap * 2 : 4096;
        while (cap < st->pend_n + n) cap *= 2;
        char *t = realloc(st->pend, cap);
        if (!t) {
            free(ev);
            return;
        }
        st->pend = t, st->pend_cap = cap;
    }
    memcpy(st->pend + st->pend_n, ev, n);
    st->pend_n += n;
    free(ev);
}

static char *strdup_or_null(const char *s) { return s ? strdup(s) : NULL; }

/* Content of choice c: what is new in text[0, upto) beyond what was sent. */
static void send_content(stream *st, srv_req *r, choice_sent *c, const char *text, size_t upto) {
    if (upto <= c->sent_c) return;
    pend(st, srv_api_chunk(&st->S->api, r, SRV_CHUNK_DELTA, text + c->sent_c, upto - c->sent_c, c->first, &c->sent_lp));
    c->sent_c = upto, c->first = false;
}

/*
 * The content of a chat answer with tools, text[0, n): what the call parser
 * has settled (tool_calls.h: it only grows), then the calls it has completed, each
 * as two deltas (name, then arguments); at the end the content that came
 * after the calls. A stream thus reassembles into the non-streamed message.
 */
static void tool_events(stream *st, srv_req *r, choice_sent *c, const char *text, size_t n) {
    srv_tool_parse tp;
    if (!srv_tools_parse((srv_tool_format)r->tool_format, text, n, r->done, &tp)) return; /* out of memory: later */
    send_content(st, r, c, text, tp.content_end);
    for (size_t k = c->sent_calls; k < tp.n_calls; k++) {
        pend(st, srv_api_tool_chunk(&st->S->api, r, k, &tp.calls[k], true, c->first));
        pend(st, srv_api_tool_chunk(&st->S->api, r, k, &tp.calls[k], false, false));
        c->first = false;
    }
    c->sent_calls = tp.n_calls;
    if (r->done && tp.rest < n) {
        pend(st, srv_api_chunk(&st->S->api, r, SRV_CHUNK_DELTA, text + tp.rest, n - tp.rest, c->first, &c->sent_lp));
        c->first = false;
    }
    srv_tool_parse_free(&tp);
}

/* The next events of choice i into st->pend; false when it has nothing new. */
static bool choice_events(stream *st, size_t i) {
    srv_req *r = st->reqs[i];
    choice_sent *c = &st->ch[i];
    const srv_api *a = &st->S->api;
    if (c->finished) return false;
    pthread_mutex_lock(&r->mu);
    if (!r->done && r->text_ready <= c->sent) {
        pthread_mutex_unlock(&r->mu);
        return false;
    }
    if (c->first && r->echo_len) { /* legacy echo: the prompt's text comes first */
        pend(st, srv_api_chunk(a, r, SRV_CHUNK_DELTA, r->echo, r->echo_len, true, NULL));
        c->first = false;
    }
    if (r->text_ready > c->sent || r->done) {
        /* the reasoning and the answer each as far as they are settled */
        srv_think_split sp = {0, 0, 0, r->text_ready};
        if (r->think) sp = srv_think_split_text(r->text, r->text_ready, r->think_open, r->done);
        if (sp.r1 - sp.r0 > c->sent_r) {
            pend(st, srv_api_chunk(a, r, SRV_CHUNK_REASONING, r->text + sp.r0 + c->sent_r, sp.r1 - sp.r0 - c->sent_r,
                                   c->first, &c->sent_lp));
            c->sent_r = sp.r1 - sp.r0, c->first = false;
        }
        if (r->tools) tool_events(st, r, c, r->text + sp.c0, sp.c1 - sp.c0);
        else send_content(st, r, c, r->text + sp.c0, sp.c1 - sp.c0);
        c->sent = r->text_ready;
    }
    if (r->done) {
        if (!r->failed) {
            if (c->first && r->chat) pend(st, srv_api_chunk(a, r, SRV_CHUNK_DELTA, "", 0, true, &c->sent_lp));
            pend(st, srv_api_chunk(a, r, SRV_CHUNK_FINISH, NULL, c->sent_calls, false, &c->sent_lp));
        }
        c->finished = true;
    }
    pthread_mutex_unlock(&r->mu);
    return true;
}

/* llama-server's native stream: one choice, its own events, no [DONE]. */
static bool native_events(stream *st) {
    srv_req *r = st->reqs[0];
    choice_sent *c = &st->ch[0];
    const srv_api *a = &st->S->api;
    pthread_mutex_lock(&r->mu);
    if (!r->done && r->text_ready <= c->sent) {
        pthread_mutex_unlock(&r->mu);
        return false;
    }
    if (r->text_ready > c->sent) pend(st, srv_api_native_event(a, r, r->text + c->sent, r->text_ready - c->sent, false));
    c->sent = r->text_ready;
    if (r->done) {
        if (r->failed) {
            srv_err e;
            failed_err(&e, r);
            char *body = srv_err_json(&e), *ev = body ? malloc(strlen(body) + 9) : NULL;
            if (ev) sprintf(ev, "data: %s\n\n", body);
            free(body);
            pend(st, ev);
            pend(st, strdup_or_null("data: [DONE]\n\n"));
        } else {
            pend(st, srv_api_native_event(a, r, NULL, 0, true));
        }
        st->finished = true;
    }
    pthread_mutex_unlock(&r->mu);
    return true;
}

/* The next events of the stream into st->pend; false when there is nothing new yet. */
static bool next_events(stream *st) {
    if (st->reqs[0]->native) return native_events(st);
    bool any = false, all = true;
    for (size_t i = 0; i < st->n; i++) any |= choice_events(st, i), all &= st->ch[i].finished;
    if (!all) return any;
    /* every choice is done: an error (the first), or the usage; then the end */
    srv_req *failed = NULL;
    for (size_t i = 0; i < st->n && !failed; i++)
        if (st->reqs[i]->failed) failed = st->reqs[i];
    if (failed) {
        srv_err e;
        pthread_mutex_lock(&failed->mu);
        failed_err(&e, failed);
        pthread_mutex_unlock(&failed->mu);
        char *body = srv_err_json(&e), *ev = body ? malloc(strlen(body) + 9) : NULL;
        if (ev) sprintf(ev, "data: %s\n\n", body);
        free(body);
        pend(st, ev);
    } else if (st->reqs[0]->include_usage) {
        pend(st, srv_api_usage_chunk(&st->S->api, st->reqs, st->n));
    }
    pend(st, strdup_or_null("data: [DONE]\n\n"));
    st->finished = true;
    return true;
}

static void cancel_all(srv_req *const *reqs, size_t n) {
    for (size_t i = 0; i < n; i++) srv_req_cancel(reqs[i]);
}

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max) {
    (void)pos;
    stream *st = cls;
    while (st->pend_off == st->pend_n) {
        st->pend_off = st->pend_n = 0;
        if (st->finished) return MHD_CONTENT_READER_END_OF_STREAM;
        if (srv_link_gone(st->link)) { /* the client left while we waited */
            cancel_all(st->reqs, st->n);
            return MHD_CONTENT_READER_END_WITH_ERROR;
        }
        /* nothing new: MHD calls again once the scheduler wakes us */
        if (!next_events(st) && srv_link_suspend(st->link, true)) return 0;
    }
    size_t k = st->pend_n - st->pend_off < max ? st->pend_n - st->pend_off : max;
    memcpy(buf, st->pend + st->pend_off, k);
    st->pend_off += k;
    return (ssize_t)k;
}

static void stream_free(void *cls) {
    stream *st = cls;
    if (!st->finished) cancel_all(st->reqs, st->n);
    for (size_t i = 0; i < st->n; i++) srv_req_unref(st->reqs[i]);
    free(st->pend);
    free(st);
}

static enum MHD_Result send_stream(conn *cs, struct MHD_Connection *c, srv_state *S) {
    stream *st = calloc(1, sizeof *st);
    if (!st) return send_body(cs, c, 500, NULL, NULL);
    st->S = S, st->link = cs->link, st->n = cs->n_reqs;
    for (size_t i = 0; i < cs->n_reqs; i++) {
        st->reqs[i] = cs->reqs[i];
        st->ch[i].first = true;
        srv_req_ref(cs->reqs[i]);
    }
    struct MHD_Response *resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, stream_read, st, stream_free);
    if (!resp) {
        stream_free(st);
        return MHD_NO;
    }
    MHD_add_response_header(resp, "Content-Type", "text/event-stream");
    MHD_add_response_header(resp, "Cache-Control", "no-cache");
    add_cors(cs, resp);
    cs->status = 200;
    enum MHD_Result ret = MHD_queue_response(c, 200, resp);
    MHD_destroy_response(resp);
    return ret;
}

/* ---- routes -------------------------------------------------------------------- */

static json_t *parse_body(conn *cs, srv_err *e) {
    json_error_t je;
    json_t *body = json_loadb(cs->body ? cs->body : "", cs->n, 0, &je);
    if (!body)
        srv_err_set(e, 400, NULL, "invalid_json", "invalid JSON in the request body: %s (line %d, column %d)", je.text,
                    je.line, je.column);
    return body;
}

/* What a generation route speaks: OpenAI's completions or chat, or llama-server's native /completion. */
typedef enum { GEN_COMPLETIONS, GEN_CHAT, GEN_NATIVE } gen_kind;

/* The answer of a submitted request (or, for a stream, its start) once the
   scheduler has it; until then the connection is suspended. */
static enum MHD_Result generated(conn *cs, struct MHD_Connection *c, srv_state *S) {
    srv_req *r = cs->reqs[0];
    cs->cont = NULL;
    while (!gen_ready(cs->reqs, cs->n_reqs)) {
        if (srv_link_gone(cs->link)) {
            cancel_all(cs->reqs, cs->n_reqs);
            cs->status = 499; /* client closed the request */
            return MHD_NO;
        }
        if (srv_link_suspend(cs->link, true)) {
            cs->cont = generated;
            return MHD_YES;
        }
    }
    if (r->stream) return send_stream(cs, c, S);
    for (size_t i = 0; i < cs->n_reqs; i++)
        if (cs->reqs[i]->failed) { /* done: the error fields are final */
            srv_err e;
            failed_err(&e, cs->reqs[i]);
            return send_err(cs, c, &e);
        }
    return send_body(cs, c, 200, "application/json",
                     r->native ? srv_api_native_response(&S->api, r) : srv_api_response(&S->api, cs->reqs, cs->n_reqs));
}

/* Drop the requests a generation made (before any was submitted, or after a failed submission). */
static void drop_reqs(conn *cs) {
    cancel_all(cs->reqs, cs->n_reqs);
    for (size_t i = 0; i < cs->n_reqs; i++) srv_req_detach(cs->reqs[i]), srv_req_unref(cs->reqs[i]);
    cs->n_reqs = 0;
}

static enum MHD_Result generate(conn *cs, struct MHD_Connection *c, srv_state *S, gen_kind kind) {
    srv_err e;
    json_t *body = parse_body(cs, &e);
    if (!body) return send_err(cs, c, &e);
    /* one request per choice (n), each parsed from the body with its own sampler and grammar; they share the
       prompt, which the cache computes once */
    size_t n = 1;
    bool ok = true;
    for (size_t i = 0; ok && i < n; i++) {
        srv_req *r = srv_req_new();
        if (!r) {
            srv_err_set(&e, 500, NULL, NULL, "out of memory");
            ok = false;
            break;
        }
        cs->reqs[cs->n_reqs++] = r;
        ok = kind == GEN_NATIVE ? srv_api_parse_native(&S->api, body, r, &e)
                                : srv_api_parse(&S->api, body, kind == GEN_CHAT, r, &e);
        if (ok && i == 0) n = r->n_choices;
        if (ok && i > 0) srv_api_choice(cs->reqs[0], r, i);
    }
    json_decref(body);
    if (!ok) {
        drop_reqs(cs);
        return send_err(cs, c, &e);
    }
    for (size_t i = 0; i < cs->n_reqs; i++) {
        srv_req *r = cs->reqs[i];
        r->wake = wake_link, r->wake_arg = cs->link;
        const srv_submit rc = srv_sched_submit(S->sched, r);
        if (rc != SRV_SUBMIT_OK) {
            drop_reqs(cs);
            return rc == SRV_SUBMIT_QUEUE_FULL ? fail(cs, c, 429, NULL, "queue_full",
                                    "the server is busy: its queue of waiting requests is full (--max-queue); retry "
                                    "later")
                             : fail(cs, c, 503, NULL, "shutting_down", "the server is shutting down");
        }
    }
    return generated(cs, c, S);
}

/* POST /apply-template (llama-server's): the prompt a chat request's body renders to, not generated from. */
static enum MHD_Result apply_template(conn *cs, struct MHD_Connection *c, srv_state *S) {
    srv_err e;
    json_t *body = parse_body(cs, &e);
    if (!body) return send_err(cs, c, &e);
    size_t len = 0;
    char *text = srv_api_chat_prompt(&S->api, body, &len, &e);
    json_decref(body);
    if (!text) return send_err(cs, c, &e);
    json_t *prompt = srv_json_text(text, len);
    free(text);
    return send_json(cs, c, 200, json_pack("{s:o}", "prompt", prompt));
}

static enum MHD_Result tokenize(conn *cs, struct MHD_Connection *c, srv_state *S) {
    srv_err e;
    json_t *body = parse_body(cs, &e);
    if (!body) return send_err(cs, c, &e);
    const json_t *content = json_object_get(body, "content");
    bool add_special = true, parse_special = true;
    const json_t *as = json_object_get(body, "add_special"), *ps = json_object_get(body, "parse_special");
    if (!json_is_string(content)) {
        json_decref(body);
        return fail(cs, c, 400, "content", "invalid_type", "'content' must be a string");
    }
    if ((as && !json_is_boolean(as)) || (ps && !json_is_boolean(ps))) {
        json_decref(body);
        return fail(cs, c, 400, as && !json_is_boolean(as) ? "add_special" : "parse_special", "invalid_type",
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
        return send_err(cs, c, &e);
    }
    json_t *arr = json_array();
    for (size_t i = 0; i < n; i++) json_array_append_new(arr, json_integer(t[i]));
    free(t);
    return send_json(cs, c, 200, json_pack("{s:o}", "tokens", arr));
}

static enum MHD_Result detokenize(conn *cs, struct MHD_Connection *c, srv_state *S) {
    srv_err e;
    json_t *body = parse_body(cs, &e);
    if (!body) return send_err(cs, c, &e);
    const json_t *arr = json_object_get(body, "tokens");
    if (!json_is_array(arr)) {
        json_decref(body);
        return fail(cs, c, 400, "tokens", "invalid_type", "'tokens' must be an array of token ids");
    }
    const size_t n = json_array_size(arr), n_vocab = tkv_vocab_size(S->model);
    tkv_token *t = malloc((n ? n : 1) * sizeof *t);
    for (size_t i = 0; t && i < n; i++) {
        const json_t *v = json_array_get(arr, i);
        if (!json_is_integer(v) || json_integer_value(v) < 0 || (unsigned long long)json_integer_value(v) >= n_vocab) {
            srv_err_set(&e, 400, "tokens", "invalid_value", "tokens[%zu] is not a token id in [0, %zu)", i, n_vocab);
            free(t);
            json_decref(body);
            return send_err(cs, c, &e);
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
    return send_json(cs, c, 200, o);
}

static enum MHD_Result models(conn *cs, struct MHD_Connection *c, srv_state *S, const char *id) {
    json_t *m = json_pack("{s:s,s:s,s:I,s:s}", "id", S->api.model_id, "object", "model", "created",
                          (json_int_t)S->started, "owned_by", "tokenkv");
    if (!id) return send_json(cs, c, 200, json_pack("{s:s,s:[o]}", "object", "list", "data", m));
    if (strcmp(id, S->api.model_id)) {
        json_decref(m);
        srv_err e;
        srv_err_set(&e, 404, "model", "model_not_found", "the model '%s' does not exist; this server runs '%s'", id,
                    S->api.model_id);
        return send_err(cs, c, &e);
    }
    return send_json(cs, c, 200, m);
}

/* GET /props (llama-server's): what a client needs to know to talk to this server. */
static enum MHD_Result props(conn *cs, struct MHD_Connection *c, srv_state *S) {
    const char *tmpl = NULL;
    size_t len = 0;
    json_t *chat;
    if (S->api.jinja && tkv_model_meta_str(S->model, "tokenizer.chat_template", &tmpl, &len) == TKV_OK)
        chat = srv_json_text(tmpl, len);
    else
        chat = json_string(S->api.jinja ? S->o->chat_template : srv_chat_name(S->api.chat));
    char build[64];
    snprintf(build, sizeof build, "tokenkv %d.%d.%d", TKV_VERSION_MAJOR, TKV_VERSION_MINOR, TKV_VERSION_PATCH);
    json_t *o = json_pack("{s:s,s:s,s:I,s:i,s:o,s:s,s:{s:I,s:{s:i}},s:{s:b,s:b}}", "model_alias", S->api.model_id,
                          "model_path", S->o->model_path, "n_ctx", (json_int_t)S->api.n_ctx, "total_slots",
                          S->o->parallel, "chat_template", chat, "build_info", build, "default_generation_settings",
                          "n_ctx", (json_int_t)S->api.n_ctx, "params", "n_predict", S->api.max_tokens, "modalities",
                          "vision", 0, "audio", 0);
    return send_json(cs, c, 200, o);
}

static bool flag(struct MHD_Connection *c, const char *key) {
    const char *v = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, key);
    return v && strcmp(v, "0") && strcmp(v, "false");
}

/* Whether the request's bearer token is key; every byte compared, so the time taken does not tell how much
   matched. */
static bool bearer_is(struct MHD_Connection *c, const char *key) {
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
    if (!key || !h || strncmp(h, "Bearer ", 7)) return false;
    const char *got = h + 7;
    size_t lg = strlen(got), lw = strlen(key);
    unsigned diff = (unsigned)(lg ^ lw);
    for (size_t i = 0; i < lw; i++) diff |= (unsigned char)key[i] ^ (unsigned char)(i < lg ? got[i] : 0);
    return diff == 0;
}

/* The API key, or the admin key, which may do all the API key may. */
static bool authorized(srv_state *S, struct MHD_Connection *c) {
    return !S->o->api_key || bearer_is(c, S->o->api_key) || bearer_is(c, S->o->admin_key);
}

/* The web page's file at url (/ is index.html), or NULL (also with --no-webui). */
static const srv_web_file *web_file(const srv_state *S, const char *url) {
    if (S->o->no_webui) return NULL;
    if (!strcmp(url, "/")) url = "/index.html";
    for (size_t i = 0; i < srv_web_n_files; i++)
        if (!strcmp(srv_web_files[i].path, url)) return &srv_web_files[i];
    return NULL;
}

static bool is_get(const char *method) { return !strcmp(method, "GET") || !strcmp(method, "HEAD"); }

/* Routes open without a key: the health probe, /metrics with --metrics-public, and the web page's files (the
   page holds no data; it asks for the key itself and sends it with every API call). */
static bool open_route(const srv_state *S, const char *url, const char *method) {
    return !strcmp(url, "/health") || (!strcmp(url, "/metrics") && S->o->metrics_public) ||
           (is_get(method) && web_file(S, url));
}

static enum MHD_Result send_web_file(conn *cs, struct MHD_Connection *c, const srv_web_file *f) {
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

/* The job of a view is done (on the inference thread, or wherever the scheduler stopped). */
static void view_done(srv_job *job, bool ran) {
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
    return send_body(cs, c, 200, metrics ? "text/plain; version=0.0.4" : "application/json", out);
}

/* A view built on the inference thread, the only one that may read the context. */
static enum MHD_Result view(conn *cs, struct MHD_Connection *c, srv_state *S, void (*fn)(tkv_context *, void *)) {
    cs->job = (srv_job){.fn = fn, .done = view_done, .user = &cs->view};
    cs->view.S = S;
    cs->view.out = NULL;
    atomic_store(&cs->job_done, false);
    srv_sched_post(S->sched, &cs->job);
    return view_built(cs, c, S);
}

/* GET /v1/cache: the namespace of ?cache_salt= (the default one without), or every one with the admin key. */
static enum MHD_Result cache_view(conn *cs, struct MHD_Connection *c, srv_state *S) {
    const char *salt = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "cache_salt");
    cs->view = (srv_view){.ns = salt && *salt ? srv_api_namespace(&S->api, salt, strlen(salt)) : 0,
                          .detail = flag(c, "detail"), .ids = flag(c, "tokens"), .check = flag(c, "check"),
                          .all = bearer_is(c, S->o->admin_key)};
    return view(cs, c, S, srv_cache_view);
}

static enum MHD_Result route(conn *cs, struct MHD_Connection *c, srv_state *S, const char *url, const char *method) {
    /* HEAD is GET without the body (libmicrohttpd leaves it out) */
    const bool get = is_get(method), post = !strcmp(method, "POST");
    static const struct {
        const char *path;
        bool post;
    } known[] = {{"/health", false},           {"/metrics", false},   {"/v1/models", false}, {"/props", false},
                 {"/v1/cache", false},         {"/v1/completions", true}, {"/completions", true},
                 {"/v1/chat/completions", true}, {"/chat/completions", true}, {"/tokenize", true},
                 {"/detokenize", true}, {"/apply-template", true}, {"/completion", true}, {"/slots", false}};
    if (!strcmp(url, "/health") && get) return send_json(cs, c, 200, json_pack("{s:s}", "status", "ok"));
    const srv_web_file *page = get ? web_file(S, url) : NULL;
    if (page) return send_web_file(cs, c, page);
    if (!open_route(S, url, method) && !authorized(S, c))
        return fail(cs, c, 401, NULL, "invalid_api_key", "invalid or missing API key (send 'Authorization: Bearer KEY')");
    if (cs->oom) return send_body(cs, c, 500, NULL, NULL);
    if (cs->too_big) {
        srv_err e;
        srv_err_set(&e, 413, NULL, "request_too_large", "the request body exceeds this server's limit of %zu bytes (--max-body)",
                    S->o->max_body);
        return send_err(cs, c, &e);
    }
    if (get && !strcmp(url, "/metrics")) return view(cs, c, S, srv_metrics_view);
    if (get && !strcmp(url, "/v1/models")) return models(cs, c, S, NULL);
    if (get && !strcmp(url, "/props")) return props(cs, c, S);
    if (get && !strncmp(url, "/v1/models/", 11)) return models(cs, c, S, url + 11);
    if (get && !strcmp(url, "/v1/cache")) return cache_view(cs, c, S);
    if (get && !strcmp(url, "/slots")) return view(cs, c, S, srv_slots_view);
    if (post && (!strcmp(url, "/v1/completions") || !strcmp(url, "/completions")))
        return generate(cs, c, S, GEN_COMPLETIONS);
    if (post && (!strcmp(url, "/v1/chat/completions") || !strcmp(url, "/chat/completions")))
        return generate(cs, c, S, GEN_CHAT);
    if (post && !strcmp(url, "/completion")) return generate(cs, c, S, GEN_NATIVE);
    if (post && !strcmp(url, "/tokenize")) return tokenize(cs, c, S);
    if (post && !strcmp(url, "/apply-template")) return apply_template(cs, c, S);
    if (post && !strcmp(url, "/detokenize")) return detokenize(cs, c, S);
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
        if (!strcmp(url, known[i].path)) {
            srv_err e;
            srv_err_set(&e, 405, NULL, "method_not_allowed", "%s is not allowed on %s; use %s", method, url,
                        known[i].post ? "POST" : "GET");
            return send_err(cs, c, &e);
        }
    srv_err e;
    srv_err_set(&e, 404, NULL, "not_found", "no route for %s %s", method, url);
    return send_err(cs, c, &e);
}

/* The framing headers of a request (RFC 9112 section 6). */
typedef struct framing {
    int n_length, n_coding;
    bool lengths_differ;
    char length[32];
    const char *coding;
} framing;

static enum MHD_Result framing_header(void *cls, enum MHD_ValueKind kind, const char *key, const char *value) {
    (void)kind;
    framing *f = cls;
    if (!strcasecmp(key, "Content-Length")) {
        if (f->n_length++ && strcmp(f->length, value)) f->lengths_differ = true;
        snprintf(f->length, sizeof f->length, "%s", value);
    } else if (!strcasecmp(key, "Transfer-Encoding")) {
        f->n_coding++;
        f->coding = value;
    }
    return MHD_YES;
}

static bool is_json_type(const char *t) {
    if (!t || strncasecmp(t, "application/json", 16)) return false;
    return t[16] == '\0' || t[16] == ';' || t[16] == ' ' || t[16] == '\t';
}

/*
 * What can be decided from the headers alone, before any of the body is
 * kept (so an unauthenticated or oversized upload costs no memory): broken
 * framing (400 at once, then the connection closes: a second request
 * hidden in a body must not be answered), OPTIONS (at once), and, after
 * the body was read and dropped (answering while the client still sends
 * would reset the connection under its feet), a wrong API key (401), a POST
 * that is not JSON (415: a web page cannot send JSON to another site
 * without CORS, so this keeps pages from driving an unkeyed local server),
 * a body announced over --max-body (413). Returns -1 when the request goes
 * on (cs->reject may then be set).
 */
static int answer_early(conn *cs, struct MHD_Connection *c, srv_state *S, const char *url, const char *method) {
    const char *origin = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Origin"), *allow = S->o->cors_origin;
    if (origin && allow) cs->cors = !strcmp(allow, "*") ? "*" : !strcmp(allow, origin) ? allow : NULL;
    cs->replica = S->o->replica_id;
    framing f = {0};
    MHD_get_connection_values(c, MHD_HEADER_KIND, framing_header, &f);
    const char *why = NULL;
    if (f.lengths_differ) why = "conflicting Content-Length headers";
    else if (f.n_coding && f.n_length) why = "both Content-Length and Transfer-Encoding";
    else if (f.n_coding > 1 || (f.n_coding && strcasecmp(f.coding, "chunked")))
        why = "a transfer coding other than chunked";
    if (why) {
        cs->close = true;
        return (int)fail(cs, c, 400, NULL, "bad_framing", why);
    }
    if (!strcmp(method, "OPTIONS")) {
        struct MHD_Response *r = MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
        if (!r) return MHD_NO;
        MHD_add_response_header(r, "Allow", "GET, HEAD, POST, OPTIONS");
        if (cs->cors) { /* a preflight: what the page may send */
            MHD_add_response_header(r, "Access-Control-Allow-Methods", "GET, HEAD, POST, OPTIONS");
            MHD_add_response_header(r, "Access-Control-Allow-Headers", "Authorization, Content-Type");
            MHD_add_response_header(r, "Access-Control-Max-Age", "600");
        }
        add_cors(cs, r);
        cs->status = 204;
        enum MHD_Result ret = MHD_queue_response(c, 204, r);
        MHD_destroy_response(r);
        return (int)ret;
    }
    srv_err e;
    if (!open_route(S, url, method) && !authorized(S, c))
        srv_err_set(&e, 401, NULL, "invalid_api_key", "invalid or missing API key (send 'Authorization: Bearer KEY')");
    else if (!strcmp(method, "POST") && !is_json_type(MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Type")))
        srv_err_set(&e, 415, NULL, "unsupported_media_type",
                    "request bodies must be JSON: send 'Content-Type: application/json'");
    else if (!strcmp(method, "POST") && f.n_length && strtoull(f.length, NULL, 10) > S->o->max_body)
        srv_err_set(&e, 413, NULL, "request_too_large", "the request body exceeds this server's limit of %zu bytes "
                    "(--max-body)", S->o->max_body);
    else
        return -1;
    if (!(cs->reject = malloc(sizeof e))) return MHD_NO;
    *cs->reject = e;
    return -1;
}

enum MHD_Result srv_http_handler(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                 const char *version, const char *upload, size_t *upload_size, void **con_cls) {
    (void)version;
    srv_state *S = cls;
    conn *cs = *con_cls;
    if (!cs) { /* headers are in; the body follows in later calls */
        if (!(cs = calloc(1, sizeof *cs))) return MHD_NO;
        snprintf(cs->method, sizeof cs->method, "%s", method);
        snprintf(cs->path, sizeof cs->path, "%s", url);
        cs->t0 = srv_now();
        *con_cls = cs;
        /* no link (it ran out of memory): nothing could wake this connection */
        if (!(cs->link = srv_link_of(c))) return MHD_NO;
        const int early = answer_early(cs, c, S, url, method);
        return early < 0 ? MHD_YES : (enum MHD_Result)early;
    }
    if (*upload_size) {
        /* past the limit the rest is read and dropped, so the client still
           gets its 413 instead of a reset connection */
        if (!cs->too_big && !cs->oom && !cs->reject) {
            if (cs->n + *upload_size > S->o->max_body) {
                cs->too_big = true;
                free(cs->body);
                cs->body = NULL, cs->n = cs->cap = 0;
            } else {
                if (cs->n + *upload_size + 1 > cs->cap) {
                    size_t cap = cs->cap ? cs->cap : 4096;
                    while (cap < cs->n + *upload_size + 1) cap *= 2;
                    char *b = realloc(cs->body, cap);
                    if (!b) cs->oom = true;
                    else cs->body = b, cs->cap = cap;
                }
                if (!cs->oom) memcpy(cs->body + cs->n, upload, *upload_size), cs->n += *upload_size;
            }
        }
        *upload_size = 0;
        return MHD_YES;
    }
    if (cs->cont) return cs->cont(cs, c, S); /* resumed: go on where it waited */
    srv_link_request_read(cs->link); /* whole: from here on no deadline, the server is the one working */
    if (cs->reject) return send_err(cs, c, cs->reject);
    return route(cs, c, S, url, method);
}

void srv_http_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe) {
    srv_state *S = cls;
    conn *cs = *con_cls;
    srv_link_request_done(srv_link_of(c)); /* the next request's deadline starts now */
    if (!cs) return;
    int status = cs->status ? cs->status : 499;
    if (toe != MHD_REQUEST_TERMINATED_COMPLETED_OK && status == 200) status = 499; /* the client left mid-response */
    size_t prompt = 0, cached = 0;
    int gen = 0;
    for (size_t i = 0; i < cs->n_reqs; i++) {
        srv_req *r = cs->reqs[i];
        pthread_mutex_lock(&r->mu);
        r->wake = NULL, r->wake_arg = NULL; /* the link may close after this */
        if (!r->done) r->cancelled = true;
        if (!i) prompt = r->n_prompt, cached = r->n_cached;
        gen += r->done ? r->n_gen : r->n_pushed; /* a cancelled stream: the tokens it was sent */
        pthread_mutex_unlock(&r->mu);
        srv_req_unref(r);
    }
    if (cs->job.done == view_done) {
        /* a view whose connection ended before its body went out (the
           client left, or the server stops): its job writes into cs, so wait
           for it (a step at most; a stopping scheduler calls every pending
           job's done), then free the body nobody sent */
        while (!atomic_load(&cs->job_done)) nanosleep(&(struct timespec){0, 100000}, NULL);
        free(cs->view.out);
    }
    srv_metrics_request(S->metrics, status);
    fprintf(stderr, "%s %s %d prompt=%zu cached=%zu generated=%d %.1f ms\n", cs->method, cs->path, status, prompt, cached,
            gen, 1e3 * (srv_now() - cs->t0));
    free(cs->body);
    free(cs->reject);
    free(cs);
    *con_cls = NULL;
}
