/*
 * logits.c — `tokenkv logits`: the logits of every position of a prompt, as
 * JSON, to check a model against another implementation.
 */
#include "cli.h"
#include "tokenkv.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const logits_help =
    "usage: tokenkv logits -m MODEL (-p TEXT | -f FILE) [--no-bos] [-t THREADS]\n"
    "\n"
    "Decode the prompt (with the model's default special tokens) in one batch\n"
    "and print one JSON object: {\"tokens\": [...], \"logits\": [[...], ...]},\n"
    "one row of n_vocab floats per prompt position (round-trip precision),\n"
    "computed in the reference implementation's arithmetic (batch_invariant\n"
    "off), to compare with its logits.\n"
    "\n"
    "  -m, --model MODEL       a GGUF model\n"
    "  -p, --prompt TEXT       the prompt\n"
    "  -f, --file FILE         the prompt, read from a file (bytes as they are)\n"
    "  --no-bos                add no special tokens\n"
    "  -t, --threads N         threads (default: the physical cores this process may use,\n"
    "                          within its cgroup quota)\n"
    "  -h, --help              show this help\n";

int cmd_logits(int argc, char **argv) {
    const char *model_path = NULL, *prompt = NULL, *file = NULL;
    bool bos = true;
    long threads = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            fputs(logits_help, stdout);
            return 0;
        }
        if (!strcmp(a, "--no-bos")) {
            bos = false;
            continue;
        }
        const char *v = i + 1 < argc ? argv[++i] : NULL;
        if (!v) {
            fprintf(stderr, "tokenkv logits: unknown option or missing value: '%s'\n%s", a, logits_help);
            return 2;
        } else if (!strcmp(a, "-m") || !strcmp(a, "--model")) {
            model_path = v;
        } else if (!strcmp(a, "-p") || !strcmp(a, "--prompt")) {
            prompt = v;
        } else if (!strcmp(a, "-f") || !strcmp(a, "--file")) {
            file = v;
        } else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) {
            uint64_t t;
            if (!cli_uint("logits", a, v, 1, 1024, &t)) return 2;
            threads = (long)t;
        } else {
            fprintf(stderr, "tokenkv logits: unknown option '%s'\n%s", a, logits_help);
            return 2;
        }
    }
    if (!model_path || !!prompt == !!file) {
        fprintf(stderr, "tokenkv logits: give -m MODEL and one of -p TEXT or -f FILE\n%s", logits_help);
        return 2;
    }

    int rc = 1;
    char *text = NULL;
    size_t len = prompt ? strlen(prompt) : 0;
    tkv_model *m = NULL;
    tkv_context *ctx = NULL;
    tkv_token *toks = NULL;
    tkv_pos *pos = NULL;
    tkv_seq *seq = NULL;
    bool *want = NULL;
    if (file && !(text = cli_read_file(file, &len))) {
        cli_fail("logits", "cannot read '%s'", file);
        goto done;
    }
    if (tkv_model_load(model_path, NULL, &m) != TKV_OK) {
        cli_fail("logits", "%s", tkv_last_error(NULL));
        goto done;
    }
    const char *t = prompt ? prompt : text;
    const unsigned flags = bos ? TKV_TOKENIZE_ADD_SPECIAL : 0;
    size_t n = 0;
    tkv_tokenize(m, t, len, flags, NULL, 0, &n); /* the count */
    if (n == 0) {
        cli_fail("logits", "the prompt is empty and the model adds no BOS token");
        goto done;
    }
    toks = malloc(n * sizeof *toks), pos = malloc(n * sizeof *pos), seq = calloc(n, sizeof *seq);
    want = malloc(n * sizeof *want);
    if (!toks || !pos || !seq || !want) {
        cli_fail("logits", "out of memory");
        goto done;
    }
    if (tkv_tokenize(m, t, len, flags, toks, n, &n) != TKV_OK) {
        cli_fail("logits", "%s", tkv_last_error(m));
        goto done;
    }
    tkv_context_params cp = tkv_context_default_params();
    if (threads > 0) cp.n_threads = (int)threads;
    cp.n_cells = (uint32_t)n;
    cp.n_seq_max = 1;
    cp.batch_invariant = false; /* these rows are for comparing with the reference: its arithmetic */
    if (tkv_context_create(m, &cp, &ctx) != TKV_OK) {
        cli_fail("logits", "%s", tkv_last_error(NULL));
        goto done;
    }
    for (size_t i = 0; i < n; i++) pos[i] = (tkv_pos)i, want[i] = true;
    tkv_batch b = {n, toks, pos, seq, want};
    if (tkv_decode(ctx, &b) != TKV_OK) {
        cli_fail("logits", "%s", tkv_last_error(ctx));
        goto done;
    }
    const size_t n_vocab = tkv_vocab_size(m);
    fputs("{\"tokens\": [", stdout);
    for (size_t i = 0; i < n; i++) printf("%s%d", i ? ", " : "", (int)toks[i]);
    fputs("], \"logits\": [", stdout);
    for (size_t i = 0; i < n; i++) {
        const float *row = tkv_get_logits(ctx, i);
        fputs(i ? ", [" : "[", stdout);
        for (size_t k = 0; k < n_vocab; k++) {
            if (k) fputc(',', stdout);
            if (isfinite(row[k])) printf("%.9g", (double)row[k]);
            else fputs("null", stdout); /* JSON has no inf or NaN */
        }
        fputc(']', stdout);
    }
    fputs("]}\n", stdout);
    rc = fflush(stdout) == 0 ? 0 : cli_fail("logits", "cannot write the output");
done:
    free(text);
    free(toks);
    free(pos);
    free(seq);
    free(want);
    tkv_context_free(ctx);
    tkv_model_free(m);
    return rc;
}
