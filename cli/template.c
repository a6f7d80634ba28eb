/*
 * template.c — `tokenkv template`: render a chat template for a
 * conversation, as transformers' apply_chat_template would.
 */
#include "cli.h"
#include "tokenkv.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const template_help =
    "usage: tokenkv template (--template FILE | -m MODEL) --input INPUT.json\n"
    "\n"
    "Render a chat template for a conversation and print the text exactly (no\n"
    "newline added). INPUT.json is an object: \"messages\" (OpenAI-style), and\n"
    "optionally \"tools\", \"add_generation_prompt\" (default false), \"bos_token\",\n"
    "\"eos_token\", \"now\" (the date strftime_now formats, YYYY-MM-DD; default\n"
    "today) and \"extra\" (further template variables, e.g. {\"enable_thinking\":\n"
    "false}). When the template raises, one line on stderr and exit status 1.\n"
    "\n"
    "  --template FILE   a Jinja template file\n"
    "  -m, --model MODEL the model's own template (tokenizer.chat_template); its\n"
    "                    BOS and EOS texts unless the input gives them\n"
    "  --input FILE      the conversation (- for standard input)\n"
    "  -h, --help        show this help\n";

/*
 * The template's variables from the input, as transformers passes them:
 * messages; tools (none when absent); documents none; add_generation_prompt;
 * bos_token and eos_token only when given (an absent one is undefined, not
 * empty), else the model's; then every key of "extra".
 */
static json_t *variables(json_t *in, const tkv_model *m) {
    json_t *v = json_object();
    json_t *tools = json_object_get(in, "tools"), *agp = json_object_get(in, "add_generation_prompt");
    json_object_set(v, "messages", json_object_get(in, "messages"));
    json_object_set(v, "tools", tools ? tools : json_null());
    json_object_set_new(v, "documents", json_null());
    json_object_set(v, "add_generation_prompt", agp ? agp : json_false());
    static const char *const names[2] = {"bos_token", "eos_token"};
    for (int i = 0; i < 2; i++) {
        json_t *given = json_object_get(in, names[i]);
        const tkv_token id = m ? (i ? tkv_token_eos(m) : tkv_token_bos(m)) : TKV_TOKEN_NULL;
        const char *text = id == TKV_TOKEN_NULL ? NULL : tkv_token_text(m, id);
        if (given) json_object_set(v, names[i], given);
        else if (text) json_object_set_new(v, names[i], json_string(text));
    }
    const char *k;
    json_t *x;
    json_object_foreach(json_object_get(in, "extra"), k, x) json_object_set(v, k, x);
    return v;
}

int cmd_template(int argc, char **argv) {
    const char *tmpl_path = NULL, *model_path = NULL, *input_path = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            fputs(template_help, stdout);
            return 0;
        }
        const char **slot = !strcmp(a, "--template")                       ? &tmpl_path
                            : !strcmp(a, "-m") || !strcmp(a, "--model") ? &model_path
                            : !strcmp(a, "--input")                        ? &input_path
                                                                           : NULL;
        if (!slot || !val) {
            fprintf(stderr, "tokenkv template: %s: '%s'\n%s", slot ? "missing value" : "unknown option", a,
                    template_help);
            return 2;
        }
        *slot = val;
        i++;
    }
    if (!input_path || !tmpl_path == !model_path) {
        fprintf(stderr, "tokenkv template: give --input and one of --template or -m\n%s", template_help);
        return 2;
    }

    int rc = 1;
    tkv_model *m = NULL;
    tkv_chat_template *t = NULL;
    char *src = NULL, *in_text = NULL, *vars = NULL, *out = NULL;
    json_t *in = NULL, *v = NULL;
    size_t len;
    json_error_t jerr;
    if (!(in_text = cli_read_file(input_path, &len))) {
        cli_fail("template", "--input %s: cannot read it", input_path);
        goto done;
    }
    if (!(in = json_loadb(in_text, len, 0, &jerr)) || !json_is_object(in)) {
        cli_fail("template", "--input %s: %s", input_path, in ? "not a JSON object" : jerr.text);
        goto done;
    }
    const json_t *now = json_object_get(in, "now"), *extra = json_object_get(in, "extra");
    if (!json_is_array(json_object_get(in, "messages")) || (now && !json_is_string(now)) ||
        (extra && !json_is_object(extra))) {
        cli_fail("template", "--input %s: \"messages\" must be an array, \"now\" a string and \"extra\" an object",
                 input_path);
        goto done;
    }
    if (model_path) {
        tkv_model_params p = tkv_model_default_params();
        p.vocab_only = true;
        if (tkv_model_load(model_path, &p, &m) || tkv_chat_template_from_model(m, &t)) {
            cli_fail("template", "%s: %s", model_path, tkv_last_error(NULL));
            goto done;
        }
    } else {
        if (!(src = cli_read_file(tmpl_path, &len))) {
            cli_fail("template", "--template %s: cannot read it", tmpl_path);
            goto done;
        }
        if (tkv_chat_template_parse(src, len, &t)) {
            cli_fail("template", "%s: %s", tmpl_path, tkv_last_error(NULL));
            goto done;
        }
    }
    v = variables(in, m);
    if (!v || !(vars = json_dumps(v, JSON_COMPACT))) {
        cli_fail("template", "out of memory");
        goto done;
    }
    if (tkv_chat_template_render(t, vars, now ? json_string_value(now) : NULL, &out, &len)) {
        cli_fail("template", "%s", tkv_last_error(NULL));
        goto done;
    }
    rc = fwrite(out, 1, len, stdout) == len && fflush(stdout) == 0 ? 0 : cli_fail("template", "cannot write the output");
done:
    tkv_free(out);
    free(vars);
    json_decref(v);
    json_decref(in);
    free(in_text);
    free(src);
    tkv_chat_template_free(t);
    tkv_model_free(m);
    return rc;
}
