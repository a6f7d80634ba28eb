/*
 * kvknown.c — known tokens: cells that record that their token is the
 * argmax of the logits of the position before them (kvcache.h says when
 * that is a fact about the prefix), and sequences that follow them through
 * the tree without computing them.
 *
 * A mark is set only where the caller vouches for it (tkv__kv_known_note,
 * from the sampler that chose the token), on the cell the sequence holds at
 * that position: a token chosen for a position the sequence has not
 * decoded yet (the next pending token) waits as the sequence's expectation
 * until a batch appends it, and dies with any other change of the
 * sequence, so a mark never lands on a prefix other than the one whose
 * logits chose it. A freed cell loses its mark (tkv__kv_give_back), and
 * tkv__kv_check holds free cells to that.
 */
#include "kvcache_impl.h"

#include "base/error.h"

void tkv__kv_known_note(tkv__kvcache *kv, tkv_seq seq, uint32_t pos, tkv_token tok) {
    tkv__kvseq *s = &kv->seq[seq];
    if (pos == 0 || pos > s->n) return;
    if (pos < s->n) {
        if (kv->token[s->cells[pos]] == tok) kv->known[s->cells[pos]] = 1;
        return;
    }
    s->known_on = true, s->known_tok = tok, s->known_pos = pos, s->known_cut = s->cut;
}

void tkv__kv_known_commit(tkv__kvcache *kv, const tkv_batch *b) {
    for (size_t j = 0; j < b->n; j++) {
        const tkv__kvseq *s = &kv->seq[b->seq[j]];
        if (s->known_on && s->known_cut == s->cut && (uint32_t)b->pos[j] == s->known_pos && b->token[j] == s->known_tok)
            kv->known[s->cells[s->known_pos]] = 1;
    }
    for (size_t j = 0; j < b->n; j++) kv->seq[b->seq[j]].known_on = false;
}

size_t tkv__kv_known_after(const tkv__kvcache *kv, tkv_seq seq, tkv_token pending, tkv_token *out, size_t cap) {
    if (kv->st || kv->win || !cap) return 0;
    const tkv__kvseq *s = &kv->seq[seq];
    tkv__ppos at;
    if (tkv__pindex_follow(kv->ix, s->ns, tkv__pindex_seq_end(kv->ix, seq), &pending, 1, &at) != 1) return 0;
    return tkv__pindex_follow_marked(kv->ix, s->ns, at, kv->known, out, cap);
}

tkv_status tkv__kv_seq_adopt(tkv__kvcache *kv, tkv_seq seq, const tkv_token *tokens, uint32_t n) {
    if (kv->st || kv->win)
        return tkv__fail(TKV_ERR_UNSUPPORTED, "sequence %d cannot take cached cells without computing them: the model "
                         "keeps recurrent state or window rows", (int)seq);
    tkv__kvseq *s = &kv->seq[seq];
    tkv__ppos to;
    if (tkv__pindex_follow(kv->ix, s->ns, tkv__pindex_seq_end(kv->ix, seq), tokens, n, &to) != n)
        return tkv__fail(TKV_ERR_INVALID, "sequence %d: the %u tokens to take are not cached after its end", (int)seq, n);
    if (!n) return TKV_OK;
    tkv_status st = tkv__kv_seq_room(kv, seq, s->n + n);
    if (st) return st;
    to = tkv__pindex_seq_set(kv->ix, seq, to); /* positions below may be renamed: use the one returned */
    tkv__pindex_path(kv->ix, to, s->cells, NULL);
    s->n += n;
    tkv__pindex_touch(kv->ix, to);
    return TKV_OK;
}
