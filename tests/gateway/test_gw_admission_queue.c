/* test_gw_admission_queue: gatewayd's admission queue (admit.c), on a
 * stack whose engined takes 5 ms a decode step, so a request of 16 tokens
 * (ignore_eos) holds the engine for at least 0.08 s.
 *
 * - queue full: with --inflight 1 --queue-max 6, 16 requests at once: one
 *   runs, six wait and are answered 200, the other nine are refused at
 *   once with 503, code queue_full, and a Retry-After of at least 1 s;
 * - wait deadline: with --queue-wait-s 0.3, requests that cannot start
 *   within 0.3 s get 503 queue_timeout with a Retry-After (computed from
 *   the drain rate: at least 1 s), the first ones 200;
 * - fair across flows: flow A sends 8 requests, flow B one request just
 *   after; B's answer comes before most of A's (round robin), where a FIFO
 *   would answer it last;
 * - a peek and a prewarm while a turn holds the one place (--inflight 1):
 *   409 at once, not after a wait in the queue for the place (peeks and
 *   prewarms take places too, to bound the bodies read at once). */
#include <stdlib.h>

#include "t.h"

#include "gwtest.h"
#include "harness.h"

static char *slow_body(void)
{
	return gt_chat_body("Hello", 16, "\"ignore_eos\":true");
}

int main(int argc, char **argv)
{
	gt_stack(argc, argv, "gwadmit", 230, NULL, "--test-step-delay-ms", "5");
	char *body = slow_body();

	/* ---- queue full ---- */
	{
		static const char *const a[] = {"--inflight", "1",
						"--queue-max", "6", NULL};
		int port;
		pid_t gw = gt_gatewayd(&port, a);
		gt_one r[16];
		int hung = gt_many(port, "/v1/chat/completions", body, 16, 60,
				   r);
		int ok = 0, full = 0;
		for (int i = 0; i < 16; i++) {
			if (r[i].status == 200)
				ok++;
			else if (r[i].status == 503 &&
				 strstr(r[i].err, "queue is full") &&
				 r[i].retry_after >= 1)
				full++;
			else
				CHECK(0, "request %d: %d (Retry-After %d) %s",
				      i, r[i].status, r[i].retry_after,
				      r[i].err);
		}
		CHECK(hung == 0, "%d hung", hung);
		CHECK(ok == 7 && full == 9,
		      "queue full: %d answered 200 (want 7: 1 running + 6 "
		      "waiting), %d refused (want 9)",
		      ok, full);
		h_kill9(gw);
	}

	/* ---- the wait deadline ---- */
	{
		static const char *const a[] = {"--inflight", "1",
						"--queue-wait-s", "0.3", NULL};
		int port;
		pid_t gw = gt_gatewayd(&port, a);
		gt_one r[10];
		int hung = gt_many(port, "/v1/chat/completions", body, 10, 60,
				   r);
		int ok = 0, late = 0;
		for (int i = 0; i < 10; i++) {
			if (r[i].status == 200)
				ok++;
			else if (r[i].status == 503 &&
				 strstr(r[i].err, "--queue-wait-s") &&
				 r[i].retry_after >= 1) {
				late++;
				CHECK(r[i].secs < 3,
				      "a wait of 0.3 s answered after %.2f s",
				      r[i].secs);
			} else
				CHECK(0, "request %d: %d (Retry-After %d) %s",
				      i, r[i].status, r[i].retry_after,
				      r[i].err);
		}
		CHECK(hung == 0, "%d hung", hung);
		CHECK(ok >= 1 && late >= 5,
		      "deadline: %d answered 200, %d past the wait (want "
		      ">= 5: each request holds the engine >= 0.08 s)",
		      ok, late);
		h_kill9(gw);
	}

	/* ---- fair across flows ---- */
	{
		static const char *const a[] = {"--inflight", "1", NULL};
		int port;
		pid_t gw = gt_gatewayd(&port, a);
		const char *h[9];
		for (int i = 0; i < 8; i++)
			h[i] = "x-session-id: flow-a\r\n";
		h[8] = "x-session-id: flow-b\r\n";
		gt_one r[9];
		int hung = gt_many_h(port, "/v1/chat/completions", body, 9, h,
				     60, r);
		CHECK(hung == 0, "%d hung", hung);
		int a_before_b = 0;
		for (int i = 0; i < 8; i++) {
			CHECK(r[i].status == 200, "flow a %d: %d %s", i,
			      r[i].status, r[i].err);
			a_before_b += r[i].secs < r[8].secs;
		}
		CHECK(r[8].status == 200, "flow b: %d %s", r[8].status,
		      r[8].err);
		/* one of A's runs when B arrives, one more may have been
		 * admitted; round robin gives B the next turn */
		CHECK(a_before_b <= 3,
		      "%d of flow a's 8 requests were answered before flow "
		      "b's one (round robin: at most 3)",
		      a_before_b);
		h_kill9(gw);
	}
	/* ---- a peek while the one place is taken: 409 at once ---- */
	{
		static const char *const a[] = {"--inflight", "1", NULL};
		int port;
		pid_t gw = gt_gatewayd(&port, a);
		/* 150 tokens at 5 ms a step: a second or more (a minute
		 * under ASan on a loaded box) */
		char *lb = gt_chat_body("Hello", 150, "\"ignore_eos\":true");
		int fd =
		    gt_send(port, "POST", "/v1/chat/completions", lb, NULL);
		REQUIRE(fd >= 0, "connect");
		struct timespec ts = {0, 300 * 1000 * 1000};
		nanosleep(&ts, NULL);
		double t0 = moor_now();
		gt_resp p =
		    gt_request(port, "POST", "/v1/cache/peek", body, NULL, 30);
		double dt = moor_now() - t0;
		t0 = moor_now();
		gt_resp pw = gt_request(port, "POST", "/v1/cache/prewarm", body,
					NULL, 30);
		double dw = moor_now() - t0;
		char *raw = NULL;
		size_t rl = 0;
		gt_read_all(fd, &raw, &rl, 150);
		close(fd);
		int chat_st = 0;
		if (!raw || sscanf(raw, "HTTP/1.%*d %d", &chat_st) != 1)
			chat_st = 0;
		printf("a peek during a turn, its place taken: %d after %.2f "
		       "s; the turn %d\n",
		       p.status, dt, chat_st);
		CHECK(p.status == 409 && dt < 1.0,
		      "a peek during a turn: %d after %.2f s (want 409 at "
		      "once) %s",
		      p.status, dt, p.body ? p.body : "");
		printf("a prewarm during it: %d after %.2f s\n", pw.status, dw);
		CHECK(pw.status == 409 && dw < 1.0,
		      "a prewarm during a turn: %d after %.2f s (want 409 at "
		      "once) %s",
		      pw.status, dw, pw.body ? pw.body : "");
		gt_resp_fini(&pw);
		CHECK(chat_st == 200, "the turn: %d", chat_st);
		free(raw);
		gt_resp_fini(&p);
		free(lb);
		h_kill9(gw);
	}
	free(body);
	return t_done("test_gw_admission_queue");
}
