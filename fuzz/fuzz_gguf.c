/*
 * fuzz_gguf.c — libFuzzer target for the GGUF reader and model loader.
 *
 * Any input must end in TKV_OK or a clean error status: no crash, no
 * sanitizer report, no unbounded allocation or loop. When a file loads, every
 * accessor is exercised so what the reader hands out is read too.
 */
#include "tokenkv.h"

#include <stdint.h>
#include <stdlib.h>

static void exercise(const tkv_model *m) {
    for (size_t i = 0; i < tkv_model_meta_count(m); i++) {
        const char *key, *s;
        tkv_meta_type t, et;
        size_t n, len;
        int64_t v;
        double f;
        bool b;
        if (tkv_model_meta_at(m, i, &key, &t) != TKV_OK) abort();
        tkv_model_meta_str(m, key, &s, &len);
        tkv_model_meta_int(m, key, &v);
        tkv_model_meta_float(m, key, &f);
        tkv_model_meta_bool(m, key, &b);
        if (tkv_model_meta_array(m, key, &et, &n) == TKV_OK && n) {
            tkv_model_meta_arr_str(m, key, n - 1, &s, &len);
            tkv_model_meta_arr_int(m, key, n - 1, &v);
            tkv_model_meta_arr_float(m, key, n - 1, &f);
        }
    }
    volatile uint8_t sink = 0;
    for (size_t i = 0; i < tkv_model_tensor_count(m); i++) {
        tkv_tensor_info t;
        if (tkv_model_tensor_at(m, i, &t) != TKV_OK) abort();
        /* the first and last data bytes must be readable */
        sink ^= ((const uint8_t *)t.data)[0] ^ ((const uint8_t *)t.data)[t.n_bytes - 1];
    }
    (void)sink;
    tkv_hparams hp;
    tkv_model_hparams(m, &hp);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    for (int vocab_only = 0; vocab_only < 2; vocab_only++) {
        tkv_model_params p = tkv_model_default_params();
        p.vocab_only = vocab_only;
        tkv_model *m = NULL;
        tkv_status st = tkv_model_load_from_memory(data, size, &p, &m);
        if (st == TKV_OK) {
            exercise(m);
            tkv_model_free(m);
        } else if (m != NULL || tkv_last_error(NULL)[0] == '\0') {
            abort(); /* a failure must leave no model and say why */
        }
    }
    return 0;
}
