/*
 * test_model_induction.c — the induction model (tools/model_induction.h)
 * copies: greedy decoding after a passage and the passage's first tokens
 * continues the passage token for token (the expectation is the prompt
 * itself), at F32 and quantized, after a long unrelated context, with the
 * circuit's zero layers after it; where one token was followed by two
 * different ones, the token before it decides (a two-token match beats a
 * one-token one); and shapes that cannot hold the circuit are refused by
 * name.
 */
#include "testutil.h"

#include "tools/tools.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { VOCAB = 512, CELLS = 2048, MAXT = 2048 };

static char path[64];

/* A small model that can hold the circuit: 2 heads of 128, 2 KV heads, dim 640. */
static tkv__model_spec spec_of(tkv_type type, uint32_t layers, uint64_t seed) {
    tkv__model_spec s = {.arch = "llama", .dim = 640, .layers = layers, .heads = 2, .kv_heads = 2, .head_dim = 128,
                         .ff = 64, .ctx = CELLS, .n_vocab = VOCAB, .weights = TKV__WEIGHTS_INDUCTION, .seed = seed};
    s.mix = (tkv__type_mix){type, type == TKV_TYPE_F32 ? TKV_TYPE_F32 : TKV_TYPE_Q8_0, type};
    return s;
}

/* n tokens in 1..199 with no two-token sequence twice (so the passage has one continuation everywhere);
   the tokens from 200 up are left for the tests to place. */
static void passage(tkv_token *t, size_t n) {
    static uint8_t seen[VOCAB][VOCAB];
    memset(seen, 0, sizeof seen);
    for (size_t i = 0; i < n; i++) {
        do t[i] = 1 + (tkv_token)tu_rand(199);
        while (i > 0 && seen[t[i - 1]][t[i]]);
        if (i > 0) seen[t[i - 1]][t[i]] = 1;
    }
}

/* The greedy continuation of prompt p[0..n) by the model at `path`, `steps` tokens into out. */
static void continue_prompt(const tkv_token *p, size_t n, int steps, tkv_token *out) {
    tkv_model_params mp = tkv_model_default_params();
    tkv_model *m = NULL;
    if (tkv_model_load(path, &mp, &m) != TKV_OK) fail_msg("load: %s", tkv_last_error(NULL));
    tkv_context *ctx = tu_context(m, CELLS, 1, TKV_TYPE_F16);
    static tkv_token t[MAXT];
    memcpy(t, p, n * sizeof *t);
    tu_greedy(ctx, 0, t, n, steps, VOCAB, NULL);
    memcpy(out, t + n, (size_t)steps * sizeof *out);
    tkv_context_free(ctx);
    tkv_model_free(m);
}

/* A passage of 80 tokens (after `lead` unrelated ones), then its first 6: the model goes on with tokens 6..70. */
static void expect_copy(tkv_type type, uint32_t layers, size_t lead) {
    tkv__model_spec s = spec_of(type, layers, 7);
    tu_write_spec_model(&s, path);
    static tkv_token p[MAXT], text[80], got[64];
    passage(text, 80);
    size_t n = 0;
    for (size_t i = 0; i < lead; i++) p[n++] = 1 + (tkv_token)tu_rand(VOCAB - 1);
    memcpy(p + n, text, sizeof text), n += 80;
    memcpy(p + n, text, 6 * sizeof *text), n += 6;
    continue_prompt(p, n, 64, got);
    for (int i = 0; i < 64; i++)
        if (got[i] != text[6 + i])
            fail_msg("%s, %u layers, %zu lead tokens: token %d of the copy is %d, the passage's %d",
                     tkv_type_name(type), layers, lead, i, got[i], text[6 + i]);
}

static void test_copies(void **state) {
    (void)state;
    expect_copy(TKV_TYPE_F32, 2, 0);
    expect_copy(TKV_TYPE_Q8_0, 2, 0);
    expect_copy(TKV_TYPE_Q4_0, 3, 0); /* a zero third layer changes nothing */
}

/* The slow RoPE pairs keep matching across a long context: the passage after 1,700 other tokens. */
static void test_long_context(void **state) {
    (void)state;
    expect_copy(TKV_TYPE_F32, 2, 1700);
}

/* "x a b ... y a c ...": after "y a" the answer is c, after "x a" it is b — one token of context would not tell. */
static void test_two_token_match(void **state) {
    (void)state;
    tkv__model_spec s = spec_of(TKV_TYPE_F32, 2, 3);
    tu_write_spec_model(&s, path);
    static tkv_token text[60];
    passage(text, 60);
    /* make text[20..22] = x a b and text[40..42] = y a c, with x != y and b != c */
    text[21] = text[41] = 500;
    text[20] = 200, text[40] = 201, text[22] = 300, text[42] = 301;
    tkv_token p[64], got[4];
    memcpy(p, text, sizeof text);
    for (int which = 0; which < 2; which++) {
        p[60] = which ? 201 : 200, p[61] = 500;
        continue_prompt(p, 62, 1, got);
        assert_int_equal(got[0], which ? 301 : 300);
    }
}

static void expect_refused(tkv__model_spec s, const char *what) {
    char why[256] = "";
    if (tkv__model_spec_check(&s, why, sizeof why) != TKV_ERR_INVALID) fail_msg("%s: accepted", what);
    if (!strstr(why, "--weights induction")) fail_msg("%s: '%s' does not name --weights induction", what, why);
}

static void test_refused(void **state) {
    (void)state;
    const tkv__model_spec ok = spec_of(TKV_TYPE_F32, 2, 0);
    char why[256];
    assert_int_equal(tkv__model_spec_check(&ok, why, sizeof why), TKV_OK);
    tkv__model_spec s = ok;
    s.arch = "qwen2";
    expect_refused(s, "qwen2");
    s = ok, s.layers = 1;
    expect_refused(s, "one layer");
    s = ok, s.head_dim = 64;
    expect_refused(s, "heads of 64");
    s = ok, s.heads = 5, s.kv_heads = 1;
    expect_refused(s, "one KV head");
    s = ok, s.dim = 512;
    expect_refused(s, "dim 512");
}

static int setup(void **state) {
    (void)state;
    snprintf(path, sizeof path, "/tmp/tkv-induction-XXXXXX");
    const int fd = mkstemp(path);
    return fd < 0 ? -1 : close(fd);
}

static int teardown(void **state) {
    (void)state;
    return unlink(path);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_copies),
        cmocka_unit_test(test_long_context),
        cmocka_unit_test(test_two_token_match),
        cmocka_unit_test(test_refused),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
