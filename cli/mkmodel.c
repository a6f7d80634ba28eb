/*
 * mkmodel.c — `tokenkv mkmodel`: write a random-weight llama GGUF of any
 * shape and tensor type, with the tokenizer of another GGUF file.
 *
 * The weights are uniform random with standard deviation 1/sqrt(fan_in)
 * (fan_in = the row length, ne[0]), so every matrix product keeps the scale
 * of its input and activations stay finite through any number of layers;
 * norm weights are 1. The values do not matter for speed, only the shapes
 * and types do.
 *
 * Which tensor gets which type follows the reference's quantization rules
 * (llama.cpp's llama_tensor_get_type, without an importance matrix):
 *   - norms are F32;
 *   - F32, F16, BF16: every matrix of that type;
 *   - Q8_0: every matrix Q8_0;
 *   - Q4_0, Q4_1, Q5_0, Q5_1, Q6_K: every matrix of that type except
 *     output.weight, which is Q6_K;
 *   - Q4_K_M (Q5_K_M): Q4_K (Q5_K), except output.weight and, in the layers
 *     that "use more bits", attn_v.weight and ffn_down.weight: Q6_K. A layer
 *     i of n uses more bits when i < n/8, or i >= 7n/8, or
 *     (i - n/8) % 3 == 2 (integer divisions): the first and last eighth of
 *     the layers and every third layer in between;
 *   - a K type on rows whose length is not a multiple of 256 falls back as
 *     the reference does: Q4_K -> Q5_0, Q5_K -> Q5_1, Q6_K -> Q8_0.
 * general.file_type is the reference's number for the mix.
 *
 * The image is built in memory (at the peak about twice the file size, plus
 * the largest matrix as floats), written to OUT.tmp, loaded back as a
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
    "                       [--vocab-from GGUF] [--type TYPE] [--seed S] [--ctx N]\n"
    "\n"
    "Write a llama model with random weights (std 1/sqrt(fan_in), norms 1) and the\n"
    "tokenizer of another GGUF file; the vocabulary size is that file's token count.\n"
    "Quantized mixes follow the reference's rules (output.weight Q6_K; Q4_K_M and\n"
    "Q5_K_M give attn_v and ffn_down of some layers Q6_K).\n"
    "\n"
    "  --dim D          embedding length (a multiple of --heads)\n"
    "  --layers L       number of blocks\n"
    "  --heads H        attention heads\n"
    "  --kv-heads K     key/value heads (divides H; default H)\n"
    "  --ff F           feed-forward length\n"
    "  --vocab-from F   GGUF file to copy the tokenizer from\n"
    "                   (default ../shared/models/stories260K.gguf)\n"
    "  --type TYPE      F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K_M, Q5_K_M,\n"
    "                   Q6_K (default F32); quantized types need D and F to be\n"
    "                   multiples of 32\n"
    "  --seed S         random seed (default 0): same seed, same file\n"
    "  --ctx N          context_length to record (default 2048)\n"
    "  -h, --help       show this help\n";

/* ---- the type mixes ------------------------------------------------------------ */

typedef struct mix {
    const char *name;
    uint32_t ftype;   /* general.file_type (the reference's LLAMA_FTYPE numbering) */
    tkv_type base;    /* most matrices */
    tkv_type output;  /* output.weight */
    tkv_type more;    /* attn_v/ffn_down of layers that use more bits */
} mix;

static const mix mixes[] = {
    {"F32", 0, TKV_TYPE_F32, TKV_TYPE_F32, TKV_TYPE_F32},
    {"F16", 1, TKV_TYPE_F16, TKV_TYPE_F16, TKV_TYPE_F16},
    {"BF16", 32, TKV_TYPE_BF16, TKV_TYPE_BF16, TKV_TYPE_BF16},
    {"Q8_0", 7, TKV_TYPE_Q8_0, TKV_TYPE_Q8_0, TKV_TYPE_Q8_0},
    {"Q4_0", 2, TKV_TYPE_Q4_0, TKV_TYPE_Q6_K, TKV_TYPE_Q4_0},
    {"Q4_1", 3, TKV_TYPE_Q4_1, TKV_TYPE_Q6_K, TKV_TYPE_Q4_1},
    {"Q5_0", 8, TKV_TYPE_Q5_0, TKV_TYPE_Q6_K, TKV_TYPE_Q5_0},
    {"Q5_1", 9, TKV_TYPE_Q5_1, TKV_TYPE_Q6_K, TKV_TYPE_Q5_1},
    {"Q4_K_M", 15, TKV_TYPE_Q4_K, TKV_TYPE_Q6_K, TKV_TYPE_Q6_K},
    {"Q5_K_M", 17, TKV_TYPE_Q5_K, TKV_TYPE_Q6_K, TKV_TYPE_Q6_K},
    {"Q6_K", 18, TKV_TYPE_Q6_K, TKV_TYPE_Q6_K, TKV_TYPE_Q6_K},
};

/* The reference's "use more bits" layers (see the top of the file). */
static bool more_bits(uint32_t i, uint32_t n) {
    return i < n / 8 || i >= 7 * n / 8 || (i >= n / 8 && (i - n / 8) % 3 == 2);
}

/* A K type on rows that are not whole super-blocks: the reference's fallback. */
static tkv_type fit_rows(tkv_type t, uint64_t ne0) {
    if (ne0 % 256 == 0) return t;
    switch (t) {
    case TKV_TYPE_Q4_K: return TKV_TYPE_Q5_0;
    case TKV_TYPE_Q5_K: return TKV_TYPE_Q5_1;
    case TKV_TYPE_Q6_K: return TKV_TYPE_Q8_0;
    default: return t;
    }
}

/* ---- random numbers -------------------------------------------------------------- */

/* splitmix64: a fast generator with a 64-bit state, good enough for weights */
static uint64_t next_u64(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* n floats uniform in [-a, a), a = sqrt(3 / fan_in): standard deviation 1/sqrt(fan_in) */
static void fill_uniform(uint64_t *s, float *x, size_t n, uint64_t fan_in) {
    const float a = sqrtf(3.0f / (float)fan_in);
    for (size_t i = 0; i < n; i++) x[i] = a * ((float)(next_u64(s) >> 40) * 0x1p-23f - 1.0f);
}

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
    const mix *mix;
    uint64_t seed;
    uint32_t dim, layers, heads, kv_heads, ff, ctx;
} opts;

static bool parse_u64(const char *opt, const char *v, uint64_t lo, uint64_t hi, uint64_t *out) {
    char *end;
    if (!v || *v < '0' || *v > '9') goto bad;
    errno = 0;
    unsigned long long x = strtoull(v, &end, 10);
    if (*end || errno || x < lo || x > hi) goto bad;
    *out = x;
    return true;
bad:
    fprintf(stderr, "tokenkv mkmodel: %s: '%s' is not an integer in [%llu, %llu]\n", opt, v ? v : "",
            (unsigned long long)lo, (unsigned long long)hi);
    return false;
}

/* Parse argv into *o; returns 0 to go on, or the exit status (0 for --help, 2 for bad usage). */
static int parse_args(int argc, char **argv, opts *o, bool *done) {
    *done = false;
    memset(o, 0, sizeof *o);
    o->vocab_from = "../shared/models/stories260K.gguf";
    o->mix = &mixes[0];
    o->ctx = 2048;
    uint64_t v;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            fputs(mkmodel_help, stdout);
            *done = true;
            return 0;
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
            {"--dim", offsetof(opts, dim), 1, 1u << 20},     {"--layers", offsetof(opts, layers), 1, 4096},
            {"--heads", offsetof(opts, heads), 1, 4096},    {"--kv-heads", offsetof(opts, kv_heads), 1, 4096},
            {"--ff", offsetof(opts, ff), 1, 1u << 22},      {"--ctx", offsetof(opts, ctx), 1, 1u << 30},
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
        } else if (!strcmp(a, "--seed")) {
            if (!parse_u64(a, val, 0, UINT64_MAX, &o->seed)) return 2;
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
    if (!o->kv_heads) o->kv_heads = o->heads;
    const char *problem = NULL;
    char msg[160];
    if (!o->out) problem = "OUT.gguf is required";
    else if (!o->dim || !o->layers || !o->heads || !o->ff) problem = "--dim, --layers, --heads and --ff are required";
    else if (o->dim % o->heads) problem = "--dim must be a multiple of --heads";
    else if (o->heads % o->kv_heads) problem = "--heads must be a multiple of --kv-heads";
    else if ((o->dim / o->heads) % 2) problem = "the head size (--dim / --heads) must be even (RoPE rotates pairs)";
    else if (o->mix->base != TKV_TYPE_F32 && o->mix->base != TKV_TYPE_F16 && o->mix->base != TKV_TYPE_BF16 &&
             (o->dim % 32 || o->ff % 32)) {
        snprintf(msg, sizeof msg, "type %s needs --dim and --ff to be multiples of 32", o->mix->name);
        problem = msg;
    }
    if (problem) {
        fprintf(stderr, "tokenkv mkmodel: %s\n%s", problem, mkmodel_help);
        return 2;
    }
    return 0;
}

/* ---- writing ------------------------------------------------------------------------- */

/*
 * Append one matrix (ne0 x ne1, row length ne0) of random values quantized
 * to `type`. x and q are scratch of at least ne0*ne1 floats / bytes.
 */
static tkv_status add_matrix(tkv__gguf_writer *w, uint64_t *rng, const char *name, tkv_type type, uint64_t ne0,
                             uint64_t ne1, float *x, uint8_t *q) {
    const size_t n = (size_t)(ne0 * ne1);
    fill_uniform(rng, x, n, ne0);
    tkv__quantize_row(type, x, q, n); /* rows are whole blocks, so the matrix is one long row */
    const uint64_t ne[2] = {ne0, ne1};
    return tkv__gguf_write_tensor(w, name, type, 2, ne, q);
}

static tkv_status add_norm(tkv__gguf_writer *w, const char *name, uint64_t n, float *x) {
    for (uint64_t i = 0; i < n; i++) x[i] = 1.0f;
    return tkv__gguf_write_tensor(w, name, TKV_TYPE_F32, 1, &n, x);
}

/* Write the whole image of the model into *img / *size; *why names a failure. */
static tkv_status build(const opts *o, const tkv_model *vocab, uint32_t n_vocab, uint8_t **img, size_t *size,
                        char *why, size_t why_cap, uint64_t *n_params) {
    tkv_status st = TKV_OK;
    tkv__gguf_writer *w = tkv__gguf_writer_new(32);
    const uint64_t e = o->dim, hd = o->dim / o->heads, kv = hd * o->kv_heads, ff = o->ff;
    uint64_t biggest = e * n_vocab; /* elements of the largest matrix */
    if (e * ff > biggest) biggest = e * ff;
    if (e * e > biggest) biggest = e * e;
    float *x = malloc(biggest * sizeof *x);       /* (ne1, ne0) floats of one matrix */
    uint8_t *q = malloc(biggest * sizeof(float)); /* its stored bytes (at most 4 per element) */
    if (!w || !x || !q) {
        st = TKV_ERR_NOMEM;
        goto done;
    }
    /* hyperparameters: every llama.* key the loader reads */
    char name[96];
    snprintf(name, sizeof name, "random llama %ux%u %s", o->dim, o->layers, o->mix->name);
    if (!st) st = tkv__gguf_write_str(w, "general.architecture", "llama");
    if (!st) st = tkv__gguf_write_str(w, "general.name", name);
    if (!st) st = tkv__gguf_write_u32(w, "general.file_type", o->mix->ftype);
    if (!st) st = tkv__gguf_write_u32(w, "llama.vocab_size", n_vocab);
    if (!st) st = tkv__gguf_write_u32(w, "llama.context_length", o->ctx);
    if (!st) st = tkv__gguf_write_u32(w, "llama.embedding_length", o->dim);
    if (!st) st = tkv__gguf_write_u32(w, "llama.block_count", o->layers);
    if (!st) st = tkv__gguf_write_u32(w, "llama.feed_forward_length", o->ff);
    if (!st) st = tkv__gguf_write_u32(w, "llama.attention.head_count", o->heads);
    if (!st) st = tkv__gguf_write_u32(w, "llama.attention.head_count_kv", o->kv_heads);
    if (!st) st = tkv__gguf_write_u32(w, "llama.rope.dimension_count", (uint32_t)hd);
    if (!st) st = tkv__gguf_write_f32(w, "llama.rope.freq_base", 10000.0f);
    if (!st) st = tkv__gguf_write_f32(w, "llama.attention.layer_norm_rms_epsilon", 1e-5f);
    /* the tokenizer, pair by pair in the source's order */
    for (size_t i = 0; i < tkv_model_meta_count(vocab) && !st; i++) {
        const char *key, *reason = NULL;
        tkv_meta_type type;
        if (tkv_model_meta_at(vocab, i, &key, &type) || !tokenizer_key(key)) continue;
        st = copy_pair(vocab, key, type, w, &reason);
        if (st) snprintf(why, why_cap, "%s: metadata key '%s': %s", o->vocab_from, key,
                         reason ? reason : tkv_status_str(st));
    }
    /* the tensors, in the order the reference's converter writes them */
    uint64_t rng = o->seed ^ 0x6a09e667f3bcc909ull;
    const mix *m = o->mix;
    *n_params = 0;
    if (!st) st = add_matrix(w, &rng, "token_embd.weight", fit_rows(m->base, e), e, n_vocab, x, q);
    if (!st) st = add_norm(w, "output_norm.weight", e, x);
    if (!st) st = add_matrix(w, &rng, "output.weight", fit_rows(m->output, e), e, n_vocab, x, q);
    *n_params += 2 * e * n_vocab + e;
    for (uint32_t l = 0; l < o->layers && !st; l++) {
        const bool more = more_bits(l, o->layers);
        const struct {
            const char *suffix;
            uint64_t ne0, ne1;
            bool more_bits; /* one of the tensors that use more bits in some layers */
        } mats[] = {
            {"attn_q.weight", e, e, false},         {"attn_k.weight", e, kv, false},
            {"attn_v.weight", e, kv, true},         {"attn_output.weight", e, e, false},
            {"ffn_gate.weight", e, ff, false},      {"ffn_down.weight", ff, e, true},
            {"ffn_up.weight", e, ff, false},
        };
        snprintf(name, sizeof name, "blk.%u.attn_norm.weight", l);
        st = add_norm(w, name, e, x);
        for (size_t k = 0; k < sizeof mats / sizeof mats[0] && !st; k++) {
            const tkv_type t = fit_rows(mats[k].more_bits && more ? m->more : m->base, mats[k].ne0);
            snprintf(name, sizeof name, "blk.%u.%s", l, mats[k].suffix);
            st = add_matrix(w, &rng, name, t, mats[k].ne0, mats[k].ne1, x, q);
            *n_params += mats[k].ne0 * mats[k].ne1;
            if (k == 3 && !st) { /* the FFN norm sits between attention and FFN */
                snprintf(name, sizeof name, "blk.%u.ffn_norm.weight", l);
                st = add_norm(w, name, e, x);
            }
        }
        *n_params += 2 * e;
    }
    if (!st) st = tkv__gguf_write_finish(w, img, size);
done:
    if (st && !why[0]) snprintf(why, why_cap, "%s", st == TKV_ERR_NOMEM ? "out of memory" : tkv_last_error(NULL));
    free(x);
    free(q);
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

int cmd_mkmodel(int argc, char **argv) {
    opts o;
    bool done;
    int rc = parse_args(argc, argv, &o, &done);
    if (rc || done) return rc;

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
    printf("%s: llama %u layers, dim %u, %u/%u heads, ff %u, vocab %zu, %s: %.2f M params, %.2f MiB\n", o.out,
           o.layers, o.dim, o.heads, o.kv_heads, o.ff, n_vocab, o.mix->name, (double)n_params / 1e6,
           (double)size / (1024.0 * 1024.0));
    rc = 0;
out:
    tkv__gguf_image_free(img);
    free(tmp);
    return rc;
}
