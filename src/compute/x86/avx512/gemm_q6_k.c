/*
 * compute/x86/avx512/gemm_q6_k.c — Q6_K products at the avx512 level (AVX-512 F/BW/VL + VNNI)
 * over the transposed layout of compute/quant/repack.h, in the block-reduced order of
 * compute/quant/quant.h, so they equal the level's vec_dot (and the scalar one) bit for bit: the
 * product over packed rows and the tiled product over the file's rows, which builds the same
 * layout for a chunk of K on its stack first (pack6: dword transposes of the 16 rows).
 *
 * Lane k of a zmm is row k of a group of 16, so a superblock reduces to one
 * integer per lane with no horizontal sums. A unit of the layout (192
 * bytes: two 64-byte chunks of low bits and one of high bits) gives four
 * values of 4 elements of each row, one in each of 4 sub-blocks (a shift,
 * an and and a vpternlogd each, 0..63 as unsigned bytes for vpdpbusd); per
 * token one vpdpbusd each, the sum of a sub-block starting from -32 times
 * the token's sum of its 16 quants (the q - 32 offset), so it is exact. Per
 * 4 units (4 sub-blocks complete) and token the sums times the rows'
 * scales (vpmulld); per superblock and token one conversion, the scale
 * product and one fma for all 16 rows. Against the lane-wise order
 * (gemm_q8_0_q4_q5_q6_k.c's tiles, vpmaddubsw then vpdpwssd by the scale
 * words: two multiplies a 4 products) one vpdpbusd a 4 products and one
 * vpmulld a 16.
 *
 * Decode steps run straight from the packed rows (tiles of up to 4
 * tokens); 8 tokens and more (prefill) first expand each superblock's
 * values to bytes, KCX superblocks at a time, so that a tile's steps are
 * loads instead of the unpacking, and go a pair of sub-blocks at a time:
 * the tile then holds two sums per token instead of four, and the q - 32
 * offset comes off once per superblock (the rows' scale pairs of the
 * layout times the token's pairs of sums of 16 by vpdpwssd, as the avx2
 * level's), in a loop rather than unrolled (unrolled, gcc hoisted the
 * products above the scale multiplies and spilled the sums: prefill 380 ->
 * 450 GF/s as a loop). Each tile shape is a function of its own: inlined
 * together into the pass they spilled their sums (one token from L1 86 ->
 * 92 GB/s, 4 tokens 36 -> 40).
 */
#include "compute/gemm.h"
#include "util.h"
#include "compute/quant/quant.h"
#include "compute/quant/repack.h"

#include <stdalign.h>
#include <stdint.h>
#include <string.h>

#if defined(__x86_64__) && defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && \
    defined(__AVX512VNNI__) && defined(__AVX2__) && defined(__F16C__)
#include <immintrin.h>

enum {
    QBS = sizeof(tkv__block_q8_K),
    PB = TKV__Q6K_PACK_BLOCK,
    UNIT = TKV__Q6K_PACK_UNIT,
    TT = 4,        /* tokens per tile */
    KC = 8,        /* superblocks per panel of the file-rows product (27 KiB) */
    TC = 64,       /* tokens per chunk: their activations stay in L2 while the groups pass */
    Y_QS = 4,      /* offset of a Q8_K block's quants */
    Y_BSUMS = 260, /* ... and of its 16 sums of 16 */
    /* an expanded superblock: unit u's four values at 256 u (64 bytes each), then the packed superblock's tail */
    EX_VALUES = 4096,
    EXB = EX_VALUES + (PB - TKV__Q6K_PACK_SCALES), /* 69 cache lines */
    KCX = 8,     /* superblocks per expanded panel (35 KiB) */
    EX_MIN = 8,  /* tokens from which a pass expands its superblocks first */
};

/* The four values (0..63) of unit u of packed superblock b: v[0..3] for its elements at + 0, 32, 64, 96. */
INLINE void unit_values(const uint8_t *b, int u, __m512i v[4]) {
    const __m512i m4 = _mm512_set1_epi8(0x0f), m30 = _mm512_set1_epi8(0x30);
    const uint8_t *p = b + UNIT * u;
    const __m512i a = _mm512_load_si512((const void *)p), c = _mm512_load_si512((const void *)(p + 64));
    const __m512i h = _mm512_load_si512((const void *)(p + 128));
    /* (x & 0x0f) | y, y's bits 4-5 the two high bits: one vpternlogd (0xea: a & b | c) after the high bits' and */
    v[0] = _mm512_ternarylogic_epi32(a, m4, _mm512_and_si512(_mm512_slli_epi16(h, 4), m30), 0xea);
    v[1] = _mm512_ternarylogic_epi32(c, m4, _mm512_and_si512(_mm512_slli_epi16(h, 2), m30), 0xea);
    v[2] = _mm512_ternarylogic_epi32(_mm512_srli_epi16(a, 4), m4, _mm512_and_si512(h, m30), 0xea);
    v[3] = _mm512_ternarylogic_epi32(_mm512_srli_epi16(c, 4), m4, _mm512_and_si512(_mm512_srli_epi16(h, 2), m30), 0xea);
}

/* Packed superblock b expanded into e (EXB bytes, 64-byte aligned). */
static void expand6(const uint8_t *b, uint8_t *e) {
    for (int u = 0; u < 16; u++) {
        __m512i v[4];
        unit_values(b, u, v);
        for (int j = 0; j < 4; j++) _mm512_store_si512((void *)(e + 256 * u + 64 * j), v[j]);
    }
    memcpy(e + EX_VALUES, b + TKV__Q6K_PACK_SCALES, PB - TKV__Q6K_PACK_SCALES);
}

/*
 * Superblocks [0, cnt) of one packed group at pk for T tokens (decode
 * steps): yb0[t] is token t's Q8_K block of the first one; acc[t] carries
 * the running sums of the 16 rows. pf: ask for the group's bytes
 * PREFETCH_AHEAD on (it streams from memory).
 */
INLINE void q6_run(const uint8_t *pk, size_t cnt, const uint8_t *const *yb0, __m512 *acc, int T, int pf) {
    for (size_t i = 0; i < cnt; i++) {
        const uint8_t *b = pk + i * PB, *yb[TT];
        __m512i sumi[TT];
        UNROLL
        for (int t = 0; t < T; t++) yb[t] = yb0[t] + i * QBS, sumi[t] = _mm512_setzero_si512();
        UNROLL
        for (int n = 0; n < 2; n++) {
            UNROLL
            for (int q = 0; q < 2; q++) { /* units 8n + 4q .. 8n + 4q + 3: sub-blocks 8n + 2v + q for values v */
                __m512i c[TT][4];
                UNROLL
                for (int t = 0; t < T; t++)
                    for (int v = 0; v < 4; v++) {
                        int16_t bs;
                        memcpy(&bs, yb[t] + Y_BSUMS + 2 * (8 * n + 2 * v + q), 2);
                        c[t][v] = _mm512_set1_epi32(-32 * bs);
                    }
                UNROLL
                for (int mm = 0; mm < 4; mm++) {
                    const int m = 4 * q + mm, u = 8 * n + m;
                    /* util.h's PREFETCH_AHEAD on, spread over the units (half a superblock at a time, as IQ4_XS
                       asks, and a quarter read 0-8% less on two threads from memory; noisy) */
                    if (pf) prefetch_span(b + PREFETCH_AHEAD + PB * (size_t)u / 16, PB / 16 + 64);
                    __m512i val[4];
                    unit_values(b, u, val);
                    UNROLL
                    for (int t = 0; t < T; t++) {
                        const uint8_t *a = yb[t] + Y_QS + 128 * n + 4 * m;
                        UNROLL
                        for (int v = 0; v < 4; v++) c[t][v] = dpbusd_bcast(c[t][v], val[v], a + 32 * v);
                    }
                }
                UNROLL
                for (int v = 0; v < 4; v++) {
                    /* dword k: row k's scales of sub-blocks 2p, 2p + 1 as words (p = 4n + v); this one's, signed */
                    const __m512i pw = _mm512_cvtepi8_epi16(LOAD256(b + TKV__Q6K_PACK_SCALES + 32 * (size_t)(4 * n + v)));
                    const __m512i sc = q ? _mm512_srai_epi32(pw, 16) : _mm512_srai_epi32(_mm512_slli_epi32(pw, 16), 16);
                    UNROLL
                    for (int t = 0; t < T; t++) sumi[t] = _mm512_add_epi32(sumi[t], _mm512_mullo_epi32(c[t][v], sc));
                }
            }
        }
        const __m512 dw = _mm512_cvtph_ps(LOADA256(b + TKV__Q6K_PACK_D));
        UNROLL
        for (int t = 0; t < T; t++) {
            float yd;
            memcpy(&yd, yb[t], sizeof yd);
            acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sumi[t]), _mm512_mul_ps(dw, _mm512_set1_ps(yd)), acc[t]);
        }
    }
}

/*
 * The same over expanded superblocks (ex), one sub-block at a time: its four
 * values' bytes are loads, so the tile keeps a sub-block's sum per token
 * instead of four, and the q - 32 offset comes off once per superblock: the
 * rows' scale pairs times the token's pairs of sums of 16 (eight vpdpwssd),
 * 32 times that off the integer.
 */
INLINE void q6_run_ex(const uint8_t *pk, size_t cnt, const uint8_t *const *yb0, __m512 *acc, int T) {
    for (size_t i = 0; i < cnt; i++) {
        const uint8_t *b = pk + i * EXB, *yb[TT];
        __m512i sumi[TT], sums[TT];
        UNROLL
        for (int t = 0; t < T; t++) yb[t] = yb0[t] + i * QBS, sumi[t] = sums[t] = _mm512_setzero_si512();
        _Pragma("GCC unroll 1")
        for (int p = 0; p < 8; p++) { /* sub-blocks 2p + q = 8n + 2v + q: value v of units 8n + 4q .. 8n + 4q + 3 */
            const int n = p / 4, v = p % 4;
            /* dword k: row k's scales of sub-blocks 2p and 2p + 1 as words */
            const __m512i pw = _mm512_cvtepi8_epi16(LOAD256(b + EX_VALUES + 32 * (size_t)p));
            UNROLL
            for (int t = 0; t < T; t++) sums[t] = _mm512_dpwssd_epi32(sums[t], pw, bcast32(yb[t] + Y_BSUMS + 4 * p));
            /* both sub-blocks' sums side by side: 2 T chains of vpdpbusd in flight */
            __m512i c[2][TT];
            UNROLL
            for (int t = 0; t < T; t++) c[0][t] = c[1][t] = _mm512_setzero_si512();
            UNROLL
            for (int mm = 0; mm < 4; mm++)
                UNROLL
                for (int q = 0; q < 2; q++) {
                    const int m = 4 * q + mm, u = 8 * n + m;
                    const __m512i val = _mm512_load_si512((const void *)(b + 256 * u + 64 * v));
                    UNROLL
                    for (int t = 0; t < T; t++)
                        c[q][t] = dpbusd_bcast(c[q][t], val, yb[t] + Y_QS + 128 * n + 32 * v + 4 * m);
                }
            const __m512i sc0 = _mm512_srai_epi32(_mm512_slli_epi32(pw, 16), 16), sc1 = _mm512_srai_epi32(pw, 16);
            UNROLL
            for (int t = 0; t < T; t++)
                sumi[t] = _mm512_add_epi32(sumi[t], _mm512_add_epi32(_mm512_mullo_epi32(c[0][t], sc0), _mm512_mullo_epi32(c[1][t], sc1)));
        }
        const __m512 dw = _mm512_cvtph_ps(LOADA256(b + EX_VALUES + (TKV__Q6K_PACK_D - TKV__Q6K_PACK_SCALES)));
        UNROLL
        for (int t = 0; t < T; t++) {
            float yd;
            memcpy(&yd, yb[t], sizeof yd);
            const __m512i total = _mm512_sub_epi32(sumi[t], _mm512_slli_epi32(sums[t], 5));
            acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(total), _mm512_mul_ps(dw, _mm512_set1_ps(yd)), acc[t]);
        }
    }
}

/* Each tile shape out of line (inlined into one pass function, the shapes' sums spilled). */
#define Q6_RUN_SHAPE(T)                                                                                                \
    NOINLINE void q6_run_##T(const uint8_t *pk, size_t cnt, const uint8_t *const *yb0, __m512 *acc, int pf, int ex) { \
        if (ex) q6_run_ex(pk, cnt, yb0, acc, T);                                                                       \
        else q6_run(pk, cnt, yb0, acc, T, pf);                                                                      \
    }
Q6_RUN_SHAPE(1)
Q6_RUN_SHAPE(2)
Q6_RUN_SHAPE(3)
Q6_RUN_SHAPE(4)

/* One group's tile (gemm_iq4_xs.c's xs_tile): T tokens over superblocks k0 .. k0 + cnt - 1 at pk. */
INLINE void q6_tile(const uint8_t *pk, size_t k0, size_t cnt, const uint8_t *const *yt, float *st, int first, int last,
                    float *y, size_t ldy, __mmask16 rmask, int T, int pf, int ex) {
    __m512 acc[TT], accm[TT];
    const uint8_t *yb[TT];
    UNROLL
    for (int t = 0; t < T; t++) yb[t] = yt[t] + k0 * QBS;
    sums_start(st, first, T, acc, accm);
    switch (T) { /* accm stays +0: acc - accm is acc */
    case 4: q6_run_4(pk, cnt, yb, acc, pf, ex); break;
    case 3: q6_run_3(pk, cnt, yb, acc, pf, ex); break;
    case 2: q6_run_2(pk, cnt, yb, acc, pf, ex); break;
    default: q6_run_1(pk, cnt, yb, acc, pf, ex); break;
    }
    sums_end(st, last, T, acc, accm, y, ldy, rmask);
}

/* Pass p's tokens in tiles of 4, 3, 2, 1 over its superblocks (expanded: ex); the first tile reads the group from
   memory when p streams it, the others from cache. */
INLINE void q6_tokens(const sb_pass *p, int ex) {
    const __mmask16 rmask = (__mmask16)((1u << p->nrow) - 1u);
#define Q6_TILE(T, yt, st, y, pf) q6_tile(p->pk, p->k0, p->cnt, yt, st, p->first, p->last, y, p->ldy, rmask, T, pf, ex)
    SB_TILES(p, TT, Q6_TILE)
#undef Q6_TILE
}

/* A pass (util.h's sb_pass): a few tokens straight from the packed superblocks; more over expanded panels of KCX
   superblocks, their sums through the pass's stash (or one of its own when the pass is a whole row). */
static void q6_pass(const sb_pass *p) {
    if (p->tn < EX_MIN) {
        q6_tokens(p, 0);
        return;
    }
    struct {
        alignas(64) uint8_t ex[KCX * EXB]; /* 35 KiB */
        alignas(64) float st[TC * 32];     /* 8 KiB */
    } b;
    _Static_assert(sizeof b <= 48 * 1024, "with the file-rows product's panel, under 80 KiB of stack (kernels.h)");
    for (size_t c0 = 0; c0 < p->cnt; c0 += KCX) {
        const size_t c = min_sz(KCX, p->cnt - c0);
        for (size_t i = 0; i < c; i++) {
            if (p->stream) prefetch_span(p->pk + (c0 + i + 1) * PB + PREFETCH_AHEAD, PB);
            expand6(p->pk + (c0 + i) * PB, b.ex + i * EXB);
        }
        sb_pass q = *p; /* the same tokens over this panel */
        q.pk = b.ex, q.k0 = p->k0 + c0, q.cnt = c, q.st = p->st ? p->st : b.st;
        q.first = p->first && c0 == 0, q.last = p->last && c0 + c == p->cnt, q.stream = 0;
        q6_tokens(&q, 1);
    }
}

/* Over packed rows (kernels.h's `packed`): each group read once per chunk of TC tokens. */
void tkv__packed_q6_K_avx512(size_t n, const void *w, size_t gs, size_t nr, const void *xq, size_t xrs, size_t n_tok,
                             float *y, size_t ldy) {
    sb_over_packed(q6_pass, n / TKV__QK_K, w, gs, nr, xq, xrs, n_tok, y, ldy, TC);
}

/* The 8 dwords at each p[k] (k < 16; NULL: zeros) as 8 vectors, vector m holding dword m of each in lane k: row
   k in the low half of zmm k % 8 (k < 8) or the high half, then an 8 x 8 transpose of dwords in both halves at
   once (pairs by unpack, quads by unpack of 64-bit pairs, 128-bit lanes by shuffle). */
INLINE void transpose8x16(const uint8_t *const p[16], __m512i out[8]) {
    __m512i z[8], a[8], c[8];
    for (int j = 0; j < 8; j++) {
        const __m256i lo = p[j] ? _mm256_loadu_si256((const __m256i *)(const void *)p[j]) : _mm256_setzero_si256();
        const __m256i hi = p[j + 8] ? _mm256_loadu_si256((const __m256i *)(const void *)p[j + 8]) : _mm256_setzero_si256();
        z[j] = _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
    }
    for (int j = 0; j < 4; j++) { /* rows 2j, 2j + 1 interleaved by dword */
        a[2 * j] = _mm512_unpacklo_epi32(z[2 * j], z[2 * j + 1]);
        a[2 * j + 1] = _mm512_unpackhi_epi32(z[2 * j], z[2 * j + 1]);
    }
    for (int j = 0; j < 2; j++) /* rows 4j .. 4j + 3 by pairs of dwords */
        for (int h = 0; h < 2; h++) {
            c[4 * j + 2 * h] = _mm512_unpacklo_epi64(a[4 * j + h], a[4 * j + 2 + h]);
            c[4 * j + 2 * h + 1] = _mm512_unpackhi_epi64(a[4 * j + h], a[4 * j + 2 + h]);
        }
    /* c[q] (q < 4): rows 0-3, dwords (q, q + 4) in its two 128-bit lanes of each half; c[4 + q]: rows 4-7 */
    for (int q = 0; q < 4; q++) {
        /* 128-bit lanes: [c_q.l0 (d q, rows 0-3), c_q.l1 (d q + 4, rows 0-3), c_q.l2 (d q, rows 8-11), c_q.l3 (...)] */
        const __m512i e = _mm512_shuffle_i32x4(c[q], c[4 + q], 0x88); /* lanes 0, 2 of each: dword q */
        const __m512i f = _mm512_shuffle_i32x4(c[q], c[4 + q], 0xdd); /* lanes 1, 3: dword q + 4 */
        /* e: [rows 0-3, rows 8-11, rows 4-7, rows 12-15]: put the lanes in row order */
        out[q] = _mm512_permutexvar_epi64(_mm512_setr_epi64(0, 1, 4, 5, 2, 3, 6, 7), e);
        out[q + 4] = _mm512_permutexvar_epi64(_mm512_setr_epi64(0, 1, 4, 5, 2, 3, 6, 7), f);
    }
}

/*
 * repack.h's Q6_K layout from 16 of the file's rows (NULL: a row past the
 * matrix, zeros), bit for bit tkv__pack_q6k_blocks, by transposes of 8
 * dwords of the 16 rows at a time: that packer's 4-byte copies held a
 * product of a few tokens over the file's rows to 10 GB/s (bench_kernels
 * -n 2048 -r 1024 -t 4, one thread), where the lane-wise tiles it replaced
 * read 23 (gathers: 13).
 */
static void pack6(const void *const rows[TKV__PACK_ROWS], size_t i0, size_t i1, void *out) {
    for (size_t i = i0; i < i1; i++) {
        uint8_t *o = (uint8_t *)out + (i - i0) * PB;
        const tkv__block_q6_K *blk[TKV__PACK_ROWS];
        for (int k = 0; k < TKV__PACK_ROWS; k++) blk[k] = rows[k] ? (const tkv__block_q6_K *)rows[k] + i : NULL;
        for (int n = 0; n < 2; n++) {
            /* units 8n + m: ql[64n + 4m], ql[64n + 32 + 4m], qh[32n + 4m] of each row */
            static const int at[3] = {0, 32, 128};
            for (int c = 0; c < 3; c++) {
                const uint8_t *p[TKV__PACK_ROWS];
                for (int k = 0; k < TKV__PACK_ROWS; k++)
                    p[k] = blk[k] ? (c < 2 ? blk[k]->ql + 64 * n + at[c] : blk[k]->qh + 32 * n) : NULL;
                __m512i v[8];
                transpose8x16(p, v);
                for (int m = 0; m < 8; m++) _mm512_store_si512((void *)(o + UNIT * (8 * n + m) + 64 * c), v[m]);
            }
        }
        pack6_tail(rows, i, o);
    }
}

/* Over the file's rows: per group of 16 rows, chunks of KC superblocks transposed into a panel on the stack (the
   packed layout), then every token's tiles over it, their sums carried in a stash. */
void tkv__gemm_q6_K_avx512(size_t n, const void *w, size_t wrs, size_t nr, const void *xq, size_t xrs, size_t n_tok,
                           float *y, size_t ldy) {
    struct {
        alignas(64) uint8_t pan[KC * PB]; /* 27 KiB */
        alignas(64) float st[TC * 32];    /* 8 KiB */
    } b;
    sb_over_rows(q6_pass, pack6, n / TKV__QK_K, w, wrs, nr, xq, xrs, n_tok, y, ldy, TC, KC, b.pan, b.st);
}

#endif
