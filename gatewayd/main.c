/* main.c: gatewayd, the OpenAI-compatible HTTP gateway: flags, the model's
 * tokenizer and template, the links to engined and cached, the loop, and a
 * clean stop on SIGTERM/SIGINT (nothing new is started, waiting requests
 * are refused, running generations are cancelled, the answers go out, the
 * loop closes). */
#include <getopt.h>
#include <libgen.h>
#include <limits.h>
#include <malloc.h>
#include <signal.h>
#include <stdatomic.h>
#include <errno.h>
#include <stdio.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gw.h"
#include "util.h"

#define GW_STOP_GRACE_S 3.0 /* after SIGTERM: answers in flight finish */

static void usage(FILE *f)
{
	fprintf(f,
		"usage: gatewayd --model DIR [options]\n"
		"  --model DIR              checkpoint dir (tokenizer.json, "
		"template)\n"
		"  --listen HOST:PORT       (default 127.0.0.1:8000)\n"
		"  --run-dir DIR            sockets of cached and engined "
		"(default\n"
		"                           $XDG_RUNTIME_DIR/moor or "
		"/tmp/moor-$UID)\n"
		"  --admin-token-file FILE  the admin token: FILE's first "
		"line (or env\n"
		"                           MOOR_ADMIN_TOKEN); it opens "
		"clear, peek,\n"
		"                           prewarm and the session parts of "
		"stats\n"
		"  --api-keys-file FILE     'KEY [TENANT]' a line: the "
		"inference routes\n"
		"                           need 'Bearer KEY'; each tenant's "
		"caches are\n"
		"                           its own (default: no keys)\n"
		"  --allowed-hosts LIST     Host names allowed besides IP "
		"literals and\n"
		"                           localhost (comma list; .example.com "
		"matches\n"
		"                           its subdomains; * any): others get "
		"403\n"
		"  --chat-template NAME     qwen3, qwen3.5, qwen3.6, qwen3.8 "
		"(default:\n"
		"                           the checkpoint's own)\n"
		"  --served-model-name NAME (default: the model dir's "
		"basename)\n"
		"  --engine-wait-s S        how long a request waits for "
		"engined (10)\n"
		"  --request-timeout-s S    a request sent to engined that has "
		"not\n"
		"                           ended by then is cancelled and "
		"answered\n"
		"                           504 (600)\n"
		"  --max-body-bytes N       larger request bodies get 413 (4 MiB: "
		"a\n"
		"                           128k-token conversation with tools "
		"is\n"
		"                           under 2 MB of JSON)\n"
		"  --max-conns N            connections at once; past it 503 "
		"(4096;\n"
		"                           lowered to what RLIMIT_NOFILE "
		"allows)\n"
		"  --body-budget-bytes N    request bytes buffered across "
		"connections;\n"
		"                           past it, bodies being read wait "
		"(256 MiB)\n"
		"  --read-timeout-s S       a request's head and body arrive "
		"within (30)\n"
		"  --write-timeout-s S      a client that takes no bytes for "
		"that long\n"
		"                           is disconnected (30)\n"
		"  --inflight N             requests read and sent to engined "
		"at a\n"
		"                           time; the rest wait their turn (4)\n"
		"  --queue-max N            requests that may wait (4096); past "
		"it: 503\n"
		"  --queue-wait-s S         the longest wait; past it: 503 with "
		"a\n"
		"                           Retry-After from the drain rate "
		"(120)\n"
		"  --default-max-tokens N   chat max_tokens when unset (1024)\n"
		"  --window N               engined's window: caps the default "
		"(32768)\n"
		"  --end-align on|off       align a client's copy to the end "
		"anchor on\n"
		"                           the rows' own bytes (on)\n"
		"  --end-align-reasoning on|off  its second pass, for copies "
		"that leave\n"
		"                           earlier reasoning out (on)\n"
		"  --state-dir DIR          the journal: DIR/journal.jsonl, a "
		"line a turn\n"
		"                           (default: none)\n"
		"  --journal-max-mb N       rotate the journal past N MiB (64)\n"
		"  --response-cache on|off  answer an identical greedy request "
		"from\n"
		"                           memory (off)\n"
		"  --compaction-prepare on|off  write an idle opencode "
		"session's summary\n"
		"                           ahead in scratch rows (on)\n"
		"  --compaction-idle-s S    ... after S seconds without a "
		"request (30)\n"
		"  --compaction-min-tokens N  ... of a conversation of at "
		"least N\n"
		"                           tokens (32768)\n"
		"  --reasoning-budget N     reasoning tokens before the server "
		"closes the\n"
		"                           reasoning (0: none; a body's "
		"reasoning_budget\n"
		"                           or thinking_budget wins) (0)\n"
		"  --max-logprobs N         the most alternatives a token's "
		"logprobs\n"
		"                           may list, 0 to 20 (more: 400); 0 "
		"refuses\n"
		"                           logprobs, and their RSS bound's "
		"term (20)\n"
		"  --log-level L            error, warn, info, debug (info)\n");
}

static int parse_double(const char *s, double *out)
{
	char *end;
	double v = strtod(s, &end);
	if (end == s || *end || !(v >= 0) || v > 1e6)
		return -1;
	*out = v;
	return 0;
}

/* generation_config.json: sampling defaults and eos ids, when present. */
static void read_gen_config(gw_srv *s)
{
	char p[PATH_MAX];
	snprintf(p, sizeof p, "%s/generation_config.json", s->cfg.model_dir);
	json_t *g = json_load_file(p, 0, NULL);
	if (!g)
		return;
	const json_t *v;
	if (json_is_number(v = json_object_get(g, "temperature")))
		s->defs.temperature = json_number_value(v);
	if (json_is_number(v = json_object_get(g, "top_p")))
		s->defs.top_p = json_number_value(v);
	if (json_is_integer(v = json_object_get(g, "top_k")))
		s->defs.top_k = (int32_t)json_integer_value(v);
	if (json_is_number(v = json_object_get(g, "min_p")))
		s->defs.min_p = json_number_value(v);
	v = json_object_get(g, "eos_token_id");
	json_t *one = json_is_integer(v) ? json_pack("[O]", v) : NULL;
	const json_t *arr = one ? one : v;
	for (size_t i = 0; json_is_array(arr) && i < json_array_size(arr);
	     i++) {
		const json_t *e = json_array_get(arr, i);
		if (!json_is_integer(e))
			continue;
		int32_t id = (int32_t)json_integer_value(e);
		int dup = 0;
		for (int k = 0; k < s->n_stop_ids; k++)
			dup |= s->stop_ids[k] == id;
		if (!dup && s->n_stop_ids < GW_MAX_STOP_IDS)
			s->stop_ids[s->n_stop_ids++] = id;
	}
	json_decref(one);
	json_decref(g);
	moor_info("generation_config.json: temperature %g, top_p %g, top_k %d",
		  s->defs.temperature, s->defs.top_p, s->defs.top_k);
}

/* --max-conns needs as many descriptors, and GW_FDS_SPARE for the rest
 * (the listener, the NNG sockets, the logs, the pool's files). A soft
 * RLIMIT_NOFILE below it (1,024 under systemd and most shells) is raised
 * toward the hard limit; a hard limit below it lowers --max-conns, said
 * once: past it a client gets the 503 of --max-conns, not an accept that
 * fails with EMFILE and a connection dropped unanswered. */
#define GW_FDS_SPARE 64
static void fit_nofile(gw_cfg *c)
{
	struct rlimit rl;
	if (getrlimit(RLIMIT_NOFILE, &rl))
		return;
	rlim_t want = (rlim_t)c->max_conns + GW_FDS_SPARE;
	if (rl.rlim_cur >= want)
		return;
	rlim_t cur = rl.rlim_max == RLIM_INFINITY || rl.rlim_max >= want
			 ? want
			 : rl.rlim_max;
	if (cur > rl.rlim_cur) {
		struct rlimit n = {cur, rl.rlim_max};
		if (!setrlimit(RLIMIT_NOFILE, &n))
			rl.rlim_cur = cur;
	}
	if (rl.rlim_cur >= want)
		return;
	uint32_t was = c->max_conns;
	c->max_conns = rl.rlim_cur > 2 * GW_FDS_SPARE
			   ? (uint32_t)(rl.rlim_cur - GW_FDS_SPARE)
			   : GW_FDS_SPARE;
	moor_warn("--max-conns %u: the descriptor limit is %llu "
		  "(RLIMIT_NOFILE; LimitNOFILE= in a unit, ulimit -n): serving "
		  "at most %u connections",
		  was, (unsigned long long)rl.rlim_cur, c->max_conns);
}

static void on_close_walk(uv_handle_t *h, void *arg)
{
	if (!uv_is_closing(h))
		uv_close(h, NULL);
}

/* The RSS bound (gw_limits_rss_bound) is of live bytes; glibc's malloc
 * keeps freed ones unless told: with its dynamic mmap threshold an 8 MiB
 * input buffer once freed raises the threshold, so the next ones come
 * from the heap and stay there, fragmented; each pool thread's arena
 * keeps what its parses freed (six parses of 131,000 empty objects held
 * ~115 MiB past the requests' end in test_gw_rss_bound). So: blocks from
 * GW_MMAP_THRESHOLD up are mapped and unmapped at free (a fixed threshold,
 * no dynamic one), at most GW_ARENAS arenas, and what the heaps hold free
 * goes back each GW_TRIM_S. */
#define GW_MMAP_THRESHOLD (256 << 10)
#define GW_ARENAS 2
#define GW_TRIM_S 1.0
static void malloc_limits(void)
{
	mallopt(M_MMAP_THRESHOLD, GW_MMAP_THRESHOLD);
	mallopt(M_ARENA_MAX, GW_ARENAS);
}

static void on_tick(uv_timer_t *t)
{
	gw_srv *s = t->data;
	static double trimmed;
	double now = moor_now();
	if (now - trimmed >= GW_TRIM_S) {
		trimmed = now;
		malloc_trim(0);
	}
	gw_jobs_tick(s);
	if (s->stopping) {
		int live = 0;
		for (gw_job *j = s->jobs; j; j = j->next)
			live += j->req != NULL || (j->sent && !j->have_done);
		if (!live || moor_now() > s->stop_at)
			uv_stop(s->loop);
	}
}

static void on_signal(uv_signal_t *h, int sig)
{
	gw_srv *s = h->data;
	if (s->stopping)
		return;
	moor_info("%s: refusing new requests, cancelling the running ones",
		  strsignal(sig));
	s->stopping = 1;
	s->stop_at = moor_now() + GW_STOP_GRACE_S;
	gw_http_stop(s);
	gw_jobs_shutdown(s);
}

int main(int argc, char **argv)
{
	static gw_srv srv;
	gw_srv *s = &srv;
	char err[MOOR_ERRLEN] = "";
	moor_log_set_name("gatewayd");
	signal(SIGPIPE, SIG_IGN);

	const char *listen = "127.0.0.1:8000", *served = NULL;
	s->cfg.engine_wait_s = 10;
	s->cfg.request_timeout_s = 600;
	s->cfg.queue_max = 4096;
	s->cfg.max_body = GW_MAX_BODY_DEFAULT;
	s->cfg.max_conns = GW_MAX_CONNS_DEFAULT;
	s->cfg.body_budget = GW_BODY_BUDGET_DEFAULT;
	s->cfg.read_timeout_s = 30;
	s->cfg.write_timeout_s = 30;
	s->cfg.inflight = 4;
	s->cfg.queue_wait_s = 120;
	s->cfg.default_max_tokens = 1024;
	s->cfg.window = 32768;
	s->cfg.end_align = 1;
	s->cfg.journal_max_mb = 64;
	s->cfg.end_align_reasoning = 1;
	s->cfg.compaction_prepare = 1;
	s->cfg.compaction_idle_s = 30;
	s->cfg.compaction_min_tokens = 32768;
	s->cfg.max_logprobs = PROTO_MAX_TOP;
	s->cfg.admin_token = getenv("MOOR_ADMIN_TOKEN");
	s->defs = (gw_gen_defaults){.temperature = 1.0, .top_p = 1.0};

	enum {
		O_MODEL = 1,
		O_LISTEN,
		O_RUN,
		O_TOKEN,
		O_TOKEN_FILE,
		O_KEYS_FILE,
		O_HOSTS,
		O_TMPL,
		O_SERVED,
		O_WAIT,
		O_REQ_TIMEOUT,
		O_INFLIGHT,
		O_MAX_BODY,
		O_MAX_CONNS,
		O_BODY_BUDGET,
		O_READ_TIMEOUT,
		O_WRITE_TIMEOUT,
		O_QUEUE_MAX,
		O_QUEUE_WAIT,
		O_MAXTOK,
		O_WINDOW,
		O_LOG,
		O_ALIGN,
		O_ALIGN_R,
		O_BUDGET,
		O_RCACHE,
		O_STATE,
		O_JMAX,
		O_CPREP,
		O_CIDLE,
		O_CMIN,
		O_MAXLP,
		O_HELP
	};
	static const struct option lo[] = {
	    {"model", 1, 0, O_MODEL},
	    {"listen", 1, 0, O_LISTEN},
	    {"run-dir", 1, 0, O_RUN},
	    {"admin-token", 1, 0, O_TOKEN},
	    {"admin-token-file", 1, 0, O_TOKEN_FILE},
	    {"api-keys-file", 1, 0, O_KEYS_FILE},
	    {"allowed-hosts", 1, 0, O_HOSTS},
	    {"chat-template", 1, 0, O_TMPL},
	    {"served-model-name", 1, 0, O_SERVED},
	    {"engine-wait-s", 1, 0, O_WAIT},
	    {"request-timeout-s", 1, 0, O_REQ_TIMEOUT},
	    {"inflight", 1, 0, O_INFLIGHT},
	    {"max-body-bytes", 1, 0, O_MAX_BODY},
	    {"max-conns", 1, 0, O_MAX_CONNS},
	    {"body-budget-bytes", 1, 0, O_BODY_BUDGET},
	    {"read-timeout-s", 1, 0, O_READ_TIMEOUT},
	    {"write-timeout-s", 1, 0, O_WRITE_TIMEOUT},
	    {"queue-max", 1, 0, O_QUEUE_MAX},
	    {"queue-wait-s", 1, 0, O_QUEUE_WAIT},
	    {"default-max-tokens", 1, 0, O_MAXTOK},
	    {"window", 1, 0, O_WINDOW},
	    {"log-level", 1, 0, O_LOG},
	    {"end-align", 1, 0, O_ALIGN},
	    {"end-align-reasoning", 1, 0, O_ALIGN_R},
	    {"reasoning-budget", 1, 0, O_BUDGET},
	    {"response-cache", 1, 0, O_RCACHE},
	    {"state-dir", 1, 0, O_STATE},
	    {"journal-max-mb", 1, 0, O_JMAX},
	    {"compaction-prepare", 1, 0, O_CPREP},
	    {"compaction-idle-s", 1, 0, O_CIDLE},
	    {"compaction-min-tokens", 1, 0, O_CMIN},
	    {"max-logprobs", 1, 0, O_MAXLP},
	    {"help", 0, 0, O_HELP},
	    {0, 0, 0, 0},
	};
	int o;
	opterr = 0;
	while ((o = getopt_long(argc, argv, "", lo, NULL)) != -1) {
		switch (o) {
		case O_MODEL:
			s->cfg.model_dir = optarg;
			break;
		case O_LISTEN:
			listen = optarg;
			break;
		case O_RUN:
			snprintf(s->cfg.run_dir, sizeof s->cfg.run_dir, "%s",
				 optarg);
			break;
		case O_TOKEN: {
			/* a token in argv is in ps for every user: kept for
			 * old scripts, copied, its argv bytes scrubbed */
			static char tok[4096];
			snprintf(tok, sizeof tok, "%s", optarg);
			memset(optarg, 'x', strlen(optarg));
			s->cfg.admin_token = tok;
			moor_warn("--admin-token on the command line is visible "
				  "to every user (ps); use --admin-token-file "
				  "or MOOR_ADMIN_TOKEN");
			break;
		}
		case O_TOKEN_FILE:
			s->cfg.admin_token_file = optarg;
			break;
		case O_KEYS_FILE:
			s->cfg.api_keys_file = optarg;
			break;
		case O_HOSTS:
			s->cfg.allowed_hosts = optarg;
			break;
		case O_TMPL:
			s->cfg.chat_template = optarg;
			break;
		case O_SERVED:
			served = optarg;
			break;
		case O_WAIT:
			if (parse_double(optarg, &s->cfg.engine_wait_s)) {
				fprintf(
				    stderr,
				    "gatewayd: --engine-wait-s %s: expected "
				    "seconds >= 0\n",
				    optarg);
				return 2;
			}
			break;
		case O_REQ_TIMEOUT:
			if (parse_double(optarg, &s->cfg.request_timeout_s) ||
			    s->cfg.request_timeout_s <= 0) {
				fprintf(stderr,
					"gatewayd: --request-timeout-s %s: "
					"expected seconds > 0\n",
					optarg);
				return 2;
			}
			break;
		case O_READ_TIMEOUT:
		case O_WRITE_TIMEOUT: {
			double *dst = o == O_READ_TIMEOUT
					  ? &s->cfg.read_timeout_s
					  : &s->cfg.write_timeout_s;
			if (parse_double(optarg, dst) || *dst <= 0) {
				fprintf(stderr,
					"gatewayd: --%s %s: expected seconds "
					"> 0\n",
					o == O_READ_TIMEOUT ? "read-timeout-s"
							    : "write-timeout-s",
					optarg);
				return 2;
			}
			break;
		}
		case O_MAX_BODY:
		case O_MAX_CONNS: {
			uint32_t *dst = o == O_MAX_BODY ? &s->cfg.max_body
							: &s->cfg.max_conns;
			if (moor_parse_u32(optarg, dst) || *dst == 0 ||
			    (o == O_MAX_BODY && *dst > (256u << 20))) {
				fprintf(stderr,
					"gatewayd: --%s %s: expected a "
					"positive integer%s\n",
					o == O_MAX_BODY ? "max-body-bytes"
							: "max-conns",
					optarg,
					o == O_MAX_BODY ? " up to 256 MiB" : "");
				return 2;
			}
			break;
		}
		case O_BODY_BUDGET: {
			char *end;
			unsigned long long v = strtoull(optarg, &end, 10);
			if (!*optarg || *end || v < (1u << 20) ||
			    v > (64ull << 30)) {
				fprintf(stderr,
					"gatewayd: --body-budget-bytes %s: "
					"expected bytes in [1 MiB, 64 GiB]\n",
					optarg);
				return 2;
			}
			s->cfg.body_budget = v;
			break;
		}
		case O_QUEUE_WAIT:
			if (parse_double(optarg, &s->cfg.queue_wait_s)) {
				fprintf(stderr,
					"gatewayd: --queue-wait-s %s: expected "
					"seconds >= 0\n",
					optarg);
				return 2;
			}
			break;
		case O_INFLIGHT:
		case O_QUEUE_MAX: {
			uint32_t *dst = o == O_INFLIGHT ? &s->cfg.inflight
							: &s->cfg.queue_max;
			if (moor_parse_u32(optarg, dst) ||
			    (o == O_INFLIGHT && *dst == 0) || *dst > 1000000) {
				fprintf(stderr,
					"gatewayd: --%s %s: expected an "
					"integer in [%d, 1000000]\n",
					o == O_INFLIGHT ? "inflight"
							: "queue-max",
					optarg, o == O_INFLIGHT);
				return 2;
			}
			break;
		}
		case O_MAXTOK:
		case O_WINDOW: {
			uint32_t *dst = o == O_MAXTOK
					    ? &s->cfg.default_max_tokens
					    : &s->cfg.window;
			if (moor_parse_u32(optarg, dst) || *dst == 0) {
				fprintf(stderr,
					"gatewayd: --%s %s: expected a "
					"positive integer\n",
					o == O_MAXTOK ? "default-max-tokens"
						      : "window",
					optarg);
				return 2;
			}
			break;
		}
		case O_LOG: {
			static const char *const lv[] = {"error", "warn",
							 "info", "debug"};
			int k = -1;
			for (int i = 0; i < 4; i++)
				if (!strcmp(optarg, lv[i]))
					k = i;
			if (k < 0) {
				fprintf(stderr,
					"gatewayd: --log-level %s: expected "
					"error, warn, info or debug\n",
					optarg);
				return 2;
			}
			moor_log_level = k;
			break;
		}
		case O_STATE:
			snprintf(s->cfg.state_dir, sizeof s->cfg.state_dir,
				 "%s", optarg);
			break;
		case O_JMAX:
			if (moor_parse_u32(optarg, &s->cfg.journal_max_mb) ||
			    !s->cfg.journal_max_mb ||
			    s->cfg.journal_max_mb > 65536) {
				fprintf(stderr,
					"gatewayd: --journal-max-mb %s: "
					"expected 1 to 65536\n",
					optarg);
				return 2;
			}
			break;
		case O_BUDGET:
			if (moor_parse_u32(optarg, &s->cfg.reasoning_budget)) {
				fprintf(stderr,
					"gatewayd: --reasoning-budget %s: "
					"expected an integer >= 0\n",
					optarg);
				return 2;
			}
			break;
		case O_CIDLE:
			if (parse_double(optarg, &s->cfg.compaction_idle_s)) {
				fprintf(stderr,
					"gatewayd: --compaction-idle-s %s: "
					"expected seconds >= 0\n",
					optarg);
				return 2;
			}
			break;
		case O_CMIN:
			if (moor_parse_u32(optarg,
					   &s->cfg.compaction_min_tokens)) {
				fprintf(stderr,
					"gatewayd: --compaction-min-tokens %s: "
					"expected an integer >= 0\n",
					optarg);
				return 2;
			}
			break;
		case O_MAXLP:
			if (moor_parse_u32(optarg, &s->cfg.max_logprobs) ||
			    s->cfg.max_logprobs > PROTO_MAX_TOP) {
				fprintf(stderr,
					"gatewayd: --max-logprobs %s: expected "
					"an integer in [0, %d]\n",
					optarg, PROTO_MAX_TOP);
				return 2;
			}
			break;
		case O_RCACHE:
		case O_ALIGN:
		case O_CPREP:
		case O_ALIGN_R: {
			int v = !strcmp(optarg, "on")	 ? 1
				: !strcmp(optarg, "off") ? 0
							 : -1;
			if (v < 0) {
				fprintf(stderr,
					"gatewayd: --%s %s: expected on or "
					"off\n",
					o == O_ALIGN	 ? "end-align"
					: o == O_RCACHE ? "response-cache"
					: o == O_CPREP	? "compaction-prepare"
							: "end-align-reasoning",
					optarg);
				return 2;
			}
			*(o == O_ALIGN	   ? &s->cfg.end_align
			  : o == O_RCACHE ? &s->cfg.response_cache
			  : o == O_CPREP  ? &s->cfg.compaction_prepare
					  : &s->cfg.end_align_reasoning) = v;
			break;
		}
		case O_HELP:
			usage(stdout);
			return 0;
		default:
			fprintf(stderr,
				"gatewayd: %s: unknown option or "
				"missing value\n",
				argv[optind - 1]);
			usage(stderr);
			return 2;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "gatewayd: unexpected argument '%s'\n",
			argv[optind]);
		usage(stderr);
		return 2;
	}
	if (!s->cfg.model_dir) {
		fprintf(stderr, "gatewayd: --model DIR is required\n");
		usage(stderr);
		return 2;
	}
	if (gw_auth_load(s, err)) {
		moor_err("%s", err);
		return 2;
	}
	fit_nofile(&s->cfg);
	if (s->cfg.admin_token && !*s->cfg.admin_token)
		s->cfg.admin_token = NULL;
	{
		const char *c = strrchr(listen, ':');
		char *end;
		long port = c ? strtol(c + 1, &end, 10) : -1;
		if (!c || c == listen ||
		    (size_t)(c - listen) >= sizeof s->cfg.listen_host || *end ||
		    port <= 0 || port > 65535) {
			fprintf(stderr,
				"gatewayd: --listen %s: expected HOST:PORT\n",
				listen);
			return 2;
		}
		memcpy(s->cfg.listen_host, listen, (size_t)(c - listen));
		s->cfg.listen_host[c - listen] = 0;
		s->cfg.listen_port = (int)port;
	}
	if (!s->cfg.run_dir[0])
		moor_run_dir_default(s->cfg.run_dir, sizeof s->cfg.run_dir);
	if (s->cfg.state_dir[0] && mkdir(s->cfg.state_dir, 0755) &&
	    errno != EEXIST) {
		moor_err("--state-dir %s: %s", s->cfg.state_dir,
			 strerror(errno));
		return 1;
	}
	if (served) {
		snprintf(s->cfg.served, sizeof s->cfg.served, "%s", served);
	} else {
		char tmp[PATH_MAX];
		snprintf(tmp, sizeof tmp, "%s", s->cfg.model_dir);
		size_t n = strlen(tmp);
		while (n > 1 && tmp[n - 1] == '/')
			tmp[--n] = 0;
		snprintf(s->cfg.served, sizeof s->cfg.served, "%s",
			 basename(tmp));
	}

	int rv = gw_tmpl_choose(s->cfg.model_dir, s->cfg.chat_template,
				&s->family, err);
	if (rv) {
		moor_err("%s", err);
		return 1;
	}
	char p[PATH_MAX];
	snprintf(p, sizeof p, "%s/tokenizer.json", s->cfg.model_dir);
	if ((rv = gw_tok_load(p, &s->tok, err))) {
		moor_err("%s", err);
		return 1;
	}
	static const char *const stops[] = {"<|im_end|>", "<|endoftext|>"};
	for (int i = 0; i < 2; i++) {
		int32_t id = gw_tok_token_id(s->tok, stops[i]);
		if (id >= 0)
			s->stop_ids[s->n_stop_ids++] = id;
	}
	read_gen_config(s);
	if (s->cfg.max_logprobs)
		s->cfg.lp_token_bytes =
		    gw_lp_token_bytes(s->tok, s->cfg.max_logprobs);
	{
		/* the logprobs' fault seam (logprobs.h), for tests */
		const char *f = getenv("MOOR_GW_LP_FAULT");
		char *end;
		unsigned long long at = f ? strtoull(f, &end, 10) : 0;
		if (f && *f && !*end && at) {
			gw_lp_fault_at = at;
			moor_warn("MOOR_GW_LP_FAULT=%llu: keeping logprobs "
				  "entry %llu will fail (a test's fault seam)",
				  at, at);
		}
	}
	s->think_close = gw_tok_token_id(s->tok, "</think>");
	if (s->think_close >= 0) {
		int32_t *a = NULL, *b = NULL;
		size_t na = 0, nb = 0;
		if (!gw_tok_encode(s->tok, GW_CLOSE_PHRASE,
				   strlen(GW_CLOSE_PHRASE), &a, &na) &&
		    !gw_tok_encode(s->tok, GW_CLOSE_VISIBLE,
				   strlen(GW_CLOSE_VISIBLE), &b, &nb) &&
		    na + nb <= sizeof s->close_ids / sizeof s->close_ids[0]) {
			memcpy(s->close_ids, a, na * sizeof *a);
			memcpy(s->close_ids + na, b, nb * sizeof *b);
			s->n_close = (uint32_t)(na + nb);
			s->n_close_hidden = (uint32_t)na;
		}
		free(a);
		free(b);
	}
	if (gw_admit_init(&s->admit, s->cfg.queue_max, s->cfg.inflight,
			  s->cfg.queue_wait_s) ||
	    gw_rc_init(s)) {
		moor_err("out of memory");
		return 1;
	}
	s->started_unix = (int64_t)time(NULL);
	{
		uint64_t r = 0;
		FILE *f = fopen("/dev/urandom", "rb");
		if (f) {
			if (fread(&r, sizeof r, 1, f) != 1)
				r = 0;
			fclose(f);
		}
		s->next_id = r ^ (uint64_t)moor_now();
	}

	/* libuv's pool runs the renders and the admin round trips; a cached
	 * that does not answer holds a thread for GW_ADMIN_TIMEOUT_MS, so
	 * more than libuv's 4 keep the renders going meanwhile */
	setenv("UV_THREADPOOL_SIZE", "8", 0);
	malloc_limits();
	uv_loop_t loop;
	uv_loop_init(&loop);
	s->loop = &loop;
	if ((rv = gw_link_open(s, err)) || (rv = gw_http_start(s, err))) {
		moor_err("%s", err);
		gw_link_close(s);
		gw_tok_free(s->tok);
		return 1;
	}
	uv_signal_init(&loop, &s->sig_term);
	uv_signal_init(&loop, &s->sig_int);
	uv_signal_init(&loop, &s->sig_hup);
	s->sig_term.data = s->sig_int.data = s->sig_hup.data = s;
	uv_signal_start(&s->sig_term, on_signal, SIGTERM);
	uv_signal_start(&s->sig_int, on_signal, SIGINT);
	/* a hangup stops cleanly, as SIGTERM (no configuration to reload) */
	uv_signal_start(&s->sig_hup, on_signal, SIGHUP);
	uv_timer_init(&loop, &s->tick);
	s->tick.data = s;
	uv_timer_start(&s->tick, on_tick, 50, 50);

	moor_info("memory: requests buffered up to %llu MiB "
		  "(--body-budget-bytes), %u parsed at once, %u connections, "
		  "logprobs of %u alternatives (--max-logprobs; %llu bytes a "
		  "token, %llu MiB): RSS bound %llu MiB over the base",
		  (unsigned long long)(s->cfg.body_budget >> 20),
		  s->cfg.inflight < 8 ? s->cfg.inflight : 8, s->cfg.max_conns,
		  s->cfg.max_logprobs,
		  (unsigned long long)s->cfg.lp_token_bytes,
		  (unsigned long long)(gw_limits_rss_lp(&s->cfg) >> 20),
		  (unsigned long long)(gw_limits_rss_bound(&s->cfg) >> 20));
	moor_info("serving %s (%s template) on http://%s:%d, run dir %s",
		  s->cfg.served, gw_tmpl_name(s->family), s->cfg.listen_host,
		  s->cfg.listen_port, s->cfg.run_dir);
	uv_run(&loop, UV_RUN_DEFAULT);

	/* stopped: engined is told nothing more; h2o's connections close with
	 * the loop's handles */
	gw_link_close(s);
	h2o_context_dispose(&s->hctx);
	uv_walk(&loop, on_close_walk, NULL);
	for (int i = 0; i < 100 && uv_loop_close(&loop) == UV_EBUSY; i++)
		uv_run(&loop, UV_RUN_NOWAIT);
	h2o_config_dispose(&s->hconf);
	gw_prep_fini(s);
	gw_rc_fini(s);
	gw_tok_free(s->tok);
	gw_auth_free(s);
	moor_info("stopped");
	return 0;
}
