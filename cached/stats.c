/* stats.c: every cache's counters and bytes as one JSON object
 * (cache_stats_json, cache.h): the resident prefix, the end anchor, the
 * stash, the pin, the park, the state store, the session spill, the disk
 * tier (disk.c's own part), the day's drive writes (ledger.c's) and the
 * memory policy. Reads only: nothing counts a read. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cache_int.h"
#include "moor.h"

char *cache_stats_json(cache *c)
{
	const cache_counters *k = &c->k;
	json_t *r = json_object();
	CACHE_SETI(r, "plans", k->plans);
	CACHE_SETI(r, "commits", k->commits);
	CACHE_SETI(r, "aborts", k->aborts);
	json_t *tiers = json_object();
	for (int t = 0; t < PROTO_TIER_COUNT; t++)
		CACHE_SETI(tiers, cache_tier_name(t), k->tier_hits[t]);
	json_object_set_new(r, "tiers", tiers);

	/* each tier's part, in the lookup order */
	for (int i = 0; i < CACHE_N_TIERS; i++)
		json_object_set_new(r, cache_tier_name(cache_tiers[i]->tier),
				    cache_tiers[i]->stats(c));
	json_object_set_new(r, "disk_writes", cache_ledger_json(c));

	json_t *o = json_object();
	CACHE_SETI(o, "held", cache_held_bytes(c));
	CACHE_SETI(o, "ceiling", c->cfg.mem_ceiling);
	CACHE_SETI(o, "peak", c->cfg.mem_peak);
	CACHE_SETI(o, "refused", k->refused);
	json_object_set_new(o, "unified", json_boolean(c->cfg.unified));
	json_object_set_new(o, "device_arena",
			    json_string(c->cfg.dev_cuda >= 0 ? "cuda" : "shm"));
	json_t *shed = json_object(), *shedb = json_object();
	uint64_t total = 0;
	for (int l = 0; l < CACHE_LV_N; l++) {
		CACHE_SETI(shed, cache_levels[l]->lv_name, k->shed[l]);
		CACHE_SETI(shedb, cache_levels[l]->lv_name, k->shed_bytes[l]);
		total += k->shed[l];
	}
	CACHE_SETI(o, "shed_total", total);
	json_object_set_new(o, "shed", shed);
	json_object_set_new(o, "shed_bytes", shedb);
	CACHE_SETI(o, "dev_used", arena_used(c->dev));
	CACHE_SETI(o, "dev_size", arena_size(c->dev));
	CACHE_SETI(o, "host_used", arena_used(c->host));
	CACHE_SETI(o, "host_size", arena_size(c->host));
	/* shm pages given back by released blocks; blocks the filesystem
	 * had no room for (refused, never a SIGBUS: arena.h) */
	CACHE_SETI(o, "shm_returned",
		   arena_returned(c->dev) + arena_returned(c->host));
	CACHE_SETI(o, "shm_refused",
		   arena_refused(c->dev) + arena_refused(c->host));
	json_object_set_new(r, "memory", o);

	char *s = json_dumps(r, JSON_COMPACT | JSON_PRESERVE_ORDER);
	json_decref(r);
	return s;
}
