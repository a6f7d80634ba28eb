/*
 * strmap.h — a hash map from byte strings to int32 values.
 *
 * Open addressing with linear probing, XXH3 hashes. Keys are not copied:
 * they must outlive the map (the tokenizer's keys live in the model).
 * Built once, then read-only, so it is safe to share across threads.
 */
#ifndef TKV_STRMAP_H
#define TKV_STRMAP_H

#include "tokenkv_types.h"

#include <stddef.h>
#include <stdint.h>

typedef struct tkv__strmap {
    struct tkv__strmap_slot *slots;
    size_t cap; /* a power of two, at least twice the number of keys */
    size_t n;
} tkv__strmap;

/* Size the map for up to `n` keys. TKV_ERR_NOMEM on failure. */
tkv_status tkv__strmap_init(tkv__strmap *m, size_t n);
void tkv__strmap_free(tkv__strmap *m);

/*
 * Insert `key` (len bytes) with `value`. When the key is already present the
 * first value is kept and *existing (may be NULL) receives it; returns
 * TKV_ERR_FULL if the map is at the capacity it was sized for.
 */
tkv_status tkv__strmap_put(tkv__strmap *m, const char *key, size_t len, int32_t value, int32_t *existing);

/* The value of `key`, or -1 when absent. */
int32_t tkv__strmap_get(const tkv__strmap *m, const char *key, size_t len);

#endif
