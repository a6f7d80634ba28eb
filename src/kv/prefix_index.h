/*
 * prefix_index.h — a radix tree over token ids: for every cached prefix of
 * every namespace, which KV cells hold its tokens.
 *
 * Private to the KV cache (kvcache.h), its only writer: the cache keeps the
 * cells, the tree and the sequences in step in one place. Other layers may
 * read a tree through tkv__kv_index() (const), never change one.
 *
 * A node holds a run of tokens (at positions depth .. depth + n - 1) and the
 * cells that hold them. The path from a namespace's root to a node spells a
 * prefix; siblings start with different tokens. Sequences do not own cells:
 * each sequence is a position in the tree (its end), and every node on the
 * path to that end counts the sequence in `refs`. A node that no sequence
 * reaches and nobody pinned is evictable once it is a leaf, least recently
 * used first; its cells are then free again.
 *
 * Everything is sized when the index is created (nodes, runs, the child
 * table are pools indexed by cell), so inserting a decoded run never
 * allocates and never fails: a decode can publish its results without a
 * failure point after the forward pass.
 */
#ifndef TKV_PREFIX_INDEX_H
#define TKV_PREFIX_INDEX_H

#include "tokenkv.h"

#define TKV__PNONE UINT32_MAX

typedef struct tkv__pnode {
    uint32_t parent;      /* node id; TKV__PNONE for a namespace root */
    uint32_t first_child, next_sibling; /* TKV__PNONE: none */
    uint64_t ns;          /* namespace of the whole subtree */
    uint32_t depth;       /* position of the run's first token */
    uint32_t n;           /* run length (0 for a root) */
    uint32_t first_cell, last_cell; /* the run: cells linked by tkv__pindex's next[] */
    uint32_t refs;        /* sequences whose end lies in this subtree */
    uint32_t pins;        /* pins on this node or below it */
    uint64_t last_use;    /* logical time of the last match or insert through it */
    uint32_t hits;        /* matches that went through or ended in it */
    bool live;
} tkv__pnode;

/* Where a prefix ends: a node and how many of its tokens (1..n); the empty
   prefix is {TKV__PNONE, 0}. */
typedef struct tkv__ppos {
    uint32_t node;
    uint32_t off;
} tkv__ppos;

#define TKV__PPOS_EMPTY ((tkv__ppos){TKV__PNONE, 0})

typedef struct tkv__pindex tkv__pindex;

/* An index for n_cells cells and n_seq sequences, reading each cell's token
   from tok[] (n_cells; the KV cache's array, which must outlive the index:
   a cell's token is written there before the cell is inserted). TKV_ERR_NOMEM. */
tkv_status tkv__pindex_create(uint32_t n_cells, uint32_t n_seq, const tkv_token *tok, tkv__pindex **out);
void tkv__pindex_free(tkv__pindex *ix);

/* The node behind an id (for introspection); NULL when no live node has it. */
const tkv__pnode *tkv__pindex_node(const tkv__pindex *ix, uint32_t id);

/* Length of the prefix that ends at `at`. */
uint32_t tkv__pindex_len(const tkv__pindex *ix, tkv__ppos at);

/*
 * The longest prefix of tokens[0..n) cached in namespace ns: its length, and
 * its end in *at. Costs O(n). Marks the path used (LRU, hits) when `touch`.
 */
size_t tkv__pindex_match(tkv__pindex *ix, uint64_t ns, const tkv_token *tokens, size_t n, bool touch, tkv__ppos *at);

/* The cells and tokens of the prefix ending at `at`, positions 0..len-1
   (either output may be NULL). */
void tkv__pindex_path(const tkv__pindex *ix, tkv__ppos at, uint32_t *cells, tkv_token *tokens);

/*
 * Extend the path ending at `from` (in namespace ns; `from` empty means the
 * root) by tokens[0..n) held in cells[0..n), cells the tree does not hold
 * (their tokens already written to the token array).
 * Where the tree already holds some of these tokens after `from` (another
 * sequence computed them), the tree's cells are kept: the new ones are
 * reported in dup[] (*n_dup of them) for the caller to free, and cells[] is
 * rewritten to the cells actually used. Returns the new end. Never fails.
 * Sequence ends and pins inside a node that splits are moved. References
 * do not change: move a sequence with tkv__pindex_seq_set.
 */
tkv__ppos tkv__pindex_insert(tkv__pindex *ix, uint64_t ns, tkv__ppos from, const tkv_token *tokens, uint32_t *cells,
                             uint32_t n, uint32_t *dup, uint32_t *n_dup);

/* Make `at` the end of its node (splitting it), so that what follows can be
   evicted once unreferenced. Returns the same position, now at a node's end. */
tkv__ppos tkv__pindex_cut(tkv__pindex *ix, tkv__ppos at);

/* A sequence's end, and moving it (references follow). The node holding
   `at` is cut there; moving forward, the old end's boundary may be joined
   away, which renames positions below it: the return value is where the
   sequence now ends (use it, not `at`, afterwards). */
tkv__ppos tkv__pindex_seq_end(const tkv__pindex *ix, tkv_seq seq);
tkv__ppos tkv__pindex_seq_set(tkv__pindex *ix, tkv_seq seq, tkv__ppos at);

/* The position `len` tokens into the path ending at `at` (len <= its length). */
tkv__ppos tkv__pindex_ancestor(const tkv__pindex *ix, tkv__ppos at, uint32_t len);

/* Pin (delta > 0) or unpin (< 0) the prefix ending at `at` with a counted, anonymous record (the holds of
   loads and transactions): nodes on its path are never evicted while pinned. A pin cuts the node at `at`,
   and a pinned end never grows in place, so it holds exactly that prefix. TKV_ERR_NOMEM: nothing changed. */
tkv_status tkv__pindex_pin(tkv__pindex *ix, tkv__ppos at, int delta);

/* Pin the prefix ending at `at` (not empty) as a record of its own named `id` (nonzero, unique: a caller's
   handle), held exactly as tkv__pindex_pin holds. TKV_ERR_NOMEM: nothing changed. */
tkv_status tkv__pindex_pin_id(tkv__pindex *ix, tkv__ppos at, uint64_t id);

/* Release the pin named `id`; false when there is none (already released, or never taken). */
bool tkv__pindex_unpin_id(tkv__pindex *ix, uint64_t id);

/* Follow tokens[0..n) from `from` (in namespace ns; empty: its root): how many of them the tree holds next,
   and where they end in *to (`from` when none). Changes nothing. */
size_t tkv__pindex_follow(const tkv__pindex *ix, uint64_t ns, tkv__ppos from, const tkv_token *tokens, size_t n,
                          tkv__ppos *to);

/*
 * The tokens cached after `at` (in namespace ns; empty: its root), along the
 * most recently used path: the rest of at's node, then at each branch the
 * child used last, until cap tokens or a leaf. Returns how many it wrote to
 * out. Changes nothing (no LRU touch: proposing is not using).
 */
size_t tkv__pindex_continuation(const tkv__pindex *ix, uint64_t ns, tkv__ppos at, tkv_token *out, size_t cap);

/* The token after the one in `cell` on a chain (tkv__pindex_follow_chain's caller decides), or TKV_TOKEN_NULL. */
typedef tkv_token tkv__pindex_next_fn(void *user, uint32_t cell);

/*
 * A chain through the tree from `at` (in namespace ns; empty: its root):
 * the token `first` after it, in cell cells[0], then out[0] = next(cells[0])
 * in cells[1], out[1] = next(cells[1]), and so on: next names the token
 * after a cell (TKV_TOKEN_NULL: none), called once per cell in order. It
 * ends after out[n - 1], where out[n - 1] is not cached after its
 * predecessor, or next names nothing, or at cap tokens. Returns n, the
 * tokens in out (room for cap); cells[0 .. n) (room for cap) are the cells
 * of `first` and out[0 .. n - 1). 0 when `first` is not cached after `at`
 * or nothing follows it. Changes nothing.
 */
size_t tkv__pindex_follow_chain(const tkv__pindex *ix, uint64_t ns, tkv__ppos at, tkv_token first,
                                tkv__pindex_next_fn *next, void *user, tkv_token *out, uint32_t *cells, size_t cap);

/*
 * Free `want` cells, or as many as are evictable: from the least recently
 * used unreferenced, unpinned leaf first, and of it only the tail that is
 * still needed (token-granular: the prefix it ends stays cached); whole
 * leaves when more is needed. The freed cells go to out (room for n_cells).
 * Returns how many. before (may be NULL) is called before each leaf is cut
 * to its first `keep` tokens (0: removed), while it is still whole.
 */
uint32_t tkv__pindex_evict(tkv__pindex *ix, uint32_t want, uint32_t *out,
                           void (*before)(void *user, uint32_t id, uint32_t keep), void *user);

/* Drop every unreferenced, unpinned node; cells into out. Returns how many. */
uint32_t tkv__pindex_evict_all(tkv__pindex *ix, uint32_t *out);

typedef struct tkv__pindex_stats {
    uint64_t nodes, cells, evictable_cells, pinned_cells;
} tkv__pindex_stats;

void tkv__pindex_stats_get(const tkv__pindex *ix, tkv__pindex_stats *st);

/* Bytes the index has allocated (all of it sized at creation, pins aside). */
uint64_t tkv__pindex_bytes(const tkv__pindex *ix);

/*
 * Verify the tree: depths, distinct first tokens among siblings, the child
 * table, namespaces, runs, refs equal to the sequence ends below, pins, no
 * cell in two places. TKV_OK, or TKV_ERR_FORMAT naming the first violation.
 */
tkv_status tkv__pindex_check(const tkv__pindex *ix);

/* Visit every live node (roots included), parents before children. */
void tkv__pindex_foreach(const tkv__pindex *ix, void (*fn)(const tkv__pindex *ix, uint32_t id, void *user), void *user);

/* The cells of a node's run in order, into out (room for node->n). */
void tkv__pindex_run(const tkv__pindex *ix, uint32_t id, uint32_t *cells, tkv_token *tokens);

/* Count a hit on every node of the path ending at `at` and mark it used
   now (a node reached part way keeps its last use). */
void tkv__pindex_hit(tkv__pindex *ix, tkv__ppos at);

/* Mark the path ending at `at` used now (LRU order), without counting a hit. */
void tkv__pindex_touch(tkv__pindex *ix, tkv__ppos at);

/* Room for `extra` more pin records, so the next pins (of new positions)
   cannot fail. TKV_ERR_NOMEM: nothing changed. */
tkv_status tkv__pindex_pin_reserve(tkv__pindex *ix, uint32_t extra);

#endif
