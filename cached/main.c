/* main.c: cached, the state broker daemon. It owns the cache core (cache.h)
 * and its two arenas, and serves it over NNG:
 *
 *   ipc://RUN/cached.sock  REP  HELLO, PLAN, COMMIT, ABORT   (engined)
 *   ipc://RUN/admin.sock   REP  STATS, CLEAR, PEEK           (moorctl, gw)
 *
 * One thread: the core is single-threaded, so one poll() loop over both
 * sockets' receive descriptors and a signalfd serves one request at a time
 * to completion. A message that is not a well-formed request of this
 * socket's kinds (short, oversized, another version, a type this socket
 * does not serve, a payload that does not decode) is answered PROTO_ERROR
 * naming what was wrong; cached never exits on a request path.
 *
 * The engine: the pipe that last HELLOed is the attached engine, and PLAN,
 * COMMIT and ABORT from any other pipe are refused with -ENOTCONN (an
 * engined that finds cached restarted HELLOs again). A plan left open by an
 * engine that died is aborted before the next HELLO is served, with only
 * the rows it restored counted valid.
 *
 * STATS adds to the core's JSON a "daemon" object and an "engine" object,
 * {"attached", "pid", "window", "grid"}: the last HELLO's pid, window and
 * grid (null before any), and whether that engine's connection is still
 * up (NNG's pipe events, on NNG's thread: one atomic word).
 *
 * PEEK answers what a PLAN of the same ids would (cache_peek): nothing
 * changes, nothing is counted but the message and, if refused, the error.
 *
 * The device arena (--device auto|shm|cuda): shm for the CPU backend, or
 * cudaMalloc'ed on --gpu N and handed to the engine as a CUDA IPC handle
 * (arena_cuda.c); auto takes CUDA when this build has it and the GPU
 * answers. On CUDA the mover's copies run on a stream: every reply on
 * cached.sock waits for them first (cache_sync), so the engine never reads
 * bytes cached is still writing.
 *
 * SIGTERM/SIGINT: the request in hand is answered, then the drain: an open
 * plan is aborted to its start and the resident conversation is written to
 * the session spill (--disk-dir), which the next cached reads back when an
 * engine of the same fingerprint attaches; then the sockets and the arenas'
 * shm objects are unlinked and cached exits 0.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>
#include <nng/nng.h>
#include <nng/protocol/reqrep0/rep.h>
#include <xxhash.h>

#include "arena.h"
#include "cache.h"
#include "moor.h"
#include "net.h"
#include "proto.h"
#include "salt.h"
#include "util.h"

/* ===================================================================== */
/* the daemon's state                                                    */

enum { SOCK_ENG = 0, SOCK_ADMIN = 1 };

typedef struct cd {
	cache *c;
	cache_cfg cfg;
	char run_dir[256];
	char path[2][300];
	char url[2][320];
	nng_socket sock[2];
	int open[2];
	double t_start;

	/* the attached engine */
	uint32_t eng_pipe; /* nng_pipe id; 0: none */
	uint32_t eng_pid;
	uint64_t eng_window;
	uint32_t eng_grid;
	uint8_t fp[32];
	int have_fp;
	int plan_open;
	int plan_scratch; /* the open plan is a scratch run's */
	uint64_t plan_start;
	uint64_t plan_n, plan_salt; /* the open plan's prompt, its salt */
	char salted_session[PROTO_MAX_STR + 20];

	/* --device, --gpu; whether --unified was given */
	const char *dev_mode;
	uint32_t gpu;
	int unified_set;
	int dev_gb_set, host_gb_set; /* the arena sizes were given */

	/* counters */
	uint64_t n_msgs, n_errors, n_hello, n_plan, n_commit, n_abort, n_peek;
	uint64_t n_scratch; /* scratch runs planned (the compaction preparer) */

	/* big scratch, carved once */
	cache_layout lay;
	cache_hello_out ho;
	cache_plan_out po;
	uint64_t sec_off[CACHE_MAX_SECTIONS], view_off[CACHE_MAX_VIEWS];
	proto_slot slots[CACHE_MAX_SLOTS];
} cd;

/* The attached engine's pipe while its connection is up; 0 once it is
 * gone. Written by the HELLO handler and by NNG's pipe callback. */
static _Atomic uint32_t eng_pipe_live;

static void on_pipe_gone(nng_pipe p, nng_pipe_ev ev, void *arg)
{
	(void)ev;
	(void)arg;
	uint32_t id = nng_pipe_id(p);
	atomic_compare_exchange_strong(&eng_pipe_live, &id, 0);
}

/* ===================================================================== */
/* replies                                                               */

static int send_msg(cd *d, int w, proto_msg *m)
{
	/* the engine may read what this request copied once it hears back
	 * (an error too: a plan that failed half way copied some) */
	if (w == SOCK_ENG) {
		int sr = cache_sync(d->c);
		if (sr && m->h.type != PROTO_ERROR) {
			proto_msg e = {0};
			e.h.type = PROTO_ERROR;
			e.h.req = m->h.req;
			e.u.error.code = sr;
			e.u.error.msg = "cached: the device copies of this "
					"request failed";
			moor_err("%s: %s", proto_type_name(m->h.type),
				 e.u.error.msg);
			m = &e;
			int rc = proto_send(d->sock[w], m,
					    (nng_pipe)NNG_PIPE_INITIALIZER);
			return rc ? rc : sr;
		}
	}
	int rc = proto_send(d->sock[w], m, (nng_pipe)NNG_PIPE_INITIALIZER);
	if (rc)
		moor_warn("%s: reply %s: %s", d->url[w],
			  proto_type_name(m->h.type), moor_strerror(rc));
	return rc;
}

static void reply_ok(cd *d, int w, uint64_t req)
{
	proto_msg m = {0};
	m.h.type = PROTO_OK;
	m.h.req = req;
	send_msg(d, w, &m);
}

static void reply_err(cd *d, int w, uint64_t req, int code, const char *fmt,
		      ...) __attribute__((format(printf, 5, 6)));
static void reply_err(cd *d, int w, uint64_t req, int code, const char *fmt,
		      ...)
{
	char text[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(text, sizeof text, fmt, ap);
	va_end(ap);
	d->n_errors++;
	moor_info("%s: refused: %s",
		  w == SOCK_ENG ? "cached.sock" : "admin.sock", text);
	proto_send_error(d->sock[w], (nng_pipe)NNG_PIPE_INITIALIZER, req, code,
			 "%s", text);
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
static void close_open_plan(cd *d, const char *why)
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
		reply_err(d, SOCK_ENG, m->h.req, rc, "HELLO: bad layout: %s",
			  why);
		return;
	}
	close_open_plan(d, d->eng_pipe && d->eng_pipe != pipe
			       ? "a new engined attaches"
			       : "HELLO with a plan open");
	int had = d->have_fp, same = had && !memcmp(d->fp, h->fingerprint, 32);
	if (had)
		moor_hex(d->fp, 8, old);
	why[0] = 0;
	rc = cache_hello(d->c, &d->lay, &d->ho, why);
	if (rc) {
		reply_err(d, SOCK_ENG, m->h.req, rc, "HELLO: %s",
			  why[0] ? why : moor_strerror(rc));
		return;
	}
	d->n_hello++;
	d->eng_pipe = pipe;
	atomic_store(&eng_pipe_live, pipe);
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
	send_msg(d, SOCK_ENG, &r);
}

/* PLAN, COMMIT and ABORT come from the engine that HELLOed on this pipe. */
static int engine_check(cd *d, uint32_t pipe, const proto_msg *m)
{
	if (d->eng_pipe && d->eng_pipe == pipe)
		return 0;
	reply_err(d, SOCK_ENG, m->h.req, -ENOTCONN,
		  "%s before HELLO: no engine is attached on this connection",
		  proto_type_name(m->h.type));
	return -ENOTCONN;
}

static void on_plan(cd *d, uint32_t pipe, const proto_msg *m)
{
	if (engine_check(d, pipe, m))
		return;
	const proto_plan *p = &m->u.plan;
	close_open_plan(d, "PLAN with a plan open");
	/* the decoded ids are this handler's own: salted in place */
	cache_salt_ids(p->ids, p->n_ids, 0, p->salt);
	cache_req q = {
	    .ids = p->ids,
	    .n = p->n_ids,
	    .session = cache_salt_session(p->session, p->salt,
					  d->salted_session,
					  sizeof d->salted_session),
	    .max_tokens = p->max_tokens,
	    .no_cache = (p->flags & PROTO_PLAN_NO_CACHE) != 0,
	};
	char why[MOOR_ERRLEN] = "";
	int scratch = (p->flags & PROTO_PLAN_SCRATCH) != 0;
	int rc = scratch ? cache_scratch_plan(d->c, &q, &d->po, why)
			 : cache_plan(d->c, &q, &d->po, why);
	if (rc) {
		reply_err(d, SOCK_ENG, m->h.req, rc, "PLAN of %u tokens: %s",
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
	send_msg(d, SOCK_ENG, &r);
}

static void on_commit(cd *d, uint32_t pipe, const proto_msg *m)
{
	if (engine_check(d, pipe, m))
		return;
	if (!d->plan_open) {
		reply_err(d, SOCK_ENG, m->h.req, MOOR_EFORMAT,
			  "COMMIT without an open plan");
		return;
	}
	d->plan_open = 0;
	const proto_commit *c = &m->u.commit;
	cache_mark hid[64];
	uint32_t nh = 0;
	for (uint32_t i = 0; i < c->n_marks && nh < 64; i++)
		if (c->marks[i].kind == PROTO_MARK_HIDDEN)
			hid[nh++] = (cache_mark){c->marks[i].start,
						 c->marks[i].len,
						 CACHE_MARK_HIDDEN};
	/* the generated ids follow the prompt's: salted at their positions */
	cache_salt_ids(c->ids, c->n_ids, d->plan_n, d->plan_salt);
	int rc = cache_commit_marks(d->c, c->n_filled, c->ids, c->n_ids,
				    hid, nh);
	if (rc) {
		reply_err(d, SOCK_ENG, m->h.req, rc, "COMMIT: %s",
			  moor_strerror(rc));
		return;
	}
	if (!d->plan_scratch)
		d->n_commit++;
	reply_ok(d, SOCK_ENG, m->h.req);
}

static void on_abort(cd *d, uint32_t pipe, const proto_msg *m)
{
	if (engine_check(d, pipe, m))
		return;
	if (!d->plan_open) {
		reply_err(d, SOCK_ENG, m->h.req, MOOR_EFORMAT,
			  "ABORT without an open plan");
		return;
	}
	d->plan_open = 0;
	int rc = cache_abort(d->c, m->u.abort_.n_filled, m->u.abort_.valid);
	if (rc) {
		reply_err(d, SOCK_ENG, m->h.req, rc, "ABORT: %s",
			  moor_strerror(rc));
		return;
	}
	if (!d->plan_scratch)
		d->n_abort++;
	reply_ok(d, SOCK_ENG, m->h.req);
}

/* ===================================================================== */
/* admin requests                                                        */

static void on_stats(cd *d, const proto_msg *m)
{
	char *core = cache_stats_json(d->c);
	if (!core) {
		reply_err(d, SOCK_ADMIN, m->h.req, -ENOMEM, "STATS: no memory");
		return;
	}
	json_error_t je;
	json_t *o = json_loads(core, 0, &je);
	free(core);
	if (!o || !json_is_object(o)) {
		json_decref(o);
		reply_err(d, SOCK_ADMIN, m->h.req, MOOR_EFORMAT,
			  "STATS: the core's JSON does not parse: %s", je.text);
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
	    json_pack("{s:b, s:o, s:o, s:o}", "attached",
		      seen && atomic_load(&eng_pipe_live) == d->eng_pipe, "pid",
		      seen ? json_integer(d->eng_pid) : json_null(), "window",
		      seen ? json_integer((json_int_t)d->eng_window)
			   : json_null(),
		      "grid", seen ? json_integer(d->eng_grid) : json_null()));
	char *text = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER);
	json_decref(o);
	if (!text) {
		reply_err(d, SOCK_ADMIN, m->h.req, -ENOMEM, "STATS: no memory");
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
		reply_err(d, SOCK_ADMIN, m->h.req, rc,
			  "STATS: %zu bytes of JSON do not fit one message",
			  len);
}

static void on_clear(cd *d, const proto_msg *m)
{
	const char *t = m->u.clear.tier ? m->u.clear.tier : "";
	if (!t[0])
		t = "ram";
	if (!proto_clear_tier_ok(t)) {
		reply_err(d, SOCK_ADMIN, m->h.req, MOOR_ERANGE,
			  "CLEAR: unknown tier '%.64s' (" PROTO_CLEAR_TIER_LIST
			  ")",
			  t);
		return;
	}
	int rc = cache_clear(d->c, t);
	if (rc) {
		reply_err(d, SOCK_ADMIN, m->h.req, rc, "CLEAR %s: %s", t,
			  moor_strerror(rc));
		return;
	}
	moor_info("cleared %s", t);
	reply_ok(d, SOCK_ADMIN, m->h.req);
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
				reply_err(d, SOCK_ADMIN, m->h.req, -ENOMEM,
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
	send_msg(d, SOCK_ADMIN, &r);
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
	    .session = cache_salt_session(p->session, p->salt,
					  d->salted_session,
					  sizeof d->salted_session),
	    .max_tokens = 0,
	    .no_cache = 0,
	};
	cache_peek_out o;
	char why[MOOR_ERRLEN] = "";
	int rc = cache_peek(d->c, &q, &o, why);
	if (rc) {
		reply_err(d, SOCK_ADMIN, m->h.req, rc, "PEEK of %u tokens: %s",
			  p->n_ids, why[0] ? why : moor_strerror(rc));
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
	moor_debug("peek: %u tokens, %s at %llu%s", p->n_ids,
		   cache_tier_name(o.tier), (unsigned long long)o.start,
		   o.gives_back ? " (the plan would give caches back first)"
				: "");
	send_msg(d, SOCK_ADMIN, &r);
}

/* ===================================================================== */
/* one message                                                           */

static uint32_t rd32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
	       (uint32_t)p[3] << 24;
}

static uint64_t rd64(const uint8_t *p)
{
	return (uint64_t)rd32(p) | (uint64_t)rd32(p + 4) << 32;
}

/* Answers a message that did not decode, saying why. */
static void reply_bad(cd *d, int w, const uint8_t *b, size_t len, int rc)
{
	if (len < PROTO_HDR_SIZE) {
		reply_err(d, w, 0, MOOR_EFORMAT,
			  "truncated message: %zu bytes, shorter than the "
			  "%d-byte header",
			  len, PROTO_HDR_SIZE);
		return;
	}
	uint32_t magic = rd32(b), plen = rd32(b + 8);
	uint16_t version = (uint16_t)(b[4] | b[5] << 8);
	uint16_t type = (uint16_t)(b[6] | b[7] << 8);
	uint64_t req = rd64(b + 16);
	if (magic != PROTO_MAGIC)
		reply_err(d, w, req, MOOR_EFORMAT,
			  "bad magic 0x%08x: not a moor message", magic);
	else if (version != PROTO_VERSION)
		reply_err(d, w, req, MOOR_EVERSION,
			  "protocol version %u; this cached speaks version %d",
			  version, PROTO_VERSION);
	else if (plen > PROTO_MAX_PAYLOAD)
		reply_err(d, w, req, MOOR_EFORMAT,
			  "oversized message: a %u-byte payload, the limit is "
			  "%u",
			  plen, PROTO_MAX_PAYLOAD);
	else if ((size_t)plen != len - PROTO_HDR_SIZE)
		reply_err(
		    d, w, req, MOOR_EFORMAT,
		    "truncated message: the header says %u payload bytes, "
		    "%zu came",
		    plen, len - PROTO_HDR_SIZE);
	else if (!strcmp(proto_type_name(type), "unknown"))
		reply_err(d, w, req, MOOR_EFORMAT, "unknown message type %u",
			  type);
	else
		reply_err(d, w, req, rc == MOOR_EVERSION ? rc : MOOR_EFORMAT,
			  "malformed %s payload (%u bytes): a field runs past "
			  "the payload, a count or string is over its limit, "
			  "or bytes are left after the last field",
			  proto_type_name(type), plen);
}

static void handle(cd *d, int w, nng_msg *nm)
{
	const uint8_t *b = nng_msg_body(nm);
	size_t len = nng_msg_len(nm);
	uint32_t pipe = nng_pipe_id(nng_msg_get_pipe(nm));
	d->n_msgs++;
	if (len > (size_t)PROTO_HDR_SIZE + PROTO_MAX_PAYLOAD) {
		reply_err(d, w, len >= PROTO_HDR_SIZE ? rd64(b + 16) : 0,
			  MOOR_EFORMAT,
			  "oversized message: %zu bytes, the limit is %u", len,
			  PROTO_HDR_SIZE + PROTO_MAX_PAYLOAD);
		return;
	}
	proto_msg m;
	int rc = proto_decode(b, len, &m);
	if (rc) {
		proto_msg_fini(&m);
		reply_bad(d, w, b, len, rc);
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
			reply_err(d, w, m.h.req, MOOR_EUNSUP,
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
			reply_err(d, w, m.h.req, MOOR_EUNSUP,
				  "%s (type %u) is not served on admin.sock "
				  "(STATS, CLEAR, PEEK, END_GET)",
				  proto_type_name(t), t);
		}
	}
	proto_msg_fini(&m);
}

/* ===================================================================== */
/* start, loop, stop                                                     */

static int run_dir_make(const char *dir)
{
	char tmp[PATH_MAX];
	snprintf(tmp, sizeof tmp, "%s", dir);
	for (char *p = tmp + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = 0;
		if (mkdir(tmp, 0700) && errno != EEXIST)
			return -errno;
		*p = '/';
	}
	if (mkdir(tmp, 0700) && errno != EEXIST)
		return -errno;
	struct stat st;
	if (stat(tmp, &st))
		return -errno;
	if (!S_ISDIR(st.st_mode))
		return -ENOTDIR;
	return 0;
}

static int sock_open(cd *d, int w)
{
	if (strlen(d->path[w]) >= sizeof(((struct sockaddr_un *)0)->sun_path)) {
		moor_err("%s: a socket path must be under 108 bytes",
			 d->path[w]);
		return -ENAMETOOLONG;
	}
	if (unlink(d->path[w]) == 0)
		moor_info("replaced a stale %s", d->path[w]);
	int rv = nng_rep0_open(&d->sock[w]);
	if (rv)
		return proto_nng_err(rv);
	d->open[w] = 1;
	if (w == SOCK_ENG)
		nng_pipe_notify(d->sock[w], NNG_PIPE_EV_REM_POST, on_pipe_gone,
				NULL);
	/* Larger than any valid message, so an oversized one still arrives
	 * and is answered (NNG drops the pipe of one over this limit). */
	nng_socket_set_size(d->sock[w], NNG_OPT_RECVMAXSZ,
			    4 * ((size_t)PROTO_HDR_SIZE + PROTO_MAX_PAYLOAD));
	nng_socket_set_ms(d->sock[w], NNG_OPT_SENDTIMEO, 5000);
	/* the socket file is 0600 from its creation (no chmod after) */
	rv = proto_listen_private(d->sock[w], d->url[w]);
	if (rv) {
		moor_err("listen %s: %s", d->url[w], moor_strerror(rv));
		return rv;
	}
	return 0;
}

static int serve(cd *d)
{
	sigset_t set;
	sigemptyset(&set);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGHUP); /* a hangup stops cleanly, as SIGTERM */
	int sfd = signalfd(-1, &set, SFD_CLOEXEC);
	if (sfd < 0)
		return -errno;
	struct pollfd pf[3];
	for (int w = 0; w < 2; w++) {
		int fd;
		int rv = nng_socket_get_int(d->sock[w], NNG_OPT_RECVFD, &fd);
		if (rv) {
			close(sfd);
			return proto_nng_err(rv);
		}
		pf[w] = (struct pollfd){.fd = fd, .events = POLLIN};
	}
	pf[2] = (struct pollfd){.fd = sfd, .events = POLLIN};
	for (;;) {
		if (poll(pf, 3, -1) < 0) {
			if (errno == EINTR)
				continue;
			moor_err("poll: %s", strerror(errno));
			break;
		}
		if (pf[2].revents) {
			struct signalfd_siginfo si;
			if (read(sfd, &si, sizeof si) > 0)
				moor_info("%s: stopping",
					  strsignal((int)si.ssi_signo));
			break;
		}
		for (int w = 0; w < 2; w++) {
			if (!pf[w].revents)
				continue;
			nng_msg *nm;
			int rv =
			    nng_recvmsg(d->sock[w], &nm, NNG_FLAG_NONBLOCK);
			if (rv == NNG_EAGAIN)
				continue;
			if (rv) {
				moor_warn("%s: receive: %s", d->url[w],
					  nng_strerror(rv));
				continue;
			}
			handle(d, w, nm);
			nng_msg_free(nm);
		}
	}
	close(sfd);
	/* NNG drops what a closing socket has not written yet: give the last
	 * reply a moment to leave */
	struct timespec grace = {0, 50 * 1000 * 1000};
	nanosleep(&grace, NULL);
	return 0;
}

/* ---- flags ---- */

static void usage(FILE *f)
{
	fprintf(
	    f,
	    "usage: cached [--run-dir DIR] [options]\n"
	    "  --run-dir DIR            sockets (default $XDG_RUNTIME_DIR/moor "
	    "or /tmp/moor-$UID)\n"
	    "  --arena-prefix NAME      shm names /NAME.dev, /NAME.host "
	    "(default: from the run dir)\n"
	    "arenas and memory (GiB, fractions allowed):\n"
	    "  --device-gb G  --host-gb G  --mem-ceiling-gb G  "
	    "--mem-peak-gb G\n"
	    "      the arenas (24 and 12 GiB) must fit /dev/shm and the "
	    "memory: sizes given\n"
	    "      that do not are refused; defaults that do not are sized "
	    "to half the room\n"
	    "resident prefix:\n"
	    "  --resident-gb G (2.5)  --resident-keep N (4)  --pin-every N "
	    "(4096)  --pin-upto N (32768)\n"
	    "guest stash:\n"
	    "  --resident-guest-max N (8192)  --guest-margin N (512)  "
	    "--resident-stash-gb G (1)\n"
	    "pin and park:\n"
	    "  --resident-pin-gb G (4)  --pin-anchors N (8)  "
	    "--resident-park-gb G (4)  --park-anchors N (4)\n"
	    "end anchor:  --end-anchor on|off (on)\n"
	    "state store:\n"
	    "  --cache-gb G (CACHE_GB, 2)  --store-entry-gb G (1)  "
	    "--store-boundaries N (1)  --store-sessions on|off (on)\n"
	    "  --unified on|off         the memory limits count both arenas "
	    "(one memory: the CPU backend;\n"
	    "                           default on with a shm device arena, "
	    "off on CUDA)\n"
	    "  --device auto|shm|cuda   the device arena: shm (the CPU "
	    "backend) or cudaMalloc'ed\n"
	    "                           on the GPU (auto: CUDA when built and "
	    "present)\n"
	    "  --gpu N                  the GPU of a CUDA device arena "
	    "(default 0)\n"
	    "NVMe tiers:\n"
	    "  --disk-dir DIR           the tiers' directory (the session "
	    "spill in DIR/sessions); default none: off\n"
	    "  --session-spill-gb G (64)  --session-spill-hours N (48)  "
	    "--session-spill-min-tokens N (16384)\n"
	    "  --spill-codec on|off (on: byte planes + zstd)  --codec-threads "
	    "N (8)\n"
	    "  --disk-cache on|off      the disk tier in DIR/disk (on with "
	    "--disk-dir)\n"
	    "  --disk-cache-gb G (16)  --disk-cache-days N (7)  "
	    "--disk-cache-min-free-gb G (50)\n"
	    "  --disk-cache-admit-after N (2)  --disk-cache-head-anchors N "
	    "(4)  --disk-cache-min-tokens N (4096)\n"
	    "  --disk-write-budget-gb G (200)  the drive writes of a day "
	    "(tier and spill): past it the\n"
	    "                           tier writes nothing and the spill "
	    "the drain and long evictions\n"
	    "                           only; past 1.5 times it the drain "
	    "only (0: no budget)\n"
	    "  --adopt-from FP          read the files of this older "
	    "fingerprint (16 to 64 hex digits)\n"
	    "                           as the attached engine's (recorded "
	    "in DIR/ledger, logged)\n"
	    "  --prefill-tps N (740)    the engine's prefill rate until one "
	    "is measured\n"
	    "  --log-level error|warn|info|debug\n");
}

static int parse_gb(const char *s, uint64_t *out)
{
	char *end;
	errno = 0;
	double v = strtod(s, &end);
	if (end == s || *end || errno || !(v >= 0) || v > 1 << 20)
		return -1;
	*out = (uint64_t)llround(v * (double)(1ull << 30));
	return 0;
}

static int parse_onoff(const char *s, int *out)
{
	if (!strcmp(s, "on") || !strcmp(s, "1") || !strcmp(s, "true"))
		*out = 1;
	else if (!strcmp(s, "off") || !strcmp(s, "0") || !strcmp(s, "false"))
		*out = 0;
	else
		return -1;
	return 0;
}

/* In the order of parse_args' option table, which the error message of a
 * bad value indexes. */
enum {
	O_RUN = 256,
	O_PREFIX,
	O_DEV,
	O_HOST,
	O_CEIL,
	O_PEAK,
	O_RES,
	O_KEEP,
	O_PIN_EVERY,
	O_PIN_UPTO,
	O_GUEST,
	O_MARGIN,
	O_STASH,
	O_PIN,
	O_PIN_N,
	O_PARK,
	O_PARK_N,
	O_END,
	O_STORE,
	O_ENTRY,
	O_BOUND,
	O_SESS,
	O_UNIFIED,
	O_DEVICE,
	O_GPU,
	O_DISK_DIR,
	O_SPILL_GB,
	O_SPILL_H,
	O_SPILL_MIN,
	O_CODEC,
	O_CODEC_T,
	O_DISK_ON,
	O_DISK_GB,
	O_DISK_DAYS,
	O_DISK_FREE,
	O_DISK_ADMIT,
	O_DISK_HEAD,
	O_DISK_MIN,
	O_WRITE_BUDGET,
	O_ADOPT,
	O_PREFILL_TPS,
	O_LOG,
	O_HELP,
};

/* --device: where the device arena lives (cfg.dev_cuda), logged. */
static int device_pick(cd *d)
{
	const char *m = d->dev_mode ? d->dev_mode : "auto";
	char why[MOOR_ERRLEN] = "";
	int cuda = 0;
	if (!strcmp(m, "cuda")) {
		if (arena_cuda_probe((int)d->gpu, why)) {
			moor_err("--device cuda: %s", why);
			return -1;
		}
		cuda = 1;
	} else if (!strcmp(m, "auto")) {
		cuda = arena_cuda_probe((int)d->gpu, why) == 0;
	}
	d->cfg.dev_cuda = cuda ? (int)d->gpu : -1;
	if (cuda && !d->unified_set)
		d->cfg.unified = 0; /* device memory is not the host's */
	if (cuda)
		moor_info("device arena on CUDA (GPU %u, --device %s)", d->gpu,
			  m);
	else if (!strcmp(m, "auto"))
		moor_info("device arena in shm (--device auto: %s)", why);
	else
		moor_info("device arena in shm (--device shm)");
	return 0;
}

/* The shm arenas against /dev/shm and the machine's memory, before any is
 * created (arena.h: a sparse object past the filesystem's room is a
 * SIGBUS at its first write). Sizes given by flags that do not fit are
 * refused with the numbers; the defaults, when they do not fit, are sized
 * to half of the smaller of the free shm and the memory (the rest is for
 * engined's weights and workspace and the system), device : host 2 : 1,
 * and the log says so. Every block is still reserved when it is allocated
 * (posix_fallocate), so room that others take later is a refused cache. */
static int shm_fit(cd *d)
{
	uint64_t fs_free, fs_size, ram;
	int rc = arena_shm_room(&fs_free, &fs_size, &ram);
	if (rc) {
		moor_warn("statvfs /dev/shm: %s: the arenas are not checked "
			  "against its room",
			  moor_strerror(rc));
		return 0;
	}
	cache_cfg *c = &d->cfg;
	int dev_shm = c->dev_cuda < 0;
	const double G = (double)(1u << 30);
	uint64_t room = ram && ram < fs_free ? ram : fs_free;
	uint64_t need = c->host_bytes + (dev_shm ? c->device_bytes : 0);
	int given = d->host_gb_set || (dev_shm && d->dev_gb_set);
	if (need <= fs_free && (!ram || need <= ram))
		return 0;
	if (given) {
		moor_err("the arenas need %.2f GiB of shared memory (device "
			 "%.2f GiB%s, host %.2f GiB) but /dev/shm has %.2f GiB "
			 "free of %.2f GiB and the machine %.2f GiB of memory: "
			 "lower --device-gb / --host-gb, or give /dev/shm more "
			 "room (docker run --shm-size)",
			 need / G, c->device_bytes / G,
			 dev_shm ? "" : " on the GPU, not counted",
			 c->host_bytes / G, fs_free / G, fs_size / G, ram / G);
		return -1;
	}
	uint64_t budget = room / 2 / ARENA_ALIGN * ARENA_ALIGN;
	uint64_t host = dev_shm ? budget / 3 : budget;
	uint64_t dev = dev_shm ? budget - host : c->device_bytes;
	host = host / ARENA_ALIGN * ARENA_ALIGN;
	dev = dev / ARENA_ALIGN * ARENA_ALIGN;
	if (host < (16u << 20) || (dev_shm && dev < (16u << 20))) {
		moor_err("/dev/shm has %.3f GiB free (of %.3f GiB) and the "
			 "machine %.2f GiB of memory: too little for the "
			 "arenas (16 MiB each at least); give /dev/shm more "
			 "room (docker run --shm-size)",
			 fs_free / G, fs_size / G, ram / G);
		return -1;
	}
	moor_info("the default arenas (device %.2f GiB%s, host %.2f GiB) do "
		  "not fit /dev/shm (%.2f GiB free of %.2f GiB) and the "
		  "machine's %.2f GiB: sized to device %.3f GiB, host %.3f GiB "
		  "(half of the smaller; --device-gb / --host-gb choose)",
		  c->device_bytes / G, dev_shm ? "" : " on the GPU",
		  c->host_bytes / G, fs_free / G, fs_size / G, ram / G,
		  dev / G, host / G);
	c->device_bytes = dev;
	c->host_bytes = host;
	return 0;
}

static int parse_args(cd *d, int argc, char **argv, const char **prefix)
{
	static const struct option lo[] = {
	    {"run-dir", 1, 0, O_RUN},
	    {"arena-prefix", 1, 0, O_PREFIX},
	    {"device-gb", 1, 0, O_DEV},
	    {"host-gb", 1, 0, O_HOST},
	    {"mem-ceiling-gb", 1, 0, O_CEIL},
	    {"mem-peak-gb", 1, 0, O_PEAK},
	    {"resident-gb", 1, 0, O_RES},
	    {"resident-keep", 1, 0, O_KEEP},
	    {"pin-every", 1, 0, O_PIN_EVERY},
	    {"pin-upto", 1, 0, O_PIN_UPTO},
	    {"resident-guest-max", 1, 0, O_GUEST},
	    {"guest-margin", 1, 0, O_MARGIN},
	    {"resident-stash-gb", 1, 0, O_STASH},
	    {"resident-pin-gb", 1, 0, O_PIN},
	    {"pin-anchors", 1, 0, O_PIN_N},
	    {"resident-park-gb", 1, 0, O_PARK},
	    {"park-anchors", 1, 0, O_PARK_N},
	    {"end-anchor", 1, 0, O_END},
	    {"cache-gb", 1, 0, O_STORE},
	    {"store-entry-gb", 1, 0, O_ENTRY},
	    {"store-boundaries", 1, 0, O_BOUND},
	    {"store-sessions", 1, 0, O_SESS},
	    {"unified", 1, 0, O_UNIFIED},
	    {"device", 1, 0, O_DEVICE},
	    {"gpu", 1, 0, O_GPU},
	    {"disk-dir", 1, 0, O_DISK_DIR},
	    {"session-spill-gb", 1, 0, O_SPILL_GB},
	    {"session-spill-hours", 1, 0, O_SPILL_H},
	    {"session-spill-min-tokens", 1, 0, O_SPILL_MIN},
	    {"spill-codec", 1, 0, O_CODEC},
	    {"codec-threads", 1, 0, O_CODEC_T},
	    {"disk-cache", 1, 0, O_DISK_ON},
	    {"disk-cache-gb", 1, 0, O_DISK_GB},
	    {"disk-cache-days", 1, 0, O_DISK_DAYS},
	    {"disk-cache-min-free-gb", 1, 0, O_DISK_FREE},
	    {"disk-cache-admit-after", 1, 0, O_DISK_ADMIT},
	    {"disk-cache-head-anchors", 1, 0, O_DISK_HEAD},
	    {"disk-cache-min-tokens", 1, 0, O_DISK_MIN},
	    {"disk-write-budget-gb", 1, 0, O_WRITE_BUDGET},
	    {"adopt-from", 1, 0, O_ADOPT},
	    {"prefill-tps", 1, 0, O_PREFILL_TPS},
	    {"log-level", 1, 0, O_LOG},
	    {"help", 0, 0, O_HELP},
	    {0, 0, 0, 0},
	};
	cache_cfg *c = &d->cfg;
	const char *env = getenv("CACHE_GB");
	if (env && env[0] && parse_gb(env, &c->store_bytes)) {
		moor_err("CACHE_GB=%s: expected a number of GiB", env);
		return 2;
	}
	int o;
	uint32_t u;
	while ((o = getopt_long(argc, argv, "", lo, NULL)) != -1) {
		int bad = 0;
		switch (o) {
		case O_RUN:
			snprintf(d->run_dir, sizeof d->run_dir, "%s", optarg);
			break;
		case O_PREFIX:
			*prefix = optarg;
			break;
		case O_DEV:
			bad = parse_gb(optarg, &c->device_bytes);
			d->dev_gb_set = 1;
			break;
		case O_HOST:
			bad = parse_gb(optarg, &c->host_bytes);
			d->host_gb_set = 1;
			break;
		case O_CEIL:
			bad = parse_gb(optarg, &c->mem_ceiling);
			break;
		case O_PEAK:
			bad = parse_gb(optarg, &c->mem_peak);
			break;
		case O_RES:
			bad = parse_gb(optarg, &c->resident_bytes);
			break;
		case O_KEEP:
			bad = moor_parse_u32(optarg, &c->resident_keep);
			break;
		case O_PIN_EVERY:
			bad = moor_parse_u32(optarg, &c->pin_every);
			break;
		case O_PIN_UPTO:
			bad = moor_parse_u32(optarg, &c->pin_upto);
			break;
		case O_GUEST:
			bad = moor_parse_u32(optarg, &c->guest_max);
			break;
		case O_MARGIN:
			bad = moor_parse_u32(optarg, &c->guest_margin);
			break;
		case O_STASH:
			bad = parse_gb(optarg, &c->stash_bytes);
			break;
		case O_PIN:
			bad = parse_gb(optarg, &c->pin_bytes);
			break;
		case O_PIN_N:
			bad = moor_parse_u32(optarg, &c->pin_anchors);
			break;
		case O_PARK:
			bad = parse_gb(optarg, &c->park_bytes);
			break;
		case O_PARK_N:
			bad = moor_parse_u32(optarg, &c->park_anchors);
			break;
		case O_END:
			bad = parse_onoff(optarg, &c->end_anchor);
			break;
		case O_STORE:
			bad = parse_gb(optarg, &c->store_bytes);
			break;
		case O_ENTRY:
			bad = parse_gb(optarg, &c->store_entry_bytes);
			break;
		case O_BOUND:
			bad = moor_parse_u32(optarg, &u);
			c->store_boundaries = (int)u;
			break;
		case O_SESS:
			bad = parse_onoff(optarg, &c->store_sessions);
			break;
		case O_UNIFIED:
			bad = parse_onoff(optarg, &c->unified);
			d->unified_set = 1;
			break;
		case O_DEVICE:
			d->dev_mode = optarg;
			bad = strcmp(optarg, "auto") && strcmp(optarg, "shm") &&
			      strcmp(optarg, "cuda");
			break;
		case O_GPU:
			bad = moor_parse_u32(optarg, &d->gpu);
			break;
		case O_DISK_DIR:
			if (strlen(optarg) >= sizeof c->spill_dir - 16) {
				moor_err("--disk-dir %s: the path must be "
					 "under %zu bytes",
					 optarg, sizeof c->spill_dir - 16);
				return 2;
			}
			snprintf(c->spill_dir, sizeof c->spill_dir, "%s",
				 optarg);
			break;
		case O_SPILL_GB:
			bad = parse_gb(optarg, &c->spill_bytes);
			break;
		case O_SPILL_H:
			bad = moor_parse_u32(optarg, &c->spill_hours);
			break;
		case O_SPILL_MIN:
			bad = moor_parse_u32(optarg, &c->spill_min_tokens);
			break;
		case O_CODEC:
			bad = parse_onoff(optarg, &c->spill_codec);
			break;
		case O_DISK_ON:
			bad = parse_onoff(optarg, &c->disk_on);
			break;
		case O_DISK_GB:
			bad = parse_gb(optarg, &c->disk_bytes);
			break;
		case O_DISK_DAYS:
			bad = moor_parse_u32(optarg, &c->disk_days);
			break;
		case O_DISK_FREE:
			bad = parse_gb(optarg, &c->disk_min_free);
			break;
		case O_DISK_ADMIT:
			bad = moor_parse_u32(optarg, &c->disk_admit_after) ||
			      c->disk_admit_after < 1;
			break;
		case O_DISK_HEAD:
			bad = moor_parse_u32(optarg, &c->disk_head_anchors);
			break;
		case O_DISK_MIN:
			bad = moor_parse_u32(optarg, &c->disk_min_tokens);
			break;
		case O_WRITE_BUDGET:
			bad = parse_gb(optarg, &c->write_budget);
			break;
		case O_ADOPT: {
			uint8_t fp[32];
			uint32_t fn;
			bad = strlen(optarg) >= sizeof c->adopt_from ||
			      cache_fp_parse(optarg, fp, &fn) != 0;
			if (!bad)
				snprintf(c->adopt_from, sizeof c->adopt_from,
					 "%s", optarg);
			break;
		}
		case O_PREFILL_TPS:
			bad = moor_parse_u32(optarg, &c->prefill_tps) ||
			      c->prefill_tps < 1;
			break;
		case O_CODEC_T:
			bad = moor_parse_u32(optarg, &c->codec_threads) ||
			      c->codec_threads < 1 || c->codec_threads > 256;
			break;
		case O_LOG:
			if (!strcmp(optarg, "error"))
				moor_log_level = MOOR_LOG_ERROR;
			else if (!strcmp(optarg, "warn"))
				moor_log_level = MOOR_LOG_WARN;
			else if (!strcmp(optarg, "info"))
				moor_log_level = MOOR_LOG_INFO;
			else if (!strcmp(optarg, "debug"))
				moor_log_level = MOOR_LOG_DEBUG;
			else
				bad = 1;
			break;
		case O_HELP:
			usage(stdout);
			return 1;
		default:
			usage(stderr);
			return 2;
		}
		if (bad) {
			moor_err("--%s %s: expected %s", lo[o - O_RUN].name,
				 optarg,
				 o == O_END || o == O_SESS || o == O_UNIFIED ||
					 o == O_CODEC
				     ? "on or off"
				 : o == O_DEVICE ? "auto, shm or cuda"
				 : o == O_LOG ? "a log level"
				 : o == O_ADOPT
				     ? "16 to 64 hex digits of a fingerprint"
				 : strstr(lo[o - O_RUN].name, "-gb")
				     ? "a number of GiB"
				     : "a non-negative integer");
			return 2;
		}
	}
	if (optind < argc) {
		moor_err("unexpected argument '%s'", argv[optind]);
		usage(stderr);
		return 2;
	}
	return 0;
}

int main(int argc, char **argv)
{
	moor_log_set_name("cached");
	static cd d; /* big: the layout and plan scratch */
	d.t_start = moor_now();
	cache_cfg_defaults(&d.cfg);
	const char *prefix = NULL;
	int rc = parse_args(&d, argc, argv, &prefix);
	if (rc)
		return rc == 1 ? 0 : 2;
	if (!d.run_dir[0])
		moor_run_dir_default(d.run_dir, sizeof d.run_dir);

	/* Signals arrive through the signalfd only. */
	sigset_t set;
	sigemptyset(&set);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGHUP); /* a hangup stops cleanly, as SIGTERM */
	sigprocmask(SIG_BLOCK, &set, NULL);
	signal(SIGPIPE, SIG_IGN);

	rc = run_dir_make(d.run_dir);
	if (rc) {
		moor_err("run dir %s: %s", d.run_dir, moor_strerror(rc));
		return 1;
	}
	char real[PATH_MAX];
	if (!realpath(d.run_dir, real)) {
		moor_err("run dir %s: %s", d.run_dir, strerror(errno));
		return 1;
	}
	if (strlen(real) > 90) { /* sun_path holds 108 bytes */
		moor_err("run dir %s: its path must be under 90 bytes", real);
		return 1;
	}
	snprintf(d.run_dir, sizeof d.run_dir, "%s", real);
	static const char *const names[2] = {"cached.sock", "admin.sock"};
	for (int w = 0; w < 2; w++) {
		snprintf(d.path[w], sizeof d.path[w], "%s/%s", d.run_dir,
			 names[w]);
		snprintf(d.url[w], sizeof d.url[w], "ipc://%s", d.path[w]);
	}
	int lk = moor_run_lock(d.run_dir, "cached");
	if (lk < 0) {
		if (lk == -EADDRINUSE)
			moor_err("another cached serves %s", d.run_dir);
		else
			moor_err("%s/cached.lock: %s", d.run_dir,
				 moor_strerror(lk));
		return 1;
	}

	/* The arenas' names follow the run dir, so a cached killed with -9
	 * leaves nothing the next one on that dir does not reclaim. */
	if (prefix)
		snprintf(d.cfg.arena_prefix, sizeof d.cfg.arena_prefix, "%s",
			 prefix);
	else
		snprintf(
		    d.cfg.arena_prefix, sizeof d.cfg.arena_prefix,
		    "moor-%u-%016llx", (unsigned)getuid(),
		    (unsigned long long)XXH64(d.run_dir, strlen(d.run_dir), 0));
	static const char *const kinds[2] = {"dev", "host"};
	for (int k = 0; k < 2; k++) {
		char nm[96];
		snprintf(nm, sizeof nm, "/%s.%s", d.cfg.arena_prefix, kinds[k]);
		if (shm_unlink(nm) == 0)
			moor_info("removed the stale arena %s", nm);
	}

	char err[MOOR_ERRLEN] = "";
	rc = device_pick(&d);
	if (rc || shm_fit(&d))
		return 1;
	rc = cache_new(&d.cfg, &d.c, err);
	if (rc) {
		moor_err("arenas: %s", err[0] ? err : moor_strerror(rc));
		return 1;
	}
	for (int w = 0; w < 2 && !rc; w++)
		rc = sock_open(&d, w);
	if (!rc) {
		cache_arena_info ai;
		cache_arena_info_get(d.c, &ai);
		moor_info("serving %s and %s (pid %d); device arena %s %.1f "
			  "MiB, host arena %s %.1f MiB",
			  d.url[SOCK_ENG], d.url[SOCK_ADMIN], (int)getpid(),
			  ai.dev_name, (double)ai.dev_size / (1 << 20),
			  ai.host_name, (double)ai.host_size / (1 << 20));
		rc = serve(&d);
		/* the drain: the work in flight was answered; what the
		 * resident rows hold goes to the session spill */
		close_open_plan(&d, "the drain");
		double t0 = moor_now();
		/* the disk tier's writer finishes what it was given */
		(void)cache_disk_wait(d.c);
		err[0] = 0;
		int drc = cache_drain(d.c, err);
		if (drc)
			moor_err("drain: %s", err[0] ? err : moor_strerror(drc));
		else if (d.cfg.spill_dir[0])
			moor_info("drain: done in %.0f ms",
				  (moor_now() - t0) * 1e3);
	}
	for (int w = 0; w < 2; w++) {
		if (!d.open[w])
			continue;
		nng_close(d.sock[w]);
		unlink(d.path[w]);
	}
	cache_free(d.c); /* unlinks the arenas */
	if (rc) {
		moor_err("%s", moor_strerror(rc));
		return 1;
	}
	moor_info("stopped");
	return 0;
}
