/*
 * model_write.c — a random model of any supported architecture (see
 * model_write.h).
 */
#include "model_write.h"

#include "model_induction.h"
#include "quantize.h"
#include "model/arch.h"
#include "model/tensors.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* What a file of each architecture says beyond the shapes; values of the
   published models, where they matter for speed (the window) or are
   read at all (soft-capping), and what their converter writes. */
static const struct arch_keys {
    const char *name;
    float rope_base;
    uint32_t swa_window;              /* arch->swa_period architectures */
    float attn_softcap, final_softcap; /* gemma2 */
    uint32_t attn_every;              /* hybrids: the default attention period (model_write.h) */
    bool tied;                        /* no output.weight: the published files tie it to token_embd */
    bool no_rope_keys;                /* no rope.* keys (nemotron_h applies no RoPE and its files have none) */
    uint32_t gating;                  /* MoE: expert_gating_func (0: the key is not written) */
    float rope_kept;                  /* > 0: rope_freqs.weight (the reference requires it) rotates this share of
                                         the pairs and divides the others' frequencies by 1e30: gemma4's
                                         proportional RoPE on its full layers */
} arch_keys[] = {
#define K(n, base) .name = n, .rope_base = base
    {K("llama", 10000.0f)},    {K("qwen2", 1e6f)},     {K("qwen3", 1e6f)},      {K("qwen3moe", 1e6f)},
    {K("gpt-oss", 150000.0f), .swa_window = 128},      {K("smollm3", 5e6f)},    {K("olmo2", 500000.0f)},
    {K("phi3", 10000.0f)},     {K("mistral3", 1e6f)},
    {K("gemma2", 10000.0f), .swa_window = 4096, .attn_softcap = 50.0f, .final_softcap = 30.0f, .tied = true},
    {K("gemma3", 1e6f), .swa_window = 1024, .tied = true},
    {K("gemma4", 1e6f), .swa_window = 512, .final_softcap = 30.0f, .attn_every = 5, .tied = true, .rope_kept = 0.25f},
    {K("qwen35", 1e7f), .attn_every = 4},   {K("qwen35moe", 1e7f), .attn_every = 4},
    {K("granitehybrid", 10000.0f), .attn_every = 6},
    {K("lfm2", 1e6f), .attn_every = 3, .tied = true},
    {K("lfm2moe", 1e6f), .attn_every = 3, .tied = true, .gating = 2},
    {K("nemotron_h", 10000.0f), .attn_every = 3, .no_rope_keys = true},
#undef K
};

/* --pattern's characters (model_write.h): the layer kind each names, for the architectures that have it. */
static const struct pattern_char {
    char c;
    tkv__layer_kind kind;
} pattern_chars[] = {
    {'*', TKV__LAYER_ATTN}, {'M', TKV__LAYER_MAMBA2}, {'-', TKV__LAYER_MLP}, {'C', TKV__LAYER_SHORTCONV},
};

/* Whether architecture a has layers of this kind. */
static bool has_kind(const tkv__arch *a, tkv__layer_kind kind) {
    switch (kind) {
    case TKV__LAYER_ATTN: return true;
    case TKV__LAYER_SHORTCONV: return a->shortconv;
    case TKV__LAYER_DELTANET: return a->deltanet;
    case TKV__LAYER_MAMBA2: return a->mamba2;
    case TKV__LAYER_MLP: return a->one_block;
    }
    return false;
}

/* The layer kind --pattern's character c names, or -1. */
static int kind_of_char(char c) {
    for (size_t i = 0; i < sizeof pattern_chars / sizeof pattern_chars[0]; i++)
        if (pattern_chars[i].c == c) return (int)pattern_chars[i].kind;
    return -1;
}

static bool hybrid_arch(const tkv__arch *a) { return a->deltanet || a->mamba2 || a->shortconv; }

/* The layers' kinds and the recurrent sizes of a hybrid spec (zeros for the others), and gemma4's
   layer shapes (attn, read only for arch->layer_shapes). */
typedef struct hybrid {
    uint8_t kind[TKV__MAX_LAYERS];
    tkv__delta_dims delta;
    tkv__mamba_dims mamba;
    tkv__attn_layer attn[TKV__MAX_LAYERS];
    uint32_t n_pli;
} hybrid;

/* gemma4's layers (model_write.h): window or full by attn_every, the last shared_kv reading layer
   n_kv - 2's (window) or n_kv - 1's (full) K/V, as the loader does. */
static void shapes_of(const tkv__model_spec *s, hybrid *h) {
    const uint32_t every = s->attn_every ? s->attn_every : 5, kvh = s->kv_heads ? s->kv_heads : s->heads;
    const uint32_t hd = s->head_dim ? s->head_dim : s->dim / s->heads, n_kv = s->layers - s->shared_kv;
    for (uint32_t l = 0; l < s->layers && l < TKV__MAX_LAYERS; l++) {
        tkv__attn_layer *A = &h->attn[l];
        A->swa = (l + 1) % every != 0;
        A->hd = A->swa ? hd / 2 : hd, A->n_rot = A->hd;
        A->n_head_kv = A->swa || kvh % 2 ? kvh : kvh / 2;
        A->own_kv = l < n_kv, A->k_as_v = A->own_kv && !A->swa;
        A->kv_layer = A->own_kv ? l : A->swa ? n_kv - 2 : n_kv - 1;
        A->n_ff = A->own_kv ? s->ff : 2 * s->ff;
    }
    h->n_pli = s->per_layer;
}

static const struct arch_keys *keys_of(const char *arch);

/* Each layer's kind: --pattern's, or attention every attn_every layers and the recurrent kind elsewhere
   (nemotron_h: Mamba-2 and MLP layers in turn). */
static void kinds_of(const tkv__model_spec *s, const tkv__arch *a, uint8_t *kind) {
    const uint32_t every = s->attn_every ? s->attn_every : keys_of(s->arch)->attn_every;
    const tkv__layer_kind other = a->deltanet ? TKV__LAYER_DELTANET : a->mamba2 ? TKV__LAYER_MAMBA2
                                  : a->shortconv                           ? TKV__LAYER_SHORTCONV
                                                                           : TKV__LAYER_ATTN;
    uint32_t n_other = 0;
    for (uint32_t l = 0; l < s->layers && l < TKV__MAX_LAYERS; l++) {
        if (s->pattern) {
            const int k = kind_of_char(s->pattern[l]);
            kind[l] = k < 0 ? TKV__LAYER_ATTN : (uint8_t)k; /* checked: tkv__model_spec_check */
        } else if (every && (l + 1) % every == 0) {
            kind[l] = TKV__LAYER_ATTN;
        } else {
            kind[l] = a->one_block && n_other++ % 2 ? TKV__LAYER_MLP : (uint8_t)other;
        }
    }
}

static void hybrid_of(const tkv__model_spec *s, const tkv__arch *a, hybrid *h) {
    memset(h, 0, sizeof *h);
    const uint32_t conv = s->ssm_conv ? s->ssm_conv : 4;
    if (hybrid_arch(a)) kinds_of(s, a, h->kind);
    if (a->deltanet && s->ssm_heads) {
        tkv__delta_dims *d = &h->delta;
        d->d_conv = conv, d->d_k = s->ssm_state, d->n_k = s->ssm_groups, d->n_v = s->ssm_heads;
        d->d_v = s->ssm_inner / s->ssm_heads, d->channels = 2 * d->n_k * d->d_k + s->ssm_inner;
    }
    if (a->mamba2 && s->ssm_heads && s->ssm_groups) {
        tkv__mamba_dims *d = &h->mamba;
        d->d_conv = conv, d->d_state = s->ssm_state, d->n_group = s->ssm_groups, d->n_head = s->ssm_heads;
        d->d_inner = s->ssm_inner, d->head_dim = s->ssm_inner / s->ssm_heads;
        d->channels = d->d_inner + 2 * d->n_group * d->d_state, d->in_proj = d->d_inner + d->channels + d->n_head;
    }
    if (a->layer_shapes) shapes_of(s, h);
}

static tkv__layout layout_of(const tkv__moe_dims *md, const hybrid *h, const tkv__arch *a) {
    return (tkv__layout){.moe = md, .delta = &h->delta, .mamba = &h->mamba, .kind = h->kind,
                         .attn = a->layer_shapes ? h->attn : NULL, .n_pli = h->n_pli};
}

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
    /* n_ff_shared is read only where the architecture has a shared expert */
    return (tkv__moe_dims){.n_expert = s->experts, .n_used = s->experts_used, .n_ff = s->expert_ff, .n_ff_shared = s->ff,
                           .n_dense_lead = s->dense_lead};
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

static bool is_float_type(tkv_type t) { return t == TKV_TYPE_F32 || t == TKV_TYPE_F16 || t == TKV_TYPE_BF16; }

/* The stored type of a matrix under the mix. The router stays F32, as the
   reference's quantizer leaves it. */
static tkv_type matrix_type(const tkv__model_spec *s, const tkv__tensor_need *t) {
    tkv_type type = s->mix.base;
    if (ends_with(t->name, "ffn_gate_inp.weight")) return TKV_TYPE_F32;
    /* the shared expert's gate: F32 from the converter, quantized by the reference's quantizer */
    if (ends_with(t->name, "ffn_gate_inp_shexp.weight") && is_float_type(s->mix.base)) return TKV_TYPE_F32;
    if (!strcmp(t->name, "output.weight")) type = s->mix.output;
    else if (t->layer >= 0 && more_bits(t->layer, s->layers) &&
             (ends_with(t->name, ".attn_v.weight") || ends_with(t->name, ".ffn_down.weight") ||
              ends_with(t->name, ".ffn_down_exps.weight")))
        type = s->mix.more;
    return fit_rows(type, t->ne[0]);
}


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
    const bool experts = a->moe || (a->layer_shapes && s->experts); /* gemma4: experts beside its FFN */
    if (experts && (!s->experts || !s->experts_used || !s->expert_ff))
        BAD("%s is a mixture of experts: give the experts, how many are used and their width", s->arch);
    if (s->dense_lead && (!a->expert_bias || s->dense_lead >= s->layers))
        BAD("--dense-lead %u: for lfm2moe, fewer than its %u layers", s->dense_lead, s->layers);
    if (s->fused_experts && !(a->layer_shapes && s->experts))
        BAD("--fused-experts is for gemma4 with --experts");
    if (a->moe && (s->experts > TKV__MOE_MAX_EXPERTS || s->experts_used > s->experts))
        BAD("%u experts with %u used: at most %d experts, and no more used than there are", s->experts,
            s->experts_used, TKV__MOE_MAX_EXPERTS);
    if (!experts && (s->experts || s->experts_used || s->expert_ff)) BAD("%s has no experts", s->arch);
    const bool recurrent = a->deltanet || a->mamba2;
    if (recurrent && (!s->ssm_state || !s->ssm_groups || !s->ssm_heads || !s->ssm_inner))
        BAD("%s has recurrent layers: give --ssm-state, --ssm-groups, --ssm-heads and --ssm-inner", s->arch);
    if (recurrent && (s->ssm_heads % s->ssm_groups || s->ssm_inner % s->ssm_heads || s->layers > TKV__MAX_LAYERS))
        BAD("--ssm-heads %u must be a multiple of --ssm-groups %u and divide --ssm-inner %u (and at most %d layers)",
            s->ssm_heads, s->ssm_groups, s->ssm_inner, TKV__MAX_LAYERS);
    if (a->deltanet && s->ssm_inner / s->ssm_heads > TKV__DELTA_MAX_DV)
        BAD("a delta net's v heads may have at most %d elements (--ssm-inner / --ssm-heads)", TKV__DELTA_MAX_DV);
    if (a->deltanet && s->ssm_inner != s->ssm_state * s->ssm_heads) /* the reference sizes v heads by state_size */
        BAD("%s: the v heads are as wide as the q/k heads: --ssm-inner %u must be --ssm-state %u x --ssm-heads %u",
            s->arch, s->ssm_inner, s->ssm_state, s->ssm_heads);
    if (!recurrent && (s->ssm_state || s->ssm_groups || s->ssm_heads || s->ssm_inner || s->ssm_conv))
        BAD("%s has no ssm.* sizes (--ssm-* are for qwen35, qwen35moe, granitehybrid and nemotron_h)", s->arch);
    if (!hybrid_arch(a) && !a->layer_shapes && s->attn_every)
        BAD("%s has one kind of layer (--attn-every is for qwen35, qwen35moe, lfm2, granitehybrid, nemotron_h and "
            "gemma4)", s->arch);
    if (hybrid_arch(a) && s->layers > TKV__MAX_LAYERS) BAD("%s: at most %d layers", s->arch, TKV__MAX_LAYERS);
    if (s->pattern && !(a->shortconv || a->mamba2))
        BAD("%s: --pattern is for lfm2, granitehybrid and nemotron_h (qwen35's layers follow --attn-every)", s->arch);
    if (s->pattern && s->attn_every) BAD("--pattern and --attn-every both say which layers attend: give one");
    if (s->pattern && strlen(s->pattern) != s->layers)
        BAD("--pattern '%s' has %zu characters for %u layers", s->pattern, strlen(s->pattern), s->layers);
    for (uint32_t l = 0; s->pattern && l < s->layers; l++) {
        const int k = kind_of_char(s->pattern[l]);
        if (k < 0 || !has_kind(a, (tkv__layer_kind)k))
            BAD("--pattern '%s': layer %u '%c' is not a layer of %s ('*' attention%s)", s->pattern, l, s->pattern[l],
                s->arch, a->shortconv ? ", 'C' short conv" : a->one_block ? ", 'M' Mamba-2, '-' MLP" : ", 'M' Mamba-2");
    }
    if (a->shortconv && s->head_dim && s->head_dim * s->heads != s->dim)
        BAD("lfm2's attention is --dim %u wide: --head-dim %u x --heads %u must equal it", s->dim, s->head_dim, s->heads);
    if (!a->layer_shapes && (s->shared_kv || s->per_layer))
        BAD("%s has no shared K/V layers or per-layer inputs (--shared-kv and --per-layer are for gemma4)", s->arch);
    if (a->layer_shapes && (hd % 4 || s->shared_kv >= s->layers || s->layers > TKV__MAX_LAYERS))
        BAD("gemma4: the head size %u must be a multiple of 4 (window layers have half of it), --shared-kv %u "
            "fewer than the %u layers (at most %d)", hd, s->shared_kv, s->layers, TKV__MAX_LAYERS);
#undef BAD
    if (s->weights == TKV__WEIGHTS_INDUCTION) {
        const tkv_status st = tkv__induction_check(s, why, cap);
        if (st) return st;
    }
    const tkv_hparams hp = hparams_of(s);
    const tkv__moe_dims md = moe_of(s);
    hybrid h;
    hybrid_of(s, a, &h);
    bool kinds[TKV__LAYER_MLP + 1] = {false};
    for (uint32_t l = 0; l < s->layers && l < TKV__MAX_LAYERS; l++) kinds[h.kind[l]] = true;
    if ((a->shortconv || a->mamba2) && !kinds[TKV__LAYER_ATTN]) /* the loader finds the attention layers' KV heads */
        return snprintf(why, cap, "%s: no attention layer in %u layers (see --attn-every, --pattern)", s->arch, s->layers),
               TKV_ERR_INVALID;
    if (a->one_block && !kinds[TKV__LAYER_MLP]) /* ... and the MLP layers' width */
        return snprintf(why, cap, "nemotron_h: no MLP layer in %u layers (see --attn-every, --pattern)", s->layers),
               TKV_ERR_INVALID;
    for (uint32_t l = s->layers - s->shared_kv; a->layer_shapes && l < s->layers; l++) { /* the loader's rule */
        const tkv__attn_layer *A = &h.attn[l];
        if (A->kv_layer >= l || h.attn[A->kv_layer].swa != A->swa)
            return snprintf(why, cap, "gemma4: --shared-kv %u: layer %u (%s) would read layer %d's K/V, not a layer of "
                            "its kind (with --attn-every %u)", s->shared_kv, l, A->swa ? "window" : "full",
                            A->kv_layer >= l ? -1 : (int)A->kv_layer, s->attn_every ? s->attn_every : 5),
                   TKV_ERR_INVALID;
    }
    const tkv__layout lay = layout_of(&md, &h, a);
    check_ctx c = {s, why, cap};
    return tkv__tensors_each(a, &hp, &lay, check_rows, &c);
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

/* gemma4's optional expert tensors: 1 to write (the gate and up stacks, or the fused one with fused_experts;
   their down scales), -1 to leave out (the other form, the gate and up scales), 0: not one of them. */
static int gemma4_experts(const write_ctx *c, const char *name) {
    const tkv__model_spec *s = c->s;
    if (!c->arch->layer_shapes) return 0;
    if (ends_with(name, "ffn_gate_up_exps.weight")) return s->fused_experts ? 1 : -1;
    if (ends_with(name, "ffn_gate_exps.weight") || ends_with(name, "ffn_up_exps.weight")) return s->fused_experts ? -1 : 1;
    if (ends_with(name, "ffn_down_exps.scale")) return 1;
    if (ends_with(name, "ffn_gate_exps.scale") || ends_with(name, "ffn_up_exps.scale")) return -1;
    return 0;
}

static tkv_status write_one(const tkv__tensor_need *t, void *ud) {
    write_ctx *c = ud;
    /* no RoPE factors (but the divisors of RoPE that is partly held, gemma4's); Gemma and LFM2 tie their
       output to the embeddings (the reference's gemma2 refuses an output.weight) */
    const struct arch_keys *k = keys_of(c->s->arch);
    if (!strcmp(t->name, "rope_freqs.weight") && k->rope_kept > 0) {
        const size_t n = (size_t)elements(t), kept = (size_t)(k->rope_kept * (float)n);
        for (size_t i = 0; i < n; i++) c->x[i] = i < kept ? 1.0f : 1e30f;
        c->n_params += n;
        return tkv__gguf_write_tensor(c->w, t->name, TKV_TYPE_F32, t->n_dims, t->ne, c->x);
    }
    const int g4 = gemma4_experts(c, t->name);
    if (t->optional && g4 < 0) return TKV_OK;
    if (t->optional && !g4 && (strcmp(t->name, "output.weight") || k->tied)) return TKV_OK;
    const size_t n = (size_t)elements(t);
    c->n_params += n;
    if (!t->matrix) { /* norms 1, biases and sinks 0; a recurrent layer's (or short conv's) conv taps random, its
                         decay A < 0, Mamba-2's skip D 1: the recurrence is alive; gemma4's layer output scales 1 */
        const bool conv = ends_with(t->name, "ssm_conv1d.weight") || ends_with(t->name, "shortconv.conv.weight");
        const float v = strstr(t->name, "norm") || ends_with(t->name, "ssm_d") ||
                                ends_with(t->name, "layer_output_scale.weight")
                            ? 1.0f
                            : 0.0f;
        if (conv) fill_uniform(&c->rng, c->x, n, t->ne[0]);
        else if (ends_with(t->name, "exp_probs_b.bias")) /* lfm2moe's choice bias: small, so it changes some choices */
            for (size_t i = 0; i < n; i++) c->x[i] = ((float)(next_u64(&c->rng) >> 40) * 0x1p-24f - 0.5f) * 0.2f;
        else if (ends_with(t->name, ".scale")) /* gemma4's router input and expert scales: around 1 */
            for (size_t i = 0; i < n; i++) c->x[i] = 0.5f + (float)(next_u64(&c->rng) >> 40) * 0x1p-24f;
        else if (ends_with(t->name, "ssm_a"))
            for (size_t i = 0; i < n; i++) c->x[i] = -expf((float)(next_u64(&c->rng) >> 40) * 0x1p-24f * 2 - 1);
        else
            for (size_t i = 0; i < n; i++) c->x[i] = v;
        return tkv__gguf_write_tensor(c->w, t->name, TKV_TYPE_F32, t->n_dims, t->ne, c->x);
    }
    const tkv_type type = matrix_type(c->s, t);
    if (c->s->weights == TKV__WEIGHTS_INDUCTION) tkv__induction_fill(c->s, t, c->x);
    else fill_uniform(&c->rng, c->x, n, t->ne[0]);
    tkv__quantize_row(type, c->x, c->q, n); /* rows are whole blocks, so the tensor is one long row */
    return tkv__gguf_write_tensor(c->w, t->name, type, t->n_dims, t->ne, c->q);
}

/* ARCH.<suffix> = an array of n values of elem */
static tkv_status key_array(tkv__gguf_writer *w, const char *arch, const char *suffix, tkv_meta_type elem,
                            const void *v, uint32_t n) {
    char key[96];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    return tkv__gguf_write_array(w, key, elem, v, n);
}

static tkv_status key_u32(tkv__gguf_writer *w, const char *arch, const char *suffix, uint32_t v);
static tkv_status key_f32(tkv__gguf_writer *w, const char *arch, const char *suffix, float v);

/* gemma4's per-layer keys: FFN widths, KV heads and the window pattern as arrays, the window layers' sizes,
   the shared layers and the per-layer inputs. */
static tkv_status layer_keys(tkv__gguf_writer *w, const char *n, const tkv__model_spec *s, const hybrid *h) {
    uint32_t ff[TKV__MAX_LAYERS], kv[TKV__MAX_LAYERS];
    uint8_t swa[TKV__MAX_LAYERS];
    for (uint32_t l = 0; l < s->layers; l++) ff[l] = h->attn[l].n_ff, kv[l] = h->attn[l].n_head_kv, swa[l] = h->attn[l].swa;
    const uint32_t hd_swa = (s->head_dim ? s->head_dim : s->dim / s->heads) / 2;
    tkv_status st = key_array(w, n, "feed_forward_length", TKV_META_I32, ff, s->layers);
    if (!st) st = key_array(w, n, "attention.head_count_kv", TKV_META_I32, kv, s->layers);
    if (!st) st = key_array(w, n, "attention.sliding_window_pattern", TKV_META_BOOL, swa, s->layers);
    if (!st) st = key_u32(w, n, "attention.key_length_swa", hd_swa);
    if (!st) st = key_u32(w, n, "attention.value_length_swa", hd_swa);
    if (!st) st = key_u32(w, n, "rope.dimension_count_swa", hd_swa);
    if (!st) st = key_f32(w, n, "rope.freq_base_swa", 10000.0f);
    if (!st) st = key_u32(w, n, "attention.shared_kv_layers", s->shared_kv);
    /* 0 (no per-layer inputs) too: the reference requires the key */
    if (!st) st = key_u32(w, n, "embedding_length_per_layer_input", s->per_layer);
    return st;
}

/* ARCH.<suffix> = an array with v on the layers of kind `kind` and 0 on the others (hybrids' head_count_kv,
   nemotron_h's feed_forward_length) */
static tkv_status per_layer_key(tkv__gguf_writer *w, const char *arch, const char *suffix, const hybrid *h,
                                uint32_t n_layer, tkv__layer_kind kind, uint32_t v) {
    uint32_t vals[TKV__MAX_LAYERS]; /* (n_layer) */
    for (uint32_t l = 0; l < n_layer; l++) vals[l] = h->kind[l] == kind ? v : 0;
    return key_array(w, arch, suffix, TKV_META_U32, vals, n_layer);
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
    hybrid h;
    hybrid_of(s, a, &h);
    /* qwen35moe's files have no feed_forward_length: --ff is its shared expert's */
    if (!st && !a->layer_shapes && !a->one_block && !a->shared_expert) st = key_u32(w, n, "feed_forward_length", s->ff);
    if (!st && a->one_block) st = per_layer_key(w, n, "feed_forward_length", &h, s->layers, TKV__LAYER_MLP, s->ff);
    if (!st) st = key_u32(w, n, "attention.head_count", hp.n_head);
    if (!st && a->layer_shapes) {
        st = layer_keys(w, n, s, &h);
    } else if (!st && (a->mamba2 || a->shortconv)) { /* 0 on the layers that do not attend */
        st = per_layer_key(w, n, "attention.head_count_kv", &h, s->layers, TKV__LAYER_ATTN, hp.n_head_kv);
    } else if (!st) {
        st = key_u32(w, n, "attention.head_count_kv", hp.n_head_kv);
    }
    if (!st && (a->deltanet || a->mamba2)) {
        if (!st) st = key_u32(w, n, "ssm.conv_kernel", s->ssm_conv ? s->ssm_conv : 4);
        if (!st) st = key_u32(w, n, "ssm.state_size", s->ssm_state);
        if (!st) st = key_u32(w, n, "ssm.group_count", s->ssm_groups);
        if (!st) st = key_u32(w, n, "ssm.time_step_rank", s->ssm_heads);
        if (!st) st = key_u32(w, n, "ssm.inner_size", s->ssm_inner);
    }
    if (!st && a->deltanet) {
        st = key_u32(w, n, "full_attention_interval", s->attn_every ? s->attn_every : k->attn_every);
        /* the reference's interleaved MRoPE sections, as Qwen3.5's (11, 11, 10 of 32 pairs): t, h and w
           cover every pair, so text (one position on the three) rotates every pair; a fourth section's
           pairs would not rotate (model.c refuses them) */
        const int32_t half = (int32_t)(hp.n_rot / 2);
        const int32_t sections[4] = {(half + 2) / 3, (half + 1) / 3, half / 3, 0};
        char key[96];
        snprintf(key, sizeof key, "%s.rope.dimension_sections", n);
        if (!st) st = tkv__gguf_write_array(w, key, TKV_META_I32, sections, 4);
    }
    if (!st && a->shortconv) st = key_u32(w, n, "shortconv.l_cache", 3); /* the taps (the loader's only size) */
    if (!st && a->one_block) st = key_f32(w, n, "attention.layer_norm_epsilon", 1e-5f); /* the reference requires it */
    if (!st && a->granite) { /* the reference applies RoPE only to fine-tuned RoPE scaling; this one has none */
        char key[96];
        const bool no = false;
        snprintf(key, sizeof key, "%s.rope.scaling.finetuned", n);
        st = tkv__gguf_write_scalar(w, key, TKV_META_BOOL, &no);
    }
    const bool key_len = s->head_dim || a->layer_shapes || a->one_block; /* nemotron_h's converter always writes it */
    if (!st && key_len) st = key_u32(w, n, "attention.key_length", hp.head_dim);
    if (!st && key_len) st = key_u32(w, n, "attention.value_length", hp.head_dim);
    if (!st && !k->no_rope_keys) st = key_u32(w, n, "rope.dimension_count", hp.n_rot);
    if (!st && !k->no_rope_keys)
        st = key_f32(w, n, "rope.freq_base", s->weights == TKV__WEIGHTS_INDUCTION ? TKV__INDUCTION_ROPE_BASE : k->rope_base);
    if (!st) st = key_f32(w, n, "attention.layer_norm_rms_epsilon", 1e-5f);
    if (!st && (a->swa_period || a->layer_shapes))
        st = key_u32(w, n, "attention.sliding_window", s->swa_window ? s->swa_window : k->swa_window);
    if (!st && k->attn_softcap > 0) st = key_f32(w, n, "attn_logit_softcapping", k->attn_softcap);
    if (!st && k->final_softcap > 0) st = key_f32(w, n, "final_logit_softcapping", k->final_softcap);
    const bool experts = a->moe || (a->layer_shapes && s->experts);
    if (!st && experts) st = key_u32(w, n, "expert_count", s->experts);
    if (!st && experts) st = key_u32(w, n, "expert_used_count", s->experts_used);
    if (!st && experts) st = key_u32(w, n, "expert_feed_forward_length", s->expert_ff);
    if (!st && a->shared_expert) st = key_u32(w, n, "expert_shared_feed_forward_length", s->ff);
    if (!st && experts && k->gating) st = key_u32(w, n, "expert_gating_func", k->gating);
    if (!st && a->expert_bias) st = key_u32(w, n, "leading_dense_block_count", s->dense_lead);
    if (st) return st;

    uint64_t biggest = 0;
    const tkv__layout lay = layout_of(&md, &h, a);
    tkv__tensors_each(a, &hp, &lay, largest, &biggest);
    write_ctx c = {s, a, w, s->seed ^ 0x6a09e667f3bcc909ull, 0, malloc(biggest * sizeof(float)),
                   malloc(biggest * sizeof(float))};
    if (!c.x || !c.q) st = TKV_ERR_NOMEM;
    if (!st) st = tkv__tensors_each(a, &hp, &lay, write_one, &c);
    *n_params = c.n_params;
    free(c.x);
    free(c.q);
    return st;
}
