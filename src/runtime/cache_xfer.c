/*
 * cache_xfer.c — a cached prefix as bytes, and back: tkv_cache_export writes
 * the cache-file image of a prefix (tokens 0..n, K/V of kv_from..n) into a
 * caller's buffer; tkv_cache_import puts such an image into the cache after
 * checking that it holds exactly the prefix the caller asked for.
 *
 * A shared store (the server's Redis tier) keeps these images under keys
 * derived from the tokens; the key promises tokens, namespace and range,
 * and import checks the image keeps that promise on top of the file checks
 * (checksums, fingerprint, KV type, geometry: kv/cachefile.c's parser, the
 * one fuzz/fuzz_cachefile exercises), so a corrupt or foreign value is
 * refused, never used.
 */
#include "persist.h"

#include "base/alloc.h"
#include "base/error.h"

#include <string.h>

static tkv_status cache_export(tkv_context *ctx, uint64_t ns, const tkv_token *tokens, size_t n_tokens, size_t kv_from,
                               void *buf, size_t cap, size_t *size) {
    if (!ctx || !tokens || !size || (!buf && cap))
        return tkv__ctx_fail(ctx, tkv__fail(TKV_ERR_INVALID, "tkv_cache_export: NULL argument"));
    tkv_status st;
    if (n_tokens == 0 || kv_from >= n_tokens)
        return tkv__ctx_fail(ctx, tkv__fail(TKV_ERR_INVALID,
                                            "tkv_cache_export: K/V from position %zu of a %zu-token prefix (need "
                                            "kv_from < n_tokens)",
                                            kv_from, n_tokens));
    if (n_tokens > ctx->kv->rows.n_cells)
        return tkv__ctx_fail(ctx, tkv__fail(TKV_ERR_INVALID, "tkv_cache_export: %zu tokens, more than the %u cells",
                                            n_tokens, ctx->kv->rows.n_cells));
    tkv__phdr h;
    if ((st = tkv__persist_header(ctx, &h))) return tkv__ctx_fail(ctx, st);
    h.ns = ns, h.n_tokens = (uint32_t)n_tokens, h.kv_from = (uint32_t)kv_from;
    uint32_t *cells = tkv__malloc(n_tokens * sizeof *cells);
    if (!cells) return tkv__ctx_fail(ctx, tkv__fail(TKV_ERR_NOMEM, "tkv_cache_export: out of memory"));
    const size_t cached = tkv__kv_match_cells(ctx->kv, ns, tokens, n_tokens, cells);
    if (cached == n_tokens) tkv__cachefile_count_extras(ctx->kv, &h, cells + kv_from); /* checkpoints, known tokens */
    const uint64_t need = tkv__cachefile_file_size(&h);
    *size = (size_t)need;
    if (cached < n_tokens) st = tkv__fail(TKV_ERR_INVALID, "tkv_cache_export: only %zu of the %zu tokens are cached",
                                          cached, n_tokens);
    else if (cap < need) st = tkv__fail(TKV_ERR_FULL, "tkv_cache_export: the image needs %llu bytes, the buffer has %zu",
                                        (unsigned long long)need, cap);
    else tkv__cachefile_encode(ctx->kv, &h, tokens, cells + kv_from, buf);
    tkv__free(cells);
    return st ? tkv__ctx_fail(ctx, st) : TKV_OK;
}

tkv_status tkv_cache_export(tkv_context *ctx, uint64_t ns, const tkv_token *tokens, size_t n_tokens, size_t kv_from,
                            void *buf, size_t cap, size_t *size) {
    TKV__GUARDED(ctx, "tkv_cache_export", cache_export(ctx, ns, tokens, n_tokens, kv_from, buf, cap, size));
}

static tkv_status cache_import(tkv_context *ctx, uint64_t ns, const tkv_token *tokens, size_t n_tokens, size_t kv_from,
                               const void *image, size_t size) {
    if (!ctx || !tokens || (!image && size))
        return tkv__ctx_fail(ctx, tkv__fail(TKV_ERR_INVALID, "tkv_cache_import: NULL argument"));
    tkv_status st;
    tkv__pexpect e;
    tkv__prec rec;
    if ((st = tkv__persist_expect(ctx, &e))) return tkv__ctx_fail(ctx, st);
    if ((st = tkv__cachefile_parse("import", image, size, &e, &rec))) return tkv__ctx_fail(ctx, st);
    /* what the caller's key promised: the same namespace, range and tokens */
    if (rec.h.ns != ns || rec.h.n_tokens != n_tokens || rec.h.kv_from != kv_from)
        return tkv__ctx_fail(ctx, tkv__fail(TKV_ERR_INVALID,
                                            "tkv_cache_import: the image holds %u tokens (K/V from %u) of namespace "
                                            "%016llx, not the %zu (from %zu) of %016llx asked for",
                                            rec.h.n_tokens, rec.h.kv_from, (unsigned long long)rec.h.ns, n_tokens,
                                            kv_from, (unsigned long long)ns));
    for (size_t i = 0; i < n_tokens; i++)
        if (tkv__cachefile_token(&rec, (uint32_t)i) != tokens[i])
            return tkv__ctx_fail(ctx, tkv__fail(TKV_ERR_INVALID,
                                                "tkv_cache_import: token %zu of the image is %d, not the %d asked for", i,
                                                (int)tkv__cachefile_token(&rec, (uint32_t)i), (int)tokens[i]));
    /* parsed twice (here and in the load): a checksum pass costs far less than the copy into the cells */
    st = tkv__persist_load_image(ctx, "import", image, size, -1);
    return st ? tkv__ctx_fail(ctx, st) : TKV_OK;
}

tkv_status tkv_cache_import(tkv_context *ctx, uint64_t ns, const tkv_token *tokens, size_t n_tokens, size_t kv_from,
                            const void *image, size_t size) {
    TKV__GUARDED(ctx, "tkv_cache_import", cache_import(ctx, ns, tokens, n_tokens, kv_from, image, size));
}
