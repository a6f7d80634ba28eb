/*
 * mamba2.h — Mamba-2's selective state-space layers (granitehybrid,
 * nemotron_h): their sizes, the layout of their recurrent state, and the
 * per-token steps forward.c's mamba_mixer runs (the products stay there).
 *
 * For each token, with h the layer's normed input:
 *
 *   z, xBC, dt = h Win                      (d_inner, d_inner + 2 n_group d_state, n_head)
 *   xBC = silu(causal depthwise conv of xBC over the last d_conv tokens + bias)
 *   x, B, C = xBC's parts: x in n_head heads of head_dim, B and C of d_state per group
 *   per head h (its group h / (n_head / n_group)), with S (head_dim, d_state):
 *     dt_h = softplus(dt_h + dt_bias_h);  S = exp(dt_h A_h) S + dt_h x B^T
 *     y = S C + D_h x
 *   y = rmsnorm of each group's d_inner / n_group values of (y * silu(z)) * ssm_norm
 *   out = y Wout                                          (n_embd)
 *
 * A sequence's state for one layer is the conv's window (the last d_conv - 1
 * xBC rows, oldest first) and S of every head (d_state rows of head_dim:
 * the kernels' step makes head_dim outputs at once, one per lane).
 */
#ifndef TKV_MAMBA2_H
#define TKV_MAMBA2_H

#include <stddef.h>
#include <stdint.h>

typedef struct tkv__mamba_dims {
    uint32_t d_conv;     /* [ARCH.ssm.conv_kernel] taps, the current token's last */
    uint32_t d_state;    /* [ARCH.ssm.state_size] */
    uint32_t n_group;    /* [ARCH.ssm.group_count] groups of B and C; divides n_head */
    uint32_t n_head;     /* [ARCH.ssm.time_step_rank] */
    uint32_t d_inner;    /* [ARCH.ssm.inner_size]: n_head heads of head_dim */
    uint32_t head_dim;
    uint32_t channels;   /* d_inner + 2 n_group d_state: xBC, the conv's channels */
    uint32_t in_proj;    /* 2 d_inner + 2 n_group d_state + n_head: Win's rows (z, xBC, dt) */
    size_t layer_floats; /* one layer's state: (d_conv - 1) channels + d_inner d_state */
} tkv__mamba_dims;

/* Head h's S in a layer's state: d_state rows of head_dim. */
static inline float *tkv__mamba_S(const tkv__mamba_dims *d, float *layer_state, uint32_t h) {
    return layer_state + (size_t)(d->d_conv - 1) * d->channels + (size_t)h * d->head_dim * d->d_state;
}

/* xbc = silu(sum over taps k of w[ch d_conv + k] rows[k][ch] + bias[ch]), rows[0] the oldest. */
void tkv__mamba_conv(const tkv__mamba_dims *d, const float *w, const float *bias, const float *const *rows, float *xbc);

/* One token through head h: S in place; y (head_dim) = S C + D x. dt is the raw projection (dt_bias added
   here); B and C are the head's group's. */
void tkv__mamba_step(const tkv__mamba_dims *d, float *S, const float *x, const float *B, const float *C, float dt,
                     float dt_bias, float A, float D, float *y);

/* y (d_inner) = rmsnorm per group of (y * silu(z)) * w. */
void tkv__mamba_gate_norm(const tkv__mamba_dims *d, float *y, const float *z, const float *w, float eps);

#endif
