/*
 * tokenkv.h — the public API of tokenkv.
 *
 * tokenkv runs llama-family GGUF models on the CPU around a KV cache that
 * knows which tokens it holds (see DESIGN.md). This header is the contract:
 * everything a program may use is declared and documented here, and nothing
 * else is exported from the shared library.
 *
 * Conventions that hold for every function below:
 *   - A function that can fail returns tkv_status: TKV_OK (0) on success, a
 *     negative code otherwise. Results come through out-parameters, which are
 *     left unchanged on failure unless the function says otherwise.
 *   - On failure, tkv_last_error() gives a one-line message that names the
 *     offending field, key or value (and the file offset for format errors).
 *   - The library never exits, aborts or prints on bad input.
 *   - Every _load/_create has a _free; _free(NULL) is a no-op.
 *   - A tkv_model is immutable after load and may be shared across threads.
 */
#ifndef TOKENKV_H
#define TOKENKV_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(TKV_BUILDING_LIBRARY)
#define TKV_API __attribute__((visibility("default")))
#else
#define TKV_API
#endif

#define TKV_VERSION_MAJOR 0
#define TKV_VERSION_MINOR 1
#define TKV_VERSION_PATCH 0

/* ------------------------------------------------------------------------ */
/* Status codes                                                              */
/* ------------------------------------------------------------------------ */

/** Result of every fallible call. */
typedef enum tkv_status {
    TKV_OK = 0,
    TKV_ERR_NOMEM = -1,       /**< an allocation failed */
    TKV_ERR_IO = -2,          /**< open/read/mmap/write failed */
    TKV_ERR_FORMAT = -3,      /**< a file is malformed or corrupt */
    TKV_ERR_UNSUPPORTED = -4, /**< valid, but not something tokenkv handles */
    TKV_ERR_INVALID = -5,     /**< a bad argument, or a missing/mistyped key */
    TKV_ERR_FULL = -6,        /**< a buffer or the cache has no room */
    TKV_ERR_ABORTED = -7,     /**< the abort callback asked to stop */
} tkv_status;

/**
 * Short constant name of a status ("TKV_ERR_FORMAT", ...); never NULL, also
 * for codes it does not know ("unknown status").
 */
TKV_API const char *tkv_status_str(tkv_status status);

/**
 * The message of the last failure.
 *
 * @param obj  a tkv_context* for that context's last failure; otherwise
 *             (NULL, a tkv_model*) the calling thread's last failure. Models
 *             are shared across threads, so their failures (and those of
 *             calls with no handle yet, like tkv_model_load) are recorded per
 *             thread, like errno; a context, used by one thread at a time,
 *             keeps its own.
 * @return a NUL-terminated message, "" when nothing failed. It stays valid
 *         until the next failing call in the same thread.
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

/** Tensor element types (ggml numbering, as stored in GGUF files). */
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
    TKV_TYPE_COUNT = 40,
} tkv_type;

/** Name of a tensor type ("Q4_K"), or NULL when the number is not a type. */
TKV_API const char *tkv_type_name(tkv_type type);

/**
 * Block geometry of a tensor type: `*block_elems` elements are stored in
 * `*block_bytes` bytes. Returns TKV_ERR_INVALID (outputs unchanged) when the
 * number is not a known type.
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
    TKV_META_TYPE_COUNT = 13,
} tkv_meta_type;

/** Name of a metadata type ("uint32", "string", ...), or NULL if unknown. */
TKV_API const char *tkv_meta_type_name(tkv_meta_type type);

/* ------------------------------------------------------------------------ */
/* Models                                                                    */
/* ------------------------------------------------------------------------ */

/** A loaded model file: metadata, tensor table and (later) weights. */
typedef struct tkv_model tkv_model;

/** Parameters of tkv_model_load; get defaults from tkv_model_default_params. */
typedef struct tkv_model_params {
    /**
     * Load metadata and the tensor table only, for tokenizer use and
     * inspection: the file is validated as GGUF, but no architecture or
     * tensor is required. A file without tensors loads only this way.
     */
    bool vocab_only;
} tkv_model_params;

/** Defaults: a full model load (vocab_only false). */
TKV_API tkv_model_params tkv_model_default_params(void);

/**
 * Map and validate a GGUF file.
 *
 * Every structure of the file is checked before it is used: magic, version
 * (2 or 3), counts against the file size, strings, arrays, tensor dims and
 * types, byte sizes, alignment, bounds and overlap. Unless params->vocab_only,
 * the architecture must be `llama` or `qwen2`, its hyperparameters consistent,
 * and every tensor it needs present with the right shape.
 *
 * @param path    the GGUF file.
 * @param params  NULL for defaults.
 * @param out     receives the model; the caller frees it with tkv_model_free.
 * @return TKV_OK; TKV_ERR_IO (cannot open/map), TKV_ERR_FORMAT (malformed
 *         file, or a model without tensors / a missing or mis-shaped tensor),
 *         TKV_ERR_UNSUPPORTED (an architecture or feature tokenkv does not
 *         run), TKV_ERR_NOMEM, TKV_ERR_INVALID (NULL path or out).
 *         On failure *out is set to NULL and tkv_last_error(NULL) explains.
 */
TKV_API tkv_status tkv_model_load(const char *path, const tkv_model_params *params, tkv_model **out);

/**
 * Same as tkv_model_load, over a GGUF image in memory. The bytes are not
 * copied: they must outlive the model. Used by the fuzzer and by tests.
 */
TKV_API tkv_status tkv_model_load_from_memory(const void *data, size_t size, const tkv_model_params *params,
                                              tkv_model **out);

/** Unmap and free a model. NULL is a no-op. */
TKV_API void tkv_model_free(tkv_model *model);

/** Hyperparameters of a llama-family model (GGUF key in brackets). */
typedef struct tkv_hparams {
    char arch[32];          /**< [general.architecture] "llama" or "qwen2" */
    uint32_t n_vocab;       /**< [ARCH.vocab_size] or the token list length */
    uint32_t n_ctx_train;   /**< [ARCH.context_length] */
    uint32_t n_embd;        /**< [ARCH.embedding_length] */
    uint32_t n_layer;       /**< [ARCH.block_count] */
    uint32_t n_ff;          /**< [ARCH.feed_forward_length] */
    uint32_t n_head;        /**< [ARCH.attention.head_count] */
    uint32_t n_head_kv;     /**< [ARCH.attention.head_count_kv], default n_head */
    uint32_t head_dim;      /**< [ARCH.attention.key_length], default n_embd/n_head */
    uint32_t n_rot;         /**< [ARCH.rope.dimension_count], default head_dim */
    float rope_freq_base;   /**< [ARCH.rope.freq_base], default 10000 */
    float rope_freq_scale;  /**< 1 / [ARCH.rope.scaling.factor] (linear), default 1 */
    char rope_scaling[16];  /**< [ARCH.rope.scaling.type] "none", "linear", "yarn" */
    uint32_t n_ctx_orig;    /**< [ARCH.rope.scaling.original_context_length] or n_ctx_train */
    float rms_eps;          /**< [ARCH.attention.layer_norm_rms_epsilon] */
    bool tied_output;       /**< no output.weight: logits use token_embd */
} tkv_hparams;

/**
 * Copy the model's hyperparameters to *out.
 * @return TKV_OK; TKV_ERR_UNSUPPORTED when the model was loaded vocab_only
 *         and its architecture could not be read (the message says why).
 */
TKV_API tkv_status tkv_model_hparams(const tkv_model *model, tkv_hparams *out);

/** GGUF version of the file (2 or 3). */
TKV_API uint32_t tkv_model_gguf_version(const tkv_model *model);

/** Size in bytes of the file (or memory image) the model was loaded from. */
TKV_API uint64_t tkv_model_file_size(const tkv_model *model);

/** Offset of the tensor data section in the file, and its alignment. */
TKV_API uint64_t tkv_model_data_offset(const tkv_model *model);
TKV_API uint32_t tkv_model_alignment(const tkv_model *model);

/* ---- metadata ----------------------------------------------------------- */

/** Number of metadata key/value pairs. */
TKV_API size_t tkv_model_meta_count(const tkv_model *model);

/**
 * Key and type of the i-th metadata pair, in file order. Returns
 * TKV_ERR_INVALID when i is out of range. *key stays valid as long as the
 * model. For arrays, *type is TKV_META_ARRAY.
 */
TKV_API tkv_status tkv_model_meta_at(const tkv_model *model, size_t i, const char **key, tkv_meta_type *type);

/**
 * Find a key. Returns TKV_OK and its type in *type (may be NULL), or
 * TKV_ERR_INVALID when the key is absent. Never sets the model's error.
 */
TKV_API tkv_status tkv_model_meta_find(const tkv_model *model, const char *key, tkv_meta_type *type);

/*
 * Typed getters. Each returns TKV_ERR_INVALID when the key is absent and
 * TKV_ERR_FORMAT when it holds another type (the message names the key and
 * both types); *out is then unchanged.
 *
 *   tkv_model_meta_str:   a string. *out points into the model (NUL-terminated,
 *                         valid as long as the model); *len (may be NULL) is
 *                         its byte length (strings may hold NUL bytes).
 *   tkv_model_meta_int:   any integer or bool type, as int64. A uint64 above
 *                         INT64_MAX is TKV_ERR_FORMAT.
 *   tkv_model_meta_float: f32 or f64 (integers are accepted too), as double.
 *   tkv_model_meta_bool:  bool.
 */
TKV_API tkv_status tkv_model_meta_str(const tkv_model *model, const char *key, const char **out, size_t *len);
TKV_API tkv_status tkv_model_meta_int(const tkv_model *model, const char *key, int64_t *out);
TKV_API tkv_status tkv_model_meta_float(const tkv_model *model, const char *key, double *out);
TKV_API tkv_status tkv_model_meta_bool(const tkv_model *model, const char *key, bool *out);

/**
 * An array: its element type and length. Same errors as the typed getters
 * (TKV_ERR_FORMAT when the key is not an array).
 */
TKV_API tkv_status tkv_model_meta_array(const tkv_model *model, const char *key, tkv_meta_type *elem_type,
                                        size_t *n);

/**
 * Element i of an array. _arr_str for string arrays (pointer valid as long
 * as the model), _arr_int for integer/bool arrays, _arr_float for f32/f64
 * arrays. TKV_ERR_INVALID when the key is absent or i >= length,
 * TKV_ERR_FORMAT when the element type differs.
 */
TKV_API tkv_status tkv_model_meta_arr_str(const tkv_model *model, const char *key, size_t i, const char **out,
                                          size_t *len);
TKV_API tkv_status tkv_model_meta_arr_int(const tkv_model *model, const char *key, size_t i, int64_t *out);
TKV_API tkv_status tkv_model_meta_arr_float(const tkv_model *model, const char *key, size_t i, double *out);

/* ---- tensors ------------------------------------------------------------ */

/** One entry of the tensor table. Pointers live as long as the model. */
typedef struct tkv_tensor_info {
    const char *name;
    tkv_type type;
    uint32_t n_dims;  /**< 1..4 */
    uint64_t ne[4];   /**< elements per dim, ne[0] fastest; unused dims are 1 */
    uint64_t n_elems; /**< product of ne */
    uint64_t n_bytes; /**< stored size */
    uint64_t offset;  /**< from the start of the file */
    const void *data; /**< the mapped bytes */
} tkv_tensor_info;

/** Number of tensors (0 for a vocabulary-only file). */
TKV_API size_t tkv_model_tensor_count(const tkv_model *model);

/** The i-th tensor, in file order. TKV_ERR_INVALID when i is out of range. */
TKV_API tkv_status tkv_model_tensor_at(const tkv_model *model, size_t i, tkv_tensor_info *out);

/** The tensor called name. TKV_ERR_INVALID (no message) when absent. */
TKV_API tkv_status tkv_model_tensor_find(const tkv_model *model, const char *name, tkv_tensor_info *out);


/* ------------------------------------------------------------------------ */
/* Tokenizer                                                                 */
/* ------------------------------------------------------------------------ */

/*
 * The tokenizer is built from the model's GGUF metadata at load time (also
 * for vocab_only loads). SentencePiece ("llama") and byte-level BPE ("gpt2",
 * with the pre-tokenizer of `tokenizer.ggml.pre`) produce exactly the ids of
 * the reference implementation. Functions below return TKV_ERR_UNSUPPORTED
 * when the model has no usable tokenizer (the message says why).
 */

/** tkv_tokenize flag: add the vocabulary's BOS/EOS as it specifies. */
#define TKV_TOKENIZE_ADD_SPECIAL 1u
/**
 * tkv_tokenize flag: text that matches a control token ("<|im_start|>",
 * "<s>") becomes that token. Without it, such text is ordinary text; only
 * user-defined tokens are always matched (as the reference does).
 */
#define TKV_TOKENIZE_PARSE_SPECIAL 2u

/**
 * Tokenize `len` bytes of `text` (any bytes: invalid UTF-8 is encoded
 * through byte fallback, never rejected).
 *
 * @param flags  TKV_TOKENIZE_ADD_SPECIAL and/or TKV_TOKENIZE_PARSE_SPECIAL.
 * @param out    room for `cap` tokens (may be NULL when cap is 0).
 * @param n      receives the number of tokens, also when they do not fit.
 * @return TKV_OK; TKV_ERR_FULL when *n > cap (out is then unspecified: call
 *         again with cap >= *n); TKV_ERR_INVALID (NULL text with len > 0, or
 *         NULL n); TKV_ERR_UNSUPPORTED (no tokenizer); TKV_ERR_NOMEM.
 */
TKV_API tkv_status tkv_tokenize(const tkv_model *model, const char *text, size_t len, unsigned flags, tkv_token *out,
                                size_t cap, size_t *n);

/** Detokenize flag: render control and unknown tokens as their text. */
#define TKV_DETOKENIZE_SPECIAL 1u

/**
 * The text of one token: "▁" as a space for SentencePiece, the byte of a
 * <0xXX> or byte-level symbol, nothing for control tokens unless
 * TKV_DETOKENIZE_SPECIAL. A piece may be part of a UTF-8 character.
 *
 * @param buf,cap  receives the piece and a terminating NUL.
 * @param n        receives the piece's length (without the NUL), also when
 *                 it does not fit.
 * @return TKV_OK; TKV_ERR_FULL when cap < *n + 1; TKV_ERR_INVALID for a token
 *         out of range (the message names it); TKV_ERR_UNSUPPORTED.
 */
TKV_API tkv_status tkv_token_to_piece(const tkv_model *model, tkv_token token, unsigned flags, char *buf, size_t cap,
                                      size_t *n);

/**
 * The text of a token list. For vocabularies with a space prefix
 * (SentencePiece), one leading space is removed at the start and after each
 * special token, undoing what tkv_tokenize adds, so that
 * detokenize(tokenize(x)) == x. (Two exceptions inherent to the vocabularies:
 * SentencePiece reads the character U+2581 "▁" as a space, and a vocabulary
 * without a symbol for some byte cannot give that byte back.)
 *
 * Same buffer rules and errors as tkv_token_to_piece; a token out of range
 * fails the whole call (TKV_ERR_INVALID) and writes nothing.
 */
TKV_API tkv_status tkv_detokenize(const tkv_model *model, const tkv_token *tokens, size_t n_tokens, unsigned flags,
                                  char *buf, size_t cap, size_t *n);

/**
 * A streaming detokenizer: feed generated tokens one at a time and get back
 * only complete UTF-8 characters; the bytes of an incomplete character are
 * held back until the token that completes it (or tkv_detok_flush). Follows
 * the same space-prefix rule as tkv_detokenize. One per stream; not
 * thread-safe; it keeps a pointer to the model, which must outlive it.
 */
typedef struct tkv_detok tkv_detok;

/** Create a streaming detokenizer (flags: TKV_DETOKENIZE_SPECIAL). */
TKV_API tkv_status tkv_detok_create(const tkv_model *model, unsigned flags, tkv_detok **out);

/**
 * Feed one token. *text and *len receive the bytes now ready (possibly none);
 * they stay valid until the next call on d. TKV_ERR_INVALID for a token out
 * of range (nothing changes).
 */
TKV_API tkv_status tkv_detok_push(tkv_detok *d, tkv_token token, const char **text, size_t *len);

/** Release the held-back bytes, complete or not (at the end of a stream). */
TKV_API tkv_status tkv_detok_flush(tkv_detok *d, const char **text, size_t *len);

/** Forget held bytes and start a new stream. */
TKV_API void tkv_detok_reset(tkv_detok *d);

/** Free; NULL is a no-op. */
TKV_API void tkv_detok_free(tkv_detok *d);

/** Number of tokens in the vocabulary; 0 when the model has no tokenizer. */
TKV_API size_t tkv_vocab_size(const tkv_model *model);

/** Special ids: begin/end of sequence, end of turn; TKV_TOKEN_NULL if none. */
TKV_API tkv_token tkv_token_bos(const tkv_model *model);
TKV_API tkv_token tkv_token_eos(const tkv_model *model);
TKV_API tkv_token tkv_token_eot(const tkv_model *model);

/** Whether generation should stop at this token (EOS, EOT and the like). */
TKV_API bool tkv_token_is_eog(const tkv_model *model, tkv_token token);

/** The raw vocabulary text of a token (NULL when out of range). */
TKV_API const char *tkv_token_text(const tkv_model *model, tkv_token token);

/** Whether TKV_TOKENIZE_ADD_SPECIAL adds a BOS for this vocabulary. */
TKV_API bool tkv_tokenizer_adds_bos(const tkv_model *model);

/* ------------------------------------------------------------------------ */
/* Contexts: a KV cache, a thread pool and scratch over one model            */
/* ------------------------------------------------------------------------ */

/**
 * A context computes logits for batches of tokens from any number of
 * sequences, keeping their K/V in its cache. One thread at a time may use a
 * context; the model must outlive it. tkv_last_error(ctx) gives the message
 * of the context's last failure.
 */
typedef struct tkv_context tkv_context;

/** Return true to stop a decode (checked between layers): TKV_ERR_ABORTED. */
typedef bool (*tkv_abort_fn)(void *user);

typedef struct tkv_context_params {
    uint32_t n_cells;   /**< KV cells (tokens held across all sequences); default 4096 */
    uint32_t n_seq_max; /**< sequence ids 0..n_seq_max-1; default 256 */
    uint32_t n_batch;   /**< tokens per forward pass; longer batches are split; default 512 */
    int n_threads;      /**< default: the number of online CPUs */
    tkv_type kv_type;   /**< TKV_TYPE_F16 (default), TKV_TYPE_F32, or TKV_TYPE_Q8_0 (half
                             the memory; needs K/V rows of a multiple of 32) */
    tkv_abort_fn abort_cb; /**< optional */
    void *abort_user;
    /** false (default): passes of 32 or more tokens attend in float (fast
        prefill), shorter ones in the reference's exact F16 form, so a token's
        logits depend slightly on how its prompt was split into passes.
        true: every token attends in float whatever the batch, so logits do
        not depend on batch composition or on how much of a prompt came from
        the cache (what a server that batches requests needs). */
    bool batch_invariant;
} tkv_context_params;

/** The defaults above. */
TKV_API tkv_context_params tkv_context_default_params(void);

/**
 * Create a context over a fully loaded model (not vocab_only).
 * @return TKV_OK; TKV_ERR_INVALID (vocab_only model, zero sizes),
 *         TKV_ERR_UNSUPPORTED (kv_type), TKV_ERR_NOMEM. On failure *out is
 *         NULL and tkv_last_error(NULL) explains.
 */
TKV_API tkv_status tkv_context_create(const tkv_model *model, const tkv_context_params *params, tkv_context **out);

/** Free a context and its cache; NULL is a no-op. */
TKV_API void tkv_context_free(tkv_context *ctx);

/** The model a context runs. */
TKV_API const tkv_model *tkv_context_model(const tkv_context *ctx);

/**
 * A batch of tokens to decode. Token i is appended to sequence seq[i] at
 * position pos[i], which must be the sequence's current length (counting
 * earlier tokens of the same sequence in this batch): sequences grow only at
 * their end. Token i attends to its own sequence's positions 0..pos[i].
 */
typedef struct tkv_batch {
    size_t n;
    const tkv_token *token; /**< (n) */
    const tkv_pos *pos;     /**< (n) */
    const tkv_seq *seq;     /**< (n) */
    const bool *logits;     /**< (n) which tokens get logits; NULL: only the last */
} tkv_batch;

/**
 * Run the model on a batch and keep the K/V of its tokens.
 *
 * Transactional: on any failure the cache and every sequence are exactly as
 * before the call, and the logits of the previous batch are gone.
 * @return TKV_OK; TKV_ERR_INVALID (a token out of range, a bad sequence id
 *         or position: the message names the token index); TKV_ERR_FULL (not
 *         enough free cells); TKV_ERR_ABORTED (the abort callback);
 *         TKV_ERR_NOMEM.
 */
TKV_API tkv_status tkv_decode(tkv_context *ctx, const tkv_batch *batch);

/**
 * Logits (n_vocab floats) of token i of the last successful tkv_decode, or
 * NULL when token i did not ask for logits. Valid until the next decode.
 */
TKV_API const float *tkv_get_logits(const tkv_context *ctx, size_t i);

/**
 * Logits of the last token of the last successful tkv_decode or
 * tkv_seq_sync, or NULL when that token did not ask for logits.
 */
TKV_API const float *tkv_get_logits_last(const tkv_context *ctx);

/* ---- sequences and the token-aware cache ---------------------------------
 *
 * Every cell of the cache knows the token it was computed from and its
 * position; a prefix index over all cached tokens, per namespace, finds the
 * longest cached prefix of any token list. Sequences share the cells of
 * common prefixes (nothing is copied). A prefix no sequence holds stays
 * cached until its cells are needed (least recently used first) unless it
 * is pinned. Ask the cache what it holds; never keep a copy of your own.
 */

/** Number of tokens sequence seq holds (0 for an unknown id). */
TKV_API tkv_pos tkv_seq_len(const tkv_context *ctx, tkv_seq seq);

/**
 * The tokens seq holds, read from the cache itself.
 * @return TKV_OK; TKV_ERR_FULL when cap < *n (nothing written);
 *         TKV_ERR_INVALID for a bad sequence id.
 */
TKV_API tkv_status tkv_seq_tokens(const tkv_context *ctx, tkv_seq seq, tkv_token *out, size_t cap, size_t *n);

/**
 * Make seq hold exactly tokens[0..n) in namespace ns: keep what is cached —
 * the longest cached prefix of the list, from any sequence of the same
 * namespace — and decode the rest in batches of n_batch. The logits of the
 * last token are then available (tkv_get_logits_last): when the whole list
 * is cached, its last token is decoded again (at most one token is ever
 * recomputed; its K/V is identical and the cached cell is kept).
 *
 * @param ns        namespace: prefixes never match across namespaces (use
 *                  one per tenant); 0 is the default.
 * @param n_reused  (may be NULL) how many tokens came from the cache.
 * @return TKV_OK; TKV_ERR_INVALID (bad sequence or token id: nothing
 *         changed); TKV_ERR_FULL, TKV_ERR_ABORTED, TKV_ERR_NOMEM from a
 *         decode, after which seq holds the prefix of tokens cached or
 *         decoded so far (tkv_seq_len says how long).
 */
TKV_API tkv_status tkv_seq_sync(tkv_context *ctx, tkv_seq seq, uint64_t ns, const tkv_token *tokens, size_t n,
                                size_t *n_reused);

/**
 * The first half of tkv_seq_sync, for callers that schedule decoding
 * themselves (a server batching many sequences): make seq hold the longest
 * cached prefix of tokens[0..n) in namespace ns, at most n - 1 tokens so that
 * at least the last token is left to decode for its logits; decode nothing.
 * The caller then decodes tokens[*n_reused..n) with tkv_decode, in any
 * batches, at positions *n_reused.. of seq.
 *
 * @param n_reused  (may be NULL) how many tokens seq now holds, all cached.
 * @return TKV_OK; TKV_ERR_INVALID (bad sequence or token id),
 *         TKV_ERR_FULL (n exceeds the cache), TKV_ERR_NOMEM: seq unchanged.
 */
TKV_API tkv_status tkv_seq_attach(tkv_context *ctx, tkv_seq seq, uint64_t ns, const tkv_token *tokens, size_t n,
                                  size_t *n_reused);

/** Keep the first n tokens of seq (n >= its length: no change). The dropped
    tokens stay cached (unreferenced) until evicted. */
TKV_API tkv_status tkv_seq_truncate(tkv_context *ctx, tkv_seq seq, tkv_pos n);

/** Empty a sequence (its prefix stays cached). */
TKV_API tkv_status tkv_seq_clear(tkv_context *ctx, tkv_seq seq);

/** Make dst hold what src holds, in the same namespace, sharing its cells. */
TKV_API tkv_status tkv_seq_fork(tkv_context *ctx, tkv_seq src, tkv_seq dst);

/** Length of the longest cached prefix of tokens[0..n) in ns; changes nothing. */
TKV_API tkv_status tkv_cache_match(const tkv_context *ctx, uint64_t ns, const tkv_token *tokens, size_t n, size_t *len);

/**
 * Pin (keep resident) the longest cached prefix of tokens[0..n) in ns;
 * *len (may be NULL) receives its length. Pins count: unpin as many times.
 */
TKV_API tkv_status tkv_cache_pin(tkv_context *ctx, uint64_t ns, const tkv_token *tokens, size_t n, size_t *len);
TKV_API tkv_status tkv_cache_unpin(tkv_context *ctx, uint64_t ns, const tkv_token *tokens, size_t n);

/** Drop every cached prefix that no sequence holds and nobody pinned. */
TKV_API tkv_status tkv_cache_clear(tkv_context *ctx);

/** What the cache holds, and what it did. */
typedef struct tkv_stats {
    uint64_t cells_total;     /**< n_cells */
    uint64_t cells_used;      /**< holding a token */
    uint64_t cells_shared;    /**< used by two or more sequences */
    uint64_t cells_evictable; /**< held by no sequence, not pinned */
    uint64_t cells_pinned;
    uint64_t nodes;           /**< prefix-index nodes */
    uint64_t lookups;         /**< tkv_seq_sync and tkv_seq_attach calls */
    uint64_t tokens_reused;   /**< tokens they took from the cache */
    uint64_t tokens_computed; /**< tokens decoded */
    uint64_t evictions;       /**< cells evicted to make room */
    uint64_t kv_bytes;        /**< K/V storage of all cells */
    uint64_t meta_bytes;      /**< what knows the tokens: per-cell token, position,
                                   free list, sequence cell lists, prefix index */
} tkv_stats;

TKV_API tkv_status tkv_cache_stats(const tkv_context *ctx, tkv_stats *out);

/** Parent id of a namespace's root node in tkv_cache_node. */
#define TKV_CACHE_NODE_NONE UINT32_MAX

/** One node of the prefix index: a run of tokens that extends its parent's prefix. */
typedef struct tkv_cache_node {
    uint32_t id;       /**< stable while the node lives (splits and evictions change the tree) */
    uint32_t parent;   /**< the parent's id; TKV_CACHE_NODE_NONE for a namespace's root */
    uint64_t ns;       /**< namespace */
    uint32_t depth;    /**< position of the run's first token (the length of the parent's prefix) */
    uint32_t n_tokens; /**< tokens in the run (0 for a root) */
    uint32_t refs;     /**< sequences whose end lies in this node or below it */
    uint32_t pins;     /**< pins on this node or below it */
    uint32_t hits;     /**< look-ups that went through or ended in it */
    uint64_t last_use; /**< logical clock of the last look-up or insert through it (larger: more recent) */
} tkv_cache_node;

/** Called by tkv_cache_walk once per node; must not change the context. */
typedef void (*tkv_cache_visit_fn)(const tkv_cache_node *node, void *user);

/**
 * Visit every node of the prefix index, roots included, parents before
 * children. O(nodes).
 * @return TKV_OK; TKV_ERR_INVALID for a NULL ctx or fn.
 */
TKV_API tkv_status tkv_cache_walk(const tkv_context *ctx, tkv_cache_visit_fn fn, void *user);

/**
 * The tokens of node id's run (n_tokens of them), read from the cells.
 * @param out,cap  room for the tokens; *n receives n_tokens.
 * @return TKV_OK; TKV_ERR_FULL when cap < *n (nothing written);
 *         TKV_ERR_INVALID for an id that names no live node.
 */
TKV_API tkv_status tkv_cache_node_tokens(const tkv_context *ctx, uint32_t id, tkv_token *out, size_t cap, size_t *n);

/**
 * Verify every invariant of the cache: cells <-> prefix-index nodes <->
 * sequences <-> positions <-> tokens, free-cell accounting.
 * @return TKV_OK, or TKV_ERR_FORMAT with tkv_last_error(NULL) naming the
 *         first violation (for tests and debugging; costs O(cells)).
 */
TKV_API tkv_status tkv_cache_check(const tkv_context *ctx);

/* ------------------------------------------------------------------------ */
/* Sampling                                                                  */
/* ------------------------------------------------------------------------ */

typedef struct tkv_sampler_params {
    float temperature;    /**< <= 0: greedy (argmax); default 0.8 */
    int32_t top_k;        /**< <= 0: off; default 40 */
    float top_p;          /**< >= 1: off; default 0.95 */
    float min_p;          /**< <= 0: off; default 0.05 */
    float repeat_penalty; /**< 1: off; default 1 */
    int32_t repeat_last_n; /**< tokens the penalty looks back on; default 64 */
    uint64_t seed;        /**< same seed, same choices; default 0 */
} tkv_sampler_params;

/** The defaults above. */
TKV_API tkv_sampler_params tkv_sampler_default_params(void);

/** A sampler: its parameters, its RNG state and the recent tokens. */
typedef struct tkv_sampler tkv_sampler;

TKV_API tkv_status tkv_sampler_create(const tkv_sampler_params *params, size_t n_vocab, tkv_sampler **out);
TKV_API void tkv_sampler_free(tkv_sampler *s);

/**
 * Choose the next token from a logits row (n_vocab floats): repetition
 * penalty, then top-k, top-p, min-p, temperature and a draw; or argmax when
 * temperature <= 0. Records the choice for the penalty. Never fails for
 * finite logits; the row is not modified.
 */
TKV_API tkv_token tkv_sampler_sample(tkv_sampler *s, const float *logits);

/** Record a token as seen (e.g. the prompt's) for the repetition penalty. */
TKV_API void tkv_sampler_accept(tkv_sampler *s, tkv_token token);

#ifdef __cplusplus
}
#endif

#endif /* TOKENKV_H */
