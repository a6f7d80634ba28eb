/*
 * compute/x86/avx2/gemm_iq4_xs.c — IQ4_XS products at the avx2 level over the transposed
 * layout of compute/quant/repack.h, in the block-reduced order of compute/quant/quant.h, bit for
 * bit the level's vec_dot (and the scalar one): the product over packed rows and the tiled
 * product over the file's rows (which builds the same layout for a chunk of K on its stack).
 * The avx512 level's gemm_iq4_xs.c says why the layout.
 *
 * A ymm's lane k is row 8h + k of the group's half h. Per 32 bytes of a
 * sub-block's quants (4 of each of 8 rows): the low and the high nibbles'
 * codebook values by a byte shuffle each; their values as unsigned
 * codebook + 128 bytes would overflow vpmaddubsw's int16 pairs, so each
 * token's 4 activation bytes take the value's signs (vpsignb) and multiply
 * its magnitude (pairs of at most 2 x 127 x 127: no saturation), as
 * gemm_q4_0_iq4_nl.c's IQ4_NL step, then widened to int32 and multiplied by
 * the row's sub-block scale in one vpmaddwd (at most 2 x 32258 x 32 a dword,
 * 64 of them a superblock: no overflow, and integer sums in any order are
 * the vec_dot's); per superblock one conversion, the scale product and one
 * fma.
 *
 * Tokens run in tiles of up to 4 (the unpacking, a third of a tile of 2
 * tokens, counts for twice as many: bench_kernels --prefill -t 256 -l avx2,
 * 1b shape, 110-111 -> 123-125 GF/s; with the scales in the widening, the 4
 * tokens' sums, the values and the constants fit the 16 ymm registers, where
 * a separate sum a token did not: 1.18-1.30x, bench/RESULTS.md, once the
 * sub-block loop stays a loop: xs_run); each superblock's two halves follow
 * one another, so its bytes come from memory once and from L1 the second
 * time.
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
    ROWS = TKV__PACK_ROWS, /* rows per group: two ymm's lanes */
    QBS = sizeof(tkv__block_q8_K),
    SB = TKV__IQ4XS_PACK_BLOCK,
    TT = 4,   /* tokens per tile */
    KC = 16,  /* superblocks per panel of the file-rows product (35 KiB) */
    TC = 64,  /* tokens per chunk: their activations stay in L2 while the groups pass */
    Y_QS = 4, /* offset of a Q8_K block's quants */
};

/*
 * Superblocks [0, cnt) of one group at pk for T tokens, the group's first
 * nrow rows: yb0[t] is token t's Q8_K block of the first superblock;
 * acc[2 t + h] carries token t's running sums of half h. pf: ask for the
 * group's bytes PREFETCH_AHEAD on (it streams from memory).
 */
INLINE void xs_run(const uint8_t *pk, size_t cnt, size_t nrow, const uint8_t *const *yb0, __m256 *acc, int T, int pf) {
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    const __m256i book = _mm256_broadcastsi128_si256(LOAD128(tkv__iq4nl_values));
    const int NH = nrow > 8 ? 2 : 1;
    for (size_t i = 0; i < cnt; i++) {
        const uint8_t *b = pk + i * SB, *yb[TT];
        UNROLL
        for (int t = 0; t < T; t++) yb[t] = yb0[t] + i * QBS;
        for (int h = 0; h < NH; h++) {
            __m256i sumi[TT];
            UNROLL
            for (int t = 0; t < T; t++) sumi[t] = _mm256_setzero_si256();
            /* a loop: unrolled 8 times, gcc 12 spilled a tile of 4 tokens' values and sums to the stack (a third
               of the prefill's time on instructions at %rsp); rolled, bench/kernel-ab: 1.68-1.72x at 16 and 128
               tokens, 1.39x at 4, one token in cache 1.15x */
            _Pragma("GCC unroll 1")
            for (int s = 0; s < 8; s++) {
                /* util.h's PREFETCH_AHEAD on, a share of the superblock a (half, sub-block) and the line it starts
                   in: both halves ask, so the memory does not idle through the second (2-4 tokens +6%) */
                if (pf) prefetch_span(b + PREFETCH_AHEAD + SB * (size_t)(8 * h + s) / (size_t)(8 * NH), SB / (size_t)(8 * NH) + 64);
                /* row k's scale in both words of dword k: vpmaddwd widens and scales at once */
                const __m128i s8 = _mm_loadl_epi64((const __m128i *)(const void *)(b + TKV__IQ4XS_PACK_SCALES + 16 * s + 8 * h));
                const __m256i sc = _mm256_cvtepi8_epi16(_mm_unpacklo_epi8(s8, s8));
                UNROLL
                for (int j = 0; j < 4; j++) {
                    const __m256i q = LOADA256(b + 256 * s + 64 * j + 32 * h);
                    const __m256i wl = _mm256_shuffle_epi8(book, _mm256_and_si256(q, m4));
                    const __m256i wh = _mm256_shuffle_epi8(book, _mm256_and_si256(_mm256_srli_epi16(q, 4), m4));
                    const __m256i al = _mm256_abs_epi8(wl), ah = _mm256_abs_epi8(wh);
                    UNROLL
                    for (int t = 0; t < T; t++) {
                        const uint8_t *a = yb[t] + Y_QS + 32 * s + 4 * j;
                        const __m256i pl = _mm256_maddubs_epi16(al, _mm256_sign_epi8(bcast32(a), wl));
                        const __m256i ph = _mm256_maddubs_epi16(ah, _mm256_sign_epi8(bcast32(a + 16), wh));
                        sumi[t] = _mm256_add_epi32(sumi[t], _mm256_add_epi32(_mm256_madd_epi16(pl, sc), _mm256_madd_epi16(ph, sc)));
                    }
                }
            }
            const __m256 dw = _mm256_cvtph_ps(LOAD128(b + TKV__IQ4XS_PACK_D + 16 * h));
            UNROLL
            for (int t = 0; t < T; t++) {
                float yd;
                memcpy(&yd, yb[t], sizeof yd);
                acc[2 * t + h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sumi[t]), _mm256_mul_ps(dw, _mm256_set1_ps(yd)), acc[2 * t + h]);
            }
        }
    }
}

/*
 * One group (pk: its superblock k0; cnt superblocks) for the T tokens at
 * yt[t] (their rows; block k0 of each is read first): the running sums from
 * the stash st (32 floats a token, util.h's; zero when first), back to it,
 * or when last to y[t ldy + k] for the group's first nrow rows.
 */
INLINE void xs_tile(const uint8_t *pk, size_t k0, size_t cnt, const uint8_t *const *yt, float *st, int first, int last,
                    float *y, size_t ldy, size_t nrow, int T, int pf) {
    const uint8_t *yb[TT];
    __m256 acc[2 * TT], accm[2 * TT]; /* acc[2 t + h]; accm stays +0 (util.h's sums take acc - accm) */
    UNROLL
    for (int t = 0; t < T; t++) {
        yb[t] = yt[t] + k0 * QBS;
        for (int h = 0; h < 2; h++) {
            sums_start(st ? st + 32 * t : NULL, first, 1, h, &acc[2 * t + h], &accm[2 * t + h]);
        }
    }
    xs_run(pk, cnt, nrow, yb, acc, T, pf);
    UNROLL
    for (int t = 0; t < T; t++)
        for (int h = 0; h < 2 && (size_t)h * 8 < nrow; h++)
            sums_end(st ? st + 32 * t : NULL, last, 1, h, &acc[2 * t + h], &accm[2 * t + h], y + (size_t)t * ldy, ldy, nrow);
}

/* Pass p (util.h's sb_pass) in tiles of 4, 3, 2, 1; the first tile reads the group from memory when p streams it, the others from cache. */
static void xs_pass(const sb_pass *p) {
    for (size_t u = 0; u < p->tn;) {
        const uint8_t *yt[TT];
        float *sb, *yo;
        const int T = sb_tile(p, u, TT, yt, &sb, &yo), pf = p->stream && u == 0;
        if (T == 4) xs_tile(p->pk, p->k0, p->cnt, yt, sb, p->first, p->last, yo, p->ldy, p->nrow, 4, pf);
        else if (T == 3) xs_tile(p->pk, p->k0, p->cnt, yt, sb, p->first, p->last, yo, p->ldy, p->nrow, 3, pf);
        else if (T == 2) xs_tile(p->pk, p->k0, p->cnt, yt, sb, p->first, p->last, yo, p->ldy, p->nrow, 2, pf);
        else xs_tile(p->pk, p->k0, p->cnt, yt, sb, p->first, p->last, yo, p->ldy, p->nrow, 1, pf);
        u += (size_t)T;
    }
}

/* Over packed rows (kernels.h's `packed`): each group read once per chunk of TC tokens, its tiles one after
   another. */
void tkv__packed_iq4_xs_avx2(size_t n, const void *w, size_t gs, size_t nr, const void *xq, size_t xrs, size_t n_tok,
                             float *y, size_t ldy) {
    sb_over_packed(xs_pass, n / TKV__QK_K, w, gs, nr, xq, xrs, n_tok, y, ldy, TC);
}

/* Over the file's rows: per group of 16 rows, chunks of KC superblocks transposed into a panel on the stack (the
   packed layout), then every token's tiles over it, their sums carried in a stash. */
void tkv__gemm_iq4_xs_avx2(size_t n, const void *w, size_t wrs, size_t nr, const void *xq, size_t xrs, size_t n_tok,
                           float *y, size_t ldy) {
    struct {
        alignas(64) uint8_t pan[KC * SB]; /* 35 KiB */
        alignas(64) float st[TC * 32];    /* 8 KiB */
    } b;
    _Static_assert(sizeof b <= 80 * 1024, "the buffers of a product live on the stack (kernels.h: under 80 KiB)");
    sb_over_rows(xs_pass, tkv__pack_iq4xs_blocks, n / TKV__QK_K, w, wrs, nr, xq, xrs, n_tok, y, ldy, TC, KC, b.pan, b.st);
}

#endif
