/*
 * tool_calls.c — tool calls: detecting a template's call syntax, reading calls
 * back from a model's answer, and the grammar that forces one (tool_calls.h).
 */
#include "tool_calls.h"

#include "tokenkv.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

/* ---- markers -------------------------------------------------------------------- */

#define DS_CALLS_BEGIN "<\xEF\xBD\x9Ctool\xE2\x96\x81" "calls\xE2\x96\x81" "begin\xEF\xBD\x9C>"
#define DS_CALLS_END "<\xEF\xBD\x9Ctool\xE2\x96\x81" "calls\xE2\x96\x81" "end\xEF\xBD\x9C>"
#define DS_CALL_BEGIN "<\xEF\xBD\x9Ctool\xE2\x96\x81" "call\xE2\x96\x81" "begin\xEF\xBD\x9C>"
#define DS_CALL_END "<\xEF\xBD\x9Ctool\xE2\x96\x81" "call\xE2\x96\x81" "end\xEF\xBD\x9C>"
#define DS_SEP "<\xEF\xBD\x9Ctool\xE2\x96\x81" "sep\xEF\xBD\x9C>"

/* What opens a call, per format (the first one found counts); and what may
   close or separate calls, skipped after each. */
typedef struct syntax {
    const char *open[3];
    const char *close[4];
} syntax;

static const syntax SYNTAX[] = {
    [SRV_TOOLS_GENERIC] = {{NULL}, {NULL}},
    [SRV_TOOLS_HERMES] = {{"<tool_call>"}, {"</tool_call>"}},
    [SRV_TOOLS_LLAMA3] = {{"<|python_tag|>"}, {";", "<|eom_id|>"}},
    [SRV_TOOLS_MISTRAL] = {{"[TOOL_CALLS]"}, {NULL}},
    [SRV_TOOLS_MISTRAL_ARGS] = {{"[TOOL_CALLS]"}, {NULL}},
    [SRV_TOOLS_DEEPSEEK] = {{DS_CALLS_BEGIN, DS_CALL_BEGIN}, {DS_CALL_END, DS_CALLS_END, "```"}},
    [SRV_TOOLS_HARMONY] = {{"to=functions."}, {"<|call|>", "<|end|>"}},
    [SRV_TOOLS_XML] = {{"<tool_call>"}, {"</tool_call>"}},
    [SRV_TOOLS_SEED_XML] = {{"<seed:tool_call>"}, {"</seed:tool_call>"}},
};

static bool contains(const char *s, size_t n, const char *m) {
    const size_t k = strlen(m);
    for (size_t i = 0; i + k <= n; i++)
        if (!memcmp(s + i, m, k)) return true;
    return false;
}

srv_tool_format srv_tools_detect(const char *t, size_t n) {
    if (!t) return SRV_TOOLS_GENERIC;
    if (contains(t, n, "[TOOL_CALLS]")) return contains(t, n, "[ARGS]") ? SRV_TOOLS_MISTRAL_ARGS : SRV_TOOLS_MISTRAL;
    /* DeepSeek's markers are written with U+2581 between words */
    if (contains(t, n, "tool\xE2\x96\x81" "call")) return SRV_TOOLS_DEEPSEEK;
    if (contains(t, n, "<|channel|>") && contains(t, n, "functions")) return SRV_TOOLS_HARMONY;
    if (contains(t, n, "<function=") && contains(t, n, "<parameter="))
        return contains(t, n, "<seed:tool_call>") ? SRV_TOOLS_SEED_XML : SRV_TOOLS_XML;
    if (contains(t, n, "<tool_call>")) return SRV_TOOLS_HERMES;
    if (contains(t, n, "<|python_tag|>") || (contains(t, n, "<|start_header_id|>") && contains(t, n, "\"parameters\"")))
        return SRV_TOOLS_LLAMA3;
    return SRV_TOOLS_GENERIC;
}

const char *srv_tools_format_name(srv_tool_format f) {
    static const char *const names[] = {"generic", "hermes", "llama3",  "mistral", "mistral-args",
                                        "deepseek", "harmony", "xml", "seed-xml"};
    return (unsigned)f < sizeof names / sizeof names[0] ? names[f] : "generic";
}

/* ---- reading calls ----------------------------------------------------------------- */

static bool space(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

static size_t skip_space(const char *t, size_t i, size_t n) {
    while (i < n && space(t[i])) i++;
    return i;
}

static bool starts(const char *t, size_t i, size_t n, const char *m) {
    const size_t k = strlen(m);
    return n - i >= k && !memcmp(t + i, m, k);
}

/* t[i, n) is a proper, non-empty prefix of m: more text may complete it. */
static bool partial_of(const char *t, size_t i, size_t n, const char *m) {
    const size_t k = strlen(m);
    return i < n && n - i < k && !memcmp(t + i, m, n - i);
}

static size_t find(const char *t, size_t from, size_t n, const char *m) {
    const size_t k = strlen(m);
    for (size_t i = from; i + k <= n; i++)
        if (!memcmp(t + i, m, k)) return i;
    return n;
}

/* The last occurrence of m in t[from, to), or `to`. */
static size_t rfind(const char *t, size_t from, size_t to, const char *m) {
    const size_t k = strlen(m);
    for (size_t i = to; i-- > from;)
        if (i + k <= to && !memcmp(t + i, m, k)) return i;
    return to;
}

typedef enum { ONE_CALL, ONE_INCOMPLETE, ONE_INVALID } one_result;

typedef struct parser {
    srv_tool_parse *p;
    size_t cap;
    bool oom;
    const json_t *tools; /* the request's, for the types of an XML call's values (may be NULL) */
} parser;

static bool push(parser *ps, const char *name, size_t name_len, char *args) {
    srv_tool_parse *p = ps->p;
    if (p->n_calls == ps->cap) {
        size_t cap = ps->cap ? 2 * ps->cap : 4;
        srv_tool_call *c = realloc(p->calls, cap * sizeof *c);
        if (!c) return free(args), ps->oom = true, false;
        p->calls = c, ps->cap = cap;
    }
    char *nm = malloc(name_len + 1);
    if (!nm) return free(args), ps->oom = true, false;
    memcpy(nm, name, name_len), nm[name_len] = 0;
    p->calls[p->n_calls++] = (srv_tool_call){nm, args};
    return true;
}

/* The arguments as compact JSON text: an object, or a string that encodes one; NULL otherwise. */
static char *args_text(const json_t *a) {
    if (json_is_object(a)) return json_dumps(a, JSON_COMPACT);
    if (!json_is_string(a)) return NULL;
    json_t *o = json_loadb(json_string_value(a), json_string_length(a), 0, NULL);
    char *s = json_is_object(o) ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    return s;
}

/* A call object: {"name", "arguments" | "parameters"}, or OpenAI's {"function": {...}}. */
static bool call_object(parser *ps, const json_t *o, bool commit) {
    const json_t *fn = json_object_get(o, "function");
    if (json_is_object(fn)) o = fn;
    const json_t *name = json_object_get(o, "name"), *args = json_object_get(o, "arguments");
    if (!args) args = json_object_get(o, "parameters");
    if (!json_is_object(o) || !json_is_string(name) || !json_string_length(name) || !args) return false;
    char *a = args_text(args);
    if (!a) return false;
    if (!commit) return free(a), true;
    return push(ps, json_string_value(name), json_string_length(name), a);
}

/* One JSON object or array at t[*i, n) (after whitespace); *i moves past it. NULL: not (yet) one. */
static json_t *json_at(const char *t, size_t *i, size_t n) {
    size_t at = skip_space(t, *i, n);
    if (at == n || (t[at] != '{' && t[at] != '[')) return NULL;
    json_error_t e;
    json_t *v = json_loadb(t + at, n - at, JSON_DISABLE_EOF_CHECK, &e);
    if (v) *i = at + e.position;
    return v;
}

/* The arguments object at t[*i, n) into a call named t[name, name + len). */
static one_result args_call(parser *ps, const char *t, size_t *i, size_t n, size_t name, size_t len, bool final) {
    size_t at = *i;
    json_t *v = json_at(t, &at, n);
    char *a = json_is_object(v) ? json_dumps(v, JSON_COMPACT) : NULL;
    const bool was = v != NULL;
    json_decref(v);
    if (!a) return was || final ? ONE_INVALID : ONE_INCOMPLETE;
    if (!len) return free(a), ONE_INVALID;
    *i = at;
    return push(ps, t + name, len, a) ? ONE_CALL : ONE_INVALID;
}

static bool name_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-' ||
           c == '.';
}

/* Where a harmony call's header begins: back from its "to=functions." over the header's other parts
   (<|start|>assistant, <|channel|>commentary), which never contain a <|message|>. */
static size_t harmony_header(const char *t, size_t at) {
    size_t h = at;
    for (;;) {
        size_t s = rfind(t, 0, h, "<|start|>"), c = rfind(t, 0, h, "<|channel|>");
        size_t b = s == h ? c : c == h ? s : (s > c ? s : c);
        if (b == h || find(t, b, at, "<|message|>") < at) return h;
        h = b;
    }
}

/* The first place at or after `from` where a call opens, or n; *len: its marker's length. */
static size_t find_open(srv_tool_format f, const char *t, size_t from, size_t n) {
    size_t best = n;
    for (int k = 0; k < 3 && SYNTAX[f].open[k]; k++) {
        size_t at = find(t, from, n, SYNTAX[f].open[k]);
        if (at < best) best = at;
    }
    if (f == SRV_TOOLS_HARMONY && best < n) {
        size_t h = harmony_header(t, best);
        best = h < from ? from : h;
    }
    if (f == SRV_TOOLS_LLAMA3 && from < n && t[from] == '{') best = from; /* its JSON needs no marker */
    return best;
}

/* The type the schema of parameter `param` of function `fn` (in the request's tools) gives its value: "string",
   "boolean", ... (of a list of types, the one that is not "null"), or NULL when the tools do not say. */
static const char *param_type(const json_t *tools, const char *fn, size_t fn_len, const char *param) {
    for (size_t i = 0; i < json_array_size(tools); i++) {
        const json_t *f = json_object_get(json_array_get(tools, i), "function");
        const json_t *name = json_object_get(f, "name");
        if (!json_is_string(name) || json_string_length(name) != fn_len || memcmp(json_string_value(name), fn, fn_len))
            continue;
        const json_t *type = json_object_get(json_object_get(json_object_get(json_object_get(f, "parameters"),
                                                                             "properties"), param), "type");
        if (json_is_string(type)) return json_string_value(type);
        const char *one = NULL;
        for (size_t k = 0; k < json_array_size(type); k++) {
            const char *ty = json_string_value(json_array_get(type, k));
            if (!ty || !strcmp(ty, "null")) continue;
            if (one) return NULL; /* several: the value says which */
            one = ty;
        }
        return one;
    }
    return NULL;
}

static bool text_is(const char *t, size_t n, const char *a, const char *b) {
    return (n == strlen(a) && !memcmp(t, a, n)) || (n == strlen(b) && !memcmp(t, b, n));
}

/* An XML call's value t[v, e) as JSON. The newline after the parameter's tag and the one before its closing tag
   are the syntax's, not the value's. A string parameter's value is its text; any other's is the JSON it spells,
   or, as the templates print values with Python's str(), True, False or None; else its text. */
static json_t *xml_value(const parser *ps, const char *fn, size_t fn_len, const char *param, const char *t, size_t v,
                         size_t e) {
    if (v < e && t[v] == '\n') v++;
    if (e > v && t[e - 1] == '\n') e--;
    const char *type = param_type(ps->tools, fn, fn_len, param);
    if (type && !strcmp(type, "string")) return json_stringn_nocheck(t + v, e - v);
    json_t *j = json_loadb(t + v, e - v, JSON_DECODE_ANY, NULL);
    if (j) return j;
    if (text_is(t + v, e - v, "True", "true")) return json_true();
    if (text_is(t + v, e - v, "False", "false")) return json_false();
    if (text_is(t + v, e - v, "None", "null")) return json_null();
    return json_stringn_nocheck(t + v, e - v);
}

/* An XML call at t[*i] (just past its opening marker): <function=N>, then <parameter=P>VALUE</parameter> for
   each argument, then </function>. A JSON call object in the marker is read as hermes writes it. */
static one_result xml_call(parser *ps, const char *t, size_t *i, size_t n, bool final) {
    const one_result short_text = final ? ONE_INVALID : ONE_INCOMPLETE;
    size_t at = skip_space(t, *i, n);
    if (at == n || partial_of(t, at, n, "<function=")) return short_text;
    if (t[at] == '{') {
        json_t *v = json_at(t, &at, n);
        if (!v) return short_text;
        const bool ok = call_object(ps, v, true);
        json_decref(v);
        if (!ok) return ONE_INVALID;
        *i = at;
        return ONE_CALL;
    }
    if (!starts(t, at, n, "<function=")) return ONE_INVALID;
    const size_t name = at += strlen("<function=");
    while (at < n && t[at] != '>' && t[at] != '\n' && t[at] != '<') at++;
    if (at == n) return short_text;
    const size_t len = at - name;
    if (t[at] != '>' || !len) return ONE_INVALID;
    json_t *args = json_object();
    if (!args) return ps->oom = true, ONE_INVALID;
    one_result r = ONE_INVALID;
    for (at++;;) {
        at = skip_space(t, at, n);
        if (at == n || partial_of(t, at, n, "</function>") || partial_of(t, at, n, "<parameter=")) {
            r = short_text;
            break;
        }
        if (starts(t, at, n, "</function>")) {
            at += strlen("</function>");
            char *a = json_dumps(args, JSON_COMPACT);
            if (!a) ps->oom = true;
            else if (push(ps, t + name, len, a)) r = ONE_CALL, *i = at;
            break;
        }
        if (!starts(t, at, n, "<parameter=")) break;
        const size_t pn = at += strlen("<parameter=");
        while (at < n && t[at] != '>' && t[at] != '\n' && t[at] != '<') at++;
        if (at == n) {
            r = short_text;
            break;
        }
        if (t[at] != '>' || at == pn || at - pn > 255) break;
        char param[256];
        memcpy(param, t + pn, at - pn), param[at - pn] = 0;
        const size_t v = at + 1, e = find(t, v, n, "</parameter>");
        if (e == n) {
            r = short_text;
            break;
        }
        json_t *val = xml_value(ps, t + name, len, param, t, v, e);
        if (!val || json_object_set_new(args, param, val)) {
            ps->oom = true;
            break;
        }
        at = e + strlen("</parameter>");
    }
    json_decref(args);
    return r;
}

/* One call (or, for Mistral's array, several) opening at t[*i]. */
static one_result parse_one(srv_tool_format f, parser *ps, const char *t, size_t *i, size_t n, bool final) {
    const one_result short_text = final ? ONE_INVALID : ONE_INCOMPLETE;
    size_t at = *i;
    switch (f) {
    case SRV_TOOLS_GENERIC:
        return ONE_INVALID;
    case SRV_TOOLS_HERMES:
    case SRV_TOOLS_LLAMA3: {
        if (starts(t, at, n, SYNTAX[f].open[0])) at += strlen(SYNTAX[f].open[0]);
        json_t *v = json_at(t, &at, n);
        if (!v) return skip_space(t, at, n) == n ? short_text : final ? ONE_INVALID : ONE_INCOMPLETE;
        const bool ok = call_object(ps, v, true);
        json_decref(v);
        if (!ok) return ONE_INVALID;
        *i = at;
        return ONE_CALL;
    }
    case SRV_TOOLS_MISTRAL:
    case SRV_TOOLS_MISTRAL_ARGS: {
        at = skip_space(t, at + strlen("[TOOL_CALLS]"), n);
        if (at == n) return short_text;
        if (t[at] == '[') { /* [{"name", "arguments"}, ...]: all or nothing */
            json_t *v = json_at(t, &at, n);
            if (!v) return short_text;
            bool ok = json_is_array(v) && json_array_size(v) > 0;
            for (size_t k = 0; ok && k < json_array_size(v); k++) ok = call_object(ps, json_array_get(v, k), false);
            for (size_t k = 0; ok && k < json_array_size(v); k++) ok = call_object(ps, json_array_get(v, k), true);
            json_decref(v);
            if (!ok) return ONE_INVALID;
            *i = at;
            return ONE_CALL;
        }
        const size_t name = at; /* NAME[ARGS]{...}, maybe with [CALL_ID]id before [ARGS] */
        while (at < n && name_char(t[at])) at++;
        const size_t len = at - name;
        if (at == n) return short_text;
        if (starts(t, at, n, "[CALL_ID]")) {
            at += strlen("[CALL_ID]");
            while (at < n && t[at] != '[') at++;
        }
        if (partial_of(t, at, n, "[ARGS]") || at == n) return short_text;
        if (!starts(t, at, n, "[ARGS]")) return ONE_INVALID;
        at += strlen("[ARGS]");
        one_result r = args_call(ps, t, &at, n, name, len, final);
        if (r == ONE_CALL) *i = at;
        return r;
    }
    case SRV_TOOLS_DEEPSEEK: {
        if (starts(t, at, n, DS_CALLS_BEGIN)) at = skip_space(t, at + strlen(DS_CALLS_BEGIN), n);
        if (at == n || partial_of(t, at, n, DS_CALL_BEGIN)) return short_text;
        if (!starts(t, at, n, DS_CALL_BEGIN)) return ONE_INVALID;
        at += strlen(DS_CALL_BEGIN);
        const size_t sep = find(t, at, n, DS_SEP);
        if (sep == n) return short_text;
        size_t name = at, len = sep - at;
        at = sep + strlen(DS_SEP);
        if (len == strlen("function") && !memcmp(t + name, "function", len)) { /* R1: function<sep>NAME\n```json */
            name = at;
            while (at < n && t[at] != '\n') at++;
            if (at == n) return short_text;
            len = at - name;
            at = skip_space(t, at, n);
            if (starts(t, at, n, "```json")) at += strlen("```json");
            else if (starts(t, at, n, "```")) at += 3;
            else if (partial_of(t, at, n, "```json")) return short_text;
        }
        while (len && space(t[name + len - 1])) len--;
        one_result r = args_call(ps, t, &at, n, name, len, final);
        if (r == ONE_CALL) *i = at;
        return r;
    }
    case SRV_TOOLS_XML:
    case SRV_TOOLS_SEED_XML: {
        at += strlen(SYNTAX[f].open[0]);
        one_result r = xml_call(ps, t, &at, n, final);
        if (r == ONE_CALL) *i = at;
        return r;
    }
    case SRV_TOOLS_HARMONY: {
        const size_t to = find(t, at, n, "to=functions.");
        if (to == n) return short_text;
        at = to + strlen("to=functions.");
        const size_t name = at;
        while (at < n && name_char(t[at])) at++;
        const size_t len = at - name;
        const size_t msg = find(t, at, n, "<|message|>");
        if (msg == n) return short_text;
        at = msg + strlen("<|message|>");
        one_result r = args_call(ps, t, &at, n, name, len, final);
        if (r == ONE_CALL) *i = at;
        return r;
    }
    }
    return ONE_INVALID;
}

/* The whole answer as one JSON call object or an array of them (any format). */
static bool whole_json(parser *ps, const char *t, size_t n) {
    size_t i = skip_space(t, 0, n), j = n;
    while (j > i && space(t[j - 1])) j--;
    if (i == j || (t[i] != '{' && t[i] != '[')) return false;
    json_t *v = json_loadb(t + i, j - i, 0, NULL);
    bool ok = v != NULL;
    if (json_is_object(v)) {
        ok = call_object(ps, v, false) && call_object(ps, v, true);
    } else if (ok) {
        ok = json_array_size(v) > 0;
        for (size_t k = 0; ok && k < json_array_size(v); k++) ok = call_object(ps, json_array_get(v, k), false);
        for (size_t k = 0; ok && k < json_array_size(v); k++) ok = call_object(ps, json_array_get(v, k), true);
    }
    json_decref(v);
    return ok;
}

/* Whether t[0, n) may still grow into a whole-answer JSON call: it starts with "{", "[{" or is "[". */
static bool may_be_json(const char *t, size_t n) {
    size_t i = skip_space(t, 0, n);
    if (i == n) return true; /* nothing yet but whitespace */
    if (t[i] == '{') return true;
    if (t[i] != '[') return false;
    i = skip_space(t, i + 1, n);
    return i == n || t[i] == '{';
}

/* How much of t[0, n) to hold back when no call opened: a proper prefix of an opening marker at its end
   (for harmony: an unfinished header), then whitespace. */
static size_t held_back(srv_tool_format f, const char *t, size_t n) {
    size_t end = n;
    for (int k = 0; k < 3 && SYNTAX[f].open[k]; k++) {
        const size_t m = strlen(SYNTAX[f].open[k]);
        for (size_t l = m - 1; l > 0; l--)
            if (l <= n && !memcmp(t + n - l, SYNTAX[f].open[k], l)) {
                if (n - l < end) end = n - l;
                break;
            }
    }
    if (f == SRV_TOOLS_HARMONY) { /* a header still open may turn out to address a function */
        const char *const heads[] = {"<|start|>", "<|channel|>", "<"};
        for (int k = 0; k < 3; k++) {
            size_t h = rfind(t, 0, n, heads[k]);
            if (h < n && find(t, h, n, "<|message|>") == n) h = harmony_header(t, h);
            if (h < end && find(t, h, n, "<|message|>") == n) end = h;
        }
    }
    while (end > 0 && space(t[end - 1])) end--;
    return n - end;
}

bool srv_tools_parse(srv_tool_format f, const json_t *tools, const char *t, size_t n, bool final,
                     srv_tool_parse *out) {
    memset(out, 0, sizeof *out);
    out->rest = n;
    parser ps = {out, 0, false, tools};
    if (may_be_json(t, n)) {
        if (!final) return true; /* content_end 0: wait for the whole answer */
        if (whole_json(&ps, t, n)) return true;
        if (ps.oom) goto oom;
    }
    size_t at = find_open(f, t, 0, n);
    if (at == n) {
        out->content_end = final ? n : n - held_back(f, t, n);
        return true;
    }
    size_t c = at;
    while (c > 0 && space(t[c - 1])) c--;
    out->content_end = c;
    for (;;) {
        const one_result r = parse_one(f, &ps, t, &at, n, final);
        if (ps.oom) goto oom;
        if (r == ONE_INCOMPLETE) return true;
        if (r == ONE_INVALID) {
            if (!out->n_calls) out->content_end = final ? n : c;
            else if (final) out->rest = at;
            return true;
        }
        /* what closes or separates calls; a piece of one at the end may still grow */
        for (bool more = true; more;) {
            more = false;
            at = skip_space(t, at, n);
            for (int k = 0; k < 4 && SYNTAX[f].close[k]; k++) {
                if (starts(t, at, n, SYNTAX[f].close[k])) at += strlen(SYNTAX[f].close[k]), more = true;
                else if (!final && partial_of(t, at, n, SYNTAX[f].close[k])) return true;
            }
        }
        if (at == n) return true;
        if (find_open(f, t, at, n) != at) {
            bool partial = false;
            for (int k = 0; k < 3 && SYNTAX[f].open[k]; k++) partial |= partial_of(t, at, n, SYNTAX[f].open[k]);
            if (!final && (partial || f == SRV_TOOLS_HARMONY)) return true; /* the next call may be starting */
            if (final) out->rest = at;
            else out->rest = n;
            return true;
        }
    }
oom:
    srv_tool_parse_free(out);
    return false;
}

void srv_tool_parse_free(srv_tool_parse *p) {
    for (size_t i = 0; i < p->n_calls; i++) free(p->calls[i].name), free(p->calls[i].arguments);
    free(p->calls);
    memset(p, 0, sizeof *p);
}

void srv_tools_call_id(const char *req_id, size_t index, char out[32]) {
    static const char digits[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    memcpy(out, "call_", 5);
    for (uint64_t k = 0; k < 24; k++) /* a hash per letter: every one as random as the others */
        out[5 + k] = digits[XXH3_64bits_withSeed(req_id, strlen(req_id), ((uint64_t)index << 8) | k) % 62];
    out[29] = 0;
}

/* ---- the messages a template gets ------------------------------------------------------ */

json_t *srv_tools_messages(const json_t *messages) {
    json_t *copy = NULL;
    for (size_t i = 0; i < json_array_size(messages); i++) {
        const json_t *calls = json_object_get(json_array_get(messages, i), "tool_calls");
        for (size_t k = 0; k < json_array_size(calls); k++) {
            const json_t *args = json_object_get(json_object_get(json_array_get(calls, k), "function"), "arguments");
            if (!json_is_string(args)) continue;
            json_t *obj = json_loadb(json_string_value(args), json_string_length(args), 0, NULL);
            if (!json_is_object(obj)) {
                json_decref(obj);
                continue;
            }
            if (!copy && !(copy = json_deep_copy(messages))) {
                json_decref(obj);
                return NULL;
            }
            json_t *fn = json_object_get(json_array_get(json_object_get(json_array_get(copy, i), "tool_calls"), k),
                                         "function");
            json_object_set_new(fn, "arguments", obj);
        }
    }
    return copy;
}

/* ---- the grammar of a call ------------------------------------------------------------- */

typedef struct buf {
    char *s;
    size_t n, cap;
    bool oom;
} buf;

static void put(buf *b, const char *s, size_t n) {
    if (b->oom) return;
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 1024;
        while (b->n + n + 1 > cap) cap *= 2;
        char *t = realloc(b->s, cap);
        if (!t) {
            b->oom = true;
            return;
        }
        b->s = t, b->cap = cap;
    }
    memcpy(b->s + b->n, s, n);
    b->n += n;
    b->s[b->n] = 0;
}

static void puts_(buf *b, const char *s) { put(b, s, strlen(s)); }

/* s as the inside of a GBNF literal. */
static void put_lit(buf *b, const char *s) {
    for (; *s; s++) {
        if (*s == '"' || *s == '\\') put(b, "\\", 1), put(b, s, 1);
        else if (*s == '\n') puts_(b, "\\n");
        else put(b, s, 1);
    }
}

static bool word_char(char c) { return name_char(c) && c != '.'; }

/* A GBNF text with every rule name prefixed, so that several schemas' grammars share one. Literals, classes
   and comments are copied as they are. */
static void put_renamed(buf *b, const char *g, const char *prefix) {
    for (size_t i = 0; g[i];) {
        const char c = g[i];
        if (c == '"' || c == '[') {
            const char end = c == '"' ? '"' : ']';
            size_t j = i + 1;
            while (g[j] && g[j] != end) j += g[j] == '\\' && g[j + 1] ? 2 : 1;
            if (g[j]) j++;
            put(b, g + i, j - i);
            i = j;
        } else if (c == '#') {
            while (g[i] && g[i] != '\n') i++;
        } else if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) {
            size_t j = i;
            while (g[j] && word_char(g[j])) j++;
            puts_(b, prefix);
            put(b, g + i, j - i);
            i = j;
        } else {
            put(b, g + i, 1);
            i++;
        }
    }
}

/* How format f writes a call: before and after the arguments (the name goes between pre_a and pre_b), and
   around and between several calls (multi: it can hold several). */
typedef struct shape {
    const char *pre_a, *pre_b, *post;
    const char *open, *sep, *close;
    bool multi;
} shape;

static shape shape_of(srv_tool_format f) {
    switch (f) {
    case SRV_TOOLS_HERMES:
        return (shape){"<tool_call>\n{\"name\": \"", "\", \"arguments\": ", "}\n</tool_call>", "", "\n", "", true};
    case SRV_TOOLS_LLAMA3:
        return (shape){"{\"name\": \"", "\", \"parameters\": ", "}", "", "", "", false};
    case SRV_TOOLS_MISTRAL:
        return (shape){"{\"name\": \"", "\", \"arguments\": ", "}", "[TOOL_CALLS][", ", ", "]", true};
    case SRV_TOOLS_MISTRAL_ARGS:
        return (shape){"[TOOL_CALLS]", "[ARGS]", "", "", "", "", true};
    case SRV_TOOLS_DEEPSEEK:
        return (shape){DS_CALL_BEGIN "function" DS_SEP, "\n```json\n", "\n```" DS_CALL_END, DS_CALLS_BEGIN, "\n",
                       DS_CALLS_END, true};
    case SRV_TOOLS_HARMONY:
        return (shape){"<|channel|>commentary to=functions.", " <|constrain|>json<|message|>", "", "", "", "", false};
    case SRV_TOOLS_XML: /* the arguments are xml_args' */
        return (shape){"<tool_call>\n<function=", ">\n", "</function>\n</tool_call>", "", "\n", "", true};
    case SRV_TOOLS_SEED_XML:
        return (shape){"<seed:tool_call>\n<function=", ">\n", "</function>\n</seed:tool_call>", "", "\n", "", true};
    case SRV_TOOLS_GENERIC:
    default:
        return (shape){"{\"name\": \"", "\", \"arguments\": ", "}", "", "", "", false};
    }
}

/* Schema s as GBNF rules prefixed `prefix` (its start: prefix "root"); false with err on a schema the converter
   refuses. */
static bool schema_rules(buf *b, const json_t *s, const char *prefix, char *err, size_t cap) {
    char *schema = s ? json_dumps(s, JSON_COMPACT | JSON_ENCODE_ANY) : strdup("{\"type\": \"object\"}");
    char *gbnf = NULL;
    tkv_status st = schema ? tkv_json_schema_to_gbnf(schema, strlen(schema), &gbnf) : TKV_ERR_NOMEM;
    free(schema);
    if (st) {
        snprintf(err, cap, "%s", st == TKV_ERR_NOMEM ? "out of memory" : tkv_last_error(NULL));
        return false;
    }
    put_renamed(b, gbnf, prefix);
    tkv_free(gbnf);
    return true;
}

/* Whether every element of a (non-empty) array is a string. */
static bool all_strings(const json_t *a) {
    for (size_t i = 0; i < json_array_size(a); i++)
        if (!json_is_string(json_array_get(a, i))) return false;
    return json_array_size(a) > 0;
}

/* Rule `pre`value: one XML value of schema ps as the templates print it. A string is its text (no "<" when its
   length is bounded, else no "</"), within minLength/maxLength; an enum or const of strings one of them, bare;
   anything else the JSON its schema allows. */
static bool value_rule(buf *b, const json_t *ps, const char *pre, char *err, size_t cap) {
    const json_t *type = json_object_get(ps, "type"), *en = json_object_get(ps, "enum"), *cn = json_object_get(ps, "const");
    char line[160];
    if (all_strings(en) || json_is_string(cn)) {
        snprintf(line, sizeof line, "\n%svalue ::= ", pre);
        puts_(b, line);
        for (size_t i = 0; i < (cn ? 1 : json_array_size(en)); i++) {
            puts_(b, i ? " | \"" : "\"");
            put_lit(b, json_string_value(cn ? cn : json_array_get(en, i)));
            puts_(b, "\"");
        }
        puts_(b, "\n");
        return true;
    }
    if (json_is_string(type) && !strcmp(json_string_value(type), "string")) {
        const json_t *lo = json_object_get(ps, "minLength"), *hi = json_object_get(ps, "maxLength");
        if (json_is_integer(lo) || json_is_integer(hi)) {
            const json_int_t m = json_is_integer(lo) && json_integer_value(lo) > 0 ? json_integer_value(lo) : 0;
            if (json_is_integer(hi))
                snprintf(line, sizeof line, "\n%svalue ::= [^<]{%lld,%lld}\n", pre, (long long)m,
                         (long long)(json_integer_value(hi) > m ? json_integer_value(hi) : m));
            else snprintf(line, sizeof line, "\n%svalue ::= [^<]{%lld,}\n", pre, (long long)m);
        } else {
            snprintf(line, sizeof line, "\n%svalue ::= xml-text\n", pre);
        }
        puts_(b, line);
        return true;
    }
    if (!schema_rules(b, ps, pre, err, cap)) return false;
    snprintf(line, sizeof line, "\n%svalue ::= %sroot\n", pre, pre);
    puts_(b, line);
    return true;
}

/* An XML call's arguments as rule `prefix`root: each property of the schema in its order, as
   <parameter=P>VALUE</parameter> (with the syntax's newlines), the required ones always; a string's VALUE is
   text without "</", any other's the JSON its schema allows. */
static bool xml_args(buf *b, srv_tool_format f, const json_t *params, const char *prefix, char *err, size_t cap) {
    const char *nl = f == SRV_TOOLS_XML ? "\\n" : "";
    const json_t *props = json_object_get(params, "properties"), *req = json_object_get(params, "required");
    buf root = {0};
    size_t k = 0;
    const char *p;
    const json_t *ps;
    json_object_foreach((json_t *)props, p, ps) {
        bool required = false;
        for (size_t r = 0; r < json_array_size(req); r++)
            required |= json_is_string(json_array_get(req, r)) && !strcmp(json_string_value(json_array_get(req, r)), p);
        char pre[48], line[96];
        snprintf(pre, sizeof pre, "%sp%zu-", prefix, k);
        if (!value_rule(b, ps, pre, err, cap)) return free(root.s), false;
        snprintf(line, sizeof line, "\n%sparam ::= \"<parameter=", pre);
        puts_(b, line), put_lit(b, p), puts_(b, ">"), puts_(b, nl), puts_(b, "\" ");
        puts_(b, pre), puts_(b, "value");
        puts_(b, " \""), puts_(b, nl), puts_(b, "</parameter>\\n\"\n");
        snprintf(line, sizeof line, " %sparam%s", pre, required ? "" : "?");
        puts_(&root, line);
        k++;
    }
    char line[64];
    snprintf(line, sizeof line, "%sroot ::= \"\"", prefix);
    puts_(b, line), put(b, root.s ? root.s : "", root.n), puts_(b, "\n");
    free(root.s);
    return true;
}

char *srv_tools_grammar(srv_tool_format f, const json_t *tools, const char *only, bool parallel, bool think_first,
                        char *err, size_t cap) {
    const shape sh = shape_of(f);
    buf b = {0}, calls = {0};
    size_t n_alt = 0;
    for (size_t i = 0; i < json_array_size(tools); i++) {
        const json_t *fn = json_object_get(json_array_get(tools, i), "function");
        const char *name = json_string_value(json_object_get(fn, "name"));
        if (!name || (only && strcmp(name, only))) continue;
        const json_t *params = json_object_get(fn, "parameters");
        char prefix[32];
        snprintf(prefix, sizeof prefix, "f%zu-", i);
        const bool xml = f == SRV_TOOLS_XML || f == SRV_TOOLS_SEED_XML;
        if (!(xml ? xml_args(&b, f, params, prefix, err, cap) : schema_rules(&b, params, prefix, err, cap))) {
            free(b.s), free(calls.s);
            return NULL;
        }
        char line[64];
        snprintf(line, sizeof line, "\ncall%zu ::= \"", i);
        puts_(&b, line);
        put_lit(&b, sh.pre_a), put_lit(&b, name), put_lit(&b, sh.pre_b);
        snprintf(line, sizeof line, "\" f%zu-root \"", i);
        puts_(&b, line);
        put_lit(&b, sh.post);
        puts_(&b, "\"\n");
        snprintf(line, sizeof line, "%scall%zu", n_alt++ ? " | " : "", i);
        puts_(&calls, line);
    }
    if (!n_alt) {
        snprintf(err, cap, "no function to call");
        free(b.s), free(calls.s);
        return NULL;
    }
    if (f == SRV_TOOLS_XML || f == SRV_TOOLS_SEED_XML || think_first) puts_(&b, "xml-text ::= ([^<] | \"<\" [^/])*\n");
    puts_(&b, "call ::= "), put(&b, calls.s ? calls.s : "", calls.n), puts_(&b, "\nroot ::= ");
    if (think_first) puts_(&b, "xml-text \"</think>\" [ \\n]* ");
    puts_(&b, "\"");
    put_lit(&b, sh.open);
    puts_(&b, "\" call");
    if (parallel && sh.multi) puts_(&b, " (\""), put_lit(&b, sh.sep), puts_(&b, "\" call){0,3}");
    puts_(&b, " \""), put_lit(&b, sh.close), puts_(&b, "\"\n");
    free(calls.s);
    if (b.oom) {
        snprintf(err, cap, "out of memory");
        free(b.s);
        return NULL;
    }
    return b.s;
}
