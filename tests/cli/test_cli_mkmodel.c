/*
 * test_cli_mkmodel.c — `tokenkv mkmodel` and `tokenkv bench` as a user runs
 * them: a tiny model of every --type loads with the expected shapes, types
 * (the reference's mix rules) and hyperparameters, carries its source's
 * tokenizer metadata unchanged, generates with `tokenkv run` and benchmarks
 * with `tokenkv bench --json`; bad arguments are usage errors.
 */
#include "testutil.h"

#include "base/alloc.h"
#include "tools/gguf_write.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char dir[64]; /* a fresh temporary directory for the test's files */

static int setup(void **state) {
    (void)state;
    return tu_mkdtemp(dir, "mkmodel");
}

static int teardown(void **state) {
    (void)state;
    return tu_rmtree(dir);
}

/* "<dir>/<name>" in one of a few rotating static buffers. */
static const char *tmp_path(const char *name) {
    static char bufs[4][256];
    static int k;
    char *b = bufs[k++ % 4];
    snprintf(b, 256, "%s/%s", dir, name);
    return b;
}

static tu_run_result runf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static tu_run_result runf(const char *fmt, ...) {
    char args[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    return tu_run(args);
}

static tkv_model *load(const char *path, bool vocab_only) {
    tkv_model_params p = tkv_model_default_params();
    p.vocab_only = vocab_only;
    tkv_model *m = NULL;
    if (tkv_model_load(path, &p, &m) != TKV_OK) fail_msg("load %s: %s", path, tkv_last_error(NULL));
    return m;
}

static tkv_type tensor_type(const tkv_model *m, const char *name) {
    tkv_tensor_info ti;
    if (tkv_model_tensor_find(m, name, &ti) != TKV_OK) fail_msg("tensor %s is missing", name);
    return ti.type;
}

/* ---- metadata equality, key by key ----------------------------------------------- */

/* Key `key` holds the same type and value(s) in a and b. */
static void assert_same_pair(const tkv_model *a, const tkv_model *b, const char *key) {
    tkv_meta_type ta, tb;
    assert_int_equal(tkv_model_meta_find(a, key, &ta), TKV_OK);
    if (tkv_model_meta_find(b, key, &tb) != TKV_OK) fail_msg("key %s was not copied", key);
    if (ta != tb) fail_msg("key %s: type %d became %d", key, ta, tb);
    const char *sa, *sb;
    size_t la, lb;
    int64_t ia, ib;
    double fa, fb;
    switch (ta) {
    case TKV_META_STRING:
        assert_int_equal(tkv_model_meta_str(a, key, &sa, &la), TKV_OK);
        assert_int_equal(tkv_model_meta_str(b, key, &sb, &lb), TKV_OK);
        assert_int_equal(la, lb);
        assert_memory_equal(sa, sb, la);
        return;
    case TKV_META_F32:
    case TKV_META_F64:
        assert_int_equal(tkv_model_meta_float(a, key, &fa), TKV_OK);
        assert_int_equal(tkv_model_meta_float(b, key, &fb), TKV_OK);
        assert_memory_equal(&fa, &fb, sizeof fa);
        return;
    case TKV_META_ARRAY: break;
    default:
        assert_int_equal(tkv_model_meta_int(a, key, &ia), TKV_OK);
        assert_int_equal(tkv_model_meta_int(b, key, &ib), TKV_OK);
        if (ia != ib) fail_msg("key %s: %lld became %lld", key, (long long)ia, (long long)ib);
        return;
    }
    tkv_meta_type ea, eb;
    size_t na, nb;
    assert_int_equal(tkv_model_meta_array(a, key, &ea, &na), TKV_OK);
    assert_int_equal(tkv_model_meta_array(b, key, &eb, &nb), TKV_OK);
    if (ea != eb || na != nb) fail_msg("key %s: array of %zu type %d became %zu type %d", key, na, ea, nb, eb);
    for (size_t i = 0; i < na; i++) {
        if (ea == TKV_META_STRING) {
            assert_int_equal(tkv_model_meta_arr_str(a, key, i, &sa, &la), TKV_OK);
            assert_int_equal(tkv_model_meta_arr_str(b, key, i, &sb, &lb), TKV_OK);
            if (la != lb || memcmp(sa, sb, la)) fail_msg("key %s[%zu] differs", key, i);
        } else if (ea == TKV_META_F32 || ea == TKV_META_F64) {
            assert_int_equal(tkv_model_meta_arr_float(a, key, i, &fa), TKV_OK);
            assert_int_equal(tkv_model_meta_arr_float(b, key, i, &fb), TKV_OK);
            if (memcmp(&fa, &fb, sizeof fa)) fail_msg("key %s[%zu]: %g became %g", key, i, fa, fb);
        } else {
            assert_int_equal(tkv_model_meta_arr_int(a, key, i, &ia), TKV_OK);
            assert_int_equal(tkv_model_meta_arr_int(b, key, i, &ib), TKV_OK);
            if (ia != ib) fail_msg("key %s[%zu]: %lld became %lld", key, i, (long long)ia, (long long)ib);
        }
    }
}

/* Every tokenizer key of src is in m with the same value; the vocabulary agrees. */
static void assert_same_tokenizer(const tkv_model *src, const tkv_model *m) {
    size_t copied = 0;
    for (size_t i = 0; i < tkv_model_meta_count(src); i++) {
        const char *key;
        tkv_meta_type t;
        assert_int_equal(tkv_model_meta_at(src, i, &key, &t), TKV_OK);
        if (strncmp(key, "tokenizer.", 10)) continue;
        assert_same_pair(src, m, key);
        copied++;
    }
    assert_true(copied >= 3);
    assert_int_equal(tkv_vocab_size(m), tkv_vocab_size(src));
    assert_int_equal(tkv_token_bos(m), tkv_token_bos(src));
    assert_int_equal(tkv_token_eos(m), tkv_token_eos(src));
    const size_t n = tkv_vocab_size(src);
    const tkv_token probe[] = {0, 1, 2, 3, (tkv_token)(n / 2), (tkv_token)(n - 1)};
    for (size_t i = 0; i < sizeof probe / sizeof probe[0]; i++)
        assert_string_equal(tkv_token_text(m, probe[i]), tkv_token_text(src, probe[i]));
    tkv_hparams hp;
    assert_int_equal(tkv_model_hparams(m, &hp), TKV_OK);
    assert_int_equal(hp.n_vocab, n);
}

/* ---- the mix rules ------------------------------------------------------------------ */

/* The type the documented rules give a matrix (see cli/mkmodel.c). */
static tkv_type expected(const char *mix, const char *role, uint32_t layer, uint32_t n_layer, uint64_t ne0) {
    static const struct {
        const char *name;
        tkv_type base, output, more;
    } mixes[] = {
        {"F32", TKV_TYPE_F32, TKV_TYPE_F32, TKV_TYPE_F32},      {"F16", TKV_TYPE_F16, TKV_TYPE_F16, TKV_TYPE_F16},
        {"BF16", TKV_TYPE_BF16, TKV_TYPE_BF16, TKV_TYPE_BF16},  {"Q8_0", TKV_TYPE_Q8_0, TKV_TYPE_Q8_0, TKV_TYPE_Q8_0},
        {"Q4_0", TKV_TYPE_Q4_0, TKV_TYPE_Q6_K, TKV_TYPE_Q4_0},  {"Q4_K_M", TKV_TYPE_Q4_K, TKV_TYPE_Q6_K, TKV_TYPE_Q6_K},
        {"Q5_K_M", TKV_TYPE_Q5_K, TKV_TYPE_Q6_K, TKV_TYPE_Q6_K}, {"Q6_K", TKV_TYPE_Q6_K, TKV_TYPE_Q6_K, TKV_TYPE_Q6_K},
    };
    size_t k = 0;
    while (strcmp(mixes[k].name, mix)) k++;
    tkv_type t = mixes[k].base;
    if (!strcmp(role, "output.weight")) t = mixes[k].output;
    const uint32_t n8 = n_layer / 8;
    const bool more = layer < n8 || layer >= 7 * n_layer / 8 || (layer >= n8 && (layer - n8) % 3 == 2);
    if (more && (!strcmp(role, "attn_v.weight") || !strcmp(role, "ffn_down.weight"))) t = mixes[k].more;
    if (ne0 % 256) t = t == TKV_TYPE_Q4_K ? TKV_TYPE_Q5_0 : t == TKV_TYPE_Q5_K ? TKV_TYPE_Q5_1
                     : t == TKV_TYPE_Q6_K ? TKV_TYPE_Q8_0 : t;
    return t;
}

/* Every tensor of m has the shape and the type the rules give. */
static void assert_layout(const tkv_model *m, const char *mix, uint32_t dim, uint32_t n_layer, uint32_t kv, uint32_t ff,
                          uint32_t n_vocab) {
    assert_int_equal(tkv_model_tensor_count(m), 3 + 9 * n_layer);
    const struct {
        const char *role;
        uint64_t ne0, ne1;
    } top[] = {{"token_embd.weight", dim, n_vocab}, {"output.weight", dim, n_vocab}, {"output_norm.weight", dim, 1}},
      blk[] = {{"attn_norm.weight", dim, 1},   {"attn_q.weight", dim, dim},   {"attn_k.weight", dim, kv},
               {"attn_v.weight", dim, kv},     {"attn_output.weight", dim, dim}, {"ffn_norm.weight", dim, 1},
               {"ffn_gate.weight", dim, ff},   {"ffn_up.weight", dim, ff},    {"ffn_down.weight", ff, dim}};
    for (uint32_t l = 0; l <= n_layer; l++) {
        const bool is_top = l == n_layer;
        const size_t n = is_top ? 3 : 9;
        for (size_t i = 0; i < n; i++) {
            const char *role = is_top ? top[i].role : blk[i].role;
            const uint64_t ne0 = is_top ? top[i].ne0 : blk[i].ne0, ne1 = is_top ? top[i].ne1 : blk[i].ne1;
            char name[96];
            if (is_top) snprintf(name, sizeof name, "%s", role);
            else snprintf(name, sizeof name, "blk.%u.%s", l, role);
            tkv_tensor_info ti;
            if (tkv_model_tensor_find(m, name, &ti) != TKV_OK) fail_msg("%s: no tensor %s", mix, name);
            assert_int_equal(ti.ne[0], ne0);
            assert_int_equal(ti.ne[1], ne1);
            const tkv_type want = ne1 == 1 ? TKV_TYPE_F32 : expected(mix, role, l, n_layer, ne0);
            if (ti.type != want)
                fail_msg("%s: %s is %s, expected %s", mix, name, tkv_type_name(ti.type), tkv_type_name(want));
        }
    }
}

/* ---- tests ---------------------------------------------------------------------------- */

/* `bench --json`'s output: exactly n lines, each a JSON object (parsed into j[0 .. n), the caller's to free). */
static void bench_json_lines(const char *out, json_t **j, int n) {
    const char *line = out;
    for (int t = 0; t < n; t++) {
        json_error_t err;
        j[t] = json_loadb(line, strcspn(line, "\n"), 0, &err);
        if (!j[t]) fail_msg("bench --json line %d is not JSON (%s): %s", t, err.text, line);
        line = strchr(line, '\n');
        assert_non_null(line);
        line++;
    }
    assert_string_equal(line, "");
}

static const char *const all_types[] = {"F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_K_M", "Q5_K_M", "Q6_K"};

/* A tiny model of every type: loads, matches the source's tokenizer, runs, benchmarks. */
static void test_every_type(void **state) {
    (void)state;
    const char *stories = tu_shared("models/stories260K.gguf");
    tkv_model *src = load(stories, true);
    for (size_t k = 0; k < sizeof all_types / sizeof all_types[0]; k++) {
        const char *out = tmp_path("tiny.gguf");
        tu_run_result r = runf("mkmodel '%s' --dim 256 --layers 2 --heads 4 --kv-heads 2 --ff 512 --type %s "
                               "--vocab-from '%s' --seed 7",
                               out, all_types[k], stories);
        if (r.status != 0) fail_msg("mkmodel --type %s: exit %d: %s", all_types[k], r.status, r.err);
        assert_non_null(strstr(r.out, all_types[k]));
        tu_run_free(&r);
        assert_int_equal(access(tmp_path("tiny.gguf.tmp"), F_OK), -1); /* renamed away */

        tkv_model *m = load(out, false);
        tkv_hparams hp;
        assert_int_equal(tkv_model_hparams(m, &hp), TKV_OK);
        assert_string_equal(hp.arch, "llama");
        assert_int_equal(hp.n_embd, 256);
        assert_int_equal(hp.n_layer, 2);
        assert_int_equal(hp.n_head, 4);
        assert_int_equal(hp.n_head_kv, 2);
        assert_int_equal(hp.head_dim, 64);
        assert_int_equal(hp.n_rot, 64);
        assert_int_equal(hp.n_ff, 512);
        assert_int_equal(hp.n_ctx_train, 2048);
        assert_true(hp.rms_eps == 1e-5f);
        assert_true(hp.rope_freq_base == 10000.0f);
        assert_false(hp.tied_output);
        assert_layout(m, all_types[k], 256, 2, 128, 512, 512);
        assert_same_tokenizer(src, m);
        tkv_model_free(m);

        r = runf("run -m '%s' -p 'Once upon a time' -n 4 --temp 0 -t 1", out);
        if (r.status != 0) fail_msg("run on %s: exit %d: %s", all_types[k], r.status, r.err);
        tu_run_free(&r);

        r = runf("bench -m '%s' -p 16 -n 4 -r 1 -t 1 --json", out);
        if (r.status != 0) fail_msg("bench on %s: exit %d: %s", all_types[k], r.status, r.err);
        const char *tests[] = {"pp16", "tg4"};
        json_t *js[2];
        bench_json_lines(r.out, js, 2);
        for (int t = 0; t < 2; t++) {
            json_t *j = js[t];
            assert_string_equal(json_string_value(json_object_get(j, "test")), tests[t]);
            assert_true(json_number_value(json_object_get(j, "tokens_per_second")) > 0);
            assert_true(json_number_value(json_object_get(j, "stddev")) >= 0);
            assert_int_equal(json_integer_value(json_object_get(j, "n_tokens")), t ? 4 : 16);
            assert_int_equal(json_integer_value(json_object_get(j, "repetitions")), 1);
            assert_int_equal(json_integer_value(json_object_get(j, "threads")), 1);
            assert_string_equal(json_string_value(json_object_get(j, "model")), "tiny.gguf");
            assert_string_equal(json_string_value(json_object_get(j, "type")), all_types[k]);
            json_decref(j);
        }
        tu_run_free(&r);
        remove(out);
    }
    tkv_model_free(src);
}

/* `bench -d D` (llama-bench's depth): each test after D tokens of context, named "ppP @ dD" / "tgN @ dD" with
   n_depth in the JSON; on a plain model and on hybrids (lfm2's convolutions, qwen35's delta rule), whose
   context goes back to D tokens by truncation or by decoding it again. */
static void test_bench_depth(void **state) {
    (void)state;
    const char *models[] = {"models/stories260K.gguf", "models/arch/lfm2.gguf", "models/arch/qwen35.gguf"};
    for (size_t k = 0; k < sizeof models / sizeof models[0]; k++) {
        tu_run_result r = runf("bench -m '%s' -p 8 -n 3 -d 40 -r 2 -t 1 --json", tu_shared(models[k]));
        if (r.status != 0) fail_msg("bench -d on %s: exit %d: %s", models[k], r.status, r.err);
        const char *tests[] = {"pp8 @ d40", "tg3 @ d40"};
        json_t *js[2];
        bench_json_lines(r.out, js, 2);
        for (int t = 0; t < 2; t++) {
            json_t *j = js[t];
            assert_string_equal(json_string_value(json_object_get(j, "test")), tests[t]);
            assert_int_equal(json_integer_value(json_object_get(j, "n_depth")), 40);
            assert_int_equal(json_integer_value(json_object_get(j, "n_tokens")), t ? 3 : 8);
            assert_true(json_number_value(json_object_get(j, "tokens_per_second")) > 0);
            json_decref(j);
        }
        tu_run_free(&r);
    }
    /* the table names the depth too; without -d the JSON says 0 */
    tu_run_result r = runf("bench -m '%s' -p 4 -n 2 -d 16 -r 1 -t 1", tu_shared("models/stories260K.gguf"));
    assert_int_equal(r.status, 0);
    assert_non_null(strstr(r.out, "pp4 @ d16"));
    assert_non_null(strstr(r.out, "tg2 @ d16"));
    tu_run_free(&r);
    r = runf("bench -m '%s' -p 4 -n 0 -r 1 -t 1 --json", tu_shared("models/stories260K.gguf"));
    assert_int_equal(r.status, 0);
    json_t *j;
    bench_json_lines(r.out, &j, 1);
    assert_string_equal(json_string_value(json_object_get(j, "test")), "pp4");
    assert_int_equal(json_integer_value(json_object_get(j, "n_depth")), 0);
    json_decref(j);
    tu_run_free(&r);
}

/* `bench --limits --json`: the weight bytes and multiply-adds one token costs, from the model's
   shape (2 layers of n_embd 256, 4 heads of 64 and 2 KV heads, n_ff 512, untied output over the
   512-token vocabulary; F16, 2 bytes each; the token embedding is a lookup), and each rate as
   tokens/s times them, held to the measured limit (prefill of float weights to none): the mean of the limits
   measured before and after the test, marked steady when they differ by at most 15% of it. */
static void test_bench_limits(void **state) {
    (void)state;
    const char *stories = tu_shared("models/stories260K.gguf");
    const char *out = tmp_path("limits.gguf");
    tu_run_result r = runf("mkmodel '%s' --dim 256 --layers 2 --heads 4 --kv-heads 2 --ff 512 --type F16 "
                           "--vocab-from '%s' --seed 3",
                           out, stories);
    if (r.status != 0) fail_msg("mkmodel: exit %d: %s", r.status, r.err);
    tu_run_free(&r);
    const double per_layer = 256.0 * 256 * 2 /* q, o */ + 256.0 * 128 * 2 /* k, v */ + 256.0 * 512 * 3 /* ffn */;
    const double macs = 2 * per_layer + 256.0 * 512 /* output */;
    r = runf("bench -m '%s' -p 16 -n 4 -r 1 -t 1 --json --limits", out);
    if (r.status != 0) fail_msg("bench --limits: exit %d: %s", r.status, r.err);
    json_t *js[2];
    bench_json_lines(r.out, js, 2);
    for (int t = 0; t < 2; t++) {
        json_t *j = js[t];
        assert_int_equal(json_integer_value(json_object_get(j, "macs_per_token")), (json_int_t)macs);
        assert_int_equal(json_integer_value(json_object_get(j, "weight_bytes_per_token")), (json_int_t)(2 * macs));
        const double tps = json_number_value(json_object_get(j, "tokens_per_second"));
        const double rate = json_number_value(json_object_get(j, t ? "weight_read_gbs" : "gmacs"));
        const double limit = json_number_value(json_object_get(j, t ? "read_gbs" : "int8_peak_gmacs"));
        const double want = tps * (t ? 2 * macs : macs) / 1e9;
        assert_true(limit > 0);
        assert_true(fabs(rate - want) <= 0.006 + 1e-3 * want); /* both rounded to 2 decimals */
        const double before = json_number_value(json_object_get(j, "limit_before"));
        const double after = json_number_value(json_object_get(j, "limit_after"));
        assert_true(before > 0 && after > 0);
        assert_true(fabs(limit - (before + after) / 2) <= 0.011); /* three values rounded to 2 decimals */
        const double moved = fabs(after - before) / ((before + after) / 2);
        if (fabs(moved - 0.15) > 0.001) /* not at the edge, where the rounding decides */
            assert_int_equal(json_is_true(json_object_get(j, "limit_steady")), moved <= 0.15);
        json_t *frac = json_object_get(j, "fraction_of_limit");
        if (t == 0) {
            assert_true(json_is_null(frac)); /* float weights: the int8 peak is not their bound */
        } else {
            /* rate and limit are rounded to 2 decimals, the fraction (to 4) is not made from them */
            assert_true(fabs(json_number_value(frac) - rate / limit) <= 1e-4 + 0.006 / limit + rate * 0.006 / (limit * limit));
        }
        json_decref(j);
    }
    tu_run_free(&r);
    remove(out);
}

/* The "more bits" layers of a 12-layer mix: 0 (first eighth), 3, 6, 9, 10, 11 (last eighth). */
static void test_mix_rule(void **state) {
    (void)state;
    const char *out = tmp_path("mix.gguf");
    const char *mixes[] = {"Q4_K_M", "Q5_K_M", "Q4_0"};
    for (int k = 0; k < 3; k++) {
        tu_run_result r = runf("mkmodel '%s' --dim 256 --layers 12 --heads 2 --ff 256 --type %s --vocab-from '%s'",
                               out, mixes[k], tu_shared("models/stories260K.gguf"));
        assert_int_equal(r.status, 0);
        tu_run_free(&r);
        tkv_model *m = load(out, false);
        assert_layout(m, mixes[k], 256, 12, 256, 256, 512);
        if (k < 2) {
            const tkv_type more = TKV_TYPE_Q6_K, base = k ? TKV_TYPE_Q5_K : TKV_TYPE_Q4_K;
            const int want[12] = {1, 0, 0, 1, 0, 0, 1, 0, 0, 1, 1, 1};
            for (int l = 0; l < 12; l++) {
                char name[64];
                snprintf(name, sizeof name, "blk.%d.attn_v.weight", l);
                assert_int_equal(tensor_type(m, name), want[l] ? more : base);
                snprintf(name, sizeof name, "blk.%d.ffn_down.weight", l);
                assert_int_equal(tensor_type(m, name), want[l] ? more : base);
                snprintf(name, sizeof name, "blk.%d.attn_q.weight", l);
                assert_int_equal(tensor_type(m, name), base);
            }
            assert_int_equal(tensor_type(m, "token_embd.weight"), base);
        } else {
            assert_int_equal(tensor_type(m, "blk.0.attn_v.weight"), TKV_TYPE_Q4_0);
        }
        assert_int_equal(tensor_type(m, "output.weight"), TKV_TYPE_Q6_K);
        tkv_model_free(m);
    }
    /* rows that are not whole 256-element super-blocks fall back: Q4_K -> Q5_0, Q6_K -> Q8_0 */
    tu_run_result r = runf("mkmodel '%s' --dim 96 --layers 2 --heads 2 --ff 320 --type Q4_K_M --vocab-from '%s'", out,
                           tu_shared("models/stories260K.gguf"));
    assert_int_equal(r.status, 0);
    tu_run_free(&r);
    tkv_model *m = load(out, false);
    assert_layout(m, "Q4_K_M", 96, 2, 96, 320, 512);
    assert_int_equal(tensor_type(m, "blk.0.attn_q.weight"), TKV_TYPE_Q5_0);
    assert_int_equal(tensor_type(m, "output.weight"), TKV_TYPE_Q8_0);
    tkv_model_free(m);
    r = runf("run -m '%s' -p 'Once upon a time' -n 4 --temp 0 -t 1", out);
    assert_int_equal(r.status, 0);
    tu_run_free(&r);
    /* attn_q (dim x dim) larger than the embeddings (dim x 512 tokens) */
    r = runf("mkmodel '%s' --dim 640 --layers 1 --heads 5 --ff 64 --type Q8_0 --vocab-from '%s'", out,
             tu_shared("models/stories260K.gguf"));
    assert_int_equal(r.status, 0);
    tu_run_free(&r);
    m = load(out, false);
    assert_layout(m, "Q8_0", 640, 1, 640, 64, 512);
    tkv_model_free(m);
    remove(out);
}

/*
 * The reference's own mixes: ../shared/models/parity holds a model of this
 * shape that llama.cpp's quantizer wrote in each type. mkmodel gives every
 * tensor the same type and shape.
 */
static void test_mix_matches_reference(void **state) {
    (void)state;
    const char *types[] = {"F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q4_K_M", "Q5_K_M", "Q6_K"};
    const char *out = tmp_path("parity-shape.gguf");
    for (size_t k = 0; k < sizeof types / sizeof types[0]; k++) {
        tu_run_result r = runf("mkmodel '%s' --dim 256 --layers 2 --heads 4 --kv-heads 2 --ff 768 --type %s "
                               "--vocab-from '%s'", out, types[k], tu_shared("models/stories260K.gguf"));
        if (r.status != 0) fail_msg("mkmodel --type %s: %s", types[k], r.err);
        tu_run_free(&r);
        char ref_path[512];
        snprintf(ref_path, sizeof ref_path, "%s", tu_shared("models/parity/parity-"));
        strncat(ref_path, types[k], sizeof ref_path - strlen(ref_path) - 1);
        strncat(ref_path, ".gguf", sizeof ref_path - strlen(ref_path) - 1);
        tkv_model *ref = load(ref_path, false), *m = load(out, false);
        assert_int_equal(tkv_model_tensor_count(m), tkv_model_tensor_count(ref));
        for (size_t i = 0; i < tkv_model_tensor_count(ref); i++) {
            tkv_tensor_info a, b;
            assert_int_equal(tkv_model_tensor_at(ref, i, &a), TKV_OK);
            if (tkv_model_tensor_find(m, a.name, &b) != TKV_OK) fail_msg("%s: no tensor %s", types[k], a.name);
            if (a.type != b.type)
                fail_msg("%s: %s is %s, the reference made it %s", types[k], a.name, tkv_type_name(b.type),
                         tkv_type_name(a.type));
            assert_memory_equal(a.ne, b.ne, sizeof a.ne);
        }
        int64_t fa, fb;
        assert_int_equal(tkv_model_meta_int(ref, "general.file_type", &fa), TKV_OK);
        assert_int_equal(tkv_model_meta_int(m, "general.file_type", &fb), TKV_OK);
        assert_int_equal(fa, fb);
        tkv_model_free(ref);
        tkv_model_free(m);
    }
    remove(out);
}

/*
 * A source whose tokenizer keys have every kind of value (a chat template,
 * bools, u16, i64 and f64 arrays, u8 arrays), on top of stories260K's
 * vocabulary: each comes through with its own type and value.
 */
static void test_vocab_copy_types(void **state) {
    (void)state;
    tkv_model *stories = load(tu_shared("models/stories260K.gguf"), true);
    tkv__gguf_writer *w = tkv__gguf_writer_new(0);
    assert_non_null(w);
    const char *key;
    tkv_meta_type t;
    /* stories260K's tokenizer, rebuilt with the writer */
    size_t n;
    tkv_meta_type et;
    assert_int_equal(tkv_model_meta_array(stories, "tokenizer.ggml.tokens", &et, &n), TKV_OK);
    const char **toks = malloc(n * sizeof *toks);
    float *scores = malloc(n * sizeof *scores);
    int32_t *types = malloc(n * sizeof *types);
    for (size_t i = 0; i < n; i++) {
        size_t len;
        double s;
        int64_t ty;
        assert_int_equal(tkv_model_meta_arr_str(stories, "tokenizer.ggml.tokens", i, &toks[i], &len), TKV_OK);
        assert_int_equal(tkv_model_meta_arr_float(stories, "tokenizer.ggml.scores", i, &s), TKV_OK);
        assert_int_equal(tkv_model_meta_arr_int(stories, "tokenizer.ggml.token_type", i, &ty), TKV_OK);
        scores[i] = (float)s;
        types[i] = (int32_t)ty;
    }
    assert_int_equal(tkv__gguf_write_str(w, "general.architecture", "llama"), TKV_OK);
    assert_int_equal(tkv__gguf_write_str(w, "tokenizer.ggml.model", "llama"), TKV_OK);
    assert_int_equal(tkv__gguf_write_strings(w, "tokenizer.ggml.tokens", toks, n), TKV_OK);
    assert_int_equal(tkv__gguf_write_array(w, "tokenizer.ggml.scores", TKV_META_F32, scores, n), TKV_OK);
    assert_int_equal(tkv__gguf_write_array(w, "tokenizer.ggml.token_type", TKV_META_I32, types, n), TKV_OK);
    assert_int_equal(tkv__gguf_write_u32(w, "tokenizer.ggml.bos_token_id", 1), TKV_OK);
    assert_int_equal(tkv__gguf_write_u32(w, "tokenizer.ggml.eos_token_id", 2), TKV_OK);
    const uint8_t yes = 1, no = 0;
    assert_int_equal(tkv__gguf_write_scalar(w, "tokenizer.ggml.add_bos_token", TKV_META_BOOL, &yes), TKV_OK);
    assert_int_equal(tkv__gguf_write_scalar(w, "tokenizer.ggml.add_eos_token", TKV_META_BOOL, &no), TKV_OK);
    const uint16_t u16 = 65535;
    assert_int_equal(tkv__gguf_write_scalar(w, "tokenizer.ggml.x_u16", TKV_META_U16, &u16), TKV_OK);
    const int64_t i64[3] = {-5, INT64_MAX, INT64_MIN};
    assert_int_equal(tkv__gguf_write_array(w, "tokenizer.ggml.x_i64", TKV_META_I64, i64, 3), TKV_OK);
    const double f64[2] = {0.1, -1e300};
    assert_int_equal(tkv__gguf_write_array(w, "tokenizer.ggml.x_f64", TKV_META_F64, f64, 2), TKV_OK);
    const uint8_t u8[4] = {0, 1, 200, 255};
    assert_int_equal(tkv__gguf_write_array(w, "tokenizer.ggml.x_u8", TKV_META_U8, u8, 4), TKV_OK);
    assert_int_equal(tkv__gguf_write_array(w, "tokenizer.ggml.x_empty", TKV_META_I32, NULL, 0), TKV_OK);
    assert_int_equal(tkv__gguf_write_str(w, "tokenizer.chat_template", "{% for m in messages %}{{ m.content }}{% endfor %}"),
                     TKV_OK);
    assert_int_equal(tkv__gguf_write_str(w, "general.name", "not copied"), TKV_OK);
    uint8_t *img;
    size_t size;
    assert_int_equal(tkv__gguf_write_finish(w, &img, &size), TKV_OK);
    tkv__gguf_writer_free(w);
    const char *vocab = tmp_path("vocab.gguf");
    FILE *f = fopen(vocab, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(img, 1, size, f), size);
    fclose(f);
    tkv__free(img);
    free(toks), free(scores), free(types);

    const char *out = tmp_path("copied.gguf");
    tu_run_result r = runf("mkmodel '%s' --dim 64 --layers 1 --heads 2 --ff 96 --vocab-from '%s'", out, vocab);
    if (r.status != 0) fail_msg("mkmodel: exit %d: %s", r.status, r.err);
    tu_run_free(&r);
    tkv_model *src = load(vocab, true), *m = load(out, false);
    assert_same_tokenizer(src, m);
    assert_int_equal(tkv_model_meta_find(m, "tokenizer.chat_template", &t), TKV_OK);
    const char *name;
    assert_int_equal(tkv_model_meta_str(m, "general.name", &name, NULL), TKV_OK);
    assert_string_not_equal(name, "not copied");
    /* nothing but tokenizer keys came from the source */
    for (size_t i = 0; i < tkv_model_meta_count(m); i++) {
        assert_int_equal(tkv_model_meta_at(m, i, &key, &t), TKV_OK);
        assert_true(!strncmp(key, "tokenizer.", 10) || !strncmp(key, "general.", 8) || !strncmp(key, "llama.", 6));
    }
    tkv_model_free(src);
    tkv_model_free(m);
    tkv_model_free(stories);
}

/* BPE (merges) and a 32000-token SentencePiece vocabulary copy too, and tokenize as their sources. */
static void test_vocab_copy_real(void **state) {
    (void)state;
    const char *sources[] = {"models/vocab/ggml-vocab-gpt-2.gguf", "models/llama-2-tiny-random.gguf"};
    for (int k = 0; k < 2; k++) {
        char srcpath[512];
        snprintf(srcpath, sizeof srcpath, "%s", tu_shared(sources[k]));
        const char *out = tmp_path("real.gguf");
        tu_run_result r = runf("mkmodel '%s' --dim 64 --layers 1 --heads 2 --ff 64 --type Q8_0 --vocab-from '%s'",
                               out, srcpath);
        if (r.status != 0) fail_msg("mkmodel from %s: exit %d: %s", srcpath, r.status, r.err);
        tu_run_free(&r);
        tkv_model *src = load(srcpath, true), *m = load(out, false);
        assert_same_tokenizer(src, m);
        const char *text = "Hello world, once upon a time";
        tkv_token a[64], b[64];
        size_t na, nb;
        assert_int_equal(tkv_tokenize(src, text, strlen(text), TKV_TOKENIZE_ADD_SPECIAL, a, 64, &na), TKV_OK);
        assert_int_equal(tkv_tokenize(m, text, strlen(text), TKV_TOKENIZE_ADD_SPECIAL, b, 64, &nb), TKV_OK);
        assert_int_equal(na, nb);
        assert_memory_equal(a, b, na * sizeof a[0]);
        tkv_model_free(src);
        tkv_model_free(m);
        remove(out);
    }
}

/* Same seed, same bytes; another seed, other weights. */
static void test_seed(void **state) {
    (void)state;
    const char *vocab = tu_shared("models/stories260K.gguf");
    const char *paths[3] = {tmp_path("s1.gguf"), tmp_path("s2.gguf"), tmp_path("s3.gguf")};
    const int seeds[3] = {5, 5, 6};
    uint8_t *img[3];
    size_t size[3];
    for (int i = 0; i < 3; i++) {
        tu_run_result r = runf("mkmodel '%s' --dim 128 --layers 1 --heads 2 --ff 256 --type Q4_K_M --seed %d "
                               "--vocab-from '%s'", paths[i], seeds[i], vocab);
        assert_int_equal(r.status, 0);
        tu_run_free(&r);
        img[i] = tu_read_file(paths[i], &size[i]);
        assert_non_null(img[i]);
    }
    assert_int_equal(size[0], size[1]);
    assert_memory_equal(img[0], img[1], size[0]);
    assert_int_equal(size[0], size[2]);
    assert_true(memcmp(img[0], img[2], size[0]) != 0);
    for (int i = 0; i < 3; i++) free(img[i]), remove(paths[i]);
}

static void expect_status(int status, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void expect_status(int status, const char *fmt, ...) {
    char args[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    tu_run_result r = tu_run(args);
    if (r.status != status) fail_msg("'tokenkv %s': exit %d, expected %d (stderr: %s)", args, r.status, status, r.err);
    if (status) assert_true(strlen(r.err) > 0);
    tu_run_free(&r);
}

static void test_errors(void **state) {
    (void)state;
    const char *out = tmp_path("bad.gguf");
    const char *shape = "--dim 64 --layers 1 --heads 2 --ff 64";
    const char *v = tu_shared("models/stories260K.gguf");
    char vocab[512];
    snprintf(vocab, sizeof vocab, "--vocab-from '%s'", v);
    expect_status(0, "mkmodel --help");
    expect_status(2, "mkmodel");
    expect_status(2, "mkmodel %s %s", shape, vocab);                               /* no OUT */
    expect_status(2, "mkmodel '%s' --layers 1 --heads 2 --ff 64 %s", out, vocab);   /* no --dim */
    expect_status(2, "mkmodel '%s' --dim 64 --layers 1 --heads 3 --ff 64 %s", out, vocab); /* 64 % 3 */
    expect_status(2, "mkmodel '%s' %s --kv-heads 3 %s", out, shape, vocab);          /* 2 % 3 */
    expect_status(2, "mkmodel '%s' --dim 6 --layers 1 --heads 2 --ff 64 %s", out, vocab); /* odd head size */
    expect_status(2, "mkmodel '%s' %s --type Q3_K %s", out, shape, vocab);
    expect_status(2, "mkmodel '%s' --dim 48 --layers 1 --heads 2 --ff 64 --type Q4_0 %s", out, vocab);
    expect_status(2, "mkmodel '%s' %s --dim -1 %s", out, shape, vocab);
    expect_status(2, "mkmodel '%s' %s --dim 12x %s", out, shape, vocab);
    expect_status(2, "mkmodel '%s' %s --frobnicate 1 %s", out, shape, vocab);
    expect_status(2, "mkmodel '%s' %s --seed", out, shape);
    expect_status(2, "mkmodel '%s' %s --weights copy %s", out, shape, vocab);        /* not a kind */
    expect_status(2, "mkmodel '%s' %s --weights induction %s", out, shape, vocab);   /* heads of 32 */
    expect_status(2, "mkmodel '%s' %s --arch falcon %s", out, shape, vocab);         /* unsupported */
    expect_status(2, "mkmodel '%s' %s --arch qwen3moe %s", out, shape, vocab);       /* experts missing */
    expect_status(2, "mkmodel '%s' %s --experts 4 --experts-used 2 --expert-ff 32 %s", out, shape, vocab);
    expect_status(2, "mkmodel '%s' %s --arch qwen3moe --experts 2 --experts-used 3 --expert-ff 32 %s", out, shape,
                  vocab);
    expect_status(2, "mkmodel '%s' %s --arch qwen3moe --experts 4 --experts-used 2 --expert-ff 40 --type Q8_0 %s",
                  out, shape, vocab);                                               /* 40 % 32 */
    expect_status(2, "mkmodel '%s' '%s' %s %s", out, out, shape, vocab);            /* two outputs */
    expect_status(1, "mkmodel '%s' %s --vocab-from /nonexistent.gguf", out, shape);
    expect_status(1, "mkmodel '%s' %s %s", "/nonexistent-dir/x.gguf", shape, vocab);
    assert_int_equal(access(out, F_OK), -1);
    assert_int_equal(access(tmp_path("bad.gguf.tmp"), F_OK), -1);

    expect_status(0, "bench --help");
    expect_status(2, "bench");
    expect_status(2, "bench -m '%s' -p x", v);
    expect_status(2, "bench -m '%s' -r 0", v);
    expect_status(2, "bench -m '%s' -d x", v);
    expect_status(2, "bench -m '%s' -d -1", v);
    expect_status(2, "bench -m '%s' -p 0 -n 0", v);
    expect_status(2, "bench -m '%s' --frobnicate", v);
    expect_status(1, "bench -m /nonexistent.gguf -p 4 -n 1");
    /* the table: a header, a separator and one row per test */
    tu_run_result r = runf("bench -m '%s' -p 8 -n 2 -r 2 -t 1", v);
    assert_int_equal(r.status, 0);
    assert_non_null(strstr(r.out, "| model"));
    assert_non_null(strstr(r.out, "stories260K.gguf"));
    assert_non_null(strstr(r.out, "pp8"));
    assert_non_null(strstr(r.out, "tg2"));
    assert_non_null(strstr(r.out, "±"));
    tu_run_free(&r);
}

/* The shape of tensor `name` is (ne0, ne1, ne2). */
static void assert_shape(const tkv_model *m, const char *name, uint64_t ne0, uint64_t ne1, uint64_t ne2) {
    tkv_tensor_info ti;
    if (tkv_model_tensor_find(m, name, &ti) != TKV_OK) fail_msg("tensor %s is missing", name);
    if (ti.ne[0] != ne0 || ti.ne[1] != ne1 || ti.ne[2] != ne2)
        fail_msg("%s: [%llu, %llu, %llu], expected [%llu, %llu, %llu]", name, (unsigned long long)ti.ne[0],
                 (unsigned long long)ti.ne[1], (unsigned long long)ti.ne[2], (unsigned long long)ne0,
                 (unsigned long long)ne1, (unsigned long long)ne2);
}

static bool has_tensor(const tkv_model *m, const char *name) {
    tkv_tensor_info ti;
    return tkv_model_tensor_find(m, name, &ti) == TKV_OK;
}

/* --arch: every architecture's model loads as that architecture with the
   tensors its published files have (../shared/models/arch/README.md), and
   generates. dim 128, 4/2 heads of 32: q 128, kv 64. */
static void test_every_arch(void **state) {
    (void)state;
    static const char *const archs[] = {"llama", "qwen2",  "qwen3", "qwen3moe", "gpt-oss", "smollm3",
                                        "olmo2", "phi3", "mistral3", "gemma2", "gemma3"};
    const char *vocab = tu_shared("models/stories260K.gguf");
    for (size_t k = 0; k < sizeof archs / sizeof archs[0]; k++) {
        const char *a = archs[k];
        const bool moe = !strcmp(a, "qwen3moe") || !strcmp(a, "gpt-oss");
        const char *out = tmp_path("arch.gguf");
        tu_run_result r = runf("mkmodel '%s' --arch %s --dim 128 --layers 2 --heads 4 --kv-heads 2 --ff 192 %s "
                               "--type Q8_0 --vocab-from '%s'", out, a,
                               moe ? "--experts 4 --experts-used 2 --expert-ff 64" : "", vocab);
        if (r.status != 0) fail_msg("mkmodel --arch %s: exit %d: %s", a, r.status, r.err);
        tu_run_free(&r);
        tkv_model *m = load(out, false);
        tkv_hparams hp;
        assert_int_equal(tkv_model_hparams(m, &hp), TKV_OK);
        assert_string_equal(hp.arch, a);
        if (!strcmp(a, "phi3")) { /* fused q|k|v and gate|up */
            assert_shape(m, "blk.1.attn_qkv.weight", 128, 128 + 2 * 64, 1);
            assert_shape(m, "blk.1.ffn_up.weight", 128, 2 * 192, 1);
            assert_false(has_tensor(m, "blk.1.attn_q.weight"));
        } else {
            assert_shape(m, "blk.1.attn_k.weight", 128, 64, 1);
        }
        if (moe) { /* experts stacked in the third dimension, a router per layer, no dense FFN */
            assert_shape(m, "blk.1.ffn_gate_inp.weight", 128, 4, 1);
            assert_shape(m, "blk.1.ffn_up_exps.weight", 128, 64, 4);
            assert_shape(m, "blk.1.ffn_down_exps.weight", 64, 128, 4);
            assert_false(has_tensor(m, "blk.1.ffn_down.weight"));
            assert_int_equal(tensor_type(m, "blk.1.ffn_gate_inp.weight"), TKV_TYPE_F32);
        } else {
            assert_shape(m, "blk.1.ffn_down.weight", 192, 128, 1);
        }
        assert_int_equal(has_tensor(m, "blk.0.attn_q_norm.weight"),
                         !strcmp(a, "qwen3") || !strcmp(a, "qwen3moe") || !strcmp(a, "olmo2") || !strcmp(a, "gemma3"));
        assert_int_equal(has_tensor(m, "blk.0.post_ffw_norm.weight"),
                         !strcmp(a, "olmo2") || !strcmp(a, "gemma2") || !strcmp(a, "gemma3"));
        assert_int_equal(has_tensor(m, "blk.0.attn_q.bias"), !strcmp(a, "qwen2") || !strcmp(a, "gpt-oss"));
        assert_int_equal(has_tensor(m, "blk.0.attn_sinks.weight"), !strcmp(a, "gpt-oss"));
        assert_int_equal(has_tensor(m, "output.weight"), strncmp(a, "gemma", 5) != 0); /* Gemma ties */
        tkv_model_free(m);
        r = runf("run -m '%s' -p 'Once upon a time' -n 8 -t 1 --temp 0", out);
        if (r.status != 0) fail_msg("run --arch %s model: exit %d: %s", a, r.status, r.err);
        tu_run_free(&r);
    }
}

/* --arch gemma4: window and full layers of their own head sizes and KV heads, K as V on the full ones, the
   last --shared-kv layers without K/V (twice the FFN), per-layer inputs; it loads and generates, and a
   sharing the loader could not follow is refused. dim 128, 4 heads of 32 (window: 16), 2 KV heads (full: 1). */
static void test_gemma4(void **state) {
    (void)state;
    const char *vocab = tu_shared("models/stories260K.gguf"), *out = tmp_path("gemma4.gguf");
    const char *shape = "--arch gemma4 --dim 128 --layers 4 --heads 4 --kv-heads 2 --head-dim 32 --ff 192 "
                        "--attn-every 2";
    tu_run_result r = runf("mkmodel '%s' %s --shared-kv 2 --per-layer 16 --swa-window 8 --vocab-from '%s'", out,
                           shape, vocab);
    if (r.status != 0) fail_msg("mkmodel --arch gemma4: exit %d: %s", r.status, r.err);
    tu_run_free(&r);
    tkv_model *m = load(out, false);
    assert_shape(m, "blk.0.attn_q.weight", 128, 4 * 16, 1); /* window */
    assert_shape(m, "blk.0.attn_k.weight", 128, 2 * 16, 1);
    assert_shape(m, "blk.0.attn_v.weight", 128, 2 * 16, 1);
    assert_shape(m, "blk.1.attn_q.weight", 128, 4 * 32, 1); /* full: one KV head, K as V */
    assert_shape(m, "blk.1.attn_k.weight", 128, 1 * 32, 1);
    assert_false(has_tensor(m, "blk.1.attn_v.weight"));
    for (int l = 2; l < 4; l++) { /* shared: no K, V or K norm; twice the FFN */
        char name[64];
        snprintf(name, sizeof name, "blk.%d.attn_k.weight", l);
        assert_false(has_tensor(m, name));
        snprintf(name, sizeof name, "blk.%d.attn_k_norm.weight", l);
        assert_false(has_tensor(m, name));
        snprintf(name, sizeof name, "blk.%d.ffn_down.weight", l);
        assert_shape(m, name, 2 * 192, 128, 1);
    }
    assert_shape(m, "per_layer_token_embd.weight", 16 * 4, 512, 1);
    assert_shape(m, "per_layer_model_proj.weight", 128, 16 * 4, 1);
    assert_shape(m, "blk.3.inp_gate.weight", 128, 16, 1);
    assert_shape(m, "blk.3.proj.weight", 16, 128, 1);
    assert_shape(m, "blk.3.layer_output_scale.weight", 1, 1, 1);
    assert_shape(m, "rope_freqs.weight", 16, 1, 1); /* the reference requires it: the full layers' 16 pairs */
    int64_t shared = 0;
    assert_int_equal(tkv_model_meta_int(m, "gemma4.attention.shared_kv_layers", &shared), TKV_OK);
    assert_int_equal(shared, 2);
    tkv_model_free(m);
    r = runf("run -m '%s' -p 'Once upon a time' -n 8 -t 1 --temp 0", out);
    if (r.status != 0) fail_msg("run the gemma4 model: exit %d: %s", r.status, r.err);
    tu_run_free(&r);
    /* without per-layer inputs the key says 0: the reference requires it */
    r = runf("mkmodel '%s' %s --vocab-from '%s'", out, shape, vocab);
    assert_int_equal(r.status, 0);
    tu_run_free(&r);
    m = load(out, false);
    int64_t pli = -1;
    assert_int_equal(tkv_model_meta_int(m, "gemma4.embedding_length_per_layer_input", &pli), TKV_OK);
    assert_int_equal(pli, 0);
    assert_false(has_tensor(m, "per_layer_token_embd.weight"));
    tkv_model_free(m);
    r = runf("mkmodel '%s' %s --shared-kv 1 --vocab-from '%s'", out, shape, vocab); /* layer 3 (full) -> 2 (window) */
    assert_int_equal(r.status, 2);
    assert_non_null(strstr(r.err, "--shared-kv 1"));
    tu_run_free(&r);
    r = runf("mkmodel '%s' --dim 128 --layers 4 --heads 4 --ff 192 --per-layer 8 --vocab-from '%s'", out, vocab);
    assert_int_equal(r.status, 2); /* llama has none */
    assert_non_null(strstr(r.err, "--per-layer"));
    tu_run_free(&r);
}

/* --arch of the recurrent hybrids: each file has the keys and tensors of the shipped one of its architecture
   (../shared/models/arch/README.md: layer kinds from head_count_kv / feed_forward_length arrays, the delta nets'
   and Mamba-2's tensors, qwen35moe's shared expert, lfm2's short convs and tied output) with the layers the
   options ask for, loads and generates; combinations the architecture cannot hold are refused by name. */
static void test_hybrids(void **state) {
    (void)state;
    const char *vocab = tu_shared("models/stories260K.gguf"), *out = tmp_path("hybrid.gguf");
    static const struct {
        const char *arch, *opts;
        const char *has[4], *hasnt[3]; /* tensors it has and has not */
        const char *key;               /* an array key, and its n values */
        size_t n;
        int64_t vals[6];
    } cases[] = {
        {"qwen35moe", "--heads 4 --kv-heads 2 --head-dim 32 --ff 64 --experts 4 --experts-used 2 --expert-ff 64 "
                      "--ssm-state 32 --ssm-groups 2 --ssm-heads 4 --ssm-inner 128 --attn-every 2 --layers 4",
         {"blk.0.attn_qkv.weight", "blk.0.ffn_gate_inp_shexp.weight", "blk.1.attn_q.weight", "blk.3.ffn_down_shexp.weight"},
         {"blk.1.attn_qkv.weight", "blk.0.ffn_down.weight", NULL}, NULL, 0, {0}},
        {"lfm2", "--heads 4 --kv-heads 2 --ff 192 --pattern 'CC*C*' --layers 5",
         {"token_embd_norm.weight", "blk.0.shortconv.conv.weight", "blk.2.attn_q_norm.weight", "blk.3.shortconv.in_proj.weight"},
         {"output.weight", "blk.2.shortconv.conv.weight", "blk.0.attn_q.weight"},
         "lfm2.attention.head_count_kv", 5, {0, 0, 2, 0, 2}},
        {"nemotron_h", "--heads 4 --kv-heads 2 --ff 256 --ssm-state 16 --ssm-groups 2 --ssm-heads 8 --ssm-inner 256 "
                       "--layers 6",
         {"blk.0.ssm_in.weight", "blk.1.ffn_up.weight", "blk.2.attn_q.weight", "blk.3.ssm_d"},
         {"blk.1.ffn_gate.weight", "blk.2.ffn_down.weight", "blk.0.ffn_norm.weight"},
         "nemotron_h.feed_forward_length", 6, {0, 256, 0, 0, 256, 0}}, /* M-*M-* */
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        tu_run_result r = runf("mkmodel '%s' --arch %s --dim 128 %s --type Q8_0 --vocab-from '%s'", out, cases[k].arch,
                               cases[k].opts, vocab);
        if (r.status != 0) fail_msg("mkmodel --arch %s: exit %d: %s", cases[k].arch, r.status, r.err);
        tu_run_free(&r);
        tkv_model *m = load(out, false);
        for (int i = 0; i < 4; i++)
            if (!has_tensor(m, cases[k].has[i])) fail_msg("%s: no %s", cases[k].arch, cases[k].has[i]);
        for (int i = 0; i < 3 && cases[k].hasnt[i]; i++)
            if (has_tensor(m, cases[k].hasnt[i])) fail_msg("%s: %s is there", cases[k].arch, cases[k].hasnt[i]);
        for (size_t i = 0; i < cases[k].n; i++) {
            int64_t v = -1;
            assert_int_equal(tkv_model_meta_arr_int(m, cases[k].key, i, &v), TKV_OK);
            if (v != cases[k].vals[i]) fail_msg("%s[%zu] = %lld, expected %lld", cases[k].key, i, (long long)v,
                                                (long long)cases[k].vals[i]);
        }
        tkv_model_free(m);
        r = runf("run -m '%s' -p 'Once upon a time' -n 8 -t 1 --temp 0", out);
        if (r.status != 0) fail_msg("run the %s model: exit %d: %s", cases[k].arch, r.status, r.err);
        tu_run_free(&r);
    }
    /* qwen35moe at F16: the converter's key set and F32 shared-expert gate */
    tu_run_result r = runf("mkmodel '%s' --arch qwen35moe --dim 128 %s --type F16 --vocab-from '%s'", out, cases[0].opts,
                           vocab);
    assert_int_equal(r.status, 0);
    tu_run_free(&r);
    tkv_model *m = load(out, false);
    tkv_meta_type t;
    assert_int_equal(tkv_model_meta_find(m, "qwen35moe.feed_forward_length", &t), TKV_ERR_INVALID);
    int64_t v = 0;
    assert_int_equal(tkv_model_meta_int(m, "qwen35moe.expert_shared_feed_forward_length", &v), TKV_OK);
    assert_int_equal(v, 64);
    assert_shape(m, "blk.0.ffn_gate_inp_shexp.weight", 128, 1, 1);
    assert_int_equal(tensor_type(m, "blk.0.ffn_gate_inp_shexp.weight"), TKV_TYPE_F32); /* the converter's, at F32/F16 */
    assert_shape(m, "blk.0.ssm_out.weight", 128, 128, 1);
    tkv_model_free(m);

    static const struct {
        const char *args, *says;
    } bad[] = {
        {"--arch lfm2 --heads 4 --ff 64 --layers 3 --pattern 'C*M'", "'M' is not a layer of lfm2"},
        {"--arch lfm2 --heads 4 --ff 64 --layers 3 --pattern 'C*'", "2 characters for 3 layers"},
        {"--arch lfm2 --heads 4 --ff 64 --layers 3 --pattern 'CCC'", "no attention layer"},
        {"--arch lfm2 --heads 4 --ff 64 --layers 3 --pattern 'C*C' --attn-every 2", "give one"},
        {"--arch lfm2 --heads 4 --ff 64 --layers 3 --head-dim 16", "--head-dim 16"},
        {"--arch lfm2 --heads 4 --ff 64 --layers 3 --ssm-state 16", "lfm2 has no ssm.*"},
        {"--arch qwen35 --heads 4 --ff 64 --layers 4 --ssm-state 32 --ssm-groups 2 --ssm-heads 4 --ssm-inner 256",
         "--ssm-inner 256 must be --ssm-state 32 x --ssm-heads 4"},
        {"--arch qwen35 --heads 4 --ff 64 --layers 4 --ssm-state 32 --ssm-groups 2 --ssm-heads 4 --ssm-inner 128 "
         "--pattern 'DD*D'", "--pattern is for lfm2"},
        {"--arch nemotron_h --heads 4 --ff 64 --layers 3 --ssm-state 16 --ssm-groups 1 --ssm-heads 4 --ssm-inner 128 "
         "--pattern 'M*M'", "no MLP layer"},
        {"--arch nemotron_h --heads 4 --ff 64 --layers 3 --ssm-state 16 --ssm-groups 1 --ssm-heads 4 --ssm-inner 128 "
         "--pattern 'M*C'", "'C' is not a layer of nemotron_h"},
        {"--arch llama --heads 4 --ff 64 --layers 2 --attn-every 2", "--attn-every is for"},
    };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        r = runf("mkmodel '%s' --dim 128 %s --vocab-from '%s'", out, bad[k].args, vocab);
        if (r.status != 2 || !strstr(r.err, bad[k].says))
            fail_msg("mkmodel %s: exit %d, expected 2 and '%s': %s", bad[k].args, r.status, bad[k].says, r.err);
        tu_run_free(&r);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hybrids),
        cmocka_unit_test(test_gemma4),
        cmocka_unit_test(test_every_type), cmocka_unit_test(test_mix_rule),
        cmocka_unit_test(test_mix_matches_reference), cmocka_unit_test(test_vocab_copy_types),
        cmocka_unit_test(test_vocab_copy_real), cmocka_unit_test(test_seed), cmocka_unit_test(test_every_arch),
        cmocka_unit_test(test_bench_limits),
        cmocka_unit_test(test_bench_depth),
        cmocka_unit_test(test_errors),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
