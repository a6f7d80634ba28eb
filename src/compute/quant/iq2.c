/*
 * compute/quant/iq2.c — scalar reference code of IQ2_XXS, IQ2_XS and IQ2_S (layouts
 * in compute/quant/iq.h): dequantization and the dot product with Q8_K activations.
 *
 * The three types differ only in where a group's codebook index, sign byte
 * and scale sit; each has one decoder of a group, and the dequantization and
 * the dot product are written once over it. These are the oracles of the
 * SIMD kernels, so they go one element at a time.
 */
#include "quant.h"
#include "grids.h"
#include "iq.h"

#include <assert.h>

/* One group of 8: magnitudes (byte j: element j), sign bits, 4-bit scale. */
typedef struct iq2_group {
    uint64_t grid;
    uint8_t signs;
    int ls;
} iq2_group;

typedef iq2_group (*iq2_decoder)(const uint8_t *blk, int g);

/* Blocks are read through byte pointers and memcpy: they may sit at any
   address, and packed members must not be addressed as wider types. */
static uint16_t rd16(const uint8_t *p) {
    uint16_t v;
    memcpy(&v, p, 2);
    return v;
}

static iq2_group group_xxs(const uint8_t *blk, int g) {
    const uint8_t *sub = blk + offsetof(tkv__block_iq2_xxs, qs) + 8 * (g / 4);
    uint32_t aux;
    memcpy(&aux, sub + 4, 4);
    const int l = g % 4;
    return (iq2_group){tkv__iq2xxs_grid[sub[l]], tkv__iq_signs[(aux >> 7 * l) & 127], (int)(aux >> 28)};
}

static iq2_group group_xs(const uint8_t *blk, int g) {
    const uint16_t q = rd16(blk + offsetof(tkv__block_iq2_xs, qs) + 2 * g);
    const uint8_t sc = blk[offsetof(tkv__block_iq2_xs, scales) + g / 4];
    return (iq2_group){tkv__iq2xs_grid[q & 511], tkv__iq_signs[q >> 9], g % 4 < 2 ? sc & 15 : sc >> 4};
}

static iq2_group group_s(const uint8_t *blk, int g) {
    const uint8_t *qs = blk + offsetof(tkv__block_iq2_s, qs);
    const uint8_t qh = blk[offsetof(tkv__block_iq2_s, qh) + g / 4];
    const uint8_t sc = blk[offsetof(tkv__block_iq2_s, scales) + g / 4];
    const int idx = qs[g] | ((qh >> 2 * (g % 4)) & 3) << 8;
    return (iq2_group){tkv__iq2s_grid[idx], qs[32 + g], g % 4 < 2 ? sc & 15 : sc >> 4};
}

static int elem(iq2_group q, int j) {
    const int m = (int)(q.grid >> 8 * j & 0xff);
    return q.signs >> j & 1 ? -m : m;
}

/* The reference's rounding: d (ls + 1/2), then the exact / 4, then times the element. */
static void dequant(iq2_decoder dec, size_t bsz, const void *src, float *y, size_t n) {
    assert(n % TKV__QK_K == 0);
    for (size_t i = 0; i < n / TKV__QK_K; i++) {
        const uint8_t *blk = (const uint8_t *)src + i * bsz;
        const float d = tkv__quant_f16_to_f32(rd16(blk));
        for (int g = 0; g < 32; g++) {
            const iq2_group q = dec(blk, g);
            const float dl = d * (0.5f + (float)q.ls) * 0.25f;
            for (int j = 0; j < 8; j++) y[256 * i + 8 * g + j] = dl * (float)elem(q, j);
        }
    }
}

/* 2 ls + 1 keeps the half of (ls + 1/2) in integers; the 1/8 = 1/2 * 1/4 comes once at the end. */
static float vec_dot(iq2_decoder dec, size_t bsz, size_t n, const void *w, const void *a) {
    assert(n % TKV__QK_K == 0);
    const tkv__block_q8_K *y = a;
    float s = 0.0f;
    for (size_t i = 0; i < n / TKV__QK_K; i++) {
        const uint8_t *blk = (const uint8_t *)w + i * bsz;
        int sumi = 0;
        for (int g = 0; g < 32; g++) {
            const iq2_group q = dec(blk, g);
            int sg = 0;
            for (int j = 0; j < 8; j++) sg += elem(q, j) * y[i].qs[8 * g + j];
            sumi += (2 * q.ls + 1) * sg;
        }
        s += tkv__quant_f16_to_f32(rd16(blk)) * y[i].d * (float)sumi;
    }
    return 0.125f * s;
}

void tkv__quant_dequantize_iq2_xxs(const void *src, float *y, size_t n) {
    dequant(group_xxs, sizeof(tkv__block_iq2_xxs), src, y, n);
}

void tkv__quant_dequantize_iq2_xs(const void *src, float *y, size_t n) {
    dequant(group_xs, sizeof(tkv__block_iq2_xs), src, y, n);
}

void tkv__quant_dequantize_iq2_s(const void *src, float *y, size_t n) {
    dequant(group_s, sizeof(tkv__block_iq2_s), src, y, n);
}

float tkv__quant_vec_dot_iq2_xxs(size_t n, const void *w, const void *a) {
    return vec_dot(group_xxs, sizeof(tkv__block_iq2_xxs), n, w, a);
}

float tkv__quant_vec_dot_iq2_xs(size_t n, const void *w, const void *a) {
    return vec_dot(group_xs, sizeof(tkv__block_iq2_xs), n, w, a);
}

float tkv__quant_vec_dot_iq2_s(size_t n, const void *w, const void *a) {
    return vec_dot(group_s, sizeof(tkv__block_iq2_s), n, w, a);
}
