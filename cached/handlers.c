/* handlers.c: cached's message handlers (daemon.h), one a message type,
 * and the dispatch: the engine's HELLO, PLAN, COMMIT, ABORT on
 * cached.sock; STATS, CLEAR, PEEK, END_GET on admin.sock. */
#include <errno.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>
#include <nng/nng.h>

#include "cache.h"
#include "daemon.h"
#include "moor.h"
#include "net.h"
#include "proto.h"
#include "salt.h"
#include "util.h"

/* The attached engine's pipe while its connection is up; 0 once it is
 * gone. Written by the HELLO handler and by NNG's pipe callback. */
_Atomic uint32_t cd_eng_pipe_live;

void cd_on_pipe_gone(nng_pipe p, nng_pipe_ev ev, void *arg)
{
	(void)ev;
	(void)arg;
	uint32_t id = nng_pipe_id(p);
	atomic_compare_exchange_strong(&cd_eng_pipe_live, &id, 0);
}

/* ===================================================================== */
/* engine requests                                                       */

/* The proto layout as the core's: views' element size from row_bytes. */
static int layout_from_hello(cd *d, const proto_hello *h, char *why)
{
	cache_layout *l = &d->lay;
	memset(l, 0, sizeof *l);
	if (h->n_sections > CACHE_MAX_SECTIONS ||
	    h->n_views > CACHE_MAX_VIEWS) {
		snprintf(why, MOOR_ERRLEN, "%u sections, %u views: over %d, %d",
			 h->n_sections, h->n_views, CACHE_MAX_SECTIONS,
			 CACHE_MAX_VIEWS);
		return MOOR_ERANGE;
	}
	if (h->window == 0 || h->grid == 0 || h->window > (1ull << 32)) {
		snprintf(why, MOOR_ERRLEN, "window %llu, grid %u",
			 (unsigned long long)h->window, h->grid);
		return MOOR_ERANGE;
	}
	l->n_sections = h->n_sections;
	for (uint32_t i = 0; i < h->n_sections; i++) {
		const proto_section *p = &h->sec[i];
		cache_section *s = &l->sec[i];
		if (p->bytes == 0 || p->bytes > (1ull << 40)) {
			snprintf(why, MOOR_ERRLEN, "section %u: %llu bytes", i,
				 (unsigned long long)p->bytes);
			return MOOR_ERANGE;
		}
		snprintf(s->name, sizeof s->name, "%.*s", PROTO_NAME_MAX - 1,
			 p->name);
		s->layer = p->layer;
		s->bytes = p->bytes;
	}
	l->n_views = h->n_views;
	for (uint32_t i = 0; i < h->n_views; i++) {
		const proto_view *p = &h->view[i];
		cache_view *v = &l->view[i];
		if (p->ndim < 1 || p->ndim > CACHE_MAX_DIMS ||
		    p->token_axis >= p->ndim || p->row_bytes == 0) {
			snprintf(why, MOOR_ERRLEN,
				 "view %u: ndim %u, token axis %u, %llu bytes "
				 "a row",
				 i, p->ndim, p->token_axis,
				 (unsigned long long)p->row_bytes);
			return MOOR_ERANGE;
		}
		uint64_t inner = 1;
		for (uint32_t k = 0; k < p->ndim; k++) {
			if (k == p->token_axis)
				continue;
			if (p->dims[k] <= 0 || p->dims[k] > (1 << 24)) {
				snprintf(why, MOOR_ERRLEN,
					 "view %u: dim %u is "
					 "%lld",
					 i, k, (long long)p->dims[k]);
				return MOOR_ERANGE;
			}
			/* a product past the row's bytes is refused before
			 * it can wrap (to 0: a division by zero below) */
			if (__builtin_mul_overflow(inner, (uint64_t)p->dims[k],
						   &inner) ||
			    inner > p->row_bytes) {
				snprintf(why, MOOR_ERRLEN,
					 "view %u: its dims multiply past its "
					 "%llu bytes a row",
					 i, (unsigned long long)p->row_bytes);
				return MOOR_ERANGE;
			}
		}
		if (p->row_bytes % inner || p->row_bytes / inner > 16) {
			snprintf(why, MOOR_ERRLEN,
				 "view %u: %llu bytes a row for %llu elements",
				 i, (unsigned long long)p->row_bytes,
				 (unsigned long long)inner);
			return MOOR_ERANGE;
		}
		snprintf(v->name, sizeof v->name, "%.*s", PROTO_NAME_MAX - 1,
			 p->name);
		v->layer = p->layer;
		v->elt = (uint32_t)(p->row_bytes / inner);
		v->ndim = p->ndim;
		for (uint32_t k = 0; k < p->ndim; k++)
			v->dims[k] = p->dims[k];
		v->dims[p->token_axis] = (int64_t)h->window;
		v->token_axis = p->token_axis;
	}
	l->window = h->window;
	l->grid = h->grid;
	l->workspace_floor = h->workspace_bytes;
	l->workspace_per_token = 0;
	memcpy(l->fingerprint, h->fingerprint, 32);
	return 0;
}

/* An engine that died mid-request left a plan open: the rows it restored
 * are valid, what it computed after is not trusted. */
void cd_close_open_plan(cd *d, const char *why)
{
	if (!d->plan_open)
		return;
	moor_info("%s: aborting the open plan (rows valid to %llu)", why,
		  (unsigned long long)d->plan_start);
	int rc = cache_abort(d->c, 0, d->plan_start);
	if (rc)
		moor_warn("abort: %s", moor_strerror(rc));
	d->plan_open = 0;
}

static void on_hello(cd *d, uint32_t pipe, const proto_msg *m)
{
	const proto_hello *h = &m->u.hello;
	char why[MOOR_ERRLEN] = "", fh[17], old[17];
	moor_hex(h->fingerprint, 8, fh);
	int rc = layout_from_hello(d, h, why);
	if (rc) {
		cd_reply_err(d, SOCK_ENG, m->h.req, rc, "HELLO: bad layout: %s",
			     why);
		return;
	}
	cd_close_open_plan(d, d->eng_pipe && d->eng_pipe != pipe
				  ? "a new engined attaches"
				  : "HELLO with a plan open");
	int had = d->have_fp, same = had && !memcmp(d->fp, h->fingerprint, 32);
	if (had)
		moor_hex(d->fp, 8, old);
	why[0] = 0;
	rc = cache_hello(d->c, &d->lay, &d->ho, why);
	if (rc) {
		cd_reply_err(d, SOCK_ENG, m->h.req, rc, "HELLO: %s",
			     why[0] ? why : moor_strerror(rc));
		return;
	}
	d->n_hello++;
	d->eng_pipe = pipe;
	atomic_store(&cd_eng_pipe_live, pipe);
	d->eng_pid = h->pid;
	d->eng_window = h->window;
	d->eng_grid = h->grid;
	memcpy(d->fp, h->fingerprint, 32);
	d->have_fp = 1;
	if (d->ho.adopted)
		moor_info("engined pid %u attached (fingerprint %s): handed "
			  "back the state it left, %llu resident tokens",
			  h->pid, fh, (unsigned long long)d->ho.resident_len);
	else if (had && !same)
		moor_info("engined pid %u attached with another fingerprint "
			  "(%s, the state held is %s's): dropped the old "
			  "caches, carved new buffers",
			  h->pid, fh, old);
	else if (had)
		moor_info("engined pid %u attached with another layout "
			  "(fingerprint %s): dropped the old caches, carved "
			  "new buffers",
			  h->pid, fh);
	else
		moor_info("engined pid %u attached (fingerprint %s, %u "
			  "sections, %u views, window %llu, grid %u)",
			  h->pid, fh, h->n_sections, h->n_views,
			  (unsigned long long)h->window, h->grid);

	cache_arena_info ai;
	cache_arena_info_get(d->c, &ai);
	proto_msg r = {0};
	r.h.type = PROTO_HELLO_OK;
	r.h.req = m->h.req;
	proto_hello_ok *o = &r.u.hello_ok;
	o->dev_arena = ai.dev_name;
	o->dev_size = ai.dev_size;
	o->host_arena = ai.host_name;
	o->host_size = ai.host_size;
	o->adopted = d->ho.adopted ? 1 : 0;
	o->resident_len = d->ho.resident_len;
	o->n_sec = d->lay.n_sections;
	o->sec_off = d->ho.sec_off;
	o->n_view = d->lay.n_views;
	o->view_off = d->ho.view_off;
	o->dev_kind = ai.dev_cuda ? PROTO_ARENA_CUDA : PROTO_ARENA_SHM;
	o->dev_device = ai.dev_device;
	memcpy(o->dev_handle, ai.dev_handle, sizeof o->dev_handle);
	cd_send(d, SOCK_ENG, &r);
}

/* PLAN, COMMIT and ABORT come from the engine that HELLOed on this pipe. */
static int engine_check(cd *d, uint32_t pipe, const proto_msg *m)
{
	if (d->eng_pipe && d->eng_pipe == pipe)
		return 0;
	cd_reply_err(
	    d, SOCK_ENG, m->h.req, -ENOTCONN,
	    "%s before HELLO: no engine is attached on this connection",
	    proto_type_name(m->h.type));
	return -ENOTCONN;
}

static void on_plan(cd *d, uint32_t pipe, const proto_msg *m)
{
	if (engine_check(d, pipe, m))
		return;
	const proto_plan *p = &m->u.plan;
	cd_close_open_plan(d, "PLAN with a plan open");
	/* the decoded ids are this handler's own: salted in place */
	cache_salt_ids(p->ids, p->n_ids, 0, p->salt);
	cache_req q = {
	    .ids = p->ids,
	    .n = p->n_ids,
	    .session =
		cache_salt_session(p->session, p->salt, d->salted_session,
				   sizeof d->salted_session),
	    .max_tokens = p->max_tokens,
	    .no_cache = (p->flags & PROTO_PLAN_NO_CACHE) != 0,
	    .user_at = p->user_at,
	};
	char why[MOOR_ERRLEN] = "";
	int scratch = (p->flags & PROTO_PLAN_SCRATCH) != 0;
	int rc = scratch ? cache_scratch_plan(d->c, &q, &d->po, why)
			 : cache_plan(d->c, &q, &d->po, why);
	if (rc) {
		cd_reply_err(d, SOCK_ENG, m->h.req, rc, "PLAN of %u tokens: %s",
			     p->n_ids, why[0] ? why : moor_strerror(rc));
		return;
	}
	if (scratch)
		d->n_scratch++;
	else
		d->n_plan++;
	d->plan_scratch = scratch;
	d->plan_open = 1;
	d->plan_start = d->po.start;
	d->plan_n = p->n_ids;
	d->plan_salt = p->salt;
	uint32_t ns = d->po.n_slots;
	if (ns > PROTO_MAX_SLOTS)
		ns = PROTO_MAX_SLOTS;
	for (uint32_t i = 0; i < ns; i++) {
		d->slots[i].line = d->po.slots[i].line;
		d->slots[i].offset = d->po.slots[i].offset;
	}
	proto_msg r = {0};
	r.h.type = PROTO_PLAN_OK;
	r.h.req = m->h.req;
	r.u.plan_ok.start = d->po.start;
	r.u.plan_ok.cached = d->po.start;
	r.u.plan_ok.taint = d->po.taint;
	r.u.plan_ok.tier = (uint32_t)d->po.tier;
	r.u.plan_ok.mem_held = d->po.mem_held;
	r.u.plan_ok.mem_ceiling = d->cfg.mem_ceiling;
	r.u.plan_ok.mem_shed = d->po.mem_shed;
	r.u.plan_ok.n_slots = ns;
	r.u.plan_ok.slots = d->slots;
	moor_debug("plan: %u tokens, start %llu (%s), %u slots", p->n_ids,
		   (unsigned long long)d->po.start, cache_tier_name(d->po.tier),
		   ns);
	cd_send(d, SOCK_ENG, &r);
}

static void on_commit(cd *d, uint32_t pipe, const proto_msg *m)
{
	if (engine_check(d, pipe, m))
		return;
	if (!d->plan_open) {
		cd_reply_err(d, SOCK_ENG, m->h.req, MOOR_EFORMAT,
			     "COMMIT without an open plan");
		return;
	}
	d->plan_open = 0;
	const proto_commit *c = &m->u.commit;
	cache_mark hid[64];
	uint32_t nh = 0;
	for (uint32_t i = 0; i < c->n_marks && nh < 64; i++)
		if (c->marks[i].kind == PROTO_MARK_HIDDEN)
			hid[nh++] =
			    (cache_mark){c->marks[i].start, c->marks[i].len,
					 CACHE_MARK_HIDDEN};
	/* the generated ids follow the prompt's: salted at their positions */
	cache_salt_ids(c->ids, c->n_ids, d->plan_n, d->plan_salt);
	int rc =
	    cache_commit_marks(d->c, c->n_filled, c->ids, c->n_ids, hid, nh);
	if (rc) {
		cd_reply_err(d, SOCK_ENG, m->h.req, rc, "COMMIT: %s",
			     moor_strerror(rc));
		return;
	}
	if (!d->plan_scratch)
		d->n_commit++;
	cd_reply_ok(d, SOCK_ENG, m->h.req);
}

static void on_abort(cd *d, uint32_t pipe, const proto_msg *m)
{
	if (engine_check(d, pipe, m))
		return;
	if (!d->plan_open) {
		cd_reply_err(d, SOCK_ENG, m->h.req, MOOR_EFORMAT,
			     "ABORT without an open plan");
		return;
	}
	d->plan_open = 0;
	int rc = cache_abort(d->c, m->u.abort_.n_filled, m->u.abort_.valid);
	if (rc) {
		cd_reply_err(d, SOCK_ENG, m->h.req, rc, "ABORT: %s",
			     moor_strerror(rc));
		return;
	}
	if (!d->plan_scratch)
		d->n_abort++;
	cd_reply_ok(d, SOCK_ENG, m->h.req);
}

/* ===================================================================== */
/* admin requests                                                        */

static void on_stats(cd *d, const proto_msg *m)
{
	char *core = cache_stats_json(d->c);
	if (!core) {
		cd_reply_err(d, SOCK_ADMIN, m->h.req, -ENOMEM,
			     "STATS: no memory");
		return;
	}
	json_error_t je;
	json_t *o = json_loads(core, 0, &je);
	free(core);
	if (!o || !json_is_object(o)) {
		json_decref(o);
		cd_reply_err(d, SOCK_ADMIN, m->h.req, MOOR_EFORMAT,
			     "STATS: the core's JSON does not parse: %s",
			     je.text);
		return;
	}
	char fh[17] = "";
	if (d->have_fp)
		moor_hex(d->fp, 8, fh);
	json_object_set_new(
	    o, "daemon",
	    json_pack("{s:i, s:s, s:f, s:b, s:i, s:s, s:b, s:I, s:I, s:I, "
		      "s:I, s:I, s:I, s:I, s:I}",
		      "pid", (int)getpid(), "run_dir", d->run_dir, "uptime_s",
		      moor_now() - d->t_start, "engine", d->eng_pipe != 0,
		      "engine_pid", (int)d->eng_pid, "fingerprint", fh,
		      "plan_open", d->plan_open, "messages",
		      (json_int_t)d->n_msgs, "errors", (json_int_t)d->n_errors,
		      "hello", (json_int_t)d->n_hello, "plan",
		      (json_int_t)d->n_plan, "commit", (json_int_t)d->n_commit,
		      "abort", (json_int_t)d->n_abort, "peek",
		      (json_int_t)d->n_peek, "scratch",
		      (json_int_t)d->n_scratch));
	int seen = d->n_hello > 0;
	json_object_set_new(
	    o, "engine",
	    json_pack(
		"{s:b, s:o, s:o, s:o}", "attached",
		seen && atomic_load(&cd_eng_pipe_live) == d->eng_pipe, "pid",
		seen ? json_integer(d->eng_pid) : json_null(), "window",
		seen ? json_integer((json_int_t)d->eng_window) : json_null(),
		"grid", seen ? json_integer(d->eng_grid) : json_null()));
	char *text = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER);
	json_decref(o);
	if (!text) {
		cd_reply_err(d, SOCK_ADMIN, m->h.req, -ENOMEM,
			     "STATS: no memory");
		return;
	}
	proto_msg r = {0};
	r.h.type = PROTO_STATS_OK;
	r.h.req = m->h.req;
	r.u.text.text = text;
	size_t len = strlen(text);
	int rc =
	    proto_send(d->sock[SOCK_ADMIN], &r, (nng_pipe)NNG_PIPE_INITIALIZER);
	free(text);
	if (rc == MOOR_ERANGE)
		cd_reply_err(d, SOCK_ADMIN, m->h.req, rc,
			     "STATS: %zu bytes of JSON do not fit one message",
			     len);
}

static void on_clear(cd *d, const proto_msg *m)
{
	const char *t = m->u.clear.tier ? m->u.clear.tier : "";
	if (!t[0])
		t = "ram";
	if (!proto_clear_tier_ok(t)) {
		cd_reply_err(
		    d, SOCK_ADMIN, m->h.req, MOOR_ERANGE,
		    "CLEAR: unknown tier '%.64s' (" PROTO_CLEAR_TIER_LIST ")",
		    t);
		return;
	}
	int rc = cache_clear(d->c, t);
	if (rc == MOOR_EUNSUP) {
		/* a tier this cached runs without (cache.h): refused, so
		 * that no client reports a clear that emptied nothing; the
		 * reason is the flag that left it out */
		const char *what =
		    !strcmp(t, "disk") ? "no disk tier" : "no session spill";
		const char *why =
		    !d->cfg.spill_dir[0] ? "cached runs without --disk-dir"
		    : !strcmp(t, "disk") && !d->cfg.disk_on
			? "cached runs with --disk-cache off"
			: "the tier did not open at start (cached's log says "
			  "why)";
		cd_reply_err(d, SOCK_ADMIN, m->h.req, rc,
			     "CLEAR %s: %s: %s; nothing cleared", t, what, why);
		return;
	}
	if (rc) {
		cd_reply_err(d, SOCK_ADMIN, m->h.req, rc, "CLEAR %s: %s", t,
			     moor_strerror(rc));
		return;
	}
	moor_info("cleared %s", t);
	cd_reply_ok(d, SOCK_ADMIN, m->h.req);
}

/* END_GET: the end anchor's record for gatewayd's end alignment (cache.h
 * cache_end_get); the reply borrows the cache's arrays until it is sent. */
static void on_end_get(cd *d, const proto_msg *m)
{
	const proto_end_get *p = &m->u.end_get;
	cache_end_out o;
	cache_salt_ids(p->ids, p->n_ids, 0, p->salt);
	cache_end_get(d->c, p->ids, p->n_ids, &o);
	proto_msg r = {0};
	r.h.type = PROTO_END_OK;
	r.h.req = m->h.req;
	proto_end_ok *e = &r.u.end_ok;
	proto_mark *mk = NULL;
	int32_t *ids = NULL;
	/* a copy that shares not even its first id with the record is
	 * another conversation's copy, and with salts another tenant's: the
	 * record's ids are not handed over (salted, they would come back as
	 * ids of no vocabulary) */
	if (o.tier != CACHE_TIER_NONE && o.common == 0)
		o.tier = CACHE_TIER_NONE;
	if (o.tier != CACHE_TIER_NONE) {
		e->tier = (uint32_t)o.tier;
		e->common = o.common;
		e->end = o.end;
		e->n_ids = (uint32_t)(o.end - o.common);
		e->ids = (int32_t *)o.rows + o.common;
		if (p->salt && e->n_ids) {
			/* the rows' ids go back as the gateway's tokens */
			ids = malloc((size_t)e->n_ids * sizeof *ids);
			if (!ids) {
				cd_reply_err(d, SOCK_ADMIN, m->h.req, -ENOMEM,
					     "END_GET: no memory");
				return;
			}
			memcpy(ids, e->ids, (size_t)e->n_ids * sizeof *ids);
			cache_salt_ids(ids, e->n_ids, o.common, p->salt);
			e->ids = ids;
		}
		mk = o.n_marks ? calloc(o.n_marks, sizeof *mk) : NULL;
		for (uint32_t i = 0; mk && i < o.n_marks; i++)
			mk[i] = (proto_mark){o.marks[i].start, o.marks[i].len,
					     o.marks[i].kind};
		e->n_marks = mk ? o.n_marks : 0;
		e->marks = mk;
	}
	cd_send(d, SOCK_ADMIN, &r);
	free(mk);
	free(ids);
}

static void on_peek(cd *d, const proto_msg *m)
{
	const proto_peek *p = &m->u.peek;
	cache_salt_ids(p->ids, p->n_ids, 0, p->salt);
	cache_req q = {
	    .ids = p->ids,
	    .n = p->n_ids,
	    .session =
		cache_salt_session(p->session, p->salt, d->salted_session,
				   sizeof d->salted_session),
	    .max_tokens = 0,
	    .no_cache = 0,
	};
	cache_peek_out o;
	char why[MOOR_ERRLEN] = "";
	int rc = cache_peek(d->c, &q, &o, why);
	if (rc) {
		cd_reply_err(d, SOCK_ADMIN, m->h.req, rc,
			     "PEEK of %u tokens: %s", p->n_ids,
			     why[0] ? why : moor_strerror(rc));
		return;
	}
	d->n_peek++;
	proto_msg r = {0};
	r.h.type = PROTO_PEEK_OK;
	r.h.req = m->h.req;
	r.u.peek_ok.tier = (uint32_t)o.tier;
	r.u.peek_ok.cached = o.start;
	r.u.peek_ok.tokens = p->n_ids;
	r.u.peek_ok.taint = o.taint;
	r.u.peek_ok.restore_bytes = o.restore_bytes;
	r.u.peek_ok.read_us = o.read_us;
	moor_debug("peek: %u tokens, %s at %llu%s", p->n_ids,
		   cache_tier_name(o.tier), (unsigned long long)o.start,
		   o.gives_back ? " (the plan would give caches back first)"
				: "");
	cd_send(d, SOCK_ADMIN, &r);
}

void cd_handle(cd *d, int w, nng_msg *nm)
{
	const uint8_t *b = nng_msg_body(nm);
	size_t len = nng_msg_len(nm);
	uint32_t pipe = nng_pipe_id(nng_msg_get_pipe(nm));
	d->n_msgs++;
	if (len > (size_t)PROTO_HDR_SIZE + PROTO_MAX_PAYLOAD) {
		cd_reply_bad(d, w, b, len, MOOR_EFORMAT);
		return;
	}
	proto_msg m;
	int rc = proto_decode(b, len, &m);
	if (rc) {
		proto_msg_fini(&m);
		cd_reply_bad(d, w, b, len, rc);
		return;
	}
	uint16_t t = m.h.type;
	if (w == SOCK_ENG) {
		switch (t) {
		case PROTO_HELLO:
			on_hello(d, pipe, &m);
			break;
		case PROTO_PLAN:
			on_plan(d, pipe, &m);
			break;
		case PROTO_COMMIT:
			on_commit(d, pipe, &m);
			break;
		case PROTO_ABORT:
			on_abort(d, pipe, &m);
			break;
		default:
			cd_reply_err(
			    d, w, m.h.req, MOOR_EUNSUP,
			    "%s (type %u) is not served on cached.sock "
			    "(HELLO, PLAN, COMMIT, ABORT)",
			    proto_type_name(t), t);
		}
	} else {
		switch (t) {
		case PROTO_STATS:
			on_stats(d, &m);
			break;
		case PROTO_CLEAR:
			on_clear(d, &m);
			break;
		case PROTO_PEEK:
			on_peek(d, &m);
			break;
		case PROTO_END_GET:
			on_end_get(d, &m);
			break;
		default:
			cd_reply_err(d, w, m.h.req, MOOR_EUNSUP,
				     "%s (type %u) is not served on admin.sock "
				     "(STATS, CLEAR, PEEK, END_GET)",
				     proto_type_name(t), t);
		}
	}
	proto_msg_fini(&m);
}
