/*
 * responses_api.c — OpenAI's Responses API (responses_api.h): its request
 * as chat messages, its answer and stream events, its stored conversations.
 */
#include "responses_api.h"
#include "parse.h"
#include "reasoning.h"
#include "response_store.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the request ------------------------------------------------------------------------- */

/* The fields of a /v1/responses body; any other is refused by name. Those that ask for something not done here
   pass only at the value that asks for nothing (checked in neutral()). */
static const char *const known[] = {"model", "input", "instructions", "max_output_tokens", "temperature", "top_p",
                                    "stream", "previous_response_id", "store", "metadata", "user", "cache_salt",
                                    "prompt_cache_key", "tools", "tool_choice", "parallel_tool_calls", "text",
                                    "reasoning", "truncation", "service_tier", "include", "background", NULL};

static bool known_field(const char *k) {
    for (const char *const *p = known; *p; p++)
        if (!strcmp(*p, k)) return true;
    return false;
}

static const char *str_or_empty(const json_t *v) { return json_is_string(v) ? json_string_value(v) : ""; }

/* Fields at a value that asks for something this server does not do: refused by name. */
static bool neutral(const json_t *body, srv_err *e) {
    const json_t *tools = json_object_get(body, "tools"), *text = json_object_get(body, "text"),
                 *reasoning = json_object_get(body, "reasoning"), *trunc = json_object_get(body, "truncation"),
                 *include = json_object_get(body, "include"), *bg = json_object_get(body, "background");
    const json_t *fmt = json_object_get(text, "format");
    const char *why = NULL, *param = NULL;
    if (json_array_size(tools)) param = "tools", why = "tools in /v1/responses are not implemented (use /v1/chat/completions)";
    else if (fmt && !json_is_null(fmt) && strcmp(str_or_empty(json_object_get(fmt, "type")), "text"))
        param = "text", why = "'text.format' other than text is not implemented here (use response_format on /v1/chat/completions)";
    else if (reasoning && !json_is_null(reasoning)) param = "reasoning", why = "'reasoning' options are not implemented";
    else if (trunc && !json_is_null(trunc) && strcmp(str_or_empty(trunc), "disabled"))
        param = "truncation", why = "only 'truncation': \"disabled\" (a prompt over the context is a 400)";
    else if (json_array_size(include)) param = "include", why = "'include' is not implemented";
    else if (json_is_true(bg)) param = "background", why = "background responses are not implemented";
    if (!param) return true;
    srv_err_set(e, 400, param, "unsupported_parameter", "%s", why);
    return false;
}

/* One input item (a message: role and content) as a chat message appended to out. */
static bool input_item(const json_t *it, size_t i, json_t *out, srv_err *e) {
    const json_t *type = json_object_get(it, "type"), *role = json_object_get(it, "role"), *c = json_object_get(it, "content");
    if (!json_is_object(it) || (type && (!json_is_string(type) || strcmp(json_string_value(type), "message")))) {
        srv_err_set(e, 400, "input", "unsupported_parameter", "input[%zu]: only message items are supported here (got "
                    "'%s')", i, json_is_string(type) ? json_string_value(type) : "?");
        return false;
    }
    static const char *const roles[][2] = {{"user", "user"}, {"assistant", "assistant"}, {"system", "system"},
                                           {"developer", "system"}};
    const char *r = NULL;
    for (size_t k = 0; json_is_string(role) && k < sizeof roles / sizeof roles[0]; k++)
        if (!strcmp(json_string_value(role), roles[k][0])) r = roles[k][1];
    if (!r) {
        srv_err_set(e, 400, "input", "invalid_value", "input[%zu].role must be user, assistant, system or developer", i);
        return false;
    }
    if (json_is_string(c)) return !json_array_append_new(out, json_pack("{s:s,s:O}", "role", r, "content", c));
    if (!json_is_array(c)) {
        srv_err_set(e, 400, "input", "invalid_type", "input[%zu].content must be a string or an array of parts", i);
        return false;
    }
    json_t *parts = json_array();
    for (size_t k = 0; k < json_array_size(c); k++) {
        const json_t *p = json_array_get(c, k);
        const char *pt = json_string_value(json_object_get(p, "type"));
        if (!pt || (strcmp(pt, "input_text") && strcmp(pt, "output_text")) || !json_is_string(json_object_get(p, "text"))) {
            srv_err_set(e, 400, "input", "unsupported_parameter", "input[%zu].content[%zu]: only input_text and "
                        "output_text parts are supported (got '%s')", i, k, pt ? pt : "?");
            json_decref(parts);
            return false;
        }
        json_array_append_new(parts, json_pack("{s:s,s:O}", "type", "text", "text", json_object_get(p, "text")));
    }
    json_array_append_new(out, json_pack("{s:s,s:o}", "role", r, "content", parts));
    return true;
}

bool srv_api_parse_responses(const srv_api *a, const json_t *body, srv_req *r, srv_err *e) {
    if (!json_is_object(body)) {
        srv_err_set(e, 400, NULL, "invalid_json", "the request body must be a JSON object");
        return false;
    }
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)body, k, v) if (!known_field(k)) {
        srv_err_set(e, 400, NULL, "unsupported_parameter", "'%s' is not a field this server knows for /v1/responses", k);
        srv_err_param(e, k); /* the body goes before the error is sent */
        return false;
    }
    if (!neutral(body, e)) return false;
    const json_t *input = json_object_get(body, "input"), *ins = json_object_get(body, "instructions"),
                 *prev = json_object_get(body, "previous_response_id"), *salt = json_object_get(body, "cache_salt");
    if (!json_is_string(input) && !json_is_array(input)) {
        srv_err_set(e, 400, "input", "missing_required_parameter", "'input' (a text or a list of messages) is required");
        return false;
    }
    if (ins && !json_is_null(ins) && !json_is_string(ins)) {
        srv_err_set(e, 400, "instructions", "invalid_type", "'instructions' must be a string");
        return false;
    }
    /* the conversation: the previous response's (its instructions are not carried over, as OpenAI's), then the input */
    json_t *conv = NULL;
    if (prev && !json_is_null(prev)) {
        const uint64_t ns = json_is_string(salt) ? srv_api_namespace(a, json_string_value(salt), json_string_length(salt)) : 0;
        char *kept = json_is_string(prev) ? srv_resp_store_get(json_string_value(prev), ns) : NULL;
        conv = kept ? json_loads(kept, JSON_ALLOW_NUL, NULL) : NULL; /* an answer may hold U+0000 */
        free(kept);
        if (!json_is_array(conv)) {
            json_decref(conv);
            srv_err_set(e, 400, "previous_response_id", "invalid_value", "previous response '%s' not found (it was "
                        "not stored, or is no longer kept: the last %d are)",
                        json_is_string(prev) ? json_string_value(prev) : "?", SRV_RESP_STORE_MAX);
            return false;
        }
    }
    if (!conv) conv = json_array();
    bool ok = true;
    if (json_is_string(input)) json_array_append_new(conv, json_pack("{s:s,s:O}", "role", "user", "content", input));
    for (size_t i = 0; ok && json_is_array(input) && i < json_array_size(input); i++)
        ok = input_item(json_array_get(input, i), i, conv, e);
    json_t *msgs = json_array(), *chat = json_object();
    if (json_is_string(ins)) json_array_append_new(msgs, json_pack("{s:s,s:O}", "role", "system", "content", ins));
    json_array_extend(msgs, conv);
    json_object_set_new(chat, "messages", msgs);
    static const char *const same[][2] = {{"max_output_tokens", "max_tokens"}, {"temperature", "temperature"},
                                          {"top_p", "top_p"}, {"stream", "stream"}, {"cache_salt", "cache_salt"},
                                          {"prompt_cache_key", "prompt_cache_key"}};
    for (size_t i = 0; i < sizeof same / sizeof same[0]; i++)
        if (json_object_get(body, same[i][0])) json_object_set(chat, same[i][1], json_object_get(body, same[i][0]));
    ok = ok && srv_api_parse(a, chat, true, r, e);
    json_decref(chat);
    if (!ok && e->param && !strcmp(e->param, "max_tokens")) e->param = "max_output_tokens";
    if (ok) {
        r->responses = true;
        r->store = !json_is_false(json_object_get(body, "store"));
        if (json_is_string(prev)) snprintf(r->prev_id, sizeof r->prev_id, "%s", json_string_value(prev));
        char id[sizeof r->id];
        snprintf(id, sizeof id, "resp_%s", r->id + strcspn(r->id, "-") + 1); /* chatcmpl-X -> resp_X */
        memcpy(r->id, id, sizeof id);
        if (!(r->conv = json_dumps(conv, JSON_COMPACT))) {
            srv_err_set(e, 500, NULL, NULL, "out of memory");
            ok = false;
        }
    }
    json_decref(conv);
    return ok;
}

/* ---- the answer ---------------------------------------------------------------------------- */

static json_t *text_part(const char *s, size_t n) {
    return json_pack("{s:s,s:o,s:[]}", "type", "output_text", "text", srv_json_text(s, n), "annotations");
}

static json_t *message_item(const srv_req *r, json_t *content, const char *status) {
    char id[64];
    snprintf(id, sizeof id, "msg_%s", r->id + 5);
    return json_pack("{s:s,s:s,s:s,s:s,s:o}", "id", id, "type", "message", "status", status, "role", "assistant",
                     "content", content);
}

static json_t *reasoning_item(const srv_req *r, const char *s, size_t n) {
    char id[64];
    snprintf(id, sizeof id, "rs_%s", r->id + 5);
    return json_pack("{s:s,s:s,s:[],s:[{s:s,s:o}]}", "id", id, "type", "reasoning", "summary", "content", "type",
                     "reasoning_text", "text", srv_json_text(s, n));
}

/* The response object: status in_progress (no output yet), or its final status with output and usage. */
static json_t *response_obj(const srv_api *a, const srv_req *r, json_t *output) {
    const bool done = output != NULL, cut = done && r->finish_reason && !strcmp(r->finish_reason, "length");
    json_t *o = json_pack("{s:s,s:s,s:I,s:s,s:s,s:o,s:o,s:n,s:o,s:f,s:f,s:b,s:s,s:[],s:b,s:{s:{s:s}}}", "id", r->id,
                          "object", "response", "created_at", (json_int_t)r->created, "status",
                          !done ? "in_progress" : cut ? "incomplete" : "completed", "model", a->model_id, "output",
                          output ? output : json_array(), "incomplete_details",
                          cut ? json_pack("{s:s}", "reason", "max_output_tokens") : json_null(), "error",
                          "previous_response_id", *r->prev_id ? json_string(r->prev_id) : json_null(), "temperature",
                          (double)r->sp.temperature, "top_p", (double)r->sp.top_p, "store", r->store, "tool_choice",
                          "auto", "tools", "parallel_tool_calls", 1, "text", "format", "type", "text");
    if (o && done)
        json_object_set_new(o, "usage", json_pack("{s:I,s:{s:I},s:i,s:{s:i},s:I}", "input_tokens", (json_int_t)r->n_prompt,
                                                  "input_tokens_details", "cached_tokens", (json_int_t)r->n_cached,
                                                  "output_tokens", r->n_gen, "output_tokens_details", "reasoning_tokens",
                                                  0, "total_tokens", (json_int_t)r->n_prompt + r->n_gen));
    return o;
}

/* Keep the conversation and this answer for a later previous_response_id (unless store was false). */
static void keep(const srv_req *r, const char *answer, size_t n) {
    json_t *conv = r->store && r->conv ? json_loads(r->conv, 0, NULL) : NULL;
    if (!conv) return;
    json_array_append_new(conv, json_pack("{s:s,s:o}", "role", "assistant", "content", srv_json_text(answer, n)));
    char *s = json_dumps(conv, JSON_COMPACT);
    if (s) srv_resp_store_put(r->id, r->ns, s);
    free(s);
    json_decref(conv);
}

static srv_think_split split(const srv_req *r, size_t n, bool final) {
    return r->think ? srv_think_split_text(r->text, n, r->think_open, final) : (srv_think_split){0, 0, 0, n};
}

/* The final output items: the reasoning (for templates with think markers), then the message. */
static json_t *output(const srv_req *r, srv_think_split sp) {
    json_t *out = json_array();
    if (sp.r1 > sp.r0) json_array_append_new(out, reasoning_item(r, r->text + sp.r0, sp.r1 - sp.r0));
    json_array_append_new(out, message_item(r, json_pack("[o]", text_part(r->text + sp.c0, sp.c1 - sp.c0)), "completed"));
    return out;
}

char *srv_responses_response(const srv_api *a, srv_req *r) {
    pthread_mutex_lock(&r->mu);
    const srv_think_split sp = split(r, r->text_len, true);
    json_t *o = response_obj(a, r, output(r, sp));
    keep(r, r->text + sp.c0, sp.c1 - sp.c0);
    pthread_mutex_unlock(&r->mu);
    char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    return s;
}

/* ---- the stream ------------------------------------------------------------------------------ */

typedef struct emit {
    srv_responses_stream *st;
    void (*pend)(void *u, char *ev);
    void *u;
} emit;

/* "event: TYPE\ndata: {o, with type and sequence_number}\n\n" (o's reference is taken). */
static void event(emit *em, const char *type, json_t *o) {
    if (o) json_object_set_new(o, "type", json_string(type)), json_object_set_new(o, "sequence_number", json_integer(em->st->seq++));
    char *body = o ? json_dumps(o, JSON_COMPACT) : NULL, *ev = NULL;
    json_decref(o);
    if (body && (ev = malloc(strlen(type) + strlen(body) + 18))) sprintf(ev, "event: %s\ndata: %s\n\n", type, body);
    free(body);
    em->pend(em->u, ev);
}

/* The message item's output index: after the reasoning item, when there is one. */
static int msg_index(const srv_responses_stream *st) { return st->reasoning_sent ? 1 : 0; }

static void open_item(emit *em, const srv_req *r, srv_think_split sp) {
    if (em->st->item_open) return;
    if (sp.r1 > sp.r0) { /* the reasoning, whole, once it is settled */
        json_t *it = reasoning_item(r, r->text + sp.r0, sp.r1 - sp.r0);
        event(em, "response.output_item.added", json_pack("{s:i,s:O}", "output_index", 0, "item", it));
        event(em, "response.output_item.done", json_pack("{s:i,s:o}", "output_index", 0, "item", it));
        em->st->reasoning_sent = true;
    }
    json_t *item = message_item(r, json_array(), "in_progress");
    const char *id = json_string_value(json_object_get(item, "id"));
    event(em, "response.output_item.added",
          json_pack("{s:i,s:O}", "output_index", msg_index(em->st), "item", item));
    event(em, "response.content_part.added", json_pack("{s:s,s:i,s:i,s:o}", "item_id", id, "output_index",
                                                       msg_index(em->st), "content_index", 0, "part", text_part("", 0)));
    json_decref(item);
    em->st->item_open = true;
}

bool srv_responses_stream_events(const srv_api *a, srv_req *r, srv_responses_stream *st,
                                 void (*pend)(void *u, char *ev), void *u) {
    emit em = {st, pend, u};
    if (st->finished) return false;
    bool any = false;
    if (!st->started) {
        event(&em, "response.created", json_pack("{s:o}", "response", response_obj(a, r, NULL)));
        event(&em, "response.in_progress", json_pack("{s:o}", "response", response_obj(a, r, NULL)));
        st->started = any = true;
    }
    if (!r->done && r->text_ready <= st->sent) return any;
    const srv_think_split sp = split(r, r->text_ready, r->done);
    char item_id[64];
    snprintf(item_id, sizeof item_id, "msg_%s", r->id + 5);
    if (sp.c1 - sp.c0 > st->sent_c) {
        open_item(&em, r, sp);
        event(&em, "response.output_text.delta",
              json_pack("{s:s,s:i,s:i,s:o,s:[]}", "item_id", item_id, "output_index", msg_index(st), "content_index", 0,
                        "delta", srv_json_text(r->text + sp.c0 + st->sent_c, sp.c1 - sp.c0 - st->sent_c), "logprobs"));
        st->sent_c = sp.c1 - sp.c0;
    }
    st->sent = r->text_ready;
    if (r->done) {
        if (r->failed) {
            json_t *resp = response_obj(a, r, NULL);
            json_object_set_new(resp, "status", json_string("failed"));
            json_object_set_new(resp, "error", json_pack("{s:s,s:s}", "code", "server_error", "message", r->err_msg));
            event(&em, "response.failed", json_pack("{s:o}", "response", resp));
        } else {
            open_item(&em, r, sp);
            const char *c = r->text + sp.c0;
            const size_t n = sp.c1 - sp.c0;
            event(&em, "response.output_text.done", json_pack("{s:s,s:i,s:i,s:o,s:[]}", "item_id", item_id, "output_index",
                                                              msg_index(st), "content_index", 0, "text",
                                                              srv_json_text(c, n), "logprobs"));
            event(&em, "response.content_part.done", json_pack("{s:s,s:i,s:i,s:o}", "item_id", item_id, "output_index",
                                                               msg_index(st), "content_index", 0, "part", text_part(c, n)));
            event(&em, "response.output_item.done",
                  json_pack("{s:i,s:o}", "output_index", msg_index(st), "item",
                            message_item(r, json_pack("[o]", text_part(c, n)), "completed")));
            event(&em, "response.completed", json_pack("{s:o}", "response", response_obj(a, r, output(r, sp))));
            keep(r, c, n);
        }
        st->finished = true;
    }
    return true;
}
