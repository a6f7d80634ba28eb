/*
 * forward.h — the transformer forward pass over a batch of tokens.
 */
#ifndef TKV_FORWARD_H
#define TKV_FORWARD_H

#include "kvrows.h"
#include "model.h"
#include "compute/threadpool.h"

/*
 * Batches of at least this many tokens attend in float with one softmax per
 * (token, head) (the reference's prefill form); shorter ones in the
 * reference's one-pass F16 form, which it uses for decoding and short
 * batches and which its reference logits were made with.
 */
#define TKV__ATTN_BATCHED_MIN 32
/* tokens per unit of prefill attention: they share each widened K/V row */
#define TKV__ATTN_TOKENS 4

/* Scratch for forward passes of up to n_batch tokens (sized once). */
typedef struct tkv__fwd tkv__fwd;

tkv_status tkv__fwd_create(const tkv_model *m, uint32_t n_batch, uint32_t n_cells, int n_threads, tkv__fwd **out);
void tkv__fwd_free(tkv__fwd *f);

typedef struct tkv__fwd_batch {
    uint32_t n;                   /* tokens, 1..n_batch */
    const tkv_token *token;       /* (n) ids, already checked */
    const tkv_pos *pos;           /* (n) */
    const uint32_t *const *cells; /* (n) token i's sequence: cells[i][p] for p in 0..pos[i] */
    const uint32_t *cell;         /* (n) the cell that receives token i's K/V (== cells[i][pos[i]]) */
    uint32_t n_out;               /* tokens that want logits */
    const uint32_t *out;          /* (n_out) their batch indices */
    float *logits;                /* (n_out, n_vocab) */
    bool attn_float;              /* batch invariance: every token attends in float, and float weights
                                     take one product order, whatever n */
    /* recurrent layers (m->ext.state_floats > 0), else 0 / NULL. A run is one sequence's tokens of the
       batch, in position order (the batch may interleave runs). */
    uint32_t n_runs;
    const uint32_t *run;          /* (n) token i's run */
    float *const *state;          /* (n_runs) each run's state (ext.state_floats), updated in place: the
                                     state before its first token here on entry, after its last on return */
    float *const *snap;           /* (n) NULL, or where the state after token i is copied */
} tkv__fwd_batch;

/*
 * Compute the batch: write each token's K/V rows into its cell (all layers),
 * advance each run's recurrent state, and the logits of the tokens in `out`.
 * The abort callback is asked before each layer; TKV_ERR_ABORTED then (cells
 * and states may be partly written: the caller publishes neither).
 */
tkv_status tkv__forward(tkv__fwd *f, tkv__kvrows *kv, tkv__pool *pool, const tkv__fwd_batch *b, tkv_abort_fn abort_cb,
                        void *abort_user);

#endif
