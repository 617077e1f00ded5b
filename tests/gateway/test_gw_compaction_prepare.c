/* test_gw_compaction_prepare: the compaction preparer (issue 12, point 3),
 * through the stack on the tiny model with small knobs
 * (--compaction-idle-s 2, --compaction-min-tokens 64) and engined's
 * decode slowed (--test-step-delay-ms 40) so that a request can come
 * while a summary is being written. Every request says User-Agent
 * "opencode/..." as opencode does.
 *
 *   D: before any compaction request: three turns, then idle: the
 *      preparer writes the summary ahead with opencode 1.18.33's own
 *      text (the default, gw_compact_default), and that client's
 *      compaction request (its system text and instructions as the real
 *      client sent them, opencode_1.18.33_compaction.json beside this
 *      file; no sampling fields, so the server's defaults) is answered
 *      from it (source "prepared"); a request whose instructions differ
 *      by one word is computed at request time (the same rows).
 *   X: one turn and a compaction (served as the continuation): the
 *      gateway learns the client's compaction text and parameters; the
 *      turn after a compaction prepares nothing.
 *   Y: three turns and, at once, a compaction: computed at request time
 *      (source "continuation").
 *   Z: the same three turns in another session (the same tokens), then
 *      idle: the preparer writes Z's summary ahead in scratch rows.
 *      cached's stats are the same before and after it (every cache's
 *      JSON equal; only the daemon's message counters and its scratch
 *      count move, the plan count does not). Z's compaction is answered
 *      from the prepared summary (source "prepared", nothing re-read) and
 *      its tokens equal Y's, computed at request time.
 *   W: the same three turns again; while its summary is being written a
 *      fourth turn comes: the preparer stops (the log says so), the turn
 *      resumes at the end anchor (source "end", cached = the end) with
 *      the same answer as the same turn in session V where no preparer
 *      ran (its fourth turn was sent at once).
 *   U: three turns of a client that is not opencode, then idle: nothing is
 *      prepared.
 */
#include <stdlib.h>

#include "t.h"

#include "buf.h"
#include "gwtest.h"
#include "harness.h"

static const char *const users[4] = {
    "Write a function that adds two numbers.",
    "Now make it handle lists.",
    "Add a docstring.",
    "And a test for it.",
};

static const char *ua = "opencode/1.18.33 test";

static json_t *post(json_t *b, const char *session, json_t **usage)
{
	char *body = json_dumps(b, JSON_COMPACT);
	char hdr[256];
	snprintf(hdr, sizeof hdr, "x-session-id: %s\r\nUser-Agent: %s\r\n",
		 session, ua);
	gt_resp r = gt_request(gt_.port, "POST", "/v1/chat/completions", body,
			       hdr, 120);
	free(body);
	REQUIRE(r.status == 200, "%d %s", r.status, r.body);
	json_t *j = gt_json(&r);
	REQUIRE(j, "not JSON: %s", r.body);
	gt_resp_fini(&r);
	*usage = json_object_get(j, "usage");
	return j;
}

/* n turns of session S from users[from]; the answers appended to msgs.
 * Returns the end anchor after the last (the prompt read plus what its
 * state absorbed); answer: the last turn's content (malloc'd). */
static long long turns(const char *S, json_t *msgs, int from, int n,
		       char **answer, const char **src_last,
		       long long *cached_last)
{
	long long end = 0;
	for (int t = from; t < from + n; t++) {
		json_array_append_new(msgs,
				      json_pack("{s:s,s:s}", "role", "user",
						"content", users[t]));
		json_t *b = json_pack("{s:O,s:i,s:i}", "messages", msgs,
				      "max_tokens", 16, "temperature", 0);
		json_t *u;
		json_t *j = post(b, S, &u);
		json_decref(b);
		long long read = gt_int(u, "moor.prompt_read");
		long long comp = gt_int(u, "completion_tokens");
		const char *fin = gt_str(j, "choices.0.finish_reason");
		end = read + comp - (fin && !strcmp(fin, "stop") ? 1 : 0);
		static char src[32];
		snprintf(src, sizeof src, "%s",
			 gt_str(u, "moor.source") ? gt_str(u, "moor.source")
						  : "-");
		*src_last = src;
		*cached_last = gt_int(u, "moor.cached");
		json_t *m = json_deep_copy(json_object_get(
		    json_array_get(json_object_get(j, "choices"), 0),
		    "message"));
		if (!json_is_string(json_object_get(m, "content")))
			json_object_set_new(m, "content", json_string(""));
		free(*answer);
		*answer =
		    strdup(json_string_value(json_object_get(m, "content")));
		json_array_append_new(msgs, m);
		json_decref(j);
	}
	return end;
}

/* opencode's compaction request over users[0..last] */
static json_t *compaction(const char *S, int last, char **content, char *src,
			  long long *comp, long long *reread)
{
	moor_buf u = {0};
	moor_buf_puts(&u, "Here is the conversation so far:\n<conversation>\n");
	for (int i = 0; i <= last; i++)
		moor_buf_printf(&u, "[User]: %s\n[Assistant]: (an answer)\n",
				users[i]);
	moor_buf_puts(&u, "</conversation>\n\nProvide a detailed summary of "
			  "the conversation above, for continuing it.");
	json_t *b = json_pack(
	    "{s:[{s:s,s:s},{s:s,s:s}],s:i,s:i}", "messages", "role", "system",
	    "content",
	    "You are a helpful AI assistant tasked with summarizing "
	    "conversations.",
	    "role", "user", "content", u.p, "max_tokens", 40, "temperature", 0);
	moor_buf_fini(&u);
	json_t *us;
	json_t *j = post(b, S, &us);
	json_decref(b);
	snprintf(src, 32, "%s",
		 gt_str(us, "moor.source") ? gt_str(us, "moor.source") : "-");
	*comp = gt_int(us, "completion_tokens");
	*reread = gt_int(us, "moor.reread");
	const char *c = gt_str(j, "choices.0.message.content");
	*content = strdup(c ? c : "");
	return j;
}

/* The real client's compaction text: the fixture's system message and
 * what follows "</conversation>" in its user message. */
static void oc_text(char **system, char **instructions)
{
	char path[4096];
	snprintf(path, sizeof path,
		 "%s/tests/gateway/opencode_1.18.33_compaction.json", t_src());
	json_error_t e;
	json_t *f = json_load_file(path, 0, &e);
	REQUIRE(f, "%s: %s", path, e.text);
	json_t *ms = json_object_get(f, "messages");
	const char *sys = json_string_value(
	    json_object_get(json_array_get(ms, 0), "content"));
	const char *u = json_string_value(
	    json_object_get(json_array_get(ms, 1), "content"));
	const char *end = u ? strstr(u, "</conversation>\n\n") : NULL;
	REQUIRE(sys && end, "%s: not a compaction request", path);
	*system = strdup(sys);
	*instructions = strdup(end + strlen("</conversation>\n\n"));
	json_decref(f);
}

/* opencode 1.18.33's compaction request over users[0..last], as that
 * client writes it (no sampling fields) */
static void compaction_oc(const char *S, int last, const char *system,
			  const char *instructions, char *src, long long *comp)
{
	moor_buf u = {0};
	moor_buf_puts(&u,
		      "Here is the conversation so far:\n\n<conversation>\n");
	for (int i = 0; i <= last; i++)
		moor_buf_printf(&u, "%s[User]: %s\n\n[Assistant]: (an answer)",
				i ? "\n\n" : "", users[i]);
	moor_buf_printf(&u, "\n</conversation>\n\n%s", instructions);
	json_t *b = json_pack("{s:[{s:s,s:s},{s:s,s:s}],s:i}", "messages",
			      "role", "system", "content", system, "role",
			      "user", "content", u.p, "max_tokens", 40);
	moor_buf_fini(&u);
	json_t *us;
	json_t *j = post(b, S, &us);
	json_decref(b);
	snprintf(src, 32, "%s",
		 gt_str(us, "moor.source") ? gt_str(us, "moor.source") : "-");
	*comp = gt_int(us, "completion_tokens");
	json_decref(j);
}

/* cached's stats without the daemon's own counters */
static json_t *caches(long long *scratch, long long *plans)
{
	gt_resp r = gt_get(gt_.port, "/v1/cache/stats");
	json_t *o = gt_json(&r);
	gt_resp_fini(&r);
	REQUIRE(o, "stats");
	*scratch = gt_int(o, "daemon.scratch");
	*plans = gt_int(o, "daemon.plan");
	json_object_del(o, "daemon");
	json_object_del(o, "engine");
	return o;
}

int main(int argc, char **argv)
{
	static const char *const extra[] = {
	    "--compaction-idle-s", "2", "--compaction-min-tokens", "64", NULL};
	gt_stack(argc, argv, "gwcprep", 400, extra, "--test-step-delay-ms",
		 "40");
	char *ans = NULL, *cy = NULL, *cz = NULL, *cx = NULL;
	const char *src;
	long long cached, comp_y, comp_z, rr, dummy;
	char sx[32], sy[32], sz[32];

	/* D: before any compaction request, opencode 1.18.33's own text */
	char *oc_sys, *oc_ins, sd[32];
	oc_text(&oc_sys, &oc_ins);
	json_t *md = json_array();
	turns("ses_d", md, 0, 3, &ans, &src, &cached);
	CHECK(gt_wait_log("gatewayd1", "writing the summary of session ses_d",
			  30) &&
		  h_log_has("gatewayd1", "opencode 1.18.33's text"),
	      "D's summary was not started with opencode's text");
	CHECK(gt_wait_log("gatewayd1", "prepared the summary of session ses_d",
			  120),
	      "D's summary was not prepared");
	compaction_oc("ses_d", 2, oc_sys, oc_ins, sd, &dummy);
	printf("D: opencode 1.18.33's compaction: source %s, %lld tokens\n", sd,
	       dummy);
	CHECK(!strcmp(sd, "prepared"), "D's compaction: %s", sd);
	/* one other word in the instructions: the same continuation rows,
	 * computed at request time */
	json_t *md2 = json_array();
	turns("ses_d2", md2, 0, 3, &ans, &src, &cached);
	CHECK(gt_wait_log("gatewayd1", "prepared the summary of session ses_d2",
			  120),
	      "D2's summary was not prepared");
	char *ins2 = malloc(strlen(oc_ins) + 16);
	REQUIRE(ins2, "oom");
	snprintf(ins2, strlen(oc_ins) + 16, "Please. %s", oc_ins);
	compaction_oc("ses_d2", 2, oc_sys, ins2, sd, &dummy);
	printf("D2: other instructions: source %s\n", sd);
	CHECK(!strcmp(sd, "continuation"), "D2's compaction: %s", sd);
	free(ins2);
	json_decref(md);
	json_decref(md2);
	free(oc_sys);
	free(oc_ins);
	/* D2's continuation is resident now: X's one short turn would be a
	 * guest of it (no end anchor); the rest starts from empty caches */
	gt_resp cr =
	    gt_request(gt_.port, "POST", "/v1/cache/clear", "{}", NULL, 10);
	REQUIRE(cr.status == 200, "cache clear: %d %s", cr.status, cr.body);
	gt_resp_fini(&cr);

	/* X: learn the client's compaction */
	json_t *mx = json_array();
	turns("ses_x", mx, 0, 1, &ans, &src, &cached);
	json_decref(compaction("ses_x", 0, &cx, sx, &dummy, &rr));
	printf("X: compaction source %s\n", sx);
	CHECK(!strcmp(sx, "continuation"), "X's compaction: %s", sx);

	/* Y: the summary computed at request time */
	json_t *my = json_array();
	turns("ses_y", my, 0, 3, &ans, &src, &cached);
	json_decref(compaction("ses_y", 2, &cy, sy, &comp_y, &rr));
	printf("Y: compaction source %s, %lld tokens, reread %lld\n", sy,
	       comp_y, rr);
	CHECK(!strcmp(sy, "continuation"), "Y's compaction: %s", sy);
	CHECK(!h_log_has("gatewayd1", "writing the summary of session ses_x"),
	      "a summary was prepared after a compaction");

	/* Z: the same turns, then idle: prepared */
	json_t *mz = json_array();
	turns("ses_z", mz, 0, 3, &ans, &src, &cached);
	long long sc0, pl0, sc1, pl1;
	json_t *s0 = caches(&sc0, &pl0);
	CHECK(gt_wait_log("gatewayd1", "prepared the summary of session ses_z",
			  30),
	      "Z's summary was not prepared");
	json_t *s1 = caches(&sc1, &pl1);
	CHECK(json_equal(s0, s1), "the caches changed while the preparer "
				  "wrote");
	if (!json_equal(s0, s1)) {
		char *a = json_dumps(s0, JSON_COMPACT | JSON_SORT_KEYS);
		char *b = json_dumps(s1, JSON_COMPACT | JSON_SORT_KEYS);
		fprintf(stderr, "before %s\nafter  %s\n", a, b);
		free(a);
		free(b);
	}
	CHECK(sc1 == sc0 + 1 && pl1 == pl0,
	      "scratch %lld -> %lld, plans %lld -> %lld", sc0, sc1, pl0, pl1);
	json_decref(s0);
	json_decref(s1);
	json_decref(compaction("ses_z", 2, &cz, sz, &comp_z, &rr));
	printf("Z: compaction source %s, %lld tokens, reread %lld\n", sz,
	       comp_z, rr);
	CHECK(!strcmp(sz, "prepared"), "Z's compaction: %s", sz);
	CHECK(rr == 0, "a prepared answer re-read %lld", rr);
	CHECK(comp_z == comp_y && !strcmp(cy, cz),
	      "the prepared summary (%lld tokens) \"%s\" differs from the one "
	      "computed at request time (%lld) \"%s\"",
	      comp_z, cz, comp_y, cy);

	/* G: three turns and at once a short request of the same session
	 * (opencode's title request is one): cached runs it as a guest of
	 * the conversation (its rows saved aside, the end anchor kept); then
	 * idle: the preparer writes the conversation's summary (cached puts
	 * the guest's rows back first; before, the scratch plan refused) */
	json_t *mg = json_array();
	turns("ses_g", mg, 0, 3, &ans, &src, &cached);
	json_t *gb =
	    json_pack("{s:[{s:s,s:s}],s:i,s:i}", "messages", "role", "user",
		      "content", "Title?", "max_tokens", 4, "temperature", 0);
	json_t *gu;
	json_decref(post(gb, "ses_g", &gu));
	json_decref(gb);
	gt_resp sr = gt_get(gt_.port, "/v1/cache/stats");
	json_t *so = gt_json(&sr);
	gt_resp_fini(&sr);
	long long stash_rows = gt_int(so, "stash.rows");
	json_decref(so);
	CHECK(stash_rows > 0, "the short request was not a guest");
	CHECK(gt_wait_log("gatewayd1", "writing the summary of session ses_g", 30),
	      "G's summary was not started after the guest");
	CHECK(gt_wait_log("gatewayd1", "prepared the summary of session ses_g", 60),
	      "G's summary was not prepared after the guest");
	json_decref(mg);

	/* V: four turns at once (no preparer runs between them) */
	char *av = NULL, *aw = NULL;
	json_t *mv = json_array();
	turns("ses_v", mv, 0, 4, &av, &src, &cached);
	/* W: three turns; the fourth comes while the summary is written */
	json_t *mw = json_array();
	long long end_w = turns("ses_w", mw, 0, 3, &aw, &src, &cached);
	CHECK(gt_wait_log("gatewayd1", "writing the summary of session ses_w",
			  30),
	      "W's summary was not started");
	turns("ses_w", mw, 3, 1, &aw, &src, &cached);
	printf("W: the fourth turn: source %s cached %lld (the end at %lld)\n",
	       src, cached, end_w);
	CHECK(gt_wait_log("gatewayd1", "stopping the summary of session ses_w",
			  5),
	      "the preparer was not stopped");
	CHECK(!strcmp(src, "end") && cached == end_w,
	      "the fourth turn resumed from %s at %lld, the end was %lld", src,
	      cached, end_w);
	CHECK(av && aw && !strcmp(av, aw),
	      "W's fourth answer \"%s\", V's \"%s\"", aw ? aw : "",
	      av ? av : "");
	/* U: another client (not opencode): idle, nothing is prepared */
	ua = "python-requests/2.31";
	json_t *mu = json_array();
	turns("ses_u", mu, 0, 3, &aw, &src, &cached);
	CHECK(!gt_wait_log("gatewayd1", "writing the summary of session ses_u",
			   5),
	      "a summary was prepared for a client that is not opencode");
	json_decref(mu);
	json_decref(mx), json_decref(my), json_decref(mz), json_decref(mv),
	    json_decref(mw);
	free(ans), free(cx), free(cy), free(cz), free(av), free(aw);
	return h_done("test_gw_compaction_prepare");
}
