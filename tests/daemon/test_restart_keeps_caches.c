/* test_restart_keeps_caches: a conversation's turns through cached and
 * engined resume from the end anchor (turn 2 forwards only what is new:
 * cached_tokens = turn 1's prompt + the tokens the state absorbed); after
 * `kill -9` of engined between turns 2 and 3, a new engined of the same
 * fingerprint is handed the state back and turn 3 resumes exactly as in a
 * run without the restart (same cached_tokens, same tokens); an engined of
 * another fingerprint (another grid) is refused the old state: its first
 * turn is cold and cached logs that it dropped the old caches.
 *
 *   test_restart_keeps_caches CACHED ENGINED MODEL_DIR
 */
#include "t.h"

#include "client.h"
#include "harness.h"
#include "serve.h"

#define MAXT 8 /* tokens a turn generates */

typedef struct conv {
	int32_t ids[4096];
	uint32_t n;
} conv;

/* Appends k new "user" tokens, deterministic in (turn, i). */
static void conv_add(conv *c, int turn, uint32_t k)
{
	for (uint32_t i = 0; i < k; i++)
		c->ids[c->n++] = (int32_t)(1 + (turn * 131 + i * 37) % 500);
}

static void conv_answer(conv *c, const mc_result *r)
{
	for (uint32_t i = 0; i < r->n_tokens; i++)
		c->ids[c->n++] = r->tokens[i];
}

typedef struct turn_out {
	uint64_t cached, prompt;
	uint32_t tier, finish, n;
	int32_t tokens[MAXT];
} turn_out;

static void turn(const char *run, conv *c, int k, turn_out *o)
{
	mc_conn mc;
	REQUIRE(mc_open(&mc, run, 10000) == 0, "connect to engined on %s", run);
	mc_params p = {
	    .ids = c->ids,
	    .n_ids = c->n,
	    .max_tokens = MAXT,
	    .flags = PROTO_GEN_IGNORE_EOS,
	    .session = "conv-1",
	};
	mc_result r;
	mc_generate(&mc, 100 + (uint64_t)k, &p, &r, 60000);
	REQUIRE(r.rv == 0, "turn %d: %s", k, r.msg);
	REQUIRE(r.finish == PROTO_FINISH_LENGTH && r.n_tokens == MAXT,
		"turn %d: finish %u, %u tokens, code %d: %s", k, r.finish,
		r.n_tokens, r.code, r.msg);
	printf("  %s turn %d: %llu prompt tokens, %llu cached (tier %u)\n", run,
	       k, (unsigned long long)r.prompt_tokens,
	       (unsigned long long)r.cached_tokens, r.tier);
	o->cached = r.cached_tokens;
	o->prompt = r.prompt_tokens;
	o->tier = r.tier;
	o->finish = r.finish;
	o->n = r.n_tokens;
	memcpy(o->tokens, r.tokens, MAXT * sizeof(int32_t));
	conv_answer(c, &r);
	mc_result_fini(&r);
	mc_close(&mc);
}

int main(int argc, char **argv)
{
	REQUIRE(argc == 4, "usage: %s CACHED ENGINED MODEL_DIR", argv[0]);
	const char *cached = argv[1], *engined = argv[2], *model = argv[3];
	tb_backend("test_restart_keeps_caches"); /* skips without it */
	printf("backend %s, device arena %s\n", tb_name(), h_device());
	h_init("restart", 240);
	const char *runA = h_subdir("a"), *runB = h_subdir("b");

	/* ---- run A: three turns, no restart ---- */
	pid_t ca = h_cached(cached, runA, "cachedA");
	pid_t ea = h_engined(engined, model, runA, "enginedA", "--grid", "64",
			     "--window", "1024", NULL);
	conv c = {0};
	turn_out a[3];
	conv_add(&c, 1, 150);
	turn(runA, &c, 1, &a[0]);
	CHECK(a[0].cached == 0, "turn 1 is cold: cached %llu",
	      (unsigned long long)a[0].cached);
	uint64_t p1 = a[0].prompt;
	conv_add(&c, 2, 20);
	turn(runA, &c, 2, &a[1]);
	CHECK(a[1].cached == p1 + MAXT - 1,
	      "turn 2 resumes at the end anchor: cached %llu, want %llu "
	      "(turn 1's prompt + %d absorbed)",
	      (unsigned long long)a[1].cached,
	      (unsigned long long)(p1 + MAXT - 1), MAXT - 1);
	CHECK(a[1].tier == PROTO_TIER_END, "turn 2 tier %u, want end",
	      a[1].tier);
	uint64_t p2 = a[1].prompt;
	conv_add(&c, 3, 20);
	turn(runA, &c, 3, &a[2]);
	CHECK(a[2].cached == p2 + MAXT - 1, "turn 3: cached %llu, want %llu",
	      (unsigned long long)a[2].cached,
	      (unsigned long long)(p2 + MAXT - 1));

	/* SIGTERM: both exit 0 and leave no socket behind */
	kill(ea, SIGTERM);
	int st = h_wait_exit(ea, 20);
	CHECK(st >= 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0,
	      "engined on SIGTERM: status %d", st);
	kill(ca, SIGTERM);
	st = h_wait_exit(ca, 20);
	CHECK(st >= 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0,
	      "cached on SIGTERM: status %d", st);
	char sp[256];
	snprintf(sp, sizeof sp, "%s/cached.sock", runA);
	CHECK(access(sp, F_OK) != 0, "cached left %s", sp);
	snprintf(sp, sizeof sp, "%s/engined.sock", runA);
	CHECK(access(sp, F_OK) != 0, "engined left %s", sp);

	/* ---- run B: the same turns, kill -9 engined before turn 3 ---- */
	h_cached(cached, runB, "cachedB");
	pid_t e1 = h_engined(engined, model, runB, "enginedB1", "--grid", "64",
			     "--window", "1024", NULL);
	conv d = {0};
	turn_out b[4];
	conv_add(&d, 1, 150);
	turn(runB, &d, 1, &b[0]);
	conv_add(&d, 2, 20);
	turn(runB, &d, 2, &b[1]);
	for (int k = 0; k < 2; k++) {
		CHECK(b[k].cached == a[k].cached,
		      "turn %d: cached %llu, %llu in run A", k + 1,
		      (unsigned long long)b[k].cached,
		      (unsigned long long)a[k].cached);
		CHECK(!memcmp(b[k].tokens, a[k].tokens, sizeof b[k].tokens),
		      "turn %d: other tokens than run A's", k + 1);
	}
	h_kill9(e1);
	pid_t e2 = h_engined(engined, model, runB, "enginedB2", "--grid", "64",
			     "--window", "1024", NULL);
	CHECK(h_log_has("enginedB2", "handed back"),
	      "the new engined was not handed back the state");
	conv_add(&d, 3, 20);
	turn(runB, &d, 3, &b[2]);
	CHECK(b[2].cached == a[2].cached,
	      "turn 3 after kill -9: cached %llu, %llu without the restart",
	      (unsigned long long)b[2].cached, (unsigned long long)a[2].cached);
	CHECK(b[2].tier == a[2].tier, "turn 3 tier %u, %u without", b[2].tier,
	      a[2].tier);
	CHECK(!memcmp(b[2].tokens, a[2].tokens, sizeof b[2].tokens),
	      "turn 3 after kill -9: other tokens than without the restart");
	for (int i = 0; i < MAXT; i++)
		if (b[2].tokens[i] != a[2].tokens[i]) {
			fprintf(stderr, "  token %d: %d, want %d\n", i,
				b[2].tokens[i], a[2].tokens[i]);
			break;
		}

	/* ---- another fingerprint: the old state is not served ---- */
	h_kill9(e2);
	h_engined(engined, model, runB, "enginedB3", "--grid", "128",
		  "--window", "1024", NULL);
	conv_add(&d, 4, 20);
	turn(runB, &d, 4, &b[3]);
	CHECK(b[3].cached == 0,
	      "an engined of another fingerprint resumed at %llu",
	      (unsigned long long)b[3].cached);
	CHECK(h_log_has("cachedB", "dropped the old caches"),
	      "cached did not log that it dropped the old caches");
	CHECK(!h_log_has("enginedB3", "handed back"),
	      "the engined of another fingerprint was handed the state");
	return h_done("test_restart_keeps_caches");
}
