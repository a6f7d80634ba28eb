/*
 * deltanet.c — the gated delta net's per-token steps (see deltanet.h), in
 * float, one fixed order: a token's result is the same whatever batch
 * carried it, which keeps prefix reuse exact (the restored state is the
 * state a fresh pass reaches).
 */
#include "deltanet.h"

#include <math.h>

static inline float silu(float x) { return x / (1.0f + expf(-x)); }

static void l2norm(float *x, size_t n, float eps) {
    float ss = 0;
    for (size_t i = 0; i < n; i++) ss += x[i] * x[i];
    const float s = 1.0f / fmaxf(sqrtf(ss), eps);
    for (size_t i = 0; i < n; i++) x[i] *= s;
}

void tkv__deltanet_conv(const tkv__delta_dims *d, const float *w, const float *const *rows, float eps, float *c) {
    const uint32_t K = d->d_conv;
    for (uint32_t ch = 0; ch < d->channels; ch++) {
        float acc = 0;
        for (uint32_t k = 0; k < K; k++) acc += w[(size_t)ch * K + k] * rows[k][ch];
        c[ch] = silu(acc);
    }
    for (uint32_t h = 0; h < 2 * d->n_k; h++) l2norm(c + (size_t)h * d->d_k, d->d_k, eps); /* q heads, then k heads */
}

void tkv__deltanet_step(const tkv__delta_dims *d, float *S, const float *q, const float *k, const float *v, float g,
                        float beta, float *o) {
    const uint32_t dk = d->d_k, dv = d->d_v;
    const float decay = expf(g), scale = 1.0f / sqrtf((float)dk);
    float delta[TKV__DELTA_MAX_DV]; /* beta (v - S^T k), after the decay (dv checked at load) */
    for (uint32_t j = 0; j < dv; j++) delta[j] = 0;
    for (uint32_t i = 0; i < dk; i++) {
        float *row = S + (size_t)i * dv;
        for (uint32_t j = 0; j < dv; j++) {
            row[j] *= decay;
            delta[j] += row[j] * k[i];
        }
    }
    for (uint32_t j = 0; j < dv; j++) delta[j] = beta * (v[j] - delta[j]);
    for (uint32_t j = 0; j < dv; j++) o[j] = 0;
    for (uint32_t i = 0; i < dk; i++) {
        float *row = S + (size_t)i * dv;
        const float qi = q[i] * scale;
        for (uint32_t j = 0; j < dv; j++) {
            row[j] += k[i] * delta[j];
            o[j] += row[j] * qi;
        }
    }
}

void tkv__deltanet_gate_norm(const tkv__delta_dims *d, float *o, const float *z, const float *w, float eps) {
    for (uint32_t h = 0; h < d->n_v; h++) {
        float *x = o + (size_t)h * d->d_v;
        const float *zh = z + (size_t)h * d->d_v;
        float ss = 0;
        for (uint32_t j = 0; j < d->d_v; j++) ss += x[j] * x[j];
        const float s = 1.0f / sqrtf(ss / (float)d->d_v + eps);
        for (uint32_t j = 0; j < d->d_v; j++) x[j] = x[j] * s * w[j] * silu(zh[j]);
    }
}
