/* params.c: a request's body read into gw_params (params.h). Every field
 * is checked where it is read; the first bad one is the answer. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "params.h"
#include "proto.h"

void gw_failf(gw_fail *f, int status, const char *type, const char *param,
	      const char *code, const char *fmt, ...)
{
	f->status = status;
	snprintf(f->type, sizeof f->type, "%s", type);
	snprintf(f->param, sizeof f->param, "%s", param ? param : "");
	snprintf(f->code, sizeof f->code, "%s", code ? code : "");
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(f->msg, sizeof f->msg, fmt, ap);
	va_end(ap);
}

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

static int oom(gw_fail *f)
{
	gw_failf(f, 500, "server_error", NULL, NULL, "out of memory");
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

/* logprobs asked of a server whose --max-logprobs is 0 */
static int lp_off(gw_fail *f)
{
	return bad(f, "logprobs",
		   "'logprobs' is turned off on this server (--max-logprobs "
		   "0)");
}

/* n alternatives asked (key: the field) past --max-logprobs */
static int lp_over(const gw_params_env *env, const char *key, long long n,
		   gw_fail *f)
{
	return bad(f, key,
		   "'%s' is %lld: this server gives at most %u alternatives "
		   "(--max-logprobs)",
		   key, n, env->max_logprobs);
}

/* logprobs and top_logprobs (params.h says how each route reads them). */
static int read_logprobs(const gw_params_env *env, int kind, const json_t *b,
			 gw_params *p, gw_fail *f)
{
	const json_t *top = json_object_get(b, "top_logprobs");
	int has_top = top && !json_is_null(top);
	long long n = 0;
	if (kind == GW_KIND_COMPLETION) {
		if (has_top)
			return unsup(f, "top_logprobs",
				     "'top_logprobs' (a chat parameter; a "
				     "completion asks for N alternatives with "
				     "'logprobs': N)");
		int r = get_int(b, "logprobs", 0, PROTO_MAX_TOP, &n, f);
		if (r < 0)
			return -1;
		if (r && !env->max_logprobs)
			return lp_off(f);
		if (n > env->max_logprobs)
			return lp_over(env, "logprobs", n, f);
		p->logprobs = r;
		p->top_logprobs = (uint32_t)n;
		return 0;
	}
	if (get_bool(b, "logprobs", &p->logprobs, f) < 0)
		return -1;
	if (p->logprobs && !env->max_logprobs)
		return lp_off(f);
	if (!has_top)
		return 0;
	if (get_int(b, "top_logprobs", 0, PROTO_MAX_TOP, &n, f) < 0)
		return -1;
	if (!p->logprobs)
		return bad(f, "top_logprobs",
			   "'top_logprobs' needs 'logprobs' to be true");
	if (n > env->max_logprobs)
		return lp_over(env, "top_logprobs", n, f);
	p->top_logprobs = (uint32_t)n;
	return 0;
}

/* The fields both routes share: sampling, stop, stream, model, n. */
static int read_common(const gw_params_env *env, int kind, const json_t *b,
		       const char *hdr_session, uint64_t seed_default,
		       gw_params *p, gw_fail *f)
{
	const json_t *v;

	v = json_object_get(b, "model");
	if (v && !json_is_null(v)) {
		if (!json_is_string(v))
			return bad(f, "model", "'model' must be a string");
		if (strcmp(json_string_value(v), env->served)) {
			gw_failf(f, 404, "invalid_request_error", "model",
				 "model_not_found",
				 "The model '%s' does not exist (this server "
				 "serves '%s')",
				 json_string_value(v), env->served);
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

	double x = env->defs.temperature;
	if (get_num(b, "temperature", 0, 2, &x, f) < 0)
		return -1;
	p->temperature = (float)x;
	x = env->defs.top_p;
	if (get_num(b, "top_p", 0, 1, &x, f) < 0)
		return -1;
	if (x == 0)
		return bad(f, "top_p", "'top_p' must be in (0, 1]");
	p->top_p = (float)x;
	x = env->defs.min_p;
	if (get_num(b, "min_p", 0, 1, &x, f) < 0)
		return -1;
	p->min_p = (float)x;
	long long k = env->defs.top_k;
	if (get_int(b, "top_k", -1, INT32_MAX, &k, f) < 0)
		return -1;
	p->top_k = k < 0 ? 0 : (int32_t)k; /* -1 (vLLM) and 0: all */
	long long seed = 0;
	int r = get_int(b, "seed", INT64_MIN, INT64_MAX, &seed, f);
	if (r < 0)
		return -1;
	p->seed = r ? (uint64_t)seed : seed_default;
	if (get_bool(b, "ignore_eos", &p->ignore_eos, f) < 0)
		return -1;

	v = json_object_get(b, "stop");
	if (v && !json_is_null(v)) {
		if (json_is_string(v)) {
			if (!(p->stop[p->n_stop++] =
				  xstrdup(json_string_value(v))))
				return oom(f);
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
				if (!(p->stop[p->n_stop++] =
					  xstrdup(json_string_value(e))))
					return oom(f);
			}
		} else {
			return bad(f, "stop",
				   "'stop' must be a string or an array of "
				   "strings");
		}
	}

	if (read_logprobs(env, kind, b, p, f))
		return -1;
	/* what we do not do is refused, not ignored */
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
	const char *sess = session_of(b, hdr_session);
	if (strlen(sess) > PROTO_MAX_STR)
		return bad(f, "conversation_id",
			   "the conversation id is longer than %d bytes",
			   PROTO_MAX_STR);
	p->session = xstrdup(sess);
	if (!p->session)
		return oom(f);
	/* vLLM's per-request cache salt: a non-empty string; the tenant's
	 * caches are keyed by it (gatewayd/auth.c derives the salt) */
	v = json_object_get(b, "cache_salt");
	if (v && !json_is_null(v)) {
		if (!json_is_string(v) || !json_string_length(v) ||
		    json_string_length(v) > GW_MAX_CACHE_SALT)
			return bad(f, "cache_salt",
				   "'cache_salt' must be a non-empty string of "
				   "at most %d bytes",
				   GW_MAX_CACHE_SALT);
		p->cache_salt = malloc(json_string_length(v) + 1);
		if (!p->cache_salt)
			return oom(f);
		memcpy(p->cache_salt, json_string_value(v),
		       json_string_length(v) + 1);
		p->cache_salt_len = json_string_length(v);
	}
	return 0;
}

static int read_max_tokens(const gw_params_env *env, int kind, const json_t *b,
			   uint32_t deflt, gw_params *p, gw_fail *f)
{
	long long mt = 0;
	int r = 0;
	if (kind != GW_KIND_COMPLETION)
		r = get_int(b, "max_completion_tokens", 1, UINT32_MAX, &mt, f);
	if (r < 0)
		return -1;
	if (!r) {
		r = get_int(b, "max_tokens", 1, UINT32_MAX, &mt, f);
		if (r < 0)
			return -1;
	}
	if (r) {
		p->max_tokens = (uint32_t)mt;
		p->max_tokens_set = 1;
	} else {
		uint64_t room =
		    env->window > p->n_ids ? env->window - p->n_ids : 1;
		p->max_tokens = deflt < room ? deflt : (uint32_t)room;
	}
	return 0;
}

static int tokenize(const gw_params_env *env, const char *text, size_t len,
		    gw_params *p, gw_fail *f)
{
	int32_t *ids = NULL;
	size_t n = 0;
	int rv = gw_tok_encode(env->tok, text, len, &ids, &n);
	if (rv == MOOR_EFORMAT)
		return bad(f, "prompt", "the prompt is not valid UTF-8");
	if (rv) {
		gw_failf(f, 500, "server_error", NULL, NULL, "tokenize: %s",
			 moor_strerror(rv));
		return -1;
	}
	free(p->ids);
	p->ids = ids;
	p->n_ids = n;
	return 0;
}

/* Tokens of text[0, len) (a prefix ending where a special token split
 * the prompt, so its ids are a prefix of the prompt's). */
static size_t count_tokens(const gw_params_env *env, const char *text,
			   size_t len, int *err)
{
	int32_t *ids = NULL;
	size_t n = 0;
	*err = gw_tok_encode(env->tok, text, len, &ids, &n);
	free(ids);
	return n;
}

/* usage.moor.parts: the header (a first system message, and the tools the
 * template writes into it) split into system and tools by rendering the
 * header once more without the tools. */
static int count_parts(const gw_params_env *env, const gw_tmpl_ctx *ctx,
		       const gw_prompt *pr, const json_t *msgs, gw_params *p,
		       gw_fail *f)
{
	const char *r0 =
	    json_string_value(json_object_get(json_array_get(msgs, 0), "role"));
	if (!r0 || strcmp(r0, "system") || !pr->msg_off || pr->n_msgs < 1)
		return 0;
	size_t hend = pr->msg_off[1];
	int e = 0;
	size_t head = count_tokens(env, pr->text, hend, &e);
	size_t sys = head;
	if (!e && ctx->tools && json_is_array(ctx->tools) &&
	    json_array_size(ctx->tools)) {
		gw_tmpl_ctx c2 = *ctx;
		c2.tools = NULL;
		gw_prompt p2 = {0};
		char err[MOOR_ERRLEN] = "";
		if (!gw_tmpl_render(env->family, &c2, &p2, err) && p2.msg_off &&
		    p2.n_msgs >= 1)
			sys = count_tokens(env, p2.text, p2.msg_off[1], &e);
		gw_prompt_fini(&p2);
	}
	if (e == -ENOMEM) {
		gw_failf(f, 500, "server_error", NULL, NULL,
			 "tokenize: out of memory");
		return -1;
	}
	if (e || sys > head)
		return 0; /* no split: counted as history */
	p->n_system = sys;
	p->n_tools = head - sys;
	return 0;
}

/* p->user_at: the token index where the last user message starts.
 * Which way: the message's byte offset (msg_off) mapped to its token by
 * counting <|im_start|>. Every turn the templates render begins with
 * <|im_start|>, a special token the tokenizer matches in the raw text
 * before it normalizes or splits anything, so the k-th "<|im_start|>" of
 * the text is the k-th <|im_start|> id of the prompt. Why not the others:
 * tokenizing the prefix again (as count_parts does for the header) costs a
 * second tokenization of most of a long prompt on every request, and
 * summing the ids' bytes up to the offset is wrong wherever the normalizer
 * (NFC) changed the text's length. Anything that does not agree (the offset
 * not at an "<|im_start|>", fewer such ids than the text has): 0. */
static void find_user_at(const gw_params_env *env, const gw_prompt *pr,
			 const json_t *msgs, gw_params *p)
{
	static const char tag[] = "<|im_start|>";
	const size_t tl = sizeof tag - 1;
	p->user_at = 0;
	if (!pr->msg_off || !pr->text)
		return;
	size_t u = pr->n_msgs;
	for (size_t i = pr->n_msgs; i-- > 0;) {
		const char *r = json_string_value(
		    json_object_get(json_array_get(msgs, i), "role"));
		if (r && !strcmp(r, "user")) {
			u = i;
			break;
		}
	}
	if (u == 0 || u >= pr->n_msgs)
		return; /* none, or the first message: nothing below it */
	size_t off = pr->msg_off[u];
	int32_t id = gw_tok_token_id(env->tok, tag);
	if (id < 0 || off + tl > pr->len || memcmp(pr->text + off, tag, tl))
		return;
	size_t k = 0; /* the "<|im_start|>" before the message's own */
	for (const char *q = pr->text, *e = pr->text + off;
	     (q = memmem(q, (size_t)(e - q), tag, tl)); q += tl)
		k++;
	for (size_t i = 0; i < p->n_ids; i++)
		if (p->ids[i] == id && k-- == 0) {
			p->user_at = i;
			return;
		}
}

static int read_chat(const gw_params_env *env, int kind, const json_t *b,
		     gw_params *p, gw_fail *f)
{
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
	rv = gw_tmpl_render(env->family, &ctx, &pr, err);
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
	p->think_open = pr.think_open;
	long long bud = env->reasoning_budget;
	for (int i = 0; i < 2; i++) {
		const char *k = i ? "thinking_budget" : "reasoning_budget";
		if (json_object_get(b, k) &&
		    !json_is_null(json_object_get(b, k))) {
			if (get_int(b, k, 0, INT32_MAX, &bud, f) < 0) {
				gw_prompt_fini(&pr);
				return -1;
			}
			break;
		}
	}
	p->reasoning_budget = pr.think_open ? (uint32_t)bud : 0;
	p->family = env->family;
	p->tools = ctx.tools && json_is_array(ctx.tools) ? ctx.tools : NULL;
	rv = tokenize(env, pr.text, pr.len, p, f);
	if (!rv)
		rv = count_parts(env, &ctx, &pr, msgs, p, f);
	if (!rv)
		find_user_at(env, &pr, msgs, p);
	gw_prompt_fini(&pr);
	if (rv)
		return -1;
	return read_max_tokens(env, kind, b, env->default_max_tokens, p, f);
}

static int read_completion(const gw_params_env *env, const json_t *b,
			   gw_params *p, gw_fail *f)
{
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
		if (tokenize(env, json_string_value(pr), json_string_length(pr),
			     p, f))
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
		p->ids = malloc(n * sizeof *p->ids);
		if (!p->ids)
			return oom(f);
		int32_t vs = gw_tok_vocab_size(env->tok);
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
			p->ids[i] = (int32_t)id;
		}
		p->n_ids = n;
	} else {
		return bad(f, "prompt",
			   "'prompt' must be a string or an array of token "
			   "ids");
	}
	if (p->n_ids == 0)
		return bad(f, "prompt", "the prompt is empty");
	p->family = GW_TMPL_UNKNOWN; /* raw */
	return read_max_tokens(env, GW_KIND_COMPLETION, b, 16, p, f);
}

json_t *gw_params_parse(const char *body, size_t len, gw_fail *f)
{
	json_error_t je;
	json_t *b = json_loadb(body, len, 0, &je);
	if (!b) {
		bad(f, NULL,
		    "the body is not valid JSON: %s (line %d, column %d)",
		    je.text, je.line, je.column);
		return NULL;
	}
	if (!json_is_object(b)) {
		json_decref(b);
		bad(f, NULL, "the body must be a JSON object");
		return NULL;
	}
	return b;
}

int gw_params_read(const gw_params_env *env, int kind, const json_t *body,
		   const char *hdr_session, uint64_t seed, gw_params *p,
		   gw_fail *f)
{
	memset(p, 0, sizeof *p);
	if (!json_is_object(body))
		return bad(f, NULL, "the body must be a JSON object");
	if (read_common(env, kind, body, hdr_session, seed, p, f))
		return -1;
	if (kind == GW_KIND_COMPLETION)
		return read_completion(env, body, p, f);
	return read_chat(env, kind, body, p, f);
}

void gw_params_fini(gw_params *p)
{
	for (size_t i = 0; i < p->n_stop; i++)
		free(p->stop[i]);
	free(p->session);
	free(p->cache_salt);
	free(p->ids);
	memset(p, 0, sizeof *p);
}
