/*
 * persist.h — saving and loading prefixes of a context's cache (the public
 * tkv_seq_save/load and tkv_cache_save/load are in persist.c); the file
 * format itself is kv/cachefile.h.
 */
#ifndef TKV_PERSIST_H
#define TKV_PERSIST_H

#include "context.h"

#include "kv/cachefile.h"

/* Fill *e from ctx (computes the model fingerprint). */
tkv_status tkv__persist_expect(const tkv_context *ctx, tkv__pexpect *e);

/* The header of a file written from ctx: fingerprint, K and V types, geometry (the prefix's own fields, ns,
   n_tokens, kv_from and rank, left 0). */
tkv_status tkv__persist_header(const tkv_context *ctx, tkv__phdr *h);

/*
 * Load one file image into the cache: into sequence `seq`, or, with seq < 0,
 * as an unreferenced cached prefix (as tkv_cache_load does). Everything is
 * validated before the cache changes. Used by the fuzzer and the tests.
 */
tkv_status tkv__persist_load_image(tkv_context *ctx, const char *name, const uint8_t *data, size_t size, tkv_seq seq);

/* The cache directory, created (mode 0700) when create and it is missing; it must be ours and writable by
   nobody else. TKV_ERR_IO naming the problem. */
tkv_status tkv__persist_open_dir(const char *dir, bool create);

/* "dir/name" in a tkv__malloc'd string (NULL: no memory). */
char *tkv__persist_join(const char *dir, const char *name);

/* Whether name is a file name tkv_cache_save writes (HHHHHHHHHHHHHHHH.tkvc); *hash receives H. */
bool tkv__persist_parse_name(const char *name, uint64_t *hash);

/*
 * The hashes of DIR/manifest's files in its order, in a tkv__malloc'd array (*n of them; NULL and 0 when
 * there is no manifest, or one that is not whole, ours and unchanged). TKV_ERR_NOMEM only.
 */
tkv_status tkv__persist_read_manifest(const char *dir, uint64_t **hashes, uint32_t *n);

#endif
