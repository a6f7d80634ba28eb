/*
 * compute/x86/avx512/gemm_q2_q3_k.c — Q2_K and Q3_K products at the avx512 level (AVX-512 F/BW/VL + VNNI)
 * over the transposed layout of compute/quant/repack.h, in the block-reduced order of
 * compute/quant/quant.h (Q4_K's; for Q2_K the reference's over its repacked rows), so they equal the
 * level's vec_dot (and the scalar one) bit for bit: the product over packed rows (generation
 * reads every row once, in one sequential stream per group), and the tiled product over the
 * file's rows, which builds the same layout for a chunk of K on its stack first.
 *
 * Lane k of a zmm is row k of a group of 16, so a superblock reduces to one
 * integer per lane with no horizontal sums, as gemm_q4_q5_k.c's Q4_K. Per
 * 64-byte chunk of quants (4 bytes of each of 16 rows, 16 elements a row):
 * one and each gives the 2-bit values of its four sub-blocks where they lie
 * in the byte (value s times 4^s, which its sums of 16 shed once: a shift
 * per sub-block and token instead of one per value); per token one vpdpbusd
 * each with the token's 4 activation bytes broadcast (the values unsigned,
 * the activations signed; util.h's dpbusd_bcast). Four chunks
 * make a sub-block's sum of 16; per pair of sub-blocks and token the two
 * sums as a row's word pair times its pair of scales (one vpdpwssd: vpmulld
 * per sub-block halved the tiles' speed); per superblock and token the mins'
 * term in eight vpdpwssd (a row's two mins times the token's two sums of
 * 16), then two conversions, two scale products and two fmas for all 16
 * rows. The lane-wise product this replaces (a row pair per zmm, scales
 * picked by permutes, the mins' fma per row and block) took about 2.4 times
 * the instructions per weight.
 *
 * Tokens run in tiles of up to 4 over a group.
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
    ROWS = TKV__PACK_ROWS,    /* rows per group: a zmm's lanes */
    QBS = sizeof(tkv__block_q8_K),
    TT = 4,       /* tokens per tile */
    KC = 16,      /* superblocks per panel of the file-rows product (Q2_K 21 KiB, Q3_K 28.5 KiB) */
    TC = 64,      /* tokens per chunk: their activations stay in L2 while the groups pass */
    Y_QS = 4,     /* offset of a Q8_K block's quants */
    Y_BSUMS = 260 /* ... and of its 16 sums of 16 */
};

/*
 * A superblock expanded for products of many tokens (ex): value s of quant
 * chunk j (Q3_K's with its high bit: 0..7) as 64 bytes at 64 (4j + s), then
 * the packed superblock's tail from its scales on (scales, d and Q2_K's
 * dmin, at Q2_K's offsets from it in repack.h's layout; Q3_K's d, apart in
 * its run there, follows its scales here as Q2_K's does). Unpacking the
 * values once per panel instead of once per tile of 4 tokens made Q3_K's
 * prefill 1.5 times as fast (its high bits take two more operations a value).
 */
enum { EX_VALUES = 4096, EX_BLOCK = EX_VALUES + 320 /* 69 cache lines */, KCX = 8 /* superblocks per expanded panel */ };

/* Bytes of a group's superblock, and the offset of its scales (d 256 bytes on, Q2_K's dmin 288). */
#define SBYTES(three, ex) ((ex) ? EX_BLOCK : (three) ? TKV__Q3K_PACK_BLOCK : TKV__Q2K_PACK_BLOCK)
#define TAIL(three, ex) ((ex) ? EX_VALUES : (three) ? TKV__Q3K_PACK_SCALES : TKV__Q2K_PACK_SCALES)

/* The scale bytes of sub-blocks 2h and 2h + 1 of the 16 rows as words: word 2k + e is row k's byte of sub-block
   2h + e (repack.h; Q2_K's scale and min nibbles, Q3_K's signed sc - 32). */
static inline __m512i scale_words(const uint8_t *b, int h, int three, int ex) {
    if (three) return _mm512_cvtepi8_epi16(LOAD256(b + TAIL(three, ex) + 32 * h));
    return _mm512_cvtepu8_epi16(LOAD256(b + TAIL(three, ex) + 32 * h));
}

/* Value s of quant chunk j of the packed superblock b (Q3_K: + 4 where bit 4 (j / 8) + s of its hmask byte is set). */
static inline __m512i chunk_value(const uint8_t *b, int j, int s, int three) {
    const __m512i q = _mm512_load_si512((const void *)(b + 64 * j));
    __m512i v = _mm512_and_si512(s ? _mm512_srli_epi32(q, 2 * s) : q, _mm512_set1_epi8(3));
    if (three) {
        const __m512i hm = _mm512_load_si512((const void *)(b + TKV__Q3K_PACK_HMASK + 64 * (j % 8)));
        const __mmask64 hi = _mm512_test_epi8_mask(hm, _mm512_set1_epi8((char)(1 << (4 * (j / 8) + s))));
        v = _mm512_mask_add_epi8(v, hi, v, _mm512_set1_epi8(4));
    }
    return v;
}

/*
 * Where chunk_weighted leaves value s: its low bit's place in the byte, so that the value comes times 2^lsb(s)
 * (the two bits where they lie; Q3_K's value 3 a bit lower, so that its high bit above them stays in the byte).
 */
static inline int lsb(int s, int three) { return three && s == 3 ? 5 : 2 * s; }

/*
 * Value s of quant chunk j of the packed superblock b times 2^lsb(s), from the chunk's quants q and (Q3_K) its
 * hmask bytes hm: one and where chunk_value shifts and ands, and Q3_K's high bit or'ed in above the two (its
 * byte shifted there, shared by the values whose bits lie alike, and one ternlog) where chunk_value tests and adds.
 * The one-token products take this: their sums of 16 come off the weight once per sub-block instead. One thread,
 * a product in L2 (bench_kernels -n 2048 -r 1024 -T 1 -c 1024, Zen 5, 3 interleaved runs): Q2_K 71 -> 96 GB/s,
 * Q3_K 61 -> 79, and with dpbusd_bcast 99 and 84 (without the and trick the broadcasts' own instructions cost
 * nothing measurable).
 */
static inline __m512i chunk_weighted(__m512i q, __m512i hm, int j, int s, int three) {
    const int l = lsb(s, three);
    if (!three) return _mm512_and_si512(q, _mm512_set1_epi8((char)(3 << l)));
    const __m512i lo = _mm512_and_si512(l == 2 * s ? q : _mm512_srli_epi32(q, 2 * s - l), _mm512_set1_epi8((char)(3 << l)));
    const int hb = 4 * (j / 8) + s, to = l + 2; /* the high bit's place in hm, and in the value */
    const __m512i h = to > hb ? _mm512_slli_epi32(hm, to - hb) : to < hb ? _mm512_srli_epi32(hm, hb - to) : hm;
    return _mm512_ternarylogic_epi32(lo, h, _mm512_set1_epi8((char)(1 << to)), 0xF8); /* lo | (h & bit) */
}

/* The packed superblock b (Q3_K: its d at d, apart in the run) expanded into e (EX_BLOCK bytes, 64-byte aligned). */
static void expand23(const uint8_t *b, const uint8_t *d, uint8_t *e, int three) {
    for (int j = 0; j < 16; j++)
        for (int s = 0; s < 4; s++) _mm512_store_si512((void *)(e + 64 * (4 * j + s)), chunk_value(b, j, s, three));
    if (three) {
        memcpy(e + EX_VALUES, b + TKV__Q3K_PACK_SCALES, 256);
        memcpy(e + EX_VALUES + 256, d, 32);
    } else {
        memcpy(e + EX_VALUES, b + TKV__Q2K_PACK_SCALES, TKV__Q2K_PACK_BLOCK - TKV__Q2K_PACK_SCALES);
    }
}

/*
 * Superblocks [0, cnt) of one group of Q2_K (three: Q3_K) rows at pk for T
 * tokens (a run of them: Q3_K's d's follow it unless ex, repack.h), yb0[t] is token t's Q8_K block of the first one. acc[t] and
 * accm[t] carry the scales' and (Q2_K) the mins' running sums of the 16 rows.
 *
 * Q3_K's values are the low bits plus 4 where the high bit is set (0..7,
 * unsigned for vpdpbusd: a byte test and a masked add per value), so each
 * sub-block's sum is 4 times its activations' sum too high: the scales times
 * the token's sums of 16 (eight vpdpwssd, as Q2_K's mins) times 4 come off
 * the superblock's integer.
 */
INLINE void q23k_run(const uint8_t *pk, size_t cnt, const uint8_t *const *yb0, __m512 *acc, __m512 *accm, int T,
                     int three, int ex, int pf) {
    const size_t SB = SBYTES(three, ex), PF = PREFETCH_NEAR / SB + 1; /* Q3_K's near distance, in superblocks */
    /* a chunk's values taken SA at a time, so that the tile's 2 T SA sums (8) and its running sums stay in the 32
       registers: all 4 for one token, 2 for two, 1 for more (the chunk's line read again from L1) */
    const int SA = T >= 3 ? 1 : T == 2 ? 2 : 4;
    const __m512i m15 = _mm512_set1_epi16(15);
    for (size_t i = 0; i < cnt; i++) {
        const uint8_t *b = pk + i * SB, *yb[TT];
        __m512i sumi[TT], summ[TT];
        UNROLL
        for (int t = 0; t < T; t++) yb[t] = yb0[t] + i * QBS, sumi[t] = _mm512_setzero_si512(), summ[t] = sumi[t];
        UNROLL
        for (int p = 0; p < 2; p++) { /* half p: chunks 8p .. 8p + 7, sub-blocks 8p .. 8p + 7 */
            UNROLL
            for (int s0 = 0; s0 < 4; s0 += SA) { /* each chunk's values s0 .. s0 + SA - 1 */
                /* value s of chunks 8p .. 8p + 3 is sub-block 8p + 2s, of chunks 8p + 4 .. 8p + 7 sub-block 8p + 2s + 1 */
                __m512i se[TT][4], so[TT][4];
                UNROLL
                for (int t = 0; t < T; t++)
                    for (int s = 0; s < SA; s++) se[t][s] = _mm512_setzero_si512(), so[t][s] = se[t][s];
                UNROLL
                for (int jj = 0; jj < 8; jj++) {
                    const int j = 8 * p + jj;
                    /* lines 2j and 2j + 1 of the superblock ahead, in order (Q3_K read 3-9% faster so than quants and
                       hmask interleaved). Q3_K at util.h's two distances, Q2_K at PREFETCH_AHEAD alone: products of
                       2048 rows from memory (bench_kernels -n 2048 -r 131072 -c 2048, Zen 5, interleaved runs each
                       between two read probes, 2026-12-07), medians: two threads, Q2_K 84 -> 97 GB/s where the
                       probe read 65 or more, 60 -> 65 where it read under 60; Q3_K 49 GB/s against 41 at one
                       distance (8 or 16 KiB, T0 or NTA). Q3_K's far line goes to L1 too (T0): 69.7 -> 78.4 GB/s
                       where the probe read 70 or more (n = 28, 29), 49.8 -> 50.2 under 60; 2 superblocks near
                       instead of 3, or the far one at 16 or 64 KiB, read 67-72 there */
                    if (pf && s0 == 0 && three && !ex && j == 0) /* the d's ahead (repack.h) */
                        _mm_prefetch((const char *)pk + TKV__Q3K_PACK_DS_NEXT(cnt, i), _MM_HINT_T0);
                    if (pf && s0 == 0)
                        for (size_t o = 128 * (size_t)j; o < 128 * (size_t)j + 128 && o < SB; o += 64) {
                            if (three) {
                                _mm_prefetch((const char *)b + PF * SB + o, _MM_HINT_T0);
                                _mm_prefetch((const char *)b + PREFETCH_FAR + o, _MM_HINT_T0);
                            } else {
                                _mm_prefetch((const char *)b + PREFETCH_AHEAD + o, _MM_HINT_T0);
                            }
                        }
                    __m512i v[4];
                    const __m512i q = _mm512_load_si512((const void *)(b + 64 * j));
                    const __m512i hm = three ? _mm512_load_si512((const void *)(b + TKV__Q3K_PACK_HMASK + 64 * (j % 8))) : q;
                    UNROLL
                    for (int s = 0; s < SA; s++)
                        v[s] = ex ? _mm512_load_si512((const void *)(b + 64 * (4 * j + s0 + s))) : chunk_weighted(q, hm, j, s0 + s, three);
                    UNROLL
                    for (int t = 0; t < T; t++) {
                        const uint8_t *a = yb[t] + Y_QS + 128 * p + 4 * jj;
                        UNROLL
                        for (int s = 0; s < SA; s++) {
                            if (jj < 4) se[t][s] = dpbusd_bcast(se[t][s], v[s], a + 32 * (s0 + s));
                            else so[t][s] = dpbusd_bcast(so[t][s], v[s], a + 32 * (s0 + s));
                        }
                    }
                }
                /* both sums of 16 fit a word (16 x 7 x 127): a row's pair of them by its pair of scales, one vpdpwssd */
                UNROLL
                for (int s = 0; s < SA; s++) {
                    const __m512i w = scale_words(b, 4 * p + s0 + s, three, ex);
                    const __m512i sc = three ? w : _mm512_and_si512(w, m15);
                    const int l = ex ? 0 : lsb(s0 + s, three); /* chunk_weighted's weight comes off here */
                    UNROLL
                    for (int t = 0; t < T; t++) {
                        const __m512i e = l ? _mm512_srli_epi32(se[t][s], l) : se[t][s];
                        sumi[t] = _mm512_dpwssd_epi32(
                            sumi[t], _mm512_mask_blend_epi16(0xAAAAAAAAu, e, _mm512_slli_epi32(so[t][s], 16 - l)), sc);
                    }
                }
            }
        }
        /* Q2_K: the mins by the token's sums of 16; Q3_K: the scales by them, 4 times that off the sums */
        UNROLL
        for (int h = 0; h < 8; h++) {
            const __m512i w = scale_words(b, h, three, ex);
            const __m512i mn = three ? w : _mm512_srli_epi16(w, 4);
            UNROLL
            for (int t = 0; t < T; t++) summ[t] = _mm512_dpwssd_epi32(summ[t], mn, bcast32(yb[t] + Y_BSUMS + 4 * h));
        }
        const __m512 dw = _mm512_cvtph_ps(LOAD256(three && !ex ? pk + TKV__Q3K_PACK_DS(cnt, i) : b + TAIL(three, ex) + 256));
        const __m512 dm = three ? dw : _mm512_cvtph_ps(LOAD256(b + TAIL(three, ex) + 288));
        UNROLL
        for (int t = 0; t < T; t++) {
            float yd;
            memcpy(&yd, yb[t], sizeof yd);
            const __m512 d = _mm512_set1_ps(yd);
            if (three) {
                acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(sumi[t], _mm512_slli_epi32(summ[t], 2))),
                                         _mm512_mul_ps(dw, d), acc[t]);
            } else {
                acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sumi[t]), _mm512_mul_ps(dw, d), acc[t]);
                accm[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(summ[t]), _mm512_mul_ps(dm, d), accm[t]);
            }
        }
    }
}

/*
 * One group (pk: its superblock k0; cnt superblocks) for the T tokens at
 * yt[t] (their rows; block k0 of each is read first): the running sums from
 * the stash st (2 T zmm; zero when first), back to it, or when last to y[t
 * ldy + k] for the rows in rmask.
 */
INLINE void q23k_tile(const uint8_t *pk, size_t k0, size_t cnt, const uint8_t *const *yt, float *st, int first, int last,
                      float *y, size_t ldy, __mmask16 rmask, int T, int three, int ex, int pf) {
    __m512 acc[TT], accm[TT];
    const uint8_t *yb[TT];
    UNROLL
    for (int t = 0; t < T; t++) yb[t] = yt[t] + k0 * QBS;
    sums_start(st, first, T, acc, accm);
    q23k_run(pk, cnt, yb, acc, accm, T, three, ex, pf); /* Q3_K's accm stays +0: acc - accm is acc */
    sums_end(st, last, T, acc, accm, y, ldy, rmask);
}

/* Pass p (util.h's sb_pass) in tiles of 4, 3, 2, 1; the first tile reads the group from memory when p streams it, the others from cache. */
INLINE void q23k_tokens(const sb_pass *p, int three, int ex) {
    const __mmask16 rmask = (__mmask16)((1u << p->nrow) - 1u);
#define Q23K_TILE(T, yt, st, y, pf) q23k_tile(p->pk, p->k0, p->cnt, yt, st, p->first, p->last, y, p->ldy, rmask, T, three, ex, pf)
    SB_TILES(p, TT, Q23K_TILE)
#undef Q23K_TILE
}

/* A product's buffers for many tokens (on the stack): an expanded panel, the packed superblock it is made from
   when the rows are the file's, and the tiles' stash. */
typedef struct ex_bufs {
    alignas(64) uint8_t pan[KCX * EX_BLOCK];        /* 35 KiB */
    alignas(64) uint8_t one[TKV__Q3K_PACK_RUN(1)];  /* 2 KiB */
    alignas(64) float st[TC * 32];                  /* 8 KiB */
} ex_bufs;

/*
 * Tokens [t0, t0 + tn) over one group through expanded panels of KCX
 * superblocks: made from the packed group at pk, or (rows not NULL) from
 * the file's rows, one superblock packed at a time.
 */
INLINE void group_ex(const uint8_t *pk, const void *const *rows, size_t nb, const uint8_t *xb, size_t xrs, size_t t0,
                     size_t tn, float *y, size_t ldy, size_t nrow, int three, ex_bufs *b) {
    for (size_t k0 = 0; k0 < nb; k0 += KCX) {
        const size_t cnt = min_sz(KCX, nb - k0);
        for (size_t i = 0; i < cnt; i++) {
            const uint8_t *src = b->one, *d = b->one + TKV__Q3K_PACK_DS(1, 0); /* Q3_K's d, apart in its run */
            if (rows) {
                if (three) tkv__pack_q3k_blocks(rows, k0 + i, k0 + i + 1, b->one);
                else tkv__pack_q2k_blocks(rows, k0 + i, k0 + i + 1, b->one);
            } else {
                src = pk + (k0 + i) * SBYTES(three, 0), d = pk + TKV__Q3K_PACK_DS(nb, k0 + i);
            }
            expand23(src, d, b->pan + i * EX_BLOCK, three);
        }
        q23k_tokens(&(sb_pass){.pk = b->pan, .k0 = k0, .cnt = cnt, .xb = xb, .xrs = xrs, .t0 = t0, .tn = tn, .st = b->st,
                                .first = k0 == 0, .last = k0 + cnt == nb, .y = y, .ldy = ldy, .nrow = nrow},
                    three, 1);
    }
}

/* Tokens from which a chunk's products go through expanded panels (two tiles and more). */
enum { EX_MIN_TOK = 2 * TT };

/* Over packed rows (kernels.h's `packed`): w is the first group, gs the stride between groups; each group is
   read once per chunk of TC tokens, whole (a Q2_K group of a 8192-long row is 42 KiB: L2), its tiles one after
   another, straight from the packed rows for a few tokens (decode steps), through expanded panels for more. */
INLINE void packed23(size_t n, const void *w, size_t gs, size_t nr, const void *xq, size_t xrs, size_t n_tok, float *y,
                     size_t ldy, int three) {
    const uint8_t *wb = w, *xb = xq;
    const size_t nb = n / TKV__QK_K;
    ex_bufs b;
    _Static_assert(sizeof b <= 80 * 1024, "the buffers of a product live on the stack (kernels.h: under 80 KiB)");
    for (size_t t0 = 0; t0 < n_tok; t0 += TC) {
        const size_t tn = min_sz(TC, n_tok - t0);
        for (size_t r = 0; r < nr; r += ROWS) {
            if (tn >= EX_MIN_TOK)
                group_ex(wb + r / ROWS * gs, NULL, nb, xb, xrs, t0, tn, y + r, ldy, min_sz(ROWS, nr - r), three, &b);
            else
                q23k_tokens(&(sb_pass){.pk = wb + r / ROWS * gs, .cnt = nb, .xb = xb, .xrs = xrs, .t0 = t0, .tn = tn,
                                       .first = 1, .last = 1, .y = y + r, .ldy = ldy, .nrow = min_sz(ROWS, nr - r),
                                       .stream = 1},
                            three, 0);
        }
    }
}

/* Over the file's rows (wrs bytes apart): per group of 16 rows, its superblocks packed into the layout above, then
   as over packed rows (a few tokens: KC superblocks at a time on the stack, their sums carried in a stash). */
INLINE void gemm23(size_t n, const void *w, size_t wrs, size_t nr, const void *xq, size_t xrs, size_t n_tok, float *y,
                   size_t ldy, int three) {
    const uint8_t *wb = w, *xb = xq;
    const size_t nb = n / TKV__QK_K;
    union {
        ex_bufs ex;
        struct {
            alignas(64) uint8_t pan[TKV__Q3K_PACK_RUN(KC)]; /* 28.5 KiB */
            alignas(64) float st[TC * 32];                     /* 8 KiB */
        } few;
    } b;
    _Static_assert(sizeof b <= 80 * 1024, "the buffers of a product live on the stack (kernels.h: under 80 KiB)");
    for (size_t t0 = 0; t0 < n_tok; t0 += TC) {
        const size_t tn = min_sz(TC, n_tok - t0);
        for (size_t r = 0; r < nr; r += ROWS) {
            const void *rows[ROWS];
            for (size_t k = 0; k < ROWS; k++) rows[k] = r + k < nr ? wb + (r + k) * wrs : NULL;
            if (tn >= EX_MIN_TOK) {
                group_ex(NULL, rows, nb, xb, xrs, t0, tn, y + r, ldy, min_sz(ROWS, nr - r), three, &b.ex);
                continue;
            }
            for (size_t k0 = 0; k0 < nb; k0 += KC) {
                const size_t cnt = min_sz(KC, nb - k0);
                if (three) tkv__pack_q3k_blocks(rows, k0, k0 + cnt, b.few.pan);
                else tkv__pack_q2k_blocks(rows, k0, k0 + cnt, b.few.pan);
                q23k_tokens(&(sb_pass){.pk = b.few.pan, .k0 = k0, .cnt = cnt, .xb = xb, .xrs = xrs, .t0 = t0, .tn = tn,
                                       .st = b.few.st, .first = k0 == 0, .last = k0 + cnt == nb, .y = y + r, .ldy = ldy,
                                       .nrow = min_sz(ROWS, nr - r)},
                            three, 0);
            }
        }
    }
}

void tkv__packed_q2_K_avx512(size_t n, const void *w, size_t gs, size_t nr, const void *xq, size_t xrs, size_t n_tok,
                             float *y, size_t ldy) {
    packed23(n, w, gs, nr, xq, xrs, n_tok, y, ldy, 0);
}

void tkv__packed_q3_K_avx512(size_t n, const void *w, size_t gs, size_t nr, const void *xq, size_t xrs, size_t n_tok,
                             float *y, size_t ldy) {
    packed23(n, w, gs, nr, xq, xrs, n_tok, y, ldy, 1);
}

void tkv__gemm_q2_K_avx512(size_t n, const void *w, size_t wrs, size_t nr, const void *xq, size_t xrs, size_t n_tok,
                           float *y, size_t ldy) {
    gemm23(n, w, wrs, nr, xq, xrs, n_tok, y, ldy, 0);
}

void tkv__gemm_q3_K_avx512(size_t n, const void *w, size_t wrs, size_t nr, const void *xq, size_t xrs, size_t n_tok,
                           float *y, size_t ldy) {
    gemm23(n, w, wrs, nr, xq, xrs, n_tok, y, ldy, 1);
}

#endif
