/* test_gw_prewarm: POST /v1/cache/prewarm (issue 12, point 4), RAM tiers.
 *
 * Conversation A (session A, two turns) is replaced by conversation B
 * (session B), which parks A's rows. The prewarm of A's next request finds
 * A on the park (the peek's ram_park) and brings it back: {"prewarmed":
 * true, "restore": {...}} with what it restored and prefilled; A's send
 * then resumes one token short of its prompt (it forwards one token). A
 * second prewarm of the same body finds the rows in place: {"prewarmed":
 * false, "why": "resident"}; an unknown conversation: "not_cached".
 *
 * Built again as test_gw_prewarm_spill (PREWARM_SPILL 1): cached with the
 * session spill (--disk-dir, --session-spill-min-tokens 64) and a park too
 * small for A (--resident-park-gb 0) and no state store (--cache-gb 0),
 * so B's first turn (A and B made long: no guest) writes A to the spill; the peek finds A on nvme_spill, the prewarm reads it back from
 * there, and A's send re-reads one token, as from the park. */
#include <stdlib.h>

#include "t.h"

#include "gwtest.h"
#include "harness.h"

#ifndef PREWARM_SPILL
#define PREWARM_SPILL 0
#endif

static char *body_of(json_t *msgs)
{
	json_t *b = json_pack("{s:O,s:i,s:i}", "messages", msgs, "max_tokens",
			      16, "temperature", 0);
	char *t = json_dumps(b, JSON_COMPACT);
	json_decref(b);
	return t;
}

static json_t *post(const char *path, const char *body, const char *session,
		    int *status)
{
	char hdr[128];
	snprintf(hdr, sizeof hdr, "x-session-id: %s\r\n", session);
	gt_resp r = gt_request(gt_.port, "POST", path, body, hdr, 120);
	*status = r.status;
	json_t *o = gt_json(&r);
	if (!o)
		printf("%s: %d %s\n", path, r.status, r.body);
	gt_resp_fini(&r);
	return o;
}

static void turn(json_t *msgs, const char *session, const char *user)
{
	json_array_append_new(
	    msgs, json_pack("{s:s,s:s}", "role", "user", "content", user));
	char *b = body_of(msgs);
	int st;
	json_t *o = post("/v1/chat/completions", b, session, &st);
	free(b);
	REQUIRE(st == 200 && o, "turn: %d", st);
	json_t *m = json_deep_copy(json_object_get(
	    json_array_get(json_object_get(o, "choices"), 0), "message"));
	if (!json_is_string(json_object_get(m, "content")))
		json_object_set_new(m, "content", json_string(""));
	json_array_append_new(msgs, m);
	json_decref(o);
}

int main(int argc, char **argv)
{
	const char *want = PREWARM_SPILL ? "nvme_spill" : "ram_park";
	static char ddir[] = "/tmp/moor-gwprewarm-disk-XXXXXX";
	if (PREWARM_SPILL) {
		REQUIRE(mkdtemp(ddir), "mkdtemp");
		static const char *ca[] = {
		    "--device-gb", "0.25", "--host-gb", "0.25",
		    "--mem-ceiling-gb", "0.25", "--mem-peak-gb", "0.25",
		    "--resident-gb", "0.05", "--resident-park-gb", "0",
		    "--cache-gb", "0", "--store-entry-gb", "0.02",
		    "--disk-dir", ddir, "--session-spill-min-tokens", "64",
		    "--disk-cache", "off", "--disk-cache-min-free-gb", "0",
		    NULL};
		gt_.cached_args = ca;
	}
	gt_stack(argc, argv, "gwprewarm", 200, NULL, NULL, NULL);
	json_t *a = json_array(), *b = json_array();
	/* the spill offers a conversation only where reading it beats
	 * prefilling it (spill_offer): A is made long there */
	char story[8192] = "Tell me a long story about a lighthouse keeper, her "
			   "cat, the storms of the northern sea and the ships.";
	for (int i = 0; PREWARM_SPILL && i < 60; i++)
		snprintf(story + strlen(story), sizeof story - strlen(story),
			 " The %d-th ship came in the night.", i);
	turn(a, "A", story);
	turn(a, "A", "Go on with the story, please, and more about the cat.");
	/* long as well there, so that B is no guest (which A would keep) */
	char poem[8192] = "Write a poem about the mountains in winter, with "
			  "snow on the peaks and wolves in the valleys below "
			  "them.";
	for (int i = 0; PREWARM_SPILL && i < 60; i++)
		snprintf(poem + strlen(poem), sizeof poem - strlen(poem),
			 " The %d-th wolf howled at dawn.", i);
	turn(b, "B", poem);
	turn(b, "B", "Another verse, about the spring that follows.");
	json_array_append_new(a, json_pack("{s:s,s:s}", "role", "user",
					   "content", "And then?"));
	char *ab = body_of(a);
	int st;
	json_t *pk = post("/v1/cache/peek", ab, "A", &st);
	printf("peek of A: %s cached %lld of %lld\n", gt_str(pk, "tier"),
	       gt_int(pk, "cached_tokens"), gt_int(pk, "tokens"));
	CHECK(st == 200 && gt_str(pk, "tier") &&
		  !strcmp(gt_str(pk, "tier"), want),
	      "A is not on the %s: %s", want, gt_str(pk, "tier"));
	long long tokens = gt_int(pk, "tokens");
	json_decref(pk);
	json_t *pw = post("/v1/cache/prewarm", ab, "A", &st);
	char *pws = json_dumps(pw, JSON_COMPACT);
	printf("prewarm: %d %s\n", st, pws);
	free(pws);
	CHECK(st == 200 && json_is_true(json_object_get(pw, "prewarmed")),
	      "prewarm refused");
	CHECK(gt_str(pw, "restore.tier") &&
		  !strcmp(gt_str(pw, "restore.tier"), want),
	      "the prewarm restored from %s", gt_str(pw, "restore.tier"));
	json_decref(pw);
	pw = post("/v1/cache/prewarm", ab, "A", &st);
	CHECK(st == 200 && json_is_false(json_object_get(pw, "prewarmed")) &&
		  gt_str(pw, "why") && !strcmp(gt_str(pw, "why"), "resident"),
	      "a second prewarm did not say resident");
	json_decref(pw);
	json_t *o = post("/v1/chat/completions", ab, "A", &st);
	printf("A's send: cached %lld reread %lld of %lld (%s)\n",
	       gt_int(o, "usage.moor.cached"), gt_int(o, "usage.moor.reread"),
	       tokens, gt_str(o, "usage.moor.source"));
	CHECK(st == 200 && gt_int(o, "usage.moor.cached") == tokens - 1 &&
		  gt_int(o, "usage.moor.reread") == 1,
	      "the send after the prewarm re-read %lld",
	      gt_int(o, "usage.moor.reread"));
	json_decref(o);
	char *ub = gt_chat_body("Something nobody said before, at all.", 8, "");
	pw = post("/v1/cache/prewarm", ub, "C", &st);
	CHECK(st == 200 && json_is_false(json_object_get(pw, "prewarmed")),
	      "an unknown conversation was prewarmed");
	printf("unknown: why %s\n", gt_str(pw, "why"));
	json_decref(pw);
	free(ub);
	free(ab);
	json_decref(a);
	json_decref(b);
	if (PREWARM_SPILL) {
		char cmd[128];
		snprintf(cmd, sizeof cmd, "rm -rf %s", ddir);
		(void)!system(cmd);
	}
	return h_done(PREWARM_SPILL ? "test_gw_prewarm_spill"
				    : "test_gw_prewarm");
}
