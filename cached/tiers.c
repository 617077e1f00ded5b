/* tiers.c: the table of cached's tiers (the interface is cache_int.h's
 * cache_tier_ops; each tier's record is in its own file). The planner asks them
 * in the seed's lookup order, the memory policy gives back in the seed's
 * order of levels, clear and the stats walk the lookup order. A new tier
 * is a record in a new file and a line here. */
#include <string.h>

#include "cache_int.h"
#include "moor.h"

/* The stash offers nothing (a guest's rows are put back before a plan
 * asks); it stands third for the stats' order. */
const cache_tier_ops *const cache_tiers[CACHE_N_TIERS] = {
    &cache_tier_resident, &cache_tier_end,  &cache_tier_stash,
    &cache_tier_pin,	  &cache_tier_park, &cache_tier_store,
    &cache_tier_spill,	  &cache_tier_disk,
};

const cache_tier_ops *const cache_levels[CACHE_LV_N] = {
    [CACHE_LV_STORE] = &cache_tier_store,
    [CACHE_LV_ANCHORS] = &cache_tier_resident,
    [CACHE_LV_END] = &cache_tier_end,
    [CACHE_LV_STASH] = &cache_tier_stash,
    [CACHE_LV_PARK] = &cache_tier_park,
    [CACHE_LV_PIN] = &cache_tier_pin,
};

/* Every level's record says it is that level, every record has its
 * required members, and an NVMe tier (it runs only with a directory)
 * says whether it runs (checked at cache_new). */
int cache_tiers_check(void)
{
	for (int l = 0; l < CACHE_LV_N; l++)
		if (cache_levels[l]->level != l || !cache_levels[l]->give_back)
			return 0;
	for (int i = 0; i < CACHE_N_TIERS; i++) {
		const cache_tier_ops *t = cache_tiers[i];
		if (!t->bytes || !t->clear || !t->stats ||
		    (t->offer && (!t->restore || !t->restore_bytes)) ||
		    ((t->flags & CACHE_TF_NVME) && !t->on) ||
		    (t->level >= 0 && cache_levels[t->level] != t))
			return 0;
	}
	return 1;
}

const cache_tier_ops *cache_tier_named(const char *name)
{
	for (int i = 0; name && i < CACHE_N_TIERS; i++)
		if (!strcmp(cache_tier_name(cache_tiers[i]->tier), name))
			return cache_tiers[i];
	return NULL;
}

uint64_t cache_tier_secs_bytes(cache *c, const cache_tier_offer *o)
{
	return c->sec_bytes;
}

uint64_t cache_tier_rows_bytes(cache *c, const cache_tier_offer *o)
{
	return c->sec_bytes + (o->start - o->k) * c->row_bytes;
}
