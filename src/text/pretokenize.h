/*
 * pretokenize.h — the pre-tokenizer of a BPE vocabulary: the regular
 * expressions (PCRE2, UTF + UCP) that split text into words before byte-level
 * BPE merges them, chosen by the vocabulary's `tokenizer.ggml.pre` name.
 */
#ifndef TKV_PRETOKENIZE_H
#define TKV_PRETOKENIZE_H

#include "tokenkv_types.h"

#include <stdbool.h>
#include <stddef.h>

typedef struct tkv__pretok tkv__pretok;

/* What a pre-tokenizer type implies for the rest of the vocabulary. */
typedef struct tkv__pretok_flags {
    bool ignore_merges; /* a word that is a token is taken whole */
    bool add_bos;       /* the type's default for add_bos_token */
    bool spm_text;      /* raw UTF-8 with spaces as U+2581 and <0xXX> byte tokens (Gemma 4), not GPT-2's byte symbols */
} tkv__pretok_flags;

/* The pre-tokenizer named by `tokenizer.ggml.pre` (TKV_ERR_UNSUPPORTED for an
   unknown name) and the flags that name implies. */
tkv_status tkv__pretok_create(const char *pre_name, tkv__pretok **out, tkv__pretok_flags *flags);
void tkv__pretok_free(tkv__pretok *p);

/* A list of word spans [start, start + len) of a text. */
typedef struct tkv__spans {
    struct tkv__span {
        size_t start, len;
    } *v;
    size_t n, cap;
} tkv__spans;

tkv_status tkv__spans_push(tkv__spans *s, size_t start, size_t len);

/* Split valid UTF-8 `text` into words by the pre-tokenizer's regexes. */
tkv_status tkv__pretok_split(const tkv__pretok *p, const char *text, size_t len, tkv__spans *out);

/* Length of the valid UTF-8 sequence at s[0..n) (1..4), or 0 when invalid. */
size_t tkv__utf8_valid_len(const unsigned char *s, size_t n);

#endif
