/*
 * test_attention.c — the F16 attention primitives: the AVX2 versions give
 * the same bits as the scalar ones (same operations, same order), and the
 * dot product is within float rounding of an exact double-precision sum.
 */
#include "testutil.h"

#include "attention.h"
#include "kernels.h"
#include "quant.h"

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
    if (tkv__kernel_level_active() < TKV__KERNEL_AVX2) skip();
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

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_simd_equals_scalar)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
