/*
 * test_cli_logits.c — `tokenkv logits` as a user runs it: the reference's
 * own logits of stories260K (../shared/reference/stories260K.generate.jsonl)
 * come back, row for row, within the parity test's bound for float weights;
 * -f reads the same prompt from a file; bad usage exits 2.
 */
#include "testutil.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

static const char *stories(void) {
    static char path[512];
    snprintf(path, sizeof path, "%s", tu_shared("models/stories260K.gguf"));
    return path;
}

/* The reference's first prompt of stories260K: text, tokens, logits. */
static json_t *reference_first(void) {
    FILE *f = fopen(tu_shared("reference/stories260K.generate.jsonl"), "r");
    assert_non_null(f);
    char *line = NULL;
    size_t cap = 0;
    assert_true(getline(&line, &cap, f) > 0);
    fclose(f);
    json_error_t e;
    json_t *j = json_loads(line, 0, &e);
    free(line);
    assert_non_null(j);
    return j;
}

/* The output holds the reference's tokens and, per row, every logit within
   1e-3 (1 + |ref|) of the reference's. */
static void check_against(const char *out, json_t *ref) {
    json_error_t e;
    json_t *got = json_loads(out, 0, &e);
    if (!got) fail_msg("output is not JSON: %s", e.text);
    assert_true(json_equal(json_object_get(got, "tokens"), json_object_get(ref, "tokens")));
    json_t *rows = json_object_get(got, "logits"), *want = json_object_get(ref, "logits");
    assert_int_equal(json_array_size(rows), json_array_size(want));
    for (size_t i = 0; i < json_array_size(want); i++) {
        json_t *r = json_array_get(rows, i), *w = json_array_get(want, i);
        assert_int_equal(json_array_size(r), json_array_size(w));
        for (size_t k = 0; k < json_array_size(w); k++) {
            const double a = json_number_value(json_array_get(r, k)), b = json_number_value(json_array_get(w, k));
            if (!(fabs(a - b) <= 1e-3 * (1 + fabs(b)))) fail_msg("row %zu logit %zu: %g, reference %g", i, k, a, b);
        }
    }
    json_decref(got);
}

static void test_prompt_and_file(void **state) {
    (void)state;
    json_t *ref = reference_first();
    const char *prompt = json_string_value(json_object_get(ref, "prompt"));
    char args[1024];
    snprintf(args, sizeof args, "logits -m '%s' -p '%s' -t 1", stories(), prompt);
    tu_run_result r = tu_run(args);
    assert_int_equal(r.status, 0);
    check_against(r.out, ref);
    tu_run_free(&r);

    const char *path = tu_write_temp((const uint8_t *)prompt, strlen(prompt));
    snprintf(args, sizeof args, "logits -m '%s' -f '%s'", stories(), path);
    r = tu_run(args);
    assert_int_equal(r.status, 0);
    check_against(r.out, ref);
    tu_run_free(&r);
    json_decref(ref);
}

static void test_bad_usage(void **state) {
    (void)state;
    char args[1024];
    const char *bad[] = {"logits", "logits -p x", "logits -m '%s'", "logits -m '%s' -p x -f y", "logits -m '%s' -p x -t 0"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(args, sizeof args, bad[i], stories());
        tu_run_result r = tu_run(args);
        assert_int_equal(r.status, 2);
        assert_non_null(strstr(r.err, "tokenkv logits:"));
        tu_run_free(&r);
    }
    /* a missing model: one line naming it, status 1 */
    tu_run_result r = tu_run("logits -m /nonexistent.gguf -p x");
    assert_int_equal(r.status, 1);
    assert_non_null(strstr(r.err, "nonexistent.gguf"));
    tu_run_free(&r);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_prompt_and_file), cmocka_unit_test(test_bad_usage)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
