/*
 * chat_api.c — the public chat-template API over the Jinja renderer
 * (text/jinja.h): templates from text or from a model's metadata.
 */
#define _POSIX_C_SOURCE 200809L /* localtime_r */
#include "text/jinja/jinja.h"

#include "base/alloc.h"
#include "base/error.h"
#include "model.h"

#include <stdio.h>
#include <time.h>

struct tkv_chat_template {
    tkv__jinja_template *t;
};

tkv_status tkv_chat_template_parse(const char *src, size_t len, tkv_chat_template **out) {
    if (!out) return tkv__fail(TKV_ERR_INVALID, "tkv_chat_template_parse: out is NULL");
    *out = NULL;
    if (!src) return tkv__fail(TKV_ERR_INVALID, "tkv_chat_template_parse: src is NULL");
    tkv_chat_template *ct = tkv__calloc(1, sizeof *ct);
    if (!ct) return tkv__fail(TKV_ERR_NOMEM, "out of memory for a chat template");
    tkv_status st = tkv__jinja_parse(src, len, &ct->t);
    if (st) {
        tkv__free(ct);
        return st;
    }
    *out = ct;
    return TKV_OK;
}

tkv_status tkv_chat_template_from_model(const tkv_model *model, tkv_chat_template **out) {
    if (!out) return tkv__fail(TKV_ERR_INVALID, "tkv_chat_template_from_model: out is NULL");
    *out = NULL;
    if (!model) return tkv__fail(TKV_ERR_INVALID, "tkv_chat_template_from_model: model is NULL");
    const char *src;
    size_t len;
    if (tkv_model_meta_str(model, "tokenizer.chat_template", &src, &len) != TKV_OK)
        return tkv__fail(TKV_ERR_UNSUPPORTED, "the model has no chat template ('tokenizer.chat_template')");
    return tkv_chat_template_parse(src, len, out);
}

tkv_status tkv_chat_template_render(const tkv_chat_template *t, const char *vars, const char *now, char **out,
                                    size_t *out_len) {
    if (out) *out = NULL;
    if (out_len) *out_len = 0;
    if (!t || !out) return tkv__fail(TKV_ERR_INVALID, "tkv_chat_template_render: %s is NULL", t ? "out" : "t");
    char today[16];
    if (!now) { /* the local date, as transformers' strftime_now reads the clock */
        const time_t clock = time(NULL);
        struct tm tm;
        if (!localtime_r(&clock, &tm) || !strftime(today, sizeof today, "%Y-%m-%d", &tm)) today[0] = '\0';
        now = today[0] ? today : NULL;
    }
    const tkv__jinja_options opts = {.now = now};
    size_t len = 0;
    tkv_status st = tkv__jinja_render_with(t->t, vars, &opts, out, &len);
    if (out_len) *out_len = len;
    return st;
}

void tkv_chat_template_free(tkv_chat_template *t) {
    if (!t) return;
    tkv__jinja_free(t->t);
    tkv__free(t);
}

void tkv_free(void *p) { tkv__free(p); }
