/*
 * test_shortconv.c — one token's gated short convolution (model/shortconv.c)
 * against a float64 oracle of the formula: y = C * sum_k w[k] (B * x)_{t-2+k},
 * zeros before position 0, the earlier rows read from the K rows of the
 * sequence's cells (scattered, in a cache row wider than n_embd) of an F32 and
 * an F16 cache.
 */
#include "testutil.h"

#include "compute/quant/quant.h"
#include "model/shortconv.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { E = 64, W = E + 32, TAPS = 3, T = 7, CELLS = 9, LAYERS = 2 };

static uint32_t seed = 12345;
static float rnd(void) { /* uniform in [-1, 1) */
    seed = seed * 1664525u + 1013904223u;
    return (float)(seed >> 8) / (float)(1u << 23) - 1.0f;
}

static void check_type(tkv_type type, double tol) {
    tkv__kvrows kv = {.type_k = type, .type_v = type, .n_cells = CELLS, .n_layer = LAYERS, .n_embd_kv = W};
    kv.row_size_k = kv.row_size_v = tkv__quant_row_size(type, W);
    kv.k = calloc((size_t)LAYERS * CELLS, kv.row_size_k);
    float bcx[T][3 * E], w[E * TAPS], y[E], row[W];
    uint32_t cells[T];
    for (size_t i = 0; i < E * TAPS; i++) w[i] = rnd();
    for (int t = 0; t < T; t++) {
        cells[t] = (uint32_t)((5 * t + 3) % CELLS); /* not in position order */
        for (size_t i = 0; i < 3 * E; i++) bcx[t][i] = 2 * rnd();
    }
    for (int t = 0; t < T; t++) {
        /* earlier tokens' rows are in their cells, as the forward pass stores them */
        float bx[W] = {0};
        for (size_t i = 0; i < E; i++) bx[i] = bcx[t][i] * bcx[t][2 * E + i];
        void *dst = tkv__kvrows_k(&kv, 1, cells[t]);
        if (type == TKV_TYPE_F32) memcpy(dst, bx, sizeof bx);
        else for (size_t i = 0; i < W; i++) ((uint16_t *)dst)[i] = tkv__quant_f32_to_f16(bx[i]);
    }
    for (int t = 0; t < T; t++) {
        tkv__shortconv_mix(&kv, 1, cells, t, bcx[t], w, TAPS, E, y, row);
        for (size_t c = 0; c < E; c++) {
            double want = 0, mag = 0;
            for (int k = 0; k < TAPS; k++) {
                const int p = t - (TAPS - 1) + k;
                if (p < 0) continue;
                const double term = (double)w[c * TAPS + k] * bcx[p][c] * bcx[p][2 * E + c];
                want += term, mag += fabs(term);
            }
            const double C = bcx[t][E + c];
            want *= C, mag *= fabs(C);
            if (!(fabs(y[c] - want) <= tol * (mag + 1e-30)))
                fail_msg("%s token %d channel %zu: %.9g, oracle %.9g", tkv_type_name(type), t, c, (double)y[c], want);
        }
    }
    free(kv.k);
}

static void test_f32_cache(void **state) {
    (void)state;
    check_type(TKV_TYPE_F32, 1e-6);
}

/* F16 rows round each earlier B*x to 11 bits */
static void test_f16_cache(void **state) {
    (void)state;
    check_type(TKV_TYPE_F16, 1e-3);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_f32_cache),
        cmocka_unit_test(test_f16_cache),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
