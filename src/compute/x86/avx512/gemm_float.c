/*
 * compute/x86/avx512/gemm_float.c — products of float weights (F32, F16, BF16 rows, with
 * activations in the same format) in the reference implementation's
 * arithmetic on an AVX-512 CPU. Float sums depend on their order, and a
 * difference in the last bit of a K or V value can flip its rounding to F16
 * in the KV cache, a step that then shows in the logits; so these follow the
 * reference's order exactly, and float models agree with it to the bit.
 *
 * The reference has two orders, and so do we (see gemm.h):
 *
 *   vec_dot (one token; a matrix the tiled order cannot take):
 *     F32, F16: four 16-lane accumulators over 64-element steps (fused
 *       multiply-adds), added as (0 + 2) + (1 + 3), the 16 lanes reduced by
 *       reduce16; then the tail element by element (F32: into a float sum,
 *       the products rounded and added in order except the last n % 8,
 *       which are fused: the reference's compiler vectorised that loop, and
 *       only its scalar remainder became fused multiply-adds; F16: products
 *       added in double).
 *     BF16: two 16-lane accumulators over 32-element steps, each reduced by
 *       reduce16 and added in double, tail in double.
 *
 *   lanes (two tokens or more): every (row, token) entry is ONE accumulator
 *     of 16 lanes run over the whole row, then reduce16. Only for rows that
 *     are a multiple of 16 long (ops.c also asks for a multiple of 4 rows,
 *     as the reference does).
 *
 * BF16 rows: the reference's parity files were made without the AVX512_BF16
 * instructions (vdpbf16ps rounds after each product of a pair, in another
 * order, and its results did not match them; the fused multiply-adds of
 * converted values match to the bit), so these, the reference's order, use
 * AVX-512 F only, on every CPU. The default order of BF16 products is
 * vdpbf16ps's own (gemm_bf16_pairs.c), where these serve as lanes_ref.
 *
 * reduce16: lanes l + 8 and l, then l + 4 and l, then l + 2 and l, then 1
 * and 0 (the order _mm512_reduce_add_ps has in the reference's compiler),
 * written out so that it does not depend on ours.
 *
 * Products of two F16 or two BF16 values are exact in float, so a fused
 * multiply-add and a multiply then add give the same sum for them.
 */
#include "compute/gemm.h"
#include "compute/quant/quant.h"
#include "compute/x86/util.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#if defined(__x86_64__) && defined(__AVX512F__) && defined(__AVX2__) && defined(__F16C__)
#include <immintrin.h>

static inline float reduce16(__m512 v) {
    return sum16_halves(_mm512_castps512_ps256(v), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
}

static inline __m512 ld_f32(const uint8_t *p) { return _mm512_loadu_ps(p); }
static inline __m512 ld_f16(const uint8_t *p) { return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)p)); }
static inline __m512 ld_bf16(const uint8_t *p) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(const void *)p)), 16));
}

/* ---- vec_dot ----------------------------------------------------------------------- */

/* The 64-element steps of F32 and F16 rows (es: bytes per element). */
#define STEPS64(LD, es)                                                                                               \
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;                                                      \
    for (; i + 64 <= n; i += 64) {                                                                                    \
        a0 = _mm512_fmadd_ps(LD(x + (i + 0) * (es)), LD(y + (i + 0) * (es)), a0);                                     \
        a1 = _mm512_fmadd_ps(LD(x + (i + 16) * (es)), LD(y + (i + 16) * (es)), a1);                                   \
        a2 = _mm512_fmadd_ps(LD(x + (i + 32) * (es)), LD(y + (i + 32) * (es)), a2);                                   \
        a3 = _mm512_fmadd_ps(LD(x + (i + 48) * (es)), LD(y + (i + 48) * (es)), a3);                                   \
    }                                                                                                                 \
    const float steps = reduce16(_mm512_add_ps(_mm512_add_ps(a0, a2), _mm512_add_ps(a1, a3)))

float tkv__dot_f32_ref_avx512(size_t n, const void *w, const void *a) {
    const uint8_t *x = w, *y = a;
    size_t i = 0;
    STEPS64(ld_f32, 4);
    float sum = steps;
    /* the reference's compiler vectorised its tail loop 8 and 16 elements at
       a time as products then in-order adds, and fused only the last n % 8
       (the add is not contracted: this file is built with -ffp-contract=off) */
    for (const size_t fused_from = n - n % 8; i < n; i++) {
        float xi, yi;
        __builtin_memcpy(&xi, x + 4 * i, 4);
        __builtin_memcpy(&yi, y + 4 * i, 4);
        sum = i < fused_from ? sum + xi * yi : __builtin_fmaf(xi, yi, sum);
    }
    return sum;
}

float tkv__dot_f16_ref_avx512(size_t n, const void *w, const void *a) {
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

static double bf16_tail(double sum, const uint8_t *x, const uint8_t *y, size_t i, size_t n) {
    for (; i < n; i++) {
        uint16_t xi, yi;
        __builtin_memcpy(&xi, x + 2 * i, 2);
        __builtin_memcpy(&yi, y + 2 * i, 2);
        sum += (double)(tkv__quant_bf16_to_f32(xi) * tkv__quant_bf16_to_f32(yi));
    }
    return sum;
}

float tkv__dot_bf16_ref_avx512(size_t n, const void *w, const void *a) {
    const uint8_t *x = w, *y = a;
    size_t i = 0;
    __m512 c1 = _mm512_setzero_ps(), c2 = c1;
    for (; i + 32 <= n; i += 32) {
        c1 = _mm512_fmadd_ps(ld_bf16(x + 2 * i), ld_bf16(y + 2 * i), c1);
        c2 = _mm512_fmadd_ps(ld_bf16(x + 2 * i + 32), ld_bf16(y + 2 * i + 32), c2);
    }
    double sum = reduce16(c1);
    sum += reduce16(c2);
    return (float)bf16_tail(sum, x, y, i, n);
}

/* ---- lanes: one accumulator per entry ---------------------------------------------- */

/*
 * Two tokens or more: tiles of RT rows x TT tokens.
 *
 * Widening an F16 or BF16 vector costs about as much as the multiply-add it
 * feeds, and a tile that widens both operands does RT + TT of them per
 * RT x TT multiply-adds. So the tile's TT tokens are widened once, whole
 * rows of them, into xbuf (read by every tile of rows that follows), and
 * only the weights are widened in the tile: RT per RT x TT multiply-adds.
 * F32 tokens are copied to xbuf the same way (aligned, and one path).
 *
 * Rows up to XMAX long are one chunk, and a tile's accumulators stay in
 * registers from the row's start to its end. Longer rows go in chunks of
 * KCL (the chunk's tokens and a block's accumulators then fit L1 together),
 * the accumulators kept in the stash st between chunks: storing a float
 * vector and loading it back changes no bit. Either way each entry is one
 * accumulator run over its whole row in element order, then reduce16.
 * A partial tile of rows reads its last row again for the missing ones
 * (their entries are dropped); a partial tile of tokens is a narrower tile.
 *
 * Measured on this file's first AVX-512 machine, one thread, 512 tokens,
 * against tiles of 4 rows x 3 tokens that widened both operands: the 125M
 * layer's F16 products from 150 to 180 GFLOP/s, BF16 likewise, F32 from 65
 * to 150; F16 rows of 4096 from 140 to 165, of 8192 about even (their
 * weights outgrow L2). Converting panels of rows and of tokens into L1
 * buffers in short chunks (256), with a stash for every entry of the
 * panel, ran at 120 on the 125M layer: its stores of widened vectors and
 * accumulators cost more than it saved.
 */
#define RT 4   /* rows of a tile: 4 x 6 accumulators, 4 weights and a token in 29 of the 32 registers */
#define TT 6   /* tokens of a tile (TILES_FOR has a case for each count up to it) */
#define RB 128 /* rows per block: a block's weights stay in L2 across its token tiles */
#define XMAX 2048 /* the longest row taken in one chunk: xbuf holds TT rows of it, 48 KiB of stack */
#define KCL 1024  /* elements per chunk of a longer row */
#define RBS 64    /* rows per block for rows of 2+ chunks: the stash of their accumulators, 24 KiB */

/* The tile at rows wr and tokens xp (kc floats apart) over a chunk of kc
   elements: its accumulators start from zero at the row's first chunk, else
   from st (TT a row), and go back to st, or after the row's last chunk are
   reduced into yt. nt is a constant where it is inlined, so they stay in
   registers over the chunk. */
#define DEFINE_TILE(name, LD, es)                                                                                     \
    static inline __attribute__((always_inline)) void name(size_t kc, const uint8_t *const *wr, const float *xp,      \
                                                           __m512 *st, bool first, bool last, float *yt, size_t ldy,  \
                                                           size_t nr, size_t nt) {                                    \
        __m512 acc[RT][TT];                                                                                           \
        for (size_t r = 0; r < RT; r++)                                                                               \
            for (size_t t = 0; t < nt; t++) acc[r][t] = first ? _mm512_setzero_ps() : st[r * TT + t];                 \
        for (size_t i = 0; i < kc; i += 16) {                                                                         \
            __m512 wv[RT];                                                                                            \
            for (size_t r = 0; r < RT; r++) wv[r] = LD(wr[r] + i * (es));                                             \
            for (size_t t = 0; t < nt; t++) {                                                                         \
                const __m512 xv = _mm512_load_ps(xp + t * kc + i);                                                    \
                for (size_t r = 0; r < RT; r++) acc[r][t] = _mm512_fmadd_ps(wv[r], xv, acc[r][t]);                    \
            }                                                                                                         \
        }                                                                                                             \
        if (last) {                                                                                                   \
            for (size_t t = 0; t < nt; t++)                                                                           \
                for (size_t r = 0; r < nr; r++) yt[t * ldy + r] = reduce16(acc[r][t]);                               \
        } else {                                                                                                      \
            for (size_t r = 0; r < RT; r++)                                                                           \
                for (size_t t = 0; t < nt; t++) st[r * TT + t] = acc[r][t];                                           \
        }                                                                                                             \
    }

DEFINE_TILE(tile_f32, ld_f32, 4)
DEFINE_TILE(tile_f16, ld_f16, 2)
DEFINE_TILE(tile_bf16, ld_bf16, 2)

/* The block's rows against the chunk [k0, k0 + kc) of tokens t0.. (nt <= TT
   of them, in xbuf), a tile function per token count */
#define TILES_FOR(TILE, es)                                                                                           \
    do {                                                                                                              \
        const bool first = k0 == 0, last = k0 + kc == n;                                                              \
        for (size_t r0 = rb; r0 < re; r0 += RT) {                                                                     \
            const size_t nr = re - r0 < RT ? re - r0 : RT;                                                            \
            const uint8_t *wr[RT];                                                                                    \
            for (size_t r = 0; r < RT; r++) wr[r] = wb + (r0 + (r < nr ? r : nr - 1)) * wrs + k0 * (es);              \
            float *yt = y + t0 * ldy + r0;                                                                            \
            /* the stash serves rows of 2+ chunks (blocks of RBS rows); a one-chunk row's blocks of RB would          \
               point past it */                                                                                       \
            __m512 *sr = first && last ? st : st + (r0 - rb) * TT;                                                    \
            switch (nt) {                                                                                             \
            case 6: TILE(kc, wr, xbuf, sr, first, last, yt, ldy, nr, 6); break;                                       \
            case 5: TILE(kc, wr, xbuf, sr, first, last, yt, ldy, nr, 5); break;                                       \
            case 4: TILE(kc, wr, xbuf, sr, first, last, yt, ldy, nr, 4); break;                                       \
            case 3: TILE(kc, wr, xbuf, sr, first, last, yt, ldy, nr, 3); break;                                       \
            case 2: TILE(kc, wr, xbuf, sr, first, last, yt, ldy, nr, 2); break;                                       \
            default: TILE(kc, wr, xbuf, sr, first, last, yt, ldy, nr, 1); break;                                      \
            }                                                                                                         \
        }                                                                                                             \
    } while (0)

#define WIDEN_TOKENS(LD, es)                                                                                          \
    for (size_t t = 0; t < nt; t++)                                                                                   \
        for (size_t i = 0; i < kc; i += 16) _mm512_store_ps(xbuf + t * kc + i, LD(xb + (t0 + t) * xrs + (k0 + i) * (es)));

/*
 * One token (generation): a row at a time, read front to back. Each entry is
 * still one accumulator over the whole row, the same sums, bit for bit, as
 * the tiles'. Interleaving rows (2 to 8 at once, for more independent
 * chains) halved the speed once the matrix was out of cache: one sequential
 * stream is what memory serves fastest here (22 GB/s against 9 with two
 * rows at once, 3072 x 768 F16 rows x 64; 4 tiles of 4x1 ran at 10).
 */
#define LANES_ONE_TOKEN(LD, es)                                                                                       \
    do {                                                                                                              \
        for (size_t r0 = 0; r0 < n_rows; r0++) {                                                                      \
            const uint8_t *wr = wb + r0 * wrs;                                                                        \
            __m512 acc = _mm512_setzero_ps();                                                                         \
            for (size_t i = 0; i < n; i += 16) acc = _mm512_fmadd_ps(LD(wr + i * (es)), LD(xb + i * (es)), acc);      \
            y[r0] = reduce16(acc);                                                                                    \
        }                                                                                                             \
    } while (0)

#define LANES_LOOP(LD, es, TILE)                                                                                      \
    const uint8_t *wb = w, *xb = xq;                                                                                  \
    if (n_tok == 1) {                                                                                                 \
        LANES_ONE_TOKEN(LD, es);                                                                                      \
        return;                                                                                                       \
    }                                                                                                                 \
    _Alignas(64) float xbuf[TT * XMAX];                                                                               \
    __m512 st[RBS * TT];                                                                                              \
    const size_t kch = n > XMAX ? KCL : XMAX, rbn = n > XMAX ? RBS : RB; /* elements per chunk, rows per block */      \
    for (size_t rb = 0; rb < n_rows; rb += rbn) {                                                                     \
        const size_t re = n_rows - rb < rbn ? n_rows : rb + rbn;                                                      \
        for (size_t t0 = 0; t0 < n_tok; t0 += TT) {                                                                   \
            const size_t nt = n_tok - t0 < TT ? n_tok - t0 : TT;                                                      \
            for (size_t k0 = 0; k0 < n; k0 += kch) {                                                                  \
                const size_t kc = n - k0 < kch ? n - k0 : kch;                                                        \
                WIDEN_TOKENS(LD, es)                                                                                  \
                TILES_FOR(TILE, es);                                                                                  \
            }                                                                                                         \
        }                                                                                                             \
    }

void tkv__lanes_f32_avx512(size_t n, const void *w, size_t wrs, size_t n_rows, const void *xq, size_t xrs, size_t n_tok,
                           float *y, size_t ldy) {
    LANES_LOOP(ld_f32, 4, tile_f32)
}

void tkv__lanes_f16_avx512(size_t n, const void *w, size_t wrs, size_t n_rows, const void *xq, size_t xrs, size_t n_tok,
                           float *y, size_t ldy) {
    LANES_LOOP(ld_f16, 2, tile_f16)
}

void tkv__lanes_bf16_avx512(size_t n, const void *w, size_t wrs, size_t n_rows, const void *xq, size_t xrs, size_t n_tok,
                            float *y, size_t ldy) {
    LANES_LOOP(ld_bf16, 2, tile_bf16)
}

#endif
