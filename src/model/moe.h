/*
 * moe.h — the sizes of a mixture-of-experts FFN (arch->moe; model.c reads
 * them) and how a token chooses its experts; forward.c runs the experts.
 */
#ifndef TKV_MOE_H
#define TKV_MOE_H

#include "tokenkv.h"

#include <stdint.h>

typedef struct tkv__moe_dims {
    uint32_t n_expert; /* [ARCH.expert_count] */
    uint32_t n_used;   /* [ARCH.expert_used_count], 1..n_expert */
    uint32_t n_ff;     /* [ARCH.expert_feed_forward_length] */
    uint32_t n_ff_shared; /* [ARCH.expert_shared_feed_forward_length] (arch->shared_expert), else 0 */
} tkv__moe_dims;

/* The most experts a model may have (the choice keeps one float per expert on the stack). */
#define TKV__MOE_MAX_EXPERTS 1024

/*
 * The experts of one token from its router logits (n_expert): softmax over
 * all of them, the n_used largest probabilities (the lower index first on a
 * tie), renormalized to sum 1. Writes their indices and weights (n_used).
 */
void tkv__moe_choose(const tkv__moe_dims *d, const float *logits, uint32_t *expert, float *weight);

/* gpt-oss's choice: the n_used largest logits (the lower index first on a
   tie), their weights a softmax over those n_used alone. */
void tkv__moe_choose_topk_softmax(const tkv__moe_dims *d, const float *logits, uint32_t *expert, float *weight);

#endif
