/*
 * test_known.c — known tokens (tkv_seq_follow_known): the tokens argmax
 * decoding chose after a prefix before, taken from the cache without
 * computing them, against independent expectations:
 *  - what another sequence takes after the same prompt is exactly what an
 *    earlier greedy run generated one step at a time, and each token is the
 *    argmax (written here, lowest id on ties) of the logits a second context
 *    computes for its prefix from the start, on a llama and on a delta-net
 *    hybrid (which goes on from its saved state);
 *  - the sequence then holds what decoding would leave, and decoding on from
 *    it gives the earlier run's next tokens;
 *  - nothing is known to a sampler that is not an argmax (seeded, a logit
 *    bias, a repetition or presence penalty), after a seeded run, in a
 *    context that is not batch_invariant, or once the cells are evicted and
 *    reused;
 *  - a row's choice is recorded only for the sequence the row was computed
 *    for, and tokens decoded without sampling their rows record nothing;
 *  - bad arguments are refused and change nothing.
 */
#include "testutil.h"

#include <string.h>

#define N_GEN 40

static tkv_sampler *sampler(const tkv_model *m, const tkv_sampler_params *sp) {
    tkv_sampler *s = NULL;
    assert_int_equal(tkv_sampler_create(sp, tkv_vocab_size(m), &s), TKV_OK);
    return s;
}

static tkv_sampler *greedy(const tkv_model *m) {
    tkv_sampler_params sp = tkv_sampler_default_params();
    sp.temperature = 0;
    return sampler(m, &sp);
}

static size_t prompt(const tkv_model *m, const char *text, tkv_token *t, size_t cap) {
    size_t n = 0;
    assert_int_equal(tkv_tokenize(m, text, strlen(text), TKV_TOKENIZE_ADD_SPECIAL, t, cap, &n), TKV_OK);
    return n;
}

/* Generate up to n_gen tokens after p on sequence s with tkv_seq_decode_draft and drafts of up to 4 tokens (the
   n-gram source: some accepted, some not), as a server does: the tokens it chooses are recorded as known when smp is
   an argmax. The first token comes from tkv_seq_sync's logits (no record). Returns how many. */
static size_t generate(tkv_context *ctx, tkv_seq s, const tkv_token *p, size_t n_p, tkv_sampler *smp, tkv_token *gen,
                       size_t n_gen) {
    const tkv_model *m = tkv_context_model(ctx);
    assert_int_equal(tkv_seq_sync(ctx, s, 0, p, n_p, NULL), TKV_OK);
    size_t n = 0;
    tkv_token t = tkv_sampler_sample(smp, tkv_get_logits_last(ctx));
    while (!tkv_token_is_eog(m, t)) {
        gen[n++] = t;
        if (n == n_gen) break;
        tkv_token draft[4], out[5];
        size_t n_draft = 0, n_out = 0;
        assert_int_equal(tkv_seq_draft(ctx, s, &t, 1, draft, 4, &n_draft, TKV_DRAFT_NGRAM), TKV_OK);
        if (tkv_seq_decode_draft(ctx, s, t, draft, n_draft, smp, n_gen - n, out, &n_out) != TKV_OK)
            fail_msg("tkv_seq_decode_draft: %s", tkv_context_error(ctx));
        for (size_t i = 0; i + 1 < n_out && n < n_gen; i++) gen[n++] = out[i];
        t = out[n_out - 1];
        if (n == n_gen) break;
    }
    return n;
}

/* The argmax of a logits row, lowest id on ties: the oracle, written from the header's words. */
static tkv_token argmax(const float *l, size_t n) {
    size_t best = 0;
    for (size_t i = 1; i < n; i++)
        if (l[i] > l[best]) best = i;
    return (tkv_token)best;
}

/* The oracle for a run: each gen[i] (i >= 1) is the argmax of the logits a second context of m computes for p and
   gen[0 .. i) from the start (its cache cleared each time: nothing reused). */
static void assert_argmaxes(const tkv_model *m, const tkv_token *p, size_t n_p, const tkv_token *gen, size_t n) {
    tkv_context *fresh = tu_context(m, 512, 1, TKV_TYPE_F16);
    tkv_token list[128];
    assert_true(n_p + n <= 128);
    memcpy(list, p, n_p * sizeof *p);
    memcpy(list + n_p, gen, n * sizeof *gen);
    for (size_t i = 1; i < n; i++) {
        assert_int_equal(tkv_seq_clear(fresh, 0), TKV_OK);
        assert_int_equal(tkv_cache_clear(fresh), TKV_OK);
        assert_int_equal(tkv_seq_sync(fresh, 0, 0, list, n_p + i, NULL), TKV_OK);
        assert_int_equal(argmax(tkv_get_logits_last(fresh), tkv_vocab_size(m)), gen[i]);
    }
    tkv_context_free(fresh);
}

/* How many known tokens follow p and pending for smp, on sequence s synced to p; the sequence is cleared after. */
static size_t known_after(tkv_context *ctx, tkv_seq s, const tkv_token *p, size_t n_p, tkv_token pending,
                          tkv_sampler *smp) {
    assert_int_equal(tkv_seq_sync(ctx, s, 0, p, n_p, NULL), TKV_OK);
    tkv_token out[64];
    size_t n = 99;
    assert_int_equal(tkv_seq_follow_known(ctx, s, pending, smp, 64, out, &n), TKV_OK);
    if (!n) assert_int_equal(tkv_seq_len(ctx, s), (tkv_pos)n_p); /* nothing known: nothing taken */
    assert_int_equal(tkv_seq_clear(ctx, s), TKV_OK);
    return n;
}

static void test_known_tokens_are_the_argmax(void **state) {
    (void)state;
    tkv_context *ctx = tu_context(tu_model, 512, 2, TKV_TYPE_F16);
    tkv_token p[64], gen[N_GEN], out[64];
    const size_t n_p = prompt(tu_model, "Once upon a time, a little girl", p, 64);
    tkv_sampler *smp = greedy(tu_model);
    const size_t n = generate(ctx, 0, p, n_p, smp, gen, N_GEN);
    assert_true(n > 20);
    /* the run decoded gen[0 .. D), each row sampled (the last token it sampled may be pending) */
    const size_t D = (size_t)tkv_seq_len(ctx, 0) - n_p;
    assert_true(D + 1 >= n && D <= n);
    /* another sequence after the same prompt: after gen[0] (sampled from the prompt's logits, which nothing
       recorded) the D tokens chosen after gen[0 .. D) are known */
    tkv_sampler *smp1 = greedy(tu_model);
    assert_int_equal(tkv_seq_sync(ctx, 1, 0, p, n_p, NULL), TKV_OK);
    size_t k = 0;
    assert_int_equal(tkv_seq_follow_known(ctx, 1, gen[0], smp1, 64, out, &k), TKV_OK);
    assert_int_equal(k, D);
    assert_memory_equal(out, gen + 1, (k < n - 1 ? k : n - 1) * sizeof *out);
    /* the sequence holds the prompt, gen[0] and the known tokens but the last, the next pending one */
    tkv_token held[128];
    size_t len = 0;
    assert_int_equal(tkv_seq_tokens(ctx, 1, held, 128, &len), TKV_OK);
    assert_int_equal(len, n_p + k);
    assert_memory_equal(held, p, n_p * sizeof *p);
    assert_memory_equal(held + n_p, gen, k * sizeof *gen);
    assert_int_equal(tkv_cache_check(ctx), TKV_OK);
    /* decoding on gives the earlier run's next token */
    tkv_token next[1];
    size_t n_next = 0;
    assert_int_equal(tkv_seq_decode_draft(ctx, 1, out[k - 1], NULL, 0, smp1, 1, next, &n_next), TKV_OK);
    assert_int_equal(n_next, 1);
    if (k + 1 < n) assert_int_equal(next[0], gen[k + 1]);
    /* a smaller max_out takes that many */
    assert_int_equal(tkv_seq_sync(ctx, 1, 0, p, n_p, NULL), TKV_OK);
    assert_int_equal(tkv_seq_follow_known(ctx, 1, gen[0], smp1, 3, out, &k), TKV_OK);
    assert_int_equal(k, 3);
    assert_memory_equal(out, gen + 1, 3 * sizeof *out);
    assert_int_equal(tkv_seq_len(ctx, 1), (tkv_pos)(n_p + 3));

    /* each known token is the argmax of its prefix's logits, computed from the start in another context */
    assert_argmaxes(tu_model, p, n_p, gen, n);
    tkv_sampler_free(smp);
    tkv_sampler_free(smp1);
    tkv_context_free(ctx);
}

static void test_nothing_known_to_other_samplers(void **state) {
    (void)state;
    tkv_context *ctx = tu_context(tu_model, 512, 2, TKV_TYPE_F16);
    tkv_token p[64], gen[N_GEN];
    const size_t n_p = prompt(tu_model, "Tom and his dog went to the park. Tom", p, 64);
    tkv_sampler *smp = greedy(tu_model);
    const size_t n = generate(ctx, 0, p, n_p, smp, gen, N_GEN);
    assert_true(n > 10);
    assert_true(known_after(ctx, 1, p, n_p, gen[0], smp) > 0);
    tkv_sampler_params sp[4];
    for (int i = 0; i < 4; i++) sp[i] = tkv_sampler_default_params(), sp[i].temperature = 0;
    sp[0].temperature = 0.8f, sp[0].seed = 3;            /* a draw */
    const tkv_logit_bias bias = {gen[1], 0.5f};
    sp[1].logit_bias = &bias, sp[1].n_logit_bias = 1;    /* a bias could change the argmax */
    sp[2].repeat_penalty = 1.3f;                         /* so could a penalty */
    sp[3].presence_penalty = 0.5f;
    for (int i = 0; i < 4; i++) {
        tkv_sampler *other = sampler(tu_model, &sp[i]);
        assert_int_equal(known_after(ctx, 1, p, n_p, gen[0], other), 0);
        tkv_sampler_free(other);
    }
    /* a seeded run records nothing: a greedy sampler finds nothing known on its path */
    tkv_token q[64], sgen[N_GEN];
    const size_t n_q = prompt(tu_model, "The sun was hot and the little bird", q, 64);
    tkv_sampler *seeded = sampler(tu_model, &sp[0]);
    assert_true(generate(ctx, 0, q, n_q, seeded, sgen, N_GEN) > 10);
    assert_int_equal(known_after(ctx, 1, q, n_q, sgen[0], smp), 0);
    assert_int_equal(tkv_cache_check(ctx), TKV_OK);
    /* the cells freed by a clear lose their record: a seeded run that reuses them finds nothing known either */
    assert_int_equal(tkv_seq_clear(ctx, 0), TKV_OK);
    assert_int_equal(tkv_cache_clear(ctx), TKV_OK);
    assert_int_equal(known_after(ctx, 1, p, n_p, gen[0], smp), 0);
    tkv_sampler_free(seeded);
    seeded = sampler(tu_model, &sp[0]);
    assert_true(generate(ctx, 0, p, n_p, seeded, sgen, N_GEN) > 10);
    assert_int_equal(known_after(ctx, 1, p, n_p, sgen[0], smp), 0);
    assert_int_equal(tkv_cache_check(ctx), TKV_OK);
    tkv_sampler_free(seeded);
    tkv_sampler_free(smp);
    tkv_context_free(ctx);
}

static void test_nothing_known_without_invariance(void **state) {
    (void)state;
    tkv_context_params cp = tkv_context_default_params();
    cp.n_cells = 512, cp.n_seq_max = 2, cp.n_threads = 2, cp.n_batch = 16, cp.batch_invariant = false;
    tkv_context *ctx = NULL;
    assert_int_equal(tkv_context_create(tu_model, &cp, &ctx), TKV_OK);
    tkv_token p[64], gen[N_GEN];
    const size_t n_p = prompt(tu_model, "Once upon a time, a little girl", p, 64);
    tkv_sampler *smp = greedy(tu_model);
    assert_true(generate(ctx, 0, p, n_p, smp, gen, N_GEN) > 10);
    assert_int_equal(known_after(ctx, 1, p, n_p, gen[0], smp), 0);
    tkv_sampler_free(smp);
    tkv_context_free(ctx);
}

/* A choice is recorded in the cell whose logits made it: tokens decoded by tkv_decode, whose rows nobody sampled
   through the draft calls, record nothing, even where a token after them was chosen for another prefix (t1, chosen
   after t0, decoded after x, whose own argmax is not t1). */
static void test_unsampled_rows_record_nothing(void **state) {
    (void)state;
    tkv_context *ctx = tu_context(tu_model, 512, 2, TKV_TYPE_F16);
    tkv_token p[64];
    const size_t n_p = prompt(tu_model, "Lily said: \"I like the red ball.\" Tom said: \"I like the", p, 64);
    tkv_sampler *smp = greedy(tu_model);
    assert_int_equal(tkv_seq_sync(ctx, 0, 0, p, n_p, NULL), TKV_OK);
    const tkv_token t0 = tkv_sampler_sample(smp, tkv_get_logits_last(ctx));
    tkv_token t1;
    size_t n_out = 0;
    assert_int_equal(tkv_seq_decode_draft(ctx, 0, t0, NULL, 0, smp, 1, &t1, &n_out), TKV_OK); /* t1 for n_p + 1 */
    /* t0 replaced by x, whose own argmax is not t1 (the oracle: a second context) */
    tkv_context *fresh = tu_context(tu_model, 512, 1, TKV_TYPE_F16);
    tkv_token list[66];
    memcpy(list, p, n_p * sizeof *p);
    tkv_token x = -1;
    for (tkv_token c = 1; c < (tkv_token)tu_n_vocab && x < 0; c++) {
        if (c == t0) continue;
        list[n_p] = c;
        assert_int_equal(tkv_seq_sync(fresh, 0, 0, list, n_p + 1, NULL), TKV_OK);
        if (argmax(tkv_get_logits_last(fresh), tu_n_vocab) != t1) x = c;
    }
    assert_true(x >= 0);
    tkv_context_free(fresh);
    assert_int_equal(tkv_seq_truncate(ctx, 0, (tkv_pos)n_p), TKV_OK);
    const tkv_pos at[2] = {(tkv_pos)n_p, (tkv_pos)n_p + 1};
    const tkv_token tok[2] = {x, t1};
    const tkv_seq sq[2] = {0, 0};
    const tkv_batch b = {2, (tkv_token *)tok, (tkv_pos *)at, (tkv_seq *)sq, NULL};
    assert_int_equal(tkv_decode(ctx, &b), TKV_OK); /* t1 lands at n_p + 1, after x */
    assert_int_equal(known_after(ctx, 1, p, n_p, x, smp), 0);
    /* t0's row, sampled: t1 after t0; then t1's: t2 after t1 */
    assert_int_equal(tkv_seq_truncate(ctx, 0, (tkv_pos)n_p), TKV_OK);
    assert_int_equal(tkv_seq_decode_draft(ctx, 0, t0, NULL, 0, smp, 1, &t1, &n_out), TKV_OK);
    const tkv_token next = t1;
    tkv_token t2;
    assert_int_equal(tkv_seq_decode_draft(ctx, 0, next, NULL, 0, smp, 1, &t2, &n_out), TKV_OK);
    assert_int_equal(known_after(ctx, 1, p, n_p, t0, smp), 2);
    assert_int_equal(tkv_cache_check(ctx), TKV_OK);
    tkv_sampler_free(smp);
    tkv_context_free(ctx);
}

/* tkv_seq_accept_draft records a choice only for the sequence whose row it was: a caller that hands it another
   sequence's row (the same batch) samples that row, and nothing is recorded for the sequence. */
static void test_another_rows_choice_records_nothing(void **state) {
    (void)state;
    tkv_context *ctx = tu_context(tu_model, 512, 3, TKV_TYPE_F16);
    tkv_token p[64], q[64];
    const size_t n_p = prompt(tu_model, "Once upon a time, a little girl", p, 64);
    const size_t n_q = prompt(tu_model, "The sun was hot and the little bird", q, 64);
    tkv_sampler *smp = greedy(tu_model);
    assert_int_equal(tkv_seq_sync(ctx, 0, 0, p, n_p - 1, NULL), TKV_OK);
    assert_int_equal(tkv_seq_sync(ctx, 1, 0, q, n_q - 1, NULL), TKV_OK);
    const tkv_token tok[2] = {p[n_p - 1], q[n_q - 1]};
    const tkv_pos at[2] = {(tkv_pos)n_p - 1, (tkv_pos)n_q - 1};
    const tkv_seq sq[2] = {0, 1};
    const bool want[2] = {true, true};
    const tkv_batch b = {2, (tkv_token *)tok, (tkv_pos *)at, (tkv_seq *)sq, (bool *)want};
    assert_int_equal(tkv_decode(ctx, &b), TKV_OK);
    const tkv_token own = argmax(tkv_get_logits(ctx, 0), tu_n_vocab), other = argmax(tkv_get_logits(ctx, 1), tu_n_vocab);
    assert_true(own != other);
    tkv_token y;
    size_t n_out = 0;
    assert_int_equal(tkv_seq_accept_draft(ctx, 0, 1, NULL, 0, smp, 1, NULL, NULL, &y, &n_out), TKV_OK);
    assert_int_equal(y, other);
    tkv_token z;
    assert_int_equal(tkv_seq_decode_draft(ctx, 0, y, NULL, 0, smp, 1, &z, &n_out), TKV_OK); /* y lands after p */
    assert_int_equal(known_after(ctx, 2, p, n_p - 1, p[n_p - 1], smp), 0);
    /* its own row: recorded */
    assert_int_equal(tkv_seq_truncate(ctx, 0, (tkv_pos)n_p - 1), TKV_OK);
    assert_int_equal(tkv_seq_truncate(ctx, 1, (tkv_pos)n_q - 1), TKV_OK);
    assert_int_equal(tkv_decode(ctx, &b), TKV_OK);
    assert_int_equal(tkv_seq_accept_draft(ctx, 0, 0, NULL, 0, smp, 1, NULL, NULL, &y, &n_out), TKV_OK);
    assert_int_equal(y, own);
    assert_int_equal(tkv_seq_decode_draft(ctx, 0, y, NULL, 0, smp, 1, &z, &n_out), TKV_OK);
    assert_int_equal(known_after(ctx, 2, p, n_p - 1, p[n_p - 1], smp), 2); /* own, then z */
    assert_int_equal(tkv_cache_check(ctx), TKV_OK);
    tkv_sampler_free(smp);
    tkv_context_free(ctx);
}

/* A delta-net hybrid: the sequence takes the known tokens as far as the state its run left where it ended, and
   decoding on from that state gives the run's tokens. */
static void test_known_on_a_hybrid(void **state) {
    (void)state;
    tkv_model *m = NULL;
    assert_int_equal(tkv_model_load(tu_shared("models/arch/qwen35.gguf"), NULL, &m), TKV_OK);
    tkv_context *ctx = tu_context(m, 256, 2, TKV_TYPE_F16);
    tkv_token p[8] = {1, 5, 9, 14, 3, 7, 2, 11}, gen[24], out[32];
    tkv_sampler *smp = greedy(m), *smp1 = greedy(m);
    const size_t n = generate(ctx, 0, p, 8, smp, gen, 24);
    assert_true(n > 8);
    const size_t D = (size_t)tkv_seq_len(ctx, 0) - 8;
    assert_int_equal(tkv_seq_sync(ctx, 1, 0, p, 8, NULL), TKV_OK);
    size_t k = 0;
    assert_int_equal(tkv_seq_follow_known(ctx, 1, gen[0], smp1, 32, out, &k), TKV_OK);
    assert_int_equal(k, D); /* the run's end keeps the state after gen[D - 1] */
    assert_memory_equal(out, gen + 1, (k < n - 1 ? k : n - 1) * sizeof *out);
    assert_int_equal(tkv_seq_len(ctx, 1), (tkv_pos)(8 + k));
    tkv_token t = out[k - 1];
    for (size_t i = k + 1; i < n; i++) { /* decoding on, one token at a time, from the state taken */
        size_t n_out = 0;
        assert_int_equal(tkv_seq_decode_draft(ctx, 1, t, NULL, 0, smp1, 1, &t, &n_out), TKV_OK);
        assert_int_equal(t, gen[i]);
    }
    assert_int_equal(tkv_cache_check(ctx), TKV_OK);
    /* fewer at a time: as far as a saved state within them (none, or fewer than asked, where none lies at the
       cap), and decoding on from there gives the run's next token */
    for (size_t cap = 1; cap < D; cap++) {
        assert_int_equal(tkv_seq_sync(ctx, 1, 0, p, 8, NULL), TKV_OK);
        assert_int_equal(tkv_seq_follow_known(ctx, 1, gen[0], smp1, cap, out, &k), TKV_OK);
        assert_true(k <= cap);
        assert_memory_equal(out, gen + 1, k * sizeof *out);
        assert_int_equal(tkv_seq_len(ctx, 1), (tkv_pos)(8 + k));
        size_t n_out = 0;
        assert_int_equal(tkv_seq_decode_draft(ctx, 1, k ? out[k - 1] : gen[0], NULL, 0, smp1, 1, &t, &n_out), TKV_OK);
        assert_int_equal(t, gen[k + 1]);
    }
    assert_int_equal(tkv_cache_check(ctx), TKV_OK);
    /* the oracle: each known token is the argmax of its prefix's logits in a second context */
    assert_argmaxes(m, p, 8, gen, n);
    tkv_sampler_free(smp);
    tkv_sampler_free(smp1);
    tkv_context_free(ctx);
    tkv_model_free(m);
}

static void test_bad_arguments(void **state) {
    (void)state;
    tkv_context *ctx = tu_context(tu_model, 64, 1, TKV_TYPE_F16);
    tkv_sampler *smp = greedy(tu_model);
    tkv_token out[4];
    size_t n = 0;
    assert_int_equal(tkv_seq_follow_known(NULL, 0, 1, smp, 4, out, &n), TKV_ERR_INVALID);
    assert_int_equal(tkv_seq_follow_known(ctx, 0, 1, NULL, 4, out, &n), TKV_ERR_INVALID);
    assert_int_equal(tkv_seq_follow_known(ctx, 0, 1, smp, 4, NULL, &n), TKV_ERR_INVALID);
    assert_int_equal(tkv_seq_follow_known(ctx, 0, 1, smp, 4, out, NULL), TKV_ERR_INVALID);
    assert_int_equal(tkv_seq_follow_known(ctx, 1, 1, smp, 4, out, &n), TKV_ERR_INVALID);
    assert_non_null(strstr(tkv_context_error(ctx), "out of range"));
    assert_int_equal(tkv_seq_follow_known(ctx, -1, 1, smp, 4, out, &n), TKV_ERR_INVALID);
    assert_int_equal(tkv_seq_follow_known(ctx, 0, 1, smp, 0, out, &n), TKV_ERR_INVALID);
    assert_non_null(strstr(tkv_context_error(ctx), "max_out"));
    /* an empty cache: nothing known, nothing changed */
    assert_int_equal(tkv_seq_follow_known(ctx, 0, 1, smp, 4, out, &n), TKV_OK);
    assert_int_equal(n, 0);
    assert_int_equal(tkv_seq_len(ctx, 0), 0);
    assert_int_equal(tkv_cache_check(ctx), TKV_OK);
    tkv_sampler_free(smp);
    tkv_context_free(ctx);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_known_tokens_are_the_argmax),
        cmocka_unit_test(test_nothing_known_to_other_samplers),
        cmocka_unit_test(test_nothing_known_without_invariance),
        cmocka_unit_test(test_unsampled_rows_record_nothing),
        cmocka_unit_test(test_another_rows_choice_records_nothing),
        cmocka_unit_test(test_known_on_a_hybrid),
        cmocka_unit_test(test_bad_arguments),
    };
    return TU_RESULT(cmocka_run_group_tests(tests, tu_stories_setup, tu_stories_teardown));
}
