/*
 * test_cli_tokenize.c — `tokenkv tokenize` as a user runs it: exact input
 * bytes from -p, -f and stdin; --ids, --no-bos, --parse-special; errors.
 * Expected ids come from the library (checked against the reference in
 * test_tokenizer) and from the issue's own example.
 */
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *gpt2(void) {
    static char path[512];
    snprintf(path, sizeof path, "%s", tu_shared("models/vocab/ggml-vocab-gpt-2.gguf"));
    return path;
}

static void test_ids(void **state) {
    (void)state;
    char args[1024];
    snprintf(args, sizeof args, "tokenize -m '%s' -p 'Hello world' --ids", gpt2());
    tu_run_result r = tu_run(args);
    assert_int_equal(r.status, 0);
    assert_string_equal(r.out, "[15496, 995]\n");
    assert_string_equal(r.err, "");
    tu_run_free(&r);
}

/* stdin and -f: bytes exactly as given, trailing newline included */
static void test_exact_bytes(void **state) {
    (void)state;
    char args[1024];
    snprintf(args, sizeof args, "tokenize -m '%s' --ids", gpt2());
    tu_run_result r = tu_run_input(args, "Hello world\n", 12);
    assert_int_equal(r.status, 0);
    assert_string_equal(r.out, "[15496, 995, 198]\n"); /* 198 = "\n" */
    tu_run_free(&r);

    const char *path = tu_write_temp((const uint8_t *)"Hello\\n", 7); /* a backslash and an n, not a newline */
    snprintf(args, sizeof args, "tokenize -m '%s' -f '%s' --ids", gpt2(), path);
    r = tu_run(args);
    assert_int_equal(r.status, 0);
    assert_non_null(strstr(r.out, "[15496, 59, 77]")); /* "\\" = 59, "n" = 77 */
    tu_run_free(&r);
    remove(path);
}

static void test_bos_and_special(void **state) {
    (void)state;
    char args[1024];
    const char *spm = tu_shared("models/stories260K.gguf");
    snprintf(args, sizeof args, "tokenize -m '%s' -p 'Hello world' --ids", spm);
    tu_run_result r = tu_run(args);
    assert_string_equal(r.out, "[1, 346, 306, 414, 263, 304, 341]\n");
    tu_run_free(&r);
    snprintf(args, sizeof args, "tokenize -m '%s' -p 'Hello world' --ids --no-bos", spm);
    r = tu_run(args);
    assert_string_equal(r.out, "[346, 306, 414, 263, 304, 341]\n");
    tu_run_free(&r);
    snprintf(args, sizeof args, "tokenize -m '%s' -p '</s>' --ids --no-bos --parse-special", spm);
    r = tu_run(args);
    assert_string_equal(r.out, "[2]\n");
    tu_run_free(&r);
    snprintf(args, sizeof args, "tokenize -m '%s' -p '</s>' --ids --no-bos", spm);
    r = tu_run(args);
    assert_null(strstr(r.out, "[2]"));
    tu_run_free(&r);
    /* the listing: one token per line, id then quoted piece */
    snprintf(args, sizeof args, "tokenize -m '%s' -p 'Hello world'", spm);
    r = tu_run(args);
    assert_int_equal(r.status, 0);
    assert_non_null(strstr(r.out, "     1 '<s>'\n"));
    assert_non_null(strstr(r.out, "   346 ' He'\n"));
    tu_run_free(&r);
}

static void test_errors(void **state) {
    (void)state;
    tu_run_result r = tu_run("tokenize -m /nonexistent.gguf -p x");
    assert_int_equal(r.status, 1);
    assert_non_null(strstr(r.err, "/nonexistent.gguf"));
    tu_run_free(&r);
    r = tu_run("tokenize -p x");
    assert_int_equal(r.status, 2);
    tu_run_free(&r);
    char args[1024];
    snprintf(args, sizeof args, "tokenize -m '%s' -f /nonexistent.txt", gpt2());
    r = tu_run(args);
    assert_int_equal(r.status, 1);
    assert_non_null(strstr(r.err, "/nonexistent.txt"));
    tu_run_free(&r);
    r = tu_run("tokenize --help");
    assert_int_equal(r.status, 0);
    assert_non_null(strstr(r.out, "--parse-special"));
    tu_run_free(&r);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ids),
        cmocka_unit_test(test_exact_bytes),
        cmocka_unit_test(test_bos_and_special),
        cmocka_unit_test(test_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
