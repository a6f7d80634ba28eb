/*
 * grammar.h — GBNF grammars for constrained sampling (internal).
 *
 * Three parts:
 *   - grammar_parse.c compiles GBNF text (llama.cpp's dialect) into flat
 *     rules: each rule is its alternatives one after the other, each ended
 *     by GEL_ALT, the last by GEL_END. Repetitions become helper rules, a
 *     literal becomes one single-character class per character.
 *   - grammar_match.c runs a compiled grammar over UTF-8 bytes: the state
 *     is a set of stacks of positions still to match (persistent linked
 *     stacks in arenas, shared tails, deduplicated) plus the partial UTF-8
 *     character carried over between byte runs.
 *   - grammar_vocab.c is tkv_grammar: a compiled grammar plus a byte trie of
 *     the vocabulary's token pieces, walked depth first to find every token
 *     that keeps the text inside the grammar.
 */
#ifndef TKV_GRAMMAR_H
#define TKV_GRAMMAR_H

#include "tokenkv.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum { TKV__GEL_END, TKV__GEL_ALT, TKV__GEL_REF, TKV__GEL_CLASS };

typedef struct tkv__gel {
    uint8_t type;   /* TKV__GEL_* */
    uint32_t value; /* REF: rule id; CLASS: class id */
} tkv__gel;

/* A set of code points: the union of ranges, or its complement. */
typedef struct tkv__gclass {
    uint32_t first, n; /* ranges rng[first .. first + n), sorted, disjoint */
    bool negated;
} tkv__gclass;

typedef struct tkv__gbnf {
    tkv__gel *el;          /* (n_el) all rules, back to back */
    size_t n_el;
    uint32_t *rule_start;  /* (n_rules) index in el of each rule's first element */
    size_t n_rules;
    tkv__gclass *cls;      /* (n_cls) */
    size_t n_cls;
    uint32_t (*rng)[2];    /* (n_rng) inclusive code point ranges */
    size_t n_rng;
    uint32_t root;
} tkv__gbnf;

/* Limits that keep every grammar bounded (tkv_grammar_create documents them). */
#define TKV__GBNF_MAX_REPEAT 2000u      /* the m and n of {m,n} */
#define TKV__GBNF_MAX_ELEMENTS (1u << 20)
#define TKV__GBNF_MAX_RULES (1u << 16)
#define TKV__GBNF_MAX_NESTING 256       /* parentheses */
#define TKV__GMATCH_MAX_STACKS 512      /* stacks in one state */
#define TKV__GMATCH_MAX_DEPTH 2048      /* positions in one stack */
#define TKV__GMATCH_MAX_EXPAND 65536    /* rule expansions in one step */
#define TKV__GMATCH_MAX_WALK (1u << 22) /* rule expansions in one vocabulary walk */
#define TKV__GRAMMAR_MAX_PARSES 64      /* stacks a state may reach (tkv_grammar_create's probe) */
#define TKV__GRAMMAR_PROBE_DEPTH 64     /* characters the probe reads */

/*
 * Compile `len` bytes of GBNF; root names the start rule (NULL: "root").
 * TKV_ERR_INVALID with "grammar line L column C: ..." for a syntax error, an
 * undefined rule, left recursion, a missing start rule, a grammar over the
 * limits; TKV_ERR_NOMEM.
 */
tkv_status tkv__gbnf_compile(const char *text, size_t len, const char *root, tkv__gbnf **out);
void tkv__gbnf_free(tkv__gbnf *g);

static inline bool tkv__gclass_has(const tkv__gbnf *g, const tkv__gclass *c, uint32_t cp) {
    if (!c->n) return c->negated; /* `.`; a grammar of dots only has no ranges at all */
    const uint32_t(*r)[2] = g->rng + c->first;
    size_t lo = 0, hi = c->n; /* first range whose upper end >= cp */
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (r[mid][1] < cp) lo = mid + 1;
        else hi = mid;
    }
    return (lo < c->n && r[lo][0] <= cp) != c->negated;
}

/* ---- the matcher ---------------------------------------------------------- */

typedef struct tkv__gmatch tkv__gmatch;

/* A matcher at the start of the grammar's start rule. TKV_ERR_NOMEM. */
tkv_status tkv__gmatch_create(const tkv__gbnf *g, tkv__gmatch **out);
void tkv__gmatch_free(tkv__gmatch *m);
/* Back to the start. TKV_ERR_NOMEM (the matcher is then empty: nothing matches). */
tkv_status tkv__gmatch_reset(tkv__gmatch *m);

/*
 * Feed bytes. *ok says whether the text so far followed by them is still a
 * prefix of a sentence (a trailing incomplete UTF-8 character counts when
 * some completion of it could match). With commit and *ok the state
 * advances; otherwise it is unchanged. TKV_ERR_NOMEM (state unchanged).
 */
tkv_status tkv__gmatch_feed(tkv__gmatch *m, const char *bytes, size_t n, bool commit, bool *ok);

/* The text so far is a whole sentence (no partial character pending). */
bool tkv__gmatch_complete(const tkv__gmatch *m);
/* Some continuation (or the end) is still possible. */
bool tkv__gmatch_alive(const tkv__gmatch *m);
/* A limit (stacks, depth, expansions) dropped stacks since the last reset. */
bool tkv__gmatch_overflowed(const tkv__gmatch *m);

/*
 * The trie walk's view of the matcher (grammar_vocab.c): a stack set and a
 * partial character, advanced in the matcher's scratch arena, released in
 * LIFO order with mark/release.
 */
typedef struct tkv__gset tkv__gset;
typedef struct tkv__gmark {
    size_t chunk, used;
} tkv__gmark;
const tkv__gset *tkv__gmatch_state(const tkv__gmatch *m, uint32_t *partial, int *pending);
tkv__gmark tkv__gmatch_mark(const tkv__gmatch *m);
void tkv__gmatch_release(tkv__gmatch *m, tkv__gmark mark);
/*
 * Advance set by one byte under the partial character (partial, pending);
 * *next is NULL when nothing matches. TKV_ERR_NOMEM.
 */
tkv_status tkv__gmatch_step(tkv__gmatch *m, const tkv__gset *set, uint32_t *partial, int *pending, uint8_t byte,
                            const tkv__gset **next);
/*
 * Cap the expansions of the steps from now on (the vocabulary walk: a
 * pathological grammar must not make one sampling step take minutes);
 * tkv__gmatch_feed and tkv__gmatch_reset lift the cap.
 */
void tkv__gmatch_limit_work(tkv__gmatch *m, size_t n);
/*
 * The ambiguity probe (tkv_grammar_create), from m's state: a greedy walk of
 * `depth` characters, each the one (among the grammar's class boundaries)
 * that leaves the most stacks, until a state holds more than stop_above.
 * *worst: the most stacks seen (at the start too); text[0 .. *n_text) the
 * characters read when it was seen (text has room for depth). Bounded by
 * TKV__GMATCH_MAX_WALK expansions; m's state is unchanged. TKV_ERR_NOMEM.
 */
tkv_status tkv__gmatch_probe(tkv__gmatch *m, size_t depth, size_t stop_above, size_t *worst, uint32_t *text,
                             size_t *n_text);
/* The set holds a finished stack (the text is a whole sentence). */
bool tkv__gset_complete(const tkv__gset *set);

/* ---- the grammar over a vocabulary (tkv_grammar) --------------------------- */

/*
 * A grammar for a vocabulary given as pieces (tests and the fuzzer use it
 * without a model): pieces[i] of lens[i] bytes is token i's text (empty:
 * never allowed as text), eog[i] marks end-of-generation tokens.
 */
tkv_status tkv__grammar_create_vocab(const char *gbnf, size_t len, const char *root, size_t n_vocab,
                                     const char *const *pieces, const size_t *lens, const bool *eog,
                                     tkv_grammar **out);
size_t tkv__grammar_n_vocab(const tkv_grammar *g);
const tkv__gbnf *tkv__grammar_gbnf(const tkv_grammar *g);
/* A hash of what decides which tokens g allows after which (its text, root and vocabulary): two grammars of one id
   allow the same tokens after the same tokens (the sampler's key, runtime/sampler.h). */
uint64_t tkv__grammar_id(const tkv_grammar *g);

/*
 * Whether token may come next in m's state; with commit and *ok, m advances
 * past it (an EOG token leaves m as it is). TKV_ERR_NOMEM.
 */
tkv_status tkv__grammar_token(const tkv_grammar *g, tkv__gmatch *m, tkv_token token, bool commit, bool *ok);

/*
 * allowed[i] = 1 for every token that may come next, 0 for the others
 * (EOG tokens when m is complete); *n the number allowed. m is unchanged.
 * TKV_ERR_NOMEM.
 */
tkv_status tkv__grammar_allowed(const tkv_grammar *g, tkv__gmatch *m, uint8_t *allowed, size_t *n);

/* Set allowed[i] = 1 for every end-of-generation token; returns their number. */
size_t tkv__grammar_mark_eog(const tkv_grammar *g, uint8_t *allowed);

#endif
