/*
 * kernels_scalar.c — the scalar kernel table: the reference versions every
 * SIMD kernel is tested against, and the fallback on any CPU.
 *
 * The dot products and quantizers are the ones of compute/quant/quant.c; the element-wise
 * ops are here. Reductions accumulate in double, so the oracle is at least as
 * accurate as any SIMD version.
 */
#include "kernels.h"
#include "compute/quant/quant.h"
#include "compute/quant/iq.h"

#include <math.h>

/* The reference's arithmetic: squares in float, summed in double in order. */
void tkv__kernel_rmsnorm_scalar(float *y, const float *x, const float *w, size_t n, float eps) {
    double ss = 0.0;
    for (size_t i = 0; i < n; i++) ss += (double)(x[i] * x[i]);
    const float mean = (float)(ss / (double)n);
    const float scale = 1.0f / sqrtf(mean + eps);
    for (size_t i = 0; i < n; i++) y[i] = (x[i] * scale) * w[i];
}

void tkv__kernel_softmax_scalar(float *x, size_t n) {
    float max = -INFINITY;
    for (size_t i = 0; i < n; i++) max = x[i] > max ? x[i] : max;
    double sum = 0.0;
    for (size_t i = 0; i < n; i++) {
        x[i] = expf(x[i] - max);
        sum += x[i];
    }
    const float inv = (float)(1.0 / sum);
    for (size_t i = 0; i < n; i++) x[i] *= inv;
}

void tkv__kernel_silu_scalar(float *y, const float *x, size_t n) {
    for (size_t i = 0; i < n; i++) y[i] = x[i] / (1.0f + expf(-x[i]));
}

/* the C library's tanhf, as the reference */
void tkv__kernel_softcap_scalar(float *x, size_t n, float c) {
    for (size_t i = 0; i < n; i++) x[i] = c * tanhf(x[i] / c);
}

void tkv__kernel_swiglu_scalar(float *y, const float *gate, const float *up, size_t n) {
    for (size_t i = 0; i < n; i++) {
        const float g = gate[i];
        y[i] = g / (1.0f + expf(-g)) * up[i];
    }
}

void tkv__kernel_rope_pairs_scalar(float *v, const float *cs, size_t n_pairs) {
    for (size_t i = 0; i < n_pairs; i++) tkv__kernel_rope_rotate(&v[2 * i], &v[2 * i + 1], cs[2 * i], cs[2 * i + 1]);
}

/* The recurrent steps sum each output in one sequence of separate multiplies and adds (no fused ones):
   the SIMD levels run the same sequence in every lane (a lane is one output), so all levels agree to the
   bit (the reference's own order, which its files are held to). */
void tkv__kernel_delta_step_scalar(float *S, const float *q, const float *k, const float *v, float decay, float beta,
                                   float scale, uint32_t dk, uint32_t dv, float *o) {
    for (uint32_t j = 0; j < dv; j++) {
        float kv = 0;
        for (uint32_t i = 0; i < dk; i++) {
            float *s = S + (size_t)i * dv + j;
            *s = *s * decay;
            const float p = *s * k[i];
            kv = kv + p;
        }
        const float delta = (v[j] - kv) * beta;
        float qo = 0;
        for (uint32_t i = 0; i < dk; i++) {
            float *s = S + (size_t)i * dv + j;
            const float u = k[i] * delta;
            *s = *s + u;
            const float p = *s * q[i];
            qo = qo + p;
        }
        o[j] = qo * scale;
    }
}

void tkv__kernel_ssm_step_scalar(float *S, const float *x, const float *B, const float *C, float dt, float dA,
                                 uint32_t hd, uint32_t ds, float *y) {
    for (uint32_t i = 0; i < hd; i++) {
        const float x_dt = x[i] * dt;
        float sum = 0;
        for (uint32_t j = 0; j < ds; j++) {
            float *s = S + (size_t)j * hd + i;
            const float a = *s * dA, b = B[j] * x_dt;
            *s = a + b;
            const float p = *s * C[j];
            sum = sum + p;
        }
        y[i] = sum;
    }
}

const tkv__kernels tkv__kernel_scalar_part = {
    .level = TKV__KERNEL_SCALAR,
    .name = "scalar",
    .vec_dot =
        {
            [TKV_TYPE_F32] = tkv__quant_vec_dot_f32,
            [TKV_TYPE_F16] = tkv__quant_vec_dot_f16,
            [TKV_TYPE_BF16] = tkv__quant_vec_dot_bf16,
            [TKV_TYPE_Q8_0] = tkv__quant_vec_dot_q8_0,
            [TKV_TYPE_Q4_0] = tkv__quant_vec_dot_q4_0,
            [TKV_TYPE_Q4_1] = tkv__quant_vec_dot_q4_1,
            [TKV_TYPE_Q5_0] = tkv__quant_vec_dot_q5_0,
            [TKV_TYPE_IQ4_NL] = tkv__quant_vec_dot_iq4_nl,
            [TKV_TYPE_MXFP4] = tkv__quant_vec_dot_mxfp4,
            [TKV_TYPE_IQ4_XS] = tkv__quant_vec_dot_iq4_xs,
            [TKV_TYPE_Q2_K] = tkv__quant_vec_dot_q2_K,
            [TKV_TYPE_Q3_K] = tkv__quant_vec_dot_q3_K,
            [TKV_TYPE_TQ1_0] = tkv__quant_vec_dot_tq1_0,
            [TKV_TYPE_TQ2_0] = tkv__quant_vec_dot_tq2_0,
            [TKV_TYPE_IQ2_XXS] = tkv__quant_vec_dot_iq2_xxs,
            [TKV_TYPE_IQ2_XS] = tkv__quant_vec_dot_iq2_xs,
            [TKV_TYPE_IQ2_S] = tkv__quant_vec_dot_iq2_s,
            [TKV_TYPE_IQ1_S] = tkv__quant_vec_dot_iq1_s,
            [TKV_TYPE_IQ1_M] = tkv__quant_vec_dot_iq1_m,
            [TKV_TYPE_IQ3_XXS] = tkv__quant_vec_dot_iq3_xxs,
            [TKV_TYPE_IQ3_S] = tkv__quant_vec_dot_iq3_s,
            [TKV_TYPE_Q5_1] = tkv__quant_vec_dot_q5_1,
            [TKV_TYPE_Q4_K] = tkv__quant_vec_dot_q4_K,
            [TKV_TYPE_Q5_K] = tkv__quant_vec_dot_q5_K,
            [TKV_TYPE_Q6_K] = tkv__quant_vec_dot_q6_K,
        },
    .vec_dot_ref = {[TKV_TYPE_Q5_K] = tkv__quant_vec_dot_q5_K_lanes, [TKV_TYPE_Q2_K] = tkv__quant_vec_dot_q2_K_lanes,
                    [TKV_TYPE_Q3_K] = tkv__quant_vec_dot_q3_K_lanes, [TKV_TYPE_Q8_0] = tkv__quant_vec_dot_q8_0_ref,
                    [TKV_TYPE_IQ4_XS] = tkv__quant_vec_dot_iq4_xs_lanes, [TKV_TYPE_Q6_K] = tkv__quant_vec_dot_q6_K_lanes,
                    [TKV_TYPE_Q5_0] = tkv__quant_vec_dot_q5_0 /* the reference's plain C order, as the default */},
    .quantize =
        {
            [TKV_TYPE_F32] = tkv__quant_quantize_f32,
            [TKV_TYPE_F16] = tkv__quant_quantize_f16,
            [TKV_TYPE_BF16] = tkv__quant_quantize_bf16,
            [TKV_TYPE_Q8_0] = tkv__quant_quantize_q8_0,
            [TKV_TYPE_Q8_1] = tkv__quant_quantize_q8_1,
            [TKV_TYPE_Q8_K] = tkv__quant_quantize_q8_K,
        },
    .rmsnorm = tkv__kernel_rmsnorm_scalar,
    .softmax = tkv__kernel_softmax_scalar,
    .silu = tkv__kernel_silu_scalar,
    .swiglu = tkv__kernel_swiglu_scalar,
    .softcap = tkv__kernel_softcap_scalar,
    .rope_pairs = tkv__kernel_rope_pairs_scalar,
    .delta_step = tkv__kernel_delta_step_scalar,
    .ssm_step = tkv__kernel_ssm_step_scalar,
};
