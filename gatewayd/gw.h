/* gw.h: gatewayd's internals (`gw_`): the server, its links to engined and
 * cached, the request jobs and the metrics. Not a public API: the files of
 * gatewayd/ share it:
 *
 *   main.c     flags, the model's tokenizer and template, the loop, SIGTERM
 *   http.c     h2o on libuv: the listener, the handler, routing, responses
 *   link.c     the NNG links to engined (PAIR1) and cached (REQ)
 *   auth.c     the admin token, API keys, the tenant's cache salt
 *   params.c   a body read into gw_params (params.h: pure, no HTTP)
 *   admit.c    the admission queue: --inflight at a time, the rest wait,
 *              fair across flows, 503 + Retry-After past --queue-wait-s
 *   limits.c   what a body may cost, checked before the work; the RSS
 *              bound gatewayd states
 *   job.c      a generation's job: prepared on the pool, sent to engined,
 *              its events dispatched, waited for, cancelled, refused
 *   reply.c    the tokens turned into the OpenAI reply; usage; the end
 *   logprobs.c a generation's logprobs in OpenAI's shapes (logprobs.h:
 *              pure, no HTTP)
 *   sse.c      the streamed reply: SSE frames and h2o's send/proceed
 *   align.c    the end alignment of a copy (asks cached, text/endalign.c)
 *   compact.c  compaction as a continuation of the session's end anchor
 *   prepare.c  the compaction preparer: a summary written ahead
 *   respcache.c the response cache (--response-cache)
 *   journal.c  a JSON line per turn in the state directory
 *   peek.c     POST /v1/cache/peek
 *   routes.c   the routes that are not generations (models, health, ...)
 *   metrics.c  the counters, the prefill rate and GET /metrics' text
 *
 * The text machinery (tokenizer, templates, tool calls, stream parser) is
 * gatewayd/text/, a library of its own that knows no HTTP.
 *
 * Threads. One libuv loop thread runs h2o and owns everything below that is
 * not marked otherwise: the jobs, the metrics, the HTTP requests. Three
 * kinds of work run elsewhere and hand their results back to the loop:
 *
 *   - libuv's thread pool (uv_queue_work): a request's JSON parse, template
 *     render and tokenize (a 200k-token prompt is ~30 ms), and the REQ/REP
 *     round trips to cached (stats, clear, peek). The work function reads
 *     only the job's own copies (the body is copied off the h2o pool before
 *     the work is queued) and the read-only tokenizer and config.
 *   - the engine link's receiver thread: it decodes engined's STEP/DONE
 *     messages and queues them, with the pipe add/remove events, on a mutex
 *     protected list; a uv_async wakes the loop, which dispatches them by
 *     request id.
 *   - NNG's own threads call the pipe notifications, which only queue.
 *
 * Lifetimes. An HTTP request (h2o_req_t) is h2o's and may be freed at any
 * time the loop is not in our code (a client that disconnects). A job is
 * ours (malloc'd, reference counted): the request holds one reference
 * through a small anchor allocated on req->pool with a dispose callback
 * (h2o_mem_alloc_shared), a queued work item holds one, an in-flight engine
 * request holds one. When h2o frees the request the anchor's dispose runs:
 * the job forgets the request (job->req = NULL; nothing touches it after)
 * and, if a generation is running, sends PROTO_CANCEL for it at once. A
 * streamed response's generator (the anchor) also gets h2o's `stop` call
 * first; both paths detach the same way.
 */
#ifndef GW_GW_H
#define GW_GW_H

#include <jansson.h>
#include <pthread.h>
#include <stdint.h>
#include <uv.h>

#include <nng/nng.h>

#include <h2o.h>

#include "buf.h"
#include "logprobs.h"
#include "moor.h"
#include "net.h"
#include "params.h"
#include "proto.h"
#include "replystream.h"
#include "template.h"
#include "tokenizer.h"

/* Limits and documented constants. */
#define GW_RC_ENTRIES 256 /* --response-cache: the answers kept (a ring) */
/* Qwen's documented early-stop text for a thinking budget (the Qwen3
 * model card's "thinking budget" recipe), the hidden part; the visible
 * part that follows is GW_CLOSE_VISIBLE. */
#define GW_CLOSE_PHRASE                                                        \
	"\n\nConsidering the limited time by the user, I have to give the "     \
	"solution based on the thinking directly now.\n"
#define GW_CLOSE_VISIBLE "</think>\n\n"
/* Request bodies over it: 413 (--max-body-bytes). A 128k-token
 * conversation with tools is under 2 MB of JSON; a whole 262k-token window
 * of text, escaped, about 2 to 4 MB. */
#define GW_MAX_BODY_DEFAULT (4u << 20)
/* limits.c: what a body may ask for, checked before the work */
#define GW_MAX_JSON_TOKENS 262144 /* ~ JSON values, before the parse */
#define GW_MAX_MESSAGES 16384
#define GW_MAX_TOOLS 1024
#define GW_MAX_STOP_BYTES 1024 /* each stop string */
/* connections at once (--max-conns); past it a connection is answered
 * 503 and closed at once */
#define GW_MAX_CONNS_DEFAULT 4096
#define GW_SNDBUF 65536 /* SO_SNDBUF of a connection (http.c) */
/* SO_RCVBUF of a connection (the kernel doubles it): what one read of a
 * connection can bring in at once, so what the body budget can overshoot
 * by per connection read between two checks (http.c) */
#define GW_RCVBUF 65536
/* Request bytes held in h2o's input buffers across all connections (the
 * bodies being read, and the bodies of requests waiting or running, which
 * h2o keeps until their response ends): past it, connections in the
 * middle of a request are not read until it drains (http.c,
 * --body-budget-bytes). 64 bodies at the default limit. */
#define GW_BODY_BUDGET_DEFAULT (256u << 20)
#define GW_BUDGET_CHECK_MS 1 /* the budget is summed at most this often */
/* Past the budget, a connection in the middle of a request that brought
 * no byte for this long is answered 408 and closed (http.c). */
#define GW_STALL_MS 1000
/* A request the budget keeps unread this long before its read deadline
 * (--read-timeout-s; at most half of it) is answered 503 (http.c). */
#define GW_BUDGET_LATE_MS 1000
/* A request past this many bytes needs one of the budget's grants to be
 * read on (http.c); one below it reads in a receive buffer or two. */
#define GW_BODY_SMALL (64u << 10)
/* What a connection costs at rest (h2o's connection and socket, its first
 * 8 KiB input buffer, libuv's handle, ours), for the stated bound
 * (gw_limits_rss_bound): measured ~14 KiB, stated with room. */
#define GW_CONN_BYTES (24u << 10)
/* What readers can take in between two checks of the budget, at loopback
 * speed (a few GB/s for GW_BUDGET_CHECK_MS), for the stated bound. */
#define GW_READ_SLACK (16u << 20)
/* What one parse of a body costs besides the body: jansson's nodes
 * (~250 bytes a value, limits.c) and the rendered prompt and its ids. */
#define GW_PARSE_BYTES ((size_t)GW_MAX_JSON_TOKENS * 256)
/* a stream's bytes waiting behind a send the client does not take */
#define GW_MAX_PENDING (4u << 20)
#define GW_ADMIN_TIMEOUT_MS 2000 /* one round trip to cached */
#define GW_MAX_STOP_IDS 8	 /* stop token ids sent to engined */
/* reread_eta_ms before this gateway has seen a long prefill: CPU prefill
 * of the tiny model on 2 threads runs ~3,300 tokens/s (0.3 s per 1k). */
#define GW_PREFILL_PRIOR_TPS 3000.0
/* A prefill of at least this many forwarded tokens counts as "long" for
 * the rate estimate (short ones are dominated by the fixed costs). */
#define GW_PREFILL_LONG_TOKENS 256
#define GW_PREFILL_SAMPLES 16 /* the median of the last N long prefills */
/* restore_ms of /v1/cache/peek from a RAM tier (the NVMe tiers' read time
 * is cached's, PEEK_OK's read_us): host memory copy bandwidth assumed for a
 * restore, bytes per second (a CPU memcpy of arena bytes; the measured
 * pinned host-to-device rate on the H200 was 55 GB/s). */
#define GW_RESTORE_BPS 10e9

typedef struct gw_cfg {
	const char *model_dir;
	char listen_host[64];
	int listen_port;
	char run_dir[256];
	/* NULL: no admin token; clear is refused over HTTP, stats are
	 * redacted (auth.c) */
	const char *admin_token;
	const char *admin_token_file; /* --admin-token-file */
	const char *api_keys_file;    /* --api-keys-file; NULL: no keys */
	/* --allowed-hosts: Host names besides IP literals and localhost
	 * (http.c: DNS rebinding); NULL: none */
	const char *allowed_hosts;
	const char *chat_template;
	char served[256];
	double engine_wait_s;
	/* a job sent to engined that has not ended by then is cancelled and
	 * answered 504: the backstop that no request waits forever */
	double request_timeout_s;
	uint32_t max_body;    /* bytes: GW_MAX_BODY_DEFAULT */
	uint32_t max_conns;   /* GW_MAX_CONNS_DEFAULT */
	uint64_t body_budget; /* bytes: GW_BODY_BUDGET_DEFAULT (http.c) */
	double read_timeout_s; /* a request's head and body arrive within: 30 */
	double write_timeout_s; /* a send the client does not take: 30 */
	uint32_t queue_max;   /* requests waiting for admission: 4096 */
	uint32_t inflight;    /* admitted at a time (read, sent): 4 */
	double queue_wait_s;  /* the longest wait for admission: 120 */
	uint32_t default_max_tokens;
	uint32_t window; /* engined's --window: caps the default max_tokens */
	int end_align;	 /* --end-align (align.c) */
	uint32_t reasoning_budget; /* --reasoning-budget (0: none) */
	int response_cache;	   /* --response-cache (respcache.c), off */
	char state_dir[256];	   /* --state-dir: the journal; "" none */
	uint32_t journal_max_mb;   /* --journal-max-mb, 64 */
	int end_align_reasoning; /* --end-align-reasoning: its second pass */
	int compaction_prepare;	 /* --compaction-prepare (prepare.c), on */
	double compaction_idle_s; /* --compaction-idle-s, 30 */
	uint32_t compaction_min_tokens; /* --compaction-min-tokens, 32768 */
	/* --max-logprobs: the most alternatives a token may list, 20
	 * (PROTO_MAX_TOP); 0: logprobs are refused (params.h) */
	uint32_t max_logprobs;
	/* what one token's logprobs can cost at max_logprobs, kept and
	 * written (gw_lp_token_bytes of the model's tokenizer; main.c sets
	 * it once the tokenizer is loaded); 0 when logprobs are off: the
	 * RSS bound's logprobs term (limits.c) */
	uint64_t lp_token_bytes;
} gw_cfg;

/* ---- the engine link (link.c) ---------------------------------------- */

enum { GW_EV_MSG = 1, GW_EV_PIPE_ADD, GW_EV_PIPE_REM };

typedef struct gw_ev {
	struct gw_ev *next;
	int kind;
	uint32_t pipe; /* nng_pipe_id */
	proto_msg m;   /* GW_EV_MSG */
} gw_ev;

typedef struct gw_link {
	nng_socket eng;		/* PAIR1 dialed to engined.sock */
	nng_socket adm;		/* REQ dialed to admin.sock */
	/* their dialers (net.h: a dialer that comes back) */
	proto_dialer *eng_dial, *adm_dial;
	pthread_mutex_t adm_mu; /* one admin round trip at a time */
	pthread_t rx;
	int rx_started;
	pthread_mutex_t mu; /* the event list */
	gw_ev *head, *tail;
	uv_async_t async;
	int open;
	/* written by NNG's pipe callbacks, read anywhere */
	_Atomic uint32_t pipe; /* the live pipe's id; 0: engined is down */
	_Atomic int adm_pipes; /* pipes to cached's admin.sock */
} gw_link;

struct gw_srv;
int gw_link_open(struct gw_srv *s, char *err);
/* Closes the sockets, joins the receiver, frees queued events. */
void gw_link_close(struct gw_srv *s);
/* Sends from the loop thread. 0 or a negative code (-EPIPE: no engined). */
int gw_link_send(struct gw_srv *s, const proto_msg *m);
/* One REQ/REP round trip to cached: never on the loop thread. No pipe to
 * cached (it is down) is -ECONNREFUSED at once, not a timeout. */
int gw_link_admin(struct gw_srv *s, const proto_msg *q, proto_msg *reply);

/* ---- metrics (metrics.c) --------------------------------------------- */

#define GW_TTFT_BUCKETS 12
enum {
	GW_ROUTE_CHAT,
	GW_ROUTE_COMPLETIONS,
	GW_ROUTE_MODELS,
	GW_ROUTE_HEALTH,
	GW_ROUTE_METRICS,
	GW_ROUTE_STATS,
	GW_ROUTE_CLEAR,
	GW_ROUTE_PEEK,
	GW_ROUTE_PREWARM,
	GW_ROUTE_OTHER,
	GW_ROUTE_N
};

typedef struct gw_code_count {
	int route, code;
	uint64_t n;
} gw_code_count;

typedef struct gw_metrics {
	gw_code_count codes[128];
	int n_codes;
	uint64_t prompt_tokens, completion_tokens, cached_tokens;
	uint64_t tier_hits[PROTO_TIER_DISK + 1]; /* by proto_tier */
	uint64_t ttft_bucket[GW_TTFT_BUCKETS + 1]; /* the last is +Inf */
	double ttft_sum;
	uint64_t ttft_count;
} gw_metrics;

void gw_metrics_count(struct gw_srv *s, int route, int code);
void gw_metrics_done(struct gw_srv *s, const proto_done *d);
void gw_metrics_ttft(struct gw_srv *s, double seconds);
/* The Prometheus text; stats: cached's stats JSON or NULL (down). A
 * malloc'd string. */
char *gw_metrics_text(struct gw_srv *s, const json_t *stats, size_t *len);

/* ---- jobs -------------------------------------------------------------- */

typedef struct gw_anchor gw_anchor;

typedef struct gw_job {
	struct gw_srv *s;
	int kind, route;
	int refs;
	h2o_req_t *req;		    /* NULL once h2o freed it */
	gw_anchor *anchor;	    /* on req->pool; NULL with req */
	struct gw_job *next, *prev; /* the server's list of live jobs */

	/* input, copied off the h2o pool */
	char *body;
	size_t body_len;
	char *hdr_session; /* x-session-id, or NULL */
	uv_work_t work;

	/* prepared by the work */
	json_t *json; /* the parsed body (p.tools borrows from it) */
	gw_params p;  /* the prompt's ids included (aligned: align.c) */
	gw_fail fail;
	uint64_t n_client; /* the client's prompt tokens (usage) */
	int align_pass;	   /* the end alignment's pass; 0: the copy as sent */
	int box_busy;	   /* a peek's: a request in flight on the engine */
	int engine_unmet;  /* a peek's: cached knows no engine yet (peek.c) */
	uint64_t injected; /* hidden-span tokens the alignment put back */
	int continuation;  /* served as a compaction's continuation */
	uint32_t pw_tier;  /* a prewarm: the tier the peek found */
	uint64_t pw_cached;
	int from_cache;	   /* answered by the response cache */
	int prepared;	   /* answered from the prepared summary */
	int opencode;	   /* User-Agent: opencode/... */
	struct gw_compact *cp_seen; /* a compaction request's parts (prepare.c) */
	int32_t *rec;	   /* the generation's tokens, for the response */
	uint32_t *rec_fin; /* cache (respcache.c) */
	size_t n_rec, cap_rec;
	int rec_failed;

	/* the generation */
	uint64_t rid;  /* engined request id; 0: not sent */
	uint32_t pipe; /* the pipe it was sent on */
	int waiting;   /* for engined to come up */
	double deadline, t_start, t_first;
	int sent, done, cancelled, stopped, started;
	gw_tok_stream ts;
	int ts_init;
	gw_rs *rs;
	uint64_t n_tokens;
	/* p.logprobs: the output tokens' logprobs (reply.c keeps them, a
	 * streamed chunk carries those since the last one and drops them,
	 * the whole reply all); lp_failed: one could not be kept (no
	 * memory), the request ends with an error */
	gw_lp lp;
	int lp_failed;
	char id[48]; /* chatcmpl-... / cmpl-... */
	int64_t created;
	/* streamed SSE: what waits for the next h2o_send, and what the send
	 * in flight (or the final one) reads until proceed (or the request's
	 * end): the two are swapped at each send (sse.c) */
	moor_buf pend, wire;
	int sending, final_sent;
	double t_send; /* when the send in flight began */
	/* a whole reply's write deadline (gw_jobs_tick) runs from the first
	 * tick that saw have_done, and again from each tick that found its
	 * socket's send queue (unsent) changed: the client took bytes */
	double t_done;
	long unsent;
	int n_tool_calls;
	/* non-streamed and streamed: the finished reply's parts */
	proto_done dn;
	int have_done;
	char err_msg[MOOR_ERRLEN];

	/* the admission queue (admit.c) */
	struct gw_job *q_next; /* the flow's FIFO */
	uint64_t flow;
	double t_queued;
	int queued, admitted;

	/* the tenant (auth.c): the API key's salt (0: none) and the salt the
	 * caches are keyed by (the key's and the body's cache_salt) */
	uint64_t key_salt, salt;
	int is_admin; /* the request carries the admin token */

	/* admin work */
	proto_msg q, reply;
	int admin_rv;
	void (*admin_done)(struct gw_job *j);
	int admin_what;
} gw_job;

struct gw_anchor {
	h2o_generator_t gen; /* first: h2o gives it back to proceed/stop */
	gw_job *job;
};

/* ---- limits (limits.c) ------------------------------------------------ */

/* Before the parse: refuses a body of more than GW_MAX_JSON_TOKENS values
 * (a scan, no allocation). 0 or -1 with f filled (400). */
int gw_limits_scan(const char *body, size_t len, gw_fail *f);
/* After the parse, before the template: counts of messages and tools,
 * stop strings' lengths. 0 or -1 with f filled (400). */
int gw_limits_check(const json_t *body, gw_fail *f);
/* The bound gatewayd states for its RSS over its base (the model's
 * tokenizer and template loaded, no request), in bytes, from cfg's limits;
 * limits.c says what each term is. gatewayd logs it at start. */
uint64_t gw_limits_rss_bound(const gw_cfg *cfg);
/* Its logprobs term, in bytes (0 with --max-logprobs 0). */
uint64_t gw_limits_rss_lp(const gw_cfg *cfg);

/* ---- the admission queue (admit.c) ------------------------------------ */

#define GW_FLOW_BUCKETS 1024
#define GW_DRAIN_SAMPLES 64 /* the drain rate: over the last N ends */
#define GW_GONE_CHECKS 16   /* waiting clients checked per tick */

typedef struct gw_flow {
	uint64_t key;
	struct gw_flow *next;		   /* the bucket's chain */
	struct gw_flow *ring_next, *ring_prev; /* the flows with requests */
	gw_job *head, *tail;
} gw_flow;

typedef struct gw_admit {
	uint32_t queue_max, inflight_max;
	double wait_s;
	uint32_t n_queued, n_inflight;
	gw_flow **table; /* [GW_FLOW_BUCKETS] */
	gw_flow *ring;	 /* whose turn it is */
	double ends[GW_DRAIN_SAMPLES]; /* when generations ended, a ring */
	int k_ends;
	uint64_t n_ends;
	unsigned check_cursor;
	int pumping;
} gw_admit;

int gw_admit_init(gw_admit *a, uint32_t queue_max, uint32_t inflight,
		  double wait_s);
void gw_admit_fini(gw_admit *a);
/* A chat, completion, peek or prewarm job asks to run: 1 admitted now (run
 * it), 0 queued
 * (gw_job_admitted runs it later; the queue holds a reference), -1
 * refused (answered 503 + Retry-After). */
int gw_admit_enter(gw_job *j);
/* The admitted job's work ended (answered, failed, refused): its place
 * goes to the next waiting job. Idempotent. */
void gw_admit_leave(gw_job *j);
/* Admits waiting jobs while there is room. */
void gw_admit_pump(struct gw_srv *s);
/* Once per tick: waits past --queue-wait-s are answered 503, clients that
 * left are dropped. */
void gw_admit_tick(struct gw_srv *s);
/* SIGTERM: every waiting request is answered 503. */
void gw_admit_shutdown(struct gw_srv *s);
/* Requests ending per second (0: not measured yet), and the Retry-After
 * for a request with `ahead` requests before it. */
double gw_admit_rate(const gw_admit *a);
int gw_admit_retry_after(const gw_admit *a, uint32_t ahead);

/* ---- the compaction preparer (prepare.c) ------------------------------ */

enum { GW_PREP_IDLE = 0, GW_PREP_WORK, GW_PREP_RUN };

typedef struct gw_prep {
	/* the last chat turn that ended: its session, the prompt the engine
	 * read, whether an opencode client sent it */
	char *session;
	int32_t *ids;
	size_t n_ids;
	int opencode;
	uint64_t salt; /* the turn's cache salt: the run and its answer's */
	int tried; /* a summary was started for this record */
	double t_last; /* the last request's arrival or end */
	uint64_t seq;  /* counts them: a run started before one is dropped */
	/* the last compaction request of an opencode client, else (before
	 * one came: text_default) opencode 1.18.33's text */
	int have_text, text_default;
	moor_buf system, instructions;
	float temperature, top_p, min_p;
	int32_t top_k;
	uint32_t max_tokens;
	/* the run */
	int state; /* GW_PREP_* */
	uint64_t rid;
	int cancel_sent, failed;
	double t_run;
	/* the summary being written, then written (ready) */
	char *r_session;
	uint64_t r_salt;
	int32_t *r_ids; /* the continuation */
	size_t r_n;
	float r_temperature, r_top_p, r_min_p;
	int32_t r_top_k;
	uint32_t r_max;
	int32_t *toks;
	uint32_t *fin;
	size_t n_toks, cap_toks;
	int ready;
	proto_done done;
} gw_prep;

/* ---- the server ------------------------------------------------------ */

/* An accepted TCP connection (http.c): ours, so that a request whose
 * response has not started can be checked for a client that went away
 * (h2o 2.2's HTTP/1 does not read the socket while a handler works). */
typedef struct gw_conn {
	uv_tcp_t tcp; /* first: libuv's close callback gets it back */
	h2o_socket_t *sock; /* h2o's socket over tcp; lives as long as tcp */
	/* the body budget (http.c): the request bytes at the last check, when
	 * they last changed (uv_now, ms), shut down for stalling */
	size_t seen;
	uint64_t grew_at;
	uint64_t wait_since; /* uv_now it began to wait for a grant; 0: not */
	/* uv_now h2o's read deadline of its request runs from: the accept,
	 * or the previous response's end (its buffer seen emptied) */
	uint64_t read_from;
	int granted;	     /* holds one of the budget's grants */
	size_t reserve;	     /* its grant: bytes its request will hold */
	int evicted;
	struct sockaddr_storage peer;
	struct gw_conn *next, *prev;
	struct gw_srv *s;
} gw_conn;

/* An API key of --api-keys-file and its tenant's salt. */
typedef struct gw_key {
	char *key;
	size_t len;
	uint64_t salt;
} gw_key;

typedef struct gw_srv {
	gw_cfg cfg;
	gw_key *keys; /* [n_keys] */
	uint32_t n_keys;
	char *admin_token_own; /* read from --admin-token-file */
	uv_loop_t *loop;
	h2o_globalconf_t hconf;
	h2o_context_t hctx;
	h2o_accept_ctx_t actx;
	uv_tcp_t listener;
	uv_signal_t sig_term, sig_int, sig_hup;
	uv_timer_t tick;
	int stopping;
	double stop_at;

	gw_tok *tok;
	gw_tmpl_family family;
	int32_t stop_ids[GW_MAX_STOP_IDS];
	int n_stop_ids;
	/* the reasoning budget's close: Qwen's phrase (hidden) then
	 * </think> and the blank line (GW_CLOSE_PHRASE, main.c) */
	int32_t close_ids[64];
	uint32_t n_close, n_close_hidden;
	int32_t think_close;
	gw_gen_defaults defs;
	int64_t started_unix;

	gw_link link;
	gw_admit admit;
	gw_metrics m;
	gw_job *jobs;	/* live jobs (a list: a handful at a time) */
	/* bodies being read on the thread pool (job.c), and the most at
	 * once: admitted jobs only, so at most cfg.inflight (limits.c) */
	uint32_t n_reading, reading_peak;
	gw_conn *conns; /* accepted connections */
	uint32_t n_conns;
	uint64_t conns_refused; /* past --max-conns */
	/* the body budget (http.c): a check handle sums the connections'
	 * input buffers and pauses readers past cfg.body_budget */
	uv_check_t budget_chk;
	uint64_t budget_at;	 /* uv_now of the last sum, ms */
	uint64_t buffered;	 /* bytes in every input buffer at that sum */
	uint64_t buffered_peak;	 /* the largest sum seen */
	int over_budget;	 /* the last check found it over */
	uint64_t budget_pauses;	 /* connections paused, ever */
	uint64_t budget_evicted; /* stalled ones shut down, ever */
	uint64_t budget_refused; /* kept unread to their deadline: 503 */
	gw_conn **budget_tmp;	 /* cfg.max_conns entries: the paused, sorted */
	uint64_t next_rid;
	uint64_t next_id;

	gw_prep prep; /* the compaction preparer (prepare.c) */
	struct gw_rc *rc; /* the response cache (respcache.c); NULL: off */

	/* prefill rate samples (tokens/s) of long prefills, a ring */
	double pf_rate[GW_PREFILL_SAMPLES];
	int pf_n, pf_k;
} gw_srv;

/* auth.c */
/* Reads --admin-token-file and --api-keys-file. 0 or negative (err). */
int gw_auth_load(gw_srv *s, char *err);
void gw_auth_free(gw_srv *s);
/* 1 when req carries the admin token (none configured: 0). */
int gw_auth_admin(gw_srv *s, h2o_req_t *req);
/* 1 when req carries one of the API keys, its tenant's salt in key_salt;
 * 0 otherwise (no keys configured: 0, key_salt 0). */
int gw_auth_key(gw_srv *s, h2o_req_t *req, uint64_t *key_salt);
/* The salt the caches are keyed by: 0 for no key salt and no cache_salt
 * (cache_salt NULL), else a hash of both, never 0. */
uint64_t gw_salt(uint64_t key_salt, const char *cache_salt, size_t len);
/* 401 with WWW-Authenticate, in OpenAI's error shape. */
void gw_auth_refuse(gw_srv *s, h2o_req_t *req, int route, int admin);

/* http.c */
int gw_http_start(gw_srv *s, char *err);
void gw_http_stop(gw_srv *s);
/* Answers req with status and a JSON body (len bytes; copied). */
void gw_send_json(h2o_req_t *req, int status, const char *body, size_t len);
/* The same with body's bytes taken, not copied (a whole reply with
 * logprobs: its largest): h2o's request pool owns them and frees them
 * when the request ends; body is zeroed. A body with its err set or
 * nothing put: 500. */
void gw_send_json_take(h2o_req_t *req, int status, moor_buf *body);
/* The OpenAI error shape. param / code may be NULL (null in the JSON). */
void gw_send_error(h2o_req_t *req, int status, const char *type,
		   const char *param, const char *code, int retry_after,
		   const char *fmt, ...) __attribute__((format(printf, 7, 8)));
void gw_send_fail(h2o_req_t *req, const gw_fail *f);
/* Whether the client of req has closed its connection (an EOF or a reset
 * seen without consuming anything). */
int gw_client_gone(gw_srv *s, h2o_req_t *req);
/* The bytes req's connection has written that its client has not taken
 * yet (the socket's send queue), or -1 when its socket is not found. */
long gw_conn_unsent(gw_srv *s, h2o_req_t *req);
/* Shuts req's connection down (a client that stopped reading): h2o's
 * pending write fails and h2o closes the connection, freeing req. */
void gw_conn_abort(gw_srv *s, h2o_req_t *req);
/* A header's value (h2o's lowercase name), or NULL. */
const h2o_iovec_t *gw_header(h2o_req_t *req, const char *name);

/* job.c: the jobs' lifecycle */
gw_job *gw_job_new(gw_srv *s, h2o_req_t *req, int kind, int route);
void gw_job_unref(gw_job *j);
/* The request went away: forget it, cancel a running generation. */
void gw_job_detach(gw_job *j);
/* Sends PROTO_CANCEL for a generation in flight (once; no-op otherwise). */
void gw_job_cancel(gw_job *j);
/* A chat, completion or peek job: the body copied, read on the thread pool
 * (gw_params_read), then sent to engined (or, a peek, answered). Always
 * answers req, on failure too; returns 0 (h2o's "handled"). */
int gw_job_start(gw_srv *s, h2o_req_t *req, int kind, int route);
/* A queued job was admitted (admit.c): its body is read and it runs. */
void gw_job_admitted(gw_job *j);
/* job.c: routes */
int gw_on_chat(gw_srv *s, h2o_req_t *req);
int gw_on_completions(gw_srv *s, h2o_req_t *req);
/* job.c: engine events on the loop */
void gw_on_engine_msg(gw_srv *s, proto_msg *m);
void gw_on_engine_pipe(gw_srv *s, int up, uint32_t pipe);
/* once per tick: waiting requests sent or refused */
void gw_jobs_tick(gw_srv *s);
/* SIGTERM: refuse waiting requests, cancel running ones */
void gw_jobs_shutdown(gw_srv *s);

/* reply.c: a token of the generation (STEP) pushed into the reply */
void gw_reply_token(gw_job *j, const proto_step_entry *e);
/* The DONE (engined's or the job's own error) is in j->dn: the reply goes
 * out, whole or as the stream's end, and the engine's reference is
 * dropped. */
void gw_reply_finish(gw_job *j);
/* The usage object of a finished generation (a new reference). */
json_t *gw_reply_usage(const gw_job *j);
/* finish_reason: "stop", "length" or "tool_calls" (n_calls > 0). */
const char *gw_reply_finish_name(const gw_job *j, int n_calls);

/* sse.c: the streamed reply */
/* The 200 and its headers, once, before the first piece (a chat's first
 * delta carries the role). No-op once started or with no request. */
void gw_sse_start(gw_job *j);
/* A gw_rs_cb: one event of the stream parser as a chunk (arg: the job). */
int gw_sse_event(void *arg, const gw_rs_event *ev);
/* The finish chunk, the usage chunk when asked for, [DONE]. */
void gw_sse_end(gw_job *j);
/* A long prefill's progress as an SSE comment line (streamed replies
 * only: a whole reply is unchanged); starts the response. */
void gw_sse_progress(gw_job *j, const proto_progress *p);
/* An error event after the 200 went out, then [DONE]. */
void gw_sse_error(gw_job *j, const char *type, const char *msg);
/* Sends what is pending unless a send is in flight (h2o's proceed sends
 * the rest); the final send once the DONE is in. */
void gw_sse_flush(gw_job *j);
/* h2o's generator callbacks of a job's anchor (gw_job_new sets them). */
void gw_sse_proceed(h2o_generator_t *g, h2o_req_t *req);

/* align.c: on the thread pool after the body was read, the end alignment
 * of the copy (text/endalign.h); sets n_client, may replace p.ids. */
void gw_align_work(gw_job *j);

/* journal.c: one JSON line per finished turn (--state-dir) */
void gw_journal_turn(gw_job *j, const char *finish);

/* respcache.c: the response cache (off unless --response-cache on) */
typedef struct gw_rc gw_rc;
/* s->rc allocated when the cache is on (NULL when off); 0 or -ENOMEM. */
int gw_rc_init(struct gw_srv *s);
void gw_rc_fini(struct gw_srv *s); /* frees every entry; safe when off */
/* Whether the cache deals with j: greedy, not a prewarm, no logprobs. */
int gw_rc_greedy(const gw_job *j);
/* Answers j from memory when an identical greedy request was kept: 1 (the
 * reply went out), 0 (send it to engined). */
int gw_rc_replay(gw_job *j);
void gw_rc_record(gw_job *j, const proto_step_entry *e); /* a STEP token */
void gw_rc_keep(gw_job *j); /* at the DONE: kept when it ended on its own */

/* compact.c: compaction as a continuation (its header says how a
 * compaction request is recognised and what the guard checks) */
typedef struct gw_compact {
	int is;
	int no_guard; /* the preparer's: no client history to check */
	moor_buf system, instructions; /* the client's system text, the
					* summary instructions */
	moor_buf first_user, last_user; /* the guard's lines */
} gw_compact;
/* 1 with out filled when body is a compaction request of session. */
int gw_compact_detect(const json_t *body, const char *session,
		      gw_compact *out);
void gw_compact_fini(gw_compact *c);
/* opencode 1.18.33's compaction text (its compaction agent's prompt, the
 * instructions of a first compaction) into out, zeroed first; the
 * preparer's until a request brings the client's own. -ENOMEM. */
int gw_compact_default(gw_compact *out);
/* The continuation of rows[0, end) (the end anchor's record) when the
 * guard holds: 1 with *ids (malloc'd) and *n; 0 with *why when it does
 * not; -ENOMEM. A cp with no_guard (the preparer's, which has no
 * client history to check) skips the guard. */
int gw_compact_build(gw_srv *s, const gw_compact *cp, const int32_t *rows,
		     size_t end, int32_t **ids, size_t *n, const char **why);

/* prepare.c: the compaction preparer (its header says when it runs and
 * when its summary is served). Loop thread. */
void gw_prep_activity(gw_srv *s); /* a request came: stop, wait again */
void gw_prep_turn_end(gw_job *j); /* a chat turn ended: the new record */
/* a compaction request of an opencode client: its text and parameters */
void gw_prep_learn(gw_job *j, const gw_compact *cp);
void gw_prep_tick(gw_srv *s);
/* engined's STEP entry / DONE of the preparer's run: 1 when it was */
int gw_prep_step(gw_srv *s, const proto_step_entry *e);
int gw_prep_done(gw_srv *s, uint64_t req, const proto_done *d);
void gw_prep_engine_gone(gw_srv *s);
/* Answers a continuation from the prepared summary: 1 (answered) or 0. */
int gw_prep_replay(gw_job *j);
void gw_prep_fini(gw_srv *s);

/* peek.c: POST /v1/cache/peek and POST /v1/cache/prewarm */
int gw_on_cache_peek(gw_srv *s, h2o_req_t *req);
int gw_on_cache_prewarm(gw_srv *s, h2o_req_t *req);
/* A prewarm's generation ended (reply.c hands its DONE here). */
void gw_prewarm_done(gw_job *j);
/* job.c: sends a prepared job to engined (or holds it while engined is
 * down); the job's reference for the engine is taken here. */
void gw_job_submit(gw_job *j);
/* On the thread pool, after the body was read: the round trip to cached. */
void gw_peek_work(gw_job *j);
/* Whether a request is in flight on the engine, whoever sent it (cached's
 * open plan): 1 busy, 0 idle, -1 cached did not say. Thread pool. */
int gw_box_busy(gw_srv *s);
/* On the loop: the answer. */
void gw_peek_answer(gw_job *j);
/* Whether a generation of this gateway is running or waiting for engined
 * (engined's one sequence is taken: the rows a peek would read are being
 * rewritten). */
int gw_turn_running(const gw_srv *s);
/* The 409 of a peek or prewarm while a turn runs (on_engine: another
 * client's, seen in cached's open plan). */
void gw_peek_conflict(h2o_req_t *req, int on_engine);

/* routes.c */
int gw_on_models(gw_srv *s, h2o_req_t *req);
int gw_on_health(gw_srv *s, h2o_req_t *req);
int gw_on_metrics(gw_srv *s, h2o_req_t *req);
int gw_on_cache_stats(gw_srv *s, h2o_req_t *req);
int gw_on_cache_clear(gw_srv *s, h2o_req_t *req);
/* Starts an admin round trip on the thread pool; done runs on the loop. */
int gw_admin_start(gw_job *j, void (*done)(gw_job *j));

/* metrics.c: the prefill rate of this gateway's long prefills */
void gw_prefill_sample(gw_srv *s, const proto_done *d);
/* The median of the last GW_PREFILL_SAMPLES, tokens/s
 * (GW_PREFILL_PRIOR_TPS before any). */
double gw_prefill_rate(const gw_srv *s);


#endif
