/* test_gw_errors: what the gateway refuses, each with its HTTP status and
 * the OpenAI error shape {"error": {message, type, param, code}} naming the
 * field: invalid JSON, a body that is not an object, wrong types (messages
 * not an array, max_tokens a string, temperature negative, stop a number),
 * an unknown model (404 model_not_found), n > 1, malformed logprobs (a
 * chat's logprobs not a boolean, top_logprobs without logprobs or past
 * 20, a completion's logprobs past 20 or not an integer), features we do
 * not do (tool_choice "required", response_format json_schema, echo, a
 * batch of prompts), a malformed message (no role), a prompt longer than
 * engined's window (engined's refusal, 400; cached's for a peek of it),
 * a template error (qwen3.5:
 * "System message must be at the beginning.", the template's own words,
 * from a second gateway with --chat-template qwen3.5), an unknown path
 * (404) and a wrong method (405), a body over 64 MiB (413), a clear of
 * an unknown tier (400) and of one this cached runs without (no
 * --disk-dir: ?tier=disk and ?tier=spill are cached's refusal, 409
 * code tier_not_running naming the tier and why, counted in /metrics,
 * and the RAM caches are as they were; ?tier=all still clears). A model dir
 * whose template is unknown is refused at start with exit 1, and bad flags
 * exit 2 with a usage message. After all of it a good request still works.
 *
 *   test_gw_errors CACHED ENGINED GATEWAYD MODEL_DIR
 */
#include "t.h"

#include "gwtest.h"
#include "harness.h"

static int port;

/* POSTs body to path; wants status, the error shape, param (NULL: null or
 * anything), and a message containing msg_has (NULL: any). */
static void want_error(int p, const char *path, const char *body, int status,
		       const char *param, const char *msg_has)
{
	gt_resp r = gt_post(p, path, body);
	CHECK(r.status == status, "%s %.80s: status %d, want %d: %s", path,
	      body, r.status, status, r.body);
	json_t *o = gt_json(&r);
	json_t *e = json_object_get(o, "error");
	CHECK(json_is_object(e) &&
		  json_is_string(json_object_get(e, "message")) &&
		  json_is_string(json_object_get(e, "type")) &&
		  json_object_get(e, "param") && json_object_get(e, "code"),
	      "not the OpenAI error shape: %s", r.body);
	if (param)
		CHECK(gt_str(e, "param") && !strcmp(gt_str(e, "param"), param),
		      "%.80s: param %s, want %s", body, gt_str(e, "param"),
		      param);
	if (msg_has)
		CHECK(gt_str(e, "message") &&
			  strstr(gt_str(e, "message"), msg_has),
		      "%.80s: message '%s' lacks '%s'", body,
		      gt_str(e, "message"), msg_has);
	json_decref(o);
	gt_resp_fini(&r);
}

int main(int argc, char **argv)
{
	gt_stack(argc, argv, "gwerr", 180, NULL, NULL, NULL);
	port = gt_.port;
	const char *C = "/v1/chat/completions", *T = "/v1/completions";
	const char *U = "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]";
	char b[1024];

	want_error(port, C, "{\"messages\": [", 400, NULL, "not valid JSON");
	want_error(port, C, "[1,2]", 400, NULL, "JSON object");
	want_error(port, C, "{\"messages\":\"hi\"}", 400, "messages",
		   "must be an array");
	want_error(port, C, "{}", 400, "messages", "required");
	snprintf(b, sizeof b, "{%s,\"max_tokens\":\"5\"}", U);
	want_error(port, C, b, 400, "max_tokens", "integer");
	snprintf(b, sizeof b, "{%s,\"max_completion_tokens\":0}", U);
	want_error(port, C, b, 400, "max_completion_tokens", NULL);
	snprintf(b, sizeof b, "{%s,\"temperature\":-0.5}", U);
	want_error(port, C, b, 400, "temperature", NULL);
	snprintf(b, sizeof b, "{%s,\"top_p\":\"x\"}", U);
	want_error(port, C, b, 400, "top_p", "number");
	snprintf(b, sizeof b, "{%s,\"stop\":5}", U);
	want_error(port, C, b, 400, "stop", NULL);
	snprintf(b, sizeof b, "{%s,\"stop\":[\"a\",\"b\",\"c\",\"d\",\"e\"]}",
		 U);
	want_error(port, C, b, 400, "stop", "at most 4");
	snprintf(b, sizeof b, "{%s,\"stream\":\"yes\"}", U);
	want_error(port, C, b, 400, "stream", "boolean");
	snprintf(b, sizeof b, "{%s,\"model\":\"gpt-4o\"}", U);
	want_error(port, C, b, 404, "model", "gpt-4o");
	{
		gt_resp r = gt_post(port, C, b);
		json_t *o = gt_json(&r);
		CHECK(gt_str(o, "error.code") &&
			  !strcmp(gt_str(o, "error.code"), "model_not_found"),
		      "unknown model code: %s", r.body);
		json_decref(o);
		gt_resp_fini(&r);
	}
	snprintf(b, sizeof b, "{%s,\"n\":2}", U);
	want_error(port, C, b, 400, "n", NULL);
	/* logprobs are served; what is malformed of them is a 400 naming
	 * the field */
	snprintf(b, sizeof b, "{%s,\"logprobs\":1}", U);
	want_error(port, C, b, 400, "logprobs", "boolean");
	snprintf(b, sizeof b, "{%s,\"top_logprobs\":2}", U);
	want_error(port, C, b, 400, "top_logprobs", "'logprobs' to be true");
	snprintf(b, sizeof b, "{%s,\"logprobs\":true,\"top_logprobs\":21}", U);
	want_error(port, C, b, 400, "top_logprobs", "[0, 20]");
	want_error(port, T, "{\"prompt\":\"hi\",\"logprobs\":21}", 400,
		   "logprobs", "[0, 20]");
	want_error(port, T, "{\"prompt\":\"hi\",\"logprobs\":true}", 400,
		   "logprobs", "integer");
	snprintf(b, sizeof b, "{%s,\"tool_choice\":\"required\"}", U);
	want_error(port, C, b, 400, "tool_choice", NULL);
	snprintf(b, sizeof b,
		 "{%s,\"tool_choice\":{\"type\":\"function\",\"function\":"
		 "{\"name\":\"f\"}}}",
		 U);
	want_error(port, C, b, 400, "tool_choice", NULL);
	snprintf(b, sizeof b,
		 "{%s,\"response_format\":{\"type\":\"json_schema\"}}", U);
	want_error(port, C, b, 400, "response_format", NULL);
	want_error(port, C, "{\"messages\":[{\"content\":\"hi\"}]}", 400,
		   "messages", NULL);
	want_error(port, T, "{\"prompt\":\"hi\",\"echo\":true}", 400, "echo",
		   NULL);
	want_error(port, T, "{\"prompt\":[\"a\",\"b\"]}", 400, "prompt",
		   "batches");
	want_error(port, T, "{\"prompt\":[1,-2]}", 400, "prompt", "vocabulary");
	want_error(port, T, "{\"prompt\":[]}", 400, "prompt", NULL);
	want_error(port, T, "{}", 400, "prompt", NULL);

	/* longer than engined's window (4096): engined refuses, 400 */
	{
		size_t n = 6000 * 6 + 128;
		char *big = malloc(n);
		char *w = big + sprintf(big, "{\"prompt\":\"");
		for (int i = 0; i < 6000; i++)
			w += sprintf(w, " hello");
		sprintf(w, "\",\"max_tokens\":2}");
		want_error(port, T, big, 400, NULL, "window");
		/* and a peek of it: cached's refusal, 400 too */
		w = big + sprintf(big, "{\"messages\":[{\"role\":\"user\","
				       "\"content\":\"");
		for (int i = 0; i < 6000; i++)
			w += sprintf(w, " hello");
		sprintf(w, "\"}]}");
		want_error(port, "/v1/cache/peek", big, 400, "messages",
			   "window");
		want_error(port, "/v1/cache/peek", "{\"messages\":5}", 400,
			   "messages", NULL);
		free(big);
	}

	/* a body over 64 MiB */
	{
		size_t n = (64u << 20) + 1024;
		char *big = malloc(n + 1);
		memset(big, ' ', n);
		big[0] = '{';
		big[n - 1] = '}';
		big[n] = 0;
		gt_resp r = gt_post(port, C, big);
		CHECK(r.status == 413, "a 64 MiB body: %d", r.status);
		gt_resp_fini(&r);
		free(big);
	}

	/* routes */
	gt_resp r = gt_get(port, "/v1/nothing");
	CHECK(r.status == 404 && strstr(r.body, "\"error\""), "404: %d %s",
	      r.status, r.body);
	gt_resp_fini(&r);
	r = gt_get(port, C);
	CHECK(r.status == 405 && strstr(r.body, "\"error\""), "405: %d %s",
	      r.status, r.body);
	gt_resp_fini(&r);
	r = gt_request(port, "DELETE", "/v1/models", NULL, NULL, 10);
	CHECK(r.status == 405, "DELETE /v1/models: %d", r.status);
	gt_resp_fini(&r);

	/* a template error: qwen3.5 raises on a system message not first */
	const char *q35[] = {"--chat-template", "qwen3.5", NULL};
	int p2;
	gt_gatewayd(&p2, q35);
	want_error(p2, C,
		   "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"},"
		   "{\"role\":\"system\",\"content\":\"late\"}]}",
		   400, "messages", "System message must be at the beginning.");

	/* refused at start: a checkpoint without a known template; bad flags */
	char golden[512];
	snprintf(golden, sizeof golden, "%s/tests/golden/bf16_tied", t_src());
	char *a1[] = {
	    (char *)gt_.gatewayd, "--model",  golden,	     "--run-dir",
	    (char *)gt_.run,	  "--listen", "127.0.0.1:1", NULL};
	pid_t pid = h_spawn("gw_notemplate", a1);
	int st = h_wait_exit(pid, 10);
	CHECK(st >= 0 && WIFEXITED(st) && WEXITSTATUS(st) == 1,
	      "unknown template: status %d", st);
	CHECK(h_log_has("gw_notemplate", "template"),
	      "no message about the template");
	char *a2[] = {(char *)gt_.gatewayd, "--model", (char *)gt_.model,
		      "--engine-wait-s",    "soon",    NULL};
	pid = h_spawn("gw_badflag", a2);
	st = h_wait_exit(pid, 10);
	CHECK(st >= 0 && WIFEXITED(st) && WEXITSTATUS(st) == 2,
	      "bad flag: status %d", st);
	CHECK(h_log_has("gw_badflag", "--engine-wait-s soon"),
	      "the bad flag is not named");
	char *a3[] = {(char *)gt_.gatewayd, "--bogus", NULL};
	pid = h_spawn("gw_unknownflag", a3);
	st = h_wait_exit(pid, 10);
	CHECK(st >= 0 && WIFEXITED(st) && WEXITSTATUS(st) == 2 &&
		  h_log_has("gw_unknownflag", "usage:"),
	      "unknown flag: status %d", st);

	/* and the server still serves */
	char *ok = gt_chat_body("hi", 2, "");
	r = gt_post(port, C, ok);
	CHECK(r.status == 200, "a good request after the errors: %d %s",
	      r.status, r.body);
	gt_resp_fini(&r);
	free(ok);

	/* POST /v1/cache/clear of a tier this cached runs without (the stack
	 * has no --disk-dir): 409, the RAM caches untouched */
	want_error(port, "/v1/cache/clear?tier=bogus", NULL, 400, "tier",
		   "unknown tier");
	r = gt_get(port, "/v1/cache/stats");
	json_t *s0 = gt_json(&r);
	gt_resp_fini(&r);
	/* a 10-token turn: no anchor, but its end anchor and its session
	 * snapshot */
	CHECK(gt_int(s0, "end.bytes") > 0 && gt_int(s0, "store.entries") > 0,
	      "the good request left no end anchor and no snapshot");
	want_error(port, "/v1/cache/clear?tier=disk", NULL, 409, "tier",
		   "CLEAR disk: no disk tier: cached runs without --disk-dir");
	want_error(port, "/v1/cache/clear?tier=spill", NULL, 409, "tier",
		   "CLEAR spill: no session spill: cached runs without "
		   "--disk-dir");
	want_error(port, "/v1/cache/clear", "{\"tier\":\"disk\"}", 409, "tier",
		   "no disk tier");
	r = gt_post(port, "/v1/cache/clear?tier=disk", NULL);
	json_t *o = gt_json(&r);
	CHECK(gt_str(o, "error.code") &&
		  !strcmp(gt_str(o, "error.code"), "tier_not_running") &&
		  gt_str(o, "error.type") &&
		  !strcmp(gt_str(o, "error.type"), "conflict"),
	      "the refusal's code and type: %s", r.body);
	json_decref(o);
	gt_resp_fini(&r);
	r = gt_get(port, "/v1/cache/stats");
	json_t *s1 = gt_json(&r);
	gt_resp_fini(&r);
	static const char *const ram[] = {"resident", "end",   "pin",
					  "park",     "store", "stash"};
	for (size_t i = 0; i < sizeof ram / sizeof *ram; i++) {
		char *a = json_dumps(json_object_get(s0, ram[i]),
				     JSON_SORT_KEYS | JSON_ENCODE_ANY);
		char *c = json_dumps(json_object_get(s1, ram[i]),
				     JSON_SORT_KEYS | JSON_ENCODE_ANY);
		CHECK(a && c && !strcmp(a, c),
		      "a refused clear changed %s: %s -> %s", ram[i], a, c);
		free(a);
		free(c);
	}
	json_decref(s0);
	json_decref(s1);
	r = gt_get(port, "/metrics");
	CHECK(strstr(r.body, "moor_requests_total{route=\"/v1/cache/clear\","
			     "code=\"409\"} 4"),
	      "the four 409s are not counted:\n%s", r.body);
	gt_resp_fini(&r);
	r = gt_post(port, "/v1/cache/clear?tier=all", NULL);
	o = gt_json(&r);
	CHECK(r.status == 200 && gt_str(o, "cleared") &&
		  !strcmp(gt_str(o, "cleared"), "all"),
	      "?tier=all without the NVMe tiers: %d %s", r.status, r.body);
	json_decref(o);
	gt_resp_fini(&r);
	r = gt_get(port, "/v1/cache/stats");
	o = gt_json(&r);
	CHECK(gt_int(o, "end.bytes") == 0 && gt_int(o, "store.entries") == 0,
	      "?tier=all cleared RAM: %s", r.body);
	json_decref(o);
	gt_resp_fini(&r);
	return h_done("test_gw_errors");
}
