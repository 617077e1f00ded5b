/* job.c: a generation's job (gw.h tells who holds a job and when the
 * request may go away): created for a chat, completion or peek request, its
 * body read and its prompt rendered and tokenized on the thread pool
 * (params.h), sent to engined (or held while engined is down, for
 * --engine-wait-s), its STEP and DONE messages dispatched by request id to
 * reply.c, cancelled when the client goes away, refused on shutdown. */
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gw.h"

/* ---- jobs ------------------------------------------------------------- */

static void anchor_dispose(void *p)
{
	gw_anchor *a = p;
	if (a->job)
		gw_job_detach(a->job);
}

static void gen_stop(h2o_generator_t *g, h2o_req_t *req)
{
	gw_anchor *a = (gw_anchor *)g;
	if (a->job)
		gw_job_detach(a->job);
}

gw_job *gw_job_new(gw_srv *s, h2o_req_t *req, int kind, int route)
{
	gw_job *j = calloc(1, sizeof *j);
	if (!j)
		return NULL;
	gw_anchor *a =
	    h2o_mem_alloc_shared(&req->pool, sizeof *a, anchor_dispose);
	a->gen.proceed = gw_sse_proceed;
	a->gen.stop = gen_stop;
	a->job = j;
	j->s = s;
	j->kind = kind;
	j->route = route;
	j->refs = 1;
	j->req = req;
	j->anchor = a;
	j->next = s->jobs;
	if (s->jobs)
		s->jobs->prev = j;
	s->jobs = j;
	return j;
}

void gw_job_unref(gw_job *j)
{
	MOOR_ASSERT(j->refs > 0);
	if (--j->refs)
		return;
	gw_srv *s = j->s;
	gw_admit_leave(j);
	if (j->prev)
		j->prev->next = j->next;
	else
		s->jobs = j->next;
	if (j->next)
		j->next->prev = j->prev;
	free(j->body);
	free(j->hdr_session);
	if (j->cp_seen) {
		gw_compact_fini(j->cp_seen);
		free(j->cp_seen);
	}
	free(j->rec);
	free(j->rec_fin);
	moor_buf_fini(&j->pend);
	moor_buf_fini(&j->wire);
	gw_params_fini(&j->p);
	if (j->ts_init)
		gw_tok_stream_fini(&j->ts);
	gw_rs_free(j->rs);
	gw_lp_fini(&j->lp);
	json_decref(j->json);
	proto_msg_fini(&j->q);
	proto_msg_fini(&j->reply);
	free(j);
}

void gw_job_cancel(gw_job *j)
{
	if (!j->sent || j->done || j->cancelled)
		return;
	j->cancelled = 1;
	proto_msg m = {0};
	m.h.type = PROTO_CANCEL;
	m.h.req = ++j->s->next_rid;
	m.u.cancel.target = j->rid;
	int rv = gw_link_send(j->s, &m);
	moor_debug("req %llu: cancel sent (%s)", (unsigned long long)j->rid,
		   rv ? moor_strerror(rv) : "ok");
}

void gw_job_detach(gw_job *j)
{
	if (!j->req)
		return;
	j->req = NULL;
	if (j->anchor)
		j->anchor->job = NULL;
	j->anchor = NULL;
	if (j->sent && !j->done) {
		moor_info("req %llu: the client went away: cancelling",
			  (unsigned long long)j->rid);
		gw_job_cancel(j);
	}
	if (j->waiting) { /* it never reached engined */
		j->waiting = 0;
		gw_job_unref(j);
	}
	gw_job_unref(j);
}

/* ---- reading the body (thread pool) ------------------------------------ */

static void prepare_work(uv_work_t *w)
{
	gw_job *j = w->data;
	gw_srv *s = j->s;
	if (gw_limits_scan(j->body, j->body_len, &j->fail))
		return;
	j->json = gw_params_parse(j->body, j->body_len, &j->fail);
	if (!j->json || gw_limits_check(j->json, &j->fail))
		return;
	const gw_params_env env = {
	    .served = s->cfg.served,
	    .defs = s->defs,
	    .tok = s->tok,
	    .family = s->family,
	    .window = s->cfg.window,
	    .default_max_tokens = s->cfg.default_max_tokens,
	    .reasoning_budget = s->cfg.reasoning_budget,
	    .max_logprobs = s->cfg.max_logprobs,
	};
	/* no seed in the body: a different one per request */
	uint64_t seed = (uint64_t)j->created * 0x9e3779b97f4a7c15ull ^ j->rid ^
			(uint64_t)(uintptr_t)j;
	if (gw_params_read(&env, j->kind, j->json, j->hdr_session, seed, &j->p,
			   &j->fail))
		return;
	j->salt = gw_salt(j->key_salt, j->p.cache_salt, j->p.cache_salt_len);
	/* what engined would refuse or run for nothing is a 400 here, never
	 * a 503 that a client retries forever */
	if (j->p.n_ids > s->cfg.window) {
		gw_failf(&j->fail, 400, "invalid_request_error", "messages",
			 "context_length_exceeded",
			 "the prompt has %zu tokens; the window is %u",
			 j->p.n_ids, s->cfg.window);
		return;
	}
	if (j->p.max_tokens_set && j->p.max_tokens > s->cfg.window) {
		gw_failf(&j->fail, 400, "invalid_request_error", "max_tokens",
			 NULL, "max_tokens %u is larger than the window (%u)",
			 j->p.max_tokens, s->cfg.window);
		return;
	}
	gw_align_work(j);
	if (j->kind == GW_KIND_PEEK)
		gw_peek_work(j);
}

/* ---- the generation ------------------------------------------------------ */

static int send_generate(gw_job *j)
{
	gw_srv *s = j->s;
	proto_msg m = {0};
	m.h.type = PROTO_GENERATE;
	m.h.req = j->rid;
	proto_generate *g = &m.u.gen;
	g->session = j->p.session;
	g->max_tokens = j->p.max_tokens;
	g->temperature = j->p.temperature;
	g->top_p = j->p.top_p;
	g->min_p = j->p.min_p;
	g->top_k = j->p.top_k;
	g->seed = j->p.seed;
	g->flags = j->p.ignore_eos ? PROTO_GEN_IGNORE_EOS : 0;
	g->n_ids = (uint32_t)j->p.n_ids;
	g->ids = j->p.ids;
	g->salt = j->salt;
	g->user_at = j->p.user_at;
	if (j->p.logprobs) {
		g->flags |= PROTO_GEN_LOGPROBS;
		g->top_logprobs = j->p.top_logprobs;
	}
	if (!j->p.ignore_eos) {
		g->n_stop = (uint32_t)s->n_stop_ids;
		g->stop_ids = s->stop_ids;
	}
	if (j->p.reasoning_budget && j->p.think_open && s->n_close) {
		g->flags |= PROTO_GEN_THINKING;
		g->budget = j->p.reasoning_budget;
		g->think_close = s->think_close;
		g->n_hidden = s->n_close_hidden;
		g->n_close = s->n_close;
		g->close_ids = s->close_ids;
	}
	j->pipe = atomic_load(&s->link.pipe);
	int rv = gw_link_send(s, &m);
	if (rv)
		return rv;
	j->sent = 1;
	j->t_start = moor_now();
	return 0;
}

/* The job ends with an error DONE of our own (engined down, gone). */
static void fail_engine(gw_job *j, int code, const char *msg)
{
	proto_done *d = &j->dn;
	memset(d, 0, sizeof *d);
	d->finish = PROTO_FINISH_ERROR;
	d->code = code;
	snprintf(j->err_msg, sizeof j->err_msg, "%s", msg);
	j->have_done = 1;
	gw_reply_finish(j);
}

void gw_job_submit(gw_job *j)
{
	gw_srv *s = j->s;
	j->rid = ++s->next_rid;
	if (gw_rc_replay(j) || gw_prep_replay(j))
		return;
	j->refs++; /* the engine's (or the wait's) */
	if (!atomic_load(&s->link.pipe)) {
		j->waiting = 1;
		j->deadline = moor_now() + s->cfg.engine_wait_s;
		return;
	}
	int rv = send_generate(j);
	if (rv) {
		char m[128];
		snprintf(m, sizeof m, "sending to engined: %s",
			 moor_strerror(rv));
		fail_engine(j, -EPIPE, m);
	}
}

static void prepare_after(uv_work_t *w, int status)
{
	gw_job *j = w->data;
	gw_srv *s = j->s;
	s->n_reading--;
	if (!j->req || s->stopping) {
		if (j->req) {
			gw_metrics_count(s, j->route, 503);
			gw_send_error(j->req, 503, "server_error", NULL, NULL,
				      1, "the gateway is shutting down");
		}
		gw_admit_leave(j);
		gw_job_unref(j);
		return;
	}
	if (j->fail.status) {
		gw_metrics_count(s, j->route, j->fail.status);
		gw_send_fail(j->req, &j->fail);
		gw_admit_leave(j);
		gw_job_unref(j);
		return;
	}
	if (j->kind == GW_KIND_PEEK) {
		gw_peek_answer(j);
		/* a peek's place goes now; a prewarm that went to engined
		 * keeps it until its generation ends (reply.c) */
		if (!j->sent && !j->waiting)
			gw_admit_leave(j);
		gw_job_unref(j);
		return;
	}
	/* the body's copy is not needed any more; json stays for tools */
	free(j->body);
	j->body = NULL;
	char prefix[64];
	snprintf(prefix, sizeof prefix, "call_%.12s_",
		 j->id + strlen(j->id) - 12);
	gw_rs_cfg rc = {
	    .family = j->p.family,
	    .think_open = j->p.think_open,
	    .tools = j->p.tools,
	    .id_prefix = prefix,
	    .stop = (const char *const *)j->p.stop,
	    .n_stop = j->p.n_stop,
	};
	int rv = gw_rs_new(&rc, &j->rs);
	if (!rv)
		rv = gw_tok_stream_init(&j->ts, s->tok);
	if (rv) {
		gw_metrics_count(s, j->route, 500);
		gw_send_error(j->req, 500, "server_error", NULL, NULL, 0,
			      "out of memory");
		gw_admit_leave(j);
		gw_job_unref(j);
		return;
	}
	j->ts_init = 1;
	gw_job_submit(j);
	gw_job_unref(j); /* the work's */
}

/* The body copied off the h2o pool (only now: a waiting request holds
 * none of its own) and read on the thread pool. 0 or -ENOMEM. */
static int start_work(gw_job *j)
{
	h2o_req_t *req = j->req;
	j->body_len = req->entity.len;
	j->body = malloc(j->body_len + 1);
	if (!j->body)
		return -ENOMEM;
	if (j->body_len)
		memcpy(j->body, req->entity.base, j->body_len);
	j->body[j->body_len] = 0;
	j->work.data = j;
	j->refs++;
	if (uv_queue_work(j->s->loop, &j->work, prepare_work, prepare_after)) {
		j->refs--;
		return -ENOMEM;
	}
	if (++j->s->n_reading > j->s->reading_peak)
		j->s->reading_peak = j->s->n_reading;
	return 0;
}

void gw_job_admitted(gw_job *j)
{
	if (start_work(j)) {
		gw_metrics_count(j->s, j->route, 500);
		gw_send_error(j->req, 500, "server_error", NULL, NULL, 0,
			      "out of memory");
		gw_admit_leave(j);
	}
}

int gw_job_start(gw_srv *s, h2o_req_t *req, int kind, int route)
{
	if (s->stopping) {
		gw_metrics_count(s, route, 503);
		gw_send_error(req, 503, "server_error", NULL, NULL, 1,
			      "the gateway is shutting down");
		return 0;
	}
	if (kind == GW_KIND_PEEK && gw_turn_running(s)) {
		/* 409 whatever the body: answered at once, the body unread,
		 * not after a wait for a place behind the turns */
		gw_peek_conflict(req, 0);
		return 0;
	}
	gw_job *j = gw_job_new(s, req, kind, route);
	if (!j)
		goto oom;
	j->created = (int64_t)time(NULL);
	uint64_t nid = ++s->next_id;
	snprintf(j->id, sizeof j->id, "%s%016llx%08llx",
		 kind == GW_KIND_CHAT ? "chatcmpl-" : "cmpl-",
		 (unsigned long long)(nid * 0x9e3779b97f4a7c15ull ^
				      (uint64_t)s->started_unix),
		 (unsigned long long)(nid & 0xffffffffu));
	j->is_admin = gw_auth_admin(s, req);
	(void)gw_auth_key(s, req, &j->key_salt);
	const h2o_iovec_t *h = gw_header(req, "x-session-id");
	if (h) {
		j->hdr_session = malloc(h->len + 1);
		if (!j->hdr_session)
			goto oom_job;
		memcpy(j->hdr_session, h->base, h->len);
		j->hdr_session[h->len] = 0;
	}
	const h2o_iovec_t *ua = gw_header(req, "user-agent");
	j->opencode = ua && ua->len >= 9 && !memcmp(ua->base, "opencode/", 9);
	if (kind == GW_KIND_PEEK)
		j->rid = ++s->next_rid; /* the PEEK's request id */
	if (route != GW_ROUTE_PEEK)
		gw_prep_activity(s); /* the preparer gives way */
	/* every body is read by an admitted job, a peek's and a prewarm's
	 * too: at most --inflight parses at once (limits.c's bound) */
	int a = gw_admit_enter(j);
	if (a < 0) { /* refused, answered */
		gw_job_detach(j);
		return 0;
	}
	if (a == 0) /* waits; gw_job_admitted runs it */
		return 0;
	if (start_work(j))
		goto oom_job;
	return 0;
oom_job:
	gw_job_detach(j);
oom:
	gw_metrics_count(s, route, 500);
	gw_send_error(req, 500, "server_error", NULL, NULL, 0, "out of memory");
	return 0;
}

int gw_on_chat(gw_srv *s, h2o_req_t *req)
{
	return gw_job_start(s, req, GW_KIND_CHAT, GW_ROUTE_CHAT);
}

int gw_on_completions(gw_srv *s, h2o_req_t *req)
{
	return gw_job_start(s, req, GW_KIND_COMPLETION, GW_ROUTE_COMPLETIONS);
}

/* ---- engine events (loop) ------------------------------------------------ */

static gw_job *job_of(gw_srv *s, uint64_t rid)
{
	for (gw_job *j = s->jobs; j; j = j->next)
		if (j->rid == rid && j->sent && !j->have_done)
			return j;
	return NULL;
}

static void on_done(gw_job *j, const proto_done *d, const char *msg)
{
	j->done = 1;
	j->have_done = 1;
	j->dn = *d;
	j->dn.msg = NULL;
	snprintf(j->err_msg, sizeof j->err_msg, "%s", msg ? msg : "");
	if (d->finish != PROTO_FINISH_ERROR) {
		gw_metrics_done(j->s, d);
		gw_prefill_sample(j->s, d);
		gw_rc_keep(j);
		if (j->cp_seen)
			gw_prep_learn(j, j->cp_seen);
		gw_prep_turn_end(j);
	}
	gw_reply_finish(j);
}

void gw_on_engine_msg(gw_srv *s, proto_msg *m)
{
	if (m->h.type == PROTO_STEP) {
		for (uint32_t i = 0; i < m->u.step.n; i++) {
			if (gw_prep_step(s, &m->u.step.e[i]))
				continue;
			gw_job *j = job_of(s, m->u.step.e[i].req);
			if (j)
				gw_reply_token(j, &m->u.step.e[i]);
		}
	} else if (m->h.type == PROTO_PROGRESS) {
		gw_job *j = job_of(s, m->h.req);
		if (j)
			gw_sse_progress(j, &m->u.progress);
	} else if (m->h.type == PROTO_DONE) {
		if (gw_prep_done(s, m->h.req, &m->u.done))
			return;
		gw_job *j = job_of(s, m->h.req);
		if (j)
			on_done(j, &m->u.done, m->u.done.msg);
	} else if (m->h.type == PROTO_ERROR) {
		proto_done pd = {.finish = PROTO_FINISH_ERROR,
				 .code = m->u.error.code};
		if (gw_prep_done(s, m->h.req, &pd))
			return;
		gw_job *j = job_of(s, m->h.req);
		if (j) {
			proto_done d = {.finish = PROTO_FINISH_ERROR,
					.code = m->u.error.code};
			on_done(j, &d, m->u.error.msg);
		}
	}
}

void gw_on_engine_pipe(gw_srv *s, int up, uint32_t pipe)
{
	if (up) {
		moor_info("engined is up (pipe %u)", pipe);
		gw_jobs_tick(s);
		return;
	}
	moor_warn("engined went away (pipe %u)", pipe);
	gw_prep_engine_gone(s);
	for (gw_job *j = s->jobs, *n; j; j = n) {
		n = j->next;
		if (j->sent && !j->have_done && j->pipe == pipe) {
			j->done = 1;
			fail_engine(j, -EPIPE,
				    "engined went away during the request");
		}
	}
}

void gw_jobs_tick(gw_srv *s)
{
	gw_admit_tick(s);
	gw_prep_tick(s);
	double now = moor_now();
	for (gw_job *j = s->jobs, *n; j; j = n) {
		n = j->next;
		/* a whole reply's client that left: h2o frees its request
		 * only when the answer is written, so look for it here */
		if (j->req && j->sent && !j->have_done && !j->cancelled &&
		    !j->started && gw_client_gone(s, j->req)) {
			moor_info("req %llu: the client closed its connection: "
				  "cancelling",
				  (unsigned long long)j->rid);
			gw_job_cancel(j);
		}
		/* a stream whose client stopped reading: its send has waited
		 * past --write-timeout-s, or what waits behind it is past
		 * GW_MAX_PENDING: the connection goes, the job is cancelled
		 * when h2o frees the request */
		if (j->req && j->sending &&
		    (now - j->t_send > s->cfg.write_timeout_s ||
		     j->pend.len > GW_MAX_PENDING)) {
			moor_info("req %llu: the client has not read for %.1f s "
				  "(%zu bytes wait): closing",
				  (unsigned long long)j->rid, now - j->t_send,
				  j->pend.len);
			gw_conn_abort(s, j->req);
			j->t_send = now; /* once a timeout, not every tick */
		}
		/* a whole reply whose client does not take it: h2o keeps the
		 * request, and the job with it, until the answer is written,
		 * which has no deadline of its own; a client that took no
		 * byte of it for --write-timeout-s (its socket's send queue
		 * unchanged) loses the connection, as a stream's does */
		if (j->have_done && !j->t_done) {
			j->t_done = now;
			j->unsent = -2;
		}
		if (j->req && j->have_done && !j->started) {
			long q = gw_conn_unsent(s, j->req);
			if (q != j->unsent) {
				j->unsent = q;
				j->t_done = now;
			} else if (now - j->t_done > s->cfg.write_timeout_s) {
				moor_info("req %llu: the client has taken none "
					  "of its reply for %.1f s (%ld bytes "
					  "wait): closing",
					  (unsigned long long)j->rid,
					  now - j->t_done, q);
				gw_conn_abort(s, j->req);
				j->t_done = now; /* once, not every tick */
			}
		}
		/* the deadline of a job sent: whatever engined does, the
		 * client gets an answer */
		if (j->sent && !j->have_done &&
		    now - j->t_start > s->cfg.request_timeout_s) {
			moor_warn("req %llu: not ended after %g s "
				  "(--request-timeout-s): cancelling",
				  (unsigned long long)j->rid,
				  s->cfg.request_timeout_s);
			gw_job_cancel(j);
			j->done = 1;
			char m[160];
			snprintf(m, sizeof m,
				 "the request did not end within %g s "
				 "(--request-timeout-s)",
				 s->cfg.request_timeout_s);
			fail_engine(j, -ETIME, m);
			continue;
		}
		if (!j->waiting)
			continue;
		if (s->stopping) {
			j->waiting = 0;
			fail_engine(j, -ESHUTDOWN,
				    "the gateway is shutting down");
		} else if (atomic_load(&s->link.pipe)) {
			j->waiting = 0;
			int rv = send_generate(j);
			if (rv) {
				char m[128];
				snprintf(m, sizeof m, "sending to engined: %s",
					 moor_strerror(rv));
				fail_engine(j, -EPIPE, m);
			}
		} else if (now >= j->deadline) {
			j->waiting = 0;
			char m[160];
			snprintf(m, sizeof m,
				 "engined is not available (waited %.1f s)",
				 s->cfg.engine_wait_s);
			fail_engine(j, -EPIPE, m);
		}
	}
}

void gw_jobs_shutdown(gw_srv *s)
{
	gw_admit_shutdown(s);
	gw_jobs_tick(s); /* the waiting ones are refused */
	gw_prep_activity(s); /* a summary being written stops */
	for (gw_job *j = s->jobs; j; j = j->next)
		if (j->sent && !j->have_done)
			gw_job_cancel(j);
}
