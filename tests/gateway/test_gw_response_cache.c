/* test_gw_response_cache: --response-cache on (issue 12, point 4). An
 * identical greedy request is answered from memory: the same message and
 * completion_tokens, usage.moor.source "response_cache", no plan at cached
 * (its plans counter does not move), whole or streamed (the streamed
 * deltas add up to the same content). A sampled request (temperature 1) is
 * never answered from it, and a request that differs in max_tokens is a
 * miss. A request with logprobs is kept out of it: not answered from the
 * same greedy body's entry, and not kept (its second asking goes to the
 * engine too). A reasoning budget's hidden close phrase is in neither the first
 * answer nor its hit (a second gateway, the Qwen3.8 template). Off by
 * default: tests/gateway/test_gw_end_align and the others run without
 * it. */
#include <stdlib.h>

#include "t.h"

#include "buf.h"
#include "gwtest.h"
#include "harness.h"

static long long plans(void)
{
	gt_resp r = gt_get(gt_.port, "/v1/cache/stats");
	json_t *o = gt_json(&r);
	long long p = gt_int(o, "plans");
	json_decref(o);
	gt_resp_fini(&r);
	return p;
}

static json_t *chat(const char *body)
{
	gt_resp r = gt_post(gt_.port, "/v1/chat/completions", body);
	REQUIRE(r.status == 200, "%d %s", r.status, r.body);
	json_t *o = gt_json(&r);
	REQUIRE(o, "not JSON");
	gt_resp_fini(&r);
	return o;
}

int main(int argc, char **argv)
{
	static const char *const extra[] = {"--response-cache", "on", NULL};
	gt_stack(argc, argv, "gwrcache", 200, extra, NULL, NULL);
	char *b = gt_chat_body("Tell me about tides.", 32, "");
	json_t *a = chat(b);
	long long p0 = plans();
	json_t *c = chat(b);
	CHECK(plans() == p0, "a hit planned at cached");
	const char *s1 = gt_str(a, "usage.moor.source");
	const char *s2 = gt_str(c, "usage.moor.source");
	printf("first %s, second %s\n", s1, s2);
	CHECK(s1 && strcmp(s1, "response_cache"), "the first answer: %s", s1);
	CHECK(s2 && !strcmp(s2, "response_cache"), "the second: %s", s2);
	const char *t1 = gt_str(a, "choices.0.message.content");
	const char *t2 = gt_str(c, "choices.0.message.content");
	CHECK(t1 && t2 && !strcmp(t1, t2), "content differs");
	CHECK(gt_int(a, "usage.completion_tokens") ==
		      gt_int(c, "usage.completion_tokens") &&
		  gt_int(a, "usage.prompt_tokens") ==
		      gt_int(c, "usage.prompt_tokens"),
	      "usage differs");
	CHECK(gt_int(c, "usage.moor.reread") == 0, "a hit re-read tokens");
	/* streamed */
	char *bs = gt_chat_body("Tell me about tides.", 32,
				"\"stream\":true,\"stream_options\":"
				"{\"include_usage\":true}");
	gt_resp r = gt_post(gt_.port, "/v1/chat/completions", bs);
	json_t *ev = json_array();
	int done_last;
	CHECK(r.status == 200 && gt_sse(r.body, ev, &done_last) == 0 &&
		  done_last,
	      "stream: %d", r.status);
	moor_buf txt = {0};
	const char *src = NULL;
	size_t i;
	json_t *e;
	json_array_foreach(ev, i, e)
	{
		const char *d = gt_str(e, "choices.0.delta.content");
		if (d)
			moor_buf_puts(&txt, d);
		if (gt_str(e, "usage.moor.source"))
			src = gt_str(e, "usage.moor.source");
	}
	CHECK(src && !strcmp(src, "response_cache"), "streamed: %s", src);
	CHECK(t1 && txt.p && !strcmp(txt.p, t1), "streamed content differs");
	moor_buf_fini(&txt);
	json_decref(ev);
	gt_resp_fini(&r);
	/* another max_tokens: a miss */
	char *b2 = gt_chat_body("Tell me about tides.", 31, "");
	json_t *m = chat(b2);
	CHECK(strcmp(gt_str(m, "usage.moor.source"), "response_cache"),
	      "max_tokens 31 answered from the cache");
	json_decref(m);
	/* sampled: never */
	char *b3 = gt_chat_body("Tell me about tides.", 32,
				"\"temperature\":1,\"seed\":7");
	json_t *x = chat(b3), *y = chat(b3);
	CHECK(strcmp(gt_str(y, "usage.moor.source"), "response_cache"),
	      "a sampled request answered from the cache");
	json_decref(x);
	json_decref(y);
	/* logprobs: kept out, neither answered (the same body as the kept
	 * answer but for logprobs) nor kept (asked twice); the engine's
	 * answer carries them */
	char *b4 = gt_chat_body("Tell me about tides.", 32,
				"\"logprobs\":true,\"top_logprobs\":2");
	for (int k = 0; k < 2; k++) {
		json_t *l = chat(b4);
		const char *ls = gt_str(l, "usage.moor.source");
		CHECK(ls && strcmp(ls, "response_cache"),
		      "a logprobs request answered from the cache (%d)", k);
		CHECK(json_is_array(json_object_get(
			  json_object_get(
			      json_array_get(json_object_get(l, "choices"), 0),
			      "logprobs"),
			  "content")),
		      "a logprobs request without its logprobs (%d)", k);
		json_decref(l);
	}
	free(b4);
	json_decref(a);
	json_decref(c);
	free(b);
	free(bs);
	free(b2);
	free(b3);

	/* a reasoning budget's hidden span is not among what the cache keeps:
	 * a gateway of the Qwen3.8 template (the prompt opens <think>), a
	 * budget of 8 reasoning tokens that the server closes with Qwen's
	 * phrase (hidden: in the rows, never in the reply); the hit gives the
	 * same reasoning, answer and completion_tokens, and neither holds the
	 * phrase */
	static const char *const extra2[] = {
	    "--response-cache", "on", "--chat-template", "qwen3.8", NULL};
	int port2;
	gt_gatewayd(&port2, extra2);
	REQUIRE(gt_wait_health(port2, 200, 20) == 200, "gatewayd2 not green");
	char *bb =
	    gt_chat_body("Tell me about tides.", 48, "\"reasoning_budget\":8");
	json_t *rb[2];
	for (int k = 0; k < 2; k++) {
		gt_resp rr = gt_post(port2, "/v1/chat/completions", bb);
		REQUIRE(rr.status == 200, "budget %d: %d %s", k, rr.status,
			rr.body);
		rb[k] = gt_json(&rr);
		gt_resp_fini(&rr);
	}
	const char *sb = gt_str(rb[1], "usage.moor.source");
	const char *r0 = gt_str(rb[0], "choices.0.message.reasoning_content"),
		   *r1 = gt_str(rb[1], "choices.0.message.reasoning_content"),
		   *c0 = gt_str(rb[0], "choices.0.message.content"),
		   *c1 = gt_str(rb[1], "choices.0.message.content");
	printf("a reasoning budget: first %s, second %s, %lld completion "
	       "tokens\n",
	       gt_str(rb[0], "usage.moor.source"), sb,
	       gt_int(rb[0], "usage.completion_tokens"));
	CHECK(h_log_has("engined1", "the reasoning budget (8) closed"),
	      "the budget did not close the reasoning (engined's log)");
	CHECK(sb && !strcmp(sb, "response_cache"), "the budget's hit: %s", sb);
	CHECK(r0 && *r0 && r1 && !strcmp(r0, r1) && c0 && c1 && !strcmp(c0, c1),
	      "the hit's reasoning or answer differs");
	CHECK(gt_int(rb[0], "usage.completion_tokens") ==
		  gt_int(rb[1], "usage.completion_tokens"),
	      "the hit's completion_tokens differ");
	for (int k = 0; k < 2; k++) {
		char *t = json_dumps(rb[k], JSON_COMPACT);
		CHECK(t && !strstr(t, "Considering the limited time"),
		      "the hidden phrase reached the client (%s)",
		      k ? "the hit" : "the first");
		free(t);
		json_decref(rb[k]);
	}
	free(bb);
	return h_done("test_gw_response_cache");
}
