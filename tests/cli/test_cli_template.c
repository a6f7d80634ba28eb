/*
 * test_cli_template.c — `tokenkv template` as a user runs it: renders of
 * ../shared/reference/templates.jsonl (every 7th line: the library's own
 * test takes them all) match byte for byte or fail where transformers
 * raised, with one line on stderr; -m MODEL renders the model's own template
 * with its BOS/EOS texts; bad usage and bad input are errors.
 */
#include "testutil.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The input of a reference line as the command reads it. */
static char *input_of(const json_t *line) { return json_dumps(json_object_get(line, "input"), JSON_COMPACT); }

static void test_reference_sample(void **state) {
    (void)state;
    FILE *f = fopen(tu_shared("reference/templates.jsonl"), "rb");
    assert_non_null(f);
    char *buf = NULL;
    size_t cap = 0;
    int line = 0, renders = 0, raises = 0;
    while (getline(&buf, &cap, f) > 0) {
        if (line++ % 7) continue;
        json_error_t e;
        json_t *r = json_loads(buf, 0, &e);
        if (!r) fail_msg("templates.jsonl line %d: %s", line, e.text);
        char *in = input_of(r), args[512];
        snprintf(args, sizeof args, "template --template '%s/templates/%s' --input -", TKV_SHARED_DIR,
                 json_string_value(json_object_get(r, "template")));
        tu_run_result out = tu_run_input(args, in, strlen(in));
        if (json_is_true(json_object_get(r, "error"))) {
            if (out.status != 1) fail_msg("line %d: exit %d, expected 1 (the template raises)", line, out.status);
            const char *nl = strchr(out.err, '\n');
            if (!nl || nl[1]) fail_msg("line %d: stderr is not one line: %s", line, out.err);
            raises++;
        } else {
            if (out.status != 0) fail_msg("line %d: exit %d: %s", line, out.status, out.err);
            if (strcmp(out.out, json_string_value(json_object_get(r, "expected"))))
                fail_msg("line %d (%s): rendered\n%s\nexpected\n%s", line, json_string_value(json_object_get(r, "template")),
                         out.out, json_string_value(json_object_get(r, "expected")));
            renders++;
        }
        tu_run_free(&out);
        free(in);
        json_decref(r);
    }
    free(buf);
    fclose(f);
    assert_true(renders > 50 && raises > 5);
}

/* -m MODEL: the model's template (written by mkmodel --chat-template) with its own BOS and EOS texts,
   as --template FILE renders it given those texts. */
static void test_model_template(void **state) {
    (void)state;
    char dir[] = "/tmp/tkv-template-XXXXXX", model[128], args[1024];
    assert_non_null(mkdtemp(dir));
    snprintf(model, sizeof model, "%s/chat.gguf", dir);
    const char *tmpl = "{{ bos_token }}{% for m in messages %}[{{ m.role }}] {{ m.content | trim }}{{ eos_token }}"
                       "{% endfor %}{% if add_generation_prompt %}[assistant]{% endif %}";
    char tpath[160];
    snprintf(tpath, sizeof tpath, "%s/t.jinja", dir);
    FILE *f = fopen(tpath, "wb");
    assert_non_null(f);
    fputs(tmpl, f);
    fclose(f);
    snprintf(args, sizeof args, "mkmodel '%s' --dim 64 --layers 1 --heads 2 --ff 64 --chat-template '%s' --vocab-from '%s'",
             model, tpath, tu_shared("models/stories260K.gguf"));
    tu_run_result r = tu_run(args);
    if (r.status) fail_msg("mkmodel: %s", r.err);
    tu_run_free(&r);
    const char *in = "{\"messages\": [{\"role\": \"user\", \"content\": \" hi \"}], \"add_generation_prompt\": true}";
    snprintf(args, sizeof args, "template -m '%s' --input -", model);
    r = tu_run_input(args, in, strlen(in));
    if (r.status) fail_msg("template -m: %s", r.err);
    assert_string_equal(r.out, "<s>[user] hi</s>[assistant]"); /* stories260K's BOS and EOS texts */
    tu_run_free(&r);
    /* a model without a template: one line naming the key */
    snprintf(args, sizeof args, "template -m '%s' --input -", tu_shared("models/stories260K.gguf"));
    r = tu_run_input(args, in, strlen(in));
    assert_int_equal(r.status, 1);
    assert_non_null(strstr(r.err, "tokenizer.chat_template"));
    tu_run_free(&r);
    snprintf(args, sizeof args, "rm -rf '%s'", dir);
    assert_int_equal(system(args), 0);
}

static void expect(int status, const char *args, const char *input, const char *in_err) {
    tu_run_result r = tu_run_input(args, input, input ? strlen(input) : 0);
    if (r.status != status) fail_msg("'tokenkv %s': exit %d, expected %d (stderr: %s)", args, r.status, status, r.err);
    if (in_err && !strstr(r.err, in_err)) fail_msg("'tokenkv %s': stderr lacks '%s': %s", args, in_err, r.err);
    tu_run_free(&r);
}

static void test_errors(void **state) {
    (void)state;
    const char *ok = "{\"messages\": []}";
    char bad_tmpl[] = "/tmp/tkv-bad-XXXXXX", args[512];
    FILE *f = fdopen(mkstemp(bad_tmpl), "wb");
    assert_non_null(f);
    fputs("line one\n{% if x %}\n{{ x }\n", f); /* an unterminated expression on line 3 */
    fclose(f);
    expect(0, "template --help", NULL, NULL);
    expect(2, "template", NULL, "give --input");
    expect(2, "template --input -", ok, "give --input");
    snprintf(args, sizeof args, "template --template '%s' -m x --input -", bad_tmpl);
    expect(2, args, ok, "one of");
    expect(2, "template --frobnicate 1", NULL, "unknown option");
    snprintf(args, sizeof args, "template --template '%s' --input -", bad_tmpl);
    expect(1, args, ok, "line 3");
    expect(1, "template --template /nonexistent.jinja --input -", ok, "cannot read");
    snprintf(args, sizeof args, "template --template '%s/templates/Qwen-QwQ-32B.jinja' --input -", TKV_SHARED_DIR);
    expect(1, args, "{\"messages\": ", "--input");                       /* not JSON */
    expect(1, args, "[1, 2]", "not a JSON object");
    expect(1, args, "{\"messages\": {}}", "\"messages\" must be an array");
    remove(bad_tmpl);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reference_sample),
        cmocka_unit_test(test_model_template),
        cmocka_unit_test(test_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
