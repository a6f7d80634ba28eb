/*
 * inspect.c — `tokenkv inspect MODEL [--json]`.
 *
 * The facts are gathered once into a JSON object (keys named after the GGUF
 * keys); the text report is rendered from that same object, so the two
 * outputs cannot disagree.
 */
#include "cli.h"
#include "tokenkv.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const inspect_help =
    "usage: tokenkv inspect MODEL [--json]\n"
    "\n"
    "Validate a GGUF file and show its architecture, hyperparameters, tokenizer,\n"
    "tensor table and totals. Works on vocabulary-only files too.\n"
    "\n"
    "  --json       print one JSON object instead of the text report\n"
    "  -h, --help   show this help\n";

/* A float that was stored as f32, as the decimal its writer most likely meant. */
static json_t *json_f32(double v) {
    char buf[32];
    snprintf(buf, sizeof buf, "%.7g", v);
    return json_real(strtod(buf, NULL));
}

/* A JSON string of arbitrary bytes: invalid UTF-8 bytes become '?'. */
static json_t *json_bytes(const char *s, size_t len) {
    json_t *j = json_stringn(s, len);
    if (j) return j;
    char *copy = malloc(len + 1);
    if (!copy) return json_null();
    for (size_t i = 0; i < len; i++) copy[i] = (unsigned char)s[i] < 0x80 ? s[i] : '?';
    j = json_stringn(copy, len);
    free(copy);
    return j ? j : json_null();
}

/* The string at `key`, or null when absent or not a string. */
static json_t *meta_str_json(const tkv_model *m, const char *key) {
    const char *s;
    size_t len;
    return tkv_model_meta_str(m, key, &s, &len) ? json_null() : json_bytes(s, len);
}

/* One metadata value as JSON; arrays are summarised (type and length). */
static json_t *meta_value(const tkv_model *m, const char *key, tkv_meta_type type) {
    const char *s;
    size_t len;
    int64_t i;
    double f;
    bool b;
    switch (type) {
    case TKV_META_STRING:
        tkv_model_meta_str(m, key, &s, &len);
        return json_bytes(s, len);
    case TKV_META_BOOL: tkv_model_meta_bool(m, key, &b); return json_boolean(b);
    case TKV_META_F32: tkv_model_meta_float(m, key, &f); return json_f32(f);
    case TKV_META_F64: tkv_model_meta_float(m, key, &f); return json_real(f);
    case TKV_META_ARRAY: {
        tkv_meta_type et;
        size_t n;
        tkv_model_meta_array(m, key, &et, &n);
        return json_pack("{s:s, s:s, s:I}", "type", "array", "element_type", tkv_meta_type_name(et), "length",
                         (json_int_t)n);
    }
    default:
        if (tkv_model_meta_int(m, key, &i) == TKV_OK) return json_integer(i);
        tkv_model_meta_float(m, key, &f); /* a uint64 above INT64_MAX */
        return json_real(f);
    }
}

static json_t *hparams_json(const tkv_hparams *hp) {
    json_t *o = json_object();
    json_object_set_new(o, "context_length", json_integer(hp->n_ctx_train));
    json_object_set_new(o, "embedding_length", json_integer(hp->n_embd));
    json_object_set_new(o, "block_count", json_integer(hp->n_layer));
    json_object_set_new(o, "feed_forward_length", json_integer(hp->n_ff));
    json_object_set_new(o, "attention.head_count", json_integer(hp->n_head));
    json_object_set_new(o, "attention.head_count_kv", json_integer(hp->n_head_kv));
    json_object_set_new(o, "attention.key_length", json_integer(hp->head_dim));
    json_object_set_new(o, "rope.dimension_count", json_integer(hp->n_rot));
    json_object_set_new(o, "rope.freq_base", json_f32(hp->rope_freq_base));
    json_object_set_new(o, "rope.scaling.type", json_string(hp->rope_scaling));
    json_object_set_new(o, "rope.scaling.factor", json_f32(1.0 / hp->rope_freq_scale));
    json_object_set_new(o, "rope.scaling.original_context_length", json_integer(hp->n_ctx_orig));
    json_object_set_new(o, "attention.layer_norm_rms_epsilon", json_f32(hp->rms_eps));
    json_object_set_new(o, "vocab_size", json_integer(hp->n_vocab));
    json_object_set_new(o, "tied_output", json_boolean(hp->tied_output));
    return o;
}

static json_t *tokenizer_json(const tkv_model *m) {
    json_t *o = json_object();
    size_t n;
    tkv_meta_type et;
    json_object_set_new(o, "model", meta_str_json(m, "tokenizer.ggml.model"));
    json_object_set_new(o, "pre", meta_str_json(m, "tokenizer.ggml.pre"));
    json_object_set_new(o, "tokens",
                        tkv_model_meta_array(m, "tokenizer.ggml.tokens", &et, &n) ? json_null() : json_integer((json_int_t)n));
    json_object_set_new(o, "merges",
                        tkv_model_meta_array(m, "tokenizer.ggml.merges", &et, &n) ? json_integer(0) : json_integer((json_int_t)n));
    json_object_set_new(o, "scores", json_boolean(tkv_model_meta_find(m, "tokenizer.ggml.scores", NULL) == TKV_OK));
    static const char *const ids[] = {"bos_token_id",     "eos_token_id", "eot_token_id", "unknown_token_id",
                                      "padding_token_id", "separator_token_id"};
    for (size_t i = 0; i < sizeof ids / sizeof ids[0]; i++) {
        char key[64];
        int64_t v;
        snprintf(key, sizeof key, "tokenizer.ggml.%s", ids[i]);
        json_object_set_new(o, ids[i], tkv_model_meta_int(m, key, &v) ? json_null() : json_integer(v));
    }
    static const char *const flags[] = {"add_bos_token", "add_eos_token", "add_space_prefix"};
    for (size_t i = 0; i < sizeof flags / sizeof flags[0]; i++) {
        char key[64];
        bool b;
        snprintf(key, sizeof key, "tokenizer.ggml.%s", flags[i]);
        json_object_set_new(o, flags[i], tkv_model_meta_bool(m, key, &b) ? json_null() : json_boolean(b));
    }
    json_object_set_new(o, "chat_template", json_boolean(tkv_model_meta_find(m, "tokenizer.chat_template", NULL) == TKV_OK));
    return o;
}

/* Gather every fact about the file. Returns NULL (message on stderr) on failure. */
static json_t *gather(const char *path) {
    tkv_model_params p = tkv_model_default_params();
    p.vocab_only = true;
    tkv_model *m = NULL;
    if (tkv_model_load(path, &p, &m) != TKV_OK) {
        cli_fail("inspect", "%s", tkv_last_error(NULL));
        return NULL;
    }
    json_t *root = json_object();
    json_object_set_new(root, "file", json_bytes(path, strlen(path)));
    json_object_set_new(root, "file_size", json_integer((json_int_t)tkv_model_file_size(m)));
    json_object_set_new(root, "gguf_version", json_integer(tkv_model_gguf_version(m)));
    json_object_set_new(root, "alignment", json_integer(tkv_model_alignment(m)));
    json_object_set_new(root, "data_offset", json_integer((json_int_t)tkv_model_data_offset(m)));
    json_object_set_new(root, "architecture", meta_str_json(m, "general.architecture"));
    json_object_set_new(root, "name", meta_str_json(m, "general.name"));

    tkv_hparams hp;
    if (tkv_model_hparams(m, &hp) == TKV_OK) {
        json_object_set_new(root, "hparams", hparams_json(&hp));
    } else {
        json_object_set_new(root, "hparams", json_null());
        json_object_set_new(root, "hparams_error", json_bytes(tkv_last_error(m), strlen(tkv_last_error(m))));
    }
    json_object_set_new(root, "tokenizer", tokenizer_json(m));

    /* Can tokenkv run it? A full load answers with its own checks. A model
       file (one with tensors) of a supported architecture that fails them
       is corrupt: that is an error, not a report. */
    size_t n_tensors = tkv_model_tensor_count(m);
    tkv_model *full = NULL;
    tkv_status full_st = n_tensors > 0 ? tkv_model_load(path, NULL, &full) : TKV_ERR_UNSUPPORTED;
    bool runnable = full_st == TKV_OK;
    if (n_tensors > 0 && !runnable) {
        if (full_st != TKV_ERR_UNSUPPORTED) {
            cli_fail("inspect", "%s", tkv_last_error(NULL));
            json_decref(root);
            tkv_model_free(m);
            return NULL;
        }
        fprintf(stderr, "tokenkv inspect: warning: %s\n", tkv_last_error(NULL));
    }
    json_object_set_new(root, "runnable", json_boolean(runnable));
    if (!runnable)
        json_object_set_new(root, "runnable_error",
                            json_string(n_tensors ? tkv_last_error(NULL) : "vocabulary-only file (no tensors)"));
    tkv_model_free(full);

    json_t *meta = json_object();
    for (size_t i = 0; i < tkv_model_meta_count(m); i++) {
        const char *key;
        tkv_meta_type t;
        tkv_model_meta_at(m, i, &key, &t);
        json_object_set_new(meta, key, meta_value(m, key, t));
    }
    json_object_set_new(root, "metadata", meta);

    json_t *tensors = json_array(), *types = json_object();
    uint64_t params = 0, bytes = 0;
    for (size_t i = 0; i < n_tensors; i++) {
        tkv_tensor_info t;
        tkv_model_tensor_at(m, i, &t);
        json_t *shape = json_array();
        for (uint32_t d = 0; d < t.n_dims; d++) json_array_append_new(shape, json_integer((json_int_t)t.ne[d]));
        json_array_append_new(tensors, json_pack("{s:o, s:s, s:o, s:I, s:I}", "name", json_bytes(t.name, strlen(t.name)), "type",
                                                 tkv_type_name(t.type), "shape", shape, "bytes", (json_int_t)t.n_bytes,
                                                 "offset", (json_int_t)t.offset));
        json_t *c = json_object_get(types, tkv_type_name(t.type));
        json_object_set_new(types, tkv_type_name(t.type), json_integer(c ? json_integer_value(c) + 1 : 1));
        params += t.n_elems;
        bytes += t.n_bytes;
    }
    json_object_set_new(root, "tensors", tensors);
    json_object_set_new(root, "totals",
                        json_pack("{s:I, s:I, s:I, s:I, s:f, s:o}", "tensor_count", (json_int_t)n_tensors, "parameters",
                                  (json_int_t)params, "tensor_bytes", (json_int_t)bytes, "file_size",
                                  (json_int_t)tkv_model_file_size(m), "bits_per_weight",
                                  params ? 8.0 * (double)bytes / (double)params : 0.0, "types", types));
    tkv_model_free(m);
    return root;
}

/* ---- text rendering ----------------------------------------------------- */

static void print_value(const json_t *v) {
    if (json_is_integer(v)) printf("%lld", (long long)json_integer_value(v));
    else if (json_is_real(v)) printf("%g", json_real_value(v));
    else if (json_is_string(v)) printf("%s", json_string_value(v));
    else if (json_is_true(v)) printf("true");
    else if (json_is_false(v)) printf("false");
    else printf("-");
}

static void print_text(const json_t *f) {
    printf("file           %s\n", json_string_value(json_object_get(f, "file")));
    printf("format         GGUF v%lld, %lld bytes, alignment %lld, data at %lld\n",
           (long long)json_integer_value(json_object_get(f, "gguf_version")),
           (long long)json_integer_value(json_object_get(f, "file_size")),
           (long long)json_integer_value(json_object_get(f, "alignment")),
           (long long)json_integer_value(json_object_get(f, "data_offset")));
    printf("architecture   ");
    print_value(json_object_get(f, "architecture"));
    printf(" (name: ");
    print_value(json_object_get(f, "name"));
    printf(")\n");
    printf("runnable       %s", json_is_true(json_object_get(f, "runnable")) ? "yes" : "no");
    if (json_object_get(f, "runnable_error")) printf(": %s", json_string_value(json_object_get(f, "runnable_error")));
    printf("\n");

    const json_t *hp = json_object_get(f, "hparams");
    const char *key;
    const json_t *v;
    if (json_is_object(hp)) {
        printf("\nhyperparameters\n");
        json_object_foreach((json_t *)hp, key, v) {
            printf("  %-38s ", key);
            print_value(v);
            printf("\n");
        }
    } else {
        printf("\nhyperparameters: %s\n", json_string_value(json_object_get(f, "hparams_error")));
    }

    printf("\ntokenizer\n");
    json_object_foreach(json_object_get(f, "tokenizer"), key, v) {
        printf("  %-38s ", key);
        print_value(v);
        printf("\n");
    }

    const json_t *tensors = json_object_get(f, "tensors");
    printf("\ntensors (%zu)\n", json_array_size(tensors));
    if (json_array_size(tensors)) printf("  %-32s %-8s %-24s %12s\n", "name", "type", "shape", "bytes");
    size_t i;
    json_array_foreach(tensors, i, v) {
        char shape[96] = "";
        size_t d;
        const json_t *x;
        json_array_foreach(json_object_get(v, "shape"), d, x) {
            size_t len = strlen(shape);
            snprintf(shape + len, sizeof shape - len, "%s%lld", d ? " x " : "", (long long)json_integer_value(x));
        }
        printf("  %-32s %-8s %-24s %12lld\n", json_string_value(json_object_get(v, "name")),
               json_string_value(json_object_get(v, "type")), shape,
               (long long)json_integer_value(json_object_get(v, "bytes")));
    }

    const json_t *t = json_object_get(f, "totals");
    printf("\ntotals\n");
    printf("  parameters       %lld\n", (long long)json_integer_value(json_object_get(t, "parameters")));
    printf("  tensor bytes     %lld\n", (long long)json_integer_value(json_object_get(t, "tensor_bytes")));
    printf("  file size        %lld\n", (long long)json_integer_value(json_object_get(t, "file_size")));
    printf("  bits per weight  %.2f\n", json_real_value(json_object_get(t, "bits_per_weight")));
    printf("  types           ");
    json_object_foreach(json_object_get(t, "types"), key, v) printf(" %s x%lld", key, (long long)json_integer_value(v));
    printf("\n");
}

int cmd_inspect(int argc, char **argv) {
    const char *path = NULL;
    bool as_json = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            fputs(inspect_help, stdout);
            return 0;
        } else if (!strcmp(argv[i], "--json")) {
            as_json = true;
        } else if (argv[i][0] == '-' && argv[i][1]) {
            fprintf(stderr, "tokenkv inspect: unknown option '%s'\n%s", argv[i], inspect_help);
            return 2;
        } else if (!path) {
            path = argv[i];
        } else {
            fprintf(stderr, "tokenkv inspect: more than one MODEL given ('%s')\n", argv[i]);
            return 2;
        }
    }
    if (!path) {
        fprintf(stderr, "tokenkv inspect: no MODEL given\n%s", inspect_help);
        return 2;
    }
    json_t *facts = gather(path);
    if (!facts) return 1;
    if (as_json) {
        json_dumpf(facts, stdout, JSON_INDENT(2) | JSON_REAL_PRECISION(15) | JSON_ENSURE_ASCII);
        fputc('\n', stdout);
    } else {
        print_text(facts);
    }
    json_decref(facts);
    return 0;
}
