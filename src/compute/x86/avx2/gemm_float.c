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
 * tile are widened once per chunk into xbuf, and only the weights in the
 * tile. The tile shape changes no sum: each entry is one accumulator over
 * its whole row, in element order, carried across chunks in a stash.
 *
 * Each entry's 16 lanes are two independent 8-lane halves (lane l sums
 * elements l, l + 16, ...), so a tile runs its chunk twice, lanes 0-7 then
 * lanes 8-15, and holds twice the entries in the 16 ymm registers: tiles
 * of RT = 3 rows x TT = 4 tokens, 12 accumulators, the rows' widened
 * weights and a token's 8 values. A step of 8 elements is 12 fused
 * multiply-adds against 7 loads and 3 widenings (the earlier tiles of one
 * row x 6 tokens, each entry as two halves at once, were 12 against 14
 * loads and 2 widenings). xbuf keeps each token's halves apart, so a pass
 * reads only the lines of its half, 8 KiB a chunk (the earlier whole rows,
 * 48 KiB at 2048 elements, left L1). Zen 3, one thread, 384 rows x 512
 * tokens in cache: F16 at 2048 elements 37 -> 70 GF/s; at the 125M shape,
 * pp512 +16% (0.74x -> 0.80-0.90x llama-bench's).
 */
#define RT 3
#define TT 4
#define RB 96   /* rows per block, a multiple of RT: the stash, 24 KiB */
#define KC 1024 /* elements per chunk: xbuf, 4 tokens' chunk as floats, 16 KiB */

/* v in a register: gcc would fold its load into each row's multiply-add, one load per row */
#define REG(v) __asm__("" : "+x"(v))

/* 8 elements of a row as floats */
static inline __m256 ld8_f32(const uint8_t *p) { return _mm256_loadu_ps((const float *)(const void *)p); }
static inline __m256 ld8_f16(const uint8_t *p) { return _mm256_cvtph_ps(LD128(p)); }
#define ld8_bf16 bf16x8

/* Rows wr[0 .. RT) over elements [0, kc) of the chunk, nt tokens of xbuf (KC floats each: lanes 0-7 of every
   16-element step, then lanes 8-15), half h at a time: the accumulators (row, token, half) from st (zero at the
   rows' first chunk) back to st. nt is a constant where it is inlined, so they stay in registers. */
#define DEFINE_TILE(name, LD8, es)                                                                                    \
    static inline __attribute__((always_inline)) void name(size_t kc, const uint8_t *const *wr, const float *xbuf,    \
                                                           __m256 *st, int first, size_t nt) {                        \
        for (size_t h = 0; h < 2; h++) {                                                                              \
            __m256 acc[RT][TT];                                                                                       \
            for (size_t r = 0; r < RT; r++)                                                                           \
                for (size_t t = 0; t < nt; t++) acc[r][t] = first ? _mm256_setzero_ps() : st[(r * TT + t) * 2 + h];  \
            for (size_t i = 0; i < kc; i += 16) {                                                                     \
                __m256 wv[RT];                                                                                        \
                for (size_t r = 0; r < RT; r++) wv[r] = LD8(wr[r] + (i + 8 * h) * (es));                              \
                for (size_t t = 0; t < nt; t++) {                                                                     \
                    __m256 xv = _mm256_load_ps(xbuf + t * KC + h * (KC / 2) + i / 2);                                 \
                    REG(xv);                                                                                          \
                    for (size_t r = 0; r < RT; r++) acc[r][t] = _mm256_fmadd_ps(wv[r], xv, acc[r][t]);                \
                }                                                                                                     \
            }                                                                                                         \
            for (size_t r = 0; r < RT; r++)                                                                           \
                for (size_t t = 0; t < nt; t++) st[(r * TT + t) * 2 + h] = acc[r][t];                                 \
        }                                                                                                             \
    }

DEFINE_TILE(tile_f32, ld8_f32, 4)
DEFINE_TILE(tile_bf16, ld8_bf16, 2)
DEFINE_TILE(tile_f16, ld8_f16, 2)

/* Rows in blocks of RB, each block's tokens in tiles of TT, each tile's rows in chunks of KC (a last odd row of a
   block computed twice, kept once); the stash's entries reduced to y after a tile's last chunk. */
#define LANES_LOOP(LD8, es, TILE)                                                                                     \
    const uint8_t *wb = w, *xb = xq;                                                                                  \
    __m256 st[RB * TT * 2];                                                                                           \
    _Alignas(32) float xbuf[TT * KC];                                                                                 \
    _Static_assert(sizeof st + sizeof xbuf <= 80 * 1024, "the buffers of a product live on the stack (kernels.h)");   \
    for (size_t rb = 0; rb < n_rows; rb += RB) {                                                                      \
        const size_t re = n_rows - rb < RB ? n_rows : rb + RB;                                                        \
        for (size_t t0 = 0; t0 < n_tok; t0 += TT) {                                                                   \
            const size_t nt = n_tok - t0 < TT ? n_tok - t0 : TT;                                                      \
            for (size_t k0 = 0; k0 < n; k0 += KC) {                                                                   \
                const size_t kc = n - k0 < KC ? n - k0 : KC;                                                          \
                for (size_t t = 0; t < nt; t++)                                                                       \
                    for (size_t i = 0; i < kc; i += 16) {                                                             \
                        const uint8_t *xi = xb + (t0 + t) * xrs + (k0 + i) * (es);                                    \
                        _mm256_store_ps(xbuf + t * KC + i / 2, LD8(xi));                                              \
                        _mm256_store_ps(xbuf + t * KC + KC / 2 + i / 2, LD8(xi + 8 * (es)));                          \
                    }                                                                                                 \
                for (size_t r0 = rb; r0 < re; r0 += RT) {                                                             \
                    const uint8_t *wr[RT];                                                                            \
                    for (size_t r = 0; r < RT; r++) wr[r] = wb + (r0 + r < re ? r0 + r : re - 1) * wrs + k0 * (es);   \
                    __m256 *sr = st + (r0 - rb) * TT * 2;                                                             \
                    switch (nt) {                                                                                     \
                    case 4: TILE(kc, wr, xbuf, sr, k0 == 0, 4); break;                                                \
                    case 3: TILE(kc, wr, xbuf, sr, k0 == 0, 3); break;                                                \
                    case 2: TILE(kc, wr, xbuf, sr, k0 == 0, 2); break;                                                \
                    default: TILE(kc, wr, xbuf, sr, k0 == 0, 1); break;                                               \
                    }                                                                                                 \
                }                                                                                                     \
            }                                                                                                         \
            for (size_t r = rb; r < re; r++)                                                                          \
                for (size_t t = 0; t < nt; t++) {                                                                     \
                    const __m256 *e = st + (r - rb) * TT * 2 + 2 * t;                                                 \
                    y[(t0 + t) * ldy + r] = sum16_halves(e[0], e[1]);                                                 \
                }                                                                                                     \
        }                                                                                                             \
    }

void tkv__lanes_f32_avx2(size_t n, const void *w, size_t wrs, size_t n_rows, const void *xq, size_t xrs, size_t n_tok,
                         float *y, size_t ldy) {
    LANES_LOOP(ld8_f32, 4, tile_f32)
}

void tkv__lanes_f16_avx2(size_t n, const void *w, size_t wrs, size_t n_rows, const void *xq, size_t xrs, size_t n_tok,
                         float *y, size_t ldy) {
    LANES_LOOP(ld8_f16, 2, tile_f16)
}

void tkv__lanes_bf16_avx2(size_t n, const void *w, size_t wrs, size_t n_rows, const void *xq, size_t xrs, size_t n_tok,
                          float *y, size_t ldy) {
    LANES_LOOP(ld8_bf16, 2, tile_bf16)
}

#endif
