/*
 * prefix_index.c — the radix tree of cached prefixes (see prefix_index.h).
 *
 * Storage, all sized at creation:
 *   node[]   a pool of 2 n_cells + 1 nodes (a non-root node holds at least
 *            one cell; a root exists only while it has children, plus the
 *            one an insert is about to fill);
 *   next[]   per cell: the next cell of the same run (runs are linked
 *            lists of cells, so growing and splitting move no memory);
 *   tok[]    per cell: its token, the KV cache's array (kvcache.h owns and
 *            writes it; the index only reads it, so each token is stored once);
 *   child    an open-addressing table (parent, first token) -> child, so a
 *            look-up costs O(1) per node and O(length) per prefix;
 *   roots    an open-addressing table namespace -> root.
 * Sequence ends and pins are positions in the tree; counts on every node of
 * their paths (refs, pins) answer "is anything using this subtree" in O(1).
 * Eviction picks the least recently used evictable leaf by a scan of the
 * tree: exact and simple; a heap can replace it when profiles ask.
 */
#include "prefix_index.h"

#include "base/alloc.h"
#include "base/error.h"

#include <assert.h>
#include <string.h>

#define NONE TKV__PNONE

typedef struct pin_rec {
    tkv__ppos at;
    uint32_t count;
    uint64_t id; /* 0: counted holds of one position (tkv__pindex_pin); else one handle's pin (tkv__pindex_pin_id) */
} pin_rec;

typedef struct child_slot {
    uint32_t parent; /* NONE: empty */
    tkv_token token;
    uint32_t child;
} child_slot;

typedef struct root_slot {
    uint64_t ns;
    uint32_t root; /* NONE: empty */
} root_slot;

struct tkv__pindex {
    uint32_t n_cells, n_nodes;
    tkv__pnode *node;    /* (n_nodes) */
    uint32_t *free_node; /* stack of free node ids */
    uint32_t n_free_node;
    uint32_t *next;      /* (n_cells) */
    const tkv_token *tok; /* (n_cells) the cache's, read only */
    child_slot *tab;
    uint32_t tab_mask;
    root_slot *roots;
    uint32_t roots_mask;
    uint32_t n_seq;
    tkv__ppos *seq;      /* (n_seq) */
    pin_rec *pins;
    uint32_t n_pins, cap_pins;
    uint64_t clock;
};

static uint64_t mix(uint64_t x) {
    x ^= x >> 31;
    x *= 0x7fb5d329728ea185ull;
    x ^= x >> 27;
    x *= 0x81dadef4bc2dd44dull;
    return x ^ (x >> 33);
}

/* ---- the child table ------------------------------------------------------ */

static uint32_t child_home(const tkv__pindex *ix, uint32_t parent, tkv_token t) {
    return (uint32_t)mix((uint64_t)parent << 32 | (uint32_t)t) & ix->tab_mask;
}

static uint32_t child_get(const tkv__pindex *ix, uint32_t parent, tkv_token t) {
    for (uint32_t i = child_home(ix, parent, t);; i = (i + 1) & ix->tab_mask) {
        const child_slot *s = &ix->tab[i];
        if (s->parent == NONE) return NONE;
        if (s->parent == parent && s->token == t) return s->child;
    }
}

static void child_put(tkv__pindex *ix, uint32_t parent, tkv_token t, uint32_t child) {
    uint32_t i = child_home(ix, parent, t);
    while (ix->tab[i].parent != NONE) i = (i + 1) & ix->tab_mask;
    ix->tab[i] = (child_slot){parent, t, child};
}

/* Remove an entry, shifting later entries of the probe run back (no tombstones). */
static void child_del(tkv__pindex *ix, uint32_t parent, tkv_token t) {
    uint32_t i = child_home(ix, parent, t);
    while (!(ix->tab[i].parent == parent && ix->tab[i].token == t)) i = (i + 1) & ix->tab_mask;
    for (uint32_t j = i;;) {
        ix->tab[i].parent = NONE;
        for (;;) {
            j = (j + 1) & ix->tab_mask;
            if (ix->tab[j].parent == NONE) return;
            uint32_t k = child_home(ix, ix->tab[j].parent, ix->tab[j].token);
            /* the entry at j may move to i unless its home lies cyclically in (i, j] */
            bool stays = i <= j ? (i < k && k <= j) : (i < k || k <= j);
            if (!stays) break;
        }
        ix->tab[i] = ix->tab[j];
        i = j;
    }
}

/* ---- the root table ------------------------------------------------------- */

static uint32_t root_home(const tkv__pindex *ix, uint64_t ns) { return (uint32_t)mix(ns ^ 0x5bd1e995u) & ix->roots_mask; }

static uint32_t root_find(const tkv__pindex *ix, uint64_t ns) {
    for (uint32_t i = root_home(ix, ns);; i = (i + 1) & ix->roots_mask) {
        if (ix->roots[i].root == NONE) return NONE;
        if (ix->roots[i].ns == ns) return ix->roots[i].root;
    }
}

static void root_del(tkv__pindex *ix, uint64_t ns) {
    uint32_t i = root_home(ix, ns);
    while (ix->roots[i].ns != ns || ix->roots[i].root == NONE) i = (i + 1) & ix->roots_mask;
    for (uint32_t j = i;;) {
        ix->roots[i].root = NONE;
        for (;;) {
            j = (j + 1) & ix->roots_mask;
            if (ix->roots[j].root == NONE) return;
            uint32_t k = root_home(ix, ix->roots[j].ns);
            bool stays = i <= j ? (i < k && k <= j) : (i < k || k <= j);
            if (!stays) break;
        }
        ix->roots[i] = ix->roots[j];
        i = j;
    }
}

/* ---- nodes ---------------------------------------------------------------- */

static uint32_t node_new(tkv__pindex *ix, uint64_t ns, uint32_t parent, uint32_t depth) {
    uint32_t id = ix->free_node[--ix->n_free_node]; /* the pool is sized so this never runs dry */
    ix->node[id] = (tkv__pnode){.parent = parent, .first_child = NONE, .next_sibling = NONE, .ns = ns,
                                .depth = depth, .first_cell = NONE, .last_cell = NONE, .live = true};
    return id;
}

static void node_release(tkv__pindex *ix, uint32_t id) {
    ix->node[id].live = false;
    ix->free_node[ix->n_free_node++] = id;
}

static uint32_t root_get(tkv__pindex *ix, uint64_t ns) {
    uint32_t r = root_find(ix, ns);
    if (r != NONE) return r;
    r = node_new(ix, ns, NONE, 0);
    uint32_t i = root_home(ix, ns);
    while (ix->roots[i].root != NONE) i = (i + 1) & ix->roots_mask;
    ix->roots[i] = (root_slot){ns, r};
    return r;
}

/* Link child c (its run already set) under parent p. */
static void attach(tkv__pindex *ix, uint32_t p, uint32_t c) {
    tkv__pnode *P = &ix->node[p], *C = &ix->node[c];
    C->parent = p;
    C->next_sibling = P->first_child;
    P->first_child = c;
    child_put(ix, p, ix->tok[C->first_cell], c);
}

static void detach(tkv__pindex *ix, uint32_t c) {
    tkv__pnode *C = &ix->node[c], *P = &ix->node[C->parent];
    child_del(ix, C->parent, ix->tok[C->first_cell]);
    uint32_t *link = &P->first_child;
    while (*link != c) link = &ix->node[*link].next_sibling;
    *link = C->next_sibling;
}

static void add_refs(tkv__pindex *ix, uint32_t id, int delta) {
    for (; id != NONE; id = ix->node[id].parent) ix->node[id].refs = (uint32_t)((int64_t)ix->node[id].refs + delta);
}

static void add_pins(tkv__pindex *ix, uint32_t id, int delta) {
    for (; id != NONE; id = ix->node[id].parent) ix->node[id].pins = (uint32_t)((int64_t)ix->node[id].pins + delta);
}

/* ---- creation ------------------------------------------------------------- */

static uint32_t pow2_at_least(uint64_t n) {
    uint32_t c = 16;
    while (c < n) c *= 2;
    return c;
}

tkv_status tkv__pindex_create(uint32_t n_cells, uint32_t n_seq, const tkv_token *tok, tkv__pindex **out) {
    tkv__pindex *ix = tkv__calloc(1, sizeof *ix);
    if (!ix) return tkv__fail(TKV_ERR_NOMEM, "out of memory for the prefix index");
    ix->n_cells = n_cells;
    ix->n_nodes = 2 * n_cells + 1;
    ix->node = tkv__malloc(ix->n_nodes * sizeof *ix->node);
    ix->free_node = tkv__malloc(ix->n_nodes * sizeof *ix->free_node);
    ix->next = tkv__malloc((n_cells ? n_cells : 1) * sizeof *ix->next);
    ix->tok = tok;
    /* at most n_cells children and n_cells roots: tables of 1.5x keep probes short */
    uint32_t tab = pow2_at_least(3 * (uint64_t)n_cells / 2 + 2), rts = pow2_at_least(3 * (uint64_t)n_cells / 2 + 2);
    ix->tab = tkv__malloc(tab * sizeof *ix->tab);
    ix->roots = tkv__malloc(rts * sizeof *ix->roots);
    ix->n_seq = n_seq;
    ix->seq = tkv__malloc((n_seq ? n_seq : 1) * sizeof *ix->seq);
    if (!ix->node || !ix->free_node || !ix->next || !ix->tab || !ix->roots || !ix->seq) {
        tkv__pindex_free(ix);
        return tkv__fail(TKV_ERR_NOMEM, "out of memory for the prefix index of %u cells", n_cells);
    }
    ix->tab_mask = tab - 1;
    ix->roots_mask = rts - 1;
    for (uint32_t i = 0; i < tab; i++) ix->tab[i].parent = NONE;
    for (uint32_t i = 0; i < rts; i++) ix->roots[i].root = NONE;
    for (uint32_t i = 0; i < ix->n_nodes; i++) ix->node[i].live = false, ix->free_node[i] = ix->n_nodes - 1 - i;
    ix->n_free_node = ix->n_nodes;
    for (uint32_t s = 0; s < n_seq; s++) ix->seq[s] = TKV__PPOS_EMPTY;
    *out = ix;
    return TKV_OK;
}

void tkv__pindex_free(tkv__pindex *ix) {
    if (!ix) return;
    tkv__free(ix->node);
    tkv__free(ix->free_node);
    tkv__free(ix->next);
    tkv__free(ix->tab);
    tkv__free(ix->roots);
    tkv__free(ix->seq);
    tkv__free(ix->pins);
    tkv__free(ix);
}

const tkv__pnode *tkv__pindex_node(const tkv__pindex *ix, uint32_t id) {
    return id < ix->n_nodes && ix->node[id].live ? &ix->node[id] : NULL;
}

uint32_t tkv__pindex_len(const tkv__pindex *ix, tkv__ppos at) {
    return at.node == NONE ? 0 : ix->node[at.node].depth + at.off;
}

/* ---- look-ups ------------------------------------------------------------- */

size_t tkv__pindex_match(tkv__pindex *ix, uint64_t ns, const tkv_token *tokens, size_t n, bool touch, tkv__ppos *at) {
    *at = TKV__PPOS_EMPTY;
    uint32_t cur = root_find(ix, ns);
    size_t len = 0;
    const uint64_t now = touch ? ++ix->clock : 0;
    while (cur != NONE && len < n) {
        uint32_t c = child_get(ix, cur, tokens[len]);
        if (c == NONE) break;
        tkv__pnode *C = &ix->node[c];
        uint32_t k = 0;
        for (uint32_t cell = C->first_cell; k < C->n && len + k < n && ix->tok[cell] == tokens[len + k]; cell = ix->next[cell])
            k++;
        len += k;
        *at = (tkv__ppos){c, k};
        if (touch) C->hits++;
        /* a node matched part way keeps its last use: when the caller cuts it there, its tail was not used now
           (the caller touches the head after the cut, tkv__pindex_touch) */
        if (touch && k == C->n) C->last_use = now;
        if (k < C->n) break;
        cur = c;
    }
    return len;
}

void tkv__pindex_run(const tkv__pindex *ix, uint32_t id, uint32_t *cells, tkv_token *tokens) {
    const tkv__pnode *nd = &ix->node[id];
    uint32_t cell = nd->first_cell;
    for (uint32_t k = 0; k < nd->n; k++, cell = ix->next[cell]) {
        if (cells) cells[k] = cell;
        if (tokens) tokens[k] = ix->tok[cell];
    }
}

void tkv__pindex_path(const tkv__pindex *ix, tkv__ppos at, uint32_t *cells, tkv_token *tokens) {
    uint32_t take = at.off;
    for (uint32_t id = at.node; id != NONE && ix->node[id].parent != NONE; id = ix->node[id].parent) {
        const tkv__pnode *nd = &ix->node[id];
        uint32_t cell = nd->first_cell;
        for (uint32_t k = 0; k < take; k++, cell = ix->next[cell]) {
            if (cells) cells[nd->depth + k] = cell;
            if (tokens) tokens[nd->depth + k] = ix->tok[cell];
        }
        take = ix->node[nd->parent].n;
    }
}

tkv__ppos tkv__pindex_ancestor(const tkv__pindex *ix, tkv__ppos at, uint32_t len) {
    if (len == 0 || at.node == NONE) return TKV__PPOS_EMPTY;
    uint32_t id = at.node;
    while (ix->node[id].depth >= len) id = ix->node[id].parent;
    return (tkv__ppos){id, len - ix->node[id].depth};
}

static uint32_t cell_at(const tkv__pindex *ix, uint32_t id, uint32_t off);

size_t tkv__pindex_follow(const tkv__pindex *ix, uint64_t ns, tkv__ppos from, const tkv_token *tokens, size_t n,
                          tkv__ppos *to) {
    *to = from;
    uint32_t P = from.node != NONE ? from.node : root_find(ix, ns);
    if (P == NONE) return 0;
    uint32_t o = from.node != NONE ? from.off : 0;
    uint32_t cc = o < ix->node[P].n ? cell_at(ix, P, o) : NONE; /* the cell after position o */
    size_t i = 0;
    while (i < n) {
        if (o < ix->node[P].n) {
            if (ix->tok[cc] != tokens[i]) break;
            i++, o++, cc = ix->next[cc];
            continue;
        }
        const uint32_t c = child_get(ix, P, tokens[i]);
        if (c == NONE) break;
        P = c, o = 0, cc = ix->node[c].first_cell; /* its first token matches: the table is keyed by it */
    }
    if (i) *to = (tkv__ppos){P, o};
    return i;
}

size_t tkv__pindex_continuation(const tkv__pindex *ix, uint64_t ns, tkv__ppos at, tkv_token *out, size_t cap) {
    uint32_t P = at.node != NONE ? at.node : root_find(ix, ns);
    if (P == NONE) return 0;
    uint32_t o = at.node != NONE ? at.off : 0;
    size_t n = 0;
    while (n < cap) {
        if (o < ix->node[P].n) { /* the rest of this run */
            for (uint32_t cc = cell_at(ix, P, o); cc != NONE && o < ix->node[P].n && n < cap; cc = ix->next[cc], o++)
                out[n++] = ix->tok[cc];
            continue;
        }
        uint32_t best = NONE;
        for (uint32_t c = ix->node[P].first_child; c != NONE; c = ix->node[c].next_sibling)
            if (best == NONE || ix->node[c].last_use > ix->node[best].last_use) best = c;
        if (best == NONE) break;
        P = best, o = 0;
    }
    return n;
}

size_t tkv__pindex_follow_chain(const tkv__pindex *ix, uint64_t ns, tkv__ppos at, tkv_token first,
                                tkv__pindex_next_fn *next, void *user, tkv_token *out, uint32_t *cells, size_t cap) {
    uint32_t P = at.node != NONE ? at.node : root_find(ix, ns);
    if (P == NONE) return 0;
    uint32_t o = at.node != NONE ? at.off : 0;                  /* tokens of node P before the position */
    uint32_t cc = o < ix->node[P].n ? cell_at(ix, P, o) : NONE; /* the cell after it in P's run */
    tkv_token t = first;
    size_t n = 0;
    for (;;) {
        /* the cell of t after the position, and the position moved past it */
        uint32_t cell;
        if (o < ix->node[P].n) {
            if (ix->tok[cc] != t) break;
            cell = cc, o++, cc = ix->next[cc];
        } else {
            const uint32_t c = child_get(ix, P, t);
            if (c == NONE) break;
            cell = ix->node[c].first_cell, P = c, o = 1, cc = ix->next[cell];
        }
        cells[n] = cell;
        const tkv_token after = next(user, cell);
        if (after == TKV_TOKEN_NULL) break;
        t = out[n++] = after;
        if (n == cap) break;
    }
    return n;
}

/* ---- insertion ------------------------------------------------------------ */

/* The cell at offset `off` of node id's run. */
static uint32_t cell_at(const tkv__pindex *ix, uint32_t id, uint32_t off) {
    uint32_t cell = ix->node[id].first_cell;
    while (off--) cell = ix->next[cell];
    return cell;
}

/* Split node id after `off` tokens (0 < off < n): the tail becomes its only child. */
static void split(tkv__pindex *ix, uint32_t id, uint32_t off) {
    tkv__pnode *nd = &ix->node[id];
    const uint32_t keep_last = cell_at(ix, id, off - 1);
    uint32_t t = node_new(ix, nd->ns, id, nd->depth + off);
    nd = &ix->node[id];
    tkv__pnode *tail = &ix->node[t];
    tail->n = nd->n - off;
    tail->first_cell = ix->next[keep_last];
    tail->last_cell = nd->last_cell;
    ix->next[keep_last] = NONE;
    nd->n = off;
    nd->last_cell = keep_last;
    tail->last_use = nd->last_use;
    tail->hits = nd->hits;
    /* nd's children become the tail's */
    for (uint32_t c = nd->first_child; c != NONE;) {
        uint32_t next = ix->node[c].next_sibling;
        child_del(ix, id, ix->tok[ix->node[c].first_cell]);
        attach(ix, t, c);
        tail->refs += ix->node[c].refs;
        tail->pins += ix->node[c].pins;
        c = next;
    }
    nd->first_child = NONE;
    attach(ix, id, t);
    /* ends past the split point move to the tail */
    for (uint32_t s = 0; s < ix->n_seq; s++)
        if (ix->seq[s].node == id && ix->seq[s].off > off) ix->seq[s] = (tkv__ppos){t, ix->seq[s].off - off}, tail->refs++;
    for (uint32_t p = 0; p < ix->n_pins; p++)
        if (ix->pins[p].at.node == id && ix->pins[p].at.off > off) {
            ix->pins[p].at = (tkv__ppos){t, ix->pins[p].at.off - off};
            tail->pins += ix->pins[p].count;
        }
}

tkv__ppos tkv__pindex_cut(tkv__pindex *ix, tkv__ppos at) {
    if (at.node != NONE && at.off < ix->node[at.node].n) split(ix, at.node, at.off);
    return at;
}

static bool end_held(const tkv__pindex *ix, uint32_t id);

/* Append cells[0..n) to node id's run (the cache has written their tokens). */
static void append(tkv__pindex *ix, uint32_t id, const uint32_t *cells, uint32_t n) {
    tkv__pnode *nd = &ix->node[id];
    for (uint32_t i = 0; i < n; i++) {
        assert(cells[i] < ix->n_cells); /* only a token the tree held already may come with a scratch cell */
        ix->next[cells[i]] = NONE;
        if (nd->last_cell == NONE) nd->first_cell = cells[i];
        else ix->next[nd->last_cell] = cells[i];
        nd->last_cell = cells[i];
    }
    nd->n += n;
}

tkv__ppos tkv__pindex_insert(tkv__pindex *ix, uint64_t ns, tkv__ppos from, const tkv_token *tokens, uint32_t *cells,
                             uint32_t n, uint32_t *dup, uint32_t *n_dup) {
    *n_dup = 0;
    if (n == 0) return from;
    uint32_t P = from.node != NONE ? from.node : root_get(ix, ns);
    uint32_t o = from.node != NONE ? from.off : 0;
    uint32_t cc = o < ix->node[P].n ? cell_at(ix, P, o) : NONE; /* the cell after position o */
    const uint64_t now = ++ix->clock;
    for (uint32_t i = 0; i < n;) {
        if (o < ix->node[P].n) { /* inside a run: the tree already goes on */
            if (ix->tok[cc] == tokens[i]) {
                dup[(*n_dup)++] = cells[i];
                cells[i++] = cc;
                o++;
                cc = ix->next[cc];
                continue;
            }
            split(ix, P, o);
        }
        uint32_t c = child_get(ix, P, tokens[i]);
        if (c != NONE) {
            P = c, o = 0, cc = ix->node[c].first_cell;
            ix->node[c].last_use = now;
            continue;
        }
        /* a leaf grows in place, unless a sequence or a pin ends it: either holds what was cached up to its
           end, not what comes after, which must stay evictable on its own once nobody holds it (the sequence
           that extends it moves its end past the boundary, and the join in tkv__pindex_seq_set removes the
           boundary again when nothing else needs it) */
        if (ix->node[P].parent != NONE && ix->node[P].first_child == NONE && !end_held(ix, P)) {
            append(ix, P, cells + i, n - i);
        } else {
            uint32_t nn = node_new(ix, ns, P, ix->node[P].depth + ix->node[P].n);
            append(ix, nn, cells + i, n - i);
            attach(ix, P, nn);
            P = nn;
        }
        ix->node[P].last_use = now;
        o = ix->node[P].n;
        break;
    }
    return (tkv__ppos){P, o};
}

/* ---- sequences and pins --------------------------------------------------- */

tkv__ppos tkv__pindex_seq_end(const tkv__pindex *ix, tkv_seq seq) { return ix->seq[seq]; }

/* Whether a sequence ends, or a pin sits, at the end of node id: a boundary something needs. */
static bool end_held(const tkv__pindex *ix, uint32_t id) {
    const uint32_t n = ix->node[id].n;
    for (uint32_t s = 0; s < ix->n_seq; s++)
        if (ix->seq[s].node == id && ix->seq[s].off == n) return true;
    for (uint32_t p = 0; p < ix->n_pins; p++)
        if (ix->pins[p].at.node == id && ix->pins[p].at.off == n) return true;
    return false;
}

static bool is_ancestor(const tkv__pindex *ix, uint32_t a, uint32_t id) {
    for (id = ix->node[id].parent; id != NONE; id = ix->node[id].parent)
        if (id == a) return true;
    return false;
}

/*
 * Join node id and its only child when nothing needs the boundary between
 * them, the child's run appended to id's. A sequence that walks forward
 * along a cached run (the same request again) cuts it at every step; these
 * joins keep that walk from leaving one node per token. Only for a boundary
 * the sequence just crossed: both sides were used now, so the joined node's
 * last use (the later of the two) is exact.
 */
static void join_child(tkv__pindex *ix, uint32_t id) {
    tkv__pnode *nd = &ix->node[id];
    const uint32_t c = nd->first_child;
    if (nd->parent == NONE || c == NONE || ix->node[c].next_sibling != NONE || end_held(ix, id)) return;
    tkv__pnode *C = &ix->node[c];
    const uint32_t off = nd->n;
    child_del(ix, id, ix->tok[C->first_cell]);
    nd->first_child = NONE;
    ix->next[nd->last_cell] = C->first_cell;
    nd->last_cell = C->last_cell;
    nd->n += C->n;
    if (C->last_use > nd->last_use) nd->last_use = C->last_use;
    if (C->hits > nd->hits) nd->hits = C->hits;
    for (uint32_t g = C->first_child; g != NONE;) { /* refs and pins of id already count c's subtree */
        const uint32_t next = ix->node[g].next_sibling;
        child_del(ix, c, ix->tok[ix->node[g].first_cell]);
        attach(ix, id, g);
        g = next;
    }
    for (uint32_t s = 0; s < ix->n_seq; s++)
        if (ix->seq[s].node == c) ix->seq[s] = (tkv__ppos){id, off + ix->seq[s].off};
    for (uint32_t p = 0; p < ix->n_pins; p++)
        if (ix->pins[p].at.node == c) ix->pins[p].at = (tkv__ppos){id, off + ix->pins[p].at.off};
    node_release(ix, c);
}

tkv__ppos tkv__pindex_seq_set(tkv__pindex *ix, tkv_seq seq, tkv__ppos at) {
    /* a sequence holds exactly its tokens: ending inside a node, it would hold the node's tail too, and keep
       another request's tokens appended there from eviction */
    at = tkv__pindex_cut(ix, at);
    const tkv__ppos old = ix->seq[seq];
    add_refs(ix, at.node, +1); /* first: the old path may share nodes with the new */
    add_refs(ix, old.node, -1);
    ix->seq[seq] = at;
    /* moved forward past its old end: that boundary may be needed no more */
    if (old.node != NONE && at.node != NONE && old.node != at.node && is_ancestor(ix, old.node, at.node))
        join_child(ix, old.node);
    return ix->seq[seq];
}

/* Add delta to the count of pin record p (removed at 0) and to the pins of its path. */
static void pin_add(tkv__pindex *ix, uint32_t p, int delta) {
    const tkv__ppos at = ix->pins[p].at;
    ix->pins[p].count = (uint32_t)((int64_t)ix->pins[p].count + delta);
    add_pins(ix, at.node, delta);
    if (ix->pins[p].count == 0) ix->pins[p] = ix->pins[--ix->n_pins];
}

/* A new pin record (room reserved or grown here). TKV_ERR_NOMEM: nothing changed. */
static tkv_status pin_new(tkv__pindex *ix, tkv__ppos at, uint32_t count, uint64_t id) {
    tkv_status st = tkv__pindex_pin_reserve(ix, 1);
    if (st) return st;
    /* a pin holds exactly its prefix: it ends a node, and a pinned end never grows in place */
    at = tkv__pindex_cut(ix, at);
    ix->pins[ix->n_pins++] = (pin_rec){at, count, id};
    add_pins(ix, at.node, (int)count);
    return TKV_OK;
}

tkv_status tkv__pindex_pin(tkv__pindex *ix, tkv__ppos at, int delta) {
    if (at.node == NONE || delta == 0) return TKV_OK;
    for (uint32_t p = 0; p < ix->n_pins; p++) {
        if (ix->pins[p].id || ix->pins[p].at.node != at.node || ix->pins[p].at.off != at.off) continue;
        if (delta < 0 && (uint32_t)-delta > ix->pins[p].count) delta = -(int)ix->pins[p].count;
        pin_add(ix, p, delta);
        return TKV_OK;
    }
    return delta < 0 ? TKV_OK : pin_new(ix, at, (uint32_t)delta, 0);
}

tkv_status tkv__pindex_pin_id(tkv__pindex *ix, tkv__ppos at, uint64_t id) {
    return at.node == NONE ? TKV_OK : pin_new(ix, at, 1, id);
}

bool tkv__pindex_unpin_id(tkv__pindex *ix, uint64_t id) {
    for (uint32_t p = 0; p < ix->n_pins; p++)
        if (ix->pins[p].id == id) {
            pin_add(ix, p, -1); /* a decrement allocates nothing */
            return true;
        }
    return false;
}

/* ---- eviction ------------------------------------------------------------- */

static bool evictable(const tkv__pnode *nd) {
    return nd->live && nd->parent != NONE && nd->first_child == NONE && nd->refs == 0 && nd->pins == 0;
}

/* Remove leaf id, its cells into out; a root left without children goes too. */
static uint32_t remove_leaf(tkv__pindex *ix, uint32_t id, uint32_t *out) {
    tkv__pnode *nd = &ix->node[id];
    uint32_t n = 0;
    for (uint32_t cell = nd->first_cell; n < nd->n; cell = ix->next[cell]) out[n++] = cell;
    uint32_t parent = nd->parent;
    detach(ix, id);
    node_release(ix, id);
    tkv__pnode *P = &ix->node[parent];
    if (P->parent == NONE && P->first_child == NONE) {
        root_del(ix, P->ns);
        node_release(ix, parent);
    }
    return n;
}

/* Remove the last k (0 < k < n) cells of leaf id's run, into out: the prefix it ends stays cached. */
static uint32_t trim_leaf(tkv__pindex *ix, uint32_t id, uint32_t k, uint32_t *out) {
    tkv__pnode *nd = &ix->node[id];
    const uint32_t last = cell_at(ix, id, nd->n - k - 1);
    uint32_t n = 0;
    for (uint32_t cell = ix->next[last]; n < k; cell = ix->next[cell]) out[n++] = cell;
    ix->next[last] = NONE;
    nd->last_cell = last;
    nd->n -= k;
    return k;
}

uint32_t tkv__pindex_evict(tkv__pindex *ix, uint32_t want, uint32_t *out,
                           void (*before)(void *user, uint32_t id, uint32_t keep), void *user) {
    uint32_t freed = 0;
    while (freed < want) {
        uint32_t best = NONE;
        for (uint32_t id = 0; id < ix->n_nodes; id++)
            if (evictable(&ix->node[id]) && (best == NONE || ix->node[id].last_use < ix->node[best].last_use)) best = id;
        if (best == NONE) break;
        /* token-granular: of the least recently used leaf, only the tail that is needed */
        const uint32_t short_by = want - freed;
        if (before) before(user, best, ix->node[best].n > short_by ? ix->node[best].n - short_by : 0);
        if (ix->node[best].n > short_by) freed += trim_leaf(ix, best, short_by, out + freed);
        else freed += remove_leaf(ix, best, out + freed);
    }
    return freed;
}

uint32_t tkv__pindex_evict_all(tkv__pindex *ix, uint32_t *out) {
    uint32_t freed = 0;
    for (bool again = true; again;) { /* leaves first; their parents may follow */
        again = false;
        for (uint32_t id = 0; id < ix->n_nodes; id++)
            if (evictable(&ix->node[id])) freed += remove_leaf(ix, id, out + freed), again = true;
    }
    return freed;
}

/* ---- introspection -------------------------------------------------------- */

static void visit(const tkv__pindex *ix, uint32_t id, void (*fn)(const tkv__pindex *, uint32_t, void *), void *user) {
    fn(ix, id, user);
    for (uint32_t c = ix->node[id].first_child; c != NONE; c = ix->node[c].next_sibling) visit(ix, c, fn, user);
}

void tkv__pindex_foreach(const tkv__pindex *ix, void (*fn)(const tkv__pindex *ix, uint32_t id, void *user), void *user) {
    for (uint32_t i = 0; i <= ix->roots_mask; i++)
        if (ix->roots[i].root != NONE) visit(ix, ix->roots[i].root, fn, user);
}

static void count(const tkv__pindex *ix, uint32_t id, void *user) {
    tkv__pindex_stats *st = user;
    const tkv__pnode *nd = &ix->node[id];
    if (nd->parent == NONE) return;
    st->nodes++;
    st->cells += nd->n;
    if (nd->refs == 0 && nd->pins == 0) st->evictable_cells += nd->n;
    if (nd->pins) st->pinned_cells += nd->n;
}

void tkv__pindex_stats_get(const tkv__pindex *ix, tkv__pindex_stats *st) {
    memset(st, 0, sizeof *st);
    tkv__pindex_foreach(ix, count, st);
}

uint64_t tkv__pindex_bytes(const tkv__pindex *ix) {
    return sizeof *ix + (uint64_t)ix->n_nodes * (sizeof *ix->node + sizeof *ix->free_node) +
           (uint64_t)ix->n_cells * sizeof *ix->next + (uint64_t)(ix->tab_mask + 1) * sizeof *ix->tab +
           (uint64_t)(ix->roots_mask + 1) * sizeof *ix->roots + (uint64_t)ix->n_seq * sizeof *ix->seq +
           (uint64_t)ix->cap_pins * sizeof *ix->pins;
}

typedef struct check_state {
    tkv_status st;
    uint8_t *seen;     /* (n_cells) */
    uint32_t *refs;    /* (n_nodes) recounted from the sequence ends */
    uint32_t *pins;    /* (n_nodes) recounted from the pin records */
} check_state;

static void check_node(const tkv__pindex *ix, uint32_t id, void *user) {
    check_state *cs = user;
    if (cs->st) return;
    const tkv__pnode *nd = &ix->node[id];
    if (nd->parent != NONE) {
        const tkv__pnode *p = &ix->node[nd->parent];
        uint32_t k = 0, last = NONE;
        for (uint32_t cell = nd->first_cell; cell != NONE && k <= nd->n; cell = ix->next[cell], k++) {
            if (cell >= ix->n_cells || cs->seen[cell]) {
                cs->st = tkv__fail(TKV_ERR_FORMAT, "prefix index: cell %u is in two places (or out of range)", cell);
                return;
            }
            cs->seen[cell] = 1;
            last = cell;
        }
        if (nd->n == 0 || k != nd->n || last != nd->last_cell)
            cs->st = tkv__fail(TKV_ERR_FORMAT, "prefix index: node at depth %u has a run of %u cells, says %u", nd->depth, k,
                               nd->n);
        else if (nd->depth != p->depth + p->n)
            cs->st = tkv__fail(TKV_ERR_FORMAT, "prefix index: node at depth %u under a run ending at %u", nd->depth,
                               p->depth + p->n);
        else if (nd->ns != p->ns)
            cs->st = tkv__fail(TKV_ERR_FORMAT, "prefix index: a node changes namespace");
        else if (child_get(ix, nd->parent, ix->tok[nd->first_cell]) != id)
            cs->st = tkv__fail(TKV_ERR_FORMAT, "prefix index: node at depth %u is not found from its parent", nd->depth);
    } else if (root_find(ix, nd->ns) != id) {
        cs->st = tkv__fail(TKV_ERR_FORMAT, "prefix index: a root is not found by its namespace");
    }
    if (cs->st) return;
    for (uint32_t c = nd->first_child; c != NONE && !cs->st; c = ix->node[c].next_sibling)
        if (!ix->node[c].live || ix->node[c].parent != id)
            cs->st = tkv__fail(TKV_ERR_FORMAT, "prefix index: node at depth %u lists a child that is not its own", nd->depth);
    if (cs->st) return;
    const uint32_t refs = cs->refs[id], pins = cs->pins[id];
    if (refs != nd->refs)
        cs->st = tkv__fail(TKV_ERR_FORMAT, "prefix index: node at depth %u counts %u sequences, %u end below it",
                           nd->depth, nd->refs, refs);
    else if (pins != nd->pins)
        cs->st = tkv__fail(TKV_ERR_FORMAT, "prefix index: node at depth %u counts %u pins, %u lie below it", nd->depth,
                           nd->pins, pins);
}

tkv_status tkv__pindex_check(const tkv__pindex *ix) {
    check_state cs = {TKV_OK, tkv__calloc(ix->n_cells ? ix->n_cells : 1, 1), tkv__calloc(ix->n_nodes, sizeof(uint32_t)),
                      tkv__calloc(ix->n_nodes, sizeof(uint32_t))};
    if (!cs.seen || !cs.refs || !cs.pins) {
        tkv__free(cs.seen), tkv__free(cs.refs), tkv__free(cs.pins);
        return tkv__fail(TKV_ERR_NOMEM, "out of memory checking the prefix index");
    }
    /* what refs and pins should be: walk up from every end */
    for (uint32_t s = 0; s < ix->n_seq; s++)
        for (uint32_t id = ix->seq[s].node; id != NONE && id < ix->n_nodes; id = ix->node[id].parent) cs.refs[id]++;
    for (uint32_t q = 0; q < ix->n_pins; q++)
        for (uint32_t id = ix->pins[q].at.node; id != NONE && id < ix->n_nodes; id = ix->node[id].parent)
            cs.pins[id] += ix->pins[q].count;
    /* every end lies at the end of its node: a node's refs and pins then hold exactly the cells on the
       paths of the sequences and pins below it, and a cell past an end is held by nobody (evictable) */
    for (uint32_t s = 0; s < ix->n_seq && !cs.st; s++) {
        tkv__ppos e = ix->seq[s];
        if (e.node != NONE && (!ix->node[e.node].live || e.off != ix->node[e.node].n))
            cs.st = tkv__fail(TKV_ERR_FORMAT,
                              "prefix index: sequence %u ends at offset %u of a %u-token node (it would hold the "
                              "cells after its end)",
                              s, e.off, ix->node[e.node].n);
    }
    for (uint32_t q = 0; q < ix->n_pins && !cs.st; q++) {
        tkv__ppos e = ix->pins[q].at;
        if (e.node == NONE || e.node >= ix->n_nodes || !ix->node[e.node].live || e.off != ix->node[e.node].n ||
            !ix->pins[q].count)
            cs.st = tkv__fail(TKV_ERR_FORMAT,
                              "prefix index: pin %u (count %u) ends at offset %u of a %u-token node (it would hold "
                              "the cells after its end)",
                              q, ix->pins[q].count, e.off, e.node < ix->n_nodes ? ix->node[e.node].n : 0);
    }
    if (!cs.st) tkv__pindex_foreach(ix, check_node, &cs);
    tkv__free(cs.seen);
    tkv__free(cs.refs);
    tkv__free(cs.pins);
    return cs.st;
}

/* ---- for loading saved prefixes (persist.c) -------------------------------- */

void tkv__pindex_hit(tkv__pindex *ix, tkv__ppos at) {
    const uint64_t now = ++ix->clock;
    for (uint32_t id = at.node; id != NONE && ix->node[id].parent != NONE; id = ix->node[id].parent) {
        ix->node[id].hits++;
        /* a node reached part way keeps its last use: its tail was not used now */
        if (id != at.node || at.off == ix->node[id].n) ix->node[id].last_use = now;
    }
}

void tkv__pindex_touch(tkv__pindex *ix, tkv__ppos at) {
    const uint64_t now = ++ix->clock;
    for (uint32_t id = at.node; id != NONE && ix->node[id].parent != NONE; id = ix->node[id].parent)
        ix->node[id].last_use = now;
}

tkv_status tkv__pindex_pin_reserve(tkv__pindex *ix, uint32_t extra) {
    if ((uint64_t)ix->n_pins + extra <= ix->cap_pins) return TKV_OK;
    uint64_t cap = ix->cap_pins ? ix->cap_pins : 8;
    while (cap < (uint64_t)ix->n_pins + extra) cap *= 2;
    if (cap > UINT32_MAX) return tkv__fail(TKV_ERR_NOMEM, "too many pins (%llu)", (unsigned long long)cap);
    pin_rec *p = tkv__realloc(ix->pins, (size_t)cap * sizeof *p);
    if (!p) return tkv__fail(TKV_ERR_NOMEM, "out of memory reserving %u pins", extra);
    ix->pins = p;
    ix->cap_pins = (uint32_t)cap;
    return TKV_OK;
}
