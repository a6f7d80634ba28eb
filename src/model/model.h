/*
 * model.h — what the rest of the library sees of a loaded model.
 */
#ifndef TKV_MODEL_H
#define TKV_MODEL_H

#include "format/gguf.h"
#include "text/tokenizer.h"
#include "arch.h"
#include "deltanet.h"
#include "mamba2.h"
#include "moe.h"
#include "weights.h"
#include "tokenkv.h"

#include <pthread.h>

/* Hyperparameters beyond tkv_hparams that some architectures read (model.c
   read_ext, checked with the others at load). */
typedef struct tkv__hp_ext {
    float rope_attn_factor;  /* [ARCH.rope.scaling.attn_factor] (LongRoPE), times YaRN's magnitude
                                where the file has no yarn_log_multiplier: cos and sin scale; 1 */
    bool yarn;               /* rope.scaling.type yarn: angles blend interpolation (position /
                                factor) and extrapolation between the correction dims */
    float yarn_corr[2];      /* the first and last pair index of the blend (from beta_fast/slow) */
    float attn_temp_scale;   /* [ARCH.attention.temperature_scale]: q *= 1 + s ln(1 + floor(pos /
                                n_ctx_orig)) after RoPE; 0: none */
    float attn_softcap, final_softcap; /* gemma: c tanh(x / c) on attention scores / logits; 0: none */
    uint32_t swa_window;     /* [ARCH.attention.sliding_window] for the window layers (attn[l].swa); 0: none */
    float rope_base_swa;     /* [ARCH.rope.freq_base_swa] (default 10000): arch->swa_own_rope */
    tkv__moe_dims moe;       /* arch->moe: the experts' sizes; else zeros */
    uint32_t kv_width;       /* elements of a cache K/V row: n_head_kv head_dim (the widest layer's),
                                or with short-conv layers (which keep each token's B x row there) at
                                least n_embd */
    uint32_t kv_layers;      /* layers of the cache's K/V rows: n_layer, less gemma4's KV-shared ones */
    uint32_t n_rot_swa;      /* [ARCH.rope.dimension_count_swa]: dims the window layers' RoPE angles
                                cover (arch->swa_own_rope); else n_rot */
    uint32_t n_pli;          /* arch->per_layer_input: [ARCH.embedding_length_per_layer_input] */
    uint32_t conv_len;       /* arch->shortconv: [ARCH.shortconv.l_cache], the conv's taps */
    tkv__delta_dims delta;   /* arch->deltanet: the delta net's sizes */
    tkv__mamba_dims mamba;   /* arch->mamba2: Mamba-2's sizes */
    float embd_scale, residual_scale, logit_scale; /* arch->granite; else 1 */
    float attn_scale;        /* [ARCH.attention.scale] (arch->granite); 0: 1 / sqrt(head_dim) */
    size_t state_floats;     /* a sequence's recurrent state, every recurrent layer's (0: none) */
    uint8_t kind[TKV__MAX_LAYERS]; /* each layer's tkv__layer_kind */
    tkv__attn_layer attn[TKV__MAX_LAYERS]; /* each layer's attention shape, cache layer and FFN width */
    size_t state_off[TKV__MAX_LAYERS]; /* where a recurrent layer's state starts in a sequence's (floats) */
} tkv__hp_ext;

/* Where recurrent layer l's state starts in a sequence's state (floats). */
static inline size_t tkv__model_state_off(const tkv__hp_ext *x, uint32_t l) { return x->state_off[l]; }

struct tkv_model {
    uint32_t magic; /* TKV__MODEL_MAGIC (see tkv_last_error) */
    tkv__gguf *gguf;
    bool vocab_only;
    bool has_hparams;        /* false only for vocab_only files */
    tkv_hparams hp;
    const tkv__arch *arch;   /* how hp.arch's block differs (NULL without hparams) */
    tkv__hp_ext ext;         /* what the architecture's extra metadata says */
    char hparams_error[256]; /* why has_hparams is false */
    tkv__weights w;          /* bound tensors (full loads only) */
    pthread_mutex_t fp_mu;   /* guards the fingerprint, computed on first use (fingerprint.c) */
    bool fp_done;
    uint64_t fp[2];
    tkv__tokenizer *tok;     /* NULL: no usable tokenizer */
    tkv_status tok_status;   /* why tok is NULL */
    char tok_error[256];
};

#endif
