/*
 * compute/x86/avx512/gemm_iq4_xs.c — IQ4_XS products at the avx512 level (AVX-512 F/BW/VL + VNNI)
 * over the transposed layout of compute/quant/repack.h, in the block-reduced order of
 * compute/quant/quant.h, so they equal the level's vec_dot (and the scalar one) bit for bit: the
 * product over packed rows (generation reads every row once, in one sequential stream per
 * group), and the tiled product over the file's rows, which builds the same layout for a chunk
 * of K on its stack first.
 *
 * Lane k of a zmm is row k of a group of 16, so a superblock reduces to one
 * integer per lane with no horizontal sums, as gemm_q4_q5_k.c's Q4_K. A
 * sub-block of 32 is an IQ4_NL block without its own scale, transposed as
 * gemm_q4_0_iq4_nl.c's: per 64-byte chunk (4 bytes of each of 16 rows) one
 * and, one shift and one and give the low and the high nibbles, a byte
 * shuffle each their codebook values + 128 (1..241, unsigned for vpdpbusd);
 * per token one vpdpbusd each with the token's 4 activation bytes
 * broadcast, the sum starting from -128 times the token's sum over the
 * sub-block (its two sums of 16), so it is exact. Per sub-block and token
 * the sum times the row's scale (vpmulld by 16 scale bytes widened); per
 * superblock and token one conversion, the scale product and one fma for
 * all 16 rows. In the lane-wise order (kept as gemm_ref: gemm_iq4_xs_lanes.c,
 * a row pair per zmm, the vec_dot's horizontal sums per row) a scale
 * multiplies every 4 products of a row; here a sub-block's vpmulld covers
 * 32.
 *
 * Tokens run in tiles of up to 4 over a group; with fewer than 4 a token's
 * sums are split over independent chains (integer sums are exact, so the
 * split changes no bit) so that vpdpbusd's latency is hidden.
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
    ROWS = TKV__PACK_ROWS, /* rows per group: a zmm's lanes */
    QBS = sizeof(tkv__block_q8_K),
    SB = TKV__IQ4XS_PACK_BLOCK,
    TT = 4,       /* tokens per tile */
    KC = 16,      /* superblocks per panel of the file-rows product (35 KiB) */
    TC = 64,      /* tokens per chunk: their activations stay in L2 while the groups pass */
    Y_QS = 4,     /* offset of a Q8_K block's quants */
    Y_BSUMS = 260 /* ... and of its 16 sums of 16 */
};

/*
 * Superblocks [0, cnt) of one group at pk for T tokens: yb0[t] is token t's
 * Q8_K block of the first one; acc[t] carries the running sums of the 16
 * rows. pf: ask for the group's bytes PREFETCH_AHEAD on (it streams from
 * memory).
 */
INLINE void xs_run(const uint8_t *pk, size_t cnt, const uint8_t *const *yb0, __m512 *acc, int T, int pf) {
    enum { CMAX = 4 };
    const int C = T >= 4 ? 1 : T >= 2 ? 2 : 4;
    const __m512i m4 = _mm512_set1_epi8(0x0f);
    const __m512i book = _mm512_xor_si512(_mm512_broadcast_i32x4(LOAD128(tkv__iq4nl_values)), _mm512_set1_epi8((char)0x80));
    for (size_t i = 0; i < cnt; i++) {
        const uint8_t *b = pk + i * SB, *yb[TT];
        __m512i sumi[TT];
        UNROLL
        for (int t = 0; t < T; t++) {
            yb[t] = yb0[t] + i * QBS;
            sumi[t] = _mm512_setzero_si512();
        }
        UNROLL
        for (int s = 0; s < 8; s++) {
            /* util.h's PREFETCH_AHEAD on, half a superblock (and the line it starts in) every 4 sub-blocks: two
               threads from memory (bench_kernels -n 2048 -r 262144 -T 2 -c 2048, Zen 5, 6 interleaved runs) read
               49.7-52.8 GB/s when the VM's memory is contended and 80 when not, an eighth every sub-block 42-43
               and 74-80 (IQ4_NL beside them: 50-53 and 80-85); one thread 42.4 against 41.0 */
            if (pf && s % 4 == 0) prefetch_span(b + PREFETCH_AHEAD + SB * (size_t)s / 8, SB / 2 + 64);
            __m512i c[TT][CMAX];
            UNROLL
            for (int t = 0; t < T; t++) {
                int16_t h0, h1;
                memcpy(&h0, yb[t] + Y_BSUMS + 4 * s, 2), memcpy(&h1, yb[t] + Y_BSUMS + 4 * s + 2, 2);
                c[t][0] = _mm512_set1_epi32(-128 * (h0 + h1));
                for (int u = 1; u < C; u++) c[t][u] = _mm512_setzero_si512();
            }
            UNROLL
            for (int j = 0; j < 4; j++) {
                const __m512i q = _mm512_load_si512((const void *)(b + 256 * s + 64 * j));
                const __m512i lo = _mm512_shuffle_epi8(book, _mm512_and_si512(q, m4));
                const __m512i hi = _mm512_shuffle_epi8(book, _mm512_and_si512(_mm512_srli_epi32(q, 4), m4));
                UNROLL
                for (int t = 0; t < T; t++) {
                    const uint8_t *a = yb[t] + Y_QS + 32 * s + 4 * j;
                    c[t][(2 * j) % C] = _mm512_dpbusd_epi32(c[t][(2 * j) % C], lo, bcast32(a));
                    c[t][(2 * j + 1) % C] = _mm512_dpbusd_epi32(c[t][(2 * j + 1) % C], hi, bcast32(a + 16));
                }
            }
            const __m512i sc = _mm512_cvtepi8_epi32(LOAD128(b + TKV__IQ4XS_PACK_SCALES + 16 * s));
            UNROLL
            for (int t = 0; t < T; t++) {
                for (int u = 1; u < C; u++) c[t][0] = _mm512_add_epi32(c[t][0], c[t][u]);
                sumi[t] = _mm512_add_epi32(sumi[t], _mm512_mullo_epi32(c[t][0], sc));
            }
        }
        const __m512 dw = _mm512_cvtph_ps(LOADA256(b + TKV__IQ4XS_PACK_D));
        UNROLL
        for (int t = 0; t < T; t++) {
            float yd;
            memcpy(&yd, yb[t], sizeof yd);
            acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sumi[t]), _mm512_mul_ps(dw, _mm512_set1_ps(yd)), acc[t]);
        }
    }
}

/*
 * One group (pk: its superblock k0; cnt superblocks) for the T tokens at
 * yt[t] (their rows; block k0 of each is read first): the running sums from
 * the stash st (zero when first), back to it, or when last to y[t ldy + k]
 * for the rows in rmask. The stash has util.h's two zmm a token (the second,
 * the mins' sums of other types, stays +0 here).
 */
INLINE void xs_tile(const uint8_t *pk, size_t k0, size_t cnt, const uint8_t *const *yt, float *st, int first, int last,
                    float *y, size_t ldy, __mmask16 rmask, int T, int pf) {
    __m512 acc[TT], accm[TT];
    const uint8_t *yb[TT];
    UNROLL
    for (int t = 0; t < T; t++) yb[t] = yt[t] + k0 * QBS;
    sums_start(st, first, T, acc, accm);
    xs_run(pk, cnt, yb, acc, T, pf); /* accm stays +0: acc - accm is acc */
    sums_end(st, last, T, acc, accm, y, ldy, rmask);
}

/* Pass p (util.h's sb_pass) in tiles of 4, 3, 2, 1; the first tile reads the group from memory when p streams it, the others from cache. */
static void xs_pass(const sb_pass *p) {
    const __mmask16 rmask = (__mmask16)((1u << p->nrow) - 1u);
#define XS_TILE(T, yt, st, y, pf) xs_tile(p->pk, p->k0, p->cnt, yt, st, p->first, p->last, y, p->ldy, rmask, T, pf)
    SB_TILES(p, TT, XS_TILE)
#undef XS_TILE
}

/* Over packed rows (kernels.h's `packed`): each group read once per chunk of TC tokens, whole (a group of a
   5632-long row is 48 KiB: L2), its tiles one after another. */
void tkv__packed_iq4_xs_avx512(size_t n, const void *w, size_t gs, size_t nr, const void *xq, size_t xrs, size_t n_tok,
                               float *y, size_t ldy) {
    sb_over_packed(xs_pass, n / TKV__QK_K, w, gs, nr, xq, xrs, n_tok, y, ldy, TC);
}

/* Over the file's rows: per group of 16 rows, chunks of KC superblocks transposed into a panel on the stack (the
   packed layout), then every token's tiles over it, their sums carried in a stash. */
void tkv__gemm_iq4_xs_avx512(size_t n, const void *w, size_t wrs, size_t nr, const void *xq, size_t xrs, size_t n_tok,
                             float *y, size_t ldy) {
    struct {
        alignas(64) uint8_t pan[KC * SB]; /* 35 KiB */
        alignas(64) float st[TC * 32];    /* 8 KiB */
    } b;
    _Static_assert(sizeof b <= 80 * 1024, "the buffers of a product live on the stack (kernels.h: under 80 KiB)");
    sb_over_rows(xs_pass, tkv__pack_iq4xs_blocks, n / TKV__QK_K, w, wrs, nr, xq, xrs, n_tok, y, ldy, TC, KC, b.pan, b.st);
}

#endif
