/*
 * test_bf16_pairs.c — BF16 products in the pairs order (the default, batch-invariant order of BF16 weights:
 * compute/gemm.h, compute/x86/avx512/gemm_bf16_pairs.c), bit for bit against a scalar model written here from
 * the order's description (vdpbf16ps's arithmetic as Intel's manual gives it), not from the SIMD code:
 *
 *   lane j of step s (32 elements) adds the exact product of elements 32 s + 2 j + 1, then of 32 s + 2 j, each
 *   sum rounded to nearest even; subnormal inputs (the two values and the running lane) read as zero and a
 *   subnormal sum becomes zero of its sign; elements past the row's end are zeros; the 16 lanes by halves.
 *
 * Every implementation this CPU can run: vdpbf16ps (where it has AVX512_BF16), the fused multiply-add
 * emulation at the avx512 and avx2 levels, and the forward pass's entry point (tkv__ops_matmul_lanes,
 * default order) at each level; on rows of ordinary values and on rows of subnormal and underflowing ones;
 * one token and batches, partial tiles, row blocks and chunks, a last half step.
 */
#include "testutil.h"

#include "compute/gemm.h"
#include "compute/kernels.h"
#include "compute/ops.h"
#include "compute/quant/quant.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static uint64_t next(void) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return rng;
}

static float elem(const uint8_t *row, size_t i) {
    uint16_t h;
    memcpy(&h, row + 2 * i, 2);
    return tkv__quant_bf16_to_f32(h);
}

/* subnormal to zero of its sign */
static float flush(float v) {
    uint32_t u;
    memcpy(&u, &v, 4);
    if ((u & 0x7f800000u) == 0) u &= 0x80000000u;
    memcpy(&v, &u, 4);
    return v;
}

static float model_pairs(const uint8_t *x, const uint8_t *y, size_t n) {
    float lane[16] = {0};
    for (size_t s = 0; s < n; s += 32)
        for (size_t j = 0; j < 16; j++) {
            float acc = flush(lane[j]);
            for (int e = 1; e >= 0; e--) {
                const size_t i = s + 2 * j + (size_t)e;
                const float a = i < n ? flush(elem(x, i)) : 0.0f, b = i < n ? flush(elem(y, i)) : 0.0f;
                acc = flush(fmaf(a, b, acc));
            }
            lane[j] = acc;
        }
    for (int w = 8; w >= 1; w /= 2)
        for (int l = 0; l < w; l++) lane[l] = lane[l] + lane[l + w];
    return lane[0];
}

typedef enum data_kind {
    DATA_ORDINARY, /* values in [-1, 1) rounded to BF16 */
    DATA_TINY,     /* exponents at the bottom of the range: subnormals, products that underflow, sums that cancel */
} data_kind;

static void fill(uint8_t *row, size_t n, data_kind kind) {
    for (size_t i = 0; i < n; i++) {
        uint16_t h;
        if (kind == DATA_ORDINARY) {
            const float f = (float)((next() >> 40) & 0xffffff) / 8388608.0f - 1.0f;
            h = tkv__quant_f32_to_bf16(f);
        } else {
            static const uint16_t exps[] = {0, 0, 1, 2, 3, 5, 8, 60, 63, 66, 70, 120, 127};
            const uint16_t e = exps[next() % (sizeof exps / sizeof exps[0])];
            h = (uint16_t)(((next() & 1) << 15) | (e << 7) | (next() & 0x7f));
        }
        memcpy(row + 2 * i, &h, 2);
    }
}

typedef struct impl {
    const char *name;
    tkv__gemm_fn fn; /* NULL: tkv__ops_matmul_lanes at `level`, in two disjoint row ranges */
    tkv__kernel_level level;
} impl;

/* The implementations this CPU runs, into out (at most 6); returns how many. */
static size_t impls(impl *out) {
    size_t k = 0;
#if defined(__x86_64__)
#if !defined(TKV_NO_AVX512) /* the build's option: an empty AVX-512 level */
    if (tkv__kernel_table(TKV__KERNEL_AVX512)) {
        if (tkv__kernel_cpu_bf16_dot()) out[k++] = (impl){"vdpbf16ps", tkv__lanes_bf16_pairs_dp_avx512, TKV__KERNEL_AVX512};
        out[k++] = (impl){"avx512 emulation", tkv__lanes_bf16_pairs_emu_avx512, TKV__KERNEL_AVX512};
        out[k++] = (impl){"avx512 ops", NULL, TKV__KERNEL_AVX512};
    }
#endif
    if (tkv__kernel_table(TKV__KERNEL_AVX2)) {
        out[k++] = (impl){"avx2 emulation", tkv__lanes_bf16_pairs_avx2, TKV__KERNEL_AVX2};
        out[k++] = (impl){"avx2 ops", NULL, TKV__KERNEL_AVX2};
    }
#endif
    return k;
}

static void run(const impl *m, const uint8_t *w, size_t n, size_t rows, size_t split, const uint8_t *xq, size_t n_tok,
                float *y, size_t ldy) {
    const size_t rs = 2 * n;
    if (m->fn) {
        m->fn(n, w, rs, rows, xq, rs, n_tok, y, ldy);
        return;
    }
    assert_int_equal(tkv__kernel_force_level(m->level), 0);
    assert_true(tkv__ops_lanes_ok(TKV_TYPE_BF16, n, rows));
    tkv__ops_matmul_lanes(TKV__LANES_DEFAULT, TKV_TYPE_BF16, w, n, 0, split, xq, n_tok, y, ldy);
    tkv__ops_matmul_lanes(TKV__LANES_DEFAULT, TKV_TYPE_BF16, w, n, split, rows, xq, n_tok, y, ldy);
    tkv__kernel_force_level(tkv__kernel_level_best());
}

/* Every implementation on one shape and kind of data: each entry the model's bits, nothing past the rows written. */
static void check_shape(size_t n, size_t rows, size_t split, size_t n_tok, data_kind kind) {
    impl ms[6];
    const size_t nm = impls(ms);
    if (nm == 0) TU_SKIP();
    const size_t ldy = rows + 3;
    uint8_t *w = malloc(rows * 2 * n), *xq = malloc(n_tok * 2 * n + 1);
    float *y = malloc(n_tok * ldy * sizeof(float)), *want = malloc(n_tok * rows * sizeof(float));
    assert_non_null(w), assert_non_null(xq), assert_non_null(y), assert_non_null(want);
    fill(w, rows * n, kind);
    fill(xq + 1, n_tok * n, kind); /* at an odd address */
    for (size_t t = 0; t < n_tok; t++)
        for (size_t r = 0; r < rows; r++) want[t * rows + r] = model_pairs(w + r * 2 * n, xq + 1 + t * 2 * n, n);
    for (size_t mi = 0; mi < nm; mi++) {
        for (size_t i = 0; i < n_tok * ldy; i++) y[i] = -7.0f;
        run(&ms[mi], w, n, rows, split, xq + 1, n_tok, y, ldy);
        for (size_t t = 0; t < n_tok; t++)
            for (size_t r = 0; r < ldy; r++) {
                const float got = y[t * ldy + r];
                if (r >= rows) {
                    if (got != -7.0f) fail_msg("%s: entry (%zu, %zu) past the rows written", ms[mi].name, r, t);
                    continue;
                }
                if (memcmp(&got, &want[t * rows + r], 4) != 0)
                    fail_msg("%s, %s data, n %zu rows %zu tokens %zu: entry (%zu, %zu) %a, pairs order %a", ms[mi].name,
                             kind == DATA_TINY ? "tiny" : "ordinary", n, rows, n_tok, r, t, (double)got,
                             (double)want[t * rows + r]);
            }
    }
    free(w), free(xq), free(y), free(want);
}

/* Small shapes: every token count of a tile and past it, partial tiles of rows, a last half step (n % 32 = 16). */
static void test_small(void **state) {
    (void)state;
    const size_t lens[] = {16, 32, 48, 176, 512};
    for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++)
        for (size_t rows = 4; rows <= 28; rows += 8)
            for (size_t n_tok = 1; n_tok <= 8; n_tok++)
                for (int kind = DATA_ORDINARY; kind <= DATA_TINY; kind++)
                    check_shape(lens[li], rows, rows / 2 + 1, n_tok, (data_kind)kind);
}

/* Past the blocking: more than a block of 64 rows ending in a partial tile, rows of 2+ chunks of 1024 with a
   last half step, token counts past a multiple of the 6-token tile. */
static void test_large(void **state) {
    (void)state;
    static const struct {
        size_t n, rows, split, n_tok;
    } shapes[] = {{768, 140, 67, 13}, {2064, 12, 5, 7}, {2048, 72, 33, 1}, {4112, 8, 3, 5}, {5632, 68, 64, 2}};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        for (int kind = DATA_ORDINARY; kind <= DATA_TINY; kind++)
            check_shape(shapes[i].n, shapes[i].rows, shapes[i].split, shapes[i].n_tok, (data_kind)kind);
}

/* Batch invariance, the order's reason to be: a token's entries are the same bits alone and in any batch. */
static void test_batch_invariant(void **state) {
    (void)state;
    impl ms[6];
    const size_t nm = impls(ms);
    if (nm == 0) TU_SKIP();
    enum { N = 1040, ROWS = 20, TOK = 11 };
    uint8_t *w = malloc(ROWS * 2 * N), *xq = malloc(TOK * 2 * N);
    float all[TOK * ROWS], one[ROWS];
    fill(w, ROWS * N, DATA_ORDINARY), fill(xq, TOK * N, DATA_ORDINARY);
    for (size_t mi = 0; mi < nm; mi++) {
        run(&ms[mi], w, N, ROWS, 7, xq, TOK, all, ROWS);
        for (size_t t = 0; t < TOK; t++) {
            run(&ms[mi], w, N, ROWS, 9, xq + t * 2 * N, 1, one, ROWS);
            assert_memory_equal(one, all + t * ROWS, sizeof one);
        }
    }
    free(w), free(xq);
}

/* The reference's order stays where it is asked for: lanes_ref at every level that has the pairs order. */
static void test_reference_kept(void **state) {
    (void)state;
    for (int l = TKV__KERNEL_AVX2; l < TKV__KERNEL_LEVELS; l++) {
        const tkv__kernels *k = tkv__kernel_table((tkv__kernel_level)l);
        if (!k) continue;
        assert_non_null(k->lanes[TKV_TYPE_BF16]);
        assert_non_null(k->lanes_ref[TKV_TYPE_BF16]);
        assert_true(k->lanes[TKV_TYPE_BF16] != k->lanes_ref[TKV_TYPE_BF16]);
        assert_null(k->lanes_ref[TKV_TYPE_F16]); /* F16 and F32: one order */
        assert_null(k->lanes_ref[TKV_TYPE_F32]);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_small),
        cmocka_unit_test(test_large),
        cmocka_unit_test(test_batch_invariant),
        cmocka_unit_test(test_reference_kept),
    };
    return TU_RESULT(cmocka_run_group_tests(tests, NULL, NULL));
}
