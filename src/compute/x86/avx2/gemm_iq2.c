/*
 * compute/x86/avx2/gemm_iq2.c — tiled products of IQ2_XXS, IQ2_XS and IQ2_S weights for
 * prefill (see gemm.h), AVX2 + FMA + F16C, bit for bit compute/x86/avx2/kernels.c's
 * dot_iq2_xxs / dot_iq2_xs / dot_iq2_s (exported as tkv__dot_iq2_*_avx2 so
 * that the avx512 table can keep them with these products).
 *
 * The vec_dot spends most of its time per (row, token) decoding: four
 * codebook loads, the sign table and its byte mask per 32 elements. Here a
 * block is decoded once per row into a panel (codebook magnitudes as
 * unsigned bytes, the signs as +-1 bytes, the two 2 ls + 1 of each
 * sub-block as int16 halves), and per (row, token) and 32 elements there
 * remain vpsignb (the sign onto the activations, as the vec_dot's xor/sub
 * does: |a| <= 127, so the same bytes), vpmaddubsw, vpmaddwd by the scales
 * and an add: the same int16 pairs and int32 lanes as the vec_dot.
 * Per block the fma of d_w d_a with the lanes; at the end 1/8 of the lanes'
 * sum in the vec_dot's order.
 *
 * Tile: 2 rows x 4 tokens, a ymm accumulator per (row, token), as
 * compute/x86/avx2/gemm_q2_q3_k_lanes.c's.
 */
#include "compute/gemm.h"
#include "util.h"
#include "compute/x86/tile_driver.h"
#include "compute/quant/quant.h"
#include "compute/quant/grids.h"
#include "compute/quant/iq.h"

#include <assert.h>
#include <stdalign.h>
#include <stdint.h>
#include <string.h>

#if defined(__x86_64__) && defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include <immintrin.h>

#define TK 4          /* tokens per tile */
#define KC 8          /* blocks per chunk of K */
#define TC_MAXK 64    /* tokens per chunk when K is cut (the stash holds them all); TILE_TC_DIRECT when it is not */

enum { XXS, XS, S }; /* which IQ2 type */
enum { AB = sizeof(tkv__block_q8_K), Q8K_QS = 4 };

/* One block of one row (800 bytes). */
typedef struct pq {
    uint8_t g[8][32];  /* per sub-block: the codebook magnitudes */
    int8_t s[8][32];   /* their signs, +1 or -1 */
    int16_t sc[8][16]; /* 2 ls + 1 of the first 16 elements (x8), then of the last 16 */
    float d[8];        /* the row's d, 8 times */
} pq;

/* +1 in byte j when bit j of h is clear, -1 when set. */
static inline __m256i signs32(uint32_t h) {
    const __m256i shuf = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2,
                                          3, 3, 3, 3, 3, 3, 3, 3);
    const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ULL);
    const __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi32((int)h), shuf);
    return _mm256_or_si256(_mm256_cmpeq_epi8(_mm256_and_si256(v, bit), bit), _mm256_set1_epi8(1));
}

static inline __m256i grid4(const uint64_t *grid, unsigned i0, unsigned i1, unsigned i2, unsigned i3) {
    return _mm256_set_epi64x((long long)grid[i3], (long long)grid[i2], (long long)grid[i1], (long long)grid[i0]);
}

static inline void put_sub(pq *e, int b, __m256i g, uint32_t signs, int slo, int shi) {
    _mm256_store_si256((__m256i *)(void *)e->g[b], g);
    _mm256_store_si256((__m256i *)(void *)e->s[b], signs32(signs));
    _mm256_store_si256((__m256i *)(void *)e->sc[b],
                       _mm256_set_m128i(_mm_set1_epi16((short)shi), _mm_set1_epi16((short)slo)));
}

/* Decode block i of a row: the vec_dot's grid indices, sign bytes and scales. */
static void pq_fill(pq *e, const uint8_t *row, size_t i, int ty) {
    uint16_t d;
    if (ty == XXS) {
        const tkv__block_iq2_xxs *x = (const tkv__block_iq2_xxs *)(const void *)row + i;
        for (int b = 0; b < 8; b++) {
            uint32_t aux[2]; /* grid indices (bytes), then sign indices and the scale */
            memcpy(aux, (const uint8_t *)x->qs + 8 * b, 8);
            const uint32_t g = aux[0], h = aux[1];
            const uint32_t signs = tkv__iq_signs[h & 127] | (uint32_t)tkv__iq_signs[(h >> 7) & 127] << 8 |
                                   (uint32_t)tkv__iq_signs[(h >> 14) & 127] << 16 |
                                   (uint32_t)tkv__iq_signs[(h >> 21) & 127] << 24;
            const int ls = (int)(2 * (h >> 28) + 1);
            put_sub(e, b, grid4(tkv__iq2xxs_grid, g & 255, (g >> 8) & 255, (g >> 16) & 255, g >> 24), signs, ls, ls);
        }
        memcpy(&d, &x->d, 2);
    } else if (ty == XS) {
        const tkv__block_iq2_xs *x = (const tkv__block_iq2_xs *)(const void *)row + i;
        for (int b = 0; b < 8; b++) {
            uint16_t q[4]; /* 9-bit grid index, 7-bit sign index */
            memcpy(q, (const uint8_t *)x->qs + 8 * b, 8);
            const uint32_t signs = tkv__iq_signs[q[0] >> 9] | (uint32_t)tkv__iq_signs[q[1] >> 9] << 8 |
                                   (uint32_t)tkv__iq_signs[q[2] >> 9] << 16 | (uint32_t)tkv__iq_signs[q[3] >> 9] << 24;
            const uint8_t sc = x->scales[b];
            put_sub(e, b, grid4(tkv__iq2xs_grid, q[0] & 511, q[1] & 511, q[2] & 511, q[3] & 511), signs,
                    2 * (sc & 15) + 1, 2 * (sc >> 4) + 1);
        }
        memcpy(&d, &x->d, 2);
    } else {
        const tkv__block_iq2_s *x = (const tkv__block_iq2_s *)(const void *)row + i;
        for (int b = 0; b < 8; b++) {
            const uint8_t *lo = x->qs + 4 * b;
            const unsigned hi = x->qh[b];
            uint32_t signs;
            memcpy(&signs, x->qs + 32 + 4 * b, 4);
            const uint8_t sc = x->scales[b];
            put_sub(e, b,
                    grid4(tkv__iq2s_grid, lo[0] | (hi & 3) << 8, lo[1] | (hi >> 2 & 3) << 8, lo[2] | (hi >> 4 & 3) << 8,
                          lo[3] | (hi >> 6) << 8),
                    signs, 2 * (sc & 15) + 1, 2 * (sc >> 4) + 1);
        }
        memcpy(&d, &x->d, 2);
    }
    _mm256_store_ps(e->d, _mm256_set1_ps(f16(d)));
}

/* A block's 8 integer lanes for one row and token (yq: the token's 256 quants). */
INLINE __m256i lanes(const pq *e, const uint8_t *yq) {
    __m256i s = _mm256_setzero_si256();
    UNROLL
    for (int b = 0; b < 8; b++) {
        const __m256i ys = _mm256_sign_epi8(LOAD256(yq + 32 * b), LOADA256(e->s[b]));
        s = _mm256_add_epi32(s, _mm256_madd_epi16(_mm256_maddubs_epi16(LOADA256(e->g[b]), ys), LOADA256(e->sc[b])));
    }
    return s;
}

/*
 * The tile: 2 rows x T tokens over blocks k0..k1-1 (row k of block i at
 * pan[2 (i - k0) + k]). st: the 2 T accumulators [row][token], 8 floats each.
 */
INLINE void tile(const pq *pan, size_t k0, size_t k1, const uint8_t *const *yt, float *st, int init, int T) {
    __m256 acc[2][TK];
    UNROLL
    for (int k = 0; k < 2; k++)
        UNROLL
        for (int t = 0; t < T; t++) acc[k][t] = init ? _mm256_setzero_ps() : _mm256_load_ps(st + 8 * (k * T + t));
    for (size_t i = k0; i < k1; i++) {
        const pq *e = pan + 2 * (i - k0);
        UNROLL
        for (int t = 0; t < T; t++) {
            const uint8_t *yb = yt[t] + i * AB;
            float yd;
            memcpy(&yd, yb, sizeof yd);
            const __m256 dt = _mm256_set1_ps(yd);
            UNROLL
            for (int k = 0; k < 2; k++) {
                const __m256i s = lanes(&e[k], yb + Q8K_QS);
                acc[k][t] = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_load_ps(e[k].d), dt), _mm256_cvtepi32_ps(s), acc[k][t]);
            }
        }
    }
    UNROLL
    for (int k = 0; k < 2; k++)
        UNROLL
        for (int t = 0; t < T; t++) _mm256_store_ps(st + 8 * (k * T + t), acc[k][t]);
}

static void tile_any(const pq *pan, size_t k0, size_t k1, const uint8_t *const *yt, float *st, int init, int T) {
    switch (T) {
    case 4: tile(pan, k0, k1, yt, st, init, 4); break;
    case 2: tile(pan, k0, k1, yt, st, init, 2); break;
    default: tile(pan, k0, k1, yt, st, init, 1); break;
    }
}

/* The horizontal sums times 1/8 (the vec_dot's last multiply), out: 2 rows (nrow valid) x T tokens. */
static void finish(const float *st, int T, float *y, size_t ldy, size_t nrow) {
    __m256 a[8];
    for (int q = 0; q < 8; q++) a[q] = q / 2 < T ? _mm256_load_ps(st + 8 * ((q % 2) * T + q / 2)) : _mm256_setzero_ps();
    store_tile(y, ldy, _mm256_mul_ps(_mm256_set1_ps(0.125f), reduce8(a)), (int)min_sz(2, nrow), T);
}

enum { STT = 2 * TK * 8 /* stash floats per tile */ };

/* An IQ2 product's buffers (on the stack). */
typedef struct iq2_bufs {
    alignas(64) pq pan[2 * KC];                     /* 12.5 KiB */
    alignas(64) float st[(TC_MAXK / TK + 2) * STT]; /* 4.5 KiB */
} iq2_bufs;

/* The product's state: its buffers and constants (a local whose fields the compiler keeps in registers). */
typedef struct iq2_state {
    iq2_bufs *b;
    int ty;
} iq2_state;

INLINE void iq2_panel(void *f, const uint8_t *const *rows, size_t i, size_t k0) {
    iq2_state *s = f;
    for (int k = 0; k < 2; k++) pq_fill(&s->b->pan[2 * (i - k0) + (size_t)k], rows[k], i, s->ty);
}

INLINE void iq2_tile(void *f, const tile_chunk *c, const tile_step *s) {
    (void)c;
    tile_any(((iq2_state *)f)->b->pan, s->k0, s->k1, s->yt, s->st, s->k0 == 0, s->T);
}

INLINE void iq2_finish(void *f, const float *st, int T, float *y, size_t ldy, size_t nrow) {
    (void)f;
    finish(st, T, y, ldy, nrow);
}

INLINE void gemm_iq2(const tile_job *job, int ty) {
    iq2_bufs bufs;
    _Static_assert(sizeof bufs + sizeof(tile_chunk) <= 80 * 1024,
                   "the buffers of a product live on the stack (kernels.h: under 80 KiB)");
    iq2_state s = {.b = &bufs, .ty = ty};
    const size_t nb = job->n / TKV__QK_K;
    const int direct = nb <= KC;
    const size_t tc = direct ? TILE_TC_DIRECT : TC_MAXK;
    assert(direct || (tc / TK + 2) * STT <= sizeof bufs.st / sizeof bufs.st[0]);
    const size_t bs = ty == XXS ? sizeof(tkv__block_iq2_xxs) : ty == XS ? sizeof(tkv__block_iq2_xs) : sizeof(tkv__block_iq2_s);
    const tile_shape sh = {.nb = nb, .bs = bs, .kc = KC, .tc = tc, .rows = 2, .big = TK,
                           .st = bufs.st, .stt = STT, .by_token = 0};
    const tile_ops ops = {.table = NULL, .panel = iq2_panel, .tile = iq2_tile, .finish = iq2_finish};
    tile_product(job, &sh, &ops, &s);
}

void tkv__gemm_iq2_xxs_avx2(size_t n, const void *w, size_t wrs, size_t nr, const void *xq, size_t xrs, size_t n_tok,
                            float *y, size_t ldy) {
    gemm_iq2(&(tile_job){n, w, wrs, nr, xq, xrs, n_tok, y, ldy}, XXS);
}

void tkv__gemm_iq2_xs_avx2(size_t n, const void *w, size_t wrs, size_t nr, const void *xq, size_t xrs, size_t n_tok,
                           float *y, size_t ldy) {
    gemm_iq2(&(tile_job){n, w, wrs, nr, xq, xrs, n_tok, y, ldy}, XS);
}

void tkv__gemm_iq2_s_avx2(size_t n, const void *w, size_t wrs, size_t nr, const void *xq, size_t xrs, size_t n_tok,
                          float *y, size_t ldy) {
    gemm_iq2(&(tile_job){n, w, wrs, nr, xq, xrs, n_tok, y, ldy}, S);
}

#endif
