/* test_gw_compaction: compaction as a continuation (issue 12, point 3).
 *
 * Through the stack on the tiny model, one session (x-session-id as
 * opencode sends it): three turns, each sending back what it was given;
 * then opencode's compaction request (its agent's system prompt and one
 * user message holding "<conversation> [User]: ... </conversation>" and
 * the instructions). It must be served as the continuation of the
 * session's end anchor: usage.moor.source "continuation", cached = the end
 * anchor's length (the last turn's prompt as read plus what its state
 * absorbed), re-reading only the new turn; prompt_tokens the client's
 * count. The guard: the same request with a user line the conversation
 * never had is served as sent (not a continuation). The journal: a line
 * a turn, no user text, cached's memory level at each turn's plan; rotated
 * by size (--journal-max-mb 1: a full journal moves to journal.jsonl.1
 * before the next line, and `moorctl journal --tail` reads across both).
 */
#include <libgen.h>
#include <stdlib.h>
#include <sys/stat.h>

#include "t.h"

#include "buf.h"
#include "gwtest.h"
#include "harness.h"

static const char *const users[3] = {
    "Write a function that adds two numbers.",
    "Now make it handle lists.",
    "Add a docstring.",
};

static json_t *post(json_t *b, const char *session, json_t **usage)
{
	char *body = json_dumps(b, JSON_COMPACT);
	char hdr[128];
	snprintf(hdr, sizeof hdr, "x-session-id: %s\r\n", session);
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

static char *compaction_body(const char *first, const char *last)
{
	moor_buf u = {0};
	moor_buf_printf(&u,
			"Here is the conversation so far:\n<conversation>\n"
			"[User]: %s\n[Assistant]: (an answer)\n"
			"[User]: %s\n[Assistant]: (another answer)\n"
			"</conversation>\n\nProvide a detailed summary of the "
			"conversation above, for continuing it.",
			first, last);
	json_t *b = json_pack(
	    "{s:[{s:s,s:s},{s:s,s:s}],s:i,s:i}", "messages", "role", "system",
	    "content", "You are a helpful AI assistant tasked with summarizing "
		       "conversations.",
	    "role", "user", "content", u.p, "max_tokens", 16, "temperature", 0);
	moor_buf_fini(&u);
	char *t = json_dumps(b, JSON_COMPACT);
	json_decref(b);
	return t;
}

/* the last compaction's usage.prompt_tokens_details.cached_tokens */
static long long usage_cached = -1;

static void compaction(const char *session, const char *first,
		       const char *last, long long *cached, char *src,
		       long long *reread, long long *prompt, long long *read)
{
	char *body = compaction_body(first, last);
	json_t *b = json_loads(body, 0, NULL);
	free(body);
	json_t *u;
	json_t *j = post(b, session, &u);
	json_decref(b);
	*cached = gt_int(u, "moor.cached");
	*reread = gt_int(u, "moor.reread");
	*prompt = gt_int(u, "prompt_tokens");
	*read = gt_int(u, "moor.prompt_read");
	usage_cached = gt_int(u, "prompt_tokens_details.cached_tokens");
	snprintf(src, 32, "%s",
		 gt_str(u, "moor.source") ? gt_str(u, "moor.source") : "-");
	json_decref(j);
}

int main(int argc, char **argv)
{
	/* the journal too: a line a turn in the state dir, no user text */
	static char sdir[] = "/tmp/moor-gwjournal-XXXXXX";
	REQUIRE(mkdtemp(sdir), "mkdtemp");
	const char *extra[] = {"--state-dir", sdir, "--journal-max-mb", "1",
			       NULL};
	gt_stack(argc, argv, "gwcompact", 300, extra, NULL, NULL);
	const char *S = "ses_compaction_test";
	json_t *msgs = json_array();
	long long end = 0;
	for (int t = 0; t < 3; t++) {
		json_array_append_new(msgs, json_pack("{s:s,s:s}", "role",
						      "user", "content",
						      users[t]));
		json_t *b = json_pack("{s:O,s:i,s:i}", "messages", msgs,
				      "max_tokens", 24, "temperature", 0);
		json_t *u;
		json_t *j = post(b, S, &u);
		json_decref(b);
		long long read = gt_int(u, "moor.prompt_read");
		long long comp = gt_int(u, "completion_tokens");
		const char *fin = gt_str(j, "choices.0.finish_reason");
		/* the stop token is sampled, never forwarded */
		end = read + comp - (fin && !strcmp(fin, "stop") ? 1 : 0);
		printf("turn %d: read %lld completion %lld (%s) source %s\n", t,
		       read, comp, fin, gt_str(u, "moor.source"));
		json_t *m = json_deep_copy(json_object_get(
		    json_array_get(json_object_get(j, "choices"), 0),
		    "message"));
		if (!json_is_string(json_object_get(m, "content")))
			json_object_set_new(m, "content", json_string(""));
		json_array_append_new(msgs, m);
		json_decref(j);
	}
	json_decref(msgs);

	long long cached, reread, prompt, read;
	char src[32];
	compaction(S, users[0], users[2], &cached, src, &reread, &prompt,
		   &read);
	printf("compaction: source %s cached %lld reread %lld prompt %lld "
	       "(read %lld); the end anchor was at %lld\n",
	       src, cached, reread, prompt, read, end);
	CHECK(!strcmp(src, "continuation"), "compaction served from %s", src);
	CHECK(cached == end, "compaction resumed at %lld, the end at %lld",
	      cached, end);
	CHECK(reread > 0 && reread < 80, "compaction re-read %lld", reread);
	CHECK(prompt != read,
	      "prompt_tokens %lld: not the client's count (read %lld)", prompt,
	      read);
	/* the seed: cached_tokens is the client's prompt less what was
	 * forwarded */
	CHECK(usage_cached == prompt - reread,
	      "cached_tokens %lld, want the prompt %lld less the %lld read",
	      usage_cached, prompt, reread);

	/* the guard: a user line the conversation never had */
	compaction(S, users[0], "What is the capital of France?", &cached, src,
		   &reread, &prompt, &read);
	printf("guard miss: source %s cached %lld reread %lld\n", src, cached,
	       reread);
	CHECK(strcmp(src, "continuation") != 0,
	      "a compaction whose history is not the record's was served as "
	      "its continuation");
	CHECK(prompt == read, "served as sent: read %lld of %lld", read,
	      prompt);

	/* the journal: one line a turn (3 turns, 2 compactions), the
	 * sources as usage said, no user text */
	char jp[400];
	snprintf(jp, sizeof jp, "%s/journal.jsonl", sdir);
	FILE *f = fopen(jp, "r");
	CHECK(f, "no journal at %s", jp);
	int lines = 0, cont = 0, text = 0;
	char line[4096];
	while (f && fgets(line, sizeof line, f)) {
		json_t *o = json_loads(line, 0, NULL);
		CHECK(o && gt_str(o, "source") && gt_str(o, "finish") &&
			  gt_int(o, "cached") >= 0 && gt_int(o, "reread") >= 0,
		      "journal line: %s", line);
		/* cached's memory level at the turn's plan */
		json_t *mem = json_object_get(o, "memory");
		const char *lv = gt_str(mem, "level");
		CHECK(json_is_object(mem) && lv &&
			  (!strcmp(lv, "ok") || !strcmp(lv, "high") ||
			   !strcmp(lv, "shed")) &&
			  json_real_value(json_object_get(mem, "held_mb")) > 0 &&
			  json_real_value(json_object_get(mem, "ceiling_mb")) >=
			      json_real_value(json_object_get(mem, "held_mb")) &&
			  gt_int(mem, "shed") >= 0,
		      "journal line without its memory level: %s", line);
		cont += o && gt_str(o, "source") &&
			!strcmp(gt_str(o, "source"), "continuation");
		text += strstr(line, "function") != NULL ||
			strstr(line, "docstring") != NULL;
		json_decref(o);
		lines++;
	}
	if (f)
		fclose(f);
	printf("journal: %d lines, %d continuation\n", lines, cont);
	CHECK(lines == 5 && cont == 1, "journal: %d lines, %d continuations",
	      lines, cont);
	CHECK(!text, "the journal holds user text");

	/* rotated by size: a journal at --journal-max-mb (1) moves to
	 * journal.jsonl.1 before the next line, which starts a new one;
	 * moorctl reads across both */
	f = fopen(jp, "a");
	REQUIRE(f, "%s", jp);
	for (int i = 0; ftell(f) < (1 << 20); i++)
		fprintf(f, "{\"filler\":%d}\n", i);
	long filled = ftell(f);
	fclose(f);
	json_t *b = json_pack("{s:[{s:s,s:s}],s:i,s:i}", "messages", "role",
			      "user", "content", "One more.", "max_tokens", 4,
			      "temperature", 0);
	json_t *u;
	json_decref(post(b, "ses_rotate", &u));
	json_decref(b);
	char jp1[410];
	snprintf(jp1, sizeof jp1, "%s.1", jp);
	struct stat st1, st0;
	CHECK(!stat(jp1, &st1) && st1.st_size == filled,
	      "the full journal was not rotated to %s", jp1);
	lines = 0;
	f = fopen(jp, "r");
	while (f && fgets(line, sizeof line, f))
		lines += strstr(line, "\"session\":\"ses_rotate\"") != NULL;
	if (f)
		fclose(f);
	CHECK(!stat(jp, &st0) && lines == 1 && st0.st_size < 4096,
	      "the new journal does not hold the turn alone: %d lines", lines);
	char cmd[1200], *cdir = strdup(gt_.cached);
	REQUIRE(cdir, "oom");
	snprintf(cmd, sizeof cmd,
		 "%.500s/moorctl journal --tail 2 --state-dir %s",
		 dirname(cdir), sdir);
	free(cdir);
	FILE *p = popen(cmd, "r");
	char l1[4096] = "", l2[4096] = "";
	if (p && fgets(l1, sizeof l1, p) && !fgets(l2, sizeof l2, p))
		l2[0] = 0;
	int prc = p ? pclose(p) : -1;
	CHECK(prc == 0 && strstr(l1, "\"filler\":") &&
		  strstr(l2, "\"session\":\"ses_rotate\""),
	      "moorctl journal --tail 2 across the rotation: %d\n%s%s", prc, l1,
	      l2);
	printf("journal rotated at %ld bytes; moorctl --tail 2 reads across "
	       "it\n",
	       filled);
	unlink(jp1);
	unlink(jp);
	rmdir(sdir);
	return h_done("test_gw_compaction");
}
