/*
 * quantize_iq.c — weight quantizers for the non-linear 4-bit types (IQ4_NL,
 * IQ4_XS) and the ternary ones (TQ1_0, TQ2_0), following the reference
 * quantizer's rules without an importance matrix (quantize.h lists them),
 * so that the same floats give the same bytes.
 *
 * The IQ4_NL quantizer here is the weights' one: a search over 15 candidate
 * scales per block. The KV cache keeps its own cheaper one in the library
 * (compute/quant_blocks.c), which this file does not touch.
 */
#include "quantize_iq.h"

#include "compute/quant/quant.h"

#include <math.h>
#include <string.h>

#define GROUP_EPS 1e-15f

static int clampi(int v, int lo, int hi) { return v < lo ? lo : v > hi ? hi : v; }

/* Round half to even; 0 for NaN or huge values (never an out-of-range conversion). */
static int nearest(float v) {
    if (!(v > -1e9f && v < 1e9f)) return 0;
    return (int)lrintf(v);
}

/* Round half away from zero, as lroundf; 0 for NaN or huge values. */
static int round_away(float v) {
    if (!(v > -1e9f && v < 1e9f)) return 0;
    return (int)lroundf(v);
}

/*
 * Index of the codebook value nearest v (the codebook is ascending); a tie
 * between two neighbours goes to the upper one, the reference's choice.
 */
static int nearest_code(float v) {
    const int8_t *book = tkv__iq4nl_values;
    if (!(v > book[0])) return 0; /* below the range, or NaN */
    if (v >= book[15]) return 15;
    int lo = 0, hi = 15; /* book[lo] < v < book[hi] holds throughout */
    while (hi - lo > 1) {
        const int mid = (lo + hi) / 2;
        if (v < book[mid]) hi = mid;
        else lo = mid;
    }
    return v - book[hi - 1] < book[hi] - v ? hi - 1 : hi;
}

/*
 * The scale of one block of 32 for x ≈ d * book[L], weighting each squared
 * error by x²: the least-squares scale for the codes of d = max / 127 (max:
 * the element of largest magnitude, with its sign), then the candidates
 * whose inverse scale is (book[0] + t) / max, t in -7..7, each fitted the
 * same way; the best fit's scale is kept. 0 for an all-zero block.
 */
static float fit_block(const float *x) {
    const int8_t *book = tkv__iq4nl_values;
    float amax = 0, max = 0;
    for (int j = 0; j < 32; j++)
        if (fabsf(x[j]) > amax) amax = fabsf(x[j]), max = x[j];
    if (amax < GROUP_EPS) return 0.0f;
    float d = -max / (float)book[0], id = 1.0f / d, sumqx = 0, sumq2 = 0;
    for (int j = 0; j < 32; j++) {
        const float q = (float)book[nearest_code(id * x[j])], w = x[j] * x[j];
        sumqx += w * q * x[j];
        sumq2 += w * q * q;
    }
    d = sumq2 > 0 ? sumqx / sumq2 : 0.0f;
    float best = d * sumqx;
    for (int t = -7; t <= 7; t++) {
        id = (float)(t + book[0]) / max;
        sumqx = sumq2 = 0;
        for (int j = 0; j < 32; j++) {
            const float q = (float)book[nearest_code(id * x[j])], w = x[j] * x[j];
            sumqx += w * q * x[j];
            sumq2 += w * q * q;
        }
        if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
            d = sumqx / sumq2;
            best = d * sumqx;
        }
    }
    return d;
}

/* 32 codes into 16 bytes: element j low nibble, j + 16 high. */
static void pack_codes(const uint8_t L[32], uint8_t qs[16]) {
    for (int j = 0; j < 16; j++) qs[j] = (uint8_t)(L[j] | L[16 + j] << 4);
}

static void quantize_iq4_nl(const float *x, tkv__block_iq4_nl *y, size_t nb) {
    for (size_t i = 0; i < nb; i++, x += 32) {
        const float d = fit_block(x), id = d != 0.0f ? 1.0f / d : 0.0f;
        uint8_t L[32];
        for (int j = 0; j < 32; j++) L[j] = (uint8_t)nearest_code(id * x[j]);
        y[i].d = tkv__quant_f32_to_f16(d);
        pack_codes(L, y[i].qs);
    }
}

/*
 * IQ4_XS: each block of 32 gets fit_block's scale; the eight are stored as
 * 6-bit multiples of d = -max / 32 (max: the scale of largest magnitude,
 * with its sign; -0 when every block is zero, which the fp16 keeps), and the
 * codes are recomputed against each stored scale.
 */
static void quantize_iq4_xs(const float *x, tkv__block_iq4_xs *y, size_t nb) {
    for (size_t i = 0; i < nb; i++, x += TKV__QK_K) {
        float scales[8], max_scale = 0, amax = 0;
        for (int b = 0; b < 8; b++) {
            scales[b] = fit_block(x + 32 * b);
            if (fabsf(scales[b]) > amax) amax = fabsf(scales[b]), max_scale = scales[b];
        }
        tkv__block_iq4_xs *blk = &y[i];
        const float d = -max_scale / 32.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
        blk->d = tkv__quant_f32_to_f16(d);
        blk->scales_h = 0;
        memset(blk->scales_l, 0, sizeof blk->scales_l);
        for (int b = 0; b < 8; b++) {
            const int l = clampi(nearest(id * scales[b]), -32, 31);
            /* the codes use the float d, not its fp16: the reference's order */
            const float dl = d * (float)l, idl = dl != 0.0f ? 1.0f / dl : 0.0f;
            uint8_t L[32];
            for (int j = 0; j < 32; j++) L[j] = (uint8_t)nearest_code(idl * x[32 * b + j]);
            pack_codes(L, blk->qs + 16 * b);
            const int u = l + 32;
            blk->scales_l[b / 2] |= (uint8_t)((u & 0x0f) << (4 * (b % 2)));
            blk->scales_h |= (uint16_t)((u >> 4) << (2 * b));
        }
    }
}

/* -1, 0, +1 against the block's largest magnitude, as the digit 0, 1, 2. */
static int trit(float v, float id) { return clampi(round_away(v * id), -1, 1) + 1; }

/* Ternary scale of a block: its largest magnitude. */
static float block_amax(const float *x) {
    float amax = 0;
    for (int j = 0; j < TKV__QK_K; j++) amax = fmaxf(amax, fabsf(x[j]));
    return amax;
}

/* Five (or four, then a zero) base-3 digits as the byte ceil(v * 256 / 243), whose top digit reads back first. */
static uint8_t pack_trits(int v) { return (uint8_t)((v * 256 + 242) / 243); }

static void quantize_tq1_0(const float *x, tkv__block_tq1_0 *y, size_t nb) {
    for (size_t i = 0; i < nb; i++, x += TKV__QK_K) {
        const float d = block_amax(x), id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = tkv__quant_f32_to_f16(d);
        for (int m = 0; m < 32; m++) { /* elements m + 32 k, k < 5 */
            int v = 0;
            for (int k = 0; k < 5; k++) v = 3 * v + trit(x[m + 32 * k], id);
            y[i].qs[m] = pack_trits(v);
        }
        for (int m = 0; m < 16; m++) { /* 160 + m + 16 k */
            int v = 0;
            for (int k = 0; k < 5; k++) v = 3 * v + trit(x[160 + m + 16 * k], id);
            y[i].qs[32 + m] = pack_trits(v);
        }
        for (int m = 0; m < 4; m++) { /* 240 + m + 4 k, k < 4 */
            int v = 0;
            for (int k = 0; k < 4; k++) v = 3 * v + trit(x[240 + m + 4 * k], id);
            y[i].qh[m] = pack_trits(3 * v);
        }
    }
}

static void quantize_tq2_0(const float *x, tkv__block_tq2_0 *y, size_t nb) {
    for (size_t i = 0; i < nb; i++, x += TKV__QK_K) {
        const float d = block_amax(x), id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = tkv__quant_f32_to_f16(d);
        for (int c = 0; c < 2; c++)
            for (int l = 0; l < 32; l++) {
                int q = 0;
                for (int k = 0; k < 4; k++) q |= trit(x[128 * c + 32 * k + l], id) << (2 * k);
                y[i].qs[32 * c + l] = (uint8_t)q;
            }
    }
}

void tkv__quantize_iq_row(tkv_type type, const float *x, void *y, size_t nb) {
    switch (type) {
    case TKV_TYPE_IQ4_NL: quantize_iq4_nl(x, y, nb); break;
    case TKV_TYPE_IQ4_XS: quantize_iq4_xs(x, y, nb); break;
    case TKV_TYPE_TQ1_0: quantize_tq1_0(x, y, nb); break;
    case TKV_TYPE_TQ2_0: quantize_tq2_0(x, y, nb); break;
    default: break;
    }
}
