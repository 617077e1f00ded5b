/* test_disk_head_user: a session's first long request writes its disk
 * head anchors at the last 4 grid lines at or below where its last user
 * message starts (cache_req.user_at), because the next session in the same
 * folder parts from it there (the made-up architecture of toy.h, grid 32):
 *   - A (session s1, 1,200 tokens, its last user message at 700): the
 *     anchors at 576, 608, 640 and 672, none above the user message;
 *   - B (session s2): A's first 690 tokens (the same tools, system text
 *     and folder), then a user message of its own: resumes from the disk
 *     at 672 and equals a cold run bit for bit (with the old rule A's
 *     anchors sat at 1,088 to 1,184 and B prefilled cold);
 *   - C (session s3, user_at unknown: 0): the last 4 lines of its prompt,
 *     as before;
 *   - a user_at past the prompt counts as unknown. */
#include <fcntl.h>
#include <jansson.h>
#include <unistd.h>

#include "dfile.h"
#include "moor.h"
#include "toy.h"

#define G 32

static char dir[256];

static void cfg_of(cache_cfg *cfg, const char *name)
{
	toy_cfg_disk(cfg, "dhu", name, dir);
}

/* toy_run with the request's user_at; the state checked against a cold
 * run */
static int run_at(toy_env *e, const int32_t *ids, uint64_t n,
		  const char *session, uint64_t user_at, toy_turn *t,
		  const char *what)
{
	char err[MOOR_ERRLEN] = "";
	memset(t, 0, sizeof *t);
	cache_req r = {.ids = ids,
		       .n = n,
		       .session = session,
		       .max_tokens = 3,
		       .user_at = user_at};
	REQUIRE(cache_plan(e->c, &r, &t->plan, err) == 0, "%s: %s", what, err);
	e->s.len = (int64_t)t->plan.start;
	int filled =
	    toy_prefill(e->lay, &e->s, ids + t->plan.start,
			(int64_t)(n - t->plan.start), &t->plan, e->dev);
	memset(e->cold.sec[0], 0, TOY_S0);
	memset(e->cold.sec[1], 0, TOY_S1);
	e->cold.len = 0;
	toy_prefill(e->lay, &e->cold, ids, (int64_t)n, NULL, NULL);
	int ok = toy_equal(e->lay, &e->s, &e->cold, n, what);
	t->n_gen = 1;
	t->gen[0] = toy_next(e->lay, &e->s);
	CHECK(t->gen[0] == toy_next(e->lay, &e->cold), "%s: token", what);
	REQUIRE(cache_commit(e->c, (uint32_t)filled, t->gen, 0) == 0,
		"%s: commit", what);
	cache_disk_wait(e->c);
	return ok;
}

/* The disk tier's anchor lines, ascending (the stats' order may be any). */
static int lines_of(cache *c, uint64_t *out, int max)
{
	char *s = cache_stats_json(c);
	json_t *r = json_loads(s, 0, NULL);
	free(s);
	REQUIRE(r, "stats");
	json_t *a = json_object_get(json_object_get(r, "disk"), "lines");
	int n = 0;
	for (size_t i = 0; i < json_array_size(a) && n < max; i++)
		out[n++] = (uint64_t)json_integer_value(json_array_get(a, i));
	json_decref(r);
	for (int i = 1; i < n; i++)
		for (int j = i; j > 0 && out[j - 1] > out[j]; j--) {
			uint64_t x = out[j];
			out[j] = out[j - 1];
			out[j - 1] = x;
		}
	return n;
}

int main(void)
{
	moor_log_level = MOOR_LOG_ERROR;
	snprintf(dir, sizeof dir, "/tmp/moor-disk-head-XXXXXX");
	REQUIRE(mkdtemp(dir), "mkdtemp");
	int32_t *A = toy_ids(1200, 151), *N = toy_ids(600, 152);
	int32_t *B = toy_cat(A, 690, N, 510);
	toy_part(B, A, 690);
	cache_cfg cfg;
	cfg_of(&cfg, "a");
	toy_env e;
	toy_turn t;
	toy_open(&e, &cfg, 4096, G);
	CHECK(run_at(&e, A, 1200, "s1", 700, &t, "A"), "A cold");
	uint64_t L[16];
	int n = lines_of(e.c, L, 16);
	CHECK(n == 4 && L[0] == 576 && L[1] == 608 && L[2] == 640 &&
		  L[3] == 672,
	      "A's head anchors below its user message (700): %d lines, "
	      "%llu .. %llu",
	      n, n ? (unsigned long long)L[0] : 0ull,
	      n ? (unsigned long long)L[n - 1] : 0ull);
	toy_close(&e);

	toy_open(&e, &cfg, 4096, G);
	CHECK(run_at(&e, B, 1200, "s2", 690, &t, "B"), "B equals a cold run");
	CHECK(t.plan.tier == CACHE_TIER_DISK && t.plan.start == 672,
	      "B resumes from A's head at 672: %s at %llu",
	      cache_tier_name(t.plan.tier), (unsigned long long)t.plan.start);
	toy_close(&e);

	/* unknown (0) and past the prompt: the prompt's last lines */
	for (int k = 0; k < 2; k++) {
		char d[300];
		snprintf(d, sizeof d, "%s/disk", dir);
		dfile_rm_rf(AT_FDCWD, d);
		int32_t *C = toy_ids(1200, 160 + (uint64_t)k);
		toy_open(&e, &cfg, 4096, G);
		CHECK(
		    run_at(&e, C, 1200, k ? "s4" : "s3", k ? 5000 : 0, &t, "C"),
		    "C cold");
		n = lines_of(e.c, L, 16);
		CHECK(n == 4 && L[0] == 1088 && L[3] == 1184,
		      "user_at %s: the last 4 lines (%d, %llu .. %llu)",
		      k ? "past the prompt" : "unknown", n,
		      n ? (unsigned long long)L[0] : 0ull,
		      n ? (unsigned long long)L[n - 1] : 0ull);
		toy_close(&e);
		free(C);
	}
	free(A);
	free(N);
	free(B);
	dfile_rm_rf(AT_FDCWD, dir);
	return t_done("test_disk_head_user");
}
