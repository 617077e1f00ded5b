/* prepare.c: the compaction preparer (the seed's "writes it ahead"; the
 * issue's point 3).
 *
 * A compaction request is served as the continuation of the session's end
 * anchor (compact.c), and its summary still has to be decoded: thousands
 * of tokens at the decode rate. When no request has come for
 * --compaction-idle-s (30), no job is live, and the last turn was an
 * opencode client's (User-Agent "opencode/...") whose conversation is
 * resident at its end anchor with at least --compaction-min-tokens
 * (32,768) tokens and no summary written for it yet, the gateway writes
 * the summary ahead. It first asks cached whether the box is busy: a plan
 * open there is a request in flight on the engine, whoever sent it (another
 * gateway on the run dir, a client of engined's socket), which this
 * gateway's jobs do not show; then nothing starts, and the busy box counts
 * as activity: another idle period, then the same record is tried again.
 * Otherwise it asks cached for the end anchor's record
 * (PROTO_END_GET, on the thread pool), builds the continuation as a
 * compaction request would (compact.c; no guard: there is no client
 * history to check yet) and sends it to engined as a scratch run
 * (PROTO_PLAN_SCRATCH): the plan resumes at the end anchor, takes no
 * anchor and leaves every cache as it was (cache_scratch_plan). A request
 * that comes stops it at once: the gateway sends CANCEL and engined, which
 * sees the GENERATE queue behind a scratch run, stops it at the next
 * prefill chunk or decode step itself.
 *
 * What the summary is written with: the system text, the instructions,
 * the sampling parameters and max_tokens of the last compaction request an
 * opencode client sent this gateway. Until one has come, opencode
 * 1.18.33's own text (gw_compact_default, compact.c), the server's default
 * sampling (what a request without sampling fields gets: opencode's
 * compaction sends none) and the window's room for max_tokens (a request
 * asking for fewer is served the run's head, cut there).
 *
 * When it is served: a compaction request of the same session (and cache
 * salt: the tenant's, which the run was planned with) whose guard
 * holds and whose continuation ids equal the prepared run's element by
 * element (so: the same end anchor, system text, instructions and
 * template), with the same sampling parameters (and no seed in the body
 * unless greedy: a sampled request without a seed takes any draw), no stop
 * strings, no ignore_eos and no logprobs (the run kept none), is answered
 * from the prepared tokens without the engine, whole or streamed,
 * usage.moor.source "prepared". A
 * max_tokens below the prepared length cuts it there (finish "length"), as
 * the engine would have; a prepared run that stopped at its max_tokens
 * serves no request that asks for more. Loop thread only, but for the
 * work function, which reads its own copies. */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "gw.h"

/* What one preparation carries to the thread pool and back. */
typedef struct prep_run {
	uv_work_t work;
	gw_srv *s;
	uint64_t seq; /* the activity count it started from */
	uint64_t salt;
	char *session;
	int32_t *rec; /* the last turn's prompt as the engine read it */
	size_t n_rec;
	gw_compact cp; /* the learned text, no guard */
	/* out */
	int busy;     /* the box was busy: nothing started, try again */
	int32_t *ids; /* the continuation */
	size_t n_ids;
	uint64_t end;
	const char *why; /* why not, when ids is NULL */
} prep_run;

static void summary_clear(gw_prep *p)
{
	free(p->r_session);
	free(p->r_ids);
	free(p->toks);
	free(p->fin);
	p->r_session = NULL;
	p->r_ids = p->toks = NULL;
	p->fin = NULL;
	p->r_n = p->n_toks = p->cap_toks = 0;
	p->ready = 0;
}

void gw_prep_fini(gw_srv *s)
{
	gw_prep *p = &s->prep;
	summary_clear(p);
	free(p->session);
	free(p->ids);
	moor_buf_fini(&p->system);
	moor_buf_fini(&p->instructions);
	memset(p, 0, sizeof *p);
}

void gw_prep_activity(gw_srv *s)
{
	gw_prep *p = &s->prep;
	p->t_last = moor_now();
	p->seq++;
	if (p->state == GW_PREP_RUN && !p->cancel_sent) {
		proto_msg m = {0};
		m.h.type = PROTO_CANCEL;
		m.h.req = ++s->next_rid;
		m.u.cancel.target = p->rid;
		(void)gw_link_send(s, &m);
		p->cancel_sent = 1;
		moor_info("compaction preparer: a request came: stopping the "
			  "summary of session %s",
			  p->r_session ? p->r_session : "?");
	}
}

void gw_prep_learn(gw_job *j, const gw_compact *cp)
{
	gw_prep *p = &j->s->prep;
	if (!j->opencode)
		return;
	moor_buf_reset(&p->system);
	moor_buf_reset(&p->instructions);
	moor_buf_put(&p->system, cp->system.p, cp->system.len);
	moor_buf_put(&p->instructions, cp->instructions.p,
		     cp->instructions.len);
	p->temperature = j->p.temperature;
	p->top_p = j->p.top_p;
	p->min_p = j->p.min_p;
	p->top_k = j->p.top_k;
	p->max_tokens = j->p.max_tokens;
	p->have_text = !p->system.err && !p->instructions.err;
	p->text_default = 0;
}

void gw_prep_turn_end(gw_job *j)
{
	gw_srv *s = j->s;
	gw_prep *p = &s->prep;
	if (j->kind != GW_KIND_CHAT || j->prepared || j->from_cache ||
	    j->route == GW_ROUTE_PREWARM)
		return;
	/* the end anchor moved: a summary written for the last one is not
	 * this conversation's any more */
	summary_clear(p);
	free(p->session);
	free(p->ids);
	p->session = strdup(j->p.session ? j->p.session : "");
	p->ids = malloc((j->p.n_ids ? j->p.n_ids : 1) * sizeof *p->ids);
	if (!p->session || !p->ids) {
		free(p->session);
		free(p->ids);
		p->session = NULL;
		p->ids = NULL;
		p->n_ids = 0;
		return;
	}
	memcpy(p->ids, j->p.ids, j->p.n_ids * sizeof *p->ids);
	p->n_ids = j->p.n_ids;
	p->opencode = j->opencode;
	p->salt = j->salt;
	/* a compaction was just served: its session starts over */
	p->tried = j->continuation;
	p->t_last = moor_now();
	p->seq++;
}

/* ---- the run ----------------------------------------------------------- */

static void run_free(prep_run *r)
{
	free(r->session);
	free(r->rec);
	free(r->ids);
	gw_compact_fini(&r->cp);
	free(r);
}

static void run_work(uv_work_t *w)
{
	prep_run *r = w->data;
	gw_srv *s = r->s;
	/* the box first: a summary never starts behind another request */
	int busy = gw_box_busy(s);
	if (busy) {
		r->busy = busy > 0;
		r->why = busy > 0 ? "a request is in flight on the engine"
				  : "cached did not answer";
		return;
	}
	proto_msg q = {0}, a = {0};
	q.h.type = PROTO_END_GET;
	q.h.req = 1;
	q.u.end_get.session = r->session;
	q.u.end_get.salt = r->salt;
	q.u.end_get.n_ids = (uint32_t)r->n_rec;
	q.u.end_get.ids = r->rec;
	int rv = gw_link_admin(s, &q, &a);
	if (rv || a.h.type != PROTO_END_OK) {
		r->why = "cached did not answer";
		proto_msg_fini(&a);
		return;
	}
	const proto_end_ok *e = &a.u.end_ok;
	if (e->tier != PROTO_TIER_END || e->common > r->n_rec ||
	    e->common >= e->end) {
		r->why = "the conversation is not resident at its end anchor";
		proto_msg_fini(&a);
		return;
	}
	if (e->end < s->cfg.compaction_min_tokens) {
		r->why = "shorter than --compaction-min-tokens";
		proto_msg_fini(&a);
		return;
	}
	int32_t *rows = malloc((size_t)e->end * sizeof *rows);
	if (!rows) {
		r->why = "out of memory";
		proto_msg_fini(&a);
		return;
	}
	memcpy(rows, r->rec, (size_t)e->common * sizeof *rows);
	memcpy(rows + e->common, e->ids,
	       (size_t)(e->end - e->common) * sizeof *rows);
	r->end = e->end;
	proto_msg_fini(&a);
	const char *why = "";
	rv = gw_compact_build(s, &r->cp, rows, (size_t)r->end, &r->ids,
			      &r->n_ids, &why);
	free(rows);
	if (rv <= 0) {
		r->ids = NULL;
		r->why = rv ? "out of memory" : why;
	} else if (r->n_ids >= s->cfg.window) {
		free(r->ids);
		r->ids = NULL;
		r->why = "the continuation is over the window";
	}
}

static void run_after(uv_work_t *w, int status)
{
	prep_run *r = w->data;
	gw_srv *s = r->s;
	gw_prep *p = &s->prep;
	p->state = GW_PREP_IDLE;
	if (r->busy && !status) {
		/* busy is activity: another idle period from now, then the
		 * same record is tried again */
		moor_info("compaction preparer: the box is busy (%s): session "
			  "%s waits for %g s without a request",
			  r->why, r->session, s->cfg.compaction_idle_s);
		p->tried = 0;
		p->t_last = moor_now();
		run_free(r);
		return;
	}
	if (status || !r->ids || s->stopping || p->seq != r->seq || s->jobs ||
	    !atomic_load(&s->link.pipe)) {
		if (!r->ids && status == 0)
			moor_info("compaction preparer: nothing to write for "
				  "session %s (%s)",
				  r->session, r->why ? r->why : "?");
		run_free(r);
		return;
	}
	uint32_t room = s->cfg.window - (uint32_t)r->n_ids;
	uint32_t max =
	    p->max_tokens && p->max_tokens < room ? p->max_tokens : room;
	summary_clear(p);
	p->r_session = r->session;
	p->r_ids = r->ids;
	p->r_n = r->n_ids;
	p->r_salt = r->salt;
	r->session = NULL;
	r->ids = NULL;
	p->r_temperature = p->temperature;
	p->r_top_p = p->top_p;
	p->r_min_p = p->min_p;
	p->r_top_k = p->top_k;
	p->r_max = max;
	proto_msg m = {0};
	m.h.type = PROTO_GENERATE;
	m.h.req = p->rid = ++s->next_rid;
	proto_generate *g = &m.u.gen;
	g->session = p->r_session;
	g->salt = p->r_salt;
	g->max_tokens = max;
	g->temperature = p->temperature;
	g->top_p = p->top_p;
	g->min_p = p->min_p;
	g->top_k = p->top_k;
	g->seed = (uint64_t)(moor_now() * 1e6) * 0x9e3779b97f4a7c15ull;
	g->flags = PROTO_PLAN_SCRATCH;
	g->n_ids = (uint32_t)p->r_n;
	g->ids = p->r_ids;
	g->n_stop = (uint32_t)s->n_stop_ids;
	g->stop_ids = s->stop_ids;
	p->cancel_sent = 0;
	if (gw_link_send(s, &m)) {
		summary_clear(p);
		run_free(r);
		return;
	}
	p->state = GW_PREP_RUN;
	p->t_run = moor_now();
	moor_info("compaction preparer: writing the summary of session %s "
		  "ahead (the end anchor at %llu, a continuation of %zu "
		  "tokens, max_tokens %u, %s)",
		  p->r_session, (unsigned long long)r->end, p->r_n, max,
		  p->text_default ? "opencode 1.18.33's text"
				  : "the last compaction request's text");
	run_free(r);
}

/* Before any compaction request: opencode 1.18.33's text and the
 * server's default sampling. 0, or -ENOMEM. */
static int learn_default(gw_srv *s)
{
	gw_prep *p = &s->prep;
	gw_compact cp;
	if (gw_compact_default(&cp))
		return -ENOMEM;
	moor_buf_reset(&p->system);
	moor_buf_reset(&p->instructions);
	moor_buf_put(&p->system, cp.system.p, cp.system.len);
	moor_buf_put(&p->instructions, cp.instructions.p, cp.instructions.len);
	gw_compact_fini(&cp);
	p->temperature = (float)s->defs.temperature;
	p->top_p = (float)s->defs.top_p;
	p->min_p = (float)s->defs.min_p;
	p->top_k = s->defs.top_k < 0 ? 0 : s->defs.top_k;
	p->max_tokens = 0; /* the window's room */
	p->have_text = !p->system.err && !p->instructions.err;
	p->text_default = 1;
	return p->have_text ? 0 : -ENOMEM;
}

void gw_prep_tick(gw_srv *s)
{
	gw_prep *p = &s->prep;
	if (!s->cfg.compaction_prepare || p->state != GW_PREP_IDLE ||
	    p->tried || !p->ids || !p->opencode || !p->session ||
	    !*p->session || s->jobs || s->stopping || !s->cfg.end_align ||
	    !atomic_load(&s->link.pipe) ||
	    moor_now() - p->t_last < s->cfg.compaction_idle_s)
		return;
	if (!p->have_text && learn_default(s))
		return;
	p->tried = 1;
	prep_run *r = calloc(1, sizeof *r);
	if (!r)
		return;
	r->s = s;
	r->seq = p->seq;
	r->salt = p->salt;
	r->session = strdup(p->session);
	r->rec = malloc(p->n_ids * sizeof *r->rec + 1);
	r->n_rec = p->n_ids;
	r->cp.is = 1;
	r->cp.no_guard = 1;
	moor_buf_put(&r->cp.system, p->system.p, p->system.len);
	moor_buf_put(&r->cp.instructions, p->instructions.p,
		     p->instructions.len);
	if (!r->session || !r->rec || r->cp.system.err ||
	    r->cp.instructions.err) {
		run_free(r);
		return;
	}
	memcpy(r->rec, p->ids, p->n_ids * sizeof *r->rec);
	r->work.data = r;
	if (uv_queue_work(s->loop, &r->work, run_work, run_after)) {
		run_free(r);
		return;
	}
	p->state = GW_PREP_WORK;
}

/* ---- engined's answers ------------------------------------------------- */

int gw_prep_step(gw_srv *s, const proto_step_entry *e)
{
	gw_prep *p = &s->prep;
	if (p->state != GW_PREP_RUN || e->req != p->rid)
		return 0;
	if (p->n_toks == p->cap_toks) {
		size_t cap = p->cap_toks ? 2 * p->cap_toks : 256;
		int32_t *t = realloc(p->toks, cap * sizeof *t);
		if (t)
			p->toks = t;
		uint32_t *f = t ? realloc(p->fin, cap * sizeof *f) : NULL;
		if (f)
			p->fin = f;
		if (!t || !f) {
			p->failed = 1;
			return 1;
		}
		p->cap_toks = cap;
	}
	p->toks[p->n_toks] = e->token;
	p->fin[p->n_toks++] = e->finish;
	return 1;
}

int gw_prep_done(gw_srv *s, uint64_t req, const proto_done *d)
{
	gw_prep *p = &s->prep;
	if (p->state != GW_PREP_RUN || req != p->rid)
		return 0;
	p->state = GW_PREP_IDLE;
	p->rid = 0;
	if (p->failed || !d ||
	    (d->finish != PROTO_FINISH_STOP &&
	     d->finish != PROTO_FINISH_LENGTH)) {
		moor_info("compaction preparer: the summary of session %s was "
			  "not finished (%s)",
			  p->r_session ? p->r_session : "?",
			  !d ? "engined went away"
			  : d->finish == PROTO_FINISH_CANCEL ? "stopped"
							     : "an error");
		p->failed = 0;
		summary_clear(p);
		/* stopped by a request: the same record may be tried again
		 * once idle; an error is not tried again */
		p->tried = !(d && d->finish == PROTO_FINISH_CANCEL);
		return 1;
	}
	p->done = *d;
	p->done.msg = NULL;
	p->ready = 1;
	moor_info("compaction preparer: prepared the summary of session %s: "
		  "%zu tokens in %.2f s (finish %s)",
		  p->r_session, p->n_toks, moor_now() - p->t_run,
		  d->finish == PROTO_FINISH_STOP ? "stop" : "length");
	return 1;
}

void gw_prep_engine_gone(gw_srv *s)
{
	if (s->prep.state == GW_PREP_RUN)
		(void)gw_prep_done(s, s->prep.rid, NULL);
}

/* ---- serving it ---------------------------------------------------------- */

int gw_prep_replay(gw_job *j)
{
	gw_srv *s = j->s;
	gw_prep *p = &s->prep;
	if (!j->continuation || !p->ready || !p->r_session ||
	    j->salt != p->r_salt ||
	    strcmp(p->r_session, j->p.session ? j->p.session : "") ||
	    p->r_n != j->p.n_ids ||
	    memcmp(p->r_ids, j->p.ids, p->r_n * sizeof *p->r_ids))
		return 0;
	int greedy = p->r_temperature == 0.0f || p->r_top_k == 1;
	if (j->p.temperature != p->r_temperature || j->p.top_p != p->r_top_p ||
	    j->p.min_p != p->r_min_p || j->p.top_k != p->r_top_k ||
	    (!greedy && json_object_get(j->json, "seed")) || j->p.ignore_eos ||
	    j->p.n_stop || j->p.logprobs) {
		moor_info("compaction of session %s: the prepared summary was "
			  "written with other parameters: served by the engine",
			  j->p.session);
		return 0;
	}
	/* the tokens the engine would give for this max_tokens */
	uint32_t want = j->p.max_tokens;
	size_t k = 0;
	uint32_t fin = PROTO_FINISH_LENGTH;
	while (k < p->n_toks && k < want) {
		if (p->fin[k] == PROTO_FINISH_STOP) {
			fin = PROTO_FINISH_STOP;
			k++;
			break;
		}
		k++;
	}
	if (fin != PROTO_FINISH_STOP && k < want) {
		moor_info("compaction of session %s: the prepared summary "
			  "stopped at %zu tokens, the request asks for %u: "
			  "served by the engine",
			  j->p.session, p->n_toks, want);
		return 0;
	}
	j->refs++; /* as the engine's, which gw_reply_finish drops */
	j->prepared = 1;
	j->t_start = moor_now();
	for (size_t i = 0; i < k && !j->have_done; i++) {
		proto_step_entry st = {.req = j->rid,
				       .token = p->toks[i],
				       .finish = i + 1 == k ? fin : 0};
		gw_reply_token(j, &st);
	}
	memset(&j->dn, 0, sizeof j->dn);
	j->dn.finish = fin;
	j->dn.tier = PROTO_TIER_END;
	j->dn.prompt_tokens = j->p.n_ids;
	j->dn.cached_tokens = j->p.n_ids;
	j->dn.completion_tokens = k;
	j->done = 1;
	j->have_done = 1;
	moor_info("compaction of session %s: answered from the prepared "
		  "summary (%zu tokens, written %.1f s ago)",
		  j->p.session, k, moor_now() - p->t_run);
	gw_reply_finish(j);
	return 1;
}
