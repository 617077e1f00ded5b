/* bench_gateway: what gatewayd adds on top of engined, side by side in one
 * run on one stack (cached + engined on models/tiny + gatewayd, spawned as
 * tests/gateway spawn it: gwtest.h over tests/daemon/harness.h):
 *
 *   1. per request: a small completion (the same PROMPT_N token ids,
 *      max_tokens 1, greedy, ignore_eos) sent N_LAT times to engined
 *      itself over NNG (tests/daemon/client.h, one PAIR1 connection held
 *      open, as the gateway holds its link) and N_LAT times as POST
 *      /v1/completions, the two interleaved sample by sample so a drift of
 *      the machine hits both alike. Median, p90 and mean of each, the
 *      difference (the gateway's added latency per request) and the
 *      median of the paired differences. GET /v1/models (answered on the
 *      gateway's loop: no engine, no cached) is timed the same way: the
 *      HTTP floor of that difference.
 *   2. per streamed token: STREAM_N tokens streamed (direct: the STEPs as
 *      they arrive; gateway: "stream": true, the SSE events as read from
 *      the socket): time to the first token, the mean gap between tokens
 *      ((last - first) / (N - 1)), every single gap's median, p90 and max,
 *      the tail from the last token to the end (direct: DONE; gateway:
 *      [DONE]), and the differences.
 *   3. requests/s of small completions (max_tokens 1) with K concurrent
 *      connections (K = 1, 4, 16, a thread each), bounded by LOAD_REQS
 *      requests or LOAD_S seconds per path and K, run as LOAD_ROUNDS
 *      rounds that alternate the paths, through the gateway and straight
 *      to engined, and their ratio; with, for the direct path, the
 *      median of the engine's own compute per request (DONE's prefill +
 *      decode), which says whether the engine itself slowed under load.
 *
 * The engine's share, taken out. A 16-token prefill of the tiny model
 * costs tens of ms on the CPU and varies by more than the gateway adds,
 * so a raw difference of medians mostly measures the machine. Each
 * request is therefore also split in two: the engine side (direct: send
 * to the first STEP's arrival; gateway: the gateway's own TTFT metric,
 * "generation sent to engined" to "first token on its loop", read from
 * GET /metrics's moor_ttft_seconds_sum just before and after the request,
 * its count checked to move by one) and the rest (the client's latency
 * minus that). The rest is what the gateway adds, with the engine's
 * variance removed: HTTP, JSON, the thread pool, the loop, the reply; it
 * leaves out only the gateway's receiver-thread-to-loop hop, which falls
 * inside its metric. The streamed TTFT is split the same way.
 *
 * The prompt (a choice written down). Every sample, on both paths, sends
 * the same 16 ids with no session. 16 lies below the first grid line (64),
 * so cached holds no anchor inside the prompt to resume from, and the end
 * anchor a previous identical turn left sits at its end or past it (the
 * plan offers only lines < n, one token at least is forwarded): every
 * sample is the same cold 16-token prefill, on either path, whatever ran
 * before it. Same state, same work: the difference is the gateway's. The
 * DONE's cached_tokens (direct) and usage.prompt_tokens_details
 * .cached_tokens (gateway) are checked to be the same on both paths.
 * (Fresh prompts per sample would measure the same cold prefill but put
 * cached's store and park to work differently as the run goes on.)
 *
 * What the numbers include. The gateway client is gwtest.h's: one HTTP/1.1
 * request per TCP connection (Connection: close), so each gateway request
 * pays a loopback connect and accept; a keep-alive client would pay less.
 * A response counts as complete when its body is (Content-Length reached,
 * or the chunked terminator), not when the server closes. The direct
 * client pays the NNG IPC hop the gateway pays too; both pay engined's
 * plan and commit round trips to cached. engined runs its requests one at
 * a time and paces STEPs to at most one a millisecond (engined/serve.c,
 * STEP_GAP_S: closer steps share one message), which the streamed rows
 * show as STEP messages fewer than tokens when decode is that fast.
 *
 * Deviation from the gateway tests' stack: gatewayd at --log-level info
 * (the tests run it at debug; a benchmark should not time its log file).
 * engined's queue (64 waiting behind the running one, its default) holds
 * every concurrent request here; with the old default of 4, at K = 16, 180
 * of 200 were answered busy (503 through the gateway, which queues
 * nothing itself) on either path.
 *
 * The machine this was written on has 2 cores: engined's 2 threads, the
 * gateway's loop and pool and this load generator share them, so requests/s
 * under load counts the generator's own CPU too, on both paths.
 *
 * Every request is checked (status, finish "length", the token count); any
 * failure makes the exit status 1 after the table is printed: a benchmark
 * that silently measures errors is worse than none. Runs in about 80 s.
 *
 * Usage: bench_gateway CACHED ENGINED GATEWAYD MODEL_DIR */
#include <pthread.h>
#include <stdatomic.h>

#include "gwtest.h"

#include "client.h"
#include "net.h"

#define PROMPT_N 16
#define N_WARM 3
#define N_LAT 30
#define STREAM_N 64
#define N_STREAM 10
#define LOAD_REQS 200
#define LOAD_S 10.0
#define LOAD_ROUNDS 4
#define MAX_K 16
#define TIMEOUT_S 60.0

static int32_t prompt[PROMPT_N];

/* ---- statistics ---------------------------------------------------------- */

static int cmp_d(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

/* The q-quantile (nearest rank) of v[0..n), n > 0; v is sorted in place. */
static double quant(double *v, int n, double q)
{
	qsort(v, (size_t)n, sizeof *v, cmp_d);
	int k = (int)(q * n + 0.999999) - 1;
	if (k < 0)
		k = 0;
	if (k >= n)
		k = n - 1;
	return v[k];
}

static double mean(const double *v, int n)
{
	double s = 0;
	for (int i = 0; i < n; i++)
		s += v[i];
	return n ? s / n : 0;
}

/* ---- direct: engined over NNG -------------------------------------------- */

typedef struct dtime {
	double t0;	   /* GENERATE sent */
	double t_first;	   /* the STEP with the first token arrived */
	double t_last;	   /* the STEP with the last token arrived */
	double t_done;	   /* DONE arrived */
	uint32_t n_tokens; /* tokens of this request in the STEPs */
	uint32_t n_steps;  /* STEP messages that carried them */
	uint64_t cached;   /* DONE's cached_tokens */
	double engine_s;   /* DONE's prefill_us + decode_us, in s */
	double *tok_t;	   /* NULL, or [max_tokens]: each token's arrival */
} dtime;

/* One generation of max_tokens from prompt on c, every STEP timestamped
 * (mc_wait's loop, with clocks). Returns 0 when a DONE came with finish
 * LENGTH and max_tokens tokens; else a message in err and -1. */
static int direct_run(mc_conn *c, uint64_t req, uint32_t max_tokens, dtime *d,
		      char *err, size_t errn)
{
	double *tok_t = d->tok_t;
	memset(d, 0, sizeof *d);
	d->tok_t = tok_t;
	mc_params p = {.ids = prompt,
		       .n_ids = PROMPT_N,
		       .max_tokens = max_tokens,
		       .temperature = 0,
		       .top_p = 1,
		       .flags = PROTO_GEN_IGNORE_EOS};
	d->t0 = moor_now();
	int rv = mc_send_generate(c, req, &p);
	if (rv) {
		snprintf(err, errn, "send: %s", moor_strerror(rv));
		return -1;
	}
	double end = d->t0 + TIMEOUT_S;
	for (;;) {
		if (atomic_load(&c->gone)) {
			snprintf(err, errn, "engined went away");
			return -1;
		}
		if (moor_now() > end) {
			snprintf(err, errn, "no DONE within %.0f s", TIMEOUT_S);
			return -1;
		}
		proto_msg m;
		rv = proto_recv(c->s, &m, NULL, 100);
		double t = moor_now();
		if (rv == -ETIMEDOUT) {
			proto_msg_fini(&m);
			continue;
		}
		if (rv == 0 || rv <= MOOR_EBASE)
			mc_credit(c);
		if (rv) {
			proto_msg_fini(&m);
			snprintf(err, errn, "receive: %s", moor_strerror(rv));
			return -1;
		}
		if (m.h.type == PROTO_STEP) {
			uint32_t mine = 0;
			for (uint32_t i = 0; i < m.u.step.n; i++)
				mine += m.u.step.e[i].req == req;
			if (mine) {
				if (!d->n_tokens)
					d->t_first = t;
				for (uint32_t i = 0;
				     tok_t && i < mine &&
				     d->n_tokens + i < max_tokens;
				     i++)
					tok_t[d->n_tokens + i] = t;
				d->n_tokens += mine;
				d->n_steps++;
				d->t_last = t;
			}
		} else if ((m.h.type == PROTO_DONE ||
			    m.h.type == PROTO_ERROR) &&
			   m.h.req == req) {
			d->t_done = t;
			int bad = m.h.type == PROTO_ERROR ||
				  m.u.done.finish != PROTO_FINISH_LENGTH ||
				  d->n_tokens != max_tokens;
			if (bad)
				snprintf(
				    err, errn,
				    "%s finish %u code %d, %u tokens of "
				    "%u: %s",
				    proto_type_name(m.h.type),
				    m.h.type == PROTO_DONE ? m.u.done.finish
							   : 0,
				    m.h.type == PROTO_DONE ? m.u.done.code
							   : m.u.error.code,
				    d->n_tokens, max_tokens,
				    m.h.type == PROTO_DONE && m.u.done.msg
					? m.u.done.msg
					: "");
			else {
				d->cached = m.u.done.cached_tokens;
				d->engine_s = (double)(m.u.done.prefill_us +
						       m.u.done.decode_us) /
					      1e6;
			}
			proto_msg_fini(&m);
			return bad ? -1 : 0;
		}
		proto_msg_fini(&m);
	}
}

/* ---- gateway: HTTP/1.1 on loopback --------------------------------------- */

/* One exchange as the bytes arrived: every read's end offset and time. */
typedef struct hx {
	char *raw; /* NUL-terminated */
	size_t n, cap;
	size_t *at;
	double *t;
	int n_reads, cap_reads;
	double t0, t_end; /* connect; the body complete */
	size_t hdr_end;	  /* offset of the body, 0 before the headers */
} hx;

static void hx_fini(hx *x)
{
	free(x->raw);
	free(x->at);
	free(x->t);
	memset(x, 0, sizeof *x);
}

/* Whether raw holds a whole response: the headers and the body that
 * Content-Length or the chunked terminator says. */
static int hx_complete(hx *x)
{
	if (!x->hdr_end) {
		char *e = strstr(x->raw, "\r\n\r\n");
		if (!e)
			return 0;
		x->hdr_end = (size_t)(e - x->raw) + 4;
	}
	const char *h = x->raw;
	const char *cl = strcasestr(h, "\r\ncontent-length:");
	if (cl && (size_t)(cl - h) < x->hdr_end)
		return x->n >= x->hdr_end + strtoull(cl + 17, NULL, 10);
	static const char term[] = "\r\n0\r\n\r\n";
	size_t tl = sizeof term - 1;
	return x->n >= x->hdr_end + tl - 2 &&
	       !memcmp(x->raw + x->n - tl, term, tl);
}

/* POSTs body to path (NULL: GET) and reads the response until complete,
 * the peer closes, or TIMEOUT_S. Returns the HTTP status, 0 for none. */
static int hx_do(int port, const char *path, const char *body, hx *x)
{
	memset(x, 0, sizeof *x);
	x->t0 = moor_now();
	int fd = gt_send(port, body ? "POST" : "GET", path, body, NULL);
	if (fd < 0)
		return 0;
	x->cap = 16384;
	x->raw = malloc(x->cap);
	x->raw[0] = 0;
	double end = x->t0 + TIMEOUT_S;
	for (;;) {
		int left = (int)((end - moor_now()) * 1000);
		if (left <= 0)
			break;
		struct pollfd p = {fd, POLLIN, 0};
		if (poll(&p, 1, left) <= 0)
			break;
		if (x->n + 4096 > x->cap)
			x->raw = realloc(x->raw, x->cap *= 2);
		ssize_t r = read(fd, x->raw + x->n, x->cap - x->n - 1);
		double t = moor_now();
		if (r <= 0)
			break;
		x->n += (size_t)r;
		x->raw[x->n] = 0;
		if (x->n_reads == x->cap_reads) {
			x->cap_reads = x->cap_reads ? 2 * x->cap_reads : 64;
			x->at = realloc(x->at,
					(size_t)x->cap_reads * sizeof *x->at);
			x->t =
			    realloc(x->t, (size_t)x->cap_reads * sizeof *x->t);
		}
		x->at[x->n_reads] = x->n;
		x->t[x->n_reads++] = t;
		if (hx_complete(x)) {
			x->t_end = t;
			break;
		}
	}
	close(fd);
	int st = 0;
	if (x->t_end && sscanf(x->raw, "HTTP/1.%*d %d", &st) != 1)
		st = 0;
	return st;
}

/* When the byte at offset off arrived. */
static double hx_time_of(const hx *x, size_t off)
{
	for (int i = 0; i < x->n_reads; i++)
		if (x->at[i] > off)
			return x->t[i];
	return x->t_end;
}

/* The body of a completion request (malloc'd). */
static char *completion_body(int max_tokens, int stream)
{
	json_t *ids = json_array();
	for (int i = 0; i < PROMPT_N; i++)
		json_array_append_new(ids, json_integer(prompt[i]));
	json_t *b = json_pack("{s:o,s:i,s:i,s:b}", "prompt", ids, "max_tokens",
			      max_tokens, "temperature", 0, "ignore_eos", 1);
	if (stream) {
		json_object_set_new(b, "stream", json_true());
		json_object_set_new(b, "stream_options",
				    json_pack("{s:b}", "include_usage", 1));
	}
	char *t = json_dumps(b, JSON_COMPACT | JSON_PRESERVE_ORDER);
	json_decref(b);
	return t;
}

/* A whole (non-streamed) completion: checks 200, finish "length",
 * completion_tokens. Returns 0 with the client's latency in *secs and the
 * usage's cached tokens in *cached, or -1 with err. */
static int gw_whole(int port, const char *body, int max_tokens, double *secs,
		    long long *cached, char *err, size_t errn)
{
	hx x;
	int st = hx_do(port, "/v1/completions", body, &x);
	int rv = -1;
	if (st != 200) {
		snprintf(err, errn, "status %d: %.180s", st,
			 x.hdr_end ? x.raw + x.hdr_end : "(no response)");
		goto out;
	}
	json_t *o = json_loads(x.raw + x.hdr_end, 0, NULL);
	const char *fin = gt_str(o, "choices.0.finish_reason");
	long long ct = gt_int(o, "usage.completion_tokens");
	*cached = gt_int(o, "usage.prompt_tokens_details.cached_tokens");
	if (!o || !fin || strcmp(fin, "length") || ct != max_tokens)
		snprintf(err, errn, "finish %s, %lld tokens of %d",
			 fin ? fin : "?", ct, max_tokens);
	else
		rv = 0;
	json_decref(o);
	*secs = x.t_end - x.t0;
out:
	hx_fini(&x);
	return rv;
}

/* The gateway's own TTFT metric (GET /metrics): the sum, in seconds, of
 * its "generation sent to engined" to "first token on the loop", and how
 * many it summed. Returns 0, or -1. */
static int gw_ttft_sum(int port, double *sum, long long *count)
{
	hx x;
	int st = hx_do(port, "/metrics", NULL, &x);
	int rv = -1;
	const char *a, *b;
	if (st == 200 && (a = strstr(x.raw, "\nmoor_ttft_seconds_sum ")) &&
	    (b = strstr(x.raw, "\nmoor_ttft_seconds_count "))) {
		*sum = strtod(a + 23, NULL);
		*count = strtoll(b + 25, NULL, 10);
		rv = 0;
	}
	hx_fini(&x);
	return rv;
}

typedef struct stime {
	double t0, t_first, t_last, t_end; /* as dtime's; t_end: [DONE] */
	int n_events;			   /* events with text, before finish */
	double ev_t[STREAM_N];		   /* their arrivals (the first ones) */
	long long tokens;		   /* usage.completion_tokens */
	long long cached;
} stime;

/* A streamed completion of STREAM_N tokens, each SSE event timestamped by
 * the read that brought its last byte (the gateway writes an event in one
 * chunk, so it lies contiguous in the raw bytes). Checks 200, the events'
 * JSON, finish "length", the usage's tokens and [DONE] last. */
static int gw_stream(int port, const char *body, stime *s, char *err,
		     size_t errn)
{
	memset(s, 0, sizeof *s);
	hx x;
	int st = hx_do(port, "/v1/completions", body, &x);
	int rv = -1, done = 0;
	const char *fin = NULL;
	json_t *keep = json_array(); /* the events fin points into */
	if (st != 200) {
		snprintf(err, errn, "status %d", st);
		goto out;
	}
	s->t0 = x.t0;
	for (char *p = x.raw + x.hdr_end; (p = strstr(p, "data: "));) {
		char *e = strstr(p, "\n\n");
		if (!e) {
			snprintf(err, errn, "an event without its end");
			goto out;
		}
		double t = hx_time_of(&x, (size_t)(e + 1 - x.raw));
		size_t len = (size_t)(e - p - 6);
		if (len == 6 && !strncmp(p + 6, "[DONE]", 6)) {
			done = 1;
			s->t_end = t;
			p = e + 2;
			continue;
		}
		if (done) {
			snprintf(err, errn, "an event after [DONE]");
			goto out;
		}
		json_t *o = json_loadb(p + 6, len, 0, NULL);
		if (!o) {
			snprintf(err, errn, "an event that is not JSON");
			goto out;
		}
		json_array_append_new(keep, o);
		const json_t *ch =
		    json_array_get(json_object_get(o, "choices"), 0);
		if (json_object_get(o, "usage") &&
		    json_is_object(json_object_get(o, "usage"))) {
			s->tokens = gt_int(o, "usage.completion_tokens");
			s->cached = gt_int(
			    o, "usage.prompt_tokens_details.cached_tokens");
		} else if (ch && json_is_string(
				     json_object_get(ch, "finish_reason"))) {
			fin = gt_str(o, "choices.0.finish_reason");
		} else if (ch) {
			if (s->n_events < STREAM_N)
				s->ev_t[s->n_events] = t;
			if (!s->n_events++)
				s->t_first = t;
			s->t_last = t;
		}
		p = e + 2;
	}
	if (!done || !fin || strcmp(fin, "length") || s->tokens != STREAM_N ||
	    s->n_events == 0)
		snprintf(err, errn,
			 "[DONE] %s, finish %s, %lld tokens of %d, %d text "
			 "events",
			 done ? "came" : "missing", fin ? fin : "?", s->tokens,
			 STREAM_N, s->n_events);
	else
		rv = 0;
out:
	json_decref(keep);
	hx_fini(&x);
	return rv;
}

/* ---- the load generator -------------------------------------------------- */

/* What the rounds of one path and one K add up to. */
typedef struct load_acc {
	int ok, fail;
	double secs;	       /* the rounds' walls, summed */
	double lat[LOAD_REQS]; /* every request's, in the order they ended */
	double eng[LOAD_REQS]; /* direct: each one's engine compute */
	int n_lat;
	char err[256]; /* the first failure's */
} load_acc;

typedef struct load {
	int gateway, port, max_req;
	const char *body;
	mc_conn *conns;	     /* direct: one per thread, opened before */
	atomic_int next;     /* tickets handed out */
	atomic_int ok, fail; /* requests finished */
	double t0, deadline; /* no request starts after deadline */
	double *lat, *eng;   /* [max_req], in the order they ended */
	atomic_int n_lat;
	double t_last[MAX_K];
	char err[256];
	pthread_mutex_t mu;
} load;

typedef struct worker {
	load *l;
	int k;
} worker;

static void *load_main(void *arg)
{
	worker *w = arg;
	load *l = w->l;
	for (;;) {
		int tk = atomic_fetch_add(&l->next, 1);
		if (tk >= l->max_req || moor_now() > l->deadline)
			break;
		char err[256] = "";
		double secs = 0, eng = 0;
		int rv;
		if (l->gateway) {
			long long cached;
			rv = gw_whole(l->port, l->body, 1, &secs, &cached, err,
				      sizeof err);
		} else {
			dtime d = {0};
			rv = direct_run(&l->conns[w->k], (uint64_t)tk + 1, 1,
					&d, err, sizeof err);
			secs = d.t_done - d.t0;
			eng = d.engine_s;
		}
		int at = atomic_fetch_add(&l->n_lat, 1);
		l->lat[at] = secs;
		l->eng[at] = eng;
		l->t_last[w->k] = moor_now();
		if (rv) {
			atomic_fetch_add(&l->fail, 1);
			pthread_mutex_lock(&l->mu);
			if (!l->err[0])
				snprintf(l->err, sizeof l->err, "%s", err);
			pthread_mutex_unlock(&l->mu);
		} else {
			atomic_fetch_add(&l->ok, 1);
		}
	}
	return NULL;
}

/* One round: K threads, each with one connection (direct) or one per
 * request (gateway), until max_req requests or max_s seconds; added to a. */
static void load_round(int gateway, int K, const char *body, int max_req,
		       double max_s, load_acc *a)
{
	static mc_conn conns[MAX_K];
	load l = {.gateway = gateway,
		  .port = gt_.port,
		  .max_req = max_req,
		  .body = body,
		  .conns = conns,
		  .lat = a->lat + a->n_lat,
		  .eng = a->eng + a->n_lat};
	pthread_mutex_init(&l.mu, NULL);
	if (!gateway)
		for (int k = 0; k < K; k++)
			REQUIRE(mc_open(&conns[k], gt_.run, 5000) == 0,
				"connect to engined");
	pthread_t th[MAX_K];
	worker w[MAX_K];
	l.t0 = moor_now();
	l.deadline = l.t0 + max_s;
	for (int k = 0; k < K; k++) {
		w[k] = (worker){&l, k};
		REQUIRE(pthread_create(&th[k], NULL, load_main, &w[k]) == 0,
			"pthread_create");
	}
	for (int k = 0; k < K; k++)
		pthread_join(th[k], NULL);
	if (!gateway)
		for (int k = 0; k < K; k++)
			mc_close(&conns[k]);
	double last = l.t0;
	for (int k = 0; k < K; k++)
		if (l.t_last[k] > last)
			last = l.t_last[k];
	a->ok += atomic_load(&l.ok);
	a->fail += atomic_load(&l.fail);
	a->secs += last - l.t0;
	a->n_lat += atomic_load(&l.n_lat);
	if (!a->err[0] && l.err[0])
		snprintf(a->err, sizeof a->err, "%s", l.err);
	pthread_mutex_destroy(&l.mu);
}

/* ---- the run ------------------------------------------------------------- */

static void row(const char *what, double direct, double gw)
{
	printf("  %-34s %10.3f %10.3f %+10.3f", what, direct * 1e3, gw * 1e3,
	       (gw - direct) * 1e3);
	if (direct > 0)
		printf(" %7.2fx\n", gw / direct);
	else
		printf(" %8s\n", "-");
}

int main(int argc, char **argv)
{
	static const char *const gw_extra[] = {"--log-level", "info", NULL};
	gt_stack(argc, argv, "bench_gw", 280, gw_extra, NULL, NULL);
	setvbuf(stdout, NULL, _IOLBF, 0);
	/* fixed ids, clear of the special tokens at the vocabulary's top */
	uint64_t r = 0x2545f4914f6cdd1dull;
	for (int i = 0; i < PROMPT_N; i++) {
		r ^= r << 13;
		r ^= r >> 7;
		r ^= r << 17;
		prompt[i] = (int32_t)(1000 + r % 100000);
	}
	mc_conn c;
	REQUIRE(mc_open(&c, gt_.run, 5000) == 0, "connect to engined");
	char *body1 = completion_body(1, 0);
	char *body_s = completion_body(STREAM_N, 1);
	char err[512];
	uint64_t req = 1;
	printf("bench_gateway: model %s, engined --threads 2 --grid 64 "
	       "(one request at a time), %ld CPU(s) online\n",
	       gt_.model, sysconf(_SC_NPROCESSORS_ONLN));
	printf("prompt %d token ids, greedy, ignore_eos, no session; gateway "
	       "client: one TCP connection per request\n",
	       PROMPT_N);

	/* 1. per request --------------------------------------------------- */
	double ld[N_LAT] = {0}, lg[N_LAT] = {0}, lm[N_LAT] = {0},
	       pd[N_LAT] = {0}, le[N_LAT] = {0}, lo[N_LAT] = {0},
	       in_d[N_LAT] = {0}, in_g[N_LAT] = {0}, out_d[N_LAT] = {0},
	       out_g[N_LAT] = {0};
	long long cached_d = -1, cached_g = -1;
	int fails = 0;
	for (int i = -N_WARM; i < N_LAT; i++) {
		dtime d = {0};
		double gs = 0;
		long long gc = -1;
		int rd = direct_run(&c, req++, 1, &d, err, sizeof err);
		CHECK(rd == 0, "direct request %d: %s", i, err);
		double m0 = 0, m1 = 0;
		long long c0 = 0, c1 = 0;
		int rm = gw_ttft_sum(gt_.port, &m0, &c0);
		int rg =
		    gw_whole(gt_.port, body1, 1, &gs, &gc, err, sizeof err);
		CHECK(rg == 0, "gateway request %d: %s", i, err);
		rm |= gw_ttft_sum(gt_.port, &m1, &c1);
		CHECK(rm == 0 && c1 == c0 + 1,
		      "GET /metrics: %d, ttft count %lld then %lld", rm, c0,
		      c1);
		hx x;
		int sm = hx_do(gt_.port, "/v1/models", NULL, &x);
		CHECK(sm == 200, "GET /v1/models: %d", sm);
		fails += (rd != 0) + (rg != 0) + (sm != 200) + (rm != 0);
		if (i >= 0 && !rd && !rg && sm == 200 && !rm) {
			ld[i] = d.t_done - d.t0;
			lg[i] = gs;
			lm[i] = x.t_end - x.t0;
			pd[i] = lg[i] - ld[i];
			le[i] = d.engine_s;
			lo[i] = ld[i] - le[i];
			in_d[i] = d.t_first - d.t0;
			in_g[i] = m1 - m0;
			out_d[i] = ld[i] - in_d[i];
			out_g[i] = lg[i] - in_g[i];
			if (cached_d < 0)
				cached_d = (long long)d.cached;
			if (cached_g < 0)
				cached_g = gc;
			CHECK((long long)d.cached == cached_d && gc == cached_g,
			      "sample %d resumed elsewhere: direct %llu "
			      "gateway %lld",
			      i, (unsigned long long)d.cached, gc);
		}
		hx_fini(&x);
	}
	CHECK(cached_d == cached_g,
	      "the paths resumed differently: direct %lld cached tokens, "
	      "gateway %lld",
	      cached_d, cached_g);
	double ldm = mean(ld, N_LAT), lgm = mean(lg, N_LAT),
	       lmm = mean(lm, N_LAT);
	printf("\nper request: max_tokens 1, %d samples each, interleaved "
	       "(cached tokens: direct %lld, gateway %lld)\n",
	       N_LAT, cached_d, cached_g);
	printf("  %-34s %10s %10s %10s %8s\n", "ms", "direct", "gateway",
	       "added", "ratio");
	double ld50 = quant(ld, N_LAT, 0.5), lg50 = quant(lg, N_LAT, 0.5),
	       lm50 = quant(lm, N_LAT, 0.5);
	row("latency median", ld50, lg50);
	row("latency p90", quant(ld, N_LAT, 0.9), quant(lg, N_LAT, 0.9));
	row("latency mean", ldm, lgm);
	printf("  %-34s %10s %10s %+10.3f  (p10 %+.3f, p90 %+.3f)\n",
	       "paired (gw - direct) median", "", "",
	       quant(pd, N_LAT, 0.5) * 1e3, quant(pd, N_LAT, 0.1) * 1e3,
	       quant(pd, N_LAT, 0.9) * 1e3);
	row("send to first STEP (engine side)", quant(in_d, N_LAT, 0.5),
	    quant(in_g, N_LAT, 0.5));
	row("the rest (latency - the above)", quant(out_d, N_LAT, 0.5),
	    quant(out_g, N_LAT, 0.5));
	printf("  %-34s %10.3f %10s  (DONE's prefill + decode)\n",
	       "engine compute median", quant(le, N_LAT, 0.5) * 1e3, "");
	printf("  %-34s %10.3f %10s  (NNG, cached's plan and commit)\n",
	       "direct minus engine compute", quant(lo, N_LAT, 0.5) * 1e3, "");
	printf("  %-34s %10s %10.3f  (median; mean %.3f, p90 %.3f)\n",
	       "GET /v1/models (HTTP floor)", "", lm50 * 1e3, lmm * 1e3,
	       quant(lm, N_LAT, 0.9) * 1e3);

	/* 2. per streamed token -------------------------------------------- */
	double ttft_d[N_STREAM] = {0}, ttft_g[N_STREAM] = {0},
	       gap_d[N_STREAM] = {0}, gap_g[N_STREAM] = {0},
	       tail_d[N_STREAM] = {0}, tail_g[N_STREAM] = {0},
	       tin_g[N_STREAM] = {0}, tout_g[N_STREAM] = {0};
	static double one_d[N_STREAM * (STREAM_N - 1)],
	    one_g[N_STREAM * (STREAM_N - 1)];
	int steps_d = 0, events_g = 0, n_one_d = 0, n_one_g = 0;
	for (int i = -1; i < N_STREAM; i++) {
		double tok_t[STREAM_N];
		dtime d = {.tok_t = tok_t};
		stime s;
		int rd = direct_run(&c, req++, STREAM_N, &d, err, sizeof err);
		CHECK(rd == 0, "direct stream %d: %s", i, err);
		double m0 = 0, m1 = 0;
		long long c0 = 0, c1 = 0;
		int rm = gw_ttft_sum(gt_.port, &m0, &c0);
		int rg = gw_stream(gt_.port, body_s, &s, err, sizeof err);
		CHECK(rg == 0, "gateway stream %d: %s", i, err);
		rm |= gw_ttft_sum(gt_.port, &m1, &c1);
		CHECK(rm == 0 && c1 == c0 + 1,
		      "GET /metrics: %d, ttft count %lld then %lld", rm, c0,
		      c1);
		fails += (rd != 0) + (rg != 0) + (rm != 0);
		if (i < 0 || rd || rg || rm)
			continue;
		tin_g[i] = m1 - m0;
		tout_g[i] = s.t_first - s.t0 - tin_g[i];
		ttft_d[i] = d.t_first - d.t0;
		ttft_g[i] = s.t_first - s.t0;
		gap_d[i] = (d.t_last - d.t_first) / (STREAM_N - 1);
		gap_g[i] = (s.t_last - s.t_first) / (STREAM_N - 1);
		tail_d[i] = d.t_done - d.t_last;
		tail_g[i] = s.t_end - s.t_last;
		steps_d += (int)d.n_steps;
		events_g += s.n_events;
		for (int k = 1; k < STREAM_N; k++)
			one_d[n_one_d++] = tok_t[k] - tok_t[k - 1];
		for (int k = 1; k < s.n_events && k < STREAM_N; k++)
			one_g[n_one_g++] = s.ev_t[k] - s.ev_t[k - 1];
		CHECK(s.cached == (long long)d.cached,
		      "stream %d resumed differently: direct %llu gateway "
		      "%lld",
		      i, (unsigned long long)d.cached, s.cached);
	}
	printf("\nper streamed token: %d tokens, %d samples each (medians; "
	       "STEP messages per request %.1f, SSE text events %.1f)\n",
	       STREAM_N, N_STREAM, (double)steps_d / N_STREAM,
	       (double)events_g / N_STREAM);
	printf("  %-34s %10s %10s %10s %8s\n", "ms", "direct", "gateway",
	       "added", "ratio");
	row("time to first token", quant(ttft_d, N_STREAM, 0.5),
	    quant(ttft_g, N_STREAM, 0.5));
	row("TTFT, send to first STEP", quant(ttft_d, N_STREAM, 0.5),
	    quant(tin_g, N_STREAM, 0.5));
	row("TTFT minus send to first STEP", 0, quant(tout_g, N_STREAM, 0.5));
	row("inter-token gap (last-first)/63", quant(gap_d, N_STREAM, 0.5),
	    quant(gap_g, N_STREAM, 0.5));
	row("last token to end", quant(tail_d, N_STREAM, 0.5),
	    quant(tail_g, N_STREAM, 0.5));
	if (n_one_d && n_one_g) {
		row("one gap, median of all", quant(one_d, n_one_d, 0.5),
		    quant(one_g, n_one_g, 0.5));
		row("one gap, p90 of all", quant(one_d, n_one_d, 0.9),
		    quant(one_g, n_one_g, 0.9));
		row("one gap, max", quant(one_d, n_one_d, 1),
		    quant(one_g, n_one_g, 1));
	}
	mc_close(&c);

	/* 3. requests/s ---------------------------------------------------- */
	static const int ks[] = {1, 4, 16};
	static load_acc acc[2]; /* direct, gateway */
	printf("\nrequests/s: max_tokens 1, K concurrent connections, %d "
	       "requests or %.0f s per path and K, in %d alternating rounds\n",
	       LOAD_REQS, LOAD_S, LOAD_ROUNDS);
	printf("  %-4s %9s %9s %8s %10s %10s %10s  %s\n", "K", "direct/s",
	       "gw/s", "gw/dir", "d p50 ms", "gw p50 ms", "d eng ms",
	       "requests in s (direct; gateway)");
	for (int i = 0; i < 3; i++) {
		memset(acc, 0, sizeof acc);
		for (int rd = 0; rd < LOAD_ROUNDS; rd++)
			for (int g = 0; g < 2; g++)
				load_round((g + rd) % 2, ks[i], body1,
					   LOAD_REQS / LOAD_ROUNDS,
					   LOAD_S / LOAD_ROUNDS,
					   &acc[(g + rd) % 2]);
		double rps[2], p50[2],
		    eng =
			acc[0].n_lat ? quant(acc[0].eng, acc[0].n_lat, 0.5) : 0;
		for (int g = 0; g < 2; g++) {
			load_acc *a = &acc[g];
			CHECK(a->fail == 0,
			      "%s K=%d: %d of %d requests failed, the first: "
			      "%s",
			      g ? "gateway" : "direct", ks[i], a->fail,
			      a->ok + a->fail, a->err);
			fails += a->fail;
			rps[g] = a->secs > 0 ? a->ok / a->secs : 0;
			p50[g] = a->n_lat ? quant(a->lat, a->n_lat, 0.5) : 0;
		}
		printf("  %-4d %9.1f %9.1f %7.2fx %10.3f %10.3f %10.3f  %d in "
		       "%.2f; %d in %.2f\n",
		       ks[i], rps[0], rps[1], rps[0] > 0 ? rps[1] / rps[0] : 0,
		       p50[0] * 1e3, p50[1] * 1e3, eng * 1e3, acc[0].ok,
		       acc[0].secs, acc[1].ok, acc[1].secs);
	}

	/* the raw numbers -------------------------------------------------- */
	printf("\nraw, ms (in sorted order):\n");
	const struct {
		const char *name;
		double *v;
		int n;
	} raw[] = {
	    {"latency direct", ld, N_LAT},
	    {"latency gateway", lg, N_LAT},
	    {"GET /v1/models", lm, N_LAT},
	    {"paired gw-direct", pd, N_LAT},
	    {"engine compute", le, N_LAT},
	    {"rest direct", out_d, N_LAT},
	    {"rest gateway", out_g, N_LAT},
	    {"ttft rest gw", tout_g, N_STREAM},
	    {"ttft direct", ttft_d, N_STREAM},
	    {"ttft gateway", ttft_g, N_STREAM},
	    {"gap direct", gap_d, N_STREAM},
	    {"gap gateway", gap_g, N_STREAM},
	    {"tail direct", tail_d, N_STREAM},
	    {"tail gateway", tail_g, N_STREAM},
	};
	for (size_t k = 0; k < sizeof raw / sizeof raw[0]; k++) {
		printf("  %-16s", raw[k].name);
		for (int i = 0; i < raw[k].n; i++)
			printf(" %.3f", raw[k].v[i] * 1e3);
		printf("\n");
	}
	free(body1);
	free(body_s);
	if (fails)
		fprintf(stderr, "bench_gateway: %d request(s) failed\n", fails);
	return h_done("bench_gateway");
}
