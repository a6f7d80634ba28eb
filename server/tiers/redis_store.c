/*
 * redis_store.c — the shared prefix store on Redis (redis_store.h).
 *
 * One thread talks to Redis through hiredis's protocol code on a
 * non-blocking socket that it polls itself, so each lookup and each write
 * has one deadline (--kv-store-timeout-ms from its start, connect
 * included) however slowly a reply trickles in; a reply is refused before
 * it is allocated when it announces an array (no command sent here answers
 * with one larger than REPLY_MAX_ELEMENTS) or buffers more bytes than the
 * largest value (max_value); and a circuit breaker: after BREAKER_AFTER
 * failures in a row (connect, I/O, a deadline passed, a reply refused) the store is left alone for
 * BREAKER_RETRY_MS milliseconds, lookups answer "nothing" at once and writes are
 * dropped. Lookups go before writes: a request waits on a lookup, nobody
 * waits on a write.
 *
 * A lookup asks EXISTS of every block after the cached ones in one
 * pipeline, then GETs the run that exists, and posts a job to the
 * scheduler that imports the values in order on the inference thread
 * (tkv_cache_import refuses a value that is corrupt, of another model or
 * KV type, or that holds other tokens than its key promised: such a value
 * is a miss, counted as rejected).
 */
#include "redis_store.h"
#include "metrics.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>

#include <hiredis.h>
#include <xxhash.h>

#define BREAKER_AFTER 3
#define BREAKER_RETRY_MS 5000
#define KEY_LEN 160
#define REPLY_MAX_ELEMENTS 16 /* EXISTS, GET, SET and SELECT answer with no array at all */

/* A lookup, from the inference thread to the store thread and back as a job. */
typedef struct fetch {
    srv_job job;
    srv_store *st;
    srv_req *r;            /* a reference */
    uint64_t ns;
    tkv_token *toks;       /* (n) the prompt */
    size_t n;
    uint32_t first, last;  /* blocks [first, last) were asked for */
    redisReply **vals;     /* (last - first) the values found, in order; n_vals of them */
    uint32_t n_vals;
    struct fetch *next;
} fetch;

/* A value to write. */
typedef struct put {
    char key[KEY_LEN];
    uint8_t *val;
    size_t size;
    struct put *next;
} put;

/* Counters (atomic: the store thread, the inference thread and /metrics). */
typedef struct counters {
    atomic_ullong lookups, hits, misses, hit_tokens, rejected, errors, timeouts, read_bytes, writes, written_bytes,
        dropped, breaker_trips, refused_replies;
} counters;

struct srv_store {
    char host[256];
    int port, db, timeout_ms;
    size_t max_pending;
    size_t max_value;    /* bytes a reply may buffer: the largest value, with room for its framing */
    char prefix[96];     /* "tkv:<fingerprint>:<K type>-<V type>:b<block>:" */
    uint64_t seed[2];    /* the chain's start: fingerprint, KV type, block size */
    srv_job_sink sink;   /* where found prefixes go: the scheduler */

    pthread_t thread;
    pthread_mutex_t mu;  /* the queues, stopping, pending */
    pthread_cond_t wake;
    fetch *fetches, **fetch_tail;
    put *puts, **put_tail;
    size_t pending;      /* bytes of queued puts */
    bool stopping;

    redisContext *rc;    /* the store thread's */
    enum { OP_LOOKUP, OP_WRITE } op; /* what the store thread does now */
    int fails[2];        /* in a row, of lookups and of writes apart: writes that succeed do not hide
                            lookups that time out */
    atomic_bool open;    /* the breaker: the store is left alone ... */
    atomic_llong retry_ms; /* ... until then (monotonic ms), when one operation may try it again */
    counters c;
};

static long long now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Whether the breaker keeps everyone off the store now. */
static bool shut(const srv_store *st) {
    return atomic_load(&st->open) && now_ms() < atomic_load(&((srv_store *)st)->retry_ms);
}

/* ---- keys ----------------------------------------------------------------- */

/* The keys of blocks 0..nb-1 of t in ns, into keys[0..nb). Each key hashes the previous one with its block's
   tokens, so it stands for the whole prefix up to its block's end. */
static void block_keys(const srv_store *st, uint64_t ns, const tkv_token *t, size_t nb, char (*keys)[KEY_LEN]) {
    uint8_t buf[16 + 8 + SRV_STORE_BLOCK * sizeof(tkv_token)];
    XXH128_hash_t h = {st->seed[0], st->seed[1] ^ ns};
    for (size_t b = 0; b < nb; b++) {
        memcpy(buf, &h, 16);
        memcpy(buf + 16, &ns, 8);
        memcpy(buf + 24, t + b * SRV_STORE_BLOCK, SRV_STORE_BLOCK * sizeof(tkv_token));
        h = XXH3_128bits(buf, sizeof buf);
        snprintf(keys[b], KEY_LEN, "%s%016llx:%016llx%016llx", st->prefix, (unsigned long long)ns,
                 (unsigned long long)h.high64, (unsigned long long)h.low64);
    }
}

/* ---- the connection (store thread) ---------------------------------------- */

/* How an exchange with Redis ended. */
typedef enum io_end { IO_OK, IO_ERROR, IO_TIMEOUT, IO_REFUSED } io_end;

/* A failure of the connection: drop it, count, and open the breaker after enough in a row (or at once
   when a half-open try fails). */
static void failed(srv_store *st, io_end why) {
    atomic_fetch_add(why == IO_TIMEOUT ? &st->c.timeouts : why == IO_REFUSED ? &st->c.refused_replies : &st->c.errors,
                     1);
    if (st->rc) redisFree(st->rc);
    st->rc = NULL;
    if (++st->fails[st->op] >= BREAKER_AFTER) {
        if (!atomic_load(&st->open)) atomic_fetch_add(&st->c.breaker_trips, 1);
        atomic_store(&st->retry_ms, now_ms() + BREAKER_RETRY_MS);
        atomic_store(&st->open, true);
    }
}

/* hiredis's reply objects, but an array announced longer than REPLY_MAX_ELEMENTS is refused before its
   element table is allocated (the reader then fails the reply). The store thread's only. */
static redisReplyObjectFunctions capped_fns;
static void *(*base_create_array)(const redisReadTask *, int);
static _Thread_local bool array_refused;

static void *capped_array(const redisReadTask *task, int elements) {
    if (elements > REPLY_MAX_ELEMENTS) {
        array_refused = true;
        return NULL;
    }
    return base_create_array(task, elements);
}

/* Send what is queued on rc and read its next reply by the deadline (monotonic ms): the reader buffers no
   more than max_value bytes and allocates no array past the cap, and a reply trickling in byte by byte
   ends at the deadline like a silent one. */
static io_end reply_by(srv_store *st, long long deadline, redisReply **out) {
    redisContext *rc = st->rc;
    *out = NULL;
    array_refused = false;
    for (;;) {
        void *rep = NULL;
        if (redisGetReplyFromReader(rc, &rep) != REDIS_OK) return array_refused ? IO_REFUSED : IO_ERROR;
        if (rep) {
            *out = rep;
            return IO_OK;
        }
        if (rc->reader->len - rc->reader->pos > st->max_value) return IO_REFUSED;
        int sent = 0;
        if (redisBufferWrite(rc, &sent) != REDIS_OK) return IO_ERROR;
        const long long left = deadline - now_ms();
        if (left <= 0) return IO_TIMEOUT;
        struct pollfd p = {.fd = rc->fd, .events = (short)(POLLIN | (sent ? 0 : POLLOUT))};
        const int k = poll(&p, 1, (int)(left < 60000 ? left : 60000));
        if (k < 0 && errno != EINTR) return IO_ERROR;
        if (k > 0 && (p.revents & (POLLIN | POLLHUP | POLLERR)) && redisBufferRead(rc) != REDIS_OK) return IO_ERROR;
    }
}

/* The connection, (re)made when needed, by the deadline; NULL while the breaker is open or Redis cannot be
   reached. Connected, its socket is non-blocking: reply_by polls it. */
static redisContext *conn(srv_store *st, long long deadline) {
    if (shut(st)) return NULL;
    if (st->rc) return st->rc;
    const long long left = deadline - now_ms();
    const struct timeval tv = {left / 1000, (left % 1000) * 1000};
    st->rc = left > 0 ? redisConnectWithTimeout(st->host, st->port, tv) : NULL;
    if (!st->rc) { /* out of memory, or no time left */
        atomic_fetch_add(left > 0 ? &st->c.errors : &st->c.timeouts, 1);
        return NULL;
    }
    const int fl = st->rc->err ? -1 : fcntl(st->rc->fd, F_GETFL);
    if (fl < 0 || fcntl(st->rc->fd, F_SETFL, fl | O_NONBLOCK) != 0) {
        failed(st, st->rc->err == REDIS_ERR_IO && errno == ETIMEDOUT ? IO_TIMEOUT : IO_ERROR);
        return NULL;
    }
    st->rc->flags &= ~REDIS_BLOCK; /* hiredis then takes EAGAIN for "later", not for an error */
    if (!base_create_array) {
        capped_fns = *st->rc->reader->fn;
        base_create_array = capped_fns.createArray;
        capped_fns.createArray = capped_array;
    }
    st->rc->reader->fn = &capped_fns;
    if (st->db) {
        redisReply *rep = NULL;
        redisAppendCommand(st->rc, "SELECT %d", st->db);
        const io_end e = reply_by(st, deadline, &rep);
        const bool ok = e == IO_OK && rep->type == REDIS_REPLY_STATUS;
        if (rep) freeReplyObject(rep);
        if (!ok) {
            failed(st, e == IO_OK ? IO_ERROR : e);
            return NULL;
        }
    }
    return st->rc;
}

static void succeeded(srv_store *st) {
    st->fails[st->op] = 0;
    atomic_store(&st->open, false);
}

/* ---- lookups -------------------------------------------------------------- */

/* EXISTS of blocks [first, last), then GET of the run that exists: f->vals. */
static void do_fetch(srv_store *st, fetch *f) {
    const long long deadline = now_ms() + st->timeout_ms;
    st->op = OP_LOOKUP;
    const uint32_t m = f->last - f->first;
    char(*keys)[KEY_LEN] = malloc((size_t)f->last * KEY_LEN);
    if (!keys || !(f->vals = calloc(m, sizeof *f->vals))) goto out;
    block_keys(st, f->ns, f->toks, f->last, keys);
    redisContext *rc = conn(st, deadline);
    if (!rc) goto out;
    for (uint32_t i = 0; i < m; i++) redisAppendCommand(rc, "EXISTS %s", keys[f->first + i]);
    uint32_t run = 0;
    bool gap = false;
    for (uint32_t i = 0; i < m; i++) {
        redisReply *rep = NULL;
        const io_end e = reply_by(st, deadline, &rep);
        if (e != IO_OK) {
            failed(st, e);
            goto out;
        }
        if (!gap && rep->type == REDIS_REPLY_INTEGER && rep->integer == 1) run++;
        else gap = true;
        freeReplyObject(rep);
    }
    for (uint32_t i = 0; i < run; i++) redisAppendCommand(rc, "GET %s", keys[f->first + i]);
    for (uint32_t i = 0; i < run; i++) {
        redisReply *rep = NULL;
        const io_end e = reply_by(st, deadline, &rep);
        if (e != IO_OK) {
            failed(st, e);
            goto out;
        }
        /* evicted between EXISTS and GET: the run ends here (the replies still have to be read) */
        if (rep->type != REDIS_REPLY_STRING || f->n_vals != i) {
            freeReplyObject(rep);
            continue;
        }
        atomic_fetch_add(&st->c.read_bytes, rep->len);
        f->vals[f->n_vals++] = rep;
    }
    succeeded(st);
out:
    free(keys);
}

/* Inference thread: import what was found, in order, and let the request go on. */
static void import_found(tkv_context *ctx, void *user) {
    fetch *f = user;
    srv_store *st = f->st;
    uint32_t loaded = 0;
    for (uint32_t i = 0; i < f->n_vals; i++) {
        const size_t b = f->first + i, end = (b + 1) * SRV_STORE_BLOCK;
        size_t cached = 0;
        tkv_cache_match(ctx, f->ns, f->toks, end, &cached);
        if (cached >= end) { /* computed here meanwhile */
            loaded++;
            continue;
        }
        if (cached < b * SRV_STORE_BLOCK) break; /* its prefix was evicted meanwhile */
        tkv_status s = tkv_cache_import(ctx, f->ns, f->toks, end, b * SRV_STORE_BLOCK, f->vals[i]->str, f->vals[i]->len);
        if (s == TKV_ERR_FORMAT || s == TKV_ERR_INVALID || s == TKV_ERR_UNSUPPORTED) {
            atomic_fetch_add(&st->c.rejected, 1); /* a corrupt or foreign value: a miss, never used */
            break;
        }
        if (s) break; /* no room: what was loaded is used */
        loaded++;
    }
    if (loaded) {
        atomic_fetch_add(&st->c.hits, 1);
        atomic_fetch_add(&st->c.hit_tokens, (unsigned long long)loaded * SRV_STORE_BLOCK);
    } else {
        atomic_fetch_add(&st->c.misses, 1);
    }
    f->r->store_state = SRV_STORE_DONE;
}

static void fetch_free(srv_job *job, bool ran) {
    (void)ran; /* not run: the scheduler stopped, and failed the request itself */
    fetch *f = (fetch *)job;
    for (uint32_t i = 0; i < f->n_vals; i++) freeReplyObject(f->vals[i]);
    free(f->vals);
    free(f->toks);
    srv_req_unref(f->r);
    free(f);
}

bool srv_store_lookup(srv_store *st, srv_req *r, uint64_t ns, const tkv_token *t, size_t n, size_t cached) {
    if (!st || shut(st)) return false;
    /* the blocks a lookup may bring: full ones, not the last token (the request decodes it for its logits) */
    const size_t first = cached / SRV_STORE_BLOCK, last = n ? (n - 1) / SRV_STORE_BLOCK : 0;
    if (last <= first) return false;
    fetch *f = calloc(1, sizeof *f);
    if (f) f->toks = malloc(last * SRV_STORE_BLOCK * sizeof *t);
    if (!f || !f->toks) {
        free(f);
        return false;
    }
    memcpy(f->toks, t, last * SRV_STORE_BLOCK * sizeof *t);
    f->n = last * SRV_STORE_BLOCK;
    f->st = st;
    f->r = r;
    f->ns = ns;
    f->first = (uint32_t)first;
    f->last = (uint32_t)last;
    f->job = (srv_job){.fn = import_found, .done = fetch_free, .user = f};
    srv_req_ref(r);
    atomic_fetch_add(&st->c.lookups, 1);
    pthread_mutex_lock(&st->mu);
    *st->fetch_tail = f;
    st->fetch_tail = &f->next;
    pthread_cond_signal(&st->wake);
    pthread_mutex_unlock(&st->mu);
    return true;
}

/* ---- writes --------------------------------------------------------------- */

static void do_put(srv_store *st, put *p) {
    const long long deadline = now_ms() + st->timeout_ms;
    st->op = OP_WRITE;
    redisContext *rc = conn(st, deadline);
    if (!rc) {
        atomic_fetch_add(&st->c.dropped, 1);
        return;
    }
    redisReply *rep = NULL;
    const io_end e = redisAppendCommand(rc, "SET %s %b", p->key, p->val, p->size) == REDIS_OK
                         ? reply_by(st, deadline, &rep) : IO_ERROR;
    if (e != IO_OK) {
        atomic_fetch_add(&st->c.dropped, 1);
        failed(st, e);
        return;
    }
    if (rep->type == REDIS_REPLY_STATUS) {
        atomic_fetch_add(&st->c.writes, 1);
        atomic_fetch_add(&st->c.written_bytes, p->size);
    } else { /* refused (out of memory without an eviction policy, read-only replica): not the connection's fault */
        atomic_fetch_add(&st->c.dropped, 1);
    }
    freeReplyObject(rep);
    succeeded(st);
}

void srv_store_put(srv_store *st, tkv_context *ctx, uint64_t ns, const tkv_token *t, size_t n, size_t from) {
    if (!st || shut(st)) return;
    const size_t first = from / SRV_STORE_BLOCK, nb = n / SRV_STORE_BLOCK;
    if (nb <= first) return;
    char(*keys)[KEY_LEN] = malloc(nb * KEY_LEN);
    if (!keys) return;
    block_keys(st, ns, t, nb, keys);
    for (size_t b = first; b < nb; b++) {
        size_t size = 0;
        if (tkv_cache_export(ctx, ns, t, (b + 1) * SRV_STORE_BLOCK, b * SRV_STORE_BLOCK, NULL, 0, &size) !=
            TKV_ERR_FULL)
            break; /* not cached (evicted already) */
        pthread_mutex_lock(&st->mu);
        const bool room = st->pending + size <= st->max_pending;
        if (room) st->pending += size; /* reserved before the copy */
        pthread_mutex_unlock(&st->mu);
        put *p = room ? calloc(1, sizeof *p) : NULL;
        if (p) p->val = malloc(size);
        if (!p || !p->val ||
            tkv_cache_export(ctx, ns, t, (b + 1) * SRV_STORE_BLOCK, b * SRV_STORE_BLOCK, p->val, size, &p->size)) {
            if (p) free(p->val);
            free(p);
            atomic_fetch_add(&st->c.dropped, 1);
            if (room) {
                pthread_mutex_lock(&st->mu);
                st->pending -= size;
                pthread_mutex_unlock(&st->mu);
            }
            continue;
        }
        memcpy(p->key, keys[b], KEY_LEN);
        pthread_mutex_lock(&st->mu);
        *st->put_tail = p;
        st->put_tail = &p->next;
        pthread_cond_signal(&st->wake);
        pthread_mutex_unlock(&st->mu);
    }
    free(keys);
}

/* ---- the thread ------------------------------------------------------------ */

static void *store_main(void *arg) {
    srv_store *st = arg;
    pthread_mutex_lock(&st->mu);
    for (;;) {
        while (!st->stopping && !st->fetches && !st->puts) pthread_cond_wait(&st->wake, &st->mu);
        if (st->fetches) {
            fetch *f = st->fetches;
            if (!(st->fetches = f->next)) st->fetch_tail = &st->fetches;
            pthread_mutex_unlock(&st->mu);
            if (!st->stopping) do_fetch(st, f);
            st->sink.post(st->sink.to, &f->job); /* import what was found (or nothing), then the request goes on */
            pthread_mutex_lock(&st->mu);
        } else if (st->puts) {
            put *p = st->puts;
            if (!(st->puts = p->next)) st->put_tail = &st->puts;
            pthread_mutex_unlock(&st->mu);
            if (!st->stopping) do_put(st, p);
            pthread_mutex_lock(&st->mu);
            st->pending -= p->size;
            free(p->val);
            free(p);
        } else {
            break; /* stopping, and both queues are empty */
        }
    }
    pthread_mutex_unlock(&st->mu);
    if (st->rc) redisFree(st->rc);
    st->rc = NULL;
    return NULL;
}

/* redis://HOST:PORT[/DB] (HOST may be [v6]); false with a message. */
static bool parse_url(srv_store *st, const char *url, char *err, size_t cap) {
    const char *p = url;
    if (strncmp(p, "redis://", 8) != 0) {
        snprintf(err, cap, "--kv-store %s: expected redis://HOST:PORT[/DB]", url);
        return false;
    }
    p += 8;
    const char *host = p, *host_end;
    if (*p == '[') {
        host = ++p;
        if (!(host_end = strchr(p, ']'))) goto bad;
        p = host_end + 1;
    } else {
        host_end = p + strcspn(p, ":/");
        p = host_end;
    }
    if (host_end == host || (size_t)(host_end - host) >= sizeof st->host) goto bad;
    memcpy(st->host, host, (size_t)(host_end - host));
    st->host[host_end - host] = '\0';
    st->port = 6379;
    if (*p == ':') {
        char *end;
        long v = strtol(p + 1, &end, 10);
        if (end == p + 1 || v < 1 || v > 65535) goto bad;
        st->port = (int)v, p = end;
    }
    if (*p == '/') {
        char *end;
        long v = strtol(p + 1, &end, 10);
        if (end == p + 1 || v < 0 || v > 1 << 20 || *end) goto bad;
        st->db = (int)v, p = end;
    }
    if (*p) goto bad;
    return true;
bad:
    snprintf(err, cap, "--kv-store %s: expected redis://HOST:PORT[/DB]", url);
    return false;
}

srv_store *srv_store_start(const srv_store_opts *o, const tkv_model *model, tkv_type type_k, tkv_type type_v, char *err,
                           size_t cap) {
    srv_store *st = calloc(1, sizeof *st);
    if (!st) {
        snprintf(err, cap, "out of memory");
        return NULL;
    }
    if (!parse_url(st, o->url, err, cap)) {
        free(st);
        return NULL;
    }
    st->timeout_ms = o->timeout_ms > 0 ? o->timeout_ms : 50;
    st->max_pending = o->max_pending;
    st->max_value = (o->max_value ? o->max_value : (size_t)256 << 20) + 64; /* and the bulk string's header */
    uint64_t fp[2] = {0, 0};
    tkv_model_fingerprint(model, fp);
    const char *tk = tkv_type_name(type_k), *tv = tkv_type_name(type_v);
    snprintf(st->prefix, sizeof st->prefix, "tkv:%016llx%016llx:%s-%s:b%d:", (unsigned long long)fp[1],
             (unsigned long long)fp[0], tk ? tk : "?", tv ? tv : "?", SRV_STORE_BLOCK);
    st->seed[0] = fp[0] ^ XXH3_64bits(st->prefix, strlen(st->prefix));
    st->seed[1] = fp[1];
    st->fetch_tail = &st->fetches;
    st->put_tail = &st->puts;
    pthread_mutex_init(&st->mu, NULL);
    pthread_cond_init(&st->wake, NULL);
    if (pthread_create(&st->thread, NULL, store_main, st) != 0) {
        snprintf(err, cap, "cannot start the store thread");
        pthread_mutex_destroy(&st->mu);
        pthread_cond_destroy(&st->wake);
        free(st);
        return NULL;
    }
    return st;
}

void srv_store_attach(srv_store *st, srv_job_sink sink) {
    if (st) st->sink = sink;
}

void srv_store_free(srv_store *st) {
    if (!st) return;
    pthread_mutex_lock(&st->mu);
    st->stopping = true;
    pthread_cond_signal(&st->wake);
    pthread_mutex_unlock(&st->mu);
    pthread_join(st->thread, NULL);
    pthread_mutex_destroy(&st->mu);
    pthread_cond_destroy(&st->wake);
    free(st);
}

/* ---- metrics ---------------------------------------------------------------- */

char *srv_store_render(srv_store *st) {
    srv_prom b = {0};
    const counters *c = &st->c;
    srv_prom_count(&b, "tokenkv_store_lookups_total", "counter", "Requests that asked the shared store for blocks.",
             atomic_load(&c->lookups));
    srv_prom_count(&b, "tokenkv_store_hits_total", "counter", "Lookups that loaded at least one block.", atomic_load(&c->hits));
    srv_prom_count(&b, "tokenkv_store_misses_total", "counter", "Lookups that loaded nothing.", atomic_load(&c->misses));
    srv_prom_count(&b, "tokenkv_store_hit_tokens_total", "counter", "Prompt tokens whose K/V came from the store.",
             atomic_load(&c->hit_tokens));
    srv_prom_count(&b, "tokenkv_store_rejected_total", "counter",
             "Values refused by the checks (corrupt, another model or KV type, other tokens).",
             atomic_load(&c->rejected));
    srv_prom_count(&b, "tokenkv_store_errors_total", "counter", "Failed connections and commands (timeouts apart).",
             atomic_load(&c->errors));
    srv_prom_count(&b, "tokenkv_store_timeouts_total", "counter", "Lookups and writes that passed their deadline.",
             atomic_load(&c->timeouts));
    srv_prom_count(&b, "tokenkv_store_read_bytes_total", "counter", "Bytes of values fetched.", atomic_load(&c->read_bytes));
    srv_prom_count(&b, "tokenkv_store_writes_total", "counter", "Blocks written.", atomic_load(&c->writes));
    srv_prom_count(&b, "tokenkv_store_written_bytes_total", "counter", "Bytes of values written.",
             atomic_load(&c->written_bytes));
    srv_prom_count(&b, "tokenkv_store_writes_dropped_total", "counter",
             "Blocks not written (store unreachable, queue full, refused).", atomic_load(&c->dropped));
    srv_prom_count(&b, "tokenkv_store_replies_refused_total", "counter",
             "Replies refused before allocation: an array where none is expected, or more bytes than any value.",
             atomic_load(&c->refused_replies));
    srv_prom_count(&b, "tokenkv_store_breaker_trips_total", "counter", "Times the circuit breaker opened.",
             atomic_load(&c->breaker_trips));
    srv_prom_count(&b, "tokenkv_store_breaker_open", "gauge", "1 while the store is left alone after failures.",
             atomic_load(&st->open) ? 1 : 0);
    return srv_prom_done(&b);
}
