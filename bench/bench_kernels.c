/*
 * bench_kernels.c — throughput of the matmul kernels, per weight type and
 * per kernel level, single-threaded.
 *
 *   bench_kernels [-n COLS] [-r ROWS] [-t TOKENS] [-i ITERS] [-l LEVEL] [TYPE...]
 *   bench_kernels --prefill [-t TOKENS] [-i ITERS] [-l LEVEL] [TYPE...]
 *
 * For each type (default: all eleven) and level (default: every level the
 * CPU has) it times tkv__ops_matmul over a ROWS x COLS random weight matrix
 * (default 4096 x 4096) and TOKENS activation rows (default 1: a decode
 * step, the memory-bound case), best of ITERS runs, and prints
 *   GFLOP/s  2 * rows * cols * tokens / time
 *   GB/s     weight bytes read / time
 * Activation quantization is timed separately (once per token row).
 * With -T THREADS the packed rows also run on that many threads of the
 * library's pool, in products of -c ROWS rows each (default: all of them),
 * each split among the threads and closed by a barrier, as a model's
 * layers run them: "(packed rows, T threads)".
 *
 * --prefill times the products of one transformer layer of two model shapes
 * against a prompt of TOKENS (default 512) tokens, as a prefill runs them
 * (quantize the input once per distinct input, then each product):
 *   125m: n_embd 768, 4 KV heads of 64, n_ff 2048 (q, k, v, o, gate, up, down)
 *   1b:   n_embd 2048, 4 KV heads of 64, n_ff 5632 (TinyLlama's shape)
 * (float weights: the lanes products, as a prefill takes them for 2+ tokens),
 * and prints each shape's GFLOP/s (2 * weights * tokens / time of the layer's
 * products, activation quantization included), best of ITERS layers.
 */
#include "bench_clock.h"
#include "bench_rng.h"
#include "base/alloc.h"
#include "compute/kernels.h"
#include "compute/ops.h"
#include "compute/quant/quant.h"
#include "compute/quant/repack.h"
#include "compute/threadpool.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static float rndf(void) {
    return (float)(rnd() & 0xffffff) / 16777216.0f * 2.0f - 1.0f;
}

/* Random weights: real blocks, made by quantizing random floats the slow way. */
static void fill_weights(tkv_type t, uint8_t *w, size_t rows, size_t n) {
    const size_t rs = tkv__quant_row_size(t, n);
    for (size_t i = 0; i < rows * rs; i++) w[i] = (uint8_t)rnd();
    if (t == TKV_TYPE_F32 || t == TKV_TYPE_F16 || t == TKV_TYPE_BF16) {
        for (size_t i = 0; i < rows * n; i++) {
            const float f = rndf() * 0.1f;
            if (t == TKV_TYPE_F32) {
                memcpy(w + 4 * i, &f, 4);
            } else {
                const uint16_t h = t == TKV_TYPE_F16 ? tkv__quant_f32_to_f16(f) : tkv__quant_f32_to_bf16(f);
                memcpy(w + 2 * i, &h, 2);
            }
        }
        return;
    }
    /* fix the fp16 scales of every block: offsets of d (and m/dmin) */
    size_t bsz = 0, d_at = 0, m_at = 0;
    switch (t) {
    case TKV_TYPE_Q8_0: bsz = 34; break;
    case TKV_TYPE_Q4_0: bsz = 18; break;
    case TKV_TYPE_Q5_0: bsz = 22; break;
    case TKV_TYPE_Q4_1: bsz = 20, m_at = 2; break;
    case TKV_TYPE_Q5_1: bsz = 24, m_at = 2; break;
    case TKV_TYPE_Q4_K: bsz = 144, m_at = 2; break;
    case TKV_TYPE_Q5_K: bsz = 176, m_at = 2; break;
    case TKV_TYPE_Q6_K: bsz = 210, d_at = 208; break;
    case TKV_TYPE_Q2_K: bsz = 84, d_at = 80, m_at = 82; break;
    case TKV_TYPE_Q3_K: bsz = 110, d_at = 108; break;
    case TKV_TYPE_IQ4_NL: bsz = 18; break;
    case TKV_TYPE_TQ1_0: bsz = 54, d_at = 52; break;
    case TKV_TYPE_TQ2_0: bsz = 66, d_at = 64; break;
    default: return; /* random scales: any value, NaN included */
    }
    for (size_t b = 0; b < rows * rs / bsz; b++) {
        const uint16_t d = tkv__quant_f32_to_f16(0.01f * rndf());
        memcpy(w + b * bsz + d_at, &d, 2);
        if (m_at) {
            const uint16_t m = tkv__quant_f32_to_f16(0.01f * rndf());
            memcpy(w + b * bsz + m_at, &m, 2);
        }
    }
}

/* One layer's products: rows x cols of each weight, and which input it reads (0: normed h, 1: attention out, 2: ffn act). */
typedef struct shape {
    const char *name;
    size_t rows[7], cols[7];
    int input[7];
} shape;

static const shape shapes[] = {
    {"125m", {768, 256, 256, 768, 2048, 2048, 768}, {768, 768, 768, 768, 768, 768, 2048}, {0, 0, 0, 1, 0, 0, 2}},
    {"1b", {2048, 256, 256, 2048, 5632, 5632, 2048}, {2048, 2048, 2048, 2048, 2048, 2048, 5632}, {0, 0, 0, 1, 0, 0, 2}},
};

static int run_prefill(const tkv_type *types, int n_types, size_t n_tok, int iters, int only_level) {
    printf("prefill: one layer's products, %zu tokens, best of %d, 1 thread; best level on this CPU: %s\n", n_tok, iters,
           tkv__kernel_level_name(tkv__kernel_level_best()));
    printf("%-5s %-7s", "type", "level");
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) printf(" %8s ms %7s GF/s", shapes[s].name, "");
    printf("\n");
    for (int ti = 0; ti < n_types; ti++) {
        const tkv_type t = types[ti];
        /* per shape: the 7 weights, 3 float inputs and their quantized copies */
        uint8_t *w[2][7], *xq[2][3];
        float *x[2][3], *y = NULL;
        size_t ymax = 0;
        for (size_t s = 0; s < 2; s++) {
            for (int k = 0; k < 7; k++) {
                w[s][k] = malloc(shapes[s].rows[k] * tkv__quant_row_size(t, shapes[s].cols[k]));
                if (!w[s][k]) return 1;
                fill_weights(t, w[s][k], shapes[s].rows[k], shapes[s].cols[k]);
                if (shapes[s].rows[k] > ymax) ymax = shapes[s].rows[k];
            }
            for (int in = 0; in < 3; in++) {
                const size_t c = in == 2 ? shapes[s].cols[6] : shapes[s].cols[0];
                x[s][in] = malloc(n_tok * c * sizeof(float));
                xq[s][in] = malloc(n_tok * tkv__ops_act_row_size(t, c));
                if (!x[s][in] || !xq[s][in]) return 1;
                for (size_t i = 0; i < n_tok * c; i++) x[s][in][i] = rndf();
            }
        }
        y = malloc(n_tok * ymax * sizeof(float));
        if (!y) return 1;
        for (int l = 0; l < TKV__KERNEL_LEVELS; l++) {
            if (only_level >= 0 && l != only_level) continue;
            if (tkv__kernel_force_level((tkv__kernel_level)l) != 0) continue;
            printf("%-5s %-7s", tkv_type_name(t), tkv__kernel_level_name((tkv__kernel_level)l));
            for (size_t s = 0; s < 2; s++) {
                const shape *sh = &shapes[s];
                double best = 1e30, flops = 0;
                for (int k = 0; k < 7; k++) flops += 2.0 * (double)sh->rows[k] * (double)sh->cols[k] * (double)n_tok;
                for (int it = 0; it < iters; it++) {
                    const double t0 = now();
                    for (int k = 0; k < 7; k++) {
                        const int in = sh->input[k];
                        if (k == 0 || in != sh->input[k - 1])
                            tkv__ops_quantize_acts(t, x[s][in], n_tok, sh->cols[k], xq[s][in]);
                        /* float weights take the lanes products for 2+ tokens, as the forward pass does */
                        if (n_tok >= 2 && tkv__ops_lanes_ok(t, sh->cols[k], sh->rows[k]))
                            tkv__ops_matmul_lanes(TKV__LANES_DEFAULT, t, w[s][k], sh->cols[k], 0, sh->rows[k], xq[s][in], n_tok, y, sh->rows[k]);
                        else
                            tkv__ops_matmul(t, w[s][k], sh->cols[k], 0, sh->rows[k], xq[s][in], n_tok, y, sh->rows[k]);
                    }
                    const double dt = now() - t0;
                    if (dt < best) best = dt;
                }
                printf(" %11.2f %12.2f", best * 1e3, flops / best * 1e-9);
            }
            printf("\n");
            fflush(stdout);
        }
        for (size_t s = 0; s < 2; s++) {
            for (int k = 0; k < 7; k++) free(w[s][k]);
            for (int in = 0; in < 3; in++) free(x[s][in]), free(xq[s][in]);
        }
        free(y);
    }
    return 0;
}

/* The packed product of -T / -c: products of `call` rows, one after another, each shared out in whole groups. */
typedef struct mm_task {
    tkv__pool *pool;
    tkv_type t;
    const void *pk, *xq;
    size_t n, rows, call, n_tok;
    float *y;
} mm_task;

static void mm_run(void *arg, int ith, int nth) {
    const mm_task *m = arg;
    for (size_t c0 = 0; c0 < m->rows; c0 += m->call) {
        const size_t c1 = c0 + m->call < m->rows ? c0 + m->call : m->rows;
        size_t r0, r1;
        tkv__split_groups(c1 - c0, TKV__PACK_ROWS, ith, nth, &r0, &r1);
        r0 += c0, r1 += c0;
        if (r1 > r0) tkv__ops_matmul_packed(m->t, m->pk, m->n, r0, r1, m->xq, m->n_tok, m->y, m->rows);
        tkv__pool_barrier(m->pool);
    }
}

static void usage(void) {
    fprintf(stderr, "usage: bench_kernels [-n COLS] [-r ROWS] [-t TOKENS] [-i ITERS] [-l scalar|avx2|avx512] [-T THREADS [-c ROWS]] [TYPE...]\n"
                    "       bench_kernels --prefill [-t TOKENS] [-i ITERS] [-l scalar|avx2|avx512] [TYPE...]\n");
}

int main(int argc, char **argv) {
    size_t n = 4096, rows = 4096, n_tok = 0, call = 0;
    int iters = 5, only_level = -1, prefill = 0, threads = 0;
    tkv_type types[16];
    int n_types = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-n") && i + 1 < argc) n = (size_t)strtoul(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "-r") && i + 1 < argc) rows = (size_t)strtoul(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "-t") && i + 1 < argc) n_tok = (size_t)strtoul(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "-i") && i + 1 < argc) iters = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-T") && i + 1 < argc) threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-c") && i + 1 < argc) call = (size_t)strtoul(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--prefill")) prefill = 1;
        else if (!strcmp(argv[i], "-l") && i + 1 < argc) {
            const char *l = argv[++i];
            for (int k = 0; k < TKV__KERNEL_LEVELS; k++)
                if (!strcmp(l, tkv__kernel_level_name((tkv__kernel_level)k))) only_level = k;
            if (only_level < 0) return usage(), 2;
        } else if (argv[i][0] == '-') {
            return usage(), strcmp(argv[i], "--help") && strcmp(argv[i], "-h") ? 2 : 0;
        } else {
            int found = 0;
            for (int k = 0; k < TKV_TYPE_COUNT && n_types < 16; k++) {
                const char *nm = tkv_type_name((tkv_type)k);
                if (nm && !strcmp(nm, argv[i]) && tkv__quant_supported((tkv_type)k)) types[n_types++] = (tkv_type)k, found = 1;
            }
            if (!found) return fprintf(stderr, "unsupported type %s\n", argv[i]), 2;
        }
    }
    if (!n_types) {
        const tkv_type all[] = {TKV_TYPE_F32,  TKV_TYPE_F16,  TKV_TYPE_BF16, TKV_TYPE_Q8_0, TKV_TYPE_Q4_0, TKV_TYPE_Q4_1,
                                TKV_TYPE_Q5_0, TKV_TYPE_Q5_1, TKV_TYPE_Q4_K, TKV_TYPE_Q5_K, TKV_TYPE_Q6_K};
        for (size_t k = 0; k < sizeof all / sizeof all[0]; k++) types[n_types++] = all[k];
    }
    if (!n_tok) n_tok = prefill ? 512 : 1;
    if (n % 256 || !rows || iters < 1 || threads < 0) return usage(), 2;
    if ((prefill && threads) || (call && !threads))
        return fprintf(stderr, "bench_kernels: -T goes with the matmul mode only, -c with -T\n"), 2;
    if (prefill) return run_prefill(types, n_types, n_tok, iters, only_level);
    if (!call) call = rows;
    if (call % TKV__PACK_ROWS) return fprintf(stderr, "bench_kernels: -c must be a multiple of %d\n", TKV__PACK_ROWS), 2;
    tkv__pool *pool = NULL;
    if (threads && tkv__pool_create(threads, &pool) != TKV_OK) return fprintf(stderr, "no thread pool\n"), 1;

    printf("matmul %zu x %zu, %zu token(s), best of %d, 1 thread; best level on this CPU: %s\n", rows, n, n_tok,
           iters, tkv__kernel_level_name(tkv__kernel_level_best()));
    printf("%-5s %-7s %10s %9s %9s %12s\n", "type", "level", "ms", "GFLOP/s", "GB/s", "quant us/row");
    float *x = malloc(n_tok * n * sizeof(float)), *y = malloc(n_tok * rows * sizeof(float));
    if (!x || !y) return 1;
    for (size_t i = 0; i < n_tok * n; i++) x[i] = rndf();
    for (int ti = 0; ti < n_types; ti++) {
        const tkv_type t = types[ti];
        const size_t wbytes = rows * tkv__quant_row_size(t, n);
        uint8_t *w = malloc(wbytes), *xq = malloc(n_tok * tkv__ops_act_row_size(t, n));
        if (!w || !xq) return 1;
        fill_weights(t, w, rows, n);
        for (int l = 0; l < TKV__KERNEL_LEVELS; l++) {
            if (only_level >= 0 && l != only_level) continue;
            if (tkv__kernel_force_level((tkv__kernel_level)l) != 0) continue;
            double best = 1e30, bestq = 1e30;
            for (int it = 0; it < iters; it++) {
                double t0 = now();
                tkv__ops_quantize_acts(t, x, n_tok, n, xq);
                double t1 = now();
                tkv__ops_matmul(t, w, n, 0, rows, xq, n_tok, y, rows);
                double t2 = now();
                if (t1 - t0 < bestq) bestq = t1 - t0;
                if (t2 - t1 < best) best = t2 - t1;
            }
            printf("%-5s %-7s %10.3f %9.2f %9.2f %12.2f\n", tkv_type_name(t), tkv__kernel_level_name((tkv__kernel_level)l),
                   best * 1e3, 2.0 * (double)rows * (double)n * (double)n_tok / best * 1e-9, (double)wbytes / best * 1e-9,
                   bestq / (double)n_tok * 1e6);
            fflush(stdout);
            /* the same rows packed at load (compute/quant/repack.h), where this level reads them so */
            if (tkv__ops_packed_ok(t)) {
                /* on 2 MiB pages, as a model's packed weights (tkv_model_params.huge_pages) */
                const size_t pbytes = (tkv__pack_bytes(t, n, rows) + TKV__HUGE_PAGE - 1) & ~(TKV__HUGE_PAGE - 1);
                void *pk = aligned_alloc(TKV__HUGE_PAGE, pbytes);
                if (!pk) return 1;
                tkv__advise_huge_pages(pk, pbytes);
                tkv__pack_rows(t, w, n, rows, pk);
                double bp = 1e30;
                for (int it = 0; it < iters; it++) {
                    const double t0 = now();
                    tkv__ops_matmul_packed(t, pk, n, 0, rows, xq, n_tok, y, rows);
                    if (now() - t0 < bp) bp = now() - t0;
                }
                printf("%-5s %-7s %10.3f %9.2f %9.2f   (packed rows)\n", tkv_type_name(t),
                       tkv__kernel_level_name((tkv__kernel_level)l), bp * 1e3,
                       2.0 * (double)rows * (double)n * (double)n_tok / bp * 1e-9, (double)wbytes / bp * 1e-9);
                if (pool) {
                    mm_task m = {pool, t, pk, xq, n, rows, call, n_tok, y};
                    bp = 1e30;
                    for (int it = 0; it < iters; it++) {
                        const double t0 = now();
                        tkv__pool_run(pool, mm_run, &m);
                        if (now() - t0 < bp) bp = now() - t0;
                    }
                    printf("%-5s %-7s %10.3f %9.2f %9.2f   (packed rows, %d threads, %zu rows a product)\n",
                           tkv_type_name(t), tkv__kernel_level_name((tkv__kernel_level)l), bp * 1e3,
                           2.0 * (double)rows * (double)n * (double)n_tok / bp * 1e-9, (double)wbytes / bp * 1e-9,
                           threads, call);
                }
                free(pk);
            }
        }
        free(w);
        free(xq);
    }
    free(x);
    free(y);
    tkv__pool_free(pool);
    return 0;
}
