/* routes.c: the routes that are not generations: GET /v1/models, /health,
 * /metrics, /v1/cache/stats, POST /v1/cache/clear (/v1/cache/peek renders
 * like a chat request and lives in peek.c). The ones that need cached make
 * their REQ/REP round trip on the thread pool (gw_admin_start) and answer on
 * the loop. */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gw.h"

/* ---- admin round trips ------------------------------------------------------
 */

static void admin_work(uv_work_t *w)
{
	gw_job *j = w->data;
	j->admin_rv = gw_link_admin(j->s, &j->q, &j->reply);
}

static void admin_after(uv_work_t *w, int status)
{
	gw_job *j = w->data;
	if (j->req)
		j->admin_done(j);
	gw_job_unref(j);
}

int gw_admin_start(gw_job *j, void (*done)(gw_job *j))
{
	j->admin_done = done;
	j->work.data = j;
	j->refs++;
	j->q.h.req = ++j->s->next_rid;
	int rv = uv_queue_work(j->s->loop, &j->work, admin_work, admin_after);
	if (rv)
		j->refs--;
	return rv;
}

/* A job for an admin route, its round trip started; errors answered. */
static int admin_route(gw_srv *s, h2o_req_t *req, int route, int type,
		       void (*done)(gw_job *j))
{
	gw_job *j = gw_job_new(s, req, GW_KIND_ADMIN, route);
	if (!j) {
		gw_metrics_count(s, route, 500);
		gw_send_error(req, 500, "server_error", NULL, NULL, 0,
			      "out of memory");
		return 0;
	}
	j->q.h.type = (uint16_t)type;
	j->is_admin = gw_auth_admin(s, req);
	if (gw_admin_start(j, done)) {
		gw_metrics_count(s, route, 500);
		gw_send_error(req, 500, "server_error", NULL, NULL, 0,
			      "could not queue the work");
		gw_job_detach(j);
	}
	return 0;
}

/* cached's stats JSON of a finished STATS round trip, or NULL. */
static json_t *stats_of(gw_job *j)
{
	if (j->admin_rv || j->reply.h.type != PROTO_STATS_OK ||
	    !j->reply.u.text.text)
		return NULL;
	return json_loads(j->reply.u.text.text, 0, NULL);
}

static void send_obj(gw_job *j, int status, json_t *o)
{
	char *t = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER);
	json_decref(o);
	gw_metrics_count(j->s, j->route, status);
	gw_send_json(j->req, status, t ? t : "{}", t ? strlen(t) : 2);
	free(t);
}

static void cached_down(gw_job *j)
{
	gw_metrics_count(j->s, j->route, 503);
	gw_send_error(j->req, 503, "server_error", NULL, "cached_unavailable",
		      1, "cached is not answering: %s",
		      j->admin_rv ? moor_strerror(j->admin_rv)
				  : "an unexpected reply");
}

/* ---- GET /v1/models
 * ----------------------------------------------------------- */

int gw_on_models(gw_srv *s, h2o_req_t *req)
{
	json_t *m = json_object();
	json_object_set_new(m, "id", json_string(s->cfg.served));
	json_object_set_new(m, "object", json_string("model"));
	json_object_set_new(m, "created", json_integer(s->started_unix));
	json_object_set_new(m, "owned_by", json_string("moor"));
	json_object_set_new(m, "max_model_len", json_integer(s->cfg.window));
	json_t *a = json_array();
	json_array_append_new(a, m);
	json_t *o = json_object();
	json_object_set_new(o, "object", json_string("list"));
	json_object_set_new(o, "data", a);
	char *t = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER);
	json_decref(o);
	gw_metrics_count(s, GW_ROUTE_MODELS, 200);
	gw_send_json(req, 200, t, strlen(t));
	free(t);
	return 0;
}

/* ---- GET /health
 * --------------------------------------------------------------- */

static void health_done(gw_job *j)
{
	gw_srv *s = j->s;
	json_t *st = stats_of(j);
	int eng = atomic_load(&s->link.pipe) != 0;
	int ok = eng && st;
	json_t *o = json_object();
	json_object_set_new(o, "status", json_string(ok ? "ok" : "degraded"));
	json_t *pr = json_object();
	json_object_set_new(pr, "gatewayd", json_string("up"));
	json_object_set_new(pr, "engined", json_string(eng ? "up" : "down"));
	json_object_set_new(pr, "cached", json_string(st ? "up" : "down"));
	json_object_set_new(o, "processes", pr);
	/* whose answer this is (a supervisor tells its own gateway from
	 * another that holds the port) */
	json_object_set_new(o, "pid", json_integer(getpid()));
	json_object_set_new(o, "model", json_string(s->cfg.served));
	json_object_set_new(o, "family", json_string(gw_tmpl_name(s->family)));
	if (st) {
		json_t *c = json_object();
		static const char *const caches[] = {
		    "resident", "end", "stash", "pin", "park", "store"};
		for (size_t i = 0; i < sizeof caches / sizeof caches[0]; i++) {
			json_t *v = json_object_get(
			    json_object_get(st, caches[i]), "bytes");
			json_object_set_new(
			    c, caches[i],
			    json_integer(json_is_integer(v)
					     ? json_integer_value(v)
					     : 0));
		}
		json_t *held =
		    json_object_get(json_object_get(st, "memory"), "held");
		if (held)
			json_object_set(c, "memory_held", held);
		json_object_set_new(o, "cache_bytes", c);
		/* the write guard's day (cached's ledger), as cached says it */
		json_t *dw = json_object_get(st, "disk_writes");
		if (dw)
			json_object_set_new(o, "cache",
					    json_pack("{s:O}", "disk_writes", dw));
		json_decref(st);
	}
	send_obj(j, ok ? 200 : 503, o);
}

int gw_on_health(gw_srv *s, h2o_req_t *req)
{
	return admin_route(s, req, GW_ROUTE_HEALTH, PROTO_STATS, health_done);
}

/* ---- GET /metrics
 * ------------------------------------------------------------- */

static void metrics_done(gw_job *j)
{
	json_t *st = stats_of(j);
	size_t len = 0;
	char *t = gw_metrics_text(j->s, st, &len);
	json_decref(st);
	gw_metrics_count(j->s, j->route, 200);
	h2o_req_t *req = j->req;
	static h2o_generator_t none = {NULL, NULL};
	req->res.status = 200;
	req->res.reason = "OK";
	h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_CONTENT_TYPE,
		       NULL, H2O_STRLIT("text/plain; version=0.0.4"));
	h2o_iovec_t b = h2o_strdup(&req->pool, t ? t : "", t ? len : 0);
	free(t);
	h2o_start_response(req, &none);
	h2o_send(req, &b, 1, H2O_SEND_STATE_FINAL);
}

int gw_on_metrics(gw_srv *s, h2o_req_t *req)
{
	return admin_route(s, req, GW_ROUTE_METRICS, PROTO_STATS, metrics_done);
}

/* ---- /v1/cache/stats, /v1/cache/clear
 * ------------------------------------------ */

/* Without the admin token stats say counts and bytes only: every
 * "session" (another user's session id) goes, and every array (the lines
 * of the resident and held conversations, the store's entries with their
 * lengths: what one prompt is, not how much is held). */
static void redact(json_t *o)
{
	const char *k;
	json_t *v;
	void *tmp;
	json_object_foreach_safe(o, tmp, k, v)
	{
		if (!strcmp(k, "session") || json_is_array(v))
			json_object_del(o, k);
		else if (json_is_object(v))
			redact(v);
	}
}

static void stats_done(gw_job *j)
{
	json_t *st = stats_of(j);
	if (!st) {
		cached_down(j);
		return;
	}
	if (!j->is_admin) {
		redact(st);
		json_object_set_new(st, "redacted", json_true());
	}
	send_obj(j, 200, st);
}

int gw_on_cache_stats(gw_srv *s, h2o_req_t *req)
{
	return admin_route(s, req, GW_ROUTE_STATS, PROTO_STATS, stats_done);
}

static void clear_done(gw_job *j)
{
	if (j->admin_rv == MOOR_ERANGE || j->admin_rv == MOOR_EFORMAT) {
		gw_metrics_count(j->s, j->route, 400);
		gw_send_error(
		    j->req, 400, "invalid_request_error", "tier", NULL, 0, "%s",
		    j->reply.h.type == PROTO_ERROR && j->reply.u.error.msg
			? j->reply.u.error.msg
			: moor_strerror(j->admin_rv));
		return;
	}
	if (j->admin_rv == MOOR_EUNSUP) {
		/* a tier this cached runs without (no --disk-dir, the disk
		 * tier off): the request is well formed, and the name is one
		 * of the tiers (an unknown one is the 400 above); it is the
		 * server's state that refuses it, which this gateway answers
		 * 409 "conflict" with a code, as the peek of a running turn */
		gw_metrics_count(j->s, j->route, 409);
		gw_send_error(j->req, 409, "conflict", "tier",
			      "tier_not_running", 0, "%s",
			      j->reply.h.type == PROTO_ERROR &&
				      j->reply.u.error.msg
				  ? j->reply.u.error.msg
				  : moor_strerror(j->admin_rv));
		return;
	}
	if (j->admin_rv || j->reply.h.type != PROTO_OK) {
		cached_down(j);
		return;
	}
	json_t *o = json_object();
	json_object_set_new(o, "cleared", json_string(j->q.u.clear.tier));
	send_obj(j, 200, o);
}

/* POST /v1/cache/clear: the admin token was checked (http.c) */
int gw_on_cache_clear(gw_srv *s, h2o_req_t *req)
{
	/* the tier: ?tier= in the query, else the body's "tier", else every
	 * RAM cache (cached's "ram"); an unknown name is 400 here, a tier
	 * cached runs without is cached's refusal, 409 (clear_done) */
	const char *tier = "ram";
	char qtier[32] = "";
	if (req->query_at != SIZE_MAX) {
		const char *q = req->path.base + req->query_at + 1;
		size_t ql = req->path.len - req->query_at - 1;
		while (ql) {
			const char *amp = memchr(q, '&', ql);
			size_t pl = amp ? (size_t)(amp - q) : ql;
			if (pl > 5 && !memcmp(q, "tier=", 5)) {
				if (pl - 5 >= sizeof qtier)
					pl = 5 + sizeof qtier - 1;
				memcpy(qtier, q + 5, pl - 5);
				qtier[pl - 5] = 0;
			}
			if (!amp)
				break;
			ql -= pl + 1;
			q = amp + 1;
		}
	}
	json_t *b = NULL;
	if (req->entity.len) {
		json_error_t je;
		b = json_loadb(req->entity.base, req->entity.len, 0, &je);
		if (!b || !json_is_object(b)) {
			json_decref(b);
			gw_metrics_count(s, GW_ROUTE_CLEAR, 400);
			gw_send_error(req, 400, "invalid_request_error", NULL,
				      NULL, 0,
				      "the body must be a JSON object");
			return 0;
		}
		const json_t *t = json_object_get(b, "tier");
		if (t && !json_is_null(t)) {
			if (!json_is_string(t)) {
				json_decref(b);
				gw_metrics_count(s, GW_ROUTE_CLEAR, 400);
				gw_send_error(req, 400, "invalid_request_error",
					      "tier", NULL, 0,
					      "'tier' must be a string");
				return 0;
			}
			tier = json_string_value(t);
		}
	}
	if (qtier[0])
		tier = qtier;
	if (!proto_clear_tier_ok(tier)) {
		json_decref(b);
		gw_metrics_count(s, GW_ROUTE_CLEAR, 400);
		gw_send_error(req, 400, "invalid_request_error", "tier", NULL,
			      0,
			      "unknown tier (expected one of "
			      PROTO_CLEAR_TIER_LIST ")");
		return 0;
	}
	gw_job *j = gw_job_new(s, req, GW_KIND_ADMIN, GW_ROUTE_CLEAR);
	if (!j) {
		json_decref(b);
		gw_send_error(req, 500, "server_error", NULL, NULL, 0,
			      "out of memory");
		return 0;
	}
	j->q.h.type = PROTO_CLEAR;
	size_t n = strlen(tier) + 1;
	j->q.u.clear.tier = malloc(n); /* proto_msg_fini frees it */
	if (j->q.u.clear.tier)
		memcpy(j->q.u.clear.tier, tier, n);
	json_decref(b);
	if (!j->q.u.clear.tier || gw_admin_start(j, clear_done)) {
		gw_send_error(req, 500, "server_error", NULL, NULL, 0,
			      "out of memory");
		gw_job_detach(j);
	}
	return 0;
}
