/*
 * compute/quant/iq1.c — scalar reference code of IQ1_S and IQ1_M (layouts in
 * compute/quant/iq.h): dequantization and the dot products with Q8_K activations.
 *
 * The dot products keep the grid's integer products and the shift's
 * activation sums apart, both exact, and join them in float once per
 * super-block; the shift (1/8) then costs one exact scaling. These are the
 * oracles of the SIMD twins, so they read one group at a time.
 */
#include "quant.h"
#include "grids.h"
#include "iq.h"

#include <assert.h>

/* Element k (0..7) of grid point idx, -1, 0 or +1. */
static inline int grid1(unsigned idx, int k) {
    return (int8_t)(uint8_t)(tkv__iq1s_grid[idx] >> (8 * k));
}

/* ---- IQ1_S ---------------------------------------------------------------- */

/* Group g's grid index and sub-block b's scale and shift sign. */
static inline unsigned iq1_s_index(const tkv__block_iq1_s *x, int g) {
    return x->qs[g] | (unsigned)((x->qh[g / 4] >> (3 * (g % 4))) & 7) << 8;
}

static inline int iq1_s_ls(const tkv__block_iq1_s *x, int b) {
    return 2 * ((x->qh[b] >> 12) & 7) + 1;
}

static inline int iq1_s_sign(const tkv__block_iq1_s *x, int b) {
    return x->qh[b] & 0x8000 ? -1 : 1;
}

void tkv__quant_dequant_iq1_s(const void *src, float *y, size_t n) {
    assert(n % TKV__QK_K == 0);
    const tkv__block_iq1_s *x = src;
    for (size_t i = 0; i < n / TKV__QK_K; i++) {
        const float d = tkv__quant_f16_to_f32(x[i].d);
        for (int b = 0; b < 8; b++) {
            /* the reference's rounding: the sub-block's float scale, then one product per element */
            const float dl = d * (float)iq1_s_ls(&x[i], b);
            const float delta = (float)iq1_s_sign(&x[i], b) * TKV__IQ1_DELTA;
            for (int l = 0; l < 4; l++) {
                const unsigned idx = iq1_s_index(&x[i], 4 * b + l);
                for (int k = 0; k < 8; k++) y[256 * i + 32 * b + 8 * l + k] = dl * ((float)grid1(idx, k) + delta);
            }
        }
    }
}

float tkv__quant_vec_dot_iq1_s(size_t n, const void *w, const void *a) {
    const tkv__block_iq1_s *x = w;
    const tkv__block_q8_K *y = a;
    float s = 0.0f;
    for (size_t i = 0; i < n / TKV__QK_K; i++) {
        int sumi = 0, sumd = 0;
        for (int b = 0; b < 8; b++) {
            int sb = 0;
            for (int l = 0; l < 4; l++) {
                const unsigned idx = iq1_s_index(&x[i], 4 * b + l);
                for (int k = 0; k < 8; k++) sb += grid1(idx, k) * y[i].qs[32 * b + 8 * l + k];
            }
            const int ls = iq1_s_ls(&x[i], b);
            sumi += ls * sb;
            sumd += ls * iq1_s_sign(&x[i], b) * (y[i].bsums[2 * b] + y[i].bsums[2 * b + 1]);
        }
        /* sumi + sumd / 8 is exact in float: |sumi| < 2^19, three fraction bits */
        s += tkv__quant_f16_to_f32(x[i].d) * y[i].d * ((float)sumi + TKV__IQ1_DELTA * (float)sumd);
    }
    return s;
}

/* ---- IQ1_M ---------------------------------------------------------------- */

static inline unsigned iq1_m_index(const tkv__block_iq1_m *x, int g) {
    return x->qs[g] | (unsigned)((x->qh[g / 2] >> (4 * (g % 2))) & 7) << 8;
}

static inline int iq1_m_sign(const tkv__block_iq1_m *x, int g) {
    return (x->qh[g / 2] >> (4 * (g % 2) + 3)) & 1 ? -1 : 1;
}

/* The 2s + 1 of half h (0, 1) of sub-block b. */
static inline int iq1_m_ls(const tkv__block_iq1_m *x, int b, int h) {
    const unsigned w = x->scales[2 * (b / 2)] | (unsigned)x->scales[2 * (b / 2) + 1] << 8;
    return 2 * (int)((w >> (6 * (b % 2) + 3 * h)) & 7) + 1;
}

void tkv__quant_dequant_iq1_m(const void *src, float *y, size_t n) {
    assert(n % TKV__QK_K == 0);
    const tkv__block_iq1_m *x = src;
    for (size_t i = 0; i < n / TKV__QK_K; i++) {
        const float d = tkv__quant_f16_to_f32(tkv__iq1_m_d(&x[i]));
        for (int g = 0; g < 32; g++) {
            const float dl = d * (float)iq1_m_ls(&x[i], g / 4, g % 4 / 2);
            const float delta = (float)iq1_m_sign(&x[i], g) * TKV__IQ1_DELTA;
            const unsigned idx = iq1_m_index(&x[i], g);
            for (int k = 0; k < 8; k++) y[256 * i + 8 * g + k] = dl * ((float)grid1(idx, k) + delta);
        }
    }
}

float tkv__quant_vec_dot_iq1_m(size_t n, const void *w, const void *a) {
    const tkv__block_iq1_m *x = w;
    const tkv__block_q8_K *y = a;
    float s = 0.0f;
    for (size_t i = 0; i < n / TKV__QK_K; i++) {
        int sumi = 0, sumd = 0;
        for (int g = 0; g < 32; g++) {
            const unsigned idx = iq1_m_index(&x[i], g);
            const int8_t *q = y[i].qs + 8 * g;
            int sg = 0, ag = 0;
            for (int k = 0; k < 8; k++) sg += grid1(idx, k) * q[k], ag += q[k];
            const int ls = iq1_m_ls(&x[i], g / 4, g % 4 / 2);
            sumi += ls * sg;
            sumd += ls * iq1_m_sign(&x[i], g) * ag;
        }
        s += tkv__quant_f16_to_f32(tkv__iq1_m_d(&x[i])) * y[i].d * ((float)sumi + TKV__IQ1_DELTA * (float)sumd);
    }
    return s;
}
