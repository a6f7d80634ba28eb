/*
 * kvstate.h — recurrent-state checkpoints: the KV cache's record of where a
 * hybrid model's recurrent state (every delta-net layer's conv window and
 * matrices) is saved along its prefixes.
 *
 * A checkpoint is the state after the token of one cell: since a cell holds
 * exactly one position of one prefix, the checkpoint belongs to exactly that
 * prefix, and it goes when the cell goes (tkv__kv_give_back). A prefix of
 * a hybrid model is reusable up to its deepest checkpoint, and a sequence's
 * own state is the checkpoint at its last cell: a fork shares it for free.
 *
 * Checkpoints come from decodes (the kv layer owns them, the runtime says
 * which tokens want one): the end of every sequence's run in a batch
 * (MOVING when the run is one token, a step of generation, whose checkpoint
 * the next step replaces; KEEP when it ends a prompt), and any token the
 * runtime marks (the token before a prompt's last, branch points, every K
 * tokens). They live in at most n_slots slots of one state each (memory is
 * taken as the decodes need it), least recently used first out, except the
 * ones at a sequence's end. The forward pass writes
 * into the transaction's scratch (a working state per run, a copy per marked
 * token); the commit hands each working state to its slot and copies the
 * marked ones, the rollback drops them, so an
 * aborted decode leaves every checkpoint as it was.
 */
#ifndef TKV_KVSTATE_H
#define TKV_KVSTATE_H

#include "tokenkv.h"

#include <stddef.h>
#include <stdint.h>

typedef enum tkv__ckpt_kind {
    TKV__CKPT_NONE = 0,
    TKV__CKPT_MOVING, /* the end of a generation step: dropped when its sequence steps on */
    TKV__CKPT_KEEP,   /* a prompt's end, a branch point, an interval: stays until evicted */
} tkv__ckpt_kind;

typedef struct tkv__kvstates {
    size_t floats;         /* one state */
    uint32_t n_slots;      /* the most checkpoints held at once (the byte budget / one state's bytes) */
    uint32_t n_alloc;      /* slots with memory: slot_mem[0..n_alloc), made as decodes need them */
    float **slot_mem;      /* (n_slots) each slot's state, or NULL */
    int32_t *slot_cell;    /* (n_slots) the cell whose state a slot holds, -1: free */
    uint8_t *slot_kind;    /* (n_slots) tkv__ckpt_kind */
    uint64_t *slot_used;   /* (n_slots) last use, for the LRU */
    tkv_token *slot_token; /* (n_slots) the cell's token and position when saved (tkv__kv_check) */
    tkv_pos *slot_pos;
    int32_t *cell_slot;    /* (n_cells) the slot of the cell's checkpoint, -1: none */
    uint64_t clock;
    uint64_t saved, evicted; /* checkpoints ever saved, and evicted for room */
    /* the staged decode (tkv__kv_stage_states) */
    uint32_t n_runs;
    tkv_seq *run_seq;      /* (n_seq) run r's sequence */
    uint32_t *run_len;     /* (n_seq) its tokens in the batch */
    uint32_t *run_old;     /* (n_seq) its length before the batch */
    int32_t *seq_run;      /* (n_seq) sequence s's run, -1: none */
    uint32_t *ends;        /* (n_seq) scratch: the sequences' end cells, sorted (take_slot) */
    uint32_t *run;         /* (n_cells) batch token i's run */
    float **snap;          /* (n_cells) NULL, or batch token i's copy, in snaps */
    uint8_t *snap_kind;    /* (n_cells) */
    float **work;          /* (n_seq) run r's working state, made as decodes need it (work_cap of them); a commit
                              trades it for the memory of the slot that keeps it, so a step's state is not copied */
    float *snaps;          /* scratch: (snap_cap, floats) */
    uint32_t work_cap, snap_cap;
} tkv__kvstates;

#endif
