/*
 * compute/quant/repack.c — the packed row layouts of compute/quant/repack.h (the kernels that read them
 * are in the SIMD files; this file only moves bytes).
 */
#include "repack.h"

#include "quant.h"

#include <assert.h>
#include <string.h>

enum { Q4_0_CHUNK = 64, Q4_0_BLOCK = 16 * 16, Q4_0_SCALES = 16 * 2 };

int tkv__pack_supported(tkv_type type) {
    _Static_assert(sizeof(tkv__block_iq4_nl) == sizeof(tkv__block_q4_0), "IQ4_NL has Q4_0's block layout");
    return type == TKV_TYPE_Q4_0 || type == TKV_TYPE_IQ4_NL;
}

size_t tkv__pack_stride(tkv_type type, size_t n) {
    if (!tkv__pack_supported(type)) return 0;
    const size_t nb = n / TKV__QK;
    return (nb * (Q4_0_BLOCK + Q4_0_SCALES) + 63) / 64 * 64;
}

size_t tkv__pack_bytes(tkv_type type, size_t n, size_t nr) {
    return (nr + TKV__PACK_ROWS - 1) / TKV__PACK_ROWS * tkv__pack_stride(type, n);
}

void tkv__pack_rows(tkv_type type, const void *w, size_t n, size_t nr, void *out) {
    assert(tkv__pack_supported(type) && n % TKV__QK == 0);
    const size_t nb = n / TKV__QK, rs = nb * sizeof(tkv__block_q4_0), stride = tkv__pack_stride(type, n);
    const uint8_t *src = w;
    uint8_t *dst = out;
    memset(dst, 0, tkv__pack_bytes(type, n, nr));
    for (size_t r = 0; r < nr; r++) {
        uint8_t *g = dst + r / TKV__PACK_ROWS * stride;
        const size_t k = r % TKV__PACK_ROWS;
        const tkv__block_q4_0 *row = (const tkv__block_q4_0 *)(const void *)(src + r * rs);
        for (size_t i = 0; i < nb; i++) {
            for (size_t j = 0; j < 4; j++) memcpy(g + i * Q4_0_BLOCK + j * Q4_0_CHUNK + 4 * k, row[i].qs + 4 * j, 4);
            memcpy(g + nb * Q4_0_BLOCK + i * Q4_0_SCALES + 2 * k, &row[i].d, 2);
        }
    }
}
