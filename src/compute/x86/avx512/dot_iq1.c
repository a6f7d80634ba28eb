/*
 * compute/x86/avx512/dot_iq1.c — the IQ1_S and IQ1_M dot products at the avx512 level, bit for bit the
 * avx2 level's (compute/x86/iq1.h): IQ1_S is that C built with this level's flags (32 vector registers
 * where the avx2 build has 16 and spills in the sub-block loop); IQ1_M is written for zmm below. The
 * tiled products stay the avx2 level's (bit for bit these dots, so the table pairs them).
 */
#include "compute/gemm.h"
#include "compute/x86/iq1.h"

#if defined(__x86_64__) && defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && defined(__AVX2__) && \
    defined(__BMI2__)

float tkv__dot_iq1_s_avx512(size_t n, const void *w, const void *a) {
    return iq1_s_dot(n, w, a);
}

/*
 * The 8 grid points of IQ1_M groups 8p .. 8p + 7 (qs: their 8 low index
 * bytes, qh: their 4 bytes of nibbles, low nibble first), each index
 * qs[g] | (nibble & 7) << 8 put together by pdep in a general register, as
 * the reference's AVX2 dot does. The indices came from a vector unpack and 32
 * vpextrw a superblock before: the same points, the product 20% faster
 * (bench_kernels, bench/RESULTS.md), the extraction off the vector ports.
 */
static inline __m512i iq1_m_grid8(const uint8_t *qs, const uint8_t *qh) {
    uint64_t q;
    uint32_t h;
    memcpy(&q, qs, sizeof q);
    memcpy(&h, qh, sizeof h);
    const uint64_t lo = _pdep_u64(q, 0x00ff00ff00ff00ffULL) | _pdep_u64(h & 0x7777u, 0x0f000f000f000f00ULL);
    const uint64_t hi = _pdep_u64(q >> 32, 0x00ff00ff00ff00ffULL) | _pdep_u64((h >> 16) & 0x7777u, 0x0f000f000f000f00ULL);
    return _mm512_inserti64x4(_mm512_castsi256_si512(grid4_of(lo)), grid4_of(hi), 1);
}

/*
 * IQ1_M, two sub-blocks per zmm (sub-block 2p in the low half, 2p + 1 in the
 * high one): each half's int32 lanes are iq1_m_dot's lanes of its sub-block,
 * and the halves are added once per super-block, so every lane's integer is
 * iq1_m_dot's (exact sums in another order) and the float work the same.
 * Per pair of sub-blocks:
 *   - the 8 grid points from scalar loads (iq1_m_grid8; a gather of 8, or
 *     two of 4, measured 10-20% slower here);
 *   - no sign moves: with g + 1 (0..2) as vpmaddubsw's unsigned operand the
 *     words are g q + q; the scaled q pairs, needed for the shift's part
 *     anyway, are subtracted once per super-block (sum_b ls (g q + q) -
 *     sum_b ls q = sum_b ls g q);
 *   - the shift's signs by a mask: the negative groups' scaled q pairs are
 *     summed apart, and the part is (all) - 2 (negative ones).
 */
float tkv__dot_iq1_m_avx512(size_t n, const void *w, const void *a) {
    const tkv__block_iq1_m *x = w;
    const tkv__block_q8_K *y = a;
    const __m512i ones = _mm512_set1_epi8(1);
    /* word lanes of 128-bit lane L take half-scale byte L (+ 4p for the pair p), high byte zero */
    const __m512i ctl = _mm512_set_epi64(0x8003800380038003LL, 0x8003800380038003LL, 0x8002800280028002LL,
                                         0x8002800280028002LL, 0x8001800180018001LL, 0x8001800180018001LL,
                                         0x8000800080008000LL, 0x8000800080008000LL);
    /* int32 lane k of sub-block b: group 4b + k/2, whose shift sign is bit (k/2 % 2) 16 + 2b + k/4 of sg
       (iq1_m_dot's cnt0); the pair's high half is sub-block b + 1 */
    const __m512i pos0 = _mm512_setr_epi32(0, 0, 16, 16, 1, 1, 17, 17, 2, 2, 18, 18, 3, 3, 19, 19);
    __m256 acc = _mm256_setzero_ps(), accd = _mm256_setzero_ps();
    for (size_t i = 0; i < n / TKV__QK_K; i++) {
        const __m128i qh = _mm_loadu_si128((const __m128i *)(const void *)x[i].qh);
        /* bit j: group 2j's shift sign (qh byte j bit 3); bit 16 + j: group 2j + 1's (bit 7) */
        const uint32_t sg = (uint32_t)_mm_movemask_epi8(_mm_slli_epi16(qh, 4)) | (uint32_t)_mm_movemask_epi8(qh) << 16;
        const __m512i sgv = _mm512_set1_epi32((int)sg);
        const __m512i ls16 = _mm512_broadcast_i32x4(_mm256_castsi256_si128(iq1_m_ls16(&x[i])));
        __m512i sumr = _mm512_setzero_si512(), sumq = sumr, sumn = sumr;
        _Pragma("GCC unroll 4")
        for (int p = 0; p < 4; p++) {
            const __m512i g = iq1_m_grid8(x[i].qs + 8 * p, x[i].qh + 4 * p);
            const __m512i q = _mm512_loadu_si512((const void *)(y[i].qs + 64 * p));
            const __m512i ls = _mm512_shuffle_epi8(ls16, _mm512_add_epi8(ctl, _mm512_set1_epi8((char)(4 * p))));
            sumr = _mm512_add_epi32(sumr, _mm512_madd_epi16(_mm512_maddubs_epi16(_mm512_add_epi8(g, ones), q), ls));
            const __m512i mq = _mm512_madd_epi16(_mm512_maddubs_epi16(ones, q), ls);
            sumq = _mm512_add_epi32(sumq, mq);
            const __mmask16 neg = _mm512_test_epi32_mask(
                sgv, _mm512_sllv_epi32(_mm512_set1_epi32(1), _mm512_add_epi32(pos0, _mm512_set1_epi32(4 * p))));
            sumn = _mm512_mask_add_epi32(sumn, neg, sumn, mq);
        }
        const __m512i si = _mm512_sub_epi32(sumr, sumq), sd = _mm512_sub_epi32(sumq, _mm512_add_epi32(sumn, sumn));
        const __m256i sumi = _mm256_add_epi32(_mm512_castsi512_si256(si), _mm512_extracti64x4_epi64(si, 1));
        const __m256i sumd = _mm256_add_epi32(_mm512_castsi512_si256(sd), _mm512_extracti64x4_epi64(sd, 1));
        const __m256 d = _mm256_set1_ps(y[i].d * _cvtsh_ss(tkv__iq1_m_d(&x[i])));
        acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(sumi), acc);
        accd = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(sumd), accd);
    }
    return hsum8(acc) + TKV__IQ1_DELTA * hsum8(accd);
}

#endif
