/* gwtest.h: what the gateway tests share (`gt_`): a minimal HTTP/1.1
 * client over a TCP socket (one request per connection, chunked bodies
 * decoded, SSE events split), and the stack: cached + engined (the daemon
 * harness, tests/daemon/harness.h) + gatewayd on a free port, up when
 * /health says 200. Include once (it brings t.h and harness.h).
 *
 * Every test takes: CACHED ENGINED GATEWAYD MODEL_DIR. */
#ifndef GW_TEST_H
#define GW_TEST_H

#include <arpa/inet.h>
#include <jansson.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>

#include "t.h"

#include "harness.h"

typedef struct gt_resp {
	int status; /* 0: no response (connection failed) */
	char *head; /* the raw header block, NUL-terminated */
	char *body; /* decoded (chunked), NUL-terminated */
	size_t body_len;
	double secs; /* from connect to the end of the body */
} gt_resp;

static inline void gt_resp_fini(gt_resp *r)
{
	free(r->head);
	free(r->body);
	memset(r, 0, sizeof *r);
}

/* A header's value (case-insensitive name) copied into out, or 0. */
static inline int gt_header(const gt_resp *r, const char *name, char *out,
			    size_t n)
{
	if (!r->head)
		return 0;
	size_t nl = strlen(name);
	for (const char *p = r->head; (p = strchr(p, '\n'));) {
		p++;
		if (!strncasecmp(p, name, nl) && p[nl] == ':') {
			const char *v = p + nl + 1;
			while (*v == ' ')
				v++;
			size_t k = strcspn(v, "\r\n");
			if (k >= n)
				k = n - 1;
			memcpy(out, v, k);
			out[k] = 0;
			return 1;
		}
	}
	return 0;
}

static inline int gt_connect(int port)
{
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	if (fd < 0)
		return -1;
	struct sockaddr_in a = {.sin_family = AF_INET,
				.sin_port = htons((uint16_t)port)};
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (connect(fd, (struct sockaddr *)&a, sizeof a)) {
		close(fd);
		return -1;
	}
	return fd;
}

/* The admin token every gatewayd of the stack gets (MOOR_ADMIN_TOKEN, set
 * by gt_gatewayd), and that gt_send adds to every /v1/cache/ request whose
 * headers name no Authorization. A test that checks the refusals sets
 * gt_admin.off = 1 around them; no_token = 1 starts the next gatewayd
 * with no admin token at all. */
#define GT_ADMIN_TOKEN "gt-admin-7f3c1e"
static struct {
	int off, no_token;
} gt_admin;

/* Sends method path with body (NULL: none) and extra header lines (each
 * "Name: value\r\n", may be NULL). Returns the socket, or -1. */
static inline int gt_send(int port, const char *method, const char *path,
			  const char *body, const char *headers)
{
	int fd = gt_connect(port);
	if (fd < 0)
		return -1;
	size_t bl = body ? strlen(body) : 0;
	char *req = malloc(bl + 1024 + (headers ? strlen(headers) : 0));
	const char *auth = "";
	if (!gt_admin.off && !strncmp(path, "/v1/cache/", 10) &&
	    !(headers && strcasestr(headers, "authorization:")))
		auth = "Authorization: Bearer " GT_ADMIN_TOKEN "\r\n";
	int n = sprintf(req,
			"%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\n"
			"Connection: close\r\n%s%s%s",
			method, path, auth, headers ? headers : "",
			body ? "Content-Type: application/json\r\n" : "");
	n += sprintf(req + n, "Content-Length: %zu\r\n\r\n", bl);
	if (bl)
		memcpy(req + n, body, bl);
	size_t len = (size_t)n + bl, off = 0;
	while (off < len) {
		ssize_t w = write(fd, req + off, len - off);
		if (w <= 0)
			break;
		off += (size_t)w;
	}
	free(req);
	return fd;
}

/* Reads until the peer closes (timeout_s bound). */
static inline int gt_read_all(int fd, char **out, size_t *len, double timeout_s)
{
	size_t cap = 65536, n = 0;
	char *b = malloc(cap);
	double end = moor_now() + timeout_s;
	for (;;) {
		int left = (int)((end - moor_now()) * 1000);
		if (left <= 0)
			break;
		struct pollfd p = {fd, POLLIN, 0};
		if (poll(&p, 1, left) <= 0)
			break;
		if (n + 4096 > cap)
			b = realloc(b, cap *= 2);
		ssize_t r = read(fd, b + n, cap - n - 1);
		if (r <= 0)
			break;
		n += (size_t)r;
	}
	b[n] = 0;
	*out = b;
	*len = n;
	return 0;
}

/* Splits a raw response into status, head and (de-chunked) body. */
static inline void gt_parse(char *raw, size_t n, gt_resp *r)
{
	char *sep = strstr(raw, "\r\n\r\n");
	if (!sep || sscanf(raw, "HTTP/1.%*d %d", &r->status) != 1) {
		r->status = 0;
		free(raw);
		return;
	}
	size_t hl = (size_t)(sep - raw);
	r->head = malloc(hl + 1);
	memcpy(r->head, raw, hl);
	r->head[hl] = 0;
	const char *p = sep + 4, *end = raw + n;
	char te[64] = "";
	gt_header(r, "transfer-encoding", te, sizeof te);
	r->body = malloc((size_t)(end - p) + 1);
	size_t bl = 0;
	if (!strcasecmp(te, "chunked")) {
		while (p < end) {
			char *e;
			unsigned long k = strtoul(p, &e, 16);
			const char *d = strstr(e, "\r\n");
			if (!d || k == 0)
				break;
			d += 2;
			if (d + k > end)
				k = (size_t)(end - d);
			memcpy(r->body + bl, d, k);
			bl += k;
			p = d + k + 2;
		}
	} else {
		bl = (size_t)(end - p);
		memcpy(r->body, p, bl);
	}
	r->body[bl] = 0;
	r->body_len = bl;
	free(raw);
}

static inline gt_resp gt_request(int port, const char *method, const char *path,
				 const char *body, const char *headers,
				 double timeout_s)
{
	gt_resp r = {0};
	double t0 = moor_now();
	int fd = gt_send(port, method, path, body, headers);
	if (fd < 0)
		return r;
	char *raw;
	size_t n;
	gt_read_all(fd, &raw, &n, timeout_s);
	close(fd);
	gt_parse(raw, n, &r);
	r.secs = moor_now() - t0;
	return r;
}

static inline gt_resp gt_post(int port, const char *path, const char *body)
{
	return gt_request(port, "POST", path, body, NULL, 60);
}

static inline gt_resp gt_get(int port, const char *path)
{
	return gt_request(port, "GET", path, NULL, NULL, 30);
}

static inline json_t *gt_json(const gt_resp *r)
{
	return r->body ? json_loads(r->body, 0, NULL) : NULL;
}

/* The SSE events of a body: the JSON of every "data: " line but [DONE]
 * (appended to the array events); *done_last: [DONE] came, and last.
 * Comment lines (": progress ...", each followed by a blank line) are
 * skipped, as SSE clients skip them. Returns -1 on a line that is not
 * "data: ..." followed by a blank line. */
static inline int gt_sse(const char *body, json_t *events, int *done_last)
{
	*done_last = 0;
	const char *p = body;
	while (*p) {
		if (*p == ':') {
			const char *e = strstr(p, "\n\n");
			if (!e)
				return -1;
			p = e + 2;
			continue;
		}
		if (strncmp(p, "data: ", 6))
			return -1;
		const char *e = strstr(p, "\n\n");
		if (!e)
			return -1;
		size_t n = (size_t)(e - p - 6);
		if (n == 6 && !strncmp(p + 6, "[DONE]", 6)) {
			*done_last = e[2] == 0;
			return 0;
		}
		json_t *j = json_loadb(p + 6, n, 0, NULL);
		if (!j)
			return -1;
		json_array_append_new(events, j);
		p = e + 2;
	}
	return 0;
}

/* body (a JSON object's text) with its closing brace replaced by
 * ",extra}"; malloc'd */
static inline char *gt_with(const char *body, const char *extra)
{
	size_t n = strlen(body);
	char *o = malloc(n + strlen(extra) + 4);
	sprintf(o, "%.*s,%s}", (int)n - 1, body, extra);
	return o;
}

/* choices[0] of a reply or a chunk */
static inline const json_t *gt_choice0(const json_t *o)
{
	return json_array_get(json_object_get(o, "choices"), 0);
}

/* POST body to path: a 200 with a JSON body is required; the JSON */
static inline json_t *gt_post_whole(int port, const char *path,
				    const char *body)
{
	gt_resp r = gt_post(port, path, body);
	REQUIRE(r.status == 200, "%s %s: %d %s", path, body, r.status, r.body);
	json_t *o = gt_json(&r);
	REQUIRE(o, "not JSON: %s", r.body);
	gt_resp_fini(&r);
	return o;
}

/* POST body (a streamed request) to path: a 200 whose SSE events end with
 * [DONE] is required; the events but [DONE] */
static inline json_t *gt_post_stream(int port, const char *path,
				     const char *body)
{
	gt_resp r = gt_post(port, path, body);
	REQUIRE(r.status == 200, "%s %s: %d %s", path, body, r.status, r.body);
	json_t *ev = json_array();
	int done_last = 0;
	REQUIRE(gt_sse(r.body, ev, &done_last) == 0 && done_last,
		"SSE framing, [DONE] last: %s", r.body);
	gt_resp_fini(&r);
	return ev;
}

static inline const char *gt_str(const json_t *o, const char *path)
{
	/* a.b.c with numbers for array indices */
	char buf[256];
	snprintf(buf, sizeof buf, "%s", path);
	const json_t *v = o;
	for (char *t = strtok(buf, "."); t && v; t = strtok(NULL, ".")) {
		if (json_is_array(v))
			v = json_array_get(v, (size_t)atoi(t));
		else
			v = json_object_get(v, t);
	}
	return json_is_string(v) ? json_string_value(v) : NULL;
}

static inline long long gt_int(const json_t *o, const char *path)
{
	char buf[256];
	snprintf(buf, sizeof buf, "%s", path);
	const json_t *v = o;
	for (char *t = strtok(buf, "."); t && v; t = strtok(NULL, ".")) {
		if (json_is_array(v))
			v = json_array_get(v, (size_t)atoi(t));
		else
			v = json_object_get(v, t);
	}
	return json_is_integer(v) ? (long long)json_integer_value(v) : -1;
}

/* ---- the stack --------------------------------------------------------- */

static struct {
	const char *cached, *engined, *gatewayd, *model, *run;
	int port;
	/* cached's flags after --run-dir (NULL-ended), set before gt_stack;
	 * NULL: the daemon tests' budgets (H_CACHED_BUDGETS) */
	const char *const *cached_args;
	pid_t cd, ed, gw;
	int n_eng, n_gw;
} gt_;

static inline int gt_free_port(void)
{
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in a = {.sin_family = AF_INET};
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	socklen_t l = sizeof a;
	if (bind(fd, (struct sockaddr *)&a, sizeof a) ||
	    getsockname(fd, (struct sockaddr *)&a, &l)) {
		close(fd);
		return -1;
	}
	close(fd);
	return ntohs(a.sin_port);
}

/* Polls GET /health until it answers want (any answer when want is 0). */
static inline int gt_wait_health(int port, int want, double timeout_s)
{
	double end = moor_now() + timeout_s;
	while (moor_now() < end) {
		gt_resp r = gt_get(port, "/health");
		int st = r.status;
		gt_resp_fini(&r);
		if (st && (!want || st == want))
			return st;
		struct timespec ts = {0, 20 * 1000 * 1000};
		nanosleep(&ts, NULL);
	}
	return -1;
}

/* engined on the run dir with the tests' sizes; extra args NULL-ended. */
static inline pid_t gt_engined(const char *extra1, const char *extra2)
{
	char log[32];
	snprintf(log, sizeof log, "engined%d", ++gt_.n_eng);
	gt_.ed =
	    h_engined(gt_.engined, gt_.model, gt_.run, log, "--threads", "2",
		      "--grid", "64", "--window", "4096", extra1, extra2, NULL);
	return gt_.ed;
}

/* gatewayd on a free port; extra args (NULL-ended list of up to 6). */
static inline pid_t gt_gatewayd(int *port_out, const char *const *extra)
{
	int port = gt_free_port();
	REQUIRE(port > 0, "no free port");
	char listen[32], log[32];
	snprintf(listen, sizeof listen, "127.0.0.1:%d", port);
	snprintf(log, sizeof log, "gatewayd%d", ++gt_.n_gw);
	char *argv[24] = {(char *)gt_.gatewayd,
			  "--model",
			  (char *)gt_.model,
			  "--run-dir",
			  (char *)gt_.run,
			  "--listen",
			  listen,
			  "--window",
			  "4096",
			  "--log-level",
			  "debug"};
	int k = 11;
	for (int i = 0; extra && extra[i] && k < 23; i++)
		argv[k++] = (char *)extra[i];
	argv[k] = NULL;
	if (gt_admin.no_token)
		unsetenv("MOOR_ADMIN_TOKEN");
	else
		setenv("MOOR_ADMIN_TOKEN", GT_ADMIN_TOKEN, 1);
	pid_t pid = h_spawn(log, argv);
	REQUIRE(gt_wait_health(port, 0, 20) > 0, "gatewayd did not answer");
	*port_out = port;
	return pid;
}

/* cached's flags for the disk tier alone in dir (a directory the test
 * made): the daemon tests' budgets, anchors from 64 tokens on, whatever
 * the drive has free, and the session spill off (its floor past any
 * prompt). */
#define GT_CACHED_DISK_TIER(dir)                                               \
	H_CACHED_BUDGETS, "--disk-dir", (dir), "--disk-cache-min-tokens",      \
	    "64", "--disk-cache-min-free-gb", "0",                             \
	    "--session-spill-min-tokens", "100000000"

/* cached on the stack's run dir, its flags after --run-dir in args
 * (NULL-ended; NULL: the daemon tests' budgets, H_CACHED_BUDGETS), its log
 * logname (one a process: the wait reads it); waits until it serves and,
 * when the gateway is up (a restart), until the stack is green again. */
static inline pid_t gt_cached(const char *const *args, const char *logname)
{
	static const char *const budgets[] = {H_CACHED_BUDGETS, NULL};
	char *a[48] = {(char *)gt_.cached, "--device", (char *)h_device(),
		       "--run-dir", (char *)gt_.run};
	int k = 5;
	for (const char *const *p = args ? args : budgets; *p; p++) {
		REQUIRE(k < 47, "gt_cached: too many flags");
		a[k++] = (char *)*p;
	}
	a[k] = NULL;
	pid_t pid = h_spawn(logname, a);
	REQUIRE(h_wait_ready(logname, "serving", gt_.run, "admin.sock", pid,
			     20) == 0,
		"%s did not come up on %s", logname, gt_.run);
	if (gt_.port)
		REQUIRE(gt_wait_health(gt_.port, 200, 60) == 200,
			"the stack is not green after %s came up", logname);
	return pid;
}

/* Polls logname's log until a line holds what: 1, or 0 after secs. */
static inline int gt_wait_log(const char *logname, const char *what,
			      double secs)
{
	double end = moor_now() + secs;
	while (moor_now() < end) {
		if (h_log_has(logname, what))
			return 1;
		struct timespec ts = {0, 10 * 1000 * 1000};
		nanosleep(&ts, NULL);
	}
	return h_log_has(logname, what);
}

/* The whole stack on a fresh run dir; the gateway's port in gt_.port. */
static inline void gt_stack(int argc, char **argv, const char *name,
			    int bound_s, const char *const *gw_extra,
			    const char *eng1, const char *eng2)
{
	REQUIRE(argc == 5, "usage: %s CACHED ENGINED GATEWAYD MODEL_DIR",
		argv[0]);
	gt_.cached = argv[1];
	gt_.engined = argv[2];
	gt_.gatewayd = argv[3];
	gt_.model = argv[4];
	gt_.run = h_init(name, bound_s);
	gt_.port = 0;
	gt_.cd = gt_cached(gt_.cached_args, "cached");
	gt_engined(eng1, eng2);
	gt_.gw = gt_gatewayd(&gt_.port, gw_extra);
	REQUIRE(gt_wait_health(gt_.port, 200, 20) == 200,
		"the stack did not come up green");
}

/* A chat body: one user message, greedy, max_tokens, extra fields (a JSON
 * object's members without braces, or ""). malloc'd. */
static inline char *gt_chat_body(const char *user, int max_tokens,
				 const char *extra)
{
	json_t *m = json_pack("{s:s,s:s}", "role", "user", "content", user);
	json_t *b = json_pack("{s:[o],s:i,s:i}", "messages", m, "max_tokens",
			      max_tokens, "temperature", 0);
	char *t = json_dumps(b, JSON_COMPACT | JSON_PRESERVE_ORDER);
	json_decref(b);
	if (extra && *extra) {
		size_t n = strlen(t);
		char *o = malloc(n + strlen(extra) + 4);
		t[n - 1] = 0; /* the closing brace */
		sprintf(o, "%s,%s}", t, extra);
		free(t);
		return o;
	}
	return t;
}

/* ---- many requests at once ------------------------------------------- */

/* One request of gt_many: what came back. */
typedef struct gt_one {
	int status;	  /* 0: no answer before the deadline (a hang) */
	int retry_after;  /* the Retry-After header's seconds, or -1 */
	double secs;	  /* from connect to the end of the answer */
	char err[160];	  /* the error's message of a non-200, or "" */
} gt_one;

/* Sends n copies of one POST at once, each on its own connection, from one
 * thread (poll), and reads every answer until its peer closes or
 * deadline_s passes. hdrs: request i's extra header lines (NULL: none, or
 * hdrs[i] NULL). out[i] says what request i got. Returns how many got no
 * answer. */
static inline int gt_many_h(int port, const char *path, const char *body,
			    int n, const char *const *hdrs, double deadline_s,
			    gt_one *out)
{
	int *fd = calloc((size_t)n, sizeof *fd);
	char **buf = calloc((size_t)n, sizeof *buf);
	size_t *len = calloc((size_t)n, sizeof *len),
	       *cap = calloc((size_t)n, sizeof *cap);
	struct pollfd *p = calloc((size_t)n, sizeof *p);
	double t0 = moor_now(), end = t0 + deadline_s;
	int open_n = 0;
	for (int i = 0; i < n; i++) {
		memset(&out[i], 0, sizeof out[i]);
		out[i].retry_after = -1;
		fd[i] = gt_send(port, "POST", path, body, hdrs ? hdrs[i] : NULL);
		if (fd[i] >= 0)
			open_n++;
		cap[i] = 4096;
		buf[i] = malloc(cap[i]);
	}
	while (open_n > 0) {
		int left = (int)((end - moor_now()) * 1000);
		if (left <= 0)
			break;
		for (int i = 0; i < n; i++)
			p[i] = (struct pollfd){fd[i], POLLIN, 0};
		if (poll(p, (nfds_t)n, left) <= 0)
			continue;
		for (int i = 0; i < n; i++) {
			if (fd[i] < 0 || !(p[i].revents & (POLLIN | POLLHUP |
							   POLLERR)))
				continue;
			if (len[i] + 4096 > cap[i])
				buf[i] = realloc(buf[i], cap[i] *= 2);
			ssize_t r = read(fd[i], buf[i] + len[i],
					 cap[i] - len[i] - 1);
			if (r > 0) {
				len[i] += (size_t)r;
				continue;
			}
			close(fd[i]);
			fd[i] = -1;
			open_n--;
			out[i].secs = moor_now() - t0;
			buf[i][len[i]] = 0;
			gt_resp rs = {0};
			gt_parse(buf[i], len[i], &rs);
			buf[i] = NULL;
			out[i].status = rs.status;
			char ra[32];
			if (gt_header(&rs, "retry-after", ra, sizeof ra))
				out[i].retry_after = atoi(ra);
			if (rs.status && rs.status != 200 && rs.body) {
				json_t *o = json_loads(rs.body, 0, NULL);
				const char *m =
				    o ? json_string_value(json_object_get(
					    json_object_get(o, "error"),
					    "message"))
				      : NULL;
				snprintf(out[i].err, sizeof out[i].err, "%s",
					 m ? m : rs.body);
				json_decref(o);
			}
			gt_resp_fini(&rs);
		}
	}
	int hung = 0;
	for (int i = 0; i < n; i++) {
		if (fd[i] >= 0) {
			close(fd[i]);
			out[i].status = 0;
			out[i].secs = moor_now() - t0;
		}
		if (!out[i].status)
			hung++;
		free(buf[i]);
	}
	free(fd);
	free(buf);
	free(len);
	free(cap);
	free(p);
	return hung;
}

static inline int gt_many(int port, const char *path, const char *body, int n,
			  double deadline_s, gt_one *out)
{
	return gt_many_h(port, path, body, n, NULL, deadline_s, out);
}

/* ---- a daemon's memory and its log ---- */

/* pid's /proc status field key ("VmRSS:", "VmHWM:"), KiB; -1 if none. */
static inline long gt_status_kb(pid_t pid, const char *key)
{
	char p[64], line[256];
	snprintf(p, sizeof p, "/proc/%d/status", (int)pid);
	FILE *f = fopen(p, "r");
	long kb = -1;
	size_t kl = strlen(key);
	while (f && fgets(line, sizeof line, f))
		if (!strncmp(line, key, kl))
			kb = atol(line + kl);
	if (f)
		fclose(f);
	return kb;
}

/* Resets pid's VmHWM to its VmRSS (clear_refs 5, Linux 4.0), so a peak
 * before (the tokenizer's load) is not counted as what follows; 0 or -1. */
static inline int gt_reset_hwm(pid_t pid)
{
	char p[64];
	snprintf(p, sizeof p, "/proc/%d/clear_refs", (int)pid);
	FILE *f = fopen(p, "w");
	if (!f)
		return -1;
	int ok = fputs("5", f) >= 0;
	return fclose(f) == 0 && ok ? 0 : -1;
}

/* The lines of logname's log (the harness's folder) that contain str. */
static inline int gt_log_count(const char *logname, const char *str)
{
	char log[300];
	snprintf(log, sizeof log, "%s/%s.log", h_.dir, logname);
	int n = t_file_count(log, str);
	return n < 0 ? 0 : n; /* no log yet: no line */
}

/* The RSS bound over its base that gatewayd's log (logname) states, MiB
 * (its last "RSS bound N" line); -1 if none. */
static inline long gt_stated_bound_mib(const char *logname)
{
	char log[300], line[2048];
	snprintf(log, sizeof log, "%s/%s.log", h_.dir, logname);
	FILE *f = fopen(log, "r");
	long mib = -1;
	while (f && fgets(line, sizeof line, f)) {
		const char *p = strstr(line, "RSS bound ");
		if (p)
			mib = atol(p + 10);
	}
	if (f)
		fclose(f);
	return mib;
}

/* The bytes a token's logprobs can cost that gatewayd's log (logname)
 * states on its memory line ("N bytes a token", gw_lp_token_bytes; 0 with
 * --max-logprobs 0); -1 if none. */
static inline long long gt_stated_lp_token_bytes(const char *logname)
{
	char log[300], line[2048];
	snprintf(log, sizeof log, "%s/%s.log", h_.dir, logname);
	FILE *f = fopen(log, "r");
	long long n = -1;
	while (f && fgets(line, sizeof line, f)) {
		const char *p = strstr(line, " bytes a token");
		if (!p)
			continue;
		while (p > line && p[-1] >= '0' && p[-1] <= '9')
			p--;
		n = atoll(p);
	}
	if (f)
		fclose(f);
	return n;
}

#endif
