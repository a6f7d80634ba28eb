/*
 * attention.c — see attention.h: the scalar level (every level's oracle) and
 * the choice of a level's functions, which kernels.c makes with the kernel
 * table (the SIMD levels' are in compute/x86/avx2/attention.c and
 * compute/x86/avx512/attention.c).
 */
#include "attention.h"

#include "kernels.h"
#include "compute/quant/quant.h"

#include <math.h>

/* ---- scalar ------------------------------------------------------------- */

static float dot_scalar(const uint16_t *q, const uint16_t *k, size_t n) {
    const size_t np = n & ~(size_t)(TKV__ATTN_STEP - 1);
    float acc[4][16] = {{0}};
    for (size_t i = 0; i < np; i += TKV__ATTN_STEP)
        for (int j = 0; j < 4; j++)
            for (int l = 0; l < 16; l++) {
                size_t e = i + 16 * (size_t)j + (size_t)l;
                acc[j][l] = fmaf(tkv__quant_f16_to_f32(q[e]), tkv__quant_f16_to_f32(k[e]), acc[j][l]);
            }
    double sum = 0;
    if (np) {
        float v[16];
        for (int l = 0; l < 16; l++) v[l] = (acc[0][l] + acc[2][l]) + (acc[1][l] + acc[3][l]);
        for (int l = 0; l < 8; l++) v[l] += v[l + 8];
        for (int l = 0; l < 4; l++) v[l] += v[l + 4];
        v[0] += v[2], v[1] += v[3];
        sum = (double)(v[0] + v[1]);
    }
    for (size_t i = np; i < n; i++) sum += (double)(tkv__quant_f16_to_f32(q[i]) * tkv__quant_f16_to_f32(k[i]));
    return (float)sum;
}

void tkv__attn_mad_scalar(uint16_t *acc, const uint16_t *v, float w, size_t n) {
    for (size_t i = 0; i < n; i++)
        acc[i] = tkv__quant_f32_to_f16(fmaf(tkv__quant_f16_to_f32(v[i]), w, tkv__quant_f16_to_f32(acc[i])));
}

void tkv__attn_scale_scalar(uint16_t *acc, float s, size_t n) {
    for (size_t i = 0; i < n; i++) acc[i] = tkv__quant_f32_to_f16(tkv__quant_f16_to_f32(acc[i]) * s);
}

float tkv__attn_dot_f32_scalar(const float *q, const uint16_t *k, size_t n) {
    float s = 0;
    for (size_t i = 0; i < n; i++) s += q[i] * tkv__quant_f16_to_f32(k[i]);
    return s;
}

void tkv__attn_mad_f32_scalar(float *acc, const uint16_t *v, float w, size_t n) {
    for (size_t i = 0; i < n; i++) acc[i] += w * tkv__quant_f16_to_f32(v[i]);
}

/* complete: the levels above override what they have (the 16-row forms are optional) */
const tkv__attn_ops tkv__attn_scalar_part = {
    .dot = dot_scalar,
    .mad = tkv__attn_mad_scalar,
    .scale = tkv__attn_scale_scalar,
    .dot_f32 = tkv__attn_dot_f32_scalar,
    .mad_f32 = tkv__attn_mad_f32_scalar,
};

const tkv__attn_ops *tkv__attn_scalar(void) { return &tkv__attn_scalar_part; }

const tkv__attn_ops *tkv__attn_get(void) { return &tkv__kernel_get()->attn; }
