/*
 * gemm.h — tiled (register-blocked) products of several weight rows with
 * several tokens, for prefill and decode steps of several sequences: the
 * tkv__gemm_fn entries of the kernel tables (kernels.h), one file per family
 * and level, named by its types, in the level's folder compute/x86/avx2/ or
 * compute/x86/avx512/: gemm_q8_0_q4_q5_q6_k.c (Q6_K, and the reference's lane-wise Q8_0 and Q5_K),
 * gemm_q4_q5_k.c (Q4_K and Q5_K, block-reduced, over their transposed layout), gemm_q2_q3_k.c (Q2_K and Q3_K, the
 * same way), gemm_q4_0_iq4_nl.c (Q4_0, IQ4_NL and Q8_0, block-reduced), gemm_q4_1_q5.c (Q4_1, Q5_0, Q5_1),
 * gemm_q2_q3_k_lanes.c and gemm_q3_k_lanes.c (the reference's lane-wise orders of Q2_K, at avx2, and Q3_K),
 * gemm_iq4_xs.c (IQ4_XS, block-reduced, over its transposed layout) and gemm_iq4_xs_lanes.c (the reference's
 * lane-wise order), gemm_q6_k.c (Q6_K, block-reduced, over its transposed layout), gemm_iq3.c, gemm_iq2.c (avx2
 * only), gemm_float.c; the IQ1 types' in avx2/dot_iq1.c (their dots in compute/x86/iq1.h). Each folder is compiled
 * with its level's -m flags
 * (its sources.cmake) and reached only through a table the CPU supports.
 * Their shared helpers are in compute/x86/util.h and each level's util.h.
 *
 * Contract (kernels.h): y[t * ldy + r] equals the same level's vec_dot of
 * weight row r and token t, bit for bit. Two orders of summation:
 *   - Q4_0, IQ4_NL and Q8_0 (every level, scalar included; compute/quant/quant.h):
 *     block-reduced. Per block b, the exact integer s_b = sum((q - 8) * y)
 *     (IQ4_NL: sum(values[q] * y); Q8_0: sum(q * y)) and the float d_b = fp16(d_w) * fp16(d_a)
 *     (one rounded product); then, from acc = +0.0f,
 *     acc = fmaf((float)s_b, d_b, acc) for b = 0, 1, ... in order; the
 *     result is acc. This is the reference's own order over its repacked
 *     (8-row interleaved) rows on x86, for one token and many (Q8_0, which
 *     it does not repack on x86, it sums lane-wise: kernels.h's
 *     vec_dot_ref and gemm_ref keep that). One float
 *     accumulator and one fma per block, so the tiled kernels (each level's
 *     gemm_q4_0_iq4_nl.c) and the products over packed rows
 *     (compute/quant/repack.h) hold a row per lane and reduce a block with
 *     no horizontal sum.
 *   - Q4_K, Q5_K, Q6_K, Q2_K, Q3_K and IQ4_XS (every level): block-reduced per
 *     superblock (compute/quant/quant.h: the exact sum of the scales times
 *     the sub-blocks' sums, one fma into the running sum), over their
 *     transposed layouts (gemm_q4_q5_k.c, gemm_q6_k.c, gemm_q2_q3_k.c, gemm_iq4_xs.c).
 *   - Q5_0 at the avx2 level: block-reduced as Q4_0 (s_b = sum((q - 16) * y)),
 *     over its packed rows too (gemm_q4_0_iq4_nl.c); the reference's
 *     lane-wise order, below, is its vec_dot_ref and the avx512 level's default.
 *   - The others (avx2 and avx512 alike): lane-wise. Per (row, token), 8
 *     int32 lanes per block (lane j sums products of elements 4j..4j+3 of
 *     each 32-element group, times group scales), converted to float and
 *     fma'd with the block's scale product into 8 float lanes (the
 *     reference order of Q8_0: two accumulators, even and odd blocks), then the lanes added as
 *     ((v0+v4) + (v2+v6)) + ((v1+v5) + (v3+v7)). Per type on top of that:
 *     Q5_K subtracts a scalar sum of dmin * (mins . bsums); Q4_1
 *     and Q5_1 add, after the lanes, a float running sum of m_w * s_a over
 *     the blocks in order (each product rounded, then added); Q2_K fmas its
 *     -dmin * (mins . bsums) lanes into the same 8 float lanes, before the
 *     block's scale fma; the IQ2 types multiply the sum by 0.125f, IQ3_XXS
 *     by 0.25f; IQ1_S and IQ1_M keep compute/x86/iq1.h's own sums (its
 *     comments).
 * The tiled kernels compute the same integers (any exact integer route to
 * the same value is the same value) and do the same float operations in
 * the same order, only for many (row, token) pairs at once.
 *
 * Float weights (gemm_float.c) have no vec_dot contract across batches:
 * the reference's two orders (its vec_dot for one token, "lanes" for
 * more; that file's header) and, for BF16, the default "pairs" order of
 * gemm_bf16_pairs.c: one 16-lane accumulator per (row, token) over steps
 * of 32 elements, lane j adding the exact product of element 2j + 1 and
 * then of 2j (each sum rounded, subnormal inputs and sums flushed to zero),
 * the lanes reduced by halves: the arithmetic of AVX512_BF16's vdpbf16ps,
 * so a CPU with it takes 32 multiply-adds an instruction, and others the
 * same bits from two fused multiply-adds under DAZ and FTZ. It serves the
 * batch-invariant contexts for any number of tokens (kernels.h's lanes);
 * the reference's order stays as lanes_ref.
 *
 * How the work is laid out (both levels; Q4_0's files say how theirs differ):
 *   - weights are unpacked once per call into a "panel" per group of rows and
 *     chunk of K, on the stack: quants as bytes ready for the multiply, the
 *     per-lane scales and corrections, fp16 scales as floats;
 *   - activations are read in place (broadcast loads), with a small table of
 *     per-token values built once per chunk of tokens;
 *   - a tile of rows x tokens keeps one accumulator register per pair;
 *   - the K dimension is cut into chunks whose panel stays in L1; the tile's
 *     accumulators go to a stash between chunks.
 * Tile shapes are described in each file. Stack use is below 80 KiB.
 */
#ifndef TKV_GEMM_H
#define TKV_GEMM_H

#include <stddef.h>

/* The avx2 level's Q4_0 and IQ4_NL vec_dots (compute/x86/avx2/kernels.c), which the avx512 table
   keeps: their block-reduced order needs nothing wider. */
float tkv__dot_q4_0_avx2(size_t n, const void *w, const void *a);
float tkv__dot_iq4_nl_avx2(size_t n, const void *w, const void *a);
/* Its Q2_K and Q3_K vec_dots, which the avx512 table keeps too: block-reduced (each level's gemm_q2_q3_k.c
   follows them) and lane-wise (the reference's plain order: kernels.h's vec_dot_ref; avx2's gemm_q2_q3_k_lanes.c and
   avx512's gemm_q3_k_lanes.c follow them). */
float tkv__dot_q2_K_avx2(size_t n, const void *w, const void *a);
float tkv__dot_q2_K_lanes_avx2(size_t n, const void *w, const void *a);
float tkv__dot_q3_K_avx2(size_t n, const void *w, const void *a);
float tkv__dot_q3_K_lanes_avx2(size_t n, const void *w, const void *a);

/* compute/x86/avx512/gemm_q8_0_q4_q5_q6_k.c: Q8_0 in the reference's lane-wise order (kernels.h's gemm_ref) */
void tkv__gemm_q8_0_lanes_avx512(size_t n, const void *w, size_t wrs, size_t nr, const void *xq, size_t xrs,
                                 size_t n_tok, float *y, size_t ldy);
/* compute/x86/avx512/gemm_q4_0_iq4_nl.c: Q8_0's block-reduced gemm, gemv and packed products */
void tkv__gemm_q8_0_avx512(size_t n, const void *w, size_t wrs, size_t nr, const void *xq, size_t xrs, size_t n_tok,
                           float *y, size_t ldy);
void tkv__gemv_q8_0_avx512(size_t n, const void *w, size_t wrs, size_t nr, const void *xq, size_t xrs, size_t n_tok,
                           float *y, size_t ldy);
void tkv__packed_q8_0_avx512(size_t n, const void *w, size_t gs, size_t nr, const void *xq, size_t xrs, size_t n_tok,
                             float *y, size_t ldy);
/* compute/x86/avx512/gemm_q4_0_iq4_nl.c: Q4_0's and IQ4_NL's gemm, gemv and packed products (kernels.h's
   tkv__gemm_fn) */
void tkv__gemm_q4_0_avx512(size_t n, const void *w, size_t wrs, size_t nr, const void *xq, size_t xrs, size_t n_tok,
                           float *y, size_t ldy);
/* ... and its product over packed rows (compute/quant/repack.h; kernels.h's `packed`) */
void tkv__packed_q4_0_avx512(size_t n, const void *w, size_t gs, size_t nr, const void *xq, size_t xrs, size_t n_tok,
                             float *y, size_t ldy);
void tkv__gemv_q4_0_avx512(size_t n, const void *w, size_t wrs, size_t nr, const void *xq, size_t xrs, size_t n_tok,
                           float *y, size_t ldy);
void tkv__gemm_iq4_nl_avx512(size_t n, const void *w, size_t wrs, size_t nr, const void *xq, size_t xrs, size_t n_tok,
                             float *y, size_t ldy);
void tkv__gemv_iq4_nl_avx512(size_t n, const void *w, size_t wrs, size_t nr, const void *xq, size_t xrs, size_t n_tok,
                             float *y, size_t ldy);
void tkv__packed_iq4_nl_avx512(size_t n, const void *w, size_t gs, size_t nr, const void *xq, size_t xrs, size_t n_tok,
                               float *y, size_t ldy);
/* compute/x86/avx512/gemm_q4_q5_k.c (with tkv__packed_q4_K_avx512 below) */
void tkv__gemm_q4_K_avx512(size_t n, const void *w, size_t wrs, size_t nr, const void *xq, size_t xrs, size_t n_tok,
                           float *y, size_t ldy);
void tkv__gemm_q5_K_lanes_avx512(size_t n, const void *w, size_t wrs, size_t nr, const void *xq, size_t xrs, size_t n_tok,
                               float *y, size_t ldy);
void tkv__gemm_q5_K_avx512(size_t n, const void *w, size_t wrs, size_t nr, const void *xq, size_t xrs, size_t n_tok,
                           float *y, size_t ldy);
void tkv__gemm_q6_K_lanes_avx512(size_t n, const void *w, size_t wrs, size_t nr, const void *xq, size_t xrs, size_t n_tok,
                           float *y, size_t ldy);
/* compute/x86/avx512/gemm_q4_1_q5.c: Q4_1, Q5_0 and Q5_1 */
void tkv__gemm_q4_1_avx512(size_t n, const void *w, size_t wrs, size_t nr, const void *xq, size_t xrs, size_t n_tok,
                           float *y, size_t ldy);
void tkv__gemm_q5_0_avx512(size_t n, const void *w, size_t wrs, size_t nr, const void *xq, size_t xrs, size_t n_tok,
                           float *y, size_t ldy);
void tkv__gemm_q5_1_avx512(size_t n, const void *w, size_t wrs, size_t nr, const void *xq, size_t xrs, size_t n_tok,
                           float *y, size_t ldy);

/* compute/x86/avx512/gemm_q3_k_lanes.c and compute/x86/avx2/gemm_q2_q3_k_lanes.c: Q3_K and (avx2) Q2_K in the reference's
   lane-wise order (kernels.h's gemm_ref) */
void tkv__gemm_q3_K_lanes_avx512(size_t n, const void *w, size_t wrs, size_t nr, const void *xq, size_t xrs,
                                 size_t n_tok, float *y, size_t ldy);
void tkv__gemm_q2_K_lanes_avx2(size_t n, const void *w, size_t wrs, size_t nr, const void *xq, size_t xrs, size_t n_tok,
                               float *y, size_t ldy);
void tkv__gemm_q3_K_lanes_avx2(size_t n, const void *w, size_t wrs, size_t nr, const void *xq, size_t xrs, size_t n_tok,
                               float *y, size_t ldy);
/* compute/x86/avx512/gemm_q2_q3_k.c and compute/x86/avx2/gemm_q2_q3_k.c: Q2_K and Q3_K block-reduced over their
   transposed layouts (compute/quant/repack.h), over the file's rows and over packed rows */
void tkv__gemm_q2_K_avx512(size_t n, const void *w, size_t wrs, size_t nr, const void *xq, size_t xrs, size_t n_tok,
                           float *y, size_t ldy);
void tkv__packed_q2_K_avx512(size_t n, const void *w, size_t gs, size_t nr, const void *xq, size_t xrs, size_t n_tok,
                             float *y, size_t ldy);
void tkv__gemm_q3_K_avx512(size_t n, const void *w, size_t wrs, size_t nr, const void *xq, size_t xrs, size_t n_tok,
                           float *y, size_t ldy);
void tkv__packed_q3_K_avx512(size_t n, const void *w, size_t gs, size_t nr, const void *xq, size_t xrs, size_t n_tok,
                             float *y, size_t ldy);
void tkv__gemm_q2_K_avx2(size_t n, const void *w, size_t wrs, size_t nr, const void *xq, size_t xrs, size_t n_tok,
                         float *y, size_t ldy);
void tkv__packed_q2_K_avx2(size_t n, const void *w, size_t gs, size_t nr, const void *xq, size_t xrs, size_t n_tok,
                           float *y, size_t ldy);
void tkv__gemm_q3_K_avx2(size_t n, const void *w, size_t wrs, size_t nr, const void *xq, size_t xrs, size_t n_tok,
                         float *y, size_t ldy);
void tkv__packed_q3_K_avx2(size_t n, const void *w, size_t gs, size_t nr, const void *xq, size_t xrs, size_t n_tok,
                           float *y, size_t ldy);


/* compute/x86/avx512/gemm_iq3.c / compute/x86/avx2/gemm_iq3.c: IQ3_XXS's and IQ3_S's products, bit for bit the avx2 vec_dots
   (compute/x86/avx2/dot_iq3.c), which the avx512 table keeps (declared in compute/quant/iq.h too) */
float tkv__kernel_dot_iq3_xxs_avx2(size_t n, const void *w, const void *a);
float tkv__kernel_dot_iq3_s_avx2(size_t n, const void *w, const void *a);
void tkv__gemm_iq3_xxs_avx512(size_t n, const void *w, size_t wrs, size_t nr, const void *xq, size_t xrs, size_t n_tok,
                              float *y, size_t ldy);
void tkv__gemm_iq3_s_avx512(size_t n, const void *w, size_t wrs, size_t nr, const void *xq, size_t xrs, size_t n_tok,
                            float *y, size_t ldy);
void tkv__gemm_iq3_xxs_avx2(size_t n, const void *w, size_t wrs, size_t nr, const void *xq, size_t xrs, size_t n_tok,
                            float *y, size_t ldy);
void tkv__gemm_iq3_s_avx2(size_t n, const void *w, size_t wrs, size_t nr, const void *xq, size_t xrs, size_t n_tok,
                          float *y, size_t ldy);

/* TQ1_0's dot (compute/x86/avx2/kernels.c), and its product at the avx512 level (compute/x86/avx512/gemm_tq1.c) */
float tkv__dot_tq1_0_avx2(size_t n, const void *w, const void *a);
/* compute/x86/avx2/kernels.c: the block-reduced Q4_K and Q5_K vec_dots, the avx512 level's too */
float tkv__dot_q4_K_avx2(size_t n, const void *w, const void *a);
float tkv__dot_q5_K_avx2(size_t n, const void *w, const void *a);
void tkv__gemm_tq1_0_avx512(size_t n, const void *w, size_t wrs, size_t nr, const void *xq, size_t xrs, size_t n_tok,
                            float *y, size_t ldy);

/* compute/x86/avx2/gemm_iq2.c: IQ2_XXS, IQ2_XS and IQ2_S, bit for bit compute/x86/avx2/kernels.c's vec_dots (which the avx512
   table keeps, with these products) */
float tkv__dot_iq2_xxs_avx2(size_t n, const void *w, const void *a);
float tkv__dot_iq2_xs_avx2(size_t n, const void *w, const void *a);
float tkv__dot_iq2_s_avx2(size_t n, const void *w, const void *a);
void tkv__gemm_iq2_xxs_avx2(size_t n, const void *w, size_t wrs, size_t nr, const void *xq, size_t xrs, size_t n_tok,
                            float *y, size_t ldy);
void tkv__gemm_iq2_xs_avx2(size_t n, const void *w, size_t wrs, size_t nr, const void *xq, size_t xrs, size_t n_tok,
                           float *y, size_t ldy);
void tkv__gemm_iq2_s_avx2(size_t n, const void *w, size_t wrs, size_t nr, const void *xq, size_t xrs, size_t n_tok,
                          float *y, size_t ldy);
/* compute/x86/avx2/packed_planes.c: the three over rows packed as IQ2 planes (the packed entries of both levels),
   IQ3_XXS and IQ3_S over IQ3 nibbles and IQ1_S and IQ1_M over IQ1 planes (the avx2 level's; compute/quant/repack.h),
   bit for bit their vec_dots */
void tkv__packed_iq2_avx2(size_t n, const void *w, size_t gs, size_t nr, const void *xq, size_t xrs, size_t n_tok,
                          float *y, size_t ldy);
void tkv__packed_iq3_xxs_avx2(size_t n, const void *w, size_t gs, size_t nr, const void *xq, size_t xrs,
                              size_t n_tok, float *y, size_t ldy);
void tkv__packed_iq3_s_avx2(size_t n, const void *w, size_t gs, size_t nr, const void *xq, size_t xrs, size_t n_tok,
                            float *y, size_t ldy);
void tkv__packed_iq1_s_avx2(size_t n, const void *w, size_t gs, size_t nr, const void *xq, size_t xrs, size_t n_tok,
                            float *y, size_t ldy);
void tkv__packed_iq1_m_avx2(size_t n, const void *w, size_t gs, size_t nr, const void *xq, size_t xrs, size_t n_tok,
                            float *y, size_t ldy);

/* compute/x86/avx2/gemm_q8_0_q4_q5_q6_k.c: Q8_0 in the reference's lane-wise order (kernels.h's gemm_ref) */
void tkv__gemm_q8_0_lanes_avx2(size_t n, const void *w, size_t wrs, size_t nr, const void *xq, size_t xrs,
                               size_t n_tok, float *y, size_t ldy);
/* compute/x86/avx2/kernels.c's block-reduced Q8_0 vec_dot (the avx512 table's too), and compute/x86/avx2/gemm_q4_0_iq4_nl.c:
   the block-reduced Q4_0, IQ4_NL and Q8_0 products over the file's rows and over packed rows */
float tkv__dot_q8_0_avx2(size_t n, const void *w, const void *a);
void tkv__gemm_q8_0_avx2(size_t n, const void *w, size_t wrs, size_t nr, const void *xq, size_t xrs, size_t n_tok,
                         float *y, size_t ldy);
void tkv__packed_q8_0_avx2(size_t n, const void *w, size_t gs, size_t nr, const void *xq, size_t xrs, size_t n_tok,
                           float *y, size_t ldy);
void tkv__gemm_q4_0_avx2(size_t n, const void *w, size_t wrs, size_t nr, const void *xq, size_t xrs, size_t n_tok,
                         float *y, size_t ldy);
void tkv__packed_q4_0_avx2(size_t n, const void *w, size_t gs, size_t nr, const void *xq, size_t xrs, size_t n_tok,
                           float *y, size_t ldy);
void tkv__gemm_iq4_nl_avx2(size_t n, const void *w, size_t wrs, size_t nr, const void *xq, size_t xrs, size_t n_tok,
                           float *y, size_t ldy);
void tkv__packed_iq4_nl_avx2(size_t n, const void *w, size_t gs, size_t nr, const void *xq, size_t xrs, size_t n_tok,
                             float *y, size_t ldy);
/* ... and Q5_0's, the avx2 level's alone (the avx512 one keeps its lane-wise Q5_0, with no packed rows) */
void tkv__gemm_q5_0_avx2(size_t n, const void *w, size_t wrs, size_t nr, const void *xq, size_t xrs, size_t n_tok,
                         float *y, size_t ldy);
void tkv__packed_q5_0_avx2(size_t n, const void *w, size_t gs, size_t nr, const void *xq, size_t xrs, size_t n_tok,
                           float *y, size_t ldy);
void tkv__gemm_q4_K_avx2(size_t n, const void *w, size_t wrs, size_t nr, const void *xq, size_t xrs, size_t n_tok,
                         float *y, size_t ldy);
void tkv__gemm_q5_K_lanes_avx2(size_t n, const void *w, size_t wrs, size_t nr, const void *xq, size_t xrs, size_t n_tok,
                               float *y, size_t ldy);
void tkv__gemm_q5_K_avx2(size_t n, const void *w, size_t wrs, size_t nr, const void *xq, size_t xrs, size_t n_tok,
                         float *y, size_t ldy);
void tkv__gemm_q6_K_lanes_avx2(size_t n, const void *w, size_t wrs, size_t nr, const void *xq, size_t xrs, size_t n_tok,
                         float *y, size_t ldy);
/* compute/x86/avx2/gemm_q4_1_q5.c: Q4_1, Q5_1 and Q5_0 in the reference's lane-wise order (Q5_0's is the level's
   gemm_ref: its default is block-reduced, above) */
void tkv__gemm_q4_1_avx2(size_t n, const void *w, size_t wrs, size_t nr, const void *xq, size_t xrs, size_t n_tok,
                         float *y, size_t ldy);
void tkv__gemm_q5_0_lanes_avx2(size_t n, const void *w, size_t wrs, size_t nr, const void *xq, size_t xrs,
                               size_t n_tok, float *y, size_t ldy);
void tkv__gemm_q5_1_avx2(size_t n, const void *w, size_t wrs, size_t nr, const void *xq, size_t xrs, size_t n_tok,
                         float *y, size_t ldy);

/* compute/x86/avx512/dot_iq1.c: compute/x86/iq1.h's IQ1_S and IQ1_M dots built at the avx512 level (the avx2 ones' bits) */
float tkv__dot_iq1_s_avx512(size_t n, const void *w, const void *a);
float tkv__dot_iq1_m_avx512(size_t n, const void *w, const void *a);
/* compute/x86/avx2/dot_iq1.c: IQ1_S and IQ1_M, bit for bit its dots (the avx512 table keeps these products) */
void tkv__gemm_iq1_s_avx2(size_t n, const void *w, size_t wrs, size_t nr, const void *xq, size_t xrs, size_t n_tok,
                          float *y, size_t ldy);
void tkv__gemm_iq1_m_avx2(size_t n, const void *w, size_t wrs, size_t nr, const void *xq, size_t xrs, size_t n_tok,
                          float *y, size_t ldy);

/* The avx2 level's products over packed rows (kernels.h's `packed`): Q4_K's and Q5_K's in gemm_q4_q5_k.c, Q6_K's in
   gemm_q6_k.c */
void tkv__packed_q4_K_avx2(size_t n, const void *w, size_t gs, size_t nr, const void *xq, size_t xrs, size_t n_tok,
                           float *y, size_t ldy);
void tkv__packed_q5_K_avx2(size_t n, const void *w, size_t gs, size_t nr, const void *xq, size_t xrs, size_t n_tok,
                           float *y, size_t ldy);
void tkv__packed_q6_K_avx2(size_t n, const void *w, size_t gs, size_t nr, const void *xq, size_t xrs, size_t n_tok,
                           float *y, size_t ldy);
/* Q6_K: compute/x86/avx2/kernels.c's block-reduced vec_dot (the avx512 table has its own, with vpdpwssd); each level's products over
   its transposed packed rows and over file rows (gemm_q6_k.c); the lane-wise tiles, gemm_ref, are
   gemm_q8_0_q4_q5_q6_k.c's (above) */
float tkv__dot_q6_K_avx2(size_t n, const void *w, const void *a);
void tkv__gemm_q6_K_avx2(size_t n, const void *w, size_t wrs, size_t nr, const void *xq, size_t xrs, size_t n_tok,
                         float *y, size_t ldy);
void tkv__gemm_q6_K_avx512(size_t n, const void *w, size_t wrs, size_t nr, const void *xq, size_t xrs, size_t n_tok,
                           float *y, size_t ldy);
/* IQ4_XS: compute/x86/avx2/kernels.c's vec_dots (the avx512 table's too), the block-reduced default and the
   reference's lane-wise order (vec_dot_ref); each level's block-reduced products over the transposed packed rows
   and over file rows (gemm_iq4_xs.c), and its lane-wise tiled product (gemm_iq4_xs_lanes.c, gemm_ref) */
float tkv__dot_iq4_xs_avx2(size_t n, const void *w, const void *a);
float tkv__dot_iq4_xs_lanes_avx2(size_t n, const void *w, const void *a);
void tkv__packed_iq4_xs_avx2(size_t n, const void *w, size_t gs, size_t nr, const void *xq, size_t xrs, size_t n_tok,
                             float *y, size_t ldy);
void tkv__packed_iq4_xs_avx512(size_t n, const void *w, size_t gs, size_t nr, const void *xq, size_t xrs,
                               size_t n_tok, float *y, size_t ldy);
void tkv__gemm_iq4_xs_avx2(size_t n, const void *w, size_t wrs, size_t nr, const void *xq, size_t xrs, size_t n_tok,
                           float *y, size_t ldy);
void tkv__gemm_iq4_xs_avx512(size_t n, const void *w, size_t wrs, size_t nr, const void *xq, size_t xrs, size_t n_tok,
                             float *y, size_t ldy);
void tkv__gemm_iq4_xs_lanes_avx2(size_t n, const void *w, size_t wrs, size_t nr, const void *xq, size_t xrs,
                                 size_t n_tok, float *y, size_t ldy);
void tkv__gemm_iq4_xs_lanes_avx512(size_t n, const void *w, size_t wrs, size_t nr, const void *xq, size_t xrs,
                                   size_t n_tok, float *y, size_t ldy);
/* The avx512 level's products over packed rows (kernels.h's `packed`): Q4_K's and Q5_K's in gemm_q4_q5_k.c, Q6_K's in
   gemm_q6_k.c */
void tkv__packed_q4_K_avx512(size_t n, const void *w, size_t gs, size_t nr, const void *xq, size_t xrs, size_t n_tok,
                             float *y, size_t ldy);
void tkv__packed_q5_K_avx512(size_t n, const void *w, size_t gs, size_t nr, const void *xq, size_t xrs, size_t n_tok,
                             float *y, size_t ldy);
void tkv__packed_q6_K_avx512(size_t n, const void *w, size_t gs, size_t nr, const void *xq, size_t xrs, size_t n_tok,
                             float *y, size_t ldy);

/*
 * Float rows (compute/x86/avx512/gemm_float.c): the reference's vec_dots, and its "lanes"
 * products for batches (each entry one accumulator over the whole row; n a
 * multiple of 16). Same signatures as
 * tkv__vec_dot_fn and tkv__gemm_fn; the lanes products are NOT bit-equal to
 * the vec_dots (the reference's two orders differ).
 */
float tkv__dot_f32_ref_avx512(size_t n, const void *w, const void *a);
float tkv__dot_f16_ref_avx512(size_t n, const void *w, const void *a);
float tkv__dot_bf16_ref_avx512(size_t n, const void *w, const void *a);
void tkv__lanes_f32_avx512(size_t n, const void *w, size_t wrs, size_t nr, const void *xq, size_t xrs, size_t n_tok,
                           float *y, size_t ldy);
void tkv__lanes_f16_avx512(size_t n, const void *w, size_t wrs, size_t nr, const void *xq, size_t xrs, size_t n_tok,
                           float *y, size_t ldy);
void tkv__lanes_bf16_avx512(size_t n, const void *w, size_t wrs, size_t nr, const void *xq, size_t xrs, size_t n_tok,
                            float *y, size_t ldy);
/*
 * BF16 rows in the pairs order (compute/x86/avx512/gemm_bf16_pairs.c): the default, batch-invariant
 * products of BF16 weights, vdpbf16ps's arithmetic (32 elements a step, lane j the product of element 2j + 1
 * then of 2j, subnormals flushed), for 1 token or more; n a multiple of 16. _dp runs vdpbf16ps (only on a CPU
 * with AVX512_BF16: tkv__kernel_cpu_bf16_dot), _emu two fused multiply-adds a step under DAZ and FTZ, the same
 * bits; the plain name takes the first where the CPU has it.
 */
void tkv__lanes_bf16_pairs_avx512(size_t n, const void *w, size_t wrs, size_t nr, const void *xq, size_t xrs,
                                  size_t n_tok, float *y, size_t ldy);
void tkv__lanes_bf16_pairs_dp_avx512(size_t n, const void *w, size_t wrs, size_t nr, const void *xq, size_t xrs,
                                     size_t n_tok, float *y, size_t ldy);
void tkv__lanes_bf16_pairs_emu_avx512(size_t n, const void *w, size_t wrs, size_t nr, const void *xq, size_t xrs,
                                      size_t n_tok, float *y, size_t ldy);
/* The pairs order at the avx2 level (compute/x86/avx2/gemm_bf16_pairs.c), bit for bit the avx512 level's. */
void tkv__lanes_bf16_pairs_avx2(size_t n, const void *w, size_t wrs, size_t nr, const void *xq, size_t xrs,
                                size_t n_tok, float *y, size_t ldy);
/* The same functions at the avx2 level (compute/x86/avx2/gemm_float.c), bit for bit these. */
float tkv__dot_f32_ref_avx2(size_t n, const void *w, const void *a);
float tkv__dot_f16_ref_avx2(size_t n, const void *w, const void *a);
float tkv__dot_bf16_ref_avx2(size_t n, const void *w, const void *a);
void tkv__lanes_f32_avx2(size_t n, const void *w, size_t wrs, size_t nr, const void *xq, size_t xrs, size_t n_tok,
                         float *y, size_t ldy);
void tkv__lanes_f16_avx2(size_t n, const void *w, size_t wrs, size_t nr, const void *xq, size_t xrs, size_t n_tok,
                         float *y, size_t ldy);
void tkv__lanes_bf16_avx2(size_t n, const void *w, size_t wrs, size_t nr, const void *xq, size_t xrs, size_t n_tok,
                          float *y, size_t ldy);

#endif
