/*
 * quantize.h — weight quantizers: rows of floats to the GGUF block formats
 * of compute/quant/quant.h, for `tokenkv mkmodel` (random-weight models of any type) and
 * for tests that need quantized weights of known values.
 *
 * The rounding rules follow the reference implementation's scalar
 * ("_ref") quantizers, so a row quantized here and there gives the same
 * blocks up to float evaluation order:
 *   Q8_0        d = amax / 127, q = round-half-away(x / d).
 *   Q4_0, Q5_0  d = -max / 8 (-max / 16), `max` being the element of
 *               largest magnitude with its sign, so that element is stored
 *               exactly as q = 0; other elements truncate x / d + 8.5
 *               (+ 16.5), clamped to the top quant.
 *   Q4_1, Q5_1  d = (max - min) / 15 (/ 31), m = min,
 *               q = trunc((x - min) / d + 0.5).
 *   Q4_K, Q5_K  per 32-element group, the weighted least-squares search for
 *               a scale and a min over a small grid of candidate scales
 *               (weights |x| + rms of the group), then both quantized to
 *               6 bits against the block's largest scale and min, and the
 *               quants recomputed with the stored values.
 *   Q6_K        per 16-element group, the best of 19 candidate scales near
 *               -max / 32 in x²-weighted squared error; group scales stored
 *               as int8 against the block's largest.
 *   Q2_K        per 16-element group, a scale and a min fitted as Q4_K's
 *               (weights |x|, absolute error, 16 candidates), both stored
 *               as 4 bits against the block's largest; quants recomputed.
 *   Q3_K        per 16-element group, a symmetric scale from -max / 4
 *               refined one quant at a time (up to 5 passes, x²-weighted);
 *               6-bit group scales against d = -max_scale / 32.
 *   IQ4_NL      per block of 32, the best of 16 candidate scales for the
 *               non-linear codebook (x²-weighted least squares), codes of
 *               the nearest value (ties to the upper one). Not the KV
 *               cache's cheaper quantizer (compute/quant_blocks.c).
 *   IQ4_XS      IQ4_NL's per-32 scales, stored as 6-bit multiples of
 *               -max_scale / 32; codes recomputed against each.
 *   TQ1_0,      d = the block's largest magnitude, each element rounded
 *   TQ2_0       (half away from zero) to -1, 0, +1 of it.
 *   F16, BF16   round to nearest even (compute/quant/quant.h); F32 a copy.
 * No importance matrix is used (the reference uses none without one). The
 * tools library is compiled with -ffp-contract=off so every product and sum
 * rounds on its own, as in the reference: then the same floats give the same
 * bytes (checked against the reference's files by test_quantize_file).
 */
#ifndef TKV_QUANTIZE_H
#define TKV_QUANTIZE_H

#include "tokenkv.h"

#include <stdbool.h>
#include <stddef.h>

/*
 * True for the types tkv__quantize_row writes: F32, F16, BF16, Q8_0, Q4_0,
 * Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS, TQ1_0,
 * TQ2_0.
 */
bool tkv__quantize_supported(tkv_type type);

/*
 * Quantize the n floats at x into n elements of `type` at y
 * (tkv__quant_row_size(type, n) bytes; y may be at any address).
 * Preconditions (asserted): a supported type, n a multiple of its block
 * size. Inputs should be finite: NaN or infinity gives unspecified blocks
 * (never undefined behaviour).
 */
void tkv__quantize_row(tkv_type type, const float *x, void *y, size_t n);

#endif
