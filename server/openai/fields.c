/*
 * fields.c — what every OpenAI file shares: error bodies, JSON text from
 * bytes, typed request fields, tokenizing, namespaces. It uses no other
 * file of openai/, so the files that parse and answer (parse.c,
 * responses.c, tool_fields.c, legacy_fields.c, native_completion.c) depend
 * on it and never on each other in a loop.
 *
 * Validation names the offending field in `param` and in the message, the
 * way OpenAI's own 400s do, so a client can tell what to fix.
 */
#include "fields.h"

#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <xxhash.h>

void srv_err_param(srv_err *e, const char *name) {
    snprintf(e->param_own, sizeof e->param_own, "%s", name);
    e->param = e->param_own;
}

void srv_err_set(srv_err *e, int status, const char *param, const char *code, const char *fmt, ...) {
    e->status = status;
    e->param = param;
    e->code = code;
    e->type = status == 401   ? "invalid_request_error"
              : status == 429 ? "rate_limit_error"
              : status >= 500 ? "server_error"
                              : "invalid_request_error";
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof e->message, fmt, ap);
    va_end(ap);
}

json_t *srv_json_str_or_null(const char *s) { return s ? json_string(s) : json_null(); }

char *srv_err_json(const srv_err *e) {
    json_t *o = json_pack("{s:{s:o,s:s,s:o,s:o}}", "error", "message", srv_json_text(e->message, strlen(e->message)),
                          "type", e->type, "param", srv_json_str_or_null(e->param), "code", srv_json_str_or_null(e->code));
    char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    return s;
}

/* ---- UTF-8 ---------------------------------------------------------------- */

/* Length of the valid UTF-8 character at s (n bytes left), or 0. */
static size_t utf8_char(const unsigned char *s, size_t n) {
    if (s[0] < 0x80) return 1;
    size_t len = s[0] >= 0xF0 && s[0] <= 0xF4 ? 4 : s[0] >= 0xE0 ? 3 : s[0] >= 0xC2 && s[0] < 0xE0 ? 2 : 0;
    if (!len || len > n) return 0;
    for (size_t i = 1; i < len; i++)
        if ((s[i] & 0xC0) != 0x80) return 0;
    if (len == 3 && ((s[0] == 0xE0 && s[1] < 0xA0) || (s[0] == 0xED && s[1] >= 0xA0))) return 0; /* overlong, surrogate */
    if (len == 4 && ((s[0] == 0xF0 && s[1] < 0x90) || (s[0] == 0xF4 && s[1] >= 0x90))) return 0;
    return len;
}

json_t *srv_json_text(const char *s, size_t n) {
    json_t *j = json_stringn(s, n);
    if (j) return j;
    /* generated text can hold bytes that never formed a character (a
       byte-fallback token cut short): replace them, as OpenAI does */
    char *t = malloc(3 * n + 1);
    if (!t) return NULL;
    size_t k = 0;
    for (size_t i = 0; i < n;) {
        size_t c = utf8_char((const unsigned char *)s + i, n - i);
        if (c) {
            memcpy(t + k, s + i, c);
            k += c, i += c;
        } else {
            memcpy(t + k, "\xEF\xBF\xBD", 3);
            k += 3, i++;
        }
    }
    j = json_stringn(t, k);
    free(t);
    return j;
}

uint64_t srv_api_namespace(const srv_api *a, const char *salt, size_t n) {
    if (!salt) return 0;
    const uint64_t h = XXH3_64bits_withSecret(salt, n, a->ns_secret, SRV_NS_SECRET_BYTES);
    return h ? h : 1; /* 0 is the unsalted namespace */
}

/* ---- request fields ---------------------------------------------------------- */

bool srv_field_number(const json_t *body, const char *key, double lo, double hi, double *out, srv_err *e) {
    const json_t *v = json_object_get(body, key);
    if (!v || json_is_null(v)) return true;
    if (!json_is_number(v)) {
        srv_err_set(e, 400, key, "invalid_type", "'%s' must be a number", key);
        return false;
    }
    double d = json_number_value(v);
    if (!(d >= lo && d <= hi)) {
        srv_err_set(e, 400, key, "invalid_value", "'%s' must be between %g and %g (got %g)", key, lo, hi, d);
        return false;
    }
    *out = d;
    return true;
}

bool srv_field_int(const json_t *body, const char *key, long long lo, long long hi, long long *out, srv_err *e) {
    const json_t *v = json_object_get(body, key);
    if (!v || json_is_null(v)) return true;
    if (!json_is_integer(v)) {
        srv_err_set(e, 400, key, "invalid_type", "'%s' must be an integer", key);
        return false;
    }
    long long d = json_integer_value(v);
    if (d < lo || d > hi) {
        srv_err_set(e, 400, key, "invalid_value", "'%s' must be between %lld and %lld (got %lld)", key, lo, hi, d);
        return false;
    }
    *out = d;
    return true;
}

bool srv_field_bool(const json_t *body, const char *key, bool *out, srv_err *e) {
    const json_t *v = json_object_get(body, key);
    if (!v || json_is_null(v)) return true;
    if (!json_is_boolean(v)) {
        srv_err_set(e, 400, key, "invalid_type", "'%s' must be a boolean", key);
        return false;
    }
    *out = json_is_true(v);
    return true;
}

tkv_status srv_tokenize(const tkv_model *m, const char *text, size_t len, unsigned flags, tkv_token **out, size_t *n) {
    const size_t cap = len + 8; /* a token covers at least one byte; room for BOS/EOS */
    *n = 0;
    if (!(*out = malloc(cap * sizeof **out))) return TKV_ERR_NOMEM;
    tkv_status st = tkv_tokenize(m, text, len, flags, *out, cap, n);
    if (st) free(*out), *out = NULL;
    return st;
}

