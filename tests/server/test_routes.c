/*
 * test_routes.c — server/http/routes: what the route table derives. Every
 * route is found by its method (GET also by HEAD) and path; the same path
 * with another method is a 405 naming the methods it takes, with the
 * path's own auth (so a wrong method on an open route is not a 401); a
 * path no route has is a 404. Run over the server's own table (srv_routes)
 * and a hand-written one; the web page's files (server/web/, in the
 * binary) are routes of the table, one per file.
 */
#include "testutil.h"

#include <stdio.h>
#include <string.h>

#include "http/routes.h"
#include "web/web.h"

static enum MHD_Result fn_a(struct conn *cs, struct MHD_Connection *c, struct srv_state *S, const char *rest) {
    (void)cs, (void)c, (void)S, (void)rest;
    return MHD_YES;
}
static enum MHD_Result fn_b(struct conn *cs, struct MHD_Connection *c, struct srv_state *S, const char *rest) {
    (void)cs, (void)c, (void)S, (void)rest;
    return MHD_NO;
}

static void test_lookup(void **state) {
    (void)state;
    static const srv_route t[] = {
        {"GET", "/health", SRV_AUTH_OPEN, fn_a},  {"GET", "/items", SRV_AUTH_KEY, fn_a},
        {"GET", "/items/*", SRV_AUTH_KEY, fn_b},  {"POST", "/items", SRV_AUTH_KEY, fn_b},
        {"POST", "/run", SRV_AUTH_METRICS, fn_a},
    };
    const size_t n = sizeof t / sizeof t[0];
    srv_route_match m;
    srv_route_find(t, n, "GET", "/health", &m);
    assert_int_equal(m.status, 0);
    assert_ptr_equal(m.route, &t[0]);
    assert_string_equal(m.rest, "");
    srv_route_find(t, n, "HEAD", "/health", &m); /* HEAD is GET without the body */
    assert_int_equal(m.status, 0);
    assert_ptr_equal(m.route, &t[0]);
    srv_route_find(t, n, "POST", "/health", &m);
    assert_int_equal(m.status, 405);
    assert_int_equal(m.route->auth, SRV_AUTH_OPEN); /* the path's auth: no 401 before the 405 */
    assert_string_equal(m.allow, "GET");
    srv_route_find(t, n, "POST", "/items", &m);
    assert_ptr_equal(m.route, &t[3]);
    srv_route_find(t, n, "DELETE", "/items", &m);
    assert_int_equal(m.status, 405);
    assert_string_equal(m.allow, "GET or POST");
    srv_route_find(t, n, "GET", "/items/abc", &m); /* a trailing '*': the rest goes to the handler */
    assert_int_equal(m.status, 0);
    assert_ptr_equal(m.route, &t[2]);
    assert_string_equal(m.rest, "abc");
    srv_route_find(t, n, "POST", "/items/abc", &m); /* a prefix route answers 405 like any other */
    assert_int_equal(m.status, 405);
    assert_string_equal(m.allow, "GET");
    srv_route_find(t, n, "GET", "/run", &m);
    assert_int_equal(m.status, 405);
    assert_string_equal(m.allow, "POST");
    srv_route_find(t, n, "GET", "/nothing", &m);
    assert_int_equal(m.status, 404);
    assert_null(m.route);
    srv_route_find(t, n, "GET", "/healthz", &m); /* exact means exact */
    assert_int_equal(m.status, 404);
    srv_route_find(t, n, "GET", "/item", &m);
    assert_int_equal(m.status, 404);
}

/* The server's own table: each route found, the other method a 405, unknown paths 404. */
static void test_server_table(void **state) {
    (void)state;
    assert_true(srv_n_routes >= 15);
    for (size_t i = 0; i < srv_n_routes; i++) {
        const srv_route *r = &srv_routes[i];
        char path[128];
        const size_t len = strlen(r->path);
        snprintf(path, sizeof path, "%s", r->path);
        if (len && path[len - 1] == '*') snprintf(path + len - 1, sizeof path - (len - 1), "x"); /* any rest */
        srv_route_match m;
        srv_route_find(srv_routes, srv_n_routes, r->method, path, &m);
        if (m.status || m.route != r) fail_msg("%s %s: status %d", r->method, path, m.status);
        const char *other = !strcmp(r->method, "GET") ? "POST" : "GET";
        srv_route_find(srv_routes, srv_n_routes, other, path, &m);
        if (m.status != 405 || strcmp(m.allow, r->method) || m.route->auth != r->auth)
            fail_msg("%s %s: status %d allow \"%s\"", other, path, m.status, m.allow);
        srv_route_find(srv_routes, srv_n_routes, "PUT", path, &m);
        assert_int_equal(m.status, 405);
        if (!strcmp(r->method, "GET")) { /* HEAD is GET's */
            srv_route_find(srv_routes, srv_n_routes, "HEAD", path, &m);
            assert_int_equal(m.status, 0);
        }
    }
    static const char *const unknown[] = {"/index", "/v1", "/v1/nothing", "/v1/chat", "/health/", "/v1/modelsx", "/metrics2"};
    for (size_t i = 0; i < sizeof unknown / sizeof unknown[0]; i++) {
        srv_route_match m;
        srv_route_find(srv_routes, srv_n_routes, "GET", unknown[i], &m);
        if (m.status != 404) fail_msg("GET %s: status %d, not 404", unknown[i], m.status);
        srv_route_find(srv_routes, srv_n_routes, "POST", unknown[i], &m);
        if (m.status != 404) fail_msg("POST %s: status %d, not 404", unknown[i], m.status);
    }
    /* the cases the three lists of old disagreed on: a model's own path with POST is a 405, not a 404 */
    srv_route_match m;
    srv_route_find(srv_routes, srv_n_routes, "POST", "/v1/models/stories", &m);
    assert_int_equal(m.status, 405);
    srv_route_find(srv_routes, srv_n_routes, "POST", "/health", &m);
    assert_int_equal(m.status, 405);
    assert_int_equal(m.route->auth, SRV_AUTH_OPEN);
    srv_route_find(srv_routes, srv_n_routes, "GET", "/metrics", &m);
    assert_int_equal(m.route->auth, SRV_AUTH_METRICS);
}

/* The web page: every file of server/web/ and / have a GET route open to all (while the page is on), so a
   POST on them is a 405 with no key asked; no web route names a file the page lacks. */
static void test_web_routes(void **state) {
    (void)state;
    assert_true(srv_web_n_files >= 3);
    for (size_t i = 0; i <= srv_web_n_files; i++) {
        const char *path = i < srv_web_n_files ? srv_web_files[i].path : "/";
        srv_route_match m;
        srv_route_find(srv_routes, srv_n_routes, "GET", path, &m);
        if (m.status || m.route->auth != SRV_AUTH_WEB) fail_msg("GET %s: status %d", path, m.status);
        srv_route_find(srv_routes, srv_n_routes, "POST", path, &m);
        if (m.status != 405 || m.route->auth != SRV_AUTH_WEB || strcmp(m.allow, "GET"))
            fail_msg("POST %s: status %d, allow \"%s\"", path, m.status, m.allow);
    }
    size_t n_web = 0;
    for (size_t i = 0; i < srv_n_routes; i++) {
        if (srv_routes[i].auth != SRV_AUTH_WEB) continue;
        n_web++;
        bool found = !strcmp(srv_routes[i].path, "/");
        for (size_t k = 0; k < srv_web_n_files; k++) found = found || !strcmp(srv_web_files[k].path, srv_routes[i].path);
        if (!found) fail_msg("route %s is not a file of the web page", srv_routes[i].path);
    }
    assert_int_equal(n_web, srv_web_n_files + 1);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lookup),
        cmocka_unit_test(test_server_table),
        cmocka_unit_test(test_web_routes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
