/*
 * compute/x86/avx2/gemm_q4_q5_k.c — Q4_K and Q5_K products at the avx2 level over the
 * transposed layout of compute/quant/repack.h, in the block-reduced order
 * of compute/quant/quant.h, bit for bit the level's vec_dot (and the scalar
 * one): the product over packed rows and the tiled product over the file's
 * rows (which builds the same layout for a chunk of K on its stack). The
 * avx512 level's gemm_q4_q5_k.c says why the layout.
 *
 * A ymm's lane k is row 8h + k of the group's half h. Per 32 bytes of
 * quants (4 of each of 8 rows) and token: vpmaddubsw of the low nibbles and
 * of the high ones by the token's 4 activation bytes, added up as words
 * over the group's 8 chunks (at most 8 x 2 x 15 x 127 = 30480: no
 * overflow), then one vpmaddwd by the rows' scale (a word pair of it per
 * row) makes the group's int32; the mins term is one vpmaddwd per two
 * groups. Q5_K's fifth bits are or'ed in as 16 (values 0..31), and its
 * word sums are taken to int32 every 4 chunks (4 x 2 x 31 x 127 = 31496).
 * Tokens run in tiles of up to 2 (16 ymm registers; Q5_K 4, whose
 * unpacking is worth more tokens than the registers it spills), each half
 * of the group in turn; one token takes both halves in one pass.
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
    TT = 4,       /* tokens per tile at most (Q4_K: 2, k45_tokens) */
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

/* 8 bytes at p as 8 dwords, each the byte in both its words (vpmaddwd's multiplier for a row pair of words). */
static inline __m256i word_pairs(const uint8_t *p) {
    const __m256i v = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(const void *)p));
    return _mm256_or_si256(v, _mm256_slli_epi32(v, 16));
}

/* The end of superblock b for half hf and T tokens: the mins by the tokens' group sums into summ, then both
   integer sums times the scales into the running sums acc and accm. */
INLINE void k45_close(const uint8_t *b, size_t S, int hf, const uint8_t *const *yb, const __m256i *sumi, __m256i *summ,
                      __m256 *acc, __m256 *accm, int T) {
    alignas(16) int32_t pairs[TT][4];
    UNROLL
    for (int t = 0; t < T; t++) _mm_store_si128((__m128i *)(void *)pairs[t], group_pairs(yb[t]));
    UNROLL
    for (int h = 0; h < 4; h++) {
        const __m256i mn = _mm256_cvtepu8_epi16(LOAD128(b + S + 128 + 32 * h + 16 * hf));
        UNROLL
        for (int t = 0; t < T; t++) summ[t] = _mm256_add_epi32(summ[t], _mm256_madd_epi16(mn, _mm256_set1_epi32(pairs[t][h])));
    }
    const __m256 dw = _mm256_cvtph_ps(LOAD128(b + S + 256 + 16 * hf));
    const __m256 dm = _mm256_cvtph_ps(LOAD128(b + S + 288 + 16 * hf));
    UNROLL
    for (int t = 0; t < T; t++) {
        float yd;
        memcpy(&yd, yb[t], sizeof yd);
        const __m256 d = _mm256_set1_ps(yd);
        acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sumi[t]), _mm256_mul_ps(dw, d), acc[t]);
        accm[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(summ[t]), _mm256_mul_ps(dm, d), accm[t]);
    }
}

/*
 * The prefetches at step (c, j) of superblock b (SB bytes, Q4_K 2304, Q5_K
 * 2816): its chunk's line, and with c = 0 and 1 the lines past 2048, so that
 * the 32 steps cover every line; each into L1 a superblock past
 * PREFETCH_AHEAD on, and for Q4_K (far) into L2 PREFETCH_FAR on, as Q4_0's
 * (util.h): the far ones keep more lines on their way from memory than the
 * fill buffers alone (Zen 1, llama1b Q4_K_M generation 25.0 -> 27.0 t/s).
 * Q5_K's product, bound by its arithmetic, gained nothing from them
 * (llama1b Q5_K_M 19.0 -> 18.7 t/s).
 */
INLINE void k45_prefetch(const uint8_t *b, size_t SB, int c, int j, int far_too) {
    const char *near = (const char *)b + (PREFETCH_AHEAD / SB + 1) * SB, *far = (const char *)b + PREFETCH_FAR;
    const size_t o = 64 * (size_t)(8 * c + j), x = (c == 0 ? 2048 : 2560) + 64 * (size_t)j;
    _mm_prefetch(near + o, _MM_HINT_T0);
    if (far_too) _mm_prefetch(far + o, _MM_HINT_T1);
    if (c < 2 && x < SB) {
        _mm_prefetch(near + x, _MM_HINT_T0);
        if (far_too) _mm_prefetch(far + x, _MM_HINT_T1);
    }
}

/*
 * Superblocks [0, cnt) of half hf (rows 8 hf ..) of one group at pk (SB
 * bytes apart) for T tokens: yb0[t] is token t's Q8_K block of the first.
 * acc[t] and accm[t] carry the scales' and the mins' running sums.
 */
INLINE void k45_run(const uint8_t *pk, size_t cnt, int hf, const uint8_t *const *yb0, __m256 *acc, __m256 *accm,
                    int T, int five, int pf) {
    const size_t SB = TKV__K45_PACK_BLOCK(five), S = TKV__K45_PACK_SCALES(five);
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    for (size_t i = 0; i < cnt; i++) {
        const uint8_t *b = pk + i * SB, *yb[TT];
        const half_share sh = half_share_of(SB / 2, cnt, hf, i); /* Q4_K (util.h): 18 lines, one a step */
        __m256i sumi[TT], summ[TT];
        UNROLL
        for (int t = 0; t < T; t++) yb[t] = yb0[t] + i * QBS, sumi[t] = _mm256_setzero_si256(), summ[t] = sumi[t];
        UNROLL
        for (int c = 0; c < 4; c++) {
            const __m256i sclo = word_pairs(b + S + 16 * (2 * c) + 8 * hf);
            const __m256i schi = word_pairs(b + S + 16 * (2 * c + 1) + 8 * hf);
            __m256i slo[TT], shi[TT];
            UNROLL
            for (int t = 0; t < T; t++) slo[t] = _mm256_setzero_si256(), shi[t] = slo[t];
            UNROLL
            for (int j = 0; j < 8; j++) {
                if (pf && !five) line_ahead(pk, sh, (size_t)(8 * c + j), 1);
                else if (pf && hf == 0) k45_prefetch(b, SB, c, j, 0); /* Q5_K: the shares cost its 3-4 token tiles 10-14% */
                const __m256i q = LOADA256(b + 64 * (8 * c + j) + 32 * hf);
                __m256i lo = _mm256_and_si256(q, m4), hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
                if (five) { /* bit 2c of the chunk's qh bytes: the low nibbles' fifth bit; 2c + 1: the high ones' */
                    const __m256i h = LOADA256(b + TKV__K45_PACK_QH + 64 * j + 32 * hf);
                    lo = _mm256_or_si256(lo, fifth_bit(h, 2 * c));
                    hi = _mm256_or_si256(hi, fifth_bit(h, 2 * c + 1));
                }
                UNROLL
                for (int t = 0; t < T; t++) {
                    const uint8_t *a = yb[t] + Y_QS + 64 * c + 4 * j;
                    slo[t] = _mm256_add_epi16(slo[t], _mm256_maddubs_epi16(lo, bcast32(a)));
                    shi[t] = _mm256_add_epi16(shi[t], _mm256_maddubs_epi16(hi, bcast32(a + 32)));
                }
                if (j == 7 || (five && j == 3)) { /* the word sums to int32, times the rows' group scales */
                    UNROLL
                    for (int t = 0; t < T; t++) {
                        sumi[t] = _mm256_add_epi32(sumi[t], _mm256_add_epi32(_mm256_madd_epi16(slo[t], sclo),
                                                                             _mm256_madd_epi16(shi[t], schi)));
                        slo[t] = _mm256_setzero_si256(), shi[t] = slo[t];
                    }
                }
            }
        }
        k45_close(b, S, hf, yb, sumi, summ, acc, accm, T);
    }
}

/*
 * Superblocks [0, cnt) of one group at pk (SB bytes apart) for NH halves
 * from hf0 (rows 8 hf0 ..) and T tokens, NH x T at most 2: yb0[t] is token
 * t's Q8_K block of the first. acc[u] and accm[u] (u = h T + t: half
 * hf0 + h, token t) carry the scales' and the mins' running sums. The tiles
 * take it for one token over both halves in one pass, so that each chunk's
 * 64 bytes are used as they arrive (k45_run's pass per half read the group
 * from memory in the first and computed from cache in the second: Zen 1,
 * from memory on two threads, Q4_K 12.4 -> 15.6-16.7 GB/s, Q5_K 11.7 ->
 * 13.8 with its fifth bits by fifth_bit, though 7% slower in cache, where
 * both halves' values spill). k45_run stays for a half at a time: this
 * function with NH = 1 compiled to slower tiles of 2 tokens (a 128-token
 * product 58 -> 67 ms), and a version written for one token alone to a
 * slower pass (11 GB/s; cause not found).
 */
INLINE void k45_run_halves(const uint8_t *pk, size_t cnt, int hf0, int NH, const uint8_t *const *yb0, __m256 *acc,
                           __m256 *accm, int T, int five, int pf) {
    enum { U = 2 }; /* units (half, token) at most */
    const size_t SB = TKV__K45_PACK_BLOCK(five), S = TKV__K45_PACK_SCALES(five);
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    const int NU = NH * T;
    for (size_t i = 0; i < cnt; i++) {
        const uint8_t *b = pk + i * SB, *yb[TT];
        __m256i sumi[U], summ[U];
        UNROLL
        for (int t = 0; t < T; t++) yb[t] = yb0[t] + i * QBS;
        UNROLL
        for (int u = 0; u < NU; u++) sumi[u] = _mm256_setzero_si256(), summ[u] = sumi[u];
        /* a loop: unrolled, gcc 12 spilled Q5_K's values and sums (37% of a 1B Q5_K_M generation's samples in
           this pass on instructions at %rsp); rolled, bench/kernel-ab --packed, one token: Q5_K 1.09-1.27x in
           cache, 1.07-1.10x from memory on 2 threads, Q4_K within 3% either way */
        _Pragma("GCC unroll 1")
        for (int c = 0; c < 4; c++) {
            __m256i slo[U], shi[U];
            UNROLL
            for (int u = 0; u < NU; u++) slo[u] = _mm256_setzero_si256(), shi[u] = slo[u];
            UNROLL
            for (int j = 0; j < 8; j++) {
                if (pf && hf0 == 0) k45_prefetch(b, SB, c, j, !five);
                __m256i lo[2], hi[2];
                UNROLL
                for (int h = 0; h < NH; h++) {
                    const int hf = hf0 + h;
                    const __m256i q = LOADA256(b + 64 * (8 * c + j) + 32 * hf);
                    lo[h] = _mm256_and_si256(q, m4), hi[h] = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
                    if (five) { /* bit 2c of the chunk's qh bytes: the low nibbles' fifth bit; 2c + 1: the high ones' */
                        const __m256i hb = LOADA256(b + TKV__K45_PACK_QH + 64 * j + 32 * hf);
                        lo[h] = _mm256_or_si256(lo[h], fifth_bit(hb, 2 * c));
                        hi[h] = _mm256_or_si256(hi[h], fifth_bit(hb, 2 * c + 1));
                    }
                }
                UNROLL
                for (int t = 0; t < T; t++) {
                    const uint8_t *a = yb[t] + Y_QS + 64 * c + 4 * j;
                    const __m256i ya = bcast32(a), yh = bcast32(a + 32);
                    UNROLL
                    for (int h = 0; h < NH; h++) {
                        const int u = h * T + t;
                        slo[u] = _mm256_add_epi16(slo[u], _mm256_maddubs_epi16(lo[h], ya));
                        shi[u] = _mm256_add_epi16(shi[u], _mm256_maddubs_epi16(hi[h], yh));
                    }
                }
                if (j == 7 || (five && j == 3)) { /* the word sums to int32, times the rows' group scales */
                    UNROLL
                    for (int h = 0; h < NH; h++) {
                        const int hf = hf0 + h;
                        const __m256i sclo = word_pairs(b + S + 16 * (2 * c) + 8 * hf);
                        const __m256i schi = word_pairs(b + S + 16 * (2 * c + 1) + 8 * hf);
                        UNROLL
                        for (int t = 0; t < T; t++) {
                            const int u = h * T + t;
                            sumi[u] = _mm256_add_epi32(sumi[u], _mm256_add_epi32(_mm256_madd_epi16(slo[u], sclo),
                                                                                 _mm256_madd_epi16(shi[u], schi)));
                            slo[u] = _mm256_setzero_si256(), shi[u] = slo[u];
                        }
                    }
                }
            }
        }
        UNROLL
        for (int h = 0; h < NH; h++) k45_close(b, S, hf0 + h, yb, &sumi[h * T], &summ[h * T], &acc[h * T], &accm[h * T], T);
    }
}

/*
 * One group (pk: its superblock k0; cnt superblocks) for the T tokens at
 * yt[t] (their rows; block k0 of each is read first), both halves (one
 * token: in one pass): the running sums from the stash st (32 floats a
 * token; zero when first), back to it, or when last to y[t ldy + k] for the
 * group's first nrow rows.
 */
INLINE void k45_tile(const uint8_t *pk, size_t k0, size_t cnt, const uint8_t *const *yt, float *st, int first, int last,
                     float *y, size_t ldy, size_t nrow, int T, int five, int pf) {
    const uint8_t *yb[TT];
    UNROLL
    for (int t = 0; t < T; t++) yb[t] = yt[t] + k0 * QBS;
    if (T == 1 && nrow > 8) { /* one token: both halves in one pass */
        __m256 acc[2], accm[2];
        for (int hf = 0; hf < 2; hf++) sums_start(st, first, 1, hf, &acc[hf], &accm[hf]);
        k45_run_halves(pk, cnt, 0, 2, yb, acc, accm, 1, five, pf);
        for (int hf = 0; hf < 2; hf++) sums_end(st, last, 1, hf, &acc[hf], &accm[hf], y, ldy, nrow);
        return;
    }
    for (int hf = 0; hf < 2; hf++) {
        if ((size_t)hf * 8 >= nrow) break;
        __m256 acc[TT], accm[TT];
        sums_start(st, first, T, hf, acc, accm);
        k45_run(pk, cnt, hf, yb, acc, accm, T, five, pf);
        sums_end(st, last, T, hf, acc, accm, y, ldy, nrow);
    }
}

/* Pass p (util.h's sb_pass) in tiles of 4, 3, 2, 1; the first tile reads the group from memory when p streams it, the others from cache. */
INLINE void k45_tokens(const sb_pass *p, int five) {
    /* Q5_K's unpacking (its fifth bits) is worth tiles of 4 tokens (a layer's prefill products on Zen 1, one
       thread: 30 -> 34.5 GF/s); Q4_K's tiles of 4 were 2-8% faster there alone but slower in llama1b Q4_K_M */
    const size_t tt = five ? TT : 2;
    for (size_t u = 0; u < p->tn;) {
        const uint8_t *yt[TT];
        float *sb, *yo;
        const int T = sb_tile(p, u, tt, yt, &sb, &yo), pf = p->stream && u == 0;
        if (T == 4) k45_tile(p->pk, p->k0, p->cnt, yt, sb, p->first, p->last, yo, p->ldy, p->nrow, 4, five, pf);
        else if (T == 3) k45_tile(p->pk, p->k0, p->cnt, yt, sb, p->first, p->last, yo, p->ldy, p->nrow, 3, five, pf);
        else if (T == 2) k45_tile(p->pk, p->k0, p->cnt, yt, sb, p->first, p->last, yo, p->ldy, p->nrow, 2, five, pf);
        else k45_tile(p->pk, p->k0, p->cnt, yt, sb, p->first, p->last, yo, p->ldy, p->nrow, 1, five, pf);
        u += (size_t)T;
    }
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
void tkv__packed_q4_K_avx2(size_t n, const void *w, size_t gs, size_t nr, const void *xq, size_t xrs, size_t n_tok,
                             float *y, size_t ldy) {
    sb_over_packed(q4k_pass, n / TKV__QK_K, w, gs, nr, xq, xrs, n_tok, y, ldy, TC);
}

void tkv__packed_q5_K_avx2(size_t n, const void *w, size_t gs, size_t nr, const void *xq, size_t xrs, size_t n_tok,
                             float *y, size_t ldy) {
    sb_over_packed(q5k_pass, n / TKV__QK_K, w, gs, nr, xq, xrs, n_tok, y, ldy, TC);
}

void tkv__gemm_q4_K_avx2(size_t n, const void *w, size_t wrs, size_t nr, const void *xq, size_t xrs, size_t n_tok,
                           float *y, size_t ldy) {
    gemm_k45(q4k_pass, tkv__pack_q4k_blocks, n, w, wrs, nr, xq, xrs, n_tok, y, ldy);
}

void tkv__gemm_q5_K_avx2(size_t n, const void *w, size_t wrs, size_t nr, const void *xq, size_t xrs, size_t n_tok,
                           float *y, size_t ldy) {
    gemm_k45(q5k_pass, tkv__pack_q5k_blocks, n, w, wrs, nr, xq, xrs, n_tok, y, ldy);
}

#endif
