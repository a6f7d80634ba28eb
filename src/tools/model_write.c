/*
 * model_write.c — a random model of any supported architecture (see
 * model_write.h).
 */
#include "model_write.h"

#include "quantize.h"
#include "model/arch.h"
#include "model/tensors.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* What a file of each architecture says beyond the shapes; values of the
   published models, where they matter for speed (the window) or are
   read at all (soft-capping). */
static const struct arch_keys {
    const char *name;
    float rope_base;
    uint32_t swa_window;              /* arch->swa_period architectures */
    float attn_softcap, final_softcap; /* gemma2 */
} arch_keys[] = {
    {"llama", 10000.0f, 0, 0, 0},   {"qwen2", 1e6f, 0, 0, 0},        {"qwen3", 1e6f, 0, 0, 0},
    {"qwen3moe", 1e6f, 0, 0, 0},    {"gpt-oss", 150000.0f, 128, 0, 0}, {"smollm3", 5e6f, 0, 0, 0},
    {"olmo2", 500000.0f, 0, 0, 0},  {"phi3", 10000.0f, 0, 0, 0},     {"mistral3", 1e6f, 0, 0, 0},
    {"gemma2", 10000.0f, 4096, 50.0f, 30.0f}, {"gemma3", 1e6f, 1024, 0, 0},
};

static const struct arch_keys *keys_of(const char *arch) {
    for (size_t i = 0; i < sizeof arch_keys / sizeof arch_keys[0]; i++)
        if (!strcmp(arch_keys[i].name, arch)) return &arch_keys[i];
    return NULL;
}

static tkv_hparams hparams_of(const tkv__model_spec *s) {
    tkv_hparams hp;
    memset(&hp, 0, sizeof hp);
    snprintf(hp.arch, sizeof hp.arch, "%s", s->arch);
    hp.n_vocab = s->n_vocab, hp.n_ctx_train = s->ctx, hp.n_embd = s->dim, hp.n_layer = s->layers;
    hp.n_ff = s->ff, hp.n_head = s->heads, hp.n_head_kv = s->kv_heads ? s->kv_heads : s->heads;
    hp.head_dim = s->head_dim ? s->head_dim : s->dim / s->heads;
    hp.n_rot = hp.head_dim;
    return hp;
}

static tkv__moe_dims moe_of(const tkv__model_spec *s) {
    return (tkv__moe_dims){.n_expert = s->experts, .n_used = s->experts_used, .n_ff = s->expert_ff};
}

/* A K type on rows that are not whole super-blocks: the reference's fallback. */
static tkv_type fit_rows(tkv_type t, uint64_t ne0) {
    if (ne0 % 256 == 0) return t;
    switch (t) {
    case TKV_TYPE_Q4_K: return TKV_TYPE_Q5_0;
    case TKV_TYPE_Q5_K: return TKV_TYPE_Q5_1;
    case TKV_TYPE_Q6_K: return TKV_TYPE_Q8_0;
    default: return t;
    }
}

/* The reference's "use more bits" layers: the first and last eighth of the
   layers and every third layer in between. */
static bool more_bits(int i, uint32_t n) {
    const uint32_t l = (uint32_t)i;
    return l < n / 8 || l >= 7 * n / 8 || (l >= n / 8 && (l - n / 8) % 3 == 2);
}

static bool ends_with(const char *s, const char *tail) {
    const size_t n = strlen(s), m = strlen(tail);
    return n >= m && !strcmp(s + n - m, tail);
}

/* The stored type of a matrix under the mix. The router stays F32, as the
   reference's quantizer leaves it. */
static tkv_type matrix_type(const tkv__model_spec *s, const tkv__tensor_need *t) {
    tkv_type type = s->mix.base;
    if (ends_with(t->name, "ffn_gate_inp.weight")) return TKV_TYPE_F32;
    if (!strcmp(t->name, "output.weight")) type = s->mix.output;
    else if (t->layer >= 0 && more_bits(t->layer, s->layers) &&
             (ends_with(t->name, ".attn_v.weight") || ends_with(t->name, ".ffn_down.weight") ||
              ends_with(t->name, ".ffn_down_exps.weight")))
        type = s->mix.more;
    return fit_rows(type, t->ne[0]);
}

static bool is_float_type(tkv_type t) { return t == TKV_TYPE_F32 || t == TKV_TYPE_F16 || t == TKV_TYPE_BF16; }

/* ---- checking a spec ------------------------------------------------------------------ */

typedef struct check_ctx {
    const tkv__model_spec *s;
    char *why;
    size_t cap;
} check_ctx;

/* Every matrix's rows must be whole blocks of its type. */
static tkv_status check_rows(const tkv__tensor_need *t, void *ud) {
    check_ctx *c = ud;
    if (!t->matrix || t->optional) return TKV_OK;
    const tkv_type type = matrix_type(c->s, t);
    const uint64_t block = is_float_type(type) ? 1 : (type == TKV_TYPE_Q4_K || type == TKV_TYPE_Q5_K ||
                                                      type == TKV_TYPE_Q6_K) ? 256 : 32;
    if (t->ne[0] % block == 0) return TKV_OK;
    snprintf(c->why, c->cap, "tensor %s: rows of %llu values are not whole %s blocks of %llu", t->name,
             (unsigned long long)t->ne[0], tkv_type_name(type), (unsigned long long)block);
    return TKV_ERR_INVALID;
}

tkv_status tkv__model_spec_check(const tkv__model_spec *s, char *why, size_t cap) {
    const tkv__arch *a = tkv__arch_find(s->arch);
    const uint32_t kvh = s->kv_heads ? s->kv_heads : s->heads;
    char names[160];
#define BAD(...) return snprintf(why, cap, __VA_ARGS__), TKV_ERR_INVALID
    if (!a || !keys_of(s->arch)) BAD("architecture '%s' is not supported (%s)", s->arch, tkv__arch_names(names, sizeof names));
    if (!s->dim || !s->layers || !s->heads || !s->ff || !s->n_vocab) BAD("dim, layers, heads, ff and the vocabulary must be > 0");
    if (!s->head_dim && s->dim % s->heads) BAD("the dimension %u is not a multiple of the %u heads", s->dim, s->heads);
    if (s->heads % kvh) BAD("%u heads are not a multiple of %u key/value heads", s->heads, kvh);
    const uint32_t hd = s->head_dim ? s->head_dim : s->dim / s->heads;
    if (hd % 2) BAD("the head size %u must be even (RoPE rotates pairs)", hd);
    if (a->moe && (!s->experts || !s->experts_used || !s->expert_ff))
        BAD("%s is a mixture of experts: give the experts, how many are used and their width", s->arch);
    if (a->moe && (s->experts > TKV__MOE_MAX_EXPERTS || s->experts_used > s->experts))
        BAD("%u experts with %u used: at most %d experts, and no more used than there are", s->experts,
            s->experts_used, TKV__MOE_MAX_EXPERTS);
    if (!a->moe && (s->experts || s->experts_used || s->expert_ff)) BAD("%s has no experts", s->arch);
#undef BAD
    const tkv_hparams hp = hparams_of(s);
    const tkv__moe_dims md = moe_of(s);
    check_ctx c = {s, why, cap};
    return tkv__tensors_each(a, &hp, &(tkv__layout){.moe = &md}, check_rows, &c);
}

/* ---- writing ---------------------------------------------------------------------------- */

/* splitmix64: a fast generator with a 64-bit state, good enough for weights */
static uint64_t next_u64(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* n floats uniform in [-a, a), a = sqrt(3 / fan_in): standard deviation 1/sqrt(fan_in) */
static void fill_uniform(uint64_t *s, float *x, size_t n, uint64_t fan_in) {
    const float a = sqrtf(3.0f / (float)fan_in);
    for (size_t i = 0; i < n; i++) x[i] = a * ((float)(next_u64(s) >> 40) * 0x1p-23f - 1.0f);
}

static uint64_t elements(const tkv__tensor_need *t) { return t->ne[0] * t->ne[1] * t->ne[2]; }

static tkv_status largest(const tkv__tensor_need *t, void *ud) {
    uint64_t *m = ud;
    if (elements(t) > *m) *m = elements(t);
    return TKV_OK;
}

typedef struct write_ctx {
    const tkv__model_spec *s;
    const tkv__arch *arch;
    tkv__gguf_writer *w;
    uint64_t rng, n_params;
    float *x;   /* the largest tensor's elements */
    uint8_t *q; /* its stored bytes (at most 4 per element) */
} write_ctx;

static tkv_status write_one(const tkv__tensor_need *t, void *ud) {
    write_ctx *c = ud;
    /* no RoPE factors; Gemma ties its output to the embeddings (the reference's gemma2
       refuses an output.weight) */
    if (t->optional && (strcmp(t->name, "output.weight") || c->arch->gemma)) return TKV_OK;
    const size_t n = (size_t)elements(t);
    c->n_params += n;
    if (!t->matrix) { /* norms 1, biases and sinks 0 */
        const float v = strstr(t->name, "norm") ? 1.0f : 0.0f;
        for (size_t i = 0; i < n; i++) c->x[i] = v;
        return tkv__gguf_write_tensor(c->w, t->name, TKV_TYPE_F32, t->n_dims, t->ne, c->x);
    }
    const tkv_type type = matrix_type(c->s, t);
    fill_uniform(&c->rng, c->x, n, t->ne[0]);
    tkv__quantize_row(type, c->x, c->q, n); /* rows are whole blocks, so the tensor is one long row */
    return tkv__gguf_write_tensor(c->w, t->name, type, t->n_dims, t->ne, c->q);
}

/* ARCH.<suffix> = v */
static tkv_status key_u32(tkv__gguf_writer *w, const char *arch, const char *suffix, uint32_t v) {
    char key[96];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    return tkv__gguf_write_u32(w, key, v);
}

static tkv_status key_f32(tkv__gguf_writer *w, const char *arch, const char *suffix, float v) {
    char key[96];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    return tkv__gguf_write_f32(w, key, v);
}

tkv_status tkv__model_write(tkv__gguf_writer *w, const tkv__model_spec *s, uint64_t *n_params) {
    const tkv__arch *a = tkv__arch_find(s->arch);
    const struct arch_keys *k = keys_of(s->arch);
    const tkv_hparams hp = hparams_of(s);
    const tkv__moe_dims md = moe_of(s);
    const char *n = s->arch;
    tkv_status st = TKV_OK;
    *n_params = 0;
    /* every key the loader reads for this architecture */
    if (!st) st = key_u32(w, n, "vocab_size", s->n_vocab);
    if (!st) st = key_u32(w, n, "context_length", s->ctx);
    if (!st) st = key_u32(w, n, "embedding_length", s->dim);
    if (!st) st = key_u32(w, n, "block_count", s->layers);
    if (!st) st = key_u32(w, n, "feed_forward_length", s->ff);
    if (!st) st = key_u32(w, n, "attention.head_count", hp.n_head);
    if (!st) st = key_u32(w, n, "attention.head_count_kv", hp.n_head_kv);
    if (!st && s->head_dim) st = key_u32(w, n, "attention.key_length", hp.head_dim);
    if (!st && s->head_dim) st = key_u32(w, n, "attention.value_length", hp.head_dim);
    if (!st) st = key_u32(w, n, "rope.dimension_count", hp.n_rot);
    if (!st) st = key_f32(w, n, "rope.freq_base", k->rope_base);
    if (!st) st = key_f32(w, n, "attention.layer_norm_rms_epsilon", 1e-5f);
    if (!st && a->swa_period) st = key_u32(w, n, "attention.sliding_window", s->swa_window ? s->swa_window : k->swa_window);
    if (!st && k->attn_softcap > 0) st = key_f32(w, n, "attn_logit_softcapping", k->attn_softcap);
    if (!st && k->final_softcap > 0) st = key_f32(w, n, "final_logit_softcapping", k->final_softcap);
    if (!st && a->moe) st = key_u32(w, n, "expert_count", s->experts);
    if (!st && a->moe) st = key_u32(w, n, "expert_used_count", s->experts_used);
    if (!st && a->moe) st = key_u32(w, n, "expert_feed_forward_length", s->expert_ff);
    if (st) return st;

    uint64_t biggest = 0;
    tkv__tensors_each(a, &hp, &(tkv__layout){.moe = &md}, largest, &biggest);
    write_ctx c = {s, a, w, s->seed ^ 0x6a09e667f3bcc909ull, 0, malloc(biggest * sizeof(float)),
                   malloc(biggest * sizeof(float))};
    if (!c.x || !c.q) st = TKV_ERR_NOMEM;
    if (!st) st = tkv__tensors_each(a, &hp, &(tkv__layout){.moe = &md}, write_one, &c);
    *n_params = c.n_params;
    free(c.x);
    free(c.q);
    return st;
}
