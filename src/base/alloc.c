/*
 * alloc.c — allocation with failure injection for tests.
 */
#define _GNU_SOURCE /* MADV_HUGEPAGE */
#include "alloc.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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

/* The first number in the file at path, or SIZE_MAX when it cannot be read or is "max". */
static size_t read_number(const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) return SIZE_MAX;
    unsigned long long v;
    const int ok = fscanf(f, "%llu", &v) == 1;
    fclose(f);
    return ok && v < SIZE_MAX ? (size_t)v : SIZE_MAX;
}

/* MemAvailable of /proc/meminfo, in bytes (SIZE_MAX when absent). */
static size_t meminfo_available(void) {
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f) return SIZE_MAX;
    char line[128];
    size_t v = SIZE_MAX;
    unsigned long long kb;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1) {
            v = kb < SIZE_MAX / 1024 ? (size_t)kb * 1024 : SIZE_MAX;
            break;
        }
    fclose(f);
    return v;
}

/* The room under the limits of cgroup `group` (a path from /proc/self/cgroup) and every group above it, in the
   hierarchy mounted at `root`: the least of limit - usage (files `limit` and `usage`); SIZE_MAX without limits. */
static size_t cgroup_room(const char *root, const char *group, const char *limit, const char *usage) {
    char dir[512];
    if (snprintf(dir, sizeof dir, "%s%s", root, group) >= (int)sizeof dir) return SIZE_MAX;
    size_t room = SIZE_MAX;
    for (;;) {
        char path[600];
        snprintf(path, sizeof path, "%s/%s", dir, limit);
        const size_t lim = read_number(path);
        if (lim != SIZE_MAX && lim < ((size_t)1 << 60)) { /* v1 writes "no limit" as a number near 2^63 */
            snprintf(path, sizeof path, "%s/%s", dir, usage);
            const size_t used = read_number(path);
            const size_t left = used == SIZE_MAX ? lim : used >= lim ? 0 : lim - used;
            if (left < room) room = left;
        }
        char *slash = strrchr(dir, '/');
        if (!slash || (size_t)(slash - dir) < strlen(root)) break; /* the hierarchy's root: its files are the machine's */
        *slash = '\0';
    }
    return room;
}

size_t tkv__mem_available(void) {
    size_t room = meminfo_available();
    FILE *f = fopen("/proc/self/cgroup", "r");
    if (!f) return room;
    char line[512];
    while (fgets(line, sizeof line, f)) { /* "0::/path" (v2) or "N:memory:/path" (v1's memory controller) */
        line[strcspn(line, "\n")] = '\0';
        const char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        if (!c2) continue;
        size_t r = SIZE_MAX;
        if (c2 == c1 + 1 && !strncmp(line, "0:", 2))
            r = cgroup_room("/sys/fs/cgroup", c2 + 1, "memory.max", "memory.current");
        else if ((size_t)(c2 - c1 - 1) == strlen("memory") && !strncmp(c1 + 1, "memory", 6))
            r = cgroup_room("/sys/fs/cgroup/memory", c2 + 1, "memory.limit_in_bytes", "memory.usage_in_bytes");
        if (r < room) room = r;
    }
    fclose(f);
    return room;
}
