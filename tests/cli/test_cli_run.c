/*
 * test_cli_run.c — `tokenkv run` at the model's context length: a generation
 * that would pass it stops there with a message (exit 0, every position up
 * to the limit used), and a prompt that fills it is refused (exit 1).
 */
#include "testutil.h"

#include <jansson.h>
#include <stdio.h>
#include <string.h>

static tu_run_result runf(const char *fmt, const char *a) {
    char cmd[8192];
    snprintf(cmd, sizeof cmd, fmt, a);
    return tu_run(cmd);
}

/* The model's context length and the prompt's token count, from the tool itself. */
static size_t context_length(void) {
    tkv_hparams hp;
    assert_int_equal(tkv_model_hparams(tu_model, &hp), TKV_OK);
    assert_true(hp.n_ctx_train > 0);
    return hp.n_ctx_train;
}

static size_t prompt_tokens(const char *text) {
    size_t n = 0;
    tkv_tokenize(tu_model, text, strlen(text), TKV_TOKENIZE_ADD_SPECIAL, NULL, 0, &n);
    return n;
}

static void test_stops_at_context_length(void **state) {
    (void)state;
    const size_t n_ctx = context_length(), n_prompt = prompt_tokens("Once upon a time");
    char args[64];
    snprintf(args, sizeof args, "%zu", n_ctx + 500);
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "run -m '%s' -p 'Once upon a time' -n %s --temp 0 -t 1 --ids",
             tu_shared("models/stories260K.gguf"), args);
    tu_run_result r = tu_run(cmd);
    if (r.status != 0) fail_msg("exit %d: %s", r.status, r.err);
    char want[128];
    snprintf(want, sizeof want, "stopped at the model's context length (%zu tokens", n_ctx);
    if (!strstr(r.err, want)) fail_msg("no '%s' in: %s", want, r.err);
    json_error_t e;
    json_t *ids = json_loads(r.out, 0, &e);
    assert_non_null(ids);
    /* greedy stories260K does not reach end-of-text in this many tokens: the limit ended it */
    assert_int_equal(json_array_size(ids), n_ctx - n_prompt);
    json_decref(ids);
    tu_run_free(&r);

    /* within the limit: no message */
    r = runf("run -m '%s' -p 'Once upon a time' -n 8 --temp 0 -t 1 --ids", tu_shared("models/stories260K.gguf"));
    assert_int_equal(r.status, 0);
    assert_null(strstr(r.err, "context length"));
    tu_run_free(&r);
}

static void test_prompt_fills_context(void **state) {
    (void)state;
    const size_t n_ctx = context_length();
    /* a prompt file of more tokens than the context holds ("Once upon a time " is 4-5 tokens) */
    char path[] = "/tmp/tkv-run-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    FILE *f = fdopen(fd, "w");
    for (size_t i = 0; i < n_ctx / 2; i++) fputs("Once upon a time ", f);
    fclose(f);
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "run -m '%s' -p \"$(cat %s)\" -n 4 -t 1", tu_shared("models/stories260K.gguf"), path);
    tu_run_result r = tu_run(cmd);
    remove(path);
    assert_int_equal(r.status, 1);
    if (!strstr(r.err, "fills the model's context length")) fail_msg("message: %s", r.err);
    tu_run_free(&r);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stops_at_context_length),
        cmocka_unit_test(test_prompt_fills_context),
    };
    return cmocka_run_group_tests(tests, tu_stories_setup, tu_stories_teardown);
}
