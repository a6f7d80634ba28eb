/*
 * compute/x86/avx2/dot_iq1.c — AVX2 dot products of IQ1_S and IQ1_M with Q8_K
 * activations (compute/x86/iq1.h, which the avx512 level builds again), and
 * their tiled products (bit for bit the dots), compiled with
 * compute/x86/avx2/kernels.c's flags and reached only through its table;
 * the AVX-512 level keeps the tiled products.
 */
#include "compute/gemm.h"
#include "compute/kernels.h"
#include "compute/x86/iq1.h"

#include <string.h>

#if defined(__x86_64__) && defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include <immintrin.h>

float tkv__dot_iq1_s_avx2(size_t n, const void *w, const void *a) {
    return iq1_s_dot(n, w, a);
}

float tkv__dot_iq1_m_avx2(size_t n, const void *w, const void *a) {
    return iq1_m_dot(n, w, a);
}

/*
 * Tiled products (gemm.h's lane-wise order, bit for bit the dots above):
 * per weight row and super-block, the grid points, |grid| and the madd
 * factors are unpacked once into a panel on the stack, then every token of
 * a chunk of IQ1_TOK tokens runs only its multiplies against it. The
 * tokens' float accumulators (the dot's acc and accd, in its order) wait in
 * a stash between super-blocks. Activations of a chunk (IQ1_TOK rows) stay
 * in L2 while the rows go by.
 */
#define IQ1_TOK 32

typedef struct {
    __m256i g[8], ag[8], f[8], fd[8]; /* grid bytes, |grid|, madd factors of sumi, (IQ1_M) of sumd */
    float d;
    int16_t ls[8];
} iq1_panel;

static void iq1_s_panel(const tkv__block_iq1_s *x, iq1_panel *p) {
    _Alignas(32) uint16_t idx[32];
    iq1_s_indices(x, idx);
    for (int b = 0; b < 8; b++) {
        const __m256i g = grid4(idx + 4 * b);
        p->g[b] = g, p->ag[b] = _mm256_sign_epi8(g, g);
        p->f[b] = _mm256_set1_epi16((short)(2 * ((x->qh[b] >> 12) & 7) + 1));
    }
    /* the shift's factors: +-ls_b on both bsums of sub-block b */
    const __m128i qh = _mm_loadu_si128((const __m128i *)(const void *)x->qh);
    const __m128i ls8 = _mm_or_si128(_mm_slli_epi16(_mm_and_si128(_mm_srli_epi16(qh, 12), _mm_set1_epi16(7)), 1),
                                     _mm_set1_epi16(1));
    const __m128i sls = _mm_sign_epi16(ls8, _mm_or_si128(qh, _mm_set1_epi16(1)));
    p->fd[0] = _mm256_set_m128i(_mm_unpackhi_epi16(sls, sls), _mm_unpacklo_epi16(sls, sls));
    p->d = _cvtsh_ss(x->d);
}

static void iq1_m_panel(const tkv__block_iq1_m *x, iq1_panel *p) {
    _Alignas(32) uint16_t idx[32];
    _Alignas(32) int16_t ls[32], sls[32];
    iq1_m_unpack(x, idx, ls, sls);
    for (int b = 0; b < 8; b++) {
        const __m256i g = grid4(idx + 4 * b);
        p->g[b] = g, p->ag[b] = _mm256_sign_epi8(g, g);
        p->f[b] = spread4(ls + 4 * b), p->fd[b] = spread4(sls + 4 * b);
    }
    p->d = _cvtsh_ss(tkv__iq1_m_d(x));
}

/* One token's share of a super-block: the dot's loop body with the panel's values. */
static inline void iq1_s_token(const iq1_panel *p, const tkv__block_q8_K *y, __m256 *acc, float *accd) {
    const __m256i bs = _mm256_madd_epi16(load_q((const int8_t *)(const void *)y->bsums), p->fd[0]);
    __m128i bs4 = _mm_add_epi32(_mm256_castsi256_si128(bs), _mm256_extracti128_si256(bs, 1));
    bs4 = _mm_add_epi32(bs4, _mm_shuffle_epi32(bs4, 0x4e));
    bs4 = _mm_add_epi32(bs4, _mm_shuffle_epi32(bs4, 0xb1));
    __m256i sumi = _mm256_setzero_si256();
    for (int b = 0; b < 8; b++) {
        const __m256i q = _mm256_sign_epi8(load_q(y->qs + 32 * b), p->g[b]);
        sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(_mm256_maddubs_epi16(p->ag[b], q), p->f[b]));
    }
    const float d = y->d * p->d;
    *acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), *acc);
    *accd = fmaf(d, (float)_mm_cvtsi128_si32(bs4), *accd);
}

static inline void iq1_m_token(const iq1_panel *p, const tkv__block_q8_K *y, __m256 *acc, __m256 *accd) {
    const __m256i ones = _mm256_set1_epi8(1);
    __m256i sumi = _mm256_setzero_si256(), sumd = _mm256_setzero_si256();
    for (int b = 0; b < 8; b++) {
        const __m256i q = load_q(y->qs + 32 * b);
        sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(_mm256_maddubs_epi16(p->ag[b], _mm256_sign_epi8(q, p->g[b])),
                                                        p->f[b]));
        sumd = _mm256_add_epi32(sumd, _mm256_madd_epi16(_mm256_maddubs_epi16(ones, q), p->fd[b]));
    }
    const __m256 d = _mm256_set1_ps(y->d * p->d);
    *acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(sumi), *acc);
    *accd = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(sumd), *accd);
}

void tkv__gemm_iq1_s_avx2(size_t n, const void *w, size_t wrs, size_t nr, const void *xq, size_t xrs, size_t n_tok,
                          float *y, size_t ldy) {
    const size_t nb = n / TKV__QK_K;
    iq1_panel p;
    __m256 acc[IQ1_TOK];
    float accd[IQ1_TOK];
    for (size_t t0 = 0; t0 < n_tok; t0 += IQ1_TOK) {
        const size_t nt = n_tok - t0 < IQ1_TOK ? n_tok - t0 : IQ1_TOK;
        for (size_t r = 0; r < nr; r++) {
            const tkv__block_iq1_s *x = (const tkv__block_iq1_s *)(const void *)((const uint8_t *)w + r * wrs);
            for (size_t t = 0; t < nt; t++) acc[t] = _mm256_setzero_ps(), accd[t] = 0.0f;
            for (size_t i = 0; i < nb; i++) {
                iq1_s_panel(&x[i], &p);
                for (size_t t = 0; t < nt; t++) {
                    const tkv__block_q8_K *ya = (const tkv__block_q8_K *)(const void *)((const uint8_t *)xq +
                                                                                         (t0 + t) * xrs);
                    iq1_s_token(&p, &ya[i], &acc[t], &accd[t]);
                }
            }
            for (size_t t = 0; t < nt; t++) y[(t0 + t) * ldy + r] = hsum8(acc[t]) + TKV__IQ1_DELTA * accd[t];
        }
    }
}

void tkv__gemm_iq1_m_avx2(size_t n, const void *w, size_t wrs, size_t nr, const void *xq, size_t xrs, size_t n_tok,
                          float *y, size_t ldy) {
    const size_t nb = n / TKV__QK_K;
    iq1_panel p;
    __m256 acc[IQ1_TOK], accd[IQ1_TOK];
    for (size_t t0 = 0; t0 < n_tok; t0 += IQ1_TOK) {
        const size_t nt = n_tok - t0 < IQ1_TOK ? n_tok - t0 : IQ1_TOK;
        for (size_t r = 0; r < nr; r++) {
            const tkv__block_iq1_m *x = (const tkv__block_iq1_m *)(const void *)((const uint8_t *)w + r * wrs);
            for (size_t t = 0; t < nt; t++) acc[t] = accd[t] = _mm256_setzero_ps();
            for (size_t i = 0; i < nb; i++) {
                iq1_m_panel(&x[i], &p);
                for (size_t t = 0; t < nt; t++) {
                    const tkv__block_q8_K *ya = (const tkv__block_q8_K *)(const void *)((const uint8_t *)xq +
                                                                                         (t0 + t) * xrs);
                    iq1_m_token(&p, &ya[i], &acc[t], &accd[t]);
                }
            }
            for (size_t t = 0; t < nt; t++) y[(t0 + t) * ldy + r] = hsum8(acc[t]) + TKV__IQ1_DELTA * hsum8(accd[t]);
        }
    }
}


#endif
