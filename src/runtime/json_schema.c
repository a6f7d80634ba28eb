/*
 * json_schema.c — tkv_json_schema_to_gbnf: a JSON Schema as a GBNF grammar
 * whose sentences are exactly JSON texts that validate against it (within
 * the keywords listed in tokenkv.h), so that constrained sampling
 * (tkv_grammar_create, tkv_sampler_set_grammar) can only produce valid
 * output. A keyword it cannot enforce is refused by name: never accepted
 * and ignored.
 *
 * Each schema node becomes a rule; $refs name the rule of their target, so
 * recursive schemas give recursive rules. Objects list their properties in
 * the schema's order (required ones always, optional ones maybe), never a
 * key twice. Whitespace between tokens is at most one space, so that a
 * sentence always ends. Integer bounds are exact: the digits of a range are
 * spelled out as alternatives of digit classes.
 */
#include "tokenkv.h"

#include "base/alloc.h"
#include "base/error.h"

#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* ---- a growing string ------------------------------------------------------ */

typedef struct sbuf {
    char *s;
    size_t n, cap;
    bool oom;
} sbuf;

static void sb_put(sbuf *b, const char *p, size_t n) {
    if (b->oom) return;
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n + 1) cap *= 2;
        char *t = tkv__realloc(b->s, cap);
        if (!t) {
            b->oom = true;
            return;
        }
        b->s = t, b->cap = cap;
    }
    memcpy(b->s + b->n, p, n);
    b->n += n;
    b->s[b->n] = '\0';
}

static void sb_str(sbuf *b, const char *s) { sb_put(b, s, strlen(s)); }

static void sb_fmt(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_fmt(sbuf *b, const char *fmt, ...) {
    char tmp[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n > 0) sb_put(b, tmp, (size_t)n < sizeof tmp ? (size_t)n : sizeof tmp - 1);
}

/* A GBNF string literal of bytes s[0..n): quotes, backslashes and control bytes escaped. */
static void sb_literal(sbuf *b, const char *s, size_t n) {
    sb_str(b, "\"");
    for (size_t i = 0; i < n; i++) {
        const unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\') sb_fmt(b, "\\%c", c);
        else if (c < 0x20 || c == 0x7f) sb_fmt(b, "\\x%02X", c);
        else sb_put(b, (const char *)&c, 1);
    }
    sb_str(b, "\"");
}

/* ---- the conversion ----------------------------------------------------------- */

typedef struct conv {
    json_t *root;     /* the whole schema, for $ref */
    sbuf rules;       /* the rules written so far */
    int next_id;      /* for rule names r<N> */
    json_t *ref_rule; /* $ref target pointer -> its rule name (so recursion ends) */
    int depth;
    tkv_status st;
    char why[256];
} conv;

#define MAX_DEPTH 64

static void fail(conv *c, tkv_status st, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void fail(conv *c, tkv_status st, const char *fmt, ...) {
    if (c->st) return;
    c->st = st;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->why, sizeof c->why, fmt, ap);
    va_end(ap);
}

static int new_rule(conv *c) { return c->next_id++; }

/* Write rule r<id> ::= body. */
static void put_rule(conv *c, int id, const sbuf *body) {
    sb_fmt(&c->rules, "r%d ::= ", id);
    sb_put(&c->rules, body->s ? body->s : "", body->n);
    sb_str(&c->rules, "\n");
    if (body->oom) c->rules.oom = true;
}

static int gen(conv *c, json_t *schema);

/* The JSON text of a value, as a literal (const, enum). */
static void put_json_literal(conv *c, sbuf *b, const json_t *v) {
    char *s = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
    if (!s) {
        fail(c, TKV_ERR_NOMEM, "out of memory");
        return;
    }
    /* jansson writes ", " and ": " inside objects only with JSON_COMPACT off; compact is a valid JSON text */
    sb_literal(b, s, strlen(s));
    free(s);
}

/* Keywords each kind of schema may carry; anything else with a meaning for validation is refused. */
static bool known_keyword(const char *k) {
    static const char *const ok[] = {
        "type", "properties", "required", "additionalProperties", "items", "prefixItems", "additionalItems",
        "minItems", "maxItems",
        "enum", "const", "anyOf", "oneOf", "allOf", "$ref", "$defs", "definitions", "minLength", "maxLength",
        "format", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "title", "description", "default",
        "$schema", "$id", "$comment", "examples", "strict", "nullable", "deprecated", "readOnly", "writeOnly",
    };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++)
        if (!strcmp(k, ok[i])) return true;
    return false;
}

/* ---- integers in a range: their decimal digits, exactly ------------------------- */

/* Digits lo..hi (strings of the same length n) as a GBNF expression into b. */
static void digit_range(sbuf *b, const char *lo, const char *hi, size_t n) {
    if (n == 0) return;
    if (!strncmp(lo, hi, n)) {
        sb_literal(b, lo, n);
        return;
    }
    if (lo[0] == hi[0]) {
        sb_fmt(b, "\"%c\" ", lo[0]);
        digit_range(b, lo + 1, hi + 1, n - 1);
        return;
    }
    bool lo_zeros = true, hi_nines = true;
    for (size_t i = 1; i < n; i++) lo_zeros &= lo[i] == '0', hi_nines &= hi[i] == '9';
    if (lo_zeros && hi_nines) {
        sb_fmt(b, "[%c-%c]", lo[0], hi[0]);
        if (n > 1) sb_fmt(b, " [0-9]{%zu}", n - 1);
        return;
    }
    char nines[24], zeros[24];
    memset(nines, '9', sizeof nines), memset(zeros, '0', sizeof zeros);
    sb_str(b, "(");
    sb_fmt(b, "\"%c\" (", lo[0]); /* lo's first digit, then lo's rest .. 99..9 */
    digit_range(b, lo + 1, nines, n - 1);
    sb_str(b, ")");
    if (hi[0] - lo[0] > 1) {
        sb_fmt(b, " | [%c-%c]", lo[0] + 1, hi[0] - 1);
        if (n > 1) sb_fmt(b, " [0-9]{%zu}", n - 1);
    }
    sb_fmt(b, " | \"%c\" (", hi[0]); /* hi's first digit, then 00..0 .. hi's rest */
    digit_range(b, zeros, hi + 1, n - 1);
    sb_str(b, "))");
}

/* Non-negative integers lo..hi (hi < 0: unbounded), no leading zeros, as alternatives into b. */
static void natural_range(sbuf *b, long long lo, long long hi) {
    static const long long MAX_DIGITS = 18; /* beyond, the bound is treated as unbounded */
    bool first = true;
    long long pow_lo = 1;
    for (int len = 1; len <= MAX_DIGITS; len++, pow_lo *= 10) {
        const long long a = len == 1 ? 0 : pow_lo, z = len == MAX_DIGITS ? 999999999999999999ll : pow_lo * 10 - 1;
        const long long from = lo > a ? lo : a, to = hi >= 0 && hi < z ? hi : z;
        if (from > to) {
            if (hi >= 0 && a > hi) break;
            continue;
        }
        char s_from[24], s_to[24]; /* both have exactly len digits: from and to lie in [10^(len-1), 10^len) */
        snprintf(s_from, sizeof s_from, "%lld", from);
        snprintf(s_to, sizeof s_to, "%lld", to);
        sb_str(b, first ? "(" : " | (");
        digit_range(b, s_from, s_to, (size_t)len);
        sb_str(b, ")");
        first = false;
    }
    if (first) sb_str(b, "\"\"");
}

/* The integers of [lo, hi] (has_lo / has_hi: the bounds exist) as a GBNF expression. */
static void integer_range(sbuf *b, bool has_lo, long long lo, bool has_hi, long long hi) {
    const bool neg = !has_lo || lo < 0, pos = !has_hi || hi >= 0;
    sb_str(b, "(");
    if (neg) { /* -1 .. : the magnitudes max(1, -hi) .. -lo */
        sb_str(b, "\"-\" (");
        natural_range(b, has_hi && hi < 0 ? -hi : 1, has_lo ? -lo : -1);
        sb_str(b, ")");
    }
    if (pos) {
        if (neg) sb_str(b, " | ");
        sb_str(b, "(");
        natural_range(b, has_lo && lo > 0 ? lo : 0, has_hi ? hi : -1);
        sb_str(b, ")");
    }
    sb_str(b, ")");
}

/* ---- each kind of schema ------------------------------------------------------------ */

static const char STRING_CHAR[] = "([^\"\\\\\\x00-\\x1F] | \"\\\\\" ([\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4}))";

static void gen_string(conv *c, json_t *s, sbuf *b) {
    const json_t *fmt = json_object_get(s, "format"), *mn = json_object_get(s, "minLength"),
                 *mx = json_object_get(s, "maxLength");
    if (fmt) {
        const char *f = json_string_value(fmt);
        const char *body = !f ? NULL
                           : !strcmp(f, "date") ? "\"\\\"\" DATE \"\\\"\""
                           : !strcmp(f, "time") ? "\"\\\"\" TIME \"\\\"\""
                           : !strcmp(f, "date-time") ? "\"\\\"\" DATE \"T\" TIME \"\\\"\""
                           : !strcmp(f, "uuid") ? "\"\\\"\" [0-9a-f]{8} \"-\" [0-9a-f]{4} \"-\" [0-9a-f]{4} \"-\" [0-9a-f]{4} \"-\" [0-9a-f]{12} \"\\\"\""
                                                  : NULL;
        if (!body) {
            fail(c, TKV_ERR_UNSUPPORTED, "'format': \"%s\" is not enforced (date, time, date-time, uuid are)",
                 f ? f : "?");
            return;
        }
        sb_str(b, body);
        return;
    }
    long long lo = mn ? json_integer_value(mn) : 0, hi = mx ? json_integer_value(mx) : -1;
    if ((mn && (!json_is_integer(mn) || lo < 0)) || (mx && (!json_is_integer(mx) || hi < 0)) || (mx && lo > hi)) {
        fail(c, TKV_ERR_INVALID, "'minLength' and 'maxLength' must be non-negative integers, minimum first");
        return;
    }
    if (lo > 5000 || hi > 5000) {
        fail(c, TKV_ERR_UNSUPPORTED, "'minLength'/'maxLength' above 5000 are not enforced");
        return;
    }
    sb_str(b, "\"\\\"\" ");
    if (!mn && !mx) sb_fmt(b, "%s*", STRING_CHAR);
    else if (!mx) sb_fmt(b, "%s{%lld,}", STRING_CHAR, lo);
    else sb_fmt(b, "%s{%lld,%lld}", STRING_CHAR, lo, hi);
    sb_str(b, " \"\\\"\"");
}

/* A bound of a number: an integer (refused when fractional: not enforced). */
static bool int_bound(conv *c, json_t *s, const char *key, bool integer, long long *out, bool *has) {
    const json_t *v = json_object_get(s, key);
    *has = v != NULL;
    if (!v) return true;
    if (!json_is_number(v)) {
        fail(c, TKV_ERR_INVALID, "'%s' must be a number", key);
        return false;
    }
    const double d = json_number_value(v);
    /* integers have at most 18 digits here: a bound beyond is not enforced (and would overflow) */
    if (!(d > -1e17 && d < 1e17)) {
        fail(c, TKV_ERR_UNSUPPORTED, "'%s': a bound beyond 10^17 in magnitude (%g) is not enforced", key, d);
        return false;
    }
    if (json_is_integer(v)) {
        *out = json_integer_value(v);
        return true;
    }
    if (d == (double)(long long)d) {
        *out = (long long)d;
        return true;
    }
    if (integer) { /* an integer bound by a fraction: round inwards */
        *out = !strcmp(key, "minimum") || !strcmp(key, "exclusiveMinimum") ? (long long)d + (d > 0) : (long long)d - (d < 0);
        if (!strcmp(key, "exclusiveMinimum") || !strcmp(key, "exclusiveMaximum")) *has = true; /* strictness moot */
        return true;
    }
    fail(c, TKV_ERR_UNSUPPORTED, "'%s': a fractional bound on a number (%g) is not enforced", key, d);
    return false;
}

static void gen_number(conv *c, json_t *s, sbuf *b, bool integer) {
    long long lo = 0, hi = 0, xlo = 0, xhi = 0;
    bool has_lo, has_hi, has_xlo, has_xhi;
    if (!int_bound(c, s, "minimum", integer, &lo, &has_lo) || !int_bound(c, s, "maximum", integer, &hi, &has_hi) ||
        !int_bound(c, s, "exclusiveMinimum", integer, &xlo, &has_xlo) ||
        !int_bound(c, s, "exclusiveMaximum", integer, &xhi, &has_xhi))
        return;
    const json_t *xmn = json_object_get(s, "exclusiveMinimum"), *xmx = json_object_get(s, "exclusiveMaximum");
    const bool frac_xlo = xmn && !json_is_integer(xmn), frac_xhi = xmx && !json_is_integer(xmx);
    if (has_xlo) { /* exclusive: the next integer (an integer-valued number bound the same, the fraction aside) */
        const long long v = frac_xlo ? xlo : xlo + 1;
        if (!has_lo || v > lo) lo = v;
        has_lo = true;
    }
    if (has_xhi) {
        const long long v = frac_xhi ? xhi : xhi - 1;
        if (!has_hi || v < hi) hi = v;
        has_hi = true;
    }
    if (has_lo && has_hi && lo > hi) {
        fail(c, TKV_ERR_INVALID, "the bounds leave no value (%lld > %lld)", lo, hi);
        return;
    }
    if (!integer && (has_lo || has_hi) && (has_xlo || has_xhi)) {
        fail(c, TKV_ERR_UNSUPPORTED, "exclusive bounds on a number (not an integer) are not enforced");
        return;
    }
    if (integer) {
        integer_range(b, has_lo, lo, has_hi, hi);
        return;
    }
    if (!has_lo && !has_hi) { /* any number: no leading zeros, an optional fraction and exponent */
        sb_str(b, "\"-\"? (\"0\" | [1-9] [0-9]{0,15}) (\".\" [0-9]{1,16})? ([eE] [-+]? [0-9]{1,3})?");
        return;
    }
    /* integer bounds on a number: an integer part strictly inside with any fraction, or a bound itself
       with a fraction of zeros */
    sb_str(b, "(");
    if (!has_lo || !has_hi || hi - lo >= 2) {
        sb_str(b, "(");
        integer_range(b, has_lo, has_lo ? lo + 1 : 0, has_hi, has_hi ? hi - 1 : 0);
        sb_str(b, " (\".\" [0-9]{1,16})?) | ");
    }
    if (has_lo && has_hi && hi - lo == 1 && lo >= 0) { /* lo.x for lo >= 0 stays below hi */
        sb_fmt(b, "(\"%lld\" \".\" [0-9]{1,16}) | ", lo);
    } else if (has_lo && has_hi && hi - lo == 1) { /* a negative lo: hi.x (towards zero) stays above lo */
        sb_fmt(b, "(\"%s%lld\" \".\" [0-9]{1,16}) | ", hi == 0 ? "-" : "", hi);
    }
    bool first = true;
    if (has_lo) sb_fmt(b, "(\"%lld\" (\".\" \"0\"{1,16})?)", lo), first = false;
    if (has_hi && (!has_lo || hi != lo)) sb_fmt(b, "%s(\"%lld\" (\".\" \"0\"{1,16})?)", first ? "" : " | ", hi);
    sb_str(b, ")");
}

static void gen_array(conv *c, json_t *s, sbuf *b) {
    json_t *items = json_object_get(s, "items"), *prefix = json_object_get(s, "prefixItems");
    if (json_is_array(items)) { /* the tuple form before 2020-12: items are prefixItems, additionalItems follow */
        if (prefix) {
            fail(c, TKV_ERR_INVALID, "give 'items' as an array or 'prefixItems', not both");
            return;
        }
        prefix = items;
        json_t *extra = json_object_get(s, "additionalItems");
        items = json_is_object(extra) ? extra : json_false(); /* none or true: exactly the tuple, which validates */
    } else if (json_object_get(s, "additionalItems")) {
        fail(c, TKV_ERR_INVALID, "'additionalItems' needs 'items' as an array (a tuple)");
        return;
    }
    const json_t *mn = json_object_get(s, "minItems"), *mx = json_object_get(s, "maxItems"),
                 *uniq = json_object_get(s, "uniqueItems");
    if (uniq && json_is_true(uniq)) {
        fail(c, TKV_ERR_UNSUPPORTED, "'uniqueItems' is not enforced");
        return;
    }
    long long lo = mn ? json_integer_value(mn) : 0, hi = mx ? json_integer_value(mx) : -1;
    if ((mn && !json_is_integer(mn)) || (mx && !json_is_integer(mx)) || lo < 0 || (mx && (hi < 0 || hi < lo))) {
        fail(c, TKV_ERR_INVALID, "'minItems' and 'maxItems' must be non-negative integers, minimum first");
        return;
    }
    if (lo > 1000 || hi > 1000) {
        fail(c, TKV_ERR_UNSUPPORTED, "'minItems'/'maxItems' above 1000 are not enforced");
        return;
    }
    const size_t n_prefix = prefix ? json_array_size(prefix) : 0;
    if (prefix && !json_is_array(prefix)) {
        fail(c, TKV_ERR_INVALID, "'prefixItems' must be an array of schemas");
        return;
    }
    /* prefixItems: exactly those first (as many as minItems asks, all of them optional past that) */
    int item = -1; /* the rule of the items after the prefix (no `items`: any value), or -1 for none */
    if (!json_is_false(items)) item = gen(c, items);
    if (c->st) return;
    int prefix_rules[64];
    if (n_prefix > 64) {
        fail(c, TKV_ERR_UNSUPPORTED, "more than 64 'prefixItems' are not enforced");
        return;
    }
    for (size_t i = 0; i < n_prefix && !c->st; i++) prefix_rules[i] = gen(c, json_array_get(prefix, i));
    if (c->st) return;
    if (n_prefix) {
        if ((size_t)lo > n_prefix && json_is_false(items)) {
            fail(c, TKV_ERR_INVALID, "'minItems' %lld exceeds the %zu 'prefixItems' with 'items': false", lo, n_prefix);
            return;
        }
        /* [ p0 ("," p1 ("," p2 ... )?)? ] then more items; kept simple: all prefix items present, then items */
        sb_str(b, "\"[\" ws ");
        for (size_t i = 0; i < n_prefix; i++) sb_fmt(b, "%sr%d ", i ? "\",\" ws " : "", prefix_rules[i]);
        long long more_lo = lo > (long long)n_prefix ? lo - (long long)n_prefix : 0;
        long long more_hi = hi < 0 ? -1 : hi - (long long)n_prefix;
        if (item >= 0 && more_hi != 0) {
            if (more_hi < 0) sb_fmt(b, "(\",\" ws r%d){%lld,} ", item, more_lo);
            else sb_fmt(b, "(\",\" ws r%d){%lld,%lld} ", item, more_lo, more_hi);
        }
        sb_str(b, "ws \"]\"");
        if (hi >= 0 && hi < (long long)n_prefix) fail(c, TKV_ERR_UNSUPPORTED, "'maxItems' below the 'prefixItems' count");
        return;
    }
    if (item < 0) { /* items: false, no prefix: only the empty array */
        sb_str(b, "\"[\" ws \"]\"");
        return;
    }
    sb_str(b, "\"[\" ws ");
    if (lo == 0) sb_str(b, "(");
    sb_fmt(b, "r%d ", item);
    const long long rest_lo = lo > 0 ? lo - 1 : 0, rest_hi = hi < 0 ? -1 : hi - 1;
    if (rest_hi < 0) sb_fmt(b, "(\",\" ws r%d){%lld,}", item, rest_lo);
    else if (rest_hi > 0) sb_fmt(b, "(\",\" ws r%d){%lld,%lld}", item, rest_lo, rest_hi);
    if (lo == 0) sb_str(b, ")?");
    if (hi == 0) { /* maxItems 0: nothing at all */
        b->n = 0;
        sb_str(b, "\"[\" ws \"]\"");
        return;
    }
    sb_str(b, " ws \"]\"");
}

/* Whether name is in the array `required`. */
static bool is_required(const json_t *required, const char *name) {
    for (size_t i = 0; i < json_array_size(required); i++)
        if (json_is_string(json_array_get(required, i)) && !strcmp(json_string_value(json_array_get(required, i)), name))
            return true;
    return false;
}

static void gen_object(conv *c, json_t *s, sbuf *b) {
    json_t *props = json_object_get(s, "properties"), *required = json_object_get(s, "required"),
           *extra = json_object_get(s, "additionalProperties");
    if (props && !json_is_object(props)) {
        fail(c, TKV_ERR_INVALID, "'properties' must be an object");
        return;
    }
    if (required && !json_is_array(required)) {
        fail(c, TKV_ERR_INVALID, "'required' must be an array of names");
        return;
    }
    for (size_t i = 0; i < json_array_size(required); i++) {
        const json_t *r = json_array_get(required, i);
        if (!json_is_string(r) || !json_object_get(props, json_string_value(r))) {
            fail(c, TKV_ERR_UNSUPPORTED, "'required': \"%s\" has no schema in 'properties' (not enforced)",
                 json_is_string(r) ? json_string_value(r) : "?");
            return;
        }
    }
    const size_t n = json_object_size(props);
    if (!n) { /* no properties: {} when nothing else is allowed, else at most one free key (never a duplicate) */
        if (json_is_false(extra)) {
            sb_str(b, "\"{\" ws \"}\"");
            return;
        }
        const int value = extra && !json_is_true(extra) ? gen(c, extra) : -1;
        if (value >= 0) sb_fmt(b, "\"{\" ws (KEY ws \":\" ws r%d)? ws \"}\"", value);
        else sb_str(b, "\"{\" ws (KEY ws \":\" ws ANY2)? ws \"}\"");
        return;
    }
    if (n > 64) {
        fail(c, TKV_ERR_UNSUPPORTED, "more than 64 'properties' are not enforced");
        return;
    }
    /* kv_i: "key": value; then the rest after property i, given something was written (R) or not (S) */
    int kv[64], R[65], S[65];
    bool req[64];
    const char *key;
    json_t *sub;
    size_t i = 0;
    json_object_foreach(props, key, sub) {
        const int value = gen(c, sub);
        if (c->st) return;
        kv[i] = new_rule(c);
        req[i] = is_required(required, key);
        sbuf body = {0};
        json_t *k = json_string(key);
        char *quoted = k ? json_dumps(k, JSON_ENCODE_ANY) : NULL;
        json_decref(k);
        if (!quoted) fail(c, TKV_ERR_NOMEM, "out of memory");
        else sb_literal(&body, quoted, strlen(quoted));
        free(quoted);
        sb_fmt(&body, " ws \":\" ws r%d", value);
        put_rule(c, kv[i], &body);
        tkv__free(body.s);
        i++;
    }
    for (size_t k = 0; k <= n; k++) R[k] = new_rule(c), S[k] = new_rule(c);
    for (size_t k = 0; k <= n; k++) {
        sbuf r = {0}, sn = {0};
        if (k == n) {
            sb_str(&r, "\"\"");
            sb_str(&sn, "\"\"");
        } else {
            sb_fmt(&r, "\",\" ws r%d r%d", kv[k], R[k + 1]);
            if (!req[k]) sb_fmt(&r, " | r%d", R[k + 1]);
            sb_fmt(&sn, "r%d r%d", kv[k], R[k + 1]);
            if (!req[k]) sb_fmt(&sn, " | r%d", S[k + 1]);
        }
        put_rule(c, R[k], &r);
        put_rule(c, S[k], &sn);
        tkv__free(r.s);
        tkv__free(sn.s);
    }
    sb_fmt(b, "\"{\" ws r%d ws \"}\"", S[0]);
    /* additionalProperties: more keys are never generated (the output still validates); a schema for them is
       not needed then */
}

/* The rule of a $ref ("#/$defs/X", "#/definitions/X", or "#"). */
static int gen_ref(conv *c, const char *ref) {
    json_t *rule = json_object_get(c->ref_rule, ref);
    if (rule) return (int)json_integer_value(rule);
    json_t *target = NULL;
    if (!strcmp(ref, "#")) target = c->root;
    else if (!strncmp(ref, "#/$defs/", 8)) target = json_object_get(json_object_get(c->root, "$defs"), ref + 8);
    else if (!strncmp(ref, "#/definitions/", 14))
        target = json_object_get(json_object_get(c->root, "definitions"), ref + 14);
    if (!target) {
        fail(c, TKV_ERR_INVALID, "'$ref': \"%s\" names nothing in this schema", ref);
        return 0;
    }
    /* the rule is named before it is written, so that a recursive reference finds it */
    const int id = new_rule(c);
    json_object_set_new(c->ref_rule, ref, json_integer(id));
    const int body = gen(c, target);
    sbuf b = {0};
    sb_fmt(&b, "r%d", body);
    put_rule(c, id, &b);
    tkv__free(b.s);
    return id;
}

/* Merge allOf's object schemas into one (properties and required unite; other keywords refused). */
static json_t *merge_all_of(conv *c, json_t *s) {
    json_t *all = json_object_get(s, "allOf"), *m = json_deep_copy(s);
    json_object_del(m, "allOf");
    for (size_t i = 0; i < json_array_size(all); i++) {
        json_t *part = json_array_get(all, i);
        if (json_is_string(json_object_get(part, "$ref"))) {
            const char *ref = json_string_value(json_object_get(part, "$ref"));
            part = !strncmp(ref, "#/$defs/", 8) ? json_object_get(json_object_get(c->root, "$defs"), ref + 8)
                   : !strncmp(ref, "#/definitions/", 14)
                       ? json_object_get(json_object_get(c->root, "definitions"), ref + 14)
                       : NULL;
        }
        const char *k;
        json_t *v;
        json_object_foreach(part, k, v) {
            if (!strcmp(k, "properties")) {
                if (!json_object_get(m, "properties")) json_object_set_new(m, "properties", json_object());
                json_object_update(json_object_get(m, "properties"), v);
            } else if (!strcmp(k, "required")) {
                if (!json_object_get(m, "required")) json_object_set_new(m, "required", json_array());
                json_array_extend(json_object_get(m, "required"), v);
            } else if (!strcmp(k, "type") && json_is_string(v) && !strcmp(json_string_value(v), "object")) {
                json_object_set(m, "type", v);
            } else if (strcmp(k, "title") && strcmp(k, "description") && strcmp(k, "$comment")) {
                fail(c, TKV_ERR_UNSUPPORTED, "'allOf': only object parts (properties, required) are merged; '%s' is "
                     "not enforced there", k);
            }
        }
    }
    return m;
}

static const char *const ANY_JSON = "ANYVAL";

/* The rule for a schema; its number. */
static int gen(conv *c, json_t *s) {
    if (c->st) return 0;
    if (++c->depth > MAX_DEPTH) {
        fail(c, TKV_ERR_UNSUPPORTED, "the schema nests deeper than %d", MAX_DEPTH);
        c->depth--;
        return 0;
    }
    const int id = new_rule(c);
    sbuf b = {0};
    if (!s || json_is_true(s) || (json_is_object(s) && json_object_size(s) == 0)) {
        sb_str(&b, ANY_JSON); /* any JSON value */
    } else if (json_is_false(s)) {
        fail(c, TKV_ERR_INVALID, "a schema of false allows nothing");
    } else if (!json_is_object(s)) {
        fail(c, TKV_ERR_INVALID, "a schema must be an object or a boolean");
    } else {
        const char *k;
        json_t *v;
        json_object_foreach(s, k, v) if (!known_keyword(k)) fail(c, TKV_ERR_UNSUPPORTED, "keyword '%s' is not enforced", k);
        json_t *type = json_object_get(s, "type"), *en = json_object_get(s, "enum"), *cn = json_object_get(s, "const"),
               *ref = json_object_get(s, "$ref"), *any = json_object_get(s, "anyOf");
        if (!any) any = json_object_get(s, "oneOf");
        if (c->st) {
            /* an unknown keyword: nothing more to write */
        } else if (json_object_get(s, "allOf")) {
            json_t *m = merge_all_of(c, s);
            sb_fmt(&b, "r%d", gen(c, m));
            json_decref(m);
        } else if (ref) {
            if (!json_is_string(ref)) fail(c, TKV_ERR_INVALID, "'$ref' must be a string");
            else sb_fmt(&b, "r%d", gen_ref(c, json_string_value(ref)));
        } else if (cn) {
            put_json_literal(c, &b, cn);
        } else if (en) {
            if (!json_is_array(en) || !json_array_size(en)) fail(c, TKV_ERR_INVALID, "'enum' must be a non-empty array");
            for (size_t i = 0; i < json_array_size(en); i++) {
                if (i) sb_str(&b, " | ");
                put_json_literal(c, &b, json_array_get(en, i));
            }
        } else if (any) {
            if (!json_is_array(any) || !json_array_size(any)) fail(c, TKV_ERR_INVALID, "'anyOf'/'oneOf' must be a non-empty array");
            for (size_t i = 0; i < json_array_size(any) && !c->st; i++) sb_fmt(&b, "%sr%d", i ? " | " : "", gen(c, json_array_get(any, i)));
        } else if (json_is_array(type)) {
            for (size_t i = 0; i < json_array_size(type) && !c->st; i++) {
                json_t *one = json_deep_copy(s);
                json_object_set(one, "type", json_array_get(type, i));
                sb_fmt(&b, "%sr%d", i ? " | " : "", gen(c, one));
                json_decref(one);
            }
        } else {
            const char *t = json_is_string(type) ? json_string_value(type)
                            : json_object_get(s, "properties") ? "object"
                            : json_object_get(s, "items") || json_object_get(s, "prefixItems") ? "array"
                                                                                                  : NULL;
            if (!t) sb_str(&b, ANY_JSON);
            else if (!strcmp(t, "object")) gen_object(c, s, &b);
            else if (!strcmp(t, "array")) gen_array(c, s, &b);
            else if (!strcmp(t, "string")) gen_string(c, s, &b);
            else if (!strcmp(t, "integer")) gen_number(c, s, &b, true);
            else if (!strcmp(t, "number")) gen_number(c, s, &b, false);
            else if (!strcmp(t, "boolean")) sb_str(&b, "\"true\" | \"false\"");
            else if (!strcmp(t, "null")) sb_str(&b, "\"null\"");
            else fail(c, TKV_ERR_INVALID, "'type': \"%s\" is not a JSON Schema type", t);
        }
    }
    if (b.oom) fail(c, TKV_ERR_NOMEM, "out of memory");
    if (!c->st) put_rule(c, id, &b);
    tkv__free(b.s);
    c->depth--;
    return id;
}

/* The rules every grammar carries: whitespace, dates and times, any JSON value (bounded in depth). */
static const char COMMON[] =
    "ws ::= \" \"?\n"
    "DATE ::= [0-9]{4} \"-\" ((\"0\" [13578] | \"1\" [02]) \"-\" (\"0\" [1-9] | [12] [0-9] | \"3\" [01]) | "
    "(\"0\" [469] | \"11\") \"-\" (\"0\" [1-9] | [12] [0-9] | \"30\") | \"02-\" (\"0\" [1-9] | \"1\" [0-9] | \"2\" [0-8]))\n"
    "TIME ::= ([01] [0-9] | \"2\" [0-3]) \":\" [0-5] [0-9] \":\" [0-5] [0-9] (\".\" [0-9]{1,6})? "
    "(\"Z\" | [+-] ([01] [0-9] | \"2\" [0-3]) \":\" [0-5] [0-9])\n"
    "ANYVAL ::= ANY3\n"
    "ANY3 ::= ATOM | \"[\" ws (ANY2 (\",\" ws ANY2){0,15})? ws \"]\" | \"{\" ws (KEY ws \":\" ws ANY2)? ws \"}\"\n"
    "ANY2 ::= ATOM | \"[\" ws (ANY1 (\",\" ws ANY1){0,15})? ws \"]\" | \"{\" ws (KEY ws \":\" ws ANY1)? ws \"}\"\n"
    "ANY1 ::= ATOM\n"
    "KEY ::= \"\\\"\" [a-zA-Z_] [a-zA-Z_0-9]{0,15} \"\\\"\"\n"
    "ATOM ::= \"null\" | \"true\" | \"false\" | \"-\"? (\"0\" | [1-9] [0-9]{0,15}) | \"\\\"\" ";

tkv_status tkv_json_schema_to_gbnf(const char *schema, size_t len, char **gbnf) {
    if (!gbnf) return tkv__fail(TKV_ERR_INVALID, "tkv_json_schema_to_gbnf: gbnf is NULL");
    *gbnf = NULL;
    if (!schema) return tkv__fail(TKV_ERR_INVALID, "tkv_json_schema_to_gbnf: schema is NULL");
    json_error_t je;
    json_t *root = json_loadb(schema, len, JSON_DECODE_ANY, &je);
    if (!root) return tkv__fail(TKV_ERR_INVALID, "schema: invalid JSON: %s (line %d, column %d)", je.text, je.line, je.column);
    conv c = {.root = root, .ref_rule = json_object()};
    const int top = gen(&c, root);
    sbuf out = {0};
    if (!c.st) {
        sb_fmt(&out, "root ::= r%d\n", top);
        sb_put(&out, c.rules.s ? c.rules.s : "", c.rules.n);
        sb_str(&out, COMMON);
        /* the end of ATOM: a string, bounded so that free-form output (json_object) always ends */
        sb_fmt(&out, "%s{0,48} \"\\\"\"\n", STRING_CHAR);
        if (c.rules.oom || out.oom) fail(&c, TKV_ERR_NOMEM, "out of memory");
    }
    json_decref(c.ref_rule);
    json_decref(root);
    tkv__free(c.rules.s);
    if (c.st) {
        tkv__free(out.s);
        return tkv__fail(c.st, "schema: %s", c.why);
    }
    *gbnf = out.s;
    return TKV_OK;
}
