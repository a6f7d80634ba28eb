/*
 * forward.c — the transformer forward pass (Llama, Qwen2, Qwen3, SmolLM3,
 * OLMo 2, Phi-3, Mistral 3, Gemma 2 and 3, Qwen3-MoE, gpt-oss, and the
 * hybrids' attention and FFN; their other layers' mixers are in
 * forward_recurrent.c), for a batch of tokens from any number of sequences.
 *
 * For each token t of the batch, with x its residual stream:
 *
 *   x = embed(token)                                   (n_embd)
 *   for each layer:
 *     h = rmsnorm(x) * attn_norm
 *     q, k, v = h Wq, h Wk, h Wv  (+ biases: qwen2)    (n_q), (n_kv), (n_kv)
 *     q, k = rmsnorm of each head (qwen3), of all (olmo2) (arch.h says which)
 *     q, k = rope(q, pos), rope(k, pos)             (not on smollm3's every 4th layer)
 *     K[cell], V[cell] = k, v                          into the KV cache
 *     a = softmax(q K^T / sqrt(hd)) V   over the cells of t's sequence at
 *                                       positions 0..pos (grouped-query:
 *                                       n_head / n_head_kv query heads share
 *                                       a KV head)
 *     x = x + a Wo                  (olmo2: x + rmsnorm(a Wo), and no pre-norms)
 *     h = rmsnorm(x) * ffn_norm
 *     x = x + (silu(h Wgate) * (h Wup)) Wdown
 *   logits = (rmsnorm(x) * output_norm) Wout           (n_vocab), if asked
 *
 * All threads of the pool run the whole pass together (one dispatch), each
 * taking its share of every step, with barriers between steps. Matrix
 * products split the weight rows (each weight row is read once per batch);
 * the other steps split tokens or (token, head) pairs, and a single token
 * (generation) its row's elements and its K/V heads (one_row_add, the
 * attention's one-token path). Activations are quantized once per product
 * input to the type the weights pair with.
 */
#include "forward.h"
#include "forward_impl.h"

#include "base/alloc.h"
#include "compute/attention.h"
#include "base/error.h"
#include "compute/ops.h"
#include "compute/quant/quant.h"

#include <math.h>
#include <stdatomic.h>
#include <string.h>


void tkv__fwd_free(tkv__fwd *f) {
    if (!f) return;
    float *bufs[] = {f->x,  f->h,      f->q,      f->k,  f->v,  f->att, f->tmp,          f->gate, f->up,
                     f->cs, f->cs_swa, f->bcx, f->router, f->ex, f->eg, f->eu,  f->ey, f->attn_scratch,
                     f->qg, f->qgate, f->dqkv, f->dc, f->dz, f->dbeta, f->dalpha, f->dout, f->shg, f->shy, f->mz, f->mc, f->my,
                     f->ones, f->ple, f->plg, f->gi, f->gr, f->rows1};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) tkv__free(bufs[i]);
    tkv__free(f->xq);
    tkv__free(f->chosen);
    tkv__free(f->chosen_w);
    tkv__free(f->rows);
    tkv__free(f->ridx);
    tkv__free(f->prev);
    tkv__free(f->last);
    tkv__free(f);
}

tkv_status tkv__fwd_create(const tkv_model *m, uint32_t n_batch, uint32_t n_cells, int n_threads, tkv__fwd **out) {
    const tkv_hparams *hp = &m->hp;
    tkv__fwd *f = tkv__calloc(1, sizeof *f);
    if (f) { /* LongRoPE: the long factors for contexts beyond the original one, as the reference decides */
        const tkv__weights *w = &m->w;
        f->rope_factors = w->rope_long.data && n_cells > hp->n_ctx_orig ? w->rope_long.data
                          : w->rope_short.data                         ? w->rope_short.data
                                                                       : w->rope_freqs.data;
    }
    if (!f) return tkv__fail(TKV_ERR_NOMEM, "out of memory for the forward pass");
    f->m = m;
    f->n_batch = n_batch;
    f->n_embd = hp->n_embd;
    /* the widest layer's sizes (gemma4's differ; each layer reads its own from ext.attn) */
    size_t group = 1;
    for (uint32_t l = 0; l < hp->n_layer; l++) {
        const tkv__attn_layer *A = &m->ext.attn[l];
        if (A->hd > f->hd) f->hd = A->hd;
        if ((size_t)A->n_head_kv * A->hd > f->n_kv) f->n_kv = (size_t)A->n_head_kv * A->hd;
        if (hp->n_head / A->n_head_kv > group) group = hp->n_head / A->n_head_kv;
    }
    f->n_q = (size_t)hp->n_head * f->hd;
    f->n_ff = hp->n_ff;
    f->n_rot = hp->n_rot > m->ext.n_rot_swa ? hp->n_rot : m->ext.n_rot_swa; /* cs rows' stride */
    f->n_vocab = hp->n_vocab;
    f->n_threads = n_threads;
    const size_t B = n_batch;
    size_t widest = f->n_embd > f->n_q ? f->n_embd : f->n_q;
    if (f->n_ff > widest) widest = f->n_ff;
    f->x = tkv__malloc(B * f->n_embd * sizeof(float));
    f->h = tkv__malloc(B * f->n_embd * sizeof(float));
    f->q = tkv__malloc(B * f->n_q * sizeof(float));
    f->k = tkv__malloc(B * f->n_kv * sizeof(float));
    f->v = tkv__malloc(B * f->n_kv * sizeof(float));
    f->att = tkv__malloc(B * f->n_q * sizeof(float));
    f->tmp = tkv__malloc(B * f->n_embd * sizeof(float));
    f->gate = tkv__malloc(B * f->n_ff * sizeof(float));
    f->up = tkv__malloc(B * f->n_ff * sizeof(float));
    f->cs = tkv__malloc(B * (f->n_rot ? f->n_rot : 1) * sizeof(float));
    if (m->arch->swa_own_rope) f->cs_swa = tkv__malloc(B * (f->n_rot ? f->n_rot : 1) * sizeof(float));
    if (m->arch->shortconv) f->bcx = tkv__malloc(B * 3 * f->n_embd * sizeof(float));
    bool extra_ok = true;
    const size_t pli = m->ext.n_pli, pl_all = pli * hp->n_layer; /* per-layer inputs (gemma4), or 0 */
    if (pli > widest) widest = pli;
    if (m->arch->v_norm) { /* a head's norm without weight; gemma4's router input, n_embd wide */
        const size_t n1 = f->hd > f->n_embd ? f->hd : f->n_embd;
        f->ones = tkv__malloc(n1 * sizeof(float));
        extra_ok = f->ones != NULL;
        for (size_t i = 0; f->ones && i < n1; i++) f->ones[i] = 1.0f;
    }
    if (pli) {
        f->ple = tkv__malloc(B * pl_all * sizeof(float));
        f->plg = tkv__malloc(B * pli * sizeof(float));
        extra_ok = extra_ok && f->ple && f->plg;
    }
    if (m->arch->q_gate) {
        f->qg = tkv__malloc(B * 2 * f->n_q * sizeof(float));
        f->qgate = tkv__malloc(B * f->n_q * sizeof(float));
        extra_ok = extra_ok && f->qg && f->qgate;
    }
    if (m->arch->shared_expert) {
        f->shg = tkv__malloc(B * sizeof(float));
        f->shy = tkv__malloc(B * f->n_embd * sizeof(float));
        extra_ok = extra_ok && f->shg && f->shy;
    }
    const tkv__mamba_dims *mm = &m->ext.mamba;
    if (m->arch->mamba2) {
        f->mz = tkv__malloc(B * mm->in_proj * sizeof(float));
        f->mc = tkv__malloc(B * mm->channels * sizeof(float));
        f->my = tkv__malloc(B * mm->d_inner * sizeof(float));
        extra_ok = extra_ok && f->mz && f->mc && f->my;
        if (mm->d_inner > widest) widest = mm->d_inner;
    }
    if (m->ext.state_floats) { /* recurrent layers: each token's place in its run */
        f->ridx = tkv__malloc(B * sizeof *f->ridx);
        f->prev = tkv__malloc(B * sizeof *f->prev);
        f->last = tkv__malloc(B * sizeof *f->last); /* runs: at most one per token */
        extra_ok = extra_ok && f->ridx && f->prev && f->last;
    }
    f->attn_scale = m->ext.attn_scale > 0 ? m->ext.attn_scale : 1.0f / sqrtf((float)hp->head_dim);
    const tkv__delta_dims *dd = &m->ext.delta;
    const size_t inner = (size_t)dd->n_v * dd->d_v;
    if (m->arch->deltanet) {
        f->dqkv = tkv__malloc(B * dd->channels * sizeof(float));
        f->dc = tkv__malloc(B * dd->channels * sizeof(float));
        f->dz = tkv__malloc(B * inner * sizeof(float));
        f->dbeta = tkv__malloc(B * dd->n_v * sizeof(float));
        f->dalpha = tkv__malloc(B * dd->n_v * sizeof(float));
        f->dout = tkv__malloc(B * inner * sizeof(float));
        extra_ok = extra_ok && f->dqkv && f->dc && f->dz && f->dbeta && f->dalpha && f->dout;
        if (dd->channels > widest) widest = dd->channels;
        if (inner > widest) widest = inner;
    }
    const tkv__moe_dims *md = &m->ext.moe;
    size_t xq_rows = B; /* rows of the widest activation f->xq holds */
    if (md->n_expert) {
        const size_t R = B > md->n_used ? B : md->n_used; /* a batch's tokens, or one token's experts */
        xq_rows = R;
        if (md->n_ff > widest) widest = md->n_ff;
        f->router = tkv__malloc(B * md->n_expert * sizeof(float));
        f->chosen = tkv__malloc(B * md->n_used * sizeof(uint32_t));
        f->chosen_w = tkv__malloc(B * md->n_used * sizeof(float));
        f->rows = tkv__malloc(((size_t)B * md->n_used + md->n_expert + 1) * sizeof(uint32_t));
        f->ex = tkv__malloc(B * f->n_embd * sizeof(float));
        f->eg = tkv__malloc(R * md->n_ff * sizeof(float));
        f->eu = tkv__malloc(R * md->n_ff * sizeof(float));
        f->ey = tkv__malloc(R * f->n_embd * sizeof(float));
    }
    if (md->n_expert && m->arch->layer_shapes) { /* gemma4: the experts' output beside the dense FFN's */
        f->shy = tkv__malloc(B * f->n_embd * sizeof(float));
        f->gi = tkv__malloc(B * f->n_embd * sizeof(float));
        f->gr = tkv__malloc(B * f->n_embd * sizeof(float));
        extra_ok = extra_ok && f->shy && f->gi && f->gr;
    }
    const bool moe_ok = !md->n_expert || (f->router && f->chosen && f->chosen_w && f->rows && f->ex && f->eg && f->eu &&
                                           f->ey);
    f->xq = tkv__malloc(xq_rows * widest * sizeof(float)); /* F32 acts are the widest form */
    /* one weight per cell for each (token, head) of a prefill unit and 16
       widened rows, or q/accumulator (F16), or the accumulator and a Q8_0
       cell's K and V rows expanded */
    f->attn_scratch_per_thread = (size_t)TKV__ATTN_TOKENS * group * n_cells + 16 * f->hd;
    const size_t kvw = m->ext.kv_width; /* a cache row: n_kv, or wider in a hybrid */
    if (f->attn_scratch_per_thread < f->hd + 2 * kvw) f->attn_scratch_per_thread = f->hd + 2 * kvw;
    size_t window = m->arch->deltanet ? (size_t)(dd->d_conv - 1) * dd->channels : 0; /* a conv window */
    if (m->arch->mamba2 && (size_t)(mm->d_conv - 1) * mm->channels > window) window = (size_t)(mm->d_conv - 1) * mm->channels;
    if (f->attn_scratch_per_thread < window) f->attn_scratch_per_thread = window;
    if (f->attn_scratch_per_thread < pl_all) f->attn_scratch_per_thread = pl_all; /* a token's per-layer embeddings */
    f->attn_scratch_per_thread += 64;
    f->attn_scratch = tkv__malloc((size_t)n_threads * f->attn_scratch_per_thread * sizeof(float));
    f->rows1 = tkv__malloc((size_t)n_threads * 2 * f->n_embd * sizeof(float));
    if (!f->rows1 || !f->x || !f->h || !f->q || !f->k || !f->v || !f->att || !f->tmp || !f->gate || !f->up || !f->cs || !f->xq ||
        !f->attn_scratch || (m->arch->swa_own_rope && !f->cs_swa) || (m->arch->shortconv && !f->bcx) || !moe_ok ||
        !extra_ok) {
        tkv__fwd_free(f);
        return tkv__fail(TKV_ERR_NOMEM, "out of memory for forward scratch (%u tokens)", n_batch);
    }
    *out = f;
    return TKV_OK;
}

/* ---- one pass: the shared state of the threads ---------------------------- */



/* All threads: make f->xq hold x (n rows of w->ne0) quantized for w's type,
   unless it already does. */
static void acts_for(pass *P, int ith, int nth, acts_tag *tag, const tkv__tensor *w, const float *x, uint32_t n) {
    const tkv_type vdt = tkv__quant_vec_dot_type(w->type);
    if (tag->src == x && tag->vdt == vdt) return;
    /* f->xq still holds the last product's activations, which other threads
       may be reading (q, k, v and gate, up follow each other without a
       barrier): wait for them before overwriting it. Products of one input
       whose weights quantize it differently (an IQ4_NL attn_q, Q8_0 acts,
       beside a Q5_K attn_v, Q8_K acts) otherwise read half-rewritten rows. */
    if (tag->src) tkv__pool_barrier(P->pool);
    size_t t0, t1, rs = tkv__ops_act_row_size(w->type, w->ne0);
    tkv__split(n, ith, nth, &t0, &t1);
    if (t1 > t0) tkv__ops_quantize_acts(w->type, x + t0 * w->ne0, t1 - t0, w->ne0, P->f->xq + t0 * rs);
    tkv__pool_barrier(P->pool);
    *tag = (acts_tag){x, vdt};
}

/* This thread's rows [t0, t1) of x (n rows of w->ne0) quantized for w's product, as acts_for would quantize them:
   called by every thread in the phase that wrote those rows, before the phase's closing barrier, so that the
   product (the next to read x) finds them ready and does without a barrier of its own. Only in a phase that
   follows a product's closing barrier (nothing reads f->xq any more). */
static void acts_early(pass *P, acts_tag *tag, const tkv__tensor *w, const float *x, size_t t0, size_t t1) {
    const size_t rs = tkv__ops_act_row_size(w->type, w->ne0);
    if (t1 > t0) tkv__ops_quantize_acts(w->type, x + t0 * w->ne0, t1 - t0, w->ne0, P->f->xq + t0 * rs);
    *tag = (acts_tag){x, tkv__quant_vec_dot_type(w->type)};
}

/* Rows [r0, r1) of y (n rows, ldy apart) = x W^T, x quantized at xq. */
static void rows_of(const pass *P, const tkv__tensor *w, size_t r0, size_t r1, const void *xq, uint32_t n, float *y,
                    size_t ldy) {
    /* float weights: the reference's prefill order for 2+ tokens, as it
       does; the default lanes order always, when results must not depend on
       the batch (BF16: the pairs order of vdpbf16ps, gemm.h) */
    const bool lanes = (n >= 2 || P->b->attn_float) && tkv__ops_lanes_ok(w->type, w->ne0, w->ne1);
    if (lanes)
        tkv__ops_matmul_lanes(P->b->attn_float ? TKV__LANES_DEFAULT : TKV__LANES_REFERENCE, w->type, w->data, w->ne0,
                              r0, r1, xq, n, y, ldy);
    /* quantized weights whose default order is not the reference's (Q5_K): its order, when asked for */
    else if (!P->b->attn_float && tkv__ops_ref_ok(w->type)) tkv__ops_matmul_ref(w->type, w->data, w->ne0, r0, r1, xq, n, y, ldy);
    else if (w->packed && r0 % TKV__PACK_ROWS == 0 && tkv__ops_packed_ok(w->type))
        tkv__ops_matmul_packed(w->type, w->packed, w->ne0, r0, r1, xq, n, y, ldy);
    else if (r1 > r0) tkv__ops_matmul(w->type, w->data, w->ne0, r0, r1, xq, n, y, ldy);
}

/* Thread ith's rows [*r0, *r1) of w's product. */
static void share_rows(const tkv__tensor *w, int ith, int nth, size_t *r0, size_t *r1) {
    if (w->packed) { /* whole groups of packed rows to each thread */
        tkv__split_groups(w->ne1, TKV__PACK_ROWS, ith, nth, r0, r1);
    } else {
        tkv__split(w->ne1, ith, nth, r0, r1);
    }
}

/* All threads: y (n rows, w->ne1) = x (n rows, w->ne0) W^T. */
void tkv__fwd_matmul(pass *P, int ith, int nth, acts_tag *tag, const tkv__tensor *w, const float *x, uint32_t n, float *y) {
    acts_for(P, ith, nth, tag, w, x, n);
    size_t r0, r1;
    share_rows(w, ith, nth, &r0, &r1);
    rows_of(P, w, r0, r1, P->f->xq, n, y, w->ne1);
}

/* What a thread that waits at a barrier asks into its cache of the product after it: as far as the products' own
   prefetches run ahead of their reads (PREFETCH_AHEAD), so that the product starts on lines already there. */
#define WARM_BYTES 8192

void tkv__fwd_barrier_warm(pass *P, int ith, int nth, const tkv__tensor *w) {
    size_t r0 = 0, r1 = 0;
    if (w && w->data) share_rows(w, ith, nth, &r0, &r1);
    if (r1 <= r0) {
        tkv__pool_barrier(P->pool);
        return;
    }
    const size_t rs = tkv__quant_row_size(w->type, w->ne0);
    const uint8_t *at = w->packed ? (const uint8_t *)w->packed + r0 / TKV__PACK_ROWS * w->pack_stride
                                  : (const uint8_t *)w->data + r0 * rs;
    const size_t bytes = (r1 - r0) * rs < WARM_BYTES ? (r1 - r0) * rs : WARM_BYTES;
    tkv__pool_barrier_warm(P->pool, at, bytes);
}

/* RoPE angles of one position. With factors (Llama 3.1's rope_freqs,
   Phi-3's LongRoPE factors), each angle is divided by its factor, the angle
   built as the kernel builds it; cos and sin are then scaled by the model's
   attention factor (LongRoPE), where it has one. */
static void rope_angles(const tkv__fwd *f, float *cs, tkv_pos pos) {
    const tkv_model *m = f->m;
    const tkv_hparams *hp = &m->hp;
    const tkv__hp_ext *x = &m->ext;
    const uint8_t *ff = f->rope_factors;
    if (!x->yarn && !ff) {
        tkv__ops_rope_cache(cs, hp->n_rot, pos, hp->rope_freq_base, hp->rope_freq_scale);
    } else {
        const float step = powf(hp->rope_freq_base, -2.0f / (float)hp->n_rot);
        float theta = (float)pos; /* pos base^(-2i/n_rot), built step by step */
        for (size_t i = 0; i < hp->n_rot / 2; i++, theta *= step) {
            float th;
            if (x->yarn) { /* interpolated and extrapolated angles blended between the correction dims */
                const float y = ((float)i - x->yarn_corr[0]) / fmaxf(0.001f, x->yarn_corr[1] - x->yarn_corr[0]);
                const float mix = 1 - fminf(1, fmaxf(0, y));
                th = hp->rope_freq_scale * theta * (1 - mix) + theta * mix;
            } else { /* the pair's divisor */
                float factor;
                memcpy(&factor, ff + 4 * i, 4);
                th = hp->rope_freq_scale * (theta / factor);
            }
            cs[2 * i] = cosf(th);
            cs[2 * i + 1] = sinf(th);
        }
    }
    if (x->rope_attn_factor != 1.0f)
        for (size_t i = 0; i < hp->n_rot; i++) cs[i] *= x->rope_attn_factor;
}

void tkv__fwd_add_bias(float *y, const tkv__tensor *b, size_t n) {
    const float *bias = b->data;
    for (size_t i = 0; i < n; i++) {
        float v;
        memcpy(&v, bias + i, 4);
        y[i] += v;
    }
}

/* A K or V row of `type` from n floats; a row wider than n (a hybrid's
   cache, sized for its conv rows) is padded with zeros in pad (n_embd_kv). */
void tkv__fwd_store_row(const tkv__kvrows *kv, tkv_type type, void *dst, const float *src, size_t n, float *pad) {
    if (n < kv->n_embd_kv) {
        memcpy(pad, src, n * sizeof *pad);
        memset(pad + n, 0, (kv->n_embd_kv - n) * sizeof *pad);
        src = pad;
    }
    if (type == TKV_TYPE_F32) {
        memcpy(dst, src, kv->n_embd_kv * sizeof(float));
    } else if (type == TKV_TYPE_F16) {
        tkv__ops_to_f16(src, dst, kv->n_embd_kv);
    } else if (type == TKV_TYPE_Q8_0) { /* the activation quantizer: what the reference stores */
        tkv__quant_quantize_row(TKV_TYPE_Q8_0, src, dst, kv->n_embd_kv);
    } else {
        tkv__quant_quantize_block_row(type, src, dst, kv->n_embd_kv);
    }
}

/*
 * The mixture-of-experts FFN: y (n, n_embd) = sum over each token's chosen
 * experts of weight * down_e(silu(gate_e in) * up_e in). The tokens routed
 * to an expert are gathered into one batch, so each expert's weights are
 * read once per pass; experts nobody chose are skipped. All threads.
 */
/* Expert e's activation of one token: eg = act(eg, eu) (n_ff_exp), SwiGLU (GeGLU: gemma4, after each
   projection's expert scale, if any), or SwiGLU-OAI on the biased projections (gpt-oss). */
static void expert_act(const tkv__fwd *f, const tkv__layer *L, uint32_t e, float *eg, float *eu) {
    const size_t n_ff = f->m->ext.moe.n_ff;
    if (f->m->arch->gemma) {
        const float gs = L->exp_gate_s.data ? ((const float *)L->exp_gate_s.data)[e] : 1.0f;
        const float us = L->exp_up_s.data ? ((const float *)L->exp_up_s.data)[e] : 1.0f;
        for (size_t i = 0; gs != 1.0f && i < n_ff; i++) eg[i] *= gs;
        for (size_t i = 0; us != 1.0f && i < n_ff; i++) eu[i] *= us;
        tkv__ops_geglu(eg, eg, eu, n_ff);
        return;
    }
    if (!f->m->arch->oai) {
        tkv__ops_swiglu(eg, eg, eu, n_ff);
        return;
    }
    const float *gb = (const float *)L->exp_gate_b.data + (size_t)e * n_ff;
    const float *ub = (const float *)L->exp_up_b.data + (size_t)e * n_ff;
    for (size_t i = 0; i < n_ff; i++) {
        const float g = fminf(eg[i] + gb[i], 7.0f), u = fminf(fmaxf(eu[i] + ub[i], -7.0f), 7.0f);
        eg[i] = g / (1.0f + expf(-1.702f * g)) * (u + 1.0f);
    }
}

/* yt[i] += w (ey[i] + expert e's down bias, if any) for i in [i0, i1); ey times expert e's down scale first,
   if any (gemma4). */
static void expert_add(const tkv__fwd *f, const tkv__layer *L, uint32_t e, float w, float *ey, float *yt, size_t i0,
                       size_t i1) {
    if (f->m->arch->oai) {
        const float *db = (const float *)L->exp_down_b.data + (size_t)e * f->n_embd;
        for (size_t i = i0; i < i1; i++) ey[i] += db[i];
    }
    if (L->exp_down_s.data) {
        const float s = ((const float *)L->exp_down_s.data)[e];
        for (size_t i = i0; i < i1; i++) ey[i] *= s;
    }
    for (size_t i = i0; i < i1; i++) yt[i] += w * ey[i];
}

/* Expert e's gate (up: its up) rows, n_ff of them, from two stacks or from one stack of both (gemma4). */
static tkv__tensor expert_rows(const tkv__layer *L, size_t n_ff, uint32_t e, bool up) {
    if (L->exp_gate_up.data) return tkv__tensor_rows(&L->exp_gate_up, (size_t)e * 2 * n_ff + (up ? n_ff : 0), n_ff);
    return tkv__tensor_rows(up ? &L->exp_up : &L->exp_gate, (size_t)e * n_ff, n_ff);
}

/*
 * All threads: the MoE FFN of a single token (generation), all of its K
 * experts in each step, so a layer waits at 5 barriers instead of 4 per
 * expert, and reads only the chosen experts' rows. The same arithmetic as
 * moe_ffn's batch path, experts summed in index order as there.
 */
static void moe_one(pass *P, int ith, int nth, const tkv__layer *L, acts_tag *tag, const float *in, const float *rin,
                    float *y) {
    tkv__fwd *f = P->f;
    const tkv__moe_dims *md = &f->m->ext.moe;
    const uint32_t E = md->n_expert, K = md->n_used;
    const size_t F = md->n_ff, D = f->n_embd;
    tkv__fwd_matmul(P, ith, nth, tag, &L->router, rin, 1, f->router); /* (E) */
    tkv__pool_barrier(P->pool);
    /* every thread makes the same choice into its own copy: no barrier */
    uint32_t chosen[TKV__MOE_MAX_EXPERTS];
    float weight[TKV__MOE_MAX_EXPERTS], logits[TKV__MOE_MAX_EXPERTS];
    memcpy(logits, f->router, E * sizeof(float));
    if (L->router_b.data) tkv__fwd_add_bias(logits, &L->router_b, E);
    tkv__moe_choose_by(md, logits, (const float *)L->exp_bias.data, chosen, weight);
    for (uint32_t a = 1; a < K; a++) /* index order: the batch path's sum order */
        for (uint32_t b = a; b > 0 && chosen[b - 1] > chosen[b]; b--) {
            const uint32_t c = chosen[b];
            const float w = weight[b];
            chosen[b] = chosen[b - 1], weight[b] = weight[b - 1];
            chosen[b - 1] = c, weight[b - 1] = w;
        }
    /* gate and up of every chosen expert: 2 K F rows shared out    eg, eu: (K, F) */
    tag->src = NULL; /* the router's input may differ from the experts' (gemma4) */
    acts_for(P, ith, nth, tag, L->exp_gate_up.data ? &L->exp_gate_up : &L->exp_gate, in, 1);
    size_t r0, r1;
    tkv__split(2 * K * F, ith, nth, &r0, &r1);
    for (uint32_t k = 0; k < K; k++)
        for (int half = 0; half < 2; half++) { /* rows [lo, lo + F) of the shared range: expert k's gate or up */
            const size_t lo = (2 * (size_t)k + (size_t)half) * F;
            const size_t a = r0 > lo ? r0 - lo : 0, b = r1 < lo + F ? r1 - lo : F;
            if (r1 <= lo || r0 >= lo + F || a >= b) continue;
            const tkv__tensor w = expert_rows(L, F, chosen[k], half);
            rows_of(P, &w, a, b, f->xq, 1, (half ? f->eu : f->eg) + k * F, F);
        }
    tkv__pool_barrier(P->pool);
    /* each expert's activation, quantized for its down projection (xq: (K, rs)) */
    const size_t rs = tkv__ops_act_row_size(L->exp_down.type, F);
    for (uint32_t k = (uint32_t)ith; k < K; k += (uint32_t)nth) {
        expert_act(f, L, chosen[k], f->eg + k * F, f->eu + k * F);
        tkv__ops_quantize_acts(L->exp_down.type, f->eg + k * F, 1, F, f->xq + k * rs);
    }
    tag->src = NULL;
    tkv__pool_barrier(P->pool);
    /* down: K D rows shared out                                     ey: (K, D) */
    tkv__split(K * D, ith, nth, &r0, &r1);
    for (uint32_t k = 0; k < K; k++) {
        const size_t lo = (size_t)k * D;
        if (r1 <= lo || r0 >= lo + D) continue;
        const tkv__tensor w = tkv__tensor_rows(&L->exp_down, (size_t)chosen[k] * D, D);
        rows_of(P, &w, r0 > lo ? r0 - lo : 0, r1 < lo + D ? r1 - lo : D, f->xq + k * rs, 1, f->ey + k * D, D);
    }
    tkv__pool_barrier(P->pool);
    /* y = sum of w_k ey_k over the experts in index order, D shared out */
    tkv__split(D, ith, nth, &r0, &r1);
    for (size_t i = r0; i < r1; i++) y[i] = 0.0f;
    for (uint32_t k = 0; k < K; k++) expert_add(f, L, chosen[k], weight[k], f->ey + k * D, y, r0, r1);
    tkv__pool_barrier(P->pool);
}

/* All threads: y (n, n_embd) = the experts' sum for each token of in (n, n_embd), chosen by the router over rin
   (in itself, or gemma4's router input). */
static void moe_ffn(pass *P, int ith, int nth, const tkv__layer *L, acts_tag *tag, const float *in, const float *rin,
                    float *y) {
    tkv__fwd *f = P->f;
    const tkv__moe_dims *md = &f->m->ext.moe;
    const uint32_t n = P->b->n, E = md->n_expert, K = md->n_used;
    size_t t0, t1;
    if (n == 1 && (L->exp_gate_up.data || (tkv__quant_vec_dot_type(L->exp_gate.type) ==
                                               tkv__quant_vec_dot_type(L->exp_up.type) &&
                                           L->exp_gate.type == L->exp_up.type))) {
        moe_one(P, ith, nth, L, tag, in, rin, y);
        return;
    }
    tkv__split(n, ith, nth, &t0, &t1);
    /* router logits, then each token's experts                 (n, E) */
    tkv__fwd_matmul(P, ith, nth, tag, &L->router, rin, n, f->router);
    tkv__pool_barrier(P->pool);
    for (size_t t = t0; t < t1; t++) {
        if (L->router_b.data) tkv__fwd_add_bias(f->router + t * E, &L->router_b, E);
        tkv__moe_choose_by(md, f->router + t * E, (const float *)L->exp_bias.data, f->chosen + t * K,
                           f->chosen_w + t * K);
        memset(y + t * f->n_embd, 0, f->n_embd * sizeof(float));
    }
    tkv__pool_barrier(P->pool);
    uint32_t *first = f->rows + (size_t)f->n_batch * K; /* (E + 1) */
    if (ith == 0) { /* the choices grouped by expert, tokens in order, for every thread to read */
        uint32_t at = 0;
        for (uint32_t e = 0; e < E; e++) {
            first[e] = at;
            for (uint32_t t = 0; t < n; t++)
                for (uint32_t k = 0; k < K; k++)
                    if (f->chosen[t * K + k] == e) f->rows[at++] = t * K + k;
        }
        first[E] = at;
    }
    tkv__pool_barrier(P->pool);
    for (uint32_t e = 0; e < E; e++) {
        const uint32_t *rows = f->rows + first[e]; /* the tokens that chose e */
        const uint32_t ne = first[e + 1] - first[e];
        if (!ne) continue;
        size_t r0, r1;
        tkv__split(ne, ith, nth, &r0, &r1);
        for (size_t r = r0; r < r1; r++)
            memcpy(f->ex + r * f->n_embd, in + (size_t)(rows[r] / K) * f->n_embd, f->n_embd * sizeof(float));
        tag->src = NULL;
        tkv__pool_barrier(P->pool);
        const tkv__tensor gate = expert_rows(L, md->n_ff, e, false), up = expert_rows(L, md->n_ff, e, true);
        const tkv__tensor down = tkv__tensor_rows(&L->exp_down, (size_t)e * f->n_embd, f->n_embd);
        tkv__fwd_matmul(P, ith, nth, tag, &gate, f->ex, ne, f->eg);
        tkv__fwd_matmul(P, ith, nth, tag, &up, f->ex, ne, f->eu);
        tkv__pool_barrier(P->pool);
        for (size_t r = r0; r < r1; r++) expert_act(f, L, e, f->eg + r * md->n_ff, f->eu + r * md->n_ff);
        tag->src = NULL;
        tkv__pool_barrier(P->pool);
        tkv__fwd_matmul(P, ith, nth, tag, &down, f->eg, ne, f->ey);
        tkv__pool_barrier(P->pool);
        /* y[t] += w ey: a token appears once per expert, so threads never share a row */
        for (size_t r = r0; r < r1; r++)
            expert_add(f, L, e, f->chosen_w[rows[r]], f->ey + r * f->n_embd, y + (size_t)(rows[r] / K) * f->n_embd,
                       0, f->n_embd);
        tkv__pool_barrier(P->pool);
    }
}


/* u = relu(u)^2, n elements (nemotron_h's MLP activation). */
static void relu_sq(float *u, size_t n) {
    for (size_t i = 0; i < n; i++) {
        const float v = u[i] > 0 ? u[i] : 0;
        u[i] = v * v;
    }
}

/* This thread's share [*a, *z) of one row of len elements: whole activation blocks of w's product (16 elements at
   least, or without w: the SIMD width, so each element goes through the same code whatever the thread count). */
static void block_share(size_t len, const tkv__tensor *w, int ith, int nth, size_t *a, size_t *z) {
    const size_t blk = w ? tkv__quant_block_elems(tkv__quant_vec_dot_type(w->type)) : 16, unit = blk > 16 ? blk : 16;
    const size_t per = ((len + unit - 1) / unit + (size_t)nth - 1) / (size_t)nth * unit, e0 = (size_t)ith * per;
    *a = e0 < len ? e0 : len;
    *z = e0 + per < len ? e0 + per : len;
}

/* Elements [a, z) of one row (a share from block_share) quantized from src into f->xq for w's product, by the
   thread that wrote them; the tag then says f->xq holds the row `row` (src itself, or this thread's copy of it),
   every thread's share after the next barrier. */
static void acts_share(pass *P, acts_tag *tag, const tkv__tensor *w, const float *src, size_t a, size_t z,
                       const float *row) {
    if (z > a) tkv__ops_quantize_acts(w->type, src + a, 1, z - a, P->f->xq + tkv__ops_act_row_size(w->type, a));
    *tag = (acts_tag){row, tkv__quant_vec_dot_type(w->type)};
}

/* All threads: y (n, n_embd) = (act(in Wgate) * (in Wup)) Wdown, act SiLU (GELU: gemma); gate and up
   (n, n_ff) with n_ff Wup's rows (the model's FFN, or a shared expert's). Without Wgate (nemotron_h's MLP
   layers): y = relu(in Wup)^2 Wdown, the activation in up. */
static void dense_ffn(pass *P, int ith, int nth, const tkv__layer *L, acts_tag *tag, const float *in, float *y,
                      const tkv__tensor *after) {
    tkv__fwd *f = P->f;
    const uint32_t n = P->b->n;
    const size_t ff = L->w_up.ne1;
    const bool gated = L->w_gate.data != NULL;
    float *act = gated ? f->gate : f->up; /* (n, n_ff) the down product's input */
    size_t t0, t1;
    tkv__split(n, ith, nth, &t0, &t1);
    if (gated) tkv__fwd_matmul(P, ith, nth, tag, &L->w_gate, in, n, f->gate);
    tkv__fwd_matmul(P, ith, nth, tag, &L->w_up, in, n, f->up);
    tkv__fwd_barrier_warm(P, ith, nth, &L->w_down);
    /* the activation, token by token, each thread quantizing what it wrote for the down product (acts_early);
       a single token's (generation) shared out in runs of whole activation blocks of Wdown, at least 16
       elements (the SIMD width: each element goes through the same code whatever the thread count) */
    const tkv__tensor *D = &L->w_down;
    size_t a = 0, z = ff;
    if (n == 1) block_share(ff, D, ith, nth, &a, &z);
    for (size_t t = n == 1 ? 0 : t0; t < (n == 1 ? 1 : t1) && z > a; t++) {
        float *g = f->gate + t * ff + a, *u = f->up + t * ff + a;
        if (!gated) relu_sq(u, z - a);
        else if (f->m->arch->gemma) tkv__ops_geglu(g, g, u, z - a);
        else tkv__ops_swiglu(g, g, u, z - a);
    }
    if (n == 1) acts_share(P, tag, D, act, a, z, act); /* this thread's blocks of the one row */
    else acts_early(P, tag, D, act, t0, t1);
    tkv__fwd_barrier_warm(P, ith, nth, D);
    tkv__fwd_matmul(P, ith, nth, tag, D, act, n, y);
    tkv__fwd_barrier_warm(P, ith, nth, after); /* the product after the FFN (NULL: unknown) */
}

/*
 * All threads, gemma4 with experts: tmp (n, n_embd) = the dense FFN's output and the experts' side by side,
 * each normed:
 *   tmp = post_norm_1(ffn(h)) + post_norm_2(experts(pre_norm_2(x)))   h = ffn_norm(x), x the residual
 * the experts chosen by the router over rmsnorm(x) / sqrt(n_embd) * router_s (softmax, top k renormalized).
 */
static void gemma4_experts_ffn(pass *P, int ith, int nth, const tkv__layer *L, acts_tag *tag) {
    tkv__fwd *f = P->f;
    const float eps = f->m->hp.rms_eps, inv = 1.0f / sqrtf((float)f->n_embd);
    const size_t D = f->n_embd;
    size_t t0, t1;
    tkv__split(P->b->n, ith, nth, &t0, &t1);
    dense_ffn(P, ith, nth, L, tag, f->h, f->tmp, NULL);
    for (size_t t = t0; t < t1; t++) { /* gi: the experts' input, gr: the router's     (n, n_embd) x2 */
        const float *x = f->x + t * D, *s = L->router_s.data;
        float *gr = f->gr + t * D;
        tkv__ops_rmsnorm(f->gi + t * D, x, L->pre_norm_2.data, D, eps);
        tkv__ops_rmsnorm(gr, x, f->ones, D, eps);
        for (size_t i = 0; i < D; i++) gr[i] = gr[i] * inv * s[i];
    }
    tag->src = NULL;
    tkv__pool_barrier(P->pool);
    moe_ffn(P, ith, nth, L, tag, f->gi, f->gr, f->shy);
    for (size_t t = t0; t < t1; t++) {
        float *y = f->tmp + t * D, *e = f->shy + t * D;
        tkv__ops_rmsnorm(y, y, L->post_norm_1.data, D, eps);
        tkv__ops_rmsnorm(e, e, L->post_norm_2.data, D, eps);
        for (size_t i = 0; i < D; i++) y[i] += e[i];
    }
    tag->src = NULL;
    tkv__pool_barrier(P->pool);
}

/*
 * All threads, gemma4: each token's per-layer inputs          ple: (n, n_layer, pli)
 *   p = (rmsnorm(e Wpl / sqrt(n_embd)) * pl_norm + pl_embd[token] sqrt(pli)) / sqrt(2)
 * slice by slice (pli each), e the scaled embedding in f->x; the steps and
 * their rounding in the reference's order.
 */
static void per_layer_inputs(pass *P, int ith, int nth, acts_tag *tag) {
    tkv__fwd *f = P->f;
    const tkv_model *m = f->m;
    const tkv__weights *w = &m->w;
    const uint32_t n = P->b->n, n_layer = m->hp.n_layer;
    const size_t pli = m->ext.n_pli, pl_all = pli * n_layer;
    float *row = f->attn_scratch + (size_t)ith * f->attn_scratch_per_thread; /* (pl_all) a token's pl_embd */
    tkv__fwd_matmul(P, ith, nth, tag, &w->pl_proj, f->x, n, f->ple);
    tkv__pool_barrier(P->pool);
    const float ps = 1.0f / sqrtf((float)f->n_embd), es = sqrtf((float)pli), half = 1.0f / sqrtf(2.0f);
    size_t t0, t1;
    tkv__split(n, ith, nth, &t0, &t1);
    for (size_t t = t0; t < t1; t++) {
        const tkv__tensor *E = &w->pl_embd;
        tkv__quant_dequantize_row(E->type, (const uint8_t *)E->data + (size_t)P->b->token[t] * E->row_size, row, pl_all);
        for (uint32_t l = 0; l < n_layer; l++) {
            float *p = f->ple + t * pl_all + l * pli;
            for (size_t i = 0; i < pli; i++) p[i] *= ps;
            tkv__ops_rmsnorm(p, p, w->pl_norm.data, pli, m->hp.rms_eps);
            for (size_t i = 0; i < pli; i++) p[i] = (p[i] + row[l * pli + i] * es) * half;
        }
    }
    tkv__pool_barrier(P->pool);
}

/*
 * All threads, gemma4, after layer l's FFN: x += post_norm(proj(gelu(x Wgate) * p_l)), p_l the
 * layer's slice of the per-layer inputs (plg: (n, pli)), then x *= layer_output_scale.
 */
static void per_layer_branch(pass *P, int ith, int nth, uint32_t l, acts_tag *tag) {
    tkv__fwd *f = P->f;
    const tkv_model *m = f->m;
    const tkv__layer *L = &m->w.layers[l];
    const uint32_t n = P->b->n;
    const size_t pli = m->ext.n_pli, pl_all = pli * m->hp.n_layer, E = f->n_embd;
    size_t t0, t1;
    tkv__split(n, ith, nth, &t0, &t1);
    tag->src = NULL; /* x is new since its last product */
    if (pli) {
        tkv__fwd_matmul(P, ith, nth, tag, &L->inp_gate, f->x, n, f->plg);
        tkv__pool_barrier(P->pool);
        for (size_t t = t0; t < t1; t++)
            tkv__ops_geglu(f->plg + t * pli, f->plg + t * pli, f->ple + t * pl_all + l * pli, pli);
        tag->src = NULL;
        tkv__pool_barrier(P->pool);
        tkv__fwd_matmul(P, ith, nth, tag, &L->proj, f->plg, n, f->tmp);
        tkv__pool_barrier(P->pool);
    }
    const float *sc = L->out_scale.data;
    for (size_t t = t0; t < t1; t++) {
        float *x = f->x + t * E, *y = f->tmp + t * E;
        if (pli) {
            tkv__ops_rmsnorm(y, y, L->post_norm.data, E, m->hp.rms_eps);
            for (size_t i = 0; i < E; i++) x[i] += y[i];
        }
        if (sc)
            for (size_t i = 0; i < E; i++) x[i] *= sc[0];
    }
    tkv__pool_barrier(P->pool);
}

/*
 * One token (generation), all threads. The per-token steps around the blocks (the residual add, the next norm,
 * its activations) would be one thread's work while the others wait at the barrier after it. Instead each
 * thread keeps its own copy of the residual row (f->rows1: `row`, and `row + n_embd` as scratch), applies every
 * update to all of it (a few thousand adds, cheaper than a barrier), and writes only its share of x, h and the
 * activations. The arithmetic is the per-token path's, element by element, so results do not depend on it.
 */

/* x += rs * y (n_embd each), y a block's output, first given in place its bias (may be NULL) and its post-norm
   (may be NULL). */
static void add_block(const tkv__fwd *f, float *x, float *y, const tkv__tensor *bias, const float *post, float rs) {
    const size_t E = f->n_embd;
    if (bias) tkv__fwd_add_bias(y, bias, E);
    if (post) tkv__ops_rmsnorm(y, y, post, E, f->m->hp.rms_eps);
    if (rs != 1.0f)
        for (size_t i = 0; i < E; i++) x[i] += rs * y[i];
    else
        for (size_t i = 0; i < E; i++) x[i] += y[i];
}

/* add_block on this thread's copy of the residual row, y left as it is (its bias and post-norm go to a copy), and
   this thread's share of x written from the row. */
static void one_row_add(pass *P, int ith, int nth, float *row, float *y, const tkv__tensor *bias, const float *post,
                        float rs) {
    tkv__fwd *f = P->f;
    const size_t E = f->n_embd;
    if (bias || post) y = memcpy(row + E, y, E * sizeof *y);
    add_block(f, row, y, bias, post, rs);
    size_t a, z;
    block_share(f->n_embd, NULL, ith, nth, &a, &z);
    if (z > a) memcpy(f->x + a, row + a, (z - a) * sizeof *row);
}

/* The block's input from the row: h = rmsnorm(row) * norm (norm NULL: the row itself, x), this thread's share of
   h written, and that share quantized for w, the block's first product (NULL: none; the tag then says f->xq holds
   nothing). */
static void one_row_norm(pass *P, int ith, int nth, float *row, const float *norm, const tkv__tensor *w, acts_tag *tag) {
    tkv__fwd *f = P->f;
    const size_t E = f->n_embd;
    size_t a, z;
    block_share(E, w, ith, nth, &a, &z);
    const float *in = row;
    if (norm) {
        float *hh = row + E;
        tkv__ops_rmsnorm(hh, row, norm, E, f->m->hp.rms_eps);
        if (z > a) memcpy(f->h + a, hh + a, (z - a) * sizeof *hh);
        in = hh;
    }
    if (w) acts_share(P, tag, w, in, a, z, norm ? f->h : f->x);
    else tag->src = NULL;
}

/* One layer, all threads. False when the abort flag (set by thread 0 before the call) stopped it: every thread
   reads the flag after the same barrier, so all of them stop at the same layer. */
static bool layer_pass(pass *P, int ith, int nth, uint32_t l, acts_tag *tag) {
    tkv__fwd *f = P->f;
    const tkv_model *m = f->m;
    const tkv_hparams *hp = &m->hp;
    const tkv__layer *L = &m->w.layers[l];
    const tkv__fwd_batch *b = P->b;
    const uint32_t n = b->n;
    const float *attn_norm = L->attn_norm.data, *ffn_norm = L->ffn_norm.data;
    size_t t0, t1;
    tkv__split(n, ith, nth, &t0, &t1);

    const tkv__arch *arch = m->arch;
    /* one token: this thread's copy of the residual row, loaded where x was last written by others */
    float *row = n == 1 ? f->rows1 + (size_t)ith * 2 * f->n_embd : NULL;
    if (row && (l == 0 || arch->per_layer_input)) memcpy(row, f->x, f->n_embd * sizeof *row);
    /* h = rmsnorm(x) * attn_norm                          (n, n_embd)
       (without pre-norms the branch reads x itself) */
    const float *attn_in = arch->pre_norms ? f->h : f->x;
    const tkv__tensor *first = (tkv__layer_kind)m->ext.kind[l] == TKV__LAYER_ATTN ? &L->wq : NULL;
    if (row) {
        one_row_norm(P, ith, nth, row, arch->pre_norms ? attn_norm : NULL, first, tag);
    } else {
        if (arch->pre_norms)
            for (size_t t = t0; t < t1; t++)
                tkv__ops_rmsnorm(f->h + t * f->n_embd, f->x + t * f->n_embd, attn_norm, f->n_embd, hp->rms_eps);
        /* attention's first product is Wq's, over attn_in: its activations now, by the same tokens */
        if (first) acts_early(P, tag, first, attn_in, t0, t1);
        else tag->src = NULL;
    }
    tkv__fwd_barrier_warm(P, ith, nth, first);
    if (atomic_load(&P->aborted)) return false;

    switch ((tkv__layer_kind)m->ext.kind[l]) {
    case TKV__LAYER_SHORTCONV: tkv__fwd_conv_mixer(P, ith, nth, l, tag, attn_in); break;
    case TKV__LAYER_DELTANET: tkv__fwd_delta_mixer(P, ith, nth, l, tag, attn_in); break;
    case TKV__LAYER_MAMBA2: tkv__fwd_mamba_mixer(P, ith, nth, l, tag, attn_in); break;
    case TKV__LAYER_MLP: dense_ffn(P, ith, nth, L, tag, attn_in, f->tmp, NULL); break;
    case TKV__LAYER_ATTN: tkv__fwd_attn_mixer(P, ith, nth, l, tag, attn_in); break;
    }
    const float rs = m->ext.residual_scale; /* granite: each block's output is scaled before the add */
    const float *ffn_in = arch->pre_norms ? f->h : f->x;
    const bool moe = arch->moe && l >= f->m->ext.moe.n_dense_lead;
    /* the dense FFN's first product is Wgate's, over ffn_in: its activations now, by the same tokens */
    const tkv__tensor *ffn_first = !arch->one_block && !moe && !L->pre_norm_2.data ? &L->w_gate : NULL;
    if (row) {
        one_row_add(P, ith, nth, row, f->tmp, L->bo.data ? &L->bo : NULL, arch->post_norms ? L->post_attn_norm.data : NULL, rs);
        if (!arch->one_block) one_row_norm(P, ith, nth, row, arch->pre_norms ? ffn_norm : NULL, ffn_first, tag);
        else tag->src = NULL;
    } else {
        for (size_t t = t0; t < t1; t++) {
            float *x = f->x + t * f->n_embd;
            add_block(f, x, f->tmp + t * f->n_embd, L->bo.data ? &L->bo : NULL,
                      arch->post_norms ? L->post_attn_norm.data : NULL, rs);
            /* h = rmsnorm(x) * ffn_norm */
            if (arch->pre_norms && !arch->one_block) tkv__ops_rmsnorm(f->h + t * f->n_embd, x, ffn_norm, f->n_embd, hp->rms_eps);
        }
        if (ffn_first) acts_early(P, tag, ffn_first, ffn_in, t0, t1);
        else tag->src = NULL;
    }
    tkv__fwd_barrier_warm(P, ith, nth, ffn_first);
    if (arch->one_block) return true; /* nemotron_h: the layer was its mixer */

    /* x = x + (silu(h Wgate) * (h Wup)) Wdown   gate, up: (n, n_ff) */
    if (moe) {
        moe_ffn(P, ith, nth, L, tag, ffn_in, ffn_in, f->tmp);
        if (L->sh_gate.data) { /* tmp += sigmoid(h . Wshgate) shared_expert(h)   (qwen35moe) */
            tkv__fwd_matmul(P, ith, nth, tag, &L->sh_gate, ffn_in, n, f->shg);
            dense_ffn(P, ith, nth, L, tag, ffn_in, f->shy, NULL);
            for (size_t t = t0; t < t1; t++) {
                const float w = 1.0f / (1.0f + expf(-f->shg[t]));
                for (size_t i = 0; i < f->n_embd; i++) f->tmp[t * f->n_embd + i] += w * f->shy[t * f->n_embd + i];
            }
            tkv__pool_barrier(P->pool);
        }
    } else if (L->pre_norm_2.data) {
        gemma4_experts_ffn(P, ith, nth, L, tag);
    } else {
        /* the next product: the next layer's Wq (attention), or the output's */
        const tkv__tensor *after = l + 1 == hp->n_layer ? &m->w.output
                                   : (tkv__layer_kind)m->ext.kind[l + 1] == TKV__LAYER_ATTN ? &m->w.layers[l + 1].wq
                                                                                         : NULL;
        dense_ffn(P, ith, nth, L, tag, ffn_in, f->tmp, after);
    }
    if (row) {
        one_row_add(P, ith, nth, row, f->tmp, NULL, arch->post_norms ? L->post_ffn_norm.data : NULL, rs);
    } else {
        for (size_t t = t0; t < t1; t++)
            add_block(f, f->x + t * f->n_embd, f->tmp + t * f->n_embd, NULL, arch->post_norms ? L->post_ffn_norm.data : NULL, rs);
    }
    /* The next layer begins with its norm (and its first product's activations) over this thread's own tokens
       of x, which this thread just wrote: no barrier until that phase's own. The per-layer branch and the
       output norm read other threads' tokens. */
    if (arch->per_layer_input || l + 1 == hp->n_layer) tkv__pool_barrier(P->pool);
    if (arch->per_layer_input) per_layer_branch(P, ith, nth, l, tag);
    return true;
}

static void pass_task(void *arg, int ith, int nth) {
    pass *P = arg;
    tkv__fwd *f = P->f;
    const tkv_model *m = f->m;
    const tkv__fwd_batch *b = P->b;
    acts_tag tag = {0};
    size_t t0, t1;
    tkv__split(b->n, ith, nth, &t0, &t1);

    /* x = embed(token), and each token's RoPE angles        (n, n_embd) */
    const tkv__tensor *E = &m->w.tok_embd;
    for (size_t t = t0; t < t1; t++) {
        float *x = f->x + t * f->n_embd;
        tkv__quant_dequantize_row(E->type, (const uint8_t *)E->data + (size_t)b->token[t] * E->row_size, x, f->n_embd);
        if (m->arch->gemma || m->ext.embd_scale != 1.0f) { /* gemma: times sqrt(n_embd); granite: embedding_scale */
            const float sc = m->arch->gemma ? sqrtf((float)f->n_embd) : m->ext.embd_scale;
            for (size_t i = 0; i < f->n_embd; i++) x[i] *= sc;
        }
        if (f->n_rot) rope_angles(f, f->cs + t * f->n_rot, b->pos[t]);
        if (f->cs_swa && f->n_rot) /* the window layers' own base, unscaled */
            tkv__ops_rope_cache(f->cs_swa + t * f->n_rot, m->ext.n_rot_swa, b->pos[t], m->ext.rope_base_swa, 1.0f);
    }
    tkv__pool_barrier(P->pool);
    if (m->ext.n_pli) per_layer_inputs(P, ith, nth, &tag);

    for (uint32_t l = 0; l < m->hp.n_layer; l++) { /* thread 0 sets the flag, layer_pass reads it after a barrier */
        if (ith == 0 && P->abort_cb && P->abort_cb(P->abort_user)) atomic_store(&P->aborted, true);
        if (!layer_pass(P, ith, nth, l, &tag)) return;
    }

    /* logits = (rmsnorm(x) * output_norm) Wout, for the tokens asked   (n_out, n_vocab) */
    size_t o0, o1;
    tkv__split(b->n_out, ith, nth, &o0, &o1);
    for (size_t o = o0; o < o1; o++)
        tkv__ops_rmsnorm(f->h + o * f->n_embd, f->x + (size_t)b->out[o] * f->n_embd, m->w.out_norm.data, f->n_embd,
                         m->hp.rms_eps);
    tag.src = NULL;
    tkv__pool_barrier(P->pool);
    if (b->n_out) tkv__fwd_matmul(P, ith, nth, &tag, &m->w.output, f->h, b->n_out, b->logits);
    if (m->ext.logit_scale != 1.0f && b->n_out) { /* granite: logits / logit_scale */
        tkv__pool_barrier(P->pool);
        size_t c0, c1;
        tkv__split((size_t)b->n_out * m->hp.n_vocab, ith, nth, &c0, &c1);
        for (size_t c = c0; c < c1; c++) b->logits[c] /= m->ext.logit_scale;
    }
    if (m->ext.final_softcap > 0 && b->n_out) { /* logits = c tanh(logits / c) */
        tkv__pool_barrier(P->pool);
        size_t c0, c1; /* all threads share every row: one output (generation) is 32k+ values */
        tkv__split((size_t)b->n_out * m->hp.n_vocab, ith, nth, &c0, &c1);
        if (c1 > c0) tkv__ops_softcap(b->logits + c0, c1 - c0, m->ext.final_softcap);
    }
}

/* Each token's place in its run (f->ridx, f->prev), for the recurrent layers' convs: one pass, the runs'
   last tokens so far in f->last. */
static void index_runs(tkv__fwd *f, const tkv__fwd_batch *b) {
    for (uint32_t r = 0; r < b->n_runs; r++) f->last[r] = -1;
    for (uint32_t t = 0; t < b->n; t++) {
        const int32_t u = f->last[b->run[t]];
        f->prev[t] = u;
        f->ridx[t] = u < 0 ? 0 : f->ridx[u] + 1;
        f->last[b->run[t]] = (int32_t)t;
    }
}

tkv_status tkv__forward(tkv__fwd *f, tkv__kvrows *kv, tkv__pool *pool, const tkv__fwd_batch *b, tkv_abort_fn abort_cb,
                        void *abort_user) {
    if (f->m->ext.state_floats) {
        if (!b->n_runs || !b->run || !b->state)
            return tkv__fail(TKV_ERR_INVALID, "forward: a model with recurrent layers needs each token's run and state");
        index_runs(f, b);
    }
    pass P = {.f = f, .kv = kv, .pool = pool, .b = b, .abort_cb = abort_cb, .abort_user = abort_user,
              .attn = tkv__attn_get()};
    atomic_init(&P.aborted, false);
    tkv__pool_run(pool, pass_task, &P);
    if (atomic_load(&P.aborted)) return tkv__fail(TKV_ERR_ABORTED, "decode aborted by the abort callback");
    return TKV_OK;
}
