/*
 * kvknown.c — known tokens: cells that record the token a sampler chose from
 * the logits computed for their token, and the key of its state (kvcache.h
 * says when that is a fact about the prefix the cell ends), and sequences
 * that follow those records through the tree without computing the tokens.
 *
 * A record belongs to its cell, whose prefix never changes while the cell
 * holds its token: it is written only by the caller that sampled the cell's
 * own logits row (tkv__kv_known_note), and a freed cell loses it
 * (tkv__kv_give_back; tkv__kv_check holds free cells to that).
 */
#include "kvcache_impl.h"

#include "base/error.h"

void tkv__kv_known_note(tkv__kvcache *kv, uint32_t cell, uint64_t key, tkv_token tok) {
    if (cell < kv->rows.n_cells && kv->token[cell] != TKV_TOKEN_NULL) kv->chosen[cell] = tok, kv->chosen_key[cell] = key;
}

typedef struct walk {
    const tkv__kvcache *kv;
    tkv__kv_known_fn *take;
    void *user;
} walk;

/* tkv__pindex_next_fn: the cell's recorded token, where the walker takes its key */
static tkv_token next_known(void *user, uint32_t cell) {
    const walk *w = user;
    const tkv_token t = w->kv->chosen[cell];
    return t != TKV_TOKEN_NULL && w->take(w->user, w->kv->chosen_key[cell], t) ? t : TKV_TOKEN_NULL;
}

size_t tkv__kv_known_after(const tkv__kvcache *kv, tkv_seq seq, tkv_token pending, tkv__kv_known_fn *take, void *user,
                           tkv_token *out, uint32_t *cells, size_t cap) {
    if (!cap) return 0;
    const tkv__kvseq *s = &kv->seq[seq];
    walk w = {kv, take, user};
    return tkv__pindex_follow_chain(kv->ix, s->ns, tkv__pindex_seq_end(kv->ix, seq), pending, next_known, &w, out,
                                    cells, cap);
}

tkv_status tkv__kv_seq_adopt(tkv__kvcache *kv, tkv_seq seq, const tkv_token *tokens, uint32_t n) {
    if (kv->txn.kind) return tkv__fail(TKV_ERR_INVALID, "sequence %d: a transaction is staged", (int)seq);
    tkv__kvseq *s = &kv->seq[seq];
    tkv__ppos to;
    if (tkv__pindex_follow(kv->ix, s->ns, tkv__pindex_seq_end(kv->ix, seq), tokens, n, &to) != n)
        return tkv__fail(TKV_ERR_INVALID, "sequence %d: the %u tokens to take are not cached after its end", (int)seq, n);
    if (!n) return TKV_OK;
    tkv_status st = tkv__kv_seq_room(kv, seq, s->n + n);
    if (st) return st;
    const uint32_t last = (uint32_t)(s->n + n);
    /* the list past s->n is room, not the sequence: the path's cells go there first (its first s->n are the
       sequence's own), so that a refusal below leaves the sequence as it was */
    tkv__pindex_path(kv->ix, to, s->cells, NULL);
    if (kv->st && !tkv__kv_state_of(kv, s->cells[last - 1])) /* decoding goes on from the state after them */
        return tkv__fail(TKV_ERR_INVALID, "sequence %d: no state is saved after the %u tokens to take", (int)seq, n);
    /* ... and attends to the window rows of the W - 1 positions before the next one: the pool holds them (the
       next commit keeps them, as any live sequence's last W) */
    if (tkv__kv_win_floor(kv, s->cells, last) != last)
        return tkv__fail(TKV_ERR_INVALID, "sequence %d: the window rows before the end of the %u tokens to take are "
                         "not held", (int)seq, n);
    tkv__pindex_seq_set(kv->ix, seq, to); /* renames positions, never cells: the list stands */
    s->n = last;
    tkv__pindex_touch(kv->ix, tkv__pindex_seq_end(kv->ix, seq));
    if (kv->st) tkv__kv_state_touch(kv, s->cells[last - 1]);
    tkv__kv_win_mark_short(kv, seq); /* not short: its window rows are held */
    return TKV_OK;
}
