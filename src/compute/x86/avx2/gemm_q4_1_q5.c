/*
 * compute/x86/avx2/gemm_q4_1_q5.c — tiled products for prefill (see gemm.h), AVX2 + FMA +
 * F16C, for Q4_1, Q5_0 and Q5_1: bit-identical to the vec_dots of
 * compute/x86/avx2/kernels.c (Q5_0's vec_dot_ref: its default order is
 * block-reduced, gemm_q4_0_iq4_nl.c), which keep the lane-wise order with ONE float
 * accumulator (no even/odd split as Q8_0's) and, for Q4_1 and Q5_1, a
 * scalar running sum summ += m_w * s_a (block order, each product rounded
 * before the add), added after the horizontal sum: hsum(acc) + summ.
 *
 * Register layout as compute/x86/avx2/gemm_q8_0_q4_q5_q6_k.c's Q8_0: a ymm holds one (row, token)
 * pair's 8 lanes; tiles of 2 rows x up to 4 tokens (8 accumulators).
 *   - Q4_1 / Q5_1: the quants are unsigned, so per block and pair, as the
 *     vec_dot: vpmaddubsw (quants, activations), vpmaddwd by 1, then the
 *     scale product, convert, fma. The offset sums are one 8-lane vector
 *     per tile (lane 4k + u: row k, token u), a multiply and an add per
 *     block.
 *   - Q5_0: q - 16 is signed: vpsignb moves its sign onto the activations
 *     and vpmaddubsw takes its magnitude from the panel, as the vec_dot's
 *     dot_i8 (pairs of at most 2 * 16 * 127: no saturation).
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

#if defined(__x86_64__) && defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include <immintrin.h>

enum {
    T5 = 4,        /* tokens per tile */
    KC5 = 64,      /* blocks per chunk of K: the panel (12 KiB) stays in L1 */
    TC_CHUNK = 64, /* tokens per chunk of tokens when K is cut (their tiles wait in the stash) */
    TAB_FLOATS = 8192, /* the token table (scales, then the offset types' sums): 32 KiB */
    STT = 2 * T5 * 8 + 8, /* stash floats per tile: the accumulators, then the offset vector */
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

/* One block of one row, unpacked (96 bytes). */
typedef struct p5 {
    uint8_t w[32]; /* the quants (Q5_0: q - 16, as int8) */
    uint8_t a[32]; /* Q5_0: their magnitudes */
    float d[8];    /* the row's scale, 8 times */
} p5;

/* 0x10 in byte j when bit j of the little-endian uint32 at qh is set. */
static inline __m256i fifth_bits32(const uint8_t *qh) {
    uint32_t h;
    memcpy(&h, qh, 4);
    const __m256i shuf = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2,
                                          3, 3, 3, 3, 3, 3, 3, 3);
    const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ULL);
    const __m256i v = _mm256_and_si256(_mm256_shuffle_epi8(_mm256_set1_epi32((int)h), shuf), bit);
    return _mm256_and_si256(_mm256_cmpeq_epi8(v, bit), _mm256_set1_epi8(0x10));
}

/* Block i of a row into e; *m its offset (the offset types). */
INLINE void unpack(p5 *e, float *m, const uint8_t *row, size_t i, kind5 kd) {
    __m256i q;
    uint16_t d;
    if (kd == K4_1) {
        const tkv__block_q4_1 *b = (const tkv__block_q4_1 *)(const void *)row + i;
        q = nibbles32(b->qs);
        d = b->d, *m = f16(b->m);
    } else if (kd == K5_0) {
        const tkv__block_q5_0 *b = (const tkv__block_q5_0 *)(const void *)row + i;
        q = _mm256_sub_epi8(_mm256_or_si256(nibbles32(b->qs), fifth_bits32(b->qh)), _mm256_set1_epi8(16));
        _mm256_store_si256((__m256i *)(void *)e->a, _mm256_sign_epi8(q, q));
        d = b->d, *m = 0.0f;
    } else {
        const tkv__block_q5_1 *b = (const tkv__block_q5_1 *)(const void *)row + i;
        q = _mm256_or_si256(nibbles32(b->qs), fifth_bits32(b->qh));
        d = b->d, *m = f16(b->m);
    }
    _mm256_store_si256((__m256i *)(void *)e->w, q);
    _mm256_store_ps(e->d, _mm256_set1_ps(f16(d)));
}

/* ---- the tile ---------------------------------------------------------------------- */

/*
 * 2 rows x T tokens over blocks k0..k1-1 (row k of block i at
 * pan[2 (i - k0) + k]; its offsets, 4 times each, at mm + 8 (i - k0)). yt:
 * the T token rows; da[i * T + t], sa[i * T + t]: their block scales and
 * (offset types) sums s; st: the tile's stash (STT floats).
 */
INLINE void tile5(const p5 *pan, const float *mm, size_t k0, size_t k1, const uint8_t *const *yt, const float *da,
                  const float *sa, float *st, int init, int T, kind5 kd) {
    const int offs = kd != K5_0;
    const size_t ab = ablock(kd), qo = aqs(kd);
    __m256 acc[2][T5], sm = init ? _mm256_setzero_ps() : _mm256_load_ps(st + 16 * T5);
    UNROLL
    for (int k = 0; k < 2; k++)
        UNROLL
        for (int t = 0; t < T; t++) acc[k][t] = init ? _mm256_setzero_ps() : _mm256_load_ps(st + 8 * (k * T + t));
    const __m256i ones = _mm256_set1_epi16(1);
    const __m128i tmask = _mm_cmpgt_epi32(_mm_set1_epi32(T), _mm_setr_epi32(0, 1, 2, 3));
    for (size_t i = k0; i < k1; i++) {
        const p5 *e = pan + 2 * (i - k0);
        /* the unsigned operand of vpmaddubsw: the quants, or Q5_0's magnitudes */
        const __m256i u0 = offs ? LOADA256(e[0].w) : LOADA256(e[0].a), u1 = offs ? LOADA256(e[1].w) : LOADA256(e[1].a);
        UNROLL
        for (int t = 0; t < T; t++) {
            const __m256i yv = LOAD256(yt[t] + i * ab + qo);
            const __m256 dt = _mm256_broadcast_ss(da + i * (size_t)T + (size_t)t);
            const __m256i y0 = offs ? yv : _mm256_sign_epi8(yv, LOADA256(e[0].w));
            const __m256i y1 = offs ? yv : _mm256_sign_epi8(yv, LOADA256(e[1].w));
            const __m256i p0 = _mm256_madd_epi16(_mm256_maddubs_epi16(u0, y0), ones);
            const __m256i p1 = _mm256_madd_epi16(_mm256_maddubs_epi16(u1, y1), ones);
            acc[0][t] = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_load_ps(e[0].d), dt), _mm256_cvtepi32_ps(p0), acc[0][t]);
            acc[1][t] = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_load_ps(e[1].d), dt), _mm256_cvtepi32_ps(p1), acc[1][t]);
        }
        if (offs) { /* summ += m_w * s_a: lane 4k + u is row k, token u */
            const __m128 s4 = T == 4 ? _mm_loadu_ps(sa + i * 4) : _mm_maskload_ps(sa + i * (size_t)T, tmask);
            const __m256 s = _mm256_insertf128_ps(_mm256_castps128_ps256(s4), s4, 1);
            sm = _mm256_add_ps(sm, _mm256_mul_ps(_mm256_load_ps(mm + 8 * (i - k0)), s));
        }
    }
    UNROLL
    for (int k = 0; k < 2; k++)
        UNROLL
        for (int t = 0; t < T; t++) _mm256_store_ps(st + 8 * (k * T + t), acc[k][t]);
    _mm256_store_ps(st + 16 * T5, sm);
}

#define TILE5_T(kd)                                                                 \
    switch (T) {                                                                    \
    case 4: tile5(pan, mm, k0, k1, yt, da, sa, st, init, 4, kd); break;             \
    case 2: tile5(pan, mm, k0, k1, yt, da, sa, st, init, 2, kd); break;             \
    default: tile5(pan, mm, k0, k1, yt, da, sa, st, init, 1, kd); break;            \
    }

INLINE void tile5_any(const p5 *pan, const float *mm, size_t k0, size_t k1, const uint8_t *const *yt, const float *da,
                      const float *sa, float *st, int init, int T, kind5 kd) {
    if (kd == K4_1) {
        TILE5_T(K4_1)
    } else if (kd == K5_0) {
        TILE5_T(K5_0)
    } else {
        TILE5_T(K5_1)
    }
}

/* The horizontal sums (plus the offset sums), out: 2 rows (nrow valid) x T tokens. */
static void finish5(const float *st, int T, float *y, size_t ldy, size_t nrow, int offs) {
    __m256 a[8];
    for (int q = 0; q < 8; q++) a[q] = q / 2 < T ? _mm256_load_ps(st + 8 * ((q % 2) * T + q / 2)) : _mm256_setzero_ps();
    __m256 v = reduce8(a);
    if (offs) v = _mm256_add_ps(v, _mm256_load_ps(st + 16 * T5));
    store_tile(y, ldy, v, (int)min_sz(2, nrow), T);
}

/* ---- the product ------------------------------------------------------------------- */

/* A Q4_1 / Q5_0 / Q5_1 product's buffers (on the stack). */
typedef struct q5_bufs {
    alignas(64) p5 pan[2 * KC5];          /* 12 KiB */
    alignas(64) float mm[8 * KC5];         /* the panel's offsets */
    alignas(64) float st[MAX_TILES * STT]; /* 5 KiB */
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

/* Block i of the 2 rows; the offset types' m of each, 4 times, at mm + 8 (i - k0). */
INLINE void q5_panel(void *f, const uint8_t *const *rows, size_t i, size_t k0) {
    q5_state *b = f;
    float m[2];
    unpack(&b->b->pan[2 * (i - k0)], &m[0], rows[0], i, b->kd);
    unpack(&b->b->pan[2 * (i - k0) + 1], &m[1], rows[1], i, b->kd);
    if (b->kd != K5_0) _mm256_store_ps(b->b->mm + 8 * (i - k0), _mm256_setr_m128(_mm_set1_ps(m[0]), _mm_set1_ps(m[1])));
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
    const tile_shape sh = {.nb = b.nb, .bs = wblock(kd), .kc = KC5, .tc = tc, .rows = 2, .big = T5,
                           .st = bufs.st, .stt = STT, .by_token = 0};
    const tile_ops ops = {.table = q5_table, .panel = q5_panel, .tile = q5_tile, .finish = q5_finish};
    tile_product(job, &sh, &ops, &b);
}

void tkv__gemm_q4_1_avx2(size_t n, const void *w, size_t wrs, size_t nr, const void *xq, size_t xrs, size_t n_tok,
                         float *y, size_t ldy) {
    gemm5(&(tile_job){n, w, wrs, nr, xq, xrs, n_tok, y, ldy}, K4_1);
}

void tkv__gemm_q5_0_lanes_avx2(size_t n, const void *w, size_t wrs, size_t nr, const void *xq, size_t xrs,
                               size_t n_tok, float *y, size_t ldy) {
    gemm5(&(tile_job){n, w, wrs, nr, xq, xrs, n_tok, y, ldy}, K5_0);
}

void tkv__gemm_q5_1_avx2(size_t n, const void *w, size_t wrs, size_t nr, const void *xq, size_t xrs, size_t n_tok,
                         float *y, size_t ldy) {
    gemm5(&(tile_job){n, w, wrs, nr, xq, xrs, n_tok, y, ldy}, K5_1);
}

#endif
