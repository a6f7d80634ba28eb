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
 * L2-normed, Mamba-2's with its bias) and the gated norms. Tolerance: the
 * float result is within 2e-5 (0.01 + |oracle|) after 64 tokens: each step's
 * sums of d_k (or d_state) products round at about 2^-24 relative, and the
 * decays keep the state bounded, so the error stays near a few ulps of the
 * state's scale.
 */
#include "testutil.h"

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
    const tkv__delta_dims d = {.d_conv = 4, .d_k = 32, .n_k = 1, .n_v = 1, .d_v = 48, .channels = 0};
    float S[48 * 32], q[32], k[32], v[48], o[48];
    double Sd[32][48]; /* the math's S: k index, v index */
    for (uint32_t j = 0; j < d.d_v; j++)
        for (uint32_t i = 0; i < d.d_k; i++) S[j * d.d_k + i] = 0.1f * rnd(), Sd[i][j] = S[j * d.d_k + i];
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
            for (uint32_t i = 0; i < d.d_k; i++) near(S[j * d.d_k + i], Sd[i][j], "delta net S", t, j * d.d_k + i);
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
    const tkv__mamba_dims d = {.d_conv = 4, .d_state = 16, .n_group = 1, .n_head = 1, .d_inner = 24, .head_dim = 24};
    float S[24 * 16], x[24], B[16], C[16], y[24];
    double Sd[24][16];
    for (size_t i = 0; i < 24 * 16; i++) S[i] = 0.1f * rnd(), Sd[i / 16][i % 16] = S[i];
    const float A = -0.8f, D = 0.7f, bias = 0.2f;
    for (int t = 0; t < T; t++) {
        for (int i = 0; i < 24; i++) x[i] = 2 * rnd();
        for (int j = 0; j < 16; j++) B[j] = rnd(), C[j] = rnd();
        const float dt = 1.5f * rnd();
        tkv__mamba_step(&d, S, x, B, C, dt, bias, A, D, y);
        const double sp = softplus_d((double)dt + bias), dA = exp(sp * A);
        for (int i = 0; i < 24; i++) {
            double yi = 0;
            for (int j = 0; j < 16; j++) {
                Sd[i][j] = Sd[i][j] * dA + sp * x[i] * B[j];
                yi += Sd[i][j] * C[j];
                near(S[i * 16 + j], Sd[i][j], "mamba S", t, (size_t)i * 16 + j);
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

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_delta_step), cmocka_unit_test(test_delta_conv_and_norm),
        cmocka_unit_test(test_mamba_step), cmocka_unit_test(test_mamba_conv_and_norm),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
