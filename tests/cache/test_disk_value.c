/* test_disk_value: the disk tier's room goes by value, and its TTL, on the
 * made-up architecture of toy.h (grid 32, one head anchor a session):
 * an anchor's value is (hits + 1) * the tokens it saves / the bytes it
 * holds alone, halved per idle day; over the budget the least valuable
 * goes first, with the chunks only it read; an anchor unused for
 * disk_days (7) goes.
 *   - hits: A (992, one hit) and B (1088, none). Without the hit B is
 *     worth more (a longer line spreads its sections over more tokens);
 *     with it A is. With the budget at what A and B hold, C's head
 *     (576) evicts B and keeps A, and A still serves, bit for bit;
 *   - idle days: three days on (the tier's clock seam), C is hit (one
 *     hit, used now) and A (one hit) has been idle for 3 days: A is worth
 *     an eighth of itself and goes for D's head (672) where, without the
 *     halving, C (the shorter line) would;
 *   - the TTL: eleven days on, C and D (last used 8 days back) go when E's
 *     head is written (expired), and only E's line is left. */
#include <fcntl.h>
#include <jansson.h>
#include <time.h>
#include <unistd.h>

#include "cache_int.h"
#include "dfile.h"
#include "moor.h"
#include "toy.h"

#define G 32

static char dir[256];
static time_t shift;

static time_t clock_shifted(void)
{
	return time(NULL) + shift;
}

static void cfg_of(cache_cfg *cfg, uint64_t budget)
{
	toy_cfg_disk(cfg, "dv", "v", dir);
	cfg->disk_head_anchors = 1;
	cfg->disk_bytes = budget;
}

/* One turn (toy_run: one token sampled), its state checked against a
 * cold run; the plan in *t; then the disk tier's writer is waited for. */
static void run(toy_env *e, const int32_t *ids, uint64_t n, const char *session,
		toy_turn *t, const char *what)
{
	int rc = toy_run(e, ids, n, session, 1, t, 1, what);
	REQUIRE(rc == 0 || rc == 1, "%s: plan: %s", what, moor_strerror(rc));
	CHECK(rc == 0, "%s: state", what);
	REQUIRE(cache_disk_wait(e->c) == 0, "%s: the writer", what);
}

/* The disk tier's anchor lines as a bit set of line / G (lines < 64 G). */
static uint64_t lines_of(cache *c)
{
	char *s = cache_stats_json(c);
	json_t *r = json_loads(s, 0, NULL);
	free(s);
	REQUIRE(r, "stats");
	json_t *a = json_object_get(json_object_get(r, "disk"), "lines");
	uint64_t m = 0;
	for (size_t i = 0; i < json_array_size(a); i++) {
		uint64_t L = (uint64_t)json_integer_value(json_array_get(a, i));
		REQUIRE(L % G == 0 && L / G < 64, "line %llu",
			(unsigned long long)L);
		m |= 1ull << (L / G);
	}
	json_decref(r);
	return m;
}

#define BIT(L) (1ull << ((L) / G))

int main(void)
{
	moor_log_level = MOOR_LOG_ERROR;
	snprintf(dir, sizeof dir, "/tmp/moor-disk-value-XXXXXX");
	REQUIRE(mkdtemp(dir), "mkdtemp");
	cache_disk_clock = clock_shifted;
	int32_t *A = toy_ids(1000, 171), *B = toy_ids(1100, 172),
		*C = toy_ids(600, 173), *D = toy_ids(700, 174),
		*E = toy_ids(500, 175), *N = toy_ids(200, 176);
	toy_part(B, A, 0);
	toy_part(C, A, 0);
	toy_part(C, B, 0);
	toy_part(D, A, 0);
	toy_part(D, B, 0);
	toy_part(D, C, 0);
	toy_part(E, A, 0);
	toy_part(E, B, 0);
	toy_part(E, C, 0);
	toy_part(E, D, 0);
	cache_cfg cfg;
	toy_env e;
	toy_turn t;

	/* A and B write their heads; A is hit once after a restart */
	cfg_of(&cfg, 1ull << 40);
	toy_open(&e, &cfg, 4096, G);
	run(&e, A, 1000, "a", &t, "A");
	run(&e, B, 1100, "b", &t, "B");
	CHECK(lines_of(e.c) == (BIT(992) | BIT(1088)),
	      "A's head at 992, B's at 1088: %llx",
	      (unsigned long long)lines_of(e.c));
	toy_close(&e);
	int32_t *QA = toy_cat(A, 1000, N, 100);
	toy_part(QA, A, 1000);
	toy_open(&e, &cfg, 4096, G);
	run(&e, QA, 1100, "a", &t, "A's next prompt");
	CHECK(t.plan.tier == CACHE_TIER_DISK && t.plan.start == 992,
	      "A's next prompt from the disk at 992: %s at %llu",
	      cache_tier_name(t.plan.tier), (unsigned long long)t.plan.start);
	long long held = toy_stat(e.c, "disk", "bytes");
	CHECK(lines_of(e.c) == (BIT(992) | BIT(1088)) && held > 0,
	      "still A and B (%lld bytes)", held);
	toy_close(&e);

	/* the budget at what they hold: C's head evicts the less valuable */
	cfg_of(&cfg, (uint64_t)held);
	toy_open(&e, &cfg, 4096, G);
	run(&e, C, 600, "c", &t, "C");
	CHECK(lines_of(e.c) == (BIT(992) | BIT(576)) &&
		  toy_stat(e.c, "disk", "evicted") >= 1 && toy_stat(e.c, "disk", "bytes") <= held,
	      "C's head took B's room (B never hit), A's hit kept it: "
	      "lines %llx, %lld evicted, %lld of %lld bytes",
	      (unsigned long long)lines_of(e.c), toy_stat(e.c, "disk", "evicted"),
	      toy_stat(e.c, "disk", "bytes"), held);
	toy_close(&e);
	toy_open(&e, &cfg, 4096, G);
	run(&e, QA, 1100, "a", &t, "A's next prompt again");
	CHECK(t.plan.tier == CACHE_TIER_DISK && t.plan.start == 992,
	      "A still serves from the disk at 992: %s at %llu",
	      cache_tier_name(t.plan.tier), (unsigned long long)t.plan.start);
	toy_close(&e);

	/* three days on: C is hit now, A was last used three days back */
	shift = 3 * 86400;
	cfg_of(&cfg, 1ull << 40);
	toy_open(&e, &cfg, 4096, G);
	int32_t *QC = toy_cat(C, 600, N, 100);
	toy_part(QC, C, 600);
	run(&e, QC, 700, "c", &t, "C's next prompt");
	CHECK(t.plan.tier == CACHE_TIER_DISK && t.plan.start == 576,
	      "C's next prompt from the disk at 576: %s at %llu",
	      cache_tier_name(t.plan.tier), (unsigned long long)t.plan.start);
	held = toy_stat(e.c, "disk", "bytes");
	toy_close(&e);
	cfg_of(&cfg, (uint64_t)held);
	toy_open(&e, &cfg, 4096, G);
	run(&e, D, 700, "d", &t, "D");
	CHECK(lines_of(e.c) == (BIT(576) | BIT(672)) &&
		  toy_stat(e.c, "disk", "bytes") <= held,
	      "D's head took A's room (idle 3 days: an eighth of its value), "
	      "C kept: lines %llx, %lld of %lld bytes",
	      (unsigned long long)lines_of(e.c), toy_stat(e.c, "disk", "bytes"), held);
	toy_close(&e);

	/* eleven days on: C and D, last used 8 days back, are past the TTL */
	shift = 11 * 86400;
	cfg_of(&cfg, 1ull << 40);
	toy_open(&e, &cfg, 4096, G);
	run(&e, E, 500, "e", &t, "E");
	CHECK(lines_of(e.c) == BIT(480) && toy_stat(e.c, "disk", "expired") >= 2 &&
		  toy_stat(e.c, "disk", "chunks") == 480 / G,
	      "past 7 days C and D went: lines %llx, %lld expired, %lld "
	      "chunks",
	      (unsigned long long)lines_of(e.c), toy_stat(e.c, "disk", "expired"),
	      toy_stat(e.c, "disk", "chunks"));
	toy_close(&e);

	cache_disk_clock = NULL;
	free(A);
	free(B);
	free(C);
	free(D);
	free(E);
	free(N);
	free(QA);
	free(QC);
	dfile_rm_rf(AT_FDCWD, dir);
	return t_done("test_disk_value");
}
