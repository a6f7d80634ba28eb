/*
 * ops.h — the operations of the transformer forward pass, over float
 * buffers and quantized weights: RMSNorm, RoPE, softmax, SiLU/SwiGLU and the
 * matrix product of quantized weights with a batch of activations.
 *
 * Everything runs through the active kernel table (kernels.h), except RoPE
 * which is scalar. Nothing here allocates: callers pass every buffer,
 * including scratch, so a thread pool can later hand disjoint row ranges of
 * one operation to its threads.
 *
 * Shapes are written (rows, columns), row-major: (n_tok, n_embd) is n_tok
 * rows of n_embd floats.
 */
#ifndef TKV_OPS_H
#define TKV_OPS_H

#include "tokenkv_types.h"

#include <stddef.h>
#include <stdint.h>

/*
 * y = x / sqrt(mean(x^2) + eps) * w, element-wise over one row; computed as
 * (x * scale) * w like ggml's rms_norm followed by mul.
 * x, w, y: (n); y may equal x; n >= 1.
 */
void tkv__ops_rmsnorm(float *y, const float *x, const float *w, size_t n, float eps);

/*
 * In-place numerically stable softmax of one row: x = exp(x - max) / sum.
 * x: (n), n >= 1, not all -inf; -inf entries (masked) become 0.
 */
void tkv__ops_softmax(float *x, size_t n);

/* y = silu(x) = x * sigmoid(x). x, y: (n); y may equal x. */
void tkv__ops_silu(float *y, const float *x, size_t n);

/* y = silu(gate) * up (the llama FFN's gating). All (n); y may alias either. */
void tkv__ops_swiglu(float *y, const float *gate, const float *up, size_t n);

/* In place, x = c tanh(x / c) (soft-capping), c > 0. (n) */
void tkv__ops_softcap(float *x, size_t n, float c);

/*
 * y = gelu(gate) * up (GeGLU), gelu the tanh approximation computed as the
 * reference's CPU backend does: on the fp16 rounding of the input, the
 * result rounded to fp16 (its lookup table), for -10 < x < 10; 0 at or
 * below -10 and x itself at or above 10. y may equal gate or up. (n)
 */
void tkv__ops_geglu(float *y, const float *gate, const float *up, size_t n);

/* ---- RoPE ------------------------------------------------------------------ */

/* Which dimensions rotate together (ggml's mode numbers). */
typedef enum tkv__rope_mode {
    TKV__ROPE_NORMAL = 0, /* pairs (x[2i], x[2i+1]): llama */
    TKV__ROPE_NEOX = 2,   /* pairs (x[i], x[i + n_rot/2]): qwen2, NeoX */
} tkv__rope_mode;

/*
 * The rotation of one position, shared by all heads of a token:
 * cs[2i] = cos(theta_i), cs[2i+1] = sin(theta_i) for i < n_rot/2, with
 * theta_i = freq_scale * pos * base^(-2i/n_rot). Like ggml, base^(-2i/n_rot)
 * is built by repeated multiplication by powf(base, -2/n_rot) in float, so
 * angles match llama.cpp's (they drift from the exact ones by a few ulp per
 * step, which at large positions is visible in the last digits).
 * cs: (n_rot); n_rot even, >= 2.
 */
void tkv__ops_rope_cache(float *cs, size_t n_rot, int32_t pos, float freq_base, float freq_scale);

/*
 * Rotate the first n_rot dimensions of each of n_head heads in place by the
 * angles of `cs` (from tkv__ops_rope_cache): each pair (a, b) becomes
 * (a cos - b sin, a sin + b cos). Dimensions n_rot.. of a head are untouched.
 * x: (n_head, head_dim), one token; cs: (n_rot); n_rot even, <= head_dim.
 */
void tkv__ops_rope(float *x, size_t n_head, size_t head_dim, size_t n_rot, const float *cs, tkv__rope_mode mode);

/* ---- matrix products ---------------------------------------------------------- */

/*
 * Bytes of one activation row of n elements quantized for weights of type
 * wtype (the row of tkv__quant_vec_dot_type(wtype)); 0 when unsupported.
 * n must be a multiple of wtype's block size.
 */
size_t tkv__ops_act_row_size(tkv_type wtype, size_t n);

/*
 * Quantize n_tok activation rows once, for any number of products with
 * weights of type wtype.
 * x: (n_tok, n) floats; xq: (n_tok, act_row_size(wtype, n)) bytes, any
 * alignment. To split across threads, call on disjoint runs of rows.
 */
void tkv__ops_quantize_acts(tkv_type wtype, const float *x, size_t n_tok, size_t n, void *xq);

/*
 * n floats to F16 (round to nearest even) into y (2n bytes, any alignment):
 * the active level's conversion (F16C where the CPU has it), the same bits
 * as tkv__quant_f32_to_f16 at every level (test_kernels).
 */
void tkv__ops_to_f16(const float *x, void *y, size_t n);

/*
 * y[t * ldy + r] = dot(W row r, activation row t) for r in [r0, r1) and
 * t in [0, n_tok): rows r0..r1-1 of y = x W^T for a batch of tokens.
 * w:  (n_rows, n) weights of type wtype, rows of tkv__quant_row_size(wtype, n)
 *     bytes (the whole matrix: row r starts at r * row_size);
 * xq: (n_tok, act_row_size(wtype, n)) from tkv__ops_quantize_acts;
 * y:  (n_tok, ldy) floats, ldy >= r1; only columns r0..r1-1 are written.
 * Threads may run disjoint [r0, r1) ranges of one product concurrently.
 * Each entry is the active level's vec_dot of its row and token, bit for
 * bit, however many tokens there are: from 3 tokens on, Q8_0, Q4_0, Q4_1,
 * Q5_0, Q5_1, Q4_K, Q5_K and Q6_K weights go through the level's tiled
 * kernels (kernels.h tkv__gemm_fn), which keep the vec_dot's arithmetic;
 * below, a level's gemv where it has one (AVX-512: Q4_0), which keeps it
 * too.
 * Preconditions: supported wtype, n a multiple of its block size.
 */
void tkv__ops_matmul(tkv_type wtype, const void *w, size_t n, size_t r0, size_t r1, const void *xq, size_t n_tok,
                     float *y, size_t ldy);

/*
 * Whether the active level computes products of this float weight matrix
 * (n_rows rows of n elements) in the reference's prefill order too: F32,
 * F16 or BF16 weights, a level that has a lanes kernel (kernels.h), n a
 * multiple of its lane count and n_rows a multiple of 4 (the reference's own
 * conditions for that order). False for every other matrix.
 */
bool tkv__ops_lanes_ok(tkv_type wtype, size_t n, size_t n_rows);

/*
 * Whether the active level has a product over packed rows of wtype
 * (compute/quant/repack.h): what a model's load asks before it packs a matrix.
 */
bool tkv__ops_packed_ok(tkv_type wtype);

/*
 * As tkv__ops_matmul, bit for bit, over the same rows packed by
 * tkv__pack_rows at `packed`: rows [r0, r1), r0 a multiple of
 * TKV__PACK_ROWS; n at most TKV__GEMM_MAX_N. Only where tkv__ops_packed_ok.
 */
void tkv__ops_matmul_packed(tkv_type wtype, const void *packed, size_t n, size_t r0, size_t r1, const void *xq,
                            size_t n_tok, float *y, size_t ldy);

/* Which of a float type's lanes products (kernels.h): the default order, or the reference's for batches. */
typedef enum tkv__lanes_order {
    TKV__LANES_DEFAULT,   /* kernels.h's lanes: batch-invariant, any number of tokens */
    TKV__LANES_REFERENCE, /* lanes_ref where the level has one (BF16), else lanes */
} tkv__lanes_order;

/*
 * As tkv__ops_matmul, in a lanes order (kernels.h), which differs from the
 * vec_dot's in the last bits. Only where tkv__ops_lanes_ok. The reference
 * takes its lanes order for batches of 2 or more tokens and its vec_dot for
 * one; the forward pass does the same, or takes the default lanes order
 * always when asked for results that do not depend on the batch.
 */
void tkv__ops_matmul_lanes(tkv__lanes_order order, tkv_type wtype, const void *w, size_t n, size_t r0, size_t r1,
                           const void *xq, size_t n_tok, float *y, size_t ldy);

/*
 * Whether the active level has a product of this quantized weight type in
 * the reference's x86 order where the default order differs (Q5_K: kernels.h's
 * vec_dot_ref). False for every other type.
 */
bool tkv__ops_ref_ok(tkv_type wtype);

/*
 * As tkv__ops_matmul over the file's rows w, in that reference order (the
 * level's gemm_ref from GEMM_MIN_TOK tokens on, else its vec_dot_ref per row
 * and token; the same bits either way). Only where tkv__ops_ref_ok; for
 * contexts that compute as the reference does.
 */
void tkv__ops_matmul_ref(tkv_type wtype, const void *w, size_t n, size_t r0, size_t r1, const void *xq, size_t n_tok,
                         float *y, size_t ldy);

#endif
