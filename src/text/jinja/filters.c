/*
 * text/jinja/filters.c — Jinja2's filters and tests, with their signatures
 * (positional and keyword arguments bound as Python binds them) and their
 * quirks: string filters first take str() of any value (so `none|upper` is
 * "NONE"), `safe` turns a value into its str(), `default` replaces only an
 * undefined value unless its second argument is true, `tojson` is
 * transformers' (ensure_ascii, indent, separators, sort_keys in that order).
 */
#include "jinja.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void tkv__jbind(tkv__jctx *c, const char *what, const tkv__jargs *a, const char *const *names, tkv__jv *out) {
    size_t n = 0;
    while (names[n]) n++;
    if (a->n > n) tkv__jraise(c, TKV_ERR_INVALID, "%s takes at most %zu arguments (%zu given)", what, n, a->n);
    for (size_t i = 0; i < n; i++) out[i] = i < a->n ? a->v[i] : tkv__jv_undef(NULL);
    for (size_t k = 0; k < a->n_kw; k++) {
        size_t i = 0;
        for (; i < n; i++)
            if (a->kw_names[k].u.str.n == strlen(names[i]) &&
                !memcmp(a->kw_names[k].u.str.p, names[i], a->kw_names[k].u.str.n))
                break;
        if (i == n)
            tkv__jraise(c, TKV_ERR_INVALID, "%s got an unexpected keyword argument '%.*s'", what,
                        (int)a->kw_names[k].u.str.n, a->kw_names[k].u.str.p);
        if (i < a->n) tkv__jraise(c, TKV_ERR_INVALID, "%s got multiple values for argument '%s'", what, names[i]);
        out[i] = a->kw[k];
    }
}

#define DEF(v) ((v).type != TKV__JV_UNDEF)

static bool name_is(const char *name, size_t n, const char *s) { return n == strlen(s) && !memcmp(name, s, n); }

static int64_t need_int(tkv__jctx *c, tkv__jv v, const char *what) {
    if (v.type == TKV__JV_INT) return v.u.i;
    if (v.type == TKV__JV_BOOL) return v.u.b;
    tkv__jraise(c, TKV_ERR_INVALID, "%s must be an integer, not %s", what, tkv__jv_type_name(v));
}

/* ---- helpers on sequences ---- */

/* Jinja2's make_attrgetter: "a.b.0" reads item by item (dict keys first). */
static tkv__jv get_path(tkv__jctx *c, tkv__jv v, tkv__jv path) {
    if (path.type == TKV__JV_INT) return tkv__jinja_getitem(c, v, path);
    tkv__jv s = tkv__jv_to_str(c, path);
    size_t i = 0;
    while (i <= s.u.str.n) {
        size_t j = i;
        while (j < s.u.str.n && s.u.str.p[j] != '.') j++;
        tkv__jv part = tkv__jv_str(s.u.str.p + i, j - i);
        bool digits = j > i;
        for (size_t k = i; k < j; k++)
            if (s.u.str.p[k] < '0' || s.u.str.p[k] > '9') digits = false;
        if (digits) part = tkv__jv_int(strtoll(s.u.str.p + i, NULL, 10));
        v = tkv__jinja_getitem(c, v, part);
        i = j + 1;
    }
    return v;
}

static tkv__jv list_of(tkv__jctx *c, tkv__jlist l) {
    tkv__jv out = tkv__jv_list(c, l.n);
    if (l.n) memcpy(out.u.list->items, l.items, l.n * sizeof(tkv__jv));
    return out;
}

static tkv__jv key_of(tkv__jctx *c, tkv__jv v, bool case_sensitive) {
    if (!case_sensitive && v.type == TKV__JV_STR) return tkv__jstr_case(c, v, TKV__JSTR_LOWER);
    return v;
}

/*
 * Stable merge sort of items by keys (Python's sorted is stable). by_attr: Jinja2 wraps attribute keys in lists,
 * which compare equal values as equal before ordering them (so missing attributes, all undefined, do not raise).
 */
static void sort_by(tkv__jctx *c, tkv__jv *items, tkv__jv *keys, size_t n, bool reverse, bool by_attr) {
    if (n < 2) return;
    tkv__jv *ti = tkv__jarena_alloc(c, n * sizeof *ti), *tk = tkv__jarena_alloc(c, n * sizeof *tk);
    for (size_t width = 1; width < n; width *= 2) {
        for (size_t lo = 0; lo < n; lo += 2 * width) {
            size_t mid = lo + width < n ? lo + width : n, hi = lo + 2 * width < n ? lo + 2 * width : n;
            size_t i = lo, j = mid, k = lo;
            while (i < mid && j < hi) {
                tkv__jstep(c, 1);
                int r = by_attr && tkv__jv_equal(keys[j], keys[i]) ? 0 : tkv__jv_compare(c, keys[j], keys[i]);
                bool take_right = reverse ? r > 0 : r < 0;
                if (take_right) {
                    ti[k] = items[j];
                    tk[k++] = keys[j++];
                } else {
                    ti[k] = items[i];
                    tk[k++] = keys[i++];
                }
            }
            while (i < mid) {
                ti[k] = items[i];
                tk[k++] = keys[i++];
            }
            while (j < hi) {
                ti[k] = items[j];
                tk[k++] = keys[j++];
            }
        }
        memcpy(items, ti, n * sizeof *ti);
        memcpy(keys, tk, n * sizeof *tk);
    }
}

static tkv__jv split_lines_indent(tkv__jctx *c, tkv__jv s, tkv__jv width, bool first, bool blank) {
    tkv__jv ind;
    if (width.type == TKV__JV_STR) {
        ind = width;
    } else {
        int64_t w = DEF(width) ? need_int(c, width, "indent width") : 4;
        if (w < 0) w = 0;
        if (w > 4096) tkv__jraise(c, TKV_ERR_INVALID, "indent width too large");
        char *sp = tkv__jarena_alloc(c, (size_t)w + 1);
        memset(sp, ' ', (size_t)w);
        ind = tkv__jv_str(sp, (size_t)w);
    }
    /* s + "\n", split as str.splitlines, joined again */
    tkv__jbuf in = {0}, b = {0};
    tkv__jbuf_add(c, &in, s.u.str.p, s.u.str.n);
    tkv__jbuf_addc(c, &in, '\n');
    size_t i = 0, line = 0;
    while (i < in.n) {
        size_t j = i, brk = 0;
        while (j < in.n) {
            size_t used;
            uint32_t cp = tkv__utf8_decode(in.p + j, in.n - j, &used);
            if (cp == '\n' || cp == '\r' || cp == '\v' || cp == '\f' || (cp >= 0x1c && cp <= 0x1e) || cp == 0x85 ||
                cp == 0x2028 || cp == 0x2029) {
                brk = (cp == '\r' && j + 1 < in.n && in.p[j + 1] == '\n') ? 2 : used;
                break;
            }
            j += used;
        }
        tkv__jstep(c, 1);
        bool empty = j == i;
        if (line > 0) {
            tkv__jbuf_addc(c, &b, '\n');
            if (blank || !empty) tkv__jbuf_add(c, &b, ind.u.str.p, ind.u.str.n);
        }
        tkv__jbuf_add(c, &b, in.p + i, j - i);
        line++;
        i = j + brk;
    }
    if (!first) return tkv__jbuf_value(&b);
    tkv__jbuf out = {0};
    tkv__jbuf_add(c, &out, ind.u.str.p, ind.u.str.n);
    tkv__jbuf_add(c, &out, b.p ? b.p : "", b.n);
    return tkv__jbuf_value(&out);
}


/* ---- select / reject / map ---- */

static tkv__jv select_items(tkv__jctx *c, tkv__jv seq, const tkv__jargs *a, bool by_attr, bool keep) {
    /* Jinja2 iterates only a true value: none|selectattr(...) is empty */
    tkv__jlist l = tkv__jv_truthy(seq) ? tkv__jinja_iter(c, seq) : (tkv__jlist){0};
    size_t skip = by_attr ? 1 : 0;
    if (by_attr && a->n < 1) tkv__jraise(c, TKV_ERR_INVALID, "missing parameter for attribute name");
    tkv__jv out = tkv__jv_list(c, l.n);
    out.u.list->n = 0;
    out.flags = TKV__JV_GEN;
    tkv__jargs targs = {.v = a->v + (a->n > skip + 1 ? skip + 1 : a->n), .n = a->n > skip + 1 ? a->n - skip - 1 : 0,
                        .kw_names = a->kw_names, .kw = a->kw, .n_kw = a->n_kw};
    for (size_t i = 0; i < l.n; i++) {
        tkv__jstep(c, 1);
        tkv__jv v = by_attr ? get_path(c, l.items[i], a->v[0]) : l.items[i];
        bool r;
        if (a->n > skip) {
            tkv__jv test = tkv__jv_to_str(c, a->v[skip]);
            if (!tkv__jinja_test(c, test.u.str.p, test.u.str.n, v, &targs, &r))
                tkv__jraise(c, TKV_ERR_INVALID, "no test named '%.*s'", (int)test.u.str.n, test.u.str.p);
        } else {
            r = tkv__jv_truthy(v);
        }
        if (r == keep) out.u.list->items[out.u.list->n++] = l.items[i];
    }
    return out;
}

static tkv__jv map_items(tkv__jctx *c, tkv__jv seq, const tkv__jargs *a) {
    tkv__jlist l = tkv__jv_truthy(seq) ? tkv__jinja_iter(c, seq) : (tkv__jlist){0};
    tkv__jv out = tkv__jv_list(c, l.n);
    out.flags = TKV__JV_GEN;
    tkv__jv attr = tkv__jv_undef(NULL), dflt = tkv__jv_undef(NULL);
    for (size_t k = 0; k < a->n_kw; k++) {
        if (name_is(a->kw_names[k].u.str.p, a->kw_names[k].u.str.n, "attribute")) attr = a->kw[k];
        else if (name_is(a->kw_names[k].u.str.p, a->kw_names[k].u.str.n, "default")) dflt = a->kw[k];
    }
    if (DEF(attr)) {
        for (size_t i = 0; i < l.n; i++) {
            tkv__jv v = get_path(c, l.items[i], attr);
            out.u.list->items[i] = v.type == TKV__JV_UNDEF && DEF(dflt) ? dflt : v;
        }
        return out;
    }
    if (a->n < 1) tkv__jraise(c, TKV_ERR_INVALID, "map requires a filter argument");
    tkv__jv name = tkv__jv_to_str(c, a->v[0]);
    tkv__jargs fargs = {.v = a->v + 1, .n = a->n - 1, .kw_names = a->kw_names, .kw = a->kw, .n_kw = a->n_kw};
    for (size_t i = 0; i < l.n; i++) {
        tkv__jstep(c, 1);
        if (!tkv__jinja_filter(c, name.u.str.p, name.u.str.n, l.items[i], &fargs, &out.u.list->items[i]))
            tkv__jraise(c, TKV_ERR_INVALID, "no filter named '%.*s'", (int)name.u.str.n, name.u.str.p);
    }
    return out;
}

/* Python's int(s, base): whitespace around, a sign, a 0x/0o/0b prefix for its base, single underscores. */
static bool parse_int(tkv__jv s, int64_t base, int64_t *out) {
    const char *p = s.u.str.p, *e = p + s.u.str.n;
    while (p < e && (*p == ' ' || (*p >= 9 && *p <= 13))) p++;
    while (e > p && (e[-1] == ' ' || (e[-1] >= 9 && e[-1] <= 13))) e--;
    bool neg = false;
    if (p < e && (*p == '+' || *p == '-')) neg = *p++ == '-';
    if (e - p >= 2 && p[0] == '0') {
        char x = (char)(p[1] | 32);
        int64_t pb = x == 'x' ? 16 : x == 'o' ? 8 : x == 'b' ? 2 : 0;
        if (pb && (base == pb || base == 0)) {
            base = pb;
            p += 2;
            if (p < e && *p == '_') p++;
        }
    }
    if (base == 0) base = 10;
    if (base < 2 || base > 36 || p == e) return false;
    __int128 v = 0;
    for (const char *q = p; q < e; q++) {
        if (*q == '_' && q > p && q + 1 < e && q[1] != '_') continue;
        int d = *q >= '0' && *q <= '9' ? *q - '0' : (*q | 32) >= 'a' && (*q | 32) <= 'z' ? (*q | 32) - 'a' + 10 : 99;
        if (d >= base) return false;
        v = v * base + d;
        if (v > INT64_MAX) return false;
    }
    *out = neg ? -(int64_t)v : (int64_t)v;
    return true;
}

static bool parse_float(tkv__jctx *c, tkv__jv s, double *out) {
    tkv__jv t = tkv__jstr_strip(c, s, tkv__jv_undef(NULL), true, true);
    if (!t.u.str.n) return false;
    char *z = tkv__jarena_alloc(c, t.u.str.n + 1), *end;
    memcpy(z, t.u.str.p, t.u.str.n);
    z[t.u.str.n] = 0;
    /* strtod also reads hex floats and "nan(...)", which Python's float() does not */
    for (size_t i = 0; i < t.u.str.n; i++)
        if ((z[i] | 32) == 'x' || (z[i] | 32) == 'p' || z[i] == '(') return false;
    *out = strtod(z, &end);
    return *end == 0;
}

static double round_half_even(double x) {
    double r = nearbyint(x); /* the default rounding mode: to nearest, ties to even */
    return r;
}

static tkv__jv minmax(tkv__jctx *c, tkv__jv seq, const tkv__jargs *a, bool want_max) {
    static const char *const names[] = {"case_sensitive", "attribute", NULL};
    tkv__jv p[2];
    tkv__jbind(c, want_max ? "max" : "min", a, names, p);
    tkv__jlist l = tkv__jinja_iter(c, seq);
    if (!l.n) return tkv__jv_undef("no items");
    bool cs = tkv__jv_truthy(p[0]);
    size_t best = 0;
    tkv__jv bk = key_of(c, DEF(p[1]) ? get_path(c, l.items[0], p[1]) : l.items[0], cs);
    for (size_t i = 1; i < l.n; i++) {
        tkv__jv k = key_of(c, DEF(p[1]) ? get_path(c, l.items[i], p[1]) : l.items[i], cs);
        int r = tkv__jv_compare(c, k, bk);
        if (want_max ? r > 0 : r < 0) {
            best = i;
            bk = k;
        }
    }
    return l.items[best];
}

/* ---- filters: a function each, found by name in FILTERS ---- */

#define IS(s) name_is(name, n, s)
#define BIND(...)                                                                                                    \
    do {                                                                                                             \
        static const char *const names_[] = {__VA_ARGS__, NULL};                                                     \
        tkv__jbind(c, "filter", a, names_, p);                                                                      \
    } while (0)
#define BIND0()                                                                                                      \
    do {                                                                                                             \
        static const char *const names_[] = {NULL};                                                                  \
        tkv__jbind(c, "filter", a, names_, p);                                                                      \
    } while (0)

static void f_tojson(tkv__jctx *c, const char *name, size_t n, tkv__jv v, const tkv__jargs *a, tkv__jv *out) {
    tkv__jv p[5];
    (void)name, (void)n;
    BIND("ensure_ascii", "indent", "separators", "sort_keys");
    tkv__jbuf b = {0};
    tkv__json_style st = {.ensure_ascii = tkv__jv_truthy(p[0]), .has_indent = DEF(p[1]) && p[1].type != TKV__JV_NONE,
                          .sort_keys = tkv__jv_truthy(p[3])};
    const char *indent = NULL;
    if (st.has_indent) {
        if (p[1].type == TKV__JV_STR) {
            indent = tkv__jv_strdup(c, p[1].u.str.p, p[1].u.str.n).u.str.p;
        } else {
            int64_t w = need_int(c, p[1], "indent");
            if (w > 256) tkv__jraise(c, TKV_ERR_INVALID, "indent too large");
            char *sp = tkv__jarena_alloc(c, (size_t)(w > 0 ? w : 0) + 1);
            memset(sp, ' ', (size_t)(w > 0 ? w : 0));
            sp[w > 0 ? w : 0] = 0;
            indent = sp;
        }
    }
    st.indent = indent;
    if (DEF(p[2]) && p[2].type != TKV__JV_NONE) {
        if (p[2].type != TKV__JV_LIST || p[2].u.list->n != 2 || p[2].u.list->items[0].type != TKV__JV_STR ||
            p[2].u.list->items[1].type != TKV__JV_STR)
            tkv__jraise(c, TKV_ERR_INVALID, "tojson separators must be a pair of strings");
        st.item_sep = tkv__jv_strdup(c, p[2].u.list->items[0].u.str.p, p[2].u.list->items[0].u.str.n).u.str.p;
        st.key_sep = tkv__jv_strdup(c, p[2].u.list->items[1].u.str.p, p[2].u.list->items[1].u.str.n).u.str.p;
    }
    tkv__jv_write_json(c, &b, v, &st);
    *out = tkv__jbuf_value(&b);
}

static void f_length(tkv__jctx *c, const char *name, size_t n, tkv__jv v, const tkv__jargs *a, tkv__jv *out) {
    tkv__jv p[5];
    (void)name, (void)n;
    BIND0();
    size_t len;
    switch (v.type) {
    case TKV__JV_UNDEF: len = 0; break;
    case TKV__JV_STR:
        tkv__jstep(c, (long)(v.u.str.n / 32)); /* counting code points reads the string */
        len = tkv__utf8_len(v.u.str.p, v.u.str.n);
        break;
    case TKV__JV_LIST:
        if (v.flags & TKV__JV_GEN) tkv__jraise(c, TKV_ERR_INVALID, "object of type 'generator' has no len()");
        len = v.u.list->n;
        break;
    case TKV__JV_DICT:
        if (!(v.flags & TKV__JV_NAMESPACE)) {
            len = v.u.dict->n;
            break;
        }
        /* fall through */
    default:
        tkv__jraise(c, TKV_ERR_INVALID, "object of type '%s' has no len()", tkv__jv_type_name(v));
    }
    *out = tkv__jv_int((int64_t)len);
}

static void f_trim(tkv__jctx *c, const char *name, size_t n, tkv__jv v, const tkv__jargs *a, tkv__jv *out) {
    tkv__jv p[5];
    (void)name, (void)n;
    BIND("chars");
    *out = tkv__jstr_strip(c, tkv__jv_to_str(c, v), p[0], true, true);
}

static void f_string(tkv__jctx *c, const char *name, size_t n, tkv__jv v, const tkv__jargs *a, tkv__jv *out) {
    tkv__jv p[5];
    (void)name, (void)n;
    BIND0();
    *out = tkv__jv_to_str(c, v);
}

static void f_safe(tkv__jctx *c, const char *name, size_t n, tkv__jv v, const tkv__jargs *a, tkv__jv *out) {
    tkv__jv p[5];
    (void)name, (void)n;
    BIND0();
    *out = tkv__jv_to_str(c, v);
    out->flags = TKV__JV_MARKUP;
}

static void f_default(tkv__jctx *c, const char *name, size_t n, tkv__jv v, const tkv__jargs *a, tkv__jv *out) {
    tkv__jv p[5];
    (void)name, (void)n;
    BIND("default_value", "boolean");
    bool use = tkv__jv_truthy(p[1]) ? !tkv__jv_truthy(v) : v.type == TKV__JV_UNDEF;
    *out = use ? (DEF(p[0]) ? p[0] : tkv__jv_str("", 0)) : v;
}

static void f_join(tkv__jctx *c, const char *name, size_t n, tkv__jv v, const tkv__jargs *a, tkv__jv *out) {
    tkv__jv p[5];
    (void)name, (void)n;
    BIND("d", "attribute");
    tkv__jlist l = tkv__jinja_iter(c, v);
    tkv__jv sep = DEF(p[0]) ? tkv__jv_to_str(c, p[0]) : tkv__jv_str("", 0);
    tkv__jbuf b = {0};
    for (size_t i = 0; i < l.n; i++) {
        tkv__jstep(c, 1);
        if (i) tkv__jbuf_add(c, &b, sep.u.str.p, sep.u.str.n);
        tkv__jv_write_str(c, &b, DEF(p[1]) ? get_path(c, l.items[i], p[1]) : l.items[i]);
    }
    *out = tkv__jbuf_value(&b);
}

static void f_upper(tkv__jctx *c, const char *name, size_t n, tkv__jv v, const tkv__jargs *a, tkv__jv *out) {
    tkv__jv p[5];
    BIND0();
    *out = tkv__jstr_case(c, tkv__jv_to_str(c, v),
                                IS("lower") ? TKV__JSTR_LOWER : IS("upper") ? TKV__JSTR_UPPER : TKV__JSTR_CAPITALIZE);
}

static void f_title(tkv__jctx *c, const char *name, size_t n, tkv__jv v, const tkv__jargs *a, tkv__jv *out) {
    tkv__jv p[5];
    (void)name, (void)n;
    BIND0();
    *out = tkv__jinja_title(c, tkv__jv_to_str(c, v));
}

static void f_items(tkv__jctx *c, const char *name, size_t n, tkv__jv v, const tkv__jargs *a, tkv__jv *out) {
    tkv__jv p[5];
    (void)name, (void)n;
    BIND0();
    if (v.type == TKV__JV_UNDEF) {
        *out = tkv__jv_list(c, 0);
    } else {
        if (v.type != TKV__JV_DICT || (v.flags & TKV__JV_NAMESPACE))
            tkv__jraise(c, TKV_ERR_INVALID, "can only get item pairs from a mapping");
        tkv__jv m;
        tkv__jinja_method(c, v, "items", 5, &m);
        tkv__jargs none = {0};
        *out = tkv__jinja_call_method(c, m.u.fn, &none);
    }
}

static void f_dictsort(tkv__jctx *c, const char *name, size_t n, tkv__jv v, const tkv__jargs *a, tkv__jv *out) {
    tkv__jv p[5];
    (void)name, (void)n;
    BIND("case_sensitive", "by", "reverse");
    if (v.type != TKV__JV_DICT || (v.flags & TKV__JV_NAMESPACE))
        tkv__jraise(c, TKV_ERR_INVALID, "dictsort needs a dict");
    bool by_value = DEF(p[1]) && p[1].type == TKV__JV_STR && name_is(p[1].u.str.p, p[1].u.str.n, "value");
    size_t cnt = v.u.dict->n;
    tkv__jv l = tkv__jv_list(c, cnt);
    tkv__jv *keys = tkv__jarena_alloc(c, (cnt ? cnt : 1) * sizeof *keys);
    for (size_t i = 0; i < cnt; i++) {
        tkv__jv pair = tkv__jv_list(c, 2);
        pair.flags = TKV__JV_TUPLE;
        pair.u.list->items[0] = v.u.dict->keys[i];
        pair.u.list->items[1] = v.u.dict->vals[i];
        l.u.list->items[i] = pair;
        keys[i] = key_of(c, by_value ? v.u.dict->vals[i] : v.u.dict->keys[i], tkv__jv_truthy(p[0]));
    }
    sort_by(c, l.u.list->items, keys, cnt, tkv__jv_truthy(p[2]), false);
    *out = l;
}

static void f_list(tkv__jctx *c, const char *name, size_t n, tkv__jv v, const tkv__jargs *a, tkv__jv *out) {
    tkv__jv p[5];
    (void)name, (void)n;
    BIND0();
    *out = list_of(c, tkv__jinja_iter(c, v));
}

static void f_first(tkv__jctx *c, const char *name, size_t n, tkv__jv v, const tkv__jargs *a, tkv__jv *out) {
    tkv__jv p[5];
    BIND0();
    if (IS("last") && v.type == TKV__JV_LIST && (v.flags & TKV__JV_GEN))
        tkv__jraise(c, TKV_ERR_INVALID, "'generator' object is not reversible");
    tkv__jlist l = tkv__jinja_iter(c, v);
    *out = l.n ? l.items[IS("first") ? 0 : l.n - 1] : tkv__jv_undef("no items");
}

static void f_replace(tkv__jctx *c, const char *name, size_t n, tkv__jv v, const tkv__jargs *a, tkv__jv *out) {
    tkv__jv p[5];
    (void)name, (void)n;
    BIND("old", "new", "count");
    tkv__jv s = tkv__jv_to_str(c, v);
    *out = tkv__jstr_replace(c, s, tkv__jv_to_str(c, p[0]), tkv__jv_to_str(c, p[1]),
                             DEF(p[2]) && p[2].type != TKV__JV_NONE ? need_int(c, p[2], "count") : -1);
}

static void f_selectattr(tkv__jctx *c, const char *name, size_t n, tkv__jv v, const tkv__jargs *a, tkv__jv *out) {
    *out = select_items(c, v, a, true, IS("selectattr"));
}

static void f_select(tkv__jctx *c, const char *name, size_t n, tkv__jv v, const tkv__jargs *a, tkv__jv *out) {
    *out = select_items(c, v, a, false, IS("select"));
}

static void f_map(tkv__jctx *c, const char *name, size_t n, tkv__jv v, const tkv__jargs *a, tkv__jv *out) {
    (void)name, (void)n;
    *out = map_items(c, v, a);
}

static void f_indent(tkv__jctx *c, const char *name, size_t n, tkv__jv v, const tkv__jargs *a, tkv__jv *out) {
    tkv__jv p[5];
    (void)name, (void)n;
    BIND("width", "first", "blank");
    *out = split_lines_indent(c, tkv__jv_to_str(c, v), p[0], tkv__jv_truthy(p[1]), tkv__jv_truthy(p[2]));
}

static void f_int(tkv__jctx *c, const char *name, size_t n, tkv__jv v, const tkv__jargs *a, tkv__jv *out) {
    tkv__jv p[5];
    (void)name, (void)n;
    BIND("default", "base");
    int64_t i;
    double d;
    tkv__jv dflt = DEF(p[0]) ? p[0] : tkv__jv_int(0);
    int64_t base = DEF(p[1]) ? need_int(c, p[1], "base") : 10;
    if (v.type == TKV__JV_UNDEF) tkv__jundef_fail(c, v);
    if (v.type == TKV__JV_INT || v.type == TKV__JV_BOOL) *out = tkv__jv_int(v.type == TKV__JV_INT ? v.u.i : v.u.b);
    else if (v.type == TKV__JV_FLOAT && isfinite(v.u.f) && fabs(v.u.f) < 9.2e18) *out = tkv__jv_int((int64_t)v.u.f);
    else if (v.type == TKV__JV_STR && parse_int(v, base, &i)) *out = tkv__jv_int(i);
    else if (v.type == TKV__JV_STR && parse_float(c, v, &d) && isfinite(d) && fabs(d) < 9.2e18)
        *out = tkv__jv_int((int64_t)d);
    else *out = dflt;
}

static void f_float(tkv__jctx *c, const char *name, size_t n, tkv__jv v, const tkv__jargs *a, tkv__jv *out) {
    tkv__jv p[5];
    (void)name, (void)n;
    BIND("default");
    double d;
    if (v.type == TKV__JV_UNDEF) tkv__jundef_fail(c, v);
    if (tkv__jv_is_num(v)) *out = tkv__jv_float(tkv__jv_num(v));
    else if (v.type == TKV__JV_STR && parse_float(c, v, &d)) *out = tkv__jv_float(d);
    else *out = DEF(p[0]) ? p[0] : tkv__jv_float(0);
}

static void f_abs(tkv__jctx *c, const char *name, size_t n, tkv__jv v, const tkv__jargs *a, tkv__jv *out) {
    tkv__jv p[5];
    (void)name, (void)n;
    BIND0();
    if (v.type == TKV__JV_FLOAT) *out = tkv__jv_float(fabs(v.u.f));
    else if (v.type == TKV__JV_INT || v.type == TKV__JV_BOOL) {
        int64_t i = v.type == TKV__JV_INT ? v.u.i : v.u.b;
        if (i == INT64_MIN) tkv__jraise(c, TKV_ERR_INVALID, "integer overflow");
        *out = tkv__jv_int(i < 0 ? -i : i);
    } else {
        tkv__jraise(c, TKV_ERR_INVALID, "bad operand type for abs(): '%s'", tkv__jv_type_name(v));
    }
}

static void f_round(tkv__jctx *c, const char *name, size_t n, tkv__jv v, const tkv__jargs *a, tkv__jv *out) {
    tkv__jv p[5];
    (void)name, (void)n;
    BIND("precision", "method");
    int64_t prec = DEF(p[0]) ? need_int(c, p[0], "precision") : 0;
    if (!tkv__jv_is_num(v)) tkv__jraise(c, TKV_ERR_INVALID, "round needs a number");
    double x = tkv__jv_num(v), m = pow(10.0, (double)prec);
    tkv__jv meth = DEF(p[1]) ? tkv__jv_to_str(c, p[1]) : tkv__jv_cstr("common");
    double r;
    if (name_is(meth.u.str.p, meth.u.str.n, "common")) {
        if (v.type != TKV__JV_FLOAT) {
            *out = v.type == TKV__JV_BOOL ? tkv__jv_int(v.u.b) : v;
            return;
        }
        if (prec >= 0 && prec < 300) {
            /* Python rounds the exact binary value, as printf does: round(2.675, 2) is 2.67 */
            char buf[400];
            snprintf(buf, sizeof buf, "%.*f", (int)prec, x);
            r = strtod(buf, NULL);
        } else {
            double q = pow(10.0, (double)-prec);
            r = round_half_even(x / q) * q;
        }
    } else if (name_is(meth.u.str.p, meth.u.str.n, "ceil")) {
        r = ceil(x * m) / m;
    } else if (name_is(meth.u.str.p, meth.u.str.n, "floor")) {
        r = floor(x * m) / m;
    } else {
        tkv__jraise(c, TKV_ERR_INVALID, "method must be common, ceil or floor");
    }
    *out = tkv__jv_float(r);
}

static void f_reverse(tkv__jctx *c, const char *name, size_t n, tkv__jv v, const tkv__jargs *a, tkv__jv *out) {
    tkv__jv p[5];
    (void)name, (void)n;
    BIND0();
    if (v.type == TKV__JV_STR) {
        tkv__jlist l = tkv__jinja_iter(c, v);
        tkv__jbuf b = {0};
        for (size_t i = l.n; i > 0; i--) tkv__jbuf_add(c, &b, l.items[i - 1].u.str.p, l.items[i - 1].u.str.n);
        *out = tkv__jbuf_value(&b);
    } else {
        tkv__jlist l = tkv__jinja_iter(c, v);
        tkv__jv r = tkv__jv_list(c, l.n);
        for (size_t i = 0; i < l.n; i++) r.u.list->items[i] = l.items[l.n - 1 - i];
        *out = r;
    }
}

static void f_unique(tkv__jctx *c, const char *name, size_t n, tkv__jv v, const tkv__jargs *a, tkv__jv *out) {
    tkv__jv p[5];
    (void)name, (void)n;
    BIND("case_sensitive", "attribute");
    tkv__jlist l = tkv__jinja_iter(c, v);
    tkv__jv r = tkv__jv_list(c, l.n);
    tkv__jv *seen = tkv__jarena_alloc(c, (l.n ? l.n : 1) * sizeof *seen);
    size_t k = 0;
    for (size_t i = 0; i < l.n; i++) {
        tkv__jv key = key_of(c, DEF(p[1]) ? get_path(c, l.items[i], p[1]) : l.items[i], tkv__jv_truthy(p[0]));
        bool dup = false;
        tkv__jstep(c, (long)k);
        for (size_t j = 0; j < k && !dup; j++) dup = tkv__jv_equal(seen[j], key);
        if (dup) continue;
        seen[k] = key;
        r.u.list->items[k++] = l.items[i];
    }
    r.u.list->n = k;
    *out = r;
}

static void f_sort(tkv__jctx *c, const char *name, size_t n, tkv__jv v, const tkv__jargs *a, tkv__jv *out) {
    tkv__jv p[5];
    (void)name, (void)n;
    BIND("reverse", "case_sensitive", "attribute");
    tkv__jv r = list_of(c, tkv__jinja_iter(c, v));
    size_t cnt = r.u.list->n;
    tkv__jv *keys = tkv__jarena_alloc(c, (cnt ? cnt : 1) * sizeof *keys);
    for (size_t i = 0; i < cnt; i++)
        keys[i] = key_of(c, DEF(p[2]) ? get_path(c, r.u.list->items[i], p[2]) : r.u.list->items[i],
                         tkv__jv_truthy(p[1]));
    sort_by(c, r.u.list->items, keys, cnt, tkv__jv_truthy(p[0]), DEF(p[2]));
    *out = r;
}

static void f_groupby(tkv__jctx *c, const char *name, size_t n, tkv__jv v, const tkv__jargs *a, tkv__jv *out) {
    tkv__jv p[5];
    (void)name, (void)n;
    BIND("attribute", "default", "case_sensitive");
    if (!DEF(p[0])) tkv__jraise(c, TKV_ERR_INVALID, "groupby needs an attribute");
    tkv__jv r = list_of(c, tkv__jinja_iter(c, v));
    size_t cnt = r.u.list->n;
    tkv__jv *keys = tkv__jarena_alloc(c, (cnt ? cnt : 1) * sizeof *keys);
    for (size_t i = 0; i < cnt; i++) {
        tkv__jv k = get_path(c, r.u.list->items[i], p[0]);
        if (k.type == TKV__JV_UNDEF && DEF(p[1])) k = p[1];
        keys[i] = key_of(c, k, tkv__jv_truthy(p[2]));
    }
    sort_by(c, r.u.list->items, keys, cnt, false, true);
    /* (grouper, items) pairs; the grouper is the first item's own value, not its lowered key */
    tkv__jv groups = tkv__jv_list(c, cnt);
    size_t ng = 0;
    for (size_t i = 0; i < cnt;) {
        size_t j = i + 1;
        while (j < cnt && tkv__jv_equal(keys[j], keys[i])) j++;
        tkv__jv items = tkv__jv_list(c, j - i), pair = tkv__jv_list(c, 2);
        memcpy(items.u.list->items, r.u.list->items + i, (j - i) * sizeof(tkv__jv));
        tkv__jv g = get_path(c, r.u.list->items[i], p[0]);
        pair.flags = TKV__JV_TUPLE;
        pair.u.list->items[0] = g.type == TKV__JV_UNDEF && DEF(p[1]) ? p[1] : g;
        pair.u.list->items[1] = items;
        groups.u.list->items[ng++] = pair;
        i = j;
    }
    groups.u.list->n = ng;
    *out = groups;
}

static void f_min(tkv__jctx *c, const char *name, size_t n, tkv__jv v, const tkv__jargs *a, tkv__jv *out) {
    *out = minmax(c, v, a, IS("max"));
}

static void f_sum(tkv__jctx *c, const char *name, size_t n, tkv__jv v, const tkv__jargs *a, tkv__jv *out) {
    tkv__jv p[5];
    (void)name, (void)n;
    BIND("attribute", "start");
    tkv__jlist l = tkv__jinja_iter(c, v);
    tkv__jv acc = DEF(p[1]) ? p[1] : tkv__jv_int(0);
    for (size_t i = 0; i < l.n; i++) {
        tkv__jv x = DEF(p[0]) ? get_path(c, l.items[i], p[0]) : l.items[i];
        if (x.type == TKV__JV_STR) tkv__jraise(c, TKV_ERR_INVALID, "sum() can't sum strings");
        acc = tkv__jinja_add(c, acc, x);
    }
    *out = acc;
}

static void f_wordcount(tkv__jctx *c, const char *name, size_t n, tkv__jv v, const tkv__jargs *a, tkv__jv *out) {
    tkv__jv p[5];
    (void)name, (void)n;
    BIND0();
    tkv__jv s = tkv__jv_to_str(c, v);
    int64_t words = 0;
    bool in = false;
    for (size_t i = 0; i < s.u.str.n; i++) {
        unsigned char ch = (unsigned char)s.u.str.p[i];
        bool w = ch >= 0x80 || ch == '_' || (ch >= '0' && ch <= '9') || ((ch | 32) >= 'a' && (ch | 32) <= 'z');
        if (w && !in) words++;
        in = w;
    }
    *out = tkv__jv_int(words);
}

static void f_center(tkv__jctx *c, const char *name, size_t n, tkv__jv v, const tkv__jargs *a, tkv__jv *out) {
    tkv__jv p[5];
    (void)name, (void)n;
    BIND("width");
    tkv__jv s = tkv__jv_to_str(c, v);
    int64_t w = DEF(p[0]) ? need_int(c, p[0], "width") : 80;
    tkv__jstep(c, (long)(s.u.str.n / 32));
    int64_t len = (int64_t)tkv__utf8_len(s.u.str.p, s.u.str.n);
    if (w > 4096) tkv__jraise(c, TKV_ERR_INVALID, "width too large");
    if (w <= len) {
        *out = s;
    } else {
        /* Python's str.center puts the odd space on the left when the string's length is odd */
        int64_t pad = w - len, left = pad / 2 + (pad & w & 1);
        tkv__jbuf b = {0};
        for (int64_t i = 0; i < left; i++) tkv__jbuf_addc(c, &b, ' ');
        tkv__jbuf_add(c, &b, s.u.str.p, s.u.str.n);
        for (int64_t i = 0; i < pad - left; i++) tkv__jbuf_addc(c, &b, ' ');
        *out = tkv__jbuf_value(&b);
    }
}

static void f_escape(tkv__jctx *c, const char *name, size_t n, tkv__jv v, const tkv__jargs *a, tkv__jv *out) {
    tkv__jv p[5];
    BIND0();
    *out = v.type == TKV__JV_STR && (v.flags & TKV__JV_MARKUP) && !IS("forceescape") ? v
                                                                                    : tkv__jescape(c, v);
}

static void f_format(tkv__jctx *c, const char *name, size_t n, tkv__jv v, const tkv__jargs *a, tkv__jv *out) {
    (void)name, (void)n;
    tkv__jv args = tkv__jv_list(c, a->n);
    args.flags = TKV__JV_TUPLE;
    for (size_t i = 0; i < a->n; i++) args.u.list->items[i] = a->v[i];
    if (a->n_kw) {
        args = tkv__jv_dict(c, a->n_kw);
        for (size_t i = 0; i < a->n_kw; i++) tkv__jv_dict_set(c, args, a->kw_names[i], a->kw[i]);
    }
    *out = tkv__jstr_percent(c, tkv__jv_to_str(c, v), args);
}

static void f_truncate(tkv__jctx *c, const char *name, size_t n, tkv__jv v, const tkv__jargs *a, tkv__jv *out) {
    tkv__jv p[5];
    (void)name, (void)n;
    BIND("length", "killwords", "end", "leeway");
    tkv__jv s = tkv__jv_to_str(c, v);
    tkv__jv end = DEF(p[2]) ? tkv__jv_to_str(c, p[2]) : tkv__jv_cstr("...");
    int64_t length = DEF(p[0]) ? need_int(c, p[0], "length") : 255;
    int64_t leeway = DEF(p[3]) && p[3].type != TKV__JV_NONE ? need_int(c, p[3], "leeway") : 5;
    tkv__jstep(c, (long)(s.u.str.n / 32));
    int64_t len = (int64_t)tkv__utf8_len(s.u.str.p, s.u.str.n);
    int64_t elen = (int64_t)tkv__utf8_len(end.u.str.p, end.u.str.n);
    if (length < elen || leeway < 0) tkv__jraise(c, TKV_ERR_INVALID, "truncate: bad length or leeway");
    if (len <= length + leeway) {
        *out = s;
    } else {
        size_t cut = tkv__utf8_offset(s.u.str.p, s.u.str.n, (size_t)(length - elen));
        if (!tkv__jv_truthy(p[1])) {
            size_t sp = cut;
            while (sp > 0 && s.u.str.p[sp - 1] != ' ') sp--;
            if (sp > 0) cut = sp - 1;
        }
        tkv__jbuf b = {0};
        tkv__jbuf_add(c, &b, s.u.str.p, cut);
        tkv__jbuf_add(c, &b, end.u.str.p, end.u.str.n);
        *out = tkv__jbuf_value(&b);
    }
}

static void f_attr(tkv__jctx *c, const char *name, size_t n, tkv__jv v, const tkv__jargs *a, tkv__jv *out) {
    tkv__jv p[5];
    (void)name, (void)n;
    BIND("name");
    tkv__jv nm = tkv__jv_to_str(c, p[0]);
    *out = tkv__jinja_getattr(c, v, nm.u.str.p, nm.u.str.n);
}

static void f_batch(tkv__jctx *c, const char *name, size_t n, tkv__jv v, const tkv__jargs *a, tkv__jv *out) {
    tkv__jv p[5];
    (void)name, (void)n;
    BIND("linecount", "fill_with");
    int64_t size = need_int(c, p[0], "linecount");
    if (size <= 0) tkv__jraise(c, TKV_ERR_INVALID, "batch size must be positive");
    tkv__jlist l = tkv__jinja_iter(c, v);
    size_t nb = (l.n + (size_t)size - 1) / (size_t)size;
    tkv__jv r = tkv__jv_list(c, nb);
    for (size_t b = 0; b < nb; b++) {
        size_t from = b * (size_t)size, cnt = l.n - from < (size_t)size ? l.n - from : (size_t)size;
        bool fill = cnt < (size_t)size && DEF(p[1]);
        tkv__jv row = tkv__jv_list(c, fill ? (size_t)size : cnt);
        for (size_t i = 0; i < row.u.list->n; i++) row.u.list->items[i] = i < cnt ? l.items[from + i] : p[1];
        r.u.list->items[b] = row;
    }
    *out = r;
}

#undef IS
#undef BIND
#undef BIND0

/* Every filter by name (names Jinja2 has as aliases share a function). */
typedef void filter_fn(tkv__jctx *c, const char *name, size_t n, tkv__jv v, const tkv__jargs *a, tkv__jv *out);
static const struct {
    const char *name;
    filter_fn *fn;
} FILTERS[] = {
    {"tojson", f_tojson},
    {"length", f_length},
    {"count", f_length},
    {"trim", f_trim},
    {"string", f_string},
    {"safe", f_safe},
    {"default", f_default},
    {"d", f_default},
    {"join", f_join},
    {"upper", f_upper},
    {"lower", f_upper},
    {"capitalize", f_upper},
    {"title", f_title},
    {"items", f_items},
    {"dictsort", f_dictsort},
    {"list", f_list},
    {"first", f_first},
    {"last", f_first},
    {"replace", f_replace},
    {"selectattr", f_selectattr},
    {"rejectattr", f_selectattr},
    {"select", f_select},
    {"reject", f_select},
    {"map", f_map},
    {"indent", f_indent},
    {"int", f_int},
    {"float", f_float},
    {"abs", f_abs},
    {"round", f_round},
    {"reverse", f_reverse},
    {"unique", f_unique},
    {"sort", f_sort},
    {"groupby", f_groupby},
    {"min", f_min},
    {"max", f_min},
    {"sum", f_sum},
    {"wordcount", f_wordcount},
    {"center", f_center},
    {"escape", f_escape},
    {"e", f_escape},
    {"forceescape", f_escape},
    {"format", f_format},
    {"truncate", f_truncate},
    {"attr", f_attr},
    {"batch", f_batch},
};

static filter_fn *find_filter(const char *name, size_t n) {
    for (size_t i = 0; i < sizeof FILTERS / sizeof FILTERS[0]; i++)
        if (name_is(name, n, FILTERS[i].name)) return FILTERS[i].fn;
    return NULL;
}

bool tkv__jinja_filter(tkv__jctx *c, const char *name, size_t n, tkv__jv v, const tkv__jargs *a, tkv__jv *out) {
    filter_fn *fn = find_filter(name, n);
    if (!fn) return false;
    fn(c, name, n, v, a, out);
    return true;
}

/* ---- tests ---- */

bool tkv__jinja_test(tkv__jctx *c, const char *name, size_t n, tkv__jv v, const tkv__jargs *a, bool *out) {
    tkv__jv arg = a->n ? a->v[0] : a->n_kw ? a->kw[0] : tkv__jv_undef(NULL);
#define IS(s) name_is(name, n, s)
    if (IS("defined")) *out = v.type != TKV__JV_UNDEF;
    else if (IS("undefined")) *out = v.type == TKV__JV_UNDEF;
    else if (IS("none")) *out = v.type == TKV__JV_NONE;
    else if (IS("string")) *out = v.type == TKV__JV_STR;
    else if (IS("number")) *out = tkv__jv_is_num(v);
    else if (IS("integer")) *out = v.type == TKV__JV_INT;
    else if (IS("float")) *out = v.type == TKV__JV_FLOAT;
    else if (IS("boolean")) *out = v.type == TKV__JV_BOOL;
    else if (IS("true")) *out = v.type == TKV__JV_BOOL && v.u.b;
    else if (IS("false")) *out = v.type == TKV__JV_BOOL && !v.u.b;
    else if (IS("mapping")) *out = v.type == TKV__JV_DICT && !(v.flags & TKV__JV_NAMESPACE);
    else if (IS("iterable"))
        *out = v.type == TKV__JV_UNDEF || v.type == TKV__JV_STR || v.type == TKV__JV_LIST ||
               (v.type == TKV__JV_DICT && !(v.flags & TKV__JV_NAMESPACE));
    else if (IS("sequence"))
        *out = v.type == TKV__JV_UNDEF || v.type == TKV__JV_STR ||
               (v.type == TKV__JV_LIST && !(v.flags & TKV__JV_GEN)) ||
               (v.type == TKV__JV_DICT && !(v.flags & TKV__JV_NAMESPACE));
    else if (IS("callable")) *out = v.type == TKV__JV_FUNC;
    else if (IS("even") || IS("odd")) {
        if (v.type != TKV__JV_INT && v.type != TKV__JV_BOOL)
            tkv__jraise(c, TKV_ERR_INVALID, "'%s' is not an integer", tkv__jv_type_name(v));
        int64_t i = v.type == TKV__JV_INT ? v.u.i : v.u.b;
        *out = (i % 2 == 0) == IS("even");
    } else if (IS("divisibleby")) {
        int64_t d = need_int(c, arg, "divisor");
        if (d == 0) tkv__jraise(c, TKV_ERR_INVALID, "integer division or modulo by zero");
        *out = need_int(c, v, "value") % d == 0;
    } else if (IS("eq") || IS("equalto") || IS("==")) *out = tkv__jv_equal(v, arg);
    else if (IS("ne") || IS("!=")) *out = !tkv__jv_equal(v, arg);
    else if (IS("lt") || IS("lessthan") || IS("<")) *out = tkv__jv_compare(c, v, arg) < 0;
    else if (IS("le") || IS("<=")) *out = tkv__jv_compare(c, v, arg) <= 0;
    else if (IS("gt") || IS("greaterthan") || IS(">")) *out = tkv__jv_compare(c, v, arg) > 0;
    else if (IS("ge") || IS(">=")) *out = tkv__jv_compare(c, v, arg) >= 0;
    else if (IS("sameas")) {
        /* identity: singletons and small ints are shared in Python; containers by their storage */
        if (v.type != arg.type) *out = false;
        else if (v.type == TKV__JV_LIST) *out = v.u.list == arg.u.list;
        else if (v.type == TKV__JV_DICT) *out = v.u.dict == arg.u.dict;
        else if (v.type == TKV__JV_STR) *out = v.u.str.p == arg.u.str.p && v.u.str.n == arg.u.str.n;
        else *out = tkv__jv_equal(v, arg);
    } else if (IS("lower") || IS("upper")) {
        tkv__jv s = tkv__jv_to_str(c, v);
        tkv__jstep(c, (long)(s.u.str.n / 32));
        *out = tkv__jstr_is_case(s, IS("upper"));
    } else if (IS("in")) {
        if (arg.type == TKV__JV_STR && v.type == TKV__JV_STR) {
            *out = tkv__jfind(c, arg, 0, v) != SIZE_MAX;
        } else {
            tkv__jlist l = tkv__jinja_iter(c, arg);
            bool found = false;
            for (size_t i = 0; !found && i < l.n; i++) found = tkv__jv_equal(l.items[i], v);
            *out = found;
        }
    } else if (IS("escaped")) *out = v.type == TKV__JV_STR && (v.flags & TKV__JV_MARKUP);
    else if (IS("filter") || IS("test")) {
        tkv__jv s = tkv__jv_to_str(c, v);
        static const char *const tests[] = {"defined", "undefined", "none", "string", "number", "integer", "float",
                                            "boolean", "true", "false", "mapping", "iterable", "sequence",
                                            "callable", "even", "odd", "divisibleby", "eq", "equalto", "ne", "lt",
                                            "le", "gt", "ge", "sameas", "lower", "upper", "in", "escaped", "filter",
                                            "test", "lessthan", "greaterthan", NULL};
        *out = false;
        if (IS("filter")) *out = find_filter(s.u.str.p, s.u.str.n) != NULL;
        else
            for (size_t i = 0; tests[i]; i++)
                if (name_is(s.u.str.p, s.u.str.n, tests[i])) *out = true;
    } else return false;
#undef IS
    return true;
}
