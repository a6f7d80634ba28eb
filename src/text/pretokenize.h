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

/* The pre-tokenizer named by `tokenizer.ggml.pre` (TKV_ERR_UNSUPPORTED for an
   unknown name); sets the vocabulary flags that name implies. */
tkv_status tkv__pretok_create(const char *pre_name, tkv__pretok **out, bool *ignore_merges, bool *add_bos);
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
