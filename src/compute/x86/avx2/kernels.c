/*
 * compute/x86/avx2/kernels.c — AVX2 + FMA + F16C kernels (compiled with -mavx2 -mfma
 * -mf16c; only reached through the table when the CPU has all three).
 *
 * Integer parts of the quantized dot products are exact, like the scalar
 * ones: only the order of the float accumulation differs. Activation
 * quantizers give the same bytes as the scalar ones (same formulas, same
 * round-half-even, max/abs are exact).
 *
 * Every load goes through the unaligned intrinsics or memcpy: blocks may sit
 * at any address.
 */
#include "compute/gemm.h"
#include "compute/kernels.h"
#include "compute/quant/quant.h"
#include "compute/quant/grids.h"
#include "compute/quant/iq.h"
#include "compute/x86/q2_q3_k.h"
#include "compute/x86/q6_k_dot.h"
#include "compute/x86/tq1.h"

#include <math.h>
#include <stdalign.h>
#include <stddef.h>

#if defined(__x86_64__) && defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include <immintrin.h>

/* ---- helpers --------------------------------------------------------------- */

#define LOAD256(p) _mm256_loadu_si256((const __m256i *)(const void *)(p))
#define LOAD128(p) _mm_loadu_si128((const __m128i *)(const void *)(p))
/* address of the bsums of a Q8_K block (a packed member: no int16_t pointer) */
#define Q8K_BSUMS(b) ((const uint8_t *)(b) + offsetof(tkv__block_q8_K, bsums))

static inline float hsum_f32(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

static inline float hmax_f32(__m256 v) {
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    s = _mm_max_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

static inline int hsum_i32(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
    return _mm_cvtsi128_si32(s);
}

static inline float f16(uint16_t h) {
    return _cvtsh_ss(h);
}

/* Sums of 4 products of signed bytes: x any int8, y in -127..127. */
static inline __m256i dot_i8(__m256i x, __m256i y) {
    /* |x| as unsigned (|-128| = 128 fits), y takes x's sign; pairs <= 2*128*127 fit int16 */
    const __m256i p = _mm256_maddubs_epi16(_mm256_sign_epi8(x, x), _mm256_sign_epi8(y, x));
    return _mm256_madd_epi16(p, _mm256_set1_epi16(1));
}

/* Sums of 4 products of unsigned u (0..63) with signed y. */
static inline __m256i dot_u8(__m256i u, __m256i y) {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(u, y), _mm256_set1_epi16(1));
}

/* 16 bytes of nibbles to 32 bytes: low nibbles (elements 0-15), then high. */
static inline __m256i nibbles32(const uint8_t *qs) {
    const __m128i b = LOAD128(qs);
    const __m128i m = _mm_set1_epi8(0x0f);
    return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(b, 4), m), _mm_and_si128(b, m));
}

/* 0xff in byte j when bit j of h is set, else 0. */
static inline __m256i bit_mask32(uint32_t h) {
    const __m256i shuf = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2,
                                          3, 3, 3, 3, 3, 3, 3, 3);
    const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ULL);
    const __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi32((int)h), shuf);
    return _mm256_cmpeq_epi8(_mm256_and_si256(v, bit), bit);
}

/* 0x10 in byte j when bit j of the little-endian uint32 at qh is set. */
static inline __m256i fifth_bits32(const uint8_t *qh) {
    uint32_t h;
    memcpy(&h, qh, 4);
    return _mm256_and_si256(bit_mask32(h), _mm256_set1_epi8(0x10));
}

/* ---- dot products: float rows ------------------------------------------------ */

/* In the reference's order: compute/x86/avx2/gemm_float.c. */

/* ---- dot products: 32-element blocks ------------------------------------------ */

/* Q8_0 in the reference's lane-wise order (kernels.h's vec_dot_ref; the default is block-reduced:
   compute/x86/avx2/kernels.c's tkv__dot_q8_0_avx2) */
static float dot_q8_0(size_t n, const void *w, const void *a) {
    const tkv__block_q8_0 *x = w;
    const tkv__block_q8_0 *y = a;
    const size_t nb = n / TKV__QK;
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    size_t i = 0;
    for (; i + 2 <= nb; i += 2) {
        const __m256i p0 = dot_i8(LOAD256(x[i].qs), LOAD256(y[i].qs));
        const __m256i p1 = dot_i8(LOAD256(x[i + 1].qs), LOAD256(y[i + 1].qs));
        acc0 = _mm256_fmadd_ps(_mm256_set1_ps(f16(x[i].d) * f16(y[i].d)), _mm256_cvtepi32_ps(p0), acc0);
        acc1 = _mm256_fmadd_ps(_mm256_set1_ps(f16(x[i + 1].d) * f16(y[i + 1].d)), _mm256_cvtepi32_ps(p1), acc1);
    }
    for (; i < nb; i++) {
        const __m256i p = dot_i8(LOAD256(x[i].qs), LOAD256(y[i].qs));
        acc0 = _mm256_fmadd_ps(_mm256_set1_ps(f16(x[i].d) * f16(y[i].d)), _mm256_cvtepi32_ps(p), acc0);
    }
    return hsum_f32(_mm256_add_ps(acc0, acc1));
}

/* Eight blocks' integer sums, in block order, from their 8-lane partial sums. */
static inline __m256i block_sums8(const __m256i p[8]) {
    const __m256i h0 = _mm256_hadd_epi32(p[0], p[1]), h1 = _mm256_hadd_epi32(p[2], p[3]);
    const __m256i h2 = _mm256_hadd_epi32(p[4], p[5]), h3 = _mm256_hadd_epi32(p[6], p[7]);
    /* g0: [lanes 0-3 of p0..p3 | lanes 4-7 of p0..p3], g1 the same for p4..p7 */
    const __m256i g0 = _mm256_hadd_epi32(h0, h1), g1 = _mm256_hadd_epi32(h2, h3);
    return _mm256_add_epi32(_mm256_permute2x128_si256(g0, g1, 0x20), _mm256_permute2x128_si256(g0, g1, 0x31));
}

/* What a 32-element block is: Q4_0 (q - 8), IQ4_NL (its codebook), both after an
   fp16 d; MXFP4 (the E2M1 values doubled) after an E8M0 exponent byte; Q8_0 (32
   signed bytes after an fp16 d); Q5_0 ((q | fifth bit << 4) - 16, after an fp16 d
   and the fifth bits). */
typedef enum b4_kind {
    B4_Q4_0,
    B4_IQ4_NL,
    B4_MXFP4,
    B4_Q8_0,
    B4_Q5_0,
} b4_kind;

/* Bytes of a block. */
static const size_t b4_bytes[] = {[B4_Q4_0] = sizeof(tkv__block_q4_0), [B4_IQ4_NL] = sizeof(tkv__block_iq4_nl),
                                  [B4_MXFP4] = sizeof(tkv__block_mxfp4), [B4_Q8_0] = sizeof(tkv__block_q8_0),
                                  [B4_Q5_0] = sizeof(tkv__block_q5_0)};

/* A block's 32 weights as signed bytes. */
static inline __m256i b4_weights(const uint8_t *blk, b4_kind kind) {
    if (kind == B4_Q8_0) return LOAD256(blk + 2);
    if (kind == B4_Q4_0) return _mm256_sub_epi8(nibbles32(blk + 2), _mm256_set1_epi8(8));
    if (kind == B4_Q5_0) {
        const tkv__block_q5_0 *b = (const tkv__block_q5_0 *)(const void *)blk;
        return _mm256_sub_epi8(_mm256_or_si256(nibbles32(b->qs), fifth_bits32(b->qh)), _mm256_set1_epi8(16));
    }
    const int8_t *book = kind == B4_IQ4_NL ? tkv__iq4nl_values : tkv__mxfp4_values;
    return _mm256_shuffle_epi8(_mm256_broadcastsi128_si256(LOAD128(book)), nibbles32(blk + (kind == B4_MXFP4 ? 1 : 2)));
}

/* A block's scale as a float. */
static inline float b4_scale(const uint8_t *blk, b4_kind kind) {
    if (kind == B4_MXFP4) return tkv__e8m0_half(blk[0]);
    uint16_t h;
    memcpy(&h, blk, 2);
    return f16(h);
}

/*
 * Q4_0, IQ4_NL, MXFP4, Q8_0 and Q5_0 in the block-reduced order (compute/quant/quant.h):
 * each block's exact integer sum, then one fma per block with the product
 * of the two scales into a single float, blocks in order: the reference's
 * order over its repacked rows. The integer sums of eight blocks are formed
 * side by side; only the fma chain is sequential. The avx512 table uses
 * these too: its gemv and gemm (compute/x86/avx512/gemm_q4_0_iq4_nl.c) give
 * the same bits.
 */
static inline float dot_b4_reduced(size_t n, const void *w, const void *a, b4_kind kind) {
    const uint8_t *x = w;
    const tkv__block_q8_0 *y = a;
    const size_t nb = n / TKV__QK, bs = b4_bytes[kind];
    float acc = 0.0f;
    size_t i = 0;
    for (; i + 8 <= nb; i += 8) {
        __m256i p[8];
        for (int k = 0; k < 8; k++) p[k] = dot_i8(b4_weights(x + (i + k) * bs, kind), LOAD256(y[i + k].qs));
        alignas(32) float s[8];
        _mm256_store_ps(s, _mm256_cvtepi32_ps(block_sums8(p)));
        for (int k = 0; k < 8; k++) acc = fmaf(s[k], b4_scale(x + (i + k) * bs, kind) * f16(y[i + k].d), acc);
    }
    for (; i < nb; i++) {
        const int s = hsum_i32(dot_i8(b4_weights(x + i * bs, kind), LOAD256(y[i].qs)));
        acc = fmaf((float)s, b4_scale(x + i * bs, kind) * f16(y[i].d), acc);
    }
    return acc;
}

float tkv__dot_q4_0_avx2(size_t n, const void *w, const void *a) {
    return dot_b4_reduced(n, w, a, B4_Q4_0);
}

float tkv__dot_iq4_nl_avx2(size_t n, const void *w, const void *a) {
    _Static_assert(sizeof(tkv__block_iq4_nl) == sizeof(tkv__block_q4_0), "IQ4_NL has Q4_0's block layout");
    return dot_b4_reduced(n, w, a, B4_IQ4_NL);
}

static float dot_mxfp4(size_t n, const void *w, const void *a) {
    return dot_b4_reduced(n, w, a, B4_MXFP4);
}

/* This level's Q5_0 (compute/quant/quant.h: block-reduced, over its packed rows in gemm_q4_0_iq4_nl.c); the
   reference's lane-wise order is dot_q5_0 (kernels.h's vec_dot_ref), which the avx512 level keeps as its own. */
static float dot_q5_0_reduced(size_t n, const void *w, const void *a) {
    return dot_b4_reduced(n, w, a, B4_Q5_0);
}

float tkv__dot_q8_0_avx2(size_t n, const void *w, const void *a) {
    return dot_b4_reduced(n, w, a, B4_Q8_0);
}

/*
 * IQ4_XS: per sub-block the codebook products as int16 pairs (maddubs),
 * times the sub-block's scale in the pairs' sum (madd), all eight into one
 * 8-lane integer sum per super-block (exact). The reference's order
 * (tkv__dot_iq4_xs_lanes_avx2, vec_dot_ref) then fma's its float scale into
 * each lane and sums the lanes at the end; the default, block-reduced one
 * (tkv__dot_iq4_xs_avx2) sums the lanes per super-block and fma's that once,
 * bit for bit each level's gemm_iq4_xs.c.
 */
static inline __m256i iq4xs_lanes(const tkv__block_iq4_xs *x, const int8_t *yqs, __m256i book) {
    __m256i sumi = _mm256_setzero_si256();
    for (int b = 0; b < 8; b++) {
        const __m256i q = _mm256_shuffle_epi8(book, nibbles32(x->qs + 16 * b));
        const __m256i yq = LOAD256(yqs + 32 * b);
        const __m256i pairs = _mm256_maddubs_epi16(_mm256_sign_epi8(q, q), _mm256_sign_epi8(yq, q));
        const __m256i ls = _mm256_set1_epi16((short)tkv__iq4_xs_scale(x, b));
        sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(pairs, ls));
    }
    return sumi;
}

float tkv__dot_iq4_xs_lanes_avx2(size_t n, const void *w, const void *a) {
    const tkv__block_iq4_xs *x = w;
    const tkv__block_q8_K *y = a;
    const __m256i book = _mm256_broadcastsi128_si256(LOAD128(tkv__iq4nl_values));
    __m256 acc = _mm256_setzero_ps();
    for (size_t i = 0; i < n / TKV__QK_K; i++)
        acc = _mm256_fmadd_ps(_mm256_set1_ps(f16(x[i].d) * y[i].d), _mm256_cvtepi32_ps(iq4xs_lanes(&x[i], y[i].qs, book)), acc);
    return hsum_f32(acc);
}

/* IQ4_XS block-reduced (compute/quant/quant.h): per block the exact sum, then one fma into the running sum. */
float tkv__dot_iq4_xs_avx2(size_t n, const void *w, const void *a) {
    const tkv__block_iq4_xs *x = w;
    const tkv__block_q8_K *y = a;
    const __m256i book = _mm256_broadcastsi128_si256(LOAD128(tkv__iq4nl_values));
    float s = 0.0f;
    for (size_t i = 0; i < n / TKV__QK_K; i++)
        s = fmaf((float)hsum_i32(iq4xs_lanes(&x[i], y[i].qs, book)), f16(x[i].d) * y[i].d, s);
    return s;
}

/*
 * Q2_K and Q3_K. Per quarter-chunk of 32 elements (chunk c, j: bits 2j of
 * qs[32 c ..]) the products form int16 pairs, and the pairs' sum takes the
 * scale of their 16-element sub-block (lanes 0-3 the first, 4-7 the
 * second); all eight quarter-chunks add into one integer per lane. Then, as
 * the reference's plain x86 dots do per super-block: Q2_K one fma of -d_a
 * dmin with the mins' products with the activation's sums of 16 (lane k:
 * sub-blocks 2k and 2k + 1), then one of d_a d with those integers; Q3_K the
 * latter only. Those are the vec_dot_ref entries (their tiled twins avx2's
 * gemm_q2_q3_k_lanes.c, avx512's gemm_q3_k_lanes.c). The lanes are
 * compute/x86/q2_q3_k.h's. The default, block-reduced order takes the same
 * integers summed whole (tkv__dot_q2_K_avx2, tkv__dot_q3_K_avx2), bit for
 * bit each level's gemm_q2_q3_k.c.
 */
float tkv__dot_q2_K_lanes_avx2(size_t n, const void *w, const void *a) {
    const tkv__block_q2_K *x = w;
    const tkv__block_q8_K *y = a;
    __m256 acc = _mm256_setzero_ps();
    for (size_t i = 0; i < n / TKV__QK_K; i++) {
        const float d = y[i].d * f16(x[i].d), dmin = -y[i].d * f16(x[i].dmin);
        const __m256i prod = _mm256_madd_epi16(tkv__q2k_mins((const uint8_t *)&x[i]), LOAD256(Q8K_BSUMS(&y[i])));
        acc = _mm256_fmadd_ps(_mm256_set1_ps(dmin), _mm256_cvtepi32_ps(prod), acc);
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(tkv__q2k_lanes(&x[i], y[i].qs)), acc);
    }
    return hsum_f32(acc);
}

/* Q2_K block-reduced (compute/quant/quant.h): per block the exact sums, then one fma into each running sum. */
float tkv__dot_q2_K_avx2(size_t n, const void *w, const void *a) {
    const tkv__block_q2_K *x = w;
    const tkv__block_q8_K *y = a;
    float s = 0.0f, m = 0.0f;
    for (size_t i = 0; i < n / TKV__QK_K; i++) {
        const int sumi = hsum_i32(tkv__q2k_lanes(&x[i], y[i].qs));
        const int summ = hsum_i32(_mm256_madd_epi16(tkv__q2k_mins((const uint8_t *)&x[i]), LOAD256(Q8K_BSUMS(&y[i]))));
        s = fmaf((float)sumi, f16(x[i].d) * y[i].d, s);
        m = fmaf((float)summ, f16(x[i].dmin) * y[i].d, m);
    }
    return s - m;
}

float tkv__dot_q3_K_lanes_avx2(size_t n, const void *w, const void *a) {
    const tkv__block_q3_K *x = w;
    const tkv__block_q8_K *y = a;
    __m256 acc = _mm256_setzero_ps();
    for (size_t i = 0; i < n / TKV__QK_K; i++) {
        const float d = y[i].d * f16(x[i].d);
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(tkv__q3k_lanes(&x[i], y[i].qs)), acc);
    }
    return hsum_f32(acc);
}

/* Q3_K block-reduced (compute/quant/quant.h): per block the exact sum, then one fma into the running sum. */
float tkv__dot_q3_K_avx2(size_t n, const void *w, const void *a) {
    const tkv__block_q3_K *x = w;
    const tkv__block_q8_K *y = a;
    float s = 0.0f;
    for (size_t i = 0; i < n / TKV__QK_K; i++)
        s = fmaf((float)hsum_i32(tkv__q3k_lanes(&x[i], y[i].qs)), f16(x[i].d) * y[i].d, s);
    return s;
}

/*
 * TQ1_0 and TQ2_0, in the reference's lanes: the products of the quants
 * 0..2 as int16 pairs by position within each 32-element chunk, the eight
 * chunks added per position, less the activation's sums of 16 (taking the
 * -1 off in aggregate), then pairs of those into 8 int32 lanes; per
 * super-block lane * (d_a d) added to the float sum in one fused
 * multiply-add: the reference's source writes a product and an add, but its
 * GNU C build (GCC's default -ffp-contract=fast, -march=native) fuses them
 * (vfmadd231ps). A row of one block cannot tell (its add is to zero); rows
 * of 2+ blocks (n_embd 512) landed 1-2.6% per logits row off the reference
 * unfused. The lanes depend only on element positions, so TQ1_0 (its
 * base-3 digits unpacked first) gives TQ2_0's results for the same weights.
 */
static inline __m256 tq_block(__m256 acc, const __m256i q[8], const tkv__block_q8_K *y, float d) {
    __m256i s16 = _mm256_setzero_si256();
    for (int c = 0; c < 8; c++) s16 = _mm256_add_epi16(s16, _mm256_maddubs_epi16(q[c], LOAD256(y->qs + 32 * c)));
    s16 = _mm256_sub_epi16(s16, LOAD256(Q8K_BSUMS(y)));
    const __m256i s32 = _mm256_madd_epi16(s16, _mm256_set1_epi16(1));
    return _mm256_fmadd_ps(_mm256_cvtepi32_ps(s32), _mm256_set1_ps(y->d * d), acc);
}

static float dot_tq2_0(size_t n, const void *w, const void *a) {
    const tkv__block_tq2_0 *x = w;
    const tkv__block_q8_K *y = a;
    const __m256i m3 = _mm256_set1_epi8(3);
    __m256 acc = _mm256_setzero_ps();
    for (size_t i = 0; i < n / TKV__QK_K; i++) {
        __m256i q[8];
        for (int c = 0; c < 2; c++) {
            const __m256i bits = LOAD256(x[i].qs + 32 * c);
            for (int j = 0; j < 4; j++) q[4 * c + j] = _mm256_and_si256(_mm256_srli_epi16(bits, 2 * j), m3);
        }
        acc = tq_block(acc, q, &y[i], f16(x[i].d));
    }
    return hsum_f32(acc);
}

float tkv__dot_tq1_0_avx2(size_t n, const void *w, const void *a) {
    const tkv__block_tq1_0 *x = w;
    const tkv__block_q8_K *y = a;
    __m256 acc = _mm256_setzero_ps();
    for (size_t i = 0; i < n / TKV__QK_K; i++) {
        __m256i q[8];
        tkv__tq1_quants(&x[i], q);
        acc = tq_block(acc, q, &y[i], f16(x[i].d));
    }
    return hsum_f32(acc);
}

/*
 * TQ1_0 rows against a batch: each block's base-3 digits, which cost
 * several times the block's products with one token, unpacked once for
 * TQ_TOK tokens, in tiles of TQ_ROWS rows (their blocks stay in L1 while
 * the tokens pass). Each entry adds its blocks' tq_block in order and ends
 * in hsum_f32, as tkv__dot_tq1_0_avx2 does: bit for bit. On the 125M layer's
 * products (512 tokens, one thread) 58 -> 135 GFLOP/s; the same loop for
 * TQ2_0, whose unpacking is two instructions a vector, ran at 140 against
 * its dot's 155, so TQ2_0 keeps the dot.
 */
#define TQ_TOK 16
#define TQ_ROWS 16

static void gemm_tq1_0(size_t n, const void *w, size_t wrs, size_t nr, const void *xq, size_t xrs, size_t n_tok,
                       float *y, size_t ldy) {
    const size_t nb = n / TKV__QK_K;
    for (size_t r0 = 0; r0 < nr; r0 += TQ_ROWS) {
        const size_t re = nr - r0 < TQ_ROWS ? nr : r0 + TQ_ROWS;
        for (size_t t0 = 0; t0 < n_tok; t0 += TQ_TOK) {
            const size_t nt = n_tok - t0 < TQ_TOK ? n_tok - t0 : TQ_TOK;
            const tkv__block_q8_K *ya[TQ_TOK];
            for (size_t t = 0; t < nt; t++) ya[t] = (const tkv__block_q8_K *)(const void *)((const uint8_t *)xq + (t0 + t) * xrs);
            for (size_t r = r0; r < re; r++) {
                const tkv__block_tq1_0 *x = (const tkv__block_tq1_0 *)(const void *)((const uint8_t *)w + r * wrs);
                __m256 acc[TQ_TOK];
                for (size_t t = 0; t < nt; t++) acc[t] = _mm256_setzero_ps();
                for (size_t i = 0; i < nb; i++) {
                    __m256i q[8];
                    tkv__tq1_quants(&x[i], q);
                    const float d = f16(x[i].d);
                    for (size_t t = 0; t < nt; t++) acc[t] = tq_block(acc[t], q, &ya[t][i], d);
                }
                for (size_t t = 0; t < nt; t++) y[(t0 + t) * ldy + r] = hsum_f32(acc[t]);
            }
        }
    }
}

/*
 * IQ2_XXS, IQ2_XS, IQ2_S (all three in compute/x86/avx2/dot_iq2.c), in the
 * reference's lanes: per sub-block of 32 the
 * four codebook entries as 32 unsigned bytes, the signs moved onto the
 * activations (|a| <= 127, so negating never overflows), the products as
 * int16 pairs (maddubs: at most 2 * 43 * 127, no saturation), then pairs of
 * those times 2 ls + 1 of their 16-element half into 8 int32 lanes, all
 * eight sub-blocks into one integer per lane (exact in float: < 2^23). Per
 * super-block one fma of d_w d_a per lane, and 1/8 of the lanes' sum at the
 * end, as the reference does.
 */

static float dot_q4_1(size_t n, const void *w, const void *a) {
    const tkv__block_q4_1 *x = w;
    const tkv__block_q8_1 *y = a;
    const size_t nb = n / TKV__QK;
    __m256 acc = _mm256_setzero_ps();
    float summ = 0.0f;
    for (size_t i = 0; i < nb; i++) {
        const __m256i p = dot_u8(nibbles32(x[i].qs), LOAD256(y[i].qs));
        acc = _mm256_fmadd_ps(_mm256_set1_ps(f16(x[i].d) * f16(y[i].d)), _mm256_cvtepi32_ps(p), acc);
        summ += f16(x[i].m) * f16(y[i].s);
    }
    return hsum_f32(acc) + summ;
}

static float dot_q5_0(size_t n, const void *w, const void *a) {
    const tkv__block_q5_0 *x = w;
    const tkv__block_q8_0 *y = a;
    const size_t nb = n / TKV__QK;
    const __m256i sixteen = _mm256_set1_epi8(16);
    __m256 acc = _mm256_setzero_ps();
    for (size_t i = 0; i < nb; i++) {
        const __m256i q = _mm256_sub_epi8(_mm256_or_si256(nibbles32(x[i].qs), fifth_bits32(x[i].qh)), sixteen);
        const __m256i p = dot_i8(q, LOAD256(y[i].qs));
        acc = _mm256_fmadd_ps(_mm256_set1_ps(f16(x[i].d) * f16(y[i].d)), _mm256_cvtepi32_ps(p), acc);
    }
    return hsum_f32(acc);
}

static float dot_q5_1(size_t n, const void *w, const void *a) {
    const tkv__block_q5_1 *x = w;
    const tkv__block_q8_1 *y = a;
    const size_t nb = n / TKV__QK;
    __m256 acc = _mm256_setzero_ps();
    float summ = 0.0f;
    for (size_t i = 0; i < nb; i++) {
        const __m256i q = _mm256_or_si256(nibbles32(x[i].qs), fifth_bits32(x[i].qh));
        const __m256i p = dot_u8(q, LOAD256(y[i].qs));
        acc = _mm256_fmadd_ps(_mm256_set1_ps(f16(x[i].d) * f16(y[i].d)), _mm256_cvtepi32_ps(p), acc);
        summ += f16(x[i].m) * f16(y[i].s);
    }
    return hsum_f32(acc) + summ;
}

/* ---- dot products: K blocks ------------------------------------------------- */

/* sum over groups g of mins[g] * (bsums[2g] + bsums[2g+1]), exact. */
static inline int k_mins_dot(const uint8_t mins[8], const tkv__block_q8_K *y) {
    const __m256i bs = LOAD256(Q8K_BSUMS(y));
    const __m128i pairs = _mm_hadd_epi16(_mm256_castsi256_si128(bs), _mm256_extracti128_si256(bs, 1));
    const __m128i m = _mm_cvtepu8_epi16(_mm_loadl_epi64((const __m128i *)(const void *)mins));
    __m128i s = _mm_madd_epi16(m, pairs);
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
    return _mm_cvtsi128_si32(s);
}

/* One Q4_K (five: Q5_K) block's group sums times their scales (sm[0..7]), 8 int32 lanes; exact. */
static inline __m256i k45_block_sumi(const uint8_t *p, const uint8_t sm[16], const tkv__block_q8_K *y, int five) {
    const __m256i m4 = _mm256_set1_epi8(0x0f), one = _mm256_set1_epi8(1);
    const uint8_t *qs = five ? ((const tkv__block_q5_K *)p)->qs : ((const tkv__block_q4_K *)p)->qs;
    __m256i h = five ? LOAD256(((const tkv__block_q5_K *)p)->qh) : _mm256_setzero_si256();
    __m256i sumi = _mm256_setzero_si256();
    for (int c = 0; c < 4; c++) {
        const __m256i q = LOAD256(qs + 32 * c);
        __m256i lo = _mm256_and_si256(q, m4), hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
        if (five) {
            lo = _mm256_or_si256(lo, _mm256_slli_epi16(_mm256_and_si256(h, one), 4));
            hi = _mm256_or_si256(hi, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 1), one), 4));
            h = _mm256_srli_epi16(h, 2);
        }
        const __m256i plo = _mm256_madd_epi16(_mm256_maddubs_epi16(lo, LOAD256(y->qs + 64 * c)), _mm256_set1_epi16(sm[2 * c]));
        const __m256i phi =
            _mm256_madd_epi16(_mm256_maddubs_epi16(hi, LOAD256(y->qs + 64 * c + 32)), _mm256_set1_epi16(sm[2 * c + 1]));
        sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(plo, phi));
    }
    return sumi;
}

/* Q5_K lane-wise (the reference's x86 vec_dot): the block's lanes fma'd into 8 float lanes, the mins a scalar sum. */
static inline float dot_k(size_t n, const uint8_t *p, size_t bsize, const tkv__block_q8_K *y, int five) {
    __m256 acc = _mm256_setzero_ps();
    float accm = 0.0f;
    uint8_t sm[16];
    for (size_t i = 0; i < n / TKV__QK_K; i++, p += bsize) {
        const tkv__block_q4_K *b4 = (const tkv__block_q4_K *)p; /* d, dmin, scales: same place in Q5_K */
        const float d = y[i].d * f16(b4->d), dmin = y[i].d * f16(b4->dmin);
        tkv__quant_k4_unpack(b4->scales, sm);
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(k45_block_sumi(p, sm, &y[i], five)), acc);
        accm += dmin * (float)k_mins_dot(sm + 8, &y[i]);
    }
    return hsum_f32(acc) - accm;
}

/* Q4_K and Q5_K, block-reduced (compute/quant/quant.h): the block's exact sums, then two fmas. */
static inline float dot_k_reduced(size_t n, const uint8_t *p, size_t bsize, const tkv__block_q8_K *y, int five) {
    float s = 0.0f, m = 0.0f;
    uint8_t sm[16];
    for (size_t i = 0; i < n / TKV__QK_K; i++, p += bsize) {
        const tkv__block_q4_K *b4 = (const tkv__block_q4_K *)p;
        tkv__quant_k4_unpack(b4->scales, sm);
        const __m256i sumi = k45_block_sumi(p, sm, &y[i], five);
        __m128i hs = _mm_add_epi32(_mm256_castsi256_si128(sumi), _mm256_extracti128_si256(sumi, 1));
        hs = _mm_add_epi32(hs, _mm_shuffle_epi32(hs, 0x4e));
        hs = _mm_add_epi32(hs, _mm_shuffle_epi32(hs, 0xb1));
        s = fmaf((float)_mm_cvtsi128_si32(hs), f16(b4->d) * y[i].d, s);
        m = fmaf((float)k_mins_dot(sm + 8, &y[i]), f16(b4->dmin) * y[i].d, m);
    }
    return s - m;
}

/* also the avx512 level's (compute/gemm.h): block-reduced sums leave no lanes for zmm to widen */
float tkv__dot_q4_K_avx2(size_t n, const void *w, const void *a) {
    return dot_k_reduced(n, w, sizeof(tkv__block_q4_K), a, 0);
}

float tkv__dot_q5_K_avx2(size_t n, const void *w, const void *a) {
    return dot_k_reduced(n, w, sizeof(tkv__block_q5_K), a, 1);
}

/* Q5_K in the reference's lane-wise order (kernels.h's vec_dot_ref). */
static float dot_q5_K_lanes(size_t n, const void *w, const void *a) {
    return dot_k(n, w, sizeof(tkv__block_q5_K), a, 1);
}

/* One Q6_K block's exact integer lanes: per group the products (q unsigned) times its scale, less 32 x the
   scales by the sums of 16. */
static inline __m256i q6k_lanes(const tkv__block_q6_K *x, const tkv__block_q8_K *y) {
    __m256i sumi = _mm256_setzero_si256();
    for (int h = 0; h < 2; h++) {
        __m256i q[4];
        tkv__q6k_half_values(x, h, q);
        for (int k = 0; k < 4; k++) {
            const int g = 8 * h + 2 * k; /* groups g (low lane) and g + 1 (high lane) */
            const __m256i p16 = _mm256_maddubs_epi16(q[k], LOAD256(y->qs + 128 * h + 32 * k));
            const __m256i sc = _mm256_set_m128i(_mm_set1_epi16(x->scales[g + 1]), _mm_set1_epi16(x->scales[g]));
            sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(p16, sc));
        }
    }
    /* the -32 offset: subtract 32 * sum_g scales[g] * bsums[g] */
    const __m256i sc16 = _mm256_cvtepi8_epi16(LOAD128(x->scales));
    const __m256i corr = _mm256_madd_epi16(LOAD256(Q8K_BSUMS(y)), sc16);
    return _mm256_sub_epi32(sumi, _mm256_slli_epi32(corr, 5));
}

/* Q6_K in the reference's lane-wise order (vec_dot_ref): one fma a block and lane, the lanes summed at the end. */
static float dot_q6_K_lanes(size_t n, const void *w, const void *a) {
    const tkv__block_q6_K *x = w;
    const tkv__block_q8_K *y = a;
    __m256 acc = _mm256_setzero_ps();
    for (size_t i = 0; i < n / TKV__QK_K; i++)
        acc = _mm256_fmadd_ps(_mm256_set1_ps(y[i].d * f16(x[i].d)), _mm256_cvtepi32_ps(q6k_lanes(&x[i], &y[i])), acc);
    return hsum_f32(acc);
}

/* Q6_K block-reduced (compute/x86/q6_k_dot.h): the avx2 lanes. */
float tkv__dot_q6_K_avx2(size_t n, const void *w, const void *a) {
    return tkv__q6k_dot_reduced(n, w, a, q6k_lanes);
}

/* ---- activation quantization ------------------------------------------------- */

/* Round half to even and convert: 4 x 8 floats to 32 bytes in element order. */
static inline __m256i pack_i32x32(__m256i i0, __m256i i1, __m256i i2, __m256i i3) {
    const __m256i a = _mm256_packs_epi32(i0, i1); /* lanes interleave: fixed by the permute */
    const __m256i b = _mm256_packs_epi32(i2, i3);
    const __m256i c = _mm256_packs_epi16(a, b);
    return _mm256_permutevar8x32_epi32(c, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

static inline __m256i round_i32(__m256 v) {
    return _mm256_cvtps_epi32(_mm256_round_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}

static void quant_q8_01(const float *x, void *y, size_t n, int with_sum) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    uint8_t *out = y;
    const size_t bsize = with_sum ? sizeof(tkv__block_q8_1) : sizeof(tkv__block_q8_0);
    for (size_t i = 0; i < n / TKV__QK; i++, x += TKV__QK, out += bsize) {
        __m256 v0 = _mm256_loadu_ps(x), v1 = _mm256_loadu_ps(x + 8);
        __m256 v2 = _mm256_loadu_ps(x + 16), v3 = _mm256_loadu_ps(x + 24);
        const __m256 m = _mm256_max_ps(_mm256_max_ps(_mm256_andnot_ps(sign, v0), _mm256_andnot_ps(sign, v1)),
                                       _mm256_max_ps(_mm256_andnot_ps(sign, v2), _mm256_andnot_ps(sign, v3)));
        const float amax = hmax_f32(m);
        const float d = amax / 127.0f;
        const __m256 id = _mm256_set1_ps(amax != 0.0f ? 127.0f / amax : 0.0f);
        const __m256i i0 = round_i32(_mm256_mul_ps(v0, id)), i1 = round_i32(_mm256_mul_ps(v1, id));
        const __m256i i2 = round_i32(_mm256_mul_ps(v2, id)), i3 = round_i32(_mm256_mul_ps(v3, id));
        const uint16_t d16 = (uint16_t)_cvtss_sh(d, _MM_FROUND_TO_NEAREST_INT);
        memcpy(out, &d16, 2);
        uint8_t *qs = out + 2;
        if (with_sum) {
            const int sum = hsum_i32(_mm256_add_epi32(_mm256_add_epi32(i0, i1), _mm256_add_epi32(i2, i3)));
            const uint16_t s16 = (uint16_t)_cvtss_sh(d * (float)sum, _MM_FROUND_TO_NEAREST_INT);
            memcpy(out + 2, &s16, 2);
            qs = out + 4;
        }
        _mm256_storeu_si256((__m256i *)(void *)qs, pack_i32x32(i0, i1, i2, i3));
    }
}

static void quant_q8_0(const float *x, void *y, size_t n) {
    quant_q8_01(x, y, n, 0);
}

static void quant_q8_1(const float *x, void *y, size_t n) {
    quant_q8_01(x, y, n, 1);
}

static void quant_q8_K(const float *x, void *y, size_t n) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    tkv__block_q8_K *b = y;
    for (size_t i = 0; i < n / TKV__QK_K; i++, x += TKV__QK_K) {
        __m256 m = _mm256_setzero_ps();
        for (int k = 0; k < 32; k++) m = _mm256_max_ps(m, _mm256_andnot_ps(sign, _mm256_loadu_ps(x + 8 * k)));
        const float amax = hmax_f32(m);
        uint8_t *qs = (uint8_t *)&b[i] + offsetof(tkv__block_q8_K, qs);
        uint8_t *bsums = (uint8_t *)&b[i] + offsetof(tkv__block_q8_K, bsums);
        if (amax == 0.0f) {
            b[i].d = 0.0f;
            memset(qs, 0, 256);
            memset(bsums, 0, 32);
            continue;
        }
        /* the first element of largest magnitude, as the scalar code picks it */
        float max = 0.0f;
        const __m256 am = _mm256_set1_ps(amax);
        for (int k = 0; k < 32; k++) {
            const int hit = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_andnot_ps(sign, _mm256_loadu_ps(x + 8 * k)), am, _CMP_EQ_OQ));
            if (hit) {
                max = x[8 * k + __builtin_ctz((unsigned)hit)];
                break;
            }
        }
        const float iscale = -127.0f / max;
        const __m256 is = _mm256_set1_ps(iscale);
        const __m256i lim = _mm256_set1_epi32(127);
        for (int k = 0; k < 8; k++) {
            const float *xk = x + 32 * k;
            __m256i r[4];
            for (int j = 0; j < 4; j++) r[j] = _mm256_min_epi32(round_i32(_mm256_mul_ps(_mm256_loadu_ps(xk + 8 * j), is)), lim);
            const __m256i q = pack_i32x32(r[0], r[1], r[2], r[3]);
            _mm256_storeu_si256((__m256i *)(void *)(qs + 32 * k), q);
            /* group sums: 2 groups of 16 per 32 bytes */
            __m256i s = _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8(1), q), _mm256_set1_epi16(1));
            s = _mm256_hadd_epi32(s, s);
            s = _mm256_hadd_epi32(s, s);
            const int16_t g0 = (int16_t)_mm256_extract_epi32(s, 0), g1 = (int16_t)_mm256_extract_epi32(s, 4);
            memcpy(bsums + 4 * k, &g0, 2);
            memcpy(bsums + 4 * k + 2, &g1, 2);
        }
        b[i].d = 1.0f / iscale;
    }
}

static void quant_f16(const float *x, void *y, size_t n) {
    uint8_t *out = y;
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(void *)(out + 2 * i), _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT));
    for (; i < n; i++) {
        const uint16_t h = tkv__quant_f32_to_f16(x[i]);
        memcpy(out + 2 * i, &h, 2);
    }
}

/* ---- element-wise ops ---------------------------------------------------------- */

/*
 * e^x for 8 floats: 2^k * e^r with k = round(x / ln 2), r = x - k ln 2 (ln 2
 * split in two for exactness), e^r by its degree-7 Taylor polynomial (error
 * < 1e-8 relative on |r| <= ln2/2). Within ~2 ulp of expf for x in [-87, 88];
 * below -87 gives 0 (expf gives tiny subnormals), above 88 gives e^88;
 * NaN stays NaN.
 */
static inline __m256 exp8(__m256 x) {
    __m256 t = _mm256_min_ps(_mm256_set1_ps(88.0f), x); /* this operand order lets NaN through */
    t = _mm256_max_ps(_mm256_set1_ps(-88.0f), t);
    const __m256 k = _mm256_round_ps(_mm256_mul_ps(t, _mm256_set1_ps(1.44269504088896341f)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(k, _mm256_set1_ps(0.693359375f), t);
    r = _mm256_fnmadd_ps(k, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.0f / 5040.0f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 720.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(k), _mm256_set1_epi32(127)), 23);
    const __m256 res = _mm256_mul_ps(p, _mm256_castsi256_ps(e));
    return _mm256_andnot_ps(_mm256_cmp_ps(x, _mm256_set1_ps(-87.0f), _CMP_LT_OQ), res);
}

static inline __m256 silu8(__m256 x) {
    const __m256 e = exp8(_mm256_sub_ps(_mm256_setzero_ps(), x));
    return _mm256_div_ps(x, _mm256_add_ps(_mm256_set1_ps(1.0f), e));
}

static inline double hsum_f64(__m256d v) {
    __m128d s = _mm_add_pd(_mm256_castpd256_pd128(v), _mm256_extractf128_pd(v, 1));
    s = _mm_add_sd(s, _mm_unpackhi_pd(s, s));
    return _mm_cvtsd_f64(s);
}

/*
 * The mean of the squares as the scalar version (and the reference) forms
 * it: squares in float, summed in double one after the other, the mean
 * rounded to float. That chain of dependent adds costs ~3 us a row of 2048
 * on one core, while the other threads wait at the step's barrier.
 *
 * So the same squares are summed here in 16 lanes, and the sequential sum's
 * mean is proved equal: any order of recursive summation of n terms lies
 * within gamma(n-1) * sum|t| of the exact sum (Higham, "Accuracy and
 * Stability of Numerical Algorithms", 4.2), so the lanes' sum and the
 * sequential one lie within (2n + 4) * 2^-53 * s of each other (the 4 covers
 * the rounding of the bounds themselves). Division by n and the cast to
 * float never decrease, so when both ends of that interval give the same
 * float, the sequential sum gives it too. Otherwise (a mean within ~n ulps
 * of double of a float's rounding boundary, about 1 row in 10^5; inf, NaN)
 * the sum is formed one term after the other.
 */
static float mean_sq(const float *x, size_t n) {
    __m256d acc[4] = {_mm256_setzero_pd(), _mm256_setzero_pd(), _mm256_setzero_pd(), _mm256_setzero_pd()};
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m256 a = _mm256_loadu_ps(x + i), b = _mm256_loadu_ps(x + i + 8);
        const __m256 a2 = _mm256_mul_ps(a, a), b2 = _mm256_mul_ps(b, b);
        acc[0] = _mm256_add_pd(acc[0], _mm256_cvtps_pd(_mm256_castps256_ps128(a2)));
        acc[1] = _mm256_add_pd(acc[1], _mm256_cvtps_pd(_mm256_extractf128_ps(a2, 1)));
        acc[2] = _mm256_add_pd(acc[2], _mm256_cvtps_pd(_mm256_castps256_ps128(b2)));
        acc[3] = _mm256_add_pd(acc[3], _mm256_cvtps_pd(_mm256_extractf128_ps(b2, 1)));
    }
    double s = hsum_f64(_mm256_add_pd(_mm256_add_pd(acc[0], acc[1]), _mm256_add_pd(acc[2], acc[3])));
    for (; i < n; i++) s += (double)(x[i] * x[i]);
    if (n < ((size_t)1 << 24)) { /* where (2n + 4) * 2^-53 stays a bound of gamma(n-1) */
        const double b = s * ((double)(2 * n + 4) * 0x1p-53);
        const float lo = (float)((s - b) / (double)n), hi = (float)((s + b) / (double)n);
        if (lo == hi) return lo; /* false for NaN, and for inf (inf - inf) */
    }
    double ss = 0.0;
    for (i = 0; i < n; i++) ss += (double)(x[i] * x[i]);
    return (float)(ss / (double)n);
}

static void rmsnorm(float *y, const float *x, const float *w, size_t n, float eps) {
    const float scale = 1.0f / sqrtf(mean_sq(x, n) + eps);
    const __m256 s = _mm256_set1_ps(scale);
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, _mm256_mul_ps(_mm256_mul_ps(_mm256_loadu_ps(x + i), s), _mm256_loadu_ps(w + i)));
    for (; i < n; i++) y[i] = (x[i] * scale) * w[i];
}

static void softmax(float *x, size_t n) {
    __m256 m = _mm256_set1_ps(-INFINITY);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) m = _mm256_max_ps(m, _mm256_loadu_ps(x + i));
    float max = hmax_f32(m);
    for (; i < n; i++) max = x[i] > max ? x[i] : max;
    const __m256 mv = _mm256_set1_ps(max);
    __m256d acc = _mm256_setzero_pd();
    for (i = 0; i + 8 <= n; i += 8) {
        const __m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(x + i), mv));
        _mm256_storeu_ps(x + i, e);
        acc = _mm256_add_pd(acc, _mm256_add_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(e)),
                                               _mm256_cvtps_pd(_mm256_extractf128_ps(e, 1))));
    }
    double sum = hsum_f64(acc);
    for (; i < n; i++) {
        x[i] = expf(x[i] - max);
        sum += x[i];
    }
    const float inv = (float)(1.0 / sum);
    const __m256 iv = _mm256_set1_ps(inv);
    for (i = 0; i + 8 <= n; i += 8) _mm256_storeu_ps(x + i, _mm256_mul_ps(_mm256_loadu_ps(x + i), iv));
    for (; i < n; i++) x[i] *= inv;
}

static void silu(float *y, const float *x, size_t n) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, silu8(_mm256_loadu_ps(x + i)));
    for (; i < n; i++) y[i] = x[i] / (1.0f + expf(-x[i]));
}

static void swiglu(float *y, const float *gate, const float *up, size_t n) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, _mm256_mul_ps(silu8(_mm256_loadu_ps(gate + i)), _mm256_loadu_ps(up + i)));
    for (; i < n; i++) y[i] = gate[i] / (1.0f + expf(-gate[i])) * up[i];
}

/*
 * 4 pairs at a time: with A = (a, a), B = (b, b) per pair and CS = (c, s),
 * P = B * (s, c) is (b s, b c) rounded, and fmaddsub(A, CS, P) gives
 * (a c - b s, a s + b c) fused: the scalar version's operations, lane by lane.
 */
static void rope_pairs(float *v, const float *cs, size_t n_pairs) {
    size_t i = 0;
    for (; i + 4 <= n_pairs; i += 4) {
        const __m256 x = _mm256_loadu_ps(v + 2 * i), r = _mm256_loadu_ps(cs + 2 * i);
        const __m256 a = _mm256_moveldup_ps(x), b = _mm256_movehdup_ps(x);
        const __m256 p = _mm256_mul_ps(b, _mm256_permute_ps(r, 0xb1)); /* (b s, b c) */
        _mm256_storeu_ps(v + 2 * i, _mm256_fmaddsub_ps(a, r, p));
    }
    tkv__kernel_rope_pairs_scalar(v + 2 * i, cs + 2 * i, n_pairs - i);
}

/* compute/x86/avx2/recurrent.c */
void tkv__delta_step_avx2(float *S, const float *q, const float *k, const float *v, float decay, float beta, float scale,
                         uint32_t dk, uint32_t dv, float *o);
void tkv__ssm_step_avx2(float *S, const float *x, const float *B, const float *C, float dt, float dA, uint32_t hd,
                       uint32_t ds, float *y);

const tkv__kernels tkv__kernel_avx2_part = {
    .level = TKV__KERNEL_AVX2,
    .name = "avx2",
    .vec_dot =
        {
            /* float rows in the reference's order (compute/x86/avx2/gemm_float.c) */
            [TKV_TYPE_F32] = tkv__dot_f32_ref_avx2,
            [TKV_TYPE_F16] = tkv__dot_f16_ref_avx2,
            [TKV_TYPE_BF16] = tkv__dot_bf16_ref_avx2,
            [TKV_TYPE_Q8_0] = tkv__dot_q8_0_avx2, /* block-reduced, as Q4_0 (gemm_q4_0_iq4_nl.c) */
            [TKV_TYPE_Q4_0] = tkv__dot_q4_0_avx2,
            [TKV_TYPE_Q4_1] = dot_q4_1,
            [TKV_TYPE_Q5_0] = dot_q5_0_reduced, /* block-reduced, as Q4_0 (gemm_q4_0_iq4_nl.c) */
            [TKV_TYPE_IQ4_NL] = tkv__dot_iq4_nl_avx2,
            [TKV_TYPE_MXFP4] = dot_mxfp4,
            [TKV_TYPE_IQ4_XS] = tkv__dot_iq4_xs_avx2,
            [TKV_TYPE_Q2_K] = tkv__dot_q2_K_avx2,
            [TKV_TYPE_Q3_K] = tkv__dot_q3_K_avx2,
            [TKV_TYPE_TQ1_0] = tkv__dot_tq1_0_avx2, /* compute/x86/avx512/gemm_tq1.c: its product there */
            [TKV_TYPE_TQ2_0] = dot_tq2_0,
            [TKV_TYPE_IQ2_XXS] = tkv__dot_iq2_xxs_avx2, /* compute/x86/avx2/gemm_iq2.c: its tiled product */
            [TKV_TYPE_IQ2_XS] = tkv__dot_iq2_xs_avx2, /* compute/x86/avx2/dot_iq2.c */
            [TKV_TYPE_IQ2_S] = tkv__dot_iq2_s_avx2, /* compute/x86/avx2/dot_iq2.c */
            [TKV_TYPE_IQ1_S] = tkv__dot_iq1_s_avx2, /* compute/x86/avx2/dot_iq1.c */
            [TKV_TYPE_IQ1_M] = tkv__dot_iq1_m_avx2,
            [TKV_TYPE_IQ3_XXS] = tkv__kernel_dot_iq3_xxs_avx2, /* compute/x86/avx2/dot_iq3.c */
            [TKV_TYPE_IQ3_S] = tkv__kernel_dot_iq3_s_avx2,
            [TKV_TYPE_Q5_1] = dot_q5_1,
            [TKV_TYPE_Q4_K] = tkv__dot_q4_K_avx2,
            [TKV_TYPE_Q5_K] = tkv__dot_q5_K_avx2,
            [TKV_TYPE_Q6_K] = tkv__dot_q6_K_avx2,
        },
    /* tiled products (compute/x86/avx2/gemm_q8_0_q4_q5_q6_k.c), bit for bit these vec_dots */
    .gemm =
        {
            [TKV_TYPE_Q8_0] = tkv__gemm_q8_0_avx2, /* compute/x86/avx2/gemm_q4_0_iq4_nl.c */
            [TKV_TYPE_Q4_0] = tkv__gemm_q4_0_avx2,
            [TKV_TYPE_Q4_1] = tkv__gemm_q4_1_avx2, /* compute/x86/avx2/gemm_q4_1_q5.c */
            [TKV_TYPE_Q5_0] = tkv__gemm_q5_0_avx2, /* compute/x86/avx2/gemm_q4_0_iq4_nl.c */
            [TKV_TYPE_Q5_1] = tkv__gemm_q5_1_avx2,
            [TKV_TYPE_Q2_K] = tkv__gemm_q2_K_avx2, /* compute/x86/avx2/gemm_q2_q3_k.c */
            [TKV_TYPE_Q3_K] = tkv__gemm_q3_K_avx2, /* compute/x86/avx2/gemm_q2_q3_k.c */
            [TKV_TYPE_Q4_K] = tkv__gemm_q4_K_avx2,
            [TKV_TYPE_Q5_K] = tkv__gemm_q5_K_avx2,
            [TKV_TYPE_Q6_K] = tkv__gemm_q6_K_avx2, /* compute/x86/avx2/gemm_q6_k.c */
            [TKV_TYPE_IQ4_NL] = tkv__gemm_iq4_nl_avx2,
            [TKV_TYPE_IQ4_XS] = tkv__gemm_iq4_xs_avx2, /* compute/x86/avx2/gemm_iq4_xs.c */
            [TKV_TYPE_IQ1_S] = tkv__gemm_iq1_s_avx2, /* compute/x86/avx2/dot_iq1.c */
            [TKV_TYPE_IQ1_M] = tkv__gemm_iq1_m_avx2,
            [TKV_TYPE_IQ3_XXS] = tkv__gemm_iq3_xxs_avx2, /* compute/x86/avx2/gemm_iq3.c */
            [TKV_TYPE_IQ3_S] = tkv__gemm_iq3_s_avx2,
            [TKV_TYPE_IQ2_XXS] = tkv__gemm_iq2_xxs_avx2, /* compute/x86/avx2/gemm_iq2.c */
            [TKV_TYPE_IQ2_XS] = tkv__gemm_iq2_xs_avx2,
            [TKV_TYPE_IQ2_S] = tkv__gemm_iq2_s_avx2,
            [TKV_TYPE_TQ1_0] = gemm_tq1_0,
        },
    .packed =
        {
            [TKV_TYPE_Q4_0] = tkv__packed_q4_0_avx2,
            [TKV_TYPE_IQ4_NL] = tkv__packed_iq4_nl_avx2,
            [TKV_TYPE_Q8_0] = tkv__packed_q8_0_avx2, /* compute/x86/avx2/gemm_q4_0_iq4_nl.c */
            [TKV_TYPE_Q5_0] = tkv__packed_q5_0_avx2,
            [TKV_TYPE_Q4_K] = tkv__packed_q4_K_avx2,
            [TKV_TYPE_Q5_K] = tkv__packed_q5_K_avx2,
            [TKV_TYPE_IQ4_XS] = tkv__packed_iq4_xs_avx2,
            [TKV_TYPE_Q2_K] = tkv__packed_q2_K_avx2,
            [TKV_TYPE_Q3_K] = tkv__packed_q3_K_avx2,
            [TKV_TYPE_Q6_K] = tkv__packed_q6_K_avx2,
            [TKV_TYPE_IQ2_XXS] = tkv__packed_iq2_avx2, /* compute/x86/avx2/packed_planes.c */
            [TKV_TYPE_IQ2_XS] = tkv__packed_iq2_avx2,
            [TKV_TYPE_IQ2_S] = tkv__packed_iq2_avx2,
            [TKV_TYPE_IQ3_XXS] = tkv__packed_iq3_xxs_avx2,
            [TKV_TYPE_IQ3_S] = tkv__packed_iq3_s_avx2,
            [TKV_TYPE_IQ1_S] = tkv__packed_iq1_s_avx2,
            [TKV_TYPE_IQ1_M] = tkv__packed_iq1_m_avx2,
        },
    .lanes =
        {
            [TKV_TYPE_F32] = tkv__lanes_f32_avx2,
            [TKV_TYPE_F16] = tkv__lanes_f16_avx2,
            [TKV_TYPE_BF16] = tkv__lanes_bf16_pairs_avx2, /* gemm_bf16_pairs.c */
        },
    .lanes_ref = {[TKV_TYPE_BF16] = tkv__lanes_bf16_avx2},
    .lanes_kn = {[TKV_TYPE_F32] = 16, [TKV_TYPE_F16] = 16, [TKV_TYPE_BF16] = 16},
    .vec_dot_ref = {[TKV_TYPE_Q5_K] = dot_q5_K_lanes, [TKV_TYPE_Q2_K] = tkv__dot_q2_K_lanes_avx2,
                    [TKV_TYPE_Q3_K] = tkv__dot_q3_K_lanes_avx2, [TKV_TYPE_Q8_0] = dot_q8_0,
                    [TKV_TYPE_Q5_0] = dot_q5_0, [TKV_TYPE_IQ4_XS] = tkv__dot_iq4_xs_lanes_avx2,
                    [TKV_TYPE_Q6_K] = dot_q6_K_lanes},
    .gemm_ref = {[TKV_TYPE_Q5_K] = tkv__gemm_q5_K_lanes_avx2, [TKV_TYPE_Q2_K] = tkv__gemm_q2_K_lanes_avx2,
                 [TKV_TYPE_Q3_K] = tkv__gemm_q3_K_lanes_avx2, [TKV_TYPE_Q8_0] = tkv__gemm_q8_0_lanes_avx2,
                 [TKV_TYPE_Q5_0] = tkv__gemm_q5_0_lanes_avx2, [TKV_TYPE_IQ4_XS] = tkv__gemm_iq4_xs_lanes_avx2,
                 [TKV_TYPE_Q6_K] = tkv__gemm_q6_K_lanes_avx2},
    .quantize =
        {
            [TKV_TYPE_F16] = quant_f16,
            [TKV_TYPE_Q8_0] = quant_q8_0,
            [TKV_TYPE_Q8_1] = quant_q8_1,
            [TKV_TYPE_Q8_K] = quant_q8_K,
        },
    .rmsnorm = rmsnorm,
    .softmax = softmax,
    .silu = silu,
    .swiglu = swiglu,
    .rope_pairs = rope_pairs,
    .delta_step = tkv__delta_step_avx2,
    .ssm_step = tkv__ssm_step_avx2,
};

#else /* not an x86-64 build with AVX2 flags: an empty part, never selected */

const tkv__kernels tkv__kernel_avx2_part = {.level = TKV__KERNEL_AVX2, .name = NULL};

#endif
