/* test_gw_compaction_box_busy: the compaction preparer does not start
 * while the box is busy, whoever keeps it busy (issue 12, point 3).
 *
 * One engined and cached, two gateways on the run dir: gatewayd1 (the
 * preparer's, --compaction-idle-s 2 --compaction-min-tokens 64) and
 * gatewayd2 (--compaction-prepare off), another client of the same
 * engine, whose requests gatewayd1's jobs never show. engined's decode is
 * slowed (--test-step-delay-ms 40).
 *
 *   P: three turns of an opencode session through gatewayd1;
 *   then, at once, P's fourth turn through gatewayd2 (the same user on
 *      another gateway; ignore_eos, 200 tokens: about 8 s of decode).
 *      gatewayd1 is idle for more than its 2 s while it runs: the
 *      preparer must say the box is busy and write nothing while the
 *      request is in flight (without the box-wide check it queued its
 *      summary behind it);
 *      A peek through gatewayd1 meanwhile answers 409 (the rows are
 *      being written), though gatewayd1 runs nothing itself.
 *   after it ends, an idle period later, the preparer writes the summary
 *      ahead after all (the busy box was a wait, not a refusal), of the
 *      conversation as cached holds it now (its four turns), and P's
 *      compaction request (opencode 1.18.33's text, the captured
 *      opencode_1.18.33_compaction.json's) is answered from it (source
 *      "prepared").
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "t.h"

#include "buf.h"
#include "gwtest.h"
#include "harness.h"

static const char *const users[4] = {
    "Write a function that adds two numbers.",
    "Now make it handle lists.",
    "Add a docstring.",
    "And a test for it.",
};

static json_t *post(int port, json_t *b, const char *session, const char *ua,
		    json_t **usage)
{
	char *body = json_dumps(b, JSON_COMPACT);
	char hdr[256];
	snprintf(hdr, sizeof hdr, "x-session-id: %s\r\nUser-Agent: %s\r\n",
		 session, ua);
	gt_resp r =
	    gt_request(port, "POST", "/v1/chat/completions", body, hdr, 120);
	free(body);
	REQUIRE(r.status == 200, "%d %s", r.status, r.body);
	json_t *j = gt_json(&r);
	REQUIRE(j, "not JSON: %s", r.body);
	gt_resp_fini(&r);
	*usage = json_object_get(j, "usage");
	return j;
}

/* P's fourth turn through the other gateway, on a thread */
static int port2;
static atomic_int other_done;
static long long other_tokens;
static json_t *msgs;
static const char *ua = "opencode/1.18.33 test";

static void *other(void *arg)
{
	(void)arg;
	json_t *b =
	    json_pack("{s:O,s:i,s:i,s:b}", "messages", msgs, "max_tokens", 200,
		      "temperature", 0, "ignore_eos", 1);
	json_t *u;
	json_t *j = post(port2, b, "ses_p", ua, &u);
	other_tokens = gt_int(u, "completion_tokens");
	json_decref(b);
	json_decref(j);
	atomic_store(&other_done, 1);
	return NULL;
}

int main(int argc, char **argv)
{
	static const char *const extra[] = {
	    "--compaction-idle-s", "2", "--compaction-min-tokens", "64", NULL};
	gt_stack(argc, argv, "gwcbusy", 300, extra, "--test-step-delay-ms",
		 "40");
	static const char *const extra2[] = {"--compaction-prepare", "off",
					     NULL};
	gt_gatewayd(&port2, extra2);
	REQUIRE(gt_wait_health(port2, 200, 20) == 200, "gatewayd2 not green");

	/* P: three turns through gatewayd1 */
	msgs = json_array();
	long long read = 0;
	for (int t = 0; t < 3; t++) {
		json_array_append_new(msgs,
				      json_pack("{s:s,s:s}", "role", "user",
						"content", users[t]));
		json_t *b = json_pack("{s:O,s:i,s:i}", "messages", msgs,
				      "max_tokens", 16, "temperature", 0);
		json_t *u;
		json_t *j = post(gt_.port, b, "ses_p", ua, &u);
		json_decref(b);
		read = gt_int(u, "moor.prompt_read");
		json_t *m = json_deep_copy(json_object_get(
		    json_array_get(json_object_get(j, "choices"), 0),
		    "message"));
		if (!json_is_string(json_object_get(m, "content")))
			json_object_set_new(m, "content", json_string(""));
		json_array_append_new(msgs, m);
		json_decref(j);
	}
	printf("P: three turns, the last read %lld tokens\n", read);

	/* P's fourth turn through gatewayd2, at once */
	json_array_append_new(
	    msgs, json_pack("{s:s,s:s}", "role", "user", "content", users[3]));
	pthread_t th;
	REQUIRE(pthread_create(&th, NULL, other, NULL) == 0, "thread");
	/* gatewayd1 is idle past its 2 s while the other request runs */
	CHECK(gt_wait_log("gatewayd1",
			  "the box is busy (a request is in flight on the "
			  "engine): session ses_p",
			  6),
	      "the preparer did not see the box busy");
	/* a peek through gatewayd1 meanwhile: 409, the rows are being
	 * written (gatewayd1 has no job of its own running) */
	json_t *pb = json_pack("{s:O}", "messages", msgs);
	char *pbs = json_dumps(pb, JSON_COMPACT);
	json_decref(pb);
	gt_resp pr = gt_request(gt_.port, "POST", "/v1/cache/peek", pbs,
				"x-session-id: ses_p\r\n", 30);
	free(pbs);
	int during = !atomic_load(&other_done);
	printf("a peek while the fourth turn runs: %d\n", pr.status);
	CHECK(pr.status == 409,
	      "a peek while another client's turn ran: "
	      "%d %s",
	      pr.status, pr.body ? pr.body : "");
	gt_resp_fini(&pr);
	CHECK(!h_log_has("gatewayd1", "writing the summary of session ses_p") &&
		  !h_log_has("gatewayd1", "nothing to write for session ses_p"),
	      "the preparer acted while another client's request was in "
	      "flight");
	pthread_join(th, NULL);
	printf("the fourth turn: %lld tokens; it was still running at the "
	       "check: %s\n",
	       other_tokens, during ? "yes" : "no");
	CHECK(during, "the fourth turn ended before the busy check: the "
		      "check saw nothing (too fast a machine?)");
	CHECK(other_tokens == 200, "the fourth turn: %lld tokens",
	      other_tokens);

	/* after it: an idle period, then P's summary after all */
	CHECK(gt_wait_log("gatewayd1", "prepared the summary of session ses_p",
			  90),
	      "the preparer did not write P's summary once the box was free");
	char path[4096];
	snprintf(path, sizeof path,
		 "%s/tests/gateway/opencode_1.18.33_compaction.json", t_src());
	json_error_t e;
	json_t *fx = json_load_file(path, 0, &e);
	REQUIRE(fx, "%s: %s", path, e.text);
	json_t *fm = json_object_get(fx, "messages");
	const char *fsys = json_string_value(
	    json_object_get(json_array_get(fm, 0), "content"));
	const char *fu = json_string_value(
	    json_object_get(json_array_get(fm, 1), "content"));
	const char *ins = fu ? strstr(fu, "</conversation>\n\n") : NULL;
	REQUIRE(fsys && ins, "%s: not a compaction request", path);
	moor_buf cu = {0};
	moor_buf_puts(&cu,
		      "Here is the conversation so far:\n\n<conversation>\n");
	for (int i = 0; i < 4; i++)
		moor_buf_printf(&cu, "%s[User]: %s\n\n[Assistant]: (an answer)",
				i ? "\n\n" : "", users[i]);
	moor_buf_puts(&cu, ins);
	json_t *b = json_pack("{s:[{s:s,s:s},{s:s,s:s}],s:i}", "messages",
			      "role", "system", "content", fsys, "role", "user",
			      "content", cu.p, "max_tokens", 40);
	moor_buf_fini(&cu);
	json_decref(fx);
	json_t *u;
	json_t *j = post(gt_.port, b, "ses_p", ua, &u);
	json_decref(b);
	const char *src = gt_str(u, "moor.source");
	printf("P's compaction: source %s\n", src ? src : "-");
	CHECK(src && !strcmp(src, "prepared"), "P's compaction: %s",
	      src ? src : "-");
	json_decref(j);
	json_decref(msgs);
	return h_done("test_gw_compaction_box_busy");
}
