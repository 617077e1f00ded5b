/* link.c: gatewayd's NNG links. engined: one PAIR1 socket dialed to
 * RUN/engined.sock (NNG redials while engined is down or restarting), a
 * receiver thread that decodes every message and queues it for the loop,
 * and pipe notifications that say whether engined is there. cached: one REQ
 * socket dialed to RUN/admin.sock, used by one round trip at a time from
 * the thread pool.
 *
 * Neither socket is ever probed by a connect of its own (nng#1518): the
 * dialers connect once per pipe, and "up" is what the pipe events say.
 * Each is dialled through a proto_dialer (net.h), which replaces a dialer
 * NNG 1.5 gave up on: a peer killed at the wrong moment left the gateway
 * with no pipe to it for good (/health said cached or engined down after
 * it was back; dial.c says how). */
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gw.h"
#include "net.h"

#include <nng/protocol/pair1/pair.h>
#include <nng/protocol/reqrep0/req.h>

static void ev_push(gw_srv *s, gw_ev *e)
{
	gw_link *l = &s->link;
	e->next = NULL;
	pthread_mutex_lock(&l->mu);
	if (l->tail)
		l->tail->next = e;
	else
		l->head = e;
	l->tail = e;
	pthread_mutex_unlock(&l->mu);
	uv_async_send(&l->async);
}

static void pipe_cb(nng_pipe p, nng_pipe_ev ev, void *arg)
{
	gw_srv *s = arg;
	gw_ev *e = calloc(1, sizeof *e);
	uint32_t id = nng_pipe_id(p);
	if (ev == NNG_PIPE_EV_ADD_POST) {
		atomic_store(&s->link.pipe, id);
		if (e)
			e->kind = GW_EV_PIPE_ADD;
	} else {
		uint32_t cur = id;
		/* only the live pipe going away takes engined down */
		atomic_compare_exchange_strong(&s->link.pipe, &cur, 0);
		if (e)
			e->kind = GW_EV_PIPE_REM;
	}
	if (e) {
		e->pipe = id;
		ev_push(s, e);
	}
}

static void adm_pipe_cb(nng_pipe p, nng_pipe_ev ev, void *arg)
{
	gw_srv *s = arg;
	atomic_fetch_add(&s->link.adm_pipes,
			 ev == NNG_PIPE_EV_ADD_POST ? 1 : -1);
}

/* Tells engined that one more message came (proto.h: PROTO_CREDIT), so
 * it may send the next; it sends a pipe no more than it was credited. */
static void credit(gw_srv *s)
{
	proto_msg c = {0};
	c.h.type = PROTO_CREDIT;
	c.u.credit.n = 1;
	int rv = proto_send(s->link.eng, &c, (nng_pipe)NNG_PIPE_INITIALIZER);
	if (rv && rv != -EPIPE)
		moor_warn("engine link: credit: %s", moor_strerror(rv));
}

static void *rx_main(void *arg)
{
	gw_srv *s = arg;
	for (;;) {
		proto_msg m;
		nng_pipe p;
		int rv = proto_recv(s->link.eng, &m, &p, -1);
		if (rv == -EPIPE) { /* the socket was closed: we stop */
			proto_msg_fini(&m);
			break;
		}
		/* every message that came counts, a malformed one too */
		if (rv == 0 || rv <= MOOR_EBASE)
			credit(s);
		if (rv) {
			moor_warn("engine link: %s", moor_strerror(rv));
			proto_msg_fini(&m);
			continue;
		}
		gw_ev *e = calloc(1, sizeof *e);
		if (!e) {
			proto_msg_fini(&m);
			continue;
		}
		e->kind = GW_EV_MSG;
		e->pipe = nng_pipe_id(p);
		e->m = m;
		ev_push(s, e);
	}
	return NULL;
}

/* The loop side: every queued event, in order. */
static void on_async(uv_async_t *a)
{
	gw_srv *s = a->data;
	gw_link *l = &s->link;
	pthread_mutex_lock(&l->mu);
	gw_ev *e = l->head;
	l->head = l->tail = NULL;
	pthread_mutex_unlock(&l->mu);
	while (e) {
		gw_ev *n = e->next;
		if (e->kind == GW_EV_MSG)
			gw_on_engine_msg(s, &e->m);
		else
			gw_on_engine_pipe(s, e->kind == GW_EV_PIPE_ADD,
					  e->pipe);
		proto_msg_fini(&e->m);
		free(e);
		e = n;
	}
}

static int dial(nng_socket so, const char *url, proto_pipe_fn fn, void *arg,
		proto_dialer **out, char *err)
{
	int rv = proto_dialer_open(out, so, url, fn, arg);
	if (rv)
		moor_errf(err, "dial %s: %s", url, moor_strerror(rv));
	return rv;
}

int gw_link_open(gw_srv *s, char *err)
{
	gw_link *l = &s->link;
	char url[400];
	pthread_mutex_init(&l->mu, NULL);
	pthread_mutex_init(&l->adm_mu, NULL);
	atomic_store(&l->pipe, 0);
	int rv = uv_async_init(s->loop, &l->async, on_async);
	if (rv) {
		moor_errf(err, "uv_async_init: %s", uv_strerror(rv));
		return rv;
	}
	l->async.data = s;

	rv = nng_pair1_open(&l->eng);
	if (rv) {
		moor_errf(err, "nng_pair1_open: %s", nng_strerror(rv));
		return proto_nng_err(rv);
	}
	l->open = 1;
	nng_socket_set_size(l->eng, NNG_OPT_RECVMAXSZ,
			    2 * (PROTO_HDR_SIZE + (size_t)PROTO_MAX_PAYLOAD));
	/* the loop never waits long on a send: engined reads promptly */
	nng_socket_set_ms(l->eng, NNG_OPT_SENDTIMEO, 1000);
	nng_socket_set_int(l->eng, NNG_OPT_RECVBUF, 128);
	snprintf(url, sizeof url, "ipc://%s/engined.sock", s->cfg.run_dir);
	if ((rv = dial(l->eng, url, pipe_cb, s, &l->eng_dial, err)))
		return rv;

	rv = nng_req0_open(&l->adm);
	if (rv) {
		moor_errf(err, "nng_req0_open: %s", nng_strerror(rv));
		return proto_nng_err(rv);
	}
	nng_socket_set_size(l->adm, NNG_OPT_RECVMAXSZ,
			    PROTO_HDR_SIZE + (size_t)PROTO_MAX_PAYLOAD);
	nng_socket_set_ms(l->adm, NNG_OPT_SENDTIMEO, GW_ADMIN_TIMEOUT_MS);
	/* no resend: a round trip that times out is reported, not repeated */
	nng_socket_set_ms(l->adm, NNG_OPT_REQ_RESENDTIME,
			  NNG_DURATION_INFINITE);
	snprintf(url, sizeof url, "ipc://%s/admin.sock", s->cfg.run_dir);
	if ((rv = dial(l->adm, url, adm_pipe_cb, s, &l->adm_dial, err)))
		return rv;

	if (pthread_create(&l->rx, NULL, rx_main, s)) {
		moor_errf(err, "pthread_create failed");
		return -EAGAIN;
	}
	l->rx_started = 1;
	return 0;
}

void gw_link_close(gw_srv *s)
{
	gw_link *l = &s->link;
	if (l->open) {
		nng_close(l->eng);
		nng_close(l->adm);
		l->open = 0;
	}
	/* after the sockets: NNG's pipe callbacks use the dialers until
	 * then */
	proto_dialer_free(l->eng_dial);
	proto_dialer_free(l->adm_dial);
	l->eng_dial = l->adm_dial = NULL;
	if (l->rx_started) {
		pthread_join(l->rx, NULL);
		l->rx_started = 0;
	}
	pthread_mutex_lock(&l->mu);
	gw_ev *e = l->head;
	l->head = l->tail = NULL;
	pthread_mutex_unlock(&l->mu);
	while (e) {
		gw_ev *n = e->next;
		proto_msg_fini(&e->m);
		free(e);
		e = n;
	}
}

int gw_link_send(gw_srv *s, const proto_msg *m)
{
	if (!atomic_load(&s->link.pipe))
		return -EPIPE;
	return proto_send(s->link.eng, m, (nng_pipe)NNG_PIPE_INITIALIZER);
}

int gw_link_admin(gw_srv *s, const proto_msg *q, proto_msg *reply)
{
	if (atomic_load(&s->link.adm_pipes) <= 0)
		return -ECONNREFUSED;
	pthread_mutex_lock(&s->link.adm_mu);
	int rv = proto_call(s->link.adm, q, reply, GW_ADMIN_TIMEOUT_MS);
	pthread_mutex_unlock(&s->link.adm_mu);
	return rv;
}
