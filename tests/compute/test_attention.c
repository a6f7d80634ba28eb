/*
 * test_attention.c — the F16 attention primitives: the AVX2 versions give
 * the same bits as the scalar ones (same operations, same order), and the
 * dot product is within float rounding of an exact double-precision sum.
 */
#include "testutil.h"

#include "compute/attention.h"
#include "compute/kernels.h"
#include "compute/quant/quant.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static void fill(uint16_t *x, size_t n, unsigned seed) {
    srand(seed);
    for (size_t i = 0; i < n; i++) x[i] = tkv__quant_f32_to_f16((float)(rand() % 2001 - 1000) / 250.0f);
}

static void test_simd_equals_scalar(void **state) {
    (void)state;
    const tkv__attn_ops *sc = tkv__attn_scalar(), *best = tkv__attn_get();
    if (tkv__kernel_level_active() < TKV__KERNEL_AVX2) TU_SKIP();
    assert_ptr_not_equal(sc, best);
    static const size_t sizes[] = {1, 7, 8, 64, 65, 100, 128, 192, 256};
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        size_t n = sizes[s];
        uint16_t q[256], k[256], a1[256], a2[256];
        fill(q, n, 1 + (unsigned)s), fill(k, n, 100 + (unsigned)s), fill(a1, n, 200 + (unsigned)s);
        memcpy(a2, a1, sizeof a1);
        float d1 = sc->dot(q, k, n), d2 = best->dot(q, k, n);
        assert_memory_equal(&d1, &d2, sizeof d1);
        double exact = 0;
        for (size_t i = 0; i < n; i++) exact += (double)tkv__quant_f16_to_f32(q[i]) * tkv__quant_f16_to_f32(k[i]);
        assert_true(fabs(d1 - exact) <= 1e-5 * (1 + fabs(exact)) * (double)n);
        sc->mad(a1, k, 0.37f, n), best->mad(a2, k, 0.37f, n);
        assert_memory_equal(a1, a2, n * sizeof *a1);
        sc->scale(a1, 0.61f, n), best->scale(a2, 0.61f, n);
        assert_memory_equal(a1, a2, n * sizeof *a1);
        /* mad: f16(v * w + acc), with one rounding of the fused product */
        uint16_t a3[256];
        fill(a3, n, 300 + (unsigned)s);
        memcpy(a1, a3, sizeof a3);
        sc->mad(a1, q, 1.5f, n);
        for (size_t i = 0; i < n; i++) {
            double want = (double)tkv__quant_f16_to_f32(q[i]) * 1.5 + tkv__quant_f16_to_f32(a3[i]);
            assert_int_equal(a1[i], tkv__quant_f32_to_f16((float)want)); /* exact in double, then one rounding */
        }
    }
}

/* The float forms (long batches): a dot product within rounding of the
   exact one (the lanes sum in another order than the scalar loop), and the
   weighted sum of V rows equal to the scalar one within one rounding each. */
static void test_float_forms(void **state) {
    (void)state;
    const tkv__attn_ops *sc = tkv__attn_scalar(), *best = tkv__attn_get();
    if (tkv__kernel_level_active() < TKV__KERNEL_AVX2) TU_SKIP();
    static const size_t sizes[] = {1, 7, 8, 15, 16, 17, 64, 80, 100, 128, 256};
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        const size_t n = sizes[s];
        uint16_t k[256];
        float q[256], a1[256], a2[256];
        fill(k, n, 400 + (unsigned)s);
        srand(500 + (unsigned)s);
        for (size_t i = 0; i < n; i++) q[i] = (float)(rand() % 2001 - 1000) / 250.0f, a1[i] = a2[i] = (float)(rand() % 101) / 7.0f;
        double exact = 0, mag = 0;
        for (size_t i = 0; i < n; i++) {
            exact += (double)q[i] * tkv__quant_f16_to_f32(k[i]);
            mag += fabs((double)q[i] * tkv__quant_f16_to_f32(k[i]));
        }
        const double d1 = sc->dot_f32(q, k, n), d2 = best->dot_f32(q, k, n);
        assert_true(fabs(d1 - exact) <= 1e-6 * mag * (double)n + 1e-6);
        assert_true(fabs(d2 - exact) <= 1e-6 * mag * (double)n + 1e-6);
        sc->mad_f32(a1, k, 0.37f, n), best->mad_f32(a2, k, 0.37f, n);
        for (size_t i = 0; i < n; i++) assert_true(fabsf(a1[i] - a2[i]) <= 1e-6f * (1 + fabsf(a1[i])));
    }
}

/* 16 cells at a time: the rows widened to float exactly, cell c's score in
   lane c (each row its own data), and the weighted sum of up to 16 rows,
   against exact double sums; the forms that read the F16 rows directly give
   the same bits as widening first. */
static void test_sixteen_rows(void **state) {
    (void)state;
    const tkv__attn_ops *best = tkv__attn_get();
    if (!best->scores16) TU_SKIP();
    static const size_t sizes[] = {16, 32, 64, 80, 128, 256};
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        const size_t n = sizes[s];
        uint16_t k[16][256];
        const uint16_t *rows[16];
        float q[256], out[16], acc[256], want[256], wide[16 * 256];
        for (int c = 0; c < 16; c++) fill(k[c], n, 900 + (unsigned)(16 * s) + (unsigned)c), rows[c] = k[c];
        srand(77 + (unsigned)s);
        for (size_t i = 0; i < n; i++) q[i] = (float)(rand() % 2001 - 1000) / 250.0f;
        for (int c = 0; c < 16; c++) memset(wide + (size_t)c * n, 0xff, n * sizeof(float)); /* NaN unless written */
        best->widen16(rows, 16, n, wide);
        for (int c = 0; c < 16; c++)
            for (size_t i = 0; i < n; i++)
                if (memcmp(&wide[(size_t)c * n + i], &(float){tkv__quant_f16_to_f32(k[c][i])}, 4) != 0)
                    fail_msg("n %zu row %d element %zu: widened %.9g", n, c, i, wide[(size_t)c * n + i]);
        best->scores16(q, wide, n, 0.125f, out);
        if (best->scores16_rows) { /* straight from the F16 rows: the same bits */
            float direct[16];
            best->scores16_rows(q, rows, n, 0.125f, direct);
            assert_memory_equal(direct, out, sizeof out);
        }
        for (int c = 0; c < 16; c++) {
            double exact = 0, mag = 0;
            for (size_t i = 0; i < n; i++) {
                exact += (double)q[i] * tkv__quant_f16_to_f32(k[c][i]);
                mag += fabs((double)q[i] * tkv__quant_f16_to_f32(k[c][i]));
            }
            if (!(fabs(out[c] - 0.125 * exact) <= 0.125 * (1e-6 * mag * (double)n + 1e-6)))
                fail_msg("n %zu cell %d: %.9g, exact %.9g", n, c, out[c], 0.125 * exact);
        }
        for (size_t m = 1; m <= 16; m++) {
            float w[16];
            for (size_t c = 0; c < m; c++) w[c] = (float)(rand() % 1000) / 1000.0f;
            for (size_t i = 0; i < n; i++) {
                acc[i] = (float)(rand() % 101) / 7.0f;
                double e = acc[i];
                for (size_t c = 0; c < m; c++) e += (double)w[c] * tkv__quant_f16_to_f32(k[c][i]);
                want[i] = (float)e;
            }
            float acc2[256];
            memcpy(acc2, acc, n * sizeof *acc);
            best->widen16(rows, m, n, wide);
            best->wsum16(acc, wide, w, m, n);
            if (best->wsum16_rows) { /* straight from the F16 rows: the same bits */
                best->wsum16_rows(acc2, rows, w, m, n);
                assert_memory_equal(acc2, acc, n * sizeof *acc);
            }
            for (size_t i = 0; i < n; i++)
                if (!(fabsf(acc[i] - want[i]) <= 1e-5f * (1 + fabsf(want[i]))))
                    fail_msg("n %zu m %zu element %zu: %.9g, exact %.9g", n, m, i, acc[i], want[i]);
        }
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_simd_equals_scalar), cmocka_unit_test(test_float_forms),
                                       cmocka_unit_test(test_sixteen_rows)};
    return TU_RESULT(cmocka_run_group_tests(tests, NULL, NULL));
}
