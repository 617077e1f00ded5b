/* test_gw_memory_refused: a prefill the memory policy refuses is a 503 with
 * Retry-After in the OpenAI error shape, naming the limit, and nothing is
 * lost by it.
 *
 * cached runs with mem_peak (1 MiB) under what the live buffers alone hold
 * (about 4 MiB at the tests' 4,096-token window) plus engined's declared
 * prefill workspace (its HELLO): it attaches, says once that every prefill
 * will be refused, and refuses each plan before anything is touched. Then:
 * a whole chat, a streamed chat (the 503 comes before any 200: the stream
 * has not started) and a text completion are 503 with Retry-After and
 * cached's message; a peek says the same (503, not "cached unavailable");
 * /health stays 200 (every process is up); cached's stats count the
 * refusals and engined is still attached. cached restarted with room, the
 * same chat is answered (engined attaches again by itself).
 *
 *   test_gw_memory_refused CACHED ENGINED GATEWAYD MODEL_DIR
 */
#include "t.h"

#include "gwtest.h"
#include "harness.h"

/* The daemon tests' budgets with mem_peak and the ceiling at 1 MiB. */
#define TIGHT                                                                  \
	"--device-gb", "0.25", "--host-gb", "0.25", "--mem-ceiling-gb",        \
	    "0.001", "--mem-peak-gb", "0.001", "--resident-gb", "0.05",        \
	    "--resident-stash-gb", "0.02", "--resident-pin-gb", "0.02",        \
	    "--resident-park-gb", "0.02", "--cache-gb", "0.05",                \
	    "--store-entry-gb", "0.02"

static void want_refused(int port, const char *path, const char *body)
{
	gt_resp r = gt_post(port, path, body);
	char ra[16] = "";
	json_t *o = gt_json(&r);
	json_t *e = json_object_get(o, "error");
	CHECK(r.status == 503, "%s: status %d, want 503: %s", path, r.status,
	      r.body);
	CHECK(gt_header(&r, "retry-after", ra, sizeof ra) && atoi(ra) > 0,
	      "%s: no Retry-After (%s)", path, r.head);
	CHECK(json_is_object(e) && gt_str(e, "message") &&
		  strstr(gt_str(e, "message"), "mem_peak") &&
		  gt_str(e, "type") &&
		  !strcmp(gt_str(e, "type"), "server_error"),
	      "%s: not the policy's error: %s", path, r.body);
	CHECK(!strstr(r.head, "text/event-stream"),
	      "%s: a stream was started before the refusal: %s", path, r.head);
	json_decref(o);
	gt_resp_fini(&r);
}

int main(int argc, char **argv)
{
	static const char *const tight[] = {TIGHT, NULL};
	gt_.cached_args = tight;
	gt_stack(argc, argv, "gwmem", 120, NULL, NULL, NULL);
	int port = gt_.port;
	CHECK(h_log_has("cached", "every prefill will be refused"),
	      "cached did not warn at the attach");

	char *chat = gt_chat_body("hello there", 4, "");
	char *chat_s = gt_chat_body("hello there", 4, "\"stream\":true");
	want_refused(port, "/v1/chat/completions", chat);
	want_refused(port, "/v1/chat/completions", chat_s);
	want_refused(port, "/v1/completions",
		     "{\"prompt\":\"abc\",\"max_tokens\":2,\"temperature\":0}");
	want_refused(port, "/v1/cache/peek", chat);

	/* every process is up: health is green; the refusals are counted */
	gt_resp r = gt_get(port, "/health");
	CHECK(r.status == 200, "health after refusals: %d %s", r.status,
	      r.body);
	gt_resp_fini(&r);
	r = gt_get(port, "/v1/cache/stats");
	json_t *o = gt_json(&r);
	CHECK(r.status == 200 && gt_int(o, "memory.refused") == 3,
	      "stats: %d memory.refused %lld, want 3 (the peek counts "
	      "nothing): %s",
	      r.status, gt_int(o, "memory.refused"), r.body);
	json_decref(o);
	gt_resp_fini(&r);

	/* cached again with room: the same chat is answered */
	kill(gt_.cd, SIGTERM);
	REQUIRE(h_wait_exit(gt_.cd, 10) >= 0, "cached did not stop");
	gt_.cd = h_cached(gt_.cached, gt_.run, "cached2");
	double t0 = moor_now(), end = t0 + 20;
	int st = 0;
	while (moor_now() < end) {
		r = gt_post(port, "/v1/chat/completions", chat);
		st = r.status;
		if (st == 200) {
			o = gt_json(&r);
			CHECK(gt_int(o, "usage.completion_tokens") > 0,
			      "no tokens: %s", r.body);
			json_decref(o);
		}
		gt_resp_fini(&r);
		if (st == 200)
			break;
		struct timespec ts = {0, 100 * 1000 * 1000};
		nanosleep(&ts, NULL);
	}
	CHECK(st == 200, "with room the chat was not answered: %d", st);
	printf("answered %.2f s after cached came back with room\n",
	       moor_now() - t0);
	free(chat);
	free(chat_s);
	return h_done("test_gw_memory_refused");
}
