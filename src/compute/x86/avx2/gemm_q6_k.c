/*
 * compute/x86/avx2/gemm_q6_k.c — Q6_K products at the avx2 level over the transposed layout of
 * compute/quant/repack.h, in the block-reduced order of compute/quant/quant.h, bit for bit the
 * level's vec_dot (and the scalar one): the product over packed rows and the tiled product over
 * the file's rows (which builds the same layout for a chunk of K on its stack). The avx512
 * level's gemm_q6_k.c says why the layout.
 *
 * A ymm's lane k is row 8h + k of the group's half h. Per value of a unit
 * (4 elements of each of 8 rows, 0..63 as unsigned bytes: the low bits'
 * and, the high bits' shift and and, an or) and token: vpmaddubsw by the
 * token's 4 activation bytes (pairs of at most 2 x 63 x 128: no
 * saturation), then vpmaddwd by the rows' scale of the value's sub-block
 * as a word pair, added into one sum per token: the scale costs nothing
 * beyond the widening every product needs. The scales sit in the layout
 * as each row's pair of sub-blocks (repack.h), so one vpmaddwd a pair of
 * sub-blocks and token also takes their scales times the token's two sums
 * of 16, the q - 32 offset: 32 times that comes off the sum once per
 * superblock. Per superblock one conversion, the scale product and one fma.
 * The values are taken one pair of sub-blocks at a time (each unit's
 * chunks loaded again from L1 for each), so the sixteen registers hold the
 * tile. One token from L1, against the sub-block sums times the scales by
 * vpmulld: 31 -> 47 GB/s (bench_kernels -l avx2, Zen 5).
 *
 * Decode steps run straight from the packed rows (tiles of up to 2
 * tokens); 8 tokens and more first expand each superblock's values to
 * bytes (the avx512 level's expanded layout), KCX superblocks at a time.
 */
#include "compute/gemm.h"
#include "util.h"
#include "compute/quant/quant.h"
#include "compute/quant/repack.h"

#include <stdalign.h>
#include <stdint.h>
#include <string.h>

#if defined(__x86_64__) && defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include <immintrin.h>

enum {
    QBS = sizeof(tkv__block_q8_K),
    PB = TKV__Q6K_PACK_BLOCK,
    UNIT = TKV__Q6K_PACK_UNIT,
    TT = 2,        /* tokens per tile */
    KC = 8,        /* superblocks per panel of the file-rows product (27 KiB) */
    TC = 64,       /* tokens per chunk: their activations stay in L2 while the groups pass */
    Y_QS = 4,      /* offset of a Q8_K block's quants */
    Y_BSUMS = 260, /* ... and of its 16 sums of 16 */
    /* an expanded superblock: unit u's four values at 256 u (64 bytes each), then the packed superblock's tail */
    EX_VALUES = 4096,
    EXB = EX_VALUES + (PB - TKV__Q6K_PACK_SCALES),
    KCX = 8,    /* superblocks per expanded panel (35 KiB) */
    EX_MIN = 8, /* tokens from which a pass expands its superblocks first */
};

#define SCALES(ex) ((ex) ? (size_t)EX_VALUES : (size_t)TKV__Q6K_PACK_SCALES)
#define DOFF(ex) (SCALES(ex) + (TKV__Q6K_PACK_D - TKV__Q6K_PACK_SCALES))

/* Value v (0..3: elements at + 0, 32, 64, 96) of unit u of packed superblock b, half h (rows 8h ..). */
INLINE __m256i unit_value(const uint8_t *b, int u, int v, int h) {
    const __m256i m4 = _mm256_set1_epi8(0x0f), m30 = _mm256_set1_epi8(0x30);
    const uint8_t *p = b + UNIT * u + 32 * h;
    const __m256i x = LOADA256(p + 64 * (v % 2)), hb = LOADA256(p + 128);
    const __m256i lo = v < 2 ? x : _mm256_srli_epi16(x, 4);
    /* the two high bits of value v are bits 2v, 2v + 1 of hb: to bits 4, 5 */
    const __m256i hi = v == 0 ? _mm256_slli_epi16(hb, 4) : v == 1 ? _mm256_slli_epi16(hb, 2) : v == 2 ? hb : _mm256_srli_epi16(hb, 2);
    return _mm256_or_si256(_mm256_and_si256(lo, m4), _mm256_and_si256(hi, m30));
}

/* Packed superblock b expanded into e (EXB bytes, 64-byte aligned). */
static void expand6(const uint8_t *b, uint8_t *e) {
    for (int u = 0; u < 16; u++)
        for (int v = 0; v < 4; v++)
            for (int h = 0; h < 2; h++) _mm256_store_si256((__m256i *)(void *)(e + 256 * u + 64 * v + 32 * h), unit_value(b, u, v, h));
    memcpy(e + EX_VALUES, b + TKV__Q6K_PACK_SCALES, PB - TKV__Q6K_PACK_SCALES);
}

/* Sub-blocks 2p and 2p + 1 (= 8n + 2v + q: value v of units 8n + 4q .. 8n + 4q + 3) of superblock b, half h, into the
   T tokens' sums (sumi) and their sums of 16 times the scales (sums). */
INLINE void q6_pair(const uint8_t *b, int p, int h, int NH, size_t SB, size_t PF, const uint8_t *const *yb, __m256i *sumi,
                    __m256i *sums, int T, int pf, int ex) {
    /* a dword's low word twice, its high word twice */
    const __m256i dup0 = _mm256_setr_epi8(0, 1, 0, 1, 4, 5, 4, 5, 8, 9, 8, 9, 12, 13, 12, 13, /**/
                                          0, 1, 0, 1, 4, 5, 4, 5, 8, 9, 8, 9, 12, 13, 12, 13);
    const __m256i dup1 = _mm256_add_epi8(dup0, _mm256_set1_epi8(2));
    const int n = p / 4, v = p % 4;
    if (pf) /* the superblock PF on, spread over the steps (a burst held the loads behind it) */
        prefetch_span(b + PF + SB * (size_t)(8 * h + p) / (size_t)(8 * NH), SB / (size_t)(8 * NH) + 64);
    /* dword k: row 8h + k's scales of sub-blocks 2p and 2p + 1 as words */
    const __m256i pw = _mm256_cvtepi8_epi16(LOAD128(b + SCALES(ex) + 32 * (size_t)p + 16 * (size_t)h));
    const __m256i sw[2] = {_mm256_shuffle_epi8(pw, dup0), _mm256_shuffle_epi8(pw, dup1)};
    UNROLL
    for (int t = 0; t < T; t++) sums[t] = _mm256_add_epi32(sums[t], _mm256_madd_epi16(pw, bcast32(yb[t] + Y_BSUMS + 4 * p)));
    UNROLL
    for (int m = 0; m < 8; m++) {
        const int u = 8 * n + m;
        const __m256i val = ex ? LOADA256(b + 256 * u + 64 * v + 32 * h) : unit_value(b, u, v, h);
        UNROLL
        for (int t = 0; t < T; t++)
            sumi[t] = _mm256_add_epi32(
                sumi[t], _mm256_madd_epi16(_mm256_maddubs_epi16(val, bcast32(yb[t] + Y_QS + 128 * n + 32 * v + 4 * m)),
                                           sw[m / 4]));
    }
}

/*
 * Superblocks [0, cnt) of one group at pk (packed, or expanded: ex) for T
 * tokens, the group's first nrow rows: yb0[t] is token t's Q8_K block of
 * the first superblock; acc[2 t + h] carries token t's running sums of half
 * h. pf: ask for the group's bytes PREFETCH_AHEAD on.
 */
INLINE void q6_run(const uint8_t *pk, size_t cnt, size_t nrow, const uint8_t *const *yb0, __m256 *acc, int T, int pf,
                   int ex) {
    const size_t SB = ex ? EXB : PB, PF = (PREFETCH_AHEAD / SB + 1) * SB;
    const int NH = nrow > 8 ? 2 : 1;
    for (size_t i = 0; i < cnt; i++) {
        const uint8_t *b = pk + i * SB, *yb[TT];
        UNROLL
        for (int t = 0; t < T; t++) yb[t] = yb0[t] + i * QBS;
        for (int h = 0; h < NH; h++) {
            __m256i sumi[TT], sums[TT];
            UNROLL
            for (int t = 0; t < T; t++) sumi[t] = sums[t] = _mm256_setzero_si256();
            if (ex) { /* the values are loads: a loop (unrolled, it spilled the sums: prefill 147 -> 190 GF/s) */
                _Pragma("GCC unroll 1")
                for (int p = 0; p < 8; p++) q6_pair(b, p, h, NH, SB, PF, yb, sumi, sums, T, 0, 1);
            } else { /* the shifts that make a value depend on which it is: unrolled */
                UNROLL
                for (int p = 0; p < 8; p++) q6_pair(b, p, h, NH, SB, PF, yb, sumi, sums, T, pf, 0);
            }
            const __m256 dw = _mm256_cvtph_ps(LOAD128(b + DOFF(ex) + 16 * (size_t)h));
            UNROLL
            for (int t = 0; t < T; t++) {
                float yd;
                memcpy(&yd, yb[t], sizeof yd);
                const __m256i total = _mm256_sub_epi32(sumi[t], _mm256_slli_epi32(sums[t], 5)); /* q - 32: 32 sc bsum off */
                acc[2 * t + h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(total), _mm256_mul_ps(dw, _mm256_set1_ps(yd)), acc[2 * t + h]);
            }
        }
    }
}

/* Each tile shape on its own, out of line: inlined into one pass function the four of them spilled their sums
   (one token from L1: 34 GB/s, 42 out of line). */
NOINLINE void q6_run_1(const uint8_t *pk, size_t cnt, size_t nrow, const uint8_t *const *yb0, __m256 *acc, int pf, int ex) {
    if (ex) q6_run(pk, cnt, nrow, yb0, acc, 1, 0, 1);
    else q6_run(pk, cnt, nrow, yb0, acc, 1, pf, 0);
}

NOINLINE void q6_run_2(const uint8_t *pk, size_t cnt, size_t nrow, const uint8_t *const *yb0, __m256 *acc, int pf, int ex) {
    if (ex) q6_run(pk, cnt, nrow, yb0, acc, 2, 0, 1);
    else q6_run(pk, cnt, nrow, yb0, acc, 2, pf, 0);
}

/* One group's tile (gemm_iq4_xs.c's xs_tile): T tokens over superblocks k0 .. k0 + cnt - 1 at pk. */
INLINE void q6_tile(const uint8_t *pk, size_t k0, size_t cnt, const uint8_t *const *yt, float *st, int first, int last,
                    float *y, size_t ldy, size_t nrow, int T, int pf, int ex) {
    const uint8_t *yb[TT];
    __m256 acc[2 * TT], accm[2 * TT]; /* acc[2 t + h]; accm stays +0 (util.h's sums take acc - accm) */
    UNROLL
    for (int t = 0; t < T; t++) {
        yb[t] = yt[t] + k0 * QBS;
        for (int h = 0; h < 2; h++) sums_start(st ? st + 32 * t : NULL, first, 1, h, &acc[2 * t + h], &accm[2 * t + h]);
    }
    if (T == 2) q6_run_2(pk, cnt, nrow, yb, acc, pf, ex);
    else q6_run_1(pk, cnt, nrow, yb, acc, pf, ex);
    UNROLL
    for (int t = 0; t < T; t++)
        for (int h = 0; h < 2 && (size_t)h * 8 < nrow; h++)
            sums_end(st ? st + 32 * t : NULL, last, 1, h, &acc[2 * t + h], &accm[2 * t + h], y + (size_t)t * ldy, ldy, nrow);
}

/* Pass p's tokens in tiles of 2 and 1 over its superblocks (expanded: ex); the first tile reads the group from
   memory when p streams it, the others from cache. */
INLINE void q6_tokens(const sb_pass *p, int ex) {
    for (size_t u = 0; u < p->tn;) {
        const uint8_t *yt[TT];
        float *sb, *yo;
        const int T = sb_tile(p, u, TT, yt, &sb, &yo), pf = p->stream && u == 0;
        if (T == 2) q6_tile(p->pk, p->k0, p->cnt, yt, sb, p->first, p->last, yo, p->ldy, p->nrow, 2, pf, ex);
        else q6_tile(p->pk, p->k0, p->cnt, yt, sb, p->first, p->last, yo, p->ldy, p->nrow, 1, pf, ex);
        u += (size_t)T;
    }
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
        for (size_t i = 0; i < c; i++) expand6(p->pk + (c0 + i) * PB, b.ex + i * EXB);
        sb_pass q = *p; /* the same tokens over this panel */
        q.pk = b.ex, q.k0 = p->k0 + c0, q.cnt = c, q.st = p->st ? p->st : b.st;
        q.first = p->first && c0 == 0, q.last = p->last && c0 + c == p->cnt, q.stream = 0;
        q6_tokens(&q, 1);
    }
}

/* Over packed rows (kernels.h's `packed`): each group read once per chunk of TC tokens. */
void tkv__packed_q6_K_avx2(size_t n, const void *w, size_t gs, size_t nr, const void *xq, size_t xrs, size_t n_tok,
                           float *y, size_t ldy) {
    sb_over_packed(q6_pass, n / TKV__QK_K, w, gs, nr, xq, xrs, n_tok, y, ldy, TC);
}

/* The 8 dwords at each p[k] (k < 8; NULL: zeros) as 8 vectors, vector m holding dword m of each in lane k: pairs by
   unpack, quads by unpack of 64-bit pairs, 128-bit halves by permute. */
INLINE void transpose8x8(const uint8_t *const p[8], __m256i out[8]) {
    __m256i z[8], a[8], c[8];
    for (int j = 0; j < 8; j++) z[j] = p[j] ? LOAD256(p[j]) : _mm256_setzero_si256();
    for (int j = 0; j < 4; j++) {
        a[2 * j] = _mm256_unpacklo_epi32(z[2 * j], z[2 * j + 1]);
        a[2 * j + 1] = _mm256_unpackhi_epi32(z[2 * j], z[2 * j + 1]);
    }
    for (int j = 0; j < 2; j++)
        for (int h = 0; h < 2; h++) {
            c[4 * j + 2 * h] = _mm256_unpacklo_epi64(a[4 * j + h], a[4 * j + 2 + h]);
            c[4 * j + 2 * h + 1] = _mm256_unpackhi_epi64(a[4 * j + h], a[4 * j + 2 + h]);
        }
    /* c[q]: rows 0-3, dword q in its low half and q + 4 in its high; c[4 + q]: rows 4-7 */
    for (int q = 0; q < 4; q++) {
        out[q] = _mm256_permute2x128_si256(c[q], c[4 + q], 0x20);
        out[q + 4] = _mm256_permute2x128_si256(c[q], c[4 + q], 0x31);
    }
}

/* repack.h's Q6_K layout from 16 of the file's rows (NULL: zeros), bit for bit tkv__pack_q6k_blocks, by 8 x 8
   dword transposes (as the avx512 level's pack6): that packer's 4-byte copies held a product of 4 tokens over the
   file's rows to 6.8 GB/s, where the lane-wise tiles it replaced read 10.1 (bench_kernels -n 2048 -r 1024 -t 4). */
static void pack6(const void *const rows[TKV__PACK_ROWS], size_t i0, size_t i1, void *out) {
    for (size_t i = i0; i < i1; i++) {
        uint8_t *o = (uint8_t *)out + (i - i0) * PB;
        const tkv__block_q6_K *blk[TKV__PACK_ROWS];
        for (int k = 0; k < TKV__PACK_ROWS; k++) blk[k] = rows[k] ? (const tkv__block_q6_K *)rows[k] + i : NULL;
        for (int n = 0; n < 2; n++) {
            static const int at[3] = {0, 32, 128}; /* units 8n + m: ql[64n + 4m], ql[64n + 32 + 4m], qh[32n + 4m] */
            for (int c = 0; c < 3; c++)
                for (int h = 0; h < 2; h++) { /* rows 8h .. 8h + 7 */
                    const uint8_t *p[8];
                    for (int k = 0; k < 8; k++) {
                        const tkv__block_q6_K *x = blk[8 * h + k];
                        p[k] = x ? (c < 2 ? x->ql + 64 * n + at[c] : x->qh + 32 * n) : NULL;
                    }
                    __m256i v[8];
                    transpose8x8(p, v);
                    for (int m = 0; m < 8; m++)
                        _mm256_store_si256((__m256i *)(void *)(o + UNIT * (8 * n + m) + 64 * c + 32 * h), v[m]);
                }
        }
        pack6_tail(rows, i, o);
    }
}

/* Over the file's rows: per group of 16 rows, chunks of KC superblocks transposed into a panel on the stack (the
   packed layout), then every token's tiles over it, their sums carried in a stash. */
void tkv__gemm_q6_K_avx2(size_t n, const void *w, size_t wrs, size_t nr, const void *xq, size_t xrs, size_t n_tok,
                         float *y, size_t ldy) {
    struct {
        alignas(64) uint8_t pan[KC * PB]; /* 27 KiB */
        alignas(64) float st[TC * 32];    /* 8 KiB */
    } b;
    sb_over_rows(q6_pass, pack6, n / TKV__QK_K, w, wrs, nr, xq, xrs, n_tok, y, ldy, TC, KC, b.pan, b.st);
}

#endif
