/*
 * test_params_abi.c — a program built against another header: its params
 * structs are shorter (an older header) or longer (a newer one). Each
 * _params_init writes exactly the caller's size (canary bytes after an
 * older struct stay untouched), records that size, and the call that reads
 * the struct takes the fields it has and defaults for the rest. The old
 * _default_params() returned the library's struct by value, with the
 * library's size: bytes past an older caller's struct were overwritten and
 * the size check never saw the caller's real size.
 *
 * The older layouts are declared here as such a header had them: the
 * fields up to some member of today's struct (checked with offsetof).
 */
#include "testutil.h"

#include "runtime/context.h"

#include <stddef.h>
#include <string.h>

enum { CANARY = 0xA5, PAD = 64 };

/* tkv_context_params as a header had it before batch_invariant. */
typedef struct old_context_params {
    uint32_t size;
    uint32_t n_cells;
    uint32_t n_seq_max;
    uint32_t n_batch;
    int n_threads;
    tkv_type kv_type;
    tkv_abort_fn abort_cb;
    void *abort_user;
} old_context_params;

/* tkv_model_params before repack. */
typedef struct old_model_params {
    uint32_t size;
    bool vocab_only;
} old_model_params;

/* tkv_sampler_params before the OpenAI penalties. */
typedef struct old_sampler_params {
    uint32_t size;
    float temperature;
    int32_t top_k;
    float top_p;
    float min_p;
    float repeat_penalty;
    int32_t repeat_last_n;
    uint64_t seed;
} old_sampler_params;

/* The old struct, then canary bytes: what lies after it in the caller's memory. */
typedef struct boxed_context {
    old_context_params p;
    unsigned char after[PAD];
} boxed_context;

static void assert_untouched(const unsigned char *p, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (p[i] != CANARY) fail_msg("byte %zu past the caller's struct was written (0x%02x)", i, p[i]);
}

static void test_layouts_are_prefixes(void **state) {
    (void)state;
    /* the older structs are today's up to a member: the test's premise */
    assert_int_equal(offsetof(old_context_params, abort_user), offsetof(tkv_context_params, abort_user));
    assert_true(sizeof(old_context_params) <= offsetof(tkv_context_params, batch_invariant) + sizeof(void *));
    assert_int_equal(offsetof(old_model_params, vocab_only), offsetof(tkv_model_params, vocab_only));
    assert_int_equal(offsetof(old_sampler_params, seed), offsetof(tkv_sampler_params, seed));
    assert_true(sizeof(old_context_params) < sizeof(tkv_context_params));
    assert_true(sizeof(old_sampler_params) < sizeof(tkv_sampler_params));
}

static void test_older_context_params(void **state) {
    (void)state;
    boxed_context box;
    memset(&box, CANARY, sizeof box);
    assert_int_equal(tkv_context_params_init((tkv_context_params *)&box.p, sizeof box.p), TKV_OK);
    assert_untouched(box.after, sizeof box.after);
    assert_untouched((unsigned char *)&box + sizeof box.p, sizeof box - sizeof box.p - sizeof box.after);
    assert_int_equal(box.p.size, sizeof box.p); /* the caller's size, not the library's */
    const tkv_context_params lib = tkv_context_default_params();
    assert_int_equal(box.p.n_cells, lib.n_cells);
    assert_int_equal(box.p.n_batch, lib.n_batch);
    assert_null(box.p.abort_cb);
    /* the library reads only what the caller has: the rest keeps its defaults */
    box.p.n_cells = 64;
    box.p.n_seq_max = 3;
    box.p.n_threads = 1;
    tkv_context *ctx;
    assert_int_equal(tkv_context_create(tu_model, (const tkv_context_params *)&box.p, &ctx), TKV_OK);
    assert_int_equal(ctx->params.n_cells, 64);
    assert_int_equal(ctx->params.n_seq_max, 3);
    assert_true(ctx->params.batch_invariant == lib.batch_invariant); /* a field the old header lacks */
    assert_int_equal(ctx->params.kv_type_v, lib.kv_type_v);
    assert_null(ctx->params.on_cache_event);
    assert_untouched(box.after, sizeof box.after);
    tkv_context_free(ctx);
}

static void test_newer_context_params(void **state) {
    (void)state;
    /* a newer header: today's struct and a field this library does not know */
    struct {
        tkv_context_params p;
        uint64_t newer_field;
    } big;
    memset(&big, CANARY, sizeof big);
    assert_int_equal(tkv_context_params_init(&big.p, sizeof big), TKV_OK);
    assert_int_equal(big.p.size, sizeof big);
    assert_int_equal(big.newer_field, 0); /* at its default */
    big.p.n_cells = 32;
    big.p.n_threads = 1;
    tkv_context *ctx;
    assert_int_equal(tkv_context_create(tu_model, &big.p, &ctx), TKV_OK);
    tkv_context_free(ctx);
    big.newer_field = 7; /* set: refused by name, never ignored */
    assert_int_equal(tkv_context_create(tu_model, &big.p, &ctx), TKV_ERR_INVALID);
    assert_null(ctx);
    assert_non_null(strstr(tkv_last_error(NULL), "does not know"));
}

static void test_bad_init(void **state) {
    (void)state;
    unsigned char buf[8];
    memset(buf, CANARY, sizeof buf);
    assert_int_equal(tkv_context_params_init((tkv_context_params *)buf, 3), TKV_ERR_INVALID);
    assert_untouched(buf, sizeof buf);
    assert_int_equal(tkv_context_params_init(NULL, sizeof(tkv_context_params)), TKV_ERR_INVALID);
    assert_int_equal(tkv_model_params_init((tkv_model_params *)buf, 0), TKV_ERR_INVALID);
    assert_int_equal(tkv_sampler_params_init((tkv_sampler_params *)buf, 2), TKV_ERR_INVALID);
    assert_untouched(buf, sizeof buf);
    /* a struct never filled in: its size is refused */
    tkv_context_params zero;
    memset(&zero, 0, sizeof zero);
    tkv_context *ctx;
    assert_int_equal(tkv_context_create(tu_model, &zero, &ctx), TKV_ERR_INVALID);
}

static void test_older_model_and_sampler_params(void **state) {
    (void)state;
    struct {
        old_model_params p;
        unsigned char after[PAD];
    } m;
    memset(&m, CANARY, sizeof m);
    assert_int_equal(tkv_model_params_init((tkv_model_params *)&m.p, sizeof m.p), TKV_OK);
    assert_untouched(m.after, sizeof m.after);
    assert_int_equal(m.p.size, sizeof m.p);
    assert_false(m.p.vocab_only);
    m.p.vocab_only = true;
    tkv_model *vocab;
    assert_int_equal(tkv_model_load(tu_shared("models/stories260K.gguf"), (const tkv_model_params *)&m.p, &vocab), TKV_OK);
    tkv_context *ctx = NULL;
    assert_int_equal(tkv_context_create(vocab, NULL, &ctx), TKV_ERR_INVALID); /* vocab only, as asked */
    tkv_model_free(vocab);

    struct {
        old_sampler_params p;
        unsigned char after[PAD];
    } s;
    memset(&s, CANARY, sizeof s);
    assert_int_equal(tkv_sampler_params_init((tkv_sampler_params *)&s.p, sizeof s.p), TKV_OK);
    assert_untouched(s.after, sizeof s.after);
    assert_int_equal(s.p.size, sizeof s.p);
    const tkv_sampler_params lib = tkv_sampler_default_params();
    assert_true(s.p.temperature == lib.temperature && s.p.top_k == lib.top_k);
    s.p.temperature = 0; /* greedy: the sampler takes the argmax */
    tkv_sampler *sm;
    assert_int_equal(tkv_sampler_create((const tkv_sampler_params *)&s.p, 4, &sm), TKV_OK);
    const float logits[4] = {0.1f, 3.0f, -1.0f, 2.0f};
    assert_int_equal(tkv_sampler_sample(sm, logits), 1);
    tkv_sampler_free(sm);
}

/* tkv_stats as first published (up to meta_bytes): a program built against that header. */
typedef struct stats_v1 {
    uint64_t f[12];
} stats_v1;

/* tkv_cache_stats writes only the first published fields; tkv_cache_stats_ex writes what the caller's size
   holds and nothing past it, and refuses a size under the first struct; the figures agree. */
static void test_stats_sizes(void **state) {
    (void)state;
    assert_int_equal(sizeof(stats_v1), offsetof(tkv_stats, meta_bytes) + sizeof(uint64_t));
    tkv_context *ctx = tu_context(tu_model, 64, 1, TKV_TYPE_F16);
    const tkv_token t[4] = {1, 20, 30, 40};
    assert_int_equal(tkv_seq_sync(ctx, 0, 0, t, 4, NULL), TKV_OK);
    unsigned char buf[sizeof(tkv_stats) + 16];
    memset(buf, 0xa5, sizeof buf);
    assert_int_equal(tkv_cache_stats(ctx, (tkv_stats *)(void *)buf), TKV_OK);
    for (size_t i = sizeof(stats_v1); i < sizeof buf; i++) assert_int_equal(buf[i], 0xa5);
    stats_v1 old;
    memcpy(&old, buf, sizeof old);
    assert_int_equal(old.f[1], 4); /* cells_used */
    memset(buf, 0xa5, sizeof buf);
    assert_int_equal(tkv_cache_stats_ex(ctx, (tkv_stats *)(void *)buf, sizeof(stats_v1) + 8), TKV_OK);
    assert_memory_equal(buf, &old, sizeof old);
    for (size_t i = sizeof(stats_v1) + 8; i < sizeof buf; i++) assert_int_equal(buf[i], 0xa5);
    tkv_stats all;
    assert_int_equal(tkv_cache_stats_ex(ctx, &all, sizeof all), TKV_OK);
    assert_memory_equal(&all, &old, sizeof old);
    memset(buf, 0xa5, sizeof buf);
    assert_int_equal(tkv_cache_stats_ex(ctx, (tkv_stats *)(void *)buf, sizeof(stats_v1) - 8), TKV_ERR_INVALID);
    assert_non_null(strstr(tkv_context_error(ctx), "size"));
    for (size_t i = 0; i < sizeof buf; i++) assert_int_equal(buf[i], 0xa5);
    tkv_context_free(ctx);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_layouts_are_prefixes),
        cmocka_unit_test(test_older_context_params),
        cmocka_unit_test(test_newer_context_params),
        cmocka_unit_test(test_bad_init),
        cmocka_unit_test(test_older_model_and_sampler_params),
        cmocka_unit_test(test_stats_sizes),
    };
    return TU_RESULT(cmocka_run_group_tests(tests, tu_stories_setup, tu_stories_teardown));
}
