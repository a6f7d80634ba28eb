/*
 * request.h — one generation request, shared by the HTTP side that
 * received it and the inference thread that runs it.
 *
 * The HTTP side fills the input fields, sets `wake`, submits the request to
 * the scheduler and then only reads the output. The inference thread
 * appends text and finally marks the request done, calling `wake` at each
 * change so the HTTP side (which never blocks: conn.h) looks again. Both
 * hold a reference; the last srv_req_unref frees it. Everything that both
 * threads touch after submission is under `mu`.
 */
#ifndef TKV_SRV_REQUEST_H
#define TKV_SRV_REQUEST_H

#include "tokenkv.h"

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SRV_MAX_STOP 4
#define SRV_MAX_TOP_LOGPROBS 20
#define SRV_MAX_CHOICES 16 /* n: choices of one request */

/* One generated token's log-probability under the model (log-softmax of its logits) and the best
   alternatives'. */
/* A step of a prompt's computation, for return_progress: the prompt tokens its sequence held then (the first: those
   taken from the cache) and when. */
typedef struct srv_progress {
    size_t processed;
    double t;
} srv_progress;

typedef struct srv_logprob {
    tkv_token token;
    float logprob;
    int n_top;
    tkv_token top[SRV_MAX_TOP_LOGPROBS];
    float top_logprob[SRV_MAX_TOP_LOGPROBS];
} srv_logprob;
#define SRV_MAX_STOP_BYTES 1024 /* all of a request's stop strings together */

struct srv_run; /* the scheduler's state of a request (scheduler.c) */

/* Why a request failed, in the scheduler's words: the HTTP edge turns it into
   a status and an error code (http/http.c), so nothing below it speaks HTTP. */
typedef enum srv_fail {
    SRV_FAIL_NONE,
    SRV_FAIL_CANCELLED,  /* the client went away */
    SRV_FAIL_INVALID,    /* the request cannot run as given (its tokens, its length) */
    SRV_FAIL_CACHE_FULL, /* no room in the KV cache, even after making room */
    SRV_FAIL_INTERNAL,   /* out of memory, a decode that failed */
    SRV_FAIL_STOPPING,   /* the server is shutting down */
} srv_fail;

/* Where a waiting request stands with the shared store (redis_store.h). */
enum { SRV_STORE_NEW, SRV_STORE_FETCHING, SRV_STORE_DONE };

/* Where a request's lookup in the disk tier (--cache-disk) stands. */
typedef enum srv_disk_state {
    SRV_DISK_NEW,      /* not asked yet */
    SRV_DISK_FETCHING, /* a read of its prefix is in flight */
    SRV_DISK_DONE,     /* asked (and loaded, or nothing to load) */
} srv_disk_state;

typedef struct srv_req {
    /* ---- input: written before submission, read-only afterwards ---- */
    tkv_token *prompt;          /* (n_prompt) */
    size_t n_prompt;
    uint64_t ns;                /* cache namespace (from cache_salt) */
    int max_tokens;             /* >= 1 */
    tkv_sampler_params sp;
    char *stop[SRV_MAX_STOP];   /* stop strings (owned) */
    size_t n_stop;
    bool stream, include_usage, chat;
    bool native;                /* llama-server's POST /completion: its response shapes (native_completion.c) */
    bool anthropic;             /* POST /v1/messages: Anthropic's response shapes (anthropic.c) */
    bool responses;             /* POST /v1/responses: the Responses API's shapes (responses_api.c) */
    bool store;                 /* responses: keep the conversation for previous_response_id */
    char prev_id[48];           /* responses: the previous_response_id it continues, or "" */
    char *conv;                 /* responses: the conversation (JSON chat messages) before the answer (owned) */
    bool return_tokens;         /* extension: list the generated token ids in the response */
    bool ignore_eos;            /* extension (llama-server's): generate past end-of-generation tokens */
    bool return_progress;       /* llama-server's: a stream reports each step of the prompt's computation */
    bool post_probs;            /* llama-server's post_sampling_probs: logprobs hold the probabilities the sampler
                                   drew from (after its chain), not the model's log-probabilities */
    bool prefill;               /* chat: the answer continues a final assistant message (its joining space stays) */
    bool think, think_open;     /* chat: the answer's reasoning goes apart (reasoning.h); the prompt
                                   ended inside a think block */
    bool tools;                 /* chat with tools (tool_choice not "none"): the answer is read for calls (tool_calls.h) */
    bool tool_forced;           /* tool_choice "required" or a named function: the grammar forces a call */
    int tool_format;            /* srv_tool_format: the chat template's call syntax */
    struct json_t *tool_defs;   /* the request's `tools` (a reference, dropped with the request): an XML call's
                                   parameter values are typed by their schemas */
    bool special_text;          /* control tokens keep their text in the answer (a call syntax's markers) */
    char *echo;                 /* legacy echo: the prompt's text, before the completion's (owned), or NULL */
    char *response_fields;      /* native: llama-server's response_fields, a JSON array of paths (owned), or NULL */
    size_t echo_len;
    int n_keep;                 /* context shift: prompt tokens a shift keeps after the BOS (-1: the whole prompt) */
    int n_discard;              /* context shift: tokens a shift drops (0: half of those after the kept ones) */
    int draft_max, draft_min;   /* drafts from the cache (speculative.n_max, n_min): at most draft_max per step (0:
                                   none), a shorter draft than draft_min is not verified */
    int index;                  /* the choice's index (n > 1: one request per choice) */
    int n_choices;              /* n, on the first choice's request */
    uint64_t group;             /* n > 1: the same non-zero id on every choice (they share the prompt), else 0 */
    uint64_t client;            /* who sent it (its bearer key's hash, or its address's): its share (sched/policy.h) */
    tkv_logit_bias *bias;       /* (sp.n_logit_bias) logit_bias, owned; sp.logit_bias points here */
    int logprobs;               /* -1: none; else the alternatives to list per token (0..20) */
    const tkv_grammar *grammar; /* constrains the output, or NULL: own_grammar, or the server's default */
    tkv_grammar *own_grammar;   /* compiled from the request's `grammar` (freed with the request) */
    char id[48];
    int64_t created;            /* unix seconds */
    double t_arrival;           /* monotonic seconds */

    /* ---- output, under mu ---- */
    pthread_mutex_t mu;
    void (*wake)(void *arg);    /* called with mu held when the output changes; NULL: nobody to tell */
    void *wake_arg;
    char *text;                 /* generated text (NUL-terminated), stop string removed */
    size_t text_len, text_cap;
    size_t text_ready;          /* bytes of text that cannot turn into a stop string */
    tkv_token *gen;             /* (n_gen_tokens) with return_tokens: the generated ids, once done */
    tkv_token *tok_id;          /* native streams: each generated token (n_tok of cap_tok), and the text's length */
    size_t *tok_end;            /*   once its text was appended (llama-server sends an event per token) */
    size_t n_tok, cap_tok;
    srv_logprob *lps;           /* (n_lps) with logprobs: one per generated token */
    size_t n_lps, cap_lps;
    srv_progress *prog;         /* (n_prog of cap_prog) with return_progress: the prompt's steps */
    size_t n_prog, cap_prog;
    size_t n_gen_tokens;
    size_t n_cached;            /* prompt tokens reused from the cache */
    int n_gen;                  /* completion tokens, once done */
    int n_pushed;               /* tokens whose text was appended so far (what a cancelled stream got) */
    bool done;
    bool truncated;             /* the prompt was cut to fit, or a context shift dropped tokens (llama-server's) */
    const char *finish_reason;  /* "stop" or "length" once done */
    int stop_word;              /* the index of the stop string that ended the text, or -1 */
    srv_fail failed;            /* SRV_FAIL_NONE, or why it failed */
    char err_msg[256];
    bool cancelled;             /* the client went away */
    double t_first, t_done;     /* monotonic seconds of the first token and the end */
    int draft_n, draft_n_accepted; /* drafts verified and accepted (llama-server's timings); written by the
                                      inference thread before done, read once done */
    int refs;
    /* ---- the scheduler's (inference thread only) ---- */
    srv_disk_state disk_state;  /* the disk tier's lookup of its prompt */

    /* ---- the inference thread's own ---- */
    struct srv_run *run;        /* created at admission, kept across preemption */
    int store_state;            /* SRV_STORE_*: the shared store's lookup of its prompt (redis_store.h) */
} srv_req;

/* A request with one reference and empty output; NULL on allocation failure. */
srv_req *srv_req_new(void);
void srv_req_ref(srv_req *r);
void srv_req_unref(srv_req *r);

/* Monotonic seconds. */
double srv_now(void);

/* ---- inference thread ---- */

/* Append generated text; applies the stop strings, and drops the space that
   joins a chat answer to its generation prompt. Returns true when a stop
   string was found (the text is cut before it). Caller holds no lock. */
bool srv_req_append(srv_req *r, const char *s, size_t n);
/* One generated token's log-probabilities (logprobs), from the logits row it was sampled from; with post_probs, the
   probabilities of the distribution smp drew it from. */
void srv_req_add_logprob(srv_req *r, tkv_token token, const float *logits, size_t n_vocab, const tkv_sampler *smp);
/* A generated token, after its text was appended: recorded for a native stream (r->native and r->stream), whose
   events carry one token each; otherwise nothing. */
void srv_req_note_token(srv_req *r, tkv_token token);
/* With return_progress: the prompt's sequence holds `processed` of its tokens now (the first call: at admission,
   those taken from the cache); otherwise nothing. */
void srv_req_progress(srv_req *r, size_t processed);
/* The generated ids (for return_tokens), copied once at the end. */
void srv_req_set_tokens(srv_req *r, const tkv_token *t, size_t n);
/* Finish with reason "stop" or "length" after n_gen completion tokens. */
void srv_req_finish(srv_req *r, const char *reason, int n_gen);
/* Finish with an error: why, and a message for the client. */
void srv_req_fail(srv_req *r, srv_fail why, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
void srv_req_set_cached(srv_req *r, size_t n_cached);
bool srv_req_is_cancelled(srv_req *r);

/* ---- HTTP side ---- */

void srv_req_cancel(srv_req *r);
/* Stop calling r->wake (before what wake_arg points to goes away). */
void srv_req_detach(srv_req *r);

#endif
