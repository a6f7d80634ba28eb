/*
 * text/jinja/lex.c — splitting a template into text and the tokens of its tags.
 *
 * This follows Jinja2's lexer (lexer.py) rule for rule, because whitespace
 * is where renderers differ: `{%-`/`-%}` strip all whitespace on their side;
 * trim_blocks drops the one newline after `%}` and `#}`; lstrip_blocks drops
 * the spaces before `{%` and `{#` when only spaces precede them on their
 * line (or when the tag before ended the line), unless the tag opens with
 * `+`. Tag ends are recognised only outside brackets, so `{{ {'a': 1}}}`
 * works as in Jinja2.
 */
#include "jinja.h"

#include <stdlib.h>
#include <string.h>

typedef struct lexer {
    tkv__jctx *c;
    const char *s;
    size_t n, pos;
    int line;
    tkv__jtok *toks;
    size_t n_toks, cap;
} lexer;

static tkv__jtok *push(lexer *L, int kind, const char *p, size_t n) {
    if (L->n_toks == L->cap) {
        size_t cap = L->cap ? L->cap * 2 : 256;
        tkv__jtok *t = tkv__jarena_alloc(L->c, cap * sizeof *t);
        if (L->n_toks) memcpy(t, L->toks, L->n_toks * sizeof *t);
        L->toks = t;
        L->cap = cap;
    }
    tkv__jtok *t = &L->toks[L->n_toks++];
    memset(t, 0, sizeof *t);
    t->kind = (uint8_t)kind;
    t->line = L->line;
    t->p = p;
    t->n = n;
    return t;
}

static void count_lines(lexer *L, size_t from, size_t to) {
    for (size_t i = from; i < to; i++)
        if (L->s[i] == '\n') L->line++;
}

static bool is_ws(char ch) { return ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r' || ch == '\f' || ch == '\v'; }

/* After a tag's end marker at pos (just past it): `-` ate all whitespace, else trim_blocks eats one newline. */
static size_t after_end(lexer *L, size_t pos, char sign, bool block) {
    if (sign == '-') {
        while (pos < L->n && is_ws(L->s[pos])) pos++;
    } else if (sign != '+' && block && pos < L->n && L->s[pos] == '\n') {
        pos++;
    }
    return pos;
}

/* The tag start "{%" / "{{" / "{#" at or after pos, or n. */
static size_t find_tag(const lexer *L, size_t pos) {
    for (size_t i = pos; i + 1 < L->n; i++)
        if (L->s[i] == '{' && (L->s[i + 1] == '%' || L->s[i + 1] == '{' || L->s[i + 1] == '#')) return i;
    return L->n;
}

/* Emit the text before a tag, with the tag's effect on it. */
static void emit_data(lexer *L, size_t from, size_t to, char kind, char sign, bool line_starting) {
    size_t end = to;
    if (sign == '-') {
        while (end > from && is_ws(L->s[end - 1])) end--;
    } else if (sign != '+' && kind != '{') {
        size_t l = end;
        while (l > from && L->s[l - 1] != '\n') l--;
        bool nl = l > from;
        if (nl || line_starting) {
            bool blank = true;
            for (size_t i = l; i < end; i++)
                if (!is_ws(L->s[i])) blank = false;
            if (blank) end = l;
        }
    }
    if (end > from) push(L, TKV__JT_DATA, L->s + from, end - from)->line = L->line;
    count_lines(L, from, to);
}

/* Python's unicode_escape of a string literal's body. */
static void lex_string(lexer *L, size_t start, size_t end, tkv__jtok *t) {
    tkv__jbuf b = {0};
    const char *s = L->s;
    for (size_t i = start; i < end; i++) {
        char ch = s[i];
        if (ch != '\\' || i + 1 >= end) {
            tkv__jbuf_addc(L->c, &b, ch);
            continue;
        }
        char e = s[++i];
        char u[4];
        switch (e) {
        case 'n': tkv__jbuf_addc(L->c, &b, '\n'); break;
        case 't': tkv__jbuf_addc(L->c, &b, '\t'); break;
        case 'r': tkv__jbuf_addc(L->c, &b, '\r'); break;
        case 'b': tkv__jbuf_addc(L->c, &b, '\b'); break;
        case 'f': tkv__jbuf_addc(L->c, &b, '\f'); break;
        case 'v': tkv__jbuf_addc(L->c, &b, '\v'); break;
        case 'a': tkv__jbuf_addc(L->c, &b, '\a'); break;
        case '\\': tkv__jbuf_addc(L->c, &b, '\\'); break;
        case '\'': tkv__jbuf_addc(L->c, &b, '\''); break;
        case '"': tkv__jbuf_addc(L->c, &b, '"'); break;
        case '\n': break;
        case 'x':
        case 'u':
        case 'U': {
            size_t want = e == 'x' ? 2 : e == 'u' ? 4 : 8;
            uint32_t cp = 0;
            for (size_t k = 0; k < want; k++) {
                char h = i + 1 + k < end ? s[i + 1 + k] : 0;
                int d = h >= '0' && h <= '9' ? h - '0' : h >= 'a' && h <= 'f' ? h - 'a' + 10
                        : h >= 'A' && h <= 'F' ? h - 'A' + 10 : -1;
                if (d < 0) {
                    L->line = t->line;
                    tkv__jraise(L->c, TKV_ERR_FORMAT, "truncated \\%c escape in a string", e);
                }
                cp = cp << 4 | (uint32_t)d;
            }
            if (cp > 0x10ffff) tkv__jraise(L->c, TKV_ERR_FORMAT, "illegal Unicode character in a string");
            i += want;
            tkv__jbuf_add(L->c, &b, u, tkv__utf8_encode(cp, u));
            break;
        }
        default:
            if (e >= '0' && e <= '7') {
                uint32_t cp = (uint32_t)(e - '0');
                for (int k = 0; k < 2 && i + 1 < end && s[i + 1] >= '0' && s[i + 1] <= '7'; k++)
                    cp = cp * 8 + (uint32_t)(s[++i] - '0');
                tkv__jbuf_add(L->c, &b, u, tkv__utf8_encode(cp, u));
            } else {
                /* Python keeps an unknown escape as written */
                tkv__jbuf_addc(L->c, &b, '\\');
                tkv__jbuf_addc(L->c, &b, e);
            }
        }
    }
    t->p = b.p ? b.p : "";
    t->n = b.n;
}

static bool is_digit(char ch) { return ch >= '0' && ch <= '9'; }
static bool is_name_start(char ch) {
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || ch == '_' || (unsigned char)ch >= 0x80;
}

/* digits with single underscores between them, from pos; returns the end (pos when none) */
static size_t digits(const lexer *L, size_t pos) {
    size_t i = pos;
    if (i >= L->n || !is_digit(L->s[i])) return pos;
    while (i < L->n && (is_digit(L->s[i]) || (L->s[i] == '_' && i + 1 < L->n && is_digit(L->s[i + 1])))) i++;
    return i;
}

static void lex_number(lexer *L) {
    size_t start = L->pos, i = digits(L, start);
    bool is_float = false;
    if (i + 1 < L->n && L->s[i] == '.' && is_digit(L->s[i + 1])) {
        i = digits(L, i + 1);
        is_float = true;
    }
    if (i < L->n && (L->s[i] == 'e' || L->s[i] == 'E')) {
        size_t j = i + 1;
        if (j < L->n && (L->s[j] == '+' || L->s[j] == '-')) j++;
        size_t k = digits(L, j);
        if (k > j) {
            i = k;
            is_float = true;
        }
    }
    char tmp[64];
    size_t n = 0;
    for (size_t k = start; k < i && n + 1 < sizeof tmp; k++)
        if (L->s[k] != '_') tmp[n++] = L->s[k];
    tmp[n] = 0;
    tkv__jtok *t = push(L, is_float ? TKV__JT_FLOAT : TKV__JT_INT, L->s + start, i - start);
    if (is_float) {
        t->f = strtod(tmp, NULL);
    } else {
        char *e;
        unsigned long long v = strtoull(tmp, &e, 10);
        if (n >= 20 || v > INT64_MAX) tkv__jraise(L->c, TKV_ERR_FORMAT, "integer literal too large");
        t->i = (int64_t)v;
    }
    L->pos = i;
}

static const char *const OPS[] = {"//", "**", "==", "!=", ">=", "<=", "+", "-", "/", "*", "%", "~", "[", "]", "(",
                                  ")", "{", "}", ">", "<", "=", ".", ":", "|", ",", ";", NULL};

/* The inside of a tag, up to its end marker ("%}" or "}}"); returns the sign before the end marker. */
static char lex_tag(lexer *L, char end) {
    char stack[256];
    size_t depth = 0;
    for (;;) {
        while (L->pos < L->n && is_ws(L->s[L->pos])) {
            if (L->s[L->pos] == '\n') L->line++;
            L->pos++;
        }
        if (L->pos >= L->n)
            tkv__jraise(L->c, TKV_ERR_FORMAT, "unexpected end of template, expected '%s'", end == '%' ? "%}" : "}}");
        const char *s = L->s + L->pos;
        size_t left = L->n - L->pos;
        if (depth == 0) {
            char sign = 0;
            size_t k = 0;
            if ((s[0] == '-' || s[0] == '+') && left >= 3) {
                sign = s[0];
                k = 1;
            }
            if (left >= k + 2 && s[k] == end && s[k + 1] == '}' && !(sign == '+' && end == '}')) {
                L->pos += k + 2;
                return sign ? sign : ' ';
            }
        }
        char ch = s[0];
        if (is_digit(ch)) {
            lex_number(L);
        } else if (is_name_start(ch)) {
            size_t i = L->pos;
            while (i < L->n && (is_name_start(L->s[i]) || is_digit(L->s[i]))) i++;
            push(L, TKV__JT_NAME, s, i - L->pos);
            L->pos = i;
        } else if (ch == '\'' || ch == '"') {
            size_t i = L->pos + 1;
            int line = L->line;
            while (i < L->n && L->s[i] != ch) {
                if (L->s[i] == '\\' && i + 1 < L->n) i++;
                i++;
            }
            if (i >= L->n) tkv__jraise(L->c, TKV_ERR_FORMAT, "unterminated string");
            tkv__jtok *t = push(L, TKV__JT_STRING, NULL, 0);
            t->line = line;
            lex_string(L, L->pos + 1, i, t);
            count_lines(L, L->pos, i);
            L->pos = i + 1;
        } else {
            size_t k = 0;
            for (; OPS[k]; k++) {
                size_t len = strlen(OPS[k]);
                if (left >= len && !memcmp(s, OPS[k], len)) break;
            }
            if (!OPS[k]) tkv__jraise(L->c, TKV_ERR_FORMAT, "unexpected character '%c'", ch);
            const char *op = OPS[k];
            if (op[0] == '(' || op[0] == '[' || op[0] == '{') {
                if (depth == sizeof stack) tkv__jraise(L->c, TKV_ERR_FORMAT, "brackets nested too deeply");
                stack[depth++] = op[0] == '(' ? ')' : op[0] == '[' ? ']' : '}';
            } else if (op[0] == ')' || op[0] == ']' || op[0] == '}') {
                if (depth == 0 || stack[depth - 1] != op[0])
                    tkv__jraise(L->c, TKV_ERR_FORMAT, "unexpected '%c'", op[0]);
                depth--;
            }
            push(L, TKV__JT_OP, op, strlen(op));
            L->pos += strlen(op);
        }
    }
}

/*
 * A `{% raw %}` tag at tag (its sign already read)? Then its body up to `{% endraw %}` is text, and pos moves past
 * the end tag. False, with nothing done, for any other tag.
 */
static bool lex_raw(lexer *L, size_t tag, char sign, bool line_starting) {
    size_t i = tag + 2 + (sign ? 1 : 0);
    while (i < L->n && is_ws(L->s[i])) i++;
    if (L->n - i < 3 || memcmp(L->s + i, "raw", 3)) return false;
    i += 3;
    while (i < L->n && is_ws(L->s[i])) i++;
    char rsign = 0;
    if (i < L->n && L->s[i] == '-') rsign = L->s[i++];
    if (L->n - i < 2 || memcmp(L->s + i, "%}", 2)) return false;
    emit_data(L, L->pos, tag, '%', sign, line_starting);
    size_t body = after_end(L, i + 2, rsign, false);
    count_lines(L, tag, body);
    for (size_t j = body; j + 1 < L->n; j++) {
        if (L->s[j] != '{' || L->s[j + 1] != '%') continue;
        size_t k = j + 2;
        char bsign = 0;
        if (k < L->n && (L->s[k] == '-' || L->s[k] == '+')) bsign = L->s[k++];
        while (k < L->n && is_ws(L->s[k])) k++;
        if (L->n - k < 6 || memcmp(L->s + k, "endraw", 6)) continue;
        k += 6;
        while (k < L->n && is_ws(L->s[k])) k++;
        char esign = 0;
        if (k < L->n && (L->s[k] == '-' || L->s[k] == '+')) esign = L->s[k++];
        if (L->n - k < 2 || memcmp(L->s + k, "%}", 2)) continue;
        emit_data(L, body, j, '%', bsign, false);
        size_t end = after_end(L, k + 2, esign, true);
        count_lines(L, j, end);
        L->pos = end;
        return true;
    }
    tkv__jraise(L->c, TKV_ERR_FORMAT, "missing end of raw directive");
}

void tkv__jinja_lex(tkv__jctx *c, const char *src, size_t n, tkv__jtok **toks, size_t *n_toks) {
    lexer L = {.c = c, .s = src, .n = n, .line = 1};
    bool line_starting = true;
    while (L.pos < L.n) {
        c->line = L.line;
        size_t tag = find_tag(&L, L.pos);
        if (tag == L.n) {
            emit_data(&L, L.pos, L.n, '{', 0, false);
            break;
        }
        char kind = L.s[tag + 1];
        char sign = tag + 2 < L.n && (L.s[tag + 2] == '-' || L.s[tag + 2] == '+') ? L.s[tag + 2] : 0;
        size_t body = tag + 2 + (sign ? 1 : 0);
        if (kind == '%' && lex_raw(&L, tag, sign, line_starting)) {
            line_starting = L.pos > 0 && L.s[L.pos - 1] == '\n';
            continue;
        }
        emit_data(&L, L.pos, tag, kind, sign, line_starting);
        c->line = L.line;
        if (kind == '#') {
            size_t i = body;
            for (;;) {
                if (i + 1 >= L.n) tkv__jraise(c, TKV_ERR_FORMAT, "missing end of comment tag");
                if (L.s[i] == '#' && L.s[i + 1] == '}') break;
                i++;
            }
            char esign = i > body && (L.s[i - 1] == '-' || L.s[i - 1] == '+') ? L.s[i - 1] : 0;
            size_t end = after_end(&L, i + 2, esign, true);
            count_lines(&L, tag, end);
            L.pos = end;
            line_starting = end > 0 && L.s[end - 1] == '\n';
            continue;
        }
        push(&L, kind == '%' ? TKV__JT_BLOCK_BEGIN : TKV__JT_VAR_BEGIN, NULL, 0);
        L.pos = body;
        char esign = lex_tag(&L, kind == '%' ? '%' : '}');
        push(&L, kind == '%' ? TKV__JT_BLOCK_END : TKV__JT_VAR_END, NULL, 0);
        size_t end = after_end(&L, L.pos, esign, kind == '%');
        count_lines(&L, L.pos, end);
        L.pos = end;
        line_starting = end > 0 && L.s[end - 1] == '\n';
    }
    push(&L, TKV__JT_EOF, NULL, 0);
    *toks = L.toks;
    *n_toks = L.n_toks;
}
