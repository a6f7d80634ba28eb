/*
 * serve_args.c — the option table of `tokenkv serve` and its parser
 * (serve_args.h).
 *
 * One row per option: its names (tokenkv's first, then llama-server's
 * aliases), its TOKENKV_* variable, llama-server's LLAMA_ARG_* variable,
 * its kind and arity, and what it sets. The kinds that take no field say
 * why in the row; the parser prints that reason, so every accepted option
 * without effect leaves one log line and every refused one names itself.
 * To add an option, add a row (and, where it sets a new field, the field
 * in server/server.h).
 */
#define _POSIX_C_SOURCE 200809L
#include "serve_args.h"

#include "tokenkv.h"

#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* What an option does. */
typedef enum {
    K_STR,     /* sets a string field */
    K_UINT,    /* an integer field (4 or 8 bytes) in [lo, hi] */
    K_SINT,    /* a signed integer field (4 or 8 bytes) in [lo, hi]: -1 is llama-server's "none" */
    K_NUM,     /* a double field in [lo, hi] */
    K_ON,      /* sets a bool field (from a variable: its value, true/1/on/enabled or false/0/off/disabled) */
    K_OFF,     /* clears it (--no-X; from a variable: the value's opposite) */
    K_FN,      /* a function of the value */
    K_NOOP,    /* llama-server's, with no meaning on this CPU server: accepted, one log line (why) */
    K_ALWAYS,  /* llama-server's, asking for what this server always does: accepted, one log line (why) */
    K_NEUTRAL, /* llama-server's, not implemented: accepted only at its neutral value (why), else refused */
    K_REFUSE,  /* llama-server's, not implemented: refused by name (why) */
} kind;

/* How many values follow the name. */
typedef enum {
    A_NONE,
    A_ONE,
    A_OPT, /* a value only when the next argument is a switch word (on, off, auto, true, false, ...) */
} arity;

typedef struct opt {
    const char *names[6]; /* the first is the one messages use */
    const char *env;      /* TOKENKV_*, or NULL */
    const char *lenv;     /* llama-server's variable (LLAMA_ARG_*, LLAMA_API_KEY), or NULL */
    kind kind;
    arity arity;
    size_t off;           /* of the field in srv_opts */
    int width;            /* integer fields: bytes (4 or 8) */
    double lo, hi;
    bool (*fn)(srv_opts *o, const char *v, const char *from, FILE *err);
    const char *why;      /* K_NOOP, K_ALWAYS, K_REFUSE: the reason; K_NEUTRAL: the neutral value */
} opt;

static bool threads_fn(srv_opts *o, const char *v, const char *from, FILE *err);
static bool reasoning_fn(srv_opts *o, const char *v, const char *from, FILE *err);
static bool reasoning_format_fn(srv_opts *o, const char *v, const char *from, FILE *err);

#define OFF(f) offsetof(srv_opts, f)
#define W(f) (int)sizeof(((srv_opts *)0)->f)
#define STR(f) K_STR, A_ONE, OFF(f), 0, 0, 0, NULL, NULL
#define UINT(f, l, h) K_UINT, A_ONE, OFF(f), W(f), l, h, NULL, NULL
#define SINT(f, l, h) K_SINT, A_ONE, OFF(f), W(f), l, h, NULL, NULL
#define NUM(f, l, h) K_NUM, A_ONE, OFF(f), W(f), l, h, NULL, NULL
#define ON(f) K_ON, A_NONE, OFF(f), 0, 0, 0, NULL, NULL
#define CLEAR(f) K_OFF, A_NONE, OFF(f), 0, 0, 0, NULL, NULL
#define FN(fn) K_FN, A_ONE, 0, 0, 0, 0, fn, NULL
#define NOOP(a, why) K_NOOP, a, 0, 0, 0, 0, NULL, why
#define ALWAYS(a, why) K_ALWAYS, a, 0, 0, 0, 0, NULL, why
#define NEUTRAL(v) K_NEUTRAL, A_ONE, 0, 0, 0, 0, NULL, v
#define REFUSE(a, why) K_REFUSE, a, 0, 0, 0, 0, NULL, why

/* Reasons shared by several rows. */
#define NO_GPU "no GPU or other device here: this server computes on the CPU"
#define NO_PLACE "threads are placed by the OS; --threads sets how many"
#define NO_SPEC "speculative decoding with a draft model is not implemented (--draft N: drafts from the cache)"
#define NO_DL "nothing is downloaded: pass the GGUF file with -m"
#define NO_LOG "the log is one line per request on stderr"
#define NO_MM "multimodal input is not implemented"
#define NO_EMB "embeddings and reranking are not implemented"
#define NO_ROUTER "router mode (several models) is not implemented: one server serves one model"
#define NO_ROPE "the model's own RoPE parameters are used"

static const opt options[] = {
    /* ---- tokenkv's options, with llama-server's names where it has them ---- */
    {{"--model", "-m"}, "TOKENKV_MODEL", "LLAMA_ARG_MODEL", STR(model_path)},
    {{"--host"}, "TOKENKV_HOST", "LLAMA_ARG_HOST", STR(host)},
    {{"--port"}, "TOKENKV_PORT", "LLAMA_ARG_PORT", UINT(port, 0, 65535)},
    {{"--parallel", "-np"}, "TOKENKV_PARALLEL", "LLAMA_ARG_N_PARALLEL", UINT(parallel, 1, 256)},
    {{"--ctx-size", "-c", "--ctx"}, "TOKENKV_CTX_SIZE", "LLAMA_ARG_CTX_SIZE", UINT(cells, 16, 1 << 24)},
    {{"--batch-size", "-b", "--batch"}, "TOKENKV_BATCH_SIZE", "LLAMA_ARG_BATCH", UINT(n_batch, 1, 1 << 16)},
    {{"--cache-type-k", "-ctk"}, "TOKENKV_CACHE_TYPE_K", "LLAMA_ARG_CACHE_TYPE_K", STR(cache_type_k)},
    {{"--cache-type-v", "-ctv"}, "TOKENKV_CACHE_TYPE_V", "LLAMA_ARG_CACHE_TYPE_V", STR(cache_type_v)},
    {{"--threads", "-t"}, "TOKENKV_THREADS", "LLAMA_ARG_THREADS", FN(threads_fn)},
    {{"--api-key"}, "TOKENKV_API_KEY", "LLAMA_API_KEY", STR(api_key)},
    {{"--api-key-file"}, "TOKENKV_API_KEY_FILE", "LLAMA_ARG_API_KEY_FILE", STR(api_key_file)},
    {{"--admin-key"}, "TOKENKV_ADMIN_KEY", NULL, STR(admin_key)},
    {{"--metrics-public"}, "TOKENKV_METRICS_PUBLIC", NULL, ON(metrics_public)},
    {{"--cors-origin", "--cors-origins"}, "TOKENKV_CORS_ORIGIN", "LLAMA_ARG_CORS_ORIGINS", STR(cors_origin)},
    {{"--alias", "-a"}, "TOKENKV_ALIAS", "LLAMA_ARG_ALIAS", STR(alias)},
    {{"--tags"}, "TOKENKV_TAGS", "LLAMA_ARG_TAGS", STR(tags)},
    {{"--max-body"}, "TOKENKV_MAX_BODY", NULL, UINT(max_body, 64, 4294967296.0)},
    {{"--max-tokens"}, "TOKENKV_MAX_TOKENS", NULL, UINT(max_tokens, 1, 1 << 24)},
    {{"--max-queue"}, "TOKENKV_MAX_QUEUE", NULL, UINT(max_queue, 1, 1 << 20)},
    {{"--max-connections"}, "TOKENKV_MAX_CONNECTIONS", NULL, UINT(max_connections, 1, 1 << 20)},
    {{"--max-connections-per-client"}, "TOKENKV_MAX_CONNECTIONS_PER_CLIENT", NULL,
     UINT(max_connections_per_client, 0, 1 << 20)},
    {{"--idle-timeout", "--timeout", "-to"}, "TOKENKV_IDLE_TIMEOUT", "LLAMA_ARG_TIMEOUT", UINT(idle_timeout, 1, 86400)},
    {{"--request-timeout"}, "TOKENKV_REQUEST_TIMEOUT", NULL, UINT(request_timeout, 0, 86400)},
    {{"--chat-template"}, "TOKENKV_CHAT_TEMPLATE", "LLAMA_ARG_CHAT_TEMPLATE", STR(chat_template)},
    {{"--chat-template-file"}, "TOKENKV_CHAT_TEMPLATE_FILE", "LLAMA_ARG_CHAT_TEMPLATE_FILE", STR(chat_template_file)},
    {{"--chat-template-kwargs"}, "TOKENKV_CHAT_TEMPLATE_KWARGS", "LLAMA_ARG_CHAT_TEMPLATE_KWARGS",
     STR(chat_template_kwargs)},
    {{"--grammar-file"}, "TOKENKV_GRAMMAR_FILE", NULL, STR(grammar_file)},
    {{"--no-prefix-cache", "--no-cache-prompt"}, "TOKENKV_NO_PREFIX_CACHE", NULL, ON(no_prefix_cache)},
    {{"--cache-prompt"}, NULL, "LLAMA_ARG_CACHE_PROMPT", CLEAR(no_prefix_cache)},
    {{"--no-webui", "--no-ui"}, "TOKENKV_NO_WEBUI", NULL, ON(no_webui)},
    {{"--webui", "--ui"}, NULL, "LLAMA_ARG_UI", CLEAR(no_webui)},
    {{"--no-repack", "-nr"}, "TOKENKV_NO_REPACK", NULL, ON(no_repack)},
    {{"--repack"}, NULL, "LLAMA_ARG_REPACK", CLEAR(no_repack)},
    {{"--no-huge-pages"}, "TOKENKV_NO_HUGE_PAGES", NULL, ON(no_huge_pages)},
    {{"--reference-order"}, "TOKENKV_REFERENCE_ORDER", NULL, ON(reference_order)},
    {{"--cache-dir"}, "TOKENKV_CACHE_DIR", NULL, STR(cache_dir)},
    {{"--cache-dir-max"}, "TOKENKV_CACHE_DIR_MAX", NULL, UINT(cache_dir_max, 0, 1125899906842624.0)},
    {{"--save-interval"}, "TOKENKV_SAVE_INTERVAL", NULL, UINT(save_interval, 0, 1 << 24)},
    {{"--kv-store"}, "TOKENKV_KV_STORE", NULL, STR(kv_store)},
    {{"--kv-store-timeout-ms"}, "TOKENKV_KV_STORE_TIMEOUT_MS", NULL, UINT(kv_store_timeout_ms, 1, 60000)},
    {{"--kv-store-max-pending"}, "TOKENKV_KV_STORE_MAX_PENDING", NULL, UINT(kv_store_max_pending, 0, 1099511627776.0)},
    {{"--replica-id"}, "TOKENKV_REPLICA_ID", NULL, STR(replica_id)},
    {{"--kv-events"}, "TOKENKV_KV_EVENTS", NULL, STR(kv_events)},
    {{"--kv-events-block-size"}, "TOKENKV_KV_EVENTS_BLOCK_SIZE", NULL, UINT(kv_events_block_size, 1, 4096)},
    {{"--kv-events-tokens"}, "TOKENKV_KV_EVENTS_TOKENS", NULL, ON(kv_events_tokens)},
    {{"--state-cache"}, "TOKENKV_STATE_CACHE", NULL, UINT(state_cache_mib, 1, 1 << 20)},
    {{"--state-interval"}, "TOKENKV_STATE_INTERVAL", NULL, UINT(state_interval, 0, 1 << 20)},
    {{"--swa-rows"}, "TOKENKV_SWA_ROWS", NULL, UINT(swa_rows, 0, 1u << 30)},
    {{"--cache-disk"}, "TOKENKV_CACHE_DISK", NULL, STR(cache_disk)},
    {{"--cache-disk-max"}, "TOKENKV_CACHE_DISK_MAX", NULL, UINT(cache_disk_max, 0, 1125899906842624.0)},

    /* ---- llama-server's request defaults and server switches, as it has them ---- */
    {{"--temp", "--temperature"}, "TOKENKV_TEMPERATURE", "LLAMA_ARG_TEMPERATURE", NUM(defaults.temperature, 0, 2)},
    {{"--top-k"}, "TOKENKV_TOP_K", "LLAMA_ARG_TOP_K", SINT(defaults.top_k, 0, 1000000000)},
    {{"--top-p"}, "TOKENKV_TOP_P", "LLAMA_ARG_TOP_P", NUM(defaults.top_p, 0, 1)},
    {{"--min-p"}, "TOKENKV_MIN_P", "LLAMA_ARG_MIN_P", NUM(defaults.min_p, 0, 1)},
    {{"--repeat-penalty"}, "TOKENKV_REPEAT_PENALTY", "LLAMA_ARG_REPEAT_PENALTY", NUM(defaults.repeat_penalty, 0, 10)},
    {{"--presence-penalty"}, "TOKENKV_PRESENCE_PENALTY", "LLAMA_ARG_PRESENCE_PENALTY",
     NUM(defaults.presence_penalty, -2, 2)},
    {{"--frequency-penalty"}, "TOKENKV_FREQUENCY_PENALTY", "LLAMA_ARG_FREQUENCY_PENALTY",
     NUM(defaults.frequency_penalty, -2, 2)},
    {{"--seed", "-s"}, "TOKENKV_SEED", NULL, SINT(defaults.seed, -1, 4294967295.0)},
    {{"--n-predict", "-n", "--predict"}, "TOKENKV_N_PREDICT", "LLAMA_ARG_N_PREDICT",
     SINT(defaults.n_predict, -1, 1 << 24)},
    {{"--ignore-eos"}, "TOKENKV_IGNORE_EOS", NULL, ON(defaults.ignore_eos)},
    {{"--no-slots"}, "TOKENKV_NO_SLOTS", NULL, ON(no_slots)},
    {{"--slots"}, NULL, "LLAMA_ARG_ENDPOINT_SLOTS", CLEAR(no_slots)},
    {{"--verbose", "-v", "--log-verbose"}, "TOKENKV_VERBOSE", NULL, ON(verbose)},
    {{"--context-shift"}, "TOKENKV_CONTEXT_SHIFT", "LLAMA_ARG_CONTEXT_SHIFT", ON(context_shift)},
    {{"--no-context-shift"}, NULL, NULL, CLEAR(context_shift)},
    {{"--no-prefill-assistant"}, "TOKENKV_NO_PREFILL_ASSISTANT", NULL, ON(no_prefill_assistant)},
    {{"--prefill-assistant"}, NULL, "LLAMA_ARG_PREFILL_ASSISTANT", CLEAR(no_prefill_assistant)},
    {{"--reasoning", "-rea"}, "TOKENKV_REASONING", "LLAMA_ARG_REASONING", FN(reasoning_fn)},
    {{"--reasoning-format"}, "TOKENKV_REASONING_FORMAT", "LLAMA_ARG_THINK", FN(reasoning_format_fn)},
    {{"--metrics"}, NULL, "LLAMA_ARG_ENDPOINT_METRICS",
     ALWAYS(A_NONE, "GET /metrics is always served (with the API key, or without it given --metrics-public)")},
    {{"--props"}, NULL, "LLAMA_ARG_ENDPOINT_PROPS",
     NOOP(A_NONE, "GET /props is always served; changing properties with POST /props is not implemented")},
    {{"--jinja"}, NULL, "LLAMA_ARG_JINJA", ALWAYS(A_NONE, "chat templates are always rendered with Jinja")},
    {{"--no-jinja"}, NULL, NULL,
     ALWAYS(A_NONE, "chat templates are rendered with Jinja all the same (for the common families, the text "
                    "llama-server's built-in renderer gives)")},
    {{"--offline"}, NULL, "LLAMA_ARG_OFFLINE", ALWAYS(A_NONE, NO_DL)},
    {{"--cont-batching", "-cb", "--no-cont-batching", "-nocb"}, NULL, "LLAMA_ARG_CONT_BATCHING",
     ALWAYS(A_NONE, "requests are always decoded together, and a request's output does not depend on its neighbours")},
    {{"--kv-unified", "-kvu", "--no-kv-unified", "-no-kvu"}, NULL, "LLAMA_ARG_KV_UNIFIED",
     ALWAYS(A_NONE, "the KV cells are always shared by every request (--ctx-size of them)")},
    {{"--no-mmproj", "--no-mmproj-auto", "--mmproj-auto"}, NULL, "LLAMA_ARG_MMPROJ_AUTO", ALWAYS(A_NONE, NO_MM)},
    {{"--no-ui-mcp-proxy", "--no-webui-mcp-proxy"}, NULL, NULL, ALWAYS(A_NONE, "there is no MCP proxy")},

    /* ---- no meaning on a CPU server ---- */
    {{"--n-gpu-layers", "-ngl", "--gpu-layers"}, NULL, "LLAMA_ARG_N_GPU_LAYERS", NOOP(A_ONE, NO_GPU)},
    {{"--flash-attn", "-fa"}, NULL, "LLAMA_ARG_FLASH_ATTN",
     NOOP(A_OPT, "attention is this server's own CPU kernel (no flash-attention choice)")},
    {{"--split-mode", "-sm"}, NULL, "LLAMA_ARG_SPLIT_MODE", NOOP(A_ONE, NO_GPU)},
    {{"--tensor-split", "-ts"}, NULL, "LLAMA_ARG_TENSOR_SPLIT", NOOP(A_ONE, NO_GPU)},
    {{"--main-gpu", "-mg"}, NULL, "LLAMA_ARG_MAIN_GPU", NOOP(A_ONE, NO_GPU)},
    {{"--device", "-dev"}, NULL, "LLAMA_ARG_DEVICE", NOOP(A_ONE, NO_GPU)},
    {{"--fit", "-fit"}, NULL, "LLAMA_ARG_FIT", NOOP(A_OPT, NO_GPU)},
    {{"--fit-target", "-fitt"}, NULL, "LLAMA_ARG_FIT_TARGET", NOOP(A_ONE, NO_GPU)},
    {{"--fit-ctx", "-fitc"}, NULL, "LLAMA_ARG_FIT_CTX", NOOP(A_ONE, NO_GPU)},
    {{"--kv-offload", "-kvo", "--no-kv-offload", "-nkvo"}, NULL, "LLAMA_ARG_KV_OFFLOAD", NOOP(A_NONE, NO_GPU)},
    {{"--op-offload", "--no-op-offload"}, NULL, NULL, NOOP(A_NONE, NO_GPU)},
    {{"--no-host"}, NULL, "LLAMA_ARG_NO_HOST", NOOP(A_NONE, NO_GPU)},
    {{"--override-tensor", "-ot"}, NULL, "LLAMA_ARG_OVERRIDE_TENSOR", NOOP(A_ONE, NO_GPU)},
    {{"--cpu-moe", "-cmoe"}, NULL, "LLAMA_ARG_CPU_MOE", NOOP(A_NONE, NO_GPU)},
    {{"--n-cpu-moe", "-ncmoe"}, NULL, "LLAMA_ARG_N_CPU_MOE", NOOP(A_ONE, NO_GPU)},
    {{"--n-cpu-ffn", "-ncffn"}, NULL, "LLAMA_ARG_N_CPU_FFN", NOOP(A_ONE, NO_GPU)},
    {{"--moe-cache-mib"}, NULL, "LLAMA_ARG_MOE_CACHE_MIB", NOOP(A_ONE, NO_GPU)},
    {{"--rpc"}, NULL, "LLAMA_ARG_RPC", REFUSE(A_ONE, "remote devices are not supported: " NO_GPU)},
    {{"--list-devices"}, NULL, NULL, REFUSE(A_NONE, NO_GPU)},
    {{"--mlock"}, NULL, NULL, NOOP(A_NONE, "the weights are read from the mapped file; they are not locked in RAM")},
    {{"--no-mmap", "--mmap"}, NULL, NULL, NOOP(A_NONE, "the model file is always memory-mapped")},
    {{"--load-mode", "-lm"}, NULL, "LLAMA_ARG_LOAD_MODE", NOOP(A_ONE, "the model file is always memory-mapped")},
    {{"--lazy-mode", "-lzm"}, NULL, "LLAMA_ARG_LAZY_MODE", NOOP(A_ONE, "the model file is always memory-mapped")},
    {{"--numa"}, NULL, "LLAMA_ARG_NUMA", NOOP(A_ONE, NO_PLACE)},
    {{"--cpu-mask", "-C", "--cpu-mask-batch", "-Cb"}, NULL, NULL, NOOP(A_ONE, NO_PLACE)},
    {{"--cpu-range", "-Cr", "--cpu-range-batch", "-Crb"}, NULL, NULL, NOOP(A_ONE, NO_PLACE)},
    {{"--cpu-strict", "--cpu-strict-batch"}, NULL, NULL, NOOP(A_ONE, NO_PLACE)},
    {{"--prio", "--prio-batch"}, NULL, NULL, NOOP(A_ONE, NO_PLACE)},
    {{"--poll", "--poll-batch"}, NULL, NULL, NOOP(A_ONE, NO_PLACE)},
    {{"--threads-batch", "-tb"}, NULL, "LLAMA_ARG_THREADS_BATCH",
     NOOP(A_ONE, "one thread count (--threads) computes prompts and generation")},
    {{"--threads-http"}, NULL, "LLAMA_ARG_THREADS_HTTP",
     NOOP(A_ONE, "a few event-driven HTTP threads serve every connection")},
    {{"--ubatch-size", "-ub"}, NULL, "LLAMA_ARG_UBATCH", NOOP(A_ONE, "--batch-size is the only batch size")},
    {{"--swa-full"}, NULL, "LLAMA_ARG_SWA_FULL",
     NOOP(A_NONE, "sliding-window layers keep every cached position's K/V unless --swa-rows N asks for a pool")},
    {{"--defrag-thold", "-dt"}, NULL, "LLAMA_ARG_DEFRAG_THOLD", NOOP(A_ONE, "the cache needs no defragmentation")},
    {{"--ctx-checkpoints", "-ctxcp", "--swa-checkpoints"}, NULL, "LLAMA_ARG_CTX_CHECKPOINTS",
     NOOP(A_ONE, "cached prefixes are kept by the token-aware cache, not by checkpoints")},
    {{"--checkpoint-min-step", "-cms"}, NULL, "LLAMA_ARG_CHECKPOINT_MIN_SPACING_NT",
     NOOP(A_ONE, "cached prefixes are kept by the token-aware cache, not by checkpoints")},
    {{"--cache-ram", "-cram"}, NULL, "LLAMA_ARG_CACHE_RAM",
     NOOP(A_ONE, "cached prefixes live in the --ctx-size cells (and --cache-disk), not in a separate RAM cache")},
    {{"--cache-idle-slots", "--no-cache-idle-slots"}, NULL, "LLAMA_ARG_CACHE_IDLE_SLOTS",
     NOOP(A_NONE, "what idle requests leave stays in the shared cells until evicted")},
    {{"--cache-reuse"}, NULL, "LLAMA_ARG_CACHE_REUSE",
     NOOP(A_ONE, "every request reuses the longest cached prefix; chunks after a difference are not shifted into place")},
    {{"--slot-prompt-similarity", "-sps"}, NULL, NULL,
     NOOP(A_ONE, "a request finds the longest cached prefix whichever slot computed it")},
    {{"--keep"}, "TOKENKV_KEEP", "LLAMA_ARG_KEEP", SINT(defaults.n_keep, -1, 1 << 24)},
    {{"--draft", "--draft-max"}, "TOKENKV_DRAFT", NULL, SINT(defaults.draft, 0, TKV_DRAFT_MAX)},
    {{"--draft-always"}, "TOKENKV_DRAFT_ALWAYS", NULL, ON(draft_always)},
    {{"--no-draft-known"}, "TOKENKV_NO_DRAFT_KNOWN", NULL, ON(no_draft_known)},
    {{"--warmup", "--no-warmup"}, NULL, NULL, NOOP(A_NONE, "there is no warm-up run")},
    {{"--check-tensors"}, NULL, NULL, NOOP(A_NONE, "tensors are checked for size and type at load, not for values")},
    {{"--perf", "--no-perf"}, NULL, "LLAMA_ARG_PERF", NOOP(A_NONE, "timings are always in /metrics and the log")},
    {{"--escape", "-e", "--no-escape"}, NULL, NULL, NOOP(A_NONE, "it applies to prompts given on a command line")},
    {{"--backend-sampling", "-bs", "--backend_sampling"}, NULL, "LLAMA_ARG_BACKEND_SAMPLING", NOOP(A_NONE, NO_GPU)},
    {{"--sleep-idle-seconds"}, NULL, NULL, NOOP(A_ONE, "an idle server only waits; it keeps the model loaded")},
    {{"--sse-ping-interval"}, NULL, "LLAMA_ARG_SSE_PING_INTERVAL", NOOP(A_ONE, "streams send no pings")},
    {{"--hf-token", "-hft"}, NULL, NULL, NOOP(A_ONE, NO_DL)},
    {{"--log-colors"}, NULL, "LLAMA_ARG_LOG_COLORS", NOOP(A_OPT, NO_LOG)},
    {{"--log-prefix", "--no-log-prefix"}, NULL, "LLAMA_ARG_LOG_PREFIX", NOOP(A_NONE, NO_LOG)},
    {{"--log-timestamps", "--no-log-timestamps"}, NULL, "LLAMA_ARG_LOG_TIMESTAMPS", NOOP(A_NONE, NO_LOG)},
    {{"--verbosity", "-lv", "--log-verbosity"}, NULL, "LLAMA_ARG_LOG_VERBOSITY", NOOP(A_ONE, NO_LOG)},
    {{"--mirostat-lr", "--mirostat-ent"}, NULL, NULL, NOOP(A_ONE, "it is used by --mirostat only (not implemented)")},
    {{"--dry-base", "--dry-allowed-length", "--dry-penalty-last-n", "--dry-sequence-breaker"}, NULL, NULL,
     NOOP(A_ONE, "it is used by --dry-multiplier only (not implemented)")},
    {{"--xtc-threshold"}, NULL, NULL, NOOP(A_ONE, "it is used by --xtc-probability only (not implemented)")},
    {{"--dynatemp-exp"}, NULL, NULL, NOOP(A_ONE, "it is used by --dynatemp-range only (not implemented)")},
    {{"--adaptive-decay"}, NULL, NULL, NOOP(A_ONE, "it is used by --adaptive-target only (not implemented)")},
    {{"--reasoning-budget-message"}, NULL, "LLAMA_ARG_THINK_BUDGET_MESSAGE",
     NOOP(A_ONE, "it is used by --reasoning-budget only (not implemented)")},
    {{"--reasoning-preserve", "--no-reasoning-preserve"}, NULL, "LLAMA_ARG_REASONING_PRESERVE",
     NOOP(A_NONE, "messages are passed to the template as the client sent them")},
    {{"--mmproj-offload", "--no-mmproj-offload"}, NULL, "LLAMA_ARG_MMPROJ_OFFLOAD", NOOP(A_NONE, NO_MM)},

    /* ---- sampling that is not implemented: only the neutral value ---- */
    {{"--repeat-last-n"}, NULL, NULL, NEUTRAL("64")},
    {{"--mirostat"}, NULL, NULL, NEUTRAL("0")},
    {{"--dry-multiplier"}, NULL, NULL, NEUTRAL("0")},
    {{"--xtc-probability"}, NULL, NULL, NEUTRAL("0")},
    {{"--typical", "--typical-p"}, NULL, NULL, NEUTRAL("1")},
    {{"--top-nsigma", "--top-n-sigma"}, NULL, NULL, NEUTRAL("-1")},
    {{"--dynatemp-range"}, NULL, NULL, NEUTRAL("0")},
    {{"--adaptive-target"}, NULL, NULL, NEUTRAL("-1")},
    {{"--reasoning-budget"}, NULL, "LLAMA_ARG_THINK_BUDGET", NEUTRAL("-1")},
    {{"--reasoning-effort"}, NULL, "LLAMA_ARG_REASONING_EFFORT", NEUTRAL("default")},
    {{"--spec-type"}, NULL, "LLAMA_ARG_SPEC_TYPE", NEUTRAL("none")},

    /* ---- not implemented: refused by name ---- */
    {{"--hf-repo", "-hf", "-hfr"}, NULL, "LLAMA_ARG_HF_REPO", REFUSE(A_ONE, NO_DL)},
    {{"--hf-file", "-hff"}, NULL, "LLAMA_ARG_HF_FILE", REFUSE(A_ONE, NO_DL)},
    {{"--model-url", "-mu"}, NULL, "LLAMA_ARG_MODEL_URL", REFUSE(A_ONE, NO_DL)},
    {{"--docker-repo", "-dr"}, NULL, "LLAMA_ARG_DOCKER_REPO", REFUSE(A_ONE, NO_DL)},
    {{"--lora", "--lora-scaled"}, NULL, NULL, REFUSE(A_ONE, "LoRA adapters are not implemented")},
    {{"--lora-init-without-apply"}, NULL, NULL, REFUSE(A_NONE, "LoRA adapters are not implemented")},
    {{"--control-vector", "--control-vector-scaled"}, NULL, NULL, REFUSE(A_ONE, "control vectors are not implemented")},
    {{"--override-kv"}, NULL, NULL, REFUSE(A_ONE, "the model's metadata is used as the file has it")},
    {{"--rope-scaling"}, NULL, "LLAMA_ARG_ROPE_SCALING_TYPE", REFUSE(A_ONE, NO_ROPE)},
    {{"--rope-scale"}, NULL, "LLAMA_ARG_ROPE_SCALE", REFUSE(A_ONE, NO_ROPE)},
    {{"--rope-freq-base"}, NULL, "LLAMA_ARG_ROPE_FREQ_BASE", REFUSE(A_ONE, NO_ROPE)},
    {{"--rope-freq-scale"}, NULL, "LLAMA_ARG_ROPE_FREQ_SCALE", REFUSE(A_ONE, NO_ROPE)},
    {{"--yarn-orig-ctx", "--yarn-ext-factor", "--yarn-attn-factor", "--yarn-beta-slow", "--yarn-beta-fast"}, NULL,
     NULL, REFUSE(A_ONE, NO_ROPE)},
    {{"--grp-attn-n", "-gan", "--grp-attn-w", "-gaw"}, NULL, NULL,
     REFUSE(A_ONE, "self-extend (grouped attention) is not implemented")},
    {{"--slot-save-path"}, NULL, "LLAMA_ARG_SLOT_SAVE_PATH",
     REFUSE(A_ONE, "slot save/restore is not implemented (--cache-dir saves and restores the whole cache)")},
    {{"--embedding", "--embeddings"}, NULL, "LLAMA_ARG_EMBEDDINGS", REFUSE(A_NONE, NO_EMB)},
    {{"--rerank", "--reranking"}, NULL, "LLAMA_ARG_RERANKING", REFUSE(A_NONE, NO_EMB)},
    {{"--pooling"}, NULL, "LLAMA_ARG_POOLING", REFUSE(A_ONE, NO_EMB)},
    {{"--embd-normalize"}, NULL, NULL, REFUSE(A_ONE, NO_EMB)},
    {{"--spm-infill"}, NULL, NULL, REFUSE(A_NONE, "/infill is not implemented")},
    {{"--mmproj", "-mm", "--mmproj-url", "-mmu", "--media-path"}, NULL, NULL, REFUSE(A_ONE, NO_MM)},
    {{"--model-draft", "-md", "--spec-draft-model", "--hf-repo-draft", "-hfd"}, NULL, "LLAMA_ARG_SPEC_DRAFT_MODEL",
     REFUSE(A_ONE, NO_SPEC)},
    {{"--spec-draft-n-max", "--spec-draft-n-min", "--draft-min"}, NULL, NULL,
     REFUSE(A_ONE, NO_SPEC)},
    {{"--spec-default"}, NULL, NULL, REFUSE(A_NONE, NO_SPEC)},
    {{"--lookup-cache-static", "-lcs", "--lookup-cache-dynamic", "-lcd"}, NULL, NULL, REFUSE(A_ONE, NO_SPEC)},
    {{"--models-dir", "--models-preset", "--models-max"}, NULL, NULL, REFUSE(A_ONE, NO_ROUTER)},
    {{"--models-autoload", "--no-models-autoload"}, NULL, NULL, REFUSE(A_NONE, NO_ROUTER)},
    {{"--kv-unified-per-slot"}, NULL, NULL,
     REFUSE(A_ONE, "a per-request context limit is not implemented (--ctx-size cells are shared)")},
    {{"--samplers", "--sampler-seq", "--sampling-seq"}, NULL, NULL,
     REFUSE(A_ONE, "the sampler order is fixed (penalties, top-k, top-p, min-p, temperature)")},
    {{"--logit-bias", "-l"}, NULL, NULL, REFUSE(A_ONE, "a server-wide logit bias is not implemented (per request: "
                                                       "logit_bias)")},
    {{"--grammar"}, NULL, NULL, REFUSE(A_ONE, "an inline server-wide grammar is not implemented: use --grammar-file")},
    {{"--json-schema", "-j", "--json-schema-file", "-jf"}, NULL, NULL,
     REFUSE(A_ONE, "a server-wide JSON schema is not implemented (per request: response_format)")},
    {{"--special", "-sp"}, NULL, NULL, REFUSE(A_NONE, "control tokens are never printed in answers")},
    {{"--reverse-prompt", "-r"}, NULL, NULL, REFUSE(A_ONE, "a server-wide stop string is not implemented (per request: "
                                                          "stop)")},
    {{"--skip-chat-parsing", "--no-skip-chat-parsing"}, NULL, NULL,
     REFUSE(A_NONE, "answers are always read for reasoning and tool calls")},
    {{"--cors-methods", "--cors-headers"}, NULL, NULL,
     REFUSE(A_ONE, "the CORS methods and headers are fixed (--cors-origin chooses the origins)")},
    {{"--cors-credentials", "--no-cors-credentials"}, NULL, NULL,
     REFUSE(A_NONE, "CORS credentials are not allowed (the API key is a header)")},
    {{"--ssl-key-file", "--ssl-cert-file"}, NULL, NULL, REFUSE(A_ONE, "TLS is not implemented: put a proxy in front")},
    {{"--path", "--api-prefix", "--ui-config", "--webui-config", "--ui-config-file", "--webui-config-file"}, NULL, NULL,
     REFUSE(A_ONE, "the web page and the paths are built in")},
    {{"--ui-mcp-proxy", "--webui-mcp-proxy", "--agent", "-ag"}, NULL, NULL, REFUSE(A_NONE, "there is no MCP proxy")},
    {{"--tools", "--tools-runtime", "--mcp-servers-config", "--mcp-servers-json"}, NULL, NULL,
     REFUSE(A_ONE, "built-in server tools are not implemented")},
    {{"--reuse-port"}, NULL, NULL, REFUSE(A_NONE, "one process listens on a port")},
    {{"--log-file", "--log-prompts-dir"}, NULL, NULL, REFUSE(A_ONE, NO_LOG)},
    {{"--log-disable"}, NULL, NULL, REFUSE(A_NONE, NO_LOG)},
    {{"--cache-list", "-cl"}, NULL, NULL, REFUSE(A_NONE, NO_DL)},
};
#define N_OPTIONS (sizeof options / sizeof options[0])

static const opt *find_option(const char *name) {
    for (size_t i = 0; i < N_OPTIONS; i++)
        for (int k = 0; k < 6 && options[i].names[k]; k++)
            if (!strcmp(options[i].names[k], name)) return &options[i];
    return NULL;
}

static size_t min3(size_t a, size_t b, size_t c) { return a < b ? (a < c ? a : c) : (b < c ? b : c); }

/* Levenshtein distance, for "did you mean" (names are short: a row of 64 suffices, longer ones are far). */
static size_t distance(const char *a, const char *b) {
    size_t la = strlen(a), lb = strlen(b), row[65];
    if (la > 64 || lb > 64) return (size_t)-1;
    for (size_t j = 0; j <= lb; j++) row[j] = j;
    for (size_t i = 1; i <= la; i++) {
        size_t diag = row[0];
        row[0] = i;
        for (size_t j = 1; j <= lb; j++) {
            const size_t up = row[j];
            row[j] = min3(diag + (a[i - 1] != b[j - 1]), up + 1, row[j - 1] + 1);
            diag = up;
        }
    }
    return row[lb];
}

const char *serve_args_nearest(const char *name) {
    const char *best = options[0].names[0];
    size_t bd = (size_t)-1;
    for (size_t i = 0; i < N_OPTIONS; i++)
        for (int k = 0; k < 6 && options[i].names[k]; k++) {
            const size_t d = distance(name, options[i].names[k]);
            if (d < bd) bd = d, best = options[i].names[k];
        }
    return best;
}

/* A switch word (for A_OPT values and variables of flags): 1 on, 0 off, -1 neither ("auto" counts as on). */
static int switch_word(const char *v) {
    static const char *const on[] = {"on", "true", "1", "enabled", "auto", "yes"};
    static const char *const off[] = {"off", "false", "0", "disabled", "no"};
    for (size_t i = 0; i < sizeof on / sizeof on[0]; i++)
        if (!strcasecmp(v, on[i])) return 1;
    for (size_t i = 0; i < sizeof off / sizeof off[0]; i++)
        if (!strcasecmp(v, off[i])) return 0;
    return -1;
}

static void store_int(char *field, int width, long long x) {
    if (width == 8) {
        const int64_t v = x;
        memcpy(field, &v, 8);
    } else {
        const int32_t v = (int32_t)x;
        memcpy(field, &v, 4);
    }
}

/* A signed decimal integer v (the whole string) in [lo, hi]; false after one line on err. */
static bool signed_int(const char *v, const char *from, double lo, double hi, long long *out, FILE *err) {
    char *end = NULL;
    errno = 0;
    const long long x = v && *v && !strchr(" \t+", *v) ? strtoll(v, &end, 10) : 0;
    if (!end || *end || errno || (double)x < lo || (double)x > hi) {
        fprintf(err, "tokenkv serve: %s: '%s' is not an integer in [%.0f, %.0f]\n", from, v ? v : "", lo, hi);
        return false;
    }
    *out = x;
    return true;
}

static bool threads_fn(srv_opts *o, const char *v, const char *from, FILE *err) {
    long long t;
    if (!signed_int(v, from, -1, 1024, &t, err)) return false;
    if (!t) {
        fprintf(err, "tokenkv serve: %s: '0' threads (give -1 or leave it out for the default)\n", from);
        return false;
    }
    o->threads = t < 0 ? 0 : (int)t; /* llama-server's -1: the default */
    return true;
}

static bool reasoning_fn(srv_opts *o, const char *v, const char *from, FILE *err) {
    static const char *const names[] = {[SRV_REASONING_UNSET] = "", [SRV_REASONING_AUTO] = "auto", [SRV_REASONING_ON] = "on",
                                        [SRV_REASONING_OFF] = "off"};
    for (int i = SRV_REASONING_AUTO; i <= SRV_REASONING_OFF; i++)
        if (!strcmp(v, names[i])) {
            o->reasoning = i;
            return true;
        }
    fprintf(err, "tokenkv serve: %s: '%s' is not one of on, off, auto\n", from, v);
    return false;
}

static bool reasoning_format_fn(srv_opts *o, const char *v, const char *from, FILE *err) {
    if (!strcmp(v, "none") || !strcmp(v, "deepseek") || !strcmp(v, "auto")) {
        o->reasoning_none = !strcmp(v, "none");
        return true;
    }
    if (!strcmp(v, "deepseek-legacy"))
        fprintf(err, "tokenkv serve: %s deepseek-legacy: not implemented (the reasoning is either apart, deepseek, or "
                     "in the content, none)\n", from);
    else
        fprintf(err, "tokenkv serve: %s: '%s' is not one of none, deepseek, auto\n", from, v);
    return false;
}

/* One option's value v (NULL: none) from `from` (the name given, or a variable's); false after one line on err.
   from_env: v is a variable's value, which for a flag says on or off. */
static bool apply(srv_opts *o, const opt *op, const char *v, const char *from, bool from_env, FILE *err) {
    char *field = (char *)o + op->off;
    switch (op->kind) {
    case K_STR:
        /* an empty value: unset, but for a key, where that would silently turn authentication off */
        if (!*v && (op->off == offsetof(srv_opts, api_key) || op->off == offsetof(srv_opts, admin_key))) {
            fprintf(err, "tokenkv serve: %s is empty: give a key, or leave it out to serve without one\n", from);
            return false;
        }
        *(const char **)field = *v ? v : NULL;
        return true;
    case K_UINT: /* the ranges are non-negative and fit the fields' widths */
    case K_SINT: {
        long long x;
        if (!signed_int(v, from, op->lo, op->hi, &x, err)) return false;
        store_int(field, op->width, x);
        return true;
    }
    case K_NUM: {
        char *end = NULL;
        const double d = strtod(v, &end);
        if (end == v || *end || !(d >= op->lo && d <= op->hi)) { /* NaN fails the range */
            fprintf(err, "tokenkv serve: %s: '%s' is not a number in [%g, %g]\n", from, v, op->lo, op->hi);
            return false;
        }
        memcpy(field, &d, sizeof d);
        return true;
    }
    case K_ON:
    case K_OFF: {
        const int w = from_env ? switch_word(v) : 1;
        if (w < 0 && *v) {
            fprintf(err, "tokenkv serve: %s: '%s' is neither on (true, 1) nor off (false, 0)\n", from, v);
            return false;
        }
        *(bool *)field = (w > 0) == (op->kind == K_ON);
        return true;
    }
    case K_FN:
        return op->fn(o, v, from, err);
    case K_NOOP:
    case K_ALWAYS:
        if (from_env && switch_word(v) == 0) return true; /* a variable turning it off asks for nothing */
        fprintf(err, "tokenkv serve: %s%s%s: accepted, %s: %s\n", from, v && !from_env ? " " : "",
                v && !from_env ? v : "", op->kind == K_NOOP ? "no effect here" : "as always", op->why);
        return true;
    case K_NEUTRAL: {
        char *end1, *end2;
        const double want = strtod(op->why, &end1), got = strtod(v, &end2);
        const bool numeric = !*end1 && end1 != op->why;
        if (numeric ? (!*end2 && end2 != v && got == want) : !strcmp(v, op->why)) return true;
        fprintf(err, "tokenkv serve: %s %s: not implemented (only %s, the default, is accepted)\n", from, v, op->why);
        return false;
    }
    case K_REFUSE:
        if (from_env && switch_word(v) == 0) return true;
        fprintf(err, "tokenkv serve: %s: not implemented: %s\n", from, op->why);
        return false;
    }
    return false;
}

void serve_args_defaults(srv_opts *o) {
    *o = (srv_opts){
        .host = "127.0.0.1",
        .port = 8080,
        .parallel = 4,
        .cells = 4096,
        .n_batch = 512,
        .max_body = 1 << 20,
        .max_tokens = 4096,
        .max_queue = 256,
        .max_connections = 4096,
        .max_connections_per_client = 64,
        .idle_timeout = 30,
        .request_timeout = 10,
        .save_interval = 300,
        .kv_events_block_size = 16,
        .cache_disk_max = 1ull << 30,
        .state_cache_mib = 1024,
        .state_interval = 32,
        .defaults = {.temperature = NAN, .top_p = NAN, .min_p = NAN, .repeat_penalty = NAN, .presence_penalty = NAN,
                     .frequency_penalty = NAN, .top_k = -1, .seed = -1, .n_predict = -1, .n_keep = 0},
        .reasoning = SRV_REASONING_UNSET,
    };
}

serve_args_result serve_args_parse(srv_opts *o, int argc, char **argv, const char *(*env)(const char *name), FILE *err) {
    for (size_t i = 0; i < N_OPTIONS; i++) { /* llama-server's variable, then tokenkv's, then the command line */
        const char *names[2] = {options[i].lenv, options[i].env};
        for (int k = 0; k < 2; k++) {
            const char *v = names[k] ? env(names[k]) : NULL;
            if (v && !apply(o, &options[i], v, names[k], true, err)) return SERVE_ARGS_USAGE;
        }
    }
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help") || !strcmp(a, "--usage")) return SERVE_ARGS_HELP;
        char name[64];
        const char *eq = !strncmp(a, "--", 2) ? strchr(a, '=') : NULL; /* --name=value, as llama-server takes it */
        if (eq && (size_t)(eq - a) < sizeof name) {
            memcpy(name, a, (size_t)(eq - a));
            name[eq - a] = '\0';
            a = name, v = eq + 1;
        }
        const opt *op = find_option(a);
        if (!op) {
            fprintf(err, "tokenkv serve: unknown option '%s' (did you mean %s? tokenkv serve --help lists them)\n", a,
                    serve_args_nearest(a));
            return SERVE_ARGS_USAGE;
        }
        const bool takes = op->arity == A_ONE || (op->arity == A_OPT && (eq || (v && switch_word(v) >= 0)));
        if (eq && !takes) {
            fprintf(err, "tokenkv serve: %s takes no value\n", a);
            return SERVE_ARGS_USAGE;
        }
        if (takes && !v) {
            fprintf(err, "tokenkv serve: %s needs a value\n", a);
            return SERVE_ARGS_USAGE;
        }
        if (!apply(o, op, takes ? v : NULL, a, false, err)) return SERVE_ARGS_USAGE;
        if (takes && !eq) i++;
    }
    return SERVE_ARGS_RUN;
}
