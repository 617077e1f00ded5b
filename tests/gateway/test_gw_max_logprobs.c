/* test_gw_max_logprobs: gatewayd's --max-logprobs N (vLLM's flag: the most
 * alternatives a token's logprobs may list) and the RSS bound's logprobs
 * term. cached + engined on models/tiny + three gatewayds.
 *
 *   - --max-logprobs 0: a chat asking for logprobs (whole or streamed, with
 *     top_logprobs 0 too) and a completion asking for logprobs 0 get 400
 *     invalid_request_error naming logprobs and the flag; a plain chat and
 *     a plain completion are served (200, logprobs null);
 *   - --max-logprobs 5: top_logprobs 6 is 400 naming top_logprobs, 5 is
 *     served with 5 alternatives an entry; a completion's logprobs 6 is
 *     400 naming logprobs, 5 is served;
 *   - the stated bound ("RSS bound N MiB" in the log) grows with N: the
 *     one of 0 < the one of 5 < the default's (20), and the default's
 *     logprobs term, stated on the same line, is --inflight x --window x
 *     the bytes a token costs, which a real reply of 20 alternatives a
 *     token stays under;
 *   - --max-logprobs 21 is refused at start (exit 2).
 *
 *   test_gw_max_logprobs CACHED ENGINED GATEWAYD MODEL_DIR
 */
#include <signal.h>
#include <sys/wait.h>

#include "t.h"

#include "gwtest.h"
#include "harness.h"

static const char *const C = "/v1/chat/completions", *const T =
							 "/v1/completions";

/* A 400 invalid_request_error naming param, its message the flag's. */
static void refused(int port, const char *path, const char *body,
		    const char *param)
{
	gt_resp r = gt_post(port, path, body);
	json_t *o = gt_json(&r);
	const char *msg = gt_str(o, "error.message");
	CHECK(r.status == 400 && gt_str(o, "error.type") &&
		  !strcmp(gt_str(o, "error.type"), "invalid_request_error") &&
		  gt_str(o, "error.param") &&
		  !strcmp(gt_str(o, "error.param"), param) && msg &&
		  strstr(msg, "--max-logprobs"),
	      "%s %s: %d %s (want 400 naming %s)", path, body, r.status, r.body,
	      param);
	printf("refused: %s\n", msg ? msg : r.body);
	json_decref(o);
	gt_resp_fini(&r);
}

static json_t *served(int port, const char *path, const char *body)
{
	gt_resp r = gt_post(port, path, body);
	CHECK(r.status == 200, "%s %s: %d %s", path, body, r.status, r.body);
	json_t *o = gt_json(&r);
	gt_resp_fini(&r);
	return o ? o : json_object();
}

int main(int argc, char **argv)
{
	static const char *const off[] = {"--max-logprobs", "0", NULL};
	gt_stack(argc, argv, "gwmaxlp", 240, off, NULL, NULL);
	int port = gt_.port;
	long b0 = gt_stated_bound_mib("gatewayd1");

	/* ---- --max-logprobs 0 ---- */
	char *b = gt_chat_body("Hi.", 4, "\"logprobs\":true");
	refused(port, C, b, "logprobs");
	free(b);
	b = gt_chat_body("Hi.", 4, "\"logprobs\":true,\"top_logprobs\":0");
	refused(port, C, b, "logprobs");
	free(b);
	b = gt_chat_body("Hi.", 4, "\"logprobs\":true,\"stream\":true");
	refused(port, C, b, "logprobs");
	free(b);
	refused(port, T, "{\"prompt\":\"Hi\",\"max_tokens\":4,\"logprobs\":0}",
		"logprobs");
	b = gt_chat_body("Hi.", 4, "\"logprobs\":false");
	json_t *o = served(port, C, b);
	CHECK(
	    json_is_null(json_object_get(
		json_array_get(json_object_get(o, "choices"), 0), "logprobs")),
	    "a plain chat: logprobs not null");
	json_decref(o);
	free(b);
	o = served(port, T, "{\"prompt\":\"Hi\",\"max_tokens\":4}");
	CHECK(gt_str(o, "choices.0.text"), "a plain completion: no text");
	json_decref(o);

	/* ---- --max-logprobs 5 ---- */
	static const char *const five[] = {"--max-logprobs", "5", NULL};
	int port5;
	gt_gatewayd(&port5, five);
	REQUIRE(gt_wait_health(port5, 200, 20) == 200, "gatewayd2 not green");
	long b5 = gt_stated_bound_mib("gatewayd2");
	b = gt_chat_body("Hi.", 4, "\"logprobs\":true,\"top_logprobs\":6");
	refused(port5, C, b, "top_logprobs");
	free(b);
	refused(port5, T, "{\"prompt\":\"Hi\",\"max_tokens\":4,\"logprobs\":6}",
		"logprobs");
	b = gt_chat_body("Hi.", 4,
			 "\"logprobs\":true,\"top_logprobs\":5,"
			 "\"ignore_eos\":true");
	o = served(port5, C, b);
	const json_t *content = json_object_get(
	    json_object_get(json_array_get(json_object_get(o, "choices"), 0),
			    "logprobs"),
	    "content");
	CHECK(json_array_size(content) == 4, "top_logprobs 5: %zu entries",
	      json_array_size(content));
	for (size_t i = 0; i < json_array_size(content); i++)
		CHECK(json_array_size(json_object_get(
			  json_array_get(content, i), "top_logprobs")) == 5,
		      "entry %zu: not 5 alternatives", i);
	json_decref(o);
	free(b);
	o = served(port5, T,
		   "{\"prompt\":\"Hi\",\"max_tokens\":4,\"ignore_eos\":true,"
		   "\"logprobs\":5}");
	CHECK(json_array_size(json_object_get(
		  json_object_get(
		      json_array_get(json_object_get(o, "choices"), 0),
		      "logprobs"),
		  "top_logprobs")) == 4,
	      "a completion's logprobs 5: not 4 dicts");
	json_decref(o);

	/* ---- the default, 20: the bound's term ---- */
	int port20;
	gt_gatewayd(&port20, NULL);
	REQUIRE(gt_wait_health(port20, 200, 20) == 200, "gatewayd3 not green");
	long b20 = gt_stated_bound_mib("gatewayd3");
	long long tb0 = gt_stated_lp_token_bytes("gatewayd1"),
		  tb5 = gt_stated_lp_token_bytes("gatewayd2"),
		  tb20 = gt_stated_lp_token_bytes("gatewayd3");
	printf("stated RSS bounds: %ld MiB (--max-logprobs 0, %lld bytes a "
	       "token), %ld (5, %lld), %ld (20, %lld)\n",
	       b0, tb0, b5, tb5, b20, tb20);
	REQUIRE(b0 > 0 && b5 > 0 && b20 > 0, "a bound is not stated");
	CHECK(b0 < b5 && b5 < b20,
	      "bounds %ld, %ld, %ld do not grow with "
	      "--max-logprobs",
	      b0, b5, b20);
	CHECK(tb0 == 0 && tb5 > 0 && tb20 > tb5, "bytes a token %lld %lld %lld",
	      tb0, tb5, tb20);
	/* the test stack's --inflight 4 (the default) and --window 4096: the
	 * term in MiB, as the bound rounds it down, give or take one */
	long long term = 4LL * 4096 * tb20;
	long d = b20 - b0;
	CHECK(d >= (term >> 20) - 1 && d <= (term >> 20) + 1,
	      "the bound grew %ld MiB, the term is %lld MiB", d, term >> 20);
	/* a real reply's logprobs: under the stated bytes a token */
	b = gt_chat_body("Tell me a story.", 64,
			 "\"logprobs\":true,\"top_logprobs\":20,"
			 "\"ignore_eos\":true");
	gt_resp r = gt_post(port20, C, b);
	CHECK(r.status == 200, "top_logprobs 20: %d", r.status);
	json_t *w = gt_json(&r);
	long long ct = gt_int(w, "usage.completion_tokens");
	printf("a reply of %lld tokens with 20 alternatives: %zu bytes, %lld "
	       "a token; stated %lld\n",
	       ct, r.body_len, ct > 0 ? (long long)r.body_len / ct : -1, tb20);
	CHECK(ct == 64 && (long long)r.body_len < 64 * tb20,
	      "%zu bytes for %lld tokens", r.body_len, ct);
	json_decref(w);
	gt_resp_fini(&r);
	free(b);

	/* ---- past 20: refused at start ---- */
	char *bad[] = {(char *)gt_.gatewayd, "--model", (char *)gt_.model,
		       "--max-logprobs",     "21",	NULL};
	pid_t pid = h_spawn("gatewayd_bad", bad);
	int st = h_wait_exit(pid, 10);
	CHECK(st >= 0 && WIFEXITED(st) && WEXITSTATUS(st) == 2,
	      "--max-logprobs 21: status %d", st);
	CHECK(h_log_has("gatewayd_bad", "--max-logprobs 21"),
	      "--max-logprobs 21: no message");
	return h_done("test_gw_max_logprobs");
}
