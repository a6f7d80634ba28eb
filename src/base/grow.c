/*
 * grow.c — see grow.h.
 */
#include "grow.h"

#include "alloc.h"

#include <stdint.h>
#include <string.h>

void *tkv__grow(void *p, size_t *cap, size_t need, size_t elem, size_t min) {
    if (need <= *cap) return p;
    size_t c = *cap ? *cap : (min ? min : 1);
    while (c < need) {
        if (c > SIZE_MAX / 2) return NULL;
        c *= 2;
    }
    if (elem && c > SIZE_MAX / elem) return NULL;
    void *q = tkv__realloc(p, c * elem);
    if (!q) return NULL;
    *cap = c;
    return q;
}

tkv_status tkv__buf_put(tkv__buf *b, const void *s, size_t n) {
    if (n > SIZE_MAX - b->n - 1) return TKV_ERR_NOMEM;
    char *p = tkv__grow(b->p, &b->cap, b->n + n + 1, 1, 64);
    if (!p) return TKV_ERR_NOMEM;
    b->p = p;
    if (s) memcpy(b->p + b->n, s, n);
    else memset(b->p + b->n, 0, n);
    b->n += n;
    b->p[b->n] = '\0';
    return TKV_OK;
}

void tkv__buf_free(tkv__buf *b) {
    tkv__free(b->p);
    *b = (tkv__buf){0};
}
