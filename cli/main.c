/*
 * main.c — `tokenkv`: dispatch to a subcommand.
 */
#include "cli.h"
#include "tokenkv.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static const struct {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *summary;
} commands[] = {
    {"bench", cmd_bench, "measure prompt processing and generation speed"},
    {"inspect", cmd_inspect, "show a GGUF file's architecture, tokenizer and tensors"},
    {"logits", cmd_logits, "print the logits of every position of a prompt, as JSON"},
    {"mkmodel", cmd_mkmodel, "write a random-weight model of any architecture, shape and type"},
    {"quantize", cmd_quantize, "quantize a model to a type or mix, as the reference's quantizer does"},
    {"run", cmd_run, "generate text from a prompt"},
    {"serve", cmd_serve, "an OpenAI-compatible server that reuses every cached prefix"},
    {"template", cmd_template, "render a chat template for a conversation"},
    {"tokenize", cmd_tokenize, "turn text into token ids"},
};

bool cli_kv_type(const char *name, tkv_type *out) {
    static const tkv_type kv_types[] = {TKV_TYPE_F16,  TKV_TYPE_F32,  TKV_TYPE_Q8_0, TKV_TYPE_Q5_1,
                                        TKV_TYPE_Q5_0, TKV_TYPE_Q4_1, TKV_TYPE_Q4_0, TKV_TYPE_IQ4_NL};
    for (size_t i = 0; i < sizeof kv_types / sizeof *kv_types; i++)
        if (!strcasecmp(name, tkv_type_name(kv_types[i]))) {
            *out = kv_types[i];
            return true;
        }
    return false;
}

char *cli_read_file(const char *path, size_t *len) {
    FILE *f = strcmp(path, "-") ? fopen(path, "rb") : stdin;
    if (!f) return NULL;
    size_t cap = 4096, n = 0, got;
    char *buf = malloc(cap);
    while (buf && (got = fread(buf + n, 1, cap - n - 1, f)) > 0)
        if ((n += got) == cap - 1) {
            char *b = realloc(buf, 2 * cap);
            if (!b) free(buf);
            buf = b, cap *= 2;
        }
    const int err = ferror(f);
    if (f != stdin) fclose(f);
    if (!buf || err) {
        free(buf);
        return NULL;
    }
    buf[n] = '\0';
    *len = n;
    return buf;
}

int cli_fail(const char *sub, const char *fmt, ...) {
    va_list ap;
    fprintf(stderr, "tokenkv %s: ", sub);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    return 1;
}

static void usage(FILE *f) {
    fprintf(f, "usage: tokenkv COMMAND [OPTIONS]\n\ncommands:\n");
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(f, "  %-10s %s\n", commands[i].name, commands[i].summary);
    fprintf(f, "\n'tokenkv COMMAND --help' lists the options of a command.\n"
               "  -h, --help     show this help\n"
               "  --version      show the version\n");
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(argv[1], "--version")) {
        printf("tokenkv %d.%d.%d\n", TKV_VERSION_MAJOR, TKV_VERSION_MINOR, TKV_VERSION_PATCH);
        return 0;
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (!strcmp(argv[1], commands[i].name)) return commands[i].run(argc - 1, argv + 1);
    fprintf(stderr, "tokenkv: unknown command '%s' (try 'tokenkv --help')\n", argv[1]);
    return 2;
}
