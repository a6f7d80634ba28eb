/*
 * compute/x86/avx2/gemm_float.c — products of float weights (F32, F16, BF16) at the avx2
 * level in the reference's AVX-512 arithmetic: bit for bit the functions of
 * compute/x86/avx512/gemm_float.c (whose comment describes the two orders, vec_dot and
 * lanes), with each 16-lane register held as two 8-lane halves.
 *
 * Why the avx2 level follows an AVX-512 order: the reference files were
 * made on an AVX-512 CPU, and a float sum in another order differs in its
 * last bits; where activations are then quantized (the Q8_0 activations of
 * MXFP4 experts) or rounded to F16 (the K/V cache), such a bit can move a
 * value across a rounding boundary, and the step it makes can swap a MoE
 * router's choice of experts. arch-gpt-oss-mxfp4 did exactly that under an
 * 8-lane order (one row 6.8% off the reference, the bound is 3%).
 *
 * Why it is exact: a fused multiply-add works lane by lane, so lane l of a
 * 16-lane accumulator sees the same operations whether it lives in a zmm
 * register or in lane l % 8 of one of two ymm registers; the reduction's
 * first step (lanes l + 8 and l) is one add of the two halves, and the rest
 * is the same 8-lane tree. F16 and BF16 widen to float exactly.
 */
#include "compute/gemm.h"
#include "compute/quant/quant.h"
#include "compute/x86/util.h"

#include <stddef.h>
#include <stdint.h>

#if defined(__x86_64__) && defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include <immintrin.h>

typedef struct v16 {
    __m256 lo, hi; /* lanes 0-7, lanes 8-15 */
} v16;

static inline v16 v16_zero(void) { return (v16){_mm256_setzero_ps(), _mm256_setzero_ps()}; }
static inline v16 v16_fma(v16 a, v16 b, v16 c) {
    return (v16){_mm256_fmadd_ps(a.lo, b.lo, c.lo), _mm256_fmadd_ps(a.hi, b.hi, c.hi)};
}
static inline v16 v16_add(v16 a, v16 b) { return (v16){_mm256_add_ps(a.lo, b.lo), _mm256_add_ps(a.hi, b.hi)}; }

/* lanes l + 8 and l, then l + 4 and l, then l + 2 and l, then 1 and 0 */
static inline float reduce16(v16 v) { return sum16_halves(v.lo, v.hi); }

#define LD128(p) _mm_loadu_si128((const __m128i *)(const void *)(p))
static inline v16 ld_f32(const uint8_t *p) { return (v16){_mm256_loadu_ps((const float *)(const void *)p), _mm256_loadu_ps((const float *)(const void *)(p + 32))}; }
static inline v16 ld_f16(const uint8_t *p) { return (v16){_mm256_cvtph_ps(LD128(p)), _mm256_cvtph_ps(LD128(p + 16))}; }
static inline __m256 bf16x8(const uint8_t *p) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(LD128(p)), 16));
}
static inline v16 ld_bf16(const uint8_t *p) { return (v16){bf16x8(p), bf16x8(p + 16)}; }

/* ---- vec_dot ----------------------------------------------------------------------- */

/* The 64-element steps of F32 and F16 rows (es: bytes per element). */
#define STEPS64(LD, es)                                                                                               \
    v16 a0 = v16_zero(), a1 = a0, a2 = a0, a3 = a0;                                                                  \
    for (; i + 64 <= n; i += 64) {                                                                                    \
        a0 = v16_fma(LD(x + (i + 0) * (es)), LD(y + (i + 0) * (es)), a0);                                             \
        a1 = v16_fma(LD(x + (i + 16) * (es)), LD(y + (i + 16) * (es)), a1);                                           \
        a2 = v16_fma(LD(x + (i + 32) * (es)), LD(y + (i + 32) * (es)), a2);                                           \
        a3 = v16_fma(LD(x + (i + 48) * (es)), LD(y + (i + 48) * (es)), a3);                                           \
    }                                                                                                                 \
    const float steps = reduce16(v16_add(v16_add(a0, a2), v16_add(a1, a3)))

float tkv__dot_f32_ref_avx2(size_t n, const void *w, const void *a) {
    const uint8_t *x = w, *y = a;
    size_t i = 0;
    STEPS64(ld_f32, 4);
    float sum = steps;
    /* the tail as the avx512 twin takes it: rounded products added in order,
       the last n % 8 fused (this file is built with -ffp-contract=off) */
    for (const size_t fused_from = n - n % 8; i < n; i++) {
        float xi, yi;
        __builtin_memcpy(&xi, x + 4 * i, 4);
        __builtin_memcpy(&yi, y + 4 * i, 4);
        sum = i < fused_from ? sum + xi * yi : __builtin_fmaf(xi, yi, sum);
    }
    return sum;
}

float tkv__dot_f16_ref_avx2(size_t n, const void *w, const void *a) {
    const uint8_t *x = w, *y = a;
    size_t i = 0;
    STEPS64(ld_f16, 2);
    double sum = steps;
    for (; i < n; i++) {
        uint16_t xi, yi;
        __builtin_memcpy(&xi, x + 2 * i, 2);
        __builtin_memcpy(&yi, y + 2 * i, 2);
        sum += (double)(_cvtsh_ss(xi) * _cvtsh_ss(yi));
    }
    return (float)sum;
}

float tkv__dot_bf16_ref_avx2(size_t n, const void *w, const void *a) {
    const uint8_t *x = w, *y = a;
    size_t i = 0;
    v16 c1 = v16_zero(), c2 = c1;
    for (; i + 32 <= n; i += 32) {
        c1 = v16_fma(ld_bf16(x + 2 * i), ld_bf16(y + 2 * i), c1);
        c2 = v16_fma(ld_bf16(x + 2 * i + 32), ld_bf16(y + 2 * i + 32), c2);
    }
    double sum = reduce16(c1);
    sum += reduce16(c2);
    for (; i < n; i++) {
        uint16_t xi, yi;
        __builtin_memcpy(&xi, x + 2 * i, 2);
        __builtin_memcpy(&yi, y + 2 * i, 2);
        sum += (double)(tkv__quant_bf16_to_f32(xi) * tkv__quant_bf16_to_f32(yi));
    }
    return (float)sum;
}

/* ---- lanes: one accumulator per entry ------------------------------------------------ */

/*
 * All three as at the avx512 level (its comment says why): the tokens of a
 * tile are widened once, whole rows, into xbuf, and only the weights in
 * the tile. Tiles of RT rows x TT tokens: the RT x TT accumulators of two
 * halves, the widened weights and a token's halves fill the 16 ymm
 * registers. Measured at this level on the avx512 machine (the 125M
 * layer's products, 512 tokens, one thread): BF16 62 -> 88 GFLOP/s, F32
 * 40 -> 79. F16 there was faster in tiles of 2 rows x 2 tokens that widen
 * both operands (LANES_WIDE: 93 against 84), but the cores that run this
 * level are those without AVX-512, and on one of them (Zen 1, whose 8-lane
 * widening is two operations) these tiles are twice as fast: 12.1-12.5 ->
 * 26.7-27.1 GFLOP/s (bench_kernels --prefill -t 256, the 125m
 * layer on one thread; 1b: 12.2-12.5 -> 20.3-20.7). Rows longer than XMAX
 * take LANES_WIDE. The tile shape changes no sum: each entry is one
 * accumulator over its whole row, in element order.
 */
#define RT 1
#define TT 6
#define RB 128    /* rows per block: a block's weights stay in L2 across its token tiles */
#define XMAX 2048 /* elements: xbuf holds TT rows of it, 48 KiB of stack */

static inline v16 ldx(const float *p) { return (v16){_mm256_load_ps(p), _mm256_load_ps(p + 8)}; }

/* The tile at rows wr and tokens xp (n floats apart): nt is a constant
   where it is inlined, so the accumulators stay in registers. */
#define DEFINE_TILE(name, LD, es)                                                                                     \
    static inline __attribute__((always_inline)) void name(size_t n, const uint8_t *const *wr, const float *xp,       \
                                                           float *yt, size_t ldy, size_t nr, size_t nt) {             \
        v16 acc[RT][TT];                                                                                              \
        for (size_t r = 0; r < RT; r++)                                                                               \
            for (size_t t = 0; t < nt; t++) acc[r][t] = v16_zero();                                                   \
        for (size_t i = 0; i < n; i += 16) {                                                                          \
            v16 wv[RT];                                                                                               \
            for (size_t r = 0; r < RT; r++) wv[r] = LD(wr[r] + i * (es));                                             \
            for (size_t t = 0; t < nt; t++) {                                                                         \
                const v16 xv = ldx(xp + t * n + i);                                                                   \
                for (size_t r = 0; r < RT; r++) acc[r][t] = v16_fma(wv[r], xv, acc[r][t]);                            \
            }                                                                                                         \
        }                                                                                                             \
        for (size_t t = 0; t < nt; t++)                                                                               \
            for (size_t r = 0; r < nr; r++) yt[t * ldy + r] = reduce16(acc[r][t]);                                   \
    }

DEFINE_TILE(tile_f32, ld_f32, 4)
DEFINE_TILE(tile_bf16, ld_bf16, 2)
DEFINE_TILE(tile_f16, ld_f16, 2)

/* Tiles of 2 rows x 2 tokens that widen both operands. */
#define LANES_WIDE(LD, es)                                                                                            \
    do {                                                                                                              \
        for (size_t r0 = 0; r0 < n_rows; r0 += 2)                                                                     \
            for (size_t t0 = 0; t0 < n_tok; t0 += 2) {                                                                \
                const size_t nr = n_rows - r0 < 2 ? n_rows - r0 : 2, nt = n_tok - t0 < 2 ? n_tok - t0 : 2;            \
                const uint8_t *wt = wb + r0 * wrs, *xt = xb + t0 * xrs;                                               \
                float *yt = y + t0 * ldy + r0;                                                                        \
                v16 acc[2][2];                                                                                        \
                for (size_t r = 0; r < 2; r++)                                                                        \
                    for (size_t t = 0; t < 2; t++) acc[r][t] = v16_zero();                                            \
                if (nr == 2 && nt == 2) {                                                                             \
                    for (size_t i = 0; i < n; i += 16) {                                                              \
                        const v16 w0 = LD(wt + i * (es)), w1 = LD(wt + wrs + i * (es));                               \
                        for (size_t t = 0; t < 2; t++) {                                                              \
                            const v16 xv = LD(xt + t * xrs + i * (es));                                               \
                            acc[0][t] = v16_fma(w0, xv, acc[0][t]);                                                   \
                            acc[1][t] = v16_fma(w1, xv, acc[1][t]);                                                   \
                        }                                                                                             \
                    }                                                                                                 \
                } else {                                                                                              \
                    for (size_t i = 0; i < n; i += 16)                                                                \
                        for (size_t r = 0; r < nr; r++)                                                               \
                            for (size_t t = 0; t < nt; t++)                                                           \
                                acc[r][t] = v16_fma(LD(wt + r * wrs + i * (es)), LD(xt + t * xrs + i * (es)), acc[r][t]); \
                }                                                                                                     \
                for (size_t r = 0; r < nr; r++)                                                                       \
                    for (size_t t = 0; t < nt; t++) yt[t * ldy + r] = reduce16(acc[r][t]);                           \
            }                                                                                                         \
    } while (0)

#define LANES_LOOP(LD, es, TILE)                                                                                      \
    const uint8_t *wb = w, *xb = xq;                                                                                  \
    if (n > XMAX) {                                                                                                   \
        LANES_WIDE(LD, es);                                                                                           \
        return;                                                                                                       \
    }                                                                                                                 \
    _Alignas(32) float xbuf[TT * XMAX];                                                                               \
    for (size_t rb = 0; rb < n_rows; rb += RB) {                                                                      \
        const size_t re = n_rows - rb < RB ? n_rows : rb + RB;                                                        \
        for (size_t t0 = 0; t0 < n_tok; t0 += TT) {                                                                   \
            const size_t nt = n_tok - t0 < TT ? n_tok - t0 : TT;                                                      \
            for (size_t t = 0; t < nt; t++)                                                                           \
                for (size_t i = 0; i < n; i += 16) {                                                                  \
                    const v16 v = LD(xb + (t0 + t) * xrs + i * (es));                                                 \
                    _mm256_store_ps(xbuf + t * n + i, v.lo), _mm256_store_ps(xbuf + t * n + i + 8, v.hi);             \
                }                                                                                                     \
            for (size_t r0 = rb; r0 < re; r0 += RT) {                                                                 \
                const size_t nr = re - r0 < RT ? re - r0 : RT;                                                        \
                const uint8_t *wr[RT];                                                                                \
                for (size_t r = 0; r < RT; r++) wr[r] = wb + (r0 + (r < nr ? r : nr - 1)) * wrs;                      \
                float *yt = y + t0 * ldy + r0;                                                                        \
                switch (nt) {                                                                                         \
                case 6: TILE(n, wr, xbuf, yt, ldy, nr, 6); break;                                                     \
                case 5: TILE(n, wr, xbuf, yt, ldy, nr, 5); break;                                                     \
                case 4: TILE(n, wr, xbuf, yt, ldy, nr, 4); break;                                                     \
                case 3: TILE(n, wr, xbuf, yt, ldy, nr, 3); break;                                                     \
                case 2: TILE(n, wr, xbuf, yt, ldy, nr, 2); break;                                                     \
                default: TILE(n, wr, xbuf, yt, ldy, nr, 1); break;                                                    \
                }                                                                                                     \
            }                                                                                                         \
        }                                                                                                             \
    }

void tkv__lanes_f32_avx2(size_t n, const void *w, size_t wrs, size_t n_rows, const void *xq, size_t xrs, size_t n_tok,
                         float *y, size_t ldy) {
    LANES_LOOP(ld_f32, 4, tile_f32)
}

void tkv__lanes_f16_avx2(size_t n, const void *w, size_t wrs, size_t n_rows, const void *xq, size_t xrs, size_t n_tok,
                         float *y, size_t ldy) {
    LANES_LOOP(ld_f16, 2, tile_f16)
}

void tkv__lanes_bf16_avx2(size_t n, const void *w, size_t wrs, size_t n_rows, const void *xq, size_t xrs, size_t n_tok,
                          float *y, size_t ldy) {
    LANES_LOOP(ld_bf16, 2, tile_bf16)
}

#endif
