/*
 * linger.h — the graceful close of a connection answered before its body
 * was read (401, 413, 415, broken framing).
 *
 * MHD stops reading such a connection, sends the answer, shuts down its
 * sending side and closes the socket. A close with unread bytes in the
 * receive queue makes the kernel send a reset, and a reset that reaches a
 * client still uploading destroys the answer it has not read yet. So the
 * socket is kept open past MHD's close (conn.c hands over a duplicate of
 * its descriptor when MHD reports the connection closed) and a thread
 * reads and drops what the client still sends, until the client closes
 * its side, a number of bytes were dropped or a time passed, whichever is
 * first (the server's bounds: SRV_LINGER_BYTES, SRV_LINGER_MS); then the
 * socket is closed. A bounded number of sockets linger at
 * once; past it a socket is closed at once (the old reset).
 */
#ifndef TKV_SRV_LINGER_H
#define TKV_SRV_LINGER_H

#include <stddef.h>

/* How long and how much one socket is drained at most. */
#define SRV_LINGER_MS 5000
#define SRV_LINGER_BYTES ((size_t)16 << 20)

typedef struct srv_linger srv_linger;

/* Start the draining thread; at most max_sockets linger at once, each for
   at most ms milliseconds and max_bytes bytes. NULL when out of memory or
   the thread cannot start. */
srv_linger *srv_linger_start(size_t max_sockets, int ms, size_t max_bytes);
/* Hand over fd (whose sending side is shut down or about to be): it is
   drained and closed. Takes fd in every case (closes it at once when full). */
void srv_linger_add(srv_linger *g, int fd);
/* Close every lingering socket, stop the thread and free. */
void srv_linger_stop(srv_linger *g);
/* How many sockets linger now (tests, /metrics). */
size_t srv_linger_count(srv_linger *g);

#endif
