/*
 * compute/x86/avx2/gemm_iq4_nl.c — IQ4_NL's tiled product for prefill (see gemm.h),
 * AVX2 + FMA + F16C, bit for bit the avx2 vec_dot (dot_book4 in
 * compute/x86/avx2/kernels.c): compute/x86/avx2/gemm_q8_0_q4_q5_q6_k.c's Q8_0 tile (2 rows x 4 tokens, one parity
 * of blocks at a time) on a panel of codebook values, the even parity
 * stopping before an odd last block, which the finish adds per (row, token)
 * by the dot's own fmaf after the horizontal sum (compute/x86/avx512/gemm_iq4_nl.c says
 * why).
 */
#include "compute/gemm.h"
#include "util.h"
#include "compute/quant/quant.h"

#include <assert.h>
#include <math.h>
#include <stdalign.h>
#include <stdint.h>
#include <string.h>

#if defined(__x86_64__) && defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include <immintrin.h>

/* Chunks of tokens and their tables: as compute/x86/avx2/gemm_q8_0_q4_q5_q6_k.c. */
#define TC_MAX 64
#define TC_DIRECT 256
#define TAB_BYTES 32768

#define T32 4   /* tokens per tile */
#define KC32 64 /* blocks per chunk of K (even: parities stay aligned) */
#define BS ((size_t)sizeof(tkv__block_iq4_nl))
#define QB ((size_t)sizeof(tkv__block_q8_0))

/* One block of one row, unpacked (96 bytes): compute/x86/avx2/gemm_q8_0_q4_q5_q6_k.c's Q8_0 panel entry. */
typedef struct p32 {
    int8_t w[32];  /* the codebook values */
    uint8_t a[32]; /* their magnitudes */
    float d[8];    /* the row's scale, 8 times */
} p32;

INLINE void p32_iq4nl(p32 *e, const uint8_t *row, size_t i, __m256i book) {
    const uint8_t *b = row + i * BS;
    const __m256i w = _mm256_shuffle_epi8(book, nibbles32(b + 2));
    _mm256_store_si256((__m256i *)(void *)e->w, w);
    _mm256_store_si256((__m256i *)(void *)e->a, _mm256_sign_epi8(w, w));
    _mm256_store_ps(e->d, _mm256_set1_ps(blk_d(b)));
}

/* The tile: compute/x86/avx2/gemm_q8_0_q4_q5_q6_k.c's tile32 (2 rows x T tokens, blocks i0, i0 + 2, ... < i1). */
INLINE void tile32(const p32 *pan, size_t k0, size_t i0, size_t i1, const uint8_t *const *yt, const float *da,
                   float *st, int init, int T) {
    __m256 acc[2][T32];
    UNROLL
    for (int k = 0; k < 2; k++)
        UNROLL
        for (int t = 0; t < T; t++) acc[k][t] = init ? _mm256_setzero_ps() : _mm256_load_ps(st + 8 * (k * T + t));
    const __m256i ones = _mm256_set1_epi16(1);
    for (size_t i = i0; i < i1; i += 2) {
        const p32 *e = pan + 2 * (i - k0);
        const __m256i a0 = LOADA256(e[0].a), a1 = LOADA256(e[1].a);
        UNROLL
        for (int t = 0; t < T; t++) {
            const __m256i yv = LOAD256(yt[t] + i * QB + 2);
            const __m256 dt = _mm256_broadcast_ss(da + i * (size_t)T + (size_t)t);
            const __m256i p0 = _mm256_madd_epi16(_mm256_maddubs_epi16(a0, _mm256_sign_epi8(yv, LOADA256(e[0].w))), ones);
            const __m256i p1 = _mm256_madd_epi16(_mm256_maddubs_epi16(a1, _mm256_sign_epi8(yv, LOADA256(e[1].w))), ones);
            acc[0][t] = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_load_ps(e[0].d), dt), _mm256_cvtepi32_ps(p0), acc[0][t]);
            acc[1][t] = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_load_ps(e[1].d), dt), _mm256_cvtepi32_ps(p1), acc[1][t]);
        }
    }
    UNROLL
    for (int k = 0; k < 2; k++)
        UNROLL
        for (int t = 0; t < T; t++) _mm256_store_ps(st + 8 * (k * T + t), acc[k][t]);
}

static void tile32_any(const p32 *pan, size_t k0, size_t i0, size_t i1, const uint8_t *const *yt, const float *da,
                       float *st, int init, int T) {
    switch (T) {
    case 4: tile32(pan, k0, i0, i1, yt, da, st, init, 4); break;
    case 2: tile32(pan, k0, i0, i1, yt, da, st, init, 2); break;
    default: tile32(pan, k0, i0, i1, yt, da, st, init, 1); break;
    }
}

/* The exact integer sum of one block's products. */
static inline int block_sum(const uint8_t *wb, const uint8_t *yb, __m256i book) {
    const __m256i q = _mm256_shuffle_epi8(book, nibbles32(wb + 2)), y = LOAD256(yb + 2);
    const __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_sign_epi8(q, q), _mm256_sign_epi8(y, q)),
                                        _mm256_set1_epi16(1));
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(p), _mm256_extracti128_si256(p, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
    return _mm_cvtsi128_si32(s);
}

/* acc0 + acc1, the horizontal sums, an odd last block's fmaf; out: 2 rows (nrow valid) x T tokens. */
static void finish32(const float *st, int T, float *y, size_t ldy, size_t nrow, const uint8_t *const *rows,
                     const uint8_t *const *yt, size_t nb) {
    const float *s1 = st + 16 * T;
    __m256 a[8];
    for (int q = 0; q < 8; q++) {
        const int at = 8 * ((q % 2) * T + q / 2);
        a[q] = q / 2 < T ? _mm256_add_ps(_mm256_load_ps(st + at), _mm256_load_ps(s1 + at)) : _mm256_setzero_ps();
    }
    alignas(32) float o[8];
    _mm256_store_ps(o, reduce8(a));
    const int nk = (int)min_sz(2, nrow);
    const __m256i book = _mm256_broadcastsi128_si256(LOAD128(tkv__iq4nl_values));
    for (int k = 0; k < nk; k++)
        for (int u = 0; u < T; u++) {
            float v = o[4 * k + u];
            if (nb % 2) {
                const uint8_t *wb = rows[k] + (nb - 1) * BS, *yb = yt[u] + (nb - 1) * QB;
                v = fmaf(blk_d(wb) * blk_d(yb), (float)block_sum(wb, yb, book), v);
            }
            y[(size_t)u * ldy + (size_t)k] = v;
        }
}

void tkv__gemm_iq4_nl_avx2(size_t n, const void *wv, size_t wrs, size_t nr, const void *xqv, size_t xrs, size_t n_tok,
                           float *y, size_t ldy) {
    enum { STT = 2 * 2 * 8 /* stash floats per token: 2 parities x 2 rows x 8 */ };
    const uint8_t *w = wv, *xq = xqv;
    const size_t nb = n / TKV__QK, ne = nb & ~(size_t)1; /* blocks the accumulators take (not an odd last) */
    const int direct = nb <= KC32;
    const __m256i book = _mm256_broadcastsi128_si256(LOAD128(tkv__iq4nl_values));
    struct {
        alignas(64) p32 pan[2 * KC32];                   /* 12 KiB */
        alignas(64) float st[TC_MAX * STT];              /* 8 KiB */
        alignas(64) float da[TAB_BYTES / sizeof(float)]; /* 32 KiB */
        size_t tstart[TC_DIRECT];
        int tlen[TC_DIRECT];
    } b;
    _Static_assert(sizeof b <= 80 * 1024, "the buffers of a product live on the stack (kernels.h: under 80 KiB)");
    size_t tc = TAB_BYTES / sizeof(float) / nb;
    const size_t cap = direct ? TC_DIRECT : TC_MAX;
    tc = tc < 1 ? 1 : tc > cap ? cap : tc;
    for (size_t t0 = 0; t0 < n_tok; t0 += tc) {
        const size_t tn = min_sz(tc, n_tok - t0);
        const int ntile = plan_tiles(tn, 4, b.tstart, b.tlen);
        assert(tn * nb <= sizeof b.da / sizeof b.da[0] && (direct || tn * STT <= sizeof b.st / sizeof b.st[0]));
        for (int j = 0; j < ntile; j++) /* token scales: tile j's at da + nb * tstart[j], [block][token] */
            for (int t = 0; t < b.tlen[j]; t++) {
                const uint8_t *row = xq + (t0 + b.tstart[j] + (size_t)t) * xrs;
                float *dj = b.da + nb * b.tstart[j];
                for (size_t i = 0; i < nb; i++) dj[i * (size_t)b.tlen[j] + (size_t)t] = blk_d(row + i * QB);
            }
        for (size_t r = 0; r < nr; r += 2) {
            const uint8_t *rows[2] = {w + r * wrs, w + min_sz(r + 1, nr - 1) * wrs};
            for (size_t k0 = 0; k0 < nb; k0 += KC32) {
                const size_t k1 = min_sz(k0 + KC32, nb);
                for (size_t i = k0; i < k1; i++)
                    for (int k = 0; k < 2; k++) p32_iq4nl(&b.pan[2 * (i - k0) + (size_t)k], rows[k], i, book);
                if (k1 < nb) {
                    prefetch_rows(rows, 2, k1 * BS, min_sz(KC32, nb - k1) * BS);
                } else if (r + 2 < nr) {
                    const uint8_t *nx[2] = {w + (r + 2) * wrs, w + min_sz(r + 3, nr - 1) * wrs};
                    prefetch_rows(nx, 2, 0, min_sz(KC32, nb) * BS);
                }
                for (int j = 0; j < ntile; j++) {
                    const int T = b.tlen[j];
                    const uint8_t *yt[T32];
                    for (int t = 0; t < T; t++) yt[t] = xq + (t0 + b.tstart[j] + (size_t)t) * xrs;
                    float *st = direct ? b.st : b.st + STT * b.tstart[j];
                    for (int par = 0; par < 2; par++)
                        tile32_any(b.pan, k0, k0 + (size_t)par, min_sz(k1, ne), yt, b.da + nb * b.tstart[j],
                                   st + 16 * T * par, k0 == 0, T);
                    if (direct) finish32(st, T, y + (t0 + b.tstart[j]) * ldy + r, ldy, nr - r, rows, yt, nb);
                }
            }
            if (!direct)
                for (int j = 0; j < ntile; j++) {
                    const uint8_t *yt[T32];
                    for (int t = 0; t < b.tlen[j]; t++) yt[t] = xq + (t0 + b.tstart[j] + (size_t)t) * xrs;
                    finish32(b.st + STT * b.tstart[j], b.tlen[j], y + (t0 + b.tstart[j]) * ldy + r, ldy, nr - r, rows,
                             yt, nb);
                }
        }
    }
}

#endif
