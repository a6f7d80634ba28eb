/*
 * fuzz_grammar.c — libFuzzer target for GBNF grammars.
 *
 * The input is grammar text, optionally followed by a NUL and a text. Any
 * bytes must compile or fail with TKV_ERR_INVALID (never crash or hang);
 * a grammar that compiles is run over stories260K's vocabulary: the text is
 * fed byte by byte, and a constrained sampler draws tokens from logits made
 * of the input's bytes, each of which must be in the allowed set that the
 * trie computes on a matcher kept alongside (or EOG when none is).
 */
#include "tokenkv.h"

#include "runtime/grammar.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_util.h"

static tkv_model *model;
static size_t n_vocab;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    model = fuzz_load_model("fuzz_grammar", "stories260K.gguf", true);
    n_vocab = tkv_vocab_size(model);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > 8192) return 0;
    const char *text = (const char *)data;
    const char *nul = memchr(text, 0, size);
    const size_t glen = nul ? (size_t)(nul - text) : size;
    const char *feed = nul ? nul + 1 : text;
    const size_t flen = nul ? size - glen - 1 : size;

    tkv_grammar *g = NULL;
    tkv_status st = tkv_grammar_create(model, text, glen, NULL, &g);
    if (st == TKV_ERR_INVALID) {
        if (g || strncmp(tkv_last_error(NULL), "grammar line ", 13)) abort();
        return 0;
    }
    if (st != TKV_OK) abort();

    tkv__gmatch *m = NULL;
    if (tkv__gmatch_create(tkv__grammar_gbnf(g), &m)) abort();
    bool ok = true;
    for (size_t i = 0; i < flen && i < 256 && ok; i++)
        if (tkv__gmatch_feed(m, feed + i, 1, true, &ok)) abort();
    if (tkv__gmatch_reset(m)) abort();

    tkv_sampler_params p = tkv_sampler_default_params();
    p.seed = size;
    tkv_sampler *s = NULL;
    uint8_t *allowed = malloc(n_vocab);
    float *logits = malloc(n_vocab * sizeof *logits);
    if (tkv_sampler_create(&p, n_vocab, &s) || tkv_sampler_set_grammar(s, g)) abort();
    for (int step = 0; step < 24; step++) {
        for (size_t t = 0; t < n_vocab; t++) logits[t] = size ? (float)data[(t * 7 + (size_t)step) % size] / 16 : 0;
        size_t n = 0;
        if (tkv__grammar_allowed(g, m, allowed, &n)) abort();
        const tkv_token t = tkv_sampler_sample(s, logits);
        if (t < 0 || (size_t)t >= n_vocab) abort();
        /* (a walk cut short by its budget allows a subset: then the sampler may know better) */
        if (!tkv__gmatch_overflowed(m) && (n ? !allowed[t] : !tkv_token_is_eog(model, t))) abort();
        if (tkv_token_is_eog(model, t)) break;
        if (tkv__grammar_token(g, m, t, true, &ok) || !ok) abort();
    }
    tkv_sampler_free(s);
    tkv__gmatch_free(m);
    tkv_grammar_free(g);
    free(allowed);
    free(logits);
    return 0;
}
