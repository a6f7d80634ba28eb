/*
 * kernel_ab.c — two builds of one vec_dot in one process, timed call by call
 * in turn, best of each: bench/kernel-ab builds and runs it (see there).
 *
 *   kernel_ab TYPE [ROUNDS [TOKENS]]
 *
 * A shared VM's speed moves by 30% and more within seconds, and two runs
 * of a benchmark, or two processes side by side, each see another moment
 * of it. Here both builds run within a millisecond of each other ROUNDS
 * times (default 3000, the order swapped every round), so both meet the
 * same fast moments, and the ratio of their best times holds to about 1%
 * where the GB/s do not. Each round is one product of ROWS x COLS random
 * weights of TYPE (1024 x 2048, 2 MiB or less: in the caches, as the
 * arithmetic-bound dots are) with one quantized activation row, or with
 * TOKENS rows through the tiled products (compute/kernels.h's gemm). The sums
 * of both builds are printed: a change meant to keep the bits keeps them.
 *
 *   kernel_ab TYPE ROUNDS TOKENS PACKED_ROWS THREADS
 *
 * times the products over packed rows (compute/kernels.h's `packed`) instead:
 * PACKED_ROWS x 2048 weights packed as a model's are at load
 * (compute/quant/repack.h), so many that they come from memory as a layer's
 * do in generation, shared out in whole groups of 16 rows over THREADS
 * threads of the library's pool, each round one product of all of them.
 */
#include "bench_clock.h"
#include "bench_rng.h"
#include "compute/quant/quant.h"
#include "compute/quant/repack.h"
#include "compute/threadpool.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef float (*dot_fn)(size_t n, const void *w, const void *a);
typedef void (*gemm_fn)(size_t n, const void *w, size_t wrs, size_t nr, const void *xq, size_t xrs, size_t n_tok,
                        float *y, size_t ldy);
/* the two builds, named by bench/kernel-ab's -D and objcopy: a pair of vec_dots, or of tiled products
   (compute/kernels.h's two shapes); weak, as only one pair is linked */
__attribute__((weak)) float tkv_ab_dot_a(size_t n, const void *w, const void *a);
__attribute__((weak)) float tkv_ab_dot_b(size_t n, const void *w, const void *a);
__attribute__((weak)) void tkv_ab_gemm_a(size_t n, const void *w, size_t wrs, size_t nr, const void *xq, size_t xrs,
                                         size_t n_tok, float *y, size_t ldy);
__attribute__((weak)) void tkv_ab_gemm_b(size_t n, const void *w, size_t wrs, size_t nr, const void *xq, size_t xrs,
                                         size_t n_tok, float *y, size_t ldy);

enum { COLS = 2048, ROWS = 1024 };

/* One product over packed rows, shared out by groups over the pool's threads. */
typedef struct packed_task {
    gemm_fn f;
    const uint8_t *pk, *a;
    size_t gs, rows, ars, tok;
    float *y;
} packed_task;

static void packed_run(void *arg, int ith, int nth) {
    const packed_task *p = arg;
    size_t r0, r1;
    tkv__split_groups(p->rows, TKV__PACK_ROWS, ith, nth, &r0, &r1);
    if (r1 > r0) p->f(COLS, p->pk + r0 / TKV__PACK_ROWS * p->gs, p->gs, r1 - r0, p->a, p->ars, p->tok, p->y + r0, p->rows);
}

/* The type named name, or TKV_TYPE_COUNT. */
static tkv_type type_named(const char *name) {
    for (int k = 0; k < TKV_TYPE_COUNT; k++) {
        const char *nm = tkv_type_name((tkv_type)k);
        if (nm && !strcmp(nm, name) && tkv__quant_supported((tkv_type)k)) return (tkv_type)k;
    }
    return TKV_TYPE_COUNT;
}

/* Random bytes for a product's weights and tok quantized activation rows, ars bytes apart. Bit 6 of each weight
   byte clear: a float scale or weight (fp16, bf16, f32) read from any two or four of them has its exponent's top
   bit clear, so it is finite, and so are the sums both builds are compared by (random bytes: every index of a
   grid type is in its table). */
static int fill(tkv_type t, uint8_t *w, size_t wbytes, uint8_t *a, size_t tok, size_t ars) {
    for (size_t i = 0; i < wbytes; i++) w[i] = (uint8_t)(rnd() & 0xbf);
    float *x = malloc(COLS * sizeof *x);
    if (!x) return -1;
    for (size_t t1 = 0; t1 < tok; t1++) {
        for (size_t i = 0; i < COLS; i++) x[i] = (float)(rnd() & 0xffff) / 32768.0f - 1.0f;
        tkv__quant_quantize_row(tkv__quant_vec_dot_type(t), x, a + t1 * ars, COLS);
    }
    free(x);
    return 0;
}

/* The two builds' products over packed rows, from memory, on threads (the header's second form). */
static int packed_main(tkv_type t, int rounds, size_t tok, size_t rows, int threads, const char *name) {
    const size_t rs = tkv__quant_row_size(t, COLS), ars = tkv__quant_row_size(tkv__quant_vec_dot_type(t), COLS);
    const size_t pbytes = tkv__pack_bytes(t, COLS, rows);
    uint8_t *w = malloc(rows * rs), *a = malloc(tok * ars), *pk = aligned_alloc(64, (pbytes + 63) & ~(size_t)63);
    float *y = malloc(tok * rows * sizeof *y);
    tkv__pool *pool = NULL;
    if (!w || !a || !pk || !y || fill(t, w, rows * rs, a, tok, ars)) return fprintf(stderr, "kernel_ab: out of memory\n"), 1;
    if (tkv__pool_create(threads, &pool) != TKV_OK) return fprintf(stderr, "kernel_ab: no pool of %d threads\n", threads), 1;
    tkv__pack_rows(t, w, COLS, rows, pk);
    free(w);
    packed_task task[2] = {{tkv_ab_gemm_a, pk, a, tkv__pack_stride(t, COLS), rows, ars, tok, y},
                           {tkv_ab_gemm_b, pk, a, tkv__pack_stride(t, COLS), rows, ars, tok, y}};
    double best[2] = {1e30, 1e30}, total[2] = {0, 0};
    float sum[2] = {0, 0};
    for (int k = 0; k < rounds; k++)
        for (int i = 0; i < 2; i++) {
            const int v = k & 1 ? 1 - i : i;
            const double t0 = now();
            tkv__pool_run(pool, packed_run, &task[v]);
            const double dt = now() - t0;
            float s = 0;
            for (size_t j = 0; j < tok * rows; j++) s += y[j];
            if (dt < best[v]) best[v] = dt;
            total[v] += dt, sum[v] = s;
        }
    const double gb = (double)pbytes * 1e-9; /* packed bytes read per round */
    printf("%s packed, %zu rows, %d threads  a %.3f GB/s (mean %.3f)  b %.3f GB/s (mean %.3f)  b/a %.3f (means %.3f)  "
           "sums %s (%.9g, %.9g)\n",
           name, rows, threads, gb / best[0], gb * rounds / total[0], gb / best[1], gb * rounds / total[1],
           best[0] / best[1], total[0] / total[1], memcmp(&sum[0], &sum[1], sizeof sum[0]) ? "differ" : "equal", sum[0],
           sum[1]);
    tkv__pool_free(pool);
    free(a), free(pk), free(y);
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 2 || argc > 6 || argc == 5)
        return fprintf(stderr, "usage: kernel_ab TYPE [ROUNDS [TOKENS [PACKED_ROWS THREADS]]]\n"), 2;
    const tkv_type t = type_named(argv[1]);
    const int rounds = argc > 2 ? atoi(argv[2]) : 3000;
    const int n_tok = argc > 3 ? atoi(argv[3]) : 0; /* 0: the vec_dots; else the tiled products of so many tokens */
    const long packed_rows = argc > 5 ? atol(argv[4]) : 0, threads = argc > 5 ? atol(argv[5]) : 0;
    if (t == TKV_TYPE_COUNT || rounds < 1 || n_tok < 0 || n_tok > 512)
        return fprintf(stderr, "kernel_ab: no type %s, or rounds or tokens out of range\n", argv[1]), 2;
    if (n_tok ? !tkv_ab_gemm_a || !tkv_ab_gemm_b : !tkv_ab_dot_a || !tkv_ab_dot_b)
        return fprintf(stderr, "kernel_ab: built without the two %s\n", n_tok ? "products" : "vec_dots"), 2;
    if (argc > 5) {
        if (!n_tok || packed_rows < TKV__PACK_ROWS || packed_rows > (1L << 22) || threads < 1 || threads > 64 ||
            !tkv__pack_bytes(t, COLS, (size_t)packed_rows))
            return fprintf(stderr, "kernel_ab: %s has no packed rows, or tokens, rows or threads out of range\n", argv[1]), 2;
        return packed_main(t, rounds, (size_t)n_tok, (size_t)packed_rows, (int)threads, argv[1]);
    }
    const size_t tok = n_tok ? (size_t)n_tok : 1;
    const tkv_type at = tkv__quant_vec_dot_type(t);
    const size_t rs = tkv__quant_row_size(t, COLS), ars = tkv__quant_row_size(at, COLS);
    uint8_t *w = malloc(ROWS * rs), *a = malloc(tok * ars);
    float *y = malloc(tok * ROWS * sizeof *y);
    if (!w || !a || !y || fill(t, w, ROWS * rs, a, tok, ars)) return fprintf(stderr, "kernel_ab: out of memory\n"), 1;

    const dot_fn f[2] = {tkv_ab_dot_a, tkv_ab_dot_b};
    const gemm_fn g[2] = {tkv_ab_gemm_a, tkv_ab_gemm_b};
    double best[2] = {1e30, 1e30};
    float sum[2] = {0, 0};
    for (int k = 0; k < rounds; k++)
        for (int i = 0; i < 2; i++) {
            const int v = k & 1 ? 1 - i : i;
            const double t0 = now();
            float s = 0;
            if (n_tok) {
                g[v](COLS, w, rs, ROWS, a, ars, tok, y, ROWS);
            } else {
                for (size_t r = 0; r < ROWS; r++) s += f[v](COLS, w + r * rs, a);
            }
            const double dt = now() - t0;
            if (n_tok)
                for (size_t j = 0; j < tok * ROWS; j++) s += y[j];
            if (dt < best[v]) best[v] = dt;
            sum[v] = s;
        }
    const double gb = (double)(ROWS * rs) * 1e-9; /* weight bytes read per round */
    printf("%s  a %.3f GB/s  b %.3f GB/s  b/a %.3f  sums %s (%.9g, %.9g)\n", argv[1], gb / best[0], gb / best[1],
           best[0] / best[1], memcmp(&sum[0], &sum[1], sizeof sum[0]) ? "differ" : "equal", sum[0], sum[1]);
    free(w), free(a), free(y);
    return 0;
}
