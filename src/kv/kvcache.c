/*
 * kvcache.c — see kvcache.h.
 */
#define _GNU_SOURCE /* MADV_HUGEPAGE */
#include "kvcache.h"

#include "base/alloc.h"
#include "base/error.h"
#include "compute/quant.h"

#include <stdint.h>
#include <string.h>
#include <sys/mman.h>

/*
 * Ask for 2 MiB pages under the K/V rows: attention reads each sequence's
 * cells, strided through every layer's rows, and with 4 KiB pages a decode
 * step of a few sequences misses the TLB on nearly every row. Only the
 * 2 MiB-aligned interior qualifies; a kernel without transparent huge pages
 * ignores the advice, and nothing depends on it.
 */
static void advise_huge_pages(void *p, size_t bytes) {
#ifdef MADV_HUGEPAGE
    const uintptr_t huge = (uintptr_t)2 << 20, a = ((uintptr_t)p + huge - 1) & ~(huge - 1);
    const uintptr_t b = ((uintptr_t)p + bytes) & ~(huge - 1);
    if (p && b > a) (void)madvise((void *)a, b - a, MADV_HUGEPAGE);
#else
    (void)p, (void)bytes;
#endif
}

tkv_status tkv__kv_create(uint32_t n_cells, uint32_t n_layer, uint32_t n_embd_kv, tkv_type type, uint32_t n_seq,
                          tkv__kvcache **out) {
    if (type != TKV_TYPE_F16 && type != TKV_TYPE_F32 && type != TKV_TYPE_Q8_0)
        return tkv__fail(TKV_ERR_UNSUPPORTED, "KV cache type %s is not supported (F16, F32, Q8_0)",
                         tkv_type_name(type) ? tkv_type_name(type) : "?");
    if (type == TKV_TYPE_Q8_0 && n_embd_kv % 32)
        return tkv__fail(TKV_ERR_UNSUPPORTED, "KV cache type Q8_0 needs K/V rows of a multiple of 32 (this model: %u)",
                         n_embd_kv);
    if (!n_cells || !n_seq) return tkv__fail(TKV_ERR_INVALID, "KV cache: n_cells and n_seq_max must be > 0");
    tkv__kvcache *kv = tkv__calloc(1, sizeof *kv);
    if (!kv) return tkv__fail(TKV_ERR_NOMEM, "out of memory for the KV cache");
    kv->rows.type = type;
    kv->rows.n_cells = n_cells;
    kv->rows.n_layer = n_layer;
    kv->rows.n_embd_kv = n_embd_kv;
    kv->rows.row_size = tkv__quant_row_size(type, n_embd_kv);
    size_t bytes = (size_t)n_layer * n_cells * kv->rows.row_size;
    kv->rows.k = tkv__malloc(bytes);
    kv->rows.v = tkv__malloc(bytes);
    advise_huge_pages(kv->rows.k, bytes);
    advise_huge_pages(kv->rows.v, bytes);
    kv->token = tkv__malloc(n_cells * sizeof *kv->token);
    kv->pos = tkv__malloc(n_cells * sizeof *kv->pos);
    kv->free = tkv__malloc(n_cells * sizeof *kv->free);
    kv->seq = tkv__calloc(n_seq, sizeof *kv->seq);
    kv->n_seq = n_seq;
    if (!kv->rows.k || !kv->rows.v || !kv->token || !kv->pos || !kv->free || !kv->seq) {
        tkv__kv_free(kv);
        return tkv__fail(TKV_ERR_NOMEM, "out of memory for a KV cache of %u cells (%zu bytes)", n_cells, 2 * bytes);
    }
    for (uint32_t i = 0; i < n_cells; i++) {
        kv->token[i] = TKV_TOKEN_NULL;
        kv->pos[i] = -1;
        kv->free[i] = n_cells - 1 - i; /* low cells first */
    }
    kv->n_free = n_cells;
    *out = kv;
    return TKV_OK;
}

void tkv__kv_free(tkv__kvcache *kv) {
    if (!kv) return;
    if (kv->seq)
        for (uint32_t s = 0; s < kv->n_seq; s++) tkv__free(kv->seq[s].cells);
    tkv__free(kv->seq);
    tkv__free(kv->rows.k);
    tkv__free(kv->rows.v);
    tkv__free(kv->rows.vk);
    tkv__free(kv->rows.vv);
    tkv__free(kv->token);
    tkv__free(kv->pos);
    tkv__free(kv->free);
    tkv__free(kv);
}

tkv_status tkv__kv_reserve_virtual(tkv__kvcache *kv, uint32_t n) {
    if (n <= kv->rows.cap_virtual) return TKV_OK;
    size_t bytes = (size_t)kv->rows.n_layer * n * kv->rows.row_size;
    uint8_t *vk = tkv__malloc(bytes), *vv = tkv__malloc(bytes);
    if (!vk || !vv) {
        tkv__free(vk);
        tkv__free(vv);
        return tkv__fail(TKV_ERR_NOMEM, "out of memory staging %u tokens while the cache is full", n);
    }
    tkv__free(kv->rows.vk);
    tkv__free(kv->rows.vv);
    kv->rows.vk = vk;
    kv->rows.vv = vv;
    kv->rows.cap_virtual = n;
    return TKV_OK;
}

void tkv__kv_take(tkv__kvcache *kv, uint32_t n, uint32_t *out) {
    for (uint32_t i = 0; i < n; i++) out[i] = kv->free[--kv->n_free];
}

void tkv__kv_give_back(tkv__kvcache *kv, const uint32_t *cells, uint32_t n) {
    for (uint32_t i = n; i-- > 0;) {
        if (cells[i] >= kv->rows.n_cells) continue; /* virtual: nothing to give back */
        kv->token[cells[i]] = TKV_TOKEN_NULL;
        kv->pos[cells[i]] = -1;
        kv->free[kv->n_free++] = cells[i];
    }
}

void tkv__kv_copy(tkv__kvcache *kv, uint32_t from, uint32_t to) {
    for (uint32_t l = 0; l < kv->rows.n_layer; l++) {
        memcpy(tkv__kv_k(kv, l, to), tkv__kv_k(kv, l, from), kv->rows.row_size);
        memcpy(tkv__kv_v(kv, l, to), tkv__kv_v(kv, l, from), kv->rows.row_size);
    }
}

tkv_status tkv__kv_seq_reserve(tkv__kvcache *kv, tkv_seq seq, uint32_t extra) {
    tkv__kvseq *s = &kv->seq[seq];
    if (s->n + extra <= s->cap) return TKV_OK;
    uint32_t cap = s->cap ? s->cap : 64;
    while (cap < s->n + extra) cap *= 2;
    uint32_t *cells = tkv__realloc(s->cells, cap * sizeof *cells);
    if (!cells) return tkv__fail(TKV_ERR_NOMEM, "out of memory growing sequence %d to %u cells", (int)seq, cap);
    s->cells = cells;
    s->cap = cap;
    return TKV_OK;
}
