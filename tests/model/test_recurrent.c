/*
 * test_recurrent.c — the recurrent layers' per-token steps (model/deltanet.c,
 * model/mamba2.c) against float64 oracles written from their formulas, over
 * runs of tokens long enough for the state's rounding to accumulate:
 *
 *   delta net, per v head with S (d_k x d_v):
 *     S = exp(g) S;  S = S + k (beta (v - S^T k))^T;  o = S^T q / sqrt(d_k)
 *   Mamba-2, per head with S (head_dim x d_state):
 *     dt = softplus(dt + bias);  S = exp(dt A) S + dt x B^T;  y = S C + D x
 *
 * and the causal convs (silu of the taps' sum, the delta net's q and k
 * L2-normed, Mamba-2's with its bias) and the gated norms, at every kernel
 * level this CPU has (the steps are kernel entries with SIMD twins; shapes
 * with row lengths on and off the register width). Tolerance: the
 * float result is within 2e-5 (0.01 + |oracle|) after 64 tokens: each step's
 * sums of d_k (or d_state) products round at about 2^-24 relative, and the
 * decays keep the state bounded, so the error stays near a few ulps of the
 * state's scale.
 */
#include "testutil.h"

#include "compute/kernels.h"
#include "model/deltanet.h"
#include "model/mamba2.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { T = 64 };

static uint32_t seed = 2026;
static float rnd(void) { /* uniform in [-1, 1) */
    seed = seed * 1664525u + 1013904223u;
    return (float)(seed >> 8) / (float)(1u << 23) - 1.0f;
}

static double silu_d(double x) { return x / (1.0 + exp(-x)); }
static double softplus_d(double x) { return x <= 20 ? log1p(exp(x)) : x; }

static void near(double got, double want, const char *what, int t, size_t i) {
    if (!(fabs(got - want) <= 2e-5 * (0.01 + fabs(want))))
        fail_msg("%s: token %d element %zu: %.9g, float64 oracle %.9g", what, t, i, got, want);
}

/* One v head through T tokens, S starting from random values; o and S checked at every token. */
static void test_delta_step(void **state) {
    (void)state;
    const tkv__delta_dims d = {.d_conv = 4, .d_k = 36, .n_k = 1, .n_v = 1, .d_v = 44, .channels = 0}; /* d_v 44: 16 x 2 + 12, 8 x 5 + 4: lanes and tails */
    float S[44 * 36], q[36], k[36], v[44], o[44];
    double Sd[36][44]; /* the math's S: k index, v index */
    for (uint32_t j = 0; j < d.d_v; j++)
        for (uint32_t i = 0; i < d.d_k; i++) S[i * d.d_v + j] = 0.1f * rnd(), Sd[i][j] = S[i * d.d_v + j];
    for (int t = 0; t < T; t++) {
        double nq = 0, nk = 0;
        for (uint32_t i = 0; i < d.d_k; i++) q[i] = rnd(), k[i] = rnd(), nq += q[i] * q[i], nk += k[i] * k[i];
        for (uint32_t i = 0; i < d.d_k; i++) q[i] /= (float)sqrt(nq), k[i] /= (float)sqrt(nk); /* L2-normed, as fed */
        for (uint32_t j = 0; j < d.d_v; j++) v[j] = 2 * rnd();
        const float g = -0.3f * (1 + rnd()), beta = 0.5f + 0.5f * rnd();
        tkv__deltanet_step(&d, S, q, k, v, g, beta, o);
        const double decay = exp((double)g);
        for (uint32_t i = 0; i < d.d_k; i++)
            for (uint32_t j = 0; j < d.d_v; j++) Sd[i][j] *= decay;
        for (uint32_t j = 0; j < d.d_v; j++) {
            double kv = 0;
            for (uint32_t i = 0; i < d.d_k; i++) kv += Sd[i][j] * k[i];
            const double delta = beta * (v[j] - kv);
            for (uint32_t i = 0; i < d.d_k; i++) Sd[i][j] += k[i] * delta;
        }
        for (uint32_t j = 0; j < d.d_v; j++) {
            double oj = 0;
            for (uint32_t i = 0; i < d.d_k; i++) oj += Sd[i][j] * q[i];
            near(o[j], oj / sqrt((double)d.d_k), "delta net o", t, j);
            for (uint32_t i = 0; i < d.d_k; i++) near(S[i * d.d_v + j], Sd[i][j], "delta net S", t, i * d.d_v + j);
        }
    }
}

static void test_delta_conv_and_norm(void **state) {
    (void)state;
    const tkv__delta_dims d = {.d_conv = 4, .d_k = 16, .n_k = 2, .n_v = 4, .d_v = 8, .channels = 2 * 2 * 16 + 4 * 8};
    float rows_mem[4][96], w[96 * 4], c[96];
    const float *rows[4];
    for (int r = 0; r < 4; r++) {
        for (uint32_t ch = 0; ch < d.channels; ch++) rows_mem[r][ch] = 2 * rnd();
        rows[r] = rows_mem[r];
    }
    for (size_t i = 0; i < 96 * 4; i++) w[i] = rnd();
    tkv__deltanet_conv(&d, w, rows, 1e-6f, c);
    double want[96];
    for (uint32_t ch = 0; ch < d.channels; ch++) {
        double acc = 0;
        for (int k = 0; k < 4; k++) acc += (double)w[ch * 4 + k] * rows_mem[k][ch];
        want[ch] = silu_d(acc);
    }
    for (uint32_t h = 0; h < 2 * d.n_k; h++) { /* q heads then k heads, L2-normed */
        double ss = 0;
        for (uint32_t i = 0; i < d.d_k; i++) ss += want[h * d.d_k + i] * want[h * d.d_k + i];
        for (uint32_t i = 0; i < d.d_k; i++) want[h * d.d_k + i] /= fmax(sqrt(ss), 1e-6);
    }
    for (uint32_t ch = 0; ch < d.channels; ch++) near(c[ch], want[ch], "delta conv", 0, ch);

    float o[32], z[32], nw[8];
    double od[32];
    for (int i = 0; i < 32; i++) o[i] = 3 * rnd(), z[i] = 2 * rnd(), od[i] = o[i];
    for (int i = 0; i < 8; i++) nw[i] = 1 + 0.5f * rnd();
    tkv__deltanet_gate_norm(&d, o, z, nw, 1e-6f);
    for (uint32_t h = 0; h < d.n_v; h++) {
        double ss = 0;
        for (uint32_t j = 0; j < d.d_v; j++) ss += od[h * 8 + j] * od[h * 8 + j];
        const double s = 1 / sqrt(ss / d.d_v + 1e-6);
        for (uint32_t j = 0; j < d.d_v; j++)
            near(o[h * 8 + j], od[h * 8 + j] * s * nw[j] * silu_d(z[h * 8 + j]), "delta gated norm", 0, h * 8 + j);
    }
}

/* One Mamba-2 head through T tokens. */
static void test_mamba_step(void **state) {
    (void)state;
    enum { DS = 20, HD = 28 }; /* head_dim 28: 16 + 12, 8 x 3 + 4: lanes and tails */
    const tkv__mamba_dims d = {.d_conv = 4, .d_state = DS, .n_group = 1, .n_head = 1, .d_inner = HD, .head_dim = HD};
    float S[HD * DS], x[HD], B[DS], C[DS], y[HD];
    double Sd[HD][DS];
    for (size_t i = 0; i < HD * DS; i++) S[i] = 0.1f * rnd(), Sd[i % HD][i / HD] = S[i]; /* S: DS rows of HD */
    const float A = -0.8f, D = 0.7f, bias = 0.2f;
    for (int t = 0; t < T; t++) {
        for (int i = 0; i < HD; i++) x[i] = 2 * rnd();
        for (int j = 0; j < DS; j++) B[j] = rnd(), C[j] = rnd();
        const float dt = 1.5f * rnd();
        tkv__mamba_step(&d, S, x, B, C, dt, bias, A, D, y);
        const double sp = softplus_d((double)dt + bias), dA = exp(sp * A);
        for (int i = 0; i < HD; i++) {
            double yi = 0;
            for (int j = 0; j < DS; j++) {
                Sd[i][j] = Sd[i][j] * dA + sp * x[i] * B[j];
                yi += Sd[i][j] * C[j];
                near(S[j * HD + i], Sd[i][j], "mamba S", t, (size_t)j * HD + i);
            }
            near(y[i], yi + D * (double)x[i], "mamba y", t, (size_t)i);
        }
    }
}

static void test_mamba_conv_and_norm(void **state) {
    (void)state;
    const tkv__mamba_dims d = {.d_conv = 4, .d_state = 8, .n_group = 2, .n_head = 4, .d_inner = 32, .head_dim = 8,
                               .channels = 32 + 2 * 2 * 8};
    float rows_mem[4][64], w[64 * 4], bias[64], xbc[64];
    const float *rows[4];
    for (int r = 0; r < 4; r++) {
        for (uint32_t ch = 0; ch < d.channels; ch++) rows_mem[r][ch] = 2 * rnd();
        rows[r] = rows_mem[r];
    }
    for (size_t i = 0; i < 64 * 4; i++) w[i] = rnd();
    for (int i = 0; i < 64; i++) bias[i] = 0.3f * rnd();
    tkv__mamba_conv(&d, w, bias, rows, xbc);
    for (uint32_t ch = 0; ch < d.channels; ch++) {
        double acc = bias[ch];
        for (int k = 0; k < 4; k++) acc += (double)w[ch * 4 + k] * rows_mem[k][ch];
        near(xbc[ch], silu_d(acc), "mamba conv", 0, ch);
    }
    float y[32], z[32], nw[32];
    double yd[32];
    for (int i = 0; i < 32; i++) y[i] = 3 * rnd(), z[i] = 2 * rnd(), nw[i] = 1 + 0.5f * rnd();
    for (int i = 0; i < 32; i++) yd[i] = y[i] * silu_d(z[i]);
    tkv__mamba_gate_norm(&d, y, z, nw, 1e-5f);
    for (uint32_t g = 0; g < d.n_group; g++) { /* each group of d_inner / n_group on its own */
        double ss = 0;
        for (int i = 0; i < 16; i++) ss += yd[g * 16 + i] * yd[g * 16 + i];
        const double s = 1 / sqrt(ss / 16 + 1e-5);
        for (int i = 0; i < 16; i++) near(y[g * 16 + i], yd[g * 16 + i] * s * nw[g * 16 + i], "mamba gated norm", 0, g * 16 + i);
    }
}

/* Every level's steps give the scalar level's bits (kernels.h), on output counts on and off the lanes. */
static void test_levels_bit_equal(void **state) {
    (void)state;
    const tkv__kernels *sc = tkv__kernel_table(TKV__KERNEL_SCALAR);
    static const uint32_t shapes[][2] = {{32, 32}, {36, 44}, {128, 128}, {16, 8}, {7, 3}, {64, 17}};
    float S0[128 * 128], S1[128 * 128], q[128], k[128], v[128], o0[128], o1[128];
    for (int l = 1; l <= (int)tkv__kernel_level_best(); l++) {
        const tkv__kernels *kt = tkv__kernel_table((tkv__kernel_level)l);
        if (!kt) continue;
        for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
            const uint32_t a = shapes[si][0], b = shapes[si][1];
            for (uint32_t i = 0; i < a * b; i++) S0[i] = S1[i] = 0.2f * rnd();
            for (int t = 0; t < 8; t++) {
                for (uint32_t i = 0; i < 128; i++) q[i] = rnd(), k[i] = rnd(), v[i] = rnd();
                sc->delta_step(S0, q, k, v, 0.9f, 0.6f, 0.125f, a, b, o0);
                kt->delta_step(S1, q, k, v, 0.9f, 0.6f, 0.125f, a, b, o1);
                if (memcmp(o0, o1, b * sizeof *o0) || memcmp(S0, S1, (size_t)a * b * sizeof *S0))
                    fail_msg("%s delta step, %u x %u, token %d: not the scalar level's bits", kt->name, a, b, t);
                sc->ssm_step(S0, q, k, v, 0.7f, 0.8f, b, a, o0); /* hd = b, ds = a */
                kt->ssm_step(S1, q, k, v, 0.7f, 0.8f, b, a, o1);
                if (memcmp(o0, o1, b * sizeof *o0) || memcmp(S0, S1, (size_t)a * b * sizeof *S0))
                    fail_msg("%s Mamba-2 step, %u x %u, token %d: not the scalar level's bits", kt->name, a, b, t);
            }
        }
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_delta_step), cmocka_unit_test(test_delta_conv_and_norm),
        cmocka_unit_test(test_mamba_step), cmocka_unit_test(test_mamba_conv_and_norm),
    };
    const struct CMUnitTest bits[] = {cmocka_unit_test(test_levels_bit_equal)};
    int failed = cmocka_run_group_tests(bits, NULL, NULL);
    for (int l = 0; l <= (int)tkv__kernel_level_best(); l++) {
        if (tkv__kernel_force_level((tkv__kernel_level)l) != 0) continue;
        seed = 2026; /* the same values at every level */
        failed += _cmocka_run_group_tests(tkv__kernel_level_name((tkv__kernel_level)l), tests,
                                          sizeof tests / sizeof tests[0], NULL, NULL);
    }
    return failed;
}
