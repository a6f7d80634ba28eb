/*
 * api.h — the OpenAI request and response shapes: parsing and validating
 * /v1/completions and /v1/chat/completions bodies into a srv_req, and
 * building responses, stream chunks and error bodies. No HTTP here.
 */
#ifndef TKV_SRV_API_H
#define TKV_SRV_API_H

#include "chat_template.h"
#include "request.h"
#include "tool_calls.h"

#include <jansson.h>

/* What the API layer needs to know about the server. */
typedef struct srv_api {
    const tkv_model *model;
    const char *model_id;   /* the id /v1/models lists */
    int max_tokens;         /* the largest max_tokens accepted */
    uint32_t n_ctx;         /* positions per request: prompt + completion */
    tkv_chat_template *jinja; /* how messages are rendered: the model's (or --chat-template's) Jinja template, */
    srv_chat_kind chat;       /* or else this hand-written family */
    bool think;               /* the template has think markers: reasoning is returned apart */
    const uint8_t *ns_secret; /* the key of namespace ids (SRV_NS_SECRET_BYTES), this server's own */
    const tkv_grammar *grammar; /* --grammar-file: constrains requests that give no grammar; or NULL */
    srv_tool_format tools;      /* the tool-call syntax of the chat template */
} srv_api;

/* An error for the client: HTTP status and the OpenAI error object. */
typedef struct srv_err {
    int status;
    const char *type;  /* "invalid_request_error", ... */
    const char *code;  /* or NULL */
    const char *param; /* or NULL */
    char message[512];
} srv_err;

void srv_err_set(srv_err *e, int status, const char *param, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

/* {"error": {"message", "type", "param", "code"}} as a malloc'd string. */
char *srv_err_json(const srv_err *e);

/*
 * Fill r's input (prompt tokens, sampling, stop strings, stream flags,
 * namespace) from a request body; chat selects /v1/chat/completions.
 * Returns false with *e set (400) on any invalid field.
 */
bool srv_api_parse(const srv_api *a, const json_t *body, bool chat, srv_req *r, srv_err *e);

/*
 * The prompt text of a chat request body (messages, tools,
 * chat_template_kwargs), as the model's template renders it: malloc'd,
 * *len bytes. NULL with *e set (400) on an invalid field or a template
 * that raises.
 */
char *srv_api_chat_prompt(const srv_api *a, const json_t *body, size_t *len, srv_err *e);

/* The complete (non-streamed) response of a finished request: its n choices (one request each, index 0 first,
   sharing the prompt). Locks each. malloc'd. */
char *srv_api_response(const srv_api *a, srv_req *const *reqs, size_t n);

/*
 * One SSE event ("data: {...}\n\n") of a stream: a text delta (first: the
 * chat role comes with it), a reasoning delta (delta.reasoning_content), or
 * the final chunk with its finish reason (for it, n is the number of tool
 * calls the stream sent). With logprobs, a delta or final chunk carries
 * those of the tokens generated since *lp_sent (then advanced); lp_sent may
 * be NULL (none). The choice's index is r->index. The caller holds r->mu.
 * malloc'd; NULL when out of memory.
 */
typedef enum { SRV_CHUNK_DELTA, SRV_CHUNK_REASONING, SRV_CHUNK_FINISH } srv_chunk_kind;
char *srv_api_chunk(const srv_api *a, srv_req *r, srv_chunk_kind kind, const char *text, size_t n, bool first,
                    size_t *lp_sent);

/* The last event of a stream with include_usage: no choices, the usage of all n choices. Locks each. malloc'd. */
char *srv_api_usage_chunk(const srv_api *a, srv_req *const *reqs, size_t n);

/* Make r, parsed from the same body as first (its choice 0), its choice i: the same id, the seed plus i. */
void srv_api_choice(srv_req *first, srv_req *r, size_t i);

/*
 * tools, tool_choice, parallel_tool_calls of a chat request into r (after
 * its grammar fields): whether the answer is read for calls, and with
 * "required" or a named function the grammar that forces one
 * (tool_fields.c). Returns false with *e set.
 */
bool srv_api_parse_tools(const srv_api *a, const json_t *body, srv_req *r, srv_err *e);

/* echo and suffix of the legacy completions into r, after its prompt (legacy_fields.c). false with *e set. */
bool srv_api_parse_legacy(const srv_api *a, const json_t *body, srv_req *r, srv_err *e);

/* A finished choice's finish_reason: "tool_calls" when its answer held n_calls > 0 calls and it stopped. */
const char *srv_api_finish_reason(const srv_req *r, size_t n_calls);

/* message.tool_calls of a parsed answer: [{id, type, function: {name, arguments}}]. */
json_t *srv_api_tool_calls_json(const srv_req *r, const srv_tool_parse *p);

/* The SSE event of a streamed call k: head, its first delta (index, id, type, function.name, arguments ""),
   else the one that carries its arguments. first: the chat role goes with it. malloc'd; NULL when out of memory. */
char *srv_api_tool_chunk(const srv_api *a, const srv_req *r, size_t k, const srv_tool_call *c, bool head, bool first);

/*
 * llama-server's POST /completion (native_completion.c): its fields (n_predict,
 * cache_prompt, its sampling defaults) mapped onto srv_api_parse's, and
 * r->native set. Fields it cannot honour (json_schema, id_slot, ...) are a
 * 400 naming them. Returns false with *e set.
 */
bool srv_api_parse_native(const srv_api *a, const json_t *body, srv_req *r, srv_err *e);

/* The /completion response of a finished native request: content, stop_type, stopping_word, tokens_predicted,
   tokens_evaluated, tokens_cached, generation_settings, timings. malloc'd. */
char *srv_api_native_response(const srv_api *a, srv_req *r);

/* One SSE event of a native stream: {"content": the new text, "stop": false}, or (final) the response object
   with empty content and "stop": true. The caller holds r->mu. malloc'd; NULL when out of memory. */
char *srv_api_native_event(const srv_api *a, srv_req *r, const char *text, size_t n, bool final);

/* Tokenize text into a malloc'd array (*out, *n); on failure *out is NULL. */
tkv_status srv_tokenize(const tkv_model *m, const char *text, size_t len, unsigned flags, tkv_token **out, size_t *n);

/* A JSON string for text that may hold invalid UTF-8 (replaced by U+FFFD). */
json_t *srv_json_text(const char *s, size_t n);

/* Bytes of the namespace key: XXH3's custom secrets take at least 136. */
#define SRV_NS_SECRET_BYTES 192

/*
 * The cache namespace of a cache_salt (0 for none): XXH3 keyed with this
 * server's secret, so that nobody without it can tell which salt an id
 * (in /v1/cache, in a cache file's name or header) comes from.
 */
uint64_t srv_api_namespace(const srv_api *a, const char *salt, size_t n);

#endif
