/*
 * compute/x86/avx512/gemm_iq4_xs_lanes.c — the tiled product of IQ4_XS weights in the reference's
 * lane-wise order (kernels.h's gemm_ref) for
 * prefill and decode steps of several sequences (see gemm.h), AVX-512
 * F/BW/VL + VNNI, bit for bit the reference-order vec_dot this level keeps from avx2
 * (compute/x86/avx2/kernels.c's tkv__dot_iq4_xs_lanes_avx2): per (row, token) and
 * super-block the same 8 integer lanes (lane j: elements 4j .. 4j + 3 of
 * every sub-block, each sub-block's products times its scale), then one fma
 * of d_w d_a per super-block and lane, and the vec_dot's horizontal sum.
 *
 * The panel holds each element's codebook value times its sub-block's scale
 * as an int16 (|(ls - 32) v| <= 32 * 127, exact), so a sub-block of one row
 * and one token is one vpdpwssd with the token's 32 quants widened to words:
 * 16 lanes of 2 elements, where the vec_dot's lane j is lanes 2j and 2j + 1
 * (exact integers, added once per super-block). A scale folded into a byte,
 * as Q2_K's and Q3_K's tiles do, does not fit (up to 4064), and vpdpbusd
 * with a vpmulld by the scale per 4 products costs more instructions than the
 * word products (the block-reduced order, gemm_iq4_xs.c, takes one vpmulld
 * per 32 products of a row instead).
 *
 * Tile: 4 rows x 4 tokens: 16 integer accumulators of a super-block, then
 * per row pair and token the lanes paired into the vec_dot's 8 per row and
 * fma'd into the float accumulators, which hold a row pair per zmm (rows 2p
 * in lanes 0-7, 2p + 1 in 8-15) as every avx512 tile does.
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

#define TK 4       /* tokens per tile */
#define KC 8       /* blocks per chunk of K */
#define TC_MAXK 64 /* tokens per chunk when K is cut (the stash holds them all); TILE_TC_DIRECT when it is not */

enum { XB = sizeof(tkv__block_iq4_xs), AB = sizeof(tkv__block_q8_K), Q8K_QS = 4 };

/* One super-block of a group's 4 rows (2 KiB + 128 bytes). */
typedef struct px {
    int16_t w[8][4][32]; /* sub-block c, row k: its 32 elements' (ls - 32) x codebook value, in element order */
    float d[2][16];      /* row pair p: [fp16 d of row 2p x 8 | of row 2p + 1 x 8] */
} px;

/* Row k's block (at blk) into e. */
static inline void px_row(px *e, int k, const uint8_t *blk) {
    const tkv__block_iq4_xs *x = (const tkv__block_iq4_xs *)(const void *)blk;
    const __m256i book = _mm256_broadcastsi128_si256(LOAD128(tkv__iq4nl_values));
    alignas(16) int16_t sc[8];
    _mm_store_si128((__m128i *)(void *)sc, iq4xs_scales(x));
    UNROLL
    for (int c = 0; c < 8; c++) {
        const __m512i v = _mm512_cvtepi8_epi16(_mm256_shuffle_epi8(book, nibbles32(x->qs + 16 * c)));
        _mm512_store_si512(e->w[c][k], _mm512_mullo_epi16(v, _mm512_set1_epi16(sc[c])));
    }
}

/*
 * The tile: 4 rows x T tokens over blocks k0..k1-1 (block i's rows at
 * pan[i - k0]). st: the 2 T float accumulators, [pair][token], 16 floats each.
 */
INLINE void tile(const px *pan, size_t k0, size_t k1, const uint8_t *const *yt, float *st, int init, int T) {
    /* lanes 2j of two rows' accumulators (row a's to 0-7, row b's to 8-15), and lanes 2j + 1 */
    const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
    __m512 acc[2][TK];
    UNROLL
    for (int p = 0; p < 2; p++)
        UNROLL
        for (int t = 0; t < T; t++) acc[p][t] = init ? _mm512_setzero_ps() : _mm512_load_ps(st + 16 * (p * T + t));
    for (size_t i = k0; i < k1; i++) {
        const px *e = pan + (i - k0);
        const uint8_t *yb[TK];
        __m512i s[4][TK];
        UNROLL
        for (int t = 0; t < T; t++) {
            yb[t] = yt[t] + i * AB;
            UNROLL
            for (int k = 0; k < 4; k++) s[k][t] = _mm512_setzero_si512();
        }
        UNROLL
        for (int c = 0; c < 8; c++) {
            __m512i w[4];
            UNROLL
            for (int k = 0; k < 4; k++) w[k] = _mm512_load_si512(e->w[c][k]);
            UNROLL
            for (int t = 0; t < T; t++) {
                const __m512i yv = _mm512_cvtepi8_epi16(LOAD256(yb[t] + Q8K_QS + 32 * c));
                UNROLL
                for (int k = 0; k < 4; k++) s[k][t] = _mm512_dpwssd_epi32(s[k][t], w[k], yv);
            }
        }
        UNROLL
        for (int t = 0; t < T; t++) {
            float yd;
            memcpy(&yd, yb[t], sizeof yd);
            const __m512 dt = _mm512_set1_ps(yd);
            UNROLL
            for (int p = 0; p < 2; p++) {
                const __m512i lanes = _mm512_add_epi32(_mm512_permutex2var_epi32(s[2 * p][t], even, s[2 * p + 1][t]),
                                                       _mm512_permutex2var_epi32(s[2 * p][t], odd, s[2 * p + 1][t]));
                acc[p][t] = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_load_ps(e->d[p]), dt), _mm512_cvtepi32_ps(lanes), acc[p][t]);
            }
        }
    }
    UNROLL
    for (int p = 0; p < 2; p++)
        UNROLL
        for (int t = 0; t < T; t++) _mm512_store_ps(st + 16 * (p * T + t), acc[p][t]);
}

enum { STT = 2 * TK * 16 /* stash floats per tile */ };

/* The product's buffers (on the stack). */
typedef struct xs_bufs {
    alignas(64) px pan[KC];                         /* 17 KiB */
    alignas(64) float st[(TC_MAXK / TK + 2) * STT]; /* 9 KiB */
} xs_bufs;

/* The product's state: its buffers. */
typedef struct xs_state {
    xs_bufs *b;
} xs_state;

INLINE void xs_panel(void *f, const uint8_t *const *rows, size_t i, size_t k0) {
    xs_state *s = f;
    const size_t o = i * XB;
    px *e = &s->b->pan[i - k0];
    UNROLL
    for (int k = 0; k < 4; k++) px_row(e, k, rows[k] + o);
    UNROLL
    for (int p = 0; p < 2; p++) _mm512_store_ps(e->d[p], halves_f16(rows[2 * p] + o, rows[2 * p + 1] + o));
}

INLINE void xs_tile(void *f, const tile_chunk *c, const tile_step *s) {
    xs_state *q = f;
    (void)c;
    switch (s->T) {
    case 4: tile(q->b->pan, s->k0, s->k1, s->yt, s->st, s->k0 == 0, 4); break;
    case 2: tile(q->b->pan, s->k0, s->k1, s->yt, s->st, s->k0 == 0, 2); break;
    default: tile(q->b->pan, s->k0, s->k1, s->yt, s->st, s->k0 == 0, 1); break;
    }
}

INLINE void xs_finish(void *f, const float *st, int T, float *y, size_t ldy, size_t nrow) {
    (void)f;
    store_pairs4(st, T, y, ldy, nrow);
}

/* The tiled product over the job's rows. */
INLINE void gemm_xs(const tile_job *job) {
    xs_bufs bufs;
    _Static_assert(sizeof bufs + sizeof(tile_chunk) <= 80 * 1024,
                   "the buffers of a product live on the stack (kernels.h: under 80 KiB)");
    _Static_assert(offsetof(tkv__block_iq4_xs, d) == 0, "halves_f16 reads a block's d at its start");
    xs_state s = {.b = &bufs};
    const size_t nb = job->n / TKV__QK_K;
    const int direct = nb <= KC;
    const tile_shape sh = {.nb = nb, .bs = XB, .kc = KC, .tc = direct ? TILE_TC_DIRECT : TC_MAXK, .rows = 4, .big = TK,
                           .st = bufs.st, .stt = STT, .by_token = 0};
    const tile_ops ops = {.table = NULL, .panel = xs_panel, .tile = xs_tile, .finish = xs_finish};
    tile_product(job, &sh, &ops, &s);
}

void tkv__gemm_iq4_xs_lanes_avx512(size_t n, const void *w, size_t wrs, size_t nr, const void *xq, size_t xrs, size_t n_tok,
                             float *y, size_t ldy) {
    gemm_xs(&(tile_job){n, w, wrs, nr, xq, xrs, n_tok, y, ldy});
}

#endif
