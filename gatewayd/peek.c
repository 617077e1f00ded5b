/* peek.c: POST /v1/cache/peek. A chat body (and its session) is read,
 * rendered and tokenized as a request would be (job.c, params.h), and the
 * end alignment runs on it as on a turn (align.c); 409 while a turn runs
 * or waits (the rows are being written), this gateway's or any other
 * client's of the engine (cached's open plan, gw_box_busy); on the
 * thread pool cached is asked where its plan would start (PROTO_PEEK);
 * nothing is generated or counted. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gw.h"

/* POST /v1/cache/peek: a chat body (and session) rendered and tokenized as
 * a request would be; cached says where its plan would start, nothing is
 * generated or counted. restore_ms: from the session spill or the disk
 * tier, the drive read cached expects (restore_bytes at the tier's
 * measured read rate, PEEK_OK's read_us); from RAM, restore_bytes at
 * GW_RESTORE_BPS. reread_eta_ms: the tokens to prefill at the median rate
 * of this gateway's last long prefills (GW_PREFILL_PRIOR_TPS before any),
 * plus restore_ms. */
int gw_on_cache_peek(gw_srv *s, h2o_req_t *req)
{
	return gw_job_start(s, req, GW_KIND_PEEK, GW_ROUTE_PEEK);
}

/* POST /v1/cache/prewarm: the body as a peek reads it; when the peek finds
 * the conversation on a slower RAM tier (the park, the pin, the state
 * store), it is brought back as its next request would bring it: a
 * generation of no tokens over the prompt less its last token, so cached
 * restores the tier (parking the conversation in place, as a request of
 * another session does), the rest is prefilled and an end anchor is kept
 * one token short of the prompt, where the send then resumes. Otherwise
 * {"prewarmed": false, "why"}: "resident" (the rows are in place: RAM
 * needs nothing), "not_cached" (no tier holds it: a prewarm would be the
 * cold prefill itself); 409 while a turn runs or waits. The NVMe tiers
 * (the session spill, the disk tier) come back the same way: the peek asks
 * them as the plan does (tests/gateway/test_gw_prewarm_spill). */
int gw_on_cache_prewarm(gw_srv *s, h2o_req_t *req)
{
	return gw_job_start(s, req, GW_KIND_PEEK, GW_ROUTE_PREWARM);
}

static void prewarm_no(gw_job *j, const char *why, const proto_peek_ok *pk)
{
	json_t *o = json_pack("{s:b,s:s,s:s,s:I}", "prewarmed", 0, "why", why,
			      "tier", proto_tier(pk->tier)->tier,
			      "cached_tokens", (json_int_t)pk->cached);
	char *t = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER);
	json_decref(o);
	gw_metrics_count(j->s, j->route, 200);
	gw_send_json(j->req, 200, t ? t : "{}", t ? strlen(t) : 2);
	free(t);
}

static void prewarm(gw_job *j, const proto_peek_ok *pk)
{
	if (pk->tier == PROTO_TIER_RESIDENT || pk->tier == PROTO_TIER_END ||
	    pk->tier == PROTO_TIER_STASH) {
		prewarm_no(j, "resident", pk);
		return;
	}
	if (pk->tier == PROTO_TIER_NONE || j->p.n_ids < 2) {
		prewarm_no(j, "not_cached", pk);
		return;
	}
	j->pw_tier = pk->tier;
	j->pw_cached = pk->cached;
	j->p.n_ids--; /* the send forwards the last token */
	j->p.max_tokens = 0;
	j->p.stream = 0;
	j->p.reasoning_budget = 0;
	j->p.logprobs = 0; /* no token comes back */
	gw_job_submit(j);
}

void gw_prewarm_done(gw_job *j)
{
	if (!j->req)
		return;
	const proto_done *d = &j->dn;
	if (d->finish == PROTO_FINISH_ERROR) {
		gw_metrics_count(j->s, j->route, 503);
		gw_send_error(j->req, 503, "server_error", NULL, NULL, 1,
			      "the prewarm failed: %s",
			      j->err_msg[0] ? j->err_msg
					    : moor_strerror(d->code));
		return;
	}
	json_t *r = json_pack(
	    "{s:s,s:s,s:I,s:I,s:I,s:f}", "tier", proto_tier(d->tier)->tier,
	    "source", proto_tier(d->tier)->source, "cached",
	    (json_int_t)d->cached_tokens, "prefilled",
	    (json_int_t)(d->prompt_tokens - d->cached_tokens), "tokens",
	    (json_int_t)d->prompt_tokens, "prefill_ms", d->prefill_us / 1e3);
	json_t *o = json_pack("{s:b,s:o,s:s}", "prewarmed", 1, "restore", r,
			      "session", j->p.session);
	char *t = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER);
	json_decref(o);
	gw_metrics_count(j->s, j->route, 200);
	gw_send_json(j->req, 200, t ? t : "{}", t ? strlen(t) : 2);
	free(t);
}

/* cached holds a plan open from a request's PLAN to its COMMIT or ABORT,
 * whoever sent it (another gateway on the run dir, a client of engined's
 * socket), which this gateway's jobs do not show. met: whether an engine
 * ever said HELLO to this cached (its stats' engine.pid): a cached that
 * restarted knows no layout until engined's next request attaches it, and
 * refuses a peek until then; 1, 0, or -1 (cached did not say). */
static int box_stats(gw_srv *s, int *met)
{
	proto_msg q = {0}, a = {0};
	q.h.type = PROTO_STATS;
	q.h.req = 1;
	int rv = gw_link_admin(s, &q, &a);
	int busy = -1;
	if (met)
		*met = -1;
	if (!rv && a.h.type == PROTO_STATS_OK && a.u.text.text) {
		json_t *o = json_loads(a.u.text.text, 0, NULL);
		json_t *po =
		    json_object_get(json_object_get(o, "daemon"), "plan_open");
		if (json_is_boolean(po))
			busy = json_is_true(po);
		else if (json_is_integer(po))
			busy = json_integer_value(po) != 0;
		json_t *eng = json_object_get(o, "engine");
		if (met && json_is_object(eng))
			*met = !json_is_null(json_object_get(eng, "pid"));
		json_decref(o);
	}
	proto_msg_fini(&a);
	return busy;
}

int gw_box_busy(gw_srv *s)
{
	return box_stats(s, NULL);
}

void gw_peek_work(gw_job *j)
{
	/* the box first: a turn of another client rewrites the rows too */
	int met;
	j->box_busy = box_stats(j->s, &met) > 0;
	j->engine_unmet = met == 0;
	proto_msg q = {0};
	q.h.type = PROTO_PEEK;
	q.h.req = j->rid;
	q.u.peek.session = j->p.session;
	q.u.peek.n_ids = (uint32_t)j->p.n_ids;
	q.u.peek.ids = j->p.ids;
	q.u.peek.salt = j->salt;
	j->admin_rv = gw_link_admin(j->s, &q, &j->reply); /* q borrowed */
}

int gw_turn_running(const gw_srv *s)
{
	for (const gw_job *o = s->jobs; o; o = o->next)
		if ((o->sent && !o->have_done) || o->waiting)
			return 1;
	return 0;
}

void gw_peek_conflict(h2o_req_t *req, int on_engine)
{
	gw_send_error(req, 409, "conflict", NULL, "turn_running", 1,
		      "a turn is running%s: its rows are being written; peek "
		      "again when it ends",
		      on_engine ? " on the engine" : "");
}

void gw_peek_answer(gw_job *j)
{
	if (gw_turn_running(j->s) || j->box_busy) {
		gw_peek_conflict(j->req, j->box_busy);
		return;
	}
	if (j->admin_rv == MOOR_ERANGE && j->engine_unmet) {
		/* not the prompt: cached restarted and has no layout yet */
		gw_send_error(
		    j->req, 503, "server_error", NULL, "engine_not_attached", 1,
		    "cached has not met the engine since it started "
		    "(engined attaches at its next generation): %s",
		    j->reply.h.type == PROTO_ERROR && j->reply.u.error.msg
			? j->reply.u.error.msg
			: moor_strerror(j->admin_rv));
		return;
	}
	if (j->admin_rv == MOOR_ERANGE || j->admin_rv == MOOR_EFORMAT) {
		/* cached refused the prompt itself (longer than the window) */
		gw_send_error(j->req, 400, "invalid_request_error", "messages",
			      NULL, 0, "%s",
			      j->reply.h.type == PROTO_ERROR &&
				      j->reply.u.error.msg
				  ? j->reply.u.error.msg
				  : moor_strerror(j->admin_rv));
		return;
	}
	if (j->admin_rv == MOOR_ENOSPACE) {
		/* the memory policy would refuse this prefill: what the turn
		 * itself would answer */
		gw_send_error(j->req, 503, "server_error", NULL, NULL, 1, "%s",
			      j->reply.h.type == PROTO_ERROR &&
				      j->reply.u.error.msg
				  ? j->reply.u.error.msg
				  : moor_strerror(j->admin_rv));
		return;
	}
	if (j->admin_rv || j->reply.h.type != PROTO_PEEK_OK) {
		gw_send_error(
		    j->req, 503, "server_error", NULL, "cached_unavailable", 1,
		    "cached did not answer the peek: %s",
		    j->reply.h.type == PROTO_ERROR && j->reply.u.error.msg
			? j->reply.u.error.msg
			: moor_strerror(j->admin_rv ? j->admin_rv
						    : MOOR_EFORMAT));
		return;
	}
	const proto_peek_ok *pk = &j->reply.u.peek_ok;
	if (j->route == GW_ROUTE_PREWARM) {
		prewarm(j, pk);
		return;
	}
	uint64_t cached = pk->cached <= pk->tokens ? pk->cached : pk->tokens;
	uint64_t reread = pk->tokens - cached;
	double rate = gw_prefill_rate(j->s);
	double restore_ms = pk->read_us
				? (double)pk->read_us / 1e3
				: pk->restore_bytes / GW_RESTORE_BPS * 1000.0;
	json_t *o = json_object();
	const proto_tier_words *tw = proto_tier(pk->tier);
	json_object_set_new(o, "tier", json_string(tw->tier));
	json_object_set_new(o, "source", json_string(tw->source));
	json_object_set_new(o, "cached_tokens",
			    json_integer((json_int_t)cached));
	json_object_set_new(o, "reread_tokens",
			    json_integer((json_int_t)reread));
	json_object_set_new(o, "reread_eta_ms",
			    json_real(reread / rate * 1000.0 + restore_ms));
	json_object_set_new(o, "tokens", json_integer((json_int_t)pk->tokens));
	/* the client's count; tokens is the prompt the next turn would read
	 * (the end alignment's respelling and replay counted, align.c) */
	json_object_set_new(o, "client_tokens",
			    json_integer((json_int_t)j->n_client));
	json_object_set_new(o, "aligned", json_integer(j->align_pass));
	json_object_set_new(o, "restore_bytes",
			    json_integer((json_int_t)pk->restore_bytes));
	json_object_set_new(o, "restore_ms", json_real(restore_ms));
	json_object_set_new(o, "prefill_tokens_per_s", json_real(rate));
	json_object_set_new(o, "session", json_string(j->p.session));
	char *t = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER);
	json_decref(o);
	gw_send_json(j->req, 200, t ? t : "{}", t ? strlen(t) : 2);
	free(t);
}
