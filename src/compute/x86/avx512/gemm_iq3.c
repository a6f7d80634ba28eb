/*
 * compute/x86/avx512/gemm_iq3.c — IQ3_XXS's and IQ3_S's tiled products for prefill (see
 * gemm.h), AVX-512 BW + VNNI, bit for bit the avx2 vec_dots
 * (compute/x86/avx2/dot_iq3.c), which the avx512 table keeps. Panel: compute/x86/iq3.h's,
 * two rows. A tile is 2 rows x up to 4 tokens; a zmm register holds two
 * sub-blocks (b in the low half, b + 1 in the high), and vpdpwssd adds the
 * scaled pair sums (madd then add, one exact integer either way). The two
 * halves' int32 lanes add at the end of the super-block: lane k of the
 * dot's sum over the 8 sub-blocks, in another order of exact integer adds.
 */
#include "compute/gemm.h"
#include "util.h"
#include "compute/x86/iq3.h"

#include <stdalign.h>
#include <stdint.h>

#if defined(__x86_64__) && defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VNNI__) &&                \
    defined(__FMA__) && defined(__F16C__)

#define LOAD512(p) _mm512_loadu_si512((const void *)(p))
#define LOADA512(p) _mm512_load_si512((const void *)(p))

#define T_MAX 4  /* tokens per tile */
#define TC 64    /* tokens per chunk: the stash holds their accumulators */
#define KC 16    /* super-blocks per chunk of K: 2 rows, an 18 KiB panel */
#define QB ((size_t)sizeof(tkv__block_q8_K))

/* Super-blocks i0 .. i1 - 1 of 2 rows (panel [block][row] from k0) with T tokens; st: [row][token] x 8 lanes. */
INLINE void tile(const iq3_pan *pan, size_t k0, size_t i0, size_t i1, const uint8_t *const *yt, float *st, int init,
                 int T) {
    __m256 acc[2][T_MAX];
    UNROLL
    for (int k = 0; k < 2; k++)
        UNROLL
        for (int t = 0; t < T; t++) acc[k][t] = init ? _mm256_setzero_ps() : _mm256_load_ps(st + 8 * (k * T + t));
    const __m512i bias = _mm512_set1_epi8((char)0x80);
    for (size_t i = i0; i < i1; i++) {
        const iq3_pan *e = pan + 2 * (i - k0);
        __m512i sumi[2][T_MAX];
        UNROLL
        for (int k = 0; k < 2; k++)
            UNROLL
            for (int t = 0; t < T; t++) sumi[k][t] = _mm512_setzero_si512();
        UNROLL
        for (int p = 0; p < 4; p++) {
            const __m512i w0 = LOADA512(e[0].w + 64 * p), s0 = LOADA512(e[0].sc[2 * p]);
            const __m512i w1 = LOADA512(e[1].w + 64 * p), s1 = LOADA512(e[1].sc[2 * p]);
            UNROLL
            for (int t = 0; t < T; t++) {
                const __m512i yu = _mm512_xor_si512(LOAD512(yt[t] + i * QB + 4 + 64 * (size_t)p), bias);
                sumi[0][t] = _mm512_dpwssd_epi32(sumi[0][t], _mm512_maddubs_epi16(yu, w0), s0);
                sumi[1][t] = _mm512_dpwssd_epi32(sumi[1][t], _mm512_maddubs_epi16(yu, w1), s1);
            }
        }
        UNROLL
        for (int k = 0; k < 2; k++) {
            const __m256i corr = LOADA256(e[k].corr);
            UNROLL
            for (int t = 0; t < T; t++) {
                float ya;
                memcpy(&ya, yt[t] + i * QB, 4);
                const float d = e[k].d * ya;
                const __m256i s = _mm256_add_epi32(_mm512_castsi512_si256(sumi[k][t]),
                                                   _mm512_extracti64x4_epi64(sumi[k][t], 1));
                acc[k][t] =
                    _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(_mm256_sub_epi32(s, corr)), acc[k][t]);
            }
        }
    }
    UNROLL
    for (int k = 0; k < 2; k++)
        UNROLL
        for (int t = 0; t < T; t++) _mm256_store_ps(st + 8 * (k * T + t), acc[k][t]);
}

static void tile_any(const iq3_pan *pan, size_t k0, size_t i0, size_t i1, const uint8_t *const *yt, float *st,
                     int init, int T) {
    switch (T) {
    case 4: tile(pan, k0, i0, i1, yt, st, init, 4); break;
    case 3: tile(pan, k0, i0, i1, yt, st, init, 3); break;
    case 2: tile(pan, k0, i0, i1, yt, st, init, 2); break;
    default: tile(pan, k0, i0, i1, yt, st, init, 1); break;
    }
}

static void gemm_iq3(int xxs, size_t n, const uint8_t *w, size_t wrs, size_t nr, const uint8_t *xq, size_t xrs,
                     size_t n_tok, float *y, size_t ldy) {
    const size_t nb = n / TKV__QK_K;
    struct {
        iq3_pan pan[2 * KC];              /* 18 KiB */
        alignas(64) float st[TC * 2 * 8]; /* 4 KiB */
    } b;
    _Static_assert(sizeof b <= 80 * 1024, "the buffers of a product live on the stack (kernels.h: under 80 KiB)");
    for (size_t t0 = 0; t0 < n_tok; t0 += TC) {
        const size_t tn = min_sz(TC, n_tok - t0);
        for (size_t r = 0; r < nr; r += 2) {
            /* an odd last row is computed twice, stored once */
            const uint8_t *rows[2] = {w + r * wrs, w + min_sz(r + 1, nr - 1) * wrs};
            for (size_t k0 = 0; k0 < nb; k0 += KC) {
                const size_t k1 = min_sz(k0 + KC, nb);
                for (size_t i = k0; i < k1; i++)
                    for (int k = 0; k < 2; k++) iq3_pan_fill(&b.pan[2 * (i - k0) + (size_t)k], rows[k], i, xxs);
                for (size_t u = 0; u < tn; u += T_MAX) {
                    const int T = (int)min_sz(T_MAX, tn - u);
                    const uint8_t *yt[T_MAX];
                    for (int t = 0; t < T; t++) yt[t] = xq + (t0 + u + (size_t)t) * xrs;
                    tile_any(b.pan, k0, k0, k1, yt, b.st + 16 * u, k0 == 0, T);
                }
            }
            const size_t nk = min_sz(2, nr - r);
            for (size_t u = 0; u < tn; u += T_MAX) {
                const size_t T = min_sz(T_MAX, tn - u);
                for (size_t k = 0; k < nk; k++)
                    for (size_t t = 0; t < T; t++) {
                        const float s = iq3_hsum8(_mm256_load_ps(b.st + 16 * u + 8 * (k * T + t)));
                        y[(t0 + u + t) * ldy + r + k] = xxs ? 0.25f * s : s;
                    }
            }
        }
    }
}

void tkv__gemm_iq3_xxs_avx512(size_t n, const void *w, size_t wrs, size_t nr, const void *xq, size_t xrs,
                              size_t n_tok, float *y, size_t ldy) {
    gemm_iq3(1, n, w, wrs, nr, xq, xrs, n_tok, y, ldy);
}

void tkv__gemm_iq3_s_avx512(size_t n, const void *w, size_t wrs, size_t nr, const void *xq, size_t xrs, size_t n_tok,
                            float *y, size_t ldy) {
    gemm_iq3(0, n, w, wrs, nr, xq, xrs, n_tok, y, ldy);
}

#endif
