/*
 * prefix_index.c — the radix tree of cached prefixes (see prefix_index.h).
 *
 * Children are kept sorted by their first token and found by binary search,
 * so a look-up costs O(length x log(branching)). Sequence ends and pins are
 * recorded as positions in the tree; counts on every node of their paths
 * (refs, pins) make "is anything using this subtree" an O(1) question.
 * Eviction picks the least recently used evictable leaf by a scan of the
 * tree: simple and exact, O(nodes) per evicted node, fine for the node
 * counts of a CPU cache (a heap can replace it when profiles say so).
 */
#include "prefix_index.h"

#include "alloc.h"
#include "error.h"

#include <stdio.h>
#include <string.h>

typedef struct pin_rec {
    tkv__ppos at;
    uint32_t count;
} pin_rec;

struct tkv__pindex {
    tkv__pnode **roots; /* (n_roots) sorted by namespace */
    uint32_t n_roots, cap_roots;
    uint32_t n_seq;
    tkv__ppos *seq; /* (n_seq) each sequence's end */
    pin_rec *pins;
    uint32_t n_pins, cap_pins;
    uint64_t clock;
};

/* ---- nodes -------------------------------------------------------------- */

static tkv__pnode *node_new(uint64_t ns, tkv__pnode *parent, uint32_t depth, uint32_t cap) {
    tkv__pnode *nd = tkv__calloc(1, sizeof *nd);
    if (!nd) return NULL;
    nd->ns = ns;
    nd->parent = parent;
    nd->depth = depth;
    if (cap) {
        nd->tokens = tkv__malloc(cap * sizeof *nd->tokens);
        nd->cells = tkv__malloc(cap * sizeof *nd->cells);
        if (!nd->tokens || !nd->cells) {
            tkv__free(nd->tokens);
            tkv__free(nd->cells);
            tkv__free(nd);
            return NULL;
        }
        nd->cap = cap;
    }
    return nd;
}

static void node_free(tkv__pnode *nd) {
    tkv__free(nd->tokens);
    tkv__free(nd->cells);
    tkv__free(nd->child);
    tkv__free(nd);
}

/* Index of the child starting with `token`, or where it would go. */
static uint32_t child_slot(const tkv__pnode *nd, tkv_token token, bool *found) {
    uint32_t lo = 0, hi = nd->n_child;
    while (lo < hi) {
        uint32_t mid = (lo + hi) / 2;
        tkv_token t = nd->child[mid]->tokens[0];
        if (t < token) lo = mid + 1;
        else hi = mid;
    }
    *found = lo < nd->n_child && nd->child[lo]->tokens[0] == token;
    return lo;
}

static tkv__pnode *child_find(const tkv__pnode *nd, tkv_token token) {
    bool found;
    uint32_t i = child_slot(nd, token, &found);
    return found ? nd->child[i] : NULL;
}

/* Room for one more child; TKV_ERR_NOMEM leaves the node as it was. */
static tkv_status child_reserve(tkv__pnode *nd) {
    if (nd->n_child < nd->cap_child) return TKV_OK;
    uint32_t cap = nd->cap_child ? 2 * nd->cap_child : 4;
    tkv__pnode **c = tkv__realloc(nd->child, cap * sizeof *c);
    if (!c) return TKV_ERR_NOMEM;
    nd->child = c;
    nd->cap_child = cap;
    return TKV_OK;
}

/* Insert `c` (room reserved) among nd's children. */
static void child_add(tkv__pnode *nd, tkv__pnode *c) {
    bool found;
    uint32_t i = child_slot(nd, c->tokens[0], &found);
    memmove(nd->child + i + 1, nd->child + i, (nd->n_child - i) * sizeof *nd->child);
    nd->child[i] = c;
    nd->n_child++;
    c->parent = nd;
}

static void child_remove(tkv__pnode *nd, const tkv__pnode *c) {
    bool found;
    uint32_t i = child_slot(nd, c->tokens[0], &found);
    memmove(nd->child + i, nd->child + i + 1, (nd->n_child - i - 1) * sizeof *nd->child);
    nd->n_child--;
}

static void add_refs(tkv__pnode *nd, int delta) {
    for (; nd; nd = nd->parent) nd->refs = (uint32_t)((int64_t)nd->refs + delta);
}

static void add_pins(tkv__pnode *nd, int delta) {
    for (; nd; nd = nd->parent) nd->pins = (uint32_t)((int64_t)nd->pins + delta);
}

/* ---- the index ---------------------------------------------------------- */

tkv_status tkv__pindex_create(uint32_t n_seq, tkv__pindex **out) {
    tkv__pindex *ix = tkv__calloc(1, sizeof *ix);
    if (!ix) return tkv__fail(TKV_ERR_NOMEM, "out of memory for the prefix index");
    ix->n_seq = n_seq;
    ix->seq = tkv__calloc(n_seq ? n_seq : 1, sizeof *ix->seq);
    if (!ix->seq) {
        tkv__free(ix);
        return tkv__fail(TKV_ERR_NOMEM, "out of memory for the prefix index");
    }
    *out = ix;
    return TKV_OK;
}

static void free_subtree(tkv__pnode *nd) {
    for (uint32_t i = 0; i < nd->n_child; i++) free_subtree(nd->child[i]);
    node_free(nd);
}

void tkv__pindex_free(tkv__pindex *ix) {
    if (!ix) return;
    for (uint32_t i = 0; i < ix->n_roots; i++) free_subtree(ix->roots[i]);
    tkv__free(ix->roots);
    tkv__free(ix->seq);
    tkv__free(ix->pins);
    tkv__free(ix);
}

static tkv__pnode *root_find(const tkv__pindex *ix, uint64_t ns, uint32_t *slot) {
    uint32_t lo = 0, hi = ix->n_roots;
    while (lo < hi) {
        uint32_t mid = (lo + hi) / 2;
        if (ix->roots[mid]->ns < ns) lo = mid + 1;
        else hi = mid;
    }
    if (slot) *slot = lo;
    return lo < ix->n_roots && ix->roots[lo]->ns == ns ? ix->roots[lo] : NULL;
}

static tkv__pnode *root_get(tkv__pindex *ix, uint64_t ns) {
    uint32_t slot;
    tkv__pnode *r = root_find(ix, ns, &slot);
    if (r) return r;
    if (ix->n_roots == ix->cap_roots) {
        uint32_t cap = ix->cap_roots ? 2 * ix->cap_roots : 4;
        tkv__pnode **roots = tkv__realloc(ix->roots, cap * sizeof *roots);
        if (!roots) return NULL;
        ix->roots = roots;
        ix->cap_roots = cap;
    }
    if (!(r = node_new(ns, NULL, 0, 0))) return NULL;
    memmove(ix->roots + slot + 1, ix->roots + slot, (ix->n_roots - slot) * sizeof *ix->roots);
    ix->roots[slot] = r;
    ix->n_roots++;
    return r;
}

size_t tkv__pindex_match(tkv__pindex *ix, uint64_t ns, const tkv_token *tokens, size_t n, bool touch, tkv__ppos *at) {
    *at = (tkv__ppos){NULL, 0};
    tkv__pnode *cur = root_find(ix, ns, NULL);
    size_t len = 0;
    const uint64_t now = touch ? ++ix->clock : 0;
    while (cur && len < n) {
        tkv__pnode *c = child_find(cur, tokens[len]);
        if (!c) break;
        uint32_t k = 0;
        while (k < c->n && len + k < n && c->tokens[k] == tokens[len + k]) k++;
        len += k;
        *at = (tkv__ppos){c, k};
        if (touch) c->last_use = now, c->hits++;
        if (k < c->n) break;
        cur = c;
    }
    return len;
}

void tkv__pindex_cells(const tkv__ppos *at, uint32_t *out) {
    uint32_t take = at->off;
    for (const tkv__pnode *nd = at->node; nd && nd->parent; nd = nd->parent) {
        memcpy(out + nd->depth, nd->cells, take * sizeof *out);
        if (nd->parent) take = nd->parent->n;
    }
}

tkv__ppos tkv__pindex_ancestor(tkv__ppos at, uint32_t len) {
    tkv__pnode *nd = at.node;
    if (len == 0 || !nd) return (tkv__ppos){NULL, 0};
    while (nd->depth >= len) nd = nd->parent;
    return (tkv__ppos){nd, len - nd->depth};
}

/* ---- positions that move when a node splits ----------------------------- */

/* Split nd after `off` tokens (0 < off < n): the tail becomes its only child. */
static tkv_status split(tkv__pindex *ix, tkv__pnode *nd, uint32_t off) {
    tkv__pnode *tail = node_new(nd->ns, nd, nd->depth + off, nd->n - off);
    if (!tail) return TKV_ERR_NOMEM;
    tkv__pnode **one = tkv__malloc(4 * sizeof *one);
    if (!one) {
        node_free(tail);
        return TKV_ERR_NOMEM;
    }
    tail->n = nd->n - off;
    memcpy(tail->tokens, nd->tokens + off, tail->n * sizeof *tail->tokens);
    memcpy(tail->cells, nd->cells + off, tail->n * sizeof *tail->cells);
    tail->child = nd->child;
    tail->n_child = nd->n_child;
    tail->cap_child = nd->cap_child;
    for (uint32_t i = 0; i < tail->n_child; i++) tail->child[i]->parent = tail;
    tail->last_use = nd->last_use;
    tail->hits = nd->hits;
    nd->n = off;
    nd->child = one;
    nd->cap_child = 4;
    nd->n_child = 0;
    child_add(nd, tail);
    /* ends past the split point move to the tail; the counts follow */
    tail->refs = tail->pins = 0;
    for (uint32_t i = 0; i < tail->n_child; i++) tail->refs += tail->child[i]->refs, tail->pins += tail->child[i]->pins;
    for (uint32_t s = 0; s < ix->n_seq; s++)
        if (ix->seq[s].node == nd && ix->seq[s].off > off) ix->seq[s] = (tkv__ppos){tail, ix->seq[s].off - off}, tail->refs++;
    for (uint32_t p = 0; p < ix->n_pins; p++)
        if (ix->pins[p].at.node == nd && ix->pins[p].at.off > off) {
            ix->pins[p].at = (tkv__ppos){tail, ix->pins[p].at.off - off};
            tail->pins += ix->pins[p].count;
        }
    return TKV_OK;
}

/* Grow nd's run by n tokens. */
static tkv_status extend(tkv__pnode *nd, const tkv_token *tokens, const uint32_t *cells, uint32_t n) {
    if (nd->n + n > nd->cap) {
        uint32_t cap = nd->cap ? nd->cap : 16;
        while (cap < nd->n + n) cap *= 2;
        tkv_token *t = tkv__realloc(nd->tokens, cap * sizeof *t);
        if (!t) return TKV_ERR_NOMEM;
        nd->tokens = t;
        uint32_t *c = tkv__realloc(nd->cells, cap * sizeof *c);
        if (!c) return TKV_ERR_NOMEM;
        nd->cells = c;
        nd->cap = cap;
    }
    memcpy(nd->tokens + nd->n, tokens, n * sizeof *tokens);
    memcpy(nd->cells + nd->n, cells, n * sizeof *cells);
    nd->n += n;
    return TKV_OK;
}

tkv_status tkv__pindex_insert(tkv__pindex *ix, uint64_t ns, tkv__ppos from, const tkv_token *tokens, uint32_t *cells,
                              uint32_t n, tkv__ppos *to, uint32_t *dup, uint32_t *n_dup) {
    *n_dup = 0;
    tkv__pnode *P = from.node ? from.node : root_get(ix, ns);
    if (!P) return tkv__fail(TKV_ERR_NOMEM, "out of memory growing the prefix index");
    uint32_t o = from.node ? from.off : 0, i = 0;
    const uint64_t now = ++ix->clock;
    tkv_status st = TKV_OK;
    while (i < n && !st) {
        if (o < P->n) { /* inside a run: the tree already goes on */
            if (P->tokens[o] == tokens[i]) {
                dup[(*n_dup)++] = cells[i];
                cells[i++] = P->cells[o++];
                continue;
            }
            if ((st = split(ix, P, o))) break;
        }
        tkv__pnode *c = child_find(P, tokens[i]);
        if (c) {
            P = c, o = 0;
            P->last_use = now;
            continue;
        }
        if (P->parent && P->n_child == 0) { /* a leaf grows in place */
            if ((st = extend(P, tokens + i, cells + i, n - i))) break;
        } else {
            tkv__pnode *nn = node_new(ns, P, P->depth + P->n, n - i);
            if (!nn || (st = child_reserve(P))) {
                if (nn) node_free(nn);
                st = TKV_ERR_NOMEM;
                break;
            }
            nn->n = n - i;
            memcpy(nn->tokens, tokens + i, nn->n * sizeof *tokens);
            memcpy(nn->cells, cells + i, nn->n * sizeof *cells);
            child_add(P, nn);
            P = nn;
        }
        P->last_use = now;
        o = P->n;
        i = n;
    }
    if (st) return tkv__fail(TKV_ERR_NOMEM, "out of memory growing the prefix index");
    *to = P->parent ? (tkv__ppos){P, o} : (tkv__ppos){NULL, 0};
    return TKV_OK;
}

/* ---- sequences and pins ------------------------------------------------- */

tkv__ppos tkv__pindex_seq_end(const tkv__pindex *ix, tkv_seq seq) { return ix->seq[seq]; }

void tkv__pindex_seq_set(tkv__pindex *ix, tkv_seq seq, tkv__ppos at) {
    add_refs(at.node, +1); /* first: the old path may share nodes with the new */
    add_refs(ix->seq[seq].node, -1);
    ix->seq[seq] = at;
}

tkv_status tkv__pindex_pin(tkv__pindex *ix, tkv__ppos at, int delta) {
    if (!at.node) return TKV_OK;
    for (uint32_t p = 0; p < ix->n_pins; p++) {
        if (ix->pins[p].at.node != at.node || ix->pins[p].at.off != at.off) continue;
        if (delta < 0 && (uint32_t)-delta > ix->pins[p].count) delta = -(int)ix->pins[p].count;
        ix->pins[p].count = (uint32_t)((int64_t)ix->pins[p].count + delta);
        add_pins(at.node, delta);
        if (ix->pins[p].count == 0) ix->pins[p] = ix->pins[--ix->n_pins];
        return TKV_OK;
    }
    if (delta <= 0) return TKV_OK;
    if (ix->n_pins == ix->cap_pins) {
        uint32_t cap = ix->cap_pins ? 2 * ix->cap_pins : 8;
        pin_rec *p = tkv__realloc(ix->pins, cap * sizeof *p);
        if (!p) return tkv__fail(TKV_ERR_NOMEM, "out of memory pinning a prefix");
        ix->pins = p;
        ix->cap_pins = cap;
    }
    ix->pins[ix->n_pins++] = (pin_rec){at, (uint32_t)delta};
    add_pins(at.node, delta);
    return TKV_OK;
}

/* ---- eviction ----------------------------------------------------------- */

static bool evictable(const tkv__pnode *nd) { return nd->parent && nd->n_child == 0 && nd->refs == 0 && nd->pins == 0; }

static void lru_leaf(tkv__pnode *nd, tkv__pnode **best) {
    if (evictable(nd) && (!*best || nd->last_use < (*best)->last_use)) *best = nd;
    for (uint32_t i = 0; i < nd->n_child; i++) lru_leaf(nd->child[i], best);
}

static uint32_t remove_leaf(tkv__pnode *nd, uint32_t *out) {
    uint32_t n = nd->n;
    memcpy(out, nd->cells, n * sizeof *out);
    child_remove(nd->parent, nd);
    node_free(nd);
    return n;
}

uint32_t tkv__pindex_evict(tkv__pindex *ix, uint32_t want, uint32_t *out) {
    uint32_t freed = 0;
    while (freed < want) {
        tkv__pnode *best = NULL;
        for (uint32_t r = 0; r < ix->n_roots; r++) lru_leaf(ix->roots[r], &best);
        if (!best) break;
        freed += remove_leaf(best, out + freed);
    }
    return freed;
}

static uint32_t evict_below(tkv__pnode *nd, uint32_t *out) {
    uint32_t freed = 0;
    for (uint32_t i = nd->n_child; i-- > 0;) freed += evict_below(nd->child[i], out + freed);
    if (evictable(nd)) freed += remove_leaf(nd, out + freed);
    return freed;
}

uint32_t tkv__pindex_evict_all(tkv__pindex *ix, uint32_t *out) {
    uint32_t freed = 0;
    for (uint32_t r = 0; r < ix->n_roots; r++) freed += evict_below(ix->roots[r], out + freed);
    return freed;
}

/* ---- introspection ------------------------------------------------------ */

static void visit(const tkv__pnode *nd, void (*fn)(const tkv__pnode *, void *), void *user) {
    fn(nd, user);
    for (uint32_t i = 0; i < nd->n_child; i++) visit(nd->child[i], fn, user);
}

void tkv__pindex_foreach(const tkv__pindex *ix, void (*fn)(const tkv__pnode *node, void *user), void *user) {
    for (uint32_t r = 0; r < ix->n_roots; r++) visit(ix->roots[r], fn, user);
}

static void count(const tkv__pnode *nd, void *user) {
    tkv__pindex_stats *st = user;
    if (!nd->parent) return;
    st->nodes++;
    st->cells += nd->n;
    if (nd->refs == 0 && nd->pins == 0) st->evictable_cells += nd->n;
    if (nd->pins) st->pinned_cells += nd->n;
}

void tkv__pindex_stats_get(const tkv__pindex *ix, tkv__pindex_stats *st) {
    memset(st, 0, sizeof *st);
    tkv__pindex_foreach(ix, count, st);
}

typedef struct check_state {
    const tkv__pindex *ix;
    tkv_status st;
} check_state;

/* How many sequence ends / pins lie in the subtree of nd. */
static bool in_subtree(const tkv__pnode *nd, const tkv__pnode *at) {
    for (; at; at = at->parent)
        if (at == nd) return true;
    return false;
}

static void check_node(const tkv__pnode *nd, void *user) {
    check_state *cs = user;
    if (cs->st) return;
    const tkv__pnode *p = nd->parent;
    if (p) {
        if (nd->n == 0) cs->st = tkv__fail(TKV_ERR_FORMAT, "prefix index: an empty node at depth %u", nd->depth);
        else if (nd->depth != p->depth + p->n)
            cs->st = tkv__fail(TKV_ERR_FORMAT, "prefix index: node at depth %u under a run ending at %u", nd->depth,
                               p->depth + p->n);
        else if (nd->ns != p->ns) cs->st = tkv__fail(TKV_ERR_FORMAT, "prefix index: a node changes namespace");
        else if (child_find(p, nd->tokens[0]) != nd)
            cs->st = tkv__fail(TKV_ERR_FORMAT, "prefix index: node at depth %u is not found from its parent", nd->depth);
    }
    for (uint32_t i = 1; i < nd->n_child && !cs->st; i++)
        if (nd->child[i - 1]->tokens[0] >= nd->child[i]->tokens[0])
            cs->st = tkv__fail(TKV_ERR_FORMAT, "prefix index: children at depth %u not sorted or not distinct",
                               nd->depth + nd->n);
    if (cs->st) return;
    uint32_t refs = 0, pins = 0;
    for (uint32_t s = 0; s < cs->ix->n_seq; s++) refs += in_subtree(nd, cs->ix->seq[s].node);
    for (uint32_t q = 0; q < cs->ix->n_pins; q++) pins += in_subtree(nd, cs->ix->pins[q].at.node) ? cs->ix->pins[q].count : 0;
    if (refs != nd->refs)
        cs->st = tkv__fail(TKV_ERR_FORMAT, "prefix index: node at depth %u counts %u sequences, %u end below it",
                           nd->depth, nd->refs, refs);
    else if (pins != nd->pins)
        cs->st = tkv__fail(TKV_ERR_FORMAT, "prefix index: node at depth %u counts %u pins, %u lie below it", nd->depth,
                           nd->pins, pins);
}

tkv_status tkv__pindex_check(const tkv__pindex *ix) {
    check_state cs = {ix, TKV_OK};
    for (uint32_t s = 0; s < ix->n_seq && !cs.st; s++) {
        tkv__ppos e = ix->seq[s];
        if (e.node && (e.off == 0 || e.off > e.node->n || !e.node->parent))
            cs.st = tkv__fail(TKV_ERR_FORMAT, "prefix index: sequence %u ends at offset %u of a %u-token node", s, e.off,
                              e.node->n);
    }
    for (uint32_t r = 1; r < ix->n_roots && !cs.st; r++)
        if (ix->roots[r - 1]->ns >= ix->roots[r]->ns) cs.st = tkv__fail(TKV_ERR_FORMAT, "prefix index: roots not sorted");
    if (!cs.st) tkv__pindex_foreach(ix, check_node, &cs);
    return cs.st;
}
