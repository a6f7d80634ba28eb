/*
 * text/jinja/parse.c — tokens to a syntax tree, with Jinja2's grammar (parser.py):
 * the same precedence (filters and `is` tests bind tighter than any
 * operator, `**` is left-associative, `not` below comparisons), the same
 * statements, and the same syntax errors where transformers would fail to
 * compile the template (`break` outside a loop, an unknown tag).
 */
#include "jinja.h"

#include <string.h>

typedef struct parser {
    tkv__jctx *c;
    const tkv__jtok *t;
    size_t n, i;
    int depth;      /* nesting of expressions and blocks, bounded */
    int loop_depth; /* for loops around the current statement (break/continue) */
} parser;

typedef struct nodevec {
    tkv__jnode **p;
    size_t n, cap;
} nodevec;

static void vec_push(parser *P, nodevec *v, tkv__jnode *x) {
    if (v->n == v->cap) {
        size_t cap = v->cap ? v->cap * 2 : 4;
        tkv__jnode **p = tkv__jarena_alloc(P->c, cap * sizeof *p);
        if (v->n) memcpy(p, v->p, v->n * sizeof *p);
        v->p = p;
        v->cap = cap;
    }
    v->p[v->n++] = x;
}

static const tkv__jtok *cur(parser *P) { return &P->t[P->i < P->n ? P->i : P->n - 1]; }
static const tkv__jtok *peek(parser *P, size_t k) { return &P->t[P->i + k < P->n ? P->i + k : P->n - 1]; }
static const tkv__jtok *next(parser *P) {
    const tkv__jtok *t = cur(P);
    if (P->i < P->n - 1) P->i++;
    return t;
}

static _Noreturn void fail(parser *P, const char *fmt, const char *arg) {
    P->c->line = cur(P)->line;
    tkv__jraise(P->c, TKV_ERR_FORMAT, fmt, arg);
}

static bool is_op(const tkv__jtok *t, const char *op) {
    return t->kind == TKV__JT_OP && t->n == strlen(op) && !memcmp(t->p, op, t->n);
}
static bool is_name(const tkv__jtok *t, const char *name) {
    return t->kind == TKV__JT_NAME && t->n == strlen(name) && !memcmp(t->p, name, t->n);
}
static bool accept_op(parser *P, const char *op) {
    if (!is_op(cur(P), op)) return false;
    next(P);
    return true;
}
static bool accept_name(parser *P, const char *name) {
    if (!is_name(cur(P), name)) return false;
    next(P);
    return true;
}

static const char *tok_desc(const tkv__jtok *t) {
    switch (t->kind) {
    case TKV__JT_BLOCK_END: return "end of statement block";
    case TKV__JT_VAR_END: return "end of print statement";
    case TKV__JT_EOF: return "end of template";
    case TKV__JT_STRING: return "string";
    case TKV__JT_INT: return "integer";
    case TKV__JT_FLOAT: return "float";
    case TKV__JT_NAME: return "name";
    default: return "token";
    }
}

static void expect_op(parser *P, const char *op) {
    if (!accept_op(P, op)) {
        P->c->line = cur(P)->line;
        tkv__jraise(P->c, TKV_ERR_FORMAT, "expected '%s', got %s", op, tok_desc(cur(P)));
    }
}
static const tkv__jtok *expect_name(parser *P) {
    if (cur(P)->kind != TKV__JT_NAME) fail(P, "expected a name, got %s", tok_desc(cur(P)));
    return next(P);
}
static void expect_kind(parser *P, int kind) {
    if (cur(P)->kind != kind)
        fail(P, "expected %s", kind == TKV__JT_BLOCK_END ? "end of statement block" : "end of print statement");
    next(P);
}

static tkv__jnode *node(parser *P, int kind, int line) {
    tkv__jnode *x = tkv__jarena_alloc(P->c, sizeof *x);
    memset(x, 0, sizeof *x);
    x->kind = (uint8_t)kind;
    x->line = line;
    return x;
}

static void enter(parser *P) {
    if (++P->depth > TKV__JINJA_MAX_DEPTH / 4) fail(P, "%s", "the template is nested too deeply");
}

static tkv__jnode *parse_expr(parser *P, bool with_condexpr);
static tkv__jnode *parse_tuple(parser *P, bool with_condexpr, bool explicit_only);
static tkv__jnode *parse_unary(parser *P, bool with_filter);
static tkv__jnode *parse_primary(parser *P);
static tkv__jnode *parse_postfix(parser *P, tkv__jnode *x);
static tkv__jnode *parse_filter_expr(parser *P, tkv__jnode *x);

/* (args, name=value, ...) after the '(' */
static void parse_call_args(parser *P, tkv__jnode *x) {
    nodevec args = {0}, kw = {0};
    expect_op(P, "(");
    while (!is_op(cur(P), ")")) {
        if (args.n || kw.n) expect_op(P, ",");
        if (is_op(cur(P), ")")) break;
        if (is_op(cur(P), "*") || is_op(cur(P), "**")) fail(P, "%s", "*args and **kwargs are not supported");
        if (cur(P)->kind == TKV__JT_NAME && is_op(peek(P, 1), "=")) {
            const tkv__jtok *name = next(P);
            next(P);
            tkv__jnode *v = parse_expr(P, true);
            tkv__jnode *k = node(P, TKV__JN_NAME, name->line);
            k->value = tkv__jv_str(name->p, name->n);
            k->a = v;
            vec_push(P, &kw, k);
        } else {
            if (kw.n) fail(P, "%s", "positional argument after a keyword argument");
            vec_push(P, &args, parse_expr(P, true));
        }
    }
    expect_op(P, ")");
    x->kids = args.p;
    x->n_kids = args.n;
    x->kw = kw.p;
    x->n_kw = kw.n;
}

static tkv__jnode *parse_filter(parser *P, tkv__jnode *x, bool start_inline) {
    while (is_op(cur(P), "|") || start_inline) {
        if (!start_inline) next(P);
        start_inline = false;
        const tkv__jtok *name = expect_name(P);
        tkv__jnode *f = node(P, TKV__JN_FILTER, name->line);
        tkv__jbuf b = {0};
        tkv__jbuf_add(P->c, &b, name->p, name->n);
        while (accept_op(P, ".")) {
            const tkv__jtok *more = expect_name(P);
            tkv__jbuf_addc(P->c, &b, '.');
            tkv__jbuf_add(P->c, &b, more->p, more->n);
        }
        f->value = tkv__jbuf_value(&b);
        f->a = x;
        if (is_op(cur(P), "(")) parse_call_args(P, f);
        x = f;
    }
    return x;
}

static tkv__jnode *parse_test(parser *P, tkv__jnode *x) {
    const tkv__jtok *is = next(P);
    bool negated = accept_name(P, "not");
    const tkv__jtok *name = expect_name(P);
    tkv__jnode *t = node(P, TKV__JN_TEST, is->line);
    t->value = tkv__jv_str(name->p, name->n);
    t->a = x;
    t->op = negated;
    const tkv__jtok *c = cur(P);
    if (is_op(c, "(")) {
        parse_call_args(P, t);
    } else if ((c->kind == TKV__JT_NAME || c->kind == TKV__JT_STRING || c->kind == TKV__JT_INT ||
                c->kind == TKV__JT_FLOAT || is_op(c, "[") || is_op(c, "{")) &&
               !is_name(c, "else") && !is_name(c, "or") && !is_name(c, "and")) {
        if (is_name(c, "is")) fail(P, "%s", "You cannot chain multiple tests with is");
        tkv__jnode *arg = parse_postfix(P, parse_primary(P));
        t->kids = tkv__jarena_alloc(P->c, sizeof *t->kids);
        t->kids[0] = arg;
        t->n_kids = 1;
    }
    return t;
}

static tkv__jnode *parse_filter_expr(parser *P, tkv__jnode *x) {
    for (;;) {
        if (is_op(cur(P), "|")) {
            x = parse_filter(P, x, false);
        } else if (is_name(cur(P), "is")) {
            x = parse_test(P, x);
        } else if (is_op(cur(P), "(")) {
            tkv__jnode *call = node(P, TKV__JN_CALL, cur(P)->line);
            call->a = x;
            parse_call_args(P, call);
            x = call;
        } else {
            return x;
        }
    }
}

static tkv__jnode *parse_subscript(parser *P, tkv__jnode *obj) {
    const tkv__jtok *open = next(P); /* '[' */
    tkv__jnode *parts[3] = {0};
    int k = 0;
    bool slice = false;
    for (;;) {
        if (!is_op(cur(P), ":") && !is_op(cur(P), "]") && !is_op(cur(P), ",")) parts[k] = parse_expr(P, true);
        if (k < 2 && accept_op(P, ":")) {
            slice = true;
            k++;
            continue;
        }
        break;
    }
    if (!slice && is_op(cur(P), ",")) {
        /* x[a, b] indexes with a tuple */
        tkv__jnode *tup = node(P, TKV__JN_TUPLE, open->line);
        nodevec items = {0};
        vec_push(P, &items, parts[0]);
        while (accept_op(P, ",")) {
            if (is_op(cur(P), "]")) break;
            vec_push(P, &items, parse_expr(P, true));
        }
        tup->kids = items.p;
        tup->n_kids = items.n;
        parts[0] = tup;
    }
    expect_op(P, "]");
    if (!slice) {
        if (!parts[0]) fail(P, "%s", "expected an index");
        tkv__jnode *x = node(P, TKV__JN_GETITEM, open->line);
        x->a = obj;
        x->b = parts[0];
        return x;
    }
    tkv__jnode *x = node(P, TKV__JN_SLICE, open->line);
    x->a = obj;
    x->b = parts[0];
    x->c = parts[1];
    x->d = parts[2];
    return x;
}

static tkv__jnode *parse_postfix(parser *P, tkv__jnode *x) {
    for (;;) {
        const tkv__jtok *t = cur(P);
        if (is_op(t, ".")) {
            next(P);
            const tkv__jtok *name = cur(P);
            if (name->kind == TKV__JT_NAME) {
                next(P);
                tkv__jnode *g = node(P, TKV__JN_GETATTR, t->line);
                g->a = x;
                g->value = tkv__jv_str(name->p, name->n);
                x = g;
            } else if (name->kind == TKV__JT_INT) {
                next(P);
                tkv__jnode *g = node(P, TKV__JN_GETITEM, t->line);
                g->a = x;
                g->b = node(P, TKV__JN_LITERAL, t->line);
                g->b->value = tkv__jv_int(name->i);
                x = g;
            } else {
                fail(P, "%s", "expected a name or number after '.'");
            }
        } else if (is_op(t, "[")) {
            x = parse_subscript(P, x);
        } else if (is_op(t, "(")) {
            tkv__jnode *call = node(P, TKV__JN_CALL, t->line);
            call->a = x;
            parse_call_args(P, call);
            x = call;
        } else {
            return x;
        }
    }
}

static tkv__jnode *parse_primary(parser *P) {
    const tkv__jtok *t = cur(P);
    tkv__jnode *x;
    if (t->kind == TKV__JT_NAME) {
        next(P);
        x = node(P, TKV__JN_LITERAL, t->line);
        if (is_name(t, "true") || is_name(t, "True")) {
            x->value = tkv__jv_bool(true);
        } else if (is_name(t, "false") || is_name(t, "False")) {
            x->value = tkv__jv_bool(false);
        } else if (is_name(t, "none") || is_name(t, "None")) {
            x->value = tkv__jv_none();
        } else {
            x->kind = TKV__JN_NAME;
            x->value = tkv__jv_str(t->p, t->n);
        }
        return x;
    }
    if (t->kind == TKV__JT_STRING) {
        next(P);
        x = node(P, TKV__JN_LITERAL, t->line);
        if (cur(P)->kind != TKV__JT_STRING) {
            x->value = tkv__jv_str(t->p, t->n);
            return x;
        }
        /* adjacent literals join, as in Python */
        tkv__jbuf b = {0};
        tkv__jbuf_add(P->c, &b, t->p, t->n);
        while (cur(P)->kind == TKV__JT_STRING) {
            const tkv__jtok *more = next(P);
            tkv__jbuf_add(P->c, &b, more->p, more->n);
        }
        x->value = tkv__jbuf_value(&b);
        return x;
    }
    if (t->kind == TKV__JT_INT || t->kind == TKV__JT_FLOAT) {
        next(P);
        x = node(P, TKV__JN_LITERAL, t->line);
        x->value = t->kind == TKV__JT_INT ? tkv__jv_int(t->i) : tkv__jv_float(t->f);
        return x;
    }
    if (is_op(t, "(")) {
        next(P);
        enter(P);
        x = parse_tuple(P, true, true);
        P->depth--;
        expect_op(P, ")");
        return x;
    }
    if (is_op(t, "[") || is_op(t, "{")) {
        bool dict = is_op(t, "{");
        next(P);
        enter(P);
        x = node(P, dict ? TKV__JN_DICT : TKV__JN_LIST, t->line);
        nodevec items = {0};
        const char *close = dict ? "}" : "]";
        while (!is_op(cur(P), close)) {
            if (items.n) expect_op(P, ",");
            if (is_op(cur(P), close)) break;
            vec_push(P, &items, parse_expr(P, true));
            if (dict) {
                expect_op(P, ":");
                vec_push(P, &items, parse_expr(P, true));
            }
        }
        expect_op(P, close);
        P->depth--;
        x->kids = items.p;
        x->n_kids = items.n;
        return x;
    }
    fail(P, "unexpected %s", tok_desc(t));
}

static tkv__jnode *parse_unary(parser *P, bool with_filter) {
    const tkv__jtok *t = cur(P);
    tkv__jnode *x;
    if (is_op(t, "-") || is_op(t, "+")) {
        next(P);
        enter(P);
        x = node(P, is_op(t, "-") ? TKV__JN_NEG : TKV__JN_POS, t->line);
        x->a = parse_unary(P, false);
        P->depth--;
    } else {
        x = parse_primary(P);
    }
    x = parse_postfix(P, x);
    if (with_filter) x = parse_filter_expr(P, x);
    return x;
}

static tkv__jnode *binop(parser *P, int op, tkv__jnode *a, tkv__jnode *b, int line) {
    tkv__jnode *x = node(P, TKV__JN_BINOP, line);
    x->op = (uint8_t)op;
    x->a = a;
    x->b = b;
    return x;
}

static tkv__jnode *parse_pow(parser *P) {
    tkv__jnode *x = parse_unary(P, true);
    while (is_op(cur(P), "**")) {
        int line = next(P)->line;
        x = binop(P, TKV__JOP_POW, x, parse_unary(P, true), line);
    }
    return x;
}

static tkv__jnode *parse_math2(parser *P) {
    tkv__jnode *x = parse_pow(P);
    for (;;) {
        const tkv__jtok *t = cur(P);
        int op = is_op(t, "*") ? TKV__JOP_MUL : is_op(t, "/") ? TKV__JOP_DIV : is_op(t, "//") ? TKV__JOP_FLOORDIV
                 : is_op(t, "%") ? TKV__JOP_MOD : -1;
        if (op < 0) return x;
        next(P);
        x = binop(P, op, x, parse_pow(P), t->line);
    }
}

static tkv__jnode *parse_concat(parser *P) {
    tkv__jnode *x = parse_math2(P);
    while (is_op(cur(P), "~")) {
        int line = next(P)->line;
        x = binop(P, TKV__JOP_CONCAT, x, parse_math2(P), line);
    }
    return x;
}

static tkv__jnode *parse_math1(parser *P) {
    tkv__jnode *x = parse_concat(P);
    for (;;) {
        const tkv__jtok *t = cur(P);
        int op = is_op(t, "+") ? TKV__JOP_ADD : is_op(t, "-") ? TKV__JOP_SUB : -1;
        if (op < 0) return x;
        next(P);
        x = binop(P, op, x, parse_concat(P), t->line);
    }
}

static tkv__jnode *parse_compare(parser *P) {
    int line = cur(P)->line;
    tkv__jnode *first = parse_math1(P);
    nodevec operands = {0};
    uint8_t ops[64];
    size_t n_ops = 0;
    for (;;) {
        const tkv__jtok *t = cur(P);
        int op = is_op(t, "==") ? TKV__JOP_EQ : is_op(t, "!=") ? TKV__JOP_NE : is_op(t, "<") ? TKV__JOP_LT
                 : is_op(t, "<=") ? TKV__JOP_LE : is_op(t, ">") ? TKV__JOP_GT : is_op(t, ">=") ? TKV__JOP_GE
                 : is_name(t, "in") ? TKV__JOP_IN
                 : is_name(t, "not") && is_name(peek(P, 1), "in") ? TKV__JOP_NOTIN : -1;
        if (op < 0) break;
        next(P);
        if (op == TKV__JOP_NOTIN) next(P);
        if (n_ops == sizeof ops) fail(P, "%s", "too many chained comparisons");
        if (!operands.n) vec_push(P, &operands, first);
        ops[n_ops++] = (uint8_t)op;
        vec_push(P, &operands, parse_math1(P));
    }
    if (!n_ops) return first;
    tkv__jnode *x = node(P, TKV__JN_COMPARE, line);
    x->kids = operands.p;
    x->n_kids = operands.n;
    x->ops = tkv__jarena_alloc(P->c, n_ops);
    memcpy(x->ops, ops, n_ops);
    return x;
}

static tkv__jnode *parse_not(parser *P) {
    if (is_name(cur(P), "not")) {
        int line = next(P)->line;
        enter(P);
        tkv__jnode *x = node(P, TKV__JN_NOT, line);
        x->a = parse_not(P);
        P->depth--;
        return x;
    }
    return parse_compare(P);
}

static tkv__jnode *parse_and(parser *P) {
    tkv__jnode *x = parse_not(P);
    while (is_name(cur(P), "and")) {
        int line = next(P)->line;
        tkv__jnode *y = node(P, TKV__JN_AND, line);
        y->a = x;
        y->b = parse_not(P);
        x = y;
    }
    return x;
}

static tkv__jnode *parse_or(parser *P) {
    tkv__jnode *x = parse_and(P);
    while (is_name(cur(P), "or")) {
        int line = next(P)->line;
        tkv__jnode *y = node(P, TKV__JN_OR, line);
        y->a = x;
        y->b = parse_and(P);
        x = y;
    }
    return x;
}

static tkv__jnode *parse_expr(parser *P, bool with_condexpr) {
    enter(P);
    tkv__jnode *x = parse_or(P);
    while (with_condexpr && is_name(cur(P), "if")) {
        int line = next(P)->line;
        tkv__jnode *y = node(P, TKV__JN_COND, line);
        y->a = parse_or(P);
        y->b = x;
        if (accept_name(P, "else")) y->c = parse_expr(P, true);
        x = y;
    }
    P->depth--;
    return x;
}

/* An expression or a tuple of them ("a, b"); explicit_only: inside parentheses, where "()" is the empty tuple. */
static tkv__jnode *parse_tuple(parser *P, bool with_condexpr, bool explicit_only) {
    int line = cur(P)->line;
    nodevec items = {0};
    bool comma = false;
    for (;;) {
        if (items.n) {
            if (!accept_op(P, ",")) break;
            comma = true;
        }
        const tkv__jtok *t = cur(P);
        if (t->kind == TKV__JT_BLOCK_END || t->kind == TKV__JT_VAR_END || is_op(t, ")") || is_name(t, "in") ||
            (items.n && is_name(t, "if")))
            break;
        vec_push(P, &items, parse_expr(P, with_condexpr));
    }
    if (!comma) {
        if (items.n == 1) return items.p[0];
        if (!explicit_only) fail(P, "expected an expression, got %s", tok_desc(cur(P)));
    }
    tkv__jnode *x = node(P, TKV__JN_TUPLE, line);
    x->kids = items.p;
    x->n_kids = items.n;
    return x;
}

/* The target of set/for: a name, ns.attr (set only), or names separated by commas. */
static tkv__jnode *parse_target(parser *P, bool with_namespace) {
    int line = cur(P)->line;
    nodevec items = {0};
    do {
        bool paren = accept_op(P, "(");
        const tkv__jtok *name = expect_name(P);
        tkv__jnode *x = node(P, TKV__JN_NAME, name->line);
        x->value = tkv__jv_str(name->p, name->n);
        if (with_namespace && is_op(cur(P), ".")) {
            next(P);
            const tkv__jtok *attr = expect_name(P);
            tkv__jnode *g = node(P, TKV__JN_GETATTR, name->line);
            g->a = x;
            g->value = tkv__jv_str(attr->p, attr->n);
            x = g;
        }
        if (paren) {
            /* (a, b) as a target: a nested tuple */
            nodevec inner = {0};
            vec_push(P, &inner, x);
            while (accept_op(P, ",")) {
                const tkv__jtok *more = expect_name(P);
                tkv__jnode *y = node(P, TKV__JN_NAME, more->line);
                y->value = tkv__jv_str(more->p, more->n);
                vec_push(P, &inner, y);
            }
            expect_op(P, ")");
            x = node(P, TKV__JN_TUPLE, name->line);
            x->kids = inner.p;
            x->n_kids = inner.n;
        }
        vec_push(P, &items, x);
    } while (accept_op(P, ","));
    if (items.n == 1) return items.p[0];
    tkv__jnode *x = node(P, TKV__JN_TUPLE, line);
    x->kids = items.p;
    x->n_kids = items.n;
    return x;
}

/* ---- statements ---- */

static tkv__jnode *parse_body(parser *P, const char *const *ends);

/* Where parse_body stopped: the name after "{%", one of its ends. */
static bool at_end(parser *P, const char *const *ends) {
    if (cur(P)->kind != TKV__JT_BLOCK_BEGIN) return false;
    const tkv__jtok *name = peek(P, 1);
    for (size_t k = 0; ends[k]; k++)
        if (is_name(name, ends[k])) return true;
    return false;
}

static void end_tag(parser *P, const char *name) {
    if (!accept_name(P, name)) fail(P, "expected '%s'", name);
    expect_kind(P, TKV__JT_BLOCK_END);
}

/* if / elif... / else: each elif is an IF in the c of the one before, made in a loop (chains can be long). */
static tkv__jnode *parse_if(parser *P, int line) {
    static const char *const ends[] = {"elif", "else", "endif", NULL};
    tkv__jnode *first = NULL, *last = NULL;
    do {
        tkv__jnode *x = node(P, TKV__JN_IF, line);
        x->a = parse_tuple(P, false, false);
        expect_kind(P, TKV__JT_BLOCK_END);
        x->b = parse_body(P, ends);
        if (last) last->c = x;
        else first = x;
        last = x;
        line = cur(P)->line;
    } while (accept_name(P, "elif"));
    if (accept_name(P, "else")) {
        static const char *const end_only[] = {"endif", NULL};
        expect_kind(P, TKV__JT_BLOCK_END);
        last->c = parse_body(P, end_only);
    }
    end_tag(P, "endif");
    return first;
}

static tkv__jnode *parse_for(parser *P, int line) {
    static const char *const ends[] = {"else", "endfor", NULL};
    static const char *const end_only[] = {"endfor", NULL};
    tkv__jnode *x = node(P, TKV__JN_FOR, line);
    x->a = parse_target(P, false);
    if (!accept_name(P, "in")) fail(P, "%s", "expected 'in'");
    x->b = parse_tuple(P, false, false);
    if (accept_name(P, "if")) x->c = parse_expr(P, true);
    if (accept_name(P, "recursive")) x->op = 1;
    expect_kind(P, TKV__JT_BLOCK_END);
    P->loop_depth++;
    x->d = parse_body(P, ends);
    P->loop_depth--;
    if (accept_name(P, "else")) {
        expect_kind(P, TKV__JT_BLOCK_END);
        x->e = parse_body(P, end_only);
    }
    end_tag(P, "endfor");
    return x;
}

/* (a, b=default, ...) of a macro or a call block */
static void parse_params(parser *P, tkv__jnode *x) {
    nodevec names = {0}, defaults = {0};
    expect_op(P, "(");
    while (!is_op(cur(P), ")")) {
        if (names.n) expect_op(P, ",");
        if (is_op(cur(P), ")")) break;
        const tkv__jtok *name = expect_name(P);
        tkv__jnode *p = node(P, TKV__JN_NAME, name->line);
        p->value = tkv__jv_str(name->p, name->n);
        if (accept_op(P, "=")) {
            p->a = parse_expr(P, true);
        } else if (defaults.n) {
            fail(P, "%s", "non-default argument follows default argument");
        }
        if (p->a) vec_push(P, &defaults, p);
        vec_push(P, &names, p);
    }
    expect_op(P, ")");
    x->kw = names.p;
    x->n_kw = names.n;
}

/* Does the tree x read the variable `name`? (Keyword names and attribute names are not variables.) */
static bool reads(const tkv__jnode *x, const char *name, int depth) {
    if (!x || depth > 2 * TKV__JINJA_MAX_DEPTH) return false;
    size_t n = strlen(name);
    if (x->kind == TKV__JN_NAME && x->value.u.str.n == n && !memcmp(x->value.u.str.p, name, n)) return true;
    const tkv__jnode *sub[] = {x->a, x->b, x->c, x->d, x->e};
    for (size_t i = 0; i < 5; i++)
        if (reads(sub[i], name, depth + 1)) return true;
    for (size_t i = 0; i < x->n_kids; i++)
        if (reads(x->kids[i], name, depth + 1)) return true;
    for (size_t i = 0; i < x->n_kw; i++)
        if (reads(x->kw[i]->a, name, depth + 1)) return true;
    return false;
}

/* A macro takes extra arguments only when its body reads varargs / kwargs / caller, as in Jinja2. */
static void macro_uses(tkv__jnode *m) {
    m->op = (uint8_t)((reads(m->a, "varargs", 0) ? TKV__JMACRO_VARARGS : 0) |
                      (reads(m->a, "kwargs", 0) ? TKV__JMACRO_KWARGS : 0) |
                      (reads(m->a, "caller", 0) ? TKV__JMACRO_CALLER : 0));
}

static tkv__jnode *parse_macro(parser *P, int line) {
    static const char *const ends[] = {"endmacro", NULL};
    tkv__jnode *x = node(P, TKV__JN_MACRO, line);
    const tkv__jtok *name = expect_name(P);
    x->value = tkv__jv_str(name->p, name->n);
    parse_params(P, x);
    expect_kind(P, TKV__JT_BLOCK_END);
    int loops = P->loop_depth;
    P->loop_depth = 0;
    x->a = parse_body(P, ends);
    P->loop_depth = loops;
    end_tag(P, "endmacro");
    macro_uses(x);
    return x;
}

static tkv__jnode *parse_statement(parser *P) {
    const tkv__jtok *begin = next(P); /* BLOCK_BEGIN */
    (void)begin;
    const tkv__jtok *kw = cur(P);
    int line = kw->line;
    P->c->line = line;
    if (kw->kind != TKV__JT_NAME) fail(P, "%s", "expected a statement name");
    next(P);
    enter(P);
    tkv__jnode *x;
    if (is_name(kw, "if")) {
        x = parse_if(P, line);
    } else if (is_name(kw, "for")) {
        x = parse_for(P, line);
    } else if (is_name(kw, "set")) {
        tkv__jnode *target = parse_target(P, true);
        if (accept_op(P, "=")) {
            x = node(P, TKV__JN_SET, line);
            x->a = target;
            x->b = parse_tuple(P, true, false);
            expect_kind(P, TKV__JT_BLOCK_END);
        } else {
            static const char *const ends[] = {"endset", NULL};
            x = node(P, TKV__JN_SETBLOCK, line);
            x->a = target;
            if (is_op(cur(P), "|")) x->c = parse_filter(P, NULL, false);
            expect_kind(P, TKV__JT_BLOCK_END);
            x->b = parse_body(P, ends);
            end_tag(P, "endset");
        }
    } else if (is_name(kw, "macro")) {
        x = parse_macro(P, line);
    } else if (is_name(kw, "call")) {
        static const char *const ends[] = {"endcall", NULL};
        x = node(P, TKV__JN_CALLBLOCK, line);
        tkv__jnode *caller = node(P, TKV__JN_MACRO, line);
        caller->value = tkv__jv_cstr("caller");
        if (is_op(cur(P), "(")) parse_params(P, caller);
        x->a = parse_expr(P, true);
        if (x->a->kind != TKV__JN_CALL) fail(P, "%s", "expected a call");
        expect_kind(P, TKV__JT_BLOCK_END);
        int loops = P->loop_depth;
        P->loop_depth = 0;
        caller->a = parse_body(P, ends);
        P->loop_depth = loops;
        macro_uses(caller);
        x->b = caller;
        end_tag(P, "endcall");
    } else if (is_name(kw, "filter")) {
        static const char *const ends[] = {"endfilter", NULL};
        x = node(P, TKV__JN_FILTERBLOCK, line);
        x->a = parse_filter(P, NULL, true);
        expect_kind(P, TKV__JT_BLOCK_END);
        x->b = parse_body(P, ends);
        end_tag(P, "endfilter");
    } else if (is_name(kw, "break") || is_name(kw, "continue")) {
        if (!P->loop_depth) fail(P, "'%s' outside of a loop", is_name(kw, "break") ? "break" : "continue");
        x = node(P, is_name(kw, "break") ? TKV__JN_BREAK : TKV__JN_CONTINUE, line);
        expect_kind(P, TKV__JT_BLOCK_END);
    } else if (is_name(kw, "do")) {
        x = node(P, TKV__JN_DO, line);
        x->a = parse_tuple(P, true, false);
        expect_kind(P, TKV__JT_BLOCK_END);
    } else if (is_name(kw, "with")) {
        /* {% with a = 1, b = x %}...{% endwith %}: a scope of its own */
        static const char *const ends[] = {"endwith", NULL};
        x = node(P, TKV__JN_WITH, line);
        nodevec sets = {0};
        while (cur(P)->kind != TKV__JT_BLOCK_END) {
            if (sets.n) expect_op(P, ",");
            tkv__jnode *set = node(P, TKV__JN_SET, cur(P)->line);
            set->a = parse_target(P, false);
            expect_op(P, "=");
            set->b = parse_expr(P, true);
            vec_push(P, &sets, set);
        }
        expect_kind(P, TKV__JT_BLOCK_END);
        x->kids = sets.p;
        x->n_kids = sets.n;
        x->a = parse_body(P, ends);
        end_tag(P, "endwith");
    } else if (is_name(kw, "generation")) {
        static const char *const ends[] = {"endgeneration", NULL};
        expect_kind(P, TKV__JT_BLOCK_END);
        x = parse_body(P, ends);
        end_tag(P, "endgeneration");
    } else {
        P->c->line = line;
        tkv__jraise(P->c, TKV_ERR_FORMAT, "unknown or unexpected tag '%.*s'", (int)kw->n, kw->p);
    }
    P->depth--;
    return x;
}

static tkv__jnode *parse_body(parser *P, const char *const *ends) {
    tkv__jnode *body = node(P, TKV__JN_BODY, cur(P)->line);
    nodevec kids = {0};
    for (;;) {
        const tkv__jtok *t = cur(P);
        if (t->kind == TKV__JT_EOF) {
            if (ends) fail(P, "unexpected end of template, expected '%s'", ends[0]);
            break;
        }
        if (ends && at_end(P, ends)) {
            next(P); /* leave the end's name current */
            break;
        }
        if (t->kind == TKV__JT_DATA) {
            next(P);
            tkv__jnode *x = node(P, TKV__JN_TEXT, t->line);
            x->value = tkv__jv_str(t->p, t->n);
            vec_push(P, &kids, x);
        } else if (t->kind == TKV__JT_VAR_BEGIN) {
            next(P);
            tkv__jnode *x = node(P, TKV__JN_PRINT, t->line);
            x->a = parse_tuple(P, true, false);
            expect_kind(P, TKV__JT_VAR_END);
            vec_push(P, &kids, x);
        } else if (t->kind == TKV__JT_BLOCK_BEGIN) {
            vec_push(P, &kids, parse_statement(P));
        } else {
            fail(P, "unexpected %s", tok_desc(t));
        }
    }
    body->kids = kids.p;
    body->n_kids = kids.n;
    return body;
}

tkv__jnode *tkv__jinja_parse_tokens(tkv__jctx *c, const tkv__jtok *toks, size_t n_toks) {
    parser P = {.c = c, .t = toks, .n = n_toks};
    return parse_body(&P, NULL);
}
