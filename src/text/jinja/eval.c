/*
 * text/jinja/eval.c — running a parsed template: scopes, statements, expressions.
 *
 * Scopes are Jinja2's: the root scope holds the context's variables and the
 * template's top-level `set`s; every iteration of a for loop has a fresh scope
 * (so a `set` inside a loop does not outlive the iteration, which is why
 * templates use namespace()); a macro call's scope sits on the scope the
 * macro was defined in, read at call time; `if` adds no scope.
 *
 * Errors leave through longjmp to tkv__jinja_render_with, whose arena holds
 * every value made, so a failure frees everything at once.
 */
#include "jinja.h"

#include "base/alloc.h"
#include "base/error.h"

#include <stdio.h>
#include <string.h>

typedef struct tkv__jframe {
    struct tkv__jframe *parent;
    tkv__jv vars;  /* a dict, or undefined until the first assignment */
    bool captured; /* a macro defined here keeps it: a loop must not reuse it for its next iteration */
} tkv__jframe;

struct tkv__jinja_template {
    tkv__jctx parse; /* its arena holds the tree and the normalized source */
    tkv__jnode *root;
};

enum { FLOW_NORMAL, FLOW_BREAK, FLOW_CONTINUE };

static tkv__jv eval(tkv__jctx *c, const tkv__jnode *x, tkv__jframe *f);
static int exec(tkv__jctx *c, const tkv__jnode *x, tkv__jframe *f);
static tkv__jv loop_again(tkv__jctx *c, tkv__jloop *outer, tkv__jv seq);

static void enter(tkv__jctx *c, int line) {
    c->line = line;
    tkv__jstep(c, 1);
    if (++c->depth > TKV__JINJA_MAX_DEPTH)
        tkv__jraise(c, TKV_ERR_INVALID, "the template recursed more than %d levels deep", TKV__JINJA_MAX_DEPTH);
}

/* ---- scopes ---- */

static tkv__jframe *frame_new(tkv__jctx *c, tkv__jframe *parent) {
    tkv__jframe *f = tkv__jarena_alloc(c, sizeof *f);
    f->parent = parent;
    f->vars = tkv__jv_undef(NULL);
    f->captured = false;
    return f;
}

/* A fresh scope for the next loop iteration: the last one emptied, unless a macro holds on to it. */
static tkv__jframe *frame_next(tkv__jctx *c, tkv__jframe *g, tkv__jframe *parent) {
    if (!g || g->captured) return frame_new(c, parent);
    if (g->vars.type == TKV__JV_DICT) g->vars.u.dict->n = 0;
    return g;
}

static void frame_set(tkv__jctx *c, tkv__jframe *f, tkv__jv name, tkv__jv v) {
    if (f->vars.type != TKV__JV_DICT) f->vars = tkv__jv_dict(c, 4);
    tkv__jv_dict_set(c, f->vars, name, v);
}

static tkv__jv lookup(tkv__jctx *c, tkv__jframe *f, tkv__jv name) {
    for (; f; f = f->parent) {
        if (f->vars.type != TKV__JV_DICT) continue;
        tkv__jstep(c, (long)f->vars.u.dict->n / 16);
        tkv__jv *v = tkv__jv_dict_getn(f->vars, name.u.str.p, name.u.str.n);
        if (v) return *v;
    }
    tkv__jv u = tkv__jv_undef(NULL);
    u.u.str = name.u.str;
    return u;
}

/* ---- undefined ---- */

void tkv__jundef_fail(tkv__jctx *c, tkv__jv u) {
    int n = (int)(u.u.str.n > 200 ? 200 : u.u.str.n);
    if (u.flags & TKV__JV_UNSAFE)
        tkv__jraise(c, TKV_ERR_INVALID, "access to attribute '%.*s' is unsafe (the sandbox refuses it)", n,
                    u.u.str.p);
    /* Jinja2's messages: "'dict object' has no attribute 'x'", "'None' has no attribute 'x'", "'x' is undefined" */
    if (u.origin && u.u.str.p) {
        tkv__jv obj = {.type = (uint8_t)(u.origin - 1)};
        if (obj.type == TKV__JV_NONE)
            tkv__jraise(c, TKV_ERR_INVALID, "'None' has no attribute '%.*s'", n, u.u.str.p);
        tkv__jraise(c, TKV_ERR_INVALID, "'%s object' has no attribute '%.*s'", tkv__jv_type_name(obj), n, u.u.str.p);
    }
    if (u.origin) tkv__jraise(c, TKV_ERR_INVALID, "a missing item was used");
    if (u.u.str.p) tkv__jraise(c, TKV_ERR_INVALID, "'%.*s' is undefined", n, u.u.str.p);
    tkv__jraise(c, TKV_ERR_INVALID, "an undefined value was used");
}

/* The Undefined for obj.name or obj[name] that is not there. */
static tkv__jv missing(tkv__jv obj, const char *name, size_t n) {
    tkv__jv u = tkv__jv_undef(NULL);
    u.u.str.p = name;
    u.u.str.n = name ? n : 0;
    u.origin = (uint8_t)(obj.type + 1);
    return u;
}

static void need_defined(tkv__jctx *c, tkv__jv v) {
    if (v.type == TKV__JV_UNDEF) tkv__jundef_fail(c, v);
}

/* ---- attributes and items ---- */

static tkv__jv loop_item(const tkv__jloop *l, size_t i) {
    return l->items.items ? l->items.items[i] : tkv__jv_int(l->start + (int64_t)i * l->step);
}

static tkv__jv loop_attr(tkv__jctx *c, tkv__jv lv, const char *name, size_t n) {
    tkv__jloop *l = lv.u.loop;
    size_t len = l->items.n, i = l->i;
#define IS(s) (n == sizeof(s) - 1 && !memcmp(name, s, n))
    if (IS("index")) return tkv__jv_int((int64_t)i + 1);
    if (IS("index0")) return tkv__jv_int((int64_t)i);
    if (IS("revindex")) return tkv__jv_int((int64_t)(len - i));
    if (IS("revindex0")) return tkv__jv_int((int64_t)(len - i - 1));
    if (IS("first")) return tkv__jv_bool(i == 0);
    if (IS("last")) return tkv__jv_bool(i + 1 == len);
    if (IS("length")) return tkv__jv_int((int64_t)len);
    if (IS("depth")) return tkv__jv_int(l->depth);
    if (IS("depth0")) return tkv__jv_int(l->depth - 1);
    if (IS("previtem")) return i > 0 ? loop_item(l, i - 1) : tkv__jv_undef("previtem");
    if (IS("nextitem")) return i + 1 < len ? loop_item(l, i + 1) : tkv__jv_undef("nextitem");
    if (IS("cycle") || IS("changed")) {
        tkv__jv fv = {.type = TKV__JV_FUNC};
        fv.u.fn = tkv__jarena_alloc(c, sizeof *fv.u.fn);
        memset(fv.u.fn, 0, sizeof *fv.u.fn);
        fv.u.fn->kind = IS("cycle") ? TKV__JF_LOOPCYCLE : TKV__JF_LOOPCHANGED;
        fv.u.fn->self = lv;
        return fv;
    }
#undef IS
    return tkv__jv_undef(NULL);
}

tkv__jv tkv__jinja_getattr(tkv__jctx *c, tkv__jv obj, const char *name, size_t n) {
    need_defined(c, obj);
    tkv__jv out;
    if (obj.type == TKV__JV_LOOP) return loop_attr(c, obj, name, n);
    if (obj.type == TKV__JV_DICT && (obj.flags & TKV__JV_NAMESPACE)) {
        tkv__jv *v = tkv__jv_dict_getn(obj, name, n);
        return v ? *v : missing(obj, name, n);
    }
    /* groupby's (grouper, list) pairs are named tuples */
    if (obj.type == TKV__JV_LIST && (obj.flags & TKV__JV_TUPLE) && obj.u.list->n == 2) {
        if (n == 7 && !memcmp(name, "grouper", 7)) return obj.u.list->items[0];
        if (n == 4 && !memcmp(name, "list", 4)) return obj.u.list->items[1];
    }
    /* Python attributes first (a dict's `items` is its method, not its key), then items */
    if (tkv__jinja_method(c, obj, name, n, &out)) return out;
    if (obj.type == TKV__JV_DICT) {
        tkv__jv *v = tkv__jv_dict_getn(obj, name, n);
        if (v) return *v;
    }
    return missing(obj, name, n);
}

static bool index_of(tkv__jv key, size_t len, size_t *out) {
    if (key.type != TKV__JV_INT && key.type != TKV__JV_BOOL) return false;
    int64_t i = key.type == TKV__JV_INT ? key.u.i : key.u.b;
    if (i < 0) i += (int64_t)len;
    if (i < 0 || (uint64_t)i >= len) return false;
    *out = (size_t)i;
    return true;
}

tkv__jv tkv__jinja_getitem(tkv__jctx *c, tkv__jv obj, tkv__jv key) {
    need_defined(c, obj);
    size_t i;
    if (obj.type == TKV__JV_DICT && !(obj.flags & TKV__JV_NAMESPACE)) {
        tkv__jv *v = tkv__jv_dict_get(obj, key);
        if (v) return *v;
    } else if (obj.type == TKV__JV_LIST) {
        if (obj.flags & TKV__JV_GEN) tkv__jraise(c, TKV_ERR_INVALID, "'generator' object is not subscriptable");
        if (index_of(key, obj.u.list->n, &i)) return obj.u.list->items[i];
    } else if (obj.type == TKV__JV_STR && (key.type == TKV__JV_INT || key.type == TKV__JV_BOOL)) {
        tkv__jstep(c, (long)(obj.u.str.n / 32)); /* finding a code point reads the string */
        size_t len = tkv__utf8_len(obj.u.str.p, obj.u.str.n);
        if (index_of(key, len, &i)) {
            size_t a = tkv__utf8_offset(obj.u.str.p, obj.u.str.n, i);
            size_t used;
            tkv__utf8_decode(obj.u.str.p + a, obj.u.str.n - a, &used);
            return tkv__jv_str(obj.u.str.p + a, used);
        }
    } else if (obj.type == TKV__JV_LOOP && key.type == TKV__JV_STR) {
        return loop_attr(c, obj, key.u.str.p, key.u.str.n);
    }
    if (key.type == TKV__JV_STR) {
        tkv__jv out;
        if (obj.type == TKV__JV_DICT && (obj.flags & TKV__JV_NAMESPACE))
            return tkv__jinja_getattr(c, obj, key.u.str.p, key.u.str.n);
        if (tkv__jinja_method(c, obj, key.u.str.p, key.u.str.n, &out)) return out;
        return missing(obj, key.u.str.p, key.u.str.n);
    }
    return missing(obj, NULL, 0);
}

tkv__jlist tkv__jinja_iter(tkv__jctx *c, tkv__jv v) {
    tkv__jlist l = {0};
    switch (v.type) {
    case TKV__JV_UNDEF: return l;
    case TKV__JV_LIST: return *v.u.list;
    case TKV__JV_DICT:
        if (v.flags & TKV__JV_NAMESPACE) break;
        l.n = v.u.dict->n;
        l.items = v.u.dict->keys;
        return l;
    case TKV__JV_STR: {
        size_t n = tkv__utf8_len(v.u.str.p, v.u.str.n), at = 0;
        l.n = n;
        l.items = n ? tkv__jarena_alloc(c, n * sizeof *l.items) : NULL;
        for (size_t i = 0; i < n; i++) {
            size_t used;
            tkv__utf8_decode(v.u.str.p + at, v.u.str.n - at, &used);
            l.items[i] = tkv__jv_str(v.u.str.p + at, used);
            at += used;
        }
        tkv__jstep(c, (long)n);
        return l;
    }
    default: break;
    }
    tkv__jraise(c, TKV_ERR_INVALID, "'%s' object is not iterable", tkv__jv_type_name(v));
}

/* ---- calls ---- */

static tkv__jv call_macro(tkv__jctx *c, const tkv__jfunc *fn, const tkv__jargs *a) {
    const tkv__jnode *m = fn->macro;
    tkv__jframe *f = frame_new(c, fn->closure);
    size_t np = m->n_kw;
    if (a->n > np && !(m->op & TKV__JMACRO_VARARGS))
        tkv__jraise(c, TKV_ERR_INVALID, "macro '%.*s' takes not more than %zu argument(s)", (int)m->value.u.str.n,
                    m->value.u.str.p, np);
    if (a->n > np) {
        tkv__jv rest = tkv__jv_list(c, a->n - np);
        for (size_t i = np; i < a->n; i++) rest.u.list->items[i - np] = a->v[i];
        rest.flags = TKV__JV_TUPLE;
        frame_set(c, f, tkv__jv_cstr("varargs"), rest);
    } else {
        frame_set(c, f, tkv__jv_cstr("varargs"), tkv__jv_list(c, 0));
    }
    tkv__jv kwargs = tkv__jv_dict(c, 4);
    bool *given = np ? tkv__jarena_alloc(c, np) : NULL;
    for (size_t i = 0; i < np; i++) given[i] = i < a->n;
    for (size_t i = 0; i < np && i < a->n; i++) frame_set(c, f, m->kw[i]->value, a->v[i]);
    for (size_t k = 0; k < a->n_kw; k++) {
        size_t i = 0;
        for (; i < np; i++)
            if (tkv__jv_equal(m->kw[i]->value, a->kw_names[k])) break;
        if (i < np) {
            if (given[i])
                tkv__jraise(c, TKV_ERR_INVALID, "macro '%.*s' got multiple values for argument '%.*s'",
                            (int)m->value.u.str.n, m->value.u.str.p, (int)a->kw_names[k].u.str.n,
                            a->kw_names[k].u.str.p);
            given[i] = true;
            frame_set(c, f, a->kw_names[k], a->kw[k]);
        } else if ((m->op & TKV__JMACRO_CALLER) && a->kw_names[k].u.str.n == 6 &&
                   !memcmp(a->kw_names[k].u.str.p, "caller", 6)) {
            frame_set(c, f, a->kw_names[k], a->kw[k]);
        } else if (m->op & TKV__JMACRO_KWARGS) {
            tkv__jv_dict_set(c, kwargs, a->kw_names[k], a->kw[k]);
        } else {
            tkv__jraise(c, TKV_ERR_INVALID, "macro '%.*s' takes no keyword argument '%.*s'", (int)m->value.u.str.n,
                        m->value.u.str.p, (int)a->kw_names[k].u.str.n, a->kw_names[k].u.str.p);
        }
    }
    frame_set(c, f, tkv__jv_cstr("kwargs"), kwargs);
    for (size_t i = 0; i < np; i++) {
        if (given[i]) continue;
        tkv__jv v = m->kw[i]->a ? eval(c, m->kw[i]->a, f) : tkv__jv_undef(NULL);
        if (!m->kw[i]->a) v.u.str = m->kw[i]->value.u.str;
        frame_set(c, f, m->kw[i]->value, v);
    }
    tkv__jbuf *saved = c->out, buf = {0};
    c->out = &buf;
    exec(c, m->a, f);
    c->out = saved;
    return tkv__jbuf_value(&buf);
}

tkv__jv tkv__jinja_call(tkv__jctx *c, tkv__jv fn, tkv__jv *args, size_t n_args, const tkv__jv *kw_names,
                        tkv__jv *kw_vals, size_t n_kw) {
    tkv__jargs a = {.v = args, .n = n_args, .kw_names = kw_names, .kw = kw_vals, .n_kw = n_kw};
    if (fn.type == TKV__JV_UNDEF) tkv__jundef_fail(c, fn);
    if (fn.type == TKV__JV_LOOP) {
        if (n_args != 1 || n_kw) tkv__jraise(c, TKV_ERR_INVALID, "loop() takes one argument");
        return loop_again(c, fn.u.loop, args[0]);
    }
    if (fn.type != TKV__JV_FUNC) tkv__jraise(c, TKV_ERR_INVALID, "'%s' object is not callable", tkv__jv_type_name(fn));
    switch (fn.u.fn->kind) {
    case TKV__JF_MACRO: return call_macro(c, fn.u.fn, &a);
    case TKV__JF_METHOD: return tkv__jinja_call_method(c, fn.u.fn, &a);
    case TKV__JF_GLOBAL: return tkv__jinja_call_global(c, fn.u.fn->id, &a);
    case TKV__JF_LOOPCHANGED: {
        tkv__jloop *l = fn.u.fn->self.u.loop;
        tkv__jv now = tkv__jv_list(c, n_args);
        for (size_t i = 0; i < n_args; i++) now.u.list->items[i] = args[i];
        bool changed = l->last_changed.type == TKV__JV_UNDEF || !tkv__jv_equal(l->last_changed, now);
        l->last_changed = now;
        return tkv__jv_bool(changed);
    }
    default: {
        if (!n_args) tkv__jraise(c, TKV_ERR_INVALID, "no items for cycling given");
        tkv__jloop *l = fn.u.fn->self.u.loop;
        return args[l->i % n_args];
    }
    }
}

/* Evaluate a call's arguments (and add `extra` as a keyword argument when given) and call fn. */
static tkv__jv eval_call(tkv__jctx *c, const tkv__jnode *x, tkv__jframe *f, tkv__jv fn, const tkv__jv *extra_name,
                         const tkv__jv *extra) {
    size_t n = x->n_kids, nk = x->n_kw + (extra ? 1 : 0);
    tkv__jv *args = n ? tkv__jarena_alloc(c, n * sizeof *args) : NULL;
    tkv__jv *names = nk ? tkv__jarena_alloc(c, nk * sizeof *names) : NULL;
    tkv__jv *vals = nk ? tkv__jarena_alloc(c, nk * sizeof *vals) : NULL;
    for (size_t i = 0; i < n; i++) args[i] = eval(c, x->kids[i], f);
    for (size_t i = 0; i < x->n_kw; i++) {
        names[i] = x->kw[i]->value;
        vals[i] = eval(c, x->kw[i]->a, f);
    }
    if (extra) {
        names[nk - 1] = *extra_name;
        vals[nk - 1] = *extra;
    }
    c->line = x->line;
    return tkv__jinja_call(c, fn, args, n, names, vals, nk);
}

static tkv__jv apply_filter(tkv__jctx *c, const tkv__jnode *x, tkv__jframe *f, tkv__jv v) {
    size_t n = x->n_kids, nk = x->n_kw;
    tkv__jv *args = n ? tkv__jarena_alloc(c, n * sizeof *args) : NULL;
    tkv__jv *names = nk ? tkv__jarena_alloc(c, nk * sizeof *names) : NULL;
    tkv__jv *vals = nk ? tkv__jarena_alloc(c, nk * sizeof *vals) : NULL;
    for (size_t i = 0; i < n; i++) args[i] = eval(c, x->kids[i], f);
    for (size_t i = 0; i < nk; i++) {
        names[i] = x->kw[i]->value;
        vals[i] = eval(c, x->kw[i]->a, f);
    }
    tkv__jargs a = {.v = args, .n = n, .kw_names = names, .kw = vals, .n_kw = nk};
    c->line = x->line;
    tkv__jv out;
    if (!tkv__jinja_filter(c, x->value.u.str.p, x->value.u.str.n, v, &a, &out))
        tkv__jraise(c, TKV_ERR_INVALID, "no filter named '%.*s'", (int)x->value.u.str.n, x->value.u.str.p);
    return out;
}

/* A chain of filters (block set, filter block) whose innermost input is v; applied innermost first. */
static tkv__jv apply_chain(tkv__jctx *c, const tkv__jnode *x, tkv__jframe *f, tkv__jv v) {
    /* iteratively: a chain is as long as the template makes it, and must not take that much stack */
    size_t n = 0;
    for (const tkv__jnode *y = x; y; y = y->a) n++;
    const tkv__jnode **chain = n ? tkv__jarena_alloc(c, n * sizeof *chain) : NULL;
    size_t k = n;
    for (const tkv__jnode *y = x; y; y = y->a) chain[--k] = y;
    for (size_t i = 0; i < n; i++) v = apply_filter(c, chain[i], f, v);
    return v;
}

/* ---- expressions ---- */

static tkv__jv eval(tkv__jctx *c, const tkv__jnode *x, tkv__jframe *f) {
    enter(c, x->line);
    tkv__jv v;
    switch (x->kind) {
    case TKV__JN_LITERAL: v = x->value; break;
    case TKV__JN_NAME: v = lookup(c, f, x->value); break;
    case TKV__JN_LIST:
    case TKV__JN_TUPLE:
        v = tkv__jv_list(c, x->n_kids);
        if (x->kind == TKV__JN_TUPLE) v.flags = TKV__JV_TUPLE;
        for (size_t i = 0; i < x->n_kids; i++) v.u.list->items[i] = eval(c, x->kids[i], f);
        break;
    case TKV__JN_DICT:
        v = tkv__jv_dict(c, x->n_kids / 2);
        for (size_t i = 0; i + 1 < x->n_kids; i += 2) {
            tkv__jv key = eval(c, x->kids[i], f);
            tkv__jv_dict_set(c, v, key, eval(c, x->kids[i + 1], f));
        }
        break;
    case TKV__JN_GETATTR: {
        tkv__jv obj = eval(c, x->a, f);
        c->line = x->line;
        v = tkv__jinja_getattr(c, obj, x->value.u.str.p, x->value.u.str.n);
        break;
    }
    case TKV__JN_GETITEM: {
        tkv__jv obj = eval(c, x->a, f), key = eval(c, x->b, f);
        c->line = x->line;
        v = tkv__jinja_getitem(c, obj, key);
        break;
    }
    case TKV__JN_SLICE: {
        tkv__jv obj = eval(c, x->a, f), none = tkv__jv_none();
        tkv__jv a = x->b ? eval(c, x->b, f) : none, b = x->c ? eval(c, x->c, f) : none,
                s = x->d ? eval(c, x->d, f) : none;
        c->line = x->line;
        v = tkv__jinja_slice(c, obj, a, b, s);
        break;
    }
    case TKV__JN_CALL: v = eval_call(c, x, f, eval(c, x->a, f), NULL, NULL); break;
    case TKV__JN_FILTER: v = apply_filter(c, x, f, eval(c, x->a, f)); break;
    case TKV__JN_TEST: {
        tkv__jv obj = eval(c, x->a, f);
        size_t n = x->n_kids, nk = x->n_kw;
        tkv__jv *args = n ? tkv__jarena_alloc(c, n * sizeof *args) : NULL;
        tkv__jv *names = nk ? tkv__jarena_alloc(c, nk * sizeof *names) : NULL;
        tkv__jv *vals = nk ? tkv__jarena_alloc(c, nk * sizeof *vals) : NULL;
        for (size_t i = 0; i < n; i++) args[i] = eval(c, x->kids[i], f);
        for (size_t i = 0; i < nk; i++) {
            names[i] = x->kw[i]->value;
            vals[i] = eval(c, x->kw[i]->a, f);
        }
        tkv__jargs a = {.v = args, .n = n, .kw_names = names, .kw = vals, .n_kw = nk};
        bool r;
        c->line = x->line;
        if (!tkv__jinja_test(c, x->value.u.str.p, x->value.u.str.n, obj, &a, &r))
            tkv__jraise(c, TKV_ERR_INVALID, "no test named '%.*s'", (int)x->value.u.str.n, x->value.u.str.p);
        v = tkv__jv_bool(x->op ? !r : r);
        break;
    }
    case TKV__JN_BINOP: {
        tkv__jv a = eval(c, x->a, f), b = eval(c, x->b, f);
        c->line = x->line;
        v = tkv__jinja_binop(c, x->op, a, b);
        break;
    }
    case TKV__JN_NEG:
    case TKV__JN_POS: {
        tkv__jv a = eval(c, x->a, f);
        need_defined(c, a);
        if (!tkv__jv_is_num(a))
            tkv__jraise(c, TKV_ERR_INVALID, "bad operand type for unary %c: '%s'", x->kind == TKV__JN_NEG ? '-' : '+',
                        tkv__jv_type_name(a));
        if (a.type == TKV__JV_FLOAT) v = tkv__jv_float(x->kind == TKV__JN_NEG ? -a.u.f : a.u.f);
        else v = tkv__jinja_binop(c, x->kind == TKV__JN_NEG ? TKV__JOP_SUB : TKV__JOP_ADD, tkv__jv_int(0), a);
        break;
    }
    case TKV__JN_NOT: v = tkv__jv_bool(!tkv__jv_truthy(eval(c, x->a, f))); break;
    case TKV__JN_AND: {
        tkv__jv a = eval(c, x->a, f);
        v = tkv__jv_truthy(a) ? eval(c, x->b, f) : a;
        break;
    }
    case TKV__JN_OR: {
        tkv__jv a = eval(c, x->a, f);
        v = tkv__jv_truthy(a) ? a : eval(c, x->b, f);
        break;
    }
    case TKV__JN_COMPARE: {
        tkv__jv a = eval(c, x->kids[0], f);
        v = tkv__jv_bool(true);
        for (size_t i = 1; i < x->n_kids; i++) {
            tkv__jv b = eval(c, x->kids[i], f);
            c->line = x->line;
            if (!tkv__jinja_compare(c, x->ops[i - 1], a, b)) {
                v = tkv__jv_bool(false);
                break;
            }
            a = b;
        }
        break;
    }
    case TKV__JN_COND:
        if (tkv__jv_truthy(eval(c, x->a, f))) v = eval(c, x->b, f);
        else v = x->c ? eval(c, x->c, f) : tkv__jv_undef(NULL);
        break;
    default: tkv__jraise(c, TKV_ERR_INVALID, "not an expression");
    }
    c->depth--;
    return v;
}

/* ---- statements ---- */

static void assign(tkv__jctx *c, const tkv__jnode *target, tkv__jframe *f, tkv__jv v) {
    if (target->kind == TKV__JN_NAME) {
        frame_set(c, f, target->value, v);
        return;
    }
    if (target->kind == TKV__JN_GETATTR) {
        tkv__jv ns = lookup(c, f, target->a->value);
        if (ns.type != TKV__JV_DICT || !(ns.flags & TKV__JV_NAMESPACE))
            tkv__jraise(c, TKV_ERR_INVALID, "cannot assign attribute on non-namespace object");
        tkv__jv_dict_set(c, ns, target->value, v);
        return;
    }
    /* a tuple of targets: unpack */
    tkv__jlist items;
    if (v.type == TKV__JV_LIST || v.type == TKV__JV_STR || (v.type == TKV__JV_DICT && !(v.flags & TKV__JV_NAMESPACE)))
        items = tkv__jinja_iter(c, v);
    else
        tkv__jraise(c, TKV_ERR_INVALID, "cannot unpack non-iterable %s object", tkv__jv_type_name(v));
    if (items.n != target->n_kids)
        tkv__jraise(c, TKV_ERR_INVALID, "%s values to unpack (expected %zu, got %zu)",
                    items.n > target->n_kids ? "too many" : "not enough", target->n_kids, items.n);
    for (size_t i = 0; i < items.n; i++) assign(c, target->kids[i], f, items.items[i]);
}

static void print_value(tkv__jctx *c, tkv__jv v) {
    tkv__jv_write_str(c, c->out, v);
}

static tkv__jv capture(tkv__jctx *c, const tkv__jnode *body, tkv__jframe *f) {
    tkv__jbuf *saved = c->out, buf = {0};
    c->out = &buf;
    exec(c, body, f);
    c->out = saved;
    return tkv__jbuf_value(&buf);
}

static int run_loop(tkv__jctx *c, const tkv__jnode *x, tkv__jframe *f, tkv__jloop *l) {
    tkv__jv lv = {.type = TKV__JV_LOOP};
    lv.u.loop = l;
    tkv__jframe *g = NULL;
    for (size_t i = 0; i < l->items.n; i++) {
        l->i = i;
        g = frame_next(c, g, f);
        frame_set(c, g, tkv__jv_cstr("loop"), lv);
        c->line = x->line;
        assign(c, x->a, g, loop_item(l, i));
        if (exec(c, x->d, g) == FLOW_BREAK) break;
    }
    if (!l->items.n && x->e) return exec(c, x->e, f);
    return FLOW_NORMAL;
}

/* `range(...)` calling the global range (not a variable of that name)? Then a loop need not make its list. */
static bool is_range_call(tkv__jctx *c, const tkv__jnode *x, tkv__jframe *f) {
    if (x->kind != TKV__JN_CALL || x->a->kind != TKV__JN_NAME || x->a->value.u.str.n != 5 ||
        memcmp(x->a->value.u.str.p, "range", 5))
        return false;
    tkv__jv fn = lookup(c, f, x->a->value);
    return fn.type == TKV__JV_FUNC && fn.u.fn->kind == TKV__JF_GLOBAL && fn.u.fn->id == 0;
}

static tkv__jloop *loop_new(tkv__jctx *c, const tkv__jnode *x, tkv__jframe *f, int depth) {
    tkv__jloop *l = tkv__jarena_alloc(c, sizeof *l);
    memset(l, 0, sizeof *l);
    l->last_changed = tkv__jv_undef(NULL);
    l->node = x;
    l->frame = f;
    l->depth = depth;
    return l;
}

/* The items of seq a loop sees: with `for x in xs if cond`, only those that pass. */
static tkv__jlist loop_items(tkv__jctx *c, const tkv__jnode *x, tkv__jframe *f, tkv__jv seq) {
    tkv__jlist items = tkv__jinja_iter(c, seq);
    if (!x->c) return items;
    tkv__jlist kept = {.items = items.n ? tkv__jarena_alloc(c, items.n * sizeof(tkv__jv)) : NULL};
    tkv__jframe *g = NULL;
    for (size_t i = 0; i < items.n; i++) {
        g = frame_next(c, g, f);
        assign(c, x->a, g, items.items[i]);
        if (tkv__jv_truthy(eval(c, x->c, g))) kept.items[kept.n++] = items.items[i];
    }
    return kept;
}

/* loop(xs) in a recursive loop: the loop's body over xs, one level deeper, as a string. */
static tkv__jv loop_again(tkv__jctx *c, tkv__jloop *outer, tkv__jv seq) {
    if (!(outer->node->op & 1)) tkv__jraise(c, TKV_ERR_INVALID, "the loop is not recursive: loop() needs 'recursive'");
    tkv__jloop *l = loop_new(c, outer->node, outer->frame, outer->depth + 1);
    l->items = loop_items(c, outer->node, outer->frame, seq);
    tkv__jbuf *saved = c->out, buf = {0};
    c->out = &buf;
    run_loop(c, outer->node, outer->frame, l);
    c->out = saved;
    return tkv__jbuf_value(&buf);
}

static int exec_for(tkv__jctx *c, const tkv__jnode *x, tkv__jframe *f) {
    tkv__jloop *l = loop_new(c, x, f, 1);
    tkv__jlist items;
    if (!x->c && is_range_call(c, x->b, f)) {
        /* for i in range(n): the items are made one at a time (a loop over earlier messages per message is
           common, and its lists would take memory quadratic in the conversation) */
        const tkv__jnode *call = x->b;
        tkv__jv *args = call->n_kids ? tkv__jarena_alloc(c, call->n_kids * sizeof *args) : NULL;
        for (size_t i = 0; i < call->n_kids; i++) args[i] = eval(c, call->kids[i], f);
        tkv__jargs a = {.v = args, .n = call->n_kids, .n_kw = call->n_kw};
        c->line = x->line;
        if (call->n_kw) tkv__jraise(c, TKV_ERR_INVALID, "range() takes no keyword arguments");
        items.items = NULL;
        items.n = tkv__jrange(c, &a, &l->start, &l->step);
        l->items = items;
        return run_loop(c, x, f, l);
    }
    tkv__jv seq = eval(c, x->b, f);
    c->line = x->line;
    l->items = loop_items(c, x, f, seq);
    return run_loop(c, x, f, l);
}

static int exec(tkv__jctx *c, const tkv__jnode *x, tkv__jframe *f) {
    enter(c, x->line);
    int flow = FLOW_NORMAL;
    switch (x->kind) {
    case TKV__JN_BODY:
        for (size_t i = 0; i < x->n_kids && flow == FLOW_NORMAL; i++) flow = exec(c, x->kids[i], f);
        break;
    case TKV__JN_TEXT: tkv__jbuf_add(c, c->out, x->value.u.str.p, x->value.u.str.n); break;
    case TKV__JN_PRINT: print_value(c, eval(c, x->a, f)); break;
    case TKV__JN_IF: {
        /* down the elif chain in a loop, not a level deeper per elif */
        const tkv__jnode *y = x;
        while (y && y->kind == TKV__JN_IF && !tkv__jv_truthy(eval(c, y->a, f))) {
            y = y->c;
            tkv__jstep(c, 1);
        }
        if (y) flow = exec(c, y->kind == TKV__JN_IF ? y->b : y, f);
        break;
    }
    case TKV__JN_FOR: flow = exec_for(c, x, f); break;
    case TKV__JN_SET: {
        tkv__jv v = eval(c, x->b, f);
        c->line = x->line;
        assign(c, x->a, f, v);
        break;
    }
    case TKV__JN_SETBLOCK: {
        tkv__jv v = capture(c, x->b, f);
        v = apply_chain(c, x->c, f, v);
        c->line = x->line;
        assign(c, x->a, f, v);
        break;
    }
    case TKV__JN_MACRO: {
        tkv__jv fv = {.type = TKV__JV_FUNC};
        fv.u.fn = tkv__jarena_alloc(c, sizeof *fv.u.fn);
        memset(fv.u.fn, 0, sizeof *fv.u.fn);
        fv.u.fn->kind = TKV__JF_MACRO;
        fv.u.fn->macro = x;
        fv.u.fn->closure = f;
        f->captured = true;
        frame_set(c, f, x->value, fv);
        break;
    }
    case TKV__JN_CALLBLOCK: {
        tkv__jv caller = {.type = TKV__JV_FUNC};
        caller.u.fn = tkv__jarena_alloc(c, sizeof *caller.u.fn);
        memset(caller.u.fn, 0, sizeof *caller.u.fn);
        caller.u.fn->kind = TKV__JF_MACRO;
        caller.u.fn->macro = x->b;
        caller.u.fn->closure = f;
        f->captured = true;
        tkv__jv name = tkv__jv_cstr("caller");
        print_value(c, eval_call(c, x->a, f, eval(c, x->a->a, f), &name, &caller));
        break;
    }
    case TKV__JN_FILTERBLOCK: print_value(c, apply_chain(c, x->a, f, capture(c, x->b, f))); break;
    case TKV__JN_BREAK: flow = FLOW_BREAK; break;
    case TKV__JN_CONTINUE: flow = FLOW_CONTINUE; break;
    case TKV__JN_DO: eval(c, x->a, f); break;
    case TKV__JN_WITH: {
        /* the values are computed in the outer scope, then bound in the inner one */
        tkv__jframe *g = frame_new(c, f);
        tkv__jv *vals = x->n_kids ? tkv__jarena_alloc(c, x->n_kids * sizeof *vals) : NULL;
        for (size_t i = 0; i < x->n_kids; i++) vals[i] = eval(c, x->kids[i]->b, f);
        for (size_t i = 0; i < x->n_kids; i++) assign(c, x->kids[i]->a, g, vals[i]);
        flow = exec(c, x->a, g);
        break;
    }
    default: tkv__jraise(c, TKV_ERR_INVALID, "not a statement");
    }
    c->depth--;
    return flow;
}

/* ---- the API ---- */

tkv_status tkv__jinja_parse(const char *tmpl, size_t tmpl_len, tkv__jinja_template **out) {
    *out = NULL;
    tkv__jinja_template *t = tkv__calloc(1, sizeof *t);
    if (!t) return tkv__fail(TKV_ERR_NOMEM, "out of memory parsing a template");
    tkv__jctx *c = &t->parse;
    c->line = 1;
    if (setjmp(c->fail)) {
        tkv_status st = c->status;
        tkv__fail(st, "%s", c->msg);
        tkv__jinja_free(t);
        return st;
    }
    /* Jinja2 reads "\r\n" and "\r" as "\n" and drops one newline at the very end */
    char *src = tkv__jarena_alloc(c, tmpl_len + 1);
    size_t n = 0;
    for (size_t i = 0; i < tmpl_len; i++) {
        if (tmpl[i] == '\r') {
            src[n++] = '\n';
            if (i + 1 < tmpl_len && tmpl[i + 1] == '\n') i++;
        } else {
            src[n++] = tmpl[i];
        }
    }
    if (n && src[n - 1] == '\n') n--;
    src[n] = 0;
    tkv__jtok *toks;
    size_t n_toks;
    tkv__jinja_lex(c, src, n, &toks, &n_toks);
    t->root = tkv__jinja_parse_tokens(c, toks, n_toks);
    *out = t;
    return TKV_OK;
}

void tkv__jinja_free(tkv__jinja_template *t) {
    if (!t) return;
    tkv__jarena_free(&t->parse.arena);
    tkv__free(t);
}

static void parse_now(tkv__jctx *c, const char *now) {
    c->now_y = 1970;
    c->now_m = 1;
    c->now_d = 1;
    if (!now) return;
    int y, m, d;
    char tail;
    static const int days[] = {31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    if (sscanf(now, "%4d-%2d-%2d%c", &y, &m, &d, &tail) != 3 || m < 1 || m > 12 || d < 1 || d > days[m - 1] ||
        y < 1 || (m == 2 && d == 29 && !((y % 4 == 0 && y % 100 != 0) || y % 400 == 0)))
        tkv__jraise(c, TKV_ERR_INVALID, "the date for strftime_now is not YYYY-MM-DD: '%.40s'", now);
    c->now_y = y;
    c->now_m = m;
    c->now_d = d;
}

tkv_status tkv__jinja_render_with(const tkv__jinja_template *t, const char *context_json,
                                  const tkv__jinja_options *opts, char **out, size_t *out_len) {
    *out = NULL;
    *out_len = 0;
    tkv__jctx *c = tkv__calloc(1, sizeof *c);
    if (!c) return tkv__fail(TKV_ERR_NOMEM, "out of memory rendering a template");
    c->arena.limit = TKV__JINJA_MAX_MEMORY;
    c->line = 0;
    if (setjmp(c->fail)) {
        tkv_status st = c->status;
        tkv__fail(st, "%s", c->msg);
        tkv__jarena_free(&c->arena);
        tkv__free(c);
        return st;
    }
    parse_now(c, opts ? opts->now : NULL);
    tkv__jv vars = tkv__jv_dict(c, 32);
    tkv__jinja_add_globals(c, vars);
    if (context_json && *context_json) {
        tkv__jv ctx;
        tkv__jv_from_json(c, context_json, &ctx);
        if (ctx.type != TKV__JV_DICT) tkv__jraise(c, TKV_ERR_INVALID, "the template's context is not a JSON object");
        for (size_t i = 0; i < ctx.u.dict->n; i++) tkv__jv_dict_set(c, vars, ctx.u.dict->keys[i], ctx.u.dict->vals[i]);
    }
    tkv__jframe *root = frame_new(c, NULL);
    root->vars = vars;
    tkv__jbuf buf = {0};
    c->out = &buf;
    exec(c, t->root, root);
    char *text = tkv__malloc(buf.n + 1);
    if (!text) tkv__jraise(c, TKV_ERR_NOMEM, "out of memory");
    if (buf.n) memcpy(text, buf.p, buf.n);
    text[buf.n] = 0;
    *out = text;
    *out_len = buf.n;
    tkv__jarena_free(&c->arena);
    tkv__free(c);
    return TKV_OK;
}

tkv_status tkv__jinja_render(const char *tmpl, size_t tmpl_len, const char *context_json,
                             const tkv__jinja_options *opts, char **out, size_t *out_len) {
    *out = NULL;
    *out_len = 0;
    tkv__jinja_template *t;
    tkv_status st = tkv__jinja_parse(tmpl, tmpl_len, &t);
    if (st != TKV_OK) return st;
    st = tkv__jinja_render_with(t, context_json, opts, out, out_len);
    tkv__jinja_free(t);
    return st;
}
