/*
 * grow.h — arrays that grow by doubling, and a growing byte string: the
 * one place the library decides how a buffer grows (it was written again
 * in a dozen files).
 */
#ifndef TKV_GROW_H
#define TKV_GROW_H

#include "tokenkv_types.h"

#include <stddef.h>

/*
 * Grow the array p (cap elements of elem bytes, from tkv__malloc or NULL)
 * to hold at least `need` elements: its capacity doubles from cap (from
 * `min` when it is 0) until need fits, what it holds is kept. Returns the
 * array, *cap its new capacity; NULL when memory (or size_t) runs out, with
 * p still valid and *cap unchanged. need <= *cap returns p as it is.
 */
void *tkv__grow(void *p, size_t *cap, size_t need, size_t elem, size_t min);

/* A growing byte string: p[0..n) and a NUL after them once anything was put. */
typedef struct tkv__buf {
    char *p;
    size_t n, cap;
} tkv__buf;

/* Append n bytes of s (NULL: n zero bytes). TKV_ERR_NOMEM leaves b as it was (no message: the caller
   names what it was building). */
tkv_status tkv__buf_put(tkv__buf *b, const void *s, size_t n);

/* Free what b holds; b is then empty (and may be used again). */
void tkv__buf_free(tkv__buf *b);

#endif
