/*
 * grammar_vocab.c — tkv_grammar: a compiled grammar over a vocabulary.
 *
 * Which tokens may come next is a walk of a byte trie of the tokens' pieces
 * (built once per grammar, a few ms for 32k tokens: see bench_grammar),
 * depth first, carrying the stack set and the partial UTF-8 character: a
 * subtree is pruned as soon as its prefix leaves the grammar, so a step
 * costs one stack-set advance per trie node whose prefix is still possible,
 * not one per token and byte (and inside a JSON string, where almost every
 * token is possible, the matcher's memo makes most of those a look-up).
 *
 * A token's text is its piece alone (tkv_token_to_piece without
 * TKV_DETOKENIZE_SPECIAL: SentencePiece's "▁" is a space, <0xNN> is its
 * byte). Control and unknown tokens have no piece and so never satisfy the
 * grammar; end-of-generation tokens are allowed exactly when the text is a
 * whole sentence.
 */
#include "grammar.h"

#include "base/alloc.h"
#include "base/error.h"

#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

typedef struct tnode {
    uint32_t end;            /* index past this node's subtree (children start at this + 1) */
    uint32_t first, n_ended; /* tokens whose piece ends here: ended[first .. first + n_ended) */
    uint8_t byte;
} tnode;

struct tkv_grammar {
    tkv__gbnf *g;
    size_t n_vocab;
    char *bytes;  /* all pieces */
    size_t *off;  /* (n_vocab + 1) piece i is bytes[off[i] .. off[i + 1]) */
    uint8_t *eog; /* (n_vocab) */
    tnode *t;     /* (n_t) preorder; t[0] is the root (the empty prefix) */
    size_t n_t;
    tkv_token *ended; /* tokens in trie order */
    uint64_t id;      /* tkv__grammar_id */
};

typedef struct entry {
    const uint8_t *p;
    size_t n;
    tkv_token id;
} entry;

static int by_piece(const void *a, const void *b) {
    const entry *x = a, *y = b;
    size_t n = x->n < y->n ? x->n : y->n;
    int c = memcmp(x->p, y->p, n);
    if (c) return c;
    if (x->n != y->n) return x->n < y->n ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

/*
 * Order e[lo, hi) (sharing their first d bytes) by the rest of their bytes:
 * those that end at d first, then by byte d (a counting sort into tmp, so
 * the whole trie costs O(bytes), where qsort of 32k pieces was most of
 * tkv_grammar_create); small ranges by insertion.
 */
static void order(entry *e, entry *tmp, size_t lo, size_t hi, size_t d) {
    if (hi - lo <= 16) {
        for (size_t i = lo + 1; i < hi; i++) {
            const entry x = e[i];
            size_t j = i;
            for (; j > lo && by_piece(&e[j - 1], &x) > 0; j--) e[j] = e[j - 1];
            e[j] = x;
        }
        return;
    }
    size_t count[257] = {0};
    for (size_t i = lo; i < hi; i++) count[e[i].n == d ? 0 : (size_t)e[i].p[d] + 1]++;
    for (size_t b = 1; b < 257; b++) count[b] += count[b - 1];
    for (size_t i = hi; i-- > lo;) tmp[lo + --count[e[i].n == d ? 0 : (size_t)e[i].p[d] + 1]] = e[i];
    memcpy(e + lo, tmp + lo, (hi - lo) * sizeof *e);
}

/* Nodes for e[lo, hi) (all sharing their first d bytes) under node `at`. */
static void build(tkv_grammar *G, entry *e, entry *tmp, size_t lo, size_t hi, size_t d, size_t at, size_t *n_ended) {
    order(e, tmp, lo, hi, d);
    G->t[at].first = (uint32_t)*n_ended;
    while (lo < hi && e[lo].n == d) G->ended[(*n_ended)++] = e[lo++].id; /* those that end here come first */
    G->t[at].n_ended = (uint32_t)(*n_ended - G->t[at].first);
    while (lo < hi) {
        const uint8_t b = e[lo].p[d];
        size_t j = lo + 1;
        while (j < hi && e[j].p[d] == b) j++;
        const size_t c = G->n_t++;
        G->t[c].byte = b;
        build(G, e, tmp, lo, j, d + 1, c, n_ended);
        lo = j;
    }
    G->t[at].end = (uint32_t)G->n_t;
}

void tkv_grammar_free(tkv_grammar *g) {
    if (!g) return;
    tkv__gbnf_free(g->g);
    tkv__free(g->bytes), tkv__free(g->off), tkv__free(g->eog), tkv__free(g->t), tkv__free(g->ended);
    tkv__free(g);
}

/*
 * Refuse a grammar whose parses multiply: a state of many stacks makes every
 * step cost that many advances per trie node, and a repetition of a
 * repetition that splits the same text many ways (([a-z ]{0,50}){0,50})
 * reaches hundreds within a few characters, costing tens of milliseconds a
 * token where an ordinary grammar (JSON, lists, a schema) keeps a handful.
 */
static tkv_status check_ambiguity(const tkv__gbnf *g) {
    tkv__gmatch *m = NULL;
    tkv_status st = tkv__gmatch_create(g, &m);
    if (st) return st;
    uint32_t text[TKV__GRAMMAR_PROBE_DEPTH];
    size_t worst = 0, n = 0;
    st = tkv__gmatch_probe(m, TKV__GRAMMAR_PROBE_DEPTH, TKV__GRAMMAR_MAX_PARSES, &worst, text, &n);
    tkv__gmatch_free(m);
    if (st || worst <= TKV__GRAMMAR_MAX_PARSES) return st;
    char shown[4 * TKV__GRAMMAR_PROBE_DEPTH + 1];
    size_t k = 0;
    for (size_t i = 0; i < n; i++) /* printable ASCII as itself, the rest as '?' */
        shown[k++] = text[i] >= 0x20 && text[i] < 0x7F && text[i] != '\'' ? (char)text[i] : '?';
    shown[k] = '\0';
    return tkv__fail(TKV_ERR_INVALID,
                     "grammar: too ambiguous: after the %zu characters '%s' it holds %zu%s partial parses at once, "
                     "over the limit of %d (each one costs work for every token of the vocabulary at every step); a "
                     "repetition of something that can match the same text in several ways, such as "
                     "([a-z ]{0,50}){0,50}, does this: write it as one repetition",
                     n, shown, worst, worst >= TKV__GMATCH_MAX_STACKS ? " or more" : "", TKV__GRAMMAR_MAX_PARSES);
}

tkv_status tkv__grammar_create_vocab(const char *gbnf, size_t len, const char *root, size_t n_vocab,
                                     const char *const *pieces, const size_t *lens, const bool *eog,
                                     tkv_grammar **out) {
    if (!out || n_vocab == 0 || n_vocab > INT32_MAX)
        return tkv__fail(TKV_ERR_INVALID, "tkv_grammar_create: no output or an empty vocabulary");
    *out = NULL;
    tkv_grammar *G = tkv__calloc(1, sizeof *G);
    if (!G) return tkv__fail(TKV_ERR_NOMEM, "out of memory for the grammar");
    tkv_status st = tkv__gbnf_compile(gbnf, len, root, &G->g);
    if (!st) st = check_ambiguity(G->g);
    if (st) {
        tkv_grammar_free(G);
        return st;
    }
    G->n_vocab = n_vocab;
    size_t total = 0, n_text = 0;
    for (size_t i = 0; i < n_vocab; i++) {
        total += lens[i];
        n_text += lens[i] && !eog[i];
    }
    G->bytes = tkv__malloc(total ? total : 1);
    G->off = tkv__malloc((n_vocab + 1) * sizeof *G->off);
    G->eog = tkv__malloc(n_vocab);
    G->t = tkv__malloc((total + 1) * sizeof *G->t); /* at most one node per byte, and the root */
    G->ended = tkv__malloc((n_text ? n_text : 1) * sizeof *G->ended);
    entry *e = tkv__malloc((n_text ? n_text : 1) * sizeof *e), *tmp = tkv__malloc((n_text ? n_text : 1) * sizeof *e);
    if (!G->bytes || !G->off || !G->eog || !G->t || !G->ended || !e || !tmp) {
        tkv__free(e), tkv__free(tmp);
        tkv_grammar_free(G);
        return tkv__fail(TKV_ERR_NOMEM, "out of memory for the grammar's vocabulary trie");
    }
    size_t at = 0, k = 0;
    for (size_t i = 0; i < n_vocab; i++) {
        G->off[i] = at;
        if (lens[i]) memcpy(G->bytes + at, pieces[i], lens[i]);
        G->eog[i] = eog[i];
        if (lens[i] && !eog[i]) e[k++] = (entry){(const uint8_t *)G->bytes + at, lens[i], (tkv_token)i};
        at += lens[i];
    }
    G->off[n_vocab] = at;
    size_t n_ended = 0;
    G->n_t = 1;
    G->t[0].byte = 0;
    build(G, e, tmp, 0, k, 0, 0, &n_ended);
    tkv__free(e), tkv__free(tmp);
    /* what decides which tokens it allows after which: its text, its root, the vocabulary's pieces and ends */
    const char *r = root ? root : "root"; /* NULL is "root" */
    G->id = XXH3_64bits(gbnf, len);
    G->id = XXH3_64bits_withSeed(r, strlen(r) + 1, G->id);
    G->id = XXH3_64bits_withSeed(G->bytes, at, G->id);
    G->id = XXH3_64bits_withSeed(G->off, (n_vocab + 1) * sizeof *G->off, G->id);
    G->id = XXH3_64bits_withSeed(G->eog, n_vocab, G->id);
    *out = G;
    return TKV_OK;
}

tkv_status tkv_grammar_create(const tkv_model *model, const char *gbnf, size_t len, const char *root,
                              tkv_grammar **out) {
    if (!out) return tkv__fail(TKV_ERR_INVALID, "tkv_grammar_create: out is NULL");
    *out = NULL;
    const size_t n_vocab = tkv_vocab_size(model);
    if (!n_vocab) return tkv__fail(TKV_ERR_INVALID, "tkv_grammar_create: the model has no vocabulary");
    char *bytes = NULL;
    size_t cap = 16 * n_vocab, at = 0;
    size_t *off = tkv__malloc((n_vocab + 1) * sizeof *off), *lens = tkv__malloc(n_vocab * sizeof *lens);
    const char **pieces = tkv__malloc(n_vocab * sizeof *pieces);
    bool *eog = tkv__malloc(n_vocab * sizeof *eog);
    tkv_status st = off && lens && pieces && eog && (bytes = tkv__malloc(cap)) ? TKV_OK : TKV_ERR_NOMEM;
    for (size_t i = 0; i < n_vocab && !st; i++) {
        size_t n = 0;
        st = tkv_token_to_piece(model, (tkv_token)i, 0, bytes + at, cap - at, &n);
        if (st == TKV_ERR_FULL) {
            size_t c = 2 * cap + n + 1;
            char *b = tkv__realloc(bytes, c);
            if (!b) {
                st = TKV_ERR_NOMEM;
                break;
            }
            bytes = b, cap = c;
            st = tkv_token_to_piece(model, (tkv_token)i, 0, bytes + at, cap - at, &n);
        }
        off[i] = at, lens[i] = n;
        eog[i] = tkv_token_is_eog(model, (tkv_token)i);
        at += n;
    }
    if (!st) {
        for (size_t i = 0; i < n_vocab; i++) pieces[i] = bytes + off[i];
        st = tkv__grammar_create_vocab(gbnf, len, root, n_vocab, pieces, lens, eog, out);
    } else if (st == TKV_ERR_NOMEM) {
        st = tkv__fail(TKV_ERR_NOMEM, "out of memory reading the vocabulary for the grammar");
    }
    tkv__free(bytes), tkv__free(off), tkv__free(lens), tkv__free(pieces), tkv__free(eog);
    return st;
}

size_t tkv__grammar_n_vocab(const tkv_grammar *g) { return g->n_vocab; }

const tkv__gbnf *tkv__grammar_gbnf(const tkv_grammar *g) { return g->g; }

uint64_t tkv__grammar_id(const tkv_grammar *g) { return g->id; }

tkv_status tkv__grammar_token(const tkv_grammar *g, tkv__gmatch *m, tkv_token token, bool commit, bool *ok) {
    *ok = false;
    if (token < 0 || (size_t)token >= g->n_vocab) return TKV_OK;
    if (g->eog[token]) {
        *ok = tkv__gmatch_complete(m);
        return TKV_OK;
    }
    const size_t n = g->off[token + 1] - g->off[token];
    if (!n) return TKV_OK; /* control and unknown tokens are no text */
    return tkv__gmatch_feed(m, g->bytes + g->off[token], n, commit, ok);
}

static tkv_status walk(const tkv_grammar *g, tkv__gmatch *m, uint32_t at, const tkv__gset *set, uint32_t partial,
                       int pending, uint8_t *allowed, size_t *n) {
    for (uint32_t c = at + 1; c < g->t[at].end; c = g->t[c].end) {
        const tkv__gmark mark = tkv__gmatch_mark(m);
        uint32_t p = partial;
        int d = pending;
        const tkv__gset *next;
        tkv_status st = tkv__gmatch_step(m, set, &p, &d, g->t[c].byte, &next);
        if (!st && next) {
            for (uint32_t i = 0; i < g->t[c].n_ended; i++) allowed[g->ended[g->t[c].first + i]] = 1;
            *n += g->t[c].n_ended;
            if (g->t[c].end > c + 1) st = walk(g, m, c, next, p, d, allowed, n);
        }
        tkv__gmatch_release(m, mark);
        if (st) return st;
    }
    return TKV_OK;
}

tkv_status tkv__grammar_allowed(const tkv_grammar *g, tkv__gmatch *m, uint8_t *allowed, size_t *n) {
    memset(allowed, 0, g->n_vocab);
    *n = 0;
    if (tkv__gmatch_complete(m))
        for (size_t i = 0; i < g->n_vocab; i++)
            if (g->eog[i]) allowed[i] = 1, (*n)++;
    uint32_t partial;
    int pending;
    const tkv__gset *set = tkv__gmatch_state(m, &partial, &pending);
    tkv__gmatch_limit_work(m, TKV__GMATCH_MAX_WALK); /* past it, the allowed set is a subset */
    tkv_status st = walk(g, m, 0, set, partial, pending, allowed, n);
    tkv__gmatch_limit_work(m, SIZE_MAX);
    return st;
}

size_t tkv__grammar_mark_eog(const tkv_grammar *g, uint8_t *allowed) {
    size_t n = 0;
    for (size_t i = 0; i < g->n_vocab; i++)
        if (g->eog[i]) allowed[i] = 1, n++;
    return n;
}
