/*
 * anthropic.c — Anthropic's Messages API (anthropic.h): its request as the
 * chat body it means, and its answer, stream events and errors.
 */
#include "anthropic.h"
#include "parse.h"
#include "reasoning.h"
#include "responses.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the request ------------------------------------------------------------------------- */

/* The fields of a /v1/messages body (count: of a count_tokens body); any other is refused by name. */
static const char *const message_fields[] = {"model", "messages", "max_tokens", "system", "stop_sequences", "stream",
                                             "temperature", "top_p", "top_k", "tools", "tool_choice", "metadata",
                                             "thinking", "service_tier", "cache_salt", NULL};
static const char *const count_fields[] = {"model", "messages", "system", "tools", "tool_choice", "thinking",
                                           "cache_salt", NULL};

static bool in(const char *const *list, const char *k) {
    for (; *list; list++)
        if (!strcmp(*list, k)) return true;
    return false;
}

/* A text block's keys: cache_control (prefixes are cached anyway) and empty citations pass. */
static bool text_block(const json_t *b, const char *where, srv_err *e) {
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)b, k, v) {
        if (!strcmp(k, "type") || !strcmp(k, "text") || !strcmp(k, "cache_control") ||
            (!strcmp(k, "citations") && (json_is_null(v) || !json_array_size(v))))
            continue;
        srv_err_set(e, 400, "messages", "unsupported_parameter", "%s: '%s' is not supported by this server", where, k);
        return false;
    }
    if (!json_is_string(json_object_get(b, "text"))) {
        srv_err_set(e, 400, "messages", "invalid_value", "%s: a text block needs a string 'text'", where);
        return false;
    }
    return true;
}

/* Text content (a string, or text blocks) as OpenAI content: the string, or its text parts. NULL with *e set. */
static json_t *text_content(const json_t *c, const char *where, srv_err *e) {
    if (json_is_string(c)) return json_incref((json_t *)c);
    if (!json_is_array(c)) {
        srv_err_set(e, 400, "messages", "invalid_type", "%s must be a string or an array of text blocks", where);
        return NULL;
    }
    json_t *parts = json_array();
    for (size_t k = 0; k < json_array_size(c); k++) {
        const json_t *b = json_array_get(c, k);
        char at[96];
        snprintf(at, sizeof at, "%s[%zu]", where, k);
        if (!json_is_object(b) || !json_is_string(json_object_get(b, "type")) ||
            strcmp(json_string_value(json_object_get(b, "type")), "text")) {
            srv_err_set(e, 400, "messages", "unsupported_parameter", "%s: only text blocks are supported here", at);
            json_decref(parts);
            return NULL;
        }
        if (!text_block(b, at, e)) {
            json_decref(parts);
            return NULL;
        }
        json_array_append_new(parts, json_pack("{s:s,s:O}", "type", "text", "text", json_object_get(b, "text")));
    }
    return parts;
}

/* One Anthropic message into OpenAI messages appended to out: a user message's tool_result blocks become tool
   messages and its text a user message, in their order; an assistant message's text, thinking and tool_use
   blocks one assistant message (content, reasoning_content, tool_calls). */
static bool add_message(const json_t *m, size_t i, json_t *out, srv_err *e) {
    const json_t *role = json_object_get(m, "role"), *c = json_object_get(m, "content");
    char where[64];
    snprintf(where, sizeof where, "messages[%zu].content", i);
    if (!json_is_object(m) || !json_is_string(role) ||
        (strcmp(json_string_value(role), "user") && strcmp(json_string_value(role), "assistant"))) {
        srv_err_set(e, 400, "messages", "invalid_value", "messages[%zu] must be an object with role \"user\" or "
                    "\"assistant\" (the system prompt is the top-level 'system')", i);
        return false;
    }
    const bool user = !strcmp(json_string_value(role), "user");
    if (json_is_string(c)) return !json_array_append_new(out, json_pack("{s:O,s:O}", "role", role, "content", c));
    if (!json_is_array(c)) {
        srv_err_set(e, 400, "messages", "invalid_type", "%s must be a string or an array of content blocks", where);
        return false;
    }
    json_t *parts = json_array(), *calls = json_array();
    char *thinking = NULL;
    bool ok = true;
    for (size_t k = 0; ok && k < json_array_size(c); k++) {
        const json_t *b = json_array_get(c, k), *type = json_object_get(b, "type");
        const char *t = json_string_value(type);
        char at[96];
        snprintf(at, sizeof at, "%s[%zu]", where, k);
        if (!json_is_object(b) || !t) {
            srv_err_set(e, 400, "messages", "invalid_value", "%s must be a content block with a string 'type'", at);
            ok = false;
        } else if (!strcmp(t, "text")) {
            if ((ok = text_block(b, at, e)))
                json_array_append_new(parts, json_pack("{s:s,s:O}", "type", "text", "text", json_object_get(b, "text")));
        } else if (user && !strcmp(t, "tool_result")) {
            const json_t *id = json_object_get(b, "tool_use_id"), *rc = json_object_get(b, "content");
            json_t *content = rc ? text_content(rc, at, e) : json_string("");
            if (!json_is_string(id)) srv_err_set(e, 400, "messages", "invalid_value", "%s: 'tool_use_id' is required", at);
            ok = content && json_is_string(id);
            if (ok && json_array_size(parts)) { /* text before the result stays before it */
                json_array_append_new(out, json_pack("{s:s,s:O}", "role", "user", "content", parts));
                json_array_clear(parts);
            }
            if (ok) json_array_append_new(out, json_pack("{s:s,s:O,s:O}", "role", "tool", "tool_call_id", id, "content", content));
            json_decref(content);
        } else if (!user && !strcmp(t, "tool_use")) {
            const json_t *id = json_object_get(b, "id"), *name = json_object_get(b, "name"), *input = json_object_get(b, "input");
            char *args = json_is_object(input) ? json_dumps(input, JSON_COMPACT) : NULL;
            if (!json_is_string(id) || !json_is_string(name) || !args) {
                srv_err_set(e, 400, "messages", "invalid_value", "%s: a tool_use block needs 'id', 'name' and an object "
                            "'input'", at);
                ok = false;
            } else {
                json_array_append_new(calls, json_pack("{s:O,s:s,s:{s:O,s:s}}", "id", id, "type", "function", "function",
                                                       "name", name, "arguments", args));
            }
            free(args);
        } else if (!user && !strcmp(t, "thinking") && json_is_string(json_object_get(b, "thinking"))) {
            const char *th = json_string_value(json_object_get(b, "thinking"));
            const size_t had = thinking ? strlen(thinking) : 0;
            char *grown = realloc(thinking, had + strlen(th) + 1);
            if (grown) memcpy(grown + had, th, strlen(th) + 1), thinking = grown;
        } else {
            srv_err_set(e, 400, "messages", "unsupported_parameter", "%s: '%s' blocks are not supported by this server "
                        "in %s messages", at, t, user ? "user" : "assistant");
            ok = false;
        }
    }
    if (ok && user && json_array_size(parts))
        json_array_append_new(out, json_pack("{s:s,s:O}", "role", "user", "content", parts));
    if (ok && !user) { /* the text blocks as one string: the assistant's turn as it was written */
        size_t len = 0;
        for (size_t k = 0; k < json_array_size(parts); k++) len += json_string_length(json_object_get(json_array_get(parts, k), "text"));
        char *text = malloc(len + 1);
        len = 0;
        for (size_t k = 0; text && k < json_array_size(parts); k++) {
            const json_t *x = json_object_get(json_array_get(parts, k), "text");
            memcpy(text + len, json_string_value(x), json_string_length(x));
            len += json_string_length(x);
        }
        json_t *msg = json_pack("{s:s,s:o}", "role", "assistant", "content",
                                !text ? json_null() : len || !json_array_size(calls) ? json_stringn(text, len) : json_null());
        free(text);
        if (json_array_size(calls)) json_object_set(msg, "tool_calls", calls);
        if (thinking) json_object_set_new(msg, "reasoning_content", json_string(thinking));
        json_array_append_new(out, msg);
    }
    free(thinking);
    json_decref(parts);
    json_decref(calls);
    return ok;
}

/* tools and tool_choice as OpenAI's. */
static bool add_tools(const json_t *body, json_t *chat, srv_err *e) {
    const json_t *tools = json_object_get(body, "tools"), *tc = json_object_get(body, "tool_choice");
    if (tools && !json_is_null(tools)) {
        if (!json_is_array(tools)) {
            srv_err_set(e, 400, "tools", "invalid_type", "'tools' must be an array");
            return false;
        }
        json_t *out = json_array();
        for (size_t i = 0; i < json_array_size(tools); i++) {
            const json_t *t = json_array_get(tools, i), *type = json_object_get(t, "type"),
                         *name = json_object_get(t, "name"), *schema = json_object_get(t, "input_schema");
            if (type && !json_is_null(type) && (!json_is_string(type) || strcmp(json_string_value(type), "custom"))) {
                srv_err_set(e, 400, "tools", "unsupported_parameter", "tools[%zu]: server tools ('%s') are not supported "
                            "by this server; give custom tools (name, input_schema)", i,
                            json_is_string(type) ? json_string_value(type) : "?");
                json_decref(out);
                return false;
            }
            if (!json_is_string(name) || !json_is_object(schema)) {
                srv_err_set(e, 400, "tools", "invalid_value", "tools[%zu] needs a string 'name' and an object 'input_schema'", i);
                json_decref(out);
                return false;
            }
            json_t *fn = json_pack("{s:O,s:O}", "name", name, "parameters", schema);
            if (json_is_string(json_object_get(t, "description")))
                json_object_set(fn, "description", json_object_get(t, "description"));
            json_array_append_new(out, json_pack("{s:s,s:o}", "type", "function", "function", fn));
        }
        json_object_set_new(chat, "tools", out);
    }
    if (!tc || json_is_null(tc)) return true;
    const char *type = json_string_value(json_object_get(tc, "type"));
    static const struct {
        const char *anthropic, *openai;
    } choices[] = {{"auto", "auto"}, {"any", "required"}, {"none", "none"}};
    for (size_t i = 0; type && i < sizeof choices / sizeof choices[0]; i++)
        if (!strcmp(type, choices[i].anthropic)) json_object_set_new(chat, "tool_choice", json_string(choices[i].openai));
    if (type && !strcmp(type, "tool") && json_is_string(json_object_get(tc, "name")))
        json_object_set_new(chat, "tool_choice",
                            json_pack("{s:s,s:{s:O}}", "type", "function", "function", "name", json_object_get(tc, "name")));
    if (!json_object_get(chat, "tool_choice")) {
        srv_err_set(e, 400, "tool_choice", "invalid_value", "'tool_choice' must be {\"type\": \"auto\"}, \"any\", \"none\" "
                    "or {\"type\": \"tool\", \"name\": ...}");
        return false;
    }
    if (json_is_true(json_object_get(tc, "disable_parallel_tool_use")))
        json_object_set_new(chat, "parallel_tool_calls", json_false());
    return true;
}

/* The chat body a /v1/messages (or count_tokens) body means; NULL with *e set. */
static json_t *to_chat(const json_t *body, bool count, srv_err *e) {
    if (!json_is_object(body)) {
        srv_err_set(e, 400, NULL, "invalid_json", "the request body must be a JSON object");
        return NULL;
    }
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)body, k, v) {
        if (!in(count ? count_fields : message_fields, k)) {
            srv_err_set(e, 400, NULL, "unsupported_parameter", "'%s' is not a field this server knows for %s", k,
                        count ? "/v1/messages/count_tokens" : "/v1/messages");
            srv_err_param(e, k); /* the body goes before the error is sent */
            return NULL;
        }
    }
    const json_t *msgs = json_object_get(body, "messages"), *sys = json_object_get(body, "system"),
                 *think = json_object_get(body, "thinking"), *tier = json_object_get(body, "service_tier");
    if (!count && !json_is_integer(json_object_get(body, "max_tokens"))) {
        srv_err_set(e, 400, "max_tokens", "missing_required_parameter", "'max_tokens' (an integer) is required");
        return NULL;
    }
    if (!json_is_array(msgs) || !json_array_size(msgs)) {
        srv_err_set(e, 400, "messages", "invalid_value", "'messages' must be a non-empty array");
        return NULL;
    }
    if (tier && !json_is_null(tier) && (!json_is_string(tier) || (strcmp(json_string_value(tier), "auto") &&
                                                                   strcmp(json_string_value(tier), "standard_only")))) {
        srv_err_set(e, 400, "service_tier", "invalid_value", "'service_tier' must be \"auto\" or \"standard_only\"");
        return NULL;
    }
    const char *tt = json_string_value(json_object_get(think, "type"));
    if (think && !json_is_null(think) && (!tt || strcmp(tt, "disabled"))) {
        srv_err_set(e, 400, "thinking", "unsupported_parameter", "'thinking' with a budget is not supported by this "
                    "server (the reasoning is as long as the model makes it); omit it or give {\"type\": \"disabled\"}");
        return NULL;
    }
    json_t *chat = json_object(), *out = json_array();
    json_object_set_new(chat, "messages", out);
    if (sys && !json_is_null(sys)) {
        json_t *content = text_content(sys, "system", e);
        if (!content) {
            json_decref(chat);
            return NULL;
        }
        json_array_append_new(out, json_pack("{s:s,s:o}", "role", "system", "content", content));
    }
    for (size_t i = 0; i < json_array_size(msgs); i++)
        if (!add_message(json_array_get(msgs, i), i, out, e)) {
            json_decref(chat);
            return NULL;
        }
    if (!add_tools(body, chat, e)) {
        json_decref(chat);
        return NULL;
    }
    if (tt) json_object_set_new(chat, "chat_template_kwargs", json_pack("{s:b}", "enable_thinking", 0));
    static const char *const same[] = {"max_tokens", "stream", "temperature", "top_p", "top_k", "cache_salt"};
    for (size_t i = 0; !count && i < sizeof same / sizeof same[0]; i++)
        if (json_object_get(body, same[i])) json_object_set(chat, same[i], json_object_get(body, same[i]));
    if (!count && json_object_get(body, "stop_sequences")) json_object_set(chat, "stop", json_object_get(body, "stop_sequences"));
    if (json_object_get(body, "cache_salt")) json_object_set(chat, "cache_salt", json_object_get(body, "cache_salt"));
    return chat;
}

bool srv_api_parse_anthropic(const srv_api *a, const json_t *body, srv_req *r, srv_err *e) {
    json_t *chat = to_chat(body, false, e);
    if (!chat) return false;
    const bool ok = srv_api_parse(a, chat, true, r, e);
    json_decref(chat);
    if (!ok && e->param && !strcmp(e->param, "stop")) e->param = "stop_sequences"; /* the client's name for it */
    if (!ok) return false;
    r->anthropic = true;
    char id[sizeof r->id];
    snprintf(id, sizeof id, "msg_%s", r->id + strcspn(r->id, "-") + 1); /* chatcmpl-X -> msg_X */
    memcpy(r->id, id, sizeof id);
    return true;
}

json_t *srv_anthropic_count_tokens(const srv_api *a, const json_t *body, srv_err *e) {
    json_t *chat = to_chat(body, true, e);
    if (!chat) return NULL;
    size_t len = 0, n = 0;
    char *text = srv_api_chat_prompt(a, chat, &len, NULL, e);
    json_decref(chat);
    if (!text) return NULL;
    tkv_token *t = NULL;
    const tkv_status st = srv_tokenize(a->model, text, len, TKV_TOKENIZE_ADD_SPECIAL | TKV_TOKENIZE_PARSE_SPECIAL, &t, &n);
    free(text);
    free(t);
    if (st) {
        srv_err_set(e, st == TKV_ERR_NOMEM ? 500 : 400, "messages", NULL, "cannot tokenize: %s", tkv_last_error(a->model));
        return NULL;
    }
    return json_pack("{s:I}", "input_tokens", (json_int_t)n);
}

/* ---- the answer ---------------------------------------------------------------------------- */

/* Where a finished (or growing) answer's parts are: its reasoning, its text around the tool calls, the calls. */
static void split(srv_req *r, size_t n, bool final, srv_think_split *sp, srv_tool_parse *tp) {
    *sp = (srv_think_split){0, 0, 0, n};
    if (r->think) *sp = srv_think_split_text(r->text, n, r->think_open, final);
    const size_t m = sp->c1 - sp->c0;
    *tp = (srv_tool_parse){.content_end = m, .rest = m};
    if (r->tools && !srv_tools_parse((srv_tool_format)r->tool_format, r->tool_defs, r->text + sp->c0, m, final, tp))
        *tp = (srv_tool_parse){.content_end = m, .rest = m}; /* out of memory: all text */
}

static json_t *tool_use(const srv_req *r, size_t k, const srv_tool_call *c, bool with_input) {
    char id[32], tid[40];
    srv_tools_call_id(r->id, k, id);
    snprintf(tid, sizeof tid, "toolu_%s", id + 5); /* call_X -> toolu_X */
    json_t *input = with_input ? json_loads(c->arguments, 0, NULL) : NULL;
    return json_pack("{s:s,s:s,s:s,s:o}", "type", "tool_use", "id", tid, "name", c->name, "input",
                     input ? input : json_object());
}

static const char *stop_reason(const srv_req *r, size_t n_calls) {
    if (n_calls) return "tool_use";
    if (r->finish_reason && !strcmp(r->finish_reason, "length")) return "max_tokens";
    return r->stop_word >= 0 ? "stop_sequence" : "end_turn";
}

/* usage: the prompt tokens computed and those taken from the cache apart, as Anthropic counts them (nothing is
   charged for writing the cache: every computed token is cached). */
static json_t *usage(const srv_req *r, int output) {
    return json_pack("{s:I,s:I,s:i,s:i}", "input_tokens", (json_int_t)(r->n_prompt - r->n_cached),
                     "cache_read_input_tokens", (json_int_t)r->n_cached, "cache_creation_input_tokens", 0,
                     "output_tokens", output);
}

char *srv_anthropic_response(const srv_api *a, srv_req *r) {
    pthread_mutex_lock(&r->mu);
    srv_think_split sp;
    srv_tool_parse tp;
    split(r, r->text_len, true, &sp, &tp);
    json_t *content = json_array();
    if (sp.r1 > sp.r0)
        json_array_append_new(content, json_pack("{s:s,s:o,s:s}", "type", "thinking", "thinking",
                                                 srv_json_text(r->text + sp.r0, sp.r1 - sp.r0), "signature", ""));
    const char *c = r->text + sp.c0;
    const size_t after = sp.c1 - sp.c0 - tp.rest;
    if (tp.content_end) json_array_append_new(content, json_pack("{s:s,s:o}", "type", "text", "text", srv_json_text(c, tp.content_end)));
    for (size_t k = 0; k < tp.n_calls; k++) json_array_append_new(content, tool_use(r, k, &tp.calls[k], true));
    if (after) json_array_append_new(content, json_pack("{s:s,s:o}", "type", "text", "text", srv_json_text(c + tp.rest, after)));
    json_t *o = json_pack("{s:s,s:s,s:s,s:s,s:o,s:s,s:o,s:o}", "id", r->id, "type", "message", "role", "assistant", "model",
                          a->model_id, "content", content, "stop_reason", stop_reason(r, tp.n_calls), "stop_sequence",
                          r->stop_word >= 0 ? json_string(r->stop[r->stop_word]) : json_null(), "usage", usage(r, r->n_gen));
    srv_tool_parse_free(&tp);
    pthread_mutex_unlock(&r->mu);
    char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    return s;
}

/* Anthropic's error type of an HTTP status. */
static const char *error_type(int status) {
    static const struct {
        int status;
        const char *type;
    } types[] = {{400, "invalid_request_error"}, {401, "authentication_error"}, {403, "permission_error"},
                 {404, "not_found_error"},       {413, "request_too_large"},    {429, "rate_limit_error"},
                 {503, "overloaded_error"}};
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++)
        if (types[i].status == status) return types[i].type;
    return status >= 500 ? "api_error" : "invalid_request_error";
}

char *srv_anthropic_error_json(const srv_err *e) {
    json_t *o = json_pack("{s:s,s:{s:s,s:s}}", "type", "error", "error", "type", error_type(e->status), "message", e->message);
    char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    return s;
}

/* ---- the stream ------------------------------------------------------------------------------ */

enum { BLOCK_NONE, BLOCK_TEXT, BLOCK_THINKING };

typedef struct emit {
    srv_anthropic_stream *st;
    void (*pend)(void *u, char *ev);
    void *u;
} emit;

/* "event: NAME\ndata: {o, with "type": NAME}\n\n" to the stream (o's reference is taken). */
static void event(emit *em, const char *name, json_t *o) {
    if (o) json_object_set_new(o, "type", json_string(name));
    char *body = o ? json_dumps(o, JSON_COMPACT) : NULL, *ev = NULL;
    json_decref(o);
    if (body && (ev = malloc(strlen(name) + strlen(body) + 18))) sprintf(ev, "event: %s\ndata: %s\n\n", name, body);
    free(body);
    em->pend(em->u, ev);
}

static void close_block(emit *em) {
    if (!em->st->open) return;
    event(em, "content_block_stop", json_pack("{s:i}", "index", em->st->block));
    em->st->block++, em->st->open = BLOCK_NONE;
}

/* Text of a kind into its block (opened, after closing another kind's). */
static void block_text(emit *em, int kind, const char *text, size_t n) {
    if (!n) return;
    if (em->st->open != kind) {
        close_block(em);
        event(em, "content_block_start",
              json_pack("{s:i,s:{s:s,s:s}}", "index", em->st->block, "content_block", "type",
                        kind == BLOCK_TEXT ? "text" : "thinking", kind == BLOCK_TEXT ? "text" : "thinking", ""));
        em->st->open = kind;
    }
    event(em, "content_block_delta",
          json_pack("{s:i,s:{s:s,s:o}}", "index", em->st->block, "delta", "type",
                    kind == BLOCK_TEXT ? "text_delta" : "thinking_delta", kind == BLOCK_TEXT ? "text" : "thinking",
                    srv_json_text(text, n)));
}

/* A stream's error event: why the scheduler failed the request, in Anthropic's words. */
static const char *fail_type(srv_fail f) {
    return f == SRV_FAIL_CACHE_FULL || f == SRV_FAIL_STOPPING ? "overloaded_error"
           : f == SRV_FAIL_INTERNAL                           ? "api_error"
                                                              : "invalid_request_error";
}

bool srv_anthropic_stream_events(const srv_api *a, srv_req *r, srv_anthropic_stream *st, void (*pend)(void *u, char *ev),
                                 void *u) {
    emit em = {st, pend, u};
    if (st->finished) return false;
    bool any = false;
    if (!st->started) {
        json_t *msg = json_pack("{s:s,s:s,s:s,s:s,s:[],s:n,s:n,s:o}", "id", r->id, "type", "message", "role", "assistant",
                                "model", a->model_id, "content", "stop_reason", "stop_sequence", "usage", usage(r, 0));
        event(&em, "message_start", json_pack("{s:o}", "message", msg));
        st->started = any = true;
    }
    if (!r->done && r->text_ready <= st->sent) return any;
    srv_think_split sp;
    srv_tool_parse tp;
    split(r, r->text_ready, r->done, &sp, &tp);
    if (sp.r1 - sp.r0 > st->sent_r) block_text(&em, BLOCK_THINKING, r->text + sp.r0 + st->sent_r, sp.r1 - sp.r0 - st->sent_r);
    st->sent_r = sp.r1 - sp.r0 > st->sent_r ? sp.r1 - sp.r0 : st->sent_r;
    const char *c = r->text + sp.c0;
    if (tp.content_end > st->sent_c) block_text(&em, BLOCK_TEXT, c + st->sent_c, tp.content_end - st->sent_c);
    st->sent_c = tp.content_end > st->sent_c ? tp.content_end : st->sent_c;
    for (; st->sent_calls < tp.n_calls; st->sent_calls++) { /* a call: its block, its input in one delta */
        close_block(&em);
        event(&em, "content_block_start",
              json_pack("{s:i,s:o}", "index", st->block, "content_block", tool_use(r, st->sent_calls, &tp.calls[st->sent_calls], false)));
        event(&em, "content_block_delta", json_pack("{s:i,s:{s:s,s:s}}", "index", st->block, "delta", "type",
                                                    "input_json_delta", "partial_json", tp.calls[st->sent_calls].arguments));
        event(&em, "content_block_stop", json_pack("{s:i}", "index", st->block));
        st->block++;
    }
    if (r->done && tp.rest < sp.c1 - sp.c0) block_text(&em, BLOCK_TEXT, c + tp.rest, sp.c1 - sp.c0 - tp.rest);
    st->sent = r->text_ready;
    if (r->done) {
        close_block(&em);
        if (r->failed) {
            event(&em, "error", json_pack("{s:{s:s,s:s}}", "error", "type", fail_type(r->failed), "message", r->err_msg));
        } else {
            event(&em, "message_delta",
                  json_pack("{s:{s:s,s:o},s:o}", "delta", "stop_reason", stop_reason(r, tp.n_calls), "stop_sequence",
                            r->stop_word >= 0 ? json_string(r->stop[r->stop_word]) : json_null(), "usage",
                            usage(r, r->n_gen)));
            event(&em, "message_stop", json_object());
        }
        st->finished = true;
    }
    srv_tool_parse_free(&tp);
    return true;
}
