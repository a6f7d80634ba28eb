/*
 * weights.c — binding a model's tensors by role, checking their types.
 */
#include "weights.h"

#include "base/alloc.h"
#include "base/error.h"
#include "compute/quant.h"

#include <stdio.h>
#include <string.h>

static tkv_status bind(const tkv__gguf *g, const char *name, bool matrix, bool optional, tkv__tensor *out) {
    memset(out, 0, sizeof *out);
    const tkv__gguf_tensor *t = tkv__gguf_tensor_find(g, name);
    if (!t) {
        if (optional) return TKV_OK;
        return tkv__fail(TKV_ERR_FORMAT, "tensor '%s' is missing", name);
    }
    if (matrix ? !tkv__quant_supported(t->type) : t->type != TKV_TYPE_F32)
        return tkv__fail(TKV_ERR_UNSUPPORTED, "tensor '%s': type %s is not supported (%s)", name, tkv_type_name(t->type),
                         matrix ? "F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, "
                                  "IQ4_NL, IQ4_XS, MXFP4, TQ1_0, TQ2_0"
                                : "norms and biases must be F32");
    out->data = g->data + t->offset;
    out->type = t->type;
    out->ne0 = (size_t)t->ne[0];
    out->ne1 = (size_t)(t->ne[1] * t->ne[2] * t->ne[3]); /* rows: every outer dim (experts stack) */
    out->row_size = tkv__quant_row_size(t->type, out->ne0);
    return TKV_OK;
}

/* The fused projections of layer l (arch->fused) as views: attn_qkv's rows
   are q, k, v; ffn_up's are gate, then up (shapes checked at load). */
static tkv_status bind_fused(const tkv__gguf *g, const tkv_hparams *hp, uint32_t l, tkv__layer *L) {
    char name[96];
    tkv__tensor qkv, gate_up;
    snprintf(name, sizeof name, "blk.%u.attn_qkv.weight", l);
    tkv_status st = bind(g, name, true, false, &qkv);
    snprintf(name, sizeof name, "blk.%u.ffn_up.weight", l);
    if (!st) st = bind(g, name, true, false, &gate_up);
    if (st) return st;
    const size_t nq = (size_t)hp->n_head * hp->head_dim, nkv = (size_t)hp->n_head_kv * hp->head_dim;
    L->wq = tkv__tensor_rows(&qkv, 0, nq), L->wk = tkv__tensor_rows(&qkv, nq, nkv);
    L->wv = tkv__tensor_rows(&qkv, nq + nkv, nkv);
    L->w_gate = tkv__tensor_rows(&gate_up, 0, hp->n_ff), L->w_up = tkv__tensor_rows(&gate_up, hp->n_ff, hp->n_ff);
    return TKV_OK;
}

tkv_status tkv__weights_bind(const tkv__gguf *g, const tkv_hparams *hp, const tkv__arch *arch, tkv__weights *w) {
    memset(w, 0, sizeof *w);
    tkv_status st;
    if ((st = bind(g, "token_embd.weight", true, false, &w->tok_embd))) return st;
    if ((st = bind(g, "output_norm.weight", false, false, &w->out_norm))) return st;
    if ((st = bind(g, "output.weight", true, true, &w->output))) return st;
    if (!w->output.data) w->output = w->tok_embd;
    if ((st = bind(g, "rope_freqs.weight", false, true, &w->rope_freqs))) return st;
    if ((st = bind(g, "rope_factors_short.weight", false, true, &w->rope_short))) return st;
    if ((st = bind(g, "rope_factors_long.weight", false, true, &w->rope_long))) return st;
    w->layers = tkv__calloc(hp->n_layer, sizeof *w->layers);
    if (!w->layers) return tkv__fail(TKV_ERR_NOMEM, "out of memory for %u layers", hp->n_layer);
    for (uint32_t l = 0; l < hp->n_layer && !st; l++) {
        tkv__layer *L = &w->layers[l];
        static const struct {
            const char *suffix;
            size_t offset;
            bool matrix;
            int when; /* 0 always, 1 with biases, 2 with q-k norms, 3 pre-norms, 4 post-norms, 5 unfused,
                         6 dense and unfused, 7 dense, 8 experts, 9 gpt-oss */
        } roles[] = {
            {"attn_norm.weight", offsetof(tkv__layer, attn_norm), false, 3},
            {"attn_q.weight", offsetof(tkv__layer, wq), true, 5},
            {"attn_k.weight", offsetof(tkv__layer, wk), true, 5},
            {"attn_v.weight", offsetof(tkv__layer, wv), true, 5},
            {"attn_output.weight", offsetof(tkv__layer, wo), true, 0},
            {"ffn_norm.weight", offsetof(tkv__layer, ffn_norm), false, 3},
            {"ffn_gate.weight", offsetof(tkv__layer, w_gate), true, 6},
            {"ffn_up.weight", offsetof(tkv__layer, w_up), true, 6},
            {"ffn_down.weight", offsetof(tkv__layer, w_down), true, 7},
            {"ffn_gate_inp.weight", offsetof(tkv__layer, router), true, 8},
            {"ffn_gate_exps.weight", offsetof(tkv__layer, exp_gate), true, 8},
            {"ffn_up_exps.weight", offsetof(tkv__layer, exp_up), true, 8},
            {"ffn_down_exps.weight", offsetof(tkv__layer, exp_down), true, 8},
            {"attn_output.bias", offsetof(tkv__layer, bo), false, 9},
            {"attn_sinks.weight", offsetof(tkv__layer, sinks), false, 9},
            {"ffn_gate_inp.bias", offsetof(tkv__layer, router_b), false, 9},
            {"ffn_gate_exps.bias", offsetof(tkv__layer, exp_gate_b), false, 9},
            {"ffn_up_exps.bias", offsetof(tkv__layer, exp_up_b), false, 9},
            {"ffn_down_exps.bias", offsetof(tkv__layer, exp_down_b), false, 9},
            {"attn_q.bias", offsetof(tkv__layer, bq), false, 1},
            {"attn_k.bias", offsetof(tkv__layer, bk), false, 1},
            {"attn_v.bias", offsetof(tkv__layer, bv), false, 1},
            {"attn_q_norm.weight", offsetof(tkv__layer, q_norm), false, 2},
            {"attn_k_norm.weight", offsetof(tkv__layer, k_norm), false, 2},
            {"post_attention_norm.weight", offsetof(tkv__layer, post_attn_norm), false, 4},
            {"post_ffw_norm.weight", offsetof(tkv__layer, post_ffn_norm), false, 4},
        };
        for (size_t i = 0; i < sizeof roles / sizeof roles[0] && !st; i++) {
            const int when = roles[i].when;
            if ((when == 1 && !arch->qkv_bias) || (when == 2 && !arch->qk_norm) || (when == 3 && !arch->pre_norms) ||
                (when == 4 && !arch->post_norms) || (when == 5 && arch->fused) ||
                (when == 6 && (arch->fused || arch->moe)) || (when == 7 && arch->moe) || (when == 8 && !arch->moe) ||
                (when == 9 && !arch->oai))
                continue;
            const bool ffn_norm = roles[i].offset == offsetof(tkv__layer, ffn_norm); /* named by the architecture */
            char name[96];
            snprintf(name, sizeof name, "blk.%u.%s", l, ffn_norm ? tkv__arch_ffn_norm(arch) : roles[i].suffix);
            st = bind(g, name, roles[i].matrix, false, (tkv__tensor *)((char *)L + roles[i].offset));
        }
        if (arch->fused && !st) st = bind_fused(g, hp, l, L);
    }
    if (st) tkv__weights_free(w);
    return st;
}

void tkv__weights_free(tkv__weights *w) {
    tkv__free(w->layers);
    w->layers = NULL;
}
