/* test_gw_progress: a long prefill's progress (issue 12, point 5). engined
 * runs with --progress-ms 50 (the default is 1000) so a tiny-model prefill
 * of about 3,000 tokens (a second or more on 2 CPU threads at grid 64)
 * reports several times. A streamed request gets the progress as SSE
 * comment lines (`: progress DONE/TOTAL tokens (cached N), R tokens/s,
 * eta S s`) before its first data event: DONE grows, TOTAL is what the
 * prefill forwards (the prompt less the cached tokens, usage.moor.reread),
 * and the data events are the same as without them (an SSE client skips
 * comments). A non-streamed request of a long prompt is unchanged: one
 * JSON body and nothing else, though engined logged its progress, and its
 * message equals the streamed reply of the same prompt. */
#include <stdlib.h>

#include "t.h"

#include "buf.h"
#include "gwtest.h"
#include "harness.h"

/* A long user message: n numbered words, one per seed. */
static char *long_text(int seed, int n)
{
	moor_buf b = {0};
	moor_buf_puts(&b, "Please read this list and say nothing: ");
	for (int i = 0; i < n; i++) {
		char w[32];
		snprintf(w, sizeof w, "w%d-%d ", seed, i * 7919 % 10007);
		moor_buf_puts(&b, w);
	}
	char *t = strdup(b.p);
	moor_buf_fini(&b);
	return t;
}

/* The content of a streamed reply: the data events' deltas joined. */
static char *sse_content(const char *body, int *n_events, json_t **usage)
{
	json_t *ev = json_array();
	int done_last = 0;
	CHECK(gt_sse(body, ev, &done_last) == 0, "not SSE: %.200s", body);
	CHECK(done_last, "the stream did not end with [DONE]");
	*n_events = (int)json_array_size(ev);
	moor_buf c = {0};
	moor_buf_puts(&c, "");
	size_t i;
	json_t *e;
	*usage = NULL;
	json_array_foreach(ev, i, e)
	{
		const char *t = gt_str(e, "choices.0.delta.content");
		if (t)
			moor_buf_puts(&c, t);
		json_t *u = json_object_get(e, "usage");
		if (json_is_object(u))
			*usage = json_incref(u);
	}
	json_decref(ev);
	char *t = strdup(c.p);
	moor_buf_fini(&c);
	return t;
}

int main(int argc, char **argv)
{
	gt_stack(argc, argv, "gwprogress", 200, NULL, "--progress-ms", "50");
	int port = gt_.port;

	/* streamed: the comment lines */
	char *ta = long_text(1, 450);
	char *ba = gt_chat_body(
	    ta, 8,
	    "\"stream\":true,\"stream_options\":{\"include_usage\":true}");
	double t0 = moor_now();
	gt_resp r = gt_post(port, "/v1/chat/completions", ba);
	double secs = moor_now() - t0;
	REQUIRE(r.status == 200, "streamed: %d %s", r.status, r.body);
	int n_prog = 0, bad = 0, first_data = -1;
	long long last_done = -1, total = -1, cached = -1;
	int line = 0;
	for (const char *p = r.body; p && *p; line++) {
		const char *e = strchr(p, '\n');
		size_t len = e ? (size_t)(e - p) : strlen(p);
		if (len > 12 && !strncmp(p, ": progress ", 11)) {
			long long d, tt, c;
			unsigned tps;
			double eta;
			if (sscanf(p,
				   ": progress %lld/%lld tokens (cached %lld), "
				   "%u tokens/s, eta %lf s",
				   &d, &tt, &c, &tps, &eta) != 5) {
				bad++;
			} else {
				if (d <= last_done || d >= tt || tps == 0 ||
				    eta < 0 || (total >= 0 && tt != total))
					bad++;
				if (first_data >= 0)
					bad++; /* after a token */
				last_done = d;
				total = tt;
				cached = c;
			}
			n_prog++;
		} else if (len > 6 && !strncmp(p, "data: ", 6) &&
			   first_data < 0 && strstr(p, "\"content\"") &&
			   !strstr(p, "\"role\"")) {
			first_data = line;
		}
		p = e ? e + 1 : NULL;
	}
	int n_ev = 0;
	json_t *usage = NULL;
	char *ca = sse_content(r.body, &n_ev, &usage);
	long long prompt = gt_int(usage, "prompt_tokens");
	long long reread = gt_int(usage, "moor.reread");
	printf("streamed: %lld prompt tokens in %.2f s, %d progress lines "
	       "(last %lld of %lld, cached %lld), %d data events\n",
	       prompt, secs, n_prog, last_done, total, cached, n_ev);
	CHECK(prompt > 2500, "the prompt is short: %lld", prompt);
	CHECK(n_prog >= 2, "%d progress lines in a %.2f s request", n_prog,
	      secs);
	CHECK(!bad, "%d progress lines out of shape or order", bad);
	CHECK(total == reread, "progress total %lld, reread %lld", total,
	      reread);
	CHECK(n_ev >= 2, "the data events: %d", n_ev);
	gt_resp_fini(&r);

	/* whole: unchanged */
	char *tb = long_text(2, 450);
	char *bb = gt_chat_body(tb, 8, "");
	r = gt_post(port, "/v1/chat/completions", bb);
	REQUIRE(r.status == 200, "whole: %d %s", r.status, r.body);
	CHECK(!strstr(r.body, "progress"), "a whole reply carries progress");
	json_t *o = gt_json(&r);
	CHECK(o, "the whole reply is not one JSON object: %.200s", r.body);
	const char *cb = gt_str(o, "choices.0.message.content");
	long long pb = gt_int(o, "usage.prompt_tokens");
	gt_resp_fini(&r);
	CHECK(pb > 2500, "the second prompt is short: %lld", pb);
	CHECK(h_log_has("engined1", "tokens/s, ETA"),
	      "engined logged no progress line");
	/* the same prompt streamed: the same message */
	char *bs = gt_chat_body(tb, 8, "\"stream\":true");
	r = gt_post(port, "/v1/chat/completions", bs);
	REQUIRE(r.status == 200, "streamed again: %d", r.status);
	json_t *u2 = NULL;
	char *cs = sse_content(r.body, &n_ev, &u2);
	CHECK(cb && !strcmp(cb, cs), "whole \"%s\" streamed \"%s\"",
	      cb ? cb : "(null)", cs);
	json_decref(u2);
	gt_resp_fini(&r);
	json_decref(o);
	json_decref(usage);
	free(ta), free(ba), free(ca), free(tb), free(bb), free(bs), free(cs);
	return h_done("test_gw_progress");
}
