/*
 * deltanet.c — the gated delta net's per-token steps (see deltanet.h), in
 * float, one fixed order: a token's result is the same whatever batch
 * carried it, which keeps prefix reuse exact (the restored state is the
 * state a fresh pass reaches).
 */
#include "deltanet.h"

#include "compute/ops.h"

#include <math.h>

static inline float silu(float x) { return x / (1.0f + expf(-x)); }

static void l2norm(float *x, size_t n, float eps) {
    double ss = 0; /* summed in double, as the reference's norms are */
    for (size_t i = 0; i < n; i++) ss += (double)x[i] * x[i];
    const float s = 1.0f / fmaxf(sqrtf((float)ss), eps);
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
    /* row j of S is column j of the math's S (k index inside): the reference's layout and order, so that
       the sums round as its do: decay, delta_j = beta (v_j - S_j . k), S_j += delta_j k, o_j = S_j . q */
    for (size_t i = 0; i < (size_t)dk * dv; i++) S[i] *= decay;
    for (uint32_t j = 0; j < dv; j++) {
        float *row = S + (size_t)j * dk, kv = 0, qo = 0;
        for (uint32_t i = 0; i < dk; i++) kv += row[i] * k[i];
        const float delta = (v[j] - kv) * beta;
        for (uint32_t i = 0; i < dk; i++) row[i] += delta * k[i];
        for (uint32_t i = 0; i < dk; i++) qo += row[i] * q[i];
        o[j] = qo * scale;
    }
}

void tkv__deltanet_gate_norm(const tkv__delta_dims *d, float *o, const float *z, const float *w, float eps) {
    for (uint32_t h = 0; h < d->n_v; h++) { /* the model's RMSNorm, then the gate */
        float *x = o + (size_t)h * d->d_v;
        const float *zh = z + (size_t)h * d->d_v;
        tkv__ops_rmsnorm(x, x, w, d->d_v, eps);
        for (uint32_t j = 0; j < d->d_v; j++) x[j] *= silu(zh[j]);
    }
}
