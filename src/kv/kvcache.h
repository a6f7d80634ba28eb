/*
 * kvcache.h — the KV cache: the one owner of every cell.
 *
 * It owns, for n_cells cells: the K/V rows of every layer, each cell's token
 * and position, the free list, the sequences' cell lists and, privately, the
 * prefix index (prefix_index.h), which reads the tokens from here. Every
 * change to any of them goes through this module, so they cannot drift
 * apart; tkv__kv_check verifies that they agree.
 *
 * Who holds a cell: the prefix index holds every cell that holds a token;
 * free cells hold nothing. A sequence is a list of cells, positions 0..n-1
 * (cells need not be contiguous; sequences sharing a prefix share its
 * cells); the list mirrors the sequence's path in the index so that
 * attention reads it in O(1) per position.
 *
 * Writes are transactions. A stage validates and reserves; commit cannot
 * fail; rollback undoes the stage. Between them the caller fills the staged
 * cells' K/V rows (the forward pass, or a cache file). When the cache must
 * evict to make room, the staged cells are "virtual" (ids n_cells..) backed
 * by a scratch area, and the eviction happens at commit: nothing cached is
 * overwritten before the new rows exist, so a failed decode leaves the
 * cache exactly as it was. One transaction at a time.
 *
 * Not thread-safe: the context using the cache serializes every call.
 */
#ifndef TKV_KVCACHE_H
#define TKV_KVCACHE_H

#include "tokenkv.h"

#include "kvstate.h"
#include "prefix_index.h"
#include "model/kvrows.h"

typedef struct tkv__kvseq {
    uint32_t n;      /* published cells: positions 0..n-1 */
    uint32_t cap;    /* room in cells[] (staged cells go after n) */
    uint32_t *cells; /* (cap) cell per position */
    uint64_t ns;     /* namespace of the sequence's prefixes */
} tkv__kvseq;

/*
 * What the cache reports to an observer (tkv__kv_set_events): a run of
 * positions from..end-1 of the prefix tokens[0..end) in namespace ns became
 * cached (STORED) or is about to be evicted (REMOVED: cells[] still hold
 * their K/V rows during the call), or every prefix nobody holds was dropped
 * (CLEARED; what stays cached is reported again as STORED right after).
 * Pointers are valid during the call only. The observer must not call back
 * into the cache.
 */
enum { TKV__KVEV_STORED = 1, TKV__KVEV_REMOVED = 2, TKV__KVEV_CLEARED = 3 };
typedef struct tkv__kvevent {
    int kind;
    uint64_t ns;
    const tkv_token *tokens; /* (end) the whole prefix */
    const uint32_t *cells;   /* (end - from) the run's cells */
    uint32_t from, end;
} tkv__kvevent;
typedef void (*tkv__kv_event_fn)(void *user, const tkv__kvevent *ev);

/* The transaction in flight (see kvcache_txn.c). */
typedef struct tkv__kvtxn {
    int kind;               /* 0: none; else batch or path */
    uint32_t n;             /* cells staged: cells[0..n) */
    const tkv_batch *b;     /* batch: the caller's, alive until commit or rollback */
    tkv_seq seq;            /* path: the sequence, or -1 for none */
    uint64_t ns;            /* path: its namespace */
    const tkv_token *tokens;/* path: the caller's list */
    uint32_t reused, len;   /* path: cached tokens kept; tokens held after commit */
    tkv__ppos at, old;      /* path: end of the reused prefix; the sequence's old end */
} tkv__kvtxn;

/*
 * The window pool (kvwin.c): the rows of the sliding-window layers for the
 * cells that need them. A token at position p of a window layer attends to
 * positions p - W + 1 .. p, so a sequence continues from the rows of its
 * last W - 1 positions; the commit keeps the rows of every live sequence's
 * last W (W: a repeated prompt decodes its last token again), gives the
 * batch's other tokens rows while free ones are left, and releases rows no
 * live sequence needs only when it needs them (a clock over the pool), so
 * recent prefixes stay reusable while the pool has room. A staged token's
 * rows lie in the staging area (rows.sk, sv; a virtual cell's in its own
 * rows) until that commit copies them: a rollback changes no row.
 */
typedef struct tkv__kvwin {
    uint32_t window;    /* W */
    uint32_t *row_cell; /* (n_rows) the cell that holds pool row r, or UINT32_MAX: free */
    uint32_t *row_free; /* stack of free pool rows */
    uint32_t n_row_free;
    uint32_t hand;      /* the clock: the next row it looks at */
    uint32_t *need;     /* (n_cells) == epoch: among a live sequence's last W positions (its row stays) */
    uint32_t epoch;
    uint32_t *src;      /* (n_cells) batch token i's staged cell (real: staging row i; virtual: its own rows) */
    uint8_t *short_seq; /* (n_seq) 1: the sequence was cut back past the window rows it holds (a truncate), so
                           the next decode replays it from its floor (tkv__kv_win_floor) */
} tkv__kvwin;

/* What tkv__kv_create needs for a window pool. */
typedef struct tkv__kvwin_params {
    uint32_t window;         /* W, > 0 */
    uint32_t n_rows;         /* the pool's rows, at least n_seq x W */
    const bool *layer_win;   /* (n_layer) the cache layer is a window layer */
} tkv__kvwin_params;

typedef struct tkv__kvcache {
    /* read only outside kv/kvcache*.c */
    tkv__kvrows rows; /* the K/V rows of every cell (what the forward pass sees) */
    tkv_token *token; /* (n_cells) TKV_TOKEN_NULL for a free cell */
    tkv_pos *pos;     /* (n_cells) -1 for a free cell */
    uint32_t *free;   /* stack of free cells */
    uint32_t n_free;
    uint32_t n_seq;
    tkv__kvseq *seq;  /* (n_seq) */
    uint64_t evictions; /* cells evicted, ever */
    uint64_t next_pin;  /* the handle the next pin gets (1, 2, ...) */
    /* private */
    tkv__pindex *ix;
    tkv__kvtxn txn;
    uint32_t *cells;      /* (n_cells) the staged cells */
    uint32_t *spare;      /* (n_cells) cells the index hands back (evictions, duplicates) */
    uint32_t *seq_count;  /* (n_seq) tokens per sequence in a staged batch */
    uint32_t *seq_dup;    /* (n_seq) of them, the leading ones the index holds already (pinned while staged) */
    uint8_t *dup;         /* (n_cells) staged token i is one of those: its cell is only scratch */
    tkv_token *run_tokens;/* (n_cells) one sequence's tokens of a batch */
    uint32_t *run_cells;  /* (n_cells) and their cells */
    tkv__kv_event_fn on_event; /* NULL: nobody observes */
    void *event_user;
    tkv_token *ev_tokens; /* (n_cells) an event's prefix */
    uint32_t *ev_cells;   /* (n_cells) and its cells */
    tkv__kvstates *st;    /* recurrent-state checkpoints (kvstate.h), or NULL: the model has no recurrent state */
    tkv__kvwin *win;      /* the window pool, or NULL: every cell has every layer's rows */
    tkv_token *chosen;    /* (n_cells) the token a sampler chose from the logits computed for the cell's token (the
                             token after it on its path, kvknown.c), or TKV_TOKEN_NULL: not known (always for a free
                             cell) */
    uint64_t *chosen_key; /* (n_cells) the key of that sampler's state (runtime/sampler.h): 1 for an argmax */
} tkv__kvcache;

/* A cache of n_cells cells for n_seq sequences, K and V rows of n_embd_kv
   elements per layer, of types type_k and type_v (tkv__kv_type_ok; block
   types need n_embd_kv % 32 == 0). win: the window layers' rows in a pool
   (kvwin.c), or NULL: every cell has every layer's rows. TKV_ERR_UNSUPPORTED,
   TKV_ERR_INVALID, TKV_ERR_NOMEM. */
tkv_status tkv__kv_create(uint32_t n_cells, uint32_t n_layer, uint32_t n_embd_kv, tkv_type type_k, tkv_type type_v,
                          uint32_t n_seq, const tkv__kvwin_params *win, tkv__kvcache **out);

/* Whether K or V rows may be stored as t: F16, F32, Q8_0, Q5_1, Q5_0, Q4_1, Q4_0, IQ4_NL. */
bool tkv__kv_type_ok(tkv_type t);
void tkv__kv_free(tkv__kvcache *kv);

static inline void *tkv__kv_k(const tkv__kvcache *kv, uint32_t layer, uint32_t cell) {
    return tkv__kvrows_k(&kv->rows, layer, cell);
}
static inline void *tkv__kv_v(const tkv__kvcache *kv, uint32_t layer, uint32_t cell) {
    return tkv__kvrows_v(&kv->rows, layer, cell);
}

/* The prefix index, to read (walk nodes, read runs and paths). */
static inline const tkv__pindex *tkv__kv_index(const tkv__kvcache *kv) { return kv->ix; }

/* ---- transactions (kvcache_txn.c) ----------------------------------------- */

/*
 * Stage a batch: every token goes at the end of its sequence (positions
 * must be the sequence's length, then consecutive). The tokens' ids are the
 * caller's to check. Afterwards kv->cells[i] is batch token i's cell and
 * each sequence's cell list holds its staged cells after its published ones
 * (what the forward pass reads). Errors (nothing changed): TKV_ERR_INVALID
 * (sequence, position), TKV_ERR_FULL (too few free and evictable cells),
 * TKV_ERR_NOMEM.
 */
tkv_status tkv__kv_stage_batch(tkv__kvcache *kv, const tkv_batch *b);

/* What tkv__kv_stage_path stages. */
typedef struct tkv__kvpath {
    const char *name;        /* the caller, in messages */
    tkv_seq seq;             /* the sequence that holds the path; < 0: none (the prefix is only cached) */
    uint64_t ns;             /* its namespace */
    const tkv_token *tokens; /* (n) the caller's list, alive until commit or rollback */
    uint32_t n;
    uint32_t reuse_max;      /* reuse at most this many cached tokens */
    uint32_t need_cached;    /* fewer reused than this: TKV_ERR_INVALID (a saved file extends a prefix that is
                                not cached) */
    bool fill;               /* stage cells for the tokens after the reused ones */
} tkv__kvpath;

/*
 * Stage p->seq holding a prefix of p->tokens in p->ns: the longest cached
 * prefix of them, at most reuse_max tokens, is reused (*reused). With fill,
 * the rest, tokens[*reused..n), get cells kv->cells[0..n - *reused), whose
 * K/V rows the caller writes before commit; without, the sequence holds
 * only the reused prefix. Errors (nothing changed): TKV_ERR_INVALID,
 * TKV_ERR_FULL, TKV_ERR_NOMEM.
 */
tkv_status tkv__kv_stage_path(tkv__kvcache *kv, const tkv__kvpath *p, uint32_t *reused);

/*
 * Publish the staged transaction; cannot fail. Evicts what the virtual
 * cells need (least recently used, unheld, unpinned prefixes first) and
 * moves them into the freed cells, writes each cell's token and position,
 * adds the new tokens to the prefix index (where the index already held
 * them, its cells are kept and the new ones freed) and grows or moves the
 * sequences. A path staged for no sequence stays cached, held by nobody.
 */
void tkv__kv_commit(tkv__kvcache *kv);

/* Undo the staged transaction: the cache is as before the stage. */
void tkv__kv_rollback(tkv__kvcache *kv);

/* ---- recurrent-state checkpoints (kvstate.c, kvstate.h) -------------------- */

/* Keep checkpoints of `floats` floats each in n_slots slots (at least n_seq + 2). floats 0: none (nothing
   changes). TKV_ERR_NOMEM (the cache must then be freed). */
tkv_status tkv__kv_states_create(tkv__kvcache *kv, size_t floats, uint32_t n_slots);

/* The longest prefix of the path cells[0..n) whose state is saved: n itself without recurrent state,
   0 when no checkpoint lies on it (the empty prefix's state is zeros). */
uint32_t tkv__kv_state_floor(const tkv__kvcache *kv, const uint32_t *cells, uint32_t n);

/* The checkpoint after the token in cell, or NULL. */
const float *tkv__kv_state_of(const tkv__kvcache *kv, uint32_t cell);

/* Mark the checkpoint at cell used now (the LRU), where there is one. */
void tkv__kv_state_touch(tkv__kvcache *kv, uint32_t cell);

/* Save src (floats of one state) as the checkpoint of cell, which holds a token (a loaded file's): true,
   or false when none could be kept (no memory, every slot at a sequence's end). The caller vouches that it is
   the state after that cell's prefix. */
bool tkv__kv_state_put(tkv__kvcache *kv, uint32_t cell, const float *src);

/* Checkpoints held now. */
uint32_t tkv__kv_states_count(const tkv__kvcache *kv);

/* The checkpoint fields of out (tkv_stats): held, bytes made, budget, evictions, scratch; 0 without states. */
void tkv__kv_states_stats(const tkv__kvcache *kv, tkv_stats *out);

/*
 * After tkv__kv_stage_batch: the batch's runs (one per sequence) and their
 * working states, copied from each sequence's end checkpoint (zeros for an
 * empty one), in kv->st->run / state; a copy buffer in kv->st->snap[i] for
 * every token with snap_kind[i] != TKV__CKPT_NONE (snap_kind may be NULL).
 * The forward pass fills them; the commit saves them. TKV_ERR_INVALID when a
 * sequence's state is not held (the caller replays it first), TKV_ERR_NOMEM;
 * either way nothing is staged (the batch's stage still is).
 */
tkv_status tkv__kv_stage_states(tkv__kvcache *kv, const tkv_batch *b, const uint8_t *snap_kind);

/* ---- the window pool (kvwin.c) --------------------------------------------- */

/* The longest prefix of the path cells[0..n) from which a token can be decoded: the deepest L <= n whose
   positions L - W + 1 .. L - 1 all hold window rows; n without a pool. */
uint32_t tkv__kv_win_floor(const tkv__kvcache *kv, const uint32_t *cells, uint32_t n);

/* What a prefix of the path cells[0..n) is reusable to: the smaller of the recurrent-state floor
   (tkv__kv_state_floor) and the window floor. */
uint32_t tkv__kv_reuse_floor(const tkv__kvcache *kv, const uint32_t *cells, uint32_t n);

/* Whether seq can be decoded on as it is: its recurrent state after its last token is held, and it is not
   cut back past its window rows. Otherwise the caller replays it from tkv__kv_reuse_floor. */
bool tkv__kv_seq_ready(const tkv__kvcache *kv, tkv_seq seq);

/* ---- known tokens (kvknown.c) ----------------------------------------------- */

/*
 * A cell may record the token a sampler chose from the logits computed for its token, with the key of the
 * sampler's state (runtime/sampler.h: its parameters, generator and the tokens it saw; one key for every argmax):
 * in an arithmetic where the logits depend on the prefix alone (batch_invariant), a fact about the prefix the cell
 * ends and that state. A sampler that reaches the prefix again with the same key chooses the same token, and can
 * take it, and the cells of the tokens after it that the tree holds, without computing them: a retry, a
 * regenerate at temperature 0 or with the same seed, an agent repeating a step.
 */

/* The logits computed for the token in `cell`, as its path in the tree stands, gave tok to a sampler whose state's
   key was key. */
void tkv__kv_known_note(tkv__kvcache *kv, uint32_t cell, uint64_t key, tkv_token tok);

/* Whether a walker whose state's key is asked for takes tok, recorded under key: true when its state has that key
   (it then goes on in the state after tok). */
typedef bool tkv__kv_known_fn(void *user, uint64_t key, tkv_token tok);

/* The known tokens after seq's tokens and then `pending`, at most cap of them, into out: the token recorded at
   pending's cell when `take` accepts its key, then, while that token is cached after it, the one recorded there,
   and so on. cells (room for cap) receives the cells of pending and of out[0 .. n - 1). Returns n; 0 when pending
   is not cached after the sequence's end or nothing is known after it. Changes nothing in the cache. */
size_t tkv__kv_known_after(const tkv__kvcache *kv, tkv_seq seq, tkv_token pending, tkv__kv_known_fn *take, void *user,
                           tkv_token *out, uint32_t *cells, size_t cap);

/* Extend seq by tokens[0..n), which the tree holds after its end: the sequence takes their cells, nothing is
   computed. On a hybrid model the state after the last of them must be saved (tkv__kv_state_floor). TKV_ERR_INVALID
   (not cached there, no saved state), TKV_ERR_UNSUPPORTED (window rows), TKV_ERR_NOMEM: nothing changed. */
tkv_status tkv__kv_seq_adopt(tkv__kvcache *kv, tkv_seq seq, const tkv_token *tokens, uint32_t n);

/* ---- sequences (kvcache.c) ------------------------------------------------- */

/* Drop positions n.. of seq (n >= its length: nothing). The dropped tail
   stays cached, evictable once nobody else holds it. Truncated to 0, seq
   is in namespace 0 again. */
void tkv__kv_seq_truncate(tkv__kvcache *kv, tkv_seq seq, uint32_t n);

/* dst holds what src holds (same cells, same namespace). TKV_ERR_NOMEM
   leaves dst as it was. */
tkv_status tkv__kv_seq_fork(tkv__kvcache *kv, tkv_seq src, tkv_seq dst);

/* seq's tokens, positions 0..len-1, into out (room for its length). */
void tkv__kv_seq_tokens(const tkv__kvcache *kv, tkv_seq seq, tkv_token *out);

/* ---- the prefix index ------------------------------------------------------ */

/* Length of the longest cached prefix of tokens[0..n) in namespace ns. */
size_t tkv__kv_match(const tkv__kvcache *kv, uint64_t ns, const tkv_token *tokens, size_t n);

/* tkv__kv_match, and the cells that hold the matched prefix, positions
   0..len-1, in cells[0..len) (room for n). Changes nothing. */
size_t tkv__kv_match_cells(const tkv__kvcache *kv, uint64_t ns, const tkv_token *tokens, size_t n, uint32_t *cells);

/* Pin exactly the prefix of tokens[0..n) cached now (*len: its length; may be NULL): it is never evicted
   until unpinned, and tokens cached later do not join the pin. *id receives the pin's handle, unique in
   this cache, or 0 when nothing is cached (nothing pinned). TKV_ERR_NOMEM: nothing changed. */
tkv_status tkv__kv_pin(tkv__kvcache *kv, uint64_t ns, const tkv_token *tokens, size_t n, size_t *len, uint64_t *id);

/* Release the pin with handle id; false when no pin has it (released already, or never taken). */
bool tkv__kv_unpin(tkv__kvcache *kv, uint64_t id);

/* Hold (delta +1) or release (-1) the cached prefix of tokens[0..n)
   against eviction: the loads of a directory hold each loaded prefix until
   the last file is in. +1 needs a record reserved by tkv__kv_hold_reserve. */
void tkv__kv_hold(tkv__kvcache *kv, uint64_t ns, const tkv_token *tokens, size_t n, int delta);
tkv_status tkv__kv_hold_reserve(tkv__kvcache *kv, uint32_t n);

/* Mark the cached prefix of tokens[0..n) used now (eviction order). */
void tkv__kv_touch(tkv__kvcache *kv, uint64_t ns, const tkv_token *tokens, size_t n);

/* Evict every prefix no sequence holds and nobody pinned. */
void tkv__kv_clear(tkv__kvcache *kv);

/* Report every change of what is cached to fn (NULL: stop). The reports
   allocate nothing; each costs O(length of the prefix) to read its tokens. */
void tkv__kv_set_events(tkv__kvcache *kv, tkv__kv_event_fn fn, void *user);

/* Cell counts into out's cells_*, nodes, kv_bytes, meta_bytes, evictions. */
void tkv__kv_stats(const tkv__kvcache *kv, tkv_stats *out);

/*
 * Verify that everything agrees: the index's own invariants, each indexed
 * cell's token and position, the free list (free cells hold nothing and the
 * counts add up), and each sequence's cell list against its index path and
 * namespace. TKV_OK, or TKV_ERR_FORMAT naming the first violation
 * (TKV_ERR_NOMEM when the check cannot allocate).
 */
tkv_status tkv__kv_check(const tkv__kvcache *kv);

#endif
