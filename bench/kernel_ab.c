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
 */
#include "bench_clock.h"
#include "bench_rng.h"
#include "compute/quant/quant.h"

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

/* The type named name, or TKV_TYPE_COUNT. */
static tkv_type type_named(const char *name) {
    for (int k = 0; k < TKV_TYPE_COUNT; k++) {
        const char *nm = tkv_type_name((tkv_type)k);
        if (nm && !strcmp(nm, name) && tkv__quant_supported((tkv_type)k)) return (tkv_type)k;
    }
    return TKV_TYPE_COUNT;
}

int main(int argc, char **argv) {
    if (argc < 2 || argc > 4) return fprintf(stderr, "usage: kernel_ab TYPE [ROUNDS [TOKENS]]\n"), 2;
    const tkv_type t = type_named(argv[1]);
    const int rounds = argc > 2 ? atoi(argv[2]) : 3000;
    const int n_tok = argc > 3 ? atoi(argv[3]) : 0; /* 0: the vec_dots; else the tiled products of so many tokens */
    if (t == TKV_TYPE_COUNT || rounds < 1 || n_tok < 0 || n_tok > 512)
        return fprintf(stderr, "kernel_ab: no type %s, or rounds or tokens out of range\n", argv[1]), 2;
    if (n_tok ? !tkv_ab_gemm_a || !tkv_ab_gemm_b : !tkv_ab_dot_a || !tkv_ab_dot_b)
        return fprintf(stderr, "kernel_ab: built without the two %s\n", n_tok ? "products" : "vec_dots"), 2;
    const size_t tok = n_tok ? (size_t)n_tok : 1;
    const tkv_type at = tkv__quant_vec_dot_type(t);
    const size_t rs = tkv__quant_row_size(t, COLS), ars = tkv__quant_row_size(at, COLS);
    /* random bytes: every index of a grid type is in its table. Bit 6 of each byte clear: a float scale or
       weight (fp16, bf16, f32) read from any two or four of them has its exponent's top bit clear, so it is
       finite, and so are the sums both builds are compared by */
    uint8_t *w = malloc(ROWS * rs), *a = malloc(tok * ars);
    float *x = malloc(COLS * sizeof *x), *y = malloc(tok * ROWS * sizeof *y);
    if (!w || !a || !x || !y) return fprintf(stderr, "kernel_ab: out of memory\n"), 1;
    for (size_t i = 0; i < ROWS * rs; i++) w[i] = (uint8_t)(rnd() & 0xbf);
    for (size_t t1 = 0; t1 < tok; t1++) {
        for (size_t i = 0; i < COLS; i++) x[i] = (float)(rnd() & 0xffff) / 32768.0f - 1.0f;
        tkv__quant_quantize_row(at, x, a + t1 * ars, COLS);
    }

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
    free(w), free(a), free(x), free(y);
    return 0;
}
