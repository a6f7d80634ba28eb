/*
 * text/jinja/json.c — the render context from JSON (through jansson), and
 * `tojson` written as Python's json.dumps writes it.
 *
 * json.dumps, as transformers calls it: ", " and ": " between items and keys
 * (with an indent, "," at line ends), non-ASCII kept unless ensure_ascii
 * (then \uXXXX, surrogate pairs above U+FFFF), control characters escaped,
 * "/" not escaped, no HTML escaping, floats as Python's repr.
 */
#include "jinja.h"

#include <jansson.h>
#include <stdio.h>
#include <string.h>

static tkv__jv from_json(tkv__jctx *c, json_t *j) {
    switch (json_typeof(j)) {
    case JSON_OBJECT: {
        tkv__jv d = tkv__jv_dict(c, json_object_size(j));
        const char *key;
        size_t klen;
        json_t *val;
        /* jansson keeps insertion order: templates iterate objects in the order the request wrote them */
        json_object_keylen_foreach(j, key, klen, val) {
            tkv__jdict *x = d.u.dict;
            x->keys[x->n] = tkv__jv_strdup(c, key, klen);
            x->vals[x->n] = from_json(c, val);
            x->n++;
        }
        return d;
    }
    case JSON_ARRAY: {
        size_t n = json_array_size(j);
        tkv__jv l = tkv__jv_list(c, n);
        for (size_t i = 0; i < n; i++) l.u.list->items[i] = from_json(c, json_array_get(j, i));
        return l;
    }
    case JSON_STRING: return tkv__jv_strdup(c, json_string_value(j), json_string_length(j));
    case JSON_INTEGER: return tkv__jv_int((int64_t)json_integer_value(j));
    case JSON_REAL: return tkv__jv_float(json_real_value(j));
    case JSON_TRUE: return tkv__jv_bool(true);
    case JSON_FALSE: return tkv__jv_bool(false);
    default: return tkv__jv_none();
    }
}

void tkv__jv_from_json(tkv__jctx *c, const char *json, tkv__jv *out) {
    json_error_t err;
    json_t *j = json_loads(json, JSON_ALLOW_NUL, &err);
    if (!j)
        tkv__jraise(c, TKV_ERR_INVALID, "the template's context is not valid JSON: %s (line %d)", err.text, err.line);
    /* from_json may longjmp (memory limit); the JSON tree would leak, so build it under a guard */
    jmp_buf saved;
    memcpy(saved, c->fail, sizeof saved);
    if (setjmp(c->fail)) {
        json_decref(j);
        memcpy(c->fail, saved, sizeof saved);
        longjmp(c->fail, 1);
    }
    *out = from_json(c, j);
    memcpy(c->fail, saved, sizeof saved);
    json_decref(j);
}

/* ---- tojson ---- */

static void write_string(tkv__jctx *c, tkv__jbuf *b, const char *s, size_t n, bool ascii) {
    tkv__jbuf_addc(c, b, '"');
    size_t i = 0;
    while (i < n) {
        unsigned char ch = (unsigned char)s[i];
        char e[16];
        if (ch < 0x80) {
            const char *rep = NULL;
            switch (ch) {
            case '"': rep = "\\\""; break;
            case '\\': rep = "\\\\"; break;
            case '\n': rep = "\\n"; break;
            case '\r': rep = "\\r"; break;
            case '\t': rep = "\\t"; break;
            case '\b': rep = "\\b"; break;
            case '\f': rep = "\\f"; break;
            default: break;
            }
            if (rep) {
                tkv__jbuf_add(c, b, rep, 2);
            } else if (ch < 0x20) {
                tkv__jbuf_add(c, b, e, (size_t)snprintf(e, sizeof e, "\\u%04x", ch));
            } else {
                tkv__jbuf_addc(c, b, (char)ch);
            }
            i++;
            continue;
        }
        size_t used;
        uint32_t cp = tkv__utf8_decode(s + i, n - i, &used);
        if (!ascii) {
            tkv__jbuf_add(c, b, s + i, used);
        } else if (cp >= 0x10000) {
            uint32_t v = cp - 0x10000;
            tkv__jbuf_add(c, b, e, (size_t)snprintf(e, sizeof e, "\\u%04x\\u%04x", 0xd800 + (v >> 10),
                                                    0xdc00 + (v & 0x3ff)));
        } else {
            tkv__jbuf_add(c, b, e, (size_t)snprintf(e, sizeof e, "\\u%04x", cp));
        }
        i += used;
    }
    tkv__jbuf_addc(c, b, '"');
}

typedef struct dumper {
    tkv__jctx *c;
    tkv__jbuf *b;
    bool ascii, sort;
    const char *indent; /* NULL: all on one line */
    const char *item_sep, *key_sep;
} dumper;

static void newline(const dumper *d, int level) {
    tkv__jbuf_addc(d->c, d->b, '\n');
    size_t n = strlen(d->indent);
    for (int i = 0; i < level; i++) tkv__jbuf_add(d->c, d->b, d->indent, n);
}

/* A dict key as json.dumps writes it: strings as they are, numbers, booleans and None as their JSON text. */
static void write_key(const dumper *d, tkv__jv k) {
    tkv__jbuf tmp = {0};
    switch (k.type) {
    case TKV__JV_STR: write_string(d->c, d->b, k.u.str.p, k.u.str.n, d->ascii); return;
    case TKV__JV_INT: tkv__jv_write_str(d->c, &tmp, k); break;
    case TKV__JV_FLOAT: tkv__jv_write_float(&tmp, d->c, k.u.f); break;
    case TKV__JV_BOOL: tkv__jbuf_add(d->c, &tmp, k.u.b ? "true" : "false", k.u.b ? 4 : 5); break;
    case TKV__JV_NONE: tkv__jbuf_add(d->c, &tmp, "null", 4); break;
    default:
        tkv__jraise(d->c, TKV_ERR_INVALID, "keys must be str, int, float, bool or None, not %s",
                    tkv__jv_type_name(k));
    }
    write_string(d->c, d->b, tmp.p, tmp.n, d->ascii);
}

static int key_order(tkv__jctx *c, tkv__jv a, tkv__jv b) { return tkv__jv_compare(c, a, b); }

static void dump(const dumper *d, tkv__jv v, int level) {
    tkv__jctx *c = d->c;
    if (level > 200) tkv__jraise(c, TKV_ERR_INVALID, "a value is nested too deeply for tojson");
    tkv__jstep(c, 1);
    switch (v.type) {
    case TKV__JV_NONE: tkv__jbuf_add(c, d->b, "null", 4); return;
    case TKV__JV_BOOL: tkv__jbuf_add(c, d->b, v.u.b ? "true" : "false", v.u.b ? 4 : 5); return;
    case TKV__JV_INT: tkv__jv_write_str(c, d->b, v); return;
    case TKV__JV_FLOAT:
        if (v.u.f != v.u.f) tkv__jbuf_add(c, d->b, "NaN", 3);
        else if (v.u.f > 1.7976931348623157e308) tkv__jbuf_add(c, d->b, "Infinity", 8);
        else if (v.u.f < -1.7976931348623157e308) tkv__jbuf_add(c, d->b, "-Infinity", 9);
        else tkv__jv_write_float(d->b, c, v.u.f);
        return;
    case TKV__JV_STR: write_string(c, d->b, v.u.str.p, v.u.str.n, d->ascii); return;
    case TKV__JV_LIST: {
        if (v.flags & TKV__JV_GEN) break;
        size_t n = v.u.list->n;
        if (!n) {
            tkv__jbuf_add(c, d->b, "[]", 2);
            return;
        }
        tkv__jbuf_addc(c, d->b, '[');
        for (size_t i = 0; i < n; i++) {
            if (i) tkv__jbuf_add(c, d->b, d->item_sep, strlen(d->item_sep));
            if (d->indent) newline(d, level + 1);
            dump(d, v.u.list->items[i], level + 1);
        }
        if (d->indent) newline(d, level);
        tkv__jbuf_addc(c, d->b, ']');
        return;
    }
    case TKV__JV_DICT: {
        if (v.flags & TKV__JV_NAMESPACE) break;
        size_t n = v.u.dict->n;
        if (!n) {
            tkv__jbuf_add(c, d->b, "{}", 2);
            return;
        }
        size_t *order = tkv__jarena_alloc(c, n * sizeof *order);
        for (size_t i = 0; i < n; i++) order[i] = i;
        if (d->sort) {
            /* insertion sort: stable, and dicts are small */
            tkv__jstep(c, (long)(n * n / 16));
            for (size_t i = 1; i < n; i++)
                for (size_t j = i; j > 0 && key_order(c, v.u.dict->keys[order[j - 1]], v.u.dict->keys[order[j]]) > 0;
                     j--) {
                    size_t t = order[j];
                    order[j] = order[j - 1];
                    order[j - 1] = t;
                }
        }
        tkv__jbuf_addc(c, d->b, '{');
        for (size_t k = 0; k < n; k++) {
            size_t i = order[k];
            if (k) tkv__jbuf_add(c, d->b, d->item_sep, strlen(d->item_sep));
            if (d->indent) newline(d, level + 1);
            write_key(d, v.u.dict->keys[i]);
            tkv__jbuf_add(c, d->b, d->key_sep, strlen(d->key_sep));
            dump(d, v.u.dict->vals[i], level + 1);
        }
        if (d->indent) newline(d, level);
        tkv__jbuf_addc(c, d->b, '}');
        return;
    }
    default: break;
    }
    if (v.type == TKV__JV_UNDEF) tkv__jundef_fail(c, v);
    tkv__jraise(c, TKV_ERR_INVALID, "Object of type %s is not JSON serializable", tkv__jv_type_name(v));
}

void tkv__jv_write_json(tkv__jctx *c, tkv__jbuf *b, tkv__jv v, const tkv__json_style *st) {
    dumper d = {.c = c, .b = b, .ascii = st->ensure_ascii, .sort = st->sort_keys, .indent = st->has_indent ? st->indent : NULL};
    d.item_sep = st->item_sep ? st->item_sep : st->has_indent ? "," : ", ";
    d.key_sep = st->key_sep ? st->key_sep : ": ";
    dump(&d, v, 0);
}
