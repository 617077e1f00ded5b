/* tiers.h: the one table of the caches' tiers, which every process names
 * them by (cached's enum cache_tier, proto's enum proto_tier and their
 * names in the stats, the logs, moorctl, and the gateway's usage frame and
 * peek). A tier added here is named everywhere; its number is on the wire
 * (PLAN_OK, PEEK_OK, END_OK), so a tier keeps its number.
 *
 * X(ID, number, name, source, word):
 *   name    cached's: the stats' keys, the logs, moorctl, CLEAR's tiers;
 *   source  the usage frame's cache.source (what the resume came from);
 *   word    the peek's and the usage frame's cache.tier (the seed's words:
 *           resident, ram_park, ram_snapshot, nvme_spill, ...). */
#ifndef PROTO_TIERS_H
#define PROTO_TIERS_H

#define PROTO_TIERS(X)                                                         \
	X(NONE, 0, "none", "none", "none")                                     \
	X(RESIDENT, 1, "resident", "anchor", "resident")                       \
	X(END, 2, "end", "end", "resident")                                    \
	X(PIN, 3, "pin", "pin", "ram_park")                                    \
	X(PARK, 4, "park", "park", "ram_park")                                 \
	X(STORE, 5, "store", "store", "ram_snapshot")                          \
	X(STASH, 6, "stash", "stash", "resident")                              \
	X(SPILL, 7, "spill", "spill", "nvme_spill")                            \
	X(DISK, 8, "disk", "disk", "nvme_disk")

#define PROTO_TIER_COUNT 9

#endif
