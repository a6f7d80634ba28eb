/*
 * persist_util.h — what the persistence tests (test_persist.c,
 * test_persist_dir.c) share: contexts over the stories model (testutil.h's
 * tu_model), token lists, temporary directories and their listings, a
 * snapshot of what a failed load must leave unchanged, and a cache filled
 * with shared prefixes in two namespaces.
 */
#ifndef TKV_TEST_PERSIST_UTIL_H
#define TKV_TEST_PERSIST_UTIL_H

#include "testutil.h"

#include "runtime/context.h"
#include "runtime/persist.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static inline tkv_context *new_ctx_of(const tkv_model *m, uint32_t n_cells, tkv_type kv_type) {
    return tu_context(m, n_cells, 8, kv_type);
}

static inline tkv_context *new_ctx(uint32_t n_cells) { return new_ctx_of(tu_model, n_cells, TKV_TYPE_F16); }

static inline void check(const tkv_context *ctx) {
    if (tkv_cache_check(ctx) != TKV_OK) fail_msg("%s", tkv_last_error(NULL));
}

static inline void sync(tkv_context *ctx, tkv_seq s, uint64_t ns, const tkv_token *t, size_t n) {
    size_t reused;
    if (tkv_seq_sync(ctx, s, ns, t, n, &reused) != TKV_OK) fail_msg("%s", tkv_last_error(ctx));
}

/* A list of n tokens: stem-dependent start, then a deterministic tail. */
static inline void list(tkv_token *t, size_t n, int stem, int tail) {
    for (size_t i = 0; i < n; i++) t[i] = (tkv_token)(i == 0 ? 1 : 3 + (stem * 37 + (i < 8 ? 0 : tail) * 11 + (int)i * 7) % 500);
}

static inline size_t match(const tkv_context *ctx, uint64_t ns, const tkv_token *t, size_t n) {
    size_t len;
    assert_int_equal(tkv_cache_match(ctx, ns, t, n, &len), TKV_OK);
    return len;
}

/* A fresh empty directory (static buffer). */
static const char *temp_dir(void) {
    static char d[64];
    assert_int_equal(tu_mkdtemp(d, "persist"), 0);
    return d;
}

static inline void remove_dir(const char *dir) { assert_int_equal(tu_rmtree(dir), 0); }

static inline void rmdir_if(const char *dir) {
    struct stat sb;
    if (stat(dir, &sb) == 0) remove_dir(dir);
}

/* Names of the files in dir but the manifest, sorted, into names[] (count returned); sizes summed into *bytes. */
static inline int list_dir(const char *dir, char names[][64], int cap, uint64_t *bytes) {
    DIR *d = opendir(dir);
    assert_non_null(d);
    int n = 0;
    if (bytes) *bytes = 0;
    for (struct dirent *de; (de = readdir(d));) {
        if (de->d_name[0] == '.' || !strcmp(de->d_name, "manifest")) continue;
        assert_true(n < cap);
        assert_true(strlen(de->d_name) < 64);
        memcpy(names[n++], de->d_name, strlen(de->d_name) + 1);
        if (bytes) {
            char p[512];
            struct stat sb;
            snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
            assert_int_equal(stat(p, &sb), 0);
            *bytes += (uint64_t)sb.st_size;
        }
    }
    closedir(d);
    qsort(names, (size_t)n, 64, (int (*)(const void *, const void *))strcmp);
    return n;
}

/* The file names DIR/manifest lists, in its order (most recently used first), into names[] (count returned). */
static inline int ranked(const char *dir, char names[][64], int cap) {
    char p[512];
    snprintf(p, sizeof p, "%s/manifest", dir);
    size_t size;
    char *text = (char *)tu_read_file(p, &size);
    assert_non_null(text);
    int n = 0;
    const char *line = strchr(text, '\n') + 1;
    while (line < text + size && strncmp(line, "checksum ", 9) != 0) {
        assert_true(n < cap);
        snprintf(names[n++], 64, "%.16s.tkvc", line);
        line += 17;
    }
    free(text);
    return n;
}

static inline void write_bytes(const char *path, const uint8_t *p, size_t n) {
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    if (n) assert_int_equal(fwrite(p, 1, n, f), n);
    fclose(f);
}

/* What must not change when a load fails. */
typedef struct snap {
    tkv_stats st;
    size_t n[4];
    tkv_token t[4][128];
} snap;

static inline void take_snap(const tkv_context *ctx, snap *s) {
    memset(s, 0, sizeof *s);
    assert_int_equal(tkv_cache_stats_ex(ctx, &s->st, sizeof s->st), TKV_OK);
    s->st.meta_bytes = 0; /* capacity reserved by a failed call is not content */
    for (int q = 0; q < 4; q++) assert_int_equal(tkv_seq_tokens(ctx, q, s->t[q], 128, &s->n[q]), TKV_OK);
}

static inline void assert_unchanged(const tkv_context *ctx, const snap *before) {
    check(ctx);
    snap now;
    take_snap(ctx, &now);
    assert_memory_equal(before, &now, sizeof now);
}

static inline void assert_error_has(const void *obj, const char *what) {
    const char *msg = tkv_last_error(obj);
    if (!strstr(msg, what)) fail_msg("error '%s' does not say '%s'", msg, what);
}


/* A cache with shared prefixes in two namespaces, some held, some not. */
enum { N_LISTS = 6, LEN = 40 };
static tkv_token lists[N_LISTS][LEN + 1];
static const uint64_t list_ns[N_LISTS] = {0, 0, 0, 9, 9, 0};

static inline tkv_context *filled_ctx(uint32_t n_cells) {
    tkv_context *ctx = new_ctx(n_cells);
    for (int i = 0; i < N_LISTS; i++) {
        list(lists[i], LEN + 1, i % 3, i); /* stems shared by i, i+3; tails differ after 8 */
        sync(ctx, i % 4, list_ns[i], lists[i], LEN);
    }
    tkv_seq_truncate(ctx, 1, 12); /* some of it held by no sequence */
    check(ctx);
    return ctx;
}

static inline uint64_t node_file_size(uint32_t depth, uint32_t n) {
    tkv__phdr h = {.n_layer = 5, .row_size = 64, .row_size_v = 64, .n_tokens = depth + n, .kv_from = depth};
    return tkv__cachefile_file_size(&h);
}

#endif
