/*
 * fuzz_util.h — what the fuzz targets share: loading a model of ../shared
 * (TKV_SHARED overrides where that is) in LLVMFuzzerInitialize.
 */
#ifndef TKV_FUZZ_UTIL_H
#define TKV_FUZZ_UTIL_H

#include "tokenkv.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

/* models/REL of the shared folder (vocab_only: no weights); aborts naming `who` when it does not load. */
static inline tkv_model *fuzz_load_model(const char *who, const char *rel, bool vocab_only) {
    const char *shared = getenv("TKV_SHARED");
    char path[1024];
    snprintf(path, sizeof path, "%s/models/%s", shared ? shared : TKV_SHARED_DIR, rel);
    tkv_model_params p = tkv_model_default_params();
    p.vocab_only = vocab_only;
    tkv_model *m = NULL;
    if (tkv_model_load(path, &p, &m) != TKV_OK) {
        fprintf(stderr, "%s: %s\n", who, tkv_last_error(NULL));
        abort();
    }
    return m;
}

#endif
