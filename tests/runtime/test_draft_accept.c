/*
 * test_draft_accept.c — the shared verification of drafts
 * (tkv_seq_accept_draft, what tkv_seq_decode_draft and the server's
 * many-sequence steps use) and the draft budget (tkv_draft_budget_next),
 * against independent expectations:
 *  - three sequences (greedy, seeded, seeded with a repeat penalty) decode
 *    their pending tokens and drafts together in one batch, step after
 *    step; the drafts are the one-token-at-a-time answer's next tokens with
 *    one changed at a random place (or none): each verification returns
 *    exactly that answer's tokens, as many as the first changed draft
 *    allows, hands each to the callback with its row's logits, leaves the
 *    sequence holding exactly what one-at-a-time decoding leaves, and the
 *    whole answer equals the one-at-a-time one (a llama and a delta-net
 *    hybrid, whose rejected drafts are recomputed from a checkpoint);
 *  - a callback that stops early gets no more tokens, and the sequence
 *    then holds no token past the last returned;
 *  - bad arguments (a row without logits, a draft the sequence does not end
 *    with, max_out 0, NULL) change neither the sequence nor the sampler;
 *  - the budget follows the header's rule, step by step.
 */
#include "testutil.h"

#include <string.h>

#define N_SEQ 3
#define MAX_GEN 48

static tkv_sampler *sampler_for(const tkv_model *m, int which) {
    static const struct {
        float temp, penalty;
        uint64_t seed;
    } cfg[N_SEQ] = {{0, 1, 0}, {0.8f, 1, 7}, {1.0f, 1.3f, 3}};
    tkv_sampler_params sp = tkv_sampler_default_params();
    sp.temperature = cfg[which].temp;
    sp.top_k = 40;
    sp.seed = cfg[which].seed;
    sp.repeat_penalty = cfg[which].penalty;
    tkv_sampler *s = NULL;
    assert_int_equal(tkv_sampler_create(&sp, tkv_vocab_size(m), &s), TKV_OK);
    return s;
}

/* tu_context with room for every sequence's pending token and drafts in one batch */
static tkv_context *context(const tkv_model *m, uint32_t n_cells, uint32_t n_seq) {
    tkv_context_params p = tkv_context_default_params();
    p.n_cells = n_cells;
    p.n_seq_max = n_seq;
    p.n_threads = 2;
    p.n_batch = N_SEQ * (TKV_DRAFT_MAX + 1);
    tkv_context *ctx = NULL;
    if (tkv_context_create(m, &p, &ctx) != TKV_OK) fail_msg("%s", tkv_last_error(NULL));
    return ctx;
}

static size_t prompt(const tkv_model *m, const char *text, tkv_token *t, size_t cap) {
    size_t n = 0;
    assert_int_equal(tkv_tokenize(m, text, strlen(text), TKV_TOKENIZE_ADD_SPECIAL, t, cap, &n), TKV_OK);
    return n;
}

/* The model: one token at a time, up to n_gen tokens, stopping before an end of generation. */
static size_t one_at_a_time(const tkv_model *m, const tkv_token *p, size_t n_p, int which, tkv_token *gen,
                            size_t n_gen) {
    tkv_context *ctx = context(m, 256, 1);
    tkv_sampler *smp = sampler_for(m, which);
    const size_t n = tu_generate(ctx, 0, p, n_p, smp, gen, n_gen);
    tkv_sampler_free(smp);
    tkv_context_free(ctx);
    return n;
}

typedef struct seen {
    tkv_context *ctx;
    tkv_seq seq;
    size_t row, n, stop_after; /* stop_after: return false after this many tokens (0: never) */
    uint32_t held_at_last;     /* the sequence's length when the last token came */
    tkv_token tok[TKV_DRAFT_MAX + 1];
} seen;

static bool on_token(void *user, size_t i, tkv_token token, const float *logits) {
    seen *s = user;
    assert_int_equal(i, s->n);                                     /* in order, once each */
    assert_ptr_equal(logits, tkv_get_logits(s->ctx, s->row + i)); /* its row */
    s->tok[s->n++] = token;
    s->held_at_last = (uint32_t)tkv_seq_len(s->ctx, s->seq);
    return !s->stop_after || s->n < s->stop_after;
}

/* What the sequence holds after generating gen[0..n) after p: p and every generated token but the last. */
static void assert_seq_holds(tkv_context *ctx, tkv_seq s, const tkv_token *p, size_t n_p, const tkv_token *gen,
                             size_t n) {
    tkv_token held[256];
    size_t len = 0;
    assert_int_equal(tkv_seq_tokens(ctx, s, held, 256, &len), TKV_OK);
    assert_int_equal(len, n_p + (n ? n - 1 : 0));
    assert_memory_equal(held, p, n_p * sizeof *p);
    if (n > 1) assert_memory_equal(held + n_p, gen, (n - 1) * sizeof *gen);
}

/* N_SEQ sequences drafting together in one batch per step, against the one-at-a-time answers. */
static void batched_against_one_at_a_time(const tkv_model *m, size_t n_gen, size_t max_draft) {
    static const char *const texts[N_SEQ] = {"Once upon a time, there was a dog. The dog", "Lily and Tom went to the",
                                             "The sun was hot and the little bird"};
    tkv_token p[N_SEQ][64], base[N_SEQ][MAX_GEN], gen[N_SEQ][MAX_GEN];
    size_t n_p[N_SEQ], nb[N_SEQ], ng[N_SEQ] = {0};
    tkv_sampler *smp[N_SEQ];
    tkv_context *ctx = context(m, 512, N_SEQ);
    for (int s = 0; s < N_SEQ; s++) {
        n_p[s] = prompt(m, texts[s], p[s], 64);
        nb[s] = one_at_a_time(m, p[s], n_p[s], s, base[s], n_gen);
        assert_true(nb[s] >= 4);
        smp[s] = sampler_for(m, s);
        assert_int_equal(tkv_seq_sync(ctx, s, 0, p[s], n_p[s], NULL), TKV_OK);
        gen[s][ng[s]++] = tkv_sampler_sample(smp[s], tkv_get_logits_last(ctx));
        assert_int_equal(gen[s][0], base[s][0]);
    }
    size_t accepted = 0, rejected = 0;
    for (;;) {
        tkv_token tok[N_SEQ * (TKV_DRAFT_MAX + 1)], draft[N_SEQ][TKV_DRAFT_MAX];
        tkv_pos pos[N_SEQ * (TKV_DRAFT_MAX + 1)];
        tkv_seq sq[N_SEQ * (TKV_DRAFT_MAX + 1)];
        bool want[N_SEQ * (TKV_DRAFT_MAX + 1)];
        size_t n = 0, row[N_SEQ], nd[N_SEQ], bad[N_SEQ];
        bool live[N_SEQ];
        for (int s = 0; s < N_SEQ; s++) {
            live[s] = ng[s] < nb[s];
            if (!live[s]) continue;
            /* drafts: the answer's next tokens, the one at `bad` changed (bad == nd: none changed) */
            const size_t g = ng[s], room = nb[s] - g - 1;
            nd[s] = tu_rand((unsigned)(max_draft < room ? max_draft : room) + 1);
            bad[s] = tu_rand((unsigned)nd[s] + 1);
            for (size_t k = 0; k < nd[s]; k++) draft[s][k] = base[s][g + k];
            if (bad[s] < nd[s]) draft[s][bad[s]] = (draft[s][bad[s]] + 1) % (tkv_token)tkv_vocab_size(m);
            row[s] = n;
            const size_t L = n_p[s] + g - 1; /* held before the pending token */
            for (size_t k = 0; k <= nd[s]; k++, n++) {
                tok[n] = k ? draft[s][k - 1] : gen[s][g - 1];
                pos[n] = (tkv_pos)(L + k), sq[n] = s, want[n] = true;
            }
        }
        if (!n) break;
        const tkv_batch b = {n, tok, pos, sq, want};
        assert_int_equal(tkv_decode(ctx, &b), TKV_OK);
        for (int s = 0; s < N_SEQ; s++) {
            if (!live[s]) continue;
            const size_t g = ng[s], L0 = n_p[s] + g - 1, max_out = nb[s] - g;
            tkv_token out[TKV_DRAFT_MAX + 1];
            size_t n_out = 0;
            seen v = {.ctx = ctx, .seq = s, .row = row[s]};
            assert_int_equal(tkv_seq_accept_draft(ctx, s, row[s], draft[s], nd[s], smp[s], max_out, on_token, &v, out,
                                                  &n_out),
                             TKV_OK);
            const size_t want_n = bad[s] + 1; /* the drafts before the changed one, then the model's own token */
            assert_int_equal(n_out, want_n);
            assert_memory_equal(out, base[s] + g, n_out * sizeof *out);
            assert_int_equal(v.n, n_out);
            assert_memory_equal(v.tok, out, n_out * sizeof *out);
            assert_int_equal(v.held_at_last, L0 + n_out); /* the rejected drafts were gone when the last came */
            memcpy(gen[s] + g, out, n_out * sizeof *out);
            ng[s] += n_out;
            accepted += n_out - 1, rejected += nd[s] - (n_out - 1);
            assert_seq_holds(ctx, s, p[s], n_p[s], gen[s], ng[s]);
        }
        assert_int_equal(tkv_cache_check(ctx), TKV_OK);
    }
    for (int s = 0; s < N_SEQ; s++) {
        assert_int_equal(ng[s], nb[s]);
        assert_memory_equal(gen[s], base[s], nb[s] * sizeof *gen[s]);
        tkv_sampler_free(smp[s]);
    }
    assert_true(accepted > 0 && rejected > 0); /* both paths were taken */
    tkv_context_free(ctx);
}

static void test_batched_llama(void **state) {
    (void)state;
    batched_against_one_at_a_time(tu_model, MAX_GEN, 8);
}

static void test_batched_hybrid(void **state) {
    (void)state;
    tkv_model *m = NULL;
    assert_int_equal(tkv_model_load(tu_shared("models/arch/qwen35.gguf"), NULL, &m), TKV_OK);
    batched_against_one_at_a_time(m, 20, 6);
    tkv_model_free(m);
}

/* The start of a single-sequence case: text's tokens into p (room for 64), n_gen tokens of sampler `which`
   one at a time into base (all of them: no end of generation before), and a context (n_seq sequences) whose
   sequence 0 holds the prompt, with *smp having sampled base[0] from it. Returns the prompt's length. */
static size_t begin(const char *text, int which, size_t n_gen, uint32_t n_seq, tkv_token *p, tkv_token *base,
                    tkv_context **ctx, tkv_sampler **smp) {
    const size_t n_p = prompt(tu_model, text, p, 64);
    assert_int_equal(one_at_a_time(tu_model, p, n_p, which, base, n_gen), n_gen);
    *ctx = context(tu_model, 256, n_seq);
    *smp = sampler_for(tu_model, which);
    assert_int_equal(tkv_seq_sync(*ctx, 0, 0, p, n_p, NULL), TKV_OK);
    assert_int_equal(tkv_sampler_sample(*smp, tkv_get_logits_last(*ctx)), base[0]);
    return n_p;
}

/* A callback that stops after two tokens of a right draft: two tokens, and the sequence holds pending and the
   first of them only. */
static void test_callback_stops(void **state) {
    (void)state;
    tkv_token p[64], base[16];
    tkv_context *ctx;
    tkv_sampler *smp;
    const size_t n_p = begin("Once upon a time, there was a dog. The dog", 0, 10, 1, p, base, &ctx, &smp);
    tkv_token tok[6], out[6];
    tkv_pos pos[6];
    tkv_seq sq[6] = {0};
    bool want[6];
    for (int k = 0; k < 6; k++) tok[k] = base[k], pos[k] = (tkv_pos)(n_p + k), want[k] = true;
    assert_int_equal(tkv_decode(ctx, &(tkv_batch){6, tok, pos, sq, want}), TKV_OK);
    seen v = {.ctx = ctx, .seq = 0, .row = 0, .stop_after = 2};
    size_t n_out = 0;
    assert_int_equal(tkv_seq_accept_draft(ctx, 0, 0, base + 1, 5, smp, 10, on_token, &v, out, &n_out), TKV_OK);
    assert_int_equal(n_out, 2);
    assert_memory_equal(out, base + 1, 2 * sizeof *out);
    assert_int_equal(tkv_seq_len(ctx, 0), (tkv_pos)(n_p + 2)); /* base[0] (pending) and base[1] */
    assert_int_equal(tkv_cache_check(ctx), TKV_OK);
    tkv_sampler_free(smp);
    tkv_context_free(ctx);
}

/* Bad arguments change nothing: afterwards the same call with good ones answers as one-at-a-time decoding. */
static void test_bad_arguments_change_nothing(void **state) {
    (void)state;
    tkv_token p[64], base[16];
    tkv_context *ctx;
    tkv_sampler *smp;
    const size_t n_p = begin("Lily and Tom went to the", 1, 8, 2, p, base, &ctx, &smp);
    tkv_token tok[4] = {base[0], base[1], base[2], base[3]}, out[8], wrong[2] = {base[2] + 1, base[3]};
    tkv_pos pos[4];
    tkv_seq sq[4] = {0};
    bool want[4] = {true, true, true, false}; /* the last draft's row has no logits */
    for (int k = 0; k < 4; k++) pos[k] = (tkv_pos)(n_p + k);
    assert_int_equal(tkv_decode(ctx, &(tkv_batch){4, tok, pos, sq, want}), TKV_OK);
    size_t n_out = 99;
    assert_int_equal(tkv_seq_accept_draft(ctx, 0, 0, base + 1, 3, smp, 8, NULL, NULL, out, &n_out), TKV_ERR_INVALID);
    assert_non_null(strstr(tkv_context_error(ctx), "row 3"));
    assert_int_equal(n_out, 0);
    assert_int_equal(tkv_seq_accept_draft(ctx, 0, 0, wrong, 2, smp, 8, NULL, NULL, out, &n_out), TKV_ERR_INVALID);
    assert_non_null(strstr(tkv_context_error(ctx), "ends with"));
    assert_int_equal(tkv_seq_accept_draft(ctx, 0, 0, base + 1, 2, smp, 0, NULL, NULL, out, &n_out), TKV_ERR_INVALID);
    assert_non_null(strstr(tkv_context_error(ctx), "max_out"));
    assert_int_equal(tkv_seq_accept_draft(ctx, 0, 0, base + 1, 2, NULL, 8, NULL, NULL, out, &n_out), TKV_ERR_INVALID);
    assert_int_equal(tkv_seq_accept_draft(ctx, 2, 0, base + 1, 2, smp, 8, NULL, NULL, out, &n_out), TKV_ERR_INVALID);
    assert_int_equal(tkv_seq_accept_draft(ctx, 1, 0, base + 1, 2, smp, 8, NULL, NULL, out, &n_out), TKV_ERR_INVALID);
    assert_int_equal(tkv_seq_len(ctx, 0), (tkv_pos)(n_p + 4));
    /* the sequence holds pending and three drafts; the first two are verified (the third's row has none), so
       the sequence's last two must be the draft: release the third, then verify the two */
    assert_int_equal(tkv_seq_truncate(ctx, 0, (tkv_pos)(n_p + 3)), TKV_OK);
    assert_int_equal(tkv_seq_accept_draft(ctx, 0, 0, base + 1, 2, smp, 8, NULL, NULL, out, &n_out), TKV_OK);
    assert_int_equal(n_out, 3);
    assert_memory_equal(out, base + 1, 3 * sizeof *out); /* the sampler's draws were untouched by the failures */
    assert_int_equal(tkv_seq_len(ctx, 0), (tkv_pos)(n_p + 3));
    assert_int_equal(tkv_cache_check(ctx), TKV_OK);
    tkv_sampler_free(smp);
    tkv_context_free(ctx);
}

/* The header's rule for tkv_draft_budget_next, step by step. */
static void test_budget(void **state) {
    (void)state;
    tkv_draft_budget b = {0};
    static const struct {
        size_t max, offered, accepted, ask;
    } steps[] = {
        {8, 0, 0, 8},  /* the first step: all of max */
        {8, 8, 8, 8},  /* all accepted: max */
        {8, 8, 3, 4},  /* partial: one more than accepted */
        {8, 4, 4, 8},  /* all accepted: doubled, within max */
        {8, 8, 0, 4},  /* none: halved */
        {8, 4, 0, 2},  {8, 2, 0, 1},
        {8, 1, 0, 0},  /* halved to zero: no drafts for 1 step */
        {8, 0, 0, 1},  /* then a one-token probe */
        {8, 1, 0, 0},  /* none again: 2 steps without */
        {8, 0, 0, 0},  {8, 0, 0, 1},
        {8, 1, 1, 2},  /* accepted: doubled, and the pause starts at 1 again */
        {8, 2, 0, 1},  {8, 1, 0, 0}, {8, 0, 0, 1},
        {4, 0, 0, 4},  /* another max starts over */
        {0, 4, 4, 0},  /* 0: none */
        {100, 0, 0, TKV_DRAFT_MAX}, /* capped */
    };
    for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++) {
        const size_t ask = tkv_draft_budget_next(&b, steps[i].max, steps[i].offered, steps[i].accepted);
        if (ask != steps[i].ask) fail_msg("step %zu: asked %zu, the rule says %zu", i, ask, steps[i].ask);
    }
    /* 64 steps without drafts at most between probes */
    b = (tkv_draft_budget){0};
    (void)tkv_draft_budget_next(&b, 1, 0, 0);
    size_t longest = 0;
    for (int probe = 0; probe < 12; probe++) {
        size_t quiet = 0;
        while (!tkv_draft_budget_next(&b, 1, quiet ? 0 : 1, 0)) quiet++;
        longest = quiet > longest ? quiet : longest;
    }
    assert_int_equal(longest, 64);
    assert_int_equal(tkv_draft_budget_next(NULL, 8, 0, 0), 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_batched_llama),
        cmocka_unit_test(test_batched_hybrid),
        cmocka_unit_test(test_callback_stops),
        cmocka_unit_test(test_bad_arguments_change_nothing),
        cmocka_unit_test(test_budget),
    };
    return TU_RESULT(cmocka_run_group_tests(tests, tu_stories_setup, tu_stories_teardown));
}
