/* link.c: engined's REQ socket to cached (serve_int.h): HELLO and its
 * answer, one round trip at a time, ABORT. A request is never resent
 * behind our back (a PLAN served twice would restore twice); NNG's pipe
 * events count the connections, so a new pipe (cached restarted) makes the
 * next request HELLO again first.
 *
 * A lost link. The socket is dialled through a proto_dialer (net.h), which
 * redials while cached is down or restarting and replaces a dialer that
 * NNG 1.5 gave up on (a cached killed at the wrong moment left engined
 * with no pipe for good: dial.c says how). With the resend time infinite
 * a request in flight on a pipe that closes fails with ECONNRESET. So a
 * cached that dies with its end closed is noticed by NNG and the new one
 * gets a new pipe (and a HELLO). A peer that stops answering while the
 * pipe stays open is not: every call goes to that pipe and times out
 * (--call-timeout each), no new pipe is counted, no HELLO goes out, for as
 * long as the pipe lives. Hence two rules here: a call that fails in
 * transport (timed out, reset, closed) marks the link unattached, so the
 * next request HELLOs first whatever the pipe count says; and a call that
 * timed out gives up the connection (proto_dialer_redial), so the next
 * call goes over a fresh connection to whatever listens at the path now.
 * A late answer of the abandoned call is lost with the old pipe; cached
 * sees that engine's connection end, as on any restart of engined. */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <nng/nng.h>
#include <nng/protocol/reqrep0/req.h>

#include "moor.h"
#include "net.h"
#include "serve_int.h"

/* A new pipe also wakes the worker: idle, it HELLOs the new cached at
 * once (serve.c), so a peek or a prewarm finds this engine attached
 * before any generation comes. */
static void cached_pipe_cb(nng_pipe p, nng_pipe_ev ev, void *arg)
{
	srv *s = arg;
	(void)p;
	if (ev != NNG_PIPE_EV_ADD_POST) /* the dialer gives REM_POST too */
		return;
	atomic_fetch_add(&s->pipes_added, 1);
	pthread_mutex_lock(&s->mu);
	pthread_cond_broadcast(&s->cv);
	pthread_mutex_unlock(&s->mu);
}

int srv_cached_open(srv *s)
{
	int rv = nng_req0_open(&s->cq);
	if (rv)
		return proto_nng_err(rv);
	/* A request is never resent behind our back: a PLAN cached served
	 * twice would restore twice. Lost requests time out instead. */
	nng_socket_set_ms(s->cq, NNG_OPT_REQ_RESENDTIME, NNG_DURATION_INFINITE);
	nng_socket_set_size(s->cq, NNG_OPT_RECVMAXSZ,
			    2 * (PROTO_HDR_SIZE + (size_t)PROTO_MAX_PAYLOAD));
	return proto_dialer_open(&s->cq_dial, s->cq, s->cached_url,
				 cached_pipe_cb, s);
}

/* A transport failure of a call: no answer in time, the pipe reset or
 * closed. Any answer from cached (PROTO_ERROR included) is not one. */
static int link_lost(int rc, const proto_msg *rep)
{
	if (rep->h.type == PROTO_ERROR)
		return 0;
	return rc == -ETIMEDOUT || rc == -ECONNRESET || rc == -EPIPE ||
	       rc == -EIO;
}

/* Gives up the pipe a call timed out on: the dialer closes (and its pipe
 * with it, so NNG does not keep feeding it requests) and a new one dials
 * without blocking. */
static void redial(srv *s)
{
	int rv = proto_dialer_redial(s->cq_dial);
	if (rv)
		moor_warn("dial %s again: %s", s->cached_url,
			  moor_strerror(rv));
	else
		moor_info("gave up the connection to cached after a timeout; "
			  "dialling %s again",
			  s->cached_url);
}

/* One round trip to cached; on an error reply, msg gets its text. */
int srv_cached_call(srv *s, proto_msg *q, proto_msg *rep, char *msg)
{
	q->h.req = ++s->next_id;
	int rc = proto_call(s->cq, q, rep, s->cfg->call_timeout_s * 1000);
	if (rc && link_lost(rc, rep)) {
		s->attached = 0; /* the next request HELLOs first */
		if (rc == -ETIMEDOUT)
			redial(s);
	}
	if (rc && msg) {
		if (rep->h.type == PROTO_ERROR && rep->u.error.msg)
			moor_errf(msg, "cached: %s", rep->u.error.msg);
		else if (rc == -ETIMEDOUT)
			moor_errf(msg, "cached did not answer %s within %d s",
				  proto_type_name(q->h.type),
				  s->cfg->call_timeout_s);
		else
			moor_errf(msg, "cached: %s: %s",
				  proto_type_name(q->h.type),
				  moor_strerror(rc));
	}
	return rc;
}

int srv_cached_hello(srv *s, char *err)
{
	const eng_layout *y = s->lay;
	proto_msg q = {0}, rep = {0};
	q.h.type = PROTO_HELLO;
	proto_hello *h = &q.u.hello;
	memcpy(h->fingerprint, s->fp, 32);
	h->pid = (uint32_t)getpid();
	h->grid = (uint32_t)y->grid;
	h->window = (uint64_t)y->window;
	/* The workspace lives in engined's own memory, not in an arena, but
	 * it is memory of the same box (the CPU backend) or the same device:
	 * the memory policy counts it under mem_peak beside the caches. */
	h->workspace_bytes = eng_model_workspace_bytes(s->model);
	h->n_sections = (uint32_t)y->n_sections;
	h->n_views = (uint32_t)y->n_views;
	h->sec = calloc((size_t)y->n_sections + 1, sizeof *h->sec);
	h->view = calloc((size_t)y->n_views + 1, sizeof *h->view);
	if (!h->sec || !h->view) {
		free(h->sec);
		free(h->view);
		return -ENOMEM;
	}
	for (int i = 0; i < y->n_sections; i++) {
		const eng_section *e = &y->sec[i];
		proto_section *p = &h->sec[i];
		snprintf(p->name, sizeof p->name, "%s", e->name);
		p->layer = e->layer;
		p->dtype = (uint32_t)e->dtype;
		p->ndim = (uint32_t)e->ndim;
		for (int d = 0; d < e->ndim && d < 4; d++)
			p->dims[d] = e->dims[d];
		p->bytes = e->bytes;
	}
	for (int i = 0; i < y->n_views; i++) {
		const eng_view *e = &y->view[i];
		proto_view *p = &h->view[i];
		snprintf(p->name, sizeof p->name, "%s", e->name);
		p->layer = e->layer;
		p->dtype = (uint32_t)e->dtype;
		p->ndim = (uint32_t)e->ndim;
		for (int d = 0; d < e->ndim && d < 4; d++)
			p->dims[d] = e->dims[d];
		p->token_axis = (uint32_t)e->token_axis;
		p->row_bytes = e->row_bytes;
	}
	unsigned gen = atomic_load(&s->pipes_added);
	int rc = srv_cached_call(s, &q, &rep, err);
	free(h->sec);
	free(h->view);
	if (rc == 0 && rep.h.type != PROTO_HELLO_OK) {
		moor_errf(err, "cached answered HELLO with %s",
			  proto_type_name(rep.h.type));
		rc = MOOR_EFORMAT;
	}
	if (rc == 0)
		rc = srv_arenas_attach(s, &rep.u.hello_ok, err);
	if (rc == 0) {
		s->hello_gen = gen;
		moor_info("attached to cached: device arena %s (%.1f MiB), "
			  "host arena %s (%.1f MiB); %s",
			  rep.u.hello_ok.dev_arena,
			  (double)rep.u.hello_ok.dev_size / (1 << 20),
			  rep.u.hello_ok.host_arena,
			  (double)rep.u.hello_ok.host_size / (1 << 20),
			  rep.u.hello_ok.adopted
			      ? "it handed back the state of an earlier "
				"engined"
			      : "fresh sequence buffers");
	}
	proto_msg_fini(&rep);
	return rc;
}

/* At start: waits for cached's socket (bounded by connect_timeout_s), then
 * HELLOs. */
int srv_cached_attach_first(srv *s)
{
	double deadline = moor_now() + s->cfg->connect_timeout_s;
	double next_log = moor_now() + 0.5; /* quiet while the dial lands */
	char err[MOOR_ERRLEN];
	for (;;) {
		if (srv_stopping(s))
			return -EINTR;
		if (atomic_load(&s->pipes_added) > 0) {
			err[0] = 0;
			int rc = srv_cached_hello(s, err);
			if (rc == 0)
				return 0;
			if (rc != -ETIMEDOUT && rc != -ECONNRESET &&
			    rc != -EPIPE) {
				moor_err("HELLO refused: %s", err);
				return rc;
			}
			moor_warn("HELLO: %s; retrying", err);
		}
		double now = moor_now();
		if (now >= deadline) {
			moor_err("cached is not up at %s after %d s "
				 "(--connect-timeout); start cached first",
				 s->cached_url, s->cfg->connect_timeout_s);
			return -ETIMEDOUT;
		}
		if (now >= next_log) {
			moor_info("waiting for cached at %s (retrying for up "
				  "to %.0f s more)",
				  s->cached_url, deadline - now);
			next_log = now + 5;
		}
		struct timespec ts = {0, 50 * 1000 * 1000};
		nanosleep(&ts, NULL);
	}
}

/* Sends ABORT for the open plan; failures are logged only (the caller
 * reports the first error). */
void srv_cached_abort(srv *s, int n_filled, int64_t valid)
{
	proto_msg q = {0}, rep = {0};
	char msg[MOOR_ERRLEN];
	q.h.type = PROTO_ABORT;
	q.u.abort_.n_filled = (uint32_t)n_filled;
	q.u.abort_.valid = valid > 0 ? (uint64_t)valid : 0;
	if (srv_cached_call(s, &q, &rep, msg))
		moor_warn("ABORT: %s", msg);
	proto_msg_fini(&rep);
}
