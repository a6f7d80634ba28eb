/*
 * probe.c (AVX2) — the read and int8 probes' loops at this level (see
 * compute/probe.h): 32-byte loads into four chains of 64-bit adds, and
 * the triple this level's integer products are made of (vpmaddubsw: u8 x
 * s8 pairs to int16; vpmaddwd by ones: pairs to int32; vpaddd) on six
 * independent accumulators, each chain with its own signed operand. Only
 * the vpaddd carries a chain from round to round, so six cover its latency;
 * the operands pass through an empty asm every round, so no two chains'
 * products are one value to the compiler (with one operand for all, gcc 12
 * computed the product once a round and timed a chain of vpaddd).
 */
#include "compute/probe.h"

#if defined(__x86_64__) && defined(__AVX2__)
#include <immintrin.h>

static uint64_t sum_epi64(__m256i v) {
    const __m128i s = _mm_add_epi64(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    return (uint64_t)_mm_cvtsi128_si64(s) + (uint64_t)_mm_extract_epi64(s, 1);
}

uint64_t tkv__probe_read_avx2(const uint64_t *w, size_t n) {
    __m256i s0 = _mm256_setzero_si256(), s1 = s0, s2 = s0, s3 = s0;
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        s0 = _mm256_add_epi64(s0, _mm256_load_si256((const __m256i *)(w + i)));
        s1 = _mm256_add_epi64(s1, _mm256_load_si256((const __m256i *)(w + i + 4)));
        s2 = _mm256_add_epi64(s2, _mm256_load_si256((const __m256i *)(w + i + 8)));
        s3 = _mm256_add_epi64(s3, _mm256_load_si256((const __m256i *)(w + i + 12)));
    }
    for (; i + 4 <= n; i += 4) s0 = _mm256_add_epi64(s0, _mm256_load_si256((const __m256i *)(w + i)));
    uint64_t s = sum_epi64(_mm256_add_epi64(_mm256_add_epi64(s0, s1), _mm256_add_epi64(s2, s3)));
    for (; i < n; i++) s += w[i];
    return s;
}

#define PROBE_STEP(c, b) c = _mm256_add_epi32(c, _mm256_madd_epi16(_mm256_maddubs_epi16(a, b), ones))

void tkv__probe_int8_avx2(uint64_t iters, uint64_t *macs) {
    /* 6 chains: with 6 operands, a and the ones, 14 of the 16 ymm registers */
    __m256i a = _mm256_set1_epi8(1), b0 = a, b1 = a, b2 = a, b3 = a, b4 = a, b5 = a;
    const __m256i ones = _mm256_set1_epi16(1);
    __m256i c0 = _mm256_setzero_si256(), c1 = c0, c2 = c0, c3 = c0, c4 = c0, c5 = c0;
    for (uint64_t it = 0; it < iters; it++) {
        /* the operands pass through an empty asm: the loop cannot be folded, nor chains share a product */
        __asm__ volatile("" : "+x"(a), "+x"(b0), "+x"(b1), "+x"(b2), "+x"(b3), "+x"(b4), "+x"(b5));
        PROBE_STEP(c0, b0);
        PROBE_STEP(c1, b1);
        PROBE_STEP(c2, b2);
        PROBE_STEP(c3, b3);
        PROBE_STEP(c4, b4);
        PROBE_STEP(c5, b5);
    }
    const __m256i all[6] = {c0, c1, c2, c3, c4, c5};
    uint64_t s = 0;
    for (int k = 0; k < 6; k++) {
        const __m256i lo = _mm256_cvtepu32_epi64(_mm256_castsi256_si128(all[k]));
        const __m256i hi = _mm256_cvtepu32_epi64(_mm256_extracti128_si256(all[k], 1));
        s += sum_epi64(_mm256_add_epi64(lo, hi));
    }
    *macs = s;
}

#endif
