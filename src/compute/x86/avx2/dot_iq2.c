/*
 * compute/x86/avx2/dot_iq2.c — the avx2 IQ2_XXS, IQ2_XS and IQ2_S vec_dots (compiled with -mavx2 -mfma
 * -mf16c, reached only through the table), in the lanes of compute/x86/avx2/kernels.c's
 * IQ2 dots and compute/x86/avx2/gemm_iq2.c's tiled product, bit for bit.
 *
 * One token's products are decode-bound: the straightforward loop spends
 * some forty scalar instructions per 32 elements pulling the grid and sign
 * indices out of the 16-bit words, looking signs up byte by byte and
 * building the scale vector. Here each block's 32 words are split in two
 * vector passes: the 7-bit sign indices to bytes whose eighth bit is their
 * parity (tkv__iq_signs' rule, so the same sign bytes as that table), and
 * the eight scale bytes to 2 ls + 1 once, one vpshufb per sub-block then
 * placing its two int16 halves. The grid indices (bytes for IQ2_XXS, 9 bits
 * of a word for IQ2_XS) are read from the block in general registers and
 * the codebook with scalar loads (AVX2 gathers are no faster; indices put in
 * a vector first cost a vpextrw each, 14-16% of the dot). IQ2_S stores its
 * sign bytes; its 10-bit indices are put together in two vector passes (in
 * registers, three operations an index, measured no faster).
 */
#include "compute/gemm.h"
#include "compute/quant/quant.h"
#include "compute/quant/grids.h"
#include "compute/quant/iq.h"
#include "compute/x86/iq_signs.h"
#include "util.h"

#include <stdalign.h>
#include <stdint.h>
#include <string.h>

#if defined(__x86_64__) && defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include <immintrin.h>

#define LOAD256(p) _mm256_loadu_si256((const __m256i *)(const void *)(p))

static inline float hsum_f32(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* 0xff in byte j when bit j of the uint32 at p is set, else 0. */
static inline __m256i bit_mask32(const uint32_t *p) {
    const __m256i shuf = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2,
                                          3, 3, 3, 3, 3, 3, 3, 3);
    const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ULL);
    const __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi32((int)*p), shuf);
    return _mm256_cmpeq_epi8(_mm256_and_si256(v, bit), bit);
}

/* sub-block b's scales from iq2_scales16: byte 2b to the low lane's int16, 2b + 1 to the high lane's; the odd
   bytes of the control (0x80 + 2b) zero the high byte of each int16 */
static inline __m256i sub_scales(__m256i ls, int b) {
    const __m256i ctl0 = _mm256_setr_epi8(0, -128, 0, -128, 0, -128, 0, -128, 0, -128, 0, -128, 0, -128, 0, -128, /**/
                                          1, -128, 1, -128, 1, -128, 1, -128, 1, -128, 1, -128, 1, -128, 1, -128);
    return _mm256_shuffle_epi8(ls, _mm256_add_epi8(ctl0, _mm256_set1_epi8((char)(2 * b))));
}

enum iq2_kind { IQ2_XXS, IQ2_XS, IQ2_S };

/*
 * The four grid points of sub-block b of a block of the kind, their indices
 * taken from the block's bytes in general registers: put together in vectors
 * and read back lane by lane (vpextrw), they cost 32 extractions a block on
 * the vector ports the products need.
 */
static inline __m256i grid4_at(enum iq2_kind kind, const uint64_t *grid, const void *blk, const uint16_t *gi, int b) {
    unsigned ix[4];
    if (kind == IQ2_XXS) { /* sub-block b's first 4 bytes */
        const uint8_t *q = (const uint8_t *)((const tkv__block_iq2_xxs *)blk)->qs + 8 * b;
        for (int l = 0; l < 4; l++) ix[l] = q[l];
    } else if (kind == IQ2_XS) { /* the low 9 bits of groups 4b .. 4b + 3 */
        uint64_t v;
        memcpy(&v, ((const tkv__block_iq2_xs *)blk)->qs + 4 * b, sizeof v);
        for (int l = 0; l < 4; l++) ix[l] = (unsigned)(v >> 16 * l) & 511;
    } else { /* IQ2_S: put together in vectors (gi) by the caller, which measured as fast as in registers here */
        for (int l = 0; l < 4; l++) ix[l] = gi[4 * b + l];
    }
    return _mm256_set_epi64x((long long)grid[ix[3]], (long long)grid[ix[2]], (long long)grid[ix[1]],
                             (long long)grid[ix[0]]);
}

/* One block's 8 lanes, in the lanes compute/x86/avx2/kernels.c's IQ2 comment states: the block blk of the kind
   (IQ2_S: its grid indices gi), sign words sw. */
static inline __m256i block_lanes(enum iq2_kind kind, const uint64_t *grid, const void *blk, const uint16_t *gi,
                                  const uint32_t *sw, __m256i ls, const int8_t *yq) {
    __m256i sumi0 = _mm256_setzero_si256(), sumi1 = _mm256_setzero_si256();
    for (int b = 0; b < 8; b++) {
        const __m256i q = grid4_at(kind, grid, blk, gi, b);
        const __m256i neg = bit_mask32(sw + b);
        const __m256i sa = _mm256_sub_epi8(_mm256_xor_si256(LOAD256(yq + 32 * b), neg), neg);
        const __m256i d = _mm256_madd_epi16(_mm256_maddubs_epi16(q, sa), sub_scales(ls, b));
        /* two chains: integer sums, so the order is free */
        if (b & 1)
            sumi1 = _mm256_add_epi32(sumi1, d);
        else
            sumi0 = _mm256_add_epi32(sumi0, d);
    }
    return _mm256_add_epi32(sumi0, sumi1);
}

float tkv__dot_iq2_s_avx2(size_t n, const void *w, const void *a) {
    const tkv__block_iq2_s *x = w;
    const tkv__block_q8_K *y = a;
    /* u16 lane j of a 16-group half: qh byte j / 4 (the low lane bytes 0, 1 of the half's four, the high 2, 3) */
    const __m256i rep = _mm256_setr_epi8(0, -1, 0, -1, 0, -1, 0, -1, 1, -1, 1, -1, 1, -1, 1, -1, /**/
                                         2, -1, 2, -1, 2, -1, 2, -1, 3, -1, 3, -1, 3, -1, 3, -1);
    /* group l of a sub-block: bits 2l, 2l + 1 of its qh byte to bits 8, 9 */
    const __m256i mul = _mm256_setr_epi16(256, 64, 16, 4, 256, 64, 16, 4, 256, 64, 16, 4, 256, 64, 16, 4);
    const __m256i m300 = _mm256_set1_epi16(0x300);
    __m256 acc = _mm256_setzero_ps();
    for (size_t i = 0; i < n / TKV__QK_K; i++) {
        alignas(32) uint16_t gi[32];
        uint32_t sw[8];
        memcpy(sw, x[i].qs + 32, 32);
        uint32_t h[2];
        memcpy(h, x[i].qh, 8);
        for (int half = 0; half < 2; half++) {
            const __m256i hb = _mm256_shuffle_epi8(_mm256_set1_epi32((int)h[half]), rep);
            const __m256i hi = _mm256_and_si256(_mm256_mullo_epi16(hb, mul), m300);
            const __m256i lo = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)(const void *)(x[i].qs + 16 * half)));
            _mm256_store_si256((__m256i *)(void *)(gi + 16 * half), _mm256_or_si256(lo, hi));
        }
        const __m256i sumi = block_lanes(IQ2_S, tkv__iq2s_grid, &x[i], gi, sw, iq2_scales16(x[i].scales), y[i].qs);
        acc = _mm256_fmadd_ps(_mm256_set1_ps(_cvtsh_ss(x[i].d) * y[i].d), _mm256_cvtepi32_ps(sumi), acc);
    }
    return 0.125f * hsum_f32(acc);
}

float tkv__dot_iq2_xs_avx2(size_t n, const void *w, const void *a) {
    const tkv__block_iq2_xs *x = w;
    const tkv__block_q8_K *y = a;
    __m256 acc = _mm256_setzero_ps();
    for (size_t i = 0; i < n / TKV__QK_K; i++) {
        const uint8_t *qs = (const uint8_t *)x[i].qs;
        const __m256i q0 = LOAD256(qs), q1 = LOAD256(qs + 32);
        alignas(32) uint32_t sw[8]; /* sub-block b's four sign bytes */
        /* packus interleaves the 128-bit lanes: groups 0-7, 16-23 | 8-15, 24-31; the permute restores order */
        const __m256i sb = _mm256_permute4x64_epi64(
            _mm256_packus_epi16(_mm256_srli_epi16(q0, 9), _mm256_srli_epi16(q1, 9)), 0xd8);
        _mm256_store_si256((__m256i *)(void *)sw, iq_with_parity(sb));
        const __m256i sumi = block_lanes(IQ2_XS, tkv__iq2xs_grid, &x[i], NULL, sw, iq2_scales16(x[i].scales), y[i].qs);
        acc = _mm256_fmadd_ps(_mm256_set1_ps(_cvtsh_ss(x[i].d) * y[i].d), _mm256_cvtepi32_ps(sumi), acc);
    }
    return 0.125f * hsum_f32(acc);
}

/*
 * IQ2_XXS: sub-block b is 8 bytes, four 8-bit grid indices then a word with four 7-bit sign indices
 * (bits 0, 7, 14, 21) and ls (bits 28-31), one scale for all 32 elements. Both 32-byte halves of a
 * block are split at once: the even dwords (grid bytes) and odd ones (words) gathered by
 * shuffle_ps, whose per-lane interleave (sub-blocks 0, 1, 4, 5 | 2, 3, 6, 7) a permute undoes.
 */
float tkv__dot_iq2_xxs_avx2(size_t n, const void *w, const void *a) {
    const tkv__block_iq2_xxs *x = w;
    const tkv__block_q8_K *y = a;
    __m256 acc = _mm256_setzero_ps();
    for (size_t i = 0; i < n / TKV__QK_K; i++) {
        const uint8_t *qs = (const uint8_t *)x[i].qs;
        const __m256 q0 = _mm256_castsi256_ps(LOAD256(qs)), q1 = _mm256_castsi256_ps(LOAD256(qs + 32));
        const __m256i h = _mm256_permute4x64_epi64(_mm256_castps_si256(_mm256_shuffle_ps(q0, q1, 0xdd)), 0xd8);
        alignas(32) uint32_t sw[8];
        _mm256_store_si256((__m256i *)(void *)sw, iq_word_signs(h));
        /* 2 ls + 1 of sub-block b in bytes 2b and 2b + 1 of both lanes, the layout block_lanes reads */
        __m256i ls = _mm256_srli_epi32(h, 28);
        ls = _mm256_add_epi32(_mm256_add_epi32(ls, ls), _mm256_set1_epi32(1));
        ls = _mm256_or_si256(ls, _mm256_slli_epi32(ls, 8));
        ls = _mm256_permute4x64_epi64(_mm256_packus_epi32(ls, ls), 0x88);
        const __m256i sumi = block_lanes(IQ2_XXS, tkv__iq2xxs_grid, &x[i], NULL, sw, ls, y[i].qs);
        acc = _mm256_fmadd_ps(_mm256_set1_ps(_cvtsh_ss(x[i].d) * y[i].d), _mm256_cvtepi32_ps(sumi), acc);
    }
    return 0.125f * hsum_f32(acc);
}

#endif