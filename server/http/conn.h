/*
 * conn.h — the server's connections under libmicrohttpd's event loop: what
 * MHD does not do for us.
 *
 * MHD runs a few polling threads (poll: server.c says why not epoll); a handler or content reader must
 * never block one. A request that has to wait (for the scheduler, for the
 * next streamed text) suspends its connection and whoever makes progress
 * wakes it (srv_link_wake: the scheduler's thread, a job's completion).
 *
 * A watchdog thread does the two things MHD cannot:
 *  - the request deadline: MHD's own timeout counts silence, so a client
 *    that sends a byte every few seconds would hold its connection
 *    forever; a connection that has not delivered its request's headers
 *    and body within --request-timeout of when the server started waiting
 *    for it (its accept, or the end of the previous response) is shut
 *    down;
 *  - disconnects while suspended: MHD does not watch a suspended socket,
 *    so the watchdog looks (every 100 ms) whether the client of a
 *    suspended, watched connection went away, and resumes it with
 *    srv_link_gone() true, so that its request is cancelled.
 *
 * A connection answered before its body was read closes gracefully: its
 * socket outlives MHD's close while what the client still sends is read
 * and dropped, within bounds (linger.h), so that the client reads the
 * answer instead of a reset.
 */
#ifndef TKV_SRV_CONN_H
#define TKV_SRV_CONN_H

#include <microhttpd.h>
#include <stdbool.h>
#include <stddef.h>

typedef struct srv_link srv_link;   /* one TCP connection */
typedef struct srv_conns srv_conns; /* every connection, and the watchdog */

/* Start the watchdog and the draining of early-answered sockets;
   request_timeout in seconds (0: no deadline); at most max_linger sockets
   drain at once. NULL when out of memory or a thread cannot start. */
srv_conns *srv_conns_start(int request_timeout, size_t max_linger);
/* How many closed connections' sockets are draining now. */
size_t srv_conns_lingering(srv_conns *cs);
/* Stop the watchdog and free; after MHD_stop_daemon (no connection left). */
void srv_conns_stop(srv_conns *cs);

/* MHD_NotifyConnectionCallback (cls: srv_conns): a link per connection. */
void srv_conns_notify(void *cls, struct MHD_Connection *c, void **socket_ctx,
                      enum MHD_ConnectionNotificationCode code);

/* The link of a connection (NULL only if its start ran out of memory). */
srv_link *srv_link_of(struct MHD_Connection *c);

/* The request's headers and body are in: its deadline no longer applies. */
void srv_link_request_read(srv_link *l);
/* The request is over: the deadline of the next one starts now. */
void srv_link_request_done(srv_link *l);

/*
 * From the access handler or a content reader only (MHD's rule): suspend
 * the connection, unless srv_link_wake was called since the last
 * srv_link_suspend (then returns false: look again at what you wait for).
 * true: suspended; return from the callback (MHD_YES, or 0 bytes from a
 * reader); MHD calls it again once woken. watch: the watchdog resumes it
 * when the client goes away.
 */
bool srv_link_suspend(srv_link *l, bool watch);
/* From any thread: there is something new for the connection. */
void srv_link_wake(srv_link *l);
/* The answer is queued before the body was read (MHD then stops reading):
   drain the socket before it closes. */
void srv_link_linger(srv_link *l);
/* The watchdog found the client gone while the connection was suspended. */
bool srv_link_gone(srv_link *l);

#endif
