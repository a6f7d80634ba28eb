/*
 * serve.c — `tokenkv serve`: options, then the server (server/).
 */
#include "../server/server.h"
#include "cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DEFAULT_MODEL "../shared/models/stories260K.gguf"

static const char *const serve_help =
    "usage: tokenkv serve [-m MODEL] [--host 127.0.0.1] [--port 8080] [--parallel N] [--ctx CELLS]\n"
    "                     [-t THREADS] [--api-key KEY] [--admin-key KEY] [--metrics-public]\n"
    "                     [--max-body BYTES] [--max-tokens N]\n"
    "                     [--max-queue N] [--batch N] [--chat-template FILE|NAME] [--no-prefix-cache]\n"
    "                     [--cache-dir DIR [--cache-dir-max BYTES] [--save-interval S]]\n"
    "\n"
    "An OpenAI-compatible HTTP server: POST /v1/completions, /v1/chat/completions,\n"
    "/tokenize, /detokenize; GET /v1/models, /v1/cache, /health, /metrics. Every\n"
    "prompt reuses the longest prefix any earlier request left in the cache.\n"
    "One log line per request on stderr. SIGINT or SIGTERM stops it.\n"
    "\n"
    "  -m, --model MODEL       a GGUF model (default " DEFAULT_MODEL ")\n"
    "  --host ADDR             address to listen on (default 127.0.0.1)\n"
    "  --port N                port (default 8080; 0 picks a free one, printed at start-up)\n"
    "  --parallel N            requests decoded together (default 4)\n"
    "  --ctx CELLS             KV cells shared by all requests (default 4096)\n"
    "  -t, --threads N         threads (default: the physical cores this process may use,\n"
    "                          within its cgroup quota)\n"
    "  --api-key KEY           require 'Authorization: Bearer KEY' (also $TOKENKV_API_KEY);\n"
    "                          /health stays open (probes)\n"
    "  --admin-key KEY         GET /v1/cache with 'Authorization: Bearer KEY' shows every\n"
    "                          namespace (others see only their cache_salt's)\n"
    "  --metrics-public        /metrics without the API key (Prometheus scrapers)\n"
    "  --max-body BYTES        largest request body (default 1048576)\n"
    "  --max-tokens N          largest max_tokens a request may ask (default 4096)\n"
    "  --max-queue N           waiting requests before 429 (default 256)\n"
    "  --batch N               tokens per decode step (default 512)\n"
    "  --chat-template FILE|NAME  a Jinja template file, or a built-in family: chatml,\n"
    "                          llama2, llama3, mistral, zephyr, phi3 or plain (default: the\n"
    "                          model's tokenizer.chat_template, rendered as transformers does)\n"
    "  --no-prefix-cache       reuse nothing (for measurement and comparison)\n"
    "  --cache-dir DIR         load cached prefixes from DIR at start; save them there\n"
    "                          every --save-interval seconds and at shutdown\n"
    "  --cache-dir-max BYTES   most recently used prefixes first, up to BYTES (default: no limit)\n"
    "  --save-interval S       seconds between saves, 0: only at shutdown (default 300)\n"
    "  -h, --help              show this help\n";

static bool num(const char *opt, const char *v, long long lo, long long hi, long long *out) {
    char *end;
    long long d = strtoll(v, &end, 10);
    if (end == v || *end || d < lo || d > hi) {
        fprintf(stderr, "tokenkv serve: %s: '%s' is not an integer in [%lld, %lld]\n", opt, v, lo, hi);
        return false;
    }
    *out = d;
    return true;
}

int cmd_serve(int argc, char **argv) {
    srv_opts o = {
        .model_path = DEFAULT_MODEL,
        .host = "127.0.0.1",
        .port = 8080,
        .parallel = 4,
        .cells = 4096,
        .n_batch = 512,
        .max_body = 1 << 20,
        .max_tokens = 4096,
        .max_queue = 256,
        .api_key = getenv("TOKENKV_API_KEY"),
        .save_interval = 300,
    };
    if (o.api_key && !*o.api_key) o.api_key = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        long long d = 0;
        bool ok = true;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            fputs(serve_help, stdout);
            return 0;
        }
        if (!strcmp(a, "--no-prefix-cache")) {
            o.no_prefix_cache = true;
            continue;
        }
        if (!strcmp(a, "--metrics-public")) {
            o.metrics_public = true;
            continue;
        }
        if (!v) {
            fprintf(stderr, "tokenkv serve: unknown option or missing value: '%s'\n%s", a, serve_help);
            return 2;
        }
        i++;
        if (!strcmp(a, "-m") || !strcmp(a, "--model")) o.model_path = v;
        else if (!strcmp(a, "--host")) o.host = v;
        else if (!strcmp(a, "--port")) ok = num(a, v, 0, 65535, &d), o.port = (int)d;
        else if (!strcmp(a, "--parallel")) ok = num(a, v, 1, 256, &d), o.parallel = (int)d;
        else if (!strcmp(a, "--ctx")) ok = num(a, v, 16, 1 << 24, &d), o.cells = (uint32_t)d;
        else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) ok = num(a, v, 1, 1024, &d), o.threads = (int)d;
        else if (!strcmp(a, "--api-key")) o.api_key = *v ? v : NULL;
        else if (!strcmp(a, "--admin-key")) o.admin_key = *v ? v : NULL;
        else if (!strcmp(a, "--max-body")) ok = num(a, v, 64, 1ll << 32, &d), o.max_body = (size_t)d;
        else if (!strcmp(a, "--max-tokens")) ok = num(a, v, 1, 1 << 24, &d), o.max_tokens = (int)d;
        else if (!strcmp(a, "--max-queue")) ok = num(a, v, 1, 1 << 20, &d), o.max_queue = (size_t)d;
        else if (!strcmp(a, "--batch")) ok = num(a, v, 1, 1 << 16, &d), o.n_batch = (uint32_t)d;
        else if (!strcmp(a, "--chat-template")) o.chat_template = v;
        else if (!strcmp(a, "--cache-dir")) o.cache_dir = v;
        else if (!strcmp(a, "--cache-dir-max")) ok = num(a, v, 0, 1ll << 50, &d), o.cache_dir_max = (uint64_t)d;
        else if (!strcmp(a, "--save-interval")) ok = num(a, v, 0, 1 << 24, &d), o.save_interval = (int)d;
        else {
            fprintf(stderr, "tokenkv serve: unknown option '%s'\n%s", a, serve_help);
            return 2;
        }
        if (!ok) return 2;
    }
    if ((uint32_t)o.parallel > o.n_batch) {
        fprintf(stderr, "tokenkv serve: --parallel %d exceeds --batch %u: each step decodes a token per request\n",
                o.parallel, o.n_batch);
        return 2;
    }
    return srv_main(&o);
}
