/*
 * test_cli_run.c — `tokenkv run` at the model's context length: a generation
 * that would pass it stops there with a message (exit 0, every position up
 * to the limit used), and a prompt that fills it is refused (exit 1); and
 * `--reference-order` reaches the context: with it, greedy ids equal the
 * reference implementation's on a parity file; bad option numbers are
 * refused by name in every subcommand; `--draft N` prints plain decoding's ids.
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

/* The greedy ids `tokenkv run` prints for the prompt, with the given extra flags, as a JSON array. */
static json_t *run_ids(const char *model, const char *prompt, size_t n, const char *flags) {
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "run -m '%s' -p '%s' -n %zu --temp 0 -t 2 --ids %s", model, prompt, n, flags);
    tu_run_result r = tu_run(cmd);
    if (r.status != 0) fail_msg("exit %d: %s", r.status, r.err);
    json_error_t e;
    json_t *ids = json_loads(r.out, 0, &e);
    if (!ids) fail_msg("not JSON: %s", r.out);
    tu_run_free(&r);
    return ids;
}

/* Every prompt of reference/parity-Q8_0.generate.jsonl: with --reference-order the ids are the reference's
   `greedy` up to its first end-of-generation token (where run stops). Without it, the default arithmetic
   (float attention) chooses otherwise somewhere on this file (test_oracle measures why it may), so the ids
   also show that the flag is what changed the context; were the default ever to agree on every prompt, this
   file would no longer tell, and the test says so. */
static void test_reference_order(void **state) {
    (void)state;
    char model[512];
    snprintf(model, sizeof model, "%s", tu_shared("models/parity/parity-Q8_0.gguf"));
    FILE *f = fopen(tu_shared("reference/parity-Q8_0.generate.jsonl"), "r");
    assert_non_null(f);
    char *line = NULL;
    size_t cap = 0, prompts = 0, default_differs = 0;
    while (getline(&line, &cap, f) > 0) {
        json_t *j = json_loads(line, 0, NULL);
        assert_non_null(j);
        const char *prompt = json_string_value(json_object_get(j, "prompt"));
        json_t *greedy = json_object_get(j, "greedy");
        assert_true(prompt && !strchr(prompt, '\'') && json_array_size(greedy) > 0);
        size_t want = 0; /* up to the first end of generation (the stories260K vocabulary's </s>: 2) */
        while (want < json_array_size(greedy) && json_integer_value(json_array_get(greedy, want)) != 2) want++;
        json_t *ref_ids = run_ids(model, prompt, json_array_size(greedy), "--reference-order");
        json_t *def_ids = run_ids(model, prompt, json_array_size(greedy), "");
        assert_int_equal(json_array_size(ref_ids), want);
        for (size_t i = 0; i < want; i++)
            if (json_integer_value(json_array_get(ref_ids, i)) != json_integer_value(json_array_get(greedy, i)))
                fail_msg("prompt '%s', --reference-order: token %zu is %lld, the reference's %lld", prompt, i,
                         json_integer_value(json_array_get(ref_ids, i)), json_integer_value(json_array_get(greedy, i)));
        default_differs += !json_equal(def_ids, ref_ids);
        json_decref(ref_ids);
        json_decref(def_ids);
        json_decref(j);
        prompts++;
    }
    free(line);
    fclose(f);
    assert_true(prompts > 0);
    if (!default_differs)
        fail_msg("the default arithmetic gives the reference's ids on every prompt of parity-Q8_0: this file no "
                 "longer shows that --reference-order reaches the context; pick one where they differ");
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

/* Every subcommand reads option numbers with one reader (cli/args.c): a bad value is refused before
   anything runs, exit 2, with the option, the value and the range named. */
/* --draft N prints the ids of plain decoding, greedy and seeded (tkv_seq_decode_draft's contract as a user meets
   it), on a prompt whose continuation repeats itself (stories260K loops), and says how many drafts it took. */
static void test_draft_same_ids(void **state) {
    (void)state;
    const char *model = tu_shared("models/stories260K.gguf");
    static const char *const flags[][2] = {
        {"", "--draft 8"},
        {"--temp 0.8 --seed 5 --repeat-penalty 1.1", "--temp 0.8 --seed 5 --repeat-penalty 1.1 --draft 16"},
    };
    for (size_t k = 0; k < sizeof flags / sizeof *flags; k++) {
        json_t *plain = run_ids(model, "Once upon a time", 200, flags[k][0]);
        json_t *drafted = run_ids(model, "Once upon a time", 200, flags[k][1]);
        assert_true(json_array_size(plain) > 100);
        if (!json_equal(plain, drafted)) fail_msg("%s: the ids differ from plain decoding", flags[k][1]);
        json_decref(plain);
        json_decref(drafted);
    }
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "run -m '%s' -p 'Once upon a time' -n 100 --temp 0 -t 1 --ids --draft 8", model);
    tu_run_result r = tu_run(cmd);
    assert_int_equal(r.status, 0);
    unsigned long offered = 0, accepted = 0;
    const char *line = strstr(r.err, "drafts: ");
    if (!line || sscanf(line, "drafts: %lu offered, %lu accepted", &offered, &accepted) != 2)
        fail_msg("no drafts line: %s", r.err);
    assert_true(accepted > 0 && accepted <= offered); /* the story repeats: some drafts are right */
    tu_run_free(&r);
}

static void test_bad_numbers(void **state) {
    (void)state;
    static const struct {
        const char *args, *says;
    } cases[] = {
        {"run -m M -n -3", "run: -n: '-3' is not a number in [0, 1e+09]"},
        {"run -m M --top-p nan", "run: --top-p: 'nan' is not a number in [0, 1]"},
        {"run -m M -t 2x", "run: -t: '2x' is not a number in [1, 1024]"},
        {"run -m M --draft 65", "run: --draft: '65' is not a number in [0, 64]"},
        {"bench -m M -t ' 2'", "bench: -t: ' 2' is not an integer in [1, 1024]"},
        {"logits -m M -t 0", "logits: -t: '0' is not an integer in [1, 1024]"},
        {"quantize --threads +4 a b q4_0", "quantize: --threads: '+4' is not an integer in [1, 256]"},
        {"serve -m M --port 65536", "serve: --port: '65536' is not an integer in [0, 65535]"},
        {"mkmodel --seed 18446744073709551616 -o /tmp/x.gguf", "mkmodel: --seed: '18446744073709551616' is not an integer"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char cmd[512], model[300];
        snprintf(model, sizeof model, "'%s'", tu_shared("models/stories260K.gguf"));
        const char *m = strstr(cases[i].args, " M");
        snprintf(cmd, sizeof cmd, "%.*s%s%s", m ? (int)(m - cases[i].args + 1) : (int)strlen(cases[i].args),
                 cases[i].args, m ? model : "", m ? m + 2 : "");
        tu_run_result r = tu_run(cmd);
        if (r.status != 2 || !strstr(r.err, cases[i].says))
            fail_msg("tokenkv %s: exit %d, stderr: %s (expected exit 2 and \"%s\")", cmd, r.status, r.err, cases[i].says);
        tu_run_free(&r);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bad_numbers),
        cmocka_unit_test(test_stops_at_context_length),
        cmocka_unit_test(test_prompt_fills_context),
        cmocka_unit_test(test_reference_order),
        cmocka_unit_test(test_draft_same_ids),
    };
    return cmocka_run_group_tests(tests, tu_stories_setup, tu_stories_teardown);
}
