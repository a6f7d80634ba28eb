/*
 * test_model.c — model loading: the facts of every file in ../shared/models
 * (as its README states them), architecture and tensor checks on synthetic
 * models, and vocabulary-only files.
 */
#include "testutil.h"

#include "base/alloc.h"
#include "base/error.h"
#include "compute/kernels.h"
#include "compute/ops.h"
#include "model/model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static tkv_model *load(const char *rel, bool vocab_only) {
    tkv_model_params p = tkv_model_default_params();
    p.vocab_only = vocab_only;
    tkv_model *m = NULL;
    tkv_status st = tkv_model_load(tu_shared(rel), &p, &m);
    if (st) fail_msg("%s: %s: %s", rel, tkv_status_str(st), tkv_last_error(NULL));
    return m;
}

static void test_stories260k(void **state) {
    (void)state;
    tkv_model *m = load("models/stories260K.gguf", false);
    tkv_hparams hp;
    assert_int_equal(tkv_model_hparams(m, &hp), TKV_OK);
    assert_string_equal(hp.arch, "llama");
    assert_int_equal(hp.n_layer, 5);
    assert_int_equal(hp.n_embd, 64);
    assert_int_equal(hp.n_head, 8);
    assert_int_equal(hp.n_head_kv, 4);
    assert_int_equal(hp.head_dim, 8);
    assert_int_equal(hp.n_ff, 172);
    assert_int_equal(hp.n_vocab, 512);
    assert_int_equal(hp.n_ctx_train, 2048);
    assert_int_equal(hp.n_rot, 8);
    assert_true(hp.rope_freq_base == 10000.0f); /* no key: the default */
    assert_true(fabsf(hp.rms_eps - 1e-5f) < 1e-12f);
    assert_false(hp.tied_output);
    assert_int_equal(tkv_model_tensor_count(m), 48);
    assert_int_equal(tkv_model_meta_count(m), 19);
    uint64_t params = 0;
    for (size_t i = 0; i < tkv_model_tensor_count(m); i++) {
        tkv_tensor_info t;
        assert_int_equal(tkv_model_tensor_at(m, i, &t), TKV_OK);
        assert_int_equal(t.type, TKV_TYPE_F32);
        params += t.n_elems;
    }
    assert_int_equal(params, 292800);
    tkv_tensor_info t;
    assert_int_equal(tkv_model_tensor_find(m, "blk.4.ffn_down.weight", &t), TKV_OK);
    assert_int_equal(t.ne[0], 172), assert_int_equal(t.ne[1], 64);
    assert_int_equal(tkv_model_tensor_find(m, "blk.5.ffn_down.weight", &t), TKV_ERR_INVALID);
    /* tokenizer facts */
    const char *s;
    int64_t v;
    assert_int_equal(tkv_model_meta_str(m, "tokenizer.ggml.model", &s, NULL), TKV_OK);
    assert_string_equal(s, "llama");
    assert_int_equal(tkv_model_meta_arr_str(m, "tokenizer.ggml.tokens", 1, &s, NULL), TKV_OK);
    assert_string_equal(s, "<s>");
    assert_int_equal(tkv_model_meta_int(m, "tokenizer.ggml.bos_token_id", &v), TKV_OK), assert_int_equal(v, 1);
    assert_int_equal(tkv_model_meta_int(m, "tokenizer.ggml.eos_token_id", &v), TKV_OK), assert_int_equal(v, 2);
    assert_int_equal(tkv_model_meta_find(m, "tokenizer.ggml.pre", NULL), TKV_ERR_INVALID);
    tkv_model_free(m);
}

static void test_llama2_tiny_random(void **state) {
    (void)state;
    tkv_model *m = load("models/llama-2-tiny-random.gguf", false);
    tkv_hparams hp;
    assert_int_equal(tkv_model_hparams(m, &hp), TKV_OK);
    assert_int_equal(hp.n_layer, 1);
    assert_int_equal(hp.n_embd, 8);
    assert_int_equal(hp.n_head, 2), assert_int_equal(hp.n_head_kv, 2), assert_int_equal(hp.head_dim, 4);
    assert_int_equal(hp.n_ff, 32);
    assert_int_equal(hp.n_ctx_train, 4096);
    assert_int_equal(hp.n_rot, 4);
    assert_int_equal(hp.n_vocab, 32000);
    int n_f16 = 0, n_f32 = 0;
    for (size_t i = 0; i < tkv_model_tensor_count(m); i++) {
        tkv_tensor_info t;
        tkv_model_tensor_at(m, i, &t);
        n_f16 += t.type == TKV_TYPE_F16;
        n_f32 += t.type == TKV_TYPE_F32;
    }
    assert_int_equal(n_f16, 9), assert_int_equal(n_f32, 3);
    int64_t ft;
    assert_int_equal(tkv_model_meta_int(m, "general.file_type", &ft), TKV_OK), assert_int_equal(ft, 1);
    tkv_model_free(m);
}

static void test_parity_models(void **state) {
    (void)state;
    static const struct {
        const char *name;
        tkv_type main; /* the type of the attention weights */
    } files[] = {
        {"F16", TKV_TYPE_F16},   {"BF16", TKV_TYPE_BF16}, {"Q8_0", TKV_TYPE_Q8_0},     {"Q4_0", TKV_TYPE_Q4_0},
        {"Q4_1", TKV_TYPE_Q4_1}, {"Q5_0", TKV_TYPE_Q5_0}, {"Q5_1", TKV_TYPE_Q5_1},     {"Q4_K_M", TKV_TYPE_Q4_K},
        {"Q5_K_M", TKV_TYPE_Q5_K}, {"Q6_K", TKV_TYPE_Q6_K},
    };
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        char rel[96];
        snprintf(rel, sizeof rel, "models/parity/parity-%s.gguf", files[i].name);
        tkv_model *m = load(rel, false);
        tkv_hparams hp;
        assert_int_equal(tkv_model_hparams(m, &hp), TKV_OK);
        assert_int_equal(hp.n_embd, 256), assert_int_equal(hp.n_layer, 2);
        assert_int_equal(hp.n_head, 4), assert_int_equal(hp.n_head_kv, 2);
        assert_int_equal(hp.n_ff, 768), assert_int_equal(hp.n_ctx_train, 2048);
        assert_int_equal(hp.n_vocab, 512);
        tkv_tensor_info t;
        assert_int_equal(tkv_model_tensor_find(m, "blk.0.attn_q.weight", &t), TKV_OK);
        assert_int_equal(t.type, files[i].main);
        assert_int_equal(tkv_model_tensor_find(m, "blk.1.attn_norm.weight", &t), TKV_OK);
        assert_int_equal(t.type, TKV_TYPE_F32);
        tkv_model_free(m);
    }
}

static void test_vocab_only_files(void **state) {
    (void)state;
    static const struct {
        const char *rel;
        const char *tok_model, *pre;
        size_t n_tokens, n_merges;
        int64_t bos, eos;
        bool arch_supported;
    } files[] = {
        {"models/vocab/ggml-vocab-gpt-2.gguf", "gpt2", "gpt-2", 50257, 50000, 50256, 50256, false},
        {"models/vocab/ggml-vocab-deepseek-coder.gguf", "gpt2", "deepseek-coder", 32256, 31757, 32013, 32014, true},
        {"models/vocab/ggml-vocab-llama-spm.gguf", "llama", "default", 32000, 0, 1, 2, true},
    };
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        /* as a model: a clear FORMAT error */
        tkv_model *m = NULL;
        tkv_status st = tkv_model_load(tu_shared(files[i].rel), NULL, &m);
        if (files[i].arch_supported) {
            assert_int_equal(st, TKV_ERR_FORMAT);
            assert_non_null(strstr(tkv_last_error(NULL), "no tensors"));
        } else {
            assert_int_equal(st, TKV_ERR_UNSUPPORTED);
            assert_non_null(strstr(tkv_last_error(NULL), "gpt2"));
        }
        assert_null(m);
        /* for the tokenizer: loads */
        m = load(files[i].rel, true);
        assert_int_equal(tkv_model_tensor_count(m), 0);
        const char *s;
        assert_int_equal(tkv_model_meta_str(m, "tokenizer.ggml.model", &s, NULL), TKV_OK);
        assert_string_equal(s, files[i].tok_model);
        assert_int_equal(tkv_model_meta_str(m, "tokenizer.ggml.pre", &s, NULL), TKV_OK);
        assert_string_equal(s, files[i].pre);
        tkv_meta_type et;
        size_t n;
        assert_int_equal(tkv_model_meta_array(m, "tokenizer.ggml.tokens", &et, &n), TKV_OK);
        assert_int_equal(et, TKV_META_STRING), assert_int_equal(n, files[i].n_tokens);
        if (files[i].n_merges) {
            assert_int_equal(tkv_model_meta_array(m, "tokenizer.ggml.merges", &et, &n), TKV_OK);
            assert_int_equal(n, files[i].n_merges);
        }
        int64_t v;
        assert_int_equal(tkv_model_meta_int(m, "tokenizer.ggml.bos_token_id", &v), TKV_OK);
        assert_int_equal(v, files[i].bos);
        assert_int_equal(tkv_model_meta_int(m, "tokenizer.ggml.eos_token_id", &v), TKV_OK);
        assert_int_equal(v, files[i].eos);
        tkv_hparams hp;
        assert_int_equal(tkv_model_hparams(m, &hp), files[i].arch_supported ? TKV_OK : TKV_ERR_UNSUPPORTED);
        tkv_model_free(m);
    }
    /* deepseek-coder's big-model facts: 32 layers, linear RoPE scaling x4 */
    tkv_model *m = load("models/vocab/ggml-vocab-deepseek-coder.gguf", true);
    tkv_hparams hp;
    assert_int_equal(tkv_model_hparams(m, &hp), TKV_OK);
    assert_int_equal(hp.n_layer, 32), assert_int_equal(hp.n_embd, 4096), assert_int_equal(hp.n_vocab, 32256);
    assert_true(hp.rope_freq_base == 100000.0f);
    assert_string_equal(hp.rope_scaling, "linear");
    assert_true(hp.rope_freq_scale == 0.25f);
    tkv_model_free(m);
}

/* ---- synthetic models --------------------------------------------------- */

static tkv_status load_tiny(const tu_tiny_opts *o, tkv_model **m) {
    uint8_t *p;
    size_t n;
    tu_tiny_model(o, &p, &n);
    const char *path = tu_write_temp(p, n);
    free(p);
    tkv__clear_error();
    tkv_status st = tkv_model_load(path, NULL, m);
    remove(path);
    return st;
}

static void expect_load_error(const tu_tiny_opts *o, tkv_status want, const char *needle) {
    tkv_model *m = NULL;
    tkv_status st = load_tiny(o, &m);
    if (st != want) fail_msg("expected %s, got %s (%s)", tkv_status_str(want), tkv_status_str(st), tkv_last_error(NULL));
    assert_null(m);
    if (!strstr(tkv_last_error(NULL), needle)) fail_msg("'%s' does not mention '%s'", tkv_last_error(NULL), needle);
}

static void test_tiny_models(void **state) {
    (void)state;
    tkv_model *m = NULL;
    tkv_hparams hp;
    assert_int_equal(load_tiny(NULL, &m), TKV_OK);
    assert_int_equal(tkv_model_hparams(m, &hp), TKV_OK);
    assert_false(hp.tied_output);
    assert_int_equal(hp.n_head_kv, 1);
    assert_true(hp.rope_freq_base == 500000.0f);
    tkv_model_free(m);

    tu_tiny_opts o = {.no_output = 1};
    assert_int_equal(load_tiny(&o, &m), TKV_OK);
    assert_int_equal(tkv_model_hparams(m, &hp), TKV_OK);
    assert_true(hp.tied_output);
    tkv_model_free(m);

    o = (tu_tiny_opts){.arch = "qwen2"};
    assert_int_equal(load_tiny(&o, &m), TKV_OK);
    assert_int_equal(tkv_model_hparams(m, &hp), TKV_OK);
    assert_string_equal(hp.arch, "qwen2");
    tkv_model_free(m);

    expect_load_error(&(tu_tiny_opts){.arch = "qwen2", .skip_tensor = "blk.1.attn_k.bias"}, TKV_ERR_FORMAT,
                      "'blk.1.attn_k.bias' is missing");
    expect_load_error(&(tu_tiny_opts){.skip_tensor = "blk.0.ffn_up.weight"}, TKV_ERR_FORMAT,
                      "'blk.0.ffn_up.weight' is missing");
    expect_load_error(&(tu_tiny_opts){.skip_tensor = "token_embd.weight"}, TKV_ERR_FORMAT, "'token_embd.weight'");
    expect_load_error(&(tu_tiny_opts){.reshape = "blk.1.attn_v.weight"}, TKV_ERR_FORMAT,
                      "tensor 'blk.1.attn_v.weight': shape [9, 4");
    expect_load_error(&(tu_tiny_opts){.reshape = "output.weight"}, TKV_ERR_FORMAT, "'output.weight'");
    expect_load_error(&(tu_tiny_opts){.arch = "gptneox"}, TKV_ERR_UNSUPPORTED, "'gptneox'");
    /* a weight type without kernels: the tensor and the type are named */
    expect_load_error(&(tu_tiny_opts){.f64_tensor = "blk.1.ffn_up.weight"}, TKV_ERR_UNSUPPORTED,
                      "tensor 'blk.1.ffn_up.weight': type F64 is not supported");
    expect_load_error(&(tu_tiny_opts){.f64_tensor = "blk.0.attn_norm.weight"}, TKV_ERR_UNSUPPORTED, "must be F32");
    expect_load_error(&(tu_tiny_opts){.skip_key = "general.architecture"}, TKV_ERR_FORMAT, "general.architecture");
    expect_load_error(&(tu_tiny_opts){.skip_key = "llama.block_count"}, TKV_ERR_FORMAT, "'llama.block_count' is missing");
    expect_load_error(&(tu_tiny_opts){.skip_key = "llama.attention.layer_norm_rms_epsilon"}, TKV_ERR_FORMAT,
                      "layer_norm_rms_epsilon");
}

static void test_bad_paths(void **state) {
    (void)state;
    tkv_model *m = (tkv_model *)0x1;
    assert_int_equal(tkv_model_load("/nonexistent/x.gguf", NULL, &m), TKV_ERR_IO);
    assert_null(m);
    assert_non_null(strstr(tkv_last_error(NULL), "/nonexistent/x.gguf"));
    assert_int_equal(tkv_model_load("/tmp", NULL, &m), TKV_ERR_IO);
    assert_non_null(strstr(tkv_last_error(NULL), "not a regular file"));
    assert_int_equal(tkv_model_load(NULL, NULL, &m), TKV_ERR_INVALID);
    assert_int_equal(tkv_model_load("x", NULL, NULL), TKV_ERR_INVALID);
    const char *empty = tu_write_temp((const uint8_t *)"", 0);
    assert_int_equal(tkv_model_load(empty, NULL, &m), TKV_ERR_FORMAT);
    assert_non_null(strstr(tkv_last_error(NULL), "too small"));
    remove(empty);
    tkv_model_free(NULL);
    assert_string_equal(tkv_status_str(TKV_ERR_FULL), "TKV_ERR_FULL");
    assert_string_equal(tkv_status_str((tkv_status)-99), "unknown status");
    uint32_t be, bb;
    assert_int_equal(tkv_type_block(TKV_TYPE_Q6_K, &be, &bb), TKV_OK);
    assert_int_equal(be, 256), assert_int_equal(bb, 210);
    assert_int_equal(tkv_type_block((tkv_type)4, &be, &bb), TKV_ERR_INVALID);
    assert_null(tkv_type_name((tkv_type)5));
    assert_string_equal(tkv_type_name(TKV_TYPE_BF16), "BF16");
}

/*
 * Packed rows (tkv_model_params.repack) change no bit: a Q4_0 (an IQ4_NL, a Q8_0, a
 * Q4_K_M: Q4_K and Q6_K matrices, a Q6_K, a Q5_K_S, an IQ4_XS, a Q2_K, a Q3_K_S) model loaded
 * with and without them gives the same logits for a prompt decoded in one
 * batch (the tiled product) and for the greedy steps after it (one token at
 * a time), each context with 2 threads (whole groups of rows per thread).
 * Then at the scalar level, which reads the file's rows: the packed model's
 * pages of them were released at load and must come back from the file
 * unchanged.
 */
static void repack_same_logits(const char *file, tkv_type type) {
    tkv_model *m[2] = {NULL, NULL};
    for (int i = 0; i < 2; i++) {
        tkv_model_params mp = tkv_model_default_params();
        mp.repack = i == 0;
        if (tkv_model_load(tu_shared(file), &mp, &m[i]) != TKV_OK) fail_msg("%s", tkv_last_error(NULL));
    }
    assert_int_equal(tkv_model_packed_size(m[1]), 0);
    if (!tkv__ops_packed_ok(type)) { /* this CPU's level reads no packed rows of this type */
        assert_int_equal(tkv_model_packed_size(m[0]), 0);
        for (int i = 0; i < 2; i++) tkv_model_free(m[i]);
        TU_SKIP();
    }
    assert_true(tkv_model_packed_size(m[0]) > 0);
    enum { N = 37, STEPS = 12 };
    const size_t n_vocab = tkv_vocab_size(m[0]);
    float *logits[2];
    tkv_token ids[2][N + STEPS];
    for (int i = 0; i < 2; i++) {
        tkv_context *ctx = tu_context(m[i], 128, 1, TKV_TYPE_F16);
        tkv_token tok[N];
        tkv_pos pos[N];
        tkv_seq seq[N];
        bool all[N];
        for (int k = 0; k < N; k++) tok[k] = (tkv_token)(1 + (k * 37) % 500), pos[k] = k, seq[k] = 0, all[k] = true;
        tkv_batch b = {N, tok, pos, seq, all};
        assert_int_equal(tkv_decode(ctx, &b), TKV_OK);
        logits[i] = malloc(N * n_vocab * sizeof(float));
        assert_non_null(logits[i]);
        for (int k = 0; k < N; k++) memcpy(logits[i] + k * n_vocab, tkv_get_logits(ctx, k), n_vocab * sizeof(float));
        tkv_context_free(ctx);
        ctx = tu_context(m[i], 128, 1, TKV_TYPE_F16);
        memcpy(ids[i], tok, sizeof tok);
        tu_greedy(ctx, 0, ids[i], N, STEPS, n_vocab, NULL);
        tkv_context_free(ctx);
    }
    for (size_t k = 0; k < N * n_vocab; k++)
        if (memcmp(&logits[0][k], &logits[1][k], sizeof(float)) != 0)
            fail_msg("token %zu logit %zu: packed %.9g, file rows %.9g", k / n_vocab, k % n_vocab, logits[0][k], logits[1][k]);
    assert_memory_equal(ids[0], ids[1], sizeof ids[0]);
    const tkv__kernel_level level = tkv__kernel_level_active();
    assert_int_equal(tkv__kernel_force_level(TKV__KERNEL_SCALAR), 0);
    for (int i = 0; i < 2; i++) {
        tkv_context *ctx = tu_context(m[i], 128, 1, TKV_TYPE_F16);
        memcpy(ids[i], ids[0], N * sizeof(tkv_token));
        tu_greedy(ctx, 0, ids[i], N, 4, n_vocab, NULL);
        const float *last = tkv_get_logits_last(ctx);
        assert_non_null(last);
        memcpy(logits[i], last, n_vocab * sizeof(float));
        tkv_context_free(ctx);
    }
    assert_int_equal(tkv__kernel_force_level(level), 0);
    assert_memory_equal(logits[0], logits[1], n_vocab * sizeof(float));
    assert_memory_equal(ids[0], ids[1], sizeof ids[0]);
    for (int i = 0; i < 2; i++) free(logits[i]), tkv_model_free(m[i]);
}

static void test_repack_same_logits(void **state) {
    (void)state;
    repack_same_logits("models/parity/parity-Q4_0.gguf", TKV_TYPE_Q4_0);
}

static void test_repack_same_logits_iq4_nl(void **state) {
    (void)state;
    repack_same_logits("models/parity/parity-IQ4_NL.gguf", TKV_TYPE_IQ4_NL);
}

/* The interleaved layout (compute/quant/repack.h): one token straight from the groups, a batch through the tiled products. */
static void test_repack_same_logits_q8_0(void **state) {
    (void)state;
    repack_same_logits("models/parity/parity-Q8_0.gguf", TKV_TYPE_Q8_0);
}

static void test_repack_same_logits_q4_k_m(void **state) {
    (void)state;
    repack_same_logits("models/parity/parity-Q4_K_M.gguf", TKV_TYPE_Q4_K);
}

static void test_repack_same_logits_q6_k(void **state) {
    (void)state;
    repack_same_logits("models/parity/parity-Q6_K.gguf", TKV_TYPE_Q6_K);
}

static void test_repack_same_logits_q5_k_s(void **state) {
    (void)state;
    repack_same_logits("models/parity/parity-Q5_K_S.gguf", TKV_TYPE_Q5_K);
}

static void test_repack_same_logits_iq4_xs(void **state) {
    (void)state;
    repack_same_logits("models/parity/parity-IQ4_XS.gguf", TKV_TYPE_IQ4_XS);
}

static void test_repack_same_logits_q2_k(void **state) {
    (void)state;
    repack_same_logits("models/parity/parity-Q2_K.gguf", TKV_TYPE_Q2_K);
}

static void test_repack_same_logits_q3_k_s(void **state) {
    (void)state;
    repack_same_logits("models/parity/parity-Q3_K_S.gguf", TKV_TYPE_Q3_K);
}

/* Bytes of an IQ1-IQ3 block in its packed layout (compute/quant/repack.h: codes and signs, a nibble per element,
   magnitude and sign bits, with their scales and d), or 0 for the types this test leaves to tkv__pack_stride. */
static size_t iq_packed_block(tkv_type type) {
    switch (type) {
    case TKV_TYPE_IQ2_XXS: case TKV_TYPE_IQ2_XS: case TKV_TYPE_IQ2_S: return 106;
    case TKV_TYPE_IQ3_XXS: case TKV_TYPE_IQ3_S: return 138;
    case TKV_TYPE_IQ1_S: return 74;
    case TKV_TYPE_IQ1_M: return 86;
    default: return 0;
    }
}

/*
 * tkv_model_tensor_read_bytes: every matrix of the parity models (whole
 * tensors, no fused ones) whose type this level reads packed counts at whole
 * 16-row groups of its packed layout, each group a multiple of 64 bytes (the
 * IQ types from their documented block sizes); everything else, and every
 * tensor of a load without repack, at its stored size. The packed tensors
 * together are tkv_model_packed_size.
 */
static void test_tensor_read_bytes(void **state) {
    (void)state;
    static const char *const files[] = {"parity-IQ2_XXS", "parity-IQ3_S", "parity-IQ1_M", "parity-IQ1_S",
                                        "parity-Q4_K_M",  "parity-Q4_0"};
    assert_int_equal(tkv_model_tensor_read_bytes(NULL, 0), 0);
    for (size_t f = 0; f < sizeof files / sizeof files[0]; f++) {
        char path[96];
        snprintf(path, sizeof path, "models/parity/%s.gguf", files[f]);
        tkv_model *m[2];
        for (int i = 0; i < 2; i++) {
            tkv_model_params mp = tkv_model_default_params();
            mp.repack = i == 0;
            if (tkv_model_load(tu_shared(path), &mp, &m[i]) != TKV_OK) fail_msg("%s", tkv_last_error(NULL));
        }
        const size_t n = tkv_model_tensor_count(m[0]);
        uint64_t packed = 0;
        for (size_t i = 0; i < n; i++) {
            tkv_tensor_info ti;
            assert_int_equal(tkv_model_tensor_at(m[0], i, &ti), TKV_OK);
            assert_int_equal(tkv_model_tensor_read_bytes(m[1], i), ti.n_bytes);
            uint64_t want = ti.n_bytes;
            if (ti.n_dims >= 2 && strcmp(ti.name, "token_embd.weight") && tkv__ops_packed_ok(ti.type)) {
                const size_t iq = iq_packed_block(ti.type), nb = ti.ne[0] / 256;
                const size_t stride = iq ? (16 * nb * iq + 63) / 64 * 64 : tkv__pack_stride(ti.type, ti.ne[0]);
                want = (ti.ne[1] + 15) / 16 * stride;
                packed += want;
            }
            if (tkv_model_tensor_read_bytes(m[0], i) != want)
                fail_msg("%s %s: %llu bytes read, expected %llu (stored %llu)", files[f], ti.name,
                         (unsigned long long)tkv_model_tensor_read_bytes(m[0], i), (unsigned long long)want,
                         (unsigned long long)ti.n_bytes);
        }
        assert_int_equal(packed, tkv_model_packed_size(m[0]));
        assert_int_equal(tkv_model_tensor_read_bytes(m[0], n), 0);
        for (int i = 0; i < 2; i++) tkv_model_free(m[i]);
    }
}

/* The bytes read of tensor i of m when every matrix the level packs is packed, except the enlarging ones when
   `enlarge` is false (iq_packed_block's sizes for the IQ types, tkv__pack_stride's for the rest). */
static uint64_t expected_read(const tkv_model *m, size_t i, bool enlarge) {
    tkv_tensor_info ti;
    assert_int_equal(tkv_model_tensor_at(m, i, &ti), TKV_OK);
    if (ti.n_dims < 2 || !strcmp(ti.name, "token_embd.weight") || !tkv__ops_packed_ok(ti.type)) return ti.n_bytes;
    const size_t iq = iq_packed_block(ti.type), nb = ti.ne[0] / 256;
    const size_t stride = iq ? (16 * nb * iq + 63) / 64 * 64 : tkv__pack_stride(ti.type, ti.ne[0]);
    const uint64_t packed = (ti.ne[1] + 15) / 16 * stride;
    return !enlarge && packed > ti.n_bytes + ti.n_bytes / 8 ? ti.n_bytes : packed;
}

/*
 * The packed layouts that enlarge their rows (the IQ1-IQ3 ones) are packed
 * only when all of their growth fits in the room the load gives them; the
 * others always are. tkv__weights_pack on a model loaded without repack,
 * with room for the growth, one byte less, and none: which tensors are read
 * packed, the growth held back, and logits bit for bit those of the file's
 * rows either way. Then tkv__mem_available is a plausible figure.
 */
static void test_pack_room(void **state) {
    (void)state;
    tkv_model_params mp = tkv_model_default_params();
    mp.repack = false;
    tkv_model *plain;
    if (tkv_model_load(tu_shared("models/parity/parity-IQ2_XXS.gguf"), &mp, &plain) != TKV_OK)
        fail_msg("%s", tkv_last_error(NULL));
    if (!tkv__ops_packed_ok(TKV_TYPE_IQ2_XXS)) {
        tkv_model_free(plain);
        TU_SKIP();
    }
    const size_t n = tkv_model_tensor_count(plain);
    uint64_t growth = 0;
    for (size_t i = 0; i < n; i++) {
        tkv_tensor_info ti;
        assert_int_equal(tkv_model_tensor_at(plain, i, &ti), TKV_OK);
        if (expected_read(plain, i, false) == ti.n_bytes) growth += expected_read(plain, i, true) - ti.n_bytes;
    }
    assert_true(growth > 0); /* the file's IQ2_XXS matrices */
    enum { N = 21 };
    const size_t n_vocab = tkv_vocab_size(plain);
    float *want = malloc(N * n_vocab * sizeof(float)), *got = malloc(N * n_vocab * sizeof(float));
    assert_non_null(want), assert_non_null(got);
    tkv_token tok[N];
    tkv_pos pos[N];
    tkv_seq seq[N];
    bool all[N];
    for (int k = 0; k < N; k++) tok[k] = (tkv_token)(3 + (k * 29) % 500), pos[k] = k, seq[k] = 0, all[k] = true;
    for (int pass = 0; pass < 4; pass++) { /* the file's rows; room for the growth; a byte less; none */
        const size_t room = pass == 1 ? growth : pass == 2 ? growth - 1 : 0;
        tkv_model *m;
        if (tkv_model_load(tu_shared("models/parity/parity-IQ2_XXS.gguf"), &mp, &m) != TKV_OK)
            fail_msg("%s", tkv_last_error(NULL));
        if (pass > 0) assert_int_equal(tkv__weights_pack(&m->w, &m->hp, m->gguf, false, room), TKV_OK);
        const bool enlarge = pass == 1;
        for (size_t i = 0; i < n && pass > 0; i++)
            if (tkv_model_tensor_read_bytes(m, i) != expected_read(m, i, enlarge))
                fail_msg("room %zu, tensor %zu: %llu bytes read, expected %llu", room, i,
                         (unsigned long long)tkv_model_tensor_read_bytes(m, i),
                         (unsigned long long)expected_read(m, i, enlarge));
        if (pass > 0) assert_int_equal(tkv_model_pack_held(m), enlarge ? 0 : growth);
        tkv_context *ctx = tu_context(m, 64, 2, TKV_TYPE_F16);
        tkv_batch b = {N, tok, pos, seq, all};
        assert_int_equal(tkv_decode(ctx, &b), TKV_OK);
        for (int k = 0; k < N; k++) memcpy((pass ? got : want) + k * n_vocab, tkv_get_logits(ctx, k), n_vocab * sizeof(float));
        tkv_context_free(ctx);
        if (pass > 0) assert_memory_equal(got, want, N * n_vocab * sizeof(float));
        tkv_model_free(m);
    }
    free(want), free(got);
    tkv_model_free(plain);
    const size_t avail = tkv__mem_available();
    assert_true(avail > 0);
    FILE *f = fopen("/proc/meminfo", "r");
    if (f && avail != SIZE_MAX) { /* never above the machine's memory */
        unsigned long long total_kb = 0;
        char line[128];
        while (fgets(line, sizeof line, f) && sscanf(line, "MemTotal: %llu kB", &total_kb) != 1) {}
        assert_true(total_kb > 0 && avail <= total_kb * 1024);
    }
    if (f) fclose(f);
}

/* The kernel's transparent huge page mode: 'a'lways, 'm'advise, 'n'ever, or 0 where it has none. */
static char thp_mode(void) {
    FILE *f = fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");
    if (!f) return 0;
    char line[128] = "";
    const bool ok = fgets(line, sizeof line, f) != NULL;
    fclose(f);
    const char *sel = ok ? strchr(line, '[') : NULL;
    return sel ? sel[1] : 0;
}

/* The THPeligible line of the mapping of /proc/self/smaps that holds addr: whether the kernel may back it with
   huge pages (1, 0), or -1 where smaps says nothing of it. */
static int thp_eligible(const void *addr) {
    FILE *f = fopen("/proc/self/smaps", "r");
    if (!f) return -1;
    char line[512];
    bool inside = false;
    int eligible = -1;
    while (eligible < 0 && fgets(line, sizeof line, f)) {
        unsigned long lo, hi;
        char dash;
        if (sscanf(line, "%lx%c%lx ", &lo, &dash, &hi) == 3 && dash == '-') /* a mapping's first line */
            inside = (uintptr_t)addr >= lo && (uintptr_t)addr < hi;
        else if (inside && !strncmp(line, "THPeligible:", 12))
            eligible = atoi(line + 12);
    }
    fclose(f);
    return eligible;
}

/* tkv_model_params.huge_pages: the packed weights lie in a mapping the kernel may back with 2 MiB pages, and
   without it (where huge pages come only when asked for) in one it may not. */
static void test_huge_pages(void **state) {
    (void)state;
    const char mode = thp_mode();
    if (mode != 'a' && mode != 'm') TU_SKIP(); /* no transparent huge pages on this kernel */
    for (int huge = 1; huge >= 0; huge--) {
        tkv_model_params mp = tkv_model_default_params();
        assert_true(mp.huge_pages); /* the default */
        mp.huge_pages = huge;
        tkv_model *m;
        if (tkv_model_load(tu_shared("models/parity/parity-Q4_0.gguf"), &mp, &m) != TKV_OK)
            fail_msg("%s", tkv_last_error(NULL));
        if (!tkv_model_packed_size(m)) { /* this CPU's level reads no packed rows */
            tkv_model_free(m);
            TU_SKIP();
        }
        const uint8_t *start = m->w.pack_mem, *at = start + (uintptr_t)(-(uintptr_t)start & (TKV__HUGE_PAGE - 1));
        const int eligible = thp_eligible(huge ? at : start + 64);
        if (eligible < 0) { /* a kernel whose smaps does not say (before 5.x) */
            tkv_model_free(m);
            TU_SKIP();
        }
        if (huge) {
            assert_int_equal(eligible, 1);
            assert_int_equal((uintptr_t)at % TKV__HUGE_PAGE, 0);
        } else if (mode == 'm') {
            assert_int_equal(eligible, 0);
        }
        tkv_model_free(m);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_huge_pages),
        cmocka_unit_test(test_stories260k),      cmocka_unit_test(test_llama2_tiny_random),
        cmocka_unit_test(test_parity_models),    cmocka_unit_test(test_vocab_only_files),
        cmocka_unit_test(test_tiny_models),      cmocka_unit_test(test_bad_paths),
        cmocka_unit_test(test_repack_same_logits),
        cmocka_unit_test(test_tensor_read_bytes),
        cmocka_unit_test(test_pack_room),
        cmocka_unit_test(test_repack_same_logits_iq4_nl),
        cmocka_unit_test(test_repack_same_logits_q8_0),
        cmocka_unit_test(test_repack_same_logits_q4_k_m),
        cmocka_unit_test(test_repack_same_logits_q6_k),
        cmocka_unit_test(test_repack_same_logits_q5_k_s),
        cmocka_unit_test(test_repack_same_logits_iq4_xs),
        cmocka_unit_test(test_repack_same_logits_q2_k),
        cmocka_unit_test(test_repack_same_logits_q3_k_s),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
