/* test_cache_tier_table: the tiers' one interface (cache_int.h's
 * cache_tier_ops, tiers.c's tables), through the made-up architecture of
 * toy.h:
 *   - the tables agree (cache_tiers_check), every tier of proto's table but
 *     none is in cache_tiers once, each found by its name, and
 *     cache_tier_name is proto_tier_name (unknown numbers: "unknown");
 *   - the memory policy's levels are the seed's order (state store, body
 *     anchors, end anchor, guest stash, parked session, pinned head);
 *   - with every level holding something (a conversation, its pinned head,
 *     a second session that parks it, a guest's stash), each level's
 *     give_back frees one unit at a time and its bytes fall by exactly what
 *     it said it freed, down to 0; the stats carry a part per tier;
 *   - cache_clear takes every RAM tier's name, "ram" and "all", refuses
 *     "none" and an unknown name (MOOR_ERANGE), and "spill" and "disk"
 *     of this cache without a spill_dir (MOOR_EUNSUP: it runs without
 *     them, as their records' on() and their stats' "on" say). */
#include <jansson.h>
#include <unistd.h>

#include "cache_int.h"
#include "moor.h"
#include "proto.h"
#include "toy.h"

#define G 32

int main(void)
{
	moor_log_level = getenv("MOOR_DEBUG") ? MOOR_LOG_DEBUG : MOOR_LOG_WARN;
	REQUIRE(cache_tiers_check(), "the tier tables disagree");
	for (int t = 0; t < PROTO_TIER_COUNT; t++)
		CHECK(!strcmp(cache_tier_name(t), proto_tier_name((uint32_t)t)),
		      "tier %d: %s", t, cache_tier_name(t));
	CHECK(!strcmp(cache_tier_name(-1), "unknown") &&
		  !strcmp(cache_tier_name(PROTO_TIER_COUNT), "unknown"),
	      "unknown numbers");
	int seen[PROTO_TIER_COUNT] = {0};
	for (int i = 0; i < CACHE_N_TIERS; i++) {
		const cache_tier_ops *t = cache_tiers[i];
		REQUIRE(t->tier > 0 && t->tier < PROTO_TIER_COUNT, "tier %d",
			t->tier);
		seen[t->tier]++;
		CHECK(cache_tier_named(cache_tier_name(t->tier)) == t,
		      "%s by its name", cache_tier_name(t->tier));
	}
	for (int t = 1; t < PROTO_TIER_COUNT; t++)
		CHECK(seen[t] == 1, "%s in the table %d times",
		      cache_tier_name(t), seen[t]);
	CHECK(cache_tier_named("none") == NULL && cache_tier_named("x") == NULL,
	      "no tier named none or x");
	static const char *const order[CACHE_LV_N] = {
	    "store", "anchors", "end", "stash", "park", "pin"};
	for (int l = 0; l < CACHE_LV_N; l++)
		CHECK(!strcmp(cache_levels[l]->lv_name, order[l]),
		      "level %d is %s, the seed's is %s", l,
		      cache_levels[l]->lv_name, order[l]);

	cache_cfg cfg;
	cache_cfg_defaults(&cfg);
	snprintf(cfg.arena_prefix, sizeof cfg.arena_prefix, "moor-tt-%d",
		 (int)getpid());
	cfg.device_bytes = 16ull << 20;
	cfg.host_bytes = 32ull << 20;
	cfg.mem_ceiling = cfg.mem_peak = 1ull << 40;
	cfg.resident_bytes = 40 * 1088;
	cfg.pin_every = 4 * G;
	cfg.pin_upto = 8 * G;
	cfg.guest_max = 40;
	cfg.guest_margin = 8;
	cfg.stash_bytes = 1 << 20;
	cfg.pin_bytes = 4 << 20;
	cfg.park_bytes = 4 << 20;
	cfg.store_bytes = 4 << 20;
	cfg.store_entry_bytes = 30000;
	toy_env e;
	toy_open(&e, &cfg, 1024, G);
	toy_turn t;
	/* A; A's head pinned by a same-session request parting inside it;
	 * B parks it; a guest of B's leaves its stash */
	int32_t *A = toy_ids(300, 1), *N = toy_ids(600, 2);
	REQUIRE(toy_run(&e, A, 300, "a", 4, &t, 1, "A") == 0, "A");
	int32_t *P = toy_cat(A, 150, N, 100);
	toy_part(P, A, 150);
	REQUIRE(toy_run(&e, P, 250, "a", 4, &t, 1, "P") == 0, "P");
	int32_t *B = toy_cat(P, 70, N + 350, 200);
	toy_part(B, P, 70);
	REQUIRE(toy_run(&e, B, 270, "b", 4, &t, 1, "B") == 0, "B");
	int32_t *Gs = toy_ids(30, 3);
	toy_part(Gs, B, 0);
	REQUIRE(toy_run(&e, Gs, 30, "b", 4, &t, 1, "guest") == 0, "guest");
	REQUIRE(t.plan.guest, "a guest");

	char *js = cache_stats_json(e.c);
	json_t *st = json_loads(js, 0, NULL);
	REQUIRE(st, "stats parse");
	for (int i = 0; i < CACHE_N_TIERS; i++) {
		const cache_tier_ops *ti = cache_tiers[i];
		json_t *part = json_object_get(st, cache_tier_name(ti->tier));
		CHECK(json_is_object(part), "stats: no %s",
		      cache_tier_name(ti->tier));
		/* the NVMe tiers say whether they run, as their stats do:
		 * not here, without a spill_dir */
		CHECK(!(ti->flags & CACHE_TF_NVME) ||
			  (ti->on && !ti->on(e.c) &&
			   json_is_false(json_object_get(part, "on"))),
		      "%s: on", cache_tier_name(ti->tier));
	}
	json_decref(st);
	free(js);

	for (int l = 0; l < CACHE_LV_N; l++) {
		const cache_tier_ops *lv = cache_levels[l];
		uint64_t b = lv->bytes(e.c), units = 0;
		CHECK(b > 0, "level %s holds nothing", lv->lv_name);
		for (;;) {
			uint64_t freed = lv->give_back(e.c),
				 now = lv->bytes(e.c);
			if (!freed) {
				CHECK(now == b,
				      "%s: nothing freed, bytes %llu "
				      "-> %llu",
				      lv->lv_name, (unsigned long long)b,
				      (unsigned long long)now);
				break;
			}
			units++;
			CHECK(now + freed == b,
			      "%s: %llu bytes, freed %llu, now %llu",
			      lv->lv_name, (unsigned long long)b,
			      (unsigned long long)freed,
			      (unsigned long long)now);
			b = now;
			REQUIRE(units < 10000, "%s gives back forever",
				lv->lv_name);
		}
		CHECK(b == 0 && units > 0,
		      "%s: %llu bytes left after %llu units", lv->lv_name,
		      (unsigned long long)b, (unsigned long long)units);
	}

	const char *names[] = {"resident", "end",   "stash", "pin",
			       "park",	   "store", "ram",   "all"};
	for (size_t i = 0; i < sizeof names / sizeof *names; i++)
		CHECK(cache_clear(e.c, names[i]) == 0, "clear %s", names[i]);
	CHECK(cache_clear(e.c, "spill") == MOOR_EUNSUP, "clear spill");
	CHECK(cache_clear(e.c, "disk") == MOOR_EUNSUP, "clear disk");
	CHECK(cache_clear(e.c, "none") == MOOR_ERANGE, "clear none");
	CHECK(cache_clear(e.c, "bogus") == MOOR_ERANGE, "clear bogus");
	CHECK(cache_clear(e.c, NULL) == MOOR_ERANGE, "clear NULL");

	free(A);
	free(N);
	free(P);
	free(B);
	free(Gs);
	toy_close(&e);
	return t_done("test_cache_tier_table");
}
