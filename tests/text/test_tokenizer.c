/*
 * test_tokenizer.c — the tokenizers against the reference implementation:
 * every line of ../shared/reference/tokenize.jsonl and every case of
 * ../shared/models/vocab/X.gguf.inp and .out must match exactly; round trips on
 * those strings, on random valid UTF-8 and on random bytes; the streaming
 * detokenizer; buffer and error contracts; every pre-tokenizer type, with
 * splits worked out by hand; Gemma 4's tokenizer on a vocabulary made here.
 *
 * TKV_EXTRA_VOCAB_DIR=DIR also runs the cases of every ggml-vocab-X.gguf in
 * DIR that has its .inp and .out (the reference's models/ folder, say).
 */
#include "testutil.h"

#include "base/alloc.h"
#include "base/error.h"
#include "tools/gguf_write.h"
#include "model/model.h"
#include "text/pretokenize.h"

#include <dirent.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const vocab_files[] = {"stories260K.gguf", "ggml-vocab-llama-spm.gguf", "ggml-vocab-gpt-2.gguf",
                                          "ggml-vocab-deepseek-coder.gguf"};
enum { N_VOCABS = 4 };
static tkv_model *vocabs[N_VOCABS];

static const char *vocab_rel(const char *name) {
    static char rel[256];
    snprintf(rel, sizeof rel, "models/%s%s", strcmp(name, "stories260K.gguf") ? "vocab/" : "", name);
    return rel;
}

static int setup(void **state) {
    (void)state;
    for (int i = 0; i < N_VOCABS; i++) {
        tkv_model_params p = tkv_model_default_params();
        p.vocab_only = true;
        if (tkv_model_load(tu_shared(vocab_rel(vocab_files[i])), &p, &vocabs[i]) != TKV_OK) return -1;
    }
    return 0;
}

static int teardown(void **state) {
    (void)state;
    for (int i = 0; i < N_VOCABS; i++) tkv_model_free(vocabs[i]);
    return 0;
}

static tkv_model *vocab(const char *name) {
    for (int i = 0; i < N_VOCABS; i++)
        if (!strcmp(vocab_files[i], name)) return vocabs[i];
    fail_msg("unknown vocabulary %s", name);
    return NULL;
}

/* Tokenize into a malloc'd array (sized by a first call). */
static tkv_token *tokenize(tkv_model *m, const char *text, size_t len, unsigned flags, size_t *n) {
    tkv_status st = tkv_tokenize(m, text, len, flags, NULL, 0, n);
    if (st == TKV_OK) return malloc(1);
    assert_int_equal(st, TKV_ERR_FULL);
    tkv_token *t = malloc(*n * sizeof *t);
    size_t n2;
    assert_int_equal(tkv_tokenize(m, text, len, flags, t, *n, &n2), TKV_OK);
    assert_int_equal(n2, *n);
    return t;
}

static char *detokenize(tkv_model *m, const tkv_token *t, size_t n, unsigned flags, size_t *len) {
    tkv_status st = tkv_detokenize(m, t, n, flags, NULL, 0, len);
    assert_int_equal(st, TKV_ERR_FULL);
    char *s = malloc(*len + 1);
    size_t len2;
    assert_int_equal(tkv_detokenize(m, t, n, flags, s, *len + 1, &len2), TKV_OK);
    assert_int_equal(len2, *len);
    assert_int_equal(s[*len], '\0');
    return s;
}

static void expect_round_trip(tkv_model *m, const char *text, size_t len, unsigned tflags, unsigned dflags) {
    size_t n, back_len;
    tkv_token *t = tokenize(m, text, len, tflags, &n);
    char *back = detokenize(m, t, n, dflags, &back_len);
    if (back_len != len || memcmp(back, text, len))
        fail_msg("round trip of '%.*s' (%zu bytes) gave '%s' (%zu bytes)", (int)len, text, len, back, back_len);
    free(back);
    free(t);
}

/* ---- the reference's cases ---------------------------------------------- */

/*
 * tokenize.jsonl's README says special-token text was not parsed, but its ids
 * show that it was: "<s> not a special token </s>" gives [..., 1, ..., 2]
 * for the SentencePiece vocabularies (llama.cpp's tokenize tool parses
 * special tokens by default). So these lines are tokenized with
 * TKV_TOKENIZE_PARSE_SPECIAL; the .inp/.out cases (made with
 * parse_special=false) without it.
 */
static void test_reference_jsonl(void **state) {
    (void)state;
    FILE *f = fopen(tu_shared("reference/tokenize.jsonl"), "r");
    assert_non_null(f);
    char *line = NULL;
    size_t cap = 0;
    int n_lines = 0;
    while (getline(&line, &cap, f) > 0) {
        json_error_t e;
        json_t *j = json_loads(line, 0, &e);
        assert_non_null(j);
        const char *name = json_string_value(json_object_get(j, "vocab"));
        json_t *jt = json_object_get(j, "text");
        const char *text = json_string_value(jt);
        size_t len = json_string_length(jt);
        unsigned flags = TKV_TOKENIZE_PARSE_SPECIAL | (json_is_true(json_object_get(j, "add_special")) ? TKV_TOKENIZE_ADD_SPECIAL : 0);
        json_t *ids = json_object_get(j, "ids");
        size_t n;
        tkv_token *t = tokenize(vocab(name), text, len, flags, &n);
        bool same = n == json_array_size(ids);
        for (size_t i = 0; same && i < n; i++) same = t[i] == json_integer_value(json_array_get(ids, i));
        if (!same) {
            char got[4096] = "";
            for (size_t i = 0; i < n && strlen(got) < 4000; i++) snprintf(got + strlen(got), 16, " %d", t[i]);
            fail_msg("%s '%s' (flags %u): got%s", name, text, flags, got);
        }
        free(t);
        json_decref(j);
        n_lines++;
    }
    free(line);
    fclose(f);
    assert_true(n_lines >= 280);
}

/* The result of checking one vocabulary against its .inp/.out cases. */
typedef struct inp_out_result {
    int n_cases, n_matched, n_round_trips; /* round trips: detokenize(tokenize(x)) == x */
    char first_miss[512];                  /* the first case that differs, "" when none */
} inp_out_result;

/*
 * Tokenize every case of `inp` (cases separated by "\n__ggml_vocab_test__\n",
 * without special tokens) and compare with the ids of the same line of `out`.
 * Returns false when either file cannot be read.
 */
static bool check_inp_out(tkv_model *m, const char *inp_path, const char *out_path, inp_out_result *r) {
    memset(r, 0, sizeof *r);
    size_t in_len, out_len;
    char *inp = (char *)tu_read_file(inp_path, &in_len);
    char *out = (char *)tu_read_file(out_path, &out_len);
    if (!inp || !out) {
        free(inp);
        free(out);
        return false;
    }
    inp = realloc(inp, in_len + 1), inp[in_len] = '\0';
    out = realloc(out, out_len + 1), out[out_len] = '\0';
    static const char sep[] = "\n__ggml_vocab_test__\n";
    char *case_start = inp, *line = out;
    while (case_start && *line) {
        char *end = strstr(case_start, sep);
        size_t len = end ? (size_t)(end - case_start) : strlen(case_start);
        char *eol = strchr(line, '\n');
        if (eol) *eol = '\0';
        size_t n, i = 0;
        tkv_token *t = tokenize(m, case_start, len, 0, &n);
        bool same = true;
        for (char *p = line, *q; *p; p = q) {
            long want = strtol(p, &q, 10);
            if (q == p) break;
            same &= i < n && t[i] == want;
            i++;
        }
        same &= i == n;
        if (same) r->n_matched++;
        else if (!r->first_miss[0])
            snprintf(r->first_miss, sizeof r->first_miss, "case %d ('%.*s'): %zu tokens, expected %zu", r->n_cases,
                     (int)(len > 200 ? 200 : len), case_start, n, i);
        size_t back_len;
        char *back = detokenize(m, t, n, 0, &back_len);
        r->n_round_trips += back_len == len && !memcmp(back, case_start, len);
        free(back);
        free(t);
        r->n_cases++;
        case_start = end ? end + strlen(sep) : NULL;
        line = eol ? eol + 1 : line + strlen(line);
    }
    free(inp);
    free(out);
    return true;
}

static void test_reference_inp_out(void **state) {
    (void)state;
    const char *names[] = {"ggml-vocab-gpt-2.gguf", "ggml-vocab-deepseek-coder.gguf", "ggml-vocab-llama-spm.gguf"};
    for (size_t v = 0; v < 3; v++) {
        char inp[512], out[512];
        snprintf(inp, sizeof inp, "%s.inp", tu_shared(vocab_rel(names[v])));
        snprintf(out, sizeof out, "%s.out", tu_shared(vocab_rel(names[v])));
        inp_out_result r;
        assert_true(check_inp_out(vocab(names[v]), inp, out, &r));
        if (r.n_matched != r.n_cases) fail_msg("%s: %s", names[v], r.first_miss);
        assert_int_equal(r.n_round_trips, r.n_cases);
        assert_true(r.n_cases >= 46);
    }
}

/*
 * Opt-in: TKV_EXTRA_VOCAB_DIR names a folder of the reference's
 * ggml-vocab-X.gguf files with their X.gguf.inp and .out (files that cannot
 * be committed). Every vocabulary there that loads must match every case;
 * one whose tokenizer type is not supported is reported and skipped.
 */
static int cmp_names(const void *a, const void *b) { return strcmp(a, b); }

static void test_extra_vocab_dir(void **state) {
    (void)state;
    const char *dir = getenv("TKV_EXTRA_VOCAB_DIR");
    if (!dir || !*dir) {
        printf("TKV_EXTRA_VOCAB_DIR is not set: no extra vocabularies\n");
        return;
    }
    DIR *d = opendir(dir);
    if (!d) fail_msg("TKV_EXTRA_VOCAB_DIR '%s' cannot be opened", dir);
    char names[64][256];
    int n_names = 0;
    for (struct dirent *e; (e = readdir(d)) && n_names < 64;) {
        size_t n = strlen(e->d_name);
        if (n < 255 && n > 5 && !strncmp(e->d_name, "ggml-vocab-", 11) && !strcmp(e->d_name + n - 5, ".gguf"))
            snprintf(names[n_names++], sizeof names[0], "%s", e->d_name);
    }
    closedir(d);
    qsort(names, (size_t)n_names, sizeof names[0], cmp_names);
    int n_failed = 0, n_ran = 0;
    for (int k = 0; k < n_names; k++) {
        char path[1024], inp[1100], out[1100];
        snprintf(path, sizeof path, "%.700s/%.255s", dir, names[k]);
        snprintf(inp, sizeof inp, "%s.inp", path);
        snprintf(out, sizeof out, "%s.out", path);
        tkv_model_params p = tkv_model_default_params();
        p.vocab_only = true;
        tkv_model *m = NULL;
        tkv_status st = tkv_model_load(path, &p, &m);
        if (st == TKV_OK && !m->tok) st = m->tok_status ? m->tok_status : TKV_ERR_UNSUPPORTED;
        if (st != TKV_OK) {
            printf("  %-36s skipped: %s\n", names[k], m ? m->tok_error : tkv_last_error(NULL));
            tkv_model_free(m);
            continue;
        }
        inp_out_result r;
        if (!check_inp_out(m, inp, out, &r)) {
            printf("  %-36s skipped: no .inp/.out\n", names[k]);
            tkv_model_free(m);
            continue;
        }
        n_ran++;
        printf("  %-36s %d/%d cases match, %d/%d round-trip%s%s\n", names[k], r.n_matched, r.n_cases,
               r.n_round_trips, r.n_cases, r.first_miss[0] ? "; first miss: " : "", r.first_miss);
        n_failed += r.n_matched != r.n_cases;
        tkv_model_free(m);
    }
    printf("TKV_EXTRA_VOCAB_DIR: %d vocabularies checked, %d with differences\n", n_ran, n_failed);
    assert_int_equal(n_failed, 0);
}

static void test_cli_example(void **state) {
    (void)state;
    size_t n;
    tkv_token *t = tokenize(vocab("ggml-vocab-gpt-2.gguf"), "Hello world", 11, TKV_TOKENIZE_ADD_SPECIAL, &n);
    assert_int_equal(n, 2);
    assert_int_equal(t[0], 15496);
    assert_int_equal(t[1], 995);
    free(t);
}

/* ---- round trips -------------------------------------------------------- */

static void test_round_trip_reference_strings(void **state) {
    (void)state;
    FILE *f = fopen(tu_shared("reference/tokenize.jsonl"), "r");
    char *line = NULL;
    size_t cap = 0;
    while (getline(&line, &cap, f) > 0) {
        json_t *j = json_loads(line, 0, NULL);
        json_t *jt = json_object_get(j, "text");
        for (int v = 0; v < N_VOCABS; v++) {
            const char *text = json_string_value(jt);
            size_t len = json_string_length(jt);
            expect_round_trip(vocabs[v], text, len, 0, 0);
            expect_round_trip(vocabs[v], text, len, TKV_TOKENIZE_ADD_SPECIAL, 0);
            /* parsed special text comes back when special tokens are rendered */
            expect_round_trip(vocabs[v], text, len, TKV_TOKENIZE_PARSE_SPECIAL, TKV_DETOKENIZE_SPECIAL);
        }
        json_decref(j);
    }
    free(line);
    fclose(f);
}

static size_t put_utf8(char *s, uint32_t c) {
    if (c < 0x80) return s[0] = (char)c, 1;
    if (c < 0x800) return s[0] = (char)(0xC0 | c >> 6), s[1] = (char)(0x80 | (c & 0x3F)), 2;
    if (c < 0x10000)
        return s[0] = (char)(0xE0 | c >> 12), s[1] = (char)(0x80 | ((c >> 6) & 0x3F)), s[2] = (char)(0x80 | (c & 0x3F)), 3;
    s[0] = (char)(0xF0 | c >> 18), s[1] = (char)(0x80 | ((c >> 12) & 0x3F));
    s[2] = (char)(0x80 | ((c >> 6) & 0x3F)), s[3] = (char)(0x80 | (c & 0x3F));
    return 4;
}

/* A random code point, biased towards what text is made of. */
static uint32_t random_cpt(void) {
    static const uint32_t common[] = {' ', ' ', ' ', '\n', '\t', '\r', 0xA0, 0x3000, 0x85, 0x2028, '\'', '.', ',', '!'};
    switch (rand() % 8) {
    case 0: return common[rand() % (int)(sizeof common / sizeof common[0])];
    case 1:
    case 2: return 'a' + rand() % 26;
    case 3: return '0' + rand() % 10;
    case 4: return 0x20 + rand() % 95;
    case 5: return 0x80 + rand() % 0x780; /* Latin, Greek, Cyrillic, Hebrew, Arabic */
    case 6: return 0x3040 + rand() % 0x6000; /* kana, CJK */
    default: {
        uint32_t c;
        /* not U+2581: SentencePiece's space mark reads as a space */
        do c = 1 + (uint32_t)rand() % 0x10FFFF;
        while ((c >= 0xD800 && c <= 0xDFFF) || c == 0x2581);
        return c;
    }
    }
}

static void test_round_trip_random_utf8(void **state) {
    (void)state;
    srand(7);
    char buf[1024];
    for (int iter = 0; iter < 300; iter++) {
        size_t len = 0;
        int n = rand() % 60;
        for (int i = 0; i < n; i++) len += put_utf8(buf + len, random_cpt());
        for (int v = 0; v < N_VOCABS; v++) expect_round_trip(vocabs[v], buf, len, TKV_TOKENIZE_ADD_SPECIAL, 0);
    }
}

/*
 * Invalid UTF-8 never crashes and, through byte fallback, still round-trips,
 * except in deepseek-coder: it has no byte-level symbols for the bytes that
 * never occur in UTF-8 (0xF5..0xFF, ...), only user-defined tokens with the
 * same text ("÷" for 0xF7), which render as that text, as the reference
 * renders them. There, bytes must only tokenize to valid ids.
 */
static void test_random_bytes(void **state) {
    (void)state;
    srand(11);
    char buf[256];
    tkv_model *dsc = vocab("ggml-vocab-deepseek-coder.gguf");
    for (int iter = 0; iter < 300; iter++) {
        size_t len = (size_t)(rand() % 64);
        for (size_t i = 0; i < len; i++) buf[i] = (char)(rand() % 4 ? rand() % 256 : 0x80 + rand() % 0x40);
        for (int v = 0; v < N_VOCABS; v++) {
            if (vocabs[v] != dsc) {
                expect_round_trip(vocabs[v], buf, len, 0, 0);
                continue;
            }
            size_t n;
            tkv_token *t = tokenize(dsc, buf, len, 0, &n);
            for (size_t i = 0; i < n; i++) assert_true(t[i] >= 0 && (size_t)t[i] < tkv_vocab_size(dsc));
            free(t);
        }
    }
    /* NUL bytes are text too */
    for (int v = 0; v < N_VOCABS; v++) expect_round_trip(vocabs[v], "a\0b", 3, 0, 0);
}

/* ---- streaming ---------------------------------------------------------- */

static bool valid_utf8(const char *s, size_t n) {
    for (size_t i = 0; i < n;) {
        unsigned char c = (unsigned char)s[i];
        size_t k = c < 0x80 ? 1 : c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC2 ? 2 : 0;
        if (!k || i + k > n) return false;
        for (size_t j = 1; j < k; j++)
            if (((unsigned char)s[i + j] & 0xC0) != 0x80) return false;
        i += k;
    }
    return true;
}

static void test_streaming(void **state) {
    (void)state;
    static const char *const texts[] = {"😀 emoji 🚀🔥 and café", "你好，世界", "Привет, мир!", " leading", "<s> x </s>"};
    for (int v = 0; v < N_VOCABS; v++) {
        for (size_t k = 0; k < sizeof texts / sizeof texts[0]; k++) {
            size_t n, whole_len;
            tkv_token *t = tokenize(vocabs[v], texts[k], strlen(texts[k]), TKV_TOKENIZE_ADD_SPECIAL, &n);
            char *whole = detokenize(vocabs[v], t, n, 0, &whole_len);
            tkv_detok *d;
            assert_int_equal(tkv_detok_create(vocabs[v], 0, &d), TKV_OK);
            char acc[1024];
            size_t acc_len = 0;
            for (size_t i = 0; i < n; i++) {
                const char *out;
                size_t out_len;
                assert_int_equal(tkv_detok_push(d, t[i], &out, &out_len), TKV_OK);
                assert_true(valid_utf8(out, out_len)); /* only whole characters come out */
                memcpy(acc + acc_len, out, out_len);
                acc_len += out_len;
            }
            const char *out;
            size_t out_len;
            assert_int_equal(tkv_detok_flush(d, &out, &out_len), TKV_OK);
            memcpy(acc + acc_len, out, out_len);
            acc_len += out_len;
            assert_int_equal(acc_len, whole_len);
            assert_memory_equal(acc, whole, whole_len);
            assert_int_equal(tkv_detok_push(d, -5, &out, &out_len), TKV_ERR_INVALID);
            tkv_detok_free(d);
            free(whole);
            free(t);
        }
    }
    tkv_detok_free(NULL);
}

/* A 4-byte character split across byte tokens is held until complete. */
static void test_streaming_holds_partial_characters(void **state) {
    (void)state;
    tkv_model *m = vocab("stories260K.gguf"); /* 512 tokens: emoji become <0xXX> byte tokens */
    size_t n;
    tkv_token *t = tokenize(m, "😀", 4, 0, &n);
    assert_true(n >= 4);
    tkv_detok *d;
    assert_int_equal(tkv_detok_create(m, 0, &d), TKV_OK);
    const char *out;
    size_t out_len, total = 0;
    for (size_t i = 0; i + 1 < n; i++) {
        assert_int_equal(tkv_detok_push(d, t[i], &out, &out_len), TKV_OK);
        total += out_len;
    }
    assert_int_equal(total, 0); /* nothing released before the last byte */
    assert_int_equal(tkv_detok_push(d, t[n - 1], &out, &out_len), TKV_OK);
    assert_int_equal(out_len, 4);
    assert_memory_equal(out, "😀", 4);
    tkv_detok_free(d);
    free(t);
}

/* A stream that continues a text (TKV_DETOKENIZE_CONTINUE) gives what the
   whole text has after its head, its first word's space included; a plain
   stream starts a text and drops that space, as tkv_detokenize does. */
static void test_streaming_continuation(void **state) {
    (void)state;
    tkv_model *m = vocab("stories260K.gguf");
    const char *text = "Once upon a time there was a dog";
    size_t n;
    tkv_token *t = tokenize(m, text, strlen(text), 0, &n);
    assert_true(n > 4);
    for (size_t head = 1; head < n; head++) {
        char whole[256], front[256];
        size_t lw, lf;
        assert_int_equal(tkv_detokenize(m, t, n, 0, whole, sizeof whole, &lw), TKV_OK);
        assert_int_equal(tkv_detokenize(m, t, head, 0, front, sizeof front, &lf), TKV_OK);
        for (unsigned flags = 0; flags <= TKV_DETOKENIZE_CONTINUE; flags += TKV_DETOKENIZE_CONTINUE) {
            tkv_detok *d;
            assert_int_equal(tkv_detok_create(m, flags, &d), TKV_OK);
            for (int round = 0; round < 2; round++) { /* and again after a reset */
                char got[256];
                size_t lg = 0, k;
                const char *out;
                for (size_t i = head; i < n; i++) {
                    assert_int_equal(tkv_detok_push(d, t[i], &out, &k), TKV_OK);
                    memcpy(got + lg, out, k), lg += k;
                }
                assert_int_equal(tkv_detok_flush(d, &out, &k), TKV_OK);
                memcpy(got + lg, out, k), lg += k;
                const char *want = whole + lf;
                size_t lwant = lw - lf;
                if (!flags && lwant && want[0] == ' ') want++, lwant--; /* a new text: no leading space */
                assert_int_equal(lg, lwant);
                assert_memory_equal(got, want, lg);
                tkv_detok_reset(d);
            }
            tkv_detok_free(d);
        }
    }
    free(t);
}

/* SPM's split into words (tokenizer_merge.c) must equal one merge loop over
   the whole text: the whole-text loop is the oracle. */
static void test_spm_word_split_is_exact(void **state) {
    (void)state;
    tkv_model *spm = vocab("ggml-vocab-llama-spm.gguf");
    tkv__tokenizer *t = spm->tok;
    assert_true(t->spm_words); /* Llama 2's vocabulary has the property */
    srand(3);
    char buf[2048];
    for (int iter = 0; iter < 200; iter++) {
        size_t len = 0;
        int n = rand() % 200;
        for (int i = 0; i < n; i++) len += put_utf8(buf + len, rand() % 3 ? (uint32_t)(' ' + rand() % 95) : random_cpt());
        size_t n1, n2;
        t->spm_words = true;
        tkv_token *a = tokenize(spm, buf, len, 0, &n1);
        t->spm_words = false;
        tkv_token *b = tokenize(spm, buf, len, 0, &n2);
        t->spm_words = true;
        assert_int_equal(n1, n2);
        assert_memory_equal(a, b, n1 * sizeof *a);
        free(a);
        free(b);
    }
}

/* ---- special tokens and contracts --------------------------------------- */

static void test_special_tokens(void **state) {
    (void)state;
    tkv_model *g2 = vocab("ggml-vocab-gpt-2.gguf");
    size_t n;
    tkv_token *t = tokenize(g2, "a<|endoftext|>b", 15, TKV_TOKENIZE_PARSE_SPECIAL, &n);
    assert_int_equal(n, 3);
    assert_int_equal(t[1], 50256);
    free(t);
    t = tokenize(g2, "a<|endoftext|>b", 15, 0, &n);
    assert_true(n > 3); /* ordinary text without the flag */
    for (size_t i = 0; i < n; i++) assert_int_not_equal(t[i], 50256);
    free(t);
    assert_int_equal(tkv_token_bos(g2), 50256);
    assert_int_equal(tkv_token_eos(g2), 50256);
    assert_true(tkv_token_is_eog(g2, 50256));
    assert_false(tkv_token_is_eog(g2, 15496));
    assert_false(tkv_tokenizer_adds_bos(g2));
    assert_int_equal(tkv_vocab_size(g2), 50257);

    tkv_model *spm = vocab("ggml-vocab-llama-spm.gguf");
    assert_int_equal(tkv_token_bos(spm), 1);
    assert_int_equal(tkv_token_eos(spm), 2);
    assert_true(tkv_token_is_eog(spm, 2));
    assert_true(tkv_tokenizer_adds_bos(spm));
    assert_string_equal(tkv_token_text(spm, 1), "<s>");
    assert_null(tkv_token_text(spm, 32000));
    assert_true(tkv_tokenizer_adds_bos(vocab("ggml-vocab-deepseek-coder.gguf")));
    assert_int_equal(tkv_token_bos(vocab("ggml-vocab-deepseek-coder.gguf")), 32013);

    /* pieces: control tokens are empty unless asked for */
    char buf[64];
    size_t len;
    assert_int_equal(tkv_token_to_piece(spm, 1, 0, buf, sizeof buf, &len), TKV_OK);
    assert_int_equal(len, 0);
    assert_int_equal(tkv_token_to_piece(spm, 1, TKV_DETOKENIZE_SPECIAL, buf, sizeof buf, &len), TKV_OK);
    assert_string_equal(buf, "<s>");
    assert_int_equal(tkv_token_to_piece(g2, 15496, 0, buf, sizeof buf, &len), TKV_OK);
    assert_string_equal(buf, "Hello");
    assert_int_equal(tkv_token_to_piece(g2, 995, 0, buf, sizeof buf, &len), TKV_OK);
    assert_string_equal(buf, " world");
}

static void test_contracts(void **state) {
    (void)state;
    tkv_model *m = vocab("ggml-vocab-llama-spm.gguf");
    tkv_token out[4] = {-9, -9, -9, -9};
    size_t n = 0;
    /* too small: FULL and the size needed */
    assert_int_equal(tkv_tokenize(m, "Hello world, again", 18, TKV_TOKENIZE_ADD_SPECIAL, out, 2, &n), TKV_ERR_FULL);
    assert_true(n > 2);
    assert_non_null(strstr(tkv_last_error(m), "do not fit"));
    assert_int_equal(tkv_tokenize(m, "", 0, 0, NULL, 0, &n), TKV_OK);
    assert_int_equal(n, 0);
    assert_int_equal(tkv_tokenize(m, "", 0, TKV_TOKENIZE_ADD_SPECIAL, out, 4, &n), TKV_OK);
    assert_int_equal(n, 1);
    assert_int_equal(out[0], 1);
    assert_int_equal(tkv_tokenize(m, NULL, 3, 0, out, 4, &n), TKV_ERR_INVALID);
    char buf[8];
    size_t len;
    assert_int_equal(tkv_token_to_piece(m, 32000, 0, buf, sizeof buf, &len), TKV_ERR_INVALID);
    assert_non_null(strstr(tkv_last_error(m), "32000"));
    assert_int_equal(tkv_token_to_piece(m, -1, 0, buf, sizeof buf, &len), TKV_ERR_INVALID);
    tkv_token bad[2] = {100, 40000};
    assert_int_equal(tkv_detokenize(m, bad, 2, 0, buf, sizeof buf, &len), TKV_ERR_INVALID);
    tkv_token hello[2] = {15043, 3186}; /* "▁Hello", "▁world" */
    assert_int_equal(tkv_detokenize(m, hello, 2, 0, buf, 4, &len), TKV_ERR_FULL);
    assert_int_equal(len, 11);
    char big[32];
    assert_int_equal(tkv_detokenize(m, hello, 2, 0, big, sizeof big, &len), TKV_OK);
    assert_string_equal(big, "Hello world");
}

/* ---- tokenizer metadata errors ------------------------------------------ */

static void write_vocab(tkv__gguf_writer *w, const char *pre) {
    const char *tokens[] = {"a", "b", "ab", "<|end|>"};
    int32_t types[] = {1, 1, 1, 3};
    const char *merges[] = {"a b"};
    tkv__gguf_write_str(w, "general.architecture", "llama");
    tkv__gguf_write_str(w, "tokenizer.ggml.model", "gpt2");
    if (pre) tkv__gguf_write_str(w, "tokenizer.ggml.pre", pre);
    tkv__gguf_write_strings(w, "tokenizer.ggml.tokens", tokens, 4);
    tkv__gguf_write_array(w, "tokenizer.ggml.token_type", TKV_META_I32, types, 4);
    tkv__gguf_write_strings(w, "tokenizer.ggml.merges", merges, 1);
}

static tkv_status load_vocab(const char *pre, bool vocab_only, tkv_model **m) {
    tkv__gguf_writer *w = tkv__gguf_writer_new(32);
    write_vocab(w, pre);
    uint8_t *p;
    size_t n;
    assert_int_equal(tkv__gguf_write_finish(w, &p, &n), TKV_OK);
    tkv__gguf_writer_free(w);
    const char *path = tu_write_temp(p, n);
    free(p);
    tkv_model_params mp = tkv_model_default_params();
    mp.vocab_only = vocab_only;
    tkv_status st = tkv_model_load(path, &mp, m);
    remove(path);
    return st;
}

static void test_metadata_errors(void **state) {
    (void)state;
    tkv_model *m = NULL;
    assert_int_equal(load_vocab("gpt-2", true, &m), TKV_OK);
    size_t n;
    tkv_token t[8];
    assert_int_equal(tkv_tokenize(m, "abab", 4, 0, t, 8, &n), TKV_OK);
    assert_int_equal(n, 2);
    assert_int_equal(t[0], 2), assert_int_equal(t[1], 2);
    assert_true(tkv_token_is_eog(m, 3));
    tkv_model_free(m);

    /* an unknown pre-tokenizer: the load of a vocabulary keeps going, and
       tokenizing says why it cannot */
    assert_int_equal(load_vocab("no-such-pre", true, &m), TKV_OK);
    assert_int_equal(tkv_tokenize(m, "ab", 2, 0, t, 8, &n), TKV_ERR_UNSUPPORTED);
    assert_non_null(strstr(tkv_last_error(m), "'no-such-pre'"));
    tkv_model_free(m);
}

/* ---- Gemma 4: SentencePiece text, BPE merges ---------------------------- */

/* A Gemma 4 style vocabulary: control tokens, the 256 byte tokens <0xXX>
   (ids 3..258), then pieces with "▁" for spaces and the merges to make them.
   `model` is tokenizer.ggml.model, `pre` tokenizer.ggml.pre (NULL: none). */
static tkv_model *load_gemma4_vocab(const char *model, const char *pre) {
    enum { N = 3 + 256 + 9 };
    static char bytes[256][8];
    const char *tokens[N] = {"<pad>", "<eos>", "<bos>"};
    int32_t types[N] = {3, 3, 3};
    for (int b = 0; b < 256; b++) {
        snprintf(bytes[b], sizeof bytes[b], "<0x%02X>", b);
        tokens[3 + b] = bytes[b];
        types[3 + b] = 6;
    }
    const char *pieces[] = {"▁", "a", "b", "ab", "▁ab", "\n", "\n\n", "▁▁", "<|\"|>"};
    for (int i = 0; i < 9; i++) tokens[259 + i] = pieces[i], types[259 + i] = i == 8 ? 4 : 1;
    const char *merges[] = {"a b", "▁ ab", "▁ ▁"}; /* none makes "\n\n" */
    tkv__gguf_writer *w = tkv__gguf_writer_new(32);
    const uint8_t no = 0, yes = 1;
    tkv__gguf_write_str(w, "general.architecture", "gemma4");
    tkv__gguf_write_str(w, "tokenizer.ggml.model", model);
    if (pre) tkv__gguf_write_str(w, "tokenizer.ggml.pre", pre);
    tkv__gguf_write_strings(w, "tokenizer.ggml.tokens", tokens, N);
    tkv__gguf_write_array(w, "tokenizer.ggml.token_type", TKV_META_I32, types, N);
    tkv__gguf_write_strings(w, "tokenizer.ggml.merges", merges, 3);
    tkv__gguf_write_u32(w, "tokenizer.ggml.bos_token_id", 2);
    tkv__gguf_write_u32(w, "tokenizer.ggml.eos_token_id", 1);
    /* both overridden, as the reference overrides them for Gemma 4 */
    tkv__gguf_write_scalar(w, "tokenizer.ggml.add_bos_token", TKV_META_BOOL, &no);
    tkv__gguf_write_scalar(w, "tokenizer.ggml.add_space_prefix", TKV_META_BOOL, &yes);
    uint8_t *img;
    size_t n;
    assert_int_equal(tkv__gguf_write_finish(w, &img, &n), TKV_OK);
    tkv__gguf_writer_free(w);
    const char *path = tu_write_temp(img, n);
    free(img);
    tkv_model_params mp = tkv_model_default_params();
    mp.vocab_only = true;
    tkv_model *m = NULL;
    if (tkv_model_load(path, &mp, &m) != TKV_OK) fail_msg("%s", tkv_last_error(NULL));
    remove(path);
    if (!m->tok) fail_msg("%s", m->tok_error);
    return m;
}

/* A byte-level BPE vocabulary of these tokens (control types for the <...> ones), no merges. */
static tkv_model *load_plain_vocab(const char *const *tokens, int n) {
    int32_t types[16];
    for (int i = 0; i < n; i++) types[i] = tokens[i][0] == '<' || tokens[i][0] == '[' ? 3 : 1;
    tkv__gguf_writer *w = tkv__gguf_writer_new(32);
    tkv__gguf_write_str(w, "general.architecture", "llama");
    tkv__gguf_write_str(w, "tokenizer.ggml.model", "gpt2");
    tkv__gguf_write_strings(w, "tokenizer.ggml.tokens", tokens, (uint64_t)n);
    tkv__gguf_write_array(w, "tokenizer.ggml.token_type", TKV_META_I32, types, (uint64_t)n);
    tkv__gguf_write_strings(w, "tokenizer.ggml.merges", NULL, 0);
    uint8_t *img;
    size_t size;
    assert_int_equal(tkv__gguf_write_finish(w, &img, &size), TKV_OK);
    tkv__gguf_writer_free(w);
    const char *path = tu_write_temp(img, size);
    free(img);
    tkv_model_params mp = tkv_model_default_params();
    mp.vocab_only = true;
    tkv_model *m = NULL;
    if (tkv_model_load(path, &mp, &m) != TKV_OK) fail_msg("%s", tkv_last_error(NULL));
    remove(path);
    return m;
}

/* End-of-generation tokens known by their text; with harmony's <|return|> and <|call|> (gpt-oss), <|end|>
   only ends a message, not the generation (the reference's rule). */
static void test_eog_texts(void **state) {
    (void)state;
    const char *plain[] = {"a", "<|end|>", "<|im_end|>", "<eos>", "[EOS]"};
    tkv_model *m = load_plain_vocab(plain, 5);
    for (tkv_token i = 1; i < 5; i++) assert_true(tkv_token_is_eog(m, i));
    assert_false(tkv_token_is_eog(m, 0));
    tkv_model_free(m);
    const char *harmony[] = {"a", "<|end|>", "<|return|>", "<|call|>", "<|start|>"};
    m = load_plain_vocab(harmony, 5);
    assert_false(tkv_token_is_eog(m, 1));
    assert_true(tkv_token_is_eog(m, 2));
    assert_true(tkv_token_is_eog(m, 3));
    assert_false(tkv_token_is_eog(m, 4));
    tkv_model_free(m);
}

static void expect_ids(tkv_model *m, const char *text, size_t len, unsigned flags, const tkv_token *want,
                       size_t n_want) {
    size_t n;
    tkv_token *t = tokenize(m, text, len, flags, &n);
    bool same = n == n_want;
    for (size_t i = 0; same && i < n; i++) same = t[i] == want[i];
    if (!same) {
        char got[512] = "";
        for (size_t i = 0; i < n && strlen(got) < 480; i++) snprintf(got + strlen(got), 16, " %d", t[i]);
        fail_msg("'%.*s': got%s", (int)len, text, got);
    }
    free(t);
    if (!(flags & TKV_TOKENIZE_PARSE_SPECIAL)) expect_round_trip(m, text, len, flags, 0);
}

#define IDS(...) (const tkv_token[]){__VA_ARGS__}, sizeof((const tkv_token[]){__VA_ARGS__}) / sizeof(tkv_token)

static void test_gemma4_tokenizer(void **state) {
    (void)state;
    /* the tokenizer model "gemma4", and "gpt2" with pre-tokenizer "gemma4" */
    tkv_model *ms[2] = {load_gemma4_vocab("gemma4", NULL), load_gemma4_vocab("gpt2", "gemma4")};
    for (int k = 0; k < 2; k++) {
        tkv_model *m = ms[k];
        const int SP = 259, A = 260, B = 261, AB = 262, SP_AB = 263, NL = 264, NL2 = 265, SP2 = 266, QUOTE = 267;
        assert_true(tkv_tokenizer_adds_bos(m));
        assert_int_equal(tkv_token_bos(m), 2);
        /* spaces become "▁" and merge by rank; "\n\n" is a token, so the run
           is taken whole; "c" is no token: its byte token */
        expect_ids(m, "ab ab\n\nab c", 11, TKV_TOKENIZE_ADD_SPECIAL, IDS(2, AB, SP_AB, NL2, AB, SP, 3 + 'c'));
        /* no space prefix: a leading space is the text's own */
        expect_ids(m, " ab", 3, 0, IDS(SP_AB));
        expect_ids(m, "ab", 2, 0, IDS(AB));
        /* a run of line feeds that is no token is merged (there is no merge) */
        expect_ids(m, "\n\n\n", 3, 0, IDS(NL, NL, NL));
        expect_ids(m, "  ", 2, 0, IDS(SP2));
        /* lines are merged apart: "▁" never merges across a line feed */
        expect_ids(m, "a\n b", 4, 0, IDS(A, NL, SP, B));
        /* bytes of characters and of invalid UTF-8 */
        expect_ids(m, "😀\xff", 5, 0, IDS(3 + 0xF0, 3 + 0x9F, 3 + 0x98, 3 + 0x80, 3 + 0xFF));
        /* user-defined tokens are split out and render as their text */
        expect_ids(m, "a<|\"|>b", 7, 0, IDS(A, QUOTE, B));
        char buf[32];
        size_t len;
        const tkv_token ids[] = {2, SP_AB, SP, 3 + 0xC3, 3 + 0xA9};
        assert_int_equal(tkv_detokenize(m, ids, 5, 0, buf, sizeof buf, &len), TKV_OK);
        assert_string_equal(buf, " ab \xC3\xA9");
    }
    tkv_model_free(ms[0]);
    tkv_model_free(ms[1]);
}

/* ---- pre-tokenizer types ----------------------------------------------- */

/*
 * The words the pre-tokenizer `pre` splits `text` into must be `want` (NULL
 * ends it). The expectations below are worked out by hand from each type's
 * expressions, applied in order, each to every piece of the one before.
 */
static void expect_split(const char *pre, const char *text, const char *const *want) {
    tkv__pretok *p;
    tkv__pretok_flags flags;
    if (tkv__pretok_create(pre, &p, &flags) != TKV_OK) fail_msg("%s: %s", pre, tkv_last_error(NULL));
    tkv__spans sp = {0};
    assert_int_equal(tkv__pretok_split(p, text, strlen(text), &sp), TKV_OK);
    size_t k = 0, at = 0;
    for (; want[k]; k++) {
        if (k >= sp.n) fail_msg("%s '%s': %zu words, expected more ('%s' next)", pre, text, sp.n, want[k]);
        const char *got = text + sp.v[k].start;
        if (sp.v[k].start != at || sp.v[k].len != strlen(want[k]) || memcmp(got, want[k], sp.v[k].len))
            fail_msg("%s '%s': word %zu is '%.*s', expected '%s'", pre, text, k, (int)sp.v[k].len, got, want[k]);
        at += sp.v[k].len;
    }
    if (k != sp.n) fail_msg("%s '%s': %zu words, expected %zu", pre, text, sp.n, k);
    tkv__free(sp.v);
    tkv__pretok_free(p);
}

#define W(...) ((const char *const[]){__VA_ARGS__, NULL})

/* The `tokenizer.ggml.pre` names the reference knows (bar kimi-k2 and
   whitespace, other tokenizers): each must give a working pre-tokenizer. */
static void test_pretok_names(void **state) {
    (void)state;
    static const char *const names[] = {
        "default", "llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2",
        "jina-v5-nano", "minicpm5", "deepseek-llm", "deepseek-coder", "deepseek-v3", "youtu", "falcon", "mpt",
        "starcoder", "gpt-2", "phi-2", "jina-es", "jina-de", "gigachat", "jina-v2-es", "jina-v2-de", "a.x-4.0",
        "mellum", "modern-bert", "jais-2", "gemma4", "granite-embed-multi-311m", "sarvam-moe", "jina-v1-en",
        "jina-v2-code", "roberta-bpe", "refact", "command-r", "qwen2", "deepseek-r1-qwen", "kormo", "f2llmv2",
        "qwen35", "stablelm2", "olmo", "dbrx", "smaug-bpe", "poro-chat", "glm4", "chatglm-bpe", "viking", "jais",
        "tekken", "smollm", "codeshell", "bloom", "gpt3-finnish", "exaone", "exaone4", "exaone-moe", "chameleon",
        "minerva-7b", "megrez", "gpt-4o", "llama4", "kanana2", "talkie", "granite-embed-multi-97m", "tiny_aya",
        "cohere2moe", "superbpe", "trillion", "granite-docling", "bailingmoe", "bailingmoe2", "llada-moe",
        "seed-coder", "hunyuan", "hunyuan-dense", "joyai-llm", "grok-2", "afmoe", "laguna", "minimax-m2",
        "solar-open", "mellum2"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        tkv__pretok *p;
        tkv__pretok_flags flags;
        if (tkv__pretok_create(names[i], &p, &flags) != TKV_OK) fail_msg("%s: %s", names[i], tkv_last_error(NULL));
        tkv__spans sp = {0};
        const char *text = "It's 2024: naïve café, 你好 😀\n\n  x";
        assert_int_equal(tkv__pretok_split(p, text, strlen(text), &sp), TKV_OK);
        size_t at = 0; /* words tile the text */
        for (size_t k = 0; k < sp.n; k++) {
            assert_int_equal(sp.v[k].start, at);
            assert_true(sp.v[k].len > 0);
            at += sp.v[k].len;
        }
        assert_int_equal(at, strlen(text));
        tkv__free(sp.v);
        tkv__pretok_free(p);
    }
    /* an unknown type is an error that names it */
    tkv__pretok *p = NULL;
    tkv__pretok_flags flags;
    assert_int_equal(tkv__pretok_create("no-such-pre", &p, &flags), TKV_ERR_UNSUPPORTED);
    assert_null(p);
    assert_non_null(strstr(tkv_last_error(NULL), "'no-such-pre'"));
}

/* DeepSeek LLM: newlines, letters (with one blank before), punctuation
   (likewise), trailing blanks, CJK runs, then digit runs; no contractions. */
static void test_pretok_deepseek_llm(void **state) {
    (void)state;
    expect_split("deepseek-llm", "Hello world, it's 2024!\n",
                 W("Hello", " world", ",", " it", "'", "s", " ", "2024", "!", "\n"));
    expect_split("deepseek-llm", "你好世界，再见", W("你好世界", "\xEF\xBC\x8C", "再见"));
    /* the punctuation class ":-~" holds the ASCII letters: it splits them
       off a word of the letter class again */
    expect_split("deepseek-llm", "Ωmega 3.14 naïve", W("Ω", "mega", " ", "3", ".", "14", " na", "ï", "ve"));
    /* letters whose raw spelling Unicode normalisation changes: U+1F70 (in a
       range that normalisation reversed), U+1FBE, U+2126, U+212A */
    expect_split("deepseek-llm", "\xE1\xBD\xB0\xE1\xBE\xBE\xE2\x84\xA6\xE2\x84\xAA b",
                 W("\xE1\xBD\xB0\xE1\xBE\xBE\xE2\x84\xA6\xE2\x84\xAA", " b"));
    expect_split("deepseek-llm", "a  1", W("a", "  ", "1"));
    expect_split("deepseek-llm", "hi 😀!", W("hi", " 😀", "!"));
    expect_split("deepseek-llm", "x\r\n\ty  ", W("x", "\r", "\n", "\ty", "  "));
}

/* Qwen 3.5: Qwen 2's expression with combining marks inside words. */
static void test_pretok_qwen35(void **state) {
    (void)state;
    expect_split("qwen35", "Hello world, it's 2024!\n",
                 W("Hello", " world", ",", " it", "'s", " ", "2", "0", "2", "4", "!\n"));
    expect_split("qwen35", " नमस्ते", W(" नमस्ते"));
    expect_split("qwen2", " नमस्ते", W(" नमस", "्त", "े")); /* Qwen 2: marks are not letters */
    expect_split("qwen35", "你好😀世界", W("你好", "😀世界"));
    expect_split("qwen35", "a   b\n\n c", W("a", "  ", " b", "\n\n", " c"));
    expect_split("qwen35", "I'M ok", W("I", "'M", " ok"));
    expect_split("qwen35", "e\xCC\x81t\xC3\xA9 x+=1;", W("e\xCC\x81t\xC3\xA9", " x", "+=", "1", ";"));
}

/* Gemma 4: only lines and runs of line feeds are split off. */
static void test_pretok_gemma4(void **state) {
    (void)state;
    expect_split("gemma4", "Hello world, it's 2024!", W("Hello world, it's 2024!"));
    expect_split("gemma4", "a b\n\nc\r\n d\n", W("a b", "\n\n", "c\r", "\n", " d", "\n"));
    expect_split("gemma4", "\n你好 😀", W("\n", "你好 😀"));
}

/* GPT-4o and Tekken: upper then lower case in one word, "CamelCase" in two. */
static void test_pretok_cased(void **state) {
    (void)state;
    expect_split("tekken", "HelloWorld ABCdef élan", W("Hello", "World", " ABCdef", " élan"));
    expect_split("tekken", "aÉ 12345", W("a", "É", " ", "1", "2", "3", "4", "5"));
    expect_split("gpt-4o", "aÉ 12345", W("a", "É", " ", "123", "45"));
    expect_split("gpt-4o", "they're DON'T", W("they're", " DON'T"));
    expect_split("tekken", "they're", W("they", "'re"));
    expect_split("gpt-4o", "a+b/\n", W("a", "+b", "/\n"));
}

/* Types whose expressions the ones above do not exercise. */
static void test_pretok_others(void **state) {
    (void)state;
    expect_split("deepseek-v3", "Hello, 世界! x.y 12345",
                 W("Hello", ",", " ", "世界", "!", " x", ".y", " ", "123", "45"));
    expect_split("superbpe", "x1234567y", W("x", "1", "234", "567", "y")); /* split by empty matches */
    expect_split("afmoe", "1234567 12", W("1", "234", "567", " ", "12"));
    expect_split("jais-2", "a          b", W("a", "        ", " ", " b"));
    expect_split("viking", "Hei maailma 2024.", W("Hei", " maailma", " ", "2", "0", "2", "4", "."));
    expect_split("bailingmoe", "it'S 12", W("it", "'S", " ", "1", "2"));
    expect_split("laguna", "ab 12\n\ncd", W("ab", " ", "1", "2", "\n\n", "cd"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reference_jsonl),
        cmocka_unit_test(test_reference_inp_out),
        cmocka_unit_test(test_extra_vocab_dir),
        cmocka_unit_test(test_cli_example),
        cmocka_unit_test(test_round_trip_reference_strings),
        cmocka_unit_test(test_round_trip_random_utf8),
        cmocka_unit_test(test_random_bytes),
        cmocka_unit_test(test_streaming),
        cmocka_unit_test(test_streaming_holds_partial_characters),
        cmocka_unit_test(test_streaming_continuation),
        cmocka_unit_test(test_spm_word_split_is_exact),
        cmocka_unit_test(test_special_tokens),
        cmocka_unit_test(test_contracts),
        cmocka_unit_test(test_metadata_errors),
        cmocka_unit_test(test_gemma4_tokenizer),
        cmocka_unit_test(test_eog_texts),
        cmocka_unit_test(test_pretok_names),
        cmocka_unit_test(test_pretok_deepseek_llm),
        cmocka_unit_test(test_pretok_qwen35),
        cmocka_unit_test(test_pretok_gemma4),
        cmocka_unit_test(test_pretok_cased),
        cmocka_unit_test(test_pretok_others),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
