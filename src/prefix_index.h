/*
 * prefix_index.h — a radix tree over token ids: for every cached prefix of
 * every namespace, which KV cells hold its tokens.
 *
 * A node holds a run of tokens and the cells that hold them, at positions
 * depth .. depth + n - 1. The path from a namespace's root to a node spells
 * a prefix; siblings start with different tokens. Sequences do not own
 * cells: each sequence is a position in the tree (its end), and every node
 * on the path to that end counts the sequence in `refs`. A node no sequence
 * reaches and nobody pinned is evictable once it is a leaf, least recently
 * used first; its cells then become free.
 *
 * The index knows nothing of K/V: the caller (kvcache.c / context.c) keeps
 * each cell's metadata in step, and tkv__pindex_check verifies the tree's
 * own invariants.
 */
#ifndef TKV_PREFIX_INDEX_H
#define TKV_PREFIX_INDEX_H

#include "tokenkv.h"

typedef struct tkv__pnode tkv__pnode;

struct tkv__pnode {
    tkv__pnode *parent;   /* NULL for a namespace root */
    tkv__pnode **child;   /* (n_child) sorted by their first token */
    uint32_t n_child, cap_child;
    uint64_t ns;          /* namespace of the whole subtree */
    uint32_t depth;       /* position of tokens[0] */
    uint32_t n, cap;      /* run length (a root has 0) */
    tkv_token *tokens;    /* (cap) */
    uint32_t *cells;      /* (cap) */
    uint32_t refs;        /* sequences whose end lies in this subtree */
    uint32_t pins;        /* pins of this node or of a node below it */
    uint64_t last_use;    /* logical time of the last match or insert through it */
    uint64_t hits;        /* matches that ended in or went through it */
};

/* Where a sequence ends: node and the number of its tokens used (1..n).
   The empty sequence is {NULL, 0}. */
typedef struct tkv__ppos {
    tkv__pnode *node;
    uint32_t off;
} tkv__ppos;

typedef struct tkv__pindex tkv__pindex;

tkv_status tkv__pindex_create(uint32_t n_seq, tkv__pindex **out);
void tkv__pindex_free(tkv__pindex *ix);

/*
 * The longest prefix of tokens[0..n) cached in namespace ns: its length,
 * and its end in *at (a node and offset; {NULL, 0} when nothing matches).
 * Costs O(n log(branching)). Marks the path used (LRU, hits) when `touch`.
 */
size_t tkv__pindex_match(tkv__pindex *ix, uint64_t ns, const tkv_token *tokens, size_t n, bool touch, tkv__ppos *at);

/* The cells of the prefix ending at `at`, positions 0..len-1, into out. */
void tkv__pindex_cells(const tkv__ppos *at, uint32_t *out);

/*
 * Extend the path ending at `from` (in namespace ns) by tokens[0..n) held in
 * cells[0..n). Where the tree already holds some of these tokens after
 * `from` (another sequence computed them), the tree's cells are kept and the
 * new ones are reported in dup[] (*n_dup of them) for the caller to free;
 * cells[] is rewritten to the cells actually used. *to receives the new end.
 * Sequence ends inside a node that is split are moved. No sequence's
 * reference changes: call tkv__pindex_seq_set afterwards.
 * TKV_ERR_NOMEM leaves the tree as it was.
 */
tkv_status tkv__pindex_insert(tkv__pindex *ix, uint64_t ns, tkv__ppos from, const tkv_token *tokens, uint32_t *cells,
                              uint32_t n, tkv__ppos *to, uint32_t *dup, uint32_t *n_dup);

/* A sequence's end, and moving it (references follow). */
tkv__ppos tkv__pindex_seq_end(const tkv__pindex *ix, tkv_seq seq);
void tkv__pindex_seq_set(tkv__pindex *ix, tkv_seq seq, tkv__ppos at);

/* The position `len` tokens into the path of `at` (len <= its length). */
tkv__ppos tkv__pindex_ancestor(tkv__ppos at, uint32_t len);

/* Length of the prefix that ends at `at`. */
static inline uint32_t tkv__ppos_len(tkv__ppos at) { return at.node ? at.node->depth + at.off : 0; }

/* Pin (delta > 0) or unpin (< 0) the prefix ending at `at`: nodes on its
   path are never evicted while pinned. TKV_ERR_NOMEM: nothing changed. */
tkv_status tkv__pindex_pin(tkv__pindex *ix, tkv__ppos at, int delta);

/*
 * Evict least recently used unreferenced, unpinned leaves until at least
 * `want` cells were freed or nothing is evictable; the freed cells are
 * written to out (room for the cells of the whole tree). Returns how many.
 */
uint32_t tkv__pindex_evict(tkv__pindex *ix, uint32_t want, uint32_t *out);

/* Drop every unreferenced, unpinned node (tkv_cache_clear); cells into out. */
uint32_t tkv__pindex_evict_all(tkv__pindex *ix, uint32_t *out);

typedef struct tkv__pindex_stats {
    uint64_t nodes, cells, evictable_cells, pinned_cells;
} tkv__pindex_stats;

void tkv__pindex_stats_get(const tkv__pindex *ix, tkv__pindex_stats *st);

/*
 * Verify the tree: depths, sorted distinct children, namespaces, refs equal
 * to the sequence ends below, pins, no empty non-root node. TKV_OK or
 * TKV_ERR_FORMAT with a message naming the first violation.
 */
tkv_status tkv__pindex_check(const tkv__pindex *ix);

/* Visit every node (roots included), parents before children. */
void tkv__pindex_foreach(const tkv__pindex *ix, void (*fn)(const tkv__pnode *node, void *user), void *user);

#endif
