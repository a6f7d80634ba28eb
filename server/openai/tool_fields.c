/*
 * tool_fields.c — the request fields of tool calling (tools, tool_choice,
 * parallel_tool_calls) and the tool_calls of responses and stream chunks;
 * the syntax itself is tool_calls.c's.
 */
#include "tool_fields.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* OpenAI's rule for function names; it also keeps them literal in a grammar. */
static bool valid_name(const char *s) {
    size_t n = 0;
    for (; s[n]; n++)
        if (!((s[n] >= 'a' && s[n] <= 'z') || (s[n] >= 'A' && s[n] <= 'Z') || (s[n] >= '0' && s[n] <= '9') ||
              s[n] == '_' || s[n] == '-'))
            return false;
    return n >= 1 && n <= 64;
}

/* Every tool well formed and no name twice: one pass, the names seen in a set (a jansson object, whose hash
   table is seeded per process), so the check is linear in the body however many tools it holds. */
static bool check_tools(const json_t *tools, srv_err *e) {
    if (!json_is_array(tools)) {
        srv_err_set(e, 400, "tools", "invalid_type", "'tools' must be an array");
        return false;
    }
    json_t *seen = json_object();
    if (!seen) {
        srv_err_set(e, 500, NULL, NULL, "out of memory");
        return false;
    }
    bool ok = true;
    for (size_t i = 0; ok && i < json_array_size(tools); i++) {
        const json_t *t = json_array_get(tools, i), *type = json_object_get(t, "type"),
                     *fn = json_object_get(t, "function");
        const json_t *name = json_object_get(fn, "name"), *params = json_object_get(fn, "parameters");
        ok = false;
        if (!json_is_object(t) || !json_is_string(type) || strcmp(json_string_value(type), "function") ||
            !json_is_object(fn)) {
            srv_err_set(e, 400, "tools", "invalid_value", "tools[%zu] must be {\"type\": \"function\", \"function\": "
                        "{\"name\": ..., \"parameters\": {...}}}", i);
        } else if (!json_is_string(name) || !valid_name(json_string_value(name))) {
            srv_err_set(e, 400, "tools", "invalid_value", "tools[%zu].function.name must be 1 to 64 letters, digits, "
                        "underscores or dashes", i);
        } else if (params && !json_is_null(params) && !json_is_object(params)) {
            srv_err_set(e, 400, "tools", "invalid_type", "tools[%zu].function.parameters must be an object (a JSON "
                        "schema)", i);
        } else if (json_object_get(seen, json_string_value(name))) {
            srv_err_set(e, 400, "tools", "invalid_value", "tools[%zu]: the function '%s' is defined twice", i,
                        json_string_value(name));
        } else if (json_object_set_new(seen, json_string_value(name), json_true())) {
            srv_err_set(e, 500, NULL, NULL, "out of memory");
        } else {
            ok = true;
        }
    }
    json_decref(seen);
    return ok;
}

bool srv_api_parse_tools(const srv_api *a, const json_t *body, srv_req *r, srv_err *e) {
    const json_t *tools = json_object_get(body, "tools"), *tc = json_object_get(body, "tool_choice"),
                 *ptc = json_object_get(body, "parallel_tool_calls");
    const bool has_tools = tools && !json_is_null(tools);
    if (has_tools && !check_tools(tools, e)) return false;
    if (ptc && !json_is_null(ptc) && !json_is_boolean(ptc)) {
        srv_err_set(e, 400, "parallel_tool_calls", "invalid_type", "'parallel_tool_calls' must be a boolean");
        return false;
    }
    const bool parallel = !json_is_false(ptc);
    const char *only = NULL;
    bool forced = false, none = !has_tools || !json_array_size(tools);
    if (tc && !json_is_null(tc)) {
        if (json_is_string(tc)) {
            const char *s = json_string_value(tc);
            if (!strcmp(s, "none")) none = true;
            else if (!strcmp(s, "required")) forced = true;
            else if (strcmp(s, "auto")) {
                srv_err_set(e, 400, "tool_choice", "invalid_value", "'tool_choice' must be \"none\", \"auto\", "
                            "\"required\" or {\"type\": \"function\", \"function\": {\"name\": ...}} (got \"%s\")", s);
                return false;
            }
        } else {
            const json_t *type = json_object_get(tc, "type"), *name = json_object_get(json_object_get(tc, "function"),
                                                                                       "name");
            if (!json_is_object(tc) || !json_is_string(type) || strcmp(json_string_value(type), "function") ||
                !json_is_string(name)) {
                srv_err_set(e, 400, "tool_choice", "invalid_value", "'tool_choice' must be \"none\", \"auto\", "
                            "\"required\" or {\"type\": \"function\", \"function\": {\"name\": ...}}");
                return false;
            }
            only = json_string_value(name);
            forced = true;
        }
        if (forced && (!has_tools || !json_array_size(tools))) {
            srv_err_set(e, 400, "tool_choice", "invalid_value", "'tool_choice' asks for a tool call but 'tools' is %s",
                        has_tools ? "empty" : "missing");
            return false;
        }
        bool known = !only;
        for (size_t i = 0; !known && i < json_array_size(tools); i++)
            known = !strcmp(only, json_string_value(json_object_get(json_object_get(json_array_get(tools, i),
                                                                                    "function"), "name")));
        if (!known) {
            srv_err_set(e, 400, "tool_choice", "invalid_value", "'tool_choice' names the function '%.64s', which is "
                        "not in 'tools'", only);
            return false;
        }
    }
    if (none) return true;
    r->tools = true;
    r->tool_format = (int)a->tools;
    r->tool_defs = json_incref((json_t *)tools);
    r->special_text = a->tools != SRV_TOOLS_GENERIC; /* its markers are often control tokens */
    if (!forced) return true;
    if (r->own_grammar) {
        srv_err_set(e, 400, "tool_choice", "invalid_value", "'tool_choice' \"%s\" constrains the answer to a tool "
                    "call: it cannot be combined with 'grammar' or 'response_format'", only ? only : "required");
        return false;
    }
    char err[256];
    char *g = srv_tools_grammar(a->tools, tools, only, parallel, r->think_open, err, sizeof err);
    if (!g) {
        srv_err_set(e, strcmp(err, "out of memory") ? 400 : 500, "tools", "invalid_value",
                    "the parameters of a function cannot be enforced: %s", err);
        return false;
    }
    const tkv_status st = tkv_grammar_create(a->model, g, strlen(g), NULL, &r->own_grammar);
    free(g);
    if (st) {
        srv_err_set(e, st == TKV_ERR_NOMEM ? 500 : 400, "tools", "invalid_value",
                    "the grammar of the tool calls does not compile: %s", tkv_last_error(NULL));
        return false;
    }
    r->grammar = r->own_grammar;
    r->tool_forced = true;
    return true;
}

const char *srv_api_finish_reason(const srv_req *r, size_t n_calls) {
    if (n_calls && r->finish_reason && !strcmp(r->finish_reason, "stop")) return "tool_calls";
    return r->finish_reason;
}

/* One call of a message or a delta; with_args false: arguments "" (the first delta of a streamed call). */
static json_t *call_json(const srv_req *r, size_t k, const srv_tool_call *c, bool delta, bool with_args) {
    char id[32];
    srv_tools_call_id(r->id, (size_t)r->index * 1000 + k, id);
    json_t *o = json_pack("{s:s,s:s,s:{s:s,s:s}}", "id", id, "type", "function", "function", "name", c->name,
                          "arguments", with_args ? c->arguments : "");
    if (o && delta) json_object_set_new(o, "index", json_integer((json_int_t)k));
    return o;
}

json_t *srv_api_tool_calls_json(const srv_req *r, const srv_tool_parse *p) {
    json_t *a = json_array();
    for (size_t k = 0; k < p->n_calls; k++) json_array_append_new(a, call_json(r, k, &p->calls[k], false, true));
    return a;
}

char *srv_api_tool_chunk(const srv_api *a, const srv_req *r, size_t k, const srv_tool_call *c, bool head, bool first) {
    json_t *call = head ? call_json(r, k, c, true, false)
                        : json_pack("{s:I,s:{s:s}}", "index", (json_int_t)k, "function", "arguments", c->arguments);
    json_t *delta = json_pack("{s:[o]}", "tool_calls", call);
    if (delta && first) json_object_set_new(delta, "role", json_string("assistant"));
    json_t *o = json_pack("{s:s,s:s,s:I,s:s,s:s,s:[{s:i,s:o,s:n,s:n}]}", "id", r->id, "object", "chat.completion.chunk",
                          "created", (json_int_t)r->created, "model", a->model_id, "system_fingerprint", "tokenkv",
                          "choices", "index", r->index, "delta", delta, "logprobs", "finish_reason");
    if (o && r->include_usage) json_object_set_new(o, "usage", json_null());
    char *body = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    if (!body) return NULL;
    char *ev = malloc(strlen(body) + 9);
    if (ev) sprintf(ev, "data: %s\n\n", body);
    free(body);
    return ev;
}
