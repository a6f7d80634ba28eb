/*
 * test_probe.c — the machine-limit probes count what they claim to: the
 * read probe's checksum is the sum of every word of its buffer (computed
 * here from the words' formula), on any size and thread count; the int8
 * probe's accumulators count exactly threads x rounds x the level's
 * multiply-adds per round (each product is 1 x 1); each level's read loop
 * equals a plain sum on every length; tkv_limits_measure refuses bad
 * arguments by name and leaves out untouched. Rates are not asserted
 * (they depend on the machine and its load), only that they are positive.
 */
#include "testutil.h"

#include "base/alloc.h"
#include "compute/kernels.h"
#include "compute/probe.h"
#include "compute/threadpool.h"

#include <math.h>
#include <string.h>

static const tkv__probe_read_fn read_fns[TKV__KERNEL_LEVELS] = {
    tkv__probe_read_scalar,
#if defined(__x86_64__)
    tkv__probe_read_avx2,
#if !defined(TKV_NO_AVX512) /* the build's option: an empty AVX-512 level */
    tkv__probe_read_avx512,
#endif
#endif
};

static uint64_t expected_sum(size_t n_words) {
    uint64_t s = 0;
    for (size_t i = 0; i < n_words; i++) s += tkv__probe_word(i);
    return s;
}

/* every level's loop, every length 0..200 and a few long ones, from an aligned start */
static void test_read_loops_sum_every_word(void **state) {
    (void)state;
    const size_t cap = 5000;
    void *raw = tkv__malloc(cap * 8 + 64);
    assert_non_null(raw);
    uint64_t *w = (uint64_t *)(((uintptr_t)raw + 63) & ~(uintptr_t)63);
    for (size_t i = 0; i < cap; i++) w[i] = tkv__probe_word(i);
    for (int l = 0; l < TKV__KERNEL_LEVELS; l++) {
        if (l > (int)tkv__kernel_level_best() || !read_fns[l]) continue;
        for (size_t n = 0; n <= cap; n = n < 200 ? n + 1 : n * 3 + 7) {
            if (n > cap) break;
            assert_int_equal(read_fns[l](w, n), expected_sum(n));
        }
    }
    tkv__free(raw);
}

/* the pool's probe over buffers that do and do not split evenly, on 1-3 threads */
static void test_read_probe_checksum(void **state) {
    (void)state;
    static const size_t sizes[] = {64, 64 * 7, 65536, 65536 + 64 * 13, 1u << 20};
    for (int threads = 1; threads <= 3; threads++) {
        tkv__pool *pool = NULL;
        assert_int_equal(tkv__pool_create(threads, &pool), TKV_OK);
        for (int l = 0; l <= (int)tkv__kernel_level_best(); l++) {
            for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++) {
                tkv__probe_read_result r;
                assert_int_equal(tkv__probe_read(pool, (tkv__kernel_level)l, sizes[k] + 5, 2, &r), TKV_OK);
                assert_int_equal(r.checksum, expected_sum(sizes[k] / 8)); /* +5: rounded down to 64 bytes */
                assert_true(r.threads >= 1 && r.threads <= threads);
                assert_true(r.bytes_per_s > 0 && isfinite(r.bytes_per_s));
            }
        }
        tkv__pool_free(pool);
    }
}

static void test_int8_probe_counts_its_products(void **state) {
    (void)state;
    tkv__pool *pool = NULL;
    assert_int_equal(tkv__pool_create(2, &pool), TKV_OK);
    for (int l = 0; l <= (int)tkv__kernel_level_best(); l++) {
        static const uint64_t rounds[] = {0, 1, 7, 1000, 100003};
        for (size_t k = 0; k < sizeof rounds / sizeof *rounds; k++) {
            tkv__probe_int8_result r;
            tkv__probe_int8(pool, (tkv__kernel_level)l, rounds[k], 1, &r);
            assert_true(r.threads >= 1 && r.threads <= 2);
            assert_int_equal(r.macs, (uint64_t)r.threads * rounds[k] * tkv__probe_int8_per_round((tkv__kernel_level)l));
            assert_int_equal(r.macs, r.expected);
        }
        assert_non_null(tkv__probe_int8_instr((tkv__kernel_level)l));
    }
    tkv__pool_free(pool);
}

static void test_measure_public(void **state) {
    (void)state;
    tkv_limits lim;
    memset(&lim, 0xab, sizeof lim);
    const tkv_limits untouched = lim;
    assert_int_equal(tkv_limits_measure(1, 0, NULL, sizeof lim), TKV_ERR_INVALID);
    assert_non_null(strstr(tkv_last_error(NULL), "out is NULL"));
    assert_int_equal(tkv_limits_measure(1, 1 << 20, &lim, 4), TKV_ERR_INVALID);
    assert_non_null(strstr(tkv_last_error(NULL), "out_size"));
    assert_int_equal(tkv_limits_measure(-1, 1 << 20, &lim, sizeof lim), TKV_ERR_INVALID);
    assert_non_null(strstr(tkv_last_error(NULL), "n_threads"));
    assert_int_equal(tkv_limits_measure(1, 4096, &lim, sizeof lim), TKV_ERR_INVALID);
    assert_non_null(strstr(tkv_last_error(NULL), "buffer_bytes"));
    assert_memory_equal(&lim, &untouched, sizeof lim);

    assert_int_equal(tkv_limits_measure(2, 1 << 20, &lim, sizeof lim), TKV_OK);
    assert_true(lim.n_threads >= 1 && lim.n_threads <= 2);
    assert_string_equal(lim.level, tkv__kernel_level_name(tkv__kernel_level_active()));
    assert_int_equal(lim.read_bytes, 1 << 20);
    assert_true(lim.read_gbs > 0 && isfinite(lim.read_gbs));
    assert_true(lim.int8_gmacs > 0 && isfinite(lim.int8_gmacs));
    assert_non_null(lim.int8_instr);

    /* an older caller's struct (the first two fields): nothing written past it */
    unsigned char buf[sizeof(tkv_limits) + 8];
    memset(buf, 0x5a, sizeof buf);
    const size_t old = offsetof(tkv_limits, level) + sizeof(const char *);
    assert_int_equal(tkv_limits_measure(1, 1 << 16, (tkv_limits *)(void *)buf, old), TKV_OK);
    for (size_t i = old; i < sizeof buf; i++) assert_int_equal(buf[i], 0x5a);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_read_loops_sum_every_word),
        cmocka_unit_test(test_read_probe_checksum),
        cmocka_unit_test(test_int8_probe_counts_its_products),
        cmocka_unit_test(test_measure_public),
    };
    return TU_RESULT(cmocka_run_group_tests(tests, NULL, NULL));
}
