/*
 * compute/x86/iq_signs.h — the IQ2_XXS, IQ2_XS and IQ3_XXS sign indices to
 * sign bytes in vectors, a block at a time: each 7-bit index completed by
 * its parity to the byte tkv__iq_signs holds for it (bit 7 set when the
 * index has odd parity), so the dots read the table's bytes without a
 * table lookup per group (four a sub-block, most of those dots' scalar work).
 *
 * Included only by files compiled with at least -mavx2.
 */
#ifndef TKV_X86_IQ_SIGNS_H
#define TKV_X86_IQ_SIGNS_H

#if defined(__x86_64__) && defined(__AVX2__)
#include <immintrin.h>

/* Bytes of 7-bit sign indices to their sign bytes (the index, bit 7 its parity). */
static inline __m256i iq_with_parity(__m256i sb) {
    const __m256i m15 = _mm256_set1_epi8(15);
    /* parity of a nibble, as 0x80 */
    const __m256i par = _mm256_setr_epi8(0, -128, -128, 0, -128, 0, 0, -128, -128, 0, 0, -128, 0, -128, -128, 0, /**/
                                         0, -128, -128, 0, -128, 0, 0, -128, -128, 0, 0, -128, 0, -128, -128, 0);
    const __m256i p = _mm256_xor_si256(_mm256_shuffle_epi8(par, _mm256_and_si256(sb, m15)),
                                       _mm256_shuffle_epi8(par, _mm256_and_si256(_mm256_srli_epi16(sb, 4), m15)));
    return _mm256_or_si256(sb, p);
}

/* Eight words each holding four 7-bit sign indices at bits 0, 7, 14 and 21 (IQ2_XXS's and IQ3_XXS's
   sub-block words) to their sign bytes: byte k of dword b is index k of word b. */
static inline __m256i iq_word_signs(__m256i h) {
    const __m256i m7f = _mm256_set1_epi32(0x7f);
    /* index k (bits 7k..7k+6) to byte k: shifted left by k */
    __m256i sb = _mm256_and_si256(h, m7f);
    sb = _mm256_or_si256(sb, _mm256_and_si256(_mm256_slli_epi32(h, 1), _mm256_slli_epi32(m7f, 8)));
    sb = _mm256_or_si256(sb, _mm256_and_si256(_mm256_slli_epi32(h, 2), _mm256_slli_epi32(m7f, 16)));
    sb = _mm256_or_si256(sb, _mm256_and_si256(_mm256_slli_epi32(h, 3), _mm256_slli_epi32(m7f, 24)));
    return iq_with_parity(sb);
}

#endif
#endif
