/*
 * compute/quant/grids.h — the grid codebooks of the IQ1, IQ2 and IQ3 weight types
 * (see compute/quant/grids.c for where the entries come from and their encoding).
 *
 * Entry i holds one grid point, element k in byte k: unsigned magnitudes for
 * IQ2 (8 elements) and IQ3 (4 elements), whose signs come separately, and
 * signed bytes -1/0/+1 for IQ1 (8 elements).
 */
#ifndef TKV_QUANT_GRIDS_H
#define TKV_QUANT_GRIDS_H

#include <stdint.h>

extern const uint64_t tkv__iq2xxs_grid[256]; /* IQ2_XXS: 8 x {8, 25, 43} */
extern const uint64_t tkv__iq2xs_grid[512];  /* IQ2_XS                   */
extern const uint64_t tkv__iq2s_grid[1024];  /* IQ2_S, IQ2_M's IQ2_S rows */
extern const uint32_t tkv__iq3xxs_grid[256]; /* IQ3_XXS: 4 x {4, 12, ..., 62} */
extern const uint32_t tkv__iq3s_grid[512];   /* IQ3_S: 4 x {1, 3, ..., 15} */
extern const uint64_t tkv__iq1s_grid[2048];  /* IQ1_S, IQ1_M: 8 x {-1, 0, 1} */

/* Sign patterns: entry i (7 stored sign bits) with bit 7 set when i has an
   odd number of bits, so every pattern flips an even number of elements. */
extern const uint8_t tkv__iq_signs[128];

#endif
