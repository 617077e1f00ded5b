/* outbox.c: engined's sends to its clients under credit (outbox.h).
 *
 * One entry per client pipe (a handful: a gateway or two, a test client),
 * in a list; each holds its FIFO of encoded messages and its credit. A
 * message goes to NNG only while the pipe has credit, so at most
 * PROTO_CREDIT_INITIAL messages to a pipe are inside NNG at any time. */
#include "outbox.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <time.h>

#include "moor.h"
#include "net.h"

typedef struct out_msg {
	struct out_msg *next;
	nng_msg *msg;
} out_msg;

typedef struct out_pipe {
	struct out_pipe *next;
	uint32_t id;
	uint32_t credit;
	out_msg *head, *tail;
	size_t queued;
} out_pipe;

struct eng_outbox {
	nng_socket s;
	pthread_mutex_t mu;
	out_pipe *pipes;
	/* pipes that went away, so that a late send does not bring one
	 * back (ids are not reused soon: NNG counts them up) */
	uint32_t gone[64];
	unsigned n_gone;
};

int eng_out_new(nng_socket s, eng_outbox **out)
{
	eng_outbox *o = calloc(1, sizeof *o);
	if (!o)
		return -ENOMEM;
	o->s = s;
	pthread_mutex_init(&o->mu, NULL);
	*out = o;
	return 0;
}

static void pipe_free(out_pipe *p)
{
	for (out_msg *m = p->head, *n; m; m = n) {
		n = m->next;
		nng_msg_free(m->msg);
		free(m);
	}
	free(p);
}

void eng_out_free(eng_outbox *o)
{
	if (!o)
		return;
	for (out_pipe *p = o->pipes, *n; p; p = n) {
		n = p->next;
		pipe_free(p);
	}
	pthread_mutex_destroy(&o->mu);
	free(o);
}

static int is_gone(const eng_outbox *o, uint32_t id)
{
	unsigned n = o->n_gone < 64 ? o->n_gone : 64;
	for (unsigned i = 0; i < n; i++)
		if (o->gone[i] == id)
			return 1;
	return 0;
}

/* The entry of pipe id; created when create and the pipe is not gone. */
static out_pipe *find(eng_outbox *o, uint32_t id, int create)
{
	for (out_pipe *p = o->pipes; p; p = p->next)
		if (p->id == id)
			return p;
	if (!create || id == 0 || is_gone(o, id))
		return NULL;
	out_pipe *p = calloc(1, sizeof *p);
	if (!p)
		return NULL;
	p->id = id;
	p->credit = PROTO_CREDIT_INITIAL;
	p->next = o->pipes;
	o->pipes = p;
	return p;
}

/* Sends what p's credit allows (under mu). NNG's socket queue takes a
 * message at once (its get loop moves it to the pipe's queue, which has
 * room: the credit says so). */
static void pump(eng_outbox *o, out_pipe *p)
{
	while (p->credit > 0 && p->head) {
		out_msg *m = p->head;
		int rv = nng_sendmsg(o->s, m->msg, 0);
		if (rv) {
			/* the socket is closing: what is left is freed with
			 * the pipe or the outbox */
			moor_debug("outbox: pipe %u: %s", p->id,
				   nng_strerror(rv));
			return;
		}
		p->head = m->next;
		if (!p->head)
			p->tail = NULL;
		p->queued--;
		p->credit--;
		free(m);
	}
}

void eng_out_pipe_add(eng_outbox *o, nng_pipe np)
{
	pthread_mutex_lock(&o->mu);
	find(o, nng_pipe_id(np), 1);
	pthread_mutex_unlock(&o->mu);
}

void eng_out_pipe_rem(eng_outbox *o, nng_pipe np)
{
	uint32_t id = nng_pipe_id(np);
	pthread_mutex_lock(&o->mu);
	o->gone[o->n_gone++ % 64] = id;
	for (out_pipe **pp = &o->pipes; *pp; pp = &(*pp)->next)
		if ((*pp)->id == id) {
			out_pipe *p = *pp;
			*pp = p->next;
			if (p->queued)
				moor_info("client pipe %u went away with %zu "
					  "message(s) unsent",
					  id, p->queued);
			pipe_free(p);
			break;
		}
	pthread_mutex_unlock(&o->mu);
}

int eng_out_send(eng_outbox *o, nng_pipe np, const proto_msg *m)
{
	nng_msg *msg;
	int rv = proto_msg_make(m, np, &msg);
	if (rv)
		return rv;
	out_msg *e = malloc(sizeof *e);
	if (!e) {
		nng_msg_free(msg);
		return -ENOMEM;
	}
	e->next = NULL;
	e->msg = msg;
	pthread_mutex_lock(&o->mu);
	out_pipe *p = find(o, nng_pipe_id(np), 1);
	if (!p) {
		pthread_mutex_unlock(&o->mu);
		nng_msg_free(msg);
		free(e);
		return -EPIPE;
	}
	if (p->tail)
		p->tail->next = e;
	else
		p->head = e;
	p->tail = e;
	p->queued++;
	pump(o, p);
	pthread_mutex_unlock(&o->mu);
	return 0;
}

void eng_out_credit(eng_outbox *o, nng_pipe np, uint32_t n)
{
	pthread_mutex_lock(&o->mu);
	out_pipe *p = find(o, nng_pipe_id(np), 1);
	if (p) {
		/* a client never gets more than it was owed back */
		uint64_t c = (uint64_t)p->credit + n;
		p->credit = c > PROTO_CREDIT_INITIAL ? PROTO_CREDIT_INITIAL
						     : (uint32_t)c;
		pump(o, p);
	}
	pthread_mutex_unlock(&o->mu);
}

int eng_out_ready(eng_outbox *o, nng_pipe np)
{
	pthread_mutex_lock(&o->mu);
	out_pipe *p = find(o, nng_pipe_id(np), 1);
	int r = p && p->credit > 0 && !p->head;
	pthread_mutex_unlock(&o->mu);
	return r;
}

int eng_out_drain(eng_outbox *o, int timeout_ms)
{
	double end = moor_now() + timeout_ms / 1000.0;
	for (;;) {
		pthread_mutex_lock(&o->mu);
		int busy = 0;
		for (out_pipe *p = o->pipes; p; p = p->next)
			busy |= p->head != NULL;
		pthread_mutex_unlock(&o->mu);
		if (!busy)
			return 1;
		if (moor_now() >= end)
			return 0;
		struct timespec ts = {0, 10 * 1000 * 1000};
		nanosleep(&ts, NULL);
	}
}
