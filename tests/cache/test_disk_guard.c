/* test_disk_guard: the write guard counts every byte the NVMe tiers write
 * in the ledger (LMDB, kept across restarts) and, past the day's budget,
 * skips what the seed's rule skips, never an answer:
 *   - A (session a, 1,300 tokens) writes its head to the disk tier: the
 *     day's count (disk_writes.tier) is what the tier wrote, level ok;
 *   - with the budget under that count the level is hard: B and C (two
 *     sessions' first long requests) plan no disk anchor, and C's plan
 *     does not write B to the spill (an eviction); their answers are a
 *     cold prefill's bit for bit, the three skips are counted and one
 *     "[disk-guard] skip" line is logged for the level;
 *   - a restart keeps the day's count and level (the ledger);
 *   - over (between the budget and 1.5 times it): the tier still plans
 *     nothing; the spill writes the eviction of a conversation of at least
 *     guard_evict_tokens (E, 1,300) and skips a shorter one (G, 700);
 *   - hard: the spill skips even E's eviction; the drain is written;
 *   - the next local day (the ledger's clock seam) starts at 0, level ok,
 *     and the history lists both days, the newest first;
 *   - a budget of 0 is no budget: level ok whatever was written. */
#include <fcntl.h>

#include "cache_int.h"
#include "eng_harness.h"

static char dir[256], logf[300];

static time_t tomorrow(void)
{
	return time(NULL) + 86400;
}

static void open_h(harness *h, const char *name, uint64_t budget)
{
	cache_cfg cfg;
	h_cfg_disk(&cfg, name, dir); /* no park: an eviction goes to the
					spill */
	cfg.spill_min_tokens = 256;
	cfg.guard_evict_tokens = 1000;
	cfg.write_budget = budget;
	h_open(h, "f32_untied", 128, 2048, &cfg);
}

/* disk_writes.<key> as a string ("level", "day") */
static void dw_str(cache *c, const char *key, char *out, size_t n)
{
	char *s = cache_stats_json(c);
	json_t *r = json_loads(s, 0, NULL);
	free(s);
	REQUIRE(r, "stats json");
	json_t *v = json_object_get(json_object_get(r, "disk_writes"), key);
	snprintf(out, n, "%s", json_is_string(v) ? json_string_value(v) : "");
	json_decref(r);
}

static int log_count(const char *what)
{
	fflush(stderr);
	int n = t_file_count(logf, what);
	REQUIRE(n >= 0, "the log");
	return n;
}

int main(void)
{
	moor_log_level = MOOR_LOG_WARN;
	snprintf(dir, sizeof dir, "/tmp/moor-disk-guard-XXXXXX");
	REQUIRE(mkdtemp(dir), "mkdtemp");
	/* the warnings go to a file the test reads */
	snprintf(logf, sizeof logf, "%s.log", dir);
	int lfd = open(logf, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	REQUIRE(lfd >= 0, "log file");
	int err_fd = dup(2);
	REQUIRE(dup2(lfd, 2) == 2, "dup2");
	close(lfd);

	harness h;
	h_turn t;
	char lv[32];
	open_h(&h, "dg-1", 1ull << 40);
	int V = h.V;
	int32_t *A = h_ids(1300, V, 201), *B = h_ids(1300, V, 202),
		*C = h_ids(1300, V, 203);
	REQUIRE(h_turn_run(&h, A, 1300, "a", 4, &t) == 0, "A");
	state_free(&t.st);
	cache_disk_wait(h.c);
	long long tier = h_stat(h.c, "disk_writes.tier");
	long long wrote = h_stat(h.c, "disk.bytes_written");
	dw_str(h.c, "level", lv, sizeof lv);
	CHECK(wrote > 0 && tier == wrote &&
		  h_stat(h.c, "disk_writes.bytes") == wrote &&
		  !strcmp(lv, "ok"),
	      "A's head counted: tier %lld of %lld written, level %s", tier,
	      wrote, lv);
	CHECK(h_stat(h.c, "disk.anchors") == 4, "A's 4 head anchors");
	h_close(&h);

	/* hard: the budget is under what was written */
	open_h(&h, "dg-2", (uint64_t)wrote / 2);
	CHECK(h_stat(h.c, "disk_writes.bytes") == wrote,
	      "the day's count outlives a restart: %lld",
	      h_stat(h.c, "disk_writes.bytes"));
	dw_str(h.c, "level", lv, sizeof lv);
	CHECK(!strcmp(lv, "hard"), "level hard: %s", lv);
	REQUIRE(h_turn_run(&h, B, 1300, "b", 4, &t) == 0, "B");
	h_exact(&h, B, 1300, &t, "B under the guard");
	state_free(&t.st);
	REQUIRE(h_turn_run(&h, C, 1300, "c", 4, &t) == 0, "C");
	h_exact(&h, C, 1300, &t, "C under the guard");
	state_free(&t.st);
	cache_disk_wait(h.c);
	CHECK(h_stat(h.c, "disk.anchors") == 4 &&
		  h_stat(h.c, "disk.bytes_written") == 0 &&
		  h_stat(h.c, "disk_writes.bytes") == wrote,
	      "nothing written past the budget: %lld anchors, %lld bytes",
	      h_stat(h.c, "disk.anchors"), h_stat(h.c, "disk.bytes_written"));
	/* C's plan would also write B to the spill (an eviction): skipped */
	CHECK(h_stat(h.c, "disk.guard_skips") == 2 &&
		  h_stat(h.c, "spill.guard_skips") == 1 &&
		  h_stat(h.c, "spill.saves") == 0 &&
		  h_stat(h.c, "disk_writes.skips_hard") == 3 &&
		  h_stat(h.c, "disk_writes.skips") == 3,
	      "three skips counted (two plans, B's eviction): %lld, %lld "
	      "hard, %lld in all",
	      h_stat(h.c, "disk.guard_skips"),
	      h_stat(h.c, "disk_writes.skips_hard"),
	      h_stat(h.c, "disk_writes.skips"));
	CHECK(log_count("[disk-guard] skip") == 1,
	      "one [disk-guard] skip line for the level: %d",
	      log_count("[disk-guard] skip"));
	h_close(&h);

	/* over: wrote is 1.25 budgets (the spill's counts are added too) */
	open_h(&h, "dg-3", (uint64_t)wrote * 4 / 5);
	dw_str(h.c, "level", lv, sizeof lv);
	CHECK(!strcmp(lv, "over"), "level over: %s", lv);
	int32_t *E = h_ids(1300, V, 204), *F = h_ids(700, V, 205),
		*G = h_ids(700, V, 206), *H = h_ids(700, V, 207);
	REQUIRE(h_turn_run(&h, F, 700, "f", 4, &t) == 0, "F");
	state_free(&t.st);
	CHECK(h_stat(h.c, "disk.guard_skips") == 1 &&
		  h_stat(h.c, "disk.anchors") == 4,
	      "over: the tier plans nothing");
	REQUIRE(h_turn_run(&h, G, 700, "g", 4, &t) == 0, "G");
	state_free(&t.st);
	dw_str(h.c, "level", lv, sizeof lv);
	CHECK(h_stat(h.c, "spill.evict_saves") == 0 &&
		  h_stat(h.c, "spill.guard_skips") == 1 && !strcmp(lv, "over"),
	      "over: F's eviction (704 < 1,000 tokens) is skipped: %lld "
	      "saves, %lld skips, level %s",
	      h_stat(h.c, "spill.evict_saves"),
	      h_stat(h.c, "spill.guard_skips"), lv);
	REQUIRE(h_turn_run(&h, E, 1300, "e", 4, &t) == 0, "E");
	state_free(&t.st);
	REQUIRE(h_turn_run(&h, H, 700, "h", 4, &t) == 0, "H");
	state_free(&t.st);
	long long sp = h_stat(h.c, "disk_writes.spill");
	CHECK(h_stat(h.c, "spill.evict_saves") == 1 &&
		  h_stat(h.c, "spill.guard_skips") == 2 && sp > 0 &&
		  sp == h_stat(h.c, "spill.bytes_written"),
	      "over: G's eviction skipped, E's (1,304 >= 1,000 tokens) "
	      "written and counted: %lld saves, %lld skips, %lld bytes",
	      h_stat(h.c, "spill.evict_saves"),
	      h_stat(h.c, "spill.guard_skips"), sp);
	CHECK(h_stat(h.c, "disk.anchors") == 4 &&
		  h_stat(h.c, "disk.guard_skips") == 4,
	      "over: no disk plan of the four: %lld skips",
	      h_stat(h.c, "disk.guard_skips"));
	h_close(&h);

	/* hard again: not even a long eviction; the drain is written */
	open_h(&h, "dg-4", (uint64_t)wrote / 4);
	REQUIRE(h_turn_run(&h, E, 1300, "e", 4, &t) == 0, "E again");
	state_free(&t.st);
	REQUIRE(h_turn_run(&h, H, 700, "h", 4, &t) == 0, "H");
	state_free(&t.st);
	CHECK(h_stat(h.c, "spill.evict_saves") == 0 &&
		  h_stat(h.c, "spill.guard_skips") == 1,
	      "hard: E's eviction is skipped");
	char e2[MOOR_ERRLEN] = "";
	long long before = h_stat(h.c, "disk_writes.spill");
	REQUIRE(cache_drain(h.c, e2) == 0, "drain: %s", e2);
	CHECK(h_stat(h.c, "spill.saves") == 1 &&
		  h_stat(h.c, "disk_writes.spill") > before,
	      "hard: the drain is written and counted");
	CHECK(log_count("[disk-guard] skip") >= 3,
	      "a line for each level in each run");
	h_close(&h);

	/* the next local day: a new count, the old day in the history */
	cache_ledger_clock = tomorrow;
	open_h(&h, "dg-6", (uint64_t)wrote / 4);
	dw_str(h.c, "level", lv, sizeof lv);
	char day[32];
	dw_str(h.c, "day", day, sizeof day);
	CHECK(!strcmp(lv, "ok") && h_stat(h.c, "disk_writes.bytes") == 0 &&
		  h_stat(h.c, "disk_writes.skips") == 0,
	      "the next day starts at 0, level ok (%s, %lld)", lv,
	      h_stat(h.c, "disk_writes.bytes"));
	REQUIRE(h_turn_run(&h, E, 1300, "e2", 4, &t) == 0, "E tomorrow");
	state_free(&t.st);
	cache_disk_wait(h.c);
	char *js = cache_stats_json(h.c);
	json_t *r = json_loads(js, 0, NULL);
	free(js);
	json_t *days =
	    json_object_get(json_object_get(r, "disk_writes"), "days");
	CHECK(json_array_size(days) == 2 &&
		  !strcmp(json_string_value(
			      json_object_get(json_array_get(days, 0), "day")),
			  day) &&
		  json_integer_value(json_object_get(json_array_get(days, 1),
						     "bytes")) > wrote,
	      "two days in the history, the newest first (%zu)",
	      json_array_size(days));
	json_decref(r);
	h_close(&h);
	cache_ledger_clock = NULL;

	/* no budget */
	open_h(&h, "dg-5", 0);
	dw_str(h.c, "level", lv, sizeof lv);
	CHECK(!strcmp(lv, "ok") && h_stat(h.c, "disk_writes.bytes") > wrote,
	      "budget 0: level %s", lv);
	h_close(&h);

	int32_t *ids[] = {A, B, C, E, F, G, H};
	for (size_t i = 0; i < sizeof ids / sizeof ids[0]; i++)
		free(ids[i]);
	dup2(err_fd, 2);
	close(err_fd);
	char cmd[600];
	if (t_failed) { /* the checks' lines went to the log file too */
		snprintf(cmd, sizeof cmd, "cat %s >&2", logf);
		(void)!system(cmd);
	}
	snprintf(cmd, sizeof cmd, "rm -rf %s %s", dir, logf);
	(void)!system(cmd);
	return t_done("test_disk_guard");
}
