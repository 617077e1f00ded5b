/* test_gw_disconnect_cancels: a client that goes away mid-generation gets
 * its generation cancelled at once. engined runs 30 ms a decode step, so a
 * streamed request of 300 tokens would hold it for 9 s: the client reads
 * the first content delta and closes the socket; engined logs the request
 * finished "cancel" within a bound, and a following request (engined runs
 * one at a time) is answered within a bound far below what the abandoned
 * generation would have taken. The same for a client of a non-streamed
 * request that closes while it waits. The cache stays usable: the next
 * turn of the session works. Then cached is killed: /health is 503 and
 * names it within the admin round trip's bound, /v1/cache/stats is 503
 * with Retry-After, /metrics still answers (moor_cached_up 0).
 *
 *   test_gw_disconnect_cancels CACHED ENGINED GATEWAYD MODEL_DIR
 */
#include "t.h"

#include "gwtest.h"
#include "harness.h"

/* an admin round trip gives up after 2 s (GW_ADMIN_TIMEOUT_MS) */
#define GW_ADMIN_WAIT_BOUND 3.0

static int count_cancels(void)
{
	char log[300];
	snprintf(log, sizeof log, "%s/engined1.log", gt_.run);
	FILE *f = fopen(log, "r");
	if (!f)
		return 0;
	char line[2048];
	int n = 0;
	while (fgets(line, sizeof line, f))
		n += strstr(line, "finish cancel") != NULL;
	fclose(f);
	return n;
}

static int wait_cancels(int n, double timeout_s)
{
	double end = moor_now() + timeout_s;
	while (moor_now() < end) {
		if (count_cancels() >= n)
			return 1;
		struct timespec ts = {0, 10 * 1000 * 1000};
		nanosleep(&ts, NULL);
	}
	return 0;
}

int main(int argc, char **argv)
{
	gt_stack(argc, argv, "gwdisc", 120, NULL, "--test-step-delay-ms", "30");
	int port = gt_.port;
	const char *slow =
	    "{\"messages\":[{\"role\":\"user\",\"content\":\"Talk.\"}],"
	    "\"max_tokens\":300,\"temperature\":0,\"ignore_eos\":true%s}";
	char body[512];

	/* ---- streamed: close after the first content delta ---- */
	snprintf(body, sizeof body, slow, ",\"stream\":true");
	int fd = gt_send(port, "POST", "/v1/chat/completions", body, NULL);
	REQUIRE(fd >= 0, "connect");
	char buf[65536];
	size_t n = 0;
	double end = moor_now() + 20;
	while (moor_now() < end && n < sizeof buf - 1) {
		struct pollfd p = {fd, POLLIN, 0};
		if (poll(&p, 1, 50) <= 0)
			continue;
		ssize_t r = read(fd, buf + n, sizeof buf - 1 - n);
		if (r <= 0)
			break;
		n += (size_t)r;
		buf[n] = 0;
		if (strstr(buf, "\"content\":\"") &&
		    strstr(strstr(buf, "\"content\":\"") + 11,
			   "\"content\":\""))
			break; /* the role chunk's "" and one real delta */
	}
	REQUIRE(strstr(buf, "\"content\""), "no delta came: %s", buf);
	double t0 = moor_now();
	close(fd);
	CHECK(wait_cancels(1, 3),
	      "engined did not cancel the abandoned stream");
	double tc = moor_now() - t0;
	printf("stream abandoned: engined cancelled it %.3f s after the "
	       "close\n",
	       tc);
	char *next = gt_chat_body("next", 2, "");
	gt_resp r = gt_post(port, "/v1/chat/completions", next);
	CHECK(r.status == 200, "next request: %d %s", r.status, r.body);
	CHECK(moor_now() - t0 < 4,
	      "the next request waited %.2f s (the abandoned one had ~9 s "
	      "left)",
	      moor_now() - t0);
	gt_resp_fini(&r);

	/* ---- non-streamed: close while it waits ---- */
	snprintf(body, sizeof body, slow, "");
	fd = gt_send(port, "POST", "/v1/chat/completions", body, NULL);
	struct timespec ts = {0, 500 * 1000 * 1000};
	nanosleep(&ts, NULL); /* generating by now */
	/* a non-streamed request's socket is only seen closed when h2o
	 * reads or writes it: shut it down both ways (an RST) */
	struct linger lg = {1, 0};
	setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
	t0 = moor_now();
	close(fd);
	int cancelled = wait_cancels(2, 12);
	printf("non-streamed request abandoned: %s after %.3f s\n",
	       cancelled ? "cancelled" : "not cancelled", moor_now() - t0);
	CHECK(cancelled && moor_now() - t0 < 3,
	      "the abandoned non-streamed generation was not cancelled at "
	      "once (%.2f s)",
	      moor_now() - t0);

	/* the session goes on */
	r = gt_post(port, "/v1/chat/completions", next);
	CHECK(r.status == 200, "after the cancels: %d %s", r.status, r.body);
	gt_resp_fini(&r);
	free(next);

	/* ---- cached gone: /health 503 naming it, stats 503, metrics up ----
	 */
	h_kill9(gt_.cd);
	CHECK(gt_wait_health(port, 503, 8) == 503, "health not 503");
	r = gt_get(port, "/health");
	json_t *o = gt_json(&r);
	CHECK(r.status == 503 && gt_str(o, "processes.cached") &&
		  !strcmp(gt_str(o, "processes.cached"), "down") &&
		  r.secs < GW_ADMIN_WAIT_BOUND,
	      "health with cached down: %d %s (%.2f s)", r.status, r.body,
	      r.secs);
	json_decref(o);
	gt_resp_fini(&r);
	r = gt_get(port, "/v1/cache/stats");
	char ra[16] = "";
	CHECK(r.status == 503 && strstr(r.body, "\"error\"") &&
		  gt_header(&r, "retry-after", ra, sizeof ra),
	      "stats with cached down: %d %s", r.status, r.body);
	gt_resp_fini(&r);
	r = gt_get(port, "/metrics");
	CHECK(r.status == 200 && strstr(r.body, "moor_cached_up 0") &&
		  !strstr(r.body, "moor_cache_bytes{"),
	      "metrics with cached down: %d", r.status);
	gt_resp_fini(&r);
	return h_done("test_gw_disconnect_cancels");
}
