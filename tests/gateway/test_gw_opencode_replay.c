/* test_gw_opencode_replay: the captured opencode 1.18.33 session
 * (../shared/data/clients/opencode-1.18.33, beside the source tree;
 * skipped when absent) replayed against the stack on the tiny model, each
 * request as captured (its body, x-session-id, x-session-affinity and
 * User-Agent; streamed with include_usage) but max_tokens 16: the
 * captured 32000 is over the test's window of 8192, and the tiny model's
 * answers are noise anyway.
 *
 *   req01  the title guest (no tools): cold on an empty cache;
 *   req02  turn 1 (system prompt, 10 tools, the user message): it shares
 *          only the template's head with the title request;
 *   req03, req04  the conversation grown by the captured assistant turn
 *          (reasoning, content, a tool call) and its tool result;
 *   req05  `opencode run --continue`: a second user message;
 *   req06  the turn after it.
 *
 * The answers in the capture are the stand-in server's, not this model's,
 * so a follow-up parts from the rows where the model's answer began (the
 * end alignment has nothing to align: the bytes differ) and resumes at
 * the last anchor at or below that point; under the qwen3 template req05
 * also drops every earlier turn's reasoning and parts from req04 in its
 * first assistant message (tests/template/opencode_pins.h: 7,220 tokens
 * shared). The cached tokens of every request are pinned below (with
 * --grid 64): a change in them is a change in what an opencode turn
 * reuses. OPENCODE_PRINT_PINS=1 prints them anew. */
#include <stdlib.h>

#include "t.h"

#include "buf.h"
#include "gwtest.h"
#include "harness.h"

struct pin {
	const char *req;
	long long prompt, cached;
	const char *source;
};

/* Measured once on this stack (--grid 64, qwen3 template), checked since.
 * Each follow-up's cached count is the last 64-line at or below the
 * tokens it shares with the previous request's prompt, as
 * tests/template/opencode_pins.h has them for qwen3 (req03 7,220 -> 7,168;
 * req04 7,412 -> 7,360; req05 7,220 -> 7,168; req06 7,473 -> 7,424): each
 * shares the previous prompt whole and parts where the model's answer
 * began (req05: where qwen3 took the reasoning out). prompt is the
 * client's count; req02's 7,220 is the prefix req03 and req05 share. */
static const struct pin PINS[] = {
    {"req01", 538, 0, "none"},	     {"req02", 7220, 0, "none"},
    {"req03", 7412, 7168, "anchor"}, {"req04", 7468, 7360, "anchor"},
    {"req05", 7473, 7168, "anchor"}, {"req06", 7529, 7424, "anchor"},
};

static char *slurp(const char *path)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		return NULL;
	moor_buf b = {0};
	char tmp[65536];
	size_t n;
	while ((n = fread(tmp, 1, sizeof tmp, f)) > 0)
		moor_buf_put(&b, tmp, n);
	fclose(f);
	size_t len;
	return moor_buf_take(&b, &len);
}

int main(int argc, char **argv)
{
	char dir[4096];
	snprintf(dir, sizeof dir, "%s/../shared/data/clients/opencode-1.18.33",
		 t_src());
	char p1[4200];
	snprintf(p1, sizeof p1, "%s/req01.json", dir);
	FILE *probe = fopen(p1, "r");
	if (!probe) {
		printf("no captured opencode session at %s: skipped\n", dir);
		return 77;
	}
	fclose(probe);
	static const char *const extra[] = {"--window", "8192", NULL};
	gt_stack(argc, argv, "gwocreplay", 300, extra, "--window", "8192");
	int print = getenv("OPENCODE_PRINT_PINS") != NULL;
	printf("%-6s %8s %8s %8s  %s\n", "req", "prompt", "cached", "reread",
	       "source");
	for (size_t i = 0; i < sizeof PINS / sizeof PINS[0]; i++) {
		char path[4300];
		snprintf(path, sizeof path, "%s/%s.json", dir, PINS[i].req);
		char *raw = slurp(path);
		REQUIRE(raw, "%s", path);
		json_t *b = json_loads(raw, 0, NULL);
		free(raw);
		REQUIRE(b, "%s: not JSON", path);
		json_object_set_new(b, "max_tokens", json_integer(16));
		char *body = json_dumps(b, JSON_COMPACT);
		json_decref(b);
		snprintf(path, sizeof path, "%s/%s.headers.json", dir,
			 PINS[i].req);
		raw = slurp(path);
		REQUIRE(raw, "%s", path);
		json_t *h = json_loads(raw, 0, NULL);
		free(raw);
		REQUIRE(h, "%s: not JSON", path);
		char hdr[1024];
		snprintf(hdr, sizeof hdr,
			 "x-session-id: %s\r\nx-session-affinity: %s\r\n"
			 "User-Agent: %s\r\n",
			 gt_str(h, "x-session-id"),
			 gt_str(h, "x-session-affinity"),
			 gt_str(h, "User-Agent"));
		json_decref(h);
		gt_resp r = gt_request(gt_.port, "POST", "/v1/chat/completions",
				       body, hdr, 120);
		free(body);
		REQUIRE(r.status == 200, "%s: %d %s", PINS[i].req, r.status,
			r.body);
		json_t *ev = json_array();
		int done_last = 0;
		CHECK(gt_sse(r.body, ev, &done_last) == 0 && done_last,
		      "%s: not a whole SSE stream", PINS[i].req);
		json_t *u = NULL;
		size_t k;
		json_t *e;
		json_array_foreach(ev, k, e)
		{
			json_t *x = json_object_get(e, "usage");
			if (json_is_object(x))
				u = x;
		}
		REQUIRE(u, "%s: no usage chunk", PINS[i].req);
		long long prompt = gt_int(u, "prompt_tokens");
		long long cached =
		    gt_int(u, "prompt_tokens_details.cached_tokens");
		long long reread = gt_int(u, "moor.reread");
		const char *src = gt_str(u, "moor.source");
		printf("%-6s %8lld %8lld %8lld  %s\n", PINS[i].req, prompt,
		       cached, reread, src ? src : "-");
		if (print)
			fprintf(stderr, "    {\"%s\", %lld, %lld, \"%s\"},\n",
				PINS[i].req, prompt, cached, src ? src : "-");
		else
			CHECK(prompt == PINS[i].prompt &&
				  cached == PINS[i].cached && src &&
				  !strcmp(src, PINS[i].source),
			      "%s: prompt %lld cached %lld from %s; pinned "
			      "%lld, %lld from %s",
			      PINS[i].req, prompt, cached, src ? src : "-",
			      PINS[i].prompt, PINS[i].cached, PINS[i].source);
		json_decref(ev);
		gt_resp_fini(&r);
	}
	return h_done("test_gw_opencode_replay");
}
