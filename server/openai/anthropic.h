/*
 * anthropic.h — Anthropic's Messages API (POST /v1/messages and
 * /v1/messages/count_tokens) on the chat path (anthropic.c): a request's
 * body becomes the chat body it means (system, content blocks, tool_use and
 * tool_result, tools, tool_choice, stop_sequences), parsed by srv_api_parse
 * as any chat request, so the same template, scheduler and cache serve it;
 * only the shapes of the answer, its stream events and its errors are
 * Anthropic's. A field the API has and this server cannot honour, and any
 * field it does not know, is a 400 naming it.
 */
#ifndef TKV_SRV_OPENAI_ANTHROPIC_H
#define TKV_SRV_OPENAI_ANTHROPIC_H

#include "fields.h"

/* Fill r from a /v1/messages body (r->anthropic set, id "msg_..."). false with *e set. */
bool srv_api_parse_anthropic(const srv_api *a, const json_t *body, srv_req *r, srv_err *e);

/* POST /v1/messages/count_tokens: {"input_tokens": N}, the tokens of the prompt the body renders to, as a JSON
   object (a new reference); NULL with *e set. */
json_t *srv_anthropic_count_tokens(const srv_api *a, const json_t *body, srv_err *e);

/* The message of a finished request: content blocks (thinking, text, tool_use), stop_reason, stop_sequence,
   usage {input_tokens (computed), cache_read_input_tokens (taken from the cache), cache_creation_input_tokens,
   output_tokens}. Locks r. malloc'd. */
char *srv_anthropic_response(const srv_api *a, srv_req *r);

/* An error as Anthropic's clients read it: {"type": "error", "error": {"type", "message"}}, the type from the
   status. malloc'd. */
char *srv_anthropic_error_json(const srv_err *e);

/* What a stream sent so far (zeroed at its start). */
typedef struct srv_anthropic_stream {
    bool started, finished;
    int block;      /* the index of the next content block */
    int open;       /* the kind of the open block (anthropic.c), 0: none */
    size_t sent;    /* text bytes looked at */
    size_t sent_r, sent_c, sent_calls, sent_rest;
} srv_anthropic_stream;

/* The events of r's output since the last call ("event: NAME\ndata: {...}\n\n" each, handed to pend, which owns
   them; NULL: out of memory): message_start, then content_block_start / _delta / _stop per block, then
   message_delta and message_stop (or an error event). The caller holds r->mu. Returns whether any was made. */
bool srv_anthropic_stream_events(const srv_api *a, srv_req *r, srv_anthropic_stream *st, void (*pend)(void *u, char *ev),
                                 void *u);

#endif
