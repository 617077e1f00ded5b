/* tiers.c: the table of cached's tiers (the interface is cache_int.h's
 * tier_ops; each tier's record is in its own file). The planner asks them
 * in the seed's lookup order, the memory policy gives back in the seed's
 * order of levels, clear and the stats walk the lookup order. A new tier
 * is a record in a new file and a line here. */
#include <string.h>

#include "cache_int.h"
#include "moor.h"

/* The stash offers nothing (a guest's rows are put back before a plan
 * asks); it stands third for the stats' order. */
const tier_ops *const cache_tiers[CACHE_N_TIERS] = {
    &tier_resident, &tier_end,	 &tier_stash, &tier_pin,
    &tier_park,	    &tier_store, &tier_spill, &tier_disk,
};

const tier_ops *const cache_levels[LV_N] = {
    [LV_STORE] = &tier_store, [LV_ANCHORS] = &tier_resident,
    [LV_END] = &tier_end,     [LV_STASH] = &tier_stash,
    [LV_PARK] = &tier_park,   [LV_PIN] = &tier_pin,
};

/* Every level's record says it is that level (checked at cache_new). */
int tiers_check(void)
{
	for (int l = 0; l < LV_N; l++)
		if (cache_levels[l]->level != l || !cache_levels[l]->give_back)
			return 0;
	for (int i = 0; i < CACHE_N_TIERS; i++) {
		const tier_ops *t = cache_tiers[i];
		if (!t->bytes || !t->clear || !t->stats ||
		    (t->offer && (!t->restore || !t->restore_bytes)) ||
		    (t->level >= 0 && cache_levels[t->level] != t))
			return 0;
	}
	return 1;
}

const tier_ops *tier_named(const char *name)
{
	for (int i = 0; name && i < CACHE_N_TIERS; i++)
		if (!strcmp(cache_tier_name(cache_tiers[i]->tier), name))
			return cache_tiers[i];
	return NULL;
}

uint64_t tier_secs_bytes(cache *c, const tier_offer *o)
{
	return c->sec_bytes;
}

uint64_t tier_rows_bytes(cache *c, const tier_offer *o)
{
	return c->sec_bytes + (o->start - o->k) * c->row_bytes;
}
