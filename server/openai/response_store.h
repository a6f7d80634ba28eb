/*
 * response_store.h — the conversations behind /v1/responses ids, so that a
 * request with previous_response_id continues one (response_store.c). Only
 * the messages are kept: their tokens are the cache's, and a continuation
 * finds them there as the longest cached prefix of its prompt.
 */
#ifndef TKV_SRV_OPENAI_RESPONSE_STORE_H
#define TKV_SRV_OPENAI_RESPONSE_STORE_H

#include <stddef.h>
#include <stdint.h>

/* The most responses and bytes kept; past them the oldest go first. */
#define SRV_RESP_STORE_MAX 256
#define SRV_RESP_STORE_BYTES ((size_t)64 << 20)

/* Keep conv (a JSON array of chat messages, copied) under id in namespace ns. Any thread. */
void srv_resp_store_put(const char *id, uint64_t ns, const char *conv);

/* The conversation kept under id in namespace ns, malloc'd; NULL when none (never stored, evicted, or another
   namespace's). Any thread. */
char *srv_resp_store_get(const char *id, uint64_t ns);

#endif
