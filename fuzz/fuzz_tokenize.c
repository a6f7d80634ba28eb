/*
 * fuzz_tokenize.c — libFuzzer target for the tokenizers.
 *
 * The first byte picks a vocabulary and flags; the rest is the text. Any
 * bytes must tokenize to ids in range, detokenize, stream to the same text,
 * and (where the vocabulary can, see test_tokenizer.c) round-trip exactly.
 */
#define _GNU_SOURCE /* memmem */
#include "tokenkv.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_util.h"

static const char *const files[] = {"stories260K.gguf", "vocab/ggml-vocab-llama-spm.gguf",
                                    "vocab/ggml-vocab-gpt-2.gguf", "vocab/ggml-vocab-deepseek-coder.gguf"};
static tkv_model *models[4];

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    for (int i = 0; i < 4; i++) models[i] = fuzz_load_model("fuzz_tokenize", files[i], true);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1 || size > 4096) return 0;
    const int v = data[0] & 3;
    const unsigned tflags = (data[0] >> 2) & 3; /* ADD_SPECIAL, PARSE_SPECIAL */
    const char *text = (const char *)data + 1;
    const size_t len = size - 1;
    tkv_model *m = models[v];

    size_t n = 0;
    tkv_status st = tkv_tokenize(m, text, len, tflags, NULL, 0, &n);
    if (st != TKV_OK && st != TKV_ERR_FULL) abort();
    tkv_token *t = malloc((n ? n : 1) * sizeof *t);
    size_t n2;
    if (tkv_tokenize(m, text, len, tflags, t, n, &n2) != TKV_OK || n2 != n) abort();
    for (size_t i = 0; i < n; i++)
        if (t[i] < 0 || (size_t)t[i] >= tkv_vocab_size(m)) abort();

    /* detokenize: control tokens rendered when they were parsed from text */
    const unsigned dflags = (tflags & TKV_TOKENIZE_PARSE_SPECIAL) ? TKV_DETOKENIZE_SPECIAL : 0;
    size_t cap = 8 * len + 64, out_len;
    char *out = malloc(cap);
    if (tkv_detokenize(m, t, n, dflags, out, cap, &out_len) != TKV_OK) abort();
    const bool exact_possible = v != 3 && !memmem(text, len, "\xE2\x96\x81", 3) &&
                                !((tflags & TKV_TOKENIZE_ADD_SPECIAL) && (tflags & TKV_TOKENIZE_PARSE_SPECIAL));
    if (exact_possible && (out_len != len || memcmp(out, text, len) != 0)) abort();

    /* streaming gives the same bytes */
    tkv_detok *d;
    if (tkv_detok_create(m, dflags, &d) != TKV_OK) abort();
    size_t acc = 0;
    for (size_t i = 0; i <= n; i++) {
        const char *s;
        size_t sl;
        if ((i < n ? tkv_detok_push(d, t[i], &s, &sl) : tkv_detok_flush(d, &s, &sl)) != TKV_OK) abort();
        if (acc + sl > out_len || memcmp(out + acc, s, sl) != 0) abort();
        acc += sl;
    }
    if (acc != out_len) abort();
    tkv_detok_free(d);
    free(out);
    free(t);
    return 0;
}
