/*
 * response_store.c — a ring of the last conversations of /v1/responses
 * (response_store.h), under one lock; any thread may put or get.
 */
#include "response_store.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

typedef struct entry {
    char *id, *conv;
    uint64_t ns;
    size_t bytes;
} entry;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static entry ring[SRV_RESP_STORE_MAX]; /* oldest at head */
static size_t head, count, bytes;

static void drop_oldest(void) {
    entry *e = &ring[head];
    bytes -= e->bytes;
    free(e->id), free(e->conv);
    *e = (entry){0};
    head = (head + 1) % SRV_RESP_STORE_MAX, count--;
}

void srv_resp_store_put(const char *id, uint64_t ns, const char *conv) {
    const size_t n = strlen(conv) + strlen(id);
    if (n > SRV_RESP_STORE_BYTES) return; /* larger than the whole store: not kept */
    char *i = strdup(id), *c = strdup(conv);
    if (!i || !c) {
        free(i), free(c);
        return;
    }
    pthread_mutex_lock(&mu);
    while (count && (count == SRV_RESP_STORE_MAX || bytes + n > SRV_RESP_STORE_BYTES)) drop_oldest();
    ring[(head + count) % SRV_RESP_STORE_MAX] = (entry){i, c, ns, n};
    count++, bytes += n;
    pthread_mutex_unlock(&mu);
}

char *srv_resp_store_get(const char *id, uint64_t ns) {
    char *out = NULL;
    pthread_mutex_lock(&mu);
    for (size_t k = 0; k < count && !out; k++) {
        const entry *e = &ring[(head + k) % SRV_RESP_STORE_MAX];
        if (e->ns == ns && !strcmp(e->id, id)) out = strdup(e->conv);
    }
    pthread_mutex_unlock(&mu);
    return out;
}
