/*
 * responses_api.h — OpenAI's Responses API (POST /v1/responses) on the chat
 * path (responses_api.c): `input` (a text, or a list of messages),
 * `instructions` and `previous_response_id` become the chat messages they
 * mean, parsed by srv_api_parse as any chat request; the answer, its stream
 * events and the conversation kept for the next response are the Responses
 * API's. A continuation's prompt begins with the previous one's prompt and
 * answer, which the cache holds: it is reused, not recomputed. Fields it
 * does not know or cannot honour are a 400 naming them.
 */
#ifndef TKV_SRV_OPENAI_RESPONSES_API_H
#define TKV_SRV_OPENAI_RESPONSES_API_H

#include "fields.h"

/* Fill r from a /v1/responses body (r->responses set, id "resp_..."). false with *e set. */
bool srv_api_parse_responses(const srv_api *a, const json_t *body, srv_req *r, srv_err *e);

/* The response object of a finished request (status completed, or incomplete at max_output_tokens), and its
   conversation kept for previous_response_id (unless store was false). Locks r. malloc'd. */
char *srv_responses_response(const srv_api *a, srv_req *r);

/* What a stream sent so far (zeroed at its start). */
typedef struct srv_responses_stream {
    bool started, item_open, reasoning_sent, finished;
    int seq;      /* sequence_number of the next event */
    size_t sent;  /* text bytes looked at */
    size_t sent_c;
} srv_responses_stream;

/* The events of r's output since the last call ("event: TYPE\ndata: {...}\n\n" each, handed to pend, which owns
   them): response.created, response.in_progress, the message's output_item.added, content_part.added,
   output_text.delta..., output_text.done, content_part.done, output_item.done, then response.completed (or
   response.failed). The caller holds r->mu. Returns whether any was made. */
bool srv_responses_stream_events(const srv_api *a, srv_req *r, srv_responses_stream *st,
                                 void (*pend)(void *u, char *ev), void *u);

#endif
