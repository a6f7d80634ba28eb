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
    SHEXP,    /* arch->shared_expert */
    FFN_NORM, /* arch->pre_norms with a second block (not arch->one_block) */
    ONE_BLOCK, /* arch->one_block */
    PLE,      /* arch->per_layer_input, in a file that has them (tkv__layout.n_pli > 0) */
    OUT_SCALE, /* arch->per_layer_input's architecture (gemma4), with or without them */
    EXP_BIAS, /* arch->expert_bias */
    G4MOE,    /* gemma4 with experts (expert_count > 0): beside its dense FFN */
    G4MOE_OPT, /* ... and optional: the experts' gate and up are two stacks or one, their scales */
};

/* Which layers store a tensor: every layer (its FFN, its norms), or those of one mixer kind;
   OWN_K: attention layers that compute their K (not KV-shared), OWN_V: and their V (not K as V). */
enum { ANY = -1, ATTN = TKV__LAYER_ATTN, CONV = TKV__LAYER_SHORTCONV, DELTA = TKV__LAYER_DELTANET,
       MAMBA = TKV__LAYER_MAMBA2, MLP = TKV__LAYER_MLP, OWN_K = 100, OWN_V };

/* The sizes a shape is written in. */
enum dim { ONE, EMBD, Q, QG, KV, FF, QNORM, KNORM, QKV, FF2, HEADS, EXPERTS, EXP_FF, EXP_FF2, EMBD3, TAPS,
           D_CH, D_INNER, D_CONV, D_NV, D_V, SH_FF, M_IN, M_CH, M_CONV, M_NH, M_INNER, M_GS, M_NG,
           VOCAB, HALF_ROT, PLI, PLI_ALL, N_DIMS };

static const struct role {
    const char *suffix; /* after "blk.N." */
    enum dim ne[3];     /* ONE past the tensor's dims */
    unsigned n_dims;
    bool matrix;
    enum when when;
    int mixer; /* ANY, or the layer kind that stores it */
    size_t bind;
} roles[] = {
#define L(field) offsetof(tkv__layer, field)
    {"attn_norm.weight", {EMBD}, 1, false, PRE, ANY, L(attn_norm)},
    {"attn_q.weight", {EMBD, QG}, 2, true, UNFUSED, ATTN, L(wq)},
    {"attn_k.weight", {EMBD, KV}, 2, true, UNFUSED, OWN_K, L(wk)},
    {"attn_v.weight", {EMBD, KV}, 2, true, UNFUSED, OWN_V, L(wv)},
    {"attn_qkv.weight", {EMBD, QKV}, 2, true, FUSED, ATTN, TKV__BIND_VIEWS},
    {"attn_q.bias", {Q}, 1, false, BIAS, ATTN, L(bq)},
    {"attn_k.bias", {KV}, 1, false, BIAS, OWN_K, L(bk)},
    {"attn_v.bias", {KV}, 1, false, BIAS, OWN_V, L(bv)},
    {"attn_q_norm.weight", {QNORM}, 1, false, QK_NORM, ATTN, L(q_norm)},
    {"attn_k_norm.weight", {KNORM}, 1, false, QK_NORM, OWN_K, L(k_norm)},
    {"attn_output.weight", {Q, EMBD}, 2, true, ALL, ATTN, L(wo)},
    {"attn_output.bias", {EMBD}, 1, false, OAI, ATTN, L(bo)},
    {"attn_sinks.weight", {HEADS}, 1, false, OAI, ATTN, L(sinks)},
    {"attn_qkv.weight", {EMBD, D_CH}, 2, true, ALL, DELTA, L(dn_qkv)},
    {"attn_gate.weight", {EMBD, D_INNER}, 2, true, ALL, DELTA, L(dn_z)},
    {"ssm_conv1d.weight", {D_CONV, D_CH}, 2, false, ALL, DELTA, L(dn_conv)},
    {"ssm_dt.bias", {D_NV}, 1, false, ALL, DELTA, L(dn_dt)},
    {"ssm_a", {D_NV}, 1, false, ALL, DELTA, L(dn_a)},
    {"ssm_beta.weight", {EMBD, D_NV}, 2, true, ALL, DELTA, L(dn_beta)},
    {"ssm_alpha.weight", {EMBD, D_NV}, 2, true, ALL, DELTA, L(dn_alpha)},
    {"ssm_norm.weight", {D_V}, 1, false, ALL, DELTA, L(dn_norm)},
    {"ssm_out.weight", {D_INNER, EMBD}, 2, true, ALL, DELTA, L(dn_out)},
    {"ssm_in.weight", {EMBD, M_IN}, 2, true, ALL, MAMBA, L(m_in)},
    {"ssm_conv1d.weight", {M_CONV, M_CH}, 2, false, ALL, MAMBA, L(m_conv)},
    {"ssm_conv1d.bias", {M_CH}, 1, false, ALL, MAMBA, L(m_conv_b)},
    {"ssm_dt.bias", {M_NH}, 1, false, ALL, MAMBA, L(m_dt)},
    {"ssm_a", {ONE, M_NH}, 2, false, ALL, MAMBA, L(m_a)},
    {"ssm_d", {ONE, M_NH}, 2, false, ALL, MAMBA, L(m_d)},
    {"ssm_norm.weight", {M_GS, M_NG}, 2, false, ALL, MAMBA, L(m_norm)},
    {"ssm_out.weight", {M_INNER, EMBD}, 2, true, ALL, MAMBA, L(m_out)},
    {"ffn_up.weight", {EMBD, FF}, 2, true, ONE_BLOCK, MLP, L(w_up)},
    {"ffn_down.weight", {FF, EMBD}, 2, true, ONE_BLOCK, MLP, L(w_down)},
    {"post_attention_norm.weight", {EMBD}, 1, false, POST, ANY, L(post_attn_norm)},
    {"shortconv.conv.weight", {TAPS, EMBD}, 2, false, ALL, CONV, L(conv_w)},
    {"shortconv.in_proj.weight", {EMBD, EMBD3}, 2, true, ALL, CONV, L(conv_in)},
    {"shortconv.out_proj.weight", {EMBD, EMBD}, 2, true, ALL, CONV, L(conv_out)},
    {NULL /* arch's ffn norm */, {EMBD}, 1, false, FFN_NORM, ANY, L(ffn_norm)},
    {"ffn_gate.weight", {EMBD, FF}, 2, true, DENSE, ANY, L(w_gate)},
    {"ffn_up.weight", {EMBD, FF}, 2, true, DENSE, ANY, L(w_up)},
    {"ffn_up.weight", {EMBD, FF2}, 2, true, FUSED, ANY, TKV__BIND_VIEWS},
    {"ffn_down.weight", {FF, EMBD}, 2, true, DENSE_ALL, ANY, L(w_down)},
    {"ffn_gate_inp.weight", {EMBD, EXPERTS}, 2, true, MOE, ANY, L(router)},
    {"ffn_gate_exps.weight", {EMBD, EXP_FF, EXPERTS}, 3, true, MOE, ANY, L(exp_gate)},
    {"ffn_up_exps.weight", {EMBD, EXP_FF, EXPERTS}, 3, true, MOE, ANY, L(exp_up)},
    {"ffn_down_exps.weight", {EXP_FF, EMBD, EXPERTS}, 3, true, MOE, ANY, L(exp_down)},
    {"exp_probs_b.bias", {EXPERTS}, 1, false, EXP_BIAS, ANY, L(exp_bias)},
    {"ffn_gate_inp.bias", {EXPERTS}, 1, false, OAI, ANY, L(router_b)},
    {"ffn_gate_exps.bias", {EXP_FF, EXPERTS}, 2, false, OAI, ANY, L(exp_gate_b)},
    {"ffn_up_exps.bias", {EXP_FF, EXPERTS}, 2, false, OAI, ANY, L(exp_up_b)},
    {"ffn_down_exps.bias", {EMBD, EXPERTS}, 2, false, OAI, ANY, L(exp_down_b)},
    {"ffn_gate_inp_shexp.weight", {EMBD, ONE}, 2, true, SHEXP, ANY, L(sh_gate)},
    {"ffn_gate_shexp.weight", {EMBD, SH_FF}, 2, true, SHEXP, ANY, L(w_gate)},
    {"ffn_up_shexp.weight", {EMBD, SH_FF}, 2, true, SHEXP, ANY, L(w_up)},
    {"ffn_down_shexp.weight", {SH_FF, EMBD}, 2, true, SHEXP, ANY, L(w_down)},
    {"post_ffw_norm.weight", {EMBD}, 1, false, POST, ANY, L(post_ffn_norm)},
    {"ffn_gate_inp.weight", {EMBD, EXPERTS}, 2, true, G4MOE, ANY, L(router)},
    {"ffn_gate_inp.scale", {EMBD}, 1, false, G4MOE, ANY, L(router_s)},
    {"pre_ffw_norm_2.weight", {EMBD}, 1, false, G4MOE, ANY, L(pre_norm_2)},
    {"post_ffw_norm_1.weight", {EMBD}, 1, false, G4MOE, ANY, L(post_norm_1)},
    {"post_ffw_norm_2.weight", {EMBD}, 1, false, G4MOE, ANY, L(post_norm_2)},
    {"ffn_gate_up_exps.weight", {EMBD, EXP_FF2, EXPERTS}, 3, true, G4MOE_OPT, ANY, L(exp_gate_up)},
    {"ffn_gate_exps.weight", {EMBD, EXP_FF, EXPERTS}, 3, true, G4MOE_OPT, ANY, L(exp_gate)},
    {"ffn_up_exps.weight", {EMBD, EXP_FF, EXPERTS}, 3, true, G4MOE_OPT, ANY, L(exp_up)},
    {"ffn_down_exps.weight", {EXP_FF, EMBD, EXPERTS}, 3, true, G4MOE, ANY, L(exp_down)},
    {"ffn_gate_exps.scale", {EXPERTS}, 1, false, G4MOE_OPT, ANY, L(exp_gate_s)},
    {"ffn_up_exps.scale", {EXPERTS}, 1, false, G4MOE_OPT, ANY, L(exp_up_s)},
    {"ffn_down_exps.scale", {EXPERTS}, 1, false, G4MOE_OPT, ANY, L(exp_down_s)},
    {"inp_gate.weight", {EMBD, PLI}, 2, true, PLE, ANY, L(inp_gate)},
    {"proj.weight", {PLI, EMBD}, 2, true, PLE, ANY, L(proj)},
    {"post_norm.weight", {EMBD}, 1, false, PLE, ANY, L(post_norm)},
    {"layer_output_scale.weight", {ONE}, 1, false, OUT_SCALE, ANY, L(out_scale)},
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
    case DENSE: return !a->fused && !a->moe && !a->one_block;
    case DENSE_ALL: return !a->moe && !a->one_block;
    case MOE: return a->moe;
    case OAI: return a->oai;
    case SHEXP: return a->shared_expert;
    case FFN_NORM: return a->pre_norms && !a->one_block;
    case ONE_BLOCK: return a->one_block;
    case PLE: return a->per_layer_input; /* and a file with them: tkv__tensors_each */
    case OUT_SCALE: return a->per_layer_input;
    case EXP_BIAS: return a->expert_bias;
    case G4MOE: case G4MOE_OPT: return a->layer_shapes; /* and a file with experts: tkv__tensors_each */
    }
    return false;
}

/* Whether a layer stores role r's FFN tensors: in a MoE model, the layers before leading_dense_block_count
   have the dense FFN (ffn_gate, ffn_up, ffn_down) instead of the experts. */
static bool ffn_stored(const tkv__arch *a, enum when w, bool dense_layer) {
    if (!dense_layer) return stored(a, w);
    switch (w) {
    case DENSE: return !a->fused && !a->one_block;
    case DENSE_ALL: return !a->one_block;
    case MOE: case EXP_BIAS: case SHEXP: return false;
    default: return stored(a, w);
    }
}

/* Whether layer l, of mixer kind `kind`, stores a tensor of role r's mixer. */
static bool layer_stores(const struct role *r, int kind, const tkv__attn_layer *A) {
    switch (r->mixer) {
    case ANY: return true;
    case OWN_K: return kind == ATTN && (!A || A->own_kv);
    case OWN_V: return kind == ATTN && (!A || (A->own_kv && !A->k_as_v));
    default: return r->mixer == kind;
    }
}

tkv_status tkv__tensors_each(const tkv__arch *arch, const tkv_hparams *hp, const tkv__layout *lay, tkv__tensor_fn fn,
                             void *ud) {
    const bool whole = arch->qk_norm == TKV__QK_NORM_WHOLE;
    const tkv__moe_dims *moe = lay->moe;
    const bool g4moe = arch->layer_shapes && moe && moe->n_expert > 0; /* gemma4's experts beside its FFN */
    const bool experts = arch->moe || g4moe;
    const tkv__delta_dims *dd = lay->delta;
    const tkv__mamba_dims *md = arch->mamba2 ? lay->mamba : NULL;
    const uint32_t pli = arch->per_layer_input ? lay->n_pli : 0;
    uint64_t size[N_DIMS] = {
        [ONE] = 1, [EMBD] = hp->n_embd, [HEADS] = hp->n_head,
        [EXPERTS] = experts ? moe->n_expert : 0, [EXP_FF] = experts ? moe->n_ff : 0,
        [EXP_FF2] = experts ? 2 * (uint64_t)moe->n_ff : 0,
        [EMBD3] = 3 * (uint64_t)hp->n_embd, [TAPS] = 3, /* lfm2's kernel (shortconv.l_cache, checked at load) */
        [D_CH] = dd ? dd->channels : 0, [D_INNER] = dd ? (uint64_t)dd->n_v * dd->d_v : 0,
        [D_CONV] = dd ? dd->d_conv : 0, [D_NV] = dd ? dd->n_v : 0, [D_V] = dd ? dd->d_v : 0,
        [SH_FF] = arch->shared_expert ? moe->n_ff_shared : 0,
        [M_IN] = md ? md->in_proj : 0, [M_CH] = md ? md->channels : 0, [M_CONV] = md ? md->d_conv : 0,
        [M_NH] = md ? md->n_head : 0, [M_INNER] = md ? md->d_inner : 0,
        [M_GS] = md ? md->d_inner / (md->n_group ? md->n_group : 1) : 0, [M_NG] = md ? md->n_group : 0,
        [VOCAB] = hp->n_vocab, [HALF_ROT] = hp->n_rot / 2, [PLI] = pli, [PLI_ALL] = (uint64_t)pli * hp->n_layer,
    };
    tkv_status st;
    tkv__tensor_need t;

    /* the model's own: embeddings, per-layer inputs, the final norm, the output (absent: tied), RoPE divisors */
#define W(field) offsetof(tkv__weights, field)
    static const struct {
        const char *name; /* NULL: the arch's final norm */
        enum dim ne[2];
        unsigned n_dims;
        bool matrix, optional;
        enum when when;
        size_t bind;
    } top[] = {
        {"token_embd.weight", {EMBD, VOCAB}, 2, true, false, ALL, W(tok_embd)},
        {"per_layer_token_embd.weight", {PLI_ALL, VOCAB}, 2, true, false, PLE, W(pl_embd)},
        {"per_layer_model_proj.weight", {EMBD, PLI_ALL}, 2, true, false, PLE, W(pl_proj)},
        {"per_layer_proj_norm.weight", {PLI}, 1, false, false, PLE, W(pl_norm)},
        {NULL, {EMBD}, 1, false, false, ALL, W(out_norm)},
        {"output.weight", {EMBD, VOCAB}, 2, true, true, ALL, W(output)},
        {"rope_freqs.weight", {HALF_ROT}, 1, false, true, ALL, W(rope_freqs)},
        {"rope_factors_short.weight", {HALF_ROT}, 1, false, true, ALL, W(rope_short)},
        {"rope_factors_long.weight", {HALF_ROT}, 1, false, true, ALL, W(rope_long)},
    };
#undef W
    for (size_t i = 0; i < sizeof top / sizeof top[0]; i++) {
        if (!stored(arch, top[i].when) || (top[i].when == PLE && !pli)) continue;
        memset(&t, 0, sizeof t);
        snprintf(t.name, sizeof t.name, "%s", top[i].name ? top[i].name : tkv__arch_out_norm(arch));
        t.n_dims = top[i].n_dims;
        for (int d = 0; d < 3; d++) t.ne[d] = d < (int)top[i].n_dims ? size[top[i].ne[d]] : 1;
        t.matrix = top[i].matrix, t.optional = top[i].optional, t.layer = -1, t.bind = top[i].bind;
        if ((st = fn(&t, ud))) return st;
    }

    for (uint32_t l = 0; l < hp->n_layer; l++) {
        /* this layer's attention and FFN sizes */
        const tkv__attn_layer *A = lay->attn ? &lay->attn[l] : NULL;
        const uint64_t hd = A ? A->hd : hp->head_dim, q = (uint64_t)hp->n_head * hd;
        const uint64_t kv = (A ? A->n_head_kv : hp->n_head_kv) * hd, ff = A ? A->n_ff : hp->n_ff;
        size[Q] = q, size[QG] = arch->q_gate ? 2 * q : q, size[KV] = kv, size[FF] = ff, size[FF2] = 2 * ff;
        size[QNORM] = whole ? q : hd, size[KNORM] = whole ? kv : hd, size[QKV] = q + 2 * kv;
        const bool dense_layer = arch->moe && l < moe->n_dense_lead;
        for (size_t i = 0; i < sizeof roles / sizeof roles[0]; i++) {
            const struct role *r = &roles[i];
            if (!ffn_stored(arch, r->when, dense_layer) || (r->when == PLE && !pli)) continue;
            if ((r->when == G4MOE || r->when == G4MOE_OPT) && !g4moe) continue;
            const int kind = lay->kind ? lay->kind[l] : TKV__LAYER_ATTN;
            if (!layer_stores(r, kind, A)) continue;
            memset(&t, 0, sizeof t);
            snprintf(t.name, sizeof t.name, "blk.%u.%s", l, r->suffix ? r->suffix : tkv__arch_ffn_norm(arch));
            t.n_dims = r->n_dims;
            for (int d = 0; d < 3; d++) t.ne[d] = d < (int)r->n_dims ? size[r->ne[d]] : 1;
            t.matrix = r->matrix, t.layer = (int)l, t.bind = r->bind, t.optional = r->when == G4MOE_OPT;
            if ((st = fn(&t, ud))) return st;
        }
    }
    return TKV_OK;
}
