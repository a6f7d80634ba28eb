/*
 * test_forward.c — the forward pass against a naive transformer written
 * here, in double precision, straight from the definitions (see the comment
 * at the top of src/model/forward.c): llama and qwen2 (Q/K/V biases, NEOX RoPE),
 * grouped-query attention, tied embeddings, RoPE frequency factors. Tiny F32
 * models made by the test; the engine runs with an F32 KV cache so the only
 * differences are float rounding.
 */
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct naive {
    tkv_model *m;
    tkv_hparams hp;
    bool neox, biases;
} naive;

static const float *tensor(const naive *nv, const char *name) {
    tkv_tensor_info t;
    if (tkv_model_tensor_find(nv->m, name, &t) != TKV_OK) return NULL;
    assert_int_equal(t.type, TKV_TYPE_F32);
    return t.data;
}

static const float *layer_tensor(const naive *nv, unsigned l, const char *suffix) {
    char name[64];
    snprintf(name, sizeof name, "blk.%u.%s", l, suffix);
    return tensor(nv, name);
}

/* y (rows) = W x, W stored as rows of `cols` */
static void matvec(double *y, const float *W, const double *x, size_t rows, size_t cols) {
    for (size_t r = 0; r < rows; r++) {
        double s = 0;
        for (size_t k = 0; k < cols; k++) s += (double)W[r * cols + k] * x[k];
        y[r] = s;
    }
}

static void rmsnorm(double *y, const double *x, const float *w, size_t n, double eps) {
    double ss = 0;
    for (size_t i = 0; i < n; i++) ss += x[i] * x[i];
    double scale = 1.0 / sqrt(ss / (double)n + eps);
    for (size_t i = 0; i < n; i++) y[i] = x[i] * scale * w[i];
}

static void rope(const naive *nv, double *x, size_t n_head, int pos) {
    const size_t hd = nv->hp.head_dim, n_rot = nv->hp.n_rot;
    const float *ff = tensor(nv, "rope_freqs.weight");
    for (size_t h = 0; h < n_head; h++)
        for (size_t i = 0; i < n_rot / 2; i++) {
            double theta = pos * pow(nv->hp.rope_freq_base, -2.0 * (double)i / (double)n_rot) * nv->hp.rope_freq_scale;
            if (ff) theta /= ff[i];
            size_t a = h * hd + (nv->neox ? i : 2 * i), b = h * hd + (nv->neox ? i + n_rot / 2 : 2 * i + 1);
            double x0 = x[a], x1 = x[b];
            x[a] = x0 * cos(theta) - x1 * sin(theta);
            x[b] = x0 * sin(theta) + x1 * cos(theta);
        }
}

/* logits (n, n_vocab) of one sequence of n tokens */
static void naive_forward(const naive *nv, const tkv_token *tok, size_t n, double *logits) {
    const tkv_hparams *hp = &nv->hp;
    const size_t E = hp->n_embd, hd = hp->head_dim, Q = hp->n_head * hd, KV = hp->n_head_kv * hd, F = hp->n_ff;
    double *x = calloc(n * E, sizeof *x), *K = calloc(n * KV, sizeof *K), *V = calloc(n * KV, sizeof *V);
    double *h = malloc(E * sizeof *h), *q = malloc(Q * sizeof *q), *att = malloc(Q * sizeof *att), *o = malloc(E * sizeof *o);
    double *g = malloc(F * sizeof *g), *u = malloc(F * sizeof *u), *sc = malloc(n * sizeof *sc);
    const float *embd = tensor(nv, "token_embd.weight");
    for (size_t t = 0; t < n; t++)
        for (size_t i = 0; i < E; i++) x[t * E + i] = embd[(size_t)tok[t] * E + i];
    for (unsigned l = 0; l < hp->n_layer; l++) {
        /* each token in order: its K/V are ready before later tokens attend */
        for (size_t t = 0; t < n; t++) {
            rmsnorm(h, x + t * E, layer_tensor(nv, l, "attn_norm.weight"), E, hp->rms_eps);
            matvec(q, layer_tensor(nv, l, "attn_q.weight"), h, Q, E);
            matvec(K + t * KV, layer_tensor(nv, l, "attn_k.weight"), h, KV, E);
            matvec(V + t * KV, layer_tensor(nv, l, "attn_v.weight"), h, KV, E);
            if (nv->biases) {
                const float *bq = layer_tensor(nv, l, "attn_q.bias"), *bk = layer_tensor(nv, l, "attn_k.bias"),
                            *bv = layer_tensor(nv, l, "attn_v.bias");
                for (size_t i = 0; i < Q; i++) q[i] += bq[i];
                for (size_t i = 0; i < KV; i++) K[t * KV + i] += bk[i], V[t * KV + i] += bv[i];
            }
            rope(nv, q, hp->n_head, (int)t);
            rope(nv, K + t * KV, hp->n_head_kv, (int)t);
            for (size_t hq = 0; hq < hp->n_head; hq++) {
                size_t hk = hq / (hp->n_head / hp->n_head_kv);
                double mx = -INFINITY, sum = 0;
                for (size_t j = 0; j <= t; j++) {
                    double s = 0;
                    for (size_t i = 0; i < hd; i++) s += q[hq * hd + i] * K[j * KV + hk * hd + i];
                    sc[j] = s / sqrt((double)hd);
                    if (sc[j] > mx) mx = sc[j];
                }
                for (size_t j = 0; j <= t; j++) sum += sc[j] = exp(sc[j] - mx);
                for (size_t i = 0; i < hd; i++) {
                    double a = 0;
                    for (size_t j = 0; j <= t; j++) a += sc[j] / sum * V[j * KV + hk * hd + i];
                    att[hq * hd + i] = a;
                }
            }
            matvec(o, layer_tensor(nv, l, "attn_output.weight"), att, E, Q);
            for (size_t i = 0; i < E; i++) x[t * E + i] += o[i];
        }
        for (size_t t = 0; t < n; t++) {
            rmsnorm(h, x + t * E, layer_tensor(nv, l, "ffn_norm.weight"), E, hp->rms_eps);
            matvec(g, layer_tensor(nv, l, "ffn_gate.weight"), h, F, E);
            matvec(u, layer_tensor(nv, l, "ffn_up.weight"), h, F, E);
            for (size_t i = 0; i < F; i++) g[i] = g[i] / (1 + exp(-g[i])) * u[i];
            matvec(o, layer_tensor(nv, l, "ffn_down.weight"), g, E, F);
            for (size_t i = 0; i < E; i++) x[t * E + i] += o[i];
        }
    }
    const float *out = tensor(nv, "output.weight");
    if (!out) out = embd; /* tied */
    for (size_t t = 0; t < n; t++) {
        rmsnorm(h, x + t * E, tensor(nv, "output_norm.weight"), E, hp->rms_eps);
        matvec(logits + t * hp->n_vocab, out, h, hp->n_vocab, E);
    }
    free(x), free(K), free(V), free(h), free(q), free(att), free(o), free(g), free(u), free(sc);
}

static void compare(const tu_tiny_opts *o, bool neox, bool biases) {
    uint8_t *img;
    size_t size;
    tu_tiny_model(o, &img, &size);
    naive nv = {.neox = neox, .biases = biases};
    assert_int_equal(tkv_model_load_from_memory(img, size, NULL, &nv.m), TKV_OK);
    assert_int_equal(tkv_model_hparams(nv.m, &nv.hp), TKV_OK);
    enum { N = 7 };
    tkv_token tok[N] = {1, 5, 9, 2, 15, 0, 7};
    double *want = malloc(N * nv.hp.n_vocab * sizeof *want);
    naive_forward(&nv, tok, N, want);

    tkv_context_params p = tkv_context_default_params();
    p.n_cells = 16;
    p.n_threads = 2;
    p.kv_type = TKV_TYPE_F32;
    tkv_context *ctx;
    assert_int_equal(tkv_context_create(nv.m, &p, &ctx), TKV_OK);
    tkv_pos pos[N];
    tkv_seq seq[N] = {0};
    bool all[N];
    for (int i = 0; i < N; i++) pos[i] = i, all[i] = true;
    tkv_batch b = {N, tok, pos, seq, all};
    assert_int_equal(tkv_decode(ctx, &b), TKV_OK);
    for (size_t t = 0; t < N; t++) {
        const float *got = tkv_get_logits(ctx, t);
        for (size_t k = 0; k < nv.hp.n_vocab; k++) {
            double ref = want[t * nv.hp.n_vocab + k];
            if (!(fabs(got[k] - ref) <= 1e-4 * (1 + fabs(ref))))
                fail_msg("%s: token %zu logit %zu: %g, naive %g", o && o->arch ? o->arch : "llama", t, k, got[k], ref);
        }
    }
    tkv_context_free(ctx);
    tkv_model_free(nv.m);
    free(want);
    free(img);
}

static void test_llama(void **state) {
    (void)state;
    compare(NULL, false, false);
}

static void test_llama_tied_and_rope_freqs(void **state) {
    (void)state;
    compare(&(tu_tiny_opts){.no_output = 1, .rope_freqs = 1}, false, false);
}

static void test_qwen2(void **state) {
    (void)state;
    compare(&(tu_tiny_opts){.arch = "qwen2"}, true, true);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_llama),
        cmocka_unit_test(test_llama_tied_and_rope_freqs),
        cmocka_unit_test(test_qwen2),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
