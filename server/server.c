/*
 * server.c — start-up and shutdown of `tokenkv serve`: load the model,
 * create the context and the scheduler, listen, and on SIGINT/SIGTERM stop
 * accepting, end what runs and free everything.
 */
#include "http/http.h"
#include "tiers/disk_tier.h"
#include "tiers/dir_saver.h"
#include "tiers/kv_events.h"
#include "openai/reasoning.h"
#include "tiers/redis_store.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static void mhd_log(void *cls, const char *fmt, va_list ap) {
    (void)cls;
    /* a client gone while its request was read or its answer sent, or a
       connection cut at the request deadline: ordinary (the request's own
       log line says 499), and thousands of lines under a slowloris */
    static const char *const gone[] = {"Connection socket is closed when reading request",
                                       "Failed to send the chunked response body", "Failed to send data in request",
                                       "Failed to send the response headers", "Failed to send reply",
                                       "Closing connection (application error generating response)"};
    /* compared formatted: MHD passes some of them as "%s\n" and the message as its argument */
    char msg[512];
    vsnprintf(msg, sizeof msg, fmt, ap);
    for (size_t i = 0; i < sizeof gone / sizeof *gone; i++)
        if (!strncmp(msg, gone[i], strlen(gone[i]))) return;
    fprintf(stderr, "tokenkv serve: http: %s", msg);
}

/* HTTP threads: each runs a poll loop over its share of the connections.
   They only parse, tokenize and copy text, so a few serve thousands of
   connections; more than one keeps a long tokenization from holding up the
   rest.

   poll, not epoll: MHD's epoll loop (0.9.75, Debian 12's; 1.0.1 the same)
   reads its events 128 at a time, and after a full batch waits again with
   the timeout it computed before it, so when no further event comes the
   128 connections it has just marked ready wait for the next connection
   timeout. 500 uploads at once on a busy machine left a thread's 128 unanswered
   until the request deadline closed them (tests/e2e/test/starvation.test.mjs,
   2 runs in about 30). poll is level-triggered and rebuilt every turn: a few
   microseconds per thousand connections, and nothing left waiting. */
#define HTTP_THREADS 4

/*
 * Every connection is a descriptor: raise the soft limit on open files
 * (often 1024) towards the hard one so that --max-connections can be
 * reached, with room for the model, the cache directory and the listening
 * socket, and for the sockets that drain after an early answer (conn.h).
 * When the hard limit is too low, say so and serve fewer.
 */
enum { LINGER_SOCKETS = 1024 };

static unsigned connection_limit(int wanted) {
    enum { SPARE = 64 + LINGER_SOCKETS };
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0) return (unsigned)wanted;
    const rlim_t need = (rlim_t)wanted + SPARE;
    if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < need) {
        rlim_t cur = rl.rlim_max == RLIM_INFINITY || rl.rlim_max > need ? need : rl.rlim_max;
        struct rlimit up = {cur, rl.rlim_max};
        if (setrlimit(RLIMIT_NOFILE, &up) == 0) rl.rlim_cur = cur;
    }
    if (rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur >= need) return (unsigned)wanted;
    const unsigned n = rl.rlim_cur > 2 * SPARE ? (unsigned)(rl.rlim_cur - SPARE) : SPARE;
    fprintf(stderr, "tokenkv serve: warning: --max-connections %d needs %llu open files, and this process may "
                    "open %llu (ulimit -n): serving %u connections at most\n", wanted, (unsigned long long)need,
            (unsigned long long)rl.rlim_cur, n);
    return n;
}

/* The id /v1/models lists: --alias (of a comma-separated list, as llama-server's, the first in byte order), else
   the file's name without directory and .gguf. */
static void model_id(const char *path, const char *alias, char *out, size_t cap) {
    if (alias) {
        const char *best = NULL;
        size_t best_n = 0;
        for (const char *p = alias; *p;) {
            while (*p == ',' || *p == ' ') p++;
            size_t n = strcspn(p, ",");
            while (n && p[n - 1] == ' ') n--;
            if (n && (!best || memcmp(p, best, n < best_n ? n : best_n) < 0 ||
                      (!memcmp(p, best, n < best_n ? n : best_n) && n < best_n)))
                best = p, best_n = n;
            p += strcspn(p, ",");
        }
        snprintf(out, cap, "%.*s", (int)(best ? best_n : 0), best ? best : "");
        if (best) return;
    }
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    size_t n = strlen(base);
    if (n > 5 && !strcmp(base + n - 5, ".gguf")) n -= 5;
    snprintf(out, cap, "%.*s", (int)n, base);
}

/* A whole file, NUL-terminated, malloc'd (*n its bytes); NULL with "tokenkv serve: OPT PATH: cannot read it". */
static char *read_option_file(const char *opt, const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    char *src = NULL;
    long len = -1;
    if (f && fseek(f, 0, SEEK_END) == 0 && (len = ftell(f)) >= 0 && fseek(f, 0, SEEK_SET) == 0 &&
        (src = malloc((size_t)len + 1)) && fread(src, 1, (size_t)len, f) != (size_t)len)
        len = -1;
    if (f) fclose(f);
    if (!src || len < 0) {
        fprintf(stderr, "tokenkv serve: %s %s: cannot read it\n", opt, path);
        free(src);
        return NULL;
    }
    src[len] = '\0';
    *n = (size_t)len;
    return src;
}

/* --grammar-file: the grammar every request without its own is held to; NULL with a message on stderr. */
static tkv_grammar *grammar_file(const char *path, const tkv_model *m) {
    size_t n;
    char *src = read_option_file("--grammar-file", path, &n);
    tkv_grammar *g = NULL;
    if (src && tkv_grammar_create(m, src, n, NULL, &g) != TKV_OK)
        fprintf(stderr, "tokenkv serve: --grammar-file %s: %s\n", path, tkv_last_error(NULL));
    free(src);
    return g;
}

/* A Jinja template from its source (*think: it has think markers), or NULL with a message on stderr naming `from`. */
static tkv_chat_template *template_source(const char *src, size_t n, const char *from, bool *think,
                                          srv_tool_format *tools) {
    tkv_chat_template *t = NULL;
    if (tkv_chat_template_parse(src, n, &t) != TKV_OK)
        fprintf(stderr, "tokenkv serve: %s: %s\n", from, tkv_last_error(NULL));
    else *think = srv_think_markers(src, n), *tools = srv_tools_detect(src, n);
    return t;
}

/* A Jinja template from a file, or NULL with a message on stderr. */
static tkv_chat_template *template_file(const char *opt, const char *path, bool *think, srv_tool_format *tools) {
    size_t n;
    char *src = read_option_file(opt, path, &n);
    char from[512];
    snprintf(from, sizeof from, "%s %s", opt, path);
    tkv_chat_template *t = src ? template_source(src, n, from, think, tools) : NULL;
    free(src);
    return t;
}

/* llama-server's fallback for a model without a chat template: ChatML, each of OpenAI's roles as it is named (tool
   results too; another role raises, a 400), text parts joined by newlines. */
static const char chatml_jinja[] =
    "{%- for message in messages -%}"
    "{%- if message['role'] not in ['system', 'developer', 'user', 'assistant', 'tool'] -%}"
    "{{- raise_exception('unknown role: ' + message['role']) -}}{%- endif -%}"
    "{{- '<|im_start|>' + message['role'] + '\\n' -}}"
    "{%- if message['content'] is string -%}{{- message['content'] -}}"
    "{%- elif message['content'] -%}{%- for part in message['content'] -%}"
    "{%- if part['type'] == 'text' -%}{{- ('\\n' if not loop.first else '') + part['text'] -}}{%- endif -%}"
    "{%- endfor -%}{%- endif -%}"
    "{{- '<|im_end|>\\n' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}";

/* llama-server's built-in templates that are not families here, as Jinja that renders what its built-in renders. */
static const struct {
    const char *name, *src;
} builtin_jinja[] = {
    {"command-r", "{%- for message in messages -%}"
                  "{%- if message['role'] == 'system' -%}{{- '<|START_OF_TURN_TOKEN|><|SYSTEM_TOKEN|>' -}}"
                  "{%- elif message['role'] == 'user' -%}{{- '<|START_OF_TURN_TOKEN|><|USER_TOKEN|>' -}}"
                  "{%- else -%}{{- '<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>' -}}{%- endif -%}"
                  "{{- (message['content'] if message['content'] is string else '') | trim -}}"
                  "{{- '<|END_OF_TURN_TOKEN|>' -}}"
                  "{%- endfor -%}"
                  "{%- if add_generation_prompt -%}{{- '<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>' -}}{%- endif -%}"},
};

/* llama-server's other built-in template names: refused by name, not rendered as text. */
static const char *const lcpp_builtin[] = {
    "bailing", "bailing-think", "bailing2", "chatglm3", "chatglm4", "deepseek", "deepseek-ocr",
    "deepseek2", "deepseek3", "exaone-moe", "exaone3", "exaone4", "falcon3", "gemma", "gigachat", "glmedge", "gpt-oss",
    "granite", "granite-4.0", "granite-4.1", "grok-2", "hunyuan-dense", "hunyuan-moe", "hunyuan-vl", "kimi-k2",
    "llama2-sys", "llama2-sys-bos", "llama2-sys-strip", "llama4", "megrez", "minicpm", "mistral-v1", "mistral-v3",
    "mistral-v3-tekken", "mistral-v7", "mistral-v7-tekken", "monarch", "openchat", "orion", "pangu-embedded", "phi4",
    "rwkv-world", "seed_oss", "smolvlm", "solar-open", "vicuna", "vicuna-orca", "yandex"};

/*
 * How messages are rendered: --chat-template-file, or --chat-template (a
 * family name, a Jinja file, or the Jinja template itself, as llama-server
 * takes it), else the model's own template, rendered as transformers
 * renders it; a model without one gets ChatML, as in llama-server; one
 * whose template does not parse gets the family its markers suggest, or
 * plain lines. *what says which, for the log.
 */
static bool pick_template(const srv_opts *o, const tkv_model *m, srv_api *a, const char **what) {
    a->jinja = NULL;
    const char *ct = o->chat_template;
    if (o->chat_template_file) {
        *what = o->chat_template_file;
        return (a->jinja = template_file("--chat-template-file", o->chat_template_file, &a->think, &a->tools)) != NULL;
    }
    if (ct) {
        if (srv_chat_from_name(ct, &a->chat)) {
            *what = srv_chat_name(a->chat);
            return true;
        }
        for (size_t i = 0; i < sizeof builtin_jinja / sizeof builtin_jinja[0]; i++)
            if (!strcmp(ct, builtin_jinja[i].name)) {
                *what = ct;
                return (a->jinja = template_source(builtin_jinja[i].src, strlen(builtin_jinja[i].src), ct, &a->think,
                                                   &a->tools)) != NULL;
            }
        for (size_t i = 0; i < sizeof lcpp_builtin / sizeof lcpp_builtin[0]; i++)
            if (!strcmp(ct, lcpp_builtin[i])) {
                fprintf(stderr, "tokenkv serve: --chat-template %s: llama-server's built-in template '%s' is not "
                                "implemented here (built in: chatml, llama2, llama3, mistral, zephyr, phi3, plain, command-r; or "
                                "give the Jinja template, inline or with --chat-template-file)\n", ct, ct);
                return false;
            }
        *what = ct;
        if (access(ct, R_OK) == 0) return (a->jinja = template_file("--chat-template", ct, &a->think, &a->tools)) != NULL;
        if (!strchr(ct, '{') && (strchr(ct, '/') || strstr(ct, ".jinja"))) { /* a path, not a template */
            fprintf(stderr, "tokenkv serve: --chat-template %s: %s\n", ct, strerror(errno));
            return false;
        }
        *what = "the inline --chat-template";
        return (a->jinja = template_source(ct, strlen(ct), "--chat-template", &a->think, &a->tools)) != NULL;
    }
    const char *tmpl = NULL;
    size_t len = 0;
    if (tkv_model_meta_str(m, "tokenizer.chat_template", &tmpl, &len) != TKV_OK || !len) tmpl = NULL;
    if (tmpl && tkv_chat_template_parse(tmpl, len, &a->jinja) == TKV_OK) {
        *what = "the model's template";
        a->think = srv_think_markers(tmpl, len);
        a->tools = srv_tools_detect(tmpl, len);
        return true;
    }
    if (!tmpl) {
        *what = "chatml (the model has no template)";
        return (a->jinja = template_source(chatml_jinja, sizeof chatml_jinja - 1, "chatml", &a->think, &a->tools)) != NULL;
    }
    fprintf(stderr, "tokenkv serve: warning: the model's chat template does not parse (%s); using the family its "
                    "markers suggest\n", tkv_last_error(NULL));
    bool recognised = true;
    a->chat = srv_chat_detect(tmpl, &recognised);
    *what = srv_chat_name(a->chat);
    if (!recognised)
        fprintf(stderr, "tokenkv serve: warning: the model's chat template is not one we recognise; chat messages "
                        "are rendered as plain 'Role: content' lines (choose one with --chat-template)\n");
    return true;
}

/* --chat-template-kwargs and --reasoning: the template variables every request starts from; NULL with a message
   on stderr for a bad --chat-template-kwargs. *out is NULL where there are none. */
static bool template_kwargs(const srv_opts *o, json_t **out) {
    *out = NULL;
    json_error_t je;
    json_t *kw = o->chat_template_kwargs ? json_loads(o->chat_template_kwargs, 0, &je) : json_object();
    if (!json_is_object(kw)) {
        fprintf(stderr, "tokenkv serve: --chat-template-kwargs: not a JSON object%s%s\n", kw ? "" : ": ",
                kw ? "" : je.text);
        json_decref(kw);
        return false;
    }
    if (o->reasoning != SRV_REASONING_UNSET && !json_object_get(kw, "enable_thinking"))
        json_object_set_new(kw, "enable_thinking", json_boolean(o->reasoning != SRV_REASONING_OFF));
    if (json_object_size(kw)) *out = kw;
    else json_decref(kw);
    return true;
}

/* Take a snapshot for the save thread (a job on the inference thread, between two steps). */
static void tick_save(tkv_context *ctx, void *user) { srv_save_tick(user, ctx); }

/* Save the cache in this thread (after the inference thread stopped, when the save thread could not start). */
static void save_cache(tkv_context *ctx, void *user) {
    const srv_opts *o = user;
    double t0 = srv_now();
    if (tkv_cache_save(ctx, o->cache_dir, o->cache_dir_max) != TKV_OK)
        fprintf(stderr, "tokenkv serve: warning: cache: saving to %s failed: %s\n", o->cache_dir, tkv_last_error(ctx));
    else
        fprintf(stderr, "tokenkv serve: cache: saved to %s in %.1f ms\n", o->cache_dir, 1e3 * (srv_now() - t0));
}

/*
 * Take --cache-dir for this server alone: create it (mode 0700) if missing,
 * then hold an exclusive lock on DIR/lock (it records our pid) for as long
 * as the process runs, so that two servers never delete each other's files.
 * Returns the lock's descriptor, or -1 with a message on stderr. *fresh:
 * the directory did not exist.
 */
static int lock_cache_dir(const char *dir, bool *fresh) {
    struct stat sb;
    *fresh = stat(dir, &sb) != 0 && errno == ENOENT;
    if (mkdir(dir, 0700) != 0 && errno != EEXIST) {
        fprintf(stderr, "tokenkv serve: --cache-dir %s: cannot create: %s\n", dir, strerror(errno));
        return -1;
    }
    char path[4096];
    snprintf(path, sizeof path, "%s/lock", dir);
    int fd = open(path, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0) {
        fprintf(stderr, "tokenkv serve: --cache-dir %s: cannot open %s: %s\n", dir, path, strerror(errno));
        return -1;
    }
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        char pid[32] = "";
        ssize_t n = pread(fd, pid, sizeof pid - 1, 0);
        pid[n > 0 ? n : 0] = '\0';
        pid[strcspn(pid, "\n")] = '\0';
        fprintf(stderr, "tokenkv serve: --cache-dir %s is in use by another server (pid %s): give each server a "
                        "directory of its own\n", dir, pid[0] ? pid : "unknown");
        close(fd);
        return -1;
    }
    char pid[32];
    const int len = snprintf(pid, sizeof pid, "%ld\n", (long)getpid());
    if (ftruncate(fd, 0) != 0 || pwrite(fd, pid, (size_t)len, 0) != len) { /* only informative */ }
    return fd;
}

/* n random bytes; false when the kernel has none to give. */
static bool random_bytes(uint8_t *p, size_t n) {
    while (n) {
        const ssize_t k = getrandom(p, n, 0);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return false;
        p += k, n -= (size_t)k;
    }
    return true;
}

/*
 * The key of namespace ids (api.h srv_api_namespace). Without a cache
 * directory: fresh for this process. With one: DIR/secret, made on first
 * start (mode 0600, never through a link) and kept, so that saved
 * namespaces keep their ids across restarts; a secret file another user
 * owns or may read or write is refused. false with a message on stderr.
 */
static bool load_secret(const char *dir, uint8_t *key) {
    if (!dir) {
        if (random_bytes(key, SRV_NS_SECRET_BYTES)) return true;
        fprintf(stderr, "tokenkv serve: no random bytes for the namespace key: %s\n", strerror(errno));
        return false;
    }
    char path[4096];
    snprintf(path, sizeof path, "%s/secret", dir);
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0 && errno == ENOENT) { /* first start: a new key */
        fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
        const bool ok = fd >= 0 && random_bytes(key, SRV_NS_SECRET_BYTES) &&
                        write(fd, key, SRV_NS_SECRET_BYTES) == SRV_NS_SECRET_BYTES && fsync(fd) == 0;
        if (!ok) fprintf(stderr, "tokenkv serve: cannot write %s: %s\n", path, strerror(errno));
        if (fd >= 0) close(fd);
        if (!ok) unlink(path);
        return ok;
    }
    struct stat sb;
    const bool ok = fd >= 0 && fstat(fd, &sb) == 0 && S_ISREG(sb.st_mode) && sb.st_uid == geteuid() &&
                    !(sb.st_mode & 077) && sb.st_size == SRV_NS_SECRET_BYTES &&
                    read(fd, key, SRV_NS_SECRET_BYTES) == SRV_NS_SECRET_BYTES;
    if (!ok)
        fprintf(stderr, "tokenkv serve: %s must be this user's file of %d bytes that nobody else may read or write "
                        "(mode 0600): %s\n", path, SRV_NS_SECRET_BYTES, fd < 0 ? strerror(errno) : "it is not");
    if (fd >= 0) close(fd);
    return ok;
}

static void load_cache(tkv_context *ctx, const srv_opts *o, bool fresh) {
    tkv_cache_load_info info;
    memset(&info, 0, sizeof info);
    double t0 = srv_now();
    if (fresh) {
        fprintf(stderr, "tokenkv serve: cache: %s does not exist yet: starting empty\n", o->cache_dir);
        return;
    }
    if (tkv_cache_load_ex(ctx, o->cache_dir, &info) != TKV_OK) {
        fprintf(stderr, "tokenkv serve: warning: cache: nothing loaded from %s: %s\n", o->cache_dir, tkv_last_error(ctx));
        return;
    }
    fprintf(stderr, "tokenkv serve: cache: loaded %u files (%llu tokens) from %s in %.1f ms\n", info.files_loaded,
            (unsigned long long)info.tokens_loaded, o->cache_dir, 1e3 * (srv_now() - t0));
    if (info.files_skipped)
        fprintf(stderr, "tokenkv serve: warning: cache: skipped %u files that failed validation; the first: %s\n",
                info.files_skipped, info.first_skip_reason);
}

static bool bind_addr(const srv_opts *o, struct sockaddr_storage *ss) {
    memset(ss, 0, sizeof *ss);
    struct sockaddr_in *v4 = (struct sockaddr_in *)ss;
    struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)ss;
    if (inet_pton(AF_INET, o->host, &v4->sin_addr) == 1) {
        v4->sin_family = AF_INET;
        v4->sin_port = htons((uint16_t)o->port);
        return true;
    }
    if (inet_pton(AF_INET6, o->host, &v6->sin6_addr) == 1) {
        v6->sin6_family = AF_INET6;
        v6->sin6_port = htons((uint16_t)o->port);
        return true;
    }
    fprintf(stderr, "tokenkv serve: --host: '%s' is not an IPv4 or IPv6 address\n", o->host);
    return false;
}

/* The cache's events (inference thread): to whoever follows them. */
static void on_cache_event(const tkv_context *ctx, const tkv_cache_event *ev, void *user) {
    (void)ctx;
    srv_state *S = user;
    if (S->kvev) srv_kvev_cache_event(S->kvev, ev);
    if (S->disk) srv_disk_cache_event(S->disk, ctx, ev);
}

int srv_main(const srv_opts *o) {
    /* SIGINT/SIGTERM are taken by sigwait below: block them before any
       thread starts, so every thread inherits the mask */
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);

    /* a window pool's rows cannot be saved or sent yet (the cache files carry every layer's rows): refused here
       rather than at the first save */
    const char *const moves[] = {o->cache_dir ? "--cache-dir" : NULL, o->kv_store ? "--kv-store" : NULL,
                                 o->cache_disk ? "--cache-disk" : NULL};
    for (size_t i = 0; o->swa_rows && i < sizeof moves / sizeof moves[0]; i++)
        if (moves[i]) {
            fprintf(stderr, "tokenkv serve: --swa-rows cannot be combined with %s: a window pool's rows are not "
                            "saved or shared yet\n", moves[i]);
            return 2;
        }
    if (o->admin_key && !o->api_key) { /* every route would be open: the admin key would guard nothing */
        fprintf(stderr, "tokenkv serve: --admin-key needs --api-key (or --api-key-file): without an API key every "
                        "route is open\n");
        return 2;
    }
    struct sockaddr_storage addr;
    if (!bind_addr(o, &addr)) return 2;
    bool fresh_dir = false;
    const int lock_fd = o->cache_dir ? lock_cache_dir(o->cache_dir, &fresh_dir) : -1;
    if (o->cache_dir && lock_fd < 0) return 1;
    uint8_t ns_secret[SRV_NS_SECRET_BYTES];
    if (!load_secret(o->cache_dir, ns_secret)) return 1;
    tkv_model *model = NULL;
    tkv_model_params mp = tkv_model_default_params();
    mp.repack = !o->no_repack;
    mp.huge_pages = !o->no_huge_pages;
    if (tkv_model_load(o->model_path, &mp, &model) != TKV_OK) {
        fprintf(stderr, "tokenkv serve: %s\n", tkv_last_error(NULL));
        return 1;
    }
    if (tkv_model_packed_size(model)) /* memory a user sees in RSS beside the mapped file */
        fprintf(stderr, "tokenkv serve: %.1f MiB of weights repacked for this CPU's products\n",
                (double)tkv_model_packed_size(model) / (1 << 20));
    if (tkv_model_pack_held(model))
        fprintf(stderr, "tokenkv serve: the IQ layouts, %.1f MiB larger than the file's rows, were left out: they do not"
                        " fit in half the memory available (the file's rows serve those products, slower)\n",
                (double)tkv_model_pack_held(model) / (1 << 20));
    tkv_hparams hp;
    tkv_model_hparams(model, &hp);
    srv_state S = {.o = o, .model = model, .started = (int64_t)time(NULL)};
    char id[128];
    model_id(o->model_path, o->alias, id, sizeof id);
    S.api = (srv_api){.model = model, .model_id = id, .max_tokens = o->max_tokens, .ns_secret = ns_secret,
                      .defaults = o->defaults, .verbose = o->verbose, .reasoning_none = o->reasoning_none,
                      .no_prefill = o->no_prefill_assistant};
    /* a request's positions: the cache and the model's trained context bound them */
    S.api.n_ctx = hp.n_ctx_train && hp.n_ctx_train < o->cells ? hp.n_ctx_train : o->cells;
    /* llama-server's slot: with a context shift, each request's window is its share of the cells, so that every
       slot's window fits beside the others' and a shift never waits for another request */
    if (o->context_shift) {
        const uint32_t share = o->cells / (uint32_t)o->parallel;
        S.api.shift_window = S.api.n_ctx < share ? S.api.n_ctx : share;
    }
    if (o->context_shift && S.api.shift_window < 16) { /* a shift keeps some tokens and needs room after them */
        fprintf(stderr, "tokenkv serve: --context-shift needs at least 16 positions per slot (--ctx-size %u / "
                "--parallel %d gives %u)\n", o->cells, o->parallel, S.api.shift_window);
        tkv_model_free(model);
        return 2;
    }
    const char *chat_what = "";
    tkv_grammar *grammar = o->grammar_file ? grammar_file(o->grammar_file, model) : NULL;
    static json_t *kwargs; /* for the process's life */
    if ((o->grammar_file && !grammar) || !pick_template(o, model, &S.api, &chat_what) || !template_kwargs(o, &kwargs)) {
        tkv_chat_template_free(S.api.jinja);
        tkv_grammar_free(grammar);
        tkv_model_free(model);
        return 2;
    }
    S.api.template_kwargs = kwargs;
    S.api.grammar = grammar;

    tkv_context_params cp = tkv_context_default_params();
    cp.n_cells = o->cells;
    cp.n_seq_max = (uint32_t)o->parallel;
    cp.state_cache_mib = o->state_cache_mib; /* hybrid models' checkpoints (docs/library.md) */
    cp.state_interval = o->state_interval;
    cp.swa_rows = o->swa_rows;
    cp.n_batch = o->n_batch;
    if (o->threads > 0) {
        cp.n_threads = o->threads;
    } else { /* the default, and why: a container's quota or a taskset shows here */
        char why[160];
        cp.n_threads = tkv_default_threads(why, sizeof why);
        fprintf(stderr, "tokenkv serve: %s\n", why);
    }
    /* batched requests must not change each other's outputs, nor may
       reuse change a request's output (tkv_context_params), unless the
       operator asks for the reference's arithmetic */
    cp.batch_invariant = !o->reference_order;
    if (o->reference_order)
        fprintf(stderr, "tokenkv serve: --reference-order: outputs follow llama.cpp's arithmetic and depend on "
                        "batching and prefix reuse\n");
    cp.kv_type = (tkv_type)o->kv_type_k;
    cp.kv_type_v = (tkv_type)o->kv_type_v;
    /* a subscriber is not authenticated: with keys, the prompts' token ids (their text) only when asked for */
    const bool event_tokens = o->kv_events_tokens || !o->api_key;
    if (o->kv_events && !(S.kvev = srv_kvev_start(o->kv_events, o->kv_events_block_size, event_tokens))) {
        tkv_chat_template_free(S.api.jinja);
        tkv_grammar_free(grammar);
        tkv_model_free(model);
        return 1;
    }
    if (o->cache_disk && !(S.disk = srv_disk_start(o->cache_disk, o->cache_disk_max))) {
        srv_kvev_stop(S.kvev);
        tkv_chat_template_free(S.api.jinja);
        tkv_grammar_free(grammar);
        tkv_model_free(model);
        return 1;
    }
    if (S.kvev || S.disk) {
        cp.on_cache_event = on_cache_event;
        cp.cache_event_user = &S;
    }
    tkv_context *ctx = NULL;
    int rc = 1;
    if (tkv_context_create(model, &cp, &ctx) != TKV_OK) {
        srv_kvev_stop(S.kvev);
        srv_disk_stop(S.disk);
        fprintf(stderr, "tokenkv serve: %s\n", tkv_last_error(NULL));
        tkv_chat_template_free(S.api.jinja);
        tkv_grammar_free(grammar);
        tkv_model_free(model);
        return 1;
    }
    /* the tiers read no value larger than any this cache makes: all of its K/V and tokens, with room for the
       headers and checksums */
    tkv_stats cs = {0};
    tkv_cache_stats_ex(ctx, &cs, sizeof cs);
    /* the largest image: the whole cache's K/V and tokens, and a hybrid model's checkpoints (at most the budget's,
       or one per sequence and two more: what the cache keeps whatever the budget) */
    const uint64_t state = tkv_model_state_size(model);
    const uint64_t states = state ? ((uint64_t)o->state_cache_mib << 20) + ((uint64_t)o->parallel + 2) * (state + 4) : 0;
    const uint64_t max_image = 2 * cs.kv_bytes + 16 * cs.cells_total + states + ((uint64_t)16 << 20);
    if (S.disk) srv_disk_limit_files(S.disk, max_image);
    if (o->cache_dir) {
        load_cache(ctx, o, fresh_dir);
        /* after the load: the saver starts from the files it left */
        if (!(S.save = srv_save_start(o->cache_dir, o->cache_dir_max)))
            fprintf(stderr, "tokenkv serve: warning: cache: no saves to %s until shutdown\n", o->cache_dir);
    }
    S.metrics = srv_metrics_new();
    struct MHD_Daemon *d = NULL;
    srv_conns *conns = NULL;
    if (o->kv_store && !o->no_prefix_cache) {
        char err[512];
        srv_store_opts sto = {.url = o->kv_store, .timeout_ms = o->kv_store_timeout_ms,
                              .max_pending = o->kv_store_max_pending ? o->kv_store_max_pending : (size_t)256 << 20,
                              .max_value = (size_t)max_image};
        if (!(S.store = srv_store_start(&sto, model, cp.kv_type, cp.kv_type_v == TKV_TYPE_COUNT ? cp.kv_type : cp.kv_type_v,
                                        err, sizeof err))) {
            fprintf(stderr, "tokenkv serve: %s\n", err);
            rc = 2;
            goto out;
        }
    }
    srv_sched_opts so = {.parallel = o->parallel, .max_queue = o->max_queue, .n_ctx = S.api.n_ctx,
                         .shift_window = S.api.shift_window,
                         .n_batch = o->n_batch, .no_prefix_cache = o->no_prefix_cache, .store = S.store,
                         .draft_always = o->draft_always, .no_known = o->no_draft_known,
                         .disk = S.disk};
    S.sched = S.metrics ? srv_sched_start(ctx, &so, S.metrics) : NULL;
    srv_store_attach(S.store, srv_sched_sink(S.sched));
    if (!S.sched) {
        fprintf(stderr, "tokenkv serve: cannot start the inference thread\n");
        goto out;
    }
    if (!(conns = srv_conns_start(o->request_timeout, LINGER_SOCKETS))) {
        fprintf(stderr, "tokenkv serve: cannot start the connection watchdog\n");
        goto out;
    }
    /* event-driven: poll loops on a few threads, waiting requests suspended
       (conn.h), so an idle or trickling connection costs a socket and a
       little memory, not a thread */
    d = MHD_start_daemon(MHD_USE_POLL_INTERNAL_THREAD | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG |
                             (addr.ss_family == AF_INET6 ? MHD_USE_IPv6 : 0),
                         (uint16_t)o->port, NULL, NULL, srv_http_handler, &S, MHD_OPTION_EXTERNAL_LOGGER, mhd_log, NULL,
                         MHD_OPTION_SOCK_ADDR, &addr, MHD_OPTION_THREAD_POOL_SIZE, (unsigned)HTTP_THREADS,
                         MHD_OPTION_NOTIFY_COMPLETED, srv_http_completed, &S,
                         MHD_OPTION_NOTIFY_CONNECTION, srv_conns_notify, conns, MHD_OPTION_CONNECTION_LIMIT,
                         connection_limit(o->max_connections), MHD_OPTION_PER_IP_CONNECTION_LIMIT,
                         (unsigned)o->max_connections_per_client, MHD_OPTION_CONNECTION_TIMEOUT,
                         (unsigned)o->idle_timeout, MHD_OPTION_END);
    if (!d) {
        fprintf(stderr, "tokenkv serve: cannot listen on %s port %d (in use, or not an address of this machine)\n",
                o->host, o->port);
        goto out;
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
    fprintf(stderr,
            "tokenkv serve: model %s (%s, %u layers, vocabulary %zu), %u cells (K %s, V %s), %d parallel, chat %s, tool "
            "calls %s%s\n",
            id, hp.arch, hp.n_layer, tkv_vocab_size(model), o->cells, tkv_type_name((tkv_type)o->kv_type_k),
            tkv_type_name(o->kv_type_v == TKV_TYPE_COUNT ? (tkv_type)o->kv_type_k : (tkv_type)o->kv_type_v), o->parallel,
            chat_what, srv_tools_format_name(S.api.tools), o->no_prefix_cache ? ", prefix cache OFF" : "");
    if (S.store) fprintf(stderr, "tokenkv serve: shared prefix store %s (blocks of %d tokens)\n", o->kv_store, SRV_STORE_BLOCK);
    fprintf(stderr, "tokenkv serve: listening on http://%s%s%s:%u\n", addr.ss_family == AF_INET6 ? "[" : "", o->host,
            addr.ss_family == AF_INET6 ? "]" : "", di ? di->port : (unsigned)o->port);

    int sig;
    for (;;) {
        struct timespec every = {o->save_interval > 0 ? o->save_interval : 3600, 0};
        sig = sigtimedwait(&sigs, NULL, &every);
        if (sig == SIGINT || sig == SIGTERM) break;
        if (sig < 0 && errno == EAGAIN && S.save && o->save_interval > 0)
            srv_sched_call(S.sched, tick_save, S.save); /* a snapshot between two steps; written elsewhere */
    }
    fprintf(stderr, "tokenkv serve: %s: shutting down\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
    MHD_quiesce_daemon(d); /* no new connections */
    rc = 0;
out:
    srv_sched_stop(S.sched); /* waiting and running requests end with 503 */
    srv_store_free(S.store); /* after the scheduler: no more lookups or writes; its late jobs are refused */
    /* the inference thread is gone: ctx is ours */
    if (S.save) srv_save_stop(S.save, rc == 0 ? ctx : NULL);
    else if (rc == 0 && o->cache_dir) save_cache(ctx, (void *)o);
    S.save = NULL;
    /* every suspended connection was woken by the stop above (MHD requires
       it): they answer and close */
    if (d) MHD_stop_daemon(d);
    srv_conns_stop(conns);
    srv_disk_stop(S.disk); /* its last reads post to the stopped scheduler: before srv_sched_free */
    S.disk = NULL;         /* the saves below evict nothing, but nothing may stage any more */
    srv_sched_free(S.sched);
    srv_metrics_free(S.metrics);
    tkv_context_free(ctx);
    srv_kvev_stop(S.kvev); /* after the last event: the context is gone */
    tkv_chat_template_free(S.api.jinja);
    tkv_grammar_free(grammar);
    tkv_model_free(model);
    if (lock_fd >= 0) close(lock_fd); /* the directory is free for another server */
    return rc;
}
