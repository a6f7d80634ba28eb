/*
 * kvcache_impl.h — the steps kvcache.c and kvcache_txn.c share. Private to
 * them: every other file goes through kvcache.h.
 */
#ifndef TKV_KVCACHE_IMPL_H
#define TKV_KVCACHE_IMPL_H

#include "kvcache.h"

/* Take n free cells into out[] (the caller checked n <= n_free). */
void tkv__kv_take(tkv__kvcache *kv, uint32_t n, uint32_t *out);

/* Free cells that hold nothing the index knows: taken and never published,
   or let go by the index. Virtual cells are skipped. */
void tkv__kv_give_back(tkv__kvcache *kv, const uint32_t *cells, uint32_t n);

/* Evict up to `want` cells (least recently used first) and free them;
   returns how many. */
uint32_t tkv__kv_evict(tkv__kvcache *kv, uint32_t want);

/* Report the run from..end-1 of the prefix ending at `at` (kind TKV__KVEV_*) when someone observes. */
void tkv__kv_report(tkv__kvcache *kv, int kind, uint64_t ns, tkv__ppos at, uint32_t from);

/* Room for `len` cells in seq's list (what it holds is kept).
   TKV_ERR_NOMEM leaves the list as it was. */
tkv_status tkv__kv_seq_room(tkv__kvcache *kv, tkv_seq seq, uint32_t len);

/* Room for n virtual cells. TKV_ERR_NOMEM leaves the cache as it was. */
tkv_status tkv__kv_reserve_virtual(tkv__kvcache *kv, uint32_t n);

/* Point seq at `at` (a prefix in namespace ns): its list becomes the path
   (room reserved), and what follows `at` in its node is cut off so that
   seq holds exactly its tokens. */
void tkv__kv_seq_move(tkv__kvcache *kv, tkv_seq seq, uint64_t ns, tkv__ppos at);

/* Checkpoints (kvstate.c): the one of a cell that is freed; the staged decode's saved (after its batch
   is published) or dropped; the check; the end. */
void tkv__kv_state_drop_cell(tkv__kvcache *kv, uint32_t cell);
void tkv__kv_states_commit(tkv__kvcache *kv, const tkv_batch *b);
void tkv__kv_states_rollback(tkv__kvcache *kv);
tkv_status tkv__kv_states_check(const tkv__kvcache *kv);
void tkv__kv_states_free(tkv__kvcache *kv);

/* The window pool (kvwin.c): create and free; the stage's rows (after the cells: batch token i writes
   staging row i; TKV_ERR_NOMEM before anything is staged, from reserve); the commit's (after the batch is
   published, kv->cells holding each token's final cell); the row of a cell that is freed; whether a
   sequence lacks the rows it continues from; the check; the pool's bytes. */
tkv_status tkv__kv_win_create(tkv__kvcache *kv, const tkv__kvwin_params *wp);
void tkv__kv_win_free(tkv__kvcache *kv);
tkv_status tkv__kv_win_reserve(tkv__kvcache *kv, uint32_t n);
void tkv__kv_win_stage(tkv__kvcache *kv, uint32_t n);
void tkv__kv_win_commit(tkv__kvcache *kv, uint32_t n);
void tkv__kv_win_drop_cell(tkv__kvcache *kv, uint32_t cell);
void tkv__kv_win_mark_short(tkv__kvcache *kv, tkv_seq seq);
tkv_status tkv__kv_win_check(const tkv__kvcache *kv);
uint64_t tkv__kv_win_bytes(const tkv__kvcache *kv);

#endif
