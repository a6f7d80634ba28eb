/*
 * compute/x86/avx512/gemm_tq1.c — TQ1_0 rows against a batch at the avx512
 * level, bit for bit the avx2 dot (tkv__dot_tq1_0_avx2, which this level's
 * table keeps): that dot's integers per block are, in each of 8 int32
 * lanes, the products of the quants and the activations at the lane's
 * positions summed over the eight 32-element chunks, less the pair of
 * activation sums of 16 the lane covers. It gets them from int16 pairs
 * (maddubs, then the chunks added in int16, at most 8 x 508 + 2048 apart
 * from zero: no wrap); VNNI's dpbusd adds the same four products per lane
 * straight into int32, half the instructions, the same integers. The float
 * steps are the dot's: per block one fused multiply-add of the lanes by
 * d_a d, and the 8 lanes reduced as its hsum_f32 does.
 *
 * The tiles are the avx2 product's: each block's base-3 digits unpacked
 * once for TQ_TOK tokens, TQ_ROWS rows at a time.
 */
#include "compute/gemm.h"
#include "compute/quant/quant.h"
#include "compute/x86/tq1.h"

#include <stddef.h>
#include <stdint.h>

#if defined(__x86_64__) && defined(__AVX512F__) && defined(__AVX512VL__) && defined(__AVX512VNNI__) && defined(__F16C__)
#include <immintrin.h>

#define TQ_TOK 16
#define TQ_ROWS 16

/* the avx2 dot's reduction: halves, then 2 + 0 and 3 + 1, then 1 + 0 */
static inline float hsum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

static inline __m256 tq_block(__m256 acc, const __m256i q[8], const tkv__block_q8_K *y, float d) {
    __m256i s32 = _mm256_setzero_si256();
    for (int c = 0; c < 8; c++)
        s32 = _mm256_dpbusd_epi32(s32, q[c], _mm256_loadu_si256((const __m256i *)(const void *)(y->qs + 32 * c)));
    const __m256i bs = _mm256_loadu_si256((const __m256i *)(const void *)((const uint8_t *)y + offsetof(tkv__block_q8_K, bsums)));
    s32 = _mm256_sub_epi32(s32, _mm256_madd_epi16(bs, _mm256_set1_epi16(1)));
    return _mm256_fmadd_ps(_mm256_cvtepi32_ps(s32), _mm256_set1_ps(y->d * d), acc);
}

void tkv__gemm_tq1_0_avx512(size_t n, const void *w, size_t wrs, size_t nr, const void *xq, size_t xrs, size_t n_tok,
                            float *y, size_t ldy) {
    const size_t nb = n / TKV__QK_K;
    for (size_t r0 = 0; r0 < nr; r0 += TQ_ROWS) {
        const size_t re = nr - r0 < TQ_ROWS ? nr : r0 + TQ_ROWS;
        for (size_t t0 = 0; t0 < n_tok; t0 += TQ_TOK) {
            const size_t nt = n_tok - t0 < TQ_TOK ? n_tok - t0 : TQ_TOK;
            const tkv__block_q8_K *ya[TQ_TOK];
            for (size_t t = 0; t < nt; t++)
                ya[t] = (const tkv__block_q8_K *)(const void *)((const uint8_t *)xq + (t0 + t) * xrs);
            for (size_t r = r0; r < re; r++) {
                const tkv__block_tq1_0 *x = (const tkv__block_tq1_0 *)(const void *)((const uint8_t *)w + r * wrs);
                __m256 acc[TQ_TOK];
                for (size_t t = 0; t < nt; t++) acc[t] = _mm256_setzero_ps();
                for (size_t i = 0; i < nb; i++) {
                    __m256i q[8];
                    tkv__tq1_quants(&x[i], q);
                    const float d = _cvtsh_ss(x[i].d);
                    for (size_t t = 0; t < nt; t++) acc[t] = tq_block(acc[t], q, &ya[t][i], d);
                }
                for (size_t t = 0; t < nt; t++) y[(t0 + t) * ldy + r] = hsum8(acc[t]);
            }
        }
    }
}

#endif
