/*
 * exchange.h — one HTTP exchange: a request on a connection and its
 * response. What the files of http/ share: the state of a request in
 * flight (conn), the helpers that queue a response, the key check.
 */
#ifndef TKV_SRV_HTTP_EXCHANGE_H
#define TKV_SRV_HTTP_EXCHANGE_H

#include "http.h"

#include <stdatomic.h>

typedef struct conn conn;
struct conn {
    char method[16], path[96];
    char *body;
    size_t n, cap;
    bool too_big, oom;
    bool close;    /* answer, then close the connection (broken framing, an answer before the body) */
    srv_err *reject; /* decided from the headers (key, type) of a request without a body: answered in turn */
    const char *cors;  /* the Access-Control-Allow-Origin of the response (--cors-origin), or NULL */
    const char *replica; /* X-Tokenkv-Replica of every response (--replica-id), or NULL */
    int status;    /* of the response, for the log and the metrics */
    srv_req *reqs[SRV_MAX_CHOICES]; /* a generation in flight: a request per choice (n), or none */
    size_t n_reqs;
    double t0;
    srv_link *link;
    /* suspended: the step to go on with once resumed */
    enum MHD_Result (*cont)(struct conn *cs, struct MHD_Connection *c, srv_state *S);
    srv_job job; /* a view built on the inference thread */
    srv_view view;
    atomic_bool job_done;
};

/* CORS: a page of the allowed origin may read the response. And which replica answered (behind a balancer). */
void http_add_cors(const conn *cs, struct MHD_Response *r);
/* Queue a response of body (malloc'd, owned from here; NULL: out of memory, a 500). */
enum MHD_Result http_send_body(conn *cs, struct MHD_Connection *c, int status, const char *ctype, char *body);
/* Queue o as JSON (its reference is taken; NULL: out of memory). */
enum MHD_Result http_send_json(conn *cs, struct MHD_Connection *c, int status, json_t *o);
enum MHD_Result http_send_err(conn *cs, struct MHD_Connection *c, const srv_err *e);
enum MHD_Result http_fail(conn *cs, struct MHD_Connection *c, int status, const char *param, const char *code,
                          const char *msg);
/* A failed request's error as the client sees it: the scheduler says why (request.h), this picks the status
   and the OpenAI code. */
void http_failed_err(srv_err *e, srv_req *r);
/* Whether the request's key is key (NULL: never): its bearer token, or else its X-Api-Key header (the
   Anthropic clients' and llama-server's other way to send it). */
bool http_bearer_is(struct MHD_Connection *c, const char *key);
/* GET, or HEAD: GET without the body (libmicrohttpd leaves it out). */
bool http_is_get(const char *method);

/* Who sent the request, for the scheduler's shares (sched/policy.h): with
   --api-key, the key it authenticated with (every holder of one key is one
   client); without, its peer address (not the port). A hash, never 0. */
uint64_t http_client_of(const srv_state *S, struct MHD_Connection *c);
void http_cancel_all(srv_req *const *reqs, size_t n);

/* The SSE response of a generation whose first text is in (stream.c). */
enum MHD_Result http_send_stream(conn *cs, struct MHD_Connection *c, srv_state *S);

/* The job of a view is done (handlers.c); srv_http_completed waits for a view's job by it. */
void http_view_done(srv_job *job, bool ran);

#endif
