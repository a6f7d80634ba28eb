/*
 * types.c — tensor and metadata type tables (ggml / GGUF numbering).
 */
#include "tokenkv_types.h"

#include <stddef.h>

/*
 * Block geometry of every ggml type a GGUF file may hold. Sizes follow the
 * block structs of the ggml format: e.g. Q4_K is 256 elements in
 * d + dmin (2 x f16) + 12 scale bytes + 128 nibble bytes = 144 bytes.
 * Numbers without an entry (4, 5, 31..33, 36..38) were removed from ggml.
 */
static const struct {
    const char *name;
    uint32_t block_elems;
    uint32_t block_bytes;
} type_table[TKV_TYPE_COUNT] = {
    [TKV_TYPE_F32] = {"F32", 1, 4},
    [TKV_TYPE_F16] = {"F16", 1, 2},
    [TKV_TYPE_Q4_0] = {"Q4_0", 32, 18},
    [TKV_TYPE_Q4_1] = {"Q4_1", 32, 20},
    [TKV_TYPE_Q5_0] = {"Q5_0", 32, 22},
    [TKV_TYPE_Q5_1] = {"Q5_1", 32, 24},
    [TKV_TYPE_Q8_0] = {"Q8_0", 32, 34},
    [TKV_TYPE_Q8_1] = {"Q8_1", 32, 36},
    [TKV_TYPE_Q2_K] = {"Q2_K", 256, 84},
    [TKV_TYPE_Q3_K] = {"Q3_K", 256, 110},
    [TKV_TYPE_Q4_K] = {"Q4_K", 256, 144},
    [TKV_TYPE_Q5_K] = {"Q5_K", 256, 176},
    [TKV_TYPE_Q6_K] = {"Q6_K", 256, 210},
    [TKV_TYPE_Q8_K] = {"Q8_K", 256, 292},
    [TKV_TYPE_IQ2_XXS] = {"IQ2_XXS", 256, 66},
    [TKV_TYPE_IQ2_XS] = {"IQ2_XS", 256, 74},
    [TKV_TYPE_IQ3_XXS] = {"IQ3_XXS", 256, 98},
    [TKV_TYPE_IQ1_S] = {"IQ1_S", 256, 50},
    [TKV_TYPE_IQ4_NL] = {"IQ4_NL", 32, 18},
    [TKV_TYPE_IQ3_S] = {"IQ3_S", 256, 110},
    [TKV_TYPE_IQ2_S] = {"IQ2_S", 256, 82},
    [TKV_TYPE_IQ4_XS] = {"IQ4_XS", 256, 136},
    [TKV_TYPE_I8] = {"I8", 1, 1},
    [TKV_TYPE_I16] = {"I16", 1, 2},
    [TKV_TYPE_I32] = {"I32", 1, 4},
    [TKV_TYPE_I64] = {"I64", 1, 8},
    [TKV_TYPE_F64] = {"F64", 1, 8},
    [TKV_TYPE_IQ1_M] = {"IQ1_M", 256, 56},
    [TKV_TYPE_BF16] = {"BF16", 1, 2},
    [TKV_TYPE_TQ1_0] = {"TQ1_0", 256, 54},
    [TKV_TYPE_TQ2_0] = {"TQ2_0", 256, 66},
    [TKV_TYPE_MXFP4] = {"MXFP4", 32, 17},
};

const char *tkv_type_name(tkv_type type) {
    if ((unsigned)type >= TKV_TYPE_COUNT) return NULL;
    return type_table[type].name;
}

tkv_status tkv_type_block(tkv_type type, uint32_t *block_elems, uint32_t *block_bytes) {
    if ((unsigned)type >= TKV_TYPE_COUNT || !type_table[type].name) return TKV_ERR_INVALID;
    if (block_elems) *block_elems = type_table[type].block_elems;
    if (block_bytes) *block_bytes = type_table[type].block_bytes;
    return TKV_OK;
}

static const char *const meta_type_names[TKV_META_TYPE_COUNT] = {
    [TKV_META_U8] = "uint8",   [TKV_META_I8] = "int8",     [TKV_META_U16] = "uint16",
    [TKV_META_I16] = "int16",  [TKV_META_U32] = "uint32",  [TKV_META_I32] = "int32",
    [TKV_META_F32] = "float32", [TKV_META_BOOL] = "bool",  [TKV_META_STRING] = "string",
    [TKV_META_ARRAY] = "array", [TKV_META_U64] = "uint64", [TKV_META_I64] = "int64",
    [TKV_META_F64] = "float64",
};

const char *tkv_meta_type_name(tkv_meta_type type) {
    if ((unsigned)type >= TKV_META_TYPE_COUNT) return NULL;
    return meta_type_names[type];
}
