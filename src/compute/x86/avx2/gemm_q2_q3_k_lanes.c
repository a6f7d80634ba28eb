/*
 * compute/x86/avx2/gemm_q2_q3_k_lanes.c — tiled products of Q2_K and Q3_K weights in the
 * reference's lane-wise order (kernels.h's gemm_ref; the default, block-reduced order is
 * gemm_q2_q3_k.c's), AVX2 + FMA + F16C, bit for bit compute/x86/avx2/kernels.c's
 * tkv__dot_q2_K_lanes_avx2 and tkv__dot_q3_K_lanes_avx2: the same 8 integer lanes per
 * (row, token) and block, the same fmas in the same order.
 *
 * Tile: 2 rows x 4 tokens, a ymm accumulator per (row, token), as
 * compute/x86/avx2/gemm_q8_0_q4_q5_q6_k.c's. The panel holds each element's quant times its scale
 * (compute/x86/q2_q3_k.h), so per 32 elements the vec_dot's scale vpmaddwd is gone:
 *   - Q2_K: q sc in 0..45, so vpmaddubsw's pairs stay under 2^15 even with
 *     two quarter-chunks added as int16: per 64 elements two vpmaddubsw,
 *     an add, one vpmaddwd by 1 and one add;
 *   - Q3_K: q sc in -124..128 does not fit a signed byte, -q sc does; its
 *     magnitude (up to 128) is vpmaddubsw's unsigned operand, its sign goes
 *     onto the activations (vpsignb), and the vpmaddwd by -1 restores the
 *     sign: four instructions per 32 elements.
 * Then, per block, as the vec_dot: Q2_K first the fma of -d_a dmin with the
 * lanes of mins . bsums, then for both the fma of d_a d with the lanes.
 */
#include "compute/gemm.h"
#include "util.h"
#include "compute/x86/tile_driver.h"
#include "compute/x86/q2_q3_k.h"
#include "compute/quant/quant.h"

#include <assert.h>
#include <stdalign.h>
#include <stdint.h>
#include <string.h>

#if defined(__x86_64__) && defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include <immintrin.h>

#define TK 4          /* tokens per tile */
#define KC 8          /* blocks per chunk of K */
#define TC_MAXK 64    /* tokens per chunk when K is cut (the stash holds them all); TILE_TC_DIRECT when it is not */

enum { Q2B = sizeof(tkv__block_q2_K), Q3B = sizeof(tkv__block_q3_K), AB = sizeof(tkv__block_q8_K) };

/* One block of one row (608 bytes). */
typedef struct pq {
    uint8_t w[8][32]; /* per quarter-chunk: Q2_K q sc; Q3_K -q sc (signed) */
    uint8_t a[8][32]; /* Q3_K: |q sc| */
    float d[8];       /* the row's d, 8 times */
    float dmin[8];    /* Q2_K: its dmin, 8 times */
    int16_t mn[16];   /* Q2_K: the 16 mins */
} pq;

static void pq_fill(pq *e, const uint8_t *blk, int three) {
    __m256i q[8];
    if (three) { /* (4 - v) sc = -q sc, v = q + 4 */
        tkv__q23k_scaled(blk, 1, _mm256_setr_epi16(4, 3, 2, 1, 0, -1, -2, -3, 4, 3, 2, 1, 0, -1, -2, -3), 0, q);
        for (int g = 0; g < 8; g++) {
            _mm256_store_si256((__m256i *)(void *)e->w[g], q[g]);
            _mm256_store_si256((__m256i *)(void *)e->a[g], _mm256_abs_epi8(q[g])); /* |-128| = 128 unsigned */
        }
        _mm256_store_ps(e->d, _mm256_set1_ps(f16(((const tkv__block_q3_K *)(const void *)blk)->d)));
    } else {
        tkv__q23k_scaled(blk, 0, _mm256_setr_epi16(0, 1, 2, 3, 0, 0, 0, 0, 0, 1, 2, 3, 0, 0, 0, 0), 0, q);
        for (int g = 0; g < 8; g++) _mm256_store_si256((__m256i *)(void *)e->w[g], q[g]);
        const tkv__block_q2_K *x = (const tkv__block_q2_K *)(const void *)blk;
        _mm256_store_ps(e->d, _mm256_set1_ps(f16(x->d)));
        _mm256_store_ps(e->dmin, _mm256_set1_ps(f16(x->dmin)));
        _mm256_store_si256((__m256i *)(void *)e->mn, tkv__q2k_mins(blk));
    }
}

/* A block's 8 integer lanes for one row and token (yq: the token's 256 quants). */
INLINE __m256i lanes(const pq *e, const uint8_t *yq, int three) {
    __m256i s = _mm256_setzero_si256();
    if (three) {
        const __m256i neg = _mm256_set1_epi16(-1);
        UNROLL
        for (int g = 0; g < 8; g++) {
            const __m256i ys = _mm256_sign_epi8(LOAD256(yq + 32 * g), LOADA256(e->w[g]));
            s = _mm256_add_epi32(s, _mm256_madd_epi16(_mm256_maddubs_epi16(LOADA256(e->a[g]), ys), neg));
        }
    } else {
        const __m256i one = _mm256_set1_epi16(1);
        UNROLL
        for (int g = 0; g < 8; g += 2) {
            const __m256i p = _mm256_add_epi16(_mm256_maddubs_epi16(LOADA256(e->w[g]), LOAD256(yq + 32 * g)),
                                               _mm256_maddubs_epi16(LOADA256(e->w[g + 1]), LOAD256(yq + 32 * g + 32)));
            s = _mm256_add_epi32(s, _mm256_madd_epi16(p, one));
        }
    }
    return s;
}

/*
 * The tile: 2 rows x T tokens over blocks k0..k1-1 (row k of block i at
 * pan[2 (i - k0) + k]). st: the 2 T accumulators [row][token], 8 floats each.
 */
INLINE void tile(const pq *pan, size_t k0, size_t k1, const uint8_t *const *yt, float *st, int init, int T, int three) {
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
                if (!three) {
                    const __m256i m = _mm256_madd_epi16(LOADA256(e[k].mn), LOAD256(yb + Q23K_Q8K_BSUMS));
                    acc[k][t] = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_load_ps(e[k].dmin), _mm256_set1_ps(-yd)),
                                                _mm256_cvtepi32_ps(m), acc[k][t]);
                }
                const __m256i s = lanes(&e[k], yb + Q23K_Q8K_QS, three);
                acc[k][t] = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_load_ps(e[k].d), dt), _mm256_cvtepi32_ps(s), acc[k][t]);
            }
        }
    }
    UNROLL
    for (int k = 0; k < 2; k++)
        UNROLL
        for (int t = 0; t < T; t++) _mm256_store_ps(st + 8 * (k * T + t), acc[k][t]);
}

INLINE void tile_any(const pq *pan, size_t k0, size_t k1, const uint8_t *const *yt, float *st, int init, int T,
                     int three) {
    if (three) {
        switch (T) {
        case 4: tile(pan, k0, k1, yt, st, init, 4, 1); break;
        case 2: tile(pan, k0, k1, yt, st, init, 2, 1); break;
        default: tile(pan, k0, k1, yt, st, init, 1, 1); break;
        }
    } else {
        switch (T) {
        case 4: tile(pan, k0, k1, yt, st, init, 4, 0); break;
        case 2: tile(pan, k0, k1, yt, st, init, 2, 0); break;
        default: tile(pan, k0, k1, yt, st, init, 1, 0); break;
        }
    }
}

/* The horizontal sums, out: 2 rows (nrow valid) x T tokens. */
static void finish(const float *st, int T, float *y, size_t ldy, size_t nrow) {
    __m256 a[8];
    for (int q = 0; q < 8; q++) a[q] = q / 2 < T ? _mm256_load_ps(st + 8 * ((q % 2) * T + q / 2)) : _mm256_setzero_ps();
    store_tile(y, ldy, reduce8(a), (int)min_sz(2, nrow), T);
}

enum { STT = 2 * TK * 8 /* stash floats per tile */ };

/* A Q2_K / Q3_K product's buffers (on the stack). */
typedef struct q23_bufs {
    alignas(64) pq pan[2 * KC];                     /* 9.5 KiB */
    alignas(64) float st[(TC_MAXK / TK + 2) * STT]; /* 4.5 KiB */
} q23_bufs;

/* The product's state: its buffers and constants (a local whose fields the compiler keeps in registers). */
typedef struct q23_state {
    q23_bufs *b;
    int three;
} q23_state;

INLINE void q23_panel(void *f, const uint8_t *const *rows, size_t i, size_t k0) {
    q23_state *s = f;
    for (int k = 0; k < 2; k++) pq_fill(&s->b->pan[2 * (i - k0) + (size_t)k], rows[k] + i * (s->three ? Q3B : Q2B), s->three);
}

INLINE void q23_tile(void *f, const tile_chunk *c, const tile_step *s) {
    q23_state *q = f;
    (void)c;
    tile_any(q->b->pan, s->k0, s->k1, s->yt, s->st, s->k0 == 0, s->T, q->three);
}

INLINE void q23_finish(void *f, const float *st, int T, float *y, size_t ldy, size_t nrow) {
    (void)f;
    finish(st, T, y, ldy, nrow);
}

INLINE void gemm23(const tile_job *job, int three) {
    q23_bufs bufs;
    _Static_assert(sizeof bufs + sizeof(tile_chunk) <= 80 * 1024,
                   "the buffers of a product live on the stack (kernels.h: under 80 KiB)");
    q23_state s = {.b = &bufs, .three = three};
    const size_t nb = job->n / TKV__QK_K;
    const int direct = nb <= KC;
    const size_t tc = direct ? TILE_TC_DIRECT : TC_MAXK;
    assert(direct || (tc / TK + 2) * STT <= sizeof bufs.st / sizeof bufs.st[0]);
    const tile_shape sh = {.nb = nb, .bs = three ? Q3B : Q2B, .kc = KC, .tc = tc, .rows = 2, .big = TK,
                           .st = bufs.st, .stt = STT, .by_token = 0};
    const tile_ops ops = {.table = NULL, .panel = q23_panel, .tile = q23_tile, .finish = q23_finish};
    tile_product(job, &sh, &ops, &s);
}

/* Q2_K in the reference's lane-wise order (kernels.h's gemm_ref; the default order is gemm_q2_q3_k.c's) */
void tkv__gemm_q2_K_lanes_avx2(size_t n, const void *w, size_t wrs, size_t nr, const void *xq, size_t xrs, size_t n_tok,
                               float *y, size_t ldy) {
    gemm23(&(tile_job){n, w, wrs, nr, xq, xrs, n_tok, y, ldy}, 0);
}

/* Q3_K in the reference's lane-wise order (kernels.h's gemm_ref; the default order is gemm_q2_q3_k.c's) */
void tkv__gemm_q3_K_lanes_avx2(size_t n, const void *w, size_t wrs, size_t nr, const void *xq, size_t xrs, size_t n_tok,
                               float *y, size_t ldy) {
    gemm23(&(tile_job){n, w, wrs, nr, xq, xrs, n_tok, y, ldy}, 1);
}

#endif
