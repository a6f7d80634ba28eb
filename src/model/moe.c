/*
 * moe.c — see moe.h.
 */
#include "moe.h"

#include "base/error.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>

static tkv_status dim(const tkv__gguf *g, const char *arch, const char *name, uint32_t lo, uint32_t hi, uint32_t *out) {
    char key[96];
    snprintf(key, sizeof key, "%s.%s", arch, name);
    const tkv__gguf_kv *kv = tkv__gguf_find(g, key);
    if (!kv || kv->type != TKV_META_U32)
        return tkv__fail(TKV_ERR_FORMAT, "metadata key '%s' is missing (a uint32)", key);
    if (kv->v.u < lo || kv->v.u > hi)
        return tkv__fail(TKV_ERR_FORMAT, "metadata key '%s' = %llu, expected %u..%u", key, (unsigned long long)kv->v.u,
                         lo, hi);
    *out = (uint32_t)kv->v.u;
    return TKV_OK;
}

tkv_status tkv__moe_dims_read(const tkv__gguf *g, const tkv_hparams *hp, tkv__moe_dims *out) {
    tkv_status st;
    if ((st = dim(g, hp->arch, "expert_count", 1, 1024, &out->n_expert))) return st;
    if ((st = dim(g, hp->arch, "expert_used_count", 1, out->n_expert, &out->n_used))) return st;
    return dim(g, hp->arch, "expert_feed_forward_length", 1, 1u << 20, &out->n_ff);
}

void tkv__moe_choose(const tkv__moe_dims *d, const float *logits, uint32_t *expert, float *weight) {
    float mx = -INFINITY, p[1024];
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
    bool taken[1024] = {0};
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
