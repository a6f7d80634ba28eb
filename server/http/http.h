/*
 * http.h — the HTTP side of the server, what server.c starts it with:
 * libmicrohttpd's callbacks (http.c; the route table in routes.h, the
 * handlers in handlers.c, streams in stream.c) and the views built on the
 * inference thread (views.c).
 */
#ifndef TKV_SRV_HTTP_H
#define TKV_SRV_HTTP_H

#include "openai/fields.h"
#include "conn.h"
#include "metrics.h"
#include "sched/scheduler.h"
#include "server.h"

#include <microhttpd.h>

/* What every HTTP thread shares; read-only after start-up. */
typedef struct srv_state {
    const srv_opts *o;
    const tkv_model *model;
    srv_sched *sched;
    srv_metrics *metrics;
    struct srv_store *store;  /* NULL: none */
    srv_api api;
    int64_t started;  /* unix seconds: the model's "created" */
    struct srv_kvev *kvev; /* --kv-events, or NULL */
    struct srv_disk *disk; /* --cache-disk, or NULL */
    struct srv_save *save; /* --cache-dir's saves, or NULL */
} srv_state;

/* MHD_AccessHandlerCallback (cls: srv_state). */
enum MHD_Result srv_http_handler(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                 const char *version, const char *upload, size_t *upload_size, void **con_cls);

/* MHD_RequestCompletedCallback: the log line, metrics, cleanup. */
void srv_http_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe);

/* GET /v1/cache and /metrics bodies, built on the inference thread (job
   functions for srv_sched_post; user: srv_view). The cache view lists the
   nodes and running sequences of namespace ns only, unless all (the admin
   key): a tenant sees its own prompts, nobody else's; detail: each node's
   text; ids: its token ids; check: tkv_cache_check. */
typedef struct srv_view {
    srv_state *S;
    bool detail, ids, check, all;
    uint64_t ns;
    char *out; /* the body (malloc'd), NULL when out of memory */
} srv_view;
void srv_cache_view(tkv_context *ctx, void *view);
void srv_metrics_view(tkv_context *ctx, void *view);
/* GET /slots: every slot, idle or running (its request's id, sizes and progress). */
void srv_slots_view(tkv_context *ctx, void *view);

#endif
