/*
 * gguf_write.h — building a GGUF image in memory.
 *
 * Used by `tokenkv mkmodel` to write random-weight models and by the tests
 * to make files with exactly the (mal)formation they need. Values are
 * appended in call order; tensors are laid out in call order, each at the
 * next multiple of the alignment.
 */
#ifndef TKV_GGUF_WRITE_H
#define TKV_GGUF_WRITE_H

#include "tokenkv.h"

typedef struct tkv__gguf_writer tkv__gguf_writer;

/* A writer for GGUF version 3 with the given alignment (0: 32). NULL on OOM. */
tkv__gguf_writer *tkv__gguf_writer_new(uint32_t alignment);
void tkv__gguf_writer_free(tkv__gguf_writer *w);

/*
 * Metadata. `_scalar` takes the value's little-endian bytes (tkv_meta_type
 * sizes); `_array` takes n elements of a numeric type; `_strings` n strings.
 * Each returns TKV_ERR_NOMEM or TKV_OK. The writer does not check that the
 * result is valid: tests rely on writing invalid files.
 */
tkv_status tkv__gguf_write_scalar(tkv__gguf_writer *w, const char *key, tkv_meta_type type, const void *value);
tkv_status tkv__gguf_write_u32(tkv__gguf_writer *w, const char *key, uint32_t v);
tkv_status tkv__gguf_write_f32(tkv__gguf_writer *w, const char *key, float v);
tkv_status tkv__gguf_write_str(tkv__gguf_writer *w, const char *key, const char *s);
tkv_status tkv__gguf_write_array(tkv__gguf_writer *w, const char *key, tkv_meta_type elem, const void *data, uint64_t n);
tkv_status tkv__gguf_write_strings(tkv__gguf_writer *w, const char *key, const char *const *strs, uint64_t n);

/*
 * A tensor of `type` with n_dims dims ne[]; `data` holds its stored bytes
 * (copied), or NULL for zeros. The byte size comes from the type's blocks.
 */
tkv_status tkv__gguf_write_tensor(tkv__gguf_writer *w, const char *name, tkv_type type, uint32_t n_dims,
                                  const uint64_t *ne, const void *data);

/*
 * The finished image: *out (owned by the caller, free with
 * tkv__gguf_image_free) and *size. The writer can be freed afterwards.
 */
tkv_status tkv__gguf_write_finish(tkv__gguf_writer *w, uint8_t **out, size_t *size);

/* Free an image from tkv__gguf_write_finish; NULL is a no-op. */
void tkv__gguf_image_free(uint8_t *image);

/* Bytes of one value of a numeric metadata type (what _scalar reads); 0 for
   strings, arrays and unknown types. */
size_t tkv__gguf_write_value_size(tkv_meta_type type);

#endif
