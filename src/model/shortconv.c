/*
 * shortconv.c — one token's gated short convolution (see shortconv.h).
 */
#include "shortconv.h"

#include "compute/quant/quant.h"

#include <string.h>

void tkv__shortconv_mix(const tkv__kvrows *kv, uint32_t layer, const uint32_t *cells, int32_t pos, const float *bcx,
                        const float *w, size_t taps, size_t n_embd, float *y, float *row) {
    const size_t E = n_embd;
    const float *B = bcx, *C = bcx + E, *x = bcx + 2 * E;
    memset(y, 0, E * sizeof *y);
    /* tap by tap, oldest first: each channel sums in the reference's order */
    for (size_t k = 0; k < taps; k++) {
        const long p = (long)pos - (long)(taps - 1) + (long)k;
        if (p < 0) continue; /* before the sequence: zeros */
        if (p == (long)pos) {
            for (size_t i = 0; i < E; i++) y[i] += w[i * taps + k] * (B[i] * x[i]);
        } else {
            tkv__quant_dequantize_row(kv->type_k, tkv__kvrows_k(kv, layer, cells[p]), row, kv->n_embd_kv);
            for (size_t i = 0; i < E; i++) y[i] += w[i * taps + k] * row[i];
        }
    }
    for (size_t i = 0; i < E; i++) y[i] *= C[i];
}
