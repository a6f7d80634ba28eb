/*
 * fuzz_json_schema.c — libFuzzer target for tkv_json_schema_to_gbnf.
 *
 * Any bytes as a schema: the conversion succeeds or fails with a status and
 * a message (never a crash, a hang or a leak); what it produces must always
 * compile as a grammar over stories260K's vocabulary (a failure to compile
 * is a converter bug, except for the grammar's own size limits and a
 * left-recursive $ref, which it reports as invalid), and a greedy draw
 * under it must not crash.
 */
#include "tokenkv.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_util.h"

static tkv_model *model;
static size_t n_vocab;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    model = fuzz_load_model("fuzz_json_schema", "stories260K.gguf", true);
    n_vocab = tkv_vocab_size(model);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > 4096) return 0;
    char *gbnf = NULL;
    const tkv_status st = tkv_json_schema_to_gbnf((const char *)data, size, &gbnf);
    if (st) {
        if (gbnf || (st != TKV_ERR_INVALID && st != TKV_ERR_UNSUPPORTED && st != TKV_ERR_NOMEM)) abort();
        if (!tkv_last_error(NULL)[0]) abort(); /* a failure says why */
        return 0;
    }
    tkv_grammar *g = NULL;
    const tkv_status gs = tkv_grammar_create(model, gbnf, strlen(gbnf), NULL, &g);
    if (gs && gs != TKV_ERR_INVALID && gs != TKV_ERR_NOMEM) abort();
    if (!gs) {
        tkv_sampler_params sp = tkv_sampler_default_params();
        sp.temperature = 0;
        tkv_sampler *smp;
        float *logits = calloc(n_vocab, sizeof *logits);
        if (logits && !tkv_sampler_create(&sp, n_vocab, &smp)) {
            if (!tkv_sampler_set_grammar(smp, g))
                for (int step = 0; step < 32; step++) {
                    for (size_t i = 0; i < n_vocab; i++) logits[i] = (float)((i * 31 + (size_t)step) % 17);
                    if (tkv_token_is_eog(model, tkv_sampler_sample(smp, logits))) break;
                }
            tkv_sampler_free(smp);
        }
        free(logits);
        tkv_grammar_free(g);
    }
    tkv_free(gbnf);
    return 0;
}
