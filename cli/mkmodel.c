/*
 * mkmodel.c — `tokenkv mkmodel`: write a random-weight GGUF of any supported
 * architecture, shape and tensor type, with the tokenizer of another GGUF
 * file. The hyperparameters and tensors come from the tools library
 * (tools/model_write.h: the same tensor list the loader checks); this file
 * parses the options, copies the tokenizer and writes the file.
 *
 * Which tensor gets which type follows the reference's quantization rules
 * (llama.cpp's llama_tensor_get_type, without an importance matrix):
 *   - norms, biases and MoE routers are F32;
 *   - F32, F16, BF16: every matrix of that type;
 *   - Q8_0: every matrix Q8_0;
 *   - Q4_0, Q4_1, Q5_0, Q5_1, Q6_K: every matrix of that type except
 *     output.weight, which is Q6_K;
 *   - Q4_K_M (Q5_K_M): Q4_K (Q5_K), except output.weight and, in the layers
 *     that "use more bits", attn_v and ffn_down (ffn_down_exps): Q6_K. A
 *     layer i of n uses more bits when i < n/8, or i >= 7n/8, or
 *     (i - n/8) % 3 == 2 (integer divisions): the first and last eighth of
 *     the layers and every third layer in between;
 *   - a K type on rows whose length is not a multiple of 256 falls back as
 *     the reference does: Q4_K -> Q5_0, Q5_K -> Q5_1, Q6_K -> Q8_0.
 * The reference's further rules for some MoE and fused-QKV tensors are not
 * followed: the mix is the dense models' one. general.file_type is the
 * reference's number for the mix.
 *
 * The image is built in memory (at the peak about twice the file size, plus
 * the largest tensor as floats), written to OUT.tmp, loaded back as a
 * check, then renamed to OUT.
 */
#include "cli.h"
#include "tokenkv.h"

/* the tools library: the GGUF writer and the quantizer */
#include "tools/tools.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static const char *const mkmodel_help =
    "usage: tokenkv mkmodel OUT.gguf --dim D --layers L --heads H --kv-heads K --ff F\n"
    "                       [--arch A] [--head-dim N] [--experts N --experts-used K --expert-ff F]\n"
    "                       [--swa-window N] [--vocab-from GGUF] [--chat-template FILE] [--type TYPE]\n"
    "                       [--seed S] [--ctx N] [--weights random|induction]\n"
    "                       [--ssm-state N --ssm-groups G --ssm-heads H --ssm-inner I [--ssm-conv K]\n"
    "                        [--attn-every N | --pattern P]] [--shared-kv N] [--per-layer N]\n"
    "                       [--fused-experts] [--dense-lead N]\n"
    "\n"
    "Write a model with random weights (std 1/sqrt(fan_in), norms 1) and the\n"
    "tokenizer of another GGUF file; the vocabulary size is that file's token count.\n"
    "Quantized mixes follow the reference's rules (output.weight Q6_K; Q4_K_M and\n"
    "Q5_K_M give attn_v and ffn_down of some layers Q6_K).\n"
    "\n"
    "  --arch A         architecture (default llama): llama, qwen2, qwen3, qwen3moe,\n"
    "                   gpt-oss, smollm3, olmo2, phi3, mistral3, gemma2, gemma3, gemma4, and\n"
    "                   the hybrids qwen35 and qwen35moe (gated delta nets), lfm2 and lfm2moe\n"
    "                   (short convs), granitehybrid and nemotron_h (Mamba-2)\n"
    "  --dim D          embedding length (a multiple of --heads unless --head-dim)\n"
    "  --layers L       number of blocks\n"
    "  --heads H        attention heads\n"
    "  --kv-heads K     key/value heads (divides H; default H)\n"
    "  --ff F           feed-forward length (qwen35moe: the shared expert's)\n"
    "  --head-dim N     key/query/value size per head (default D / H)\n"
    "  --experts N      MoE architectures (and gemma4, beside its FFN): experts per layer\n"
    "  --experts-used K MoE architectures: experts each token uses\n"
    "  --expert-ff F    MoE architectures: each expert's feed-forward length\n"
    "  --swa-window N   sliding-window architectures: the window (default the\n"
    "                   published models': gemma2 4096, gemma3 1024, gemma4 512, gpt-oss 128)\n"
    "  --ssm-state N    qwen35*: the q/k and v head size; Mamba-2 (granitehybrid,\n"
    "                   nemotron_h): the state size\n"
    "  --ssm-groups G   qwen35*: the q/k heads; Mamba-2: the B/C groups\n"
    "  --ssm-heads H    qwen35*: the v heads; Mamba-2: the heads (G divides H)\n"
    "  --ssm-inner I    qwen35*: the v width (N x H); Mamba-2: the inner size (H divides I)\n"
    "  --ssm-conv K     qwen35*, Mamba-2: the conv's taps (default 4; lfm2 has 3)\n"
    "  --attn-every N   hybrids: attention on every Nth layer (default qwen35* 4,\n"
    "                   granitehybrid 6, lfm2 3, nemotron_h 3), the recurrent kind on\n"
    "                   the others (nemotron_h: Mamba-2 and MLP layers in turn); gemma4:\n"
    "                   full attention on every Nth layer (default 5), a window on the\n"
    "                   others (heads of --head-dim / 2; full layers: half the KV heads\n"
    "                   and K as V)\n"
    "  --pattern P      lfm2, granitehybrid, nemotron_h: one character per layer in\n"
    "                   place of --attn-every: '*' attention, 'M' Mamba-2, '-' MLP\n"
    "                   (nemotron_h), 'C' short conv (lfm2); e.g. nemotron_h M-*M-*\n"
    "  --shared-kv N    gemma4: the last N layers read earlier layers' K/V (default 0)\n"
    "  --per-layer N    gemma4: per-layer inputs of N per layer (default 0: none)\n"
    "  --dense-lead N   lfm2moe: the first N layers have a dense FFN (--ff), the others experts\n"
    "  --fused-experts  gemma4 with --experts: one ffn_gate_up_exps stack per layer (default: gate and up apart)\n"
    "  --vocab-from F   GGUF file to copy the tokenizer from\n"
    "                   (default ../shared/models/stories260K.gguf)\n"
    "  --chat-template F a Jinja chat template file to store as tokenizer.chat_template\n"
    "                   (in place of the --vocab-from file's, if it has one)\n"
    "  --type TYPE      F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K_M, Q5_K_M,\n"
    "                   Q6_K (default F32); quantized types need every row length\n"
    "                   (D, F, heads x head size, expert F) to be a multiple of 32\n"
    "  --seed S         random seed (default 0): same seed, same file\n"
    "  --ctx N          context_length to record (default 2048)\n"
    "  --weights W      random (default), or induction: llama weights built to copy\n"
    "                   (layer 0 finds the two previous tokens, layer 1 the position\n"
    "                   after their earlier occurrence, whose token it predicts; the\n"
    "                   other layers zero), so greedy answers continue spans of their\n"
    "                   prompt; needs --head-dim 128, 2+ KV heads, --dim >= 640\n"
    "  -h, --help       show this help\n";

/* ---- the type mixes ------------------------------------------------------------ */

typedef struct mix {
    const char *name;
    uint32_t ftype;      /* general.file_type (the reference's LLAMA_FTYPE numbering) */
    tkv__type_mix types; /* most matrices, output.weight, the "more bits" ones */
} mix;

static const mix mixes[] = {
    {"F32", 0, {TKV_TYPE_F32, TKV_TYPE_F32, TKV_TYPE_F32}},
    {"F16", 1, {TKV_TYPE_F16, TKV_TYPE_F16, TKV_TYPE_F16}},
    {"BF16", 32, {TKV_TYPE_BF16, TKV_TYPE_BF16, TKV_TYPE_BF16}},
    {"Q8_0", 7, {TKV_TYPE_Q8_0, TKV_TYPE_Q8_0, TKV_TYPE_Q8_0}},
    {"Q4_0", 2, {TKV_TYPE_Q4_0, TKV_TYPE_Q6_K, TKV_TYPE_Q4_0}},
    {"Q4_1", 3, {TKV_TYPE_Q4_1, TKV_TYPE_Q6_K, TKV_TYPE_Q4_1}},
    {"Q5_0", 8, {TKV_TYPE_Q5_0, TKV_TYPE_Q6_K, TKV_TYPE_Q5_0}},
    {"Q5_1", 9, {TKV_TYPE_Q5_1, TKV_TYPE_Q6_K, TKV_TYPE_Q5_1}},
    {"Q4_K_M", 15, {TKV_TYPE_Q4_K, TKV_TYPE_Q6_K, TKV_TYPE_Q6_K}},
    {"Q5_K_M", 17, {TKV_TYPE_Q5_K, TKV_TYPE_Q6_K, TKV_TYPE_Q6_K}},
    {"Q6_K", 18, {TKV_TYPE_Q6_K, TKV_TYPE_Q6_K, TKV_TYPE_Q6_K}},
};

/* ---- metadata ---------------------------------------------------------------------- */

/*
 * The little-endian bytes of element i (i == SIZE_MAX: the scalar) of `key`
 * as type t (numeric) into out (tkv__gguf_write_value_size(t) bytes). Integers and bools come
 * through the int64 getter and are truncated back to their own width, which
 * is exact since they came from that width.
 */
static tkv_status numeric_bytes(const tkv_model *src, const char *key, size_t i, tkv_meta_type t, uint8_t *out) {
    tkv_status st;
    if (t == TKV_META_F32 || t == TKV_META_F64) {
        double d;
        st = i == SIZE_MAX ? tkv_model_meta_float(src, key, &d) : tkv_model_meta_arr_float(src, key, i, &d);
        if (st) return st;
        if (t == TKV_META_F32) {
            float f = (float)d;
            memcpy(out, &f, 4);
        } else {
            memcpy(out, &d, 8);
        }
        return TKV_OK;
    }
    int64_t v;
    st = i == SIZE_MAX ? tkv_model_meta_int(src, key, &v) : tkv_model_meta_arr_int(src, key, i, &v);
    if (st) return st;
    for (size_t b = 0; b < tkv__gguf_write_value_size(t); b++) out[b] = (uint8_t)((uint64_t)v >> (8 * b));
    return TKV_OK;
}

/* A string of the source that holds no NUL byte (the writer takes C strings). */
static bool plain_string(const char *s, size_t len) { return strlen(s) == len; }

/*
 * Copy one metadata pair of src (any type but nested arrays) to w, element
 * by element. Returns TKV_OK, or an error with *why set.
 */
static tkv_status copy_pair(const tkv_model *src, const char *key, tkv_meta_type type, tkv__gguf_writer *w,
                            const char **why) {
    tkv_status st;
    *why = NULL;
    if (type == TKV_META_STRING) {
        const char *s;
        size_t len;
        if ((st = tkv_model_meta_str(src, key, &s, &len))) return st;
        if (!plain_string(s, len)) return *why = "a string holds a NUL byte", TKV_ERR_UNSUPPORTED;
        return tkv__gguf_write_str(w, key, s);
    }
    if (type != TKV_META_ARRAY) {
        uint8_t bytes[8];
        if (!tkv__gguf_write_value_size(type)) return *why = "unknown value type", TKV_ERR_UNSUPPORTED;
        if ((st = numeric_bytes(src, key, SIZE_MAX, type, bytes))) return st;
        return tkv__gguf_write_scalar(w, key, type, bytes);
    }
    tkv_meta_type et;
    size_t n;
    if ((st = tkv_model_meta_array(src, key, &et, &n))) return st;
    if (et == TKV_META_STRING) {
        const char **strs = malloc((n ? n : 1) * sizeof *strs);
        if (!strs) return TKV_ERR_NOMEM;
        for (size_t i = 0; i < n && !st; i++) {
            size_t len;
            st = tkv_model_meta_arr_str(src, key, i, &strs[i], &len);
            if (!st && !plain_string(strs[i], len)) *why = "a string holds a NUL byte", st = TKV_ERR_UNSUPPORTED;
        }
        if (!st) st = tkv__gguf_write_strings(w, key, strs, n);
        free(strs);
        return st;
    }
    const size_t es = tkv__gguf_write_value_size(et);
    if (!es) return *why = "arrays of arrays are not copied", TKV_ERR_UNSUPPORTED;
    uint8_t *data = malloc(n ? n * es : 1); /* (n, es) little-endian elements */
    if (!data) return TKV_ERR_NOMEM;
    for (size_t i = 0; i < n && !st; i++) st = numeric_bytes(src, key, i, et, data + i * es);
    if (!st) st = tkv__gguf_write_array(w, key, et, data, n);
    free(data);
    return st;
}

/* Whether a key of the source belongs to its tokenizer. */
static bool tokenizer_key(const char *key) {
    return strncmp(key, "tokenizer.ggml.", 15) == 0 || strcmp(key, "tokenizer.chat_template") == 0;
}

/* ---- options ------------------------------------------------------------------------ */

typedef struct opts {
    const char *out, *vocab_from;
    char *chat_template; /* --chat-template's contents, or NULL */
    const mix *mix;
    tkv__model_spec spec; /* everything but the vocabulary size, the mix's types and the seed */
    uint64_t seed;
} opts;

static bool parse_u64(const char *opt, const char *v, uint64_t lo, uint64_t hi, uint64_t *out) {
    return cli_uint("mkmodel", opt, v, lo, hi, out);
}

/* Parse argv into *o; returns 0 to go on, or the exit status (0 for --help, 2 for bad usage). */
static int parse_args(int argc, char **argv, opts *o, bool *done) {
    *done = false;
    memset(o, 0, sizeof *o);
    o->vocab_from = "../shared/models/stories260K.gguf";
    o->mix = &mixes[0];
    o->spec.arch = "llama";
    o->spec.ctx = 2048;
    uint64_t v;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            fputs(mkmodel_help, stdout);
            *done = true;
            return 0;
        }
        if (!strcmp(a, "--fused-experts")) {
            o->spec.fused_experts = true;
            continue;
        }
        if (a[0] != '-') {
            if (o->out) {
                fprintf(stderr, "tokenkv mkmodel: one output file only ('%s' and '%s')\n", o->out, a);
                return 2;
            }
            o->out = a;
            continue;
        }
        static const struct {
            const char *name;
            size_t off;
            uint64_t lo, hi;
        } nums[] = {
#define AT(f) offsetof(opts, spec.f)
            {"--dim", AT(dim), 1, 1u << 20},           {"--layers", AT(layers), 1, 4096},
            {"--heads", AT(heads), 1, 4096},           {"--kv-heads", AT(kv_heads), 1, 4096},
            {"--ff", AT(ff), 1, 1u << 22},             {"--ctx", AT(ctx), 1, 1u << 30},
            {"--head-dim", AT(head_dim), 2, 1u << 16}, {"--experts", AT(experts), 1, 1u << 16},
            {"--experts-used", AT(experts_used), 1, 1u << 16}, {"--expert-ff", AT(expert_ff), 1, 1u << 22},
            {"--swa-window", AT(swa_window), 1, 1u << 30},
            {"--ssm-state", AT(ssm_state), 1, 4096},   {"--ssm-groups", AT(ssm_groups), 1, 4096},
            {"--ssm-heads", AT(ssm_heads), 1, 4096},   {"--ssm-inner", AT(ssm_inner), 1, 1u << 20},
            {"--ssm-conv", AT(ssm_conv), 2, 16},       {"--attn-every", AT(attn_every), 1, 4096},
            {"--shared-kv", AT(shared_kv), 0, 4095},   {"--per-layer", AT(per_layer), 0, 1u << 16},
            {"--dense-lead", AT(dense_lead), 0, 4095},
#undef AT
        };
        bool known = false;
        for (size_t k = 0; k < sizeof nums / sizeof nums[0]; k++) {
            if (strcmp(a, nums[k].name)) continue;
            if (!parse_u64(a, val, nums[k].lo, nums[k].hi, &v)) return 2;
            *(uint32_t *)((char *)o + nums[k].off) = (uint32_t)v;
            known = true;
        }
        if (known) {
            i++;
            continue;
        }
        if (!val) {
            fprintf(stderr, "tokenkv mkmodel: unknown option or missing value: '%s'\n%s", a, mkmodel_help);
            return 2;
        }
        i++;
        if (!strcmp(a, "--vocab-from")) {
            o->vocab_from = val;
        } else if (!strcmp(a, "--arch")) {
            o->spec.arch = val;
        } else if (!strcmp(a, "--pattern")) {
            o->spec.pattern = val;
        } else if (!strcmp(a, "--chat-template")) {
            free(o->chat_template);
            size_t len = 0;
            if (!(o->chat_template = cli_read_file(val, &len)) || strlen(o->chat_template) != len) { /* no NULs */
                free(o->chat_template);
                o->chat_template = NULL;
                fprintf(stderr, "tokenkv mkmodel: --chat-template %s: cannot read it\n", val);
                return 2;
            }
        } else if (!strcmp(a, "--seed")) {
            if (!parse_u64(a, val, 0, UINT64_MAX, &o->seed)) return 2;
        } else if (!strcmp(a, "--weights")) {
            if (!strcmp(val, "random")) {
                o->spec.weights = TKV__WEIGHTS_RANDOM;
            } else if (!strcmp(val, "induction")) {
                o->spec.weights = TKV__WEIGHTS_INDUCTION;
            } else {
                fprintf(stderr, "tokenkv mkmodel: --weights: '%s' is neither 'random' nor 'induction'\n", val);
                return 2;
            }
        } else if (!strcmp(a, "--type")) {
            o->mix = NULL;
            for (size_t k = 0; k < sizeof mixes / sizeof mixes[0]; k++)
                if (!strcasecmp(val, mixes[k].name)) o->mix = &mixes[k];
            if (!o->mix) {
                fprintf(stderr, "tokenkv mkmodel: --type: unknown type '%s'\n%s", val, mkmodel_help);
                return 2;
            }
        } else {
            fprintf(stderr, "tokenkv mkmodel: unknown option '%s'\n%s", a, mkmodel_help);
            return 2;
        }
    }
    tkv__model_spec *sp = &o->spec;
    if (!sp->kv_heads) sp->kv_heads = sp->heads;
    sp->mix = o->mix->types;
    sp->seed = o->seed;
    sp->n_vocab = 1; /* the vocabulary file's size is not known yet; no row length depends on it */
    const char *problem = NULL;
    char msg[256];
    if (!o->out) problem = "OUT.gguf is required";
    else if (!sp->dim || !sp->layers || !sp->heads || !sp->ff) problem = "--dim, --layers, --heads and --ff are required";
    else if (tkv__model_spec_check(sp, msg, sizeof msg)) problem = msg;
    if (problem) {
        fprintf(stderr, "tokenkv mkmodel: %s\n%s", problem, mkmodel_help);
        return 2;
    }
    return 0;
}

/* ---- writing ------------------------------------------------------------------------- */

/* Write the whole image of the model into *img / *size; *why names a failure. */
static tkv_status build(const opts *o, const tkv_model *vocab, uint32_t n_vocab, uint8_t **img, size_t *size,
                        char *why, size_t why_cap, uint64_t *n_params) {
    tkv_status st = TKV_OK;
    tkv__gguf_writer *w = tkv__gguf_writer_new(32);
    if (!w) {
        snprintf(why, why_cap, "out of memory");
        return TKV_ERR_NOMEM;
    }
    tkv__model_spec spec = o->spec;
    spec.n_vocab = n_vocab;
    char name[96];
    /* not the architecture's name: the reference sets token attributes by model name ("phi3") */
    snprintf(name, sizeof name, "random %ux%u %s", spec.dim, spec.layers, o->mix->name);
    if (!st) st = tkv__gguf_write_str(w, "general.architecture", spec.arch);
    if (!st) st = tkv__gguf_write_str(w, "general.name", name);
    if (!st) st = tkv__gguf_write_u32(w, "general.file_type", o->mix->ftype);
    /* the tokenizer, pair by pair in the source's order */
    for (size_t i = 0; i < tkv_model_meta_count(vocab) && !st; i++) {
        const char *key, *reason = NULL;
        tkv_meta_type type;
        if (tkv_model_meta_at(vocab, i, &key, &type) || !tokenizer_key(key)) continue;
        if (o->chat_template && !strcmp(key, "tokenizer.chat_template")) continue; /* replaced below */
        st = copy_pair(vocab, key, type, w, &reason);
        if (st) snprintf(why, why_cap, "%s: metadata key '%s': %s", o->vocab_from, key,
                         reason ? reason : tkv_status_str(st));
    }
    if (!st && o->chat_template) st = tkv__gguf_write_str(w, "tokenizer.chat_template", o->chat_template);
    /* the architecture's keys and tensors */
    if (!st) st = tkv__model_write(w, &spec, n_params);
    if (!st) st = tkv__gguf_write_finish(w, img, size);
    if (st && !why[0]) snprintf(why, why_cap, "%s", st == TKV_ERR_NOMEM ? "out of memory" : tkv_last_error(NULL));
    tkv__gguf_writer_free(w);
    return st;
}

/* Write bytes to path; false (errno set) on failure. */
static bool write_file(const char *path, const uint8_t *p, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) return false;
    bool ok = fwrite(p, 1, n, f) == n;
    ok = (fclose(f) == 0) && ok;
    return ok;
}

/* Write the model o describes; the exit status. */
static int make(const opts *op) {
    const opts o = *op;
    int rc;
    tkv_model *vocab = NULL;
    tkv_model_params vp = tkv_model_default_params();
    vp.vocab_only = true;
    if (tkv_model_load(o.vocab_from, &vp, &vocab) != TKV_OK)
        return cli_fail("mkmodel", "--vocab-from: %s", tkv_last_error(NULL));
    tkv_meta_type et;
    size_t n_vocab = 0;
    if (tkv_model_meta_array(vocab, "tokenizer.ggml.tokens", &et, &n_vocab) || et != TKV_META_STRING || !n_vocab ||
        n_vocab > UINT32_MAX) {
        tkv_model_free(vocab);
        return cli_fail("mkmodel", "--vocab-from %s: no token list ('tokenizer.ggml.tokens')", o.vocab_from);
    }

    uint8_t *img = NULL;
    size_t size = 0;
    char why[512] = "";
    uint64_t n_params = 0;
    tkv_status st = build(&o, vocab, (uint32_t)n_vocab, &img, &size, why, sizeof why, &n_params);
    tkv_model_free(vocab);
    if (st) return cli_fail("mkmodel", "%s", why);

    size_t plen = strlen(o.out);
    char *tmp = malloc(plen + 5);
    if (!tmp) {
        tkv__gguf_image_free(img);
        return cli_fail("mkmodel", "out of memory");
    }
    memcpy(tmp, o.out, plen);
    memcpy(tmp + plen, ".tmp", 5);
    rc = 1;
    if (!write_file(tmp, img, size)) {
        cli_fail("mkmodel", "%s: cannot write: %s", tmp, strerror(errno));
        remove(tmp);
        goto out;
    }
    tkv__gguf_image_free(img);
    img = NULL;
    /* the loader must accept what we wrote: check before it takes the final name */
    tkv_model *check = NULL;
    if (tkv_model_load(tmp, NULL, &check) != TKV_OK) {
        cli_fail("mkmodel", "the written model does not load: %s", tkv_last_error(NULL));
        remove(tmp);
        goto out;
    }
    tkv_model_free(check);
    if (rename(tmp, o.out) != 0) {
        cli_fail("mkmodel", "cannot rename %s to %s: %s", tmp, o.out, strerror(errno));
        remove(tmp);
        goto out;
    }
    const tkv__model_spec *sp = &o.spec;
    printf("%s: %s %u layers, dim %u, %u/%u heads, ff %u", o.out, sp->arch, sp->layers, sp->dim, sp->heads,
           sp->kv_heads, sp->ff);
    if (sp->experts) printf(", %u experts (%u used) of ff %u", sp->experts, sp->experts_used, sp->expert_ff);
    printf(", vocab %zu, %s: %.2f M params, %.2f MiB\n", n_vocab, o.mix->name, (double)n_params / 1e6,
           (double)size / (1024.0 * 1024.0));
    rc = 0;
out:
    tkv__gguf_image_free(img);
    free(tmp);
    return rc;
}

int cmd_mkmodel(int argc, char **argv) {
    opts o;
    bool done;
    int rc = parse_args(argc, argv, &o, &done);
    if (!rc && !done) rc = make(&o);
    free(o.chat_template);
    return rc;
}
