/*
 * routes.c — looking a request up in the route table (routes.h). Pure: the
 * table is data, so tests/server/test_routes.c checks what it derives.
 */
#include "routes.h"

#include <string.h>

/* Whether route path p (exact, or ending in '*') matches path; *rest: what the '*' matched. */
static bool path_matches(const char *p, const char *path, const char **rest) {
    const size_t n = strlen(p);
    if (n && p[n - 1] == '*') {
        if (strncmp(path, p, n - 1)) return false;
        *rest = path + n - 1;
        return true;
    }
    *rest = "";
    return !strcmp(p, path);
}

static bool method_matches(const char *route, const char *method) {
    return !strcmp(route, method) || (!strcmp(route, "GET") && !strcmp(method, "HEAD"));
}

void srv_route_find(const srv_route *t, size_t n, const char *method, const char *path, srv_route_match *m) {
    *m = (srv_route_match){.status = 404};
    size_t len = 0;
    for (size_t i = 0; i < n; i++) {
        const char *rest;
        if (!path_matches(t[i].path, path, &rest)) continue;
        if (method_matches(t[i].method, method)) {
            *m = (srv_route_match){.status = 0, .route = &t[i], .rest = rest};
            return;
        }
        if (m->status == 404) m->status = 405, m->route = &t[i];
        if (strstr(m->allow, t[i].method)) continue;
        const size_t k = strlen(t[i].method);
        if (len + k + 4 >= sizeof m->allow) continue;
        if (len) memcpy(m->allow + len, " or ", 4), len += 4;
        memcpy(m->allow + len, t[i].method, k + 1), len += k;
    }
}
