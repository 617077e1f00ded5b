/* dial.c: a dialer that comes back (net.h: proto_dialer).
 *
 * Why this exists. NNG 1.5's dialer redials on its own after its pipe
 * closes, but it gives up for good when one attempt ends in NNG_ECLOSED
 * (core/dialer.c, dialer_connect_cb: "no further action", meant for a
 * dialer being closed), and an attempt can end so without anyone closing
 * anything: the SP header's send fails with EPIPE, which NNG's errno table
 * maps to NNG_ECLOSED. That happens when the peer is killed: our pipe
 * closes while the dying peer still has its listening socket, the redial
 * (its first back-off is 0 to 50 ms) connects into that listener's
 * backlog, the kernel resets the connection when the listener goes, and
 * the header's send, made from another NNG thread after the connect,
 * finds it reset. (Traced in engined and gatewayd with kill -9 of cached:
 * connect() succeeded in the millisecond the old pipe closed, before the
 * new cached was started, and the header's sendmsg failed with EPIPE.)
 * Under load the window between the connect and the send is wide enough
 * to hit a few times in a hundred restarts. From then on the socket has no
 * pipe and never gets one: requests queue and time out, and the peer,
 * restarted, is never reached. NNG fixed it in 1.6.0 (9248ed7, nng#1518:
 * the negotiation reports NNG_ECONNSHUT instead); Debian 12 ships 1.5.2.
 *
 * What we do. Tell a dialer that gave up from one that is still trying,
 * and replace only the first. Every attempt of an NNG dialer ends in one of
 * its counters (connect, refused, disconnect, other, ...), and a live one
 * with no pipe attempts at least every 500 ms (its longest back-off, set
 * here). So while the socket has no pipe the watcher reads the dialer's
 * counters four times a second; when their sum has not moved for
 * PROTO_DIAL_STALL_S, NNG has stopped trying: the dialer is closed (it
 * holds no connection) and a new one dials.
 *
 * Why not simply redial whenever there has been no pipe for a while.
 * Closing a dialer whose connection the peer has accepted but not yet
 * answered makes the peer's header send fail with EPIPE, and the same
 * NNG 1.5 then stops the peer's listener for good (nng#1518's own case:
 * cached would never take an engine again). A dialer that has stopped
 * trying holds no connection. The one mistake left is a negotiation that
 * the peer leaves unanswered for PROTO_DIAL_STALL_S (a peer frozen
 * after its accept), which NNG itself abandons the same way after 10 s.
 *
 * NNG without statistics (built without NNG_ENABLE_STATS): no counters to
 * read; the dialer is replaced after PROTO_DIAL_BLIND_S without a pipe,
 * NNG's own negotiation timeout, so that no negotiation NNG would still
 * wait for is cut short. */
#include "net.h"

#include "moor.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* The dialer's back-offs (ms): NNG waits a random time below the current
 * one, which doubles from MIN to MAX after each failed attempt. */
#define PROTO_DIAL_MIN_MS 50
#define PROTO_DIAL_MAX_MS 500
/* No attempt for this long: NNG gave up on the dialer (four of its
 * longest back-offs). */
#define PROTO_DIAL_STALL_S 2.0
/* Without NNG's statistics: no pipe for this long (NNG's ipc negotiation
 * timeout). */
#define PROTO_DIAL_BLIND_S 10.0
/* How often the counters are read while there is no pipe. */
#define PROTO_DIAL_POLL_S 0.25

struct proto_dialer {
	nng_socket s;
	char *url;
	proto_pipe_fn fn;
	void *arg;

	/* live, stop: NNG's pipe callbacks and the watcher */
	pthread_mutex_t mu;
	pthread_cond_t cv; /* CLOCK_MONOTONIC */
	int live;	   /* pipes between their ADD_PRE and REM_POST */
	int stop;

	/* the nng_dialer: the watcher and proto_dialer_redial. Never taken
	 * in a pipe callback: nng_dialer_close waits for NNG's callbacks,
	 * a pipe event's among them. */
	pthread_mutex_t dial_mu;
	nng_dialer d;

	pthread_t th;
	int th_started;
};

/* A fresh dialer on d->url (under dial_mu), its back-offs set on it. */
static int dial_start(proto_dialer *d)
{
	nng_dialer nd;
	int rv = nng_dialer_create(&nd, d->s, d->url);
	if (rv == 0) {
		nng_dialer_set_ms(nd, NNG_OPT_RECONNMINT, PROTO_DIAL_MIN_MS);
		nng_dialer_set_ms(nd, NNG_OPT_RECONNMAXT, PROTO_DIAL_MAX_MS);
		rv = nng_dialer_start(nd, NNG_FLAG_NONBLOCK);
		if (rv)
			nng_dialer_close(nd);
	}
	if (rv == 0)
		d->d = nd;
	return proto_nng_err(rv);
}

static int redial(proto_dialer *d)
{
	pthread_mutex_lock(&d->dial_mu);
	if (nng_dialer_id(d->d) < 0) { /* the open has not dialled yet */
		pthread_mutex_unlock(&d->dial_mu);
		return 0;
	}
	nng_dialer_close(d->d); /* an error if it is gone already: none */
	int rv = dial_start(d);
	pthread_mutex_unlock(&d->dial_mu);
	return rv;
}

/* live counts from ADD_PRE: NNG gives REM_POST to every pipe that had an
 * ADD_PRE, one refused before its ADD_POST too. */
static void on_pipe(nng_pipe p, nng_pipe_ev ev, void *arg)
{
	proto_dialer *d = arg;
	pthread_mutex_lock(&d->mu);
	if (ev == NNG_PIPE_EV_ADD_PRE)
		d->live++;
	else if (ev == NNG_PIPE_EV_REM_POST && --d->live == 0)
		pthread_cond_signal(&d->cv);
	pthread_mutex_unlock(&d->mu);
	if (d->fn && ev != NNG_PIPE_EV_ADD_PRE)
		d->fn(p, ev, d->arg);
}

/* The stat scope `name` (a dialer's, a socket's) whose "id" is id, under
 * st. NNG 1.5's nng_stat_find_dialer returns the first dialer of any id
 * (nng#1577): the tree is walked here. */
static nng_stat *find_scope(nng_stat *st, const char *name, int id)
{
	for (; st; st = nng_stat_next(st)) {
		if (nng_stat_type(st) == NNG_STAT_SCOPE &&
		    !strcmp(nng_stat_name(st), name)) {
			nng_stat *i = nng_stat_find(st, "id");
			if (i && (int)nng_stat_value(i) == id)
				return st;
		}
		nng_stat *f = find_scope(nng_stat_child(st), name, id);
		if (f)
			return f;
	}
	return NULL;
}

/* The attempts the dialer has ended so far: the sum of its counters, or
 * -1 without statistics. */
static int64_t attempts(proto_dialer *d)
{
	pthread_mutex_lock(&d->dial_mu);
	int id = nng_dialer_id(d->d);
	pthread_mutex_unlock(&d->dial_mu);
	nng_stat *all;
	if (id < 0 || nng_stats_get(&all) != 0)
		return -1;
	int64_t n = -1;
	nng_stat *ds = find_scope(all, "dialer", id);
	for (nng_stat *c = ds ? nng_stat_child(ds) : NULL; c;
	     c = nng_stat_next(c))
		if (nng_stat_type(c) == NNG_STAT_COUNTER)
			n = (n < 0 ? 0 : n) + (int64_t)nng_stat_value(c);
	nng_stats_free(all);
	return n;
}

static void *watch_main(void *arg)
{
	proto_dialer *d = arg;
	int64_t seen = -2; /* the attempts last read; -2: none yet */
	double since = 0;  /* when they were last seen to move */
	pthread_mutex_lock(&d->mu);
	while (!d->stop) {
		if (d->live > 0) {
			seen = -2;
			pthread_cond_wait(&d->cv, &d->mu);
			continue;
		}
		struct timespec ts;
		clock_gettime(CLOCK_MONOTONIC, &ts);
		ts.tv_nsec += (long)(PROTO_DIAL_POLL_S * 1e9);
		if (ts.tv_nsec >= 1000000000L) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000L;
		}
		pthread_cond_timedwait(&d->cv, &d->mu, &ts);
		if (d->stop || d->live > 0)
			continue;
		pthread_mutex_unlock(&d->mu);
		int64_t n = attempts(d);
		double now = moor_now();
		if (seen == -2 || n != seen) {
			seen = n;
			since = now;
		} else if (now - since >=
			   (n < 0 ? PROTO_DIAL_BLIND_S : PROTO_DIAL_STALL_S)) {
			int rv = redial(d);
			if (rv)
				moor_warn("dial %s again: %s", d->url,
					  moor_strerror(rv));
			else if (n < 0)
				moor_info("no connection to %s for %.0f s: "
					  "dialling it with a new dialer",
					  d->url, PROTO_DIAL_BLIND_S);
			else
				moor_info("the dialer of %s made no attempt "
					  "in %.0f s (NNG gave up on it after "
					  "%lld attempts): dialling with a new "
					  "one",
					  d->url, PROTO_DIAL_STALL_S,
					  (long long)n);
			seen = -2;
		}
		pthread_mutex_lock(&d->mu);
	}
	pthread_mutex_unlock(&d->mu);
	return NULL;
}

int proto_dialer_open(proto_dialer **out, nng_socket s, const char *url,
		      proto_pipe_fn fn, void *arg)
{
	*out = NULL;
	proto_dialer *d = calloc(1, sizeof *d);
	if (!d)
		return -ENOMEM;
	d->url = strdup(url);
	if (!d->url) {
		free(d);
		return -ENOMEM;
	}
	d->s = s;
	d->fn = fn;
	d->arg = arg;
	pthread_mutex_init(&d->mu, NULL);
	pthread_mutex_init(&d->dial_mu, NULL);
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&d->cv, &ca);
	pthread_condattr_destroy(&ca);
	/* the watcher first: until a dialer runs, no pipe event can come, so
	 * a failure below frees d with nothing of NNG's holding it */
	int rv = 0;
	if (pthread_create(&d->th, NULL, watch_main, d))
		rv = -EAGAIN;
	else
		d->th_started = 1;
	static const nng_pipe_ev evs[] = {
	    NNG_PIPE_EV_ADD_PRE, NNG_PIPE_EV_ADD_POST, NNG_PIPE_EV_REM_POST};
	for (int i = 0; i < 3 && rv == 0; i++)
		rv = proto_nng_err(nng_pipe_notify(s, evs[i], on_pipe, d));
	if (rv == 0) {
		pthread_mutex_lock(&d->dial_mu);
		rv = dial_start(d);
		pthread_mutex_unlock(&d->dial_mu);
	}
	if (rv) {
		for (int i = 0; i < 3; i++)
			nng_pipe_notify(s, evs[i], NULL, NULL);
		proto_dialer_free(d);
		return rv;
	}
	*out = d;
	return 0;
}

int proto_dialer_redial(proto_dialer *d)
{
	return d ? redial(d) : -EINVAL;
}

void proto_dialer_free(proto_dialer *d)
{
	if (!d)
		return;
	pthread_mutex_lock(&d->mu);
	d->stop = 1;
	pthread_cond_signal(&d->cv);
	pthread_mutex_unlock(&d->mu);
	if (d->th_started)
		pthread_join(d->th, NULL);
	pthread_cond_destroy(&d->cv);
	pthread_mutex_destroy(&d->mu);
	pthread_mutex_destroy(&d->dial_mu);
	free(d->url);
	free(d);
}
