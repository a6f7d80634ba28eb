/*
 * quantize_file.c — a GGUF model to a quantization mix (see quantize_file.h).
 *
 * The type rules are the reference's (llama.cpp's llama_tensor_get_type, no
 * importance matrix, no overrides), restricted to the mixes listed below.
 * Per mix, beyond "output Q6_K" and the fallbacks (quantize_file.h):
 *   Q2_K    attn_v Q3_K (Q4_K with >= 4 query heads per KV head), ffn_down
 *           and attn_output Q3_K
 *   Q3_K_M  attn_v Q5_K in the first two attn_v tensors, Q4_K after;
 *           ffn_down Q5_K in the first 1/16 of the layers, Q4_K after;
 *           attn_output Q4_K
 *   Q3_K_L  attn_v, ffn_down, attn_output Q5_K
 *   Q4_K_S  attn_v Q5_K in the first four; ffn_down Q5_K in the first 1/8
 *   Q4_K_M, Q5_K_M  attn_v and ffn_down Q6_K in the layers that "use more
 *           bits": the first and last eighth, and every third in between
 *   IQ4_NL, IQ4_XS  attn_v Q5_K with >= 4 query heads per KV head;
 *           ffn_down Q5_K in the first 1/8 of the layers
 *   TQ1_0, TQ2_0    token_embd Q4_K
 * and the rules for 8-expert models (attn_v, attn_k Q8_0; attn_output
 * Q5_K for the K mixes), llama models of 80 layers with grouped KV heads
 * ("70B": attn_v Q3_K/Q4_K -> Q5_K) and falcon.
 */
#include "quantize_file.h"

#include "gguf_write.h"
#include "quantize.h"
#include "base/error.h"
#include "compute/quant/quant.h"
#include "format/gguf.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* ---- the mixes -------------------------------------------------------------------- */

static const tkv__quant_mix mixes[] = {
    {"F32", 0, TKV_TYPE_F32},       {"F16", 1, TKV_TYPE_F16},       {"BF16", 32, TKV_TYPE_BF16},
    {"Q8_0", 7, TKV_TYPE_Q8_0},     {"Q4_0", 2, TKV_TYPE_Q4_0},     {"Q4_1", 3, TKV_TYPE_Q4_1},
    {"Q5_0", 8, TKV_TYPE_Q5_0},     {"Q5_1", 9, TKV_TYPE_Q5_1},     {"Q2_K", 10, TKV_TYPE_Q2_K},
    {"Q2_K_S", 21, TKV_TYPE_Q2_K},  {"Q3_K_S", 11, TKV_TYPE_Q3_K},  {"Q3_K_M", 12, TKV_TYPE_Q3_K},
    {"Q3_K_L", 13, TKV_TYPE_Q3_K},  {"Q4_K_S", 14, TKV_TYPE_Q4_K},  {"Q4_K_M", 15, TKV_TYPE_Q4_K},
    {"Q5_K_S", 16, TKV_TYPE_Q5_K},  {"Q5_K_M", 17, TKV_TYPE_Q5_K},  {"Q6_K", 18, TKV_TYPE_Q6_K},
    {"IQ4_NL", 25, TKV_TYPE_IQ4_NL}, {"IQ4_XS", 30, TKV_TYPE_IQ4_XS}, {"TQ1_0", 36, TKV_TYPE_TQ1_0},
    {"TQ2_0", 37, TKV_TYPE_TQ2_0},
};
#define N_MIXES (sizeof mixes / sizeof mixes[0])

enum { F_Q2_K = 10, F_Q2_K_S = 21, F_Q3_K_S = 11, F_Q3_K_M = 12, F_Q3_K_L = 13, F_Q4_K_S = 14, F_Q4_K_M = 15,
       F_Q5_K_M = 17, F_IQ4_NL = 25, F_IQ4_XS = 30, F_TQ1_0 = 36, F_TQ2_0 = 37 };

const tkv__quant_mix *tkv__quant_mix_find(const char *name) {
    static const struct { const char *alias, *mix; } aliases[] = {{"Q3_K", "Q3_K_M"}, {"Q4_K", "Q4_K_M"}, {"Q5_K", "Q5_K_M"}};
    for (size_t i = 0; i < sizeof aliases / sizeof aliases[0]; i++)
        if (!strcasecmp(name, aliases[i].alias)) name = aliases[i].mix;
    for (size_t i = 0; i < N_MIXES; i++)
        if (!strcasecmp(name, mixes[i].name)) return &mixes[i];
    return NULL;
}

void tkv__quant_mix_names(char *buf, size_t cap) {
    size_t at = 0;
    if (cap) buf[0] = '\0';
    for (size_t i = 0; i < N_MIXES && at < cap; i++) {
        int n = snprintf(buf + at, cap - at, "%s%s", i ? ", " : "", mixes[i].name);
        if (n < 0) break;
        at += (size_t)n;
    }
}

/* ---- the type rules ------------------------------------------------------------------- */

static bool ends_with(const char *s, const char *tail) {
    const size_t n = strlen(s), m = strlen(tail);
    return n >= m && !strcmp(s + n - m, tail);
}

static bool has(const char *s, const char *part) { return strstr(s, part) != NULL; }

static bool is_float(tkv_type t) { return t == TKV_TYPE_F32 || t == TKV_TYPE_F16 || t == TKV_TYPE_BF16; }

/* Whether the reference quantizes this tensor at all: its whole list, those
   of architectures tokenkv does not load included (a name that never occurs costs nothing). */
static bool quantizable(const char *name, uint32_t n_dims) {
    static const char *const never[] = {
        "_norm.weight", "ffn_gate_inp.weight", "ffn_gate_tid2eid.weight", "altup", "laurel", "per_layer_model_proj",
        "ssm_conv1d", "shortconv.conv.weight", "indexer.k_proj.weight", "indexer.q_proj.weight",
        "time_mix_first.weight", "time_mix_w0.weight", "time_mix_w1.weight", "time_mix_w2.weight",
        "time_mix_v0.weight", "time_mix_v1.weight", "time_mix_v2.weight", "time_mix_a0.weight", "time_mix_a1.weight",
        "time_mix_a2.weight", "time_mix_g1.weight", "time_mix_g2.weight", "time_mix_decay_w1.weight",
        "time_mix_decay_w2.weight", "time_mix_lerp_fused.weight", "attn_rel_b.weight", ".position_embd",
        "sam.pos_embd", "sam.neck.", "sam.net_", ".rel_pos", ".patch_embd", ".patch_merger", "a.rvq.codebook",
        "mm.a.code_embd",
    };
    if (n_dims < 2 || !ends_with(name, "weight")) return false;
    for (size_t i = 0; i < sizeof never / sizeof never[0]; i++)
        if (has(name, never[i])) return false;
    return strcmp(name, "position_embd.weight") && strcmp(name, "token_types.weight");
}

typedef enum { C_OTHER, C_OUTPUT, C_TOKEN_EMBD, C_ATTN_V, C_ATTN_K, C_ATTN_Q, C_ATTN_OUTPUT, C_FFN_UP, C_FFN_GATE, C_FFN_DOWN } category;

/* The reference's broad kinds of tensor, by name; attn_qkv and attn_kv_b count as attn_v. */
static category category_of(const char *name) {
    if (!strcmp(name, "output.weight")) return C_OUTPUT;
    if (!strcmp(name, "token_embd.weight") || !strcmp(name, "per_layer_token_embd.weight")) return C_TOKEN_EMBD;
    if (has(name, "attn_qkv.weight") || has(name, "attn_kv_b.weight") || has(name, "attn_v.weight")) return C_ATTN_V;
    if (has(name, "attn_k.weight")) return C_ATTN_K;
    if (has(name, "attn_q.weight")) return C_ATTN_Q;
    if (has(name, "attn_output.weight")) return C_ATTN_OUTPUT;
    if (has(name, "ffn_up")) return C_FFN_UP;
    if (has(name, "ffn_gate")) return C_FFN_GATE;
    if (has(name, "ffn_down")) return C_FFN_DOWN;
    return C_OTHER;
}

/* The first and last eighth of the layers and every third one in between. */
static bool more_bits(int i, int n) { return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2; }

/* The block number in "blk.N....", or -1. */
static int layer_of(const char *name) {
    int l = -1;
    if (sscanf(name, "blk.%d.", &l) != 1) l = -1;
    return l;
}

/* A type whose blocks do not divide the rows: the reference's replacement. */
static tkv_type fallback(tkv_type t, uint64_t ne0, bool *fell_back) {
    const size_t be = tkv__quant_block_elems(t);
    if (!be || ne0 % be == 0) return t;
    *fell_back = true;
    switch (t) {
    case TKV_TYPE_IQ4_XS: t = TKV_TYPE_IQ4_NL; break;
    case TKV_TYPE_Q2_K:
    case TKV_TYPE_Q3_K:
    case TKV_TYPE_TQ1_0:
    case TKV_TYPE_TQ2_0: t = TKV_TYPE_Q4_0; break;
    case TKV_TYPE_Q4_K: t = TKV_TYPE_Q5_0; break;
    case TKV_TYPE_Q5_K: t = TKV_TYPE_Q5_1; break;
    case TKV_TYPE_Q6_K: t = TKV_TYPE_Q8_0; break;
    default: return TKV_TYPE_F16; /* 32-element types: the reference's last resort */
    }
    return ne0 % tkv__quant_block_elems(t) ? TKV_TYPE_F16 : t;
}

tkv_type tkv__quant_tensor_type(const tkv__quant_mix *mix, const tkv__quant_model_info *info,
                                tkv__quant_rule_state *st, const char *name, uint32_t n_dims, uint64_t ne0,
                                tkv_type cur, bool *fell_back) {
    *fell_back = false;
    if (!quantizable(name, n_dims)) return cur;
    tkv_type t = mix->base;
    if (is_float(t)) return t; /* the float "mixes" convert every quantizable matrix, nothing more */
    const uint32_t f = mix->ftype;
    const bool falcon = !strcmp(info->arch, "falcon"), experts8 = info->n_expert == 8;
    const uint32_t gqa = info->n_head_kv ? info->n_head / info->n_head_kv : 0;
    const category c = category_of(name);
    const int n_layer = (int)info->n_layer;
    if (c == C_OUTPUT || (info->tied_embeddings && c == C_TOKEN_EMBD)) {
        if (falcon || ne0 % tkv__quant_block_elems(t)) t = TKV_TYPE_Q8_0;
        else if (t != TKV_TYPE_Q8_0) t = TKV_TYPE_Q6_K;
    } else if (c == C_TOKEN_EMBD) {
        if (f == F_TQ1_0 || f == F_TQ2_0) t = TKV_TYPE_Q4_K;
    } else if (c == C_ATTN_V) {
        const int i = st->i_attn_v;
        if (f == F_Q2_K) t = gqa >= 4 ? TKV_TYPE_Q4_K : TKV_TYPE_Q3_K;
        else if (f == F_Q2_K_S && gqa >= 4) t = TKV_TYPE_Q4_K;
        else if (f == F_Q3_K_M) t = i < 2 ? TKV_TYPE_Q5_K : TKV_TYPE_Q4_K;
        else if (f == F_Q3_K_L) t = TKV_TYPE_Q5_K;
        else if ((f == F_IQ4_NL || f == F_IQ4_XS) && gqa >= 4) t = TKV_TYPE_Q5_K;
        else if ((f == F_Q4_K_M || f == F_Q5_K_M) && more_bits(i, info->n_attn_v)) t = TKV_TYPE_Q6_K;
        else if (f == F_Q4_K_S && i < 4) t = TKV_TYPE_Q5_K;
        const bool is70b = !strcmp(info->arch, "llama") && n_layer == 80 && info->n_head != info->n_head_kv;
        if (is70b && (t == TKV_TYPE_Q3_K || t == TKV_TYPE_Q4_K)) t = TKV_TYPE_Q5_K;
        if (experts8) t = TKV_TYPE_Q8_0;
        st->i_attn_v++;
    } else if (c == C_ATTN_K) {
        if (experts8) t = TKV_TYPE_Q8_0;
    } else if (c == C_FFN_DOWN) {
        /* MoE experts are not stored in layer order: their layer comes from the name */
        const int i = info->n_expert > 1 ? layer_of(name) : st->i_ffn_down;
        if (f == F_Q2_K) t = TKV_TYPE_Q3_K;
        else if (f == F_Q2_K_S) {
            if (i < n_layer / 8) t = TKV_TYPE_Q4_K;
        } else if (f == F_Q3_K_M)
            t = i < n_layer / 16 ? TKV_TYPE_Q5_K : !falcon || more_bits(i, n_layer) ? TKV_TYPE_Q4_K : TKV_TYPE_Q3_K;
        else if (f == F_Q3_K_L) t = falcon ? TKV_TYPE_Q4_K : TKV_TYPE_Q5_K;
        else if (f == F_Q4_K_M) {
            if (falcon) t = i < n_layer / 16 ? TKV_TYPE_Q6_K : more_bits(i, n_layer) ? TKV_TYPE_Q5_K : TKV_TYPE_Q4_K;
            else if (more_bits(i, n_layer)) t = TKV_TYPE_Q6_K;
        } else if (i < n_layer / 8 && (f == F_IQ4_NL || f == F_IQ4_XS)) t = TKV_TYPE_Q5_K;
        else if (f == F_Q5_K_M && more_bits(i, n_layer)) t = TKV_TYPE_Q6_K;
        else if (f == F_Q4_K_S && !falcon && i < n_layer / 8) t = TKV_TYPE_Q5_K;
        st->i_ffn_down++;
    } else if (c == C_ATTN_OUTPUT) {
        if (!falcon && experts8) {
            if (f == F_Q2_K || f == F_Q3_K_S || f == F_Q3_K_M || f == F_IQ4_NL || f == F_Q4_K_S || f == F_Q4_K_M ||
                f == F_IQ4_XS)
                t = TKV_TYPE_Q5_K;
        } else if (!falcon) {
            if (f == F_Q2_K) t = TKV_TYPE_Q3_K;
            else if (f == F_Q3_K_M) t = TKV_TYPE_Q4_K;
            else if (f == F_Q3_K_L) t = TKV_TYPE_Q5_K;
        } else if (f == F_Q3_K_L) {
            t = TKV_TYPE_Q4_K;
        }
    }
    return fallback(t, ne0, fell_back);
}

/* The reference refuses to write these without an importance matrix (and takes none here). */
static bool needs_imatrix(const tkv__quant_mix *mix, const char *name, tkv_type t) {
    return mix->ftype == F_Q2_K_S && t == TKV_TYPE_Q2_K && category_of(name) != C_OUTPUT &&
           category_of(name) != C_TOKEN_EMBD;
}

/* ---- the model's facts ------------------------------------------------------------------ */

/* An integer key (or an array's first element), or def when absent or not an integer. */
static uint64_t meta_uint(const tkv__gguf *g, const char *arch, const char *suffix, uint64_t def) {
    char key[160];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    const tkv__gguf_kv *kv = tkv__gguf_find(g, key);
    if (!kv) return def;
    tkv_meta_type t = kv->type;
    uint64_t v = 0;
    if (t == TKV_META_ARRAY) {
        t = kv->elem_type;
        const size_t es = tkv__gguf_meta_size(t);
        if (!kv->n || !es || t == TKV_META_F32 || t == TKV_META_F64) return def;
        for (size_t b = 0; b < es; b++) v |= (uint64_t)kv->arr[b] << (8 * b);
        return v;
    }
    if (t == TKV_META_F32 || t == TKV_META_F64 || t == TKV_META_STRING || t == TKV_META_BOOL) return def;
    return t == TKV_META_I8 || t == TKV_META_I16 || t == TKV_META_I32 || t == TKV_META_I64 ? (uint64_t)kv->v.i : kv->v.u;
}

static void model_info(const tkv__gguf *g, tkv__quant_model_info *info) {
    memset(info, 0, sizeof *info);
    const tkv__gguf_kv *a = tkv__gguf_find(g, "general.architecture");
    snprintf(info->arch, sizeof info->arch, "%s", a && a->type == TKV_META_STRING ? a->str.s : "");
    info->n_layer = (uint32_t)meta_uint(g, info->arch, "block_count", 0);
    info->n_head = (uint32_t)meta_uint(g, info->arch, "attention.head_count", 0);
    info->n_head_kv = (uint32_t)meta_uint(g, info->arch, "attention.head_count_kv", info->n_head);
    info->n_expert = (uint32_t)meta_uint(g, info->arch, "expert_count", 0);
    info->tied_embeddings = true;
    for (size_t i = 0; i < g->n_tensors; i++) {
        const char *name = g->tensors[i].name.s;
        if (category_of(name) == C_ATTN_V) info->n_attn_v++;
        if (category_of(name) == C_OUTPUT) info->tied_embeddings = false;
    }
}

/* The reference loader's order: tensors outside blocks first, then by block number; by name within each. */
static int tensor_order(const void *pa, const void *pb) {
    const tkv__gguf_tensor *a = *(const tkv__gguf_tensor *const *)pa, *b = *(const tkv__gguf_tensor *const *)pb;
    const int la = layer_of(a->name.s), lb = layer_of(b->name.s);
    if (la != lb) return la < lb ? -1 : 1;
    return strcmp(a->name.s, b->name.s);
}

/* ---- metadata ----------------------------------------------------------------------------- */

/* One pair of the input, as it was (key, type and value). */
static tkv_status copy_kv(tkv__gguf_writer *w, const tkv__gguf_kv *kv, char *why, size_t cap) {
    const char *key = kv->key.s;
    if (kv->type == TKV_META_STRING) {
        if (strlen(kv->str.s) != kv->str.n) goto nul;
        return tkv__gguf_write_str(w, key, kv->str.s);
    }
    if (kv->type != TKV_META_ARRAY) {
        uint8_t bytes[8];
        const size_t es = tkv__gguf_meta_size(kv->type);
        if (kv->type == TKV_META_F32) {
            const float f = (float)kv->v.f; /* read from an f32: exact */
            memcpy(bytes, &f, 4);
        } else if (kv->type == TKV_META_F64) {
            memcpy(bytes, &kv->v.f, 8);
        } else {
            const uint64_t v = kv->v.u; /* the signed ones share the bits; truncated back to their width */
            for (size_t b = 0; b < es; b++) bytes[b] = (uint8_t)(v >> (8 * b));
        }
        return tkv__gguf_write_scalar(w, key, kv->type, bytes);
    }
    if (kv->elem_type != TKV_META_STRING) return tkv__gguf_write_array(w, key, kv->elem_type, kv->arr, kv->n);
    const char **strs = malloc((kv->n ? kv->n : 1) * sizeof *strs);
    if (!strs) return TKV_ERR_NOMEM;
    for (uint64_t i = 0; i < kv->n; i++) {
        strs[i] = kv->strs[i].s;
        if (strlen(strs[i]) != kv->strs[i].n) {
            free(strs);
            goto nul;
        }
    }
    tkv_status st = tkv__gguf_write_strings(w, key, strs, kv->n);
    free(strs);
    return st;
nul:
    snprintf(why, cap, "metadata key '%s': a string holds a NUL byte, which this writer cannot copy", key);
    return TKV_ERR_UNSUPPORTED;
}

/* ---- quantizing one tensor ------------------------------------------------------------------- */

typedef struct job {
    const tkv__gguf_tensor *t;
    const uint8_t *src;
    uint8_t *dst;
    tkv_type to;
    uint64_t ne0, rows;
    size_t src_row, dst_row;
    /* rows are handed out in chunks so threads stay busy whatever the tensor's shape */
    pthread_mutex_t lock;
    uint64_t next;
    bool nomem;
} job;

static void *worker(void *arg) {
    job *j = arg;
    const uint64_t chunk = 16;
    float *row = malloc((size_t)j->ne0 * sizeof *row);
    for (;;) {
        pthread_mutex_lock(&j->lock);
        const uint64_t r0 = j->next;
        j->next += chunk;
        if (!row) j->nomem = true, j->next = j->rows;
        pthread_mutex_unlock(&j->lock);
        if (!row || r0 >= j->rows) break;
        const uint64_t r1 = r0 + chunk < j->rows ? r0 + chunk : j->rows;
        for (uint64_t r = r0; r < r1; r++) {
            tkv__quant_dequantize_row(j->t->type, j->src + r * j->src_row, row, (size_t)j->ne0);
            tkv__quantize_row(j->to, row, j->dst + r * j->dst_row, (size_t)j->ne0);
        }
    }
    free(row);
    return NULL;
}

/* Quantize tensor t (in g) to `to` into dst (its full size); false on OOM. */
static bool quantize_tensor(const tkv__gguf *g, const tkv__gguf_tensor *t, tkv_type to, uint8_t *dst, int threads) {
    job j = {.t = t, .src = g->data + t->offset, .dst = dst, .to = to, .ne0 = t->ne[0]};
    j.rows = t->ne[0] ? t->n_elems / t->ne[0] : 0;
    j.src_row = tkv__quant_row_size(t->type, (size_t)j.ne0);
    j.dst_row = tkv__quant_row_size(to, (size_t)j.ne0);
    pthread_mutex_init(&j.lock, NULL);
    int n = threads < 1 ? 1 : threads > 256 ? 256 : threads;
    if ((uint64_t)n > (j.rows + 15) / 16) n = (int)((j.rows + 15) / 16);
    pthread_t tid[256];
    int started = 0;
    for (int i = 1; i < n; i++, started++)
        if (pthread_create(&tid[started], NULL, worker, &j)) break;
    worker(&j); /* this thread works too, so a failed start only slows things */
    for (int i = 0; i < started; i++) pthread_join(tid[i], NULL);
    pthread_mutex_destroy(&j.lock);
    return !j.nomem;
}

/* ---- the file ----------------------------------------------------------------------------------- */

static bool write_all(const char *path, const uint8_t *p, size_t n, size_t pad) {
    FILE *f = fopen(path, "wb");
    if (!f) return false;
    static const uint8_t zeros[256];
    bool ok = fwrite(p, 1, n, f) == n && (pad == 0 || fwrite(zeros, 1, pad, f) == pad);
    ok = (fclose(f) == 0) && ok;
    return ok;
}

tkv_status tkv__quantize_file(const char *in, const char *out, const tkv__quant_mix *mix, int threads, FILE *log,
                              char *why, size_t cap) {
    tkv__gguf *g = NULL;
    tkv__gguf_writer *w = NULL;
    const tkv__gguf_tensor **order = NULL;
    uint8_t *img = NULL, *buf = NULL;
    char *tmp = NULL;
    tkv_status st;
    why[0] = '\0';
    if ((st = tkv__gguf_open(in, &g))) {
        snprintf(why, cap, "%s: %s", in, tkv_last_error(NULL));
        return st;
    }
    st = TKV_ERR_NOMEM;
    if (!(w = tkv__gguf_writer_new(g->alignment)) || !(order = malloc((g->n_tensors + 1) * sizeof *order))) goto fail;

    /* metadata: the input's pairs in order, less the two the reference sets, which it moves to the end */
    for (size_t i = 0; i < g->n_kv; i++) {
        const char *key = g->kv[i].key.s;
        if (!strcmp(key, "general.quantization_version") || !strcmp(key, "general.file_type") ||
            !strcmp(key, "split.no") || !strcmp(key, "split.count") || !strcmp(key, "split.tensors.count"))
            continue; /* (the split keys: one file out) */
        if ((st = copy_kv(w, &g->kv[i], why, cap))) goto fail;
    }
    if ((st = tkv__gguf_write_u32(w, "general.quantization_version", 2))) goto fail;
    if ((st = tkv__gguf_write_u32(w, "general.file_type", mix->ftype))) goto fail;

    tkv__quant_model_info info;
    model_info(g, &info);
    for (size_t i = 0; i < g->n_tensors; i++) order[i] = &g->tensors[i];
    qsort(order, g->n_tensors, sizeof *order, tensor_order);

    tkv__quant_rule_state rs = {0, 0};
    for (size_t i = 0; i < g->n_tensors; i++) {
        const tkv__gguf_tensor *t = order[i];
        bool fell = false;
        const tkv_type to = tkv__quant_tensor_type(mix, &info, &rs, t->name.s, t->n_dims, t->ne[0], t->type, &fell);
        if (to != t->type && needs_imatrix(mix, t->name.s, to)) {
            snprintf(why, cap, "%s needs an importance matrix for tensor %s (as the reference's quantizer says); "
                               "tokenkv quantize takes none", mix->name, t->name.s);
            st = TKV_ERR_UNSUPPORTED;
            goto fail;
        }
        const uint8_t *data = g->data + t->offset;
        if (to != t->type) {
            if (!tkv__quant_block_elems(t->type) || !tkv__quant_supported(t->type)) {
                snprintf(why, cap, "tensor %s: cannot read its type %s", t->name.s, tkv_type_name(t->type));
                st = TKV_ERR_UNSUPPORTED;
                goto fail;
            }
            const size_t rows = t->ne[0] ? (size_t)(t->n_elems / t->ne[0]) : 0;
            const size_t n = tkv__quant_row_size(to, (size_t)t->ne[0]) * rows;
            free(buf);
            st = TKV_ERR_NOMEM;
            if (!(buf = malloc(n ? n : 1)) || !quantize_tensor(g, t, to, buf, threads)) goto fail;
            data = buf;
        }
        if (log)
            fprintf(log, "[%3zu/%3zu] %-36s %-6s -> %-6s%s\n", i + 1, g->n_tensors, t->name.s, tkv_type_name(t->type),
                    tkv_type_name(to), fell ? " (fallback: rows not whole blocks)" : "");
        if ((st = tkv__gguf_write_tensor(w, t->name.s, to, t->n_dims, t->ne, data))) goto fail;
    }
    size_t size = 0;
    if ((st = tkv__gguf_write_finish(w, &img, &size))) goto fail;
    /* the reference pads the last tensor's data too */
    const size_t pad = g->n_tensors ? (g->alignment - size % g->alignment) % g->alignment : 0;

    const size_t plen = strlen(out);
    st = TKV_ERR_NOMEM;
    if (!(tmp = malloc(plen + 5))) goto fail;
    memcpy(tmp, out, plen);
    memcpy(tmp + plen, ".tmp", 5);
    st = TKV_ERR_IO;
    if (!write_all(tmp, img, size, pad)) {
        snprintf(why, cap, "%s: cannot write: %s", tmp, strerror(errno));
        remove(tmp);
        goto fail;
    }
    if (rename(tmp, out) != 0) {
        snprintf(why, cap, "cannot rename %s to %s: %s", tmp, out, strerror(errno));
        remove(tmp);
        goto fail;
    }
    st = TKV_OK;
fail:
    if (st && !why[0]) snprintf(why, cap, "%s", st == TKV_ERR_NOMEM ? "out of memory" : tkv_last_error(NULL));
    free(tmp);
    free(buf);
    tkv__gguf_image_free(img);
    free(order);
    tkv__gguf_writer_free(w);
    tkv__gguf_free(g);
    return st;
}
