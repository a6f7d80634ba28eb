/*
 * compute/quant/iq3.c — scalar reference code of the 3-bit grid types IQ3_XXS and
 * IQ3_S (layouts in compute/quant/iq.h): dequantization and the dot product with
 * Q8_K activations, the oracles of the SIMD twins.
 *
 * Both first decode a super-block into signed integer weights (grid byte
 * times sign: |q| <= 62, so int8) and the eight 4-bit scale fields; the
 * float work and the integer sums then read those, one element at a time.
 */
#include "quant.h"
#include "grids.h"
#include "iq.h"

#include <string.h>

/* Byte k (< 4) of a grid entry: the entry's element k. */
static inline int grid_byte(uint32_t entry, int k) {
    return (int)((entry >> (8 * k)) & 0xff);
}

/* q[e] = signed integer weight of element e; ls[b] = sub-block b's scale field. */
static void decode_iq3_xxs(const tkv__block_iq3_xxs *x, int8_t q[256], int ls[8]) {
    for (int b = 0; b < 8; b++) {
        uint32_t word; /* little-endian, at any alignment */
        memcpy(&word, x->qs + 64 + 4 * b, 4);
        ls[b] = (int)(word >> 28);
        for (int h = 0; h < 4; h++) {
            /* 7 stored sign bits per 8 elements; the table restores the 8th */
            const uint8_t signs = tkv__iq_signs[(word >> (7 * h)) & 127];
            for (int e = 0; e < 8; e++) {
                const int g = 2 * h + e / 4;
                const int v = grid_byte(tkv__iq3xxs_grid[x->qs[8 * b + g]], e % 4);
                q[32 * b + 8 * h + e] = (int8_t)((signs >> e) & 1 ? -v : v);
            }
        }
    }
}

static void decode_iq3_s(const tkv__block_iq3_s *x, int8_t q[256], int ls[8]) {
    for (int b = 0; b < 8; b++) {
        ls[b] = (x->scales[b / 2] >> (4 * (b % 2))) & 0x0f;
        for (int g = 0; g < 8; g++) {
            const int idx = x->qs[8 * b + g] | ((x->qh[b] >> g) & 1) << 8;
            const uint8_t signs = x->signs[4 * b + g / 2];
            for (int k = 0; k < 4; k++) {
                const int v = grid_byte(tkv__iq3s_grid[idx], k);
                q[32 * b + 4 * g + k] = (int8_t)((signs >> (4 * (g % 2) + k)) & 1 ? -v : v);
            }
        }
    }
}

/* ---- dequantization -------------------------------------------------------- */

/*
 * The reference rounds d (0.5 + ls) first, then halves it (exact), then
 * multiplies by the grid value; the sign flip is exact, so d_b * (+-v)
 * gives its bits.
 */
void tkv__quant_dequantize_iq3_xxs(const void *src, float *y, size_t n) {
    const tkv__block_iq3_xxs *x = src;
    int8_t q[256];
    int ls[8];
    for (size_t i = 0; i < n / TKV__QK_K; i++) {
        tkv__block_iq3_xxs blk;
        memcpy(&blk, &x[i], sizeof blk);
        decode_iq3_xxs(&blk, q, ls);
        const float d = tkv__quant_f16_to_f32(blk.d);
        for (int b = 0; b < 8; b++) {
            const float db = d * (0.5f + (float)ls[b]) * 0.5f;
            for (int e = 0; e < 32; e++) y[256 * i + 32 * b + e] = db * (float)q[32 * b + e];
        }
    }
}

void tkv__quant_dequantize_iq3_s(const void *src, float *y, size_t n) {
    const tkv__block_iq3_s *x = src;
    int8_t q[256];
    int ls[8];
    for (size_t i = 0; i < n / TKV__QK_K; i++) {
        tkv__block_iq3_s blk;
        memcpy(&blk, &x[i], sizeof blk);
        decode_iq3_s(&blk, q, ls);
        const float d = tkv__quant_f16_to_f32(blk.d);
        for (int b = 0; b < 8; b++) {
            const float db = d * (float)(1 + 2 * ls[b]);
            for (int e = 0; e < 32; e++) y[256 * i + 32 * b + e] = db * (float)q[32 * b + e];
        }
    }
}

/* ---- dot products with Q8_K -------------------------------------------------- */

/* sum_b (2 ls_b + 1) * sum_e q_e a_e over one super-block: exact in int32
   (|term| <= 31 * 32 * 62 * 127 per sub-block). */
static int32_t block_sum(const int8_t q[256], const int ls[8], const int8_t *a) {
    int32_t sum = 0;
    for (int b = 0; b < 8; b++) {
        int32_t sb = 0;
        for (int e = 0; e < 32; e++) sb += q[32 * b + e] * a[32 * b + e];
        sum += (2 * ls[b] + 1) * sb;
    }
    return sum;
}

/* IQ3_XXS's 0.25 (its scale is (2 ls + 1) / 4) comes last, on the whole sum,
   as in the reference. */
float tkv__quant_vec_dot_iq3_xxs(size_t n, const void *w, const void *a) {
    const tkv__block_iq3_xxs *x = w;
    const tkv__block_q8_K *y = a;
    int8_t q[256];
    int ls[8];
    float s = 0.0f;
    for (size_t i = 0; i < n / TKV__QK_K; i++) {
        tkv__block_iq3_xxs blk;
        memcpy(&blk, &x[i], sizeof blk);
        decode_iq3_xxs(&blk, q, ls);
        const float d = tkv__quant_f16_to_f32(blk.d) * y[i].d;
        s += d * (float)block_sum(q, ls, y[i].qs);
    }
    return 0.25f * s;
}

float tkv__quant_vec_dot_iq3_s(size_t n, const void *w, const void *a) {
    const tkv__block_iq3_s *x = w;
    const tkv__block_q8_K *y = a;
    int8_t q[256];
    int ls[8];
    float s = 0.0f;
    for (size_t i = 0; i < n / TKV__QK_K; i++) {
        tkv__block_iq3_s blk;
        memcpy(&blk, &x[i], sizeof blk);
        decode_iq3_s(&blk, q, ls);
        const float d = tkv__quant_f16_to_f32(blk.d) * y[i].d;
        s += d * (float)block_sum(q, ls, y[i].qs);
    }
    return s;
}
