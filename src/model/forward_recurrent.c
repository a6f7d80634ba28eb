/*
 * forward_recurrent.c — the forward pass's mixers of the layers that are not
 * attention: LFM2's gated short conv (its state in the cells' K rows),
 * Qwen3.5's gated delta net and Mamba-2 (a recurrent state per sequence,
 * kept by the cache's checkpoints), and Nemotron-H's MLP layers. Each runs
 * the per-token math of its own file (shortconv.c, deltanet.c, mamba2.c)
 * over every sequence's tokens of the batch, in position order.
 */
#include "forward_impl.h"
#include "deltanet.h"
#include "mamba2.h"
#include "shortconv.h"

#include "compute/ops.h"

#include <math.h>
#include <string.h>

/*
 * The gated short convolution of layer l (lfm2), for each token t at
 * position p of the batch:
 *
 *   B, C, x = h Win                                  (n_embd) each
 *   Bx = B * x                        into t's cell, as attention stores K
 *   y = sum over taps k of w[k] Bx_{p - L + 1 + k}   (zeros before position 0)
 *   tmp = (C * y) Wout                               (n_embd)
 *
 * Its only state is the last L - 1 rows of Bx, which live in the cells of
 * the sequence's list: a cached prefix of any length carries what the conv
 * needs, and earlier tokens of the same batch are staged cells of that list.
 * A token's own row is its fresh float Bx; earlier rows come from the cache
 * (in its K type), whichever batch wrote them, so the result does not
 * depend on how the tokens were batched.
 */
void tkv__fwd_conv_mixer(pass *P, int ith, int nth, uint32_t l, acts_tag *tag, const float *in) {
    tkv__fwd *f = P->f;
    const tkv__layer *L = &f->m->w.layers[l];
    const tkv__fwd_batch *b = P->b;
    const tkv__kvrows *kv = P->kv;
    const uint32_t n = b->n;
    const size_t E = f->n_embd, W = kv->n_embd_kv, taps = L->conv_w.ne0;
    float *row = f->attn_scratch + (size_t)ith * f->attn_scratch_per_thread; /* (W) a row of Bx */
    size_t t0, t1;
    tkv__split(n, ith, nth, &t0, &t1);

    /* bcx = h Win                                         (n, 3 n_embd) */
    tkv__fwd_matmul(P, ith, nth, tag, &L->conv_in, in, n, f->bcx);
    tkv__pool_barrier(P->pool);
    /* Bx into each token's cell                            (W) per cell */
    for (size_t t = t0; t < t1; t++) {
        const float *B = f->bcx + t * 3 * E, *x = B + 2 * E;
        for (size_t i = 0; i < E; i++) row[i] = B[i] * x[i];
        tkv__fwd_store_row(kv, kv->type_k, tkv__kvrows_k(kv, l, b->cell[t]), row, E, row + W);
    }
    tkv__pool_barrier(P->pool); /* later tokens of the batch read these rows */
    /* h = C * y                                           (n, n_embd) */
    const float *w = L->conv_w.data; /* (n_embd, taps): channel c's taps at w[c taps], oldest first */
    for (size_t t = t0; t < t1; t++) {
        tkv__shortconv_mix(kv, l, b->cells[t], b->pos[t], f->bcx + t * 3 * E, w, taps, E, f->h + t * E, row);
    }
    tag->src = NULL; /* h now holds C * y, not the normed input */
    tkv__pool_barrier(P->pool);
    /* tmp = h Wout                                        (n, n_embd) */
    tkv__fwd_matmul(P, ith, nth, tag, &L->conv_out, f->h, n, f->tmp);
    tkv__pool_barrier(P->pool);
}

/* A causal conv's input rows: batch token t's row is rows + t stride; the run's window holds the d_conv - 1
   rows before the batch (width each, oldest first). */
typedef struct conv_src {
    const float *rows;
    size_t stride, width;
    uint32_t d_conv;
} conv_src;

/* The input row of the token `back` steps before batch token t in its run: a batch row while the run
   reaches back that far, else a row of the window. */
static const float *conv_row(const tkv__fwd *f, const conv_src *c, const float *window, uint32_t t, uint32_t back) {
    if (back <= f->ridx[t]) {
        int32_t u = (int32_t)t;
        for (uint32_t k = 0; k < back; k++) u = f->prev[u];
        return c->rows + (size_t)u * c->stride;
    }
    return window + (size_t)(c->d_conv - 1 - (back - f->ridx[t])) * c->width;
}

/* The d_conv input rows of batch token t, oldest first. */
static void conv_rows(const tkv__fwd *f, const conv_src *c, const float *window, uint32_t t, const float **rows) {
    for (uint32_t k = 0; k < c->d_conv; k++) rows[k] = conv_row(f, c, window, t, c->d_conv - 1 - k);
}

/* Write the window after batch token t (its last d_conv - 1 input rows) into dst. */
static void window_after(const tkv__fwd *f, const conv_src *c, const float *window, uint32_t t, float *dst) {
    for (uint32_t r = 0; r + 1 < c->d_conv; r++) /* row r is d_conv - 2 - r steps back */
        memcpy(dst + (size_t)r * c->width, conv_row(f, c, window, t, c->d_conv - 2 - r), c->width * sizeof *dst);
}

/* Run r's window moves on past its last token of the batch (through scratch: it overwrites what it
   reads), and every token asked for gets a copy of the window after it (all threads must be done reading
   the windows). Returns whether the run has a token here. */
static bool move_window(const pass *P, const conv_src *c, uint32_t r, size_t off, float *scratch) {
    const tkv__fwd_batch *b = P->b;
    float *window = b->state[r] + off;
    uint32_t last = 0;
    bool any = false;
    for (uint32_t t = 0; t < b->n; t++) {
        if (b->run[t] != r) continue;
        if (b->snap && b->snap[t]) window_after(P->f, c, window, t, b->snap[t] + off);
        last = t, any = true;
    }
    if (!any) return false;
    window_after(P->f, c, window, last, scratch);
    memcpy(window, scratch, (size_t)(c->d_conv - 1) * c->width * sizeof *scratch);
    return true;
}

/*
 * The gated delta net of layer l (qwen35; deltanet.h has the math), for
 * every run (one sequence's tokens) of the batch:
 *
 *   qkv, z, beta, alpha = h Wqkv, h Wz, h Wbeta, h Walpha
 *   c = conv(qkv over the run's last d_conv tokens)        token by token, in parallel
 *   o = the recurrence over each (run, v head), in position order
 *   o = gated norm(o, z);  tmp = o Wout                     (n, n_embd)
 *
 * The run's state (its conv window and every head's S) is read before the
 * first token and left after the last; tokens asked for get a copy of the
 * state after them (checkpoints). A token's arithmetic does not depend on
 * the batch: earlier tokens come from the batch or the window alike.
 */
void tkv__fwd_delta_mixer(pass *P, int ith, int nth, uint32_t l, acts_tag *tag, const float *in) {
    tkv__fwd *f = P->f;
    const tkv_model *m = f->m;
    const tkv__layer *L = &m->w.layers[l];
    const tkv__fwd_batch *b = P->b;
    const tkv__delta_dims *d = &m->ext.delta;
    const uint32_t n = b->n, CH = d->channels, inner = d->n_v * d->d_v;
    const size_t off = tkv__model_state_off(&m->ext, l);
    size_t t0, t1;
    tkv__split(n, ith, nth, &t0, &t1);

    /* qkv (n, channels), z (n, inner), beta and alpha (n, n_v) */
    tkv__fwd_matmul(P, ith, nth, tag, &L->dn_qkv, in, n, f->dqkv);
    tkv__fwd_matmul(P, ith, nth, tag, &L->dn_z, in, n, f->dz);
    tkv__fwd_matmul(P, ith, nth, tag, &L->dn_beta, in, n, f->dbeta);
    tkv__fwd_matmul(P, ith, nth, tag, &L->dn_alpha, in, n, f->dalpha);
    tkv__pool_barrier(P->pool);

    /* c = silu(conv(qkv)), q and k L2-normed                (n, channels) */
    const conv_src src = {f->dqkv, CH, CH, d->d_conv};
    for (size_t t = t0; t < t1; t++) {
        const float *rows[16];
        conv_rows(f, &src, tkv__delta_window(d, b->state[b->run[t]] + off), (uint32_t)t, rows);
        tkv__deltanet_conv(d, L->dn_conv.data, rows, m->hp.rms_eps, f->dc + t * CH);
    }
    tkv__pool_barrier(P->pool); /* every read of the windows is done */

    /* the recurrence, one (run, v head) at a time; head 0's owner also moves the run's window */
    const float *A = L->dn_a.data, *dt = L->dn_dt.data;
    float *scratch = f->attn_scratch + (size_t)ith * f->attn_scratch_per_thread;
    for (size_t p = (size_t)ith; p < (size_t)b->n_runs * d->n_v; p += (size_t)nth) {
        const uint32_t r = (uint32_t)(p / d->n_v), h = (uint32_t)(p % d->n_v), kh = h % d->n_k;
        float *S = tkv__delta_S(d, b->state[r] + off, h);
        for (uint32_t t = 0; t < n; t++) {
            if (b->run[t] != r) continue;
            const float *c = f->dc + (size_t)t * CH;
            const float *q = c + (size_t)kh * d->d_k, *k = c + (size_t)(d->n_k + kh) * d->d_k;
            const float *v = c + (size_t)2 * d->n_k * d->d_k + (size_t)h * d->d_v;
            const float a = f->dalpha[(size_t)t * d->n_v + h] + dt[h];
            const float softplus = a > 20.0f ? a : log1pf(expf(a));
            const float beta = 1.0f / (1.0f + expf(-f->dbeta[(size_t)t * d->n_v + h]));
            tkv__deltanet_step(d, S, q, k, v, A[h] * softplus, beta, f->dout + (size_t)t * inner + (size_t)h * d->d_v);
            if (b->snap && b->snap[t])
                memcpy(tkv__delta_S(d, b->snap[t] + off, h), S, (size_t)d->d_k * d->d_v * sizeof *S);
        }
        if (h == 0) move_window(P, &src, r, off, scratch);
    }
    tkv__pool_barrier(P->pool);

    /* o = rmsnorm(o) * ssm_norm * silu(z), per v head       (n, inner) */
    for (size_t t = t0; t < t1; t++)
        tkv__deltanet_gate_norm(d, f->dout + t * inner, f->dz + t * inner, L->dn_norm.data, m->hp.rms_eps);
    tag->src = NULL;
    tkv__pool_barrier(P->pool);
    /* tmp = o Wout                                          (n, n_embd) */
    tkv__fwd_matmul(P, ith, nth, tag, &L->dn_out, f->dout, n, f->tmp);
    tkv__pool_barrier(P->pool);
}

/*
 * Mamba-2 layer l (granitehybrid, nemotron_h; mamba2.h has the math), for
 * every run of the batch:
 *
 *   z, xBC, dt = h Win                                     (n, in_proj)
 *   xBC = silu(conv(xBC) + bias)                           token by token, in parallel
 *   y = the scan over each (run, head), in position order, + D x
 *   y = grouped rmsnorm(y * silu(z));  tmp = y Wout        (n, n_embd)
 *
 * The run's state (its conv window and every head's S) is read before the
 * first token and left after the last, as in delta_mixer.
 */
void tkv__fwd_mamba_mixer(pass *P, int ith, int nth, uint32_t l, acts_tag *tag, const float *in) {
    tkv__fwd *f = P->f;
    const tkv_model *m = f->m;
    const tkv__layer *L = &m->w.layers[l];
    const tkv__fwd_batch *b = P->b;
    const tkv__mamba_dims *d = &m->ext.mamba;
    const uint32_t n = b->n, CH = d->channels, DI = d->d_inner, IP = d->in_proj;
    const size_t off = tkv__model_state_off(&m->ext, l), gs = (size_t)d->n_group * d->d_state;
    size_t t0, t1;
    tkv__split(n, ith, nth, &t0, &t1);

    /* z, xBC, dt = h Win                                    (n, in_proj) */
    tkv__fwd_matmul(P, ith, nth, tag, &L->m_in, in, n, f->mz);
    tkv__pool_barrier(P->pool);
    /* xBC = silu(conv(xBC) + bias)                          (n, channels) */
    const conv_src src = {f->mz + DI, IP, CH, d->d_conv};
    for (size_t t = t0; t < t1; t++) {
        const float *rows[16];
        conv_rows(f, &src, b->state[b->run[t]] + off, (uint32_t)t, rows);
        tkv__mamba_conv(d, L->m_conv.data, L->m_conv_b.data, rows, f->mc + t * CH);
    }
    tkv__pool_barrier(P->pool); /* every read of the windows is done */

    /* the scan, one (run, head) at a time; head 0's owner also moves the run's window */
    const float *A = L->m_a.data, *D = L->m_d.data, *dt_b = L->m_dt.data;
    float *scratch = f->attn_scratch + (size_t)ith * f->attn_scratch_per_thread;
    for (size_t p = (size_t)ith; p < (size_t)b->n_runs * d->n_head; p += (size_t)nth) {
        const uint32_t r = (uint32_t)(p / d->n_head), h = (uint32_t)(p % d->n_head);
        const uint32_t g = h / (d->n_head / d->n_group);
        float *S = tkv__mamba_S(d, b->state[r] + off, h);
        for (uint32_t t = 0; t < n; t++) {
            if (b->run[t] != r) continue;
            const float *xbc = f->mc + (size_t)t * CH;
            const float *x = xbc + (size_t)h * d->head_dim, *B = xbc + DI + (size_t)g * d->d_state;
            const float *C = xbc + DI + gs + (size_t)g * d->d_state;
            const float dt = f->mz[(size_t)t * IP + DI + CH + h];
            tkv__mamba_step(d, S, x, B, C, dt, dt_b[h], A[h], D[h], f->my + (size_t)t * DI + (size_t)h * d->head_dim);
            if (b->snap && b->snap[t])
                memcpy(tkv__mamba_S(d, b->snap[t] + off, h), S, (size_t)d->head_dim * d->d_state * sizeof *S);
        }
        if (h == 0) move_window(P, &src, r, off, scratch);
    }
    tkv__pool_barrier(P->pool);

    /* y = grouped rmsnorm(y * silu(z)) * ssm_norm           (n, d_inner) */
    for (size_t t = t0; t < t1; t++) tkv__mamba_gate_norm(d, f->my + t * DI, f->mz + t * IP, L->m_norm.data, m->hp.rms_eps);
    tag->src = NULL;
    tkv__pool_barrier(P->pool);
    /* tmp = y Wout                                          (n, n_embd) */
    tkv__fwd_matmul(P, ith, nth, tag, &L->m_out, f->my, n, f->tmp);
    tkv__pool_barrier(P->pool);
}
