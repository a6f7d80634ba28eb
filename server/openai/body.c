/*
 * body.c — a request body from its bytes, with NULs only in length-handled
 * texts (see body.h).
 */
#include "body.h"

#include <stdio.h>
#include <string.h>

/* The fields whose strings may hold NULs, as paths with the array indices
   left out ("messages[].content[].text"): each is copied by its length
   (json_string_length, json_stringn, "O" in json_pack) up to the renderer
   and the tokenizer. */
static const char *const nul_paths[] = {
    "prompt", "prompt[]", "content",
    "messages[].content", "messages[].content[].text", "messages[].content[].content", "messages[].content[].content[].text",
    "system", "system[].text",
    "input", "input[].content", "input[].content[].text", "instructions",
};

static bool nul_allowed(const char *pattern) {
    for (size_t i = 0; i < sizeof nul_paths / sizeof nul_paths[0]; i++)
        if (!strcmp(pattern, nul_paths[i])) return true;
    return false;
}

/* A path as the error names it (with indices) and as nul_paths lists it (without). */
typedef struct {
    char named[256], pattern[256];
} path;

/* Append ".key" or "[i]" to both forms; false when it no longer fits. */
static bool path_push(path *to, const path *from, const char *key, size_t i) {
    const char *dot = *from->pattern ? "." : "";
    int a = key ? snprintf(to->named, sizeof to->named, "%s%s%s", from->named, dot, key)
                : snprintf(to->named, sizeof to->named, "%s[%zu]", from->named, i);
    int b = key ? snprintf(to->pattern, sizeof to->pattern, "%s%s%s", from->pattern, dot, key)
                : snprintf(to->pattern, sizeof to->pattern, "%s[]", from->pattern);
    return a > 0 && (size_t)a < sizeof to->named && b > 0 && (size_t)b < sizeof to->pattern;
}

/* The top-level field of a path, for the error's "param". */
static void top_field(const char *named, char *out, size_t cap) {
    size_t k = strcspn(named, ".[");
    snprintf(out, cap, "%.*s", (int)(k < cap ? k : cap - 1), named);
}

static bool refuse(const char *named, const char *what, srv_err *e) {
    char top[64];
    top_field(named, top, sizeof top);
    srv_err_set(e, 400, NULL, "invalid_value", "'%.200s' holds a NUL (U+0000)%s: only the texts of prompts, messages, "
                "system prompts and inputs may", named, what);
    if (*top) srv_err_param(e, top); /* copied: the body goes before the error is sent */
    return false;
}

/* Below the paths nul_paths lists (deeper, or a key too long to name): no NUL anywhere, without building paths
   (jansson nests up to 2048 levels; a frame here holds no path). */
static bool walk_deep(const json_t *v, const char *named, srv_err *e) {
    if (json_is_string(v))
        return !memchr(json_string_value(v), 0, json_string_length(v)) || refuse(named, " (deep inside it)", e);
    for (size_t i = 0; json_is_array(v) && i < json_array_size(v); i++)
        if (!walk_deep(json_array_get(v, i), named, e)) return false;
    const char *k;
    size_t klen;
    json_t *x;
    if (json_is_object(v)) json_object_keylen_foreach((json_t *)v, k, klen, x) {
        if (memchr(k, 0, klen)) return refuse(named, " in a key deep inside it", e);
        if (!walk_deep(x, named, e)) return false;
    }
    return true;
}

/* v at path `at`, depth levels more of which are named; deeper ones go to walk_deep. */
static bool walk(const json_t *v, const path *at, int depth, srv_err *e) {
    if (json_is_string(v)) {
        if (memchr(json_string_value(v), 0, json_string_length(v)) && !nul_allowed(at->pattern))
            return refuse(at->named, "", e);
        return true;
    }
    path next;
    for (size_t i = 0; json_is_array(v) && i < json_array_size(v); i++) {
        const json_t *x = json_array_get(v, i);
        if (!(depth > 0 && path_push(&next, at, NULL, i) ? walk(x, &next, depth - 1, e) : walk_deep(x, at->named, e)))
            return false;
    }
    const char *k;
    size_t klen;
    json_t *x;
    if (json_is_object(v)) json_object_keylen_foreach((json_t *)v, k, klen, x) {
        if (memchr(k, 0, klen)) return refuse(*at->named ? at->named : "(the body)", " in a key", e);
        if (!(depth > 0 && path_push(&next, at, k, 0) ? walk(x, &next, depth - 1, e) : walk_deep(x, at->named, e)))
            return false;
    }
    return true;
}

json_t *srv_body_parse(const char *p, size_t n, srv_err *e) {
    json_error_t je;
    json_t *body = json_loadb(p ? p : "", p ? n : 0, JSON_ALLOW_NUL, &je);
    if (!body) {
        srv_err_set(e, 400, NULL, "invalid_json", "invalid JSON in the request body: %s (line %d, column %d)", je.text,
                    je.line, je.column);
        return NULL;
    }
    const path top = {"", ""};
    if (!walk(body, &top, 8, e)) /* the longest of nul_paths has 7 levels */ {
        json_decref(body);
        return NULL;
    }
    return body;
}
