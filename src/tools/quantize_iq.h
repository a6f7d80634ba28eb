/*
 * quantize_iq.h — the IQ4_NL, IQ4_XS, TQ1_0 and TQ2_0 weight quantizers
 * (quantize_iq.c), for tkv__quantize_row; see quantize.h for their rules.
 */
#ifndef TKV_QUANTIZE_IQ_H
#define TKV_QUANTIZE_IQ_H

#include "tokenkv_types.h"

#include <stddef.h>

/* nb blocks of `type` (one of the four) from the floats at x into y (any address). */
void tkv__quantize_iq_row(tkv_type type, const float *x, void *y, size_t nb);

#endif
