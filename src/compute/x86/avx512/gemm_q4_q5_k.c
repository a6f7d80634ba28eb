/*
 * compute/x86/avx512/gemm_q4_q5_k.c — Q4_K and Q5_K products at the avx512 level (AVX-512
 * F/BW/VL + VNNI) over the transposed layout of compute/quant/repack.h, in
 * the block-reduced order of compute/quant/quant.h, so they equal the
 * level's vec_dot (and the scalar one) bit for bit: the product over packed
 * rows (generation reads every row once, in one sequential stream per
 * group), and the tiled product over the file's rows, which builds the same
 * layout for a chunk of K on its stack first.
 *
 * Lane k of a zmm is row k of a group of 16, so a superblock reduces to one
 * integer per lane with no horizontal sums. Per 64-byte chunk of quants
 * (4 bytes of each of 16 rows): one and, one shift and one and give the
 * low nibbles (group 2c) and the high ones (group 2c + 1); per token one
 * vpdpbusd each, the token's 4 activation bytes broadcast from memory
 * (nibbles are unsigned, activations signed: vpdpbusd's operand order, with
 * no saturation). Per group of 32 and token: the group's sum times the
 * row's scale (vpmulld by 16 unpacked scales); per superblock and token: the
 * mins term in four vpdpwssd (a row's two mins times the token's two group
 * sums), then two conversions, two scale products and two fmas for all 16
 * rows. Against the lane-wise order this replaced (a row pair per zmm,
 * vpmaddubsw then vpdpwssd by the group scale, permutes to pick the scales,
 * a per-row float mins sum): about half the instructions per weight.
 * Q5_K adds each chunk's fifth bits: a byte test per nibble half and a
 * masked add of 16 (values 0..31 stay unsigned bytes for vpdpbusd).
 *
 * Tokens run in tiles of up to 4 over a group; with fewer than 4 a token's
 * sums are split over independent chains (integer sums are exact, so the
 * split changes no bit) so vpdpbusd's latency is hidden.
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
    KC = 16,      /* superblocks per panel of the file-rows product (Q4_K 37 KiB, Q5_K 45 KiB) */
    TC = 64,      /* tokens per chunk: their activations stay in L2 while the groups pass */
    Y_QS = 4,     /* offset of a Q8_K block's quants */
    Y_BSUMS = 260 /* ... and of its 16 sums of 16 */
};

/* A token's 8 group sums (bsums of 32 elements) as 4 word pairs: dword h = (sum 2h, sum 2h + 1). */
static inline __m128i group_pairs(const uint8_t *yb) {
    /* each sum of 32 quants of -127..127 fits a word */
    return _mm_hadd_epi16(LOAD128(yb + Y_BSUMS), LOAD128(yb + Y_BSUMS + 16));
}

/*
 * Superblocks [0, cnt) of one group at pk (SB bytes apart) for T tokens:
 * yb[t] is token t's Q8_K block of the first one. acc[t] and accm[t] carry
 * the scales' and the mins' running sums of the 16 rows.
 */
INLINE void k45_run(const uint8_t *pk, size_t cnt, const uint8_t *const *yb0, __m512 *acc, __m512 *accm, int T,
                    int five, int pf) {
    enum { CMAX = 4 };
    const int C = T >= 4 ? 1 : T >= 2 ? 2 : 4;
    const size_t SB = TKV__K45_PACK_BLOCK(five), S = TKV__K45_PACK_SCALES(five);
    const __m512i m4 = _mm512_set1_epi8(0x0f), b16 = _mm512_set1_epi8(16);
    for (size_t i = 0; i < cnt; i++) {
        const uint8_t *b = pk + i * SB, *yb[TT];
        __m512i sumi[TT], summ[TT];
        UNROLL
        for (int t = 0; t < T; t++) yb[t] = yb0[t] + i * QBS, sumi[t] = _mm512_setzero_si512(), summ[t] = sumi[t];
        UNROLL
        for (int c = 0; c < 4; c++) {
            /* util.h's PREFETCH_AHEAD on, a quarter of a superblock a chunk (and the line it starts in). One thread
               from memory (bench_kernels -n 2048 -r 262144 -T 1 -c 2048, Zen 5, 3 interleaved runs): Q4_K 38.9-40.0
               GB/s, Q5_K 34.8-36.6, against 37.2-39.1 and 33.3-35.0 a line a load; whole superblocks on (9.5 KB for
               Q4_K), 37-38; 4 or 6 KB on, or 12, slower; L2 asked 32 KB on besides, 29-32 */
            if (pf) prefetch_span(b + PREFETCH_AHEAD + SB * (size_t)c / 4, SB / 4 + 64);
            __m512i slo[TT][CMAX], shi[TT][CMAX];
            UNROLL
            for (int t = 0; t < T; t++)
                for (int u = 0; u < C; u++) slo[t][u] = _mm512_setzero_si512(), shi[t][u] = slo[t][u];
            UNROLL
            for (int j = 0; j < 8; j++) {
                const __m512i q = _mm512_load_si512((const void *)(b + 64 * (8 * c + j)));
                __m512i lo = _mm512_and_si512(q, m4), hi = _mm512_and_si512(_mm512_srli_epi32(q, 4), m4);
                if (five) {
                    const __m512i h = _mm512_load_si512((const void *)(b + TKV__K45_PACK_QH + 64 * j));
                    lo = _mm512_mask_add_epi8(lo, _mm512_test_epi8_mask(h, _mm512_set1_epi8((char)(1 << (2 * c)))), lo, b16);
                    hi = _mm512_mask_add_epi8(hi, _mm512_test_epi8_mask(h, _mm512_set1_epi8((char)(2 << (2 * c)))), hi, b16);
                }
                UNROLL
                for (int t = 0; t < T; t++) {
                    const uint8_t *a = yb[t] + Y_QS + 64 * c + 4 * j;
                    slo[t][j % C] = _mm512_dpbusd_epi32(slo[t][j % C], lo, bcast32(a));
                    shi[t][j % C] = _mm512_dpbusd_epi32(shi[t][j % C], hi, bcast32(a + 32));
                }
            }
            const __m512i sclo = _mm512_cvtepu8_epi32(LOAD128(b + S + 16 * (2 * c)));
            const __m512i schi = _mm512_cvtepu8_epi32(LOAD128(b + S + 16 * (2 * c + 1)));
            UNROLL
            for (int t = 0; t < T; t++) {
                for (int u = 1; u < C; u++) {
                    slo[t][0] = _mm512_add_epi32(slo[t][0], slo[t][u]);
                    shi[t][0] = _mm512_add_epi32(shi[t][0], shi[t][u]);
                }
                sumi[t] = _mm512_add_epi32(sumi[t], _mm512_add_epi32(_mm512_mullo_epi32(slo[t][0], sclo),
                                                                     _mm512_mullo_epi32(shi[t][0], schi)));
            }
        }
        alignas(16) int32_t pairs[TT][4];
        UNROLL
        for (int t = 0; t < T; t++) _mm_store_si128((__m128i *)(void *)pairs[t], group_pairs(yb[t]));
        UNROLL
        for (int h = 0; h < 4; h++) {
            const __m512i mn = _mm512_cvtepu8_epi16(LOAD256(b + S + 128 + 32 * h));
            UNROLL
            for (int t = 0; t < T; t++) summ[t] = _mm512_dpwssd_epi32(summ[t], mn, _mm512_set1_epi32(pairs[t][h]));
        }
        const __m512 dw = _mm512_cvtph_ps(LOADA256(b + S + 256));
        const __m512 dm = _mm512_cvtph_ps(LOADA256(b + S + 288));
        UNROLL
        for (int t = 0; t < T; t++) {
            float yd;
            memcpy(&yd, yb[t], sizeof yd);
            const __m512 d = _mm512_set1_ps(yd);
            acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sumi[t]), _mm512_mul_ps(dw, d), acc[t]);
            accm[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(summ[t]), _mm512_mul_ps(dm, d), accm[t]);
        }
    }
}

/*
 * One group (pk: its superblock k0; cnt superblocks) for the T tokens at
 * yt[t] (their rows; block k0 of each is read first): the running sums from
 * the stash st (2 T zmm; zero when first), back to it, or when last to y[t
 * ldy + k] for the rows in rmask.
 */
INLINE void k45_tile(const uint8_t *pk, size_t k0, size_t cnt, const uint8_t *const *yt, float *st, int first, int last,
                     float *y, size_t ldy, __mmask16 rmask, int T, int five, int pf) {
    __m512 acc[TT], accm[TT];
    const uint8_t *yb[TT];
    UNROLL
    for (int t = 0; t < T; t++) yb[t] = yt[t] + k0 * QBS;
    sums_start(st, first, T, acc, accm);
    k45_run(pk, cnt, yb, acc, accm, T, five, pf);
    sums_end(st, last, T, acc, accm, y, ldy, rmask);
}

/* Pass p (util.h's sb_pass) in tiles of 4, 3, 2, 1; the first tile reads the group from memory when p streams it, the others from cache. */
INLINE void k45_tokens(const sb_pass *p, int five) {
    const __mmask16 rmask = (__mmask16)((1u << p->nrow) - 1u);
#define K45_TILE(T, yt, st, y, pf) k45_tile(p->pk, p->k0, p->cnt, yt, st, p->first, p->last, y, p->ldy, rmask, T, five, pf)
    SB_TILES(p, TT, K45_TILE)
#undef K45_TILE
}

/* Passes (util.h's sb_pass) of Q4_K's and Q5_K's tiles. */
static void q4k_pass(const sb_pass *p) {
    k45_tokens(p, 0);
}

static void q5k_pass(const sb_pass *p) {
    k45_tokens(p, 1);
}

/*
 * Over the file's rows: per group of 16 rows, chunks of KC superblocks
 * transposed into a panel on the stack (the packed layout), then every
 * token's tiles over it, their sums carried in a stash.
 */
static void gemm_k45(sb_pass_fn *pass, sb_pack_fn *pack, size_t n, const void *w, size_t wrs, size_t nr, const void *xq,
                     size_t xrs, size_t n_tok, float *y, size_t ldy) {
    struct {
        alignas(64) uint8_t pan[KC * TKV__K45_PACK_BLOCK(1)]; /* 45 KiB */
        alignas(64) float st[TC * 32];                        /* 8 KiB */
    } b;
    _Static_assert(sizeof b <= 80 * 1024, "the buffers of a product live on the stack (kernels.h: under 80 KiB)");
    sb_over_rows(pass, pack, n / TKV__QK_K, w, wrs, nr, xq, xrs, n_tok, y, ldy, TC, KC, b.pan, b.st);
}

/* Over packed rows: each group read once per chunk of TC tokens, whole (a Q4_K group of a 8192-long row is 74 KiB:
   L2), its tiles one after another. */
void tkv__packed_q4_K_avx512(size_t n, const void *w, size_t gs, size_t nr, const void *xq, size_t xrs, size_t n_tok,
                             float *y, size_t ldy) {
    sb_over_packed(q4k_pass, n / TKV__QK_K, w, gs, nr, xq, xrs, n_tok, y, ldy, TC);
}

void tkv__packed_q5_K_avx512(size_t n, const void *w, size_t gs, size_t nr, const void *xq, size_t xrs, size_t n_tok,
                             float *y, size_t ldy) {
    sb_over_packed(q5k_pass, n / TKV__QK_K, w, gs, nr, xq, xrs, n_tok, y, ldy, TC);
}

void tkv__gemm_q4_K_avx512(size_t n, const void *w, size_t wrs, size_t nr, const void *xq, size_t xrs, size_t n_tok,
                           float *y, size_t ldy) {
    gemm_k45(q4k_pass, tkv__pack_q4k_blocks, n, w, wrs, nr, xq, xrs, n_tok, y, ldy);
}

void tkv__gemm_q5_K_avx512(size_t n, const void *w, size_t wrs, size_t nr, const void *xq, size_t xrs, size_t n_tok,
                           float *y, size_t ldy) {
    gemm_k45(q5k_pass, tkv__pack_q5k_blocks, n, w, wrs, nr, xq, xrs, n_tok, y, ldy);
}

#endif
