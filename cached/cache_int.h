/* cache_int.h: what the files of cached's core share (not installed, not
 * seen by the daemon's other parts): the cache struct, the tiers' records
 * and the helpers that move a sequence's bytes.
 *
 * Files: cache.c (lifecycle, hello, clear, copies), stats.c (the counters
 * as JSON), planner.c (a turn: plan, commit, abort), resident.c (anchors,
 * their eviction order, the end anchor), stash.c, pin.c, park.c (with
 * span.c, the row blocks both hold), store.c, budget.c (levels and the
 * memory policy), and the NVMe tiers: spill.c, codec.c, disk.c, dfile.c,
 * ledger.c (the day's writes, the write guard, adoption records), kvdb.c
 * (an LMDB environment checked before it is mapped); tiers.c holds the
 * tiers' table.
 *
 * Every name here carries the module's prefix (cache_, CACHE_; the public
 * API is cache.h's); what one file uses alone is static there.
 */
#ifndef CACHE_INT_H
#define CACHE_INT_H

#include <stdint.h>
#include <time.h>

#include "arena.h"
#include "cache.h"
#include "codec.h"

/* An integer member of a JSON object (jansson; the stats' parts). */
#define CACHE_SETI(o, k, v)                                                    \
	json_object_set_new(o, k, json_integer((json_int_t)(v)))

static inline uint64_t cache_min64(uint64_t a, uint64_t b)
{
	return a < b ? a : b;
}

static inline uint64_t cache_max64(uint64_t a, uint64_t b)
{
	return a > b ? a : b;
}

static inline uint64_t cache_round_up(uint64_t x, uint64_t a)
{
	return (x + a - 1) / a * a;
}

/* A view's geometry: `outer` runs (the axes before the token axis), each
 * `inner` bytes a token (the axes after it times elt); rowb = outer*inner
 * bytes a token. */
typedef struct cache_vgeom {
	uint64_t outer, inner, rowb;
} cache_vgeom;

/* Rows [srow, srow + n) of one view in a buffer of swin rows to rows
 * [drow, ...) of one of dwin rows, by mv (`outer` runs of n * inner bytes:
 * one copy2d). Complete after mv's sync. (The cache's own row and section
 * copies go through its batch instead: cache_rows_in/out, the spans.) */
int cache_view_rows(const arena_mover *mv, const cache_vgeom *g, void *dst,
		    uint64_t dwin, uint64_t drow, const void *src,
		    uint64_t swin, uint64_t srow, uint64_t n);

/* A resident anchor: the sections at `line` in the device arena. */
typedef struct cache_anchor {
	uint64_t line;
	uint64_t off;
	int busy; /* the current plan's source: not given back */
} cache_anchor;

/* An anchor a span holds (host arena); end: the end anchor's state. */
typedef struct cache_held_anchor {
	uint64_t line;
	uint64_t off;
	int end;
} cache_held_anchor;

#define CACHE_SPAN_MAX_ANCHORS 16

/* Rows [base, top) of a prompt, kept aside in blocks of `blk` rows (block
 * j holds rows [base + j*blk, base + (j+1)*blk) as a compact rows buffer of
 * window blk, in the host arena), and the anchors above base that resume
 * it. ids[0, top) are the prompt's key ids (the head [0, base) included: a
 * hit compares them all). The pin (base 0) and the park are spans. */
typedef struct cache_span {
	int have;
	int busy;
	int32_t *ids;
	uint64_t base, top;
	uint32_t n_blk;
	uint64_t *blk;
	cache_held_anchor anc[CACHE_SPAN_MAX_ANCHORS];
	uint32_t n_anc;
	uint64_t taint;
	char *session;
	uint64_t bytes; /* blocks and anchors */
	cache_mark *mk; /* the rows' marks (with the end anchor) */
	uint32_t n_mk;
} cache_span;

enum { CACHE_ENTRY_PREFIX = 0, CACHE_ENTRY_SESSION = 1 };

/* A state store snapshot: sections, then rows [0, len) as a compact rows
 * buffer of window len, in the host arena. */
typedef struct cache_store_entry {
	int kind;
	int32_t *ids;
	uint64_t len, hash;
	uint64_t off, bytes;
	uint64_t taint;
	uint64_t tick;
	uint64_t hits;
	int busy;
} cache_store_entry;

/* A slot of the turn in flight. */
typedef struct cache_tslot {
	uint64_t line, off;
	int anchor; /* becomes a resident anchor at commit */
	int store;  /* the prefix snapshot's sections */
	int disk;   /* the disk tier's: staged at commit (disk.c) */
} cache_tslot;

typedef struct cache_turn {
	int active, guest, no_cache;
	int scratch; /* cache_scratch_plan's: its end changes nothing */
	int32_t *ids; /* [window] */
	uint64_t n;
	char *session;
	uint32_t max_tokens;
	uint64_t user_at; /* cache_req's: 0 unknown */
	uint64_t start, taint, cut;
	uint64_t mk_keep; /* the resident marks below it stay at commit */
	cache_mark hid[64]; /* the commit's hidden spans (start: into gen) */
	uint32_t n_hid;
	int tier;
	double t_plan; /* moor_now() at the plan */
	uint32_t n_slots;
	cache_tslot slot[CACHE_MAX_SLOTS];
} cache_turn;

/* Levels of the memory policy, cheapest first (Budget.LEVELS): indices
 * into cache_levels. */
enum {
	CACHE_LV_STORE = 0,
	CACHE_LV_ANCHORS,
	CACHE_LV_END,
	CACHE_LV_STASH,
	CACHE_LV_PARK,
	CACHE_LV_PIN,
	CACHE_LV_N
};

/* ---- the tiers: one interface every cache implements ----
 *
 * The planner asks each tier of cache_tiers, in the seed's lookup order
 * (resident prefix, end anchor, pinned head, parked session, state store,
 * then the session spill and the disk tier), what it offers the prompt,
 * and takes the latest start (a tie stays with the tier asked first, the
 * cheaper restore). The memory policy gives back through the same
 * records, walking cache_levels in the seed's order of levels (Budget.
 * LEVELS: state store, body anchors, end anchor, guest stash, parked
 * session, pinned head). Each tier's record is in its own file. */

/* What a tier is asked with: the prompt, what the rows in place share with
 * it (c_res ids; their taint t_res), lim = min(c_res, n - 1), whether it
 * runs as a guest, and `best`, the latest start offered so far (0: none).
 * An offer sets the tier's bit in `seen` when the tier holds an entry for
 * the prompt at all (offered or not: the store's miss count). */
typedef struct cache_tier_ask {
	const cache_req *r;
	uint64_t c_res, t_res, lim;
	int guest;
	uint64_t best;
	uint32_t seen;
} cache_tier_ask;

/* An offer: the state is restored to `start` (< n; its ids compared with
 * the prompt's element by element); rows in place below k stay and [k,
 * start) are the tier's copy; the resident prompt is cut to `cut`; taint
 * is the plan's taint line before the planner's off-grid rule. src and
 * name say which of the tier's entries (a span's anchor, a store entry, a
 * spill entry). */
typedef struct cache_tier_offer {
	uint64_t start, k, cut, taint;
	int src;
	char name[17];
} cache_tier_offer;

enum {
	CACHE_TF_HOST = 1,     /* its bytes are in the host arena: counted by
				* the memory policy only when cfg.unified */
	CACHE_TF_NVME = 2,     /* on the drive: not a "ram" tier; cleared
				* without a layout; a restore that fails costs
				* the entry, and the prompt prefills cold */
	CACHE_TF_IN_PLACE = 4, /* resumes on the rows in place (a guest stash
				* put back above its line reports STASH) */
	CACHE_TF_MARKS = 8,    /* its restore brings its rows' marks back */
	CACHE_TF_CUTS = 16,    /* its restore cuts the rows in place itself */
};

/* A tier. Members marked optional may be NULL. */
typedef struct cache_tier_ops {
	int tier;	     /* CACHE_TIER_*: its name is proto_tier_name's */
	int level;	     /* CACHE_LV_*, -1: not a memory policy level */
	const char *lv_name; /* the level's name in the stats (memory.shed) */
	unsigned flags;	     /* CACHE_TF_* */
	/* Optional (the stash offers nothing: it is put back first). 1 when
	 * the tier offers a line above q->best, described in *o. Changes
	 * nothing, counts nothing (peek calls it). */
	int (*offer)(cache *c, cache_tier_ask *q, cache_tier_offer *o);
	/* Optional. Marks the offer's source as the plan's (on = 1) so the
	 * memory policy and the other caches leave it, or unmarks it. */
	void (*busy)(cache *c, const cache_tier_offer *o, int on);
	/* The offer's state into the live buffers (rows [k, start), the
	 * sections at start), every id of ids[0, start) it copies compared
	 * first. Required where offer is. */
	int (*restore)(cache *c, const cache_tier_offer *o, const int32_t *ids,
		       uint64_t limit);
	/* Bytes that restore would copy into the live sequence (peek). */
	uint64_t (*restore_bytes)(cache *c, const cache_tier_offer *o);
	/* Optional (the NVMe tiers): the rate its restore reads the drive
	 * at, bytes a second (its last restore's, else its prior): the
	 * peek's read time, restore_bytes at this rate. */
	double (*read_bps)(cache *c);
	/* Optional. A prompt it could have served that another source won
	 * (its start): the tier's log line and count. */
	void (*refused)(cache *c, const int32_t *ids, uint64_t n,
			uint64_t start);
	uint64_t (*bytes)(cache *c); /* bytes it holds now */
	/* Optional (the NVMe tiers keep their own budgets on the drive).
	 * Gives back one unit (an entry, an anchor, a whole span); the bytes
	 * freed, 0 when nothing of it may go. */
	uint64_t (*give_back)(cache *c);
	int (*clear)(cache *c);
	struct json_t *(*stats)(cache *c); /* its part of the stats */
	/* Optional (NULL: always, the RAM tiers; required of a
	 * CACHE_TF_NVME tier). Whether this cache runs with the tier (its
	 * stats' "on"): CLEAR of a tier it runs without is refused, "all"
	 * leaves it out. */
	int (*on)(const cache *c);
} cache_tier_ops;

extern const cache_tier_ops cache_tier_resident, cache_tier_end,
    cache_tier_stash, cache_tier_pin, cache_tier_park, cache_tier_store,
    cache_tier_spill, cache_tier_disk;
#define CACHE_N_TIERS 8
/* Lookup order (tiers.c); the stats' order too. */
extern const cache_tier_ops *const cache_tiers[CACHE_N_TIERS];
/* The memory policy's levels, cheapest first: cache_levels[CACHE_LV_*]. */
extern const cache_tier_ops *const cache_levels[CACHE_LV_N];
/* The tier of cached's name (cache_tier_name); NULL: none. */
const cache_tier_ops *cache_tier_named(const char *name);
/* 1 when the tables agree (each level's record is that level's, the
 * required members are there). */
int cache_tiers_check(void);
/* restore_bytes of a tier that resumes on the rows in place (the
 * sections), and of one that copies the rows [k, start) too. */
uint64_t cache_tier_secs_bytes(cache *c, const cache_tier_offer *o);
uint64_t cache_tier_rows_bytes(cache *c, const cache_tier_offer *o);

typedef struct cache_counters {
	uint64_t plans, commits, aborts, refused, cold;
	uint64_t tier_hits[PROTO_TIER_COUNT];
	/* resident */
	uint64_t res_hits, res_misses, anchors_made, evictions, tokens_saved;
	/* end */
	uint64_t end_kept, end_hits, end_dropped, end_skipped;
	/* stash */
	uint64_t stashes, stash_restores, stash_declined, stash_dropped;
	/* pin */
	uint64_t pins, pin_hits, pin_dropped;
	/* park */
	uint64_t parks, park_hits, park_dropped, park_blocks_swapped;
	/* store */
	uint64_t st_hits, st_misses, st_puts_prefix, st_puts_session,
	    st_declined_big, st_declined_short, st_declined_room, st_evictions,
	    st_dup;
	/* memory */
	uint64_t shed[CACHE_LV_N], shed_bytes[CACHE_LV_N];
} cache_counters;

/* Copies gathered into one batch of the mover's (cache.c), at most. */
#define CACHE_XQ_MAX 256

struct cache {
	cache_cfg cfg;
	arena *dev, *host;
	const arena_mover *mv;
	arena_mover *mv_own; /* the CUDA mover, freed at cache_free */
	arena_copy *xq;	     /* [CACHE_XQ_MAX] a batch being gathered, n_xq:
				the thread's that holds the cache (cache_rows_*,
				cache_secs_* gather here; no other thread may
				call them meanwhile) */
	uint32_t n_xq;
	int xq_lane; /* the mover's lane it goes to (0 but in the park swap) */
	/* MOOR_MOVER_TRACE=1 (cache_mover_stats): a plan's copies, logged at
	 * the sync after it */
	struct {
		int on, armed;
		double t0, t_plan; /* the plan's start and end */
		arena_mover_stats s0; /* the counters at its start */
		uint64_t n, start, bytes;
		int tier;
	} trace;

	int have_layout;
	cache_layout *lay;
	uint64_t sec_bytes, row_bytes;
	cache_vgeom *vg;
	uint64_t *sec_off, *view_off; /* live buffers, device arena */

	/* the resident prompt: rows [0, valid) hold res_ids[0, valid) */
	int32_t *res_ids; /* [window] */
	uint64_t valid;
	uint64_t taint;
	char *res_session;
	cache_mark *mk; /* marks on rows [0, valid), ascending starts */
	uint32_t n_mk, cap_mk;
	cache_anchor *anc; /* ascending lines */
	uint32_t n_anc, cap_anc;
	int protect_anchors; /* a pin or park is copying them */

	struct {
		int have; /* holds the state at len */
		int buf;  /* off is allocated */
		int busy;
		uint64_t len, taint, off;
	} end;

	struct {
		int have;
		uint64_t lo, hi, off;
	} stash;

	cache_span pin, park;

	cache_store_entry *st;
	uint32_t n_st, cap_st;
	uint64_t st_bytes, tick;
	uint64_t *ph; /* [window + 1] prefix hashes of the prompt planned */
	uint64_t declined_hash; /* the last conversation whose decline was
				 * logged (said once per conversation) */

	cache_turn t;
	cache_counters k;

	struct {
		int on;
		int dfd;	 /* DIR/sessions */
		/* the entries this layout reads (spill_index_*): their ids,
		 * lines and the end, for the planner's offer */
		struct cache_spill_ent *ent;
		uint32_t n_ent;
		double read_bps; /* measured by the last restore */
		struct moor_pool *pool; /* the codec's threads (NULL: one) */
		codec_ws cws;		/* the codec's buffers, kept */
		uint64_t digest; /* the attached layout's */
		double last_save_ms, last_restore_ms;
		struct {
			uint64_t saves, save_failed, restores, restore_failed,
			    blocks_written, blocks_kept, anchors_written,
			    anchors_kept, blocks_unread, anchors_unread,
			    bytes_written, bytes_read, swept, expired, evicted,
			    codec_raw, codec_out, evict_saves, hits, hit_failed,
			    refused, guard_skips, save_skipped_room,
			    floor_binds, floor_evicted;
		} k;
	} spill;

	struct cache_disk_tier *disk; /* disk.c; NULL: off */
	struct cache_ledger *ledger;  /* ledger.c; NULL: no NVMe directory */

	/* the engine's prefill rate (tokens/s), from a plan to its commit
	 * over the last 8 turns that forwarded at least 1,024 tokens (the
	 * decode counts in: each is a lower bound of it) */
	double rate[8];
	uint32_t n_rate;
};

/* ---- cache.c: byte movement between live buffers and arena memory ---- */
void *cache_dev_at(cache *c, uint64_t off);
void *cache_host_at(cache *c, uint64_t off);
/* Live sections to dst (back to back, layout order), or from src: one
 * batch of the mover's. */
int cache_secs_out(cache *c, void *dst);
int cache_secs_in(cache *c, const void *src);
int cache_secs_zero(cache *c);
/* Rows [live_row, live_row + n) of every view to (out) or from (in) a
 * compact rows buffer of window bwin, at its row brow: one batch of the
 * mover's. */
int cache_rows_out(cache *c, void *buf, uint64_t bwin, uint64_t brow,
		   uint64_t live_row, uint64_t n);
int cache_rows_in(cache *c, const void *buf, uint64_t bwin, uint64_t brow,
		  uint64_t live_row, uint64_t n);
/* The same copies added to the batch being gathered (c->xq), which
 * cache_xq_flush hands to the mover (arena_mover.copyv; copy2d each
 * where it has none). Copies of one batch run in no order: none may
 * write what another reads or writes (a span's blocks, in or out). A
 * full batch is handed over as it fills. */
int cache_rows_add(cache *c, int out, void *buf, uint64_t bwin, uint64_t brow,
		   uint64_t live_row, uint64_t n);
/* cache_rows_add of the views v with pick[v] != 0 ([n_views]; NULL:
 * every view); the others' places in buf are left as they are. */
int cache_rows_add_some(cache *c, int out, void *buf, uint64_t bwin,
			uint64_t brow, uint64_t live_row, uint64_t n,
			const uint8_t *pick);
int cache_xq_flush(cache *c);
/* MOOR_MOVER_TRACE: a plan begins (begin 1: the counters noted), or has
 * answered (begin 0: what it restored, logged at the next cache_sync). */
void cache_trace_plan(cache *c, int begin, uint64_t n, uint64_t start,
		      int tier, uint64_t bytes);
/* The mover's lanes (arena.h; the park's swap runs on two). cache_lanes:
 * whether the mover has them (without, everything runs in call order and
 * mark and after do nothing). cache_rows_lane: cache_rows_out (out) or
 * _in as one batch on lane. */
int cache_lanes(const cache *c);
int cache_lane_mark(cache *c, int lane, uint64_t *pt);
int cache_lane_after(cache *c, int lane, uint64_t pt);
int cache_rows_lane(cache *c, int lane, int out, void *buf, uint64_t bwin,
		    uint64_t brow, uint64_t live_row, uint64_t n);
uint64_t cache_common_prefix(const int32_t *a, uint64_t na, const int32_t *b,
			     uint64_t nb);
uint64_t cache_ids_hash(const int32_t *ids, uint64_t n);
int cache_session_same(const char *a, const char *b);
int cache_session_none(const char *s);
char *cache_str_dup(const char *s);

/* ---- budget.c ---- */
uint64_t cache_held_bytes(cache *c);
int cache_lv_counts(cache *c, int lv);
uint64_t cache_lv_bytes(cache *c, int lv);
/* Allocates `bytes` for a cache of level lv in the device (host = 0) or
 * host arena while the counted bytes stay under `limit`, giving back
 * cheaper levels first (a more valuable cache takes the room of cheaper
 * ones). MOOR_ENOSPACE when it cannot. */
int cache_budget_grow(cache *c, int lv, int host, uint64_t bytes,
		      uint64_t limit, uint64_t *off);
/* The same, giving nothing back: room that is free now or MOOR_ENOSPACE
 * (what only speeds something up, the park swap's second bounce). */
int cache_budget_try(cache *c, int host, uint64_t bytes, uint64_t limit,
		     uint64_t *off);
/* The memory policy before a prefill needing ws bytes of workspace (and,
 * for a guest, *stash_need bytes of stash): gives back cheapest first;
 * sets *stash_need to 0 when the stash is the level that gives. Nothing is
 * given back when the prefill cannot fit at all: MOOR_ENOSPACE. *gave
 * counts the units given back. */
int cache_policy_fit(cache *c, uint64_t ws, uint64_t *stash_need, int *gave,
		     char *err);
uint64_t cache_plan_limit(cache *c, uint64_t ws);
/* The counted bytes no cache can give back (the live buffers, a turn's
 * slots); *givable (may be NULL) gets what the caches could. */
uint64_t cache_policy_floor(cache *c, uint64_t *givable);

/* ---- resident.c ---- */
uint64_t cache_anchor_bytes(cache *c);
int cache_anchor_pin_kept(cache *c, uint64_t line);
int cache_anchor_find(cache *c, uint64_t line);
void cache_anchors_clear(cache *c);
/* Inserts an anchor at line whose sections are at off (device). */
int cache_anchor_insert(cache *c, uint64_t line, uint64_t off);
/* Which of the candidate new lines (ascending, all above every anchor)
 * get a slot: the budget keeps the newest `keep`, then the pin's lines,
 * then the highest others; evicts the anchors that lose. keep[i] = 1 for
 * the lines that get one. */
void cache_anchors_plan_slots(cache *c, const uint64_t *lines, uint32_t n,
			      int *keep);
/* A copy of src (host or device memory the mover reaches) as an anchor. */
int cache_anchor_adopt(cache *c, uint64_t line, const void *src,
		       uint64_t limit);
/* The live sections (a restore's state at line, just copied in) as an
 * anchor: a copy within the device arena, where cache_anchor_adopt from
 * the host copy crosses PCIe again (on CUDA 157 MB of the 27B: 3 ms from
 * the registered host arena, about 26 from a pageable buffer). */
int cache_anchor_adopt_live(cache *c, uint64_t line, uint64_t limit);
/* cache_anchor_adopt in two halves, so that the copy can run elsewhere
 * (the disk tier's restore: a thread of its own on a host-mapped arena).
 * reserve: 1 when no anchor is to be made (line has one, or anchors are
 * off), else the budget's block of sec_bytes under limit at *off (0) or
 * a negative code. place: the block at off, its sections written, becomes
 * the anchor at line (the budget's evictions follow); on failure the block
 * is released. A reserved block that is not placed is the caller's to
 * release (arena_release on c->dev). */
int cache_anchor_reserve(cache *c, uint64_t line, uint64_t limit,
			 uint64_t *off);
int cache_anchor_place(cache *c, uint64_t line, uint64_t off);
uint64_t cache_anchor_top(cache *c); /* the largest line, 0 if none */
/* The resident prompt keeps rows [0, line): anchors above, and the end
 * anchor past it, go. */
void cache_resident_cut(cache *c, uint64_t line);
void cache_end_release(cache *c);
/* Marks: those ending above line go; one appended (ascending). */
void cache_marks_cut(cache *c, uint64_t line);
int cache_marks_add(cache *c, uint64_t start, uint64_t len, uint32_t kind);
/* A copy of the resident marks below line (malloc'd; NULL when none). */
cache_mark *cache_marks_copy(const cache *c, uint64_t line, uint32_t *n);
/* The live sections copied into the end anchor's block (kept between
 * calls), as the end anchor of len tokens. */
int cache_end_keep(cache *c, uint64_t len, uint64_t taint);
/* cache_end_keep in two halves, so that the copy can run elsewhere (the
 * spill's read-back: on its pool, from the file's bytes). reserve: the
 * end's block at *off (the one it holds, else the budget's; a negative
 * code when none can be had), the end no longer had; mark: its sections
 * written, it is the end anchor of len tokens. */
int cache_end_reserve(cache *c, uint64_t *off);
void cache_end_mark(cache *c, uint64_t len, uint64_t taint);

/* ---- stash.c ---- */
int cache_stash_make(cache *c, uint64_t lo, uint64_t hi, uint64_t limit);
int cache_stash_restore(cache *c);
void cache_stash_drop(cache *c); /* rows not put back: the resident is cut */

/* ---- span.c ---- */
uint64_t cache_span_blk_rows(cache *c);
uint64_t cache_span_blk_bytes(cache *c);
uint32_t cache_span_blocks(cache *c, uint64_t rows);
void cache_span_free(cache *c, cache_span *s);
int cache_span_alloc_blocks(cache *c, cache_span *s, uint32_t n, int lv,
			    uint64_t limit);
/* Copies the span's rows [a, b) (base <= a <= b <= top) into the live
 * buffers, or the live rows into the span's blocks. */
int cache_span_rows_in(cache *c, const cache_span *s, uint64_t a, uint64_t b);
int cache_span_rows_out(cache *c, const cache_span *s, uint64_t a, uint64_t b);
/* The largest held anchor line <= lim (index), -1 if none. */
int cache_span_anchor_le(const cache_span *s, uint64_t lim, int with_end);
/* The span's part of the stats (the pin's, the park's). */
struct json_t *cache_span_json(const cache_span *s, uint64_t budget);

/* ---- pin.c ---- */
/* The head a pin of the rows in place would hold: its length and the
 * anchors (indices into c->anc, ascending) it takes. */
uint64_t cache_pin_head(cache *c, uint32_t *idx, uint32_t *n_idx);
int cache_pin_make(cache *c, uint64_t limit);
void cache_pin_drop(cache *c);

/* ---- park.c ---- */
/* What a park of the rows in place from `base` would hold: its top (0:
 * nothing worth parking), the anchors (indices into c->anc) and whether
 * the end anchor goes along. */
uint64_t cache_park_choose(cache *c, uint64_t base, uint32_t *idx,
			   uint32_t *n_idx, int *with_end);
int cache_park_make(cache *c, uint64_t base, uint64_t limit);
/* The park comes back: parks the rows in place from its base (block by
 * block), and restores the state at the park anchor hi. */
int cache_park_swap(cache *c, int hi, uint64_t limit);
void cache_park_drop(cache *c);

/* ---- store.c ---- */
void cache_store_prefix_hashes(cache *c, const int32_t *ids, uint64_t n);
int cache_store_has(cache *c, const int32_t *ids, uint64_t len);
/* Puts a snapshot of sections `secs` (device or host memory; NULL: the
 * live sections) and the live rows [0, len). */
int cache_store_put(cache *c, int kind, const int32_t *ids, uint64_t len,
		    uint64_t taint, const void *secs, const char *session);
uint64_t cache_store_entry_size(cache *c, uint64_t len);
void cache_store_clear(cache *c);
void cache_store_declined(cache *c, const char *why, uint64_t len,
			  uint64_t bytes, const char *session);

/* ---- spill.c ---- */
/* Opens DIR/sessions (cfg.spill_dir; nothing when empty): deletes .tmp
 * files, entries without a manifest and entries past the TTL. */
int cache_spill_open(cache *c, char *err);
void cache_spill_close(cache *c);
/* After the live buffers are carved for a new layout: deletes the entries
 * this layout and fingerprint cannot read and reads the drained resident
 * conversation back into the live buffers (a failure costs the entry and
 * leaves them empty; it is logged, never returned). */
int cache_spill_read_back(cache *c);
/* The entry name of offer i (valid until the next spill call). */
const char *cache_spill_ent_name(cache *c, int i);
/* An eviction: the resident conversation, about to be replaced by another
 * session's rows from `base`, is written to the spill when it holds at
 * least spill_min_tokens and the park cannot hold it whole. 1 when
 * written (it is then not parked). */
int cache_spill_evict(cache *c, uint64_t base);

/* The layout's digest: what a stored byte's meaning depends on (the
 * sections' and views' names, shapes and dtypes, the grid), for a file
 * format of version v (spill.c). */
uint64_t cache_tier_layout_digest(const cache_layout *l, uint32_t v);

/* ---- disk.c: the disk tier (its essay at the top of disk.c) ---- */
/* Opens DIR/disk and its index (cfg.spill_dir; nothing when empty or
 * cfg.disk_on is 0), sweeps .tmp files and files the index does not name,
 * starts the writer thread. */
int cache_disk_open(cache *c, char *err);
/* Waits for the writer's queue (fenced at 0: nothing more is copied),
 * stops the thread, closes the index. Safe when off. */
void cache_disk_close(cache *c);
/* After the live buffers are carved for a new layout: sweeps the files of
 * another fingerprint or layout (the counts stay). cache_disk_detach before the
 * layout goes (the queue is fenced at 0 and waited for). */
void cache_disk_attach(cache *c);
void cache_disk_detach(cache *c);
/* A plan may write rows from `line` on: the writer copies no chunk at or
 * above it from now on (one being copied is waited for). */
void cache_disk_fence(cache *c, uint64_t line);
/* Which of the plan's new lines (ascending, in (start, n]) get a slot for
 * the disk (want[j] = 1); counts the lines. c->ph holds the prompt's
 * chain hashes. */
void cache_disk_plan(cache *c, const cache_turn *t, const uint64_t *lines,
		     uint32_t n, int *want);
/* At the commit, before the slots go: the filled disk slots' sections to
 * staging, the job queued for the writer. */
void cache_disk_commit(cache *c, const cache_turn *t, uint32_t n_filled);
/* A spill save begins (1) or ends (0): the writer waits between its files
 * meanwhile (the spill's own I/O path). */
void cache_disk_spill_active(cache *c, int on);

/* ---- ledger.c: the day's drive writes, the write guard, the adoption
 * records (its essay at the top of ledger.c) ---- */
/* Opens DIR/ledger (nothing without cfg.spill_dir). A ledger that cannot
 * be opened counts in memory (logged); MOOR_ERANGE for a bad
 * cfg.adopt_from. */
int cache_ledger_open(cache *c, char *err);
void cache_ledger_close(cache *c); /* safe when off */
enum { CACHE_LEDGER_OK = 0, CACHE_LEDGER_OVER = 1, CACHE_LEDGER_HARD = 2 };
enum { CACHE_LEDGER_TIER = 0, CACHE_LEDGER_SPILL = 1 };
enum {
	CACHE_LEDGER_TIER_PLAN = 0,
	CACHE_LEDGER_SPILL_EVICT,
	CACHE_LEDGER_SPILL_DRAIN
};
/* Whether a write of kind `what` (a tier plan, a spill eviction of a
 * conversation of `tokens`, the drain) may run at today's level; a skip is
 * counted and, the first of its level today, logged. Any thread but the
 * writer's. */
int cache_ledger_allow(cache *c, int what, uint64_t tokens);
/* `bytes` written by the tier or the spill (who) today. Any thread. */
void cache_ledger_wrote(cache *c, int who, uint64_t bytes);
/* The attach of an engine of fingerprint fp: records cfg.adopt_from as
 * equal to it (once, logged) and computes the set of fingerprints whose
 * files it reads. */
void cache_ledger_attach(cache *c, const uint8_t fp[32]);
/* Whether a file of fingerprint fp is the attached engine's to read: its
 * own, or one an adoption record declared equal. */
int cache_ledger_fp_ok(const cache *c, const uint8_t fp[32]);
struct json_t *cache_ledger_json(cache *c);
/* The clock of the day's key (tests; NULL: time()). */
extern time_t (*cache_ledger_clock)(void);
/* The disk tier's clock (the index's last use, idle days, the TTL): a
 * test's seam; NULL: time(). */
extern time_t (*cache_disk_clock)(void);

/* ---- planner.c ---- */
/* The prefill rate the NVMe tiers' read-cost rule weighs a read against:
 * the fastest of the measured ones, else cfg.prefill_tps. */
double cache_prefill_rate(const cache *c);
void cache_turn_abort(cache *c, uint32_t n_filled, uint64_t valid);

#endif
