/*
 * text/jinja/methods.c — Python's methods of str, dict and list as templates call
 * them, and the globals (range, namespace, dict, raise_exception,
 * strftime_now).
 *
 * The sandbox (ImmutableSandboxedEnvironment) refuses the methods that
 * change a list or a dict: reading `xs.append` gives an undefined value that
 * fails when called, as in transformers, so those templates fail here too.
 */
#include "jinja.h"

#include <stdio.h>
#include <string.h>

enum {
    M_STRIP, M_LSTRIP, M_RSTRIP, M_SPLIT, M_RSPLIT, M_STARTSWITH, M_ENDSWITH, M_REPLACE, M_UPPER, M_LOWER, M_TITLE,
    M_CAPITALIZE, M_FIND, M_RFIND, M_COUNT, M_JOIN, M_FORMAT, M_SPLITLINES, M_ISDIGIT, M_ISALPHA, M_ISSPACE,
    M_ISALNUM, M_ISUPPER, M_ISLOWER, M_REMOVEPREFIX, M_REMOVESUFFIX, M_INDEX, M_PARTITION, M_RPARTITION, M_ZFILL,
    M_LJUST, M_RJUST, M_CENTER, M_STR_END,
    M_ITEMS = 100, M_KEYS, M_VALUES, M_GET, M_COPY, M_DICT_END,
    M_LINDEX = 200, M_LCOUNT, M_LCOPY, M_LIST_END,
};

/* The names of each kind's methods, by their ids above (the id of a dict's or list's method is its base plus
   its index here). */
static const char *const STR_METHODS[] = {
    [M_STRIP] = "strip", [M_LSTRIP] = "lstrip", [M_RSTRIP] = "rstrip", [M_SPLIT] = "split", [M_RSPLIT] = "rsplit",
    [M_STARTSWITH] = "startswith", [M_ENDSWITH] = "endswith", [M_REPLACE] = "replace", [M_UPPER] = "upper",
    [M_LOWER] = "lower", [M_TITLE] = "title", [M_CAPITALIZE] = "capitalize", [M_FIND] = "find", [M_RFIND] = "rfind",
    [M_COUNT] = "count", [M_JOIN] = "join", [M_FORMAT] = "format", [M_SPLITLINES] = "splitlines",
    [M_ISDIGIT] = "isdigit", [M_ISALPHA] = "isalpha", [M_ISSPACE] = "isspace", [M_ISALNUM] = "isalnum",
    [M_ISUPPER] = "isupper", [M_ISLOWER] = "islower", [M_REMOVEPREFIX] = "removeprefix",
    [M_REMOVESUFFIX] = "removesuffix", [M_INDEX] = "index", [M_PARTITION] = "partition",
    [M_RPARTITION] = "rpartition", [M_ZFILL] = "zfill", [M_LJUST] = "ljust", [M_RJUST] = "rjust",
    [M_CENTER] = "center", [M_STR_END] = NULL,
};
static const char *const DICT_METHODS[] = {
    [M_ITEMS - M_ITEMS] = "items", [M_KEYS - M_ITEMS] = "keys", [M_VALUES - M_ITEMS] = "values",
    [M_GET - M_ITEMS] = "get",     [M_COPY - M_ITEMS] = "copy", [M_DICT_END - M_ITEMS] = NULL,
};
static const char *const DICT_UNSAFE[] = {"pop", "popitem", "setdefault", "update", "clear", NULL};
static const char *const LIST_METHODS[] = {
    [M_LINDEX - M_LINDEX] = "index", [M_LCOUNT - M_LINDEX] = "count", [M_LCOPY - M_LINDEX] = "copy",
    [M_LIST_END - M_LINDEX] = NULL,
};
static const char *const LIST_UNSAFE[] = {"append", "pop", "extend", "insert", "remove", "clear", "sort", "reverse",
                                          NULL};

static int find_name(const char *const *list, const char *name, size_t n) {
    for (int i = 0; list[i]; i++)
        if (strlen(list[i]) == n && !memcmp(list[i], name, n)) return i;
    return -1;
}

static tkv__jv bound(tkv__jctx *c, tkv__jv self, int id) {
    tkv__jv v = {.type = TKV__JV_FUNC};
    v.u.fn = tkv__jarena_alloc(c, sizeof *v.u.fn);
    memset(v.u.fn, 0, sizeof *v.u.fn);
    v.u.fn->kind = TKV__JF_METHOD;
    v.u.fn->id = id;
    v.u.fn->self = self;
    return v;
}

bool tkv__jinja_method(tkv__jctx *c, tkv__jv obj, const char *name, size_t n, tkv__jv *out) {
    int k;
    if (n && name[0] == '_') {
        /* Python's private attributes: the sandbox refuses them all */
        *out = tkv__jv_undef(NULL);
        out->u.str.p = name;
        out->u.str.n = n;
        out->flags = TKV__JV_UNSAFE;
        return obj.type == TKV__JV_STR || obj.type == TKV__JV_LIST || obj.type == TKV__JV_DICT;
    }
    if (obj.type == TKV__JV_STR && (k = find_name(STR_METHODS, name, n)) >= 0) {
        *out = bound(c, obj, M_STRIP + k);
        return true;
    }
    if (obj.type == TKV__JV_DICT && (k = find_name(DICT_METHODS, name, n)) >= 0) {
        *out = bound(c, obj, M_ITEMS + k);
        return true;
    }
    if (obj.type == TKV__JV_LIST && (k = find_name(LIST_METHODS, name, n)) >= 0) {
        *out = bound(c, obj, M_LINDEX + k);
        return true;
    }
    if ((obj.type == TKV__JV_DICT && find_name(DICT_UNSAFE, name, n) >= 0) ||
        (obj.type == TKV__JV_LIST && find_name(LIST_UNSAFE, name, n) >= 0)) {
        *out = tkv__jv_undef(NULL);
        out->u.str.p = name;
        out->u.str.n = n;
        out->flags = TKV__JV_UNSAFE;
        return true;
    }
    return false;
}

/* ---- string helpers (shared with the filters) ---- */

static bool in_chars(tkv__jv chars, const char *p, size_t used) {
    for (size_t i = 0; i < chars.u.str.n;) {
        size_t u;
        tkv__utf8_decode(chars.u.str.p + i, chars.u.str.n - i, &u);
        if (u == used && !memcmp(chars.u.str.p + i, p, used)) return true;
        i += u;
    }
    return false;
}

/* Python's strip/lstrip/rstrip: whitespace, or the code points of chars. */
tkv__jv tkv__jstr_strip(tkv__jctx *c, tkv__jv s, tkv__jv chars, bool left, bool right) {
    bool ws = chars.type != TKV__JV_STR;
    /* each code point stripped is looked up in chars */
    long cost = ws ? 0 : (long)(chars.u.str.n / 32);
    const char *p = s.u.str.p;
    size_t a = 0, b = s.u.str.n;
    if (left) {
        while (a < b) {
            size_t used;
            uint32_t cp = tkv__utf8_decode(p + a, b - a, &used);
            if (ws ? !tkv__py_isspace(cp) : !in_chars(chars, p + a, used)) break;
            if (cost) tkv__jstep(c, cost);
            a += used;
        }
    }
    if (right) {
        while (b > a) {
            size_t st = b - 1;
            while (st > a && ((unsigned char)p[st] & 0xc0) == 0x80) st--;
            size_t used;
            uint32_t cp = tkv__utf8_decode(p + st, b - st, &used);
            if (used != b - st) {
                st = b - 1;
                used = 1;
                cp = (unsigned char)p[st];
            }
            if (ws ? !tkv__py_isspace(cp) : !in_chars(chars, p + st, used)) break;
            if (cost) tkv__jstep(c, cost);
            b = st;
        }
    }
    return tkv__jv_str(p + a, b - a);
}


tkv__jv tkv__jstr_replace(tkv__jctx *c, tkv__jv s, tkv__jv old, tkv__jv rep, int64_t count) {
    tkv__jbuf b = {0};
    tkv__jstep(c, (long)s.u.str.n / 16 + 1);
    if (!old.u.str.n) {
        /* Python puts rep before every code point and at the end */
        tkv__jlist chars = tkv__jinja_iter(c, s);
        int64_t done = 0;
        for (size_t i = 0; i <= chars.n; i++) {
            if (count < 0 || done < count) {
                tkv__jbuf_add(c, &b, rep.u.str.p, rep.u.str.n);
                done++;
            }
            if (i < chars.n) tkv__jbuf_add(c, &b, chars.items[i].u.str.p, chars.items[i].u.str.n);
        }
        return tkv__jbuf_value(&b);
    }
    size_t at = 0;
    int64_t done = 0;
    for (;;) {
        size_t k = count >= 0 && done >= count ? SIZE_MAX : tkv__jfind(c, s, at, old);
        if (k == SIZE_MAX) break;
        tkv__jbuf_add(c, &b, s.u.str.p + at, k - at);
        tkv__jbuf_add(c, &b, rep.u.str.p, rep.u.str.n);
        at = k + old.u.str.n;
        done++;
    }
    tkv__jbuf_add(c, &b, s.u.str.p + at, s.u.str.n - at);
    return tkv__jbuf_value(&b);
}

static tkv__jv need_str(tkv__jctx *c, tkv__jv v, const char *what) {
    if (v.type == TKV__JV_UNDEF) tkv__jundef_fail(c, v);
    if (v.type != TKV__JV_STR)
        tkv__jraise(c, TKV_ERR_INVALID, "%s must be str, not %s", what, tkv__jv_type_name(v));
    return v;
}

static int64_t opt_int(tkv__jctx *c, tkv__jv v, int64_t dflt) {
    if (v.type == TKV__JV_UNDEF || v.type == TKV__JV_NONE) return dflt;
    if (v.type == TKV__JV_INT) return v.u.i;
    if (v.type == TKV__JV_BOOL) return v.u.b;
    tkv__jraise(c, TKV_ERR_INVALID, "'%s' object cannot be interpreted as an integer", tkv__jv_type_name(v));
}

static void list_push(tkv__jctx *c, tkv__jv *l, size_t *cap, tkv__jv v) {
    tkv__jlist *x = l->u.list;
    if (x->n == *cap) {
        size_t nc = *cap ? *cap * 2 : 8;
        tkv__jv *items = tkv__jarena_alloc(c, nc * sizeof *items);
        if (x->n) memcpy(items, x->items, x->n * sizeof *items);
        x->items = items;
        *cap = nc;
    }
    x->items[x->n++] = v;
}

static tkv__jv split(tkv__jctx *c, tkv__jv s, tkv__jv sep, int64_t maxsplit, bool from_right) {
    tkv__jv out = tkv__jv_list(c, 0);
    size_t cap = 0;
    const char *p = s.u.str.p;
    size_t n = s.u.str.n;
    tkv__jstep(c, (long)n / 16 + 1);
    if (sep.type == TKV__JV_UNDEF || sep.type == TKV__JV_NONE) {
        /* runs of whitespace, no empty strings */
        size_t *starts = tkv__jarena_alloc(c, (n + 1) * sizeof *starts);
        size_t *ends = tkv__jarena_alloc(c, (n + 1) * sizeof *ends);
        size_t k = 0, i = 0;
        while (i < n) {
            size_t used;
            while (i < n && tkv__py_isspace(tkv__utf8_decode(p + i, n - i, &used))) i += used;
            if (i >= n) break;
            starts[k] = i;
            while (i < n && !tkv__py_isspace(tkv__utf8_decode(p + i, n - i, &used))) i += used;
            ends[k++] = i;
        }
        if (maxsplit < 0 || (size_t)maxsplit >= k) {
            for (size_t w = 0; w < k; w++) list_push(c, &out, &cap, tkv__jv_str(p + starts[w], ends[w] - starts[w]));
            return out;
        }
        if (!from_right) {
            for (int64_t w = 0; w < maxsplit; w++)
                list_push(c, &out, &cap, tkv__jv_str(p + starts[w], ends[w] - starts[w]));
            /* the rest from the next word on, as it is */
            list_push(c, &out, &cap, tkv__jv_str(p + starts[maxsplit], n - starts[maxsplit]));
        } else {
            size_t first = k - (size_t)maxsplit;
            list_push(c, &out, &cap, tkv__jv_str(p, ends[first - 1]));
            for (size_t w = first; w < k; w++)
                list_push(c, &out, &cap, tkv__jv_str(p + starts[w], ends[w] - starts[w]));
        }
        return out;
    }
    need_str(c, sep, "separator");
    if (!sep.u.str.n) tkv__jraise(c, TKV_ERR_INVALID, "empty separator");
    /* find all separator positions left to right, then keep maxsplit of them from the chosen side */
    size_t cnt = 0, at = 0;
    size_t *pos = NULL, pcap = 0;
    for (;;) {
        size_t k = tkv__jfind(c, s, at, sep);
        if (k == SIZE_MAX) break;
        if (cnt == pcap) {
            size_t nc = pcap ? pcap * 2 : 8;
            size_t *np = tkv__jarena_alloc(c, nc * sizeof *np);
            if (cnt) memcpy(np, pos, cnt * sizeof *np);
            pos = np;
            pcap = nc;
        }
        pos[cnt++] = k;
        at = k + sep.u.str.n;
    }
    size_t use = maxsplit < 0 || (size_t)maxsplit >= cnt ? cnt : (size_t)maxsplit;
    size_t first = from_right ? cnt - use : 0;
    size_t prev = 0;
    for (size_t i = first; i < first + use; i++) {
        list_push(c, &out, &cap, tkv__jv_str(p + prev, pos[i] - prev));
        prev = pos[i] + sep.u.str.n;
    }
    list_push(c, &out, &cap, tkv__jv_str(p + prev, n - prev));
    return out;
}

static bool affix(tkv__jctx *c, tkv__jv s, tkv__jv x, bool end) {
    if (x.type == TKV__JV_LIST && (x.flags & TKV__JV_TUPLE)) {
        for (size_t i = 0; i < x.u.list->n; i++)
            if (affix(c, s, x.u.list->items[i], end)) return true;
        return false;
    }
    need_str(c, x, end ? "endswith argument" : "startswith argument");
    if (x.u.str.n > s.u.str.n) return false;
    return !memcmp(s.u.str.p + (end ? s.u.str.n - x.u.str.n : 0), x.u.str.p, x.u.str.n);
}

/* One replacement field's format spec (Python's mini-language: [[fill]align][sign][0][width][,][.prec][type]). */
static void format_spec(tkv__jctx *c, tkv__jbuf *b, tkv__jv v, const char *s, size_t n) {
    size_t i = 0;
    char fill = ' ', align = 0, sign = '-', type = 0;
    if (n >= 2 && strchr("<>^=", s[1])) {
        fill = s[0];
        align = s[1];
        i = 2;
    } else if (n >= 1 && strchr("<>^=", s[0])) {
        align = s[0];
        i = 1;
    }
    if (i < n && strchr("+- ", s[i])) sign = s[i++];
    if (i < n && s[i] == '#') i++;
    if (i < n && s[i] == '0') {
        if (!align) {
            fill = '0';
            align = '=';
        }
        i++;
    }
    long width = 0, prec = -1;
    while (i < n && s[i] >= '0' && s[i] <= '9' && width < 10000) width = width * 10 + (s[i++] - '0');
    char comma = i < n && (s[i] == ',' || s[i] == '_') ? s[i++] : 0;
    if (i < n && s[i] == '.') {
        prec = 0;
        i++;
        while (i < n && s[i] >= '0' && s[i] <= '9' && prec < 1000) prec = prec * 10 + (s[i++] - '0');
    }
    if (i < n) type = s[i++];
    if (i != n || width >= 10000 || prec >= 1000) tkv__jraise(c, TKV_ERR_INVALID, "Invalid format specifier");
    char num[1100];
    tkv__jv body;
    bool is_num = tkv__jv_is_num(v) && v.type != TKV__JV_BOOL;
    if (!is_num || type == 's') {
        if (type && type != 's') tkv__jraise(c, TKV_ERR_INVALID, "Unknown format code '%c' for str", type);
        body = tkv__jv_to_str(c, v);
        if (prec >= 0) body.u.str.n = tkv__utf8_offset(body.u.str.p, body.u.str.n, (size_t)prec);
    } else {
        int k;
        char fmt[16];
        const char *sg = sign == '+' ? "+" : sign == ' ' ? " " : "";
        if (v.type == TKV__JV_INT && (!type || strchr("dxXob", type))) {
            if (type == 'b') tkv__jraise(c, TKV_ERR_INVALID, "format code 'b' is not supported");
            const char *conv = type == 'x' ? "llx" : type == 'X' ? "llX" : type == 'o' ? "llo" : "lld";
            snprintf(fmt, sizeof fmt, "%%%s%s", sg, conv);
            k = snprintf(num, sizeof num, fmt, (long long)v.u.i);
        } else if (!type && prec < 0) {
            tkv__jbuf r = {0};
            tkv__jv_write_str(c, &r, v);
            k = snprintf(num, sizeof num, "%s%s", sign == '+' && tkv__jv_num(v) >= 0 ? "+" : "", r.p);
        } else {
            char t = type && strchr("eEfFgG%", type) ? type : 'g';
            double x = tkv__jv_num(v) * (t == '%' ? 100 : 1);
            snprintf(fmt, sizeof fmt, "%%%s.%ld%c", sg, prec < 0 ? 6 : prec, t == '%' ? 'f' : t);
            k = snprintf(num, sizeof num, fmt, x);
            if (t == '%' && k > 0 && (size_t)k + 1 < sizeof num) num[k++] = '%';
        }
        if (k < 0) k = 0;
        if ((size_t)k >= sizeof num) k = sizeof num - 1;
        num[k] = 0;
        if (comma) {
            /* group the integer digits by three */
            char g[1500];
            size_t start = (num[0] == '-' || num[0] == '+' || num[0] == ' ') ? 1 : 0, end = start, o = 0;
            while (num[end] >= '0' && num[end] <= '9') end++;
            for (size_t q = 0; q < start; q++) g[o++] = num[q];
            for (size_t q = start; q < end; q++) {
                g[o++] = num[q];
                if ((end - q - 1) % 3 == 0 && q + 1 < end) g[o++] = comma;
            }
            for (size_t q = end; num[q] && o + 1 < sizeof g; q++) g[o++] = num[q];
            g[o] = 0;
            memcpy(num, g, o + 1 < sizeof num ? o + 1 : sizeof num);
            num[sizeof num - 1] = 0;
        }
        body = tkv__jv_strdup(c, num, strlen(num));
        if (!align) align = '>';
    }
    if (!align) align = '<';
    tkv__jstep(c, (long)(body.u.str.n / 32));
    long len = (long)tkv__utf8_len(body.u.str.p, body.u.str.n), pad = width > len ? width - len : 0;
    long left = align == '>' || align == '=' ? pad : align == '^' ? pad / 2 : 0;
    size_t skip = 0;
    if (align == '=' && body.u.str.n && strchr("+- ", body.u.str.p[0])) {
        tkv__jbuf_addc(c, b, body.u.str.p[0]);
        skip = 1;
    }
    for (long q = 0; q < left; q++) tkv__jbuf_addc(c, b, fill);
    tkv__jbuf_add(c, b, body.u.str.p + skip, body.u.str.n - skip);
    for (long q = left; q < pad; q++) tkv__jbuf_addc(c, b, fill);
}

/* str.format: {} {0} {name} with !r / !s and a format spec; {{ and }}. */
static tkv__jv format(tkv__jctx *c, tkv__jv s, const tkv__jargs *a) {
    tkv__jbuf b = {0};
    size_t auto_i = 0;
    const char *p = s.u.str.p;
    size_t n = s.u.str.n;
    for (size_t i = 0; i < n; i++) {
        if (p[i] == '}' ) {
            if (i + 1 < n && p[i + 1] == '}') i++;
            else tkv__jraise(c, TKV_ERR_INVALID, "Single '}' encountered in format string");
            tkv__jbuf_addc(c, &b, '}');
            continue;
        }
        if (p[i] != '{') {
            tkv__jbuf_addc(c, &b, p[i]);
            continue;
        }
        if (i + 1 < n && p[i + 1] == '{') {
            tkv__jbuf_addc(c, &b, '{');
            i++;
            continue;
        }
        size_t j = i + 1;
        while (j < n && p[j] != '}') j++;
        if (j >= n) tkv__jraise(c, TKV_ERR_INVALID, "Single '{' encountered in format string");
        const char *f = p + i + 1;
        size_t fn = j - i - 1;
        size_t colon = 0;
        while (colon < fn && f[colon] != ':' && f[colon] != '!') colon++;
        const char *spec = f + colon;
        size_t spec_n = fn - colon;
        fn = colon;
        char conv = 0;
        if (spec_n >= 2 && spec[0] == '!') {
            conv = spec[1];
            spec += 2;
            spec_n -= 2;
        }
        if (spec_n && spec[0] != ':') tkv__jraise(c, TKV_ERR_INVALID, "expected ':' after conversion specifier");
        if (spec_n) {
            spec++;
            spec_n--;
        }
        tkv__jv v;
        if (fn == 0) {
            if (auto_i >= a->n) tkv__jraise(c, TKV_ERR_INVALID, "Replacement index %zu out of range", auto_i);
            v = a->v[auto_i++];
        } else if (f[0] >= '0' && f[0] <= '9') {
            size_t idx = 0;
            for (size_t k = 0; k < fn; k++) {
                if (f[k] < '0' || f[k] > '9') tkv__jraise(c, TKV_ERR_INVALID, "bad format field");
                idx = idx * 10 + (size_t)(f[k] - '0');
                if (idx > 1000000) tkv__jraise(c, TKV_ERR_INVALID, "bad format field");
            }
            if (idx >= a->n) tkv__jraise(c, TKV_ERR_INVALID, "Replacement index %zu out of range", idx);
            v = a->v[idx];
        } else {
            size_t k = 0;
            for (; k < a->n_kw; k++)
                if (a->kw_names[k].u.str.n == fn && !memcmp(a->kw_names[k].u.str.p, f, fn)) break;
            if (k == a->n_kw) tkv__jraise(c, TKV_ERR_INVALID, "KeyError: '%.*s'", (int)fn, f);
            v = a->kw[k];
        }
        if (conv == 'r' || conv == 'a') {
            tkv__jbuf r = {0};
            tkv__jv_write_repr(c, &r, v, 0);
            v = tkv__jbuf_value(&r);
        } else if (conv && conv != 's') {
            tkv__jraise(c, TKV_ERR_INVALID, "Unknown conversion specifier %c", conv);
        }
        if (spec_n) format_spec(c, &b, v, spec, spec_n);
        else tkv__jv_write_str(c, &b, v);
        i = j;
    }
    return tkv__jbuf_value(&b);
}

/* Python's printf-style `fmt % args`: args is a tuple of values, a mapping for %(name)s, or one value. */
tkv__jv tkv__jstr_percent(tkv__jctx *c, tkv__jv fmt, tkv__jv args) {
    tkv__jbuf b = {0};
    tkv__jbuf_add(c, &b, "", 0);
    bool tuple = args.type == TKV__JV_LIST && (args.flags & TKV__JV_TUPLE);
    size_t n_args = tuple ? args.u.list->n : 1, next_arg = 0;
    const char *p = fmt.u.str.p;
    size_t n = fmt.u.str.n;
    for (size_t i = 0; i < n; i++) {
        if (p[i] != '%') {
            tkv__jbuf_addc(c, &b, p[i]);
            continue;
        }
        if (++i >= n) tkv__jraise(c, TKV_ERR_INVALID, "incomplete format");
        tkv__jv v;
        bool have = false;
        if (p[i] == '(') {
            size_t j = i + 1;
            while (j < n && p[j] != ')') j++;
            if (j >= n || args.type != TKV__JV_DICT) tkv__jraise(c, TKV_ERR_INVALID, "format requires a mapping");
            tkv__jv *x = tkv__jv_dict_getn(args, p + i + 1, j - i - 1);
            if (!x) tkv__jraise(c, TKV_ERR_INVALID, "KeyError: '%.*s'", (int)(j - i - 1), p + i + 1);
            v = *x;
            have = true;
            i = j + 1;
        }
        char spec[32];
        size_t k = 0;
        spec[k++] = '%';
        while (i < n && strchr("-+ #0", p[i]) && k < 8) spec[k++] = p[i++];
        while (i < n && ((p[i] >= '0' && p[i] <= '9') || p[i] == '.') && k < 24) spec[k++] = p[i++];
        if (i >= n) tkv__jraise(c, TKV_ERR_INVALID, "incomplete format");
        char t = p[i];
        if (t == '%') {
            tkv__jbuf_addc(c, &b, '%');
            continue;
        }
        if (!have) {
            if (next_arg >= n_args) tkv__jraise(c, TKV_ERR_INVALID, "not enough arguments for format string");
            v = tuple ? args.u.list->items[next_arg] : args;
            next_arg++;
        }
        char out[512];
        int len;
        if (t == 's' || t == 'r' || t == 'a') {
            tkv__jbuf tmp = {0};
            if (t == 's') tkv__jv_write_str(c, &tmp, v);
            else tkv__jv_write_repr(c, &tmp, v, 0);
            spec[k++] = 's';
            spec[k] = 0;
            if (k == 2) {
                tkv__jbuf_add(c, &b, tmp.p ? tmp.p : "", tmp.n);
                continue;
            }
            /* width and precision count bytes here, code points in Python: the same for ASCII */
            len = snprintf(out, sizeof out, spec, tmp.p ? tmp.p : "");
        } else if (strchr("diuxXoc", t)) {
            if (!tkv__jv_is_num(v))
                tkv__jraise(c, TKV_ERR_INVALID, "%%%c format: a number is required, not %s", t, tkv__jv_type_name(v));
            long long x = v.type == TKV__JV_FLOAT ? (long long)v.u.f : v.type == TKV__JV_INT ? v.u.i : v.u.b;
            spec[k++] = 'l';
            spec[k++] = 'l';
            spec[k++] = t == 'i' || t == 'u' ? 'd' : t;
            spec[k] = 0;
            len = snprintf(out, sizeof out, spec, x);
        } else if (strchr("eEfFgG", t)) {
            if (!tkv__jv_is_num(v))
                tkv__jraise(c, TKV_ERR_INVALID, "must be real number, not %s", tkv__jv_type_name(v));
            spec[k++] = t;
            spec[k] = 0;
            len = snprintf(out, sizeof out, spec, tkv__jv_num(v));
        } else {
            tkv__jraise(c, TKV_ERR_INVALID, "unsupported format character '%c'", t);
        }
        if (len < 0) len = 0;
        tkv__jbuf_add(c, &b, out, (size_t)len < sizeof out ? (size_t)len : sizeof out - 1);
    }
    if (tuple && next_arg < n_args)
        tkv__jraise(c, TKV_ERR_INVALID, "not all arguments converted during string formatting");
    return tkv__jbuf_value(&b);
}

static tkv__jv pairs(tkv__jctx *c, tkv__jv d) {
    size_t n = d.u.dict->n;
    tkv__jv l = tkv__jv_list(c, n);
    tkv__jstep(c, (long)n);
    for (size_t i = 0; i < n; i++) {
        tkv__jv pair = tkv__jv_list(c, 2);
        pair.flags = TKV__JV_TUPLE;
        pair.u.list->items[0] = d.u.dict->keys[i];
        pair.u.list->items[1] = d.u.dict->vals[i];
        l.u.list->items[i] = pair;
    }
    return l;
}

bool tkv__jstr_is_case(tkv__jv s, bool upper) {
    bool cased = false;
    for (size_t i = 0; i < s.u.str.n;) {
        size_t used;
        const tkv__jcase_kind k = tkv__jcase_class(tkv__utf8_decode(s.u.str.p + i, s.u.str.n - i, &used));
        const tkv__jcase_kind same = upper ? TKV__JKIND_UPPER : TKV__JKIND_LOWER;
        if (k == TKV__JKIND_TITLE || (k != TKV__JKIND_NONE && k != same)) return false;
        if (k == same) cased = true;
        i += used;
    }
    return cased;
}

/* The classes of Python's str.isdigit, isalpha, isspace, isalnum (ASCII; other code points count as letters). */
typedef enum str_kind { STR_DIGIT, STR_ALPHA, STR_SPACE, STR_ALNUM } str_kind;

static bool str_class(tkv__jv s, str_kind which) {
    if (!s.u.str.n) return false;
    for (size_t i = 0; i < s.u.str.n;) {
        size_t used;
        uint32_t cp = tkv__utf8_decode(s.u.str.p + i, s.u.str.n - i, &used);
        bool digit = cp >= '0' && cp <= '9', alpha = ((cp | 32) >= 'a' && (cp | 32) <= 'z') ||
                                                     (cp >= 0xc0 && !tkv__py_isspace(cp));
        const bool ok = which == STR_DIGIT   ? digit
                        : which == STR_ALPHA ? alpha
                        : which == STR_SPACE ? tkv__py_isspace(cp)
                                             : digit || alpha;
        if (!ok) return false;
        i += used;
    }
    return true;
}

tkv__jv tkv__jinja_call_method(tkv__jctx *c, tkv__jfunc *fn, const tkv__jargs *a) {
    tkv__jv self = fn->self, p[4];
#define BIND(...)                                                                                                    \
    do {                                                                                                             \
        static const char *const names_[] = {__VA_ARGS__, NULL};                                                     \
        tkv__jbind(c, "method", a, names_, p);                                                                      \
    } while (0)
    switch (fn->id) {
    case M_STRIP:
    case M_LSTRIP:
    case M_RSTRIP:
        BIND("chars");
        if (p[0].type != TKV__JV_UNDEF && p[0].type != TKV__JV_NONE) need_str(c, p[0], "strip arg");
        return tkv__jstr_strip(c, self, p[0], fn->id != M_RSTRIP, fn->id != M_LSTRIP);
    case M_SPLIT:
    case M_RSPLIT: BIND("sep", "maxsplit"); return split(c, self, p[0], opt_int(c, p[1], -1), fn->id == M_RSPLIT);
    case M_STARTSWITH:
    case M_ENDSWITH: BIND("prefix"); return tkv__jv_bool(affix(c, self, p[0], fn->id == M_ENDSWITH));
    case M_REPLACE:
        BIND("old", "new", "count");
        return tkv__jstr_replace(c, self, need_str(c, p[0], "replace arg"), need_str(c, p[1], "replace arg"),
                                 opt_int(c, p[2], -1));
    case M_UPPER: BIND("unused"); return tkv__jstr_case(c, self, TKV__JSTR_UPPER);
    case M_LOWER: BIND("unused"); return tkv__jstr_case(c, self, TKV__JSTR_LOWER);
    case M_CAPITALIZE: BIND("unused"); return tkv__jstr_case(c, self, TKV__JSTR_CAPITALIZE);
    case M_TITLE: BIND("unused"); return tkv__jstr_case(c, self, TKV__JSTR_TITLE);
    case M_FIND:
    case M_RFIND:
    case M_INDEX:
    case M_COUNT: {
        BIND("sub", "start", "end");
        tkv__jv sub = need_str(c, p[0], "substring");
        tkv__jstep(c, (long)(self.u.str.n / 32));
        size_t len = tkv__utf8_len(self.u.str.p, self.u.str.n);
        int64_t st = opt_int(c, p[1], 0), en = opt_int(c, p[2], (int64_t)len);
        if (st < 0) st = st + (int64_t)len < 0 ? 0 : st + (int64_t)len;
        if (en < 0) en = en + (int64_t)len < 0 ? 0 : en + (int64_t)len;
        if (en > (int64_t)len) en = (int64_t)len;
        if (st > en) return tkv__jv_int(fn->id == M_COUNT ? 0 : -1);
        size_t bs = tkv__utf8_offset(self.u.str.p, self.u.str.n, (size_t)st),
               be = tkv__utf8_offset(self.u.str.p, self.u.str.n, (size_t)en);
        tkv__jv part = tkv__jv_str(self.u.str.p + bs, be - bs);
        tkv__jstep(c, (long)part.u.str.n / 16 + 1);
        if (fn->id == M_COUNT) {
            if (!sub.u.str.n) return tkv__jv_int((int64_t)tkv__utf8_len(part.u.str.p, part.u.str.n) + 1);
            int64_t k = 0;
            for (size_t at = 0, f; (f = tkv__jfind(c, part, at, sub)) != SIZE_MAX; at = f + sub.u.str.n) k++;
            return tkv__jv_int(k);
        }
        size_t found = SIZE_MAX;
        if (fn->id == M_RFIND) {
            for (size_t at = 0, f; (f = tkv__jfind(c, part, at, sub)) != SIZE_MAX; at = f + 1) found = f;
        } else {
            found = tkv__jfind(c, part, 0, sub);
        }
        if (found == SIZE_MAX) {
            if (fn->id == M_INDEX) tkv__jraise(c, TKV_ERR_INVALID, "substring not found");
            return tkv__jv_int(-1);
        }
        return tkv__jv_int(st + (int64_t)tkv__utf8_len(part.u.str.p, found));
    }
    case M_JOIN: {
        BIND("iterable");
        tkv__jlist l = tkv__jinja_iter(c, p[0]);
        tkv__jbuf b = {0};
        tkv__jbuf_add(c, &b, "", 0);
        for (size_t i = 0; i < l.n; i++) {
            tkv__jstep(c, 1);
            if (i) tkv__jbuf_add(c, &b, self.u.str.p, self.u.str.n);
            need_str(c, l.items[i], "sequence item");
            tkv__jbuf_add(c, &b, l.items[i].u.str.p, l.items[i].u.str.n);
        }
        return tkv__jbuf_value(&b);
    }
    case M_FORMAT: return format(c, self, a);
    case M_SPLITLINES: {
        BIND("keepends");
        tkv__jv out = tkv__jv_list(c, 0);
        size_t cap = 0, i = 0, n = self.u.str.n;
        while (i < n) {
            size_t j = i, brk = 0;
            while (j < n) {
                size_t used;
                uint32_t cp = tkv__utf8_decode(self.u.str.p + j, n - j, &used);
                if (cp == '\n' || cp == '\r' || cp == '\v' || cp == '\f' || (cp >= 0x1c && cp <= 0x1e) ||
                    cp == 0x85 || cp == 0x2028 || cp == 0x2029) {
                    brk = (cp == '\r' && j + 1 < n && self.u.str.p[j + 1] == '\n') ? 2 : used;
                    break;
                }
                j += used;
            }
            list_push(c, &out, &cap, tkv__jv_str(self.u.str.p + i, j - i + (tkv__jv_truthy(p[0]) ? brk : 0)));
            i = j + brk;
        }
        return out;
    }
    case M_ISDIGIT: BIND("unused"); return tkv__jv_bool(str_class(self, STR_DIGIT));
    case M_ISALPHA: BIND("unused"); return tkv__jv_bool(str_class(self, STR_ALPHA));
    case M_ISSPACE: BIND("unused"); return tkv__jv_bool(str_class(self, STR_SPACE));
    case M_ISALNUM: BIND("unused"); return tkv__jv_bool(str_class(self, STR_ALNUM));
    case M_ISUPPER:
    case M_ISLOWER: {
        BIND("unused");
        tkv__jstep(c, (long)(self.u.str.n / 32));
        return tkv__jv_bool(tkv__jstr_is_case(self, fn->id == M_ISUPPER));
    }
    case M_REMOVEPREFIX:
    case M_REMOVESUFFIX: {
        BIND("affix");
        tkv__jv x = need_str(c, p[0], "affix");
        bool end = fn->id == M_REMOVESUFFIX;
        if (!affix(c, self, x, end)) return self;
        return tkv__jv_str(self.u.str.p + (end ? 0 : x.u.str.n), self.u.str.n - x.u.str.n);
    }
    case M_PARTITION:
    case M_RPARTITION: {
        BIND("sep");
        tkv__jv sep = need_str(c, p[0], "separator");
        if (!sep.u.str.n) tkv__jraise(c, TKV_ERR_INVALID, "empty separator");
        size_t at = tkv__jfind(c, self, 0, sep);
        if (fn->id == M_RPARTITION)
            for (size_t f = at; f != SIZE_MAX; f = tkv__jfind(c, self, f + 1, sep)) at = f;
        tkv__jv t = tkv__jv_list(c, 3);
        t.flags = TKV__JV_TUPLE;
        tkv__jv empty = tkv__jv_str("", 0);
        if (at == SIZE_MAX) {
            t.u.list->items[0] = fn->id == M_PARTITION ? self : empty;
            t.u.list->items[1] = empty;
            t.u.list->items[2] = fn->id == M_PARTITION ? empty : self;
        } else {
            t.u.list->items[0] = tkv__jv_str(self.u.str.p, at);
            t.u.list->items[1] = sep;
            t.u.list->items[2] = tkv__jv_str(self.u.str.p + at + sep.u.str.n, self.u.str.n - at - sep.u.str.n);
        }
        return t;
    }
    case M_ZFILL:
    case M_LJUST:
    case M_RJUST:
    case M_CENTER: {
        BIND("width", "fillchar");
        int64_t w = opt_int(c, p[0], 0);
        if (w > 100000) tkv__jraise(c, TKV_ERR_INVALID, "width too large");
        tkv__jv fill = p[1].type == TKV__JV_UNDEF ? tkv__jv_cstr(fn->id == M_ZFILL ? "0" : " ")
                                                  : need_str(c, p[1], "fill character");
        if (tkv__utf8_len(fill.u.str.p, fill.u.str.n) != 1)
            tkv__jraise(c, TKV_ERR_INVALID, "The fill character must be exactly one character long");
        tkv__jstep(c, (long)(self.u.str.n / 32));
        int64_t len = (int64_t)tkv__utf8_len(self.u.str.p, self.u.str.n), pad = w > len ? w - len : 0;
        /* str.center puts the odd space on the left when the width is odd (Python's rule) */
        int64_t left = fn->id == M_RJUST || fn->id == M_ZFILL ? pad : fn->id == M_LJUST ? 0 : pad / 2 + (pad & w & 1);
        tkv__jbuf b = {0};
        tkv__jbuf_add(c, &b, "", 0);
        size_t skip = 0;
        if (fn->id == M_ZFILL && self.u.str.n && (self.u.str.p[0] == '-' || self.u.str.p[0] == '+')) {
            tkv__jbuf_addc(c, &b, self.u.str.p[0]);
            skip = 1;
        }
        for (int64_t i = 0; i < left; i++) tkv__jbuf_add(c, &b, fill.u.str.p, fill.u.str.n);
        tkv__jbuf_add(c, &b, self.u.str.p + skip, self.u.str.n - skip);
        for (int64_t i = left; i < pad; i++) tkv__jbuf_add(c, &b, fill.u.str.p, fill.u.str.n);
        return tkv__jbuf_value(&b);
    }
    case M_ITEMS: BIND("unused"); return pairs(c, self);
    case M_KEYS:
    case M_VALUES: {
        BIND("unused");
        size_t n = self.u.dict->n;
        tkv__jv l = tkv__jv_list(c, n);
        tkv__jstep(c, (long)n);
        if (n) memcpy(l.u.list->items, fn->id == M_KEYS ? self.u.dict->keys : self.u.dict->vals, n * sizeof(tkv__jv));
        return l;
    }
    case M_GET: {
        BIND("key", "default");
        tkv__jv *v = tkv__jv_dict_get(self, p[0]);
        return v ? *v : p[1].type == TKV__JV_UNDEF ? tkv__jv_none() : p[1];
    }
    case M_COPY:
    case M_LCOPY: {
        BIND("unused");
        if (self.type == TKV__JV_LIST) {
            tkv__jv l = tkv__jv_list(c, self.u.list->n);
            if (self.u.list->n) memcpy(l.u.list->items, self.u.list->items, self.u.list->n * sizeof(tkv__jv));
            return l;
        }
        tkv__jv d = tkv__jv_dict(c, self.u.dict->n);
        for (size_t i = 0; i < self.u.dict->n; i++) tkv__jv_dict_set(c, d, self.u.dict->keys[i], self.u.dict->vals[i]);
        return d;
    }
    case M_LINDEX:
    case M_LCOUNT: {
        BIND("value");
        int64_t k = 0;
        tkv__jstep(c, (long)self.u.list->n);
        for (size_t i = 0; i < self.u.list->n; i++) {
            if (!tkv__jv_equal(self.u.list->items[i], p[0])) continue;
            if (fn->id == M_LINDEX) return tkv__jv_int((int64_t)i);
            k++;
        }
        if (fn->id == M_LINDEX) tkv__jraise(c, TKV_ERR_INVALID, "value is not in list");
        return tkv__jv_int(k);
    }
    default: tkv__jraise(c, TKV_ERR_INVALID, "unknown method");
    }
#undef BIND
}

/* ---- globals ---- */

enum { G_RANGE, G_NAMESPACE, G_DICT, G_RAISE, G_STRFTIME };

static const char *const MONTHS[] = {"January", "February", "March",     "April",   "May",      "June",
                                     "July",    "August",   "September", "October", "November", "December"};
static const char *const DAYS[] = {"Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"};

static int day_of_week(int y, int m, int d) {
    /* Monday = 0 (Sakamoto's method gives Sunday = 0) */
    static const int t[] = {0, 3, 2, 5, 0, 3, 5, 1, 4, 6, 2, 4};
    if (m < 3) y -= 1;
    int w = (y + y / 4 - y / 100 + y / 400 + t[m - 1] + d) % 7;
    return (w + 6) % 7;
}

static int day_of_year(int y, int m, int d) {
    static const int cum[] = {0, 31, 59, 90, 120, 151, 181, 212, 243, 273, 304, 334};
    bool leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    return cum[m - 1] + d + (leap && m > 2 ? 1 : 0);
}

/* Python's strftime in the C locale, at 00:00:00 of the caller's date. */
static tkv__jv strftime_now(tkv__jctx *c, tkv__jv fmt) {
    tkv__jbuf b = {0};
    tkv__jbuf_add(c, &b, "", 0);
    int y = c->now_y, m = c->now_m, d = c->now_d, wd = day_of_week(y, m, d);
    char s[32];
    for (size_t i = 0; i < fmt.u.str.n; i++) {
        char ch = fmt.u.str.p[i];
        if (ch != '%' || i + 1 >= fmt.u.str.n) {
            tkv__jbuf_addc(c, &b, ch);
            continue;
        }
        char k = fmt.u.str.p[++i];
        bool nopad = false;
        if (k == '-' && i + 1 < fmt.u.str.n) {
            nopad = true;
            k = fmt.u.str.p[++i];
        }
        int len = 0;
        switch (k) {
        case 'Y': len = snprintf(s, sizeof s, "%d", y); break;
        case 'y': len = snprintf(s, sizeof s, nopad ? "%d" : "%02d", y % 100); break;
        case 'm': len = snprintf(s, sizeof s, nopad ? "%d" : "%02d", m); break;
        case 'd': len = snprintf(s, sizeof s, nopad ? "%d" : "%02d", d); break;
        case 'e': len = snprintf(s, sizeof s, "%2d", d); break;
        case 'j': len = snprintf(s, sizeof s, nopad ? "%d" : "%03d", day_of_year(y, m, d)); break;
        case 'H':
        case 'M':
        case 'S': len = snprintf(s, sizeof s, nopad ? "0" : "00"); break;
        case 'I': len = snprintf(s, sizeof s, nopad ? "12" : "12"); break;
        case 'p': len = snprintf(s, sizeof s, "AM"); break;
        case 'B': len = snprintf(s, sizeof s, "%s", MONTHS[m - 1]); break;
        case 'b':
        case 'h': len = snprintf(s, sizeof s, "%.3s", MONTHS[m - 1]); break;
        case 'A': len = snprintf(s, sizeof s, "%s", DAYS[wd]); break;
        case 'a': len = snprintf(s, sizeof s, "%.3s", DAYS[wd]); break;
        case 'w': len = snprintf(s, sizeof s, "%d", (wd + 1) % 7); break;
        case 'u': len = snprintf(s, sizeof s, "%d", wd + 1); break;
        case 'F': len = snprintf(s, sizeof s, "%d-%02d-%02d", y, m, d); break;
        case 'D': len = snprintf(s, sizeof s, "%02d/%02d/%02d", m, d, y % 100); break;
        case 'T': len = snprintf(s, sizeof s, "00:00:00"); break;
        case 'R': len = snprintf(s, sizeof s, "00:00"); break;
        case 'c': len = snprintf(s, sizeof s, "%.3s %.3s %2d 00:00:00 %d", DAYS[wd], MONTHS[m - 1], d, y); break;
        case 'x': len = snprintf(s, sizeof s, "%02d/%02d/%02d", m, d, y % 100); break;
        case 'X': len = snprintf(s, sizeof s, "00:00:00"); break;
        case 'Z': len = 0; break;
        case 'z': len = 0; break;
        case '%': len = snprintf(s, sizeof s, "%%"); break;
        default: len = snprintf(s, sizeof s, "%%%s%c", nopad ? "-" : "", k); break;
        }
        if (len > 0) tkv__jbuf_add(c, &b, s, (size_t)len);
    }
    return tkv__jbuf_value(&b);
}

size_t tkv__jrange(tkv__jctx *c, const tkv__jargs *a, int64_t *start_out, int64_t *step_out) {
    {
        if (a->n_kw || a->n < 1 || a->n > 3) tkv__jraise(c, TKV_ERR_INVALID, "range expected 1 to 3 arguments");
        int64_t v[3] = {0, 0, 0}; /* a->n is 1..3 (checked above); zeros keep -O1 from warning */
        for (size_t i = 0; i < a->n; i++) {
            if (a->v[i].type == TKV__JV_UNDEF) tkv__jundef_fail(c, a->v[i]);
            if (a->v[i].type != TKV__JV_INT && a->v[i].type != TKV__JV_BOOL)
                tkv__jraise(c, TKV_ERR_INVALID, "'%s' object cannot be interpreted as an integer",
                            tkv__jv_type_name(a->v[i]));
            v[i] = a->v[i].type == TKV__JV_INT ? a->v[i].u.i : a->v[i].u.b;
        }
        int64_t start = a->n == 1 ? 0 : v[0], stop = a->n == 1 ? v[0] : v[1], step = a->n == 3 ? v[2] : 1;
        if (step == 0) tkv__jraise(c, TKV_ERR_INVALID, "range() arg 3 must not be zero");
        __int128 cnt = 0;
        if (step > 0 && start < stop) cnt = ((__int128)stop - start - 1) / step + 1;
        if (step < 0 && start > stop) cnt = ((__int128)start - stop - 1) / (-(__int128)step) + 1;
        if (cnt > TKV__JINJA_MAX_RANGE)
            tkv__jraise(c, TKV_ERR_INVALID, "Range too big. The sandbox blocks ranges larger than MAX_RANGE (%d).",
                        TKV__JINJA_MAX_RANGE);
        *start_out = start;
        *step_out = step;
        return (size_t)cnt;
    }
}

tkv__jv tkv__jinja_call_global(tkv__jctx *c, int id, const tkv__jargs *a) {
    switch (id) {
    case G_RANGE: {
        int64_t start, step;
        size_t cnt = tkv__jrange(c, a, &start, &step);
        tkv__jv l = tkv__jv_list(c, (size_t)cnt);
        tkv__jstep(c, (long)cnt);
        for (size_t i = 0; i < (size_t)cnt; i++) l.u.list->items[i] = tkv__jv_int(start + (int64_t)i * step);
        return l;
    }
    case G_NAMESPACE:
    case G_DICT: {
        tkv__jv d = tkv__jv_dict(c, a->n_kw);
        if (id == G_NAMESPACE) d.flags = TKV__JV_NAMESPACE;
        for (size_t i = 0; i < a->n; i++) {
            /* namespace(d) / dict(d): start from a mapping */
            tkv__jv src = a->v[i];
            if (src.type != TKV__JV_DICT || i > 0)
                tkv__jraise(c, TKV_ERR_INVALID, "%s() takes one mapping argument", id == G_DICT ? "dict" : "namespace");
            for (size_t k = 0; k < src.u.dict->n; k++) tkv__jv_dict_set(c, d, src.u.dict->keys[k], src.u.dict->vals[k]);
        }
        for (size_t i = 0; i < a->n_kw; i++) tkv__jv_dict_set(c, d, a->kw_names[i], a->kw[i]);
        return d;
    }
    case G_RAISE: {
        tkv__jv msg = a->n ? tkv__jv_to_str(c, a->v[0]) : tkv__jv_cstr("raise_exception");
        tkv__jraise(c, TKV_ERR_INVALID, "%.*s", (int)(msg.u.str.n > 400 ? 400 : msg.u.str.n), msg.u.str.p);
    }
    case G_STRFTIME: {
        static const char *const names[] = {"format", NULL};
        tkv__jv p[1];
        tkv__jbind(c, "strftime_now", a, names, p);
        return strftime_now(c, need_str(c, p[0], "strftime format"));
    }
    default: tkv__jraise(c, TKV_ERR_INVALID, "unknown global");
    }
}

void tkv__jinja_add_globals(tkv__jctx *c, tkv__jv dict) {
    /* in the order of G_*: range first (tkv__jinja_is_range relies on it) */
    static const char *const names[] = {"range", "namespace", "dict", "raise_exception", "strftime_now", NULL};
    for (int i = 0; names[i]; i++) {
        tkv__jv f = {.type = TKV__JV_FUNC};
        f.u.fn = tkv__jarena_alloc(c, sizeof *f.u.fn);
        memset(f.u.fn, 0, sizeof *f.u.fn);
        f.u.fn->kind = TKV__JF_GLOBAL;
        f.u.fn->id = i;
        tkv__jv_dict_set(c, dict, tkv__jv_cstr(names[i]), f);
    }
}
