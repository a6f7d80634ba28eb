/*
 * test_kernels.c — every SIMD kernel against its scalar twin: the dot
 * products of all weight types over random blocks and several row lengths,
 * the tiled products against their level's dot product (bit for bit, at
 * every tile edge), the activation quantizers (bit for bit), the
 * element-wise ops; and the dispatch (levels, forcing a level). The
 * block-reduced orders against models of the formats are
 * test_kernel_orders.c's; the random data is kernel_data.h's.
 *
 * Levels the CPU lacks are skipped (and said so); the scalar table is
 * always there.
 */
#include "testutil.h"
#include "kernel_data.h"

#include "compute/kernels.h"
#include "compute/quant/quant.h"
#include "compute/quant/repack.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/*
 * The additive part of each dequantized weight (m for Q4_1/Q5_1, -dmin * min
 * for the K types, 0 otherwise), to bound the magnitude of the terms a dot
 * product adds: |d * q| <= |w| + |offset|.
 */
static void weight_offsets(tkv_type t, const uint8_t *w, size_t n, float *off) {
    for (size_t i = 0; i < n; i++) off[i] = 0.0f;
    if (t == TKV_TYPE_Q4_1 || t == TKV_TYPE_Q5_1) {
        const size_t bsz = t == TKV_TYPE_Q4_1 ? 20 : 24;
        for (size_t i = 0; i < n; i++) {
            uint16_t m;
            memcpy(&m, w + i / 32 * bsz + 2, 2);
            off[i] = tkv__quant_f16_to_f32(m);
        }
    } else if (t == TKV_TYPE_Q4_K || t == TKV_TYPE_Q5_K) {
        const size_t bsz = t == TKV_TYPE_Q4_K ? 144 : 176;
        for (size_t i = 0; i < n; i++) {
            const uint8_t *b = w + i / 256 * bsz;
            uint16_t dmin;
            memcpy(&dmin, b + 2, 2);
            uint8_t sc, mn;
            tkv__quant_k4_scale_min((int)(i % 256 / 32), b + 4, &sc, &mn);
            off[i] = tkv__quant_f16_to_f32(dmin) * mn;
        }
    } else if (t == TKV_TYPE_Q2_K) { /* dmin x the sub-block's min */
        for (size_t i = 0; i < n; i++) {
            const uint8_t *b = w + i / 256 * 84;
            uint16_t dmin;
            memcpy(&dmin, b + 82, 2);
            off[i] = tkv__quant_f16_to_f32(dmin) * (float)(b[i % 256 / 16] >> 4);
        }
    } else if (t == TKV_TYPE_IQ1_S || t == TKV_TYPE_IQ1_M) {
        /* the shift, 1/8 of the scale, is summed apart from the grid
           products; |grid + shift| >= 1/8, so |w| bounds it */
        tkv__quant_dequantize_row(t, w, off, n);
        for (size_t i = 0; i < n; i++) off[i] = fabsf(off[i]);
    }
}

/* ---- dispatch ------------------------------------------------------------------- */

static void test_dispatch(void **state) {
    (void)state;
    const tkv__kernel_level best = tkv__kernel_level_best();
    print_message("  best level on this CPU: %s; active: %s\n", tkv__kernel_level_name(best),
                  tkv__kernel_level_name(tkv__kernel_level_active()));
    assert_non_null(tkv__kernel_table(TKV__KERNEL_SCALAR));
    for (int l = 0; l < TKV__KERNEL_LEVELS; l++) {
        const tkv__kernels *t = tkv__kernel_table((tkv__kernel_level)l);
        if (l > (int)best) {
            assert_null(t);
            assert_int_equal(tkv__kernel_force_level((tkv__kernel_level)l), -1);
            continue;
        }
        assert_non_null(t);
        assert_int_equal(t->level, l);
        assert_string_equal(t->name, tkv__kernel_level_name((tkv__kernel_level)l));
        /* complete: every supported weight type and activation type, every op */
        for (int ty = 0; ty < TKV_TYPE_COUNT; ty++) {
            if (tkv__quant_supported((tkv_type)ty)) {
                assert_non_null(t->vec_dot[ty]);
                assert_non_null(t->quantize[tkv__quant_vec_dot_type((tkv_type)ty)]);
            } else {
                assert_null(t->vec_dot[ty]);
            }
        }
        assert_true(t->rmsnorm && t->softmax && t->silu && t->swiglu && t->softcap);
        /* tiled products: only beside a vec_dot; the SIMD levels have them for the prefill types */
        for (int ty = 0; ty < TKV_TYPE_COUNT; ty++)
            if (t->gemm[ty]) assert_non_null(t->vec_dot[ty]);
        if (l == TKV__KERNEL_SCALAR)
            for (int ty = 0; ty < TKV_TYPE_COUNT; ty++) assert_null(t->gemm[ty]);
        else
            assert_true(t->gemm[TKV_TYPE_Q8_0] && t->gemm[TKV_TYPE_Q4_0] && t->gemm[TKV_TYPE_Q4_1] &&
                        t->gemm[TKV_TYPE_Q5_0] && t->gemm[TKV_TYPE_Q5_1] && t->gemm[TKV_TYPE_Q4_K] &&
                        t->gemm[TKV_TYPE_Q5_K] && t->gemm[TKV_TYPE_Q6_K]);
        assert_int_equal(tkv__kernel_force_level((tkv__kernel_level)l), 0);
        assert_int_equal(tkv__kernel_level_active(), l);
        assert_ptr_equal(tkv__kernel_get(), t);
    }
    assert_int_equal(tkv__kernel_force_level((tkv__kernel_level)7), -1);
    assert_int_equal(tkv__kernel_force_level(best), 0);
    assert_string_equal(tkv__kernel_level_name((tkv__kernel_level)9), "?");
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
    /* cross-check the library's CPUID reading with the compiler's */
    __builtin_cpu_init();
    const int avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
    const int avx512 = avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                       __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni");
    if (!getenv("TKV_KERNELS")) /* which caps the level on purpose */
        assert_int_equal(best, avx512 ? TKV__KERNEL_AVX512 : avx2 ? TKV__KERNEL_AVX2 : TKV__KERNEL_SCALAR);
#endif
}

/* ---- dot products ----------------------------------------------------------------- */

static const tkv_type weight_types[] = {TKV_TYPE_F32,  TKV_TYPE_F16,  TKV_TYPE_BF16, TKV_TYPE_Q8_0,
                                        TKV_TYPE_Q4_0, TKV_TYPE_Q4_1, TKV_TYPE_Q5_0, TKV_TYPE_Q5_1,
                                        TKV_TYPE_Q4_K, TKV_TYPE_Q5_K, TKV_TYPE_Q6_K, TKV_TYPE_IQ4_NL,
                                        TKV_TYPE_IQ4_XS, TKV_TYPE_Q2_K, TKV_TYPE_Q3_K, TKV_TYPE_MXFP4,
                                        TKV_TYPE_TQ1_0, TKV_TYPE_TQ2_0, TKV_TYPE_IQ2_XXS, TKV_TYPE_IQ2_XS,
                                        TKV_TYPE_IQ2_S, TKV_TYPE_IQ1_S, TKV_TYPE_IQ1_M, TKV_TYPE_IQ3_XXS,
                                        TKV_TYPE_IQ3_S};

/*
 * SIMD vs scalar, per type and row length. Both compute the same exact
 * integer block sums; they differ only in float rounding: each product of a
 * block sum with its scales (a few ulp) and the order of the additions.
 * With T float terms, the summation error of either is at most
 * (T - 1) u sum|terms| (u = 2^-24), so they differ by at most about
 * 2 (T + 4) u sum|terms|. sum|terms| <= sum (|w_i| + 2 |offset_i|) |a_i|
 * over the dequantized values. T = n / block for the quantized types
 * (T = n for float rows); we allow twice that.
 */
/* The types summed block-reduced at every level (compute/quant/quant.h). */
static int block_reduced(tkv_type t) {
    return t == TKV_TYPE_Q4_0 || t == TKV_TYPE_IQ4_NL || t == TKV_TYPE_MXFP4 || t == TKV_TYPE_Q4_K || t == TKV_TYPE_Q5_K ||
           t == TKV_TYPE_Q2_K || t == TKV_TYPE_Q3_K || t == TKV_TYPE_IQ4_XS || t == TKV_TYPE_Q6_K;
}

static void check_dot(tkv_type t, size_t n, const tkv__kernels *simd) {
    const tkv__kernels *sc = tkv__kernel_table(TKV__KERNEL_SCALAR);
    const tkv_type at = tkv__quant_vec_dot_type(t);
    /* offset by an odd byte: blocks must work at any address */
    uint8_t *wbuf = malloc(tkv__quant_row_size(t, n) + 1), *abuf = malloc(tkv__quant_row_size(at, n) + 3);
    float *x = malloc(n * sizeof(float)), *wf = malloc(n * sizeof(float)), *af = malloc(n * sizeof(float));
    float *off = malloc(n * sizeof(float));
    assert_true(wbuf && abuf && x && wf && af && off);
    uint8_t *w = wbuf + 1, *a = abuf + 3;
    for (int rep = 0; rep < 4; rep++) {
        rnd_weights(t, w, n);
        rnd_acts(x, n);
        sc->quantize[at](x, a, n);
        tkv__quant_dequantize_row(t, w, wf, n);
        tkv__quant_dequantize_row(at, a, af, n);
        weight_offsets(t, w, n, off);
        double mag = 0;
        for (size_t i = 0; i < n; i++) mag += (fabs(wf[i]) + 2 * fabs(off[i])) * fabs(af[i]);
        const size_t terms = n / tkv__quant_block_elems(t);
        const double tol = 4.0 * (double)(terms + 4) * 0x1p-24 * mag + 1e-30;
        const double want = sc->vec_dot[t](n, w, a);
        const double got = simd->vec_dot[t](n, w, a);
        /* Q4_0's, IQ4_NL's, MXFP4's and Q4_K's order is the block-reduced one at every level
           (compute/quant/quant.h): the same exact block sums and the same fma chains, so the same bits */
        if (block_reduced(t) && (float)got != (float)want)
            fail_msg("%s n=%zu %s: %.9g, scalar %.9g: not bit for bit", tkv_type_name(t), n, simd->name, got, want);
        if (!(fabs(got - want) <= tol))
            fail_msg("%s n=%zu %s: %.9g, scalar %.9g, |diff| %.3g > %.3g", tkv_type_name(t), n, simd->name, got, want,
                     fabs(got - want), tol);
        /*
         * and the scalar oracle itself against a double-precision dot of the
         * dequantized rows; for Q8_1 activations the offset term uses the
         * block's s (fp16 of d * sum(q)), as the format defines it
         */
        double ref = 0;
        for (size_t i = 0; i < n; i++) ref += (double)wf[i] * af[i];
        if (at == TKV_TYPE_Q8_1) {
            for (size_t b = 0; b < n / 32; b++) {
                uint16_t s16;
                memcpy(&s16, a + b * 36 + 2, 2);
                double sum_af = 0;
                for (size_t i = 32 * b; i < 32 * b + 32; i++) sum_af += af[i];
                ref += (double)off[32 * b] * ((double)tkv__quant_f16_to_f32(s16) - sum_af);
            }
        }
        if (!(fabs(want - ref) <= tol + 1e-6 * mag))
            fail_msg("%s n=%zu scalar %.9g vs dequantized dot %.9g", tkv_type_name(t), n, want, ref);
    }
    free(wbuf);
    free(abuf);
    free(x);
    free(wf);
    free(af);
    free(off);
}

static void test_vec_dot_levels(void **state) {
    (void)state;
    const size_t lens32[] = {32, 64, 96, 224, 256, 4096, 4096 + 96, 32 * 129};
    const size_t lens256[] = {256, 512, 768, 1792, 4096, 256 * 11};
    const size_t lensf[] = {1, 7, 8, 9, 31, 32, 33, 96, 256, 1000, 4096, 4099};
    int levels = 0;
    for (int l = 1; l < TKV__KERNEL_LEVELS; l++) {
        const tkv__kernels *simd = tkv__kernel_table((tkv__kernel_level)l);
        if (!simd) {
            print_message("  level %s: not supported by this CPU, skipped\n", tkv__kernel_level_name((tkv__kernel_level)l));
            continue;
        }
        levels++;
        for (size_t ti = 0; ti < sizeof weight_types / sizeof weight_types[0]; ti++) {
            const tkv_type t = weight_types[ti];
            const size_t be = tkv__quant_block_elems(t);
            const size_t *lens = be == 1 ? lensf : be == 32 ? lens32 : lens256;
            const size_t nl = be == 1 ? sizeof lensf / sizeof lensf[0]
                              : be == 32 ? sizeof lens32 / sizeof lens32[0]
                                         : sizeof lens256 / sizeof lens256[0];
            for (size_t li = 0; li < nl; li++) check_dot(t, lens[li], simd);
        }
    }
    if (!levels) TU_SKIP();
}

/* Extreme quants: every weight quant at its most negative/positive, activations at +-127. */
static void test_vec_dot_extremes(void **state) {
    (void)state;
    const size_t n = 512;
    for (int l = 1; l < TKV__KERNEL_LEVELS; l++) {
        const tkv__kernels *simd = tkv__kernel_table((tkv__kernel_level)l);
        if (!simd) continue;
        for (size_t ti = 3; ti < sizeof weight_types / sizeof weight_types[0]; ti++) {
            const tkv_type t = weight_types[ti];
            const tkv_type at = tkv__quant_vec_dot_type(t);
            for (int pat = 0; pat < 4; pat++) {
                uint8_t w[2048], a[2048];
                rnd_weights(t, w, n);
                /* quant bytes all 0x00, 0xff, 0x80 or 0x7f; scales kept */
                const uint8_t fill = (uint8_t[]){0x00, 0xff, 0x80, 0x7f}[pat];
                const size_t bsz = tkv__quant_row_size(t, tkv__quant_block_elems(t));
                for (size_t b = 0; b < n / tkv__quant_block_elems(t); b++) {
                    uint8_t *blk = w + b * bsz;
                    size_t q0 = 2, q1 = bsz; /* quant byte range of the block */
                    if (t == TKV_TYPE_Q4_1 || t == TKV_TYPE_Q5_1) q0 = 4;
                    if (t == TKV_TYPE_Q4_K || t == TKV_TYPE_Q5_K) q0 = 16;
                    if (t == TKV_TYPE_Q6_K) q0 = 0, q1 = 192;
                    if (t == TKV_TYPE_IQ4_XS) q0 = 8;
                    if (t == TKV_TYPE_MXFP4) q0 = 1;
                    if (t == TKV_TYPE_TQ1_0 || t == TKV_TYPE_TQ2_0) q0 = 0, q1 = bsz - 2;
                    if (t == TKV_TYPE_Q2_K) q0 = 16, q1 = 80;
                    if (t == TKV_TYPE_Q3_K) q0 = 0, q1 = 96;
                    /* IQ3_XXS, IQ3_S: everything after d (indices, signs, scales 15 with 0xff) */
                    /* IQ2: indices and signs (IQ2_S: its qh too); 0xff: the last codebook entries, all signs */
                    if (t == TKV_TYPE_IQ2_XS) q1 = 66;
                    if (t == TKV_TYPE_IQ2_S) q1 = 74;
                    if (t == TKV_TYPE_IQ1_M) q0 = 0, q1 = 48; /* qs, qh: the scales hold d */
                    memset(blk + q0, fill, q1 - q0);
                }
                float x[512];
                for (size_t i = 0; i < n; i++) x[i] = (i + (size_t)pat) % 3 == 0 ? -1.0f : 1.0f;
                tkv__quant_quantize_row(at, x, a, n);
                const float want = tkv__quant_vec_dot(t, n, w, a);
                const float got = simd->vec_dot[t](n, w, a);
                float wf[512], off[512];
                tkv__quant_dequantize_row(t, w, wf, n);
                weight_offsets(t, w, n, off);
                double mag = 0; /* |a_i| <= 1 */
                for (size_t i = 0; i < n; i++) mag += fabs(wf[i]) + 2 * fabs(off[i]);
                if (block_reduced(t) && memcmp(&got, &want, sizeof got) != 0)
                    fail_msg("%s pattern %02x %s: %.9g, scalar %.9g: not bit for bit", tkv_type_name(t), fill,
                             simd->name, got, want);
                if (!(fabsf(got - want) <= 1e-5 * mag + 1e-30))
                    fail_msg("%s pattern %02x %s: %.9g, scalar %.9g", tkv_type_name(t), fill, simd->name, got, want);
            }
        }
    }
}

/*
 * The avx2 level's IQ1 dots with pdep (compute/x86/avx2/dot_iq1_bmi2.c) against its plain ones: the same grid
 * points and integers by another route, so the same bits, on random rows and on index bytes at their limits
 * (every grid entry's high bits, IQ1_M's shift signs). Run wherever the CPU has BMI2, fast pdep or not; the
 * table takes them only where pdep is fast.
 */
static void test_iq1_pdep_bits(void **state) {
    (void)state;
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    __builtin_cpu_init();
    if (!tkv__kernel_table(TKV__KERNEL_AVX2) || !tkv__kernel_avx2_bmi2_part.name || !__builtin_cpu_supports("bmi2"))
        TU_SKIP();
    const tkv__kernels *sc = tkv__kernel_table(TKV__KERNEL_SCALAR);
    const tkv_type types[] = {TKV_TYPE_IQ1_S, TKV_TYPE_IQ1_M};
    const size_t lens[] = {256, 512, 2048, 256 * 11};
    enum { NMAX = 256 * 11 };
    static uint8_t w[NMAX], a[NMAX * 2];
    static float x[NMAX];
    for (size_t ti = 0; ti < 2; ti++) {
        const tkv_type t = types[ti], at = tkv__quant_vec_dot_type(t);
        const tkv__vec_dot_fn plain = tkv__kernel_avx2_part.vec_dot[t], pdep = tkv__kernel_avx2_bmi2_part.vec_dot[t];
        assert_non_null(plain);
        assert_non_null(pdep);
        const size_t bsz = tkv__quant_row_size(t, 256);
        for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++) {
            const size_t n = lens[li];
            for (int pat = -1; pat < 4; pat++) { /* -1: random; else qs and qh bytes all 0x00, 0xff, 0x80 or 0x7f */
                rnd_weights(t, w, n);
                if (pat >= 0)
                    for (size_t b = 0; b < n / 256; b++) /* IQ1_S: qs (32) then qh (16) after d; IQ1_M: qs, qh first */
                        memset(w + b * bsz + (t == TKV_TYPE_IQ1_S ? 2 : 0), (uint8_t[]){0x00, 0xff, 0x80, 0x7f}[pat], 48);
                rnd_acts(x, n);
                sc->quantize[at](x, a, n);
                const float want = plain(n, w, a), got = pdep(n, w, a);
                if (memcmp(&got, &want, sizeof got) != 0)
                    fail_msg("%s n=%zu pattern %d: pdep %.9g, plain %.9g: not bit for bit", tkv_type_name(t), n, pat,
                             got, want);
            }
        }
    }
    /* the table takes them exactly where pdep is fast */
    const tkv__kernels *k = tkv__kernel_table(TKV__KERNEL_AVX2);
    assert_true((k->vec_dot[TKV_TYPE_IQ1_S] == tkv__kernel_avx2_bmi2_part.vec_dot[TKV_TYPE_IQ1_S]) ==
                (tkv__kernel_cpu_fast_pdep() != 0));
#else
    TU_SKIP();
#endif
}

/* ---- tiled products (prefill) ---------------------------------------------------- */

static const tkv_type gemm_types[] = {TKV_TYPE_Q8_0, TKV_TYPE_Q4_0, TKV_TYPE_Q4_1, TKV_TYPE_Q5_0, TKV_TYPE_Q5_1,
                                     TKV_TYPE_Q2_K, TKV_TYPE_Q3_K, TKV_TYPE_Q4_K, TKV_TYPE_Q5_K, TKV_TYPE_Q6_K,
                                     TKV_TYPE_IQ4_NL, TKV_TYPE_IQ4_XS, TKV_TYPE_IQ1_S, TKV_TYPE_IQ1_M, TKV_TYPE_IQ2_XXS,
                                     TKV_TYPE_IQ2_XS, TKV_TYPE_IQ2_S, TKV_TYPE_IQ3_XXS, TKV_TYPE_IQ3_S,
                                     TKV_TYPE_TQ1_0};

/*
 * One product through a level's gemm entry (or, with pk, its packed entry
 * over the same rows packed by tkv__pack_rows; r0 then starts a group)
 * against that level's vec_dot, bit for bit: rows [r0, r1) of a matrix of
 * weights at w (row stride wrs) times the first n_tok of the activation
 * rows at xq; y gets a sentinel first, and everything outside the
 * product's rows and tokens must keep it.
 */
static void check_product_range(const tkv__kernels *k, tkv_type t, size_t n, const uint8_t *w, const uint8_t *pk,
                                const uint8_t *xq, size_t n_tok, size_t r0, size_t r1, size_t ldy, float *y) {
    const size_t wrs = tkv__quant_row_size(t, n), xrs = tkv__quant_row_size(tkv__quant_vec_dot_type(t), n);
    const float sentinel = -7.25e30f;
    for (size_t i = 0; i < (n_tok + 1) * ldy; i++) y[i] = sentinel;
    if (pk) {
        const size_t gs = tkv__pack_stride(t, n);
        assert_int_equal(r0 % TKV__PACK_ROWS, 0);
        k->packed[t](n, pk + r0 / TKV__PACK_ROWS * gs, gs, r1 - r0, xq, xrs, n_tok, y + r0, ldy);
    } else {
        k->gemm[t](n, w + r0 * wrs, wrs, r1 - r0, xq, xrs, n_tok, y + r0, ldy);
    }
    for (size_t tok = 0; tok <= n_tok; tok++)
        for (size_t r = 0; r < ldy; r++) {
            const float got = y[tok * ldy + r];
            if (tok == n_tok || r < r0 || r >= r1) {
                if (memcmp(&got, &sentinel, sizeof got) != 0)
                    fail_msg("%s %s %s n=%zu tokens=%zu rows [%zu, %zu): wrote y[%zu][%zu]", k->name, pk ? "packed" : "gemm",
                             tkv_type_name(t), n, n_tok, r0, r1, tok, r);
                continue;
            }
            const float want = k->vec_dot[t](n, w + r * wrs, xq + tok * xrs);
            if (memcmp(&got, &want, sizeof got) != 0)
                fail_msg("%s %s %s n=%zu tokens=%zu rows [%zu, %zu): row %zu token %zu: %.9g, vec_dot %.9g", k->name,
                         pk ? "packed" : "gemm", tkv_type_name(t), n, n_tok, r0, r1, r, tok, got, want);
        }
}

/* The same through the gemm entry. */
static void check_gemm_range(const tkv__kernels *k, tkv_type t, size_t n, const uint8_t *w, const uint8_t *xq,
                             size_t n_tok, size_t r0, size_t r1, size_t ldy, float *y) {
    check_product_range(k, t, n, w, NULL, xq, n_tok, r0, r1, ldy, y);
}

/*
 * Random weights and activations of row length n, at odd addresses; tiles
 * at every edge: 1..17 tokens, row ranges of 1..16 rows at odd offsets;
 * then batches long enough to cross chunks of tokens (big_tok) on a few
 * rows. The row lengths (tests below) cover one chunk of K and several,
 * odd block counts and the last chunk partial.
 */
static void check_gemm(const tkv__kernels *k, tkv_type t, size_t n, size_t big_tok) {
    const tkv_type at = tkv__quant_vec_dot_type(t);
    const size_t n_rows = 17, wrs = tkv__quant_row_size(t, n), xrs = tkv__quant_row_size(at, n);
    const size_t max_tok = big_tok > 17 ? big_tok : 17, ldy = n_rows + 2;
    uint8_t *wbuf = malloc(n_rows * wrs + 1), *xbuf = malloc(max_tok * xrs + 3);
    float *x = malloc(n * sizeof(float)), *y = malloc((max_tok + 1) * ldy * sizeof(float));
    assert_true(wbuf && xbuf && x && y);
    uint8_t *w = wbuf + 1, *xq = xbuf + 3;
    for (size_t r = 0; r < n_rows; r++) rnd_weights(t, w + r * wrs, n);
    for (size_t tok = 0; tok < max_tok; tok++) {
        rnd_acts(x, n);
        tkv__quant_quantize_row(at, x, xq + tok * xrs, n);
    }
    static const size_t ranges[][2] = {{0, 1}, {3, 5}, {1, 4}, {0, 4}, {5, 10}, {2, 9}, {1, 14}, {0, 16}, {4, 17}};
    for (size_t n_tok = 1; n_tok <= 17; n_tok++)
        for (size_t ri = 0; ri < sizeof ranges / sizeof ranges[0]; ri++)
            check_gemm_range(k, t, n, w, xq, n_tok, ranges[ri][0], ranges[ri][1], ldy, y);
    if (big_tok) {
        check_gemm_range(k, t, n, w, xq, big_tok, 1, 6, ldy, y);
        check_gemm_range(k, t, n, w, xq, big_tok - 5, 0, 17, ldy, y);
    }
    free(wbuf);
    free(xbuf);
    free(x);
    free(y);
}

static void test_gemm_levels(void **state) {
    (void)state;
    /*
     * 32-element blocks: chunks of K of 32 blocks (avx512; 64 for avx2),
     * then chunks of up to 32 tokens (avx512; 64 for avx2), or of up to 256
     * when K fits one chunk; the K types: chunks of 8 blocks, tables of
     * 256 / blocks tiles of 4 tokens; IQ3_XXS and IQ3_S: chunks of 16
     * super-blocks (avx512) or 32 (avx2), of 64 tokens; TQ1_0: tiles of 16
     * rows x 16 tokens (1..17 of each below). Long batches
     * (second number) cross chunks of tokens in both modes.
     */
    static const size_t lens32[][2] = {{32, 0},    {64, 0},   {96, 0},   {768, 300}, {1024, 0},
                                       {1088, 40}, {2048, 0}, {2080, 0}, {4160, 70}};
    static const size_t lens256[][2] = {{256, 0}, {512, 0}, {768, 0}, {2048, 130}, {2304, 70}, {256 * 17, 0},
                                        {256 * 33, 0}};
    int levels = 0;
    for (int l = 0; l < TKV__KERNEL_LEVELS; l++) {
        const tkv__kernels *k = tkv__kernel_table((tkv__kernel_level)l);
        if (!k) continue;
        for (size_t ti = 0; ti < sizeof gemm_types / sizeof gemm_types[0]; ti++) {
            const tkv_type t = gemm_types[ti];
            if (!k->gemm[t]) continue;
            levels++;
            const int k32 = tkv__quant_block_elems(t) == 32;
            const size_t nl = k32 ? sizeof lens32 / sizeof lens32[0] : sizeof lens256 / sizeof lens256[0];
            for (size_t li = 0; li < nl; li++) {
                const size_t *len = k32 ? lens32[li] : lens256[li];
                check_gemm(k, t, len[0], len[1]);
            }
        }
    }
    if (!levels) TU_SKIP();
}

/*
 * Packed rows (compute/quant/repack.h) through each level's packed entry, bit for bit
 * its vec_dot: 40 rows (two whole groups and a partial one) at every row
 * range that starts a group (a last group of 1, 4, 8, 9 and 15 rows: the
 * avx2 level's halves of 8), 1..17 tokens and batches that cross chunks of
 * tokens, row lengths of one chunk of K and several (in blocks: 1, 3, 24,
 * 34, 65, 130 of 32 elements; 1, 2, 3, 8, 9, 17 of 256, odd and even for
 * Q8_0's pairs of blocks, one chunk of K and several for the K types').
 */
static void test_packed_levels(void **state) {
    (void)state;
    static const size_t lens32[][2] = {{32, 0}, {96, 0}, {768, 300}, {1088, 40}, {2080, 0}, {4160, 70}};
    static const size_t lens256[][2] = {{256, 0}, {512, 0}, {768, 300}, {2048, 40}, {2304, 0}, {4352, 70}};
    _Static_assert(sizeof lens32 == sizeof lens256, "as many lengths per block size");
    static const size_t ranges[][2] = {{0, 1}, {0, 15}, {0, 16}, {0, 17}, {0, 25}, {16, 40}, {32, 33}, {16, 20}, {0, 40}};
    int levels = 0;
    for (int l = 0; l < TKV__KERNEL_LEVELS; l++) {
        const tkv__kernels *k = tkv__kernel_table((tkv__kernel_level)l);
        if (!k) continue;
        for (tkv_type t = 0; t < TKV_TYPE_COUNT; t++) {
            if (!k->packed[t]) continue;
            assert_true(tkv__pack_supported(t));
            levels++;
            const tkv_type at = tkv__quant_vec_dot_type(t);
            const size_t(*lens)[2] = tkv__quant_block_elems(t) == 256 ? lens256 : lens32;
            for (size_t li = 0; li < sizeof lens32 / sizeof lens32[0]; li++) {
                const size_t n = lens[li][0], big = lens[li][1], n_rows = 40, ldy = 42;
                const size_t wrs = tkv__quant_row_size(t, n), xrs = tkv__quant_row_size(at, n);
                const size_t max_tok = big > 17 ? big : 17;
                uint8_t *w = malloc(n_rows * wrs), *xq = malloc(max_tok * xrs);
                uint8_t *pk = aligned_alloc(64, (tkv__pack_bytes(t, n, n_rows) + 63) / 64 * 64);
                float *x = malloc(n * sizeof(float)), *y = malloc((max_tok + 1) * ldy * sizeof(float));
                assert_true(w && xq && pk && x && y);
                for (size_t r = 0; r < n_rows; r++) rnd_weights(t, w + r * wrs, n);
                for (size_t tok = 0; tok < max_tok; tok++) {
                    rnd_acts(x, n);
                    tkv__quant_quantize_row(at, x, xq + tok * xrs, n);
                }
                tkv__pack_rows(t, w, n, n_rows, pk);
                for (size_t n_tok = 1; n_tok <= 17; n_tok++)
                    for (size_t ri = 0; ri < sizeof ranges / sizeof ranges[0]; ri++)
                        check_product_range(k, t, n, w, pk, xq, n_tok, ranges[ri][0], ranges[ri][1], ldy, y);
                if (big) {
                    check_product_range(k, t, n, w, pk, xq, big, 16, 21, ldy, y);
                    check_product_range(k, t, n, w, pk, xq, big - 5, 0, 40, ldy, y);
                }
                free(w), free(xq), free(pk), free(x), free(y);
            }
        }
    }
    if (!levels) TU_SKIP();
}

/* Extreme quants in the tiled products and those over packed rows: weights at their limits, activations at +-127. */
static void test_gemm_extremes(void **state) {
    (void)state;
    const size_t n = 2304, n_rows = 6, n_tok = 7, ldy = 8;
    for (int l = 0; l < TKV__KERNEL_LEVELS; l++) {
        const tkv__kernels *k = tkv__kernel_table((tkv__kernel_level)l);
        if (!k) continue;
        for (size_t ti = 0; ti < sizeof gemm_types / sizeof gemm_types[0]; ti++) {
            const tkv_type t = gemm_types[ti], at = tkv__quant_vec_dot_type(t);
            if (!k->gemm[t]) continue;
            const size_t wrs = tkv__quant_row_size(t, n), xrs = tkv__quant_row_size(at, n);
            const size_t bsz = tkv__quant_row_size(t, tkv__quant_block_elems(t));
            uint8_t *w = malloc(n_rows * wrs), *xq = malloc(n_tok * xrs);
            float *x = malloc(n * sizeof(float)), y[8 * 8];
            assert_true(w && xq && x);
            for (size_t r = 0; r < n_rows; r++) {
                uint8_t *row = w + r * wrs;
                rnd_weights(t, row, n);
                const uint8_t fill = (uint8_t[]){0x00, 0xff, 0x80, 0x7f, 0x80, 0xff}[r];
                for (size_t b = 0; b < n / tkv__quant_block_elems(t); b++) {
                    uint8_t *blk = row + b * bsz;
                    size_t q0 = 2, q1 = bsz; /* the quant bytes of the block (Q5_0's and Q5_1's qh too) */
                    if (t == TKV_TYPE_Q4_1 || t == TKV_TYPE_Q5_1) q0 = 4;
                    if (t == TKV_TYPE_Q4_K || t == TKV_TYPE_Q5_K) q0 = 16;
                    if (t == TKV_TYPE_Q6_K) q0 = 0, q1 = 192;
                    if (t == TKV_TYPE_IQ4_XS) q0 = 8;
                    if (t == TKV_TYPE_MXFP4) q0 = 1;
                    if (t == TKV_TYPE_TQ1_0 || t == TKV_TYPE_TQ2_0) q0 = 0, q1 = bsz - 2;
                    if (t == TKV_TYPE_Q2_K) q0 = 16, q1 = 80;
                    if (t == TKV_TYPE_Q3_K) q0 = 0, q1 = 96;
                    if (t == TKV_TYPE_IQ1_M) q0 = 0, q1 = 48; /* qs, qh: the scales hold d */
                    /* IQ2: indices and signs (IQ2_S: its qh too); 0xff: the last codebook entries, all signs */
                    if (t == TKV_TYPE_IQ2_XS) q1 = 66;
                    if (t == TKV_TYPE_IQ2_S) q1 = 74;
                    memset(blk + q0, fill, q1 - q0);
                    if (t == TKV_TYPE_IQ1_M && r >= 4)
                        for (int j = 0; j < 4; j++) blk[48 + 2 * j] = 0xff, blk[49 + 2 * j] |= 0x0f; /* scales 7, d kept */
                    if (t == TKV_TYPE_Q6_K && r >= 4) memset(blk + 192, 0x80, 16); /* scales -128 */
                    if ((t == TKV_TYPE_Q4_K || t == TKV_TYPE_Q5_K) && r >= 4) memset(blk + 4, 0xff, 12); /* scales, mins 63 */
                    if (t == TKV_TYPE_Q2_K && r >= 4) memset(blk, 0xff, 16);      /* scales, mins 15 */
                    if (t == TKV_TYPE_Q3_K && r >= 4) memset(blk + 96, 0x00, 12); /* scales -32 */
                    /* IQ2_XS, IQ2_S: every ls 15 (IQ2_XXS's are in its quant words) */
                    if ((t == TKV_TYPE_IQ2_XS || t == TKV_TYPE_IQ2_S) && r >= 4) memset(blk + q1, 0xff, 8);
                }
            }
            for (size_t tok = 0; tok < n_tok; tok++) {
                for (size_t i = 0; i < n; i++) x[i] = (i + tok) % 3 == 0 ? -1.0f : (tok % 2 ? 1.0f : 0.5f);
                if (tok == 3)
                    for (size_t i = 0; i < n; i++) x[i] = -1.0f; /* every quant -127 */
                tkv__quant_quantize_row(at, x, xq + tok * xrs, n);
            }
            check_gemm_range(k, t, n, w, xq, n_tok, 0, n_rows, ldy, y);
            if (k->packed[t]) { /* over packed rows: 4 tokens (in registers) and 7 (through panels) */
                uint8_t *pk = aligned_alloc(64, (tkv__pack_bytes(t, n, n_rows) + 63) / 64 * 64);
                assert_non_null(pk);
                tkv__pack_rows(t, w, n, n_rows, pk);
                check_product_range(k, t, n, w, pk, xq, 4, 0, n_rows, ldy, y);
                check_product_range(k, t, n, w, pk, xq, n_tok, 0, n_rows, ldy, y);
                free(pk);
            }
            free(w);
            free(xq);
            free(x);
        }
    }
}

/* ---- activation quantizers: bit-identical -------------------------------------------- */

static void test_quantize_levels(void **state) {
    (void)state;
    const tkv_type acts[] = {TKV_TYPE_F32, TKV_TYPE_F16, TKV_TYPE_BF16, TKV_TYPE_Q8_0, TKV_TYPE_Q8_1, TKV_TYPE_Q8_K};
    const tkv__kernels *sc = tkv__kernel_table(TKV__KERNEL_SCALAR);
    const size_t n = 4096;
    float *x = malloc(n * sizeof(float));
    uint8_t *ya = malloc(4 * n + 64), *yb = malloc(4 * n + 64); /* the largest row: F32 */
    assert_true(x && ya && yb);
    for (int l = 1; l < TKV__KERNEL_LEVELS; l++) {
        const tkv__kernels *simd = tkv__kernel_table((tkv__kernel_level)l);
        if (!simd) continue;
        for (int rep = 0; rep < 20; rep++) {
            rnd_acts(x, n);
            if (rep == 1) memset(x, 0, n * sizeof(float)); /* all-zero blocks */
            if (rep == 2)                                  /* exact halves: ties of the rounding */
                for (size_t i = 0; i < n; i++) x[i] = (float)((int)(rnd() % 255) - 127) * 0.5f;
            if (rep == 3) /* equal magnitudes of both signs: which is "the max" for Q8_K */
                for (size_t i = 0; i < n; i++) x[i] = rnd() & 1 ? 3.0f : -3.0f;
            if (rep == 4) /* subnormal and huge values */
                for (size_t i = 0; i < n; i++) x[i] = i % 2 ? 1e-40f * (float)(i % 7) : 1e30f * rndf(-1, 1);
            if (rep == 5) /* one big element per block */
                for (size_t i = 0; i < n; i += 32) x[i + rnd() % 32] = rnd() & 1 ? 1000.0f : -1000.0f;
            for (size_t ai = 0; ai < sizeof acts / sizeof acts[0]; ai++) {
                const size_t bytes = tkv__quant_row_size(acts[ai], n);
                memset(ya, 0xcd, bytes + 8);
                memset(yb, 0xcd, bytes + 8);
                sc->quantize[acts[ai]](x, ya + 1, n); /* odd addresses on purpose */
                simd->quantize[acts[ai]](x, yb + 1, n);
                if (memcmp(ya, yb, bytes + 8) != 0) {
                    size_t k = 0;
                    while (ya[k] == yb[k]) k++;
                    fail_msg("%s quantize %s rep %d: byte %zu differs (scalar %02x, simd %02x)", simd->name,
                             tkv_type_name(acts[ai]), rep, k, ya[k], yb[k]);
                }
            }
        }
        /* the tail of a float row that is not a multiple of the vector width */
        for (size_t m = 1; m < 40; m++) {
            rnd_acts(x, m);
            sc->quantize[TKV_TYPE_F16](x, ya, m);
            simd->quantize[TKV_TYPE_F16](x, yb, m);
            assert_memory_equal(ya, yb, 2 * m);
        }
    }
    free(x);
    free(ya);
    free(yb);
}

/* ---- element-wise ops ------------------------------------------------------------------ */

/*
 * The SIMD ops use a polynomial exp accurate to ~2 ulp (within [-87, 88])
 * and float accumulators instead of double: relative differences to the
 * scalar ops of a few 1e-7. We allow 2e-6 relative (plus 1e-30 absolute
 * for results that underflow).
 */
static int close_rel(float a, float b, double rel) {
    return fabs((double)a - b) <= rel * fmax(fabs(a), fabs(b)) + 1e-30;
}

/* rmsnorm's scale to the bit at every level, where the SIMD sum of squares takes another order than the
   reference's sequential one: rows whose squares span 2^-140..2^60, rows whose mean is exactly halfway between
   two floats (where only the sequential order decides), a row that overflows, and every length's tail. */
static void test_rmsnorm_bits(void **state) {
    (void)state;
    const tkv__kernels *sc = tkv__kernel_table(TKV__KERNEL_SCALAR);
    enum { N = 5632 };
    float *x = malloc(N * sizeof(float)), *w = malloc(N * sizeof(float));
    float *a = malloc(N * sizeof(float)), *b = malloc(N * sizeof(float));
    assert_true(x && w && a && b);
    for (size_t i = 0; i < N; i++) w[i] = rndf(-2.0f, 2.0f);
    const size_t lens[] = {2, 15, 16, 17, 33, 64, 768, 2048, 2051, 5632};
    for (int l = 1; l < TKV__KERNEL_LEVELS; l++) {
        const tkv__kernels *simd = tkv__kernel_table((tkv__kernel_level)l);
        if (!simd) continue;
        for (int trial = 0; trial < 600; trial++) {
            const size_t n = lens[trial % (sizeof lens / sizeof lens[0])];
            const int kind = trial / 10 % 4;
            memset(x, 0, n * sizeof(float));
            if (kind == 0) /* wide: each element at its own binary exponent */
                for (size_t i = 0; i < n; i++) x[i] = ldexpf(rndf(-1.0f, 1.0f), (int)(rndf(0.0f, 100.0f)) - 70);
            else if (kind == 1) /* activations' own range */
                for (size_t i = 0; i < n; i++) x[i] = rndf(-30.0f, 30.0f);
            else if (kind == 2) { /* squares 2^-24 and 1, the rest 0: the sum 1 + 2^-24 over n a power of two is
                                     halfway between floats; elsewhere not, but near */
                x[(size_t)trial % n] = 0x1p-12f;
                x[(size_t)(trial * 7 + 1) % n] = trial % 3 ? 1.0f : -1.0f;
            } else { /* one element overflows its square: the scale is 0 */
                for (size_t i = 0; i < n; i++) x[i] = rndf(-1.0f, 1.0f);
                x[(size_t)trial % n] = 3e19f;
            }
            sc->rmsnorm(a, x, w, n, 1e-6f);
            simd->rmsnorm(b, x, w, n, 1e-6f);
            for (size_t i = 0; i < n; i++)
                if (memcmp(&a[i], &b[i], sizeof a[i]))
                    fail_msg("level %d rmsnorm kind %d n=%zu [%zu]: %.9g vs %.9g", l, kind, n, i, b[i], a[i]);
        }
        /* rows where the order of the sum decides the scale: squares 2n, then s^2 n 2^-23 (s odd) for a mean of
           2 + s^2 2^-23, halfway between two floats, then n - 2 squares of n 2^-57, each below half an ulp of
           the running sum. The sequential sum stays at halfway and its mean rounds to even; an order that adds
           the small squares together first ends above. Each row is checked to be such a row (a pairwise sum in
           float64 gives another scale) before the levels are compared on it. */
        for (size_t n = 32; n <= 2048; n *= 4)
            for (int si = 0; si < 4; si++) {
                const int sq = (int[]){3, 7, 9, 15}[si]; /* odd s where the two floats' scales differ */
                int j = 0;
                while (((size_t)2 << (2 * j)) < n) j++; /* n = 2 4^j */
                const float x0 = sqrtf(2.0f * (float)n);
                x[0] = x0, x[1] = ldexpf((float)sq, j - 11);
                for (size_t i = 2; i < n; i++) x[i] = ldexpf(x0, -28);
                double seq = 0.0, pair[2048];
                for (size_t i = 0; i < n; i++) seq += (double)(x[i] * x[i]), pair[i] = (double)(x[i] * x[i]);
                for (size_t m = n; m > 1; m /= 2)
                    for (size_t i = 0; i < m / 2; i++) pair[i] = pair[2 * i] + pair[2 * i + 1];
                const float s_seq = 1.0f / sqrtf((float)(seq / (double)n)), s_pair = 1.0f / sqrtf((float)(pair[0] / (double)n));
                assert_true(s_seq != s_pair);
                sc->rmsnorm(a, x, w, n, 0.0f);
                simd->rmsnorm(b, x, w, n, 0.0f);
                assert_true(a[0] == (x0 * s_seq) * w[0]);
                for (size_t i = 0; i < n; i++)
                    if (memcmp(&a[i], &b[i], sizeof a[i]))
                        fail_msg("level %d rmsnorm halfway n=%zu [%zu]: %.9g vs %.9g", l, n, i, b[i], a[i]);
            }
    }
    free(x), free(w), free(a), free(b);
}

static void test_ops_levels(void **state) {
    (void)state;
    const tkv__kernels *sc = tkv__kernel_table(TKV__KERNEL_SCALAR);
    const size_t lens[] = {1, 3, 8, 15, 16, 17, 64, 100, 256, 4096, 4099};
    float *x = malloc(4099 * sizeof(float)), *w = malloc(4099 * sizeof(float));
    float *g = malloc(4099 * sizeof(float)), *a = malloc(4099 * sizeof(float)), *b = malloc(4099 * sizeof(float));
    assert_true(x && w && g && a && b);
    for (int l = 1; l < TKV__KERNEL_LEVELS; l++) {
        const tkv__kernels *simd = tkv__kernel_table((tkv__kernel_level)l);
        if (!simd) continue;
        for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++) {
            const size_t n = lens[li];
            for (size_t i = 0; i < n; i++) {
                x[i] = rndf(-30.0f, 30.0f);
                w[i] = rndf(-2.0f, 2.0f);
                g[i] = rndf(-20.0f, 20.0f);
            }
            if (n > 10) x[3] = -INFINITY, x[7] = -100.0f; /* masked and tiny entries (softmax) */
            sc->rmsnorm(a, g, w, n, 1e-5f);
            simd->rmsnorm(b, g, w, n, 1e-5f);
            /* the scale as the reference forms it, to the bit (its sum of squares is sequential) */
            for (size_t i = 0; i < n; i++)
                if (memcmp(&a[i], &b[i], sizeof a[i])) fail_msg("rmsnorm n=%zu [%zu]: %.9g vs %.9g", n, i, b[i], a[i]);
            memcpy(a, x, n * sizeof(float));
            memcpy(b, x, n * sizeof(float));
            sc->softmax(a, n);
            simd->softmax(b, n);
            /* probabilities: absolute closeness at the scale of 1 */
            for (size_t i = 0; i < n; i++)
                if (!(fabsf(a[i] - b[i]) <= 2e-6f * fmaxf(a[i], 1e-6f) + 1e-30f))
                    fail_msg("softmax n=%zu [%zu]: %.9g vs %.9g", n, i, b[i], a[i]);
            if (n > 10) assert_true(b[3] == 0.0f);
            sc->silu(a, g, n);
            simd->silu(b, g, n);
            for (size_t i = 0; i < n; i++)
                if (!close_rel(a[i], b[i], 2e-6)) fail_msg("silu n=%zu [%zu] x=%g: %.9g vs %.9g", n, i, g[i], b[i], a[i]);
            sc->swiglu(a, g, w, n);
            simd->swiglu(b, g, w, n);
            for (size_t i = 0; i < n; i++)
                if (!close_rel(a[i], b[i], 2e-6)) fail_msg("swiglu n=%zu [%zu]: %.9g vs %.9g", n, i, b[i], a[i]);
            /* in place */
            memcpy(b, g, n * sizeof(float));
            simd->swiglu(b, b, w, n);
            for (size_t i = 0; i < n; i++) assert_true(close_rel(a[i], b[i], 2e-6));
        }
        /* silu over the whole useful range, including where exp saturates */
        for (int i = -2000; i <= 2000; i++) x[i + 2000] = (float)i * 0.05f;
        sc->silu(a, x, 4001);
        simd->silu(b, x, 4001);
        for (int i = 0; i < 4001; i++)
            if (!close_rel(a[i], b[i], 2e-6)) fail_msg("silu(%g): %.9g vs %.9g", x[i], b[i], a[i]);
        /* soft-capping over the whole range (either form of tanh, their border at |x| = c / 4, saturation),
           at caps 10, 30 and 50; the tail (4001 % 16) takes tanhf */
        const float caps[] = {10.0f, 30.0f, 50.0f};
        for (int ci = 0; ci < 3; ci++) {
            for (int i = -2000; i <= 2000; i++) x[i + 2000] = (float)i * caps[ci] / 400.0f;
            x[2000] = -0.0f, x[1] = 1e-30f, x[2] = NAN;
            memcpy(a, x, 4001 * sizeof(float));
            memcpy(b, x, 4001 * sizeof(float));
            sc->softcap(a, 4001, caps[ci]);
            simd->softcap(b, 4001, caps[ci]);
            assert_true(isnan(b[2]));
            for (int i = 0; i < 4001; i++)
                if (i != 2 && !close_rel(a[i], b[i], 1e-6))
                    fail_msg("softcap(%g, %g): %.9g vs %.9g", x[i], caps[ci], b[i], a[i]);
            assert_true(b[1] == a[1] && signbit(b[2000]));
        }
    }
    free(x);
    free(w);
    free(g);
    free(a);
    free(b);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dispatch),
        cmocka_unit_test(test_vec_dot_levels),
        cmocka_unit_test(test_vec_dot_extremes),
        cmocka_unit_test(test_iq1_pdep_bits),
        cmocka_unit_test(test_gemm_levels),
        cmocka_unit_test(test_gemm_extremes),
        cmocka_unit_test(test_packed_levels),
        cmocka_unit_test(test_quantize_levels),
        cmocka_unit_test(test_ops_levels),
        cmocka_unit_test(test_rmsnorm_bits),
    };
    return TU_RESULT(cmocka_run_group_tests(tests, NULL, NULL));
}
