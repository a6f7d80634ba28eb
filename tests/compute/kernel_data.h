/*
 * kernel_data.h — random weights and activations for the kernel tests
 * (test_kernels.c, test_kernel_orders.c): random bytes for the quants (any
 * bit pattern is a valid quant) with sane random scales, and activations in
 * blocks of varied magnitude. A fixed xorshift state per test program, so
 * every run draws the same data.
 */
#ifndef TKV_TEST_KERNEL_DATA_H
#define TKV_TEST_KERNEL_DATA_H

#include "compute/quant/quant.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

/* ---- random data ---------------------------------------------------------------- */

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static inline uint32_t rnd(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 11);
}

/* uniform in [lo, hi) */
static inline float rndf(float lo, float hi) {
    return lo + (hi - lo) * (float)(rnd() & 0xffffff) / 16777216.0f;
}

static inline void put16(uint8_t *p, uint16_t v) {
    memcpy(p, &v, 2);
}

/* A sane fp16 scale: random sign, magnitude 2^-12 .. 2^-4. */
static inline uint16_t rnd_scale(void) {
    const float m = ldexpf(rndf(1.0f, 2.0f), -12 + (int)(rnd() % 9));
    return tkv__quant_f32_to_f16(rnd() & 1 ? -m : m);
}

/* IQ1_M's fp16 d, spread over the top nibbles of its four scale words. */
static inline void put_iq1_m_d(uint8_t *blk, uint16_t h) {
    for (int j = 0; j < 4; j++) blk[49 + 2 * j] = (uint8_t)((blk[49 + 2 * j] & 0x0f) | ((h >> (4 * j)) & 0x0f) << 4);
}

/*
 * n elements of weights of type t at w: random bytes for the quants (any bit
 * pattern is a valid quant), random sane scales.
 */
static inline void rnd_weights(tkv_type t, uint8_t *w, size_t n) {
    const size_t bytes = tkv__quant_row_size(t, n);
    for (size_t i = 0; i < bytes; i++) w[i] = (uint8_t)rnd();
    size_t bsz, nb = n / tkv__quant_block_elems(t);
    switch (t) {
    case TKV_TYPE_F32:
        for (size_t i = 0; i < n; i++) {
            const float f = rndf(-1.0f, 1.0f);
            memcpy(w + 4 * i, &f, 4);
        }
        return;
    case TKV_TYPE_F16:
        for (size_t i = 0; i < n; i++) put16(w + 2 * i, tkv__quant_f32_to_f16(rndf(-1.0f, 1.0f)));
        return;
    case TKV_TYPE_BF16:
        for (size_t i = 0; i < n; i++) put16(w + 2 * i, tkv__quant_f32_to_bf16(rndf(-1.0f, 1.0f)));
        return;
    case TKV_TYPE_Q8_0: bsz = 34; break;
    case TKV_TYPE_Q4_0:
    case TKV_TYPE_IQ4_NL: bsz = 18; break;
    case TKV_TYPE_Q5_0: bsz = 22; break;
    case TKV_TYPE_Q4_1: bsz = 20; break;
    case TKV_TYPE_Q5_1: bsz = 24; break;
    case TKV_TYPE_Q4_K: bsz = 144; break;
    case TKV_TYPE_IQ4_XS: bsz = 136; break;
    case TKV_TYPE_IQ2_XXS: bsz = 66; break;
    case TKV_TYPE_IQ2_XS: bsz = 74; break;
    case TKV_TYPE_IQ2_S: bsz = 82; break;
    case TKV_TYPE_IQ1_S: bsz = 50; break;
    case TKV_TYPE_IQ1_M:
        for (size_t b = 0; b < nb; b++) put_iq1_m_d(w + b * 56, rnd_scale());
        return;
    case TKV_TYPE_IQ3_XXS: bsz = 98; break;
    case TKV_TYPE_IQ3_S: bsz = 110; break;
    case TKV_TYPE_Q5_K: bsz = 176; break;
    case TKV_TYPE_Q6_K:
        for (size_t b = 0; b < nb; b++) put16(w + b * 210 + 208, rnd_scale());
        return;
    case TKV_TYPE_Q2_K: /* d and dmin at the end */
        for (size_t b = 0; b < nb; b++) put16(w + b * 84 + 80, rnd_scale()), put16(w + b * 84 + 82, rnd_scale());
        return;
    case TKV_TYPE_Q3_K:
        for (size_t b = 0; b < nb; b++) put16(w + b * 110 + 108, rnd_scale());
        return;
    case TKV_TYPE_TQ1_0:
    case TKV_TYPE_TQ2_0: { /* d at the end */
        const size_t bs = t == TKV_TYPE_TQ2_0 ? 66 : 54;
        for (size_t b = 0; b < nb; b++) put16(w + b * bs + bs - 2, rnd_scale());
        return;
    }
    case TKV_TYPE_MXFP4: /* the E8M0 exponent byte: 2^-12 .. 2^-4 */
        for (size_t b = 0; b < nb; b++) w[b * 17] = (uint8_t)(116 + rnd() % 9);
        return;
    default: fail_msg("rnd_weights: type %d", t); return;
    }
    for (size_t b = 0; b < nb; b++) {
        put16(w + b * bsz, rnd_scale()); /* d */
        /* the second fp16 of Q4_1/Q5_1 (m) and of the K types (dmin) */
        if (t == TKV_TYPE_Q4_1 || t == TKV_TYPE_Q5_1 || t == TKV_TYPE_Q4_K || t == TKV_TYPE_Q5_K)
            put16(w + b * bsz + 2, rnd_scale());
    }
}

/* n activations, with blocks of varied magnitude (and a few exact zeros). */
static inline void rnd_acts(float *x, size_t n) {
    float scale = 1.0f;
    for (size_t i = 0; i < n; i++) {
        if (i % 32 == 0) scale = ldexpf(1.0f, (int)(rnd() % 12) - 6);
        x[i] = rnd() % 61 == 0 ? 0.0f : rndf(-scale, scale);
    }
}

#endif
