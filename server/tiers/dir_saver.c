/*
 * dir_saver.c — --cache-dir saves off the inference thread (dir_saver.h).
 *
 * The disk tier's thread (disk_tier.c) is not used: requests wait on its reads,
 * and a save's fsyncs would queue ahead of them; it also runs only with
 * --cache-disk. One snapshot at a time: the library's saver holds it (the
 * bounded copy), so no staging buffer of our own is needed.
 */
#include "dir_saver.h"
#include "metrics.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* The most K/V one snapshot copies: a burst of new prefixes beyond it waits for the next interval. */
#define SAVE_COPY_BYTES ((uint64_t)256 << 20)

struct srv_save {
    tkv_cache_saver *saver;
    char *dir;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool pending; /* a snapshot waits for (or is in) its write */
    bool stop;
    srv_save_stats st;
};

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Write the saver's snapshot and count it (the calling thread owns the saver); log it when it changed
   something or always. true: it found damaged files, which the next save writes again. */
static bool write_snapshot(srv_save *sv, bool always) {
    const double t0 = now_s();
    tkv_cache_save_info info;
    const tkv_status rc = tkv_cache_saver_write(sv->saver, &info);
    const double dt = now_s() - t0;
    if (rc != TKV_OK)
        fprintf(stderr, "tokenkv serve: warning: cache: saving to %s failed: %s\n", sv->dir, tkv_last_error(NULL));
    else if (always || info.files_written || info.files_removed)
        fprintf(stderr,
                "tokenkv serve: cache: saved to %s in %.1f ms (%u files: %u written, %u kept, %u removed, %u damaged)\n",
                sv->dir, 1e3 * dt, info.files, info.files_written, info.files_kept, info.files_removed,
                info.files_damaged);
    pthread_mutex_lock(&sv->mu);
    sv->st.saves++;
    sv->st.failures += rc != TKV_OK;
    sv->st.files_written += info.files_written;
    sv->st.files_kept += info.files_kept;
    sv->st.files_removed += info.files_removed;
    if (rc == TKV_OK) sv->st.bytes_written += info.bytes_copied;
    sv->st.last_write_s = dt;
    sv->pending = false;
    pthread_mutex_unlock(&sv->mu);
    return rc == TKV_OK && info.files_damaged;
}

static void *run(void *arg) {
    srv_save *sv = arg;
    pthread_mutex_lock(&sv->mu);
    for (;;) {
        while (!sv->stop && !sv->pending) pthread_cond_wait(&sv->cv, &sv->mu);
        if (!sv->pending) break;
        pthread_mutex_unlock(&sv->mu);
        write_snapshot(sv, false);
        pthread_cond_broadcast(&sv->cv);
        pthread_mutex_lock(&sv->mu);
    }
    pthread_mutex_unlock(&sv->mu);
    return NULL;
}

srv_save *srv_save_start(const char *dir, uint64_t max_bytes) {
    srv_save *sv = calloc(1, sizeof *sv);
    if (!sv) return NULL;
    sv->dir = malloc(strlen(dir) + 1);
    if (!sv->dir) {
        free(sv);
        return NULL;
    }
    strcpy(sv->dir, dir);
    if (tkv_cache_saver_new(dir, max_bytes, SAVE_COPY_BYTES, &sv->saver) != TKV_OK) {
        fprintf(stderr, "tokenkv serve: --cache-dir %s: %s\n", dir, tkv_last_error(NULL));
        free(sv->dir);
        free(sv);
        return NULL;
    }
    pthread_mutex_init(&sv->mu, NULL);
    pthread_cond_init(&sv->cv, NULL);
    if (pthread_create(&sv->thread, NULL, run, sv) != 0) {
        fprintf(stderr, "tokenkv serve: --cache-dir: cannot start the save thread\n");
        tkv_cache_saver_free(sv->saver);
        pthread_mutex_destroy(&sv->mu);
        pthread_cond_destroy(&sv->cv);
        free(sv->dir);
        free(sv);
        return NULL;
    }
    return sv;
}

void srv_save_tick(srv_save *sv, tkv_context *ctx) {
    pthread_mutex_lock(&sv->mu);
    const bool busy = sv->pending;
    if (busy) sv->st.busy++;
    pthread_mutex_unlock(&sv->mu);
    if (busy) return; /* the save thread owns the saver */
    const double t0 = now_s();
    const tkv_status rc = tkv_cache_saver_snapshot(sv->saver, ctx);
    const double dt = now_s() - t0;
    pthread_mutex_lock(&sv->mu);
    sv->st.last_snapshot_s = dt;
    if (dt > sv->st.max_snapshot_s) sv->st.max_snapshot_s = dt;
    if (rc == TKV_OK) {
        sv->pending = true;
        pthread_cond_signal(&sv->cv);
    } else {
        sv->st.failures++;
    }
    pthread_mutex_unlock(&sv->mu);
    if (rc != TKV_OK)
        fprintf(stderr, "tokenkv serve: warning: cache: saving to %s failed: %s\n", sv->dir, tkv_last_error(ctx));
}

void srv_save_stop(srv_save *sv, tkv_context *ctx) {
    if (!sv) return;
    pthread_mutex_lock(&sv->mu);
    sv->stop = true;
    pthread_cond_broadcast(&sv->cv);
    pthread_mutex_unlock(&sv->mu);
    pthread_join(sv->thread, NULL); /* it finishes the write in progress first */
    /* a damaged file the last write found (and removed) is written again by a second round */
    for (int round = 0; ctx && round < 2; round++) {
        if (tkv_cache_saver_snapshot(sv->saver, ctx) != TKV_OK) {
            fprintf(stderr, "tokenkv serve: warning: cache: saving to %s failed: %s\n", sv->dir, tkv_last_error(ctx));
            break;
        }
        if (!write_snapshot(sv, true)) break;
    }
    tkv_cache_saver_free(sv->saver);
    pthread_mutex_destroy(&sv->mu);
    pthread_cond_destroy(&sv->cv);
    free(sv->dir);
    free(sv);
}

void srv_save_stats_get(srv_save *sv, srv_save_stats *out) {
    pthread_mutex_lock(&sv->mu);
    *out = sv->st;
    pthread_mutex_unlock(&sv->mu);
}

char *srv_save_render(srv_save *sv) {
    srv_save_stats st;
    srv_save_stats_get(sv, &st);
    srv_prom b = {0};
    srv_prom_count(&b, "tokenkv_cache_saves_total", "counter", "Saves to --cache-dir (written by the save thread).",
                   st.saves);
    srv_prom_count(&b, "tokenkv_cache_save_failures_total", "counter",
                   "Saves that failed (the next one completes them).", st.failures);
    srv_prom_count(&b, "tokenkv_cache_save_busy_total", "counter",
                   "Intervals skipped: the previous save was still writing.", st.busy);
    srv_prom_count(&b, "tokenkv_cache_save_files_written_total", "counter",
                   "Files written (new or changed prefix-index nodes).", st.files_written);
    srv_prom_count(&b, "tokenkv_cache_save_files_kept_total", "counter",
                   "Files a save kept because they were on disk already.", st.files_kept);
    srv_prom_count(&b, "tokenkv_cache_save_bytes_written_total", "counter", "Bytes of files written.",
                   st.bytes_written);
    srv_prom_metric(&b, "tokenkv_cache_save_snapshot_seconds_max", "gauge",
                    "The longest snapshot (on the inference thread).", st.max_snapshot_s);
    srv_prom_metric(&b, "tokenkv_cache_save_write_seconds", "gauge", "The last save's write (on the save thread).",
                    st.last_write_s);
    return srv_prom_done(&b);
}
