/*
 * compute/x86/avx512/gemm_q4_1_q5.c — tiled products for prefill (see gemm.h), AVX-512
 * F/BW/VL + VNNI, for the 32-element types with a fifth bit or an offset:
 * Q4_1, Q5_0 and Q5_1. Bit-identical to the vec_dots of compute/x86/avx512/kernels.c,
 * which keep the lane-wise order with ONE float accumulator (no even/odd
 * split as Q8_0's), plus, for Q4_1 and Q5_1, a scalar running sum
 * summ += m_w * s_a (block order, product rounded before the add) that is
 * added after the horizontal sum: hsum(acc) + summ.
 *
 * Register layout as compute/x86/avx512/gemm_q8_0_q4_q5_q6_k.c's Q8_0: a zmm holds rows 2p (lanes 0-7)
 * and 2p + 1 (lanes 8-15) of one token; tiles of 8 rows (4 pairs) x up to
 * 4 tokens, 16 accumulators.
 *   - Q4_1 / Q5_1: the quants are unsigned (0..15, 0..31), so vpdpbusd
 *     takes them as its unsigned operand and the activations as they are:
 *     the vec_dot's own instruction, 4 per 64 multiply-adds with the scale
 *     product, conversion and fma. The offset sums are two vectors per tile
 *     (lane 4u + k: token u, row 4h + k), a multiply and an add per block.
 *   - Q5_0: weights q - 16 are signed, so, as Q8_0, the activations get
 *     + 128 (one xor per token) and the lanes start from -128 * (sum of the 4
 *     weights) held in the panel: the same exact integers as the vec_dot's
 *     two vpdpbusd.
 */
#include "compute/gemm.h"
#include "util.h"
#include "compute/x86/tile_driver.h"
#include "compute/quant/quant.h"

#include <assert.h>
#include <stdalign.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#if defined(__x86_64__) && defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && \
    defined(__AVX512VNNI__) && defined(__AVX2__) && defined(__F16C__)
#include <immintrin.h>

enum {
    T5 = 4,       /* tokens per tile */
    RP5 = 4,      /* row pairs per tile */
    ROWS5 = 2 * RP5,
    KC5 = 32,     /* blocks per chunk of K: the panel (24 KiB) stays in L1 */
    TC_CHUNK = 32, /* tokens per chunk of tokens when K is cut (their tiles wait in the stash) */
    TAB_FLOATS = 8192, /* the token table (scales, then the offset types' sums): 32 KiB */
    /* stash floats per tile: the accumulators, then the two offset vectors */
    STT = RP5 * T5 * 16 + 2 * 16,
    MAX_TILES = TC_CHUNK / T5 + 2,
};

typedef enum kind5 { K4_1, K5_0, K5_1 } kind5;

static inline size_t wblock(kind5 kd) {
    return kd == K4_1 ? sizeof(tkv__block_q4_1) : kd == K5_0 ? sizeof(tkv__block_q5_0) : sizeof(tkv__block_q5_1);
}

/* Q5_0 pairs with Q8_0 activations, the offset types with Q8_1 (whose s they need). */
static inline size_t ablock(kind5 kd) {
    return kd == K5_0 ? sizeof(tkv__block_q8_0) : sizeof(tkv__block_q8_1);
}

static inline size_t aqs(kind5 kd) {
    return kd == K5_0 ? offsetof(tkv__block_q8_0, qs) : offsetof(tkv__block_q8_1, qs);
}

/* ---- panels ------------------------------------------------------------------------ */

/* One block of one row pair, unpacked (192 bytes). */
typedef struct p5 {
    uint8_t w[64];    /* the 32 quants of row a, then row b (Q5_0: q - 16, as int8) */
    int32_t corr[16]; /* Q5_0: -128 * sum of weights 4j..4j+3 (see the file comment) */
    float d[16];      /* row a's scale x 8, row b's x 8 */
} p5;

/* 0x10 in byte j when bit j of the little-endian uint32 at qh is set. */
static inline __m256i fifth_bits32(const uint8_t *qh) {
    uint32_t h;
    memcpy(&h, qh, 4);
    return _mm256_maskz_mov_epi8((__mmask32)h, _mm256_set1_epi8(0x10));
}

/* Block i's 32 quants in element order; *d its scale, *m its offset (the offset types). */
INLINE __m256i quants(const uint8_t *row, size_t i, kind5 kd, float *d, float *m) {
    if (kd == K4_1) {
        const tkv__block_q4_1 *b = (const tkv__block_q4_1 *)(const void *)row + i;
        *d = f16(b->d), *m = f16(b->m);
        return nibbles32(b->qs);
    }
    if (kd == K5_0) {
        const tkv__block_q5_0 *b = (const tkv__block_q5_0 *)(const void *)row + i;
        *d = f16(b->d), *m = 0.0f;
        return _mm256_sub_epi8(_mm256_or_si256(nibbles32(b->qs), fifth_bits32(b->qh)), _mm256_set1_epi8(16));
    }
    const tkv__block_q5_1 *b = (const tkv__block_q5_1 *)(const void *)row + i;
    *d = f16(b->d), *m = f16(b->m);
    return _mm256_or_si256(nibbles32(b->qs), fifth_bits32(b->qh));
}

/* Block i of the group's 8 rows: RP5 panel entries, and the rows' offsets in pm[0..7]. */
INLINE void unpack(p5 *e, float *pm, const uint8_t *const *rows, size_t i, kind5 kd) {
    const __m512i z = _mm512_setzero_si512();
    for (int p = 0; p < RP5; p++) {
        float da, db;
        const __m256i qa = quants(rows[2 * p], i, kd, &da, &pm[2 * p]);
        const __m256i qb = quants(rows[2 * p + 1], i, kd, &db, &pm[2 * p + 1]);
        const __m512i w = halves_epi(qa, qb);
        _mm512_store_si512(e[p].w, w);
        if (kd == K5_0)
            _mm512_store_si512(e[p].corr, _mm512_sub_epi32(z, _mm512_dpbusd_epi32(z, _mm512_set1_epi8((char)0x80), w)));
        _mm512_store_ps(e[p].d, halves_ps(da, db));
    }
}

/* ---- the tile ---------------------------------------------------------------------- */

/*
 * RP5 row pairs x T tokens over blocks k0..k1-1 of the panel (block i's pair
 * p at pan[RP5 (i - k0) + p], its 8 offsets at pm + 8 (i - k0)). yt: the T
 * token rows; da[i * T + t], sa[i * T + t]: their block scales and (offset
 * types) sums s; st: the tile's stash (STT floats).
 */
INLINE void tile5(const p5 *pan, const float *pm, size_t k0, size_t k1, const uint8_t *const *yt, const float *da,
                  const float *sa, float *st, int init, int T, kind5 kd) {
    const int offs = kd != K5_0;
    const size_t ab = ablock(kd), qo = aqs(kd);
    __m512 acc[RP5][T5], sm[2];
    UNROLL
    for (int p = 0; p < RP5; p++)
        UNROLL
        for (int t = 0; t < T; t++) acc[p][t] = init ? _mm512_setzero_ps() : _mm512_load_ps(st + 16 * (p * T + t));
    sm[0] = init ? _mm512_setzero_ps() : _mm512_load_ps(st + 16 * RP5 * T5);
    sm[1] = init ? _mm512_setzero_ps() : _mm512_load_ps(st + 16 * RP5 * T5 + 16);
    const __m512i bias = _mm512_set1_epi8((char)0x80);
    const __m512i spread = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
    const __mmask16 tmask = (__mmask16)((1u << T) - 1u);
    for (size_t i = k0; i < k1; i++) {
        const p5 *e = pan + RP5 * (i - k0);
        UNROLL
        for (int t = 0; t < T; t++) {
            __m512i yv = BCAST256(yt[t] + i * ab + qo);
            if (!offs) yv = _mm512_xor_si512(yv, bias);
            const __m512 dt = _mm512_set1_ps(da[i * (size_t)T + (size_t)t]);
            UNROLL
            for (int p = 0; p < RP5; p++) {
                __m512i s;
                if (offs) {
                    s = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_load_si512(e[p].w), yv);
                } else {
                    /* vpdpbusd overwrites its accumulator: reload corr from L1 (a load port)
                       rather than copy a register (an ALU slot), as compute/x86/avx512/gemm_q8_0_q4_q5_q6_k.c's Q8_0 */
                    const int32_t *corr = e[p].corr;
                    __asm__ volatile("" : "+r"(corr));
                    s = _mm512_dpbusd_epi32(_mm512_load_si512(corr), yv, _mm512_load_si512(e[p].w));
                }
                const __m512 d = _mm512_mul_ps(_mm512_load_ps(e[p].d), dt);
                acc[p][t] = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(s), acc[p][t]);
            }
        }
        if (offs) { /* summ += m_w * s_a: lane 4u + k is token u, row 4h + k */
            const __m512 s = _mm512_permutexvar_ps(spread, _mm512_maskz_loadu_ps(tmask, sa + i * (size_t)T));
            const float *m = pm + 8 * (i - k0);
            sm[0] = _mm512_add_ps(sm[0], _mm512_mul_ps(_mm512_broadcast_f32x4(_mm_load_ps(m)), s));
            sm[1] = _mm512_add_ps(sm[1], _mm512_mul_ps(_mm512_broadcast_f32x4(_mm_load_ps(m + 4)), s));
        }
    }
    UNROLL
    for (int p = 0; p < RP5; p++)
        UNROLL
        for (int t = 0; t < T; t++) _mm512_store_ps(st + 16 * (p * T + t), acc[p][t]);
    _mm512_store_ps(st + 16 * RP5 * T5, sm[0]);
    _mm512_store_ps(st + 16 * RP5 * T5 + 16, sm[1]);
}

#define TILE5_T(kd)                                                                 \
    switch (T) {                                                                    \
    case 4: tile5(pan, pm, k0, k1, yt, da, sa, st, init, 4, kd); break;             \
    case 2: tile5(pan, pm, k0, k1, yt, da, sa, st, init, 2, kd); break;             \
    default: tile5(pan, pm, k0, k1, yt, da, sa, st, init, 1, kd); break;            \
    }

INLINE void tile5_any(const p5 *pan, const float *pm, size_t k0, size_t k1, const uint8_t *const *yt, const float *da,
                      const float *sa, float *st, int init, int T, kind5 kd) {
    if (kd == K4_1) {
        TILE5_T(K4_1)
    } else if (kd == K5_0) {
        TILE5_T(K5_0)
    } else {
        TILE5_T(K5_1)
    }
}

/* The horizontal sums (plus the offset sums), out: a tile's rows (nrow of them) x T tokens. */
static void finish5(const float *st, int T, float *y, size_t ldy, size_t nrow, int offs) {
    for (int p0 = 0; p0 < RP5 && 2 * (size_t)p0 < nrow; p0 += 2) {
        __m512 a[8];
        for (int q = 0; q < 8; q++) {
            const int t = q / 2, p = p0 + q % 2;
            a[q] = t < T ? _mm512_load_ps(st + 16 * (p * T + t)) : _mm512_setzero_ps();
        }
        __m512 v = reduce16(a);
        if (offs) v = _mm512_add_ps(v, _mm512_load_ps(st + 16 * RP5 * T5 + 16 * (p0 / 2)));
        store_tile(y + 2 * (size_t)p0, ldy, v, (int)min_sz(4, nrow - 2 * (size_t)p0), T);
    }
}

/* ---- the product ------------------------------------------------------------------- */

/* A Q4_1 / Q5_0 / Q5_1 product's buffers (on the stack). */
typedef struct q5_bufs {
    alignas(64) p5 pan[RP5 * KC5];          /* 24 KiB */
    alignas(64) float mm[ROWS5 * KC5];         /* the panel's offsets */
    alignas(64) float st[MAX_TILES * STT]; /* 11.25 KiB */
    alignas(64) float tab[TAB_FLOATS]; /* 32 KiB */
} q5_bufs;

/* The product's state: its buffers and constants (a local whose fields the compiler keeps in registers). */
typedef struct q5_state {
    q5_bufs *b;
    float *da, *sa; /* in b->tab: [token chunk][block][token] each */
    size_t nb;
    kind5 kd;
} q5_state;

INLINE void q5_table(void *f, const tile_job *job, const tile_chunk *c) {
    q5_state *b = f;
    tile_scales(job, c, b->nb, ablock(b->kd), b->da, b->kd != K5_0 ? b->sa : NULL);
}

INLINE void q5_panel(void *f, const uint8_t *const *rows, size_t i, size_t k0) {
    q5_state *b = f;
    unpack(&b->b->pan[RP5 * (i - k0)], &b->b->mm[ROWS5 * (i - k0)], rows, i, b->kd);
}

INLINE void q5_tile(void *f, const tile_chunk *c, const tile_step *s) {
    q5_state *b = f;
    const size_t at = b->nb * c->start[s->j];
    tile5_any(b->b->pan, b->b->mm, s->k0, s->k1, s->yt, b->da + at, b->sa + at, s->st, s->k0 == 0, s->T, b->kd);
}

INLINE void q5_finish(void *f, const float *st, int T, float *y, size_t ldy, size_t nrow) {
    finish5(st, T, y, ldy, nrow, ((q5_state *)f)->kd != K5_0);
}

INLINE void gemm5(const tile_job *job, kind5 kd) {
    q5_bufs bufs;
    _Static_assert(sizeof bufs + sizeof(tile_chunk) <= 80 * 1024,
                   "the buffers of a product live on the stack (kernels.h: under 80 KiB)");
    const int offs = kd != K5_0;
    q5_state b = {.b = &bufs, .kd = kd, .nb = job->n / TKV__QK};
    const int direct = b.nb <= KC5;
    /* tokens whose scales (and sums) fit the table, whole tiles where they can: a
       tile of fewer tokens reads the panel as often for less work */
    size_t tc = TAB_FLOATS / (offs ? 2 : 1) / b.nb;
    const size_t cap = direct ? TILE_TC_DIRECT : TC_CHUNK;
    tc = tc < 1 ? 1 : tc > cap ? cap : tc >= T5 ? tc / T5 * T5 : tc;
    b.da = bufs.tab;
    b.sa = bufs.tab + tc * b.nb;
    assert(tc * b.nb * (offs ? 2 : 1) <= TAB_FLOATS && (direct || (tc / T5 + 2) <= MAX_TILES));
    const tile_shape sh = {.nb = b.nb, .bs = wblock(kd), .kc = KC5, .tc = tc, .rows = ROWS5, .big = T5,
                           .st = bufs.st, .stt = STT, .by_token = 0};
    const tile_ops ops = {.table = q5_table, .panel = q5_panel, .tile = q5_tile, .finish = q5_finish};
    tile_product(job, &sh, &ops, &b);
}

void tkv__gemm_q4_1_avx512(size_t n, const void *w, size_t wrs, size_t nr, const void *xq, size_t xrs, size_t n_tok,
                           float *y, size_t ldy) {
    gemm5(&(tile_job){n, w, wrs, nr, xq, xrs, n_tok, y, ldy}, K4_1);
}

void tkv__gemm_q5_0_avx512(size_t n, const void *w, size_t wrs, size_t nr, const void *xq, size_t xrs, size_t n_tok,
                           float *y, size_t ldy) {
    gemm5(&(tile_job){n, w, wrs, nr, xq, xrs, n_tok, y, ldy}, K5_0);
}

void tkv__gemm_q5_1_avx512(size_t n, const void *w, size_t wrs, size_t nr, const void *xq, size_t xrs, size_t n_tok,
                           float *y, size_t ldy) {
    gemm5(&(tile_job){n, w, wrs, nr, xq, xrs, n_tok, y, ldy}, K5_1);
}

#endif
