/*
 * http.c — libmicrohttpd's callbacks: framing, what the headers alone
 * decide, the body, the key, and the route table's verdict (routes.h);
 * the handlers are handlers.c's, the streams stream.c's.
 *
 * Nothing here blocks an HTTP thread (a few serve thousands of
 * connections): a request that waits for the scheduler, for the next
 * streamed text or for a view of the cache suspends its connection
 * (conn.h) and sets cs->cont, the step to go on with when the connection
 * is resumed; the scheduler's thread wakes it at each change. A client
 * that leaves while it waits is noticed by conn.c's watchdog, and its
 * request is cancelled, so its generation stops within a step or so.
 */
#include "exchange.h"
#include "routes.h"

#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

/* The API key, or the admin key, which may do all the API key may. */
static bool authorized(srv_state *S, struct MHD_Connection *c) {
    return !S->o->api_key || http_bearer_is(c, S->o->api_key) || http_bearer_is(c, S->o->admin_key);
}

/* The table's answer for a request; with --no-webui the page's routes are not there (404, with the key asked). */
static void find_route(const srv_state *S, const char *method, const char *url, srv_route_match *m) {
    srv_route_find(srv_routes, srv_n_routes, method, url, m);
    if (m->route && m->route->auth == SRV_AUTH_WEB && S->o->no_webui) *m = (srv_route_match){.status = 404};
}

/* Whether a request needs no key: its route's auth (the path's, when the method is wrong); a path the table
   does not know needs the key, so that nobody without it learns which paths exist. */
static bool open_route(const srv_state *S, const srv_route_match *m) {
    if (!m->route) return false;
    switch (m->route->auth) {
    case SRV_AUTH_OPEN: return true;
    case SRV_AUTH_METRICS: return S->o->metrics_public;
    case SRV_AUTH_WEB: return true;
    case SRV_AUTH_KEY: return false;
    }
    return false;
}

/* Everything but the route itself derives from the table: whether a key is needed (401), then the body's
   limits (500, 413), then 404 and 405. */
static enum MHD_Result route(conn *cs, struct MHD_Connection *c, srv_state *S, const char *url, const char *method) {
    srv_route_match m;
    find_route(S, method, url, &m);
    if (!open_route(S, &m) && !authorized(S, c))
        return http_fail(cs, c, 401, NULL, "invalid_api_key", "invalid or missing API key (send 'Authorization: Bearer KEY')");
    if (cs->oom) return http_send_body(cs, c, 500, NULL, NULL);
    srv_err e;
    if (cs->too_big) {
        srv_err_set(&e, 413, NULL, "request_too_large", "the request body exceeds this server's limit of %zu bytes (--max-body)",
                    S->o->max_body);
        return http_send_err(cs, c, &e);
    }
    if (m.status == 405) {
        srv_err_set(&e, 405, NULL, "method_not_allowed", "%s is not allowed on %s; use %s", method, url, m.allow);
        return http_send_err(cs, c, &e);
    }
    if (m.status == 404) {
        srv_err_set(&e, 404, NULL, "not_found", "no route for %s %s", method, url);
        return http_send_err(cs, c, &e);
    }
    return m.route->fn(cs, c, S, m.rest);
}

/* The framing headers of a request (RFC 9112 section 6). */
typedef struct framing {
    int n_length, n_coding;
    bool lengths_differ;
    char length[32];
    const char *coding;
} framing;

static enum MHD_Result framing_header(void *cls, enum MHD_ValueKind kind, const char *key, const char *value) {
    (void)kind;
    framing *f = cls;
    if (!strcasecmp(key, "Content-Length")) {
        if (f->n_length++ && strcmp(f->length, value)) f->lengths_differ = true;
        snprintf(f->length, sizeof f->length, "%s", value);
    } else if (!strcasecmp(key, "Transfer-Encoding")) {
        f->n_coding++;
        f->coding = value;
    }
    return MHD_YES;
}

static bool is_json_type(const char *t) {
    if (!t || strncasecmp(t, "application/json", 16)) return false;
    return t[16] == '\0' || t[16] == ';' || t[16] == ' ' || t[16] == '\t';
}

/*
 * What can be decided from the headers alone, before any of the body is
 * kept (so an unauthenticated or oversized upload costs no memory): broken
 * framing (400 at once, then the connection closes: a second request
 * hidden in a body must not be answered), OPTIONS (at once), a wrong API
 * key (401), a POST that is not JSON (415: a web page cannot send JSON to
 * another site without CORS, so this keeps pages from driving an unkeyed
 * local server), a body announced over --max-body (413). When a body
 * follows, these are answered before it is read and the connection closes
 * gracefully (conn.h: the socket drains what the client still sends, so
 * it reads the answer, not a reset); without one they are answered in
 * turn and the connection stays open. Returns -1 when the request goes on
 * (cs->reject may then be set).
 */
/* The Access-Control-Allow-Origin for a page of `origin` under --cors-origin `allow` (a comma-separated list, as
   llama-server's --cors-origins: "*", origins, or "localhost" for any page served from this machine), or NULL. */
static const char *cors_allowed(const char *allow, const char *origin) {
    if (!strcmp(allow, "*")) return "*";
    const char *host = strstr(origin, "://");
    host = host ? host + 3 : origin;
    const size_t hl = strcspn(host, ":/");
    for (const char *p = allow; *p;) {
        while (*p == ' ' || *p == ',') p++;
        const size_t n = strcspn(p, ",");
        size_t m = n;
        while (m && p[m - 1] == ' ') m--;
        if (m && m == strlen(origin) && !strncmp(p, origin, m)) return origin;
        if (m == 9 && !strncmp(p, "localhost", 9) &&
            ((hl == 9 && !strncmp(host, "localhost", 9)) || (hl == 9 && !strncmp(host, "127.0.0.1", 9)) ||
             !strncmp(host, "[::1]", 5)))
            return origin;
        p += n;
    }
    return NULL;
}

static int answer_early(conn *cs, struct MHD_Connection *c, srv_state *S, const char *url, const char *method) {
    const char *origin = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Origin"), *allow = S->o->cors_origin;
    if (origin && allow) cs->cors = cors_allowed(allow, origin);
    cs->replica = S->o->replica_id;
    framing f = {0};
    MHD_get_connection_values(c, MHD_HEADER_KIND, framing_header, &f);
    const char *why = NULL;
    if (f.lengths_differ) why = "conflicting Content-Length headers";
    else if (f.n_coding && f.n_length) why = "both Content-Length and Transfer-Encoding";
    else if (f.n_coding > 1 || (f.n_coding && strcasecmp(f.coding, "chunked")))
        why = "a transfer coding other than chunked";
    if (why) {
        cs->close = true;
        srv_link_linger(cs->link);
        return (int)http_fail(cs, c, 400, NULL, "bad_framing", why);
    }
    if (!strcmp(method, "OPTIONS")) {
        struct MHD_Response *r = MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
        if (!r) return MHD_NO;
        MHD_add_response_header(r, "Allow", "GET, HEAD, POST, OPTIONS");
        if (cs->cors) { /* a preflight: what the page may send */
            MHD_add_response_header(r, "Access-Control-Allow-Methods", "GET, HEAD, POST, OPTIONS");
            MHD_add_response_header(r, "Access-Control-Allow-Headers", "Authorization, Content-Type");
            MHD_add_response_header(r, "Access-Control-Max-Age", "600");
        }
        http_add_cors(cs, r);
        cs->status = 204;
        enum MHD_Result ret = MHD_queue_response(c, 204, r);
        MHD_destroy_response(r);
        return (int)ret;
    }
    srv_err e;
    srv_route_match m;
    find_route(S, method, url, &m);
    if (!open_route(S, &m) && !authorized(S, c))
        srv_err_set(&e, 401, NULL, "invalid_api_key", "invalid or missing API key (send 'Authorization: Bearer KEY')");
    else if (!strcmp(method, "POST") && !is_json_type(MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Type")))
        srv_err_set(&e, 415, NULL, "unsupported_media_type",
                    "request bodies must be JSON: send 'Content-Type: application/json'");
    else if (!strcmp(method, "POST") && f.n_length && strtoull(f.length, NULL, 10) > S->o->max_body)
        srv_err_set(&e, 413, NULL, "request_too_large", "the request body exceeds this server's limit of %zu bytes "
                    "(--max-body)", S->o->max_body);
    else
        return -1;
    if (f.n_coding || (f.n_length && strtoull(f.length, NULL, 10) > 0)) {
        /* a body follows: answer now, before any of it is read; MHD then reads no more and closes after the
           answer, and the socket drains before its close so that a client still sending reads this */
        cs->close = true;
        srv_link_linger(cs->link);
        return (int)http_send_err(cs, c, &e);
    }
    if (!(cs->reject = malloc(sizeof e))) return MHD_NO; /* no body: answered as usual, the connection kept */
    *cs->reject = e;
    return -1;
}

enum MHD_Result srv_http_handler(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                 const char *version, const char *upload, size_t *upload_size, void **con_cls) {
    (void)version;
    srv_state *S = cls;
    conn *cs = *con_cls;
    if (!cs) { /* headers are in; the body follows in later calls */
        if (!(cs = calloc(1, sizeof *cs))) return MHD_NO;
        snprintf(cs->method, sizeof cs->method, "%s", method);
        snprintf(cs->path, sizeof cs->path, "%s", url);
        cs->t0 = srv_now();
        *con_cls = cs;
        /* no link (it ran out of memory): nothing could wake this connection */
        if (!(cs->link = srv_link_of(c))) return MHD_NO;
        const int early = answer_early(cs, c, S, url, method);
        return early < 0 ? MHD_YES : (enum MHD_Result)early;
    }
    if (*upload_size) {
        /* past the limit the rest is read and dropped, so the client still
           gets its 413 instead of a reset connection */
        if (!cs->too_big && !cs->oom && !cs->reject) {
            if (cs->n + *upload_size > S->o->max_body) {
                cs->too_big = true;
                free(cs->body);
                cs->body = NULL, cs->n = cs->cap = 0;
            } else {
                if (cs->n + *upload_size + 1 > cs->cap) {
                    size_t cap = cs->cap ? cs->cap : 4096;
                    while (cap < cs->n + *upload_size + 1) cap *= 2;
                    char *b = realloc(cs->body, cap);
                    if (!b) cs->oom = true;
                    else cs->body = b, cs->cap = cap;
                }
                if (!cs->oom) memcpy(cs->body + cs->n, upload, *upload_size), cs->n += *upload_size;
            }
        }
        *upload_size = 0;
        return MHD_YES;
    }
    if (cs->cont) return cs->cont(cs, c, S); /* resumed: go on where it waited */
    srv_link_request_read(cs->link); /* whole: from here on no deadline, the server is the one working */
    if (cs->reject) return http_send_err(cs, c, cs->reject);
    return route(cs, c, S, url, method);
}

void srv_http_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe) {
    srv_state *S = cls;
    conn *cs = *con_cls;
    srv_link_request_done(srv_link_of(c)); /* the next request's deadline starts now */
    if (!cs) return;
    int status = cs->status ? cs->status : 499;
    if (toe != MHD_REQUEST_TERMINATED_COMPLETED_OK && status == 200) status = 499; /* the client left mid-response */
    size_t prompt = 0, cached = 0;
    int gen = 0;
    for (size_t i = 0; i < cs->n_reqs; i++) {
        srv_req *r = cs->reqs[i];
        pthread_mutex_lock(&r->mu);
        r->wake = NULL, r->wake_arg = NULL; /* the link may close after this */
        if (!r->done) r->cancelled = true;
        if (!i) prompt = r->n_prompt, cached = r->n_cached;
        gen += r->done ? r->n_gen : r->n_pushed; /* a cancelled stream: the tokens it was sent */
        pthread_mutex_unlock(&r->mu);
        srv_req_unref(r);
    }
    if (cs->job.done == http_view_done) {
        /* a view whose connection ended before its body went out (the
           client left, or the server stops): its job writes into cs, so wait
           for it (a step at most; a stopping scheduler calls every pending
           job's done), then free the body nobody sent */
        while (!atomic_load(&cs->job_done)) nanosleep(&(struct timespec){0, 100000}, NULL);
        free(cs->view.out);
    }
    srv_metrics_request(S->metrics, status);
    fprintf(stderr, "%s %s %d prompt=%zu cached=%zu generated=%d %.1f ms\n", cs->method, cs->path, status, prompt, cached,
            gen, 1e3 * (srv_now() - cs->t0));
    free(cs->body);
    free(cs->reject);
    free(cs);
    *con_cls = NULL;
}

