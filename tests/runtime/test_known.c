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
 *  - with window rows in a pool (gemma3), as far as the pool holds the rows of
 *    the window before the next token, and decoding on from there gives the
 *    run's tokens;
 *  - bad arguments are refused and change nothing;
 *  - a sequence's file, a cache directory and an image carry the records
 *    (cache file version 4): a fresh context that loads any of them takes
 *    the tokens the first one chose, on the llama and the hybrid; a context
 *    of another arithmetic (not batch_invariant, or a file whose identity
 *    is another's) loads the K/V and takes none; a record out of range, out
 *    of order or corrupt refuses the file and changes nothing.
 */
#include "testutil.h"
#include "kv/cachefile.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define XXH_STATIC_LINKING_ONLY
#include <xxhash.h>

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

/* A run of smp after a prompt on sequence 0 (generate): the prompt's tokens, the run's, and how many of those the
   sequence decoded (the last one the run sampled may be pending). */
typedef struct run {
    tkv_token p[64], gen[N_GEN];
    size_t n_p, n, D;
} run;

static void run_after(tkv_context *ctx, tkv_sampler *smp, const char *text, run *r) {
    r->n_p = prompt(tkv_context_model(ctx), text, r->p, 64);
    r->n = generate(ctx, 0, r->p, r->n_p, smp, r->gen, N_GEN);
    r->D = (size_t)tkv_seq_len(ctx, 0) - r->n_p;
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

/* The known tokens (at most 64, into out) that follow p and pending for smp, on sequence s synced to p; how many.
   The sequence is cleared after. */
static size_t known_list(tkv_context *ctx, tkv_seq s, const tkv_token *p, size_t n_p, tkv_token pending,
                         tkv_sampler *smp, tkv_token out[64]) {
    assert_int_equal(tkv_seq_sync(ctx, s, 0, p, n_p, NULL), TKV_OK);
    size_t n = 99;
    assert_int_equal(tkv_seq_follow_known(ctx, s, pending, smp, 64, out, &n), TKV_OK);
    if (!n) assert_int_equal(tkv_seq_len(ctx, s), (tkv_pos)n_p); /* nothing known: nothing taken */
    assert_int_equal(tkv_seq_clear(ctx, s), TKV_OK);
    return n;
}

/* How many known tokens follow p and pending for smp (known_list). */
static size_t known_after(tkv_context *ctx, tkv_seq s, const tkv_token *p, size_t n_p, tkv_token pending,
                          tkv_sampler *smp) {
    tkv_token out[64];
    return known_list(ctx, s, p, n_p, pending, smp, out);
}

static void test_known_tokens_are_the_argmax(void **state) {
    (void)state;
    tkv_context *ctx = tu_context(tu_model, 512, 2, TKV_TYPE_F16);
    tkv_sampler *smp = greedy(tu_model);
    run r;
    run_after(ctx, smp, "Once upon a time, a little girl", &r);
    const tkv_token *p = r.p, *gen = r.gen;
    const size_t n_p = r.n_p, n = r.n, D = r.D;
    tkv_token out[64];
    assert_true(n > 20);
    /* the run decoded gen[0 .. D), each row sampled (the last token it sampled may be pending) */
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

/* Window rows in a pool (swa_rows, gemma3: window 32): a sequence takes the known tokens as far as the pool holds
   the rows of the window before the next token. While the run's sequence lives its rows are held, and the whole
   answer is taken; once they are released (the run ended, another sequence's tokens took the rows), no more than
   the held rows allow, and decoding on from what was taken gives the run's tokens. */
static void test_known_with_a_window_pool(void **state) {
    (void)state;
    tkv_model *m = NULL;
    assert_int_equal(tkv_model_load(tu_shared("models/arch/gemma3.gguf"), NULL, &m), TKV_OK);
    tkv_context_params cp = tkv_context_default_params();
    cp.n_cells = 512, cp.n_seq_max = 2, cp.n_threads = 2, cp.n_batch = 16, cp.swa_rows = 96;
    tkv_context *ctx = NULL;
    assert_int_equal(tkv_context_create(m, &cp, &ctx), TKV_OK);
    const tkv_token p[8] = {1, 5, 9, 14, 3, 7, 2, 11};
    tkv_token gen[N_GEN], out[64];
    tkv_sampler *smp = greedy(m), *smp1 = greedy(m);
    const size_t n = generate(ctx, 0, p, 8, smp, gen, N_GEN);
    assert_true(n > 32); /* past the window */
    const size_t D = (size_t)tkv_seq_len(ctx, 0) - 8;
    size_t k = known_list(ctx, 1, p, 8, gen[0], smp1, out);
    assert_int_equal(k, D);
    assert_memory_equal(out, gen + 1, (k < n - 1 ? k : n - 1) * sizeof *out);
    assert_argmaxes(m, p, 8, gen, n);
    /* taken, then decoded on: the run's next token */
    assert_int_equal(tkv_seq_sync(ctx, 1, 0, p, 8, NULL), TKV_OK);
    assert_int_equal(tkv_seq_follow_known(ctx, 1, gen[0], smp1, 64, out, &k), TKV_OK);
    assert_int_equal(k, D);
    tkv_token t;
    size_t n_out = 0;
    assert_int_equal(tkv_seq_decode_draft(ctx, 1, out[k - 1], NULL, 0, smp1, 1, &t, &n_out), TKV_OK);
    if (k + 1 < n) assert_int_equal(t, gen[k + 1]);
    assert_int_equal(tkv_cache_check(ctx), TKV_OK);
    assert_int_equal(tkv_seq_clear(ctx, 1), TKV_OK);
    /* the run ends, and another sequence's 120 tokens take the pool's rows */
    assert_int_equal(tkv_seq_clear(ctx, 0), TKV_OK);
    tkv_token other[120];
    for (size_t i = 0; i < 120; i++) other[i] = (tkv_token)(2 + (i * 53 + 17) % 200);
    assert_int_equal(tkv_seq_sync(ctx, 0, 0, other, 120, NULL), TKV_OK);
    /* the run's cells stay cached with their records, but not their window rows */
    assert_int_equal(tkv_seq_sync(ctx, 1, 0, p, 8, NULL), TKV_OK);
    assert_int_equal(tkv_seq_follow_known(ctx, 1, gen[0], smp1, 64, out, &k), TKV_OK);
    assert_true(k < D);
    assert_memory_equal(out, gen + 1, k * sizeof *out);
    assert_int_equal(tkv_seq_len(ctx, 1), (tkv_pos)(8 + k));
    assert_int_equal(tkv_seq_decode_draft(ctx, 1, k ? out[k - 1] : gen[0], NULL, 0, smp1, 1, &t, &n_out), TKV_OK);
    assert_int_equal(t, gen[k + 1]);
    assert_int_equal(tkv_cache_check(ctx), TKV_OK);
    tkv_sampler_free(smp);
    tkv_sampler_free(smp1);
    tkv_context_free(ctx);
    tkv_model_free(m);
}

/* The tokens one at a time without drafts after p for a fresh sampler of sp (and grammar g, or NULL), in a fresh
   context of m: the oracle of a sampled run (the first from the prompt's logits, then each step's). */
static size_t one_at_a_time_in(const tkv_model *m, const tkv_token *p, size_t n_p, const tkv_sampler_params *sp,
                               const tkv_grammar *g, tkv_token *gen, size_t n_gen) {
    tkv_context *c = tu_context(m, 512, 1, TKV_TYPE_F16);
    tkv_sampler *smp = sampler(m, sp);
    assert_int_equal(tkv_sampler_set_grammar(smp, g), TKV_OK);
    assert_int_equal(tkv_seq_sync(c, 0, 0, p, n_p, NULL), TKV_OK);
    tkv_token t = tkv_sampler_sample(smp, tkv_get_logits_last(c));
    size_t n = 0;
    while (!tkv_token_is_eog(m, t) && n < n_gen) {
        gen[n++] = t;
        size_t n_out = 0;
        if (n < n_gen) assert_int_equal(tkv_seq_decode_draft(c, 0, t, NULL, 0, smp, 1, &t, &n_out), TKV_OK);
    }
    tkv_sampler_free(smp);
    tkv_context_free(c);
    return n;
}

static size_t one_at_a_time(const tkv_model *m, const tkv_token *p, size_t n_p, const tkv_sampler_params *sp,
                            tkv_token *gen, size_t n_gen) {
    return one_at_a_time_in(m, p, n_p, sp, NULL, gen, n_gen);
}

/* A retry of run gen[0..n) (D of its tokens decoded) after p on sequence 1 of c, with a fresh sampler of sp: its
   first token from the prompt's logits, then all D known, the run's. */
static void assert_retry_known(tkv_context *c, const tkv_sampler_params *sp, const tkv_token *p, size_t n_p,
                               const tkv_token *gen, size_t n, size_t D) {
    tkv_sampler *smp = sampler(tu_model, sp);
    tkv_token out[64];
    assert_int_equal(tkv_seq_sync(c, 1, 0, p, n_p, NULL), TKV_OK);
    assert_int_equal(tkv_sampler_sample(smp, tkv_get_logits_last(c)), gen[0]);
    assert_int_equal(known_list(c, 1, p, n_p, gen[0], smp, out), D);
    assert_memory_equal(out, gen + 1, (D < n - 1 ? D : n - 1) * sizeof *out);
    tkv_sampler_free(smp);
}

/* A sampler that draws, or whose choice depends on the tokens it saw, knows the tokens a sampler of the same state
   chose: a retry with the same parameters and seed (or the same penalties, greedy: any seed) takes the first run's
   answer, and its sampler is then where a decoding run's would be (decoding on gives the run's next tokens);
   another seed (at a temperature) or penalty takes nothing. The run itself is held to one-at-a-time decoding in
   another context. */
static void test_known_for_the_same_sampler_state(void **state) {
    (void)state;
    tkv_token p[64];
    const size_t n_p = prompt(tu_model, "The sun was hot and the little bird", p, 64);
    tkv_sampler_params sp[2];
    sp[0] = tkv_sampler_default_params(), sp[0].temperature = 0.9f, sp[0].top_k = 40, sp[0].seed = 7;
    sp[1] = tkv_sampler_default_params(), sp[1].temperature = 0, sp[1].repeat_penalty = 1.3f;
    for (int v = 0; v < 2; v++) {
        tkv_context *ctx = tu_context(tu_model, 512, 2, TKV_TYPE_F16);
        tkv_sampler *smp = sampler(tu_model, &sp[v]);
        tkv_token gen[N_GEN], want[N_GEN], out[64];
        const size_t n = generate(ctx, 0, p, n_p, smp, gen, N_GEN);
        assert_true(n > 20);
        assert_int_equal(one_at_a_time(tu_model, p, n_p, &sp[v], want, n), n);
        assert_memory_equal(gen, want, n * sizeof *gen);
        const size_t D = (size_t)tkv_seq_len(ctx, 0) - n_p;
        /* the same parameters and seed: the first token from the prompt's logits (its row was not sampled through
           the draft calls: nothing recorded), then 10 known, then decoding on gives the run's tokens */
        tkv_sampler *again = sampler(tu_model, &sp[v]);
        assert_int_equal(tkv_seq_sync(ctx, 1, 0, p, n_p, NULL), TKV_OK);
        assert_int_equal(tkv_sampler_sample(again, tkv_get_logits_last(ctx)), gen[0]);
        size_t k = 0;
        assert_int_equal(tkv_seq_follow_known(ctx, 1, gen[0], again, 10, out, &k), TKV_OK);
        assert_int_equal(k, 10);
        assert_memory_equal(out, gen + 1, k * sizeof *out);
        tkv_token t = out[k - 1];
        for (size_t i = k + 1; i < n; i++) {
            size_t n_out = 0;
            assert_int_equal(tkv_seq_decode_draft(ctx, 1, t, NULL, 0, again, 1, &t, &n_out), TKV_OK);
            assert_int_equal(t, gen[i]);
        }
        assert_int_equal(tkv_seq_clear(ctx, 1), TKV_OK);
        /* all of the run at once, then from a file in a fresh context; greedy, also with another seed (no choice
           draws: a server gives each request without a seed one of its own) */
        assert_retry_known(ctx, &sp[v], p, n_p, gen, n, D);
        if (v == 1) {
            tkv_sampler_params reseeded = sp[v];
            reseeded.seed = sp[v].seed + 12345;
            assert_retry_known(ctx, &reseeded, p, n_p, gen, n, D);
        }
        char dir[64], path[128];
        assert_int_equal(tu_mkdtemp(dir, "known-key"), 0);
        snprintf(path, sizeof path, "%s/seq.tkvc", dir);
        assert_int_equal(tkv_seq_save(ctx, 0, path), TKV_OK);
        tkv_context *c2 = tu_context(tu_model, 512, 2, TKV_TYPE_F16);
        assert_int_equal(tkv_seq_load(c2, 0, path), TKV_OK);
        assert_retry_known(c2, &sp[v], p, n_p, gen, n, D);
        tkv_context_free(c2);
        assert_int_equal(tu_rmtree(dir), 0);
        /* another seed, or another penalty: nothing (its state's key is another) */
        tkv_sampler_params other = sp[v];
        if (v == 0) other.seed = 8;
        else other.repeat_penalty = 1.2f;
        tkv_sampler *o = sampler(tu_model, &other);
        assert_int_equal(known_after(ctx, 1, p, n_p, gen[0], o), 0);
        /* nor a sampler that saw one token more (its penalties' window differs) */
        tkv_sampler *seen = sampler(tu_model, &sp[1]);
        tkv_sampler_accept(seen, 5);
        if (v == 1) assert_int_equal(known_after(ctx, 1, p, n_p, gen[0], seen), 0);
        assert_int_equal(tkv_cache_check(ctx), TKV_OK);
        tkv_sampler_free(seen);
        tkv_sampler_free(o);
        tkv_sampler_free(again);
        tkv_sampler_free(smp);
        tkv_context_free(ctx);
    }
}

/* A cell holds one record, and an argmax's stays against a sampler's that draws: a seeded step through a greedy
   answer's cell records nothing there, and the greedy retry still takes the whole answer. */
static void test_a_greedy_record_stays(void **state) {
    (void)state;
    tkv_context *ctx = tu_context(tu_model, 512, 2, TKV_TYPE_F16);
    tkv_sampler *smp = greedy(tu_model);
    run r;
    run_after(ctx, smp, "Once upon a time, a little girl", &r);
    assert_true(r.n > 8);
    tkv_sampler_params sp = tkv_sampler_default_params();
    sp.temperature = 0.9f, sp.seed = 3;
    tkv_sampler *seeded = sampler(tu_model, &sp);
    tkv_token q[128];
    memcpy(q, r.p, r.n_p * sizeof *q);
    memcpy(q + r.n_p, r.gen, 4 * sizeof *q);
    assert_int_equal(tkv_seq_sync(ctx, 1, 0, q, r.n_p + 4, NULL), TKV_OK);
    tkv_token t;
    size_t n_out = 0;
    assert_int_equal(tkv_seq_decode_draft(ctx, 1, r.gen[4], NULL, 0, seeded, 1, &t, &n_out), TKV_OK);
    assert_int_equal(tkv_seq_clear(ctx, 1), TKV_OK);
    assert_int_equal(known_after(ctx, 1, r.p, r.n_p, r.gen[0], smp), r.D);
    tkv_sampler_free(seeded);
    tkv_sampler_free(smp);
    tkv_context_free(ctx);
}

/* The text of token t (at most 63 bytes), NUL-terminated. */
static const char *piece_of(tkv_token t, char out[64]) {
    size_t len = 0;
    assert_int_equal(tkv_token_to_piece(tu_model, t, 0, out, 63, &len), TKV_OK);
    out[len] = '\0';
    return out;
}

/* A greedy sampler with a grammar knows what a greedy sampler with the same grammar (the same text, another
   object) chose: the run's tokens, which one-at-a-time decoding with the grammar gives, all D of them. The grammar
   counts (at most 60 characters, no e): after some known tokens the sampler's matcher is where the run's was, so
   decoding on gives the run's next tokens and ends where the run did (a matcher left behind would allow more). A
   plain greedy sampler, one with a grammar that allows the run's first token but not a later one, and a grammar at
   a temperature (whose rejection may draw twice) take nothing on that path, and a grammar at a temperature records
   nothing. */
static void test_known_with_a_grammar(void **state) {
    (void)state;
    static const char no_e[] = "root ::= [^eE]{1,60}";
    tkv_grammar *g = NULL, *same = NULL, *other = NULL;
    assert_int_equal(tkv_grammar_create(tu_model, no_e, strlen(no_e), NULL, &g), TKV_OK);
    assert_int_equal(tkv_grammar_create(tu_model, no_e, strlen(no_e), "root", &same), TKV_OK);
    tkv_sampler_params sp = tkv_sampler_default_params();
    sp.temperature = 0;
    tkv_context *ctx = tu_context(tu_model, 512, 2, TKV_TYPE_F16);
    tkv_token p[64], gen[N_GEN], want[N_GEN];
    const size_t n_p = prompt(tu_model, "Tom and his dog went to the park. Tom", p, 64);
    tkv_sampler *smp = sampler(tu_model, &sp);
    assert_int_equal(tkv_sampler_set_grammar(smp, g), TKV_OK);
    const size_t n = generate(ctx, 0, p, n_p, smp, gen, N_GEN);
    assert_true(n > 10);
    assert_int_equal(one_at_a_time_in(tu_model, p, n_p, &sp, g, want, N_GEN), n);
    assert_memory_equal(gen, want, n * sizeof *gen);
    size_t chars = 0;
    for (size_t i = 0; i < n; i++) { /* the grammar held: no e in the text, and at most 60 characters */
        char piece[64];
        assert_null(strchr(piece_of(gen[i], piece), 'e'));
        chars += strlen(piece);
    }
    assert_true(chars <= 60 && n < N_GEN); /* it ended at the grammar's end */
    /* the other grammar: also no letter that a later token has and the first has not */
    char first[64], later[64], letter = 0;
    piece_of(gen[0], first);
    for (size_t i = 1; i < n && !letter; i++)
        for (const char *c = piece_of(gen[i], later); *c && !letter; c++)
            if (*c >= 'a' && *c <= 'z' && !strchr(first, *c)) letter = *c;
    assert_true(letter != 0);
    char no_e_nor[64];
    snprintf(no_e_nor, sizeof no_e_nor, "root ::= [^eE%c]{1,60}", letter);
    assert_int_equal(tkv_grammar_create(tu_model, no_e_nor, strlen(no_e_nor), NULL, &other), TKV_OK);
    const size_t D = (size_t)tkv_seq_len(ctx, 0) - n_p;
    assert_true(D > 8);
    /* a fresh sampler with the same grammar, its first token from the prompt's logits: then all D, the run's */
    tkv_sampler *retry = sampler(tu_model, &sp);
    assert_int_equal(tkv_sampler_set_grammar(retry, same), TKV_OK);
    assert_int_equal(tkv_seq_sync(ctx, 1, 0, p, n_p, NULL), TKV_OK);
    assert_int_equal(tkv_sampler_sample(retry, tkv_get_logits_last(ctx)), gen[0]);
    tkv_token out[64];
    assert_int_equal(known_list(ctx, 1, p, n_p, gen[0], retry, out), D);
    assert_memory_equal(out, gen + 1, (D < n - 1 ? D : n - 1) * sizeof *out);
    tkv_sampler_free(retry);
    /* 5 of them, then decoding on, one token at a time */
    retry = sampler(tu_model, &sp);
    assert_int_equal(tkv_sampler_set_grammar(retry, same), TKV_OK);
    assert_int_equal(tkv_seq_sync(ctx, 1, 0, p, n_p, NULL), TKV_OK);
    assert_int_equal(tkv_sampler_sample(retry, tkv_get_logits_last(ctx)), gen[0]);
    size_t k = 0;
    assert_int_equal(tkv_seq_follow_known(ctx, 1, gen[0], retry, 5, out, &k), TKV_OK);
    assert_int_equal(k, 5);
    tkv_token t = out[k - 1];
    for (size_t i = k + 1; i <= n; i++) {
        size_t n_out = 0;
        assert_int_equal(tkv_seq_decode_draft(ctx, 1, t, NULL, 0, retry, 1, &t, &n_out), TKV_OK);
        if (i < n) assert_int_equal(t, gen[i]);
        else assert_true(tkv_token_is_eog(tu_model, t)); /* where the run ended */
    }
    assert_int_equal(tkv_seq_clear(ctx, 1), TKV_OK);
    tkv_sampler_free(retry);
    /* others take nothing on its path */
    tkv_sampler *plain = greedy(tu_model), *another = sampler(tu_model, &sp), *warm = NULL;
    assert_int_equal(tkv_sampler_set_grammar(another, other), TKV_OK);
    tkv_sampler_params hot = sp;
    hot.temperature = 0.8f, hot.seed = 7;
    warm = sampler(tu_model, &hot);
    assert_int_equal(tkv_sampler_set_grammar(warm, g), TKV_OK);
    assert_int_equal(tkv_seq_sync(ctx, 1, 0, p, n_p, NULL), TKV_OK);
    (void)tkv_sampler_sample(plain, tkv_get_logits_last(ctx)); /* their first tokens */
    (void)tkv_sampler_sample(warm, tkv_get_logits_last(ctx));
    assert_int_equal(tkv_sampler_sample(another, tkv_get_logits_last(ctx)), gen[0]); /* the same first choice */
    assert_int_equal(known_after(ctx, 1, p, n_p, gen[0], plain), 0);
    assert_int_equal(known_after(ctx, 1, p, n_p, gen[0], another), 0);
    assert_int_equal(known_after(ctx, 1, p, n_p, gen[0], warm), 0);
    /* a grammar at a temperature records nothing: the same seed's retry finds nothing */
    tkv_token q[64], sgen[N_GEN];
    const size_t n_q = prompt(tu_model, "The sun was hot and the little bird", q, 64);
    tkv_sampler *seeded = sampler(tu_model, &hot);
    assert_int_equal(tkv_sampler_set_grammar(seeded, g), TKV_OK);
    assert_true(generate(ctx, 0, q, n_q, seeded, sgen, N_GEN) > 10);
    tkv_sampler_free(seeded);
    tkv_sampler *again = sampler(tu_model, &hot);
    assert_int_equal(tkv_sampler_set_grammar(again, g), TKV_OK);
    assert_int_equal(tkv_seq_sync(ctx, 1, 0, q, n_q, NULL), TKV_OK);
    assert_int_equal(tkv_sampler_sample(again, tkv_get_logits_last(ctx)), sgen[0]);
    assert_int_equal(known_after(ctx, 1, q, n_q, sgen[0], again), 0);
    assert_int_equal(tkv_cache_check(ctx), TKV_OK);
    tkv_sampler_free(again);
    tkv_sampler_free(warm);
    tkv_sampler_free(another);
    tkv_sampler_free(plain);
    tkv_sampler_free(smp);
    tkv_context_free(ctx);
    tkv_grammar_free(g);
    tkv_grammar_free(same);
    tkv_grammar_free(other);
}

/* ---- known tokens in cache files, directories and images ---------------------------------------------------- */

static uint8_t *slurp(const char *path, size_t *size) {
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    assert_int_equal(fseek(f, 0, SEEK_END), 0);
    const long n = ftell(f);
    assert_true(n > 0);
    rewind(f);
    uint8_t *b = malloc((size_t)n);
    assert_non_null(b);
    assert_int_equal(fread(b, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    *size = (size_t)n;
    return b;
}

/* A greedy run of m saved three ways after it ran in its own context: its sequence's file, a cache directory and an
   image of its whole prefix; what a fresh context takes after the prompt from each. */
typedef struct saved_run {
    char dir[64], seq_path[128], cache_dir[128];
    tkv_token p[64], gen[N_GEN], all[128];
    size_t n_p, n, D, n_all, img_size;
    uint8_t *img;
} saved_run;

static void save_run(const tkv_model *m, const tkv_token *p, size_t n_p, saved_run *r) {
    tkv_context *ctx = tu_context(m, 512, 2, TKV_TYPE_F16);
    tkv_sampler *smp = greedy(m);
    memcpy(r->p, p, n_p * sizeof *p);
    r->n_p = n_p;
    r->n = generate(ctx, 0, p, n_p, smp, r->gen, N_GEN);
    assert_true(r->n > 8);
    r->D = (size_t)tkv_seq_len(ctx, 0) - n_p;
    assert_int_equal(tkv_seq_tokens(ctx, 0, r->all, 128, &r->n_all), TKV_OK);
    assert_int_equal(r->n_all, n_p + r->D);
    assert_int_equal(tu_mkdtemp(r->dir, "known"), 0);
    snprintf(r->seq_path, sizeof r->seq_path, "%s/seq.tkvc", r->dir);
    snprintf(r->cache_dir, sizeof r->cache_dir, "%s/cache", r->dir);
    assert_int_equal(tkv_seq_save(ctx, 0, r->seq_path), TKV_OK);
    assert_int_equal(tkv_cache_save(ctx, r->cache_dir, 0), TKV_OK);
    assert_int_equal(tkv_cache_export(ctx, 0, r->all, r->n_all, 0, NULL, 0, &r->img_size), TKV_ERR_FULL);
    r->img = malloc(r->img_size);
    assert_int_equal(tkv_cache_export(ctx, 0, r->all, r->n_all, 0, r->img, r->img_size, &r->img_size), TKV_OK);
    tkv_sampler_free(smp);
    tkv_context_free(ctx);
}

static void drop_run(saved_run *r) {
    free(r->img);
    assert_int_equal(tu_rmtree(r->dir), 0);
}

enum load_way { BY_SEQ_FILE, BY_DIRECTORY, BY_IMAGE, N_WAYS };

static void load_run(tkv_context *c, const saved_run *r, enum load_way way) {
    switch (way) {
    case BY_SEQ_FILE: assert_int_equal(tkv_seq_load(c, 0, r->seq_path), TKV_OK); break;
    case BY_DIRECTORY: assert_int_equal(tkv_cache_load(c, r->cache_dir), TKV_OK); break;
    default: assert_int_equal(tkv_cache_import(c, 0, r->all, r->n_all, 0, r->img, r->img_size), TKV_OK); break;
    }
    size_t len = 0;
    assert_int_equal(tkv_cache_match(c, 0, r->all, r->n_all, &len), TKV_OK);
    assert_int_equal(len, r->n_all); /* the K/V came whatever happens to the records */
}

/* The checks on a fresh context of m that loaded r each way: the tokens the run chose after gen[0], all D of them
   (the oracle: the run itself, whose choices test_known_tokens_are_the_argmax holds to the argmax). */
static void assert_run_known_when_loaded(const tkv_model *m, const saved_run *r) {
    for (int way = 0; way < N_WAYS; way++) {
        tkv_context *c = tu_context(m, 512, 2, TKV_TYPE_F16);
        tkv_sampler *smp = greedy(m);
        load_run(c, r, (enum load_way)way);
        tkv_token out[64];
        const size_t k = known_list(c, 1, r->p, r->n_p, r->gen[0], smp, out);
        assert_int_equal(k, r->D);
        assert_memory_equal(out, r->gen + 1, (k < r->n - 1 ? k : r->n - 1) * sizeof *out);
        assert_int_equal(tkv_cache_check(c), TKV_OK);
        tkv_sampler_free(smp);
        tkv_context_free(c);
    }
}

static void test_known_through_files(void **state) {
    (void)state;
    saved_run r;
    tkv_token p[64];
    save_run(tu_model, p, prompt(tu_model, "Once upon a time, a little girl", p, 64), &r);
    /* the files carry D records: version 4 */
    size_t size;
    uint8_t *f = slurp(r.seq_path, &size);
    assert_int_equal(tu_get(f, 8, 4), 4);
    assert_int_equal(tu_get(r.img, 8, 4), 4);
    assert_int_equal(tu_get(f, size - 48 - 16 * r.D + 8, 4), r.D); /* the counts block's n_known */
    free(f);
    assert_run_known_when_loaded(tu_model, &r);
    /* a context that is not batch_invariant loads the K/V and takes nothing */
    tkv_context_params cp = tkv_context_default_params();
    cp.n_cells = 512, cp.n_seq_max = 2, cp.n_threads = 2, cp.n_batch = 16, cp.batch_invariant = false;
    tkv_sampler *smp = greedy(tu_model);
    for (int way = 0; way < N_WAYS; way++) {
        tkv_context *c = NULL;
        assert_int_equal(tkv_context_create(tu_model, &cp, &c), TKV_OK);
        load_run(c, &r, (enum load_way)way);
        assert_int_equal(known_after(c, 1, r.p, r.n_p, r.gen[0], smp), 0);
        tkv_context_free(c);
    }
    /* nor does a file of another arithmetic (its identity changed, resealed) */
    uint8_t *w = malloc(r.img_size);
    memcpy(w, r.img, r.img_size);
    const size_t arith = r.img_size - 48 - 16 * r.D + 16;
    tu_put(w, arith, tu_get(w, arith, 8) ^ 1, 8);
    tkv__cachefile_reseal(w, r.img_size);
    tkv_context *c = tu_context(tu_model, 512, 2, TKV_TYPE_F16);
    assert_int_equal(tkv_cache_import(c, 0, r.all, r.n_all, 0, w, r.img_size), TKV_OK);
    assert_int_equal(known_after(c, 1, r.p, r.n_p, r.gen[0], smp), 0);
    tkv_context_free(c);
    free(w);
    tkv_sampler_free(smp);
    drop_run(&r);
}

/* An image of the whole run loaded for its prompt alone (a disk tier's retry): plain, the part that agrees with the
   prompt, and no token known past gen[0]; with TKV_IMAGE_CONTINUATION, its whole prefix, and the run's D tokens
   known after gen[0]. The run in two pieces (the second's K/V all past the prompt, as an eviction cuts an answer):
   with the flag the two load one after the other, the second refused while the first is not cached; without it
   the second is refused. A prompt that parts from the image before its end takes only the agreeing part either
   way, and a flag the library does not know is refused by name, the cache unchanged. */
static void test_known_through_an_image_continuation(void **state) {
    (void)state;
    saved_run r;
    tkv_token p[64];
    save_run(tu_model, p, prompt(tu_model, "Once upon a time, a little girl", p, 64), &r);
    tkv_sampler *smp = greedy(tu_model);
    for (uint32_t flags = 0; flags <= TKV_IMAGE_CONTINUATION; flags += TKV_IMAGE_CONTINUATION) {
        tkv_context *c = tu_context(tu_model, 512, 2, TKV_TYPE_F16);
        size_t loaded = 0, len = 0;
        assert_int_equal(tkv_cache_load_image_ex(c, r.img, r.img_size, 0, r.p, r.n_p, flags, &loaded), TKV_OK);
        assert_int_equal(loaded, flags ? r.n_all : r.n_p);
        assert_int_equal(tkv_cache_match(c, 0, r.all, r.n_all, &len), TKV_OK);
        assert_int_equal(len, loaded);
        tkv_token out[64];
        const size_t k = known_list(c, 1, r.p, r.n_p, r.gen[0], smp, out);
        assert_int_equal(k, flags ? r.D : 0);
        assert_memory_equal(out, r.gen + 1, (k < r.n - 1 ? k : r.n - 1) * sizeof *out);
        assert_int_equal(tkv_cache_check(c), TKV_OK);
        tkv_context_free(c);
        /* the prompt with its last token changed: the image agrees on all but it */
        c = tu_context(tu_model, 512, 2, TKV_TYPE_F16);
        tkv_token q[64];
        memcpy(q, r.p, r.n_p * sizeof *q);
        q[r.n_p - 1] = (q[r.n_p - 1] + 1) % (tkv_token)tkv_vocab_size(tu_model);
        assert_int_equal(tkv_cache_load_image_ex(c, r.img, r.img_size, 0, q, r.n_p, flags, &loaded), TKV_OK);
        assert_int_equal(loaded, r.n_p - 1);
        tkv_context_free(c);
    }
    /* two pieces: [0, cut) and [cut, n_all), cut 3 tokens past the prompt */
    const size_t cut = r.n_p + 3;
    size_t size[2];
    uint8_t *piece[2];
    tkv_context *c = tu_context(tu_model, 512, 2, TKV_TYPE_F16);
    assert_int_equal(tkv_cache_import(c, 0, r.all, r.n_all, 0, r.img, r.img_size), TKV_OK);
    for (int k = 0; k < 2; k++) {
        const size_t end = k ? r.n_all : cut, from = k ? cut : 0;
        assert_int_equal(tkv_cache_export(c, 0, r.all, end, from, NULL, 0, &size[k]), TKV_ERR_FULL);
        piece[k] = malloc(size[k]);
        assert_non_null(piece[k]);
        assert_int_equal(tkv_cache_export(c, 0, r.all, end, from, piece[k], size[k], &size[k]), TKV_OK);
    }
    tkv_context_free(c);
    for (uint32_t flags = 0; flags <= TKV_IMAGE_CONTINUATION; flags += TKV_IMAGE_CONTINUATION) {
        c = tu_context(tu_model, 512, 2, TKV_TYPE_F16);
        size_t loaded = 0, len = 0;
        /* the second piece first: the part before its K/V is not cached */
        assert_int_equal(tkv_cache_load_image_ex(c, piece[1], size[1], 0, r.p, r.n_p, flags, &loaded), TKV_ERR_INVALID);
        assert_int_equal(tkv_cache_match(c, 0, r.all, r.n_all, &len), TKV_OK);
        assert_int_equal(len, 0);
        assert_int_equal(tkv_cache_load_image_ex(c, piece[0], size[0], 0, r.p, r.n_p, flags, &loaded), TKV_OK);
        assert_int_equal(loaded, flags ? cut : r.n_p);
        const tkv_status st = tkv_cache_load_image_ex(c, piece[1], size[1], 0, r.p, r.n_p, flags, &loaded);
        assert_int_equal(st, flags ? TKV_OK : TKV_ERR_INVALID); /* without: it agrees on none of its K/V */
        if (flags) assert_int_equal(loaded, r.n_all);
        assert_int_equal(tkv_cache_match(c, 0, r.all, r.n_all, &len), TKV_OK);
        assert_int_equal(len, flags ? r.n_all : r.n_p);
        assert_int_equal(known_after(c, 1, r.p, r.n_p, r.gen[0], smp), flags ? r.D : 0);
        assert_int_equal(tkv_cache_check(c), TKV_OK);
        tkv_context_free(c);
    }
    free(piece[0]);
    free(piece[1]);
    c = tu_context(tu_model, 512, 2, TKV_TYPE_F16);
    size_t loaded = 7, len = 1;
    assert_int_equal(tkv_cache_load_image_ex(c, r.img, r.img_size, 0, r.p, r.n_p, 1u << 5, &loaded), TKV_ERR_INVALID);
    assert_non_null(strstr(tkv_last_error(c), "flags 0x20"));
    assert_int_equal(loaded, 7);
    assert_int_equal(tkv_cache_match(c, 0, r.all, r.n_all, &len), TKV_OK);
    assert_int_equal(len, 0);
    tkv_context_free(c);
    tkv_sampler_free(smp);
    drop_run(&r);
}

/* A record out of range, out of order, of no arithmetic, or corrupt refuses the image with a message naming it, and
   the cache is as it was. */
static void test_known_records_checked(void **state) {
    (void)state;
    saved_run r;
    tkv_token p[64];
    save_run(tu_model, p, prompt(tu_model, "Tom and his dog went to the park. Tom", p, 64), &r);
    const size_t sz = r.img_size, rec = sz - 8 - 16 * r.D, counts = sz - 48 - 16 * r.D; /* records of 16 bytes */
    struct {
        size_t at;
        unsigned bytes;
        uint64_t value;
        int reseal; /* 1: every block (tkv__cachefile_reseal); 2: the counts block alone (a layout it cannot make) */
        tkv_status st;
        const char *what;
    } cases[] = {
        {rec + 4, 4, 512, 1, TKV_ERR_FORMAT, "known token 0: id 512 is out of range"},
        {rec + 20, 4, (uint32_t)-1, 1, TKV_ERR_FORMAT, "known token 1: id -1 is out of range"},
        {rec + 24, 8, 0, 1, TKV_ERR_FORMAT, "known token 1 has no key"},
        {rec + 16, 4, r.n_p, 1, TKV_ERR_FORMAT, "known token 1 at position"}, /* record 0's position again */
        {rec, 4, r.n_all, 1, TKV_ERR_FORMAT, "known token 0 at position"},   /* past the prefix */
        {counts + 16, 8, 0, 1, TKV_ERR_FORMAT, "version 4 with"},            /* records of no arithmetic */
        {counts + 12, 4, 1, 1, TKV_ERR_FORMAT, "reserved count 1"},
        {counts + 8, 4, r.n_all + 1, 2, TKV_ERR_FORMAT, "known tokens for"},  /* more records than positions */
        {counts + 8, 4, r.D - 1, 2, TKV_ERR_FORMAT, "counts say"},             /* fewer than the image holds */
        {counts, 4, 1, 2, TKV_ERR_INVALID, "holds recurrent states, and this model has none"},
        {rec + 5, 1, 0x40, 0, TKV_ERR_FORMAT, "(checkpoints, known tokens) checksum mismatch"},
        {counts + 1, 1, 0x40, 0, TKV_ERR_FORMAT, "(counts) checksum mismatch"},
    };
    tkv_context *c = tu_context(tu_model, 512, 2, TKV_TYPE_F16);
    uint8_t *w = malloc(sz);
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        memcpy(w, r.img, sz);
        tu_put(w, cases[k].at, cases[k].bytes == 1 ? w[cases[k].at] ^ cases[k].value : cases[k].value, cases[k].bytes);
        if (cases[k].reseal == 1) tkv__cachefile_reseal(w, sz);
        if (cases[k].reseal == 2) /* block 2 + 2 n_layer: stories260K has 5 layers */
            tu_put(w, counts + 24, XXH3_64bits_withSeed(w + counts, 24, 12), 8);
        assert_int_equal(tkv_cache_import(c, 0, r.all, r.n_all, 0, w, sz), cases[k].st);
        if (!strstr(tkv_context_error(c), cases[k].what))
            fail_msg("case %zu: '%s' does not say '%s'", k, tkv_context_error(c), cases[k].what);
        size_t len = 99;
        assert_int_equal(tkv_cache_match(c, 0, r.all, r.n_all, &len), TKV_OK);
        assert_int_equal(len, 0);
        assert_int_equal(tkv_cache_check(c), TKV_OK);
    }
    /* unchanged, it loads */
    assert_int_equal(tkv_cache_import(c, 0, r.all, r.n_all, 0, r.img, sz), TKV_OK);
    free(w);
    tkv_context_free(c);
    drop_run(&r);
}

/* The hybrid's file carries checkpoints and records together (version 4), and a fresh context that loads it takes
   the run's tokens as far as the state at its end, as the first context did. */
static void test_known_through_files_on_a_hybrid(void **state) {
    (void)state;
    tkv_model *m = NULL;
    assert_int_equal(tkv_model_load(tu_shared("models/arch/qwen35.gguf"), NULL, &m), TKV_OK);
    const tkv_token p[8] = {1, 5, 9, 14, 3, 7, 2, 11};
    saved_run r;
    save_run(m, p, 8, &r);
    size_t size;
    uint8_t *f = slurp(r.seq_path, &size);
    assert_int_equal(tu_get(f, 8, 4), 4);
    free(f);
    assert_run_known_when_loaded(m, &r);
    drop_run(&r);
    tkv_model_free(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_known_tokens_are_the_argmax),
        cmocka_unit_test(test_nothing_known_to_other_samplers),
        cmocka_unit_test(test_nothing_known_without_invariance),
        cmocka_unit_test(test_unsampled_rows_record_nothing),
        cmocka_unit_test(test_another_rows_choice_records_nothing),
        cmocka_unit_test(test_known_on_a_hybrid),
        cmocka_unit_test(test_known_with_a_window_pool),
        cmocka_unit_test(test_known_for_the_same_sampler_state),
        cmocka_unit_test(test_a_greedy_record_stays),
        cmocka_unit_test(test_bad_arguments),
        cmocka_unit_test(test_known_with_a_grammar),
        cmocka_unit_test(test_known_through_files),
        cmocka_unit_test(test_known_through_an_image_continuation),
        cmocka_unit_test(test_known_records_checked),
        cmocka_unit_test(test_known_through_files_on_a_hybrid),
    };
    return TU_RESULT(cmocka_run_group_tests(tests, tu_stories_setup, tu_stories_teardown));
}
