/*
 * stream.c — Server-Sent Events: a generation's text as it grows, choice by
 * choice, with its reasoning, tool calls and logprobs (OpenAI's chunks, or
 * llama-server's events for /completion). MHD reads the events through a
 * content reader that suspends the connection while nothing is new.
 */
#include "exchange.h"
#include "openai/anthropic.h"
#include "openai/native_completion.h"
#include "openai/reasoning.h"
#include "openai/responses_api.h"
#include "openai/responses.h"
#include "openai/tool_fields.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- streaming ----------------------------------------------------------------- */

/* What a stream sent of one choice. */
typedef struct choice_sent {
    size_t sent;       /* text bytes looked at */
    bool first;        /* nothing sent yet (the chat role goes with the first delta) */
    bool finished;     /* its final chunk is queued */
    size_t sent_r, sent_c; /* bytes of the reasoning (r->think) and of the content sent */
    size_t sent_calls; /* tool calls sent (r->tools) */
    size_t sent_lp;    /* logprobs: entries sent */
    size_t sent_tok;   /* native: tokens whose event was sent */
    size_t sent_prog;  /* return_progress: prompt steps sent */
} choice_sent;

typedef struct stream {
    srv_state *S;
    srv_req *reqs[SRV_MAX_CHOICES]; /* the choices, a reference each */
    size_t n;
    choice_sent ch[SRV_MAX_CHOICES];
    srv_link *link;
    bool finished; /* the last events are queued */
    srv_anthropic_stream anthropic; /* /v1/messages: what its events said so far */
    srv_responses_stream responses; /* /v1/responses: the same */
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
    if (!srv_tools_parse((srv_tool_format)r->tool_format, r->tool_defs, text, n, r->done, &tp)) return; /* out of memory: later */
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

/* return_progress: the prompt steps of r not sent yet (the caller holds r->mu); whether there were any. */
static bool progress_events(stream *st, srv_req *r, choice_sent *c) {
    const bool any = c->sent_prog < r->n_prog;
    for (; c->sent_prog < r->n_prog; c->sent_prog++) pend(st, srv_api_progress_event(&st->S->api, r, c->sent_prog));
    return any;
}

/* The next events of choice i into st->pend; false when it has nothing new. */
static bool choice_events(stream *st, size_t i) {
    srv_req *r = st->reqs[i];
    choice_sent *c = &st->ch[i];
    const srv_api *a = &st->S->api;
    if (c->finished) return false;
    pthread_mutex_lock(&r->mu);
    const bool progressed = progress_events(st, r, c);
    if (!r->done && r->text_ready <= c->sent) {
        pthread_mutex_unlock(&r->mu);
        return progressed;
    }
    if (c->first && r->chat) { /* the role alone first, as llama-server sends it (content null) */
        pend(st, srv_api_chunk(a, r, SRV_CHUNK_ROLE, NULL, 0, true, NULL));
        c->first = false;
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
    const bool progressed = progress_events(st, r, c);
    if (!r->done && r->text_ready <= c->sent) {
        pthread_mutex_unlock(&r->mu);
        return progressed;
    }
    /* an event per generated token, as llama-server sends them: its text and id, once the text is settled */
    for (; c->sent_tok < r->n_tok; c->sent_tok++) {
        const size_t end = r->tok_end[c->sent_tok] < r->text_len ? r->tok_end[c->sent_tok] : r->text_len;
        if (end > r->text_ready || (r->done && r->tok_end[c->sent_tok] > r->text_len && end == c->sent)) break;
        pend(st, srv_api_native_event(a, r, r->text + c->sent, end - c->sent, false, (long)c->sent_tok));
        c->sent = end;
    }
    if (r->done && r->text_ready > c->sent) /* text no token event carried (a cut stop string's remains) */
        pend(st, srv_api_native_event(a, r, r->text + c->sent, r->text_ready - c->sent, false, -1));
    if (r->done) c->sent = r->text_ready;
    if (r->done) {
        if (r->failed) {
            srv_err e;
            http_failed_err(&e, r);
            char *body = srv_err_json(&e), *ev = body ? malloc(strlen(body) + 9) : NULL;
            if (ev) sprintf(ev, "data: %s\n\n", body);
            free(body);
            pend(st, ev);
            pend(st, strdup_or_null("data: [DONE]\n\n"));
        } else {
            pend(st, srv_api_native_event(a, r, NULL, 0, true, -1));
        }
        st->finished = true;
    }
    pthread_mutex_unlock(&r->mu);
    return true;
}

static void pend_cb(void *st, char *ev) { pend(st, ev); }

/* Anthropic's stream (one choice): its events, no [DONE]. */
static bool anthropic_events(stream *st) {
    srv_req *r = st->reqs[0];
    pthread_mutex_lock(&r->mu);
    const bool any = srv_anthropic_stream_events(&st->S->api, r, &st->anthropic, pend_cb, st);
    st->finished = st->anthropic.finished;
    pthread_mutex_unlock(&r->mu);
    return any;
}

/* The Responses API's stream (one choice): its events, no [DONE]. */
static bool responses_events(stream *st) {
    srv_req *r = st->reqs[0];
    pthread_mutex_lock(&r->mu);
    const bool any = srv_responses_stream_events(&st->S->api, r, &st->responses, pend_cb, st);
    st->finished = st->responses.finished;
    pthread_mutex_unlock(&r->mu);
    return any;
}

/* The next events of the stream into st->pend; false when there is nothing new yet. */
static bool next_events(stream *st) {
    if (st->reqs[0]->responses) return responses_events(st);
    if (st->reqs[0]->native) return native_events(st);
    if (st->reqs[0]->anthropic) return anthropic_events(st);
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
        http_failed_err(&e, failed);
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

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max) {
    (void)pos;
    stream *st = cls;
    while (st->pend_off == st->pend_n) {
        st->pend_off = st->pend_n = 0;
        if (st->finished) return MHD_CONTENT_READER_END_OF_STREAM;
        if (srv_link_gone(st->link)) { /* the client left while we waited */
            http_cancel_all(st->reqs, st->n);
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
    if (!st->finished) http_cancel_all(st->reqs, st->n);
    for (size_t i = 0; i < st->n; i++) srv_req_unref(st->reqs[i]);
    free(st->pend);
    free(st);
}

enum MHD_Result http_send_stream(conn *cs, struct MHD_Connection *c, srv_state *S) {
    stream *st = calloc(1, sizeof *st);
    if (!st) return http_send_body(cs, c, 500, NULL, NULL);
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
    http_add_cors(cs, resp);
    cs->status = 200;
    enum MHD_Result ret = MHD_queue_response(c, 200, resp);
    MHD_destroy_response(resp);
    return ret;
}
