/* test_cache_peek: cache_peek answers what the next cache_plan does and
 * changes nothing (toy.h's architecture).
 *
 * Two caches run the same turns side by side: a cold prompt, a follow-up
 * that shares its prefix (resident anchor), one that sends the reply back
 * (the end anchor), a guest, the host's next turn (its stash put back), a
 * compaction (the head pinned) and the old conversation again (pin), a
 * second session (the rows parked) and the first again (park; the store,
 * which would start later, is cleared before these two), a no_cache
 * request (the rows it writes over are cut), a store hit once the rows in
 * place, the pin, the park and the end anchor are cleared, and a peek
 * while a turn is in flight. Cache A is peeked before every plan (twice,
 * and once mid-turn); cache B never. For every turn:
 *   - the peek's tier, start, taint and guest equal the plan's that
 *     follows, and its restore_bytes equal what that tier copies (with no
 *     drive read: read_us 0);
 *   - cache_stats_json of A is byte-identical before and after the peeks;
 *   - A's plan equals B's (start, taint, tier, guest, every slot's line and
 *     arena offset), A's stats equal B's after the commit, and the resumed
 *     state equals a cold prefill's bits (toy.h's check).
 * Then the peek's refusals: no hello, an empty prompt, one past the
 * window, a prefill over mem_peak; each changes nothing either. */
#include <jansson.h>
#include <unistd.h>

#include "moor.h"
#include "toy.h"

#define G 16
#define SEC_BYTES (TOY_S0 + TOY_S1)

static void cfg_of(cache_cfg *cfg, const char *name)
{
	cache_cfg_defaults(cfg);
	snprintf(cfg->arena_prefix, sizeof cfg->arena_prefix, "moor-peek-%s-%d",
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

/* A turn as toy_run does it, with no_cache, and with a peek of other ids
 * between the plan and the prefill (a gateway's peek while a turn runs). */
static int32_t last_gen[2]; /* the tokens the last turn's state absorbed */

static void turn_run(toy_env *e, const int32_t *ids, uint64_t n,
		     const char *session, int no_cache, const int32_t *mid,
		     uint64_t n_mid, cache_plan_out *plan, const char *what)
{
	char err[MOOR_ERRLEN] = "";
	cache_req r = {.ids = ids,
		       .n = n,
		       .session = session,
		       .max_tokens = 3,
		       .no_cache = no_cache};
	int rc = cache_plan(e->c, &r, plan, err);
	REQUIRE(rc == 0, "%s: plan: %s", what, err);
	if (mid) {
		char *s0 = cache_stats_json(e->c);
		cache_req q = {.ids = mid,
			       .n = n_mid,
			       .session = session,
			       .max_tokens = 3};
		cache_peek_out po;
		CHECK(cache_peek(e->c, &q, &po, err) == 0, "%s: mid peek: %s",
		      what, err);
		char *s1 = cache_stats_json(e->c);
		CHECK(!strcmp(s0, s1), "%s: a peek mid-turn changed the stats",
		      what);
		free(s0);
		free(s1);
	}
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
	REQUIRE(cache_commit(e->c, (uint32_t)filled, gen, 2) == 0, "%s: commit",
		what);
}

static int plan_eq(const cache_plan_out *a, const cache_plan_out *b)
{
	if (a->start != b->start || a->taint != b->taint ||
	    a->tier != b->tier || a->guest != b->guest ||
	    a->n_slots != b->n_slots)
		return 0;
	for (uint32_t i = 0; i < a->n_slots; i++)
		if (a->slots[i].line != b->slots[i].line ||
		    a->slots[i].offset != b->slots[i].offset)
			return 0;
	return 1;
}

typedef struct step {
	const int32_t *ids;
	uint64_t n;
	const char *session;
	int no_cache;
	const char *clear; /* cleared in both caches before the turn */
	int want_tier;	   /* -1: any */
	const char *what;
} step;

static uint64_t row_bytes;

/* What a tier's restore copies, as cache.h says (k = 0 here: the rows in
 * place share nothing with a pin or store source in these turns, or the
 * restore copies from the shared line the peek saw). */
static void check_restore_bytes(const cache_peek_out *p, uint64_t stash_rows,
				uint64_t park_rows, const char *what)
{
	uint64_t want = stash_rows * row_bytes;
	switch (p->tier) {
	case CACHE_TIER_NONE:
		break;
	case CACHE_TIER_RESIDENT:
	case CACHE_TIER_END:
	case CACHE_TIER_STASH:
		want += SEC_BYTES;
		break;
	case CACHE_TIER_PARK:
		want += SEC_BYTES + park_rows * row_bytes;
		break;
	default: /* pin, store: rows [k, start) with k <= start */
		CHECK(p->restore_bytes >= want + SEC_BYTES &&
			  p->restore_bytes <=
			      want + SEC_BYTES + p->start * row_bytes &&
			  (p->restore_bytes - want - SEC_BYTES) % row_bytes ==
			      0,
		      "%s: restore_bytes %llu for %s at %llu", what,
		      (unsigned long long)p->restore_bytes,
		      cache_tier_name(p->tier), (unsigned long long)p->start);
		return;
	}
	CHECK(p->restore_bytes == want,
	      "%s: restore_bytes %llu, want %llu (%s)", what,
	      (unsigned long long)p->restore_bytes, (unsigned long long)want,
	      cache_tier_name(p->tier));
}

static long long jget(cache *c, const char *tier, const char *name)
{
	char *s = cache_stats_json(c);
	json_t *r = json_loads(s, 0, NULL);
	free(s);
	REQUIRE(r, "stats parse");
	json_t *v = json_object_get(json_object_get(r, tier), name);
	long long x = json_is_integer(v) ? json_integer_value(v) : 0;
	json_decref(r);
	return x;
}

static void test_peek_equals_plan(void)
{
	cache_cfg ca, cb;
	cfg_of(&ca, "a");
	cfg_of(&cb, "b");
	toy_env A, B;
	toy_open(&A, &ca, 1024, G);
	toy_open(&B, &cb, 1024, G);
	row_bytes = cache_layout_row_bytes(A.lay);

	int32_t *P = toy_ids(300, 3);
	/* P's follow-up: P, then tokens the model did not generate */
	int32_t *tail = toy_ids(60, 11);
	int32_t *P2 = toy_cat(P, 300, tail, 60);
	int32_t *P3 = toy_cat(P2, 360, tail, 30);
	int32_t *Gs = toy_ids(40, 12); /* a guest: 40 <= 50, 4*40 < 392 */
	int32_t *C = toy_ids(200, 4);  /* a compaction of session a */
	toy_part(C, P, 0);
	int32_t *D = toy_ids(200, 5); /* session b */
	toy_part(D, C, 0);
	int32_t *Q = toy_ids(250, 6);
	toy_part(Q, D, 0);
	int32_t *E = toy_ids(250, 7);
	toy_part(E, Q, 0);
	int32_t *E2 = toy_cat(E, 250, tail, 20);
	int32_t *mid = toy_cat(P, 300, tail, 40);

	/* the generated tokens the follow-ups' prompts share are whatever
	 * the model made: the follow-ups below share P (300) and then part,
	 * which is what a client that edits the reply sends */
	step steps[] = {
	    {P, 300, "a", 0, NULL, CACHE_TIER_NONE, "cold P"},
	    {P2, 360, "a", 0, NULL, CACHE_TIER_RESIDENT, "P2 follows P"},
	    {NULL, 0, "a", 0, NULL, CACHE_TIER_END, "P2 + its reply + 5"},
	    {Gs, 40, "g", 0, NULL, CACHE_TIER_NONE, "a guest"},
	    {P3, 390, "a", 0, NULL, CACHE_TIER_STASH, "P3 after the guest"},
	    {C, 200, "a", 0, NULL, CACHE_TIER_NONE, "C compacts: a pin"},
	    {P3, 390, "a", 0, "store", CACHE_TIER_PIN, "P3 from the pin"},
	    {D, 200, "b", 0, NULL, CACHE_TIER_NONE, "D: P3 parked"},
	    {P3, 390, "a", 0, "store", CACHE_TIER_PARK, "P3 from the park"},
	    {Q, 250, "c", 1, NULL, CACHE_TIER_NONE, "no_cache"},
	    {E, 250, "d", 0, NULL, CACHE_TIER_NONE, "E: a prefix snapshot"},
	    {E2, 270, "d", 0, "pin park resident end", CACHE_TIER_STORE,
	     "E2 from the store"},
	    {P, 300, "a", 0, NULL, -1, "P with a peek mid-turn"},
	};
	char err[MOOR_ERRLEN];
	int32_t *fol = NULL; /* a follow-up of the turn before: its prompt,
			      * the reply its state absorbed, 5 more */
	const step *prev = NULL;
	for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++) {
		step sc = steps[i];
		const step *s = &sc;
		if (!sc.ids) {
			REQUIRE(prev, "a follow-up of nothing");
			int32_t *a = toy_cat(prev->ids, prev->n, last_gen, 2);
			free(fol);
			fol = toy_cat(a, prev->n + 2, tail, 5);
			free(a);
			sc.ids = fol;
			sc.n = prev->n + 7;
		}
		prev = &steps[i];
		if (s->clear) {
			char buf[64], *save = NULL;
			snprintf(buf, sizeof buf, "%s", s->clear);
			for (char *t = strtok_r(buf, " ", &save); t;
			     t = strtok_r(NULL, " ", &save)) {
				REQUIRE(cache_clear(A.c, t) == 0, "clear %s",
					t);
				REQUIRE(cache_clear(B.c, t) == 0, "clear %s",
					t);
			}
		}
		uint64_t stash_rows = (uint64_t)jget(A.c, "stash", "rows");
		uint64_t park_rows = (uint64_t)(jget(A.c, "park", "tokens") -
						jget(A.c, "park", "base"));
		cache_req r = {.ids = s->ids,
			       .n = s->n,
			       .session = s->session,
			       .max_tokens = 3,
			       .no_cache = s->no_cache};
		char *s0 = cache_stats_json(A.c);
		cache_peek_out p1, p2;
		REQUIRE(cache_peek(A.c, &r, &p1, err) == 0, "%s: peek: %s",
			s->what, err);
		REQUIRE(cache_peek(A.c, &r, &p2, err) == 0, "%s: peek 2",
			s->what);
		char *s1 = cache_stats_json(A.c);
		CHECK(!strcmp(s0, s1), "%s: the peek changed the stats",
		      s->what);
		CHECK(!memcmp(&p1, &p2, sizeof p1), "%s: two peeks differ",
		      s->what);
		free(s0);
		free(s1);

		int last = i + 1 == sizeof steps / sizeof steps[0];
		static cache_plan_out pa, pb;
		turn_run(&A, s->ids, s->n, s->session, s->no_cache,
			 last ? mid : NULL, 340, &pa, s->what);
		turn_run(&B, s->ids, s->n, s->session, s->no_cache, NULL, 0,
			 &pb, s->what);
		printf("  %-30s peek %-8s at %4llu (restore %6llu B)  plan "
		       "%-8s at %4llu\n",
		       s->what, cache_tier_name(p1.tier),
		       (unsigned long long)p1.start,
		       (unsigned long long)p1.restore_bytes,
		       cache_tier_name(pa.tier), (unsigned long long)pa.start);
		CHECK(p1.tier == pa.tier && p1.start == pa.start &&
			  p1.taint == pa.taint && p1.guest == pa.guest,
		      "%s: peek %s at %llu (taint %lld, guest %d), plan %s at "
		      "%llu (taint %lld, guest %d)",
		      s->what, cache_tier_name(p1.tier),
		      (unsigned long long)p1.start, (long long)p1.taint,
		      p1.guest, cache_tier_name(pa.tier),
		      (unsigned long long)pa.start, (long long)pa.taint,
		      pa.guest);
		CHECK(!p1.gives_back, "%s: gives_back under a 1 TiB peak",
		      s->what);
		CHECK(p1.read_us == 0, "%s: a RAM tier reads no drive: %llu us",
		      s->what, (unsigned long long)p1.read_us);
		if (s->want_tier >= 0)
			CHECK(pa.tier == s->want_tier,
			      "%s: the plan's tier is %s, the turn was meant "
			      "for %s",
			      s->what, cache_tier_name(pa.tier),
			      cache_tier_name(s->want_tier));
		check_restore_bytes(&p1, stash_rows, park_rows, s->what);
		CHECK(plan_eq(&pa, &pb),
		      "%s: the plan after peeks differs from one without",
		      s->what);
		char *sa = cache_stats_json(A.c), *sb = cache_stats_json(B.c);
		CHECK(!strcmp(sa, sb),
		      "%s: stats after the turn differ:\n%s\n%s", s->what, sa,
		      sb);
		free(sa);
		free(sb);
	}
	CHECK(jget(A.c, "stash", "restores") == 1 &&
		  jget(A.c, "pin", "hits") == 1 &&
		  jget(A.c, "park", "park_hits") == 1 &&
		  jget(A.c, "store", "hits") >= 1,
	      "every tier was hit once at least");
	free(P);
	free(tail);
	free(P2);
	free(P3);
	free(Gs);
	free(C);
	free(D);
	free(Q);
	free(E);
	free(E2);
	free(mid);
	free(fol);
	toy_close(&A);
	toy_close(&B);
}

static void test_peek_refusals(void)
{
	cache_cfg cfg;
	cfg_of(&cfg, "bad");
	char err[MOOR_ERRLEN];
	cache *c;
	REQUIRE(cache_new(&cfg, &c, err) == 0, "cache_new: %s", err);
	int32_t ids[4] = {1, 2, 3, 4};
	cache_req r = {.ids = ids, .n = 4};
	cache_peek_out p;
	err[0] = 0;
	CHECK(cache_peek(c, &r, &p, err) == MOOR_ERANGE && strstr(err, "hello"),
	      "before hello: %s", err);
	cache_free(c);

	/* a toy whose prefill needs 1 MiB of workspace a token */
	cache_layout *lay = malloc(sizeof *lay);
	REQUIRE(lay, "oom");
	toy_layout(lay, 1024, G, 7);
	lay->workspace_per_token = 1 << 20;
	cfg.mem_peak = 1 << 20; /* the live buffers fit, 100 tokens do not */
	REQUIRE(cache_new(&cfg, &c, err) == 0, "cache_new: %s", err);
	static cache_hello_out ho;
	REQUIRE(cache_hello(c, lay, &ho, err) == 0, "hello: %s", err);
	char *s0 = cache_stats_json(c);
	r.n = 0;
	CHECK(cache_peek(c, &r, &p, err) == MOOR_ERANGE, "empty prompt");
	r.n = 1025;
	int32_t *big = toy_ids(1025, 1);
	r.ids = big;
	CHECK(cache_peek(c, &r, &p, err) == MOOR_ERANGE &&
		  strstr(err, "window"),
	      "past the window: %s", err);
	r.ids = NULL;
	r.n = 4;
	CHECK(cache_peek(c, &r, &p, err) == MOOR_ERANGE, "no ids");
	CHECK(cache_peek(c, NULL, &p, err) == MOOR_ERANGE, "no request");

	/* a workspace over mem_peak: the plan refuses, so does the peek,
	 * with the same words; the plan counts its refusal, the peek not */
	r.ids = big;
	r.n = 100;
	err[0] = 0;
	CHECK(cache_peek(c, &r, &p, err) == MOOR_ENOSPACE &&
		  strstr(err, "mem_peak"),
	      "peek over mem_peak: %s", err);
	char *s1 = cache_stats_json(c);
	CHECK(!strcmp(s0, s1), "refused peeks changed the stats");
	cache_plan_out po;
	char err2[MOOR_ERRLEN] = "";
	CHECK(cache_plan(c, &r, &po, err2) == MOOR_ENOSPACE,
	      "the plan refuses too");
	CHECK(!strcmp(err, err2), "the same words:\n%s\n%s", err, err2);
	free(s0);
	free(s1);
	free(big);
	cache_free(c);
	free(lay);
}

int main(void)
{
	test_peek_equals_plan();
	test_peek_refusals();
	return t_done("test_cache_peek");
}
