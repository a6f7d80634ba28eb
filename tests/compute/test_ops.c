/*
 * test_ops.c — the forward-pass operations against their formulas, computed
 * here in double precision: RMSNorm, softmax, SiLU/SwiGLU, RoPE (both
 * layouts, hand-computed cases and properties) and the batched matmul, at
 * every kernel level the CPU has (forced in turn).
 */
#include "testutil.h"

#include "compute/kernels.h"
#include "compute/ops.h"
#include "compute/quant/quant.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rng = 0x2545f4914f6cdd1dull;

static float rndf(float lo, float hi) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return lo + (hi - lo) * (float)((rng >> 11) & 0xffffff) / 16777216.0f;
}

/* Run body once per supported level, with that level active. */
#define FOR_EACH_LEVEL(l)                                                                                        \
    for (int l = 0; l < TKV__KERNEL_LEVELS; l++)                                                                 \
        if (tkv__kernel_force_level((tkv__kernel_level)l) == 0)

static int teardown(void **state) {
    (void)state;
    tkv__kernel_force_level(tkv__kernel_level_best());
    return 0;
}

/* ---- RMSNorm, softmax, SiLU ----------------------------------------------------- */

static void test_rmsnorm(void **state) {
    (void)state;
    static float x[4099], w[4099], y[4099];
    const size_t lens[] = {1, 5, 64, 4096, 4099};
    FOR_EACH_LEVEL(l) {
        for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++) {
            const size_t n = lens[li];
            double ss = 0;
            for (size_t i = 0; i < n; i++) {
                x[i] = rndf(-3, 3);
                w[i] = rndf(0.5f, 1.5f);
                ss += (double)x[i] * x[i];
            }
            const double scale = 1.0 / sqrt(ss / (double)n + 1e-5);
            tkv__ops_rmsnorm(y, x, w, n, 1e-5f);
            /* float sums and one rounding per multiplication: well within 1e-5 */
            for (size_t i = 0; i < n; i++) assert_true(fabs(y[i] - x[i] * scale * w[i]) <= 1e-5 * fabs(x[i] * scale * w[i]) + 1e-12);
            /* in place */
            memcpy(y, x, n * sizeof(float));
            tkv__ops_rmsnorm(y, y, w, n, 1e-5f);
            for (size_t i = 0; i < n; i++) assert_true(fabs(y[i] - x[i] * scale * w[i]) <= 1e-5 * fabs(x[i] * scale * w[i]) + 1e-12);
        }
        /* eps dominates a zero row: output 0, not NaN */
        for (int i = 0; i < 8; i++) x[i] = 0.0f, w[i] = 1.0f;
        tkv__ops_rmsnorm(y, x, w, 8, 1e-6f);
        for (int i = 0; i < 8; i++) assert_true(y[i] == 0.0f);
        /* a hand case: x = (3, 4), mean square 12.5 */
        x[0] = 3, x[1] = 4, w[0] = 1, w[1] = 2;
        tkv__ops_rmsnorm(y, x, w, 2, 0.0f);
        assert_true(fabsf(y[0] - 3.0f / sqrtf(12.5f)) < 1e-6f && fabsf(y[1] - 8.0f / sqrtf(12.5f)) < 1e-6f);
    }
}

static void test_softmax(void **state) {
    (void)state;
    static float x[4099], in[4099];
    const size_t lens[] = {1, 2, 7, 8, 33, 256, 4099};
    FOR_EACH_LEVEL(l) {
        for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++) {
            const size_t n = lens[li];
            for (size_t i = 0; i < n; i++) in[i] = rndf(-20, 20);
            if (n > 4) in[1] = -INFINITY; /* a masked position */
            if (n > 6) in[5] = 1000.0f;   /* no overflow: the max is subtracted first */
            double max = -INFINITY, sum = 0;
            for (size_t i = 0; i < n; i++) max = fmax(max, in[i]);
            for (size_t i = 0; i < n; i++) sum += exp((double)in[i] - max);
            memcpy(x, in, n * sizeof(float));
            tkv__ops_softmax(x, n);
            double total = 0;
            for (size_t i = 0; i < n; i++) {
                const double want = exp((double)in[i] - max) / sum;
                if (!(fabs(x[i] - want) <= 1e-6 * want + 1e-12))
                    fail_msg("%s softmax n=%zu [%zu]: %.9g, want %.9g", tkv__kernel_level_name((tkv__kernel_level)l), n, i,
                             x[i], want);
                total += x[i];
            }
            assert_true(fabs(total - 1.0) < 1e-5);
            if (n > 4) assert_true(x[1] == 0.0f);
        }
        /* hand case: (0, ln 3) -> (1/4, 3/4) */
        x[0] = 0.0f, x[1] = logf(3.0f);
        tkv__ops_softmax(x, 2);
        assert_true(fabsf(x[0] - 0.25f) < 1e-6f && fabsf(x[1] - 0.75f) < 1e-6f);
        x[0] = 5.0f;
        tkv__ops_softmax(x, 1);
        assert_true(x[0] == 1.0f);
    }
}

static void test_silu_swiglu(void **state) {
    (void)state;
    static float g[1000], u[1000], y[1000];
    FOR_EACH_LEVEL(l) {
        for (int i = 0; i < 1000; i++) g[i] = rndf(-15, 15), u[i] = rndf(-2, 2);
        tkv__ops_swiglu(y, g, u, 1000);
        for (int i = 0; i < 1000; i++) {
            const double want = g[i] / (1.0 + exp(-(double)g[i])) * u[i];
            assert_true(fabs(y[i] - want) <= 2e-6 * fabs(want) + 1e-30);
        }
        tkv__ops_silu(y, g, 1000);
        for (int i = 0; i < 1000; i++) {
            const double want = g[i] / (1.0 + exp(-(double)g[i]));
            assert_true(fabs(y[i] - want) <= 2e-6 * fabs(want) + 1e-30);
        }
        /* silu(0) = 0, silu(x) ~ x for large x, ~ 0 for very negative x */
        g[0] = 0.0f, g[1] = 50.0f, g[2] = -50.0f;
        tkv__ops_silu(y, g, 3);
        assert_true(y[0] == 0.0f && y[1] == 50.0f && fabsf(y[2]) < 1e-19f);
    }
}

/* ---- RoPE ------------------------------------------------------------------------ */

/*
 * GeGLU against the reference's definition, in float as its table is built
 * (double would round some values to the neighbouring fp16): gelu (tanh
 * form) of the fp16 rounding of the gate, rounded to fp16, times up;
 * 0 at or below -10 and the gate itself at or above 10. Every fp16 value in
 * (-10, 10) as a gate, and random floats between them (their own rounding).
 */
static float f16r(double x) { return tkv__quant_f16_to_f32(tkv__quant_f32_to_f16((float)x)); }

static double gelu_ref(float x) {
    if (x <= -10.0f) return 0.0;
    if (x >= 10.0f) return x;
    const float h = f16r(x), c = 0.79788456080286535587989211986876f; /* sqrt(2 / pi) */
    return f16r(0.5f * h * (1.0f + tanhf(c * h * (1.0f + 0.044715f * h * h))));
}

static void test_geglu(void **state) {
    (void)state;
    enum { N = 1 << 16 };
    float *gate = malloc(2 * N * sizeof *gate), *up = malloc(2 * N * sizeof *up), *y = malloc(2 * N * sizeof *y);
    assert_non_null(gate);
    size_t n = 0;
    for (uint32_t h = 0; h < N; h++) { /* every finite fp16 value */
        const float x = tkv__quant_f16_to_f32((uint16_t)h);
        if (isfinite(x) && fabsf(x) <= 12.0f) gate[n] = x, up[n] = rndf(-2, 2), n++;
    }
    for (int i = 0; i < 4096; i++) gate[n] = rndf(-11, 11), up[n] = rndf(-2, 2), n++;
    gate[n] = -10.0f, up[n++] = 1.5f;
    gate[n] = 10.0f, up[n++] = 1.5f;
    tkv__ops_geglu(y, gate, up, n);
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) {
        /* the gelu value is an fp16 (or the gate); the product may round once */
        const double want = gelu_ref(gate[i]) * up[i];
        if (fabs(y[i] - want) > 1e-6 * fabs(want) + 1e-30 && bad++ < 5)
            print_error("geglu(%.9g) * %.9g = %.9g, expected %.9g\n", gate[i], up[i], y[i], want);
    }
    assert_int_equal(bad, 0);
    tkv__ops_geglu(gate, gate, up, n); /* in place */
    assert_memory_equal(gate, y, n * sizeof *y);
    free(gate);
    free(up);
    free(y);
}

static void test_rope_by_hand(void **state) {
    (void)state;
    float cs[4];
    /* head_dim 4, all dims rotated, pos 1, base 10000: theta_0 = 1, theta_1 = 10000^(-1/2) = 0.01 */
    tkv__ops_rope_cache(cs, 4, 1, 10000.0f, 1.0f);
    assert_true(fabsf(cs[0] - cosf(1.0f)) < 1e-7f && fabsf(cs[1] - sinf(1.0f)) < 1e-7f);
    assert_true(fabsf(cs[2] - cosf(0.01f)) < 1e-7f && fabsf(cs[3] - sinf(0.01f)) < 1e-7f);

    /* normal: pairs (0,1) by 1 rad and (2,3) by 0.01 rad */
    float x[4] = {1, 0, 0, 1};
    tkv__ops_rope(x, 1, 4, 4, cs, TKV__ROPE_NORMAL);
    const float want_n[4] = {cosf(1.0f), sinf(1.0f), -sinf(0.01f), cosf(0.01f)};
    for (int i = 0; i < 4; i++) assert_true(fabsf(x[i] - want_n[i]) < 1e-6f);

    /* NEOX: pairs (0,2) by 1 rad and (1,3) by 0.01 rad */
    float z[4] = {1, 0, 0, 1};
    tkv__ops_rope(z, 1, 4, 4, cs, TKV__ROPE_NEOX);
    const float want_x[4] = {cosf(1.0f), -sinf(0.01f), sinf(1.0f), cosf(0.01f)};
    for (int i = 0; i < 4; i++) assert_true(fabsf(z[i] - want_x[i]) < 1e-6f);

    /* pos 0 is the identity; two heads rotate alike; dims past n_rot stay */
    float h[12] = {1, 2, 3, 4, 5, 6, 1, 2, 3, 4, 5, 6}, c0[4];
    tkv__ops_rope_cache(c0, 4, 0, 10000.0f, 1.0f);
    tkv__ops_rope(h, 2, 6, 4, c0, TKV__ROPE_NORMAL);
    for (int i = 0; i < 12; i++) assert_true(h[i] == (float)(i % 6 + 1));
    tkv__ops_rope(h, 2, 6, 4, cs, TKV__ROPE_NEOX);
    for (int i = 0; i < 6; i++) assert_true(h[i] == h[i + 6]);
    assert_true(h[4] == 5.0f && h[5] == 6.0f && h[10] == 5.0f && h[11] == 6.0f);

    /* freq_scale: position 2 at scale 1/2 is position 1 at scale 1 (exactly) */
    float c2[4];
    tkv__ops_rope_cache(c2, 4, 2, 10000.0f, 0.5f);
    assert_memory_equal(c2, cs, sizeof cs);
    /* a negative position rotates back */
    float cm[4];
    tkv__ops_rope_cache(cm, 4, -1, 10000.0f, 1.0f);
    tkv__ops_rope(x, 1, 4, 4, cm, TKV__ROPE_NORMAL);
    const float orig[4] = {1, 0, 0, 1};
    for (int i = 0; i < 4; i++) assert_true(fabsf(x[i] - orig[i]) < 1e-6f);
}

static void test_rope_formula(void **state) {
    (void)state;
    const size_t n_head = 3, head_dim = 64, n_rot = 32;
    const float base = 10000.0f, fscale = 0.25f;
    float x[3 * 64], y[3 * 64], cs[32];
    for (int mode = 0; mode < 2; mode++) {
        const tkv__rope_mode m = mode ? TKV__ROPE_NEOX : TKV__ROPE_NORMAL;
        for (int32_t pos = 0; pos < 200; pos += 7) {
            for (size_t i = 0; i < n_head * head_dim; i++) x[i] = rndf(-1, 1);
            memcpy(y, x, sizeof x);
            tkv__ops_rope_cache(cs, n_rot, pos, base, fscale);
            tkv__ops_rope(y, n_head, head_dim, n_rot, cs, m);
            for (size_t h = 0; h < n_head; h++) {
                const float *a = x + h * head_dim, *b = y + h * head_dim;
                for (size_t i = 0; i < n_rot / 2; i++) {
                    /* theta_i = fscale * pos * base^(-2i/n_rot); the float version drifts by ~i ulp */
                    const double th = fscale * pos * pow(base, -2.0 * (double)i / (double)n_rot);
                    const size_t i0 = mode ? i : 2 * i, i1 = mode ? i + n_rot / 2 : 2 * i + 1;
                    const double w0 = a[i0] * cos(th) - a[i1] * sin(th);
                    const double w1 = a[i0] * sin(th) + a[i1] * cos(th);
                    if (!(fabs(b[i0] - w0) < 2e-5 && fabs(b[i1] - w1) < 2e-5))
                        fail_msg("mode %d pos %d head %zu pair %zu: (%g, %g) want (%g, %g)", mode, pos, h, i, b[i0], b[i1],
                                 w0, w1);
                }
                for (size_t i = n_rot; i < head_dim; i++) assert_true(a[i] == b[i]);
            }
        }
    }
}

/* Attention scores depend only on the distance between positions. */
static void test_rope_relative(void **state) {
    (void)state;
    const size_t d = 64;
    float q[64], k[64], q1[64], k1[64], q2[64], k2[64], cs[64];
    for (size_t i = 0; i < d; i++) q[i] = rndf(-1, 1), k[i] = rndf(-1, 1);
    for (int mode = 0; mode < 2; mode++) {
        const tkv__rope_mode m = mode ? TKV__ROPE_NEOX : TKV__ROPE_NORMAL;
        memcpy(q1, q, sizeof q), memcpy(k1, k, sizeof k), memcpy(q2, q, sizeof q), memcpy(k2, k, sizeof k);
        tkv__ops_rope_cache(cs, d, 10, 500000.0f, 1.0f);
        tkv__ops_rope(q1, 1, d, d, cs, m);
        tkv__ops_rope_cache(cs, d, 3, 500000.0f, 1.0f);
        tkv__ops_rope(k1, 1, d, d, cs, m);
        tkv__ops_rope_cache(cs, d, 17, 500000.0f, 1.0f);
        tkv__ops_rope(q2, 1, d, d, cs, m);
        tkv__ops_rope_cache(cs, d, 10, 500000.0f, 1.0f);
        tkv__ops_rope(k2, 1, d, d, cs, m);
        double s1 = 0, s2 = 0, n0 = 0, n1 = 0;
        for (size_t i = 0; i < d; i++) {
            s1 += (double)q1[i] * k1[i];
            s2 += (double)q2[i] * k2[i];
            n0 += (double)q[i] * q[i];
            n1 += (double)q1[i] * q1[i];
        }
        assert_true(fabs(s1 - s2) < 1e-4);
        assert_true(fabs(n0 - n1) < 1e-4); /* rotations keep the norm */
    }
}

/* ---- matmul ----------------------------------------------------------------------------- */

static void rnd_bytes(uint8_t *p, size_t n) {
    for (size_t i = 0; i < n; i++) p[i] = (uint8_t)(rndf(0, 256));
}

/* Fill every fp16 scale of a weight matrix with something sane. */
static void sane_scales(tkv_type t, uint8_t *w, size_t bytes) {
    size_t bsz = 0, at[2] = {0, 2}, nat = 1;
    switch (t) {
    case TKV_TYPE_Q8_0: bsz = 34; break;
    case TKV_TYPE_Q4_0:
    case TKV_TYPE_IQ4_NL: bsz = 18; break;
    case TKV_TYPE_Q5_0: bsz = 22; break;
    case TKV_TYPE_Q4_1: bsz = 20, nat = 2; break;
    case TKV_TYPE_Q5_1: bsz = 24, nat = 2; break;
    case TKV_TYPE_Q4_K: bsz = 144, nat = 2; break;
    case TKV_TYPE_IQ4_XS: bsz = 136; break;
    case TKV_TYPE_IQ2_XXS: bsz = 66; break;
    case TKV_TYPE_IQ2_XS: bsz = 74; break;
    case TKV_TYPE_IQ2_S: bsz = 82; break;
    case TKV_TYPE_IQ3_XXS: bsz = 98; break;
    case TKV_TYPE_IQ3_S: bsz = 110; break;
    case TKV_TYPE_Q2_K: bsz = 84, at[0] = 80, at[1] = 82, nat = 2; break;
    case TKV_TYPE_Q3_K: bsz = 110, at[0] = 108; break;
    case TKV_TYPE_TQ1_0: bsz = 54, at[0] = 52; break;
    case TKV_TYPE_TQ2_0: bsz = 66, at[0] = 64; break;
    case TKV_TYPE_IQ1_S: bsz = 50; break;
    case TKV_TYPE_Q5_K: bsz = 176, nat = 2; break;
    case TKV_TYPE_Q6_K: bsz = 210, at[0] = 208; break;
    default: break;
    }
    if (t == TKV_TYPE_IQ1_M) { /* d in the top nibbles of the four scale words */
        for (size_t b = 0; b < bytes / 56; b++) {
            const uint16_t h = tkv__quant_f32_to_f16(rndf(-0.02f, 0.02f));
            for (int j = 0; j < 4; j++) w[b * 56 + 49 + 2 * j] = (uint8_t)((w[b * 56 + 49 + 2 * j] & 0x0f) | ((h >> 4 * j) & 0x0f) << 4);
        }
        return;
    }
    if (t == TKV_TYPE_MXFP4) { /* a one-byte exponent: 2^-10 .. 2^-6 */
        for (size_t b = 0; b < bytes / 17; b++) w[b * 17] = (uint8_t)(118 + b % 5);
        return;
    }
    if (t == TKV_TYPE_F32 || t == TKV_TYPE_F16 || t == TKV_TYPE_BF16) {
        const size_t es = t == TKV_TYPE_F32 ? 4 : 2;
        for (size_t i = 0; i < bytes / es; i++) {
            const float f = rndf(-1, 1);
            uint16_t h = t == TKV_TYPE_F16 ? tkv__quant_f32_to_f16(f) : tkv__quant_f32_to_bf16(f);
            if (es == 4) memcpy(w + 4 * i, &f, 4);
            else memcpy(w + 2 * i, &h, 2);
        }
        return;
    }
    for (size_t b = 0; b < bytes / bsz; b++)
        for (size_t k = 0; k < nat; k++) {
            const uint16_t h = tkv__quant_f32_to_f16(rndf(-0.02f, 0.02f));
            memcpy(w + b * bsz + at[k], &h, 2);
        }
}

static void test_matmul(void **state) {
    (void)state;
    const tkv_type types[] = {TKV_TYPE_F32,  TKV_TYPE_F16,  TKV_TYPE_BF16, TKV_TYPE_Q8_0, TKV_TYPE_Q4_0, TKV_TYPE_Q4_1,
                              TKV_TYPE_Q5_0, TKV_TYPE_Q5_1, TKV_TYPE_Q4_K, TKV_TYPE_Q5_K, TKV_TYPE_Q6_K, TKV_TYPE_IQ4_NL,
                                        TKV_TYPE_IQ4_XS, TKV_TYPE_Q2_K, TKV_TYPE_Q3_K, TKV_TYPE_MXFP4,
                                        TKV_TYPE_TQ1_0, TKV_TYPE_TQ2_0, TKV_TYPE_IQ2_XXS, TKV_TYPE_IQ2_XS,
                                        TKV_TYPE_IQ2_S, TKV_TYPE_IQ1_S, TKV_TYPE_IQ1_M, TKV_TYPE_IQ3_XXS,
                                        TKV_TYPE_IQ3_S};
    /* 1 and 2 tokens run the level's gemv where it has one, else vec_dot per
       pair; 3 and more the tiled products where a level has them. Rows of 17
       blocks of 32 too: an odd block count takes the kernels' last-block path. */
    const size_t n_rows = 37, ldy = 41, toks[] = {1, 2, 3, 4, 5, 8, 9}, ns[] = {512, 544};
    float x[9 * 544], y[9 * 41], wf[544], xf[544];
    FOR_EACH_LEVEL(l) {
        const tkv__kernels *k = tkv__kernel_get();
        const size_t n_toks = sizeof toks / sizeof toks[0], n_types = sizeof types / sizeof types[0];
        for (size_t c = 0; c < 2 * n_toks * n_types; c++) { /* every type, every batch size, both lengths */
            const size_t n_tok = toks[c % n_toks];
            const tkv_type t = types[c / n_toks % n_types];
            const size_t n = ns[c / n_toks / n_types];
            if (n % tkv__quant_block_elems(t)) continue;
            const size_t wrs = tkv__quant_row_size(t, n), xrs = tkv__ops_act_row_size(t, n);
            assert_int_equal(xrs, tkv__quant_row_size(tkv__quant_vec_dot_type(t), n));
            uint8_t *w = malloc(n_rows * wrs), *xq = malloc(n_tok * xrs + 1);
            assert_true(w && xq);
            rnd_bytes(w, n_rows * wrs);
            sane_scales(t, w, n_rows * wrs);
            for (size_t i = 0; i < n_tok * n; i++) x[i] = rndf(-1, 1);
            tkv__ops_quantize_acts(t, x, n_tok, n, xq + 1); /* (n_tok, xrs), at an odd address */
            for (size_t i = 0; i < n_tok * ldy; i++) y[i] = -12345.0f;
            /* two disjoint row ranges, as two threads would run them */
            tkv__ops_matmul(t, w, n, 5, 20, xq + 1, n_tok, y, ldy);
            tkv__ops_matmul(t, w, n, 20, 29, xq + 1, n_tok, y, ldy);
            for (size_t tk = 0; tk < n_tok; tk++) {
                uint8_t row[2560];
                tkv__quant_quantize_row(tkv__quant_vec_dot_type(t), x + tk * n, row, n);
                /* the batched quantization is the per-row one, bit for bit */
                assert_memory_equal(row, xq + 1 + tk * xrs, xrs);
                for (size_t r = 0; r < ldy; r++) {
                    const float got = y[tk * ldy + r];
                    if (r < 5 || r >= 29) {
                        assert_true(got == -12345.0f); /* outside [r0, r1): untouched */
                        continue;
                    }
                    assert_true(got == k->vec_dot[t](n, w + r * wrs, row));
                    /* and near the float product of the dequantized row with x */
                    tkv__quant_dequantize_row(t, w + r * wrs, wf, n);
                    double want = 0, mag = 0, sumw = 0;
                    for (size_t i = 0; i < n; i++) {
                        xf[i] = x[tk * n + i];
                        want += (double)wf[i] * xf[i];
                        mag += fabs((double)wf[i]) * fabs(xf[i]);
                        sumw += fabs((double)wf[i]);
                    }
                    /*
                     * |x| <= 1, so each quantized activation is off by at most
                     * 1/254 + 2^-11 (8-bit step, fp16 scale; test_quant.c derives
                     * this), bf16 by 2^-8; Q4_1/Q5_1 add |m| 64 2^-11 per block
                     * (|m| <= 0.02 here); float rounding 1e-5 of sum|w x|.
                     */
                    double bound = 0.0046 * sumw + 1e-5 * mag + 1e-6;
                    if (t == TKV_TYPE_Q4_1 || t == TKV_TYPE_Q5_1) bound += (double)(n / 32) * 0.02 * 64 * 0x1p-11;
                    if (!(fabs(got - want) <= bound))
                        fail_msg("%s %s row %zu tok %zu: %g, want %g (mag %g)", k->name, tkv_type_name(t), r, tk, got, want,
                                 mag);
                }
            }
            free(w);
            free(xq);
        }
        (void)l;
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_rmsnorm, teardown),
        cmocka_unit_test_teardown(test_softmax, teardown),
        cmocka_unit_test_teardown(test_silu_swiglu, teardown),
        cmocka_unit_test(test_geglu),
        cmocka_unit_test(test_rope_by_hand),
        cmocka_unit_test(test_rope_formula),
        cmocka_unit_test(test_rope_relative),
        cmocka_unit_test_teardown(test_matmul, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
