/*
 * strmap.c — see strmap.h.
 */
#include "strmap.h"

#include "alloc.h"

#include <string.h>
#define XXH_INLINE_ALL /* hashing short keys: no call into the shared library */
#include <xxhash.h>

struct tkv__strmap_slot {
    const char *key; /* NULL: empty */
    uint32_t len;
    int32_t value;
};

tkv_status tkv__strmap_init(tkv__strmap *m, size_t n) {
    size_t cap = 16;
    while (cap < 2 * n + 1) cap *= 2;
    m->slots = tkv__calloc(cap, sizeof *m->slots);
    if (!m->slots) return TKV_ERR_NOMEM;
    m->cap = cap;
    m->n = 0;
    return TKV_OK;
}

void tkv__strmap_free(tkv__strmap *m) {
    tkv__free(m->slots);
    m->slots = NULL;
    m->cap = m->n = 0;
}

tkv_status tkv__strmap_put(tkv__strmap *m, const char *key, size_t len, int32_t value, int32_t *existing) {
    size_t i = (size_t)XXH3_64bits(key, len) & (m->cap - 1);
    for (;; i = (i + 1) & (m->cap - 1)) {
        struct tkv__strmap_slot *s = &m->slots[i];
        if (!s->key) break;
        if (s->len == len && !memcmp(s->key, key, len)) {
            if (existing) *existing = s->value;
            return TKV_OK;
        }
    }
    if (2 * (m->n + 1) > m->cap) return TKV_ERR_FULL;
    m->slots[i] = (struct tkv__strmap_slot){key, (uint32_t)len, value};
    m->n++;
    if (existing) *existing = -1;
    return TKV_OK;
}

int32_t tkv__strmap_get(const tkv__strmap *m, const char *key, size_t len) {
    if (!m->cap) return -1;
    size_t i = (size_t)XXH3_64bits(key, len) & (m->cap - 1);
    for (;; i = (i + 1) & (m->cap - 1)) {
        const struct tkv__strmap_slot *s = &m->slots[i];
        if (!s->key) return -1;
        if (s->len == len && !memcmp(s->key, key, len)) return s->value;
    }
}
