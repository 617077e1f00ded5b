/* http.c: the HTTP side of gatewayd: h2o on the libuv loop (a uv_tcp
 * listener, h2o_uv_socket_create + h2o_accept per connection), one handler
 * at "/" that routes by path and method (so unknown paths and wrong methods
 * get the OpenAI error shape), and the response helpers. The handler
 * carries the server the way h2o's own handlers carry their configuration:
 * h2o_handler_t embedded first, the rest ours (h2o allocates it with the
 * size we give and hands it back to on_req).
 *
 * The body budget. h2o 2.2.5 reads a request's body whole into its
 * connection's input buffer before the handler runs, and keeps it there
 * until the response ends (a request waiting for admission holds its body
 * there, unparsed). One body is capped by --max-body-bytes (h2o answers
 * 413 at the head for a Content-Length past it, and as soon as a chunked
 * body passes it), but the bodies of many connections at once were not:
 * a thousand clients sending 4 MiB each and then stalling held 4 GB until
 * their read deadline. So a check handle looks at every connection's input
 * buffer at most once per GW_BUDGET_CHECK_MS of the loop, and splits
 * --body-budget-bytes in two halves:
 *  - a request past GW_BODY_SMALL bytes needs a grant to be read on: the
 *    bytes its buffer will hold once it is read whole (from its
 *    Content-Length, the capacity h2o doubles its buffer to; a chunked
 *    body: twice --max-body-bytes), granted while the grants fit in half
 *    the budget (one always does) and kept until the buffer is given back
 *    (the response ended, or the connection closed). A request without one
 *    waits unread (its kernel receive buffer, GW_RCVBUF, pushes back on the
 *    client) and gets the next grant that fits, the longest waiting first;
 *  - the buffers of the connections without a grant: past half the budget,
 *    every one in the middle of a request waits unread until they fall
 *    below it.
 * While requests wait for a grant, a request that holds one and brought no
 * byte for GW_STALL_MS is answered 408 and shut down: a client that stalls
 * its body holds the budget only while nobody needs it. h2o closes a
 * request that has not arrived within --read-timeout-s without a word (its
 * HTTP/1 read deadline runs from the connection's accept or the previous
 * response's end): a request the budget kept unread until GW_BUDGET_LATE_MS
 * before that deadline is answered 503 with a Retry-After and shut down,
 * since the wait was the server's, not the client's. Waiting is
 * uv_read_stop under h2o, which still counts the socket as reading (its
 * callback set); going on is h2o's own h2o_socket_read_start with that
 * callback. So "paused" is not a flag but a state read off both: h2o wants
 * to read and libuv does not. */
#include <arpa/inet.h>
#include <errno.h>
#include <linux/sockios.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

#include "gw.h"

typedef struct gw_handler {
	h2o_handler_t super; /* first: on_req gets it back */
	gw_srv *s;
} gw_handler;

/* ---- responses ---------------------------------------------------------- */

const h2o_iovec_t *gw_header(h2o_req_t *req, const char *name)
{
	ssize_t i =
	    h2o_find_header_by_str(&req->headers, name, strlen(name), -1);
	return i < 0 ? NULL : &req->headers.entries[i].value;
}

static void send_json_iov(h2o_req_t *req, int status, h2o_iovec_t b)
{
	static h2o_generator_t none = {NULL, NULL};
	req->res.status = status;
	req->res.reason = status == 200 ? "OK" : "Error";
	h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_CONTENT_TYPE,
		       NULL, H2O_STRLIT("application/json"));
	req->res.content_length = b.len;
	h2o_start_response(req, &none);
	h2o_send(req, &b, 1, H2O_SEND_STATE_FINAL);
}

void gw_send_json(h2o_req_t *req, int status, const char *body, size_t len)
{
	send_json_iov(req, status, h2o_strdup(&req->pool, body, len));
}

/* a taken body's bytes, freed when h2o clears the request's pool */
static void taken_dispose(void *p)
{
	free(*(char **)p);
}

void gw_send_json_take(h2o_req_t *req, int status, moor_buf *body)
{
	size_t len;
	char *p = moor_buf_take(body, &len);
	if (!p) { /* nothing put, or a failed put */
		gw_send_error(req, 500, "server_error", NULL, NULL, 0,
			      "out of memory writing the reply");
		return;
	}
	char **own =
	    h2o_mem_alloc_shared(&req->pool, sizeof *own, taken_dispose);
	*own = p;
	send_json_iov(req, status, h2o_iovec_init(p, len));
}

static void send_error_v(h2o_req_t *req, int status, const char *type,
			 const char *param, const char *code, int retry_after,
			 const char *msg)
{
	json_t *e = json_object();
	json_object_set_new(e, "message", json_string(msg));
	json_object_set_new(e, "type", json_string(type));
	json_object_set_new(e, "param",
			    param && *param ? json_string(param) : json_null());
	json_object_set_new(e, "code",
			    code && *code ? json_string(code) : json_null());
	json_t *r = json_object();
	json_object_set_new(r, "error", e);
	char *t = json_dumps(r, JSON_COMPACT | JSON_PRESERVE_ORDER);
	json_decref(r);
	if (retry_after > 0) {
		char ra[16];
		int n = snprintf(ra, sizeof ra, "%d", retry_after);
		h2o_iovec_t v = h2o_strdup(&req->pool, ra, (size_t)n);
		h2o_add_header(&req->pool, &req->res.headers,
			       H2O_TOKEN_RETRY_AFTER, NULL, v.base, v.len);
	}
	if (t)
		gw_send_json(req, status, t, strlen(t));
	else
		gw_send_json(req, 500, "{}", 2);
	free(t);
}

void gw_send_error(h2o_req_t *req, int status, const char *type,
		   const char *param, const char *code, int retry_after,
		   const char *fmt, ...)
{
	char msg[MOOR_ERRLEN];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	send_error_v(req, status, type, param, code, retry_after, msg);
}

void gw_send_fail(h2o_req_t *req, const gw_fail *f)
{
	send_error_v(req, f->status, f->type, f->param, f->code, f->retry_after,
		     f->msg);
}

/* ---- routing --------------------------------------------------------------
 */

/* Who may call a route (auth.c). */
enum {
	A_OPEN,	  /* anyone (stats redact what needs the admin token) */
	A_CLIENT, /* an API key when keys are configured, else anyone */
	A_PEEK,	  /* the admin token or an API key */
	A_ADMIN,  /* the admin token; none configured: refused over HTTP */
};

typedef struct route {
	const char *path;
	const char *method;
	int id;
	int auth;
	int (*fn)(gw_srv *s, h2o_req_t *req);
} route;

static const route routes[] = {
    {"/v1/chat/completions", "POST", GW_ROUTE_CHAT, A_CLIENT, gw_on_chat},
    {"/v1/completions", "POST", GW_ROUTE_COMPLETIONS, A_CLIENT,
     gw_on_completions},
    {"/v1/models", "GET", GW_ROUTE_MODELS, A_CLIENT, gw_on_models},
    {"/health", "GET", GW_ROUTE_HEALTH, A_OPEN, gw_on_health},
    {"/metrics", "GET", GW_ROUTE_METRICS, A_OPEN, gw_on_metrics},
    {"/v1/cache/stats", "GET", GW_ROUTE_STATS, A_OPEN, gw_on_cache_stats},
    {"/v1/cache/clear", "POST", GW_ROUTE_CLEAR, A_ADMIN, gw_on_cache_clear},
    {"/v1/cache/peek", "POST", GW_ROUTE_PEEK, A_PEEK, gw_on_cache_peek},
    {"/v1/cache/prewarm", "POST", GW_ROUTE_PREWARM, A_PEEK,
     gw_on_cache_prewarm},
};

/* 0 when req may call r; otherwise answered (401, 403) and -1. */
static int auth_check(gw_srv *s, h2o_req_t *req, const route *r)
{
	if (r->auth == A_OPEN || gw_auth_admin(s, req))
		return 0;
	uint64_t ks;
	int key = gw_auth_key(s, req, &ks);
	switch (r->auth) {
	case A_CLIENT:
		if (!s->n_keys || key)
			return 0;
		gw_auth_refuse(s, req, r->id, 0);
		return -1;
	case A_PEEK:
		if (key)
			return 0;
		if (!s->cfg.admin_token && !s->n_keys) {
			gw_metrics_count(s, r->id, 403);
			gw_send_error(req, 403, "invalid_request_error", NULL,
				      "admin_token_not_configured", 0,
				      "%s needs the admin token or an API key, "
				      "and neither is configured "
				      "(--admin-token-file, --api-keys-file)",
				      r->path);
			return -1;
		}
		gw_auth_refuse(s, req, r->id, !s->n_keys);
		return -1;
	default:
		if (!s->cfg.admin_token) {
			gw_metrics_count(s, r->id, 403);
			gw_send_error(req, 403, "invalid_request_error", NULL,
				      "admin_token_not_configured", 0,
				      "%s is served over HTTP only with an "
				      "admin token configured "
				      "(--admin-token-file); moorctl does it "
				      "on the admin socket",
				      r->path);
			return -1;
		}
		gw_auth_refuse(s, req, r->id, 1);
		return -1;
	}
}

/* DNS rebinding: a page of another site whose name resolves to this
 * address sends its own name as Host. Allowed: an IP literal (no name to
 * rebind), "localhost", and the names of --allowed-hosts (a comma list;
 * ".example.com" also matches its subdomains; "*" allows any). A request
 * without Host (HTTP/1.0) is not a browser's. */
static int host_ok(gw_srv *s, h2o_req_t *req)
{
	h2o_iovec_t a = req->authority;
	if (!a.len)
		return 1;
	const char *h = a.base;
	size_t n = a.len;
	if (h[0] == '[') { /* an IPv6 literal, [::1]:8000 */
		const char *e = memchr(h, ']', n);
		char v6[64];
		struct in6_addr ip6;
		if (!e || (size_t)(e - h - 1) >= sizeof v6)
			return 0;
		memcpy(v6, h + 1, (size_t)(e - h - 1));
		v6[e - h - 1] = 0;
		return inet_pton(AF_INET6, v6, &ip6) == 1;
	}
	const char *c = memchr(h, ':', n);
	if (c)
		n = (size_t)(c - h);
	char name[256];
	if (!n || n >= sizeof name)
		return 0;
	memcpy(name, h, n);
	name[n] = 0;
	struct in_addr ip;
	if (inet_pton(AF_INET, name, &ip) == 1 ||
	    !strcasecmp(name, "localhost"))
		return 1;
	const char *l = s->cfg.allowed_hosts;
	while (l && *l) {
		size_t k = strcspn(l, ",");
		if ((k == 1 && l[0] == '*') ||
		    (k == n && !strncasecmp(l, name, k)) ||
		    (k > 1 && l[0] == '.' && n > k &&
		     !strncasecmp(l, name + n - k, k)))
			return 1;
		l += k + (l[k] == ',');
	}
	return 0;
}

/* A cross-site page can POST without a CORS preflight only as text/plain,
 * a form or multipart: none of them is a JSON API call, so they are 415
 * (a request with no Content-Type, curl -X POST, is not a browser's). */
static int type_ok(h2o_req_t *req)
{
	const h2o_iovec_t *ct = gw_header(req, "content-type");
	if (!ct)
		return 1;
	size_t n = 0;
	while (n < ct->len && ct->base[n] != ';' && ct->base[n] != ' ')
		n++;
	static const char *const simple[] = {
	    "text/plain", "application/x-www-form-urlencoded",
	    "multipart/form-data"};
	for (size_t i = 0; i < sizeof simple / sizeof simple[0]; i++)
		if (n == strlen(simple[i]) &&
		    !strncasecmp(ct->base, simple[i], n))
			return 0;
	return 1;
}

static int on_req(h2o_handler_t *self, h2o_req_t *req)
{
	gw_srv *s = ((gw_handler *)self)->s;
	if (!host_ok(s, req)) {
		gw_metrics_count(s, GW_ROUTE_OTHER, 403);
		gw_send_error(req, 403, "invalid_request_error", NULL,
			      "host_not_allowed", 0,
			      "Host '%.*s' is not allowed (a name that is not "
			      "this server's could be DNS rebinding): add it "
			      "to --allowed-hosts",
			      (int)(req->authority.len > 200
					? 200
					: req->authority.len),
			      req->authority.base);
		return 0;
	}
	if (h2o_memis(req->method.base, req->method.len, H2O_STRLIT("POST")) &&
	    !type_ok(req)) {
		gw_metrics_count(s, GW_ROUTE_OTHER, 415);
		gw_send_error(req, 415, "invalid_request_error", NULL,
			      "unsupported_media_type", 0,
			      "a POST body must be JSON (Content-Type: "
			      "application/json); text/plain, forms and "
			      "multipart are what cross-site pages send");
		return 0;
	}
	h2o_iovec_t path = req->path_normalized;
	/* the path without a query string */
	for (size_t i = 0; i < path.len; i++)
		if (path.base[i] == '?') {
			path.len = i;
			break;
		}
	int path_known = 0;
	for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++) {
		const route *r = &routes[i];
		if (!h2o_memis(path.base, path.len, r->path, strlen(r->path)))
			continue;
		path_known = 1;
		if (h2o_memis(req->method.base, req->method.len, r->method,
			      strlen(r->method)) ||
		    (!strcmp(r->method, "GET") &&
		     h2o_memis(req->method.base, req->method.len,
			       H2O_STRLIT("HEAD"))))
			return auth_check(s, req, r) ? 0 : r->fn(s, req);
		h2o_iovec_t allow = h2o_strdup(&req->pool, r->method, SIZE_MAX);
		h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_ALLOW,
			       NULL, allow.base, allow.len);
	}
	if (path_known) {
		gw_metrics_count(s, GW_ROUTE_OTHER, 405);
		gw_send_error(req, 405, "invalid_request_error", NULL,
			      "method_not_allowed", 0,
			      "method %.*s is not allowed on %.*s",
			      (int)req->method.len, req->method.base,
			      (int)path.len, path.base);
		return 0;
	}
	gw_metrics_count(s, GW_ROUTE_OTHER, 404);
	gw_send_error(req, 404, "invalid_request_error", NULL, "not_found", 0,
		      "no route for %.*s %.*s", (int)req->method.len,
		      req->method.base, (int)path.len, path.base);
	return 0;
}

/* ---- the listener ----------------------------------------------------------
 */

/* ---- the body budget ---------------------------------------------------- */

/* The bytes of c's request in its input buffer. */
static size_t conn_buffered(const gw_conn *c)
{
	return c->sock && c->sock->input ? c->sock->input->size : 0;
}

/* The bytes c's input buffer holds: its capacity, once allocated (h2o
 * doubles it as it fills, and a buffer that still holds a pipelined byte
 * after a large request keeps its size). */
static size_t conn_held(const gw_conn *c)
{
	const h2o_buffer_t *in = c->sock ? c->sock->input : NULL;
	return in && in->bytes ? in->capacity : 0;
}

/* h2o wants to read c and libuv does not: paused by the budget. */
static int conn_paused(const gw_conn *c)
{
	return c->sock && h2o_socket_is_reading(c->sock) && !c->tcp.read_cb;
}

/* Answers c's request with a canned response (status line and body, a
 * Retry-After when retry > 0; written when h2o is writing nothing on it),
 * then shuts it down; h2o sees the end on its next read and closes it,
 * freeing its buffer. */
static void budget_answer(gw_conn *c, const char *status, int retry,
			  const char *body)
{
	char resp[768], ra[32] = "";
	if (retry > 0)
		snprintf(ra, sizeof ra, "Retry-After: %d\r\n", retry);
	int n = snprintf(resp, sizeof resp,
			 "HTTP/1.1 %s\r\nContent-Type: application/json\r\n%s"
			 "Connection: close\r\nContent-Length: %zu\r\n\r\n%s",
			 status, ra, strlen(body), body);
	if (n > 0 && (size_t)n < sizeof resp &&
	    !h2o_socket_is_writing(c->sock) && !c->tcp.write_queue_size) {
		uv_buf_t b = uv_buf_init(resp, (unsigned)n);
		uv_try_write((uv_stream_t *)&c->tcp, &b, 1);
	}
	uv_os_fd_t fd;
	if (!uv_fileno((uv_handle_t *)&c->tcp, &fd))
		shutdown(fd, SHUT_RDWR);
	c->evicted = 1;
	c->granted = 0;
}

/* A connection whose request stalled while the budget is full: 408. */
static void budget_evict(gw_srv *s, gw_conn *c)
{
	budget_answer(
	    c, "408 Request Timeout", 0,
	    "{\"error\":{\"message\":\"the request stopped arriving while the "
	    "server holds all the request bytes it may (--body-budget-bytes)\","
	    "\"type\":\"invalid_request_error\",\"param\":null,\"code\":"
	    "\"request_stalled\"}}");
	s->budget_evicted++;
}

/* A connection the budget kept waiting until its read deadline is near:
 * h2o would close it at the deadline without a word, for a wait that was
 * the server's. 503 with a Retry-After instead, the queue's. */
static void budget_refuse(gw_srv *s, gw_conn *c)
{
	budget_answer(
	    c, "503 Service Unavailable",
	    gw_admit_retry_after(&s->admit, s->admit.n_queued),
	    "{\"error\":{\"message\":\"the server held this request unread "
	    "until its read deadline (--read-timeout-s) while it holds all the "
	    "request bytes it may (--body-budget-bytes): retry later\","
	    "\"type\":\"server_error\",\"param\":null,\"code\":"
	    "\"request_bytes_budget\"}}");
	s->budget_refused++;
}

/* What c's request will hold of the budget once read whole: the capacity
 * h2o's buffer doubles to for its head and its Content-Length (8 KiB
 * doubled until 4 KiB more than the request fits), from the head already
 * in the buffer; a chunked body, or a head not yet whole, may grow to the
 * limit: twice --max-body-bytes. */
static size_t head_reserve(const gw_conn *c, uint32_t max_body)
{
	size_t worst = 2 * (size_t)max_body;
	const h2o_buffer_t *in = c->sock->input;
	size_t n = in->size;
	const char *b = in->bytes;
	const char *end = memmem(b, n, "\r\n\r\n", 4);
	if (!end)
		return worst;
	size_t head = (size_t)(end - b) + 4;
	unsigned long long cl = 0;
	int found = 0;
	for (const char *p = b; p && p < end;) {
		p = memchr(p, '\n', (size_t)(end - p));
		if (!p)
			break;
		p++;
		if ((size_t)(end - p) > 15 && !strncasecmp(p, "content-length:", 15)) {
			char *e;
			cl = strtoull(p + 15, &e, 10);
			found = e != p + 15;
			break;
		}
	}
	if (!found || cl > max_body)
		return worst;
	size_t need = head + (size_t)cl + 4096, cap = 8192;
	while (cap < need)
		cap *= 2;
	return cap < worst ? cap : worst;
}

static void budget_resume(gw_conn *c, uint64_t now)
{
	c->grew_at = now;
	h2o_socket_read_start(c->sock, c->sock->_cb.read);
}

static int by_wait(const void *a, const void *b)
{
	uint64_t x = (*(gw_conn *const *)a)->wait_since,
		 y = (*(gw_conn *const *)b)->wait_since;
	return x < y ? -1 : x > y;
}

static void budget_check(uv_check_t *h)
{
	gw_srv *s = h->data;
	uint64_t now = uv_now(s->loop);
	if (now - s->budget_at < GW_BUDGET_CHECK_MS)
		return;
	s->budget_at = now;
	uint64_t total = 0, small = 0, half = s->cfg.body_budget / 2;
	uint64_t reserved = 0; /* what the grants' requests will hold */
	uint32_t n_grants = 0, n_wait = 0;
	for (gw_conn *c = s->conns; c; c = c->next) {
		size_t b = conn_buffered(c);
		if (b != c->seen) {
			/* emptied: the response ended and h2o armed its read
			 * deadline for the next request */
			if (!b)
				c->read_from = now;
			c->seen = b;
			c->grew_at = now;
		}
		size_t held = conn_held(c);
		total += held;
		if (c->granted && (held <= GW_BODY_SMALL || c->evicted))
			c->granted = 0; /* its buffer went back */
		if (c->granted) {
			n_grants++;
			reserved += c->reserve > held ? c->reserve : held;
			continue;
		}
		small += held;
		if (!c->evicted && c->seen > GW_BODY_SMALL && c->sock &&
		    h2o_socket_is_reading(c->sock)) {
			if (!c->wait_since)
				c->wait_since = now;
			s->budget_tmp[n_wait++] = c;
		} else {
			c->wait_since = 0;
		}
	}
	s->buffered = total;
	if (total > s->buffered_peak)
		s->buffered_peak = total;
	/* the grants go to the longest waiting, in turn, while what they
	 * will hold fits in half the budget (one always fits) */
	qsort(s->budget_tmp, n_wait, sizeof *s->budget_tmp, by_wait);
	uint32_t i = 0;
	for (; i < n_wait; i++, n_grants++) {
		gw_conn *c = s->budget_tmp[i];
		size_t r = head_reserve(c, s->cfg.max_body);
		if (n_grants && reserved + r > half)
			break;
		reserved += r;
		c->reserve = r;
		c->granted = 1;
		c->wait_since = 0;
		small -= conn_held(c);
		if (conn_paused(c))
			budget_resume(c, now);
	}
	uint32_t waiting = n_wait - i, paused_now = 0;
	for (; i < n_wait; i++)
		if (!conn_paused(s->budget_tmp[i])) {
			uv_read_stop((uv_stream_t *)&s->budget_tmp[i]->tcp);
			paused_now++;
		}
	int over = small > half;
	for (gw_conn *c = s->conns; c; c = c->next) {
		if (c->evicted || !c->sock || !h2o_socket_is_reading(c->sock))
			continue;
		if (c->granted) {
			/* a grant's holder that stopped sending while others
			 * wait for one */
			if (waiting && c->tcp.read_cb &&
			    now - c->grew_at >= GW_STALL_MS)
				budget_evict(s, c);
			continue;
		}
		if (c->wait_since || !c->seen)
			continue; /* waits for a grant; or between requests */
		if (over && c->tcp.read_cb) {
			uv_read_stop((uv_stream_t *)&c->tcp);
			paused_now++;
		} else if (!over && !c->tcp.read_cb) {
			budget_resume(c, now);
		}
	}
	s->budget_pauses += paused_now;
	/* the ones kept unread until close to their read deadline */
	uint64_t rt = (uint64_t)(s->cfg.read_timeout_s * 1000);
	uint64_t late = rt / 2 < GW_BUDGET_LATE_MS ? rt / 2 : GW_BUDGET_LATE_MS;
	for (gw_conn *c = s->conns; c; c = c->next)
		if (!c->evicted && conn_paused(c) &&
		    now + late >= c->read_from + rt)
			budget_refuse(s, c);
	int pressed = waiting || over;
	if (pressed && !s->over_budget)
		moor_info("%llu MiB of requests buffered, %llu MiB granted to "
			  "%u bodies past %u KiB (--body-budget-bytes %llu "
			  "MiB): readers wait",
			  (unsigned long long)(total >> 20),
			  (unsigned long long)(reserved >> 20), n_grants,
			  GW_BODY_SMALL >> 10,
			  (unsigned long long)(s->cfg.body_budget >> 20));
	else if (!pressed && s->over_budget)
		moor_info("requests buffered: no reader waits (peak %llu MiB; "
			  "%llu readers paused, %llu stalled ones closed and "
			  "%llu kept to their deadline refused so far)",
			  (unsigned long long)(s->buffered_peak >> 20),
			  (unsigned long long)s->budget_pauses,
			  (unsigned long long)s->budget_evicted,
			  (unsigned long long)s->budget_refused);
	s->over_budget = pressed;
}

static void conn_closed(uv_handle_t *h)
{
	gw_conn *c = (gw_conn *)h;
	c->s->n_conns--;
	if (c->prev)
		c->prev->next = c->next;
	else
		c->s->conns = c->next;
	if (c->next)
		c->next->prev = c->prev;
	free(c);
}

/* A connection past --max-conns: a canned 503 written without h2o, then
 * closed (the client hears why instead of a reset). */
static void refuse_closed(uv_handle_t *h)
{
	free(h);
}

static void refuse_conn(gw_srv *s, uv_stream_t *listener)
{
	uv_tcp_t *t = malloc(sizeof *t);
	if (!t)
		return;
	uv_tcp_init(listener->loop, t);
	if (uv_accept(listener, (uv_stream_t *)t) == 0) {
		static const char body[] =
		    "{\"error\":{\"message\":\"too many connections "
		    "(--max-conns)\",\"type\":\"server_error\",\"param\":null,"
		    "\"code\":\"too_many_connections\"}}";
		char resp[512];
		int n = snprintf(resp, sizeof resp,
				 "HTTP/1.1 503 Service Unavailable\r\n"
				 "Content-Type: application/json\r\n"
				 "Retry-After: 1\r\nConnection: close\r\n"
				 "Content-Length: %zu\r\n\r\n%s",
				 sizeof body - 1, body);
		uv_buf_t b = uv_buf_init(resp, (unsigned)n);
		uv_try_write((uv_stream_t *)t, &b, 1);
	}
	s->conns_refused++;
	uv_close((uv_handle_t *)t, refuse_closed);
}

static void on_accept(uv_stream_t *listener, int status)
{
	gw_srv *s = listener->data;
	if (status != 0 || s->stopping)
		return;
	if (s->n_conns >= s->cfg.max_conns) {
		refuse_conn(s, listener);
		return;
	}
	gw_conn *c = h2o_mem_alloc(sizeof *c);
	memset(c, 0, sizeof *c);
	c->s = s;
	s->n_conns++;
	c->next = s->conns;
	if (s->conns)
		s->conns->prev = c;
	s->conns = c;
	uv_tcp_init(listener->loop, &c->tcp);
	if (uv_accept(listener, (uv_stream_t *)&c->tcp) != 0) {
		uv_close((uv_handle_t *)&c->tcp, conn_closed);
		return;
	}
	c->read_from = uv_now(listener->loop); /* h2o's deadline starts */
	uv_tcp_nodelay(&c->tcp, 1);
	/* a fixed send buffer (the kernel doubles it: 128 KiB) instead of
	 * autotuning up to 4 MB per connection: what a client that stops
	 * reading can park in the kernel is bounded, and --write-timeout-s
	 * sees the stall after that much */
	int sndbuf = GW_SNDBUF, rcvbuf = GW_RCVBUF;
	uv_send_buffer_size((uv_handle_t *)&c->tcp, &sndbuf);
	/* and a fixed receive buffer: what one read brings in is bounded,
	 * so the body budget overshoots by little between two checks */
	uv_recv_buffer_size((uv_handle_t *)&c->tcp, &rcvbuf);
	int len = sizeof c->peer;
	uv_tcp_getpeername(&c->tcp, (struct sockaddr *)&c->peer, &len);
	c->sock = h2o_uv_socket_create((uv_stream_t *)&c->tcp, conn_closed);
	h2o_accept(&s->actx, c->sock);
}

/* The socket of req's connection, or -1. */
static int conn_fd(gw_srv *s, h2o_req_t *req)
{
	struct sockaddr_storage sa;
	memset(&sa, 0, sizeof sa);
	if (!req->conn->callbacks->get_peername ||
	    !req->conn->callbacks->get_peername(req->conn,
						(struct sockaddr *)&sa))
		return -1;
	for (gw_conn *c = s->conns; c; c = c->next) {
		if (c->peer.ss_family != sa.ss_family)
			continue;
		if (sa.ss_family == AF_INET &&
		    memcmp(&c->peer, &sa, sizeof(struct sockaddr_in)))
			continue;
		if (sa.ss_family == AF_INET6 &&
		    memcmp(&c->peer, &sa, sizeof(struct sockaddr_in6)))
			continue;
		uv_os_fd_t fd;
		if (uv_fileno((uv_handle_t *)&c->tcp, &fd))
			return -1;
		return fd;
	}
	return -1;
}

void gw_conn_abort(gw_srv *s, h2o_req_t *req)
{
	int fd = conn_fd(s, req);
	/* h2o's pending write then fails and h2o closes the connection
	 * itself (closing it under h2o would free what h2o still uses) */
	if (fd >= 0)
		shutdown(fd, SHUT_RDWR);
}

long gw_conn_unsent(gw_srv *s, h2o_req_t *req)
{
	int fd = conn_fd(s, req), n = 0;
	return fd >= 0 && ioctl(fd, SIOCOUTQ, &n) == 0 ? n : -1;
}

int gw_client_gone(gw_srv *s, h2o_req_t *req)
{
	int fd = conn_fd(s, req);
	if (fd < 0)
		return 0;
	char b;
	ssize_t r = recv(fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
	return r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK &&
			  errno != EINTR);
}

int gw_http_start(gw_srv *s, char *err)
{
	h2o_config_init(&s->hconf);
	s->hconf.max_request_entity_size = s->cfg.max_body;
	/* HTTP/1.1 only: h2o 2.2.5's h2c (Upgrade and prior knowledge) is a
	 * second protocol stack on a plain port that nothing here needs */
	s->hconf.http1.upgrade_to_http2 = 0;
	/* a request's head and body must arrive within this (h2o arms it
	 * once per request, not per read: slowloris gets no longer) */
	s->hconf.http1.req_timeout = (uint64_t)(s->cfg.read_timeout_s * 1000);
	s->hconf.server_name = h2o_iovec_init(H2O_STRLIT("moor-gatewayd"));
	h2o_hostconf_t *host = h2o_config_register_host(
	    &s->hconf, h2o_iovec_init(H2O_STRLIT("default")), 65535);
	h2o_pathconf_t *pc = h2o_config_register_path(host, "/", 0);
	gw_handler *h = (gw_handler *)h2o_create_handler(pc, sizeof *h);
	h->super.on_req = on_req;
	h->s = s;
	h2o_context_init(&s->hctx, s->loop, &s->hconf);
	s->budget_tmp = calloc(s->cfg.max_conns, sizeof *s->budget_tmp);
	if (!s->budget_tmp) {
		moor_errf(err, "out of memory");
		return -ENOMEM;
	}
	uv_check_init(s->loop, &s->budget_chk);
	s->budget_chk.data = s;
	uv_check_start(&s->budget_chk, budget_check);
	uv_unref((uv_handle_t *)&s->budget_chk);
	s->actx.ctx = &s->hctx;
	s->actx.hosts = s->hconf.hosts;

	struct sockaddr_in addr;
	int rv = uv_ip4_addr(s->cfg.listen_host, s->cfg.listen_port, &addr);
	if (rv) {
		moor_errf(err, "--listen %s:%d: %s", s->cfg.listen_host,
			  s->cfg.listen_port, uv_strerror(rv));
		return rv;
	}
	uv_tcp_init(s->loop, &s->listener);
	s->listener.data = s;
	if ((rv = uv_tcp_bind(&s->listener, (struct sockaddr *)&addr, 0)) ||
	    (rv = uv_listen((uv_stream_t *)&s->listener, 128, on_accept))) {
		moor_errf(err, "listen on %s:%d: %s", s->cfg.listen_host,
			  s->cfg.listen_port, uv_strerror(rv));
		return rv;
	}
	return 0;
}

void gw_http_stop(gw_srv *s)
{
	if (!uv_is_closing((uv_handle_t *)&s->listener))
		uv_close((uv_handle_t *)&s->listener, NULL);
	if (!uv_is_closing((uv_handle_t *)&s->budget_chk))
		uv_close((uv_handle_t *)&s->budget_chk, NULL);
}
