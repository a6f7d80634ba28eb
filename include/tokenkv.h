/**
 * @file tokenkv.h
 * @brief The public API of tokenkv: models, tokenizers, contexts over a
 *        token-aware KV cache, and sampling.
 *
 * tokenkv runs llama-family GGUF models on the CPU around a KV cache that
 * knows which tokens it holds (see docs/DESIGN.md). This header is the contract:
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
 *
 * Ownership and lifetime:
 *   - A handle returned through an `out` parameter (tkv_model, tkv_context,
 *     tkv_sampler, tkv_detok) belongs to the caller, who frees it with the
 *     matching _free. A context or detokenizer keeps a pointer to its model:
 *     free them before the model.
 *   - Pointers the library returns (strings, tensor data, logits, pieces)
 *     belong to the library; each function says how long they stay valid.
 *     Buffers the caller passes are only read or written during the call.
 *
 * Threads:
 *   - A tkv_model is immutable after load and may be shared across threads
 *     (every function that takes a const tkv_model* is safe to call
 *     concurrently on one model).
 *   - A tkv_context is used by one thread at a time. A call on a context
 *     that begins while another call on it runs (from another thread, or
 *     from that call's abort or event callback) fails with TKV_ERR_BUSY and
 *     changes nothing, not even the context's message (its message is in
 *     tkv_last_error(NULL) of the refused thread); the check and the entry
 *     are one atomic step, so two threads never both get in. This holds for
 *     every function taking a context, const ones too: const says that the
 *     call does not change what the cache holds, not that it may overlap
 *     another call. The exceptions: tkv_cache_event_image, which only the
 *     thread of the call reporting the event may use, from its callback;
 *     tkv_context_model, which reads what never changes; tkv_context_error,
 *     read by the thread using the context between its calls; and
 *     tkv_context_free, which no call may overlap. Nothing needs another
 *     thread's help to stop a decode: the abort callback (any thread may
 *     set what it reads) is the one way in from outside.
 *   - A tkv_sampler and a tkv_detok are used by one thread at a time;
 *     different ones are independent. A context runs its own thread pool
 *     inside tkv_decode and tkv_seq_sync.
 *   - Failure messages are kept per thread (tkv_last_error(NULL)), and per
 *     context for every call on a context (tkv_context_error).
 *
 * Parameter structs (tkv_model_params, tkv_context_params,
 * tkv_sampler_params) start with their size, so that they can grow: fill
 * one with its _params_init(&p, sizeof p), or the inline _default_params()
 * that does so, which are compiled into the caller with the caller's
 * sizeof. A program built against an older header then gets nothing
 * written past its shorter struct, and the fields it does not know keep
 * their defaults; one built against a newer header may pass fields this
 * library does not know only at their defaults (zero), else the call that
 * reads the struct fails with TKV_ERR_INVALID naming the byte.
 */
#ifndef TOKENKV_H
#define TOKENKV_H

#include "tokenkv_types.h"

/** Major version of this header and library (incompatible API changes). */
#define TKV_VERSION_MAJOR 0
/** Minor version (additions). */
#define TKV_VERSION_MINOR 1
/** Patch version (fixes). */
#define TKV_VERSION_PATCH 0

#ifdef __cplusplus
extern "C" {
#endif

/**
 * The library's version. Compare it with the header's TKV_VERSION_* to
 * catch a program built against one version and linked with another (the
 * shared library).
 *
 * @return major * 10000 + minor * 100 + patch of the library itself.
 */
TKV_API int tkv_version(void);

/* ------------------------------------------------------------------------ */
/* Models                                                                    */
/* ------------------------------------------------------------------------ */

/**
 * A loaded model file: metadata, tensor table, tokenizer and weights (the
 * weights stay in the mapped file). Opaque; immutable after load, so one
 * model may serve any number of contexts and threads. Free it with
 * tkv_model_free after every context and detokenizer over it.
 */
typedef struct tkv_model tkv_model;

/** Parameters of tkv_model_load; fill with tkv_model_params_init (or tkv_model_default_params). */
typedef struct tkv_model_params {
    uint32_t size;      /**< sizeof this struct as the caller's header has it: set by
                             tkv_model_params_init(&p, sizeof p) (start from it), so that the struct can grow */
    /**
     * Load metadata and the tensor table only, for tokenizer use and
     * inspection: the file is validated as GGUF, but no architecture or
     * tensor is required. A file without tensors loads only this way.
     */
    bool vocab_only;
    /**
     * Rearrange, at load, the matrices whose products this CPU runs faster
     * in another layout (today: Q4_0, IQ4_NL, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K,
     * Q6_K and IQ4_XS on CPUs with AVX2 or AVX-512 VNNI, and Q5_0 on those
     * with AVX2 alone, in groups of 16 rows), into one allocation of their size (each matrix rounded up to
     * whole groups; IQ2_XXS, IQ2_XS and IQ2_S, as planes of 2-bit codes and
     * sign bits, take 61%, 43% and 29% more than the file's rows, and on
     * CPUs without AVX-512 IQ3_XXS and IQ3_S, as a nibble an element, 41%
     * and 25% more, and IQ1_S and IQ1_M, as planes of magnitude and sign
     * bits, 48% and 54% more; these enlarging layouts are used only where
     * their growth fits in half the memory available once the file is
     * resident: /proc/meminfo's MemAvailable, or a cgroup's limit less its
     * usage, as the load finds them; else those matrices keep the file's
     * rows, as tkv_model_tensor_read_bytes shows): faster
     * prompt processing (Q4_0, IQ4_NL, Q8_0, Q4_K, Q2_K, the IQ2 types), generation
     * and batched steps, the same results bit for bit. The copy takes the
     * place of the mapped file's pages of those weights, which the load
     * releases (they come back from the file only if read again: a lower
     * kernel level forced later); it costs a pass over those weights at
     * load. Default true; false keeps only the mapped file.
     */
    bool repack;
    /**
     * Ask the kernel for transparent huge pages (2 MiB) under the repacked
     * copy (madvise MADV_HUGEPAGE; with repack only). Generation streams
     * every weight once a token, and with 4 KiB pages each page costs a TLB
     * miss and stops the hardware prefetchers: bench-1b generation 5-14%
     * faster with them (bench/RESULTS.md). Where the kernel's huge pages are
     * set to "never" it changes nothing; where memory is fragmented the
     * kernel may compact it on the first touch, which lengthens the load
     * (seconds for a few GiB). Default true; false asks for none. New in
     * this version: an older struct (a smaller size) loads with the default.
     */
    bool huge_pages;
} tkv_model_params;

/**
 * Fill a tkv_model_params with the defaults: a full model load (vocab_only
 * false, repack true, huge_pages true). Writes exactly `size` bytes (see "Parameter structs"
 * above): a struct of an older header gets the fields it has.
 *
 * @param p     the caller's struct.
 * @param size  sizeof *p as the caller's header has it.
 * @return TKV_OK; TKV_ERR_INVALID (NULL p, or size < 4: nothing written).
 */
TKV_API tkv_status tkv_model_params_init(tkv_model_params *p, size_t size);

/** The defaults of tkv_model_load, by value (tkv_model_params_init with this header's sizeof). */
static inline tkv_model_params tkv_model_default_params(void) {
    tkv_model_params p;
    (void)tkv_model_params_init(&p, sizeof p); /* cannot fail: p is there and sizeof p > 4 */
    return p;
}

/**
 * Map and validate a GGUF file.
 *
 * Every structure of the file is checked before it is used: magic, version
 * (2 or 3), counts against the file size, strings, arrays, tensor dims and
 * types, byte sizes, alignment, bounds and overlap. Unless params->vocab_only,
 * the architecture must be one tokenkv runs (`general.architecture`: llama,
 * qwen2, qwen3, qwen3moe, smollm3, olmo2, phi3, mistral3, gemma2, gemma3,
 * gpt-oss, lfm2; src/model/arch.c says what each changes; any other is
 * TKV_ERR_UNSUPPORTED naming it), its hyperparameters consistent, and every
 * tensor it needs present with the right shape.
 *
 * @param path    the GGUF file.
 * @param params  NULL for defaults; else started from tkv_model_params_init()
 *                (its size field: TKV_ERR_INVALID when unset, see tkv_model_params).
 * @param out     receives the model; the caller frees it with tkv_model_free.
 * @return TKV_OK; TKV_ERR_IO (cannot open/map), TKV_ERR_FORMAT (malformed
 *         file, or a model without tensors / a missing or mis-shaped tensor),
 *         TKV_ERR_UNSUPPORTED (an architecture or feature tokenkv does not
 *         run), TKV_ERR_NOMEM, TKV_ERR_INVALID (NULL path or out).
 *         On failure *out is set to NULL and tkv_last_error(NULL) explains.
 */
TKV_API tkv_status tkv_model_load(const char *path, const tkv_model_params *params, tkv_model **out);

/**
 * Same as tkv_model_load, over a GGUF image in memory. Used by the fuzzer
 * and by tests.
 *
 * @param data    the image; not copied: it must stay valid and unchanged
 *                until tkv_model_free.
 * @param size    its size in bytes.
 * @param params  NULL for defaults; else started from tkv_model_params_init().
 * @param out     receives the model; the caller frees it with tkv_model_free.
 * @return TKV_OK, or an error code of tkv_model_load (TKV_ERR_FORMAT for
 *         bytes that are not a GGUF image); on failure *out is NULL.
 */
TKV_API tkv_status tkv_model_load_from_memory(const void *data, size_t size, const tkv_model_params *params,
                                              tkv_model **out);

/**
 * Unmap and free a model. Every context and detokenizer over it must have
 * been freed before.
 * @param model  the model; NULL is a no-op.
 */
TKV_API void tkv_model_free(tkv_model *model);

/** Hyperparameters of a llama-family model (GGUF key in brackets). */
typedef struct tkv_hparams {
    char arch[32];          /**< [general.architecture] "llama", "qwen2", ... (tkv_model_load lists them) */
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
    float rope_freq_scale;  /**< 1 / [ARCH.rope.scaling.factor] (linear, yarn), default 1 */
    char rope_scaling[16];  /**< [ARCH.rope.scaling.type] "none", "linear", "yarn" */
    uint32_t n_ctx_orig;    /**< [ARCH.rope.scaling.original_context_length] or n_ctx_train */
    float rms_eps;          /**< [ARCH.attention.layer_norm_rms_epsilon] */
    bool tied_output;       /**< no output.weight: logits use token_embd */
} tkv_hparams;

/**
 * Copy the model's hyperparameters.
 *
 * @param model  the model.
 * @param out    receives them.
 * @return TKV_OK; TKV_ERR_INVALID (NULL argument); TKV_ERR_UNSUPPORTED when
 *         the model was loaded vocab_only and its architecture could not be
 *         read (the message says why).
 */
TKV_API tkv_status tkv_model_hparams(const tkv_model *model, tkv_hparams *out);

/**
 * GGUF version of the model's file.
 * @param model  the model (not NULL).
 * @return 2 or 3.
 */
TKV_API uint32_t tkv_model_gguf_version(const tkv_model *model);

/**
 * Size of the file (or memory image) the model was loaded from.
 * @param model  the model (not NULL).
 * @return the size in bytes.
 */
TKV_API uint64_t tkv_model_file_size(const tkv_model *model);

/**
 * Bytes of weights the load repacked for this CPU's products
 * (tkv_model_params.repack), in memory the model owns.
 * @param model  a loaded model, or NULL.
 * @return 0 when none were (repack off, no such weights, a vocab_only
 *         load) or for NULL.
 */
TKV_API uint64_t tkv_model_packed_size(const tkv_model *model);

/**
 * Bytes the enlarging packed layouts (the IQ1-IQ3 ones,
 * tkv_model_params.repack) would have added that the load left out because
 * they did not fit in half the memory available once the file is resident;
 * those matrices are read from the file's rows, at their slower speed.
 * @param model  a loaded model, or NULL.
 * @return 0 when nothing was left out (or repack off, or NULL).
 */
TKV_API uint64_t tkv_model_pack_held(const tkv_model *model);

/**
 * Bytes of one sequence's recurrent state: every delta-net and Mamba-2
 * layer's (qwen35, qwen35moe, granitehybrid, nemotron_h), the size of one
 * checkpoint (tkv_context_params.state_cache_mib; docs/library.md, "Hybrid
 * models"). Thread-safe.
 * @param model  a loaded model, or NULL.
 * @return 0 for models without such layers, for vocab_only loads and for NULL.
 */
TKV_API uint64_t tkv_model_state_size(const tkv_model *model);

/**
 * Where the tensor data section starts in the file.
 * @param model  the model (not NULL).
 * @return the offset in bytes, a multiple of tkv_model_alignment.
 */
TKV_API uint64_t tkv_model_data_offset(const tkv_model *model);

/**
 * Alignment of the tensor data (`general.alignment`, default 32).
 * @param model  the model (not NULL).
 * @return the alignment in bytes.
 */
TKV_API uint32_t tkv_model_alignment(const tkv_model *model);

/* ---- metadata ----------------------------------------------------------- */

/**
 * Number of metadata key/value pairs.
 * @param model  the model (NULL: 0).
 * @return the count, for tkv_model_meta_at.
 */
TKV_API size_t tkv_model_meta_count(const tkv_model *model);

/**
 * Key and type of the i-th metadata pair, in file order.
 *
 * @param model  the model.
 * @param i      0 .. tkv_model_meta_count() - 1.
 * @param key    (may be NULL) receives the key, NUL-terminated, owned by the
 *               model and valid as long as it.
 * @param type   (may be NULL) receives the value's type; TKV_META_ARRAY for
 *               arrays (see tkv_model_meta_array).
 * @return TKV_OK; TKV_ERR_INVALID when i is out of range.
 */
TKV_API tkv_status tkv_model_meta_at(const tkv_model *model, size_t i, const char **key, tkv_meta_type *type);

/**
 * Whether a key is present, and its type.
 *
 * @param model  the model.
 * @param key    the full key ("llama.block_count").
 * @param type   (may be NULL) receives its type.
 * @return TKV_OK; TKV_ERR_INVALID when the key is absent (or model or key is
 *         NULL). Never sets an error message: absence is an answer here.
 */
TKV_API tkv_status tkv_model_meta_find(const tkv_model *model, const char *key, tkv_meta_type *type);

/*
 * Typed getters. Each returns TKV_ERR_INVALID when the key is absent and
 * TKV_ERR_FORMAT when it holds another type (the message names the key and
 * both types); the outputs are then unchanged.
 */

/**
 * A string value.
 *
 * @param model  the model.
 * @param key    the full key.
 * @param out    (may be NULL) receives the string: NUL-terminated, owned by
 *               the model, valid as long as it.
 * @param len    (may be NULL) receives its byte length (GGUF strings may
 *               hold NUL bytes).
 * @return TKV_OK; TKV_ERR_INVALID (absent key, NULL model or key);
 *         TKV_ERR_FORMAT (not a string).
 */
TKV_API tkv_status tkv_model_meta_str(const tkv_model *model, const char *key, const char **out, size_t *len);

/**
 * An integer value: any integer or bool type, as int64.
 *
 * @param model  the model.
 * @param key    the full key.
 * @param out    receives the value.
 * @return TKV_OK; TKV_ERR_INVALID (absent key, NULL argument);
 *         TKV_ERR_FORMAT (not an integer, or a uint64 above INT64_MAX).
 */
TKV_API tkv_status tkv_model_meta_int(const tkv_model *model, const char *key, int64_t *out);

/**
 * A floating-point value: f32 or f64 (integers are accepted too), as double.
 *
 * @param model  the model.
 * @param key    the full key.
 * @param out    receives the value.
 * @return TKV_OK; TKV_ERR_INVALID (absent key, NULL argument);
 *         TKV_ERR_FORMAT (not a number).
 */
TKV_API tkv_status tkv_model_meta_float(const tkv_model *model, const char *key, double *out);

/**
 * A bool value.
 *
 * @param model  the model.
 * @param key    the full key.
 * @param out    receives the value.
 * @return TKV_OK; TKV_ERR_INVALID (absent key, NULL argument);
 *         TKV_ERR_FORMAT (not a bool).
 */
TKV_API tkv_status tkv_model_meta_bool(const tkv_model *model, const char *key, bool *out);

/**
 * An array value: its element type and length.
 *
 * @param model      the model.
 * @param key        the full key.
 * @param elem_type  (may be NULL) receives the type of the elements.
 * @param n          (may be NULL) receives the number of elements.
 * @return TKV_OK; TKV_ERR_INVALID (absent key, NULL model or key);
 *         TKV_ERR_FORMAT (not an array).
 */
TKV_API tkv_status tkv_model_meta_array(const tkv_model *model, const char *key, tkv_meta_type *elem_type,
                                        size_t *n);

/**
 * Element i of a string array.
 *
 * @param model  the model.
 * @param key    the full key.
 * @param i      0 .. length - 1.
 * @param out    (may be NULL) receives the string: NUL-terminated, owned by
 *               the model, valid as long as it.
 * @param len    (may be NULL) receives its byte length.
 * @return TKV_OK; TKV_ERR_INVALID (absent key, i >= length);
 *         TKV_ERR_FORMAT (not an array of strings).
 */
TKV_API tkv_status tkv_model_meta_arr_str(const tkv_model *model, const char *key, size_t i, const char **out,
                                          size_t *len);

/**
 * Element i of an integer or bool array, as int64.
 *
 * @param model  the model.
 * @param key    the full key.
 * @param i      0 .. length - 1.
 * @param out    receives the value.
 * @return TKV_OK; TKV_ERR_INVALID (absent key, i >= length);
 *         TKV_ERR_FORMAT (another element type).
 */
TKV_API tkv_status tkv_model_meta_arr_int(const tkv_model *model, const char *key, size_t i, int64_t *out);

/**
 * Element i of an f32 or f64 array, as double.
 *
 * @param model  the model.
 * @param key    the full key.
 * @param i      0 .. length - 1.
 * @param out    receives the value.
 * @return TKV_OK; TKV_ERR_INVALID (absent key, i >= length);
 *         TKV_ERR_FORMAT (another element type).
 */
TKV_API tkv_status tkv_model_meta_arr_float(const tkv_model *model, const char *key, size_t i, double *out);

/* ---- tensors ------------------------------------------------------------ */

/** One entry of the tensor table. Pointers live as long as the model. */
typedef struct tkv_tensor_info {
    const char *name; /**< "blk.0.attn_q.weight", NUL-terminated */
    tkv_type type;    /**< element type */
    uint32_t n_dims;  /**< 1..4 */
    uint64_t ne[4];   /**< elements per dim, ne[0] fastest; unused dims are 1 */
    uint64_t n_elems; /**< product of ne */
    uint64_t n_bytes; /**< stored size */
    uint64_t offset;  /**< from the start of the file */
    const void *data; /**< the mapped bytes */
} tkv_tensor_info;

/**
 * Number of tensors.
 * @param model  the model (NULL: 0).
 * @return the count (0 for a file without tensors), for tkv_model_tensor_at.
 */
TKV_API size_t tkv_model_tensor_count(const tkv_model *model);

/**
 * The i-th tensor, in file order.
 *
 * @param model  the model.
 * @param i      0 .. tkv_model_tensor_count() - 1.
 * @param out    receives the entry; its pointers live as long as the model.
 * @return TKV_OK; TKV_ERR_INVALID when i is out of range (or a NULL
 *         argument).
 */
TKV_API tkv_status tkv_model_tensor_at(const tkv_model *model, size_t i, tkv_tensor_info *out);

/**
 * Bytes the matrix products read for the i-th tensor (tkv_model_tensor_at's
 * order) when every row of it is used: its stored size, with the rows the
 * load repacked (tkv_model_params.repack, tkv_model_packed_size) counted at
 * their packed size. The IQ1-IQ3 layouts are 25-61% larger than the file's
 * rows; the others are within a few percent of them. Thread-safe.
 * @param model  the model, or NULL.
 * @param i      0 .. tkv_model_tensor_count() - 1.
 * @return the bytes; n_bytes of the entry when nothing of it was repacked;
 *         0 for NULL or an i out of range.
 */
TKV_API uint64_t tkv_model_tensor_read_bytes(const tkv_model *model, size_t i);

/**
 * The tensor called name.
 *
 * @param model  the model.
 * @param name   the tensor's name.
 * @param out    receives the entry; its pointers live as long as the model.
 * @return TKV_OK; TKV_ERR_INVALID (no message) when absent.
 */
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
 * through byte fallback, never rejected). Call it first with cap 0 to learn
 * the size (TKV_ERR_FULL, *n set), then with a buffer of *n tokens.
 *
 * @param model  the model (its tokenizer; vocab_only models have one too).
 * @param text   the bytes; need not be NUL-terminated.
 * @param len    their number.
 * @param flags  TKV_TOKENIZE_ADD_SPECIAL and/or TKV_TOKENIZE_PARSE_SPECIAL.
 * @param out    room for `cap` tokens (may be NULL when cap is 0).
 * @param cap    the room in tokens.
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
 * tkv_detok_create flag: the stream continues a text (tokens generated after
 * a prompt), so its first token keeps its leading space; without it the
 * space-prefix rule removes that space, as at the start of a text.
 */
#define TKV_DETOKENIZE_CONTINUE 2u

/**
 * The text of one token: "▁" as a space for SentencePiece, the byte of a
 * <0xXX> or byte-level symbol, nothing for control tokens unless
 * TKV_DETOKENIZE_SPECIAL. A piece may be part of a UTF-8 character.
 *
 * @param model  the model.
 * @param token  the token id.
 * @param flags  0 or TKV_DETOKENIZE_SPECIAL.
 * @param buf    receives the piece and a terminating NUL (may be NULL when
 *               cap is 0).
 * @param cap    the room in bytes, the NUL included.
 * @param n      receives the piece's length (without the NUL), also when
 *               it does not fit.
 * @return TKV_OK; TKV_ERR_FULL when cap < *n + 1; TKV_ERR_INVALID for a token
 *         out of range (the message names it) or a NULL n;
 *         TKV_ERR_UNSUPPORTED (no tokenizer); TKV_ERR_NOMEM.
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
 * @param model     the model.
 * @param tokens    the token ids (may be NULL when n_tokens is 0).
 * @param n_tokens  their number.
 * @param flags     0 or TKV_DETOKENIZE_SPECIAL.
 * @param buf       receives the text and a terminating NUL (may be NULL when
 *                  cap is 0).
 * @param cap       the room in bytes, the NUL included.
 * @param n         receives the text's length (without the NUL), also when
 *                  it does not fit.
 * @return TKV_OK; TKV_ERR_FULL when cap < *n + 1 (call again with a buffer
 *         of *n + 1 bytes); TKV_ERR_INVALID (a token out of range: the whole
 *         call fails and writes nothing; NULL tokens or n);
 *         TKV_ERR_UNSUPPORTED (no tokenizer); TKV_ERR_NOMEM.
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

/**
 * Create a streaming detokenizer.
 *
 * @param model  the model; must outlive the detokenizer.
 * @param flags  0, or TKV_DETOKENIZE_SPECIAL and/or TKV_DETOKENIZE_CONTINUE.
 * @param out    receives it; the caller frees it with tkv_detok_free.
 * @return TKV_OK; TKV_ERR_INVALID (NULL out); TKV_ERR_UNSUPPORTED (no
 *         tokenizer); TKV_ERR_NOMEM.
 */
TKV_API tkv_status tkv_detok_create(const tkv_model *model, unsigned flags, tkv_detok **out);

/**
 * Feed one token.
 *
 * @param d      the detokenizer.
 * @param token  the token id.
 * @param text   receives the bytes now ready (possibly none), owned by d:
 *               valid until the next call on d. Not NUL-terminated.
 * @param len    receives their number.
 * @return TKV_OK; TKV_ERR_INVALID for a token out of range or a NULL
 *         argument (nothing changes); TKV_ERR_NOMEM.
 */
TKV_API tkv_status tkv_detok_push(tkv_detok *d, tkv_token token, const char **text, size_t *len);

/**
 * Release the held-back bytes, complete character or not (at the end of a
 * stream).
 *
 * @param d     the detokenizer.
 * @param text  receives the bytes (possibly none), owned by d: valid until
 *              the next call on d.
 * @param len   receives their number.
 * @return TKV_OK; TKV_ERR_INVALID (NULL argument); TKV_ERR_NOMEM.
 */
TKV_API tkv_status tkv_detok_flush(tkv_detok *d, const char **text, size_t *len);

/**
 * Forget held bytes and start a new stream (the space-prefix rule applies
 * again to its first token, unless created with TKV_DETOKENIZE_CONTINUE).
 * @param d  the detokenizer (not NULL).
 */
TKV_API void tkv_detok_reset(tkv_detok *d);

/**
 * Free a streaming detokenizer.
 * @param d  the detokenizer; NULL is a no-op.
 */
TKV_API void tkv_detok_free(tkv_detok *d);

/**
 * Number of tokens in the vocabulary.
 * @param model  the model (NULL: 0).
 * @return token ids are 0 .. this - 1; 0 when the model has no tokenizer.
 */
TKV_API size_t tkv_vocab_size(const tkv_model *model);

/**
 * The begin-of-sequence token.
 * @param model  the model.
 * @return its id; TKV_TOKEN_NULL when the vocabulary has none.
 */
TKV_API tkv_token tkv_token_bos(const tkv_model *model);

/**
 * The end-of-sequence token.
 * @param model  the model.
 * @return its id; TKV_TOKEN_NULL when the vocabulary has none.
 */
TKV_API tkv_token tkv_token_eos(const tkv_model *model);

/**
 * The end-of-turn token (chat models).
 * @param model  the model.
 * @return its id; TKV_TOKEN_NULL when the vocabulary has none.
 */
TKV_API tkv_token tkv_token_eot(const tkv_model *model);

/**
 * Whether generation should stop at this token.
 * @param model  the model.
 * @param token  any id.
 * @return true for EOS, EOT and the vocabulary's other end-of-generation
 *         tokens; false otherwise (also for ids out of range).
 */
TKV_API bool tkv_token_is_eog(const tkv_model *model, tkv_token token);

/**
 * The raw vocabulary text of a token ("▁the", "<0x0A>", "<s>").
 * @param model  the model.
 * @param token  any id.
 * @return NUL-terminated, owned by the model and valid as long as it; NULL
 *         when the id is out of range.
 */
TKV_API const char *tkv_token_text(const tkv_model *model, tkv_token token);

/**
 * Whether TKV_TOKENIZE_ADD_SPECIAL adds a BOS for this vocabulary.
 * @param model  the model.
 * @return true when it does (SentencePiece vocabularies, usually).
 */
TKV_API bool tkv_tokenizer_adds_bos(const tkv_model *model);

/* ------------------------------------------------------------------------ */
/* Chat templates                                                            */
/* ------------------------------------------------------------------------ */
/*
 * A model's chat format is a Jinja template (GGUF `tokenizer.chat_template`).
 * tokenkv renders it as Hugging Face transformers' apply_chat_template does
 * (Jinja2 with trim_blocks and lstrip_blocks, loop controls, `do`,
 * raise_exception, strftime_now, json.dumps-style tojson), byte for byte.
 * A template is parsed once and rendered any number of times, from any
 * number of threads at once. Every render is bounded (output size, steps,
 * nesting): a template never crashes or hangs; it fails with a message that
 * names its line.
 */

/** A parsed chat template (opaque): rendered any number of times, by any number of threads at once. */
typedef struct tkv_chat_template tkv_chat_template;

/**
 * Parse a template.
 *
 * @param src  the template text (len bytes; need not be NUL-terminated);
 *             only read during the call.
 * @param len  its length in bytes.
 * @param out  receives the template (free with tkv_chat_template_free); NULL
 *             on failure.
 * @return TKV_OK; TKV_ERR_FORMAT for a syntax error (tkv_last_error(NULL):
 *         "template line N: ..."); TKV_ERR_INVALID (NULL argument);
 *         TKV_ERR_NOMEM.
 */
TKV_API tkv_status tkv_chat_template_parse(const char *src, size_t len, tkv_chat_template **out);

/**
 * Parse the model's own template (`tokenizer.chat_template`).
 *
 * @param model  the model (vocab_only loads work); the template copies what
 *               it needs, so it may outlive the model.
 * @param out    receives the template (free with tkv_chat_template_free);
 *               NULL on failure.
 * @return TKV_OK; TKV_ERR_UNSUPPORTED when the model has no template (a
 *         string key); TKV_ERR_FORMAT for a syntax error in it;
 *         TKV_ERR_INVALID (NULL argument); TKV_ERR_NOMEM.
 */
TKV_API tkv_status tkv_chat_template_from_model(const tkv_model *model, tkv_chat_template **out);

/**
 * Render a template.
 *
 * @param t        a parsed template; only read.
 * @param vars     a JSON object whose keys are the template's variables:
 *                 typically "messages" (OpenAI-style, as the client sent
 *                 them), "tools", "add_generation_prompt", "bos_token",
 *                 "eos_token" and any extras (e.g. "enable_thinking").
 *                 NULL or "" for none.
 * @param now      the date strftime_now() formats, "YYYY-MM-DD" (time of day
 *                 00:00); NULL for the current local date.
 * @param out      receives the text, NUL-terminated (free with tkv_free); NULL
 *                 on failure.
 * @param out_len  receives its length in bytes (may be NULL).
 * @return TKV_OK; TKV_ERR_INVALID when vars is not a JSON object or the
 *         template raises (its raise_exception, an undefined value used, a
 *         type error, a limit reached), with "template line N: ..." as
 *         tkv_last_error(NULL); TKV_ERR_NOMEM.
 */
TKV_API tkv_status tkv_chat_template_render(const tkv_chat_template *t, const char *vars, const char *now, char **out,
                                            size_t *out_len);

/**
 * Free a template.
 * @param t  the template; NULL is a no-op.
 */
TKV_API void tkv_chat_template_free(tkv_chat_template *t);

/**
 * Free memory the library gave to the caller (rendered text).
 * @param p  what tkv_chat_template_render returned; NULL is a no-op.
 */
TKV_API void tkv_free(void *p);

/* ------------------------------------------------------------------------ */
/* Contexts: a KV cache, a thread pool and scratch over one model            */
/* ------------------------------------------------------------------------ */

/**
 * A context computes logits for batches of tokens from any number of
 * sequences, keeping their K/V in its cache. One thread at a time may use a
 * context (an overlapping call fails with TKV_ERR_BUSY: "Threads" above);
 * the model must outlive it. tkv_context_error(ctx) gives the message of
 * the context's last failure.
 */
typedef struct tkv_context tkv_context;

/**
 * Abort callback: called by the thread that runs a decode, before each layer
 * of each forward pass (n_layer times per pass of up to n_batch tokens).
 * Returning true makes that decode fail with TKV_ERR_ABORTED, leaving the
 * cache as it was before the decode. `user` is tkv_context_params.abort_user.
 * While a decode runs, every other call on its context (from the callback,
 * or from another thread) fails with TKV_ERR_BUSY and changes nothing, the
 * context's message included; tkv_get_logits* and tkv_seq_len answer NULL
 * and 0. The callback may read state that any thread sets (an atomic flag):
 * that is how another thread stops a decode.
 */
typedef bool (*tkv_abort_fn)(void *user);

/** What a tkv_cache_event reports. */
typedef enum tkv_cache_event_kind {
    TKV_CACHE_EVENT_STORED = 1,  /**< positions from..end-1 became cached (decoded or loaded) */
    TKV_CACHE_EVENT_REMOVED = 2, /**< positions from..end-1 are being evicted (their K/V still readable
                                      with tkv_cache_event_image during the call) */
    TKV_CACHE_EVENT_CLEARED = 3  /**< tkv_cache_clear dropped every prefix nobody holds; what stays
                                      cached is reported right after as STORED events */
} tkv_cache_event_kind;

/**
 * One change of what a context's cache holds: the run of positions
 * from..end-1 of the prefix tokens[0..end) in namespace ns. Replaying
 * every event of a context in order (STORED adds the run, REMOVED takes it
 * away, CLEARED empties everything) gives exactly the cached prefixes.
 */
typedef struct tkv_cache_event {
    tkv_cache_event_kind kind; /**< what happened */
    uint64_t ns;             /**< namespace (0 for CLEARED) */
    const tkv_token *tokens; /**< (end) the whole prefix the run ends; valid during the call only */
    uint32_t from;           /**< the run's first position */
    uint32_t end;            /**< one past its last (from < end but for CLEARED) */
} tkv_cache_event;

/**
 * Cache event callback: called on the thread using the context, inside the
 * call that changes the cache (tkv_decode, tkv_seq_sync, loads, clears),
 * without any allocation by the library. It must be cheap (copy what it
 * needs and return) and must not call the context, except
 * tkv_cache_event_image during a REMOVED event. `user` is
 * tkv_context_params.cache_event_user.
 */
typedef void (*tkv_cache_event_fn)(const tkv_context *ctx, const tkv_cache_event *ev, void *user);

/** Parameters of tkv_context_create; fill with tkv_context_params_init (or tkv_context_default_params). */
typedef struct tkv_context_params {
    uint32_t size;      /**< sizeof this struct as the caller's header has it: set by
                             tkv_context_params_init(&p, sizeof p) (start from it), so that the struct can grow */
    uint32_t n_cells;   /**< KV cells (tokens held across all sequences); default 4096 */
    uint32_t n_seq_max; /**< sequence ids 0..n_seq_max-1; default 256 */
    uint32_t n_batch;   /**< tokens per forward pass; longer batches are split; default 512 */
    int n_threads;      /**< default: tkv_default_threads() (the physical cores this
                             process may use, within its cgroup CPU quota) */
    tkv_type kv_type;   /**< the K cache's type, and the V cache's unless kv_type_v says
                             otherwise: TKV_TYPE_F16 (default), TKV_TYPE_F32, or a 32-element
                             block type (TKV_TYPE_Q8_0: about half F16's memory, Q5_1, Q5_0,
                             Q4_1, Q4_0, IQ4_NL: less, with more drift; these need K/V rows of
                             a multiple of 32 elements) */
    tkv_abort_fn abort_cb; /**< optional (NULL: never abort) */
    void *abort_user;      /**< passed to abort_cb */
    /** true (default): every token attends in float and float weights keep
        one order of summation whatever the batch, so logits do not depend
        on batch composition or on how much of a prompt came from the cache:
        a request that reuses a cached prefix gets the answer a fresh
        context gives, to the bit. Its cost is within noise (bench/RESULTS.md);
        BF16 weights sum in the order of the CPU's BF16 dot product
        (vdpbf16ps, the same bits from fused multiply-adds on a CPU without
        it), which is faster than the reference's order where it exists.
        false: computed exactly as the reference implementation does (for
        comparing logits with it to the bit), so a token's logits depend
        slightly on how its prompt was split into passes: passes of 32 or
        more tokens attend in float, shorter ones in the reference's F16
        form; float weights (F32, F16, BF16) sum products in one order for a
        single token and another for a pass of several (on AVX-512 CPUs). */
    bool batch_invariant;
    /** the V cache's type (the same choices as kv_type); TKV_TYPE_COUNT
        (default): kv_type's. llama.cpp's --cache-type-v. */
    tkv_type kv_type_v;
    /** optional (NULL: none): told every change of what the cache holds
        (tkv_cache_event_fn); each call costs O(the prefix's length) */
    tkv_cache_event_fn on_cache_event;
    void *cache_event_user; /**< passed to on_cache_event */
    /** hybrid models (qwen35, granitehybrid, nemotron_h): the most memory
        recurrent-state checkpoints may take, in MiB (default 1024). A prefix
        of such a model is reusable up to its deepest checkpoint; one state
        per live sequence is kept whatever the budget (docs/library.md,
        "Hybrid models"). */
    uint32_t state_cache_mib;
    /** hybrid models: also save the state every this many positions along a
        prompt (default 32; 0: only at prompt ends and branch points); a batch
        that would save more than a quarter of the budget's checkpoints
        spaces them further apart */
    uint32_t state_interval;
    /** sliding-window models (gemma2, gemma3, gemma4, gpt-oss): 0 (default):
        every cell holds every layer's K/V, as for a global layer; > 0: the
        window layers keep their rows in a pool of this many rows, at least
        n_seq_max x the model's window (smaller: TKV_ERR_INVALID naming the
        minimum; a model without window layers: TKV_ERR_UNSUPPORTED; more
        than n_cells: n_cells, since a cell holds one row at most). Each
        live sequence keeps the rows of its last window positions; rows
        beyond those stay while the pool has room. A cached prefix is then
        reusable where the rows of the window before its end are held
        (tkv_cache_match, tkv_seq_sync's n_reused report exactly that); the
        cached tokens after that point are decoded again. Cache files,
        images and transfers are refused (TKV_ERR_UNSUPPORTED). */
    uint32_t swa_rows;
} tkv_context_params;

/**
 * Fill a tkv_context_params with the defaults listed in it. Writes exactly
 * `size` bytes (see "Parameter structs" at the top): a struct of an older
 * header gets the fields it has, and its own size.
 *
 * @param p     the caller's struct.
 * @param size  sizeof *p as the caller's header has it.
 * @return TKV_OK; TKV_ERR_INVALID (NULL p, or size < 4: nothing written).
 */
TKV_API tkv_status tkv_context_params_init(tkv_context_params *p, size_t size);

/** The defaults of tkv_context_create, by value (tkv_context_params_init with this header's sizeof). */
static inline tkv_context_params tkv_context_default_params(void) {
    tkv_context_params p;
    (void)tkv_context_params_init(&p, sizeof p); /* cannot fail: p is there and sizeof p > 4 */
    return p;
}

/**
 * The number of threads a context runs by default: the physical cores
 * among the CPUs of this process's affinity mask (SMT siblings count once),
 * at most the whole CPUs of its cgroup quota (cgroup v2 cpu.max, or v1
 * cpu.cfs_quota_us / cpu.cfs_period_us, the smallest along its cgroup's
 * path), at least 1. Facts that cannot be read (no sysfs, no cgroup) are
 * left out of the choice. Reads a few small files each call; no errors.
 *
 * @param why  NULL, or a buffer that receives why, e.g. "2 threads
 *             (affinity 2, cores 2, cgroup quota none)", truncated to fit.
 * @param cap  bytes at why (including the terminating NUL).
 * @return the thread count, >= 1.
 */
TKV_API int tkv_default_threads(char *why, size_t cap);

/**
 * Create a context over a fully loaded model (not vocab_only): it allocates
 * the whole KV cache (n_cells cells) and starts its thread pool.
 *
 * @param model   the model; not copied: it must outlive the context.
 * @param params  NULL for defaults; else started from tkv_context_params_init()
 *                (its size field: TKV_ERR_INVALID when unset or naming fields this
 *                library does not know).
 * @param out     receives the context; the caller frees it with
 *                tkv_context_free.
 * @return TKV_OK; TKV_ERR_INVALID (NULL model or out, vocab_only model,
 *         zero sizes), TKV_ERR_UNSUPPORTED (kv_type), TKV_ERR_NOMEM. On
 *         failure *out is NULL and tkv_last_error(NULL) explains.
 */
TKV_API tkv_status tkv_context_create(const tkv_model *model, const tkv_context_params *params, tkv_context **out);

/**
 * Free a context: its cache, its thread pool and its logits (pointers from
 * tkv_get_logits become invalid).
 * @param ctx  the context; NULL is a no-op.
 */
TKV_API void tkv_context_free(tkv_context *ctx);

/**
 * The model a context runs.
 * @param ctx  the context (not NULL).
 * @return the model given to tkv_context_create.
 */
TKV_API const tkv_model *tkv_context_model(const tkv_context *ctx);

/**
 * The message of the last failing call on a context, like sqlite3_errmsg:
 * every function taking a context (const ones included) records its
 * failure here as well as in the thread's slot (tkv_last_error(NULL)).
 * A call that succeeds leaves it unchanged.
 *
 * @param ctx  the context; NULL gives the calling thread's last message.
 * @return a NUL-terminated message, "" when no call on ctx has failed;
 *         owned by the context, valid until its next failing call or
 *         tkv_context_free.
 */
TKV_API const char *tkv_context_error(const tkv_context *ctx);

/**
 * A batch of tokens to decode. Token i is appended to sequence seq[i] at
 * position pos[i], which must be the sequence's current length (counting
 * earlier tokens of the same sequence in this batch): sequences grow only at
 * their end. Token i attends to its own sequence's positions 0..pos[i].
 */
typedef struct tkv_batch {
    size_t n;               /**< number of tokens */
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
 *
 * @param ctx    the context.
 * @param batch  the tokens; only read during the call.
 * @return TKV_OK; TKV_ERR_INVALID (a token out of range, a bad sequence id
 *         or position: the message names the token index); TKV_ERR_FULL (not
 *         enough free cells); TKV_ERR_ABORTED (the abort callback);
 *         TKV_ERR_NOMEM.
 */
TKV_API tkv_status tkv_decode(tkv_context *ctx, const tkv_batch *batch);

/**
 * Logits of token i of the last successful tkv_decode, or of the token list
 * of the last successful tkv_seq_sync (of n tokens: i = n - 1, its last
 * token, is the one with logits).
 *
 * @param ctx  the context.
 * @param i    index of the token in that batch, or in the synced list.
 * @return n_vocab floats, owned by the context: valid until the next call
 *         that decodes (tkv_decode, tkv_seq_sync, successful or not) or
 *         tkv_context_free. NULL when token i did not ask for logits, i is
 *         out of range, or the last decode failed.
 */
TKV_API const float *tkv_get_logits(const tkv_context *ctx, size_t i);

/**
 * Logits of the last token of the last successful tkv_decode or
 * tkv_seq_sync: what to sample the next token from.
 *
 * @param ctx  the context.
 * @return n_vocab floats, owned by the context, valid as for tkv_get_logits;
 *         NULL when that token did not ask for logits, or the last decode or
 *         sync failed.
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

/**
 * Number of tokens a sequence holds: the position its next token takes.
 * @param ctx  the context.
 * @param seq  the sequence.
 * @return the length; 0 for an empty sequence, an unknown id or a NULL ctx.
 */
TKV_API tkv_pos tkv_seq_len(const tkv_context *ctx, tkv_seq seq);

/**
 * The namespace a sequence's tokens are cached in: the one of its last
 * tkv_seq_sync or tkv_seq_attach, 0 for a sequence never given one. An
 * empty sequence (cleared, or truncated to 0) is in namespace 0 again, so
 * that whoever uses its id next never decodes into the namespace of the one
 * before. A decode-only user chooses a namespace by attaching the empty
 * list first: tkv_seq_attach(ctx, seq, ns, NULL, 0, NULL), then tkv_decode
 * into seq; truncating to a nonzero length keeps it.
 *
 * @param ctx  the context; not changed.
 * @param seq  the sequence.
 * @param ns   receives the namespace.
 * @return TKV_OK; TKV_ERR_INVALID (NULL argument, sequence out of range);
 *         TKV_ERR_BUSY (a decode on ctx is running).
 */
TKV_API tkv_status tkv_seq_namespace(const tkv_context *ctx, tkv_seq seq, uint64_t *ns);

/**
 * The tokens seq holds, read from the cache itself. Call it with cap 0 to
 * learn the size (TKV_ERR_FULL, *n set).
 *
 * @param ctx  the context.
 * @param seq  the sequence.
 * @param out  room for cap tokens (may be NULL when cap is 0).
 * @param cap  the room in tokens.
 * @param n    receives the sequence's length, also when it does not fit.
 * @return TKV_OK; TKV_ERR_FULL when cap < *n (nothing written);
 *         TKV_ERR_INVALID for a bad sequence id or NULL ctx or n (the
 *         message is in tkv_last_error(NULL)).
 */
TKV_API tkv_status tkv_seq_tokens(const tkv_context *ctx, tkv_seq seq, tkv_token *out, size_t cap, size_t *n);

/**
 * Make seq hold exactly tokens[0..n) in namespace ns: keep what is cached —
 * the longest cached prefix of the list, from any sequence of the same
 * namespace — and decode the rest in batches of n_batch. The logits of the
 * last token are then available (tkv_get_logits_last, or tkv_get_logits
 * with index n - 1): when the whole list is cached, its last token is
 * decoded again (at most one token is ever recomputed; the cached cell is
 * kept, so this needs no free cell even in a full cache).
 *
 * @param ctx       the context.
 * @param seq       the sequence; what it held before is released (and stays
 *                  cached, as a prefix no sequence holds, until evicted).
 * @param ns        namespace: prefixes never match across namespaces (use
 *                  one per tenant); 0 is the default.
 * @param tokens    the token list; only read during the call.
 * @param n         its length, at most n_cells (0 empties seq, and leaves no
 *                  logits).
 * @param n_reused  (may be NULL) how many tokens came from the cache; set on
 *                  failure too.
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
 * @param ctx       the context.
 * @param seq       the sequence; what it held before is released.
 * @param ns        namespace, as for tkv_seq_sync.
 * @param tokens    the token list; only read during the call.
 * @param n         its length.
 * @param n_reused  (may be NULL) how many tokens seq now holds, all cached.
 * @return TKV_OK; TKV_ERR_INVALID (bad sequence or token id),
 *         TKV_ERR_FULL (n exceeds the cache), TKV_ERR_NOMEM: seq unchanged.
 */
TKV_API tkv_status tkv_seq_attach(tkv_context *ctx, tkv_seq seq, uint64_t ns, const tkv_token *tokens, size_t n,
                                  size_t *n_reused);

/**
 * Keep the first n tokens of a sequence. The dropped tokens stay cached (as
 * a prefix no sequence holds) until evicted.
 *
 * @param ctx  the context.
 * @param seq  the sequence.
 * @param n    the length to keep; n >= its length: no change.
 * @return TKV_OK; TKV_ERR_INVALID (NULL ctx, bad sequence id, negative n).
 */
TKV_API tkv_status tkv_seq_truncate(tkv_context *ctx, tkv_seq seq, tkv_pos n);

/**
 * Empty a sequence; its tokens stay cached until evicted.
 * @param ctx  the context.
 * @param seq  the sequence.
 * @return TKV_OK; TKV_ERR_INVALID (NULL ctx, bad sequence id). The sequence
 *         is then in namespace 0 (tkv_seq_namespace).
 */
TKV_API tkv_status tkv_seq_clear(tkv_context *ctx, tkv_seq seq);

/**
 * Make dst hold what src holds, in src's namespace, sharing its cells
 * (nothing is copied or computed).
 *
 * @param ctx  the context.
 * @param src  the sequence to copy.
 * @param dst  the sequence to fill; what it held before is released.
 * @return TKV_OK; TKV_ERR_INVALID (NULL ctx, bad sequence id);
 *         TKV_ERR_NOMEM (dst unchanged).
 */
TKV_API tkv_status tkv_seq_fork(tkv_context *ctx, tkv_seq src, tkv_seq dst);

/**
 * How much of a token list is cached: what tkv_seq_sync would reuse (plus
 * the last token when the whole list is cached). Changes nothing, not even
 * the recency used for eviction.
 *
 * @param ctx     the context.
 * @param ns      the namespace.
 * @param tokens  the token list (may be NULL when n is 0).
 * @param n       its length.
 * @param len     receives the length of its longest cached prefix, 0 .. n.
 * @return TKV_OK; TKV_ERR_INVALID (NULL argument).
 */
TKV_API tkv_status tkv_cache_match(const tkv_context *ctx, uint64_t ns, const tkv_token *tokens, size_t n, size_t *len);

/** A pin's handle (tkv_cache_pin): nonzero and unique within its context; 0 is no pin. */
typedef uint64_t tkv_pin;

/**
 * Pin (keep resident) the longest cached prefix of a token list: it is not
 * evicted, even when no sequence holds it, until this pin is released. The
 * pin holds exactly the prefix cached at this moment: tokens decoded later
 * after it (by a sequence that extends it) are not pinned. Each pin is a
 * handle of its own: two callers pinning the same prefix hold two pins,
 * and one's tkv_cache_unpin never releases the other's.
 *
 * @param ctx     the context.
 * @param ns      the namespace.
 * @param tokens  the token list (e.g. a system prompt, decoded before).
 * @param n       its length.
 * @param len     (may be NULL) receives the length of the pinned prefix (0:
 *                nothing was cached, nothing pinned).
 * @param pin     receives the pin's handle, for tkv_cache_unpin; 0 when
 *                nothing was pinned.
 * @return TKV_OK; TKV_ERR_INVALID (NULL argument); TKV_ERR_NOMEM (nothing
 *         pinned, *pin unchanged); TKV_ERR_BUSY.
 */
TKV_API tkv_status tkv_cache_pin(tkv_context *ctx, uint64_t ns, const tkv_token *tokens, size_t n, size_t *len,
                                 tkv_pin *pin);

/**
 * Release a pin taken by tkv_cache_pin: its prefix is evictable again once
 * no sequence and no other pin holds it.
 *
 * @param ctx  the context.
 * @param pin  the handle tkv_cache_pin gave; 0 does nothing.
 * @return TKV_OK; TKV_ERR_INVALID (NULL ctx, or no pin has this handle: it
 *         was released already, or is from another context); TKV_ERR_BUSY.
 */
TKV_API tkv_status tkv_cache_unpin(tkv_context *ctx, tkv_pin pin);

/**
 * Drop every cached prefix that no sequence holds and nobody pinned; their
 * cells become free.
 * @param ctx  the context.
 * @return TKV_OK; TKV_ERR_INVALID (NULL ctx).
 */
TKV_API tkv_status tkv_cache_clear(tkv_context *ctx);

/** What the cache holds, and what it did. */
typedef struct tkv_stats {
    uint64_t cells_total;     /**< n_cells */
    uint64_t cells_used;      /**< holding a token */
    uint64_t cells_shared;    /**< used by two or more sequences */
    uint64_t cells_evictable; /**< held by no sequence, not pinned */
    uint64_t cells_pinned;    /**< in pinned prefixes */
    uint64_t nodes;           /**< prefix-index nodes */
    uint64_t lookups;         /**< tkv_seq_sync and tkv_seq_attach calls */
    uint64_t tokens_reused;   /**< tokens they took from the cache */
    uint64_t tokens_computed; /**< tokens decoded */
    uint64_t evictions;       /**< cells evicted to make room */
    uint64_t kv_bytes;        /**< K/V storage of all cells */
    uint64_t meta_bytes;      /**< what knows the tokens: per-cell token, position,
                                   free list, sequence cell lists, prefix index */
    /* hybrid models' recurrent-state checkpoints (docs/library.md, "Hybrid
       models"); all 0 for a model without recurrent state */
    uint64_t checkpoints;            /**< checkpoints held */
    uint64_t checkpoint_bytes;       /**< memory of the checkpoint slots made so far (held or free
                                          for reuse); never above checkpoint_budget_bytes */
    uint64_t checkpoint_budget_bytes;/**< the most checkpoint_bytes may reach: state_cache_mib rounded
                                          down to whole states, but at least (n_seq_max + 2) states */
    uint64_t checkpoint_evictions;   /**< checkpoints evicted (least recently used) to make room */
    uint64_t state_scratch_bytes;    /**< the decode's working states and uncommitted copies: sized by
                                          the largest batch so far, outside the budget */
} tkv_stats;

/**
 * What the cache holds, and what it did since the context was created: the
 * fields of tkv_stats up to meta_bytes, the struct as first published, so
 * that a program built against that header keeps working; the fields after
 * it (the checkpoints') are left as they are. tkv_cache_stats_ex gives
 * every field the caller's struct has.
 *
 * @param ctx  the context.
 * @param out  receives the figures (O(nodes) to gather).
 * @return TKV_OK; TKV_ERR_INVALID (NULL argument).
 */
TKV_API tkv_status tkv_cache_stats(const tkv_context *ctx, tkv_stats *out);

/**
 * As tkv_cache_stats, every field the caller's tkv_stats has: the library
 * writes min(size, its own sizeof(tkv_stats)) bytes, so the struct can grow
 * (a newer header's fields the library lacks are left as they are).
 *
 * @param ctx   the context.
 * @param out   receives the figures.
 * @param size  sizeof *out as the caller's header has it (at least the
 *              fields up to meta_bytes).
 * @return TKV_OK; TKV_ERR_INVALID (NULL argument, or size smaller than the
 *         first published struct; out untouched).
 */
TKV_API tkv_status tkv_cache_stats_ex(const tkv_context *ctx, tkv_stats *out, size_t size);

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

/** Called by tkv_cache_walk once per node, on the walk's thread. It may read the context with
    tkv_cache_node_tokens, tkv_cache_match, tkv_cache_stats, tkv_seq_tokens, tkv_seq_len and
    tkv_seq_namespace; any other call on it is refused with TKV_ERR_BUSY. */
typedef void (*tkv_cache_visit_fn)(const tkv_cache_node *node, void *user);

/**
 * Visit every node of the prefix index, roots included, parents before
 * children. O(nodes).
 *
 * @param ctx   the context.
 * @param fn    called once per node; the node it receives is valid during
 *              the call only.
 * @param user  passed to fn.
 * @return TKV_OK; TKV_ERR_INVALID for a NULL ctx or fn.
 */
TKV_API tkv_status tkv_cache_walk(const tkv_context *ctx, tkv_cache_visit_fn fn, void *user);

/**
 * The tokens of node id's run (n_tokens of them), read from the cells.
 *
 * @param ctx  the context.
 * @param id   a node id from tkv_cache_walk (ids change when the tree does).
 * @param out  room for cap tokens (may be NULL when cap is 0).
 * @param cap  the room in tokens.
 * @param n    receives n_tokens, also when they do not fit.
 * @return TKV_OK; TKV_ERR_FULL when cap < *n (nothing written);
 *         TKV_ERR_INVALID for an id that names no live node, or a NULL
 *         argument.
 */
TKV_API tkv_status tkv_cache_node_tokens(const tkv_context *ctx, uint32_t id, tkv_token *out, size_t cap, size_t *n);

/**
 * Verify every invariant of the cache: cells <-> prefix-index nodes <->
 * sequences <-> positions <-> tokens, free-cell accounting. Sliding-window
 * models (Gemma 2/3, gpt-oss) follow the same rules: every cell holds K/V
 * for every layer, window layers included, so any cached prefix is reusable
 * at any length (docs/cli.md, "Sliding-window models and the cache").
 *
 * @param ctx  the context; not changed.
 * @return TKV_OK, or TKV_ERR_FORMAT with tkv_last_error(NULL) naming the
 *         first violation (for tests and debugging; costs O(cells));
 *         TKV_ERR_INVALID (NULL ctx); TKV_ERR_NOMEM.
 */
TKV_API tkv_status tkv_cache_check(const tkv_context *ctx);

/* ---- Saving and loading the cache ----------------------------------------
 *
 * A cache file holds one prefix: its namespace, its token ids and positions,
 * and their K/V rows, with the model's fingerprint, the KV type and geometry,
 * and a checksum per block. Loading reads and checks all of it (every
 * checksum, every field against the context) before the cache changes, so a
 * restore can never pair tokens with the wrong K/V: a file from another
 * model, another KV type, another format version, or a truncated or
 * corrupted one is refused with a message naming the file and the problem,
 * and the cache is left as it was. Files are written to a temporary file in
 * the same directory, fsynced and renamed over the final name, so a reader
 * (or a restart after a crash) never sees half of one.
 */

/**
 * @brief Compute the fingerprint that cache files carry to name their model.
 *
 * An XXH3-128 hash of the hyperparameters, the tensor table (names, types,
 * shapes, and a sample of each tensor's bytes) and the tokenizer metadata
 * (vocabulary, scores, token types, merges, special ids): two different
 * models do not share one. Costs O(tensors + vocabulary), not O(weights).
 *
 * @param model  any loaded model (vocab_only too).
 * @param out    receives the 128 bits (low half first).
 * @return TKV_OK; TKV_ERR_INVALID for a NULL argument.
 */
TKV_API tkv_status tkv_model_fingerprint(const tkv_model *model, uint64_t out[2]);

/**
 * @brief Save what sequence seq holds (its tokens and their K/V) to one file.
 *
 * @param ctx   the context; not changed.
 * @param seq   the sequence (an empty one gives a file of no tokens).
 * @param path  the file, replaced atomically if it exists (written as
 *              PATH.tmp.PID first; its directory must be writable).
 * @return TKV_OK; TKV_ERR_INVALID (NULL argument, bad sequence id);
 *         TKV_ERR_IO (cannot write, fsync or rename: no file is left
 *         half-written); TKV_ERR_NOMEM. tkv_last_error(ctx) explains.
 */
TKV_API tkv_status tkv_seq_save(tkv_context *ctx, tkv_seq seq, const char *path);

/**
 * @brief Load a file written by tkv_seq_save into sequence seq.
 *
 * (A file of tkv_cache_save loads too: one that holds the K/V of only its
 * node's run needs the prefix it extends to be cached in its namespace.)
 *
 * seq then holds the file's tokens, in the file's namespace, as if
 * tkv_seq_sync had computed them: the prefix joins the prefix index, and
 * where part of it is cached already (in that namespace) the cached cells
 * are kept. Room is made as tkv_seq_sync makes it (seq's old tokens and
 * prefixes no sequence holds may be evicted, least recently used first).
 * The logits of the last decode are not changed.
 *
 * @param ctx   the context.
 * @param seq   the sequence to fill (what it held is replaced).
 * @param path  the file; read whole and validated before anything changes.
 * @return TKV_OK; on failure the cache and every sequence are unchanged:
 *         TKV_ERR_IO (cannot read); TKV_ERR_FORMAT (not a cache file,
 *         truncated, a checksum mismatch, a bad token id or position);
 *         TKV_ERR_UNSUPPORTED (another format version); TKV_ERR_INVALID
 *         (NULL argument, bad sequence id, a file of another model, KV type
 *         or cache geometry, a node file whose prefix is not cached);
 *         TKV_ERR_FULL (more tokens than cells, or not enough free and
 *         evictable cells); TKV_ERR_NOMEM. tkv_last_error(ctx) names the
 *         file and the problem.
 */
TKV_API tkv_status tkv_seq_load(tkv_context *ctx, tkv_seq seq, const char *path);

/**
 * @brief Save the cached prefixes of every namespace to a directory, most
 *        recently used first, within a size budget.
 *
 * One file per prefix-index node (HASH.tkvc, HASH a hash of what the file
 * holds: the namespace, the path's tokens and where its K/V start): its
 * path's tokens and its own run's K/V, so shared prefixes are stored once.
 * A node is saved only with its parent; nodes go in order of the latest use
 * in their subtree until the next file would pass max_bytes (smaller later
 * ones may still fit). That order is kept in DIR/manifest, written last
 * (temporary file, fsync, rename), so a file's name does not change when
 * the order does: a file already in dir with the same name and size is
 * not written again (saves are incremental). Files of an earlier save that
 * this one does not keep are removed first (dir never holds more than
 * max_bytes of them); other files are left alone. The same as
 * tkv_cache_saver_new, _snapshot and _write in a row.
 *
 * @param ctx        the context; not changed.
 * @param dir        the directory (created if missing).
 * @param max_bytes  the most bytes of files to write; 0: no limit.
 * @return TKV_OK; TKV_ERR_INVALID (NULL argument); TKV_ERR_IO (the files
 *         written so far stay, each whole); TKV_ERR_NOMEM.
 */
TKV_API tkv_status tkv_cache_save(tkv_context *ctx, const char *dir, uint64_t max_bytes);

/**
 * Incremental saves in two steps, so that the disk I/O need not run where
 * the context is used: tkv_cache_saver_snapshot (on the context's thread,
 * between decodes) chooses the files as tkv_cache_save does and copies the
 * images of those not yet on disk into the saver, within a bound;
 * tkv_cache_saver_write (on any thread, without the context) removes the
 * stale files, writes the new ones and then the manifest. A saver is used
 * by one thread at a time: the two alternate.
 */
typedef struct tkv_cache_saver tkv_cache_saver;

/** What the last tkv_cache_saver_snapshot and tkv_cache_saver_write did. */
typedef struct tkv_cache_save_info {
    uint32_t files;           /**< files the save leaves in the manifest */
    uint32_t files_written;   /**< of them, written by it (new or changed nodes) */
    uint32_t files_kept;      /**< of them, already on disk and not written again */
    uint32_t files_removed;   /**< files of earlier saves it removed */
    uint32_t nodes_deferred;  /**< nodes left for a later save: the copy bound was reached */
    uint32_t files_damaged;   /**< files on disk that failed their checks when read back: removed, and
                                   written again by the next save */
    uint64_t bytes_copied;    /**< copied by the snapshot (= written by the write on success) */
} tkv_cache_save_info;

/**
 * @brief A saver for directory dir (created if missing, mode 0700; it must
 *        be this user's and writable by nobody else).
 *
 * The files already in dir are taken as written (a later write reads each
 * back once before it keeps it).
 *
 * @param dir             the directory.
 * @param max_bytes       the most bytes of files in dir; 0: no limit.
 * @param max_copy_bytes  the most bytes one snapshot copies; the nodes past
 *                        it (and their children) wait for a later save;
 *                        0: no limit.
 * @param out             receives the saver (tkv_cache_saver_free); NULL on
 *                        failure.
 * @return TKV_OK; TKV_ERR_INVALID (NULL argument); TKV_ERR_IO; TKV_ERR_NOMEM
 *         (tkv_last_error(NULL) explains).
 */
TKV_API tkv_status tkv_cache_saver_new(const char *dir, uint64_t max_bytes, uint64_t max_copy_bytes,
                                       tkv_cache_saver **out);

/**
 * @brief Choose what the next write leaves in the directory and copy the
 *        K/V of the files it does not hold yet. Costs the copy (and a hash
 *        of each saved prefix's tokens); no disk I/O. Replaces a snapshot
 *        not written yet.
 * @param s    the saver (not being written by another thread).
 * @param ctx  the context, between two decodes; not changed.
 * @return TKV_OK; TKV_ERR_INVALID (NULL argument); TKV_ERR_BUSY; TKV_ERR_NOMEM
 *         (tkv_last_error(ctx) explains). ctx is not changed.
 */
TKV_API tkv_status tkv_cache_saver_snapshot(tkv_cache_saver *s, tkv_context *ctx);

/**
 * @brief Write the last snapshot: remove the files of earlier saves it does
 *        not keep, write the new files (each crash-safely), then the
 *        manifest, then fsync the directory. Files it keeps that this saver
 *        did not write are read back once and checked (checksums, model,
 *        that they hold what their name says); a damaged one is removed
 *        and written again by the next save. A crash at any point leaves a
 *        directory tkv_cache_load loads (each file whole; the old or the new
 *        manifest). Without a snapshot it does nothing.
 * @param s     the saver; any thread, without the context.
 * @param info  (may be NULL) what the snapshot and the write did.
 * @return TKV_OK; TKV_ERR_INVALID; TKV_ERR_IO (the files written so far
 *         stay, each whole; the next snapshot writes the rest);
 *         TKV_ERR_NOMEM (tkv_last_error(NULL) explains).
 */
TKV_API tkv_status tkv_cache_saver_write(tkv_cache_saver *s, tkv_cache_save_info *info);

/**
 * @brief Free a saver (a snapshot not written is dropped).
 * @param s  the saver, or NULL.
 */
TKV_API void tkv_cache_saver_free(tkv_cache_saver *s);

/** What tkv_cache_load_ex did. */
typedef struct tkv_cache_load_info {
    uint32_t files_loaded;       /**< files whose prefix is now cached */
    uint32_t files_skipped;      /**< files refused (see first_skip_reason) */
    uint64_t tokens_loaded;      /**< tokens whose K/V came from the files (not cached before) */
    char first_skip_reason[256]; /**< the message of the first refusal; "" if none */
} tkv_cache_load_info;

/**
 * @brief Load a directory written by tkv_cache_save: its prefixes become
 *        cached prefixes no sequence holds (evictable, as if computed).
 *
 * Files ending in .tkvc are loaded in the order of DIR/manifest (most
 * recently used first, parents before children; files it does not list, or
 * all of them without one, after, in the rank order their headers record),
 * each validated whole before the cache changes;
 * where the index already holds some of a prefix, its cells are kept.
 * Prefixes no sequence holds that were cached before are evicted when the
 * files need room; prefixes loaded by this call are not, so with too little
 * room the most recently used files are the ones loaded. A file that fails
 * validation (truncated, corrupt, another model, KV type or version), whose
 * parent prefix is not cached, or that does not fit is skipped and counted;
 * files being written (*.tmp*) are ignored.
 *
 * @param ctx   the context.
 * @param dir   the directory.
 * @param info  (may be NULL) receives the counts and the first skip reason.
 * @return TKV_OK, also when files were skipped; TKV_ERR_INVALID (NULL
 *         argument); TKV_ERR_IO (cannot read the directory); TKV_ERR_NOMEM
 *         (the cache is then unchanged).
 */
TKV_API tkv_status tkv_cache_load_ex(tkv_context *ctx, const char *dir, tkv_cache_load_info *info);

/**
 * @brief During a TKV_CACHE_EVENT_REMOVED callback, the run being evicted
 *        as a cache file image (the format tkv_cache_save writes).
 *
 * The image holds the tokens of the whole prefix (0..end-1) and the K/V of
 * the run (from..end-1), with the model fingerprint, KV type, geometry and
 * checksums: tkv_cache_load_image puts it back once the prefix 0..from-1
 * is cached. Allocates nothing; may be called only from the callback.
 *
 * @param ctx   the context passed to the callback.
 * @param buf   room for cap bytes (may be NULL when cap is 0).
 * @param cap   the room in bytes.
 * @param size  receives the image's size, also when it does not fit.
 * @return TKV_OK; TKV_ERR_FULL when cap < *size (nothing written);
 *         TKV_ERR_INVALID outside a REMOVED callback, or a NULL argument.
 */
TKV_API tkv_status tkv_cache_event_image(const tkv_context *ctx, void *buf, size_t cap, size_t *size);

/**
 * @brief Load a cache file image (tkv_cache_event_image, or a file of
 *        tkv_seq_save / tkv_cache_save read into memory) as a cached prefix
 *        no sequence holds, provided it holds what the caller asked for.
 *
 * The image is validated whole (checksums, model fingerprint, KV type,
 * geometry) and must hold namespace ns. Of its prefix, only the part on
 * which its tokens and tokens[0..n) agree is loaded (a position's K/V
 * depends only on the tokens up to it): an image that agrees on none of
 * its K/V, whatever its name or index promised, is refused, so it can
 * never put another prompt's K/V under these tokens. The part of the
 * prefix before the image's K/V must be cached. Room is made by evicting
 * prefixes nobody holds, least recently used first.
 *
 * @param ctx     the context.
 * @param data    the image.
 * @param size    its bytes.
 * @param ns      the namespace it must hold.
 * @param tokens  the tokens it must be a prefix of.
 * @param n       their count.
 * @param loaded  (may be NULL) receives the length of the prefix loaded
 *                (now cached): the image's, or the shorter part on which
 *                it agrees with tokens.
 * @return TKV_OK; on failure the cache is unchanged: TKV_ERR_FORMAT,
 *         TKV_ERR_UNSUPPORTED (not a valid image); TKV_ERR_INVALID (NULL
 *         argument, another model, KV type or geometry, another namespace,
 *         no agreeing K/V, its prefix not cached); TKV_ERR_FULL; TKV_ERR_NOMEM;
 *         TKV_ERR_BUSY (called from a callback).
 */
TKV_API tkv_status tkv_cache_load_image(tkv_context *ctx, const void *data, size_t size, uint64_t ns,
                                        const tkv_token *tokens, size_t n, size_t *loaded);

/** Flags of tkv_cache_load_image_ex. */
typedef enum tkv_image_flags {
    /** Where the image's tokens agree with all of tokens[0..n) and go on past
        them, load its whole prefix: the tokens past n too (an answer evicted
        with its prompt, or a later piece of it whose K/V all lies past n),
        whose K/V are the image's own tokens' and whose known tokens
        (tkv_seq_follow_known) then take the answer back. */
    TKV_IMAGE_CONTINUATION = 1u << 0,
} tkv_image_flags;

/**
 * @brief tkv_cache_load_image with flags (tkv_image_flags).
 *
 * With TKV_IMAGE_CONTINUATION and an image whose tokens begin with all n,
 * its whole prefix is loaded and *loaded is its length (more than n), also
 * when all its K/V lies past n: the K/V goes under the image's own tokens,
 * whose part before its K/V must be cached (as for every image). Otherwise
 * as tkv_cache_load_image: refused unless the part on which it agrees with
 * tokens[0..n) holds some of its K/V. What is loaded is a cached prefix no
 * sequence holds.
 *
 * @param ctx     the context.
 * @param data    the image.
 * @param size    its bytes.
 * @param ns      the namespace it must hold.
 * @param tokens  the tokens it must agree with (a prefix of its, with the flag).
 * @param n       their count.
 * @param flags   a set of tkv_image_flags; 0 is tkv_cache_load_image.
 * @param loaded  (may be NULL) receives the length of the prefix loaded.
 * @return TKV_OK; on failure the cache is unchanged: TKV_ERR_FORMAT,
 *         TKV_ERR_UNSUPPORTED (not a valid image); TKV_ERR_INVALID (NULL
 *         argument, a flag this library does not know (named), another
 *         model, KV type or geometry, another namespace, no agreeing K/V,
 *         its prefix not cached); TKV_ERR_FULL; TKV_ERR_NOMEM; TKV_ERR_BUSY
 *         (called from a callback).
 */
TKV_API tkv_status tkv_cache_load_image_ex(tkv_context *ctx, const void *data, size_t size, uint64_t ns,
                                           const tkv_token *tokens, size_t n, uint32_t flags, size_t *loaded);

/**
 * @brief Load a directory written by tkv_cache_save; tkv_cache_load_ex
 *        without the report.
 *
 * @param ctx  the context.
 * @param dir  the directory.
 * @return TKV_OK, also when files were skipped; TKV_ERR_INVALID (NULL
 *         argument); TKV_ERR_IO (cannot read the directory); TKV_ERR_NOMEM
 *         (the cache is then unchanged).
 */
TKV_API tkv_status tkv_cache_load(tkv_context *ctx, const char *dir);

/**
 * @brief Write the cache-file image of a cached prefix into a buffer (for a
 *        shared store of prefixes: see tkv_cache_import).
 *
 * The image is what tkv_seq_save would write for a sequence holding
 * tokens[0..n_tokens) in namespace ns, except that it carries the K/V of
 * positions kv_from..n_tokens-1 only (the token ids of the whole prefix,
 * the model fingerprint, the KV type, the geometry and checksums of every
 * block). Call it with cap 0 to learn the size. Nothing changes, not even
 * the recency used for eviction.
 *
 * @param ctx       the context.
 * @param ns        the namespace of the prefix.
 * @param tokens    the prefix; all n_tokens must be cached in ns.
 * @param n_tokens  its length, 1 .. the context's cells.
 * @param kv_from   the first position whose K/V the image holds, < n_tokens.
 * @param buf       room for cap bytes (may be NULL when cap is 0).
 * @param cap       the room in bytes.
 * @param size      receives the image's size in bytes (also on TKV_ERR_FULL).
 * @return TKV_OK; TKV_ERR_FULL when cap < *size (buf unchanged: call again
 *         with a larger buffer); TKV_ERR_INVALID (NULL argument, kv_from >=
 *         n_tokens, or the prefix is not wholly cached); TKV_ERR_NOMEM.
 *         tkv_last_error(ctx) explains.
 */
TKV_API tkv_status tkv_cache_export(tkv_context *ctx, uint64_t ns, const tkv_token *tokens, size_t n_tokens,
                                    size_t kv_from, void *buf, size_t cap, size_t *size);

/**
 * @brief Put an image written by tkv_cache_export into the cache as a cached
 *        prefix no sequence holds (evictable, as if computed), after checking
 *        that it is the prefix asked for.
 *
 * The image must pass every check tkv_seq_load makes (checksums, this
 * model's fingerprint, the context's KV type and geometry, token ids and
 * positions) and hold exactly tokens[0..n_tokens) of namespace ns with the
 * K/V of positions kv_from..n_tokens-1; tokens[0..kv_from) must already be
 * cached in ns. Where part of the prefix is cached already, its cells are
 * kept. Room is made by evicting prefixes no sequence holds, least recently
 * used first. The image is read, never kept.
 *
 * @param ctx       the context.
 * @param ns        the namespace the image must hold.
 * @param tokens    the tokens it must hold.
 * @param n_tokens  their number.
 * @param kv_from   the first position whose K/V it must hold.
 * @param image     the image (may be NULL when size is 0).
 * @param size      its size in bytes.
 * @return TKV_OK; on failure the cache and every sequence are unchanged:
 *         TKV_ERR_FORMAT (not an image, truncated, a checksum mismatch, a
 *         bad token id or position); TKV_ERR_UNSUPPORTED (another format
 *         version); TKV_ERR_INVALID (NULL argument; an image of another
 *         model, KV type or geometry; other tokens, namespace or range than
 *         asked; tokens[0..kv_from) not cached); TKV_ERR_FULL (not enough
 *         free and evictable cells); TKV_ERR_NOMEM. tkv_last_error(ctx)
 *         explains.
 */
TKV_API tkv_status tkv_cache_import(tkv_context *ctx, uint64_t ns, const tkv_token *tokens, size_t n_tokens,
                                    size_t kv_from, const void *image, size_t size);

/* ------------------------------------------------------------------------ */
/* Sampling                                                                  */
/* ------------------------------------------------------------------------ */

/** A bias added to one token's logit before sampling (OpenAI's logit_bias). */
typedef struct tkv_logit_bias {
    tkv_token token; /**< an id of the vocabulary (others are ignored) */
    float bias;      /**< added to its logit; -INFINITY bans it */
} tkv_logit_bias;

/** Parameters of tkv_sampler_create; fill with tkv_sampler_params_init (or tkv_sampler_default_params). */
typedef struct tkv_sampler_params {
    uint32_t size;      /**< sizeof this struct as the caller's header has it: set by
                             tkv_sampler_params_init(&p, sizeof p) (start from it), so that the struct can grow */
    float temperature;    /**< <= 0: greedy (argmax); default 0.8 */
    int32_t top_k;        /**< <= 0: off; default 40 */
    float top_p;          /**< >= 1: off; default 0.95 */
    float min_p;          /**< <= 0: off; default 0.05 */
    float repeat_penalty; /**< 1: off; default 1 */
    int32_t repeat_last_n; /**< tokens the penalty looks back on; default 64 */
    uint64_t seed;        /**< same seed, same choices; default 0 */
    float presence_penalty;  /**< OpenAI's: subtracted from the logit of every token the sampler has
                                  returned before (tokens recorded with tkv_sampler_accept, such as
                                  the prompt's, do not count); default 0 */
    float frequency_penalty; /**< OpenAI's: subtracted that many times for a token returned that many
                                  times; default 0 */
    const tkv_logit_bias *logit_bias; /**< n_logit_bias biases, copied by tkv_sampler_create; default
                                           NULL */
    size_t n_logit_bias;     /**< entries of logit_bias; default 0 */
} tkv_sampler_params;

/**
 * Fill a tkv_sampler_params with the defaults listed in it. Writes exactly
 * `size` bytes (see "Parameter structs" at the top).
 *
 * @param p     the caller's struct.
 * @param size  sizeof *p as the caller's header has it.
 * @return TKV_OK; TKV_ERR_INVALID (NULL p, or size < 4: nothing written).
 */
TKV_API tkv_status tkv_sampler_params_init(tkv_sampler_params *p, size_t size);

/** The defaults of tkv_sampler_create, by value (tkv_sampler_params_init with this header's sizeof). */
static inline tkv_sampler_params tkv_sampler_default_params(void) {
    tkv_sampler_params p;
    (void)tkv_sampler_params_init(&p, sizeof p); /* cannot fail: p is there and sizeof p > 4 */
    return p;
}

/**
 * A sampler: its parameters, its RNG state and the recent tokens. Opaque;
 * used by one thread at a time (one per stream of generated tokens).
 */
typedef struct tkv_sampler tkv_sampler;

/**
 * Create a sampler.
 *
 * @param params   NULL for defaults; copied. Start from tkv_sampler_params_init()
 *                 (its size field: TKV_ERR_INVALID when unset).
 * @param n_vocab  the length of the logits rows it will sample from
 *                 (tkv_vocab_size of the model).
 * @param out      receives the sampler; the caller frees it with
 *                 tkv_sampler_free.
 * @return TKV_OK; TKV_ERR_INVALID (NULL out, n_vocab 0); TKV_ERR_NOMEM.
 */
TKV_API tkv_status tkv_sampler_create(const tkv_sampler_params *params, size_t n_vocab, tkv_sampler **out);

/**
 * Free a sampler.
 * @param s  the sampler; NULL is a no-op.
 */
TKV_API void tkv_sampler_free(tkv_sampler *s);

/**
 * Choose the next token from a logits row: repetition penalty, then top-k,
 * top-p, min-p, temperature and a draw; or argmax when temperature <= 0.
 * Records the choice for the penalty. With a grammar
 * (tkv_sampler_set_grammar), only tokens the grammar allows, and the
 * grammar advances past the choice.
 *
 * @param s       the sampler.
 * @param logits  n_vocab floats (tkv_get_logits_last); only read.
 * @return the chosen token id, 0 .. n_vocab - 1. Never fails for finite
 *         logits; -1 (nothing recorded) for a NULL sampler or NULL logits,
 *         which is what tkv_get_logits* give after a failed decode.
 */
TKV_API tkv_token tkv_sampler_sample(tkv_sampler *s, const float *logits);

/**
 * The distribution the last tkv_sampler_sample drew from, after its whole
 * chain (penalties, logit biases, grammar, top-k, top-p, min-p,
 * temperature): its k most probable tokens, most probable first, with their
 * probabilities. Past the kept tokens, up to k, come tokens the chain cut,
 * with probability 0; a greedy choice (temperature <= 0) has probability 1
 * and every other token 0. Valid until the next sample on s.
 *
 * @param s      the sampler; not changed.
 * @param k      how many to list (fewer when the choice had fewer candidates).
 * @param ids    room for k token ids.
 * @param probs  room for k probabilities.
 * @param n      receives how many were listed.
 * @return TKV_OK; TKV_ERR_INVALID for a NULL argument or a sampler that has
 *         not sampled yet (the message is in tkv_last_error(NULL)).
 *         Thread-safety: as the sampler (one thread at a time).
 */
TKV_API tkv_status tkv_sampler_last_probs(const tkv_sampler *s, size_t k, tkv_token *ids, float *probs, size_t *n);

/**
 * The probability one token had in the distribution the last
 * tkv_sampler_sample drew from (see tkv_sampler_last_probs).
 *
 * @param s      the sampler; not changed.
 * @param token  the token id.
 * @return its probability; 0 for a token the chain cut, an id out of range,
 *         a NULL sampler or one that has not sampled yet.
 */
TKV_API float tkv_sampler_last_prob(const tkv_sampler *s, tkv_token token);

/**
 * Record a token as seen (e.g. the prompt's) for the repetition penalty.
 * @param s      the sampler (NULL: no-op).
 * @param token  the token id.
 */
TKV_API void tkv_sampler_accept(tkv_sampler *s, tkv_token token);

/**
 * A compiled grammar (GBNF, llama.cpp's dialect) over a model's vocabulary,
 * for constrained sampling (tkv_sampler_set_grammar). Immutable once
 * created: any number of samplers, on any threads, may use one at a time.
 */
typedef struct tkv_grammar tkv_grammar;

/**
 * Compile a GBNF grammar for a model's vocabulary.
 *
 * The dialect is llama.cpp's (its grammars/README.md): `name ::= ...` rules
 * ended by a newline (except inside parentheses, after `::=` and after
 * `|`), `|` alternatives, quoted literals with the usual backslash escapes
 * (n, t, r, backslash, quote, brackets, xHH, uHHHH, UHHHHHHHH), classes
 * such as [a-z_] and [^...], `.` (any character), parenthesized groups,
 * `*` `+` `?` `{m}` `{m,}` `{m,n}` (m, n at most 2000), and comments from
 * `#` to the end of the line.
 * It matches the Unicode code points of the UTF-8 text; a token may end
 * inside a character. Token references (in angle brackets) are not
 * supported.
 *
 * Limits keep every step bounded: 512 alternative parses (stacks) at once,
 * 2048 rules nested at one point of the text, 65536 rule expansions per
 * character and 4M per sampling step. A text beyond them is treated as
 * outside the grammar (the grammar then allows a subset of its language;
 * nothing hangs, nothing fails); ordinary grammars (JSON,
 * lists, arithmetic) stay far below them. A grammar whose parses multiply
 * is refused instead: each alternative parse costs work for every token of
 * the vocabulary at every step, so a grammar that reaches more than 64 at
 * once within the first 64 characters of some text (found by a greedy
 * probe from the start, each character the one that leaves the most) is
 * too ambiguous to run; a repetition of something that can match the same
 * text in several ways, such as ([a-z ]{0,50}){0,50}, does this.
 *
 * @param model  the model (its vocabulary: each token's text is its piece
 *               as tkv_token_to_piece gives it without
 *               TKV_DETOKENIZE_SPECIAL; control and unknown tokens have no
 *               text and never satisfy the grammar). The grammar copies
 *               what it needs: the model may be freed before it.
 * @param gbnf   the grammar text, `len` bytes (need not be NUL-terminated).
 * @param len    its length.
 * @param root   the start rule; NULL means "root".
 * @param out    receives the grammar; the caller frees it with
 *               tkv_grammar_free.
 * @return TKV_OK; TKV_ERR_INVALID with a message "grammar line L column C:
 *         ..." that says what is wrong for a syntax error, an undefined
 *         rule, a left-recursive rule, a missing start rule, a grammar too
 *         large; "grammar: too ambiguous: after the N characters '...' it
 *         holds P partial parses at once, over the limit of 64 ..." (also
 *         for a NULL out or gbnf with len > 0, or a model without a
 *         vocabulary); TKV_ERR_NOMEM.
 */
TKV_API tkv_status tkv_grammar_create(const tkv_model *model, const char *gbnf, size_t len, const char *root,
                                      tkv_grammar **out);

/**
 * Free a grammar. No sampler may still be using it.
 * @param g  the grammar; NULL is a no-op.
 */
TKV_API void tkv_grammar_free(tkv_grammar *g);

/**
 * Constrain a sampler with a grammar. From then on tkv_sampler_sample
 * returns only tokens that keep the text generated since this call (the
 * pieces of the tokens it returned, concatenated) a prefix of a sentence of
 * the grammar, and an end-of-generation token only when that text is a
 * whole sentence. Tokens recorded with tkv_sampler_accept (the prompt's)
 * do not advance the grammar. When no token at all may follow (the text is
 * a whole sentence that nothing extends, or a limit of tkv_grammar_create
 * cut every parse), the sampler returns an end-of-generation token (the
 * one with the highest logit); a vocabulary without one gets the
 * unconstrained choice.
 *
 * The first draw is unconstrained; only when the grammar rejects it does the
 * sampler compute the allowed set and draw again among those tokens. For
 * temperature sampling this is exactly a draw from the distribution
 * restricted to the allowed tokens (top-k/top-p/min-p then apply to the
 * allowed tokens). tkv_sampler_sample cannot fail: should memory run out
 * while it applies the grammar, that one choice is unconstrained.
 *
 * @param s  the sampler.
 * @param g  the grammar, for the same vocabulary size as the sampler; it
 *           must outlive the sampler's use of it. NULL removes the
 *           constraint. Setting a grammar (even the same one) restarts it at
 *           its start rule.
 * @return TKV_OK; TKV_ERR_INVALID (NULL s, or a vocabulary size other than
 *         the sampler's); TKV_ERR_NOMEM (the sampler is then unconstrained).
 */
TKV_API tkv_status tkv_sampler_set_grammar(tkv_sampler *s, const tkv_grammar *g);

/**
 * A JSON Schema as a GBNF grammar (for tkv_grammar_create) whose sentences
 * are JSON texts that validate against the schema: what structured output
 * (`response_format: json_schema`) constrains generation with.
 *
 * Enforced: type (one, or an array of types), properties (in the schema's
 * order, each key at most once) with required (optional properties may be
 * left out), additionalProperties (no extra keys are generated), items,
 * prefixItems, minItems, maxItems, enum, const, anyOf, oneOf (as anyOf),
 * allOf (of object parts), $ref to #, #/$defs/... and #/definitions/...
 * (recursion included), string minLength/maxLength (code points), format
 * date, time, date-time and uuid, and integer minimum/maximum/exclusive
 * bounds exactly (negative and large ones too); number bounds when they
 * are integers. Annotations (title, description, default, examples,
 * $schema, $comment...) are ignored. Whitespace between tokens is at most
 * one space. Where the schema leaves a value free ({}, true, an object
 * without properties), the grammar allows a bounded subset of JSON (depth 3,
 * 16 items, strings of at most 48 code points, at most one free key, so no
 * key twice), so that a sentence always ends.
 *
 * @param schema  the schema's JSON text (len bytes); only read.
 * @param len     its length.
 * @param gbnf    receives the grammar, NUL-terminated (free with tkv_free).
 * @return TKV_OK; TKV_ERR_UNSUPPORTED naming a keyword that is not
 *         enforced (pattern, uniqueItems, a fractional number bound, a
 *         format other than the above...): never silently ignored;
 *         TKV_ERR_INVALID for invalid JSON or an invalid schema (a $ref to
 *         nothing, bounds that leave no value); TKV_ERR_NOMEM.
 */
TKV_API tkv_status tkv_json_schema_to_gbnf(const char *schema, size_t len, char **gbnf);


/* ------------------------------------------------------------------------ */
/* Drafts from the cache (speculative decoding without a draft model)        */
/* ------------------------------------------------------------------------ */
/** The most draft tokens tkv_seq_decode_draft verifies in one call. */
#define TKV_DRAFT_MAX 64

/** Where tkv_seq_draft looks for drafts (bits; 0 = both). */
#define TKV_DRAFT_CACHE 1u /**< the prefix tree: what followed this prefix in any sequence before */
#define TKV_DRAFT_NGRAM 2u /**< the sequence's own tokens: what followed the last time its last 4 (then 3, 2) tokens appeared */

/**
 * Drafts from the cache: tokens the sequence is likely to continue with,
 * for tkv_seq_decode_draft to verify. The sequence's tokens followed by
 * pending[0..n_pending) (tokens sampled but not decoded yet: usually the
 * one token just sampled) are looked up
 *  - in the prefix tree (TKV_DRAFT_CACHE): when the tree holds the pending
 *    tokens right after the sequence's end, the tokens cached after them,
 *    following at each branch the one used last (a retried request, a
 *    regenerated answer, an agent repeating a step);
 *  - else in the text itself (TKV_DRAFT_NGRAM): the tokens that followed the
 *    most recent earlier occurrence of its last 4 tokens (then 3, then 2),
 *    as prompt-lookup decoding does (an edit that copies its input).
 * Changes nothing, not even the recency used for eviction. O(n_pending +
 * cap) for the tree; O(L) per n-gram length for a sequence of L tokens.
 *
 * @param ctx        the context.
 * @param seq        the sequence.
 * @param pending    tokens after the sequence's end (may be NULL when n_pending is 0).
 * @param n_pending  their count.
 * @param out        receives up to cap draft tokens.
 * @param cap        room in out (0: nothing is looked up).
 * @param n          receives how many were written (0: no draft).
 * @param sources    TKV_DRAFT_CACHE, TKV_DRAFT_NGRAM, both, or 0 for both.
 * @return TKV_OK; TKV_ERR_INVALID (NULL argument, bad sequence id, unknown
 *         source bits).
 */
TKV_API tkv_status tkv_seq_draft(tkv_context *ctx, tkv_seq seq, const tkv_token *pending, size_t n_pending,
                                 tkv_token *out, size_t cap, size_t *n, unsigned sources);

/**
 * Decode a pending token and a draft in one batch, and sample as decoding
 * one token at a time would: row 0 (after pending) is sampled with smp;
 * while the token sampled equals the next draft token (and is not an
 * end-of-generation token), the row after that draft token is sampled too.
 * out receives every sampled token, n_out of them (1 .. n_draft + 1, at
 * most max_out): the accepted drafts, then the first token that differs
 * from the draft (or that ends generation, or the one after the last
 * draft). Lossless: in the default arithmetic (batch_invariant) each row's
 * logits are those one-at-a-time decoding gives, and smp samples the same
 * rows in the same order, so the tokens, its random draws and its grammar
 * state are exactly those of decoding without drafts. (In the reference
 * order the logits of a batch differ in the last bits, and so may the
 * tokens.)
 *
 * Afterwards the sequence holds pending and the accepted drafts
 * (out[0 .. n_out - 1)); out[n_out - 1] is the next pending token, not
 * decoded, as after a one-token step; the rejected drafts' cells are
 * released (on a hybrid model the sequence then recomputes its recurrent
 * state from its deepest checkpoint at the next decode, unless every
 * draft was accepted). A draft of 0 tokens is one ordinary step.
 *
 * @param ctx      the context.
 * @param seq      the sequence (pending goes at its end).
 * @param pending  the token sampled last, to decode now.
 * @param draft    tokens proposed after it (tkv_seq_draft); may be NULL when n_draft is 0.
 * @param n_draft  their count, <= TKV_DRAFT_MAX and < n_batch; drafts past max_out - 1 are not decoded.
 * @param smp      the sampler (tkv_sampler_sample is called once per token returned).
 * @param max_out  at most this many tokens are returned (>= 1).
 * @param out      receives them (room for max_out).
 * @param n_out    receives how many.
 * @return TKV_OK; TKV_ERR_INVALID (NULL argument, bad sequence id, max_out
 *         0, n_draft >= n_batch or > TKV_DRAFT_MAX, a token out of range:
 *         the message names it); TKV_ERR_FULL, TKV_ERR_ABORTED, TKV_ERR_NOMEM as tkv_decode.
 *         On failure the cache, every sequence and the sampler are exactly
 *         as before.
 */
TKV_API tkv_status tkv_seq_decode_draft(tkv_context *ctx, tkv_seq seq, tkv_token pending, const tkv_token *draft,
                                        size_t n_draft, tkv_sampler *smp, size_t max_out, tkv_token *out,
                                        size_t *n_out);

/**
 * Called by tkv_seq_accept_draft after each token it samples, in order, to
 * handle it as one-token-at-a-time decoding would (its text, its logprobs,
 * stop strings): i is its row after the first (0 for the token after
 * pending), logits the row it was sampled from (valid until the next
 * decode), and the sampler's last-sample state (tkv_sampler_last_probs) is
 * that token's. Return false to stop: nothing more is sampled. It runs
 * outside tkv_seq_accept_draft's hold of the context, on its thread, so it
 * may call the context (tkv_get_logits, tkv_seq_len, tkv_seq_clear...),
 * but must not decode (the draft's rows would be gone), and must not change
 * the sequence except to clear it (and return false), or after the last
 * token, which comes when the sequence already holds exactly pending and
 * the accepted drafts.
 */
typedef bool (*tkv_draft_token_fn)(void *user, size_t i, tkv_token token, const float *logits);

/**
 * The verification of tkv_seq_decode_draft, on a batch the caller decoded
 * (the server verifies the drafts of many sequences after one tkv_decode):
 * the sequence's pending token at batch row `row` and its n_draft drafts at
 * rows row + 1 .. row + n_draft, each with logits, as the sequence's last
 * n_draft + 1 tokens. Row `row` is sampled with smp; while the token
 * sampled equals the next draft token (and is not an end-of-generation
 * token, and fewer than max_out were sampled) the next row is sampled too.
 * out receives the tokens sampled (1 .. n_draft + 1, at most max_out) and
 * on_token, when not NULL, sees each at once. Then the sequence holds
 * pending and the accepted drafts (out[0 .. n_out - 1)); the rejected
 * drafts' cells are released (on a hybrid model the recurrent state is
 * recomputed from the deepest checkpoint at the next decode, unless every
 * draft was accepted). When on_token stops it early, the sequence holds no
 * more than pending and the tokens returned before the last.
 *
 * Lossless as tkv_seq_decode_draft: in the default arithmetic, a batch's
 * rows are those one-at-a-time decoding gives, so the tokens, the sampler's
 * draws and its grammar state are the same as without drafts.
 *
 * @param ctx       the context whose last tkv_decode (or
 *                  tkv_seq_decode_draft) computed the rows.
 * @param seq       the sequence.
 * @param row       the batch index of its pending token.
 * @param draft     the drafts decoded after it (NULL when n_draft is 0).
 * @param n_draft   their count (<= TKV_DRAFT_MAX).
 * @param smp       the sampler (tkv_sampler_sample is called once per token returned).
 * @param max_out   at most this many tokens are returned (>= 1).
 * @param on_token  called after each token, or NULL; runs on this thread.
 * @param user      passed to on_token.
 * @param out       receives the tokens (room for min(max_out, n_draft + 1)).
 * @param n_out     receives how many.
 * @return TKV_OK; TKV_ERR_INVALID (NULL argument, bad sequence id,
 *         max_out 0, a row without logits, a sequence that does not end
 *         with the draft: the message names it), and then the cache, every
 *         sequence and the sampler are exactly as before; TKV_ERR_BUSY when
 *         the context is in another call (or another thread took it while
 *         on_token ran, or on_token decoded: TKV_ERR_INVALID), and then the
 *         n_out tokens handed to on_token stand and nothing more is done.
 */
TKV_API tkv_status tkv_seq_accept_draft(tkv_context *ctx, tkv_seq seq, size_t row, const tkv_token *draft,
                                        size_t n_draft, tkv_sampler *smp, size_t max_out,
                                        tkv_draft_token_fn on_token, void *user, tkv_token *out, size_t *n_out);

/**
 * Take the tokens smp is known to choose next from the cache, without
 * computing them. When tkv_seq_decode_draft or tkv_seq_accept_draft samples
 * a row in a batch_invariant context, whose logits depend on the prefix
 * alone, the row's cell records the token chosen and the state the sampler
 * chose it in: its parameters, its generator's state (at a temperature:
 * a greedy choice is the same whatever the seed) and the tokens it saw
 * (for any argmax sampler, temperature <= 0 with no penalty or logit bias,
 * one state: the argmax; with a grammar, at temperature <= 0 only, the
 * grammar too, whose matcher's state is then a function of the grammar and
 * the tokens returned since it was set; at a temperature a grammar's
 * rejection may draw twice, and that sampler records nothing). Where
 * the cache holds pending after the sequence's end and its cell records a
 * token chosen in smp's state, that token is known; while the known token
 * is cached after it and its cell records one chosen in the state smp would
 * then be in, that one is known too: a greedy retry, or one with the same
 * parameters and seed.
 * out receives them (n_out, at most max_out; the first end-of-generation
 * token is the last), the sequence takes the cells of pending and of every
 * token returned but the last, which is the next pending token (as after a
 * decode), and smp records each as if it had sampled it. The tokens are
 * those decoding one at a time with smp would give, so an answer found this
 * way is the same answer. On a hybrid model decoding goes on from a saved
 * recurrent state: only as many are taken as reach the deepest checkpoint
 * on the way (a generation leaves one where it ended); with window rows in
 * a pool (swa_rows), only as far as the pool holds the rows of the window
 * before the next token.
 *
 * Returns TKV_OK with n_out 0 and changes nothing when no token is known:
 * smp has a grammar, the context is not batch_invariant, nothing is
 * recorded after pending in smp's state, or no checkpoint (hybrids) or held
 * window (swa_rows) lies on the way. Known tokens come without
 * logits: tkv_sampler_last_probs has nothing to report for them. Cache
 * files and images carry the records (tkv_seq_save, tkv_cache_save,
 * tkv_cache_export); a context takes a loaded record only where the file's
 * arithmetic (the library build and kernel level that chose it) is its own.
 *
 * @param ctx      the context.
 * @param seq      the sequence (pending goes at its end).
 * @param pending  the token sampled last, not decoded.
 * @param smp      the sampler the request decodes with.
 * @param max_out  at most this many tokens (>= 1).
 * @param out      receives them (room for max_out).
 * @param n_out    receives how many (0: none known; decode pending as usual).
 * @return TKV_OK; TKV_ERR_INVALID (NULL argument, bad sequence id, max_out
 *         0); TKV_ERR_NOMEM (the sequence's list could not grow); TKV_ERR_BUSY
 *         (another call holds the context). On an error nothing changed.
 */
TKV_API tkv_status tkv_seq_follow_known(tkv_context *ctx, tkv_seq seq, tkv_token pending, tkv_sampler *smp,
                                        size_t max_out, tkv_token *out, size_t *n_out);

/**
 * How many drafts to ask for, step after step: the state of one generating
 * sequence. Zero it before the first step. Caller-owned; no locking (one
 * per sequence).
 */
typedef struct tkv_draft_budget {
    size_t max;     /**< the limit the budget was started with */
    size_t cap;     /**< the next ask */
    size_t wait;    /**< steps left without drafts */
    size_t backoff; /**< the next pause, in steps */
} tkv_draft_budget;

/**
 * The number of drafts to ask tkv_seq_draft for at this step, after last
 * step's outcome: all of max while drafts are accepted; after a partial
 * acceptance, one more than were accepted; halved after a step that
 * accepted none, and at zero no drafts for 1, 2, 4 ... 64 steps, then a
 * one-token probe. Where nothing repeats, a wrong draft costs its rows in
 * the batch, and this keeps that cost to a probe now and then; where
 * everything repeats it asks for max.
 *
 * @param b         the sequence's budget (zeroed at its first step; a max
 *                  other than the last call's starts it over).
 * @param max       the most drafts per step (capped at TKV_DRAFT_MAX; 0: none).
 * @param offered   drafts decoded at the last step (0 at the first, or when
 *                  none were: the budget then only counts the step).
 * @param accepted  how many of them were accepted.
 * @return the drafts to ask for now (0 .. max); 0 for a NULL b.
 */
TKV_API size_t tkv_draft_budget_next(tkv_draft_budget *b, size_t max, size_t offered, size_t accepted);

/* ------------------------------------------------------------------------ */
/* The machine's limits                                                      */
/* ------------------------------------------------------------------------ */

/**
 * What this machine can do at most, measured by tkv_limits_measure with a
 * context's threads: the bounds that generation and prefill are judged
 * against.
 */
typedef struct tkv_limits {
    int n_threads;         /**< threads that ran the probes (fewer than asked when the process may use fewer CPUs) */
    const char *level;     /**< the kernel level probed: "scalar", "avx2" or "avx512" (static storage) */
    uint64_t read_bytes;   /**< the size of the buffer read */
    double read_gbs;       /**< 1e9 bytes per second read from a buffer no cache holds, best of the repetitions:
                                generation, which reads every weight once per token, cannot be faster than
                                read_gbs / (weight bytes per token) */
    const char *int8_instr; /**< the instruction int8_gmacs measures, the one the level's integer products use
                                 ("vpdpbusd zmm", ...) (static storage) */
    double int8_gmacs;     /**< 1e9 8-bit multiply-adds per second, all threads, nothing waiting: prefill of
                                a model with integer products costs one per weight per token */
} tkv_limits;

/**
 * Measure the machine's limits: read a buffer of buffer_bytes (round it to
 * several times the last-level cache; 0 = 512 MiB) on n_threads threads,
 * three times, and run the int8 multiply-add of the active kernel level on
 * the same threads, three times, about 0.2 s each; the best of each is
 * kept. The results are rates of this moment: other processes on the same
 * CPUs lower them. Takes the time of the reads and 0.6 s more; allocates
 * the buffer for its duration.
 *
 * @param n_threads     threads (>= 1; 0 = the default of tkv_context_params).
 * @param buffer_bytes  the buffer's size (>= 64 KiB, or 0).
 * @param out           receives the results; it is written out_size bytes
 *                      at most (sizeof *out as the caller's header has it).
 * @param out_size      sizeof *out.
 * @return TKV_OK; TKV_ERR_INVALID (out NULL, out_size smaller than the
 *         first two fields, n_threads < 0, buffer_bytes under 64 KiB);
 *         TKV_ERR_NOMEM (the buffer or the threads); out is then untouched.
 *         tkv_last_error(NULL) explains. Thread-safe: each call has its own
 *         threads (two at once measure each other).
 */
TKV_API tkv_status tkv_limits_measure(int n_threads, size_t buffer_bytes, tkv_limits *out, size_t out_size);

#ifdef __cplusplus
}
#endif

#endif /* TOKENKV_H */
