/*
 * grammar_match.c — running a compiled grammar over UTF-8 bytes.
 *
 * A stack lists the positions (indices in el) still to match, top first;
 * its top is always a character class, or the stack is empty (a whole
 * sentence). A state is a set of distinct stacks plus the partial UTF-8
 * character read so far. Stacks are persistent linked lists: advancing one
 * by a character makes a few new nodes over the old tail. Each node carries
 * a hash of its whole stack, so duplicates are found in O(1) in a small
 * table, and equal stacks compare fast (equal tails are usually the same
 * nodes).
 *
 * Memory: the committed state lives in one of two arenas; each commit
 * copies the new set into the other (sharing preserved, a few nodes) and
 * empties the old one, so a long generation does not accumulate nodes.
 * Trial steps (a token tried, the vocabulary walk) use a scratch arena that
 * is released in LIFO order.
 *
 * A reference whose continuation is the end of its alternative pushes no
 * continuation (a tail call), so `x*`'s helper rule R ::= x R | does not
 * grow the stack with each repetition.
 *
 * Limits (grammar.h) bound every step: stacks in a state, positions in a
 * stack, rule expansions in a step, expansion nesting. What exceeds them is
 * dropped (the grammar then accepts a subset of its language) and
 * tkv__gmatch_overflowed says so.
 */
#include "grammar.h"

#include "base/alloc.h"
#include "base/error.h"

#include <stdlib.h>
#include <string.h>

#define CHUNK 65536
#define TABLE (2 * TKV__GMATCH_MAX_STACKS) /* dedup table slots, a power of two */
#define MAX_NEST 1024                      /* expansion recursion */
#define MEMO 4096                          /* memo slots, a power of two */
#define SEEN 4096                          /* slots of the expansions done in one step, a power of two */

typedef struct gnode {
    uint32_t pos, depth;
    uint64_t hash; /* of the whole stack from this node down */
    const struct gnode *next;
} gnode;

struct tkv__gset {
    uint64_t id; /* unique among all sets this matcher made: the memo's key */
    uint32_t n;
    bool complete; /* holds the empty stack */
    const gnode *v[];
};

typedef struct arena {
    char **chunk;
    size_t n_chunks, cur, used;
} arena;

struct tkv__gmatch {
    const tkv__gbnf *g;
    arena st[2], scratch;
    int cur; /* st[cur] holds the committed state */
    const tkv__gset *set;
    uint32_t partial;
    int pending; /* bytes still to come of the partial character */
    /* the set being built by one step */
    const gnode *tmp[TKV__GMATCH_MAX_STACKS];
    uint32_t n_tmp;
    bool tmp_complete, nomem, overflow;
    bool cut;         /* this step ran out of budget: its outcome is not the grammar's, do not remember it */
    size_t budget;    /* expansions left to this step */
    size_t work_left; /* expansions left to all steps until tkv__gmatch_limit_work is called again */
    uint32_t stamp, slot_stamp[TABLE], slot[TABLE];
    uint64_t next_id;
    struct seen {
        uint32_t stamp, pos;
        const struct gnode *next;
    } seen[SEEN];
    struct memo {
        uint64_t set; /* id; 0: empty slot */
        uint32_t cp;
        bool dead; /* nothing matches; else the set is unchanged by cp */
    } memo[MEMO];
};

/* ---- arenas ------------------------------------------------------------------ */

static void *arena_alloc(arena *a, size_t size) {
    size = (size + 7) & ~(size_t)7;
    if (a->n_chunks == 0 || a->used + size > CHUNK) {
        size_t next = a->n_chunks == 0 ? 0 : a->cur + 1;
        if (next == a->n_chunks) {
            char **v = tkv__realloc(a->chunk, (a->n_chunks + 1) * sizeof *v);
            if (!v) return NULL;
            a->chunk = v;
            if (!(v[a->n_chunks] = tkv__malloc(CHUNK))) return NULL;
            a->n_chunks++;
        }
        a->cur = next, a->used = 0;
    }
    void *p = a->chunk[a->cur] + a->used;
    a->used += size;
    return p;
}

static void arena_free(arena *a) {
    for (size_t i = 0; i < a->n_chunks; i++) tkv__free(a->chunk[i]);
    tkv__free(a->chunk);
    *a = (arena){0};
}

static void arena_clear(arena *a) { a->cur = 0, a->used = 0; }

tkv__gmark tkv__gmatch_mark(const tkv__gmatch *m) { return (tkv__gmark){m->scratch.cur, m->scratch.used}; }

void tkv__gmatch_release(tkv__gmatch *m, tkv__gmark mark) { m->scratch.cur = mark.chunk, m->scratch.used = mark.used; }

/* ---- stacks -------------------------------------------------------------------- */

static uint64_t mix(uint64_t h, uint64_t x) {
    h ^= x + 0x9E3779B97F4A7C15ull + (h << 6) + (h >> 2);
    h *= 0xBF58476D1CE4E5B9ull;
    return h ^ (h >> 31);
}

static const gnode *node(tkv__gmatch *m, arena *a, uint32_t pos, const gnode *next) {
    const uint32_t depth = next ? next->depth + 1 : 1;
    if (depth > TKV__GMATCH_MAX_DEPTH) {
        m->overflow = true;
        return NULL;
    }
    gnode *n = arena_alloc(a, sizeof *n);
    if (!n) {
        m->nomem = true;
        return NULL;
    }
    *n = (gnode){pos, depth, mix(next ? next->hash : 0x5EEDull, pos), next};
    return n;
}

static bool same(const gnode *a, const gnode *b) {
    for (; a != b; a = a->next, b = b->next)
        if (!a || !b || a->pos != b->pos || a->hash != b->hash) return false;
    return true;
}

/* Add the stack (class at pos, then next) to the set being built, unless it is there. */
static void emit(tkv__gmatch *m, arena *a, uint32_t pos, const gnode *next) {
    const uint64_t h = mix(next ? next->hash : 0x5EEDull, pos);
    size_t i = (size_t)h & (TABLE - 1);
    for (; m->slot_stamp[i] == m->stamp; i = (i + 1) & (TABLE - 1)) {
        const gnode *s = m->tmp[m->slot[i]];
        if (s->hash == h && s->pos == pos && same(s->next, next)) return;
    }
    if (m->n_tmp == TKV__GMATCH_MAX_STACKS) {
        m->overflow = true;
        return;
    }
    const gnode *n = node(m, a, pos, next);
    if (!n) return;
    m->slot_stamp[i] = m->stamp;
    m->slot[i] = m->n_tmp;
    m->tmp[m->n_tmp++] = n;
}

static bool at_end(const tkv__gel *e) { return e->type == TKV__GEL_END || e->type == TKV__GEL_ALT; }

/*
 * Whether (pos, next) was expanded before in this step, recording it if not.
 * What an expansion emits depends on nothing else, so a second one adds
 * nothing; without this, nested optional rules (")"??? ... as a rule's
 * continuation) expand the same continuation once per path, exponentially.
 */
static bool seen_before(tkv__gmatch *m, uint32_t pos, const gnode *next) {
    size_t i = (size_t)mix(next ? next->hash : 0x5EEDull, pos) & (SEEN - 1);
    for (int probe = 0; probe < 8; probe++, i = (i + 1) & (SEEN - 1)) {
        struct seen *e = &m->seen[i];
        if (e->stamp != m->stamp) {
            *e = (struct seen){m->stamp, pos, next};
            return false;
        }
        if (e->pos == pos && same(e->next, next)) return true;
    }
    return false; /* the table is crowded here: do the work again */
}

/* Every normalized stack that matching from pos, then next, can start with. */
static void expand(tkv__gmatch *m, arena *a, uint32_t pos, const gnode *next, int nest) {
    const tkv__gbnf *g = m->g;
    for (;;) {
        if (m->nomem) return;
        if (m->budget == 0 || nest > MAX_NEST) {
            m->overflow = true;
            m->cut |= m->budget == 0;
            return;
        }
        m->budget--;
        if (seen_before(m, pos, next)) return;
        const tkv__gel *e = &g->el[pos];
        if (at_end(e)) { /* this rule is done: pop */
            if (!next) {
                m->tmp_complete = true;
                return;
            }
            pos = next->pos, next = next->next;
            continue;
        }
        if (e->type == TKV__GEL_CLASS) {
            emit(m, a, pos, next);
            return;
        }
        const gnode *cont = next; /* TKV__GEL_REF */
        if (!at_end(e + 1) && !(cont = node(m, a, pos + 1, next))) return;
        uint32_t alt = g->rule_start[e->value];
        for (;;) {
            uint32_t end = alt;
            while (!at_end(&g->el[end])) end++;
            if (g->el[end].type == TKV__GEL_END) { /* the last alternative: no recursion needed */
                pos = alt, next = cont;
                break;
            }
            expand(m, a, alt, cont, nest + 1);
            alt = end + 1;
        }
    }
}

static void begin(tkv__gmatch *m) {
    if (++m->stamp == 0) { /* wrapped: old stamps could collide */
        memset(m->slot_stamp, 0, sizeof m->slot_stamp);
        for (size_t i = 0; i < SEEN; i++) m->seen[i].stamp = 0;
        m->stamp = 1;
    }
    m->n_tmp = 0;
    m->tmp_complete = false;
    m->cut = false;
    m->budget = m->work_left < TKV__GMATCH_MAX_EXPAND ? m->work_left : TKV__GMATCH_MAX_EXPAND;
}

static void charge(tkv__gmatch *m, size_t before) {
    const size_t used = before - m->budget;
    if (m->work_left != SIZE_MAX) m->work_left -= used < m->work_left ? used : m->work_left;
}

void tkv__gmatch_limit_work(tkv__gmatch *m, size_t n) { m->work_left = n; }

static const tkv__gset *finish(tkv__gmatch *m, arena *a) {
    if (m->nomem) return NULL;
    tkv__gset *s = arena_alloc(a, sizeof *s + m->n_tmp * sizeof *s->v);
    if (!s) {
        m->nomem = true;
        return NULL;
    }
    s->id = ++m->next_id;
    s->n = m->n_tmp;
    s->complete = m->tmp_complete;
    memcpy(s->v, m->tmp, m->n_tmp * sizeof *s->v);
    return s;
}

/* The set after the character cp; in arena a. */
static const tkv__gset *advance(tkv__gmatch *m, arena *a, const tkv__gset *set, uint32_t cp) {
    const tkv__gbnf *g = m->g;
    begin(m);
    const size_t before = m->budget;
    for (uint32_t i = 0; i < set->n; i++) {
        const gnode *s = set->v[i];
        if (tkv__gclass_has(g, &g->cls[g->el[s->pos].value], cp)) expand(m, a, s->pos + 1, s->next, 0);
    }
    charge(m, before);
    return finish(m, a);
}

/* Whether some stack's class holds a code point in [lo, hi]. */
static bool feasible(const tkv__gmatch *m, const tkv__gset *set, uint32_t lo, uint32_t hi) {
    const tkv__gbnf *g = m->g;
    for (uint32_t i = 0; i < set->n; i++) {
        const tkv__gclass *c = &g->cls[g->el[set->v[i]->pos].value];
        if (!c->n) {
            if (c->negated) return true;
            continue;
        }
        const uint32_t(*r)[2] = g->rng + c->first;
        if (c->negated) { /* the complement misses [lo, hi] only when one range covers it */
            bool covered = false;
            for (uint32_t k = 0; k < c->n && !covered; k++) covered = r[k][0] <= lo && hi <= r[k][1];
            if (!covered) return true;
        } else {
            for (uint32_t k = 0; k < c->n; k++)
                if (r[k][0] <= hi && lo <= r[k][1]) return true;
        }
    }
    return false;
}

/*
 * The partial character: its bits so far, and its whole length in bits 29-30
 * (an overlong or out-of-range encoding is no character: "\xC0\xBC" must
 * not pass for '<').
 */
#define CP_BITS 0x1FFFFFu
static const uint32_t MIN_CP[5] = {0, 0, 0x80, 0x800, 0x10000};

static bool partial_feasible(const tkv__gmatch *m, const tkv__gset *set, uint32_t partial, int pending) {
    const int shift = 6 * pending;
    uint32_t lo = (partial & CP_BITS) << shift, hi = lo | ((1u << shift) - 1);
    const uint32_t min = MIN_CP[partial >> 29];
    if (lo < min) lo = min;
    if (hi > 0x10FFFF) hi = 0x10FFFF;
    if (lo >= 0xD800 && hi <= 0xDFFF) return false; /* only surrogates can follow */
    return lo <= hi && feasible(m, set, lo, hi);
}

tkv_status tkv__gmatch_step(tkv__gmatch *m, const tkv__gset *set, uint32_t *partial, int *pending, uint8_t b,
                            const tkv__gset **next) {
    *next = NULL;
    uint32_t cp;
    if (*pending == 0) {
        if (b < 0x80) cp = b;
        else if (b >= 0xC2 && b <= 0xDF) *partial = 2u << 29 | (b & 0x1Fu), *pending = 1;
        else if ((b & 0xF0) == 0xE0) *partial = 3u << 29 | (b & 0x0Fu), *pending = 2;
        else if (b >= 0xF0 && b <= 0xF4) *partial = 4u << 29 | (b & 0x07u), *pending = 3;
        else return TKV_OK; /* not a UTF-8 lead byte (C0 and C1 only start overlong forms) */
        if (b >= 0x80) {
            if (partial_feasible(m, set, *partial, *pending)) *next = set;
            return TKV_OK;
        }
    } else {
        if ((b & 0xC0) != 0x80) return TKV_OK;
        *partial = (*partial & ~CP_BITS) | (((*partial & CP_BITS) << 6 | (b & 0x3Fu)) & CP_BITS);
        if (--*pending) {
            if (partial_feasible(m, set, *partial, *pending)) *next = set;
            return TKV_OK;
        }
        cp = *partial & CP_BITS;
        const uint32_t min = MIN_CP[*partial >> 29];
        *partial = 0;
        if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return TKV_OK;
    }
    /*
     * Most characters leave a state as it was (any character inside a JSON
     * string) or kill it: remember those two outcomes per (set, character),
     * so the trie walk below such a state costs a look-up per byte. Other
     * outcomes live in scratch memory that is released, so they are not kept.
     */
    struct memo *e = &m->memo[(size_t)(set->id * 0x9E3779B97F4A7C15ull >> 40 ^ cp * 0x85EBCA6Bu) & (MEMO - 1)];
    if (set->id && e->set == set->id && e->cp == cp) {
        if (!e->dead) *next = set;
        return TKV_OK;
    }
    const tkv__gset *s = advance(m, &m->scratch, set, cp);
    if (!s) {
        m->nomem = false;
        return tkv__fail(TKV_ERR_NOMEM, "out of memory matching the grammar");
    }
    bool dead = !s->n && !s->complete, unchanged = !dead && s->n == set->n && s->complete == set->complete;
    for (uint32_t i = 0; unchanged && i < s->n; i++) unchanged = same(s->v[i], set->v[i]);
    if (unchanged) s = set;
    if ((dead || unchanged) && set->id && !m->cut) *e = (struct memo){set->id, cp, dead};
    if (!dead) *next = s;
    return TKV_OK;
}

bool tkv__gset_complete(const tkv__gset *set) { return set->complete; }

static int by_cp(const void *a, const void *b) {
    const uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

/* The characters the probe tries: every class range's first code point and the one past its last (each class
   treats every character between two such boundaries alike), and a few common ones; at most PROBE_CHARS,
   evenly spaced when there are more. Returns how many, in cps. */
#define PROBE_CHARS 256
static size_t probe_chars(const tkv__gbnf *g, uint32_t cps[PROBE_CHARS]) {
    const size_t cap = 2 * g->n_rng + 5;
    uint32_t *all = tkv__malloc(cap * sizeof *all);
    if (!all) return 0;
    size_t n = 0;
    static const uint32_t common[] = {'a', ' ', '0', '"', 0x80};
    for (size_t i = 0; i < 5; i++) all[n++] = common[i];
    for (size_t i = 0; i < g->n_rng; i++) {
        all[n++] = g->rng[i][0];
        if (g->rng[i][1] < 0x10FFFF) all[n++] = g->rng[i][1] + 1;
    }
    qsort(all, n, sizeof *all, by_cp);
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if ((!k || all[i] != all[k - 1]) && !(all[i] >= 0xD800 && all[i] <= 0xDFFF)) all[k++] = all[i];
    const size_t out = k < PROBE_CHARS ? k : PROBE_CHARS;
    for (size_t i = 0; i < out; i++) cps[i] = all[i * k / out];
    tkv__free(all);
    return out;
}

tkv_status tkv__gmatch_probe(tkv__gmatch *m, size_t depth, size_t stop_above, size_t *worst, uint32_t *text,
                             size_t *n_text) {
    uint32_t cps[PROBE_CHARS];
    const size_t n_cps = probe_chars(m->g, cps);
    const tkv__gset *set = m->set;
    *worst = set->n, *n_text = 0;
    size_t worst_at = 0;
    tkv__gmatch_limit_work(m, TKV__GMATCH_MAX_WALK);
    arena_clear(&m->scratch);
    for (size_t d = 0; d < depth && set->n && *worst <= stop_above; d++) {
        uint32_t best_cp = 0;
        uint32_t best_n = 0;
        bool any = false;
        for (size_t i = 0; i < n_cps; i++) {
            const tkv__gmark mark = tkv__gmatch_mark(m);
            const tkv__gset *s = advance(m, &m->scratch, set, cps[i]);
            const bool cut = m->cut;
            tkv__gmatch_release(m, mark);
            if (!s) {
                m->nomem = false;
                arena_clear(&m->scratch);
                m->work_left = SIZE_MAX;
                return tkv__fail(TKV_ERR_NOMEM, "out of memory checking the grammar");
            }
            if (cut) break; /* out of work: what was seen stands */
            if (s->n && (!any || s->n > best_n)) best_cp = cps[i], best_n = s->n, any = true;
        }
        if (!any) break;
        set = advance(m, &m->scratch, set, best_cp); /* kept: the next step starts from it */
        if (!set || m->cut) break;
        text[d] = best_cp;
        if (set->n > *worst) *worst = set->n, worst_at = d + 1;
    }
    *n_text = worst_at;
    m->nomem = false;
    arena_clear(&m->scratch);
    m->work_left = SIZE_MAX;
    return TKV_OK;
}

const tkv__gset *tkv__gmatch_state(const tkv__gmatch *m, uint32_t *partial, int *pending) {
    *partial = m->partial, *pending = m->pending;
    return m->set;
}

/* ---- the matcher ---------------------------------------------------------------- */

static const tkv__gset EMPTY = {0};

tkv_status tkv__gmatch_reset(tkv__gmatch *m) {
    arena_clear(&m->st[0]), arena_clear(&m->st[1]), arena_clear(&m->scratch);
    m->cur = 0;
    m->partial = 0, m->pending = 0;
    m->overflow = false;
    m->work_left = SIZE_MAX;
    begin(m);
    /* every alternative of the start rule (one expand from its first element would take the first only) */
    const tkv__gbnf *g = m->g;
    for (uint32_t alt = g->rule_start[g->root];;) {
        uint32_t end = alt;
        while (!at_end(&g->el[end])) end++;
        expand(m, &m->st[0], alt, NULL, 0);
        if (g->el[end].type == TKV__GEL_END) break;
        alt = end + 1;
    }
    m->set = finish(m, &m->st[0]);
    if (!m->set) {
        m->nomem = false;
        m->set = &EMPTY;
        return tkv__fail(TKV_ERR_NOMEM, "out of memory starting the grammar");
    }
    return TKV_OK;
}

tkv_status tkv__gmatch_create(const tkv__gbnf *g, tkv__gmatch **out) {
    tkv__gmatch *m = tkv__calloc(1, sizeof *m);
    if (!m) return tkv__fail(TKV_ERR_NOMEM, "out of memory for the grammar state");
    m->g = g;
    tkv_status st = tkv__gmatch_reset(m);
    if (st) {
        tkv__gmatch_free(m);
        return st;
    }
    *out = m;
    return TKV_OK;
}

void tkv__gmatch_free(tkv__gmatch *m) {
    if (!m) return;
    arena_free(&m->st[0]), arena_free(&m->st[1]), arena_free(&m->scratch);
    tkv__free(m);
}

/* Copy one stack into arena a, reusing what is already copied (memo: old node -> new, open addressing). */
static const gnode *copy_stack(tkv__gmatch *m, arena *a, const gnode *s, const gnode **memo_old,
                               const gnode **memo_new, size_t mask) {
    const gnode *path[64];
    const gnode *below = NULL;
    size_t n = 0;
    /* find the deepest not-yet-copied run, 64 nodes at a time from the top */
    for (const gnode *x = s; x;) {
        size_t i = (size_t)((uintptr_t)x >> 4) & mask;
        while (memo_old[i] && memo_old[i] != x) i = (i + 1) & mask;
        if (memo_old[i]) {
            below = memo_new[i];
            break;
        }
        if (n == 64) { /* copy the rest first, then come back up */
            below = copy_stack(m, a, x, memo_old, memo_new, mask);
            if (!below) return NULL;
            break;
        }
        path[n++] = x;
        x = x->next;
    }
    while (n--) {
        const gnode *x = path[n];
        gnode *c = arena_alloc(a, sizeof *c);
        if (!c) return NULL;
        *c = (gnode){x->pos, x->depth, x->hash, below};
        size_t i = (size_t)((uintptr_t)x >> 4) & mask;
        while (memo_old[i]) i = (i + 1) & mask;
        memo_old[i] = x, memo_new[i] = c;
        below = c;
    }
    return below;
}

/* Make set (in scratch or the current state) the committed state, in the other arena. */
static tkv_status commit(tkv__gmatch *m, const tkv__gset *set) {
    size_t total = 0;
    for (uint32_t i = 0; i < set->n; i++) total += set->v[i]->depth;
    size_t cap = 64;
    while (cap < 2 * total) cap *= 2;
    const gnode **memo = tkv__calloc(2 * cap, sizeof *memo);
    arena *a = &m->st[1 - m->cur];
    arena_clear(a);
    tkv__gset *s = memo ? arena_alloc(a, sizeof *s + set->n * sizeof *s->v) : NULL;
    bool ok = s != NULL;
    for (uint32_t i = 0; ok && i < set->n; i++) ok = (s->v[i] = copy_stack(m, a, set->v[i], memo, memo + cap, cap - 1));
    tkv__free(memo);
    if (!ok) return tkv__fail(TKV_ERR_NOMEM, "out of memory advancing the grammar");
    s->id = ++m->next_id;
    s->n = set->n;
    s->complete = set->complete;
    m->set = s;
    m->cur = 1 - m->cur;
    return TKV_OK;
}

tkv_status tkv__gmatch_feed(tkv__gmatch *m, const char *bytes, size_t n, bool commit_it, bool *ok) {
    const tkv__gmark mark = tkv__gmatch_mark(m);
    const tkv__gset *set = m->set;
    m->work_left = SIZE_MAX;
    uint32_t partial = m->partial;
    int pending = m->pending;
    tkv_status st = TKV_OK;
    for (size_t i = 0; i < n && set && !st; i++)
        st = tkv__gmatch_step(m, set, &partial, &pending, (uint8_t)bytes[i], &set);
    *ok = !st && set;
    if (*ok && commit_it && n) {
        st = commit(m, set);
        if (st) *ok = false;
        else m->partial = partial, m->pending = pending;
    }
    tkv__gmatch_release(m, mark);
    return st;
}

bool tkv__gmatch_complete(const tkv__gmatch *m) { return m->pending == 0 && m->set->complete; }

bool tkv__gmatch_alive(const tkv__gmatch *m) { return m->set->n > 0 || tkv__gmatch_complete(m); }

bool tkv__gmatch_overflowed(const tkv__gmatch *m) { return m->overflow; }
