/*
 * test_cache_xfer.c — tkv_cache_export / tkv_cache_import (runtime/cache_xfer.c):
 * a prefix exported block by block from one context and imported into a
 * fresh one gives the same logits bit for bit; an export image equals the
 * file tkv_seq_save writes; images with other tokens, namespace, range,
 * KV type or model, or with any byte changed, are refused and the cache
 * is unchanged; a block whose prefix is not cached is refused; the size
 * query and a short buffer report the size.
 */
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static tkv_context *new_ctx_of(uint32_t n_cells, tkv_type kv_type) { return tu_context(tu_model, n_cells, 4, kv_type); }

static void list(tkv_token *t, size_t n, int stem) {
    for (size_t i = 0; i < n; i++) t[i] = (tkv_token)(i == 0 ? 1 : 3 + (stem * 37 + (int)i * 7) % 500);
}

static size_t match(const tkv_context *ctx, uint64_t ns, const tkv_token *t, size_t n) {
    size_t len;
    assert_int_equal(tkv_cache_match(ctx, ns, t, n, &len), TKV_OK);
    return len;
}

/* The image of tokens[0..n), K/V from kv_from, in a malloc'd buffer. */
static uint8_t *export(tkv_context *ctx, uint64_t ns, const tkv_token *t, size_t n, size_t from, size_t *size) {
    assert_int_equal(tkv_cache_export(ctx, ns, t, n, from, NULL, 0, size), TKV_ERR_FULL);
    uint8_t *img = malloc(*size);
    size_t again;
    assert_int_equal(tkv_cache_export(ctx, ns, t, n, from, img, *size, &again), TKV_OK);
    assert_int_equal(again, *size);
    return img;
}

/* Blocks of 8 tokens exported from a and imported into b in order: the same logits as a's next decode. */
static void test_blocks_roundtrip(void **state) {
    (void)state;
    const tkv_type types[] = {TKV_TYPE_F16, TKV_TYPE_Q8_0};
    for (size_t k = 0; k < 2; k++) {
        tkv_context *a = new_ctx_of(128, types[k]), *b = new_ctx_of(128, types[k]);
        tkv_token t[33];
        list(t, 33, 1);
        size_t reused;
        assert_int_equal(tkv_seq_sync(a, 0, 9, t, 32, &reused), TKV_OK);
        assert_int_equal(tkv_seq_clear(a, 0), TKV_OK); /* cached, held by nobody: still exportable */
        for (size_t blk = 0; blk < 4; blk++) {
            size_t size;
            uint8_t *img = export(a, 9, t, 8 * (blk + 1), 8 * blk, &size);
            assert_int_equal(tkv_cache_import(b, 9, t, 8 * (blk + 1), 8 * blk, img, size), TKV_OK);
            assert_int_equal(match(b, 9, t, 32), 8 * (blk + 1));
            free(img);
        }
        assert_int_equal(tkv_cache_check(b), TKV_OK);
        assert_int_equal(match(b, 0, t, 32), 0); /* its namespace only */
        size_t ra, rb;
        assert_int_equal(tkv_seq_sync(a, 0, 9, t, 33, &ra), TKV_OK);
        assert_int_equal(tkv_seq_sync(b, 1, 9, t, 33, &rb), TKV_OK);
        assert_int_equal(ra, 32);
        assert_int_equal(rb, 32);
        assert_memory_equal(tkv_get_logits_last(a), tkv_get_logits_last(b), tu_n_vocab * sizeof(float));
        tkv_context_free(a);
        tkv_context_free(b);
    }
}

/* kv_from 0 gives byte for byte the file tkv_seq_save writes. */
static void test_same_as_file(void **state) {
    (void)state;
    tkv_context *a = new_ctx_of(64, TKV_TYPE_F16);
    tkv_token t[20];
    list(t, 20, 2);
    size_t reused, size, fsize;
    assert_int_equal(tkv_seq_sync(a, 0, 3, t, 20, &reused), TKV_OK);
    char path[] = "/tmp/tkv-xfer-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    assert_int_equal(tkv_seq_save(a, 0, path), TKV_OK);
    uint8_t *file = tu_read_file(path, &fsize), *img = export(a, 3, t, 20, 0, &size);
    unlink(path);
    assert_int_equal(size, fsize);
    assert_memory_equal(img, file, size);
    free(file);
    free(img);
    tkv_context_free(a);
}

static void assert_refused(tkv_context *b, uint64_t ns, const tkv_token *t, size_t n, size_t from, const uint8_t *img,
                           size_t size, tkv_status want, const char *says) {
    tkv_stats before, after;
    assert_int_equal(tkv_cache_stats_ex(b, &before, sizeof before), TKV_OK);
    const size_t had = match(b, ns, t, n);
    assert_int_equal(tkv_cache_import(b, ns, t, n, from, img, size), want);
    if (!strstr(tkv_last_error(b), says)) fail_msg("error '%s' does not say '%s'", tkv_last_error(b), says);
    assert_int_equal(tkv_cache_stats_ex(b, &after, sizeof after), TKV_OK);
    assert_int_equal(before.cells_used, after.cells_used);
    assert_int_equal(match(b, ns, t, n), had); /* nothing of the refused block */
    assert_int_equal(tkv_cache_check(b), TKV_OK);
}

/* Whatever the key promised must be what the image holds; any changed byte is refused. */
static void test_refusals(void **state) {
    (void)state;
    tkv_context *a = new_ctx_of(64, TKV_TYPE_F16), *b = new_ctx_of(64, TKV_TYPE_F16), *q = new_ctx_of(64, TKV_TYPE_Q8_0);
    tkv_token t[16], u[16];
    list(t, 16, 3);
    list(u, 16, 3);
    u[12] = (tkv_token)(u[12] + 1); /* same first block, another second */
    size_t reused, size, size0;
    assert_int_equal(tkv_seq_sync(a, 0, 5, t, 16, &reused), TKV_OK);
    uint8_t *img0 = export(a, 5, t, 8, 0, &size0), *img = export(a, 5, t, 16, 8, &size);
    /* the second block before the first is cached: its prefix is missing */
    assert_refused(b, 5, t, 16, 8, img, size, TKV_ERR_INVALID, "not cached");
    assert_int_equal(tkv_cache_import(b, 5, t, 8, 0, img0, size0), TKV_OK);
    assert_refused(b, 5, u, 16, 8, img, size, TKV_ERR_INVALID, "token 12");
    assert_refused(b, 6, t, 16, 8, img, size, TKV_ERR_INVALID, "namespace");
    assert_refused(b, 5, t, 16, 0, img, size, TKV_ERR_INVALID, "K/V from");
    assert_refused(q, 5, t, 8, 0, img0, size0, TKV_ERR_INVALID, "KV type");
    assert_refused(b, 5, t, 16, 8, img, size - 1, TKV_ERR_FORMAT, "truncated");
    assert_refused(b, 5, t, 16, 8, NULL, 0, TKV_ERR_FORMAT, "truncated");
    for (size_t i = 0; i < size; i += 97) { /* a byte of every part: magic, tokens, each K and V block */
        img[i] ^= 0x10;
        assert_refused(b, 5, t, 16, 8, img, size, TKV_ERR_FORMAT, "");
        img[i] ^= 0x10;
    }
    assert_int_equal(tkv_cache_import(b, 5, t, 16, 8, img, size), TKV_OK);
    assert_int_equal(match(b, 5, t, 16), 16);
    /* export refuses what is not cached, and a short buffer */
    size_t need;
    uint8_t small[8];
    assert_int_equal(tkv_cache_export(a, 5, u, 16, 8, NULL, 0, &need), TKV_ERR_INVALID);
    assert_int_equal(tkv_cache_export(a, 5, t, 16, 16, NULL, 0, &need), TKV_ERR_INVALID);
    assert_int_equal(tkv_cache_export(a, 5, t, 16, 8, small, sizeof small, &need), TKV_ERR_FULL);
    assert_int_equal(need, size);
    free(img0);
    free(img);
    tkv_context_free(a);
    tkv_context_free(b);
    tkv_context_free(q);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_blocks_roundtrip),
        cmocka_unit_test(test_same_as_file),
        cmocka_unit_test(test_refusals),
    };
    return cmocka_run_group_tests(tests, tu_stories_setup, tu_stories_teardown);
}
