/*
 * arch.h — what each supported architecture changes in the llama block,
 * decided once when a model loads (model.c) and read by the tensor checks,
 * the weight binding and the forward pass instead of comparing names.
 *
 * A new architecture is a row in arch.c; a new kind of difference is a
 * field here, used at the one place in forward.c where that step happens.
 */
#ifndef TKV_ARCH_H
#define TKV_ARCH_H

#include "compute/ops.h"

#include <stdbool.h>
#include <stddef.h>

/* Where q and k are RMS-normalized before RoPE. */
typedef enum tkv__qk_norm {
    TKV__QK_NORM_NONE = 0,
    TKV__QK_NORM_HEAD,  /* each head, with head_dim-wide weights (qwen3) */
    TKV__QK_NORM_WHOLE, /* the whole projection, n_q / n_kv-wide weights (olmo2) */
} tkv__qk_norm;

typedef struct tkv__arch {
    const char *name;     /* general.architecture */
    tkv__rope_mode rope;  /* NEOX: pairs (i, i + n_rot / 2); NORMAL: adjacent pairs */
    bool qkv_bias;        /* blk.N.attn_{q,k,v}.bias are added after the projections */
    tkv__qk_norm qk_norm; /* blk.N.attn_{q,k}_norm, before RoPE */
    bool post_norms;      /* RMSNorm of the branches' outputs (blk.N.post_attention_norm,
                             post_ffw_norm) before the residual add ... */
    bool pre_norms;       /* ... and/or of their inputs (attn_norm, ffn_norm): llama has only
                             these, olmo2 only the post ones, gemma both */
    const char *ffn_norm; /* the FFN input norm's tensor name, if not "ffn_norm.weight" */
    bool fused;           /* blk.N.attn_qkv (rows q, then k, then v) for attn_{q,k,v}, and
                             blk.N.ffn_up of 2 n_ff rows (gate, then up) for ffn_{gate,up} */
    bool gemma;           /* embeddings times sqrt(n_embd), GeGLU (gelu(gate) * up) for SwiGLU,
                             soft-capping from attn_logit_softcapping / final_logit_softcapping */
    unsigned swa_period;  /* > 0: layer l attends within attention.sliding_window unless
                             l % swa_period == swa_period - 1 (a built-in rule) */
    bool swa_own_rope;    /* window layers take rope.freq_base_swa (default 10000), unscaled */
    bool moe;             /* the FFN is expert_used_count of expert_count SwiGLU experts
                             (ffn_{gate,up,down}_exps), chosen per token by ffn_gate_inp:
                             softmax over all experts, the top k, renormalized to sum 1 */
    bool oai;             /* gpt-oss: attention sinks (attn_sinks: one extra logit per head,
                             with no value), an attn_output bias; router and expert biases, experts chosen
                             as the top k logits with a softmax over those k alone, and the
                             SwiGLU-OAI activation g sigmoid(1.702 g) (u + 1), g = min(gate,
                             7), u = clamp(up, -7, 7) */
    unsigned nope_period; /* > 0: layers l with (l + 1) % nope_period == 0 apply no
                             RoPE (a built-in rule: no metadata key sets it) */
    bool shortconv;       /* lfm2: attention.head_count_kv is a per-layer array whose 0s mark
                             gated short-conv layers (blk.N.shortconv.{in_proj,conv,out_proj}) */
    bool deltanet;        /* qwen35: layer l is a gated delta-net layer (deltanet.h) unless
                             (l + 1) % full_attention_interval == 0; those keep a recurrent
                             state per sequence, which the cache checkpoints */
    bool mamba2;          /* granitehybrid, nemotron_h: layers whose head_count_kv entry is 0 are Mamba-2
                             layers (mamba2.h; with one_block, those with a feed_forward_length
                             entry are MLP layers instead), with a recurrent state per sequence */
    bool one_block;       /* nemotron_h: a layer is one block, x + mixer(attn_norm(x)), its mixer
                             Mamba-2, attention or an MLP (relu(x Wup)^2 Wdown); no second block */
    bool granite;         /* granitehybrid: embeddings times embedding_scale, each block's output
                             times residual_scale, logits divided by logit_scale, attention.scale */
    bool no_rope;         /* attention applies no RoPE at all */
    bool expert_bias;     /* lfm2moe: blk.N.exp_probs_b.bias, a bias per expert added to the router's gates
                             for the choice only (moe.h: expert_gating_func) */
    bool shared_expert;   /* qwen35moe: beside the experts, a shared SwiGLU expert (ffn_{gate,up,down}_shexp,
                             expert_shared_feed_forward_length wide) scaled by sigmoid(ffn_gate_inp_shexp . x) */
    bool q_gate;          /* qwen35: attn_q gives each head's q and then as many gate values;
                             the attention output is multiplied by sigmoid(gate) before attn_output */
    const char *out_norm; /* the final norm's tensor name, if not "output_norm.weight" */
    bool layer_shapes;    /* gemma4: layers differ (tkv__attn_layer): head_count_kv and feed_forward_length
                             may be arrays, window layers (attention.sliding_window_pattern, a bool array)
                             have key_length_swa heads rotated over rope.dimension_count_swa dims, a layer
                             without attn_v takes its K projection as V, and the last
                             attention.shared_kv_layers layers own no K/V: with n_kv layers that do, a
                             window layer attends over layer n_kv - 2's cache, a full one over n_kv - 1's
                             (the reference's rule; a file where those differ in kind is refused) */
    bool v_norm;          /* gemma4: V is RMS-normed per head, without a weight, before the cache */
    bool per_layer_input; /* gemma4: each token's per-layer inputs p (n_layer slices of
                             embedding_length_per_layer_input: per_layer_token_embd, per_layer_model_proj,
                             per_layer_proj_norm) enter each layer after its FFN as
                             x += post_norm(proj(gelu(inp_gate x) * p_l)); then x *= layer_output_scale */
    float attn_scale;     /* the scores' scale where the architecture fixes it (gemma4: 1); 0: the file's
                             attention.scale (granite) or 1 / sqrt(head_dim) */
} tkv__arch;

/* Layers a model may have: tkv__hp_ext describes each (kind, attn). */
#define TKV__MAX_LAYERS 512

/* What a layer's mixer is (tkv__hp_ext.kind): every layer also has its FFN. */
typedef enum tkv__layer_kind {
    TKV__LAYER_ATTN = 0,   /* attention over the cache's K/V rows */
    TKV__LAYER_SHORTCONV,  /* lfm2's gated short conv: its state is in the cells' K rows */
    TKV__LAYER_DELTANET,   /* qwen35's gated delta net: a recurrent state per sequence */
    TKV__LAYER_MAMBA2,     /* Mamba-2's selective scan: a recurrent state per sequence */
    TKV__LAYER_MLP,        /* nemotron_h's MLP-only layers (arch->one_block) */
} tkv__layer_kind;

/*
 * What one layer's attention is (tkv__hp_ext.attn), decided at load for
 * every architecture: the model's head size, KV heads and FFN width on every
 * layer but where arch->layer_shapes lets them differ. Buffers of the
 * forward pass are sized for the widest layer; each layer reads its own.
 */
typedef struct tkv__attn_layer {
    uint32_t hd;        /* head size (q, k and v) */
    uint32_t n_head_kv; /* KV heads; n_head / n_head_kv query heads share one */
    uint32_t n_rot;     /* dimensions of each head RoPE rotates */
    uint32_t n_ff;      /* the FFN's width */
    uint32_t kv_layer;  /* the cache layer (kvrows.h) whose K/V rows it attends over */
    bool own_kv;        /* it computes K/V and writes them there (false: a KV-shared layer, which
                           reads what an earlier layer wrote at the same cell) */
    bool k_as_v;        /* V is the K projection, before K's norm (no attn_v) */
    bool swa;           /* it attends within ext.swa_window positions */
} tkv__attn_layer;

/* The architecture called `name`, or NULL when it is not supported. */
const tkv__arch *tkv__arch_find(const char *name);

/* The tensor name (after "blk.N.") of the FFN's input norm. */
static inline const char *tkv__arch_ffn_norm(const tkv__arch *a) {
    return a->ffn_norm ? a->ffn_norm : "ffn_norm.weight";
}

/* The tensor name of the final norm. */
static inline const char *tkv__arch_out_norm(const tkv__arch *a) {
    return a->out_norm ? a->out_norm : "output_norm.weight";
}

/* "llama, qwen2, ...": the supported names into buf (truncated to cap),
   for error messages. Returns buf. */
const char *tkv__arch_names(char *buf, size_t cap);

#endif
