/*
 * test_serve_args.c — the option table of `tokenkv serve` (cli/serve_args.c)
 * read as llama-server users write it: the first-day command line of issue
 * 35 sets what it says, with one log line per option that has no effect
 * here; an unknown option is one line naming it and the nearest known one;
 * LLAMA_ARG_* variables are read, TOKENKV_* ones over them, the command line
 * over both; unimplemented options and values are refused by name; values
 * are checked. Expectations are llama-server's documented meanings
 * (tools/server/README.md), written out here, not read from the table.
 */
#include "testutil.h"

#include "../../cli/serve_args.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The environment a test sets: NAME=VALUE pairs, NULL-terminated. */
static const char *const *test_env;
static const char *lookup(const char *name) {
    for (const char *const *e = test_env; e && *e; e++) {
        const size_t n = strlen(name);
        if (!strncmp(*e, name, n) && (*e)[n] == '=') return *e + n + 1;
    }
    return NULL;
}

/* What a parse printed on err. */
static char err_text[8192];

/* Parse "serve" + args (NULL-terminated) in env into *o. */
static serve_args_result parse(srv_opts *o, const char *const *env, const char *const *args) {
    char *argv[64] = {"serve"};
    int argc = 1;
    while (args[argc - 1]) {
        assert_true(argc < 64);
        argv[argc] = (char *)args[argc - 1];
        argc++;
    }
    test_env = env;
    serve_args_defaults(o);
    FILE *err = tmpfile();
    assert_non_null(err);
    const serve_args_result r = serve_args_parse(o, argc, argv, lookup, err);
    rewind(err);
    const size_t n = fread(err_text, 1, sizeof err_text - 1, err);
    err_text[n] = '\0';
    fclose(err);
    return r;
}

static int lines(const char *s) {
    int n = 0;
    for (; *s; s++) n += *s == '\n';
    return n;
}

#define ARGS(...) ((const char *const[]){__VA_ARGS__, NULL})
#define NO_ARGS ((const char *const[]){NULL})

static void test_defaults(void **state) {
    (void)state;
    srv_opts o;
    assert_int_equal(parse(&o, NULL, NO_ARGS), SERVE_ARGS_RUN);
    assert_string_equal(err_text, "");
    assert_string_equal(o.host, "127.0.0.1");
    assert_int_equal(o.port, 8080);
    assert_int_equal(o.parallel, 4);
    assert_int_equal(o.cells, 4096);
    /* no server-wide request defaults unless given: each route keeps its own */
    assert_true(isnan(o.defaults.temperature) && isnan(o.defaults.top_p) && isnan(o.defaults.min_p));
    assert_int_equal(o.defaults.top_k, -1);
    assert_int_equal(o.defaults.seed, -1);
    assert_int_equal(o.defaults.n_predict, -1);
    assert_false(o.no_slots);
    assert_false(o.verbose);
    assert_int_equal(o.reasoning, SRV_REASONING_UNSET);
    assert_int_equal(parse(&o, NULL, ARGS("--help")), SERVE_ARGS_HELP);
    assert_int_equal(parse(&o, NULL, ARGS("-h")), SERVE_ARGS_HELP);
}

/* Issue 35's first-day command line, unchanged. */
static void test_first_day(void **state) {
    (void)state;
    srv_opts o;
    assert_int_equal(parse(&o, NULL,
                           ARGS("-m", "M.gguf", "-c", "2048", "-np", "2", "-t", "2", "--host", "0.0.0.0", "--port", "9000",
                                "-ngl", "0", "--jinja", "--api-key", "k", "-fa", "on", "--cache-type-k", "q8_0",
                                "--n-predict", "64", "--alias", "foo", "--metrics", "--slots")),
                     SERVE_ARGS_RUN);
    assert_string_equal(o.model_path, "M.gguf");
    assert_int_equal(o.cells, 2048);
    assert_int_equal(o.parallel, 2);
    assert_int_equal(o.threads, 2);
    assert_string_equal(o.host, "0.0.0.0");
    assert_int_equal(o.port, 9000);
    assert_string_equal(o.api_key, "k");
    assert_string_equal(o.cache_type_k, "q8_0");
    assert_int_equal(o.defaults.n_predict, 64);
    assert_string_equal(o.alias, "foo");
    assert_false(o.no_slots);
    /* one line each for -ngl, --jinja, -fa and --metrics (accepted, and why); none for the others */
    assert_int_equal(lines(err_text), 4);
    assert_non_null(strstr(err_text, "-ngl 0: accepted"));
    assert_non_null(strstr(err_text, "--jinja: accepted"));
    assert_non_null(strstr(err_text, "-fa on: accepted"));
    assert_non_null(strstr(err_text, "--metrics: accepted"));
}

static void test_unknown(void **state) {
    (void)state;
    srv_opts o;
    static const struct {
        const char *typed, *nearest;
    } cases[] = {{"--tmep", "--temp"}, {"--n-gpu-layer", "--n-gpu-layers"}, {"--ctx-sise", "--ctx-size"},
                 {"--chat-templat", "--chat-template"}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        assert_int_equal(parse(&o, NULL, ARGS("--port", "1", cases[i].typed, "3")), SERVE_ARGS_USAGE);
        assert_int_equal(lines(err_text), 1); /* one line, not the help */
        char want[128];
        snprintf(want, sizeof want, "unknown option '%s' (did you mean %s?", cases[i].typed, cases[i].nearest);
        if (!strstr(err_text, want)) fail_msg("for %s: %s", cases[i].typed, err_text);
        assert_string_equal(serve_args_nearest(cases[i].typed), cases[i].nearest);
    }
}

static void test_environment(void **state) {
    (void)state;
    srv_opts o;
    const char *const env[] = {"LLAMA_ARG_CTX_SIZE=1024", "LLAMA_ARG_N_PARALLEL=3", "LLAMA_API_KEY=secret",
                               "LLAMA_ARG_ENDPOINT_SLOTS=0", "LLAMA_ARG_TEMPERATURE=0.5", "LLAMA_ARG_PORT=7000",
                               "TOKENKV_PORT=7001", "LLAMA_ARG_N_PREDICT=32", "LLAMA_ARG_MODEL=/m.gguf",
                               "LLAMA_ARG_CHAT_TEMPLATE_FILE=/t.jinja", "LLAMA_ARG_REASONING=off", NULL};
    assert_int_equal(parse(&o, env, ARGS("-c", "2048")), SERVE_ARGS_RUN);
    assert_int_equal(o.cells, 2048); /* the command line over the variable */
    assert_int_equal(o.parallel, 3);
    assert_string_equal(o.api_key, "secret");
    assert_true(o.no_slots); /* --slots off */
    assert_true(o.defaults.temperature == 0.5);
    assert_int_equal(o.port, 7001); /* TOKENKV_* over LLAMA_ARG_* */
    assert_int_equal(o.defaults.n_predict, 32);
    assert_string_equal(o.model_path, "/m.gguf");
    assert_string_equal(o.chat_template_file, "/t.jinja");
    assert_int_equal(o.reasoning, SRV_REASONING_OFF);
    /* a variable of an option with no effect says so once; one turning a switch off asks for nothing */
    const char *const env2[] = {"LLAMA_ARG_N_GPU_LAYERS=99", "LLAMA_ARG_CONTEXT_SHIFT=false", NULL};
    assert_int_equal(parse(&o, env2, NO_ARGS), SERVE_ARGS_RUN);
    assert_int_equal(lines(err_text), 1);
    assert_non_null(strstr(err_text, "LLAMA_ARG_N_GPU_LAYERS"));
    assert_false(o.context_shift);
    const char *const env3[] = {"LLAMA_ARG_EMBEDDINGS=1", NULL};
    assert_int_equal(parse(&o, env3, NO_ARGS), SERVE_ARGS_USAGE);
    assert_non_null(strstr(err_text, "LLAMA_ARG_EMBEDDINGS: not implemented"));
    const char *const env5[] = {"LLAMA_ARG_CONTEXT_SHIFT=1", "LLAMA_ARG_KEEP=-1", NULL};
    assert_int_equal(parse(&o, env5, NO_ARGS), SERVE_ARGS_RUN);
    assert_true(o.context_shift);
    assert_int_equal(o.defaults.n_keep, -1);
    const char *const env4[] = {"LLAMA_ARG_ENDPOINT_SLOTS=maybe", NULL};
    assert_int_equal(parse(&o, env4, NO_ARGS), SERVE_ARGS_USAGE);
}

static void test_defaults_set(void **state) {
    (void)state;
    srv_opts o;
    assert_int_equal(parse(&o, NULL,
                           ARGS("--temp", "0.2", "--top-k", "5", "--top-p", "0.9", "--min-p", "0.1", "--repeat-penalty",
                                "1.1", "--presence-penalty", "0.5", "--frequency-penalty", "-0.5", "-s", "42", "-n",
                                "-1", "--ignore-eos", "--no-slots", "--verbose", "--reasoning", "on",
                                "--reasoning-format", "none", "--chat-template", "chatml", "--timeout", "600")),
                     SERVE_ARGS_RUN);
    assert_true(o.defaults.temperature == 0.2 && o.defaults.top_p == 0.9 && o.defaults.min_p == 0.1);
    assert_true(o.defaults.repeat_penalty == 1.1 && o.defaults.presence_penalty == 0.5);
    assert_true(o.defaults.frequency_penalty == -0.5);
    assert_int_equal(o.defaults.top_k, 5);
    assert_int_equal(o.defaults.seed, 42);
    assert_int_equal(o.defaults.n_predict, -1);
    assert_true(o.defaults.ignore_eos && o.no_slots && o.verbose && o.reasoning_none);
    assert_int_equal(o.reasoning, SRV_REASONING_ON);
    assert_string_equal(o.chat_template, "chatml");
    assert_int_equal(o.idle_timeout, 600);
    assert_string_equal(err_text, "");
    /* --name=value, and -t -1 (llama-server's "default") */
    assert_int_equal(parse(&o, NULL, ARGS("--temp=0.3", "--flash-attn=off", "-t", "-1")), SERVE_ARGS_RUN);
    assert_true(o.defaults.temperature == 0.3);
    assert_int_equal(o.threads, 0);
    /* -fa's value is optional: a following option is not taken for it */
    assert_int_equal(parse(&o, NULL, ARGS("-fa", "--seed", "7")), SERVE_ARGS_RUN);
    assert_int_equal(o.defaults.seed, 7);
    assert_int_equal(lines(err_text), 1);
}

static void test_bad_values(void **state) {
    (void)state;
    srv_opts o;
    static const char *const bad[][2] = {
        {"--seed", "-2"},     {"--seed", "4294967296"}, {"--temp", "3"},   {"--temp", "x"},
        {"--top-p", "1.5"},   {"-n", "-3"},             {"--port", "-1"},  {"--reasoning", "maybe"},
        {"--reasoning-format", "deepseek-legacy"},      {"-t", "0"},       {"--top-k", "1.5"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_int_equal(parse(&o, NULL, ARGS(bad[i][0], bad[i][1])), SERVE_ARGS_USAGE);
        assert_int_equal(lines(err_text), 1);
        if (!strstr(err_text, bad[i][0])) fail_msg("%s %s: %s", bad[i][0], bad[i][1], err_text);
    }
    assert_int_equal(parse(&o, NULL, ARGS("--port")), SERVE_ARGS_USAGE);
    assert_non_null(strstr(err_text, "--port needs a value"));
    assert_int_equal(parse(&o, NULL, ARGS("--jinja=1")), SERVE_ARGS_USAGE);
    assert_non_null(strstr(err_text, "takes no value"));
}

/* What is not implemented is refused by name, with why; a sampler at its neutral value is accepted. */
static void test_refused(void **state) {
    (void)state;
    srv_opts o;
    static const char *const refused[][2] = {
        {"--lora", "a.gguf"}, {"--hf-repo", "x/y"}, {"--embedding", NULL},
        {"--mirostat", "2"},  {"--rope-scale", "2"}, {"--model-draft", "d.gguf"}, {"--repeat-last-n", "32"},
        {"--slot-save-path", "/tmp"}, {"--spec-type", "ngram-simple"}, {"--samplers", "top_k"},
    };
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        const char *const args[] = {refused[i][0], refused[i][1], NULL};
        assert_int_equal(parse(&o, NULL, args), SERVE_ARGS_USAGE);
        assert_int_equal(lines(err_text), 1);
        if (!strstr(err_text, refused[i][0]) || !strstr(err_text, "not implemented"))
            fail_msg("%s: %s", refused[i][0], err_text);
    }
    assert_int_equal(parse(&o, NULL, ARGS("--mirostat", "0", "--repeat-last-n", "64", "--spec-type", "none",
                                          "--mlock", "--no-mmap", "-ub", "512", "-cb")),
                     SERVE_ARGS_RUN);
    assert_int_equal(lines(err_text), 4); /* the last four: accepted, each with why */
}

/* --context-shift and --keep set what the scheduler and the prompt's cut use; --no-context-shift clears it. */
static void test_context_shift(void **state) {
    (void)state;
    srv_opts o;
    assert_int_equal(parse(&o, NULL, ARGS("--context-shift", "--keep", "-1")), SERVE_ARGS_RUN);
    assert_true(o.context_shift);
    assert_int_equal(o.defaults.n_keep, -1);
    assert_int_equal(lines(err_text), 0);
    assert_int_equal(parse(&o, NULL, ARGS("--context-shift", "--no-context-shift")), SERVE_ARGS_RUN);
    assert_false(o.context_shift);
    assert_int_equal(o.defaults.n_keep, 0);
    assert_int_equal(parse(&o, NULL, ARGS("--keep", "-2")), SERVE_ARGS_USAGE);
    assert_non_null(strstr(err_text, "--keep"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults),    cmocka_unit_test(test_first_day),  cmocka_unit_test(test_unknown),
        cmocka_unit_test(test_environment), cmocka_unit_test(test_defaults_set), cmocka_unit_test(test_bad_values),
        cmocka_unit_test(test_refused),     cmocka_unit_test(test_context_shift),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
