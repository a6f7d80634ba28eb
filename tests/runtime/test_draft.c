/*
 * test_draft.c — drafts from the cache (tkv_seq_draft) and their
 * verification (tkv_seq_decode_draft), against independent expectations:
 *  - the tree's draft after a prompt is exactly what an earlier greedy run
 *    of that prompt generated (recorded one token at a time);
 *  - the n-gram draft equals a brute-force search written here from the
 *    header's rule, on random token lists with many repeats;
 *  - generation with drafts gives the tokens of generation without them,
 *    greedy and seeded sampling (with a repeat penalty), when the drafts
 *    are right (a retry) and when most are wrong (another seed), on a
 *    llama and on a delta-net hybrid; the sequence then holds exactly what
 *    one-at-a-time decoding leaves, and tkv_cache_check holds;
 *  - bad arguments and a full cache change nothing.
 */
#include "testutil.h"

#include <string.h>

#define N_GEN 40

static tkv_sampler *sampler_for(const tkv_model *m, float temp, uint64_t seed, float penalty) {
    tkv_sampler_params sp = tkv_sampler_default_params();
    sp.temperature = temp;
    sp.top_k = 40;
    sp.seed = seed;
    sp.repeat_penalty = penalty;
    tkv_sampler *s = NULL;
    assert_int_equal(tkv_sampler_create(&sp, tkv_vocab_size(m), &s), TKV_OK);
    return s;
}

static tkv_sampler *sampler(float temp, uint64_t seed, float penalty) { return sampler_for(tu_model, temp, seed, penalty); }

static size_t prompt(const tkv_model *m, const char *text, tkv_token *t, size_t cap) {
    size_t n = 0;
    assert_int_equal(tkv_tokenize(m, text, strlen(text), TKV_TOKENIZE_ADD_SPECIAL, t, cap, &n), TKV_OK);
    return n;
}


/* The same with drafts of up to `cap` tokens from `sources`; *offered counts the drafts decoded, *accepted
   those taken. */
static size_t generate_drafted(tkv_context *ctx, tkv_seq s, const tkv_token *p, size_t n_p, tkv_sampler *smp,
                               tkv_token *gen, size_t n_gen, size_t cap, unsigned sources, size_t *offered,
                               size_t *accepted) {
    const tkv_model *m = tkv_context_model(ctx);
    assert_int_equal(tkv_seq_sync(ctx, s, 0, p, n_p, NULL), TKV_OK);
    size_t n = 0;
    *accepted = *offered = 0;
    tkv_token t = tkv_sampler_sample(smp, tkv_get_logits_last(ctx));
    while (!tkv_token_is_eog(m, t)) {
        gen[n++] = t;
        if (n == n_gen) break;
        tkv_token draft[16], out[17];
        size_t n_draft = 0, n_out = 0;
        assert_int_equal(tkv_seq_draft(ctx, s, &t, 1, draft, cap, &n_draft, sources), TKV_OK);
        const size_t max_out = n_gen - n; /* what may still be added, the next pending token included */
        if (tkv_seq_decode_draft(ctx, s, t, draft, n_draft, smp, max_out, out, &n_out) != TKV_OK)
            fail_msg("tkv_seq_decode_draft: %s", tkv_context_error(ctx));
        assert_true(n_out >= 1 && n_out <= n_draft + 1 && n_out <= max_out);
        *offered += n_draft < max_out - 1 ? n_draft : max_out - 1;
        for (size_t i = 0; i + 1 < n_out; i++) assert_int_equal(out[i], draft[i]); /* accepted = drafted */
        *accepted += n_out - 1;
        for (size_t i = 0; i + 1 < n_out; i++) {
            if (tkv_token_is_eog(m, out[i])) fail_msg("an end of generation was accepted as a draft");
            gen[n++] = out[i];
        }
        t = out[n_out - 1];
        if (n == n_gen) break;
    }
    return n;
}

/* What the sequence holds after generating gen[0..n) after p: p and every generated token but the last. */
static void assert_seq_holds(tkv_context *ctx, tkv_seq s, const tkv_token *p, size_t n_p, const tkv_token *gen,
                             size_t n) {
    tkv_token held[512];
    size_t len = 0;
    assert_int_equal(tkv_seq_tokens(ctx, s, held, 512, &len), TKV_OK);
    assert_int_equal(len, n_p + (n ? n - 1 : 0));
    assert_memory_equal(held, p, n_p * sizeof *p);
    if (n > 1) assert_memory_equal(held + n_p, gen, (n - 1) * sizeof *gen);
    assert_int_equal(tkv_cache_check(ctx), TKV_OK);
}

static void test_tree_draft_is_the_earlier_answer(void **state) {
    (void)state;
    tkv_context *ctx = tu_context(tu_model, 512, 2, TKV_TYPE_F16);
    tkv_token p[64], gen[N_GEN], d[64];
    const size_t n_p = prompt(tu_model, "Once upon a time, a little girl", p, 64);
    tkv_sampler *smp = sampler(0, 0, 1);
    const size_t n = tu_generate(ctx, 0, p, n_p, smp, gen, N_GEN);
    assert_true(n > 20);
    /* another sequence on the same prompt: the tree holds gen[0..n-1) after it */
    assert_int_equal(tkv_seq_sync(ctx, 1, 0, p, n_p, NULL), TKV_OK);
    size_t nd = 0;
    assert_int_equal(tkv_seq_draft(ctx, 1, gen, 1, d, 64, &nd, TKV_DRAFT_CACHE), TKV_OK);
    assert_int_equal(nd, n - 2); /* gen[1 .. n-1): the last generated token was never decoded */
    assert_memory_equal(d, gen + 1, nd * sizeof *d);
    assert_int_equal(tkv_seq_draft(ctx, 1, gen, 1, d, 5, &nd, TKV_DRAFT_CACHE), TKV_OK);
    assert_int_equal(nd, 5);
    assert_memory_equal(d, gen + 1, 5 * sizeof *d);
    /* two pending tokens; and none (the draft then starts at gen[0]) */
    assert_int_equal(tkv_seq_draft(ctx, 1, gen, 2, d, 64, &nd, TKV_DRAFT_CACHE), TKV_OK);
    assert_int_equal(nd, n - 3);
    assert_memory_equal(d, gen + 2, nd * sizeof *d);
    assert_int_equal(tkv_seq_draft(ctx, 1, NULL, 0, d, 64, &nd, TKV_DRAFT_CACHE), TKV_OK);
    assert_int_equal(nd, n - 1);
    assert_memory_equal(d, gen, nd * sizeof *d);
    /* released, the answer stays cached and still drafts; a pending token the tree lacks gives no tree draft */
    assert_int_equal(tkv_seq_clear(ctx, 0), TKV_OK);
    assert_int_equal(tkv_seq_draft(ctx, 1, gen, 1, d, 64, &nd, TKV_DRAFT_CACHE), TKV_OK);
    assert_int_equal(nd, n - 2);
    tkv_token other = (gen[0] + 1) % (tkv_token)tu_n_vocab;
    assert_int_equal(tkv_seq_draft(ctx, 1, &other, 1, d, 64, &nd, TKV_DRAFT_CACHE), TKV_OK);
    assert_int_equal(nd, 0);
    /* drafting changes nothing */
    assert_int_equal(tkv_seq_len(ctx, 1), (tkv_pos)n_p);
    assert_int_equal(tkv_cache_check(ctx), TKV_OK);
    tkv_sampler_free(smp);
    tkv_context_free(ctx);
}

/* The header's rule, by brute force over one array: the last g tokens (g = 4, 3, 2) at their most recent
   earlier start j, and what follows them, up to cap. */
static size_t ngram_oracle(const tkv_token *text, size_t T, tkv_token *out, size_t cap) {
    for (size_t g = 4; g >= 2; g--) {
        if (T <= g) continue;
        size_t best = SIZE_MAX;
        for (size_t j = 0; j + g < T; j++)
            if (!memcmp(text + j, text + T - g, g * sizeof *text)) best = j;
        if (best == SIZE_MAX) continue;
        size_t n = T - (best + g) < cap ? T - (best + g) : cap;
        memcpy(out, text + best + g, n * sizeof *out);
        return n;
    }
    return 0;
}

static void test_ngram_draft_matches_brute_force(void **state) {
    (void)state;
    tkv_context *ctx = tu_context(tu_model, 512, 1, TKV_TYPE_F16);
    for (int round = 0; round < 40; round++) {
        tkv_token text[80], d[16], want[16];
        const size_t L = 1 + tu_rand(50), P = tu_rand(3), alphabet = 2 + tu_rand(6);
        text[0] = 1; /* BOS */
        for (size_t i = 1; i < L + P; i++) text[i] = (tkv_token)(10 + tu_rand((unsigned)alphabet));
        assert_int_equal(tkv_seq_sync(ctx, 0, 0, text, L, NULL), TKV_OK);
        const size_t cap = 1 + tu_rand(12);
        size_t nd = 99;
        assert_int_equal(tkv_seq_draft(ctx, 0, text + L, P, d, cap, &nd, TKV_DRAFT_NGRAM), TKV_OK);
        const size_t nw = ngram_oracle(text, L + P, want, cap);
        assert_int_equal(nd, nw);
        assert_memory_equal(d, want, nw * sizeof *d);
        assert_int_equal(tkv_seq_clear(ctx, 0), TKV_OK);
        assert_int_equal(tkv_cache_clear(ctx), TKV_OK); /* the tree must not answer: fresh every round */
    }
    tkv_context_free(ctx);
}

/* With and without drafts, the same tokens: greedy and two seeded samplers; drafts right (the tree holds the
   same run's answer) and mostly wrong (the tree holds another seed's). */
static void lossless_on(const tkv_model *m, const char *text, size_t n_gen) {
    static const struct {
        float temp, penalty;
        uint64_t seed;
    } cfg[] = {{0, 1, 0}, {0.8f, 1, 7}, {1.0f, 1.3f, 3}};
    tkv_token p[64], base[64], other[64], got[64];
    const size_t n_p = prompt(m, text, p, 64);
    for (size_t c = 0; c < sizeof cfg / sizeof *cfg; c++) {
        tkv_context *a = tu_context(m, 512, 2, TKV_TYPE_F16);
        tkv_sampler *s0 = sampler_for(m, cfg[c].temp, cfg[c].seed, cfg[c].penalty);
        const size_t nb = tu_generate(a, 0, p, n_p, s0, base, n_gen);
        tkv_sampler_free(s0);
        tkv_context_free(a);

        /* a retry: the tree holds this very answer */
        tkv_context *b = tu_context(m, 512, 2, TKV_TYPE_F16);
        tkv_sampler *s1 = sampler_for(m, cfg[c].temp, cfg[c].seed, cfg[c].penalty);
        assert_int_equal(tu_generate(b, 0, p, n_p, s1, other, n_gen), nb);
        tkv_sampler_free(s1);
        assert_int_equal(tkv_seq_clear(b, 0), TKV_OK);
        tkv_sampler *s2 = sampler_for(m, cfg[c].temp, cfg[c].seed, cfg[c].penalty);
        size_t offered = 0, accepted = 0;
        const size_t ng = generate_drafted(b, 1, p, n_p, s2, got, n_gen, 8, 0, &offered, &accepted);
        assert_int_equal(ng, nb);
        assert_memory_equal(got, base, nb * sizeof *got);
        assert_seq_holds(b, 1, p, n_p, got, ng);
        assert_int_equal(accepted, offered); /* every draft was the answer's next token */
        assert_true(accepted * 2 >= nb);     /* and most tokens came from drafts */
        tkv_sampler_free(s2);
        tkv_context_free(b);

        /* the tree holds another seed's answer: drafts mostly wrong, the output the same */
        tkv_context *d = tu_context(m, 512, 2, TKV_TYPE_F16);
        tkv_sampler *s3 = sampler_for(m, cfg[c].temp > 0 ? cfg[c].temp : 0.9f, cfg[c].seed + 100, cfg[c].penalty);
        (void)tu_generate(d, 0, p, n_p, s3, other, n_gen);
        tkv_sampler_free(s3);
        tkv_sampler *s4 = sampler_for(m, cfg[c].temp, cfg[c].seed, cfg[c].penalty);
        const size_t nh = generate_drafted(d, 1, p, n_p, s4, got, n_gen, 8, 0, &offered, &accepted);
        assert_int_equal(nh, nb);
        assert_memory_equal(got, base, nb * sizeof *got);
        assert_seq_holds(d, 1, p, n_p, got, nh);
        tkv_sampler_free(s4);
        tkv_context_free(d);
    }
}

static void test_lossless_llama(void **state) {
    (void)state;
    lossless_on(tu_model, "Once upon a time, there was a dog. The dog", N_GEN);
}

static void test_lossless_hybrid(void **state) {
    (void)state;
    tkv_model *m = NULL;
    assert_int_equal(tkv_model_load(tu_shared("models/arch/qwen35.gguf"), NULL, &m), TKV_OK);
    lossless_on(m, "Once upon a time, there was a dog.", 24);
    tkv_model_free(m);
}

static void test_bad_arguments_change_nothing(void **state) {
    (void)state;
    tkv_context *ctx = tu_context(tu_model, 20, 1, TKV_TYPE_F16);
    tkv_token p[64], out[20], d[20];
    const size_t n_p = prompt(tu_model, "Once upon a time, a little girl", p, 64);
    assert_int_equal(tkv_seq_sync(ctx, 0, 0, p, n_p, NULL), TKV_OK);
    tkv_sampler *smp = sampler(0, 0, 1);
    size_t n = 0;
    for (size_t i = 0; i < 20; i++) d[i] = 5;
    assert_int_equal(tkv_seq_decode_draft(ctx, 0, 5, d, 3, NULL, 4, out, &n), TKV_ERR_INVALID);
    assert_int_equal(tkv_seq_decode_draft(ctx, 0, 5, d, 3, smp, 0, out, &n), TKV_ERR_INVALID);
    assert_non_null(strstr(tkv_context_error(ctx), "max_out"));
    assert_int_equal(tkv_seq_decode_draft(ctx, 0, 5, d, 16, smp, 20, out, &n), TKV_ERR_INVALID); /* n_batch 16 */
    assert_non_null(strstr(tkv_context_error(ctx), "n_batch"));
    assert_int_equal(tkv_seq_decode_draft(ctx, 3, 5, d, 3, smp, 4, out, &n), TKV_ERR_INVALID);
    d[1] = (tkv_token)tu_n_vocab; /* out of range */
    assert_int_equal(tkv_seq_decode_draft(ctx, 0, 5, d, 3, smp, 4, out, &n), TKV_ERR_INVALID);
    d[1] = 5;
    assert_int_equal(tkv_seq_draft(ctx, 0, NULL, 1, d, 4, &n, 0), TKV_ERR_INVALID);
    assert_int_equal(tkv_seq_draft(ctx, 0, NULL, 0, d, 4, &n, 4), TKV_ERR_INVALID);
    assert_non_null(strstr(tkv_context_error(ctx), "source"));
    /* 20 cells, the prompt's held: a pending token and 12 drafts do not fit */
    assert_true(n_p + 13 > 20 && n_p + 1 <= 20);
    assert_int_equal(tkv_seq_decode_draft(ctx, 0, 5, d, 12, smp, 13, out, &n), TKV_ERR_FULL);
    assert_int_equal(tkv_seq_len(ctx, 0), (tkv_pos)n_p);
    assert_int_equal(tkv_cache_check(ctx), TKV_OK);
    /* a failed decode drops the logits: the prompt's again (reused, its last token recomputed) */
    assert_int_equal(tkv_seq_sync(ctx, 0, 0, p, n_p, NULL), TKV_OK);
    const tkv_token t = tkv_sampler_sample(smp, tkv_get_logits_last(ctx));
    assert_true(t >= 0);
    assert_int_equal(tkv_seq_decode_draft(ctx, 0, t, NULL, 0, smp, 1, out, &n), TKV_OK);
    assert_int_equal(n, 1);
    assert_int_equal(tkv_seq_len(ctx, 0), (tkv_pos)n_p + 1);
    tkv_sampler_free(smp);
    tkv_context_free(ctx);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tree_draft_is_the_earlier_answer),
        cmocka_unit_test(test_ngram_draft_matches_brute_force),
        cmocka_unit_test(test_lossless_llama),
        cmocka_unit_test(test_lossless_hybrid),
        cmocka_unit_test(test_bad_arguments_change_nothing),
    };
    return TU_RESULT(cmocka_run_group_tests(tests, tu_stories_setup, tu_stories_teardown));
}
