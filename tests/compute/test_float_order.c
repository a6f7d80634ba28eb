/*
 * test_float_order.c — products of float weights (F32, F16, BF16) at the
 * avx2 and avx512 levels, bit for bit against a scalar model of the
 * reference's summation orders written here from their description (gemm.h,
 * compute/x86/avx512/gemm_float.c), not from the SIMD code:
 *
 *   vec_dot F32/F16: lane l of accumulator j sums elements 64 s + 16 j + l
 *     with fused multiply-adds; lanes of (0 + 2) + (1 + 3); then the 16
 *     lanes by halves (l + 8, l + 4, l + 2, l + 1); the tail one element at
 *     a time (F32: into the float sum, a rounded product added for all but
 *     the last n % 8, which are fused; F16: products in double).
 *   vec_dot BF16: two accumulators over 32-element steps, each reduced by
 *     halves, added in double with the tail.
 *   lanes: one 16-lane accumulator over the whole row, reduced by halves.
 *
 * Also the matmul entry points: lanes only where tkv__ops_lanes_ok, disjoint
 * row ranges, every tile edge (each level skipped on a CPU without it); and
 * RoPE's fused pairs at every level.
 */
#include "testutil.h"

#include "compute/kernels.h"
#include "compute/ops.h"
#include "compute/quant/quant.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rng = 0x2545f4914f6cdd1dull;

static float rndf(void) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (float)((rng >> 40) & 0xffffff) / 8388608.0f - 1.0f; /* [-1, 1) */
}

/* element i of a row of type t, as a float */
static float elem(tkv_type t, const uint8_t *row, size_t i) {
    uint16_t h;
    float f;
    switch (t) {
    case TKV_TYPE_F32: memcpy(&f, row + 4 * i, 4); return f;
    case TKV_TYPE_F16: memcpy(&h, row + 2 * i, 2); return tkv__quant_f16_to_f32(h);
    default: memcpy(&h, row + 2 * i, 2); return tkv__quant_bf16_to_f32(h);
    }
}

static void fill(tkv_type t, uint8_t *row, size_t n) {
    for (size_t i = 0; i < n; i++) {
        const float f = rndf();
        if (t == TKV_TYPE_F32) memcpy(row + 4 * i, &f, 4);
        else {
            const uint16_t h = t == TKV_TYPE_F16 ? tkv__quant_f32_to_f16(f) : tkv__quant_f32_to_bf16(f);
            memcpy(row + 2 * i, &h, 2);
        }
    }
}

/* 16 lanes by halves */
static float halves(const float *lane) {
    float v[16];
    memcpy(v, lane, sizeof v);
    for (int w = 8; w >= 1; w /= 2)
        for (int l = 0; l < w; l++) v[l] = v[l] + v[l + w];
    return v[0];
}

static float model_vec_dot(tkv_type t, const uint8_t *x, const uint8_t *y, size_t n) {
    if (t == TKV_TYPE_BF16) {
        float c[2][16] = {{0}};
        size_t i = 0;
        for (; i + 32 <= n; i += 32)
            for (int j = 0; j < 2; j++)
                for (int l = 0; l < 16; l++) {
                    const size_t e = i + 16 * (size_t)j + (size_t)l;
                    c[j][l] = fmaf(elem(t, x, e), elem(t, y, e), c[j][l]);
                }
        double sum = halves(c[0]);
        sum += halves(c[1]);
        for (; i < n; i++) sum += (double)(elem(t, x, i) * elem(t, y, i));
        return (float)sum;
    }
    float a[4][16] = {{0}};
    size_t i = 0;
    for (; i + 64 <= n; i += 64)
        for (int j = 0; j < 4; j++)
            for (int l = 0; l < 16; l++) {
                const size_t e = i + 16 * (size_t)j + (size_t)l;
                a[j][l] = fmaf(elem(t, x, e), elem(t, y, e), a[j][l]);
            }
    float s[16];
    for (int l = 0; l < 16; l++) s[l] = (a[0][l] + a[2][l]) + (a[1][l] + a[3][l]);
    if (t == TKV_TYPE_F32) {
        float sum = halves(s);
        for (; i < n - n % 8; i++) {
            const float p = elem(t, x, i) * elem(t, y, i);
            sum = sum + p;
        }
        for (; i < n; i++) sum = fmaf(elem(t, x, i), elem(t, y, i), sum);
        return sum;
    }
    double sum = halves(s);
    for (; i < n; i++) sum += (double)(elem(t, x, i) * elem(t, y, i));
    return (float)sum;
}

static float model_lanes(tkv_type t, const uint8_t *x, const uint8_t *y, size_t n) {
    float lane[16] = {0};
    for (size_t i = 0; i < n; i++) lane[i % 16] = fmaf(elem(t, x, i), elem(t, y, i), lane[i % 16]);
    return halves(lane);
}

static const tkv_type float_types[] = {TKV_TYPE_F32, TKV_TYPE_F16, TKV_TYPE_BF16};

/* Both SIMD levels take the reference's order for float rows: avx2 holds
   the 16 lanes in two halves (compute/x86/avx2/gemm_float.c), avx512 in one register. */
static void vec_dot_order(tkv__kernel_level level) {
    const tkv__kernels *k = tkv__kernel_table(level);
    if (!k) TU_SKIP();
    const size_t lens[] = {1, 15, 16, 31, 32, 33, 63, 64, 65, 127, 172, 256, 1000, 2048, 4099};
    uint8_t *x = malloc(4 * 4099), *y = malloc(4 * 4099);
    for (size_t ti = 0; ti < 3; ti++)
        for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++)
            for (int rep = 0; rep < 4; rep++) {
                const tkv_type t = float_types[ti];
                const size_t n = lens[li];
                fill(t, x, n), fill(t, y, n);
                const float got = k->vec_dot[t](n, x, y), want = model_vec_dot(t, x, y, n);
                if (memcmp(&got, &want, 4) != 0)
                    fail_msg("%s, type %d n %zu: vec_dot %.9g, reference order %.9g", k->name, (int)t, n, got, want);
            }
    free(x);
    free(y);
}

static void test_vec_dot_order_avx2(void **state) {
    (void)state;
    vec_dot_order(TKV__KERNEL_AVX2);
}

static void test_vec_dot_order_avx512(void **state) {
    (void)state;
    vec_dot_order(TKV__KERNEL_AVX512);
}

static void lanes_order(tkv__kernel_level level) {
    if (tkv__kernel_force_level(level) != 0) TU_SKIP();
    enum { MAXR = 28, MAXT = 8, MAXN = 512, LDY = 32 };
    uint8_t *w = malloc(MAXR * 4 * MAXN), *xq = malloc(MAXT * 4 * MAXN + 1);
    float y[MAXT * LDY];
    const size_t lens[] = {16, 48, 64, 176, 512};
    for (size_t ti = 0; ti < 3; ti++)
        for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++)
            for (size_t rows = 4; rows <= 28; rows += 4) /* past 16 for the one-token path's blocks of 8 rows */
                for (size_t n_tok = 1; n_tok <= MAXT; n_tok++) {
                    const tkv_type t = float_types[ti];
                    const size_t n = lens[li], rs = tkv__quant_row_size(t, n);
                    assert_true(tkv__ops_lanes_ok(t, n, rows));
                    fill(t, w, rows * n);
                    fill(t, xq + 1, n_tok * n); /* at an odd address */
                    for (size_t i = 0; i < n_tok * LDY; i++) y[i] = -7.0f;
                    /* two disjoint row ranges, as two threads run them */
                    tkv__ops_matmul_lanes(TKV__LANES_REFERENCE, t, w, n, 0, rows / 2 + 1, xq + 1, n_tok, y, LDY);
                    tkv__ops_matmul_lanes(TKV__LANES_REFERENCE, t, w, n, rows / 2 + 1, rows, xq + 1, n_tok, y, LDY);
                    for (size_t tk = 0; tk < n_tok; tk++)
                        for (size_t r = 0; r < LDY; r++) {
                            const float got = y[tk * LDY + r];
                            if (r >= rows) {
                                assert_true(got == -7.0f);
                                continue;
                            }
                            const float want = model_lanes(t, w + r * rs, xq + 1 + tk * rs, n);
                            if (memcmp(&got, &want, 4) != 0)
                                fail_msg("%s, type %d n %zu rows %zu tokens %zu: entry (%zu, %zu) %.9g, reference order %.9g",
                                         tkv__kernel_level_name(level), (int)t, n, rows, n_tok, r, tk, got, want);
                        }
                }
    /* where the reference takes its vec_dot instead */
    assert_false(tkv__ops_lanes_ok(TKV_TYPE_F32, 172, 64)); /* row length not a multiple of 16 */
    assert_false(tkv__ops_lanes_ok(TKV_TYPE_F16, 256, 6));  /* rows not a multiple of 4 */
    assert_false(tkv__ops_lanes_ok(TKV_TYPE_Q8_0, 256, 64)); /* quantized: bit-equal tiled kernels instead */
    free(w);
    free(xq);
}

static void test_lanes_order_avx2(void **state) {
    (void)state;
    lanes_order(TKV__KERNEL_AVX2);
}

static void test_lanes_order_avx512(void **state) {
    (void)state;
    lanes_order(TKV__KERNEL_AVX512);
}

/* Larger shapes, past the edges of the tiles' blocking (compute/x86/avx512/gemm_float.c:
   blocks of 128 rows, 6-token tiles, rows of up to 2048 widened once, longer
   ones in other tiles; compute/x86/avx2/gemm_float.c: blocks of 96 rows,
   tiles of 3 rows x 4 tokens, chunks of 1024 elements): a thread's range of
   more than a block ending in a partial tile, token counts past a multiple
   of each tile, rows of one chunk, of whole chunks and of a partial last
   chunk. */
static void lanes_shapes(tkv__kernel_level level) {
    if (tkv__kernel_force_level(level) != 0) TU_SKIP();
    static const struct {
        size_t n, rows, split, n_tok;
    } shapes[] = {{2048, 264, 131, 13}, {784, 140, 3, 11}, {2064, 12, 5, 7},
                  {2048, 8, 4, 2},       {4096, 8, 5, 7},   {4112, 8, 3, 5}};
    enum { MAXR = 264, MAXT = 13, MAXN = 4112 };
    uint8_t *w = malloc(MAXR * 4 * MAXN), *xq = malloc(MAXT * 4 * MAXN + 1);
    float *y = malloc(MAXT * MAXR * sizeof(float));
    assert_non_null(w), assert_non_null(xq), assert_non_null(y);
    for (size_t ti = 0; ti < 3; ti++)
        for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
            const tkv_type t = float_types[ti];
            const size_t n = shapes[si].n, rows = shapes[si].rows, n_tok = shapes[si].n_tok;
            const size_t rs = tkv__quant_row_size(t, n);
            assert_true(tkv__ops_lanes_ok(t, n, rows));
            fill(t, w, rows * n);
            fill(t, xq + 1, n_tok * n);
            tkv__ops_matmul_lanes(TKV__LANES_REFERENCE, t, w, n, 0, shapes[si].split, xq + 1, n_tok, y, rows);
            tkv__ops_matmul_lanes(TKV__LANES_REFERENCE, t, w, n, shapes[si].split, rows, xq + 1, n_tok, y, rows);
            for (size_t tk = 0; tk < n_tok; tk++)
                for (size_t r = 0; r < rows; r++) {
                    const float got = y[tk * rows + r], want = model_lanes(t, w + r * rs, xq + 1 + tk * rs, n);
                    if (memcmp(&got, &want, 4) != 0)
                        fail_msg("%s, type %d n %zu rows %zu tokens %zu: entry (%zu, %zu) %.9g, reference order %.9g",
                                 tkv__kernel_level_name(level), (int)t, n, rows, n_tok, r, tk, got, want);
                }
        }
    free(w);
    free(xq);
    free(y);
}

static void test_lanes_shapes_avx2(void **state) {
    (void)state;
    lanes_shapes(TKV__KERNEL_AVX2);
}

static void test_lanes_shapes_avx512(void **state) {
    (void)state;
    lanes_shapes(TKV__KERNEL_AVX512);
}

/* The two levels give the same bits for the same rows, whatever the tile
   shapes and register widths: on an AVX-512 CPU, a run at the avx2 level
   gets the float products of the reference (that run on AVX-512). */
static void test_levels_agree(void **state) {
    (void)state;
    const tkv__kernels *k2 = tkv__kernel_table(TKV__KERNEL_AVX2), *k5 = tkv__kernel_table(TKV__KERNEL_AVX512);
    if (!k2 || !k5) TU_SKIP();
    enum { N = 1040, ROWS = 12, TOK = 5 };
    uint8_t *w = malloc(ROWS * 4 * N), *xq = malloc(TOK * 4 * N);
    float y2[TOK * ROWS], y5[TOK * ROWS];
    for (size_t ti = 0; ti < 3; ti++) {
        const tkv_type t = float_types[ti];
        const size_t rs = tkv__quant_row_size(t, N);
        fill(t, w, ROWS * N), fill(t, xq, TOK * N);
        for (size_t r = 0; r < ROWS; r++) {
            const float a = k2->vec_dot[t](N, w + r * rs, xq), b = k5->vec_dot[t](N, w + r * rs, xq);
            assert_memory_equal(&a, &b, 4);
        }
        k2->lanes[t](N, w, rs, ROWS, xq, rs, TOK, y2, ROWS);
        k5->lanes[t](N, w, rs, ROWS, xq, rs, TOK, y5, ROWS);
        assert_memory_equal(y2, y5, sizeof y2);
    }
    free(w);
    free(xq);
}

/* The scalar level has no lanes products: matrices go to vec_dot. */
static void test_lanes_levels(void **state) {
    (void)state;
    assert_int_equal(tkv__kernel_force_level(TKV__KERNEL_SCALAR), 0);
    for (size_t ti = 0; ti < 3; ti++) assert_false(tkv__ops_lanes_ok(float_types[ti], 256, 64));
}

/* RoPE pairs: every level's kernel gives the fused form of the scalar model, to the bit. */
static void test_rope_pairs_levels(void **state) {
    (void)state;
    float v[80], w[80], cs[80];
    for (int l = 0; l < TKV__KERNEL_LEVELS; l++) {
        const tkv__kernels *k = tkv__kernel_table((tkv__kernel_level)l);
        if (!k) continue;
        for (size_t n_pairs = 1; n_pairs <= 40; n_pairs++) {
            for (size_t i = 0; i < 2 * n_pairs; i++) v[i] = 8 * rndf(), cs[i] = rndf();
            memcpy(w, v, sizeof v);
            k->rope_pairs(v, cs, n_pairs);
            for (size_t i = 0; i < n_pairs; i++) {
                const float a = w[2 * i], b = w[2 * i + 1], c = cs[2 * i], s = cs[2 * i + 1];
                const float bs = b * s, bc = b * c;
                const float want0 = fmaf(a, c, -bs), want1 = fmaf(a, s, bc);
                if (memcmp(&v[2 * i], &want0, 4) || memcmp(&v[2 * i + 1], &want1, 4))
                    fail_msg("level %d, %zu pairs: pair %zu (%.9g, %.9g), want (%.9g, %.9g)", l, n_pairs, i, v[2 * i],
                             v[2 * i + 1], want0, want1);
            }
        }
    }
}

static int teardown(void **state) {
    (void)state;
    tkv__kernel_force_level(tkv__kernel_level_best());
    return 0;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_vec_dot_order_avx2, teardown),
        cmocka_unit_test_teardown(test_vec_dot_order_avx512, teardown),
        cmocka_unit_test_teardown(test_lanes_order_avx2, teardown),
        cmocka_unit_test_teardown(test_lanes_order_avx512, teardown),
        cmocka_unit_test_teardown(test_lanes_shapes_avx2, teardown),
        cmocka_unit_test_teardown(test_lanes_shapes_avx512, teardown),
        cmocka_unit_test_teardown(test_levels_agree, teardown),
        cmocka_unit_test_teardown(test_lanes_levels, teardown),
        cmocka_unit_test(test_rope_pairs_levels),
    };
    return TU_RESULT(cmocka_run_group_tests(tests, NULL, NULL));
}
