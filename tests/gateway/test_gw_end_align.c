/* test_gw_end_align: a client that sends back exactly the text it was given
 * resumes at the end anchor on every follow-up (issue 12, point 1).
 *
 * Through the stack on the tiny model: conversations of TURNS turns, greedy,
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

#define TURNS 8
#define MAX_TOKENS 48

static const char *const users[TURNS] = {
    "Tell me a story about a lighthouse.",
    "And then what happened?",
    "Why did the keeper leave?",
    "Describe the storm.",
    "What colour was the boat?",
    "Who found the letter?",
    "How does it end?",
    "Give it a title.",
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
	char source[32], finish[16];
	int fffd;
} turn_out;

/* One turn: posts msgs, appends the assistant message as given. */
static void do_turn(json_t *msgs, const char *session, int stream,
		    turn_out *o)
{
	json_t *b = json_pack("{s:O,s:i,s:i}", "messages", msgs, "max_tokens",
			      MAX_TOKENS, "temperature", 0);
	if (stream) {
		json_object_set_new(b, "stream", json_true());
		json_object_set_new(b, "stream_options",
				    json_pack("{s:b}", "include_usage", 1));
	}
	char *body = json_dumps(b, JSON_COMPACT);
	json_decref(b);
	char hdr[128];
	snprintf(hdr, sizeof hdr, "x-session-id: %s\r\n", session);
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
	o->fffd = ct && strstr(ct, "\xef\xbf\xbd");
	o->prompt = gt_int(usage, "prompt_tokens");
	o->completion = gt_int(usage, "completion_tokens");
	o->cached = gt_int(usage, "prompt_tokens_details.cached_tokens");
	o->reread = gt_int(usage, "moor.reread");
	o->read = gt_int(usage, "moor.prompt_read");
	const char *src = gt_str(usage, "moor.source");
	snprintf(o->source, sizeof o->source, "%s", src ? src : "(none)");
	json_decref(usage);
	json_array_append_new(msgs, msg);
	gt_resp_fini(&r);
}

/* A conversation; returns the number of follow-ups not at the end. */
static int respelled;

static int conversation(const char *session, int stream, long long *prompts)
{
	json_t *msgs = json_array();
	turn_out prev = {0};
	int missed = 0;
	for (int t = 0; t < TURNS; t++) {
		json_array_append_new(msgs, json_pack("{s:s,s:s}", "role",
						      "user", "content",
						      users[t]));
		turn_out o;
		do_turn(msgs, session, stream, &o);
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
			int at_end = !strcmp(o.source, "end") &&
				     (o.cached == e1 || o.cached == e1 - 1);
			CHECK(at_end,
			      "%s turn %d resumed at %lld from %s, not at the "
			      "end anchor (%lld)",
			      session, t, o.cached, o.source, e1);
			missed += !at_end;
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
	gt_stack(argc, argv, "gwalign", 400, NULL, NULL, NULL);
	long long p_whole[TURNS], p_stream[TURNS];
	int m1 = conversation("whole", 0, p_whole);
	/* the first conversation's rows out of the way: a short new one
	 * beside a long resident is a guest (it keeps no end anchor) */
	gt_resp r = gt_post(gt_.port, "/v1/cache/clear", "{}");
	CHECK(r.status == 200, "clear: %d %s", r.status, r.body);
	gt_resp_fini(&r);
	int m2 = conversation("streamed", 1, p_stream);
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
	return h_done("test_gw_end_align");
}
