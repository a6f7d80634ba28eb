/*
 * compute/x86/util.h — the small helpers that the tiled products of both SIMD
 * levels share (gemm_*_avx2.c, gemm_*_avx512.c, through compute/x86/avx2/util.h and
 * compute/x86/avx512/util.h): fp16 scales, nibble unpacking, the K types' and
 * IQ4_XS's quants and scales, prefetches, the load macros. Nothing here
 * depends on the register width of a level.
 *
 * Included only by files compiled with at least -mavx2 -mfma -mf16c (see
 * kernels.cmake); without those flags it declares nothing.
 */
#ifndef TKV_GEMM_X86_UTIL_H
#define TKV_GEMM_X86_UTIL_H

#include "compute/quant/quant.h"
#include "compute/quant/repack.h"

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#if defined(__x86_64__) && defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include <immintrin.h>

#define INLINE static inline __attribute__((always_inline))
/* out of line wherever it is called from: a tile's or a panel's code stays
   one function, the same however the driver around it (tile_driver.h) inlines */
#define NOINLINE static __attribute__((noinline))
/* fully unrolled tile loops: the accumulators then live in registers */
#define UNROLL _Pragma("GCC unroll 8")
#define LOAD128(p) _mm_loadu_si128((const __m128i *)(const void *)(p))
#define LOAD256(p) _mm256_loadu_si256((const __m256i *)(const void *)(p))
#define LOADA256(p) _mm256_load_si256((const __m256i *)(const void *)(p))

static inline float f16(uint16_t h) {
    return _cvtsh_ss(h);
}

/* 16 float lanes (lo: 0-7, hi: 8-15) summed by halves: lanes l + 8 and l, then l + 4 and l, then l + 2 and l,
   then 1 and 0 (the order of _mm512_reduce_add_ps in the reference's compiler; the float products'
   reduction, gemm_float.c and gemm_bf16_pairs.c at both levels) */
static inline float sum16_halves(__m256 lo, __m256 hi) {
    const __m256 s8 = _mm256_add_ps(hi, lo);
    const __m128 s4 = _mm_add_ps(_mm256_extractf128_ps(s8, 1), _mm256_castps256_ps128(s8));
    const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    return _mm_cvtss_f32(_mm_add_ss(s2, _mm_movehdup_ps(s2)));
}

static inline size_t min_sz(size_t a, size_t b) {
    return a < b ? a : b;
}

/* The fp16 scale at the start of a block (blk may be unaligned). */
static inline float blk_d(const uint8_t *blk) {
    uint16_t h;
    memcpy(&h, blk, 2);
    return f16(h);
}

/* 16 bytes of nibbles to 32 bytes: elements 0-15 in the low nibbles, 16-31 in the high. */
static inline __m256i nibbles32(const uint8_t *qs) {
    const __m128i b = LOAD128(qs);
    const __m128i m = _mm_set1_epi8(0x0f);
    return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(b, 4), m), _mm_and_si128(b, m));
}

/*
 * The 256 quants (0..63) of a Q6_K block in element order, as 8 x 32 bytes,
 * from its ql (128 bytes: low 4 bits) and qh (64 bytes: high 2 bits): the
 * bytes every level's Q6_K products multiply (compute/quant/quant.h's layout).
 */
static inline void q6k_quants(const uint8_t *ql, const uint8_t *qh, __m256i q[8]) {
    /* each quarter's 2 high bits moved to bits 4-5 and masked there (17 operations a half, not 21: a
       compute-bound core, Zen 1, spends a fifth of the one-token product here) */
    const __m256i m4 = _mm256_set1_epi8(0x0f), m30 = _mm256_set1_epi8(0x30);
    for (int h = 0; h < 2; h++) {
        const __m256i l0 = _mm256_loadu_si256((const __m256i *)(const void *)(ql + 64 * h));
        const __m256i l1 = _mm256_loadu_si256((const __m256i *)(const void *)(ql + 64 * h + 32));
        const __m256i hb = _mm256_loadu_si256((const __m256i *)(const void *)(qh + 32 * h));
        q[4 * h] = _mm256_or_si256(_mm256_and_si256(l0, m4), _mm256_and_si256(_mm256_slli_epi16(hb, 4), m30));
        q[4 * h + 1] = _mm256_or_si256(_mm256_and_si256(l1, m4), _mm256_and_si256(_mm256_slli_epi16(hb, 2), m30));
        q[4 * h + 2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4), _mm256_and_si256(hb, m30));
        q[4 * h + 3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
                                       _mm256_and_si256(_mm256_srli_epi16(hb, 2), m30));
    }
}

/*
 * The 8 sub-block scales of an IQ4_XS block as int16, tkv__iq4_xs_scale's
 * values (-32..31) in sub-block order: the low 4 bits from scales_l's
 * nibbles, the high 2 from scales_h (bits 2b, 2b + 1 moved to bits 14, 15
 * of word b by a multiply, then down to 4, 5).
 */
static inline __m128i iq4xs_scales(const tkv__block_iq4_xs *x) {
    uint16_t h;
    uint32_t l;
    memcpy(&h, &x->scales_h, sizeof h);
    memcpy(&l, x->scales_l, sizeof l);
    const __m128i lv = _mm_cvtsi32_si128((int)l), m4 = _mm_set1_epi8(0x0f);
    /* bytes 2j, 2j + 1: scales_l[j]'s low and high nibble (sub-blocks 2j, 2j + 1) */
    const __m128i lo = _mm_cvtepu8_epi16(_mm_unpacklo_epi8(_mm_and_si128(lv, m4), _mm_and_si128(_mm_srli_epi16(lv, 4), m4)));
    const __m128i up = _mm_mullo_epi16(_mm_set1_epi16((short)h),
                                       _mm_setr_epi16(1 << 14, 1 << 12, 1 << 10, 1 << 8, 1 << 6, 1 << 4, 1 << 2, 1));
    const __m128i hi = _mm_and_si128(_mm_srli_epi16(up, 10), _mm_set1_epi16(0x30));
    return _mm_sub_epi16(_mm_or_si128(lo, hi), _mm_set1_epi16(32));
}

/*
 * How far ahead the one-token products over packed rows ask for their
 * weights: a group's rows are one sequential stream, yet from memory
 * (a matrix larger than the caches, as every layer of a 1B model is) the
 * hardware prefetcher alone leaves a thread at 17-34 GB/s where software
 * prefetches this far ahead reach 40-52 (bench_kernels -n 4096 -r 16384, one
 * thread, avx512: Q4_K 24 -> 48 GB/s).
 */
#define PREFETCH_AHEAD 8192

/*
 * The avx2 level's Q4_0 and IQ4_NL products over packed rows, whose
 * arithmetic per byte is the least, ask at two distances: PREFETCH_NEAR into L1 (a line there
 * waits in a fill buffer, of which a core has a few dozen, so this one
 * stays short) and PREFETCH_FAR into L2 (prefetch_far), which keeps more
 * lines on their way from memory than the L1 requests can. Two threads,
 * products of 2048 rows from memory (bench_kernels -n 2048 -r 262144 -T 2
 * -c 2048, 4 interleaved runs): Q4_0 37.7 -> 47.4 GB/s at avx512, 18.5 ->
 * 23.0 at avx2 (which had no software prefetch); llama1b Q4_0 generation
 * 59.4 -> 66.1 t/s (bench/RESULTS.md), with the scales apart from the
 * quants then (the avx512 level's, in one stream now, asks PREFETCH_AHEAD
 * on alone: prefetch_block_ahead); the avx2 level's Q4_K asks at
 * both too (its k45_prefetch: Zen 1, llama1b Q4_K_M 25.0 -> 27.0 t/s), and
 * so does the avx512 level's one-token Q3_K run (Zen 5, two threads:
 * Q3_K 36-39 -> 40-41 GB/s; its q23k_run, which asks for the far line
 * into L1 as well, T0: 13% faster in the fast memory phase; Q2_K there
 * asks PREFETCH_AHEAD alone: 15% faster). The others keep PREFETCH_AHEAD
 * alone: on Zen 5 both distances cost Q4_K, Q5_K, Q6_K, IQ4_XS, Q4_0, Q8_0
 * and IQ4_NL 2-12% on two threads from memory (2026-12-07), as earlier
 * tries of Q4_K, Q5_K and the interleaved products had found.
 */
#define PREFETCH_NEAR 4096
#define PREFETCH_FAR 32768

/*
 * Ask for bytes [0, len) at p, a line at a time (prefetches never fault: p may be past the group's end).
 * Always inlined, as prefetch_rows: a prefetch changes no memory, so gcc (12) finds a function of nothing
 * but prefetches const and deletes its calls where it does not inline it first, which it did in every
 * always_inline caller (the one-token Q2_K and Q3_K products ran without prefetches from the day they
 * became INLINE until this was seen in their disassembly).
 */
INLINE void prefetch_span(const uint8_t *p, size_t len) {
    for (size_t o = 0; o < len; o += 64) _mm_prefetch((const char *)p + o, _MM_HINT_T0);
}

/* Ask L2 for bytes [PREFETCH_FAR, PREFETCH_FAR + len) past p, a line at a time: called once per step over
   [p, p + len) of a stream, so that consecutive steps cover every line of it (always inlined: prefetch_span). */
INLINE void prefetch_far(const uint8_t *p, size_t len) {
    for (size_t o = 0; o < len; o += 64) _mm_prefetch((const char *)p + PREFETCH_FAR + o, _MM_HINT_T1);
}

/*
 * The two drivers of the products over transposed superblocks (each level's gemm_q4_q5_k.c, gemm_q2_q3_k.c,
 * gemm_iq4_xs.c). A pass: tokens [t0, t0 + tn) of xb (rows xrs apart) over superblocks [k0, k0 + cnt) of one group
 * of 16 rows at pk; their running sums from the stash st unless first, back to it unless last, else to y (the
 * group's first nrow rows, ldy apart); stream: the group comes from memory, so the pass asks for it ahead.
 */
typedef struct sb_pass {
    const uint8_t *pk;
    size_t k0, cnt;
    const uint8_t *xb;
    size_t xrs, t0, tn;
    float *st;
    int first, last;
    float *y;
    size_t ldy, nrow;
    int stream;
} sb_pass;

/*
 * Tile u of pass p (its tokens u .. u + T - 1, T at most tt: the return): their activation rows yt, their running
 * sums' place in the stash (*st: NULL when the pass has none) and their outputs (*y). A type's tiles take T as a
 * constant, so its pass switches on it (SB_TILES).
 */
INLINE int sb_tile(const sb_pass *p, size_t u, size_t tt, const uint8_t **yt, float **st, float **y) {
    const int T = (int)min_sz(tt, p->tn - u);
    for (int t = 0; t < T; t++) yt[t] = p->xb + (p->t0 + u + (size_t)t) * p->xrs;
    *st = p->st ? p->st + 32 * u : NULL;
    *y = p->y + (p->t0 + u) * p->ldy;
    return T;
}

/*
 * Pass p's tokens in tiles of at most tt (4 at most), one after another: TILE(T, yt, st, y, pf) runs one, with T a
 * constant 4, 3, 2 or 1 (a tile's registers are sized by it), yt, st and y as sb_tile gives them, and pf true for the
 * first tile when p streams its group from memory (the others read it from cache). A macro, so that each family's
 * tile is inlined at each constant T. The avx512 level's passes use it (the same machine code as their switches
 * written out); the avx2 level's keep their if-chains, which gcc 12 compiles to other code than this switch there,
 * not timed on an AVX2-only core since.
 */
#define SB_TILES(p, tt, TILE)                                                                                        \
    for (size_t sb_u_ = 0; sb_u_ < (p)->tn;) {                                                                       \
        const uint8_t *sb_yt_[4];                                                                                    \
        float *sb_st_, *sb_y_;                                                                                       \
        const int sb_t_ = sb_tile((p), sb_u_, (tt), sb_yt_, &sb_st_, &sb_y_), sb_pf_ = (p)->stream && sb_u_ == 0;    \
        switch (sb_t_) {                                                                                             \
        case 4: TILE(4, sb_yt_, sb_st_, sb_y_, sb_pf_); break;                                                       \
        case 3: TILE(3, sb_yt_, sb_st_, sb_y_, sb_pf_); break;                                                       \
        case 2: TILE(2, sb_yt_, sb_st_, sb_y_, sb_pf_); break;                                                       \
        default: TILE(1, sb_yt_, sb_st_, sb_y_, sb_pf_); break;                                                      \
        }                                                                                                            \
        sb_u_ += (size_t)sb_t_;                                                                                      \
    }

/* The part of a packed Q6_K superblock o from its scales on (repack.h: scales as each row's pairs, d, padding) for
   block i of the 16 rows (NULL: zeros), as tkv__pack_q6k_blocks writes it: the levels' own packers (each
   gemm_q6_k.c's pack6) transpose the values and leave this here. */
INLINE void pack6_tail(const void *const rows[TKV__PACK_ROWS], size_t i, uint8_t *o) {
    memset(o + TKV__Q6K_PACK_SCALES, 0, TKV__Q6K_PACK_BLOCK - TKV__Q6K_PACK_SCALES);
    for (int k = 0; k < TKV__PACK_ROWS; k++) {
        if (!rows[k]) continue;
        const tkv__block_q6_K *b = (const tkv__block_q6_K *)rows[k] + i;
        for (int g = 0; g < 16; g++) o[TKV__Q6K_PACK_SCALES + 32 * (g / 2) + 2 * k + g % 2] = (uint8_t)b->scales[g];
        memcpy(o + TKV__Q6K_PACK_D + 2 * k, &b->d, 2);
    }
}

/* A type's pass (its tiles), and its layout's packing (compute/quant/repack.h's tkv__pack_*_blocks). */
typedef void sb_pass_fn(const sb_pass *p);
typedef void sb_pack_fn(const void *const rows[TKV__PACK_ROWS], size_t i0, size_t i1, void *out);

/* Over packed rows (kernels.h's `packed`; w the first group, gs apart; nb superblocks a row): each group once per
   chunk of tc tokens, whole, in one pass. */
static inline void sb_over_packed(sb_pass_fn *pass, size_t nb, const void *w, size_t gs, size_t nr, const void *xq,
                                  size_t xrs, size_t n_tok, float *y, size_t ldy, size_t tc) {
    for (size_t t0 = 0; t0 < n_tok; t0 += tc)
        for (size_t r = 0; r < nr; r += TKV__PACK_ROWS)
            pass(&(sb_pass){.pk = (const uint8_t *)w + r / TKV__PACK_ROWS * gs, .k0 = 0, .cnt = nb, .xb = xq, .xrs = xrs,
                            .t0 = t0, .tn = min_sz(tc, n_tok - t0), .st = NULL, .first = 1, .last = 1, .y = y + r,
                            .ldy = ldy, .nrow = min_sz(TKV__PACK_ROWS, nr - r), .stream = 1});
}

/* Over the file's rows (wrs bytes apart): per group of 16 rows, chunks of kc superblocks packed into pan by pack,
   then a pass over them, the sums carried through the stash st (32 floats a token of a chunk of tc). */
static inline void sb_over_rows(sb_pass_fn *pass, sb_pack_fn *pack, size_t nb, const void *w, size_t wrs, size_t nr,
                                const void *xq, size_t xrs, size_t n_tok, float *y, size_t ldy, size_t tc, size_t kc,
                                void *pan, float *st) {
    const uint8_t *wb = w;
    for (size_t t0 = 0; t0 < n_tok; t0 += tc)
        for (size_t r = 0; r < nr; r += TKV__PACK_ROWS) {
            const void *rows[TKV__PACK_ROWS];
            for (size_t k = 0; k < TKV__PACK_ROWS; k++) rows[k] = r + k < nr ? wb + (r + k) * wrs : NULL;
            for (size_t k0 = 0; k0 < nb; k0 += kc) {
                const size_t cnt = min_sz(kc, nb - k0);
                pack(rows, k0, k0 + cnt, pan);
                pass(&(sb_pass){.pk = pan, .k0 = k0, .cnt = cnt, .xb = xq, .xrs = xrs, .t0 = t0,
                                .tn = min_sz(tc, n_tok - t0), .st = st, .first = k0 == 0, .last = k0 + cnt == nb,
                                .y = y + r, .ldy = ldy, .nrow = min_sz(TKV__PACK_ROWS, nr - r), .stream = 0});
            }
        }
}

/*
 * The prefetches for block i of a packed group g that is one stream of blocks `bytes` long each on average
 * (compute/quant/repack.h: Q4_0 and IQ4_NL 288 in pairs of 576, Q8_0 544 in pairs of 1088, Q5_0 352), so that
 * consecutive blocks cover every line; past the group's end lies the next group, which they then ask for. The avx512
 * level asks PREFETCH_AHEAD on into L1: one thread, products of 2048 rows from memory (bench_kernels -n 2048 -r 262144
 * -T 1 -c 2048, Zen 5, 3 interleaved runs), Q4_0 42-43 GB/s against 34-36 at both distances or 37-38 with none, Q8_0
 * 41-43 against 40 with none (the read probe: 44).
 */
INLINE void prefetch_block_ahead(const uint8_t *g, size_t i, size_t bytes) {
    prefetch_span(g + bytes * i + PREFETCH_AHEAD, bytes);
}

/* The avx2 level's: at both distances, which a one-stream Q8_0 group needed on the core that level runs on alone
   (Zen 1: the avx2 packed_few's note). */
INLINE void prefetch_block_near_far(const uint8_t *g, size_t i, size_t bytes) {
    prefetch_span(g + bytes * i + PREFETCH_NEAR, bytes);
    prefetch_far(g + bytes * i, bytes);
}

/*
 * A group's run of cnt superblocks read in halves (the avx2 level's products of 8 rows a ymm: rows 0-7 over
 * every superblock, then rows 8-15) asks for the lines ahead in both halves' passes: step i of half hf, one of
 * 2 cnt, owns [lo, hi) of the run (`half` bytes a step: the run's bytes over 2 cnt), and its k-th line
 * (line_ahead) is asked for PREFETCH_AHEAD on, past the run's end in the next group's. Asked in the first
 * half's pass alone, the memory idles through the second (Zen 3, two threads from memory: Q2_K ~10 -> ~16
 * GB/s, Q3_K ~9 -> ~12).
 */
typedef struct half_share {
    size_t lo, hi;
} half_share;

INLINE half_share half_share_of(size_t half, size_t cnt, int hf, size_t i) {
    const size_t step = (size_t)hf * cnt + i;
    return (half_share){(step * half) & ~(size_t)63, ((step + 1) * half) & ~(size_t)63};
}

/* Line k of the share sh of the run at pk, PREFETCH_AHEAD on into L1 and, with far, PREFETCH_FAR on into L2. */
INLINE void line_ahead(const uint8_t *pk, half_share sh, size_t k, int far) {
    const size_t o = sh.lo + 64 * k;
    if (o < sh.hi) {
        _mm_prefetch((const char *)pk + PREFETCH_AHEAD + o, _MM_HINT_T0);
        if (far) _mm_prefetch((const char *)pk + PREFETCH_FAR + o, _MM_HINT_T1);
    }
}

/* The tiles of a chunk of tn tokens: 'big' tokens each, then 4, 2, 1 (no padding). */
static inline int plan_tiles(size_t tn, int big, size_t *start, int *len) {
    int nt = 0;
    for (size_t u = 0; u < tn;) {
        const size_t rem = tn - u;
        const int t = rem >= (size_t)big ? big : rem >= 4 ? 4 : rem >= 2 ? 2 : 1;
        start[nt] = u;
        len[nt++] = t;
        u += (size_t)t;
    }
    return nt;
}

/*
 * Ask for the weights the next panel will unpack (bytes [off, off + len) of
 * each of nrow rows) while this panel's tiles run: a panel reads only a few
 * cache lines per row, too few for the hardware prefetcher to get ahead.
 */
INLINE void prefetch_rows(const uint8_t *const *rows, int nrow, size_t off, size_t len) {
    for (int k = 0; k < nrow; k++)
        for (size_t o = 0; o < len; o += 64) _mm_prefetch((const char *)rows[k] + off + o, _MM_HINT_T0);
}

#endif
#endif
