/*
 * shortconv.h — one token's gated short convolution (lfm2) over the B*x rows
 * its sequence's cells hold (forward.c conv_mixer runs it for each token).
 */
#ifndef TKV_SHORTCONV_H
#define TKV_SHORTCONV_H

#include "kvrows.h"

#include <stddef.h>
#include <stdint.h>

/*
 * y (n_embd) = C * sum over taps k of w[c taps + k] Bx_{pos - taps + 1 + k},
 * for the token at `pos` whose in_proj output is bcx (B, C, x: n_embd each).
 * Its own Bx is B * x in float; earlier positions p read the K row of
 * cells[p] in `layer` (zeros before position 0). row: (n_embd_kv) scratch.
 */
void tkv__shortconv_mix(const tkv__kvrows *kv, uint32_t layer, const uint32_t *cells, int32_t pos, const float *bcx,
                        const float *w, size_t taps, size_t n_embd, float *y, float *row);

#endif
