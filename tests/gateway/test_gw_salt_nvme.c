/* test_gw_salt_nvme: a cache_salt keeps tenants apart on the NVMe tiers
 * too, across a restart of cached (cached/salt.h: the ids are salted as
 * they enter cached, the session key is qualified by the salt), over
 * HTTP through the whole stack.
 *
 * 1. The disk tier (--disk-dir, --disk-cache-min-tokens 64; no spill): a
 *    long prompt under salt A (its session's first request: the disk tier
 *    writes its head anchors); cached is killed -9 (the RAM tiers are
 *    gone) and started again on the same directory. The same prompt under
 *    salt B resumes nothing, and neither does it unsalted; under salt A it
 *    resumes from the disk tier (usage.moor.source "disk", cached_tokens > 0).
 *    After another kill -9 (and a one-token completion that attaches the
 *    engine), POST /v1/cache/prewarm of the prompt under salt C says
 *    not_cached, under salt A it brings the prompt back from the disk tier
 *    (restore.tier nvme_disk).
 * 2. The session spill (--disk-cache off, --session-spill-min-tokens 64):
 *    a two-turn conversation under salt A, session "conv"; SIGTERM of
 *    cached (its drain writes the resident conversation to the spill);
 *    cached started again reads the spill back. The conversation's next
 *    turn under salt B with the same x-session-id resumes nothing, and
 *    neither does it unsalted; under salt A it resumes from the spill
 *    (usage.moor.source "spill", cached_tokens > 0). */
#include <stdlib.h>

#include "t.h"

#include "gwtest.h"
#include "harness.h"

static char ddisk[] = "/tmp/moor-gwsalt-disk-XXXXXX",
	    dspill[] = "/tmp/moor-gwsalt-spill-XXXXXX";
static const char *const cached_disk_args[] = {GT_CACHED_DISK_TIER(ddisk),
					       NULL};
static const char *const cached_spill_args[] = {H_CACHED_BUDGETS,
						"--disk-dir",
						dspill,
						"--disk-cache",
						"off",
						"--session-spill-min-tokens",
						"64",
						/* the spill's floor (the
						 * disk tier's): whatever
						 * the drive has free */
						"--disk-cache-min-free-gb",
						"0",
						NULL};

/* A chat of msgs (a JSON array of messages) under salt (NULL: none):
 * its cached_tokens, its source in *src (static). */
static long long chat(json_t *msgs, const char *salt, const char *session,
		      const char **src, json_t **reply)
{
	json_t *b = json_pack("{s:O,s:i,s:i}", "messages", msgs, "max_tokens",
			      4, "temperature", 0);
	if (salt)
		json_object_set_new(b, "cache_salt", json_string(salt));
	char *t = json_dumps(b, JSON_COMPACT);
	json_decref(b);
	char hdr[128];
	snprintf(hdr, sizeof hdr, "x-session-id: %s\r\n", session);
	gt_resp r =
	    gt_request(gt_.port, "POST", "/v1/chat/completions", t, hdr, 120);
	free(t);
	REQUIRE(r.status == 200, "a chat (salt %s): %d %s",
		salt ? salt : "none", r.status, r.body);
	json_t *o = gt_json(&r);
	gt_resp_fini(&r);
	static char s[64];
	snprintf(s, sizeof s, "%s",
		 gt_str(o, "usage.moor.source") ? gt_str(o, "usage.moor.source")
						: "?");
	*src = s;
	long long c = gt_int(o, "usage.prompt_tokens_details.cached_tokens");
	printf("  salt %-8s session %-8s: %lld of %lld prompt tokens cached "
	       "(%s)\n",
	       salt ? salt : "none", session, c,
	       gt_int(o, "usage.prompt_tokens"), s);
	if (reply)
		*reply = o;
	else
		json_decref(o);
	return c;
}

static json_t *long_prompt(const char *topic, int sentences)
{
	char *text = malloc((size_t)sentences * 64 + 256);
	REQUIRE(text, "oom");
	int n = sprintf(text, "Tell me about %s, at length.", topic);
	for (int i = 0; i < sentences; i++)
		n += sprintf(text + n, " Point %d of %s comes next.", i, topic);
	json_t *m = json_pack("[{s:s,s:s}]", "role", "user", "content", text);
	free(text);
	return m;
}

/* Waits until the disk tier has written an anchor and has nothing
 * pending. */
static int disk_written(double timeout_s)
{
	double end = moor_now() + timeout_s;
	while (moor_now() < end) {
		gt_resp r = gt_get(gt_.port, "/v1/cache/stats");
		json_t *o = gt_json(&r);
		gt_resp_fini(&r);
		long long a = gt_int(o, "disk.anchors"),
			  p = gt_int(o, "disk.pending");
		json_decref(o);
		if (a > 0 && p == 0)
			return 1;
		usleep(100 * 1000);
	}
	return 0;
}

/* POST /v1/cache/prewarm of msgs under salt (NULL: none): its JSON. */
static json_t *prewarm(json_t *msgs, const char *salt, const char *session)
{
	json_t *b = json_pack("{s:O,s:i,s:i}", "messages", msgs, "max_tokens",
			      4, "temperature", 0);
	if (salt)
		json_object_set_new(b, "cache_salt", json_string(salt));
	char *t = json_dumps(b, JSON_COMPACT);
	json_decref(b);
	char hdr[128];
	snprintf(hdr, sizeof hdr, "x-session-id: %s\r\n", session);
	gt_resp r =
	    gt_request(gt_.port, "POST", "/v1/cache/prewarm", t, hdr, 120);
	free(t);
	REQUIRE(r.status == 200, "a prewarm (salt %s): %d %s",
		salt ? salt : "none", r.status, r.body);
	printf("  prewarm salt %-8s: %s\n", salt ? salt : "none", r.body);
	json_t *o = gt_json(&r);
	gt_resp_fini(&r);
	REQUIRE(o, "the prewarm's answer is not JSON");
	return o;
}

static void disk_tier(void)
{
	printf("the disk tier, after kill -9 of cached:\n");
	json_t *p = long_prompt("the lighthouse", 80);
	const char *src;
	long long c = chat(p, "tenant-A", "disk-A", &src, NULL);
	CHECK(c == 0, "salt A's first request resumed %lld", c);
	REQUIRE(disk_written(60), "the disk tier wrote no anchor");
	h_kill9(gt_.cd);
	gt_.cd = gt_cached(cached_disk_args, "cached2");
	c = chat(p, "tenant-B", "disk-B", &src, NULL);
	CHECK(c == 0, "salt B resumed %lld tokens of salt A's (%s)", c, src);
	c = chat(p, NULL, "disk-N", &src, NULL);
	CHECK(c == 0, "no salt resumed %lld tokens of salt A's (%s)", c, src);
	c = chat(p, "tenant-A", "disk-A2", &src, NULL);
	CHECK(c >= 64 && !strcmp(src, "disk"),
	      "salt A resumed %lld tokens from %s (want the disk tier)", c,
	      src);

	/* a prewarm from the disk tier after another kill -9, salted like
	 * the rest: another salt finds nothing, salt A's is brought back */
	printf("a prewarm from the disk tier, after another kill -9:\n");
	h_kill9(gt_.cd);
	gt_.cd = gt_cached(cached_disk_args, "cached2b");
	/* engined attaches to the new cached at its next generation */
	gt_resp cr = gt_post(gt_.port, "/v1/completions",
			     "{\"prompt\":[1000],\"max_tokens\":1,"
			     "\"temperature\":0}");
	REQUIRE(cr.status == 200, "a completion: %d %s", cr.status, cr.body);
	gt_resp_fini(&cr);
	json_t *w = prewarm(p, "tenant-C", "disk-C");
	CHECK(
	    json_is_false(json_object_get(w, "prewarmed")) &&
		!strcmp(gt_str(w, "why") ? gt_str(w, "why") : "", "not_cached"),
	    "salt C's prewarm of salt A's prompt found something");
	json_decref(w);
	w = prewarm(p, "tenant-A", "disk-A3");
	const char *wt = gt_str(w, "restore.tier");
	CHECK(json_is_true(json_object_get(w, "prewarmed")) && wt &&
		  !strcmp(wt, "nvme_disk") && gt_int(w, "restore.cached") >= 64,
	      "salt A's prewarm: not brought back from the disk tier");
	json_decref(w);
	json_decref(p);
}

static void append_reply(json_t *msgs, json_t *reply, const char *next)
{
	json_t *m = json_deep_copy(json_object_get(
	    json_array_get(json_object_get(reply, "choices"), 0), "message"));
	if (!json_is_string(json_object_get(m, "content")))
		json_object_set_new(m, "content", json_string(""));
	json_array_append_new(msgs, m);
	json_array_append_new(
	    msgs, json_pack("{s:s,s:s}", "role", "user", "content", next));
}

static void spill(void)
{
	printf("the session spill, after SIGTERM of cached:\n");
	/* a cached of the spill alone, its drain written at its exit */
	kill(gt_.cd, SIGTERM);
	REQUIRE(h_wait_exit(gt_.cd, 60) == 0, "cached did not exit 0");
	gt_.cd = gt_cached(cached_spill_args, "cached3");
	json_t *a = long_prompt("the northern sea", 80);
	const char *src;
	json_t *r;
	chat(a, "tenant-A", "conv", &src, &r);
	append_reply(a, r, "Go on, please.");
	json_decref(r);
	chat(a, "tenant-A", "conv", &src, &r);
	append_reply(a, r, "And then?");
	json_decref(r);
	kill(gt_.cd, SIGTERM);
	REQUIRE(h_wait_exit(gt_.cd, 60) == 0, "cached did not exit 0");
	CHECK(h_log_has("cached3", "drain: done"), "no drain in cached's log");
	gt_.cd = gt_cached(cached_spill_args, "cached4");
	long long c = chat(a, "tenant-B", "conv", &src, NULL);
	CHECK(c == 0, "salt B resumed %lld tokens of salt A's (%s)", c, src);
	c = chat(a, NULL, "conv", &src, NULL);
	CHECK(c == 0, "no salt resumed %lld tokens of salt A's (%s)", c, src);
	c = chat(a, "tenant-A", "conv", &src, NULL);
	CHECK(c >= 64 && !strcmp(src, "spill"),
	      "salt A resumed %lld tokens from %s (want the spill)", c, src);
	json_decref(a);
}

int main(int argc, char **argv)
{
	REQUIRE(mkdtemp(ddisk) && mkdtemp(dspill), "mkdtemp");
	gt_.cached_args = cached_disk_args;
	gt_stack(argc, argv, "gwsalt", 280, NULL, NULL, NULL);
	disk_tier();
	spill();
	int rc = h_done("test_gw_salt_nvme");
	char cmd[160];
	snprintf(cmd, sizeof cmd, "rm -rf %s %s", ddisk, dspill);
	if (system(cmd))
		rc = rc ? rc : 1;
	return rc;
}
