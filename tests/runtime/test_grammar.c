/*
 * test_grammar.c — GBNF grammars: the parser accepts the dialect and says
 * where a malformed grammar is wrong; the matcher agrees with an
 * independent backtracking recognizer on random texts; the vocabulary trie
 * allows exactly the tokens that testing each one allows; generation with
 * stories260K stays in the language and ends with EOG; allocation failures
 * never crash or leak.
 */
#include "testutil.h"

#include "base/alloc.h"
#include "runtime/grammar.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rng_state = 12345;
static uint32_t rnd(uint32_t n) {
    rng_state ^= rng_state << 13, rng_state ^= rng_state >> 7, rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state % n);
}

/* ---- grammars (our own equivalents of llama.cpp's examples) ------------------ */

static const char JSON[] =
    "# JSON values\n"
    "root   ::= value\n"
    "value  ::= object | array | string | number | (\"true\" | \"false\" | \"null\") ws\n"
    "object ::=\n"
    "  \"{\" ws (\n"
    "    string \":\" ws value\n"
    "    (\",\" ws string \":\" ws value)*\n"
    "  )? \"}\" ws\n"
    "array  ::= \"[\" ws ( value (\",\" ws value)* )? \"]\" ws\n"
    "string ::= \"\\\"\" (\n"
    "    [^\"\\\\\\x7F\\x00-\\x1F] | \"\\\\\" ([\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4})\n"
    "  )* \"\\\"\" ws\n"
    "number ::= (\"-\"? ([0-9] | [1-9] [0-9]{0,15})) (\".\" [0-9]+)? ([eE] [-+]? [0-9] [1-9]{0,15})? ws\n"
    "ws     ::= | \" \" | \"\\n\" [ \\t]{0,20}\n";

static const char ARITH[] = "root  ::= (expr \"=\" ws term \"\\n\")+\n"
                            "expr  ::= term ([-+*/] term)*\n"
                            "term  ::= ident | num | \"(\" ws expr \")\" ws\n"
                            "ident ::= [a-z] [a-z0-9_]* ws\n"
                            "num   ::= [0-9]+ ws\n"
                            "ws    ::= [ \\t\\n]*\n";

static const char LIST[] = "root ::= item+\r\n"
                           "# no line breaks inside an item\r\n"
                           "item ::= \"- \" [^\\r\\n\\x0b\\x0c\\x85\\u2028\\u2029]+ \"\\n\"\r\n";

static const char CHESS[] = "root    ::= \"1. \" move \" \" move \"\\n\" (\n"
                            "  [1-9] [0-9]? \". \" move \" \" move \"\\n\")+\n"
                            "move    ::= (pawn | nonpawn | castle) [+#]?\n"
                            "nonpawn ::= [NBKQR] [a-h]? [1-8]? \"x\"? [a-h] [1-8]\n"
                            "pawn    ::= ([a-h] \"x\")? [a-h] [1-8] (\"=\" [NBKQR])?\n"
                            "castle  ::= \"O-O\" \"-O\"?\n";

static const char JAPANESE[] = "root ::= ([ぁ-ゟ゠-ヿ一-鿿]+ (\"。\" | \"、\"))+ \"\\n\"?\n";

static const char REPEAT[] = "root ::= \"a\"{2} \"b\"{1,3} (\"c\" | \"d\"){0,2} \"e\"{2,} x? .\n"
                             "x ::= [^a-c] | \"\\u00e9\" | \"\\U0001F600\" | \"\\xff\"\n";

static const char NESTED[] = "root ::= ( \"(\" root \")\" | [xy] )* ( \"!\" )?\n";

/* ---- the parser -------------------------------------------------------------- */

static void test_parse_accepts(void **state) {
    (void)state;
    const char *ok[] = {JSON, ARITH, LIST, CHESS, JAPANESE, REPEAT, NESTED,
                        "root ::= \"\"", /* the empty sentence */
                        "root ::= a | b | \"\"\na ::= \"a\" # comment\n\n# another\nb ::= ( \"b\"\n | \"c\" )\n",
                        "root ::= \"x\"\nroot ::= \"y\"\n", /* the last definition counts */
                        "root::=\"a\"+\"b\"*", "  \n\nroot ::= [\\]\\[-] [-a] [a-]"};
    for (size_t i = 0; i < sizeof ok / sizeof *ok; i++) {
        tkv__gbnf *g = NULL;
        tkv_status st = tkv__gbnf_compile(ok[i], strlen(ok[i]), NULL, &g);
        if (st) fail_msg("grammar %zu: %s", i, tkv_last_error(NULL));
        tkv__gbnf_free(g);
    }
    /* another start rule */
    tkv__gbnf *g = NULL;
    assert_int_equal(tkv__gbnf_compile(JSON, strlen(JSON), "number", &g), TKV_OK);
    tkv__gbnf_free(g);
}

static void test_parse_rejects(void **state) {
    (void)state;
    const struct {
        const char *text, *message;
    } bad[] = {
        {"root ::= \"abc", "line 1 column 14: unexpected end"},
        {"root ::= foo\n", "line 1 column 10: undefined rule 'foo'"},
        {"root ::= \"a\"\nfoo ::= bar baz\nbar ::= \"b\"", "line 2 column 13: undefined rule 'baz'"},
        {"root :: \"a\"", "line 1 column 6: expecting '::='"},
        {"root ::= (\"a\"", "line 1 column 14: expecting ')'"},
        {"root ::= \"a\" )", "line 1 column 14: expecting the end of the rule"},
        {"root ::= expr\nexpr ::= expr \"+\" \"1\" | \"1\"", "line 2 column 1: rule 'expr' is left-recursive"},
        {"root ::= b\nb ::= c? root\nc ::= \"x\"", "left-recursive"},
        {"foo ::= \"a\"", "line 1 column 1: no rule named 'root'"},
        {"root ::= \"\\q\"", "line 1 column 11: unknown escape"},
        {"root ::= [z-a]", "line 1 column 11: character range ends before it starts"},
        {"root ::= []", "line 1 column 10: empty character class"},
        {"root ::= \"a\"{3,2}", "maximum below its minimum"},
        {"root ::= \"a\"{2001}", "repetition count over 2000"},
        {"root ::= \"a\"{2 3}", "expecting ',' or '}'"},
        {"root ::= *", "line 1 column 10: nothing before '*'"},
        {"root ::= \"\\xZZ\"", "expecting 2 hex digits"},
        {"root ::= \"a\"\n  | \"b\"", "line 2 column 3: expecting a rule name"},
        {"root ::= \"é\" \"\xff\"", "line 1 column 15: invalid UTF-8"},
        {"", "no rule named 'root'"},
        {"root ::= ((((\"a\"", "expecting ')'"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        tkv__gbnf *g = (tkv__gbnf *)1;
        assert_int_equal(tkv__gbnf_compile(bad[i].text, strlen(bad[i].text), NULL, &g), TKV_ERR_INVALID);
        assert_null(g);
        const char *e = tkv_last_error(NULL);
        if (!strstr(e, bad[i].message) || strncmp(e, "grammar line ", 13))
            fail_msg("grammar %zu: got \"%s\", want \"%s\"", i, e, bad[i].message);
    }
    /* deep nesting is an error, not a stack overflow */
    char deep[4000] = "root ::= ";
    for (int i = 0; i < 1000; i++) strcat(deep, "(");
    tkv__gbnf *g = NULL;
    assert_int_equal(tkv__gbnf_compile(deep, strlen(deep), NULL, &g), TKV_ERR_INVALID);
    assert_non_null(strstr(tkv_last_error(NULL), "nested deeper"));
    /* NUL bytes are text, not the end */
    assert_int_equal(tkv__gbnf_compile("root ::= \"a\"\0x", 14, NULL, &g), TKV_ERR_INVALID);
}

/* ---- the oracle: backtracking over the compiled rules ------------------------ */

typedef struct ocont {
    uint32_t pos;
    const struct ocont *next;
} ocont;

static long oracle_budget;

/* Can cps[i..n) be matched from el[pos], then k? prefix: running out of text is success. */
static bool om(const tkv__gbnf *g, uint32_t pos, const ocont *k, const uint32_t *cps, size_t n, size_t i,
               bool prefix) {
    if (--oracle_budget < 0) return false;
    for (;;) {
        const tkv__gel *e = &g->el[pos];
        if (e->type == TKV__GEL_END || e->type == TKV__GEL_ALT) {
            if (!k) return i == n;
            pos = k->pos, k = k->next;
            continue;
        }
        if (i == n && prefix) return true;
        if (e->type == TKV__GEL_CLASS) {
            if (i == n || !tkv__gclass_has(g, &g->cls[e->value], cps[i])) return false;
            pos++, i++;
            continue;
        }
        const ocont c = {pos + 1, k};
        for (uint32_t a = g->rule_start[e->value];; a++) {
            if (om(g, a, &c, cps, n, i, prefix)) return true;
            while (g->el[a].type != TKV__GEL_ALT && g->el[a].type != TKV__GEL_END) a++;
            if (g->el[a].type == TKV__GEL_END) return false;
        }
    }
}

/* 1/0 for the answer, -1 when the budget ran out */
static int oracle(const tkv__gbnf *g, const uint32_t *cps, size_t n, bool prefix) {
    oracle_budget = 2000000;
    const ocont top = {0, NULL};
    (void)top;
    bool r = false;
    for (uint32_t a = g->rule_start[g->root];; a++) {
        if ((r = om(g, a, NULL, cps, n, 0, prefix))) break;
        while (g->el[a].type != TKV__GEL_ALT && g->el[a].type != TKV__GEL_END) a++;
        if (g->el[a].type == TKV__GEL_END) break;
    }
    return oracle_budget < 0 && !r ? -1 : r;
}

static size_t utf8(uint32_t c, char *o) {
    if (c < 0x80) return o[0] = (char)c, 1;
    if (c < 0x800) return o[0] = (char)(0xC0 | c >> 6), o[1] = (char)(0x80 | (c & 63)), 2;
    if (c < 0x10000)
        return o[0] = (char)(0xE0 | c >> 12), o[1] = (char)(0x80 | (c >> 6 & 63)), o[2] = (char)(0x80 | (c & 63)), 3;
    o[0] = (char)(0xF0 | c >> 18), o[1] = (char)(0x80 | (c >> 12 & 63)), o[2] = (char)(0x80 | (c >> 6 & 63));
    o[3] = (char)(0x80 | (c & 63));
    return 4;
}

static void compare_oracle(const char *text, const char *alphabet_utf8) {
    tkv__gbnf *g = NULL;
    assert_int_equal(tkv__gbnf_compile(text, strlen(text), NULL, &g), TKV_OK);
    uint32_t alpha[128];
    size_t na = 0;
    for (const unsigned char *p = (const unsigned char *)alphabet_utf8; *p && na < 128;) {
        int n = *p < 0x80 ? 1 : *p < 0xE0 ? 2 : *p < 0xF0 ? 3 : 4;
        uint32_t c = n == 1 ? *p : *p & (0x3F >> (n - 1));
        for (int i = 1; i < n; i++) c = c << 6 | (p[i] & 63);
        alpha[na++] = c, p += n;
    }
    tkv__gmatch *m = NULL;
    assert_int_equal(tkv__gmatch_create(g, &m), TKV_OK);
    int compared = 0;
    for (int trial = 0; trial < 150; trial++) {
        assert_int_equal(tkv__gmatch_reset(m), TKV_OK);
        uint32_t cps[40];
        size_t n = 0;
        const size_t len = 1 + rnd(30);
        while (n < len) {
            /* try a few characters; keep the first the oracle calls a prefix (a walk inside the language) */
            bool extended = false;
            for (int t = 0; t < 6 && !extended; t++) {
                cps[n] = alpha[rnd((uint32_t)na)];
                int want = oracle(g, cps, n + 1, true);
                char b[4];
                size_t nb = utf8(cps[n], b);
                bool ok;
                /* byte by byte: each partial character must stay feasible when the whole one matches */
                for (size_t k = 1; k < nb; k++) {
                    assert_int_equal(tkv__gmatch_feed(m, b, k, false, &ok), TKV_OK);
                    if (want == 1) assert_true(ok);
                }
                assert_int_equal(tkv__gmatch_feed(m, b, nb, false, &ok), TKV_OK);
                if (want < 0) continue;
                if (ok != (want == 1)) {
                    char s[200] = "";
                    for (size_t q = 0; q <= n; q++) utf8(cps[q], s + strlen(s));
                    fail_msg("grammar %.30s...: engine %d, oracle %d on prefix \"%s\"", text, ok, want, s);
                }
                compared++;
                if (ok) {
                    assert_int_equal(tkv__gmatch_feed(m, b, nb, true, &ok), TKV_OK);
                    n++;
                    extended = true;
                    int whole = oracle(g, cps, n, false);
                    if (whole >= 0) assert_int_equal(tkv__gmatch_complete(m), whole == 1);
                }
            }
            if (!extended) break;
        }
    }
    assert_true(compared > 300);
    assert_false(tkv__gmatch_overflowed(m));
    tkv__gmatch_free(m);
    tkv__gbnf_free(g);
}

static void test_matcher_oracle(void **state) {
    (void)state;
    compare_oracle(JSON, "{}[]\",:0123456789-+.eE truefalsn\\u/bx\n\té");
    compare_oracle(ARITH, "abc_09+-*/()= \n");
    compare_oracle(LIST, "- ab\n\r\xc2\x85");
    compare_oracle(CHESS, "1. 2NBKQRabcdefgh12345678x=O-+#\n");
    compare_oracle(JAPANESE, "ぁあゟ゠アヿ一鿿。、a\n");
    compare_oracle(REPEAT, "abcdexé😀ÿ");
    compare_oracle(NESTED, "()xy!");
    compare_oracle("root ::= . .? \"\\n\"*", "a\né😀"); /* dots only: no ranges at all */
    compare_oracle("root ::= (\"ab\" | \"a\" \"b\"? | \"b\")* \"c\"?\n", "abc");
    /* overlong forms, surrogates and stray bytes are no characters */
    const char *any = "root ::= [^a]*";
    tkv__gbnf *g = NULL;
    tkv__gmatch *m = NULL;
    assert_int_equal(tkv__gbnf_compile(any, strlen(any), NULL, &g), TKV_OK);
    assert_int_equal(tkv__gmatch_create(g, &m), TKV_OK);
    const char *bad[] = {"\xC0\xBC", "\xC1", "\xE0\x80", "\xED\xA0", "\xF4\x90", "\xF5", "\x80", "\xC3\xC3"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        bool ok = true;
        assert_int_equal(tkv__gmatch_feed(m, bad[i], strlen(bad[i]), false, &ok), TKV_OK);
        if (ok) fail_msg("invalid UTF-8 %zu accepted", i);
    }
    bool ok = false;
    assert_int_equal(tkv__gmatch_feed(m, "\xF0\x9F\x98", 3, true, &ok), TKV_OK);
    assert_true(ok && !tkv__gmatch_complete(m)); /* a partial character is no whole sentence */
    assert_int_equal(tkv__gmatch_feed(m, "\x80", 1, true, &ok), TKV_OK);
    assert_true(ok && tkv__gmatch_complete(m));
    tkv__gmatch_free(m);
    tkv__gbnf_free(g);
}

/* ---- the vocabulary: trie against one token at a time -------------------------- */

typedef struct vocab {
    size_t n;
    char *piece[600];
    size_t len[600];
    bool eog[600];
} vocab;

/* A vocabulary with a control token (no text), an EOG, single bytes, words and split UTF-8 characters. */
static void make_vocab(vocab *v) {
    static const char *words[] = {"true", "false", "null", "{\"", "\":", "\", \"", "12", "3.", ".5e", " [", "],",
                                  "abc", "a_1", "- ", "\n- ", "é", "\xC3", "\xA9", "日", "\xE6\x97", "\xA5", "ぁあ",
                                  "。", "、", "一", "\xE4", "\xB8\x80", "O-O", "Nf3", "e4", "1. ", "\\u00", "\\n",
                                  "😀", "\xF0\x9F", "\x98\x80", "aa", "bb", "ee", "cd", "(x", "y)", "\xff", "\x85"};
    memset(v, 0, sizeof *v);
    v->piece[0] = strdup(""), v->len[0] = 0;          /* a control token */
    v->piece[1] = strdup(""), v->eog[1] = true;       /* EOS */
    v->n = 2;
    for (int c = 1; c < 256; c++) { /* every byte */
        char b[2] = {(char)c, 0};
        v->piece[v->n] = malloc(2), memcpy(v->piece[v->n], b, 2), v->len[v->n++] = 1;
    }
    for (size_t i = 0; i < sizeof words / sizeof *words; i++)
        v->piece[v->n] = strdup(words[i]), v->len[v->n] = strlen(words[i]), v->n++;
    const char alpha[] = "abcdefgh\"{}[],: 0123456789-.\\nxyO=";
    while (v->n < 600) { /* random words */
        size_t n = 2 + rnd(6);
        v->piece[v->n] = malloc(n + 1);
        for (size_t i = 0; i < n; i++) v->piece[v->n][i] = alpha[rnd(sizeof alpha - 1)];
        v->piece[v->n][n] = 0, v->len[v->n++] = n;
    }
}

static void free_vocab(vocab *v) {
    for (size_t i = 0; i < v->n; i++) free(v->piece[i]);
}

static void check_trie(const tkv_grammar *G, size_t n_vocab, int steps, int walks) {
    tkv__gmatch *m = NULL;
    assert_int_equal(tkv__gmatch_create(tkv__grammar_gbnf(G), &m), TKV_OK);
    uint8_t *allowed = malloc(n_vocab);
    for (int w = 0; w < walks; w++) {
        assert_int_equal(tkv__gmatch_reset(m), TKV_OK);
        for (int step = 0; step < steps; step++) {
            size_t n = 0, brute = 0;
            assert_int_equal(tkv__grammar_allowed(G, m, allowed, &n), TKV_OK);
            size_t count = 0;
            for (size_t t = 0; t < n_vocab; t++) {
                bool ok;
                assert_int_equal(tkv__grammar_token(G, m, (tkv_token)t, false, &ok), TKV_OK);
                if (ok != (allowed[t] == 1))
                    fail_msg("walk %d step %d: token %zu trie %d brute %d", w, step, t, allowed[t], ok);
                brute += ok;
                count += allowed[t];
            }
            assert_int_equal(n, brute);
            assert_int_equal(count, n);
            if (!n) break;
            size_t pick = rnd((uint32_t)n);
            tkv_token t = 0;
            for (size_t i = 0; i < n_vocab; i++)
                if (allowed[i] && pick-- == 0) t = (tkv_token)i;
            bool ok;
            assert_int_equal(tkv__grammar_token(G, m, t, true, &ok), TKV_OK);
            assert_true(ok);
        }
    }
    free(allowed);
    tkv__gmatch_free(m);
}

static void test_trie_equals_brute_force(void **state) {
    (void)state;
    vocab v;
    make_vocab(&v);
    const char *grammars[] = {JSON, ARITH, LIST, CHESS, JAPANESE, REPEAT, NESTED};
    for (size_t i = 0; i < sizeof grammars / sizeof *grammars; i++) {
        tkv_grammar *G = NULL;
        assert_int_equal(tkv__grammar_create_vocab(grammars[i], strlen(grammars[i]), NULL, v.n,
                                                   (const char *const *)v.piece, v.len, v.eog, &G),
                         TKV_OK);
        check_trie(G, v.n, 25, 6);
        tkv_grammar_free(G);
    }
    free_vocab(&v);
    /* the real SentencePiece vocabulary (byte tokens, "▁" spaces, control tokens) */
    tkv_grammar *G = NULL;
    assert_int_equal(tkv_grammar_create(tu_model, JSON, strlen(JSON), NULL, &G), TKV_OK);
    check_trie(G, tu_n_vocab, 20, 3);
    tkv_grammar_free(G);
}

/* ---- the sampler ---------------------------------------------------------------- */

static void test_control_tokens_and_eog(void **state) {
    (void)state;
    /* "<s>" as text: the control token <s> is never its text */
    const char *gr = "root ::= \"<s>\" \"</s>\"";
    tkv_grammar *G = NULL;
    assert_int_equal(tkv_grammar_create(tu_model, gr, strlen(gr), NULL, &G), TKV_OK);
    tkv_sampler_params p = tkv_sampler_default_params();
    p.temperature = 0;
    tkv_sampler *s = NULL;
    assert_int_equal(tkv_sampler_create(&p, tu_n_vocab, &s), TKV_OK);
    assert_int_equal(tkv_sampler_set_grammar(s, G), TKV_OK);
    float *l = calloc(tu_n_vocab, sizeof *l);
    const tkv_token bos = tkv_token_bos(tu_model), eos = tkv_token_eos(tu_model);
    char text[64] = "";
    for (int i = 0; i < 20; i++) {
        for (size_t t = 0; t < tu_n_vocab; t++) l[t] = (float)(t % 7);
        l[bos] = 100, l[eos] = 90; /* the model wants them */
        tkv_token t = tkv_sampler_sample(s, l);
        assert_int_not_equal(t, bos);
        if (t == eos) break;
        char piece[32];
        size_t n;
        assert_int_equal(tkv_token_to_piece(tu_model, t, 0, piece, sizeof piece, &n), TKV_OK);
        strcat(text, piece);
    }
    assert_string_equal(text, "<s></s>");
    /* complete and nothing extends it: only EOG, whatever the logits */
    for (size_t t = 0; t < tu_n_vocab; t++) l[t] = t == 'x' ? 1000.0f : 0.0f;
    assert_true(tkv_token_is_eog(tu_model, tkv_sampler_sample(s, l)));
    /* the prompt does not advance the grammar; NULL removes it */
    assert_int_equal(tkv_sampler_set_grammar(s, G), TKV_OK);
    tkv_sampler_accept(s, 5);
    assert_int_equal(tkv_sampler_set_grammar(s, NULL), TKV_OK);
    for (size_t t = 0; t < tu_n_vocab; t++) l[t] = 0;
    l[bos] = 1;
    assert_int_equal(tkv_sampler_sample(s, l), bos);
    /* a grammar for another vocabulary size */
    tkv_sampler *s2 = NULL;
    assert_int_equal(tkv_sampler_create(&p, 10, &s2), TKV_OK);
    assert_int_equal(tkv_sampler_set_grammar(s2, G), TKV_ERR_INVALID);
    tkv_sampler_free(s2);
    tkv_sampler_free(s);
    tkv_grammar_free(G);
    free(l);
    /* errors through the public API */
    assert_int_equal(tkv_grammar_create(tu_model, "root ::= x", 10, NULL, &G), TKV_ERR_INVALID);
    assert_null(G);
    assert_non_null(strstr(tkv_last_error(NULL), "grammar line 1 column 10: undefined rule 'x'"));
    assert_int_equal(tkv_grammar_create(NULL, "root ::= \"x\"", 12, NULL, &G), TKV_ERR_INVALID);
    tkv_grammar_free(NULL);
}

/* Rejection, then the mask: draws follow the softmax restricted to the allowed tokens. */
static void test_masked_distribution(void **state) {
    (void)state;
    const char *pieces[5] = {"a", "b", "c", "", "ab"};
    const size_t lens[5] = {1, 1, 1, 0, 2};
    const bool eog[5] = {false, false, false, true, false};
    const char *gr = "root ::= [ab]";
    tkv_grammar *G = NULL;
    assert_int_equal(tkv__grammar_create_vocab(gr, strlen(gr), NULL, 5, pieces, lens, eog, &G), TKV_OK);
    tkv_sampler_params p = tkv_sampler_default_params();
    p.temperature = 1, p.top_k = 0, p.top_p = 1, p.min_p = 0, p.seed = 11;
    tkv_sampler *s = NULL;
    assert_int_equal(tkv_sampler_create(&p, 5, &s), TKV_OK);
    const float l[5] = {logf(0.1f), logf(0.3f), logf(0.4f), logf(0.1f), logf(0.1f)};
    int count[5] = {0};
    const int N = 40000;
    for (int i = 0; i < N; i++) {
        assert_int_equal(tkv_sampler_set_grammar(s, G), TKV_OK);
        const tkv_token t = tkv_sampler_sample(s, l);
        count[t]++;
        assert_int_equal(tkv_sampler_sample(s, l), 3); /* then only EOG */
    }
    /* a: 0.1 / 0.4 = 0.25, b: 0.75 (4 sigma) */
    assert_int_equal(count[2] + count[3] + count[4], 0);
    assert_true(fabs(count[0] - N * 0.25) < 4 * sqrt(N * 0.25 * 0.75));
    tkv_sampler_free(s);
    tkv_grammar_free(G);
}

/* code points of UTF-8 text (test inputs are valid UTF-8 when complete) */
static size_t decode(const char *s, size_t n, uint32_t *out) {
    size_t k = 0;
    for (size_t i = 0; i < n;) {
        const unsigned char c = (unsigned char)s[i];
        int len = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
        if (i + (size_t)len > n) break; /* an incomplete character at the end */
        uint32_t v = len == 1 ? c : c & (0x3F >> (len - 1));
        for (int j = 1; j < len; j++) v = v << 6 | ((unsigned char)s[i + j] & 63);
        out[k++] = v, i += (size_t)len;
    }
    return k;
}

static void generate(const char *grammar, float temperature, uint64_t seed, bool must_end) {
    tkv_grammar *G = NULL;
    assert_int_equal(tkv_grammar_create(tu_model, grammar, strlen(grammar), NULL, &G), TKV_OK);
    tkv__gbnf *g = NULL;
    assert_int_equal(tkv__gbnf_compile(grammar, strlen(grammar), NULL, &g), TKV_OK);
    tkv_context *ctx = NULL;
    assert_int_equal(tkv_context_create(tu_model, NULL, &ctx), TKV_OK);
    tkv_sampler_params p = tkv_sampler_default_params();
    p.temperature = temperature, p.seed = seed;
    tkv_sampler *s = NULL;
    assert_int_equal(tkv_sampler_create(&p, tu_n_vocab, &s), TKV_OK);
    tkv_token toks[200];
    size_t n = 0;
    toks[n++] = tkv_token_bos(tu_model);
    assert_int_equal(tkv_tokenize(tu_model, "Once upon a time", 16, 0, toks + 1, 20, &n), TKV_OK);
    n++;
    for (size_t i = 0; i < n; i++) tkv_sampler_accept(s, toks[i]);
    assert_int_equal(tkv_sampler_set_grammar(s, G), TKV_OK);
    char text[2048] = "";
    size_t tl = 0;
    uint32_t cps[2048];
    bool ended = false;
    while (n < 190) {
        size_t reused;
        assert_int_equal(tkv_seq_sync(ctx, 0, 0, toks, n, &reused), TKV_OK);
        const tkv_token t = tkv_sampler_sample(s, tkv_get_logits_last(ctx));
        size_t nc = decode(text, tl, cps);
        if (tkv_token_is_eog(tu_model, t)) {
            assert_int_equal(oracle(g, cps, nc, false), 1);
            ended = true;
            break;
        }
        size_t pn;
        assert_int_equal(tkv_token_to_piece(tu_model, t, 0, text + tl, sizeof text - tl, &pn), TKV_OK);
        assert_true(pn > 0);
        tl += pn;
        nc = decode(text, tl, cps);
        if (oracle(g, cps, nc, true) != 1) fail_msg("\"%s\" left the grammar %s", text, grammar);
        toks[n++] = t;
    }
    if (must_end) assert_true(ended);
    tkv_sampler_free(s);
    tkv_context_free(ctx);
    tkv__gbnf_free(g);
    tkv_grammar_free(G);
}

static void test_generation(void **state) {
    (void)state;
    const char *bounded[] = {
        "root ::= [a-z ]{1,30} \".\"",
        "root ::= (\"- \" [a-z ]{1,12} \"\\n\"){1,3}",
        "root ::= \"{\\\"name\\\": \\\"\" [A-Za-z ]{1,10} \"\\\", \\\"age\\\": \" [1-9] [0-9]? \"}\"",
        "root ::= (\"yes\" | \"no\" | \"maybe\") \".\"",
        "root ::= [ぁ-ゟ]{1,3} \"。\"", /* byte tokens, characters across tokens */
    };
    for (size_t i = 0; i < sizeof bounded / sizeof *bounded; i++)
        for (uint64_t seed = 1; seed <= 3; seed++) generate(bounded[i], seed == 3 ? 0.0f : 0.8f, seed, true);
    generate(JSON, 0.8f, 5, false);
    generate(ARITH, 1.0f, 6, false);
}

/* ---- limits: ambiguity and nesting stay bounded ------------------------------------ */

static void test_limits(void **state) {
    (void)state;
    tkv__gbnf *g = NULL;
    tkv__gmatch *m = NULL;
    bool ok = false;
    /* many parses of the same text collapse into few distinct stacks */
    const char *amb = "root ::= (\"a\" | \"aa\" | \"a\" \"a\"? | x)* \"b\"\nx ::= \"a\"+";
    assert_int_equal(tkv__gbnf_compile(amb, strlen(amb), NULL, &g), TKV_OK);
    assert_int_equal(tkv__gmatch_create(g, &m), TKV_OK);
    for (int i = 0; i < 5000; i++) {
        assert_int_equal(tkv__gmatch_feed(m, "a", 1, true, &ok), TKV_OK);
        assert_true(ok);
    }
    assert_int_equal(tkv__gmatch_feed(m, "b", 1, true, &ok), TKV_OK);
    assert_true(ok && tkv__gmatch_complete(m) && !tkv__gmatch_overflowed(m));
    tkv__gmatch_free(m);
    tkv__gbnf_free(g);
    /* nesting deeper than the stack limit: the text leaves the grammar, nothing crashes */
    const char *deep = "root ::= \"(\" root \")\" | \"x\"";
    assert_int_equal(tkv__gbnf_compile(deep, strlen(deep), NULL, &g), TKV_OK);
    assert_int_equal(tkv__gmatch_create(g, &m), TKV_OK);
    int i = 0;
    for (ok = true; ok && i < 3 * TKV__GMATCH_MAX_DEPTH; i++)
        assert_int_equal(tkv__gmatch_feed(m, "(", 1, true, &ok), TKV_OK);
    assert_false(ok);
    assert_true(i > TKV__GMATCH_MAX_DEPTH - 10);
    assert_true(tkv__gmatch_overflowed(m));
    tkv__gmatch_free(m);
    tkv__gbnf_free(g);
    /* nested optionals as a recursive rule's continuation: one expansion each, not one per path */
    char opt[400] = "root ::= \"x\" root \")\"";
    for (int k = 0; k < 100; k++) strcat(opt, "?");
    strcat(opt, " | \"y\"");
    assert_int_equal(tkv__gbnf_compile(opt, strlen(opt), NULL, &g), TKV_OK);
    assert_int_equal(tkv__gmatch_create(g, &m), TKV_OK);
    assert_int_equal(tkv__gmatch_feed(m, "xxxxxxxxxxy))", 13, true, &ok), TKV_OK);
    assert_true(ok && tkv__gmatch_complete(m) && !tkv__gmatch_overflowed(m));
    tkv__gmatch_free(m);
    tkv__gbnf_free(g);
    /* a long chain of rules, nullable one through the next: linear checks */
    enum { CHAIN = 20000 };
    char *chain = malloc(CHAIN * 32), *c = chain;
    c += sprintf(c, "root ::= r%d \"a\"\nr0 ::= \"\"\n", CHAIN);
    for (int k = 1; k <= CHAIN; k++) c += sprintf(c, "r%d ::= r%d\n", k, k - 1);
    assert_int_equal(tkv__gbnf_compile(chain, strlen(chain), NULL, &g), TKV_OK);
    assert_int_equal(tkv__gmatch_create(g, &m), TKV_OK);
    assert_int_equal(tkv__gmatch_feed(m, "a", 1, true, &ok), TKV_OK);
    assert_true(ok && tkv__gmatch_complete(m));
    tkv__gmatch_free(m);
    tkv__gbnf_free(g);
    memcpy(strstr(chain, "r0 ::= \"\""), "r0 ::= ro", 9); /* and now r0 starts with root */
    strcat(chain, "ro ::= root\n");
    assert_int_equal(tkv__gbnf_compile(chain, strlen(chain), NULL, &g), TKV_ERR_INVALID);
    assert_non_null(strstr(tkv_last_error(NULL), "left-recursive"));
    free(chain);
    /* a wide repetition is many rules, each step still cheap */
    const char *wide = "root ::= [a-z]{0,2000} \".\"";
    assert_int_equal(tkv__gbnf_compile(wide, strlen(wide), NULL, &g), TKV_OK);
    assert_int_equal(tkv__gmatch_create(g, &m), TKV_OK);
    for (i = 0; i < 2000; i++) assert_int_equal(tkv__gmatch_feed(m, "q", 1, true, &ok), TKV_OK), assert_true(ok);
    assert_int_equal(tkv__gmatch_feed(m, "q", 1, false, &ok), TKV_OK);
    assert_false(ok);
    assert_int_equal(tkv__gmatch_feed(m, ".", 1, true, &ok), TKV_OK);
    assert_true(ok && tkv__gmatch_complete(m));
    tkv__gmatch_free(m);
    tkv__gbnf_free(g);
}

/* Every alternative of the start rule matches: the matcher started from the rule's first element, so
   `root ::= "yes" | "no"` took "yes" only (found beside issue 38's ambiguity probe, which saw one stack where a
   start rule of 65 alternatives has 65). */
static void test_root_alternatives(void **state) {
    (void)state;
    static const struct {
        const char *gbnf, *text;
        bool whole; /* the text is a whole sentence */
    } cases[] = {
        {"root ::= \"yes\" | \"no\"", "no", true},
        {"root ::= \"yes\" | \"no\"", "yes", true},
        {"root ::= \"a\" | \"b\" [0-9]+ | \"\"", "b12", true},
        {"root ::= \"a\" | \"b\" [0-9]+ | \"\"", "", true},
        {"root ::= \"a\" | \"b\" [0-9]+ | \"\"", "b", false},
        {"root ::= x | y\nx ::= \"x\"\ny ::= \"y\" | \"z\"", "z", true},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        tkv__gbnf *g = NULL;
        tkv__gmatch *m = NULL;
        bool ok = false;
        assert_int_equal(tkv__gbnf_compile(cases[i].gbnf, strlen(cases[i].gbnf), NULL, &g), TKV_OK);
        assert_int_equal(tkv__gmatch_create(g, &m), TKV_OK);
        assert_int_equal(tkv__gmatch_feed(m, cases[i].text, strlen(cases[i].text), true, &ok), TKV_OK);
        if (!ok || tkv__gmatch_complete(m) != cases[i].whole)
            fail_msg("%s on '%s': ok %d complete %d", cases[i].gbnf, cases[i].text, ok, tkv__gmatch_complete(m));
        tkv__gmatch_free(m);
        tkv__gbnf_free(g);
    }
}

/* Issue 38, finding 4: a grammar whose parses multiply cost tens of milliseconds a token on a 32k vocabulary;
   tkv_grammar_create refuses one whose state reaches more than TKV__GRAMMAR_MAX_PARSES stacks within
   TKV__GRAMMAR_PROBE_DEPTH characters, saying after which text, and takes every ordinary one. */
static tkv_status create(const vocab *v, const char *gr) {
    tkv_grammar *G = NULL;
    const tkv_status st = tkv__grammar_create_vocab(gr, strlen(gr), NULL, v->n, (const char *const *)v->piece, v->len,
                                                    v->eog, &G);
    tkv_grammar_free(G);
    return st;
}

static void expect_ambiguous(const vocab *v, const char *gr, const char *says) {
    assert_int_equal(create(v, gr), TKV_ERR_INVALID);
    const char *msg = tkv_last_error(NULL);
    if (!strstr(msg, "too ambiguous") || !strstr(msg, "over the limit of 64") || !strstr(msg, says))
        fail_msg("%s: '%s' does not say '%s'", gr, msg, says);
}

static void test_ambiguity_refused(void **state) {
    (void)state;
    vocab v;
    make_vocab(&v);
    /* the grammar: its nullable repetitions give hundreds of stacks before any text */
    expect_ambiguous(&v, "root ::= (([a-z ]{0,50}){0,50}){0,40}", "after the 0 characters '' it holds 512 or more");
    /* without the empty ones, a run of letters splits many ways: found on the way */
    expect_ambiguous(&v, "root ::= (([a-z ]{1,50}){1,50}){1,40}", "partial parses at once");
    /* behind a fixed prefix: the probe reads through it */
    expect_ambiguous(&v, "root ::= \"0123456789\" (([a-z]{1,50}){1,50}){1,40}", "characters '0123456789a");
    /* exactly k stacks at the start (k alternatives, each its own position): 64 is taken, 65 refused */
    for (int k = 64; k <= 65; k++) {
        char gr[4096], *c = gr;
        c += sprintf(c, "root ::= r0");
        for (int i = 1; i < k; i++) c += sprintf(c, " | r%d", i);
        c += sprintf(c, "\n");
        for (int i = 0; i < k; i++) c += sprintf(c, "r%d ::= \"a\" \"%c\"\n", i, 'A' + i % 26);
        if (k == 64) assert_int_equal(create(&v, gr), TKV_OK);
        else expect_ambiguous(&v, gr, "after the 0 characters '' it holds 65 partial parses");
    }
    /* ordinary grammars: JSON, a wide repetition, the test grammars */
    assert_int_equal(create(&v, JSON), TKV_OK);
    assert_int_equal(create(&v, "root ::= [a-z ]{0,2000}"), TKV_OK);
    assert_int_equal(create(&v, "root ::= ([a-z]+ \" \"){0,50}"), TKV_OK);
    free_vocab(&v);
}

/* ---- allocation failures ---------------------------------------------------------- */

static void alloc_run(const vocab *v) {
    tkv_grammar *G = NULL;
    if (tkv__grammar_create_vocab(JSON, strlen(JSON), NULL, v->n, (const char *const *)v->piece, v->len, v->eog, &G))
        return;
    tkv_sampler *s = NULL;
    if (!tkv_sampler_create(NULL, v->n, &s)) {
        if (!tkv_sampler_set_grammar(s, G)) {
            float l[600];
            for (int i = 0; i < 30; i++) {
                for (size_t t = 0; t < v->n; t++) l[t] = (float)rnd(1000) / 100;
                tkv_sampler_sample(s, l);
            }
        }
        tkv_sampler_free(s);
    }
    tkv_grammar_free(G);
}

static void test_alloc_failures(void **state) {
    (void)state;
    vocab v;
    make_vocab(&v);
    for (long n = 0;; n++) {
        tkv__alloc_fail_after(n);
        rng_state = 99;
        alloc_run(&v);
        if (tkv__alloc_fail_after(-1) <= n) break; /* nothing failed: all paths tried */
    }
    /* the public constructor, over the model's pieces */
    for (long n = 0;; n++) {
        tkv_grammar *G = NULL;
        tkv__alloc_fail_after(n);
        tkv_status st = tkv_grammar_create(tu_model, ARITH, strlen(ARITH), NULL, &G);
        long used = tkv__alloc_fail_after(-1);
        assert_true(st == TKV_OK || st == TKV_ERR_NOMEM);
        assert_true((st == TKV_OK) == (G != NULL));
        tkv_grammar_free(G);
        if (used <= n) break;
    }
    /* and a grammar compile alone */
    for (long n = 0;; n++) {
        tkv__gbnf *g = NULL;
        tkv__alloc_fail_after(n);
        tkv_status st = tkv__gbnf_compile(CHESS, strlen(CHESS), NULL, &g);
        long used = tkv__alloc_fail_after(-1);
        assert_true(st == TKV_OK || st == TKV_ERR_NOMEM);
        tkv__gbnf_free(g);
        if (used <= n) break;
    }
    free_vocab(&v);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_accepts),
        cmocka_unit_test(test_parse_rejects),
        cmocka_unit_test(test_matcher_oracle),
        cmocka_unit_test(test_trie_equals_brute_force),
        cmocka_unit_test(test_control_tokens_and_eog),
        cmocka_unit_test(test_masked_distribution),
        cmocka_unit_test(test_generation),
        cmocka_unit_test(test_limits),
        cmocka_unit_test(test_root_alternatives),
        cmocka_unit_test(test_ambiguity_refused),
        cmocka_unit_test(test_alloc_failures),
    };
    return cmocka_run_group_tests(tests, tu_stories_setup, tu_stories_teardown);
}
