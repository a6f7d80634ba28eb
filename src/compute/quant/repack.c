/*
 * compute/quant/repack.c — the packed row layouts of compute/quant/repack.h (the kernels that read them
 * are in the SIMD files; this file only moves bytes).
 */
#include "repack.h"

#include "quant.h"

#include <assert.h>
#include <string.h>

enum { Q4_0_CHUNK = 64, Q4_0_BLOCK = 16 * 16, Q4_0_SCALES = 16 * 2 };

/* How a type's rows are packed (compute/quant/repack.h). */
typedef enum pack_kind {
    PACK_NONE = 0,
    PACK_TRANSPOSED,  /* Q4_0's 4-byte chunks per row and lane */
    PACK_INTERLEAVED, /* the file's blocks, block i of the group's 16 rows side by side */
} pack_kind;

static const pack_kind kinds[TKV_TYPE_COUNT] = {
    [TKV_TYPE_Q4_0] = PACK_TRANSPOSED,   [TKV_TYPE_IQ4_NL] = PACK_TRANSPOSED, [TKV_TYPE_Q8_0] = PACK_INTERLEAVED,
    [TKV_TYPE_Q4_K] = PACK_INTERLEAVED, [TKV_TYPE_Q5_K] = PACK_INTERLEAVED, [TKV_TYPE_Q6_K] = PACK_INTERLEAVED,
    [TKV_TYPE_IQ4_XS] = PACK_INTERLEAVED, [TKV_TYPE_Q2_K] = PACK_INTERLEAVED, [TKV_TYPE_Q3_K] = PACK_INTERLEAVED,
};

static pack_kind kind_of(tkv_type type) {
    return (unsigned)type < TKV_TYPE_COUNT ? kinds[type] : PACK_NONE;
}

int tkv__pack_supported(tkv_type type) {
    _Static_assert(sizeof(tkv__block_iq4_nl) == sizeof(tkv__block_q4_0), "IQ4_NL has Q4_0's block layout");
    return kind_of(type) != PACK_NONE;
}

size_t tkv__pack_stride(tkv_type type, size_t n) {
    const pack_kind k = kind_of(type);
    if (k == PACK_NONE) return 0;
    const size_t be = tkv__quant_block_elems(type), nb = n / be;
    const size_t bytes = k == PACK_TRANSPOSED ? nb * (Q4_0_BLOCK + Q4_0_SCALES)
                                              : nb * TKV__PACK_ROWS * tkv__quant_row_size(type, be);
    return (bytes + 63) / 64 * 64;
}

size_t tkv__pack_bytes(tkv_type type, size_t n, size_t nr) {
    return (nr + TKV__PACK_ROWS - 1) / TKV__PACK_ROWS * tkv__pack_stride(type, n);
}

void tkv__pack_rows(tkv_type type, const void *w, size_t n, size_t nr, void *out) {
    const pack_kind kind = kind_of(type);
    const size_t be = tkv__quant_block_elems(type);
    assert(kind != PACK_NONE && n % be == 0);
    const size_t nb = n / be, bs = tkv__quant_row_size(type, be), rs = nb * bs, stride = tkv__pack_stride(type, n);
    const uint8_t *src = w;
    uint8_t *dst = out;
    memset(dst, 0, tkv__pack_bytes(type, n, nr));
    for (size_t r = 0; r < nr; r++) {
        uint8_t *g = dst + r / TKV__PACK_ROWS * stride;
        const size_t k = r % TKV__PACK_ROWS;
        const uint8_t *row = src + r * rs;
        if (kind == PACK_INTERLEAVED) {
            for (size_t i = 0; i < nb; i++) memcpy(g + (i * TKV__PACK_ROWS + k) * bs, row + i * bs, bs);
            continue;
        }
        const tkv__block_q4_0 *b = (const tkv__block_q4_0 *)(const void *)row;
        for (size_t i = 0; i < nb; i++) {
            for (size_t j = 0; j < 4; j++) memcpy(g + i * Q4_0_BLOCK + j * Q4_0_CHUNK + 4 * k, b[i].qs + 4 * j, 4);
            memcpy(g + nb * Q4_0_BLOCK + i * Q4_0_SCALES + 2 * k, &b[i].d, 2);
        }
    }
}
