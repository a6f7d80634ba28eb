/*
 * test_quantize.c — the weight quantizers of src/tools/quantize.c: relative RMS
 * error of quantize + dequantize on random rows for every type, the exact
 * rules of the simple formats on hand-made blocks, the reference's own bytes
 * for one tensor of every type, the ternary layouts, float round trips,
 * zero rows, scale invariance, unaligned output, non-finite inputs.
 */
#include "testutil.h"

#include "compute/quant/quant.h"
#include "format/gguf.h"
#include "tools/quantize.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

/* ---- helpers ------------------------------------------------------------------- */

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static uint64_t rng_next(void) { /* splitmix64 */
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static double rng_unit(void) { return ((double)(rng_next() >> 11) + 0.5) * 0x1p-53; } /* (0, 1) */

static float rng_gauss(void) { return (float)(sqrt(-2.0 * log(rng_unit())) * cos(6.283185307179586 * rng_unit())); }

/* Quantize x (n) to type and back into y (n). */
static void round_trip(tkv_type type, const float *x, float *y, size_t n, size_t misalign) {
    const size_t bytes = tkv__quant_row_size(type, n);
    uint8_t *buf = malloc(bytes + misalign);
    assert_non_null(buf);
    tkv__quantize_row(type, x, buf + misalign, n);
    tkv__quant_dequantize_row(type, buf + misalign, y, n);
    free(buf);
}

/* ||x - y|| / ||x|| */
static double rel_rms(const float *x, const float *y, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        num += ((double)x[i] - y[i]) * ((double)x[i] - y[i]);
        den += (double)x[i] * x[i];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

/* ---- error bounds on random rows ------------------------------------------------- */

/*
 * Relative RMS error over 64 rows of 4096 normal values. Measured (worst
 * row, this code and seed): F16 0.021%, BF16 0.17%, Q8_0 0.55%, Q6_K 1.8%,
 * Q5_K 3.7%, Q5_1 3.9%, Q5_0 4.4%, Q4_K 7.4%, IQ4_NL 7.8%, IQ4_XS 7.8%,
 * Q4_1 8.1%, Q4_0 8.8%, Q3_K 15.6%, Q2_K 30.6%, TQ1_0 = TQ2_0 84% (ternary
 * with d = the block's largest magnitude zeroes everything under half of
 * it: these types are for weights trained ternary, test_ternary covers
 * them on such rows); these
 * match the step sizes (Q8_0: amax/127 ~ 0.018 for 32 normals, rms step
 * error 0.018/sqrt(12) = 0.52%). The bounds leave ~20% headroom: a layout
 * or rounding bug gives errors of 30% and more.
 */
static void test_rms_error_normal(void **state) {
    (void)state;
    static const struct {
        tkv_type type;
        double bound;
    } cases[] = {
        {TKV_TYPE_F32, 0.0},     {TKV_TYPE_F16, 0.0003},  {TKV_TYPE_BF16, 0.002},
        {TKV_TYPE_Q8_0, 0.0066}, {TKV_TYPE_Q6_K, 0.022},  {TKV_TYPE_Q5_1, 0.047},
        {TKV_TYPE_Q5_K, 0.045},  {TKV_TYPE_Q5_0, 0.053},  {TKV_TYPE_Q4_1, 0.097},
        {TKV_TYPE_Q4_K, 0.089},  {TKV_TYPE_Q4_0, 0.106},  {TKV_TYPE_IQ4_NL, 0.094},
        {TKV_TYPE_IQ4_XS, 0.095}, {TKV_TYPE_Q3_K, 0.19}, {TKV_TYPE_Q2_K, 0.37}, {TKV_TYPE_TQ2_0, 0.87},
        {TKV_TYPE_TQ1_0, 0.87},
    };
    enum { ROWS = 64, N = 4096 };
    float *x = malloc(sizeof(float) * N), *y = malloc(sizeof(float) * N);
    assert_non_null(x);
    assert_non_null(y);
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        rng_state = 42;
        double sum = 0, worst = 0;
        for (int r = 0; r < ROWS; r++) {
            for (int i = 0; i < N; i++) x[i] = rng_gauss();
            round_trip(cases[c].type, x, y, N, 0);
            const double e = rel_rms(x, y, N);
            sum += e;
            if (e > worst) worst = e;
        }
        print_message("%-5s mean %.5f worst %.5f (bound %.4f)\n", tkv_type_name(cases[c].type), sum / ROWS, worst,
                      cases[c].bound);
        if (worst > cases[c].bound)
            fail_msg("%s: relative RMS error %.5f over the bound %.4f", tkv_type_name(cases[c].type), worst,
                     cases[c].bound);
    }
    free(x);
    free(y);
}

/*
 * Rows with 8 elements per 4096 scaled by 20 (outliers, as real weights
 * have): an outlier widens the step of its whole block, so the formats with
 * small groups and fitted scales suffer least. Measured (worst of 16 rows):
 * Q8_0 1.1%, Q6_K 3.1%, Q5_K 4.6%, Q4_K 9.4%, Q4_0 14.1%.
 */
static void test_rms_error_outliers(void **state) {
    (void)state;
    static const struct {
        tkv_type type;
        double bound;
    } cases[] = {
        {TKV_TYPE_Q8_0, 0.013}, {TKV_TYPE_Q6_K, 0.037}, {TKV_TYPE_Q4_K, 0.112}, {TKV_TYPE_Q5_K, 0.056},
        {TKV_TYPE_Q4_0, 0.169},
    };
    enum { N = 4096 };
    float x[N], y[N];
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        rng_state = 7;
        double worst = 0;
        for (int r = 0; r < 16; r++) {
            for (int i = 0; i < N; i++) x[i] = rng_gauss();
            for (int k = 0; k < 8; k++) x[rng_next() % N] *= 20.0f;
            round_trip(cases[c].type, x, y, N, 0);
            const double e = rel_rms(x, y, N);
            if (e > worst) worst = e;
        }
        print_message("outliers %-5s worst %.5f (bound %.4f)\n", tkv_type_name(cases[c].type), worst, cases[c].bound);
        if (worst > cases[c].bound)
            fail_msg("%s with outliers: relative RMS error %.5f over %.4f", tkv_type_name(cases[c].type), worst,
                     cases[c].bound);
    }
}

/* The relative error does not depend on the magnitude of the row (within fp16's range). */
static void test_scale_invariance(void **state) {
    (void)state;
    static const tkv_type types[] = {TKV_TYPE_Q8_0, TKV_TYPE_Q4_0, TKV_TYPE_Q4_1, TKV_TYPE_Q5_0, TKV_TYPE_Q5_1,
                                     TKV_TYPE_Q4_K, TKV_TYPE_Q5_K, TKV_TYPE_Q6_K, TKV_TYPE_Q2_K, TKV_TYPE_Q3_K,
                                     TKV_TYPE_IQ4_NL, TKV_TYPE_IQ4_XS, TKV_TYPE_TQ1_0, TKV_TYPE_TQ2_0};
    enum { N = 1024 };
    float x[N], xs[N], y[N];
    rng_state = 3;
    for (int i = 0; i < N; i++) x[i] = rng_gauss();
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
        round_trip(types[t], x, y, N, 0);
        const double base = rel_rms(x, y, N);
        const float factors[] = {1e-2f, 0.125f, 64.0f, 500.0f};
        for (size_t f = 0; f < 4; f++) {
            for (int i = 0; i < N; i++) xs[i] = x[i] * factors[f];
            round_trip(types[t], xs, y, N, 0);
            const double e = rel_rms(xs, y, N);
            if (fabs(e - base) > 0.1 * base + 1e-4)
                fail_msg("%s: error %.5f at scale %g, %.5f at scale 1", tkv_type_name(types[t]), e,
                         (double)factors[f], base);
        }
    }
}

/* ---- the exact rules of the simple formats -------------------------------------------- */

static void test_q8_0_rule(void **state) {
    (void)state;
    float x[32];
    for (int j = 0; j < 32; j++) x[j] = (float)(j - 10) * 0.37f; /* amax = 21 * 0.37 at j = 31 */
    tkv__block_q8_0 b;
    tkv__quantize_row(TKV_TYPE_Q8_0, x, &b, 32);
    const float d = 21 * 0.37f / 127.0f;
    assert_int_equal(b.d, tkv__quant_f32_to_f16(d));
    for (int j = 0; j < 32; j++) assert_int_equal(b.qs[j], (int)roundf(x[j] * (1.0f / d)));
    assert_int_equal(b.qs[31], 127);
    assert_int_equal(b.qs[10], 0);
    /* ties round away from zero (roundf), unlike the activation quantizer */
    float t[32] = {0};
    t[0] = 127.0f;
    t[1] = 2.5f;
    t[2] = -0.5f;
    tkv__quantize_row(TKV_TYPE_Q8_0, t, &b, 32);
    assert_int_equal(b.qs[1], 3);
    assert_int_equal(b.qs[2], -1);
}

/* Q4_0/Q5_0: the element of largest magnitude is stored as quant 0, i.e. exactly -offset * d. */
static void test_sym_rule(void **state) {
    (void)state;
    float x[32], y[32];
    for (int j = 0; j < 32; j++) x[j] = 0.1f * (float)((j * 7) % 13) - 0.6f;
    x[5] = -2.0f; /* the signed max: d = 2/8 = 0.25 (Q4_0), 2/16 (Q5_0), both exact in fp16 */
    tkv__block_q4_0 b4;
    tkv__quantize_row(TKV_TYPE_Q4_0, x, &b4, 32);
    assert_true(tkv__quant_f16_to_f32(b4.d) == 0.25f);
    assert_int_equal(b4.qs[5] & 0x0f, 0);
    tkv__quant_dequantize_row(TKV_TYPE_Q4_0, &b4, y, 32);
    assert_true(y[5] == -2.0f);
    for (int j = 0; j < 32; j++) assert_true(fabsf(y[j] - x[j]) <= 0.125f + 1e-6f);
    x[5] = 2.0f; /* positive max: d = -0.25, q = 0 again; the other end saturates at 15 */
    tkv__quantize_row(TKV_TYPE_Q4_0, x, &b4, 32);
    assert_true(tkv__quant_f16_to_f32(b4.d) == -0.25f);
    assert_int_equal(b4.qs[5] & 0x0f, 0);
    tkv__block_q5_0 b5;
    tkv__quantize_row(TKV_TYPE_Q5_0, x, &b5, 32);
    assert_true(tkv__quant_f16_to_f32(b5.d) == -0.125f);
    tkv__quant_dequantize_row(TKV_TYPE_Q5_0, &b5, y, 32);
    assert_true(y[5] == 2.0f);
    for (int j = 0; j < 32; j++) assert_true(fabsf(y[j] - x[j]) <= 0.0625f + 1e-6f);
}

/* Q4_1/Q5_1: m = the minimum, d = range / 15 (31); the min and the max are stored exactly (up to fp16). */
static void test_affine_rule(void **state) {
    (void)state;
    float x[32], y[32];
    for (int j = 0; j < 32; j++) x[j] = 1.0f + 0.05f * (float)((j * 5) % 17);
    x[3] = 0.5f;
    x[9] = 3.5f; /* range 3: d = 0.2 (Q4_1) */
    tkv__block_q4_1 b;
    tkv__quantize_row(TKV_TYPE_Q4_1, x, &b, 32);
    assert_true(tkv__quant_f16_to_f32(b.m) == 0.5f);
    assert_int_equal(b.d, tkv__quant_f32_to_f16(0.2f));
    assert_int_equal(b.qs[3] & 0x0f, 0);
    assert_int_equal(b.qs[9] & 0x0f, 15);
    tkv__quant_dequantize_row(TKV_TYPE_Q4_1, &b, y, 32);
    for (int j = 0; j < 32; j++) assert_true(fabsf(y[j] - x[j]) <= 0.1f + 2e-3f);
    tkv__block_q5_1 b5;
    tkv__quantize_row(TKV_TYPE_Q5_1, x, &b5, 32);
    tkv__quant_dequantize_row(TKV_TYPE_Q5_1, &b5, y, 32);
    for (int j = 0; j < 32; j++) assert_true(fabsf(y[j] - x[j]) <= 0.05f + 2e-3f);
}

/* K formats: quants span the range (a group whose values cover it uses quants 0 and the top). */
static void test_k_ranges(void **state) {
    (void)state;
    float x[256], y[256];
    for (int i = 0; i < 256; i++) x[i] = (float)(i % 32) / 31.0f * (float)(1 + i / 32); /* ramps 0..g+1 */
    static const tkv_type types[] = {TKV_TYPE_Q4_K, TKV_TYPE_Q5_K, TKV_TYPE_Q6_K};
    static const float tol[] = {0.06f, 0.03f, 0.02f}; /* of the group's range (at most 8) */
    for (int t = 0; t < 3; t++) {
        round_trip(types[t], x, y, 256, 0);
        for (int i = 0; i < 256; i++) {
            const float range = (float)(1 + i / 32);
            if (fabsf(y[i] - x[i]) > tol[t] * range)
                fail_msg("%s: element %d: %g became %g", tkv_type_name(types[t]), i, (double)x[i], (double)y[i]);
        }
    }
}

/* ---- against the reference's own blocks ------------------------------------------------- */

/*
 * ../shared/models/parity holds one random model quantized by the reference
 * from F32 to each type, and its F16 conversion. Requantizing the F16
 * weights (within 2^-11 of the F32 originals) to each tensor's type must
 * give the reference's error to within 1%, and mostly the same quants:
 * the same rule on slightly different inputs. Measured: relative errors
 * equal to 3 digits on every tensor; identical values over whole files
 * (output.weight is Q6_K in all but Q8_0) Q8_0 75%, Q4_0 99.3%, Q5_0 99.2%,
 * Q4_1 85%, Q5_1 84%, Q4_K_M 82%, Q5_K_M 73%, Q6_K 90%, Q2_K 83%, Q3_K_S 92%,
 * IQ4_NL 91%, IQ4_XS 95%, TQ1_0 = TQ2_0 97.7% (a block scale one
 * fp16 ulp away moves many quants of its block by one: Q8_0 and the
 * fitted formats feel it most).
 */
static void test_against_reference_blocks(void **state) {
    (void)state;
    static const struct {
        const char *file;
        double min_same; /* fraction of dequantized values identical to the reference's */
    } files[] = {
        {"Q8_0", 0.65}, {"Q4_0", 0.98}, {"Q5_0", 0.98}, {"Q4_1", 0.75}, {"Q5_1", 0.75},
        {"Q4_K_M", 0.7}, {"Q5_K_M", 0.62}, {"Q6_K", 0.8}, {"Q2_K", 0.75}, {"Q3_K_S", 0.85}, {"IQ4_NL", 0.85},
        {"IQ4_XS", 0.88}, {"TQ1_0", 0.95}, {"TQ2_0", 0.95},
    };
    char path[512];
    tkv_model *src;
    snprintf(path, sizeof path, "%s", tu_shared("models/parity/parity-F16.gguf"));
    assert_int_equal(tkv_model_load(path, NULL, &src), TKV_OK);
    for (size_t f = 0; f < sizeof files / sizeof files[0]; f++) {
        tkv_model *ref;
        snprintf(path, sizeof path, "%s", tu_shared("models/parity/parity-"));
        strncat(path, files[f].file, sizeof path - strlen(path) - 1);
        strncat(path, ".gguf", sizeof path - strlen(path) - 1);
        assert_int_equal(tkv_model_load(path, NULL, &ref), TKV_OK);
        size_t n_same = 0, n_total = 0;
        for (size_t i = 0; i < tkv_model_tensor_count(ref); i++) {
            tkv_tensor_info rt, st;
            assert_int_equal(tkv_model_tensor_at(ref, i, &rt), TKV_OK);
            if (rt.n_dims < 2) continue;
            assert_int_equal(tkv_model_tensor_find(src, rt.name, &st), TKV_OK);
            const size_t n = (size_t)rt.n_elems;
            float *x = malloc(n * sizeof *x), *mine = malloc(n * sizeof *mine), *theirs = malloc(n * sizeof *theirs);
            uint8_t *q = malloc((size_t)rt.n_bytes);
            assert_true(x && mine && theirs && q);
            tkv__quant_dequantize_row(st.type, st.data, x, n);
            tkv__quantize_row(rt.type, x, q, n);
            tkv__quant_dequantize_row(rt.type, q, mine, n);
            tkv__quant_dequantize_row(rt.type, rt.data, theirs, n);
            const double e_mine = rel_rms(x, mine, n), e_ref = rel_rms(x, theirs, n);
            if (e_mine > 1.01 * e_ref + 1e-6)
                fail_msg("%s %s (%s): error %.6f, the reference's %.6f", files[f].file, rt.name,
                         tkv_type_name(rt.type), e_mine, e_ref);
            for (size_t j = 0; j < n; j++) n_same += mine[j] == theirs[j];
            n_total += n;
            free(x), free(mine), free(theirs), free(q);
        }
        const double same = (double)n_same / (double)n_total;
        print_message("parity-%-6s %.4f of the values identical\n", files[f].file, same);
        if (same < files[f].min_same)
            fail_msg("parity-%s: only %.4f of the values identical (expected >= %.2f)", files[f].file, same,
                     files[f].min_same);
        tkv_model_free(ref);
    }
    tkv_model_free(src);
}

/*
 * The reference's quantizer (llama-quantize at 3f545bec, one thread) given
 * parity-F16.gguf itself, not the F32 file the parity files came from, wrote
 * blk.0.ffn_up.weight (768 rows of 256) as below in its Q2_K, Q3_K_S, Q4_K_S,
 * Q5_K_S, Q6_K, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL, IQ4_XS, TQ1_0 and TQ2_0
 * files; the XXH64 (seed 0) of those bytes. The same rows quantized here
 * must give the same bytes: the same rules, the same float rounding.
 */
static void test_reference_bytes(void **state) {
    (void)state;
    static const struct {
        tkv_type type;
        uint64_t xxh64;
    } cases[] = {
        {TKV_TYPE_Q2_K, 0x90e85f26fa3e694full},   {TKV_TYPE_Q3_K, 0x789ef47f0e9cf92bull},
        {TKV_TYPE_Q4_K, 0x31ce88c487a20bbcull},   {TKV_TYPE_Q5_K, 0x2ecb4638a73be1a2ull},
        {TKV_TYPE_Q6_K, 0x56de382720288c69ull},   {TKV_TYPE_Q8_0, 0x2730312ff17532daull},
        {TKV_TYPE_Q4_0, 0xf414cbcec61b6cc0ull},   {TKV_TYPE_Q4_1, 0x11b9c4bc708a8c60ull},
        {TKV_TYPE_Q5_0, 0x206830a3def3f0c5ull},   {TKV_TYPE_Q5_1, 0x2414f853d00075acull},
        {TKV_TYPE_IQ4_NL, 0x37bfc4e6eae027bcull}, {TKV_TYPE_IQ4_XS, 0x005bfa01c107a856ull},
        {TKV_TYPE_TQ1_0, 0x217725c8e660035aull},  {TKV_TYPE_TQ2_0, 0xe877c16d999a33a1ull},
    };
    tkv__gguf *g;
    assert_int_equal(tkv__gguf_open(tu_shared("models/parity/parity-F16.gguf"), &g), TKV_OK);
    const tkv__gguf_tensor *t = tkv__gguf_tensor_find(g, "blk.0.ffn_up.weight");
    assert_non_null(t);
    assert_int_equal(t->type, TKV_TYPE_F16);
    const size_t n = (size_t)t->n_elems;
    float *x = malloc(n * sizeof *x);
    uint8_t *q = malloc(n * 2);
    assert_true(x && q);
    tkv__quant_dequantize_row(TKV_TYPE_F16, g->data + t->offset, x, n);
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        tkv__quantize_row(cases[c].type, x, q, n);
        const uint64_t h = XXH64(q, tkv__quant_row_size(cases[c].type, n), 0);
        if (h != cases[c].xxh64)
            fail_msg("%s: XXH64 %016llx, the reference's %016llx", tkv_type_name(cases[c].type),
                     (unsigned long long)h, (unsigned long long)cases[c].xxh64);
    }
    free(x);
    free(q);
    tkv__gguf_free(g);
}

/*
 * Ternary weights: rows of d * {-1, 0, +1} (d exact in fp16) come back
 * exactly in both layouts, and the reference's two parity files, which hold
 * the same ternary weights, turn into each other byte for byte: parity-TQ2_0
 * dequantized and quantized to TQ1_0 is parity-TQ1_0, and back.
 */
static void test_ternary(void **state) {
    (void)state;
    enum { N = 1024 };
    float x[N], y[N];
    rng_state = 13;
    for (int i = 0; i < N; i++) x[i] = (float)((int)(rng_next() % 3) - 1) * (i < 512 ? 0.0625f : 3.5f);
    x[0] = 0.0625f, x[600] = -3.5f; /* every block reaches its scale */
    round_trip(TKV_TYPE_TQ1_0, x, y, N, 1);
    assert_memory_equal(x, y, sizeof x);
    round_trip(TKV_TYPE_TQ2_0, x, y, N, 3);
    assert_memory_equal(x, y, sizeof x);
    tkv__gguf *g1, *g2;
    assert_int_equal(tkv__gguf_open(tu_shared("models/parity/parity-TQ1_0.gguf"), &g1), TKV_OK);
    assert_int_equal(tkv__gguf_open(tu_shared("models/parity/parity-TQ2_0.gguf"), &g2), TKV_OK);
    int n_ternary = 0;
    for (size_t i = 0; i < g1->n_tensors; i++) {
        const tkv__gguf_tensor *a = &g1->tensors[i], *b = tkv__gguf_tensor_find(g2, a->name.s);
        assert_non_null(b);
        if (a->type != TKV_TYPE_TQ1_0) continue;
        assert_int_equal(b->type, TKV_TYPE_TQ2_0);
        const size_t n = (size_t)a->n_elems;
        float *w = malloc(n * sizeof *w);
        uint8_t *q = malloc((size_t)b->n_bytes + (size_t)a->n_bytes);
        assert_true(w && q);
        tkv__quant_dequantize_row(TKV_TYPE_TQ2_0, g2->data + b->offset, w, n);
        tkv__quantize_row(TKV_TYPE_TQ1_0, w, q, n);
        assert_memory_equal(q, g1->data + a->offset, (size_t)a->n_bytes);
        tkv__quant_dequantize_row(TKV_TYPE_TQ1_0, g1->data + a->offset, w, n);
        tkv__quantize_row(TKV_TYPE_TQ2_0, w, q, n);
        assert_memory_equal(q, g2->data + b->offset, (size_t)b->n_bytes);
        free(w);
        free(q);
        n_ternary++;
    }
    assert_int_equal(n_ternary, 14); /* 7 matrices in each of 2 layers */
    tkv__gguf_free(g1);
    tkv__gguf_free(g2);
}

/* ---- floats, zeros, alignment, non-finite ------------------------------------------------- */

static void test_float_round_trips(void **state) {
    (void)state;
    enum { N = 4096 };
    float x[N], y[N];
    rng_state = 11;
    for (int i = 0; i < N; i++) x[i] = rng_gauss() * 100.0f;
    round_trip(TKV_TYPE_F32, x, y, N, 3);
    assert_memory_equal(x, y, sizeof x);
    /* F16/BF16: the conversions of compute/quant/quant.h, element by element */
    uint16_t h[N];
    tkv__quantize_row(TKV_TYPE_F16, x, h, N);
    for (int i = 0; i < N; i++) assert_int_equal(h[i], tkv__quant_f32_to_f16(x[i]));
    tkv__quantize_row(TKV_TYPE_BF16, x, h, N);
    for (int i = 0; i < N; i++) assert_int_equal(h[i], tkv__quant_f32_to_bf16(x[i]));
    /* values that are representable come back exactly */
    for (int i = 0; i < N; i++) x[i] = tkv__quant_f16_to_f32((uint16_t)(rng_next() & 0x7bff));
    round_trip(TKV_TYPE_F16, x, y, N, 1);
    assert_memory_equal(x, y, sizeof x);
    for (int i = 0; i < N; i++) x[i] = tkv__quant_bf16_to_f32((uint16_t)(rng_next() & 0x7f7f));
    round_trip(TKV_TYPE_BF16, x, y, N, 1);
    assert_memory_equal(x, y, sizeof x);
}

static void test_zero_rows(void **state) {
    (void)state;
    static const tkv_type types[] = {TKV_TYPE_F16,  TKV_TYPE_BF16,   TKV_TYPE_Q8_0,   TKV_TYPE_Q4_0,
                                     TKV_TYPE_Q4_1, TKV_TYPE_Q5_0,   TKV_TYPE_Q5_1,   TKV_TYPE_Q4_K,
                                     TKV_TYPE_Q5_K, TKV_TYPE_Q6_K,   TKV_TYPE_Q2_K,   TKV_TYPE_Q3_K,
                                     TKV_TYPE_IQ4_NL, TKV_TYPE_IQ4_XS, TKV_TYPE_TQ1_0, TKV_TYPE_TQ2_0};
    float x[512] = {0}, y[512];
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
        memset(y, 0x55, sizeof y);
        round_trip(types[t], x, y, 512, 0);
        for (int i = 0; i < 512; i++)
            if (y[i] != 0.0f) fail_msg("%s: zero row gave %g at %d", tkv_type_name(types[t]), (double)y[i], i);
    }
    /* a constant row (one block zero, one block constant) */
    for (int i = 256; i < 512; i++) x[i] = 0.75f;
    for (size_t t = 2; t < sizeof types / sizeof types[0]; t++) {
        round_trip(types[t], x, y, 512, 0);
        for (int i = 0; i < 512; i++)
            if (fabsf(y[i] - x[i]) > 0.01f)
                fail_msg("%s: constant row gave %g at %d", tkv_type_name(types[t]), (double)y[i], i);
    }
}

/* The same bytes whatever the output's alignment (blocks are packed). */
static void test_unaligned_output(void **state) {
    (void)state;
    static const tkv_type types[] = {TKV_TYPE_Q8_0,   TKV_TYPE_Q4_0,   TKV_TYPE_Q5_1,  TKV_TYPE_Q4_K,
                                     TKV_TYPE_Q5_K,   TKV_TYPE_Q6_K,   TKV_TYPE_F16,   TKV_TYPE_Q2_K,
                                     TKV_TYPE_Q3_K,   TKV_TYPE_IQ4_NL, TKV_TYPE_IQ4_XS, TKV_TYPE_TQ1_0,
                                     TKV_TYPE_TQ2_0};
    float x[512];
    rng_state = 5;
    for (int i = 0; i < 512; i++) x[i] = rng_gauss();
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
        const size_t bytes = tkv__quant_row_size(types[t], 512);
        uint8_t *a = malloc(bytes), *b = malloc(bytes + 1);
        assert_non_null(a);
        assert_non_null(b);
        tkv__quantize_row(types[t], x, a, 512);
        tkv__quantize_row(types[t], x, b + 1, 512);
        assert_memory_equal(a, b + 1, bytes);
        free(a);
        free(b);
    }
}

/*
 * NaN, infinity and huge ranges give unspecified blocks but no crash and no
 * sanitizer report (also none from clang's float-cast-overflow and
 * float-divide-by-zero checks, which -fsanitize=undefined leaves out).
 */
static void test_non_finite(void **state) {
    (void)state;
    float x[256];
    for (int i = 0; i < 256; i++) x[i] = (float)i;
    x[3] = NAN;
    x[100] = INFINITY;
    x[200] = -INFINITY;
    uint8_t buf[2048];
    for (int t = 0; t < TKV_TYPE_COUNT; t++) {
        if (!tkv__quantize_supported((tkv_type)t)) continue;
        assert_true(tkv__quant_row_size((tkv_type)t, 256) <= sizeof buf);
        tkv__quantize_row((tkv_type)t, x, buf, 256);
    }
    /* finite, but with a range beyond float's: the fits must not divide by zero */
    for (int i = 0; i < 256; i++) x[i] = (i & 1) ? 3e38f : -3e38f;
    for (int t = 0; t < TKV_TYPE_COUNT; t++)
        if (tkv__quantize_supported((tkv_type)t)) tkv__quantize_row((tkv_type)t, x, buf, 256);
    assert_false(tkv__quantize_supported(TKV_TYPE_Q8_K));
    assert_false(tkv__quantize_supported(TKV_TYPE_IQ2_XXS));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rms_error_normal), cmocka_unit_test(test_rms_error_outliers),
        cmocka_unit_test(test_scale_invariance), cmocka_unit_test(test_q8_0_rule),
        cmocka_unit_test(test_sym_rule),         cmocka_unit_test(test_affine_rule),
        cmocka_unit_test(test_k_ranges),         cmocka_unit_test(test_against_reference_blocks),
        cmocka_unit_test(test_reference_bytes), cmocka_unit_test(test_ternary),
        cmocka_unit_test(test_float_round_trips),
        cmocka_unit_test(test_zero_rows),        cmocka_unit_test(test_unaligned_output),
        cmocka_unit_test(test_non_finite),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
