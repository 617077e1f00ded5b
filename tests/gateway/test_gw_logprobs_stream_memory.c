/* test_gw_logprobs_stream_memory: a streamed reply's memory is bounded by
 * what it has pending, not by how long it runs. cached + engined on
 * models/tiny + gatewayd, greedy.
 *
 * A chat stream of STREAM_TOKENS tokens (ignore_eos) with top_logprobs 20
 * sends ~2 KB a token (5 MB in all). gatewayd's peak RSS over its RSS
 * before (VmHWM reset, after a warm-up stream and a trim) grows by less
 * than a sixteenth of the bytes streamed (~70 KiB here; the entries alone,
 * kept, would be 460 KiB): it keeps no entry a chunk carried
 * (gw_lp_drop) and no frame h2o sent (sse.c swaps two buffers; a copy of
 * each send on the request's pool, as before, grew gatewayd by ~1.07
 * bytes a byte streamed here). Every entry still came: the chunks carry
 * STREAM_TOKENS entries, 20 alternatives each.
 *
 * The measure can see memory: the same reply whole (its body holds every
 * entry's JSON until it is sent) grows gatewayd by at least half its
 * size, and by no more than its tokens at the bytes a token the log's
 * RSS bound counts (limits.c: its logprobs term, a request's share).
 *
 * Under ASan the stream is 200 tokens (2,500 ran 130 s, near the
 * timeout; 400 took a minute of CI's 30) and its growth is printed, not
 * checked: ASan's allocator keeps
 * freed blocks by size class and grew gatewayd 1.9 MiB for the 2,500
 * tokens with a quarantine of 1 MiB, so the short stream would not tell
 * a copy of every send from none. The whole reply's checks stand, with
 * the quarantine (1 MiB) more and times 9/8 (the shadow).
 *
 *   test_gw_logprobs_stream_memory CACHED ENGINED GATEWAYD MODEL_DIR
 */
#include "t.h"

#include "gwtest.h"
#include "harness.h"

#if defined(__SANITIZE_ADDRESS__)
#define STREAM_TOKENS 200
#else
#define STREAM_TOKENS 2500
#endif

/* body on the stack's gatewayd; its raw answer's body in *r; gatewayd's
 * VmHWM growth over its VmRSS before, KiB */
static long measure(const char *body, gt_resp *r)
{
	/* the loop trims what the heaps hold free once a second (main.c) */
	struct timespec ts = {1, 200 * 1000 * 1000};
	nanosleep(&ts, NULL);
	REQUIRE(gt_reset_hwm(gt_.gw) == 0, "clear_refs");
	long rss0 = gt_status_kb(gt_.gw, "VmRSS:");
	*r = gt_request(gt_.port, "POST", "/v1/chat/completions", body, NULL,
			200);
	long hwm = gt_status_kb(gt_.gw, "VmHWM:");
	REQUIRE(rss0 > 0 && hwm > 0, "no VmRSS or VmHWM");
	return hwm - rss0;
}

int main(int argc, char **argv)
{
#if defined(__SANITIZE_ADDRESS__)
	/* the whole reply's allowance has the quarantine in it */
	const char *ao = getenv("ASAN_OPTIONS");
	char av[1024];
	snprintf(av, sizeof av, "%s%squarantine_size_mb=1", ao ? ao : "",
		 ao && *ao ? ":" : "");
	setenv("ASAN_OPTIONS", av, 1);
#endif
	gt_stack(argc, argv, "gwlpmem", 400, NULL, NULL, NULL);
	static const char lp[] = "\"logprobs\":true,\"top_logprobs\":20,"
				 "\"ignore_eos\":true";
	char extra[160];

	/* warm: what a first stream with logprobs loads is in the base */
	snprintf(extra, sizeof extra, "%s,\"stream\":true", lp);
	char *b = gt_chat_body("Tell me a story.", 64, extra);
	gt_resp r = gt_post(gt_.port, "/v1/chat/completions", b);
	REQUIRE(r.status == 200, "warm-up: %d %s", r.status, r.body);
	gt_resp_fini(&r);
	free(b);

	/* the long stream */
	b = gt_chat_body("Tell me a story.", STREAM_TOKENS, extra);
	double t0 = moor_now();
	long grew = measure(b, &r);
	free(b);
	REQUIRE(r.status == 200, "the stream: %d", r.status);
	json_t *ev = json_array();
	int done_last = 0;
	CHECK(gt_sse(r.body, ev, &done_last) == 0 && done_last, "SSE framing");
	size_t n = 0, alts = 0;
	for (size_t i = 0; i < json_array_size(ev); i++) {
		const json_t *c = json_object_get(
		    json_object_get(
			json_array_get(
			    json_object_get(json_array_get(ev, i), "choices"),
			    0),
			"logprobs"),
		    "content");
		for (size_t k = 0; k < json_array_size(c); k++, n++)
			alts += json_array_size(json_object_get(
			    json_array_get(c, k), "top_logprobs"));
	}
	json_decref(ev);
	long allow = (long)(r.body_len >> 10) / 16;
	printf("a stream of %zu entries (%zu alternatives): %zu bytes in "
	       "%.1f s; gatewayd grew %ld KiB (allowed %ld)\n",
	       n, alts, r.body_len, moor_now() - t0, grew, allow);
	CHECK(n == STREAM_TOKENS && alts == 20 * n,
	      "%zu entries, %zu alternatives", n, alts);
#if defined(__SANITIZE_ADDRESS__)
	printf("ASan: the stream's growth is not checked\n");
#else
	CHECK(r.body_len > (4u << 20), "only %zu bytes streamed", r.body_len);
	CHECK(grew < allow,
	      "a stream of %zu bytes grew gatewayd by %ld KiB: past %ld",
	      r.body_len, grew, allow);
#endif
	gt_resp_fini(&r);

	/* the same whole: the measure sees a reply held */
	b = gt_chat_body("Tell me a story.", STREAM_TOKENS, lp);
	grew = measure(b, &r);
	free(b);
	long long tb = gt_stated_lp_token_bytes("gatewayd1");
	long share = (long)(STREAM_TOKENS * tb >> 10);
#if defined(__SANITIZE_ADDRESS__)
	share = (share + 1024) * 9 / 8;
#endif
	printf("the same whole: %zu bytes; gatewayd grew %ld KiB (the "
	       "bound's share: %d tokens x %lld bytes, %ld KiB)\n",
	       r.body_len, grew, STREAM_TOKENS, tb, share);
	CHECK(r.status == 200 && grew > (long)(r.body_len >> 10) / 2,
	      "a whole reply of %zu bytes grew gatewayd by %ld KiB only",
	      r.body_len, grew);
	CHECK(tb > 0 && grew < share,
	      "a whole reply grew gatewayd by %ld KiB, past the bound's %ld",
	      grew, share);
	gt_resp_fini(&r);
	return h_done("test_gw_logprobs_stream_memory");
}
