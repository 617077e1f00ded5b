/* test_gw_chat_and_completions: the OpenAI routes against a real stack
 * (cached + engined on models/tiny + gatewayd). A non-streamed chat has
 * the chat.completion schema, usage that adds up and finish_reason
 * "length" at max_tokens; the same greedy request streamed is SSE framed
 * (data: lines, blank line after each, [DONE] last), every chunk carries
 * the same id and created, the first delta is the assistant role, the
 * deltas add up to the same text, and include_usage adds a last chunk with
 * choices [] and the same usage. /v1/completions with a string and with
 * token ids, streamed and not, agree; a stop string cuts the text where it
 * first matches and finishes "stop". /v1/models names the served model. A
 * follow-up turn of the same session reports cached_tokens > 0 (tier
 * resident; moor.reread = prompt - cached), and /v1/cache/peek of it just
 * before said the same tokens, cached tokens and tier without counting a
 * plan. The session key is the body's conversation id (four spellings),
 * else x-session-id. generation_config.json's temperature is the default.
 * /metrics counts the requests,
 * tokens and TTFTs and moves. /v1/cache/clear needs the admin token.
 *
 *   test_gw_chat_and_completions CACHED ENGINED GATEWAYD MODEL_DIR
 */
#include "t.h"

#include "gwtest.h"
#include "harness.h"

static int port;

/* A streamed body's events, checked for framing and ids; the content (or
 * text) concatenated into out. Returns the events. */
static json_t *check_stream(const gt_resp *r, const char *object, int chat,
			    char *out, size_t outn)
{
	char ct[128] = "";
	gt_header(r, "content-type", ct, sizeof ct);
	CHECK(r->status == 200, "stream status %d: %s", r->status, r->body);
	CHECK(!strncmp(ct, "text/event-stream", 17), "content-type '%s'", ct);
	json_t *ev = json_array();
	int done_last = 0;
	CHECK(gt_sse(r->body, ev, &done_last) == 0, "SSE framing: %s", r->body);
	CHECK(done_last, "[DONE] is not the last event");
	REQUIRE(json_array_size(ev) >= 2, "%zu events", json_array_size(ev));
	const char *id = gt_str(json_array_get(ev, 0), "id");
	long long created = gt_int(json_array_get(ev, 0), "created");
	CHECK(id && created > 0, "first chunk id/created");
	size_t n = 0;
	out[0] = 0;
	for (size_t i = 0; i < json_array_size(ev); i++) {
		json_t *e = json_array_get(ev, i);
		const char *eid = gt_str(e, "id");
		CHECK(eid && id && !strcmp(eid, id), "chunk %zu id %s vs %s", i,
		      eid, id);
		CHECK(gt_int(e, "created") == created, "chunk %zu created", i);
		CHECK(gt_str(e, "object") &&
			  !strcmp(gt_str(e, "object"), object),
		      "chunk %zu object", i);
		const char *piece = chat ? gt_str(e, "choices.0.delta.content")
					 : gt_str(e, "choices.0.text");
		if (piece) {
			size_t k = strlen(piece);
			if (n + k < outn) {
				memcpy(out + n, piece, k + 1);
				n += k;
			}
		}
	}
	if (chat)
		CHECK(gt_str(json_array_get(ev, 0), "choices.0.delta.role") &&
			  !strcmp(gt_str(json_array_get(ev, 0),
					 "choices.0.delta.role"),
				  "assistant"),
		      "the first delta is not the assistant role");
	return ev;
}

static void check_usage(const json_t *u, long long completion)
{
	long long p = gt_int(u, "prompt_tokens"),
		  c = gt_int(u, "completion_tokens"),
		  t = gt_int(u, "total_tokens");
	CHECK(p > 0 && c == completion && t == p + c,
	      "usage %lld + %lld = %lld (want %lld completion)", p, c, t,
	      completion);
	long long cached = gt_int(u, "prompt_tokens_details.cached_tokens");
	CHECK(cached >= 0 && cached <= p, "cached_tokens %lld", cached);
	CHECK(gt_int(u, "moor.cached") == cached, "moor.cached");
	CHECK(gt_int(u, "moor.reread") == p - cached, "moor.reread");
	CHECK(gt_str(u, "moor.tier") && gt_str(u, "moor.source"),
	      "moor.tier/source");
}

static double metric(const char *text, const char *name)
{
	const char *p = text;
	size_t n = strlen(name);
	while ((p = strstr(p, name))) {
		if ((p == text || p[-1] == '\n') && p[n] == ' ')
			return atof(p + n + 1);
		p += n;
	}
	return -1;
}

static char *get_metrics(void)
{
	gt_resp r = gt_get(port, "/metrics");
	CHECK(r.status == 200, "/metrics %d", r.status);
	char *t = r.body;
	r.body = NULL;
	gt_resp_fini(&r);
	return t ? t : calloc(1, 1);
}

int main(int argc, char **argv)
{
	gt_stack(argc, argv, "gwchat", 240, NULL, NULL, NULL);
	port = gt_.port;
	char *m0 = get_metrics();

	/* ---- non-streamed chat ---- */
	char *body = gt_chat_body("Tell me a story.", 6, "\"ignore_eos\":true");
	gt_resp r = gt_post(port, "/v1/chat/completions", body);
	REQUIRE(r.status == 200, "chat: %d %s", r.status, r.body);
	json_t *o = gt_json(&r);
	REQUIRE(o, "chat body is not JSON: %s", r.body);
	CHECK(!strncmp(gt_str(o, "id") ? gt_str(o, "id") : "", "chatcmpl-", 9),
	      "id %s", gt_str(o, "id"));
	CHECK(gt_str(o, "object") &&
		  !strcmp(gt_str(o, "object"), "chat.completion"),
	      "object");
	CHECK(llabs(gt_int(o, "created") - (long long)time(NULL)) < 60,
	      "created %lld", gt_int(o, "created"));
	CHECK(gt_str(o, "model") && !strcmp(gt_str(o, "model"), "tiny"),
	      "model %s", gt_str(o, "model"));
	CHECK(gt_int(o, "choices.0.index") == 0, "index");
	CHECK(gt_str(o, "choices.0.message.role") &&
		  !strcmp(gt_str(o, "choices.0.message.role"), "assistant"),
	      "role");
	const char *content = gt_str(o, "choices.0.message.content");
	CHECK(content && strlen(content) > 0, "content");
	CHECK(gt_str(o, "choices.0.finish_reason") &&
		  !strcmp(gt_str(o, "choices.0.finish_reason"), "length"),
	      "finish_reason %s", gt_str(o, "choices.0.finish_reason"));
	CHECK(
	    json_is_null(json_object_get(
		json_array_get(json_object_get(o, "choices"), 0), "logprobs")),
	    "logprobs not null");
	check_usage(json_object_get(o, "usage"), 6);
	char whole[8192];
	snprintf(whole, sizeof whole, "%s", content ? content : "");
	json_decref(o);
	gt_resp_fini(&r);
	free(body);

	/* ---- the same, streamed ---- */
	body = gt_chat_body("Tell me a story.", 6,
			    "\"ignore_eos\":true,\"stream\":true,"
			    "\"stream_options\":{\"include_usage\":true}");
	r = gt_post(port, "/v1/chat/completions", body);
	char streamed[8192];
	json_t *ev = check_stream(&r, "chat.completion.chunk", 1, streamed,
				  sizeof streamed);
	CHECK(!strcmp(streamed, whole), "streamed '%s' vs whole '%s'", streamed,
	      whole);
	size_t ne = json_array_size(ev);
	json_t *fin = json_array_get(ev, ne - 2),
	       *last = json_array_get(ev, ne - 1);
	CHECK(gt_str(fin, "choices.0.finish_reason") &&
		  !strcmp(gt_str(fin, "choices.0.finish_reason"), "length"),
	      "final chunk finish_reason");
	CHECK(json_object_size(json_object_get(
		  json_array_get(json_object_get(fin, "choices"), 0),
		  "delta")) == 0,
	      "final chunk delta not empty");
	CHECK(json_is_array(json_object_get(last, "choices")) &&
		  json_array_size(json_object_get(last, "choices")) == 0,
	      "usage chunk choices not []");
	check_usage(json_object_get(last, "usage"), 6);
	for (size_t i = 0; i + 1 < ne; i++)
		CHECK(!json_object_get(json_array_get(ev, i), "usage") ||
			  json_is_null(
			      json_object_get(json_array_get(ev, i), "usage")),
		      "usage before the last chunk");
	json_decref(ev);
	gt_resp_fini(&r);
	free(body);

	/* streamed without include_usage: no usage chunk */
	body = gt_chat_body("Tell me a story.", 3, "\"stream\":true");
	r = gt_post(port, "/v1/chat/completions", body);
	ev = check_stream(&r, "chat.completion.chunk", 1, streamed,
			  sizeof streamed);
	for (size_t i = 0; i < json_array_size(ev); i++)
		CHECK(!json_object_get(json_array_get(ev, i), "usage"),
		      "a usage chunk without include_usage");
	json_decref(ev);
	gt_resp_fini(&r);
	free(body);

	/* ---- completions: string, ids, streamed, stop ---- */
	const char *cbody =
	    "{\"prompt\":\"Once upon a time\",\"max_tokens\":12,"
	    "\"temperature\":0,\"ignore_eos\":true}";
	r = gt_post(port, "/v1/completions", cbody);
	REQUIRE(r.status == 200, "completions: %d %s", r.status, r.body);
	o = gt_json(&r);
	CHECK(!strncmp(gt_str(o, "id") ? gt_str(o, "id") : "", "cmpl-", 5),
	      "cmpl id");
	CHECK(gt_str(o, "object") &&
		  !strcmp(gt_str(o, "object"), "text_completion"),
	      "object");
	char text[4096];
	snprintf(text, sizeof text, "%s",
		 gt_str(o, "choices.0.text") ? gt_str(o, "choices.0.text")
					     : "");
	CHECK(strlen(text) > 0, "text");
	CHECK(!strcmp(gt_str(o, "choices.0.finish_reason"), "length"),
	      "finish");
	check_usage(json_object_get(o, "usage"), 12);
	json_decref(o);
	gt_resp_fini(&r);

	const char *ibody = "{\"prompt\":[9707,11,1879,13,358,1079],"
			    "\"max_tokens\":5,\"temperature\":0,"
			    "\"ignore_eos\":true}";
	r = gt_post(port, "/v1/completions", ibody);
	REQUIRE(r.status == 200, "completions ids: %d %s", r.status, r.body);
	o = gt_json(&r);
	CHECK(gt_int(o, "usage.prompt_tokens") == 6, "prompt_tokens %lld",
	      gt_int(o, "usage.prompt_tokens"));
	check_usage(json_object_get(o, "usage"), 5);
	char itext[4096];
	snprintf(itext, sizeof itext, "%s",
		 gt_str(o, "choices.0.text") ? gt_str(o, "choices.0.text")
					     : "");
	json_decref(o);
	gt_resp_fini(&r);
	r = gt_post(port, "/v1/completions",
		    "{\"prompt\":[9707,11,1879,13,358,1079],\"max_tokens\":5,"
		    "\"temperature\":0,\"ignore_eos\":true,\"stream\":true}");
	ev = check_stream(&r, "text_completion", 0, streamed, sizeof streamed);
	CHECK(!strcmp(streamed, itext), "streamed ids '%s' vs '%s'", streamed,
	      itext);
	json_decref(ev);
	gt_resp_fini(&r);

	/* a stop string from the middle of the greedy text: the text ends
	 * right before its first occurrence (one that does not also begin
	 * the text, so something is left to stream) */
	size_t tl = strlen(text), k = tl / 2, e = k;
	char stop[32] = "";
	for (; k < tl; k = e) {
		while (k < tl && ((unsigned char)text[k] & 0xc0) == 0x80)
			k++;
		e = k + 1;
		while (e < tl && ((unsigned char)text[e] & 0xc0) == 0x80)
			e++;
		snprintf(stop, sizeof stop, "%.*s", (int)(e - k), text + k);
		if (k < tl && strstr(text, stop) != text)
			break;
	}
	REQUIRE(k < tl, "no stop string in '%s'", text);
	json_t *sb = json_pack("{s:s,s:i,s:i,s:b,s:[s]}", "prompt",
			       "Once upon a time", "max_tokens", 12,
			       "temperature", 0, "ignore_eos", 1, "stop", stop);
	char *sbody = json_dumps(sb, JSON_COMPACT);
	json_decref(sb);
	size_t want = (size_t)(strstr(text, stop) - text);
	for (int st = 0; st < 2; st++) {
		char *sb2 = sbody;
		char tmp[8192];
		if (st) { /* streamed */
			snprintf(tmp, sizeof tmp, "%.*s,\"stream\":true}",
				 (int)strlen(sbody) - 1, sbody);
			sb2 = tmp;
		}
		r = gt_post(port, "/v1/completions", sb2);
		CHECK(r.status == 200, "stop: %d", r.status);
		const char *got, *fr;
		if (!st) {
			o = gt_json(&r);
			got = gt_str(o, "choices.0.text");
			fr = gt_str(o, "choices.0.finish_reason");
			CHECK(got && strlen(got) == want &&
				  !strncmp(got, text, want),
			      "stop '%s': got '%s' from '%s'", stop, got, text);
			CHECK(fr && !strcmp(fr, "stop"), "stop finish %s", fr);
			json_decref(o);
		} else {
			ev = check_stream(&r, "text_completion", 0, streamed,
					  sizeof streamed);
			CHECK(strlen(streamed) == want &&
				  !strncmp(streamed, text, want),
			      "streamed stop '%s': '%s'", stop, streamed);
			fr = gt_str(json_array_get(ev, json_array_size(ev) - 1),
				    "choices.0.finish_reason");
			CHECK(fr && !strcmp(fr, "stop"), "streamed finish %s",
			      fr);
			json_decref(ev);
		}
		gt_resp_fini(&r);
	}
	free(sbody);

	/* ---- models ---- */
	r = gt_get(port, "/v1/models");
	o = gt_json(&r);
	CHECK(r.status == 200 && gt_str(o, "object") &&
		  !strcmp(gt_str(o, "object"), "list"),
	      "models: %d %s", r.status, r.body);
	CHECK(gt_str(o, "data.0.id") && !strcmp(gt_str(o, "data.0.id"), "tiny"),
	      "model id");
	CHECK(gt_str(o, "data.0.object") &&
		  !strcmp(gt_str(o, "data.0.object"), "model"),
	      "model object");
	CHECK(gt_str(o, "data.0.owned_by") &&
		  !strcmp(gt_str(o, "data.0.owned_by"), "moor"),
	      "owned_by");
	json_decref(o);
	gt_resp_fini(&r);

	/* ---- the session key: the body's conversation id, else the
	 * x-session-id header (cached's stats name the resident session) ----
	 */
	static const char *const sess[][2] = {
	    {"\"conversation_id\":\"c-top\"", "c-top"},
	    {"\"conversation\":\"c-str\"", "c-str"},
	    {"\"conversation\":{\"id\":\"c-obj\"}", "c-obj"},
	    {"\"metadata\":{\"conversation_id\":\"c-meta\"}", "c-meta"},
	    {"\"user\":\"u\"", "hdr-sess"},
	};
	for (size_t i = 0; i < sizeof sess / sizeof sess[0]; i++) {
		char *sbd = gt_chat_body("hi", 1, sess[i][0]);
		r = gt_request(port, "POST", "/v1/chat/completions", sbd,
			       "x-session-id: hdr-sess\r\n", 30);
		CHECK(r.status == 200, "session %s: %d", sess[i][1], r.status);
		gt_resp_fini(&r);
		free(sbd);
		r = gt_get(port, "/v1/cache/stats");
		o = gt_json(&r);
		CHECK(gt_str(o, "resident.session") &&
			  !strcmp(gt_str(o, "resident.session"), sess[i][1]),
		      "session of %s: %s", sess[i][0],
		      gt_str(o, "resident.session"));
		json_decref(o);
		gt_resp_fini(&r);
	}

	/* ---- a follow-up turn resumes from the cache ---- */
	char sys[8192] = "";
	for (int i = 0; i < 30; i++)
		strcat(sys,
		       "You are a careful assistant who answers briefly. ");
	json_t *t1 =
	    json_pack("{s:[{s:s,s:s},{s:s,s:s}],s:i,s:i}", "messages", "role",
		      "system", "content", sys, "role", "user", "content",
		      "Hello!", "max_tokens", 4, "temperature", 0);
	char *b1 = json_dumps(t1, JSON_COMPACT);
	r = gt_request(port, "POST", "/v1/chat/completions", b1,
		       "x-session-id: conv-1\r\n", 60);
	REQUIRE(r.status == 200, "turn 1: %d %s", r.status, r.body);
	o = gt_json(&r);
	long long p1 = gt_int(o, "usage.prompt_tokens");
	CHECK(p1 > 64, "turn 1 prompt %lld tokens (more than a grid)", p1);
	const char *a1 = gt_str(o, "choices.0.message.content");
	json_t *msgs = json_object_get(t1, "messages");
	json_array_append_new(msgs, json_pack("{s:s,s:s}", "role", "assistant",
					      "content", a1 ? a1 : ""));
	json_array_append_new(msgs, json_pack("{s:s,s:s}", "role", "user",
					      "content", "And then?"));
	json_decref(o);
	gt_resp_fini(&r);
	free(b1);
	b1 = json_dumps(t1, JSON_COMPACT);
	/* peek first: a dry run, which must say what the turn then does and
	 * change no counter */
	r = gt_get(port, "/v1/cache/stats");
	o = gt_json(&r);
	long long plans0 = gt_int(o, "plans");
	json_decref(o);
	gt_resp_fini(&r);
	r = gt_request(port, "POST", "/v1/cache/peek", b1,
		       "x-session-id: conv-1\r\n", 30);
	REQUIRE(r.status == 200, "peek: %d %s", r.status, r.body);
	json_t *pk = gt_json(&r);
	gt_resp_fini(&r);
	CHECK(gt_str(pk, "session") && !strcmp(gt_str(pk, "session"), "conv-1"),
	      "peek session");
	CHECK(json_is_number(json_object_get(pk, "reread_eta_ms")) &&
		  json_is_number(json_object_get(pk, "restore_ms")),
	      "peek etas");
	CHECK(gt_int(pk, "reread_tokens") ==
		  gt_int(pk, "tokens") - gt_int(pk, "cached_tokens"),
	      "peek reread");
	r = gt_get(port, "/v1/cache/stats");
	o = gt_json(&r);
	CHECK(gt_int(o, "plans") == plans0, "peek counted a plan: %lld -> %lld",
	      plans0, gt_int(o, "plans"));
	json_decref(o);
	gt_resp_fini(&r);
	r = gt_request(port, "POST", "/v1/chat/completions", b1,
		       "x-session-id: conv-1\r\n", 60);
	REQUIRE(r.status == 200, "turn 2: %d %s", r.status, r.body);
	o = gt_json(&r);
	long long p2 = gt_int(o, "usage.prompt_tokens"),
		  c2 = gt_int(o, "usage.prompt_tokens_details.cached_tokens");
	CHECK(gt_int(pk, "tokens") == p2 && gt_int(pk, "cached_tokens") == c2 &&
		  !strcmp(gt_str(pk, "tier") ? gt_str(pk, "tier") : "",
			  gt_str(o, "usage.moor.tier")
			      ? gt_str(o, "usage.moor.tier")
			      : "?"),
	      "peek said %lld tokens, %lld cached (%s); the turn had %lld, "
	      "%lld",
	      gt_int(pk, "tokens"), gt_int(pk, "cached_tokens"),
	      gt_str(pk, "tier"), p2, c2);
	json_decref(pk);
	CHECK(p2 > p1 && c2 > 0 && c2 <= p2,
	      "turn 2: %lld prompt tokens, %lld cached", p2, c2);
	CHECK(gt_str(o, "usage.moor.tier") &&
		  !strcmp(gt_str(o, "usage.moor.tier"), "resident"),
	      "turn 2 tier %s", gt_str(o, "usage.moor.tier"));
	check_usage(json_object_get(o, "usage"), 4);
	printf("follow-up turn: %lld prompt tokens, %lld cached (%s)\n", p2, c2,
	       gt_str(o, "usage.moor.source"));
	json_decref(o);
	json_decref(t1);
	gt_resp_fini(&r);
	free(b1);

	/* ---- generation_config.json sets the defaults: a copy of the model
	 * with temperature 0 there answers two seeds alike; the model without
	 * it (temperature 1) does not ---- */
	{
		char dir[256], p[512], q[512];
		snprintf(dir, sizeof dir, "%s/tinygc", gt_.run);
		mkdir(dir, 0700);
		static const char *const files[] = {
		    "config.json", "model.safetensors", "tokenizer.json",
		    "tokenizer_config.json"};
		for (int i = 0; i < 4; i++) {
			snprintf(p, sizeof p, "%s/%s", gt_.model, files[i]);
			snprintf(q, sizeof q, "%s/%s", dir, files[i]);
			CHECK(symlink(p, q) == 0, "symlink %s", q);
		}
		snprintf(q, sizeof q, "%s/generation_config.json", dir);
		FILE *f = fopen(q, "w");
		fputs("{\"temperature\": 0.0, \"top_p\": 1.0, "
		      "\"eos_token_id\": [151645, 151643]}\n",
		      f);
		fclose(f);
		const char *ex[] = {"--model", dir, "--served-model-name",
				    "tiny", NULL};
		int port2;
		gt_gatewayd(&port2, ex);
		char got[2][2][2048];
		for (int g = 0; g < 2; g++)
			for (int sk = 0; sk < 2; sk++) {
				/* no temperature in the body */
				json_t *bb = json_pack(
				    "{s:[{s:s,s:s}],s:i,s:i,s:b}", "messages",
				    "role", "user", "content", "Pick words.",
				    "max_tokens", 8, "seed", 11 + sk,
				    "ignore_eos", 1);
				char *bt = json_dumps(bb, JSON_COMPACT);
				json_decref(bb);
				r = gt_post(g ? port2 : port,
					    "/v1/chat/completions", bt);
				free(bt);
				o = gt_json(&r);
				snprintf(got[g][sk], sizeof got[g][sk], "%s",
					 gt_str(o, "choices.0.message.content")
					     ? gt_str(o, "choices.0.message."
							 "content")
					     : "?");
				json_decref(o);
				gt_resp_fini(&r);
			}
		CHECK(strcmp(got[0][0], got[0][1]),
		      "temperature 1: two seeds gave the same '%s'", got[0][0]);
		CHECK(!strcmp(got[1][0], got[1][1]),
		      "generation_config temperature 0: '%s' vs '%s'",
		      got[1][0], got[1][1]);
	}

	/* ---- metrics moved ---- */
	char *m1 = get_metrics();
	const char *chat200 =
	    "moor_requests_total{route=\"/v1/chat/completions\",code=\"200\"}";
	CHECK(metric(m0, chat200) < 0 && metric(m1, chat200) >= 5,
	      "chat 200s: %g -> %g", metric(m0, chat200), metric(m1, chat200));
	CHECK(metric(m1, "moor_prompt_tokens_total") >
		  metric(m0, "moor_prompt_tokens_total"),
	      "prompt tokens did not move");
	CHECK(metric(m1, "moor_completion_tokens_total") >=
		  metric(m0, "moor_completion_tokens_total") + 6 + 6 + 12 + 5,
	      "completion tokens did not move");
	CHECK(metric(m1, "moor_cached_tokens_total") > 0, "cached tokens");
	CHECK(metric(m1, "moor_ttft_seconds_count") >= 8, "ttft count %g",
	      metric(m1, "moor_ttft_seconds_count"));
	CHECK(metric(m1, "moor_engine_up") == 1, "engine_up");
	CHECK(metric(m1, "moor_cache_hits_total{tier=\"end\"}") +
		      metric(m1, "moor_cache_hits_total{tier=\"anchor\"}") >=
		  1,
	      "cache hits by tier");
	CHECK(strstr(m1, "# TYPE moor_ttft_seconds histogram") &&
		  strstr(m1, "moor_ttft_seconds_bucket{le=\"+Inf\"}") &&
		  strstr(m1, "# HELP moor_requests_total") &&
		  strstr(m1, "moor_cache_bytes{cache=\"resident\"}"),
	      "metrics text:\n%s", m1);
	free(m0);
	free(m1);

	/* ---- cache stats and the admin token ---- */
	r = gt_get(port, "/v1/cache/stats");
	o = gt_json(&r);
	CHECK(r.status == 200 && json_is_object(json_object_get(o, "tiers")),
	      "cache stats: %d %s", r.status, r.body);
	json_decref(o);
	gt_resp_fini(&r);
	gt_admin.off = 1; /* the refusals: no token, a wrong one */
	r = gt_request(port, "POST", "/v1/cache/clear", NULL, NULL, 10);
	CHECK(r.status == 401, "clear without a token: %d", r.status);
	o = gt_json(&r);
	CHECK(gt_str(o, "error.message"), "401 error shape: %s", r.body);
	json_decref(o);
	gt_resp_fini(&r);
	r = gt_request(port, "POST", "/v1/cache/clear", NULL,
		       "Authorization: Bearer gt-admin-7f3c1f\r\n", 10);
	CHECK(r.status == 401, "clear with a wrong token: %d", r.status);
	gt_resp_fini(&r);
	gt_admin.off = 0;
	r = gt_request(port, "POST", "/v1/cache/clear", "{\"tier\":\"all\"}",
		       "Authorization: Bearer " GT_ADMIN_TOKEN "\r\n", 10);
	CHECK(r.status == 200, "clear with the token: %d %s", r.status, r.body);
	gt_resp_fini(&r);
	r = gt_get(port, "/v1/cache/stats");
	o = gt_json(&r);
	CHECK(gt_int(o, "resident.bytes") == 0 &&
		  json_is_false(
		      json_object_get(json_object_get(o, "end"), "have")),
	      "after clear: resident %lld bytes, end %s",
	      gt_int(o, "resident.bytes"), r.body);
	json_decref(o);
	gt_resp_fini(&r);
	return h_done("test_gw_chat_and_completions");
}
