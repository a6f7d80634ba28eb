/*
 * shapes.h — random llama models of any shape with every matrix of one
 * weight type (token_embd and output included), written with the tools
 * library (gguf_write.h, quantize.h) for test_parity_shapes and test_oracle.
 *
 * Types the tools quantizer writes get uniform floats of standard deviation
 * 1/sqrt(fan_in), quantized by it; the grid types it cannot write (IQ1_*,
 * IQ2_*, IQ3_*, MXFP4) get random quant bits, which are all valid codes,
 * under block scales sized so that the weights again have a standard
 * deviation near 1/sqrt(fan_in). Norms are 1. The file has no tokenizer: the
 * tests run on token ids.
 */
#ifndef TKV_TEST_SHAPES_H
#define TKV_TEST_SHAPES_H

#include "tokenkv.h"

#include <stddef.h>
#include <stdint.h>

typedef struct shp_spec {
    const char *name;                  /* for messages */
    uint32_t dim, layers, heads, kv_heads;
    uint32_t head_dim;                 /* 0: dim / heads */
    uint32_t ff, n_vocab;
} shp_spec;

/* The shapes of issue 31: n_embd 512 to 2048, 4 and 8 query heads per K/V
   head, head sizes 64 and 128; one or two layers and a small vocabulary, so
   that every type at every kernel level fits in seconds. */
extern const shp_spec shp_shapes[];
extern const size_t shp_n_shapes;

/* The weight types these tests make models of, and how many. */
extern const tkv_type shp_types[];
extern const size_t shp_n_types;

/* Write the model of shape s, every matrix `type`, weights drawn from seed,
   to path; fails the test on any error. */
void shp_write(const shp_spec *s, tkv_type type, uint64_t seed, const char *path);

/* n token ids in [1, n_vocab) drawn from seed. */
void shp_tokens(uint64_t seed, uint32_t n_vocab, tkv_token *out, size_t n);

/* ||got - ref|| / ||ref|| over n values, in double. */
double shp_row_rel(const float *got, const double *ref, size_t n);

#endif
