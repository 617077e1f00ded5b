/* test_engined_cancel_and_errors: engined through proto/ when things go
 * wrong. A CANCEL mid-generation ends it with finish cancel and what the
 * state absorbed is still committed (the next turn resumes after it); the
 * next request works; a prompt longer than the window, an id outside the
 * vocabulary and a request past the queue get DONE with an error; a
 * generation that reaches the window ends with finish length; malformed
 * and wrong-type messages get PROTO_ERROR; SIGTERM mid-request finishes the
 * request and exits 0; engined killed mid-request gives the client an EOF
 * within a bound, never a hang, and a new engined serves the next request;
 * a cached killed and restarted is attached again at the next request.
 *
 *   test_engined_cancel_and_errors CACHED ENGINED MODEL_DIR
 */
#include "t.h"

#include "client.h"
#include "harness.h"
#include "net.h"
#include "serve.h"

#define WINDOW 256

static int32_t prompt[512];

static mc_params params(uint32_t n, uint32_t max_tokens)
{
	for (uint32_t i = 0; i < n; i++)
		prompt[i] = (int32_t)(3 + (i * 53) % 400);
	mc_params p = {
	    .ids = prompt,
	    .n_ids = n,
	    .max_tokens = max_tokens,
	    .flags = PROTO_GEN_IGNORE_EOS,
	};
	return p;
}

int main(int argc, char **argv)
{
	REQUIRE(argc == 4, "usage: %s CACHED ENGINED MODEL_DIR", argv[0]);
	const char *cached = argv[1], *engined = argv[2], *model = argv[3];
	tb_backend("test_engined_cancel_and_errors"); /* skips without it */
	const char *run = h_init("cancel", 240);
	pid_t cd = h_cached(cached, run, "cached");
	/* 5 ms a decode step: a generation of 200 takes a second */
	pid_t e1 = h_engined(engined, model, run, "engined1", "--grid", "64",
			     "--window", "256", "--queue", "1",
			     "--test-step-delay-ms", "5", NULL);
	mc_conn c;
	REQUIRE(mc_open(&c, run, 10000) == 0, "connect");
	mc_result r;

	/* ---- CANCEL mid-generation ---- */
	mc_params p = params(40, 200);
	double t0 = moor_now();
	REQUIRE(mc_send_generate(&c, 1, &p) == 0, "send");
	mc_wait(&c, 1, &r, 30000, 3);
	CHECK(r.rv == 0 && r.finish == PROTO_FINISH_CANCEL,
	      "cancel: rv %d finish %u: %s", r.rv, r.finish, r.msg);
	CHECK(r.completion_tokens >= 3 && r.completion_tokens < 200,
	      "cancel: %llu tokens", (unsigned long long)r.completion_tokens);
	CHECK(moor_now() - t0 < 0.9, "cancel took %.2f s", moor_now() - t0);
	/* the cancelled turn's tokens were forwarded and committed */
	int32_t next[512];
	uint32_t nn = 0;
	for (uint32_t i = 0; i < 40; i++)
		next[nn++] = prompt[i];
	for (uint32_t i = 0; i < r.n_tokens; i++)
		next[nn++] = r.tokens[i];
	uint64_t want = nn;
	for (uint32_t i = 0; i < 5; i++)
		next[nn++] = (int32_t)(7 + i);
	mc_result_fini(&r);

	/* ---- the next request works, and resumes after the cancel ---- */
	mc_params q = params(40, 4);
	q.ids = next;
	q.n_ids = nn;
	mc_generate(&c, 2, &q, &r, 30000);
	CHECK(r.rv == 0 && r.finish == PROTO_FINISH_LENGTH && r.n_tokens == 4,
	      "after cancel: rv %d finish %u, %u tokens: %s", r.rv, r.finish,
	      r.n_tokens, r.msg);
	CHECK(r.cached_tokens == want,
	      "after cancel: cached %llu, want %llu (prompt + the tokens "
	      "the cancelled turn forwarded)",
	      (unsigned long long)r.cached_tokens, (unsigned long long)want);
	mc_result_fini(&r);

	/* ---- a prompt longer than the window ---- */
	p = params(WINDOW + 44, 4);
	mc_generate(&c, 3, &p, &r, 30000);
	CHECK(r.rv == 0 && r.finish == PROTO_FINISH_ERROR &&
		  r.code == MOOR_ERANGE && strstr(r.msg, "window"),
	      "over the window: rv %d finish %u code %d: %s", r.rv, r.finish,
	      r.code, r.msg);
	mc_result_fini(&r);
	/* a generation that reaches the window ends with length */
	p = params(WINDOW - 6, 50);
	mc_generate(&c, 4, &p, &r, 30000);
	CHECK(r.rv == 0 && r.finish == PROTO_FINISH_LENGTH &&
		  r.completion_tokens == 7,
	      "at the window: rv %d finish %u, %llu tokens (want 7): %s", r.rv,
	      r.finish, (unsigned long long)r.completion_tokens, r.msg);
	mc_result_fini(&r);
	/* an id outside the vocabulary */
	p = params(10, 4);
	prompt[3] = 1 << 30;
	mc_generate(&c, 5, &p, &r, 30000);
	CHECK(r.rv == 0 && r.finish == PROTO_FINISH_ERROR &&
		  strstr(r.msg, "vocabulary"),
	      "id outside the vocabulary: finish %u: %s", r.finish, r.msg);
	mc_result_fini(&r);

	/* ---- busy: one runs, one waits (--queue 1), the third is refused */
	p = params(20, 100);
	for (uint64_t k = 10; k < 13; k++)
		REQUIRE(mc_send_generate(&c, k, &p) == 0, "send %llu",
			(unsigned long long)k);
	mc_wait(&c, 12, &r, 10000, 0);
	CHECK(r.rv == 0 && r.finish == PROTO_FINISH_ERROR && r.code == -EBUSY,
	      "third request: finish %u code %d: %s", r.finish, r.code, r.msg);
	mc_result_fini(&r);
	mc_send_cancel(&c, 20, 11); /* the queued one: cancelled at once */
	mc_wait(&c, 11, &r, 10000, 0);
	CHECK(r.rv == 0 && r.finish == PROTO_FINISH_CANCEL && r.n_tokens == 0,
	      "queued request cancelled: finish %u, %u tokens", r.finish,
	      r.n_tokens);
	mc_result_fini(&r);
	mc_wait(&c, 10, &r, 30000, 1);
	CHECK(r.rv == 0 && r.finish == PROTO_FINISH_CANCEL,
	      "running request cancelled: finish %u: %s", r.finish, r.msg);
	mc_result_fini(&r);

	/* ---- malformed and wrong-type messages on engined.sock ---- */
	{
		nng_msg *m;
		REQUIRE(nng_msg_alloc(&m, 5) == 0, "alloc");
		memset(nng_msg_body(m), 0xab, 5);
		REQUIRE(nng_sendmsg(c.s, m, 0) == 0, "send junk");
		proto_msg e;
		int rv = proto_recv(c.s, &e, NULL, 10000);
		mc_credit(&c);
		CHECK(rv == 0 && e.h.type == PROTO_ERROR, "junk: %d, %s", rv,
		      proto_type_name(e.h.type));
		proto_msg_fini(&e);
		proto_msg s = {0};
		s.h.type = PROTO_STATS;
		s.h.req = 30;
		proto_send(c.s, &s, (nng_pipe)NNG_PIPE_INITIALIZER);
		rv = proto_recv(c.s, &e, NULL, 10000);
		mc_credit(&c);
		CHECK(rv == 0 && e.h.type == PROTO_ERROR && e.h.req == 30 &&
			  strstr(e.u.error.msg, "not served"),
		      "STATS to engined: %d, %s", rv,
		      proto_type_name(e.h.type));
		proto_msg_fini(&e);
	}

	/* ---- SIGTERM mid-request: the request finishes, exit 0 ---- */
	p = params(20, 40);
	REQUIRE(mc_send_generate(&c, 40, &p) == 0, "send");
	proto_msg first;
	int rv = proto_recv(c.s, &first, NULL, 10000);
	mc_credit(&c);
	CHECK(rv == 0 && first.h.type == PROTO_STEP, "first step: %d", rv);
	proto_msg_fini(&first);
	kill(e1, SIGTERM);
	mc_wait(&c, 40, &r, 30000, 0);
	CHECK(r.rv == 0 && r.finish == PROTO_FINISH_LENGTH &&
		  r.completion_tokens == 40,
	      "request under SIGTERM: rv %d finish %u, %llu tokens: %s", r.rv,
	      r.finish, (unsigned long long)r.completion_tokens, r.msg);
	mc_result_fini(&r);
	int st = h_wait_exit(e1, 20);
	CHECK(st >= 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0,
	      "engined on SIGTERM: status %d", st);
	mc_close(&c);

	/* ---- engined killed mid-request: an EOF within a bound ---- */
	pid_t e2 =
	    h_engined(engined, model, run, "engined2", "--grid", "64",
		      "--window", "256", "--test-step-delay-ms", "5", NULL);
	REQUIRE(mc_open(&c, run, 10000) == 0, "connect");
	p = params(30, 200);
	REQUIRE(mc_send_generate(&c, 50, &p) == 0, "send");
	rv = proto_recv(c.s, &first, NULL, 10000);
	mc_credit(&c);
	CHECK(rv == 0 && first.h.type == PROTO_STEP, "first step: %d", rv);
	proto_msg_fini(&first);
	h_kill9(e2);
	t0 = moor_now();
	mc_wait(&c, 50, &r, 20000, 0);
	CHECK(r.rv == -EPIPE, "client after kill -9: rv %d: %s", r.rv, r.msg);
	CHECK(moor_now() - t0 < 5, "the client waited %.1f s", moor_now() - t0);
	mc_result_fini(&r);
	mc_close(&c);

	/* a new engined: cached aborts the plan the dead one left open, and
	 * the next request works */
	pid_t e3 = h_engined(engined, model, run, "engined3", "--grid", "64",
			     "--window", "256", NULL);
	CHECK(h_log_has("cached", "aborting the open plan"),
	      "cached did not close the dead engine's plan");
	REQUIRE(mc_open(&c, run, 10000) == 0, "connect");
	p = params(30, 4);
	mc_generate(&c, 60, &p, &r, 30000);
	CHECK(r.rv == 0 && r.finish == PROTO_FINISH_LENGTH && r.n_tokens == 4,
	      "after the restart: rv %d finish %u: %s", r.rv, r.finish, r.msg);
	mc_result_fini(&r);

	/* ---- cached killed and restarted: engined attaches again ---- */
	h_kill9(cd);
	h_cached(cached, run, "cached2");
	mc_generate(&c, 70, &p, &r, 30000);
	CHECK(r.rv == 0 && r.finish == PROTO_FINISH_LENGTH && r.code == 0 &&
		  r.n_tokens == 4 && r.cached_tokens == 0 && !r.msg[0],
	      "after a cached restart: rv %d finish %u code %d, %llu cached: "
	      "%s",
	      r.rv, r.finish, r.code, (unsigned long long)r.cached_tokens,
	      r.msg);
	CHECK(h_log_has("engined3", "HELLO again"),
	      "engined did not HELLO the new cached");
	CHECK(h_alive(e3), "engined died with cached");
	mc_result_fini(&r);
	mc_close(&c);
	return h_done("test_engined_cancel_and_errors");
}
