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

#endif
