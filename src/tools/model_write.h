/*
 * model_write.h — the hyperparameters and random weights of a model of any
 * supported architecture, appended to a GGUF writer: what `tokenkv mkmodel`
 * writes (the tokenizer and the file are its own business).
 *
 * Which tensors an architecture stores, and their shapes, come from the
 * list the loader checks (model/tensors.h), so every file written here
 * loads. Matrices are uniform random with standard deviation
 * 1/sqrt(fan_in) (fan_in = the row length), so each product keeps the scale
 * of its input through any number of layers; norms are 1, biases and
 * attention sinks 0. The values do not matter for speed, only the shapes and
 * types do. One other kind of values: a llama model built to copy its
 * context (model_induction.h), for workloads that need answers that repeat
 * their prompt.
 */
#ifndef TKV_MODEL_WRITE_H
#define TKV_MODEL_WRITE_H

#include "gguf_write.h"
#include "tokenkv.h"

#include <stddef.h>
#include <stdint.h>

/* The weight types of a quantization mix (see cli/mkmodel.c for the rules). */
typedef struct tkv__type_mix {
    tkv_type base;   /* most matrices */
    tkv_type output; /* output.weight */
    tkv_type more;   /* attn_v and ffn_down(_exps) of the layers that "use more bits" */
} tkv__type_mix;

/* What a model's values are: random (the default: only the shapes and types matter for speed), or the
   circuit of model_induction.h, whose greedy answers copy spans of their context. */
typedef enum tkv__weight_kind { TKV__WEIGHTS_RANDOM, TKV__WEIGHTS_INDUCTION } tkv__weight_kind;

typedef struct tkv__model_spec {
    const char *arch;         /* general.architecture: one the loader supports */
    uint32_t dim, layers, heads, kv_heads, ff, ctx, n_vocab;
    uint32_t head_dim;        /* 0: dim / heads */
    uint32_t experts, experts_used, expert_ff; /* MoE architectures; 0: not given (qwen35moe: ff is the
                                                  shared expert's width) */
    uint32_t swa_window;      /* sliding-window architectures; 0: the architecture's default */
    /* recurrent hybrids (qwen35, qwen35moe: delta nets, v heads as wide as ssm_state; granitehybrid,
       nemotron_h: Mamba-2): the ssm.* sizes (state_size, group_count, time_step_rank, inner_size,
       conv_kernel; 0 conv: 4). Every hybrid (lfm2's short convs too) attends on layers l with
       (l + 1) % attn_every == 0 (0: qwen35's 4, qwen35moe's 4, granitehybrid's 6, lfm2's 3,
       nemotron_h's 3), its other kind elsewhere (nemotron_h: Mamba-2 and MLP layers in turn) */
    uint32_t ssm_state, ssm_groups, ssm_heads, ssm_inner, ssm_conv, attn_every;
    /* lfm2, granitehybrid, nemotron_h: one character per layer in place of attn_every's rule
       ('*' attention, 'M' Mamba-2, '-' nemotron_h's MLP, 'C' lfm2's short conv), or NULL */
    const char *pattern;
    /* gemma4: full attention on layers l with (l + 1) % attn_every == 0 (0: 5), window layers elsewhere
       with heads of head_dim / 2 and kv_heads KV heads (full layers: head_dim and half the KV heads, when
       even, and K as V); its last shared_kv layers read earlier layers' K/V (twice the FFN width), and
       per_layer per-layer inputs per layer (0: none) */
    uint32_t shared_kv, per_layer;
    uint32_t dense_lead;      /* lfm2moe: the first dense_lead layers have a dense FFN (ff wide), the others
                                 experts (leading_dense_block_count) */
    bool fused_experts;       /* gemma4 with experts: one ffn_gate_up_exps stack instead of ffn_gate_exps and
                                 ffn_up_exps (the reference reads both) */
    tkv__type_mix mix;
    tkv__weight_kind weights; /* TKV__WEIGHTS_RANDOM (0) or an induction model (llama only) */
    uint64_t seed;            /* same seed, same weights */
} tkv__model_spec;

/*
 * Check a spec against its architecture before anything is written.
 * Returns TKV_OK, or TKV_ERR_INVALID with a message in why (a NUL-terminated
 * line of at most cap bytes) naming the problem: an unsupported
 * architecture (with the supported ones), shapes that do not divide, a MoE
 * architecture without experts (or experts on a dense one), row lengths a
 * block type cannot hold, an induction model on a shape that cannot hold
 * its circuit.
 */
tkv_status tkv__model_spec_check(const tkv__model_spec *s, char *why, size_t cap);

/*
 * Append the architecture's hyperparameter keys (ARCH.*) and every tensor
 * (the reference's fall-back types for K types on rows that are not whole
 * super-blocks) to w. The spec must have passed tkv__model_spec_check.
 * *n_params is the number of weights written. Returns TKV_OK, TKV_ERR_NOMEM,
 * or the writer's error.
 */
tkv_status tkv__model_write(tkv__gguf_writer *w, const tkv__model_spec *s, uint64_t *n_params);

#endif
