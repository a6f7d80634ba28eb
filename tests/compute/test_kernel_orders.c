/*
 * test_kernel_orders.c — the block-reduced dot products of every level bit
 * for bit against models written from the formats (compute/quant/quant.h's
 * orders), the TQ types against a model of the reference's lanes, and the
 * reference-order entries (vec_dot_ref, gemm_ref) against their models.
 * The dot products against their scalar twins, the tiled and packed
 * products and the rest are test_kernels.c's.
 *
 * Levels the CPU lacks are skipped; the scalar table is always there.
 */
#include "testutil.h"
#include "kernel_data.h"

#include "compute/kernels.h"
#include "compute/quant/quant.h"
#include "compute/quant/repack.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/*
 * TQ1_0 and TQ2_0 at the SIMD levels, bit for bit against a model of the
 * reference's x86 kernels (ggml_vec_dot_tq{1,2}_0_q8_K, AVX2 path) written
 * from the formats and that algorithm, not from tokenkv's kernels:
 *   - element e's quant q (0..2; TQ2_0's 2 bits may also hold 3): TQ2_0
 *     byte 32 (e / 128) + e % 32, bits 2 ((e % 128) / 32); TQ1_0 the base-3
 *     digit l of a byte b, ((uint8_t)(b 3^l) 3) >> 8, of qs[m] for e =
 *     32 l + m (e < 160), qs[32 + m] for e = 160 + 16 l + m (e < 240),
 *     qh[j] for e = 240 + 4 l + j;
 *   - per super-block 8 int32 lanes: lane L = the sum of q a over the
 *     elements whose position within their 32-element chunk is 4L..4L+3,
 *     less the activations' sum over elements 32L..32L+31 (bsums 2L, 2L+1);
 *   - lane L of the float accumulator += lane * (d_a d_w) as ONE fused
 *     multiply-add: the reference's source writes a product and an add, but
 *     GCC in its default GNU C mode contracts them (its -march=native build
 *     has vfmadd231ps there);
 *   - the 8 lanes summed as (l + l4) then (0 + 2) + (1 + 3).
 * One block per row cannot tell a fused from an unfused add (the first adds
 * to zero); rows of 2+ blocks can, which is where the models (n_embd
 * 512) left the reference by 1-2.6% per logits row.
 */
static int tq_quant_ref(tkv_type t, const uint8_t *blk, int e) {
    if (t == TKV_TYPE_TQ2_0) return (blk[32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3;
    int byte, l;
    if (e < 160) byte = blk[e % 32], l = e / 32;
    else if (e < 240) byte = blk[32 + (e - 160) % 16], l = (e - 160) / 16;
    else byte = blk[48 + (e - 240) % 4], l = (e - 240) / 4;
    static const uint8_t pow3[5] = {1, 3, 9, 27, 81};
    return ((uint8_t)(byte * pow3[l]) * 3) >> 8;
}

static float tq_dot_ref(tkv_type t, size_t n, const uint8_t *w, const tkv__block_q8_K *y) {
    const size_t bs = t == TKV_TYPE_TQ2_0 ? 66 : 54;
    float acc[8] = {0};
    for (size_t i = 0; i < n / 256; i++) {
        const uint8_t *blk = w + i * bs;
        uint16_t dh;
        memcpy(&dh, blk + bs - 2, 2);
        const float d = y[i].d * tkv__quant_f16_to_f32(dh);
        for (int L = 0; L < 8; L++) {
            int s = 0;
            for (int m = 0; m < 8; m++)
                for (int b = 4 * L; b < 4 * L + 4; b++) s += tq_quant_ref(t, blk, 32 * m + b) * y[i].qs[32 * m + b];
            for (int e = 32 * L; e < 32 * L + 32; e++) s -= y[i].qs[e];
            acc[L] = fmaf((float)s, d, acc[L]);
        }
    }
    float h[4];
    for (int j = 0; j < 4; j++) h[j] = acc[j] + acc[j + 4];
    return (h[0] + h[2]) + (h[1] + h[3]);
}

static void test_tq_reference_lanes(void **state) {
    (void)state;
    const tkv__kernels *sc = tkv__kernel_table(TKV__KERNEL_SCALAR);
    const size_t lens[] = {256, 512, 768, 1024, 2048, 4096};
    const tkv_type types[] = {TKV_TYPE_TQ1_0, TKV_TYPE_TQ2_0};
    int levels = 0;
    for (int l = 1; l < TKV__KERNEL_LEVELS; l++) {
        const tkv__kernels *simd = tkv__kernel_table((tkv__kernel_level)l);
        if (!simd) continue;
        levels++;
        for (size_t ti = 0; ti < 2; ti++) {
            const tkv_type t = types[ti];
            for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++) {
                const size_t n = lens[li];
                uint8_t *w = malloc(tkv__quant_row_size(t, n));
                tkv__block_q8_K *a = malloc(tkv__quant_row_size(TKV_TYPE_Q8_K, n));
                float *x = malloc(n * sizeof(float));
                assert_true(w && a && x);
                for (int rep = 0; rep < 64; rep++) {
                    rnd_weights(t, w, n);
                    rnd_acts(x, n);
                    sc->quantize[TKV_TYPE_Q8_K](x, a, n);
                    const float want = tq_dot_ref(t, n, w, a), got = simd->vec_dot[t](n, w, a);
                    if (memcmp(&want, &got, sizeof got) != 0)
                        fail_msg("%s n=%zu %s rep %d: %.9g, the reference's lanes %.9g: not bit for bit",
                                 tkv_type_name(t), n, simd->name, rep, (double)got, (double)want);
                }
                free(w);
                free(a);
                free(x);
            }
        }
    }
    if (!levels) TU_SKIP();
}

/*
 * Q4_0, IQ4_NL and MXFP4 in the reference's order for its repacked rows
 * (ggml-cpu's x86 gemv/gemm over 8-row interleaved blocks, the same per
 * output for one token and for groups of four), and Q8_0 in the same
 * block-reduced order (tokenkv's default: compute/quant/quant.h): per block
 * the exact integer sum of the 32 weight values times the activation
 * quants, then acc = fmaf((float)sum, d_w * fp16(d_a), acc) from +0,
 * blocks in order. Written here from the block formats alone: a scale
 * (Q4_0, IQ4_NL, Q8_0: an fp16 d; MXFP4: an exponent byte e, d = 2^(e -
 * 128), the E2M1 values being doubled), then 16 bytes whose low nibbles are
 * elements 0..15 and high nibbles 16..31 (Q8_0: 32 signed bytes, element e
 * at byte e); Q4_0's value is the nibble less 8, the others' their GGUF
 * codebook entry. Q5_0 (the avx2 level's order alone): an fp16 d, 4 bytes
 * whose bit e is element e's fifth bit, then Q4_0's 16 bytes of nibbles; its
 * value (nibble + 16 fifth bit) less 16.
 */
static float b4_dot_ref(tkv_type t, size_t n, const uint8_t *w, const uint8_t *a) {
    static const int iq4nl_book[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
    static const int mxfp4_book[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
    const size_t bs = t == TKV_TYPE_MXFP4 ? 17 : t == TKV_TYPE_Q8_0 ? 34 : t == TKV_TYPE_Q5_0 ? 22 : 18;
    float acc = 0.0f;
    for (size_t i = 0; i < n / 32; i++) {
        const uint8_t *blk = w + bs * i, *ab = a + 34 * i;
        const uint8_t *qs = blk + (t == TKV_TYPE_MXFP4 ? 1 : t == TKV_TYPE_Q5_0 ? 6 : 2);
        const uint32_t qh = (uint32_t)blk[2] | (uint32_t)blk[3] << 8 | (uint32_t)blk[4] << 16 | (uint32_t)blk[5] << 24;
        uint16_t dw, da;
        memcpy(&dw, blk, 2);
        memcpy(&da, ab, 2);
        const float d = t == TKV_TYPE_MXFP4 ? (float)ldexp(1.0, blk[0] - 128) : tkv__quant_f16_to_f32(dw);
        int s = 0;
        for (int e = 0; e < 32; e++) {
            const int nib = e < 16 ? qs[e] & 0x0f : qs[e - 16] >> 4;
            const int v = t == TKV_TYPE_Q8_0   ? (int8_t)qs[e]
                          : t == TKV_TYPE_Q4_0 ? nib - 8
                          : t == TKV_TYPE_Q5_0 ? (nib | (int)((qh >> e) & 1) << 4) - 16
                          : t == TKV_TYPE_IQ4_NL ? iq4nl_book[nib]
                                                 : mxfp4_book[nib];
            s += v * (int8_t)ab[2 + e];
        }
        acc = fmaf((float)s, d * tkv__quant_f16_to_f32(da), acc);
    }
    return acc;
}

/*
 * Q4_K and Q5_K in the reference's order for its repacked rows (ggml-cpu's
 * x86 gemv/gemm over 8-row interleaved Q4_K blocks; its ARM ones for Q5_K,
 * in the same order): per superblock of 256 the
 * exact integer sums, the scales' sum_g sc_g sum(q a) and the mins'
 * sum_g mn_g sum(a) over group g's 32 elements, then
 * acc = fmaf(sums, d_w * d_a, acc) and accm = fmaf(summ, dmin_w * d_a, accm)
 * from +0, superblocks in order; the result acc - accm. Written here from
 * the formats alone: the weight block is fp16 d, fp16 dmin, 12 bytes of
 * 6-bit scales and mins (bytes 0-3: scales 0-3 low 6 bits, their top 2
 * bits the high bits of scales 4-7; bytes 4-7 likewise for mins 0-3 and
 * mins 4-7; bytes 8-11: low nibble scale 4 + j's low 4 bits, high nibble
 * min 4 + j's), then (Q5_K) 32 bytes of fifth bits, bit 2c of byte l for
 * element 64c + l and bit 2c + 1 for 64c + 32 + l, then 128 bytes whose
 * byte 32c + l holds element 64c + l in its low nibble and 64c + 32 + l in
 * its high one; the activation block a
 * float d and 256 int8 quants (its 16 bsums are not read: the sums are
 * taken from the quants).
 */
static float k45_dot_ref(size_t n, const uint8_t *w, const uint8_t *a, int five) {
    float acc = 0.0f, accm = 0.0f;
    for (size_t i = 0; i < n / 256; i++) {
        const uint8_t *blk = w + (five ? 176 : 144) * i, *sc12 = blk + 4, *qh = blk + 16, *qs = blk + (five ? 48 : 16);
        const uint8_t *ab = a + 292 * i;
        uint16_t dw, dmw;
        float da;
        memcpy(&dw, blk, 2);
        memcpy(&dmw, blk + 2, 2);
        memcpy(&da, ab, 4);
        const int8_t *aq = (const int8_t *)(ab + 4);
        int sumi = 0, summ = 0;
        for (int g = 0; g < 8; g++) {
            const int sc = g < 4 ? sc12[g] & 63 : (sc12[g + 4] & 15) | ((sc12[g - 4] >> 6) << 4);
            const int mn = g < 4 ? sc12[g + 4] & 63 : (sc12[g + 4] >> 4) | ((sc12[g] >> 6) << 4);
            int sq = 0, sa = 0;
            for (int l = 0; l < 32; l++) {
                const int e = 64 * (g / 2) + 32 * (g % 2) + l, byte = qs[32 * (g / 2) + l];
                const int high = five ? (qh[l] >> g) & 1 : 0; /* bit 2c (+ 1 for the high nibbles), g = 2c (+ 1) */
                sq += ((g % 2 ? byte >> 4 : byte & 15) + 16 * high) * aq[e];
                sa += aq[e];
            }
            sumi += sc * sq;
            summ += mn * sa;
        }
        acc = fmaf((float)sumi, tkv__quant_f16_to_f32(dw) * da, acc);
        accm = fmaf((float)summ, tkv__quant_f16_to_f32(dmw) * da, accm);
    }
    return acc - accm;
}

/*
 * Q2_K in the reference's order for its repacked rows (ggml-cpu's x86 gemv/gemm
 * over 8-row interleaved Q2_K blocks, which it takes on CPUs with AVX-512):
 * as Q4_K's above over 16 sub-blocks of 16, the scales' sum_b sc_b sum(q a)
 * and the mins' sum_b mn_b sum(a). Written here from the format alone: the
 * weight block is 16 bytes of scales (sub-block b: scale in the low nibble of
 * byte b, min in the high one), 64 bytes whose byte 32h + l holds element
 * 128h + 32s + l in bits 2s, 2s + 1 (s < 4), then fp16 d and fp16 dmin.
 */
static float q2k_dot_ref(size_t n, const uint8_t *w, const uint8_t *a) {
    float acc = 0.0f, accm = 0.0f;
    for (size_t i = 0; i < n / 256; i++) {
        const uint8_t *blk = w + 84 * i, *sc = blk, *qs = blk + 16;
        const uint8_t *ab = a + 292 * i;
        uint16_t dw, dmw;
        float da;
        memcpy(&dw, blk + 80, 2);
        memcpy(&dmw, blk + 82, 2);
        memcpy(&da, ab, 4);
        const int8_t *aq = (const int8_t *)(ab + 4);
        int sumi = 0, summ = 0;
        for (int b = 0; b < 16; b++) {
            int sq = 0, sa = 0;
            for (int l = 0; l < 16; l++) {
                const int e = 16 * b + l, q = (qs[32 * (e / 128) + e % 32] >> (2 * (e % 128 / 32))) & 3;
                sq += q * aq[e];
                sa += aq[e];
            }
            sumi += (sc[b] & 15) * sq;
            summ += (sc[b] >> 4) * sa;
        }
        acc = fmaf((float)sumi, tkv__quant_f16_to_f32(dw) * da, acc);
        accm = fmaf((float)summ, tkv__quant_f16_to_f32(dmw) * da, accm);
    }
    return acc - accm;
}

/*
 * Q3_K in tokenkv's block-reduced order (compute/quant/quant.h; the reference
 * sums it lane-wise): per superblock the exact sum_b (sc_b - 32) sum(q a),
 * then acc = fmaf(sum, d_w * d_a, acc) from +0. Written here from the format
 * alone: 32 bytes of high bits (element 128h + 32s + l: bit 4h + s of byte
 * l; q is the two low bits, less 4 where that bit is clear), 64 bytes of low
 * bits as Q2_K's, 12 bytes of 6-bit scales (sub-block b: low 4 bits the
 * nibble b / 8 of byte b % 8, high 2 bits bits 2 (b / 4) of byte 8 + b % 4),
 * then fp16 d.
 */
static float q3k_dot_ref(size_t n, const uint8_t *w, const uint8_t *a) {
    float acc = 0.0f;
    for (size_t i = 0; i < n / 256; i++) {
        const uint8_t *blk = w + 110 * i, *hm = blk, *qs = blk + 32, *sc = blk + 96;
        const uint8_t *ab = a + 292 * i;
        uint16_t dw;
        float da;
        memcpy(&dw, blk + 108, 2);
        memcpy(&da, ab, 4);
        const int8_t *aq = (const int8_t *)(ab + 4);
        int sumi = 0;
        for (int b = 0; b < 16; b++) {
            const int scale = (((sc[b % 8] >> (4 * (b / 8))) & 15) | (((sc[8 + b % 4] >> (2 * (b / 4))) & 3) << 4)) - 32;
            int sq = 0;
            for (int l = 0; l < 16; l++) {
                const int e = 16 * b + l, h = e / 128, sh = e % 128 / 32, pos = e % 32;
                const int q = ((qs[32 * h + pos] >> (2 * sh)) & 3) - ((hm[pos] >> (4 * h + sh)) & 1 ? 0 : 4);
                sq += q * aq[e];
            }
            sumi += scale * sq;
        }
        acc = fmaf((float)sumi, tkv__quant_f16_to_f32(dw) * da, acc);
    }
    return acc;
}

/*
 * IQ4_XS in tokenkv's block-reduced order (compute/quant/quant.h; the
 * reference sums it lane-wise): per superblock the exact sum_b (ls_b - 32)
 * sum(v a), then acc = fmaf(sum, d_w * d_a, acc) from +0. Written here from
 * the format alone: fp16 d, 2 bytes of the scales' high bits (sub-block b:
 * bits 2b, 2b + 1), 4 bytes of their low bits (sub-block b: nibble b % 2 of
 * byte b / 2), then 16 bytes of nibbles a sub-block, as an IQ4_NL block's
 * (element e < 16 the low nibble of byte e, e >= 16 the high one of e - 16),
 * each the index of its value in the GGUF codebook.
 */
static float iq4xs_dot_ref(size_t n, const uint8_t *w, const uint8_t *a) {
    static const int book[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
    float acc = 0.0f;
    for (size_t i = 0; i < n / 256; i++) {
        const uint8_t *blk = w + 136 * i, *qs = blk + 8, *ab = a + 292 * i;
        uint16_t dw, sh;
        float da;
        memcpy(&dw, blk, 2);
        memcpy(&sh, blk + 2, 2);
        memcpy(&da, ab, 4);
        const int8_t *aq = (const int8_t *)(ab + 4);
        int sumi = 0;
        for (int b = 0; b < 8; b++) {
            const int ls = ((blk[4 + b / 2] >> (4 * (b % 2))) & 15) | (((sh >> (2 * b)) & 3) << 4);
            int sq = 0;
            for (int e = 0; e < 32; e++) {
                const int nib = e < 16 ? qs[16 * b + e] & 15 : qs[16 * b + e - 16] >> 4;
                sq += book[nib] * aq[32 * b + e];
            }
            sumi += (ls - 32) * sq;
        }
        acc = fmaf((float)sumi, tkv__quant_f16_to_f32(dw) * da, acc);
    }
    return acc;
}

/*
 * Q6_K in tokenkv's block-reduced order (the reference sums it lane-wise):
 * per superblock the exact sum_g scale_g sum((q - 32) a) over its 16
 * sub-blocks of 16, then acc = fmaf(sum, d_w * d_a, acc) from +0. Written
 * here from the format alone: 128 bytes of low bits, 64 of high bits, 16
 * signed scales, fp16 d; element 128h + 32s + l (s < 4, l < 32) takes the
 * low nibble (s even) or high nibble (s odd) of ql[64h + 32 (s % 2) + l]
 * and bits 2s, 2s + 1 of qh[32h + l] as its bits 4, 5.
 */
static float q6k_dot_ref(size_t n, const uint8_t *w, const uint8_t *a) {
    float acc = 0.0f;
    for (size_t i = 0; i < n / 256; i++) {
        const uint8_t *blk = w + 210 * i, *ql = blk, *qh = blk + 128, *ab = a + 292 * i;
        const int8_t *sc = (const int8_t *)(blk + 192);
        uint16_t dw;
        float da;
        memcpy(&dw, blk + 208, 2);
        memcpy(&da, ab, 4);
        const int8_t *aq = (const int8_t *)(ab + 4);
        int sumi = 0;
        for (int g = 0; g < 16; g++) {
            int sq = 0;
            for (int l16 = 0; l16 < 16; l16++) {
                const int e = 16 * g + l16, h = e / 128, s = e % 128 / 32, l = e % 32;
                const int lo = (ql[64 * h + 32 * (s % 2) + l] >> (4 * (s / 2))) & 15;
                const int q = lo | ((qh[32 * h + l] >> (2 * s)) & 3) << 4;
                sq += (q - 32) * aq[e];
            }
            sumi += sc[g] * sq;
        }
        acc = fmaf((float)sumi, tkv__quant_f16_to_f32(dw) * da, acc);
    }
    return acc;
}

static float reduced_dot_ref(tkv_type t, size_t n, const uint8_t *w, const uint8_t *a) {
    if (t == TKV_TYPE_Q6_K) return q6k_dot_ref(n, w, a);
    if (t == TKV_TYPE_IQ4_XS) return iq4xs_dot_ref(n, w, a);
    if (t == TKV_TYPE_Q2_K) return q2k_dot_ref(n, w, a);
    if (t == TKV_TYPE_Q3_K) return q3k_dot_ref(n, w, a);
    return t == TKV_TYPE_Q4_K || t == TKV_TYPE_Q5_K ? k45_dot_ref(n, w, a, t == TKV_TYPE_Q5_K) : b4_dot_ref(t, n, w, a);
}

/*
 * Every level's vec_dot, gemm, gemv and packed product (where it has one)
 * of Q4_0, IQ4_NL, MXFP4 and Q8_0 rows of 1 to 16 blocks (and Q5_0's at the avx2 level, the one whose order
 * it is) and Q4_K, Q5_K, Q2_K, Q3_K, IQ4_XS and Q6_K rows of 1 to 33
 * against those models, bit for bit (from 2 blocks on, the lane-wise order
 * IQ4_NL, MXFP4 and Q4_K had before is an ulp off in most outputs): 19 rows
 * (a whole packed group and a partial one), 1 to 9 tokens and 37.
 */
static void test_b4_reference_order(void **state) {
    (void)state;
    const tkv_type types[] = {TKV_TYPE_Q4_0, TKV_TYPE_IQ4_NL, TKV_TYPE_MXFP4, TKV_TYPE_Q8_0, TKV_TYPE_Q4_K,
                              TKV_TYPE_Q5_K, TKV_TYPE_Q2_K, TKV_TYPE_Q3_K, TKV_TYPE_IQ4_XS, TKV_TYPE_Q6_K,
                              TKV_TYPE_Q5_0};
    const size_t n_rows = 19, ldy = 19, tok_counts[] = {1, 2, 3, 4, 5, 8, 9, 37};
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        const tkv_type t = types[ti], at = tkv__quant_vec_dot_type(t), be = tkv__quant_block_elems(t);
        /* Q4_K: past 16 superblocks the product over the file's rows carries its sums across panels */
        static const size_t k_counts[] = {1, 2, 3, 5, 8, 17, 33};
        const size_t n_counts = be > 32 ? sizeof k_counts / sizeof k_counts[0] : 16;
        for (size_t ci0 = 0; ci0 < n_counts; ci0++) {
            const size_t nb = be > 32 ? k_counts[ci0] : ci0 + 1;
            const size_t n = be * nb, wrs = tkv__quant_row_size(t, n), xrs = tkv__quant_row_size(at, n);
            uint8_t *w = malloc(n_rows * wrs), *xq = malloc(37 * xrs);
            uint8_t *pk = aligned_alloc(64, (tkv__pack_bytes(t, n, n_rows) + 64) / 64 * 64);
            float *x = malloc(n * sizeof(float)), *y = malloc(37 * ldy * sizeof(float));
            float *want = malloc(37 * n_rows * sizeof(float));
            assert_true(w && xq && pk && x && y && want);
            for (size_t r = 0; r < n_rows; r++) rnd_weights(t, w + r * wrs, n);
            for (size_t tok = 0; tok < 37; tok++) {
                rnd_acts(x, n);
                tkv__quant_quantize_row(at, x, xq + tok * xrs, n);
                for (size_t r = 0; r < n_rows; r++)
                    want[tok * n_rows + r] = reduced_dot_ref(t, n, w + r * wrs, xq + tok * xrs);
            }
            if (tkv__pack_supported(t)) tkv__pack_rows(t, w, n, n_rows, pk);
            for (int l = 0; l < TKV__KERNEL_LEVELS; l++) {
                const tkv__kernels *k = tkv__kernel_table((tkv__kernel_level)l);
                if (!k || (t == TKV_TYPE_Q5_0 && l != TKV__KERNEL_AVX2)) continue; /* Q5_0's order: avx2's alone */
                for (size_t r = 0; r < n_rows; r++)
                    for (size_t tok = 0; tok < 37; tok += 6) {
                        const float got = k->vec_dot[t](n, w + r * wrs, xq + tok * xrs), ref = want[tok * n_rows + r];
                        if (memcmp(&got, &ref, sizeof got) != 0)
                            fail_msg("%s vec_dot %s n=%zu row %zu token %zu: %.9g, the reference's order %.9g",
                                     k->name, tkv_type_name(t), n, r, tok, (double)got, (double)ref);
                    }
                const struct {
                    const char *name;
                    tkv__gemm_fn fn;
                    const uint8_t *w;
                    size_t stride;
                } entries[] = {{"gemm", k->gemm[t], w, wrs},
                               {"gemv", k->gemv[t], w, wrs},
                               {"packed", k->packed[t], pk, tkv__pack_stride(t, n)}};
                for (size_t ei = 0; ei < 3; ei++) {
                    if (!entries[ei].fn) continue;
                    for (size_t ci = 0; ci < sizeof tok_counts / sizeof tok_counts[0]; ci++) {
                        const size_t n_tok = tok_counts[ci];
                        if (ei == 1 && n_tok > TKV__GEMV_MAX_TOK) continue;
                        entries[ei].fn(n, entries[ei].w, entries[ei].stride, n_rows, xq, xrs, n_tok, y, ldy);
                        for (size_t tok = 0; tok < n_tok; tok++)
                            for (size_t r = 0; r < n_rows; r++) {
                                const float got = y[tok * ldy + r], ref = want[tok * n_rows + r];
                                if (memcmp(&got, &ref, sizeof got) != 0)
                                    fail_msg("%s %s %s n=%zu tokens=%zu row %zu token %zu: %.9g, the reference's "
                                             "order %.9g",
                                             k->name, entries[ei].name, tkv_type_name(t), n, n_tok, r, tok,
                                             (double)got, (double)ref);
                            }
                    }
                }
            }
            free(w), free(xq), free(pk), free(x), free(y), free(want);
        }
    }
}

/*
 * The reference-order entries (kernels.h's vec_dot_ref, gemm_ref: Q5_K, Q2_K,
 * Q3_K, IQ4_XS, Q6_K, Q8_0 and Q5_0 summed lane-wise, as the reference's plain x86 vec_dots; Q2_K's at
 * avx512 block-reduced, as it repacks there; the scalar Q8_0 and Q5_0 as its plain C): at every level that
 * has them, the gemm bit for bit its level's vec_dot_ref (1 to 9 tokens and
 * 37, 19 rows, 1 to 17 superblocks), and each vec_dot_ref within the
 * float-order bound of test_dot's against the scalar one and against a
 * double-precision dot of the dequantized rows.
 */
static void test_ref_entries(void **state) {
    (void)state;
    const tkv__kernels *sc = tkv__kernel_table(TKV__KERNEL_SCALAR);
    int seen = 0;
    for (int ti = 0; ti < TKV_TYPE_COUNT; ti++) {
        const tkv_type t = (tkv_type)ti;
        if (!sc->vec_dot_ref[t]) continue;
        seen++;
        const tkv_type at = tkv__quant_vec_dot_type(t);
        const size_t n_rows = 19, ldy = 19, tok_counts[] = {1, 2, 3, 4, 5, 9, 37}, nbs[] = {1, 3, 17};
        for (size_t bi = 0; bi < 3; bi++) {
            const size_t n = tkv__quant_block_elems(t) * nbs[bi], wrs = tkv__quant_row_size(t, n),
                         xrs = tkv__quant_row_size(at, n);
            uint8_t *w = malloc(n_rows * wrs), *xq = malloc(37 * xrs);
            float *x = malloc(n * sizeof(float)), *y = malloc(37 * ldy * sizeof(float)), *wf = malloc(n * sizeof(float)),
                  *af = malloc(n * sizeof(float));
            assert_true(w && xq && x && y && wf && af);
            for (size_t r = 0; r < n_rows; r++) rnd_weights(t, w + r * wrs, n);
            for (size_t tok = 0; tok < 37; tok++) {
                rnd_acts(x, n);
                tkv__quant_quantize_row(at, x, xq + tok * xrs, n);
            }
            for (int l = 0; l < TKV__KERNEL_LEVELS; l++) {
                const tkv__kernels *k = tkv__kernel_table((tkv__kernel_level)l);
                if (!k) continue;
                assert_non_null(k->vec_dot_ref[t]);
                for (size_t r = 0; r < n_rows; r += 5) {
                    tkv__quant_dequantize_row(t, w + r * wrs, wf, n);
                    tkv__quant_dequantize_row(at, xq, af, n);
                    double mag = 0, ref = 0;
                    for (size_t i = 0; i < n; i++) mag += fabs(wf[i]) * fabs(af[i]), ref += (double)wf[i] * af[i];
                    const double tol = 4.0 * (double)(nbs[bi] + 4) * 0x1p-24 * mag * 8 + 1e-30;
                    const double got = k->vec_dot_ref[t](n, w + r * wrs, xq), want = sc->vec_dot_ref[t](n, w + r * wrs, xq);
                    if (!(fabs(got - want) <= tol) || !(fabs(got - ref) <= tol + 1e-6 * mag))
                        fail_msg("%s vec_dot_ref %s n=%zu row %zu: %.9g, scalar %.9g, dequantized %.9g", k->name,
                                 tkv_type_name(t), n, r, got, want, ref);
                }
                if (!k->gemm_ref[t]) continue;
                for (size_t ci = 0; ci < sizeof tok_counts / sizeof tok_counts[0]; ci++) {
                    const size_t n_tok = tok_counts[ci];
                    k->gemm_ref[t](n, w, wrs, n_rows, xq, xrs, n_tok, y, ldy);
                    for (size_t tok = 0; tok < n_tok; tok++)
                        for (size_t r = 0; r < n_rows; r++) {
                            const float got = y[tok * ldy + r], want = k->vec_dot_ref[t](n, w + r * wrs, xq + tok * xrs);
                            if (memcmp(&got, &want, sizeof got) != 0)
                                fail_msg("%s gemm_ref %s n=%zu tokens=%zu row %zu token %zu: %.9g, vec_dot_ref %.9g",
                                         k->name, tkv_type_name(t), n, n_tok, r, tok, (double)got, (double)want);
                        }
                }
            }
            free(w), free(xq), free(x), free(y), free(wf), free(af);
        }
    }
    assert_int_equal(seen, 7); /* Q5_K, Q2_K, Q3_K, Q8_0, Q5_0, IQ4_XS, Q6_K */
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tq_reference_lanes),
        cmocka_unit_test(test_b4_reference_order),
        cmocka_unit_test(test_ref_entries),
    };
    return TU_RESULT(cmocka_run_group_tests(tests, NULL, NULL));
}
