/* chat.c: POST /v1/chat/completions and POST /v1/completions: the body read
 * and checked, the prompt rendered and tokenized (on the thread pool), the
 * generation sent to engined and its tokens turned into the OpenAI reply,
 * whole or streamed as SSE; and the jobs' lifecycle (gw.h tells who holds
 * a job and when the request may go away).
 *
 * Choices written down:
 *   - tool_choice "none": the tools are not rendered into the prompt (the
 *     model is told of no tools, OpenAI's "the model will not call any
 *     tool"); "auto" or absent renders them; "required" and a named
 *     function are refused (400): nothing here can force a call.
 *   - finish_reason: "stop" for an eos / stop id / stop string, "length" at
 *     max_tokens or the window, "tool_calls" when the reply carried calls.
 *   - A stop string ends the text where it matched (replystream) and the
 *     generation is cancelled at once; the usage counts what engined
 *     generated until the cancel took effect.
 *   - Stop ids: <|im_end|>, <|endoftext|> and generation_config.json's
 *     eos_token_id(s); the token that stopped is not text. ignore_eos
 *     (vLLM's extension) sends none of them (they are all eos-like) and
 *     sets PROTO_GEN_IGNORE_EOS; stop strings still apply.
 *   - The non-streamed reply is gw_reply_parse of the text the stream
 *     parser kept (stop strings cut): by replystream's contract the same
 *     reasoning, content and calls the streamed deltas add up to.
 */
#include <math.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gw.h"
#include "toolcall.h"

/* ---- jobs ------------------------------------------------------------- */

static void anchor_dispose(void *p)
{
	gw_anchor *a = p;
	if (a->job)
		gw_job_detach(a->job);
}

static void gen_proceed(h2o_generator_t *g, h2o_req_t *req);

static void gen_stop(h2o_generator_t *g, h2o_req_t *req)
{
	gw_anchor *a = (gw_anchor *)g;
	if (a->job)
		gw_job_detach(a->job);
}

gw_job *gw_job_new(gw_srv *s, h2o_req_t *req, int kind, int route)
{
	gw_job *j = calloc(1, sizeof *j);
	if (!j)
		return NULL;
	gw_anchor *a =
	    h2o_mem_alloc_shared(&req->pool, sizeof *a, anchor_dispose);
	a->gen.proceed = gen_proceed;
	a->gen.stop = gen_stop;
	a->job = j;
	j->s = s;
	j->kind = kind;
	j->route = route;
	j->refs = 1;
	j->req = req;
	j->anchor = a;
	j->next = s->jobs;
	if (s->jobs)
		s->jobs->prev = j;
	s->jobs = j;
	return j;
}

static void params_fini(gw_params *p)
{
	for (size_t i = 0; i < p->n_stop; i++)
		free(p->stop[i]);
	free(p->session);
	memset(p, 0, sizeof *p);
}

void gw_job_unref(gw_job *j)
{
	MOOR_ASSERT(j->refs > 0);
	if (--j->refs)
		return;
	gw_srv *s = j->s;
	if (j->prev)
		j->prev->next = j->next;
	else
		s->jobs = j->next;
	if (j->next)
		j->next->prev = j->prev;
	free(j->body);
	free(j->hdr_session);
	free(j->ids);
	free(j->pend);
	params_fini(&j->p);
	if (j->ts_init)
		gw_tok_stream_fini(&j->ts);
	gw_rs_free(j->rs);
	json_decref(j->json);
	proto_msg_fini(&j->q);
	proto_msg_fini(&j->reply);
	free(j);
}

static void send_cancel(gw_job *j)
{
	if (!j->sent || j->done || j->cancelled)
		return;
	j->cancelled = 1;
	proto_msg m = {0};
	m.h.type = PROTO_CANCEL;
	m.h.req = ++j->s->next_rid;
	m.u.cancel.target = j->rid;
	int rv = gw_link_send(j->s, &m);
	moor_debug("req %llu: cancel sent (%s)", (unsigned long long)j->rid,
		   rv ? moor_strerror(rv) : "ok");
}

void gw_job_detach(gw_job *j)
{
	if (!j->req)
		return;
	j->req = NULL;
	if (j->anchor)
		j->anchor->job = NULL;
	j->anchor = NULL;
	if (j->sent && !j->done) {
		moor_info("req %llu: the client went away: cancelling",
			  (unsigned long long)j->rid);
		send_cancel(j);
	}
	if (j->waiting) { /* it never reached engined */
		j->waiting = 0;
		gw_job_unref(j);
	}
	gw_job_unref(j);
}

/* ---- reading the body (thread pool) ------------------------------------- */

static int bad(gw_fail *f, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int bad(gw_fail *f, const char *param, const char *fmt, ...)
{
	char msg[MOOR_ERRLEN];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	gw_failf(f, 400, "invalid_request_error", param, NULL, "%s", msg);
	return -1;
}

static int unsup(gw_fail *f, const char *param, const char *what)
{
	gw_failf(f, 400, "invalid_request_error", param,
		 "unsupported_parameter", "%s is not supported by this server",
		 what);
	return -1;
}

/* A number field: absent or null leaves *out; out of [lo, hi] is 400. */
static int get_num(const json_t *b, const char *k, double lo, double hi,
		   double *out, gw_fail *f)
{
	const json_t *v = json_object_get(b, k);
	if (!v || json_is_null(v))
		return 0;
	if (!json_is_number(v))
		return bad(f, k, "'%s' must be a number", k);
	double x = json_number_value(v);
	if (!(x >= lo && x <= hi))
		return bad(f, k, "'%s' is %g, must be in [%g, %g]", k, x, lo,
			   hi);
	*out = x;
	return 1;
}

static int get_int(const json_t *b, const char *k, long long lo, long long hi,
		   long long *out, gw_fail *f)
{
	const json_t *v = json_object_get(b, k);
	if (!v || json_is_null(v))
		return 0;
	long long x;
	if (json_is_integer(v))
		x = json_integer_value(v);
	else if (json_is_real(v) &&
		 json_real_value(v) == floor(json_real_value(v)) &&
		 fabs(json_real_value(v)) < 9e15)
		x = (long long)json_real_value(v);
	else
		return bad(f, k, "'%s' must be an integer", k);
	if (x < lo || x > hi)
		return bad(f, k, "'%s' is %lld, must be in [%lld, %lld]", k, x,
			   lo, hi);
	*out = x;
	return 1;
}

static int get_bool(const json_t *b, const char *k, int *out, gw_fail *f)
{
	const json_t *v = json_object_get(b, k);
	if (!v || json_is_null(v))
		return 0;
	if (!json_is_boolean(v))
		return bad(f, k, "'%s' must be a boolean", k);
	*out = json_is_true(v);
	return 1;
}

static char *xstrdup(const char *s)
{
	size_t n = strlen(s) + 1;
	char *o = malloc(n);
	if (o)
		memcpy(o, s, n);
	return o;
}

/* The session key: the body's conversation id, else x-session-id. */
static const char *session_of(const json_t *b, const char *hdr)
{
	const json_t *v = json_object_get(b, "conversation_id");
	if (json_is_string(v) && json_string_length(v))
		return json_string_value(v);
	v = json_object_get(b, "conversation");
	if (json_is_string(v) && json_string_length(v))
		return json_string_value(v);
	if (json_is_object(v)) {
		const json_t *id = json_object_get(v, "id");
		if (json_is_string(id) && json_string_length(id))
			return json_string_value(id);
	}
	v = json_object_get(json_object_get(b, "metadata"), "conversation_id");
	if (json_is_string(v) && json_string_length(v))
		return json_string_value(v);
	return hdr ? hdr : "";
}

/* The fields both routes share: sampling, stop, stream, model, n. */
static int read_common(gw_job *j, const json_t *b)
{
	gw_srv *s = j->s;
	gw_params *p = &j->p;
	gw_fail *f = &j->fail;
	const json_t *v;

	v = json_object_get(b, "model");
	if (v && !json_is_null(v)) {
		if (!json_is_string(v))
			return bad(f, "model", "'model' must be a string");
		if (strcmp(json_string_value(v), s->cfg.served)) {
			gw_failf(f, 404, "invalid_request_error", "model",
				 "model_not_found",
				 "The model '%s' does not exist (this server "
				 "serves '%s')",
				 json_string_value(v), s->cfg.served);
			return -1;
		}
	}
	long long n = 1;
	if (get_int(b, "n", 1, 128, &n, f) < 0)
		return -1;
	if (n != 1)
		return bad(f, "n", "'n' is %lld: only n=1 is supported", n);
	if (get_bool(b, "stream", &p->stream, f) < 0)
		return -1;
	v = json_object_get(b, "stream_options");
	if (v && !json_is_null(v)) {
		if (!json_is_object(v))
			return bad(f, "stream_options",
				   "'stream_options' must be an object");
		const json_t *u = json_object_get(v, "include_usage");
		if (u && !json_is_null(u) && !json_is_boolean(u))
			return bad(f, "stream_options.include_usage",
				   "'stream_options.include_usage' must be a "
				   "boolean");
		p->include_usage = json_is_true(u);
	}

	double x = s->defs.temperature;
	if (get_num(b, "temperature", 0, 2, &x, f) < 0)
		return -1;
	p->temperature = (float)x;
	x = s->defs.top_p;
	if (get_num(b, "top_p", 0, 1, &x, f) < 0)
		return -1;
	if (x == 0)
		return bad(f, "top_p", "'top_p' must be in (0, 1]");
	p->top_p = (float)x;
	x = s->defs.min_p;
	if (get_num(b, "min_p", 0, 1, &x, f) < 0)
		return -1;
	p->min_p = (float)x;
	long long k = s->defs.top_k;
	if (get_int(b, "top_k", -1, INT32_MAX, &k, f) < 0)
		return -1;
	p->top_k = k < 0 ? 0 : (int32_t)k; /* -1 (vLLM) and 0: all */
	long long seed = 0;
	int r = get_int(b, "seed", INT64_MIN, INT64_MAX, &seed, f);
	if (r < 0)
		return -1;
	/* no seed: a different one per request */
	p->seed = r ? (uint64_t)seed
		    : (uint64_t)j->created * 0x9e3779b97f4a7c15ull ^ j->rid ^
			  (uint64_t)(uintptr_t)j;
	if (get_bool(b, "ignore_eos", &p->ignore_eos, f) < 0)
		return -1;

	v = json_object_get(b, "stop");
	if (v && !json_is_null(v)) {
		if (json_is_string(v)) {
			p->stop[p->n_stop++] = xstrdup(json_string_value(v));
		} else if (json_is_array(v)) {
			if (json_array_size(v) > GW_MAX_STOP)
				return bad(f, "stop",
					   "'stop' has %zu strings, at most %d",
					   json_array_size(v), GW_MAX_STOP);
			for (size_t i = 0; i < json_array_size(v); i++) {
				const json_t *e = json_array_get(v, i);
				if (!json_is_string(e))
					return bad(f, "stop",
						   "'stop' must be a string or "
						   "an array of strings");
				p->stop[p->n_stop++] =
				    xstrdup(json_string_value(e));
			}
		} else {
			return bad(f, "stop",
				   "'stop' must be a string or an array of "
				   "strings");
		}
	}

	/* what we do not do is refused, not ignored */
	v = json_object_get(b, "logprobs");
	if (v && !json_is_null(v)) {
		if (j->kind == GW_KIND_CHAT && !json_is_boolean(v))
			return bad(f, "logprobs",
				   "'logprobs' must be a boolean");
		if (json_is_true(v) || json_is_integer(v))
			return unsup(f, "logprobs", "'logprobs'");
	}
	v = json_object_get(b, "top_logprobs");
	if (v && !json_is_null(v))
		return unsup(f, "top_logprobs", "'top_logprobs'");
	v = json_object_get(b, "logit_bias");
	if (v && !json_is_null(v) &&
	    !(json_is_object(v) && json_object_size(v) == 0))
		return unsup(f, "logit_bias", "'logit_bias'");
	static const char *const pen[] = {"presence_penalty",
					  "frequency_penalty"};
	for (int i = 0; i < 2; i++) {
		double pv = 0;
		if (get_num(b, pen[i], -2, 2, &pv, f) < 0)
			return -1;
		if (pv != 0)
			return unsup(f, pen[i], pen[i]);
	}
	v = json_object_get(b, "response_format");
	if (v && !json_is_null(v)) {
		const json_t *t = json_object_get(v, "type");
		if (!json_is_object(v) || !json_is_string(t))
			return bad(f, "response_format",
				   "'response_format' must be an object with a "
				   "string 'type'");
		if (strcmp(json_string_value(t), "text"))
			return unsup(f, "response_format",
				     "'response_format' other than text");
	}
	const char *sess = session_of(b, j->hdr_session);
	if (strlen(sess) > PROTO_MAX_STR)
		return bad(f, "conversation_id",
			   "the conversation id is longer than %d bytes",
			   PROTO_MAX_STR);
	p->session = xstrdup(sess);
	return 0;
}

static int read_max_tokens(gw_job *j, const json_t *b, uint32_t deflt)
{
	gw_params *p = &j->p;
	long long mt = 0;
	int r = 0;
	if (j->kind == GW_KIND_CHAT)
		r = get_int(b, "max_completion_tokens", 1, UINT32_MAX, &mt,
			    &j->fail);
	if (r < 0)
		return -1;
	if (!r) {
		r = get_int(b, "max_tokens", 1, UINT32_MAX, &mt, &j->fail);
		if (r < 0)
			return -1;
	}
	if (r) {
		p->max_tokens = (uint32_t)mt;
		p->max_tokens_set = 1;
	} else {
		uint64_t room = j->s->cfg.window > j->n_ids
				    ? j->s->cfg.window - j->n_ids
				    : 1;
		p->max_tokens = deflt < room ? deflt : (uint32_t)room;
	}
	return 0;
}

static int tokenize(gw_job *j, const char *text, size_t len)
{
	int32_t *ids = NULL;
	size_t n = 0;
	int rv = gw_tok_encode(j->s->tok, text, len, &ids, &n);
	if (rv == MOOR_EFORMAT)
		return bad(&j->fail, "prompt", "the prompt is not valid UTF-8");
	if (rv) {
		gw_failf(&j->fail, 500, "server_error", NULL, NULL,
			 "tokenize: %s", moor_strerror(rv));
		return -1;
	}
	free(j->ids);
	j->ids = ids;
	j->n_ids = n;
	return 0;
}

static int prepare_chat(gw_job *j, json_t *b)
{
	gw_srv *s = j->s;
	gw_fail *f = &j->fail;
	char err[MOOR_ERRLEN] = "";
	const json_t *msgs = json_object_get(b, "messages");
	if (!msgs)
		return bad(f, "messages", "'messages' is required");
	if (!json_is_array(msgs))
		return bad(f, "messages", "'messages' must be an array");
	if (json_array_size(msgs) == 0)
		return bad(f, "messages", "'messages' must not be empty");
	const json_t *tc = json_object_get(b, "tool_choice");
	int tools_off = 0;
	if (tc && !json_is_null(tc)) {
		if (json_is_string(tc) &&
		    !strcmp(json_string_value(tc), "none"))
			tools_off = 1;
		else if (!(json_is_string(tc) &&
			   !strcmp(json_string_value(tc), "auto")))
			return unsup(f, "tool_choice",
				     "'tool_choice' other than \"auto\" or "
				     "\"none\"");
	}
	gw_tmpl_ctx ctx;
	int rv = gw_tmpl_ctx_from_body(b, &ctx, err);
	if (rv)
		return bad(f, "messages", "%s", err);
	if (tools_off)
		ctx.tools = NULL;
	gw_prompt pr = {0};
	rv = gw_tmpl_render(s->family, &ctx, &pr, err);
	if (rv == MOOR_EFORMAT || rv == MOOR_EUNSUP)
		return bad(f, "messages", "%s", err);
	if (rv) {
		gw_failf(f, 500, "server_error", NULL, NULL, "render: %s",
			 err[0] ? err : moor_strerror(rv));
		return -1;
	}
	if (pr.images || pr.videos) {
		gw_prompt_fini(&pr);
		return unsup(f, "messages", "image and video input");
	}
	j->p.think_open = pr.think_open;
	j->p.family = s->family;
	j->p.tools = ctx.tools && json_is_array(ctx.tools) ? ctx.tools : NULL;
	rv = tokenize(j, pr.text, pr.len);
	gw_prompt_fini(&pr);
	if (rv)
		return -1;
	return read_max_tokens(j, b, s->cfg.default_max_tokens);
}

static int prepare_completion(gw_job *j, json_t *b)
{
	gw_fail *f = &j->fail;
	gw_srv *s = j->s;
	int echo = 0;
	if (get_bool(b, "echo", &echo, f) < 0)
		return -1;
	if (echo)
		return unsup(f, "echo", "'echo'");
	const json_t *v = json_object_get(b, "suffix");
	if (v && !json_is_null(v))
		return unsup(f, "suffix", "'suffix'");
	v = json_object_get(b, "best_of");
	if (v && !json_is_null(v) &&
	    !(json_is_integer(v) && json_integer_value(v) == 1))
		return unsup(f, "best_of", "'best_of' other than 1");
	const json_t *pr = json_object_get(b, "prompt");
	if (!pr)
		return bad(f, "prompt", "'prompt' is required");
	/* [x] of one: x */
	if (json_is_array(pr) && json_array_size(pr) == 1 &&
	    (json_is_string(json_array_get(pr, 0)) ||
	     json_is_array(json_array_get(pr, 0))))
		pr = json_array_get(pr, 0);
	if (json_is_string(pr)) {
		if (tokenize(j, json_string_value(pr), json_string_length(pr)))
			return -1;
	} else if (json_is_array(pr)) {
		size_t n = json_array_size(pr);
		if (n == 0)
			return bad(f, "prompt", "'prompt' must not be empty");
		if (!json_is_integer(json_array_get(pr, 0)))
			return bad(f, "prompt",
				   "'prompt' must be a string, an array of "
				   "token ids, or an array of one of these "
				   "(batches are not supported)");
		j->ids = malloc(n * sizeof *j->ids);
		if (!j->ids) {
			gw_failf(f, 500, "server_error", NULL, NULL,
				 "out of memory");
			return -1;
		}
		int32_t vs = gw_tok_vocab_size(s->tok);
		for (size_t i = 0; i < n; i++) {
			const json_t *e = json_array_get(pr, i);
			if (!json_is_integer(e))
				return bad(f, "prompt",
					   "'prompt' token %zu is not an "
					   "integer",
					   i);
			json_int_t id = json_integer_value(e);
			if (id < 0 || id >= vs)
				return bad(
				    f, "prompt",
				    "'prompt' token %zu is %lld, outside "
				    "the vocabulary [0, %d)",
				    i, (long long)id, (int)vs);
			j->ids[i] = (int32_t)id;
		}
		j->n_ids = n;
	} else {
		return bad(f, "prompt",
			   "'prompt' must be a string or an array of token "
			   "ids");
	}
	if (j->n_ids == 0)
		return bad(f, "prompt", "the prompt is empty");
	j->p.family = GW_TMPL_UNKNOWN; /* raw */
	return read_max_tokens(j, b, 16);
}

static void prepare_work(uv_work_t *w)
{
	gw_job *j = w->data;
	json_error_t je;
	json_t *b = json_loadb(j->body, j->body_len, 0, &je);
	if (!b) {
		bad(&j->fail, NULL,
		    "the body is not valid JSON: %s (line %d, "
		    "column %d)",
		    je.text, je.line, je.column);
		return;
	}
	j->json = b;
	if (!json_is_object(b)) {
		bad(&j->fail, NULL, "the body must be a JSON object");
		return;
	}
	if (read_common(j, b))
		return;
	if (j->kind == GW_KIND_COMPLETION) {
		prepare_completion(j, b);
		return;
	}
	if (prepare_chat(j, b) || j->kind != GW_KIND_PEEK)
		return;
	/* peek: the round trip to cached, here off the loop */
	proto_msg q = {0};
	q.h.type = PROTO_PEEK;
	q.h.req = j->rid;
	q.u.peek.session = j->p.session;
	q.u.peek.n_ids = (uint32_t)j->n_ids;
	q.u.peek.ids = j->ids;
	j->admin_rv = gw_link_admin(j->s, &q, &j->reply); /* q borrowed */
}

/* ---- the generation -------------------------------------------------------
 */

static void finish_job(gw_job *j);

static int send_generate(gw_job *j)
{
	gw_srv *s = j->s;
	proto_msg m = {0};
	m.h.type = PROTO_GENERATE;
	m.h.req = j->rid;
	proto_generate *g = &m.u.gen;
	g->session = j->p.session;
	g->max_tokens = j->p.max_tokens;
	g->temperature = j->p.temperature;
	g->top_p = j->p.top_p;
	g->min_p = j->p.min_p;
	g->top_k = j->p.top_k;
	g->seed = j->p.seed;
	g->flags = j->p.ignore_eos ? PROTO_GEN_IGNORE_EOS : 0;
	g->n_ids = (uint32_t)j->n_ids;
	g->ids = j->ids;
	if (!j->p.ignore_eos) {
		g->n_stop = (uint32_t)s->n_stop_ids;
		g->stop_ids = s->stop_ids;
	}
	j->pipe = atomic_load(&s->link.pipe);
	int rv = gw_link_send(s, &m);
	if (rv)
		return rv;
	j->sent = 1;
	j->t_start = moor_now();
	return 0;
}

/* The job ends with an error DONE of our own (engined down, gone). */
static void fail_engine(gw_job *j, int code, const char *msg)
{
	proto_done *d = &j->dn;
	memset(d, 0, sizeof *d);
	d->finish = PROTO_FINISH_ERROR;
	d->code = code;
	snprintf(j->err_msg, sizeof j->err_msg, "%s", msg);
	j->have_done = 1;
	finish_job(j);
}

static void submit(gw_job *j)
{
	gw_srv *s = j->s;
	j->rid = ++s->next_rid;
	j->refs++; /* the engine's (or the wait's) */
	if (!atomic_load(&s->link.pipe)) {
		j->waiting = 1;
		j->deadline = moor_now() + s->cfg.engine_wait_s;
		return;
	}
	int rv = send_generate(j);
	if (rv) {
		char m[128];
		snprintf(m, sizeof m, "sending to engined: %s",
			 moor_strerror(rv));
		fail_engine(j, -EPIPE, m);
	}
}

static void peek_answer(gw_job *j);

static void prepare_after(uv_work_t *w, int status)
{
	gw_job *j = w->data;
	gw_srv *s = j->s;
	if (!j->req || s->stopping) {
		if (j->req) {
			gw_metrics_count(s, j->route, 503);
			gw_send_error(j->req, 503, "server_error", NULL, NULL,
				      1, "the gateway is shutting down");
		}
		gw_job_unref(j);
		return;
	}
	if (j->fail.status) {
		gw_metrics_count(s, j->route, j->fail.status);
		gw_send_fail(j->req, &j->fail);
		gw_job_unref(j);
		return;
	}
	if (j->kind == GW_KIND_PEEK) {
		peek_answer(j);
		gw_job_unref(j);
		return;
	}
	/* the body's copy is not needed any more; json stays for tools */
	free(j->body);
	j->body = NULL;
	char prefix[64];
	snprintf(prefix, sizeof prefix, "call_%.12s_",
		 j->id + strlen(j->id) - 12);
	gw_rs_cfg rc = {
	    .family = j->p.family,
	    .think_open = j->p.think_open,
	    .tools = j->p.tools,
	    .id_prefix = prefix,
	    .stop = (const char *const *)j->p.stop,
	    .n_stop = j->p.n_stop,
	};
	int rv = gw_rs_new(&rc, &j->rs);
	if (!rv)
		rv = gw_tok_stream_init(&j->ts, s->tok);
	if (rv) {
		gw_metrics_count(s, j->route, 500);
		gw_send_error(j->req, 500, "server_error", NULL, NULL, 0,
			      "out of memory");
		gw_job_unref(j);
		return;
	}
	j->ts_init = 1;
	submit(j);
	gw_job_unref(j); /* the work's */
}

static int start_work(gw_srv *s, h2o_req_t *req, int kind, int route)
{
	if (s->stopping) {
		gw_metrics_count(s, route, 503);
		gw_send_error(req, 503, "server_error", NULL, NULL, 1,
			      "the gateway is shutting down");
		return 0;
	}
	gw_job *j = gw_job_new(s, req, kind, route);
	if (!j)
		goto oom;
	j->created = (int64_t)time(NULL);
	uint64_t nid = ++s->next_id;
	snprintf(j->id, sizeof j->id, "%s%016llx%08llx",
		 kind == GW_KIND_CHAT ? "chatcmpl-" : "cmpl-",
		 (unsigned long long)(nid * 0x9e3779b97f4a7c15ull ^
				      (uint64_t)s->started_unix),
		 (unsigned long long)(nid & 0xffffffffu));
	j->body_len = req->entity.len;
	j->body = malloc(j->body_len + 1);
	if (!j->body)
		goto oom_job;
	if (j->body_len)
		memcpy(j->body, req->entity.base, j->body_len);
	j->body[j->body_len] = 0;
	const h2o_iovec_t *h = gw_header(req, "x-session-id");
	if (h) {
		j->hdr_session = malloc(h->len + 1);
		if (!j->hdr_session)
			goto oom_job;
		memcpy(j->hdr_session, h->base, h->len);
		j->hdr_session[h->len] = 0;
	}
	j->work.data = j;
	j->refs++;
	if (kind == GW_KIND_PEEK)
		j->rid = ++s->next_rid; /* the PEEK's request id */
	int rv = uv_queue_work(s->loop, &j->work, prepare_work, prepare_after);
	if (rv) {
		j->refs--;
		goto oom_job;
	}
	return 0;
oom_job:
	gw_job_detach(j);
oom:
	gw_metrics_count(s, route, 500);
	gw_send_error(req, 500, "server_error", NULL, NULL, 0, "out of memory");
	return 0;
}

int gw_on_chat(gw_srv *s, h2o_req_t *req)
{
	return start_work(s, req, GW_KIND_CHAT, GW_ROUTE_CHAT);
}

int gw_on_completions(gw_srv *s, h2o_req_t *req)
{
	return start_work(s, req, GW_KIND_COMPLETION, GW_ROUTE_COMPLETIONS);
}

/* POST /v1/cache/peek: a chat body (and session) rendered and tokenized as
 * a request would be; cached says where its plan would start, nothing is
 * generated or counted. reread_eta_ms: the tokens to prefill at the median
 * rate of this gateway's last long prefills (GW_PREFILL_PRIOR_TPS before
 * any); restore_ms: restore_bytes at GW_RESTORE_BPS. */
int gw_on_cache_peek(gw_srv *s, h2o_req_t *req)
{
	return start_work(s, req, GW_KIND_PEEK, GW_ROUTE_PEEK);
}

static void peek_answer(gw_job *j)
{
	if (j->admin_rv == MOOR_ERANGE || j->admin_rv == MOOR_EFORMAT) {
		/* cached refused the prompt itself (longer than the window) */
		gw_send_error(j->req, 400, "invalid_request_error", "messages",
			      NULL, 0, "%s",
			      j->reply.h.type == PROTO_ERROR &&
				      j->reply.u.error.msg
				  ? j->reply.u.error.msg
				  : moor_strerror(j->admin_rv));
		return;
	}
	if (j->admin_rv == MOOR_ENOSPACE) {
		/* the memory policy would refuse this prefill: what the turn
		 * itself would answer */
		gw_send_error(j->req, 503, "server_error", NULL, NULL, 1, "%s",
			      j->reply.h.type == PROTO_ERROR &&
				      j->reply.u.error.msg
				  ? j->reply.u.error.msg
				  : moor_strerror(j->admin_rv));
		return;
	}
	if (j->admin_rv || j->reply.h.type != PROTO_PEEK_OK) {
		gw_send_error(
		    j->req, 503, "server_error", NULL, "cached_unavailable", 1,
		    "cached did not answer the peek: %s",
		    j->reply.h.type == PROTO_ERROR && j->reply.u.error.msg
			? j->reply.u.error.msg
			: moor_strerror(j->admin_rv ? j->admin_rv
						    : MOOR_EFORMAT));
		return;
	}
	const proto_peek_ok *pk = &j->reply.u.peek_ok;
	uint64_t cached = pk->cached <= pk->tokens ? pk->cached : pk->tokens;
	uint64_t reread = pk->tokens - cached;
	double rate = gw_prefill_rate(j->s);
	json_t *o = json_object();
	json_object_set_new(o, "tier", json_string(gw_tier_word(pk->tier)));
	json_object_set_new(o, "source", json_string(gw_tier_source(pk->tier)));
	json_object_set_new(o, "cached_tokens",
			    json_integer((json_int_t)cached));
	json_object_set_new(o, "reread_tokens",
			    json_integer((json_int_t)reread));
	json_object_set_new(o, "reread_eta_ms",
			    json_real(reread / rate * 1000.0));
	json_object_set_new(o, "tokens", json_integer((json_int_t)pk->tokens));
	json_object_set_new(o, "restore_bytes",
			    json_integer((json_int_t)pk->restore_bytes));
	json_object_set_new(
	    o, "restore_ms",
	    json_real(pk->restore_bytes / GW_RESTORE_BPS * 1000.0));
	json_object_set_new(o, "prefill_tokens_per_s", json_real(rate));
	json_object_set_new(o, "session", json_string(j->p.session));
	char *t = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER);
	json_decref(o);
	gw_send_json(j->req, 200, t ? t : "{}", t ? strlen(t) : 2);
	free(t);
}

/* ---- SSE -------------------------------------------------------------- */

static void pend_add(gw_job *j, const char *p, size_t n)
{
	if (j->pend_len + n + 1 > j->pend_cap) {
		size_t cap = j->pend_cap ? j->pend_cap : 4096;
		while (cap < j->pend_len + n + 1)
			cap *= 2;
		char *q = realloc(j->pend, cap);
		if (!q)
			return; /* the piece is lost; the stream goes on */
		j->pend = q;
		j->pend_cap = cap;
	}
	memcpy(j->pend + j->pend_len, p, n);
	j->pend_len += n;
}

static void pend_json(gw_job *j, json_t *o) /* takes o */
{
	char *t = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER);
	json_decref(o);
	if (!t)
		return;
	pend_add(j, "data: ", 6);
	pend_add(j, t, strlen(t));
	pend_add(j, "\n\n", 2);
	free(t);
}

static json_t *chunk_head(gw_job *j)
{
	json_t *o = json_object();
	json_object_set_new(o, "id", json_string(j->id));
	json_object_set_new(o, "object",
			    json_string(j->kind == GW_KIND_CHAT
					    ? "chat.completion.chunk"
					    : "text_completion"));
	json_object_set_new(o, "created", json_integer(j->created));
	json_object_set_new(o, "model", json_string(j->s->cfg.served));
	return o;
}

/* One choice chunk: a chat delta (taken) or a completion text. */
static void pend_choice(gw_job *j, json_t *delta, const char *text, size_t len,
			const char *finish)
{
	json_t *o = chunk_head(j);
	json_t *c = json_object();
	json_object_set_new(c, "index", json_integer(0));
	if (j->kind == GW_KIND_CHAT)
		json_object_set_new(c, "delta", delta);
	else
		json_object_set_new(c, "text",
				    json_stringn(text ? text : "", len));
	json_object_set_new(c, "logprobs", json_null());
	json_object_set_new(c, "finish_reason",
			    finish ? json_string(finish) : json_null());
	json_t *a = json_array();
	json_array_append_new(a, c);
	json_object_set_new(o, "choices", a);
	pend_json(j, o);
}

static void flush(gw_job *j)
{
	if (!j->req || j->sending || j->final_sent)
		return;
	int final = j->have_done;
	if (!j->pend_len && !final)
		return;
	h2o_req_t *req = j->req;
	h2o_iovec_t b =
	    h2o_strdup(&req->pool, j->pend ? j->pend : "", j->pend_len);
	j->pend_len = 0;
	j->sending = 1;
	if (final)
		j->final_sent = 1;
	h2o_send(req, &b, 1,
		 final ? H2O_SEND_STATE_FINAL : H2O_SEND_STATE_IN_PROGRESS);
}

static void gen_proceed(h2o_generator_t *g, h2o_req_t *req)
{
	gw_anchor *a = (gw_anchor *)g;
	gw_job *j = a->job;
	if (!j)
		return;
	j->sending = 0;
	flush(j);
}

/* The 200 and its headers, once, before the first piece. */
static void stream_start(gw_job *j)
{
	if (j->started || !j->req)
		return;
	j->started = 1;
	h2o_req_t *req = j->req;
	req->res.status = 200;
	req->res.reason = "OK";
	h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_CONTENT_TYPE,
		       NULL, H2O_STRLIT("text/event-stream"));
	h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_CACHE_CONTROL,
		       NULL, H2O_STRLIT("no-cache"));
	h2o_start_response(req, &j->anchor->gen);
	if (j->kind == GW_KIND_CHAT) {
		json_t *d = json_object();
		json_object_set_new(d, "role", json_string("assistant"));
		json_object_set_new(d, "content", json_string(""));
		pend_choice(j, d, NULL, 0, NULL);
	}
}

static int rs_event(void *arg, const gw_rs_event *ev)
{
	gw_job *j = arg;
	if (!j->p.stream || !j->req)
		return 0;
	if (j->kind != GW_KIND_CHAT) {
		if (ev->kind == GW_RS_CONTENT && ev->len)
			pend_choice(j, NULL, ev->text, ev->len, NULL);
		return 0;
	}
	json_t *d = json_object();
	switch (ev->kind) {
	case GW_RS_REASONING:
		json_object_set_new(d, "reasoning_content",
				    json_stringn(ev->text, ev->len));
		break;
	case GW_RS_CONTENT:
		json_object_set_new(d, "content",
				    json_stringn(ev->text, ev->len));
		break;
	case GW_RS_TOOL_START: {
		json_t *fn = json_object();
		json_object_set_new(fn, "name", json_string(ev->name));
		json_object_set_new(fn, "arguments", json_string(""));
		json_t *c = json_object();
		json_object_set_new(c, "index", json_integer(ev->index));
		json_object_set_new(c, "id", json_string(ev->id));
		json_object_set_new(c, "type", json_string("function"));
		json_object_set_new(c, "function", fn);
		json_t *a = json_array();
		json_array_append_new(a, c);
		json_object_set_new(d, "tool_calls", a);
		j->n_tool_calls++;
		break;
	}
	case GW_RS_TOOL_ARGS: {
		json_t *fn = json_object();
		json_object_set_new(fn, "arguments",
				    json_stringn(ev->text, ev->len));
		json_t *c = json_object();
		json_object_set_new(c, "index", json_integer(ev->index));
		json_object_set_new(c, "function", fn);
		json_t *a = json_array();
		json_array_append_new(a, c);
		json_object_set_new(d, "tool_calls", a);
		break;
	}
	default:
		json_decref(d);
		return 0;
	}
	pend_choice(j, d, NULL, 0, NULL);
	return 0;
}

static void push_piece(gw_job *j, const char *piece, size_t len)
{
	if (j->stopped || !len)
		return;
	int rv = gw_rs_push(j->rs, piece, len, rs_event, j);
	if (rv == GW_RS_STOPPED) {
		j->stopped = 1;
		send_cancel(j);
	}
}

static void on_token(gw_job *j, const proto_step_entry *e)
{
	if (j->have_done)
		return;
	if (!j->n_tokens++) {
		j->t_first = moor_now();
		gw_metrics_ttft(j->s, j->t_first - j->t_start);
	}
	if (j->p.stream && j->req)
		stream_start(j);
	/* the token that stopped the generation (eos, a stop id) is not
	 * text */
	if (e->finish == PROTO_FINISH_STOP || j->stopped)
		return;
	const char *piece;
	size_t len;
	if (gw_tok_stream_push(&j->ts, e->token, &piece, &len) == 0)
		push_piece(j, piece, len);
	flush(j);
}

/* ---- the end ------------------------------------------------------------ */

const char *gw_tier_word(uint32_t tier)
{
	switch (tier) {
	case PROTO_TIER_RESIDENT:
	case PROTO_TIER_END:
	case PROTO_TIER_STASH:
		return "resident";
	case PROTO_TIER_PIN:
	case PROTO_TIER_PARK:
		return "ram_park";
	case PROTO_TIER_STORE:
		return "ram_snapshot";
	default:
		return "none";
	}
}

const char *gw_tier_source(uint32_t tier)
{
	static const char *const n[] = {"none", "anchor", "end_anchor", "pin",
					"park", "store",  "stash"};
	return tier < sizeof n / sizeof n[0] ? n[tier] : "none";
}

static json_t *usage_json(const proto_done *d)
{
	json_t *u = json_object();
	json_object_set_new(u, "prompt_tokens",
			    json_integer((json_int_t)d->prompt_tokens));
	json_object_set_new(u, "completion_tokens",
			    json_integer((json_int_t)d->completion_tokens));
	json_object_set_new(u, "total_tokens",
			    json_integer((json_int_t)(d->prompt_tokens +
						      d->completion_tokens)));
	json_t *det = json_object();
	json_object_set_new(det, "cached_tokens",
			    json_integer((json_int_t)d->cached_tokens));
	json_object_set_new(u, "prompt_tokens_details", det);
	json_t *m = json_object();
	json_object_set_new(m, "tier", json_string(gw_tier_word(d->tier)));
	json_object_set_new(m, "source", json_string(gw_tier_source(d->tier)));
	json_object_set_new(m, "cached",
			    json_integer((json_int_t)d->cached_tokens));
	uint64_t reread = d->prompt_tokens > d->cached_tokens
			      ? d->prompt_tokens - d->cached_tokens
			      : 0;
	json_object_set_new(m, "reread", json_integer((json_int_t)reread));
	json_object_set_new(u, "moor", m);
	return u;
}

static const char *finish_name(gw_job *j, int n_calls)
{
	if (j->stopped)
		return "stop";
	if (j->dn.finish == PROTO_FINISH_LENGTH)
		return "length";
	if (n_calls > 0)
		return "tool_calls";
	return "stop";
}

/* An engine error as HTTP: status, type, Retry-After. */
static void error_of(int code, int *status, const char **type, int *retry)
{
	*retry = 0;
	*type = "server_error";
	if (code == MOOR_ERANGE) {
		*status = 400;
		*type = "invalid_request_error";
	} else if (code == -EBUSY || code == -ESHUTDOWN ||
		   code == MOOR_ENOSPACE || code == -EPIPE ||
		   code == -ETIMEDOUT) {
		*status = 503;
		*retry = 1;
	} else {
		*status = 500;
	}
}

static void reply_whole(gw_job *j)
{
	gw_srv *s = j->s;
	size_t tl;
	const char *text = gw_rs_text(j->rs, &tl);
	json_t *o = json_object();
	json_object_set_new(o, "id", json_string(j->id));
	json_object_set_new(o, "object",
			    json_string(j->kind == GW_KIND_CHAT
					    ? "chat.completion"
					    : "text_completion"));
	json_object_set_new(o, "created", json_integer(j->created));
	json_object_set_new(o, "model", json_string(s->cfg.served));
	json_t *c = json_object();
	json_object_set_new(c, "index", json_integer(0));
	int n_calls = 0;
	if (j->kind == GW_KIND_CHAT) {
		gw_reply r = {0};
		char prefix[64];
		snprintf(prefix, sizeof prefix, "call_%.12s_",
			 j->id + strlen(j->id) - 12);
		int rv =
		    gw_reply_parse(j->p.family, text ? text : "", tl,
				   j->p.think_open, j->p.tools, prefix, &r);
		json_t *msg = json_object();
		json_object_set_new(msg, "role", json_string("assistant"));
		if (rv == 0) {
			json_object_set_new(
			    msg, "content",
			    r.content ? json_stringn(r.content, r.content_len)
				      : (r.tool_calls ? json_null()
						      : json_string("")));
			if (r.reasoning)
				json_object_set_new(
				    msg, "reasoning_content",
				    json_stringn(r.reasoning, r.reasoning_len));
			if (r.tool_calls) {
				n_calls = (int)json_array_size(r.tool_calls);
				json_object_set(msg, "tool_calls",
						r.tool_calls);
			}
		} else {
			json_object_set_new(msg, "content",
					    json_stringn(text ? text : "", tl));
		}
		gw_reply_fini(&r);
		json_object_set_new(c, "message", msg);
	} else {
		json_object_set_new(c, "text",
				    json_stringn(text ? text : "", tl));
	}
	json_object_set_new(c, "logprobs", json_null());
	json_object_set_new(c, "finish_reason",
			    json_string(finish_name(j, n_calls)));
	json_t *a = json_array();
	json_array_append_new(a, c);
	json_object_set_new(o, "choices", a);
	json_object_set_new(o, "usage", usage_json(&j->dn));
	char *t = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER);
	json_decref(o);
	gw_metrics_count(s, j->route, 200);
	gw_send_json(j->req, 200, t ? t : "{}", t ? strlen(t) : 2);
	free(t);
}

static void reply_stream_end(gw_job *j)
{
	if (j->kind == GW_KIND_CHAT)
		pend_choice(j, json_object(), NULL, 0,
			    finish_name(j, j->n_tool_calls));
	else
		pend_choice(j, NULL, "", 0, finish_name(j, 0));
	if (j->p.include_usage) {
		json_t *o = chunk_head(j);
		json_object_set_new(o, "choices", json_array());
		json_object_set_new(o, "usage", usage_json(&j->dn));
		pend_json(j, o);
	}
	pend_add(j, "data: [DONE]\n\n", 14);
}

/* The DONE (engined's or ours) is in j->dn: the reply goes out. */
static void finish_job(gw_job *j)
{
	gw_srv *s = j->s;
	const proto_done *d = &j->dn;
	if (d->finish != PROTO_FINISH_ERROR) {
		const char *piece;
		size_t len;
		if (j->ts_init && !gw_tok_stream_flush(&j->ts, &piece, &len))
			push_piece(j, piece, len);
		if (j->rs)
			gw_rs_finish(j->rs, rs_event, j);
	}
	if (!j->req) {
		gw_job_unref(j); /* the engine's */
		return;
	}
	if (d->finish == PROTO_FINISH_ERROR) {
		int status, retry;
		const char *type;
		error_of(d->code, &status, &type, &retry);
		const char *msg =
		    j->err_msg[0] ? j->err_msg : moor_strerror(d->code);
		gw_metrics_count(s, j->route, status);
		if (j->started) { /* the 200 is out: an error event */
			json_t *e = json_object();
			json_object_set_new(e, "message", json_string(msg));
			json_object_set_new(e, "type", json_string(type));
			json_object_set_new(e, "param", json_null());
			json_object_set_new(e, "code", json_null());
			json_t *o = json_object();
			json_object_set_new(o, "error", e);
			pend_json(j, o);
			pend_add(j, "data: [DONE]\n\n", 14);
			flush(j);
		} else {
			gw_send_error(j->req, status, type, NULL, NULL, retry,
				      "%s", msg);
		}
	} else if (j->p.stream) {
		stream_start(j);
		reply_stream_end(j);
		gw_metrics_count(s, j->route, 200);
		flush(j);
	} else {
		reply_whole(j);
	}
	gw_job_unref(j); /* the engine's */
}

static gw_job *job_of(gw_srv *s, uint64_t rid)
{
	for (gw_job *j = s->jobs; j; j = j->next)
		if (j->rid == rid && j->sent && !j->have_done)
			return j;
	return NULL;
}

static void on_done(gw_job *j, const proto_done *d, const char *msg)
{
	j->done = 1;
	j->have_done = 1;
	j->dn = *d;
	j->dn.msg = NULL;
	snprintf(j->err_msg, sizeof j->err_msg, "%s", msg ? msg : "");
	if (d->finish != PROTO_FINISH_ERROR) {
		gw_metrics_done(j->s, d);
		gw_prefill_sample(j->s, d);
	}
	finish_job(j);
}

void gw_on_engine_msg(gw_srv *s, proto_msg *m)
{
	if (m->h.type == PROTO_STEP) {
		for (uint32_t i = 0; i < m->u.step.n; i++) {
			gw_job *j = job_of(s, m->u.step.e[i].req);
			if (j)
				on_token(j, &m->u.step.e[i]);
		}
	} else if (m->h.type == PROTO_DONE) {
		gw_job *j = job_of(s, m->h.req);
		if (j)
			on_done(j, &m->u.done, m->u.done.msg);
	} else if (m->h.type == PROTO_ERROR) {
		gw_job *j = job_of(s, m->h.req);
		if (j) {
			proto_done d = {.finish = PROTO_FINISH_ERROR,
					.code = m->u.error.code};
			on_done(j, &d, m->u.error.msg);
		}
	}
}

void gw_on_engine_pipe(gw_srv *s, int up, uint32_t pipe)
{
	if (up) {
		moor_info("engined is up (pipe %u)", pipe);
		gw_jobs_tick(s);
		return;
	}
	moor_warn("engined went away (pipe %u)", pipe);
	for (gw_job *j = s->jobs, *n; j; j = n) {
		n = j->next;
		if (j->sent && !j->have_done && j->pipe == pipe) {
			j->done = 1;
			fail_engine(j, -EPIPE,
				    "engined went away during the request");
		}
	}
}

void gw_jobs_tick(gw_srv *s)
{
	double now = moor_now();
	for (gw_job *j = s->jobs, *n; j; j = n) {
		n = j->next;
		/* a whole reply's client that left: h2o frees its request
		 * only when the answer is written, so look for it here */
		if (j->req && j->sent && !j->have_done && !j->cancelled &&
		    !j->started && gw_client_gone(s, j->req)) {
			moor_info("req %llu: the client closed its connection: "
				  "cancelling",
				  (unsigned long long)j->rid);
			send_cancel(j);
		}
		if (!j->waiting)
			continue;
		if (s->stopping) {
			j->waiting = 0;
			fail_engine(j, -ESHUTDOWN,
				    "the gateway is shutting down");
		} else if (atomic_load(&s->link.pipe)) {
			j->waiting = 0;
			int rv = send_generate(j);
			if (rv) {
				char m[128];
				snprintf(m, sizeof m, "sending to engined: %s",
					 moor_strerror(rv));
				fail_engine(j, -EPIPE, m);
			}
		} else if (now >= j->deadline) {
			j->waiting = 0;
			char m[160];
			snprintf(m, sizeof m,
				 "engined is not available (waited %.1f s)",
				 s->cfg.engine_wait_s);
			fail_engine(j, -EPIPE, m);
		}
	}
}

void gw_jobs_shutdown(gw_srv *s)
{
	gw_jobs_tick(s); /* the waiting ones are refused */
	for (gw_job *j = s->jobs; j; j = j->next)
		if (j->sent && !j->have_done)
			send_cancel(j);
}

/* ---- prefill rate ----------------------------------------------------------
 */

void gw_prefill_sample(gw_srv *s, const proto_done *d)
{
	uint64_t fwd = d->prompt_tokens > d->cached_tokens
			   ? d->prompt_tokens - d->cached_tokens
			   : 0;
	if (fwd < GW_PREFILL_LONG_TOKENS || d->prefill_us == 0)
		return;
	s->pf_rate[s->pf_k] = (double)fwd / (d->prefill_us / 1e6);
	s->pf_k = (s->pf_k + 1) % GW_PREFILL_SAMPLES;
	if (s->pf_n < GW_PREFILL_SAMPLES)
		s->pf_n++;
}

static int cmp_d(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

double gw_prefill_rate(const gw_srv *s)
{
	if (!s->pf_n)
		return GW_PREFILL_PRIOR_TPS;
	double v[GW_PREFILL_SAMPLES];
	memcpy(v, s->pf_rate, (size_t)s->pf_n * sizeof *v);
	qsort(v, (size_t)s->pf_n, sizeof *v, cmp_d);
	return s->pf_n % 2 ? v[s->pf_n / 2]
			   : (v[s->pf_n / 2 - 1] + v[s->pf_n / 2]) / 2;
}
