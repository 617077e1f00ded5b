/* test_rs_stop_linear: stop strings are matched in time linear in the
 * text (issue 13: huge stop strings matched on the event loop per token
 * stalled every client). Four stop strings of GW_MAX_STOP_BYTES-sized
 * 1,024 bytes, each one byte short of matching a text of 'a's in a
 * different place, against 64 KiB of 'a' pushed a byte at a time (a token
 * a step): the matcher's work (gw_rs_stop_work, bytes of stop strings it
 * compared) stays under 4 per text byte per stop string plus their
 * lengths, where a comparison of the held tail against every stop string
 * at every push did about k^2/4 per push. The work bound is the check,
 * not a time. Then the stop still cuts where it should: its completion
 * ends the text at its first byte, and a stop that overlaps itself
 * ("aab" in "aaab") is found. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "replystream.h"
#include "t.h"

static int cb(void *arg, const gw_rs_event *ev)
{
	(void)arg;
	(void)ev;
	return 0;
}

int main(void)
{
	enum { K = 1024, N = 65536 };
	static char st[4][K + 1];
	static const size_t odd[4] = {511, K - 1, 1000, 3};
	for (int i = 0; i < 4; i++) {
		memset(st[i], 'a', K);
		st[i][odd[i]] = (char)('b' + i);
		st[i][K] = 0;
	}
	const char *stops[4] = {st[0], st[1], st[2], st[3]};
	gw_rs_cfg cfg = {.family = GW_TMPL_UNKNOWN, .stop = stops, .n_stop = 4};
	gw_rs *r;
	REQUIRE(gw_rs_new(&cfg, &r) == 0, "gw_rs_new");
	for (int i = 0; i < N; i++)
		REQUIRE(gw_rs_push(r, "a", 1, cb, NULL) == 0, "push %d", i);
	uint64_t w = gw_rs_stop_work(r), bound = 4ull * N * 4 + 4 * K;
	printf("stop matcher: %llu bytes compared for %d text bytes and 4 "
	       "stops of %d bytes (bound %llu)\n",
	       (unsigned long long)w, N, K, (unsigned long long)bound);
	CHECK(w <= bound, "the stop matcher did %llu work, over %llu",
	      (unsigned long long)w, (unsigned long long)bound);
	/* stop 0 completes: the text ends where it began */
	int rc = gw_rs_push(r, st[0] + odd[0], K - odd[0], cb, NULL);
	CHECK(rc == GW_RS_STOPPED, "the stop did not match: %d", rc);
	size_t len;
	gw_rs_text(r, &len);
	CHECK(len == (size_t)N - odd[0], "cut at %zu, want %zu", len,
	      (size_t)N - odd[0]);
	gw_rs_free(r);

	const char *s2[] = {"aab"};
	gw_rs_cfg c2 = {.family = GW_TMPL_UNKNOWN, .stop = s2, .n_stop = 1};
	REQUIRE(gw_rs_new(&c2, &r) == 0, "gw_rs_new");
	CHECK(gw_rs_push(r, "xa", 2, cb, NULL) == 0 &&
		  gw_rs_push(r, "a", 1, cb, NULL) == 0 &&
		  gw_rs_push(r, "a", 1, cb, NULL) == 0 &&
		  gw_rs_push(r, "by", 2, cb, NULL) == GW_RS_STOPPED,
	      "aab in xaaaby");
	gw_rs_text(r, &len);
	CHECK(len == 2, "aab cut at %zu, want 2", len);
	gw_rs_free(r);
	return t_done("test_rs_stop_linear");
}
