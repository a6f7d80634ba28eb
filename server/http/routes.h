/*
 * routes.h — the route table: every path the server answers, with its
 * method, who may call it and its handler. The one list: 404 (no such
 * path), 405 (the path, another method), 401 (the path's auth) all derive
 * from it (http.c), so a route cannot be known to one check and not another.
 */
#ifndef TKV_SRV_HTTP_ROUTES_H
#define TKV_SRV_HTTP_ROUTES_H

#include <microhttpd.h>
#include <stdbool.h>
#include <stddef.h>

struct conn;
struct srv_state;

/* A handler: rest is what a path's trailing '*' matched ("" for an exact path). */
typedef enum MHD_Result (*srv_route_fn)(struct conn *cs, struct MHD_Connection *c, struct srv_state *S,
                                        const char *rest);

typedef enum {
    SRV_AUTH_KEY,     /* the API key (or the admin key), when the server has one */
    SRV_AUTH_OPEN,    /* anyone: the health probe */
    SRV_AUTH_METRICS, /* anyone with --metrics-public, else the key */
    SRV_AUTH_WEB,     /* the web page's files: anyone (the page holds no data; it asks for the key itself and
                         sends it with every API call); with --no-webui not routes at all (http.c) */
} srv_auth;

typedef struct srv_route {
    const char *method; /* "GET" (which answers HEAD too) or "POST" */
    const char *path;   /* exact, or ending in '*': the path's prefix, any rest */
    srv_auth auth;
    srv_route_fn fn;
} srv_route;

/* The server's routes (handlers.c). */
extern const srv_route srv_routes[];
extern const size_t srv_n_routes;

/* What the table says of a method and path. */
typedef struct srv_route_match {
    int status;              /* 0: found; 404: no route has the path; 405: some do, none with the method */
    const srv_route *route;  /* 0: the route; 405: the path's first route (its auth); 404: NULL */
    const char *rest;        /* 0: what the path's '*' matched */
    char allow[32];          /* 405: the methods the path takes, as "GET or POST" */
} srv_route_match;

void srv_route_find(const srv_route *t, size_t n, const char *method, const char *path, srv_route_match *m);

#endif
