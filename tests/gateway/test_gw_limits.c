/* test_gw_limits: what a request may cost gatewayd, refused before the
 * work it would cause (limits.c, http.c, job.c):
 *
 * - a body over --max-body-bytes (4 MiB by default): 413;
 * - 3 MB of {"messages":[{},{},...]} (a million JSON values), four at
 *   once: 400 too_many_values, and gatewayd's peak RSS grows by less than
 *   100 MB (before: jansson's nodes, ~250 MB a body);
 * - 20,000 messages, 1,025 tools, a stop string of 2,000 bytes, five stop
 *   strings: 400 naming the field;
 * - a prompt past the window, and one of 1.2 million tokens (past
 *   PROTO_MAX_IDS, which once came back 503 + Retry-After, so clients
 *   retried it forever): 400 context_length_exceeded;
 * - max_tokens 4294967295: 400;
 * - HTTP/2 is off: "PRI * HTTP/2.0" gets an HTTP/1.1 400, and an
 *   `Upgrade: h2c` request an ordinary 200;
 * - --max-conns 4: a fifth connection is answered 503 too_many_connections;
 * - --read-timeout-s 1: a client that sends half a head is closed within
 *   3 s;
 * - --write-timeout-s 1: a streamed reply whose client stops reading is
 *   cut off and its generation cancelled; a whole reply (its logprobs
 *   make it ~0.6 MB, past the sockets' buffers) whose client reads none
 *   of it is cut off, and the connection closes, while one read a few
 *   KiB every 0.05 s (for several deadlines) arrives whole. */
#include <stdlib.h>

#include "t.h"

#include "gwtest.h"
#include "harness.h"

static char *repeat_body(const char *head, const char *unit, size_t n,
			 const char *tail)
{
	size_t hl = strlen(head), ul = strlen(unit), tl = strlen(tail);
	char *b = malloc(hl + n * (ul + 1) + tl + 1);
	char *p = b;
	memcpy(p, head, hl);
	p += hl;
	for (size_t i = 0; i < n; i++) {
		if (i)
			*p++ = ',';
		memcpy(p, unit, ul);
		p += ul;
	}
	memcpy(p, tail, tl + 1);
	return b;
}

static void expect_400(int port, const char *body, const char *what,
		       const char *needle)
{
	gt_resp r = gt_request(port, "POST", "/v1/chat/completions", body,
			       NULL, 60);
	CHECK(r.status == 400 && r.body && strstr(r.body, needle),
	      "%s: %d %.300s", what, r.status, r.body ? r.body : "");
	gt_resp_fini(&r);
}

/* Reads what comes on fd for up to s seconds: 1 if the peer closed it. */
static int closed_within(int fd, double s)
{
	double end = moor_now() + s;
	char b[4096];
	while (moor_now() < end) {
		struct pollfd p = {fd, POLLIN, 0};
		if (poll(&p, 1, 100) <= 0)
			continue;
		ssize_t r = read(fd, b, sizeof b);
		if (r <= 0)
			return 1;
	}
	return 0;
}

/* A connection to port with a small receive buffer that posts body (a
 * chat; freed here) and reads nothing. */
static int unread_client(int port, char *body)
{
	int s = socket(AF_INET, SOCK_STREAM, 0);
	int rcv = 2048;
	setsockopt(s, SOL_SOCKET, SO_RCVBUF, &rcv, sizeof rcv);
	struct sockaddr_in sa = {.sin_family = AF_INET,
				 .sin_port = htons((uint16_t)port)};
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	REQUIRE(connect(s, (struct sockaddr *)&sa, sizeof sa) == 0, "connect");
	char head[256];
	int hl = snprintf(head, sizeof head,
			  "POST /v1/chat/completions HTTP/1.1\r\n"
			  "Host: 127.0.0.1\r\nContent-Type: "
			  "application/json\r\nContent-Length: %zu\r\n\r\n",
			  strlen(body));
	CHECK(write(s, head, (size_t)hl) == hl, "write");
	CHECK(write(s, body, strlen(body)) == (ssize_t)strlen(body), "write");
	free(body);
	return s;
}

int main(int argc, char **argv)
{
	gt_stack(argc, argv, "gwlimits", 360, NULL, "--test-step-delay-ms",
		 "2");
	int port = gt_.port;

	/* ---- body size ---- */
	char *big = repeat_body("{\"messages\":[{\"role\":\"user\",\"content\":\"",
				"a", (4u << 20) / 2, "\"}]}");
	gt_resp r = gt_request(port, "POST", "/v1/chat/completions", big, NULL,
			       60);
	CHECK(r.status == 413, "a body over 4 MiB: %d", r.status);
	gt_resp_fini(&r);
	free(big);

	/* ---- a million values, four at once ---- */
	long rss0 = gt_status_kb(gt_.gw, "VmHWM:");
	char *empties = repeat_body("{\"messages\":[", "{}", 1000000, "]}");
	gt_one many[4];
	int hung = gt_many(port, "/v1/chat/completions", empties, 4, 60, many);
	CHECK(hung == 0, "%d hung", hung);
	for (int i = 0; i < 4; i++)
		CHECK(many[i].status == 400 && strstr(many[i].err, "JSON values"),
		      "a million values: %d %s", many[i].status, many[i].err);
	long rss1 = gt_status_kb(gt_.gw, "VmHWM:");
	printf("gatewayd peak RSS: %ld MB before, %ld MB after four bodies "
	       "of a million values\n",
	       rss0 / 1024, rss1 / 1024);
	CHECK(rss0 > 0 && rss1 - rss0 < 100 * 1024,
	      "peak RSS grew by %ld MB (bound: 100)", (rss1 - rss0) / 1024);
	free(empties);

	/* ---- counts and lengths ---- */
	char *msgs = repeat_body("{\"messages\":[",
				 "{\"role\":\"user\",\"content\":\"a\"}", 20000,
				 "]}");
	expect_400(port, msgs, "20000 messages", "'messages' has 20000");
	free(msgs);
	char *stop = repeat_body("{\"messages\":[{\"role\":\"user\",\"content\":"
				 "\"a\"}],\"stop\":[\"",
				 "x", 2000, "\"]}");
	/* repeat_body puts commas between the units: make it one string */
	for (char *p = strstr(stop, "[\"") + 2; *p != '"'; p++)
		if (*p == ',')
			*p = 'x';
	expect_400(port, stop, "a stop string of 4000 bytes", "stop string");
	free(stop);
	char *tools = repeat_body("{\"messages\":[{\"role\":\"user\","
				  "\"content\":\"a\"}],\"tools\":[",
				  "{}", 1025, "]}");
	expect_400(port, tools, "1025 tools", "'tools' has 1025");
	free(tools);
	expect_400(port,
		   "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],"
		   "\"stop\":[\"a\",\"b\",\"c\",\"d\",\"e\"]}",
		   "five stop strings", "'stop' has 5 strings");

	/* ---- the window ---- */
	char *words = repeat_body("{\"messages\":[{\"role\":\"user\",\"content\":\"",
				  "a", 5000, "\"}]}");
	for (char *p = strstr(words, "content\":\"") + 10; *p != '"'; p++)
		if (*p == ',')
			*p = ' ';
	expect_400(port, words, "a prompt past the window",
		   "context_length_exceeded");
	free(words);
	expect_400(port,
		   "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],"
		   "\"max_tokens\":4294967295}",
		   "max_tokens 2^32-1", "larger than the window");
	{
		static const char *const a[] = {"--max-body-bytes", "8000000",
						NULL};
		int p2;
		pid_t g2 = gt_gatewayd(&p2, a);
		char *huge = repeat_body(
		    "{\"messages\":[{\"role\":\"user\",\"content\":\"", "a",
		    1200000, "\"}]}");
		for (char *p = strstr(huge, "content\":\"") + 10; *p != '"';
		     p++)
			if (*p == ',')
				*p = ' ';
		expect_400(p2, huge, "1.2 million tokens",
			   "context_length_exceeded");
		free(huge);
		h_kill9(g2);
	}

	/* ---- HTTP/2 is off ---- */
	{
		int fd = gt_connect(port);
		static const char pri[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
		CHECK(write(fd, pri, sizeof pri - 1) == sizeof pri - 1,
		      "write");
		char *raw;
		size_t n;
		gt_read_all(fd, &raw, &n, 5);
		close(fd);
		CHECK(n >= 12 && !strncmp(raw, "HTTP/1.1 400", 12),
		      "prior knowledge h2: %.40s", raw);
		free(raw);
		r = gt_request(port, "GET", "/health", NULL,
			       "Upgrade: h2c\r\nConnection: Upgrade, "
			       "HTTP2-Settings\r\nHTTP2-Settings: AAMAAABkAAQAAP__\r\n",
			       10);
		CHECK(r.status == 200, "Upgrade: h2c: %d (want 200, not 101)",
		      r.status);
		gt_resp_fini(&r);
	}

	/* ---- connections, read and write deadlines ---- */
	{
		static const char *const a[] = {"--max-conns", "4",
						"--read-timeout-s", "1",
						"--write-timeout-s", "1",
						NULL};
		int p3;
		pid_t g3 = gt_gatewayd(&p3, a);
		int idle[4];
		for (int i = 0; i < 4; i++)
			idle[i] = gt_connect(p3);
		usleep(200 * 1000);
		int fd = gt_connect(p3);
		char *raw;
		size_t n;
		gt_read_all(fd, &raw, &n, 5);
		close(fd);
		CHECK(strstr(raw, "503") && strstr(raw, "too_many_connections"),
		      "a fifth connection: %.200s", raw);
		free(raw);
		/* the idle ones send half a head: closed by the read
		 * deadline */
		double t0 = moor_now();
		int closed = 0;
		for (int i = 0; i < 4; i++) {
			CHECK(write(idle[i], "POST /v1/chat", 13) == 13,
			      "write");
			closed += closed_within(idle[i], 4);
			close(idle[i]);
		}
		CHECK(closed == 4 && moor_now() - t0 < 8,
		      "%d of 4 half-head clients closed, after %.1f s", closed,
		      moor_now() - t0);
		/* a whole reply read slowly (a read every 0.05 s, a few KiB
		 * each through the small receive buffer: seconds, several
		 * deadlines of 1 s, after the job ended): every byte
		 * arrives, as long as the client takes some within each
		 * deadline */
		int sl = unread_client(p3, gt_chat_body("Hello", 150,
							"\"ignore_eos\":true,"
							"\"logprobs\":true,"
							"\"top_logprobs\":20"));
		size_t got = 0, want = 0;
		char *rb = malloc(1 << 22);
		double t_sl = moor_now();
		while (moor_now() - t_sl < 120 && (!want || got < want) &&
		       got + 8192 < (1 << 22)) {
			usleep(50 * 1000);
			struct pollfd pf = {sl, POLLIN, 0};
			if (poll(&pf, 1, 0) <= 0)
				continue;
			ssize_t rn = read(sl, rb + got, 8192);
			if (rn <= 0)
				break;
			got += (size_t)rn;
			rb[got] = 0;
			char *he = strstr(rb, "\r\n\r\n");
			char *cl = strcasestr(rb, "content-length:");
			if (!want && he && cl && cl < he)
				want = (size_t)(he + 4 - rb) +
				       strtoull(cl + 15, NULL, 10);
		}
		close(sl);
		CHECK(want > 64 * 1024 && got == want,
		      "a slow reader got %zu of %zu bytes of its whole reply "
		      "in %.1f s",
		      got, want, moor_now() - t_sl);
		CHECK(!h_log_has("gatewayd3", "has taken none of its reply"),
		      "a slow reader was cut off");
		printf("a slow reader took its %zu bytes in %.1f s\n", got,
		       moor_now() - t_sl);
		free(rb);
		/* a whole reply nobody reads: h2o holds it until it is
		 * written, which only the write deadline ends */
		int w = unread_client(p3, gt_chat_body("Hello", 400,
						       "\"ignore_eos\":true,"
						       "\"logprobs\":true,"
						       "\"top_logprobs\":20"));
		double wend = moor_now() + 180;
		while (moor_now() < wend &&
		       !h_log_has("gatewayd3", "has taken none of its reply"))
			usleep(100 * 1000);
		CHECK(h_log_has("gatewayd3", "has taken none of its reply"),
		      "a whole reply nobody read was not cut off in 180 s");
		/* the connection closes: what the buffers held, then EOF */
		CHECK(closed_within(w, 10),
		      "the unread whole reply's connection stayed open");
		close(w);
		/* a stream nobody reads: a small receive buffer fills */
		int s = unread_client(p3, gt_chat_body("Hello", 3000,
						       "\"ignore_eos\":true,"
						       "\"stream\":true"));
		/* the buffers hold ~750 SSE chunks: a few seconds of decode
		 * in the release build, a minute or more under ASan on a
		 * loaded 2-core box */
		double end = moor_now() + 180;
		while (moor_now() < end &&
		       !h_log_has("gatewayd3", "has not read"))
			usleep(100 * 1000);
		CHECK(h_log_has("gatewayd3", "has not read"),
		      "the reader that stopped was not cut off in 180 s");
		usleep(500 * 1000);
		CHECK(h_log_has("gatewayd3", "went away: cancelling"),
		      "its generation was not cancelled");
		close(s);
		h_kill9(g3);
	}
	return t_done("test_gw_limits");
}
