/*
 * fingerprint.c — tkv_model_fingerprint: an XXH3-128 hash of what makes the
 * K/V of a token list what it is, so that a cache file is never paired with
 * another model's K/V.
 *
 * Hashed, in this order, each field at a fixed width (little-endian, floats
 * by their bits, strings as length + bytes):
 *   1. a domain tag and the hyperparameters (or a marker when the model has
 *      none: vocab_only files);
 *   2. the tensor table: count, then per tensor its name, type, dims, shape
 *      and byte size, and all of its bytes: any byte of the model that
 *      changes changes the fingerprint (a sample of the weights let a
 *      flipped exponent through, and with it a stale cache). That reads the
 *      whole file once, at XXH3's speed, so the result is kept in the model
 *      (computed on first use, under the model's lock: models are shared
 *      between threads);
 *   3. every `tokenizer.ggml.*` metadata pair (vocabulary, scores, token
 *      types, merges, special ids, flags), in file order: key, type and
 *      value (arrays element by element).
 * Changing any of this, or the order, changes every fingerprint: bump the
 * domain tag then (and the cache file version, see kv/cachefile.c).
 */
#include "model.h"

#include "base/error.h"

#include <string.h>

#define XXH_STATIC_LINKING_ONLY
#include <xxhash.h>

static void compute(const tkv_model *model, uint64_t out[2]);

static void put_u64(XXH3_state_t *st, uint64_t v) {
    uint8_t b[8];
    for (int i = 0; i < 8; i++) b[i] = (uint8_t)(v >> (8 * i));
    XXH3_128bits_update(st, b, sizeof b);
}

static void put_f32(XXH3_state_t *st, float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    put_u64(st, u);
}

static void put_bytes(XXH3_state_t *st, const void *p, size_t n) {
    put_u64(st, n);
    if (n) XXH3_128bits_update(st, p, n);
}

static void put_str(XXH3_state_t *st, const char *s) { put_bytes(st, s, strnlen(s, 4096)); }

static void hash_hparams(XXH3_state_t *st, const tkv_model *m) {
    put_u64(st, m->has_hparams);
    if (!m->has_hparams) return;
    const tkv_hparams *hp = &m->hp;
    char arch[sizeof hp->arch + 1] = {0}, scaling[sizeof hp->rope_scaling + 1] = {0};
    memcpy(arch, hp->arch, sizeof hp->arch);
    memcpy(scaling, hp->rope_scaling, sizeof hp->rope_scaling);
    put_str(st, arch);
    const uint32_t u[] = {hp->n_vocab, hp->n_ctx_train, hp->n_embd, hp->n_layer, hp->n_ff,
                          hp->n_head,  hp->n_head_kv,   hp->head_dim, hp->n_rot, hp->n_ctx_orig};
    for (size_t i = 0; i < sizeof u / sizeof u[0]; i++) put_u64(st, u[i]);
    put_f32(st, hp->rope_freq_base);
    put_f32(st, hp->rope_freq_scale);
    put_f32(st, hp->rms_eps);
    put_str(st, scaling);
    put_u64(st, hp->tied_output);
}

static void hash_tensors(XXH3_state_t *st, const tkv__gguf *g) {
    put_u64(st, g->n_tensors);
    for (size_t i = 0; i < g->n_tensors; i++) {
        const tkv__gguf_tensor *t = &g->tensors[i];
        put_bytes(st, t->name.s, t->name.n);
        put_u64(st, (uint64_t)t->type);
        put_u64(st, t->n_dims);
        for (int d = 0; d < 4; d++) put_u64(st, t->ne[d]);
        put_u64(st, t->n_bytes);
        /* the reader checked that [offset, offset + n_bytes) lies in the image */
        if (t->n_bytes) XXH3_128bits_update(st, g->data + t->offset, (size_t)t->n_bytes);
    }
}

static void hash_tokenizer(XXH3_state_t *st, const tkv__gguf *g) {
    static const char prefix[] = "tokenizer.ggml.";
    for (size_t i = 0; i < g->n_kv; i++) {
        const tkv__gguf_kv *kv = &g->kv[i];
        if (kv->key.n < sizeof prefix - 1 || memcmp(kv->key.s, prefix, sizeof prefix - 1) != 0) continue;
        put_bytes(st, kv->key.s, kv->key.n);
        put_u64(st, (uint64_t)kv->type);
        if (kv->type == TKV_META_STRING) {
            put_bytes(st, kv->str.s, kv->str.n);
        } else if (kv->type != TKV_META_ARRAY) {
            put_u64(st, kv->v.u); /* the union's bits: exact for every scalar type */
        } else {
            put_u64(st, (uint64_t)kv->elem_type);
            put_u64(st, kv->n);
            if (kv->elem_type == TKV_META_STRING) {
                for (uint64_t k = 0; k < kv->n; k++) put_bytes(st, kv->strs[k].s, kv->strs[k].n);
            } else {
                /* numeric arrays are little-endian elements in the image */
                size_t esz = tkv__gguf_meta_size(kv->elem_type);
                if (esz && kv->n) XXH3_128bits_update(st, kv->arr, (size_t)kv->n * esz);
            }
        }
    }
}

tkv_status tkv_model_fingerprint(const tkv_model *model, uint64_t out[2]) {
    if (!model || !out) return tkv__fail(TKV_ERR_INVALID, "tkv_model_fingerprint: NULL argument");
    tkv_model *m = (tkv_model *)model; /* the cached result is not part of what the model is */
    pthread_mutex_lock(&m->fp_mu);
    if (!m->fp_done) {
        compute(m, m->fp);
        m->fp_done = true;
    }
    out[0] = m->fp[0], out[1] = m->fp[1];
    pthread_mutex_unlock(&m->fp_mu);
    return TKV_OK;
}

static void compute(const tkv_model *model, uint64_t out[2]) {
    XXH3_state_t st;
    XXH3_128bits_reset(&st);
    static const char tag[] = "tokenkv model fingerprint v2"; /* v2: every byte of every tensor */
    XXH3_128bits_update(&st, tag, sizeof tag - 1);
    hash_hparams(&st, model);
    hash_tensors(&st, model->gguf);
    hash_tokenizer(&st, model->gguf);
    XXH128_hash_t h = XXH3_128bits_digest(&st);
    out[0] = h.low64;
    out[1] = h.high64;
}
