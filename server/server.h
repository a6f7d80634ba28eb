/*
 * server.h — `tokenkv serve`: an OpenAI-compatible HTTP server over one
 * model and one context, reusing every cached prefix for every client.
 *
 * Threads: libmicrohttpd runs a few HTTP threads, each an epoll loop over
 * many connections; they parse, validate and tokenize, then hand requests
 * to the scheduler (scheduler.h), whose single inference thread is the only
 * one that touches the context. A request waiting for it suspends its
 * connection instead of blocking a thread; the scheduler resumes it when
 * there is an answer or more text to stream (conn.h). A watchdog thread
 * enforces the request deadline and notices clients that leave while
 * their connection is suspended.
 */
#ifndef TKV_SRV_SERVER_H
#define TKV_SRV_SERVER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* llama-server's server-wide request defaults (--temp, --seed, -n, ...): what a request that does not say gets. */
typedef struct srv_defaults {
    double temperature, top_p, min_p, repeat_penalty, presence_penalty, frequency_penalty; /* NaN: the route's own */
    int top_k;                 /* -1: the route's own */
    int64_t seed;              /* -1: a random seed per request (llama-server's default) */
    int n_predict;             /* -1: none; else the length of a request that gives none (a default, not a limit:
                                  --max-tokens is the limit) */
    bool ignore_eos;           /* every request generates past end-of-generation tokens */
    int n_keep;                /* --keep: with --context-shift, the prompt tokens a shift keeps (-1: all of them) */
    int draft;                 /* --draft: drafts from the cache verified per step at most (0: off); a request's
                                  speculative.n_max overrides it */
} srv_defaults;

/* --reasoning: whether chat templates are asked to think (their enable_thinking variable). Unset: the variable is
   not passed (as transformers renders); auto and on pass true, as llama-server does; off passes false. */
typedef enum { SRV_REASONING_UNSET, SRV_REASONING_AUTO, SRV_REASONING_ON, SRV_REASONING_OFF } srv_reasoning;

typedef struct srv_opts {
    const char *model_path;
    const char *alias;         /* the model id (a comma-separated list: its first in byte order; all are listed as
                                  aliases); NULL: the file name without .gguf */
    const char *tags;          /* --tags: a comma-separated list /v1/models shows (informational), or NULL */
    const char *host;          /* an IPv4 or IPv6 address to bind */
    int port;                  /* 0: any free port (printed at start-up) */
    int parallel;              /* sequences decoded together */
    uint32_t cells;            /* KV cells */
    const char *cache_type_k;  /* --cache-type-k as given (cli/serve.c turns it into kv_type_k), or NULL */
    const char *cache_type_v;
    int kv_type_k, kv_type_v;  /* tkv_type of the K and V cache (kv_type_v TKV_TYPE_COUNT: as K) */
    uint32_t n_batch;          /* tokens per decode step */
    int threads;
    const char *api_key;       /* NULL: no authentication */
    const char *api_key_file;  /* where api_key came from, or NULL */
    const char *cors_origin;   /* web pages of this origin ("*": any) may call the API; NULL: none */
    const char *admin_key;     /* the whole cache view (/v1/cache of every namespace); NULL: nobody */
    bool metrics_public;       /* /metrics without the API key */
    size_t max_body;           /* bytes */
    int max_tokens;            /* the largest max_tokens a request may ask */
    size_t max_queue;          /* waiting requests before 429 */
    int max_connections;       /* open connections at most, all clients together */
    int max_connections_per_client; /* per client address (0: no limit): one client cannot take every slot */
    int idle_timeout;          /* seconds a connection may stay silent (headers, body, keep-alive, response) */
    int request_timeout;       /* seconds to deliver a request's headers and body, counted from the accept or the
                                  end of the previous response (so also an idle keep-alive's limit); 0: none */
    bool no_prefix_cache;
    bool draft_always;         /* --draft-always: every draft within the budget, not only those worth their rows */
    bool no_draft_known;       /* --no-draft-known: drafting requests compute every token (tkv_seq_follow_known off) */
    bool no_webui;             /* no web page at / */
    bool no_repack;            /* keep the weights in the file's layout (tkv_model_params.repack) */
    bool no_huge_pages;        /* no huge pages under the packed weights (tkv_model_params.huge_pages) */
    bool reference_order;      /* tkv_context_params.batch_invariant false: the reference's arithmetic */
    const char *chat_template; /* a family name, a Jinja file or an inline Jinja template overriding the model's, or NULL */
    const char *grammar_file;  /* a GBNF grammar for requests that give none, or NULL */
    const char *cache_dir;     /* load the cache from here at start, save it here; NULL: none */
    uint64_t cache_dir_max;    /* bytes of cache files at most; 0: no limit */
    int save_interval;         /* seconds between saves; 0: only at shutdown */
    const char *kv_store;      /* redis://HOST:PORT[/DB]: the prefix store shared by replicas (redis_store.h); NULL: none */
    int kv_store_timeout_ms;   /* connect and each read or write; 0: 50 */
    uint64_t kv_store_max_pending; /* bytes of blocks waiting to be written; 0: 256 MiB */
    const char *replica_id;    /* sent as X-Tokenkv-Replica on every response; NULL: none */
    const char *kv_events;     /* a ZeroMQ endpoint to publish KV events at (kv_events.h); NULL: none */
    uint32_t kv_events_block_size; /* tokens per block of those events */
    bool kv_events_tokens;     /* their token ids also with authentication on (salted namespaces: never) */
    const char *cache_disk;    /* the disk tier's directory (disk_tier.h); NULL: none */
    uint64_t cache_disk_max;   /* its bytes at most; 0: no limit */
    uint32_t state_cache_mib;  /* hybrid models: the recurrent-state checkpoints' budget (MiB) */
    uint32_t state_interval;   /* hybrid models: a checkpoint every this many prompt positions; 0: none */
    uint32_t swa_rows;         /* sliding-window models: the window layers' row pool (tkv_context_params); 0: none */
    /* llama-server's options (cli/serve_args.c; docs/server.md "Coming from llama-server") */
    srv_defaults defaults;     /* what a request that does not say gets */
    bool no_slots;             /* --no-slots: GET /slots answers 501 */
    bool verbose;              /* --verbose: non-streamed answers carry "__verbose" (the prompt as text) */
    const char *chat_template_file;   /* --chat-template-file: a Jinja template file, or NULL */
    const char *chat_template_kwargs; /* --chat-template-kwargs: a JSON object of template variables, under
                                         each request's own chat_template_kwargs; or NULL */
    int reasoning;             /* srv_reasoning (--reasoning) */
    bool reasoning_none;       /* --reasoning-format none: a reasoning model's thinking stays in the content */
    bool no_prefill_assistant; /* a final assistant message is a closed turn, not the start of the answer */
    bool context_shift;        /* --context-shift: each request has a window of cells / parallel positions; a
                                  longer prompt is cut, and a generation that fills the window drops older tokens
                                  (docs/server.md "Context shift") */
} srv_opts;

/* Run until SIGINT or SIGTERM (then: stop accepting, end running requests,
   save the cache to cache_dir). Returns the process exit status; start-up
   failures print one line on stderr. */
int srv_main(const srv_opts *o);

#endif
