/*
 * tokenizer_merge.c — the merge loops of both vocabulary types.
 *
 * A span of text starts as one symbol per UTF-8 character. Adjacent pairs
 * that may merge are kept in a priority queue; the best pair is merged, its
 * neighbours re-queued, until nothing merges. The two vocabularies differ in
 * what "may merge" and "best" mean:
 *   SPM: the pair's text is a token; best = highest token score.
 *   BPE: the pair is in the merge list; best = lowest rank (also for SPM
 *        text with spm_merges, Gemma 4's).
 * Ties go to the leftmost pair. A queued pair whose symbols have since
 * changed is skipped when popped (symbols only grow, so a changed length
 * says it all).
 */
#include "tokenizer.h"

#include "base/alloc.h"
#include "base/grow.h"

#include <stdio.h>
#include <string.h>

typedef struct symbol {
    int prev, next; /* neighbours in the current segmentation, -1 at the ends */
    size_t start, n; /* bytes of the span; n = 0 once merged into the left */
} symbol;

typedef struct pair {
    double priority; /* higher pops first */
    int left, right;
    size_t size; /* bytes of both symbols when queued */
} pair;

typedef struct work {
    symbol *sym;
    size_t n_sym, cap_sym;
    pair *heap;
    size_t n_heap, cap_heap;
    char *scratch; /* "left right" keys for merge look-ups */
    size_t cap_scratch;
} work;

static bool before(const pair *a, const pair *b) {
    return a->priority > b->priority || (a->priority == b->priority && a->left < b->left);
}

static tkv_status heap_push(work *w, pair p) {
    if (w->n_heap == w->cap_heap) {
        pair *h = tkv__grow(w->heap, &w->cap_heap, w->n_heap + 1, sizeof *h, 64);
        if (!h) return TKV_ERR_NOMEM;
        w->heap = h;
    }
    size_t i = w->n_heap++;
    while (i > 0 && before(&p, &w->heap[(i - 1) / 2])) {
        w->heap[i] = w->heap[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    w->heap[i] = p;
    return TKV_OK;
}

static pair heap_pop(work *w) {
    pair top = w->heap[0], last = w->heap[--w->n_heap];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= w->n_heap) break;
        if (c + 1 < w->n_heap && before(&w->heap[c + 1], &w->heap[c])) c++;
        if (!before(&w->heap[c], &last)) break;
        w->heap[i] = w->heap[c];
        i = c;
    }
    if (w->n_heap) w->heap[i] = last;
    return top;
}

/* One symbol per UTF-8 character, and one per byte of an invalid sequence.
   (The reference lets a lead byte claim its length even when what follows
   is not a continuation, which can swallow part of the next character; for
   valid UTF-8 the two agree.) */
static tkv_status split_chars(work *w, const char *text, size_t len) {
    if (len > w->cap_sym) {
        symbol *s = tkv__realloc(w->sym, len * sizeof *s);
        if (!s) return TKV_ERR_NOMEM;
        w->sym = s;
        w->cap_sym = len;
    }
    w->n_sym = 0;
    w->n_heap = 0;
    for (size_t off = 0; off < len;) {
        size_t n = tkv__utf8_valid_len((const unsigned char *)text + off, len - off);
        if (n == 0) n = 1;
        int i = (int)w->n_sym++;
        w->sym[i] = (symbol){i - 1, off + n == len ? -1 : i + 1, off, n};
        off += n;
    }
    return TKV_OK;
}

/* Merge sym[p.right] into sym[p.left]. */
static void merge(work *w, const pair *p) {
    symbol *l = &w->sym[p->left], *r = &w->sym[p->right];
    l->n += r->n;
    r->n = 0;
    l->next = r->next;
    if (r->next >= 0) w->sym[r->next].prev = p->left;
}

static void free_work(work *w) {
    tkv__free(w->sym);
    tkv__free(w->heap);
    tkv__free(w->scratch);
}

/* ---- SentencePiece ------------------------------------------------------ */

static tkv_status spm_try_pair(const tkv__tokenizer *t, work *w, const char *text, int left, int right) {
    if (left < 0 || right < 0) return TKV_OK;
    const symbol *l = &w->sym[left], *r = &w->sym[right];
    int32_t id = tkv__strmap_get(&t->token_map, text + l->start, l->n + r->n);
    if (id < 0) return TKV_OK;
    return heap_push(w, (pair){t->score[id], left, right, l->n + r->n});
}

/* Emit a final symbol: its token, or its bytes through byte fallback. */
static tkv_status spm_emit(const tkv__tokenizer *t, const char *s, size_t n, tkv__tokbuf *out) {
    int32_t id = tkv__strmap_get(&t->token_map, s, n);
    if (id >= 0) return tkv__tokbuf_push(out, id);
    for (size_t i = 0; i < n; i++) {
        int32_t b = t->byte_token[(uint8_t)s[i]];
        tkv_status st = tkv__tokbuf_push(out, b >= 0 ? b : t->unk);
        if (st) return st;
    }
    return TKV_OK;
}

/* Segment one word (or the whole span) with the SPM merge loop. */
static tkv_status spm_word(const tkv__tokenizer *t, work *w, const char *text, size_t len, tkv__tokbuf *out) {
    tkv_status st = split_chars(w, text, len);
    for (size_t i = 1; i < w->n_sym && !st; i++) st = spm_try_pair(t, w, text, (int)i - 1, (int)i);
    while (!st && w->n_heap) {
        pair p = heap_pop(w);
        const symbol *l = &w->sym[p.left], *r = &w->sym[p.right];
        if (l->n == 0 || r->n == 0 || l->n + r->n != p.size) continue; /* stale */
        merge(w, &p);
        st = spm_try_pair(t, w, text, w->sym[p.left].prev, p.left);
        if (!st) st = spm_try_pair(t, w, text, p.left, w->sym[p.left].next);
    }
    for (int i = w->n_sym ? 0 : -1; i >= 0 && !st; i = w->sym[i].next)
        st = spm_emit(t, text + w->sym[i].start, w->sym[i].n, out);
    return st;
}

static tkv_status ranked_encode(const tkv__tokenizer *t, const char *text, size_t len, bool byte_level,
                                tkv__tokbuf *out);

static bool is_mark(const char *p) { return !memcmp(p, "\xE2\x96\x81", 3); }

/*
 * When no token has "▁" after its leading run of them (t->spm_words), no
 * merge can cross the start of a "▁" that follows another character, so the
 * text splits there into words merged separately: the same result as one
 * merge loop over the whole text, with small queues instead of one huge one.
 * With spm_merges the text is merged by rank, as BPE's is.
 */
tkv_status tkv__spm_encode(const tkv__tokenizer *t, const char *text, size_t len, tkv__tokbuf *out) {
    if (t->spm_merges) return ranked_encode(t, text, len, false, out);
    work w = {0};
    tkv_status st = TKV_OK;
    size_t start = 0;
    if (t->spm_words) {
        for (size_t p = 3; p + 3 <= len && !st; p++) {
            if (is_mark(text + p) && !is_mark(text + p - 3)) {
                st = spm_word(t, &w, text + start, p - start, out);
                start = p;
                p += 2;
            }
        }
    }
    if (!st && start < len) st = spm_word(t, &w, text + start, len - start, out);
    free_work(&w);
    return st;
}

/* ---- byte-level BPE ----------------------------------------------------- */

static tkv_status bpe_try_pair(const tkv__tokenizer *t, work *w, const char *word, int left, int right) {
    if (left < 0 || right < 0) return TKV_OK;
    const symbol *l = &w->sym[left], *r = &w->sym[right];
    size_t need = l->n + 1 + r->n;
    if (need > w->cap_scratch) {
        char *s = tkv__realloc(w->scratch, need);
        if (!s) return TKV_ERR_NOMEM;
        w->scratch = s;
        w->cap_scratch = need;
    }
    memcpy(w->scratch, word + l->start, l->n);
    w->scratch[l->n] = ' ';
    memcpy(w->scratch + l->n + 1, word + r->start, r->n);
    int32_t rank = tkv__strmap_get(&t->merge_map, w->scratch, need);
    if (rank < 0) return TKV_OK;
    return heap_push(w, (pair){-(double)rank, left, right, l->n + r->n});
}

/* Byte-encode `len` bytes into dst (room for 2 * len) with the GPT-2 byte
   <-> code point table; returns the bytes written. */
static size_t byte_encode(const uint16_t *cpt, const char *src, size_t len, char *dst) {
    size_t o = 0;
    for (size_t i = 0; i < len; i++) {
        uint32_t c = cpt[(uint8_t)src[i]];
        if (c < 0x80) {
            dst[o++] = (char)c;
        } else {
            dst[o++] = (char)(0xC0 | (c >> 6));
            dst[o++] = (char)(0x80 | (c & 0x3F));
        }
    }
    return o;
}

static bool all_newlines(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (s[i] != '\n') return false;
    return n > 0;
}

static tkv_status bpe_word(const tkv__tokenizer *t, work *w, const char *word, size_t len, tkv__tokbuf *out) {
    /* the reference takes Gemma 4's runs of line feeds whole when they are a
       token (its merges would split them) */
    if (t->ignore_merges || (t->spm_merges && all_newlines(word, len))) {
        int32_t id = tkv__strmap_get(&t->token_map, word, len);
        if (id >= 0) return tkv__tokbuf_push(out, id);
    }
    tkv_status st = split_chars(w, word, len);
    for (size_t i = 1; i < w->n_sym && !st; i++) st = bpe_try_pair(t, w, word, (int)i - 1, (int)i);
    while (!st && w->n_heap) {
        pair p = heap_pop(w);
        const symbol *l = &w->sym[p.left], *r = &w->sym[p.right];
        if (l->n == 0 || r->n == 0 || l->n + r->n != p.size) continue;
        merge(w, &p);
        st = bpe_try_pair(t, w, word, w->sym[p.left].prev, p.left);
        if (!st) st = bpe_try_pair(t, w, word, p.left, w->sym[p.left].next);
    }
    for (int i = w->n_sym ? 0 : -1; i >= 0 && !st; i = w->sym[i].next) {
        const char *s = word + w->sym[i].start;
        size_t n = w->sym[i].n;
        int32_t id = tkv__strmap_get(&t->token_map, s, n);
        if (id >= 0) {
            st = tkv__tokbuf_push(out, id);
            continue;
        }
        if (t->spm_merges) { /* not a token: its bytes' <0xXX> tokens, where they exist */
            for (size_t k = 0; k < n && !st; k++)
                if (t->byte_token[(uint8_t)s[k]] >= 0) st = tkv__tokbuf_push(out, t->byte_token[(uint8_t)s[k]]);
            continue;
        }
        /* not a token: the symbols of its single characters, where they exist */
        for (size_t k = 0; k < n && !st;) {
            size_t cl = (uint8_t)s[k] < 0x80 ? 1 : 2; /* byte-encoded text: 1- or 2-byte chars */
            if (k + cl > n) cl = n - k;
            int32_t cid = tkv__strmap_get(&t->token_map, s + k, cl);
            if (cid >= 0) st = tkv__tokbuf_push(out, cid);
            k += cl;
        }
    }
    return st;
}

/* Pre-tokenize and merge by rank; byte_level: GPT-2's byte symbols, else the
   text as it is (spm_merges). */
static tkv_status ranked_encode(const tkv__tokenizer *t, const char *text, size_t len, bool byte_level,
                                tkv__tokbuf *out) {
    tkv__spans words = {0};
    work w = {0};
    char *enc = NULL;
    size_t cap_enc = 0;
    tkv_status st = TKV_OK;
    /* Valid UTF-8 runs go through the pre-tokenizer; each invalid byte is a
       word of its own (byte fallback: every byte has a symbol). */
    for (size_t pos = 0; pos < len && !st;) {
        size_t run = pos;
        while (run < len) {
            size_t cl = tkv__utf8_valid_len((const unsigned char *)text + run, len - run);
            if (!cl) break;
            run += cl;
        }
        words.n = 0;
        if (run > pos) st = tkv__pretok_split(t->pre, text + pos, run - pos, &words);
        for (size_t i = 0; i < words.n && !st; i++) words.v[i].start += pos;
        if (!st && run < len) st = tkv__spans_push(&words, run, 1);
        for (size_t i = 0; i < words.n && !st; i++) {
            if (!byte_level) {
                st = bpe_word(t, &w, text + words.v[i].start, words.v[i].len, out);
                continue;
            }
            size_t need = 2 * words.v[i].len;
            if (need > cap_enc) {
                char *e = tkv__realloc(enc, need);
                if (!e) {
                    st = TKV_ERR_NOMEM;
                    break;
                }
                enc = e;
                cap_enc = need;
            }
            size_t n = byte_encode(t->byte_cpt, text + words.v[i].start, words.v[i].len, enc);
            st = bpe_word(t, &w, enc, n, out);
        }
        pos = run < len ? run + 1 : run;
    }
    tkv__free(words.v);
    tkv__free(enc);
    free_work(&w);
    return st;
}

tkv_status tkv__bpe_encode(const tkv__tokenizer *t, const char *text, size_t len, tkv__tokbuf *out) {
    return ranked_encode(t, text, len, true, out);
}
