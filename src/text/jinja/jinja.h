/*
 * text/jinja/jinja.h — a Jinja renderer for Hugging Face chat templates.
 *
 * It renders as transformers' `apply_chat_template` does: Python Jinja2's
 * ImmutableSandboxedEnvironment with trim_blocks and lstrip_blocks, the
 * loopcontrols extension (break, continue), `{% do %}`, `{% generation %}`,
 * the globals raise_exception and strftime_now, and transformers' `tojson`
 * (json.dumps, no HTML escaping). Values print as Python's str() of them.
 *
 * A template is parsed once (tkv__jinja_parse) and rendered any number of
 * times, by any number of threads at once (rendering only reads it). Every
 * render is bounded (TKV__JINJA_MAX_*): a template never crashes, hangs or
 * grows without limit; it fails with a message naming the template line.
 * At its deepest (TKV__JINJA_MAX_DEPTH) a render uses about 0.5 MiB of stack.
 *
 * The caller chooses the variables. transformers passes `messages`, `tools`
 * (none when absent), `documents` (none when absent), `add_generation_prompt`,
 * the special tokens that exist (an absent one stays undefined, not empty)
 * and any extra keyword arguments (`enable_thinking`, `reasoning_effort`...).
 *
 * The first part is the API; the rest is shared by the renderer's own files
 * (jinja_*.c) and is nobody else's business.
 */
#ifndef TKV_JINJA_H
#define TKV_JINJA_H

#include "tokenkv_types.h"

#include <setjmp.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- the API --------------------------------------------------------------------------------------------------- */

/*
 * Limits of one render (and of parsing, for the nesting depth). A step is about 40 ns of work: evaluating one
 * expression or statement, one item a filter handles, 32 bytes a search compares.
 */
#define TKV__JINJA_MAX_OUTPUT (16u << 20)     /* bytes of output */
#define TKV__JINJA_MAX_MEMORY (256u << 20)    /* bytes of values made while rendering */
#define TKV__JINJA_MAX_STEPS 50000000L        /* expressions, statements, items handled by filters (~2 s) */
#define TKV__JINJA_MAX_DEPTH 400              /* nested evaluation: syntax nesting plus macro calls */
#define TKV__JINJA_MAX_RANGE 100000           /* items of range() (Jinja2's sandbox limit) */

typedef struct tkv__jinja_template tkv__jinja_template;

typedef struct tkv__jinja_options {
    /* The date strftime_now() formats, "YYYY-MM-DD" (time of day 00:00:00); NULL: 1970-01-01. */
    const char *now;
} tkv__jinja_options;

/*
 * Parse a template (tmpl_len bytes, need not be NUL-terminated) into *out.
 * Errors: TKV_ERR_FORMAT for a syntax error ("template line N: ..."),
 * TKV_ERR_NOMEM. The template copies what it needs from tmpl; free it with
 * tkv__jinja_free. *out is NULL on failure.
 */
tkv_status tkv__jinja_parse(const char *tmpl, size_t tmpl_len, tkv__jinja_template **out);

/* Free a parsed template; NULL is a no-op. */
void tkv__jinja_free(tkv__jinja_template *t);

/*
 * Render t with the variables of context_json (a JSON object whose keys are
 * the template's variables; NULL or "" for none). On success *out is a
 * NUL-terminated buffer of *out_len bytes (the text may itself hold NULs)
 * that the caller frees with tkv__free. opts may be NULL.
 * Errors: TKV_ERR_INVALID when context_json is not a JSON object, or when
 * the template raises (raise_exception, an undefined value used, a type
 * error, a limit reached) with "template line N: ..." as the message;
 * TKV_ERR_NOMEM. *out is NULL and *out_len 0 on failure.
 */
tkv_status tkv__jinja_render_with(const tkv__jinja_template *t, const char *context_json,
                                  const tkv__jinja_options *opts, char **out, size_t *out_len);

/* Parse and render in one call: tkv__jinja_parse then tkv__jinja_render_with, with their errors. */
tkv_status tkv__jinja_render(const char *tmpl, size_t tmpl_len, const char *context_json,
                             const tkv__jinja_options *opts, char **out, size_t *out_len);

/* ---- between the renderer's files -------------------------------------------------------------------------------- */

/* Values: what Python objects the templates see. Strings are UTF-8, not copied when they come from the template. */
typedef enum tkv__jv_type {
    TKV__JV_UNDEF, /* Jinja2's Undefined: u.str names what was missing (may be NULL) */
    TKV__JV_NONE,
    TKV__JV_BOOL,
    TKV__JV_INT,
    TKV__JV_FLOAT,
    TKV__JV_STR,
    TKV__JV_LIST, /* flags & TKV__JV_TUPLE: a tuple (prints as one) */
    TKV__JV_DICT, /* flags & TKV__JV_NAMESPACE: namespace(), the one mutable object */
    TKV__JV_FUNC,
    TKV__JV_LOOP,
} tkv__jv_type;

enum {
    TKV__JV_TUPLE = 1,
    TKV__JV_NAMESPACE = 2,
    TKV__JV_UNSAFE = 4, /* an Undefined that stands for a method the sandbox refuses */
    TKV__JV_MARKUP = 8, /* a str that is Markup (|safe, |escape): `+` escapes the other str */
    TKV__JV_GEN = 16,   /* a list that is a generator (|map, |select...): iterable, but no len, index or JSON */
    TKV__JV_GROW = 32,  /* a str or list made by concatenation, whose storage has room to grow (see text/jinja/value.c) */
};

typedef struct tkv__jlist tkv__jlist;
typedef struct tkv__jdict tkv__jdict;
typedef struct tkv__jfunc tkv__jfunc;
typedef struct tkv__jloop tkv__jloop;

typedef struct tkv__jv {
    uint8_t type;
    uint8_t flags;
    uint8_t origin; /* an Undefined for a missing attribute or item: 1 + the type of the object it was read from */
    union {
        bool b;
        int64_t i;
        double f;
        struct {
            const char *p;
            size_t n;
        } str;
        tkv__jlist *list;
        tkv__jdict *dict;
        tkv__jfunc *fn;
        tkv__jloop *loop;
    } u;
} tkv__jv;

struct tkv__jlist {
    size_t n;
    tkv__jv *items;
};

struct tkv__jdict {
    size_t n, cap;
    tkv__jv *keys, *vals;
};

/* Syntax tree. */
typedef enum tkv__jnode_kind {
    /* expressions */
    TKV__JN_LITERAL, TKV__JN_NAME, TKV__JN_LIST, TKV__JN_TUPLE, TKV__JN_DICT, TKV__JN_GETATTR, TKV__JN_GETITEM,
    TKV__JN_SLICE, TKV__JN_CALL, TKV__JN_FILTER, TKV__JN_TEST, TKV__JN_BINOP, TKV__JN_NEG, TKV__JN_POS, TKV__JN_NOT,
    TKV__JN_AND, TKV__JN_OR, TKV__JN_COMPARE, TKV__JN_COND,
    /* statements */
    TKV__JN_BODY, TKV__JN_TEXT, TKV__JN_PRINT, TKV__JN_IF, TKV__JN_FOR, TKV__JN_SET, TKV__JN_SETBLOCK, TKV__JN_MACRO,
    TKV__JN_CALLBLOCK, TKV__JN_FILTERBLOCK, TKV__JN_BREAK, TKV__JN_CONTINUE, TKV__JN_DO, TKV__JN_WITH,
} tkv__jnode_kind;

/* MACRO: what its body reads, so which extra arguments it takes (in its op). */
enum { TKV__JMACRO_VARARGS = 1, TKV__JMACRO_KWARGS = 2, TKV__JMACRO_CALLER = 4 };

/* Operators of BINOP and COMPARE. */
typedef enum tkv__jop {
    TKV__JOP_ADD, TKV__JOP_SUB, TKV__JOP_MUL, TKV__JOP_DIV, TKV__JOP_FLOORDIV, TKV__JOP_MOD, TKV__JOP_POW,
    TKV__JOP_CONCAT, TKV__JOP_EQ, TKV__JOP_NE, TKV__JOP_LT, TKV__JOP_LE, TKV__JOP_GT, TKV__JOP_GE, TKV__JOP_IN,
    TKV__JOP_NOTIN,
} tkv__jop;

typedef struct tkv__jnode tkv__jnode;
struct tkv__jnode {
    uint8_t kind;
    uint8_t op;  /* BINOP: tkv__jop; TEST: negated; MACRO: TKV__JMACRO_*; FOR: recursive */
    int line;
    tkv__jv value;       /* LITERAL; TEXT (a string); NAME, GETATTR, FILTER, TEST, MACRO, SET: the name */
    tkv__jnode *a, *b, *c; /* operands; IF: test, body, else; FOR: target, iter, filter; SET: target, value */
    tkv__jnode *d, *e;     /* FOR: body, else */
    tkv__jnode **kids;   /* LIST, TUPLE, DICT (key, value pairs), BODY, CALL/FILTER/TEST args, COMPARE operands */
    size_t n_kids;
    tkv__jnode **kw;     /* CALL/FILTER/TEST keyword arguments and MACRO defaults: kw[i]->value names them */
    size_t n_kw;
    uint8_t *ops;        /* COMPARE: n_kids - 1 operators */
};

/* An arena: what a template's tree or a render's values live in, freed at once. */
typedef struct tkv__jarena {
    struct tkv__jchunk *chunks;
    size_t used, limit; /* bytes taken from the allocator; limit 0: none */
} tkv__jarena;

/* The state of one parse or render: errors leave by longjmp to the entry point, whose arena frees everything. */
typedef struct tkv__jctx {
    tkv__jarena arena;
    jmp_buf fail;
    tkv_status status;
    char msg[512];
    int line;
    long steps;
    int depth;
    /* rendering */
    struct tkv__jbuf *out; /* where printing goes: the render's output, or a capture (macro, block set) */
    int now_y, now_m, now_d;
} tkv__jctx;

/*
 * Arena and errors (text/jinja/value.c). tkv__jarena_alloc: n bytes (16-aligned) that live until the arena is freed;
 * raises TKV_ERR_NOMEM, or TKV_ERR_INVALID past the arena's limit. tkv__jraise: records "template line N: ..."
 * (the current line; none when 0) and longjmps to c->fail. tkv__jstep: counts n steps, raises past the limit.
 */
void *tkv__jarena_alloc(tkv__jctx *c, size_t n);
void tkv__jarena_free(tkv__jarena *a);
_Noreturn void tkv__jraise(tkv__jctx *c, tkv_status st, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
void tkv__jstep(tkv__jctx *c, long n);

/*
 * Values (text/jinja/value.c). Constructors never fail, except those taking c (they allocate in its arena and may
 * raise). Strings are not copied unless the name says so: they must live as long as the render.
 */
tkv__jv tkv__jv_undef(const char *name); /* name: what was missing, for the message (NULL: unknown) */
tkv__jv tkv__jv_none(void);
tkv__jv tkv__jv_bool(bool b);
tkv__jv tkv__jv_int(int64_t i);
tkv__jv tkv__jv_float(double f);
tkv__jv tkv__jv_str(const char *p, size_t n);                  /* not copied */
tkv__jv tkv__jv_strdup(tkv__jctx *c, const char *p, size_t n); /* copied into the arena, NUL-terminated */
tkv__jv tkv__jv_cstr(const char *s);                           /* a static string */
tkv__jv tkv__jv_list(tkv__jctx *c, size_t n);                  /* n items, all none */
tkv__jv tkv__jv_dict(tkv__jctx *c, size_t cap);                /* empty, room for cap keys (it grows) */
void tkv__jv_dict_set(tkv__jctx *c, tkv__jv d, tkv__jv key, tkv__jv val); /* replaces, or appends in order */
tkv__jv *tkv__jv_dict_get(tkv__jv d, tkv__jv key);             /* the value's slot; NULL when absent */
tkv__jv *tkv__jv_dict_getn(tkv__jv d, const char *key, size_t n); /* the same for a string key */
bool tkv__jv_truthy(tkv__jv v);                                /* Python's bool(v) */
bool tkv__jv_equal(tkv__jv a, tkv__jv b);                      /* Python's a == b (1 == 1.0 == True) */
int tkv__jv_compare(tkv__jctx *c, tkv__jv a, tkv__jv b); /* Python's <, ==, > as -1, 0, 1; raises on mixed types */
const char *tkv__jv_type_name(tkv__jv v);                 /* Python's type name: 'str', 'dict', ... */
bool tkv__jv_is_num(tkv__jv v);                           /* int, float or bool */
double tkv__jv_num(tkv__jv v);                            /* a number's value as a double */

/* A growable string in the arena (zero-initialized is empty); raises past TKV__JINJA_MAX_OUTPUT. */
typedef struct tkv__jbuf {
    char *p; /* NUL-terminated once anything was added */
    size_t n, cap;
} tkv__jbuf;
void tkv__jbuf_add(tkv__jctx *c, tkv__jbuf *b, const char *s, size_t n);
void tkv__jbuf_addc(tkv__jctx *c, tkv__jbuf *b, char ch);
tkv__jv tkv__jbuf_value(tkv__jbuf *b); /* the text so far as a string value (sharing the buffer) */

void tkv__jv_write_str(tkv__jctx *c, tkv__jbuf *b, tkv__jv v);  /* Python's str(v) */
void tkv__jv_write_repr(tkv__jctx *c, tkv__jbuf *b, tkv__jv v, int depth); /* Python's repr(v) */
void tkv__jv_write_float(tkv__jbuf *b, tkv__jctx *c, double f); /* Python's repr of a float */
tkv__jv tkv__jv_to_str(tkv__jctx *c, tkv__jv v);                /* str(v) as a string value */
tkv__jv tkv__jescape(tkv__jctx *c, tkv__jv v);                  /* markupsafe.escape(str(v)), a Markup */
/* The first byte offset >= from where needle occurs in hay (both strs); SIZE_MAX when none. Charges steps. */
size_t tkv__jfind(tkv__jctx *c, tkv__jv hay, size_t from, tkv__jv needle);
/* a + b of two strs / two lists (the flags of a kept); amortized linear when a template accumulates in a loop */
tkv__jv tkv__jv_concat(tkv__jctx *c, tkv__jv a, tkv__jv b);

/* UTF-8 (text/jinja/value.c): a byte that does not start a valid sequence counts as one code point, itself. */
size_t tkv__utf8_len(const char *p, size_t n);               /* code points */
size_t tkv__utf8_offset(const char *p, size_t n, size_t cp); /* byte offset of code point cp (n when past) */
uint32_t tkv__utf8_decode(const char *p, size_t n, size_t *used); /* the code point at p (n > 0), its length */
size_t tkv__utf8_encode(uint32_t cp, char out[4]);           /* bytes written */
bool tkv__py_isspace(uint32_t cp);                           /* Python's str.isspace of one code point */

/* How tkv__jcase_map maps a code point (Python's one-code-point mappings). */
typedef enum tkv__jcase {
    TKV__JCASE_LOWER,
    TKV__JCASE_UPPER,
    TKV__JCASE_TITLE,
} tkv__jcase;

/* A code point's case class, as Python's isupper / islower / istitle see it. */
typedef enum tkv__jcase_kind {
    TKV__JKIND_NONE,
    TKV__JKIND_UPPER,
    TKV__JKIND_LOWER,
    TKV__JKIND_TITLE,
} tkv__jcase_kind;

/* Case (text/jinja/case.c): cp mapped as Python maps it as UTF-8 in out, its length; whether cp is a cased letter. */
size_t tkv__jcase_map(uint32_t cp, tkv__jcase mode, char out[16]);
bool tkv__jcase_cased(uint32_t cp);
/* The lower case of the capital sigma at bytes [at, after) of p, in the text [from, to): final (U+03C2) or not. */
uint32_t tkv__jcase_sigma(const char *p, size_t from, size_t at, size_t after, size_t to);
/* cp's case class: 1 upper (Python's isupper), 2 lower (islower), 3 title case, 0 none. */
tkv__jcase_kind tkv__jcase_class(uint32_t cp);
/* Python's s.isupper() (upper true) or s.islower(): a cased code point, and none of the other classes. */
bool tkv__jstr_is_case(tkv__jv s, bool upper);

/* JSON in and out (text/jinja/json.c). */
void tkv__jv_from_json(tkv__jctx *c, const char *json, tkv__jv *out); /* raises on malformed JSON */
/* json.dumps's arguments; {0} is json.dumps(v) with ensure_ascii off. */
typedef struct tkv__json_style {
    bool ensure_ascii;
    bool has_indent;             /* indent given: one item a line */
    const char *indent;          /* with has_indent: the text of one level */
    const char *item_sep, *key_sep; /* separators; NULL: "," (", " without indent) and ": " */
    bool sort_keys;
} tkv__json_style;

/* json.dumps(v, ...) appended to b; raises on what JSON lacks (undefined, a generator, a namespace). */
void tkv__jv_write_json(tkv__jctx *c, tkv__jbuf *b, tkv__jv v, const tkv__json_style *st);

/* Lexer and parser (text/jinja/lex.c, text/jinja/parse.c). */
typedef enum tkv__jtok_kind {
    TKV__JT_DATA, TKV__JT_BLOCK_BEGIN, TKV__JT_BLOCK_END, TKV__JT_VAR_BEGIN, TKV__JT_VAR_END, TKV__JT_NAME,
    TKV__JT_STRING, TKV__JT_INT, TKV__JT_FLOAT, TKV__JT_OP, TKV__JT_EOF,
} tkv__jtok_kind;

typedef struct tkv__jtok {
    uint8_t kind;
    int line;
    const char *p; /* DATA, NAME, OP: text; STRING: the decoded text */
    size_t n;
    int64_t i;
    double f;
} tkv__jtok;

/* Tokenize src (already normalized) into the arena; raises a syntax error. */
void tkv__jinja_lex(tkv__jctx *c, const char *src, size_t n, tkv__jtok **toks, size_t *n_toks);
/* Parse tokens into a BODY node; raises a syntax error. */
tkv__jnode *tkv__jinja_parse_tokens(tkv__jctx *c, const tkv__jtok *toks, size_t n_toks);

/*
 * Evaluation (text/jinja/eval.c). tkv__jinja_call: fn(args, kw_names=kw_vals) for a macro, method or global; raises
 * when fn is not callable. tkv__jinja_getattr / getitem: obj.name and obj[key] as the sandbox reads them (a
 * method before a key for `.`, a key before a method for `[]`; missing: undefined; on undefined obj: raises).
 */
tkv__jv tkv__jinja_call(tkv__jctx *c, tkv__jv fn, tkv__jv *args, size_t n_args, const tkv__jv *kw_names,
                        tkv__jv *kw_vals, size_t n_kw);
tkv__jv tkv__jinja_getattr(tkv__jctx *c, tkv__jv obj, const char *name, size_t n);
tkv__jv tkv__jinja_getitem(tkv__jctx *c, tkv__jv obj, tkv__jv key);
/*
 * Operators (text/jinja/ops.c): a op b for the arithmetic ops and ~ (tkv__jop), the comparisons and in / not in,
 * and obj[start:stop:step] (none for a part left out); each raises where Python raises.
 */
tkv__jv tkv__jinja_binop(tkv__jctx *c, int op, tkv__jv a, tkv__jv b);
tkv__jv tkv__jinja_add(tkv__jctx *c, tkv__jv a, tkv__jv b);
bool tkv__jinja_compare(tkv__jctx *c, int op, tkv__jv a, tkv__jv b);
tkv__jv tkv__jinja_slice(tkv__jctx *c, tkv__jv obj, tkv__jv start, tkv__jv stop, tkv__jv step);
/* Iterate v as a Python for loop does: a list of items in the arena; raises when v is not iterable. */
tkv__jlist tkv__jinja_iter(tkv__jctx *c, tkv__jv v);
/* Fail with the UndefinedError of u. */
_Noreturn void tkv__jundef_fail(tkv__jctx *c, tkv__jv u);

/* Filters, tests, methods, globals (text/jinja/filters.c, text/jinja/methods.c). */
typedef struct tkv__jargs {
    tkv__jv *v;
    size_t n;
    const tkv__jv *kw_names;
    tkv__jv *kw;
    size_t n_kw;
} tkv__jargs;
/*
 * Bind args to a signature: names[i] for position i (NULL-terminated); out[i] undefined when missing. Raises on
 * too many arguments or an unknown keyword; `what` names the callee in the message.
 */
void tkv__jbind(tkv__jctx *c, const char *what, const tkv__jargs *a, const char *const *names, tkv__jv *out);
/* Apply filter `name` to v (*out) / test v (*out); false when there is no such filter / test; raises as Jinja2. */
bool tkv__jinja_filter(tkv__jctx *c, const char *name, size_t n, tkv__jv v, const tkv__jargs *a, tkv__jv *out);
bool tkv__jinja_test(tkv__jctx *c, const char *name, size_t n, tkv__jv v, const tkv__jargs *a, bool *out);
/*
 * obj.name when obj is a str, dict or list and name is one of its methods (*out: the bound method, or, for one
 * the sandbox refuses, an undefined that raises when called); false otherwise.
 */
bool tkv__jinja_method(tkv__jctx *c, tkv__jv obj, const char *name, size_t n, tkv__jv *out);
/* Call a bound method / the global number id (the order of tkv__jinja_add_globals). */
tkv__jv tkv__jinja_call_method(tkv__jctx *c, tkv__jfunc *fn, const tkv__jargs *a);
tkv__jv tkv__jinja_call_global(tkv__jctx *c, int id, const tkv__jargs *a);
/* Python's str case methods (tkv__jstr_case). */
typedef enum tkv__jstr_case_op {
    TKV__JSTR_LOWER,
    TKV__JSTR_UPPER,
    TKV__JSTR_CAPITALIZE, /* the first code point title-cased, the rest lowered */
    TKV__JSTR_TITLE,
} tkv__jstr_case_op;

/* Python's str methods the filters share: case, strip (whitespace when chars is not a string), replace (count < 0:
 * all). */
tkv__jv tkv__jstr_case(tkv__jctx *c, tkv__jv s, tkv__jstr_case_op op);
/* Jinja2's title filter (not str.title): each item between runs of whitespace and -({[< upper-cased in its first
 * code point and lowered in the rest. */
tkv__jv tkv__jinja_title(tkv__jctx *c, tkv__jv s);
tkv__jv tkv__jstr_strip(tkv__jctx *c, tkv__jv s, tkv__jv chars, bool left, bool right);
tkv__jv tkv__jstr_replace(tkv__jctx *c, tkv__jv s, tkv__jv old, tkv__jv rep, int64_t count);
/* fmt % args, as Python formats a str (args: a tuple, a dict for %(name)s, or one value). */
tkv__jv tkv__jstr_percent(tkv__jctx *c, tkv__jv fmt, tkv__jv args);
/* range(args) as (start, step, count); raises on bad arguments or past TKV__JINJA_MAX_RANGE items. */
size_t tkv__jrange(tkv__jctx *c, const tkv__jargs *a, int64_t *start, int64_t *step);
/* The globals every render starts with, added to a dict. */
void tkv__jinja_add_globals(tkv__jctx *c, tkv__jv dict);

/* Callables. */
enum { TKV__JF_GLOBAL, TKV__JF_METHOD, TKV__JF_MACRO, TKV__JF_LOOPCYCLE, TKV__JF_LOOPCHANGED };
struct tkv__jfunc {
    int kind;
    int id;               /* GLOBAL: which; METHOD: which */
    tkv__jv self;         /* METHOD: the object */
    const tkv__jnode *macro;      /* MACRO: its MACRO node (a call block's caller() is one too) */
    struct tkv__jframe *closure;  /* MACRO: the scope it was defined in */
};

/* A for loop's state (loop.index...): its items, or, for `for x in range(...)`, the range's items unmade. */
struct tkv__jloop {
    tkv__jlist items; /* items.items NULL for a range: item i is start + i * step, of items.n */
    int64_t start, step;
    size_t i;
    tkv__jv last_changed; /* loop.changed(): the arguments of its last call (undefined before the first) */
    const tkv__jnode *node;      /* the FOR, which loop(xs) runs again when it is recursive */
    struct tkv__jframe *frame;   /* the scope around the loop */
    int depth;                   /* loop.depth: 1, and one more for each loop(xs) */
};

#endif
