/*
 * serve.c — `tokenkv serve`: options, then the server (server/).
 *
 * Every option has a TOKENKV_* environment variable (read first; the
 * command line overrides it) and, where llama-server has one, its name as
 * an alias (-c/--ctx-size, -np, -b/--batch-size, -a/--alias, ...), so a
 * llama-server command line or container environment works unchanged.
 */
#include "../server/server.h"
#include "cli.h"

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
    "                     [--no-prefix-cache] [--no-webui] [--no-repack] [--reference-order]\n"
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
    "  -a, --alias NAME           the model id (default: the file name without .gguf)   [TOKENKV_ALIAS]\n"
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
    "  --chat-template FILE|NAME  a Jinja template file, or a built-in family: chatml, llama2,\n"
    "                             llama3, mistral, zephyr, phi3 or plain (default: the model's\n"
    "                             tokenizer.chat_template, rendered as transformers does) [TOKENKV_CHAT_TEMPLATE]\n"
    "  --grammar-file FILE        a GBNF grammar every request without its own `grammar` follows\n"
    "                                                                                   [TOKENKV_GRAMMAR_FILE]\n"
    "  --no-prefix-cache          reuse nothing (for measurement)               [TOKENKV_NO_PREFIX_CACHE=1]\n"
    "  --no-webui                 no web page at / (chat and cache explorer)          [TOKENKV_NO_WEBUI=1]\n"
    "  --no-repack                keep the weights in the file's layout: faster start, slower\n"
    "                             products where this CPU reads packed rows (Q4_0)  [TOKENKV_NO_REPACK=1]\n"
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
    "  --cache-disk DIR           prefixes evicted from RAM are written to DIR in the background and\n"
    "                             loaded back when a prompt continues them           [TOKENKV_CACHE_DISK]\n"
    "  --cache-disk-max BYTES     DIR's size at most, least recently used files removed first;\n"
    "                             0: no limit (default 1073741824)                [TOKENKV_CACHE_DISK_MAX]\n"
    "  -h, --help                 show this help\n";

/* What an option sets. */
typedef enum { O_STR, O_INT, O_FLAG } okind;

typedef struct option {
    const char *names[4]; /* the first is the one messages use */
    const char *env;
    okind kind;
    size_t off;           /* of the field in srv_opts */
    long long lo, hi;
    int width;            /* O_INT: bytes of the srv_opts field (4 or 8) */
} option;

#define OFF(f) offsetof(srv_opts, f)
#define INT(f, l, h) O_INT, OFF(f), l, h, (int)sizeof(((srv_opts *)0)->f)
static const option options[] = {
    {{"--model", "-m"}, "TOKENKV_MODEL", O_STR, OFF(model_path), 0, 0, 0},
    {{"--host"}, "TOKENKV_HOST", O_STR, OFF(host), 0, 0, 0},
    {{"--port"}, "TOKENKV_PORT", INT(port, 0, 65535)},
    {{"--parallel", "-np"}, "TOKENKV_PARALLEL", INT(parallel, 1, 256)},
    {{"--ctx-size", "-c", "--ctx"}, "TOKENKV_CTX_SIZE", INT(cells, 16, 1 << 24)},
    {{"--batch-size", "-b", "--batch"}, "TOKENKV_BATCH_SIZE", INT(n_batch, 1, 1 << 16)},
    {{"--cache-type-k", "-ctk"}, "TOKENKV_CACHE_TYPE_K", O_STR, OFF(cache_type_k), 0, 0, 0},
    {{"--cache-type-v", "-ctv"}, "TOKENKV_CACHE_TYPE_V", O_STR, OFF(cache_type_v), 0, 0, 0},
    {{"--threads", "-t"}, "TOKENKV_THREADS", INT(threads, 1, 1024)},
    {{"--api-key"}, "TOKENKV_API_KEY", O_STR, OFF(api_key), 0, 0, 0},
    {{"--api-key-file"}, "TOKENKV_API_KEY_FILE", O_STR, OFF(api_key_file), 0, 0, 0},
    {{"--admin-key"}, "TOKENKV_ADMIN_KEY", O_STR, OFF(admin_key), 0, 0, 0},
    {{"--metrics-public"}, "TOKENKV_METRICS_PUBLIC", O_FLAG, OFF(metrics_public), 0, 0, 0},
    {{"--cors-origin"}, "TOKENKV_CORS_ORIGIN", O_STR, OFF(cors_origin), 0, 0, 0},
    {{"--alias", "-a"}, "TOKENKV_ALIAS", O_STR, OFF(alias), 0, 0, 0},
    {{"--max-body"}, "TOKENKV_MAX_BODY", INT(max_body, 64, 1ll << 32)},
    {{"--max-tokens"}, "TOKENKV_MAX_TOKENS", INT(max_tokens, 1, 1 << 24)},
    {{"--max-queue"}, "TOKENKV_MAX_QUEUE", INT(max_queue, 1, 1 << 20)},
    {{"--max-connections"}, "TOKENKV_MAX_CONNECTIONS", INT(max_connections, 1, 1 << 20)},
    {{"--max-connections-per-client"}, "TOKENKV_MAX_CONNECTIONS_PER_CLIENT", INT(max_connections_per_client, 0, 1 << 20)},
    {{"--idle-timeout"}, "TOKENKV_IDLE_TIMEOUT", INT(idle_timeout, 1, 86400)},
    {{"--request-timeout"}, "TOKENKV_REQUEST_TIMEOUT", INT(request_timeout, 0, 86400)},
    {{"--chat-template"}, "TOKENKV_CHAT_TEMPLATE", O_STR, OFF(chat_template), 0, 0, 0},
    {{"--grammar-file"}, "TOKENKV_GRAMMAR_FILE", O_STR, OFF(grammar_file), 0, 0, 0},
    {{"--no-prefix-cache"}, "TOKENKV_NO_PREFIX_CACHE", O_FLAG, OFF(no_prefix_cache), 0, 0, 0},
    {{"--no-webui"}, "TOKENKV_NO_WEBUI", O_FLAG, OFF(no_webui), 0, 0, 0},
    {{"--no-repack"}, "TOKENKV_NO_REPACK", O_FLAG, OFF(no_repack), 0, 0, 0},
    {{"--reference-order"}, "TOKENKV_REFERENCE_ORDER", O_FLAG, OFF(reference_order), 0, 0, 0},
    {{"--cache-dir"}, "TOKENKV_CACHE_DIR", O_STR, OFF(cache_dir), 0, 0, 0},
    {{"--cache-dir-max"}, "TOKENKV_CACHE_DIR_MAX", INT(cache_dir_max, 0, 1ll << 50)},
    {{"--save-interval"}, "TOKENKV_SAVE_INTERVAL", INT(save_interval, 0, 1 << 24)},
    {{"--kv-store"}, "TOKENKV_KV_STORE", O_STR, OFF(kv_store), 0, 0, 0},
    {{"--kv-store-timeout-ms"}, "TOKENKV_KV_STORE_TIMEOUT_MS", INT(kv_store_timeout_ms, 1, 60000)},
    {{"--kv-store-max-pending"}, "TOKENKV_KV_STORE_MAX_PENDING", INT(kv_store_max_pending, 0, 1ll << 40)},
    {{"--replica-id"}, "TOKENKV_REPLICA_ID", O_STR, OFF(replica_id), 0, 0, 0},
    {{"--kv-events"}, "TOKENKV_KV_EVENTS", O_STR, OFF(kv_events), 0, 0, 0},
    {{"--cache-disk"}, "TOKENKV_CACHE_DISK", O_STR, OFF(cache_disk), 0, 0, 0},
    {{"--cache-disk-max"}, "TOKENKV_CACHE_DISK_MAX", INT(cache_disk_max, 0, 1ll << 50)},
    {{"--kv-events-block-size"}, "TOKENKV_KV_EVENTS_BLOCK_SIZE", INT(kv_events_block_size, 1, 4096)},
    {{"--kv-events-tokens"}, "TOKENKV_KV_EVENTS_TOKENS", O_FLAG, OFF(kv_events_tokens), 0, 0, 0},
};

static const option *find_option(const char *name) {
    for (size_t i = 0; i < sizeof options / sizeof options[0]; i++)
        for (int k = 0; k < 4 && options[i].names[k]; k++)
            if (!strcmp(options[i].names[k], name)) return &options[i];
    return NULL;
}

/* Set *o's field from the text v (from `from`: an option or a variable's name); false with a message. */
static bool set(srv_opts *o, const option *op, const char *v, const char *from) {
    char *field = (char *)o + op->off;
    if (op->kind == O_STR) {
        /* an empty value: unset, but for a key, where that would silently turn authentication off */
        if (!*v && (op->off == offsetof(srv_opts, api_key) || op->off == offsetof(srv_opts, admin_key))) {
            fprintf(stderr, "tokenkv serve: %s is empty: give a key, or leave it out to serve without one\n", from);
            return false;
        }
        *(const char **)field = *v ? v : NULL;
        return true;
    }
    if (op->kind == O_FLAG) {
        *(bool *)field = strcmp(v, "0") && strcmp(v, "false") && *v;
        return true;
    }
    uint64_t d;
    if (!cli_uint("serve", from, v, (uint64_t)op->lo, (uint64_t)op->hi, &d)) return false;
    /* every integer field is 4 or 8 bytes, and the ranges are non-negative: the value's bytes fit either */
    if (op->width == 8) {
        const uint64_t u = (uint64_t)d;
        memcpy(field, &u, 8);
    } else {
        const uint32_t u = (uint32_t)d;
        memcpy(field, &u, 4);
    }
    return true;
}

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

int cmd_serve(int argc, char **argv) {
    srv_opts o = {
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
    };
    for (size_t i = 0; i < sizeof options / sizeof options[0]; i++) { /* the environment, then the command line */
        const char *v = getenv(options[i].env);
        if (v && !set(&o, &options[i], v, options[i].env)) return 2;
    }
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            fputs(serve_help, stdout);
            return 0;
        }
        const option *op = find_option(a);
        if (!op) {
            fprintf(stderr, "tokenkv serve: unknown option '%s'\n%s", a, serve_help);
            return 2;
        }
        if (op->kind == O_FLAG) {
            *(bool *)((char *)&o + op->off) = true;
            continue;
        }
        if (!v) {
            fprintf(stderr, "tokenkv serve: %s needs a value\n%s", a, serve_help);
            return 2;
        }
        if (!set(&o, op, v, a)) return 2;
        i++;
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
