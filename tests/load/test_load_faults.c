/* test_load_faults: the load and fault suite (issue 13), loopback only,
 * bounded in count and time. It prints a table.
 *
 * 1. Load: clients at once, each on its own connection, mixing short
 *    chats, streamed chats, long prompts, clients that vanish mid-stream,
 *    slowloris clients (their head a byte at a time) and abusive bodies
 *    (a million empty objects, nesting 100,000 deep, 20,000 messages:
 *    400, or 503 with a Retry-After past the queue). Every request
 *    that waits for its answer gets one: 200, or 503 with a Retry-After
 *    past the queue; a stream ends with [DONE]; a slowloris connection is
 *    closed by the gateway (--read-timeout-s); a slow reader (a stream
 *    with a 2 KiB receive buffer that stops reading after its first event,
 *    one client in 40) is cut by the write deadline (--write-timeout-s 3:
 *    its stream ends without [DONE], gatewayd's log says "has not read")
 *    while the others are answered; none hangs past its deadline. p50 and
 *    p99 latency per kind, the peak RSS (VmHWM) of gatewayd and cached,
 *    and gatewayd's growth over the load under the RSS bound its log
 *    states.
 * 2. engined's restart keeps the RAM caches (a conversation's follow-up
 *    after a kill -9 of engined resumes, cached_tokens > 0). Then faults
 *    under load, with deploy/run supervising (a stack of its own on
 *    another port, the tests' budgets): kill -9 of engined, of gatewayd
 *    and of cached, one at a time, while clients are in flight; deploy/run
 *    starts the victim again. Every request in flight gets an answer or an
 *    error (a status, or its connection closed), none hangs; the stack is
 *    green again after each restart and answers a chat; SIGTERM then
 *    stops deploy/run with exit 0 and no daemon left.
 *
 * The suite's run (suite slow) is the short version; MOOR_LOAD_FULL=1 (the
 * bench target bench_load_faults) sends 1,000 clients and kills each
 * daemon three times.
 *
 *   test_load_faults CACHED ENGINED GATEWAYD MODEL_DIR */
#include <fcntl.h>
#include <stdlib.h>

#include "t.h"

#include "buf.h"

#include "gwtest.h"
#include "harness.h"

enum { K_SHORT, K_STREAM, K_LONG, K_VANISH, K_SLOW, K_SLOWREAD, K_ABUSE, K_N };
static const char *const kind_name[K_N] = {
    "short chat", "streamed chat", "long prompt", "vanishes",
    "slowloris",  "slow reader",   "abusive body"};

/* A slow reader reads its stream's head, then nothing for SLOWREAD_S
 * (the gateway's --write-timeout-s is WRITE_TIMEOUT_S; its fixed send
 * buffer and the client's 2 KiB receive buffer fill after ~750 tokens),
 * then reads on: its stream must have been cut (no [DONE]). */
#define WRITE_TIMEOUT_S "3"
#define SLOWREAD_S 45.0
#define SLOWREAD_TOKENS 3000

typedef struct cl {
	int kind;
	int fd;
	char *req;
	size_t req_len, sent;
	double t0, t_next, secs;
	double t_read; /* a slow reader reads again from then */
	char *buf;
	size_t len, cap;
	int done;   /* the connection ended (closed by the peer or by us) */
	int status; /* the response's status; 0: none */
	int retry_after, stream_done;
} cl;

static char *long_text;

/* The abusive bodies of test_gw_rss_bound, refused before the work they
 * would cause (400): a million empty objects (3 MB), nesting 100,000
 * deep, 20,000 messages. malloc'd. */
static char *abusive_body(int which)
{
	moor_buf b = {0};
	moor_buf_puts(&b, "{\"messages\":");
	if (which == 0) {
		moor_buf_puts(&b, "[{}");
		for (int i = 1; i < 1000000; i++)
			moor_buf_puts(&b, ",{}");
		moor_buf_puts(&b, "]");
	} else if (which == 1) {
		for (int i = 0; i < 100000; i++)
			moor_buf_puts(&b, "[");
		for (int i = 0; i < 100000; i++)
			moor_buf_puts(&b, "]");
	} else {
		moor_buf_puts(&b, "[");
		for (int i = 0; i < 20000; i++)
			moor_buf_puts(&b, i ? ",{\"role\":\"user\",\"content\":"
					      "\"x\"}"
					    : "{\"role\":\"user\",\"content\":"
					      "\"x\"}");
		moor_buf_puts(&b, "]");
	}
	moor_buf_puts(&b, "}");
	REQUIRE(!b.err, "oom");
	size_t n;
	return moor_buf_take(&b, &n);
}

static char *body_of(int kind, int i)
{
	char u[64];
	snprintf(u, sizeof u, "Client %d says hello.", i);
	switch (kind) {
	case K_STREAM:
	case K_VANISH:
		return gt_chat_body(u, 8, "\"stream\":true");
	case K_LONG:
		return gt_chat_body(long_text, 2, "");
	case K_SLOWREAD:
		return gt_chat_body(u, SLOWREAD_TOKENS,
				    "\"stream\":true,\"ignore_eos\":true");
	case K_ABUSE:
		return abusive_body(i / 40 % 3);
	default:
		return gt_chat_body(u, 4, "");
	}
}

static void cl_start(cl *c, int port, int kind, int i, double now)
{
	memset(c, 0, sizeof *c);
	c->kind = kind;
	c->retry_after = -1;
	char *b = body_of(kind, i);
	size_t bl = strlen(b);
	c->req = malloc(bl + 512);
	c->req_len = (size_t)sprintf(c->req,
				     "POST /v1/chat/completions HTTP/1.1\r\n"
				     "Host: 127.0.0.1\r\nConnection: close\r\n"
				     "Content-Type: application/json\r\n"
				     "Content-Length: %zu\r\n\r\n%s",
				     bl, b);
	free(b);
	if (kind == K_SLOWREAD) {
		/* the smallest receive buffer, set before the connect */
		c->fd = socket(AF_INET, SOCK_STREAM, 0);
		int rcv = 2048;
		setsockopt(c->fd, SOL_SOCKET, SO_RCVBUF, &rcv, sizeof rcv);
		struct sockaddr_in sa = {.sin_family = AF_INET,
					 .sin_port = htons((uint16_t)port)};
		sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
		if (connect(c->fd, (struct sockaddr *)&sa, sizeof sa)) {
			close(c->fd);
			c->fd = -1;
		}
	} else {
		c->fd = gt_connect(port);
	}
	c->t0 = c->t_next = now;
	c->cap = 8192;
	c->buf = malloc(c->cap);
	if (c->fd < 0) {
		c->done = 1; /* refused at connect: an error, not a hang */
		return;
	}
	fcntl(c->fd, F_SETFL, O_NONBLOCK);
	/* the request goes at once, not when the last of the clients has
	 * connected: a thousand connects take seconds on a loaded box, past
	 * the gateway's --read-timeout-s 3 for the first ones (which it then
	 * closes unanswered: status 0) */
	if (kind != K_SLOW) {
		ssize_t w = send(c->fd, c->req, c->req_len, MSG_NOSIGNAL);
		if (w > 0)
			c->sent = (size_t)w;
	}
}

static void cl_end(cl *c, double now)
{
	if (c->fd >= 0)
		close(c->fd);
	c->fd = -1;
	c->done = 1;
	c->secs = now - c->t0;
	c->buf[c->len < c->cap ? c->len : c->cap - 1] = 0;
	if (sscanf(c->buf, "HTTP/1.%*d %d", &c->status) != 1)
		c->status = 0;
	const char *ra = strcasestr(c->buf, "\r\nretry-after:");
	if (ra)
		c->retry_after = atoi(ra + 14);
	c->stream_done = strstr(c->buf, "data: [DONE]") != NULL;
}

/* Drives every client until each is done or deadline passes. */
static void drive(cl *c, int n, double deadline)
{
	struct pollfd *p = calloc((size_t)n, sizeof *p);
	for (;;) {
		double now = moor_now();
		int open_n = 0, wait_ms = 50;
		for (int i = 0; i < n; i++) {
			p[i] = (struct pollfd){-1, 0, 0};
			if (c[i].done)
				continue;
			open_n++;
			/* a slow reader past its head reads nothing until
			 * t_read */
			short ev = c[i].kind == K_SLOWREAD && c[i].t_read &&
					   now < c[i].t_read
				       ? 0
				       : POLLIN;
			if (c[i].sent < c[i].req_len) {
				if (c[i].kind == K_SLOW && now < c[i].t_next)
					;
				else
					ev |= POLLOUT;
			}
			p[i] = (struct pollfd){c[i].fd, ev, 0};
		}
		if (!open_n || now > deadline)
			break;
		poll(p, (nfds_t)n, wait_ms);
		now = moor_now();
		for (int i = 0; i < n; i++) {
			cl *x = &c[i];
			if (x->done || p[i].fd < 0)
				continue;
			if ((p[i].revents & POLLOUT) && x->sent < x->req_len) {
				size_t k = x->kind == K_SLOW
					       ? 1
					       : x->req_len - x->sent;
				ssize_t w = send(x->fd, x->req + x->sent, k,
						 MSG_NOSIGNAL);
				if (w > 0)
					x->sent += (size_t)w;
				else if (w < 0 && errno != EAGAIN)
					cl_end(x, now);
				x->t_next = now + 0.2; /* slowloris: 5 B/s */
			}
			if (x->done ||
			    !(p[i].revents & (POLLIN | POLLHUP | POLLERR)))
				continue;
			if (x->len + 4096 > x->cap)
				x->buf = realloc(x->buf, x->cap *= 2);
			ssize_t r = recv(x->fd, x->buf + x->len,
					 x->cap - x->len - 1, 0);
			if (r > 0) {
				x->len += (size_t)r;
				x->buf[x->len] = 0;
				if (x->kind == K_VANISH && x->len > 200)
					cl_end(x, now); /* it goes away */
				if (x->kind == K_SLOWREAD && !x->t_read &&
				    strstr(x->buf, "data: "))
					x->t_read = now + SLOWREAD_S;
			} else if (r == 0 || errno != EAGAIN) {
				cl_end(x, now);
			}
		}
	}
	free(p);
}

static int cmp_d(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}
/* 1. the mixed load */
static void load(int port, int n, pid_t gw, pid_t cd)
{
	cl *c = calloc((size_t)n, sizeof *c);
	/* a mix: 50% short, 20% streamed, 5% long, 10% vanish, 15% slowloris;
	 * every 40th a slow reader instead, and every 40th (another) an
	 * abusive body */
	static const int mix[20] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
				    1, 1, 1, 1, 2, 3, 3, 4, 4, 4};
	double t0 = moor_now();
	/* the peak from here: VmHWM reset to VmRSS */
	gt_reset_hwm(gw);
	long rss0 = gt_status_kb(gw, "VmRSS:");
	for (int i = 0; i < n; i++)
		cl_start(&c[i], port,
			 i % 40 == 39	? K_SLOWREAD
			 : i % 40 == 19 ? K_ABUSE
					: mix[i % 20],
			 i, t0);
	printf("the %d clients connected in %.1f s\n", n, moor_now() - t0);
	drive(c, n, t0 + 240);
	int slow_cut = 0;
	printf("\n%-14s %6s %6s %6s %6s %6s %6s %8s %8s\n", "kind", "n", "200",
	       "400", "503", "other", "hung", "p50 s", "p99 s");
	for (int k = 0; k < K_N; k++) {
		int cnt = 0, ok = 0, bad = 0, busy = 0, other = 0, hung = 0;
		double *lat = calloc((size_t)n, sizeof *lat);
		int nl = 0;
		for (int i = 0; i < n; i++) {
			cl *x = &c[i];
			if (x->kind != k)
				continue;
			cnt++;
			if (!x->done) {
				hung++;
				CHECK(0, "%s %d: no end in 240 s", kind_name[k],
				      i);
				continue;
			}
			lat[nl++] = x->secs;
			if (k == K_VANISH)
				continue;
			if (k == K_SLOW) {
				/* closed by the gateway (408 or no answer) */
				CHECK(x->secs < 60, "slowloris %d held %.1f s",
				      i, x->secs);
				continue;
			}
			if (k == K_ABUSE && x->status == 400) {
				bad++;
			} else if (x->status == 200 && k != K_ABUSE) {
				ok++;
				if (k == K_STREAM)
					CHECK(x->stream_done,
					      "stream %d: no [DONE]", i);
				if (k == K_SLOWREAD)
					CHECK(!x->stream_done,
					      "slow reader %d: its stream was "
					      "not cut (%zu bytes, [DONE])",
					      i, x->len);
				if (k == K_SLOWREAD)
					slow_cut += !x->stream_done;
			} else if (x->status == 503) {
				busy++;
				CHECK(x->retry_after > 0,
				      "%s %d: 503 without Retry-After",
				      kind_name[k], i);
			} else {
				other++;
				CHECK(0, "%s %d: status %d: %.200s",
				      kind_name[k], i, x->status, x->buf);
			}
		}
		qsort(lat, (size_t)nl, sizeof *lat, cmp_d);
		printf("%-14s %6d %6d %6d %6d %6d %6d %8.2f %8.2f\n",
		       kind_name[k], cnt, ok, bad, busy, other, hung,
		       nl ? lat[nl / 2] : 0, nl ? lat[(nl * 99) / 100] : 0);
		free(lat);
	}
	long hwm = gt_status_kb(gw, "VmHWM:"),
	     bound = gt_stated_bound_mib("gatewayd1");
	printf("peak RSS: gatewayd %.1f MiB, cached %.1f MiB (VmHWM); the "
	       "load took %.1f s\n",
	       hwm / 1024.0, gt_status_kb(cd, "VmHWM:") / 1024.0,
	       moor_now() - t0);
	printf("gatewayd: %ld MiB over its RSS before the load (its stated "
	       "bound: %ld MiB); %d slow readers cut by the write deadline, "
	       "%d cuts in its log\n\n",
	       (hwm - rss0) >> 10, bound, slow_cut,
	       gt_log_count("gatewayd1", "has not read"));
	CHECK(bound > 0 && (hwm - rss0) >> 10 < bound,
	      "gatewayd grew %ld MiB under the load, past its bound %ld",
	      (hwm - rss0) >> 10, bound);
	CHECK(gt_log_count("gatewayd1", "has not read") >= slow_cut,
	      "gatewayd's log has fewer write-deadline cuts than slow readers "
	      "cut");
	for (int i = 0; i < n; i++) {
		if (c[i].fd >= 0)
			close(c[i].fd);
		free(c[i].req);
		free(c[i].buf);
	}
	free(c);
}

static long long chat_cached(int port, const char *body, const char *sess)
{
	char h[128];
	snprintf(h, sizeof h, "x-session-id: %s\r\n", sess);
	gt_resp r =
	    gt_request(port, "POST", "/v1/chat/completions", body, h, 120);
	json_t *o = gt_json(&r);
	long long c =
	    r.status == 200
		? gt_int(o, "usage.prompt_tokens_details.cached_tokens")
		: -1;
	json_decref(o);
	gt_resp_fini(&r);
	return c;
}

enum { V_ENGINED, V_GATEWAYD, V_CACHED };
static const char *const victim_name[] = {"engined", "gatewayd", "cached"};

/* ---- 2. faults under deploy/run -------------------------------------- */

/* deploy/run on a port and run dir of its own: its messages and its
 * daemons' stderr go to one log. */
static struct {
	pid_t run;
	int port;
	char log[300];
} dr_;

/* The pid deploy/run last says it started name with ("deploy/run:
 * started NAME (pid N)"), or 0. */
static pid_t dr_pid(const char *name)
{
	FILE *f = fopen(dr_.log, "r");
	if (!f)
		return 0;
	char line[2048], want[64];
	snprintf(want, sizeof want, "deploy/run: started %s (pid ", name);
	pid_t pid = 0;
	while (fgets(line, sizeof line, f)) {
		const char *k = strstr(line, want);
		if (k)
			pid = (pid_t)atol(k + strlen(want));
	}
	fclose(f);
	return pid;
}

/* deploy/run's daemons are its children, not ours: they are added to the
 * harness's list (its log: deploy/run's), so that a test that fails or
 * runs out of time ends them by pid too (deploy/run itself ends them in
 * order on SIGTERM, but not when it is killed). */
static void dr_track(pid_t pid)
{
	REQUIRE(pid > 0 && h_.n < H_MAX_PROCS, "cannot track pid %d", pid);
	h_.pid[h_.n] = pid;
	snprintf(h_.log[h_.n], sizeof h_.log[0], "%s", dr_.log);
	h_.n++;
}

/* deploy/run (--no-setup, this build's daemons) with the tests' budgets
 * and the load's gateway flags, green. */
static void dr_start(void)
{
	char build[300], cargs[512] = "--device ", eargs[128];
	snprintf(build, sizeof build, "%s", gt_.cached);
	for (int k = 0; k < 2; k++) /* BUILD/cached/cached */
		*strrchr(build, '/') = 0;
	static const char *const budgets[] = {H_CACHED_BUDGETS, NULL};
	strcat(cargs, h_device());
	for (int i = 0; budgets[i]; i++) {
		strcat(cargs, " ");
		strcat(cargs, budgets[i]);
	}
	snprintf(eargs, sizeof eargs, "--connect-timeout 20 --backend %s",
		 tb_name());
	setenv("MOOR_BUILD", build, 1);
	setenv("MOOR_CACHED_ARGS", cargs, 1);
	setenv("MOOR_ENGINED_ARGS", eargs, 1);
	setenv("MOOR_GATEWAYD_ARGS", "", 1);
	dr_.port = gt_free_port();
	REQUIRE(dr_.port > 0, "no free port");
	char port[16], script[400];
	snprintf(port, sizeof port, "%d", dr_.port);
	snprintf(script, sizeof script, "%s/deploy/run", t_src());
	char *argv[] = {"/bin/bash",
			script,
			"--no-setup",
			"--model",
			(char *)gt_.model,
			"--port",
			port,
			"--run-dir",
			(char *)h_subdir("drun"),
			"--threads",
			"2",
			"--grid",
			"64",
			"--window",
			"4096",
			"--disk-dir",
			"",
			"--",
			"--read-timeout-s",
			"3",
			"--queue-wait-s",
			"60",
			"--max-conns",
			"8192",
			NULL};
	snprintf(dr_.log, sizeof dr_.log, "%s/deployrun.log", h_.dir);
	dr_.run = h_spawn("deployrun", argv);
	REQUIRE(gt_wait_health(dr_.port, 200, 120) == 200,
		"deploy/run's stack did not come up green");
	for (int v = 0; v < 3; v++)
		dr_track(dr_pid(victim_name[v]));
}

/* SIGTERM: deploy/run stops gatewayd, engined and cached in order and
 * exits 0. */
static void dr_stop(void)
{
	pid_t d[3];
	for (int v = 0; v < 3; v++)
		d[v] = dr_pid(victim_name[v]);
	kill(dr_.run, SIGTERM);
	int st = h_wait_exit(dr_.run, 120);
	CHECK(st >= 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0,
	      "deploy/run after SIGTERM: status %d", st);
	for (int v = 0; v < 3; v++) {
		CHECK(kill(d[v], 0) != 0, "deploy/run left %s (pid %d)",
		      victim_name[v], d[v]);
		h_forget(d[v]);
	}
}

/* One kill -9 under load: n clients, the victim killed after 1 s; deploy/run
 * starts it again. */
static void fault(int victim, int n, int round)
{
	const char *name = victim_name[victim];
	cl *c = calloc((size_t)n, sizeof *c);
	double t0 = moor_now();
	for (int i = 0; i < n; i++)
		cl_start(&c[i], dr_.port, i % 3 == 0 ? K_STREAM : K_SHORT, i,
			 t0);
	/* the clients run meanwhile: drive them for a second first */
	drive(c, n, t0 + 1.0);
	pid_t v = dr_pid(name), nv = v;
	REQUIRE(v > 0, "deploy/run named no pid for %s", name);
	double tk = moor_now();
	kill(v, SIGKILL);
	h_forget(v);
	/* deploy/run's supervisor sees it die and starts it again */
	while ((nv = dr_pid(name)) == v && moor_now() < tk + 30) {
		struct timespec ts = {0, 20 * 1000 * 1000};
		nanosleep(&ts, NULL);
	}
	double tr = moor_now();
	REQUIRE(nv != v, "deploy/run did not start %s again in 30 s", name);
	dr_track(nv);
	drive(c, n, t0 + 180);
	int answered = 0, errors = 0, hung = 0;
	for (int i = 0; i < n; i++) {
		if (!c[i].done) {
			hung++;
			continue;
		}
		if (c[i].status == 200)
			answered++;
		else
			errors++;
	}
	int green = gt_wait_health(dr_.port, 200, 60);
	char *b = gt_chat_body("After the fault.", 2, "");
	gt_resp r = gt_post(dr_.port, "/v1/chat/completions", b);
	printf("kill -9 %-8s (round %d): %3d in flight: %3d answered, %3d "
	       "errors, %d hung; deploy/run restarted it in %.2f s, green "
	       "%s, a chat %d\n",
	       name, round, n, answered, errors, hung, tr - tk,
	       green == 200 ? "yes" : "no", r.status);
	CHECK(hung == 0, "kill -9 %s: %d of %d requests hung", name, hung, n);
	CHECK(green == 200, "kill -9 %s: not green again", name);
	CHECK(r.status == 200, "kill -9 %s: a chat after it: %d %s", name,
	      r.status, r.body);
	gt_resp_fini(&r);
	free(b);
	for (int i = 0; i < n; i++) {
		if (c[i].fd >= 0)
			close(c[i].fd);
		free(c[i].req);
		free(c[i].buf);
	}
	free(c);
}

int main(int argc, char **argv)
{
	int full = getenv("MOOR_LOAD_FULL") != NULL;
	int n_load = full ? 1000 : 160, n_fault = full ? 100 : 30,
	    rounds = full ? 3 : 1;
	size_t cap = 64 * 1024;
	long_text = malloc(cap);
	long_text[0] = 0;
	for (int i = 0; strlen(long_text) + 100 < cap && i < 100; i++)
		strcat(long_text, "A long prompt goes on and on, sentence "
				  "after sentence, to be prefilled. ");
	static const char *const gw_extra[] = {"--read-timeout-s",
					       "3",
					       "--queue-wait-s",
					       "60",
					       "--max-conns",
					       "8192",
					       "--write-timeout-s",
					       WRITE_TIMEOUT_S,
					       NULL};
	gt_stack(argc, argv, full ? "loadfull" : "load", full ? 3000 : 600,
		 gw_extra, NULL, NULL);
	/* the fault rounds' gatewayds get the defaults but for the read
	 * timeout (gt_gatewayd takes the extra flags of each call) */
	load(gt_.port, n_load, gt_.gw, gt_.cd);

	/* engined's restart keeps the RAM caches */
	char sys[4096] = "";
	for (int i = 0; i < 20; i++)
		strcat(sys, "You answer in one short sentence. ");
	json_t *t =
	    json_pack("{s:[{s:s,s:s},{s:s,s:s}],s:i,s:i}", "messages", "role",
		      "system", "content", sys, "role", "user", "content",
		      "Hi!", "max_tokens", 2, "temperature", 0);
	char *t1 = json_dumps(t, JSON_COMPACT);
	json_array_append_new(
	    json_object_get(t, "messages"),
	    json_pack("{s:s,s:s}", "role", "assistant", "content", "Hello."));
	json_array_append_new(
	    json_object_get(t, "messages"),
	    json_pack("{s:s,s:s}", "role", "user", "content", "And?"));
	char *t2 = json_dumps(t, JSON_COMPACT);
	json_decref(t);
	REQUIRE(chat_cached(gt_.port, t1, "survivor") >= 0, "turn 1");
	h_kill9(gt_.ed);
	gt_engined(NULL, NULL);
	REQUIRE(gt_wait_health(gt_.port, 200, 60) == 200, "not green");
	long long c2 = chat_cached(gt_.port, t2, "survivor");
	printf("after kill -9 of engined, the follow-up resumed %lld cached "
	       "tokens\n",
	       c2);
	CHECK(c2 > 64, "engined's restart lost the conversation: %lld", c2);
	free(t1);
	free(t2);

	/* the faults under deploy/run, as a user runs the stack: the load's
	 * stack goes first */
	pid_t first[3] = {gt_.gw, gt_.ed, gt_.cd};
	for (int i = 0; i < 3; i++) {
		kill(first[i], SIGTERM);
		REQUIRE(h_wait_exit(first[i], 60) >= 0, "the load's stack did "
							"not stop");
	}
	dr_start();
	for (int k = 0; k < rounds; k++)
		for (int v = 0; v < 3; v++)
			fault(v, n_fault, k + 1);
	dr_stop();
	free(long_text);
	return h_done("test_load_faults");
}
