/*
 * disk_tier.h — `serve --cache-disk DIR --cache-disk-max BYTES`: a second tier
 * under the RAM cache. A prefix evicted from RAM goes to disk, and a later
 * request whose prompt continues it loads it back instead of computing it.
 *
 * Writing: on an eviction (the cache's REMOVED event, inference thread) the
 * evicted run is copied, as a cache file image (tkv_cache_event_image:
 * checksummed, with the model fingerprint), into a bounded staging buffer;
 * the disk thread writes it to DIR. A run already on disk is not written
 * again. Nothing on the inference thread waits for the disk: when the
 * staging buffer is full, the run is dropped (counted).
 *
 * The index: each file holds the run from..end-1 of a prefix, and is named
 * KKKKKKKKKKKKKKKK-SSSSSSSSSSSSSSSS-FFFFFFFF-EEEEEEEE.tkvc (K: the key of
 * the prefix 0..end-1, S: of 0..from-1, F: from, E: end, hex). The key of tokens[0..end) in namespace ns is a hash chain,
 * h0 = XXH3-64(ns), h(i+1) = XXH3-64(token i, seed h(i)), so the keys of
 * every prefix of a prompt cost one pass over it, and the longest prefix on
 * disk is found in memory: a file ending at i whose `from` is cached in RAM
 * or is the end of another file on disk (a chain), and then a file that
 * starts there and goes past the prompt's end (its first part may be the
 * prompt's: the load takes what agrees, and where all of the prompt agrees,
 * the rest of the file too), then the files that go on from its end, each
 * found by the last one's key (an answer evicted in pieces, whose known
 * tokens a retry then takes without decoding it). The index is rebuilt from
 * the names at start; the least recently used files go when the directory
 * passes BYTES.
 *
 * Reading: the scheduler asks srv_disk_lookup before admitting a request;
 * when the disk holds more of its prompt than RAM does, the disk thread
 * reads the chain's files and the scheduler loads them
 * (tkv_cache_load_image, which validates everything and refuses a file
 * that holds another namespace or other tokens than its name promised).
 */
#ifndef TKV_SRV_DISK_H
#define TKV_SRV_DISK_H

#include "tokenkv.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct srv_disk srv_disk;

enum { SRV_DISK_MAX_CHAIN = 64 };

/* A read in flight: the files of a chain, in load order. */
typedef struct srv_disk_fetch {
    uint64_t ns;
    tkv_token *tokens; /* (n) the prompt's prefix the chain ends */
    size_t n;
    size_t n_files;
    struct {
        char name[64];
        uint8_t *data; /* read by the disk thread; NULL: could not */
        size_t size;   /* the size the index recorded, then the size read */
    } file[SRV_DISK_MAX_CHAIN];
    void (*ready)(struct srv_disk_fetch *f); /* the caller's: called on the disk thread once read */
    void *user;
    struct srv_disk_fetch *next; /* the disk thread's queue */
} srv_disk_fetch;

/* Open (create, mode 0700) dir, lock it, index its files, start the disk thread. NULL with a message on
   stderr, also when dir is not this user's, is writable by others, or is held by another process. */
srv_disk *srv_disk_start(const char *dir, uint64_t max_bytes);

/* The cache's event (inference thread): a REMOVED run is staged for writing. */
void srv_disk_cache_event(srv_disk *d, const tkv_context *ctx, const tkv_cache_event *ev);

/* When the disk holds a longer prefix of tokens[0..n) in ns than the
   `cached` tokens in RAM: a fetch of its files (malloc'd; read it with
   srv_disk_read), else NULL. In memory only. */
srv_disk_fetch *srv_disk_lookup(srv_disk *d, uint64_t ns, const tkv_token *tokens, size_t n, size_t cached);

/* Read f's files on the disk thread, then call f->ready(f) there. */
void srv_disk_read(srv_disk *d, srv_disk_fetch *f);

/* Load what f read into the cache (inference thread). Returns the tokens
   now cached from it (0 when nothing could be loaded; past the prompt's end
   when a file went on past it). */
size_t srv_disk_load(srv_disk *d, tkv_context *ctx, const srv_disk_fetch *f);

void srv_disk_fetch_free(srv_disk_fetch *f);

/* Counters, for /metrics and the tests. */
typedef struct srv_disk_stats {
    uint64_t files, bytes;      /* on disk now */
    uint64_t written, skipped;  /* runs written; runs already on disk */
    uint64_t dropped;           /* runs not written: staging full, or a write failed */
    uint64_t removed;           /* files removed to stay under the limit */
    uint64_t fetches, loaded_tokens, refused; /* reads; tokens they put back; files refused (untrusted, of
                                                  another size than recorded, or failing the load's checks) */
} srv_disk_stats;
void srv_disk_stats_get(srv_disk *d, srv_disk_stats *out);

/* Once the context exists: no file is read that is larger than max_file bytes (the largest image its cache
   writes); the index forgets such files (counted as refused, left on disk). */
void srv_disk_limit_files(srv_disk *d, uint64_t max_file);

/* Write what is staged, stop the thread. NULL: nothing. */
void srv_disk_stop(srv_disk *d);

#endif
