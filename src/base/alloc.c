/*
 * alloc.c — allocation with failure injection for tests.
 */
#define _GNU_SOURCE /* MADV_HUGEPAGE */
#include "alloc.h"

#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>

/* Test-only state; -1 means "never fail". Production code never sets it. */
static long fail_budget = -1;
static long n_allocs = 0;

static int should_fail(void) {
    n_allocs++;
    if (fail_budget < 0) return 0;
    if (fail_budget == 0) return 1;
    fail_budget--;
    return 0;
}

void *tkv__malloc(size_t size) { return should_fail() ? NULL : malloc(size ? size : 1); }

void *tkv__calloc(size_t n, size_t size) {
    return should_fail() ? NULL : calloc(n ? n : 1, size ? size : 1);
}

void *tkv__realloc(void *p, size_t size) { return should_fail() ? NULL : realloc(p, size ? size : 1); }

void tkv__free(void *p) { free(p); }

long tkv__alloc_fail_after(long n) {
    long made = n_allocs;
    n_allocs = 0;
    fail_budget = n;
    return made;
}

void tkv__advise_huge_pages(void *p, size_t bytes) {
#ifdef MADV_HUGEPAGE
    const uintptr_t a = ((uintptr_t)p + TKV__HUGE_PAGE - 1) & ~(uintptr_t)(TKV__HUGE_PAGE - 1);
    const uintptr_t b = ((uintptr_t)p + bytes) & ~(uintptr_t)(TKV__HUGE_PAGE - 1);
    if (p && b > a) (void)madvise((void *)a, b - a, MADV_HUGEPAGE);
#else
    (void)p, (void)bytes;
#endif
}
