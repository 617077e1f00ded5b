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

static json_t *span_json(const span *s, uint64_t budget)
{
	json_t *o = json_object();
	json_object_set_new(o, "bytes", json_integer((json_int_t)s->bytes));
	json_object_set_new(o, "budget", json_integer((json_int_t)budget));
	json_object_set_new(o, "tokens",
			    json_integer((json_int_t)(s->have ? s->top : 0)));
	json_object_set_new(o, "base",
			    json_integer((json_int_t)(s->have ? s->base : 0)));
	json_object_set_new(o, "blocks", json_integer(s->have ? s->n_blk : 0));
	json_t *lines = json_array();
	for (uint32_t i = 0; s->have && i < s->n_anc; i++)
		json_array_append_new(lines,
				      json_integer((json_int_t)s->anc[i].line));
	json_object_set_new(o, "lines", lines);
	json_object_set_new(
	    o, "end",
	    json_boolean(s->have && s->n_anc && s->anc[s->n_anc - 1].end));
	json_object_set_new(o, "taint",
			    s->have && s->taint != NO_TAINT
				? json_integer((json_int_t)s->taint)
				: json_null());
	json_object_set_new(o, "session",
			    s->have && s->session ? json_string(s->session)
						  : json_null());
	return o;
}

#define SETI(o, k, v) json_object_set_new(o, k, json_integer((json_int_t)(v)))

char *cache_stats_json(cache *c)
{
	const cache_counters *k = &c->k;
	json_t *r = json_object();
	SETI(r, "plans", k->plans);
	SETI(r, "commits", k->commits);
	SETI(r, "aborts", k->aborts);
	json_t *tiers = json_object();
	for (int t = 0; t < PROTO_TIER_COUNT; t++)
		SETI(tiers, cache_tier_name(t), k->tier_hits[t]);
	json_object_set_new(r, "tiers", tiers);

	json_t *o = json_object();
	SETI(o, "hits", k->res_hits);
	SETI(o, "misses", k->res_misses);
	SETI(o, "anchors", c->n_anc);
	SETI(o, "anchors_made", k->anchors_made);
	SETI(o, "evictions", k->evictions);
	SETI(o, "bytes", (uint64_t)c->n_anc * anchor_bytes(c));
	SETI(o, "budget", c->cfg.resident_bytes);
	SETI(o, "tokens", c->valid);
	SETI(o, "tokens_saved", k->tokens_saved);
	json_object_set_new(o, "taint",
			    c->taint != NO_TAINT
				? json_integer((json_int_t)c->taint)
				: json_null());
	json_t *lines = json_array();
	for (uint32_t i = 0; i < c->n_anc; i++)
		json_array_append_new(lines,
				      json_integer((json_int_t)c->anc[i].line));
	json_object_set_new(o, "lines", lines);
	json_object_set_new(o, "session",
			    c->res_session ? json_string(c->res_session)
					   : json_null());
	json_object_set_new(r, "resident", o);

	o = json_object();
	SETI(o, "kept", k->end_kept);
	SETI(o, "hits", k->end_hits);
	SETI(o, "dropped", k->end_dropped);
	SETI(o, "skipped", k->end_skipped);
	SETI(o, "bytes", c->end.buf ? anchor_bytes(c) : 0);
	SETI(o, "len", c->end.have ? c->end.len : 0);
	json_object_set_new(o, "have", json_boolean(c->end.have));
	json_object_set_new(o, "taint",
			    c->end.have && c->end.taint != NO_TAINT
				? json_integer((json_int_t)c->end.taint)
				: json_null());
	json_object_set_new(r, "end", o);

	o = json_object();
	SETI(o, "stashes", k->stashes);
	SETI(o, "restores", k->stash_restores);
	SETI(o, "declined", k->stash_declined);
	SETI(o, "dropped", k->stash_dropped);
	SETI(o, "bytes", lv_bytes(c, LV_STASH));
	SETI(o, "budget", c->cfg.stash_bytes);
	SETI(o, "rows", c->stash.have ? c->stash.hi - c->stash.lo : 0);
	json_object_set_new(r, "stash", o);

	o = span_json(&c->pin, c->cfg.pin_bytes);
	SETI(o, "pins", k->pins);
	SETI(o, "hits", k->pin_hits);
	SETI(o, "dropped", k->pin_dropped);
	json_object_set_new(r, "pin", o);

	o = span_json(&c->park, c->cfg.park_bytes);
	SETI(o, "parks", k->parks);
	SETI(o, "park_hits", k->park_hits);
	SETI(o, "dropped", k->park_dropped);
	SETI(o, "blocks_swapped", k->park_blocks_swapped);
	json_object_set_new(r, "park", o);

	o = json_object();
	SETI(o, "hits", k->st_hits);
	SETI(o, "misses", k->st_misses);
	SETI(o, "puts_prefix", k->st_puts_prefix);
	SETI(o, "puts_session", k->st_puts_session);
	SETI(o, "declined_big", k->st_declined_big);
	SETI(o, "declined_short", k->st_declined_short);
	SETI(o, "declined_room", k->st_declined_room);
	SETI(o, "duplicates", k->st_dup);
	SETI(o, "evictions", k->st_evictions);
	SETI(o, "entries", c->n_st);
	SETI(o, "bytes", c->st_bytes);
	SETI(o, "budget", c->cfg.store_bytes);
	SETI(o, "entry_budget", c->cfg.store_entry_bytes);
	json_t *ent = json_array();
	for (uint32_t i = 0; i < c->n_st; i++) {
		json_t *e = json_object();
		json_object_set_new(e, "kind",
				    json_string(c->st[i].kind == ENTRY_SESSION
						    ? "session"
						    : "prefix"));
		SETI(e, "tokens", c->st[i].len);
		SETI(e, "bytes", c->st[i].bytes);
		SETI(e, "hits", c->st[i].hits);
		json_array_append_new(ent, e);
	}
	json_object_set_new(o, "list", ent);
	json_object_set_new(r, "store", o);

	o = json_object();
	{
		uint64_t ne, nb;
		spill_stats(c, &ne, &nb);
		json_object_set_new(o, "on", json_boolean(c->spill.on));
		SETI(o, "entries", ne);
		SETI(o, "bytes", nb);
		SETI(o, "budget", c->cfg.spill_bytes);
		SETI(o, "saves", c->spill.k.saves);
		SETI(o, "save_failed", c->spill.k.save_failed);
		SETI(o, "restores", c->spill.k.restores);
		SETI(o, "restore_failed", c->spill.k.restore_failed);
		SETI(o, "blocks_written", c->spill.k.blocks_written);
		SETI(o, "blocks_kept", c->spill.k.blocks_kept);
		SETI(o, "anchors_written", c->spill.k.anchors_written);
		SETI(o, "anchors_kept", c->spill.k.anchors_kept);
		SETI(o, "bytes_written", c->spill.k.bytes_written);
		SETI(o, "bytes_read", c->spill.k.bytes_read);
		json_object_set_new(o, "codec",
				    json_boolean(c->cfg.spill_codec));
		SETI(o, "codec_raw", c->spill.k.codec_raw);
		SETI(o, "codec_out", c->spill.k.codec_out);
		SETI(o, "swept", c->spill.k.swept);
		SETI(o, "expired", c->spill.k.expired);
		SETI(o, "evicted", c->spill.k.evicted);
		SETI(o, "evict_saves", c->spill.k.evict_saves);
		SETI(o, "hits", c->spill.k.hits);
		SETI(o, "hit_failed", c->spill.k.hit_failed);
		SETI(o, "refused", c->spill.k.refused);
		SETI(o, "guard_skips", c->spill.k.guard_skips);
		/* saves not tried: too little room to rewrite the entry */
		SETI(o, "save_skipped_room", c->spill.k.save_skipped_room);
		json_object_set_new(o, "last_save_ms",
				    json_real(c->spill.last_save_ms));
		json_object_set_new(o, "last_restore_ms",
				    json_real(c->spill.last_restore_ms));
	}
	json_object_set_new(r, "spill", o);
	json_object_set_new(r, "disk", disk_stats_json(c));
	json_object_set_new(r, "disk_writes", ledger_json(c));

	o = json_object();
	static const char *const lvn[LV_N] = {"store", "anchors", "end",
					      "stash", "park",	  "pin"};
	SETI(o, "held", held_bytes(c));
	SETI(o, "ceiling", c->cfg.mem_ceiling);
	SETI(o, "peak", c->cfg.mem_peak);
	SETI(o, "refused", k->refused);
	json_object_set_new(o, "unified", json_boolean(c->cfg.unified));
	json_object_set_new(o, "device_arena",
			    json_string(c->cfg.dev_cuda >= 0 ? "cuda" : "shm"));
	json_t *shed = json_object(), *shedb = json_object();
	uint64_t total = 0;
	for (int l = 0; l < LV_N; l++) {
		SETI(shed, lvn[l], k->shed[l]);
		SETI(shedb, lvn[l], k->shed_bytes[l]);
		total += k->shed[l];
	}
	SETI(o, "shed_total", total);
	json_object_set_new(o, "shed", shed);
	json_object_set_new(o, "shed_bytes", shedb);
	SETI(o, "dev_used", arena_used(c->dev));
	SETI(o, "dev_size", arena_size(c->dev));
	SETI(o, "host_used", arena_used(c->host));
	SETI(o, "host_size", arena_size(c->host));
	/* shm pages given back by released blocks; blocks the filesystem
	 * had no room for (refused, never a SIGBUS: arena.h) */
	SETI(o, "shm_returned",
	     arena_returned(c->dev) + arena_returned(c->host));
	SETI(o, "shm_refused", arena_refused(c->dev) + arena_refused(c->host));
	json_object_set_new(r, "memory", o);

	char *s = json_dumps(r, JSON_COMPACT | JSON_PRESERVE_ORDER);
	json_decref(r);
	return s;
}
