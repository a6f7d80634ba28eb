/*
 * prefix_service.c — the program tokenkv is for: a service that answers the
 * prompts of many sessions and lets the KV cache, not the program, remember
 * what has been computed. Read it as the API's tutorial.
 *   tokenkv-example-service [-m MODEL] [-t THREADS] < requests.jsonl
 * A request per line: {"session": "alice", "prompt": "...", "max_tokens": 16}
 * ("tokens": [ids] may replace "prompt"; "abort_after_layers": N cancels it
 * through the abort callback after N layer checks, for the tests). Its answer,
 * a line: {"session", "text", "prompt_tokens", "reused_tokens", "ms"}, or on
 * failure {"session", "error", "cached_tokens"}. At the end of input, a line
 * {"summary": ...} says what each session holds, asking the cache.
 */
#define _POSIX_C_SOURCE 200809L /* open_memstream */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <tokenkv.h>

#define MAX_SESSIONS 64
/* The whole state of the service. Note what is not here: a list of the
   tokens each session has seen. The cache knows them (tkv_seq_tokens), and
   which prefix of any new prompt it has computed, for every session
   (tkv_cache_match, tkv_seq_sync), so no copy can fall out of sync with it,
   not even after a failed or cancelled request. */
typedef struct service {
    tkv_model *model; /* immutable: could be shared by many contexts and threads */
    tkv_context *ctx; /* the KV cache and the compute; one thread at a time */
    tkv_sampler *greedy;
    tkv_detok *detok;
    json_t *sessions; /* session i is sequence i: an array of names */
    long abort_after; /* layer checks left before the abort callback says stop; < 0: never */
} service;

/* Called by a decode before each layer; true makes that decode fail with
   TKV_ERR_ABORTED and leaves the cache as it was before the decode. A real
   service would check for a client that went away, or a deadline. */
static bool should_abort(void *user) {
    service *sv = user;
    return sv->abort_after >= 0 && sv->abort_after-- == 0;
}

static tkv_seq session_seq(service *sv, const char *name) {
    size_t i;
    json_t *s;
    json_array_foreach(sv->sessions, i, s) if (!strcmp(json_string_value(s), name)) return (tkv_seq)i;
    return i < MAX_SESSIONS && !json_array_append_new(sv->sessions, json_string(name)) ? (tkv_seq)i : -1;
}

static json_t *fail(json_t *reply, tkv_status st, const char *why) { /* "TKV_ERR_ABORTED: decode aborted ..." */
    return json_object_set_new(reply, "error", json_sprintf("%s: %s", tkv_status_str(st), why)), reply;
}

/* The request's prompt as tokens: tokenized here ("prompt", with the BOS the
   vocabulary asks for) or by the client ("tokens"; tkv_seq_sync checks ids). */
static tkv_status prompt_tokens(service *sv, json_t *req, tkv_token **out, size_t *n) {
    const char *text = json_string_value(json_object_get(req, "prompt"));
    json_t *ids = json_object_get(req, "tokens");
    *n = json_array_size(ids); /* 0 when absent; for text, a first call with no room tells the size: */
    if (text) tkv_tokenize(sv->model, text, strlen(text), TKV_TOKENIZE_ADD_SPECIAL, NULL, 0, n);
    if (!(*out = malloc((*n + 1) * sizeof **out))) return TKV_ERR_NOMEM;
    if (text) return tkv_tokenize(sv->model, text, strlen(text), TKV_TOKENIZE_ADD_SPECIAL, *out, *n, n);
    for (size_t i = 0; i < *n; i++) (*out)[i] = (tkv_token)json_integer_value(json_array_get(ids, i));
    return TKV_OK;
}

static double now_ms(void) {
    struct timespec ts;
    return clock_gettime(CLOCK_MONOTONIC, &ts), 1e3 * (double)ts.tv_sec + 1e-6 * (double)ts.tv_nsec;
}

/* Answer one request: make the session's sequence hold the prompt, reusing
   what the cache has, then generate greedily, decoding each sampled token. */
static json_t *answer(service *sv, json_t *req, json_t *reply) {
    const char *session = json_string_value(json_object_get(req, "session"));
    json_t *max = json_object_get(req, "max_tokens"), *abort_after = json_object_get(req, "abort_after_layers");
    json_int_t max_tokens = max ? json_integer_value(max) : 16;
    if (!session || (max && !json_is_integer(max)) || max_tokens < 0)
        return fail(reply, TKV_ERR_INVALID, "need a \"session\" and an integer max_tokens >= 0");
    tkv_seq seq = session_seq(sv, session);
    if (seq < 0) return fail(reply, TKV_ERR_FULL, "too many sessions");
    tkv_token *prompt = NULL;
    size_t n = 0, reused = 0, len, text_len;
    tkv_status st = prompt_tokens(sv, req, &prompt, &n);
    if (st || !n) {
        free(prompt);
        return fail(reply, st ? st : TKV_ERR_INVALID, st ? tkv_last_error(NULL) : "need a \"prompt\" or \"tokens\"");
    }
    const double t0 = now_ms();
    sv->abort_after = json_is_integer(abort_after) ? (long)json_integer_value(abort_after) : -1;
    /* The one call that matters: seq now holds exactly the prompt. The
       longest prefix of it that any sequence computed before (this session's
       last turn, another session's identical system prompt) is reused as is,
       and only the rest is decoded. When the whole prompt is cached, its last
       token is decoded again for its logits, so at most n - 1 are reused. */
    st = tkv_seq_sync(sv->ctx, seq, 0, prompt, n, &reused);
    const char *piece = NULL;
    char *text = NULL; /* the answer's text; its tokens, only the cache keeps */
    FILE *out = open_memstream(&text, &text_len);
    tkv_detok_reset(sv->detok);
    const float *logits = tkv_get_logits_last(sv->ctx); /* valid until the next decode */
    for (json_int_t i = 0; !st && out && i < max_tokens; i++) {
        tkv_token t = tkv_sampler_sample(sv->greedy, logits);
        if (tkv_token_is_eog(sv->model, t)) break;
        if (!tkv_detok_push(sv->detok, t, &piece, &len)) fwrite(piece, 1, len, out);
        if (i + 1 == max_tokens) break; /* the last token is never decoded: no one needs its logits */
        /* Append t to seq where the cache says seq ends. Its K/V and its token
           enter the cache together, so a later prompt that quotes this answer
           (the session's next turn) reuses it. */
        tkv_pos pos = tkv_seq_len(sv->ctx, seq);
        tkv_batch one = {1, &t, &pos, &seq, NULL};
        st = tkv_decode(sv->ctx, &one);
        logits = tkv_get_logits(sv->ctx, 0);
    }
    if (!out || fclose(out)) st = st ? st : TKV_ERR_NOMEM;
    if (st) {
        /* A failed decode undid only itself: seq keeps what was decoded before
           it. Ask the cache how much of this prompt a retry would reuse. */
        size_t cached = 0;
        tkv_cache_match(sv->ctx, 0, prompt, n, &cached);
        fail(reply, st, st == TKV_ERR_NOMEM ? "out of memory" : tkv_last_error(sv->ctx));
        json_object_set_new(reply, "cached_tokens", json_integer((json_int_t)cached));
    } else /* text: whole UTF-8 characters only (an incomplete last one is left out) */
        json_object_update_new(reply, json_pack("{s:s, s:I, s:I, s:f}", "text", text, "prompt_tokens", (json_int_t)n,
                                                "reused_tokens", (json_int_t)reused, "ms", now_ms() - t0));
    free(text);
    free(prompt);
    return reply;
}

/* What the cache holds, asked of the cache: each session's tokens, as text. */
static json_t *summary(service *sv) {
    json_t *list = json_array(), *name;
    size_t i, n = 0, len = 0;
    json_array_foreach(sv->sessions, i, name) {
        tkv_seq_tokens(sv->ctx, (tkv_seq)i, NULL, 0, &n); /* sizes, like tkv_tokenize */
        tkv_token *toks = malloc((n + 1) * sizeof *toks);
        char *text = NULL;
        if (toks && !tkv_seq_tokens(sv->ctx, (tkv_seq)i, toks, n, &n) &&
            tkv_detokenize(sv->model, toks, n, 0, NULL, 0, &len) == TKV_ERR_FULL && (text = malloc(len + 1)) &&
            !tkv_detokenize(sv->model, toks, n, 0, text, len + 1, &len))
            json_array_append_new(list, json_pack("{s:O, s:I, s:s%}", "session", name, "cached_tokens",
                                                  (json_int_t)n, "text", text, len));
        free(text), free(toks);
    }
    tkv_stats s;
    tkv_cache_stats_ex(sv->ctx, &s, sizeof s); /* and tkv_cache_check verifies every invariant of the cache: */
    return json_pack("{s:{s:o, s:I, s:I, s:s}}", "summary", "sessions", list, "tokens_reused",
                     (json_int_t)s.tokens_reused, "tokens_computed", (json_int_t)s.tokens_computed, "check",
                     tkv_status_str(tkv_cache_check(sv->ctx)));
}

/* One JSON line on stdout, flushed: each answer as soon as it is known. */
static void emit(json_t *j) {
    json_dumpf(j, stdout, JSON_COMPACT | JSON_REAL_PRECISION(6));
    putchar('\n');
    fflush(stdout);
    json_decref(j);
}

int main(int argc, char **argv) {
    const char *model_path = "../shared/models/stories260K.gguf";
    service sv = {.abort_after = -1};
    tkv_context_params cp = tkv_context_default_params();
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-m") && i + 1 < argc) model_path = argv[++i];
        else if (!strcmp(argv[i], "-t") && i + 1 < argc) cp.n_threads = atoi(argv[++i]);
        else return fprintf(stderr, "usage: %s [-m MODEL] [-t THREADS] < requests.jsonl\n", argv[0]), 2;
    }
    if (tkv_model_load(model_path, NULL, &sv.model)) return fprintf(stderr, "%s\n", tkv_last_error(NULL)), 1;
    cp.n_seq_max = MAX_SESSIONS; /* a sequence per session */
    cp.abort_cb = should_abort, cp.abort_user = &sv;
    /* Otherwise logits differ by rounding with how much of a prompt came from
       the cache, and a greedy answer could depend on what other sessions asked. */
    cp.batch_invariant = true;
    tkv_sampler_params sp = tkv_sampler_default_params();
    sp.temperature = 0; /* greedy: the same prompt always gets the same answer */
    if (tkv_context_create(sv.model, &cp, &sv.ctx) || tkv_sampler_create(&sp, tkv_vocab_size(sv.model), &sv.greedy) ||
        tkv_detok_create(sv.model, TKV_DETOKENIZE_CONTINUE, &sv.detok) || !(sv.sessions = json_array()))
        return fprintf(stderr, "%s\n", tkv_last_error(NULL)), 1;
    char *line = NULL;
    size_t cap = 0;
    while (getline(&line, &cap, stdin) > 0) {
        if (strspn(line, " \t\r\n") == strlen(line)) continue;
        json_error_t err;
        json_t *req = json_loads(line, 0, &err), *reply = json_object();
        json_object_set(reply, "session", json_object_get(req, "session"));
        emit(json_is_object(req) ? answer(&sv, req, reply) : fail(reply, TKV_ERR_INVALID, err.text));
        json_decref(req);
    }
    emit(summary(&sv));
    free(line), json_decref(sv.sessions), tkv_detok_free(sv.detok), tkv_sampler_free(sv.greedy);
    tkv_context_free(sv.ctx); /* before the model: a model must outlive its contexts */
    tkv_model_free(sv.model);
    return 0;
}
