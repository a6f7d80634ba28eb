/*
 * kernels.h — the compute kernels of the forward pass, as a table of function
 * pointers chosen once at run time from what the CPU supports, so a single
 * x86-64 binary runs everywhere and uses AVX2 or AVX-512 where it can.
 *
 * Levels: scalar (the oracle, any CPU), avx2 (AVX2 + FMA + F16C) and avx512
 * (AVX-512 F/BW/VL/VNNI and BMI2 on top of avx2). A level's table starts from the
 * level below and overrides the entries it has its own versions of, so every
 * entry of every table is set. SIMD code lives in its own files, compiled
 * with their -m flags, and is only ever called through a table whose level
 * the CPU was found to support.
 *
 * Most callers want ops.h (rmsnorm, rope, softmax, matmul...), which goes
 * through the active table.
 */
#ifndef TKV_KERNELS_H
#define TKV_KERNELS_H

#include "tokenkv_types.h"
#include "attention.h"

#include <math.h>
#include <stddef.h>

typedef enum tkv__kernel_level {
    TKV__KERNEL_SCALAR = 0,
    TKV__KERNEL_AVX2 = 1,
    TKV__KERNEL_AVX512 = 2,
    TKV__KERNEL_LEVELS = 3,
} tkv__kernel_level;

/*
 * Dot product of a weight row w of n elements with an activation row a of n
 * elements quantized to the paired type (tkv__quant_vec_dot_type). n is a
 * multiple of the block size; w and a may be at any address; activation
 * quants lie in -127..127. Returns the dot product.
 */
typedef float (*tkv__vec_dot_fn)(size_t n, const void *w, const void *a);

/*
 * Batched products (prefill): for r < nr and t < n_tok,
 *   y[t * ldy + r] = vec_dot(n, w + r * wrs, xq + t * xrs)
 * with the vec_dot of the same table, bit for bit (the tiled kernels keep
 * its integers and its float operations in its order, per row and token:
 * gemm.h describes both orders, Q4_0's block-reduced one and the others'
 * lane-wise one). w: nr weight rows of wrs bytes; xq: n_tok activation rows of xrs
 * bytes (quantized to the paired type); y: only the nr x n_tok entries above
 * are written. Any alignment; n a multiple of the block size and at most
 * TKV__GEMM_MAX_N; no allocation (under 80 KiB of stack; see gemm.h).
 */
#define TKV__GEMM_MAX_N 65536
/* The longest row a gemv takes (compute/x86/avx512/kernels.c keeps per-block token data
   for a row on its stack: 36 KiB at this length); longer rows use vec_dot. */
#define TKV__GEMV_MAX_N 32768
/* Products with at most this many tokens go to a level's gemv where it has
   one (its rows are read once for them all); more, to the tiled gemm. */
#define TKV__GEMV_MAX_TOK 8
typedef void (*tkv__gemm_fn)(size_t n, const void *w, size_t wrs, size_t nr, const void *xq, size_t xrs, size_t n_tok,
                             float *y, size_t ldy);

/*
 * Quantize n floats x to an activation type at y (row_size bytes, any
 * address); n a multiple of the block size. Every level gives bit-identical
 * output to the scalar code for finite inputs.
 */
typedef void (*tkv__quantize_fn)(const float *x, void *y, size_t n);

/* y = x / sqrt(mean(x^2) + eps) * w; y may equal x. x, w, y: (n) */
typedef void (*tkv__rmsnorm_fn)(float *y, const float *x, const float *w, size_t n, float eps);

/* In-place softmax of x: (n), n >= 1; -inf entries give 0 (not all -inf). */
typedef void (*tkv__softmax_fn)(float *x, size_t n);

/* y = silu(x) = x / (1 + exp(-x)); y may equal x. (n) */
typedef void (*tkv__silu_fn)(float *y, const float *x, size_t n);

/* y = silu(gate) * up; y may equal gate or up. (n) */
typedef void (*tkv__swiglu_fn)(float *y, const float *gate, const float *up, size_t n);

/* In place, x = c tanh(x / c): soft-capping (Gemma 2's scores and logits). (n) */
typedef void (*tkv__softcap_fn)(float *x, size_t n, float c);

/* RoPE of n_pairs adjacent pairs (v[2i], v[2i+1]) by angles cs[2i] = cos,
   cs[2i+1] = sin: (a c - b s, a s + b c), each with its first product fused
   (fma(a, c, -(b s)), fma(a, s, b c)), as the reference's compiler forms them. */
typedef void (*tkv__rope_pairs_fn)(float *v, const float *cs, size_t n_pairs);

/* One token through one gated delta-net v head (model/deltanet.h): S (dk rows of dv) in place:
   S = decay S; delta_j = beta (v_j - sum_i S_ij k_i); S_ij += k_i delta_j; o_j = scale sum_i S_ij q_i,
   each sum in i order with separate multiplies and adds (every level gives the scalar level's bits). */
typedef void (*tkv__delta_step_fn)(float *S, const float *q, const float *k, const float *v, float decay, float beta,
                                   float scale, uint32_t dk, uint32_t dv, float *o);

/* One token through one Mamba-2 head (model/mamba2.h): S (ds rows of hd) in place, S_ji = dA S_ji + B_j (x_i dt),
   y_i = sum_j S_ji C_j in j order with separate multiplies and adds (the caller adds the D skip; every level
   gives the scalar level's bits). */
typedef void (*tkv__ssm_step_fn)(float *S, const float *x, const float *B, const float *C, float dt, float dA,
                                 uint32_t hd, uint32_t ds, float *y);

typedef struct tkv__kernels {
    tkv__kernel_level level;
    const char *name; /* "scalar", "avx2", "avx512" */
    /* indexed by weight type; NULL for unsupported types */
    tkv__vec_dot_fn vec_dot[TKV_TYPE_COUNT];
    /* indexed by weight type; NULL where the level has no tiled kernel (the
       product then runs vec_dot per row and token) */
    tkv__gemm_fn gemm[TKV_TYPE_COUNT];
    /* indexed by weight type; NULL where the level has none: products with
       up to TKV__GEMV_MAX_TOK tokens (generation, decode steps of a few
       sequences), bit for bit the vec_dot too, with the per-token work done
       once for all rows; n at most TKV__GEMV_MAX_N */
    tkv__gemm_fn gemv[TKV_TYPE_COUNT];
    /* indexed by weight type; NULL where the level has none: the product
       over rows packed by tkv__pack_rows (compute/quant/repack.h), any number of tokens,
       bit for bit the vec_dot too. w is the group of the first row (the
       rows start at a multiple of TKV__PACK_ROWS), wrs the stride between
       groups (tkv__pack_stride); rows of the last group past nr are not
       written. n at most TKV__GEMM_MAX_N */
    tkv__gemm_fn packed[TKV_TYPE_COUNT];
    /* indexed by weight type, F32/F16/BF16 only: the "lanes" products, one
       accumulator of lanes_kn elements per entry (see gemm.h): the default
       order of float products, for any number of tokens, and the
       reference's order for batches of 2+ tokens where lanes_ref is NULL;
       NULL where a level has none. Rows must be a multiple of lanes_kn
       long. Not bit-equal to vec_dot. */
    tkv__gemm_fn lanes[TKV_TYPE_COUNT];
    unsigned lanes_kn[TKV_TYPE_COUNT];
    /* indexed by weight type, NULL where lanes is the reference's order: the
       reference's order for batches of 2+ tokens where the default differs
       (BF16: lanes is the pairs order of vdpbf16ps, gemm.h), same rows */
    tkv__gemm_fn lanes_ref[TKV_TYPE_COUNT];
    /* indexed by weight type, NULL where the default order is already the
       reference's: a type's product in the reference implementation's
       x86 order where the default differs (Q5_K, Q3_K, Q8_0: its lane-wise vec_dots,
       the scalar level's Q8_0 its plain C loop; Q5_0: the avx2 level's
       default is block-reduced, its reference the lane-wise vec_dot, the
       scalar one the plain C loop (the scalar default);
       Q2_K: its lane-wise vec_dot at the scalar and avx2 levels, the
       default block-reduced order at the avx512 level, where the reference
       repacks Q2_K rows; compute/quant/quant.h), for contexts that compute
       as the reference does (tkv_context_params.batch_invariant false).
       gemm_ref is bit for bit vec_dot_ref (NULL: the product loops over
       vec_dot_ref); both read the file's rows. */
    tkv__vec_dot_fn vec_dot_ref[TKV_TYPE_COUNT];
    tkv__gemm_fn gemm_ref[TKV_TYPE_COUNT];
    /* indexed by activation type (F32, F16, BF16, Q8_0, Q8_1, Q8_K); else NULL */
    tkv__quantize_fn quantize[TKV_TYPE_COUNT];
    tkv__rmsnorm_fn rmsnorm;
    tkv__softmax_fn softmax;
    tkv__silu_fn silu;
    tkv__swiglu_fn swiglu;
    tkv__softcap_fn softcap;
    tkv__rope_pairs_fn rope_pairs;
    tkv__delta_step_fn delta_step;
    tkv__ssm_step_fn ssm_step;
    /* attention's vector operations (attention.h): in a part left zero,
       kernels.c fills it from the level's tkv__attn_*_part */
    tkv__attn_ops attn;
} tkv__kernels;

/*
 * The active table: on first use, the best level the CPU supports. The
 * environment variable TKV_KERNELS ("scalar", "avx2", "avx512"), read once,
 * lowers that level as if the CPU supported no more (to run everything, tests
 * included, as on an older CPU). Thread-safe; never NULL. Fetch it once per
 * operation, not per row.
 */
const tkv__kernels *tkv__kernel_get(void);

/* Level of the active table. */
tkv__kernel_level tkv__kernel_level_active(void);

/* Best level this CPU (and OS) supports (capped by TKV_KERNELS), whatever is active. */
tkv__kernel_level tkv__kernel_level_best(void);

/* Whether this CPU has AVX512_BF16's dot product (vdpbf16ps) and the avx512 level: what the BF16 pairs
   products (gemm.h) run where it has it. Any thread. */
int tkv__kernel_cpu_bf16_dot(void);

/* Whether this CPU has BMI2 and runs its pdep in hardware (not AMD's or Hygon's before Zen 3, which run it in
   microcode): where the avx2 level's table takes tkv__kernel_avx2_bmi2_part. Any thread. */
int tkv__kernel_cpu_fast_pdep(void);

/*
 * The complete table of a level, or NULL when this CPU does not support it
 * (tests compare levels through these without changing the active one).
 */
const tkv__kernels *tkv__kernel_table(tkv__kernel_level level);

/*
 * Test hook: make `level` the active one. Returns 0, or -1 (nothing changed)
 * when the CPU does not support it. Not to be called while other threads
 * run kernels.
 */
int tkv__kernel_force_level(tkv__kernel_level level);

/* Name of a level ("scalar", "avx2", "avx512"; "?" when out of range). */
const char *tkv__kernel_level_name(tkv__kernel_level level);

/*
 * Per-level partial tables, defined in kernels_scalar.c / compute/x86/avx2/kernels.c /
 * compute/x86/avx512/kernels.c: only the entries a level implements are non-NULL (the
 * scalar table is complete). Static data: reading them runs no SIMD code.
 * The SIMD ones are all NULL on builds for other architectures.
 */
extern const tkv__kernels tkv__kernel_scalar_part;
extern const tkv__kernels tkv__kernel_avx2_part;
extern const tkv__kernels tkv__kernel_avx512_part;
/* compute/x86/avx2/dot_iq1_bmi2.c: the avx2 level's IQ1 dots with BMI2's pdep, laid over the avx2 part where
   the CPU runs pdep fast (tkv__kernel_cpu_fast_pdep) */
extern const tkv__kernels tkv__kernel_avx2_bmi2_part;


/* Scalar element-wise ops (the oracles; also table entries). */
void tkv__kernel_rmsnorm_scalar(float *y, const float *x, const float *w, size_t n, float eps);
void tkv__kernel_softmax_scalar(float *x, size_t n);
void tkv__kernel_silu_scalar(float *y, const float *x, size_t n);
void tkv__kernel_swiglu_scalar(float *y, const float *gate, const float *up, size_t n);
void tkv__kernel_softcap_scalar(float *x, size_t n, float c);
void tkv__kernel_rope_pairs_scalar(float *v, const float *cs, size_t n_pairs);
void tkv__kernel_delta_step_scalar(float *S, const float *q, const float *k, const float *v, float decay, float beta,
                                   float scale, uint32_t dk, uint32_t dv, float *o);
void tkv__kernel_ssm_step_scalar(float *S, const float *x, const float *B, const float *C, float dt, float dA,
                                 uint32_t hd, uint32_t ds, float *y);

/* One RoPE rotation of (*a, *b) by (c, s), in the fused form above. */
static inline void tkv__kernel_rope_rotate(float *a, float *b, float c, float s) {
    const float x = *a, bs = *b * s, bc = *b * c;
    *a = fmaf(x, c, -bs);
    *b = fmaf(x, s, bc);
}

#endif
