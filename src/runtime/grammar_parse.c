/*
 * grammar_parse.c — GBNF text to flat rules (grammar.h).
 *
 * The dialect is llama.cpp's (grammars/README.md there): `name ::= alts`,
 * a rule ends at a newline outside parentheses (a newline is also allowed
 * right after `::=` and after `|`), `#` comments to the end of the line.
 * Repetitions are rewritten as llama.cpp rewrites them, so the same text
 * gives the same language:
 *   S*      ->  R        R ::= S R |
 *   S+      ->  S R      R ::= S R |
 *   S?      ->  R        R ::= S |
 *   S{m,n}  ->  S..S (m times) R(n-m),  R(k) ::= S R(k-1) |,  R(1) ::= S |
 *   S{m,}   ->  S..S (m times) R,       R ::= S R |
 * Unlike llama.cpp, a count over TKV__GBNF_MAX_REPEAT is an error (it would
 * otherwise silently mean "no maximum"), and so are `[]` and a range whose
 * end precedes its start. Token references (<...>, <[id]>) are not part of
 * this dialect yet.
 */
#include "grammar.h"

#include "base/alloc.h"
#include "base/error.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct ebuf {
    tkv__gel *v;
    size_t n, cap;
} ebuf;

typedef struct rdef {
    ebuf body;
    bool defined, helper;
    size_t name, name_len; /* in the text; helper rules: their owner's name */
    size_t first_ref;      /* where it is first referenced (for "undefined") */
    size_t def;            /* where it is defined */
} rdef;

typedef struct parser {
    const char *s;
    size_t len, pos;
    rdef *rules;
    size_t n_rules, cap_rules;
    tkv__gclass *cls;
    size_t n_cls, cap_cls;
    uint32_t (*rng)[2];
    size_t n_rng, cap_rng;
    uint32_t *names; /* (cap_names) open addressing: named rule ids, UINT32_MAX empty */
    size_t n_names, cap_names;
    size_t n_pushed; /* elements ever pushed: the size limit */
    int depth;
    size_t owner; /* the named rule being parsed */
    bool failed;
    tkv_status st;
} parser;

/* ---- errors ---------------------------------------------------------------- */

static void where(const parser *p, size_t pos, size_t *line, size_t *col) {
    *line = 1, *col = 1;
    for (size_t i = 0; i < pos && i < p->len; i++) {
        if (p->s[i] == '\n') (*line)++, *col = 1;
        else if (((uint8_t)p->s[i] & 0xC0) != 0x80) (*col)++; /* count characters, not bytes */
    }
}

static bool fail_at(parser *p, size_t pos, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static bool fail_at(parser *p, size_t pos, const char *fmt, ...) {
    if (p->failed) return false;
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    size_t line, col;
    where(p, pos, &line, &col);
    p->failed = true;
    p->st = tkv__fail(TKV_ERR_INVALID, "grammar line %zu column %zu: %s", line, col, msg);
    return false;
}

static bool nomem(parser *p) {
    if (!p->failed) p->st = tkv__fail(TKV_ERR_NOMEM, "out of memory compiling the grammar");
    p->failed = true;
    return false;
}

/* What is at pos, for messages: a quoted character or "the end". */
static const char *what(const parser *p, size_t pos, char buf[16]) {
    if (pos >= p->len) return "the end of the grammar";
    uint8_t c = (uint8_t)p->s[pos];
    if (c == '\n' || c == '\r') return "the end of the line";
    if (c >= 0x20 && c < 0x7F) snprintf(buf, 16, "'%c'", c);
    else snprintf(buf, 16, "byte 0x%02X", c);
    return buf;
}

/* ---- growth ---------------------------------------------------------------- */

static bool grow(parser *p, void **v, size_t *cap, size_t need, size_t size) {
    if (need <= *cap) return true;
    size_t c = *cap ? *cap : 8;
    while (c < need) c *= 2;
    void *n = tkv__realloc(*v, c * size);
    if (!n) return nomem(p);
    *v = n, *cap = c;
    return true;
}

static bool push(parser *p, ebuf *b, uint8_t type, uint32_t value) {
    if (++p->n_pushed > TKV__GBNF_MAX_ELEMENTS)
        return fail_at(p, p->pos, "the grammar is too large (over %u elements once repetitions are expanded)",
                       TKV__GBNF_MAX_ELEMENTS);
    if (!grow(p, (void **)&b->v, &b->cap, b->n + 1, sizeof *b->v)) return false;
    b->v[b->n++] = (tkv__gel){type, value};
    return true;
}

/* A new rule id (undefined); name/name_len: its name in the text. */
static bool new_rule(parser *p, size_t name, size_t name_len, uint32_t *id) {
    *id = 0;
    if (p->n_rules >= TKV__GBNF_MAX_RULES)
        return fail_at(p, p->pos, "the grammar is too large (over %u rules)", TKV__GBNF_MAX_RULES);
    if (!grow(p, (void **)&p->rules, &p->cap_rules, p->n_rules + 1, sizeof *p->rules)) return false;
    p->rules[p->n_rules] = (rdef){.name = name, .name_len = name_len, .first_ref = name, .def = p->pos};
    *id = (uint32_t)p->n_rules++;
    return true;
}

static bool add_class(parser *p, uint32_t (*r)[2], size_t n, bool negated, uint32_t *id) {
    *id = 0;
    if (!grow(p, (void **)&p->cls, &p->cap_cls, p->n_cls + 1, sizeof *p->cls) ||
        !grow(p, (void **)&p->rng, &p->cap_rng, p->n_rng + n, sizeof *p->rng))
        return false;
    if (n) memcpy(p->rng + p->n_rng, r, n * sizeof *r);
    p->cls[p->n_cls] = (tkv__gclass){(uint32_t)p->n_rng, (uint32_t)n, negated};
    p->n_rng += n;
    *id = (uint32_t)p->n_cls++;
    return true;
}

/* ---- lexing ---------------------------------------------------------------- */

static bool is_word(int c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-';
}

static int peek(const parser *p) { return p->pos < p->len ? (uint8_t)p->s[p->pos] : -1; }

static void space(parser *p, bool newline_ok) {
    while (p->pos < p->len) {
        char c = p->s[p->pos];
        if (c == ' ' || c == '\t' || (newline_ok && (c == '\r' || c == '\n'))) p->pos++;
        else if (c == '#')
            while (p->pos < p->len && p->s[p->pos] != '\r' && p->s[p->pos] != '\n') p->pos++;
        else break;
    }
}

static bool hex(parser *p, int digits, uint32_t *out) {
    size_t start = p->pos;
    uint32_t v = 0;
    for (int i = 0; i < digits; i++) {
        int c = peek(p), d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
                                                      : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0) return fail_at(p, start, "expecting %d hex digits after the escape", digits);
        v = v << 4 | (uint32_t)d;
        p->pos++;
    }
    *out = v;
    return true;
}

/* One character of a literal or a class: an escape or a UTF-8 character. */
static bool character(parser *p, uint32_t *out) {
    size_t start = p->pos;
    if (p->pos >= p->len) return fail_at(p, start, "unexpected end of the grammar");
    uint8_t c = (uint8_t)p->s[p->pos++];
    if (c == '\\') {
        int e = peek(p);
        p->pos++;
        switch (e) {
        case 'x': return hex(p, 2, out);
        case 'u': return hex(p, 4, out);
        case 'U': return hex(p, 8, out);
        case 't': *out = '\t'; return true;
        case 'r': *out = '\r'; return true;
        case 'n': *out = '\n'; return true;
        case '\\': case '"': case '[': case ']': *out = (uint32_t)e; return true;
        default:
            return fail_at(p, start, "unknown escape (known: \\n \\t \\r \\\\ \\\" \\[ \\] \\xHH \\uHHHH \\UHHHHHHHH)");
        }
    }
    int n = c < 0x80 ? 0 : (c & 0xE0) == 0xC0 ? 1 : (c & 0xF0) == 0xE0 ? 2 : (c & 0xF8) == 0xF0 ? 3 : -1;
    if (n < 0) return fail_at(p, start, "invalid UTF-8");
    uint32_t v = n == 0 ? c : c & (0x3Fu >> n);
    for (int i = 0; i < n; i++) {
        int d = peek(p);
        if (d < 0 || (d & 0xC0) != 0x80) return fail_at(p, start, "invalid UTF-8");
        v = v << 6 | (uint32_t)(d & 0x3F);
        p->pos++;
    }
    *out = v;
    return true;
}

static int by_lo(const void *a, const void *b) {
    const uint32_t *x = a, *y = b;
    return x[0] < y[0] ? -1 : x[0] > y[0];
}

/* ---- the grammar of grammars ----------------------------------------------- */

static bool alternates(parser *p, ebuf *b, bool nested);

static bool literal(parser *p, ebuf *b) {
    p->pos++; /* the quote */
    while (peek(p) != '"') {
        uint32_t c, id, r[1][2];
        if (!character(p, &c)) return false;
        r[0][0] = r[0][1] = c;
        if (!add_class(p, r, 1, false, &id) || !push(p, b, TKV__GEL_CLASS, id)) return false;
    }
    p->pos++;
    return true;
}

static bool char_class(parser *p, ebuf *b) {
    size_t start = p->pos++;
    bool negated = peek(p) == '^';
    if (negated) p->pos++;
    uint32_t(*r)[2] = NULL;
    size_t n = 0, cap = 0;
    while (peek(p) != ']') {
        uint32_t lo, hi;
        size_t at = p->pos;
        if (!character(p, &lo)) goto out;
        hi = lo;
        if (peek(p) == '-' && p->pos + 1 < p->len && p->s[p->pos + 1] != ']') {
            p->pos++;
            if (!character(p, &hi)) goto out;
            if (hi < lo) {
                fail_at(p, at, "character range ends before it starts");
                goto out;
            }
        }
        if (!grow(p, (void **)&r, &cap, n + 1, sizeof *r)) goto out;
        r[n][0] = lo, r[n][1] = hi, n++;
    }
    p->pos++;
    if (!n) {
        fail_at(p, start, "empty character class");
        goto out;
    }
    qsort(r, n, sizeof *r, by_lo);
    size_t m = 0; /* merge overlapping and adjacent ranges: the matcher's binary search wants them disjoint */
    for (size_t i = 1; i < n; i++) {
        if (r[i][0] <= r[m][1] || r[i][0] - 1 == r[m][1]) {
            if (r[i][1] > r[m][1]) r[m][1] = r[i][1];
        } else {
            m++;
            r[m][0] = r[i][0], r[m][1] = r[i][1];
        }
    }
    uint32_t id;
    if (add_class(p, r, m + 1, negated, &id)) push(p, b, TKV__GEL_CLASS, id);
out:
    tkv__free(r);
    return !p->failed;
}

static uint32_t name_hash(const char *s, size_t n) {
    uint32_t h = 2166136261u; /* FNV-1a */
    for (size_t i = 0; i < n; i++) h = (h ^ (uint8_t)s[i]) * 16777619u;
    return h;
}

/* The slot of name text[name .. name+n) in p->names: its rule's, or the empty one where it goes. */
static size_t name_slot(const parser *p, size_t name, size_t n) {
    size_t i = name_hash(p->s + name, n) & (p->cap_names - 1);
    for (; p->names[i] != UINT32_MAX; i = (i + 1) & (p->cap_names - 1)) {
        const rdef *r = &p->rules[p->names[i]];
        if (r->name_len == n && !memcmp(p->s + r->name, p->s + name, n)) break;
    }
    return i;
}

/* The rule named text[name .. name+n): its id, created undefined when new. */
static bool reference(parser *p, size_t name, size_t n, uint32_t *id) {
    if (2 * (p->n_names + 1) > p->cap_names) { /* grow the name table */
        size_t cap = p->cap_names ? 2 * p->cap_names : 64;
        uint32_t *old = p->names, *t = tkv__malloc(cap * sizeof *t);
        if (!t) return nomem(p);
        memset(t, 0xFF, cap * sizeof *t);
        const size_t old_cap = p->cap_names;
        p->names = t, p->cap_names = cap;
        for (size_t i = 0; i < old_cap; i++)
            if (old[i] != UINT32_MAX) {
                const rdef *r = &p->rules[old[i]];
                t[name_slot(p, r->name, r->name_len)] = old[i];
            }
        tkv__free(old);
    }
    const size_t slot = name_slot(p, name, n);
    if (p->names[slot] != UINT32_MAX) {
        *id = p->names[slot];
        return true;
    }
    if (!new_rule(p, name, n, id)) return false;
    p->names[slot] = *id;
    p->n_names++;
    return true;
}

/* A helper rule (group or repetition) owned by the named rule being parsed. */
static bool helper(parser *p, size_t at, uint32_t *id) {
    const rdef *o = &p->rules[p->owner];
    if (!new_rule(p, o->name, o->name_len, id)) return false;
    p->rules[*id].helper = true;
    p->rules[*id].def = at;
    return true;
}

static bool append(parser *p, ebuf *b, const tkv__gel *v, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!push(p, b, v[i].type, v[i].value)) return false;
    return true;
}

/* Rewrite b[last ..] as repeated min..max times (max UINT32_MAX: no maximum); see the header comment. */
static bool repeat(parser *p, ebuf *b, size_t last, size_t at, uint32_t min, uint32_t max) {
    if (last == b->n) return fail_at(p, at, "nothing before '%c' to repeat", p->s[at]);
    const size_t n = b->n - last;
    tkv__gel *prev = tkv__malloc(n * sizeof *prev);
    if (!prev) return nomem(p);
    memcpy(prev, b->v + last, n * sizeof *prev);
    bool ok = true;
    if (min == 0) b->n = last;
    for (uint32_t i = 1; ok && i < min; i++) ok = append(p, b, prev, n);
    const bool no_max = max == UINT32_MAX;
    const uint32_t n_opt = no_max ? 1 : max - min;
    uint32_t last_rec = 0;
    for (uint32_t i = 0; ok && i < n_opt; i++) {
        uint32_t id;
        ebuf body = {0};
        ok = helper(p, at, &id) && append(p, &body, prev, n) &&
             (!(i > 0 || no_max) || push(p, &body, TKV__GEL_REF, no_max ? id : last_rec)) &&
             push(p, &body, TKV__GEL_ALT, 0) && push(p, &body, TKV__GEL_END, 0);
        if (!ok) {
            tkv__free(body.v);
            break;
        }
        p->rules[id].body = body;
        p->rules[id].defined = true;
        last_rec = id;
    }
    if (ok && n_opt > 0) ok = push(p, b, TKV__GEL_REF, last_rec);
    tkv__free(prev);
    return ok;
}

static bool count(parser *p, uint32_t *out) {
    size_t at = p->pos;
    uint64_t v = 0;
    if (peek(p) < '0' || peek(p) > '9')
        return fail_at(p, at, "expecting a number, found %s", what(p, at, (char[16]){0}));
    while (peek(p) >= '0' && peek(p) <= '9') {
        v = v * 10 + (uint64_t)(peek(p) - '0');
        if (v > TKV__GBNF_MAX_REPEAT)
            return fail_at(p, at, "repetition count over %u", TKV__GBNF_MAX_REPEAT);
        p->pos++;
    }
    *out = (uint32_t)v;
    return true;
}

/* {m}, {m,}, {m,n} */
static bool braces(parser *p, ebuf *b, size_t last, bool nested) {
    size_t at = p->pos++;
    uint32_t min, max = UINT32_MAX;
    space(p, nested);
    if (!count(p, &min)) return false;
    space(p, nested);
    if (peek(p) == '}') {
        max = min;
    } else if (peek(p) == ',') {
        p->pos++;
        space(p, nested);
        if (peek(p) >= '0' && peek(p) <= '9') {
            if (!count(p, &max)) return false;
            if (max < min) return fail_at(p, at, "repetition {%u,%u} with its maximum below its minimum", min, max);
            space(p, nested);
        }
        if (peek(p) != '}') return fail_at(p, p->pos, "expecting '}', found %s", what(p, p->pos, (char[16]){0}));
    } else {
        return fail_at(p, p->pos, "expecting ',' or '}', found %s", what(p, p->pos, (char[16]){0}));
    }
    p->pos++;
    space(p, nested);
    return repeat(p, b, last, at, min, max);
}

static bool sequence(parser *p, ebuf *b, bool nested) {
    size_t last = b->n; /* where the last item starts: what a repetition repeats */
    while (!p->failed) {
        const int c = peek(p);
        const size_t at = p->pos;
        if (c == '"') {
            last = b->n;
            if (!literal(p, b)) return false;
        } else if (c == '[') {
            last = b->n;
            if (!char_class(p, b)) return false;
        } else if (c >= 0 && is_word(c)) {
            while (peek(p) >= 0 && is_word(peek(p))) p->pos++;
            uint32_t id;
            last = b->n;
            if (!reference(p, at, p->pos - at, &id) || !push(p, b, TKV__GEL_REF, id)) return false;
        } else if (c == '(') {
            if (p->depth >= TKV__GBNF_MAX_NESTING)
                return fail_at(p, at, "parentheses nested deeper than %d", TKV__GBNF_MAX_NESTING);
            p->depth++;
            p->pos++;
            space(p, true);
            uint32_t id;
            ebuf sub = {0};
            if (!helper(p, at, &id) || !alternates(p, &sub, true)) {
                tkv__free(sub.v);
                return false;
            }
            p->rules[id].body = sub;
            p->rules[id].defined = true;
            if (peek(p) != ')') {
                size_t line, col;
                where(p, at, &line, &col);
                return fail_at(p, p->pos, "expecting ')' to close the '(' of line %zu column %zu, found %s", line, col,
                               what(p, p->pos, (char[16]){0}));
            }
            p->pos++;
            p->depth--;
            last = b->n;
            if (!push(p, b, TKV__GEL_REF, id)) return false;
        } else if (c == '.') {
            uint32_t id;
            p->pos++;
            last = b->n;
            if (!add_class(p, NULL, 0, true, &id) || !push(p, b, TKV__GEL_CLASS, id)) return false;
        } else if (c == '*' || c == '+' || c == '?') {
            p->pos++;
            space(p, nested);
            if (!repeat(p, b, last, at, c == '+', c == '?' ? 1 : UINT32_MAX)) return false;
            continue;
        } else if (c == '{') {
            if (!braces(p, b, last, nested)) return false;
            continue;
        } else {
            break;
        }
        space(p, nested);
    }
    return !p->failed;
}

static bool alternates(parser *p, ebuf *b, bool nested) {
    if (!sequence(p, b, nested)) return false;
    while (peek(p) == '|') {
        p->pos++;
        if (!push(p, b, TKV__GEL_ALT, 0)) return false;
        space(p, true);
        if (!sequence(p, b, nested)) return false;
    }
    return push(p, b, TKV__GEL_END, 0);
}

static bool rule(parser *p) {
    const size_t name = p->pos;
    while (peek(p) >= 0 && is_word(peek(p))) p->pos++;
    if (p->pos == name) return fail_at(p, name, "expecting a rule name, found %s", what(p, name, (char[16]){0}));
    const size_t n = p->pos - name;
    space(p, false);
    if (p->len - p->pos < 3 || memcmp(p->s + p->pos, "::=", 3))
        return fail_at(p, p->pos, "expecting '::=' after the rule name, found %s", what(p, p->pos, (char[16]){0}));
    p->pos += 3;
    space(p, true);
    uint32_t id;
    if (!reference(p, name, n, &id)) return false;
    p->owner = id;
    ebuf body = {0};
    if (!alternates(p, &body, false)) {
        tkv__free(body.v);
        return false;
    }
    rdef *r = &p->rules[id];
    tkv__free(r->body.v); /* a rule defined again: the last definition counts, as in llama.cpp */
    r->body = body;
    r->defined = true;
    r->def = name;
    const int c = peek(p);
    if (c == '\r') p->pos += p->pos + 1 < p->len && p->s[p->pos + 1] == '\n' ? 2 : 1;
    else if (c == '\n') p->pos++;
    else if (c >= 0)
        return fail_at(p, p->pos, "expecting the end of the rule (a newline) or '|', found %s",
                       what(p, p->pos, (char[16]){0}));
    space(p, true);
    return true;
}

/* ---- checks ---------------------------------------------------------------- */

/*
 * Which rules can match the empty text: an alternative of rule references
 * only is nullable once all of them are. A worklist over the references
 * makes it linear in the grammar (a fixed-point loop is quadratic on a
 * chain of rules each nullable through the one before).
 */
static bool find_nullable(const parser *p, bool *nul) {
    const size_t R = p->n_rules;
    size_t n_alt = 0, n_occ = 0;
    for (size_t r = 0; r < R; r++) {
        const tkv__gel *v = p->rules[r].body.v;
        for (size_t i = 0; i < p->rules[r].body.n; i++) {
            n_alt += v[i].type == TKV__GEL_ALT || v[i].type == TKV__GEL_END;
            n_occ += v[i].type == TKV__GEL_REF;
        }
    }
    uint32_t *alt_rule = tkv__malloc((n_alt + 1) * sizeof *alt_rule);
    int64_t *left = tkv__malloc((n_alt + 1) * sizeof *left); /* references not yet nullable; -1: has a class */
    size_t *occ_off = tkv__calloc(R + 2, sizeof *occ_off);
    uint32_t *occ = tkv__malloc((n_occ + 1) * sizeof *occ), *work = tkv__malloc((R + 1) * sizeof *work);
    bool ok = alt_rule && left && occ_off && occ && work;
    for (int pass = 0; ok && pass < 2; pass++) { /* count the occurrences per rule, then list them */
        size_t a = 0;
        for (size_t r = 0; r < R; r++) {
            const tkv__gel *v = p->rules[r].body.v;
            size_t start = 0;
            for (size_t i = 0; i < p->rules[r].body.n; i++) {
                if (v[i].type != TKV__GEL_ALT && v[i].type != TKV__GEL_END) continue;
                int64_t refs = 0;
                for (size_t k = start; k < i && refs >= 0; k++) refs = v[k].type == TKV__GEL_CLASS ? -1 : refs + 1;
                for (size_t k = start; refs > 0 && k < i; k++) {
                    if (pass == 0) occ_off[v[k].value + 1]++;
                    else occ[occ_off[v[k].value]++] = (uint32_t)a;
                }
                alt_rule[a] = (uint32_t)r, left[a] = refs;
                a++, start = i + 1;
            }
        }
        if (pass == 0)
            for (size_t r = 0; r < R; r++) occ_off[r + 1] += occ_off[r];
        else /* the fill advanced each start to the next one's: shift back */
            for (size_t r = R; r > 0; r--) occ_off[r] = occ_off[r - 1];
        if (pass) occ_off[0] = 0;
    }
    size_t top = 0;
    for (size_t a = 0; ok && a < n_alt; a++)
        if (left[a] == 0 && !nul[alt_rule[a]]) nul[alt_rule[a]] = true, work[top++] = alt_rule[a];
    while (ok && top) {
        const uint32_t r = work[--top];
        for (size_t k = occ_off[r]; k < occ_off[r + 1]; k++) {
            const uint32_t a = occ[k];
            if (--left[a] == 0 && !nul[alt_rule[a]]) nul[alt_rule[a]] = true, work[top++] = alt_rule[a];
        }
    }
    tkv__free(alt_rule), tkv__free(left), tkv__free(occ_off), tkv__free(occ), tkv__free(work);
    return ok;
}

/*
 * Left recursion (a rule that can reach itself without consuming text) would
 * make the matcher's expansion endless: find a cycle in the graph of "r can
 * start with s".
 */
static bool check_left_recursion(parser *p) {
    const size_t R = p->n_rules;
    bool *nul = tkv__calloc(R ? R : 1, sizeof *nul);
    size_t *off = tkv__calloc(R + 1, sizeof *off), n_edges = 0;
    uint32_t *edge = NULL, *stack = NULL, *cursor = NULL;
    uint8_t *color = NULL;
    bool ok = false;
    if (!nul || !off) goto out;
    if (!find_nullable(p, nul)) goto out;
    for (int pass = 0; pass < 2; pass++) { /* count the edges, then fill them */
        n_edges = 0;
        for (size_t r = 0; r < R; r++) {
            if (pass == 0) off[r] = n_edges;
            const tkv__gel *v = p->rules[r].body.v;
            bool open = true; /* still at the start of the alternative */
            for (size_t i = 0; v[i].type != TKV__GEL_END; i++) {
                if (v[i].type == TKV__GEL_ALT) open = true;
                else if (!open) continue;
                else if (v[i].type == TKV__GEL_CLASS) open = false;
                else if (v[i].type == TKV__GEL_REF) {
                    if (pass) edge[n_edges] = v[i].value;
                    n_edges++;
                    open = nul[v[i].value];
                }
            }
        }
        off[R] = n_edges;
        if (pass == 0 && !(edge = tkv__malloc((n_edges ? n_edges : 1) * sizeof *edge))) goto out;
    }
    color = tkv__calloc(R ? R : 1, 1);
    stack = tkv__malloc((R ? R : 1) * sizeof *stack);
    cursor = tkv__malloc((R ? R : 1) * sizeof *cursor);
    if (!color || !stack || !cursor) goto out;
    for (size_t s = 0; s < R; s++) {
        if (color[s]) continue;
        size_t top = 0;
        stack[top] = (uint32_t)s, cursor[top] = (uint32_t)off[s], color[s] = 1;
        while (top != SIZE_MAX) {
            const uint32_t r = stack[top];
            if (cursor[top] == off[r + 1]) {
                color[r] = 2;
                top--;
                continue;
            }
            const uint32_t t = edge[cursor[top]++];
            if (color[t] == 1) {
                const rdef *d = &p->rules[t];
                fail_at(p, d->def, "rule '%.*s' is left-recursive: it can reach itself without matching any text",
                        (int)d->name_len, p->s + d->name);
                ok = true; /* reported; not out of memory */
                goto out;
            }
            if (color[t] == 0) {
                top++;
                stack[top] = t, cursor[top] = (uint32_t)off[t], color[t] = 1;
            }
        }
    }
    ok = true;
out:
    tkv__free(nul), tkv__free(off), tkv__free(edge), tkv__free(color), tkv__free(stack), tkv__free(cursor);
    return ok ? !p->failed : nomem(p);
}

void tkv__gbnf_free(tkv__gbnf *g) {
    if (!g) return;
    tkv__free(g->el), tkv__free(g->rule_start), tkv__free(g->cls), tkv__free(g->rng);
    tkv__free(g);
}

tkv_status tkv__gbnf_compile(const char *text, size_t len, const char *root, tkv__gbnf **out) {
    if (!out || (!text && len)) return tkv__fail(TKV_ERR_INVALID, "tkv_grammar_create: NULL grammar text or output");
    *out = NULL;
    if (!root) root = "root";
    parser p = {.s = text ? text : "", .len = len};
    space(&p, true);
    while (!p.failed && p.pos < p.len) rule(&p);
    for (size_t i = 0; !p.failed && i < p.n_rules; i++)
        if (!p.rules[i].defined)
            fail_at(&p, p.rules[i].first_ref, "undefined rule '%.*s'", (int)p.rules[i].name_len,
                    p.s + p.rules[i].name);
    uint32_t start = 0;
    if (!p.failed) {
        size_t rn = strlen(root), i = 0;
        for (; i < p.n_rules; i++) /* by name: the root need not be in the text (nor the table) */
            if (!p.rules[i].helper && p.rules[i].name_len == rn && !memcmp(p.s + p.rules[i].name, root, rn)) break;
        if (i == p.n_rules) fail_at(&p, 0, "no rule named '%.*s' to start from", (int)(rn > 64 ? 64 : rn), root);
        start = (uint32_t)i;
    }
    if (!p.failed) check_left_recursion(&p);
    tkv__gbnf *g = NULL;
    if (!p.failed) {
        size_t n = 0;
        for (size_t i = 0; i < p.n_rules; i++) n += p.rules[i].body.n;
        g = tkv__calloc(1, sizeof *g);
        if (g) g->el = tkv__malloc(n * sizeof *g->el), g->rule_start = tkv__malloc(p.n_rules * sizeof *g->rule_start);
        if (!g || !g->el || !g->rule_start) {
            tkv__gbnf_free(g);
            g = NULL;
            nomem(&p);
        } else {
            for (size_t i = 0; i < p.n_rules; i++) {
                g->rule_start[i] = (uint32_t)g->n_el;
                memcpy(g->el + g->n_el, p.rules[i].body.v, p.rules[i].body.n * sizeof *g->el);
                g->n_el += p.rules[i].body.n;
            }
            g->n_rules = p.n_rules;
            g->cls = p.cls, g->n_cls = p.n_cls, p.cls = NULL;
            g->rng = p.rng, g->n_rng = p.n_rng, p.rng = NULL;
            g->root = start;
        }
    }
    for (size_t i = 0; i < p.n_rules; i++) tkv__free(p.rules[i].body.v);
    tkv__free(p.rules), tkv__free(p.cls), tkv__free(p.rng), tkv__free(p.names);
    if (p.failed) return p.st;
    *out = g;
    return TKV_OK;
}
