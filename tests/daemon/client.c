/* client.c: engined's client for tests (client.h). */
#include "client.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <nng/protocol/pair1/pair.h>

#include "moor.h"
#include "net.h"

static void pipe_cb(nng_pipe p, nng_pipe_ev ev, void *arg)
{
	mc_conn *c = arg;
	(void)p;
	if (ev == NNG_PIPE_EV_ADD_POST) {
		atomic_fetch_add(&c->pipes, 1);
	} else if (ev == NNG_PIPE_EV_REM_POST) {
		atomic_fetch_sub(&c->pipes, 1);
		atomic_store(&c->gone, 1);
	}
}

int mc_open(mc_conn *c, const char *run_dir, int timeout_ms)
{
	memset(c, 0, sizeof *c);
	char url[600];
	snprintf(url, sizeof url, "ipc://%s/engined.sock", run_dir);
	int rv = nng_pair1_open(&c->s);
	if (rv)
		return proto_nng_err(rv);
	nng_socket_set_size(c->s, NNG_OPT_RECVMAXSZ,
			    2 * (PROTO_HDR_SIZE + (size_t)PROTO_MAX_PAYLOAD));
	nng_socket_set_ms(c->s, NNG_OPT_SENDTIMEO, 5000);
	nng_pipe_notify(c->s, NNG_PIPE_EV_ADD_POST, pipe_cb, c);
	nng_pipe_notify(c->s, NNG_PIPE_EV_REM_POST, pipe_cb, c);
	/* no reconnect: a client of one engined sees it go away */
	rv = nng_dial(c->s, url, NULL, NNG_FLAG_NONBLOCK);
	if (rv) {
		nng_close(c->s);
		return proto_nng_err(rv);
	}
	double end = moor_now() + timeout_ms / 1000.0;
	while (atomic_load(&c->pipes) == 0) {
		if (moor_now() > end) {
			nng_close(c->s);
			return -ETIMEDOUT;
		}
		struct timespec ts = {0, 5 * 1000 * 1000};
		nanosleep(&ts, NULL);
	}
	atomic_store(&c->gone, 0);
	return 0;
}

void mc_close(mc_conn *c)
{
	nng_close(c->s);
}

void mc_result_fini(mc_result *r)
{
	free(r->tokens);
	free(r->steps);
	memset(r, 0, sizeof *r);
}

void mc_credit(mc_conn *c)
{
	proto_msg m = {0};
	m.h.type = PROTO_CREDIT;
	m.u.credit.n = 1;
	proto_send(c->s, &m, (nng_pipe)NNG_PIPE_INITIALIZER);
}

int mc_send_generate(mc_conn *c, uint64_t req, const mc_params *p)
{
	proto_msg m = {0};
	m.h.type = PROTO_GENERATE;
	m.h.req = req;
	proto_generate *g = &m.u.gen;
	g->session = (char *)(p->session ? p->session : "");
	g->max_tokens = p->max_tokens;
	g->temperature = p->temperature;
	g->top_p = p->top_p > 0 ? p->top_p : 1.0f;
	g->min_p = p->min_p;
	g->top_k = p->top_k;
	g->seed = p->seed;
	g->flags = p->flags;
	g->n_ids = p->n_ids;
	g->ids = (int32_t *)p->ids;
	g->n_stop = p->n_stop;
	g->stop_ids = (int32_t *)p->stop_ids;
	g->top_logprobs = p->top_logprobs;
	g->budget = p->budget;
	g->think_close = p->think_close;
	g->n_hidden = p->n_hidden;
	g->n_close = p->n_close;
	g->close_ids = (int32_t *)p->close_ids;
	return proto_send(c->s, &m, (nng_pipe)NNG_PIPE_INITIALIZER);
}

int mc_send_cancel(mc_conn *c, uint64_t req, uint64_t target)
{
	proto_msg m = {0};
	m.h.type = PROTO_CANCEL;
	m.h.req = req;
	m.u.cancel.target = target;
	return proto_send(c->s, &m, (nng_pipe)NNG_PIPE_INITIALIZER);
}

static int push_token(mc_result *r, const proto_step_entry *e, uint32_t *cap)
{
	if (r->n_tokens == *cap) {
		uint32_t c = *cap ? 2 * *cap : 64;
		int32_t *n = realloc(r->tokens, c * sizeof *n);
		if (n)
			r->tokens = n;
		proto_step_entry *s = realloc(r->steps, c * sizeof *s);
		if (s)
			r->steps = s;
		if (!n || !s)
			return -ENOMEM;
		*cap = c;
	}
	r->steps[r->n_tokens] = *e;
	r->tokens[r->n_tokens++] = e->token;
	return 0;
}

int mc_wait(mc_conn *c, uint64_t req, mc_result *r, int timeout_ms,
	    uint32_t cancel_after)
{
	memset(r, 0, sizeof *r);
	uint32_t cap = 0;
	int cancelled = 0;
	double end = moor_now() + timeout_ms / 1000.0;
	for (;;) {
		if (atomic_load(&c->gone)) {
			snprintf(r->msg, sizeof r->msg, "engined went away");
			return r->rv = -EPIPE;
		}
		double left = end - moor_now();
		if (left <= 0) {
			snprintf(r->msg, sizeof r->msg, "no DONE within %d ms",
				 timeout_ms);
			return r->rv = -ETIMEDOUT;
		}
		int slice = left > 0.1 ? 100 : (int)(left * 1000) + 1;
		proto_msg m;
		int rv = proto_recv(c->s, &m, NULL, slice);
		if (rv == -ETIMEDOUT) {
			proto_msg_fini(&m);
			continue;
		}
		if (rv == 0 || rv <= MOOR_EBASE)
			mc_credit(c); /* proto.h: PROTO_CREDIT */
		if (rv) {
			proto_msg_fini(&m);
			snprintf(r->msg, sizeof r->msg, "receive: %s",
				 moor_strerror(rv));
			return r->rv = rv;
		}
		if (m.h.type == PROTO_STEP) {
			for (uint32_t i = 0; i < m.u.step.n; i++)
				if (m.u.step.e[i].req == req &&
				    push_token(r, &m.u.step.e[i], &cap)) {
					proto_msg_fini(&m);
					return r->rv = -ENOMEM;
				}
			if (cancel_after && !cancelled &&
			    r->n_tokens >= cancel_after) {
				mc_send_cancel(c, req + 1000000, req);
				cancelled = 1;
			}
		} else if (m.h.type == PROTO_DONE && m.h.req == req) {
			r->finish = m.u.done.finish;
			r->code = m.u.done.code;
			r->tier = m.u.done.tier;
			r->prompt_tokens = m.u.done.prompt_tokens;
			r->cached_tokens = m.u.done.cached_tokens;
			r->completion_tokens = m.u.done.completion_tokens;
			snprintf(r->msg, sizeof r->msg, "%s",
				 m.u.done.msg ? m.u.done.msg : "");
			proto_msg_fini(&m);
			return r->rv = 0;
		} else if (m.h.type == PROTO_ERROR && m.h.req == req) {
			r->code = m.u.error.code;
			snprintf(r->msg, sizeof r->msg, "%s",
				 m.u.error.msg ? m.u.error.msg : "");
			proto_msg_fini(&m);
			r->finish = PROTO_FINISH_ERROR;
			return r->rv = 0;
		}
		proto_msg_fini(&m);
	}
}

int mc_generate(mc_conn *c, uint64_t req, const mc_params *p, mc_result *r,
		int timeout_ms)
{
	int rv = mc_send_generate(c, req, p);
	if (rv) {
		memset(r, 0, sizeof *r);
		snprintf(r->msg, sizeof r->msg, "send: %s", moor_strerror(rv));
		return r->rv = rv;
	}
	return mc_wait(c, req, r, timeout_ms, 0);
}
