/*
 * tokenizer.h — the tokenizer built from a model's GGUF metadata.
 *
 * Two vocabulary types, as the reference implementation has them:
 *   SPM  ("llama"): SentencePiece BPE by token scores, "▁" for spaces, a
 *        space prefix, byte fallback to <0xXX> tokens.
 *   BPE  ("gpt2"):  byte-level BPE by merge rank, after pre-tokenization by
 *        the regular expressions of the `tokenizer.ggml.pre` type.
 * Gemma 4 ("gemma4", or a pre-tokenizer type with spm_text) is SPM's text
 * (spaces as "▁", <0xXX> byte tokens, so SPM's pieces) merged by BPE's merge
 * ranks, line by line: kind SPM with spm_merges.
 * Special (control / user-defined) tokens are split out of the text first.
 *
 * Built once at model load; read-only afterwards, so shareable by threads.
 */
#ifndef TKV_TOKENIZER_H
#define TKV_TOKENIZER_H

#include "format/gguf.h"
#include "base/strmap.h"
#include "tokenkv_types.h"

#include "pretokenize.h"

typedef enum tkv__vocab_kind { TKV__VOCAB_SPM, TKV__VOCAB_BPE } tkv__vocab_kind;

/* GGUF token types (tokenizer.ggml.token_type). */
enum {
    TKV__TOK_UNDEFINED = 0,
    TKV__TOK_NORMAL = 1,
    TKV__TOK_UNKNOWN = 2,
    TKV__TOK_CONTROL = 3,
    TKV__TOK_USER_DEFINED = 4,
    TKV__TOK_UNUSED = 5,
    TKV__TOK_BYTE = 6,
};

typedef struct tkv__tokenizer {
    tkv__vocab_kind kind;
    uint32_t n_vocab;
    const tkv__str *text; /* token texts, in the model's metadata */
    float *score;         /* SPM merge priorities (zeros when absent) */
    uint8_t *type;        /* TKV__TOK_* per token */
    tkv__strmap token_map;  /* text -> id (the first id when texts repeat) */
    tkv__strmap merge_map;  /* BPE: "left right" -> rank */
    uint16_t byte_cpt[256];  /* BPE: the GPT-2 byte -> code point table */
    int32_t byte_token[256]; /* SPM: id of <0xXX> (or the 1-byte text); BPE: of the byte's symbol; -1 none */
    tkv_token bos, eos, eot, unk, pad, sep, nl;
    bool add_bos, add_eos, add_space_prefix, ignore_merges;
    bool spm_words; /* SPM: no token has "▁" after a non-"▁" byte (see tkv__spm_encode) */
    bool spm_merges; /* SPM: merged by merge_map's ranks, not by token scores (Gemma 4) */
    int32_t *special; /* control, user-defined and unknown ids, longest text first */
    size_t n_special;
    tkv_token *eog; /* end-of-generation ids */
    size_t n_eog;
    tkv__pretok *pre; /* BPE and spm_merges only */
    char pre_name[48];
} tkv__tokenizer;

/*
 * Build the tokenizer from the metadata in g. Returns TKV_ERR_FORMAT for
 * malformed tokenizer metadata (naming the key), TKV_ERR_UNSUPPORTED for an
 * unknown `tokenizer.ggml.model` or `tokenizer.ggml.pre`, TKV_ERR_NOMEM.
 * A file without `tokenizer.ggml.model` has no tokenizer: TKV_ERR_UNSUPPORTED.
 */
tkv_status tkv__tokenizer_create(const tkv__gguf *g, tkv__tokenizer **out);
void tkv__tokenizer_free(tkv__tokenizer *t);

/* A growable token list (the tokenizer's working output). */
typedef struct tkv__tokbuf {
    tkv_token *ids;
    size_t n, cap;
} tkv__tokbuf;

tkv_status tkv__tokbuf_push(tkv__tokbuf *b, tkv_token id);

/* Segment one span of raw text (no special tokens in it) and append the ids. */
tkv_status tkv__spm_encode(const tkv__tokenizer *t, const char *text, size_t len, tkv__tokbuf *out);
tkv_status tkv__bpe_encode(const tkv__tokenizer *t, const char *text, size_t len, tkv__tokbuf *out);

#endif
