/* admit.c: gatewayd's admission queue (gw.h: gw_admit).
 *
 * A chat, completion, peek or prewarm request is admitted when fewer than
 * --inflight requests are being prepared or generated; it then reads its
 * body on the thread pool and goes to engined (a peek: to cached, its
 * place given back once it is answered). Otherwise it waits here, costing
 * only its job (the body stays in h2o's buffer, unparsed), in a queue of at
 * most --queue-max requests. The queue is fair across flows: a flow is the
 * request's x-session-id, else its Authorization header, else the client's
 * address; flows take turns (round robin), each flow's requests in order,
 * so one client's burst does not stall everyone else's next turn.
 *
 * A request that waits longer than --queue-wait-s, or finds the queue
 * full, is answered 503 with a Retry-After of how long the queue ahead of
 * it takes to drain at the rate requests have been ending (the last
 * GW_DRAIN_SAMPLES ends), so clients come back when there is room. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gw.h"

static uint64_t fnv(const void *p, size_t n, uint64_t h)
{
	const unsigned char *b = p;
	for (size_t i = 0; i < n; i++)
		h = (h ^ b[i]) * 0x100000001b3ull;
	return h;
}

/* The flow of a request: session header, else credentials, else peer. */
static uint64_t flow_key(gw_srv *s, h2o_req_t *req)
{
	uint64_t h = 0xcbf29ce484222325ull;
	const h2o_iovec_t *v = gw_header(req, "x-session-id");
	if (v)
		return fnv(v->base, v->len, fnv("s", 1, h));
	v = gw_header(req, "authorization");
	if (v)
		return fnv(v->base, v->len, fnv("a", 1, h));
	struct sockaddr_storage sa;
	memset(&sa, 0, sizeof sa);
	(void)s;
	if (req->conn->callbacks->get_peername &&
	    req->conn->callbacks->get_peername(req->conn,
					       (struct sockaddr *)&sa)) {
		if (sa.ss_family == AF_INET) {
			const struct sockaddr_in *a = (void *)&sa;
			return fnv(&a->sin_addr, sizeof a->sin_addr,
				   fnv("4", 1, h));
		}
		if (sa.ss_family == AF_INET6) {
			const struct sockaddr_in6 *a = (void *)&sa;
			return fnv(&a->sin6_addr, sizeof a->sin6_addr,
				   fnv("6", 1, h));
		}
	}
	return h;
}

static gw_flow **bucket(gw_admit *a, uint64_t key)
{
	return &a->table[key % GW_FLOW_BUCKETS];
}

int gw_admit_init(gw_admit *a, uint32_t queue_max, uint32_t inflight,
		  double wait_s)
{
	memset(a, 0, sizeof *a);
	a->queue_max = queue_max;
	a->inflight_max = inflight;
	a->wait_s = wait_s;
	a->table = calloc(GW_FLOW_BUCKETS, sizeof *a->table);
	return a->table ? 0 : -ENOMEM;
}

void gw_admit_fini(gw_admit *a)
{
	free(a->table);
	a->table = NULL;
}

double gw_admit_rate(const gw_admit *a)
{
	int n = a->n_ends < GW_DRAIN_SAMPLES ? a->n_ends : GW_DRAIN_SAMPLES;
	if (n < 2)
		return 0;
	int last = (a->k_ends + GW_DRAIN_SAMPLES - 1) % GW_DRAIN_SAMPLES;
	int first = (a->k_ends + GW_DRAIN_SAMPLES - n) % GW_DRAIN_SAMPLES;
	double span = a->ends[last] - a->ends[first];
	if (span <= 0)
		return 0;
	return (n - 1) / span;
}

int gw_admit_retry_after(const gw_admit *a, uint32_t ahead)
{
	double rate = gw_admit_rate(a);
	/* before two requests ended: the prior of one a second */
	if (rate <= 0)
		rate = 1.0;
	double s = ceil(((double)ahead + a->n_inflight) / rate);
	if (s < 1)
		s = 1;
	if (s > 3600)
		s = 3600;
	return (int)s;
}

/* Takes the next job in round-robin order, or NULL. */
static gw_job *pop(gw_admit *a)
{
	gw_flow *f = a->ring;
	if (!f)
		return NULL;
	gw_job *j = f->head;
	f->head = j->q_next;
	if (!f->head)
		f->tail = NULL;
	j->q_next = NULL;
	a->n_queued--;
	if (f->head) {
		a->ring = f->ring_next; /* the next flow's turn */
	} else {
		/* the flow is empty: out of the ring and the table */
		if (f->ring_next == f) {
			a->ring = NULL;
		} else {
			f->ring_prev->ring_next = f->ring_next;
			f->ring_next->ring_prev = f->ring_prev;
			a->ring = f->ring_next;
		}
		for (gw_flow **pp = bucket(a, f->key); *pp; pp = &(*pp)->next)
			if (*pp == f) {
				*pp = f->next;
				break;
			}
		free(f);
	}
	j->queued = 0;
	return j;
}

static int push(gw_admit *a, gw_job *j, uint64_t key)
{
	gw_flow *f;
	for (f = *bucket(a, key); f; f = f->next)
		if (f->key == key)
			break;
	if (!f) {
		f = calloc(1, sizeof *f);
		if (!f)
			return -ENOMEM;
		f->key = key;
		f->next = *bucket(a, key);
		*bucket(a, key) = f;
		/* a new flow goes last: just before the one whose turn it is */
		if (!a->ring) {
			f->ring_next = f->ring_prev = f;
			a->ring = f;
		} else {
			f->ring_next = a->ring;
			f->ring_prev = a->ring->ring_prev;
			a->ring->ring_prev->ring_next = f;
			a->ring->ring_prev = f;
		}
	}
	j->q_next = NULL;
	if (f->tail)
		f->tail->q_next = j;
	else
		f->head = j;
	f->tail = j;
	a->n_queued++;
	j->queued = 1;
	return 0;
}

/* Answers a request that is not admitted: 503 with Retry-After. */
static void refuse(gw_srv *s, h2o_req_t *req, int route, const char *why)
{
	gw_admit *a = &s->admit;
	int ra = gw_admit_retry_after(a, a->n_queued);
	gw_metrics_count(s, route, 503);
	gw_send_error(req, 503, "server_error", NULL, "queue_full", ra,
		      "%s (%u waiting, %u in flight, %.2f requests/s ending); "
		      "retry after %d s",
		      why, a->n_queued, a->n_inflight, gw_admit_rate(a), ra);
}

int gw_admit_enter(gw_job *j)
{
	gw_srv *s = j->s;
	gw_admit *a = &s->admit;
	if (a->n_inflight < a->inflight_max && a->n_queued == 0) {
		a->n_inflight++;
		j->admitted = 1;
		return 1;
	}
	if (a->n_queued >= a->queue_max) {
		refuse(s, j->req, j->route, "the queue is full");
		return -1;
	}
	j->flow = flow_key(s, j->req);
	if (push(a, j, j->flow)) {
		refuse(s, j->req, j->route, "out of memory");
		return -1;
	}
	j->t_queued = moor_now();
	j->refs++; /* the queue's */
	return 0;
}

void gw_admit_leave(gw_job *j)
{
	if (!j->admitted)
		return;
	gw_srv *s = j->s;
	gw_admit *a = &s->admit;
	j->admitted = 0;
	MOOR_ASSERT(a->n_inflight > 0);
	a->n_inflight--;
	if (j->sent) { /* a generation ended: a sample of the drain rate */
		a->ends[a->k_ends] = moor_now();
		a->k_ends = (a->k_ends + 1) % GW_DRAIN_SAMPLES;
		a->n_ends++;
	}
	gw_admit_pump(s);
}

void gw_admit_pump(gw_srv *s)
{
	gw_admit *a = &s->admit;
	if (a->pumping) /* a start that fails at once calls leave again */
		return;
	a->pumping = 1;
	while (a->n_inflight < a->inflight_max) {
		gw_job *j = pop(a);
		if (!j)
			break;
		if (!j->req || s->stopping) { /* gone while it waited */
			if (j->req) {
				gw_metrics_count(s, j->route, 503);
				gw_send_error(j->req, 503, "server_error", NULL,
					      NULL, 1,
					      "the gateway is shutting down");
			}
			gw_job_unref(j);
			continue;
		}
		a->n_inflight++;
		j->admitted = 1;
		gw_job_admitted(j);
		gw_job_unref(j); /* the queue's */
	}
	a->pumping = 0;
}

void gw_admit_shutdown(gw_srv *s)
{
	gw_job *j;
	while ((j = pop(&s->admit))) {
		if (j->req) {
			gw_metrics_count(s, j->route, 503);
			gw_send_error(j->req, 503, "server_error", NULL, NULL,
				      1, "the gateway is shutting down");
		}
		gw_job_unref(j);
	}
}

void gw_admit_tick(gw_srv *s)
{
	gw_admit *a = &s->admit;
	if (!a->n_queued)
		return;
	double now = moor_now();
	/* waits past the deadline, and clients that left, are taken out;
	 * a pass over the queue rebuilds it in the same order */
	uint32_t n = a->n_queued, checked = 0;
	gw_job **all = malloc(n * sizeof *all);
	if (!all)
		return;
	uint32_t k = 0;
	gw_job *j;
	while ((j = pop(a)))
		all[k++] = j;
	uint32_t ahead = 0;
	for (uint32_t i = 0; i < k; i++) {
		j = all[i];
		int gone = !j->req;
		/* peeking at every waiting client's socket each tick would
		 * cost a syscall each: GW_GONE_CHECKS per tick, in turn */
		if (!gone && checked < GW_GONE_CHECKS &&
		    (a->check_cursor++ % (k / GW_GONE_CHECKS + 1)) == 0) {
			checked++;
			gone = gw_client_gone(s, j->req);
		}
		if (gone) {
			if (j->req)
				moor_info("a waiting request's client left");
			gw_job_unref(j);
			continue;
		}
		if (now - j->t_queued > a->wait_s) {
			int ra = gw_admit_retry_after(a, ahead);
			gw_metrics_count(s, j->route, 503);
			gw_send_error(j->req, 503, "server_error", NULL,
				      "queue_timeout", ra,
				      "waited %.1f s in the queue "
				      "(--queue-wait-s) behind %u; retry "
				      "after %d s",
				      now - j->t_queued, ahead, ra);
			gw_job_unref(j);
			continue;
		}
		ahead++;
		if (push(a, j, j->flow)) {
			gw_metrics_count(s, j->route, 503);
			gw_send_error(j->req, 503, "server_error", NULL, NULL,
				      1, "out of memory in the queue");
			gw_job_unref(j);
		}
	}
	free(all);
}
