/*
 * compute/x86/tq1.h — a TQ1_0 block's quants unpacked from its base-3
 * digits, for the avx2 dot and product (compute/x86/avx2/kernels.c) and the
 * avx512 product (compute/x86/avx512/gemm_tq1.c).
 *
 * Included only by files compiled with at least -mavx2.
 */
#ifndef TKV_X86_TQ1_H
#define TKV_X86_TQ1_H

#include "compute/quant/quant.h"

#include <stdint.h>
#include <string.h>

#if defined(__x86_64__) && defined(__AVX2__)
#include <immintrin.h>

/*
 * Base-3 digits of 32 bytes v, byte j's digit given by the multiplier p = 3^k
 * of its 16-bit lane (both bytes of a lane share it): ((uint8_t)(b p) * 3) >> 8.
 * x86 has no byte multiply: the low bytes take mullo's low byte, the high
 * bytes are multiplied on their own (low byte cleared, so no carry reaches
 * them); then mulhi by 768 is (m * 3) >> 8 of a low byte m, and leaves
 * m * 3 for a high one, whose high byte is the digit.
 */
static inline __m256i tkv__tq1_digits(__m256i v, __m256i p) {
    const __m256i lo8 = _mm256_set1_epi16(0x00ff), hi8 = _mm256_set1_epi16((short)0xff00), k768 = _mm256_set1_epi16(768);
    const __m256i ml = _mm256_and_si256(_mm256_mullo_epi16(v, p), lo8);
    const __m256i mh = _mm256_mullo_epi16(_mm256_and_si256(v, hi8), p);
    return _mm256_or_si256(_mm256_mulhi_epu16(ml, k768), _mm256_and_si256(_mm256_mulhi_epu16(mh, k768), hi8));
}

/* The 256 quants (0..2) of a TQ1_0 block as 8 x 32 bytes, in element order (tkv__block_tq1_0). */
static inline void tkv__tq1_quants(const tkv__block_tq1_0 *x, __m256i q[8]) {
    const __m256i lo = _mm256_loadu_si256((const __m256i *)(const void *)x->qs);
    for (int k = 0; k < 5; k++)
        q[k] = tkv__tq1_digits(lo, _mm256_set1_epi16((short)(k == 0 ? 1 : k == 1 ? 3 : k == 2 ? 9 : k == 3 ? 27 : 81)));
    /* elements 160..239: digits of qs[32..47] by 16; 240..255: digits 0..3 of qh[0..3] by 4 */
    const __m128i mid = _mm_loadu_si128((const __m128i *)(const void *)(x->qs + 32));
    uint32_t h;
    memcpy(&h, x->qh, 4);
    const __m256i mm = _mm256_broadcastsi128_si256(mid);
    q[5] = tkv__tq1_digits(mm, _mm256_set_m128i(_mm_set1_epi16(3), _mm_set1_epi16(1)));
    q[6] = tkv__tq1_digits(mm, _mm256_set_m128i(_mm_set1_epi16(27), _mm_set1_epi16(9)));
    q[7] = tkv__tq1_digits(_mm256_set_m128i(_mm_set1_epi32((int)h), mid),
                           _mm256_set_epi16(27, 27, 9, 9, 3, 3, 1, 1, 81, 81, 81, 81, 81, 81, 81, 81));
}

#endif
#endif
