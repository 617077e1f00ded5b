/* net.c: proto messages over NNG; NNG error codes end here (net.h).
 *
 * Receives go through an nng_aio so that each call carries its own timeout
 * instead of changing the socket's NNG_OPT_RECVTIMEO under other threads. */
#include "net.h"

#include "moor.h"

#include <stdarg.h>
#include <sys/stat.h>
#include <stdio.h>
#include <stdlib.h>

int proto_nng_err(int rv)
{
	if (rv == 0)
		return 0;
	if (rv & NNG_ESYSERR) {
		int e = rv & ~NNG_ESYSERR;
		return e > 0 ? -e : -EIO;
	}
	switch (rv) {
	case NNG_ETIMEDOUT:
		return -ETIMEDOUT;
	case NNG_ECLOSED:
		return -EPIPE;
	case NNG_ECONNREFUSED:
		return -ECONNREFUSED;
	case NNG_ENOMEM:
		return -ENOMEM;
	case NNG_EADDRINUSE:
		return -EADDRINUSE;
	case NNG_ENOENT:
		return -ENOENT;
	case NNG_EAGAIN:
		return -EAGAIN;
	case NNG_EINVAL:
	case NNG_EADDRINVAL:
		return -EINVAL;
	case NNG_ECONNRESET:
	case NNG_ECONNSHUT:
		return -ECONNRESET;
	case NNG_EPERM:
		return -EPERM;
	default:
		return -EIO;
	}
}

static nng_duration duration(int timeout_ms)
{
	return timeout_ms < 0 ? NNG_DURATION_INFINITE : timeout_ms;
}

int proto_msg_make(const proto_msg *m, nng_pipe pipe, nng_msg **out)
{
	moor_buf b = {0};
	int rv = proto_encode(&b, m);
	if (rv) {
		moor_buf_fini(&b);
		return rv;
	}
	nng_msg *msg;
	rv = proto_nng_err(nng_msg_alloc(&msg, b.len));
	if (rv) {
		moor_buf_fini(&b);
		return rv;
	}
	memcpy(nng_msg_body(msg), b.p, b.len);
	moor_buf_fini(&b);
	if (nng_pipe_id(pipe) > 0)
		nng_msg_set_pipe(msg, pipe);
	*out = msg;
	return 0;
}

/* Sends m within timeout (NNG_DURATION_DEFAULT: the socket's SENDTIMEO). */
static int send_within(nng_socket s, const proto_msg *m, nng_pipe pipe,
		       nng_duration timeout)
{
	nng_msg *msg;
	int rv = proto_msg_make(m, pipe, &msg);
	if (rv)
		return rv;
	nng_aio *aio;
	rv = proto_nng_err(nng_aio_alloc(&aio, NULL, NULL));
	if (rv) {
		nng_msg_free(msg);
		return rv;
	}
	nng_aio_set_timeout(aio, timeout);
	nng_aio_set_msg(aio, msg);
	nng_send_aio(s, aio);
	nng_aio_wait(aio);
	rv = proto_nng_err(nng_aio_result(aio));
	if (rv) /* on failure the message is still ours */
		nng_msg_free(nng_aio_get_msg(aio));
	nng_aio_free(aio);
	return rv;
}

int proto_send(nng_socket s, const proto_msg *m, nng_pipe pipe)
{
	return send_within(s, m, pipe, NNG_DURATION_DEFAULT);
}

int proto_recv(nng_socket s, proto_msg *out, nng_pipe *pipe_out, int timeout_ms)
{
	memset(out, 0, sizeof *out);
	if (pipe_out)
		*pipe_out = (nng_pipe)NNG_PIPE_INITIALIZER;
	nng_aio *aio;
	int rv = proto_nng_err(nng_aio_alloc(&aio, NULL, NULL));
	if (rv)
		return rv;
	nng_aio_set_timeout(aio, duration(timeout_ms));
	nng_recv_aio(s, aio);
	nng_aio_wait(aio);
	rv = proto_nng_err(nng_aio_result(aio));
	nng_msg *msg = rv ? NULL : nng_aio_get_msg(aio);
	nng_aio_free(aio);
	if (rv)
		return rv;
	if (pipe_out)
		*pipe_out = nng_msg_get_pipe(msg);
	rv = proto_decode(nng_msg_body(msg), nng_msg_len(msg), out);
	nng_msg_free(msg);
	return rv;
}

int proto_call(nng_socket req_sock, const proto_msg *q, proto_msg *reply,
	       int timeout_ms)
{
	memset(reply, 0, sizeof *reply);
	double deadline = moor_now() + timeout_ms / 1000.0;
	int rv = send_within(req_sock, q, (nng_pipe)NNG_PIPE_INITIALIZER,
			     duration(timeout_ms));
	if (rv)
		return rv;
	int left = -1;
	if (timeout_ms >= 0) {
		double s = deadline - moor_now();
		left = s > 0 ? (int)(s * 1000.0 + 0.5) : 0;
	}
	rv = proto_recv(req_sock, reply, NULL, left);
	if (rv)
		return rv;
	if (reply->h.type == PROTO_ERROR)
		return reply->u.error.code < 0 ? reply->u.error.code
					       : MOOR_EFORMAT;
	if (reply->h.req != q->h.req)
		return MOOR_EFORMAT;
	return 0;
}

int proto_send_error(nng_socket s, nng_pipe pipe, uint64_t req, int code,
		     const char *fmt, ...)
{
	char *text = malloc(PROTO_MAX_STR + 1);
	if (!text)
		return -ENOMEM;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(text, PROTO_MAX_STR + 1, fmt, ap);
	va_end(ap);
	proto_msg m = {0};
	m.h.type = PROTO_ERROR;
	m.h.req = req;
	m.u.error.code = code;
	m.u.error.msg = text;
	int rv = proto_send(s, &m, pipe);
	free(text);
	return rv;
}

int proto_listen_private(nng_socket s, const char *url)
{
	mode_t old = umask(0177);
	int rv = nng_listen(s, url, NULL, 0);
	umask(old);
	return proto_nng_err(rv);
}
