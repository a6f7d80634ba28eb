/*
 * test_linger.c — server/http/linger: the graceful close of a connection
 * answered before its body was read, over real loopback TCP sockets.
 *
 * A server socket that has written its answer is handed over; the client
 * then sends its whole body and only then reads: every write succeeds (the
 * socket drains it instead of resetting), and the client reads the answer
 * and the end of the stream. The bounds hold: past the byte bound the
 * socket is closed (the client's writes then fail) after at least that
 * many bytes were read; a client that neither sends nor closes is closed
 * at the time bound; past the socket bound a socket is closed at once.
 */
#include "testutil.h"

#include <errno.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "http/linger.h"

static const char answer[] = "HTTP/1.1 401 Unauthorized\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";

/* A connected loopback TCP pair: *client and *server. */
static void tcp_pair(int *client, int *server) {
    int l = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(l >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof a;
    assert_int_equal(bind(l, (struct sockaddr *)&a, sizeof a), 0);
    assert_int_equal(listen(l, 4), 0);
    assert_int_equal(getsockname(l, (struct sockaddr *)&a, &al), 0);
    *client = socket(AF_INET, SOCK_STREAM, 0);
    assert_int_equal(connect(*client, (struct sockaddr *)&a, sizeof a), 0);
    *server = accept(l, NULL, NULL);
    assert_true(*server >= 0);
    close(l);
}

/* Write n bytes of body (blocking); how many went out before a write failed (n when none did). */
static size_t send_body(int fd, size_t n) {
    static char chunk[64 << 10]; /* [64 KiB] spaces, as a JSON body's padding */
    memset(chunk, ' ', sizeof chunk);
    size_t sent = 0;
    while (sent < n) {
        const size_t want = n - sent < sizeof chunk ? n - sent : sizeof chunk;
        ssize_t k = send(fd, chunk, want, MSG_NOSIGNAL);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) break;
        sent += (size_t)k;
    }
    return sent;
}

/* Read until the end of the stream or an error; the bytes read into buf (NUL-terminated), and whether it ended
   with a clean end of stream. */
static bool read_all(int fd, char *buf, size_t cap, size_t *n) {
    *n = 0;
    for (;;) {
        ssize_t k = recv(fd, buf + *n, cap - 1 - *n, 0);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) {
            buf[*n] = '\0';
            return k == 0;
        }
        *n += (size_t)k;
        if (*n == cap - 1) {
            buf[*n] = '\0';
            return false;
        }
    }
}

/* Wait (up to 60 s, a busy machine's margin) until no socket lingers; whether that happened. */
static bool drained(srv_linger *g) {
    for (int i = 0; i < 6000; i++) {
        if (!srv_linger_count(g)) return true;
        nanosleep(&(struct timespec){0, 10000000}, NULL);
    }
    return false;
}

static void test_drains_then_closes(void **state) {
    (void)state;
    srv_linger *g = srv_linger_start(4, 60000, (size_t)64 << 20);
    assert_non_null(g);
    int c, s;
    tcp_pair(&c, &s);
    assert_int_equal(send(s, answer, sizeof answer - 1, 0), (ssize_t)(sizeof answer - 1));
    srv_linger_add(g, s);
    assert_int_equal(srv_linger_count(g), 1);
    /* 8 MiB: more than the socket buffers hold, so the writes finish only if the other side reads */
    const size_t body = (size_t)8 << 20;
    assert_int_equal(send_body(c, body), body);
    char buf[512];
    size_t n;
    assert_true(read_all(c, buf, sizeof buf, &n));
    assert_string_equal(buf, answer);
    shutdown(c, SHUT_WR); /* the client is done: the lingering side sees the end and closes */
    assert_true(drained(g));
    close(c);
    srv_linger_stop(g);
}

static void test_byte_bound(void **state) {
    (void)state;
    const size_t bound = (size_t)1 << 20;
    srv_linger *g = srv_linger_start(4, 60000, bound);
    assert_non_null(g);
    int c, s;
    tcp_pair(&c, &s);
    srv_linger_add(g, s);
    /* 256 MiB is far past the bound plus anything the buffers hold: the writes fail once it is closed */
    const size_t sent = send_body(c, (size_t)256 << 20);
    assert_true(sent >= bound);
    assert_true(sent < (size_t)256 << 20);
    assert_true(drained(g));
    close(c);
    srv_linger_stop(g);
}

static void test_time_bound(void **state) {
    (void)state;
    srv_linger *g = srv_linger_start(4, 200, (size_t)64 << 20);
    assert_non_null(g);
    int c, s;
    tcp_pair(&c, &s);
    srv_linger_add(g, s);
    assert_true(send_body(c, 1000) == 1000); /* some body, then the client neither sends nor closes */
    assert_true(drained(g));
    char buf[64];
    size_t n;
    read_all(c, buf, sizeof buf, &n); /* closed: the read ends (end of stream or reset) instead of blocking */
    assert_int_equal(n, 0);
    close(c);
    srv_linger_stop(g);
}

static void test_socket_bound_and_stop(void **state) {
    (void)state;
    srv_linger *g = srv_linger_start(1, 60000, (size_t)64 << 20);
    assert_non_null(g);
    int c1, s1, c2, s2;
    tcp_pair(&c1, &s1);
    tcp_pair(&c2, &s2);
    srv_linger_add(g, s1);
    srv_linger_add(g, s2); /* no room: closed at once */
    assert_int_equal(srv_linger_count(g), 1);
    char buf[64];
    size_t n;
    assert_true(read_all(c2, buf, sizeof buf, &n));
    assert_int_equal(n, 0);
    srv_linger_add(g, -1); /* a failed dup: nothing */
    assert_int_equal(srv_linger_count(g), 1);
    srv_linger_stop(g); /* closes the one still lingering */
    assert_true(read_all(c1, buf, sizeof buf, &n));
    assert_int_equal(n, 0);
    close(c1);
    close(c2);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_drains_then_closes),
        cmocka_unit_test(test_byte_bound),
        cmocka_unit_test(test_time_bound),
        cmocka_unit_test(test_socket_bound_and_stop),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
