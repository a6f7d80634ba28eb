/*
 * compute/quant/blocks.c — float rows to the 32-element block formats Q8_0, Q4_0,
 * Q4_1, Q5_0, Q5_1 and IQ4_NL: what a quantized KV cache stores (and what
 * `tokenkv mkmodel` and `quantize` write for weights of these types).
 *
 * The rounding rules follow the reference implementation's scalar
 * quantizers (see tools/quantize.h); IQ4_NL's is simpler than the
 * reference's scale search (see quantize_iq4_nl). Every float-to-integer
 * conversion is clamped first, so no input (not even NaN) reaches an
 * out-of-range conversion.
 */
#include "quant.h"

#include <assert.h>
#include <math.h>
#include <string.h>

/* Truncate toward zero, clamped to 0..hi; 0 for NaN or negative values. */
static int trunc_clamp(float v, int hi) {
    if (!(v >= 0.0f)) return 0;
    if (v >= (float)hi) return hi;
    return (int)v;
}

static uint16_t f16(float v) { return tkv__quant_f32_to_f16(v); }

/* The element of largest magnitude, with its sign (the first one on ties). */
float tkv__quant_signed_absmax(const float *x, int n) {
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < n; j++) {
        if (fabsf(x[j]) > amax) {
            amax = fabsf(x[j]);
            max = x[j];
        }
    }
    return max;
}

static void quantize_q8_0(const float *x, tkv__block_q8_0 *y, size_t nb) {
    for (size_t i = 0; i < nb; i++, x += TKV__QK) {
        float amax = 0.0f;
        for (int j = 0; j < TKV__QK; j++) amax = fmaxf(amax, fabsf(x[j]));
        const float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = f16(d);
        for (int j = 0; j < TKV__QK; j++) {
            const float v = roundf(x[j] * id); /* half away from zero, as the reference */
            y[i].qs[j] = (int8_t)(v >= -128.0f && v <= 127.0f ? (int)v : 0);
        }
    }
}

/*
 * Q4_0 (bits 4, offset 8) and Q5_0 (bits 5, offset 16): d = -max / offset,
 * q = trunc(x / d + offset + 0.5) clamped to the top quant.
 */
static void quantize_sym(const float *x, void *dst, size_t nb, int five) {
    const int off = five ? 16 : 8, top = 2 * off - 1;
    uint8_t *p = dst;
    const size_t bsize = five ? sizeof(tkv__block_q5_0) : sizeof(tkv__block_q4_0);
    for (size_t i = 0; i < nb; i++, x += TKV__QK, p += bsize) {
        const float d = tkv__quant_signed_absmax(x, TKV__QK) / (float)-off, id = d != 0.0f ? 1.0f / d : 0.0f;
        int q[TKV__QK];
        for (int j = 0; j < TKV__QK; j++) q[j] = trunc_clamp(x[j] * id + (float)off + 0.5f, top);
        uint8_t *qs;
        if (five) {
            tkv__block_q5_0 *b = (tkv__block_q5_0 *)p;
            b->d = f16(d);
            uint32_t qh = 0;
            for (int j = 0; j < TKV__QK; j++) qh |= (uint32_t)((q[j] >> 4) & 1) << j;
            memcpy(b->qh, &qh, 4);
            qs = b->qs;
        } else {
            tkv__block_q4_0 *b = (tkv__block_q4_0 *)p;
            b->d = f16(d);
            qs = b->qs;
        }
        for (int j = 0; j < 16; j++) qs[j] = (uint8_t)((q[j] & 0x0f) | ((q[j + 16] & 0x0f) << 4));
    }
}

/*
 * Q4_1 (bits 4) and Q5_1 (bits 5): d = (max - min) / top, m = min,
 * q = trunc((x - min) / d + 0.5).
 */
static void quantize_affine(const float *x, void *dst, size_t nb, int five) {
    const int top = five ? 31 : 15;
    uint8_t *p = dst;
    const size_t bsize = five ? sizeof(tkv__block_q5_1) : sizeof(tkv__block_q4_1);
    for (size_t i = 0; i < nb; i++, x += TKV__QK, p += bsize) {
        float min = x[0], max = x[0];
        for (int j = 1; j < TKV__QK; j++) {
            min = fminf(min, x[j]);
            max = fmaxf(max, x[j]);
        }
        const float d = (max - min) / (float)top, id = d != 0.0f ? 1.0f / d : 0.0f;
        int q[TKV__QK];
        for (int j = 0; j < TKV__QK; j++) q[j] = trunc_clamp((x[j] - min) * id + 0.5f, top);
        uint8_t *qs;
        if (five) {
            tkv__block_q5_1 *b = (tkv__block_q5_1 *)p;
            b->d = f16(d);
            b->m = f16(min);
            uint32_t qh = 0;
            for (int j = 0; j < TKV__QK; j++) qh |= (uint32_t)((q[j] >> 4) & 1) << j;
            memcpy(b->qh, &qh, 4);
            qs = b->qs;
        } else {
            tkv__block_q4_1 *b = (tkv__block_q4_1 *)p;
            b->d = f16(d);
            b->m = f16(min);
            qs = b->qs;
        }
        for (int j = 0; j < 16; j++) qs[j] = (uint8_t)((q[j] & 0x0f) | ((q[j + 16] & 0x0f) << 4));
    }
}

/*
 * IQ4_NL: x = d * values[q]. The scale starts from the element of largest
 * magnitude mapped onto the codebook's end of largest magnitude (-127), each
 * element takes its nearest code, then d is refitted by least squares for
 * those codes and the codes chosen once more.
 */
static int nearest_code(float v) {
    int best = 0;
    float bd = INFINITY;
    for (int k = 0; k < 16; k++) {
        const float dd = fabsf(v - (float)tkv__iq4nl_values[k]);
        if (dd < bd) bd = dd, best = k;
    }
    return best;
}

static void quantize_iq4_nl(const float *x, tkv__block_iq4_nl *y, size_t nb) {
    for (size_t i = 0; i < nb; i++, x += TKV__QK) {
        float d = tkv__quant_signed_absmax(x, TKV__QK) / -127.0f;
        int q[TKV__QK] = {0};
        for (int pass = 0; pass < 2 && d != 0.0f; pass++) {
            const float id = 1.0f / d;
            double sxv = 0, svv = 0;
            for (int j = 0; j < TKV__QK; j++) {
                q[j] = nearest_code(x[j] * id);
                const double v = tkv__iq4nl_values[q[j]];
                sxv += x[j] * v, svv += v * v;
            }
            if (pass == 0 && svv > 0 && sxv != 0) d = (float)(sxv / svv);
        }
        y[i].d = f16(d);
        for (int j = 0; j < 16; j++) y[i].qs[j] = (uint8_t)((q[j] & 0x0f) | ((q[j + 16] & 0x0f) << 4));
    }
}

void tkv__quant_quantize_block_row(tkv_type type, const float *x, void *y, size_t n) {
    assert(n % TKV__QK == 0);
    const size_t nb = n / TKV__QK;
    switch (type) {
    case TKV_TYPE_Q8_0: quantize_q8_0(x, y, nb); break;
    case TKV_TYPE_Q4_0: quantize_sym(x, y, nb, 0); break;
    case TKV_TYPE_Q5_0: quantize_sym(x, y, nb, 1); break;
    case TKV_TYPE_Q4_1: quantize_affine(x, y, nb, 0); break;
    case TKV_TYPE_Q5_1: quantize_affine(x, y, nb, 1); break;
    case TKV_TYPE_IQ4_NL: quantize_iq4_nl(x, y, nb); break;
    default: assert(!"quantize_block_row: not a 32-element block type");
    }
}
