/**
 * @file tokenkv_types.h
 * @brief The base types of tokenkv's API: status codes, token, position and
 *        sequence ids, tensor and metadata types.
 *
 * Included by tokenkv.h (programs include that). The library's lower layers
 * (src/base, format, text, compute) include only this part of the API: they
 * share its numbers, not its handles.
 */
#ifndef TOKENKV_TYPES_H
#define TOKENKV_TYPES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(TKV_BUILDING_LIBRARY)
#define TKV_API __attribute__((visibility("default")))
#else
/** Marks a declaration of the public API: the only symbols the shared library exports. */
#define TKV_API
#endif

/* ------------------------------------------------------------------------ */
/* Status codes                                                              */
/* ------------------------------------------------------------------------ */

/** Result of every fallible call: TKV_OK or a negative error code. */
typedef enum tkv_status {
    TKV_OK = 0,               /**< success */
    TKV_ERR_NOMEM = -1,       /**< an allocation failed */
    TKV_ERR_IO = -2,          /**< open/read/mmap/write failed */
    TKV_ERR_FORMAT = -3,      /**< a file is malformed or corrupt */
    TKV_ERR_UNSUPPORTED = -4, /**< valid, but not something tokenkv handles */
    TKV_ERR_INVALID = -5,     /**< a bad argument, or a missing/mistyped key */
    TKV_ERR_FULL = -6,        /**< a buffer or the cache has no room */
    TKV_ERR_ABORTED = -7,     /**< the abort callback asked to stop */
    TKV_ERR_BUSY = -8,        /**< a call on a context while a decode on it runs (from its abort callback,
                                   or another thread): nothing was changed */
} tkv_status;

/**
 * Short constant name of a status.
 *
 * @param status  any value, known or not.
 * @return "TKV_OK", "TKV_ERR_FORMAT", ...; "unknown status" for a code it
 *         does not know. Never NULL; a static string.
 */
TKV_API const char *tkv_status_str(tkv_status status);

/**
 * The message of the last failure.
 *
 * @param obj  a tkv_context* for that context's last failure (the same as
 *             tkv_context_error, which says so in its type); otherwise
 *             (NULL, a tkv_model*) the calling thread's last failure. Models
 *             are shared across threads, so their failures (and those of
 *             calls with no handle yet, like tkv_model_load) are recorded per
 *             thread, like errno; a context, used by one thread at a time,
 *             keeps its own.
 * @return a NUL-terminated message, "" when nothing failed; owned by the
 *         library. It stays valid (and unchanged) until the next failing
 *         call in the same thread, or on the same context.
 */
TKV_API const char *tkv_last_error(const void *obj);

/** A token id: an index into the model's vocabulary. */
typedef int32_t tkv_token;

/** "No token" (e.g. a special id the vocabulary does not have). */
#define TKV_TOKEN_NULL ((tkv_token)-1)

/** A position in a sequence (0-based). */
typedef int32_t tkv_pos;

/** A sequence id, 0 .. n_seq_max - 1. */
typedef int32_t tkv_seq;

/* ------------------------------------------------------------------------ */
/* Types of tensors and metadata values, as GGUF numbers them                */
/* ------------------------------------------------------------------------ */

/**
 * Tensor element types (ggml numbering and names, as stored in GGUF files).
 * Numbers without a name here are types GGUF has retired.
 */
typedef enum tkv_type {
    TKV_TYPE_F32 = 0,
    TKV_TYPE_F16 = 1,
    TKV_TYPE_Q4_0 = 2,
    TKV_TYPE_Q4_1 = 3,
    TKV_TYPE_Q5_0 = 6,
    TKV_TYPE_Q5_1 = 7,
    TKV_TYPE_Q8_0 = 8,
    TKV_TYPE_Q8_1 = 9,
    TKV_TYPE_Q2_K = 10,
    TKV_TYPE_Q3_K = 11,
    TKV_TYPE_Q4_K = 12,
    TKV_TYPE_Q5_K = 13,
    TKV_TYPE_Q6_K = 14,
    TKV_TYPE_Q8_K = 15,
    TKV_TYPE_IQ2_XXS = 16,
    TKV_TYPE_IQ2_XS = 17,
    TKV_TYPE_IQ3_XXS = 18,
    TKV_TYPE_IQ1_S = 19,
    TKV_TYPE_IQ4_NL = 20,
    TKV_TYPE_IQ3_S = 21,
    TKV_TYPE_IQ2_S = 22,
    TKV_TYPE_IQ4_XS = 23,
    TKV_TYPE_I8 = 24,
    TKV_TYPE_I16 = 25,
    TKV_TYPE_I32 = 26,
    TKV_TYPE_I64 = 27,
    TKV_TYPE_F64 = 28,
    TKV_TYPE_IQ1_M = 29,
    TKV_TYPE_BF16 = 30,
    TKV_TYPE_TQ1_0 = 34,
    TKV_TYPE_TQ2_0 = 35,
    TKV_TYPE_MXFP4 = 39,
    TKV_TYPE_COUNT = 40, /**< one past the largest type number */
} tkv_type;

/**
 * Name of a tensor type.
 *
 * @param type  any number.
 * @return "F32", "Q4_K", ... (a static string), or NULL when the number is
 *         not a type.
 */
TKV_API const char *tkv_type_name(tkv_type type);

/**
 * Block geometry of a tensor type: `*block_elems` elements are stored in
 * `*block_bytes` bytes.
 *
 * @param type         any number.
 * @param block_elems  (may be NULL) receives the elements per block (1 for
 *                     F32, F16, BF16 and the integer types).
 * @param block_bytes  (may be NULL) receives the bytes per block.
 * @return TKV_OK; TKV_ERR_INVALID (outputs unchanged, no message) when the
 *         number is not a known type.
 */
TKV_API tkv_status tkv_type_block(tkv_type type, uint32_t *block_elems, uint32_t *block_bytes);

/** Metadata value types (GGUF numbering). */
typedef enum tkv_meta_type {
    TKV_META_U8 = 0,
    TKV_META_I8 = 1,
    TKV_META_U16 = 2,
    TKV_META_I16 = 3,
    TKV_META_U32 = 4,
    TKV_META_I32 = 5,
    TKV_META_F32 = 6,
    TKV_META_BOOL = 7,
    TKV_META_STRING = 8,
    TKV_META_ARRAY = 9,
    TKV_META_U64 = 10,
    TKV_META_I64 = 11,
    TKV_META_F64 = 12,
    TKV_META_TYPE_COUNT = 13, /**< one past the largest type number */
} tkv_meta_type;

/**
 * Name of a metadata type.
 *
 * @param type  any number.
 * @return "uint32", "string", "array", ... (a static string), or NULL when
 *         the number is not a type.
 */
TKV_API const char *tkv_meta_type_name(tkv_meta_type type);

#ifdef __cplusplus
}
#endif

#endif /* TOKENKV_TYPES_H */
