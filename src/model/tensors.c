/*
 * tensors.c — the tensor list of each architecture (see tensors.h).
 */
#include "tensors.h"

#include "weights.h"

#include <stdio.h>
#include <string.h>

/* Which architectures store a tensor. */
enum when {
    ALL,      /* every architecture */
    PRE,      /* arch->pre_norms */
    POST,     /* arch->post_norms */
    UNFUSED,  /* separate attn_q, attn_k, attn_v */
    FUSED,    /* arch->fused */
    BIAS,     /* arch->qkv_bias */
    QK_NORM,  /* arch->qk_norm */
    DENSE,    /* one FFN, gate and up separate */
    DENSE_ALL, /* one FFN (fused or not) */
    MOE,      /* arch->moe */
    OAI,      /* arch->oai */
    CONV,     /* short-conv layers only (arch->shortconv) */
};

/* Roles of the attention block, absent from short-conv layers. */
#define ATTN_ROLE(i) ((i) >= 1 && (i) <= 12)

/* The sizes a shape is written in. */
enum dim { ONE, EMBD, Q, KV, FF, QNORM, KNORM, QKV, FF2, HEADS, EXPERTS, EXP_FF, EMBD3, TAPS };

static const struct role {
    const char *suffix; /* after "blk.N." */
    enum dim ne[3];     /* ONE past the tensor's dims */
    unsigned n_dims;
    bool matrix;
    enum when when;
    size_t bind;
} roles[] = {
#define L(field) offsetof(tkv__layer, field)
    {"attn_norm.weight", {EMBD}, 1, false, PRE, L(attn_norm)},
    {"attn_q.weight", {EMBD, Q}, 2, true, UNFUSED, L(wq)},
    {"attn_k.weight", {EMBD, KV}, 2, true, UNFUSED, L(wk)},
    {"attn_v.weight", {EMBD, KV}, 2, true, UNFUSED, L(wv)},
    {"attn_qkv.weight", {EMBD, QKV}, 2, true, FUSED, TKV__BIND_VIEWS},
    {"attn_q.bias", {Q}, 1, false, BIAS, L(bq)},
    {"attn_k.bias", {KV}, 1, false, BIAS, L(bk)},
    {"attn_v.bias", {KV}, 1, false, BIAS, L(bv)},
    {"attn_q_norm.weight", {QNORM}, 1, false, QK_NORM, L(q_norm)},
    {"attn_k_norm.weight", {KNORM}, 1, false, QK_NORM, L(k_norm)},
    {"attn_output.weight", {Q, EMBD}, 2, true, ALL, L(wo)},
    {"attn_output.bias", {EMBD}, 1, false, OAI, L(bo)},
    {"attn_sinks.weight", {HEADS}, 1, false, OAI, L(sinks)},
    {"post_attention_norm.weight", {EMBD}, 1, false, POST, L(post_attn_norm)},
    {"shortconv.conv.weight", {TAPS, EMBD}, 2, false, CONV, L(conv_w)},
    {"shortconv.in_proj.weight", {EMBD, EMBD3}, 2, true, CONV, L(conv_in)},
    {"shortconv.out_proj.weight", {EMBD, EMBD}, 2, true, CONV, L(conv_out)},
    {NULL /* arch's ffn norm */, {EMBD}, 1, false, PRE, L(ffn_norm)},
    {"ffn_gate.weight", {EMBD, FF}, 2, true, DENSE, L(w_gate)},
    {"ffn_up.weight", {EMBD, FF}, 2, true, DENSE, L(w_up)},
    {"ffn_up.weight", {EMBD, FF2}, 2, true, FUSED, TKV__BIND_VIEWS},
    {"ffn_down.weight", {FF, EMBD}, 2, true, DENSE_ALL, L(w_down)},
    {"ffn_gate_inp.weight", {EMBD, EXPERTS}, 2, true, MOE, L(router)},
    {"ffn_gate_exps.weight", {EMBD, EXP_FF, EXPERTS}, 3, true, MOE, L(exp_gate)},
    {"ffn_up_exps.weight", {EMBD, EXP_FF, EXPERTS}, 3, true, MOE, L(exp_up)},
    {"ffn_down_exps.weight", {EXP_FF, EMBD, EXPERTS}, 3, true, MOE, L(exp_down)},
    {"ffn_gate_inp.bias", {EXPERTS}, 1, false, OAI, L(router_b)},
    {"ffn_gate_exps.bias", {EXP_FF, EXPERTS}, 2, false, OAI, L(exp_gate_b)},
    {"ffn_up_exps.bias", {EXP_FF, EXPERTS}, 2, false, OAI, L(exp_up_b)},
    {"ffn_down_exps.bias", {EMBD, EXPERTS}, 2, false, OAI, L(exp_down_b)},
    {"post_ffw_norm.weight", {EMBD}, 1, false, POST, L(post_ffn_norm)},
#undef L
};

static bool stored(const tkv__arch *a, enum when w) {
    switch (w) {
    case ALL: return true;
    case PRE: return a->pre_norms;
    case POST: return a->post_norms;
    case UNFUSED: return !a->fused;
    case FUSED: return a->fused;
    case BIAS: return a->qkv_bias;
    case QK_NORM: return a->qk_norm != TKV__QK_NORM_NONE;
    case DENSE: return !a->fused && !a->moe;
    case DENSE_ALL: return !a->moe;
    case MOE: return a->moe;
    case OAI: return a->oai;
    case CONV: return a->shortconv;
    }
    return false;
}

tkv_status tkv__tensors_each(const tkv__arch *arch, const tkv_hparams *hp, const tkv__moe_dims *moe,
                             const uint8_t *conv, tkv__tensor_fn fn, void *ud) {
    const uint64_t q = (uint64_t)hp->n_head * hp->head_dim, kv = (uint64_t)hp->n_head_kv * hp->head_dim;
    const bool whole = arch->qk_norm == TKV__QK_NORM_WHOLE;
    const uint64_t size[] = {
        [ONE] = 1, [EMBD] = hp->n_embd, [Q] = q, [KV] = kv, [FF] = hp->n_ff,
        [QNORM] = whole ? q : hp->head_dim, [KNORM] = whole ? kv : hp->head_dim, [QKV] = q + 2 * kv,
        [FF2] = 2 * (uint64_t)hp->n_ff, [HEADS] = hp->n_head,
        [EXPERTS] = arch->moe ? moe->n_expert : 0, [EXP_FF] = arch->moe ? moe->n_ff : 0,
        [EMBD3] = 3 * (uint64_t)hp->n_embd, [TAPS] = 3, /* lfm2's kernel (shortconv.l_cache, checked at load) */
    };
    tkv_status st;
    tkv__tensor_need t;

    /* the model's own: embeddings, the final norm, the output (absent: tied), RoPE divisors */
    static const struct {
        const char *name;
        bool matrix, optional, vocab_rows; /* vocab_rows: (n_embd, n_vocab), else (n_rot / 2) */
        size_t bind;
    } top[] = {
        {"token_embd.weight", true, false, true, offsetof(tkv__weights, tok_embd)},
        {"output_norm.weight", false, false, false, offsetof(tkv__weights, out_norm)},
        {"output.weight", true, true, true, offsetof(tkv__weights, output)},
        {"rope_freqs.weight", false, true, false, offsetof(tkv__weights, rope_freqs)},
        {"rope_factors_short.weight", false, true, false, offsetof(tkv__weights, rope_short)},
        {"rope_factors_long.weight", false, true, false, offsetof(tkv__weights, rope_long)},
    };
    for (size_t i = 0; i < sizeof top / sizeof top[0]; i++) {
        memset(&t, 0, sizeof t);
        const bool norm = top[i].bind == offsetof(tkv__weights, out_norm);
        snprintf(t.name, sizeof t.name, "%s", norm ? tkv__arch_out_norm(arch) : top[i].name);
        t.n_dims = top[i].vocab_rows ? 2 : 1;
        t.ne[0] = top[i].vocab_rows || norm ? hp->n_embd : hp->n_rot / 2;
        t.ne[1] = top[i].vocab_rows ? hp->n_vocab : 1;
        t.ne[2] = 1;
        t.matrix = top[i].matrix, t.optional = top[i].optional, t.layer = -1, t.bind = top[i].bind;
        if ((st = fn(&t, ud))) return st;
    }

    for (uint32_t l = 0; l < hp->n_layer; l++) {
        for (size_t i = 0; i < sizeof roles / sizeof roles[0]; i++) {
            const struct role *r = &roles[i];
            if (!stored(arch, r->when)) continue;
            const bool is_conv = conv && conv[l];
            if (is_conv ? ATTN_ROLE(i) : r->when == CONV) continue;
            memset(&t, 0, sizeof t);
            snprintf(t.name, sizeof t.name, "blk.%u.%s", l, r->suffix ? r->suffix : tkv__arch_ffn_norm(arch));
            t.n_dims = r->n_dims;
            for (int d = 0; d < 3; d++) t.ne[d] = d < (int)r->n_dims ? size[r->ne[d]] : 1;
            t.matrix = r->matrix, t.layer = (int)l, t.bind = r->bind;
            if ((st = fn(&t, ud))) return st;
        }
    }
    return TKV_OK;
}
