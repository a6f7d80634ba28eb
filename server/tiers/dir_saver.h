/*
 * dir_saver.h — periodic saves of the cache to --cache-dir without stalling
 * decoding: the inference thread takes a snapshot (tkv_cache_saver_snapshot:
 * the K/V of the prefixes not on disk yet, copied within a bound) and the
 * save thread writes it (tkv_cache_saver_write: stale files removed, new
 * files, the manifest, fsyncs).
 */
#ifndef TKV_SRV_SAVE_H
#define TKV_SRV_SAVE_H

#include <tokenkv.h>

typedef struct srv_save srv_save;

/* The counts of /metrics. */
typedef struct srv_save_stats {
    uint64_t saves, failures, busy; /* busy: intervals skipped, the previous save still writing */
    uint64_t files_written, files_kept, files_removed, bytes_written;
    double last_snapshot_s, max_snapshot_s, last_write_s;
} srv_save_stats;

/* A saver of dir with its thread; NULL with a message on stderr. */
srv_save *srv_save_start(const char *dir, uint64_t max_bytes);

/* Inference thread, between two steps: snapshot and hand the write to the save thread, unless the previous
   write is still running (then nothing: the next interval catches up). */
void srv_save_tick(srv_save *sv, tkv_context *ctx);

/* Wait for the save in progress, then (ctx not NULL: the inference thread is gone) save once more in the
   calling thread, and stop. NULL is allowed. */
void srv_save_stop(srv_save *sv, tkv_context *ctx);

void srv_save_stats_get(srv_save *sv, srv_save_stats *out);

/* Its counters for /metrics (Prometheus text), malloc'd; NULL when out of memory. */
char *srv_save_render(srv_save *sv);

#endif
