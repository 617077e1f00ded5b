/* proto.h: every message between moor's processes (`proto_`).
 *
 * A message is a fixed 24-byte header and a typed payload. All fields are
 * fixed-width little-endian; strings are u16 length + bytes (no NUL on the
 * wire); arrays are u32 count + elements. Messages are encoded and decoded
 * only through the functions here, which check every length against the
 * buffer: a decode never reads past the payload, and a payload with bytes
 * left over after its last field is malformed too.
 *
 * Bulk bytes never travel in messages: state stays in the arenas and
 * messages carry offsets into them. Token ids do travel (4 bytes each).
 *
 * Versions: a peer whose header carries another PROTO_VERSION is refused
 * with PROTO_ERROR (code MOOR_EVERSION) naming both versions; the refusing
 * side keeps serving.
 *
 * Ownership: decoded structs may hold heap arrays (ids, slots, text); the
 * caller releases them with proto_msg_fini(), which is safe on a zeroed or
 * partly decoded struct. Encoders borrow their input.
 */
#ifndef PROTO_H
#define PROTO_H

#include <stddef.h>
#include <stdint.h>

#include "buf.h"
#include "tiers.h"

#define PROTO_MAGIC 0x524f4f4du /* "MOOR" little-endian */
/* 2: HELLO_OK names the device arena by kind (shm or a CUDA IPC handle);
 * GENERATE's reasoning budget, COMMIT's marks.
 * 3: the tenant's cache salt in GENERATE, PLAN, PEEK and END_GET; PROGRESS,
 * PLAN's SCRATCH flag, the memory level in PLAN_OK and DONE.
 * 4: user_at (where the last user message starts) in GENERATE and PLAN.
 * 5: PEEK_OK's read_us (the NVMe tiers' read time).
 * 6: logprobs: GENERATE's PROTO_GEN_LOGPROBS and top_logprobs, STEP's
 * logprob and top list. */
#define PROTO_VERSION 6
#define PROTO_HDR_SIZE 24
/* Largest payload accepted: a 256k-token prompt of ids plus slack. */
#define PROTO_MAX_PAYLOAD (4u << 20)
#define PROTO_MAX_STR 4096
#define PROTO_MAX_TEXT (1u << 20) /* STATS_OK's JSON: u32 length */
#define PROTO_MAX_IDS (1u << 20)
#define PROTO_MAX_SLOTS 1024
#define PROTO_MAX_SECTIONS 512
#define PROTO_MAX_VIEWS 512
#define PROTO_NAME_MAX 48

typedef struct proto_hdr {
	uint32_t magic;
	uint16_t version;
	uint16_t type;
	uint32_t length; /* payload bytes after the header */
	uint32_t flags;  /* reserved, 0 */
	uint64_t req;    /* request id, echoed in replies */
} proto_hdr;

enum proto_type {
	PROTO_ERROR = 1, /* any direction: a request failed */
	PROTO_OK = 2,    /* an empty success */

	/* engined -> cached (cached.sock, REQ/REP) */
	PROTO_HELLO = 10,
	PROTO_HELLO_OK = 11,
	PROTO_PLAN = 12,
	PROTO_PLAN_OK = 13,
	PROTO_COMMIT = 14, /* answered with PROTO_OK */
	PROTO_ABORT = 15,  /* answered with PROTO_OK */

	/* client (gatewayd, tests) -> engined (engined.sock, PAIR1 poly) */
	PROTO_GENERATE = 30,
	PROTO_STEP = 31, /* engined -> client: one decode step's tokens */
	PROTO_DONE = 32, /* engined -> client: a request ended */
	PROTO_CANCEL = 33,
	PROTO_CREDIT = 34, /* client -> engined: flow control (below) */
	PROTO_PROGRESS = 35, /* engined -> client: a long prefill's progress */

	/* operators, gatewayd -> cached (admin.sock, REQ/REP) */
	PROTO_STATS = 50,
	PROTO_STATS_OK = 51, /* JSON text */
	PROTO_CLEAR = 52,    /* answered with PROTO_OK */
	PROTO_PEEK = 54,     /* where a prompt would resume; changes nothing */
	PROTO_PEEK_OK = 55,
	PROTO_END_GET = 56, /* the end anchor's record, for the alignment */
	PROTO_END_OK = 57,

	PROTO_TYPE_MAX = 64,
};

/* ---- payloads ---- */

typedef struct proto_error {
	int32_t code; /* a moor.h code */
	char *msg;    /* heap, NUL-terminated after decode */
} proto_error;

typedef struct proto_section {
	char name[PROTO_NAME_MAX];
	int32_t layer;
	uint32_t dtype;
	uint32_t ndim;
	int64_t dims[4];
	uint64_t bytes;
} proto_section;

typedef struct proto_view {
	char name[PROTO_NAME_MAX];
	int32_t layer;
	uint32_t dtype;
	uint32_t ndim;
	int64_t dims[4];
	uint32_t token_axis;
	uint64_t row_bytes;
} proto_view;

/* engined's identity and its adapter's state layout. */
typedef struct proto_hello {
	uint8_t fingerprint[32]; /* what computes stored rows (weights, code) */
	uint32_t pid;
	uint32_t grid;
	uint64_t window;
	uint64_t workspace_bytes; /* the prefill workspace estimate */
	uint32_t n_sections;
	proto_section *sec;
	uint32_t n_views;
	proto_view *view;
} proto_hello;

/* What HELLO_OK's device arena is (the values of ops.h's kern_ipc_kind). */
enum proto_arena_kind { PROTO_ARENA_SHM = 1, PROTO_ARENA_CUDA = 2 };
#define PROTO_IPC_HANDLE_BYTES 64

/* cached's arenas for the engine. The device arena is either a shm object
 * (dev_kind SHM: dev_arena names it) or device memory cached allocated
 * (dev_kind CUDA: dev_handle is its cudaIpcMemHandle_t on GPU dev_device,
 * dev_arena a name for the logs). The host arena is always shm.
 *
 * Ordering: cached has synchronised every copy of its own into either
 * arena before it sends HELLO_OK, PLAN_OK or the OK of COMMIT / ABORT; the
 * engine synchronises its queues before it sends COMMIT or ABORT (the slot
 * report n_filled included). Neither reads bytes the other may still be
 * writing. */
typedef struct proto_hello_ok {
	char *dev_arena;  /* shm name of the device arena (SHM), a label (CUDA) */
	uint64_t dev_size;
	char *host_arena; /* shm name of the host arena */
	uint64_t host_size;
	uint8_t adopted;  /* 1: the state of an earlier engined is handed back */
	uint64_t resident_len;
	uint32_t n_sec;   /* offsets of the live sequence's buffers in the */
	uint64_t *sec_off; /* device arena, in the layout's order */
	uint32_t n_view;
	uint64_t *view_off;
	uint32_t dev_kind;  /* proto_arena_kind */
	int32_t dev_device; /* CUDA: the device ordinal; SHM: -1 */
	uint8_t dev_handle[PROTO_IPC_HANDLE_BYTES]; /* CUDA: the IPC handle */
} proto_hello_ok;

/* Where should this prompt resume? cached restores the state into the live
 * sequence before answering. */
typedef struct proto_plan {
	char *session;       /* session key; empty: none */
	uint32_t max_tokens;
	uint32_t flags;      /* PROTO_PLAN_* */
	uint32_t n_ids;
	int32_t *ids;        /* key_ids of the prompt */
	uint64_t salt;       /* the tenant's cache salt (PROTO_SALT_NONE) */
	/* the token index in ids where the prompt's last user message
	 * starts (the disk tier's head anchors, cache_req.user_at); 0:
	 * unknown */
	uint64_t user_at;
} proto_plan;

/* The cache salt: a tenant's prompts are keyed by it in every cache of
 * cached (cached/salt.c says how), so two salts never share a cached
 * token and the same salt shares as before. gatewayd derives it from a
 * request's cache_salt and its API key's salt; 0 is no salt (the keys of
 * every cache are the token ids themselves, as before salts). */
#define PROTO_SALT_NONE 0

enum {
	PROTO_PLAN_NO_CACHE = 1, /* cold prefill, keep nothing */
	/* a run in scratch rows past the end anchor (the compaction
	 * preparer): the plan resumes at the end anchor the ids extend, takes
	 * no anchor and changes no cache; the ABORT or COMMIT that ends it
	 * leaves every cache as it was (cache_scratch_plan) */
	PROTO_PLAN_SCRATCH = 2,
};

/* the tiers: tiers.h's table (the numbers are on the wire) */
enum proto_tier {
#define PROTO_TIER_ENUM(id, v, name, source, word) PROTO_TIER_##id = v,
	PROTO_TIERS(PROTO_TIER_ENUM)
#undef PROTO_TIER_ENUM
};

typedef struct proto_slot {
	uint64_t line;   /* grid line whose state goes here */
	uint64_t offset; /* device arena offset of section_bytes */
} proto_slot;

typedef struct proto_plan_ok {
	uint64_t start;   /* prefill starts here; state restored up to it */
	uint64_t cached;  /* tokens not forwarded (= start) */
	uint64_t taint;   /* lowest row not written by a cold grid prefill */
	uint32_t tier;    /* proto_tier of the source */
	/* the memory level after the plan: bytes the caches hold, the
	 * ceiling they grow to, and the cache units the plan gave back to
	 * fit its prefill (0: none) */
	uint64_t mem_held, mem_ceiling;
	uint32_t mem_shed;
	uint32_t n_slots;
	proto_slot *slots; /* anchor slots to fill during the prefill */
} proto_plan_ok;

/* A mark on rows: a generation region or a hidden span (END_OK, COMMIT). */
#define PROTO_MAX_MARKS 4096
enum { PROTO_MARK_GEN = 1, PROTO_MARK_HIDDEN = 2 };
typedef struct proto_mark {
	uint64_t start, len;
	uint32_t kind; /* PROTO_MARK_* */
} proto_mark;

typedef struct proto_commit {
	uint32_t n_filled; /* slots filled, a prefix of the plan's list */
	uint32_t n_ids;
	int32_t *ids;      /* generated tokens the state absorbed */
	uint32_t n_marks;  /* hidden spans among them: start is an index */
	proto_mark *marks; /* into ids (PROTO_MARK_HIDDEN) */
} proto_commit;

typedef struct proto_abort {
	uint32_t n_filled;
	uint64_t valid;    /* rows valid (the prefill reached this line) */
} proto_abort;

enum proto_finish {
	PROTO_FINISH_NONE = 0, /* still running (in STEP) */
	PROTO_FINISH_STOP = 1,
	PROTO_FINISH_LENGTH = 2,
	PROTO_FINISH_CANCEL = 3,
	PROTO_FINISH_ERROR = 4,
};

typedef struct proto_generate {
	char *session;
	uint32_t max_tokens;
	float temperature, top_p, min_p;
	int32_t top_k;
	uint64_t seed;
	uint32_t flags; /* PROTO_PLAN_* (passed to the plan), PROTO_GEN_* */
	uint32_t n_ids;
	int32_t *ids;
	uint32_t n_stop;
	int32_t *stop_ids; /* token ids that end the generation */
	/* The reasoning budget (PROTO_GEN_THINKING: the prompt ends inside
	 * <think>): after `budget` generated tokens with no think_close the
	 * engine forwards close_ids instead of sampling; their first
	 * n_hidden are a hidden span (not streamed, not counted: COMMIT's
	 * marks), the rest go out as generated tokens. budget 0: none. */
	uint32_t budget;
	int32_t think_close;
	uint32_t n_hidden;
	uint32_t n_close;
	int32_t *close_ids;
	uint64_t salt; /* passed to the plan (PROTO_SALT_NONE: none) */
	uint64_t user_at; /* passed to the plan (proto_plan's); 0: unknown */
	/* With PROTO_GEN_LOGPROBS: each STEP entry carries its token's
	 * logprob and the top_logprobs (<= PROTO_MAX_TOP) likeliest tokens;
	 * without it, 0. */
	uint32_t top_logprobs;
} proto_generate;

/* GENERATE flags of engined's own, in the high half (the low half is
 * PROTO_PLAN_*, which engined passes to cached). */
enum {
	PROTO_GEN_IGNORE_EOS = 1u << 16, /* do not stop at the model's eos */
	PROTO_GEN_THINKING = 1u << 17,   /* the prompt ends inside <think> */
	PROTO_GEN_LOGPROBS = 1u << 18,   /* STEP carries logprobs */
};

/* The most alternatives a STEP entry carries (OpenAI's top_logprobs). */
#define PROTO_MAX_TOP 20

/* One decode step, every sequence it advanced. With PROTO_GEN_LOGPROBS the
 * logprobs are the log-softmax of the model's raw logits at the token's
 * position (before temperature, top-k, top-p and min-p: vLLM's default,
 * "raw_logprobs"), as kern_ops.logprobs computes them: logprob the token's,
 * then the n_top likeliest tokens by (logprob desc, id asc). A token the
 * engine forwarded rather than sampled (the reasoning budget's close) has
 * the logprob the model gave it. -inf is a possible value. Without the
 * flag: logprob 0, n_top 0. */
typedef struct proto_step_entry {
	uint64_t req;
	int32_t token;
	uint32_t finish; /* proto_finish; NONE while running */
	float logprob;
	uint32_t n_top; /* <= PROTO_MAX_TOP */
	int32_t top_id[PROTO_MAX_TOP];
	float top_lp[PROTO_MAX_TOP];
} proto_step_entry;

typedef struct proto_step {
	uint32_t n;
	proto_step_entry *e;
} proto_step;

typedef struct proto_done {
	uint32_t finish;
	int32_t code;       /* 0, or the error */
	uint32_t tier;
	uint64_t prompt_tokens;
	uint64_t cached_tokens;
	uint64_t completion_tokens;
	uint64_t prefill_us, decode_us;
	uint64_t mem_held, mem_ceiling; /* PLAN_OK's memory level */
	uint32_t mem_shed;
	char *msg;          /* error text, or empty */
} proto_done;

typedef struct proto_cancel {
	uint64_t target; /* the request to cancel */
} proto_cancel;

/* Flow control on engined.sock. NNG 1.5's PAIR1 poly socket gives each
 * pipe a send queue of two messages and drops what does not fit, silently
 * (a DONE lost so is a request never answered). So engined sends a pipe at
 * most PROTO_CREDIT_INITIAL messages more than the client has confirmed:
 * a client sends CREDIT{n} once it has received n messages, and engined
 * keeps the rest in its own queue for that pipe until credit comes. */
#define PROTO_CREDIT_INITIAL 2
typedef struct proto_credit {
	uint32_t n; /* messages received since the last CREDIT, >= 1 */
} proto_credit;

/* A long prefill's progress (engined -> the request's client), at most
 * once per --progress-ms (1 s): `done` of the `total` prompt tokens the
 * prefill forwards (the plan's start excluded), the rate so far and the
 * time left at that rate. done <= total. */
typedef struct proto_progress {
	uint64_t done, total;
	uint64_t start;	      /* the plan's start (cached tokens) */
	uint32_t tokens_per_s; /* forwarded tokens a second so far */
	uint32_t eta_ms;      /* the rest at that rate */
} proto_progress;

typedef struct proto_text { /* STATS_OK: u32 length, <= PROTO_MAX_TEXT */
	char *text;
} proto_text;

/* The tiers CLEAR names: the one table cached, moorctl and gatewayd use.
 * "ram" is every RAM cache (the default when none is named), "all" those
 * and the NVMe tiers; "spill" the session spill alone, "disk" the disk
 * tier alone (its files and its cold-line counts). */
#define PROTO_CLEAR_TIERS                                                     \
	"ram", "all", "resident", "end", "stash", "pin", "park", "store",     \
	    "spill", "disk"
#define PROTO_CLEAR_TIER_LIST                                                 \
	"ram, all, resident, end, stash, pin, park, store, spill, disk"
/* 1 when t is one of PROTO_CLEAR_TIERS. */
int proto_clear_tier_ok(const char *t);

typedef struct proto_clear {
	char *tier; /* one of PROTO_CLEAR_TIERS; empty: "ram" */
} proto_clear;

/* Where would this prompt resume? cached answers what its next PLAN of
 * these ids would do (tier, start line, taint, bytes restored) without
 * doing any of it and without counting it in the stats. */
typedef struct proto_peek {
	char *session; /* session key; empty: none */
	uint32_t n_ids;
	int32_t *ids;  /* key_ids of the prompt */
	uint64_t salt; /* as PLAN's */
} proto_peek;

typedef struct proto_peek_ok {
	uint32_t tier;          /* proto_tier the plan would restore from */
	uint64_t cached;        /* the line the plan would start at */
	uint64_t tokens;        /* the prompt's length (n_ids) */
	uint64_t taint;         /* as PLAN_OK's; UINT64_MAX: none */
	uint64_t restore_bytes; /* bytes the plan would copy into the live
				 * sequence (sections and rows) */
	uint64_t read_us;       /* the drive read that restore would take
				 * (the NVMe tiers' restore_bytes at their
				 * measured read rate); 0: a RAM tier */
} proto_peek_ok;

/* The end anchor a client's copy may be aligned to (gatewayd's end
 * alignment, gatewayd/text/endalign.h). The query is the copy's key ids as
 * the gateway tokenized them; cached answers the end anchor's record that
 * the copy parts from: the rows in place, else the parked conversation's
 * end. tier NONE: no end anchor to align to (none kept, or the copy holds
 * every id up to it already: common >= end). ids are the rows' ids
 * [common, end) (the copy and the rows agree on [0, common)); marks are
 * the generation regions and hidden spans below end. */

typedef struct proto_end_get {
	char *session;
	uint32_t n_ids;
	int32_t *ids;
	uint64_t salt; /* as PLAN's */
} proto_end_get;

typedef struct proto_end_ok {
	uint32_t tier;   /* PROTO_TIER_END, PROTO_TIER_PARK or NONE */
	uint64_t common; /* ids the copy shares with the rows */
	uint64_t end;    /* the end anchor's length */
	uint32_t n_ids;
	int32_t *ids;    /* the rows' ids [common, end) */
	uint32_t n_marks;
	proto_mark *marks;
} proto_end_ok;

/* A decoded message: the header and the payload of its type. */
typedef struct proto_msg {
	proto_hdr h;
	union {
		proto_error error;
		proto_hello hello;
		proto_hello_ok hello_ok;
		proto_plan plan;
		proto_plan_ok plan_ok;
		proto_commit commit;
		proto_abort abort_;
		proto_generate gen;
		proto_step step;
		proto_done done;
		proto_cancel cancel;
		proto_credit credit;
		proto_progress progress;
		proto_text text;
		proto_clear clear;
		proto_peek peek;
		proto_peek_ok peek_ok;
		proto_end_get end_get;
		proto_end_ok end_ok;
	} u;
} proto_msg;

/* ---- encoding ---- */

/* Encodes header + payload of m (m->h.type selects the union member;
 * magic, version and length are filled in) into b (common/buf.h),
 * replacing its contents. Returns 0 or a negative code (a field over its
 * limit: MOOR_ERANGE; b->err says the same). The caller frees b with
 * moor_buf_fini. */
int proto_encode(moor_buf *b, const proto_msg *m);

/* Decodes a whole message. Returns 0, or MOOR_EFORMAT (bad magic, short or
 * long payload, a count over its limit, an unknown type), MOOR_EVERSION
 * (another protocol version; out->h is still filled so the caller can
 * answer). On failure out holds nothing to free beyond proto_msg_fini. */
int proto_decode(const void *buf, size_t len, proto_msg *out);

/* Header only: checks magic, version, length against len. */
int proto_peek_hdr(const void *buf, size_t len, proto_hdr *out);

void proto_msg_fini(proto_msg *m);

const char *proto_type_name(uint16_t type);
/* The one table of tier names (tiers.h), by PROTO_TIER_* (cached's
 * CACHE_TIER_* are the same numbers), for every process:
 *   name    the cache, in logs and stats: "none", "resident", "end",
 *           "pin", "park", "store", "stash", "spill", "disk";
 *   source  where a turn resumed, as usage.moor.source, the journal and
 *           /metrics spell it (the seed's words: "anchor" the rows in
 *           place, "end" the end anchor, "none" cold; the rest as name);
 *   tier    the tier a client reads (usage.moor.tier, the peek's tier):
 *           "resident" (the rows in place, their end anchor, a guest's
 *           stash), "ram_park" (the pin, the park), "ram_snapshot" (the
 *           state store), "nvme_spill", "nvme_disk", "none".
 * A number past the table: name "unknown", source and tier "none". */
typedef struct proto_tier_words {
	const char *name, *source, *tier;
} proto_tier_words;
const proto_tier_words *proto_tier(uint32_t tier); /* never NULL, static */
const char *proto_tier_name(uint32_t tier);	   /* proto_tier()->name */

#endif
