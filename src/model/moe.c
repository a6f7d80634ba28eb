/*
 * moe.c — see moe.h.
 */
#include "moe.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>

void tkv__moe_choose(const tkv__moe_dims *d, const float *logits, uint32_t *expert, float *weight) {
    float mx = -INFINITY, p[TKV__MOE_MAX_EXPERTS];
    for (uint32_t e = 0; e < d->n_expert; e++) mx = logits[e] > mx ? logits[e] : mx;
    float sum = 0;
    for (uint32_t e = 0; e < d->n_expert; e++) sum += p[e] = expf(logits[e] - mx);
    for (uint32_t e = 0; e < d->n_expert; e++) p[e] /= sum;
    float chosen = 0;
    for (uint32_t k = 0; k < d->n_used; k++) { /* selection: n_used is small */
        uint32_t best = 0;
        for (uint32_t e = 1; e < d->n_expert; e++)
            if (p[e] > p[best]) best = e;
        expert[k] = best, weight[k] = p[best], chosen += p[best];
        p[best] = -1; /* taken */
    }
    for (uint32_t k = 0; k < d->n_used; k++) weight[k] /= chosen;
}

void tkv__moe_choose_topk_softmax(const tkv__moe_dims *d, const float *logits, uint32_t *expert, float *weight) {
    bool taken[TKV__MOE_MAX_EXPERTS] = {0};
    for (uint32_t k = 0; k < d->n_used; k++) {
        uint32_t best = d->n_expert;
        for (uint32_t e = 0; e < d->n_expert; e++)
            if (!taken[e] && (best == d->n_expert || logits[e] > logits[best])) best = e;
        taken[best] = true;
        expert[k] = best;
    }
    const float mx = logits[expert[0]]; /* the largest */
    float sum = 0;
    for (uint32_t k = 0; k < d->n_used; k++) sum += weight[k] = expf(logits[expert[k]] - mx);
    for (uint32_t k = 0; k < d->n_used; k++) weight[k] /= sum;
}

void tkv__moe_choose_sigmoid(const tkv__moe_dims *d, const float *logits, const float *bias, uint32_t *expert,
                             float *weight) {
    float g[TKV__MOE_MAX_EXPERTS], sel[TKV__MOE_MAX_EXPERTS];
    for (uint32_t e = 0; e < d->n_expert; e++) {
        g[e] = 1.0f / (1.0f + expf(-logits[e]));
        sel[e] = bias ? g[e] + bias[e] : g[e];
    }
    float sum = 0;
    for (uint32_t k = 0; k < d->n_used; k++) {
        uint32_t best = d->n_expert;
        for (uint32_t e = 0; e < d->n_expert; e++)
            if (sel[e] != -INFINITY && (best == d->n_expert || sel[e] > sel[best])) best = e;
        sel[best] = -INFINITY; /* taken */
        expert[k] = best, weight[k] = g[best], sum += g[best];
    }
    /* the reference clamps the sum to F16's smallest normal before it divides */
    if (sum < 6.103515625e-5f) sum = 6.103515625e-5f;
    const float scale = d->w_scale != 0.0f && d->w_scale != 1.0f ? d->w_scale : 1.0f;
    for (uint32_t k = 0; k < d->n_used; k++) {
        weight[k] /= sum;
        if (scale != 1.0f) weight[k] *= scale;
    }
}

void tkv__moe_choose_by(const tkv__moe_dims *d, const float *logits, const float *bias, uint32_t *expert,
                        float *weight) {
    switch (d->gating) {
    case TKV__GATING_SIGMOID: tkv__moe_choose_sigmoid(d, logits, bias, expert, weight); return;
    case TKV__GATING_SOFTMAX_WEIGHT: tkv__moe_choose_topk_softmax(d, logits, expert, weight); return;
    case TKV__GATING_SOFTMAX: break;
    }
    tkv__moe_choose(d, logits, expert, weight);
}
