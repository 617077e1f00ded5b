/* test_gw_disk_head_user: over HTTP through the whole stack, a session's
 * first long chat writes its disk head anchors at or below where its last
 * user message starts (gatewayd's user_at, GENERATE -> PLAN ->
 * cache_req.user_at), so a second session with the same system prompt and
 * tools but a user message of its own resumes from the disk (issue 11).
 *
 * 1. Session A (x-session-id head-A): a long system prompt, a tool, a long
 *    user message; the user message starts at token U = usage.moor.parts
 *    system + tools. The disk tier (--disk-cache-min-tokens 64, grid 64)
 *    writes 4 head anchors, every one at or below U, the top one at the
 *    last grid line at or below U. With the old rule (user_at unknown) they
 *    sit at the prompt's last 4 lines, all above U.
 * 2. cached is killed -9 and started again on the same directory (the RAM
 *    tiers are gone).
 * 3. Session B (head-B): the same system prompt and tool, another user
 *    message: resumes from the disk tier (usage.moor.source "disk") at that
 *    top line, at or below U. With the old rule it prefilled cold. Its
 *    /v1/cache/peek before the turn says the same: tier nvme_disk, that
 *    line's cached tokens (the peek asks the NVMe tiers as the plan does),
 *    and a restore_ms that is the disk read (restore_bytes at the tier's
 *    read rate, /v1/cache/stats' disk.read_bps), inside reread_eta_ms,
 *    once an engine is attached: the idle engined says HELLO to the new
 *    cached by itself, no request between; until it has, the peek is 503
 *    with a Retry-After, code engine_not_attached (where it was a 400 on
 *    the messages).
 * 4. /health reports the day's drive writes and the guard's level; POST
 *    /v1/cache/clear?tier=spill leaves the disk tier and RAM, ?tier=disk
 *    empties the disk tier and leaves RAM. */
#include <math.h>
#include <stdlib.h>

#include "t.h"

#include "gwtest.h"
#include "harness.h"

#define GRID 64

static char ddisk[] = "/tmp/moor-gwhead-disk-XXXXXX";
static const char *const cached_args[] = {GT_CACHED_DISK_TIER(ddisk), NULL};

/* sentences of "Point i of topic", after a lead line; malloc'd */
static char *text_of(const char *lead, const char *topic, int sentences)
{
	char *t = malloc((size_t)sentences * 64 + 256);
	REQUIRE(t, "oom");
	int n = sprintf(t, "%s", lead);
	for (int i = 0; i < sentences; i++)
		n += sprintf(t + n, " Point %d of %s comes next.", i, topic);
	return t;
}

/* A POST to path of a chat body (the system prompt, a tool and user
 * message `user`) in session `session`: the answer. */
static gt_resp post_raw(const char *path, const char *sys, const char *user,
			const char *session)
{
	json_t *b = json_pack(
	    "{s:[{s:s,s:s},{s:s,s:s}],s:[{s:s,s:{s:s,s:s,s:{s:s,s:{s:{s:s}}}}}]"
	    ","
	    "s:i,s:i}",
	    "messages", "role", "system", "content", sys, "role", "user",
	    "content", user, "tools", "type", "function", "function", "name",
	    "read_file", "description", "read a file of the folder",
	    "parameters", "type", "object", "properties", "path", "type",
	    "string", "max_tokens", 4, "temperature", 0);
	REQUIRE(b, "the test's own body");
	char *t = json_dumps(b, JSON_COMPACT);
	json_decref(b);
	char hdr[128];
	snprintf(hdr, sizeof hdr, "x-session-id: %s\r\n", session);
	gt_resp r = gt_request(gt_.port, "POST", path, t, hdr, 120);
	free(t);
	return r;
}

/* The same, answered 200: its JSON. */
static json_t *post(const char *path, const char *sys, const char *user,
		    const char *session)
{
	gt_resp r = post_raw(path, sys, user, session);
	REQUIRE(r.status == 200, "%s (session %s): %d %s", path, session,
		r.status, r.body);
	json_t *o = gt_json(&r);
	gt_resp_fini(&r);
	REQUIRE(o, "the reply is not JSON");
	return o;
}

static json_t *chat(const char *sys, const char *user, const char *session)
{
	return post("/v1/chat/completions", sys, user, session);
}

/* A number of /v1/cache/stats (a.b), -1 when absent. */
static long long stat_int(const char *path)
{
	gt_resp r = gt_get(gt_.port, "/v1/cache/stats");
	json_t *o = gt_json(&r);
	gt_resp_fini(&r);
	long long v = gt_int(o, path);
	json_decref(o);
	return v;
}

/* Waits until the disk tier has written n anchors and has nothing
 * pending; its anchor lines, ascending, in L (at most 16). */
static int disk_lines(long long n_want, uint64_t *L, double timeout_s)
{
	double end = moor_now() + timeout_s;
	int n = 0;
	while (moor_now() < end) {
		gt_resp r = gt_get(gt_.port, "/v1/cache/stats");
		json_t *o = gt_json(&r);
		gt_resp_fini(&r);
		long long a = gt_int(o, "disk.anchors"),
			  p = gt_int(o, "disk.pending");
		json_t *ls =
		    json_object_get(json_object_get(o, "disk"), "lines");
		n = 0;
		for (size_t i = 0; i < json_array_size(ls) && n < 16; i++)
			L[n++] =
			    (uint64_t)json_integer_value(json_array_get(ls, i));
		json_decref(o);
		if (a >= n_want && p == 0)
			break;
		usleep(100 * 1000);
	}
	for (int i = 1; i < n; i++)
		for (int j = i; j > 0 && L[j - 1] > L[j]; j--) {
			uint64_t x = L[j];
			L[j] = L[j - 1];
			L[j - 1] = x;
		}
	return n;
}

int main(int argc, char **argv)
{
	REQUIRE(mkdtemp(ddisk), "mkdtemp");
	gt_.cached_args = cached_args;
	gt_stack(argc, argv, "gwhead", 280, NULL, NULL, NULL);

	char *sys = text_of("You are a coding agent in the folder /src/moor.",
			    "the house rules", 50);
	char *ua =
	    text_of("Read the parser and tell me about it.", "the parser", 60);
	char *ub = text_of("Now the tokenizer, please, in detail.",
			   "the tokenizer", 40);

	json_t *o = chat(sys, ua, "head-A");
	long long u = gt_int(o, "usage.moor.parts.system") +
		      gt_int(o, "usage.moor.parts.tools");
	long long na = gt_int(o, "usage.prompt_tokens");
	json_decref(o);
	printf("A: %lld prompt tokens, its user message at %lld\n", na, u);
	REQUIRE(u > 4 * GRID && na > u + 4 * GRID,
		"the prompt's shape: the user message at %lld of %lld", u, na);
	uint64_t top = (uint64_t)u / GRID * GRID, L[16];
	int n = disk_lines(4, L, 60);
	printf("A's disk anchors:");
	for (int i = 0; i < n; i++)
		printf(" %llu", (unsigned long long)L[i]);
	printf(" (the last line at or below the user message: %llu)\n",
	       (unsigned long long)top);
	CHECK(n == 4 && L[n - 1] == top && L[0] == top - 3 * GRID,
	      "A's head anchors are not the 4 lines at or below its user "
	      "message (%lld): %d lines, %llu .. %llu",
	      u, n, n ? (unsigned long long)L[0] : 0ull,
	      n ? (unsigned long long)L[n - 1] : 0ull);

	h_kill9(gt_.cd);
	gt_.cd = gt_cached(cached_args, "cached2");

	/* until the idle engined has said HELLO to the new cached (it does
	 * at once, without a generation), B's peek is 503 with a Retry-After
	 * (it was a 400 blaming the messages); then 200, with no request
	 * between */
	int n503 = 0, ok200 = 0;
	for (double t0 = moor_now(); moor_now() - t0 < 10.0;) {
		gt_resp pr = post_raw("/v1/cache/peek", sys, ub, "head-B");
		char ra[16] = "";
		gt_header(&pr, "retry-after", ra, sizeof ra);
		if (pr.status == 200)
			ok200 = 1;
		else
			n503++;
		CHECK(pr.status == 200 ||
			  (pr.status == 503 && atoi(ra) >= 1 && pr.body &&
			   strstr(pr.body, "engine_not_attached")),
		      "B's peek after the restart: %d %s", pr.status,
		      pr.body ? pr.body : "");
		gt_resp_fini(&pr);
		if (ok200 || t_failed)
			break;
		usleep(100 * 1000);
	}
	printf("B's peek after the restart: 200 after %d answers of 503 "
	       "(engine_not_attached)\n",
	       n503);
	CHECK(ok200, "B's peek never found the engine attached in 10 s (no "
		     "request was sent: engined HELLOs a new cached when idle)");
	/* the peek sees the disk tier as B's turn will find it */
	o = post("/v1/cache/peek", sys, ub, "head-B");
	const char *pt = gt_str(o, "tier");
	long long pc = gt_int(o, "cached_tokens");
	printf("B's peek: tier %s, %lld cached tokens\n", pt ? pt : "?", pc);
	CHECK(pt && !strcmp(pt, "nvme_disk") && pc == (long long)top,
	      "B's peek: tier %s, %lld cached (want nvme_disk, %llu)",
	      pt ? pt : "?", pc, (unsigned long long)top);
	/* its eta holds the drive's read: restore_bytes at the disk tier's
	 * read rate (cached's, in the stats), not at a RAM copy's */
	{
		gt_resp sr = gt_get(gt_.port, "/v1/cache/stats");
		json_t *so = gt_json(&sr);
		gt_resp_fini(&sr);
		double bps = json_number_value(json_object_get(
			   json_object_get(so, "disk"), "read_bps")),
		       rb = json_number_value(
			   json_object_get(o, "restore_bytes")),
		       rms =
			   json_number_value(json_object_get(o, "restore_ms")),
		       eta = json_number_value(
			   json_object_get(o, "reread_eta_ms")),
		       tps = json_number_value(
			   json_object_get(o, "prefill_tokens_per_s")),
		       rr = json_number_value(
			   json_object_get(o, "reread_tokens"));
		json_decref(so);
		double want = bps > 0 ? rb / bps * 1e3 : -1,
		       want_eta = tps > 0 ? rr / tps * 1e3 + want : -1;
		printf("B's peek: %.0f bytes, restore_ms %.3f (the disk's "
		       "%.2f GB/s: %.3f), reread_eta_ms %.3f (want %.3f)\n",
		       rb, rms, bps / 1e9, want, eta, want_eta);
		CHECK(rb > 0 && want > 0 &&
			  fabs(rms - want) <= 0.01 + want * 1e-3,
		      "B's peek: restore_ms %.3f is not restore_bytes %.0f at "
		      "the disk tier's read rate %.0f B/s (%.3f)",
		      rms, rb, bps, want);
		CHECK(want_eta > 0 &&
			  fabs(eta - want_eta) <= 0.01 + want_eta * 1e-3,
		      "B's peek: reread_eta_ms %.3f is not the re-read (%.0f "
		      "tokens at %.1f/s) plus the disk read (%.3f ms)",
		      eta, rr, tps, want);
	}
	json_decref(o);

	o = chat(sys, ub, "head-B");
	long long c = gt_int(o, "usage.prompt_tokens_details.cached_tokens");
	const char *src = gt_str(o, "usage.moor.source");
	long long ub_at = gt_int(o, "usage.moor.parts.system") +
			  gt_int(o, "usage.moor.parts.tools");
	printf("B: %lld of %lld prompt tokens cached (%s), its user message "
	       "at %lld\n",
	       c, gt_int(o, "usage.prompt_tokens"), src ? src : "?", ub_at);
	CHECK(ub_at == u, "B's user message at %lld, A's at %lld", ub_at, u);
	CHECK(src && !strcmp(src, "disk") && c == (long long)top && c <= u,
	      "B resumed %lld tokens from %s (want the disk tier at %llu, at "
	      "or below the user message at %lld)",
	      c, src ? src : "?", (unsigned long long)top, u);
	json_decref(o);

	/* /health reports the write guard's day: what the tier wrote, the
	 * default budget (200 GB) and the level */
	gt_resp hr = gt_get(gt_.port, "/health");
	o = gt_json(&hr);
	const char *lv = gt_str(o, "cache.disk_writes.level");
	CHECK(hr.status == 200 && gt_int(o, "cache.disk_writes.tier") > 0 &&
		  gt_int(o, "cache.disk_writes.budget") == 200000000000ll &&
		  lv && !strcmp(lv, "ok"),
	      "/health's disk_writes: %s", hr.body ? hr.body : "");
	json_decref(o);
	gt_resp_fini(&hr);
	/* POST /v1/cache/clear honours ?tier=: the spill leaves the disk and
	 * RAM as they are, the disk leaves RAM */
	long long a0 = stat_int("disk.anchors"),
		  r0 = stat_int("resident.bytes");
	CHECK(a0 > 0 && r0 > 0,
	      "before the clears: %lld anchors, %lld resident bytes", a0, r0);
	hr = gt_request(gt_.port, "POST", "/v1/cache/clear?tier=spill", NULL,
			NULL, 10);
	CHECK(hr.status == 200 && stat_int("disk.anchors") == a0 &&
		  stat_int("resident.bytes") == r0,
	      "?tier=spill: %d, %lld anchors, %lld resident bytes", hr.status,
	      stat_int("disk.anchors"), stat_int("resident.bytes"));
	gt_resp_fini(&hr);
	hr = gt_request(gt_.port, "POST", "/v1/cache/clear?tier=disk", NULL,
			NULL, 10);
	CHECK(hr.status == 200 && stat_int("disk.anchors") == 0 &&
		  stat_int("disk.chunks") == 0 &&
		  stat_int("resident.bytes") == r0,
	      "?tier=disk: %d, %lld anchors, %lld chunks, %lld resident "
	      "bytes",
	      hr.status, stat_int("disk.anchors"), stat_int("disk.chunks"),
	      stat_int("resident.bytes"));
	gt_resp_fini(&hr);
	free(sys);
	free(ua);
	free(ub);
	int rc = h_done("test_gw_disk_head_user");
	char cmd[160];
	snprintf(cmd, sizeof cmd, "rm -rf %s", ddisk);
	if (system(cmd))
		rc = rc ? rc : 1;
	return rc;
}
