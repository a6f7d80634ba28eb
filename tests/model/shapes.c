/*
 * shapes.c — random llama models of any shape and weight type (shapes.h).
 */
#include "shapes.h"

#include "testutil.h"

#include "compute/quant/quant.h"
#include "compute/quant/iq.h"
#include "tools/tools.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const shp_spec shp_shapes[] = {
    {"512 gqa4", .dim = 512, .layers = 2, .heads = 8, .kv_heads = 2, .ff = 768, .n_vocab = 256},
    {"1024 gqa8", .dim = 1024, .layers = 1, .heads = 16, .kv_heads = 2, .ff = 512, .n_vocab = 256},
    {"2048 gqa4 hd128", .dim = 2048, .layers = 1, .heads = 8, .kv_heads = 2, .head_dim = 128, .ff = 256, .n_vocab = 256},
};
const size_t shp_n_shapes = sizeof shp_shapes / sizeof shp_shapes[0];

const tkv_type shp_types[] = {
    TKV_TYPE_F32,    TKV_TYPE_F16,     TKV_TYPE_BF16,   TKV_TYPE_Q8_0,    TKV_TYPE_Q4_0,   TKV_TYPE_Q4_1,
    TKV_TYPE_Q5_0,   TKV_TYPE_Q5_1,    TKV_TYPE_Q2_K,   TKV_TYPE_Q3_K,    TKV_TYPE_Q4_K,   TKV_TYPE_Q5_K,
    TKV_TYPE_Q6_K,   TKV_TYPE_IQ4_NL,  TKV_TYPE_IQ4_XS, TKV_TYPE_TQ1_0,   TKV_TYPE_TQ2_0,  TKV_TYPE_IQ2_XXS,
    TKV_TYPE_IQ2_XS, TKV_TYPE_IQ2_S,   TKV_TYPE_IQ3_XXS, TKV_TYPE_IQ3_S,  TKV_TYPE_IQ1_S,  TKV_TYPE_IQ1_M,
    TKV_TYPE_MXFP4,
};
const size_t shp_n_types = sizeof shp_types / sizeof shp_types[0];

static uint64_t next_u64(uint64_t *s) { /* splitmix64 */
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
static float unit(uint64_t *s) { return (float)(next_u64(s) >> 40) * 0x1p-24f; } /* [0, 1) */

void shp_tokens(uint64_t seed, uint32_t n_vocab, tkv_token *out, size_t n) {
    uint64_t s = seed * 0x2545f4914f6cdd1dull + 1;
    for (size_t i = 0; i < n; i++) out[i] = (tkv_token)(1 + next_u64(&s) % (n_vocab - 1));
}

double shp_row_rel(const float *got, const double *ref, size_t n) {
    double d2 = 0, r2 = 0;
    for (size_t k = 0; k < n; k++) d2 += (got[k] - ref[k]) * (got[k] - ref[k]), r2 += ref[k] * ref[k];
    return sqrt(d2 / (r2 > 0 ? r2 : 1));
}

/* The offset of each grid block's fp16 scale (every one keeps it first but IQ1_M). */
static size_t d_offset(tkv_type t) {
    switch (t) {
    case TKV_TYPE_IQ2_XXS: return offsetof(tkv__block_iq2_xxs, d);
    case TKV_TYPE_IQ2_XS: return offsetof(tkv__block_iq2_xs, d);
    case TKV_TYPE_IQ2_S: return offsetof(tkv__block_iq2_s, d);
    case TKV_TYPE_IQ3_XXS: return offsetof(tkv__block_iq3_xxs, d);
    case TKV_TYPE_IQ3_S: return offsetof(tkv__block_iq3_s, d);
    case TKV_TYPE_IQ1_S: return offsetof(tkv__block_iq1_s, d);
    default: fail_msg("no scale layout for %s", tkv_type_name(t)); return 0;
    }
}

/* Block b's scale of a grid type: an fp16 d, or MXFP4's E8M0 exponent (e = 127 + log2 of the scale). */
static void set_scale(tkv_type t, uint8_t *block, float d) {
    if (t == TKV_TYPE_MXFP4) {
        const int e = 127 + (int)lrintf(log2f(d));
        block[offsetof(tkv__block_mxfp4, e)] = (uint8_t)(e < 1 ? 1 : e > 254 ? 254 : e);
    } else if (t == TKV_TYPE_IQ1_M) { /* the fp16 d in the top nibbles of the four scale words */
        uint8_t *sc = block + offsetof(tkv__block_iq1_m, scales);
        const uint16_t h = tkv__quant_f32_to_f16(d);
        for (int j = 0; j < 4; j++) sc[2 * j + 1] = (uint8_t)((sc[2 * j + 1] & 0x0f) | ((h >> (4 * j)) & 0x0f) << 4);
    } else {
        const uint16_t h = tkv__quant_f32_to_f16(d);
        memcpy(block + d_offset(t), &h, 2);
    }
}

/* rows x ne0 weights of a grid type into q: random quant bits; block scales
   first 1, then set from the rms that gives, to std * (0.75 .. 1.25). */
static void grid_tensor(uint64_t *s, tkv_type t, size_t ne0, size_t rows, float std, uint8_t *q) {
    const size_t be = tkv__quant_block_elems(t), bs = tkv__quant_row_size(t, be), nb = rows * ne0 / be;
    for (size_t i = 0; i < nb * bs; i++) q[i] = (uint8_t)next_u64(s);
    for (size_t b = 0; b < nb; b++) set_scale(t, q + b * bs, 1.0f);
    const size_t sample = nb < 64 ? nb : 64; /* blocks enough for the rms */
    float *y = malloc(sample * be * sizeof *y);
    assert_non_null(y);
    tkv__quant_dequantize_row(t, q, y, sample * be);
    double ss = 0;
    for (size_t i = 0; i < sample * be; i++) ss += (double)y[i] * y[i];
    free(y);
    const float rms = (float)sqrt(ss / (double)(sample * be));
    assert_true(rms > 0);
    for (size_t b = 0; b < nb; b++) set_scale(t, q + b * bs, std / rms * (0.75f + 0.5f * unit(s)));
}

/* One matrix (rows of ne0) of `type`, std 1/sqrt(ne0), or a vector of ones (rows 0). */
static void tensor(tkv__gguf_writer *w, uint64_t *s, const char *name, tkv_type type, size_t ne0, size_t rows) {
    const uint64_t ne[2] = {ne0, rows ? rows : 1};
    const size_t n = ne0 * (rows ? rows : 1);
    float *x = malloc(n * sizeof *x);
    uint8_t *q = malloc(n * sizeof(float));
    assert_true(x && q);
    const float std = 1.0f / sqrtf((float)ne0), a = sqrtf(3.0f) * std;
    if (!rows) {
        for (size_t i = 0; i < n; i++) x[i] = 1.0f;
        assert_int_equal(tkv__gguf_write_tensor(w, name, TKV_TYPE_F32, 1, ne, x), TKV_OK);
    } else if (tkv__quantize_supported(type)) {
        for (size_t i = 0; i < n; i++) x[i] = a * (2 * unit(s) - 1);
        tkv__quantize_row(type, x, q, n); /* rows are whole blocks: the tensor is one long row */
        assert_int_equal(tkv__gguf_write_tensor(w, name, type, 2, ne, q), TKV_OK);
    } else {
        grid_tensor(s, type, ne0, rows, std, q);
        assert_int_equal(tkv__gguf_write_tensor(w, name, type, 2, ne, q), TKV_OK);
    }
    free(x);
    free(q);
}

void shp_write(const shp_spec *sp, tkv_type type, uint64_t seed, const char *path) {
    const uint32_t hd = sp->head_dim ? sp->head_dim : sp->dim / sp->heads;
    const size_t nq = (size_t)sp->heads * hd, nkv = (size_t)sp->kv_heads * hd;
    tkv__gguf_writer *w = tkv__gguf_writer_new(32);
    assert_non_null(w);
    assert_int_equal(tkv__gguf_write_str(w, "general.architecture", "llama"), TKV_OK);
    assert_int_equal(tkv__gguf_write_u32(w, "llama.vocab_size", sp->n_vocab), TKV_OK);
    assert_int_equal(tkv__gguf_write_u32(w, "llama.context_length", 2048), TKV_OK);
    assert_int_equal(tkv__gguf_write_u32(w, "llama.embedding_length", sp->dim), TKV_OK);
    assert_int_equal(tkv__gguf_write_u32(w, "llama.block_count", sp->layers), TKV_OK);
    assert_int_equal(tkv__gguf_write_u32(w, "llama.feed_forward_length", sp->ff), TKV_OK);
    assert_int_equal(tkv__gguf_write_u32(w, "llama.attention.head_count", sp->heads), TKV_OK);
    assert_int_equal(tkv__gguf_write_u32(w, "llama.attention.head_count_kv", sp->kv_heads), TKV_OK);
    assert_int_equal(tkv__gguf_write_u32(w, "llama.attention.key_length", hd), TKV_OK);
    assert_int_equal(tkv__gguf_write_u32(w, "llama.attention.value_length", hd), TKV_OK);
    assert_int_equal(tkv__gguf_write_u32(w, "llama.rope.dimension_count", hd), TKV_OK);
    assert_int_equal(tkv__gguf_write_f32(w, "llama.rope.freq_base", 10000.0f), TKV_OK);
    assert_int_equal(tkv__gguf_write_f32(w, "llama.attention.layer_norm_rms_epsilon", 1e-5f), TKV_OK);
    uint64_t s = seed ^ 0x6a09e667f3bcc909ull;
    tensor(w, &s, "token_embd.weight", type, sp->dim, sp->n_vocab);
    tensor(w, &s, "output_norm.weight", type, sp->dim, 0);
    tensor(w, &s, "output.weight", type, sp->dim, sp->n_vocab);
    for (uint32_t l = 0; l < sp->layers; l++) {
        char name[64];
#define T(suffix, ne0, rows) (snprintf(name, sizeof name, "blk.%u." suffix, l), tensor(w, &s, name, type, ne0, rows))
        T("attn_norm.weight", sp->dim, 0);
        T("attn_q.weight", sp->dim, nq);
        T("attn_k.weight", sp->dim, nkv);
        T("attn_v.weight", sp->dim, nkv);
        T("attn_output.weight", nq, sp->dim);
        T("ffn_norm.weight", sp->dim, 0);
        T("ffn_gate.weight", sp->dim, sp->ff);
        T("ffn_up.weight", sp->dim, sp->ff);
        T("ffn_down.weight", sp->ff, sp->dim);
#undef T
    }
    uint8_t *img;
    size_t size;
    assert_int_equal(tkv__gguf_write_finish(w, &img, &size), TKV_OK);
    tkv__gguf_writer_free(w);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(img, 1, size, f), size);
    assert_int_equal(fclose(f), 0);
    tkv__gguf_image_free(img);
}
