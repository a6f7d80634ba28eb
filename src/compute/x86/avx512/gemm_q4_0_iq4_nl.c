/*
 * compute/x86/avx512/gemm_q4_0_iq4_nl.c — Q4_0, IQ4_NL and Q8_0 products at the avx512 level
 * (AVX-512 F/BW/VL + VNNI): the gemv (1 to 8 tokens), the tiled gemm
 * (prefill) and the product over packed rows, in the block-reduced order of
 * compute/quant/quant.h, so all equal the level's vec_dot (the avx2
 * dot_b4_reduced, which this level keeps) bit for bit.
 *
 * The two 4-bit types share a block layout (fp16 d, 16 bytes of nibbles)
 * and all of this code but two things (b4_kind): the unsigned byte a nibble
 * becomes (Q4_0: the nibble itself, 0..15; IQ4_NL: its codebook value + 128,
 * 1..241, a byte shuffle) and so each token's correction (-8 or -128 times
 * the sum of its block's quants); vpdpbusd multiplies unsigned by signed
 * bytes into int32 with no saturation, so either sum is exact. Q8_0 (fp16
 * d, 32 signed bytes) takes IQ4_NL's + 128 (one xor) and correction, its
 * two halves of 16 bytes transposed as the nibbles are; over packed rows a
 * block of 16 rows is 8 aligned loads, 8 xors and a vpdpbusd per step and
 * token.
 *
 * Layout: lane k of a zmm is row r + k (16 rows), so a block reduces to one
 * int32 per lane with no horizontal sum. Each block of 16 rows is
 * transposed once: "step" j (0..7) is a zmm whose lane k holds row k's 4
 * weight bytes paired with activation bytes 4j..4j+3 (low nibbles for
 * j < 4, high ones after). Per step and token: one vpdpbusd with the
 * token's 4 bytes broadcast from memory; the integer accumulator starts
 * from the token's correction; then per block and
 * token one conversion, the scale product and one fma for all 16 rows:
 * 11 instructions per 16 (row, token) pairs and 32 weights, against 32 in
 * the lane-wise order this replaced (which had to convert, scale and
 * accumulate 8 float lanes per block and pair).
 *
 * The gemm keeps a panel of KC transposed blocks in L1 and runs tiles of up
 * to 8 tokens over it (16 accumulators: 8 float, 8 integer); the gemv
 * transposes each block in registers and runs all its tokens over it. Over
 * packed rows (prefill), two groups' panels lie side by side and a tile of
 * up to 4 tokens runs over both (step32: each broadcast of a token's bytes
 * feeds two vpdpbusd), 9-14% faster prefill on Zen 5 than one panel.
 */
#include "compute/gemm.h"
#include "util.h"
#include "compute/quant/quant.h"
#include "compute/quant/repack.h"

#include <assert.h>
#include <stdalign.h>
#include <stdint.h>
#include <string.h>

#if defined(__x86_64__) && defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && \
    defined(__AVX512VNNI__) && defined(__AVX2__) && defined(__F16C__)
#include <immintrin.h>

enum {
    ROWS = 16,   /* rows per panel (a zmm's lanes) */
    TT = 8,      /* tokens per tile / per gemv pass */
    KC = 32,     /* blocks per chunk of K: the panel (18 KiB) stays in L1 */
    KC2 = 24,    /* the same for a pair of panels (27 KiB) */
    T2 = 4,      /* tokens per tile over a pair of panels */
    TC2 = 128,   /* tokens per chunk of tokens with a pair of panels and K cut (the stash holds 32 rows of them) */
    TCMAX = 256, /* tokens per chunk of tokens */
    TABN = 4096, /* (token, block) entries of the token table: 32 KiB */
    QB = sizeof(tkv__block_q4_0),
    AB = sizeof(tkv__block_q8_0),
};

/* One block of 16 rows, transposed (576 bytes). */
typedef struct pan16 {
    __m512i q[8]; /* step j: lane k = row k's 4 weights for activation bytes 4j..4j+3 */
    __m512 d;     /* lane k: row k's scale */
} pan16;

/* What a weight nibble stands for. */
typedef enum b4_kind {
    B4_Q4_0,   /* q - 8 */
    B4_IQ4_NL, /* tkv__iq4nl_values[q] */
    B4_Q8_0,   /* the byte itself (a block of 32 bytes, not nibbles) */
} b4_kind;

/* Bytes of a block of one row. */
static inline size_t b4_block(b4_kind kind) {
    return kind == B4_Q8_0 ? AB : QB;
}

/* The unsigned weight byte of each nibble is the value plus this (the
   tokens' corrections take it back off). */
static inline int b4_bias(b4_kind kind) {
    return kind == B4_Q4_0 ? 8 : 128;
}

/* IQ4_NL's biased codebook in every 128-bit lane (a vpshufb table). */
static inline __m512i iq4nl_book(void) {
    return _mm512_xor_si512(_mm512_broadcast_i32x4(LOAD128(tkv__iq4nl_values)), _mm512_set1_epi8((char)0x80));
}

/* Nibbles (0..15 per byte) to the unsigned weight bytes of `kind` (book: iq4nl_book()). */
INLINE __m512i b4_bytes(__m512i q, b4_kind kind, __m512i book) {
    return kind == B4_Q4_0 ? q : _mm512_shuffle_epi8(book, q);
}

/* Per token and block: -bias * sum of the 32 activation quants, and the scale. */
typedef struct tokb {
    int32_t corr;
    float d;
} tokb;

static void tok_fill(tokb *tab, const uint8_t *row, size_t nb, b4_kind kind) {
    const __m256i bias = _mm256_set1_epi8((char)b4_bias(kind)), z = _mm256_setzero_si256();
    for (size_t i = 0; i < nb; i++) {
        const uint8_t *b = row + i * AB;
        const __m256i s = _mm256_dpbusd_epi32(z, bias, LOAD256(b + 2));
        __m128i h = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
        h = _mm_add_epi32(h, _mm_shuffle_epi32(h, 0x4e));
        h = _mm_add_epi32(h, _mm_shuffle_epi32(h, 0xb1));
        uint16_t d;
        memcpy(&d, b, 2);
        tab[i].corr = -_mm_cvtsi128_si32(h);
        tab[i].d = _cvtsh_ss(d);
    }
}

/* Bytes [at, at + 16) of the rows base + ixs[k] (k < 16), transposed: u[j] lane k = row k's dword j of them. */
INLINE void transpose16(const uint8_t *base, const uint32_t *ixs, size_t at, __m512i u[4]) {
    __m512i z[4]; /* z[g]: rows g, 4 + g, 8 + g, 12 + g, one per 128-bit lane */
    UNROLL
    for (int g = 0; g < 4; g++) {
        __m512i v = _mm512_castsi128_si512(LOAD128(base + ixs[g] + at));
        v = _mm512_inserti32x4(v, LOAD128(base + ixs[4 + g] + at), 1);
        v = _mm512_inserti32x4(v, LOAD128(base + ixs[8 + g] + at), 2);
        z[g] = _mm512_inserti32x4(v, LOAD128(base + ixs[12 + g] + at), 3);
    }
    /* 4 x 4 transposes of dwords within each 128-bit lane: u[j] lane 4l + g = row 4l + g's dword j */
    const __m512i t0 = _mm512_unpacklo_epi32(z[0], z[1]), t1 = _mm512_unpackhi_epi32(z[0], z[1]);
    const __m512i t2 = _mm512_unpacklo_epi32(z[2], z[3]), t3 = _mm512_unpackhi_epi32(z[2], z[3]);
    u[0] = _mm512_unpacklo_epi64(t0, t2), u[1] = _mm512_unpackhi_epi64(t0, t2);
    u[2] = _mm512_unpacklo_epi64(t1, t3), u[3] = _mm512_unpackhi_epi64(t1, t3);
}

/*
 * Block at byte offset off of the rows base + ix[k] (k < 16), transposed:
 * q[0..7] (the weight bytes of `kind`) and the scales (returned).
 */
INLINE __m512 unpack16(const uint8_t *base, __m512i ix, const uint32_t *ixs, size_t off, __m512i q[8], b4_kind kind,
                       __m512i book) {
    __m512i u[4];
    if (kind == B4_Q8_0) { /* bytes 16h + 4j .. of a row: step 4h + j, + 128 */
        UNROLL
        for (int h = 0; h < 2; h++) {
            transpose16(base, ixs, off + 2 + 16 * (size_t)h, u);
            UNROLL
            for (int j = 0; j < 4; j++) q[4 * h + j] = _mm512_xor_si512(u[j], _mm512_set1_epi8((char)0x80));
        }
    } else {
        transpose16(base, ixs, off + 2, u);
        const __m512i m = _mm512_set1_epi8(0x0f);
        UNROLL
        for (int j = 0; j < 4; j++) {
            q[j] = b4_bytes(_mm512_and_si512(u[j], m), kind, book);
            q[4 + j] = b4_bytes(_mm512_and_si512(_mm512_srli_epi32(u[j], 4), m), kind, book);
        }
    }
    /* each lane's 4 bytes at the block's start: the fp16 scale, then 2 quant bytes */
    const __m512i g = _mm512_i32gather_epi32(ix, (const void *)(base + off), 1);
    return _mm512_cvtph_ps(_mm512_cvtepi32_epi16(g));
}

/*
 * One block of 16 rows for T tokens: acc[t] = fma(f32(corr + q . y), d_w *
 * d_t, acc[t]). yb[t]: token t's block i (its quants at + 2); tb[t]: its
 * table entry.
 */
INLINE void step16(__m512 *acc, const __m512i *q, __m512 dw, const uint8_t *const *yb, const tokb *const *tb, int T) {
    /* C independent integer chains per token (steps j % C), so a few tokens
       still keep the vpdpbusd unit busy instead of waiting on its latency;
       integer sums are exact, so the split changes no bit */
    enum { CMAX = 4 };
    const int C = T >= 4 ? 1 : T >= 2 ? 2 : 4;
    __m512i s[TT][CMAX];
    UNROLL
    for (int t = 0; t < T; t++) {
        s[t][0] = _mm512_set1_epi32(tb[t]->corr);
        for (int c = 1; c < C; c++) s[t][c] = _mm512_setzero_si512();
    }
    UNROLL
    for (int j = 0; j < 8; j++) {
        const __m512i qj = _mm512_load_si512(&q[j]);
        UNROLL
        for (int t = 0; t < T; t++) {
            int32_t v;
            memcpy(&v, yb[t] + 2 + 4 * j, 4);
            s[t][j % C] = _mm512_dpbusd_epi32(s[t][j % C], qj, _mm512_set1_epi32(v));
        }
    }
    UNROLL
    for (int t = 0; t < T; t++) {
        for (int c = 1; c < C; c++) s[t][0] = _mm512_add_epi32(s[t][0], s[t][c]);
        acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s[t][0]), _mm512_mul_ps(dw, _mm512_set1_ps(tb[t]->d)), acc[t]);
    }
}

/* Rows r .. r + 15 (the last repeated past nr): their offsets from w, as a vector and an array. */
static inline __m512i row_offsets(size_t r, size_t nr, size_t wrs, uint32_t *ixs) {
    for (size_t k = 0; k < ROWS; k++) ixs[k] = (uint32_t)((min_sz(r + k, nr - 1) - r) * wrs);
    return _mm512_loadu_si512((const void *)ixs);
}

/* ==== the gemm ====================================================================== */

/* The tile: 16 rows x T tokens over panel blocks [k0, k1); see tile_any. */
INLINE void tile_run(const pan16 *pan, size_t k0, size_t k1, size_t nb, const uint8_t *const *yt, const tokb *const *tb,
                     float *st, float *y, size_t ldy, __mmask16 rmask, int T) {
    __m512 acc[TT];
    UNROLL
    for (int t = 0; t < T; t++) acc[t] = k0 == 0 ? _mm512_setzero_ps() : _mm512_load_ps(st + 16 * t);
    for (size_t i = k0; i < k1; i++) {
        const uint8_t *yb[TT];
        const tokb *te[TT];
        UNROLL
        for (int t = 0; t < T; t++) yb[t] = yt[t] + i * AB, te[t] = tb[t] + i;
        step16(acc, pan[i - k0].q, pan[i - k0].d, yb, te, T);
    }
    UNROLL
    for (int t = 0; t < T; t++) {
        if (k1 < nb) _mm512_store_ps(st + 16 * t, acc[t]);
        else _mm512_mask_storeu_ps(y + (size_t)t * ldy, rmask, acc[t]);
    }
}

/*
 * Tokens yt[0..T-1] (tables tb) over the panel's blocks [k0, k1):
 * accumulators from the stash st (zero when k0 = 0), back to it, or at the
 * last block to y[t * ldy + k] for the rows in rmask.
 */
static void tile_any(const pan16 *pan, size_t k0, size_t k1, size_t nb, const uint8_t *const *yt, const tokb *const *tb,
                     float *st, float *y, size_t ldy, __mmask16 rmask, int T) {
    switch (T) {
    case 8: tile_run(pan, k0, k1, nb, yt, tb, st, y, ldy, rmask, 8); break;
    case 4: tile_run(pan, k0, k1, nb, yt, tb, st, y, ldy, rmask, 4); break;
    case 2: tile_run(pan, k0, k1, nb, yt, tb, st, y, ldy, rmask, 2); break;
    default: tile_run(pan, k0, k1, nb, yt, tb, st, y, ldy, rmask, 1); break;
    }
}

/*
 * Tokens t0 .. t0 + tn - 1 (rows of xb, xrs apart; their tables tab, nb
 * entries each) in tiles of 8, 4, 2, 1 over the panel's blocks [k0, k1),
 * accumulators through the stash st; outputs at y + t * ldy (rows rmask).
 */
static void panel_tiles(const pan16 *pan, size_t k0, size_t k1, size_t nb, const uint8_t *xb, size_t xrs, size_t t0,
                        size_t tn, const tokb *tab, float *st, float *y, size_t ldy, __mmask16 rmask) {
    for (size_t u = 0; u < tn;) {
        const size_t rem = tn - u;
        const int T = rem >= 8 ? 8 : rem >= 4 ? 4 : rem >= 2 ? 2 : 1;
        const uint8_t *yt[TT];
        const tokb *tb[TT];
        for (int t = 0; t < T; t++) {
            yt[t] = xb + (t0 + u + (size_t)t) * xrs;
            tb[t] = tab + (u + (size_t)t) * nb;
        }
        tile_any(pan, k0, k1, nb, yt, tb, st + 16 * u, y + (t0 + u) * ldy, ldy, rmask, T);
        u += (size_t)T;
    }
}

/*
 * A pair of panels (rows r .. r + 31): each token's 4 activation bytes,
 * broadcast once per step, feed both panels' vpdpbusd, so a step loads 2
 * weight vectors and T broadcasts for 2T multiply-adds instead of 1 and T
 * for T (in cache, the kernel alone: 16 rows x 8 tokens 260-318 GMAC/s a
 * thread, 32 x 4 379, 32 x 6 308: its registers run out). Each row's
 * arithmetic is step16's, in the same order: the same bits.
 */
INLINE void step32(__m512 *acc, const pan16 *pa, const pan16 *pb, const uint8_t *const *yb, const tokb *const *tb,
                   int T) {
    __m512i s[2][T2];
    UNROLL
    for (int t = 0; t < T; t++) s[0][t] = s[1][t] = _mm512_set1_epi32(tb[t]->corr);
    UNROLL
    for (int j = 0; j < 8; j++) {
        const __m512i qa = _mm512_load_si512(&pa->q[j]), qb = _mm512_load_si512(&pb->q[j]);
        UNROLL
        for (int t = 0; t < T; t++) {
            int32_t v;
            memcpy(&v, yb[t] + 2 + 4 * j, 4);
            const __m512i y = _mm512_set1_epi32(v);
            s[0][t] = _mm512_dpbusd_epi32(s[0][t], qa, y);
            s[1][t] = _mm512_dpbusd_epi32(s[1][t], qb, y);
        }
    }
    UNROLL
    for (int t = 0; t < T; t++) {
        const __m512 d = _mm512_set1_ps(tb[t]->d);
        acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s[0][t]), _mm512_mul_ps(pa->d, d), acc[t]);
        acc[T2 + t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s[1][t]), _mm512_mul_ps(pb->d, d), acc[T2 + t]);
    }
}

/* The tile over a pair of panels: 32 rows x T tokens over blocks [k0, k1); the stash holds 32 floats a token
   (the first panel's rows, then the second's); the second panel's rows go to y + 16, those in rmask_b. */
INLINE void tile2_run(const pan16 *pa, const pan16 *pb, size_t k0, size_t k1, size_t nb, const uint8_t *const *yt,
                      const tokb *const *tb, float *st, float *y, size_t ldy, __mmask16 rmask_b, int T) {
    __m512 acc[2 * T2];
    UNROLL
    for (int t = 0; t < T; t++) {
        acc[t] = k0 == 0 ? _mm512_setzero_ps() : _mm512_load_ps(st + 32 * t);
        acc[T2 + t] = k0 == 0 ? _mm512_setzero_ps() : _mm512_load_ps(st + 32 * t + 16);
    }
    for (size_t i = k0; i < k1; i++) {
        const uint8_t *yb[T2];
        const tokb *te[T2];
        UNROLL
        for (int t = 0; t < T; t++) yb[t] = yt[t] + i * AB, te[t] = tb[t] + i;
        step32(acc, &pa[i - k0], &pb[i - k0], yb, te, T);
    }
    UNROLL
    for (int t = 0; t < T; t++) {
        if (k1 < nb) {
            _mm512_store_ps(st + 32 * t, acc[t]);
            _mm512_store_ps(st + 32 * t + 16, acc[T2 + t]);
        } else {
            _mm512_storeu_ps(y + (size_t)t * ldy, acc[t]);
            _mm512_mask_storeu_ps(y + (size_t)t * ldy + ROWS, rmask_b, acc[T2 + t]);
        }
    }
}

/* Tokens t0 .. t0 + tn - 1 in tiles of 4, 2, 1 over a pair of panels' blocks [k0, k1) (panel_tiles' pair). */
static void panel_tiles2(const pan16 *pa, const pan16 *pb, size_t k0, size_t k1, size_t nb, const uint8_t *xb,
                         size_t xrs, size_t t0, size_t tn, const tokb *tab, float *st, float *y, size_t ldy,
                         __mmask16 rmask_b) {
    for (size_t u = 0; u < tn;) {
        const size_t rem = tn - u;
        const int T = rem >= 4 ? 4 : rem >= 2 ? 2 : 1;
        const uint8_t *yt[T2];
        const tokb *tb[T2];
        for (int t = 0; t < T; t++) {
            yt[t] = xb + (t0 + u + (size_t)t) * xrs;
            tb[t] = tab + (u + (size_t)t) * nb;
        }
        float *yu = y + (t0 + u) * ldy, *su = st + 32 * u;
        switch (T) {
        case 4: tile2_run(pa, pb, k0, k1, nb, yt, tb, su, yu, ldy, rmask_b, 4); break;
        case 2: tile2_run(pa, pb, k0, k1, nb, yt, tb, su, yu, ldy, rmask_b, 2); break;
        default: tile2_run(pa, pb, k0, k1, nb, yt, tb, su, yu, ldy, rmask_b, 1); break;
        }
        u += (size_t)T;
    }
}

/* Ask for the weights the next panel will unpack while this one's tiles run. */
static inline void prefetch_ixs(const uint8_t *base, const uint32_t *ixs, size_t off, size_t len) {
    for (int k = 0; k < ROWS; k++)
        for (size_t o = 0; o < len; o += 64) _mm_prefetch((const char *)base + ixs[k] + off + o, _MM_HINT_T0);
}

INLINE void gemm_b4(size_t n, const void *w, size_t wrs, size_t nr, const void *xq, size_t xrs, size_t n_tok, float *y,
                    size_t ldy, b4_kind kind) {
    const uint8_t *wb = w, *xb = xq;
    const __m512i book = iq4nl_book();
    const size_t nb = n / TKV__QK, bs = b4_block(kind);
    struct {
        alignas(64) pan16 pan[KC];        /* 18 KiB */
        alignas(64) float st[TCMAX * 16]; /* 16 KiB */
        tokb tab[TABN];                   /* 32 KiB */
    } b;
    _Static_assert(sizeof b <= 80 * 1024, "the buffers of a product live on the stack (kernels.h: under 80 KiB)");
    size_t tc = TABN / nb;
    tc = tc < 1 ? 1 : tc > TCMAX ? TCMAX : tc;
    for (size_t t0 = 0; t0 < n_tok; t0 += tc) {
        const size_t tn = min_sz(tc, n_tok - t0);
        assert(tn * nb <= TABN);
        for (size_t t = 0; t < tn; t++) tok_fill(b.tab + t * nb, xb + (t0 + t) * xrs, nb, kind);
        for (size_t r = 0; r < nr; r += ROWS) {
            const uint8_t *base = wb + r * wrs;
            alignas(64) uint32_t ixs[ROWS], nxs[ROWS];
            const __m512i ix = row_offsets(r, nr, wrs, ixs);
            const __mmask16 rmask = (__mmask16)((1u << min_sz(ROWS, nr - r)) - 1u);
            for (size_t k0 = 0; k0 < nb; k0 += KC) {
                const size_t k1 = min_sz(k0 + KC, nb);
                for (size_t i = k0; i < k1; i++) {
                    pan16 *e = &b.pan[i - k0];
                    __m512i q[8];
                    const __m512 d = unpack16(base, ix, ixs, i * bs, q, kind, book);
                    for (int j = 0; j < 8; j++) _mm512_store_si512(&e->q[j], q[j]);
                    _mm512_store_ps(&e->d, d);
                }
                if (k1 < nb) {
                    prefetch_ixs(base, ixs, k1 * bs, min_sz(KC, nb - k1) * bs);
                } else if (r + ROWS < nr) {
                    row_offsets(r + ROWS, nr, wrs, nxs);
                    prefetch_ixs(base + ROWS * wrs, nxs, 0, min_sz(KC, nb) * bs);
                }
                panel_tiles(b.pan, k0, k1, nb, xb, xrs, t0, tn, b.tab, b.st, y + r, ldy, rmask);
            }
        }
    }
}

void tkv__gemm_q4_0_avx512(size_t n, const void *w, size_t wrs, size_t nr, const void *xq, size_t xrs, size_t n_tok,
                           float *y, size_t ldy) {
    gemm_b4(n, w, wrs, nr, xq, xrs, n_tok, y, ldy, B4_Q4_0);
}

void tkv__gemm_iq4_nl_avx512(size_t n, const void *w, size_t wrs, size_t nr, const void *xq, size_t xrs, size_t n_tok,
                             float *y, size_t ldy) {
    gemm_b4(n, w, wrs, nr, xq, xrs, n_tok, y, ldy, B4_IQ4_NL);
}

void tkv__gemm_q8_0_avx512(size_t n, const void *w, size_t wrs, size_t nr, const void *xq, size_t xrs, size_t n_tok,
                           float *y, size_t ldy) {
    gemm_b4(n, w, wrs, nr, xq, xrs, n_tok, y, ldy, B4_Q8_0);
}

/* ==== the gemv ====================================================================== */

/* Rows [0, nr) x T tokens, each block transposed in registers once for all T. */
INLINE void gemv_pass(size_t nb, const uint8_t *wb, size_t wrs, size_t nr, const uint8_t *const *yt,
                      const tokb *const *tb, float *y, size_t ldy, int T, b4_kind kind) {
    const __m512i book = iq4nl_book();
    const size_t bs = b4_block(kind);
    for (size_t r = 0; r < nr; r += ROWS) {
        const uint8_t *base = wb + r * wrs;
        alignas(64) uint32_t ixs[ROWS], nxs[ROWS];
        const __m512i ix = row_offsets(r, nr, wrs, ixs);
        const __mmask16 rmask = (__mmask16)((1u << min_sz(ROWS, nr - r)) - 1u);
        const int more = r + 2 * ROWS < nr;
        if (more) row_offsets(r + 2 * ROWS, nr, wrs, nxs);
        __m512 acc[TT];
        UNROLL
        for (int t = 0; t < T; t++) acc[t] = _mm512_setzero_ps();
        for (size_t i = 0; i < nb; i++) {
            /* 16 short streams at once are more than the hardware prefetcher
               follows from memory: ask for the rows two groups on, at this
               block's offset, every 3 blocks (54 bytes: no line skipped; Q8_0 every block, and its next line) */
            if (more && (kind == B4_Q8_0 || i % 3 == 0))
                for (int k = 0; k < ROWS; k++) {
                    _mm_prefetch((const char *)base + 2 * ROWS * wrs + nxs[k] + i * bs, _MM_HINT_T0);
                    if (kind == B4_Q8_0)
                        _mm_prefetch((const char *)base + 2 * ROWS * wrs + nxs[k] + i * bs + 63, _MM_HINT_T0);
                }
            __m512i q[8];
            const __m512 d = unpack16(base, ix, ixs, i * bs, q, kind, book);
            const uint8_t *yb[TT];
            const tokb *te[TT];
            UNROLL
            for (int t = 0; t < T; t++) yb[t] = yt[t] + i * AB, te[t] = tb[t] + i;
            step16(acc, q, d, yb, te, T);
        }
        UNROLL
        for (int t = 0; t < T; t++) _mm512_mask_storeu_ps(y + (size_t)t * ldy + r, rmask, acc[t]);
    }
}

INLINE void gemv_b4(size_t n, const void *w, size_t wrs, size_t nr, const void *xq, size_t xrs, size_t n_tok, float *y,
                    size_t ldy, b4_kind kind) {
    const uint8_t *wb = w, *xb = xq;
    const size_t nb = n / TKV__QK;
    tokb tab[TABN]; /* 32 KiB */
    size_t tp = TABN / nb; /* tokens per pass: at least 4 (nb <= TKV__GEMV_MAX_N / 32) */
    tp = tp < 1 ? 1 : tp > TT ? TT : tp;
    for (size_t t0 = 0; t0 < n_tok; t0 += tp) {
        const int T = (int)min_sz(tp, n_tok - t0);
        const uint8_t *yt[TT];
        const tokb *tb[TT];
        for (int t = 0; t < T; t++) {
            yt[t] = xb + (t0 + (size_t)t) * xrs;
            tb[t] = tab + (size_t)t * nb;
            tok_fill(tab + (size_t)t * nb, yt[t], nb, kind);
        }
        float *yo = y + t0 * ldy;
        switch (T) {
        case 8: gemv_pass(nb, wb, wrs, nr, yt, tb, yo, ldy, 8, kind); break;
        case 7: gemv_pass(nb, wb, wrs, nr, yt, tb, yo, ldy, 7, kind); break;
        case 6: gemv_pass(nb, wb, wrs, nr, yt, tb, yo, ldy, 6, kind); break;
        case 5: gemv_pass(nb, wb, wrs, nr, yt, tb, yo, ldy, 5, kind); break;
        case 4: gemv_pass(nb, wb, wrs, nr, yt, tb, yo, ldy, 4, kind); break;
        case 3: gemv_pass(nb, wb, wrs, nr, yt, tb, yo, ldy, 3, kind); break;
        case 2: gemv_pass(nb, wb, wrs, nr, yt, tb, yo, ldy, 2, kind); break;
        default: gemv_pass(nb, wb, wrs, nr, yt, tb, yo, ldy, 1, kind); break;
        }
    }
}

void tkv__gemv_q4_0_avx512(size_t n, const void *w, size_t wrs, size_t nr, const void *xq, size_t xrs, size_t n_tok,
                           float *y, size_t ldy) {
    gemv_b4(n, w, wrs, nr, xq, xrs, n_tok, y, ldy, B4_Q4_0);
}

void tkv__gemv_iq4_nl_avx512(size_t n, const void *w, size_t wrs, size_t nr, const void *xq, size_t xrs, size_t n_tok,
                             float *y, size_t ldy) {
    gemv_b4(n, w, wrs, nr, xq, xrs, n_tok, y, ldy, B4_IQ4_NL);
}

void tkv__gemv_q8_0_avx512(size_t n, const void *w, size_t wrs, size_t nr, const void *xq, size_t xrs, size_t n_tok,
                           float *y, size_t ldy) {
    gemv_b4(n, w, wrs, nr, xq, xrs, n_tok, y, ldy, B4_Q8_0);
}

/* ==== packed rows (compute/quant/repack.h) ========================================================= */

/*
 * Block i of a packed group g (nb blocks a row): its 8 steps, each a zmm
 * whose lane k is row k's 4 weights for activation bytes 4j..4j+3, as
 * unpack16 makes them, but from one aligned 64-byte chunk per 2 steps
 * instead of 16 rows' loads and transposes; returns the 16 scales.
 */
INLINE __m512 unpack_packed(const uint8_t *g, size_t i, __m512i q[8], b4_kind kind, __m512i book) {
    if (kind == B4_Q8_0) { /* Q8_0's 8 chunks are its 8 steps, + 128 */
        const uint8_t *b = g + tkv__q8_0_pack_quants(i);
        UNROLL
        for (int j = 0; j < 8; j++) q[j] = _mm512_xor_si512(_mm512_load_si512((const void *)(b + 64 * j)), _mm512_set1_epi8((char)0x80));
        return _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)(const void *)(g + tkv__q8_0_pack_scales(i))));
    }
    const __m512i m = _mm512_set1_epi8(0x0f);
    const uint8_t *b = g + tkv__b4_pack_quants(i);
    UNROLL
    for (int j = 0; j < 4; j++) {
        const __m512i u = _mm512_load_si512((const void *)(b + 64 * j));
        q[j] = b4_bytes(_mm512_and_si512(u, m), kind, book);
        q[4 + j] = b4_bytes(_mm512_and_si512(_mm512_srli_epi32(u, 4), m), kind, book);
    }
    return _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)(const void *)(g + tkv__b4_pack_scales(i))));
}

/* T tokens over blocks [k0, k1) of packed group g, into acc[0..T). */
INLINE void packed_run(const uint8_t *g, size_t k0, size_t k1, const uint8_t *const *yt,
                       const tokb *const *tb, __m512 *acc, int T, b4_kind kind) {
    const __m512i book = iq4nl_book();
    for (size_t i = k0; i < k1; i++) {
        /* util.h: the rows stream from memory once, asked for PREFETCH_AHEAD on (Q8_0's too: asked at both
           distances, near and far, they had made it slower, bench/RESULTS.md) */
        prefetch_block_ahead(g, i, kind == B4_Q8_0 ? TKV__Q8_0_PACK_PAIR / 2 : TKV__B4_PACK_PAIR / 2);
        __m512i q[8];
        const __m512 d = unpack_packed(g, i, q, kind, book);
        const uint8_t *yb[TT];
        const tokb *te[TT];
        UNROLL
        for (int t = 0; t < T; t++) yb[t] = yt[t] + i * AB, te[t] = tb[t] + i;
        step16(acc, q, d, yb, te, T);
    }
}

/*
 * One group of rows, T tokens, blocks [k0, k1): accumulators from the stash
 * st (zero when k0 = 0), back to it, or after the last block to y[t * ldy +
 * k] for the rows in rmask.
 */
INLINE void packed_tile(const uint8_t *g, size_t nb, size_t k0, size_t k1, const uint8_t *const *yt, const tokb *const *tb,
                        float *st, float *y, size_t ldy, __mmask16 rmask, int T, b4_kind kind) {
    __m512 acc[TT];
    UNROLL
    for (int t = 0; t < T; t++) acc[t] = k0 == 0 ? _mm512_setzero_ps() : _mm512_load_ps(st + 16 * t);
    packed_run(g, k0, k1, yt, tb, acc, T, kind);
    UNROLL
    for (int t = 0; t < T; t++) {
        if (k1 < nb) _mm512_store_ps(st + 16 * t, acc[t]);
        else _mm512_mask_storeu_ps(y + (size_t)t * ldy, rmask, acc[t]);
    }
}

INLINE void packed_tile_any(const uint8_t *g, size_t nb, size_t k0, size_t k1, const uint8_t *const *yt,
                            const tokb *const *tb, float *st, float *y, size_t ldy, __mmask16 rmask, int T,
                            b4_kind kind) {
    switch (T) {
    case 8: packed_tile(g, nb, k0, k1, yt, tb, st, y, ldy, rmask, 8, kind); break;
    case 7: packed_tile(g, nb, k0, k1, yt, tb, st, y, ldy, rmask, 7, kind); break;
    case 6: packed_tile(g, nb, k0, k1, yt, tb, st, y, ldy, rmask, 6, kind); break;
    case 5: packed_tile(g, nb, k0, k1, yt, tb, st, y, ldy, rmask, 5, kind); break;
    case 4: packed_tile(g, nb, k0, k1, yt, tb, st, y, ldy, rmask, 4, kind); break;
    case 3: packed_tile(g, nb, k0, k1, yt, tb, st, y, ldy, rmask, 3, kind); break;
    case 2: packed_tile(g, nb, k0, k1, yt, tb, st, y, ldy, rmask, 2, kind); break;
    default: packed_tile(g, nb, k0, k1, yt, tb, st, y, ldy, rmask, 1, kind); break;
    }
}

/*
 * The product over packed rows (kernels.h, `packed`): w is the group of the
 * first row, gs the stride between groups (tkv__pack_stride). Up to 8
 * tokens (generation, a few sequences' steps) run over each group in one
 * sequential pass, unpacking each block once for all of them; more unpack
 * chunks of KC blocks into the panel (L1) once, and the gemm's tiles of 8
 * tokens run over it.
 */
INLINE void packed_b4(size_t n, const void *w, size_t gs, size_t nr, const void *xq, size_t xrs, size_t n_tok, float *y,
                      size_t ldy, b4_kind kind) {
    const uint8_t *wb = w, *xb = xq;
    const __m512i book = iq4nl_book();
    const size_t nb = n / TKV__QK;
    struct {
        union {
            alignas(64) pan16 pan[KC];      /* 18 KiB */
            alignas(64) pan16 pair[2][KC2]; /* 27 KiB */
        };
        alignas(64) float st[TCMAX * 16]; /* 16 KiB: TCMAX tokens of one panel's rows, or TC2 of a pair's */
        tokb tab[TABN];                   /* 32 KiB */
    } b;
    _Static_assert(sizeof b <= 80 * 1024, "the buffers of a product live on the stack (kernels.h: under 80 KiB)");
    _Static_assert(TC2 * 32 <= TCMAX * 16, "the stash holds TC2 tokens of a pair's 32 rows");
    size_t tc = TABN / nb;
    tc = tc < 1 ? 1 : tc > TCMAX ? TCMAX : tc;
    if (nb > KC2 && tc > TC2) tc = TC2; /* K is cut for a pair: the stash holds its tokens */
    for (size_t t0 = 0; t0 < n_tok; t0 += tc) {
        const size_t tn = min_sz(tc, n_tok - t0);
        assert(tn * nb <= TABN);
        for (size_t t = 0; t < tn; t++) tok_fill(b.tab + t * nb, xb + (t0 + t) * xrs, nb, kind);
        for (size_t r = 0; r < nr; r += ROWS) {
            const uint8_t *g = wb + r / ROWS * gs;
            const __mmask16 rmask = (__mmask16)((1u << min_sz(ROWS, nr - r)) - 1u);
            if (tn > TT && r + ROWS < nr) { /* two groups: their panels side by side */
                const __mmask16 rmask_b = (__mmask16)((1u << min_sz(ROWS, nr - r - ROWS)) - 1u);
                for (size_t k0 = 0; k0 < nb; k0 += KC2) {
                    const size_t k1 = min_sz(k0 + KC2, nb);
                    for (int h = 0; h < 2; h++)
                        for (size_t i = k0; i < k1; i++) {
                            pan16 *e = &b.pair[h][i - k0];
                            __m512i q[8];
                            const __m512 d = unpack_packed(g + (size_t)h * gs, i, q, kind, book);
                            for (int j = 0; j < 8; j++) _mm512_store_si512(&e->q[j], q[j]);
                            _mm512_store_ps(&e->d, d);
                        }
                    panel_tiles2(b.pair[0], b.pair[1], k0, k1, nb, xb, xrs, t0, tn, b.tab, b.st, y + r, ldy, rmask_b);
                }
                r += ROWS; /* the pair's second group */
                continue;
            }
            if (tn <= TT) {
                const uint8_t *yt[TT];
                const tokb *tb[TT];
                for (size_t t = 0; t < tn; t++) yt[t] = xb + (t0 + t) * xrs, tb[t] = b.tab + t * nb;
                packed_tile_any(g, nb, 0, nb, yt, tb, NULL, y + t0 * ldy + r, ldy, rmask, (int)tn, kind);
                continue;
            }
            for (size_t k0 = 0; k0 < nb; k0 += KC) {
                const size_t k1 = min_sz(k0 + KC, nb);
                for (size_t i = k0; i < k1; i++) {
                    pan16 *e = &b.pan[i - k0];
                    __m512i q[8];
                    const __m512 d = unpack_packed(g, i, q, kind, book);
                    for (int j = 0; j < 8; j++) _mm512_store_si512(&e->q[j], q[j]);
                    _mm512_store_ps(&e->d, d);
                }
                panel_tiles(b.pan, k0, k1, nb, xb, xrs, t0, tn, b.tab, b.st, y + r, ldy, rmask);
            }
        }
    }
}

void tkv__packed_q4_0_avx512(size_t n, const void *w, size_t gs, size_t nr, const void *xq, size_t xrs, size_t n_tok,
                             float *y, size_t ldy) {
    packed_b4(n, w, gs, nr, xq, xrs, n_tok, y, ldy, B4_Q4_0);
}

void tkv__packed_iq4_nl_avx512(size_t n, const void *w, size_t gs, size_t nr, const void *xq, size_t xrs, size_t n_tok,
                               float *y, size_t ldy) {
    packed_b4(n, w, gs, nr, xq, xrs, n_tok, y, ldy, B4_IQ4_NL);
}

void tkv__packed_q8_0_avx512(size_t n, const void *w, size_t gs, size_t nr, const void *xq, size_t xrs, size_t n_tok,
                             float *y, size_t ldy) {
    packed_b4(n, w, gs, nr, xq, xrs, n_tok, y, ldy, B4_Q8_0);
}

#endif
