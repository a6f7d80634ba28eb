/*
 * deltanet.c — the gated delta net's per-token steps (see deltanet.h), in
 * float, in one order per kernel level (the recurrence itself is the
 * kernels' delta_step): a token's result is the same whatever batch carried
 * it, which keeps prefix reuse exact (the restored state is the state a
 * fresh pass reaches).
 */
#include "deltanet.h"

#include "compute/kernels.h"
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
    /* row j of S is column j of the math's S (k index inside): the reference's layout and order of sums
       (decay, delta_j = beta (v_j - S_j . k), S_j += delta_j k, o_j = S_j . q), each level's lanes */
    tkv__kernel_get()->delta_step(S, q, k, v, expf(g), beta, 1.0f / sqrtf((float)d->d_k), d->d_k, d->d_v, o);
}

void tkv__deltanet_gate_norm(const tkv__delta_dims *d, float *o, const float *z, const float *w, float eps) {
    for (uint32_t h = 0; h < d->n_v; h++) { /* the model's RMSNorm, then the gate */
        float *x = o + (size_t)h * d->d_v;
        const float *zh = z + (size_t)h * d->d_v;
        tkv__ops_rmsnorm(x, x, w, d->d_v, eps);
        for (uint32_t j = 0; j < d->d_v; j++) x[j] *= silu(zh[j]);
    }
}
