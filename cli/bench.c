/*
 * bench.c — `tokenkv bench`: prompt processing and generation throughput,
 * measured the way the reference's llama-bench measures them, through the
 * public API only.
 *
 *   ppP  one batch of P random tokens into an empty sequence (logits for
 *        the last token only): P / time of the tkv_decode.
 *   tgN  N random tokens decoded one at a time into an empty sequence:
 *        N / total time.
 *
 * With -d D (llama-bench's -d), each test runs after D tokens of context
 * ("pp512 @ d4096"): D random tokens decoded once, untimed, in batches of the
 * context's n_batch; each run then adds its tokens at positions D on and is
 * truncated back to D after (tkv_seq_truncate; where the model cannot
 * truncate, a hybrid whose recurrent state has no checkpoint there, the
 * context is decoded again, untimed). Attention then reads D more cached
 * tokens per layer and token, which is what the test measures.
 *
 * Each test runs once to warm up (caches, page faults of the mapped
 * weights, the thread pool) and then R times; the figure is the mean of the
 * R throughputs and their sample standard deviation. Fresh random tokens on
 * every run, so no run can reuse another's cached prefix.
 */
#include "cli.h"
#include "tokenkv.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char *const bench_help =
    "usage: tokenkv bench -m MODEL [-p N] [-n N] [-d N] [-t THREADS] [-r REPS] [-ctk T] [-ctv T]\n"
    "                      [--json] [--reference-order] [--no-repack] [--no-huge-pages] [--limits]\n"
    "\n"
    "Measure prompt processing (one batch of -p random tokens) and token generation\n"
    "(-n random tokens one at a time) in tokens per second: mean and standard\n"
    "deviation over REPS runs after one warm-up run. Prints a markdown table, or\n"
    "with --json one JSON object per test per line.\n"
    "\n"
    "  -m, --model MODEL       a GGUF model\n"
    "  -p, --n-prompt N        prompt tokens, 0 = skip the test (default 512)\n"
    "  -n, --n-gen N           generated tokens, 0 = skip the test (default 128)\n"
    "  -d, --n-depth N         tokens of context before each test (untimed, as llama-bench's\n"
    "                          -d: the tests read as ppP @ dN, tgN @ dN; default 0)\n"
    "  -t, --threads N         threads (default: the physical cores this process may use,\n"
    "                          within its cgroup quota)\n"
    "  -r, --repetitions N     measured runs per test (default 3)\n"
    "  -ctk, --cache-type-k T  the K cache's type: " CLI_KV_TYPES " (default f16)\n"
    "  -ctv, --cache-type-v T  the V cache's type (default: the K cache's)\n"
    "  --json                  one JSON object per test per line\n"
    "  --reference-order       the reference's arithmetic instead of the default batch-\n"
    "                          invariant one (outputs then depend on batching), to\n"
    "                          measure what invariance costs\n"
    "  --no-repack             keep the weights in the file's layout (no packed rows:\n"
    "                          tkv_model_params.repack), to measure what packing gives\n"
    "  --no-huge-pages         no transparent huge pages under the packed weights\n"
    "                          (tkv_model_params.huge_pages), to measure what they give\n"
    "  --limits                also measure this machine's limits with the same threads\n"
    "                          (tkv_limits_measure: the rate of reading memory no cache\n"
    "                          holds, the int8 multiply-add peak of the kernel level) and\n"
    "                          give generation as a fraction of the read rate (weight\n"
    "                          bytes read per token x tokens/s) and prefill as a fraction\n"
    "                          of the int8 peak (multiply-adds per token x tokens/s); with -d,\n"
    "                          the weights' alone (attention's reads of the context are not counted).\n"
    "                          The limits are measured before and after each test, and each\n"
    "                          test is held to the mean of its two: a machine whose memory is\n"
    "                          shared moves between them, and a test whose two differ by more\n"
    "                          than 15% is marked (its fraction is not to be trusted)\n"
    "  -h, --help              show this help\n";

static bool parse_int(const char *opt, const char *v, long lo, long hi, long *out) {
    uint64_t x;
    if (!cli_uint("bench", opt, v, (uint64_t)lo, (uint64_t)hi, &x)) return false;
    *out = (long)x;
    return true;
}

/* ---- the model's description (as llama-bench's columns) ----------------------- */

typedef struct model_facts {
    const char *file;   /* base name of the path */
    uint64_t size;      /* bytes of all tensors */
    uint64_t params;    /* elements of all tensors */
    char type[16];      /* "Q4_K_M", or the dominant tensor type */
    double read_per_token; /* bytes of weights one token's forward pass reads (see token_cost) */
    double macs_per_token; /* multiply-adds of one token in the matrix products */
    bool float_weights;    /* most of those multiply-adds use float weights (no int8 products) */
} model_facts;

/* Names of the reference's general.file_type numbers that tokenkv can run. */
static const char *ftype_name(int64_t ft) {
    switch (ft) {
    case 0: return "F32";
    case 1: return "F16";
    case 2: return "Q4_0";
    case 3: return "Q4_1";
    case 7: return "Q8_0";
    case 8: return "Q5_0";
    case 9: return "Q5_1";
    case 14: return "Q4_K_S";
    case 15: return "Q4_K_M";
    case 16: return "Q5_K_S";
    case 17: return "Q5_K_M";
    case 18: return "Q6_K";
    case 32: return "BF16";
    default: return NULL;
    }
}

static bool is_float_type(tkv_type t) { return t == TKV_TYPE_F32 || t == TKV_TYPE_F16 || t == TKV_TYPE_BF16; }

/*
 * What one token costs in weights: every matrix (2 dims or more) is read
 * once and gives one multiply-add per element, except the token embedding,
 * a row lookup (unless the output is tied to it, which reads it whole), and
 * 3-dim expert tensors, of which a token uses n_expert_used of n_expert.
 * The bytes are what the products read: the repacked rows at their packed
 * size (tkv_model_tensor_read_bytes), which the IQ1-IQ3 layouts enlarge.
 * Attention's own work (scores over the cached K/V) is not counted: the
 * figures are the weights' share, which dominates at short contexts.
 */
static void token_cost(const tkv_model *m, model_facts *f) {
    const char *arch = NULL;
    size_t len = 0;
    int64_t n_expert = 0, n_used = 0;
    if (tkv_model_meta_str(m, "general.architecture", &arch, &len) == TKV_OK) {
        char key[128];
        snprintf(key, sizeof key, "%.*s.expert_count", (int)len, arch);
        if (tkv_model_meta_int(m, key, &n_expert) != TKV_OK) n_expert = 0;
        snprintf(key, sizeof key, "%.*s.expert_used_count", (int)len, arch);
        if (tkv_model_meta_int(m, key, &n_used) != TKV_OK) n_used = 0;
    }
    tkv_tensor_info out;
    const bool tied = tkv_model_tensor_find(m, "output.weight", &out) != TKV_OK;
    double bytes = 0, macs = 0, float_macs = 0;
    for (size_t i = 0; i < tkv_model_tensor_count(m); i++) {
        tkv_tensor_info ti;
        if (tkv_model_tensor_at(m, i, &ti) || ti.n_dims < 2) continue;
        if (!strcmp(ti.name, "token_embd.weight") && !tied) continue;
        double share = 1.0;
        if (ti.n_dims == 3 && n_expert > 0 && n_used > 0 && ti.ne[2] == (uint64_t)n_expert)
            share = (double)n_used / (double)n_expert;
        bytes += share * (double)tkv_model_tensor_read_bytes(m, i);
        macs += share * (double)ti.n_elems;
        if (is_float_type(ti.type)) float_macs += share * (double)ti.n_elems;
    }
    f->read_per_token = bytes;
    f->macs_per_token = macs;
    f->float_weights = float_macs * 2 > macs;
}

static void describe(const tkv_model *m, const char *path, model_facts *f) {
    const char *slash = strrchr(path, '/');
    f->file = slash ? slash + 1 : path;
    f->size = f->params = 0;
    uint64_t by_type[TKV_TYPE_COUNT] = {0};
    for (size_t i = 0; i < tkv_model_tensor_count(m); i++) {
        tkv_tensor_info ti;
        if (tkv_model_tensor_at(m, i, &ti)) continue;
        f->size += ti.n_bytes;
        f->params += ti.n_elems;
        if ((unsigned)ti.type < TKV_TYPE_COUNT && ti.n_dims >= 2) by_type[ti.type] += ti.n_bytes;
    }
    int64_t ft;
    const char *name = tkv_model_meta_int(m, "general.file_type", &ft) == TKV_OK ? ftype_name(ft) : NULL;
    if (!name) { /* no (known) file type: the type holding most matrix bytes */
        int best = 0;
        for (int t = 1; t < TKV_TYPE_COUNT; t++)
            if (by_type[t] > by_type[best]) best = t;
        name = tkv_type_name((tkv_type)best);
    }
    snprintf(f->type, sizeof f->type, "%s", name ? name : "?");
    token_cost(m, f);
}

static void human_size(uint64_t bytes, char *buf, size_t cap) {
    const double mib = (double)bytes / (1024.0 * 1024.0);
    if (mib >= 1024.0) snprintf(buf, cap, "%.2f GiB", mib / 1024.0);
    else snprintf(buf, cap, "%.2f MiB", mib);
}

static void human_params(uint64_t n, char *buf, size_t cap) {
    if (n >= 1000000000ull) snprintf(buf, cap, "%.2f B", (double)n / 1e9);
    else if (n >= 1000000ull) snprintf(buf, cap, "%.2f M", (double)n / 1e6);
    else snprintf(buf, cap, "%.2f K", (double)n / 1e3);
}

/* ---- the runs ------------------------------------------------------------------------ */

typedef struct bench {
    tkv_context *ctx;
    uint32_t n_vocab;
    uint32_t n_batch; /* the context's: the depth goes in batches of it */
    uint64_t rng;
    size_t depth;     /* tokens of context before each run */
    bool deep;        /* the depth is decoded and sequence 0 holds it */
    tkv_token *tok;   /* (max(p, 1), at least n_batch with a depth) */
    tkv_pos *pos;     /* (as tok) */
    tkv_seq *seq;     /* (as tok), all 0 */
} bench;

static tkv_token random_token(bench *b) {
    b->rng = b->rng * 6364136223846793005ull + 1442695040888963407ull; /* LCG; top bits are good enough */
    return (tkv_token)((b->rng >> 33) % b->n_vocab);
}

/* Sequence 0 holding exactly the depth's tokens (decoded once, then truncated back to after each run); false on
   failure. */
static bool at_depth(bench *b) {
    if (b->deep && tkv_seq_truncate(b->ctx, 0, (tkv_pos)b->depth) == TKV_OK) return true;
    b->deep = false;
    if (tkv_seq_clear(b->ctx, 0) != TKV_OK) return false;
    for (size_t at = 0; at < b->depth;) {
        const size_t n = b->depth - at < b->n_batch ? b->depth - at : b->n_batch;
        for (size_t i = 0; i < n; i++) b->tok[i] = random_token(b), b->pos[i] = (tkv_pos)(at + i);
        tkv_batch batch = {n, b->tok, b->pos, b->seq, NULL};
        if (tkv_decode(b->ctx, &batch) != TKV_OK) return false;
        at += n;
    }
    b->deep = true;
    return true;
}

/* One prompt-processing run: seconds of one tkv_decode of p tokens, < 0 on failure. */
static double run_pp(bench *b, size_t p) {
    if (!at_depth(b)) return -1;
    for (size_t i = 0; i < p; i++) b->tok[i] = random_token(b), b->pos[i] = (tkv_pos)(b->depth + i);
    tkv_batch batch = {p, b->tok, b->pos, b->seq, NULL};
    double t0 = cli_now();
    if (tkv_decode(b->ctx, &batch) != TKV_OK) return -1;
    return cli_now() - t0;
}

/* One generation run: seconds of n single-token decodes, < 0 on failure. */
static double run_tg(bench *b, size_t n) {
    if (!at_depth(b)) return -1;
    double t0 = cli_now();
    for (size_t i = 0; i < n; i++) {
        tkv_token t = random_token(b);
        tkv_pos p = (tkv_pos)(b->depth + i);
        tkv_seq s = 0;
        tkv_batch one = {1, &t, &p, &s, NULL};
        if (tkv_decode(b->ctx, &one) != TKV_OK) return -1;
    }
    return cli_now() - t0;
}

typedef struct result {
    char test[48];
    size_t n_tokens;
    double mean, stddev; /* tokens per second */
} result;

/* Warm-up plus reps runs of one test; false (message printed) on failure. */
static bool measure(bench *b, bool prompt, size_t n, int reps, result *r) {
    if (b->depth) snprintf(r->test, sizeof r->test, "%s%zu @ d%zu", prompt ? "pp" : "tg", n, b->depth);
    else snprintf(r->test, sizeof r->test, "%s%zu", prompt ? "pp" : "tg", n);
    r->n_tokens = n;
    double sum = 0, sum2 = 0;
    for (int i = -1; i < reps; i++) {
        const double s = prompt ? run_pp(b, n) : run_tg(b, n);
        if (s < 0) {
            cli_fail("bench", "%s: %s", r->test, tkv_last_error(b->ctx));
            return false;
        }
        if (i < 0) continue; /* the warm-up */
        const double tps = (double)n / (s > 0 ? s : 1e-9);
        sum += tps;
        sum2 += tps * tps;
    }
    r->mean = sum / reps;
    const double var = reps > 1 ? (sum2 - sum * sum / reps) / (reps - 1) : 0.0;
    r->stddev = var > 0 ? sqrt(var) : 0.0;
    return true;
}

/* ---- output ------------------------------------------------------------------------------ */

static void print_header(void) {
    printf("| %-30s | %10s | %10s | %-8s | %7s | %15s | %20s |\n", "model", "size", "params", "type", "threads", "test",
           "t/s");
    printf("| %s | %s: | %s: | %s | %s: | %s: | %s: |\n", "------------------------------", "---------",
           "---------", "--------", "------", "--------------", "-------------------");
}

static void print_row(const model_facts *f, int threads, const result *r) {
    char size[32], params[32], tps[48];
    human_size(f->size, size, sizeof size);
    human_params(f->params, params, sizeof params);
    snprintf(tps, sizeof tps, "%.2f ± %.2f", r->mean, r->stddev);
    /* "±" is two bytes in UTF-8: widen the field by one so the columns line up */
    printf("| %-30s | %10s | %10s | %-8s | %7d | %15s | %21s |\n", f->file, size, params, f->type, threads, r->test, tps);
    fflush(stdout);
}

static double round2(double v) { return round(v * 100.0) / 100.0; }

/* The limits a test is held to, measured before and after it: it is held to their mean; `steady` when they differ
   by at most STEADY_PERCENT of it (the limits of a VM whose memory other guests share move by half within
   minutes). */
#define STEADY_PERCENT 15.0
typedef struct bracket {
    double before, after, mean;
    bool steady;
} bracket;

static bracket bracket_of(double before, double after) {
    const double mean = (before + after) / 2;
    return (bracket){before, after, mean, mean > 0 && fabs(after - before) <= mean * STEADY_PERCENT / 100.0};
}

/* A result against the machine's limits: prefill in multiply-adds against the int8 peak,
   generation in weight bytes read against the read rate. */
typedef struct against {
    double rate;      /* GMAC/s (pp) or GB/s (tg) */
    bracket limit;    /* the limit it is held to (limit.mean), same unit */
    bool comparable;  /* false for prefill of float weights: the int8 peak is not their bound */
} against;

/* Result r held to the limits measured at lim[0] (before it) and lim[1] (after). */
static against hold_to_limits(const model_facts *f, const tkv_limits lim[2], const result *r, bool prompt) {
    if (prompt)
        return (against){r->mean * f->macs_per_token / 1e9, bracket_of(lim[0].int8_gmacs, lim[1].int8_gmacs),
                         !f->float_weights};
    return (against){r->mean * f->read_per_token / 1e9, bracket_of(lim[0].read_gbs, lim[1].read_gbs), true};
}

/* lim[i] and lim[i + 1] bracket test i. */
static void print_limits(const model_facts *f, const tkv_limits *lim, const result *rs, const bool *prompt, int n) {
    printf("\nlimits (tkv_limits_measure, %d threads, %s, before and after each test): read over %.0f MiB,"
           " int8 by %s\n", lim[0].n_threads, lim[0].level, (double)lim[0].read_bytes / (1024.0 * 1024.0),
           lim[0].int8_instr);
    printf("per token: %.2f MB of weights read, %.3f G multiply-adds\n\n", f->read_per_token / 1e6,
           f->macs_per_token / 1e9);
    printf("| %15s | %12s | %20s | %25s | %17s |\n", "test", "t/s", "rate", "limit before / after", "of the limit");
    printf("| %14s: | %11s: | %19s: | %24s: | %16s: |\n", "--------------", "-----------", "-------------------",
           "------------------------", "----------------");
    bool unsteady = false;
    for (int i = 0; i < n; i++) {
        const against a = hold_to_limits(f, lim + i, &rs[i], prompt[i]);
        char rate[32], limit[48], frac[32];
        snprintf(rate, sizeof rate, prompt[i] ? "%.1f GMAC/s" : "%.2f GB/s read", a.rate);
        snprintf(limit, sizeof limit, "%.1f / %.1f %s", a.limit.before, a.limit.after, prompt[i] ? "GMAC/s" : "GB/s");
        if (a.comparable && a.limit.mean > 0)
            snprintf(frac, sizeof frac, "%.1f%%%s", 100.0 * a.rate / a.limit.mean, a.limit.steady ? "" : " *");
        else snprintf(frac, sizeof frac, "- (float weights)");
        unsteady |= a.comparable && !a.limit.steady;
        printf("| %15s | %12.2f | %20s | %25s | %17s |\n", rs[i].test, rs[i].mean, rate, limit, frac);
    }
    if (unsteady)
        printf("\n* the limit moved by more than %.0f%% during the test: the machine changed under it\n", STEADY_PERCENT);
    fflush(stdout);
}

/* lim: the limits before and after r (two), or NULL */
static bool print_json(const model_facts *f, int threads, int reps, size_t depth, const result *r,
                       const tkv_limits *lim, bool prompt) {
    json_t *o = json_object();
    if (!o) return false;
    json_object_set_new(o, "test", json_string(r->test));
    json_object_set_new(o, "tokens_per_second", json_real(round2(r->mean)));
    json_object_set_new(o, "stddev", json_real(round2(r->stddev)));
    json_object_set_new(o, "n_tokens", json_integer((json_int_t)r->n_tokens));
    json_object_set_new(o, "n_depth", json_integer((json_int_t)depth));
    json_object_set_new(o, "repetitions", json_integer(reps));
    json_object_set_new(o, "threads", json_integer(threads));
    json_object_set_new(o, "model", json_string(f->file));
    json_object_set_new(o, "type", json_string(f->type));
    json_object_set_new(o, "model_size", json_integer((json_int_t)f->size));
    json_object_set_new(o, "params", json_integer((json_int_t)f->params));
    if (lim) {
        const against a = hold_to_limits(f, lim, r, prompt);
        json_object_set_new(o, prompt ? "gmacs" : "weight_read_gbs", json_real(round2(a.rate)));
        json_object_set_new(o, prompt ? "int8_peak_gmacs" : "read_gbs", json_real(round2(a.limit.mean)));
        json_object_set_new(o, "limit_before", json_real(round2(a.limit.before)));
        json_object_set_new(o, "limit_after", json_real(round2(a.limit.after)));
        json_object_set_new(o, "limit_steady", json_boolean(a.limit.steady));
        json_object_set_new(o, "fraction_of_limit", a.comparable && a.limit.mean > 0
                                                        ? json_real(round(a.rate / a.limit.mean * 1e4) / 1e4)
                                                        : json_null());
        json_object_set_new(o, "limits_level", json_string(lim->level));
        json_object_set_new(o, "weight_bytes_per_token", json_integer((json_int_t)f->read_per_token));
        json_object_set_new(o, "macs_per_token", json_integer((json_int_t)f->macs_per_token));
    }
    char *s = json_dumps(o, JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(12));
    json_decref(o);
    if (!s) return false;
    puts(s);
    fflush(stdout);
    free(s);
    return true;
}

int cmd_bench(int argc, char **argv) {
    const char *model_path = NULL;
    long n_prompt = 512, n_gen = 128, n_depth = 0, threads = 0, reps = 3;
    bool json = false, invariant = true, repack = true, huge_pages = true, limits = false;
    tkv_type type_k = TKV_TYPE_F16, type_v = TKV_TYPE_COUNT; /* V: as K */
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            fputs(bench_help, stdout);
            return 0;
        }
        if (!strcmp(a, "--json")) {
            json = true;
            continue;
        }
        if (!strcmp(a, "--reference-order")) {
            invariant = false;
            continue;
        }
        if (!strcmp(a, "--no-repack")) {
            repack = false;
            continue;
        }
        if (!strcmp(a, "--no-huge-pages")) {
            huge_pages = false;
            continue;
        }
        if (!strcmp(a, "--limits")) {
            limits = true;
            continue;
        }
        if (!v) {
            fprintf(stderr, "tokenkv bench: unknown option or missing value: '%s'\n%s", a, bench_help);
            return 2;
        }
        i++;
        bool ok = true;
        if (!strcmp(a, "-m") || !strcmp(a, "--model")) model_path = v;
        else if (!strcmp(a, "-p") || !strcmp(a, "--n-prompt")) ok = parse_int(a, v, 0, 1 << 20, &n_prompt);
        else if (!strcmp(a, "-n") || !strcmp(a, "--n-gen")) ok = parse_int(a, v, 0, 1 << 20, &n_gen);
        else if (!strcmp(a, "-d") || !strcmp(a, "--n-depth")) ok = parse_int(a, v, 0, 1 << 20, &n_depth);
        else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) ok = parse_int(a, v, 1, 1024, &threads);
        else if (!strcmp(a, "-r") || !strcmp(a, "--repetitions")) ok = parse_int(a, v, 1, 1000, &reps);
        else if (!strcmp(a, "-ctk") || !strcmp(a, "--cache-type-k") || !strcmp(a, "-ctv") || !strcmp(a, "--cache-type-v")) {
            const bool k = !strcmp(a, "-ctk") || !strcmp(a, "--cache-type-k");
            ok = cli_kv_type(v, k ? &type_k : &type_v);
            if (!ok) fprintf(stderr, "tokenkv bench: %s '%s': not a KV cache type (%s)\n", a, v, CLI_KV_TYPES);
        } else {
            fprintf(stderr, "tokenkv bench: unknown option '%s'\n%s", a, bench_help);
            return 2;
        }
        if (!ok) return 2;
    }
    if (!model_path) {
        fprintf(stderr, "tokenkv bench: -m MODEL is required\n%s", bench_help);
        return 2;
    }
    if (n_prompt == 0 && n_gen == 0) {
        fprintf(stderr, "tokenkv bench: nothing to measure (-p 0 and -n 0)\n");
        return 2;
    }

    int rc = 1;
    tkv_model *m = NULL;
    bench b = {0};
    tkv_model_params mp = tkv_model_default_params();
    mp.repack = repack;
    mp.huge_pages = huge_pages;
    if (tkv_model_load(model_path, &mp, &m) != TKV_OK) {
        cli_fail("bench", "%s", tkv_last_error(NULL));
        goto done;
    }
    if (tkv_model_pack_held(m)) /* the figures are the file rows' products (tkv_model_pack_held) */
        fprintf(stderr, "tokenkv bench: the IQ layouts, %.1f MiB larger than the file's rows, were left out: they do"
                        " not fit in half the memory available\n", (double)tkv_model_pack_held(m) / (1 << 20));
    tkv_hparams hp;
    if (tkv_model_hparams(m, &hp) != TKV_OK) {
        cli_fail("bench", "%s", tkv_last_error(NULL));
        goto done;
    }
    model_facts facts;
    describe(m, model_path, &facts);
    tkv_context_params cp = tkv_context_default_params();
    cp.n_cells = (uint32_t)(n_depth + n_prompt + n_gen); /* one sequence at a time needs d + max(p, n); + p + n leaves room */
    cp.n_seq_max = 1;
    cp.batch_invariant = invariant;
    cp.kv_type = type_k;
    cp.kv_type_v = type_v;
    if (threads > 0) cp.n_threads = (int)threads;
    threads = cp.n_threads;
    if (tkv_context_create(m, &cp, &b.ctx) != TKV_OK) {
        cli_fail("bench", "%s", tkv_last_error(NULL));
        goto done;
    }
    b.n_vocab = hp.n_vocab;
    b.n_batch = cp.n_batch ? cp.n_batch : 1;
    b.depth = (size_t)n_depth;
    b.rng = 0x853c49e6748fea9bull;
    size_t cap = n_prompt > 0 ? (size_t)n_prompt : 1;
    if (n_depth > 0 && cap < b.n_batch) cap = b.n_batch;
    b.tok = malloc(cap * sizeof *b.tok);
    b.pos = malloc(cap * sizeof *b.pos);
    b.seq = calloc(cap, sizeof *b.seq);
    if (!b.tok || !b.pos || !b.seq) {
        cli_fail("bench", "out of memory");
        goto done;
    }
    tkv_limits lim[3]; /* before the first test, between the two, after the last */
    if (limits && tkv_limits_measure((int)threads, 0, &lim[0], sizeof lim[0]) != TKV_OK) {
        cli_fail("bench", "--limits: %s", tkv_last_error(NULL));
        goto done;
    }
    if (!json) print_header();
    result rs[2];
    bool prompt[2];
    int n_results = 0;
    for (int test = 0; test < 2; test++) {
        const size_t n = (size_t)(test == 0 ? n_prompt : n_gen);
        if (n == 0) continue;
        result *r = &rs[n_results];
        prompt[n_results++] = test == 0;
        if (!measure(&b, test == 0, n, (int)reps, r)) goto done;
        if (limits && tkv_limits_measure((int)threads, 0, &lim[n_results], sizeof lim[n_results]) != TKV_OK) {
            cli_fail("bench", "--limits: %s", tkv_last_error(NULL));
            goto done;
        }
        if (json) {
            if (!print_json(&facts, (int)threads, (int)reps, b.depth, r, limits ? &lim[n_results - 1] : NULL,
                            test == 0)) {
                cli_fail("bench", "out of memory");
                goto done;
            }
        } else {
            print_row(&facts, (int)threads, r);
        }
    }
    if (limits && !json) print_limits(&facts, lim, rs, prompt, n_results);
    rc = 0;
done:
    free(b.tok);
    free(b.pos);
    free(b.seq);
    tkv_context_free(b.ctx);
    tkv_model_free(m);
    return rc;
}
