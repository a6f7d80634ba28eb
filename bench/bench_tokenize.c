/*
 * bench_tokenize.c — tokenizer throughput on 1 MB of English text.
 *
 *   bench_tokenize [SHARED_DIR]
 *
 * The text is the English sentences of the reference cases
 * (reference/tokenize.jsonl), repeated to 1 MiB. Reports the best of five
 * runs per vocabulary, in MB/s of input and tokens per second.
 */
#define _GNU_SOURCE
#include "bench_clock.h"
#include "tokenkv.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const english[] = {
    "Once upon a time, there was a little girl named Lily.",
    "She liked to play with her ball in the park.",
    "The cat sat on the mat.\nThe dog barked.",
    "It's a test. We've done it; they'll see; I'm sure.",
    "Lily and Max went to the big green park to play with a red ball.",
    "Mr. Smith's 3rd car.",
    "hello, world.",
    "e-mail: someone@example.com",
    "Supercalifragilisticexpialidocious",
    "3.14159 and 2,718",
};

int main(int argc, char **argv) {
    const char *shared = argc > 1 ? argv[1] : TKV_SHARED_DIR;
    const size_t size = 1 << 20;
    char *text = malloc(size + 256);
    size_t len = 0;
    for (size_t i = 0; len < size; i++) {
        const char *s = english[i % (sizeof english / sizeof english[0])];
        size_t n = strlen(s);
        memcpy(text + len, s, n);
        len += n;
        text[len++] = i % 7 == 6 ? '\n' : ' ';
    }
    len = size;
    static const char *const vocabs[] = {"vocab/ggml-vocab-gpt-2.gguf", "vocab/ggml-vocab-llama-spm.gguf",
                                         "vocab/ggml-vocab-deepseek-coder.gguf", "stories260K.gguf"};
    tkv_token *toks = malloc(size * sizeof *toks);
    printf("%-40s %10s %10s %12s\n", "vocabulary", "tokens", "MB/s", "tokens/s");
    for (size_t v = 0; v < sizeof vocabs / sizeof vocabs[0]; v++) {
        char path[1024];
        snprintf(path, sizeof path, "%s/models/%s", shared, vocabs[v]);
        tkv_model_params p = tkv_model_default_params();
        p.vocab_only = true;
        tkv_model *m;
        if (tkv_model_load(path, &p, &m) != TKV_OK) {
            fprintf(stderr, "%s\n", tkv_last_error(NULL));
            return 1;
        }
        double best = 1e9;
        size_t n = 0;
        for (int r = 0; r < 5; r++) {
            double t0 = now();
            if (tkv_tokenize(m, text, len, TKV_TOKENIZE_ADD_SPECIAL, toks, size, &n) != TKV_OK) {
                fprintf(stderr, "%s\n", tkv_last_error(m));
                return 1;
            }
            double dt = now() - t0;
            if (dt < best) best = dt;
        }
        printf("%-40s %10zu %10.2f %12.0f\n", vocabs[v], n, (double)len / best / 1e6, (double)n / best);
        tkv_model_free(m);
    }
    free(toks);
    free(text);
    return 0;
}
