/*
 * model.c — a GGUF file as a llama-family model: hyperparameters, the tensor
 * set each architecture needs, and the metadata accessors of the public API.
 */
#include "model.h"
#include "tensors.h"

#include "base/alloc.h"
#include "base/error.h"
#include "base/params.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

typedef unsigned long long ull;

static tkv_model_params model_defaults(void) {
    return (tkv_model_params){.size = sizeof(tkv_model_params), .vocab_only = false, .repack = true,
                              .huge_pages = true};
}

tkv_status tkv_model_params_init(tkv_model_params *p, size_t size) {
    const tkv_model_params d = model_defaults();
    return tkv__params_init(p, size, &d, sizeof d, "tkv_model_params");
}

/* ---- hyperparameters ---------------------------------------------------- */

/*
 * Read an unsigned 32-bit hyperparameter stored as any integer type.
 * Missing: *out = dflt, or TKV_ERR_FORMAT when dflt < 0 (required).
 */
static tkv_status hp_u32(const tkv__gguf *g, const char *arch, const char *name, long long dflt, uint32_t *out) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, name);
    const tkv__gguf_kv *kv = tkv__gguf_find(g, key);
    if (!kv) {
        if (dflt < 0) return tkv__fail(TKV_ERR_FORMAT, "metadata key '%s' is missing", key);
        *out = (uint32_t)dflt;
        return TKV_OK;
    }
    if (kv->type == TKV_META_ARRAY)
        return tkv__fail(TKV_ERR_UNSUPPORTED, "metadata key '%s': per-layer values (an array) are not supported", key);
    int64_t v;
    switch (kv->type) {
    case TKV_META_U8:
    case TKV_META_U16:
    case TKV_META_U32:
    case TKV_META_U64: v = kv->v.u > UINT32_MAX ? -1 : (int64_t)kv->v.u; break;
    case TKV_META_I8:
    case TKV_META_I16:
    case TKV_META_I32:
    case TKV_META_I64: v = kv->v.i; break;
    default:
        return tkv__fail(TKV_ERR_FORMAT, "metadata key '%s': type %s, expected an integer", key,
                         tkv_meta_type_name(kv->type));
    }
    if (v < 0 || v > UINT32_MAX)
        return tkv__fail(TKV_ERR_FORMAT, "metadata key '%s': value out of range for a count", key);
    *out = (uint32_t)v;
    return TKV_OK;
}

/*
 * A per-layer value [ARCH.name] (head_count_kv, feed_forward_length): an
 * array of n_layer 32-bit integers, or with `scalar_ok` one integer for
 * every layer, into vals (n_layer); each value >= 0.
 */
static tkv_status layer_values(const tkv__gguf *g, const char *arch, const char *name, uint32_t n_layer, bool scalar_ok,
                               uint32_t *vals) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, name);
    const tkv__gguf_kv *kv = tkv__gguf_find(g, key);
    if (n_layer > TKV__MAX_LAYERS)
        return tkv__fail(TKV_ERR_UNSUPPORTED, "%u layers: at most %d are supported", n_layer, TKV__MAX_LAYERS);
    if (scalar_ok && kv && kv->type != TKV_META_ARRAY) {
        uint32_t v;
        tkv_status st = hp_u32(g, arch, name, -1, &v);
        for (uint32_t l = 0; l < n_layer && !st; l++) vals[l] = v;
        return st;
    }
    if (!kv || kv->type != TKV_META_ARRAY) return tkv__fail(TKV_ERR_FORMAT, "metadata key '%s': expected an array", key);
    const size_t sz = tkv__gguf_meta_size(kv->elem_type);
    if (kv->elem_type != TKV_META_U32 && kv->elem_type != TKV_META_I32)
        return tkv__fail(TKV_ERR_FORMAT, "metadata key '%s': expected an array of 32-bit integers", key);
    if (kv->n != n_layer)
        return tkv__fail(TKV_ERR_FORMAT, "metadata key '%s': %llu values for %u layers", key, (ull)kv->n, n_layer);
    for (uint32_t l = 0; l < n_layer; l++) {
        uint32_t v;
        memcpy(&v, kv->arr + l * sz, 4);
        if ((int32_t)v < 0) return tkv__fail(TKV_ERR_FORMAT, "metadata key '%s': layer %u has %d", key, l, (int32_t)v);
        vals[l] = v;
    }
    return TKV_OK;
}

/* The largest of n values. */
static uint32_t max_of(const uint32_t *v, uint32_t n) {
    uint32_t m = 0;
    for (uint32_t i = 0; i < n; i++) m = v[i] > m ? v[i] : m;
    return m;
}

/*
 * A hybrid's per-layer array [ARCH.name] (head_count_kv, feed_forward_length)
 * of n_layer 32-bit integers into vals (may be NULL); *max receives the
 * nonzero value, which must be the same on every layer that has one (0 when
 * none has).
 */
static tkv_status layer_array(const tkv__gguf *g, const char *arch, const char *name, uint32_t n_layer, uint32_t *max,
                              uint32_t *vals) {
    uint32_t v[TKV__MAX_LAYERS];
    tkv_status st = layer_values(g, arch, name, n_layer, false, v);
    if (st) return st;
    *max = 0;
    for (uint32_t l = 0; l < n_layer; l++) {
        if (v[l] && *max && v[l] != *max)
            return tkv__fail(TKV_ERR_UNSUPPORTED, "metadata key '%s.%s': layers with %u and %u (one size is supported)",
                             arch, name, *max, v[l]);
        if (v[l]) *max = v[l];
        if (vals) vals[l] = v[l];
    }
    return TKV_OK;
}

/* A hybrid's head_count_kv array: 0 marks a layer without attention (kind[l] = zero_kind, else
   TKV__LAYER_ATTN; kind may be NULL); *max receives the attention layers' count. */
static tkv_status kv_heads_array(const tkv__gguf *g, const char *arch, uint32_t n_layer, uint32_t *max, uint8_t *kind,
                                 tkv__layer_kind zero_kind) {
    uint32_t v[TKV__MAX_LAYERS];
    tkv_status st = layer_array(g, arch, "attention.head_count_kv", n_layer, max, v);
    if (st) return st;
    if (!*max) return tkv__fail(TKV_ERR_UNSUPPORTED, "metadata key '%s.attention.head_count_kv': no attention layer", arch);
    for (uint32_t l = 0; l < n_layer && kind; l++) kind[l] = v[l] ? TKV__LAYER_ATTN : (uint8_t)zero_kind;
    return TKV_OK;
}

/* A float hyperparameter (f32, f64 or an integer). Missing: dflt, or an error when dflt is NaN. */
static tkv_status hp_float(const tkv__gguf *g, const char *arch, const char *name, double dflt, float *out) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, name);
    const tkv__gguf_kv *kv = tkv__gguf_find(g, key);
    if (!kv) {
        if (isnan(dflt)) return tkv__fail(TKV_ERR_FORMAT, "metadata key '%s' is missing", key);
        *out = (float)dflt;
        return TKV_OK;
    }
    if (kv->type != TKV_META_F32 && kv->type != TKV_META_F64)
        return tkv__fail(TKV_ERR_FORMAT, "metadata key '%s': type %s, expected a float", key,
                         tkv_meta_type_name(kv->type));
    if (!isfinite(kv->v.f)) return tkv__fail(TKV_ERR_FORMAT, "metadata key '%s': value is not finite", key);
    *out = (float)kv->v.f;
    return TKV_OK;
}

static tkv_status read_hparams(const tkv__gguf *g, tkv_hparams *hp) {
    tkv_status st;
    memset(hp, 0, sizeof *hp);
    const tkv__gguf_kv *akv = tkv__gguf_find(g, "general.architecture");
    if (!akv) return tkv__fail(TKV_ERR_FORMAT, "metadata key 'general.architecture' is missing");
    if (akv->type != TKV_META_STRING)
        return tkv__fail(TKV_ERR_FORMAT, "metadata key 'general.architecture': type %s, expected string",
                         tkv_meta_type_name(akv->type));
    const char *arch = akv->str.s;
    if (!tkv__arch_find(arch)) {
        char names[256]; /* every name: the list is ~160 characters */
        return tkv__fail(TKV_ERR_UNSUPPORTED, "architecture '%.64s' is not supported (%s)", arch,
                         tkv__arch_names(names, sizeof names));
    }
    snprintf(hp->arch, sizeof hp->arch, "%s", arch);

    char key[128];
    uint32_t n_expert = 0;
    if ((st = hp_u32(g, arch, "expert_count", 0, &n_expert))) return st;
    if (n_expert > 0 && !tkv__arch_find(arch)->moe && !tkv__arch_find(arch)->layer_shapes) /* gemma4 may have them */
        return tkv__fail(TKV_ERR_UNSUPPORTED, "metadata key '%s.expert_count' = %u: mixture-of-experts models are not supported",
                         arch, n_expert);

    if ((st = hp_u32(g, arch, "context_length", -1, &hp->n_ctx_train))) return st;
    if ((st = hp_u32(g, arch, "embedding_length", -1, &hp->n_embd))) return st;
    if ((st = hp_u32(g, arch, "block_count", -1, &hp->n_layer))) return st;
    if (tkv__arch_find(arch)->deltanet) { /* Qwen3.5/3.6 files count their multi-token-prediction blocks
                                             too: the model proper is the layers before them */
        uint32_t nextn = 0;
        if ((st = hp_u32(g, arch, "nextn_predict_layers", 0, &nextn))) return st;
        if (nextn >= hp->n_layer)
            return tkv__fail(TKV_ERR_FORMAT, "metadata key '%s.nextn_predict_layers' = %u of %u blocks", arch, nextn,
                             hp->n_layer);
        hp->n_layer -= nextn;
    }
    /* experts alone may give the widths (qwen35moe): the FFN scratch then fits the widest of them */
    const bool moe = tkv__arch_find(arch)->moe;
    snprintf(key, sizeof key, "%s.feed_forward_length", arch);
    const tkv__gguf_kv *ffkv = tkv__gguf_find(g, key);
    const bool shapes = tkv__arch_find(arch)->layer_shapes; /* gemma4: per-layer arrays, their widest here */
    uint32_t per_layer[TKV__MAX_LAYERS];
    if (tkv__arch_find(arch)->one_block && ffkv && ffkv->type == TKV_META_ARRAY) { /* the MLP layers' width */
        if ((st = layer_array(g, arch, "feed_forward_length", hp->n_layer, &hp->n_ff, NULL))) return st;
    } else if (shapes) {
        if ((st = layer_values(g, arch, "feed_forward_length", hp->n_layer, true, per_layer))) return st;
        hp->n_ff = max_of(per_layer, hp->n_layer);
    } else if ((st = hp_u32(g, arch, "feed_forward_length", moe ? 0 : -1, &hp->n_ff))) {
        return st;
    }
    if (!hp->n_ff && moe) {
        uint32_t ff_e = 0, ff_s = 0;
        if ((st = hp_u32(g, arch, "expert_feed_forward_length", 0, &ff_e))) return st;
        if ((st = hp_u32(g, arch, "expert_shared_feed_forward_length", 0, &ff_s))) return st;
        hp->n_ff = ff_e > ff_s ? ff_e : ff_s;
    }
    if ((st = hp_u32(g, arch, "attention.head_count", -1, &hp->n_head))) return st;
    snprintf(key, sizeof key, "%s.attention.head_count_kv", arch);
    const tkv__gguf_kv *hkv = tkv__gguf_find(g, key);
    if ((tkv__arch_find(arch)->shortconv || tkv__arch_find(arch)->mamba2) && hkv && hkv->type == TKV_META_ARRAY) {
        if ((st = kv_heads_array(g, arch, hp->n_layer, &hp->n_head_kv, NULL, TKV__LAYER_ATTN))) return st;
    } else if (shapes && hkv) {
        if ((st = layer_values(g, arch, "attention.head_count_kv", hp->n_layer, true, per_layer))) return st;
        hp->n_head_kv = max_of(per_layer, hp->n_layer);
        for (uint32_t l = 0; l < hp->n_layer; l++)
            if (!per_layer[l] || hp->n_head % per_layer[l])
                return tkv__fail(TKV_ERR_FORMAT, "metadata key '%s': layer %u has %u KV heads for %u query heads "
                                 "(expected a divisor)", key, l, per_layer[l], hp->n_head);
    } else if ((st = hp_u32(g, arch, "attention.head_count_kv", hp->n_head, &hp->n_head_kv))) {
        return st;
    }
    if (!hp->n_embd || !hp->n_layer || !hp->n_ff || !hp->n_head || !hp->n_head_kv)
        return tkv__fail(TKV_ERR_FORMAT,
                         "hyperparameters: embedding_length %u, block_count %u, feed_forward_length %u, head_count %u, "
                         "head_count_kv %u: none may be 0",
                         hp->n_embd, hp->n_layer, hp->n_ff, hp->n_head, hp->n_head_kv);
    if (hp->n_head % hp->n_head_kv)
        return tkv__fail(TKV_ERR_FORMAT, "hyperparameters: head_count %u is not a multiple of head_count_kv %u",
                         hp->n_head, hp->n_head_kv);
    snprintf(key, sizeof key, "%s.attention.key_length", arch);
    if (hp->n_embd % hp->n_head && !tkv__gguf_find(g, key))
        return tkv__fail(TKV_ERR_FORMAT, "hyperparameters: embedding_length %u is not a multiple of head_count %u",
                         hp->n_embd, hp->n_head);
    uint32_t v_len;
    if ((st = hp_u32(g, arch, "attention.key_length", hp->n_embd / hp->n_head, &hp->head_dim))) return st;
    if ((st = hp_u32(g, arch, "attention.value_length", hp->head_dim, &v_len))) return st;
    if (v_len != hp->head_dim)
        return tkv__fail(TKV_ERR_UNSUPPORTED, "hyperparameters: value_length %u differs from key_length %u", v_len,
                         hp->head_dim);
    if ((st = hp_u32(g, arch, "rope.dimension_count", hp->head_dim, &hp->n_rot))) return st;
    if (hp->head_dim == 0 || hp->n_rot > hp->head_dim || hp->n_rot % 2)
        return tkv__fail(TKV_ERR_FORMAT, "hyperparameters: rope.dimension_count %u must be even and at most the head size %u",
                         hp->n_rot, hp->head_dim);
    if ((st = hp_float(g, arch, "rope.freq_base", 10000.0, &hp->rope_freq_base))) return st;
    if ((st = hp_float(g, arch, "attention.layer_norm_rms_epsilon", NAN, &hp->rms_eps))) return st;
    if (hp->rope_freq_base <= 0 || hp->rms_eps <= 0)
        return tkv__fail(TKV_ERR_FORMAT, "hyperparameters: rope.freq_base %g and layer_norm_rms_epsilon %g must be > 0",
                         hp->rope_freq_base, hp->rms_eps);

    /* RoPE scaling: the `rope.scaling.*` keys, or the older `rope.scale_linear`. */
    snprintf(key, sizeof key, "%s.rope.scaling.type", arch);
    const tkv__gguf_kv *skv = tkv__gguf_find(g, key);
    float factor = 0;
    snprintf(hp->rope_scaling, sizeof hp->rope_scaling, "none");
    if (skv) {
        if (skv->type != TKV_META_STRING)
            return tkv__fail(TKV_ERR_FORMAT, "metadata key '%s': type %s, expected string", key,
                             tkv_meta_type_name(skv->type));
        if (strcmp(skv->str.s, "none") && strcmp(skv->str.s, "linear") && strcmp(skv->str.s, "yarn"))
            return tkv__fail(TKV_ERR_UNSUPPORTED,
                             "metadata key '%s': RoPE scaling '%.32s' is not supported (none, linear, yarn)", key,
                             skv->str.s);
        snprintf(hp->rope_scaling, sizeof hp->rope_scaling, "%s", skv->str.s);
    }
    if ((st = hp_float(g, arch, "rope.scaling.factor", 0.0, &factor))) return st;
    if (factor == 0 && (st = hp_float(g, arch, "rope.scale_linear", 0.0, &factor))) return st;
    if (factor < 0) return tkv__fail(TKV_ERR_FORMAT, "hyperparameters: RoPE scaling factor %g is negative", factor);
    if (factor > 0 && !skv) snprintf(hp->rope_scaling, sizeof hp->rope_scaling, "linear");
    hp->rope_freq_scale =
        factor > 0 && (!strcmp(hp->rope_scaling, "linear") || !strcmp(hp->rope_scaling, "yarn")) ? 1.0f / factor : 1.0f;
    if ((st = hp_u32(g, arch, "rope.scaling.original_context_length", hp->n_ctx_train, &hp->n_ctx_orig))) return st;

    /* Vocabulary size: the explicit key, else the token list, else the embedding rows. */
    const tkv__gguf_kv *tokens = tkv__gguf_find(g, "tokenizer.ggml.tokens");
    const tkv__gguf_tensor *embd = tkv__gguf_tensor_find(g, "token_embd.weight");
    long long vocab_dflt = -1;
    if (tokens && tokens->type == TKV_META_ARRAY && tokens->n <= UINT32_MAX) vocab_dflt = (long long)tokens->n;
    else if (embd && embd->n_dims == 2 && embd->ne[1] <= UINT32_MAX) vocab_dflt = (long long)embd->ne[1];
    if ((st = hp_u32(g, arch, "vocab_size", vocab_dflt < 0 ? 0 : vocab_dflt, &hp->n_vocab))) return st;
    if (hp->n_vocab == 0 && vocab_dflt < 0)
        return tkv__fail(TKV_ERR_FORMAT, "vocabulary size unknown: no '%s.vocab_size', 'tokenizer.ggml.tokens' or "
                                         "2-D 'token_embd.weight'", arch);
    if (hp->n_vocab == 0) return tkv__fail(TKV_ERR_FORMAT, "hyperparameters: vocabulary size is 0");
    if (tokens && tokens->type == TKV_META_ARRAY && tokens->n != hp->n_vocab)
        return tkv__fail(TKV_ERR_FORMAT, "metadata key 'tokenizer.ggml.tokens': %llu tokens, but the vocabulary size is %u",
                         (ull)tokens->n, hp->n_vocab);
    hp->tied_output = tkv__gguf_tensor_find(g, "output.weight") == NULL;
    return TKV_OK;
}

/* ---- the tensors an architecture needs ---------------------------------- */

/* tkv__tensors_each: one tensor of the list, present (unless optional) with its shape. */
typedef struct check_ctx {
    const tkv__gguf *g;
    const char *arch;
} check_ctx;

static tkv_status check_tensor(const tkv__tensor_need *n, void *ud) {
    const check_ctx *c = ud;
    const tkv__gguf_tensor *t = tkv__gguf_tensor_find(c->g, n->name);
    if (!t) {
        if (n->optional) return TKV_OK;
        return tkv__fail(TKV_ERR_FORMAT, "tensor '%s' is missing (needed by %s)", n->name, c->arch);
    }
    if (t->ne[0] == n->ne[0] && t->ne[1] == n->ne[1] && t->ne[2] == n->ne[2] && t->ne[3] == 1) return TKV_OK;
    char want[80];
    int w = snprintf(want, sizeof want, "%llu", (ull)n->ne[0]);
    for (unsigned d = 1; d < n->n_dims && w > 0 && (size_t)w < sizeof want; d++)
        w += snprintf(want + w, sizeof want - (size_t)w, ", %llu", (ull)n->ne[d]);
    return tkv__fail(TKV_ERR_FORMAT, "tensor '%s': shape [%llu, %llu, %llu, %llu], expected [%s]", n->name,
                     (ull)t->ne[0], (ull)t->ne[1], (ull)t->ne[2], (ull)t->ne[3], want);
}

/*
 * Qwen3.5's interleaved multi-axis RoPE (rope.dimension_sections: pairs for
 * axes t, h, w and a fourth, e). The reference rotates pair i of the n_rot / 2
 * by axis t, h or w when s = i % (the counts' sum) has s % 3 == 0 and
 * s < 3 t, s % 3 == 1 and s < 3 h, or s % 3 == 2 and s < 3 w; any other pair
 * by axis e. For text t, h and w are the token's position and e is 0: such a
 * pair does not rotate. The engine rotates every pair by the position (NEOX),
 * so a file whose sections leave a pair to axis e is refused by that name.
 * No key: every pair rotates.
 */
static tkv_status check_sections(const tkv__gguf *g, const tkv_hparams *hp) {
    char key[128];
    snprintf(key, sizeof key, "%s.rope.dimension_sections", hp->arch);
    const tkv__gguf_kv *kv = tkv__gguf_find(g, key);
    if (!kv) return TKV_OK;
    if (kv->type != TKV_META_ARRAY || (kv->elem_type != TKV_META_I32 && kv->elem_type != TKV_META_U32) || kv->n != 4)
        return tkv__fail(TKV_ERR_FORMAT, "metadata key '%s': expected an array of 4 32-bit integers", key);
    int32_t sec[4]; /* t, h, w, e */
    int64_t sum = 0;
    for (int k = 0; k < 4; k++) memcpy(&sec[k], kv->arr + 4 * k, 4), sum += sec[k];
    for (int k = 0; k < 4; k++)
        if (sec[k] < 0 || sum == 0)
            return tkv__fail(TKV_ERR_FORMAT, "metadata key '%s': [%d, %d, %d, %d]: expected counts >= 0, not all 0", key,
                             sec[0], sec[1], sec[2], sec[3]);
    for (uint32_t i = 0; i < hp->n_rot / 2; i++) {
        const int64_t s = i % sum;
        if (!((s % 3 == 0 && s < 3 * sec[0]) || (s % 3 == 1 && s < 3 * sec[1]) || (s % 3 == 2 && s < 3 * sec[2])))
            return tkv__fail(TKV_ERR_UNSUPPORTED, "metadata key '%s': [%d, %d, %d, %d] leaves rotary pair %u of %u to the "
                             "fourth axis, which does not rotate text (not supported: every pair rotates here)",
                             key, sec[0], sec[1], sec[2], sec[3], i, hp->n_rot / 2);
    }
    return TKV_OK;
}

/*
 * A delta-net hybrid's sizes (deltanet.h) and which layers are delta nets:
 * every layer but those with (l + 1) % full_attention_interval == 0. A file
 * that lists them (attention.recurrent_layers) is refused by that name: the
 * converter writes the interval, and a list this code ignored would run the
 * wrong layers.
 */
static tkv_status read_delta(const tkv__gguf *g, const tkv_hparams *hp, tkv__hp_ext *x) {
    const char *a = hp->arch;
    tkv__delta_dims *d = &x->delta;
    char key[128];
    tkv_status st;
    uint32_t every, inner;
    snprintf(key, sizeof key, "%s.attention.recurrent_layers", a);
    if (tkv__gguf_find(g, key))
        return tkv__fail(TKV_ERR_UNSUPPORTED, "metadata key '%s': a list of recurrent layers is not supported "
                         "(full_attention_interval is)", key);
    if (hp->n_layer > TKV__MAX_LAYERS)
        return tkv__fail(TKV_ERR_UNSUPPORTED, "%u layers: a hybrid may have at most %d", hp->n_layer, TKV__MAX_LAYERS);
    if ((st = check_sections(g, hp))) return st;
    if ((st = hp_u32(g, a, "full_attention_interval", 4, &every))) return st;
    if ((st = hp_u32(g, a, "ssm.conv_kernel", -1, &d->d_conv))) return st;
    if ((st = hp_u32(g, a, "ssm.state_size", -1, &d->d_k))) return st;
    if ((st = hp_u32(g, a, "ssm.group_count", -1, &d->n_k))) return st;
    if ((st = hp_u32(g, a, "ssm.time_step_rank", -1, &d->n_v))) return st;
    if ((st = hp_u32(g, a, "ssm.inner_size", -1, &inner))) return st;
    if (every == 0 || d->d_conv < 2 || d->d_conv > 16 || !d->d_k || !d->n_k || !d->n_v || d->n_v % d->n_k ||
        inner % d->n_v || inner / d->n_v == 0 || inner / d->n_v > TKV__DELTA_MAX_DV || d->d_k > 4096)
        return tkv__fail(TKV_ERR_FORMAT,
                         "metadata keys '%s.ssm.*': conv kernel %u, state size %u, %u groups, %u v heads, inner size %u, "
                         "full_attention_interval %u: expected a kernel of 2..16, v heads a multiple of the groups, "
                         "v heads of 1..%d elements, an interval > 0",
                         a, d->d_conv, d->d_k, d->n_k, d->n_v, inner, every, TKV__DELTA_MAX_DV);
    d->d_v = inner / d->n_v;
    d->channels = 2 * d->n_k * d->d_k + inner;
    d->layer_floats = (size_t)(d->d_conv - 1) * d->channels + (size_t)d->n_v * d->d_k * d->d_v;
    x->state_floats = 0;
    for (uint32_t l = 0; l < hp->n_layer; l++) {
        x->kind[l] = (l + 1) % every ? TKV__LAYER_DELTANET : TKV__LAYER_ATTN;
        x->state_off[l] = x->state_floats;
        if (x->kind[l] == TKV__LAYER_DELTANET) x->state_floats += d->layer_floats;
    }
    return TKV_OK;
}

/*
 * A Mamba-2 hybrid's sizes (mamba2.h) and layer kinds: attention where
 * head_count_kv has heads; else, with arch->one_block, an MLP where
 * feed_forward_length has a width; else Mamba-2.
 */
static tkv_status read_mamba(const tkv__gguf *g, const tkv_hparams *hp, tkv__hp_ext *x) {
    const char *a = hp->arch;
    tkv__mamba_dims *d = &x->mamba;
    tkv_status st;
    uint32_t max, hkv[TKV__MAX_LAYERS], ff[TKV__MAX_LAYERS] = {0};
    if (hp->n_layer > TKV__MAX_LAYERS)
        return tkv__fail(TKV_ERR_UNSUPPORTED, "%u layers: a hybrid may have at most %d", hp->n_layer, TKV__MAX_LAYERS);
    if ((st = layer_array(g, a, "attention.head_count_kv", hp->n_layer, &max, hkv))) return st;
    if (tkv__arch_find(a)->one_block && (st = layer_array(g, a, "feed_forward_length", hp->n_layer, &max, ff))) return st;
    if ((st = hp_u32(g, a, "ssm.conv_kernel", -1, &d->d_conv))) return st;
    if ((st = hp_u32(g, a, "ssm.state_size", -1, &d->d_state))) return st;
    if ((st = hp_u32(g, a, "ssm.group_count", -1, &d->n_group))) return st;
    if ((st = hp_u32(g, a, "ssm.time_step_rank", -1, &d->n_head))) return st;
    if ((st = hp_u32(g, a, "ssm.inner_size", -1, &d->d_inner))) return st;
    if (d->d_conv < 2 || d->d_conv > 16 || !d->d_state || !d->n_group || !d->n_head || d->n_head % d->n_group ||
        d->d_inner % d->n_head || d->d_inner % d->n_group)
        return tkv__fail(TKV_ERR_FORMAT,
                         "metadata keys '%s.ssm.*': conv kernel %u, state size %u, %u groups, %u heads, inner size %u: "
                         "expected a kernel of 2..16, heads a multiple of the groups, the inner size of whole heads",
                         a, d->d_conv, d->d_state, d->n_group, d->n_head, d->d_inner);
    d->head_dim = d->d_inner / d->n_head;
    d->channels = d->d_inner + 2 * d->n_group * d->d_state;
    d->in_proj = d->d_inner + d->channels + d->n_head;
    d->layer_floats = (size_t)(d->d_conv - 1) * d->channels + (size_t)d->d_inner * d->d_state;
    x->state_floats = 0;
    for (uint32_t l = 0; l < hp->n_layer; l++) {
        x->kind[l] = hkv[l] ? TKV__LAYER_ATTN : ff[l] ? TKV__LAYER_MLP : TKV__LAYER_MAMBA2;
        x->state_off[l] = x->state_floats;
        if (x->kind[l] == TKV__LAYER_MAMBA2) x->state_floats += d->layer_floats;
    }
    return TKV_OK;
}

/* gemma4's window layers: attention.sliding_window_pattern, a bool array (true: a window layer). */
static tkv_status swa_pattern(const tkv__gguf *g, const tkv_hparams *hp, tkv__hp_ext *x) {
    char key[128];
    snprintf(key, sizeof key, "%s.attention.sliding_window_pattern", hp->arch);
    const tkv__gguf_kv *kv = tkv__gguf_find(g, key);
    if (!kv || kv->type != TKV_META_ARRAY || kv->elem_type != TKV_META_BOOL || kv->n != hp->n_layer)
        return tkv__fail(TKV_ERR_FORMAT, "metadata key '%s': expected an array of %u bools (one per layer)", key,
                         hp->n_layer);
    for (uint32_t l = 0; l < hp->n_layer; l++) x->attn[l].swa = x->swa_window && kv->arr[l] != 0;
    return TKV_OK;
}

/*
 * gemma4's layers (arch->layer_shapes): KV heads and FFN widths per layer
 * (an array, or one value), window layers from swa_pattern with heads of
 * key_length_swa and RoPE over rope.dimension_count_swa dims, K as V where
 * a layer has no attn_v, and the last attention.shared_kv_layers layers
 * reading the cache of layer n_kv - 2 (window) or n_kv - 1 (full), n_kv the
 * layers that own K/V, as the reference does. A shared layer must match its
 * source's shape: it reads the rows that layer wrote.
 */
static tkv_status read_shapes(const tkv__gguf *g, const tkv_hparams *hp, tkv__hp_ext *x) {
    const char *a = hp->arch;
    char key[128];
    tkv_status st;
    uint32_t hkv[TKV__MAX_LAYERS], ff[TKV__MAX_LAYERS], hd_swa, v_swa, shared;
    snprintf(key, sizeof key, "%s.attention.head_count_kv", a);
    if (!tkv__gguf_find(g, key)) {
        for (uint32_t l = 0; l < hp->n_layer; l++) hkv[l] = hp->n_head_kv;
    } else if ((st = layer_values(g, a, "attention.head_count_kv", hp->n_layer, true, hkv))) {
        return st;
    }
    if ((st = layer_values(g, a, "feed_forward_length", hp->n_layer, true, ff))) return st;
    if ((st = swa_pattern(g, hp, x))) return st;
    if ((st = hp_u32(g, a, "attention.key_length_swa", hp->head_dim, &hd_swa))) return st;
    if ((st = hp_u32(g, a, "attention.value_length_swa", hd_swa, &v_swa))) return st;
    if ((st = hp_u32(g, a, "rope.dimension_count_swa", hd_swa, &x->n_rot_swa))) return st;
    if ((st = hp_u32(g, a, "attention.shared_kv_layers", 0, &shared))) return st;
    if ((st = hp_u32(g, a, "embedding_length_per_layer_input", 0, &x->n_pli))) return st; /* 0: none */
    if (!hd_swa || v_swa != hd_swa || x->n_rot_swa > hd_swa || x->n_rot_swa % 2)
        return tkv__fail(TKV_ERR_FORMAT, "metadata keys '%s.attention.key_length_swa' %u, 'value_length_swa' %u, "
                         "'rope.dimension_count_swa' %u: expected equal key and value sizes > 0 and an even rotation "
                         "of at most the head size", a, hd_swa, v_swa, x->n_rot_swa);
    if (shared >= hp->n_layer)
        return tkv__fail(TKV_ERR_FORMAT, "metadata key '%s.attention.shared_kv_layers' = %u of %u layers: at least "
                         "one layer must own K/V", a, shared, hp->n_layer);
    const uint32_t n_kv = hp->n_layer - shared;
    x->kv_layers = n_kv;
    x->kv_width = 0;
    for (uint32_t l = 0; l < hp->n_layer; l++) {
        tkv__attn_layer *A = &x->attn[l];
        A->hd = A->swa ? hd_swa : hp->head_dim;
        A->n_rot = A->swa ? x->n_rot_swa : hp->n_rot;
        A->n_head_kv = hkv[l], A->n_ff = ff[l];
        if (!A->n_ff) return tkv__fail(TKV_ERR_FORMAT, "metadata key '%s.feed_forward_length': layer %u has 0", a, l);
        if (l < n_kv) {
            snprintf(key, sizeof key, "blk.%u.attn_v.weight", l);
            A->k_as_v = !tkv__gguf_tensor_find(g, key);
            if (A->n_head_kv * A->hd > x->kv_width) x->kv_width = A->n_head_kv * A->hd;
            continue;
        }
        const uint32_t src = A->swa ? n_kv - 2 : n_kv - 1; /* unsigned: n_kv < 2 wraps past l */
        if (src >= l || x->attn[src].swa != A->swa || x->attn[src].n_head_kv != A->n_head_kv)
            return tkv__fail(TKV_ERR_UNSUPPORTED, "metadata key '%s.attention.shared_kv_layers' = %u: layer %u (%s) "
                             "would read the cache of layer %d, which is not a layer of its kind and KV heads", a,
                             shared, l, A->swa ? "window" : "full", src >= l ? -1 : (int)src);
        A->own_kv = false, A->k_as_v = false, A->kv_layer = src;
    }
    return TKV_OK;
}

/*
 * Each layer's attention (model.h tkv__hp_ext.attn): the model's head size,
 * KV heads, rotation and FFN width on every layer, its own K/V at cache
 * layer l, a window where arch->swa_period says (the built-in rule); gemma4
 * then reads its own (read_shapes).
 */
static tkv_status read_layers(const tkv__gguf *g, const tkv_hparams *hp, const tkv__arch *ar, tkv__hp_ext *x) {
    if (hp->n_layer > TKV__MAX_LAYERS)
        return tkv__fail(TKV_ERR_UNSUPPORTED, "%u layers: at most %d are supported", hp->n_layer, TKV__MAX_LAYERS);
    const unsigned p = ar->swa_period;
    for (uint32_t l = 0; l < hp->n_layer; l++)
        x->attn[l] = (tkv__attn_layer){.hd = hp->head_dim, .n_head_kv = hp->n_head_kv, .n_rot = hp->n_rot,
                                       .n_ff = hp->n_ff, .kv_layer = l, .own_kv = true,
                                       .swa = x->swa_window && p && l % p != p - 1};
    x->kv_layers = hp->n_layer;
    x->n_rot_swa = hp->n_rot;
    x->kv_width = hp->n_head_kv * hp->head_dim;
    return ar->layer_shapes ? read_shapes(g, hp, x) : TKV_OK;
}

/*
 * The hyperparameters some architectures add (model.h tkv__hp_ext), with the
 * same checks as the others: a key of the wrong type fails the load.
 * YaRN: the correction dims of the blend between interpolated and
 * extrapolated angles come from the original context, the base and
 * beta_fast / beta_slow (default 32 and 1):
 *   dim(b) = n_rot ln(n_ctx_orig / (2 pi b)) / (2 ln base),
 *   corr = [max(0, floor(dim(beta_fast))), min(n_rot - 1, ceil(dim(beta_slow)))];
 * without a yarn_log_multiplier key cos and sin are scaled by
 * 1 + 0.1 ln(factor) (gpt-oss), with one (mistral3: 1) by 1.
 */
static tkv_status read_ext(const tkv__gguf *g, const tkv_hparams *hp, tkv__hp_ext *x) {
    const char *a = hp->arch;
    const tkv__arch *ar = tkv__arch_find(a);
    tkv_status st;
    char key[128];
    memset(x, 0, sizeof *x);
    if ((st = hp_float(g, a, "rope.scaling.attn_factor", 1.0, &x->rope_attn_factor))) return st;
    if ((st = hp_float(g, a, "attention.temperature_scale", 0.0, &x->attn_temp_scale))) return st;
    if ((st = hp_float(g, a, "rope.freq_base_swa", 10000.0, &x->rope_base_swa))) return st;
    if (ar->gemma) {
        if ((st = hp_float(g, a, "attn_logit_softcapping", 0.0, &x->attn_softcap))) return st;
        if ((st = hp_float(g, a, "final_logit_softcapping", 0.0, &x->final_softcap))) return st;
    }
    if ((ar->swa_period || ar->layer_shapes) && (st = hp_u32(g, a, "attention.sliding_window", 0, &x->swa_window)))
        return st;
    if ((st = read_layers(g, hp, ar, x))) return st;
    uint32_t n_expert = 0;
    if ((st = hp_u32(g, a, "expert_count", 0, &n_expert))) return st;
    if (ar->moe || (ar->layer_shapes && n_expert > 0)) { /* gemma4's experts sit beside its dense FFN */
        tkv__moe_dims *md = &x->moe;
        if ((st = hp_u32(g, a, "expert_count", -1, &md->n_expert))) return st;
        if ((st = hp_u32(g, a, "expert_used_count", -1, &md->n_used))) return st;
        if ((st = hp_u32(g, a, "expert_feed_forward_length", -1, &md->n_ff))) return st;
        if (ar->shared_expert && (st = hp_u32(g, a, "expert_shared_feed_forward_length", -1, &md->n_ff_shared)))
            return st;
        if (ar->shared_expert && (md->n_ff_shared < 1 || md->n_ff_shared > hp->n_ff))
            return tkv__fail(TKV_ERR_FORMAT, "metadata key '%s.expert_shared_feed_forward_length' = %u: expected "
                             "1..%u (feed_forward_length)", a, md->n_ff_shared, hp->n_ff);
        if (md->n_expert < 1 || md->n_expert > TKV__MOE_MAX_EXPERTS || md->n_used < 1 || md->n_used > md->n_expert ||
            md->n_ff < 1)
            return tkv__fail(TKV_ERR_FORMAT, "metadata keys '%s.expert_*': %u experts, %u used, %u wide: expected "
                             "1..%d experts, 1..experts used, a width of at least 1",
                             a, md->n_expert, md->n_used, md->n_ff, TKV__MOE_MAX_EXPERTS);
        if ((st = hp_u32(g, a, "leading_dense_block_count", 0, &md->n_dense_lead))) return st;
        if (md->n_dense_lead >= hp->n_layer || (md->n_dense_lead && !hp->n_ff))
            return tkv__fail(TKV_ERR_FORMAT, "metadata key '%s.leading_dense_block_count' = %u: expected fewer than "
                             "the %u blocks, and a feed_forward_length for them", a, md->n_dense_lead, hp->n_layer);
        uint32_t gating = ar->oai ? TKV__GATING_SOFTMAX_WEIGHT : TKV__GATING_SOFTMAX;
        if ((st = hp_u32(g, a, "expert_gating_func", gating, &gating))) return st;
        if (gating < TKV__GATING_SOFTMAX || gating > TKV__GATING_SOFTMAX_WEIGHT)
            return tkv__fail(TKV_ERR_UNSUPPORTED, "metadata key '%s.expert_gating_func' = %u: expected 1 (softmax), "
                             "2 (sigmoid) or 3 (softmax over the chosen)", a, gating);
        md->gating = (tkv__moe_gating)gating;
        if ((st = hp_float(g, a, "expert_weights_scale", 0.0, &md->w_scale))) return st;
    }
    if (ar->shortconv) {
        uint32_t unused;
        snprintf(key, sizeof key, "%s.attention.head_count_kv", a);
        const tkv__gguf_kv *hkv = tkv__gguf_find(g, key);
        if (hkv && hkv->type == TKV_META_ARRAY &&
            (st = kv_heads_array(g, a, hp->n_layer, &unused, x->kind, TKV__LAYER_SHORTCONV)))
            return st;
        if ((st = hp_u32(g, a, "shortconv.l_cache", 3, &x->conv_len))) return st;
        if (x->conv_len != 3)
            return tkv__fail(TKV_ERR_FORMAT, "metadata key '%s.shortconv.l_cache' = %u: only 3 taps are supported", a, x->conv_len);
        for (uint32_t l = 0; l < hp->n_layer; l++)
            if (x->kind[l] == TKV__LAYER_SHORTCONV && x->kv_width < hp->n_embd) x->kv_width = hp->n_embd;
    }
    if (ar->deltanet && (st = read_delta(g, hp, x))) return st;
    if (ar->mamba2 && (st = read_mamba(g, hp, x))) return st;
    x->embd_scale = x->residual_scale = x->logit_scale = 1.0f;
    if (ar->granite) {
        if ((st = hp_float(g, a, "embedding_scale", 1.0, &x->embd_scale))) return st;
        if ((st = hp_float(g, a, "residual_scale", 1.0, &x->residual_scale))) return st;
        if ((st = hp_float(g, a, "logit_scale", 1.0, &x->logit_scale))) return st;
        if ((st = hp_float(g, a, "attention.scale", 0.0, &x->attn_scale))) return st;
        if (x->logit_scale == 0) return tkv__fail(TKV_ERR_FORMAT, "metadata key '%s.logit_scale' is 0 (logits are divided by it)", a);
    }
    if (ar->attn_scale > 0) x->attn_scale = ar->attn_scale;
    if (!strcmp(hp->rope_scaling, "yarn")) {
        float beta_fast, beta_slow, unused;
        if ((st = hp_float(g, a, "rope.scaling.yarn_beta_fast", 32.0, &beta_fast))) return st;
        if ((st = hp_float(g, a, "rope.scaling.yarn_beta_slow", 1.0, &beta_slow))) return st;
        const float n = (float)hp->n_rot, base = hp->rope_freq_base, ctx = (float)hp->n_ctx_orig;
        const float pi = 3.14159265358979f;
        const float lo = floorf(n * logf(ctx / (beta_fast * 2 * pi)) / (2 * logf(base)));
        const float hi = ceilf(n * logf(ctx / (beta_slow * 2 * pi)) / (2 * logf(base)));
        x->yarn = true;
        x->yarn_corr[0] = lo > 0 ? lo : 0;
        x->yarn_corr[1] = hi < n - 1 ? hi : n - 1;
        snprintf(key, sizeof key, "%s.rope.scaling.yarn_log_multiplier", a);
        if (!tkv__gguf_find(g, key)) x->rope_attn_factor *= 1.0f + 0.1f * logf(1.0f / hp->rope_freq_scale);
        else if ((st = hp_float(g, a, "rope.scaling.yarn_log_multiplier", 1.0, &unused))) return st;
    }
    return TKV_OK;
}

static tkv_status check_tensors(const tkv__gguf *g, const tkv_hparams *hp, const tkv__hp_ext *x) {
    check_ctx c = {g, hp->arch};
    const tkv__layout lay = {&x->moe, &x->delta, &x->mamba, x->kind, x->attn, x->n_pli};
    return tkv__tensors_each(tkv__arch_find(hp->arch), hp, &lay, check_tensor, &c);
}

/* gemma4's experts: each layer's gate and up are one stack (ffn_gate_up_exps) or two, not both or neither. */
static tkv_status check_experts(const tkv__weights *w, const tkv_hparams *hp, const tkv__hp_ext *x) {
    if (!tkv__arch_find(hp->arch)->layer_shapes || !x->moe.n_expert) return TKV_OK;
    for (uint32_t l = 0; l < hp->n_layer; l++) {
        const tkv__layer *L = &w->layers[l];
        const bool two = L->exp_gate.data && L->exp_up.data, one = L->exp_gate_up.data != NULL;
        if (one == two || (!two && (L->exp_gate.data || L->exp_up.data)))
            return tkv__fail(TKV_ERR_FORMAT, "layer %u's experts: expected blk.%u.ffn_gate_up_exps.weight or both "
                             "blk.%u.ffn_gate_exps.weight and blk.%u.ffn_up_exps.weight", l, l, l, l);
    }
    return TKV_OK;
}

/* ---- load / free -------------------------------------------------------- */

/* The growth the packed layouts may take (tkv__weights_pack): half of what the machine (or the process's cgroup)
   has available once the whole file is resident, the other half left to the contexts' caches and buffers, which
   the load does not know yet. SIZE_MAX where the available memory cannot be read. */
static size_t pack_room(size_t file_size) {
    const size_t avail = tkv__mem_available();
    if (avail == SIZE_MAX) return SIZE_MAX;
    return avail > file_size ? (avail - file_size) / 2 : 0;
}

static tkv_status finish_load(tkv__gguf *g, const tkv_model_params *p, tkv_model **out) {
    tkv_hparams hp;
    tkv_status st = read_hparams(g, &hp);
    tkv__hp_ext ext = {0};
    if (st == TKV_OK) st = read_ext(g, &hp, &ext);
    tkv__weights w = {0};
    if (st == TKV_OK && !p->vocab_only) {
        if (g->n_tensors == 0)
            st = tkv__fail(TKV_ERR_FORMAT, "the file has no tensors (a vocabulary-only file): it loads only with vocab_only");
        else
            st = check_tensors(g, &hp, &ext);
        if (st == TKV_OK) st = tkv__weights_bind(g, &hp, tkv__arch_find(hp.arch), &(tkv__layout){&ext.moe, &ext.delta, &ext.mamba, ext.kind, ext.attn, ext.n_pli}, &w);
        if (st == TKV_OK) st = check_experts(&w, &hp, &ext);
        if (st == TKV_OK && p->repack) st = tkv__weights_pack(&w, &hp, g, p->huge_pages, pack_room(g->size));
        if (st) tkv__weights_free(&w);
    }
    if (st && !p->vocab_only) {
        tkv__gguf_free(g);
        return st;
    }
    tkv_model *m = tkv__calloc(1, sizeof *m);
    if (!m) {
        tkv__weights_free(&w);
        tkv__gguf_free(g);
        return tkv__fail(TKV_ERR_NOMEM, "out of memory for the model");
    }
    m->magic = TKV__MODEL_MAGIC;
    pthread_mutex_init(&m->fp_mu, NULL);
    m->gguf = g;
    m->w = w;
    m->vocab_only = p->vocab_only;
    m->has_hparams = st == TKV_OK;
    if (m->has_hparams) m->hp = hp, m->arch = tkv__arch_find(hp.arch), m->ext = ext;
    else snprintf(m->hparams_error, sizeof m->hparams_error, "%s", tkv_last_error(NULL));

    /* The tokenizer: a model without tokenizer metadata still runs on ids,
       but broken tokenizer metadata makes a broken model. Running out of
       memory fails every load. */
    m->tok_status = tkv__tokenizer_create(g, &m->tok);
    if (m->tok_status) {
        snprintf(m->tok_error, sizeof m->tok_error, "%s", tkv_last_error(NULL));
        bool absent = !tkv__gguf_find(g, "tokenizer.ggml.model");
        if (m->tok_status == TKV_ERR_NOMEM || (!p->vocab_only && !absent)) {
            tkv_status tst = m->tok_status;
            tkv_model_free(m);
            return tst; /* the tokenizer's message stands */
        }
    }
    *out = m;
    return TKV_OK;
}

tkv_status tkv_model_load(const char *path, const tkv_model_params *params, tkv_model **out) {
    if (!out) return tkv__fail(TKV_ERR_INVALID, "tkv_model_load: out is NULL");
    *out = NULL;
    tkv_model_params p = model_defaults();
    tkv_status st = params ? tkv__params_read(&p, sizeof p, params, "tkv_model_params") : TKV_OK;
    if (st) return st;
    tkv__gguf *g = NULL;
    if ((st = tkv__gguf_open(path, &g))) return st;
    st = finish_load(g, &p, out);
    if (st) {
        char msg[400];
        snprintf(msg, sizeof msg, "%s", tkv_last_error(NULL));
        return tkv__fail(st, "%s: %s", path, msg);
    }
    return TKV_OK;
}

tkv_status tkv_model_load_from_memory(const void *data, size_t size, const tkv_model_params *params, tkv_model **out) {
    if (!out) return tkv__fail(TKV_ERR_INVALID, "tkv_model_load_from_memory: out is NULL");
    *out = NULL;
    tkv_model_params p = model_defaults();
    tkv_status st = params ? tkv__params_read(&p, sizeof p, params, "tkv_model_params") : TKV_OK;
    if (st) return st;
    tkv__gguf *g = NULL;
    if ((st = tkv__gguf_parse(data, size, &g))) return st;
    return finish_load(g, &p, out);
}

void tkv_model_free(tkv_model *model) {
    if (!model) return;
    tkv__tokenizer_free(model->tok);
    tkv__weights_free(&model->w);
    tkv__gguf_free(model->gguf);
    pthread_mutex_destroy(&model->fp_mu);
    tkv__free(model);
}

/* ---- file facts --------------------------------------------------------- */

tkv_status tkv_model_hparams(const tkv_model *model, tkv_hparams *out) {
    if (!model || !out) return tkv__fail(TKV_ERR_INVALID, "tkv_model_hparams: NULL argument");
    if (!model->has_hparams) return tkv__fail(TKV_ERR_UNSUPPORTED, "%s", model->hparams_error);
    *out = model->hp;
    return TKV_OK;
}

uint32_t tkv_model_gguf_version(const tkv_model *model) { return model->gguf->version; }
uint64_t tkv_model_file_size(const tkv_model *model) { return model->gguf->size; }
uint64_t tkv_model_packed_size(const tkv_model *model) { return model ? model->w.pack_bytes : 0; }
uint64_t tkv_model_pack_held(const tkv_model *model) { return model ? model->w.pack_held : 0; }

uint64_t tkv_model_state_size(const tkv_model *model) {
    return model && model->has_hparams ? (uint64_t)model->ext.state_floats * sizeof(float) : 0;
}
uint64_t tkv_model_data_offset(const tkv_model *model) { return model->gguf->data_offset; }
uint32_t tkv_model_alignment(const tkv_model *model) { return model->gguf->alignment; }
