/*
 * quantize.c — weight quantizers: float rows to GGUF blocks (see quantize.h
 * for the rounding rules and compute/quant/quant.h for the block layouts).
 *
 * Written from the formats' definitions and the reference's documented
 * rules; every float-to-integer conversion goes through a clamp first, so
 * no input (not even NaN) reaches an out-of-range conversion.
 */
#include "quantize.h"
#include "quantize_iq.h"

#include "compute/quant/quant.h"

#include <assert.h>
#include <math.h>
#include <string.h>

/* Below this a group counts as all zero (the reference's threshold). */
#define GROUP_EPS 1e-15f

/* ---- rounding helpers ------------------------------------------------------ */

static int clampi(int v, int lo, int hi) { return v < lo ? lo : v > hi ? hi : v; }

/* Round half to even (the default rounding mode); 0 for NaN or huge values. */
static int nearest(float v) {
    if (!(v > -1e9f && v < 1e9f)) return 0;
    return (int)lrintf(v);
}

/* fp16 fields are assigned directly: the packed structs make the compiler use unaligned stores */
static uint16_t f16(float v) { return tkv__quant_f32_to_f16(v); }

/* ---- K formats ---------------------------------------------------------------- */

/* One element's error under the fit's measure (the weight multiplies the result, as the reference rounds it). */
static float err_of(float diff, bool abs_err) { return abs_err ? fabsf(diff) : diff * diff; }

/*
 * Scale and min of one group of n elements for x ≈ scale * L - min with L in
 * 0..nmax (min >= 0 is returned in *the_min), minimising the w-weighted
 * squared error (abs_err: the w-weighted absolute error, as the reference's
 * Q2_K asks; each candidate is still fitted by least squares). Starts from the plain (max - min) / nmax grid, then tries
 * nstep + 1 candidate inverse scales (nmax + rmin + rdelta * k) / (max - min):
 * for each, the quants it gives and the least-squares scale and min for
 * those quants (min clamped to <= 0 in x, i.e. the_min >= 0); keeps the best.
 * L (n) receives the quants of the best fit; Laux (n) is scratch.
 */
static float fit_scale_min(int n, int nmax, const float *x, const float *w, uint8_t *L, float *the_min, uint8_t *Laux,
                           float rmin, float rdelta, int nstep, bool abs_err) {
    float min = x[0], max = x[0], sum_w = w[0], sum_x = w[0] * x[0];
    for (int i = 1; i < n; i++) {
        min = fminf(min, x[i]);
        max = fmaxf(max, x[i]);
        sum_w += w[i];
        sum_x += w[i] * x[i];
    }
    if (min > 0) min = 0; /* the stored min is an offset down only */
    if (!(max - min > 0 && max - min < INFINITY)) { /* constant, or not finite: nothing to fit */
        memset(L, 0, (size_t)n);
        *the_min = isfinite(min) ? -min : 0.0f;
        return 0.0f;
    }
    float iscale = (float)nmax / (max - min), scale = 1.0f / iscale, best = 0.0f;
    for (int i = 0; i < n; i++) {
        L[i] = (uint8_t)clampi(nearest(iscale * (x[i] - min)), 0, nmax);
        best += w[i] * err_of(scale * (float)L[i] + min - x[i], abs_err);
    }
    for (int k = 0; k <= nstep; k++) {
        iscale = (rmin + rdelta * (float)k + (float)nmax) / (max - min);
        float sum_l = 0, sum_l2 = 0, sum_xl = 0;
        for (int i = 0; i < n; i++) {
            const int l = clampi(nearest(iscale * (x[i] - min)), 0, nmax);
            Laux[i] = (uint8_t)l;
            sum_l += w[i] * (float)l;
            sum_l2 += w[i] * (float)l * (float)l;
            sum_xl += w[i] * (float)l * x[i];
        }
        const float det = sum_w * sum_l2 - sum_l * sum_l;
        if (det <= 0) continue;
        float this_scale = (sum_w * sum_xl - sum_x * sum_l) / det;
        float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / det;
        if (this_min > 0) {
            this_min = 0;
            this_scale = sum_xl / sum_l2;
        }
        float err = 0;
        for (int i = 0; i < n; i++) err += w[i] * err_of(this_scale * (float)Laux[i] + this_min - x[i], abs_err);
        if (err < best) {
            memcpy(L, Laux, (size_t)n);
            best = err;
            scale = this_scale;
            min = this_min;
        }
    }
    *the_min = -min;
    return scale;
}

/* Pack 8 six-bit scales and mins into the 12 bytes of a Q4_K/Q5_K block. */
static void pack_k4_scales(const uint8_t ls[8], const uint8_t lm[8], uint8_t scales[12]) {
    memset(scales, 0, 12);
    for (int j = 0; j < 8; j++) {
        if (j < 4) {
            scales[j] = ls[j];
            scales[j + 4] = lm[j];
        } else {
            scales[j + 4] = (uint8_t)((ls[j] & 0x0f) | ((lm[j] & 0x0f) << 4));
            scales[j - 4] |= (uint8_t)((ls[j] >> 4) << 6);
            scales[j] |= (uint8_t)((lm[j] >> 4) << 6);
        }
    }
}

/*
 * Q4_K (five = 0) and Q5_K (five = 1). Per block of 256: each group of 32
 * gets a fitted scale and min (weights: the group's rms + |x|), both are
 * quantized to 6 bits against the largest (d = max_scale / 63,
 * dmin = max_min / 63), and the quants are recomputed from the stored
 * values.
 */
static void quantize_k(const float *x, void *dst, size_t nb, int five) {
    const int nmax = five ? 31 : 15;
    const float rmin = five ? -0.5f : -1.0f;
    const int nstep = five ? 15 : 20;
    uint8_t *p = dst;
    const size_t bsize = five ? sizeof(tkv__block_q5_K) : sizeof(tkv__block_q4_K);
    for (size_t i = 0; i < nb; i++, x += TKV__QK_K, p += bsize) {
        uint8_t L[TKV__QK_K], Laux[32];
        float w[32], scales[8], mins[8], max_scale = 0, max_min = 0;
        for (int g = 0; g < 8; g++) {
            const float *xg = x + 32 * g;
            float sum_x2 = 0;
            for (int l = 0; l < 32; l++) sum_x2 += xg[l] * xg[l];
            const float av_x = sqrtf(sum_x2 / 32);
            for (int l = 0; l < 32; l++) w[l] = av_x + fabsf(xg[l]);
            scales[g] = fit_scale_min(32, nmax, xg, w, L + 32 * g, &mins[g], Laux, rmin, 0.1f, nstep, false);
            max_scale = fmaxf(max_scale, scales[g]);
            max_min = fmaxf(max_min, mins[g]);
        }
        const float inv_scale = max_scale > 0 ? 63.0f / max_scale : 0.0f;
        const float inv_min = max_min > 0 ? 63.0f / max_min : 0.0f;
        uint8_t ls[8], lm[8];
        for (int g = 0; g < 8; g++) {
            ls[g] = (uint8_t)clampi(nearest(inv_scale * scales[g]), 0, 63);
            lm[g] = (uint8_t)clampi(nearest(inv_min * mins[g]), 0, 63);
        }
        const uint16_t dh = f16(max_scale / 63.0f), dminh = f16(max_min / 63.0f);
        uint8_t *qs, *qh = NULL;
        if (five) {
            tkv__block_q5_K *b = (tkv__block_q5_K *)p;
            b->d = dh, b->dmin = dminh, qs = b->qs, qh = b->qh;
            pack_k4_scales(ls, lm, b->scales);
        } else {
            tkv__block_q4_K *b = (tkv__block_q4_K *)p;
            b->d = dh, b->dmin = dminh, qs = b->qs;
            pack_k4_scales(ls, lm, b->scales);
        }
        const float d = tkv__quant_f16_to_f32(dh), dmin = tkv__quant_f16_to_f32(dminh);
        for (int g = 0; g < 8; g++) {
            const float dg = d * (float)ls[g];
            if (dg == 0.0f) continue; /* the group dequantizes to -dmin*m whatever L says */
            const float mg = dmin * (float)lm[g];
            for (int l = 0; l < 32; l++) L[32 * g + l] = (uint8_t)clampi(nearest((x[32 * g + l] + mg) / dg), 0, nmax);
        }
        /* chunk c of 32 bytes: group 2c in the low nibbles, 2c + 1 in the high; fifth bits 2c, 2c + 1 of qh */
        if (qh) memset(qh, 0, 32);
        for (int c = 0; c < 4; c++) {
            for (int l = 0; l < 32; l++) {
                const uint8_t lo = L[64 * c + l], hi = L[64 * c + 32 + l];
                qs[32 * c + l] = (uint8_t)((lo & 0x0f) | ((hi & 0x0f) << 4));
                if (qh) qh[l] |= (uint8_t)(((lo >> 4) & 1) << (2 * c) | ((hi >> 4) & 1) << (2 * c + 1));
            }
        }
    }
}

/*
 * Symmetric scale of one group of n elements for x ≈ scale * (L - nmax),
 * L in 0..2*nmax-1, weighting each squared error by x²: the plain scale
 * -max / nmax first, then 18 candidates (nmax ± 0.1k) / -max, keeping the
 * one whose least-squares scale explains most of the signal. L (n)
 * receives the quants (offset by nmax).
 */
static float fit_scale_sym(int n, int nmax, const float *x, uint8_t *L) {
    const float max = tkv__quant_signed_absmax(x, n);
    if (fabsf(max) < GROUP_EPS) {
        memset(L, 0, (size_t)n);
        return 0.0f;
    }
    float iscale = -(float)nmax / max, sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; i++) {
        const int l = clampi(nearest(iscale * x[i]), -nmax, nmax - 1);
        L[i] = (uint8_t)(l + nmax);
        const float w = x[i] * x[i];
        sumlx += w * x[i] * (float)l;
        suml2 += w * (float)l * (float)l;
    }
    float scale = suml2 > 0 ? sumlx / suml2 : 0.0f, best = scale * sumlx;
    for (int k = -9; k <= 9; k++) {
        if (k == 0) continue;
        iscale = -((float)nmax + 0.1f * (float)k) / max;
        sumlx = suml2 = 0;
        for (int i = 0; i < n; i++) {
            const int l = clampi(nearest(iscale * x[i]), -nmax, nmax - 1);
            const float w = x[i] * x[i];
            sumlx += w * x[i] * (float)l;
            suml2 += w * (float)l * (float)l;
        }
        if (suml2 > 0 && sumlx * sumlx > best * suml2) {
            for (int i = 0; i < n; i++) L[i] = (uint8_t)(nmax + clampi(nearest(iscale * x[i]), -nmax, nmax - 1));
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    return scale;
}

/*
 * Q6_K: each group of 16 gets a fitted symmetric scale; the group scales are
 * stored as int8 against the one of largest magnitude (d = -max / 128) and
 * the quants recomputed from the stored values.
 */
static void quantize_q6_K(const float *x, tkv__block_q6_K *y, size_t nb) {
    for (size_t i = 0; i < nb; i++, x += TKV__QK_K) {
        uint8_t L[TKV__QK_K];
        float scales[16], max_scale = 0, max_abs = 0;
        for (int g = 0; g < 16; g++) {
            scales[g] = fit_scale_sym(16, 32, x + 16 * g, L + 16 * g);
            if (fabsf(scales[g]) > max_abs) {
                max_abs = fabsf(scales[g]);
                max_scale = scales[g];
            }
        }
        memset(&y[i], 0, sizeof y[i]);
        if (max_abs < GROUP_EPS) continue; /* all zero: d = 0 */
        const float iscale = -128.0f / max_scale;
        y[i].d = f16(1.0f / iscale);
        const float d = tkv__quant_f16_to_f32(y[i].d);
        for (int g = 0; g < 16; g++) {
            y[i].scales[g] = (int8_t)clampi(nearest(iscale * scales[g]), -128, 127);
            const float dg = d * (float)y[i].scales[g];
            if (dg == 0.0f) continue;
            for (int l = 0; l < 16; l++) L[16 * g + l] = (uint8_t)(clampi(nearest(x[16 * g + l] / dg), -32, 31) + 32);
        }
        /* half h of 128: ql[64h + l] = e l | e l+64 << 4, ql[64h + 32 + l] = e l+32 | e l+96 << 4; qh[32h + l] = top bits */
        for (int h = 0; h < 2; h++) {
            const uint8_t *Lh = L + 128 * h;
            uint8_t *ql = y[i].ql + 64 * h, *qh = y[i].qh + 32 * h;
            for (int l = 0; l < 32; l++) {
                ql[l] = (uint8_t)((Lh[l] & 0x0f) | ((Lh[l + 64] & 0x0f) << 4));
                ql[l + 32] = (uint8_t)((Lh[l + 32] & 0x0f) | ((Lh[l + 96] & 0x0f) << 4));
                qh[l] = (uint8_t)((Lh[l] >> 4) | ((Lh[l + 32] >> 4) << 2) | ((Lh[l + 64] >> 4) << 4) |
                                  ((Lh[l + 96] >> 4) << 6));
            }
        }
    }
}

/*
 * Q2_K: per group of 16 a fitted scale and min (weights |x|, absolute
 * error), both stored as 4-bit multiples of the block's largest
 * (d = max_scale / 15, dmin = max_min / 15), quants recomputed from the
 * stored values where the group's scale is not zero.
 */
static void quantize_q2_K(const float *x, tkv__block_q2_K *y, size_t nb) {
    for (size_t i = 0; i < nb; i++, x += TKV__QK_K) {
        uint8_t L[TKV__QK_K], Laux[16];
        float w[16], scales[16], mins[16], max_scale = 0, max_min = 0;
        for (int g = 0; g < 16; g++) {
            for (int l = 0; l < 16; l++) w[l] = fabsf(x[16 * g + l]);
            scales[g] = fit_scale_min(16, 3, x + 16 * g, w, L + 16 * g, &mins[g], Laux, -0.5f, 0.1f, 15, true);
            if (scales[g] > max_scale) max_scale = scales[g];
            if (mins[g] > max_min) max_min = mins[g];
        }
        tkv__block_q2_K *b = &y[i];
        memset(b->scales, 0, sizeof b->scales);
        b->d = f16(0.0f), b->dmin = f16(0.0f);
        /* the packed nibbles take the int's low byte, as the reference's assignment does (never out of range for finite input) */
        if (max_scale > 0) {
            const float iscale = 15.0f / max_scale;
            for (int g = 0; g < 16; g++) b->scales[g] = (uint8_t)nearest(iscale * scales[g]);
            b->d = f16(max_scale / 15.0f);
        }
        if (max_min > 0) {
            const float iscale = 15.0f / max_min;
            for (int g = 0; g < 16; g++) b->scales[g] |= (uint8_t)((unsigned)nearest(iscale * mins[g]) << 4);
            b->dmin = f16(max_min / 15.0f);
        }
        const float d = tkv__quant_f16_to_f32(b->d), dmin = tkv__quant_f16_to_f32(b->dmin);
        for (int g = 0; g < 16; g++) {
            const float dg = d * (float)(b->scales[g] & 0x0f);
            if (dg == 0.0f) continue; /* keeps the fit's quants, as the reference does */
            const float mg = dmin * (float)(b->scales[g] >> 4);
            for (int l = 0; l < 16; l++) L[16 * g + l] = (uint8_t)clampi(nearest((x[16 * g + l] + mg) / dg), 0, 3);
        }
        for (int c = 0; c < 2; c++)
            for (int l = 0; l < 32; l++) {
                const uint8_t *Lc = L + 128 * c + l;
                b->qs[32 * c + l] = (uint8_t)(Lc[0] | Lc[32] << 2 | Lc[64] << 4 | Lc[96] << 6);
            }
    }
}

/*
 * Symmetric scale of a group of 16 for Q3_K, x ≈ scale * L with L in
 * -nmax..nmax-1: start from -max / nmax, then up to 5 passes that move one
 * quant at a time to the value that raises the x²-weighted fit
 * (sum l x)² / sum l², keeping a move only when it does. L receives the
 * quants offset by nmax; an all-zero group gets L = 0 (not nmax) and scale 0,
 * which the block packing relies on to reproduce the reference's bytes.
 */
static float fit_scale_q3(int n, int nmax, const float *x, int8_t *L) {
    const float max = tkv__quant_signed_absmax(x, n);
    if (fabsf(max) < GROUP_EPS) {
        memset(L, 0, (size_t)n);
        return 0.0f;
    }
    const float iscale = -(float)nmax / max;
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; i++) {
        const int l = clampi(nearest(iscale * x[i]), -nmax, nmax - 1);
        L[i] = (int8_t)l;
        const float w = x[i] * x[i];
        sumlx += w * x[i] * (float)l;
        suml2 += w * (float)l * (float)l;
    }
    for (int pass = 0; pass < 5; pass++) {
        int changed = 0;
        for (int i = 0; i < n; i++) {
            const float w = x[i] * x[i];
            float slx = sumlx - w * x[i] * (float)L[i];
            if (!(slx > 0)) continue;
            float sl2 = suml2 - w * (float)L[i] * (float)L[i];
            const int nl = clampi(nearest(x[i] * sl2 / slx), -nmax, nmax - 1);
            if (nl == L[i]) continue;
            slx += w * x[i] * (float)nl;
            sl2 += w * (float)nl * (float)nl;
            if (sl2 > 0 && slx * slx * suml2 > sumlx * sumlx * sl2) {
                L[i] = (int8_t)nl, sumlx = slx, suml2 = sl2;
                changed++;
            }
        }
        if (!changed) break;
    }
    for (int i = 0; i < n; i++) L[i] = (int8_t)(L[i] + nmax);
    return suml2 > 0 ? sumlx / suml2 : 0.0f;
}

/*
 * Q3_K: per group of 16 a fitted symmetric scale, stored as 6 bits against
 * the one of largest magnitude (d = -max / 32), quants recomputed from the
 * stored values where the group's scale is not zero.
 */
static void quantize_q3_K(const float *x, tkv__block_q3_K *y, size_t nb) {
    for (size_t i = 0; i < nb; i++, x += TKV__QK_K) {
        int8_t L[TKV__QK_K];
        float scales[16], max_scale = 0, amax = 0;
        for (int g = 0; g < 16; g++) {
            scales[g] = fit_scale_q3(16, 4, x + 16 * g, L + 16 * g);
            if (fabsf(scales[g]) > amax) amax = fabsf(scales[g]), max_scale = scales[g];
        }
        tkv__block_q3_K *b = &y[i];
        memset(b->scales, 0, sizeof b->scales);
        b->d = f16(0.0f);
        if (max_scale != 0.0f) {
            const float iscale = -32.0f / max_scale;
            for (int g = 0; g < 16; g++) {
                const int l = clampi(nearest(iscale * scales[g]), -32, 31) + 32;
                b->scales[g % 8] |= (uint8_t)((l & 0x0f) << (4 * (g / 8)));
                b->scales[8 + g % 4] |= (uint8_t)((l >> 4) << (2 * (g / 4)));
            }
            b->d = f16(1.0f / iscale);
        }
        int8_t sc[16];
        tkv__q3_K_scales(b->scales, sc);
        const float d = tkv__quant_f16_to_f32(b->d);
        for (int g = 0; g < 16; g++) {
            const float dg = d * (float)sc[g];
            if (dg == 0.0f) continue; /* keeps the fit's quants */
            for (int l = 0; l < 16; l++) L[16 * g + l] = (int8_t)(clampi(nearest(x[16 * g + l] / dg), -4, 3) + 4);
        }
        /* element e: its third bit in bit e / 32 of hmask[e % 32], the two low bits as Q2_K's */
        memset(b->hmask, 0, sizeof b->hmask);
        for (int e = 0; e < TKV__QK_K; e++)
            if (L[e] > 3) {
                b->hmask[e % 32] |= (uint8_t)(1u << (e / 32));
                L[e] = (int8_t)(L[e] - 4);
            }
        for (int c = 0; c < 2; c++)
            for (int l = 0; l < 32; l++) {
                const int8_t *Lc = L + 128 * c + l;
                b->qs[32 * c + l] = (uint8_t)(Lc[0] | Lc[32] << 2 | Lc[64] << 4 | Lc[96] << 6);
            }
    }
}

/* ---- entry points ----------------------------------------------------------------- */

bool tkv__quantize_supported(tkv_type type) {
    switch (type) {
    case TKV_TYPE_F32:
    case TKV_TYPE_F16:
    case TKV_TYPE_BF16:
    case TKV_TYPE_Q8_0:
    case TKV_TYPE_Q4_0:
    case TKV_TYPE_Q4_1:
    case TKV_TYPE_Q5_0:
    case TKV_TYPE_Q5_1:
    case TKV_TYPE_Q4_K:
    case TKV_TYPE_Q5_K:
    case TKV_TYPE_Q6_K:
    case TKV_TYPE_Q2_K:
    case TKV_TYPE_Q3_K:
    case TKV_TYPE_IQ4_NL:
    case TKV_TYPE_IQ4_XS:
    case TKV_TYPE_TQ1_0:
    case TKV_TYPE_TQ2_0: return true;
    default: return false;
    }
}

void tkv__quantize_row(tkv_type type, const float *x, void *y, size_t n) {
    assert(tkv__quantize_supported(type));
    const size_t be = tkv__quant_block_elems(type);
    assert(be && n % be == 0);
    const size_t nb = n / be;
    switch (type) {
    case TKV_TYPE_F32: tkv__quant_quantize_f32(x, y, n); break;
    case TKV_TYPE_F16: tkv__quant_quantize_f16(x, y, n); break;
    case TKV_TYPE_BF16: tkv__quant_quantize_bf16(x, y, n); break;
    case TKV_TYPE_Q8_0:
    case TKV_TYPE_Q4_0:
    case TKV_TYPE_Q5_0:
    case TKV_TYPE_Q4_1:
    case TKV_TYPE_Q5_1: tkv__quant_quantize_block_row(type, x, y, n); break; /* the library's (shared with the KV cache) */
    case TKV_TYPE_IQ4_NL: /* not the KV cache's quantizer: the weights' search over scales */
    case TKV_TYPE_IQ4_XS:
    case TKV_TYPE_TQ1_0:
    case TKV_TYPE_TQ2_0: tkv__quantize_iq_row(type, x, y, nb); break;
    case TKV_TYPE_Q2_K: quantize_q2_K(x, y, nb); break;
    case TKV_TYPE_Q3_K: quantize_q3_K(x, y, nb); break;
    case TKV_TYPE_Q4_K: quantize_k(x, y, nb, 0); break;
    case TKV_TYPE_Q5_K: quantize_k(x, y, nb, 1); break;
    case TKV_TYPE_Q6_K: quantize_q6_K(x, y, nb); break;
    default: break;
    }
}
