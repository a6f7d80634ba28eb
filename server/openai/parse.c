/*
 * parse.c — OpenAI request parsing and validation: /v1/completions and
 * /v1/chat/completions bodies into a srv_req, and a chat body's prompt.
 */
#include "parse.h"
#include "legacy_fields.h"
#include "reasoning.h"
#include "tool_fields.h"

#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <xxhash.h>

static bool tokenize(const srv_api *a, const char *text, size_t len, const char *param, srv_req *r, srv_err *e) {
    tkv_status st = srv_tokenize(a->model, text, len, TKV_TOKENIZE_ADD_SPECIAL | TKV_TOKENIZE_PARSE_SPECIAL,
                                 &r->prompt, &r->n_prompt);
    if (st == TKV_ERR_NOMEM) srv_err_set(e, 500, NULL, NULL, "out of memory");
    else if (st) srv_err_set(e, 400, param, "invalid_value", "'%s' cannot be tokenized: %s", param, tkv_last_error(a->model));
    return st == TKV_OK;
}

static bool token_array(const srv_api *a, const json_t *arr, srv_req *r, srv_err *e) {
    const size_t n = json_array_size(arr), n_vocab = tkv_vocab_size(a->model);
    r->prompt = malloc((n ? n : 1) * sizeof *r->prompt);
    if (!r->prompt) {
        srv_err_set(e, 500, NULL, NULL, "out of memory");
        return false;
    }
    for (size_t i = 0; i < n; i++) {
        const json_t *t = json_array_get(arr, i);
        if (!json_is_integer(t)) {
            srv_err_set(e, 400, "prompt", "invalid_type", "prompt[%zu] must be a token id (an integer)", i);
            return false;
        }
        long long id = json_integer_value(t);
        if (id < 0 || (unsigned long long)id >= n_vocab) {
            srv_err_set(e, 400, "prompt", "invalid_value", "prompt[%zu]: token id %lld is out of range (vocabulary of %zu)",
                        i, id, n_vocab);
            return false;
        }
        r->prompt[i] = (tkv_token)id;
    }
    r->n_prompt = n;
    return true;
}

/* llama-server's mixed prompt: token ids and texts in one array, each text tokenized in its place (the first
   element, if a text, with the BOS). */
static bool mixed_prompt(const srv_api *a, const json_t *arr, srv_req *r, srv_err *e) {
    const size_t n_vocab = tkv_vocab_size(a->model);
    size_t n = 0, cap = 0;
    for (size_t i = 0; i < json_array_size(arr); i++) {
        const json_t *x = json_array_get(arr, i);
        tkv_token one, *t = &one;
        size_t k = 1;
        if (json_is_integer(x)) {
            if (json_integer_value(x) < 0 || (unsigned long long)json_integer_value(x) >= n_vocab) {
                srv_err_set(e, 400, "prompt", "invalid_value", "prompt[%zu]: token id %lld is out of range (vocabulary "
                            "of %zu)", i, (long long)json_integer_value(x), n_vocab);
                return false;
            }
            one = (tkv_token)json_integer_value(x);
        } else if (!json_is_string(x) ||
                   srv_tokenize(a->model, json_string_value(x), json_string_length(x),
                                TKV_TOKENIZE_PARSE_SPECIAL | (i == 0 ? TKV_TOKENIZE_ADD_SPECIAL : 0u), &t, &k)) {
            srv_err_set(e, 400, "prompt", "invalid_value", "prompt[%zu] must be a token id or a text", i);
            return false;
        }
        if (n + k > cap) {
            cap = 2 * (n + k) + 16;
            tkv_token *p = realloc(r->prompt, cap * sizeof *p);
            if (!p) {
                if (t != &one) free(t);
                srv_err_set(e, 500, NULL, NULL, "out of memory");
                return false;
            }
            r->prompt = p;
        }
        if (k) memcpy(r->prompt + n, t, k * sizeof *t);
        n += k;
        if (t != &one) free(t);
    }
    r->n_prompt = n;
    if (!n) srv_err_set(e, 400, "prompt", "invalid_value", "'prompt' is empty");
    return n > 0;
}

/* Whether arr holds both token ids and texts (llama-server's mixed prompt) and nothing else. */
static bool is_mixed(const json_t *arr) {
    bool ints = false, strs = false;
    for (size_t i = 0; i < json_array_size(arr); i++) {
        const json_t *x = json_array_get(arr, i);
        if (json_is_integer(x)) ints = true;
        else if (json_is_string(x)) strs = true;
        else return false;
    }
    return ints && strs;
}

size_t srv_api_prompt_count(const json_t *body) {
    const json_t *p = json_object_get(body, "prompt");
    if (!json_is_array(p) || json_array_size(p) < 2 || is_mixed(p) || json_is_integer(json_array_get(p, 0))) return 1;
    return json_array_size(p);
}

/* prompt: a string, an array of token ids, (native) llama-server's mixed array of both, or a one-element array of
   any */
static bool parse_prompt(const srv_api *a, const json_t *body, srv_req *r, srv_err *e) {
    const json_t *p = json_object_get(body, "prompt");
    if (!p) {
        srv_err_set(e, 400, "prompt", "missing_required_parameter", "'prompt' is required");
        return false;
    }
    if (json_is_array(p) && json_array_size(p) == 1 &&
        (json_is_string(json_array_get(p, 0)) || json_is_array(json_array_get(p, 0))))
        p = json_array_get(p, 0);
    if (json_is_array(p) && r->native && is_mixed(p)) return mixed_prompt(a, p, r, e); /* llama-server's only */
    if (json_is_array(p) && json_array_size(p) > 1 && !json_is_integer(json_array_get(p, 0))) {
        srv_err_set(e, 400, "prompt", "invalid_value", "only one prompt per request is supported (got %zu)",
                    json_array_size(p));
        return false;
    }
    if (json_is_string(p)) {
        if (!json_string_length(p)) {
            srv_err_set(e, 400, "prompt", "invalid_value", "'prompt' is empty");
            return false;
        }
        return tokenize(a, json_string_value(p), json_string_length(p), "prompt", r, e);
    }
    if (json_is_array(p)) {
        if (!json_array_size(p)) {
            srv_err_set(e, 400, "prompt", "invalid_value", "'prompt' is empty");
            return false;
        }
        return token_array(a, p, r, e);
    }
    srv_err_set(e, 400, "prompt", "invalid_type", "'prompt' must be a string or an array of token ids");
    return false;
}

/* The text of a message's content: a string, null, or an array of
   {"type": "text", "text": ...} parts, concatenated; *len bytes, which may
   hold NULs (an earlier answer sent back). *owned is set when the result was
   allocated. */
static const char *content_text(const json_t *c, size_t i, char **owned, size_t *len, srv_err *e) {
    *owned = NULL;
    *len = 0;
    if (!c || json_is_null(c)) return "";
    if (json_is_string(c)) return *len = json_string_length(c), json_string_value(c);
    if (!json_is_array(c)) {
        srv_err_set(e, 400, "messages", "invalid_type", "messages[%zu].content must be a string or an array of text parts", i);
        return NULL;
    }
    size_t n = 0;
    for (size_t k = 0; k < json_array_size(c); k++) {
        const json_t *part = json_array_get(c, k), *type = json_object_get(part, "type"),
                     *text = json_object_get(part, "text");
        if (!json_is_string(type) || strcmp(json_string_value(type), "text") || !json_is_string(text)) {
            srv_err_set(e, 400, "messages", "invalid_value",
                        "messages[%zu].content[%zu]: only {\"type\": \"text\", \"text\": \"...\"} parts are supported", i, k);
            return NULL;
        }
        n += json_string_length(text);
    }
    char *s = malloc(n + 1);
    if (!s) {
        srv_err_set(e, 500, NULL, NULL, "out of memory");
        return NULL;
    }
    size_t at = 0;
    for (size_t k = 0; k < json_array_size(c); k++) {
        const json_t *text = json_object_get(json_array_get(c, k), "text");
        memcpy(s + at, json_string_value(text), json_string_length(text));
        at += json_string_length(text);
    }
    s[at] = 0;
    *len = at;
    return *owned = s;
}

/*
 * The prompt of a chat request through the model's Jinja template: the
 * variables transformers passes (messages as the client sent them, tools or
 * none, add_generation_prompt, the BOS and EOS texts), then the keys of
 * chat_template_kwargs. A BOS the template prints first is dropped when the
 * tokenizer adds one itself (it would be doubled). malloc'd, *len bytes.
 */
static char *render_vars(const srv_api *a, const json_t *tools, const json_t *kw, const json_t *messages, bool agp,
                         size_t *len, srv_err *e);

static char *render_jinja(const srv_api *a, const json_t *body, size_t *len, srv_err *e) {
    const json_t *tools = json_object_get(body, "tools"), *kw = json_object_get(body, "chat_template_kwargs");
    if (tools && !json_is_null(tools) && !json_is_array(tools)) {
        srv_err_set(e, 400, "tools", "invalid_type", "'tools' must be an array");
        return NULL;
    }
    if (kw && !json_is_null(kw) && !json_is_object(kw)) {
        srv_err_set(e, 400, "chat_template_kwargs", "invalid_type", "'chat_template_kwargs' must be an object");
        return NULL;
    }
    /* tool-call arguments as objects, as templates print them (tojson); a template that wants the string
       (it concatenates it) raises on an object: then it gets the messages as they were sent */
    bool agp = true; /* add_generation_prompt: false renders the conversation as it stands */
    if (!srv_field_bool(body, "add_generation_prompt", &agp, e)) return NULL;
    json_t *msgs = srv_tools_messages(json_object_get(body, "messages"));
    char *out = render_vars(a, tools, kw, msgs ? msgs : json_object_get(body, "messages"), agp, len, e);
    if (!out && msgs && e->status == 400) out = render_vars(a, tools, kw, json_object_get(body, "messages"), agp, len, e);
    json_decref(msgs);
    return out;
}

/* render_jinja with these messages. */
static char *render_vars(const srv_api *a, const json_t *tools, const json_t *kw, const json_t *messages, bool agp,
                         size_t *len, srv_err *e) {
    json_t *v = json_object();
    json_object_set(v, "messages", (json_t *)messages);
    json_object_set(v, "tools", tools ? (json_t *)tools : json_null());
    json_object_set_new(v, "documents", json_null());
    json_object_set_new(v, "add_generation_prompt", json_boolean(agp));
    const tkv_token bos = tkv_token_bos(a->model), eos = tkv_token_eos(a->model);
    const char *bos_t = bos == TKV_TOKEN_NULL ? NULL : tkv_token_text(a->model, bos);
    const char *eos_t = eos == TKV_TOKEN_NULL ? NULL : tkv_token_text(a->model, eos);
    if (bos_t) json_object_set_new(v, "bos_token", json_string(bos_t));
    if (eos_t) json_object_set_new(v, "eos_token", json_string(eos_t));
    const char *k;
    json_t *x;
    json_object_foreach((json_t *)a->template_kwargs, k, x) json_object_set(v, k, x); /* the server's, then the request's */
    json_object_foreach((json_t *)kw, k, x) json_object_set(v, k, x);
    char *vars = json_dumps(v, JSON_COMPACT), *text = NULL, *out = NULL;
    json_decref(v);
    size_t n = 0;
    tkv_status st = vars ? tkv_chat_template_render(a->jinja, vars, NULL, &text, &n) : TKV_ERR_NOMEM;
    free(vars);
    if (st) {
        if (st == TKV_ERR_NOMEM) srv_err_set(e, 500, NULL, NULL, "out of memory");
        else srv_err_set(e, 400, "messages", "invalid_value", "the chat template failed: %s", tkv_last_error(NULL));
        return NULL;
    }
    size_t skip = 0;
    if (bos_t && *bos_t && tkv_tokenizer_adds_bos(a->model) && !strncmp(text, bos_t, strlen(bos_t)))
        skip = strlen(bos_t);
    if ((out = malloc(n - skip + 1))) {
        memcpy(out, text + skip, n - skip + 1);
        *len = n - skip;
    } else {
        srv_err_set(e, 500, NULL, NULL, "out of memory");
    }
    tkv_free(text);
    return out;
}

char *srv_api_chat_prompt(const srv_api *a, const json_t *body, size_t *len, bool *prefilled, srv_err *e) {
    const json_t *m = json_object_get(body, "messages");
    if (!m) {
        srv_err_set(e, 400, "messages", "missing_required_parameter", "'messages' is required");
        return NULL;
    }
    if (!json_is_array(m) || !json_array_size(m)) {
        srv_err_set(e, 400, "messages", "invalid_value", "'messages' must be a non-empty array");
        return NULL;
    }
    const size_t n = json_array_size(m);
    srv_chat_msg *msgs = calloc(n, sizeof *msgs);
    char **owned = calloc(n, sizeof *owned);
    bool ok = msgs && owned;
    if (!ok) srv_err_set(e, 500, NULL, NULL, "out of memory");
    for (size_t i = 0; ok && i < n; i++) { /* the same checks whichever renders */
        const json_t *msg = json_array_get(m, i), *role = json_object_get(msg, "role");
        if (!json_is_object(msg) || !json_is_string(role)) {
            srv_err_set(e, 400, "messages", "invalid_value", "messages[%zu] must be an object with a string 'role'", i);
            ok = false;
            break;
        }
        msgs[i].role = json_string_value(role);
        msgs[i].content = content_text(json_object_get(msg, "content"), i, &owned[i], &msgs[i].content_len, e);
        ok = msgs[i].content != NULL;
    }
    char *text = NULL, err[256];
    const json_t *agp = json_object_get(body, "add_generation_prompt"), *cfm = json_object_get(body, "continue_final_message");
    /* assistant prefill, as llama-server (and vLLM's continue_final_message): a final assistant message with text
       is the start of the answer, which continues it, instead of a closed turn */
    const bool cont = json_is_true(cfm);
    const bool prefill = ok && n > 1 && !strcmp(msgs[n - 1].role, "assistant") && msgs[n - 1].content_len &&
                         !json_array_size(json_object_get(json_array_get(m, n - 1), "tool_calls")) &&
                         (cont || (!json_is_false(agp) && !a->no_prefill));
    if (ok && cfm && !json_is_null(cfm) && !json_is_boolean(cfm)) {
        srv_err_set(e, 400, "continue_final_message", "invalid_type", "'continue_final_message' must be a boolean");
        ok = false;
    } else if (ok && cont && json_is_true(agp)) {
        srv_err_set(e, 400, "continue_final_message", "invalid_value", "'continue_final_message' and "
                    "'add_generation_prompt' both true: the answer either continues the last message or starts anew");
        ok = false;
    } else if (ok && cont && !prefill) {
        srv_err_set(e, 400, "continue_final_message", "invalid_value", "'continue_final_message' needs a last message "
                    "from the assistant, with text to continue");
        ok = false;
    } else if (ok && prefill && !strcmp(msgs[n - 2].role, "assistant")) {
        srv_err_set(e, 400, "messages", "invalid_value", "two assistant messages at the end: the last one would be "
                    "continued after the other (merge them)");
        ok = false;
    } else if (ok && !a->jinja && json_is_false(agp) && !prefill) {
        srv_err_set(e, 400, "add_generation_prompt", "unsupported_parameter", "'add_generation_prompt': false needs a "
                    "Jinja chat template (this server renders the %s family, which always ends with the prompt)",
                    srv_chat_name(a->chat));
        ok = false;
    }
    if (prefilled) *prefilled = prefill;
    const size_t n_render = prefill ? n - 1 : n; /* a prefill: the conversation before it, then its text */
    if (ok && a->jinja) {
        json_t *b = prefill ? json_copy((json_t *)body) : NULL, *mm = prefill ? json_array() : NULL;
        for (size_t i = 0; mm && i < n_render; i++) json_array_append(mm, json_array_get(m, i));
        if (b && mm) {
            json_object_set(b, "messages", mm);
            json_object_set_new(b, "add_generation_prompt", json_true());
        }
        if (prefill && (!b || !mm)) srv_err_set(e, 500, NULL, NULL, "out of memory");
        else text = render_jinja(a, prefill ? b : body, len, e);
        json_decref(mm);
        json_decref(b);
    } else if (ok) {
        tkv_token bos = tkv_token_bos(a->model), eos = tkv_token_eos(a->model);
        const char *bos_t = bos == TKV_TOKEN_NULL ? "" : tkv_token_text(a->model, bos);
        const char *eos_t = eos == TKV_TOKEN_NULL ? "" : tkv_token_text(a->model, eos);
        if (!srv_chat_render(a->chat, msgs, n_render, bos_t, eos_t, &text, len, err, sizeof err))
            srv_err_set(e, 400, "messages", "invalid_value", "%s", err);
    }
    if (text && prefill) {
        const size_t k = msgs[n - 1].content_len;
        char *t = realloc(text, *len + k + 1);
        if (t) {
            memcpy(t + *len, msgs[n - 1].content, k);
            t[*len += k] = 0;
        } else {
            free(text);
            srv_err_set(e, 500, NULL, NULL, "out of memory");
        }
        text = t;
    }
    for (size_t i = 0; owned && i < n; i++) free(owned[i]);
    free(owned);
    free(msgs);
    return text;
}

static bool parse_messages(const srv_api *a, const json_t *body, srv_req *r, srv_err *e) {
    const json_t *rf = json_object_get(body, "reasoning_format");
    if (rf && !json_is_null(rf) &&
        (!json_is_string(rf) || (strcmp(json_string_value(rf), "none") && strcmp(json_string_value(rf), "auto") &&
                                 strcmp(json_string_value(rf), "deepseek")))) {
        srv_err_set(e, 400, "reasoning_format", "invalid_value", "'reasoning_format' must be \"none\", \"auto\" or "
                    "\"deepseek\"");
        return false;
    }
    size_t len = 0;
    char *text = srv_api_chat_prompt(a, body, &len, &r->prefill, e);
    const bool ok = text && tokenize(a, text, len, "messages", r, e);
    const bool none = json_is_string(rf) ? !strcmp(json_string_value(rf), "none") : a->reasoning_none;
    r->think = ok && a->think && !none;
    r->think_open = r->think && srv_think_open(text, len);
    free(text);
    return ok;
}

static bool parse_stop(const json_t *body, srv_req *r, srv_err *e) {
    const json_t *s = json_object_get(body, "stop");
    if (!s || json_is_null(s)) return true;
    const json_t *one[1] = {s};
    size_t n = json_is_string(s) ? 1 : json_is_array(s) ? json_array_size(s) : 0;
    if (!json_is_string(s) && !json_is_array(s)) {
        srv_err_set(e, 400, "stop", "invalid_type", "'stop' must be a string or an array of strings");
        return false;
    }
    if (n > SRV_MAX_STOP) {
        srv_err_set(e, 400, "stop", "invalid_value", "'stop' has %zu strings; at most %d are allowed", n, SRV_MAX_STOP);
        return false;
    }
    size_t bytes = 0;
    for (size_t i = 0; i < n; i++) {
        const json_t *v = json_is_string(s) ? one[0] : json_array_get(s, i);
        if (!json_is_string(v) || !json_string_length(v)) {
            srv_err_set(e, 400, "stop", "invalid_value", "stop[%zu] must be a non-empty string", i);
            return false;
        }
        /* the text held back until it cannot begin a stop string is as long as the longest one */
        if ((bytes += json_string_length(v)) > SRV_MAX_STOP_BYTES) {
            srv_err_set(e, 400, "stop", "invalid_value", "the stop strings are %zu bytes or more; at most %d are allowed",
                        bytes, SRV_MAX_STOP_BYTES);
            return false;
        }
        if (!(r->stop[r->n_stop] = strdup(json_string_value(v)))) {
            srv_err_set(e, 500, NULL, NULL, "out of memory");
            return false;
        }
        r->n_stop++;
    }
    return true;
}

/* The GBNF of response_format (json_object, json_schema), malloc'd; NULL with *none (type "text", or no field)
   or with *e set. */
static char *schema_gbnf(const json_t *schema, const char *param, srv_err *e);

static char *response_format_gbnf(const json_t *body, bool *none, srv_err *e) {
    const json_t *rf = json_object_get(body, "response_format"), *top = json_object_get(body, "json_schema");
    const bool has_rf = rf && !json_is_null(rf), has_top = top && !json_is_null(top);
    *none = !has_rf && !has_top;
    if (has_rf && has_top) {
        srv_err_set(e, 400, "json_schema", "invalid_value", "give 'json_schema' or 'response_format', not both");
        return NULL;
    }
    if (has_top) return schema_gbnf(top, "json_schema", e); /* llama-server's top-level schema */
    if (*none) return NULL;
    const json_t *type = json_object_get(rf, "type");
    if (!json_is_object(rf) || !json_is_string(type)) {
        srv_err_set(e, 400, "response_format", "invalid_type", "'response_format' must be an object with a string 'type'");
        return NULL;
    }
    const char *t = json_string_value(type), *schema_text = NULL;
    char *owned = NULL, *gbnf = NULL;
    if (!strcmp(t, "text")) {
        *none = true;
        return NULL;
    } else if (!strcmp(t, "json_object") && json_object_get(rf, "schema") && !json_is_null(json_object_get(rf, "schema"))) {
        return schema_gbnf(json_object_get(rf, "schema"), "response_format", e); /* llama-server's schema in json_object */
    } else if (!strcmp(t, "json_object")) {
        schema_text = "{\"type\": \"object\"}";
    } else if (!strcmp(t, "json_schema")) {
        const json_t *js = json_object_get(rf, "json_schema"), *schema = json_object_get(js, "schema");
        if (!json_is_object(js) || !schema) {
            srv_err_set(e, 400, "response_format", "missing_required_parameter",
                        "'response_format.json_schema.schema' is required for type json_schema");
            return NULL;
        }
        if (!(owned = json_dumps(schema, JSON_COMPACT | JSON_ENCODE_ANY))) {
            srv_err_set(e, 500, NULL, NULL, "out of memory");
            return NULL;
        }
        schema_text = owned;
    } else {
        srv_err_set(e, 400, "response_format", "invalid_value",
                    "'response_format.type' must be text, json_object or json_schema (got '%s')", t);
        return NULL;
    }
    tkv_status st = tkv_json_schema_to_gbnf(schema_text, strlen(schema_text), &gbnf);
    free(owned);
    if (st) {
        srv_err_set(e, st == TKV_ERR_NOMEM ? 500 : 400, "response_format", "invalid_value", "'response_format': %s",
                    tkv_last_error(NULL));
        return NULL;
    }
    char *copy = strdup(gbnf);
    tkv_free(gbnf);
    if (!copy) srv_err_set(e, 500, NULL, NULL, "out of memory");
    return copy;
}

/*
 * The grammar a request's output follows: `grammar` (GBNF, llama.cpp's
 * field) or `response_format` (JSON, OpenAI's), compiled here, once, for
 * this request; else the server's --grammar-file, if any. Both fields at
 * once are refused.
 */
/* The GBNF of a JSON schema given as `param`, malloc'd; NULL with *e set. */
static char *schema_gbnf(const json_t *schema, const char *param, srv_err *e) {
    if (!json_is_object(schema)) {
        srv_err_set(e, 400, param, "invalid_type", "'%s': the schema must be an object", param);
        return NULL;
    }
    char *text = json_dumps(schema, JSON_COMPACT), *gbnf = NULL;
    tkv_status st = text ? tkv_json_schema_to_gbnf(text, strlen(text), &gbnf) : TKV_ERR_NOMEM;
    free(text);
    if (st) {
        srv_err_set(e, st == TKV_ERR_NOMEM ? 500 : 400, param, "invalid_value", "'%s': %s", param, tkv_last_error(NULL));
        return NULL;
    }
    char *copy = strdup(gbnf);
    tkv_free(gbnf);
    if (!copy) srv_err_set(e, 500, NULL, NULL, "out of memory");
    return copy;
}

static bool parse_grammar(const srv_api *a, const json_t *body, srv_req *r, srv_err *e) {
    const json_t *g = json_object_get(body, "grammar");
    bool no_format;
    char *from_format = response_format_gbnf(body, &no_format, e);
    if (!from_format && !no_format) return false;
    const bool has_g = g && !json_is_null(g);
    if (has_g && from_format) {
        free(from_format);
        srv_err_set(e, 400, "grammar", "invalid_value", "give 'grammar' or 'response_format', not both");
        return false;
    }
    if (has_g && !json_is_string(g)) {
        srv_err_set(e, 400, "grammar", "invalid_type", "'grammar' must be a string (GBNF)");
        return false;
    }
    if (!has_g && !from_format) {
        r->grammar = a->grammar;
        return true;
    }
    const char *text = has_g ? json_string_value(g) : from_format;
    const size_t len = has_g ? json_string_length(g) : strlen(from_format);
    const tkv_status st = tkv_grammar_create(a->model, text, len, NULL, &r->own_grammar);
    free(from_format);
    if (st) {
        srv_err_set(e, st == TKV_ERR_NOMEM ? 500 : 400, has_g ? "grammar" : "response_format", "invalid_value",
                    "'%s': %s", has_g ? "grammar" : "response_format", tkv_last_error(NULL));
        return false;
    }
    r->grammar = r->own_grammar;
    return true;
}

/* One logit_bias entry into r->bias (*n of *cap used): key, a token id or (llama-server's) a text whose every token
   gets the bias; v, a number in [-100, 100] or (llama-server's) false: never. */
static bool add_bias(const srv_api *a, const char *key, bool is_id, long long id, const json_t *v, srv_req *r, size_t *n,
                     size_t *cap, srv_err *e) {
    const size_t n_vocab = tkv_vocab_size(a->model);
    if (!json_is_false(v) && (!json_is_number(v) || json_number_value(v) < -100 || json_number_value(v) > 100)) {
        srv_err_set(e, 400, "logit_bias", "invalid_value", "logit_bias[%.32s] must be a number in [-100, 100] or false",
                    key);
        return false;
    }
    const float bias = json_is_false(v) ? -1e30f : (float)json_number_value(v); /* never: finite, so no inf - inf */
    tkv_token one = (tkv_token)id, *t = &one;
    size_t k = 1;
    if (is_id && (id < 0 || (unsigned long long)id >= n_vocab)) {
        srv_err_set(e, 400, "logit_bias", "invalid_value", "logit_bias: %lld is not a token id of this model (0..%zu)",
                    id, n_vocab - 1);
        return false;
    }
    if (!is_id && (srv_tokenize(a->model, key, strlen(key), 0, &t, &k) || !t)) {
        srv_err_set(e, 400, "logit_bias", "invalid_value", "logit_bias: cannot tokenize '%.32s'", key);
        return false;
    }
    bool ok = *n + k <= 1024;
    if (!ok) srv_err_set(e, 400, "logit_bias", "invalid_value", "'logit_bias' has more than 1024 token entries");
    if (ok && *n + k > *cap) {
        size_t c = *cap ? *cap : 16;
        while (c < *n + k) c *= 2;
        tkv_logit_bias *nb = realloc(r->bias, c * sizeof *nb);
        if (!(ok = nb != NULL)) srv_err_set(e, 500, NULL, NULL, "out of memory");
        else r->bias = nb, *cap = c;
    }
    for (size_t i = 0; ok && i < k; i++) r->bias[(*n)++] = (tkv_logit_bias){t[i], bias};
    if (t != &one) free(t);
    return ok;
}

/* logit_bias into r->bias (*n entries): OpenAI's {"token id": bias}, or llama-server's forms, {"text": bias} and
   [[id or "text", bias or false], ...]. */
static bool parse_logit_bias(const srv_api *a, const json_t *body, srv_req *r, size_t *n, srv_err *e) {
    const json_t *lb = json_object_get(body, "logit_bias");
    size_t cap = 0;
    *n = 0;
    if (!lb || json_is_null(lb)) return true;
    if (!json_is_object(lb) && !json_is_array(lb)) {
        srv_err_set(e, 400, "logit_bias", "invalid_type", "'logit_bias' must be an object of token ids to numbers, or "
                    "an array of [token id or text, bias] pairs");
        return false;
    }
    if (json_is_array(lb)) {
        for (size_t i = 0; i < json_array_size(lb); i++) {
            const json_t *pair = json_array_get(lb, i), *x = json_array_get(pair, 0);
            if (json_array_size(pair) != 2 || (!json_is_integer(x) && !json_is_string(x))) {
                srv_err_set(e, 400, "logit_bias", "invalid_value", "logit_bias[%zu] must be [token id or text, bias]", i);
                return false;
            }
            char key[32];
            snprintf(key, sizeof key, "%lld", (long long)json_integer_value(x));
            if (!add_bias(a, json_is_string(x) ? json_string_value(x) : key, json_is_integer(x), json_integer_value(x),
                          json_array_get(pair, 1), r, n, &cap, e))
                return false;
        }
        return true;
    }
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)lb, k, v) {
        char *end;
        const long long id = strtoll(k, &end, 10);
        const bool is_id = *k && !*end && strspn(k, "-0123456789") == strlen(k);
        if (!*k || !add_bias(a, k, is_id, id, v, r, n, &cap, e)) {
            if (!*k) srv_err_set(e, 400, "logit_bias", "invalid_value", "logit_bias: an empty key");
            return false;
        }
    }
    return true;
}

/*
 * logprobs: chat's `logprobs` (a boolean) with `top_logprobs` (0..20), or
 * the completions' legacy `logprobs` (0..5 alternatives) into r->logprobs.
 */
static bool parse_logprobs(const json_t *body, bool chat, srv_req *r, srv_err *e) {
    const json_t *lp = json_object_get(body, "logprobs"), *top = json_object_get(body, "top_logprobs");
    long long n = 0;
    if (chat) {
        bool on = false;
        if (!srv_field_bool(body, "logprobs", &on, e) || !srv_field_int(body, "top_logprobs", 0, SRV_MAX_TOP_LOGPROBS, &n, e))
            return false;
        if (top && !json_is_null(top) && !on) {
            srv_err_set(e, 400, "top_logprobs", "invalid_value", "'top_logprobs' needs 'logprobs': true");
            return false;
        }
        if (!on) return true;
    } else {
        if (!lp || json_is_null(lp)) return true;
        if (!srv_field_int(body, "logprobs", 0, 5, &n, e)) return false;
    }
    r->logprobs = (int)n;
    return true;
}

/*
 * OpenAI request fields this server does not implement: a 400 naming the
 * field, never silent acceptance (a client that asks for logprobs or audio
 * must not get an answer without them). Fields that ask for nothing (null,
 * false, "auto", "text" modalities, default values) pass. Unknown vendor
 * fields are ignored.
 */
static bool refuse_unimplemented(const json_t *body, bool chat, srv_err *e) {
    static const char *const never[] = {"audio", "prediction", "web_search_options", "functions", "function_call",
                                        "best_of"};
    for (size_t i = 0; i < sizeof never / sizeof never[0]; i++) {
        const json_t *v = json_object_get(body, never[i]);
        if (v && !json_is_null(v) && !(json_is_integer(v) && !strcmp(never[i], "best_of") && json_integer_value(v) == 1)) {
            srv_err_set(e, 400, never[i], "unsupported_parameter", "'%s' is not supported by this server", never[i]);
            return false;
        }
    }
    /* llama-server's sampler and limit fields that are not implemented: accepted at their neutral value only, so
       that a request that asks for one is refused by name rather than sampled without it */
    static const struct {
        const char *key;
        double neutral;
    } neutral[] = {{"typical_p", 1}, {"tfs_z", 1}, {"top_n_sigma", -1}, {"dynatemp_range", 0}, {"xtc_probability", 0},
                   {"repeat_last_n", 64}, {"penalty_last_n", 64}, {"n_indent", 0}, {"t_max_predict_ms", 0},
                   {"min_keep", 0}, {"mirostat", 0}, {"dry_multiplier", 0}};
    for (size_t i = 0; i < sizeof neutral / sizeof neutral[0]; i++) {
        const json_t *v = json_object_get(body, neutral[i].key);
        if (v && !json_is_null(v) && !(json_is_number(v) && json_number_value(v) == neutral[i].neutral)) {
            srv_err_set(e, 400, neutral[i].key, "unsupported_parameter",
                        "'%s' is not supported by this server (only %g, which turns it off)", neutral[i].key,
                        neutral[i].neutral);
            return false;
        }
    }
    if (json_is_true(json_object_get(body, "post_sampling_probs"))) {
        srv_err_set(e, 400, "post_sampling_probs", "unsupported_parameter", "'post_sampling_probs' is llama-server's "
                    "/completion field (with n_probs); the OpenAI routes' logprobs are the model's");
        return false;
    }
    const json_t *lazy = json_object_get(body, "grammar_lazy"), *trig = json_object_get(body, "grammar_triggers");
    if (json_is_true(lazy) || json_array_size(trig)) {
        srv_err_set(e, 400, json_is_true(lazy) ? "grammar_lazy" : "grammar_triggers", "unsupported_parameter",
                    "lazy grammars (grammar_lazy, grammar_triggers) are not supported by this server");
        return false;
    }
    const json_t *modalities = json_object_get(body, "modalities");
    (void)chat;
    for (size_t i = 0; i < json_array_size(modalities); i++)
        if (!json_is_string(json_array_get(modalities, i)) || strcmp(json_string_value(json_array_get(modalities, i)), "text")) {
            srv_err_set(e, 400, "modalities", "unsupported_parameter", "only the \"text\" modality is supported");
            return false;
        }
    return true;
}

/*
 * n_keep and n_discard (llama-server's), and with --context-shift a prompt that does not fit its window cut as
 * llama-server cuts it: the first n_keep tokens stay, then whole blocks of half the rest of the window go from
 * the front of what follows, so that the end of the prompt and some room for the answer remain.
 */
static bool parse_shift(const srv_api *a, const json_t *body, srv_req *r, srv_err *e) {
    long long keep = a->defaults.n_keep, discard = 0;
    if (!srv_field_int(body, "n_keep", -1, INT_MAX, &keep, e) || !srv_field_int(body, "n_discard", 0, INT_MAX, &discard, e))
        return false;
    r->n_keep = (int)keep, r->n_discard = (int)discard;
    const size_t w = a->shift_window;
    if (!w || r->n_prompt < w) return true;
    size_t k = keep < 0 ? r->n_prompt : (size_t)keep;
    if (k > w - 4) k = w - 4;                   /* room for the rest: the window is at least 16 (server.c) */
    const size_t block = (w - k) / 2;
    const size_t erased = (r->n_prompt - k - block) / block;
    memmove(r->prompt + k, r->prompt + k + erased * block, (r->n_prompt - k - erased * block) * sizeof *r->prompt);
    r->n_prompt -= erased * block;
    r->truncated = true;
    return true;
}

/*
 * Drafts from the cache, with llama-server's per-request names: speculative.n_max (the most drafts verified per
 * step, 0: off; the server's --draft where not given) and speculative.n_min (a shorter draft is not verified; above
 * n_max it is n_max, as llama-server clamps it). speculative.p_min and speculative.type choose a draft model's
 * threshold and the kind of drafter, which this server does not have: refused by name.
 */
static bool parse_draft(const srv_api *a, const json_t *body, srv_req *r, srv_err *e) {
    static const char *const refused[] = {"speculative.p_min", "speculative.type"};
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        const json_t *v = json_object_get(body, refused[i]);
        if (v && !json_is_null(v)) {
            srv_err_set(e, 400, refused[i], "unsupported_parameter", "'%s' is not supported by this server: drafts "
                        "come from the cache (speculative.n_max, speculative.n_min), not from a draft model", refused[i]);
            return false;
        }
    }
    long long n_max = a->defaults.draft, n_min = 0;
    if (!srv_field_int(body, "speculative.n_max", 0, TKV_DRAFT_MAX, &n_max, e) ||
        !srv_field_int(body, "speculative.n_min", 0, TKV_DRAFT_MAX, &n_min, e))
        return false;
    r->draft_max = (int)n_max, r->draft_min = (int)(n_min < n_max ? n_min : n_max);
    return true;
}

void srv_api_choice(srv_req *first, srv_req *r, size_t i) {
    memcpy(r->id, first->id, sizeof r->id);
    r->created = first->created;
    r->index = (int)i;
    r->sp.seed = first->sp.seed + i; /* with a seed, choices still differ from each other, reproducibly */
    first->group = r->group = XXH3_64bits(first->id, strlen(first->id)) | 1;
}

static void make_id(srv_req *r, const char *prefix) {
    static unsigned long long counter; /* ids only need to differ */
    unsigned long long c = __atomic_add_fetch(&counter, 1, __ATOMIC_RELAXED);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    snprintf(r->id, sizeof r->id, "%s%012llx%08llx", prefix, (unsigned long long)XXH3_64bits(&ts, sizeof ts) >> 16, c);
    r->created = (int64_t)ts.tv_sec;
}

bool srv_api_parse(const srv_api *a, const json_t *body, bool chat, srv_req *r, srv_err *e) {
    if (!json_is_object(body)) {
        srv_err_set(e, 400, NULL, "invalid_json", "the request body must be a JSON object");
        return false;
    }
    r->chat = chat;
    make_id(r, chat ? "chatcmpl-" : "cmpl-");
    if (!(chat ? parse_messages(a, body, r, e) : parse_prompt(a, body, r, e))) return false;
    if (!chat && !srv_api_parse_legacy(a, body, r, e)) return false;
    if (!parse_shift(a, body, r, e) || !parse_draft(a, body, r, e)) return false;
    if (r->n_prompt >= a->n_ctx) {
        srv_err_set(e, 400, chat ? "messages" : "prompt", "context_length_exceeded",
                    "the prompt (%zu tokens) exceeds the available context size (%u tokens, prompt and completion)",
                    r->n_prompt, a->n_ctx);
        return false;
    }

    long long n = 1, max_tokens = -1, seed = -1;
    if (!srv_field_int(body, "n", 1, SRV_MAX_CHOICES, &n, e)) return false;
    r->n_choices = (int)n;
    const char *mt_key = chat && json_object_get(body, "max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
    const json_t *mt = json_object_get(body, mt_key);
    if (mt && json_is_integer(mt) && (json_integer_value(mt) <= 0 || json_integer_value(mt) > a->max_tokens)) {
        srv_err_set(e, 400, mt_key, "invalid_value", "'%s' must be between 1 and %d (this server's --max-tokens), got %lld",
                    mt_key, a->max_tokens, (long long)json_integer_value(mt));
        return false;
    }
    if (!srv_field_int(body, mt_key, 1, a->max_tokens, &max_tokens, e)) return false;
    /* a context shift makes room as the answer grows: only max_tokens bounds it */
    const long long room = a->shift_window ? LLONG_MAX : (long long)a->n_ctx - (long long)r->n_prompt;
    const long long np = a->defaults.n_predict; /* --n-predict: the length of a request that gives none */
    if (max_tokens < 0) max_tokens = np > 0 ? np : chat ? a->max_tokens : 16; /* OpenAI's default for completions */
    r->max_tokens = (int)(max_tokens < room ? max_tokens : room);
    /* n choices generate n completions at once: together they stay within what one request may ask */
    if (n > 1 && n * r->max_tokens > SRV_MAX_CHOICES * (long long)a->max_tokens / 2) {
        srv_err_set(e, 400, "n", "invalid_value", "n = %lld choices of %d tokens each is too much: n * %s must be at "
                    "most %lld on this server", n, r->max_tokens, mt_key, SRV_MAX_CHOICES * (long long)a->max_tokens / 2);
        return false;
    }

    /* OpenAI's sampling defaults: temperature 1, no top-p cut; top_k, min_p
       and repeat_penalty are llama.cpp-style extensions, off by default */
    tkv_sampler_params sp = tkv_sampler_default_params();
    const srv_defaults *d = &a->defaults; /* the server's (--temp, ...) where given */
    double temperature = isnan(d->temperature) ? 1 : d->temperature, top_p = isnan(d->top_p) ? 1 : d->top_p;
    double min_p = isnan(d->min_p) ? 0 : d->min_p, rp = isnan(d->repeat_penalty) ? 1 : d->repeat_penalty;
    long long top_k = d->top_k >= 0 ? d->top_k : 0;
    if (!srv_field_number(body, "temperature", 0, 2, &temperature, e) || !srv_field_number(body, "top_p", 0, 1, &top_p, e) ||
        !srv_field_int(body, "top_k", 0, 1000000000, &top_k, e) || !srv_field_number(body, "min_p", 0, 1, &min_p, e) ||
        !srv_field_number(body, "repeat_penalty", 0, 10, &rp, e) || !srv_field_int(body, "seed", LLONG_MIN, LLONG_MAX, &seed, e))
        return false;
    size_t n_bias = 0;
    double presence = isnan(d->presence_penalty) ? 0 : d->presence_penalty;
    double frequency = isnan(d->frequency_penalty) ? 0 : d->frequency_penalty;
    if (!srv_field_number(body, "presence_penalty", -2, 2, &presence, e) ||
        !srv_field_number(body, "frequency_penalty", -2, 2, &frequency, e) || !parse_logit_bias(a, body, r, &n_bias, e))
        return false;
    sp.presence_penalty = (float)presence, sp.frequency_penalty = (float)frequency;
    sp.logit_bias = r->bias, sp.n_logit_bias = n_bias;
    sp.temperature = (float)temperature, sp.top_p = (float)top_p, sp.top_k = (int32_t)top_k;
    sp.min_p = (float)min_p, sp.repeat_penalty = (float)rp;
    /* no seed: the server's --seed; -1 (also the server's default): a random one, of 32 bits as llama-server's, so
       that a client (JavaScript's numbers hold 53) can send the reported seed back */
    if (!json_is_integer(json_object_get(body, "seed"))) seed = d->seed;
    sp.seed = seed == -1 ? XXH3_64bits(r->id, strlen(r->id)) & 0xffffffffu : (uint64_t)seed;
    r->sp = sp;

    r->ignore_eos = d->ignore_eos;
    if (!srv_field_bool(body, "stream", &r->stream, e) || !srv_field_bool(body, "return_tokens", &r->return_tokens, e) ||
        !srv_field_bool(body, "ignore_eos", &r->ignore_eos, e) || !parse_stop(body, r, e))
        return false;
    if (!srv_field_bool(body, "return_progress", &r->return_progress, e)) return false;
    if (r->return_progress && !r->stream) { /* llama-server reports progress in streams only */
        srv_err_set(e, 400, "return_progress", "invalid_value", "'return_progress' needs 'stream': true (the "
                    "progress of a prompt is reported as stream events)");
        return false;
    }
    const json_t *so = json_object_get(body, "stream_options");
    if (so && !json_is_null(so)) {
        if (!json_is_object(so)) {
            srv_err_set(e, 400, "stream_options", "invalid_type", "'stream_options' must be an object");
            return false;
        }
        if (!r->stream) {
            srv_err_set(e, 400, "stream_options", "invalid_value", "'stream_options' is only allowed when 'stream' is true");
            return false;
        }
        if (!srv_field_bool(so, "include_usage", &r->include_usage, e)) {
            e->param = "stream_options.include_usage";
            return false;
        }
    }
    const json_t *salt = json_object_get(body, "cache_salt");
    if (salt && !json_is_null(salt)) {
        if (!json_is_string(salt) || !json_string_length(salt)) {
            srv_err_set(e, 400, "cache_salt", "invalid_value", "'cache_salt' must be a non-empty string");
            return false;
        }
        r->ns = srv_api_namespace(a, json_string_value(salt), json_string_length(salt));
    }
    /* OpenAI's cache-affinity hint: balancers route on it (deploy/haproxy.cfg); here the cache finds shared
       prefixes by itself, so it is only checked */
    const json_t *pck = json_object_get(body, "prompt_cache_key");
    if (pck && !json_is_null(pck) && !json_is_string(pck)) {
        srv_err_set(e, 400, "prompt_cache_key", "invalid_type", "'prompt_cache_key' must be a string");
        return false;
    }
    if (!parse_grammar(a, body, r, e)) return false;
    if (chat && !srv_api_parse_tools(a, body, r, e)) return false;
    if (!refuse_unimplemented(body, chat, e) || !parse_logprobs(body, chat, r, e)) return false;
    if (r->echo && r->logprobs >= 0) { /* they would need the prompt tokens' log-probabilities, not computed here */
        srv_err_set(e, 400, "echo", "unsupported_parameter", "'echo' together with 'logprobs' is not supported by this "
                    "server (the prompt's log-probabilities are not computed)");
        return false;
    }
    const json_t *model = json_object_get(body, "model");
    if (model && !json_is_string(model) && !json_is_null(model)) {
        srv_err_set(e, 400, "model", "invalid_type", "'model' must be a string");
        return false;
    }
    return true;
}

