/* align.c: the end alignment of a request's copy, on the thread pool after
 * the body was read (job.c). cached is asked for the end anchor's record
 * (PROTO_END_GET: the rows' ids from where the copy parts, the generation
 * regions and hidden spans); text/endalign.c aligns the copy on the rows'
 * own bytes; an aligned prompt replaces the job's ids, so engined sends
 * cached the rows' ids up to the end anchor and the plan resumes there
 * (text/endalign.h says why this runs in the gateway). The client's count
 * is kept for usage.prompt_tokens. cached down or slow, or a copy that
 * does not align: the prompt goes as the client sent it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "endalign.h"
#include "gw.h"

/* A compaction request: the continuation of the record e when the guard
 * holds (compact.c), else the request as sent. */
static void compact(gw_job *j, const gw_compact *cp, const proto_end_ok *e)
{
	gw_srv *s = j->s;
	int32_t *rows = malloc((size_t)e->end * sizeof *rows);
	if (!rows)
		return;
	memcpy(rows, j->p.ids, (size_t)e->common * sizeof *rows);
	memcpy(rows + e->common, e->ids, (size_t)(e->end - e->common) *
					     sizeof *rows);
	int32_t *ids;
	size_t n;
	const char *why = "";
	int rv = gw_compact_build(s, cp, rows, (size_t)e->end, &ids, &n, &why);
	free(rows);
	if (rv <= 0) {
		moor_info("compaction of session %s: served as sent (%s)",
			  j->p.session, rv ? moor_strerror(rv) : why);
		return;
	}
	if (n > s->cfg.window) {
		free(ids);
		moor_info("compaction of session %s: served as sent (the "
			  "continuation is over the window)",
			  j->p.session);
		return;
	}
	moor_info("compaction of session %s: the continuation of the %s end "
		  "at %llu, %zu tokens (the client's %zu)",
		  j->p.session, proto_tier_name(e->tier),
		  (unsigned long long)e->end, n, j->p.n_ids);
	free(j->p.ids);
	j->p.ids = ids;
	j->p.n_ids = n;
	j->p.user_at = 0;    /* the continuation is no rendered prompt */
	j->p.think_open = 0; /* thinking off: the answer is the summary */
	j->p.reasoning_budget = 0;
	j->continuation = 1;
	/* the window's room after the continuation */
	if (j->p.max_tokens > s->cfg.window - n)
		j->p.max_tokens = (uint32_t)(s->cfg.window - n);
}

void gw_align_work(gw_job *j)
{
	gw_srv *s = j->s;
	j->n_client = j->p.n_ids;
	if (!s->cfg.end_align || !j->p.n_ids)
		return;
	proto_msg q = {0}, r = {0};
	q.h.type = PROTO_END_GET;
	q.h.req = 1; /* REQ/REP pairs replies itself */
	q.u.end_get.session = j->p.session;
	q.u.end_get.n_ids = (uint32_t)j->p.n_ids;
	q.u.end_get.ids = j->p.ids;
	q.u.end_get.salt = j->salt;
	int rv = gw_link_admin(s, &q, &r); /* q borrowed */
	if (rv || r.h.type != PROTO_END_OK) {
		if (rv != -ECONNREFUSED)
			moor_debug("end alignment: cached did not answer (%s)",
				   moor_strerror(rv ? rv : MOOR_EFORMAT));
		proto_msg_fini(&r);
		return;
	}
	const proto_end_ok *e = &r.u.end_ok;
	if (e->tier == PROTO_TIER_NONE || e->common >= e->end ||
	    e->common > j->p.n_ids) {
		proto_msg_fini(&r);
		return;
	}
	gw_compact cp;
	if (j->kind == GW_KIND_CHAT || j->kind == GW_KIND_PEEK) {
		if (gw_compact_detect(j->json, j->p.session, &cp)) {
			compact(j, &cp, e);
			/* an opencode client's text, for the preparer */
			if (j->opencode && j->kind == GW_KIND_CHAT &&
			    (j->cp_seen = calloc(1, sizeof *j->cp_seen))) {
				*j->cp_seen = cp;
				memset(&cp, 0, sizeof cp);
			}
			gw_compact_fini(&cp);
			proto_msg_fini(&r);
			return;
		}
	}
	gw_align_mark *mk =
	    e->n_marks ? calloc(e->n_marks, sizeof *mk) : NULL;
	for (uint32_t i = 0; mk && i < e->n_marks; i++)
		mk[i] = (gw_align_mark){e->marks[i].start, e->marks[i].len,
					e->marks[i].kind};
	gw_align_in in = {
	    .tok = s->tok,
	    .copy = j->p.ids,
	    .n_copy = j->p.n_ids,
	    .common = (size_t)e->common,
	    .tail = e->ids,
	    .end = (size_t)e->end,
	    .marks = mk,
	    .n_marks = mk ? e->n_marks : 0,
	    .reasoning_pass = s->cfg.end_align_reasoning,
	};
	gw_align_out o;
	rv = gw_end_align(&in, &o);
	free(mk);
	if (!rv && o.pass) {
		moor_info("end alignment: the copy of %zu tokens aligned to "
			  "the %s end at %llu (pass %d; parted at %llu; %zu "
			  "hidden, %zu reasoning tokens put back): %zu tokens "
			  "served",
			  j->p.n_ids, proto_tier_name(e->tier),
			  (unsigned long long)e->end, o.pass,
			  (unsigned long long)e->common, o.hidden, o.reasoning,
			  o.n);
		/* the user message's start in the served ids: the rows are
		 * the copy's ids below common, then the rows' ids to the end,
		 * then the copy's from copy_at_end on; inside the part the
		 * rows replaced: unknown */
		size_t ua = j->p.user_at;
		j->p.user_at = ua < e->common	     ? ua
			       : ua >= o.copy_at_end ? ua + o.n - j->p.n_ids
						     : 0;
		free(j->p.ids);
		j->p.ids = o.ids;
		j->p.n_ids = o.n;
		j->align_pass = o.pass;
		j->injected = o.hidden;
		o.ids = NULL;
	} else if (!rv && moor_log_level >= 3) {
		/* what parts, for the log: where the copy parts from the
		 * rows, and where the walk stopped, a few tokens of each side
		 * around it ("|" marks the stop) */
		size_t fr = o.fail_row, fc = o.fail_copy;
		size_t r0 = fr > 8 ? fr - 8 : 0;
		size_t r1 = fr + 8 < e->end ? fr + 8 : (size_t)e->end;
		size_t c0 = fc > 8 ? fc - 8 : 0;
		size_t c1 = fc + 8 < j->p.n_ids ? fc + 8 : j->p.n_ids;
		int32_t rt[16]; /* rows [r0, r1): the copy's below common */
		for (size_t p = r0; p < r1; p++)
			rt[p - r0] = p < e->common ? j->p.ids[p]
						   : e->ids[p - e->common];
		char *a = NULL, *a2 = NULL, *b = NULL, *b2 = NULL;
		size_t al = 0, al2 = 0, bl = 0, bl2 = 0;
		if (fr > r0)
			(void)gw_tok_decode(s->tok, rt, fr - r0, &a, &al);
		if (r1 > fr)
			(void)gw_tok_decode(s->tok, rt + (fr - r0), r1 - fr,
					    &a2, &al2);
		if (fc > c0)
			(void)gw_tok_decode(s->tok, j->p.ids + c0, fc - c0, &b,
					    &bl);
		if (c1 > fc)
			(void)gw_tok_decode(s->tok, j->p.ids + fc, c1 - fc, &b2,
					    &bl2);
		moor_debug("end alignment: the copy of %zu tokens parts from "
			   "the %s end at %llu of %llu and does not align: the "
			   "walk stopped at row %zu, copy token %zu: rows "
			   "\"%.*s|%.*s\" copy \"%.*s|%.*s\"",
			   j->p.n_ids, proto_tier_name(e->tier),
			   (unsigned long long)e->common,
			   (unsigned long long)e->end, fr, fc, (int)al,
			   a ? a : "", (int)al2, a2 ? a2 : "", (int)bl,
			   b ? b : "", (int)bl2, b2 ? b2 : "");
		free(a);
		free(a2);
		free(b);
		free(b2);
	}
	gw_align_out_fini(&o);
	proto_msg_fini(&r);
}
