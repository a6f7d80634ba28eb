/*
 * compute/x86/avx2/gemm_q4_0_iq4_nl.c — the tiled Q4_0, IQ4_NL and Q8_0 products (prefill, and
 * over packed rows) at the avx2 level (AVX2 + FMA + F16C), in the
 * block-reduced order of compute/quant/quant.h: bit for bit the
 * dot_b4_reduced of compute/x86/avx2/kernels.c.
 *
 * Layout: lane k of a ymm is row r + k (8 rows), so a block reduces to one
 * integer per lane with no horizontal sum. The panel holds each block of 8
 * rows transposed: "step" j (0..7) is a ymm whose lane k has row k's 4
 * weights paired with activation bytes 4j..4j+3 (low nibbles for j < 4,
 * high ones after), as unsigned 0..15. Per step and token: one vpmaddubsw
 * with the token's 4 bytes broadcast, added as int16 (8 steps of two
 * products of at most 15 x 127 sum to at most 30480: no overflow), then one
 * vpmaddwd by 1 per block, the token's -8 * sum(y) correction, a
 * conversion, the scale product and the fma. 2.5 instructions per block of
 * 32 multiply-adds per (row, token), against 6 in the lane-wise order.
 *
 * IQ4_NL (b4_kind) shares the layout and the drivers, not the step: its
 * codebook values (-127..113) as unsigned bytes would overflow vpmaddubsw's
 * int16 pairs, so the panel keeps |w| (q) and w (for the signs), a step
 * gives each token's bytes w's signs (vpsignb), multiplies them by |w|
 * (pairs of at most 2 x 127 x 127: no saturation) and widens to int32 at
 * once (vpmaddwd): exact, with no correction. Q8_0 (32 signed bytes a
 * block, read as two halves of 16 transposed as the nibbles are) takes the
 * same step.
 *
 * Q5_0 (this level's alone: compute/quant/quant.h) is Q4_0 with a fifth
 * bit: steps of unsigned 0..31 and a -16 * sum(y) correction, its word sums
 * taken to int32 every 4 steps (4 x 2 x 31 x 127 = 31496: no overflow).
 * Its packed rows keep the fifth bits in the steps' order (repack.h), so
 * one shift and one and give a step's; from the file's rows, a byte
 * shuffle, an and and a compare.
 */
#include "compute/gemm.h"
#include "util.h"
#include "compute/quant/quant.h"
#include "compute/quant/repack.h"

#include <assert.h>
#include <stdalign.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#if defined(__x86_64__) && defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include <immintrin.h>

enum {
    ROWS = 8,     /* rows per panel (a ymm's lanes) */
    TT = 4,       /* tokens per tile */
    KC = 32,      /* blocks per chunk of K: the panel (9 KiB) stays in L1 */
    TCMAX = 256,  /* tokens per chunk of tokens */
    TABN = 4096,  /* (token, block) entries of the token table: 32 KiB */
    QB = sizeof(tkv__block_q4_0),
    AB = sizeof(tkv__block_q8_0),
};

/* What a weight nibble stands for. */
typedef enum b4_kind {
    B4_Q4_0,   /* q - 8 */
    B4_IQ4_NL, /* tkv__iq4nl_values[q] */
    B4_Q8_0,   /* the byte itself (a block of 32 bytes, not nibbles) */
    B4_Q5_0,   /* (q | fifth bit << 4) - 16 */
} b4_kind;

enum { Q5B = sizeof(tkv__block_q5_0), Q5_QH = offsetof(tkv__block_q5_0, qh), Q5_QS = offsetof(tkv__block_q5_0, qs) };

/* Bytes of a block of one row. */
static inline size_t b4_block(b4_kind kind) {
    return kind == B4_Q8_0 ? AB : kind == B4_Q5_0 ? Q5B : QB;
}

/* Whether the panel's steps hold unsigned values (Q4_0's nibbles, Q5_0's 5 bits) with the tokens' correction,
   rather than |w| and w. */
static inline int b4_unsigned(b4_kind kind) {
    return kind == B4_Q4_0 || kind == B4_Q5_0;
}

/* One block of 8 rows, transposed (544 bytes; Q4_0 reads 288 of them). */
typedef struct pan8 {
    __m256i q[8]; /* step j: lane k = row k's 4 weights for activation bytes 4j..4j+3: Q4_0's
                     nibbles (0..15), Q5_0's 0..31, IQ4_NL's and Q8_0's |values| */
    __m256i w[8]; /* IQ4_NL, Q8_0: the signed values of q's bytes */
    __m256 d;     /* lane k: row k's scale */
} pan8;

/* Per token and block: -8 * sum of the 32 activation quants (Q5_0: -16 *; IQ4_NL, Q8_0: 0), and the scale. */
typedef struct tokb {
    int32_t corr;
    float d;
} tokb;

static void tok_fill(tokb *tab, const uint8_t *row, size_t nb, b4_kind kind) {
    const __m256i eight = _mm256_set1_epi8(kind == B4_Q4_0 ? 8 : kind == B4_Q5_0 ? 16 : 0), one = _mm256_set1_epi16(1);
    for (size_t i = 0; i < nb; i++) {
        const uint8_t *b = row + i * AB;
        const __m256i s = _mm256_madd_epi16(_mm256_maddubs_epi16(eight, LOAD256(b + 2)), one);
        __m128i h = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
        h = _mm_add_epi32(h, _mm_shuffle_epi32(h, 0x4e));
        h = _mm_add_epi32(h, _mm_shuffle_epi32(h, 0xb1));
        uint16_t d;
        memcpy(&d, b, 2);
        tab[i].corr = -_mm_cvtsi128_si32(h);
        tab[i].d = _cvtsh_ss(d);
    }
}

/* Signed weight bytes w into step j of e: |w| (as unsigned: |-128| is 128) and w. */
INLINE void put_signed(pan8 *e, int j, __m256i w) {
    _mm256_store_si256(&e->q[j], _mm256_abs_epi8(w));
    _mm256_store_si256(&e->w[j], w);
}

/* Nibbles (0..15 per byte; Q5_0: 0..31) into step j of e as `kind` keeps them. */
INLINE void put_step(pan8 *e, int j, __m256i q, b4_kind kind) {
    if (b4_unsigned(kind)) _mm256_store_si256(&e->q[j], q);
    else put_signed(e, j, _mm256_shuffle_epi8(_mm256_broadcastsi128_si256(LOAD128(tkv__iq4nl_values)), q));
}

/* Bytes [off, off + 16) of rows[0..7], transposed: u[j] lane k = row k's dword j of them. */
INLINE void transpose8(const uint8_t *const *rows, size_t off, __m256i u[4]) {
    __m256i z[4]; /* z[g]: rows g and 4 + g, one per 128-bit lane */
    for (int g = 0; g < 4; g++)
        z[g] = _mm256_inserti128_si256(_mm256_castsi128_si256(LOAD128(rows[g] + off)), LOAD128(rows[4 + g] + off), 1);
    /* 4 x 4 transposes of dwords within each 128-bit lane: u[j] lane 4l + g = row 4l + g's dword j */
    const __m256i t0 = _mm256_unpacklo_epi32(z[0], z[1]), t1 = _mm256_unpackhi_epi32(z[0], z[1]);
    const __m256i t2 = _mm256_unpacklo_epi32(z[2], z[3]), t3 = _mm256_unpackhi_epi32(z[2], z[3]);
    u[0] = _mm256_unpacklo_epi64(t0, t2), u[1] = _mm256_unpackhi_epi64(t0, t2);
    u[2] = _mm256_unpacklo_epi64(t1, t3), u[3] = _mm256_unpackhi_epi64(t1, t3);
}

/* Lane k: 16 in byte b where bit 4s + b of dword k of qh (8 rows' Q5_0 fifth bits, the file's order) is set: step
   s's fifth bits. */
INLINE __m256i fifth_of_step(__m256i qh, int s) {
    const char c = (char)(s / 2);
    const __m256i pick = _mm256_setr_epi8(c, c, c, c, (char)(4 + c), (char)(4 + c), (char)(4 + c), (char)(4 + c),
                                          (char)(8 + c), (char)(8 + c), (char)(8 + c), (char)(8 + c), (char)(12 + c),
                                          (char)(12 + c), (char)(12 + c), (char)(12 + c), c, c, c, c, (char)(4 + c),
                                          (char)(4 + c), (char)(4 + c), (char)(4 + c), (char)(8 + c), (char)(8 + c),
                                          (char)(8 + c), (char)(8 + c), (char)(12 + c), (char)(12 + c), (char)(12 + c),
                                          (char)(12 + c));
    const __m256i bit = _mm256_set1_epi32((int)(0x08040201u << (4 * (s % 2))));
    const __m256i v = _mm256_and_si256(_mm256_shuffle_epi8(qh, pick), bit);
    return _mm256_and_si256(_mm256_cmpeq_epi8(v, bit), _mm256_set1_epi8(0x10));
}

/* Block i (byte offset off) of rows[0..7], transposed into e. */
INLINE void unpack8(pan8 *e, const uint8_t *const *rows, size_t off, b4_kind kind) {
    __m256i u[4];
    if (kind == B4_Q8_0) { /* bytes 16h + 4j .. of a row: step 4h + j */
        for (int h = 0; h < 2; h++) {
            transpose8(rows, off + 2 + 16 * (size_t)h, u);
            for (int j = 0; j < 4; j++) put_signed(e, 4 * h + j, u[j]);
        }
    } else if (kind == B4_Q5_0) {
        transpose8(rows, off + Q5_QS, u);
        int32_t h[8];
        for (int k = 0; k < 8; k++) memcpy(&h[k], rows[k] + off + Q5_QH, 4);
        const __m256i qh = _mm256_loadu_si256((const __m256i *)(const void *)h), m = _mm256_set1_epi8(0x0f);
        for (int j = 0; j < 4; j++) {
            put_step(e, j, _mm256_or_si256(_mm256_and_si256(u[j], m), fifth_of_step(qh, j)), kind);
            put_step(e, 4 + j, _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi32(u[j], 4), m), fifth_of_step(qh, 4 + j)),
                     kind);
        }
    } else {
        transpose8(rows, off + 2, u);
        const __m256i m = _mm256_set1_epi8(0x0f);
        for (int j = 0; j < 4; j++) {
            put_step(e, j, _mm256_and_si256(u[j], m), kind);
            put_step(e, 4 + j, _mm256_and_si256(_mm256_srli_epi32(u[j], 4), m), kind);
        }
    }
    uint16_t h[8];
    for (int k = 0; k < 8; k++) memcpy(&h[k], rows[k] + off, 2);
    _mm256_store_ps((float *)&e->d, _mm256_cvtph_ps(LOAD128(h)));
}

/* One step of a tile for one token whose 4 activation bytes are v, into its block sum s. */
INLINE __m256i step_token(__m256i s, __m256i q, __m256i w, int32_t v, b4_kind kind) {
    if (b4_unsigned(kind)) return _mm256_add_epi16(s, _mm256_maddubs_epi16(q, _mm256_set1_epi32(v)));
    const __m256i ys = _mm256_sign_epi8(_mm256_set1_epi32(v), w);
    return _mm256_add_epi32(s, _mm256_madd_epi16(_mm256_maddubs_epi16(q, ys), _mm256_set1_epi16(1)));
}

/* An unsigned kind's block sums: its word sums s (and Q5_0's first 4 steps' int32 mid) with the token's correction. */
INLINE __m256i unsigned_sum(__m256i s, __m256i mid, int32_t corr, b4_kind kind) {
    __m256i si = _mm256_madd_epi16(s, _mm256_set1_epi16(1));
    if (kind == B4_Q5_0) si = _mm256_add_epi32(si, mid);
    return _mm256_add_epi32(si, _mm256_set1_epi32(corr));
}

/*
 * The tile: 8 rows x T tokens over panel blocks [k0, k1). yt: the T token
 * rows; tb: their tables (nb entries each); acc: in and out.
 */
INLINE void tile(const pan8 *pan, size_t k0, size_t k1, const uint8_t *const *yt, const tokb *const *tb, __m256 *acc,
                 int T, b4_kind kind) {
    const __m256i one = _mm256_set1_epi16(1);
    for (size_t i = k0; i < k1; i++) {
        const pan8 *e = pan + (i - k0);
        __m256i s[TT], mid[TT]; /* Q4_0, Q5_0: int16 pairs (Q5_0's first 4 steps' in mid, as int32); IQ4_NL: int32 */
        UNROLL
        for (int t = 0; t < T; t++) s[t] = _mm256_setzero_si256(), mid[t] = s[t];
        UNROLL
        for (int j = 0; j < 8; j++) {
            const __m256i q = _mm256_load_si256(&e->q[j]);
            UNROLL
            for (int t = 0; t < T; t++) {
                int32_t v;
                memcpy(&v, yt[t] + i * AB + 2 + 4 * j, 4);
                s[t] = step_token(s[t], q, b4_unsigned(kind) ? q : _mm256_load_si256(&e->w[j]), v, kind);
                if (kind == B4_Q5_0 && j == 3) mid[t] = _mm256_madd_epi16(s[t], one), s[t] = _mm256_setzero_si256();
            }
        }
        UNROLL
        for (int t = 0; t < T; t++) {
            const __m256i si = b4_unsigned(kind) ? unsigned_sum(s[t], mid[t], tb[t][i].corr, kind) : s[t];
            const __m256 d = _mm256_mul_ps(_mm256_load_ps((const float *)&e->d), _mm256_set1_ps(tb[t][i].d));
            acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(si), d, acc[t]);
        }
    }
}

/* One tile: accumulators from the stash (or zero), blocks [k0, k1), then to the stash or, at the end, to y. */
INLINE void tile_run(const pan8 *pan, size_t k0, size_t k1, size_t nb, const uint8_t *const *yt, const tokb *const *tb,
                     float *st, float *y, size_t ldy, int nrow, int T, b4_kind kind) {
    __m256 acc[TT];
    UNROLL
    for (int t = 0; t < T; t++) acc[t] = k0 == 0 ? _mm256_setzero_ps() : _mm256_load_ps(st + 8 * t);
    tile(pan, k0, k1, yt, tb, acc, T, kind);
    if (k1 < nb) {
        UNROLL
        for (int t = 0; t < T; t++) _mm256_store_ps(st + 8 * t, acc[t]);
        return;
    }
    UNROLL
    for (int t = 0; t < T; t++) {
        if (nrow == ROWS) {
            _mm256_storeu_ps(y + (size_t)t * ldy, acc[t]);
        } else {
            alignas(32) float o[8];
            _mm256_store_ps(o, acc[t]);
            memcpy(y + (size_t)t * ldy, o, (size_t)nrow * sizeof(float));
        }
    }
}

INLINE void tile_any(const pan8 *pan, size_t k0, size_t k1, size_t nb, const uint8_t *const *yt, const tokb *const *tb,
                     float *st, float *y, size_t ldy, int nrow, int T, b4_kind kind) {
    switch (T) {
    case 4: tile_run(pan, k0, k1, nb, yt, tb, st, y, ldy, nrow, 4, kind); break;
    case 3: tile_run(pan, k0, k1, nb, yt, tb, st, y, ldy, nrow, 3, kind); break;
    case 2: tile_run(pan, k0, k1, nb, yt, tb, st, y, ldy, nrow, 2, kind); break;
    default: tile_run(pan, k0, k1, nb, yt, tb, st, y, ldy, nrow, 1, kind); break;
    }
}

/* Tokens t0 .. t0 + tn - 1 (their tables tab) in tiles of up to TT over the panel's blocks [k0, k1). */
INLINE void panel_tiles(const pan8 *pan, size_t k0, size_t k1, size_t nb, const uint8_t *xb, size_t xrs, size_t t0,
                        size_t tn, const tokb *tab, float *st, float *y, size_t ldy, int nrow, b4_kind kind) {
    for (size_t u = 0; u < tn; u += TT) {
        const int T = (int)min_sz(TT, tn - u);
        const uint8_t *yt[TT];
        const tokb *tb[TT];
        for (int t = 0; t < T; t++) {
            yt[t] = xb + (t0 + u + (size_t)t) * xrs;
            tb[t] = tab + (u + (size_t)t) * nb;
        }
        tile_any(pan, k0, k1, nb, yt, tb, st + 8 * u, y + (t0 + u) * ldy, ldy, nrow, T, kind);
    }
}

INLINE void gemm_b4(size_t n, const void *w, size_t wrs, size_t nr, const void *xq, size_t xrs, size_t n_tok, float *y,
                    size_t ldy, b4_kind kind) {
    const uint8_t *wb = w, *xb = xq;
    const size_t nb = n / TKV__QK;
    struct {
        alignas(64) pan8 pan[KC];        /* 17 KiB */
        alignas(64) float st[TCMAX * 8]; /* 8 KiB */
        tokb tab[TABN];                  /* 32 KiB */
    } b;
    _Static_assert(sizeof b <= 80 * 1024, "the buffers of a product live on the stack (kernels.h: under 80 KiB)");
    size_t tc = TABN / nb;
    tc = tc < 1 ? 1 : tc > TCMAX ? TCMAX : tc;
    for (size_t t0 = 0; t0 < n_tok; t0 += tc) {
        const size_t tn = min_sz(tc, n_tok - t0);
        assert(tn * nb <= TABN);
        for (size_t t = 0; t < tn; t++) tok_fill(b.tab + t * nb, xb + (t0 + t) * xrs, nb, kind);
        for (size_t r = 0; r < nr; r += ROWS) {
            const uint8_t *rows[ROWS]; /* past the end: the last row again (computed, not stored) */
            for (size_t k = 0; k < ROWS; k++) rows[k] = wb + min_sz(r + k, nr - 1) * wrs;
            const int nrow = (int)min_sz(ROWS, nr - r);
            for (size_t k0 = 0; k0 < nb; k0 += KC) {
                const size_t k1 = min_sz(k0 + KC, nb);
                for (size_t i = k0; i < k1; i++) unpack8(&b.pan[i - k0], rows, i * b4_block(kind), kind);
                panel_tiles(b.pan, k0, k1, nb, xb, xrs, t0, tn, b.tab, b.st, y + r, ldy, nrow, kind);
            }
        }
    }
}

void tkv__gemm_q4_0_avx2(size_t n, const void *w, size_t wrs, size_t nr, const void *xq, size_t xrs, size_t n_tok,
                         float *y, size_t ldy) {
    gemm_b4(n, w, wrs, nr, xq, xrs, n_tok, y, ldy, B4_Q4_0);
}

void tkv__gemm_iq4_nl_avx2(size_t n, const void *w, size_t wrs, size_t nr, const void *xq, size_t xrs, size_t n_tok,
                           float *y, size_t ldy) {
    gemm_b4(n, w, wrs, nr, xq, xrs, n_tok, y, ldy, B4_IQ4_NL);
}

void tkv__gemm_q8_0_avx2(size_t n, const void *w, size_t wrs, size_t nr, const void *xq, size_t xrs, size_t n_tok,
                         float *y, size_t ldy) {
    gemm_b4(n, w, wrs, nr, xq, xrs, n_tok, y, ldy, B4_Q8_0);
}

void tkv__gemm_q5_0_avx2(size_t n, const void *w, size_t wrs, size_t nr, const void *xq, size_t xrs, size_t n_tok,
                         float *y, size_t ldy) {
    gemm_b4(n, w, wrs, nr, xq, xrs, n_tok, y, ldy, B4_Q5_0);
}

/* ==== packed rows (compute/quant/repack.h) ========================================================= */

/* The 8 rows' scales of half h of packed block i. */
INLINE __m256 half_scales(const uint8_t *g, size_t i, int h, b4_kind kind) {
    const size_t off = kind == B4_Q8_0   ? tkv__q8_0_pack_scales(i)
                       : kind == B4_Q5_0 ? i * TKV__Q5_0_PACK_BLOCK + TKV__Q5_0_PACK_SCALES
                                         : tkv__b4_pack_scales(i);
    return _mm256_cvtph_ps(_mm_load_si128((const __m128i *)(const void *)(g + off + 16 * h)));
}

/* Block i of half h (rows 8h .. 8h + 7) of a packed group into e: the
   steps unpack16 would make, read from the group's chunks with no
   transposes (a half is bytes 32h .. 32h + 31 of each chunk). */
INLINE void unpack_packed8(pan8 *e, const uint8_t *g, size_t i, int h, b4_kind kind) {
    if (kind == B4_Q8_0) { /* Q8_0's 8 chunks are its 8 steps */
        const uint8_t *b = g + tkv__q8_0_pack_quants(i) + 32 * h;
        for (int j = 0; j < 8; j++) put_signed(e, j, _mm256_load_si256((const __m256i *)(const void *)(b + 64 * j)));
        _mm256_store_ps((float *)&e->d, half_scales(g, i, h, kind));
        return;
    }
    const __m256i m = _mm256_set1_epi8(0x0f);
    const uint8_t *b = g + (kind == B4_Q5_0 ? i * TKV__Q5_0_PACK_BLOCK : tkv__b4_pack_quants(i)) + 32 * h;
    const __m256i fifth = kind == B4_Q5_0 ? LOADA256(b + TKV__Q5_0_PACK_FIFTH) : _mm256_setzero_si256();
    for (int j = 0; j < 4; j++) {
        const __m256i u = _mm256_load_si256((const __m256i *)(const void *)(b + 64 * j));
        __m256i lo = _mm256_and_si256(u, m), hi = _mm256_and_si256(_mm256_srli_epi32(u, 4), m);
        if (kind == B4_Q5_0) lo = _mm256_or_si256(lo, fifth_bit(fifth, j)), hi = _mm256_or_si256(hi, fifth_bit(fifth, 4 + j));
        put_step(e, j, lo, kind);
        put_step(e, 4 + j, hi, kind);
    }
    _mm256_store_ps((float *)&e->d, half_scales(g, i, h, kind));
}

/* The prefetches for block i of a packed group g, one stream: Q4_0's, IQ4_NL's and Q5_0's at both distances
   (util.h's prefetch_block_near_far); Q8_0's are packed_few's own, a line or two a step. */
INLINE void prefetch_packed_block(const uint8_t *g, size_t i, b4_kind kind) {
    if (kind != B4_Q8_0) prefetch_block_near_far(g, i, kind == B4_Q5_0 ? TKV__Q5_0_PACK_BLOCK : TKV__B4_PACK_PAIR / 2);
}

/* A half's tile accumulators to y: token t's first nrow (1..8) rows at y + t ldy. */
INLINE void store_half(const __m256 *acc, int T, float *y, size_t ldy, int nrow) {
    UNROLL
    for (int t = 0; t < T; t++) {
        alignas(32) float o[8];
        _mm256_store_ps(o, acc[t]);
        memcpy(y + (size_t)t * ldy, o, (size_t)nrow * sizeof(float));
    }
}

/* Steps j and 4 + j of half h (rows 8h .. 8h + 7) of packed block i, in registers: q[k] the unsigned bytes
   vpmaddubsw multiplies, w[k] (IQ4_NL, Q8_0) the signed values whose signs the tokens' bytes take, as
   unpack_packed8 stores them (Q4_0, IQ4_NL, Q5_0: both steps from one 32-byte load, low and high nibbles; Q5_0's
   fifth bits from the half's 32 bytes of them, `fifth`). */
INLINE void steps_pair(const uint8_t *g, size_t i, int h, int j, b4_kind kind, __m256i book, __m256i fifth,
                       __m256i q[2], __m256i w[2]) {
    if (kind == B4_Q8_0) {
        const uint8_t *b = g + tkv__q8_0_pack_quants(i) + 32 * h;
        w[0] = LOADA256(b + 64 * j), w[1] = LOADA256(b + 64 * (4 + j));
        q[0] = _mm256_abs_epi8(w[0]), q[1] = _mm256_abs_epi8(w[1]);
        return;
    }
    const __m256i m = _mm256_set1_epi8(0x0f);
    const __m256i u = LOADA256(g + (kind == B4_Q5_0 ? i * TKV__Q5_0_PACK_BLOCK : tkv__b4_pack_quants(i)) + 32 * h + 64 * j);
    q[0] = _mm256_and_si256(u, m), q[1] = _mm256_and_si256(_mm256_srli_epi32(u, 4), m);
    if (kind == B4_Q5_0)
        q[0] = _mm256_or_si256(q[0], fifth_bit(fifth, j)), q[1] = _mm256_or_si256(q[1], fifth_bit(fifth, 4 + j));
    if (kind == B4_IQ4_NL)
        for (int k = 0; k < 2; k++) w[k] = _mm256_shuffle_epi8(book, q[k]), q[k] = _mm256_abs_epi8(w[k]);
}

/*
 * A few tokens (T <= TT: generation, small decode steps) over one whole group of 16
 * rows (rows 16 g .. of y, nrow of them), block by block: the group is read
 * once, as one stream, and each step's weights go from their load to the
 * tokens' products in registers, with each token's 4 activation bytes
 * broadcast once for both halves. tile()'s arithmetic, integer sums taken
 * in another order (exact), so bit for bit the panel's result; through a
 * panel in L1 instead, a step was stored and loaded again, and on cores
 * that split a ymm store in two (Zen 1) those stores bound the product.
 */
INLINE void packed_few(const uint8_t *g, size_t nb, const uint8_t *const *yt, const tokb *const *tb,
                       float *y, size_t ldy, int nrow, int T, b4_kind kind) {
    const __m256i book = _mm256_broadcastsi128_si256(LOAD128(tkv__iq4nl_values)), one = _mm256_set1_epi16(1);
    __m256 acc[2][TT];
    UNROLL
    for (int t = 0; t < T; t++) acc[0][t] = acc[1][t] = _mm256_setzero_ps();
    for (size_t i = 0; i < nb; i++) {
        prefetch_packed_block(g, i, kind); /* as packed_b4 */
        __m256i s[2][TT], mid[2][TT], fifth[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()};
        UNROLL
        for (int t = 0; t < T; t++) s[0][t] = s[1][t] = mid[0][t] = mid[1][t] = _mm256_setzero_si256();
        if (kind == B4_Q5_0) {
            const uint8_t *f = g + i * TKV__Q5_0_PACK_BLOCK + TKV__Q5_0_PACK_FIFTH;
            fifth[0] = LOADA256(f), fifth[1] = LOADA256(f + 32);
        }
        UNROLL
        for (int j = 0; j < 4; j++) {
            __m256i q[2][2], w[2][2];
            if (kind == B4_Q8_0) {
                /* a Q8_0 group is one stream, but a core this level runs on alone (Zen 1) does not keep enough
                   of it on its way: both distances, the pair's 17 lines spread over its 8 steps (from memory,
                   bench_kernels -n 2048 -r 131072, one thread: 8.4-9.0 GB/s with the pair's lines asked at
                   once, 10.4-10.7 by halves, 12.2-12.6 a line or two a step; the avx512 level, on Zen 5, was
                   slower with them) */
                enum { LINES = TKV__Q8_0_PACK_PAIR / 64 }; /* a pair's, over its 2 x 4 steps */
                const size_t slot = (i % 2) * 4 + (size_t)j, L0 = slot * LINES / 8, L1 = (slot + 1) * LINES / 8;
                const uint8_t *p = g + tkv__q8_0_pack_quants(i - i % 2) + 64 * L0;
                prefetch_span(p + PREFETCH_NEAR, 64 * (L1 - L0));
                prefetch_far(p, 64 * (L1 - L0));
            }
            steps_pair(g, i, 0, j, kind, book, fifth[0], q[0], w[0]);
            steps_pair(g, i, 1, j, kind, book, fifth[1], q[1], w[1]);
            UNROLL
            for (int t = 0; t < T; t++) {
                int32_t v[2]; /* the token's bytes for step j (low nibbles) and 4 + j (high) */
                memcpy(&v[0], yt[t] + i * AB + 2 + 4 * j, 4);
                memcpy(&v[1], yt[t] + i * AB + 2 + 16 + 4 * j, 4);
                UNROLL
                for (int h = 0; h < 2; h++) {
                    for (int k = 0; k < 2; k++) s[h][t] = step_token(s[h][t], q[h][k], w[h][k], v[k], kind);
                    if (kind == B4_Q5_0 && j == 1) /* 4 steps: their word sums to int32 (the header) */
                        mid[h][t] = _mm256_madd_epi16(s[h][t], one), s[h][t] = _mm256_setzero_si256();
                }
            }
        }
        UNROLL
        for (int h = 0; h < 2; h++) {
            const __m256 dw = half_scales(g, i, h, kind);
            UNROLL
            for (int t = 0; t < T; t++) {
                const __m256i si = b4_unsigned(kind) ? unsigned_sum(s[h][t], mid[h][t], tb[t][i].corr, kind) : s[h][t];
                acc[h][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(si), _mm256_mul_ps(dw, _mm256_set1_ps(tb[t][i].d)), acc[h][t]);
            }
        }
    }
    store_half(acc[0], T, y, ldy, nrow < ROWS ? nrow : ROWS);
    if (nrow > ROWS) store_half(acc[1], T, y + ROWS, ldy, nrow - ROWS);
}

/*
 * The product over packed rows (kernels.h, `packed`): a few tokens by
 * packed_few; more with each group of 16 rows as two halves of 8, each
 * half's chunk of KC blocks unpacked into the panel once and the tiles of
 * up to 4 tokens run over it, as the gemm does over transposed rows.
 */
INLINE void packed_b4(size_t n, const void *w, size_t gs, size_t nr, const void *xq, size_t xrs, size_t n_tok, float *y,
                      size_t ldy, b4_kind kind) {
    const uint8_t *wb = w, *xb = xq;
    const size_t nb = n / TKV__QK;
    struct {
        alignas(64) pan8 pan[KC];        /* 17 KiB */
        alignas(64) float st[TCMAX * 8]; /* 8 KiB */
        tokb tab[TABN];                  /* 32 KiB */
    } b;
    size_t tc = TABN / nb;
    tc = tc < 1 ? 1 : tc > TCMAX ? TCMAX : tc;
    for (size_t t0 = 0; t0 < n_tok; t0 += tc) {
        const size_t tn = min_sz(tc, n_tok - t0);
        assert(tn * nb <= TABN);
        for (size_t t = 0; t < tn; t++) tok_fill(b.tab + t * nb, xb + (t0 + t) * xrs, nb, kind);
        /* up to 4 tokens by packed_few (in registers, it beats the panel at every count it holds: Zen 1, in cache,
           one thread, bench_kernels -n 2048 -r 1024 -l avx2 -t 4: Q4_0 0.43 -> 0.37 ms, IQ4_NL 0.71 -> 0.53-0.63) */
        if (tn <= 4u) {
            const uint8_t *yt[TT];
            const tokb *tb[TT];
            for (size_t t = 0; t < tn; t++) yt[t] = xb + (t0 + t) * xrs, tb[t] = b.tab + t * nb;
            for (size_t r = 0; r < nr; r += 2 * ROWS) {
                const uint8_t *g = wb + r / (2 * ROWS) * gs;
                float *yo = y + t0 * ldy + r;
                const int nrow = (int)min_sz(2 * ROWS, nr - r);
                switch (tn) {
                case 4: packed_few(g, nb, yt, tb, yo, ldy, nrow, 4, kind); break;
                case 3: packed_few(g, nb, yt, tb, yo, ldy, nrow, 3, kind); break;
                case 2: packed_few(g, nb, yt, tb, yo, ldy, nrow, 2, kind); break;
                default: packed_few(g, nb, yt, tb, yo, ldy, nrow, 1, kind); break;
                }
            }
            continue;
        }
        for (size_t r = 0; r < nr; r += ROWS) {
            const uint8_t *g = wb + r / (2 * ROWS) * gs;
            const int h = (int)(r / ROWS % 2);
            const int nrow = (int)min_sz(ROWS, nr - r);
            for (size_t k0 = 0; k0 < nb; k0 += KC) {
                const size_t k1 = min_sz(k0 + KC, nb);
                for (size_t i = k0; i < k1; i++) {
                    /* util.h: the first half's pass reads the group from memory (Q8_0's group is one stream: the
                       hardware prefetcher's alone) */
                    if (h == 0) prefetch_packed_block(g, i, kind);
                    unpack_packed8(&b.pan[i - k0], g, i, h, kind);
                }
                panel_tiles(b.pan, k0, k1, nb, xb, xrs, t0, tn, b.tab, b.st, y + r, ldy, nrow, kind);
            }
        }
    }
}

void tkv__packed_q4_0_avx2(size_t n, const void *w, size_t gs, size_t nr, const void *xq, size_t xrs, size_t n_tok,
                           float *y, size_t ldy) {
    packed_b4(n, w, gs, nr, xq, xrs, n_tok, y, ldy, B4_Q4_0);
}

void tkv__packed_iq4_nl_avx2(size_t n, const void *w, size_t gs, size_t nr, const void *xq, size_t xrs, size_t n_tok,
                             float *y, size_t ldy) {
    packed_b4(n, w, gs, nr, xq, xrs, n_tok, y, ldy, B4_IQ4_NL);
}

void tkv__packed_q8_0_avx2(size_t n, const void *w, size_t gs, size_t nr, const void *xq, size_t xrs, size_t n_tok,
                           float *y, size_t ldy) {
    packed_b4(n, w, gs, nr, xq, xrs, n_tok, y, ldy, B4_Q8_0);
}

void tkv__packed_q5_0_avx2(size_t n, const void *w, size_t gs, size_t nr, const void *xq, size_t xrs, size_t n_tok,
                           float *y, size_t ldy) {
    packed_b4(n, w, gs, nr, xq, xrs, n_tok, y, ldy, B4_Q5_0);
}

#endif
