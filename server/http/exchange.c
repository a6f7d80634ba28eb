/*
 * exchange.c — queueing responses, the key check, and the one place where
 * a request's failure (request.h) becomes an HTTP status.
 */
#include "exchange.h"

#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>


void http_add_cors(const conn *cs, struct MHD_Response *r) {
    if (cs->replica) MHD_add_response_header(r, "X-Tokenkv-Replica", cs->replica);
    if (!cs->cors) return;
    MHD_add_response_header(r, "Access-Control-Allow-Origin", cs->cors);
    MHD_add_response_header(r, "Vary", "Origin");
}

static const char oom_body[] =
    "{\"error\":{\"message\":\"out of memory\",\"type\":\"server_error\",\"param\":null,\"code\":null}}";

enum MHD_Result http_send_body(conn *cs, struct MHD_Connection *c, int status, const char *ctype, char *body) {
    struct MHD_Response *r;
    if (body) {
        r = MHD_create_response_from_buffer(strlen(body), body, MHD_RESPMEM_MUST_FREE);
    } else {
        status = 500;
        ctype = "application/json";
        r = MHD_create_response_from_buffer(sizeof oom_body - 1, (void *)oom_body, MHD_RESPMEM_PERSISTENT);
    }
    if (!r) {
        free(body);
        return MHD_NO;
    }
    MHD_add_response_header(r, "Content-Type", ctype);
    if (cs->close) MHD_add_response_header(r, "Connection", "close");
    http_add_cors(cs, r);
    cs->status = status;
    enum MHD_Result ret = MHD_queue_response(c, (unsigned)status, r);
    MHD_destroy_response(r);
    return ret;
}

enum MHD_Result http_send_json(conn *cs, struct MHD_Connection *c, int status, json_t *o) {
    char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    return http_send_body(cs, c, status, "application/json", s);
}

enum MHD_Result http_send_err(conn *cs, struct MHD_Connection *c, const srv_err *e) {
    return http_send_body(cs, c, e->status, "application/json", srv_err_json(e));
}

enum MHD_Result http_fail(conn *cs, struct MHD_Connection *c, int status, const char *param, const char *code,
                            const char *msg) {
    srv_err e;
    srv_err_set(&e, status, param, code, "%s", msg);
    return http_send_err(cs, c, &e);
}

void http_failed_err(srv_err *e, srv_req *r) {
    static const struct {
        int status;
        const char *code;
    } map[] = {[SRV_FAIL_NONE] = {500, "internal_error"},      [SRV_FAIL_CANCELLED] = {499, "cancelled"},
               [SRV_FAIL_INVALID] = {400, "invalid_value"},    [SRV_FAIL_CACHE_FULL] = {503, "cache_full"},
               [SRV_FAIL_INTERNAL] = {500, "internal_error"}, [SRV_FAIL_STOPPING] = {503, "shutting_down"}};
    srv_err_set(e, map[r->failed].status, NULL, map[r->failed].code, "%s", r->err_msg);
}

/* Whether the request's bearer token is key; every byte compared, so the time taken does not tell how much
   matched. */
bool http_bearer_is(struct MHD_Connection *c, const char *key) {
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
    const char *x = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "X-Api-Key"); /* Anthropic's clients send this */
    if (!key || (!(h && !strncmp(h, "Bearer ", 7)) && !x)) return false;
    const char *got = h && !strncmp(h, "Bearer ", 7) ? h + 7 : x;
    size_t lg = strlen(got), lw = strlen(key);
    unsigned diff = (unsigned)(lg ^ lw);
    for (size_t i = 0; i < lw; i++) diff |= (unsigned char)key[i] ^ (unsigned char)(i < lg ? got[i] : 0);
    return diff == 0;
}


uint64_t http_client_of(const srv_state *S, struct MHD_Connection *c) {
    if (S->o->api_key) {
        const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
        const char *x = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "X-Api-Key");
        const char *key = h && !strncmp(h, "Bearer ", 7) ? h + 7 : x ? x : "";
        return XXH3_64bits(key, strlen(key)) | 1;
    }
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    const struct sockaddr *sa = ci ? ci->client_addr : NULL;
    if (sa && sa->sa_family == AF_INET) {
        const struct in_addr a = ((const struct sockaddr_in *)(const void *)sa)->sin_addr;
        return XXH3_64bits(&a, sizeof a) | 1;
    }
    if (sa && sa->sa_family == AF_INET6) {
        const struct in6_addr a = ((const struct sockaddr_in6 *)(const void *)sa)->sin6_addr;
        return XXH3_64bits(&a, sizeof a) | 1;
    }
    return 1;
}

bool http_is_get(const char *method) { return !strcmp(method, "GET") || !strcmp(method, "HEAD"); }

void http_cancel_all(srv_req *const *reqs, size_t n) {
    for (size_t i = 0; i < n; i++) srv_req_cancel(reqs[i]);
}
