/* clients.c: engined.sock (serve_int.h). The receiver thread reads it:
 * GENERATE is checked and queued (a full queue is answered busy at once),
 * CANCEL flags the running request or drops a waiting one, malformed
 * messages are answered PROTO_ERROR; the worker never reads the socket. A
 * client pipe that goes away cancels its requests. */
#include <errno.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <nng/nng.h>
#include <nng/protocol/pair1/pair.h>

#include "moor.h"
#include "net.h"
#include "outbox.h"
#include "serve_int.h"
#include "util.h"

static int is_transport(int code)
{
	return code < 0 && code > MOOR_EBASE;
}

void srv_send_done(srv *s, nng_pipe p, uint64_t req, uint32_t finish,
		      int code, const char *msg)
{
	proto_msg d = {0};
	d.h.type = PROTO_DONE;
	d.h.req = req;
	d.u.done.finish = finish;
	d.u.done.code = code;
	d.u.done.msg = (char *)(msg ? msg : "");
	eng_out_send(s->out, p, &d);
}

/* PROTO_ERROR{code, text} with request id req, to pipe p, through the
 * outbox. */
static void send_error(srv *s, nng_pipe p, uint64_t req, int code,
		       const char *fmt, ...) __attribute__((format(printf, 5, 6)));
static void send_error(srv *s, nng_pipe p, uint64_t req, int code,
		       const char *fmt, ...)
{
	char text[MOOR_ERRLEN];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(text, sizeof text, fmt, ap);
	va_end(ap);
	proto_msg m = {0};
	m.h.type = PROTO_ERROR;
	m.h.req = req;
	m.u.error.code = code;
	m.u.error.msg = text;
	eng_out_send(s->out, p, &m);
}

void srv_job_free(job *j)
{
	if (!j)
		return;
	proto_msg_fini(&j->m);
	free(j);
}

/* Checks a GENERATE before it queues: what can be refused at once is. */
static int gen_check(srv *s, const proto_generate *g, char *msg)
{
	if (g->n_ids == 0) {
		moor_errf(msg, "empty prompt");
		return MOOR_ERANGE;
	}
	if ((int64_t)g->n_ids > s->lay->window) {
		moor_errf(msg,
			  "prompt of %u tokens is longer than the window "
			  "of %lld tokens",
			  g->n_ids, (long long)s->lay->window);
		return MOOR_ERANGE;
	}
	for (uint32_t i = 0; i < g->n_ids; i++)
		if (g->ids[i] < 0 || g->ids[i] >= s->vocab) {
			moor_errf(msg,
				  "token id %d at position %u is outside "
				  "the vocabulary (%d)",
				  g->ids[i], i, s->vocab);
			return MOOR_ERANGE;
		}
	if (!(g->temperature >= 0) || !(g->top_p >= 0) || g->top_p > 1 ||
	    !(g->min_p >= 0) || g->min_p > 1 || g->top_k < 0) {
		moor_errf(msg, "sampling parameters out of range");
		return MOOR_ERANGE;
	}
	return 0;
}

static void on_generate(srv *s, nng_pipe p, proto_msg *m)
{
	char msg[MOOR_ERRLEN];
	int rc = gen_check(s, &m->u.gen, msg);
	if (rc) {
		srv_send_done(s, p, m->h.req, PROTO_FINISH_ERROR, rc, msg);
		proto_msg_fini(m);
		return;
	}
	job *j = calloc(1, sizeof *j);
	if (!j) {
		srv_send_done(s, p, m->h.req, PROTO_FINISH_ERROR, -ENOMEM,
			  "out of memory");
		proto_msg_fini(m);
		return;
	}
	j->pipe = p;
	j->m = *m; /* takes the arrays */
	memset(m, 0, sizeof *m);
	pthread_mutex_lock(&s->mu);
	/* queue_max wait behind the running one (or the next to run) */
	int busy = s->stop || s->qn + (s->cur != NULL) > s->cfg->queue_max;
	int n = s->qn, stop = s->stop;
	if (!busy) {
		s->queue[s->qn++] = j;
		pthread_cond_broadcast(&s->cv);
		/* a scratch run (the compaction preparer) gives way at once:
		 * it stops at its next prefill chunk or decode step */
		if (s->cur && (s->cur->m.u.gen.flags & PROTO_PLAN_SCRATCH) &&
		    !(j->m.u.gen.flags & PROTO_PLAN_SCRATCH))
			atomic_store(&s->cancel, 1);
	}
	pthread_mutex_unlock(&s->mu);
	if (busy) {
		if (stop)
			srv_send_done(s, p, j->m.h.req, PROTO_FINISH_ERROR,
				  -ESHUTDOWN, "engined is shutting down");
		else {
			snprintf(msg, sizeof msg,
				 "busy: %d requests are waiting already", n);
			moor_info("req %llu: refused: %s",
				  (unsigned long long)j->m.h.req, msg);
			srv_send_done(s, p, j->m.h.req, PROTO_FINISH_ERROR, -EBUSY,
				  msg);
		}
		srv_job_free(j);
	}
}

static void on_cancel(srv *s, nng_pipe p, const proto_msg *m)
{
	uint64_t target = m->u.cancel.target;
	job *gone = NULL;
	pthread_mutex_lock(&s->mu);
	if (s->cur && nng_pipe_id(s->cur->pipe) == nng_pipe_id(p) &&
	    s->cur->m.h.req == target) {
		atomic_store(&s->cancel, 1);
	} else {
		for (int i = 0; i < s->qn; i++) {
			job *j = s->queue[i];
			if (nng_pipe_id(j->pipe) == nng_pipe_id(p) &&
			    j->m.h.req == target) {
				gone = j;
				memmove(&s->queue[i], &s->queue[i + 1],
					(size_t)(s->qn - i - 1) *
					    sizeof *s->queue);
				s->qn--;
				break;
			}
		}
	}
	pthread_mutex_unlock(&s->mu);
	/* A CANCEL that finds nothing raced with the DONE: nothing to do. */
	if (gone) {
		moor_info("req %llu: cancelled while it waited",
			  (unsigned long long)target);
		srv_send_done(s, p, target, PROTO_FINISH_CANCEL, 0, "");
		srv_job_free(gone);
	} else {
		moor_debug("CANCEL of req %llu: not waiting, not running",
			   (unsigned long long)target);
	}
}

/* A client pipe went away: its running request stops at the next step,
 * its queued ones are dropped. */
static void client_pipe_cb(nng_pipe p, nng_pipe_ev ev, void *arg)
{
	srv *s = arg;
	if (ev == NNG_PIPE_EV_ADD_POST) {
		eng_out_pipe_add(s->out, p);
		return;
	}
	if (ev != NNG_PIPE_EV_REM_POST)
		return;
	eng_out_pipe_rem(s->out, p);
	job *drop[64];
	int nd = 0;
	pthread_mutex_lock(&s->mu);
	if (s->cur && nng_pipe_id(s->cur->pipe) == nng_pipe_id(p))
		atomic_store(&s->cancel, 2);
	for (int i = 0; i < s->qn;) {
		if (nng_pipe_id(s->queue[i]->pipe) == nng_pipe_id(p) &&
		    nd < 64) {
			drop[nd++] = s->queue[i];
			memmove(&s->queue[i], &s->queue[i + 1],
				(size_t)(s->qn - i - 1) * sizeof *s->queue);
			s->qn--;
		} else {
			i++;
		}
	}
	pthread_mutex_unlock(&s->mu);
	for (int i = 0; i < nd; i++)
		srv_job_free(drop[i]);
}

void *srv_receiver_main(void *arg)
{
	srv *s = arg;
	for (;;) {
		proto_msg m;
		nng_pipe p;
		int rc = proto_recv(s->cs, &m, &p, -1);
		if (rc == -EPIPE || rc == -EBADF) {
			proto_msg_fini(&m);
			break; /* the socket closed: shutting down */
		}
		if (is_transport(rc)) {
			proto_msg_fini(&m);
			continue;
		}
		if (rc == MOOR_EVERSION) {
			send_error(s, p, m.h.req, MOOR_EVERSION,
				   "protocol version %u; engined speaks "
				   "version %u",
				   m.h.version, PROTO_VERSION);
		} else if (rc) {
			send_error(s, p, m.h.req, rc, "malformed %s message: %s",
				   proto_type_name(m.h.type), moor_strerror(rc));
		} else if (m.h.type == PROTO_GENERATE) {
			on_generate(s, p, &m);
		} else if (m.h.type == PROTO_CANCEL) {
			on_cancel(s, p, &m);
		} else if (m.h.type == PROTO_CREDIT) {
			eng_out_credit(s->out, p, m.u.credit.n);
		} else {
			send_error(s, p, m.h.req, MOOR_EUNSUP,
				   "%s (type %u) is not served on "
				   "engined.sock (GENERATE, CANCEL, CREDIT)",
				   proto_type_name(m.h.type), m.h.type);
		}
		proto_msg_fini(&m);
	}
	return NULL;
}

int srv_clients_open(srv *s)
{
	int lk = moor_run_lock(s->run_dir, "engined");
	if (lk < 0) {
		if (lk == -EADDRINUSE)
			moor_err("another engined serves %s", s->eng_url);
		else
			moor_err("%s/engined.lock: %s", s->run_dir,
				 moor_strerror(lk));
		return lk;
	}
	if (unlink(s->eng_path) == 0)
		moor_info("replaced a stale %s", s->eng_path);
	int rv = nng_pair1_open_poly(&s->cs);
	if (rv)
		return proto_nng_err(rv);
	s->cs_open = 1;
	if ((rv = eng_out_new(s->cs, &s->out)))
		return rv;
	/* A client that stops reading must not stall the engine forever. */
	nng_socket_set_ms(s->cs, NNG_OPT_SENDTIMEO, 2000);
	nng_socket_set_size(s->cs, NNG_OPT_RECVMAXSZ,
			    2 * (PROTO_HDR_SIZE + (size_t)PROTO_MAX_PAYLOAD));
	nng_pipe_notify(s->cs, NNG_PIPE_EV_ADD_POST, client_pipe_cb, s);
	nng_pipe_notify(s->cs, NNG_PIPE_EV_REM_POST, client_pipe_cb, s);
	/* the socket file is 0600 from its creation (no chmod after) */
	rv = proto_listen_private(s->cs, s->eng_url);
	if (rv) {
		moor_err("listen %s: %s", s->eng_url, moor_strerror(rv));
		return rv;
	}
	return 0;
}
