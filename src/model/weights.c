/*
 * weights.c — binding a model's tensors by role, checking their types.
 */
#include "weights.h"
#include "tensors.h"

#include "base/alloc.h"
#include "base/error.h"
#include "compute/cpus.h"
#include "compute/kernels.h"
#include "compute/ops.h"
#include "compute/quant/quant.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

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
                                  "IQ4_NL, IQ4_XS, MXFP4, TQ1_0, TQ2_0, IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S, "
                                  "IQ3_XXS, IQ3_S"
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

typedef struct bind_ctx {
    const tkv__gguf *g;
    tkv__weights *w;
} bind_ctx;

/* tkv__tensors_each: bind one tensor where the list says (fused ones after their layer) */
static tkv_status bind_one(const tkv__tensor_need *n, void *ud) {
    bind_ctx *c = ud;
    if (n->bind == TKV__BIND_VIEWS) return TKV_OK;
    char *base = n->layer < 0 ? (char *)c->w : (char *)&c->w->layers[n->layer];
    return bind(c->g, n->name, n->matrix, n->optional, (tkv__tensor *)(base + n->bind));
}

tkv_status tkv__weights_bind(const tkv__gguf *g, const tkv_hparams *hp, const tkv__arch *arch, const tkv__layout *lay,
                             tkv__weights *w) {
    memset(w, 0, sizeof *w);
    w->layers = tkv__calloc(hp->n_layer, sizeof *w->layers);
    if (!w->layers) return tkv__fail(TKV_ERR_NOMEM, "out of memory for %u layers", hp->n_layer);
    bind_ctx c = {g, w};
    tkv_status st = tkv__tensors_each(arch, hp, lay, bind_one, &c);
    for (uint32_t l = 0; l < hp->n_layer && arch->fused && !st; l++) st = bind_fused(g, hp, l, &w->layers[l]);
    if (!st && !w->output.data) w->output = w->tok_embd;
    if (st) tkv__weights_free(w);
    return st;
}

/* The matrices of a layer, in one fixed order. */
enum { LAYER_MATRICES = 22 };
static tkv__tensor *layer_matrix(tkv__layer *L, size_t k) {
    tkv__tensor *m[LAYER_MATRICES] = {&L->wq,       &L->wk,       &L->wv,       &L->wo,       &L->w_gate,  &L->w_up,
                                      &L->w_down,   &L->router,   &L->exp_gate, &L->exp_up,   &L->exp_down,
                                      &L->conv_in,  &L->conv_out, &L->dn_qkv,   &L->dn_z,     &L->dn_beta,
                                      &L->dn_alpha, &L->dn_out,   &L->m_in,     &L->m_out,    &L->inp_gate,
                                      &L->proj};
    return m[k];
}

/* How many matrices the weights have, in matrix_at's order. */
static size_t n_matrices(const tkv_hparams *hp) { return 2 + (size_t)hp->n_layer * LAYER_MATRICES; }

/* The i-th matrix of the weights, in one fixed order: the output, the per-layer projection, each layer's. */
static tkv__tensor *matrix_at(tkv__weights *w, size_t i) {
    if (i < 2) return i == 0 ? &w->output : &w->pl_proj;
    return layer_matrix(&w->layers[(i - 2) / LAYER_MATRICES], (i - 2) % LAYER_MATRICES);
}

static bool packable(const tkv__tensor *t) {
    return t->data && t->ne1 > 0 && t->ne0 <= TKV__GEMM_MAX_N && tkv__ops_packed_ok(t->type);
}

/* The copies, shared out over the CPUs this process may use: the load's
   first touch of the packed memory (page faults, the kernel's zeroing) and
   the copies take about 2.5 ms per MiB on one thread here. */
typedef struct pack_job {
    tkv__tensor **m;
    size_t nm;
    const tkv__gguf *g;
    atomic_size_t next;
} pack_job;

static void *pack_worker(void *arg) {
    pack_job *j = arg;
    for (size_t i; (i = atomic_fetch_add(&j->next, 1)) < j->nm;) {
        tkv__tensor *t = j->m[i];
        if (!t) continue;
        tkv__pack_rows(t->type, t->data, t->ne0, t->ne1, (void *)(uintptr_t)t->packed);
        /* the packed copy serves the products: without this the process
           would hold both (twice the weights in its RSS) */
        tkv__gguf_release(j->g, t->data, t->ne1 * t->row_size);
    }
    return NULL;
}

static void pack_all(tkv__tensor **m, size_t nm, const tkv__gguf *g) {
    enum { MAXT = 16 };
    tkv__cpus c;
    tkv__cpus_detect("", NULL, 0, &c);
    pack_job j = {m, nm, g, 0};
    pthread_t th[MAXT];
    int n = 0;
    while (n < c.threads - 1 && n < MAXT && pthread_create(&th[n], NULL, pack_worker, &j) == 0) n++;
    pack_worker(&j); /* this thread too; all of it when no thread could start */
    for (int k = 0; k < n; k++) pthread_join(th[k], NULL);
}

/* Whether t's packed layout is larger than its rows by more than an eighth (the IQ1-IQ3 ones; the others' groups
   round them up by a few percent at most). */
static bool enlarges(const tkv__tensor *t) {
    const size_t rows = t->ne1 * t->row_size;
    return tkv__pack_bytes(t->type, t->ne0, t->ne1) > rows + rows / 8;
}

tkv_status tkv__weights_pack(tkv__weights *w, const tkv_hparams *hp, const tkv__gguf *g, bool huge, size_t room) {
    const size_t nm = n_matrices(hp);
    tkv__tensor **m = tkv__calloc(nm, sizeof *m); /* the matrices to pack; NULL: the file's rows serve it */
    if (!m) return tkv__fail(TKV_ERR_NOMEM, "out of memory for the list of matrices");
    /* the growth of the enlarging layouts: all of them or none, so that a model's speed does not depend on
       which of its matrices came first */
    size_t growth = 0;
    for (size_t i = 0; i < nm; i++) {
        tkv__tensor *t = matrix_at(w, i);
        if (!packable(t)) continue;
        m[i] = t;
        if (enlarges(t)) growth += tkv__pack_bytes(t->type, t->ne0, t->ne1) - t->ne1 * t->row_size;
    }
    const bool enlarge = growth <= room;
    size_t total = 0;
    for (size_t i = 0; i < nm; i++) {
        if (m[i] && !enlarge && enlarges(m[i])) m[i] = NULL;
        if (m[i]) total += tkv__pack_bytes(m[i]->type, m[i]->ne0, m[i]->ne1);
    }
    w->pack_held = enlarge ? 0 : growth;
    if (total == 0) {
        tkv__free(m);
        return TKV_OK;
    }
    /* 64-byte aligned for the kernels' aligned loads; with huge pages, whole 2 MiB pages from a 2 MiB boundary,
       so that every matrix lies on them (the allocation's unused head is never touched, so never resident) */
    const size_t align = huge ? TKV__HUGE_PAGE : 64, span = (total + align - 1) & ~(align - 1);
    void *mem = tkv__malloc(span + align - 1);
    if (!mem) {
        tkv__free(m);
        return tkv__fail(TKV_ERR_NOMEM, "out of memory for %zu MiB of packed weights", total >> 20);
    }
    uint8_t *at = (uint8_t *)(((uintptr_t)mem + align - 1) & ~(uintptr_t)(align - 1));
    if (huge) tkv__advise_huge_pages(at, span);
    for (size_t i = 0; i < nm; i++) { /* each matrix's place, then the copies */
        tkv__tensor *t = m[i];
        if (!t) continue;
        t->packed = at;
        t->pack_stride = tkv__pack_stride(t->type, t->ne0);
        at += tkv__pack_bytes(t->type, t->ne0, t->ne1);
    }
    pack_all(m, nm, g);
    tkv__free(m);
    w->pack_mem = mem;
    w->pack_bytes = total;
    return TKV_OK;
}

size_t tkv__weights_read_bytes(const tkv__weights *w, const tkv_hparams *hp, const void *data, size_t n) {
    if (!w->pack_mem) return n;
    const uint8_t *lo = data, *hi = lo + n;
    size_t bytes = n;
    for (size_t i = 0; i < n_matrices(hp); i++) {
        const tkv__tensor *t = matrix_at((tkv__weights *)(uintptr_t)w, i);
        const uint8_t *at = t->data;
        if (!t->packed || at < lo || at >= hi) continue;
        bytes = bytes - t->ne1 * t->row_size + tkv__pack_bytes(t->type, t->ne0, t->ne1);
    }
    return bytes;
}

void tkv__weights_free(tkv__weights *w) {
    tkv__free(w->layers);
    w->layers = NULL;
    tkv__free(w->pack_mem);
    w->pack_mem = NULL;
}
