/* test_gw_every_request_answered: 300 small chats sent at once through the
 * stack (one connection each) all get an answer: 200, or 503 with a
 * Retry-After. None may hang: before the fix, engined's refusals ("busy")
 * went out as a burst on its PAIR1 poly socket, whose per-pipe queue holds
 * two messages and drops the rest, so some clients waited until they gave
 * up. The deadline (120 s) is far past what the whole burst takes on the
 * tiny model (a few seconds of work on 2 cores). And the deadline of a
 * job sent (--request-timeout-s): a generation that runs past it is
 * cancelled and answered 504, and engined serves the next one. */
#include <stdlib.h>

#include "t.h"

#include "gwtest.h"
#include "harness.h"

#define N 300
#define ROUNDS 3
#define N_QUEUED 200

int main(int argc, char **argv)
{
	/* 2 ms a decode step: a long generation outlives a short deadline */
	gt_stack(argc, argv, "gwall", 240, NULL, "--test-step-delay-ms", "2");
	static const char *const all_in[] = {"--inflight", "1000", NULL};
	int port1;
	pid_t gw1 = gt_gatewayd(&port1, all_in);
	char *body = gt_chat_body("Hello", 4, NULL);
	static gt_one r[ROUNDS * N];
	int hung = 0;
	for (int k = 0; k < ROUNDS; k++)
		hung += gt_many(port1, "/v1/chat/completions", body, N, 120,
				r + k * N);
	h_kill9(gw1);
	int ok = 0, busy = 0, other = 0;
	double worst = 0;
	for (int i = 0; i < ROUNDS * N; i++) {
		if (r[i].secs > worst)
			worst = r[i].secs;
		if (r[i].status == 200) {
			ok++;
		} else if (r[i].status == 503) {
			busy++;
			CHECK(r[i].retry_after > 0,
			      "request %d: 503 without Retry-After: %s", i,
			      r[i].err);
		} else if (r[i].status) {
			other++;
			CHECK(0, "request %d: status %d: %s", i, r[i].status,
			      r[i].err);
		}
	}
	printf("%d rounds of %d requests: %d answered 200, %d 503, %d other, "
	       "%d hung; the slowest answer after %.2f s\n",
	       ROUNDS, N, ok, busy, other, hung, worst);
	CHECK(hung == 0, "%d of %d requests got no answer in 120 s", hung,
	      ROUNDS * N);
	CHECK(ok > 0, "none answered 200");

	/* the default gateway queues what engined cannot take yet */
	static gt_one q[N_QUEUED];
	hung = gt_many(gt_.port, "/v1/chat/completions", body, N_QUEUED, 120,
		       q);
	ok = 0;
	worst = 0;
	for (int i = 0; i < N_QUEUED; i++) {
		ok += q[i].status == 200;
		if (q[i].secs > worst)
			worst = q[i].secs;
		if (q[i].status != 200)
			CHECK(0, "queued request %d: %d %s", i, q[i].status,
			      q[i].err);
	}
	printf("through the admission queue: %d of %d answered 200, %d hung; "
	       "the last after %.2f s\n",
	       ok, N_QUEUED, hung, worst);
	CHECK(hung == 0 && ok == N_QUEUED, "%d of %d answered 200", ok,
	      N_QUEUED);
	free(body);
	/* the stack still serves */
	body = gt_chat_body("Hello again", 4, NULL);
	gt_resp a = gt_post(gt_.port, "/v1/chat/completions", body);
	free(body);
	CHECK(a.status == 200, "after the burst: %d %s", a.status, a.body);
	gt_resp_fini(&a);

	/* a job that does not end in time is cancelled and answered 504 */
	static const char *const short_deadline[] = {"--request-timeout-s",
						     "1", NULL};
	int port2;
	pid_t gw2 = gt_gatewayd(&port2, short_deadline);
	body = gt_chat_body("Hello", 3000, "\"ignore_eos\":true");
	a = gt_post(port2, "/v1/chat/completions", body);
	CHECK(a.status == 504 && a.body &&
		  strstr(a.body, "--request-timeout-s"),
	      "past the deadline: %d %s", a.status, a.body);
	CHECK(a.secs < 5, "the deadline of 1 s answered after %.2f s", a.secs);
	gt_resp_fini(&a);
	/* engined got the CANCEL and serves the next request */
	a = gt_post(port2, "/v1/chat/completions",
		    "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"
		    "\"max_tokens\":2}");
	CHECK(a.status == 200, "after the deadline: %d %s", a.status, a.body);
	gt_resp_fini(&a);
	free(body);
	h_kill9(gw2);
	return t_done("test_gw_every_request_answered");
}
