/* turn.c: one request in engined (serve_int.h: srv_run_job), in the steps
 * serve.h draws: plan (cached restores the state), prefill on the grid
 * with the anchor slots, decode with the device sampler, commit; ABORT on
 * any failure after the plan. */
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <nng/nng.h>

#include "moor.h"
#include "net.h"
#include "outbox.h"
#include "serve_int.h"

static int is_stop(const proto_generate *g, int32_t t)
{
	for (uint32_t i = 0; i < g->n_stop; i++)
		if (g->stop_ids[i] == t)
			return 1;
	return 0;
}

static const char *finish_name(uint32_t f)
{
	static const char *const n[] = {"none", "stop", "length", "cancel",
					"error"};
	return f < 5 ? n[f] : "?";
}

static uint64_t us_since(double t)
{
	double d = moor_now() - t;
	return d > 0 ? (uint64_t)(d * 1e6) : 0;
}

static int plan_check(srv *s, const proto_plan_ok *p, uint64_t n, char *msg)
{
	const eng_layout *y = s->lay;
	if (p->start >= n) {
		moor_errf(msg,
			  "cached planned a start at %llu for a prompt "
			  "of %llu tokens",
			  (unsigned long long)p->start, (unsigned long long)n);
		return MOOR_EFORMAT;
	}
	uint64_t prev = p->start;
	for (uint32_t i = 0; i < p->n_slots; i++) {
		const proto_slot *sl = &p->slots[i];
		if (sl->line <= prev || sl->line > n ||
		    sl->offset > s->dev_size ||
		    y->section_bytes > s->dev_size - sl->offset) {
			moor_errf(msg,
				  "anchor slot %u (line %llu at %llu) is "
				  "out of order or outside the arena",
				  i, (unsigned long long)sl->line,
				  (unsigned long long)sl->offset);
			return MOOR_EFORMAT;
		}
		prev = sl->line;
		s->slots[i].line = (int64_t)sl->line;
		s->slots[i].dst = kern_at(s->dev_k, sl->offset);
	}
	return 0;
}

/* A STEP leaves when the client's pipe can take it (outbox.h: credit
 * left, nothing waiting); until then decode steps pile up in pend and
 * leave together, entries in order, so a client that reads slowly gets
 * fewer, larger STEPs and the engine never waits for it. Every entry
 * pushed is followed by a flush, which sends at the request's cap
 * (ENG_STEP_MAX or, with logprobs, ENG_STEP_MAX_LP). */
_Static_assert(4 + (uint64_t)ENG_STEP_MAX * 24 <= PROTO_MAX_PAYLOAD &&
		   4 + (uint64_t)ENG_STEP_MAX_LP * (24 + 8 * PROTO_MAX_TOP) <=
		       PROTO_MAX_PAYLOAD,
	       "a STEP of the most entries fits a message");

static void steps_flush(srv *s, const job *j, int last)
{
	if (s->n_pend == 0)
		return;
	uint32_t cap = j->m.u.gen.flags & PROTO_GEN_LOGPROBS ? ENG_STEP_MAX_LP
							     : ENG_STEP_MAX;
	if (!last && s->n_pend < cap && !eng_out_ready(s->out, j->pipe))
		return; /* keep them for the next flush */
	proto_msg st = {0};
	st.h.type = PROTO_STEP;
	st.h.req = j->m.h.req;
	st.u.step.n = s->n_pend;
	st.u.step.e = s->pend;
	if (eng_out_send(s->out, j->pipe, &st))
		atomic_store(&s->cancel, 2); /* nobody reads it */
	s->n_pend = 0;
}

/* ---- one request, in four steps ----
 *
 * A turn's state between the steps. Each step returns 0 or the error it
 * put into msg; after the plan is open every failure ends in turn_abort
 * (ABORT, with what the state reached), never in a COMMIT. */
typedef struct turn {
	srv *s;
	const job *j;
	const proto_generate *g;
	uint64_t req, n;
	proto_plan_ok po; /* the plan (its slots copied to s->slots) */
	int n_filled;	  /* anchor slots the prefill filled */
	uint64_t produced, absorbed;
	proto_mark hid; /* the reasoning budget's hidden span, if any */
	uint32_t finish;
	uint64_t prefill_us, decode_us;
	int stopped; /* a scratch run stopped in its prefill (a request came) */
	char *msg;
} turn;

/* HELLO first when cached is new to this engine, then PLAN: cached
 * restores the state into the live sequence and answers where the prefill
 * starts and which anchor slots it fills. */
static int turn_plan(turn *t)
{
	srv *s = t->s;
	const proto_generate *g = t->g;
	char *msg = t->msg;
	int rc;

	/* A new pipe to cached since the last HELLO: cached restarted (its
	 * caches are gone) and knows this engine no longer. */
	if (!s->attached || atomic_load(&s->pipes_added) != s->hello_gen) {
		moor_info("cached reconnected: HELLO again");
		rc = srv_cached_hello(s, msg);
		if (rc) {
			moor_warn("HELLO: %s", msg);
			return rc;
		}
	}

	proto_msg q = {0}, rep = {0};
	q.h.type = PROTO_PLAN;
	q.u.plan.session = g->session ? g->session : "";
	q.u.plan.max_tokens = g->max_tokens;
	q.u.plan.flags = g->flags & 0xffffu;
	q.u.plan.n_ids = g->n_ids;
	q.u.plan.ids = g->ids;
	q.u.plan.salt = g->salt;
	q.u.plan.user_at = g->user_at;
	rc = srv_cached_call(s, &q, &rep, msg);
	if (rc == -ENOTCONN) { /* cached lost us: attach and plan again */
		proto_msg_fini(&rep);
		moor_info("cached does not know this engine: HELLO again");
		rc = srv_cached_hello(s, msg);
		if (rc == 0)
			rc = srv_cached_call(s, &q, &rep, msg);
	}
	if (rc == 0 && rep.h.type != PROTO_PLAN_OK) {
		moor_errf(msg, "cached answered PLAN with %s",
			  proto_type_name(rep.h.type));
		rc = MOOR_EFORMAT;
	}
	if (rc) {
		moor_warn("req %llu: plan: %s", (unsigned long long)t->req,
			  msg);
		proto_msg_fini(&rep);
		return rc;
	}
	msg[0] = 0; /* a first refusal answered by a re-HELLO is no error */
	t->po = rep.u.plan_ok;
	t->po.slots = NULL; /* plan_check copies them; rep owns them */
	rc = plan_check(s, &rep.u.plan_ok, t->n, msg);
	proto_msg_fini(&rep);
	if (rc)
		srv_cached_abort(s, 0, 0);
	return rc;
}

/* A long prefill's progress, at most once per --progress-ms: a log line
 * and a PROGRESS to the client (a streamed reply carries it as an SSE
 * comment). On a device backend the chunks are enqueued, so `done` counts
 * the tokens handed to the queue; the CPU backend computes them in the
 * call. */
static void progress(turn *t, uint64_t done, uint64_t total, double t0,
		     double *last)
{
	srv *s = t->s;
	double now = moor_now(), ms = s->cfg->progress_ms / 1e3;
	if (s->cfg->progress_ms <= 0 || now - *last < ms || done >= total)
		return;
	*last = now;
	double el = now - t0;
	double tps = el > 0 ? (double)done / el : 0;
	double eta = tps > 0 ? (double)(total - done) / tps : 0;
	moor_info("req %llu: prefill %llu of %llu tokens (from %llu), %.0f "
		  "tokens/s, ETA %.1f s",
		  (unsigned long long)t->req, (unsigned long long)done,
		  (unsigned long long)total, (unsigned long long)t->po.start,
		  tps, eta);
	proto_msg m = {0};
	m.h.type = PROTO_PROGRESS;
	m.h.req = t->req;
	m.u.progress = (proto_progress){
	    .done = done,
	    .total = total,
	    .start = t->po.start,
	    .tokens_per_s = tps < 4e9 ? (uint32_t)tps : UINT32_MAX,
	    .eta_ms = eta * 1e3 < 4e9 ? (uint32_t)(eta * 1e3) : UINT32_MAX,
	};
	(void)eng_out_send(s->out, t->j->pipe, &m); /* a lost line is no error */
}

/* [start, n) on the grid, filling the anchor slots; a cold start begins
 * from zeroed recurrent state. The last token's logits stay on the device
 * (KEEP): every pick runs there and only the token id comes back.
 *
 * The prefill runs one forward per call (a chunk, or a span of whole
 * chunks), so that a long one reports its progress and a scratch run (the
 * compaction preparer) stops at the next forward when a request comes:
 * each call ends on a grid line, so the calls forward exactly the chunks
 * one call would (eng.h), bit for bit. */
static int turn_prefill(turn *t)
{
	srv *s = t->s;
	int rc;
	s->seq.len = (int64_t)t->po.start;
	if (t->po.start == 0 && (rc = eng_seq_reset(s->model, &s->seq)) != 0) {
		moor_errf(t->msg, "reset: %s", moor_strerror(rc));
		return rc;
	}
	double tp = moor_now(), last = tp;
	int scratch = (t->g->flags & PROTO_PLAN_SCRATCH) != 0;
	uint64_t grid = (uint64_t)s->lay->grid, total = t->n - t->po.start;
	uint64_t span = (uint64_t)eng_model_span(s->model);
	rc = 0;
	t->n_filled = 0;
	for (uint64_t at = t->po.start; at < t->n && !rc;) {
		/* to the next grid line, or from a line a span of chunks */
		uint64_t next = at % grid ? (at / grid + 1) * grid : at + span;
		uint64_t T = next < t->n ? next - at : t->n - at;
		int last_piece = at + T == t->n, nf = 0;
		if (scratch && atomic_load(&s->cancel)) {
			t->stopped = 1;
			break;
		}
		rc = eng_prefill_slots(
		    s->model, &s->seq, t->g->ids + at, (int64_t)T, NULL,
		    last_piece ? ENG_LOGITS_KEEP : ENG_LOGITS_NONE,
		    s->slots + t->n_filled, (int)t->po.n_slots - t->n_filled,
		    &nf);
		t->n_filled += nf;
		at += T;
		if (!rc)
			progress(t, at - t->po.start, total, tp, &last);
	}
	t->prefill_us = us_since(tp);
	if (rc)
		moor_errf(t->msg, "prefill at %lld: %s", (long long)s->seq.len,
			  moor_strerror(rc));
	return rc;
}

_Static_assert(PROTO_MAX_TOP <= KERN_LOGPROBS_MAX,
	       "a STEP's top list fits what logprobs() returns");

/* e's logprobs where the request asked (PROTO_GEN_LOGPROBS): of the
 * logits on the device, which predict e->token. */
static int step_logprobs(turn *t, proto_step_entry *e)
{
	const proto_generate *g = t->g;
	if (!(g->flags & PROTO_GEN_LOGPROBS))
		return 0;
	float lp[PROTO_MAX_TOP + 1];
	int n = (int)g->top_logprobs;
	int rc = eng_model_logprobs(t->s->model, e->token, n, lp, e->top_id);
	if (rc)
		return rc;
	e->logprob = lp[0];
	e->n_top = (uint32_t)n;
	memcpy(e->top_lp, lp + 1, (size_t)n * sizeof *lp);
	return 0;
}

/* One pick on the device per step, one STEP per step (batched by
 * steps_flush), until a stop token, max_tokens, the window or a cancel. */
static int turn_decode(turn *t)
{
	srv *s = t->s;
	const proto_generate *g = t->g;
	eng_sampling sp = {
	    .temperature = g->temperature,
	    .top_k = g->top_k,
	    .top_p = g->top_p,
	    .min_p = g->min_p,
	    .seed = g->seed,
	};
	eng_sampler *smp = eng_sampler_new(s->vocab, &sp);
	if (!smp) {
		moor_errf(t->msg, "sampler: out of memory");
		return -ENOMEM;
	}
	int ignore_eos = (g->flags & PROTO_GEN_IGNORE_EOS) != 0, rc = 0;
	uint32_t finish = g->max_tokens == 0 ? PROTO_FINISH_LENGTH : 0;
	/* the reasoning budget (proto.h, GENERATE): reasoning tokens sampled
	 * while the prompt's <think> is open; at the budget the close ids
	 * are forwarded instead of a sample, the first n_hidden of them a
	 * hidden span (not streamed, not counted, COMMIT's mark) */
	int thinking =
	    (g->flags & PROTO_GEN_THINKING) && g->budget && g->n_close;
	uint64_t reasoned = 0;
	t->hid = (proto_mark){0, 0, PROTO_MARK_HIDDEN};
	double td = moor_now();
	while (!finish) {
		if (thinking && reasoned >= g->budget &&
		    s->seq.len + g->n_close + 1 <= (int64_t)s->lay->window) {
			thinking = 0;
			t->hid.start = t->absorbed;
			t->hid.len = g->n_hidden;
			for (uint32_t i = 0; i < g->n_close && !rc; i++) {
				int32_t ct = g->close_ids[i];
				proto_step_entry e = {.req = t->req,
						      .token = ct};
				/* its logprobs are of the logits before it */
				if (i >= g->n_hidden &&
				    (rc = step_logprobs(t, &e)))
					break;
				rc = eng_decode(s->model, &s->seq, ct, NULL);
				if (rc)
					break;
				s->gen[t->absorbed++] = ct;
				if (i >= g->n_hidden) {
					t->produced++;
					s->pend[s->n_pend++] = e;
					steps_flush(s, t->j, 0);
				}
			}
			if (rc) {
				moor_errf(t->msg,
					  "the reasoning budget's close at %lld: %s",
					  (long long)s->seq.len, moor_strerror(rc));
				break;
			}
			moor_info("req %llu: the reasoning budget (%u) closed "
				  "the reasoning (%u hidden tokens)",
				  (unsigned long long)t->req, g->budget,
				  g->n_hidden);
			continue;
		}
		if (atomic_load(&s->cancel)) {
			finish = PROTO_FINISH_CANCEL;
			break;
		}
		if (s->cfg->test_step_delay_ms > 0) {
			struct timespec ts = {
			    s->cfg->test_step_delay_ms / 1000,
			    (s->cfg->test_step_delay_ms % 1000) * 1000000L};
			nanosleep(&ts, NULL);
		}
		int32_t tok;
		rc = eng_model_sample(s->model, smp, &tok);
		if (rc) {
			moor_errf(t->msg, "sample at %lld: %s",
				  (long long)s->seq.len, moor_strerror(rc));
			break;
		}
		t->produced++;
		if (thinking) {
			if (tok == g->think_close)
				thinking = 0;
			else
				reasoned++;
		}
		uint32_t f = 0;
		if ((tok == s->eos && !ignore_eos) || is_stop(g, tok))
			f = PROTO_FINISH_STOP;
		else if (t->produced >= g->max_tokens ||
			 s->seq.len + 1 > s->lay->window)
			f = PROTO_FINISH_LENGTH;
		proto_step_entry e = {.req = t->req, .token = tok, .finish = f};
		if ((rc = step_logprobs(t, &e))) {
			moor_errf(t->msg, "logprobs at %lld: %s",
				  (long long)s->seq.len, moor_strerror(rc));
			break;
		}
		s->pend[s->n_pend++] = e;
		steps_flush(s, t->j, f != 0);
		if (f) {
			finish = f;
			break;
		}
		rc = eng_decode(s->model, &s->seq, tok, NULL);
		if (rc) {
			moor_errf(t->msg, "decode at %lld: %s",
				  (long long)s->seq.len, moor_strerror(rc));
			break;
		}
		s->gen[t->absorbed++] = tok;
	}
	steps_flush(s, t->j, 1); /* a cancel or an error leaves some behind */
	eng_sampler_free(smp);
	t->decode_us = us_since(td);
	t->finish = finish;
	return rc;
}

/* COMMIT what the state absorbed: every sampled token but a last one that
 * was never forwarded. The queues are synchronised first: cached reads the
 * slots and the live buffers as soon as COMMIT arrives. A refused COMMIT
 * costs this turn's caching, not its answer. */
static int turn_commit(turn *t)
{
	srv *s = t->s;
	int rc = eng_model_sync(s->model);
	if (rc) {
		moor_errf(t->msg, "the backend failed before the commit: %s",
			  moor_strerror(rc));
		return rc;
	}
	proto_msg c = {0}, rep = {0};
	c.h.type = PROTO_COMMIT;
	c.u.commit.n_filled = (uint32_t)t->n_filled;
	c.u.commit.n_ids = (uint32_t)t->absorbed;
	c.u.commit.ids = s->gen;
	if (t->hid.len && t->hid.start + t->hid.len <= t->absorbed) {
		c.u.commit.n_marks = 1;
		c.u.commit.marks = &t->hid;
	}
	char cmsg[MOOR_ERRLEN];
	if (srv_cached_call(s, &c, &rep, cmsg))
		moor_warn("req %llu: commit: %s (the caches keep nothing of "
			  "this turn)",
			  (unsigned long long)t->req, cmsg);
	proto_msg_fini(&rep);
	return 0;
}

/* ABORT of the open plan. It hands the rows back too: synchronised first;
 * when the backend failed, nothing computed after the plan's start
 * counts. */
static void turn_abort(turn *t)
{
	srv *s = t->s;
	moor_warn("req %llu: %s", (unsigned long long)t->req, t->msg);
	int n_filled = t->n_filled;
	int64_t valid = s->seq.len;
	if (eng_model_sync(s->model) != 0) {
		n_filled = 0;
		valid = (int64_t)t->po.start;
	}
	srv_cached_abort(s, n_filled, valid);
}

void srv_run_job(srv *s, job *j, proto_done *d, char *msg)
{
	turn t = {.s = s, .j = j, .g = &j->m.u.gen, .req = j->m.h.req,
		  .n = j->m.u.gen.n_ids, .msg = msg};
	msg[0] = 0;
	memset(d, 0, sizeof *d);
	d->msg = msg;
	d->prompt_tokens = t.n;
	int rc = turn_plan(&t);
	if (rc) {
		d->finish = PROTO_FINISH_ERROR;
		d->code = rc;
		return;
	}
	d->tier = t.po.tier;
	d->cached_tokens = t.po.start;
	d->mem_held = t.po.mem_held;
	d->mem_ceiling = t.po.mem_ceiling;
	d->mem_shed = t.po.mem_shed;
	if (t.g->flags & PROTO_PLAN_SCRATCH) {
		/* a scratch run (the compaction preparer): its rows lie past
		 * the end anchor and its state is nobody's; ABORT hands the
		 * plan back and cached keeps every cache as it was */
		rc = turn_prefill(&t);
		if (!rc && !t.stopped)
			rc = turn_decode(&t);
		if (t.stopped)
			t.finish = PROTO_FINISH_CANCEL;
		(void)eng_model_sync(s->model);
		srv_cached_abort(s, 0, 0);
		d->finish = rc ? PROTO_FINISH_ERROR : t.finish;
		d->code = rc;
		d->completion_tokens = t.produced;
		d->prefill_us = t.prefill_us;
		d->decode_us = t.decode_us;
		moor_info("req %llu: scratch run of %llu tokens from %llu: %llu "
			  "generated, finish %s%s",
			  (unsigned long long)t.req, (unsigned long long)t.n,
			  (unsigned long long)t.po.start,
			  (unsigned long long)t.produced,
			  rc ? "error" : finish_name(t.finish),
			  t.stopped ? " (stopped in its prefill)" : "");
		return;
	}
	if ((rc = turn_prefill(&t)) != 0 || (rc = turn_decode(&t)) != 0 ||
	    (rc = turn_commit(&t)) != 0) {
		turn_abort(&t);
		d->finish = PROTO_FINISH_ERROR;
		d->code = rc;
		d->completion_tokens = t.produced;
		return;
	}
	d->finish = t.finish;
	d->completion_tokens = t.produced;
	d->prefill_us = t.prefill_us;
	d->decode_us = t.decode_us;
	moor_info("req %llu: %llu prompt tokens, %llu cached (tier %u), "
		  "%llu forwarded in %.3f s, %llu generated in %.3f s, "
		  "%u anchors filled, finish %s%s",
		  (unsigned long long)t.req, (unsigned long long)t.n,
		  (unsigned long long)t.po.start, t.po.tier,
		  (unsigned long long)(t.n - t.po.start), t.prefill_us / 1e6,
		  (unsigned long long)t.produced, t.decode_us / 1e6,
		  t.n_filled, finish_name(t.finish),
		  atomic_load(&s->cancel) == 2 ? " (the client went away)"
					       : "");
}
