/*
 * mamba2.c — Mamba-2's per-token steps (see mamba2.h), in float, in the
 * reference's order (the scan itself is the kernels' ssm_step); one order
 * per level whatever the batch, so a restored state is the state a fresh
 * pass reaches.
 */
#include "mamba2.h"

#include "compute/kernels.h"
#include "compute/ops.h"

#include <math.h>

static inline float silu(float x) { return x / (1.0f + expf(-x)); }

void tkv__mamba_conv(const tkv__mamba_dims *d, const float *w, const float *bias, const float *const *rows, float *xbc) {
    const uint32_t K = d->d_conv;
    for (uint32_t ch = 0; ch < d->channels; ch++) {
        float acc = 0;
        for (uint32_t k = 0; k < K; k++) acc += w[(size_t)ch * K + k] * rows[k][ch];
        xbc[ch] = silu(acc + bias[ch]);
    }
}

void tkv__mamba_step(const tkv__mamba_dims *d, float *S, const float *x, const float *B, const float *C, float dt,
                     float dt_bias, float A, float D, float *y) {
    const float a = dt + dt_bias;
    const float dt_sp = a <= 20.0f ? log1pf(expf(a)) : a;
    tkv__kernel_get()->ssm_step(S, x, B, C, dt_sp, expf(dt_sp * A), d->head_dim, d->d_state, y);
    for (uint32_t i = 0; i < d->head_dim; i++) y[i] += x[i] * D;
}

void tkv__mamba_gate_norm(const tkv__mamba_dims *d, float *y, const float *z, const float *w, float eps) {
    const uint32_t gs = d->d_inner / d->n_group;
    for (uint32_t i = 0; i < d->d_inner; i++) y[i] *= silu(z[i]);
    for (uint32_t g = 0; g < d->n_group; g++) tkv__ops_rmsnorm(y + (size_t)g * gs, y + (size_t)g * gs, w + (size_t)g * gs, gs, eps);
}
