/*
 * probe.c (AVX-512) — the read and int8 probes' loops at this level (see
 * compute/probe.h): 64-byte loads into four chains of 64-bit adds, and
 * vpdpbusd (the instruction of this level's integer products) on twelve
 * independent accumulators, enough to cover its latency on every core that
 * has it. The accumulators pass through an empty asm every round: twelve
 * chains of the same inputs are otherwise one value to the compiler, which
 * then runs one chain and multiplies its sum by twelve (gcc 12 did), so the
 * probe timed the instruction's latency, not its throughput (a peak 1.5x
 * too high on Zen 5: 3 a cycle where the core retires 2).
 */
#include "compute/probe.h"

#if defined(__x86_64__) && defined(__AVX512F__) && defined(__AVX512VNNI__)
#include <immintrin.h>

/* the lanes summed as unsigned words (gcc's _mm512_reduce_add_epi64 adds them as signed
   long longs, which overflow is undefined for: a checksum wraps by design) */
static uint64_t sum_epi64(__m512i v) {
    uint64_t lanes[8];
    _mm512_storeu_si512((void *)lanes, v);
    uint64_t s = 0;
    for (int i = 0; i < 8; i++) s += lanes[i];
    return s;
}

uint64_t tkv__probe_read_avx512(const uint64_t *w, size_t n) {
    __m512i s0 = _mm512_setzero_si512(), s1 = s0, s2 = s0, s3 = s0;
    size_t i = 0;
    for (; i + 32 <= n; i += 32) {
        s0 = _mm512_add_epi64(s0, _mm512_load_si512((const void *)(w + i)));
        s1 = _mm512_add_epi64(s1, _mm512_load_si512((const void *)(w + i + 8)));
        s2 = _mm512_add_epi64(s2, _mm512_load_si512((const void *)(w + i + 16)));
        s3 = _mm512_add_epi64(s3, _mm512_load_si512((const void *)(w + i + 24)));
    }
    for (; i + 8 <= n; i += 8) s0 = _mm512_add_epi64(s0, _mm512_load_si512((const void *)(w + i)));
    uint64_t s = sum_epi64(_mm512_add_epi64(_mm512_add_epi64(s0, s1), _mm512_add_epi64(s2, s3)));
    for (; i < n; i++) s += w[i];
    return s;
}

void tkv__probe_int8_avx512(uint64_t iters, uint64_t *macs) {
    __m512i a = _mm512_set1_epi8(1), b = _mm512_set1_epi8(1);
    __m512i c0 = _mm512_setzero_si512(), c1 = c0, c2 = c0, c3 = c0, c4 = c0, c5 = c0;
    __m512i c6 = c0, c7 = c0, c8 = c0, c9 = c0, c10 = c0, c11 = c0;
    for (uint64_t it = 0; it < iters; it++) {
        /* inputs and accumulators pass through an empty asm: the loop cannot be
           folded, nor the twelve chains merged into one */
        __asm__ volatile(""
                         : "+v"(a), "+v"(b), "+v"(c0), "+v"(c1), "+v"(c2), "+v"(c3), "+v"(c4), "+v"(c5), "+v"(c6),
                           "+v"(c7), "+v"(c8), "+v"(c9), "+v"(c10), "+v"(c11));
        c0 = _mm512_dpbusd_epi32(c0, a, b);
        c1 = _mm512_dpbusd_epi32(c1, a, b);
        c2 = _mm512_dpbusd_epi32(c2, a, b);
        c3 = _mm512_dpbusd_epi32(c3, a, b);
        c4 = _mm512_dpbusd_epi32(c4, a, b);
        c5 = _mm512_dpbusd_epi32(c5, a, b);
        c6 = _mm512_dpbusd_epi32(c6, a, b);
        c7 = _mm512_dpbusd_epi32(c7, a, b);
        c8 = _mm512_dpbusd_epi32(c8, a, b);
        c9 = _mm512_dpbusd_epi32(c9, a, b);
        c10 = _mm512_dpbusd_epi32(c10, a, b);
        c11 = _mm512_dpbusd_epi32(c11, a, b);
    }
    const __m512i all[12] = {c0, c1, c2, c3, c4, c5, c6, c7, c8, c9, c10, c11};
    uint64_t s = 0;
    for (int k = 0; k < 12; k++) {
        /* lanes are counts below 2^31: widen before adding so the sum cannot wrap */
        const __m512i lo = _mm512_cvtepu32_epi64(_mm512_castsi512_si256(all[k]));
        const __m512i hi = _mm512_cvtepu32_epi64(_mm512_extracti64x4_epi64(all[k], 1));
        s += sum_epi64(_mm512_add_epi64(lo, hi));
    }
    *macs = s;
}

#endif
