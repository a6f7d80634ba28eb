/*
 * compute/x86/avx512/gemm_bf16_pairs.c — BF16 products in the default (batch-invariant) order, the arithmetic
 * of AVX512_BF16's dot product, so that a CPU with it runs 32 multiply-adds an instruction where the
 * reference's order (gemm_float.c) runs 16 and widens every weight first.
 *
 * The pairs order (gemm.h): each (row, token) entry is one accumulator of 16 float lanes run over the row in
 * steps of 32 elements; at step s lane j adds the product of elements 32 s + 2 j + 1, then that of 32 s + 2 j,
 * each add rounded to nearest even with the product exact (two BF16 values multiply exactly in float); an
 * input that is subnormal (a weight, a token's value, the running lane) reads as zero and a subnormal sum
 * becomes zero of its sign; a row's last partial step reads zeros past its end (rows are a multiple of 16
 * long); then the 16 lanes by halves (compute/x86/util.h's sum16_halves), with subnormals kept. One vdpbf16ps per step
 * computes exactly that (on this file's first machine, an AMD EPYC: 4.8 million random lanes, subnormal and
 * underflowing cases among them, equal to the bit); a CPU without it computes the same with two fused
 * multiply-adds a step under MXCSR's DAZ and FTZ (equal to the bit as well), which this file does too.
 *
 * Tiles of RT rows x TT tokens, as gemm_float.c's lanes products: rows in blocks of RB (their weights stay in
 * L2 over the block's tiles of tokens), rows in chunks of KC elements (a tile of tokens' chunk stays in L1),
 * the accumulators stashed between chunks (storing a float vector and loading it back changes no bit) and
 * reduced once the block's rows are done. vdpbf16ps reads the tokens' BF16 values as they are; the emulation
 * splits each chunk of tokens once into its odd and even elements as floats (xbuf).
 */
#include "compute/gemm.h"
#include "compute/kernels.h"
#include "compute/x86/util.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#if defined(__x86_64__) && defined(__AVX512F__) && defined(__AVX2__)
#include <immintrin.h>

enum {
    RT = 4,    /* rows of a tile: 4 x 6 accumulators, 4 weights and a token in 29 of the 32 registers */
    TT = 6,    /* tokens of a tile */
    RB = 64,   /* rows per block: the stash of their accumulators, 24 KiB */
    KC = 1024, /* elements per chunk: 6 tokens' chunk as floats (the emulation's xbuf), 24 KiB */
    CSR_DAZ_FTZ = 0x8040,
};

static inline float reduce16(__m512 v) {
    return sum16_halves(_mm512_castps512_ps256(v), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
}

/* 32 BF16 values at p, the row's last (partial: 16 values) step zero past them. */
INLINE __m512i ld32(const uint8_t *p, bool half) {
    return half ? _mm512_zextsi256_si512(_mm256_loadu_si256((const __m256i *)(const void *)p))
                : _mm512_loadu_si512((const void *)p);
}

/* Odd and even elements of 32 BF16 values as floats: the high half of each pair's dword, and the low half
   shifted up. */
INLINE __m512 odd_of(__m512i v) { return _mm512_castsi512_ps(_mm512_and_si512(v, _mm512_set1_epi32((int)0xffff0000))); }
INLINE __m512 even_of(__m512i v) { return _mm512_castsi512_ps(_mm512_slli_epi32(v, 16)); }

/*
 * The tile at rows wr over elements [0, kc) of the chunk, nt tokens (a constant where inlined): accumulators
 * from st (zero at the row's first chunk) back to st (TT a row). dp: vdpbf16ps on the tokens' BF16 values at
 * xt[t]; else two fused multiply-adds on xbuf's odd and even floats (32 floats a step: odd, then even).
 */
#define DEFINE_TILE(name, TARGET, ...)                                                                                 \
    TARGET static inline __attribute__((always_inline)) void name(size_t kc, bool tail, const uint8_t *const *wr,    \
                                                                  const uint8_t *const *xt, const float *xbuf,        \
                                                                  __m512 *st, bool first, size_t nt) {                \
        (void)xt, (void)xbuf; /* one of the two is the tile's tokens */                                              \
        __m512 acc[RT][TT];                                                                                           \
        for (size_t r = 0; r < RT; r++)                                                                               \
            for (size_t t = 0; t < nt; t++) acc[r][t] = first ? _mm512_setzero_ps() : st[r * TT + t];                 \
        for (size_t i = 0; i < kc; i += 32) {                                                                         \
            const bool half = tail && i + 32 > kc;                                                                    \
            __m512i wv[RT];                                                                                           \
            for (size_t r = 0; r < RT; r++) wv[r] = ld32(wr[r] + 2 * i, half);                                        \
            __VA_ARGS__                                                                                               \
        }                                                                                                             \
        for (size_t r = 0; r < RT; r++)                                                                               \
            for (size_t t = 0; t < nt; t++) st[r * TT + t] = acc[r][t];                                               \
    }

DEFINE_TILE(tile_dp, __attribute__((target("avx512bf16"))), for (size_t t = 0; t < nt; t++) {
    const __m512bh xv = (__m512bh)ld32(xt[t] + 2 * i, half);
    for (size_t r = 0; r < RT; r++) acc[r][t] = _mm512_dpbf16_ps(acc[r][t], (__m512bh)wv[r], xv);
})

DEFINE_TILE(tile_emu, , {
    __m512 wo[RT], we[RT];
    for (size_t r = 0; r < RT; r++) wo[r] = odd_of(wv[r]), we[r] = even_of(wv[r]);
    for (size_t t = 0; t < nt; t++) {
        const __m512 xo = _mm512_load_ps(xbuf + t * KC + i), xe = _mm512_load_ps(xbuf + t * KC + i + 16);
        for (size_t r = 0; r < RT; r++) acc[r][t] = _mm512_fmadd_ps(we[r], xe, _mm512_fmadd_ps(wo[r], xo, acc[r][t]));
    }
})

/* The block's tiles of rows [rb, re) over one chunk, a tile function per token count. */
#define TILES(TILE)                                                                                                   \
    for (size_t r0 = rb; r0 < re; r0 += RT) {                                                                         \
        const size_t nr = re - r0 < RT ? re - r0 : RT;                                                                \
        const uint8_t *wr[RT]; /* a partial tile reads its last row again (entries dropped) */                       \
        for (size_t r = 0; r < RT; r++) wr[r] = wb + (r0 + (r < nr ? r : nr - 1)) * wrs + 2 * k0;                      \
        __m512 *sr = st + (r0 - rb) * TT;                                                                             \
        switch (nt) {                                                                                                 \
        case 6: TILE(kc, tail, wr, xt, xbuf, sr, k0 == 0, 6); break;                                                  \
        case 5: TILE(kc, tail, wr, xt, xbuf, sr, k0 == 0, 5); break;                                                  \
        case 4: TILE(kc, tail, wr, xt, xbuf, sr, k0 == 0, 4); break;                                                  \
        case 3: TILE(kc, tail, wr, xt, xbuf, sr, k0 == 0, 3); break;                                                  \
        case 2: TILE(kc, tail, wr, xt, xbuf, sr, k0 == 0, 2); break;                                                  \
        default: TILE(kc, tail, wr, xt, xbuf, sr, k0 == 0, 1); break;                                                 \
        }                                                                                                             \
    }

/* The stash of rows [rb, re) x nt tokens, reduced into y. */
static void reduce_block(const __m512 *st, size_t rb, size_t re, size_t t0, size_t nt, float *y, size_t ldy) {
    for (size_t r = rb; r < re; r++)
        for (size_t t = 0; t < nt; t++) y[(t0 + t) * ldy + r] = reduce16(st[(r - rb) * TT + t]);
}

/* One token: a row at a time, front to back (one sequential stream: what memory serves fastest). */
__attribute__((target("avx512bf16"))) static void one_token_dp(size_t n, const uint8_t *wb, size_t wrs, size_t n_rows,
                                                               const uint8_t *xb, float *y) {
    for (size_t r = 0; r < n_rows; r++) {
        const uint8_t *w = wb + r * wrs;
        __m512 acc = _mm512_setzero_ps();
        for (size_t i = 0; i < n; i += 32) {
            const bool half = i + 32 > n;
            acc = _mm512_dpbf16_ps(acc, (__m512bh)ld32(w + 2 * i, half), (__m512bh)ld32(xb + 2 * i, half));
        }
        y[r] = reduce16(acc);
    }
}

static void one_token_emu(size_t n, const uint8_t *wb, size_t wrs, size_t n_rows, const uint8_t *xb, float *y) {
    const unsigned csr = _mm_getcsr();
    for (size_t r = 0; r < n_rows; r++) {
        const uint8_t *w = wb + r * wrs;
        __m512 acc = _mm512_setzero_ps();
        _mm_setcsr(csr | CSR_DAZ_FTZ);
        for (size_t i = 0; i < n; i += 32) {
            const bool half = i + 32 > n;
            const __m512i wv = ld32(w + 2 * i, half), xv = ld32(xb + 2 * i, half);
            acc = _mm512_fmadd_ps(even_of(wv), even_of(xv), _mm512_fmadd_ps(odd_of(wv), odd_of(xv), acc));
        }
        _mm_setcsr(csr); /* the lanes' sum keeps its subnormals */
        y[r] = reduce16(acc);
    }
}

__attribute__((target("avx512bf16"))) void tkv__lanes_bf16_pairs_dp_avx512(size_t n, const void *w, size_t wrs,
                                                                          size_t n_rows, const void *xq, size_t xrs,
                                                                          size_t n_tok, float *y, size_t ldy) {
    const uint8_t *wb = w, *xb = xq;
    if (n_tok == 1) {
        one_token_dp(n, wb, wrs, n_rows, xb, y);
        return;
    }
    __m512 st[RB * TT];
    const float *xbuf = NULL;
    for (size_t rb = 0; rb < n_rows; rb += RB) {
        const size_t re = n_rows - rb < RB ? n_rows : rb + RB;
        for (size_t t0 = 0; t0 < n_tok; t0 += TT) {
            const size_t nt = n_tok - t0 < TT ? n_tok - t0 : TT;
            for (size_t k0 = 0; k0 < n; k0 += KC) {
                const size_t kc = n - k0 < KC ? n - k0 : KC;
                const bool tail = kc % 32 != 0;
                const uint8_t *xt[TT];
                for (size_t t = 0; t < nt; t++) xt[t] = xb + (t0 + t) * xrs + 2 * k0;
                TILES(tile_dp)
            }
            reduce_block(st, rb, re, t0, nt, y, ldy);
        }
    }
}

void tkv__lanes_bf16_pairs_emu_avx512(size_t n, const void *w, size_t wrs, size_t n_rows, const void *xq, size_t xrs,
                                      size_t n_tok, float *y, size_t ldy) {
    const uint8_t *wb = w, *xb = xq;
    if (n_tok == 1) {
        one_token_emu(n, wb, wrs, n_rows, xb, y);
        return;
    }
    __m512 st[RB * TT];
    _Alignas(64) float xbuf[TT * KC];
    _Static_assert(sizeof st + sizeof xbuf <= 80 * 1024, "the buffers of a product live on the stack (kernels.h)");
    const unsigned csr = _mm_getcsr();
    for (size_t rb = 0; rb < n_rows; rb += RB) {
        const size_t re = n_rows - rb < RB ? n_rows : rb + RB;
        for (size_t t0 = 0; t0 < n_tok; t0 += TT) {
            const size_t nt = n_tok - t0 < TT ? n_tok - t0 : TT;
            _mm_setcsr(csr | CSR_DAZ_FTZ);
            for (size_t k0 = 0; k0 < n; k0 += KC) {
                const size_t kc = n - k0 < KC ? n - k0 : KC;
                const bool tail = kc % 32 != 0;
                const uint8_t *const *xt = NULL;
                for (size_t t = 0; t < nt; t++)
                    for (size_t i = 0; i < kc; i += 32) {
                        const __m512i v = ld32(xb + (t0 + t) * xrs + 2 * (k0 + i), tail && i + 32 > kc);
                        _mm512_store_ps(xbuf + t * KC + i, odd_of(v));
                        _mm512_store_ps(xbuf + t * KC + i + 16, even_of(v));
                    }
                TILES(tile_emu)
            }
            _mm_setcsr(csr); /* the lanes' sums keep their subnormals */
            reduce_block(st, rb, re, t0, nt, y, ldy);
        }
    }
}

void tkv__lanes_bf16_pairs_avx512(size_t n, const void *w, size_t wrs, size_t n_rows, const void *xq, size_t xrs,
                                  size_t n_tok, float *y, size_t ldy) {
    if (tkv__kernel_cpu_bf16_dot()) tkv__lanes_bf16_pairs_dp_avx512(n, w, wrs, n_rows, xq, xrs, n_tok, y, ldy);
    else tkv__lanes_bf16_pairs_emu_avx512(n, w, wrs, n_rows, xq, xrs, n_tok, y, ldy);
}

#endif
