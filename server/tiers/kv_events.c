/*
 * kv_events.c — the KV-event publisher (kv_events.h).
 *
 * Wire format (vLLM's, msgspec structs encoded as msgpack arrays): each
 * ZeroMQ message has three frames: the topic (empty), the sequence number
 * (8 bytes, big-endian, from 0) and the payload, a KVEventBatch
 *   [ts (float seconds), [event, ...]]
 * whose events are tagged arrays:
 *   ["BlockStored", [hash, ...], parent hash or nil, [token id, ...], block size, lora_id nil, medium "CPU"]
 *     (the token ids are [] for a salted namespace, and for every namespace unless tokens were asked for:
 *     the ids are the prompt's text, and a subscriber is not authenticated; routers need only the hashes)
 *   ["BlockRemoved", [hash, ...], medium "CPU"]
 *   ["AllBlocksCleared"]
 *
 * Records pass from the inference thread to the publisher through two
 * preallocated buffers: the inference thread appends to one while the
 * publisher encodes the other, so neither waits on the other for longer
 * than a swap.
 */
#include "kv_events.h"

#include <msgpack.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <zmq.h>

#include <xxhash.h>

enum { BUF_BYTES = 8 << 20, MAX_BLOCKS_PER_EVENT = 1 << 16 };

/* A record in a buffer: then n_blocks hashes, then (stored) n_blocks * block_size token ids, padded to 8 bytes. */
typedef struct rec {
    uint32_t kind; /* tkv_cache_event_kind */
    uint32_t n_blocks;
    uint32_t has_parent;
    uint32_t with_tokens; /* the token ids follow the hashes */
    uint64_t parent;
} rec;

struct srv_kvev {
    uint32_t bs;          /* tokens per block */
    bool tokens;          /* publish the token ids of the unsalted namespace */
    void *zctx, *pub;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    uint8_t *buf[2];      /* (BUF_BYTES) buf[fill]: the inference thread's; the other: the publisher's */
    size_t used[2];
    int fill;
    bool stop;
    uint64_t dropped;     /* under mu */
    uint64_t seq;         /* publisher only */
    uint64_t *hashes;     /* (MAX_BLOCKS_PER_EVENT) inference thread scratch */
};

uint64_t srv_kvev_ns_seed(uint64_t ns) {
    uint8_t b[8];
    for (int i = 0; i < 8; i++) b[i] = (uint8_t)(ns >> (8 * i));
    return XXH3_64bits(b, sizeof b);
}

uint64_t srv_kvev_block_hash(uint64_t parent, const tkv_token *tokens, uint32_t block_size) {
    /* tkv_token is int32: its bytes are the little-endian ids on the hosts tokenkv runs on (cache files assume it too) */
    return XXH3_64bits_withSeed(tokens, (size_t)block_size * sizeof *tokens, parent);
}

void srv_kvev_cache_event(srv_kvev *k, const tkv_cache_event *ev) {
    const uint32_t bs = k->bs;
    uint32_t first = 0, last = 0; /* blocks [first, last) change */
    if (ev->kind != TKV_CACHE_EVENT_CLEARED) {
        /* the prefix 0..from-1 was (STORED) or stays (REMOVED) cached: a block changes when it ends in
           from..end-1's reach, i.e. blocks from/bs .. end/bs - 1 */
        first = ev->from / bs, last = ev->end / bs;
        if (first >= last) return; /* no full block completed or cut */
        if (last - first > MAX_BLOCKS_PER_EVENT) first = last - MAX_BLOCKS_PER_EVENT; /* never on a real cache */
    }
    const uint32_t n = last - first;
    uint64_t h = srv_kvev_ns_seed(ev->ns), parent = h;
    for (uint32_t b = 0; b < last; b++) {
        if (b == first) parent = h;
        h = srv_kvev_block_hash(h, ev->tokens + (size_t)b * bs, bs);
        if (b >= first) k->hashes[b - first] = h;
    }
    /* a salted namespace's ids never leave: its text is its tenant's */
    const bool with_tokens = ev->kind == TKV_CACHE_EVENT_STORED && k->tokens && ev->ns == 0;
    const size_t tok_bytes = with_tokens ? (size_t)n * bs * sizeof(tkv_token) : 0;
    const size_t need = sizeof(rec) + (size_t)n * 8 + ((tok_bytes + 7) & ~(size_t)7);
    pthread_mutex_lock(&k->mu);
    uint8_t *p = k->buf[k->fill] + k->used[k->fill];
    if (k->used[k->fill] + need > BUF_BYTES) {
        k->dropped++;
    } else {
        const rec r = {(uint32_t)ev->kind, n, first > 0, with_tokens, parent};
        memcpy(p, &r, sizeof r);
        memcpy(p + sizeof r, k->hashes, (size_t)n * 8);
        if (tok_bytes) memcpy(p + sizeof r + (size_t)n * 8, ev->tokens + (size_t)first * bs, tok_bytes);
        k->used[k->fill] += need;
        pthread_cond_signal(&k->cv);
    }
    pthread_mutex_unlock(&k->mu);
}

uint64_t srv_kvev_dropped(const srv_kvev *k) {
    pthread_mutex_lock((pthread_mutex_t *)&k->mu);
    uint64_t d = k->dropped;
    pthread_mutex_unlock((pthread_mutex_t *)&k->mu);
    return d;
}

static void pack_str(msgpack_packer *pk, const char *s) {
    const size_t n = strlen(s);
    msgpack_pack_str(pk, n);
    msgpack_pack_str_body(pk, s, n);
}

/* One batch of every record in buf[0..used), sent as one message. */
static void publish(srv_kvev *k, const uint8_t *buf, size_t used, msgpack_sbuffer *sb) {
    size_t n_events = 0;
    for (size_t off = 0; off < used; n_events++) {
        const rec *r = (const rec *)(buf + off);
        const size_t tok_bytes = r->with_tokens ? (size_t)r->n_blocks * k->bs * sizeof(tkv_token) : 0;
        off += sizeof(rec) + (size_t)r->n_blocks * 8 + ((tok_bytes + 7) & ~(size_t)7);
    }
    msgpack_sbuffer_clear(sb);
    msgpack_packer pk;
    msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    msgpack_pack_array(&pk, 2);
    msgpack_pack_double(&pk, (double)ts.tv_sec + ts.tv_nsec * 1e-9);
    msgpack_pack_array(&pk, n_events);
    for (size_t off = 0; off < used;) {
        rec r;
        memcpy(&r, buf + off, sizeof r);
        const uint8_t *hp = buf + off + sizeof r, *tp = hp + (size_t)r.n_blocks * 8;
        const size_t tok_bytes = r.with_tokens ? (size_t)r.n_blocks * k->bs * sizeof(tkv_token) : 0;
        off += sizeof r + (size_t)r.n_blocks * 8 + ((tok_bytes + 7) & ~(size_t)7);
        if (r.kind == TKV_CACHE_EVENT_CLEARED) {
            msgpack_pack_array(&pk, 1);
            pack_str(&pk, "AllBlocksCleared");
            continue;
        }
        const bool stored = r.kind == TKV_CACHE_EVENT_STORED;
        msgpack_pack_array(&pk, stored ? 7 : 3);
        pack_str(&pk, stored ? "BlockStored" : "BlockRemoved");
        msgpack_pack_array(&pk, r.n_blocks);
        for (uint32_t i = 0; i < r.n_blocks; i++) {
            uint64_t h;
            memcpy(&h, hp + (size_t)i * 8, 8);
            msgpack_pack_uint64(&pk, h);
        }
        if (stored) {
            if (r.has_parent) msgpack_pack_uint64(&pk, r.parent);
            else msgpack_pack_nil(&pk);
            const size_t n_tok = tok_bytes / sizeof(tkv_token);
            msgpack_pack_array(&pk, n_tok);
            for (size_t i = 0; i < n_tok; i++) {
                tkv_token t;
                memcpy(&t, tp + i * sizeof t, sizeof t);
                msgpack_pack_int32(&pk, t);
            }
            msgpack_pack_uint32(&pk, k->bs);
            msgpack_pack_nil(&pk); /* lora_id: no adapters */
        }
        pack_str(&pk, "CPU"); /* medium: the cache lives in host memory */
    }
    uint8_t seq[8];
    for (int i = 0; i < 8; i++) seq[i] = (uint8_t)(k->seq >> (56 - 8 * i));
    k->seq++;
    /* PUB never blocks: past its high-water mark a slow subscriber loses messages and sees the gap */
    zmq_send(k->pub, "", 0, ZMQ_SNDMORE);
    zmq_send(k->pub, seq, sizeof seq, ZMQ_SNDMORE);
    zmq_send(k->pub, sb->data, sb->size, 0);
}

static void *run(void *arg) {
    srv_kvev *k = arg;
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    pthread_mutex_lock(&k->mu);
    for (;;) {
        while (!k->stop && k->used[k->fill] == 0) pthread_cond_wait(&k->cv, &k->mu);
        if (k->used[k->fill] == 0) break; /* stopping, everything sent */
        const int mine = k->fill;
        k->fill = 1 - mine;
        pthread_mutex_unlock(&k->mu);
        publish(k, k->buf[mine], k->used[mine], &sb);
        pthread_mutex_lock(&k->mu);
        k->used[mine] = 0;
    }
    pthread_mutex_unlock(&k->mu);
    msgpack_sbuffer_destroy(&sb);
    return NULL;
}

srv_kvev *srv_kvev_start(const char *endpoint, uint32_t block_size, bool tokens) {
    srv_kvev *k = calloc(1, sizeof *k);
    if (!k) return NULL;
    k->bs = block_size;
    k->tokens = tokens;
    k->buf[0] = malloc(BUF_BYTES);
    k->buf[1] = malloc(BUF_BYTES);
    k->hashes = malloc(MAX_BLOCKS_PER_EVENT * sizeof *k->hashes);
    k->zctx = zmq_ctx_new();
    k->pub = k->zctx ? zmq_socket(k->zctx, ZMQ_PUB) : NULL;
    if (!k->buf[0] || !k->buf[1] || !k->hashes || !k->pub) {
        fprintf(stderr, "tokenkv serve: --kv-events: cannot set up: %s\n", k->pub ? "out of memory" : zmq_strerror(zmq_errno()));
        goto fail;
    }
    const int linger = 1000; /* at shutdown, up to 1 s to deliver what is queued */
    zmq_setsockopt(k->pub, ZMQ_LINGER, &linger, sizeof linger);
    if (zmq_bind(k->pub, endpoint) != 0) {
        fprintf(stderr, "tokenkv serve: --kv-events %s: cannot bind: %s\n", endpoint, zmq_strerror(zmq_errno()));
        goto fail;
    }
    pthread_mutex_init(&k->mu, NULL);
    pthread_cond_init(&k->cv, NULL);
    if (pthread_create(&k->thread, NULL, run, k) != 0) {
        fprintf(stderr, "tokenkv serve: --kv-events: cannot start the publisher thread\n");
        pthread_mutex_destroy(&k->mu);
        pthread_cond_destroy(&k->cv);
        goto fail;
    }
    return k;
fail:
    if (k->pub) zmq_close(k->pub);
    if (k->zctx) zmq_ctx_term(k->zctx);
    free(k->buf[0]);
    free(k->buf[1]);
    free(k->hashes);
    free(k);
    return NULL;
}

void srv_kvev_stop(srv_kvev *k) {
    if (!k) return;
    pthread_mutex_lock(&k->mu);
    k->stop = true;
    pthread_cond_signal(&k->cv);
    pthread_mutex_unlock(&k->mu);
    pthread_join(k->thread, NULL);
    zmq_close(k->pub);
    zmq_ctx_term(k->zctx);
    pthread_mutex_destroy(&k->mu);
    pthread_cond_destroy(&k->cv);
    free(k->buf[0]);
    free(k->buf[1]);
    free(k->hashes);
    free(k);
}
