/*
 * bench_grammar.c — the cost of a JSON grammar on a 32000-token vocabulary.
 *
 *   bench_grammar [SHARED_DIR] [STEPS] [GRAMMAR_FILE]
 *
 * GRAMMAR_FILE: GBNF to measure instead of the built-in JSON grammar.
 * Uses the Llama-2 vocabulary of models/llama-2-tiny-random.gguf. Reports:
 *   - tkv_grammar_create (compile + the vocabulary trie), best of five;
 *   - the allowed-set computation (the trie walk) per step, mean and max;
 *   - tkv_sampler_sample per token, unconstrained and constrained, over
 *     STEPS (default 400) steps of two kinds of logits: "follows" gives a
 *     grammar-allowed token the top logit (a model that mostly writes valid
 *     JSON: the unconstrained choice passes, one token is checked), "random"
 *     is random logits (the choice is rejected almost every step: the
 *     allowed set is computed every step, the worst case).
 *   - generation (decode + sample) with the model itself, tokens per second
 *     unconstrained and constrained: its random weights make the worst
 *     case, a model that ignores the grammar, on the smallest model with
 *     this vocabulary, where sampling weighs the most against decoding.
 * Sampling uses the default chain (top-k 40, top-p 0.95, min-p 0.05, T 0.8).
 */
#include "bench_clock.h"
#include "tokenkv.h"

#include "runtime/grammar.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char JSON[] =
    "root   ::= object\n"
    "value  ::= object | array | string | number | (\"true\" | \"false\" | \"null\") ws\n"
    "object ::= \"{\" ws ( string \":\" ws value (\",\" ws string \":\" ws value)* )? \"}\" ws\n"
    "array  ::= \"[\" ws ( value (\",\" ws value)* )? \"]\" ws\n"
    "string ::= \"\\\"\" (\n"
    "    [^\"\\\\\\x7F\\x00-\\x1F] | \"\\\\\" ([\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4})\n"
    "  )* \"\\\"\" ws\n"
    "number ::= (\"-\"? ([0-9] | [1-9] [0-9]{0,15})) (\".\" [0-9]+)? ([eE] [-+]? [0-9] [1-9]{0,15})? ws\n"
    "ws     ::= | \" \" | \"\\n\" [ \\t]{0,20}\n";

static uint64_t rs = 88172645463325252ull;
static uint32_t rnd(void) {
    rs ^= rs << 13, rs ^= rs >> 7, rs ^= rs << 17;
    return (uint32_t)(rs >> 11);
}

/* Mean ms per sample over steps; constrained when g. follows: see the header comment. */
static double run(tkv_model *model, const tkv_grammar *g, bool constrained, bool follows, int steps,
                  double *allowed_mean, double *allowed_max, int *restarts) {
    rs = 88172645463325252ull; /* the same logits for both runs */
    const size_t nv = tkv_vocab_size(model);
    float *l = malloc(nv * sizeof *l);
    uint8_t *allowed = malloc(nv);
    tkv_sampler *s = NULL;
    tkv_sampler_params p = tkv_sampler_default_params();
    p.seed = 1;
    tkv__gmatch *shadow = NULL; /* the grammar's state, outside the timing */
    if (tkv_sampler_create(&p, nv, &s) || tkv__gmatch_create(tkv__grammar_gbnf(g), &shadow)) abort();
    if (constrained && tkv_sampler_set_grammar(s, g)) abort();
    double total = 0, at = 0, amax = 0;
    int na = 0;
    *restarts = 0;
    for (int i = 0; i < steps; i++) {
        size_t n = 0;
        const double t0 = now();
        if (tkv__grammar_allowed(g, shadow, allowed, &n)) abort();
        const double dt = now() - t0;
        at += dt, na++;
        if (dt > amax) amax = dt;
        for (size_t t = 0; t < nv; t++) l[t] = (float)(rnd() % 10000) / 1000.0f;
        if (follows && n) { /* a random allowed token (not EOG) on top */
            size_t k = rnd() % n;
            for (size_t t = 0; t < nv; t++)
                if (allowed[t] && k-- == 0) l[t] += 20;
        }
        const double t1 = now();
        const tkv_token tok = tkv_sampler_sample(s, l);
        total += now() - t1;
        bool ok;
        if (tkv_token_is_eog(model, tok) || tkv__grammar_token(g, shadow, tok, true, &ok) || !ok) {
            /* the sentence ended (or an unconstrained run left it): start again */
            (*restarts)++;
            if (tkv__gmatch_reset(shadow)) abort();
            if (constrained && tkv_sampler_set_grammar(s, g)) abort();
        }
    }
    *allowed_mean = at / na * 1e3, *allowed_max = amax * 1e3;
    tkv__gmatch_free(shadow);
    tkv_sampler_free(s);
    free(l), free(allowed);
    return total / steps * 1e3;
}

/*
 * Tokens per second of decode + sample over steps tokens, in texts of at most
 * 64 tokens; *sample_ms: the mean time of tkv_sampler_sample.
 */
static double generate(tkv_model *model, const tkv_grammar *g, int steps, int *ended, double *sample_ms) {
    tkv_context *ctx = NULL;
    tkv_sampler *s = NULL;
    tkv_sampler_params p = tkv_sampler_default_params();
    p.seed = 3;
    if (tkv_context_create(model, NULL, &ctx) || tkv_sampler_create(&p, tkv_vocab_size(model), &s)) abort();
    tkv_token toks[80] = {tkv_token_bos(model)};
    size_t n = 1;
    *ended = 0;
    if (g && tkv_sampler_set_grammar(s, g)) abort();
    const double t0 = now();
    double ts = 0;
    for (int i = 0; i < steps; i++) {
        size_t reused;
        if (tkv_seq_sync(ctx, 0, 0, toks, n, &reused)) abort();
        const double t1 = now();
        const tkv_token t = tkv_sampler_sample(s, tkv_get_logits_last(ctx));
        ts += now() - t1;
        toks[n++] = t;
        if (tkv_token_is_eog(model, t) || n == 64) { /* start a new text */
            *ended += tkv_token_is_eog(model, t);
            n = 1;
            if (g && tkv_sampler_set_grammar(s, g)) abort();
        }
    }
    const double dt = now() - t0;
    *sample_ms = ts / steps * 1e3;
    tkv_sampler_free(s);
    tkv_context_free(ctx);
    return steps / dt;
}

int main(int argc, char **argv) {
    const char *shared = argc > 1 ? argv[1] : TKV_SHARED_DIR;
    const int steps = argc > 2 ? atoi(argv[2]) : 400;
    const char *gbnf = JSON;
    size_t gbnf_len = strlen(JSON);
    char *text = NULL;
    if (argc > 3) { /* a grammar from a file */
        FILE *f = fopen(argv[3], "rb");
        text = f ? malloc(1 << 20) : NULL;
        if (!text) {
            fprintf(stderr, "bench_grammar: cannot read %s\n", argv[3]);
            return 1;
        }
        gbnf_len = fread(text, 1, (1 << 20) - 1, f);
        fclose(f);
        gbnf = text;
    }
    char path[1024];
    snprintf(path, sizeof path, "%s/models/llama-2-tiny-random.gguf", shared);
    tkv_model_params mp = tkv_model_default_params();
    mp.vocab_only = true;
    tkv_model *model = NULL;
    if (tkv_model_load(path, &mp, &model)) {
        fprintf(stderr, "bench_grammar: %s\n", tkv_last_error(NULL));
        return 1;
    }
    tkv_grammar *g = NULL;
    double best = 1e9;
    for (int i = 0; i < 5; i++) {
        tkv_grammar_free(g);
        const double t0 = now();
        if (tkv_grammar_create(model, gbnf, gbnf_len, NULL, &g)) {
            fprintf(stderr, "bench_grammar: %s\n", tkv_last_error(NULL));
            return 1;
        }
        const double dt = now() - t0;
        if (dt < best) best = dt;
    }
    printf("vocabulary %zu tokens; tkv_grammar_create (%s): %.2f ms\n", tkv_vocab_size(model),
           argc > 3 ? argv[3] : "JSON", best * 1e3);
    for (int follows = 1; follows >= 0; follows--) {
        double am, ax, um, ux;
        int r, ur;
        const double base = run(model, g, false, follows, steps, &um, &ux, &ur);
        const double co = run(model, g, true, follows, steps, &am, &ax, &r);
        printf("%-8s allowed set %.3f ms mean, %.3f ms max | sample: unconstrained %.3f ms, constrained %.3f ms"
               " per token (%d sentences ended in %d steps)\n",
               follows ? "follows" : "random", am, ax, base, co, r, steps);
    }
    tkv_model_free(model); /* the grammar keeps what it needs */
    mp.vocab_only = false;
    if (tkv_model_load(path, &mp, &model)) {
        fprintf(stderr, "bench_grammar: %s\n", tkv_last_error(NULL));
        return 1;
    }
    int e0, e1;
    double s0, s1;
    const double un = generate(model, NULL, steps, &e0, &s0), co = generate(model, g, steps, &e1, &s1);
    printf("generate (decode + sample, %s): unconstrained %.0f tok/s, constrained %.0f tok/s (%+.1f%%;"
           " sampling %.3f vs %.3f ms a token; %d texts completed by the grammar)\n",
           path, un, co, 100 * (co - un) / un, s0, s1, e1);
    tkv_grammar_free(g);
    tkv_model_free(model);
    free(text);
    return 0;
}
