/*
 * forward_attn.c — the attention block of the forward pass: q, k, v, their
 * norms and RoPE, K/V into each token's cell, and attention over the cells
 * of the token's sequence in the reference's arithmetic (one-pass F16 for
 * short batches, float with one softmax per (token, head) for prefill, float
 * over other cache types), then the output projection.
 */
#include "forward_impl.h"

#include "compute/ops.h"
#include "compute/quant/quant.h"

#include <math.h>
#include <string.h>

/* Layer l's attention: its head size, KV heads, rotation, cache layer, window (model.c read_layers). */
static inline const tkv__attn_layer *shape_of(const tkv_model *m, uint32_t l) { return &m->ext.attn[l]; }

/* The first position a token at `pos` attends to in layer l: a window of W
   sees pos - W + 1 .. pos. */
static size_t first_cell(const tkv_model *m, uint32_t l, tkv_pos pos) {
    const size_t w = shape_of(m, l)->swa ? m->ext.swa_window : 0;
    return w && (size_t)pos + 1 > w ? (size_t)pos + 1 - w : 0;
}

/* The attention sink of query head hq (gpt-oss), or -inf: a logit with no value. */
static inline float sink_of(const tkv_model *m, uint32_t l, size_t hq) {
    const float *s = m->w.layers[l].sinks.data;
    return s ? s[hq] : -INFINITY;
}

/* A score as the model takes it: soft-capped to c tanh(s / c) where it has c. */
static inline float capped(const tkv_model *m, float s) {
    return m->ext.attn_softcap > 0 ? m->ext.attn_softcap * tanhf(s / m->ext.attn_softcap) : s;
}

/*
 * Attention of token t, query head hq, over its sequence's cells 0..pos, in
 * one pass with a running softmax, as the reference's flash attention does
 * on the CPU: for each cell, s = q.k / sqrt(hd); when s is a new maximum M
 * the output so far is rescaled by exp(M_old - M); out += exp(s - M) v;
 * finally out /= the sum of the weights. With an F16 cache, q is rounded to
 * F16 and the output accumulates in F16 (attention.h), like the reference,
 * so the two agree to the bit.
 */
static void attend_f16(const pass *P, uint32_t layer, uint32_t t, size_t hq, void *scratch) {
    const tkv__fwd *f = P->f;
    const tkv__kvrows *kv = P->kv;
    const tkv_hparams *hp = &f->m->hp;
    const tkv__attn_ops *ops = P->attn;
    const tkv__attn_layer *A = shape_of(f->m, layer);
    const size_t hd = A->hd, n_q = hp->n_head * hd, koff = hq / (hp->n_head / A->n_head_kv) * hd;
    const uint32_t kl = A->kv_layer;
    const float *q = f->q + (size_t)t * n_q + hq * hd;
    uint16_t *q16 = scratch, *acc = q16 + hd; /* (hd), (hd) */
    for (size_t i = 0; i < hd; i++) q16[i] = tkv__quant_f32_to_f16(q[i]), acc[i] = 0;
    const uint32_t *cells = P->b->cells[t];
    const size_t n = (size_t)P->b->pos[t] + 1;
    const float scale = P->f->attn_scale;
    float M = -INFINITY, S = 0;
    for (size_t j = first_cell(f->m, layer, P->b->pos[t]); j < n; j++) {
        const uint16_t *k = (const uint16_t *)tkv__kvrows_k(kv, kl, cells[j]) + koff;
        const uint16_t *v = (const uint16_t *)tkv__kvrows_v(kv, kl, cells[j]) + koff;
        const float s = capped(f->m, ops->dot(q16, k, hd) * scale);
        float ms = 1.0f, vs = 1.0f;
        if (s > M) {
            const float M_old = M;
            M = s;
            ms = expf(M_old - M);
            ops->scale(acc, ms, hd);
        } else {
            vs = expf(s - M);
        }
        ops->mad(acc, v, vs, hd);
        S = fmaf(S, ms, vs); /* the reference (C++, GCC: -ffp-contract=fast) fuses S*ms + vs */
    }
    const float sink = sink_of(f->m, layer, hq);
    if (sink > -INFINITY) { /* one more logit, with no value: it only adds to the sum */
        const float M2 = sink > M ? sink : M, ms = expf(M - M2);
        if (ms != 1.0f) ops->scale(acc, ms, hd);
        S = S * ms + expf(sink - M2);
    }
    float *out = f->att + (size_t)t * n_q + hq * hd;
    const float S_inv = S == 0.0f ? 0.0f : 1.0f / S; /* a product, as the reference does: not a division */
    for (size_t i = 0; i < hd; i++) out[i] = tkv__quant_f16_to_f32(acc[i]) * S_inv;
}

/* Ask for the K (or V) rows of cells [j, j + 16) of a cell list while the
   16 before them are widened: the cells of a sequence that was decoded
   beside others are strided through the cache, which the hardware
   prefetcher does not follow far enough ahead. */
static void prefetch_rows(const tkv__kvrows *kv, uint32_t layer, const uint32_t *cells, size_t j, size_t n_max,
                          size_t koff, size_t hd, bool v) {
    for (size_t c = j; c < j + 16 && c < n_max; c++) {
        const void *row = v ? tkv__kvrows_v(kv, layer, cells[c]) : tkv__kvrows_k(kv, layer, cells[c]);
        const uint16_t *r = (const uint16_t *)row + koff;
        for (size_t b = 0; b < hd * sizeof *r; b += 64) __builtin_prefetch((const char *)r + b);
    }
}

/* The float path's weights from one (token, query head hq)'s scores over its n cells, in place: soft-capped
   where the model caps, -inf before the window's first cell j0, then the softmax (with the head's sink, where it
   has one, as one more logit that has no value). */
static void scores_to_weights(const tkv_model *m, uint32_t layer, size_t hq, float *wu, size_t n, size_t j0) {
    if (m->ext.attn_softcap > 0 && n > j0) tkv__ops_softcap(wu + j0, n - j0, m->ext.attn_softcap);
    for (size_t j = 0; j < j0; j++) wu[j] = -INFINITY; /* outside the window */
    const float sink = sink_of(m, layer, hq);
    if (sink > -INFINITY) {
        float mx = sink, sum = 0;
        for (size_t j = 0; j < n; j++) mx = wu[j] > mx ? wu[j] : mx;
        for (size_t j = 0; j < n; j++) sum += wu[j] = expf(wu[j] - mx);
        sum += expf(sink - mx);
        for (size_t j = 0; j < n; j++) wu[j] /= sum;
    } else {
        tkv__ops_softmax(wu, n);
    }
}

/*
 * Long batches (prefill): the scores of all cells first, one softmax (SIMD
 * exp), then the weighted sum of V, all in float, as the reference's tiled
 * prefill path does. Not bit-identical to the one-pass F16 form above, and
 * several times faster: per cell it does vector work only, no libm call.
 *
 * One call does tokens t0 .. t0 + tn - 1 of one sequence (one cell list),
 * and of each the query heads that share K/V head g: 16 cells' K (then V)
 * rows are widened to float once and read by every (token, head) that
 * attends to them, instead of converted again by each. Each (token, head)
 * gets the same arithmetic as if it ran alone.
 */
static void attend_f16_batched(const pass *P, uint32_t layer, uint32_t t0, uint32_t tn, size_t g, float *scratch) {
    const tkv__fwd *f = P->f;
    const tkv__kvrows *kv = P->kv;
    const tkv_hparams *hp = &f->m->hp;
    const tkv__attn_ops *ops = P->attn;
    const tkv__attn_layer *A = shape_of(f->m, layer);
    const size_t hd = A->hd, n_q = hp->n_head * hd, group = hp->n_head / A->n_head_kv, koff = g * hd;
    const uint32_t kl = A->kv_layer; /* the cache layer it reads (another's, if KV-shared) */
    const uint32_t *cells = P->b->cells[t0];
    const float scale = P->f->attn_scale;
    size_t n_max = 0;
    for (uint32_t u = 0; u < tn; u++)
        if ((size_t)P->b->pos[t0 + u] + 1 > n_max) n_max = (size_t)P->b->pos[t0 + u] + 1;
    /* (tn, group, n_max) weights: token u's head h at w + (u group + h) n_max; then (16, hd) widened rows */
    float *w = scratch, *wide_rows = scratch + tn * group * n_max;
#define Q(u, h) (f->q + (size_t)(t0 + (u)) * n_q + (g * group + (h)) * hd)
#define OUT(u, h) (f->att + (size_t)(t0 + (u)) * n_q + (g * group + (h)) * hd)
#define W(u, h) (w + ((u) * group + (h)) * n_max)
#define N(u) ((size_t)P->b->pos[t0 + (u)] + 1)
    const bool wide = ops->scores16 && hd % 16 == 0; /* 16 cells at a time */
    const bool direct = wide && tn == 1 && ops->scores16_rows; /* no widened copy: nobody shares it */
    const uint16_t *rows[16];
    if (wide)
        for (size_t j = 0; j + 16 <= n_max; j += 16) {
            for (size_t c = 0; c < 16; c++) rows[c] = (const uint16_t *)tkv__kvrows_k(kv, kl, cells[j + c]) + koff;
            prefetch_rows(kv, kl, cells, j + 16, n_max, koff, hd, false);
            if (direct) { /* one token: its heads read the F16 rows themselves */
                for (size_t h = 0; h < group; h++) ops->scores16_rows(Q(0, h), rows, hd, scale, W(0, h) + j);
                continue;
            }
            ops->widen16(rows, 16, hd, wide_rows);
            for (uint32_t u = 0; u < tn; u++)
                if (j + 16 <= N(u))
                    for (size_t h = 0; h < group; h++) ops->scores16(Q(u, h), wide_rows, hd, scale, W(u, h) + j);
        }
    for (uint32_t u = 0; u < tn; u++) {
        const size_t n = N(u);
        for (size_t j = wide ? n / 16 * 16 : 0; j < n; j++) {
            const uint16_t *k = (const uint16_t *)tkv__kvrows_k(kv, kl, cells[j]) + koff;
            for (size_t h = 0; h < group; h++) W(u, h)[j] = ops->dot_f32(Q(u, h), k, hd) * scale;
        }
        const size_t j0 = first_cell(f->m, layer, P->b->pos[t0 + u]);
        for (size_t h = 0; h < group; h++) {
            scores_to_weights(f->m, layer, g * group + h, W(u, h), n, j0);
            memset(OUT(u, h), 0, hd * sizeof(float));
        }
    }
    if (wide) {
        for (size_t j = 0; j < n_max; j += 16) {
            for (size_t c = 0; c < 16 && j + c < n_max; c++) rows[c] = (const uint16_t *)tkv__kvrows_v(kv, kl, cells[j + c]) + koff;
            prefetch_rows(kv, kl, cells, j + 16, n_max, koff, hd, true);
            if (direct) {
                const size_t m = n_max - j < 16 ? n_max - j : 16;
                for (size_t h = 0; h < group; h++) ops->wsum16_rows(OUT(0, h), rows, W(0, h) + j, m, hd);
                continue;
            }
            ops->widen16(rows, n_max - j < 16 ? n_max - j : 16, hd, wide_rows);
            for (uint32_t u = 0; u < tn; u++)
                if (j < N(u))
                    for (size_t h = 0; h < group; h++)
                        ops->wsum16(OUT(u, h), wide_rows, W(u, h) + j, N(u) - j < 16 ? N(u) - j : 16, hd);
        }
    } else {
        for (uint32_t u = 0; u < tn; u++)
            for (size_t j = 0; j < N(u); j++) {
                const uint16_t *v = (const uint16_t *)tkv__kvrows_v(kv, kl, cells[j]) + koff;
                for (size_t h = 0; h < group; h++) ops->mad_f32(OUT(u, h), v, W(u, h)[j], hd);
            }
    }
#undef Q
#undef OUT
#undef W
#undef N
}

/*
 * One token's attention (a decode step) over K/V heads g0 .. g1 - 1 at once:
 * attend_f16_batched's arithmetic for tn = 1 on each of their query heads
 * (scores16_rows, the same softmax, wsum16_rows; the same bits), with the
 * heads' slices of each 16 cells' rows read together: a cache row holds every
 * K/V head side by side, so one head at a time read a quarter of each row's
 * lines (4 K/V heads) and came back for the rest after its pass over all the
 * cells had pushed them out of L2. Needs the 16-row forms and hd % 16 == 0;
 * (g1 - g0) * group * (pos + 1) weights fit the scratch for g1 - g0 <=
 * TKV__ATTN_TOKENS.
 */
static void attend_one_heads(const pass *P, uint32_t layer, uint32_t t, size_t g0, size_t g1, float *w) {
    const tkv__fwd *f = P->f;
    const tkv__kvrows *kv = P->kv;
    const tkv_hparams *hp = &f->m->hp;
    const tkv__attn_ops *ops = P->attn;
    const tkv__attn_layer *A = shape_of(f->m, layer);
    const size_t hd = A->hd, n_q = hp->n_head * hd, group = hp->n_head / A->n_head_kv;
    const uint32_t kl = A->kv_layer;
    const uint32_t *cells = P->b->cells[t];
    const float scale = P->f->attn_scale;
    const size_t n = (size_t)P->b->pos[t] + 1, span = (g1 - g0) * hd;
#define Q(g, h) (f->q + (size_t)t * n_q + ((g) * group + (h)) * hd)
#define OUT(g, h) (f->att + (size_t)t * n_q + ((g) * group + (h)) * hd)
#define W(g, h) (w + (((g) - g0) * group + (h)) * n)
    const uint16_t *rows[16];
    for (size_t j = 0; j + 16 <= n; j += 16) {
        prefetch_rows(kv, kl, cells, j + 16, n, g0 * hd, span, false);
        for (size_t g = g0; g < g1; g++) {
            for (size_t c = 0; c < 16; c++) rows[c] = (const uint16_t *)tkv__kvrows_k(kv, kl, cells[j + c]) + g * hd;
            for (size_t h = 0; h < group; h++) ops->scores16_rows(Q(g, h), rows, hd, scale, W(g, h) + j);
        }
    }
    const size_t j0 = first_cell(f->m, layer, P->b->pos[t]);
    for (size_t g = g0; g < g1; g++) {
        for (size_t j = n / 16 * 16; j < n; j++) {
            const uint16_t *k = (const uint16_t *)tkv__kvrows_k(kv, kl, cells[j]) + g * hd;
            for (size_t h = 0; h < group; h++) W(g, h)[j] = ops->dot_f32(Q(g, h), k, hd) * scale;
        }
        for (size_t h = 0; h < group; h++) {
            scores_to_weights(f->m, layer, g * group + h, W(g, h), n, j0);
            memset(OUT(g, h), 0, hd * sizeof(float));
        }
    }
    for (size_t j = 0; j < n; j += 16) {
        const size_t m = n - j < 16 ? n - j : 16;
        prefetch_rows(kv, kl, cells, j + 16, n, g0 * hd, span, true);
        for (size_t g = g0; g < g1; g++) {
            for (size_t c = 0; c < m; c++) rows[c] = (const uint16_t *)tkv__kvrows_v(kv, kl, cells[j + c]) + g * hd;
            for (size_t h = 0; h < group; h++) ops->wsum16_rows(OUT(g, h), rows, W(g, h) + j, m, hd);
        }
    }
#undef Q
#undef OUT
#undef W
}

/* The head's slice (hd elements at koff) of a K or V row of `type`, as floats: the row itself for F32,
   else expanded into buf (the slice's blocks alone when it starts and ends on a block boundary). */
static const float *row_slice(const tkv__kvrows *kv, tkv_type type, const void *row, size_t koff, size_t hd,
                              float *buf) {
    if (type == TKV_TYPE_F32) return (const float *)row + koff;
    const size_t be = tkv__quant_block_elems(type);
    if (koff % be == 0 && hd % be == 0) {
        tkv__quant_dequantize_row(type, (const uint8_t *)row + koff / be * tkv__quant_row_size(type, be), buf, hd);
        return buf;
    }
    tkv__quant_dequantize_row(type, row, buf, kv->n_embd_kv);
    return buf + koff;
}

/* The running softmax in float over the rows of a cache whose K or V is not
   F16 (F32, or block types expanded slice by slice into scratch). */
static void attend_f32(const pass *P, uint32_t layer, uint32_t t, size_t hq, float *acc) {
    const tkv__fwd *f = P->f;
    const tkv__kvrows *kv = P->kv;
    const tkv_hparams *hp = &f->m->hp;
    const tkv__attn_layer *A = shape_of(f->m, layer);
    const size_t hd = A->hd, n_q = hp->n_head * hd, koff = hq / (hp->n_head / A->n_head_kv) * hd;
    const uint32_t kl = A->kv_layer;
    const float *q = f->q + (size_t)t * n_q + hq * hd;
    const uint32_t *cells = P->b->cells[t];
    const size_t n = (size_t)P->b->pos[t] + 1;
    const float scale = P->f->attn_scale;
    float M = -INFINITY, S = 0;
    memset(acc, 0, hd * sizeof *acc);
    float *row = acc + hd; /* (2, n_embd_kv) a cell's K and V, expanded */
    for (size_t j = first_cell(f->m, layer, P->b->pos[t]); j < n; j++) {
        const float *k = row_slice(kv, kv->type_k, tkv__kvrows_k(kv, kl, cells[j]), koff, hd, row);
        const float *v = row_slice(kv, kv->type_v, tkv__kvrows_v(kv, kl, cells[j]), koff, hd, row + kv->n_embd_kv);
        double sd = 0;
        for (size_t i = 0; i < hd; i++) sd += (double)q[i] * k[i];
        const float s = capped(f->m, (float)sd * scale);
        float ms = 1.0f, vs = 1.0f;
        if (s > M) {
            ms = expf(M - s);
            M = s;
            for (size_t i = 0; i < hd; i++) acc[i] *= ms;
        } else {
            vs = expf(s - M);
        }
        for (size_t i = 0; i < hd; i++) acc[i] = fmaf(v[i], vs, acc[i]);
        S = fmaf(S, ms, vs); /* the reference (C++, GCC: -ffp-contract=fast) fuses S*ms + vs */
    }
    const float sink = sink_of(f->m, layer, hq);
    if (sink > -INFINITY) {
        const float M2 = sink > M ? sink : M, ms = expf(M - M2);
        for (size_t i = 0; i < hd; i++) acc[i] *= ms;
        S = S * ms + expf(sink - M2);
    }
    float *out = f->att + (size_t)t * n_q + hq * hd;
    const float S_inv = S == 0.0f ? 0.0f : 1.0f / S;
    for (size_t i = 0; i < hd; i++) out[i] = acc[i] * S_inv;
}

/* y[off, off + n) += the bias's elements [off, off + n) */
static void add_bias_at(float *y, const tkv__tensor *b, size_t off, size_t n) {
    tkv__tensor part = *b;
    part.data = (const float *)b->data + off;
    tkv__fwd_add_bias(y + off, &part, n);
}

/* Token t's K/V heads [g0, g1) of layer l and their query heads: the q gate split off, K as V, biases, per-head
   norms, RoPE, the temperature, and K/V into the token's cell. All heads (g0 = 0, g1 = the layer's K/V heads):
   every step, each K/V row stored whole whatever the cache type. Fewer: per-head steps alone (qk_norm not
   TKV__QK_NORM_WHOLE) and an F16 cache, whose rows' heads are stored apart. */
static void prep_heads(pass *P, uint32_t l, uint32_t t, size_t g0, size_t g1, float *scratch) {
    tkv__fwd *f = P->f;
    const tkv_model *m = f->m;
    const tkv_hparams *hp = &m->hp;
    const tkv__layer *L = &m->w.layers[l];
    const tkv__attn_layer *A = shape_of(m, l);
    const tkv__fwd_batch *b = P->b;
    const tkv__arch *arch = m->arch;
    const size_t hd = A->hd, n_q = hp->n_head * hd, n_kv = A->n_head_kv * hd, group = hp->n_head / A->n_head_kv;
    const size_t h0 = g0 * group, h1 = g1 * group; /* query heads */
    const size_t qo = h0 * hd, qn = (h1 - h0) * hd, ko = g0 * hd, kn = (g1 - g0) * hd; /* elements */
    const bool whole = g0 == 0 && g1 == A->n_head_kv;
    float *q = f->q + t * n_q, *k = f->k + t * n_kv, *v = f->v + t * n_kv;
    if (arch->q_gate) /* qg: (n_head, 2, head_dim) -> q and the gate, (n_head, head_dim) each */
        for (size_t h = h0; h < h1; h++) {
            memcpy(q + h * hd, f->qg + t * 2 * n_q + 2 * h * hd, hd * sizeof *q);
            memcpy(f->qgate + t * n_q + h * hd, f->qg + t * 2 * n_q + (2 * h + 1) * hd, hd * sizeof *q);
        }
    if (A->k_as_v) memcpy(v + ko, k + ko, kn * sizeof *v); /* V is the K projection, before K's norm */
    if (arch->qkv_bias) add_bias_at(q, &L->bq, qo, qn), add_bias_at(k, &L->bk, ko, kn), add_bias_at(v, &L->bv, ko, kn);
    const float *qnw = L->q_norm.data, *knw = L->k_norm.data;
    if (arch->qk_norm == TKV__QK_NORM_HEAD) { /* each head of q, then of k: (head_dim) */
        for (size_t h = h0; h < h1; h++) tkv__ops_rmsnorm(q + h * hd, q + h * hd, qnw, hd, hp->rms_eps);
        for (size_t h = g0; h < g1 && A->own_kv; h++) tkv__ops_rmsnorm(k + h * hd, k + h * hd, knw, hd, hp->rms_eps);
    } else if (arch->qk_norm == TKV__QK_NORM_WHOLE) { /* (n_q), (n_kv): whole only */
        tkv__ops_rmsnorm(q, q, qnw, n_q, hp->rms_eps);
        tkv__ops_rmsnorm(k, k, knw, n_kv, hp->rms_eps);
    }
    if (arch->v_norm && A->own_kv) /* each head of v, no weight: (head_dim) times ones */
        for (size_t h = g0; h < g1; h++) tkv__ops_rmsnorm(v + h * hd, v + h * hd, f->ones, hd, hp->rms_eps);
    const float *cs = (f->cs_swa && A->swa ? f->cs_swa : f->cs) + t * f->n_rot;
    if (!arch->no_rope && (!arch->nope_period || (l + 1) % arch->nope_period != 0)) {
        tkv__ops_rope(q + qo, h1 - h0, hd, A->n_rot, cs, arch->rope);
        if (A->own_kv) tkv__ops_rope(k + ko, g1 - g0, hd, A->n_rot, cs, arch->rope);
    }
    if (m->ext.attn_temp_scale != 0) { /* attention temperature: q grows with log(position / n_ctx_orig) */
        const float sc = 1 + m->ext.attn_temp_scale * logf(1 + floorf((float)b->pos[t] / (float)hp->n_ctx_orig));
        for (size_t i = qo; i < qo + qn; i++) q[i] *= sc;
    }
    if (!A->own_kv) return; /* the rows at this cell are the source layer's, written before */
    uint8_t *kr = tkv__kvrows_k(P->kv, A->kv_layer, b->cell[t]), *vr = tkv__kvrows_v(P->kv, A->kv_layer, b->cell[t]);
    if (whole) {
        tkv__fwd_store_row(P->kv, P->kv->type_k, kr, k, n_kv, scratch);
        tkv__fwd_store_row(P->kv, P->kv->type_v, vr, v, n_kv, scratch);
        return;
    }
    tkv__ops_to_f16(k + ko, kr + 2 * ko, kn);
    tkv__ops_to_f16(v + ko, vr + 2 * ko, kn);
    if (g1 == A->n_head_kv && n_kv < P->kv->n_embd_kv) { /* a hybrid's wider row: zeros after the heads */
        memset(kr + 2 * n_kv, 0, 2 * (P->kv->n_embd_kv - n_kv));
        memset(vr + 2 * n_kv, 0, 2 * (P->kv->n_embd_kv - n_kv));
    }
}

/* One token's K/V heads (nkh) go to the threads in runs of this many: a thread's share, at most TKV__ATTN_TOKENS
   (the scratch). */
static size_t head_run(size_t nkh, int nth) {
    const size_t per = (nkh + (size_t)nth - 1) / (size_t)nth;
    return per < TKV__ATTN_TOKENS ? per : TKV__ATTN_TOKENS;
}

/* The attention block of layer l: tmp (n, n_embd) = attention(attn_in) Wo, K/V into each token's cell
   (unless the layer reads another's: gemma4's KV-shared layers). */
void tkv__fwd_attn_mixer(pass *P, int ith, int nth, uint32_t l, acts_tag *tag, const float *attn_in) {
    tkv__fwd *f = P->f;
    const tkv_model *m = f->m;
    const tkv_hparams *hp = &m->hp;
    const tkv__layer *L = &m->w.layers[l];
    const tkv__attn_layer *A = shape_of(m, l);
    const tkv__fwd_batch *b = P->b;
    const uint32_t n = b->n;
    const tkv__arch *arch = m->arch;
    /* this layer's widths: q, att (n, n_q); k, v (n, n_kv); heads of hd */
    const size_t hd = A->hd, n_q = hp->n_head * hd, group = hp->n_head / A->n_head_kv;
    size_t t0, t1;
    tkv__split(n, ith, nth, &t0, &t1);
    float *scratch = f->attn_scratch + (size_t)ith * f->attn_scratch_per_thread;

    /* q, k, v = h Wq, h Wk, h Wv              (n, n_q), (n, n_kv), (n, n_kv)
       (k alone where V is K; neither where the layer reads another's cache) */
    tkv__fwd_matmul(P, ith, nth, tag, &L->wq, attn_in, n, arch->q_gate ? f->qg : f->q);
    if (A->own_kv) tkv__fwd_matmul(P, ith, nth, tag, &L->wk, attn_in, n, f->k);
    if (A->own_kv && !A->k_as_v) tkv__fwd_matmul(P, ith, nth, tag, &L->wv, attn_in, n, f->v);
    tkv__fwd_barrier_warm(P, ith, nth, &L->wo);

    const bool f16 = P->kv->type_k == TKV_TYPE_F16 && P->kv->type_v == TKV_TYPE_F16;
    const bool one16 = f16 && b->attn_float && n == 1 && P->attn->scores16 && P->attn->scores16_rows && hd % 16 == 0;
    if (one16 && arch->qk_norm != TKV__QK_NORM_WHOLE) {
        /* One token: its K/V heads in runs of as many as a thread's share (at most TKV__ATTN_TOKENS: the scratch),
           each run's rows read together (attend_one_heads). Each thread prepares its runs' heads itself (their
           RoPE, their K/V into the cell), attends over them, gates them and, where a run is whole activation
           blocks of Wo's product, quantizes them for it: two barriers fewer than one thread preparing every head
           while the others wait. */
        const size_t nkh = A->n_head_kv, run = head_run(nkh, nth);
        const tkv_type vdt = tkv__quant_vec_dot_type(L->wo.type);
        const bool acts = run * group * hd % tkv__quant_block_elems(vdt) == 0;
        for (size_t g = (size_t)ith * run; g < nkh; g += (size_t)nth * run) {
            const size_t ge = g + run < nkh ? g + run : nkh, a = g * group * hd, z = ge * group * hd;
            prep_heads(P, l, 0, g, ge, scratch);
            attend_one_heads(P, l, 0, g, ge, scratch);
            if (arch->q_gate) /* att = att * sigmoid(gate) */
                for (size_t i = a; i < z; i++) f->att[i] *= 1.0f / (1.0f + expf(-f->qgate[i]));
            if (acts) tkv__ops_quantize_acts(L->wo.type, f->att + a, 1, z - a, f->xq + tkv__ops_act_row_size(L->wo.type, a));
        }
        *tag = acts ? (acts_tag){f->att, vdt} : (acts_tag){0}; /* the q, k, v products' reads of f->xq ended above */
        tkv__fwd_barrier_warm(P, ith, nth, &L->wo);
        tkv__fwd_matmul(P, ith, nth, tag, &L->wo, f->att, n, f->tmp);
        tkv__fwd_barrier_warm(P, ith, nth, &L->w_gate);
        return;
    }

    /* biases, q/k (and v) norms, RoPE, and K/V into each token's cell */
    for (size_t t = t0; t < t1; t++) prep_heads(P, l, (uint32_t)t, 0, A->n_head_kv, scratch);
    tkv__pool_barrier(P->pool);

    /* attention, one (token, head) pair at a time          att: (n, n_q)
       Pairs are dealt round-robin: a later token attends to more cells, so
       contiguous ranges would leave the first threads waiting for the last. */
    if (one16) { /* as above, after one thread prepared every head (a whole-row q/k norm) */
        const size_t nkh = A->n_head_kv, run = head_run(nkh, nth);
        for (size_t g = (size_t)ith * run; g < nkh; g += (size_t)nth * run)
            attend_one_heads(P, l, 0, g, g + run < nkh ? g + run : nkh, scratch);
    } else if (f16 && (b->attn_float || n >= TKV__ATTN_BATCHED_MIN)) {
        /* (block of TKV__ATTN_TOKENS tokens, K/V head) units, head by head: a thread's units of one head read
           that head's K/V slices again and again, which can stay in L2 (bench-125m at 2k cells: one head's 588 KB,
           two alternating heads' 1.2 MB; pp256 @ d2048 +5% in 2 of 3 pairs); a block splits where the sequence
           changes */
        const size_t n_blocks = (n + TKV__ATTN_TOKENS - 1) / TKV__ATTN_TOKENS;
        const size_t nkh = A->n_head_kv;
        for (size_t p = (size_t)ith; p < n_blocks * nkh; p += (size_t)nth) {
            const size_t block = p % n_blocks, head = p / n_blocks, block_end = (block + 1) * TKV__ATTN_TOKENS;
            const uint32_t t_end = block_end < n ? (uint32_t)block_end : n;
            for (uint32_t t = (uint32_t)(block * TKV__ATTN_TOKENS), run; t < t_end; t += run) {
                for (run = 1; t + run < t_end && b->cells[t + run] == b->cells[t];) run++;
                attend_f16_batched(P, l, t, run, head, scratch);
            }
        }
    } else {
        for (size_t p = (size_t)ith; p < (size_t)n * hp->n_head; p += (size_t)nth) {
            const uint32_t t = (uint32_t)(p / hp->n_head);
            const size_t hq = p % hp->n_head;
            if (!f16) attend_f32(P, l, t, hq, scratch);
            else attend_f16(P, l, t, hq, scratch);
        }
    }
    tag->src = NULL; /* the barrier below ends the q, k, v products' reads of f->xq */
    tkv__pool_barrier(P->pool);
    if (arch->q_gate) { /* att = att * sigmoid(gate), once every head of the token is done */
        for (size_t t = t0; t < t1; t++)
            for (size_t i = 0; i < n_q; i++)
                f->att[t * n_q + i] *= 1.0f / (1.0f + expf(-f->qgate[t * n_q + i]));
        tkv__pool_barrier(P->pool);
    }

    /* x = x + att Wo                                       (n, n_embd) */
    tkv__fwd_matmul(P, ith, nth, tag, &L->wo, f->att, n, f->tmp);
    tkv__pool_barrier(P->pool);
}
