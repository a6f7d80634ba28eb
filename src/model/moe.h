/*
 * moe.h — the sizes of a mixture-of-experts FFN (arch->moe; model.c reads
 * them) and how a token chooses its experts; forward.c runs the experts.
 */
#ifndef TKV_MOE_H
#define TKV_MOE_H

#include "tokenkv.h"

#include <stdint.h>

/* How the router's logits become the experts' weights: [ARCH.expert_gating_func], the values the
   reference's files use. */
typedef enum tkv__moe_gating {
    TKV__GATING_SOFTMAX = 1,        /* softmax over all experts, the top k renormalized (tkv__moe_choose) */
    TKV__GATING_SIGMOID = 2,        /* sigmoid gates, the top k (by gate + bias) renormalized */
    TKV__GATING_SOFTMAX_WEIGHT = 3, /* the top k logits, a softmax over those alone */
} tkv__moe_gating;

typedef struct tkv__moe_dims {
    uint32_t n_expert; /* [ARCH.expert_count] */
    uint32_t n_used;   /* [ARCH.expert_used_count], 1..n_expert */
    uint32_t n_ff;     /* [ARCH.expert_feed_forward_length] */
    uint32_t n_ff_shared; /* [ARCH.expert_shared_feed_forward_length] (arch->shared_expert), else 0 */
    uint32_t n_dense_lead; /* [ARCH.leading_dense_block_count]: layers before it have a dense FFN */
    tkv__moe_gating gating; /* [ARCH.expert_gating_func]; default softmax (gpt-oss: softmax_weight) */
    float w_scale;     /* [ARCH.expert_weights_scale]: the weights times it (0 or absent: 1) */
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

/* The sigmoid choice (lfm2moe): gates g = sigmoid(logits); the n_used largest g + bias (bias may be NULL; the
   lower index first on a tie); their weights g over the sum of the chosen g (at least 2^-14), times w_scale. */
void tkv__moe_choose_sigmoid(const tkv__moe_dims *d, const float *logits, const float *bias, uint32_t *expert,
                             float *weight);

/* The choice d->gating names (bias: the choice bias of sigmoid gates, or NULL). */
void tkv__moe_choose_by(const tkv__moe_dims *d, const float *logits, const float *bias, uint32_t *expert,
                        float *weight);

#endif
