/*
 * fields.h — what every file of openai/ shares: the server's facts
 * (srv_api), the error of a request (srv_err) and its body, JSON text from
 * bytes, typed request fields, tokenizing, cache namespaces. The folder
 * parses and answers OpenAI bodies (parse.h, responses.h, tool_fields.h,
 * legacy_fields.h, native_completion.h); no HTTP here.
 */
#ifndef TKV_SRV_OPENAI_FIELDS_H
#define TKV_SRV_OPENAI_FIELDS_H

#include "chat_template.h"
#include "request.h"
#include "server.h"
#include "tool_calls.h"

#include <jansson.h>

/* What the API layer needs to know about the server. */
typedef struct srv_api {
    const tkv_model *model;
    const char *model_id;   /* the id /v1/models lists */
    int max_tokens;         /* the largest max_tokens accepted */
    uint32_t n_ctx;         /* positions per request: prompt + completion */
    uint32_t shift_window;  /* --context-shift: the positions a request's sequence holds at most (n_ctx / parallel,
                               llama-server's slot); a longer prompt is cut, a longer generation shifted. 0: none */
    tkv_chat_template *jinja; /* how messages are rendered: the model's (or --chat-template's) Jinja template, */
    srv_chat_kind chat;       /* or else this hand-written family */
    bool think;               /* the template has think markers: reasoning is returned apart */
    const uint8_t *ns_secret; /* the key of namespace ids (SRV_NS_SECRET_BYTES), this server's own */
    const tkv_grammar *grammar; /* --grammar-file: constrains requests that give no grammar; or NULL */
    srv_tool_format tools;      /* the tool-call syntax of the chat template */
    srv_defaults defaults;      /* llama-server's server-wide request defaults (--temp, --seed, -n, ...) */
    bool verbose;               /* --verbose: non-streamed answers carry "__verbose" */
    bool reasoning_none;        /* --reasoning-format none: thinking stays in the content unless a request asks */
    const json_t *template_kwargs; /* template variables under each request's chat_template_kwargs, or NULL */
    bool no_prefill;            /* --no-prefill-assistant: a final assistant message is a closed turn */
} srv_api;

/* An error for the client: HTTP status and the OpenAI error object. */
typedef struct srv_err {
    int status;
    const char *type;  /* "invalid_request_error", ... */
    const char *code;  /* or NULL */
    const char *param; /* or NULL; static text, or param_own */
    char param_own[64]; /* a field the request named (one this server does not know), which outlives its body */
    char message[512];
} srv_err;

void srv_err_set(srv_err *e, int status, const char *param, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

/* Name a field the request's body holds as the error's param: copied, so the error outlives the body (the param
   of a copied srv_err still points into the original). */
void srv_err_param(srv_err *e, const char *name);

/* {"error": {"message", "type", "param", "code"}} as a malloc'd string. */
char *srv_err_json(const srv_err *e);

/* Typed optional fields of a body: absent or null leaves *out as it is; a
   value of another type, or out of [lo, hi], is a 400 naming key. */
bool srv_field_number(const json_t *body, const char *key, double lo, double hi, double *out, srv_err *e);
bool srv_field_int(const json_t *body, const char *key, long long lo, long long hi, long long *out, srv_err *e);
bool srv_field_bool(const json_t *body, const char *key, bool *out, srv_err *e);

/* A JSON string, or null for NULL. */
json_t *srv_json_str_or_null(const char *s);

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
