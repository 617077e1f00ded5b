/* test_gw_engined_down: the gateway when engined goes away and comes back.
 * engined killed with -9 mid-generation: the streamed request in flight
 * ends with an error event and [DONE], the one queued behind it gets a 503
 * in the error shape, both within a bound (never a hang); /health turns 503
 * (engined "down"); a request while engined is down waits --engine-wait-s
 * and gets 503 with Retry-After, within the bound; a request sent while it
 * is down and answered after engined comes back within the wait succeeds;
 * /health is green again. SIGTERM mid-stream: gatewayd cancels the
 * generation (engined logs finish cancel), ends the stream and exits 0.
 *
 *   test_gw_engined_down CACHED ENGINED GATEWAYD MODEL_DIR
 */
#include "t.h"

#include "gwtest.h"
#include "harness.h"

#define WAIT_S 3.0

/* Reads from fd until the bytes so far contain s (or timeout); returns
 * what was read (malloc'd) and whether s came. */
static int read_until(int fd, const char *s, double timeout_s, char **out,
		      size_t *n_out)
{
	size_t cap = 1 << 16, n = 0;
	char *b = malloc(cap);
	b[0] = 0;
	double end = moor_now() + timeout_s;
	int found = 0;
	while (!found && moor_now() < end) {
		struct pollfd p = {fd, POLLIN, 0};
		if (poll(&p, 1, 50) <= 0)
			continue;
		if (n + 4097 > cap)
			b = realloc(b, cap *= 2);
		ssize_t r = read(fd, b + n, cap - n - 1);
		if (r <= 0)
			break;
		n += (size_t)r;
		b[n] = 0;
		found = strstr(b, s) != NULL;
	}
	*out = b;
	*n_out = n;
	return found;
}

/* The rest of a response until the peer closes; appended to *b. */
static double read_rest(int fd, char **b, size_t *n, double timeout_s)
{
	double t0 = moor_now();
	char *more;
	size_t m;
	gt_read_all(fd, &more, &m, timeout_s);
	*b = realloc(*b, *n + m + 1);
	memcpy(*b + *n, more, m + 1);
	*n += m;
	free(more);
	return moor_now() - t0;
}

static const char *slow_stream =
    "{\"messages\":[{\"role\":\"user\",\"content\":\"Go on and on.\"}],"
    "\"max_tokens\":400,\"temperature\":0,\"ignore_eos\":true,"
    "\"stream\":true}";

int main(int argc, char **argv)
{
	const char *gw_extra[] = {"--engine-wait-s", "3", NULL};
	/* 20 ms a decode step: 400 tokens take 8 s */
	gt_stack(argc, argv, "gwdown", 180, gw_extra, "--test-step-delay-ms",
		 "20");
	int port = gt_.port;

	/* ---- engined dies mid-generation ---- */
	int fa =
	    gt_send(port, "POST", "/v1/chat/completions", slow_stream, NULL);
	REQUIRE(fa >= 0, "connect");
	char *ba;
	size_t na;
	REQUIRE(read_until(fa, "\"content\":\"", 20, &ba, &na),
		"no content came: %s", ba);
	char *qb = gt_chat_body("queued", 3, "");
	int fb = gt_send(port, "POST", "/v1/chat/completions", qb, NULL);
	free(qb);
	struct timespec ts = {0, 200 * 1000 * 1000};
	nanosleep(&ts, NULL); /* B reaches engined's queue */
	h_kill9(gt_.ed);
	double ta = read_rest(fa, &ba, &na, 10);
	close(fa);
	CHECK(ta < 3, "the stream took %.2f s to end after the kill", ta);
	CHECK(strstr(ba, "data: {\"error\"") && strstr(ba, "engined"),
	      "no error event naming engined: %s",
	      ba + (na > 400 ? na - 400 : 0));
	CHECK(strstr(ba, "data: [DONE]"), "no [DONE] after the error");
	free(ba);
	char *bb;
	size_t nb;
	gt_read_all(fb, &bb, &nb, 10);
	close(fb);
	gt_resp rb = {0};
	gt_parse(bb, nb, &rb);
	CHECK(rb.status == 503 && strstr(rb.body, "\"error\""),
	      "queued request: %d %s", rb.status, rb.body);
	gt_resp_fini(&rb);

	/* ---- /health says so ---- */
	CHECK(gt_wait_health(port, 503, 5) == 503, "health not 503");
	gt_resp r = gt_get(port, "/health");
	json_t *o = gt_json(&r);
	CHECK(r.status == 503 && gt_str(o, "processes.engined") &&
		  !strcmp(gt_str(o, "processes.engined"), "down") &&
		  !strcmp(gt_str(o, "status"), "degraded") &&
		  !strcmp(gt_str(o, "processes.cached"), "up"),
	      "health while down: %d %s", r.status, r.body);
	json_decref(o);
	gt_resp_fini(&r);

	/* ---- a request while engined is down: 503 + Retry-After ---- */
	char *body = gt_chat_body("anyone?", 2, "");
	r = gt_post(port, "/v1/chat/completions", body);
	char ra[32] = "";
	CHECK(r.status == 503 && gt_header(&r, "retry-after", ra, sizeof ra) &&
		  atoi(ra) > 0,
	      "while down: %d retry-after '%s' %s", r.status, ra, r.body);
	CHECK(r.secs >= WAIT_S - 0.1 && r.secs < WAIT_S + 2,
	      "answered after %.2f s (wait %.1f s)", r.secs, WAIT_S);
	printf("while engined is down: 503 after %.2f s\n", r.secs);
	gt_resp_fini(&r);

	/* ---- one that waits for engined to come back ---- */
	double t0 = moor_now();
	int fc = gt_send(port, "POST", "/v1/chat/completions", body, NULL);
	gt_engined("--test-step-delay-ms", "1");
	char *bc;
	size_t nc;
	gt_read_all(fc, &bc, &nc, 20);
	close(fc);
	gt_resp rc = {0};
	gt_parse(bc, nc, &rc);
	CHECK(rc.status == 200, "the request that waited: %d %s (%.2f s)",
	      rc.status, rc.body, moor_now() - t0);
	printf("a request that waited for engined: %d after %.2f s\n",
	       rc.status, moor_now() - t0);
	gt_resp_fini(&rc);
	free(body);
	CHECK(gt_wait_health(port, 200, 5) == 200, "health not green again");

	/* ---- SIGTERM mid-stream ---- */
	int fd =
	    gt_send(port, "POST", "/v1/chat/completions", slow_stream, NULL);
	char *bd;
	size_t nd;
	CHECK(read_until(fd, "\"content\":\"", 20, &bd, &nd),
	      "no content before SIGTERM");
	kill(gt_.gw, SIGTERM);
	double td = read_rest(fd, &bd, &nd, 10);
	close(fd);
	CHECK(td < 4, "the stream ended %.2f s after SIGTERM", td);
	int st = h_wait_exit(gt_.gw, 6);
	CHECK(st >= 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0,
	      "gatewayd after SIGTERM: status %d", st);
	free(bd);
	/* engined saw the cancel (or the pipe go) and finished it early */
	CHECK(gt_wait_log("engined2", "finish cancel", 5),
	      "engined did not cancel the generation");
	return h_done("test_gw_engined_down");
}
