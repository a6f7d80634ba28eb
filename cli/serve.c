/*
 * serve.c — `tokenkv serve`: options, then the server (server/).
 *
 * The options are a table (serve_args.c): every option has a TOKENKV_*
 * environment variable and, where llama-server has it, llama-server's
 * names and LLAMA_ARG_* variable, so a llama-server command line or
 * container environment works unchanged. Here: the help, and what is
 * checked once every option is read.
 */
#include "../server/server.h"
#include "cli.h"
#include "serve_args.h"

#include <errno.h>
#include <limits.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define DEFAULT_MODEL "../shared/models/stories260K.gguf"

static const char *const serve_help =
    "usage: tokenkv serve [-m MODEL] [--host 127.0.0.1] [--port 8080] [-np N] [-c CELLS] [-b N]\n"
    "                     [-t THREADS] [--api-key KEY | --api-key-file FILE] [--admin-key KEY]\n"
    "                     [--metrics-public] [--cors-origin ORIGIN] [-a ALIAS] [--max-body BYTES]\n"
    "                     [--max-tokens N] [--max-queue N] [--chat-template FILE|NAME] [--grammar-file FILE]\n"
    "                     [--no-prefix-cache] [--no-webui] [--no-repack] [--no-huge-pages]\n"
    "                     [--reference-order]\n"
    "                     [--cache-dir DIR [--cache-dir-max BYTES] [--save-interval S]]\n"
    "                     [--kv-store redis://HOST:PORT[/DB] [--kv-store-timeout-ms MS]] [--replica-id NAME]\n"
    "                     [--kv-events tcp://HOST:PORT [--kv-events-block-size N]]\n"
    "                     [--cache-disk DIR [--cache-disk-max BYTES]]\n"
    "\n"
    "An OpenAI-compatible HTTP server: POST /v1/completions, /v1/chat/completions,\n"
    "/tokenize, /detokenize, /apply-template, /completion (llama-server's); GET /v1/models,\n"
    "/v1/cache, /props, /slots, /health, /metrics; a web page at / (chat and cache explorer).\n"
    "Every prompt reuses the longest prefix any earlier request left in the cache.\n"
    "One log line per request on stderr. SIGINT or SIGTERM stops it.\n"
    "Every option can also come from the environment variable shown (the command\n"
    "line wins); llama-server's names work as aliases.\n"
    "\n"
    "  -m, --model MODEL          a GGUF model; default " DEFAULT_MODEL ", looked\n"
    "                             for here, then beside the tokenkv binary's checkout  [TOKENKV_MODEL]\n"
    "  --host ADDR                address to listen on (default 127.0.0.1)             [TOKENKV_HOST]\n"
    "  --port N                   port (default 8080; 0: any free one, printed)         [TOKENKV_PORT]\n"
    "  -np, --parallel N          requests decoded together (default 4)                [TOKENKV_PARALLEL]\n"
    "  -c, --ctx-size, --ctx N    KV cells shared by all requests (default 4096)       [TOKENKV_CTX_SIZE]\n"
    "  -b, --batch-size, --batch N  tokens per decode step (default 512)               [TOKENKV_BATCH_SIZE]\n"
    "  -ctk, --cache-type-k T     the K cache's type: f16 (default), f32, q8_0, q5_1, q5_0,\n"
    "                             q4_1, q4_0, iq4_nl                              [TOKENKV_CACHE_TYPE_K]\n"
    "  -ctv, --cache-type-v T     the V cache's type (default: the K cache's)    [TOKENKV_CACHE_TYPE_V]\n"
    "  -t, --threads N            threads (default: the physical cores this process may\n"
    "                             use, within its cgroup quota)                         [TOKENKV_THREADS]\n"
    "  --api-key KEY              require 'Authorization: Bearer KEY'; /health stays open [TOKENKV_API_KEY]\n"
    "  --api-key-file FILE        the key from the first line of FILE               [TOKENKV_API_KEY_FILE]\n"
    "  --admin-key KEY            the API key's rights, and /v1/cache of every namespace [TOKENKV_ADMIN_KEY]\n"
    "  --metrics-public           /metrics without the API key                     [TOKENKV_METRICS_PUBLIC=1]\n"
    "  --cors-origin ORIGIN       let web pages of ORIGIN (or *) call the API (default: none) [TOKENKV_CORS_ORIGIN]\n"
    "  -a, --alias NAME[,NAME]    the model id (default: the file name without .gguf); of several, the\n"
    "                             first in order, all listed as aliases                  [TOKENKV_ALIAS]\n"
    "  --tags TAG[,TAG]           tags /v1/models lists (informational)                   [TOKENKV_TAGS]\n"
    "  --max-body BYTES           largest request body (default 1048576)                [TOKENKV_MAX_BODY]\n"
    "  --max-tokens N             largest max_tokens a request may ask (default 4096)   [TOKENKV_MAX_TOKENS]\n"
    "  --max-queue N              waiting requests before 429 (default 256)             [TOKENKV_MAX_QUEUE]\n"
    "  --max-connections N        open connections at most (default 4096)         [TOKENKV_MAX_CONNECTIONS]\n"
    "  --max-connections-per-client N  per client address, 0: no limit (default 64)\n"
    "                                                              [TOKENKV_MAX_CONNECTIONS_PER_CLIENT]\n"
    "  --idle-timeout S           seconds a connection may stay silent (default 30)  [TOKENKV_IDLE_TIMEOUT]\n"
    "  --request-timeout S        seconds to send a request's headers and body, from the connection's\n"
    "                             start or the previous response; 0: no limit (default 10)\n"
    "                                                                             [TOKENKV_REQUEST_TIMEOUT]\n"
    "  --chat-template NAME|FILE|JINJA  a built-in family: chatml, llama2, llama3, mistral, zephyr,\n"
    "                             phi3 or plain; a Jinja template file; or the template itself, inline\n"
    "                             (default: the model's tokenizer.chat_template, rendered as transformers\n"
    "                             does; chatml for a model without one)              [TOKENKV_CHAT_TEMPLATE]\n"
    "  --chat-template-file FILE  a Jinja template file                       [TOKENKV_CHAT_TEMPLATE_FILE]\n"
    "  --chat-template-kwargs JSON  template variables under every request's chat_template_kwargs\n"
    "                                                                      [TOKENKV_CHAT_TEMPLATE_KWARGS]\n"
    "  --grammar-file FILE        a GBNF grammar every request without its own `grammar` follows\n"
    "                                                                                   [TOKENKV_GRAMMAR_FILE]\n"
    "  --no-prefix-cache          reuse nothing (for measurement)               [TOKENKV_NO_PREFIX_CACHE=1]\n"
    "  --no-webui                 no web page at / (chat and cache explorer)          [TOKENKV_NO_WEBUI=1]\n"
    "  --no-repack                keep the weights in the file's layout: faster start, slower\n"
    "                             products where this CPU reads packed rows (Q4_0)  [TOKENKV_NO_REPACK=1]\n"
    "  --no-huge-pages            no transparent huge pages under the packed weights: a load that\n"
    "                             never waits for the kernel to compact memory, slower generation\n"
    "                                                                           [TOKENKV_NO_HUGE_PAGES=1]\n"
    "  --reference-order          compute in llama.cpp's order (tkv_context_params.batch_invariant\n"
    "                             false): a lone request's tokens are the reference's, but a\n"
    "                             request's output then depends on what is decoded beside it and on\n"
    "                             how much of its prompt came from the cache  [TOKENKV_REFERENCE_ORDER=1]\n"
    "  --cache-dir DIR            load cached prefixes from DIR at start; save them there\n"
    "                             every --save-interval seconds and at shutdown         [TOKENKV_CACHE_DIR]\n"
    "  --cache-dir-max BYTES      most recently used prefixes first, up to BYTES (default: no limit)\n"
    "                                                                                  [TOKENKV_CACHE_DIR_MAX]\n"
    "  --save-interval S          seconds between saves, 0: only at shutdown (default 300) [TOKENKV_SAVE_INTERVAL]\n"
    "  --kv-store redis://HOST:PORT[/DB]  share computed prefixes with other replicas of the same\n"
    "                             model through Redis: a prompt whose prefix is not cached here\n"
    "                             loads it from there; computed prompts are written in the background [TOKENKV_KV_STORE]\n"
    "  --kv-store-timeout-ms MS   deadline of each Redis lookup or write, connect included (default 50);\n"
    "                             after 3 failed or late lookups (or writes) in a row the store is\n"
    "                             left alone for 5 s                           [TOKENKV_KV_STORE_TIMEOUT_MS]\n"
    "  --kv-store-max-pending BYTES  blocks waiting to be written at most (default 256 MiB)\n"
    "                                                                       [TOKENKV_KV_STORE_MAX_PENDING]\n"
    "  --replica-id NAME          send 'X-Tokenkv-Replica: NAME' with every response   [TOKENKV_REPLICA_ID]\n"
    "  --kv-events ENDPOINT       publish what the cache holds, in vLLM's KV-event format, on a\n"
    "                             ZeroMQ PUB socket bound at ENDPOINT (tcp://HOST:PORT)  [TOKENKV_KV_EVENTS]\n"
    "  --kv-events-block-size N   tokens per block of those events (default 16)\n"
    "                                                                   [TOKENKV_KV_EVENTS_BLOCK_SIZE]\n"
    "  --kv-events-tokens         with --api-key, events carry token ids too (routers need only the\n"
    "                             hashes; ids are prompt text for any subscriber); never those of a\n"
    "                             cache_salt                                   [TOKENKV_KV_EVENTS_TOKENS]\n"
    "  --state-cache MIB          hybrid models (qwen35, granitehybrid, nemotron_h): memory for their\n"
    "                             recurrent-state checkpoints (default 1024); a prefix is reusable up\n"
    "                             to its deepest checkpoint                     [TOKENKV_STATE_CACHE]\n"
    "  --state-interval N         hybrid models: a checkpoint every N prompt positions too (default 32;\n"
    "                             0: at prompt ends and branch points only)  [TOKENKV_STATE_INTERVAL]\n"
    "  --swa-rows N               sliding-window models (gemma2/3/4, gpt-oss): the window layers keep\n"
    "                             their K/V in a pool of N rows, at least --parallel x the window,\n"
    "                             instead of one per cell (Gemma-3-4B at 8k: 1.06 GiB -> 0.27 GiB);\n"
    "                             a prefix is then reusable where its window's rows are held. 0:\n"
    "                             every cell keeps them (default). Not with --cache-dir, --kv-store,\n"
    "                             --cache-disk                                   [TOKENKV_SWA_ROWS]\n"
    "  --draft N                  verify up to N drafted tokens per step for each generating request,\n"
    "                             taken from the cache (what followed this text before) or from the\n"
    "                             text itself: the same answers, fewer steps when text repeats; 0:\n"
    "                             off (default 0; at most 64); a request's speculative.n_max\n"
    "                             overrides it                                       [TOKENKV_DRAFT]\n"
    "  --draft-always             a step carries every draft within the budget; by default only those\n"
    "                             worth their rows: a draft's row costs what the step's time says\n"
    "                             (nearly nothing while few sequences run, a token's worth once the\n"
    "                             step is bound by arithmetic) against the tokens it is expected to\n"
    "                             add                                         [TOKENKV_DRAFT_ALWAYS]\n"
    "  --no-draft-known           a drafting greedy request computes every token; by default it takes\n"
    "                             the tokens a greedy answer chose after the same text before from the\n"
    "                             cache without a step (the same answer)     [TOKENKV_NO_DRAFT_KNOWN]\n"
    "  --cache-disk DIR           prefixes evicted from RAM are written to DIR in the background and\n"
    "                             loaded back when a prompt continues them           [TOKENKV_CACHE_DISK]\n"
    "  --cache-disk-max BYTES     DIR's size at most, least recently used files removed first;\n"
    "                             0: no limit (default 1073741824)                [TOKENKV_CACHE_DISK_MAX]\n"
    "  -h, --help                 show this help\n"
    "\n"
    "llama-server's options work as there, with its names and LLAMA_ARG_* variables: request defaults\n"
    "(--temp, --top-k, --top-p, --min-p, --repeat-penalty, --presence-penalty, --frequency-penalty,\n"
    "--seed, -n/--n-predict, --ignore-eos), --no-slots, --verbose, --reasoning on|off|auto,\n"
    "--reasoning-format none|deepseek|auto, --timeout. Its device options (-ngl, -fa, --mlock, ...) are\n"
    "accepted with one log line; what is not implemented (--lora, --hf-repo, --embedding, ...) is refused\n"
    "by name. docs/server.md, \"Coming from llama-server\", lists the differences.\n";

/* The first line of a key file; NULL with a message. The buffer is static: one key per process. */
static const char *read_key_file(const char *path) {
    static char key[512];
    FILE *f = fopen(path, "r");
    if (!f || !fgets(key, sizeof key, f)) {
        fprintf(stderr, "tokenkv serve: --api-key-file %s: cannot read a key: %s\n", path, f ? "empty" : strerror(errno));
        if (f) fclose(f);
        return NULL;
    }
    fclose(f);
    key[strcspn(key, "\r\n")] = '\0';
    if (!key[0]) fprintf(stderr, "tokenkv serve: --api-key-file %s: the first line is empty\n", path);
    return key[0] ? key : NULL;
}

/*
 * The default model, wherever tokenkv is started: as given (relative to
 * the working directory), else relative to the checkout the binary was
 * built in (build/tokenkv -> ../shared beside the checkout). The path is
 * in a static buffer.
 */
static const char *default_model(void) {
    if (access(DEFAULT_MODEL, R_OK) == 0) return DEFAULT_MODEL;
    static char path[PATH_MAX + 64];
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0) return DEFAULT_MODEL;
    exe[n] = '\0';
    char *slash = strrchr(exe, '/');
    if (slash) *slash = '\0';
    snprintf(path, sizeof path, "%s/../" DEFAULT_MODEL, exe); /* <checkout>/build/../../shared/... */
    return access(path, R_OK) == 0 ? path : DEFAULT_MODEL;
}

static const char *env_lookup(const char *name) { return getenv(name); }

int cmd_serve(int argc, char **argv) {
    srv_opts o;
    serve_args_defaults(&o);
    switch (serve_args_parse(&o, argc, argv, env_lookup, stderr)) {
    case SERVE_ARGS_HELP: fputs(serve_help, stdout); return 0;
    case SERVE_ARGS_USAGE: return 2;
    case SERVE_ARGS_RUN: break;
    }
    if (o.chat_template && o.chat_template_file) {
        fprintf(stderr, "tokenkv serve: --chat-template and --chat-template-file: give one\n");
        return 2;
    }
    if (!o.model_path) o.model_path = default_model();
    tkv_type tk = TKV_TYPE_F16, tv = TKV_TYPE_COUNT; /* V: as K */
    const char *bad = o.cache_type_k && !cli_kv_type(o.cache_type_k, &tk)   ? o.cache_type_k
                      : o.cache_type_v && !cli_kv_type(o.cache_type_v, &tv) ? o.cache_type_v
                                                                            : NULL;
    if (bad) {
        fprintf(stderr, "tokenkv serve: --cache-type-%c '%s': not a KV cache type (%s)\n",
                bad == o.cache_type_k ? 'k' : 'v', bad, CLI_KV_TYPES);
        return 2;
    }
    o.kv_type_k = (int)tk, o.kv_type_v = (int)tv;
    for (const char *p = o.replica_id; p && *p; p++)
        if ((unsigned char)*p < 0x20 || *p == 0x7f) {
            fprintf(stderr, "tokenkv serve: --replica-id must be printable (it is sent as a header)\n");
            return 2;
        }
    if (o.api_key_file && !(o.api_key = read_key_file(o.api_key_file))) return 2;
    if ((uint32_t)o.parallel > o.n_batch) {
        fprintf(stderr, "tokenkv serve: --parallel %d exceeds --batch-size %u: each step decodes a token per request\n",
                o.parallel, o.n_batch);
        return 2;
    }
    return srv_main(&o);
}
