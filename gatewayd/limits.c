/* limits.c: what a request body may cost, checked before the work it
 * causes (gw.h: gw_limits_*).
 *
 * The parse: jansson allocates a node per JSON value (an empty object is
 * ~200 bytes of heap for 3 bytes of text), so a 60 MB body of
 * `[{},{},...]` once grew gatewayd by 5 GB. Before jansson sees a body, a
 * scan without allocation counts its structural tokens ('{', '[', ',' and
 * ':' outside strings, about one per value); over GW_MAX_JSON_TOKENS the
 * body is refused. A parse then costs at most ~GW_MAX_JSON_TOKENS x 250
 * bytes (~64 MB) on top of the body, and at most --inflight parse at once:
 * that is the parse budget across concurrent requests.
 *
 * After the parse, before the template and the tokenizer: the counts of
 * messages, tools and stop strings, and each stop string's length (stop
 * strings are matched against the text on every token). */
#include <stdio.h>
#include <string.h>

#include "gw.h"

int gw_limits_scan(const char *body, size_t len, gw_fail *f)
{
	size_t tokens = 0;
	int in_str = 0;
	for (size_t i = 0; i < len; i++) {
		char c = body[i];
		if (in_str) {
			if (c == '\\')
				i++;
			else if (c == '"')
				in_str = 0;
			continue;
		}
		if (c == '"')
			in_str = 1;
		else if (c == '{' || c == '[' || c == ',' || c == ':')
			tokens++;
	}
	if (tokens > GW_MAX_JSON_TOKENS) {
		gw_failf(f, 400, "invalid_request_error", NULL,
			 "too_many_values",
			 "the body has %zu JSON values or more; at most %d are "
			 "read (a 128k-token conversation with tools has a "
			 "few thousand)",
			 tokens, GW_MAX_JSON_TOKENS);
		return -1;
	}
	return 0;
}

static int count(const json_t *b, const char *key, size_t max, gw_fail *f)
{
	const json_t *v = json_object_get(b, key);
	if (json_is_array(v) && json_array_size(v) > max) {
		gw_failf(f, 400, "invalid_request_error", key, NULL,
			 "'%s' has %zu entries; at most %zu", key,
			 json_array_size(v), max);
		return -1;
	}
	return 0;
}

int gw_limits_check(const json_t *b, gw_fail *f)
{
	if (count(b, "messages", GW_MAX_MESSAGES, f) ||
	    count(b, "tools", GW_MAX_TOOLS, f))
		return -1;
	const json_t *st = json_object_get(b, "stop");
	const json_t *one[1] = {st};
	size_t n = json_is_string(st) ? 1 : json_is_array(st) ? json_array_size(st) : 0;
	for (size_t i = 0; i < n && i <= GW_MAX_STOP; i++) {
		const json_t *e = json_is_string(st) ? one[0] : json_array_get(st, i);
		if (json_is_string(e) &&
		    json_string_length(e) > GW_MAX_STOP_BYTES) {
			gw_failf(f, 400, "invalid_request_error", "stop", NULL,
				 "a stop string of %zu bytes; at most %d",
				 json_string_length(e), GW_MAX_STOP_BYTES);
			return -1;
		}
	}
	return 0;
}

/* The stated bound, term by term (the defaults in MiB in brackets):
 *  - request bytes in h2o's input buffers (http.c): the requests past
 *    GW_BODY_SMALL hold grants of what their buffers will hold (up to two
 *    bodies: h2o's buffer doubles), half the budget but at least one
 *    grant, and the rest of the buffers are held to the other half; one
 *    buffer's copy as h2o doubles it [128 + 128 + 4];
 *  - what readers take between two checks of the budget [16];
 *  - the parses: at most --inflight bodies are read at once (libuv's pool
 *    has 8 threads), each a copy of the body and GW_PARSE_BYTES of nodes,
 *    prompt and ids [4 x 68];
 *  - the streams' bytes waiting behind a client that does not read, up to
 *    GW_MAX_PENDING each, for the requests running [4 x 4];
 *  - every connection at rest, every waiting request's job
 *    [4096 x 24 KiB, 4096 x ~1 KiB];
 *  - the logprobs (gw_limits_rss_lp): for each of the requests running,
 *    --window tokens (the most a generation makes: max_tokens past it is
 *    400, job.c, and engined stops at its window) at the most a token
 *    can cost with --max-logprobs alternatives, its entry and its JSON
 *    (gw_lp_token_bytes: the model's costliest tokens as escaped strings
 *    and bytes lists; 9,378 bytes a token for Qwen3's tokenizer at 20,
 *    five times the 1.7 KB a token of the tiny model's greedy replies
 *    takes). A whole reply holds its entries and one copy of their JSON,
 *    written into its body, which h2o takes without a copy (reply.c); a
 *    stream holds only the entries not yet sent (a chunk drops those it
 *    carried; all of them while the stream parser holds text back, a
 *    <tool_call> block) and their JSON in its two frame buffers (sse.c).
 *    A buffer's room past what it holds is not counted: its pages are
 *    touched only as they are written (a block past GW_MMAP_THRESHOLD
 *    is a mapping of its own, main.c) [4 x 32768 x 9,378 B: 1,172].
 *    --max-logprobs 0 refuses logprobs and removes the term.
 * A peek's and a prewarm's bodies are read by admitted jobs like a chat's
 * (job.c), so they are in the parses' term. A reply whose generation
 * ended gives its place to the next request while its client still
 * takes it (a stream's last frames, a whole reply's body): a client
 * that does not read holds its reply past that, until it has taken no
 * byte for --write-timeout-s (job.c: a stream's send, a whole reply's
 * socket send queue). */
uint64_t gw_limits_rss_lp(const gw_cfg *c)
{
	return (uint64_t)c->inflight * c->window * c->lp_token_bytes;
}

uint64_t gw_limits_rss_bound(const gw_cfg *c)
{
	uint64_t body = c->max_body, half = c->body_budget / 2;
	uint64_t grants = half > 2 * body ? half : 2 * body;
	uint64_t p = c->inflight < 8 ? c->inflight : 8;
	return grants + half + body + GW_READ_SLACK +
	       p * (body + GW_PARSE_BYTES) +
	       (uint64_t)c->inflight * GW_MAX_PENDING +
	       (uint64_t)c->max_conns * GW_CONN_BYTES +
	       (uint64_t)c->queue_max * sizeof(gw_job) + gw_limits_rss_lp(c);
}
