/*
 * conn.c — links (one per connection), suspension and wake-ups, and the
 * watchdog: the request deadline and disconnects of suspended clients.
 *
 * One lock (srv_conns.mu) guards the list and every link's fields: the
 * critical sections are a few assignments, and one lock leaves a single
 * lock order to keep: a waker may hold a request's lock (request.h) and
 * then take this one; nothing here takes another lock but MHD's own, which
 * MHD never holds while it calls us.
 *
 * A link lives from MHD_CONNECTION_NOTIFY_STARTED to _CLOSED, and MHD
 * closes the socket only after _CLOSED: so the watchdog, holding the lock,
 * may shutdown() or peek at any listed link's socket without racing a
 * reuse of its descriptor.
 */
#include "conn.h"
#include "linger.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <time.h>

/* How often the watchdog looks: a departed client's generation stops within
   this (plus a step), and a deadline is enforced this late at most. */
#define WATCH_MS 100

struct srv_link {
    struct srv_conns *cs; /* its lock guards the fields below */
    struct MHD_Connection *c;
    int fd;
    srv_link *prev, *next;
    double wait_since; /* when the server started waiting for the current request */
    bool reading;      /* the request's headers and body are not all in */
    bool cut;          /* shut down for its deadline */
    bool suspended, watch, woken, gone;
    bool linger;       /* answered before its body was read: drained before the close (linger.h) */
};

struct srv_conns {
    pthread_mutex_t mu;
    pthread_cond_t stop_cv;
    bool stopping;
    pthread_t thread;
    double timeout; /* seconds, 0: none */
    srv_link *head;
    srv_linger *linger;
};

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Whether the peer closed or reset the connection. Called only on a
   suspended connection, whose request was read whole: a readable socket
   that reads 0 bytes means the client went away. */
static bool peer_gone(int fd) {
    char b;
    ssize_t k = recv(fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
    return k == 0 || (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

static void resume_locked(srv_link *l) {
    l->suspended = false;
    MHD_resume_connection(l->c);
}

static void watch_once(srv_conns *cs) {
    const double now = now_s();
    pthread_mutex_lock(&cs->mu);
    for (srv_link *l = cs->head; l; l = l->next) {
        if (l->reading && !l->cut && cs->timeout > 0 && now - l->wait_since > cs->timeout) {
            /* MHD reads end-of-stream at once and closes the connection itself */
            shutdown(l->fd, SHUT_RDWR);
            l->cut = true;
        }
        if (l->suspended && l->watch && peer_gone(l->fd)) {
            l->gone = true;
            resume_locked(l);
        }
    }
    pthread_mutex_unlock(&cs->mu);
}

static void *watchdog(void *arg) {
    srv_conns *cs = arg;
    pthread_mutex_lock(&cs->mu);
    while (!cs->stopping) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        ts.tv_nsec += WATCH_MS * 1000000L;
        ts.tv_sec += ts.tv_nsec / 1000000000L;
        ts.tv_nsec %= 1000000000L;
        pthread_cond_timedwait(&cs->stop_cv, &cs->mu, &ts);
        if (cs->stopping) break;
        pthread_mutex_unlock(&cs->mu);
        watch_once(cs);
        pthread_mutex_lock(&cs->mu);
    }
    pthread_mutex_unlock(&cs->mu);
    return NULL;
}

srv_conns *srv_conns_start(int request_timeout, size_t max_linger) {
    srv_conns *cs = calloc(1, sizeof *cs);
    if (!cs) return NULL;
    if (!(cs->linger = srv_linger_start(max_linger, SRV_LINGER_MS, SRV_LINGER_BYTES))) {
        free(cs);
        return NULL;
    }
    cs->timeout = request_timeout;
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&cs->stop_cv, &ca);
    pthread_condattr_destroy(&ca);
    pthread_mutex_init(&cs->mu, NULL);
    if (pthread_create(&cs->thread, NULL, watchdog, cs) == 0) return cs;
    pthread_cond_destroy(&cs->stop_cv);
    pthread_mutex_destroy(&cs->mu);
    srv_linger_stop(cs->linger);
    free(cs);
    return NULL;
}

void srv_conns_stop(srv_conns *cs) {
    if (!cs) return;
    pthread_mutex_lock(&cs->mu);
    cs->stopping = true;
    pthread_cond_signal(&cs->stop_cv);
    pthread_mutex_unlock(&cs->mu);
    pthread_join(cs->thread, NULL);
    while (cs->head) { /* none once the daemon stopped; be safe */
        srv_link *l = cs->head;
        cs->head = l->next;
        free(l);
    }
    pthread_cond_destroy(&cs->stop_cv);
    pthread_mutex_destroy(&cs->mu);
    srv_linger_stop(cs->linger);
    free(cs);
}

void srv_conns_notify(void *cls, struct MHD_Connection *c, void **socket_ctx,
                      enum MHD_ConnectionNotificationCode code) {
    srv_conns *cs = cls;
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
        srv_link *l = calloc(1, sizeof *l);
        /* without a link the connection is served, only without its
           deadline and disconnect watch */
        if (!l || !ci) {
            free(l);
            *socket_ctx = NULL;
            return;
        }
        l->cs = cs;
        l->c = c;
        l->fd = ci->connect_fd;
        l->reading = true;
        l->wait_since = now_s();
        /* streamed tokens are small writes: send each at once instead of
           letting Nagle's algorithm hold it for the client's delayed ACK */
        int one = 1;
        setsockopt(l->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        pthread_mutex_lock(&cs->mu);
        l->next = cs->head;
        if (cs->head) cs->head->prev = l;
        cs->head = l;
        pthread_mutex_unlock(&cs->mu);
        *socket_ctx = l;
        return;
    }
    srv_link *l = *socket_ctx;
    if (code != MHD_CONNECTION_NOTIFY_CLOSED || !l) return;
    pthread_mutex_lock(&cs->mu);
    if (l->prev) l->prev->next = l->next;
    else cs->head = l->next;
    if (l->next) l->next->prev = l->prev;
    const bool linger = l->linger;
    pthread_mutex_unlock(&cs->mu);
    /* MHD closes its descriptor after this returns; a duplicate keeps the socket open while it drains */
    if (linger) srv_linger_add(cs->linger, fcntl(l->fd, F_DUPFD_CLOEXEC, 0));
    free(l);
    *socket_ctx = NULL;
}

srv_link *srv_link_of(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return ci ? ci->socket_context : NULL;
}

void srv_link_request_read(srv_link *l) {
    if (!l) return;
    pthread_mutex_lock(&l->cs->mu);
    l->reading = false;
    pthread_mutex_unlock(&l->cs->mu);
}

void srv_link_request_done(srv_link *l) {
    if (!l) return;
    pthread_mutex_lock(&l->cs->mu);
    l->reading = true;
    l->wait_since = now_s();
    pthread_mutex_unlock(&l->cs->mu);
}

bool srv_link_suspend(srv_link *l, bool watch) {
    if (!l) return false; /* cannot be woken: the caller polls (out of memory only) */
    pthread_mutex_lock(&l->cs->mu);
    const bool go = !l->woken && !l->gone;
    l->woken = false;
    if (go) {
        MHD_suspend_connection(l->c);
        l->suspended = true;
        l->watch = watch;
    }
    pthread_mutex_unlock(&l->cs->mu);
    return go;
}

void srv_link_wake(srv_link *l) {
    if (!l) return;
    pthread_mutex_lock(&l->cs->mu);
    if (l->suspended) resume_locked(l);
    else l->woken = true; /* the callback has not suspended yet: it will look again instead */
    pthread_mutex_unlock(&l->cs->mu);
}

void srv_link_linger(srv_link *l) {
    if (!l) return;
    pthread_mutex_lock(&l->cs->mu);
    l->linger = true;
    pthread_mutex_unlock(&l->cs->mu);
}

size_t srv_conns_lingering(srv_conns *cs) { return cs ? srv_linger_count(cs->linger) : 0; }

bool srv_link_gone(srv_link *l) {
    if (!l) return false;
    pthread_mutex_lock(&l->cs->mu);
    const bool g = l->gone;
    pthread_mutex_unlock(&l->cs->mu);
    return g;
}
