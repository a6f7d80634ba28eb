/*
 * gguf_write.c — building a GGUF image in memory (see gguf_write.h).
 */
#include "gguf_write.h"

#include "base/alloc.h"
#include "base/grow.h"
#include "base/error.h"
#include "format/gguf.h"

#include <string.h>

typedef tkv__buf buf;

typedef struct pending_tensor {
    uint64_t n_bytes;
    uint8_t *data; /* NULL: zeros */
} pending_tensor;

struct tkv__gguf_writer {
    uint32_t alignment;
    uint64_t n_kv, n_tensors;
    buf kv;      /* serialised key/value pairs */
    buf infos;   /* serialised tensor infos */
    pending_tensor *tensors;
    size_t tensors_cap;
    uint64_t data_size; /* of the data section so far */
};

static tkv_status put(buf *b, const void *src, size_t n) {
    return tkv__buf_put(b, src, n) ? tkv__fail(TKV_ERR_NOMEM, "GGUF writer: out of memory") : TKV_OK;
}

static tkv_status put_le(buf *b, uint64_t v, unsigned n) {
    uint8_t bytes[8];
    for (unsigned i = 0; i < n; i++) bytes[i] = (uint8_t)(v >> (8 * i));
    return put(b, bytes, n);
}

static tkv_status put_str(buf *b, const char *s) {
    size_t n = strlen(s);
    tkv_status st = put_le(b, n, 8);
    return st ? st : put(b, s, n);
}

tkv__gguf_writer *tkv__gguf_writer_new(uint32_t alignment) {
    tkv__gguf_writer *w = tkv__calloc(1, sizeof *w);
    if (w) w->alignment = alignment ? alignment : 32;
    return w;
}

void tkv__gguf_writer_free(tkv__gguf_writer *w) {
    if (!w) return;
    for (size_t i = 0; i < w->n_tensors; i++) tkv__free(w->tensors[i].data);
    tkv__free(w->tensors);
    tkv__free(w->kv.p);
    tkv__free(w->infos.p);
    tkv__free(w);
}

static tkv_status key_and_type(tkv__gguf_writer *w, const char *key, tkv_meta_type type) {
    tkv_status st = put_str(&w->kv, key);
    if (!st) st = put_le(&w->kv, (uint32_t)type, 4);
    if (!st) w->n_kv++;
    return st;
}

tkv_status tkv__gguf_write_scalar(tkv__gguf_writer *w, const char *key, tkv_meta_type type, const void *value) {
    tkv_status st = key_and_type(w, key, type);
    return st ? st : put(&w->kv, value, tkv__gguf_meta_size(type));
}

tkv_status tkv__gguf_write_u32(tkv__gguf_writer *w, const char *key, uint32_t v) {
    return tkv__gguf_write_scalar(w, key, TKV_META_U32, &v); /* x86-64: the bytes are little-endian */
}

tkv_status tkv__gguf_write_f32(tkv__gguf_writer *w, const char *key, float v) {
    return tkv__gguf_write_scalar(w, key, TKV_META_F32, &v);
}

tkv_status tkv__gguf_write_str(tkv__gguf_writer *w, const char *key, const char *s) {
    tkv_status st = key_and_type(w, key, TKV_META_STRING);
    return st ? st : put_str(&w->kv, s);
}

tkv_status tkv__gguf_write_array(tkv__gguf_writer *w, const char *key, tkv_meta_type elem, const void *data, uint64_t n) {
    tkv_status st = key_and_type(w, key, TKV_META_ARRAY);
    if (!st) st = put_le(&w->kv, (uint32_t)elem, 4);
    if (!st) st = put_le(&w->kv, n, 8);
    if (!st) st = put(&w->kv, data, (size_t)n * tkv__gguf_meta_size(elem));
    return st;
}

tkv_status tkv__gguf_write_strings(tkv__gguf_writer *w, const char *key, const char *const *strs, uint64_t n) {
    tkv_status st = key_and_type(w, key, TKV_META_ARRAY);
    if (!st) st = put_le(&w->kv, TKV_META_STRING, 4);
    if (!st) st = put_le(&w->kv, n, 8);
    for (uint64_t i = 0; i < n && !st; i++) st = put_str(&w->kv, strs[i]);
    return st;
}

static uint64_t align_up(uint64_t n, uint64_t a) { return (n + a - 1) / a * a; }

tkv_status tkv__gguf_write_tensor(tkv__gguf_writer *w, const char *name, tkv_type type, uint32_t n_dims,
                                  const uint64_t *ne, const void *data) {
    uint32_t be, bb;
    if (tkv_type_block(type, &be, &bb)) return tkv__fail(TKV_ERR_INVALID, "GGUF writer: unknown type %d", (int)type);
    uint64_t n = 1;
    for (uint32_t d = 0; d < n_dims; d++) n *= ne[d];
    uint64_t n_bytes = n / be * bb;
    if (w->n_tensors == w->tensors_cap) {
        pending_tensor *t = tkv__grow(w->tensors, &w->tensors_cap, w->n_tensors + 1, sizeof *t, 16);
        if (!t) return tkv__fail(TKV_ERR_NOMEM, "GGUF writer: out of memory");
        w->tensors = t;
    }
    pending_tensor pt = {n_bytes, NULL};
    if (data) {
        if (!(pt.data = tkv__malloc((size_t)n_bytes))) return tkv__fail(TKV_ERR_NOMEM, "GGUF writer: out of memory");
        memcpy(pt.data, data, (size_t)n_bytes);
    }
    uint64_t offset = align_up(w->data_size, w->alignment);
    tkv_status st = put_str(&w->infos, name);
    if (!st) st = put_le(&w->infos, n_dims, 4);
    for (uint32_t d = 0; d < n_dims && !st; d++) st = put_le(&w->infos, ne[d], 8);
    if (!st) st = put_le(&w->infos, (uint32_t)type, 4);
    if (!st) st = put_le(&w->infos, offset, 8);
    if (st) {
        tkv__free(pt.data);
        return st;
    }
    w->tensors[w->n_tensors++] = pt;
    w->data_size = offset + n_bytes;
    return TKV_OK;
}

tkv_status tkv__gguf_write_finish(tkv__gguf_writer *w, uint8_t **out, size_t *size) {
    buf b = {0};
    tkv_status st = put_le(&b, 0x46554747u, 4); /* "GGUF" */
    if (!st) st = put_le(&b, 3, 4);
    if (!st) st = put_le(&b, w->n_tensors, 8);
    if (!st) st = put_le(&b, w->n_kv, 8);
    if (!st) st = put(&b, w->kv.p, w->kv.n);
    if (!st) st = put(&b, w->infos.p, w->infos.n);
    if (!st && w->n_tensors) st = put(&b, NULL, (size_t)(align_up(b.n, w->alignment) - b.n));
    uint64_t pos = 0; /* within the data section */
    for (uint64_t i = 0; i < w->n_tensors && !st; i++) {
        uint64_t offset = align_up(pos, w->alignment);
        st = put(&b, NULL, (size_t)(offset - pos));
        if (!st) st = put(&b, w->tensors[i].data, (size_t)w->tensors[i].n_bytes);
        pos = offset + w->tensors[i].n_bytes;
    }
    if (st) {
        tkv__free(b.p);
        return st;
    }
    *out = (uint8_t *)b.p; /* the file image: bytes */
    *size = b.n;
    return TKV_OK;
}

void tkv__gguf_image_free(uint8_t *image) { tkv__free(image); }

size_t tkv__gguf_write_value_size(tkv_meta_type type) { return tkv__gguf_meta_size(type); }
