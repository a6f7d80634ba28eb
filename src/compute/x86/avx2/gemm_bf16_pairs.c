/*
 * compute/x86/avx2/gemm_bf16_pairs.c — BF16 products in the pairs order (compute/gemm.h; the default,
 * batch-invariant order of BF16 weights, vdpbf16ps's arithmetic) at the avx2 level, bit for bit the avx512
 * level's (compute/x86/avx512/gemm_bf16_pairs.c, whose header describes the order): two fused multiply-adds
 * a step under MXCSR's DAZ and FTZ, the odd element's product first.
 *
 * A 16-lane accumulator is two ymm (lanes 0-7 from the first 32 bytes of each 64-byte step, 8-15 from the
 * second); the halves never mix until the reduction, which adds them first (lane l + 8 to lane l) and goes
 * on by halves. Tiles of 1 row x 6 tokens (12 accumulators, the row's odd and even floats, a token's value
 * from memory: 15 of the 16 registers), rows in blocks of RB, row chunks of KC with the accumulators in a
 * stash, each chunk of tokens split once into odd and even floats (xbuf).
 */
#include "compute/gemm.h"
#include "compute/x86/util.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#if defined(__x86_64__) && defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>

enum {
    TT = 6,    /* tokens of a tile */
    RB = 64,   /* rows per block: the stash, 24 KiB */
    KC = 1024, /* elements per chunk: xbuf, 6 tokens' chunk as floats, 24 KiB */
    CSR_DAZ_FTZ = 0x8040,
};

/* 16 BF16 values at p (half h of a step), zeros where the row has ended. */
INLINE __m256i ld16(const uint8_t *p, bool none) {
    return none ? _mm256_setzero_si256() : _mm256_loadu_si256((const __m256i *)(const void *)p);
}

INLINE __m256 odd_of(__m256i v) { return _mm256_castsi256_ps(_mm256_and_si256(v, _mm256_set1_epi32((int)0xffff0000))); }
INLINE __m256 even_of(__m256i v) { return _mm256_castsi256_ps(_mm256_slli_epi32(v, 16)); }

/* Row wr over elements [0, kc) of the chunk, nt tokens of xbuf (32 floats a step: odd 0-15, even 0-15):
   accumulators (lo, hi per token) from st (zero at the row's first chunk) back to st. */
INLINE void tile(size_t kc, const uint8_t *wr, const float *xbuf, __m256 *st, bool first, size_t nt) {
    __m256 acc[TT][2];
    for (size_t t = 0; t < nt; t++)
        for (int h = 0; h < 2; h++) acc[t][h] = first ? _mm256_setzero_ps() : st[2 * t + (size_t)h];
    for (size_t i = 0; i < kc; i += 32)
        for (int h = 0; h < 2; h++) {
            const __m256i v = ld16(wr + 2 * i + 32 * (size_t)h, i + 16 * (size_t)h >= kc);
            const __m256 wo = odd_of(v), we = even_of(v);
            for (size_t t = 0; t < nt; t++) {
                const float *x = xbuf + t * KC + i + 8 * (size_t)h;
                acc[t][h] = _mm256_fmadd_ps(we, _mm256_load_ps(x + 16), _mm256_fmadd_ps(wo, _mm256_load_ps(x), acc[t][h]));
            }
        }
    for (size_t t = 0; t < nt; t++)
        for (int h = 0; h < 2; h++) st[2 * t + (size_t)h] = acc[t][h];
}

static void one_token(size_t n, const uint8_t *wb, size_t wrs, size_t n_rows, const uint8_t *xb, float *y) {
    const unsigned csr = _mm_getcsr();
    for (size_t r = 0; r < n_rows; r++) {
        const uint8_t *w = wb + r * wrs;
        __m256 acc[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
        _mm_setcsr(csr | CSR_DAZ_FTZ);
        for (size_t i = 0; i < n; i += 32)
            for (int h = 0; h < 2; h++) {
                const bool none = i + 16 * (size_t)h >= n;
                const __m256i wv = ld16(w + 2 * i + 32 * (size_t)h, none), xv = ld16(xb + 2 * i + 32 * (size_t)h, none);
                acc[h] = _mm256_fmadd_ps(even_of(wv), even_of(xv), _mm256_fmadd_ps(odd_of(wv), odd_of(xv), acc[h]));
            }
        _mm_setcsr(csr); /* the lanes' sum keeps its subnormals */
        y[r] = sum16_halves(acc[0], acc[1]);
    }
}

void tkv__lanes_bf16_pairs_avx2(size_t n, const void *w, size_t wrs, size_t n_rows, const void *xq, size_t xrs,
                                size_t n_tok, float *y, size_t ldy) {
    const uint8_t *wb = w, *xb = xq;
    if (n_tok == 1) {
        one_token(n, wb, wrs, n_rows, xb, y);
        return;
    }
    __m256 st[RB * TT * 2];
    _Alignas(32) float xbuf[TT * KC];
    _Static_assert(sizeof st + sizeof xbuf <= 80 * 1024, "the buffers of a product live on the stack (kernels.h)");
    const unsigned csr = _mm_getcsr();
    for (size_t rb = 0; rb < n_rows; rb += RB) {
        const size_t re = n_rows - rb < RB ? n_rows : rb + RB;
        for (size_t t0 = 0; t0 < n_tok; t0 += TT) {
            const size_t nt = n_tok - t0 < TT ? n_tok - t0 : TT;
            _mm_setcsr(csr | CSR_DAZ_FTZ);
            for (size_t k0 = 0; k0 < n; k0 += KC) {
                const size_t kc = n - k0 < KC ? n - k0 : KC;
                for (size_t t = 0; t < nt; t++)
                    for (size_t i = 0; i < kc; i += 32)
                        for (int h = 0; h < 2; h++) {
                            const __m256i v = ld16(xb + (t0 + t) * xrs + 2 * (k0 + i) + 32 * (size_t)h, i + 16 * (size_t)h >= kc);
                            _mm256_store_ps(xbuf + t * KC + i + 8 * (size_t)h, odd_of(v));
                            _mm256_store_ps(xbuf + t * KC + i + 16 + 8 * (size_t)h, even_of(v));
                        }
                for (size_t r = rb; r < re; r++) {
                    const uint8_t *wr = wb + r * wrs + 2 * k0;
                    __m256 *sr = st + (r - rb) * TT * 2;
                    switch (nt) {
                    case 6: tile(kc, wr, xbuf, sr, k0 == 0, 6); break;
                    case 5: tile(kc, wr, xbuf, sr, k0 == 0, 5); break;
                    case 4: tile(kc, wr, xbuf, sr, k0 == 0, 4); break;
                    case 3: tile(kc, wr, xbuf, sr, k0 == 0, 3); break;
                    case 2: tile(kc, wr, xbuf, sr, k0 == 0, 2); break;
                    default: tile(kc, wr, xbuf, sr, k0 == 0, 1); break;
                    }
                }
            }
            _mm_setcsr(csr); /* the lanes' sums keep their subnormals */
            for (size_t r = rb; r < re; r++)
                for (size_t t = 0; t < nt; t++) {
                    const __m256 *e = st + (r - rb) * TT * 2 + 2 * t;
                    y[(t0 + t) * ldy + r] = sum16_halves(e[0], e[1]);
                }
        }
    }
}

#endif
