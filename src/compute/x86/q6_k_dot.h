/*
 * compute/x86/q6_k_dot.h — Q6_K's block-reduced vec_dot (compute/quant/quant.h:
 * per block the exact integer sum, then one fma into the running sum, in
 * block order), written once for both levels' kernels.c: each gives its
 * own integer lanes of one block (avx2 by vpmaddwd, avx512 by vpdpwssd),
 * from the block's values unpacked here (their lane-wise vec_dot_ref too).
 *
 * The sums of 8 blocks are reduced together: one block's alone at the end
 * of each held the next behind it (one row from L1 at 18.5-21 GB/s against
 * the lane-wise dot's 30-33; bench_kernels -n 2048 -r 1024, Zen 5). Each
 * block asks for the bytes 8 KiB on (the rows follow each other: the next
 * rows' blocks), which the lane-wise dot did without and this one, waiting
 * on its batches, cannot: llama1b Q6_K tg32 --no-repack, 2 threads, 35 t/s
 * without, 44-46 with, the lane-wise dot 43.5-44. The rows a decode step
 * reads unpacked (--no-repack) take this.
 *
 * Included only by files compiled with at least -mavx2 -mfma -mf16c.
 */
#ifndef TKV_X86_Q6_K_DOT_H
#define TKV_X86_Q6_K_DOT_H

#include "compute/quant/quant.h"

#include <math.h>
#include <stdalign.h>
#include <stddef.h>

#if defined(__x86_64__) && defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include <immintrin.h>

/* Half h of a Q6_K block's values (0..63, unsigned bytes): q[k] is elements 128h + 32k .. + 31, groups 8h + 2k
   and 8h + 2k + 1 (the layout of the file's block, which both levels' lanes read). */
static inline void tkv__q6k_half_values(const tkv__block_q6_K *x, int h, __m256i q[4]) {
    const __m256i m4 = _mm256_set1_epi8(0x0f), m2 = _mm256_set1_epi8(3);
    const __m256i ql0 = _mm256_loadu_si256((const __m256i *)(const void *)(x->ql + 64 * h));
    const __m256i ql1 = _mm256_loadu_si256((const __m256i *)(const void *)(x->ql + 64 * h + 32));
    const __m256i qh = _mm256_loadu_si256((const __m256i *)(const void *)(x->qh + 32 * h));
    q[0] = _mm256_or_si256(_mm256_and_si256(ql0, m4), _mm256_slli_epi16(_mm256_and_si256(qh, m2), 4));
    q[1] = _mm256_or_si256(_mm256_and_si256(ql1, m4), _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2), m2), 4));
    q[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), m4),
                           _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 4), m2), 4));
    q[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), m4),
                           _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 6), m2), 4));
}

/* A level's exact integer lanes of one Q6_K block: their sum is the block's sum. */
typedef __m256i tkv__q6k_lanes_fn(const tkv__block_q6_K *x, const tkv__block_q8_K *y);

/* The sums of 8 vectors' lanes, sum j in lane j (integer adds: exact in any order). */
static inline __m256i tkv__hsum8_i32(const __m256i v[8]) {
    const __m256i b0 = _mm256_hadd_epi32(_mm256_hadd_epi32(v[0], v[1]), _mm256_hadd_epi32(v[2], v[3]));
    const __m256i b1 = _mm256_hadd_epi32(_mm256_hadd_epi32(v[4], v[5]), _mm256_hadd_epi32(v[6], v[7]));
    return _mm256_add_epi32(_mm256_permute2x128_si256(b0, b1, 0x20), _mm256_permute2x128_si256(b0, b1, 0x31));
}

/* The dot of n elements (whole blocks) of Q6_K row w and Q8_K row a; always inlined, so lanes is a direct call. */
static inline __attribute__((always_inline)) float tkv__q6k_dot_reduced(size_t n, const void *w, const void *a,
                                                                       tkv__q6k_lanes_fn *lanes) {
    const tkv__block_q6_K *x = w;
    const tkv__block_q8_K *y = a;
    const size_t nb = n / TKV__QK_K;
    float s = 0.0f;
    size_t i = 0;
    for (; i + 8 <= nb; i += 8) {
        __m256i v[8];
        for (int j = 0; j < 8; j++) {
            for (int l = 0; l < 4; l++) _mm_prefetch((const char *)&x[i + j] + 8192 + 64 * l, _MM_HINT_T0);
            v[j] = lanes(&x[i + j], &y[i + j]);
        }
        alignas(32) float f[8];
        _mm256_store_ps(f, _mm256_cvtepi32_ps(tkv__hsum8_i32(v)));
        for (int j = 0; j < 8; j++) s = fmaf(f[j], _cvtsh_ss(x[i + j].d) * y[i + j].d, s);
    }
    for (; i < nb; i++) {
        const __m256i v = lanes(&x[i], &y[i]);
        __m128i t = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
        t = _mm_add_epi32(t, _mm_shuffle_epi32(t, 0x4e));
        t = _mm_add_epi32(t, _mm_shuffle_epi32(t, 0xb1));
        s = fmaf((float)_mm_cvtsi128_si32(t), _cvtsh_ss(x[i].d) * y[i].d, s);
    }
    return s;
}

#endif
#endif
