/*
 * kv_events.h — `serve --kv-events tcp://HOST:PORT`: what the cache holds,
 * published over ZeroMQ PUB in vLLM's KV-event format, so that a
 * prefix-aware router can follow this replica.
 *
 * The cache's events (tkv_cache_event, on the inference thread) become
 * events about fixed-size token blocks: BlockStored when a block's last
 * token becomes cached, BlockRemoved when any token of a cached block is
 * evicted, AllBlocksCleared on a clear. The inference thread only hashes
 * the affected blocks and appends a record to a bounded buffer (no
 * allocation, no I/O); a publisher thread encodes the records (msgpack)
 * and sends them. When the buffer is full the event is dropped and counted
 * (the subscriber then sees a gap in the sequence numbers).
 *
 * Block hashes: a chain over blocks of B tokens. The first block's parent
 * seed is XXH3-64 of the namespace (8 bytes, little-endian); block k's hash
 * is XXH3-64 of its B token ids (int32 little-endian) seeded with block
 * k-1's hash (or the namespace seed). Equal hashes mean equal namespaces
 * and token prefixes, so a router can compute them from a prompt.
 */
#ifndef TKV_SRV_KV_EVENTS_H
#define TKV_SRV_KV_EVENTS_H

#include "tokenkv.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct srv_kvev srv_kvev;

/* Bind a PUB socket at endpoint and start the publisher thread. tokens: BlockStored events carry the token
   ids of the unsalted namespace (never of a salted one: a subscriber is not authenticated, and the ids are
   the prompt's text); else their token id arrays are empty. NULL with a message on stderr when the endpoint
   cannot be bound. */
srv_kvev *srv_kvev_start(const char *endpoint, uint32_t block_size, bool tokens);

/* The cache's event (a tkv_cache_event_fn's body; inference thread). */
void srv_kvev_cache_event(srv_kvev *k, const tkv_cache_event *ev);

/* Events dropped because the publisher fell behind. */
uint64_t srv_kvev_dropped(const srv_kvev *k);

/* Publish what is queued, stop the thread, close the socket. NULL: nothing. */
void srv_kvev_stop(srv_kvev *k);

/* The hash of block tokens[0..block_size) after `parent` (the chain described above). */
uint64_t srv_kvev_block_hash(uint64_t parent, const tkv_token *tokens, uint32_t block_size);
/* The seed of a namespace's first block. */
uint64_t srv_kvev_ns_seed(uint64_t ns);

#endif
