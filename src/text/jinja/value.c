/*
 * text/jinja/value.c — the renderer's values: the arena they live in, Python's
 * truthiness, equality and ordering, str() and repr(), and UTF-8 helpers.
 */
#include "jinja.h"

#include "base/alloc.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- arena and errors ---- */

typedef struct tkv__jchunk {
    struct tkv__jchunk *next;
    size_t size, used;
    _Alignas(16) unsigned char data[];
} tkv__jchunk;

enum { CHUNK = 64 * 1024 };

void *tkv__jarena_alloc(tkv__jctx *c, size_t n) {
    tkv__jarena *a = &c->arena;
    if (n > ((size_t)1 << 40)) tkv__jraise(c, TKV_ERR_INVALID, "a value of the template is too large");
    n = (n + 15) & ~(size_t)15;
    tkv__jchunk *ch = a->chunks;
    if (!ch || ch->size - ch->used < n) {
        size_t size = n > CHUNK / 4 ? n : CHUNK;
        if (a->limit && (size > a->limit || a->used > a->limit - size))
            tkv__jraise(c, TKV_ERR_INVALID, "the template used more than %zu MiB of memory", a->limit >> 20);
        tkv__jchunk *nc = tkv__malloc(sizeof *nc + size);
        if (!nc) tkv__jraise(c, TKV_ERR_NOMEM, "out of memory");
        a->used += size;
        nc->size = size;
        nc->used = 0;
        if (size > CHUNK && ch) {
            /* a big block goes behind the current chunk, which keeps its free room */
            nc->next = ch->next;
            ch->next = nc;
        } else {
            nc->next = ch;
            a->chunks = nc;
        }
        ch = nc;
    }
    void *p = ch->data + ch->used;
    ch->used += n;
    return p;
}

void tkv__jarena_free(tkv__jarena *a) {
    tkv__jchunk *ch = a->chunks;
    while (ch) {
        tkv__jchunk *next = ch->next;
        tkv__free(ch);
        ch = next;
    }
    a->chunks = NULL;
    a->used = 0;
}

void tkv__jraise(tkv__jctx *c, tkv_status st, const char *fmt, ...) {
    /* line 0: before the template runs (its context) */
    int k = c->line > 0 ? snprintf(c->msg, sizeof c->msg, "template line %d: ", c->line) : 0;
    if (k < 0 || (size_t)k >= sizeof c->msg) k = 0;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->msg + k, sizeof c->msg - (size_t)k, fmt, ap);
    va_end(ap);
    /* the message is one line */
    for (char *p = c->msg; *p; p++)
        if (*p == '\n' || *p == '\r') *p = ' ';
    c->status = st;
    longjmp(c->fail, 1);
}

void tkv__jstep(tkv__jctx *c, long n) {
    c->steps += n;
    if (c->steps > TKV__JINJA_MAX_STEPS)
        tkv__jraise(c, TKV_ERR_INVALID, "the template took more than %ld steps", (long)TKV__JINJA_MAX_STEPS);
}

/* ---- constructors ---- */

tkv__jv tkv__jv_undef(const char *name) {
    tkv__jv v = {.type = TKV__JV_UNDEF};
    v.u.str.p = name;
    v.u.str.n = name ? strlen(name) : 0;
    return v;
}

tkv__jv tkv__jv_none(void) { return (tkv__jv){.type = TKV__JV_NONE}; }

tkv__jv tkv__jv_bool(bool b) {
    tkv__jv v = {.type = TKV__JV_BOOL};
    v.u.b = b;
    return v;
}

tkv__jv tkv__jv_int(int64_t i) {
    tkv__jv v = {.type = TKV__JV_INT};
    v.u.i = i;
    return v;
}

tkv__jv tkv__jv_float(double f) {
    tkv__jv v = {.type = TKV__JV_FLOAT};
    v.u.f = f;
    return v;
}

tkv__jv tkv__jv_str(const char *p, size_t n) {
    tkv__jv v = {.type = TKV__JV_STR};
    v.u.str.p = p;
    v.u.str.n = n;
    return v;
}

tkv__jv tkv__jv_strdup(tkv__jctx *c, const char *p, size_t n) {
    char *q = tkv__jarena_alloc(c, n + 1);
    if (n) memcpy(q, p, n);
    q[n] = 0;
    return tkv__jv_str(q, n);
}

tkv__jv tkv__jv_cstr(const char *s) { return tkv__jv_str(s, strlen(s)); }

tkv__jv tkv__jv_list(tkv__jctx *c, size_t n) {
    tkv__jv v = {.type = TKV__JV_LIST};
    v.u.list = tkv__jarena_alloc(c, sizeof *v.u.list);
    v.u.list->n = n;
    v.u.list->items = n ? tkv__jarena_alloc(c, n * sizeof(tkv__jv)) : NULL;
    for (size_t i = 0; i < n; i++) v.u.list->items[i] = tkv__jv_none();
    return v;
}

tkv__jv tkv__jv_dict(tkv__jctx *c, size_t cap) {
    tkv__jv v = {.type = TKV__JV_DICT};
    v.u.dict = tkv__jarena_alloc(c, sizeof *v.u.dict);
    if (cap < 4) cap = 4;
    v.u.dict->n = 0;
    v.u.dict->cap = cap;
    v.u.dict->keys = tkv__jarena_alloc(c, cap * sizeof(tkv__jv));
    v.u.dict->vals = tkv__jarena_alloc(c, cap * sizeof(tkv__jv));
    return v;
}

/* Dicts are small (a message, a tool's schema): a linear look-up is the right tool. */
tkv__jv *tkv__jv_dict_get(tkv__jv d, tkv__jv key) {
    tkv__jdict *x = d.u.dict;
    for (size_t i = 0; i < x->n; i++)
        if (tkv__jv_equal(x->keys[i], key)) return &x->vals[i];
    return NULL;
}

tkv__jv *tkv__jv_dict_getn(tkv__jv d, const char *key, size_t n) {
    tkv__jdict *x = d.u.dict;
    for (size_t i = 0; i < x->n; i++)
        if (x->keys[i].type == TKV__JV_STR && x->keys[i].u.str.n == n && !memcmp(x->keys[i].u.str.p, key, n))
            return &x->vals[i];
    return NULL;
}

void tkv__jv_dict_set(tkv__jctx *c, tkv__jv d, tkv__jv key, tkv__jv val) {
    tkv__jdict *x = d.u.dict;
    tkv__jstep(c, (long)x->n / 8 + 1);
    tkv__jv *slot = tkv__jv_dict_get(d, key);
    if (slot) {
        *slot = val;
        return;
    }
    if (x->n == x->cap) {
        size_t cap = x->cap * 2;
        tkv__jv *k = tkv__jarena_alloc(c, cap * sizeof *k), *v = tkv__jarena_alloc(c, cap * sizeof *v);
        memcpy(k, x->keys, x->n * sizeof *k);
        memcpy(v, x->vals, x->n * sizeof *v);
        x->keys = k;
        x->vals = v;
        x->cap = cap;
    }
    x->keys[x->n] = key;
    x->vals[x->n] = val;
    x->n++;
}

/* ---- search ---- */

size_t tkv__jfind(tkv__jctx *c, tkv__jv hay, size_t from, tkv__jv needle) {
    const char *h = hay.u.str.p, *s = needle.u.str.p;
    size_t hn = hay.u.str.n, n = needle.u.str.n;
    if (n > hn || from > hn - n) return SIZE_MAX;
    if (!n) return from;
    /* a plain search, charged by the bytes it compares: a needle and a text built to make it quadratic
       reach the step limit rather than hang the render */
    size_t compared = 0;
    for (size_t i = from; i <= hn - n;) {
        const char *at = memchr(h + i, s[0], hn - n + 1 - i);
        if (!at) break;
        i = (size_t)(at - h);
        size_t k = 1;
        while (k < n && h[i + k] == s[k]) k++;
        compared += k;
        if (compared >= 32) {
            /* a step for 32 bytes: about what a step of evaluation costs */
            tkv__jstep(c, (long)(compared / 32));
            compared %= 32;
        }
        if (k == n) return i;
        i++;
    }
    return SIZE_MAX;
}

/* ---- concatenation ---- */

/*
 * Templates build their output by `{% set ns.out = ns.out ~ piece %}` in a loop. With values that are never
 * freed, copying ns.out each time would cost memory quadratic in the output. So a concatenation's result
 * lives in storage with spare room and a header saying how much of it is used: when the left operand is
 * the longest value over that storage (used == its length), the right one is appended in place. Shorter
 * values over the same storage keep seeing their own prefix, which never changes.
 */
typedef struct grow_hdr {
    size_t cap, used; /* in bytes for a str, in items for a list */
} grow_hdr;

static grow_hdr *grow_new(tkv__jctx *c, size_t need, size_t unit) {
    size_t cap = need < 32 ? 64 : need * 2;
    if (cap > (TKV__JINJA_MAX_MEMORY - sizeof(grow_hdr)) / unit) cap = need;
    if (need > (TKV__JINJA_MAX_MEMORY - sizeof(grow_hdr)) / unit)
        tkv__jraise(c, TKV_ERR_INVALID, "a value of the template is too long");
    grow_hdr *h = tkv__jarena_alloc(c, sizeof *h + cap * unit + 1);
    h->cap = cap;
    h->used = 0;
    return h;
}

tkv__jv tkv__jv_concat(tkv__jctx *c, tkv__jv a, tkv__jv b) {
    if (a.type == TKV__JV_STR) {
        size_t n = a.u.str.n + b.u.str.n;
        if (n > TKV__JINJA_MAX_OUTPUT)
            tkv__jraise(c, TKV_ERR_INVALID, "a string of the template is longer than %u MiB",
                        TKV__JINJA_MAX_OUTPUT >> 20);
        grow_hdr *h = (a.flags & TKV__JV_GROW) ? (grow_hdr *)a.u.str.p - 1 : NULL;
        char *data;
        if (!h || h->used != a.u.str.n || h->cap - h->used < b.u.str.n) {
            h = grow_new(c, n, 1);
            data = (char *)(h + 1);
            if (a.u.str.n) memcpy(data, a.u.str.p, a.u.str.n);
        } else {
            data = (char *)(h + 1);
        }
        if (b.u.str.n) memmove(data + a.u.str.n, b.u.str.p, b.u.str.n);
        data[n] = 0;
        h->used = n;
        tkv__jv out = tkv__jv_str(data, n);
        out.flags = (uint8_t)((a.flags & TKV__JV_MARKUP) | TKV__JV_GROW);
        tkv__jstep(c, (long)(b.u.str.n / 64));
        return out;
    }
    size_t an = a.u.list->n, bn = b.u.list->n, n = an + bn;
    grow_hdr *h = (a.flags & TKV__JV_GROW) ? (grow_hdr *)a.u.list->items - 1 : NULL;
    if (!h || h->used != an || h->cap - h->used < bn) {
        h = grow_new(c, n, sizeof(tkv__jv));
        if (an) memcpy(h + 1, a.u.list->items, an * sizeof(tkv__jv));
    }
    tkv__jv *items = (tkv__jv *)(h + 1);
    if (bn) memmove(items + an, b.u.list->items, bn * sizeof(tkv__jv));
    h->used = n;
    tkv__jv out = {.type = TKV__JV_LIST, .flags = (uint8_t)((a.flags & TKV__JV_TUPLE) | TKV__JV_GROW)};
    out.u.list = tkv__jarena_alloc(c, sizeof *out.u.list);
    out.u.list->n = n;
    out.u.list->items = items;
    tkv__jstep(c, (long)bn);
    return out;
}

/* ---- Python semantics ---- */

bool tkv__jv_truthy(tkv__jv v) {
    switch (v.type) {
    case TKV__JV_UNDEF:
    case TKV__JV_NONE: return false;
    case TKV__JV_BOOL: return v.u.b;
    case TKV__JV_INT: return v.u.i != 0;
    case TKV__JV_FLOAT: return v.u.f != 0;
    case TKV__JV_STR: return v.u.str.n != 0;
    case TKV__JV_LIST: return (v.flags & TKV__JV_GEN) || v.u.list->n != 0;
    case TKV__JV_DICT: return (v.flags & TKV__JV_NAMESPACE) || v.u.dict->n != 0;
    default: return true;
    }
}

bool tkv__jv_is_num(tkv__jv v) {
    return v.type == TKV__JV_INT || v.type == TKV__JV_FLOAT || v.type == TKV__JV_BOOL;
}

double tkv__jv_num(tkv__jv v) {
    return v.type == TKV__JV_FLOAT ? v.u.f : v.type == TKV__JV_INT ? (double)v.u.i : (double)v.u.b;
}

static int64_t as_int(tkv__jv v) { return v.type == TKV__JV_INT ? v.u.i : (int64_t)v.u.b; }

bool tkv__jv_equal(tkv__jv a, tkv__jv b) {
    if (tkv__jv_is_num(a) && tkv__jv_is_num(b)) {
        if (a.type != TKV__JV_FLOAT && b.type != TKV__JV_FLOAT) return as_int(a) == as_int(b);
        return tkv__jv_num(a) == tkv__jv_num(b);
    }
    if (a.type != b.type) return false;
    switch (a.type) {
    case TKV__JV_UNDEF:
    case TKV__JV_NONE: return true;
    case TKV__JV_STR: return a.u.str.n == b.u.str.n && !memcmp(a.u.str.p, b.u.str.p, a.u.str.n);
    case TKV__JV_LIST:
        if ((a.flags | b.flags) & TKV__JV_GEN) return a.u.list == b.u.list;
        if ((a.flags & TKV__JV_TUPLE) != (b.flags & TKV__JV_TUPLE) || a.u.list->n != b.u.list->n) return false;
        for (size_t i = 0; i < a.u.list->n; i++)
            if (!tkv__jv_equal(a.u.list->items[i], b.u.list->items[i])) return false;
        return true;
    case TKV__JV_DICT:
        if ((a.flags | b.flags) & TKV__JV_NAMESPACE) return a.u.dict == b.u.dict;
        if (a.u.dict->n != b.u.dict->n) return false;
        for (size_t i = 0; i < a.u.dict->n; i++) {
            tkv__jv *o = tkv__jv_dict_get(b, a.u.dict->keys[i]);
            if (!o || !tkv__jv_equal(a.u.dict->vals[i], *o)) return false;
        }
        return true;
    case TKV__JV_FUNC: return a.u.fn == b.u.fn;
    case TKV__JV_LOOP: return a.u.loop == b.u.loop;
    default: return false;
    }
}

const char *tkv__jv_type_name(tkv__jv v) {
    switch (v.type) {
    case TKV__JV_UNDEF: return "Undefined";
    case TKV__JV_NONE: return "NoneType";
    case TKV__JV_BOOL: return "bool";
    case TKV__JV_INT: return "int";
    case TKV__JV_FLOAT: return "float";
    case TKV__JV_STR: return "str";
    case TKV__JV_LIST: return v.flags & TKV__JV_GEN ? "generator" : v.flags & TKV__JV_TUPLE ? "tuple" : "list";
    case TKV__JV_DICT: return v.flags & TKV__JV_NAMESPACE ? "Namespace" : "dict";
    case TKV__JV_FUNC: return "function";
    default: return "LoopContext";
    }
}

static int cmp_bytes(const char *a, size_t an, const char *b, size_t bn) {
    /* UTF-8 byte order is code point order, as Python compares str */
    int r = memcmp(a, b, an < bn ? an : bn);
    if (r) return r < 0 ? -1 : 1;
    return an < bn ? -1 : an > bn ? 1 : 0;
}

int tkv__jv_compare(tkv__jctx *c, tkv__jv a, tkv__jv b) {
    if (a.type == TKV__JV_UNDEF) tkv__jundef_fail(c, a);
    if (b.type == TKV__JV_UNDEF) tkv__jundef_fail(c, b);
    if (tkv__jv_is_num(a) && tkv__jv_is_num(b)) {
        if (a.type != TKV__JV_FLOAT && b.type != TKV__JV_FLOAT) {
            int64_t x = as_int(a), y = as_int(b);
            return x < y ? -1 : x > y;
        }
        double x = tkv__jv_num(a), y = tkv__jv_num(b);
        return x < y ? -1 : x > y;
    }
    if (a.type == TKV__JV_STR && b.type == TKV__JV_STR) return cmp_bytes(a.u.str.p, a.u.str.n, b.u.str.p, b.u.str.n);
    if (a.type == TKV__JV_LIST && b.type == TKV__JV_LIST && (a.flags & TKV__JV_TUPLE) == (b.flags & TKV__JV_TUPLE)) {
        size_t n = a.u.list->n < b.u.list->n ? a.u.list->n : b.u.list->n;
        for (size_t i = 0; i < n; i++) {
            tkv__jstep(c, 1);
            tkv__jv x = a.u.list->items[i], y = b.u.list->items[i];
            if (!tkv__jv_equal(x, y)) return tkv__jv_compare(c, x, y);
        }
        return a.u.list->n < b.u.list->n ? -1 : a.u.list->n > b.u.list->n;
    }
    tkv__jraise(c, TKV_ERR_INVALID, "'<' not supported between instances of '%s' and '%s'", tkv__jv_type_name(a),
                tkv__jv_type_name(b));
}

/* ---- buffers ---- */

void tkv__jbuf_add(tkv__jctx *c, tkv__jbuf *b, const char *s, size_t n) {
    if (b->cap - b->n <= n) {
        if (n > TKV__JINJA_MAX_OUTPUT || b->n > TKV__JINJA_MAX_OUTPUT)
            tkv__jraise(c, TKV_ERR_INVALID, "a string of the template is longer than %u MiB",
                        TKV__JINJA_MAX_OUTPUT >> 20);
        size_t cap = b->cap ? b->cap * 2 : 64;
        while (cap - b->n <= n) cap *= 2;
        char *p = tkv__jarena_alloc(c, cap);
        if (b->n) memcpy(p, b->p, b->n);
        b->p = p;
        b->cap = cap;
    }
    if (n) memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}

void tkv__jbuf_addc(tkv__jctx *c, tkv__jbuf *b, char ch) { tkv__jbuf_add(c, b, &ch, 1); }

tkv__jv tkv__jbuf_value(tkv__jbuf *b) { return tkv__jv_str(b->p ? b->p : "", b->n); }

/* ---- str() and repr() ---- */

void tkv__jv_write_float(tkv__jbuf *b, tkv__jctx *c, double f) {
    char s[48];
    if (isnan(f)) {
        tkv__jbuf_add(c, b, "nan", 3);
        return;
    }
    if (isinf(f)) {
        tkv__jbuf_add(c, b, f < 0 ? "-inf" : "inf", f < 0 ? 4 : 3);
        return;
    }
    /* Python's repr: the shortest digits that read back as f ... */
    int prec = 1;
    for (; prec < 17; prec++) {
        snprintf(s, sizeof s, "%.*e", prec - 1, f);
        if (strtod(s, NULL) == f) break;
    }
    snprintf(s, sizeof s, "%.*e", prec - 1, f);
    char digits[24];
    size_t nd = 0;
    const char *p = s;
    bool neg = *p == '-';
    if (neg) p++;
    for (; *p && *p != 'e'; p++)
        if (*p >= '0' && *p <= '9') digits[nd++] = *p;
    int exp = atoi(p + 1);
    while (nd > 1 && digits[nd - 1] == '0') nd--;
    /* ... written as fixed point for exponents -4..15, else as d.ddde+XX */
    char o[64];
    size_t k = 0;
    if (neg) o[k++] = '-';
    if (exp >= -4 && exp < 16) {
        if (exp < 0) {
            o[k++] = '0';
            o[k++] = '.';
            for (int i = 0; i < -exp - 1; i++) o[k++] = '0';
            for (size_t i = 0; i < nd; i++) o[k++] = digits[i];
        } else {
            for (int i = 0; i <= exp; i++) o[k++] = (size_t)i < nd ? digits[i] : '0';
            o[k++] = '.';
            if ((size_t)exp + 1 < nd)
                for (size_t i = (size_t)exp + 1; i < nd; i++) o[k++] = digits[i];
            else
                o[k++] = '0';
        }
    } else {
        o[k++] = digits[0];
        if (nd > 1) {
            o[k++] = '.';
            for (size_t i = 1; i < nd; i++) o[k++] = digits[i];
        }
        k += (size_t)snprintf(o + k, sizeof o - k, "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
    }
    tkv__jbuf_add(c, b, o, k);
}

/* Python's str.isprintable, for the code points a chat could carry. */
static bool py_printable(uint32_t cp) {
    if (cp < 0x20 || (cp >= 0x7f && cp <= 0xa0) || cp == 0xad) return false;
    if (cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200f) || (cp >= 0x2028 && cp <= 0x202f)) return false;
    if ((cp >= 0x205f && cp <= 0x206f) || cp == 0x3000 || cp == 0xfeff || (cp >= 0xd800 && cp <= 0xf8ff)) return false;
    if (cp >= 0xfff9 && cp <= 0xfffb) return false;
    if (cp >= 0xe0000) return false;
    return true;
}

static void write_str_repr(tkv__jctx *c, tkv__jbuf *b, const char *s, size_t n) {
    bool sq = memchr(s, '\'', n) != NULL, dq = memchr(s, '"', n) != NULL;
    char q = sq && !dq ? '"' : '\'';
    tkv__jbuf_addc(c, b, q);
    size_t i = 0;
    while (i < n) {
        size_t used;
        uint32_t cp = tkv__utf8_decode(s + i, n - i, &used);
        char e[16];
        if (cp == (uint32_t)q || cp == '\\') {
            e[0] = '\\';
            e[1] = (char)cp;
            tkv__jbuf_add(c, b, e, 2);
        } else if (cp == '\n') {
            tkv__jbuf_add(c, b, "\\n", 2);
        } else if (cp == '\r') {
            tkv__jbuf_add(c, b, "\\r", 2);
        } else if (cp == '\t') {
            tkv__jbuf_add(c, b, "\\t", 2);
        } else if (!py_printable(cp)) {
            int k = cp < 0x100 ? snprintf(e, sizeof e, "\\x%02x", cp)
                    : cp < 0x10000 ? snprintf(e, sizeof e, "\\u%04x", cp) : snprintf(e, sizeof e, "\\U%08x", cp);
            tkv__jbuf_add(c, b, e, (size_t)k);
        } else {
            tkv__jbuf_add(c, b, s + i, used);
        }
        i += used;
    }
    tkv__jbuf_addc(c, b, q);
}

void tkv__jv_write_repr(tkv__jctx *c, tkv__jbuf *b, tkv__jv v, int depth) {
    if (depth > 200) tkv__jraise(c, TKV_ERR_INVALID, "a value is nested too deeply to print");
    tkv__jstep(c, 1);
    switch (v.type) {
    case TKV__JV_UNDEF: tkv__jbuf_add(c, b, "Undefined", 9); return;
    case TKV__JV_STR: write_str_repr(c, b, v.u.str.p, v.u.str.n); return;
    case TKV__JV_LIST: {
        if (v.flags & TKV__JV_GEN) {
            tkv__jbuf_add(c, b, "<generator object>", 18);
            return;
        }
        bool tuple = v.flags & TKV__JV_TUPLE;
        tkv__jbuf_addc(c, b, tuple ? '(' : '[');
        for (size_t i = 0; i < v.u.list->n; i++) {
            if (i) tkv__jbuf_add(c, b, ", ", 2);
            tkv__jv_write_repr(c, b, v.u.list->items[i], depth + 1);
        }
        if (tuple && v.u.list->n == 1) tkv__jbuf_addc(c, b, ',');
        tkv__jbuf_addc(c, b, tuple ? ')' : ']');
        return;
    }
    case TKV__JV_DICT: {
        bool ns = v.flags & TKV__JV_NAMESPACE;
        if (ns) tkv__jbuf_add(c, b, "<Namespace ", 11);
        tkv__jbuf_addc(c, b, '{');
        for (size_t i = 0; i < v.u.dict->n; i++) {
            if (i) tkv__jbuf_add(c, b, ", ", 2);
            tkv__jv_write_repr(c, b, v.u.dict->keys[i], depth + 1);
            tkv__jbuf_add(c, b, ": ", 2);
            tkv__jv_write_repr(c, b, v.u.dict->vals[i], depth + 1);
        }
        tkv__jbuf_addc(c, b, '}');
        if (ns) tkv__jbuf_addc(c, b, '>');
        return;
    }
    default: tkv__jv_write_str(c, b, v); return;
    }
}

void tkv__jv_write_str(tkv__jctx *c, tkv__jbuf *b, tkv__jv v) {
    char s[32];
    switch (v.type) {
    case TKV__JV_UNDEF: return;
    case TKV__JV_NONE: tkv__jbuf_add(c, b, "None", 4); return;
    case TKV__JV_BOOL: tkv__jbuf_add(c, b, v.u.b ? "True" : "False", v.u.b ? 4 : 5); return;
    case TKV__JV_INT: tkv__jbuf_add(c, b, s, (size_t)snprintf(s, sizeof s, "%lld", (long long)v.u.i)); return;
    case TKV__JV_FLOAT: tkv__jv_write_float(b, c, v.u.f); return;
    case TKV__JV_STR: tkv__jbuf_add(c, b, v.u.str.p, v.u.str.n); return;
    case TKV__JV_FUNC: tkv__jbuf_add(c, b, "<function>", 10); return;
    case TKV__JV_LOOP: tkv__jbuf_add(c, b, "<LoopContext>", 13); return;
    default: tkv__jv_write_repr(c, b, v, 0); return;
    }
}

tkv__jv tkv__jescape(tkv__jctx *c, tkv__jv v) {
    tkv__jv s = tkv__jv_to_str(c, v);
    tkv__jbuf b = {0};
    tkv__jbuf_add(c, &b, "", 0);
    for (size_t i = 0; i < s.u.str.n; i++) {
        char ch = s.u.str.p[i];
        const char *rep = ch == '&' ? "&amp;" : ch == '<' ? "&lt;" : ch == '>' ? "&gt;" : ch == '"' ? "&#34;"
                          : ch == '\'' ? "&#39;" : NULL;
        if (rep) tkv__jbuf_add(c, &b, rep, strlen(rep));
        else tkv__jbuf_addc(c, &b, ch);
    }
    tkv__jv out = tkv__jbuf_value(&b);
    out.flags = TKV__JV_MARKUP;
    return out;
}

tkv__jv tkv__jv_to_str(tkv__jctx *c, tkv__jv v) {
    if (v.type == TKV__JV_STR) return v;
    if (v.type == TKV__JV_UNDEF) return tkv__jv_str("", 0);
    tkv__jbuf b = {0};
    tkv__jv_write_str(c, &b, v);
    return tkv__jbuf_value(&b);
}

/* ---- UTF-8 ---- */

uint32_t tkv__utf8_decode(const char *p, size_t n, size_t *used) {
    const unsigned char *s = (const unsigned char *)p;
    unsigned char b = s[0];
    size_t len = b < 0x80 ? 1 : (b >> 5) == 6 ? 2 : (b >> 4) == 14 ? 3 : (b >> 3) == 30 ? 4 : 0;
    if (len == 0 || len > n) {
        *used = 1;
        return b; /* a stray byte stands for itself */
    }
    uint32_t cp = len == 1 ? b : len == 2 ? b & 0x1f : len == 3 ? b & 0x0f : b & 0x07;
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xc0) != 0x80) {
            *used = 1;
            return b;
        }
        cp = cp << 6 | (s[i] & 0x3f);
    }
    *used = len;
    return cp;
}

size_t tkv__utf8_encode(uint32_t cp, char out[4]) {
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xc0 | cp >> 6);
        out[1] = (char)(0x80 | (cp & 0x3f));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xe0 | cp >> 12);
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
        out[2] = (char)(0x80 | (cp & 0x3f));
        return 3;
    }
    out[0] = (char)(0xf0 | cp >> 18);
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
    out[3] = (char)(0x80 | (cp & 0x3f));
    return 4;
}

/* Eight bytes at p all ASCII? (Most text is: the walks below take it eight bytes at a time.) */
static bool ascii8(const char *p) {
    uint64_t w;
    memcpy(&w, p, 8);
    return !(w & 0x8080808080808080ull);
}

size_t tkv__utf8_len(const char *p, size_t n) {
    size_t k = 0, i = 0;
    while (i < n) {
        if (n - i >= 8 && ascii8(p + i)) {
            i += 8;
            k += 8;
            continue;
        }
        size_t used;
        tkv__utf8_decode(p + i, n - i, &used);
        i += used;
        k++;
    }
    return k;
}

size_t tkv__utf8_offset(const char *p, size_t n, size_t cp) {
    size_t i = 0;
    while (i < n && cp > 0) {
        if (cp >= 8 && n - i >= 8 && ascii8(p + i)) {
            i += 8;
            cp -= 8;
            continue;
        }
        size_t used;
        tkv__utf8_decode(p + i, n - i, &used);
        i += used;
        cp--;
    }
    return i;
}

bool tkv__py_isspace(uint32_t cp) {
    return (cp >= 9 && cp <= 13) || (cp >= 0x1c && cp <= 0x20) || cp == 0x85 || cp == 0xa0 || cp == 0x1680 ||
           (cp >= 0x2000 && cp <= 0x200a) || cp == 0x2028 || cp == 0x2029 || cp == 0x202f || cp == 0x205f ||
           cp == 0x3000;
}
