/*
 * compute/x86/avx512/gemm_q8_0_q4_q5_q6_k.c — tiled products for prefill (see gemm.h), AVX-512 F/BW/VL
 * + VNNI: Q8_0, Q6_K and Q5_K weights, Q8_0 and Q5_K in the reference's lane-wise orders (kernels.h's
 * gemm_ref; the block-reduced orders of Q4_0, Q8_0, Q4_K and Q5_K have their own files,
 * gemm_q4_0_iq4_nl.c and gemm_q4_q5_k.c). Bit-identical to the vec_dots (Q8_0: vec_dot_ref)
 * of compute/x86/avx512/kernels.c (which equal those of compute/x86/avx2/kernels.c for these types).
 *
 * Register layout: a zmm holds two (row, token) pairs of 8 lanes, rows 2p
 * (lanes 0-7) and 2p + 1 (lanes 8-15) of the same token, so a token's 32
 * activation bytes are broadcast to both halves by a plain load and two
 * weight rows sit side by side in the panel.
 *
 * Q8_0 tile: 8 rows (4 row pairs) x up to 4 tokens, 16 accumulators.
 *   One parity of blocks at a time (the vec_dot's acc0 holds even blocks,
 *   acc1 odd ones; both end in the stash). Per block and token: y + 128 (one
 *   xor, so y is the unsigned operand of vpdpbusd and the weights the signed
 *   one); per row pair: vpdpbusd starting from -128 * (sum of 4 weights),
 *   the scale product, convert, fma: 4 instructions per 64 multiply-adds,
 *   4.25 with the xor. That is the floor for these types: the vec_dot's
 *   float work (convert, scale product, fma) comes every 32 elements, and
 *   the loop runs at the two 512-bit ports' limit (measured: dropping the
 *   scale product alone makes it 21% faster).
 * Q5_K / Q6_K tile: 4 rows x 4 tokens, 8 accumulators + 8 block sums.
 *   Per 32 elements, row pair and token: vpmaddubsw (quants unsigned,
 *   activations signed) then vpdpwssd by the group scales, as the vec_dot.
 *   Q6_K starts each block's lanes from -32 * (bsums . scales) by one
 *   vpmaddwd (scales times -32 in the panel); Q5_K's mins term is a
 *   16-lane vector per tile: lane 4u + k = token u, row k.
 */
#include "compute/gemm.h"
#include "util.h"
#include "compute/x86/tile_driver.h"
#include "compute/quant/quant.h"

#include <assert.h>
#include <stdalign.h>
#include <stdint.h>
#include <string.h>

#if defined(__x86_64__) && defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && \
    defined(__AVX512VNNI__) && defined(__AVX2__) && defined(__F16C__)
#include <immintrin.h>

/*
 * Tokens per chunk of tokens: a chunk's weight panels are unpacked once and
 * used by all its tiles. When K is cut in chunks, the tiles' accumulators
 * wait in a stash, which bounds the chunk to TC_MAX32 / TC_MAXK tokens; when
 * K fits one chunk ("direct"), each tile is finished at once and
 * TILE_TC_DIRECT applies. Either way the per-token tables must fit TAB_BYTES.
 */
#define TC_MAX32 32
#define TC_MAXK 64
#define TAB_BYTES 32768

/* ==== Q8_0 ========================================================================== */

#define T32 4   /* tokens per tile */
#define RP32 4  /* row pairs per tile (even) */
#define KC32 32 /* blocks per chunk of K (even: parities stay aligned) */

/* One block of one row pair, unpacked (192 bytes). */
typedef struct p32 {
    int8_t w[64];     /* the 32 weights of row a, then row b */
    int32_t corr[16]; /* -128 * sum of weights 4j..4j+3: vpdpbusd on y + 128 adds 128 times that */
    float d[16];      /* row a's scale x 8, row b's x 8 */
} p32;

static inline void p32_finish(p32 *e, __m512i w, float da, float db) {
    const __m512i z = _mm512_setzero_si512();
    _mm512_store_si512(e->w, w);
    _mm512_store_si512(e->corr, _mm512_sub_epi32(z, _mm512_dpbusd_epi32(z, _mm512_set1_epi8((char)0x80), w)));
    _mm512_store_ps(e->d, halves_ps(da, db));
}

INLINE void p32_q8_0(p32 *e, const uint8_t *ba, const uint8_t *bb) {
    const tkv__block_q8_0 *a = (const tkv__block_q8_0 *)(const void *)ba;
    const tkv__block_q8_0 *b = (const tkv__block_q8_0 *)(const void *)bb;
    p32_finish(e, halves_epi(LOAD256(a->qs), LOAD256(b->qs)), f16(a->d), f16(b->d));
}

/*
 * The tile: RP32 row pairs x T tokens, blocks i0, i0 + 2, ... < i1 of the
 * panel (block i's row pair p at pan[RP32 (i - k0) + p]). yt: the T token
 * rows; da: their block scales, da[i * T + t]; st: the RP32 T accumulators
 * (16 floats each, [p][t]).
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
                /* vpdpbusd overwrites its accumulator: load corr afresh from L1 (a load port)
                   rather than let the compiler keep it in a register and copy it (an ALU slot) */
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

INLINE void tile32_any(const p32 *pan, size_t k0, size_t i0, size_t i1, const uint8_t *const *yt, const float *da,
                       float *st, int init, int T) {
    switch (T) {
#if T32 >= 8
    case 8: tile32(pan, k0, i0, i1, yt, da, st, init, 8); break;
#endif
    case 4: tile32(pan, k0, i0, i1, yt, da, st, init, 4); break;
    case 2: tile32(pan, k0, i0, i1, yt, da, st, init, 2); break;
    default: tile32(pan, k0, i0, i1, yt, da, st, init, 1); break;
    }
}

/* acc0 + acc1, the horizontal sums, out: a tile's rows (nrow of them) x T tokens. */
INLINE void finish32(const float *st, int T, float *y, size_t ldy, size_t nrow) {
    const float *s1 = st + RP32 * 16 * T; /* parity 1 */
    for (int p0 = 0; p0 < RP32 && 2 * (size_t)p0 < nrow; p0 += 2) /* 4 rows x 4 tokens at a time */
        for (int u = 0; u < T; u += 4) {
            __m512 a[8];
            for (int q = 0; q < 8; q++) {
                const int t = u + q / 2, p = p0 + q % 2, at = 16 * (p * T + t);
                a[q] = t < T ? _mm512_add_ps(_mm512_load_ps(st + at), _mm512_load_ps(s1 + at)) : _mm512_setzero_ps();
            }
            store_tile(y + (size_t)u * ldy + 2 * (size_t)p0, ldy, reduce16(a), (int)min_sz(4, nrow - 2 * (size_t)p0),
                       T - u < 4 ? T - u : 4);
        }
}

enum { ROWS32 = 2 * RP32, STT32 = 2 * RP32 * 16 /* stash floats per token: 2 parities x RP32 x 16 */ };

/* A Q8_0 product's buffers (72 KiB: they live on the stack, kernels.h: under 80 KiB). */
typedef struct q8_bufs {
    alignas(64) p32 pan[RP32 * KC32];                /* 24 KiB */
    alignas(64) float st[TC_MAX32 * STT32];          /* 16 KiB */
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
    for (int p = 0; p < RP32; p++)
        p32_q8_0(&b->b->pan[RP32 * (i - k0) + (size_t)p], rows[2 * p] + i * sizeof(tkv__block_q8_0), rows[2 * p + 1] + i * sizeof(tkv__block_q8_0));
}

INLINE void q8_tile(void *f, const tile_chunk *c, const tile_step *s) {
    q8_state *b = f;
    for (int par = 0; par < 2; par++)
        tile32_any(b->b->pan, s->k0, s->k0 + (size_t)par, s->k1, s->yt, b->b->da + b->nb * c->start[s->j],
                   s->st + RP32 * 16 * s->T * par, s->k0 == 0, s->T);
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
    size_t tc = TAB_BYTES / sizeof(float) / b.nb; /* tokens whose scales fit the table */
    const size_t cap = direct ? TILE_TC_DIRECT : TC_MAX32;
    tc = tc < 1 ? 1 : tc > cap ? cap : tc;
    assert(tc * b.nb <= sizeof bufs.da / sizeof bufs.da[0] && (direct || tc * STT32 <= sizeof bufs.st / sizeof bufs.st[0]));
    const tile_shape sh = {.nb = b.nb, .bs = sizeof(tkv__block_q8_0), .kc = KC32, .tc = tc, .rows = ROWS32, .big = T32,
                           .st = bufs.st, .stt = STT32, .by_token = 1};
    const tile_ops ops = {.table = q8_table, .panel = q8_panel, .tile = q8_tile, .finish = q8_finish};
    tile_product(job, &sh, &ops, &b);
}

void tkv__gemm_q8_0_lanes_avx512(size_t n, const void *w, size_t wrs, size_t nr, const void *xq, size_t xrs,
                                 size_t n_tok, float *y, size_t ldy) {
    gemm32(&(tile_job){n, w, wrs, nr, xq, xrs, n_tok, y, ldy});
}

/* ==== Q5_K / Q6_K =============================================================== */

#define TK 4   /* tokens per tile (the mins vector: 4 tokens x 4 rows) */
#define KCK 8  /* blocks per chunk of K */
#define Q8K_QS 4
#define Q8K_BSUMS 260

/* One block of one row pair, unpacked (1152 bytes). */
typedef struct pk {
    uint8_t w[8][64];  /* per 32 elements: row a's quants (0..15 / 0..63), then row b's */
    int16_t sc[8][32]; /* their vpdpwssd multipliers: Q5_K the group scale x 16 per row;
                          Q6_K two groups of 16: scale x 8, next scale x 8 per row */
    float d[16];       /* row a's d x 8, row b's x 8 */
    int16_t scm[32];   /* Q6_K: -32 x the 16 group scales, row a then row b */
} pk;

/* Q5_K, one block of the 4 rows: the mins term's multipliers. */
typedef struct pkm {
    int32_t mn[4][4]; /* [group pair g][row]: mins 2g (low 16 bits) and 2g + 1 (high) */
    float dmin[4];    /* per row */
    float pad[12];
} pkm;

/* Q5_K, one block of a tile's 4 token slots (the tile's token table). */
typedef struct tk {
    int16_t bs[4][8]; /* [token][group]: bsums of the group's two halves, added */
    float da[4];      /* per token: d */
} tk;

/* Q5_K (its d, dmin and scales sit where Q4_K's do: the mins panel reads them as Q4_K blocks). */
NOINLINE void pk_q5_K(pk *e, const uint8_t *ba, const uint8_t *bb) {
    const tkv__block_q5_K *a = (const tkv__block_q5_K *)(const void *)ba;
    const tkv__block_q5_K *b = (const tkv__block_q5_K *)(const void *)bb;
    const uint8_t *qsa = a->qs, *qsb = b->qs;
    __m256i ha = LOAD256(a->qh), hb = LOAD256(b->qh);
    uint8_t sa[16], sb[16];
    tkv__quant_k4_unpack(a->scales, sa);
    tkv__quant_k4_unpack(b->scales, sb);
    const __m256i m = _mm256_set1_epi8(0x0f), one = _mm256_set1_epi8(1);
    for (int c = 0; c < 4; c++) { /* chunk c: group 2c in the low nibbles, 2c + 1 in the high */
        const __m256i qa = LOAD256(qsa + 32 * c), qb = LOAD256(qsb + 32 * c);
        __m256i la = _mm256_and_si256(qa, m), lb = _mm256_and_si256(qb, m);
        __m256i ua = _mm256_and_si256(_mm256_srli_epi16(qa, 4), m), ub = _mm256_and_si256(_mm256_srli_epi16(qb, 4), m);
        /* bits 2c and 2c + 1 of qh[l] are bit 4 of elements 64c + l and 64c + 32 + l */
        la = _mm256_or_si256(la, _mm256_slli_epi16(_mm256_and_si256(ha, one), 4));
        lb = _mm256_or_si256(lb, _mm256_slli_epi16(_mm256_and_si256(hb, one), 4));
        ua = _mm256_or_si256(ua, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(ha, 1), one), 4));
        ub = _mm256_or_si256(ub, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 1), one), 4));
        ha = _mm256_srli_epi16(ha, 2);
        hb = _mm256_srli_epi16(hb, 2);
        _mm512_store_si512(e->w[2 * c], halves_epi(la, lb));
        _mm512_store_si512(e->w[2 * c + 1], halves_epi(ua, ub));
    }
    for (int g = 0; g < 8; g++)
        _mm512_store_si512(e->sc[g], halves_epi(_mm256_set1_epi16(sa[g]), _mm256_set1_epi16(sb[g])));
    _mm512_store_ps(e->d, halves_ps(f16(a->d), f16(b->d)));
}

static void pkm_q45_K(pkm *m, const uint8_t *const *rows, size_t i, size_t bs) {
    for (int k = 0; k < 4; k++) {
        const tkv__block_q4_K *a = (const tkv__block_q4_K *)(const void *)(rows[k] + i * bs);
        uint8_t s[16];
        tkv__quant_k4_unpack(a->scales, s);
        for (int g = 0; g < 4; g++) m->mn[g][k] = (int32_t)((uint32_t)s[8 + 2 * g] | (uint32_t)s[9 + 2 * g] << 16);
        m->dmin[k] = f16(a->dmin);
    }
}

NOINLINE void pk_q6_K(pk *e, const uint8_t *ba, const uint8_t *bb) {
    const tkv__block_q6_K *a = (const tkv__block_q6_K *)(const void *)ba;
    const tkv__block_q6_K *b = (const tkv__block_q6_K *)(const void *)bb;
    __m512i q[8];
    q6k_quants_pair(a, b, q);
    /* the 16 scales of each row as int16: [a | b] */
    const __m512i sc = halves_epi(_mm256_cvtepi8_epi16(LOAD128(a->scales)), _mm256_cvtepi8_epi16(LOAD128(b->scales)));
    /* chunk s: words 2s (x 8) and 2s + 1 (x 8) of each half */
    const __m512i idx0 = _mm512_set_epi16(17, 17, 17, 17, 17, 17, 17, 17, 16, 16, 16, 16, 16, 16, 16, 16, /**/
                                          1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0);
    for (int s = 0; s < 8; s++) {
        _mm512_store_si512(e->w[s], q[s]);
        _mm512_store_si512(e->sc[s], _mm512_permutexvar_epi16(_mm512_add_epi16(idx0, _mm512_set1_epi16((short)(2 * s))), sc));
    }
    _mm512_store_si512(e->scm, _mm512_mullo_epi16(sc, _mm512_set1_epi16(-32)));
    _mm512_store_ps(e->d, halves_ps(f16(a->d), f16(b->d)));
}

/*
 * The tile: 4 rows (2 pairs) x T tokens over blocks k0..k1-1 (panel entry
 * pan[2 (i - k0)], Q5_K mins pm[i - k0], token table tab[i]). st: 2 T
 * accumulators, then the mins vector (16 floats each).
 */
INLINE void tilek(const pk *pan, const pkm *pm, size_t k0, size_t k1, const uint8_t *const *yt, const tk *tab,
                  float *st, int init, int T, int six) {
    __m512 acc[2][TK], accm = init ? _mm512_setzero_ps() : _mm512_load_ps(st + 16 * 2 * T);
    UNROLL
    for (int p = 0; p < 2; p++)
        UNROLL
        for (int t = 0; t < T; t++) acc[p][t] = init ? _mm512_setzero_ps() : _mm512_load_ps(st + 16 * (p * T + t));
    for (size_t i = k0; i < k1; i++) {
        const pk *e = pan + 2 * (i - k0);
        const uint8_t *yb[TK];
        __m512i s[2][TK];
        UNROLL
        for (int t = 0; t < T; t++) {
            yb[t] = yt[t] + i * sizeof(tkv__block_q8_K);
            UNROLL
            for (int p = 0; p < 2; p++)
                s[p][t] = six ? _mm512_madd_epi16(BCAST256(yb[t] + Q8K_BSUMS), _mm512_load_si512(e[p].scm))
                              : _mm512_setzero_si512();
        }
        UNROLL
        for (int g = 0; g < 8; g++) {
            const __m512i w0 = _mm512_load_si512(e[0].w[g]), w1 = _mm512_load_si512(e[1].w[g]);
            const __m512i c0 = _mm512_load_si512(e[0].sc[g]), c1 = _mm512_load_si512(e[1].sc[g]);
            UNROLL
            for (int t = 0; t < T; t++) {
                const __m512i yv = BCAST256(yb[t] + Q8K_QS + 32 * g);
                s[0][t] = _mm512_dpwssd_epi32(s[0][t], _mm512_maddubs_epi16(w0, yv), c0);
                s[1][t] = _mm512_dpwssd_epi32(s[1][t], _mm512_maddubs_epi16(w1, yv), c1);
            }
        }
        UNROLL
        for (int t = 0; t < T; t++) {
            float yd;
            memcpy(&yd, yb[t], sizeof yd);
            const __m512 dt = _mm512_set1_ps(yd);
            UNROLL
            for (int p = 0; p < 2; p++)
                acc[p][t] = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_load_ps(e[p].d), dt), _mm512_cvtepi32_ps(s[p][t]), acc[p][t]);
        }
        if (!six) { /* accm += (d_token * dmin_row) * (mins . bsums), lane 4u + k */
            const pkm *m = pm + (i - k0);
            const __m512i z = _mm512_loadu_si512(tab[i].bs);
            __m512i sm = _mm512_dpwssd_epi32(_mm512_setzero_si512(), _mm512_shuffle_epi32(z, 0x00),
                                             _mm512_broadcast_i32x4(_mm_load_si128((const __m128i *)(const void *)m->mn[0])));
            sm = _mm512_dpwssd_epi32(sm, _mm512_shuffle_epi32(z, 0x55),
                                     _mm512_broadcast_i32x4(_mm_load_si128((const __m128i *)(const void *)m->mn[1])));
            sm = _mm512_dpwssd_epi32(sm, _mm512_shuffle_epi32(z, 0xaa),
                                     _mm512_broadcast_i32x4(_mm_load_si128((const __m128i *)(const void *)m->mn[2])));
            sm = _mm512_dpwssd_epi32(sm, _mm512_shuffle_epi32(z, 0xff),
                                     _mm512_broadcast_i32x4(_mm_load_si128((const __m128i *)(const void *)m->mn[3])));
            /* lane 4u + k: token u's d times row k's dmin */
            const __m512 da = _mm512_permutexvar_ps(_mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3),
                                                    _mm512_castps128_ps512(_mm_loadu_ps(tab[i].da)));
            const __m512 dm = _mm512_mul_ps(da, _mm512_broadcast_f32x4(_mm_load_ps(m->dmin)));
            accm = _mm512_add_ps(accm, _mm512_mul_ps(dm, _mm512_cvtepi32_ps(sm)));
        }
    }
    UNROLL
    for (int p = 0; p < 2; p++)
        UNROLL
        for (int t = 0; t < T; t++) _mm512_store_ps(st + 16 * (p * T + t), acc[p][t]);
    _mm512_store_ps(st + 16 * 2 * T, accm);
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

/* The horizontal sums (minus the mins term), out: 4 rows (nrow valid) x T tokens. */
INLINE void finishk(const float *st, int T, float *y, size_t ldy, size_t nrow, int six) {
    __m512 a[8];
    for (int q = 0; q < 8; q++) a[q] = q / 2 < T ? _mm512_load_ps(st + 16 * ((q % 2) * T + q / 2)) : _mm512_setzero_ps();
    __m512 v = reduce16(a);
    if (!six) v = _mm512_sub_ps(v, _mm512_load_ps(st + 16 * 2 * T));
    store_tile(y, ldy, v, (int)min_sz(4, nrow), T);
}

enum { STTK = 9 * 16 /* stash floats per tile: 2 x 4 accumulators + the mins vector */ };

/* A Q5_K / Q6_K product's buffers (61 KiB, on the stack). */
typedef struct k_bufs {
    alignas(64) pk pan[2 * KCK];                     /* 18 KiB */
    alignas(64) pkm pm[KCK];                         /* 1 KiB */
    alignas(64) float st[(TC_MAXK / TK + 2) * STTK]; /* 10 KiB */
    alignas(64) tk tab[TAB_BYTES / sizeof(tk)];      /* 32 KiB */
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
                const __m128i bsum = _mm_hadd_epi16(LOAD128(blk + Q8K_BSUMS), LOAD128(blk + Q8K_BSUMS + 16));
                _mm_storeu_si128((__m128i *)(void *)e->bs[u], bsum);
                memcpy(&e->da[u], blk, sizeof(float));
            }
        }
}

INLINE void k_panel(void *f, const uint8_t *const *rows, size_t i, size_t k0) {
    k_state *b = f;
    const size_t o = i * b->bs;
    if (b->six) {
        pk_q6_K(&b->b->pan[2 * (i - k0)], rows[0] + o, rows[1] + o);
        pk_q6_K(&b->b->pan[2 * (i - k0) + 1], rows[2] + o, rows[3] + o);
    } else {
        pk_q5_K(&b->b->pan[2 * (i - k0)], rows[0] + o, rows[1] + o);
        pk_q5_K(&b->b->pan[2 * (i - k0) + 1], rows[2] + o, rows[3] + o);
        pkm_q45_K(&b->b->pm[i - k0], rows, i, b->bs);
    }
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
    /* tokens per chunk: a multiple of TK whose tiles' tables fit (the last,
       shorter chunk may have 2 more tiles than tc / TK); Q6_K has no table */
    const size_t cap = direct ? TILE_TC_DIRECT : TC_MAXK, tiles = TAB_BYTES / sizeof(tk) / b.nb;
    size_t tc = b.six ? cap : tiles >= 3 ? TK * (tiles - 2) : 1;
    if (tc > cap) tc = cap;
    assert(direct || (tc / TK + 2) * STTK <= sizeof bufs.st / sizeof bufs.st[0]);
    const tile_shape sh = {.nb = b.nb, .bs = b.bs, .kc = KCK, .tc = tc, .rows = 4, .big = TK,
                           .st = bufs.st, .stt = STTK, .by_token = 0};
    const tile_ops ops = {.table = b.six ? NULL : k_table, .panel = k_panel, .tile = k_tile, .finish = k_finish};
    tile_product(job, &sh, &ops, &b);
}

/* Q5_K in the reference's lane-wise order (kernels.h's gemm_ref) */
void tkv__gemm_q5_K_lanes_avx512(size_t n, const void *w, size_t wrs, size_t nr, const void *xq, size_t xrs, size_t n_tok,
                           float *y, size_t ldy) {
    gemmk(&(tile_job){n, w, wrs, nr, xq, xrs, n_tok, y, ldy}, 5);
}

void tkv__gemm_q6_K_lanes_avx512(size_t n, const void *w, size_t wrs, size_t nr, const void *xq, size_t xrs, size_t n_tok,
                           float *y, size_t ldy) {
    gemmk(&(tile_job){n, w, wrs, nr, xq, xrs, n_tok, y, ldy}, 6);
}


#endif
