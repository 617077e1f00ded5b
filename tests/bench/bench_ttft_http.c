/* bench_ttft_http: the end anchor through the whole HTTP stack (issue 12,
 * point 8): a conversation of H tokens (default 16,384) read cold, then
 * its follow-up (the client sends back exactly the answer it got, whole,
 * as the openai SDK does, and a short new message), each timed from the
 * request's send to its first token. The stack is cached + engined
 * (--grid 1024, the seed's) + gatewayd on models/tiny, spawned as the
 * gateway tests spawn it; each round is a new session with its own text,
 * so every cold turn is cold. The time to the first token is a streamed
 * request's time to its first content delta (max_tokens 2; progress
 * comment lines and the role chunk come before it and do not count).
 * Prints a table: the cold and the follow-up TTFT, their ratio, where the
 * follow-up resumed (usage.moor.source, cached and re-read tokens).
 * Usage: bench_ttft_http CACHED ENGINED GATEWAYD MODEL_DIR [H [ROUNDS]] */
#include <stdlib.h>

#include "t.h"

#include "buf.h"
#include "gwtest.h"
#include "harness.h"

typedef struct turn_out {
	double ttft, total;
	char *content;
	long long prompt, cached, reread;
	char source[32];
} turn_out;

/* One streamed chat request; the TTFT is the first content delta's
 * arrival (read off the socket as it comes). */
static void turn(int port, json_t *msgs, const char *session, turn_out *o)
{
	json_t *b = json_pack("{s:O,s:i,s:i,s:b,s:{s:b}}", "messages", msgs,
			      "max_tokens", 2, "temperature", 0, "stream", 1,
			      "stream_options", "include_usage", 1);
	char *body = json_dumps(b, JSON_COMPACT);
	json_decref(b);
	char hdr[128];
	snprintf(hdr, sizeof hdr, "x-session-id: %s\r\n", session);
	double t0 = moor_now();
	int fd = gt_send(port, "POST", "/v1/chat/completions", body, hdr);
	free(body);
	REQUIRE(fd >= 0, "connect");
	moor_buf raw = {0};
	o->ttft = -1;
	char buf[65536];
	for (;;) {
		ssize_t n = read(fd, buf, sizeof buf);
		if (n <= 0)
			break;
		moor_buf_put(&raw, buf, (size_t)n);
		if (o->ttft < 0 && raw.p &&
		    (strstr(raw.p, "\"content\":\"") &&
		     strstr(strstr(raw.p, "\"content\":\"") + 11,
			    "\"content\":\"")))
			o->ttft =
			    moor_now() - t0; /* past the role chunk's "" */
	}
	o->total = moor_now() - t0;
	close(fd);
	size_t rl;
	char *rawp = moor_buf_take(&raw, &rl);
	REQUIRE(rawp, "no answer");
	gt_resp rs = {0};
	gt_parse(rawp, rl, &rs); /* takes rawp */
	REQUIRE(rs.status == 200, "%d %s", rs.status, rs.body);
	json_t *ev = json_array();
	int done_last = 0;
	REQUIRE(gt_sse(rs.body, ev, &done_last) == 0 && done_last,
		"not a whole stream: %.300s", rs.body);
	moor_buf c = {0};
	moor_buf_puts(&c, "");
	size_t i;
	json_t *e, *u = NULL;
	json_array_foreach(ev, i, e)
	{
		const char *t = gt_str(e, "choices.0.delta.content");
		if (t)
			moor_buf_puts(&c, t);
		if (json_is_object(json_object_get(e, "usage")))
			u = json_object_get(e, "usage");
	}
	REQUIRE(u, "no usage");
	o->prompt = gt_int(u, "prompt_tokens");
	o->cached = gt_int(u, "moor.cached");
	o->reread = gt_int(u, "moor.reread");
	snprintf(o->source, sizeof o->source, "%s",
		 gt_str(u, "moor.source") ? gt_str(u, "moor.source") : "-");
	size_t cl;
	o->content = moor_buf_take(&c, &cl);
	if (o->ttft < 0)
		o->ttft = o->total;
	json_decref(ev);
	gt_resp_fini(&rs);
}

static char *long_text(int seed, int words)
{
	moor_buf b = {0};
	moor_buf_puts(&b, "Here is a long document to keep in mind: ");
	uint64_t r = 0x9e3779b97f4a7c15ull * (uint64_t)(seed + 1);
	for (int i = 0; i < words; i++) {
		r ^= r << 13;
		r ^= r >> 7;
		r ^= r << 17;
		char w[32];
		snprintf(w, sizeof w, "w%llu ",
			 (unsigned long long)(r % 100000));
		moor_buf_puts(&b, w);
	}
	size_t n;
	return moor_buf_take(&b, &n);
}

int main(int argc, char **argv)
{
	REQUIRE(argc >= 5,
		"usage: %s CACHED ENGINED GATEWAYD MODEL_DIR [H "
		"[ROUNDS]]",
		argv[0]);
	int H = argc > 5 ? atoi(argv[5]) : 16384;
	int rounds = argc > 6 ? atoi(argv[6]) : 3;
	REQUIRE(H >= 256 && H <= 120000 && rounds >= 1, "H, ROUNDS");
	char win[16];
	snprintf(win, sizeof win, "%d", H + 4096);
	gt_.cached = argv[1];
	gt_.engined = argv[2];
	gt_.gatewayd = argv[3];
	gt_.model = argv[4];
	gt_.run = h_init("bench_ttft_http", 1800);
	char *ca[] = {(char *)gt_.cached,
		      "--device",
		      (char *)h_device(),
		      "--run-dir",
		      (char *)gt_.run,
		      "--device-gb",
		      "2",
		      "--host-gb",
		      "2",
		      "--mem-ceiling-gb",
		      "2",
		      "--mem-peak-gb",
		      "2",
		      NULL};
	gt_.cd = h_spawn("cached", ca);
	REQUIRE(h_wait_ready("cached", "serving", gt_.run, "admin.sock", gt_.cd,
			     20) == 0,
		"cached did not come up");
	gt_.ed =
	    h_engined(gt_.engined, gt_.model, gt_.run, "engined1", "--threads",
		      "2", "--grid", "1024", "--window", win, NULL);
	const char *gx[] = {"--window", win, "--log-level", "info", NULL};
	gt_.gw = gt_gatewayd(&gt_.port, gx);
	REQUIRE(gt_wait_health(gt_.port, 200, 20) == 200, "the stack");
	setvbuf(stdout, NULL, _IOLBF, 0);
	printf("bench_ttft_http: models/tiny, engined --threads 2 --grid 1024 "
	       "--window %s, %ld CPU(s); TTFT = send to the first content "
	       "delta of a streamed request\n",
	       win, sysconf(_SC_NPROCESSORS_ONLN));
	printf("%5s %8s %9s %9s %8s %8s %8s %8s  %s\n", "round", "prompt",
	       "cold_s", "follow_s", "ratio", "f_prompt", "f_cached",
	       "f_reread", "f_source");
	double sum_c = 0, sum_f = 0;
	int words = (int)(H / 5.88); /* "w12345 " is about 5.9 tokens */
	for (int r = 0; r < rounds; r++) {
		char sess[32];
		snprintf(sess, sizeof sess, "bench-%d", r);
		char *text = long_text(r, words);
		json_t *msgs = json_array();
		json_array_append_new(msgs, json_pack("{s:s,s:s}", "role",
						      "user", "content", text));
		free(text);
		turn_out a, f;
		turn(gt_.port, msgs, sess, &a);
		json_array_append_new(msgs, json_pack("{s:s,s:s}", "role",
						      "assistant", "content",
						      a.content));
		json_array_append_new(
		    msgs, json_pack("{s:s,s:s}", "role", "user", "content",
				    "Thanks. Now answer in one word: ready?"));
		turn(gt_.port, msgs, sess, &f);
		json_decref(msgs);
		printf("%5d %8lld %9.3f %9.3f %7.1fx %8lld %8lld %8lld  %s\n",
		       r, a.prompt, a.ttft, f.ttft, a.ttft / f.ttft, f.prompt,
		       f.cached, f.reread, f.source);
		CHECK(!strcmp(f.source, "end"),
		      "round %d: the follow-up "
		      "resumed from %s",
		      r, f.source);
		sum_c += a.ttft;
		sum_f += f.ttft;
		free(a.content);
		free(f.content);
	}
	printf("mean: cold %.3f s, follow-up %.3f s, %.1fx\n", sum_c / rounds,
	       sum_f / rounds, sum_c / sum_f);
	return h_done("bench_ttft_http");
}
