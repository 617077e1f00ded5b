/* journal.c: one JSON line per turn in the state directory
 * (--state-dir DIR: DIR/journal.jsonl; rotated to journal.jsonl.1 when it
 * passes --journal-max-mb, 64), read by `moorctl journal --tail`.
 *
 * A line holds what a turn cost and where it resumed, never user text:
 * {"ts", "id", "session", "route", "source", "tier", "prompt_tokens"
 * (the client's count), "read" (what the engine read), "cached",
 * "reread", "injected" (hidden spans put back), "aligned" (the end
 * alignment's pass), "completion_tokens", "prefill_ms", "decode_ms",
 * "ttft_ms", "finish", "memory"}. The session is the key the client sent
 * (a conversation id, an x-session-id), or "" when the prompt names it.
 * "memory" is cached's memory level at the turn's plan (PLAN_OK, carried
 * in the DONE): {"held_mb" (what the caches and live buffers held after
 * the plan), "ceiling_mb" (--mem-ceiling), "shed" (cache units the plan
 * gave back to fit its prefill), "level": "shed" when it gave any back,
 * "high" at 90 % of the ceiling or more, else "ok"}; null for a turn the
 * engine did not run (the response cache, a prepared summary). Written on
 * the loop thread: one short append and a flush, no fsync (a crash may
 * cost the last lines, never a turn). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "gw.h"

void gw_journal_turn(gw_job *j, const char *finish)
{
	gw_srv *s = j->s;
	if (!s->cfg.state_dir[0])
		return;
	const proto_done *d = &j->dn;
	char path[300], old[310];
	snprintf(path, sizeof path, "%s/journal.jsonl", s->cfg.state_dir);
	struct stat st;
	if (!stat(path, &st) &&
	    (uint64_t)st.st_size >= (uint64_t)s->cfg.journal_max_mb << 20) {
		snprintf(old, sizeof old, "%s.1", path);
		if (rename(path, old))
			moor_warn("journal: rotating %s: %s", path,
				  strerror(errno));
	}
	json_t *o = json_object();
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	json_object_set_new(o, "ts",
			    json_real((double)ts.tv_sec + ts.tv_nsec / 1e9));
	json_object_set_new(o, "id", json_string(j->id));
	json_object_set_new(o, "session",
			    json_string(j->p.session ? j->p.session : ""));
	json_object_set_new(o, "route",
			    json_string(j->kind == GW_KIND_CHAT ? "chat"
								: "completions"));
	json_t *u = gw_reply_usage(j);
	json_t *m = json_object_get(u, "moor");
	json_object_set(o, "source", json_object_get(m, "source"));
	json_object_set(o, "tier", json_object_get(m, "tier"));
	json_object_set(o, "prompt_tokens", json_object_get(u, "prompt_tokens"));
	json_object_set(o, "read", json_object_get(m, "prompt_read"));
	json_object_set(o, "cached", json_object_get(m, "cached"));
	json_object_set(o, "reread", json_object_get(m, "reread"));
	json_object_set(o, "injected", json_object_get(m, "injected"));
	json_object_set(o, "aligned", json_object_get(m, "aligned"));
	json_object_set(o, "completion_tokens",
			json_object_get(u, "completion_tokens"));
	json_decref(u);
	json_object_set_new(o, "prefill_ms", json_real(d->prefill_us / 1e3));
	json_object_set_new(o, "decode_ms", json_real(d->decode_us / 1e3));
	json_object_set_new(
	    o, "ttft_ms",
	    j->t_first > 0 ? json_real((j->t_first - j->t_start) * 1e3)
			   : json_null());
	json_object_set_new(o, "finish", json_string(finish));
	if (d->mem_ceiling) {
		const char *lv = d->mem_shed			      ? "shed"
				 : d->mem_held * 10 >= d->mem_ceiling * 9 ? "high"
									  : "ok";
		json_object_set_new(
		    o, "memory",
		    json_pack("{s:f,s:f,s:i,s:s}", "held_mb",
			      d->mem_held / 1048576.0, "ceiling_mb",
			      d->mem_ceiling / 1048576.0, "shed",
			      (int)d->mem_shed, "level", lv));
	} else {
		json_object_set_new(o, "memory", json_null());
	}
	char *line = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER);
	json_decref(o);
	if (!line)
		return;
	FILE *f = fopen(path, "a");
	if (!f) {
		moor_warn("journal: %s: %s", path, strerror(errno));
	} else {
		fprintf(f, "%s\n", line);
		fclose(f);
	}
	free(line);
}
