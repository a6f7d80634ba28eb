/*
 * attention.h — the three vector operations of attention over an F16 KV
 * cache, in the reference implementation's arithmetic:
 *
 *   dot:   q . k of two F16 rows. Full 64-element steps go to 4 x 16 float
 *          lanes with fused multiply-adds, reduced pairwise (lanes of
 *          accumulators 0+2, 1+3, then 0+1, then 16 -> 8 -> 4 -> 2 -> 1);
 *          the remaining elements add in double. This is the order of the
 *          reference's AVX-512 F16 dot product, so scores agree to the bit.
 *   mad:   acc = f16(fma(v, w, f32(acc))) element-wise (F16 accumulator).
 *   scale: acc = f16(f32(acc) * s) element-wise.
 *
 * Scalar versions and AVX2+F16C+FMA versions (chosen at run time with the
 * kernel table, kernels.h) give identical results: every lane computes the
 * same operations in the same order.
 */
#ifndef TKV_ATTENTION_H
#define TKV_ATTENTION_H

#include <stddef.h>
#include <stdint.h>

typedef struct tkv__attn_ops {
    float (*dot)(const uint16_t *q, const uint16_t *k, size_t n);
    void (*mad)(uint16_t *acc, const uint16_t *v, float w, size_t n);
    void (*scale)(uint16_t *acc, float s, size_t n);
    /* the float forms used for long batches (prefill): any summation order */
    float (*dot_f32)(const float *q, const uint16_t *k, size_t n);       /* sum q[i] k[i] */
    void (*mad_f32)(float *acc, const uint16_t *v, float w, size_t n);   /* acc += w v */
    /* 16 rows at a time, where a level has them (else NULL), for n a
       multiple of 16. widen16: rows c < m to floats, row c at dst + c n
       (the heads that share a K/V head then read them without converting
       again). On widened rows: out[c] = scale * sum q[i] k[c n + i] for
       c < 16, and acc[i] += sum over c < m of w[c] v[c n + i] (m <= 16). */
    void (*widen16)(const uint16_t *const rows[16], size_t m, size_t n, float *dst);
    void (*scores16)(const float *q, const float *k, size_t n, float scale, float out[16]);
    void (*wsum16)(float *acc, const float *v, const float *w, size_t m, size_t n);
    /* the same two on the F16 rows themselves, bit for bit widen16 then
       scores16 / wsum16: for a single token, whose rows nobody else reads,
       converting in registers saves the widened copy */
    void (*scores16_rows)(const float *q, const uint16_t *const rows[16], size_t n, float scale, float out[16]);
    void (*wsum16_rows)(float *acc, const uint16_t *const rows[16], const float *w, size_t m, size_t n);
} tkv__attn_ops;

/* The active kernel level's set (tkv__kernels.attn): the best this CPU runs. */
const tkv__attn_ops *tkv__attn_get(void);

/* The scalar version (the oracle). */
const tkv__attn_ops *tkv__attn_scalar(void);

/* Elements per step of the F16 dot: 4 accumulators x 16 lanes. */
#define TKV__ATTN_STEP 64

/*
 * Per-level partial sets, as the kernels' parts (kernels.h): the scalar one
 * complete (compute/attention.c), each SIMD level's with only what it has
 * (compute/x86/avx2/attention.c, compute/x86/avx512/attention.c; empty on
 * builds for other architectures). kernels.c lays them over each other
 * into each level's table.
 */
extern const tkv__attn_ops tkv__attn_scalar_part;
extern const tkv__attn_ops tkv__attn_avx2_part;
extern const tkv__attn_ops tkv__attn_avx512_part;

/* The scalar element-wise forms, with which the SIMD ones finish a row's tail. */
void tkv__attn_mad_scalar(uint16_t *acc, const uint16_t *v, float w, size_t n);
void tkv__attn_scale_scalar(uint16_t *acc, float s, size_t n);
float tkv__attn_dot_f32_scalar(const float *q, const uint16_t *k, size_t n);
void tkv__attn_mad_f32_scalar(float *acc, const uint16_t *v, float w, size_t n);

#endif
