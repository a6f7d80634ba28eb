/*
 * oracle.c — the llama forward pass in double precision (oracle.h).
 *
 * For each token t at position t, x its residual stream (n_embd):
 *   x = token_embd[tok]
 *   per layer: h = rmsnorm(x) attn_norm; q, k, v = Wq h, Wk h, Wv h;
 *     rotate pairs (2i, 2i+1) of each head of q and k by t base^(-2i/n_rot);
 *     per query head, a = softmax_{j<=t}(q.k_j / sqrt(hd)) v_j over the K/V
 *     head it shares (n_head / n_head_kv query heads per K/V head);
 *     x += Wo a; h = rmsnorm(x) ffn_norm; x += Wdown (silu(Wgate h) * Wup h)
 *   logits = Wout (rmsnorm(x) output_norm)
 */
#include "oracle.h"

#include "testutil.h"

#include "compute/quant/quant.h"
#include "model/model.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct mat {
    size_t rows, cols;
    double *w; /* (rows, cols) */
} mat;

typedef struct olayer {
    mat attn_norm, wq, wk, wv, wo, ffn_norm, w_gate, w_up, w_down;
} olayer;

struct oracle {
    size_t n_embd, n_head, n_head_kv, hd, n_rot, n_ff, n_vocab, n_layer;
    double eps, base, freq_scale;
    mat embd, out_norm, output;
    olayer *layers;
};

/* A tensor's values in double, through the library's dequantizer of its type (F32 vectors too). */
static mat widen(const tkv__tensor *t) {
    assert_non_null(t->data);
    mat m = {t->ne1 ? t->ne1 : 1, t->ne0, NULL};
    m.w = malloc(m.rows * m.cols * sizeof *m.w);
    float *row = malloc(m.cols * sizeof *row);
    assert_true(m.w && row);
    for (size_t r = 0; r < m.rows; r++) {
        tkv__quant_dequantize_row(t->type, (const uint8_t *)t->data + r * t->row_size, row, m.cols);
        for (size_t c = 0; c < m.cols; c++) m.w[r * m.cols + c] = row[c];
    }
    free(row);
    return m;
}

oracle *oracle_new(const tkv_model *m) {
    const tkv_hparams *hp = &m->hp;
    if (strcmp(m->arch->name, "llama") || m->w.rope_freqs.data || m->ext.yarn || m->ext.attn_softcap > 0 ||
        m->ext.final_softcap > 0 || m->ext.rope_attn_factor != 1.0f || m->ext.attn_temp_scale != 0)
        fail_msg("oracle: only a plain llama (this is %s)", m->arch->name);
    oracle *o = calloc(1, sizeof *o);
    assert_non_null(o);
    o->n_embd = hp->n_embd, o->n_head = hp->n_head, o->n_head_kv = hp->n_head_kv, o->hd = hp->head_dim;
    o->n_rot = hp->n_rot, o->n_ff = hp->n_ff, o->n_vocab = hp->n_vocab, o->n_layer = hp->n_layer;
    o->eps = hp->rms_eps, o->base = hp->rope_freq_base, o->freq_scale = hp->rope_freq_scale;
    o->embd = widen(&m->w.tok_embd);
    o->out_norm = widen(&m->w.out_norm);
    o->output = widen(&m->w.output);
    o->layers = calloc(o->n_layer, sizeof *o->layers);
    assert_non_null(o->layers);
    for (size_t l = 0; l < o->n_layer; l++) {
        const tkv__layer *L = &m->w.layers[l];
        if (L->bq.data || L->bo.data || L->q_norm.data) fail_msg("oracle: layer %zu has biases or q/k norms", l);
        olayer *y = &o->layers[l];
        y->attn_norm = widen(&L->attn_norm), y->wq = widen(&L->wq), y->wk = widen(&L->wk), y->wv = widen(&L->wv);
        y->wo = widen(&L->wo), y->ffn_norm = widen(&L->ffn_norm), y->w_gate = widen(&L->w_gate);
        y->w_up = widen(&L->w_up), y->w_down = widen(&L->w_down);
    }
    return o;
}

void oracle_free(oracle *o) {
    if (!o) return;
    for (size_t l = 0; l < o->n_layer; l++) {
        olayer *y = &o->layers[l];
        mat *ms[] = {&y->attn_norm, &y->wq, &y->wk, &y->wv, &y->wo, &y->ffn_norm, &y->w_gate, &y->w_up, &y->w_down};
        for (size_t i = 0; i < sizeof ms / sizeof ms[0]; i++) free(ms[i]->w);
    }
    free(o->layers);
    free(o->embd.w), free(o->out_norm.w), free(o->output.w);
    free(o);
}

/* y (rows) = W x (cols) */
static void matvec(const mat *W, const double *x, double *y) {
    for (size_t r = 0; r < W->rows; r++) {
        const double *w = W->w + r * W->cols;
        double s = 0;
        for (size_t c = 0; c < W->cols; c++) s += w[c] * x[c];
        y[r] = s;
    }
}

static void rmsnorm(double *y, const double *x, const mat *g, size_t n, double eps) {
    double ss = 0;
    for (size_t i = 0; i < n; i++) ss += x[i] * x[i];
    const double r = 1.0 / sqrt(ss / (double)n + eps);
    for (size_t i = 0; i < n; i++) y[i] = x[i] * r * g->w[i];
}

/* Each head's pairs (2i, 2i+1), i < n_rot / 2, turned by pos base^(-2i/n_rot). */
static void rope(const oracle *o, double *v, size_t n_heads, size_t pos) {
    for (size_t h = 0; h < n_heads; h++)
        for (size_t i = 0; i < o->n_rot / 2; i++) {
            const double th = o->freq_scale * (double)pos * pow(o->base, -2.0 * (double)i / (double)o->n_rot);
            const double c = cos(th), s = sin(th);
            double *a = v + h * o->hd + 2 * i, x0 = a[0], x1 = a[1];
            a[0] = x0 * c - x1 * s;
            a[1] = x0 * s + x1 * c;
        }
}

void oracle_forward(const oracle *o, const tkv_token *tok, size_t n, double *logits) {
    const size_t E = o->n_embd, nq = o->n_head * o->hd, nkv = o->n_head_kv * o->hd, group = o->n_head / o->n_head_kv;
    double *x = malloc(n * E * sizeof *x), *h = malloc(E * sizeof *h), *q = malloc(nq * sizeof *q);
    double *K = malloc(n * nkv * sizeof *K), *V = malloc(n * nkv * sizeof *V), *a = malloc(nq * sizeof *a);
    double *tmp = malloc(E * sizeof *tmp), *g = malloc(o->n_ff * sizeof *g), *u = malloc(o->n_ff * sizeof *u);
    double *w = malloc(n * sizeof *w);
    assert_true(x && h && q && K && V && a && tmp && g && u && w);
    for (size_t t = 0; t < n; t++) memcpy(x + t * E, o->embd.w + (size_t)tok[t] * E, E * sizeof *x);
    for (size_t l = 0; l < o->n_layer; l++) {
        const olayer *L = &o->layers[l];
        for (size_t t = 0; t < n; t++) { /* causal: token t needs K/V of 0..t only, written before it */
            double *xt = x + t * E;
            rmsnorm(h, xt, &L->attn_norm, E, o->eps);
            matvec(&L->wq, h, q);
            matvec(&L->wk, h, K + t * nkv);
            matvec(&L->wv, h, V + t * nkv);
            rope(o, q, o->n_head, t);
            rope(o, K + t * nkv, o->n_head_kv, t);
            for (size_t hq = 0; hq < o->n_head; hq++) {
                const size_t off = hq / group * o->hd;
                const double *qh = q + hq * o->hd;
                double mx = -INFINITY, sum = 0;
                for (size_t j = 0; j <= t; j++) {
                    double s = 0;
                    for (size_t i = 0; i < o->hd; i++) s += qh[i] * K[j * nkv + off + i];
                    w[j] = s / sqrt((double)o->hd);
                    if (w[j] > mx) mx = w[j];
                }
                for (size_t j = 0; j <= t; j++) sum += w[j] = exp(w[j] - mx);
                double *ah = a + hq * o->hd;
                for (size_t i = 0; i < o->hd; i++) ah[i] = 0;
                for (size_t j = 0; j <= t; j++)
                    for (size_t i = 0; i < o->hd; i++) ah[i] += w[j] / sum * V[j * nkv + off + i];
            }
            matvec(&L->wo, a, tmp);
            for (size_t i = 0; i < E; i++) xt[i] += tmp[i];
            rmsnorm(h, xt, &L->ffn_norm, E, o->eps);
            matvec(&L->w_gate, h, g);
            matvec(&L->w_up, h, u);
            for (size_t i = 0; i < o->n_ff; i++) g[i] = g[i] / (1.0 + exp(-g[i])) * u[i];
            matvec(&L->w_down, g, tmp);
            for (size_t i = 0; i < E; i++) xt[i] += tmp[i];
        }
    }
    for (size_t t = 0; t < n; t++) {
        rmsnorm(h, x + t * E, &o->out_norm, E, o->eps);
        matvec(&o->output, h, logits + t * o->n_vocab);
    }
    free(x), free(h), free(q), free(K), free(V), free(a), free(tmp), free(g), free(u), free(w);
}
