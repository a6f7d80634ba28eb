/*
 * arch.c — the supported architectures (see arch.h): llama and the
 * llama-like blocks, and the hybrids: lfm2, whose short-conv layers keep each
 * token's B*x row in its cell's K row, so the cache holds all their state
 * (lfm2moe: the same with MoE FFNs),
 * and qwen35 (delta nets), granitehybrid and nemotron_h (Mamba-2), whose
 * recurrent layers keep a state per sequence that the cache checkpoints;
 * and gemma4, whose layers have two shapes and whose last layers read the
 * K/V of earlier ones (they own no cache rows).
 */
#include "arch.h"

#include <stdio.h>
#include <string.h>

/* Designated fields: a row says only what differs from llama. */
static const tkv__arch archs[] = {
    {.name = "llama", .rope = TKV__ROPE_NORMAL, .pre_norms = true},
    {.name = "qwen2", .rope = TKV__ROPE_NEOX, .pre_norms = true, .qkv_bias = true},
    {.name = "qwen3", .rope = TKV__ROPE_NEOX, .pre_norms = true, .qk_norm = TKV__QK_NORM_HEAD},
    {.name = "qwen3moe", .rope = TKV__ROPE_NEOX, .pre_norms = true, .qk_norm = TKV__QK_NORM_HEAD, .moe = true},
    {.name = "gpt-oss", .rope = TKV__ROPE_NEOX, .pre_norms = true, .qkv_bias = true, .moe = true, .oai = true,
     .swa_period = 2, .ffn_norm = "post_attention_norm.weight"},
    {.name = "smollm3", .rope = TKV__ROPE_NORMAL, .pre_norms = true, .nope_period = 4},
    {.name = "olmo2", .rope = TKV__ROPE_NEOX, .post_norms = true, .qk_norm = TKV__QK_NORM_WHOLE},
    {.name = "phi3", .rope = TKV__ROPE_NEOX, .pre_norms = true, .fused = true},
    {.name = "mistral3", .rope = TKV__ROPE_NORMAL, .pre_norms = true},
    {.name = "gemma2", .rope = TKV__ROPE_NEOX, .pre_norms = true, .post_norms = true, .gemma = true,
     .swa_period = 2},
    {.name = "gemma3", .rope = TKV__ROPE_NEOX, .pre_norms = true, .post_norms = true, .gemma = true,
     .qk_norm = TKV__QK_NORM_HEAD, .swa_period = 6, .swa_own_rope = true},
    /* layers of two shapes (window and full), the last ones sharing earlier layers' K/V, per-layer inputs */
    {.name = "gemma4", .rope = TKV__ROPE_NEOX, .pre_norms = true, .post_norms = true, .gemma = true,
     .qk_norm = TKV__QK_NORM_HEAD, .swa_own_rope = true, .layer_shapes = true, .v_norm = true,
     .per_layer_input = true, .attn_scale = 1.0f},
    /* hybrid: short-conv layers beside attention layers; final norm token_embd_norm, tied output */
    {.name = "lfm2", .rope = TKV__ROPE_NEOX, .pre_norms = true, .qk_norm = TKV__QK_NORM_HEAD, .shortconv = true,
     .out_norm = "token_embd_norm.weight"},
    /* lfm2 with MoE FFNs after leading_dense_block_count dense ones: sigmoid gates, a choice bias (LFM2-8B-A1B) */
    {.name = "lfm2moe", .rope = TKV__ROPE_NEOX, .pre_norms = true, .qk_norm = TKV__QK_NORM_HEAD, .shortconv = true,
     .out_norm = "token_embd_norm.weight", .moe = true, .expert_bias = true},
    /* hybrid: gated delta-net layers beside gated attention; the FFN's input norm is post_attention_norm */
    {.name = "qwen35", .rope = TKV__ROPE_NEOX, .pre_norms = true, .qk_norm = TKV__QK_NORM_HEAD, .deltanet = true,
     .q_gate = true, .ffn_norm = "post_attention_norm.weight"},
    {.name = "qwen35moe", .rope = TKV__ROPE_NEOX, .pre_norms = true, .qk_norm = TKV__QK_NORM_HEAD, .deltanet = true,
     .q_gate = true, .moe = true, .shared_expert = true, .ffn_norm = "post_attention_norm.weight"},
    /* hybrids with Mamba-2 layers: head_count_kv arrays say which layers attend (without RoPE) */
    {.name = "granitehybrid", .rope = TKV__ROPE_NEOX, .pre_norms = true, .mamba2 = true, .granite = true,
     .no_rope = true},
    {.name = "nemotron_h", .rope = TKV__ROPE_NEOX, .pre_norms = true, .mamba2 = true, .one_block = true,
     .no_rope = true},
};

const tkv__arch *tkv__arch_find(const char *name) {
    for (size_t i = 0; i < sizeof archs / sizeof archs[0]; i++)
        if (!strcmp(archs[i].name, name)) return &archs[i];
    return NULL;
}

const char *tkv__arch_names(char *buf, size_t cap) {
    size_t n = 0;
    if (cap) buf[0] = '\0';
    for (size_t i = 0; i < sizeof archs / sizeof archs[0] && n < cap; i++)
        n += (size_t)snprintf(buf + n, cap - n, "%s%s", i ? ", " : "", archs[i].name);
    return buf;
}
