/*
 * deltanet.h — the gated delta net (Qwen3.5's linear-attention layers): its
 * sizes, the layout of its recurrent state, and the per-token steps that
 * forward.c's delta_mixer runs (the matrix products stay there).
 *
 * For each token, with h the layer's normed input:
 *
 *   qkv = h Wqkv                          (channels = 2 n_k d_k + n_v d_v)
 *   c = silu(causal depthwise conv of qkv over the last d_conv tokens)
 *   q, k = c's first two parts, L2-normed per head   (n_k, d_k) each
 *   v = c's last part                                 (n_v, d_v)
 *   beta = sigmoid(h Wbeta), g = A softplus(h Walpha + dt_bias)   (n_v)
 *   per v head j (its q/k head is j mod n_k), with S (d_k, d_v):
 *     S = exp(g) S;  S = S + k (beta (v - S^T k))^T;  o = S^T q / sqrt(d_k)
 *   o = rmsnorm(o) * ssm_norm * silu(h Wz), per v head   (n_v d_v)
 *   out = o Wout                                      (n_embd)
 *
 * A sequence's state for one layer is the conv's window (the last d_conv - 1
 * qkv rows, oldest first) and S of every v head, d_k rows of d_v floats
 * (the kernels' step makes d_v outputs at once, one per lane). It depends on every earlier token, so the cache keeps it in
 * checkpoints (kv/kvstate.h) rather than recomputing it from cells.
 */
#ifndef TKV_DELTANET_H
#define TKV_DELTANET_H

#include <stddef.h>
#include <stdint.h>

/* The widest v head the step takes (Qwen3.5's are 128). */
#define TKV__DELTA_MAX_DV 256

typedef struct tkv__delta_dims {
    uint32_t d_conv;     /* [ARCH.ssm.conv_kernel] taps, the current token's last */
    uint32_t d_k;        /* [ARCH.ssm.state_size] elements of a q/k head */
    uint32_t n_k;        /* [ARCH.ssm.group_count] q/k heads */
    uint32_t n_v;        /* [ARCH.ssm.time_step_rank] v heads, a multiple of n_k */
    uint32_t d_v;        /* [ARCH.ssm.inner_size] / n_v elements of a v head */
    uint32_t channels;   /* 2 n_k d_k + n_v d_v: qkv's width, the conv's channels */
    size_t layer_floats; /* one layer's state: (d_conv - 1) channels + n_v d_k d_v */
} tkv__delta_dims;

/* Where a layer's state parts start in its block of layer_floats. */
static inline float *tkv__delta_window(const tkv__delta_dims *d, float *layer_state) {
    (void)d;
    return layer_state;
}
static inline float *tkv__delta_S(const tkv__delta_dims *d, float *layer_state, uint32_t head) {
    return layer_state + (size_t)(d->d_conv - 1) * d->channels + (size_t)head * d->d_k * d->d_v;
}

/* c = silu(sum over taps k of w[ch d_conv + k] rows[k][ch]) for every channel,
   rows[0] the oldest, rows[d_conv - 1] the current token's qkv; then q and k
   L2-normed per head (x / max(|x|, eps)). */
void tkv__deltanet_conv(const tkv__delta_dims *d, const float *w, const float *const *rows, float eps, float *c);

/* One token through one v head: S (d_k rows of d_v) in place, o (d_v) out. */
void tkv__deltanet_step(const tkv__delta_dims *d, float *S, const float *q, const float *k, const float *v, float g,
                        float beta, float *o);

/* o (n_v d_v) = rmsnorm(o) * w * silu(z), each v head on its own. */
void tkv__deltanet_gate_norm(const tkv__delta_dims *d, float *o, const float *z, const float *w, float eps);

#endif
