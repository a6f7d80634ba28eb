/*
 * compute/quant/quant.c — scalar reference code over the GGUF number formats: row sizes,
 * dequantization, activation quantization and dot products (see compute/quant/quant.h).
 *
 * These functions are the oracles of the SIMD kernels, so they favour
 * obviousness: one element at a time, integer sums kept exact.
 * Host byte order is assumed little-endian, like GGUF (x86-64, aarch64).
 */
#include "quant.h"
#include "iq.h"

#include <assert.h>
#include <math.h>

/* ---- type facts --------------------------------------------------------- */

int tkv__quant_supported(tkv_type type) {
    return tkv__quant_vec_dot_type(type) != TKV_TYPE_COUNT;
}

tkv_type tkv__quant_vec_dot_type(tkv_type type) {
    switch (type) {
    case TKV_TYPE_F32: return TKV_TYPE_F32;
    case TKV_TYPE_F16: return TKV_TYPE_F16;
    case TKV_TYPE_BF16: return TKV_TYPE_BF16;
    case TKV_TYPE_Q8_0:
    case TKV_TYPE_Q4_0:
    case TKV_TYPE_Q5_0:
    case TKV_TYPE_IQ4_NL:
    case TKV_TYPE_MXFP4: return TKV_TYPE_Q8_0;
    case TKV_TYPE_Q4_1:
    case TKV_TYPE_Q5_1: return TKV_TYPE_Q8_1;
    case TKV_TYPE_Q4_K:
    case TKV_TYPE_Q5_K:
    case TKV_TYPE_Q6_K:
    case TKV_TYPE_IQ4_XS:
    case TKV_TYPE_Q2_K:
    case TKV_TYPE_Q3_K:
    case TKV_TYPE_TQ1_0:
    case TKV_TYPE_TQ2_0:
    case TKV_TYPE_IQ2_XXS:
    case TKV_TYPE_IQ2_XS:
    case TKV_TYPE_IQ2_S: return TKV_TYPE_Q8_K;
    case TKV_TYPE_IQ1_S:
    case TKV_TYPE_IQ1_M: return TKV_TYPE_Q8_K;
    case TKV_TYPE_IQ3_XXS:
    case TKV_TYPE_IQ3_S: return TKV_TYPE_Q8_K;
    default: return TKV_TYPE_COUNT;
    }
}

size_t tkv__quant_block_elems(tkv_type type) {
    uint32_t be, bb;
    if (tkv_type_block(type, &be, &bb) != TKV_OK) return 0;
    return be;
}

size_t tkv__quant_row_size(tkv_type type, size_t n) {
    uint32_t be, bb;
    if (tkv_type_block(type, &be, &bb) != TKV_OK) return 0;
    assert(n % be == 0);
    return n / be * bb;
}

/* ---- dequantization ------------------------------------------------------ */

static void dequant_f32(const void *src, float *y, size_t n) {
    memcpy(y, src, n * sizeof(float));
}

static void dequant_f16(const void *src, float *y, size_t n) {
    const uint8_t *p = src;
    for (size_t i = 0; i < n; i++) {
        uint16_t h;
        memcpy(&h, p + 2 * i, 2);
        y[i] = tkv__quant_f16_to_f32(h);
    }
}

static void dequant_bf16(const void *src, float *y, size_t n) {
    const uint8_t *p = src;
    for (size_t i = 0; i < n; i++) {
        uint16_t h;
        memcpy(&h, p + 2 * i, 2);
        y[i] = tkv__quant_bf16_to_f32(h);
    }
}

static void dequant_q8_0(const void *src, float *y, size_t n) {
    const tkv__block_q8_0 *b = src;
    for (size_t i = 0; i < n / TKV__QK; i++, y += TKV__QK) {
        const float d = tkv__quant_f16_to_f32(b[i].d);
        for (int j = 0; j < TKV__QK; j++) y[j] = (float)b[i].qs[j] * d;
    }
}

static void dequant_q8_1(const void *src, float *y, size_t n) {
    const tkv__block_q8_1 *b = src;
    for (size_t i = 0; i < n / TKV__QK; i++, y += TKV__QK) {
        const float d = tkv__quant_f16_to_f32(b[i].d);
        for (int j = 0; j < TKV__QK; j++) y[j] = (float)b[i].qs[j] * d;
    }
}

static void dequant_q4_0(const void *src, float *y, size_t n) {
    const tkv__block_q4_0 *b = src;
    for (size_t i = 0; i < n / TKV__QK; i++, y += TKV__QK) {
        const float d = tkv__quant_f16_to_f32(b[i].d);
        for (int j = 0; j < 16; j++) {
            y[j] = (float)((b[i].qs[j] & 0x0f) - 8) * d;
            y[j + 16] = (float)((b[i].qs[j] >> 4) - 8) * d;
        }
    }
}

static void dequant_q4_1(const void *src, float *y, size_t n) {
    const tkv__block_q4_1 *b = src;
    for (size_t i = 0; i < n / TKV__QK; i++, y += TKV__QK) {
        const float d = tkv__quant_f16_to_f32(b[i].d);
        const float m = tkv__quant_f16_to_f32(b[i].m);
        for (int j = 0; j < 16; j++) {
            y[j] = (float)(b[i].qs[j] & 0x0f) * d + m;
            y[j + 16] = (float)(b[i].qs[j] >> 4) * d + m;
        }
    }
}

/* The 32 five-bit quants of a Q5_0/Q5_1 block, element order. */
static void q5_unpack(const uint8_t qh[4], const uint8_t qs[16], int q[32]) {
    uint32_t h;
    memcpy(&h, qh, 4);
    for (int j = 0; j < 16; j++) {
        q[j] = (qs[j] & 0x0f) | (int)(((h >> j) & 1u) << 4);
        q[j + 16] = (qs[j] >> 4) | (int)(((h >> (j + 16)) & 1u) << 4);
    }
}

static void dequant_q5_0(const void *src, float *y, size_t n) {
    const tkv__block_q5_0 *b = src;
    int q[32];
    for (size_t i = 0; i < n / TKV__QK; i++, y += TKV__QK) {
        const float d = tkv__quant_f16_to_f32(b[i].d);
        q5_unpack(b[i].qh, b[i].qs, q);
        for (int j = 0; j < 32; j++) y[j] = (float)(q[j] - 16) * d;
    }
}

static void dequant_q5_1(const void *src, float *y, size_t n) {
    const tkv__block_q5_1 *b = src;
    int q[32];
    for (size_t i = 0; i < n / TKV__QK; i++, y += TKV__QK) {
        const float d = tkv__quant_f16_to_f32(b[i].d);
        const float m = tkv__quant_f16_to_f32(b[i].m);
        q5_unpack(b[i].qh, b[i].qs, q);
        for (int j = 0; j < 32; j++) y[j] = (float)q[j] * d + m;
    }
}

/* The 256 quants of a Q4_K (qh NULL) or Q5_K block, element order. */
static void k_unpack(const uint8_t *qs, const uint8_t *qh, uint8_t q[256]) {
    for (int c = 0; c < 4; c++) {
        for (int l = 0; l < 32; l++) {
            uint8_t lo = qs[32 * c + l] & 0x0f, hi = qs[32 * c + l] >> 4;
            if (qh) {
                lo |= (uint8_t)(((qh[l] >> (2 * c)) & 1) << 4);
                hi |= (uint8_t)(((qh[l] >> (2 * c + 1)) & 1) << 4);
            }
            q[64 * c + l] = lo;
            q[64 * c + 32 + l] = hi;
        }
    }
}

/* The 256 quants of a Q6_K block, element order, in 0..63. */
static void q6_unpack(const tkv__block_q6_K *b, uint8_t q[256]) {
    for (int h = 0; h < 2; h++) {
        const uint8_t *ql = b->ql + 64 * h, *qh = b->qh + 32 * h;
        uint8_t *o = q + 128 * h;
        for (int l = 0; l < 32; l++) {
            o[l] = (uint8_t)((ql[l] & 0x0f) | (((qh[l] >> 0) & 3) << 4));
            o[l + 32] = (uint8_t)((ql[l + 32] & 0x0f) | (((qh[l] >> 2) & 3) << 4));
            o[l + 64] = (uint8_t)((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4));
            o[l + 96] = (uint8_t)((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4));
        }
    }
}

static void dequant_k(const void *src, float *y, size_t n, int five) {
    const uint8_t *p = src;
    const size_t bsize = five ? sizeof(tkv__block_q5_K) : sizeof(tkv__block_q4_K);
    uint8_t q[256], sm[16];
    for (size_t i = 0; i < n / TKV__QK_K; i++, y += TKV__QK_K, p += bsize) {
        float d, dmin;
        if (five) {
            const tkv__block_q5_K *b = (const tkv__block_q5_K *)p;
            d = tkv__quant_f16_to_f32(b->d);
            dmin = tkv__quant_f16_to_f32(b->dmin);
            tkv__quant_k4_unpack(b->scales, sm);
            k_unpack(b->qs, b->qh, q);
        } else {
            const tkv__block_q4_K *b = (const tkv__block_q4_K *)p;
            d = tkv__quant_f16_to_f32(b->d);
            dmin = tkv__quant_f16_to_f32(b->dmin);
            tkv__quant_k4_unpack(b->scales, sm);
            k_unpack(b->qs, NULL, q);
        }
        for (int g = 0; g < 8; g++) {
            const float dg = d * (float)sm[g], mg = dmin * (float)sm[8 + g];
            for (int l = 0; l < 32; l++) y[32 * g + l] = dg * (float)q[32 * g + l] - mg;
        }
    }
}

static void dequant_q6_K(const void *src, float *y, size_t n) {
    const tkv__block_q6_K *b = src;
    uint8_t q[256];
    for (size_t i = 0; i < n / TKV__QK_K; i++, y += TKV__QK_K) {
        const float d = tkv__quant_f16_to_f32(b[i].d);
        q6_unpack(&b[i], q);
        for (int e = 0; e < 256; e++) y[e] = d * (float)b[i].scales[e / 16] * (float)(q[e] - 32);
    }
}

static void dequant_q8_K(const void *src, float *y, size_t n) {
    const tkv__block_q8_K *b = src;
    for (size_t i = 0; i < n / TKV__QK_K; i++, y += TKV__QK_K) {
        const float d = b[i].d;
        for (int j = 0; j < 256; j++) y[j] = d * (float)b[i].qs[j];
    }
}

const int8_t tkv__iq4nl_values[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
const int8_t tkv__mxfp4_values[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

/* 32 values d * book[q] from 16 bytes of nibbles (Q4_0's element order). */
static void dequant_book4(const int8_t book[16], const uint8_t qs[16], float d, float *y) {
    for (int j = 0; j < 16; j++) {
        y[j] = d * (float)book[qs[j] & 0x0f];
        y[j + 16] = d * (float)book[qs[j] >> 4];
    }
}

static void dequant_iq4_nl(const void *src, float *y, size_t n) {
    const tkv__block_iq4_nl *b = src;
    for (size_t i = 0; i < n / TKV__QK; i++)
        dequant_book4(tkv__iq4nl_values, b[i].qs, tkv__quant_f16_to_f32(b[i].d), y + 32 * i);
}

static void dequant_mxfp4(const void *src, float *y, size_t n) {
    const tkv__block_mxfp4 *b = src;
    for (size_t i = 0; i < n / TKV__QK; i++)
        dequant_book4(tkv__mxfp4_values, b[i].qs, tkv__e8m0_half(b[i].e), y + 32 * i);
}

static void dequant_iq4_xs(const void *src, float *y, size_t n) {
    const tkv__block_iq4_xs *x = src;
    for (size_t i = 0; i < n / TKV__QK_K; i++) {
        const float d = tkv__quant_f16_to_f32(x[i].d);
        for (int b = 0; b < 8; b++)
            dequant_book4(tkv__iq4nl_values, x[i].qs + 16 * b, d * (float)tkv__iq4_xs_scale(&x[i], b),
                          y + 256 * i + 32 * b);
    }
}

/* The 2 low bits of Q2_K/Q3_K element e (< 256) of a block's qs. */
static inline int k_low2(const uint8_t *qs, int e) {
    return (qs[32 * (e / 128) + e % 32] >> (2 * (e % 128 / 32))) & 3;
}

/* Q3_K element e's quant, low bits minus 4 unless its hmask bit is set. */
static inline int q3_K_quant(const tkv__block_q3_K *x, int e) {
    const int bit = 4 * (e / 128) + e % 128 / 32;
    return k_low2(x->qs, e) - ((x->hmask[e % 32] >> bit) & 1 ? 0 : 4);
}

static void dequant_q2_K(const void *src, float *y, size_t n) {
    const tkv__block_q2_K *x = src;
    for (size_t i = 0; i < n / TKV__QK_K; i++) {
        const float d = tkv__quant_f16_to_f32(x[i].d), dmin = tkv__quant_f16_to_f32(x[i].dmin);
        for (int e = 0; e < 256; e++) {
            const uint8_t sc = x[i].scales[e / 16];
            y[256 * i + e] = d * (float)(sc & 0x0f) * (float)k_low2(x[i].qs, e) - dmin * (float)(sc >> 4);
        }
    }
}

static void dequant_q3_K(const void *src, float *y, size_t n) {
    const tkv__block_q3_K *x = src;
    for (size_t i = 0; i < n / TKV__QK_K; i++) {
        const float d = tkv__quant_f16_to_f32(x[i].d);
        int8_t sc[16];
        tkv__q3_K_scales(x[i].scales, sc);
        for (int e = 0; e < 256; e++) y[256 * i + e] = d * (float)sc[e / 16] * (float)q3_K_quant(&x[i], e);
    }
}

/* Digit k (0..4) of a byte of five base-3 digits. */
static inline int trit(uint8_t b, int k) {
    static const uint8_t pow3[5] = {1, 3, 9, 27, 81};
    return ((uint8_t)(b * pow3[k]) * 3) >> 8;
}

/* Element e's ternary quant (0..2) of a TQ1_0 / TQ2_0 block. */
static inline int tq_quant(tkv_type t, const uint8_t *blk, int e) {
    if (t == TKV_TYPE_TQ2_0) return k_low2(blk, e);
    const tkv__block_tq1_0 *x = (const tkv__block_tq1_0 *)(const void *)blk;
    if (e < 160) return trit(x->qs[e % 32], e / 32);
    if (e < 240) return trit(x->qs[32 + (e - 160) % 16], (e - 160) / 16);
    return trit(x->qh[(e - 240) % 4], (e - 240) / 4);
}

static size_t tq_block_bytes(tkv_type t) {
    return t == TKV_TYPE_TQ2_0 ? sizeof(tkv__block_tq2_0) : sizeof(tkv__block_tq1_0);
}

static float tq_scale(tkv_type t, const uint8_t *blk) {
    uint16_t h;
    memcpy(&h, blk + tq_block_bytes(t) - 2, 2);
    return tkv__quant_f16_to_f32(h);
}

static void dequant_tq(tkv_type t, const void *src, float *y, size_t n) {
    for (size_t i = 0; i < n / TKV__QK_K; i++) {
        const uint8_t *blk = (const uint8_t *)src + i * tq_block_bytes(t);
        const float d = tq_scale(t, blk);
        for (int e = 0; e < 256; e++) y[256 * i + e] = (float)(tq_quant(t, blk, e) - 1) * d;
    }
}

void tkv__quant_dequantize_row(tkv_type type, const void *src, float *y, size_t n) {
    assert(tkv__quant_block_elems(type) && n % tkv__quant_block_elems(type) == 0);
    switch (type) {
    case TKV_TYPE_F32: dequant_f32(src, y, n); break;
    case TKV_TYPE_F16: dequant_f16(src, y, n); break;
    case TKV_TYPE_BF16: dequant_bf16(src, y, n); break;
    case TKV_TYPE_Q8_0: dequant_q8_0(src, y, n); break;
    case TKV_TYPE_Q8_1: dequant_q8_1(src, y, n); break;
    case TKV_TYPE_Q4_0: dequant_q4_0(src, y, n); break;
    case TKV_TYPE_Q4_1: dequant_q4_1(src, y, n); break;
    case TKV_TYPE_Q5_0: dequant_q5_0(src, y, n); break;
    case TKV_TYPE_Q5_1: dequant_q5_1(src, y, n); break;
    case TKV_TYPE_Q4_K: dequant_k(src, y, n, 0); break;
    case TKV_TYPE_Q5_K: dequant_k(src, y, n, 1); break;
    case TKV_TYPE_Q6_K: dequant_q6_K(src, y, n); break;
    case TKV_TYPE_IQ4_NL: dequant_iq4_nl(src, y, n); break;
    case TKV_TYPE_MXFP4: dequant_mxfp4(src, y, n); break;
    case TKV_TYPE_IQ4_XS: dequant_iq4_xs(src, y, n); break;
    case TKV_TYPE_Q2_K: dequant_q2_K(src, y, n); break;
    case TKV_TYPE_Q3_K: dequant_q3_K(src, y, n); break;
    case TKV_TYPE_TQ1_0: dequant_tq(TKV_TYPE_TQ1_0, src, y, n); break;
    case TKV_TYPE_TQ2_0: dequant_tq(TKV_TYPE_TQ2_0, src, y, n); break;
    case TKV_TYPE_IQ2_XXS: tkv__quant_dequantize_iq2_xxs(src, y, n); break;
    case TKV_TYPE_IQ2_XS: tkv__quant_dequantize_iq2_xs(src, y, n); break;
    case TKV_TYPE_IQ2_S: tkv__quant_dequantize_iq2_s(src, y, n); break;
    case TKV_TYPE_IQ1_S: tkv__quant_dequant_iq1_s(src, y, n); break;
    case TKV_TYPE_IQ1_M: tkv__quant_dequant_iq1_m(src, y, n); break;
    case TKV_TYPE_IQ3_XXS: tkv__quant_dequantize_iq3_xxs(src, y, n); break;
    case TKV_TYPE_IQ3_S: tkv__quant_dequantize_iq3_s(src, y, n); break;
    case TKV_TYPE_Q8_K: dequant_q8_K(src, y, n); break;
    default: assert(!"dequantize: unsupported type");
    }
}

/* ---- activation quantization --------------------------------------------- */

/* Round half to even (the current rounding mode, which we never change). */
static int round_even(float v) {
    return (int)lrintf(v);
}

void tkv__quant_quantize_f32(const float *x, void *y, size_t n) {
    memcpy(y, x, n * sizeof(float));
}

void tkv__quant_quantize_f16(const float *x, void *y, size_t n) {
    uint8_t *p = y;
    for (size_t i = 0; i < n; i++) {
        uint16_t h = tkv__quant_f32_to_f16(x[i]);
        memcpy(p + 2 * i, &h, 2);
    }
}

void tkv__quant_quantize_bf16(const float *x, void *y, size_t n) {
    uint8_t *p = y;
    for (size_t i = 0; i < n; i++) {
        uint16_t h = tkv__quant_f32_to_bf16(x[i]);
        memcpy(p + 2 * i, &h, 2);
    }
}

/* One 32-element block as Q8_0 (qs, d); returns sum(qs). */
static int quant_block_q8(const float *x, int8_t *qs, uint16_t *d16, float *d_out) {
    float amax = 0.0f;
    for (int j = 0; j < 32; j++) amax = fmaxf(amax, fabsf(x[j]));
    const float d = amax / 127.0f;
    const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    int sum = 0;
    for (int j = 0; j < 32; j++) {
        qs[j] = (int8_t)round_even(x[j] * id);
        sum += qs[j];
    }
    *d16 = tkv__quant_f32_to_f16(d);
    *d_out = d;
    return sum;
}

void tkv__quant_quantize_q8_0(const float *x, void *y, size_t n) {
    assert(n % TKV__QK == 0);
    tkv__block_q8_0 *b = y;
    for (size_t i = 0; i < n / TKV__QK; i++) {
        int8_t qs[32];
        uint16_t d16;
        float d;
        quant_block_q8(x + TKV__QK * i, qs, &d16, &d);
        b[i].d = d16;
        memcpy(b[i].qs, qs, 32);
    }
}

void tkv__quant_quantize_q8_1(const float *x, void *y, size_t n) {
    assert(n % TKV__QK == 0);
    tkv__block_q8_1 *b = y;
    for (size_t i = 0; i < n / TKV__QK; i++) {
        int8_t qs[32];
        uint16_t d16;
        float d;
        int sum = quant_block_q8(x + TKV__QK * i, qs, &d16, &d);
        b[i].d = d16;
        b[i].s = tkv__quant_f32_to_f16(d * (float)sum);
        memcpy(b[i].qs, qs, 32);
    }
}

void tkv__quant_quantize_q8_K(const float *x, void *y, size_t n) {
    assert(n % TKV__QK_K == 0);
    tkv__block_q8_K *b = y;
    for (size_t i = 0; i < n / TKV__QK_K; i++, x += TKV__QK_K) {
        float amax = 0.0f, max = 0.0f;
        for (int j = 0; j < 256; j++) {
            if (fabsf(x[j]) > amax) {
                amax = fabsf(x[j]);
                max = x[j];
            }
        }
        int8_t qs[256];
        int16_t bsums[16];
        if (amax == 0.0f) {
            b[i].d = 0.0f;
            memset(b[i].qs, 0, sizeof b[i].qs);
            memset(qs, 0, sizeof qs);
        } else {
            const float iscale = -127.0f / max;
            for (int j = 0; j < 256; j++) {
                int v = round_even(iscale * x[j]);
                qs[j] = (int8_t)(v < 127 ? v : 127);
            }
            b[i].d = 1.0f / iscale;
        }
        for (int g = 0; g < 16; g++) {
            int s = 0;
            for (int l = 0; l < 16; l++) s += qs[16 * g + l];
            bsums[g] = (int16_t)s;
        }
        memcpy(b[i].qs, qs, 256);
        memcpy(b[i].bsums, bsums, sizeof bsums);
    }
}

void tkv__quant_quantize_row(tkv_type vdtype, const float *x, void *y, size_t n) {
    switch (vdtype) {
    case TKV_TYPE_F32: tkv__quant_quantize_f32(x, y, n); break;
    case TKV_TYPE_F16: tkv__quant_quantize_f16(x, y, n); break;
    case TKV_TYPE_BF16: tkv__quant_quantize_bf16(x, y, n); break;
    case TKV_TYPE_Q8_0: tkv__quant_quantize_q8_0(x, y, n); break;
    case TKV_TYPE_Q8_1: tkv__quant_quantize_q8_1(x, y, n); break;
    case TKV_TYPE_Q8_K: tkv__quant_quantize_q8_K(x, y, n); break;
    default: assert(!"quantize: not an activation type");
    }
}

/* ---- dot products --------------------------------------------------------- */

/* Element i of a float row of type t (F32, F16 or BF16), as a float. */
static float float_elem(tkv_type t, const uint8_t *row, size_t i) {
    float f;
    uint16_t h;
    if (t == TKV_TYPE_F32) {
        memcpy(&f, row + 4 * i, 4);
        return f;
    }
    memcpy(&h, row + 2 * i, 2);
    return t == TKV_TYPE_F16 ? tkv__quant_f16_to_f32(h) : tkv__quant_bf16_to_f32(h);
}

/* The float rows' oracle: every product exact in double, summed in order. */
static float vec_dot_float(tkv_type t, size_t n, const void *w, const void *a) {
    double s = 0.0;
    for (size_t i = 0; i < n; i++) s += (double)float_elem(t, w, i) * (double)float_elem(t, a, i);
    return (float)s;
}

float tkv__quant_vec_dot_f32(size_t n, const void *w, const void *a) {
    return vec_dot_float(TKV_TYPE_F32, n, w, a);
}

float tkv__quant_vec_dot_f16(size_t n, const void *w, const void *a) {
    return vec_dot_float(TKV_TYPE_F16, n, w, a);
}

float tkv__quant_vec_dot_bf16(size_t n, const void *w, const void *a) {
    return vec_dot_float(TKV_TYPE_BF16, n, w, a);
}

/* Block i of a Q8_0 row's exact integer sum of products with block i of y (Q8_0 activations). */
static int q8_0_block_sum(const tkv__block_q8_0 *x, const tkv__block_q8_0 *y) {
    int sumi = 0;
    for (int j = 0; j < 32; j++) sumi += x->qs[j] * y->qs[j];
    return sumi;
}

float tkv__quant_vec_dot_q8_0(size_t n, const void *w, const void *a) {
    const tkv__block_q8_0 *x = w, *y = a;
    float s = 0.0f;
    /* the block-reduced order every level keeps (compute/quant/quant.h), as Q4_0's */
    for (size_t i = 0; i < n / TKV__QK; i++)
        s = fmaf((float)q8_0_block_sum(&x[i], &y[i]), tkv__quant_f16_to_f32(x[i].d) * tkv__quant_f16_to_f32(y[i].d), s);
    return s;
}

float tkv__quant_vec_dot_q8_0_ref(size_t n, const void *w, const void *a) {
    const tkv__block_q8_0 *x = w, *y = a;
    float s = 0.0f;
    /* the reference's plain C loop: each block's product rounded, then added (ISO C: no fused multiply-add) */
    for (size_t i = 0; i < n / TKV__QK; i++)
        s += (float)q8_0_block_sum(&x[i], &y[i]) * (tkv__quant_f16_to_f32(x[i].d) * tkv__quant_f16_to_f32(y[i].d));
    return s;
}

float tkv__quant_vec_dot_q4_0(size_t n, const void *w, const void *a) {
    const tkv__block_q4_0 *x = w;
    const tkv__block_q8_0 *y = a;
    float s = 0.0f;
    for (size_t i = 0; i < n / TKV__QK; i++) {
        int sumi = 0;
        for (int j = 0; j < 16; j++) {
            sumi += ((x[i].qs[j] & 0x0f) - 8) * y[i].qs[j];
            sumi += ((x[i].qs[j] >> 4) - 8) * y[i].qs[j + 16];
        }
        /* the block-reduced order every level keeps (compute/quant/quant.h): one fused multiply-add per block */
        s = fmaf((float)sumi, tkv__quant_f16_to_f32(x[i].d) * tkv__quant_f16_to_f32(y[i].d), s);
    }
    return s;
}

float tkv__quant_vec_dot_iq4_nl(size_t n, const void *w, const void *a) {
    const tkv__block_iq4_nl *x = w;
    const tkv__block_q8_0 *y = a;
    float s = 0.0f;
    for (size_t i = 0; i < n / TKV__QK; i++) {
        const int sumi = tkv__book4_sum(tkv__iq4nl_values, x[i].qs, y[i].qs);
        /* Q4_0's block-reduced order (compute/quant/quant.h), as the reference's repacked rows */
        s = fmaf((float)sumi, tkv__quant_f16_to_f32(x[i].d) * tkv__quant_f16_to_f32(y[i].d), s);
    }
    return s;
}

/* One IQ4_XS block against y: the exact sum of its sub-block sums times their scales. */
static int32_t iq4xs_block_sum(const tkv__block_iq4_xs *x, const tkv__block_q8_K *y) {
    int32_t sumi = 0;
    for (int b = 0; b < 8; b++) sumi += tkv__iq4_xs_scale(x, b) * tkv__book4_sum(tkv__iq4nl_values, x->qs + 16 * b, y->qs + 32 * b);
    return sumi;
}

/* Block-reduced (compute/quant/quant.h): per block the exact sum, then one fma into the running sum. */
float tkv__quant_vec_dot_iq4_xs(size_t n, const void *w, const void *a) {
    const tkv__block_iq4_xs *x = w;
    const tkv__block_q8_K *y = a;
    float s = 0.0f;
    for (size_t i = 0; i < n / TKV__QK_K; i++)
        s = fmaf((float)iq4xs_block_sum(&x[i], &y[i]), tkv__quant_f16_to_f32(x[i].d) * y[i].d, s);
    return s;
}

float tkv__quant_vec_dot_iq4_xs_lanes(size_t n, const void *w, const void *a) {
    const tkv__block_iq4_xs *x = w;
    const tkv__block_q8_K *y = a;
    float s = 0.0f;
    for (size_t i = 0; i < n / TKV__QK_K; i++)
        s += (float)iq4xs_block_sum(&x[i], &y[i]) * (tkv__quant_f16_to_f32(x[i].d) * y[i].d);
    return s;
}

/* One Q2_K block against y: the exact sum of its sub-block sums times their scales (*sumi) and of its mins times
   y's sums of 16 (*summ). */
static void q2k_block_sums(const tkv__block_q2_K *x, const tkv__block_q8_K *y, int32_t *sumi, int32_t *summ) {
    *sumi = 0, *summ = 0;
    for (int e = 0; e < 256; e++) *sumi += (x->scales[e / 16] & 0x0f) * k_low2(x->qs, e) * y->qs[e];
    for (int b = 0; b < 16; b++) *summ += (x->scales[b] >> 4) * y->bsums[b];
}

/* Block-reduced, as Q4_K (compute/quant/quant.h): the reference's x86 order over its repacked Q2_K rows. */
float tkv__quant_vec_dot_q2_K(size_t n, const void *w, const void *a) {
    const tkv__block_q2_K *x = w;
    const tkv__block_q8_K *y = a;
    float s = 0.0f, m = 0.0f;
    for (size_t i = 0; i < n / TKV__QK_K; i++) {
        int32_t sumi, summ;
        q2k_block_sums(&x[i], &y[i], &sumi, &summ);
        s = fmaf((float)sumi, tkv__quant_f16_to_f32(x[i].d) * y[i].d, s);
        m = fmaf((float)summ, tkv__quant_f16_to_f32(x[i].dmin) * y[i].d, m);
    }
    return s - m;
}

float tkv__quant_vec_dot_q2_K_lanes(size_t n, const void *w, const void *a) {
    const tkv__block_q2_K *x = w;
    const tkv__block_q8_K *y = a;
    float s = 0.0f;
    for (size_t i = 0; i < n / TKV__QK_K; i++) {
        int32_t sumi, summ;
        q2k_block_sums(&x[i], &y[i], &sumi, &summ);
        const float d = y[i].d * tkv__quant_f16_to_f32(x[i].d), dmin = y[i].d * tkv__quant_f16_to_f32(x[i].dmin);
        s += d * (float)sumi - dmin * (float)summ;
    }
    return s;
}

/* One Q3_K block against y: the exact sum of its sub-block sums times their scales. */
static int32_t q3k_block_sum(const tkv__block_q3_K *x, const tkv__block_q8_K *y) {
    int8_t sc[16];
    tkv__q3_K_scales(x->scales, sc);
    int32_t sumi = 0;
    for (int e = 0; e < 256; e++) sumi += sc[e / 16] * q3_K_quant(x, e) * y->qs[e];
    return sumi;
}

/* Block-reduced (compute/quant/quant.h): per block the exact sum, then one fma into the running sum. */
float tkv__quant_vec_dot_q3_K(size_t n, const void *w, const void *a) {
    const tkv__block_q3_K *x = w;
    const tkv__block_q8_K *y = a;
    float s = 0.0f;
    for (size_t i = 0; i < n / TKV__QK_K; i++)
        s = fmaf((float)q3k_block_sum(&x[i], &y[i]), tkv__quant_f16_to_f32(x[i].d) * y[i].d, s);
    return s;
}

float tkv__quant_vec_dot_q3_K_lanes(size_t n, const void *w, const void *a) {
    const tkv__block_q3_K *x = w;
    const tkv__block_q8_K *y = a;
    float s = 0.0f;
    for (size_t i = 0; i < n / TKV__QK_K; i++)
        s += y[i].d * tkv__quant_f16_to_f32(x[i].d) * (float)q3k_block_sum(&x[i], &y[i]);
    return s;
}

float tkv__quant_vec_dot_mxfp4(size_t n, const void *w, const void *a) {
    const tkv__block_mxfp4 *x = w;
    const tkv__block_q8_0 *y = a;
    float s = 0.0f;
    for (size_t i = 0; i < n / TKV__QK; i++) {
        const int sumi = tkv__book4_sum(tkv__mxfp4_values, x[i].qs, y[i].qs);
        /* the block-reduced order, as the reference's repacked rows (compute/quant/quant.h) */
        s = fmaf((float)sumi, tkv__e8m0_half(x[i].e) * tkv__quant_f16_to_f32(y[i].d), s);
    }
    return s;
}

static float vec_dot_tq(tkv_type t, size_t n, const void *w, const void *a) {
    const tkv__block_q8_K *y = a;
    float s = 0.0f;
    for (size_t i = 0; i < n / TKV__QK_K; i++) {
        const uint8_t *blk = (const uint8_t *)w + i * tq_block_bytes(t);
        int sumi = 0;
        for (int e = 0; e < 256; e++) sumi += (tq_quant(t, blk, e) - 1) * y[i].qs[e];
        s += (float)sumi * (y[i].d * tq_scale(t, blk));
    }
    return s;
}

float tkv__quant_vec_dot_tq1_0(size_t n, const void *w, const void *a) { return vec_dot_tq(TKV_TYPE_TQ1_0, n, w, a); }

float tkv__quant_vec_dot_tq2_0(size_t n, const void *w, const void *a) { return vec_dot_tq(TKV_TYPE_TQ2_0, n, w, a); }

float tkv__quant_vec_dot_q4_1(size_t n, const void *w, const void *a) {
    const tkv__block_q4_1 *x = w;
    const tkv__block_q8_1 *y = a;
    float s = 0.0f;
    for (size_t i = 0; i < n / TKV__QK; i++) {
        int sumi = 0;
        for (int j = 0; j < 16; j++) {
            sumi += (x[i].qs[j] & 0x0f) * y[i].qs[j];
            sumi += (x[i].qs[j] >> 4) * y[i].qs[j + 16];
        }
        s += (float)sumi * (tkv__quant_f16_to_f32(x[i].d) * tkv__quant_f16_to_f32(y[i].d)) +
             tkv__quant_f16_to_f32(x[i].m) * tkv__quant_f16_to_f32(y[i].s);
    }
    return s;
}

float tkv__quant_vec_dot_q5_0(size_t n, const void *w, const void *a) {
    const tkv__block_q5_0 *x = w;
    const tkv__block_q8_0 *y = a;
    float s = 0.0f;
    int q[32];
    for (size_t i = 0; i < n / TKV__QK; i++) {
        q5_unpack(x[i].qh, x[i].qs, q);
        int sumi = 0;
        for (int j = 0; j < 32; j++) sumi += (q[j] - 16) * y[i].qs[j];
        s += (float)sumi * (tkv__quant_f16_to_f32(x[i].d) * tkv__quant_f16_to_f32(y[i].d));
    }
    return s;
}

float tkv__quant_vec_dot_q5_1(size_t n, const void *w, const void *a) {
    const tkv__block_q5_1 *x = w;
    const tkv__block_q8_1 *y = a;
    float s = 0.0f;
    int q[32];
    for (size_t i = 0; i < n / TKV__QK; i++) {
        q5_unpack(x[i].qh, x[i].qs, q);
        int sumi = 0;
        for (int j = 0; j < 32; j++) sumi += q[j] * y[i].qs[j];
        s += (float)sumi * (tkv__quant_f16_to_f32(x[i].d) * tkv__quant_f16_to_f32(y[i].d)) +
             tkv__quant_f16_to_f32(x[i].m) * tkv__quant_f16_to_f32(y[i].s);
    }
    return s;
}

/* One Q4_K (five: Q5_K) block p against y: the exact sum of its group sums times their scales (*sumi) and of
   its mins times y's group sums (*summ). d, dmin and the scales sit at the same place in both types. */
static void k45_block_sums(const uint8_t *p, const tkv__block_q8_K *y, int five, int32_t *sumi, int32_t *summ) {
    uint8_t q[256], sm[16];
    tkv__quant_k4_unpack(((const tkv__block_q4_K *)p)->scales, sm);
    if (five) k_unpack(((const tkv__block_q5_K *)p)->qs, ((const tkv__block_q5_K *)p)->qh, q);
    else k_unpack(((const tkv__block_q4_K *)p)->qs, NULL, q);
    *sumi = 0, *summ = 0;
    for (int g = 0; g < 8; g++) {
        int32_t sg = 0;
        for (int l = 0; l < 32; l++) sg += q[32 * g + l] * y->qs[32 * g + l];
        *sumi += sm[g] * sg;
        *summ += sm[8 + g] * (y->bsums[2 * g] + y->bsums[2 * g + 1]);
    }
}

/* Q5_K's lane-wise formula of compute/quant/quant.h (the reference's x86 vec_dot; five = 1 only). */
static float dot_k(size_t n, const void *w, const void *a, int five) {
    const uint8_t *p = w;
    const tkv__block_q8_K *y = a;
    const size_t bsize = five ? sizeof(tkv__block_q5_K) : sizeof(tkv__block_q4_K);
    float s = 0.0f;
    for (size_t i = 0; i < n / TKV__QK_K; i++, p += bsize) {
        const tkv__block_q4_K *b = (const tkv__block_q4_K *)p;
        int32_t sumi, summ;
        k45_block_sums(p, &y[i], five, &sumi, &summ);
        s += (y[i].d * tkv__quant_f16_to_f32(b->d)) * (float)sumi - (y[i].d * tkv__quant_f16_to_f32(b->dmin)) * (float)summ;
    }
    return s;
}

/* Q4_K and Q5_K in the block-reduced order of compute/quant/quant.h (the reference's repacked rows): per
   block the exact sums, then one fma into the scales' sum and one into the mins'. */
static float dot_k_reduced(size_t n, const void *w, const void *a, int five) {
    const uint8_t *p = w;
    const tkv__block_q8_K *y = a;
    const size_t bsize = five ? sizeof(tkv__block_q5_K) : sizeof(tkv__block_q4_K);
    float s = 0.0f, m = 0.0f;
    for (size_t i = 0; i < n / TKV__QK_K; i++, p += bsize) {
        const tkv__block_q4_K *b = (const tkv__block_q4_K *)p;
        int32_t sumi, summ;
        k45_block_sums(p, &y[i], five, &sumi, &summ);
        s = fmaf((float)sumi, tkv__quant_f16_to_f32(b->d) * y[i].d, s);
        m = fmaf((float)summ, tkv__quant_f16_to_f32(b->dmin) * y[i].d, m);
    }
    return s - m;
}

float tkv__quant_vec_dot_q4_K(size_t n, const void *w, const void *a) {
    return dot_k_reduced(n, w, a, 0);
}

float tkv__quant_vec_dot_q5_K(size_t n, const void *w, const void *a) {
    return dot_k_reduced(n, w, a, 1);
}

float tkv__quant_vec_dot_q5_K_lanes(size_t n, const void *w, const void *a) {
    return dot_k(n, w, a, 1);
}

/* One Q6_K block against y: the exact sum of its sub-block sums (of q - 32) times their scales. */
static int32_t q6k_block_sum(const tkv__block_q6_K *x, const tkv__block_q8_K *y) {
    uint8_t q[256];
    q6_unpack(x, q);
    int32_t sumi = 0;
    for (int g = 0; g < 16; g++) {
        int32_t sg = 0;
        for (int l = 0; l < 16; l++) sg += (q[16 * g + l] - 32) * y->qs[16 * g + l];
        sumi += x->scales[g] * sg;
    }
    return sumi;
}

/* Block-reduced (compute/quant/quant.h): per block the exact sum, then one fma into the running sum. */
float tkv__quant_vec_dot_q6_K(size_t n, const void *w, const void *a) {
    const tkv__block_q6_K *x = w;
    const tkv__block_q8_K *y = a;
    float s = 0.0f;
    for (size_t i = 0; i < n / TKV__QK_K; i++)
        s = fmaf((float)q6k_block_sum(&x[i], &y[i]), tkv__quant_f16_to_f32(x[i].d) * y[i].d, s);
    return s;
}

float tkv__quant_vec_dot_q6_K_lanes(size_t n, const void *w, const void *a) {
    const tkv__block_q6_K *x = w;
    const tkv__block_q8_K *y = a;
    float s = 0.0f;
    for (size_t i = 0; i < n / TKV__QK_K; i++)
        s += (y[i].d * tkv__quant_f16_to_f32(x[i].d)) * (float)q6k_block_sum(&x[i], &y[i]);
    return s;
}

float tkv__quant_vec_dot(tkv_type wtype, size_t n, const void *w, const void *a) {
    switch (wtype) {
    case TKV_TYPE_F32: return tkv__quant_vec_dot_f32(n, w, a);
    case TKV_TYPE_F16: return tkv__quant_vec_dot_f16(n, w, a);
    case TKV_TYPE_BF16: return tkv__quant_vec_dot_bf16(n, w, a);
    case TKV_TYPE_Q8_0: return tkv__quant_vec_dot_q8_0(n, w, a);
    case TKV_TYPE_Q4_0: return tkv__quant_vec_dot_q4_0(n, w, a);
    case TKV_TYPE_Q4_1: return tkv__quant_vec_dot_q4_1(n, w, a);
    case TKV_TYPE_Q5_0: return tkv__quant_vec_dot_q5_0(n, w, a);
    case TKV_TYPE_Q5_1: return tkv__quant_vec_dot_q5_1(n, w, a);
    case TKV_TYPE_Q4_K: return tkv__quant_vec_dot_q4_K(n, w, a);
    case TKV_TYPE_Q5_K: return tkv__quant_vec_dot_q5_K(n, w, a);
    case TKV_TYPE_Q6_K: return tkv__quant_vec_dot_q6_K(n, w, a);
    case TKV_TYPE_IQ4_NL: return tkv__quant_vec_dot_iq4_nl(n, w, a);
    case TKV_TYPE_MXFP4: return tkv__quant_vec_dot_mxfp4(n, w, a);
    case TKV_TYPE_IQ4_XS: return tkv__quant_vec_dot_iq4_xs(n, w, a);
    case TKV_TYPE_Q2_K: return tkv__quant_vec_dot_q2_K(n, w, a);
    case TKV_TYPE_Q3_K: return tkv__quant_vec_dot_q3_K(n, w, a);
    case TKV_TYPE_TQ1_0: return tkv__quant_vec_dot_tq1_0(n, w, a);
    case TKV_TYPE_TQ2_0: return tkv__quant_vec_dot_tq2_0(n, w, a);
    case TKV_TYPE_IQ2_XXS: return tkv__quant_vec_dot_iq2_xxs(n, w, a);
    case TKV_TYPE_IQ2_XS: return tkv__quant_vec_dot_iq2_xs(n, w, a);
    case TKV_TYPE_IQ2_S: return tkv__quant_vec_dot_iq2_s(n, w, a);
    case TKV_TYPE_IQ1_S: return tkv__quant_vec_dot_iq1_s(n, w, a);
    case TKV_TYPE_IQ1_M: return tkv__quant_vec_dot_iq1_m(n, w, a);
    case TKV_TYPE_IQ3_XXS: return tkv__quant_vec_dot_iq3_xxs(n, w, a);
    case TKV_TYPE_IQ3_S: return tkv__quant_vec_dot_iq3_s(n, w, a);
    default: assert(!"vec_dot: unsupported type"); return 0.0f;
    }
}
