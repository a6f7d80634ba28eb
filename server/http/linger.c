/*
 * linger.c — draining the sockets of connections answered early (linger.h).
 *
 * One thread waits on an epoll set of the lingering sockets (and an
 * eventfd that says stop); a readable socket is read until it would block,
 * its bytes dropped; end of stream, an error, or a bound met closes it.
 * The deadlines are swept every SWEEP_MS. The slot table is guarded by one
 * lock, taken for a few assignments by srv_linger_add (an MHD thread) and
 * by the thread around each socket's bookkeeping, never around a read.
 */
#include "linger.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define SWEEP_MS 100
#define STOP_KEY UINT32_MAX /* the eventfd's epoll key; sockets' keys are their slots */

typedef struct slot {
    int fd;          /* -1: free */
    double deadline; /* monotonic seconds */
    size_t dropped;  /* bytes read and dropped */
} slot;

struct srv_linger {
    pthread_mutex_t mu;
    pthread_t thread;
    int ep, stop_fd;
    slot *slots; /* [max] */
    size_t max, n;
    double seconds;   /* how long a socket drains at most */
    size_t max_bytes; /* how much it drains at most */
    char sink[64 << 10]; /* [64 KiB] what drain reads and drops; the thread's only */
};

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Close slot i's socket and free the slot; under g->mu. */
static void release_locked(srv_linger *g, size_t i) {
    epoll_ctl(g->ep, EPOLL_CTL_DEL, g->slots[i].fd, NULL);
    close(g->slots[i].fd);
    g->slots[i].fd = -1;
    g->n--;
}

/* Read fd until it would block, dropping the bytes; whether it is done (end of stream, an error, the byte bound). */
static bool drain(srv_linger *g, int fd, size_t *dropped) {
    for (;;) {
        ssize_t k = recv(fd, g->sink, sizeof g->sink, MSG_DONTWAIT);
        if (k > 0) {
            *dropped += (size_t)k;
            if (*dropped >= g->max_bytes) return true;
            continue;
        }
        if (k == 0) return true;
        if (errno == EINTR) continue;
        return errno != EAGAIN && errno != EWOULDBLOCK;
    }
}

static void *run(void *arg) {
    srv_linger *g = arg;
    struct epoll_event ev[64];
    for (;;) {
        const int n = epoll_wait(g->ep, ev, 64, SWEEP_MS);
        for (int e = 0; e < n; e++) {
            const uint32_t key = ev[e].data.u32;
            if (key == STOP_KEY) return NULL;
            pthread_mutex_lock(&g->mu);
            const int fd = g->slots[key].fd;
            size_t dropped = g->slots[key].dropped;
            pthread_mutex_unlock(&g->mu);
            if (fd < 0) continue;
            /* only this thread frees a slot, so fd stays this slot's while it reads */
            const bool done = drain(g, fd, &dropped);
            pthread_mutex_lock(&g->mu);
            g->slots[key].dropped = dropped;
            if (done) release_locked(g, key);
            pthread_mutex_unlock(&g->mu);
        }
        const double now = now_s();
        pthread_mutex_lock(&g->mu);
        for (size_t i = 0; i < g->max && g->n; i++)
            if (g->slots[i].fd >= 0 && now > g->slots[i].deadline) release_locked(g, i);
        pthread_mutex_unlock(&g->mu);
    }
}

srv_linger *srv_linger_start(size_t max_sockets, int ms, size_t max_bytes) {
    srv_linger *g = calloc(1, sizeof *g);
    if (!g) return NULL;
    g->max = max_sockets ? max_sockets : 1;
    g->seconds = 1e-3 * ms;
    g->max_bytes = max_bytes;
    g->ep = epoll_create1(EPOLL_CLOEXEC);
    g->stop_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    g->slots = malloc(g->max * sizeof *g->slots);
    struct epoll_event se = {.events = EPOLLIN, .data.u32 = STOP_KEY};
    if (g->ep < 0 || g->stop_fd < 0 || !g->slots || epoll_ctl(g->ep, EPOLL_CTL_ADD, g->stop_fd, &se)) goto fail;
    for (size_t i = 0; i < g->max; i++) g->slots[i].fd = -1;
    pthread_mutex_init(&g->mu, NULL);
    if (pthread_create(&g->thread, NULL, run, g) == 0) return g;
    pthread_mutex_destroy(&g->mu);
fail:
    if (g->ep >= 0) close(g->ep);
    if (g->stop_fd >= 0) close(g->stop_fd);
    free(g->slots);
    free(g);
    return NULL;
}

void srv_linger_add(srv_linger *g, int fd) {
    if (fd < 0) return;
    /* the answer is out (or going out): nothing more is sent on this socket */
    shutdown(fd, SHUT_WR);
    if (!g) {
        close(fd);
        return;
    }
    pthread_mutex_lock(&g->mu);
    size_t i = 0;
    if (g->n < g->max)
        while (g->slots[i].fd >= 0) i++;
    if (g->n < g->max) {
        g->slots[i] = (slot){.fd = fd, .deadline = now_s() + g->seconds, .dropped = 0};
        /* edge-triggered would miss nothing either, but level keeps a partly drained socket in the next wait */
        struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP, .data.u32 = (uint32_t)i};
        if (epoll_ctl(g->ep, EPOLL_CTL_ADD, fd, &ev) == 0) {
            g->n++;
            fd = -1;
        } else {
            g->slots[i].fd = -1;
        }
    }
    pthread_mutex_unlock(&g->mu);
    if (fd >= 0) close(fd); /* full, or epoll refused it: the reset it would have had anyway */
}

size_t srv_linger_count(srv_linger *g) {
    if (!g) return 0;
    pthread_mutex_lock(&g->mu);
    const size_t n = g->n;
    pthread_mutex_unlock(&g->mu);
    return n;
}

void srv_linger_stop(srv_linger *g) {
    if (!g) return;
    const uint64_t one = 1;
    if (write(g->stop_fd, &one, sizeof one) != (ssize_t)sizeof one) { /* an eventfd write fails only on overflow */
    }
    pthread_join(g->thread, NULL);
    for (size_t i = 0; i < g->max; i++)
        if (g->slots[i].fd >= 0) release_locked(g, i);
    pthread_mutex_destroy(&g->mu);
    close(g->ep);
    close(g->stop_fd);
    free(g->slots);
    free(g);
}
