/*
 * kvcache_txn.c — the KV cache's transactions (see kvcache.h): stage a
 * batch or a path, then commit or roll back.
 *
 * A stage only takes free cells and reserves memory; what it changes in the
 * index (a node cut where a prefix ends, a hold on the reused prefix) does
 * not change what is cached and is undone by rollback. Commit allocates
 * nothing, so it cannot fail; it is the only place where cells are evicted,
 * tokens become cached and sequences grow.
 */
#include "kvcache_impl.h"

#include "base/error.h"

#include <string.h>

enum { TXN_NONE, TXN_BATCH, TXN_PATH };

/* Cells the index could free: prefixes no sequence holds, unpinned. */
static uint64_t evictable_cells(const tkv__kvcache *kv) {
    tkv__pindex_stats st;
    tkv__pindex_stats_get(kv->ix, &st);
    return st.evictable_cells;
}

static tkv_status busy_txn(const tkv__kvcache *kv) {
    if (!kv->txn.kind) return TKV_OK;
    return tkv__fail(TKV_ERR_INVALID, "KV cache: a transaction is already staged");
}

/*
 * Give the n staged tokens their cells in kv->cells[0..n): free ones first, then virtual ones. A token
 * marked in kv->dup[] is one the index already holds where it will be published: the commit keeps the
 * cached cell, so it needs no cell of its own, only a row for the forward pass to write (a free cell if one
 * is left over, else a virtual one that never lands). Every other virtual cell stands for a cell to evict
 * at commit. `what` names the caller. Nothing changes on failure. The caller holds what must survive the
 * eviction (the reused prefix, the cached cells of the marked tokens).
 */
static tkv_status stage_cells(tkv__kvcache *kv, const char *what, uint32_t n) {
    uint32_t n_dup = 0;
    for (uint32_t i = 0; i < n; i++) n_dup += kv->dup[i];
    const uint32_t need = n - n_dup, real = need <= kv->n_free ? need : kv->n_free, land = need - real;
    const uint32_t real_dup = n_dup <= kv->n_free - real ? n_dup : kv->n_free - real;
    const uint32_t virt = land + n_dup - real_dup;
    if (land) {
        const uint64_t ev = evictable_cells(kv);
        if (ev < land)
            return tkv__fail(TKV_ERR_FULL, "%s: KV cache full: %u cells needed, %u free and %llu evictable of %u", what,
                             need, kv->n_free, (unsigned long long)ev, kv->rows.n_cells);
    }
    tkv_status st = virt ? tkv__kv_reserve_virtual(kv, virt) : TKV_OK;
    if (st) return st;
    uint32_t left = real, left_dup = real_dup, v = 0;
    for (uint32_t i = 0; i < n; i++) {
        uint32_t *take = kv->dup[i] ? &left_dup : &left;
        if (*take) tkv__kv_take(kv, 1, &kv->cells[i]), --*take;
        else kv->cells[i] = kv->rows.n_cells + v++;
    }
    return TKV_OK;
}

/* Commit's first step: evict what the virtual cells need and move each into a freed cell (those of marked
   tokens stay virtual: the index keeps its own cells for them). */
static void land_virtual(tkv__kvcache *kv) {
    uint32_t land = 0;
    for (uint32_t i = 0; i < kv->txn.n; i++) land += kv->cells[i] >= kv->rows.n_cells && !kv->dup[i];
    if (!land) return;
    tkv__kv_evict(kv, land > kv->n_free ? land - kv->n_free : 0); /* the stage made sure enough is evictable */
    for (uint32_t i = 0; i < kv->txn.n; i++) {
        if (kv->cells[i] < kv->rows.n_cells || kv->dup[i]) continue;
        uint32_t real;
        tkv__kv_take(kv, 1, &real);
        for (uint32_t l = 0; l < kv->rows.n_layer; l++) {
            if (kv->win && kv->rows.lmap[l] >= 0) continue; /* the window pool's rows land in tkv__kv_win_commit */
            memcpy(tkv__kv_k(kv, l, real), tkv__kv_k(kv, l, kv->cells[i]), kv->rows.row_size_k);
            memcpy(tkv__kv_v(kv, l, real), tkv__kv_v(kv, l, kv->cells[i]), kv->rows.row_size_v);
        }
        kv->cells[i] = real;
    }
}

/* Give cells[0..n) tokens[0..n) at positions from.., and add them to the index after `at`. Returns the new
   end; cells[] is rewritten to the cells the index keeps (where it held these tokens already). */
static tkv__ppos publish_run(tkv__kvcache *kv, uint64_t ns, tkv__ppos at, const tkv_token *tokens, uint32_t *cells,
                             uint32_t n, uint32_t from) {
    for (uint32_t i = 0; i < n; i++) /* a virtual cell here is a kept token's scratch: the index has its cell */
        if (cells[i] < kv->rows.n_cells) kv->token[cells[i]] = tokens[i], kv->pos[cells[i]] = (tkv_pos)(from + i);
    uint32_t n_dup;
    tkv__ppos e = tkv__pindex_insert(kv->ix, ns, at, tokens, cells, n, kv->spare, &n_dup);
    tkv__kv_give_back(kv, kv->spare, n_dup);
    /* the index held the first n_dup of them already: only the rest is new */
    tkv__kv_report(kv, TKV__KVEV_STORED, ns, e, from + n_dup);
    return e;
}

/* ---- batches -------------------------------------------------------------- */

/* Sequence sq's tokens in batch b, in order, into kv->run_tokens (the first `max` of them); returns how many. */
static uint32_t seq_run(tkv__kvcache *kv, const tkv_batch *b, tkv_seq sq, uint32_t max) {
    uint32_t k = 0;
    for (size_t j = 0; j < b->n && k < max; j++)
        if (b->seq[j] == sq) kv->run_tokens[k++] = b->token[j];
    return k;
}

/*
 * Mark the batch tokens the index already holds after their sequence's end (kv->dup[], and per sequence
 * kv->seq_dup[], 0 for those without), and pin where each such run ends, so that the commit's eviction
 * keeps them: the commit then finds them cached and keeps their cells (a cached prompt's last token,
 * decoded again for its logits, needs no cell). TKV_ERR_NOMEM: nothing marked or pinned.
 */
static tkv_status hold_dups(tkv__kvcache *kv, const tkv_batch *b) {
    uint32_t n_runs = 0;
    memset(kv->seq_dup, 0, kv->n_seq * sizeof *kv->seq_dup);
    memset(kv->dup, 0, b->n);
    for (uint32_t s = 0; s < kv->n_seq; s++) {
        if (!kv->seq_count[s]) continue;
        const uint32_t k = seq_run(kv, b, (tkv_seq)s, kv->seq_count[s]);
        tkv__ppos to;
        kv->seq_dup[s] = (uint32_t)tkv__pindex_follow(kv->ix, kv->seq[s].ns, tkv__pindex_seq_end(kv->ix, (tkv_seq)s),
                                                      kv->run_tokens, k, &to);
        n_runs += kv->seq_dup[s] != 0;
    }
    if (!n_runs) return TKV_OK;
    tkv_status st = tkv__pindex_pin_reserve(kv->ix, n_runs);
    if (st) {
        memset(kv->seq_dup, 0, kv->n_seq * sizeof *kv->seq_dup);
        return st;
    }
    for (uint32_t s = 0; s < kv->n_seq; s++) {
        if (!kv->seq_dup[s]) continue;
        const uint32_t k = seq_run(kv, b, (tkv_seq)s, kv->seq_dup[s]);
        tkv__ppos to;
        tkv__pindex_follow(kv->ix, kv->seq[s].ns, tkv__pindex_seq_end(kv->ix, (tkv_seq)s), kv->run_tokens, k, &to);
        tkv__pindex_pin(kv->ix, to, +1); /* reserved: cannot fail */
    }
    uint32_t *seen = kv->seq_count; /* counted again below: the stage recounts it */
    memset(seen, 0, kv->n_seq * sizeof *seen);
    for (size_t i = 0; i < b->n; i++) kv->dup[i] = seen[b->seq[i]]++ < kv->seq_dup[b->seq[i]];
    return TKV_OK;
}

/* Release hold_dups' pins (before the commit publishes anything, or at rollback: the sequences' ends have
   not moved, and the pinned runs are still cached after them). */
static void release_dups(tkv__kvcache *kv, const tkv_batch *b) {
    for (uint32_t s = 0; s < kv->n_seq; s++) {
        if (!kv->seq_dup[s]) continue;
        const uint32_t k = seq_run(kv, b, (tkv_seq)s, kv->seq_dup[s]);
        tkv__ppos to;
        tkv__pindex_follow(kv->ix, kv->seq[s].ns, tkv__pindex_seq_end(kv->ix, (tkv_seq)s), kv->run_tokens, k, &to);
        tkv__pindex_pin(kv->ix, to, -1);
        kv->seq_dup[s] = 0;
    }
}

tkv_status tkv__kv_stage_batch(tkv__kvcache *kv, const tkv_batch *b) {
    tkv_status st = busy_txn(kv);
    if (st) return st;
    if (b->n > kv->rows.n_cells)
        return tkv__fail(TKV_ERR_FULL, "tkv_decode: %zu tokens exceed the cache's %u cells", b->n, kv->rows.n_cells);
    memset(kv->seq_count, 0, kv->n_seq * sizeof *kv->seq_count);
    for (size_t i = 0; i < b->n; i++) {
        if (b->seq[i] < 0 || (uint32_t)b->seq[i] >= kv->n_seq)
            return tkv__fail(TKV_ERR_INVALID, "batch token %zu: sequence %d is out of range (n_seq_max %u)", i,
                             (int)b->seq[i], kv->n_seq);
        const tkv_seq s = b->seq[i];
        const tkv_pos want = (tkv_pos)(kv->seq[s].n + kv->seq_count[s]);
        if (b->pos[i] != want)
            return tkv__fail(TKV_ERR_INVALID,
                             "batch token %zu: position %d in sequence %d, expected %d (sequences grow at their end)", i,
                             (int)b->pos[i], (int)s, (int)want);
        kv->seq_count[s]++;
    }
    /* room in every list first: a grown list is still valid (reservation is not publication) */
    for (uint32_t s = 0; s < kv->n_seq; s++)
        if (kv->seq_count[s] && (st = tkv__kv_seq_room(kv, (tkv_seq)s, kv->seq[s].n + kv->seq_count[s]))) return st;
    if ((st = tkv__kv_win_reserve(kv, (uint32_t)b->n))) return st;
    if ((st = hold_dups(kv, b))) return st;
    if ((st = stage_cells(kv, "tkv_decode", (uint32_t)b->n))) {
        release_dups(kv, b);
        return st;
    }
    tkv__kv_win_stage(kv, (uint32_t)b->n); /* the window layers' rows go to the staging area */
    /* each token's cell after its sequence's published cells, where attention reads it */
    memset(kv->seq_count, 0, kv->n_seq * sizeof *kv->seq_count);
    for (size_t i = 0; i < b->n; i++) {
        tkv__kvseq *s = &kv->seq[b->seq[i]];
        s->cells[s->n + kv->seq_count[b->seq[i]]++] = kv->cells[i];
    }
    kv->txn = (tkv__kvtxn){.kind = TXN_BATCH, .n = (uint32_t)b->n, .b = b, .seq = -1};
    return TKV_OK;
}

/* Commit a batch: each sequence's tokens in batch order (their positions are consecutive). */
static void commit_batch(tkv__kvcache *kv) {
    const tkv_batch *b = kv->txn.b;
    for (size_t i = 0; i < b->n; i++) {
        const tkv_seq sq = b->seq[i];
        if (kv->seq_count[sq] == 0) continue; /* published with an earlier token */
        uint32_t k = 0;
        for (size_t j = i; j < b->n && k < kv->seq_count[sq]; j++)
            if (b->seq[j] == sq) kv->run_tokens[k] = b->token[j], kv->run_cells[k] = kv->cells[j], k++;
        tkv__kvseq *s = &kv->seq[sq];
        tkv__ppos to = publish_run(kv, s->ns, tkv__pindex_seq_end(kv->ix, sq), kv->run_tokens, kv->run_cells, k, s->n);
        memcpy(s->cells + s->n, kv->run_cells, k * sizeof *s->cells);
        k = 0; /* each token's final cell back in kv->cells (the window pool's commit reads them) */
        for (size_t j = i; j < b->n && k < kv->seq_count[sq]; j++)
            if (b->seq[j] == sq) kv->cells[j] = kv->run_cells[k++];
        s->n += k;
        tkv__pindex_seq_set(kv->ix, sq, to);
        kv->seq_count[sq] = 0;
    }
}

/* ---- paths ---------------------------------------------------------------- */

tkv_status tkv__kv_stage_path(tkv__kvcache *kv, const tkv__kvpath *p, uint32_t *reused) {
    const char *name = p->name;
    const tkv_seq seq = p->seq;
    const uint64_t ns = p->ns;
    const tkv_token *tokens = p->tokens;
    const uint32_t n = p->n, reuse_max = p->reuse_max, need_cached = p->need_cached;
    const bool fill = p->fill;
    tkv_status st = busy_txn(kv);
    if (st) return st;
    if (seq >= 0 && (uint32_t)seq >= kv->n_seq)
        return tkv__fail(TKV_ERR_INVALID, "%s: sequence %d is out of range (n_seq_max %u)", name, (int)seq, kv->n_seq);
    if (n > kv->rows.n_cells)
        return tkv__fail(TKV_ERR_FULL, "%s: %u tokens exceed the cache's %u cells", name, n, kv->rows.n_cells);
    if (seq >= 0 && (st = tkv__kv_seq_room(kv, seq, n))) return st; /* before anything moves */
    if (fill && kv->win)
        return tkv__fail(TKV_ERR_UNSUPPORTED, "%s: loading K/V rows is not supported with swa_rows > 0 (a window "
                         "layer keeps rows only for the positions that need them)", name);
    tkv__ppos at;
    const uint32_t cached = (uint32_t)tkv__pindex_match(kv->ix, ns, tokens, n, false, &at);
    const uint32_t keep = cached < reuse_max ? cached : reuse_max;
    if (keep < need_cached)
        return tkv__fail(TKV_ERR_INVALID,
                         "%s: extends a prefix of %u tokens that is not cached (%u of them are): load the file of that "
                         "prefix first",
                         name, need_cached, keep);
    /* the reused prefix ends a node, so that a hold on it is exact and a rollback finds every end where it was */
    at = tkv__pindex_cut(kv->ix, tkv__pindex_ancestor(kv->ix, at, keep));
    const tkv__ppos old = seq >= 0 ? tkv__pindex_seq_end(kv->ix, seq) : TKV__PPOS_EMPTY;
    const uint32_t need = fill ? n - keep : 0;
    if (need) {
        /* hold the reused prefix while making room: by the sequence itself (its old tokens may then be
           evicted, as tkv_seq_sync allows), or by a pin */
        if (seq >= 0) at = tkv__pindex_seq_set(kv->ix, seq, at); /* the position may be renamed */
        else if ((st = tkv__pindex_pin(kv->ix, at, +1))) return st;
        memset(kv->dup, 0, need); /* what follows the reused prefix: the commit finds out what it held already */
        if ((st = stage_cells(kv, name, need))) {
            if (seq >= 0) tkv__pindex_seq_set(kv->ix, seq, old);
            else tkv__pindex_pin(kv->ix, at, -1);
            return st;
        }
    }
    kv->txn = (tkv__kvtxn){.kind = TXN_PATH, .n = need, .seq = seq, .ns = ns, .tokens = tokens,
                           .reused = keep, .len = keep + need, .at = at, .old = old};
    *reused = keep;
    return TKV_OK;
}

static void commit_path(tkv__kvcache *kv) {
    const tkv__kvtxn *t = &kv->txn;
    tkv__ppos e = t->at;
    if (t->n) e = publish_run(kv, t->ns, t->at, t->tokens + t->reused, kv->cells, t->n, t->reused);
    if (t->seq >= 0) {
        tkv__kv_seq_move(kv, t->seq, t->ns, e);
        tkv__kv_win_mark_short(kv, t->seq);
        if (!t->n) tkv__pindex_hit(kv->ix, tkv__pindex_seq_end(kv->ix, t->seq)); /* an attach: a reuse */
        return;
    }
    if (t->n) {
        tkv__pindex_pin(kv->ix, t->at, -1);
        /* where the new tokens grew a leaf in place, split them off: held by nobody, they must be evictable
           on their own */
        if (t->at.node != TKV__PNONE && e.node == t->at.node) {
            tkv__pindex_cut(kv->ix, t->at);
        }
    }
}

/* ---- commit and rollback -------------------------------------------------- */

void tkv__kv_commit(tkv__kvcache *kv) {
    land_virtual(kv);
    if (kv->txn.kind == TXN_BATCH)
        release_dups(kv, kv->txn.b), commit_batch(kv),
            tkv__kv_states_commit(kv, kv->txn.b), tkv__kv_win_commit(kv, kv->txn.n);
    else if (kv->txn.kind == TXN_PATH) commit_path(kv);
    kv->txn.kind = TXN_NONE;
}

void tkv__kv_rollback(tkv__kvcache *kv) {
    const tkv__kvtxn *t = &kv->txn;
    tkv__kv_give_back(kv, kv->cells, t->n); /* the real ones among them: virtual cells are skipped */
    if (t->kind == TXN_BATCH) release_dups(kv, t->b), tkv__kv_states_rollback(kv);
    if (t->kind == TXN_PATH && t->n) {
        if (t->seq >= 0) tkv__pindex_seq_set(kv->ix, t->seq, t->old);
        else tkv__pindex_pin(kv->ix, t->at, -1);
    }
    kv->txn.kind = TXN_NONE;
}
