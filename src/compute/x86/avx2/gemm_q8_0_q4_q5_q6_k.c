/*
 * compute/x86/avx2/gemm_q8_0_q4_q5_q6_k.c — tiled products for prefill (see gemm.h), AVX2 + FMA + F16C:
 * Q8_0, Q6_K and Q5_K weights, Q8_0 and Q5_K in the reference's lane-wise orders (kernels.h's
 * gemm_ref; the block-reduced orders of Q4_0, Q8_0, Q4_K and Q5_K have their own files,
 * gemm_q4_0_iq4_nl.c and gemm_q4_q5_k.c), bit-identical to the vec_dots (Q8_0: vec_dot_ref) of
 * compute/x86/avx2/kernels.c.
 *
 * Register layout: a ymm holds one (row, token) pair's 8 lanes; 16 registers
 * allow a tile of 2 rows x 4 tokens (8 accumulators) and the operands.
 *
 * Q8_0 tile: 2 rows x 4 tokens, one parity of blocks at a time (the
 * vec_dot's acc0 takes the even blocks, acc1 the odd ones). Per block and
 * pair, as the vec_dot: vpsignb, vpmaddubsw with the panel's |w|, vpmaddwd
 * by 1, then scale product, convert, fma: 6 instructions for 32
 * multiply-adds (the vec_dot's loads, fp16 conversions and broadcasts are
 * gone: the panel and the token table hold floats).
 * Q5_K / Q6_K tile: 2 rows x 4 tokens; per 32 elements and pair:
 * vpmaddubsw, vpmaddwd by the group scales, add (Q6_K starts each block from
 * -32 * (bsums . scales), one vpmaddwd); Q5_K's mins term is one 8-lane
 * vector per tile, lane 4k + u = row k, token u.
 */
#include "compute/gemm.h"
#include "util.h"
#include "compute/x86/tile_driver.h"
#include "compute/quant/quant.h"

#include <assert.h>
#include <stdalign.h>
#include <stdint.h>
#include <string.h>

#if defined(__x86_64__) && defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include <immintrin.h>

/* Tokens per chunk of tokens, as in compute/x86/avx512/gemm_q8_0_q4_q5_q6_k.c. */
#define TC_MAX 64
#define TAB_BYTES 32768

/* ==== Q8_0 ========================================================================== */

#define T32 4   /* tokens per tile */
#define KC32 64 /* blocks per chunk of K (even: parities stay aligned) */

/* One block of one row, unpacked (96 bytes). */
typedef struct p32 {
    int8_t w[32];  /* the weights */
    uint8_t a[32]; /* their magnitudes */
    float d[8];    /* the row's scale, 8 times */
} p32;

static inline void p32_finish(p32 *e, __m256i w, float d) {
    _mm256_store_si256((__m256i *)(void *)e->w, w);
    _mm256_store_si256((__m256i *)(void *)e->a, _mm256_sign_epi8(w, w));
    _mm256_store_ps(e->d, _mm256_set1_ps(d));
}

INLINE void p32_q8_0(p32 *e, const uint8_t *blk) {
    const tkv__block_q8_0 *b = (const tkv__block_q8_0 *)(const void *)blk;
    p32_finish(e, LOAD256(b->qs), f16(b->d));
}

/*
 * The tile: 2 rows x T tokens, blocks i0, i0 + 2, ... < i1 (row k of block i
 * at pan[2 (i - k0) + k]); da[i * T + t]: token scales; st: the 2 T
 * accumulators (8 floats each, [row][token]).
 */
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
            const __m256i yv = LOAD256(yt[t] + i * sizeof(tkv__block_q8_0) + 2);
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

INLINE void tile32_any(const p32 *pan, size_t k0, size_t i0, size_t i1, const uint8_t *const *yt, const float *da,
                       float *st, int init, int T) {
    switch (T) {
    case 4: tile32(pan, k0, i0, i1, yt, da, st, init, 4); break;
    case 2: tile32(pan, k0, i0, i1, yt, da, st, init, 2); break;
    default: tile32(pan, k0, i0, i1, yt, da, st, init, 1); break;
    }
}

/* acc0 + acc1, the horizontal sums, out: 2 rows (nrow valid) x T tokens. */
INLINE void finish32(const float *st, int T, float *y, size_t ldy, size_t nrow) {
    const float *s1 = st + 16 * T; /* parity 1 */
    __m256 a[8];
    for (int q = 0; q < 8; q++) {
        const int at = 8 * ((q % 2) * T + q / 2);
        a[q] = q / 2 < T ? _mm256_add_ps(_mm256_load_ps(st + at), _mm256_load_ps(s1 + at)) : _mm256_setzero_ps();
    }
    store_tile(y, ldy, reduce8(a), (int)min_sz(2, nrow), T);
}

enum { STT32 = 2 * 2 * 8 /* stash floats per token: 2 parities x 2 rows x 8 */ };

/* A Q8_0 product's buffers (52 KiB: they live on the stack, kernels.h: under 80 KiB). */
typedef struct q8_bufs {
    alignas(64) p32 pan[2 * KC32];                   /* 12 KiB */
    alignas(64) float st[TC_MAX * STT32];            /* 8 KiB */
    alignas(64) float da[TAB_BYTES / sizeof(float)]; /* 32 KiB */
} q8_bufs;

/* The product's state: its buffers and constants (a local whose fields the compiler keeps in registers). */
typedef struct q8_state {
    q8_bufs *b;
    size_t nb; /* blocks per row */
} q8_state;

/* Token scales as floats: tile j's at da + nb * start[j], [block][token]. */
INLINE void q8_table(void *f, const tile_job *job, const tile_chunk *c) {
    q8_state *b = f;
    tile_scales(job, c, b->nb, sizeof(tkv__block_q8_0), b->b->da, NULL);
}

INLINE void q8_panel(void *f, const uint8_t *const *rows, size_t i, size_t k0) {
    q8_state *b = f;
    for (int k = 0; k < 2; k++) p32_q8_0(&b->b->pan[2 * (i - k0) + (size_t)k], rows[k] + i * sizeof(tkv__block_q8_0));
}

INLINE void q8_tile(void *f, const tile_chunk *c, const tile_step *s) {
    q8_state *b = f;
    for (int par = 0; par < 2; par++)
        tile32_any(b->b->pan, s->k0, s->k0 + (size_t)par, s->k1, s->yt, b->b->da + b->nb * c->start[s->j],
                   s->st + 16 * s->T * par, s->k0 == 0, s->T);
}

INLINE void q8_finish(void *f, const float *st, int T, float *y, size_t ldy, size_t nrow) {
    (void)f;
    finish32(st, T, y, ldy, nrow);
}

INLINE void gemm32(const tile_job *job) {
    q8_bufs bufs;
    q8_state b = {.b = &bufs};
    _Static_assert(sizeof bufs + sizeof(tile_chunk) <= 80 * 1024,
                   "the buffers of a product live on the stack (kernels.h: under 80 KiB)");
    b.nb = job->n / TKV__QK;
    const int direct = b.nb <= KC32;
    size_t tc = TAB_BYTES / sizeof(float) / b.nb;
    const size_t cap = direct ? TILE_TC_DIRECT : TC_MAX;
    tc = tc < 1 ? 1 : tc > cap ? cap : tc;
    assert(tc * b.nb <= sizeof bufs.da / sizeof bufs.da[0] && (direct || tc * STT32 <= sizeof bufs.st / sizeof bufs.st[0]));
    const tile_shape sh = {.nb = b.nb, .bs = sizeof(tkv__block_q8_0), .kc = KC32, .tc = tc, .rows = 2, .big = T32,
                           .st = bufs.st, .stt = STT32, .by_token = 1};
    const tile_ops ops = {.table = q8_table, .panel = q8_panel, .tile = q8_tile, .finish = q8_finish};
    tile_product(job, &sh, &ops, &b);
}

void tkv__gemm_q8_0_lanes_avx2(size_t n, const void *w, size_t wrs, size_t nr, const void *xq, size_t xrs,
                               size_t n_tok, float *y, size_t ldy) {
    gemm32(&(tile_job){n, w, wrs, nr, xq, xrs, n_tok, y, ldy});
}

/* ==== Q5_K / Q6_K =============================================================== */

#define TK 4  /* tokens per tile */
#define KCK 8 /* blocks per chunk of K */
#define Q8K_QS 4
#define Q8K_BSUMS 260

/* One block of one row, unpacked (576 bytes). */
typedef struct pk {
    uint8_t w[8][32];  /* per 32 elements: the quants (0..15 / 0..63) */
    int16_t sc[8][16]; /* their vpmaddwd multipliers: Q5_K the group scale x 16;
                          Q6_K two groups of 16: scale x 8, next scale x 8 */
    float d[8];        /* the row's d, 8 times */
    int16_t scm[16];   /* Q6_K: -32 x the 16 group scales */
} pk;

/* Q5_K, one block of 2 rows: the mins term's multipliers, lane 4k + u (row k). */
typedef struct pkm {
    int32_t mn[4][8]; /* [group pair g]: mins 2g (low 16 bits) and 2g + 1 (high) of the lane's row */
    float dmin[8];
} pkm;

/* Q5_K, one block of a tile's 4 token slots. */
typedef struct tk {
    int32_t bs[4][4]; /* [group pair g][token]: added bsums of groups 2g (low 16 bits) and 2g + 1 */
    float da[4];      /* per token */
    float pad[4];
} tk;

/* Q5_K (its d, dmin and scales sit where Q4_K's do: the mins panel reads them as Q4_K blocks). */
NOINLINE void pk_q5_K(pk *e, const uint8_t *blk) {
    const tkv__block_q5_K *b = (const tkv__block_q5_K *)(const void *)blk;
    const uint8_t *qs = b->qs;
    __m256i h = LOAD256(b->qh);
    uint8_t s[16];
    tkv__quant_k4_unpack(b->scales, s);
    const __m256i m = _mm256_set1_epi8(0x0f), one = _mm256_set1_epi8(1);
    for (int c = 0; c < 4; c++) { /* chunk c: group 2c in the low nibbles, 2c + 1 in the high */
        const __m256i q = LOAD256(qs + 32 * c);
        __m256i lo = _mm256_and_si256(q, m), hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m);
        /* bits 2c and 2c + 1 of qh[l] are bit 4 of elements 64c + l and 64c + 32 + l */
        lo = _mm256_or_si256(lo, _mm256_slli_epi16(_mm256_and_si256(h, one), 4));
        hi = _mm256_or_si256(hi, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 1), one), 4));
        h = _mm256_srli_epi16(h, 2);
        _mm256_store_si256((__m256i *)(void *)e->w[2 * c], lo);
        _mm256_store_si256((__m256i *)(void *)e->w[2 * c + 1], hi);
    }
    for (int g = 0; g < 8; g++) _mm256_store_si256((__m256i *)(void *)e->sc[g], _mm256_set1_epi16(s[g]));
    _mm256_store_ps(e->d, _mm256_set1_ps(f16(b->d)));
}

NOINLINE void pkm_q45_K(pkm *m, const uint8_t *const *rows, size_t i, size_t bs) {
    for (int k = 0; k < 2; k++) {
        const tkv__block_q4_K *b = (const tkv__block_q4_K *)(const void *)(rows[k] + i * bs);
        uint8_t s[16];
        tkv__quant_k4_unpack(b->scales, s);
        const float dmin = f16(b->dmin);
        for (int u = 0; u < 4; u++) {
            for (int g = 0; g < 4; g++) m->mn[g][4 * k + u] = (int32_t)((uint32_t)s[8 + 2 * g] | (uint32_t)s[9 + 2 * g] << 16);
            m->dmin[4 * k + u] = dmin;
        }
    }
}

static void pk_q6_K(pk *e, const uint8_t *blk) {
    const tkv__block_q6_K *x = (const tkv__block_q6_K *)(const void *)blk;
    __m256i q[8]; /* the quants 0..63 in element order, 32 at a time */
    q6k_quants(x->ql, x->qh, q);
    for (int h = 0; h < 2; h++) {
        for (int k = 0; k < 4; k++) {
            const int g = 8 * h + 2 * k; /* groups g (low 128 bits) and g + 1 (high) */
            _mm256_store_si256((__m256i *)(void *)e->w[4 * h + k], q[4 * h + k]);
            _mm256_store_si256((__m256i *)(void *)e->sc[4 * h + k],
                               _mm256_set_m128i(_mm_set1_epi16(x->scales[g + 1]), _mm_set1_epi16(x->scales[g])));
        }
    }
    _mm256_store_si256((__m256i *)(void *)e->scm, _mm256_mullo_epi16(_mm256_cvtepi8_epi16(LOAD128(x->scales)), _mm256_set1_epi16(-32)));
    _mm256_store_ps(e->d, _mm256_set1_ps(f16(x->d)));
}

/*
 * The tile: 2 rows x T tokens over blocks k0..k1-1 (row k of block i at
 * pan[2 (i - k0) + k], Q5_K mins pm[i - k0], token table tab[i]). st: 2 T
 * accumulators [row][token], then the mins vector (8 floats each).
 */
INLINE void tilek(const pk *pan, const pkm *pm, size_t k0, size_t k1, const uint8_t *const *yt, const tk *tab,
                  float *st, int init, int T, int six) {
    __m256 acc[2][TK], accm = init ? _mm256_setzero_ps() : _mm256_load_ps(st + 8 * 2 * T);
    UNROLL
    for (int k = 0; k < 2; k++)
        UNROLL
        for (int t = 0; t < T; t++) acc[k][t] = init ? _mm256_setzero_ps() : _mm256_load_ps(st + 8 * (k * T + t));
    for (size_t i = k0; i < k1; i++) {
        const pk *e = pan + 2 * (i - k0);
        UNROLL
        for (int t = 0; t < T; t++) {
            const uint8_t *yb = yt[t] + i * sizeof(tkv__block_q8_K);
            float yd;
            memcpy(&yd, yb, sizeof yd);
            const __m256 dt = _mm256_set1_ps(yd);
            UNROLL
            for (int k = 0; k < 2; k++) {
                __m256i s = six ? _mm256_madd_epi16(LOAD256(yb + Q8K_BSUMS), LOADA256(e[k].scm)) : _mm256_setzero_si256();
                UNROLL
                for (int g = 0; g < 8; g++)
                    s = _mm256_add_epi32(s, _mm256_madd_epi16(_mm256_maddubs_epi16(LOADA256(e[k].w[g]), LOAD256(yb + Q8K_QS + 32 * g)),
                                                              LOADA256(e[k].sc[g])));
                acc[k][t] = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_load_ps(e[k].d), dt), _mm256_cvtepi32_ps(s), acc[k][t]);
            }
        }
        if (!six) { /* accm += (d_token * dmin_row) * (mins . bsums), lane 4k + u */
            const pkm *m = pm + (i - k0);
            __m256i sm = _mm256_setzero_si256();
            UNROLL
            for (int g = 0; g < 4; g++)
                sm = _mm256_add_epi32(sm, _mm256_madd_epi16(_mm256_broadcastsi128_si256(_mm_load_si128((const __m128i *)(const void *)tab[i].bs[g])),
                                                            LOADA256(m->mn[g])));
            const __m256 dm = _mm256_mul_ps(_mm256_broadcast_ps((const __m128 *)(const void *)tab[i].da), _mm256_load_ps(m->dmin));
            accm = _mm256_add_ps(accm, _mm256_mul_ps(dm, _mm256_cvtepi32_ps(sm)));
        }
    }
    UNROLL
    for (int k = 0; k < 2; k++)
        UNROLL
        for (int t = 0; t < T; t++) _mm256_store_ps(st + 8 * (k * T + t), acc[k][t]);
    _mm256_store_ps(st + 8 * 2 * T, accm);
}

NOINLINE void tilek_any(const pk *pan, const pkm *pm, size_t k0, size_t k1, const uint8_t *const *yt, const tk *tab,
                      float *st, int init, int T, int six) {
    if (six) {
        switch (T) {
        case 4: tilek(pan, pm, k0, k1, yt, tab, st, init, 4, 1); break;
        case 2: tilek(pan, pm, k0, k1, yt, tab, st, init, 2, 1); break;
        default: tilek(pan, pm, k0, k1, yt, tab, st, init, 1, 1); break;
        }
    } else {
        switch (T) {
        case 4: tilek(pan, pm, k0, k1, yt, tab, st, init, 4, 0); break;
        case 2: tilek(pan, pm, k0, k1, yt, tab, st, init, 2, 0); break;
        default: tilek(pan, pm, k0, k1, yt, tab, st, init, 1, 0); break;
        }
    }
}

/* The horizontal sums (minus the mins term), out: 2 rows (nrow valid) x T tokens. */
INLINE void finishk(const float *st, int T, float *y, size_t ldy, size_t nrow, int six) {
    __m256 a[8];
    for (int q = 0; q < 8; q++) a[q] = q / 2 < T ? _mm256_load_ps(st + 8 * ((q % 2) * T + q / 2)) : _mm256_setzero_ps();
    __m256 v = reduce8(a);
    if (!six) v = _mm256_sub_ps(v, _mm256_load_ps(st + 8 * 2 * T));
    store_tile(y, ldy, v, (int)min_sz(2, nrow), T);
}

enum { STTK = 9 * 8 /* stash floats per tile: 2 x 4 accumulators + the mins vector */ };

/* A Q5_K / Q6_K product's buffers (47 KiB, on the stack). */
typedef struct k_bufs {
    alignas(64) pk pan[2 * KCK];                    /* 9 KiB */
    alignas(64) pkm pm[KCK];                        /* 1.3 KiB */
    alignas(64) float st[(TC_MAX / TK + 2) * STTK]; /* 5 KiB */
    alignas(64) tk tab[TAB_BYTES / sizeof(tk)];     /* 32 KiB */
} k_bufs;

/* The product's state: its buffers and constants (a local whose fields the compiler keeps in registers). */
typedef struct k_state {
    k_bufs *b;
    size_t nb, bs; /* blocks per row, bytes per block */
    int six; /* Q6_K, else Q5_K */
} k_state;

/* Q5_K: tile j's table at tab + j nb; slots past the tile's tokens repeat its last. */
INLINE void k_table(void *f, const tile_job *job, const tile_chunk *c) {
    k_state *b = f;
    const size_t nb = b->nb;
    assert((size_t)c->ntile * nb <= sizeof b->b->tab / sizeof b->b->tab[0]);
    for (int j = 0; j < c->ntile; j++)
        for (size_t i = 0; i < nb; i++) {
            tk *e = &b->b->tab[(size_t)j * nb + i];
            for (int u = 0; u < TK; u++) {
                const int t = u < c->len[j] ? u : c->len[j] - 1;
                const uint8_t *blk = job->xq + (c->t0 + c->start[j] + (size_t)t) * job->xrs + i * sizeof(tkv__block_q8_K);
                alignas(16) int32_t bsum[4];
                _mm_store_si128((__m128i *)(void *)bsum, _mm_hadd_epi16(LOAD128(blk + Q8K_BSUMS), LOAD128(blk + Q8K_BSUMS + 16)));
                for (int g = 0; g < 4; g++) e->bs[g][u] = bsum[g];
                memcpy(&e->da[u], blk, sizeof(float));
            }
        }
}

INLINE void k_panel(void *f, const uint8_t *const *rows, size_t i, size_t k0) {
    k_state *b = f;
    for (int k = 0; k < 2; k++) {
        if (b->six) pk_q6_K(&b->b->pan[2 * (i - k0) + (size_t)k], rows[k] + i * b->bs);
        else pk_q5_K(&b->b->pan[2 * (i - k0) + (size_t)k], rows[k] + i * b->bs);
    }
    if (!b->six) pkm_q45_K(&b->b->pm[i - k0], rows, i, b->bs);
}

INLINE void k_tile(void *f, const tile_chunk *c, const tile_step *s) {
    k_state *b = f;
    (void)c;
    tilek_any(b->b->pan, b->b->pm, s->k0, s->k1, s->yt, b->b->tab + (size_t)s->j * b->nb, s->st, s->k0 == 0, s->T, b->six);
}

INLINE void k_finish(void *f, const float *st, int T, float *y, size_t ldy, size_t nrow) {
    finishk(st, T, y, ldy, nrow, ((k_state *)f)->six);
}

/* kind: 5 or 6 (Q5_K, Q6_K) */
INLINE void gemmk(const tile_job *job, int kind) {
    k_bufs bufs;
    k_state b = {.b = &bufs};
    _Static_assert(sizeof bufs + sizeof(tile_chunk) <= 80 * 1024,
                   "the buffers of a product live on the stack (kernels.h: under 80 KiB)");
    b.six = kind == 6;
    b.nb = job->n / TKV__QK_K;
    b.bs = b.six ? sizeof(tkv__block_q6_K) : sizeof(tkv__block_q5_K);
    const int direct = b.nb <= KCK;
    /* see compute/x86/avx512/gemm_q8_0_q4_q5_q6_k.c */
    const size_t cap = direct ? TILE_TC_DIRECT : TC_MAX, tiles = TAB_BYTES / sizeof(tk) / b.nb;
    size_t tc = b.six ? cap : tiles >= 3 ? TK * (tiles - 2) : 1;
    if (tc > cap) tc = cap;
    assert(direct || (tc / TK + 2) * STTK <= sizeof bufs.st / sizeof bufs.st[0]);
    const tile_shape sh = {.nb = b.nb, .bs = b.bs, .kc = KCK, .tc = tc, .rows = 2, .big = TK,
                           .st = bufs.st, .stt = STTK, .by_token = 0};
    const tile_ops ops = {.table = b.six ? NULL : k_table, .panel = k_panel, .tile = k_tile, .finish = k_finish};
    tile_product(job, &sh, &ops, &b);
}

/* Q5_K in the reference's lane-wise order (kernels.h's gemm_ref) */
void tkv__gemm_q5_K_lanes_avx2(size_t n, const void *w, size_t wrs, size_t nr, const void *xq, size_t xrs, size_t n_tok,
                         float *y, size_t ldy) {
    gemmk(&(tile_job){n, w, wrs, nr, xq, xrs, n_tok, y, ldy}, 5);
}

void tkv__gemm_q6_K_lanes_avx2(size_t n, const void *w, size_t wrs, size_t nr, const void *xq, size_t xrs, size_t n_tok,
                         float *y, size_t ldy) {
    gemmk(&(tile_job){n, w, wrs, nr, xq, xrs, n_tok, y, ldy}, 6);
}


#endif
