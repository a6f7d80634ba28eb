/*
 * test_example_service.c — the example service (examples/prefix_service.c)
 * run as a program on a scripted conversation: sessions sharing a system
 * prompt, second turns that quote the first turn's answer, a request
 * cancelled in its prompt and retried, one cancelled midway through its
 * answer, one with an invalid token.
 *
 * Everything expected is computed here, independently of the cache:
 *   - answers: each request alone in a fresh process of the example (nothing
 *     to reuse), and again here with a fresh context, tkv_decode of the whole
 *     prompt and an argmax of our own;
 *   - reused_tokens: this test's own record of every token list the service
 *     decoded so far (prompt + generated tokens but the last, which is never
 *     decoded; for a request cancelled midway, what was decoded before the
 *     cancel). A prompt of n tokens reuses min(n - 1, the longest common
 *     prefix with any of them): tkv_seq_sync decodes a fully cached prompt's
 *     last token again for its logits.
 */
#include "testutil.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define MAX_TOK 1024
#define MAX_REQ 16
#define MAX_LISTS 32

static tkv_model *model;
static uint32_t n_layer;

/* A token list: what the service decoded for one request. */
typedef struct list {
    tkv_token t[MAX_TOK];
    size_t n;
} list;

/* Run the example with `input` on stdin; returns its stdout (malloc'd). */
static char *run_service(const char *input) {
    char in[] = "/tmp/tkv-svc-in-XXXXXX", out[] = "/tmp/tkv-svc-out-XXXXXX";
    int fi = mkstemp(in), fo = mkstemp(out);
    assert_true(fi >= 0 && fo >= 0);
    assert_int_equal(write(fi, input, strlen(input)), (ssize_t)strlen(input));
    close(fi), close(fo);
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "'%s' -m '%s' -t 2 <'%s' >'%s'", TKV_EXAMPLE_BIN, tu_shared("models/stories260K.gguf"),
             in, out);
    int st = system(cmd);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
    size_t n;
    char *s = (char *)tu_read_file(out, &n);
    assert_non_null(s);
    s = realloc(s, n + 1);
    s[n] = '\0';
    remove(in), remove(out);
    return s;
}

/* The lines of s as JSON objects; returns how many. */
static size_t parse_lines(char *s, json_t **out, size_t cap) {
    size_t k = 0;
    for (char *line = strtok(s, "\n"); line; line = strtok(NULL, "\n")) {
        assert_true(k < cap);
        json_error_t err;
        out[k] = json_loads(line, 0, &err);
        if (!out[k]) fail_msg("not JSON: %s (%s)", line, err.text);
        k++;
    }
    return k;
}

static void tokenize(const char *text, list *l) {
    assert_int_equal(tkv_tokenize(model, text, strlen(text), TKV_TOKENIZE_ADD_SPECIAL, l->t, MAX_TOK, &l->n), TKV_OK);
}

static size_t lcp(const list *a, const list *b) {
    size_t i = 0;
    while (i < a->n && i < b->n && a->t[i] == b->t[i]) i++;
    return i;
}

/* What a fresh context does with a prompt: decode it whole, take the argmax
   of the logits, decode every generated token but the last. `decoded`
   receives prompt + the decoded tokens, `gen` the generated ones, `text`
   their text as a continuation of the prompt's. */
static void generate_fresh(const list *prompt, int max_tokens, list *decoded, list *gen, char *text, size_t cap) {
    tkv_context_params p = tkv_context_default_params();
    p.n_threads = 2, p.batch_invariant = true;
    tkv_context *ctx;
    assert_int_equal(tkv_context_create(model, &p, &ctx), TKV_OK);
    static tkv_pos pos[MAX_TOK];
    static tkv_seq seq[MAX_TOK];
    for (size_t i = 0; i < MAX_TOK; i++) pos[i] = (tkv_pos)i, seq[i] = 0;
    *decoded = *prompt;
    gen->n = 0;
    tkv_batch b = {prompt->n, prompt->t, pos, seq, NULL};
    assert_int_equal(tkv_decode(ctx, &b), TKV_OK);
    const float *logits = tkv_get_logits(ctx, prompt->n - 1);
    const size_t n_vocab = tkv_vocab_size(model);
    for (int i = 0; i < max_tokens; i++) {
        tkv_token best = 0;
        for (size_t v = 1; v < n_vocab; v++)
            if (logits[v] > logits[best]) best = (tkv_token)v;
        if (tkv_token_is_eog(model, best)) break;
        gen->t[gen->n++] = best;
        if (i + 1 == max_tokens) break;
        decoded->t[decoded->n] = best;
        tkv_batch one = {1, &decoded->t[decoded->n], &pos[decoded->n], seq, NULL};
        decoded->n++;
        assert_int_equal(tkv_decode(ctx, &one), TKV_OK);
        logits = tkv_get_logits(ctx, 0);
    }
    tkv_context_free(ctx);
    /* the text of prompt + answer, less the prompt's */
    list all = *prompt;
    memcpy(all.t + all.n, gen->t, gen->n * sizeof *gen->t);
    all.n += gen->n;
    size_t n_before, n_all;
    char *before = malloc(cap);
    assert_int_equal(tkv_detokenize(model, prompt->t, prompt->n, 0, before, cap, &n_before), TKV_OK);
    assert_int_equal(tkv_detokenize(model, all.t, all.n, 0, text, cap, &n_all), TKV_OK);
    assert_memory_equal(text, before, n_before);
    memmove(text, text + n_before, n_all - n_before + 1);
    free(before);
}

typedef struct request {
    const char *session;
    char prompt[4096];
    int max_tokens;
    long abort_after; /* abort_after_layers, or -1 */
    bool bad_token;   /* send "tokens": [BOS, 99999] instead of the prompt */
    /* the reference, from requests answered alone */
    list tokens, decoded, gen;
    char text[4096];
} request;

static request reqs[MAX_REQ];
static size_t n_req;

static request *add(const char *session, int max_tokens, long abort_after, const char *fmt, ...) {
    assert_true(n_req < MAX_REQ);
    request *r = &reqs[n_req++];
    memset(r, 0, sizeof *r);
    r->session = session, r->max_tokens = max_tokens, r->abort_after = abort_after;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->prompt, sizeof r->prompt, fmt, ap);
    va_end(ap);
    if (!fmt[0]) {
        r->bad_token = true;
        return r;
    }
    /* the reference: this request alone, in a fresh process and in a fresh context */
    tokenize(r->prompt, &r->tokens);
    generate_fresh(&r->tokens, max_tokens, &r->decoded, &r->gen, r->text, sizeof r->text);
    json_t *j = json_pack("{s:s, s:s, s:i}", "session", session, "prompt", r->prompt, "max_tokens", max_tokens);
    char *line = json_dumps(j, JSON_COMPACT);
    char *input = malloc(strlen(line) + 2);
    sprintf(input, "%s\n", line);
    char *out = run_service(input);
    json_t *lines[2];
    assert_int_equal(parse_lines(out, lines, 2), 2);
    json_t *text = json_object_get(lines[0], "text");
    if (!json_is_string(text)) fail_msg("request %zu alone failed: %s", n_req - 1, json_dumps(lines[0], 0));
    assert_string_equal(json_string_value(text), r->text);
    assert_int_equal(json_integer_value(json_object_get(lines[0], "reused_tokens")), 0);
    assert_int_equal(json_integer_value(json_object_get(lines[0], "prompt_tokens")), r->tokens.n);
    json_decref(lines[0]), json_decref(lines[1]), json_decref(j);
    free(line), free(input), free(out);
    return r;
}

/* The conversation, every request against one process of the example. */
static void test_conversation(void **state) {
    (void)state;
    const char *sys = "Once upon a time, there was a little robot named Bolt who lived in a big city.";
    const long in_prompt = 2;                    /* aborts the prompt's pass at its third layer */
    const long in_answer = (long)n_layer * 4 + 2; /* the prompt's pass and 3 tokens' pass, then aborts */
    n_req = 0;
    request *a1 = add("alice", 12, -1, "%s Bolt liked to", sys);
    request *b1 = add("bob", 12, -1, "%s One day, Bolt", sys);
    add("alice", 10, -1, "%s%s Then Bolt said,", a1->prompt, a1->text); /* turn 2 quotes turn 1 */
    request *c1 = add("carol", 8, in_prompt, "%s Bolt was sad because", sys);
    add("carol", 8, -1, "%s", c1->prompt); /* the retry */
    request *d1 = add("dave", 12, in_answer, "%s Bolt had a friend", sys);
    add("erin", 6, -1, "%s%s", d1->prompt, d1->text); /* quotes the answer dave's cancel cut short */
    add("bob", 4, -1, "");                              /* an invalid token */
    add("bob", 10, -1, "%s%s The sun was", b1->prompt, b1->text);
    add("dave", 12, -1, "%s", d1->prompt); /* the retry */

    /* the script, and what the service must answer */
    size_t len = 0;
    char *script = NULL;
    FILE *f = open_memstream(&script, &len);
    for (size_t i = 0; i < n_req; i++) {
        request *r = &reqs[i];
        json_t *j = r->bad_token ? json_pack("{s:s, s:[i, i]}", "session", r->session, "tokens",
                                             (int)tkv_token_bos(model), 99999)
                                 : json_pack("{s:s, s:s, s:i}", "session", r->session, "prompt", r->prompt,
                                             "max_tokens", r->max_tokens);
        if (r->abort_after >= 0) json_object_set_new(j, "abort_after_layers", json_integer(r->abort_after));
        char *line = json_dumps(j, JSON_COMPACT);
        fprintf(f, "%s\n", line);
        free(line);
        json_decref(j);
    }
    fclose(f);
    char *out = run_service(script);
    json_t *lines[MAX_REQ + 1];
    assert_int_equal(parse_lines(out, lines, MAX_REQ + 1), n_req + 1);

    static list cached[MAX_LISTS]; /* every token list decoded so far */
    size_t n_cached = 0, total_reused = 0;
    struct { const char *name; list held; } sessions[8];
    size_t n_sessions = 0;
    for (size_t i = 0; i < n_req; i++) {
        request *r = &reqs[i];
        json_t *got = lines[i];
        assert_string_equal(json_string_value(json_object_get(got, "session")), r->session);
        size_t s = 0;
        while (s < n_sessions && strcmp(sessions[s].name, r->session)) s++;
        if (s == n_sessions) sessions[n_sessions].name = r->session, sessions[n_sessions++].held.n = 0;
        if (r->bad_token) { /* rejected before anything changes */
            const char *err = json_string_value(json_object_get(got, "error"));
            assert_non_null(err);
            assert_non_null(strstr(err, "TKV_ERR_INVALID"));
            assert_non_null(strstr(err, "99999"));
            continue;
        }
        size_t longest = 0;
        for (size_t k = 0; k < n_cached; k++) {
            size_t m = lcp(&r->tokens, &cached[k]);
            if (m > longest) longest = m;
        }
        const size_t reused = longest < r->tokens.n ? longest : r->tokens.n - 1;
        total_reused += reused;
        list *now = &cached[n_cached++]; /* what this request leaves decoded */
        assert_true(n_cached <= MAX_LISTS);
        if (r->abort_after < 0) {
            printf("request %zu (%s): %zu tokens, %zu reused\n", i, r->session, r->tokens.n, reused);
            if (!json_is_string(json_object_get(got, "text"))) fail_msg("request %zu failed: %s", i, json_dumps(got, 0));
            assert_string_equal(json_string_value(json_object_get(got, "text")), r->text);
            assert_int_equal(json_integer_value(json_object_get(got, "prompt_tokens")), r->tokens.n);
            assert_int_equal(json_integer_value(json_object_get(got, "reused_tokens")), reused);
            *now = r->decoded;
        } else {
            const char *err = json_string_value(json_object_get(got, "error"));
            if (!err) fail_msg("request %zu was not cancelled: %s", i, json_dumps(got, 0));
            assert_non_null(strstr(err, "TKV_ERR_ABORTED"));
            /* cancelled in the prompt's pass: the session holds the reused
               prefix; in the answer's: the prompt and the tokens decoded */
            *now = r->tokens;
            if (r->abort_after < (long)n_layer) now->n = reused;
            for (long k = 0; k < (r->abort_after - (long)n_layer) / (long)n_layer; k++) now->t[now->n++] = r->gen.t[k];
            size_t cached_now = 0;
            for (size_t k = 0; k < n_cached; k++) {
                size_t m = lcp(&r->tokens, &cached[k]);
                if (m > cached_now) cached_now = m;
            }
            printf("request %zu (%s): cancelled, %zu of its %zu tokens cached\n", i, r->session, cached_now,
                   r->tokens.n);
            assert_int_equal(json_integer_value(json_object_get(got, "cached_tokens")), cached_now);
        }
        sessions[s].held = *now;
    }
    /* the scenario does what it says: the second turns and the quote of the
       cancelled answer reuse generated tokens, beyond the quoted prompt */
    assert_true(json_integer_value(json_object_get(lines[2], "reused_tokens")) > (json_int_t)reqs[0].tokens.n);
    assert_true(json_integer_value(json_object_get(lines[6], "reused_tokens")) > (json_int_t)reqs[5].tokens.n);

    /* the summary: what each session holds, as the cache says */
    json_t *sum = json_object_get(lines[n_req], "summary");
    assert_non_null(sum);
    assert_string_equal(json_string_value(json_object_get(sum, "check")), "TKV_OK");
    assert_int_equal(json_integer_value(json_object_get(sum, "tokens_reused")), total_reused);
    json_t *ss = json_object_get(sum, "sessions");
    assert_int_equal(json_array_size(ss), n_sessions);
    for (size_t s = 0; s < n_sessions; s++) {
        json_t *got = json_array_get(ss, s);
        char text[8192];
        size_t n;
        assert_int_equal(tkv_detokenize(model, sessions[s].held.t, sessions[s].held.n, 0, text, sizeof text, &n),
                         TKV_OK);
        assert_string_equal(json_string_value(json_object_get(got, "session")), sessions[s].name);
        assert_int_equal(json_integer_value(json_object_get(got, "cached_tokens")), sessions[s].held.n);
        assert_string_equal(json_string_value(json_object_get(got, "text")), text);
    }
    for (size_t i = 0; i <= n_req; i++) json_decref(lines[i]);
    free(out);
    free(script);
}

/* Bad input gets an error line and the service goes on. */
static void test_bad_requests(void **state) {
    (void)state;
    char *out = run_service("not json\n"
                            "{\"prompt\": \"no session\"}\n"
                            "{\"session\": \"x\", \"prompt\": \"Hi\", \"max_tokens\": \"many\"}\n"
                            "{\"session\": \"x\"}\n"
                            "\n"
                            "{\"session\": \"x\", \"prompt\": \"Hi\", \"max_tokens\": 2}\n");
    json_t *lines[8];
    assert_int_equal(parse_lines(out, lines, 8), 6);
    for (int i = 0; i < 4; i++) {
        const char *err = json_string_value(json_object_get(lines[i], "error"));
        if (!err) fail_msg("line %d: no error: %s", i, json_dumps(lines[i], 0));
        assert_non_null(strstr(err, "TKV_ERR_INVALID"));
    }
    assert_true(json_is_string(json_object_get(lines[4], "text")));
    assert_string_equal(json_string_value(json_object_get(json_object_get(lines[5], "summary"), "check")), "TKV_OK");
    for (int i = 0; i < 6; i++) json_decref(lines[i]);
    free(out);
}

static int setup(void **state) {
    (void)state;
    if (tkv_model_load(tu_shared("models/stories260K.gguf"), NULL, &model) != TKV_OK) return -1;
    tkv_hparams hp;
    if (tkv_model_hparams(model, &hp) != TKV_OK) return -1;
    n_layer = hp.n_layer;
    return 0;
}

static int teardown(void **state) {
    (void)state;
    tkv_model_free(model);
    return 0;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_conversation),
        cmocka_unit_test(test_bad_requests),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
