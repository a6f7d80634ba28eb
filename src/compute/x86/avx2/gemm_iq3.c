/*
 * compute/x86/avx2/gemm_iq3.c — IQ3_XXS's and IQ3_S's tiled products for prefill (see
 * gemm.h), AVX2 + FMA + F16C, bit for bit the avx2 vec_dots
 * (compute/x86/avx2/dot_iq3.c). The panel (compute/x86/iq3.h) holds one row's super-blocks
 * decoded; a tile is that row x up to 4 tokens, so each decoded sub-block
 * (its 32 signed values and scale, two loads) serves 4 tokens, and a token's
 * activations cost one load and one xor per sub-block. The int32 lanes of a
 * super-block live in 4 registers, the float accumulators in 4 more; with
 * 16 ymm registers a second row would spill.
 */
#include "compute/gemm.h"
#include "util.h"
#include "compute/x86/iq3.h"

#include <stdalign.h>
#include <stdint.h>

#if defined(__x86_64__) && defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)

#define T_MAX 4  /* tokens per tile */
#define TC 64    /* tokens per chunk: the stash holds their accumulators */
#define KC 32    /* super-blocks per chunk of K: an 18 KiB panel */
#define QB ((size_t)sizeof(tkv__block_q8_K))

/* Super-blocks i0 .. i1 - 1 (panel from k0) of one row with T tokens; st: T x 8 float lanes. */
INLINE void tile(const iq3_pan *pan, size_t k0, size_t i0, size_t i1, const uint8_t *const *yt, float *st, int init,
                 int T) {
    __m256 acc[T_MAX];
    UNROLL
    for (int t = 0; t < T; t++) acc[t] = init ? _mm256_setzero_ps() : _mm256_load_ps(st + 8 * t);
    const __m256i bias = _mm256_set1_epi8((char)0x80);
    for (size_t i = i0; i < i1; i++) {
        const iq3_pan *e = pan + (i - k0);
        __m256i sumi[T_MAX];
        UNROLL
        for (int t = 0; t < T; t++) sumi[t] = _mm256_setzero_si256();
        UNROLL
        for (int b = 0; b < 8; b++) {
            const __m256i w = LOADA256(e->w + 32 * b), sc = LOADA256(e->sc[b]);
            UNROLL
            for (int t = 0; t < T; t++) {
                const __m256i yu = _mm256_xor_si256(LOAD256(yt[t] + i * QB + 4 + 32 * (size_t)b), bias);
                sumi[t] = _mm256_add_epi32(sumi[t], _mm256_madd_epi16(_mm256_maddubs_epi16(yu, w), sc));
            }
        }
        const __m256i corr = LOADA256(e->corr);
        UNROLL
        for (int t = 0; t < T; t++) {
            float ya;
            memcpy(&ya, yt[t] + i * QB, 4);
            const float d = e->d * ya;
            acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(_mm256_sub_epi32(sumi[t], corr)), acc[t]);
        }
    }
    UNROLL
    for (int t = 0; t < T; t++) _mm256_store_ps(st + 8 * t, acc[t]);
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
        iq3_pan pan[KC];             /* 18 KiB */
        alignas(64) float st[TC * 8]; /* 2 KiB */
    } b;
    _Static_assert(sizeof b <= 80 * 1024, "the buffers of a product live on the stack (kernels.h: under 80 KiB)");
    for (size_t t0 = 0; t0 < n_tok; t0 += TC) {
        const size_t tn = min_sz(TC, n_tok - t0);
        for (size_t r = 0; r < nr; r++) {
            const uint8_t *row = w + r * wrs;
            for (size_t k0 = 0; k0 < nb; k0 += KC) {
                const size_t k1 = min_sz(k0 + KC, nb);
                for (size_t i = k0; i < k1; i++) iq3_pan_fill(&b.pan[i - k0], row, i, xxs);
                for (size_t u = 0; u < tn; u += T_MAX) {
                    const int T = (int)min_sz(T_MAX, tn - u);
                    const uint8_t *yt[T_MAX];
                    for (int t = 0; t < T; t++) yt[t] = xq + (t0 + u + (size_t)t) * xrs;
                    tile_any(b.pan, k0, k0, k1, yt, b.st + 8 * u, k0 == 0, T);
                }
            }
            for (size_t u = 0; u < tn; u++) {
                const float s = iq3_hsum8(_mm256_load_ps(b.st + 8 * u));
                y[(t0 + u) * ldy + r] = xxs ? 0.25f * s : s;
            }
        }
    }
}

void tkv__gemm_iq3_xxs_avx2(size_t n, const void *w, size_t wrs, size_t nr, const void *xq, size_t xrs, size_t n_tok,
                            float *y, size_t ldy) {
    gemm_iq3(1, n, w, wrs, nr, xq, xrs, n_tok, y, ldy);
}

void tkv__gemm_iq3_s_avx2(size_t n, const void *w, size_t wrs, size_t nr, const void *xq, size_t xrs, size_t n_tok,
                          float *y, size_t ldy) {
    gemm_iq3(0, n, w, wrs, nr, xq, xrs, n_tok, y, ldy);
}

#endif
