/*
 * test_persist.c — saving and loading the cache (runtime/persist.c, kv/cachefile.c,
 * fingerprint.c): a saved sequence loads into a fresh context with the same
 * tokens and gives the same logits bit for bit; a saved cache loads back
 * into every namespace; files of another model, KV type or version,
 * truncated at every length, or with a bit flipped anywhere are refused with
 * a message naming the problem and the cache unchanged; injected allocation
 * failures change nothing; max_bytes and most-recently-used-first order are
 * respected; a directory with bad files loads the good ones. The directory
 * as an attack surface and saves that fail part way are
 * test_persist_dir.c's; the helpers both share are persist_util.h's.
 */
#include "testutil.h"
#include "persist_util.h"

#include "base/alloc.h"
#include "runtime/context.h"
#include "runtime/persist.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- one sequence ------------------------------------------------------- */

/* save -> load into a fresh context: same tokens, same logits bit for bit */
static void test_seq_roundtrip(void **state) {
    (void)state;
    const tkv_type types[] = {TKV_TYPE_F16, TKV_TYPE_F32, TKV_TYPE_Q8_0};
    const char *dir = temp_dir();
    char path[128];
    snprintf(path, sizeof path, "%s/seq.tkvc", dir);
    for (size_t k = 0; k < sizeof types / sizeof types[0]; k++) {
        tkv_context *a = new_ctx_of(tu_model, 256, types[k]), *b = new_ctx_of(tu_model, 256, types[k]);
        tkv_token t[41];
        list(t, 41, 1, 2);
        sync(a, 0, 7, t, 40);
        assert_int_equal(tkv_seq_save(a, 0, path), TKV_OK);
        assert_int_equal(tkv_seq_load(b, 3, path), TKV_OK);
        check(b);
        tkv_token got[64];
        size_t n;
        assert_int_equal(tkv_seq_tokens(b, 3, got, 64, &n), TKV_OK);
        assert_int_equal(n, 40);
        assert_memory_equal(got, t, 40 * sizeof *t);
        assert_int_equal(match(b, 7, t, 40), 40);
        assert_int_equal(match(b, 0, t, 40), 0); /* its namespace only */
        /* decode the same next token in both: the K/V it attends to must be the same bits */
        size_t ra, rb;
        assert_int_equal(tkv_seq_sync(a, 0, 7, t, 41, &ra), TKV_OK);
        assert_int_equal(tkv_seq_sync(b, 3, 7, t, 41, &rb), TKV_OK);
        assert_int_equal(ra, 40);
        assert_int_equal(rb, 40);
        assert_memory_equal(tkv_get_logits_last(a), tkv_get_logits_last(b), tu_n_vocab * sizeof(float));
        check(b);
        tkv_context_free(a);
        tkv_context_free(b);
    }
    remove_dir(dir);
}

/* Loading where part of the prefix is cached keeps the cached cells; the
   sequence's old tokens may be evicted for room; a load that cannot fit
   changes nothing. */
static void test_seq_load_shares_and_evicts(void **state) {
    (void)state;
    const char *dir = temp_dir();
    char path[128], empty[128];
    snprintf(path, sizeof path, "%s/seq.tkvc", dir);
    snprintf(empty, sizeof empty, "%s/empty.tkvc", dir);
    tkv_token x[40], y[40];
    list(x, 40, 1, 2);
    list(y, 40, 2, 3);
    tkv_context *a = new_ctx(64);
    sync(a, 0, 0, x, 40);
    assert_int_equal(tkv_seq_save(a, 0, path), TKV_OK);
    assert_int_equal(tkv_seq_save(a, 5, empty), TKV_OK); /* an empty sequence */
    tkv_context_free(a);

    tkv_context *b = new_ctx(64);
    sync(b, 0, 0, x, 20); /* half of it cached */
    assert_int_equal(tkv_seq_load(b, 1, path), TKV_OK);
    check(b);
    tkv_stats st;
    tkv_cache_stats_ex(b, &st, sizeof st);
    assert_int_equal(st.cells_used, 40); /* 20 shared, 20 loaded */
    assert_true(st.cells_shared >= 20);
    tkv_context_free(b);
    char other[128];
    snprintf(other, sizeof other, "%s/y.tkvc", dir);
    tkv_context *c = new_ctx(64);
    sync(c, 0, 0, y, 40);
    assert_int_equal(tkv_seq_save(c, 0, other), TKV_OK);
    tkv_context_free(c);

    /* a full cache: the load needs cells no one can give */
    tkv_context *d = new_ctx(64);
    sync(d, 0, 0, x, 40);
    sync(d, 1, 0, y, 24);
    snap before;
    take_snap(d, &before);
    assert_int_equal(tkv_seq_load(d, 2, other), TKV_ERR_FULL); /* 16 cells needed, none free or evictable */
    assert_error_has(d, "cells needed");
    assert_unchanged(d, &before);
    /* into seq 0: its own 40 cells of x become evictable, so y fits */
    assert_int_equal(tkv_seq_load(d, 0, other), TKV_OK);
    check(d);
    tkv_token got[64];
    size_t n;
    assert_int_equal(tkv_seq_tokens(d, 0, got, 64, &n), TKV_OK);
    assert_int_equal(n, 40);
    assert_memory_equal(got, y, sizeof y);
    /* an empty file empties the sequence */
    assert_int_equal(tkv_seq_load(d, 0, empty), TKV_OK);
    assert_int_equal(tkv_seq_len(d, 0), 0);
    check(d);
    /* bad arguments */
    assert_int_equal(tkv_seq_load(d, 99, path), TKV_ERR_INVALID);
    assert_int_equal(tkv_seq_save(d, -1, path), TKV_ERR_INVALID);
    assert_int_equal(tkv_seq_load(d, 0, NULL), TKV_ERR_INVALID);
    assert_int_equal(tkv_seq_load(NULL, 0, path), TKV_ERR_INVALID);
    assert_int_equal(tkv_seq_load(d, 0, "/nonexistent/x.tkvc"), TKV_ERR_IO);
    assert_error_has(d, "/nonexistent/x.tkvc");
    assert_int_equal(tkv_seq_save(d, 0, "/nonexistent/x.tkvc"), TKV_ERR_IO);
    tkv_context_free(d);
    remove_dir(dir);
}

/* ---- refusals ------------------------------------------------------------- */

/* A small valid image: 5 tokens of seq 0 (3,424 bytes). */
static uint8_t *small_image(size_t *size) {
    const char *dir = temp_dir();
    char path[128];
    snprintf(path, sizeof path, "%s/small.tkvc", dir);
    tkv_context *a = new_ctx(64);
    tkv_token t[5];
    list(t, 5, 4, 0);
    sync(a, 0, 3, t, 5);
    assert_int_equal(tkv_seq_save(a, 0, path), TKV_OK);
    tkv_context_free(a);
    uint8_t *img = tu_read_file(path, size);
    assert_non_null(img);
    remove_dir(dir);
    return img;
}

/* A context with some content, to check that failures leave it alone. */
static tkv_context *busy_ctx(void) {
    tkv_context *ctx = new_ctx(128);
    tkv_token t[30];
    list(t, 30, 5, 1);
    sync(ctx, 0, 0, t, 30);
    sync(ctx, 1, 3, t, 12);
    tkv_seq_truncate(ctx, 0, 20);
    return ctx;
}

static void test_other_model_and_kv_type(void **state) {
    (void)state;
    size_t size;
    uint8_t *img = small_image(&size);
    const char *dir = temp_dir();
    char path[128];
    snprintf(path, sizeof path, "%s/f.tkvc", dir);
    write_bytes(path, img, size);

    /* fingerprints: stable, and different for different models */
    uint64_t fa[2], fb[2], fc[2], fd[2];
    assert_int_equal(tkv_model_fingerprint(tu_model, fa), TKV_OK);
    tkv_model *again, *llama, *tiny, *tiny32;
    assert_int_equal(tkv_model_load(tu_shared("models/stories260K.gguf"), NULL, &again), TKV_OK);
    assert_int_equal(tkv_model_fingerprint(again, fb), TKV_OK);
    assert_memory_equal(fa, fb, sizeof fa);
    tkv_model_free(again);
    assert_int_equal(tkv_model_load(tu_shared("models/llama-2-tiny-random.gguf"), NULL, &llama), TKV_OK);
    assert_int_equal(tkv_model_fingerprint(llama, fc), TKV_OK);
    assert_memory_not_equal(fa, fc, sizeof fa);
    uint8_t *ti, *ti32;
    size_t tn, tn32;
    tu_tiny_model(NULL, &ti, &tn);
    tu_tiny_opts o = {.n_vocab = 32};
    tu_tiny_model(&o, &ti32, &tn32);
    assert_int_equal(tkv_model_load_from_memory(ti, tn, NULL, &tiny), TKV_OK);
    assert_int_equal(tkv_model_load_from_memory(ti32, tn32, NULL, &tiny32), TKV_OK);
    assert_int_equal(tkv_model_fingerprint(tiny, fb), TKV_OK);
    assert_int_equal(tkv_model_fingerprint(tiny32, fd), TKV_OK);
    assert_memory_not_equal(fb, fd, sizeof fb);
    assert_memory_not_equal(fa, fb, sizeof fa);
    assert_int_equal(tkv_model_fingerprint(NULL, fa), TKV_ERR_INVALID);
    /* any byte of any weight: one bit of an exponent, at every 97th byte of a tensor (was: only sampled spans) */
    {
        size_t n;
        uint8_t *file = tu_read_file(tu_shared("models/stories260K.gguf"), &n);
        tkv_model *orig;
        assert_int_equal(tkv_model_load_from_memory(file, n, NULL, &orig), TKV_OK);
        uint64_t f0[2], f1[2];
        assert_int_equal(tkv_model_fingerprint(orig, f0), TKV_OK);
        tkv_tensor_info w;
        assert_int_equal(tkv_model_tensor_find(orig, "blk.2.ffn_down.weight", &w), TKV_OK);
        const uint64_t at = w.offset + w.n_bytes / 2 + 3; /* the high byte of an F32 in the middle */
        tkv_model_free(orig);
        for (uint64_t k = at; k < at + 97 * 8; k += 97) {
            file[k] ^= 0x40;
            tkv_model *flipped;
            assert_int_equal(tkv_model_load_from_memory(file, n, NULL, &flipped), TKV_OK);
            assert_int_equal(tkv_model_fingerprint(flipped, f1), TKV_OK);
            assert_memory_not_equal(f0, f1, sizeof f0);
            tkv_model_fingerprint(flipped, fb); /* the second call gives the kept result */
            assert_memory_equal(f1, fb, sizeof f1);
            tkv_model_free(flipped);
            file[k] ^= 0x40;
        }
        free(file);
    }

    /* a file from another model */
    const tkv_model *others[] = {llama, tiny};
    for (int k = 0; k < 2; k++) {
        tkv_context *ctx = new_ctx_of(others[k], 64, TKV_TYPE_F32);
        tkv_token t[3] = {1, 2, 3};
        sync(ctx, 0, 0, t, 3);
        snap before;
        take_snap(ctx, &before);
        assert_int_equal(tkv_seq_load(ctx, 1, path), TKV_ERR_INVALID);
        assert_error_has(ctx, "model fingerprint differs (file from another model");
        assert_error_has(ctx, "f.tkvc");
        assert_unchanged(ctx, &before);
        tkv_cache_load_info info;
        assert_int_equal(tkv_cache_load_ex(ctx, dir, &info), TKV_OK);
        assert_int_equal(info.files_loaded, 0);
        assert_int_equal(info.files_skipped, 1);
        assert_non_null(strstr(info.first_skip_reason, "model fingerprint differs"));
        assert_unchanged(ctx, &before);
        tkv_context_free(ctx);
    }
    tkv_model_free(llama);
    tkv_model_free(tiny);
    tkv_model_free(tiny32);
    free(ti);
    free(ti32);

    /* another KV type */
    const tkv_type types[] = {TKV_TYPE_F32, TKV_TYPE_Q8_0};
    for (int k = 0; k < 2; k++) {
        tkv_context *ctx = new_ctx_of(tu_model, 64, types[k]);
        snap before;
        take_snap(ctx, &before);
        assert_int_equal(tkv_seq_load(ctx, 0, path), TKV_ERR_INVALID);
        assert_error_has(ctx, "KV types K F16, V F16 differ from the context's");
        assert_error_has(ctx, k ? "Q8_0" : "F32");
        assert_unchanged(ctx, &before);
        tkv_context_free(ctx);
    }
    /* a context too small for the file */
    tkv_context *tiny_ctx = new_ctx(4);
    assert_int_equal(tkv_seq_load(tiny_ctx, 0, path), TKV_ERR_FULL);
    assert_error_has(tiny_ctx, "more than the context's 4 cells");
    tkv_context_free(tiny_ctx);
    free(img);
    remove_dir(dir);
}

/* Load an image (from memory) into ctx's seq 2; it must fail with `want`
   and a message saying `what`, and change nothing. */
static void refused(tkv_context *ctx, const uint8_t *img, size_t size, tkv_status want, const char *what) {
    snap before;
    take_snap(ctx, &before);
    tkv_status st = tkv__persist_load_image(ctx, "img", img, size, 2);
    if (st != want) fail_msg("status %s, expected %s: %s", tkv_status_str(st), tkv_status_str(want), tkv_last_error(NULL));
    if (what) assert_error_has(NULL, what);
    assert_unchanged(ctx, &before);
}

static void test_version_magic_and_fields(void **state) {
    (void)state;
    size_t size;
    uint8_t *img = small_image(&size);
    assert_int_equal(size, 96 + 5 * 8 + 8 + 2 * 5 * (5 * 64 + 8));
    uint8_t *w = malloc(size);
    tkv_context *ctx = busy_ctx();
    /* the image loads as it is */
    assert_int_equal(tkv__persist_load_image(ctx, "img", img, size, 2), TKV_OK);
    assert_int_equal(tkv_seq_len(ctx, 2), 5);
    tkv_seq_clear(ctx, 2);
    check(ctx);

    struct {
        size_t at;
        unsigned bytes;
        uint64_t value;
        tkv_status st;
        const char *what;
    } cases[] = {
        {0, 1, 'X', TKV_ERR_FORMAT, "bad magic"},
        {8, 4, 5, TKV_ERR_UNSUPPORTED, "format version 5 is not supported"},
        {8, 4, 4, TKV_ERR_FORMAT, "its K/V and counts need"}, /* version 4's counts block is missing */
        {8, 4, 3, TKV_ERR_INVALID, "holds recurrent states, and this model has none"}, /* checkpoints: hybrids only */
        {12, 4, 128, TKV_ERR_FORMAT, "header size"},
        {16, 8, 12345, TKV_ERR_INVALID, "model fingerprint differs"},
        {32, 4, TKV_TYPE_F32, TKV_ERR_INVALID, "KV types K F32, V F16 differ"},
        {80, 4, TKV_TYPE_Q8_0, TKV_ERR_INVALID, "KV types K F16, V Q8_0 differ"},
        {84, 4, 65, TKV_ERR_INVALID, "geometry differs"},
        {36, 4, 4, TKV_ERR_INVALID, "geometry differs"},
        {44, 4, 513, TKV_ERR_INVALID, "geometry differs"},
        {48, 8, 65, TKV_ERR_INVALID, "geometry differs"},
        {64, 4, 100000, TKV_ERR_FULL, "more than the context's"},
        {64, 4, 6, TKV_ERR_FORMAT, "truncated"},
        {64, 4, 4, TKV_ERR_FORMAT, "bytes after the end"},
        {68, 4, 6, TKV_ERR_FORMAT, "K/V from position 6"},
        {96 + 4, 4, 512, TKV_ERR_FORMAT, "token 1: id 512 is out of range"},
        {96 + 8, 4, (uint32_t)-1, TKV_ERR_FORMAT, "id -1 is out of range"},
        {96 + 20 + 8, 4, 3, TKV_ERR_FORMAT, "token 2 is at position 3"},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        memcpy(w, img, size);
        tu_put(w, cases[k].at, cases[k].value, cases[k].bytes);
        tkv__cachefile_reseal(w, size);
        refused(ctx, w, size, cases[k].st, cases[k].what);
        assert_error_has(NULL, "cache file 'img'");
    }
    /* version 1 (before K and V could differ): bytes 80..87 zero, V as K; it loads, and a non-zero byte there
       is refused */
    memcpy(w, img, size);
    tu_put(w, 8, 1, 4);
    tu_put(w, 80, 0, 8);
    tkv__cachefile_reseal(w, size);
    assert_int_equal(tkv__persist_load_image(ctx, "img", w, size, 2), TKV_OK);
    assert_int_equal(tkv_seq_len(ctx, 2), 5);
    tkv_seq_clear(ctx, 2);
    tu_put(w, 80, 1, 8);
    tkv__cachefile_reseal(w, size);
    refused(ctx, w, size, TKV_ERR_FORMAT, "reserved");
    /* a K/V block: named by number, layer and half */
    memcpy(w, img, size);
    w[96 + 48 + 10] ^= 1;
    refused(ctx, w, size, TKV_ERR_FORMAT, "block 2 (layer 0 K) checksum mismatch");
    memcpy(w, img, size);
    w[size - 9] ^= 0x80;
    refused(ctx, w, size, TKV_ERR_FORMAT, "block 11 (layer 4 V) checksum mismatch");
    memcpy(w, img, size);
    w[96] ^= 4;
    refused(ctx, w, size, TKV_ERR_FORMAT, "block 1 (tokens) checksum mismatch");
    memcpy(w, img, size);
    w[70] ^= 4;
    refused(ctx, w, size, TKV_ERR_FORMAT, "block 0 (header) checksum mismatch");
    /* blocks cannot be swapped: checksums are seeded with the block number */
    memcpy(w, img, size);
    const size_t blk = 5 * 64 + 8, kv0 = 96 + 48;
    memcpy(w + kv0, img + kv0 + blk, blk);
    memcpy(w + kv0 + blk, img + kv0, blk);
    refused(ctx, w, size, TKV_ERR_FORMAT, "block 2 (layer 0 K) checksum mismatch");
    tkv_context_free(ctx);
    free(w);
    free(img);
}

/* Every truncation length: refused, the cache unchanged. */
static void test_truncated(void **state) {
    (void)state;
    size_t size;
    uint8_t *img = small_image(&size);
    tkv_context *ctx = busy_ctx();
    const char *dir = temp_dir();
    char path[128];
    snprintf(path, sizeof path, "%s/t.tkvc", dir);
    for (size_t n = 0; n < size; n++) {
        uint8_t *cut = malloc(n ? n : 1);
        memcpy(cut, img, n);
        refused(ctx, cut, n, TKV_ERR_FORMAT, n < 96 ? "shorter than the 96-byte header" : "truncated");
        if (n % 61 == 0) { /* and through a file, now and then */
            write_bytes(path, cut, n);
            snap before;
            take_snap(ctx, &before);
            assert_int_equal(tkv_seq_load(ctx, 2, path), TKV_ERR_FORMAT);
            assert_error_has(ctx, "truncated");
            assert_unchanged(ctx, &before);
        }
        free(cut);
    }
    /* one byte too many */
    uint8_t *big = calloc(size + 1, 1);
    memcpy(big, img, size);
    refused(ctx, big, size + 1, TKV_ERR_FORMAT, "1 bytes after the end");
    free(big);
    tkv_context_free(ctx);
    free(img);
    remove_dir(dir);
}

/* A bit flipped at every byte (a different bit each time): refused. */
static void test_flipped_bits(void **state) {
    (void)state;
    size_t size;
    uint8_t *img = small_image(&size);
    tkv_context *ctx = busy_ctx();
    for (size_t at = 0; at < size; at++) {
        img[at] ^= (uint8_t)(1u << (at % 8));
        snap before;
        take_snap(ctx, &before);
        assert_int_not_equal(tkv__persist_load_image(ctx, "img", img, size, 2), TKV_OK);
        const char *msg = tkv_last_error(NULL);
        if (!strstr(msg, "checksum mismatch") && !strstr(msg, "bad magic") && !strstr(msg, "format version"))
            fail_msg("offset %zu: unexpected message '%s'", at, msg);
        assert_unchanged(ctx, &before);
        img[at] ^= (uint8_t)(1u << (at % 8));
    }
    assert_int_equal(tkv__persist_load_image(ctx, "img", img, size, 2), TKV_OK);
    check(ctx);
    tkv_context_free(ctx);
    free(img);
}

/* ---- the whole cache ------------------------------------------------------ */
static void test_cache_roundtrip(void **state) {
    (void)state;
    const char *dir = temp_dir();
    tkv_context *a = filled_ctx(512);
    tkv_stats sa;
    tkv_cache_stats_ex(a, &sa, sizeof sa);
    assert_int_equal(tkv_cache_save(a, dir, 0), TKV_OK);
    char names[64][64];
    int n_files = list_dir(dir, names, 64, NULL);
    assert_int_equal(n_files, (int)sa.nodes);
    for (int i = 0; i < n_files; i++) assert_non_null(strstr(names[i], ".tkvc"));

    tkv_context *b = new_ctx(512);
    tkv_cache_load_info info;
    assert_int_equal(tkv_cache_load_ex(b, dir, &info), TKV_OK);
    assert_int_equal(info.files_loaded, n_files);
    assert_int_equal(info.files_skipped, 0);
    assert_int_equal(info.tokens_loaded, sa.cells_used);
    assert_string_equal(info.first_skip_reason, "");
    check(b);
    tkv_stats sb;
    tkv_cache_stats_ex(b, &sb, sizeof sb);
    assert_int_equal(sb.cells_used, sa.cells_used);
    assert_int_equal(sb.cells_evictable, sb.cells_used); /* nobody holds them */
    for (int i = 0; i < N_LISTS; i++) {
        assert_int_equal(match(b, list_ns[i], lists[i], LEN), match(a, list_ns[i], lists[i], LEN));
        assert_int_equal(match(b, list_ns[i] ^ 1, lists[i], LEN), 0);
    }
    /* the same logits from the loaded cache as from the computed one */
    for (int i = 0; i < N_LISTS; i++) {
        size_t n = match(a, list_ns[i], lists[i], LEN), ra, rb;
        assert_int_equal(tkv_seq_sync(a, 5, list_ns[i], lists[i], n + 1, &ra), TKV_OK);
        assert_int_equal(tkv_seq_sync(b, 5, list_ns[i], lists[i], n + 1, &rb), TKV_OK);
        assert_int_equal(ra, n);
        assert_int_equal(rb, n);
        assert_memory_equal(tkv_get_logits_last(a), tkv_get_logits_last(b), tu_n_vocab * sizeof(float));
        tkv_seq_truncate(a, 5, (tkv_pos)n);
        tkv_seq_truncate(b, 5, (tkv_pos)n);
    }
    tkv_seq_clear(b, 5);
    tkv_cache_clear(b);
    assert_int_equal(tkv_cache_load_ex(b, dir, &info), TKV_OK);
    /* loading again: everything is cached already, nothing new */
    tkv_cache_stats_ex(b, &sb, sizeof sb);
    assert_int_equal(tkv_cache_load_ex(b, dir, &info), TKV_OK);
    assert_int_equal(info.files_loaded, n_files);
    assert_int_equal(info.tokens_loaded, 0);
    tkv_stats sb2;
    tkv_cache_stats_ex(b, &sb2, sizeof sb2);
    assert_int_equal(sb2.cells_used, sb.cells_used);
    check(b);
    /* saving again, with less, replaces the files of the first save */
    tkv_context *c = new_ctx(512);
    sync(c, 0, 0, lists[0], LEN);
    assert_int_equal(tkv_cache_save(c, dir, 0), TKV_OK);
    assert_int_equal(list_dir(dir, names, 64, NULL), 1);
    tkv_context_free(c);
    /* bad arguments */
    assert_int_equal(tkv_cache_save(b, NULL, 0), TKV_ERR_INVALID);
    assert_int_equal(tkv_cache_load(b, NULL), TKV_ERR_INVALID);
    assert_int_equal(tkv_cache_load(NULL, dir), TKV_ERR_INVALID);
    assert_int_equal(tkv_cache_load(b, "/nonexistent/dir"), TKV_ERR_IO);
    assert_error_has(b, "/nonexistent/dir");
    tkv_context_free(a);
    tkv_context_free(b);
    remove_dir(dir);
}

/* Prefixes p[0..3], one node each, used in the order 0, 1, 3, 2 (2 most recent). */
static tkv_context *four_prefixes(tkv_token p[4][LEN], const int *len) {
    tkv_context *ctx = new_ctx(512);
    for (int i = 0; i < 4; i++) {
        list(p[i], (size_t)len[i], 10 + i, 0);
        p[i][0] = (tkv_token)(100 + i); /* distinct first tokens: separate trees */
    }
    const int order[4] = {0, 1, 3, 2};
    for (int k = 0; k < 4; k++) {
        sync(ctx, 0, 0, p[order[k]], (size_t)len[order[k]]);
        tkv_seq_clear(ctx, 0);
    }
    return ctx;
}

static void test_max_bytes_mru(void **state) {
    (void)state;
    tkv_token p[4][LEN];
    const int len[4] = {10, 20, 30, 40};
    tkv_context *a = four_prefixes(p, len);
    const char *dir = temp_dir();
    /* room for the two most recent (2 then 3) and not for 1 (the next); 0 fits after it */
    const uint64_t budget = node_file_size(0, 30) + node_file_size(0, 40) + node_file_size(0, 10) + 100;
    assert_int_equal(tkv_cache_save(a, dir, budget), TKV_OK);
    char names[16][64];
    uint64_t bytes;
    int n = list_dir(dir, names, 16, &bytes);
    assert_int_equal(n, 3);
    assert_true(bytes <= budget);
    /* rank order: 2 first, then 3, then 0 (1 did not fit, 0 did) */
    tkv_context *b = new_ctx(512);
    tkv_cache_load_info info;
    assert_int_equal(tkv_cache_load_ex(b, dir, &info), TKV_OK);
    assert_int_equal(info.files_loaded, 3);
    assert_int_equal(match(b, 0, p[2], 30), 30);
    assert_int_equal(match(b, 0, p[3], 40), 40);
    assert_int_equal(match(b, 0, p[0], 10), 10);
    assert_int_equal(match(b, 0, p[1], 20), 0);
    char path[128];
    assert_int_equal(ranked(dir, names, 16), 3);
    snprintf(path, sizeof path, "%s/%s", dir, names[0]); /* rank 0 */
    tkv_context *c = new_ctx(512);
    assert_int_equal(tkv_seq_load(c, 0, path), TKV_OK);
    assert_int_equal(tkv_seq_len(c, 0), 30); /* prefix 2 */
    tkv_context_free(c);
    /* eviction order after loading follows the saved one: 0 goes first, then 3 */
    tkv_token big[LEN];
    list(big, LEN, 20, 0);
    big[0] = 200;
    tkv_context_free(b);
    b = new_ctx(100); /* 80 loaded, 20 free */
    assert_int_equal(tkv_cache_load_ex(b, dir, &info), TKV_OK);
    assert_int_equal(info.files_loaded, 3);
    sync(b, 0, 0, big, 25); /* 5 evicted: the end of prefix 0 (the least recently used) */
    assert_int_equal(match(b, 0, p[0], 10), 5);
    assert_int_equal(match(b, 0, p[2], 30), 30);
    assert_int_equal(match(b, 0, p[3], 40), 40);
    tkv_context_free(b);

    /* a budget below every file writes nothing */
    assert_int_equal(tkv_cache_save(a, dir, 100), TKV_OK);
    assert_int_equal(list_dir(dir, names, 16, NULL), 0);

    /* a parent and its child: the child (more recent) never goes without its parent */
    tkv_context_free(a);
    a = new_ctx(512);
    tkv_token t[LEN];
    list(t, LEN, 30, 0);
    sync(a, 0, 0, t, 35);
    tkv_seq_truncate(a, 0, 30); /* a node of 30 and its child of 5 */
    assert_int_equal(tkv_cache_save(a, dir, 10000), TKV_OK);
    assert_int_equal(list_dir(dir, names, 16, NULL), 0); /* the parent does not fit: the child does, but not alone */
    assert_int_equal(tkv_cache_save(a, dir, node_file_size(0, 30) + node_file_size(30, 5)), TKV_OK);
    assert_int_equal(list_dir(dir, names, 16, NULL), 2);
    assert_int_equal(ranked(dir, names, 16), 2);
    snprintf(path, sizeof path, "%s/%s", dir, names[0]);
    size_t size;
    uint8_t *img = tu_read_file(path, &size);
    assert_int_equal(size, node_file_size(0, 30)); /* rank 0 is the parent */
    free(img);
    tkv_context_free(a);
    remove_dir(dir);
}

static void corrupt_file(const char *path, size_t at) {
    size_t size;
    uint8_t *img = tu_read_file(path, &size);
    assert_non_null(img);
    assert_true(at < size);
    img[at] ^= 0x10;
    write_bytes(path, img, size);
    free(img);
}

static void truncate_file(const char *path, size_t keep) {
    size_t size;
    uint8_t *img = tu_read_file(path, &size);
    assert_non_null(img);
    write_bytes(path, img, keep < size ? keep : size);
    free(img);
}

/* Bad files in a directory are skipped and counted; the good ones load. */
static void test_corrupt_directory(void **state) {
    (void)state;
    tkv_token p[4][LEN];
    const int len[4] = {10, 20, 30, 40};
    tkv_context *a = four_prefixes(p, len);
    const char *dir = temp_dir();
    assert_int_equal(tkv_cache_save(a, dir, 0), TKV_OK);
    char names[16][64], path[256];
    assert_int_equal(list_dir(dir, names, 16, NULL), 4);
    assert_int_equal(ranked(dir, names, 16), 4); /* rank order: prefixes 2, 3, 1, 0 */
    snprintf(path, sizeof path, "%s/%s", dir, names[1]);
    corrupt_file(path, 5000);
    snprintf(path, sizeof path, "%s/%s", dir, names[3]);
    truncate_file(path, 500);
    snprintf(path, sizeof path, "%s/garbage.tkvc", dir);
    write_bytes(path, (const uint8_t *)"not a cache file at all", 23);
    /* being written by a live process (pid 1 always runs): ignored and kept */
    snprintf(path, sizeof path, "%s/zz-leftover.tkvc.tmp.1", dir);
    write_bytes(path, (const uint8_t *)"half", 4);
    /* left by a writer that died (no process has this id): ignored, and
       removed by the next save */
    snprintf(path, sizeof path, "%s/zz-orphan.tkvc.tmp.2147480000", dir);
    write_bytes(path, (const uint8_t *)"half", 4);
    snprintf(path, sizeof path, "%s/notes.txt", dir); /* not ours: ignored */
    write_bytes(path, (const uint8_t *)"x", 1);
    /* a file of another model */
    uint8_t *ti;
    size_t tn;
    tu_tiny_model(NULL, &ti, &tn);
    tkv_model *tiny;
    assert_int_equal(tkv_model_load_from_memory(ti, tn, NULL, &tiny), TKV_OK);
    tkv_context *t = new_ctx_of(tiny, 16, TKV_TYPE_F16);
    tkv_token tt[3] = {1, 2, 3};
    sync(t, 0, 0, tt, 3);
    snprintf(path, sizeof path, "%s/other-model.tkvc", dir);
    assert_int_equal(tkv_seq_save(t, 0, path), TKV_OK);
    tkv_context_free(t);
    tkv_model_free(tiny);
    free(ti);

    tkv_context *b = new_ctx(512);
    tkv_cache_load_info info;
    assert_int_equal(tkv_cache_load_ex(b, dir, &info), TKV_OK);
    assert_int_equal(info.files_loaded, 2);
    assert_int_equal(info.files_skipped, 4);
    assert_true(info.first_skip_reason[0] != '\0');
    assert_int_equal(info.tokens_loaded, 30 + 20);
    check(b);
    assert_int_equal(match(b, 0, p[2], 30), 30);
    assert_int_equal(match(b, 0, p[1], 20), 20);
    assert_int_equal(match(b, 0, p[3], 40), 0);
    assert_int_equal(match(b, 0, p[0], 10), 0);
    tkv_context_free(b);

    /* a parent that fails takes its children with it */
    tkv_context_free(a);
    a = new_ctx(512);
    tkv_token q[LEN];
    list(q, LEN, 31, 0);
    sync(a, 0, 0, q, LEN);
    tkv_seq_truncate(a, 0, 20); /* two nodes */
    assert_int_equal(tkv_cache_save(a, dir, 0), TKV_OK);
    /* 2 nodes, and the 4 foreign files; the dead writer's half file is gone */
    assert_int_equal(list_dir(dir, names, 16, NULL), 6);
    snprintf(path, sizeof path, "%s/zz-orphan.tkvc.tmp.2147480000", dir);
    assert_int_equal(access(path, F_OK), -1);
    snprintf(path, sizeof path, "%s/zz-leftover.tkvc.tmp.1", dir);
    assert_int_equal(access(path, F_OK), 0);
    assert_int_equal(ranked(dir, names, 16), 2);
    snprintf(path, sizeof path, "%s/%s", dir, names[0]); /* rank 0: the parent */
    corrupt_file(path, 200);
    b = new_ctx(512);
    assert_int_equal(tkv_cache_load_ex(b, dir, &info), TKV_OK);
    assert_int_equal(info.files_loaded, 0);
    assert_int_equal(info.files_skipped, 4); /* the parent, its child, garbage, other model */
    check(b);
    assert_int_equal(match(b, 0, q, LEN), 0);
    /* with the parent cached by other means, the child loads */
    sync(b, 0, 0, q, 20);
    assert_int_equal(tkv_cache_load_ex(b, dir, &info), TKV_OK);
    assert_int_equal(info.files_loaded, 1);
    assert_int_equal(info.tokens_loaded, 20);
    assert_int_equal(match(b, 0, q, LEN), LEN);
    check(b);
    tkv_context_free(b);
    tkv_context_free(a);
    remove_dir(dir);
}

/* Too little room: cached prefixes no one holds are evicted for the files;
   files loaded by the call are not, so the most recent ones win. */
static void test_load_under_pressure(void **state) {
    (void)state;
    tkv_token p[4][LEN];
    const int len[4] = {10, 20, 30, 40};
    tkv_context *a = four_prefixes(p, len);
    const char *dir = temp_dir();
    assert_int_equal(tkv_cache_save(a, dir, 0), TKV_OK);
    tkv_context_free(a);
    tkv_context *b = new_ctx(80);
    tkv_token x[LEN], y[LEN];
    list(x, LEN, 40, 0);
    list(y, LEN, 41, 0);
    x[0] = 300, y[0] = 301;
    sync(b, 0, 0, x, 30); /* held: stays */
    sync(b, 1, 0, y, 25);
    tkv_seq_clear(b, 1); /* cached, evictable */
    tkv_cache_load_info info;
    assert_int_equal(tkv_cache_load_ex(b, dir, &info), TKV_OK);
    check(b);
    /* 50 cells can be had: 2 (30) fits, 3 (40) does not, 1 (20) fits, 0 (10) does not */
    assert_int_equal(info.files_loaded, 2);
    assert_int_equal(info.files_skipped, 2);
    assert_non_null(strstr(info.first_skip_reason, "cells needed"));
    assert_int_equal(match(b, 0, p[2], 30), 30);
    assert_int_equal(match(b, 0, p[1], 20), 20);
    assert_int_equal(match(b, 0, p[3], 40), 0);
    assert_int_equal(match(b, 0, x, 30), 30);
    assert_int_equal(match(b, 0, y, 25), 0);
    tkv_stats st;
    tkv_cache_stats_ex(b, &st, sizeof st);
    assert_int_equal(st.cells_pinned, 0);
    assert_int_equal(st.evictions, 25);
    tkv_context_free(b);
    remove_dir(dir);
}

/* ---- allocation failures ---------------------------------------------------- */

static void test_alloc_failures(void **state) {
    (void)state;
    const char *dir0 = temp_dir();
    char dir[64], path[128];
    snprintf(dir, sizeof dir, "%s", dir0);
    snprintf(path, sizeof path, "%s/seq.tkvc", dir);
    tkv_context *a = filled_ctx(256);
    assert_int_equal(tkv_seq_save(a, 0, path), TKV_OK);
    char cdir[128];
    snprintf(cdir, sizeof cdir, "%s/cache", dir);
    assert_int_equal(tkv_cache_save(a, cdir, 0), TKV_OK);
    char sdir[128];
    snprintf(sdir, sizeof sdir, "%s/save", dir);

    for (int what = 0; what < 4; what++) {
        /* count the allocations of a successful call */
        tkv_context *ctx = busy_ctx();
        rmdir_if(sdir); /* the same starting point each time: no stale files to remove */
        tkv__alloc_fail_after(-1);
        tkv_status st = what == 0   ? tkv_seq_load(ctx, 3, path)
                        : what == 1 ? tkv_cache_load(ctx, cdir)
                        : what == 2 ? tkv_seq_save(ctx, 0, path)
                                    : tkv_cache_save(ctx, sdir, 0);
        long count = tkv__alloc_fail_after(-1);
        assert_int_equal(st, TKV_OK);
        assert_true(count > 0);
        tkv_context_free(ctx);
        for (long i = 0; i < count; i++) {
            ctx = busy_ctx();
            snap before;
            take_snap(ctx, &before);
            rmdir_if(sdir);
            tkv__alloc_fail_after(i);
            st = what == 0   ? tkv_seq_load(ctx, 3, path)
                 : what == 1 ? tkv_cache_load(ctx, cdir)
                 : what == 2 ? tkv_seq_save(ctx, 0, path)
                             : tkv_cache_save(ctx, sdir, 0);
            tkv__alloc_fail_after(-1);
            if (st != TKV_ERR_NOMEM) fail_msg("call %d, allocation %ld of %ld: %s", what, i, count, tkv_status_str(st));
            assert_error_has(ctx, "out of memory");
            assert_unchanged(ctx, &before);
            tkv_context_free(ctx);
        }
    }
    tkv_context_free(a);
    remove_dir(cdir);
    rmdir_if(sdir);
    remove_dir(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_seq_roundtrip),
        cmocka_unit_test(test_seq_load_shares_and_evicts),
        cmocka_unit_test(test_other_model_and_kv_type),
        cmocka_unit_test(test_version_magic_and_fields),
        cmocka_unit_test(test_truncated),
        cmocka_unit_test(test_flipped_bits),
        cmocka_unit_test(test_cache_roundtrip),
        cmocka_unit_test(test_max_bytes_mru),
        cmocka_unit_test(test_corrupt_directory),
        cmocka_unit_test(test_load_under_pressure),
        cmocka_unit_test(test_alloc_failures),
    };
    return cmocka_run_group_tests(tests, tu_stories_setup, tu_stories_teardown);
}
