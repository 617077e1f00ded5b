/* net.h: proto messages over NNG sockets (`proto_`).
 *
 * The only place where NNG's error codes are seen: every function here
 * returns 0 or a negative moor code (-errno for transport failures, the
 * proto_decode codes for malformed messages), converted by proto_nng_err.
 *
 * Sockets are the caller's: these helpers open nothing, listen only in
 * proto_listen_private and dial only in proto_dialer_open.
 * They are safe to call from several threads on one socket as far as NNG
 * is (timeouts are per call, through an aio; no socket option is changed).
 */
#ifndef PROTO_NET_H
#define PROTO_NET_H

#include "proto.h"

#include <nng/nng.h>

/* An NNG return value as a moor code: 0 stays 0; NNG_ETIMEDOUT ->
 * -ETIMEDOUT, NNG_ECLOSED -> -EPIPE, NNG_ECONNREFUSED -> -ECONNREFUSED,
 * NNG_ENOMEM -> -ENOMEM, NNG_EADDRINUSE -> -EADDRINUSE, NNG_ENOENT ->
 * -ENOENT, NNG_EAGAIN -> -EAGAIN, NNG_EINVAL and NNG_EADDRINVAL -> -EINVAL,
 * NNG_ECONNRESET and NNG_ECONNSHUT -> -ECONNRESET, NNG_EPERM -> -EPERM, an
 * NNG system error -> its -errno; anything else -> -EIO. */
int proto_nng_err(int nng_rv);

/* nng_listen on an ipc:// url whose socket file is created 0600: the
 * umask is 0177 around the bind (a chmod by path after the listen left a
 * window with the umask's mode, and followed whatever the path named by
 * then). The process's umask is restored before it returns; another
 * thread creating a file meanwhile gets the stricter mode. Returns 0 or a
 * moor code (proto_nng_err). */
int proto_listen_private(nng_socket s, const char *url);

/* Encodes m and sends it on s. A pipe with id 0 (NNG_PIPE_INITIALIZER)
 * means none; otherwise the message goes to that pipe (PAIR1 poly sockets
 * route by it; a pipe that has gone away drops the message silently, as
 * NNG does). Blocks as the socket's NNG_OPT_SENDTIMEO says. m is borrowed.
 * Returns 0, an encode error (MOOR_ERANGE) or a transport error. */
int proto_send(nng_socket s, const proto_msg *m, nng_pipe pipe);

/* Encodes m into a fresh nng_msg addressed to pipe (id 0: none), for a
 * caller that sends it later (nng_sendmsg takes it on success). Returns 0
 * with *out the caller's, or an encode error / -ENOMEM. */
int proto_msg_make(const proto_msg *m, nng_pipe pipe, nng_msg **out);

/* Receives and decodes one message into out (overwritten, not freed first).
 * timeout_ms < 0 blocks; 0 only takes a message already queued. pipe_out
 * (may be NULL) gets the pipe it came on, on decode errors too. Returns 0,
 * a transport error (-ETIMEDOUT, -EPIPE when s is closed; out zeroed) or
 * proto_decode's result: on MOOR_EFORMAT / MOOR_EVERSION out->h holds
 * the header as read (when there were 24 bytes), so the caller can answer
 * PROTO_ERROR with the same req. The caller frees out with proto_msg_fini
 * in every case (a no-op where nothing was decoded). */
int proto_recv(nng_socket s, proto_msg *out, nng_pipe *pipe_out,
	       int timeout_ms);

/* One request on a REQ socket: sends q, waits for the reply; the whole call
 * takes at most timeout_ms (< 0: no bound). Returns 0 with the reply in
 * reply; if the reply is PROTO_ERROR, its code (negative; MOOR_EFORMAT if
 * the peer sent a code >= 0) with the reply kept for its message; a reply
 * with another req than q's: MOOR_EFORMAT. The caller frees reply with
 * proto_msg_fini in every case. On -ETIMEDOUT the request is abandoned: NNG
 * discards its late reply when the next request is sent. */
int proto_call(nng_socket req_sock, const proto_msg *q, proto_msg *reply,
	       int timeout_ms);

/* Sends PROTO_ERROR{code, printf-formatted message, truncated to
 * PROTO_MAX_STR bytes} with request id req, to pipe (id 0: none). */
int proto_send_error(nng_socket s, nng_pipe pipe, uint64_t req, int code,
		     const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

/* ---- a dialer that comes back (dial.c) -------------------------------
 *
 * NNG 1.5's dialer stops redialing for good after an attempt that ends in
 * NNG_ECLOSED, which a peer killed at the wrong moment causes (dial.c says
 * how); the socket then never gets a pipe again. A proto_dialer dials url
 * on s as nng_dial(NNG_FLAG_NONBLOCK) does, with redials from 50 ms to
 * 500 ms apart, and a thread of its own watches: while s has no pipe and
 * the dialer has made no attempt for 2 s (NNG's counters of it stand
 * still), the dialer is closed and a new one dials. One proto_dialer per
 * socket, and the socket dials nothing else. */
typedef struct proto_dialer proto_dialer;

/* A pipe event of the socket, as nng_pipe_notify gives it. */
typedef void (*proto_pipe_fn)(nng_pipe p, nng_pipe_ev ev, void *arg);

/* Dials url on s and starts the watch. The dialer takes s's pipe
 * notifications (ADD_PRE, ADD_POST, REM_POST): fn (may be NULL) gets every
 * ADD_POST and REM_POST of s with arg, on NNG's threads as nng_pipe_notify
 * would call it; the caller registers none of its own on s. Returns 0 with
 * *out the caller's (proto_dialer_free), or a moor code with *out NULL and
 * nothing left registered on s. */
int proto_dialer_open(proto_dialer **out, nng_socket s, const char *url,
		      proto_pipe_fn fn, void *arg);

/* Gives up the current connection (its pipe closes with the old dialer)
 * and dials again at once: for a peer that stopped answering while its
 * pipe stays open, which no pipe event reveals. Returns 0 or a moor code
 * (the socket is closed: -EPIPE). */
int proto_dialer_redial(proto_dialer *d);

/* Stops the watch and frees d; NULL is a no-op. Call it after nng_close(s)
 * (NNG's pipe callbacks use d until the socket is closed). */
void proto_dialer_free(proto_dialer *d);

#endif
