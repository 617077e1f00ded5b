/* test_gw_params_read: a request body read into gw_params (params.h) with
 * no HTTP server, loop or engine: the defaults and what a body overrides,
 * every refusal with its status, param and code, logprobs and
 * top_logprobs (a chat's boolean and its 0..20 that needs it, a
 * completion's 0..20; types, ranges; --max-logprobs 5 and 0), the
 * session's spellings,
 * the seed, max_tokens against the window, a chat's ids equal to the
 * template's rendering tokenized, tool_choice "none" rendering no tools,
 * and a completion's string, ids and one-element batch; user_at against
 * the rendering's prefix tokenized alone. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "params.h"
#include "proto.h"
#include "t.h"

static gw_tok *tok;
static gw_params_env env;

/* Reads the JSON text js (printf-style) as kind; the result in *p, *f. */
static int readf(int kind, const char *hdr, gw_params *p, gw_fail *f,
		 json_t **keep, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));
static int readf(int kind, const char *hdr, gw_params *p, gw_fail *f,
		 json_t **keep, const char *fmt, ...)
{
	static char js[PROTO_MAX_STR + 4096];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(js, sizeof js, fmt, ap);
	va_end(ap);
	memset(f, 0, sizeof *f);
	json_t *b = gw_params_parse(js, strlen(js), f);
	REQUIRE(b, "the test's own JSON does not parse: %s: %s", js, f->msg);
	int rv = gw_params_read(&env, kind, b, hdr, 777, p, f);
	if (keep)
		*keep = b;
	else
		json_decref(b);
	return rv;
}

#define CHAT(body)                                                             \
	"{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]" body "}"

/* A refusal: status, param and code as the OpenAI error shape has them. */
static void refused(int kind, const char *body, int status, const char *param,
		    const char *code)
{
	gw_params p;
	gw_fail f;
	int rv = readf(kind, NULL, &p, &f, NULL, "%s", body);
	CHECK(rv == -1 && f.status == status && !strcmp(f.param, param) &&
		  !strcmp(f.code, code ? code : "") && f.msg[0],
	      "%s: rv %d status %d param '%s' code '%s' (%s)", body, rv,
	      f.status, f.param, f.code, f.msg);
	gw_params_fini(&p);
}

static void test_parse(void)
{
	gw_fail f = {0};
	CHECK(!gw_params_parse("{\"a\":", 5, &f) && f.status == 400 &&
		  strstr(f.msg, "not valid JSON") && strstr(f.msg, "line 1"),
	      "not JSON: %s", f.msg);
	memset(&f, 0, sizeof f);
	CHECK(!gw_params_parse("[1]", 3, &f) && f.status == 400 &&
		  strstr(f.msg, "must be a JSON object"),
	      "an array: %s", f.msg);
	gw_params p = {0};
	gw_params_fini(&p); /* zeroed is fine */
	json_t *a = json_array();
	memset(&f, 0, sizeof f);
	CHECK(gw_params_read(&env, GW_KIND_CHAT, a, NULL, 1, &p, &f) == -1 &&
		  f.status == 400,
	      "read of a non-object");
	json_decref(a);
}

static void test_defaults_and_overrides(void)
{
	gw_params p;
	gw_fail f;
	json_t *b;
	REQUIRE(readf(GW_KIND_CHAT, NULL, &p, &f, &b, CHAT("")) == 0, "%s",
		f.msg);
	CHECK(p.temperature == (float)env.defs.temperature &&
		  p.top_p == (float)env.defs.top_p &&
		  p.min_p == (float)env.defs.min_p && p.top_k == env.defs.top_k,
	      "the server's defaults");
	CHECK(!p.stream && !p.include_usage && !p.ignore_eos && !p.n_stop,
	      "flags off");
	CHECK(p.seed == 777, "the caller's seed when the body has none");
	CHECK(!strcmp(p.session, ""), "no session");
	CHECK(p.family == env.family && p.tools == NULL, "family, no tools");
	CHECK(!p.max_tokens_set && p.max_tokens == env.default_max_tokens,
	      "default max_tokens %u", p.max_tokens);
	gw_params_fini(&p);
	json_decref(b);

	REQUIRE(
	    readf(GW_KIND_CHAT, NULL, &p, &f, &b,
		  CHAT(",\"model\":\"tiny\",\"temperature\":0,\"top_p\":0.5,"
		       "\"min_p\":0.25,\"top_k\":-1,\"seed\":-3,"
		       "\"stream\":true,\"stream_options\":{"
		       "\"include_usage\":true},\"ignore_eos\":true,"
		       "\"stop\":[\"a\",\"bc\"],\"max_tokens\":9.0,"
		       "\"n\":1,\"logprobs\":false,\"logit_bias\":{},"
		       "\"presence_penalty\":0,\"response_format\":{"
		       "\"type\":\"text\"}")) == 0,
	    "%s", f.msg);
	CHECK(p.temperature == 0 && p.top_p == 0.5f && p.min_p == 0.25f &&
		  p.top_k == 0,
	      "sampling from the body (top_k -1 is all: 0)");
	CHECK(p.seed == (uint64_t)-3, "the body's seed, even negative");
	CHECK(p.stream && p.include_usage && p.ignore_eos, "flags on");
	CHECK(p.n_stop == 2 && !strcmp(p.stop[0], "a") &&
		  !strcmp(p.stop[1], "bc"),
	      "stop strings");
	CHECK(p.max_tokens_set && p.max_tokens == 9, "max_tokens 9.0 is 9");
	CHECK(!p.logprobs && p.top_logprobs == 0, "logprobs false: off");
	gw_params_fini(&p);
	json_decref(b);

	/* max_completion_tokens wins over max_tokens; a stop string alone */
	REQUIRE(readf(GW_KIND_CHAT, NULL, &p, &f, &b,
		      CHAT(",\"max_tokens\":5,\"max_completion_tokens\":7,"
			   "\"stop\":\"x\"")) == 0,
		"%s", f.msg);
	CHECK(p.max_tokens == 7 && p.n_stop == 1 && !strcmp(p.stop[0], "x"),
	      "max_completion_tokens %u", p.max_tokens);
	gw_params_fini(&p);
	json_decref(b);
}

static void test_refusals(void)
{
	const int C = GW_KIND_CHAT;
	refused(C, CHAT(",\"model\":\"other\""), 404, "model",
		"model_not_found");
	refused(C, CHAT(",\"model\":3"), 400, "model", NULL);
	refused(C, CHAT(",\"n\":2"), 400, "n", NULL);
	refused(C, CHAT(",\"n\":\"1\""), 400, "n", NULL);
	refused(C, CHAT(",\"stream\":1"), 400, "stream", NULL);
	refused(C, CHAT(",\"stream_options\":[]"), 400, "stream_options", NULL);
	refused(C, CHAT(",\"stream_options\":{\"include_usage\":1}"), 400,
		"stream_options.include_usage", NULL);
	refused(C, CHAT(",\"temperature\":2.5"), 400, "temperature", NULL);
	refused(C, CHAT(",\"temperature\":\"hot\""), 400, "temperature", NULL);
	refused(C, CHAT(",\"top_p\":0"), 400, "top_p", NULL);
	refused(C, CHAT(",\"top_p\":1.5"), 400, "top_p", NULL);
	refused(C, CHAT(",\"min_p\":-0.1"), 400, "min_p", NULL);
	refused(C, CHAT(",\"top_k\":-2"), 400, "top_k", NULL);
	refused(C, CHAT(",\"top_k\":1.5"), 400, "top_k", NULL);
	refused(C, CHAT(",\"seed\":\"s\""), 400, "seed", NULL);
	refused(C, CHAT(",\"ignore_eos\":\"yes\""), 400, "ignore_eos", NULL);
	refused(C, CHAT(",\"stop\":3"), 400, "stop", NULL);
	refused(C, CHAT(",\"stop\":[\"a\",1]"), 400, "stop", NULL);
	refused(C, CHAT(",\"stop\":[\"a\",\"b\",\"c\",\"d\",\"e\"]"), 400,
		"stop", NULL);
	refused(C, CHAT(",\"logit_bias\":{\"1\":5}"), 400, "logit_bias",
		"unsupported_parameter");
	refused(C, CHAT(",\"frequency_penalty\":0.5"), 400, "frequency_penalty",
		"unsupported_parameter");
	refused(C, CHAT(",\"presence_penalty\":3"), 400, "presence_penalty",
		NULL);
	refused(C, CHAT(",\"response_format\":{\"type\":\"json_object\"}"), 400,
		"response_format", "unsupported_parameter");
	refused(C, CHAT(",\"response_format\":\"text\""), 400,
		"response_format", NULL);
	refused(C, CHAT(",\"max_tokens\":0"), 400, "max_tokens", NULL);
	refused(C, CHAT(",\"max_completion_tokens\":-1"), 400,
		"max_completion_tokens", NULL);
	refused(C, CHAT(",\"tool_choice\":\"required\""), 400, "tool_choice",
		"unsupported_parameter");
	refused(C,
		CHAT(",\"tool_choice\":{\"type\":\"function\",\"function\":{"
		     "\"name\":\"f\"}}"),
		400, "tool_choice", "unsupported_parameter");
	refused(C, "{}", 400, "messages", NULL);
	refused(C, "{\"messages\":{}}", 400, "messages", NULL);
	refused(C, "{\"messages\":[]}", 400, "messages", NULL);
	refused(C, "{\"messages\":[{\"role\":\"user\",\"content\":3}]}", 400,
		"messages", NULL);
	/* qwen3.5's template renders images; this engine reads no images */
	gw_tmpl_family fam = env.family;
	env.family = GW_TMPL_QWEN3_5;
	refused(C,
		"{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":"
		"\"image_url\",\"image_url\":{\"url\":\"http://x/a.png\"}}]}]}",
		400, "messages", "unsupported_parameter");
	env.family = fam;
	char big[PROTO_MAX_STR + 2];
	memset(big, 'k', sizeof big - 1);
	big[sizeof big - 1] = 0;
	char body[PROTO_MAX_STR + 128];
	snprintf(body, sizeof body, CHAT(",\"conversation_id\":\"%s\""), big);
	refused(C, body, 400, "conversation_id", NULL);

	const int P = GW_KIND_COMPLETION;
	refused(P, "{}", 400, "prompt", NULL);
	refused(P, "{\"prompt\":\"\"}", 400, "prompt", NULL);
	refused(P, "{\"prompt\":[]}", 400, "prompt", NULL);
	refused(P, "{\"prompt\":[\"a\",\"b\"]}", 400, "prompt", NULL);
	refused(P, "{\"prompt\":[1,\"b\"]}", 400, "prompt", NULL);
	refused(P, "{\"prompt\":[1,-1]}", 400, "prompt", NULL);
	refused(P, "{\"prompt\":[1,151669]}", 400, "prompt", NULL);
	refused(P, "{\"prompt\":3}", 400, "prompt", NULL);
	refused(P, "{\"prompt\":\"a\",\"echo\":true}", 400, "echo",
		"unsupported_parameter");
	refused(P, "{\"prompt\":\"a\",\"suffix\":\"b\"}", 400, "suffix",
		"unsupported_parameter");
	refused(P, "{\"prompt\":\"a\",\"best_of\":2}", 400, "best_of",
		"unsupported_parameter");
}

/* A refusal of a logprobs field: 400 invalid_request_error naming param,
 * with code (NULL: none) and a message that names the field and says
 * what is wrong (has). */
static void refused_lp(int kind, const char *body, const char *param,
		       const char *code, const char *has)
{
	gw_params p;
	gw_fail f;
	int rv = readf(kind, NULL, &p, &f, NULL, "%s", body);
	CHECK(rv == -1 && f.status == 400 &&
		  !strcmp(f.type, "invalid_request_error") &&
		  !strcmp(f.param, param) &&
		  !strcmp(f.code, code ? code : "") && strstr(f.msg, param) &&
		  strstr(f.msg, has),
	      "%s: rv %d status %d type '%s' param '%s' code '%s' (%s)", body,
	      rv, f.status, f.type, f.param, f.code, f.msg);
	gw_params_fini(&p);
}

/* What a body may ask of logprobs (params.h): a chat's logprobs boolean
 * and top_logprobs in [0, 20] that needs logprobs true; a completion's
 * logprobs in [0, 20]; null is absent; and what is refused. */
static void test_logprobs(void)
{
	static const struct {
		int kind;
		const char *body;
		int logprobs;
		uint32_t top;
	} ok[] = {
	    {GW_KIND_CHAT, CHAT(""), 0, 0},
	    {GW_KIND_CHAT, CHAT(",\"logprobs\":null"), 0, 0},
	    {GW_KIND_CHAT, CHAT(",\"logprobs\":false"), 0, 0},
	    {GW_KIND_CHAT, CHAT(",\"logprobs\":false,\"top_logprobs\":null"), 0,
	     0},
	    {GW_KIND_CHAT, CHAT(",\"logprobs\":true"), 1, 0},
	    {GW_KIND_CHAT, CHAT(",\"logprobs\":true,\"top_logprobs\":null"), 1,
	     0},
	    {GW_KIND_CHAT, CHAT(",\"logprobs\":true,\"top_logprobs\":0"), 1, 0},
	    {GW_KIND_CHAT, CHAT(",\"logprobs\":true,\"top_logprobs\":5"), 1, 5},
	    {GW_KIND_CHAT, CHAT(",\"top_logprobs\":20,\"logprobs\":true"), 1,
	     20},
	    {GW_KIND_CHAT, CHAT(",\"logprobs\":true,\"top_logprobs\":3.0"), 1,
	     3},
	    {GW_KIND_PEEK, CHAT(",\"logprobs\":true,\"top_logprobs\":2"), 1, 2},
	    {GW_KIND_COMPLETION, "{\"prompt\":\"a\"}", 0, 0},
	    {GW_KIND_COMPLETION, "{\"prompt\":\"a\",\"logprobs\":null}", 0, 0},
	    {GW_KIND_COMPLETION, "{\"prompt\":\"a\",\"logprobs\":0}", 1, 0},
	    {GW_KIND_COMPLETION, "{\"prompt\":\"a\",\"logprobs\":3}", 1, 3},
	    {GW_KIND_COMPLETION, "{\"prompt\":\"a\",\"logprobs\":20}", 1, 20},
	    {GW_KIND_COMPLETION, "{\"prompt\":\"a\",\"logprobs\":2.0}", 1, 2},
	};
	for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
		gw_params p;
		gw_fail f;
		int rv =
		    readf(ok[i].kind, NULL, &p, &f, NULL, "%s", ok[i].body);
		CHECK(rv == 0 && p.logprobs == ok[i].logprobs &&
			  p.top_logprobs == ok[i].top,
		      "%s: rv %d logprobs %d top %u, want %d %u (%s)",
		      ok[i].body, rv, p.logprobs, p.top_logprobs,
		      ok[i].logprobs, ok[i].top, rv ? f.msg : "");
		gw_params_fini(&p);
	}

	const int C = GW_KIND_CHAT, P = GW_KIND_COMPLETION;
	/* a chat's logprobs is a boolean */
	refused_lp(C, CHAT(",\"logprobs\":1"), "logprobs", NULL, "boolean");
	refused_lp(C, CHAT(",\"logprobs\":\"true\""), "logprobs", NULL,
		   "boolean");
	refused_lp(C, CHAT(",\"logprobs\":[]"), "logprobs", NULL, "boolean");
	/* top_logprobs needs logprobs true, 0 too (vLLM's rule) */
	refused_lp(C, CHAT(",\"top_logprobs\":2"), "top_logprobs", NULL,
		   "'logprobs' to be true");
	refused_lp(C, CHAT(",\"top_logprobs\":0"), "top_logprobs", NULL,
		   "'logprobs' to be true");
	refused_lp(C, CHAT(",\"logprobs\":false,\"top_logprobs\":2"),
		   "top_logprobs", NULL, "'logprobs' to be true");
	refused_lp(C, CHAT(",\"logprobs\":null,\"top_logprobs\":2"),
		   "top_logprobs", NULL, "'logprobs' to be true");
	/* its range and type */
	refused_lp(C, CHAT(",\"logprobs\":true,\"top_logprobs\":21"),
		   "top_logprobs", NULL, "[0, 20]");
	refused_lp(C, CHAT(",\"logprobs\":true,\"top_logprobs\":-1"),
		   "top_logprobs", NULL, "[0, 20]");
	refused_lp(C, CHAT(",\"logprobs\":true,\"top_logprobs\":2.5"),
		   "top_logprobs", NULL, "integer");
	refused_lp(C, CHAT(",\"logprobs\":true,\"top_logprobs\":\"5\""),
		   "top_logprobs", NULL, "integer");
	refused_lp(C, CHAT(",\"logprobs\":true,\"top_logprobs\":true"),
		   "top_logprobs", NULL, "integer");
	/* a completion's logprobs is an integer in [0, 20] */
	refused_lp(P, "{\"prompt\":\"a\",\"logprobs\":21}", "logprobs", NULL,
		   "[0, 20]");
	refused_lp(P, "{\"prompt\":\"a\",\"logprobs\":-1}", "logprobs", NULL,
		   "[0, 20]");
	refused_lp(P, "{\"prompt\":\"a\",\"logprobs\":true}", "logprobs", NULL,
		   "integer");
	refused_lp(P, "{\"prompt\":\"a\",\"logprobs\":\"2\"}", "logprobs", NULL,
		   "integer");
	refused_lp(P, "{\"prompt\":\"a\",\"logprobs\":1.5}", "logprobs", NULL,
		   "integer");
	/* top_logprobs is a chat field: a completion names N with logprobs */
	refused_lp(P, "{\"prompt\":\"a\",\"logprobs\":2,\"top_logprobs\":2}",
		   "top_logprobs", "unsupported_parameter", "'logprobs': N");
}

/* One body read under --max-logprobs max: accepted with top alternatives
 * (want_top >= 0) or refused naming param (want_top < 0). */
static void under_max(uint32_t max, int kind, const char *body, int want_top,
		      const char *param)
{
	uint32_t keep = env.max_logprobs;
	env.max_logprobs = max;
	if (want_top >= 0) {
		gw_params p;
		gw_fail f;
		int rv = readf(kind, NULL, &p, &f, NULL, "%s", body);
		CHECK(rv == 0 && p.logprobs &&
			  p.top_logprobs == (uint32_t)want_top,
		      "--max-logprobs %u, %s: rv %d logprobs %d top %u (%s)",
		      max, body, rv, p.logprobs, p.top_logprobs,
		      rv ? f.msg : "");
		gw_params_fini(&p);
	} else {
		refused_lp(kind, body, param, NULL, "--max-logprobs");
	}
	env.max_logprobs = keep;
}

/* --max-logprobs (env.max_logprobs): more alternatives than it are 400
 * naming the field that asked; 0 refuses logprobs at all, naming
 * logprobs (a completion's logprobs 0 too: it asks for the sampled
 * token's); what asks for none is read as before. */
static void test_max_logprobs(void)
{
	const int C = GW_KIND_CHAT, P = GW_KIND_COMPLETION, K = GW_KIND_PEEK;
	under_max(5, C, CHAT(",\"logprobs\":true,\"top_logprobs\":5"), 5, NULL);
	under_max(5, C, CHAT(",\"logprobs\":true,\"top_logprobs\":6"), -1,
		  "top_logprobs");
	under_max(5, C, CHAT(",\"logprobs\":true"), 0, NULL);
	under_max(5, K, CHAT(",\"logprobs\":true,\"top_logprobs\":6"), -1,
		  "top_logprobs");
	under_max(5, P, "{\"prompt\":\"a\",\"logprobs\":5}", 5, NULL);
	under_max(5, P, "{\"prompt\":\"a\",\"logprobs\":6}", -1, "logprobs");
	under_max(0, C, CHAT(",\"logprobs\":true"), -1, "logprobs");
	under_max(0, C, CHAT(",\"logprobs\":true,\"top_logprobs\":0"), -1,
		  "logprobs");
	under_max(0, P, "{\"prompt\":\"a\",\"logprobs\":0}", -1, "logprobs");
	/* past the protocol's 20 the range's own message, as before */
	uint32_t keep = env.max_logprobs;
	env.max_logprobs = 5;
	refused_lp(C, CHAT(",\"logprobs\":true,\"top_logprobs\":21"),
		   "top_logprobs", NULL, "[0, 20]");
	/* top_logprobs without logprobs: that refusal first */
	refused_lp(C, CHAT(",\"top_logprobs\":6"), "top_logprobs", NULL,
		   "'logprobs' to be true");
	env.max_logprobs = 0;
	static const char *const none[] = {
	    CHAT(""), CHAT(",\"logprobs\":false"), CHAT(",\"logprobs\":null")};
	for (size_t i = 0; i < 3; i++) {
		gw_params p;
		gw_fail f;
		int rv = readf(C, NULL, &p, &f, NULL, "%s", none[i]);
		CHECK(rv == 0 && !p.logprobs,
		      "--max-logprobs 0, %s: rv %d logprobs %d (%s)", none[i],
		      rv, p.logprobs, rv ? f.msg : "");
		gw_params_fini(&p);
	}
	gw_params p;
	gw_fail f;
	int rv = readf(P, NULL, &p, &f, NULL, "%s",
		       "{\"prompt\":\"a\",\"logprobs\":null}");
	CHECK(rv == 0 && !p.logprobs, "--max-logprobs 0, logprobs null: %d",
	      rv);
	gw_params_fini(&p);
	env.max_logprobs = keep;
}

static void test_sessions(void)
{
	static const struct {
		const char *extra, *hdr, *want;
	} cs[] = {
	    {"", NULL, ""},
	    {"", "h-1", "h-1"},
	    {",\"conversation_id\":\"c-1\"", "h-1", "c-1"},
	    {",\"conversation\":\"c-2\"", "h-1", "c-2"},
	    {",\"conversation\":{\"id\":\"c-3\"}", NULL, "c-3"},
	    {",\"metadata\":{\"conversation_id\":\"c-4\"}", "h-1", "c-4"},
	    {",\"conversation_id\":\"\"", "h-1", "h-1"},
	};
	for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) {
		gw_params p;
		gw_fail f;
		int rv = readf(GW_KIND_CHAT, cs[i].hdr, &p, &f, NULL,
			       "{\"messages\":[{\"role\":\"user\",\"content\":"
			       "\"hi\"}]%s}",
			       cs[i].extra);
		CHECK(rv == 0 && !strcmp(p.session, cs[i].want),
		      "session of '%s' + header %s: '%s'", cs[i].extra,
		      cs[i].hdr ? cs[i].hdr : "(none)", rv ? f.msg : p.session);
		gw_params_fini(&p);
	}
}

/* The ids of messages rendered with env.family, tokenized: what the read
 * must give. */
static int32_t *render_ids(const char *body, size_t *n)
{
	json_error_t je;
	json_t *b = json_loads(body, 0, &je);
	REQUIRE(b, "%s", je.text);
	gw_tmpl_ctx ctx;
	char err[MOOR_ERRLEN];
	REQUIRE(gw_tmpl_ctx_from_body(b, &ctx, err) == 0, "%s", err);
	gw_prompt pr;
	REQUIRE(gw_tmpl_render(env.family, &ctx, &pr, err) == 0, "%s", err);
	int32_t *ids;
	REQUIRE(gw_tok_encode(tok, pr.text, pr.len, &ids, n) == 0, "encode");
	gw_prompt_fini(&pr);
	json_decref(b);
	return ids;
}

static void test_chat_prompt(void)
{
	static const char tools[] =
	    "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":"
	    "\"get_weather\",\"description\":\"the weather\",\"parameters\":{"
	    "\"type\":\"object\",\"properties\":{\"city\":{\"type\":"
	    "\"string\"}}}}}]";
	char with[1024], none[1024];
	snprintf(with, sizeof with,
		 "{\"messages\":[{\"role\":\"system\",\"content\":\"Be "
		 "brief.\"},{\"role\":\"user\",\"content\":\"Weather in "
		 "Oslo?\"}],%s}",
		 tools);
	snprintf(none, sizeof none,
		 "{\"messages\":[{\"role\":\"system\",\"content\":\"Be "
		 "brief.\"},{\"role\":\"user\",\"content\":\"Weather in "
		 "Oslo?\"}],%s,\"tool_choice\":\"none\"}",
		 tools);
	size_t nw, nn;
	int32_t *want_with = render_ids(with, &nw);
	/* tool_choice none renders as if the body had no tools */
	char plain[1024];
	snprintf(plain, sizeof plain,
		 "{\"messages\":[{\"role\":\"system\",\"content\":\"Be "
		 "brief.\"},{\"role\":\"user\",\"content\":\"Weather in "
		 "Oslo?\"}]}");
	int32_t *want_none = render_ids(plain, &nn);
	CHECK(nw > nn + 20, "the tools are in the prompt (%zu vs %zu ids)", nw,
	      nn);

	gw_params p;
	gw_fail f;
	json_t *b;
	REQUIRE(readf(GW_KIND_CHAT, NULL, &p, &f, &b, "%s", with) == 0, "%s",
		f.msg);
	CHECK(p.n_ids == nw && !memcmp(p.ids, want_with, nw * sizeof *p.ids),
	      "a chat's ids are the rendering tokenized (%zu vs %zu)", p.n_ids,
	      nw);
	CHECK(p.tools && json_is_array(p.tools) &&
		  json_array_size(p.tools) == 1,
	      "the tools are kept for the reply's parser");
	gw_params_fini(&p);
	json_decref(b);

	REQUIRE(readf(GW_KIND_CHAT, NULL, &p, &f, &b, "%s", none) == 0, "%s",
		f.msg);
	CHECK(p.n_ids == nn && !memcmp(p.ids, want_none, nn * sizeof *p.ids),
	      "tool_choice none: rendered without the tools");
	CHECK(p.tools == NULL, "tool_choice none: no tools for the parser");
	gw_params_fini(&p);
	json_decref(b);

	/* a peek is a chat body read alike */
	REQUIRE(readf(GW_KIND_PEEK, NULL, &p, &f, NULL, "%s", with) == 0, "%s",
		f.msg);
	CHECK(p.n_ids == nw && !memcmp(p.ids, want_with, nw * sizeof *p.ids),
	      "a peek's ids");
	gw_params_fini(&p);
	free(want_with);
	free(want_none);

	/* the default max_tokens is capped by the window's room */
	gw_params_env keep = env;
	env.window = (uint32_t)nn + 10;
	REQUIRE(readf(GW_KIND_CHAT, NULL, &p, &f, NULL, "%s", plain) == 0, "%s",
		f.msg);
	CHECK(p.max_tokens == 10, "the window leaves 10: %u", p.max_tokens);
	gw_params_fini(&p);
	env.window = (uint32_t)nn - 1;
	REQUIRE(readf(GW_KIND_CHAT, NULL, &p, &f, NULL, "%s", plain) == 0, "%s",
		f.msg);
	CHECK(p.max_tokens == 1, "a prompt past the window: 1 (engined "
				 "refuses it)");
	gw_params_fini(&p);
	env = keep;
}

static void test_completion_prompt(void)
{
	gw_params p;
	gw_fail f;
	int32_t *ids;
	size_t n;
	REQUIRE(gw_tok_encode(tok, "Hello, world", 12, &ids, &n) == 0, "enc");
	REQUIRE(readf(GW_KIND_COMPLETION, NULL, &p, &f, NULL,
		      "{\"prompt\":\"Hello, world\"}") == 0,
		"%s", f.msg);
	CHECK(p.n_ids == n && !memcmp(p.ids, ids, n * sizeof *ids),
	      "a string prompt is tokenized as is (no template)");
	CHECK(p.family == GW_TMPL_UNKNOWN && p.max_tokens == 16 &&
		  !p.max_tokens_set,
	      "raw, and OpenAI's default of 16 tokens");
	gw_params_fini(&p);
	free(ids);

	REQUIRE(readf(GW_KIND_COMPLETION, NULL, &p, &f, NULL,
		      "{\"prompt\":[[9707,11,1879]],\"max_tokens\":3}") == 0,
		"%s", f.msg);
	CHECK(p.n_ids == 3 && p.ids[0] == 9707 && p.ids[1] == 11 &&
		  p.ids[2] == 1879 && p.max_tokens == 3,
	      "ids, in a batch of one");
	gw_params_fini(&p);
	/* max_completion_tokens is a chat field: a completion ignores it */
	REQUIRE(readf(GW_KIND_COMPLETION, NULL, &p, &f, NULL,
		      "{\"prompt\":[1],\"max_completion_tokens\":3}") == 0,
		"%s", f.msg);
	CHECK(p.max_tokens == 16, "completion: max_completion_tokens unread");
	gw_params_fini(&p);
}

/* usage.moor.parts: the system message and the tools of the header are
 * counted apart; the counts are the tokens of those renderings, so the
 * system alone is what a body with no tools counts, and the tools add
 * what their block adds; the reasoning budget's fields. */
static void test_parts_and_budget(void)
{
	gw_params p, q, u;
	gw_fail f;
	json_t *k1, *k2, *k3;
	const char *tools =
	    "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":"
	    "\"bash\",\"description\":\"run a command\",\"parameters\":"
	    "{\"type\":\"object\",\"properties\":{\"cmd\":{\"type\":"
	    "\"string\"}}}}}]";
	REQUIRE(readf(GW_KIND_CHAT, NULL, &p, &f, &k1,
		      "{\"messages\":[{\"role\":\"system\",\"content\":"
		      "\"You are a careful assistant.\"},{\"role\":\"user\","
		      "\"content\":\"hi\"}],%s}",
		      tools) == 0,
		"with tools: %s", f.msg);
	REQUIRE(readf(GW_KIND_CHAT, NULL, &q, &f, &k2,
		      "{\"messages\":[{\"role\":\"system\",\"content\":"
		      "\"You are a careful assistant.\"},{\"role\":\"user\","
		      "\"content\":\"hi\"}]}") == 0,
		"without: %s", f.msg);
	REQUIRE(readf(GW_KIND_CHAT, NULL, &u, &f, &k3, CHAT("")) == 0,
		"no system: %s", f.msg);
	printf("parts: system %zu tools %zu of %zu; without tools %zu of "
	       "%zu\n",
	       p.n_system, p.n_tools, p.n_ids, q.n_system, q.n_ids);
	CHECK(p.n_system > 0 && p.n_system == q.n_system,
	      "system %zu with tools, %zu without", p.n_system, q.n_system);
	CHECK(p.n_tools > 0 && q.n_tools == 0, "tools %zu / %zu", p.n_tools,
	      q.n_tools);
	CHECK(p.n_system + p.n_tools < p.n_ids &&
		  p.n_ids - p.n_system - p.n_tools == q.n_ids - q.n_system,
	      "the history differs: %zu vs %zu",
	      p.n_ids - p.n_system - p.n_tools, q.n_ids - q.n_system);
	/* the system header's ids are the prompt's first ids */
	CHECK(!memcmp(p.ids, q.ids, q.n_system * sizeof *p.ids) ||
		  p.n_tools > 0,
	      "the header is not a prefix");
	CHECK(u.n_system == 0 && u.n_tools == 0, "no system message: %zu %zu",
	      u.n_system, u.n_tools);
	gw_params_fini(&p);
	gw_params_fini(&q);
	gw_params_fini(&u);
	json_decref(k1);
	json_decref(k2);
	json_decref(k3);
	/* the budget: only where the prompt ends inside <think> (qwen3's
	 * generation prompt does not) */
	REQUIRE(readf(GW_KIND_CHAT, NULL, &p, &f, NULL,
		      CHAT(",\"reasoning_budget\":64")) == 0,
		"budget: %s", f.msg);
	CHECK(p.reasoning_budget == 0 && !p.think_open,
	      "a budget without an open think: %u", p.reasoning_budget);
	gw_params_fini(&p);
	gw_tmpl_family fam = env.family;
	env.family = GW_TMPL_QWEN3_8;
	REQUIRE(readf(GW_KIND_CHAT, NULL, &p, &f, NULL,
		      CHAT(",\"thinking_budget\":64")) == 0,
		"thinking_budget: %s", f.msg);
	CHECK(p.think_open && p.reasoning_budget == 64,
	      "thinking_budget under qwen3.8: %u", p.reasoning_budget);
	gw_params_fini(&p);
	refused(GW_KIND_CHAT, CHAT(",\"reasoning_budget\":-1"), 400,
		"reasoning_budget", NULL);
	env.family = fam;
}

/* The oracle for user_at: the prefix of the rendering up to the last
 * user message tokenized alone (a prefix that ends at <|im_start|>, so its
 * ids are the prompt's first ids, which is checked too). */
static size_t user_at_of(const char *body, const int32_t *ids, size_t n_ids)
{
	json_error_t je;
	json_t *b = json_loads(body, 0, &je);
	REQUIRE(b, "%s", je.text);
	gw_tmpl_ctx ctx;
	char err[MOOR_ERRLEN];
	REQUIRE(gw_tmpl_ctx_from_body(b, &ctx, err) == 0, "%s", err);
	gw_prompt pr;
	REQUIRE(gw_tmpl_render(env.family, &ctx, &pr, err) == 0, "%s", err);
	size_t u = 0;
	for (size_t i = 0; i < pr.n_msgs; i++)
		if (!strcmp(json_string_value(json_object_get(
				json_array_get(ctx.messages, i), "role")),
			    "user"))
			u = i;
	int32_t *pre = NULL;
	size_t n = 0;
	REQUIRE(gw_tok_encode(tok, pr.text, pr.msg_off[u], &pre, &n) == 0,
		"encode");
	CHECK(n <= n_ids && !memcmp(pre, ids, n * sizeof *ids),
	      "the prefix's ids are not the prompt's first ids");
	free(pre);
	gw_prompt_fini(&pr);
	json_decref(b);
	return n;
}

/* user_at: the token where the last user message starts, against the
 * prefix tokenized alone, in both template families; text the normalizer
 * shortens (a decomposed e + U+0301 is NFC's one code point) and a literal
 * "<|im_start|>" in an earlier message do not move it; no user message
 * after the first (a user message first, a completion): 0. */
static void test_user_at(void)
{
	static const char *bodies[] = {
	    "{\"messages\":[{\"role\":\"system\",\"content\":\"You are a "
	    "careful assistant in the folder /src/moor.\"},{\"role\":"
	    "\"user\",\"content\":\"list the files\"}]}",
	    "{\"messages\":[{\"role\":\"system\",\"content\":\"Cafe\\u0301 "
	    "cre\\u0300me bru\\u0302le\\u0301e, e\\u0301 e\\u0301 "
	    "e\\u0301\"},{\"role\":"
	    "\"user\",\"content\":\"one <|im_start|> two\"},{\"role\":"
	    "\"assistant\",\"content\":\"three\"},{\"role\":\"user\","
	    "\"content\":\"four\"}],\"tools\":[{\"type\":\"function\","
	    "\"function\":{\"name\":\"bash\",\"description\":\"run "
	    "it\",\"parameters\":{\"type\":\"object\",\"properties\":{}}}}]}",
	    "{\"messages\":[{\"role\":\"system\",\"content\":\"s\"},{\"role\":"
	    "\"user\",\"content\":\"run it\"},{\"role\":\"assistant\","
	    "\"content\":\"\",\"tool_calls\":[{\"type\":\"function\","
	    "\"function\":{\"name\":\"bash\",\"arguments\":\"{}\"}}]},"
	    "{\"role\":\"tool\",\"content\":\"done\"}]}",
	};
	gw_tmpl_family fam = env.family;
	gw_tmpl_family fams[] = {GW_TMPL_QWEN3, GW_TMPL_QWEN3_5};
	for (int fi = 0; fi < 2; fi++) {
		env.family = fams[fi];
		for (size_t i = 0; i < sizeof bodies / sizeof *bodies; i++) {
			gw_params p;
			gw_fail f;
			REQUIRE(readf(GW_KIND_CHAT, NULL, &p, &f, NULL, "%s",
				      bodies[i]) == 0,
				"body %zu: %s", i, f.msg);
			size_t want = user_at_of(bodies[i], p.ids, p.n_ids);
			printf("user_at (%s, body %zu): %zu of %zu (the "
			       "prefix alone: %zu)\n",
			       gw_tmpl_name(env.family), i, p.user_at, p.n_ids,
			       want);
			CHECK(want > 0 && p.user_at == want,
			      "%s body %zu: user_at %zu, the prefix has %zu",
			      gw_tmpl_name(env.family), i, p.user_at, want);
			gw_params_fini(&p);
		}
	}
	env.family = fam;
	gw_params p;
	gw_fail f;
	REQUIRE(readf(GW_KIND_CHAT, NULL, &p, &f, NULL, CHAT("")) == 0, "%s",
		f.msg);
	CHECK(p.user_at == 0, "a user message first: %zu", p.user_at);
	gw_params_fini(&p);
	REQUIRE(readf(GW_KIND_COMPLETION, NULL, &p, &f, NULL,
		      "{\"prompt\":\"<|im_start|>user\\nhi<|im_end|>\"}") == 0,
		"%s", f.msg);
	CHECK(p.user_at == 0, "a completion: %zu", p.user_at);
	gw_params_fini(&p);
}

int main(void)
{
	char path[4096], err[MOOR_ERRLEN];
	snprintf(path, sizeof path, "%s/models/tiny/tokenizer.json", t_src());
	REQUIRE(gw_tok_load(path, &tok, err) == 0,
		"%s (deploy/setup writes models/tiny)", err);
	env = (gw_params_env){
	    .served = "tiny",
	    .defs = {.temperature = 0.7,
		     .top_p = 0.8,
		     .min_p = 0.05,
		     .top_k = 20},
	    .tok = tok,
	    .family = GW_TMPL_QWEN3,
	    .window = 4096,
	    .default_max_tokens = 1024,
	    .max_logprobs = PROTO_MAX_TOP,
	};
	test_parse();
	test_defaults_and_overrides();
	test_refusals();
	test_logprobs();
	test_max_logprobs();
	test_sessions();
	test_chat_prompt();
	test_user_at();
	test_completion_prompt();
	test_parts_and_budget();
	gw_tok_free(tok);
	return t_done("test_gw_params_read");
}
