/* test_cache_salt_keys: a tenant's salt keys every RAM tier apart
 * (cached/salt.h), on toy.h's architecture.
 *
 * The turns of test_cache_peek (a cold prompt, a follow-up at a resident
 * anchor, one at the end anchor, a guest and the host's stash, a
 * compaction's pin, a second session's park, a state store hit) run with
 * their ids salted as cached's daemon salts them (salt X; the toy engine
 * computes on the real ids). Before every plan:
 *   - a peek of the same ids under salt Y, and unsalted, finds nothing:
 *     tier none at line 0 (another salt shares no cached token);
 * and the plan of salt X resumes at the tier the unsalted run resumes at
 * (the same salt shares as before), its state equal to a cold prefill's.
 * The session spill too: a salted conversation evicted to it is read back
 * by its own salt's follow-up (tier spill) and offered to no other salt.
 * The transform itself: salt 0 is the identity, applying it twice gives
 * the ids back, a salted id stays a non-negative int32, and a session is
 * qualified by its salt. */
#include <jansson.h>
#include <unistd.h>

#include "moor.h"
#include "salt.c"
#include "toy.h"

#define G 16
#define SALT_X 0x1234567890abcdefull
#define SALT_Y 0x0fedcba987654321ull

static void cfg_of(cache_cfg *cfg, const char *name)
{
	cache_cfg_defaults(cfg);
	snprintf(cfg->arena_prefix, sizeof cfg->arena_prefix, "moor-salt-%s-%d",
		 name, (int)getpid());
	cfg->device_bytes = 8ull << 20;
	cfg->host_bytes = 8ull << 20;
	cfg->mem_ceiling = cfg->mem_peak = 1ull << 40;
	cfg->resident_bytes = 1 << 20;
	cfg->pin_every = 64;
	cfg->pin_upto = 128;
	cfg->guest_max = 50;
	cfg->guest_margin = 8;
	cfg->stash_bytes = cfg->pin_bytes = cfg->park_bytes = 1 << 20;
	cfg->store_bytes = cfg->store_entry_bytes = 2 << 20;
}

static int32_t *dup_ids(const int32_t *ids, uint64_t n)
{
	int32_t *r = malloc((n + 1) * sizeof *r);
	REQUIRE(r, "oom");
	memcpy(r, ids, n * sizeof *r);
	return r;
}

static int32_t *salted(const int32_t *ids, uint64_t n, uint64_t salt)
{
	int32_t *s = dup_ids(ids, n);
	cache_salt_ids(s, n, 0, salt);
	return s;
}

static void test_transform(void)
{
	int32_t *a = toy_ids(5000, 9);
	int32_t *b = dup_ids(a, 5000);
	cache_salt_ids(b, 5000, 0, 0);
	CHECK(!memcmp(a, b, 5000 * 4), "salt 0 changed the ids");
	cache_salt_ids(b, 5000, 0, SALT_X);
	int neg = 0, same = 0;
	for (int i = 0; i < 5000; i++) {
		neg += b[i] < 0;
		same += b[i] == a[i];
	}
	CHECK(!neg, "%d salted ids are negative", neg);
	CHECK(same < 3, "%d of 5000 ids unchanged by a salt", same);
	/* the generated ids of a COMMIT are salted at their positions */
	int32_t *c = dup_ids(a + 1000, 4000);
	cache_salt_ids(c, 4000, 1000, SALT_X);
	CHECK(!memcmp(c, b + 1000, 4000 * 4),
	      "salting from position 1000 differs from the whole");
	cache_salt_ids(b, 5000, 0, SALT_X);
	CHECK(!memcmp(a, b, 5000 * 4), "salting twice is not the identity");
	char buf[64];
	CHECK(!strcmp(cache_salt_session("s", 0, buf, sizeof buf), "s"),
	      "salt 0 changed the session");
	CHECK(cache_salt_session(NULL, SALT_X, buf, sizeof buf) == NULL &&
		  !strcmp(cache_salt_session("", SALT_X, buf, sizeof buf), ""),
	      "no session became one");
	CHECK(!strcmp(cache_salt_session("s", SALT_X, buf, sizeof buf),
		      "1234567890abcdef:s"),
	      "the salted session: %s", buf);
	free(a);
	free(b);
	free(c);
}

static int32_t last_gen[2];

/* A turn of salt X: the cache sees salted ids, the toy the real ones. */
static void turn_x(toy_env *e, const int32_t *ids, uint64_t n,
		   const char *session, cache_plan_out *plan, const char *what)
{
	char err[MOOR_ERRLEN] = "", sb[64];
	int32_t *sx = salted(ids, n, SALT_X);
	cache_req r = {.ids = sx,
		       .n = n,
		       .session = cache_salt_session(session, SALT_X, sb,
						     sizeof sb),
		       .max_tokens = 3};
	REQUIRE(cache_plan(e->c, &r, plan, err) == 0, "%s: plan: %s", what,
		err);
	e->s.len = (int64_t)plan->start;
	int filled = toy_prefill(e->lay, &e->s, ids + plan->start,
				 (int64_t)(n - plan->start), plan, e->dev);
	REQUIRE(filled == (int)plan->n_slots, "%s: filled", what);
	memset(e->cold.sec[0], 0, TOY_S0);
	memset(e->cold.sec[1], 0, TOY_S1);
	e->cold.len = 0;
	toy_prefill(e->lay, &e->cold, ids, (int64_t)n, NULL, NULL);
	CHECK(toy_equal(e->lay, &e->s, &e->cold, n, what), "%s: resumed state",
	      what);
	int32_t gen[3];
	for (int i = 0; i < 3; i++) {
		gen[i] = toy_next(e->lay, &e->s);
		if (i < 2)
			toy_step(e->lay, &e->s, gen[i]);
	}
	memcpy(last_gen, gen, sizeof last_gen);
	cache_salt_ids(gen, 2, n, SALT_X);
	REQUIRE(cache_commit(e->c, (uint32_t)filled, gen, 2) == 0, "%s: commit",
		what);
	free(sx);
}

typedef struct step {
	const int32_t *ids;
	uint64_t n;
	const char *session;
	const char *clear;
	int want_tier;
	const char *what;
} step;

static void test_every_tier(void)
{
	cache_cfg cfg;
	cfg_of(&cfg, "x");
	toy_env E;
	toy_open(&E, &cfg, 1024, G);
	int32_t *P = toy_ids(300, 3);
	int32_t *tail = toy_ids(60, 11);
	int32_t *P2 = toy_cat(P, 300, tail, 60);
	int32_t *P3 = toy_cat(P2, 360, tail, 30);
	int32_t *Gs = toy_ids(40, 12);
	int32_t *C = toy_ids(200, 4);
	toy_part(C, P, 0);
	int32_t *D = toy_ids(200, 5);
	toy_part(D, C, 0);
	int32_t *Ei = toy_ids(250, 7);
	toy_part(Ei, D, 0);
	int32_t *E2 = toy_cat(Ei, 250, tail, 20);
	step steps[] = {
	    {P, 300, "a", NULL, CACHE_TIER_NONE, "cold P"},
	    {P2, 360, "a", NULL, CACHE_TIER_RESIDENT, "P2 follows P"},
	    {NULL, 0, "a", NULL, CACHE_TIER_END, "P2 + its reply + 5"},
	    {Gs, 40, "g", NULL, CACHE_TIER_NONE, "a guest"},
	    {P3, 390, "a", NULL, CACHE_TIER_STASH, "P3 after the guest"},
	    {C, 200, "a", NULL, CACHE_TIER_NONE, "C compacts: a pin"},
	    {P3, 390, "a", "store", CACHE_TIER_PIN, "P3 from the pin"},
	    {D, 200, "b", NULL, CACHE_TIER_NONE, "D: P3 parked"},
	    {P3, 390, "a", "store", CACHE_TIER_PARK, "P3 from the park"},
	    {Ei, 250, "d", NULL, CACHE_TIER_NONE, "E: a prefix snapshot"},
	    {E2, 270, "d", "pin park resident end", CACHE_TIER_STORE,
	     "E2 from the store"},
	};
	char err[MOOR_ERRLEN];
	int32_t *fol = NULL;
	const step *prev = NULL;
	for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++) {
		step s = steps[i];
		if (!s.ids) {
			REQUIRE(prev, "a follow-up of nothing");
			int32_t *a = toy_cat(prev->ids, prev->n, last_gen, 2);
			free(fol);
			fol = toy_cat(a, prev->n + 2, tail, 5);
			free(a);
			s.ids = fol;
			s.n = prev->n + 7;
		}
		prev = &steps[i];
		if (s.clear) {
			char buf[64], *save = NULL;
			snprintf(buf, sizeof buf, "%s", s.clear);
			for (char *t = strtok_r(buf, " ", &save); t;
			     t = strtok_r(NULL, " ", &save))
				REQUIRE(cache_clear(E.c, t) == 0, "clear %s",
					t);
		}
		/* another salt, and none: nothing */
		const uint64_t other[] = {SALT_Y, 0};
		for (int k = 0; k < 2; k++) {
			char sb[64];
			int32_t *sy = salted(s.ids, s.n, other[k]);
			cache_req q = {.ids = sy,
				       .n = s.n,
				       .session = cache_salt_session(
					   s.session, other[k], sb, sizeof sb),
				       .max_tokens = 3};
			cache_peek_out po;
			REQUIRE(cache_peek(E.c, &q, &po, err) == 0,
				"%s: peek: %s", s.what, err);
			CHECK(po.tier == CACHE_TIER_NONE && po.start == 0,
			      "%s: a peek %s finds %s at %llu", s.what,
			      k ? "without a salt" : "of another salt",
			      cache_tier_name(po.tier),
			      (unsigned long long)po.start);
			free(sy);
		}
		cache_plan_out pl;
		turn_x(&E, s.ids, s.n, s.session, &pl, s.what);
		printf("  %-24s salt X: %-8s at %4llu\n", s.what,
		       cache_tier_name(pl.tier), (unsigned long long)pl.start);
		CHECK(pl.tier == s.want_tier,
		      "%s: salt X resumed from %s, unsalted from %s", s.what,
		      cache_tier_name(pl.tier), cache_tier_name(s.want_tier));
	}
	free(P);
	free(tail);
	free(P2);
	free(P3);
	free(Gs);
	free(C);
	free(D);
	free(Ei);
	free(E2);
	free(fol);
	toy_close(&E);
}

/* The session spill: a conversation of salt X evicted to the spill (the
 * park too small to hold it) is read back by its own salt's follow-up, and
 * nothing of it is offered to another salt's or an unsalted one. */
static void test_spill(void)
{
	char dir[64];
	snprintf(dir, sizeof dir, "/tmp/moor-salt-spill-XXXXXX");
	REQUIRE(mkdtemp(dir), "mkdtemp");
	cache_cfg cfg;
	cfg_of(&cfg, "sp");
	cfg.park_bytes = 4096;
	cfg.store_bytes = cfg.store_entry_bytes = 0;
	cfg.store_sessions = 0;
	cfg.spill_min_tokens = 100;
	snprintf(cfg.spill_dir, sizeof cfg.spill_dir, "%s", dir);
	cfg.disk_min_free = 0; /* whatever the drive has free */
	toy_env E;
	toy_open(&E, &cfg, 1024, G);
	int32_t *P = toy_ids(300, 21), *D = toy_ids(200, 22),
		*tail = toy_ids(40, 23);
	toy_part(D, P, 0);
	cache_plan_out pl;
	turn_x(&E, P, 300, "a", &pl, "P");
	int32_t *P2 = toy_cat(P, 300, last_gen, 2);
	int32_t *P3 = toy_cat(P2, 302, tail, 40);
	turn_x(&E, D, 200, "b", &pl, "D evicts P");
	char *st = cache_stats_json(E.c);
	json_t *o = json_loads(st, 0, NULL);
	free(st);
	long long saves = json_integer_value(
	    json_object_get(json_object_get(o, "spill"), "evict_saves"));
	json_decref(o);
	CHECK(saves == 1, "P was not written to the spill: %lld saves", saves);
	char err[MOOR_ERRLEN];
	const uint64_t other[] = {SALT_Y, 0};
	for (int k = 0; k < 2; k++) {
		char sb[64];
		int32_t *sy = salted(P3, 342, other[k]);
		cache_req q = {.ids = sy,
			       .n = 342,
			       .session = cache_salt_session("a", other[k], sb,
							     sizeof sb),
			       .max_tokens = 3};
		cache_peek_out po;
		REQUIRE(cache_peek(E.c, &q, &po, err) == 0, "peek: %s", err);
		CHECK(po.tier == CACHE_TIER_NONE && po.start == 0,
		      "a peek %s finds %s at %llu in the spill",
		      k ? "without a salt" : "of another salt",
		      cache_tier_name(po.tier), (unsigned long long)po.start);
		free(sy);
	}
	turn_x(&E, P3, 342, "a", &pl, "P's follow-up");
	printf("  %-24s salt X: %-8s at %4llu\n", "P's follow-up",
	       cache_tier_name(pl.tier), (unsigned long long)pl.start);
	CHECK(pl.tier == CACHE_TIER_SPILL && pl.start >= 300,
	      "salt X's follow-up resumed from %s at %llu, not the spill",
	      cache_tier_name(pl.tier), (unsigned long long)pl.start);
	free(P);
	free(D);
	free(tail);
	free(P2);
	free(P3);
	toy_close(&E);
	char cmd[128];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
	CHECK(system(cmd) == 0, "rm %s", dir);
}

int main(void)
{
	test_transform();
	test_every_tier();
	test_spill();
	return t_done("test_cache_salt_keys");
}
