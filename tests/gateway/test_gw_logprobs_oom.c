/* test_gw_logprobs_oom: a request whose logprobs cannot be kept ends with
 * an error, never with a reply that lacks entries, and gatewayd goes on
 * serving. cached + engined on models/tiny + gatewayd, greedy.
 *
 * The failure is logprobs.h's fault seam: a gatewayd started with
 * MOOR_GW_LP_FAULT=6 fails the 6th gw_lp_add of its life as a failed
 * growth does (-ENOMEM, sticky), so the first request with logprobs fails
 * at its 6th token and the ones after it run as usual. For each of a
 * chat and a completion, whole and streamed, a gatewayd of its own:
 *
 *   - whole: HTTP 500 in OpenAI's error shape (type server_error, param and
 *     code null, a message that names the logprobs), no choices; the
 *     generation is cancelled (gatewayd's log);
 *   - streamed: the 200 went out with the first token, so the stream ends
 *     with an error event (server_error, naming the logprobs) and [DONE]
 *     after it; no chunk has a finish_reason; the chunks before the error
 *     are, choice for choice, the first chunks of the same request on a
 *     gatewayd without the fault (so each carries the entries of its
 *     text, as test_gw_logprobs proves of the full stream), and carry
 *     fewer than 6 entries: no text of the token that failed or after it
 *     went out;
 *   - then the same gatewayd serves a plain request (200, logprobs null,
 *     a finish_reason) and the same logprobs request, whose logprobs
 *     equal the faultless gatewayd's exactly (whole and streamed).
 *
 *   test_gw_logprobs_oom CACHED ENGINED GATEWAYD MODEL_DIR
 */
#include <signal.h>

#include "t.h"

#include "gwtest.h"
#include "harness.h"

#define FAULT_AT 6
#define MAX_TOKENS 12

static const char *const C = "/v1/chat/completions", *const T =
							 "/v1/completions";

static json_t *whole(int port, const char *path, const char *body)
{
	return gt_post_whole(port, path, body);
}

/* The events of a stream (its [DONE] required last) */
static json_t *stream(int port, const char *path, const char *body)
{
	char *sb = gt_with(body, "\"stream\":true");
	json_t *ev = gt_post_stream(port, path, sb);
	free(sb);
	return ev;
}

/* The entries the chunks of ev carry (a chat's content, a completion's
 * tokens). */
static size_t entries(const json_t *ev, int chat)
{
	size_t n = 0;
	for (size_t i = 0; i < json_array_size(ev); i++) {
		const json_t *lp = json_object_get(
		    gt_choice0(json_array_get(ev, i)), "logprobs");
		n += json_array_size(
		    json_object_get(lp, chat ? "content" : "tokens"));
	}
	return n;
}

/* A gatewayd whose FAULT_AT-th logprobs entry fails; its log's name in
 * log. */
static pid_t faulted(int *port, char *log, size_t n)
{
	char v[16];
	snprintf(v, sizeof v, "%d", FAULT_AT);
	setenv("MOOR_GW_LP_FAULT", v, 1);
	pid_t pid = gt_gatewayd(port, NULL);
	unsetenv("MOOR_GW_LP_FAULT");
	snprintf(log, n, "gatewayd%d", gt_.n_gw);
	REQUIRE(gt_wait_health(*port, 200, 20) == 200, "%s not green", log);
	REQUIRE(gt_wait_log(log, "MOOR_GW_LP_FAULT=", 5),
		"%s does not say its fault seam is set", log);
	return pid;
}

static void stop(pid_t pid, const char *log)
{
	kill(pid, SIGTERM);
	int st = h_wait_exit(pid, 10);
	CHECK(st == 0, "%s: exit status %d after SIGTERM", log, st);
}

/* The error object of an error reply or event: server_error, param and
 * code null, a message naming the logprobs. */
static void check_error(const json_t *o, const char *what)
{
	const json_t *e = json_object_get(o, "error");
	const char *msg = gt_str(o, "error.message");
	CHECK(json_is_object(e) && msg && strstr(msg, "logprobs") &&
		  gt_str(o, "error.type") &&
		  !strcmp(gt_str(o, "error.type"), "server_error") &&
		  json_is_null(json_object_get(e, "param")) &&
		  json_is_null(json_object_get(e, "code")),
	      "%s: not a server_error naming the logprobs", what);
	printf("%s: %s\n", what, msg ? msg : "?");
}

/* After its fault: the gatewayd on port serves a plain request and the
 * logprobs request again (equal to the faultless good ones). */
static void serves_on(int port, const char *path, const char *plain,
		      const char *body, const json_t *good_whole,
		      const json_t *good_stream, int chat)
{
	json_t *o = whole(port, path, plain);
	CHECK(json_is_null(json_object_get(gt_choice0(o), "logprobs")) &&
		  gt_str(o, "choices.0.finish_reason"),
	      "a plain request after the fault");
	json_decref(o);
	json_t *ev = stream(port, path, plain);
	const json_t *last = json_array_get(ev, json_array_size(ev) - 1);
	CHECK(json_array_size(ev) >= 2 &&
		  (gt_str(last, "choices.0.finish_reason") ||
		   gt_str(json_array_get(ev, json_array_size(ev) - 2),
			  "choices.0.finish_reason")),
	      "a plain stream after the fault has no finish chunk");
	json_decref(ev);
	o = whole(port, path, body);
	CHECK(json_equal(json_object_get(gt_choice0(o), "logprobs"),
			 json_object_get(gt_choice0(good_whole), "logprobs")),
	      "the logprobs request after the fault differs from a "
	      "faultless gatewayd's");
	json_decref(o);
	ev = stream(port, path, body);
	CHECK(json_array_size(ev) == json_array_size(good_stream),
	      "streamed after the fault: %zu events, faultless %zu",
	      json_array_size(ev), json_array_size(good_stream));
	for (size_t i = 0; i < json_array_size(ev); i++)
		CHECK(json_equal(
			  json_object_get(json_array_get(ev, i), "choices"),
			  json_object_get(json_array_get(good_stream, i),
					  "choices")),
		      "streamed after the fault: chunk %zu differs", i);
	CHECK(entries(ev, chat) == MAX_TOKENS, "%zu entries streamed",
	      entries(ev, chat));
	json_decref(ev);
}

/* One route (chat or completion): its whole and streamed failures, each
 * on a gatewayd of its own, and what each serves after. */
static void route(const char *path, const char *plain, const char *body,
		  int chat)
{
	const char *name = chat ? "chat" : "completion";
	/* the faultless gatewayd's answers */
	json_t *good = whole(gt_.port, path, body);
	json_t *good_ev = stream(gt_.port, path, body);
	CHECK(gt_int(good, "usage.completion_tokens") == MAX_TOKENS &&
		  entries(good_ev, chat) == MAX_TOKENS,
	      "%s: %lld tokens, %zu entries streamed, want %d", name,
	      gt_int(good, "usage.completion_tokens"), entries(good_ev, chat),
	      MAX_TOKENS);

	/* whole */
	char log[32];
	int port;
	pid_t gw = faulted(&port, log, sizeof log);
	gt_resp r = gt_post(port, path, body);
	json_t *o = gt_json(&r);
	CHECK(r.status == 500 && o && !json_object_get(o, "choices"),
	      "%s whole with a logprob that cannot be kept: %d %s", name,
	      r.status, r.body);
	if (o)
		check_error(o, chat ? "chat, whole" : "completion, whole");
	json_decref(o);
	gt_resp_fini(&r);
	CHECK(gt_wait_log(log, "cancel sent", 5),
	      "%s: the generation was not cancelled", log);
	serves_on(port, path, plain, body, good, good_ev, chat);
	stop(gw, log);

	/* streamed */
	gw = faulted(&port, log, sizeof log);
	json_t *ev = stream(port, path, body);
	size_t n = json_array_size(ev);
	const json_t *err = json_array_get(ev, n - 1);
	CHECK(n >= 1 && json_object_get(err, "error"),
	      "%s stream: its last event is not an error", name);
	if (n >= 1 && json_object_get(err, "error"))
		check_error(err,
			    chat ? "chat, streamed" : "completion, streamed");
	size_t before = n ? n - 1 : 0;
	for (size_t i = 0; i < before; i++) {
		const json_t *e = json_array_get(ev, i);
		CHECK(!gt_str(e, "choices.0.finish_reason"),
		      "%s stream: chunk %zu has a finish_reason", name, i);
		CHECK(i < json_array_size(good_ev) &&
			  json_equal(json_object_get(e, "choices"),
				     json_object_get(json_array_get(good_ev, i),
						     "choices")),
		      "%s stream: chunk %zu is not the faultless stream's",
		      name, i);
	}
	size_t carried = entries(ev, chat);
	printf("%s, streamed: %zu chunks before the error, %zu entries "
	       "(the fault at entry %d)\n",
	       name, before, carried, FAULT_AT);
	CHECK(carried < FAULT_AT, "%s stream: %zu entries carried", name,
	      carried);
	CHECK(gt_wait_log(log, "cancel sent", 5),
	      "%s: the generation was not cancelled", log);
	json_decref(ev);
	serves_on(port, path, plain, body, good, good_ev, chat);
	stop(gw, log);
	json_decref(good);
	json_decref(good_ev);
}

int main(int argc, char **argv)
{
	gt_stack(argc, argv, "gwlpoom", 300, NULL, NULL, NULL);

	char *plain =
	    gt_chat_body("Tell me a story.", MAX_TOKENS, "\"ignore_eos\":true");
	char *body = gt_chat_body("Tell me a story.", MAX_TOKENS,
				  "\"ignore_eos\":true,\"logprobs\":true,"
				  "\"top_logprobs\":5");
	route(C, plain, body, 1);
	free(plain);
	free(body);

	char tp[160], tb[192];
	snprintf(tp, sizeof tp,
		 "{\"prompt\":\"The capital of France is\",\"max_tokens\":%d,"
		 "\"temperature\":0,\"ignore_eos\":true}",
		 MAX_TOKENS);
	snprintf(tb, sizeof tb, "%.*s,\"logprobs\":3}", (int)strlen(tp) - 1,
		 tp);
	route(T, tp, tb, 0);

	/* the stack's own gatewayd, which had no fault, served throughout */
	CHECK(gt_wait_health(gt_.port, 200, 5) == 200, "gatewayd1 not green");
	return h_done("test_gw_logprobs_oom");
}
