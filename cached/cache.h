/* cache.h: the state broker's core (`cache_`): arenas, the live sequence,
 * and every RAM cache of the seed (resident prefix and its anchors, guest
 * stash, pin, park, end anchor, state store), the planner and the budgets.
 *
 * This library knows no model and no process. The cached daemon wraps it in
 * NNG (cached/main.c); tests drive it in-process, with an engine computing
 * into the same arena memory. It is single-threaded: the daemon calls it from
 * one thread.
 *
 * ---------------------------------------------------------------------------
 * Memory
 *
 * Two arenas, each one POSIX shm object that every process maps:
 *   device arena  live sequence buffers, resident anchors, the end anchor,
 *                 the guest stash. (CPU backend: shm; the CUDA backend will
 *                 back it with cudaMalloc + an IPC handle behind arena.h.)
 *   host arena    pin, park, state store (pinned host memory on CUDA).
 * Everything inside an arena is addressed by byte offset; offsets, never
 * pointers, cross processes. Bytes move with memcpy through arena.h's mover
 * (a CUDA mover later), always by cached, except the anchor slots the
 * engine fills during a prefill.
 *
 * The state of a sequence, for the caches, is the layout (cache_layout):
 * sections copied whole, views with a token axis. An anchor holds the
 * sections; a pin, park, stash or store entry holds the sections it needs
 * and view rows [a, b). A view's buffer in the live sequence is its dims
 * with dims[token_axis] = window; its rows [a, b) are, for each index of
 * the axes before the token axis, one contiguous run of (b - a) * inner
 * bytes (cache_view_copy does this strided copy for any token axis).
 *
 * ---------------------------------------------------------------------------
 * The live sequence and the resident prompt
 *
 * One live sequence (side slots come later). cached keeps the token ids its
 * rows hold (`resident`, key ids), `valid` (rows [0, valid) are the
 * resident ids' rows), the anchors of the resident prompt (line -> slot),
 * the end anchor, and `taint`: the lowest row a decode wrote (or a prefill
 * that resumed above an earlier taint, or off the grid); rows below taint
 * and anchors at lines at or below it are a cold grid prefill's bits, the
 * rest are held to the greedy gate. No such row: CACHE_NO_TAINT.
 *
 * ---------------------------------------------------------------------------
 * A turn
 *
 *   cache_plan(ids, session, max_tokens)
 *     1. c = the common prefix of ids and the resident ids, compared element
 *        by element (a hash is never trusted).
 *     2. Every source offers a start s < n (at least one token is always
 *        forwarded, for the logits): the resident anchors (largest line <=
 *        c), the end anchor (its length <= c), the pin, the park, the state
 *        store. The latest start wins; on a tie the cheaper restore
 *        (resident, end, stash, pin, park, store).
 *     3. The memory policy makes room for the prefill's workspace
 *        (workspace_floor + workspace_per_token * n under mem_peak), giving
 *        back cheapest first (state store, body anchors, end anchor, guest
 *        stash, park, pin), or refuses with MOOR_ENOSPACE having changed
 *        nothing.
 *     4. Before the rows are overwritten: a guest (n <= guest_max and
 *        n < resident_len / 4) stashes the rows it can write; otherwise a
 *        request of the same session whose prompt parts inside the head a
 *        pin would hold pins the old head; a request of another session
 *        (or, with no session keys, any prompt that parts) parks the rows
 *        from where the new prefill starts writing.
 *     5. The source is restored into the live buffers; anchor slots are
 *        reserved for the grid lines in (start, n] the anchor budget keeps
 *        (and the state store's prefix line).
 *   the engine prefills [start, n), copying the sections into each slot as
 *   it passes the slot's line, then decodes;
 *   cache_commit(n_filled, generated ids the state absorbed)
 *     the resident ids become ids + absorbed; the filled slots become
 *     anchors; the end anchor is copied from the live sections; the state
 *     store takes its prefix snapshot and session snapshot; budgets evict.
 *   cache_abort(n_filled, valid) when the prefill or decode failed: rows
 *     [0, valid) and the filled anchors stay; the live sections are not
 *     trusted (the next plan restores from an anchor or starts cold).
 *
 * A guest's turn commits nothing to the resident prompt; the stash is put
 * back at the next plan, before anything else.
 */
#ifndef CACHE_H
#define CACHE_H

#include <stddef.h>
#include <stdint.h>

#include "tiers.h"

#define CACHE_NAME_MAX 48
#define CACHE_MAX_SECTIONS 512
#define CACHE_MAX_VIEWS 512
#define CACHE_MAX_DIMS 4

typedef struct cache_section {
	char name[CACHE_NAME_MAX];
	int32_t layer;
	uint64_t bytes;
} cache_section;

typedef struct cache_view {
	char name[CACHE_NAME_MAX];
	int32_t layer;
	uint32_t elt;  /* bytes per element */
	uint32_t ndim;
	int64_t dims[CACHE_MAX_DIMS]; /* dims[token_axis] ignored (= window) */
	uint32_t token_axis;
} cache_view;

typedef struct cache_layout {
	uint32_t n_sections;
	cache_section sec[CACHE_MAX_SECTIONS];
	uint32_t n_views;
	cache_view view[CACHE_MAX_VIEWS];
	uint64_t window;
	uint32_t grid;
	uint64_t workspace_floor;     /* prefill workspace, bytes */
	uint64_t workspace_per_token; /* and its growth per prompt token */
	uint8_t fingerprint[32];
} cache_layout;

/* Bytes of one token's rows across every view; of all sections. */
uint64_t cache_layout_row_bytes(const cache_layout *l);
uint64_t cache_layout_section_bytes(const cache_layout *l);

/* Defaults are the seed's (cache_cfg_defaults). Sizes in bytes. */
typedef struct cache_cfg {
	char arena_prefix[64];   /* shm names: "/<prefix>.dev", "/<prefix>.host" */
	uint64_t device_bytes;   /* device arena size */
	uint64_t host_bytes;     /* host arena size */
	uint64_t mem_ceiling;    /* device arena bytes caches may grow to */
	uint64_t mem_peak;       /* device bytes during a prefill, workspace incl. */
	uint64_t resident_bytes; /* --resident-gb 2.5: body anchors */
	uint32_t resident_keep;  /* newest anchors never evicted: 4 */
	uint32_t pin_every;      /* anchors kept for the pin: every 4096 */
	uint32_t pin_upto;       /* ... up to 32768 */
	uint32_t guest_max;      /* --resident-guest-max 8192 */
	uint32_t guest_margin;   /* 512 rows, twice */
	uint64_t stash_bytes;    /* --resident-stash-gb 1 */
	uint64_t pin_bytes;      /* --resident-pin-gb 4 */
	uint32_t pin_anchors;    /* up to 8 */
	uint64_t park_bytes;     /* --resident-park-gb 4 */
	uint32_t park_anchors;   /* newest 4 */
	int end_anchor;          /* --end-anchor, on */
	uint64_t store_bytes;    /* CACHE_GB 2 */
	uint64_t store_entry_bytes; /* --store-entry-gb 1 */
	int store_boundaries;    /* --store-boundaries 1 (0: every boundary) */
	int store_sessions;      /* session snapshots, on */
	int dev_cuda;            /* -1: the device arena is shm (the CPU
				  * backend); else the GPU it is
				  * cudaMalloc'ed on (arena_cuda.c), with
				  * the CUDA mover */
	/* the session spill (spill.c): DIR/sessions under spill_dir; empty:
	 * off */
	char spill_dir[256];
	uint64_t spill_bytes;    /* --session-spill-gb 64 */
	uint32_t spill_hours;    /* an entry unused this long goes: 48 */
	int spill_codec;         /* byte planes + zstd frames (codec.h), on */
	uint32_t spill_min_tokens; /* --session-spill-min-tokens 16384: an
				    * eviction writes a conversation this long
				    * that the park cannot hold whole */
	uint32_t codec_threads;  /* the codec's threads: 8 */
	/* the disk tier (disk.c): DIR/disk under spill_dir */
	int disk_on;             /* --disk-cache on|off: on with a dir */
	uint64_t disk_bytes;     /* --disk-cache-gb 16 */
	uint32_t disk_days;      /* an anchor unused this long goes: 7 */
	uint64_t disk_min_free;  /* --disk-cache-min-free-gb 50: the free
				  * space the tier and the session spill
				  * leave the file system (0: none) */
	uint32_t disk_admit_after; /* a line counted this often cold: 2 */
	uint32_t disk_head_anchors; /* a session's first long request: 4 */
	uint32_t disk_min_tokens;   /* shorter prompts write nothing: 4096 */
	/* the write guard and the fingerprint adoption (ledger.c) */
	uint64_t write_budget;	     /* bytes; --disk-write-budget-gb 200 (GB of
				      * 10^9 bytes): the drive writes of a day
				      * (tier and spill); 0: no budget */
	uint32_t guard_evict_tokens; /* over the budget the spill still
				      * writes evictions this long: 32768 */
	char adopt_from[80];     /* --adopt-from FP: files of this older
				  * fingerprint (16 to 64 hex digits, a
				  * prefix) are the attached engine's
				  * (recorded, logged); empty: none */
	uint32_t prefill_tps;    /* the engine's prefill rate until cached
				  * measures one (tokens/s): 740 */
	int unified;             /* both arenas are one memory (the CPU
				  * backend, a unified-memory board): the
				  * memory limits count the host arena too;
				  * 0: they count the device arena only */
} cache_cfg;

void cache_cfg_defaults(cache_cfg *c);
/* 16 to 64 hex digits (cfg.adopt_from) as a fingerprint or its prefix:
 * out[0, *n); MOOR_ERANGE otherwise. */
int cache_fp_parse(const char *s, uint8_t out[32], uint32_t *n);

typedef struct cache cache;

/* Creates both arenas (shm, unlinked at cache_free). err: MOOR_ERRLEN. */
int cache_new(const cache_cfg *cfg, cache **out, char *err);
void cache_free(cache *c); /* safe on NULL */

/* Arena identity for the engine to map: the device arena by shm name
 * (dev_cuda 0) or by CUDA IPC handle on GPU dev_device (dev_cuda 1). */
typedef struct cache_arena_info {
	char dev_name[80], host_name[80];
	uint64_t dev_size, host_size;
	int dev_cuda;
	int dev_device;
	uint8_t dev_handle[64];
} cache_arena_info;
void cache_arena_info_get(const cache *c, cache_arena_info *out);
/* Waits for every copy the mover has under way (the CUDA mover's stream;
 * nothing on the memcpy mover). The daemon calls it before any reply that
 * hands arena bytes to the engine (arena.h). Errors: MOOR_EBACKEND. */
int cache_sync(cache *c);
/* The mover's counters so far (arena.h's arena_mover_stats: copies, calls
 * to the runtime, bytes, seconds issuing and waiting); MOOR_EUNSUP where
 * it keeps none (the memcpy mover). With MOOR_MOVER_TRACE=1 in the
 * environment, the first cache_sync after a plan logs (info) the plan's
 * share of them: its restore's bytes, its time to the end of that sync
 * split into issuing copies, waiting for them and the plan's own work. */
struct arena_mover_stats;
int cache_mover_stats(const cache *c, struct arena_mover_stats *out);
/* In-process access (tests, the mover): the mapped bases. */
void *cache_dev_base(cache *c);
void *cache_host_base(cache *c);

typedef struct cache_hello_out {
	int adopted;            /* the live state of an earlier engine is kept */
	uint64_t resident_len;
	uint64_t sec_off[CACHE_MAX_SECTIONS];  /* device arena offsets */
	uint64_t view_off[CACHE_MAX_VIEWS];
} cache_hello_out;

/* An engine attaches. Same fingerprint and layout as the state held: the
 * live buffers and every cache are handed back untouched (adopted). Another
 * fingerprint or layout: every cache is dropped (logged), new buffers are
 * carved. Fails with MOOR_ENOSPACE when the live buffers do not fit. */
int cache_hello(cache *c, const cache_layout *lay, cache_hello_out *out,
		char *err);

/* The tiers: proto's one table (tiers.h), numbers and names. */
enum cache_tier {
#define CACHE_TIER_ENUM(id, v, name, source, word) CACHE_TIER_##id = v,
	PROTO_TIERS(CACHE_TIER_ENUM)
#undef CACHE_TIER_ENUM
};
const char *cache_tier_name(int tier);

typedef struct cache_req {
	const int32_t *ids; /* key ids */
	uint64_t n;
	const char *session; /* NULL or "" : none */
	uint32_t max_tokens;
	int no_cache;        /* cold, and keep nothing */
	/* where the prompt's last user message starts (a token index), for
	 * the disk tier's head anchors of a session's first long request:
	 * the last head_anchors grid lines at or below it (the next session
	 * in the same folder parts from this one there); 0: unknown, the
	 * last lines of the prompt */
	uint64_t user_at;
} cache_req;

#define CACHE_MAX_SLOTS 1024
typedef struct cache_slot {
	uint64_t line;
	uint64_t offset; /* device arena offset: sections, in layout order */
} cache_slot;

#define CACHE_NO_TAINT UINT64_MAX

typedef struct cache_plan_out {
	uint64_t start;  /* state restored to here; prefill [start, n) */
	uint64_t taint;
	int tier;
	int guest;
	/* the memory level after the plan: bytes the caches and the live
	 * buffers hold (the memory policy's count), and the cache units
	 * given back to fit this prefill */
	uint64_t mem_held;
	uint32_t mem_shed;
	uint32_t n_slots;
	cache_slot slots[CACHE_MAX_SLOTS];
} cache_plan_out;

int cache_plan(cache *c, const cache_req *req, cache_plan_out *out,
	       char *err);
/* What cache_plan of req would answer now, without doing any of it: the
 * source, the start line and the taint line of the plan that would follow,
 * and the bytes its restore would copy into the live sequence. Nothing
 * changes (no byte moves, no cache is given back, no counter counts it):
 * cache_stats_json is byte-identical before and after, and a plan after a
 * peek answers as one without it.
 *
 * It answers what the plan does, in the plan's order: the previous guest's
 * stash is put back first (the peek reads the rows as they would be then,
 * and reports CACHE_TIER_STASH where the plan would); a turn in flight is
 * taken as the plan takes it (aborted with its restored rows valid). One
 * case it does not model: a plan whose prefill workspace needs caches given
 * back (mem_peak) drops the cheapest first and looks again; the peek then
 * answers from the caches as they are (gives_back = 1), and the plan may
 * start lower. A prefill that cannot fit at all fails here as there
 * (MOOR_ENOSPACE), and so do bad arguments (MOOR_ERANGE). */
typedef struct cache_peek_out {
	uint64_t start; /* the line the plan would start at (cached tokens) */
	uint64_t taint; /* as cache_plan_out's */
	int tier;       /* as cache_plan_out's (CACHE_TIER_STASH included) */
	int guest;      /* the plan would run it as a guest */
	int gives_back; /* the plan would first give caches back (see above) */
	/* bytes the plan would copy into the live sequence: the guest stash
	 * put back, the source's sections (none for a cold start), and the
	 * rows a pin, park or store restore copies (a resident or end anchor
	 * resumes on the rows in place) */
	uint64_t restore_bytes;
	/* the time the plan's read of the drive would take, in us (the
	 * session spill's or the disk tier's restore_bytes at its measured
	 * read rate); 0: a RAM tier or none */
	uint64_t read_us;
} cache_peek_out;

int cache_peek(cache *c, const cache_req *req, cache_peek_out *out,
	       char *err);

/* A run in scratch rows (the compaction preparer, the seed's "writes it
 * ahead"): ids must hold the resident ids up to the end anchor, which must
 * be where the rows in place end (no turn in flight, no guest stash out),
 * and go past it. The end anchor's sections are copied into the live
 * sections and the engine computes from there into rows at and past the
 * end, which no cache holds; no slot is reserved and nothing is counted.
 * The cache_commit or cache_abort that ends it (or the next cache_plan,
 * or the drain) only closes it: the resident ids, rows [0, valid), the
 * anchors, the end anchor, every other cache and the counters are as they
 * were (the live sections are not: every plan restores them from its
 * source). MOOR_ERANGE (err says why) when the ids do not extend the end
 * anchor or a turn is in flight. */
int cache_scratch_plan(cache *c, const cache_req *req, cache_plan_out *out,
		       char *err);

enum { CACHE_MARK_GEN = 1, CACHE_MARK_HIDDEN = 2 };
typedef struct cache_mark {
	uint64_t start, len;
	uint32_t kind;
} cache_mark;

int cache_commit(cache *c, uint32_t n_filled, const int32_t *gen,
		 uint64_t n_gen);
/* cache_commit where the engine also says how many positions its state
 * absorbed (state_len; cache_commit assumes n + n_gen). A state ahead of
 * its key (a verify block that stopped part way) keeps no end anchor and
 * no session snapshot (declined_short); behind it is MOOR_ERANGE. */
int cache_commit_at(cache *c, uint32_t n_filled, const int32_t *gen,
		    uint64_t n_gen, uint64_t state_len);
int cache_abort(cache *c, uint32_t n_filled, uint64_t valid);
/* cache_commit with the generation's hidden spans (the reasoning budget's
 * close phrase): hid[i].start indexes gen; they are kept with the end
 * anchor (CACHE_MARK_HIDDEN at n + start) for the replay. A span outside
 * gen is MOOR_ERANGE. */
int cache_commit_marks(cache *c, uint32_t n_filled, const int32_t *gen,
		       uint64_t n_gen, const cache_mark *hid, uint32_t n_hid);

/* Marks on the resident rows: the generation regions (rows a decode wrote:
 * [n, n + absorbed) of each turn) and the hidden spans (rows the client
 * never receives), kept while the rows are, carried with the end anchor
 * into the park. gatewayd's end alignment reads them with the end anchor's
 * ids (cache_end_get): cached knows no tokenizer, so it hands over the
 * record and the gateway, which has the tokenizer and the template,
 * aligns the client's copy on the rows' own bytes. */

/* The end anchor a copy (ids[0, n)) may be aligned to: the resident end
 * anchor, or the parked conversation's end when the copy shares more with
 * the park's ids. tier CACHE_TIER_END or CACHE_TIER_PARK with common (the
 * ids the copy shares with that record), end (its length), rows (its ids
 * [0, end), borrowed until the next call that changes the caches) and its
 * marks below end (borrowed); CACHE_TIER_NONE when no end anchor is kept,
 * a turn is in flight, or the copy holds every id up to it (common >= end:
 * nothing to align). Changes nothing, counts nothing. */
typedef struct cache_end_out {
	int tier;
	uint64_t common, end;
	const int32_t *rows;
	uint32_t n_marks;
	const cache_mark *marks;
} cache_end_out;
void cache_end_get(cache *c, const int32_t *ids, uint64_t n,
		   cache_end_out *out);

/* The drain (cached's SIGTERM): a turn in flight is aborted to its start,
 * a guest's stash put back, and the resident conversation (rows [0,
 * valid), the end anchor, the newest 4 anchors, ids, taint, session) is
 * written to the session spill; the next cache_hello of an engine with the
 * same fingerprint and layout reads it back (cache_hello_out.resident_len
 * says how much), so its next turn resumes at the end anchor. 0 when the
 * spill is off or nothing is resident. */
int cache_drain(cache *c, char *err);

/* Waits until the disk tier's writer has written (or dropped) every job
 * queued so far (tests; the daemon's drain). 0 when the tier is off. */
int cache_disk_wait(cache *c);

/* Counters and bytes of every cache as one JSON object (heap string). */
char *cache_stats_json(cache *c);
/* tier: "ram" (every RAM cache), "all" (those, the spill and the disk
 * tier), "resident", "end", "stash", "pin", "park", "store", "spill",
 * "disk" (its files and its cold-line counts). MOOR_ERANGE: no such name;
 * MOOR_EUNSUP: "spill" or "disk" of a cache that runs without that tier
 * (no cfg.spill_dir; for the disk tier also cfg.disk_on 0, or an index
 * that did not open: the stats' "on" is false), and nothing is cleared.
 * "all" and "ram" always succeed ("all" clears the tiers it runs with). */
int cache_clear(cache *c, const char *tier);

/* Strided row copy of one view between two buffers laid out as the live
 * sequence's (windows may differ: a compact buffer of n rows has window n).
 * Copies rows [src_row, src_row + n) to [dst_row, ...). */
void cache_view_copy(const cache_view *v, void *dst, uint64_t dst_window,
		     uint64_t dst_row, const void *src, uint64_t src_window,
		     uint64_t src_row, uint64_t n);

#endif
