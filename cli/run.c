/*
 * run.c — `tokenkv run`: generate text from a prompt.
 */
#include "cli.h"
#include "tokenkv.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char *const run_help =
    "usage: tokenkv run -m MODEL -p PROMPT [-n N] [--temp T] [--top-k K] [--top-p P] [--min-p P]\n"
    "                  [--repeat-penalty R] [--seed S] [-t THREADS] [-c CELLS] [-ctk T] [-ctv T] [--ids]\n"
    "                  [--reference-order] [--draft N]\n"
    "\n"
    "Generate up to N tokens after PROMPT (tokenized with the model's default special\n"
    "tokens) and print only the generated text, as it is produced; logs and timings\n"
    "go to stderr. Stops at end-of-generation, after N tokens, or at the model's\n"
    "context length (saying so on stderr).\n"
    "\n"
    "  -m, --model MODEL       a GGUF model\n"
    "  -p, --prompt PROMPT     the prompt\n"
    "  -n, --n-predict N       tokens to generate (default 128)\n"
    "  --temp T                temperature; 0 is greedy (default 0.8)\n"
    "  --top-k K               keep the K most likely tokens, 0 = off (default 40)\n"
    "  --top-p P               nucleus sampling, 1 = off (default 0.95)\n"
    "  --min-p P               drop tokens below P x the best one's probability (default 0.05)\n"
    "  --repeat-penalty R      penalise the last 64 tokens, 1 = off (default 1)\n"
    "  --seed S                random seed (default 0): same seed, same output\n"
    "  -t, --threads N         threads (default: the physical cores this process may use,\n"
    "                          within its cgroup quota)\n"
    "  -c, --cells N           KV cells, i.e. the context size (default 4096)\n"
    "  -ctk, --cache-type-k T  the K cache's type: " CLI_KV_TYPES " (default f16)\n"
    "  -ctv, --cache-type-v T  the V cache's type (default: the K cache's)\n"
    "  --ids                   print one JSON array of the generated ids instead of text\n"
    "  --reference-order       compute in llama.cpp's order (tkv_context_params.batch_invariant\n"
    "                          false) to reproduce its outputs token for token; the default\n"
    "                          arithmetic attends in float, as close to exact or closer\n"
    "  --draft N               verify up to N drafted tokens per step, taken from the cache (what\n"
    "                          followed this text before) or from the text itself (what followed\n"
    "                          its last few tokens earlier): the same tokens, fewer steps when\n"
    "                          the text copies itself (0 = off, the default; at most 64)\n"
    "  -h, --help              show this help\n";

/* A number option; false (message printed) on a bad value. */
static bool num(const char *opt, const char *v, double lo, double hi, double *out) {
    return cli_num("run", opt, v, lo, hi, out);
}

/* A --cache-type-k/v value; false (after a message) for a name that is not a KV cache type. */
static bool kv_type_arg(const char *opt, const char *v, tkv_type *out) {
    if (cli_kv_type(v, out)) return true;
    fprintf(stderr, "tokenkv run: %s '%s': not a KV cache type (%s)\n", opt, v, CLI_KV_TYPES);
    return false;
}

/* Record a generated token and print its text (or, with --ids, only record it). */
static void emit(tkv_token t, tkv_token *gen, size_t *n_gen, tkv_detok *dt, bool ids_only) {
    gen[(*n_gen)++] = t;
    if (ids_only) return;
    const char *s;
    size_t len;
    if (tkv_detok_push(dt, t, &s, &len) == TKV_OK && len) {
        fwrite(s, 1, len, stdout);
        fflush(stdout);
    }
}

int cmd_run(int argc, char **argv) {
    const char *model_path = NULL, *prompt = NULL;
    double n_predict = 128, threads = 0, cells = 0, seed = 0, draft = 0;
    tkv_type type_k = TKV_TYPE_F16, type_v = TKV_TYPE_COUNT; /* V: as K */
    tkv_sampler_params sp = tkv_sampler_default_params();
    bool ids_only = false, reference_order = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        double d;
        bool ok = true;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            fputs(run_help, stdout);
            return 0;
        } else if (!strcmp(a, "--ids")) {
            ids_only = true;
            continue;
        } else if (!strcmp(a, "--reference-order")) {
            reference_order = true;
            continue;
        }
        if (!v) {
            fprintf(stderr, "tokenkv run: unknown option or missing value: '%s'\n%s", a, run_help);
            return 2;
        }
        i++;
        if (!strcmp(a, "-m") || !strcmp(a, "--model")) model_path = v;
        else if (!strcmp(a, "-p") || !strcmp(a, "--prompt")) prompt = v;
        else if (!strcmp(a, "-n") || !strcmp(a, "--n-predict")) ok = num(a, v, 0, 1e9, &n_predict);
        else if (!strcmp(a, "--temp")) ok = num(a, v, 0, 100, &d), sp.temperature = (float)d;
        else if (!strcmp(a, "--top-k")) ok = num(a, v, 0, 1e9, &d), sp.top_k = (int32_t)d;
        else if (!strcmp(a, "--top-p")) ok = num(a, v, 0, 1, &d), sp.top_p = (float)d;
        else if (!strcmp(a, "--min-p")) ok = num(a, v, 0, 1, &d), sp.min_p = (float)d;
        else if (!strcmp(a, "--repeat-penalty")) ok = num(a, v, 0.01, 100, &d), sp.repeat_penalty = (float)d;
        else if (!strcmp(a, "--seed")) ok = num(a, v, 0, 1.8e19, &seed), sp.seed = (uint64_t)seed;
        else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) ok = num(a, v, 1, 1024, &threads);
        else if (!strcmp(a, "-c") || !strcmp(a, "--cells")) ok = num(a, v, 1, 1 << 24, &cells);
        else if (!strcmp(a, "--draft")) ok = num(a, v, 0, TKV_DRAFT_MAX, &draft);
        else if (!strcmp(a, "-ctk") || !strcmp(a, "--cache-type-k")) ok = kv_type_arg(a, v, &type_k);
        else if (!strcmp(a, "-ctv") || !strcmp(a, "--cache-type-v")) ok = kv_type_arg(a, v, &type_v);
        else {
            fprintf(stderr, "tokenkv run: unknown option '%s'\n%s", a, run_help);
            return 2;
        }
        if (!ok) return 2;
    }
    if (!model_path || !prompt) {
        fprintf(stderr, "tokenkv run: -m MODEL and -p PROMPT are required\n%s", run_help);
        return 2;
    }

    int rc = 1;
    tkv_model *m = NULL;
    tkv_context *ctx = NULL;
    tkv_sampler *smp = NULL;
    tkv_detok *dt = NULL;
    tkv_token *toks = NULL, *gen = NULL;
    double t0 = cli_now();
    if (tkv_model_load(model_path, NULL, &m) != TKV_OK) {
        cli_fail("run", "%s", tkv_last_error(NULL));
        goto done;
    }
    tkv_context_params cp = tkv_context_default_params();
    if (threads > 0) {
        cp.n_threads = (int)threads;
    } else { /* the default, and why: a container's quota or a taskset shows here */
        char why[160];
        cp.n_threads = tkv_default_threads(why, sizeof why);
        fprintf(stderr, "tokenkv run: %s\n", why);
    }
    if (cells > 0) cp.n_cells = (uint32_t)cells;
    cp.kv_type = type_k;
    cp.kv_type_v = type_v;
    /* one prompt, then one token at a time: the split is always the same,
       so the reference's order costs no reproducibility here */
    cp.batch_invariant = !reference_order;
    size_t n_prompt = 0;
    size_t plen = strlen(prompt);
    tkv_tokenize(m, prompt, plen, TKV_TOKENIZE_ADD_SPECIAL, NULL, 0, &n_prompt);
    toks = malloc((n_prompt + 1) * sizeof *toks);
    /* the generated tokens, then room for one step's drafts and the tokens it returns */
    gen = malloc(((size_t)n_predict + 1 + 2 * TKV_DRAFT_MAX + 1) * sizeof *gen);
    if (!toks || !gen) {
        cli_fail("run", "out of memory");
        goto done;
    }
    if (tkv_tokenize(m, prompt, plen, TKV_TOKENIZE_ADD_SPECIAL, toks, n_prompt, &n_prompt) != TKV_OK) {
        cli_fail("run", "%s", tkv_last_error(m));
        goto done;
    }
    if (n_prompt == 0) {
        cli_fail("run", "the prompt is empty and the model adds no BOS token");
        goto done;
    }
    /* The model's context length bounds the whole text: past it, its positions
       mean nothing it was trained on. A prompt that fills it is an error; a
       generation that reaches it stops there, and says so. */
    tkv_hparams hp;
    const size_t n_ctx = tkv_model_hparams(m, &hp) == TKV_OK && hp.n_ctx_train ? hp.n_ctx_train : SIZE_MAX;
    if (n_prompt >= n_ctx) {
        cli_fail("run", "the prompt (%zu tokens) fills the model's context length (%zu tokens)", n_prompt, n_ctx);
        goto done;
    }
    const size_t room = n_ctx - n_prompt;
    const bool capped = (size_t)n_predict > room;
    if (capped) n_predict = (double)room;
    if (n_prompt + (size_t)n_predict > cp.n_cells) {
        cli_fail("run", "prompt (%zu tokens) + %g to generate exceed the context of %u cells (-c)", n_prompt, n_predict,
                 cp.n_cells);
        goto done;
    }
    if (tkv_context_create(m, &cp, &ctx) != TKV_OK || tkv_sampler_create(&sp, tkv_vocab_size(m), &smp) != TKV_OK ||
        tkv_detok_create(m, 0, &dt) != TKV_OK) {
        cli_fail("run", "%s", tkv_last_error(NULL));
        goto done;
    }
    double t1 = cli_now();

    /* the prompt: sequence 0 holds it (nothing is cached yet in a fresh context) */
    for (size_t i = 0; i < n_prompt; i++) tkv_sampler_accept(smp, toks[i]);
    if (tkv_seq_sync(ctx, 0, 0, toks, n_prompt, NULL) != TKV_OK) {
        cli_fail("run", "%s", tkv_last_error(ctx));
        goto done;
    }
    double t2 = cli_now();
    /* one token at a time, or with --draft several verified in one step: the same tokens either way */
    size_t n_gen = 0, offered = 0, accepted = 0;
    tkv_token t = tkv_sampler_sample(smp, tkv_get_logits_last(ctx));
    tkv_token *drafts = gen + (size_t)n_predict + 1, *outs = drafts + TKV_DRAFT_MAX;
    tkv_draft_budget budget = {0};
    size_t step_offered = 0, step_accepted = 0; /* the last step's, for the budget */
    while (!tkv_token_is_eog(m, t)) {
        emit(t, gen, &n_gen, dt, ids_only);
        if (n_gen == (size_t)n_predict) break;
        size_t n_draft = 0, n_out = 0;
        const size_t ask = tkv_draft_budget_next(&budget, (size_t)draft, step_offered, step_accepted);
        if (ask && tkv_seq_draft(ctx, 0, &t, 1, drafts, ask, &n_draft, 0) != TKV_OK) {
            cli_fail("run", "%s", tkv_last_error(ctx));
            goto done;
        }
        const size_t max_out = (size_t)n_predict - n_gen; /* the tokens still wanted, the next pending one included */
        if (tkv_seq_decode_draft(ctx, 0, t, drafts, n_draft, smp, max_out, outs, &n_out) != TKV_OK) {
            cli_fail("run", "%s", tkv_last_error(ctx));
            goto done;
        }
        step_offered = n_draft < max_out - 1 ? n_draft : max_out - 1;
        step_accepted = n_out - 1;
        offered += step_offered;
        accepted += n_out - 1;
        for (size_t i = 0; i + 1 < n_out; i++) emit(outs[i], gen, &n_gen, dt, ids_only); /* never an end token */
        t = outs[n_out - 1];
        if (n_gen == (size_t)n_predict) break;
    }
    double t3 = cli_now();
    const bool at_limit = capped && n_gen == (size_t)n_predict;
    if (ids_only) {
        putchar('[');
        for (size_t i = 0; i < n_gen; i++) printf(i ? ", %d" : "%d", (int)gen[i]);
        puts("]");
    } else {
        const char *s;
        size_t len;
        if (tkv_detok_flush(dt, &s, &len) == TKV_OK) fwrite(s, 1, len, stdout);
        putchar('\n');
    }
    if (at_limit)
        fprintf(stderr, "tokenkv run: stopped at the model's context length (%zu tokens: %zu of prompt, %zu generated)\n",
                n_ctx, n_prompt, n_gen);
    fprintf(stderr, "tokenkv run: load %.0f ms; prompt %zu tokens in %.1f ms (%.1f tok/s); generated %zu in %.1f ms (%.1f tok/s)\n",
            1e3 * (t1 - t0), n_prompt, 1e3 * (t2 - t1), (double)n_prompt / (t2 - t1), n_gen, 1e3 * (t3 - t2),
            n_gen > 0 ? (double)n_gen / (t3 - t2) : 0.0);
    if (draft > 0)
        fprintf(stderr, "tokenkv run: drafts: %zu offered, %zu accepted (%zu tokens in %zu steps)\n", offered, accepted,
                n_gen, n_gen - accepted);
    rc = 0;
done:
    free(toks);
    free(gen);
    tkv_detok_free(dt);
    tkv_sampler_free(smp);
    tkv_context_free(ctx);
    tkv_model_free(m);
    return rc;
}
