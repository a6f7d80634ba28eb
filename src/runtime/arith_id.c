/*
 * arith_id.c — the identity of the arithmetic a context computes with, for
 * records that are facts about it: a known token (kv/kvknown.c) is what a
 * sampler chose from this arithmetic's logits after a prefix, and a cache file that carries
 * such records (kv/cachefile.c, version 4) is read back by a context that
 * takes them only where its identity is the writer's.
 *
 * The identity hashes the build (TKV__SOURCE_ID: every library source, the
 * compiler and its flags; src/source_id.cmake) and the kernel level the
 * process runs (scalar, avx2, avx512: their products agree bit for bit, but
 * attention and the activations' exp do not), and it exists only for a
 * batch_invariant context: elsewhere a token's logits depend on its batch,
 * so no choice is a fact about the prefix alone. The model and the K/V
 * types are the file header's own checks.
 */
#include "context.h"

#include "compute/kernels.h"
#include "tkv_source_id.h"

#include <string.h>

#define XXH_STATIC_LINKING_ONLY
#include <xxhash.h>

uint64_t tkv__arith_id(const tkv_context *ctx) {
    if (!ctx->params.batch_invariant) return 0;
    static const char domain[] = "tokenkv arithmetic 1";
    XXH3_state_t st;
    XXH3_64bits_reset(&st);
    XXH3_64bits_update(&st, domain, sizeof domain);
    XXH3_64bits_update(&st, TKV__SOURCE_ID, sizeof TKV__SOURCE_ID);
    const char *level = tkv__kernel_level_name(tkv__kernel_level_active());
    XXH3_64bits_update(&st, level, strlen(level) + 1);
    const uint64_t id = XXH3_64bits_digest(&st);
    return id ? id : 1; /* 0 means none */
}
