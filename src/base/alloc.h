/*
 * alloc.h — the one allocator every part of tokenkv goes through.
 *
 * Having a single hook lets the tests make the n-th allocation fail and
 * check that every failure path returns TKV_ERR_NOMEM and leaks nothing.
 */
#ifndef TKV_ALLOC_H
#define TKV_ALLOC_H

#include <stddef.h>

/* Like malloc/calloc/realloc/free; NULL on failure (or on an injected one). */
void *tkv__malloc(size_t size);
void *tkv__calloc(size_t n, size_t size);
void *tkv__realloc(void *p, size_t size);
void tkv__free(void *p);

/* A 2 MiB page, the unit of tkv__advise_huge_pages. */
#define TKV__HUGE_PAGE ((size_t)2 << 20)

/*
 * Ask the kernel for transparent huge pages under the 2 MiB-aligned interior
 * of [p, p + bytes) (madvise MADV_HUGEPAGE), for memory that is streamed
 * (the packed weights, the read probe's buffer) or strided through (the K/V
 * rows): with 4 KiB pages such reads miss the TLB every 4 KiB, and the
 * hardware prefetchers stop at every page's end. Advice only: a kernel
 * without transparent huge pages, or with them off, ignores it, and nothing
 * depends on it; call it before the memory is first touched.
 */
void tkv__advise_huge_pages(void *p, size_t bytes);

/*
 * Bytes of memory this process may still take without pushing the machine
 * (or its container) into swap or the OOM killer: the least of
 * /proc/meminfo's MemAvailable and, where the process's cgroup (v2, or v1's
 * memory controller) or one above it sets a limit, that limit less the
 * group's usage. SIZE_MAX where none of them can be read (not Linux).
 * Reads a few small files; call it at load, not on hot paths.
 */
size_t tkv__mem_available(void);

/*
 * Test hook: the next `n` allocations succeed and every one after fails,
 * until tkv__alloc_fail_after(-1) turns injection off. Returns how many
 * allocations were made since the last call (lets a test count the
 * allocations of an operation, then fail each of them in turn).
 * Not thread-safe: tests only.
 */
long tkv__alloc_fail_after(long n);

#endif
