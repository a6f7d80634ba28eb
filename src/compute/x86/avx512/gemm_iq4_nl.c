/*
 * compute/x86/avx512/gemm_iq4_nl.c — IQ4_NL at AVX-512 F/BW/VL + VNNI: the vec_dot and
 * the tiled product for prefill (see gemm.h), both bit for bit the avx2
 * vec_dot (dot_book4 in compute/x86/avx2/kernels.c), so the two levels agree.
 *
 * That dot is Q8_0's lane-wise order with codebook weights: pairs of blocks
 * into acc0 (even) and acc1 (odd), their lanes summed, except that an odd
 * last block is not an fma into acc0 but one scalar fmaf of its whole
 * integer sum after the horizontal sum. So the tile is compute/x86/avx512/gemm_q8_0_q4_q5_q6_k.c's Q8_0
 * tile on a panel of codebook values (a vpshufb of the nibbles), the even
 * parity stopping before an odd last block, which the finish adds per
 * (row, token) in the dot's own way.
 *
 * Register layout and tile as compute/x86/avx512/gemm_q8_0_q4_q5_q6_k.c's Q8_0: a zmm holds rows 2p and
 * 2p + 1 of one token (8 lanes each); 4 row pairs x 4 tokens per tile.
 */
#include "compute/gemm.h"
#include "util.h"
#include "compute/quant/quant.h"

#include <assert.h>
#include <math.h>
#include <stdalign.h>
#include <stdint.h>
#include <string.h>

#if defined(__x86_64__) && defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && \
    defined(__AVX512VNNI__) && defined(__AVX2__) && defined(__F16C__)
#include <immintrin.h>

/* Chunks of tokens and their tables: as compute/x86/avx512/gemm_q8_0_q4_q5_q6_k.c. */
#define TC_MAX32 32
#define TC_DIRECT 256
#define TAB_BYTES 32768

#define T32 4   /* tokens per tile */
#define RP32 4  /* row pairs per tile */
#define KC32 32 /* blocks per chunk of K (even: parities stay aligned) */
#define BS ((size_t)sizeof(tkv__block_iq4_nl))

/* One block of one row pair, unpacked (192 bytes): compute/x86/avx512/gemm_q8_0_q4_q5_q6_k.c's Q8_0 panel entry. */
typedef struct p32 {
    int8_t w[64];     /* the 32 codebook values of row a, then row b */
    int32_t corr[16]; /* -128 * sum of values 4j..4j+3: vpdpbusd on y + 128 adds 128 times that */
    float d[16];      /* row a's scale x 8, row b's x 8 */
} p32;

INLINE void p32_iq4nl(p32 *e, const uint8_t *ra, const uint8_t *rb, size_t i, __m512i book) {
    const uint8_t *a = ra + i * BS, *b = rb + i * BS;
    const __m512i idx = _mm512_inserti64x4(_mm512_castsi256_si512(nibbles32(a + 2)), nibbles32(b + 2), 1);
    const __m512i w = _mm512_shuffle_epi8(book, idx);
    const __m512i z = _mm512_setzero_si512();
    _mm512_store_si512(e->w, w);
    _mm512_store_si512(e->corr, _mm512_sub_epi32(z, _mm512_dpbusd_epi32(z, _mm512_set1_epi8((char)0x80), w)));
    _mm512_store_ps(e->d, _mm512_castpd_ps(_mm512_insertf64x4(_mm512_castps_pd(_mm512_set1_ps(blk_d(a))),
                                                              _mm256_castps_pd(_mm256_set1_ps(blk_d(b))), 1)));
}

/*
 * The tile: RP32 row pairs x T tokens, blocks i0, i0 + 2, ... < i1 (block
 * i's row pair p at pan[RP32 (i - k0) + p]); da[i * T + t]: token scales;
 * st: the RP32 T accumulators (16 floats each, [p][t]).
 */
INLINE void tile32(const p32 *pan, size_t k0, size_t i0, size_t i1, const uint8_t *const *yt, const float *da,
                   float *st, int init, int T) {
    __m512 acc[RP32][T32];
    UNROLL
    for (int p = 0; p < RP32; p++)
        UNROLL
        for (int t = 0; t < T; t++) acc[p][t] = init ? _mm512_setzero_ps() : _mm512_load_ps(st + 16 * (p * T + t));
    const __m512i bias = _mm512_set1_epi8((char)0x80);
    for (size_t i = i0; i < i1; i += 2) {
        const p32 *e = pan + RP32 * (i - k0);
        UNROLL
        for (int t = 0; t < T; t++) {
            const __m512i yu = _mm512_xor_si512(BCAST256(yt[t] + i * sizeof(tkv__block_q8_0) + 2), bias);
            const __m512 dt = _mm512_set1_ps(da[i * (size_t)T + (size_t)t]);
            UNROLL
            for (int p = 0; p < RP32; p++) {
                /* as compute/x86/avx512/gemm_q8_0_q4_q5_q6_k.c: corr from L1 each time, not a register copy */
                const int32_t *corr = e[p].corr;
                __asm__ volatile("" : "+r"(corr));
                const __m512i s = _mm512_dpbusd_epi32(_mm512_load_si512(corr), yu, _mm512_load_si512(e[p].w));
                const __m512 d = _mm512_mul_ps(_mm512_load_ps(e[p].d), dt);
                acc[p][t] = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(s), acc[p][t]);
            }
        }
    }
    UNROLL
    for (int p = 0; p < RP32; p++)
        UNROLL
        for (int t = 0; t < T; t++) _mm512_store_ps(st + 16 * (p * T + t), acc[p][t]);
}

static void tile32_any(const p32 *pan, size_t k0, size_t i0, size_t i1, const uint8_t *const *yt, const float *da,
                       float *st, int init, int T) {
    switch (T) {
    case 4: tile32(pan, k0, i0, i1, yt, da, st, init, 4); break;
    case 2: tile32(pan, k0, i0, i1, yt, da, st, init, 2); break;
    default: tile32(pan, k0, i0, i1, yt, da, st, init, 1); break;
    }
}

/* The exact integer sum of one block's products (any route gives the dot's value). */
static inline int block_sum(const uint8_t *wb, const uint8_t *yb, __m256i book) {
    const __m256i q = _mm256_shuffle_epi8(book, nibbles32(wb + 2)), y = LOAD256(yb + 2);
    const __m256i p = _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_sign_epi8(q, q), _mm256_sign_epi8(y, q));
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(p), _mm256_extracti128_si256(p, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
    return _mm_cvtsi128_si32(s);
}

/* ---- the vec_dot ------------------------------------------------------------------- */

/*
 * The avx2 dot_book4's value, two blocks per zmm: lanes 0-7 are its acc0
 * (even blocks), 8-15 its acc1 (odd blocks), each fma'd in the same order,
 * then acc0 + acc1 and the same horizontal sum; an odd last block by fmaf.
 * Four blocks (72 bytes) come in by two loads: their nibbles and scales sit
 * at even byte offsets, so vpermt2w gathers them as words. The codebook is
 * biased by 128 (vpdpbusd's unsigned operand), less 128 times the sums of
 * four activations.
 */
static inline float hsum256(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* One pair of blocks: q the biased codebook values, y the 64 activation bytes, dd [d0 x 8 | d1 x 8]. */
static inline __m512 pair_fma(__m512 acc, __m512i q, __m512i y, __m512 dd) {
    const __m512i z = _mm512_setzero_si512();
    const __m512i c = _mm512_dpbusd_epi32(z, _mm512_set1_epi8((char)0x80), y);
    return _mm512_fmadd_ps(dd, _mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_dpbusd_epi32(z, q, y), c)), acc);
}

static inline __m512i y_pair(const uint8_t *y0) {
    return _mm512_inserti64x4(_mm512_castsi256_si512(LOAD256(y0 + 2)), LOAD256(y0 + 2 + sizeof(tkv__block_q8_0)), 1);
}

float tkv__dot_iq4_nl_avx512(size_t n, const void *wv, const void *av) {
    const uint8_t *x = wv, *a = av;
    const size_t nb = n / TKV__QK, QB = sizeof(tkv__block_q8_0);
    const __m512i bookb = _mm512_xor_si512(_mm512_broadcast_i32x4(LOAD128(tkv__iq4nl_values)), _mm512_set1_epi8((char)0x80));
    const __m512i m4 = _mm512_set1_epi8(0x0f);
    /* words of bytes [0, 64) | [8, 72): block k's nibbles are words 9k + 1 .. 9k + 8, twice
       (low then high nibbles of a block per 256 bits), and its scale word 9k */
    const __m512i iq01 = _mm512_set_epi16(17, 16, 15, 14, 13, 12, 11, 10, 17, 16, 15, 14, 13, 12, 11, 10, /**/
                                          8, 7, 6, 5, 4, 3, 2, 1, 8, 7, 6, 5, 4, 3, 2, 1);
    const __m512i iq23 = _mm512_set_epi16(63, 62, 61, 60, 59, 58, 57, 56, 63, 62, 61, 60, 59, 58, 57, 56, /**/
                                          26, 25, 24, 23, 22, 21, 20, 19, 26, 25, 24, 23, 22, 21, 20, 19);
    const __m512i sh = _mm512_set_epi16(4, 4, 4, 4, 4, 4, 4, 4, 0, 0, 0, 0, 0, 0, 0, 0, /**/
                                        4, 4, 4, 4, 4, 4, 4, 4, 0, 0, 0, 0, 0, 0, 0, 0);
    const __m512i idd = _mm512_castsi128_si512(_mm_setr_epi16(0, 9, 18, 27, 0, 0, 0, 0));
    const __m512i lo8 = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
    const __m512i hi8 = _mm512_setr_epi32(2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
    __m512 acc = _mm512_setzero_ps();
    size_t i = 0;
    for (; i + 4 <= nb; i += 4) {
        const uint8_t *b = x + i * BS, *yb = a + i * QB;
        const __m512i A = _mm512_loadu_si512(b), B = _mm512_loadu_si512(b + 8);
        const __m512i q01 = _mm512_and_si512(_mm512_srlv_epi16(_mm512_permutex2var_epi16(A, iq01, B), sh), m4);
        const __m512i q23 = _mm512_and_si512(_mm512_srlv_epi16(_mm512_permutex2var_epi16(A, iq23, B), sh), m4);
        const __m128 dw = _mm_cvtph_ps(_mm512_castsi512_si128(_mm512_permutexvar_epi16(idd, A)));
        uint16_t h[4];
        for (int k = 0; k < 4; k++) memcpy(&h[k], yb + k * QB, 2);
        const __m128 dy = _mm_cvtph_ps(_mm_set_epi64x(0, (long long)((uint64_t)h[0] | (uint64_t)h[1] << 16 |
                                                                      (uint64_t)h[2] << 32 | (uint64_t)h[3] << 48)));
        const __m512 d4 = _mm512_castps128_ps512(_mm_mul_ps(dw, dy));
        acc = pair_fma(acc, _mm512_shuffle_epi8(bookb, q01), y_pair(yb), _mm512_permutexvar_ps(lo8, d4));
        acc = pair_fma(acc, _mm512_shuffle_epi8(bookb, q23), y_pair(yb + 2 * QB), _mm512_permutexvar_ps(hi8, d4));
    }
    if (i + 2 <= nb) {
        const uint8_t *b = x + i * BS, *yb = a + i * QB;
        const __m512i idx = _mm512_inserti64x4(_mm512_castsi256_si512(nibbles32(b + 2)), nibbles32(b + BS + 2), 1);
        const __m512 dd = _mm512_castpd_ps(_mm512_insertf64x4(_mm512_castps_pd(_mm512_set1_ps(blk_d(b) * blk_d(yb))),
                                                              _mm256_castps_pd(_mm256_set1_ps(blk_d(b + BS) * blk_d(yb + QB))), 1));
        acc = pair_fma(acc, _mm512_shuffle_epi8(bookb, idx), y_pair(yb), dd);
        i += 2;
    }
    float s = hsum256(_mm256_add_ps(_mm512_castps512_ps256(acc), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(acc), 1))));
    if (i < nb) {
        const __m256i book = _mm256_broadcastsi128_si256(LOAD128(tkv__iq4nl_values));
        const uint8_t *b = x + i * BS, *yb = a + i * QB;
        s = fmaf(blk_d(b) * blk_d(yb), (float)block_sum(b, yb, book), s);
    }
    return s;
}

/*
 * acc0 + acc1, the horizontal sums and, for an odd block count, the last
 * block's fmaf: out to the tile's rows (nrow) x T tokens. rows: the group's
 * weight rows; yt: the tile's token rows; nb: blocks per row.
 */
static void finish32(const float *st, int T, float *y, size_t ldy, size_t nrow, const uint8_t *const *rows,
                     const uint8_t *const *yt, size_t nb) {
    const float *s1 = st + RP32 * 16 * T;
    const __m256i book = _mm256_broadcastsi128_si256(LOAD128(tkv__iq4nl_values));
    for (int p0 = 0; p0 < RP32 && 2 * (size_t)p0 < nrow; p0 += 2)
        for (int u = 0; u < T; u += 4) {
            __m512 a[8];
            for (int q = 0; q < 8; q++) {
                const int t = u + q / 2, p = p0 + q % 2, at = 16 * (p * T + t);
                a[q] = t < T ? _mm512_add_ps(_mm512_load_ps(st + at), _mm512_load_ps(s1 + at)) : _mm512_setzero_ps();
            }
            __m512 v = reduce16(a);
            const int nk = (int)min_sz(4, nrow - 2 * (size_t)p0), nu = T - u < 4 ? T - u : 4;
            if (nb % 2) { /* lane 4u + k: token u, row k */
                alignas(64) float dd[16] = {0}, ss[16] = {0};
                for (int k = 0; k < nk; k++)
                    for (int t = 0; t < nu; t++) {
                        const uint8_t *wb = rows[2 * p0 + k] + (nb - 1) * BS;
                        const uint8_t *yb = yt[u + t] + (nb - 1) * sizeof(tkv__block_q8_0);
                        dd[4 * t + k] = blk_d(wb) * blk_d(yb);
                        ss[4 * t + k] = (float)block_sum(wb, yb, book);
                    }
                v = _mm512_fmadd_ps(_mm512_load_ps(dd), _mm512_load_ps(ss), v);
            }
            store_tile(y + (size_t)u * ldy + 2 * (size_t)p0, ldy, v, nk, nu);
        }
}

void tkv__gemm_iq4_nl_avx512(size_t n, const void *wv, size_t wrs, size_t nr, const void *xqv, size_t xrs,
                             size_t n_tok, float *y, size_t ldy) {
    enum { ROWS = 2 * RP32, STT = 2 * RP32 * 16 /* stash floats per token: 2 parities x RP32 x 16 */ };
    const uint8_t *w = wv, *xq = xqv;
    const size_t nb = n / TKV__QK, ne = nb & ~(size_t)1; /* blocks the accumulators take (not an odd last) */
    const int direct = nb <= KC32;
    const __m512i book = _mm512_broadcast_i32x4(LOAD128(tkv__iq4nl_values));
    struct {
        alignas(64) p32 pan[RP32 * KC32];                /* 24 KiB */
        alignas(64) float st[TC_MAX32 * STT];            /* 16 KiB */
        alignas(64) float da[TAB_BYTES / sizeof(float)]; /* 32 KiB */
        size_t tstart[TC_DIRECT];
        int tlen[TC_DIRECT];
    } b;
    _Static_assert(sizeof b <= 80 * 1024, "the buffers of a product live on the stack (kernels.h: under 80 KiB)");
    size_t tc = TAB_BYTES / sizeof(float) / nb;
    const size_t cap = direct ? TC_DIRECT : TC_MAX32;
    tc = tc < 1 ? 1 : tc > cap ? cap : tc;
    for (size_t t0 = 0; t0 < n_tok; t0 += tc) {
        const size_t tn = min_sz(tc, n_tok - t0);
        const int ntile = plan_tiles(tn, T32, b.tstart, b.tlen);
        assert(tn * nb <= sizeof b.da / sizeof b.da[0] && (direct || tn * STT <= sizeof b.st / sizeof b.st[0]));
        for (int j = 0; j < ntile; j++) /* token scales: tile j's at da + nb * tstart[j], [block][token] */
            for (int t = 0; t < b.tlen[j]; t++) {
                const uint8_t *row = xq + (t0 + b.tstart[j] + (size_t)t) * xrs;
                float *dj = b.da + nb * b.tstart[j];
                for (size_t i = 0; i < nb; i++) dj[i * (size_t)b.tlen[j] + (size_t)t] = blk_d(row + i * sizeof(tkv__block_q8_0));
            }
        for (size_t r = 0; r < nr; r += ROWS) {
            const uint8_t *rows[ROWS]; /* past the end: the last row again (computed, not stored) */
            for (size_t k = 0; k < ROWS; k++) rows[k] = w + min_sz(r + k, nr - 1) * wrs;
            for (size_t k0 = 0; k0 < nb; k0 += KC32) {
                const size_t k1 = min_sz(k0 + KC32, nb);
                for (size_t i = k0; i < k1; i++)
                    for (int p = 0; p < RP32; p++) p32_iq4nl(&b.pan[RP32 * (i - k0) + p], rows[2 * p], rows[2 * p + 1], i, book);
                if (k1 < nb) {
                    prefetch_rows(rows, ROWS, k1 * BS, min_sz(KC32, nb - k1) * BS);
                } else if (r + ROWS < nr) {
                    const uint8_t *nx[ROWS];
                    for (size_t k = 0; k < ROWS; k++) nx[k] = w + min_sz(r + ROWS + k, nr - 1) * wrs;
                    prefetch_rows(nx, ROWS, 0, min_sz(KC32, nb) * BS);
                }
                for (int j = 0; j < ntile; j++) {
                    const int T = b.tlen[j];
                    const uint8_t *yt[T32];
                    for (int t = 0; t < T; t++) yt[t] = xq + (t0 + b.tstart[j] + (size_t)t) * xrs;
                    float *st = direct ? b.st : b.st + STT * b.tstart[j];
                    for (int par = 0; par < 2; par++)
                        tile32_any(b.pan, k0, k0 + (size_t)par, min_sz(k1, ne), yt, b.da + nb * b.tstart[j],
                                   st + RP32 * 16 * T * par, k0 == 0, T);
                    if (direct) finish32(st, T, y + (t0 + b.tstart[j]) * ldy + r, ldy, min_sz(ROWS, nr - r), rows, yt, nb);
                }
            }
            if (!direct)
                for (int j = 0; j < ntile; j++) {
                    const uint8_t *yt[T32];
                    for (int t = 0; t < b.tlen[j]; t++) yt[t] = xq + (t0 + b.tstart[j] + (size_t)t) * xrs;
                    finish32(b.st + STT * b.tstart[j], b.tlen[j], y + (t0 + b.tstart[j]) * ldy + r, ldy,
                             min_sz(ROWS, nr - r), rows, yt, nb);
                }
        }
    }
}

#endif
