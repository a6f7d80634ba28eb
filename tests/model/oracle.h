/*
 * oracle.h — an exact oracle of the llama forward pass: the same weights,
 * dequantized once by the library's row dequantizers (what the engine's
 * products stand for), then every step in double precision, written plainly
 * and independently of src/model/forward.c: no quantized activations, no
 * F16 cache, no summation order to match. What the engine computes is this
 * up to its roundings; how far it lands from it is the measure of its
 * arithmetic (test_oracle).
 *
 * Only what the parity models need: arch llama (RMSNorm pre-norms, RoPE of
 * adjacent pairs, grouped-query attention, SwiGLU), without RoPE factors,
 * biases or soft caps; oracle_new refuses anything else.
 */
#ifndef TKV_TEST_ORACLE_H
#define TKV_TEST_ORACLE_H

#include "tokenkv.h"

#include <stddef.h>

typedef struct oracle oracle;

/* m's weights in double; fails the test for a model it does not support. */
oracle *oracle_new(const tkv_model *m);
void oracle_free(oracle *o);

/* The logits (n, n_vocab) of tokens tok[0..n) at positions 0..n-1 of one sequence. */
void oracle_forward(const oracle *o, const tkv_token *tok, size_t n, double *logits);

#endif
