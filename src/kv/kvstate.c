/*
 * kvstate.c — recurrent-state checkpoints (see kvstate.h): slots, the
 * staged decode's scratch, commit and rollback, and their check.
 */
#include "kvcache_impl.h"

#include "base/alloc.h"
#include "base/error.h"

#include <stdlib.h>
#include <string.h>

tkv_status tkv__kv_states_create(tkv__kvcache *kv, size_t floats, uint32_t n_slots) {
    if (!floats) return TKV_OK;
    const uint32_t n_cells = kv->rows.n_cells, n_seq = kv->n_seq;
    /* every sequence's end is kept, and a commit needs one more slot to move on */
    if (n_slots < n_seq + 2) n_slots = n_seq + 2;
    tkv__kvstates *s = tkv__calloc(1, sizeof *s);
    if (!s) return tkv__fail(TKV_ERR_NOMEM, "out of memory for recurrent-state checkpoints");
    kv->st = s;
    s->floats = floats;
    s->n_slots = n_slots;
    s->slot_mem = tkv__calloc(n_slots, sizeof *s->slot_mem);
    s->slot_cell = tkv__malloc(n_slots * sizeof *s->slot_cell);
    s->slot_kind = tkv__calloc(n_slots, sizeof *s->slot_kind);
    s->slot_used = tkv__calloc(n_slots, sizeof *s->slot_used);
    s->slot_token = tkv__calloc(n_slots, sizeof *s->slot_token);
    s->slot_pos = tkv__calloc(n_slots, sizeof *s->slot_pos);
    s->cell_slot = tkv__malloc(n_cells * sizeof *s->cell_slot);
    s->run_seq = tkv__calloc(n_seq, sizeof *s->run_seq);
    s->run_len = tkv__calloc(n_seq, sizeof *s->run_len);
    s->run_old = tkv__calloc(n_seq, sizeof *s->run_old);
    s->ends = tkv__calloc(n_seq, sizeof *s->ends);
    s->seq_run = tkv__malloc(n_seq * sizeof *s->seq_run);
    s->run = tkv__calloc(n_cells, sizeof *s->run);
    s->work = tkv__calloc(n_seq, sizeof *s->work);
    s->snap = tkv__calloc(n_cells, sizeof *s->snap);
    s->snap_kind = tkv__calloc(n_cells, sizeof *s->snap_kind);
    if (!s->slot_mem || !s->slot_cell || !s->slot_kind || !s->slot_used || !s->slot_token || !s->slot_pos || !s->cell_slot ||
        !s->run_seq || !s->run_len || !s->run_old || !s->ends || !s->seq_run || !s->run || !s->work || !s->snap || !s->snap_kind)
        return tkv__fail(TKV_ERR_NOMEM, "out of memory for %u recurrent-state checkpoints of %zu KiB", n_slots,
                         floats * sizeof(float) >> 10);
    for (uint32_t i = 0; i < n_slots; i++) s->slot_cell[i] = -1;
    for (uint32_t c = 0; c < n_cells; c++) s->cell_slot[c] = -1;
    for (uint32_t q = 0; q < n_seq; q++) s->seq_run[q] = -1;
    return TKV_OK;
}

void tkv__kv_states_free(tkv__kvcache *kv) {
    tkv__kvstates *s = kv->st;
    if (!s) return;
    for (uint32_t i = 0; i < s->n_alloc; i++) tkv__free(s->slot_mem[i]);
    for (uint32_t r = 0; r < s->work_cap; r++) tkv__free(s->work[r]);
    void *bufs[] = {s->slot_mem, s->slot_cell, s->slot_kind, s->slot_used, s->slot_token, s->slot_pos,
                    s->cell_slot, s->run_seq, s->run_len,   s->run_old,   s->ends,   s->seq_run,    s->run,
                    s->snap,      s->snap_kind, s->work,      s->snaps};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) tkv__free(bufs[i]);
    tkv__free(s);
    kv->st = NULL;
}

static float *slot_mem(const tkv__kvstates *s, int32_t slot) { return s->slot_mem[slot]; }

/* Memory for at least `need` free slots, or every slot the budget allows. TKV_ERR_NOMEM: what was made stays. */
static tkv_status reserve_slots(tkv__kvstates *s, uint32_t need) {
    uint32_t free = 0;
    for (uint32_t i = 0; i < s->n_alloc; i++) free += s->slot_cell[i] < 0;
    while (free < need && s->n_alloc < s->n_slots) {
        if (!(s->slot_mem[s->n_alloc] = tkv__malloc(s->floats * sizeof(float))))
            return tkv__fail(TKV_ERR_NOMEM, "out of memory for a recurrent-state checkpoint of %zu KiB",
                             s->floats * sizeof(float) >> 10);
        s->n_alloc++, free++;
    }
    return TKV_OK;
}

void tkv__kv_state_drop_cell(tkv__kvcache *kv, uint32_t cell) {
    tkv__kvstates *s = kv->st;
    const int32_t slot = s->cell_slot[cell];
    if (slot < 0) return;
    s->slot_cell[slot] = -1;
    s->slot_kind[slot] = TKV__CKPT_NONE;
    s->cell_slot[cell] = -1;
}

const float *tkv__kv_state_of(const tkv__kvcache *kv, uint32_t cell) {
    const int32_t slot = kv->st && cell < kv->rows.n_cells ? kv->st->cell_slot[cell] : -1;
    return slot < 0 ? NULL : slot_mem(kv->st, slot);
}

uint32_t tkv__kv_state_floor(const tkv__kvcache *kv, const uint32_t *cells, uint32_t n) {
    if (!kv->st) return n;
    while (n > 0 && kv->st->cell_slot[cells[n - 1]] < 0) n--;
    return n;
}

void tkv__kv_state_touch(tkv__kvcache *kv, uint32_t cell) {
    tkv__kvstates *s = kv->st;
    if (s && s->cell_slot[cell] >= 0) s->slot_used[s->cell_slot[cell]] = ++s->clock;
}

/* Whether cell is where some sequence ends (its checkpoint is that sequence's state). */
static bool at_seq_end(const tkv__kvcache *kv, int32_t cell) {
    for (uint32_t q = 0; q < kv->n_seq; q++)
        if (kv->seq[q].n && kv->seq[q].cells[kv->seq[q].n - 1] == (uint32_t)cell) return true;
    return false;
}

static int cmp_u32(const void *a, const void *b) {
    const uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

/* A slot for a new checkpoint: a free one, else the least recently used one no sequence ends at
   (evicted), else -1. The sequences' end cells are gathered and sorted once, so a full budget costs
   O(slots log n_seq) here, not O(slots n_seq). */
static int32_t take_slot(tkv__kvcache *kv) {
    tkv__kvstates *s = kv->st;
    for (uint32_t i = 0; i < s->n_alloc; i++)
        if (s->slot_cell[i] < 0) return (int32_t)i;
    uint32_t n_ends = 0;
    for (uint32_t q = 0; q < kv->n_seq; q++)
        if (kv->seq[q].n) s->ends[n_ends++] = kv->seq[q].cells[kv->seq[q].n - 1];
    qsort(s->ends, n_ends, sizeof *s->ends, cmp_u32);
    int32_t best = -1;
    for (uint32_t i = 0; i < s->n_alloc; i++) {
        const uint32_t cell = (uint32_t)s->slot_cell[i];
        if ((best < 0 || s->slot_used[i] < s->slot_used[best]) &&
            !bsearch(&cell, s->ends, n_ends, sizeof *s->ends, cmp_u32))
            best = (int32_t)i;
    }
    if (best >= 0) {
        s->cell_slot[s->slot_cell[best]] = -1;
        s->slot_cell[best] = -1;
        s->evicted++;
    }
    return best;
}

/* Make the slot of cell's checkpoint, kind and use updated: the slot newly taken, whose memory the caller fills;
   -1 when the cell already has one (it holds the same state) or when none is kept (every slot serves a sequence's
   end). */
static int32_t install(tkv__kvcache *kv, uint32_t cell, tkv__ckpt_kind kind) {
    tkv__kvstates *s = kv->st;
    int32_t slot = s->cell_slot[cell], fill = -1;
    if (slot < 0) {
        if ((slot = take_slot(kv)) < 0) return -1;
        s->slot_cell[slot] = (int32_t)cell;
        s->slot_token[slot] = kv->token[cell];
        s->slot_pos[slot] = kv->pos[cell];
        s->slot_kind[slot] = TKV__CKPT_NONE;
        s->cell_slot[cell] = slot;
        s->saved++;
        fill = slot;
    }
    if (kind > s->slot_kind[slot]) s->slot_kind[slot] = (uint8_t)kind;
    s->slot_used[slot] = ++s->clock;
    return fill;
}

/* install, with src copied into a new slot. */
static void install_copy(tkv__kvcache *kv, const float *src, uint32_t cell, tkv__ckpt_kind kind) {
    const int32_t slot = install(kv, cell, kind);
    if (slot >= 0) memcpy(slot_mem(kv->st, slot), src, kv->st->floats * sizeof(float));
}

bool tkv__kv_state_put(tkv__kvcache *kv, uint32_t cell, const float *src) {
    tkv__kvstates *s = kv->st;
    if (!s || cell >= kv->rows.n_cells || kv->token[cell] == TKV_TOKEN_NULL) return false;
    if (s->cell_slot[cell] < 0 && reserve_slots(s, 1) != TKV_OK) return false;
    install_copy(kv, src, cell, TKV__CKPT_KEEP);
    return s->cell_slot[cell] >= 0;
}

tkv_status tkv__kv_stage_states(tkv__kvcache *kv, const tkv_batch *b, const uint8_t *snap_kind) {
    tkv__kvstates *s = kv->st;
    if (!s) return TKV_OK;
    uint32_t n_snap = 0;
    s->n_runs = 0;
    for (size_t i = 0; i < b->n; i++) {
        const tkv_seq q = b->seq[i];
        if (s->seq_run[q] < 0) {
            s->seq_run[q] = (int32_t)s->n_runs;
            s->run_seq[s->n_runs] = q;
            s->run_len[s->n_runs] = 0;
            s->run_old[s->n_runs] = kv->seq[q].n;
            s->n_runs++;
        }
        s->run[i] = (uint32_t)s->seq_run[q];
        s->run_len[s->run[i]]++;
        n_snap += snap_kind && snap_kind[i] != TKV__CKPT_NONE;
    }
    tkv_status st = TKV_OK;
    for (uint32_t r = 0; r < s->n_runs && !st; r++) { /* every run starts from a held state */
        const tkv__kvseq *q = &kv->seq[s->run_seq[r]];
        if (q->n && s->cell_slot[q->cells[q->n - 1]] < 0)
            st = tkv__fail(TKV_ERR_INVALID, "tkv_decode: sequence %d has no recurrent state after its %u tokens",
                           (int)s->run_seq[r], q->n);
    }
    while (!st && s->n_runs > s->work_cap) {
        if ((s->work[s->work_cap] = tkv__malloc(s->floats * sizeof(float)))) s->work_cap++;
        else st = tkv__fail(TKV_ERR_NOMEM, "out of memory for %u recurrent states", s->n_runs);
    }
    if (!st) st = reserve_slots(s, s->n_runs + n_snap);
    if (!st && n_snap > s->snap_cap) {
        float *w = tkv__realloc(s->snaps, (size_t)n_snap * s->floats * sizeof(float));
        if (w) s->snaps = w, s->snap_cap = n_snap;
        else st = tkv__fail(TKV_ERR_NOMEM, "out of memory for %u recurrent-state checkpoints", n_snap);
    }
    if (st) {
        tkv__kv_states_rollback(kv);
        return st;
    }
    for (uint32_t r = 0; r < s->n_runs; r++) {
        const tkv__kvseq *q = &kv->seq[s->run_seq[r]];
        if (q->n) memcpy(s->work[r], slot_mem(s, s->cell_slot[q->cells[q->n - 1]]), s->floats * sizeof(float));
        else memset(s->work[r], 0, s->floats * sizeof(float)); /* a sequence's first token starts from zeros */
    }
    n_snap = 0;
    for (size_t i = 0; i < b->n; i++) {
        s->snap_kind[i] = snap_kind ? snap_kind[i] : TKV__CKPT_NONE;
        s->snap[i] = s->snap_kind[i] != TKV__CKPT_NONE ? s->snaps + (size_t)n_snap++ * s->floats : NULL;
    }
    return TKV_OK;
}

void tkv__kv_states_rollback(tkv__kvcache *kv) {
    tkv__kvstates *s = kv->st;
    if (!s) return;
    for (uint32_t r = 0; r < s->n_runs; r++) s->seq_run[s->run_seq[r]] = -1;
    s->n_runs = 0;
}

void tkv__kv_states_commit(tkv__kvcache *kv, const tkv_batch *b) {
    tkv__kvstates *s = kv->st;
    if (!s || !s->n_runs) return;
    /* each run's end first (never dropped: the slots suffice for every sequence's end), then the copies */
    for (uint32_t r = 0; r < s->n_runs; r++) {
        const tkv__kvseq *q = &kv->seq[s->run_seq[r]];
        const int32_t slot = install(kv, q->cells[q->n - 1], s->run_len[r] > 1 ? TKV__CKPT_KEEP : TKV__CKPT_MOVING);
        if (slot >= 0) { /* the working state becomes the slot's memory, the slot's old memory the next working state */
            float *old = s->slot_mem[slot];
            s->slot_mem[slot] = s->work[r], s->work[r] = old;
        }
    }
    for (size_t i = 0; i < b->n; i++)
        if (s->snap[i]) install_copy(kv, s->snap[i], kv->seq[b->seq[i]].cells[b->pos[i]], (tkv__ckpt_kind)s->snap_kind[i]);
    /* where a run started: a generation step moves the sequence's state on (the old one goes unless another
       sequence ends there); a prompt that extends a sequence keeps it (a turn of a conversation) */
    for (uint32_t r = 0; r < s->n_runs; r++) {
        const tkv__kvseq *q = &kv->seq[s->run_seq[r]];
        if (!s->run_old[r]) continue;
        const uint32_t cell = q->cells[s->run_old[r] - 1];
        const int32_t slot = s->cell_slot[cell];
        if (slot < 0) continue;
        if (s->run_len[r] > 1) s->slot_kind[slot] = TKV__CKPT_KEEP;
        else if (s->slot_kind[slot] == TKV__CKPT_MOVING && !at_seq_end(kv, (int32_t)cell)) tkv__kv_state_drop_cell(kv, cell);
    }
    tkv__kv_states_rollback(kv); /* the scratch is free again */
}

tkv_status tkv__kv_states_check(const tkv__kvcache *kv) {
    const tkv__kvstates *s = kv->st;
    if (!s) return TKV_OK;
    uint32_t used = 0;
    for (uint32_t i = 0; i < s->n_alloc; i++) {
        const int32_t c = s->slot_cell[i];
        if (c < 0) continue;
        used++;
        if ((uint32_t)c >= kv->rows.n_cells || s->cell_slot[c] != (int32_t)i)
            return tkv__fail(TKV_ERR_FORMAT, "checkpoint slot %u: cell %d does not point back at it", i, (int)c);
        if (kv->token[c] == TKV_TOKEN_NULL || kv->token[c] != s->slot_token[i] || kv->pos[c] != s->slot_pos[i])
            return tkv__fail(TKV_ERR_FORMAT,
                             "checkpoint slot %u: saved after token %d at position %d, but its cell %d holds token %d "
                             "at position %d",
                             i, (int)s->slot_token[i], (int)s->slot_pos[i], (int)c, (int)kv->token[c], (int)kv->pos[c]);
    }
    uint32_t pointing = 0;
    for (uint32_t c = 0; c < kv->rows.n_cells; c++) pointing += s->cell_slot[c] >= 0;
    if (pointing != used)
        return tkv__fail(TKV_ERR_FORMAT, "checkpoints: %u cells point at a slot, %u slots are used", pointing, used);
    return TKV_OK;
}

uint32_t tkv__kv_states_count(const tkv__kvcache *kv) {
    uint32_t n = 0;
    for (uint32_t i = 0; kv->st && i < kv->st->n_alloc; i++) n += kv->st->slot_cell[i] >= 0;
    return n;
}

void tkv__kv_states_stats(const tkv__kvcache *kv, tkv_stats *out) {
    const tkv__kvstates *s = kv->st;
    out->checkpoints = out->checkpoint_bytes = out->checkpoint_budget_bytes = 0;
    out->checkpoint_evictions = out->state_scratch_bytes = 0;
    if (!s) return;
    const uint64_t one = (uint64_t)s->floats * sizeof(float);
    out->checkpoints = tkv__kv_states_count(kv);
    out->checkpoint_bytes = s->n_alloc * one;
    out->checkpoint_budget_bytes = s->n_slots * one;
    out->checkpoint_evictions = s->evicted;
    out->state_scratch_bytes = ((uint64_t)s->work_cap + s->snap_cap) * one;
}
