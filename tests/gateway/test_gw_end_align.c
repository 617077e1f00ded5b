/* test_gw_end_align: a client that sends back exactly the text it was given
 * resumes at the end anchor on every follow-up (issue 12, point 1).
 *
 * Built twice: as test_gw_reasoning_budget (BUDGET_MODE) the gateway
 * serves the Qwen3.8 template (the prompt ends inside <think>) and every
 * request has a reasoning budget of BUDGET tokens: the server closes the
 * reasoning with Qwen's phrase (a hidden span: in the rows, never in the
 * reply) and </think>, so every answer has reasoning, and the follow-ups
 * come back (a) with the reasoning as reasoning_content (the replay of the
 * hidden span, with the template's whitespace as glue) and (b) without it
 * (Open WebUI: the template writes an empty think; the second pass).
 *
 * Through the stack on the tiny model: conversations of TURNS (20) turns,
 * greedy,
 * each follow-up appending the assistant message as the reply gave it (the
 * whole reply's message, or the streamed deltas added up) and a new user
 * message. The ids the engine generated are often not the ids the tokenizer
 * gives the same text when the template renders it again (byte-level BPE
 * spells one string many ways; a random model picks odd spellings), so
 * before the end alignment many follow-ups resumed at a grid anchor. Every
 * follow-up must now:
 *   - say source "end" (the end anchor),
 *   - have cached_tokens = the previous turn's prompt as the engine read it
 *     plus what its state absorbed of the generation (the previous
 *     cached + reread + completion, less the stop token that was sampled
 *     and never forwarded when it finished with "stop"),
 *   - report prompt_tokens as the client's own count (its copy as the
 *     template renders and the tokenizer splits it), which may differ from
 *     what the engine read by the respelling.
 */
#include <stdlib.h>

#include "t.h"

#include "gwtest.h"
#include "harness.h"
#include "buf.h"

#ifdef BUDGET_MODE
#define TURNS 8
#else
#define TURNS 20 /* the acceptance: a 20-turn conversation */
#endif
#define MAX_TOKENS 48
#define BUDGET 6
#ifdef BUDGET_MODE
#define NAME "test_gw_reasoning_budget"
#else
#define NAME "test_gw_end_align"
#endif

static const char *const users[20] = {
    "Tell me a story about a lighthouse.",
    "And then what happened?",
    "Why did the keeper leave?",
    "Describe the storm.",
    "What colour was the boat?",
    "Who found the letter?",
    "How does it end?",
    "Give it a title.",
    "Now tell it from the cat's side.",
    "What did the cat eat?",
    "Where did the ship sink?",
    "Was anyone saved?",
    "Describe the keeper's room.",
    "What was written in the letter?",
    "Who wrote it?",
    "Add a twist.",
    "Make the ending happier.",
    "Summarise it in one line.",
    "Translate the title into French.",
    "Thank you, that is all.",
};

/* The assistant message of a streamed reply: the deltas' content and
 * reasoning added up; usage from the last chunk. */
static json_t *sse_message(const char *body, json_t **usage)
{
	json_t *ev = json_array();
	int done_last = 0;
	REQUIRE(gt_sse(body, ev, &done_last) == 0 && done_last,
		"a stream that does not parse: %s", body);
	moor_buf content = {0}, reasoning = {0};
	*usage = NULL;
	size_t i;
	json_t *e;
	json_array_foreach(ev, i, e)
	{
		const json_t *d = json_object_get(
		    json_array_get(json_object_get(e, "choices"), 0), "delta");
		const char *c = json_string_value(json_object_get(d, "content"));
		const char *r = json_string_value(
		    json_object_get(d, "reasoning_content"));
		if (c)
			moor_buf_put(&content, c, strlen(c));
		if (r)
			moor_buf_put(&reasoning, r, strlen(r));
		json_t *u = json_object_get(e, "usage");
		if (json_is_object(u))
			*usage = json_incref(u);
	}
	json_t *m = json_pack("{s:s,s:s%}", "role", "assistant", "content",
			      content.p ? content.p : "", content.len);
	if (reasoning.len)
		json_object_set_new(m, "reasoning_content",
				    json_stringn(reasoning.p, reasoning.len));
	moor_buf_fini(&content);
	moor_buf_fini(&reasoning);
	json_decref(ev);
	REQUIRE(*usage, "no usage chunk in the stream");
	return m;
}

typedef struct turn_out {
	long long prompt, cached, reread, completion, read;
	char source[32], finish[16], pk_source[32];
	int fffd;
	long long pk_cached;
} turn_out;

/* One turn: posts msgs, appends the assistant message as given. */
static void do_turn(json_t *msgs, const char *session, int stream,
		    int drop_reasoning, turn_out *o)
{
	json_t *b = json_pack("{s:O,s:i,s:i}", "messages", msgs, "max_tokens",
			      MAX_TOKENS, "temperature", 0);
#ifdef BUDGET_MODE
	json_object_set_new(b, "reasoning_budget", json_integer(BUDGET));
#endif
	if (stream) {
		json_object_set_new(b, "stream", json_true());
		json_object_set_new(b, "stream_options",
				    json_pack("{s:b}", "include_usage", 1));
	}
	char *body = json_dumps(b, JSON_COMPACT);
	json_decref(b);
	char hdr[128];
	snprintf(hdr, sizeof hdr, "x-session-id: %s\r\n", session);
	/* the peek first: it must count the alignment as the turn will */
	gt_resp pk = gt_request(gt_.port, "POST", "/v1/cache/peek", body, hdr,
				30);
	REQUIRE(pk.status == 200, "peek: %d %s", pk.status, pk.body);
	json_t *pj = gt_json(&pk);
	o->pk_cached = gt_int(pj, "cached_tokens");
	snprintf(o->pk_source, sizeof o->pk_source, "%s",
		 gt_str(pj, "source") ? gt_str(pj, "source") : "(none)");
	json_decref(pj);
	gt_resp_fini(&pk);
	gt_resp r = gt_request(gt_.port, "POST", "/v1/chat/completions", body,
			       hdr, 120);
	free(body);
	REQUIRE(r.status == 200, "turn: %d %s", r.status, r.body);
	json_t *usage, *msg;
	o->finish[0] = 0;
	if (stream) {
		msg = sse_message(r.body, &usage);
		snprintf(o->finish, sizeof o->finish, "?");
	} else {
		json_t *j = gt_json(&r);
		REQUIRE(j, "not JSON: %s", r.body);
		msg = json_deep_copy(json_object_get(
		    json_array_get(json_object_get(j, "choices"), 0),
		    "message"));
		json_object_del(msg, "tool_calls");
		if (json_is_null(json_object_get(msg, "content")))
			json_object_set_new(msg, "content", json_string(""));
		usage = json_incref(json_object_get(j, "usage"));
		snprintf(o->finish, sizeof o->finish, "%s",
			 gt_str(j, "choices.0.finish_reason"));
		json_decref(j);
	}
	const char *ct = json_string_value(json_object_get(msg, "content"));
#ifdef BUDGET_MODE
	const char *rs =
	    json_string_value(json_object_get(msg, "reasoning_content"));
	CHECK(rs && *rs, "%s: no reasoning in the reply", session);
	CHECK(!(rs && strstr(rs, "Considering the limited time")) &&
		  !(ct && strstr(ct, "Considering the limited time")),
	      "%s: the hidden close phrase reached the client", session);
	CHECK(ct && !strstr(ct, "</think>"), "%s: the close in the content",
	      session);
#endif
	if (drop_reasoning)
		json_object_del(msg, "reasoning_content");
	o->fffd = ct && strstr(ct, "\xef\xbf\xbd");
	o->prompt = gt_int(usage, "prompt_tokens");
	o->completion = gt_int(usage, "completion_tokens");
	o->cached = gt_int(usage, "moor.cached");
	o->reread = gt_int(usage, "moor.reread");
	o->read = gt_int(usage, "moor.prompt_read");
	long long parts = gt_int(usage, "moor.parts.system") +
			  gt_int(usage, "moor.parts.tools") +
			  gt_int(usage, "moor.parts.history") +
			  gt_int(usage, "moor.parts.injected") +
			  gt_int(usage, "moor.parts.images");
	CHECK(parts == o->read, "%s: the parts add up to %lld, read %lld",
	      session, parts, o->read);
	const char *src = gt_str(usage, "moor.source");
	snprintf(o->source, sizeof o->source, "%s", src ? src : "(none)");
	json_decref(usage);
	json_array_append_new(msgs, msg);
	gt_resp_fini(&r);
}

/* A conversation; returns the number of follow-ups not at the end. */
static int respelled;

static int conversation(const char *session, int stream, int drop,
			long long *prompts)
{
	json_t *msgs = json_array();
	turn_out prev = {0};
	int missed = 0;
	for (int t = 0; t < TURNS; t++) {
		json_array_append_new(msgs, json_pack("{s:s,s:s}", "role",
						      "user", "content",
						      users[t]));
		turn_out o;
		do_turn(msgs, session, stream, drop, &o);
		prompts[t] = o.prompt;
		respelled += o.read != o.prompt;
		CHECK(o.read == o.cached + o.reread,
		      "the engine read %lld = cached %lld + reread %lld", o.read,
		      o.cached, o.reread);
		printf("%s %s turn %d: prompt %lld cached %lld reread %lld "
		       "completion %lld source %s%s\n",
		       session, stream ? "streamed" : "whole", t, o.prompt,
		       o.cached, o.reread, o.completion, o.source,
		       o.fffd ? " (U+FFFD in the answer)" : "");
		if (t > 0) {
			/* the engine read cached + reread; its state absorbed
			 * the generation less a stop token never forwarded;
			 * a streamed reply's finish is not parsed here, so
			 * either count is taken there */
			long long read = prev.cached + prev.reread;
			long long e1 = read + prev.completion;
#ifdef BUDGET_MODE
			/* the rows also hold the hidden phrase's tokens */
			int at_end = !strcmp(o.source, "end") &&
				     o.cached >= e1 - 1 && o.cached <= e1 + 40;
#else
			int at_end = !strcmp(o.source, "end") &&
				     (o.cached == e1 || o.cached == e1 - 1);
#endif
			CHECK(at_end,
			      "%s turn %d resumed at %lld from %s, not at the "
			      "end anchor (%lld)",
			      session, t, o.cached, o.source, e1);
			missed += !at_end;
			CHECK(!strcmp(o.pk_source, "end") &&
				  o.pk_cached == o.cached,
			      "%s turn %d: the peek said %s at %lld, the turn "
			      "resumed at %lld",
			      session, t, o.pk_source, o.pk_cached, o.cached);
			/* what is re-read is the new turn and the template's
			 * glue, never the previous answer again */
			CHECK(o.reread > 0 && o.reread < 40,
			      "%s turn %d re-read %lld tokens", session, t,
			      o.reread);
		}
		prev = o;
	}
	json_decref(msgs);
	return missed;
}

int main(int argc, char **argv)
{
#ifdef BUDGET_MODE
	static const char *const gw_extra[] = {"--chat-template", "qwen3.8",
					       NULL};
#else
	static const char *const *gw_extra = NULL;
#endif
	gt_stack(argc, argv, "gwalign", 400, gw_extra, NULL, NULL);
	long long p_whole[TURNS], p_stream[TURNS];
	int m1 = conversation("whole", 0, 0, p_whole);
	/* the first conversation's rows out of the way: a short new one
	 * beside a long resident is a guest (it keeps no end anchor) */
	gt_resp r = gt_post(gt_.port, "/v1/cache/clear", "{}");
	CHECK(r.status == 200, "clear: %d %s", r.status, r.body);
	gt_resp_fini(&r);
	int m2 = conversation("streamed", 1, 0, p_stream);
	printf("follow-ups not at the end anchor: %d whole, %d streamed of "
	       "%d each\n",
	       m1, m2, TURNS - 1);
	/* prompt_tokens is the client's count: the same conversation (greedy,
	 * from cleared caches) counts the same whole and streamed, and where
	 * the engine read the rows' spelling it differs from what was read */
	for (int t = 0; t < TURNS; t++)
		CHECK(p_whole[t] == p_stream[t],
		      "turn %d: prompt_tokens %lld whole, %lld streamed", t,
		      p_whole[t], p_stream[t]);
	printf("%d turns read a respelled prompt\n", respelled);
	CHECK(respelled > 0, "no turn was respelled: the test shows nothing");
#ifndef BUDGET_MODE
	/* the peek answers 409 while a turn runs (its rows are being
	 * written), and 200 again after it */
	{
		char *lb = gt_chat_body("Go on for a long time.", 300,
					"\"ignore_eos\":true");
		int fd = gt_send(gt_.port, "POST", "/v1/chat/completions", lb,
				 NULL);
		REQUIRE(fd >= 0, "long request");
		struct timespec ts = {0, 400 * 1000 * 1000};
		nanosleep(&ts, NULL);
		gt_resp pk = gt_post(gt_.port, "/v1/cache/peek", lb);
		CHECK(pk.status == 409, "peek during a turn: %d %s", pk.status,
		      pk.body);
		gt_resp_fini(&pk);
		char *raw;
		size_t n;
		gt_read_all(fd, &raw, &n, 120);
		close(fd);
		free(raw);
		pk = gt_post(gt_.port, "/v1/cache/peek", lb);
		CHECK(pk.status == 200, "peek after the turn: %d", pk.status);
		gt_resp_fini(&pk);
		free(lb);
	}
#endif
#ifdef BUDGET_MODE
	/* Open WebUI: every earlier answer's reasoning left out */
	r = gt_post(gt_.port, "/v1/cache/clear", "{}");
	gt_resp_fini(&r);
	long long p_drop[TURNS];
	int m3 = conversation("dropped", 0, 1, p_drop);
	printf("reasoning left out: %d follow-ups not at the end anchor\n",
	       m3);
#endif
	return h_done(NAME);
}
