/*
 * quant_iq.h — block layouts of the grid ("IQ") weight types IQ1_S, IQ1_M,
 * IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS and IQ3_S, byte for byte as GGUF stores
 * them, and their scalar reference code (quant_iq1.c, quant_iq2.c,
 * quant_iq3.c). Every one is a 256-element super-block; groups of 8 (IQ1,
 * IQ2) or 4 (IQ3) weights are an index into a codebook (quant_grids.h) times
 * a sign pattern and a scale. All pair with Q8_K activations.
 *
 * The reference's mixes IQ2_M (IQ2_S rows with others), IQ3_M and IQ3_XS
 * (IQ3_S/IQ3_XXS rows with others) need no type of their own.
 */
#ifndef TKV_QUANT_IQ_H
#define TKV_QUANT_IQ_H

#include <stddef.h>
#include <stdint.h>

typedef struct __attribute__((packed)) tkv__block_iq2_xxs {
    uint16_t d; /* fp16 */
    uint16_t qs[32];
} tkv__block_iq2_xxs;

typedef struct __attribute__((packed)) tkv__block_iq2_xs {
    uint16_t d; /* fp16 */
    uint16_t qs[32];
    uint8_t scales[8];
} tkv__block_iq2_xs;

typedef struct __attribute__((packed)) tkv__block_iq2_s {
    uint16_t d; /* fp16 */
    uint8_t qs[64];
    uint8_t qh[8];
    uint8_t scales[8];
} tkv__block_iq2_s;

typedef struct __attribute__((packed)) tkv__block_iq3_xxs {
    uint16_t d; /* fp16 */
    uint8_t qs[96];
} tkv__block_iq3_xxs;

typedef struct __attribute__((packed)) tkv__block_iq3_s {
    uint16_t d; /* fp16 */
    uint8_t qs[64];
    uint8_t qh[8];
    uint8_t signs[32];
    uint8_t scales[4];
} tkv__block_iq3_s;

typedef struct __attribute__((packed)) tkv__block_iq1_s {
    uint16_t d; /* fp16 */
    uint8_t qs[32];
    uint16_t qh[8];
} tkv__block_iq1_s;

/* IQ1_M has no d field: its fp16 scale is spread over the top nibbles of
   the four 16-bit words of scales. */
typedef struct __attribute__((packed)) tkv__block_iq1_m {
    uint8_t qs[32];
    uint8_t qh[16];
    uint8_t scales[8];
} tkv__block_iq1_m;

_Static_assert(sizeof(tkv__block_iq2_xxs) == 66, "IQ2_XXS block");
_Static_assert(sizeof(tkv__block_iq2_xs) == 74, "IQ2_XS block");
_Static_assert(sizeof(tkv__block_iq2_s) == 82, "IQ2_S block");
_Static_assert(sizeof(tkv__block_iq3_xxs) == 98, "IQ3_XXS block");
_Static_assert(sizeof(tkv__block_iq3_s) == 110, "IQ3_S block");
_Static_assert(sizeof(tkv__block_iq1_s) == 50, "IQ1_S block");
_Static_assert(sizeof(tkv__block_iq1_m) == 56, "IQ1_M block");

#endif
