/*
 * legacy_fields.c — the fields only the legacy /v1/completions has: echo (the
 * prompt's text before the completion's) and suffix (fill in the middle:
 * the completion is what goes between the prompt and the suffix).
 */
#include "legacy_fields.h"

#include <stdlib.h>
#include <string.h>

/* The model's fill-in-the-middle tokens, from its GGUF metadata; false when it has none. */
static bool fim_tokens(const tkv_model *m, tkv_token fim[3]) {
    static const char *const keys[3] = {"tokenizer.ggml.fim_pre_token_id", "tokenizer.ggml.fim_suf_token_id",
                                        "tokenizer.ggml.fim_mid_token_id"};
    for (int k = 0; k < 3; k++) {
        int64_t v;
        if (tkv_model_meta_int(m, keys[k], &v) != TKV_OK || v < 0 || (uint64_t)v >= tkv_vocab_size(m)) return false;
        fim[k] = (tkv_token)v;
    }
    return true;
}

/* prefix-suffix-middle: <PRE> prompt <SUF> suffix <MID>, the model writes the middle */
static bool fill_in_middle(const srv_api *a, const json_t *suffix, srv_req *r, srv_err *e) {
    tkv_token fim[3];
    if (!fim_tokens(a->model, fim)) {
        srv_err_set(e, 400, "suffix", "unsupported_parameter", "'suffix' needs a model with fill-in-the-middle tokens; "
                    "this one has none (tokenizer.ggml.fim_pre_token_id, fim_suf_token_id, fim_mid_token_id)");
        return false;
    }
    tkv_token *s = NULL;
    size_t ns = 0;
    if (srv_tokenize(a->model, json_string_value(suffix), json_string_length(suffix), 0, &s, &ns)) {
        srv_err_set(e, 400, "suffix", "invalid_value", "'suffix' cannot be tokenized: %s", tkv_last_error(a->model));
        return false;
    }
    const tkv_token bos = tkv_token_bos(a->model);
    const bool has_bos = r->n_prompt && r->prompt[0] == bos && bos != TKV_TOKEN_NULL;
    tkv_token *p = malloc((r->n_prompt + ns + 3) * sizeof *p);
    if (!p) {
        free(s);
        srv_err_set(e, 500, NULL, NULL, "out of memory");
        return false;
    }
    size_t n = 0;
    if (has_bos) p[n++] = bos;
    p[n++] = fim[0];
    memcpy(p + n, r->prompt + has_bos, (r->n_prompt - has_bos) * sizeof *p);
    n += r->n_prompt - has_bos;
    p[n++] = fim[1];
    memcpy(p + n, s, ns * sizeof *p);
    n += ns;
    p[n++] = fim[2];
    free(s);
    free(r->prompt);
    r->prompt = p, r->n_prompt = n;
    return true;
}

bool srv_api_parse_legacy(const srv_api *a, const json_t *body, srv_req *r, srv_err *e) {
    const json_t *echo = json_object_get(body, "echo"), *suffix = json_object_get(body, "suffix"),
                 *prompt = json_object_get(body, "prompt");
    if (echo && !json_is_null(echo) && !json_is_boolean(echo)) {
        srv_err_set(e, 400, "echo", "invalid_type", "'echo' must be a boolean");
        return false;
    }
    if (json_is_true(echo)) { /* the prompt as the client wrote it, or the text of its tokens */
        if (json_is_array(prompt) && json_array_size(prompt) == 1) prompt = json_array_get(prompt, 0);
        if (json_is_string(prompt)) {
            r->echo = strndup(json_string_value(prompt), json_string_length(prompt));
            r->echo_len = json_string_length(prompt);
        } else {
            size_t n = 0, skip = r->n_prompt && r->prompt[0] == tkv_token_bos(a->model);
            tkv_detokenize(a->model, r->prompt + skip, r->n_prompt - skip, 0, NULL, 0, &n);
            if ((r->echo = malloc(n + 1)) &&
                tkv_detokenize(a->model, r->prompt + skip, r->n_prompt - skip, 0, r->echo, n + 1, &n) == TKV_OK)
                r->echo_len = n;
        }
        if (!r->echo) {
            srv_err_set(e, 500, NULL, NULL, "out of memory");
            return false;
        }
    }
    if (suffix && !json_is_null(suffix)) {
        if (!json_is_string(suffix)) {
            srv_err_set(e, 400, "suffix", "invalid_type", "'suffix' must be a string");
            return false;
        }
        if (json_string_length(suffix) && !fill_in_middle(a, suffix, r, e)) return false;
    }
    return true;
}
