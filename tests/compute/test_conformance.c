/*
 * test_conformance.c — the conformance matrix (issue 31): every weight type
 * the library supports x every kernel entry x every kernel level this CPU
 * has, on shapes drawn at random per run, against the scalar oracle and an
 * independent double-precision expectation.
 *
 * Entries, per weight type and level:
 *   quantize   the activation quantizer of the type's vec_dot type
 *   dequant    the row dequantization the embedding lookup (get_rows)
 *              and the K/V reads use, run with the level active
 *   vec_dot    the single-row dot product
 *   gemm       the tiled product (where the level has one)
 *   gemv       the few-token product (where the level has one)
 *   packed     the product over rows packed by tkv__pack_rows (where one)
 *   lanes      the float rows' batch order (F32/F16/BF16, where one)
 *   matmul     tkv__ops_quantize_acts + tkv__ops_matmul(_packed) with the
 *              level active, split over 1..3 threads of a pool the way the
 *              forward pass splits them (rows; whole groups when packed)
 * and the attention primitives of every level (attention.h; only F16 K/V
 * rows have level entries, the other cache types are read through dequant).
 *
 * The forward pass's own use of these entries on threads (one buffer of
 * quantized activations shared by its products) is tests/model/test_threads.c.
 *
 * Shapes: row length from one block to several thousand elements; row
 * counts that are and are not multiples of the tiles (2, 8), the pack group
 * (16) and the thread split; 1 to 70 tokens; 1 to 3 threads. The seed is
 * printed; TKV_CONFORMANCE_SEED=<n> repeats a run. TKV_CONFORMANCE_SIZE=small
 * (or the argument --small) draws fewer and smaller shapes: the sanitizer
 * build runs that.
 *
 * Tolerances, from each type's arithmetic:
 *   - activation quantizers: bit for bit the scalar ones (kernels.h).
 *   - dequantization: bit for bit the scalar one at every level; and the
 *     double-precision dot of the dequantized rows must agree with the
 *     scalar vec_dot (two independent decoders of the same blocks).
 *   - vec_dot vs scalar: every level computes the same exact integer sums
 *     per block (or sub-block); they differ only in the float operations on
 *     them: each product with the scales (a few ulp) and the order of the
 *     T additions (T = blocks, or elements for float rows). Either side's
 *     error is at most about (T + 4) u M, M = sum of |terms| <= sum over
 *     elements of (|w| + 2 |offset|) |a| (offset: the additive part of a
 *     weight, m or dmin * min), u = 2^-24; we allow 4 (T + 4) u M.
 *     Q4_0, IQ4_NL, MXFP4, Q4_K and Q5_K are block-reduced at every level: the same bits.
 *   - scalar vec_dot vs the double dot of the dequantized rows: the same
 *     bound plus 1e-6 M (Q8_1's s is an fp16 rounding of d * sum(q)).
 *   - gemm, gemv, packed, matmul: bit for bit the level's vec_dot (the
 *     contract of kernels.h); hence within the bound above of the scalar.
 *   - lanes: another summation order of n products: 4 (n + 4) u M.
 *   - attention: dot, mad, scale, widen16 and the _rows forms bit for bit
 *     (same operations, same order: attention.h); the float forms (any
 *     order) within 4 (n + 4) u M of the scalar ones.
 */
#include "testutil.h"

#include "compute/attention.h"
#include "compute/kernels.h"
#include "compute/ops.h"
#include "compute/quant/quant.h"
#include "compute/quant/iq.h"
#include "compute/quant/repack.h"
#include "compute/threadpool.h"

#include <inttypes.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* ---- configuration and random numbers ------------------------------------------ */

static uint64_t g_seed;
static int g_small;
static int g_failures; /* failures reported in the current cmocka test */
static uint64_t rng;

static uint64_t rnd64(void) { /* splitmix64: every seed, 0 included, gives a good stream */
    uint64_t z = (rng += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
static uint32_t rnd(void) { return (uint32_t)(rnd64() >> 32); }
static size_t pick(size_t lo, size_t hi) { return lo + (size_t)(rnd64() % (hi - lo + 1)); } /* [lo, hi] */
static float rndf(float lo, float hi) { return lo + (hi - lo) * (float)(rnd() >> 8) / 16777216.0f; }

/* Each cmocka test draws from its own stream of the run's seed, so one can
   be repeated alone and the order of the tests changes nothing. */
static void reseed(uint64_t salt) { rng = g_seed ^ (salt * 0xd1342543de82ef95ull); }

#define MAX_REPORTS 12
/* Report a failure with its context; the test fails at its end. */
#define REPORT(...)                                                                                                \
    do {                                                                                                           \
        if (g_failures++ < MAX_REPORTS) print_error(__VA_ARGS__);                                                  \
    } while (0)

static void end_test(const char *what) {
    if (g_failures)
        fail_msg("%s: %d failure(s) (seed %" PRIu64 "; TKV_CONFORMANCE_SEED=%" PRIu64 " repeats it)", what, g_failures,
                 g_seed, g_seed);
}

/* ---- random weights and activations --------------------------------------------- */

static void put16(uint8_t *p, uint16_t v) { memcpy(p, &v, 2); }

/* A sane fp16 scale: random sign, magnitude 2^-12 .. 2^-4. */
static uint16_t rnd_scale(void) {
    const float m = ldexpf(rndf(1.0f, 2.0f), -12 + (int)(rnd() % 9));
    return tkv__quant_f32_to_f16(rnd() & 1 ? -m : m);
}

/* Where each block's fp16 scales are (offsetof the block structs), -1 for none. */
typedef struct scale_at {
    tkv_type t;
    int at[2];
} scale_at;

static const scale_at scale_table[] = {
    {TKV_TYPE_Q8_0, {offsetof(tkv__block_q8_0, d), -1}},
    {TKV_TYPE_Q4_0, {offsetof(tkv__block_q4_0, d), -1}},
    {TKV_TYPE_Q4_1, {offsetof(tkv__block_q4_1, d), offsetof(tkv__block_q4_1, m)}},
    {TKV_TYPE_Q5_0, {offsetof(tkv__block_q5_0, d), -1}},
    {TKV_TYPE_Q5_1, {offsetof(tkv__block_q5_1, d), offsetof(tkv__block_q5_1, m)}},
    {TKV_TYPE_IQ4_NL, {offsetof(tkv__block_iq4_nl, d), -1}},
    {TKV_TYPE_Q2_K, {offsetof(tkv__block_q2_K, d), offsetof(tkv__block_q2_K, dmin)}},
    {TKV_TYPE_Q3_K, {offsetof(tkv__block_q3_K, d), -1}},
    {TKV_TYPE_Q4_K, {offsetof(tkv__block_q4_K, d), offsetof(tkv__block_q4_K, dmin)}},
    {TKV_TYPE_Q5_K, {offsetof(tkv__block_q5_K, d), offsetof(tkv__block_q5_K, dmin)}},
    {TKV_TYPE_Q6_K, {offsetof(tkv__block_q6_K, d), -1}},
    {TKV_TYPE_IQ4_XS, {offsetof(tkv__block_iq4_xs, d), -1}},
    {TKV_TYPE_TQ1_0, {offsetof(tkv__block_tq1_0, d), -1}},
    {TKV_TYPE_TQ2_0, {offsetof(tkv__block_tq2_0, d), -1}},
    {TKV_TYPE_IQ2_XXS, {offsetof(tkv__block_iq2_xxs, d), -1}},
    {TKV_TYPE_IQ2_XS, {offsetof(tkv__block_iq2_xs, d), -1}},
    {TKV_TYPE_IQ2_S, {offsetof(tkv__block_iq2_s, d), -1}},
    {TKV_TYPE_IQ3_XXS, {offsetof(tkv__block_iq3_xxs, d), -1}},
    {TKV_TYPE_IQ3_S, {offsetof(tkv__block_iq3_s, d), -1}},
    {TKV_TYPE_IQ1_S, {offsetof(tkv__block_iq1_s, d), -1}},
};

/*
 * n elements of type t at w: random bytes for the quants (any bit pattern
 * is a valid quant), then sane scales where the block keeps them; float
 * rows get values in [-1, 1).
 */
static void rnd_weights(tkv_type t, uint8_t *w, size_t n) {
    const size_t bytes = tkv__quant_row_size(t, n), be = tkv__quant_block_elems(t);
    const size_t bs = tkv__quant_row_size(t, be), nb = n / be;
    for (size_t i = 0; i < bytes; i++) w[i] = (uint8_t)rnd();
    if (t == TKV_TYPE_F32) {
        for (size_t i = 0; i < n; i++) memcpy(w + 4 * i, &(float){rndf(-1.0f, 1.0f)}, 4);
    } else if (t == TKV_TYPE_F16 || t == TKV_TYPE_BF16) {
        for (size_t i = 0; i < n; i++)
            put16(w + 2 * i, t == TKV_TYPE_F16 ? tkv__quant_f32_to_f16(rndf(-1, 1)) : tkv__quant_f32_to_bf16(rndf(-1, 1)));
    } else if (t == TKV_TYPE_MXFP4) { /* the E8M0 exponent byte: 2^-12 .. 2^-4 */
        for (size_t b = 0; b < nb; b++) w[b * bs + offsetof(tkv__block_mxfp4, e)] = (uint8_t)(116 + rnd() % 9);
    } else if (t == TKV_TYPE_IQ1_M) { /* fp16 d in the top nibbles of the four scale words */
        for (size_t b = 0; b < nb; b++) {
            uint8_t *sc = w + b * bs + offsetof(tkv__block_iq1_m, scales);
            const uint16_t h = rnd_scale();
            for (int j = 0; j < 4; j++) sc[2 * j + 1] = (uint8_t)((sc[2 * j + 1] & 0x0f) | ((h >> (4 * j)) & 0x0f) << 4);
        }
    } else {
        const scale_at *s = NULL;
        for (size_t i = 0; i < sizeof scale_table / sizeof scale_table[0]; i++)
            if (scale_table[i].t == t) s = &scale_table[i];
        if (!s) fail_msg("rnd_weights: no scale layout for %s", tkv_type_name(t));
        for (size_t b = 0; b < nb; b++)
            for (int k = 0; k < 2; k++)
                if (s->at[k] >= 0) put16(w + b * bs + (size_t)s->at[k], rnd_scale());
    }
}

/* n activations in blocks of 32 of varied magnitude, a few exact zeros and,
   now and then, a block of one sign or all zero. */
static void rnd_acts(float *x, size_t n) {
    float scale = 1.0f;
    int kind = 0;
    for (size_t i = 0; i < n; i++) {
        if (i % 32 == 0) scale = ldexpf(1.0f, (int)(rnd() % 12) - 6), kind = (int)(rnd() % 16);
        const float v = rnd() % 61 == 0 ? 0.0f : rndf(-scale, scale);
        x[i] = kind == 0 ? 0.0f : kind == 1 ? fabsf(v) : v;
    }
}

/*
 * The additive part of each dequantized weight (m for Q4_1/Q5_1, -dmin * min
 * for the K types, the shift of the IQ1 types), which the products sum apart
 * from the quants': it bounds the magnitude of the float terms.
 */
static void weight_offsets(tkv_type t, const uint8_t *w, size_t n, const float *wf, float *off) {
    for (size_t i = 0; i < n; i++) off[i] = 0.0f;
    const size_t be = tkv__quant_block_elems(t), bs = tkv__quant_row_size(t, be);
    for (size_t i = 0; i < n; i++) {
        const uint8_t *b = w + i / be * bs;
        uint16_t h;
        if (t == TKV_TYPE_Q4_1 || t == TKV_TYPE_Q5_1) {
            memcpy(&h, b + offsetof(tkv__block_q4_1, m), 2);
            off[i] = tkv__quant_f16_to_f32(h);
        } else if (t == TKV_TYPE_Q4_K || t == TKV_TYPE_Q5_K) {
            uint8_t sc, mn;
            memcpy(&h, b + offsetof(tkv__block_q4_K, dmin), 2);
            tkv__quant_k4_scale_min((int)(i % 256 / 32), b + offsetof(tkv__block_q4_K, scales), &sc, &mn);
            off[i] = tkv__quant_f16_to_f32(h) * mn;
        } else if (t == TKV_TYPE_Q2_K) {
            memcpy(&h, b + offsetof(tkv__block_q2_K, dmin), 2);
            off[i] = tkv__quant_f16_to_f32(h) * (float)(b[offsetof(tkv__block_q2_K, scales) + i % 256 / 16] >> 4);
        } else if (t == TKV_TYPE_IQ1_S || t == TKV_TYPE_IQ1_M) {
            off[i] = fabsf(wf[i]); /* the shift, 1/8 of the scale: |grid + shift| >= 1/8 */
        } else if (t == TKV_TYPE_TQ1_0 || t == TKV_TYPE_TQ2_0) {
            memcpy(&h, b + bs - 2, 2); /* the -1, taken off through the activation's sums */
            off[i] = fabsf(tkv__quant_f16_to_f32(h));
        }
    }
}

/* ---- shapes --------------------------------------------------------------------- */

typedef struct shape {
    size_t n, nr, n_tok;
    int threads;
} shape;

/* Shape k of a type: the first the smallest, the others drawn. */
static shape draw_shape(tkv_type t, int k) {
    const size_t be = tkv__quant_block_elems(t);
    shape s = {be == 1 ? 1 : be, 1, 1, 1};
    if (k == 0) return s;
    size_t nb;
    const unsigned r = rnd() % 10;
    if (be == 1) { /* float rows: any length, a multiple of 16 half the time (the lanes products) */
        nb = r < 3 ? pick(1, 40) : pick(41, g_small ? 600 : 4200);
        if (rnd() & 1) nb = (nb + 15) / 16 * 16;
    } else if (be == 32) {
        nb = r < 4 ? pick(1, 8) : r < 8 ? pick(9, g_small ? 40 : 70) : pick(71, g_small ? 80 : 140);
    } else {
        nb = r < 5 ? pick(1, 3) : pick(4, g_small ? 6 : 17);
    }
    s.n = nb * be;
    /* rows: any count, or near a multiple of the pack group (16) */
    s.nr = rnd() % 3 == 0 ? pick(1, 4) * 16 + pick(0, 2) - 1 : pick(1, 70);
    s.n_tok = rnd() % 3 == 0 ? pick(1, TKV__GEMV_MAX_TOK + 1) : pick(1, 70);
    s.threads = (int)pick(1, 3);
    /* the scalar oracle runs every (row, token) pair: keep it bounded */
    const size_t budget = g_small ? 150000 : 2500000;
    while (s.n * s.nr * s.n_tok > budget) {
        if (s.n_tok >= s.nr && s.n_tok > 1) s.n_tok = (s.n_tok + 1) / 2;
        else if (s.nr > 1) s.nr = (s.nr + 1) / 2;
        else break;
    }
    return s;
}

/* ---- the products through the ops layer, on a pool -------------------------------- */

typedef struct ops_job {
    tkv_type t;
    size_t n, nr, n_tok;
    const float *x;       /* (n_tok, n) */
    uint8_t *xq;          /* (n_tok, act row) */
    const uint8_t *w;     /* (nr, row) */
    const uint8_t *pk;    /* packed rows or NULL */
    float *y;             /* (n_tok, ldy) */
    size_t ldy;
    tkv__pool *pool;
    int nth_seen;
} ops_job;

/* As forward.c's acts_for and matmul: tokens quantized by share, a
   barrier, then rows by share (whole groups of packed rows). */
static void ops_task(void *arg, int ith, int nth) {
    ops_job *j = arg;
    if (ith == 0) j->nth_seen = nth;
    size_t t0, t1, r0, r1;
    tkv__split(j->n_tok, ith, nth, &t0, &t1);
    const size_t rs = tkv__ops_act_row_size(j->t, j->n);
    if (t1 > t0) tkv__ops_quantize_acts(j->t, j->x + t0 * j->n, t1 - t0, j->n, j->xq + t0 * rs);
    tkv__pool_barrier(j->pool);
    if (j->pk) {
        const size_t G = TKV__PACK_ROWS;
        tkv__split((j->nr + G - 1) / G, ith, nth, &r0, &r1);
        r0 *= G, r1 = r1 * G < j->nr ? r1 * G : j->nr;
        if (r1 > r0) tkv__ops_matmul_packed(j->t, j->pk, j->n, r0, r1, j->xq, j->n_tok, j->y, j->ldy);
    } else {
        tkv__split(j->nr, ith, nth, &r0, &r1);
        if (r1 > r0) tkv__ops_matmul(j->t, j->w, j->n, r0, r1, j->xq, j->n_tok, j->y, j->ldy);
    }
    tkv__pool_barrier(j->pool);
}

static tkv__pool *pools[4]; /* pools[k]: k threads */

/* ---- one type on one shape ------------------------------------------------------- */

static const float SENTINEL = -7.25e30f;

/* y (n_tok rows of ldy) must hold want in [0, nr) bit for bit and the sentinel past it. */
static void check_bits(const char *entry, const tkv__kernels *k, tkv_type t, const shape *s, const float *y,
                       size_t ldy, const float *want) {
    for (size_t tok = 0; tok < s->n_tok; tok++)
        for (size_t r = 0; r < ldy; r++) {
            const float got = y[tok * ldy + r];
            if (r >= s->nr) {
                if (memcmp(&got, &SENTINEL, sizeof got) != 0)
                    REPORT("%s %s %s n=%zu rows=%zu tokens=%zu: wrote y[%zu][%zu] past the rows\n", k->name, entry,
                           tkv_type_name(t), s->n, s->nr, s->n_tok, tok, r);
                continue;
            }
            const float w = want[tok * s->nr + r];
            if (memcmp(&got, &w, sizeof got) != 0) {
                REPORT("%s %s %s n=%zu rows=%zu tokens=%zu threads=%d: row %zu token %zu: %.9g, vec_dot %.9g\n",
                       k->name, entry, tkv_type_name(t), s->n, s->nr, s->n_tok, s->threads, r, tok, got, w);
                return;
            }
        }
}

static void fill_sentinel(float *y, size_t count) {
    for (size_t i = 0; i < count; i++) y[i] = SENTINEL;
}

static void check_shape(tkv_type t, const shape *s) {
    const tkv__kernels *sc = tkv__kernel_table(TKV__KERNEL_SCALAR);
    const tkv_type at = tkv__quant_vec_dot_type(t);
    const size_t n = s->n, nr = s->nr, nt = s->n_tok;
    const size_t wrs = tkv__quant_row_size(t, n), xrs = tkv__quant_row_size(at, n), ldy = nr + 3;
    /* odd addresses: blocks must work at any alignment */
    uint8_t *wbuf = malloc(nr * wrs + 1), *xbuf = malloc(nt * xrs + 3), *xq2 = malloc(nt * xrs + 1);
    float *x = malloc(nt * n * sizeof(float)), *wf = malloc(n * sizeof(float)), *wf2 = malloc(n * sizeof(float));
    float *af = malloc(nt * n * sizeof(float)), *off = malloc(n * sizeof(float));
    float *S = malloc(nr * nt * sizeof(float)), *V = malloc(nr * nt * sizeof(float));
    double *tol = malloc(nr * nt * sizeof(double)), *tol_lanes = malloc(nr * nt * sizeof(double));
    float *y = malloc(nt * ldy * sizeof(float));
    assert_true(wbuf && xbuf && xq2 && x && wf && wf2 && af && off && S && V && tol && tol_lanes && y);
    uint8_t *w = wbuf + 1, *xq = xbuf + 3;
    for (size_t r = 0; r < nr; r++) rnd_weights(t, w + r * wrs, n);
    for (size_t tok = 0; tok < nt; tok++) {
        rnd_acts(x + tok * n, n);
        sc->quantize[at](x + tok * n, xq + tok * xrs, n);
        tkv__quant_dequantize_row(at, xq + tok * xrs, af + tok * n, n);
    }
    const size_t T = tkv__quant_block_elems(t) == 1 ? n : n / tkv__quant_block_elems(t);

    /* the scalar oracle, checked against the double dot of the dequantized rows */
    for (size_t r = 0; r < nr; r++) {
        tkv__quant_dequantize_row(t, w + r * wrs, wf, n);
        weight_offsets(t, w + r * wrs, n, wf, off);
        for (size_t tok = 0; tok < nt; tok++) {
            const float *a = af + tok * n;
            const uint8_t *aq = xq + tok * xrs;
            double mag = 0, ref = 0;
            for (size_t i = 0; i < n; i++) {
                mag += (fabs(wf[i]) + 2 * fabs(off[i])) * fabs(a[i]);
                ref += (double)wf[i] * a[i];
            }
            if (at == TKV_TYPE_Q8_1) /* the offset term reads the block's s, an fp16 of d * sum(q) */
                for (size_t b = 0; b < n / 32; b++) {
                    uint16_t s16;
                    memcpy(&s16, aq + b * sizeof(tkv__block_q8_1) + offsetof(tkv__block_q8_1, s), 2);
                    double sum_a = 0;
                    for (size_t i = 32 * b; i < 32 * b + 32; i++) sum_a += a[i];
                    ref += (double)off[32 * b] * ((double)tkv__quant_f16_to_f32(s16) - sum_a);
                }
            const size_t e = tok * nr + r;
            tol[e] = 4.0 * (double)(T + 4) * 0x1p-24 * mag + 1e-30;
            tol_lanes[e] = 4.0 * (double)(n + 4) * 0x1p-24 * mag + 1e-30;
            S[e] = sc->vec_dot[t](n, w + r * wrs, aq);
            if (!(fabs(S[e] - ref) <= tol[e] + 1e-6 * mag))
                REPORT("scalar vec_dot %s n=%zu row %zu token %zu: %.9g, dequantized rows' dot %.9g (|diff| %.3g)\n",
                       tkv_type_name(t), n, r, tok, S[e], ref, fabs(S[e] - ref));
        }
    }

    const tkv__kernel_level best = tkv__kernel_level_best();
    for (int l = 0; l <= (int)best; l++) {
        const tkv__kernels *k = tkv__kernel_table((tkv__kernel_level)l);
        if (!k) continue;
        assert_int_equal(tkv__kernel_force_level((tkv__kernel_level)l), 0);

        /* quantize: bit for bit the scalar rows */
        for (size_t tok = 0; tok < nt; tok++) {
            memset(xq2, 0xcd, xrs + 1);
            k->quantize[at](x + tok * n, xq2, n);
            if (memcmp(xq2, xq + tok * xrs, xrs) != 0 || xq2[xrs] != 0xcd) {
                REPORT("%s quantize %s (for %s) n=%zu token %zu: not the scalar bytes\n", k->name, tkv_type_name(at),
                       tkv_type_name(t), n, tok);
                break;
            }
        }
        /* dequant (the embedding lookup), with this level active: the scalar level's floats */
        for (size_t r = 0; r < nr; r += 1 + nr / 4) {
            tkv__quant_dequantize_row(t, w + r * wrs, wf2, n);
            assert_int_equal(tkv__kernel_force_level(TKV__KERNEL_SCALAR), 0);
            tkv__quant_dequantize_row(t, w + r * wrs, wf, n);
            assert_int_equal(tkv__kernel_force_level((tkv__kernel_level)l), 0);
            if (memcmp(wf, wf2, n * sizeof(float)) != 0)
                REPORT("%s dequant %s n=%zu row %zu: not the scalar level's floats\n", k->name, tkv_type_name(t), n, r);
        }

        /* vec_dot against the scalar one */
        for (size_t tok = 0; tok < nt; tok++)
            for (size_t r = 0; r < nr; r++) {
                const size_t e = tok * nr + r;
                V[e] = k->vec_dot[t](n, w + r * wrs, xq + tok * xrs);
                const int same_bits =
                    t == TKV_TYPE_Q4_0 || t == TKV_TYPE_IQ4_NL || t == TKV_TYPE_MXFP4 || t == TKV_TYPE_Q4_K || t == TKV_TYPE_Q5_K;
                if (same_bits ? memcmp(&V[e], &S[e], 4) != 0 : !(fabs((double)V[e] - S[e]) <= tol[e]))
                    REPORT("%s vec_dot %s n=%zu row %zu token %zu: %.9g, scalar %.9g (|diff| %.3g, allowed %.3g)\n",
                           k->name, tkv_type_name(t), n, r, tok, V[e], S[e], fabs((double)V[e] - S[e]),
                           same_bits ? 0.0 : tol[e]);
            }

        /* the products: bit for bit this level's vec_dot */
        if (k->gemm[t] && n <= TKV__GEMM_MAX_N) {
            fill_sentinel(y, nt * ldy);
            k->gemm[t](n, w, wrs, nr, xq, xrs, nt, y, ldy);
            check_bits("gemm", k, t, s, y, ldy, V);
        }
        if (k->gemv[t] && n <= TKV__GEMV_MAX_N) {
            fill_sentinel(y, nt * ldy);
            k->gemv[t](n, w, wrs, nr, xq, xrs, nt, y, ldy);
            check_bits("gemv", k, t, s, y, ldy, V);
        }
        uint8_t *pk = NULL;
        if (k->packed[t] && tkv__pack_supported(t) && n <= TKV__GEMM_MAX_N) {
            pk = aligned_alloc(64, (tkv__pack_bytes(t, n, nr) + 63) / 64 * 64);
            assert_non_null(pk);
            tkv__pack_rows(t, w, n, nr, pk);
            fill_sentinel(y, nt * ldy);
            k->packed[t](n, pk, tkv__pack_stride(t, n), nr, xq, xrs, nt, y, ldy);
            check_bits("packed", k, t, s, y, ldy, V);
        }
        if (k->lanes[t] && n % k->lanes_kn[t] == 0) {
            fill_sentinel(y, nt * ldy);
            k->lanes[t](n, w, wrs, nr, xq, xrs, nt, y, ldy);
            for (size_t tok = 0; tok < nt; tok++)
                for (size_t r = 0; r < nr; r++) {
                    const size_t e = tok * nr + r;
                    const float got = y[tok * ldy + r];
                    if (!(fabs((double)got - S[e]) <= tol_lanes[e]))
                        REPORT("%s lanes %s n=%zu row %zu token %zu: %.9g, scalar %.9g\n", k->name, tkv_type_name(t), n,
                               r, tok, got, S[e]);
                }
        }

        /* the ops layer on threads, as the forward pass calls it (file rows, then packed rows) */
        for (int use_pk = 0; use_pk <= (pk != NULL); use_pk++) {
            ops_job j = {t, n, nr, nt, x, xq2, w, use_pk ? pk : NULL, y, ldy, pools[s->threads], 0};
            fill_sentinel(y, nt * ldy);
            tkv__pool_run(j.pool, ops_task, &j);
            for (size_t tok = 0; tok < nt; tok++)
                if (memcmp(xq2 + tok * xrs, xq + tok * xrs, xrs) != 0) {
                    REPORT("%s ops quantize_acts %s n=%zu threads=%d token %zu: not the scalar bytes\n", k->name,
                           tkv_type_name(t), n, j.nth_seen, tok);
                    break;
                }
            shape s2 = *s;
            s2.threads = j.nth_seen;
            check_bits(use_pk ? "ops matmul_packed" : "ops matmul", k, t, &s2, y, ldy, V);
        }
        free(pk);
    }
    assert_int_equal(tkv__kernel_force_level(best), 0);
    free(wbuf), free(xbuf), free(xq2), free(x), free(wf), free(wf2), free(af), free(off);
    free(S), free(V), free(tol), free(tol_lanes), free(y);
}

/* One cmocka test per weight type: its shapes through every entry and level. */
static void test_type(void **state) {
    const tkv_type t = (tkv_type)(intptr_t)*state;
    g_failures = 0;
    reseed(1000 + (uint64_t)t);
    const int n_shapes = g_small ? 10 : 40;
    for (int k = 0; k < n_shapes && g_failures < MAX_REPORTS; k++) {
        const shape s = draw_shape(t, k);
        check_shape(t, &s);
    }
    end_test(tkv_type_name(t));
}

/* ---- attention -------------------------------------------------------------------- */

/*
 * The attention primitives of every level against the scalar ones. Only F16
 * K/V rows have level entries (attention.h); the other cache types are
 * expanded to float by the dequantization above and attended in scalar
 * code (forward.c's attend_f32), so their rows are covered by the dequant
 * entry of their types.
 */
static void test_attention_levels(void **state) {
    (void)state;
    g_failures = 0;
    reseed(7);
    const tkv__attn_ops *sc = tkv__attn_scalar();
    const tkv__kernel_level best = tkv__kernel_level_best();
    int levels = 0;
    for (int l = 1; l <= (int)best; l++) {
        assert_int_equal(tkv__kernel_force_level((tkv__kernel_level)l), 0);
        const tkv__attn_ops *op = tkv__attn_get();
        const char *ln = tkv__kernel_level_name((tkv__kernel_level)l);
        levels++;
        for (int rep = 0; rep < (g_small ? 8 : 40); rep++) {
            /* head sizes: any, or a multiple of 16 (the 16-row forms) */
            const size_t n = rep % 3 == 0 ? pick(1, 256) : pick(1, 16) * 16;
            static float q[256], a1[256], a2[256], wide[16 * 256], out[16], out2[16], acc[256], acc2[256], wts[16];
            static uint16_t h[16][256], qh[256], b1[256], b2[256];
            const uint16_t *hr[16];
            for (int c = 0; c < 16; c++) {
                rnd_acts(a1, n);
                for (size_t i = 0; i < n; i++) h[c][i] = tkv__quant_f32_to_f16(a1[i]);
                hr[c] = h[c];
            }
            rnd_acts(q, n);
            for (size_t i = 0; i < n; i++) qh[i] = tkv__quant_f32_to_f16(q[i]), a1[i] = a2[i] = rndf(-2, 2);
            /* the F16 forms: the scalar bits */
            float d1 = sc->dot(qh, h[0], n), d2 = op->dot(qh, h[0], n);
            if (memcmp(&d1, &d2, 4) != 0) REPORT("attn %s dot n=%zu: %.9g, scalar %.9g\n", ln, n, d2, d1);
            for (size_t i = 0; i < n; i++) b1[i] = b2[i] = tkv__quant_f32_to_f16(a1[i]);
            const float wgt = rndf(-1, 1);
            sc->mad(b1, h[1], wgt, n), op->mad(b2, h[1], wgt, n);
            if (memcmp(b1, b2, n * 2) != 0) REPORT("attn %s mad n=%zu: not the scalar bits\n", ln, n);
            sc->scale(b1, 0.7f, n), op->scale(b2, 0.7f, n);
            if (memcmp(b1, b2, n * 2) != 0) REPORT("attn %s scale n=%zu: not the scalar bits\n", ln, n);
            /* the float forms: within rounding of the scalar ones */
            d1 = sc->dot_f32(q, h[0], n), d2 = op->dot_f32(q, h[0], n);
            double mag = 0;
            for (size_t i = 0; i < n; i++) mag += fabs((double)q[i] * tkv__quant_f16_to_f32(h[0][i]));
            if (!(fabs((double)d1 - d2) <= 4.0 * (double)(n + 4) * 0x1p-24 * mag + 1e-30))
                REPORT("attn %s dot_f32 n=%zu: %.9g, scalar %.9g\n", ln, n, d2, d1);
            sc->mad_f32(a1, h[1], wgt, n), op->mad_f32(a2, h[1], wgt, n);
            for (size_t i = 0; i < n; i++)
                if (!(fabsf(a1[i] - a2[i]) <= 0x1p-23f * (fabsf(a1[i]) + fabsf(wgt * tkv__quant_f16_to_f32(h[1][i]))))) {
                    REPORT("attn %s mad_f32 n=%zu [%zu]: %.9g, scalar %.9g\n", ln, n, i, a2[i], a1[i]);
                    break;
                }
            if (!op->widen16 || n % 16) continue;
            const size_t m = pick(1, 16);
            op->widen16(hr, 16, n, wide);
            for (size_t c = 0; c < 16; c++)
                for (size_t i = 0; i < n; i++)
                    if (memcmp(&wide[c * n + i], &(float){tkv__quant_f16_to_f32(h[c][i])}, 4) != 0) {
                        REPORT("attn %s widen16 n=%zu row %zu [%zu]: not the F16 value\n", ln, n, c, i);
                        c = 16;
                        break;
                    }
            op->scores16(q, wide, n, 0.125f, out);
            for (size_t c = 0; c < 16; c++) {
                const float want = 0.125f * sc->dot_f32(q, h[c], n);
                double mc = 0;
                for (size_t i = 0; i < n; i++) mc += fabs((double)q[i] * wide[c * n + i]);
                if (!(fabs((double)out[c] - want) <= 0.125 * 4.0 * (double)(n + 4) * 0x1p-24 * mc + 1e-30))
                    REPORT("attn %s scores16 n=%zu cell %zu: %.9g, scalar %.9g\n", ln, n, c, out[c], want);
            }
            if (op->scores16_rows) {
                op->scores16_rows(q, hr, n, 0.125f, out2);
                if (memcmp(out, out2, sizeof out) != 0) REPORT("attn %s scores16_rows n=%zu: not widen16 + scores16\n", ln, n);
            }
            for (size_t c = 0; c < m; c++) wts[c] = rndf(0, 1);
            for (size_t i = 0; i < n; i++) acc[i] = acc2[i] = a1[i];
            op->wsum16(acc, wide, wts, m, n);
            if (op->wsum16_rows) {
                op->wsum16_rows(acc2, hr, wts, m, n);
                if (memcmp(acc, acc2, n * sizeof(float)) != 0)
                    REPORT("attn %s wsum16_rows n=%zu m=%zu: not widen16 + wsum16\n", ln, n, m);
            }
            for (size_t i = 0; i < n; i++) { /* against the scalar mad_f32 of each row in turn */
                float want = a1[i];
                double mi = fabs(a1[i]);
                for (size_t c = 0; c < m; c++) sc->mad_f32(&want, h[c] + i, wts[c], 1), mi += fabs(wts[c] * wide[c * n + i]);
                if (!(fabs((double)acc[i] - want) <= 4.0 * (double)(m + 4) * 0x1p-24 * mi + 1e-30)) {
                    REPORT("attn %s wsum16 n=%zu m=%zu [%zu]: %.9g, scalar %.9g\n", ln, n, m, i, acc[i], want);
                    break;
                }
            }
        }
    }
    assert_int_equal(tkv__kernel_force_level(best), 0);
    end_test("attention");
    if (!levels) TU_SKIP();
}

int main(int argc, char **argv) {
    const char *env = getenv("TKV_CONFORMANCE_SEED"), *size = getenv("TKV_CONFORMANCE_SIZE");
    g_seed = env && *env ? strtoull(env, NULL, 0) : (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32);
    g_small = (size && strcmp(size, "small") == 0) || (argc > 1 && strcmp(argv[1], "--small") == 0);
    print_message("conformance: seed %" PRIu64 " (TKV_CONFORMANCE_SEED=%" PRIu64 " repeats this run), %s size, levels up to %s\n",
                  g_seed, g_seed, g_small ? "small" : "full", tkv__kernel_level_name(tkv__kernel_level_best()));
    for (int k = 1; k <= 3; k++)
        if (tkv__pool_create(k, &pools[k]) != TKV_OK) {
            fprintf(stderr, "cannot create a pool of %d threads\n", k);
            return 1;
        }
    struct CMUnitTest tests[TKV_TYPE_COUNT + 1];
    size_t nt = 0;
    for (int t = 0; t < TKV_TYPE_COUNT; t++) {
        if (!tkv__quant_supported((tkv_type)t)) continue;
        /* activation-only types have no vec_dot of their own */
        if (!tkv__kernel_table(TKV__KERNEL_SCALAR)->vec_dot[t]) continue;
        tests[nt++] = (struct CMUnitTest){tkv_type_name((tkv_type)t), test_type, NULL, NULL, (void *)(intptr_t)t};
    }
    tests[nt++] = (struct CMUnitTest){"attention", test_attention_levels, NULL, NULL, NULL};
    const int failed = _cmocka_run_group_tests("conformance", tests, nt, NULL, NULL);
    for (int k = 1; k <= 3; k++) tkv__pool_free(pools[k]);
    return TU_RESULT(failed);
}
