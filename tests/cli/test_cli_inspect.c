/*
 * test_cli_inspect.c — `tokenkv inspect` as a user runs it: real processes,
 * facts checked against the models' README and against an independent walk
 * of each file; corrupt files give a non-zero exit and one line on stderr.
 */
#include "testutil.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static json_t *inspect_json(const char *path) {
    char args[1024];
    snprintf(args, sizeof args, "inspect --json '%s'", path);
    tu_run_result r = tu_run(args);
    if (r.status != 0) fail_msg("inspect %s: exit %d: %s", path, r.status, r.err);
    json_error_t e;
    json_t *j = json_loads(r.out, 0, &e);
    if (!j) fail_msg("inspect --json %s: not JSON: %s", path, e.text);
    tu_run_free(&r);
    return j;
}

static long long jint(json_t *o, const char *path) {
    /* "a/b" walks nested objects */
    char buf[128];
    snprintf(buf, sizeof buf, "%s", path);
    json_t *cur = o;
    for (char *tok = strtok(buf, "/"); tok; tok = strtok(NULL, "/")) cur = json_object_get(cur, tok);
    if (!json_is_integer(cur)) fail_msg("%s is not an integer", path);
    return (long long)json_integer_value(cur);
}

static void test_stories_json(void **state) {
    (void)state;
    json_t *j = inspect_json(tu_shared("models/stories260K.gguf"));
    assert_string_equal(json_string_value(json_object_get(j, "architecture")), "llama");
    assert_int_equal(jint(j, "hparams/block_count"), 5);
    assert_int_equal(jint(j, "hparams/embedding_length"), 64);
    assert_int_equal(jint(j, "hparams/attention.head_count"), 8);
    assert_int_equal(jint(j, "hparams/attention.head_count_kv"), 4);
    assert_int_equal(jint(j, "hparams/feed_forward_length"), 172);
    assert_int_equal(jint(j, "hparams/vocab_size"), 512);
    assert_int_equal(jint(j, "tokenizer/tokens"), 512);
    assert_int_equal(jint(j, "tokenizer/bos_token_id"), 1);
    assert_int_equal(jint(j, "totals/tensor_count"), 48);
    assert_int_equal(jint(j, "totals/parameters"), 292800);
    assert_int_equal(jint(j, "totals/types/F32"), 48);
    assert_int_equal(jint(j, "file_size"), 1185376);
    assert_true(json_is_true(json_object_get(j, "runnable")));
    json_t *tensors = json_object_get(j, "tensors");
    assert_int_equal(json_array_size(tensors), 48);
    size_t i;
    json_t *t;
    json_array_foreach(tensors, i, t) assert_string_equal(json_string_value(json_object_get(t, "type")), "F32");
    json_decref(j);
}

static void test_stories_text(void **state) {
    (void)state;
    char args[1024];
    snprintf(args, sizeof args, "inspect '%s'", tu_shared("models/stories260K.gguf"));
    tu_run_result r = tu_run(args);
    assert_int_equal(r.status, 0);
    assert_string_equal(r.err, "");
    assert_non_null(strstr(r.out, "architecture   llama"));
    assert_non_null(strstr(r.out, "tensors (48)"));
    assert_non_null(strstr(r.out, "block_count                            5\n"));
    assert_non_null(strstr(r.out, "blk.4.ffn_down.weight"));
    tu_run_free(&r);
}

/* Each parity file: every tensor's type as stored, by an independent walk. */
static void test_parity_types(void **state) {
    (void)state;
    static const char *const names[] = {"F16",  "BF16", "Q8_0",   "Q4_0",   "Q4_1",
                                        "Q5_0", "Q5_1", "Q4_K_M", "Q5_K_M", "Q6_K"};
    static tu_layout l;
    for (size_t f = 0; f < sizeof names / sizeof names[0]; f++) {
        char rel[96];
        snprintf(rel, sizeof rel, "models/parity/parity-%s.gguf", names[f]);
        char path[1024];
        snprintf(path, sizeof path, "%s", tu_shared(rel));
        size_t n;
        uint8_t *p = tu_read_file(path, &n);
        assert_non_null(p);
        tu_layout_read(p, n, &l);
        free(p);
        json_t *j = inspect_json(path);
        json_t *tensors = json_object_get(j, "tensors");
        assert_int_equal(json_array_size(tensors), l.n_tensors);
        for (size_t i = 0; i < l.n_tensors; i++) {
            json_t *t = json_array_get(tensors, i);
            assert_string_equal(json_string_value(json_object_get(t, "name")), l.name[i]);
            assert_string_equal(json_string_value(json_object_get(t, "type")), tkv_type_name((tkv_type)l.type[i]));
            assert_int_equal(json_integer_value(json_array_get(json_object_get(t, "shape"), 0)), l.ne[i][0]);
        }
        json_decref(j);
    }
}

static void test_vocab_file(void **state) {
    (void)state;
    json_t *j = inspect_json(tu_shared("models/vocab/ggml-vocab-gpt-2.gguf"));
    assert_string_equal(json_string_value(json_object_get(j, "architecture")), "gpt2");
    assert_int_equal(jint(j, "tokenizer/tokens"), 50257);
    assert_int_equal(jint(j, "tokenizer/merges"), 50000);
    assert_int_equal(jint(j, "totals/tensor_count"), 0);
    assert_true(json_is_false(json_object_get(j, "runnable")));
    assert_int_equal(jint(j, "metadata/gpt2.block_count"), 12);
    json_decref(j);
}

/* A corrupt file: non-zero exit, nothing on stdout, exactly one line on stderr. */
static void expect_clean_failure(const uint8_t *p, size_t n) {
    const char *path = tu_write_temp(p, n);
    char args[256];
    snprintf(args, sizeof args, "inspect --json '%s'", path);
    tu_run_result r = tu_run(args);
    if (r.status == 0 || r.status >= 128) fail_msg("exit status %d for a corrupt file", r.status);
    assert_string_equal(r.out, "");
    size_t len = strlen(r.err);
    assert_true(len > 20);
    assert_true(r.err[len - 1] == '\n');
    assert_null(memchr(r.err, '\n', len - 1));
    assert_true(strncmp(r.err, "tokenkv inspect: ", 17) == 0);
    tu_run_free(&r);
    remove(path);
}

static void test_corrupt_files(void **state) {
    (void)state;
    size_t n;
    uint8_t *p = tu_read_file(tu_shared("models/stories260K.gguf"), &n);
    static tu_layout l;
    tu_layout_read(p, n, &l);
    expect_clean_failure(p, n - 1);
    expect_clean_failure(p, 100);
    expect_clean_failure(p, l.data_start);
    uint8_t *q = malloc(n);
    memcpy(q, p, n), tu_put(q, 16, 1ull << 50, 8), expect_clean_failure(q, n);
    memcpy(q, p, n), tu_put(q, l.ti_type_at[3], 77, 4), expect_clean_failure(q, n);
    memcpy(q, p, n), tu_put(q, l.ti_offset_at[7], 3, 8), expect_clean_failure(q, n);
    memcpy(q, p, n), tu_put(q, l.kv_start[5], 1ull << 40, 8), expect_clean_failure(q, n);
    /* structurally valid, but a tensor the model needs is gone: corrupt as a model */
    memcpy(q, p, n), q[l.ti_start[9] + 8 + 2] ^= 0x04, expect_clean_failure(q, n);
    /* a hyperparameter key renamed: required key missing */
    memcpy(q, p, n), q[l.kv_start[4] + 8 + 3] ^= 0x01, expect_clean_failure(q, n);
    free(q);
    free(p);
    tu_run_result r = tu_run("inspect /nonexistent.gguf");
    assert_int_equal(r.status, 1);
    assert_non_null(strstr(r.err, "/nonexistent.gguf"));
    tu_run_free(&r);
}

static void test_usage(void **state) {
    (void)state;
    tu_run_result r = tu_run("--help");
    assert_int_equal(r.status, 0);
    assert_non_null(strstr(r.out, "inspect"));
    tu_run_free(&r);
    r = tu_run("inspect --help");
    assert_int_equal(r.status, 0);
    assert_non_null(strstr(r.out, "--json"));
    tu_run_free(&r);
    r = tu_run("inspect --bogus x");
    assert_int_equal(r.status, 2);
    tu_run_free(&r);
    r = tu_run("inspect");
    assert_int_equal(r.status, 2);
    tu_run_free(&r);
    r = tu_run("frobnicate");
    assert_int_equal(r.status, 2);
    tu_run_free(&r);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stories_json), cmocka_unit_test(test_stories_text),  cmocka_unit_test(test_parity_types),
        cmocka_unit_test(test_vocab_file),   cmocka_unit_test(test_corrupt_files), cmocka_unit_test(test_usage),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
