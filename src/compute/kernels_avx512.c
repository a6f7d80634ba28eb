/*
 * kernels_avx512.c — AVX-512 (F, BW, VL) + VNNI kernels, compiled with their
 * -m flags and reached only when the CPU has them all. The table overrides
 * the avx2 one for the dot products:
 *   - quantized types: the AVX2 structure on 256-bit registers, with
 *     vpdpbusd (u8 x s8, four products summed into int32) and vpdpwssd
 *     (int16 pairs times the group scales, accumulated) replacing the
 *     maddubs/madd/add chains. Measured faster than both AVX2 and 512-bit
 *     versions of the same loops (which pay for cross-lane inserts and
 *     vpmulld, and on some CPUs a lower clock): see bench/bench_kernels.c;
 *   - F32, F16 and BF16 rows: the reference's own arithmetic, in
 *     gemm_float_avx512.c (so that float models match it to the bit).
 *   - SiLU/SwiGLU with the reference's own e^x approximation.
 * Quantizers and the other element-wise ops stay on the AVX2 versions.
 *
 * As in the AVX2 file, integer sums are exact and loads are unaligned.
 */
#include "gemm.h"
#include "kernels.h"
#include "quant.h"

#include <math.h>
#include <stdalign.h>
#include <stddef.h>
#include <string.h>

#if defined(__x86_64__) && defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && \
    defined(__AVX512VNNI__) && defined(__AVX2__) && defined(__F16C__)
#include <immintrin.h>

#define LOAD256(p) _mm256_loadu_si256((const __m256i *)(const void *)(p))
#define LOAD128(p) _mm_loadu_si128((const __m128i *)(const void *)(p))
#define Q8K_BSUMS(b) ((const uint8_t *)(b) + offsetof(tkv__block_q8_K, bsums))

static inline float f16(uint16_t h) {
    return _cvtsh_ss(h);
}

/* 16 bytes of nibbles to 32 bytes: low nibbles (elements 0-15), then high. */
static inline __m256i nibbles32(const uint8_t *qs) {
    const __m128i b = LOAD128(qs);
    const __m128i m = _mm_set1_epi8(0x0f);
    return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(b, 4), m), _mm_and_si128(b, m));
}

/* Sums of 4 products of signed bytes: x any int8, y in -127..127 (|x| as u8, y with x's sign). */
static inline __m256i dot_i8_256(__m256i x, __m256i y) {
    return _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_sign_epi8(x, x), _mm256_sign_epi8(y, x));
}

static inline float hsum256(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* ---- quantized types: 256-bit VNNI ------------------------------------------------- */

static inline int k_mins_dot(const uint8_t mins[8], const tkv__block_q8_K *y) {
    const __m256i bs = LOAD256(Q8K_BSUMS(y));
    const __m128i pairs = _mm_hadd_epi16(_mm256_castsi256_si128(bs), _mm256_extracti128_si256(bs, 1));
    const __m128i m = _mm_cvtepu8_epi16(_mm_loadl_epi64((const __m128i *)(const void *)mins));
    __m128i s = _mm_madd_epi16(m, pairs);
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
    return _mm_cvtsi128_si32(s);
}

static float dot_q8_0(size_t n, const void *w, const void *a) {
    const tkv__block_q8_0 *x = w;
    const tkv__block_q8_0 *y = a;
    const size_t nb = n / TKV__QK;
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    size_t i = 0;
    for (; i + 2 <= nb; i += 2) {
        const __m256i p0 = dot_i8_256(LOAD256(x[i].qs), LOAD256(y[i].qs));
        const __m256i p1 = dot_i8_256(LOAD256(x[i + 1].qs), LOAD256(y[i + 1].qs));
        acc0 = _mm256_fmadd_ps(_mm256_set1_ps(f16(x[i].d) * f16(y[i].d)), _mm256_cvtepi32_ps(p0), acc0);
        acc1 = _mm256_fmadd_ps(_mm256_set1_ps(f16(x[i + 1].d) * f16(y[i + 1].d)), _mm256_cvtepi32_ps(p1), acc1);
    }
    for (; i < nb; i++) {
        const __m256i p = dot_i8_256(LOAD256(x[i].qs), LOAD256(y[i].qs));
        acc0 = _mm256_fmadd_ps(_mm256_set1_ps(f16(x[i].d) * f16(y[i].d)), _mm256_cvtepi32_ps(p), acc0);
    }
    return hsum256(_mm256_add_ps(acc0, acc1));
}

/* sum((q - 8) * y) = sum(q * y) - sum(8 * y), both unsigned x signed */
static inline __m256i dot_q4_0_block(const tkv__block_q4_0 *x, const tkv__block_q8_0 *y) {
    const __m256i yv = LOAD256(y->qs), z = _mm256_setzero_si256();
    return _mm256_sub_epi32(_mm256_dpbusd_epi32(z, nibbles32(x->qs), yv), _mm256_dpbusd_epi32(z, _mm256_set1_epi8(8), yv));
}

static float dot_q4_0(size_t n, const void *w, const void *a) {
    const tkv__block_q4_0 *x = w;
    const tkv__block_q8_0 *y = a;
    const size_t nb = n / TKV__QK;
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    size_t i = 0;
    for (; i + 2 <= nb; i += 2) {
        const __m256i p0 = dot_q4_0_block(&x[i], &y[i]), p1 = dot_q4_0_block(&x[i + 1], &y[i + 1]);
        acc0 = _mm256_fmadd_ps(_mm256_set1_ps(f16(x[i].d) * f16(y[i].d)), _mm256_cvtepi32_ps(p0), acc0);
        acc1 = _mm256_fmadd_ps(_mm256_set1_ps(f16(x[i + 1].d) * f16(y[i + 1].d)), _mm256_cvtepi32_ps(p1), acc1);
    }
    for (; i < nb; i++) {
        const __m256i p = dot_q4_0_block(&x[i], &y[i]);
        acc0 = _mm256_fmadd_ps(_mm256_set1_ps(f16(x[i].d) * f16(y[i].d)), _mm256_cvtepi32_ps(p), acc0);
    }
    return hsum256(_mm256_add_ps(acc0, acc1));
}


/* A block's 8 lane sums of (q - 8) y, from the token's precomputed correction. */
static inline __m256 q4_0_sums(const tkv__block_q4_0 *x, const int8_t *yqs, const int32_t *corr, __m256i m,
                               __m256i sh) {
    /* the 16 bytes in both halves, the high half shifted: elements 0-15, then 16-31 */
    const __m256i q = _mm256_and_si256(_mm256_srlv_epi32(_mm256_broadcastsi128_si256(LOAD128(x->qs)), sh), m);
    const __m256i c = _mm256_load_si256((const __m256i *)(const void *)corr);
    return _mm256_cvtepi32_ps(_mm256_dpbusd_epi32(c, q, LOAD256(yqs)));
}

/* The block scale times the token's, as dot_q4_0 forms it, in all 8 lanes. */
static inline __m256 q4_0_scale(const tkv__block_q4_0 *x, float dy) {
    return _mm256_mul_ps(_mm256_cvtph_ps(_mm_set1_epi16((short)x->d)), _mm256_set1_ps(dy));
}

/*
 * Products with a few tokens (generation, and the decode steps of a few
 * sequences at once): dot_q4_0 for each row and token, bit for bit, with
 * what depends only on a token done once for all rows (its block scales as
 * floats and, per block, the correction -8 * (sums of four activations)
 * that turns products with the unsigned nibbles q into products with
 * q - 8), and what depends only on a row done once for all tokens (its
 * nibbles unpacked, its block scale converted). Per block, row and token
 * that leaves one vpdpbusd (started from the correction), one conversion,
 * one scale product and one fma; each row is read once for up to GT tokens.
 */
enum {
    GT = 8,                /* tokens per pass at most */
    GP = GT / 2,           /* token pairs: one pair per 512-bit register, a token per half */
    GV_BYTES = 72 * 1024,  /* the pass's tables (on the stack) */
    GV_PAIR_BLOCK = 192,   /* their bytes per pair and block */
};

/* The tables of a pass: per pair p and block i, both tokens side by side. */
typedef struct gv_pair {
    alignas(64) int8_t q[64];  /* the two tokens' 32 quants */
    int32_t corr[16];          /* their corrections: -8 x sums of four quants */
    float dy[16];              /* their block scales, 8 lanes each */
} gv_pair;

/* Fill pairs [0, np) for tokens t0 .. t0 + T - 1 (an odd last pair repeats its token). */
static void gv_fill(gv_pair *tb, const uint8_t *xq, size_t xrs, size_t t0, int T, size_t nb) {
    const __m256i z = _mm256_setzero_si256(), eight = _mm256_set1_epi8(8);
    for (int t = 0; t < 2 * ((T + 1) / 2); t++) {
        const int src = t < T ? t : T - 1;
        const tkv__block_q8_0 *yb = (const tkv__block_q8_0 *)(const void *)(xq + (t0 + (size_t)src) * xrs);
        const int p = t / 2, h = t % 2;
        for (size_t i = 0; i < nb; i++) {
            gv_pair *e = &tb[(size_t)p * nb + i];
            const __m256i v = LOAD256(yb[i].qs);
            _mm256_store_si256((__m256i *)(void *)(e->q + 32 * h), v);
            const __m256i corr = _mm256_sub_epi32(z, _mm256_dpbusd_epi32(z, eight, v));
            _mm256_store_si256((__m256i *)(void *)(e->corr + 8 * h), corr);
            _mm256_store_ps(e->dy + 8 * h, _mm256_set1_ps(f16(yb[i].d)));
        }
    }
}

/* One block of a row and a pair: acc += (d_w dy) * f32(corr + q . y), per half exactly as dot_q4_0's lanes. */
static inline __m512 gv_step(__m512 acc, __m512i q, __m512 dw, const gv_pair *e) {
    const __m512i c = _mm512_load_si512((const void *)e->corr);
    const __m512 s = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(c, q, _mm512_load_si512((const void *)e->q)));
    return _mm512_fmadd_ps(_mm512_mul_ps(dw, _mm512_load_ps(e->dy)), s, acc);
}

/* A block's nibbles in both 256-bit halves (elements 0-15, then 16-31, per half). */
static inline __m512i gv_nibbles(const tkv__block_q4_0 *x, __m512i m, __m512i sh) {
    return _mm512_and_si512(_mm512_srlv_epi32(_mm512_broadcast_i32x4(LOAD128(x->qs)), sh), m);
}

/* Rows [r0, r1) times one pair of tokens (t0 and, if both, t0 + 1): one
   register holds both tokens' 8 lanes. */
static void gv_rows(size_t r0, size_t r1, size_t nb, const uint8_t *w, size_t wrs, const gv_pair *tb, size_t t0,
                    bool both, float *y, size_t ldy) {
    const __m512i m = _mm512_set1_epi8(0x0f);
    const __m512i sh = _mm512_set_epi32(4, 4, 4, 4, 0, 0, 0, 0, 4, 4, 4, 4, 0, 0, 0, 0);
    for (size_t r = r0; r < r1; r++) {
        const tkv__block_q4_0 *x = (const tkv__block_q4_0 *)(const void *)(w + r * wrs);
        __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
        size_t i = 0;
        /* dot_q4_0's order: pairs of blocks into acc0 and acc1, an odd last one into acc0 */
        for (; i + 2 <= nb; i += 2) {
            const __m512i qi = gv_nibbles(&x[i], m, sh), qj = gv_nibbles(&x[i + 1], m, sh);
            a0 = gv_step(a0, qi, _mm512_cvtph_ps(_mm256_set1_epi16((short)x[i].d)), &tb[i]);
            a1 = gv_step(a1, qj, _mm512_cvtph_ps(_mm256_set1_epi16((short)x[i + 1].d)), &tb[i + 1]);
        }
        if (i < nb)
            a0 = gv_step(a0, gv_nibbles(&x[i], m, sh), _mm512_cvtph_ps(_mm256_set1_epi16((short)x[i].d)), &tb[i]);
        const __m512 v = _mm512_add_ps(a0, a1);
        y[t0 * ldy + r] = hsum256(_mm512_castps512_ps256(v));
        if (both) y[(t0 + 1) * ldy + r] = hsum256(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
    }
}

/* Rows longer than the tables hold: one token at a time, the table on the stack. */
static __attribute__((noinline)) void gemv_q4_0_long(size_t n, const uint8_t *w, size_t wrs, size_t nr,
                                                     const uint8_t *xq, size_t xrs, size_t n_tok, float *y, size_t ldy) {
    enum { MAXB = TKV__GEMV_MAX_N / TKV__QK };
    const size_t nb = n / TKV__QK;
    alignas(32) int32_t corr[MAXB][8]; /* 32 KiB */
    float dy[MAXB];                    /* 4 KiB */
    const __m256i m = _mm256_set1_epi8(0x0f), sh = _mm256_set_epi32(4, 4, 4, 4, 0, 0, 0, 0);
    const __m256i z = _mm256_setzero_si256();
    for (size_t t = 0; t < n_tok; t++) {
        const tkv__block_q8_0 *yb = (const tkv__block_q8_0 *)(const void *)(xq + t * xrs);
        for (size_t i = 0; i < nb; i++) {
            dy[i] = f16(yb[i].d);
            _mm256_store_si256((__m256i *)(void *)corr[i],
                               _mm256_sub_epi32(z, _mm256_dpbusd_epi32(z, _mm256_set1_epi8(8), LOAD256(yb[i].qs))));
        }
        for (size_t r = 0; r < nr; r++) {
            const tkv__block_q4_0 *x = (const tkv__block_q4_0 *)(const void *)(w + r * wrs);
            __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
            size_t i = 0;
            for (; i + 2 <= nb; i += 2) {
                const size_t j = i + 1;
                acc0 = _mm256_fmadd_ps(q4_0_scale(&x[i], dy[i]), q4_0_sums(&x[i], yb[i].qs, corr[i], m, sh), acc0);
                acc1 = _mm256_fmadd_ps(q4_0_scale(&x[j], dy[j]), q4_0_sums(&x[j], yb[j].qs, corr[j], m, sh), acc1);
            }
            if (i < nb)
                acc0 = _mm256_fmadd_ps(q4_0_scale(&x[i], dy[i]), q4_0_sums(&x[i], yb[i].qs, corr[i], m, sh), acc0);
            y[t * ldy + r] = hsum256(_mm256_add_ps(acc0, acc1));
        }
    }
}

/*
 * One token: gemv_q4_0_long (256-bit lanes, which three ports run). Two and
 * more: a pair of tokens per 512-bit register (each half is dot_q4_0's 8
 * lanes), the pairs' tables filled once, and rows taken in tiles that stay
 * in cache while every pair passes over them; an odd last token alone.
 */
static void gemv_q4_0(size_t n, const void *w, size_t wrs, size_t nr, const void *xq, size_t xrs, size_t n_tok,
                      float *y, size_t ldy) {
    enum { ROWS = 32 };
    const size_t nb = n / TKV__QK;
    const size_t fit = GV_BYTES / (GV_PAIR_BLOCK * nb); /* pairs the tables hold */
    if (n_tok == 1 || fit == 0) {
        gemv_q4_0_long(n, w, wrs, nr, xq, xrs, n_tok, y, ldy);
        return;
    }
    const size_t max_pairs = fit < GP ? fit : GP;
    alignas(64) gv_pair tb[GV_BYTES / sizeof(gv_pair)];
    _Static_assert(sizeof(gv_pair) == GV_PAIR_BLOCK, "the pass's table layout");
    size_t t0 = 0;
    for (; t0 + 2 <= n_tok;) {
        const size_t pairs = (n_tok - t0) / 2 < max_pairs ? (n_tok - t0) / 2 : max_pairs;
        gv_fill(tb, (const uint8_t *)xq, xrs, t0, 2 * (int)pairs, nb);
        for (size_t r = 0; r < nr; r += ROWS) {
            const size_t re = r + ROWS < nr ? r + ROWS : nr;
            for (size_t p = 0; p < pairs; p++) gv_rows(r, re, nb, w, wrs, tb + p * nb, t0 + 2 * p, true, y, ldy);
        }
        t0 += 2 * pairs;
    }
    if (t0 < n_tok) gemv_q4_0_long(n, w, wrs, nr, (const uint8_t *)xq + t0 * xrs, xrs, 1, y + t0 * ldy, ldy);
}

/* 0x10 in byte j when bit j of the little-endian uint32 at qh is set. */
static inline __m256i fifth_bits32(const uint8_t *qh) {
    uint32_t h;
    memcpy(&h, qh, 4);
    /* a bit mask does it in one step with AVX-512BW */
    return _mm256_maskz_mov_epi8((__mmask32)h, _mm256_set1_epi8(0x10));
}

static float dot_q4_1(size_t n, const void *w, const void *a) {
    const tkv__block_q4_1 *x = w;
    const tkv__block_q8_1 *y = a;
    __m256 acc = _mm256_setzero_ps();
    float summ = 0.0f;
    for (size_t i = 0; i < n / TKV__QK; i++) {
        const __m256i p = _mm256_dpbusd_epi32(_mm256_setzero_si256(), nibbles32(x[i].qs), LOAD256(y[i].qs));
        acc = _mm256_fmadd_ps(_mm256_set1_ps(f16(x[i].d) * f16(y[i].d)), _mm256_cvtepi32_ps(p), acc);
        summ += f16(x[i].m) * f16(y[i].s);
    }
    return hsum256(acc) + summ;
}

static float dot_q5_0(size_t n, const void *w, const void *a) {
    const tkv__block_q5_0 *x = w;
    const tkv__block_q8_0 *y = a;
    const __m256i sixteen = _mm256_set1_epi8(16), z = _mm256_setzero_si256();
    __m256 acc = _mm256_setzero_ps();
    for (size_t i = 0; i < n / TKV__QK; i++) {
        /* sum((q - 16) * y) = sum(q * y) - sum(16 * y) */
        const __m256i q = _mm256_or_si256(nibbles32(x[i].qs), fifth_bits32(x[i].qh));
        const __m256i yv = LOAD256(y[i].qs);
        const __m256i p = _mm256_sub_epi32(_mm256_dpbusd_epi32(z, q, yv), _mm256_dpbusd_epi32(z, sixteen, yv));
        acc = _mm256_fmadd_ps(_mm256_set1_ps(f16(x[i].d) * f16(y[i].d)), _mm256_cvtepi32_ps(p), acc);
    }
    return hsum256(acc);
}

static float dot_q5_1(size_t n, const void *w, const void *a) {
    const tkv__block_q5_1 *x = w;
    const tkv__block_q8_1 *y = a;
    __m256 acc = _mm256_setzero_ps();
    float summ = 0.0f;
    for (size_t i = 0; i < n / TKV__QK; i++) {
        const __m256i q = _mm256_or_si256(nibbles32(x[i].qs), fifth_bits32(x[i].qh));
        const __m256i p = _mm256_dpbusd_epi32(_mm256_setzero_si256(), q, LOAD256(y[i].qs));
        acc = _mm256_fmadd_ps(_mm256_set1_ps(f16(x[i].d) * f16(y[i].d)), _mm256_cvtepi32_ps(p), acc);
        summ += f16(x[i].m) * f16(y[i].s);
    }
    return hsum256(acc) + summ;
}

/* Q4_K / Q5_K: maddubs to int16 pairs, then vpdpwssd applies the group scale and accumulates. */
static inline float dot_k(size_t n, const uint8_t *p, size_t bsize, const tkv__block_q8_K *y, int five) {
    const __m256i m4 = _mm256_set1_epi8(0x0f), one = _mm256_set1_epi8(1);
    __m256 acc = _mm256_setzero_ps();
    float accm = 0.0f;
    uint8_t sm[16];
    for (size_t i = 0; i < n / TKV__QK_K; i++, p += bsize) {
        const tkv__block_q4_K *b4 = (const tkv__block_q4_K *)p;
        const uint8_t *qs = five ? ((const tkv__block_q5_K *)p)->qs : b4->qs;
        const float d = y[i].d * f16(b4->d), dmin = y[i].d * f16(b4->dmin);
        tkv__quant_k4_unpack(b4->scales, sm);
        __m256i h = five ? LOAD256(((const tkv__block_q5_K *)p)->qh) : _mm256_setzero_si256();
        __m256i sumi = _mm256_setzero_si256();
        for (int c = 0; c < 4; c++) {
            const __m256i q = LOAD256(qs + 32 * c);
            __m256i lo = _mm256_and_si256(q, m4);
            __m256i hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
            if (five) {
                lo = _mm256_or_si256(lo, _mm256_slli_epi16(_mm256_and_si256(h, one), 4));
                hi = _mm256_or_si256(hi, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 1), one), 4));
                h = _mm256_srli_epi16(h, 2);
            }
            sumi = _mm256_dpwssd_epi32(sumi, _mm256_maddubs_epi16(lo, LOAD256(y[i].qs + 64 * c)),
                                       _mm256_set1_epi16(sm[2 * c]));
            sumi = _mm256_dpwssd_epi32(sumi, _mm256_maddubs_epi16(hi, LOAD256(y[i].qs + 64 * c + 32)),
                                       _mm256_set1_epi16(sm[2 * c + 1]));
        }
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
        accm += dmin * (float)k_mins_dot(sm + 8, &y[i]);
    }
    return hsum256(acc) - accm;
}

static float dot_q4_K(size_t n, const void *w, const void *a) {
    return dot_k(n, w, sizeof(tkv__block_q4_K), a, 0);
}

static float dot_q5_K(size_t n, const void *w, const void *a) {
    return dot_k(n, w, sizeof(tkv__block_q5_K), a, 1);
}

static float dot_q6_K(size_t n, const void *w, const void *a) {
    const tkv__block_q6_K *x = w;
    const tkv__block_q8_K *y = a;
    const __m256i m4 = _mm256_set1_epi8(0x0f), m2 = _mm256_set1_epi8(3);
    __m256 acc = _mm256_setzero_ps();
    for (size_t i = 0; i < n / TKV__QK_K; i++) {
        const float d = y[i].d * f16(x[i].d);
        /* start from -32 * sum_g scales[g] * bsums[g]: the q - 32 offset */
        const __m256i corr = _mm256_madd_epi16(LOAD256(Q8K_BSUMS(&y[i])), _mm256_cvtepi8_epi16(LOAD128(x[i].scales)));
        __m256i sumi = _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(corr, 5));
        for (int h = 0; h < 2; h++) {
            const __m256i ql0 = LOAD256(x[i].ql + 64 * h), ql1 = LOAD256(x[i].ql + 64 * h + 32);
            const __m256i qh = LOAD256(x[i].qh + 32 * h);
            __m256i q[4];
            q[0] = _mm256_or_si256(_mm256_and_si256(ql0, m4), _mm256_slli_epi16(_mm256_and_si256(qh, m2), 4));
            q[1] = _mm256_or_si256(_mm256_and_si256(ql1, m4),
                                   _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2), m2), 4));
            q[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), m4),
                                   _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 4), m2), 4));
            q[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), m4),
                                   _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 6), m2), 4));
            for (int k = 0; k < 4; k++) {
                const int g = 8 * h + 2 * k; /* groups g (low 128 bits) and g + 1 (high) */
                const __m256i sc = _mm256_set_m128i(_mm_set1_epi16(x[i].scales[g + 1]), _mm_set1_epi16(x[i].scales[g]));
                sumi = _mm256_dpwssd_epi32(sumi, _mm256_maddubs_epi16(q[k], LOAD256(y[i].qs + 128 * h + 32 * k)), sc);
            }
        }
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
    }
    return hsum256(acc);
}

/* ---- element-wise: SiLU as the reference computes it on an AVX-512 CPU --------- */

/*
 * e^x for 16 floats, the approximation the reference uses here (so that an
 * activation agrees to the bit, and with it its rounding to F16 or BF16 on
 * the way into the next product): k = round(x / ln 2) by the 1.5 * 2^23
 * shift trick, r = x - k ln 2 with ln 2 in two parts, e^r by a degree-5
 * polynomial evaluated in two halves, then scaled by 2^k (vscalefps).
 * |k| > 192 gives +inf (x > 0) or 0. About 1.5 ulp from e^x.
 */
static inline __m512 exp16(__m512 x) {
    const __m512 shift = _mm512_set1_ps(0x1.8p23f);
    const __m512 z = _mm512_fmadd_ps(x, _mm512_set1_ps(0x1.715476p+0f), shift);
    const __m512 k = _mm512_sub_ps(z, shift);
    const __m512 r = _mm512_fnmadd_ps(k, _mm512_set1_ps(0x1.7f7d1cp-20f), _mm512_fnmadd_ps(k, _mm512_set1_ps(0x1.62e4p-1f), x));
    const __m512 r2 = _mm512_mul_ps(r, r);
    const __m512 hi = _mm512_fmadd_ps(_mm512_fmadd_ps(_mm512_set1_ps(0x1.0e4020p-7f), r, _mm512_set1_ps(0x1.573e2ep-5f)), r2,
                                      _mm512_fmadd_ps(_mm512_set1_ps(0x1.555e66p-3f), r, _mm512_set1_ps(0x1.fffdb6p-2f)));
    const __m512 p = _mm512_fmadd_ps(hi, r2, _mm512_fmadd_ps(_mm512_set1_ps(0x1.ffffecp-1f), r, _mm512_set1_ps(1.0f)));
    const __m512 res = _mm512_scalef_ps(p, k);
    const __mmask16 big = _mm512_cmp_ps_mask(_mm512_abs_ps(k), _mm512_set1_ps(192.0f), _CMP_GT_OQ);
    if (!big) return res;
    const __mmask16 neg = _mm512_cmp_ps_mask(k, _mm512_setzero_ps(), _CMP_LE_OQ);
    const __m512 limit = _mm512_mask_blend_ps(neg, _mm512_set1_ps(INFINITY), _mm512_setzero_ps());
    return _mm512_mask_blend_ps(big, res, limit);
}

/* x / (1 + e^(0 - x)) */
static inline __m512 silu16(__m512 x) {
    const __m512 e = exp16(_mm512_sub_ps(_mm512_setzero_ps(), x));
    return _mm512_div_ps(x, _mm512_add_ps(_mm512_set1_ps(1.0f), e));
}

/* 16 at a time as above, the tail with the C library's expf (as the reference) */
static void silu(float *y, const float *x, size_t n) {
    size_t i = 0;
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, silu16(_mm512_loadu_ps(x + i)));
    for (; i < n; i++) y[i] = x[i] / (1.0f + expf(-x[i]));
}

static void swiglu(float *y, const float *gate, const float *up, size_t n) {
    size_t i = 0;
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, _mm512_mul_ps(silu16(_mm512_loadu_ps(gate + i)), _mm512_loadu_ps(up + i)));
    for (; i < n; i++) y[i] = gate[i] / (1.0f + expf(-gate[i])) * up[i];
}

/*
 * c tanh(x / c), 16 at a time: with u = |x| / c, tanh u = 1 - 2 / (e^2u + 1)
 * (exp16 above), except below u = 0.25, where that form loses digits to
 * cancellation and the odd Taylor polynomial to u^9 is within 1e-8; the
 * sign restored afterwards. Within a few ulp of tanhf. The tail uses tanhf.
 */
static void softcap(float *x, size_t n, float c) {
    const __m512 vc = _mm512_set1_ps(c), one = _mm512_set1_ps(1.0f);
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m512 v = _mm512_loadu_ps(x + i);
        const __m512 u = _mm512_abs_ps(_mm512_div_ps(v, vc));
        const __m512 e = exp16(_mm512_add_ps(u, u));
        __m512 t = _mm512_sub_ps(one, _mm512_div_ps(_mm512_set1_ps(2.0f), _mm512_add_ps(e, one)));
        const __mmask16 small = _mm512_cmp_ps_mask(u, _mm512_set1_ps(0.25f), _CMP_LT_OQ);
        if (small) {
            const __m512 u2 = _mm512_mul_ps(u, u);
            __m512 p = _mm512_set1_ps(62.0f / 2835.0f);
            p = _mm512_fmadd_ps(p, u2, _mm512_set1_ps(-17.0f / 315.0f));
            p = _mm512_fmadd_ps(p, u2, _mm512_set1_ps(2.0f / 15.0f));
            p = _mm512_fmadd_ps(p, u2, _mm512_set1_ps(-1.0f / 3.0f));
            p = _mm512_fmadd_ps(_mm512_mul_ps(p, u2), u, u);
            t = _mm512_mask_blend_ps(small, t, p);
        }
        /* the sign of x, on tanh |x / c| */
        const __m512i sign = _mm512_and_si512(_mm512_castps_si512(v), _mm512_set1_epi32((int)0x80000000u));
        t = _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(t), sign));
        _mm512_storeu_ps(x + i, _mm512_mul_ps(vc, t));
    }
    for (; i < n; i++) x[i] = c * tanhf(x[i] / c);
}

const tkv__kernels tkv__kernel_avx512_part = {
    .level = TKV__KERNEL_AVX512,
    .name = "avx512",
    .vec_dot =
        {
            /* float rows in the reference's order (gemm_float_avx512.c) */
            [TKV_TYPE_F32] = tkv__dot_f32_ref_avx512,
            [TKV_TYPE_F16] = tkv__dot_f16_ref_avx512,
            [TKV_TYPE_BF16] = tkv__dot_bf16_ref_avx512,
            [TKV_TYPE_Q8_0] = dot_q8_0,
            [TKV_TYPE_Q4_0] = dot_q4_0,
            [TKV_TYPE_Q4_1] = dot_q4_1,
            [TKV_TYPE_Q5_0] = dot_q5_0,
            [TKV_TYPE_Q5_1] = dot_q5_1,
            [TKV_TYPE_Q4_K] = dot_q4_K,
            [TKV_TYPE_Q5_K] = dot_q5_K,
            [TKV_TYPE_Q6_K] = dot_q6_K,
        },
    /* tiled products (gemm_avx512.c), bit for bit these vec_dots */
    .gemm =
        {
            [TKV_TYPE_Q8_0] = tkv__gemm_q8_0_avx512,
            [TKV_TYPE_Q4_0] = tkv__gemm_q4_0_avx512,
            [TKV_TYPE_Q4_K] = tkv__gemm_q4_K_avx512,
            [TKV_TYPE_Q5_K] = tkv__gemm_q5_K_avx512,
            [TKV_TYPE_Q6_K] = tkv__gemm_q6_K_avx512,
        },
    .gemv =
        {
            [TKV_TYPE_Q4_0] = gemv_q4_0,
        },
    .lanes =
        {
            [TKV_TYPE_F32] = tkv__lanes_f32_avx512,
            [TKV_TYPE_F16] = tkv__lanes_f16_avx512,
            [TKV_TYPE_BF16] = tkv__lanes_bf16_avx512,
        },
    .lanes_kn = {[TKV_TYPE_F32] = 16, [TKV_TYPE_F16] = 16, [TKV_TYPE_BF16] = 16},
    .silu = silu,
    .softcap = softcap,
    .swiglu = swiglu,
};


#else /* not an x86-64 build with AVX-512 flags: an empty part, never selected */

const tkv__kernels tkv__kernel_avx512_part = {.level = TKV__KERNEL_AVX512, .name = NULL};
void tkv__lanes_bf16_variant(size_t n, const void *w, size_t wrs, size_t n_rows, const void *xq, size_t xrs, size_t n_tok,
                             float *y, size_t ldy);

#endif
