/*
 * compute/x86/avx2/gemm_q2_q3_k.c — Q2_K and Q3_K products at the avx2 level over the transposed layouts of
 * compute/quant/repack.h, in the block-reduced order of compute/quant/quant.h, bit for bit the
 * level's vec_dot (and the scalar one): the product over packed rows and the tiled product over
 * the file's rows (which builds the same layout for a chunk of K on its stack). The avx512
 * level's gemm_q2_q3_k.c says why the layout.
 *
 * A ymm's lane k is row 8h + k of the group's half h. Per 32 bytes of
 * quants (4 of each of 8 rows) and token: vpmaddubsw of each of the four
 * 2-bit values by the token's 4 activation bytes, added up as words over
 * the sub-block's 4 chunks (at most 4 x 2 x 7 x 127 = 7112), then one
 * vpmaddwd by the rows' scale (the scale in both words of a row's dword)
 * makes the sub-block's int32; the mins' term is one vpmaddwd per two
 * sub-blocks. Tokens run in tiles of up to 4 (their accumulators spill
 * from the 16 ymm registers, but each chunk's unpacking serves more
 * tokens: Zen 1, a layer's prefill products, Q3_K +10%), each half of the
 * group in turn, each asking for its share of the lines ahead (util.h's
 * half_share_of).
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
    ROWS = TKV__PACK_ROWS,    /* rows per group: two ymm's lanes */
    QBS = sizeof(tkv__block_q8_K),
    TT = 4,       /* tokens per tile */
    KC = 16,      /* superblocks per panel of the file-rows product (Q2_K 21 KiB, Q3_K 28.5 KiB) */
    TC = 64,      /* tokens per chunk: their activations stay in L2 while the groups pass */
    Y_QS = 4,     /* offset of a Q8_K block's quants */
    Y_BSUMS = 260 /* ... and of its 16 sums of 16 */
};

/* Bytes of a group's superblock, and where its scale bytes start. */
#define SBYTES(three) ((three) ? TKV__Q3K_PACK_BLOCK : TKV__Q2K_PACK_BLOCK)
#define SCALES(three) ((three) ? TKV__Q3K_PACK_SCALES : TKV__Q2K_PACK_SCALES)

/* The scale bytes of sub-blocks 2h and 2h + 1 of rows 8 hf .. 8 hf + 7 (byte 2k + e: row 8 hf + k, sub-block
   2h + e; repack.h), in both 128-bit lanes. */
static inline __m256i scale_bytes(const uint8_t *b, int h, int hf, int three) {
    return _mm256_broadcastsi128_si256(LOAD128(b + SCALES(three) + 32 * h + 16 * hf));
}

/* Sub-block 2h + e's scale of each of the 8 rows in both words of its dword, from scale_bytes: Q2_K's low nibble,
   Q3_K's signed byte (put in each word's high byte, then shifted down with its sign). */
static inline __m256i scale_pairs(__m256i sb, int e, int three) {
    /* dword k of either lane: byte 2k + e of the 16 (lane 1: k + 4), twice */
    const __m256i ctl = _mm256_setr_epi8(0, -1, 0, -1, 2, -1, 2, -1, 4, -1, 4, -1, 6, -1, 6, -1, /**/
                                         8, -1, 8, -1, 10, -1, 10, -1, 12, -1, 12, -1, 14, -1, 14, -1);
    if (three) {
        const __m256i hi = _mm256_slli_epi16(_mm256_add_epi8(ctl, _mm256_set1_epi16((short)e)), 8);
        return _mm256_srai_epi16(_mm256_shuffle_epi8(sb, _mm256_or_si256(hi, _mm256_set1_epi16(0x00ff))), 8);
    }
    return _mm256_and_si256(_mm256_shuffle_epi8(sb, _mm256_add_epi8(ctl, _mm256_set1_epi16((short)e))),
                            _mm256_set1_epi16(0x0f));
}

/*
 * Superblocks [0, cnt) of half hf (rows 8 hf ..) of one group of Q2_K
 * (three: Q3_K) rows at pk for T tokens: yb0[t] is token t's Q8_K block of
 * the first. acc[t] and accm[t] carry the scales' and (Q2_K) the mins'
 * running sums. Q3_K's values are the low bits plus 4 where the high bit is
 * set (0..7: 4 x 2 x 7 x 127 in a word), and 4 times the scales by the
 * token's sums of 16 come off the superblock's integer (avx512's gemm_q2_q3_k.c).
 */
INLINE void q23k_run(const uint8_t *pk, size_t cnt, int hf, const uint8_t *const *yb0, __m256 *acc, __m256 *accm, int T,
                     int three, int pf) {
    const size_t SB = SBYTES(three), HALF = three ? TKV__Q3K_PACK_RUN(1) / 2 : SB / 2; /* a step's share of the run */
    const __m256i m3 = _mm256_set1_epi8(3), four = _mm256_set1_epi8(4);
    for (size_t i = 0; i < cnt; i++) {
        const uint8_t *b = pk + i * SB, *yb[TT];
        const half_share sh = half_share_of(HALF, cnt, hf, i); /* util.h: at most 15 lines, one a chunk */
        __m256i sumi[TT], summ[TT];
        UNROLL
        for (int t = 0; t < T; t++) yb[t] = yb0[t] + i * QBS, sumi[t] = _mm256_setzero_si256(), summ[t] = sumi[t];
        UNROLL
        for (int m = 0; m < 4; m++) { /* chunks 4m .. 4m + 3: half m / 2, sub-blocks 8 (m / 2) + 2 s + m % 2 */
            __m256i s4[TT][4];
            UNROLL
            for (int t = 0; t < T; t++)
                for (int s = 0; s < 4; s++) s4[t][s] = _mm256_setzero_si256();
            UNROLL
            for (int jj = 0; jj < 4; jj++) {
                const int j = 4 * m + jj;
                if (pf && hf == 0 && three && j == 0) /* the d's ahead (repack.h) */
                    _mm_prefetch((const char *)pk + TKV__Q3K_PACK_DS_NEXT(cnt, i), _MM_HINT_T0);
                if (pf) line_ahead(pk, sh, (size_t)j, 0);
                const __m256i q = LOADA256(b + 64 * j + 32 * hf);
                __m256i v[4] = {_mm256_and_si256(q, m3), _mm256_and_si256(_mm256_srli_epi16(q, 2), m3),
                                _mm256_and_si256(_mm256_srli_epi16(q, 4), m3), _mm256_and_si256(_mm256_srli_epi16(q, 6), m3)};
                if (three) { /* bit 4 (m / 2) + s of the element's hmask byte, moved to bit 2 */
                    const __m256i hm = LOADA256(b + TKV__Q3K_PACK_HMASK + 64 * (j % 8) + 32 * hf);
                    UNROLL
                    for (int s = 0; s < 4; s++) {
                        const int bit = 4 * (m / 2) + s;
                        const __m256i h = bit >= 2 ? _mm256_srli_epi16(hm, bit - 2) : _mm256_slli_epi16(hm, 2 - bit);
                        v[s] = _mm256_or_si256(v[s], _mm256_and_si256(h, four));
                    }
                }
                UNROLL
                for (int t = 0; t < T; t++) {
                    const uint8_t *a = yb[t] + Y_QS + 128 * (m / 2) + 4 * (j % 8);
                    UNROLL
                    for (int s = 0; s < 4; s++)
                        s4[t][s] = _mm256_add_epi16(s4[t][s], _mm256_maddubs_epi16(v[s], bcast32(a + 32 * s)));
                }
            }
            UNROLL
            for (int s = 0; s < 4; s++) { /* sub-block 8 (m / 2) + 2 s + m % 2: pair 4 (m / 2) + s, byte m % 2 */
                const __m256i sc = scale_pairs(scale_bytes(b, 4 * (m / 2) + s, hf, three), m % 2, three);
                UNROLL
                for (int t = 0; t < T; t++) sumi[t] = _mm256_add_epi32(sumi[t], _mm256_madd_epi16(s4[t][s], sc));
            }
        }
        /* Q2_K: the mins by the token's sums of 16; Q3_K: the scales by them, 4 times that off the sums */
        UNROLL
        for (int h = 0; h < 8; h++) {
            const __m128i sb = LOAD128(b + SCALES(three) + 32 * h + 16 * hf);
            const __m256i mn = three ? _mm256_cvtepi8_epi16(sb) : _mm256_srli_epi16(_mm256_cvtepu8_epi16(sb), 4);
            UNROLL
            for (int t = 0; t < T; t++) summ[t] = _mm256_add_epi32(summ[t], _mm256_madd_epi16(mn, bcast32(yb[t] + Y_BSUMS + 4 * h)));
        }
        const __m256 dw = _mm256_cvtph_ps(LOAD128((three ? pk + TKV__Q3K_PACK_DS(cnt, i) : b + TKV__Q2K_PACK_D) + 16 * hf));
        const __m256 dm = three ? dw : _mm256_cvtph_ps(LOAD128(b + TKV__Q2K_PACK_DMIN + 16 * hf));
        UNROLL
        for (int t = 0; t < T; t++) {
            float yd;
            memcpy(&yd, yb[t], sizeof yd);
            const __m256 d = _mm256_set1_ps(yd);
            if (three) {
                acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(sumi[t], _mm256_slli_epi32(summ[t], 2))),
                                         _mm256_mul_ps(dw, d), acc[t]);
            } else {
                acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sumi[t]), _mm256_mul_ps(dw, d), acc[t]);
                accm[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(summ[t]), _mm256_mul_ps(dm, d), accm[t]);
            }
        }
    }
}

/*
 * One group (pk: its superblock k0; cnt superblocks) for the T tokens at
 * yt[t] (their rows; block k0 of each is read first), both halves: the
 * running sums from the stash st (32 floats a token; zero when first), back
 * to it, or when last to y[t ldy + k] for the group's first nrow rows.
 */
INLINE void q23k_tile(const uint8_t *pk, size_t k0, size_t cnt, const uint8_t *const *yt, float *st, int first, int last,
                      float *y, size_t ldy, size_t nrow, int T, int three, int pf) {
    const uint8_t *yb[TT];
    UNROLL
    for (int t = 0; t < T; t++) yb[t] = yt[t] + k0 * QBS;
    for (int hf = 0; hf < 2; hf++) {
        if ((size_t)hf * 8 >= nrow) break;
        __m256 acc[TT], accm[TT];
        sums_start(st, first, T, hf, acc, accm);
        q23k_run(pk, cnt, hf, yb, acc, accm, T, three, pf); /* Q3_K's accm stays +0: acc - accm is acc */
        sums_end(st, last, T, hf, acc, accm, y, ldy, nrow);
    }
}

/* Pass p (util.h's sb_pass) in tiles of 4, 3, 2, 1; the first tile reads the group from memory when p streams it, the others from cache. */
INLINE void q23k_tokens(const sb_pass *p, int three) {
    for (size_t u = 0; u < p->tn;) {
        const uint8_t *yt[TT];
        float *sb, *yo;
        const int T = sb_tile(p, u, TT, yt, &sb, &yo), pf = p->stream && u == 0;
        if (T == 4) q23k_tile(p->pk, p->k0, p->cnt, yt, sb, p->first, p->last, yo, p->ldy, p->nrow, 4, three, pf);
        else if (T == 3) q23k_tile(p->pk, p->k0, p->cnt, yt, sb, p->first, p->last, yo, p->ldy, p->nrow, 3, three, pf);
        else if (T == 2) q23k_tile(p->pk, p->k0, p->cnt, yt, sb, p->first, p->last, yo, p->ldy, p->nrow, 2, three, pf);
        else q23k_tile(p->pk, p->k0, p->cnt, yt, sb, p->first, p->last, yo, p->ldy, p->nrow, 1, three, pf);
        u += (size_t)T;
    }
}

/* Passes (util.h's sb_pass) of Q2_K's and Q3_K's tiles. */
static void q2k_pass(const sb_pass *p) {
    q23k_tokens(p, 0);
}

static void q3k_pass(const sb_pass *p) {
    q23k_tokens(p, 1);
}

/* Over the file's rows: per group of 16 rows, chunks of KC superblocks transposed into a panel on the stack (the
   packed layout), then every token's tiles over it, their sums carried in a stash. */
static void gemm23(sb_pass_fn *pass, sb_pack_fn *pack, size_t n, const void *w, size_t wrs, size_t nr, const void *xq,
                   size_t xrs, size_t n_tok, float *y, size_t ldy) {
    struct {
        alignas(64) uint8_t pan[TKV__Q3K_PACK_RUN(KC)]; /* 28.5 KiB */
        alignas(64) float st[TC * 32];                     /* 8 KiB */
    } b;
    _Static_assert(sizeof b <= 80 * 1024, "the buffers of a product live on the stack (kernels.h: under 80 KiB)");
    sb_over_rows(pass, pack, n / TKV__QK_K, w, wrs, nr, xq, xrs, n_tok, y, ldy, TC, KC, b.pan, b.st);
}

/* Over packed rows (kernels.h's `packed`): w is the first group, gs the stride between groups. */
void tkv__packed_q2_K_avx2(size_t n, const void *w, size_t gs, size_t nr, const void *xq, size_t xrs, size_t n_tok,
                           float *y, size_t ldy) {
    sb_over_packed(q2k_pass, n / TKV__QK_K, w, gs, nr, xq, xrs, n_tok, y, ldy, TC);
}

void tkv__packed_q3_K_avx2(size_t n, const void *w, size_t gs, size_t nr, const void *xq, size_t xrs, size_t n_tok,
                           float *y, size_t ldy) {
    sb_over_packed(q3k_pass, n / TKV__QK_K, w, gs, nr, xq, xrs, n_tok, y, ldy, TC);
}

void tkv__gemm_q2_K_avx2(size_t n, const void *w, size_t wrs, size_t nr, const void *xq, size_t xrs, size_t n_tok,
                         float *y, size_t ldy) {
    gemm23(q2k_pass, tkv__pack_q2k_blocks, n, w, wrs, nr, xq, xrs, n_tok, y, ldy);
}

void tkv__gemm_q3_K_avx2(size_t n, const void *w, size_t wrs, size_t nr, const void *xq, size_t xrs, size_t n_tok,
                         float *y, size_t ldy) {
    gemm23(q3k_pass, tkv__pack_q3k_blocks, n, w, wrs, nr, xq, xrs, n_tok, y, ldy);
}

#endif
