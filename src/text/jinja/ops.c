/*
 * text/jinja/ops.c — the template's operators with Python's semantics: integer
 * arithmetic that never wraps (an overflow raises where Python would grow the
 * number), floor division and modulo with the divisor's sign, `~` as str()
 * joined, `+` of strs and lists, `*` repeating, `in`, chained comparisons
 * and slices with Python's index rules.
 */
#include "jinja.h"

#include <math.h>
#include <string.h>

static void need_defined(tkv__jctx *c, tkv__jv v) {
    if (v.type == TKV__JV_UNDEF) tkv__jundef_fail(c, v);
}

static tkv__jv int_result(tkv__jctx *c, __int128 r) {
    if (r > INT64_MAX || r < INT64_MIN) tkv__jraise(c, TKV_ERR_INVALID, "integer overflow");
    return tkv__jv_int((int64_t)r);
}

static int64_t ival(tkv__jv v) { return v.type == TKV__JV_INT ? v.u.i : (int64_t)v.u.b; }

static tkv__jv repeat(tkv__jctx *c, tkv__jv seq, int64_t times) {
    if (times < 0) times = 0;
    if (seq.type == TKV__JV_STR) {
        if (seq.u.str.n && (uint64_t)times > TKV__JINJA_MAX_OUTPUT / seq.u.str.n)
            tkv__jraise(c, TKV_ERR_INVALID, "a string of the template is too long");
        tkv__jbuf b = {0};
        tkv__jstep(c, (long)times);
        for (int64_t i = 0; i < times; i++) tkv__jbuf_add(c, &b, seq.u.str.p, seq.u.str.n);
        return tkv__jbuf_value(&b);
    }
    size_t n = seq.u.list->n;
    if (n && (uint64_t)times > (TKV__JINJA_MAX_MEMORY / sizeof(tkv__jv)) / n)
        tkv__jraise(c, TKV_ERR_INVALID, "a list of the template is too long");
    tkv__jv out = tkv__jv_list(c, n * (size_t)times);
    out.flags = seq.flags;
    tkv__jstep(c, (long)(n * (size_t)times));
    for (int64_t i = 0; i < times; i++)
        for (size_t k = 0; k < n; k++) out.u.list->items[(size_t)i * n + k] = seq.u.list->items[k];
    return out;
}

tkv__jv tkv__jinja_binop(tkv__jctx *c, int op, tkv__jv a, tkv__jv b) {
    if (op == TKV__JOP_CONCAT) {
        a = tkv__jv_to_str(c, a);
        a.flags &= TKV__JV_GROW; /* ~ joins as plain str, never Markup */
        return tkv__jv_concat(c, a, tkv__jv_to_str(c, b));
    }
    need_defined(c, a);
    need_defined(c, b);
    bool num = tkv__jv_is_num(a) && tkv__jv_is_num(b);
    bool ints = num && a.type != TKV__JV_FLOAT && b.type != TKV__JV_FLOAT;
    switch (op) {
    case TKV__JOP_ADD:
        if (ints) return int_result(c, (__int128)ival(a) + ival(b));
        if (num) return tkv__jv_float(tkv__jv_num(a) + tkv__jv_num(b));
        if (a.type == TKV__JV_STR && b.type == TKV__JV_STR) {
            /* Markup + str escapes the str (and the sum is Markup) */
            bool markup = (a.flags | b.flags) & TKV__JV_MARKUP;
            if (markup && !(a.flags & TKV__JV_MARKUP)) a = tkv__jescape(c, a);
            if (markup && !(b.flags & TKV__JV_MARKUP)) b = tkv__jescape(c, b);
            if (markup) a.flags |= TKV__JV_MARKUP;
            return tkv__jv_concat(c, a, b);
        }
        if (a.type == TKV__JV_LIST && b.type == TKV__JV_LIST && !((a.flags | b.flags) & TKV__JV_GEN) &&
            (a.flags & TKV__JV_TUPLE) == (b.flags & TKV__JV_TUPLE))
            return tkv__jv_concat(c, a, b);
        break;
    case TKV__JOP_SUB:
        if (ints) return int_result(c, (__int128)ival(a) - ival(b));
        if (num) return tkv__jv_float(tkv__jv_num(a) - tkv__jv_num(b));
        break;
    case TKV__JOP_MUL:
        if (ints) return int_result(c, (__int128)ival(a) * ival(b));
        if (num) return tkv__jv_float(tkv__jv_num(a) * tkv__jv_num(b));
        if ((a.type == TKV__JV_STR || a.type == TKV__JV_LIST) && (b.type == TKV__JV_INT || b.type == TKV__JV_BOOL))
            return repeat(c, a, ival(b));
        if ((b.type == TKV__JV_STR || b.type == TKV__JV_LIST) && (a.type == TKV__JV_INT || a.type == TKV__JV_BOOL))
            return repeat(c, b, ival(a));
        break;
    case TKV__JOP_DIV:
        if (num) {
            if (tkv__jv_num(b) == 0) tkv__jraise(c, TKV_ERR_INVALID, "division by zero");
            return tkv__jv_float(tkv__jv_num(a) / tkv__jv_num(b));
        }
        break;
    case TKV__JOP_FLOORDIV:
    case TKV__JOP_MOD:
        if (op == TKV__JOP_MOD && a.type == TKV__JV_STR) return tkv__jstr_percent(c, a, b);
        if (num) {
            if (tkv__jv_num(b) == 0) tkv__jraise(c, TKV_ERR_INVALID, "integer division or modulo by zero");
            if (ints) {
                int64_t x = ival(a), y = ival(b);
                if (y == -1) return op == TKV__JOP_MOD ? tkv__jv_int(0) : int_result(c, -(__int128)x);
                int64_t q = x / y, r = x % y;
                if (r != 0 && ((r < 0) != (y < 0))) {
                    q--;
                    r += y;
                }
                return tkv__jv_int(op == TKV__JOP_MOD ? r : q);
            }
            double x = tkv__jv_num(a), y = tkv__jv_num(b);
            if (op == TKV__JOP_FLOORDIV) return tkv__jv_float(floor(x / y));
            double r = fmod(x, y);
            if (r != 0 && ((r < 0) != (y < 0))) r += y;
            return tkv__jv_float(r);
        }
        break;
    case TKV__JOP_POW:
        if (ints && ival(b) >= 0) {
            __int128 r = 1, base = ival(a);
            for (int64_t e = ival(b); e > 0; e--) {
                r *= base;
                if (r > INT64_MAX || r < INT64_MIN) tkv__jraise(c, TKV_ERR_INVALID, "integer overflow");
                if (r == 0 || r == 1) break;
                tkv__jstep(c, 1);
            }
            return tkv__jv_int((int64_t)r);
        }
        if (num) {
            if (tkv__jv_num(a) == 0 && tkv__jv_num(b) < 0)
                tkv__jraise(c, TKV_ERR_INVALID, "0.0 cannot be raised to a negative power");
            return tkv__jv_float(pow(tkv__jv_num(a), tkv__jv_num(b)));
        }
        break;
    default: break;
    }
    static const char *const names[] = {"+", "-", "*", "/", "//", "%", "**"};
    tkv__jraise(c, TKV_ERR_INVALID, "unsupported operand type(s) for %s: '%s' and '%s'", names[op],
                tkv__jv_type_name(a), tkv__jv_type_name(b));
}

tkv__jv tkv__jinja_add(tkv__jctx *c, tkv__jv a, tkv__jv b) { return tkv__jinja_binop(c, TKV__JOP_ADD, a, b); }

static bool contains(tkv__jctx *c, tkv__jv container, tkv__jv item) {
    switch (container.type) {
    case TKV__JV_UNDEF: return false;
    case TKV__JV_STR:
        if (item.type == TKV__JV_UNDEF) tkv__jundef_fail(c, item);
        if (item.type != TKV__JV_STR)
            tkv__jraise(c, TKV_ERR_INVALID, "'in <string>' requires string as left operand, not %s",
                        tkv__jv_type_name(item));
        tkv__jstep(c, (long)container.u.str.n / 4096);
        return tkv__jfind(c, container, 0, item) != SIZE_MAX;
    case TKV__JV_LIST:
        tkv__jstep(c, (long)container.u.list->n);
        for (size_t i = 0; i < container.u.list->n; i++)
            if (tkv__jv_equal(container.u.list->items[i], item)) return true;
        return false;
    case TKV__JV_DICT:
        if (!(container.flags & TKV__JV_NAMESPACE)) {
            tkv__jstep(c, (long)container.u.dict->n);
            return tkv__jv_dict_get(container, item) != NULL;
        }
        break;
    default: break;
    }
    tkv__jraise(c, TKV_ERR_INVALID, "argument of type '%s' is not iterable", tkv__jv_type_name(container));
}

/* What comparing two values may cost: a step per item of a container, per 4 KiB of a str. */
static void charge_equal(tkv__jctx *c, tkv__jv a, tkv__jv b) {
    if (a.type != b.type) return;
    if (a.type == TKV__JV_STR) tkv__jstep(c, (long)(a.u.str.n / 4096));
    else if (a.type == TKV__JV_LIST) tkv__jstep(c, (long)a.u.list->n);
    else if (a.type == TKV__JV_DICT) tkv__jstep(c, (long)a.u.dict->n);
}

bool tkv__jinja_compare(tkv__jctx *c, int op, tkv__jv a, tkv__jv b) {
    charge_equal(c, a, b);
    switch (op) {
    case TKV__JOP_EQ: return tkv__jv_equal(a, b);
    case TKV__JOP_NE: return !tkv__jv_equal(a, b);
    case TKV__JOP_LT: return tkv__jv_compare(c, a, b) < 0;
    case TKV__JOP_LE: return tkv__jv_compare(c, a, b) <= 0;
    case TKV__JOP_GT: return tkv__jv_compare(c, a, b) > 0;
    case TKV__JOP_GE: return tkv__jv_compare(c, a, b) >= 0;
    case TKV__JOP_IN: return contains(c, b, a);
    default: return !contains(c, b, a);
    }
}

static int64_t slice_index(tkv__jctx *c, tkv__jv v, bool *given) {
    *given = false;
    if (v.type == TKV__JV_NONE) return 0;
    if (v.type != TKV__JV_INT && v.type != TKV__JV_BOOL)
        tkv__jraise(c, TKV_ERR_INVALID, "slice indices must be integers or None");
    *given = true;
    return ival(v);
}

tkv__jv tkv__jinja_slice(tkv__jctx *c, tkv__jv obj, tkv__jv start, tkv__jv stop, tkv__jv step) {
    need_defined(c, obj);
    bool is_str = obj.type == TKV__JV_STR;
    if (!is_str && (obj.type != TKV__JV_LIST || (obj.flags & TKV__JV_GEN)))
        tkv__jraise(c, TKV_ERR_INVALID, "'%s' object is not subscriptable", tkv__jv_type_name(obj));
    tkv__jlist items = is_str ? tkv__jinja_iter(c, obj) : *obj.u.list;
    int64_t len = (int64_t)items.n;
    bool has_start, has_stop, has_step;
    int64_t st = slice_index(c, step, &has_step);
    if (!has_step) st = 1;
    if (st == 0) tkv__jraise(c, TKV_ERR_INVALID, "slice step cannot be zero");
    int64_t lo = slice_index(c, start, &has_start), hi = slice_index(c, stop, &has_stop);
    /* Python's PySlice_AdjustIndices */
    if (!has_start) lo = st < 0 ? len - 1 : 0;
    else if (lo < 0) lo = lo + len < 0 ? (st < 0 ? -1 : 0) : lo + len;
    else if (lo >= len) lo = st < 0 ? len - 1 : len;
    if (!has_stop) hi = st < 0 ? -1 : len;
    else if (hi < 0) hi = hi + len < 0 ? (st < 0 ? -1 : 0) : hi + len;
    else if (hi >= len) hi = st < 0 ? len - 1 : len;
    size_t n = 0;
    if (st > 0 && lo < hi) n = (size_t)((hi - lo - 1) / st + 1);
    if (st < 0 && hi < lo) n = (size_t)((lo - hi - 1) / (-st) + 1);
    tkv__jstep(c, (long)n);
    if (is_str) {
        tkv__jbuf b = {0};
        for (size_t i = 0; i < n; i++) {
            tkv__jv ch = items.items[lo + (int64_t)i * st];
            tkv__jbuf_add(c, &b, ch.u.str.p, ch.u.str.n);
        }
        return tkv__jbuf_value(&b);
    }
    tkv__jv out = tkv__jv_list(c, n);
    out.flags = obj.flags & TKV__JV_TUPLE;
    for (size_t i = 0; i < n; i++) out.u.list->items[i] = items.items[lo + (int64_t)i * st];
    return out;
}
