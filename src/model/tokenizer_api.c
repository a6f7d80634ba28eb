/*
 * tokenizer_api.c — the public tokenizer API: tokenize (special tokens split
 * out first), pieces, detokenize and the streaming detokenizer.
 *
 * The space-prefix rule of SentencePiece vocabularies (add_space_prefix):
 * tokenize puts one space before the text at the start and after every
 * special token; detokenize removes one leading space at those same places.
 * So detokenize(tokenize(x)) == x for every x.
 */
#define _GNU_SOURCE /* memmem */
#include "text/tokenizer.h"

#include "base/alloc.h"
#include "base/grow.h"
#include "base/error.h"
#include "model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char SPACE_MARK[] = "\xE2\x96\x81"; /* U+2581, SentencePiece's space */

static tkv_status no_tokenizer(const tkv_model *m) {
    if (!m) return tkv__fail(TKV_ERR_INVALID, "model is NULL");
    return tkv__fail(m->tok_status ? m->tok_status : TKV_ERR_UNSUPPORTED, "%s", m->tok_error);
}

/* ---- special-token partition -------------------------------------------- */

typedef struct frag {
    size_t start, len;
    tkv_token token; /* TKV_TOKEN_NULL: raw text */
} frag;

typedef struct frags {
    frag *v;
    size_t n, cap;
} frags;

static tkv_status frags_push(frags *f, frag x) {
    if (f->n == f->cap) {
        frag *v = tkv__grow(f->v, &f->cap, f->n + 1, sizeof *v, 16);
        if (!v) return TKV_ERR_NOMEM;
        f->v = v;
    }
    f->v[f->n++] = x;
    return TKV_OK;
}

/*
 * Split the raw-text fragments at every occurrence of each special token, the
 * longest tokens first (so "<|im_start|>" wins over a shorter token inside
 * it). Without parse_special only user-defined tokens are split out: control
 * and unknown tokens are then ordinary text.
 */
static tkv_status partition(const tkv__tokenizer *t, const char *text, size_t len, bool parse_special, frags *out) {
    frags a = {0}, b = {0};
    tkv_status st = len ? frags_push(&a, (frag){0, len, TKV_TOKEN_NULL}) : TKV_OK;
    /* Which byte pairs occur in the text: a token with a pair that does not
       cannot occur, and most special tokens are skipped without a search. */
    uint64_t *pairs = len > 1 ? tkv__calloc(65536 / 64, sizeof *pairs) : NULL;
    for (size_t i = 0; pairs && i + 1 < len; i++) {
        unsigned k = (unsigned)(uint8_t)text[i] << 8 | (uint8_t)text[i + 1];
        pairs[k >> 6] |= 1ull << (k & 63);
    }
    for (size_t s = 0; s < t->n_special && !st; s++) {
        const tkv_token id = t->special[s];
        if (!parse_special && t->type[id] != TKV__TOK_USER_DEFINED) continue;
        const char *tok = t->text[id].s;
        const size_t tn = t->text[id].n;
        if (tn > len) continue;
        bool possible = true;
        for (size_t i = 0; pairs && possible && i + 1 < tn; i++) {
            unsigned k = (unsigned)(uint8_t)tok[i] << 8 | (uint8_t)tok[i + 1];
            possible = pairs[k >> 6] >> (k & 63) & 1;
        }
        if (!possible) continue;
        b.n = 0;
        bool split = false;
        for (size_t i = 0; i < a.n && !st; i++) {
            frag f = a.v[i];
            if (f.token != TKV_TOKEN_NULL || f.len < tn) {
                st = frags_push(&b, f);
                continue;
            }
            size_t pos = f.start, end = f.start + f.len;
            const char *hit;
            while (!st && end - pos >= tn && (hit = memmem(text + pos, end - pos, tok, tn))) {
                size_t at = (size_t)(hit - text);
                if (at > pos) st = frags_push(&b, (frag){pos, at - pos, TKV_TOKEN_NULL});
                if (!st) st = frags_push(&b, (frag){at, tn, id});
                pos = at + tn;
                split = true;
            }
            if (!st && pos < end) st = frags_push(&b, (frag){pos, end - pos, TKV_TOKEN_NULL});
        }
        if (split) {
            frags tmp = a;
            a = b;
            b = tmp;
        }
    }
    tkv__free(b.v);
    tkv__free(pairs);
    if (st) {
        tkv__free(a.v);
        return st;
    }
    *out = a;
    return TKV_OK;
}

/* ---- tokenize ----------------------------------------------------------- */

/* SentencePiece: the span with spaces as U+2581, after an optional space. */
static tkv_status spm_span(const tkv__tokenizer *t, const char *s, size_t n, bool prefix, tkv__tokbuf *out) {
    size_t n_spaces = 0;
    for (size_t i = 0; i < n; i++) n_spaces += s[i] == ' ';
    size_t len = n + 2 * n_spaces + (prefix ? 3 : 0); /* each space grows to 3 bytes */
    char *buf = tkv__malloc(len ? len : 1);
    if (!buf) return TKV_ERR_NOMEM;
    size_t o = 0;
    if (prefix) memcpy(buf, SPACE_MARK, 3), o = 3;
    for (size_t i = 0; i < n; i++) {
        if (s[i] == ' ') memcpy(buf + o, SPACE_MARK, 3), o += 3;
        else buf[o++] = s[i];
    }
    tkv_status st = tkv__spm_encode(t, buf, len, out);
    tkv__free(buf);
    return st;
}

static tkv_status encode(const tkv__tokenizer *t, const char *text, size_t len, unsigned flags, tkv__tokbuf *out) {
    frags f = {0};
    tkv_status st = partition(t, text, len, flags & TKV_TOKENIZE_PARSE_SPECIAL, &f);
    const bool add_special = flags & TKV_TOKENIZE_ADD_SPECIAL;
    if (!st && add_special && t->add_bos && t->bos >= 0) st = tkv__tokbuf_push(out, t->bos);
    bool after_special = true;
    for (size_t i = 0; i < f.n && !st; i++) {
        if (f.v[i].token != TKV_TOKEN_NULL) {
            st = tkv__tokbuf_push(out, f.v[i].token);
            after_special = true;
        } else if (t->kind == TKV__VOCAB_SPM) {
            st = spm_span(t, text + f.v[i].start, f.v[i].len, t->add_space_prefix && after_special, out);
            after_special = false;
        } else {
            st = tkv__bpe_encode(t, text + f.v[i].start, f.v[i].len, out);
        }
    }
    if (!st && add_special && t->add_eos && t->eos >= 0) st = tkv__tokbuf_push(out, t->eos);
    tkv__free(f.v);
    return st;
}

tkv_status tkv_tokenize(const tkv_model *model, const char *text, size_t len, unsigned flags, tkv_token *out, size_t cap,
                        size_t *n) {
    if (!model || !model->tok) return no_tokenizer(model);
    if ((!text && len) || !n) return tkv__fail(TKV_ERR_INVALID, "tkv_tokenize: NULL text or n");
    tkv__tokbuf buf = {0};
    tkv_status st = encode(model->tok, text, len, flags, &buf);
    if (st) {
        tkv__free(buf.ids);
        return tkv__fail(st, "tkv_tokenize: out of memory");
    }
    *n = buf.n;
    if (buf.n > cap) {
        tkv__free(buf.ids);
        return tkv__fail(TKV_ERR_FULL, "tkv_tokenize: %zu tokens do not fit in %zu", *n, cap);
    }
    if (buf.n) memcpy(out, buf.ids, buf.n * sizeof *out);
    tkv__free(buf.ids);
    return TKV_OK;
}

/* ---- pieces ------------------------------------------------------------- */

typedef tkv__buf bytes;

static tkv_status put(bytes *b, const char *s, size_t n) { return tkv__buf_put(b, s, n); }

static bool is_special_type(uint8_t ty) {
    return ty == TKV__TOK_CONTROL || ty == TKV__TOK_UNKNOWN || ty == TKV__TOK_USER_DEFINED;
}

/* The byte a GPT-2 code point stands for, or -1 when it stands for none. */
static int cpt_to_byte(const tkv__tokenizer *t, uint32_t c) {
    if (c < 0x100 && t->byte_cpt[c] == c) return (int)c;
    if (c >= 0x100 && c < 0x100 + 68)
        for (int b = 0; b < 256; b++)
            if (t->byte_cpt[b] == c) return b;
    return -1;
}

/*
 * Append the text of token id. Control and unknown tokens render only with
 * `special`; user-defined tokens always render as their text.
 */
static tkv_status piece(const tkv__tokenizer *t, tkv_token id, bool special, bytes *out) {
    const uint8_t ty = t->type[id];
    const tkv__str *s = &t->text[id];
    if (is_special_type(ty)) {
        if (ty != TKV__TOK_USER_DEFINED && !special) return TKV_OK;
        return put(out, s->s, s->n);
    }
    if (t->kind == TKV__VOCAB_SPM) {
        if (ty == TKV__TOK_BYTE && s->n == 6 && !memcmp(s->s, "<0x", 3)) {
            char b = (char)strtol(s->s + 3, NULL, 16);
            return put(out, &b, 1);
        }
        if (ty != TKV__TOK_NORMAL) return TKV_OK;
        tkv_status st = TKV_OK;
        for (size_t i = 0; i < s->n && !st;) {
            if (i + 3 <= s->n && !memcmp(s->s + i, SPACE_MARK, 3)) {
                st = put(out, " ", 1);
                i += 3;
            } else {
                st = put(out, s->s + i, 1);
                i++;
            }
        }
        return st;
    }
    if (ty != TKV__TOK_NORMAL) return TKV_OK;
    /* byte-level: each code point of the text stands for one byte */
    tkv_status st = TKV_OK;
    for (size_t i = 0; i < s->n && !st;) {
        size_t cl = tkv__utf8_valid_len((const unsigned char *)s->s + i, s->n - i);
        if (!cl) cl = 1;
        uint32_t c = (uint8_t)s->s[i];
        if (cl == 2) c = ((c & 0x1F) << 6) | ((uint8_t)s->s[i + 1] & 0x3F);
        int b = cl <= 2 ? cpt_to_byte(t, c) : -1;
        if (b >= 0) {
            char ch = (char)b;
            st = put(out, &ch, 1);
        } else {
            st = put(out, s->s + i, cl); /* not a byte symbol: keep the text */
        }
        i += cl;
    }
    return st;
}

static tkv_status copy_out(const bytes *b, char *buf, size_t cap, size_t *n, const char *what) {
    *n = b->n;
    if (b->n + 1 > cap) return tkv__fail(TKV_ERR_FULL, "%s: %zu bytes (and a NUL) do not fit in %zu", what, b->n, cap);
    memcpy(buf, b->p ? b->p : "", b->n);
    buf[b->n] = '\0';
    return TKV_OK;
}

static tkv_status check_token(const tkv__tokenizer *t, tkv_token id) {
    if (id < 0 || (uint32_t)id >= t->n_vocab)
        return tkv__fail(TKV_ERR_INVALID, "token %d is out of range (vocabulary of %u)", (int)id, t->n_vocab);
    return TKV_OK;
}

tkv_status tkv_token_to_piece(const tkv_model *model, tkv_token token, unsigned flags, char *buf, size_t cap, size_t *n) {
    if (!model || !model->tok) return no_tokenizer(model);
    if (!n) return tkv__fail(TKV_ERR_INVALID, "tkv_token_to_piece: n is NULL");
    tkv_status st = check_token(model->tok, token);
    if (st) return st;
    bytes b = {0};
    if ((st = piece(model->tok, token, flags & TKV_DETOKENIZE_SPECIAL, &b))) {
        tkv__free(b.p);
        return tkv__fail(st, "out of memory");
    }
    st = copy_out(&b, buf, cap, n, "tkv_token_to_piece");
    tkv__free(b.p);
    return st;
}

/*
 * Append the text of `token` under the space-prefix rule; *strip says
 * whether the next text piece loses one leading space.
 */
static tkv_status render(const tkv__tokenizer *t, tkv_token token, unsigned flags, bool *strip, bytes *out) {
    size_t before = out->n;
    tkv_status st = piece(t, token, flags & TKV_DETOKENIZE_SPECIAL, out);
    if (st) return st;
    if (is_special_type(t->type[token])) {
        *strip = t->add_space_prefix;
    } else if (out->n > before) {
        if (*strip && out->p[before] == ' ') {
            memmove(out->p + before, out->p + before + 1, out->n - before); /* with the NUL */
            out->n--;
        }
        *strip = false;
    }
    return TKV_OK;
}

tkv_status tkv_detokenize(const tkv_model *model, const tkv_token *tokens, size_t n_tokens, unsigned flags, char *buf,
                          size_t cap, size_t *n) {
    if (!model || !model->tok) return no_tokenizer(model);
    if ((!tokens && n_tokens) || !n) return tkv__fail(TKV_ERR_INVALID, "tkv_detokenize: NULL tokens or n");
    const tkv__tokenizer *t = model->tok;
    tkv_status st = TKV_OK;
    for (size_t i = 0; i < n_tokens && !st; i++) st = check_token(t, tokens[i]);
    if (st) return st;
    bytes b = {0};
    bool strip = t->add_space_prefix;
    for (size_t i = 0; i < n_tokens && !st; i++) st = render(t, tokens[i], flags, &strip, &b);
    if (st) {
        tkv__free(b.p);
        return tkv__fail(st, "out of memory");
    }
    st = copy_out(&b, buf, cap, n, "tkv_detokenize");
    tkv__free(b.p);
    return st;
}

/* ---- streaming detokenizer ---------------------------------------------- */

struct tkv_detok {
    const tkv_model *model;
    unsigned flags;
    bool strip;
    bytes pending; /* rendered but not yet released */
    bytes ready;   /* what the last call returned */
};

tkv_status tkv_detok_create(const tkv_model *model, unsigned flags, tkv_detok **out) {
    if (!model || !model->tok) return no_tokenizer(model);
    if (!out) return tkv__fail(TKV_ERR_INVALID, "tkv_detok_create: out is NULL");
    tkv_detok *d = tkv__calloc(1, sizeof *d);
    if (!d) return tkv__fail(TKV_ERR_NOMEM, "out of memory");
    d->model = model;
    d->flags = flags;
    d->strip = model->tok->add_space_prefix && !(flags & TKV_DETOKENIZE_CONTINUE);
    *out = d;
    return TKV_OK;
}

void tkv_detok_free(tkv_detok *d) {
    if (!d) return;
    tkv__free(d->pending.p);
    tkv__free(d->ready.p);
    tkv__free(d);
}

void tkv_detok_reset(tkv_detok *d) {
    d->pending.n = d->ready.n = 0;
    d->strip = d->model->tok->add_space_prefix && !(d->flags & TKV_DETOKENIZE_CONTINUE);
}

/* How many bytes at the end of p[0..n) are an incomplete UTF-8 sequence that
   more bytes could still complete. */
static size_t incomplete_tail(const unsigned char *p, size_t n) {
    for (size_t back = 1; back <= 3 && back <= n; back++) {
        unsigned c = p[n - back];
        if ((c & 0xC0) == 0x80) continue; /* a continuation byte: look further back */
        size_t need = c >= 0xF0 && c <= 0xF4 ? 4 : c >= 0xE0 ? 3 : c >= 0xC2 && c < 0xE0 ? 2 : 1;
        return need > back ? back : 0;
    }
    return 0;
}

static tkv_status release(tkv_detok *d, size_t keep, const char **text, size_t *len) {
    d->ready.n = 0;
    tkv_status st = put(&d->ready, d->pending.p ? d->pending.p : "", d->pending.n - keep);
    if (st) return tkv__fail(st, "out of memory");
    if (keep) memmove(d->pending.p, d->pending.p + d->pending.n - keep, keep);
    d->pending.n = keep;
    *text = d->ready.p;
    *len = d->ready.n;
    return TKV_OK;
}

tkv_status tkv_detok_push(tkv_detok *d, tkv_token token, const char **text, size_t *len) {
    if (!d || !text || !len) return tkv__fail(TKV_ERR_INVALID, "tkv_detok_push: NULL argument");
    tkv_status st = check_token(d->model->tok, token);
    if (st) return st;
    if ((st = render(d->model->tok, token, d->flags, &d->strip, &d->pending))) return tkv__fail(st, "out of memory");
    if (!d->pending.p) return release(d, 0, text, len);
    return release(d, incomplete_tail((const unsigned char *)d->pending.p, d->pending.n), text, len);
}

tkv_status tkv_detok_flush(tkv_detok *d, const char **text, size_t *len) {
    if (!d || !text || !len) return tkv__fail(TKV_ERR_INVALID, "tkv_detok_flush: NULL argument");
    return release(d, 0, text, len);
}

/* ---- vocabulary facts --------------------------------------------------- */

size_t tkv_vocab_size(const tkv_model *model) { return model && model->tok ? model->tok->n_vocab : 0; }
tkv_token tkv_token_bos(const tkv_model *model) { return model && model->tok ? model->tok->bos : TKV_TOKEN_NULL; }
tkv_token tkv_token_eos(const tkv_model *model) { return model && model->tok ? model->tok->eos : TKV_TOKEN_NULL; }
tkv_token tkv_token_eot(const tkv_model *model) { return model && model->tok ? model->tok->eot : TKV_TOKEN_NULL; }

bool tkv_token_is_eog(const tkv_model *model, tkv_token token) {
    if (!model || !model->tok) return false;
    for (size_t i = 0; i < model->tok->n_eog; i++)
        if (model->tok->eog[i] == token) return true;
    return false;
}

const char *tkv_token_text(const tkv_model *model, tkv_token token) {
    if (!model || !model->tok || token < 0 || (uint32_t)token >= model->tok->n_vocab) return NULL;
    return model->tok->text[token].s;
}

bool tkv_tokenizer_adds_bos(const tkv_model *model) { return model && model->tok && model->tok->add_bos; }
