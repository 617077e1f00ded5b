/* serve.c: engined's daemon loop (serve.h; its other files: serve_int.h).
 *
 * Threads:
 *   main      the worker: attaches to cached, then runs one request at a
 *             time from the queue (plan, prefill, decode, commit);
 *   receiver  reads engined.sock: queues GENERATE, flags CANCEL, answers
 *             malformed messages with PROTO_ERROR and a full queue with a
 *             busy DONE, so the worker never reads the socket;
 *   signals   sigwait for SIGTERM/SIGINT: sets `stop` and wakes the worker.
 * NNG's own threads run the pipe callbacks: a client pipe that goes away
 * cancels its requests, a new pipe to cached (cached restarted) makes the
 * next request HELLO again first.
 *
 * Everything the receiver and the callbacks share with the worker is under
 * `mu`, except the cancel flag of the running request and the pipe counter,
 * which are atomics the worker polls once per decode step.
 */
#include "serve.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <nng/nng.h>

#include "moor.h"
#include "net.h"
#include "serve_int.h"
#include "util.h"

int srv_stopping(srv *s)
{
	pthread_mutex_lock(&s->mu);
	int v = s->stop;
	pthread_mutex_unlock(&s->mu);
	return v;
}

/* ===================================================================== */
/* signals, main loop                                                    */

static void *signal_main(void *arg)
{
	srv *s = arg;
	sigset_t set;
	sigemptyset(&set);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGHUP); /* a hangup stops cleanly, as SIGTERM */
	int sig = 0;
	if (sigwait(&set, &sig))
		return NULL;
	pthread_mutex_lock(&s->mu);
	if (!s->exiting)
		moor_info("%s: finishing the request in flight, then exiting",
			  strsignal(sig));
	s->stop = 1;
	pthread_cond_broadcast(&s->cv);
	pthread_mutex_unlock(&s->mu);
	return NULL;
}

/* A pipe to cached newer than the last good HELLO: cached restarted and
 * knows this engine no longer (after the first attach only). */
static int reattach_due(srv *s)
{
	return s->hello_gen != 0 &&
	       atomic_load(&s->pipes_added) != s->hello_gen;
}

static void worker_loop(srv *s)
{
	double retry_at = 0; /* an idle HELLO that failed is tried again then */
	for (;;) {
		pthread_mutex_lock(&s->mu);
		while (!s->stop && s->qn == 0) {
			if (reattach_due(s) && moor_now() >= retry_at)
				break;
			if (reattach_due(s)) {
				struct timespec ts;
				clock_gettime(CLOCK_REALTIME, &ts);
				ts.tv_sec += 1;
				pthread_cond_timedwait(&s->cv, &s->mu, &ts);
			} else {
				pthread_cond_wait(&s->cv, &s->mu);
			}
		}
		if (s->stop) {
			pthread_mutex_unlock(&s->mu);
			return;
		}
		if (s->qn == 0) {
			/* idle and cached is new: attach now, so that its peek
			 * and prewarm (which need an engine) work before the
			 * next generation; a request still HELLOs first if
			 * this fails */
			pthread_mutex_unlock(&s->mu);
			char err[MOOR_ERRLEN] = "";
			moor_info("cached reconnected: HELLO again (idle)");
			if (srv_cached_hello(s, err)) {
				moor_warn("HELLO: %s; again in 1 s", err);
				retry_at = moor_now() + 1.0;
			}
			continue;
		}
		job *j = s->queue[0];
		memmove(&s->queue[0], &s->queue[1],
			(size_t)(s->qn - 1) * sizeof *s->queue);
		s->qn--;
		s->cur = j;
		atomic_store(&s->cancel, 0);
		pthread_mutex_unlock(&s->mu);

		proto_msg d = {0};
		d.h.type = PROTO_DONE;
		d.h.req = j->m.h.req;
		srv_run_job(s, j, &d.u.done, s->done_msg);

		/* no longer running before the client hears DONE, so its next
		 * request never finds this one in the way */
		pthread_mutex_lock(&s->mu);
		s->cur = NULL;
		pthread_mutex_unlock(&s->mu);
		eng_out_send(s->out, j->pipe, &d);
		srv_job_free(j);
	}
}

static int model_load(srv *s)
{
	const eng_serve_cfg *c = s->cfg;
	kern_config kc = {.threads = c->opts.threads > 0 ? c->opts.threads : 1,
			  .device = c->device};
	s->ops = c->ops;
	int rc = s->ops->create(&kc, &s->kctx);
	if (rc) {
		moor_err("backend %s: %s", s->ops->name, moor_strerror(rc));
		return rc;
	}
	char err[MOOR_ERRLEN] = "";
	double t0 = moor_now();
	rc = eng_model_load(c->model_dir, s->ops, s->kctx, &c->opts,
			    &s->model, err);
	if (rc) {
		moor_err("%s: %s", c->model_dir,
			 err[0] ? err : moor_strerror(rc));
		return rc;
	}
	s->lay = eng_model_layout(s->model);
	s->vocab = eng_model_vocab(s->model);
	s->eos = eng_model_eos(s->model);
	rc = eng_serve_fingerprint(c->model_dir, &c->opts, s->lay->grid,
				   s->ops->name, s->fp, err);
	if (rc) {
		moor_err("fingerprint: %s", err);
		return rc;
	}
	char fh[17];
	moor_hex(s->fp, 8, fh);
	char desc[256] = "";
	eng_model_describe(s->model, desc, sizeof desc);
	moor_info("loaded %s in %.2f s on %s: %d sections, %d views, window "
		  "%lld, grid %d, fingerprint %s",
		  c->model_dir, moor_now() - t0, desc, s->lay->n_sections,
		  s->lay->n_views, (long long)s->lay->window, s->lay->grid, fh);
	return 0;
}

int eng_serve(const eng_serve_cfg *cfg)
{
	/* Signals go to the signal thread only: block them before any thread
	 * (NNG's included) exists. */
	sigset_t set;
	sigemptyset(&set);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGHUP); /* a hangup stops cleanly, as SIGTERM */
	pthread_sigmask(SIG_BLOCK, &set, NULL);
	signal(SIGPIPE, SIG_IGN);

	srv *s = calloc(1, sizeof *s);
	if (!s)
		return -ENOMEM;
	s->cfg = cfg;
	pthread_mutex_init(&s->mu, NULL);
	pthread_cond_init(&s->cv, NULL);
	pthread_t sig_th, rcv_th;
	int rcv_started = 0, rc;
	int sig_started = pthread_create(&sig_th, NULL, signal_main, s) == 0;

	if (cfg->run_dir)
		snprintf(s->run_dir, sizeof s->run_dir, "%s", cfg->run_dir);
	else
		moor_run_dir_default(s->run_dir, sizeof s->run_dir);
	snprintf(s->cached_url, sizeof s->cached_url, "ipc://%s/cached.sock",
		 s->run_dir);
	snprintf(s->eng_path, sizeof s->eng_path, "%s/engined.sock",
		 s->run_dir);
	snprintf(s->eng_url, sizeof s->eng_url, "ipc://%s", s->eng_path);
	if (strlen(s->eng_path) >=
	    sizeof(((struct sockaddr_un *)0)->sun_path)) {
		moor_err("run dir %s: socket paths must be under 108 bytes",
			 s->run_dir);
		rc = -ENAMETOOLONG;
		goto out;
	}

	rc = model_load(s);
	if (rc)
		goto out;
	const eng_layout *y = s->lay;
	s->seq.sec = calloc((size_t)y->n_sections + 1, sizeof *s->seq.sec);
	s->seq.view = calloc((size_t)y->n_views + 1, sizeof *s->seq.view);
	s->gen = malloc((size_t)y->window * sizeof *s->gen);
	s->slots = calloc(PROTO_MAX_SLOTS, sizeof *s->slots);
	s->pend = calloc(ENG_STEP_MAX, sizeof *s->pend);
	s->queue = calloc((size_t)cfg->queue_max + 1, sizeof *s->queue);
	if (!s->seq.sec || !s->seq.view || !s->gen || !s->slots ||
	    !s->pend || !s->queue) {
		rc = -ENOMEM;
		goto out;
	}

	rc = srv_cached_open(s);
	if (rc) {
		moor_err("%s: %s", s->cached_url, moor_strerror(rc));
		goto out;
	}
	rc = srv_cached_attach_first(s);
	if (rc == -EINTR) {
		rc = 0;
		goto out;
	}
	if (rc)
		goto out;

	rc = srv_clients_open(s);
	if (rc)
		goto out;
	if (pthread_create(&rcv_th, NULL, srv_receiver_main, s)) {
		rc = -EAGAIN;
		goto out;
	}
	rcv_started = 1;
	moor_info("serving on %s (pid %d)", s->eng_url, (int)getpid());

	worker_loop(s);

	/* srv_stopping: what waits gets a clear answer */
	pthread_mutex_lock(&s->mu);
	s->stop = 1;
	while (s->qn > 0) {
		job *j = s->queue[--s->qn];
		srv_send_done(s, j->pipe, j->m.h.req, PROTO_FINISH_ERROR,
			  -ESHUTDOWN, "engined is shutting down");
		srv_job_free(j);
	}
	pthread_mutex_unlock(&s->mu);
	/* what waits for credit leaves first (a client that reads gets it in
	 * milliseconds); then NNG, which drops what a closing socket has not
	 * written yet, gets a moment for the last messages */
	if (!eng_out_drain(s->out, 2000))
		moor_warn("a client did not take its last messages in 2 s");
	struct timespec grace = {0, 100 * 1000 * 1000};
	nanosleep(&grace, NULL);
	rc = 0;
out:
	if (s->cs_open) {
		nng_close(s->cs);
		unlink(s->eng_path);
	}
	if (rcv_started)
		pthread_join(rcv_th, NULL);
	eng_out_free(s->out);
	pthread_mutex_lock(&s->mu);
	while (s->qn > 0)
		srv_job_free(s->queue[--s->qn]);
	pthread_mutex_unlock(&s->mu);
	nng_close(s->cq);
	proto_dialer_free(s->cq_dial); /* after the close: net.h */
	srv_arenas_unmap(s);
	free(s->seq.sec);
	free(s->seq.view);
	free(s->gen);
	free(s->slots);
	free(s->pend);
	free(s->queue);
	eng_model_free(s->model);
	if (s->kctx)
		s->ops->destroy(s->kctx);
	if (sig_started) { /* wake it if no signal came, then join it */
		pthread_mutex_lock(&s->mu);
		s->exiting = 1;
		pthread_mutex_unlock(&s->mu);
		pthread_kill(sig_th, SIGTERM);
		pthread_join(sig_th, NULL);
	}
	pthread_mutex_destroy(&s->mu);
	pthread_cond_destroy(&s->cv);
	free(s);
	if (rc == 0)
		moor_info("stopped");
	return rc;
}
