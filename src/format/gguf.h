/*
 * gguf.h — a strict reader of the GGUF container.
 *
 * The whole file is validated when it is opened (see gguf.c for the list of
 * checks); after that every structure here can be trusted: strings are
 * NUL-terminated copies, array lengths and tensor extents lie inside the file.
 */
#ifndef TKV_GGUF_H
#define TKV_GGUF_H

#include "tokenkv_types.h"

#include <stdint.h>

/* A string from the file: a NUL-terminated copy and its byte length. */
typedef struct tkv__str {
    const char *s;
    size_t n;
} tkv__str;

typedef struct tkv__gguf_kv {
    tkv__str key;
    tkv_meta_type type;      /* TKV_META_ARRAY for arrays */
    tkv_meta_type elem_type; /* arrays: the element type */
    uint64_t n;              /* arrays: the length */
    union {
        uint64_t u; /* unsigned types and bool */
        int64_t i;  /* signed types */
        double f;   /* f32 and f64 */
    } v;
    tkv__str str;        /* TKV_META_STRING */
    const uint8_t *arr;  /* numeric arrays: little-endian elements, in the file */
    const tkv__str *strs; /* string arrays */
} tkv__gguf_kv;

typedef struct tkv__gguf_tensor {
    tkv__str name;
    tkv_type type;
    uint32_t n_dims;
    uint64_t ne[4];
    uint64_t n_elems;
    uint64_t n_bytes;
    uint64_t offset; /* absolute: from the start of the file */
} tkv__gguf_tensor;

typedef struct tkv__gguf {
    const uint8_t *data; /* the file image */
    uint64_t size;
    void *map; /* non-NULL when we mapped the file ourselves */
    uint32_t version;
    uint32_t alignment;
    uint64_t data_offset; /* start of the tensor data section */
    size_t n_kv;
    tkv__gguf_kv *kv;
    size_t n_tensors;
    tkv__gguf_tensor *tensors;
    /* open-addressing hash tables (indices + 1, 0 = empty) for lookups */
    uint32_t *kv_hash, *tensor_hash;
    size_t kv_hash_cap, tensor_hash_cap;
    void *storage; /* the single allocation behind everything above */
} tkv__gguf;

/*
 * Map `path` read-only and parse it. On failure returns TKV_ERR_IO,
 * TKV_ERR_FORMAT, TKV_ERR_UNSUPPORTED or TKV_ERR_NOMEM with the thread's
 * last error set, and *out untouched.
 */
tkv_status tkv__gguf_open(const char *path, tkv__gguf **out);

/* Parse an image in memory (not copied: it must outlive the result). */
tkv_status tkv__gguf_parse(const void *data, size_t size, tkv__gguf **out);

/* Unmap and free; NULL is a no-op. */
void tkv__gguf_free(tkv__gguf *g);

/*
 * Tell the OS that the whole pages inside [p, p + n) of a mapped file are
 * not needed for now: it drops them from the process (they count no more
 * in its RSS) and reads them back from the file if they are touched again,
 * unchanged. For what the load has copied elsewhere (packed weights). A
 * no-op for an image in memory (tkv__gguf_parse: the caller's bytes) and
 * outside the image.
 */
void tkv__gguf_release(const tkv__gguf *g, const void *p, size_t n);

/* Look-ups by name in O(1); NULL when absent. */
const tkv__gguf_kv *tkv__gguf_find(const tkv__gguf *g, const char *key);
const tkv__gguf_tensor *tkv__gguf_tensor_find(const tkv__gguf *g, const char *name);

/* Byte size of one element of a numeric metadata type; 0 for string/array. */
size_t tkv__gguf_meta_size(tkv_meta_type t);

#endif
