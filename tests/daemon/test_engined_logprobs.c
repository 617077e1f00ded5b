/* test_engined_logprobs: GENERATE's PROTO_GEN_LOGPROBS through engined.
 *
 * Greedy with 5 alternatives: every STEP entry carries its token's logprob
 * and five alternatives; the token is the first of them with the same
 * bits (greedy takes the lowest id among the maxima, the list orders ties
 * by id); the list falls and no value is above 0. The same request without
 * the flag gives the same tokens and entries without logprobs. Seeded
 * sampling with 20 alternatives gives the tokens it gives without them
 * (logprobs draw nothing), and a sampled token in the list has the listed
 * value. The reasoning budget's close, forwarded rather than sampled,
 * carries logprobs too where it is streamed.
 *
 *   test_engined_logprobs CACHED ENGINED MODEL_DIR
 */
#include "t.h"

#include <math.h>
#include <string.h>

#include "client.h"
#include "harness.h"
#include "serve.h"

static int32_t prompt[64];

static mc_params params(uint32_t max_tokens, uint32_t top, const char *session)
{
	for (uint32_t i = 0; i < 48; i++)
		prompt[i] = (int32_t)(5 + (i * 71) % 500); /* vocabulary 512 */
	mc_params p = {
	    .ids = prompt,
	    .n_ids = 48,
	    .max_tokens = max_tokens,
	    .flags = PROTO_GEN_IGNORE_EOS |
		     (top != UINT32_MAX ? PROTO_GEN_LOGPROBS : 0),
	    .top_logprobs = top != UINT32_MAX ? top : 0,
	    .session = session,
	};
	return p;
}

/* The entry's own shape: n_top as asked, values <= 0 and not NaN, the list
 * in (logprob desc, id asc) order, the token's value as listed. */
static void check_entry(const proto_step_entry *e, uint32_t top,
			const char *what, uint32_t i)
{
	CHECK(e->n_top == top, "%s %u: %u alternatives, asked %u", what, i,
	      e->n_top, top);
	CHECK(e->logprob <= 0.0f, "%s %u: logprob %g", what, i, e->logprob);
	for (uint32_t r = 0; r < e->n_top && r < PROTO_MAX_TOP; r++) {
		CHECK(e->top_lp[r] <= 0.0f, "%s %u: alternative %u: %g", what,
		      i, r, e->top_lp[r]);
		if (r)
			CHECK(e->top_lp[r] < e->top_lp[r - 1] ||
				  (e->top_lp[r] == e->top_lp[r - 1] &&
				   e->top_id[r] > e->top_id[r - 1]),
			      "%s %u: alternatives %u and %u out of order",
			      what, i, r - 1, r);
		if (e->top_id[r] == e->token)
			CHECK(!memcmp(&e->top_lp[r], &e->logprob, 4),
			      "%s %u: the token's value %.9g, listed %.9g",
			      what, i, e->logprob, e->top_lp[r]);
	}
	if (e->n_top)
		CHECK(e->logprob <= e->top_lp[0] || e->token == e->top_id[0],
		      "%s %u: the token above the first alternative", what, i);
}

int main(int argc, char **argv)
{
	REQUIRE(argc == 4, "usage: %s CACHED ENGINED MODEL_DIR", argv[0]);
	const char *cached = argv[1], *engined = argv[2], *model = argv[3];
	tb_backend("test_engined_logprobs"); /* skips without it */
	const char *run = h_init("logprobs", 240);
	h_cached(cached, run, "cached");
	h_engined(engined, model, run, "engined", "--grid", "64", "--window",
		  "512", NULL);
	mc_conn c;
	REQUIRE(mc_open(&c, run, 10000) == 0, "connect");
	mc_result a, b;

	/* ---- greedy, 5 alternatives, against the same without ---- */
	mc_params p = params(24, 5, "g1");
	REQUIRE(mc_generate(&c, 1, &p, &a, 60000) == 0 &&
		    a.finish == PROTO_FINISH_LENGTH && a.n_tokens == 24,
		"greedy with logprobs: rv %d finish %u, %u tokens: %s", a.rv,
		a.finish, a.n_tokens, a.msg);
	for (uint32_t i = 0; i < a.n_tokens; i++) {
		const proto_step_entry *e = &a.steps[i];
		check_entry(e, 5, "greedy", i);
		CHECK(e->top_id[0] == e->token &&
			  !memcmp(&e->top_lp[0], &e->logprob, 4),
		      "greedy %u: token %d (%.9g), first alternative %d (%.9g)",
		      i, e->token, e->logprob, e->top_id[0], e->top_lp[0]);
	}
	/* the tiny model's logits are spread: a greedy token is not certain */
	CHECK(a.steps[0].logprob < 0.0f && a.steps[0].top_lp[4] > -INFINITY,
	      "greedy 0: logprob %g, fifth alternative %g", a.steps[0].logprob,
	      a.steps[0].top_lp[4]);
	p = params(24, UINT32_MAX, "g2");
	REQUIRE(mc_generate(&c, 2, &p, &b, 60000) == 0 && b.n_tokens == 24,
		"greedy without: rv %d, %u tokens: %s", b.rv, b.n_tokens,
		b.msg);
	CHECK(!memcmp(a.tokens, b.tokens, 24 * sizeof *a.tokens),
	      "logprobs changed the greedy tokens");
	int none = 1;
	for (uint32_t i = 0; i < b.n_tokens; i++)
		none &= b.steps[i].n_top == 0 && b.steps[i].logprob == 0.0f;
	CHECK(none, "entries without the flag carry logprobs");
	mc_result_fini(&a);
	mc_result_fini(&b);

	/* ---- seeded sampling, 20 alternatives ---- */
	p = params(32, PROTO_MAX_TOP, "s1");
	p.temperature = 1.0f;
	p.top_p = 0.95f;
	p.seed = 1234;
	REQUIRE(mc_generate(&c, 3, &p, &a, 60000) == 0 && a.n_tokens == 32,
		"sampled with logprobs: rv %d, %u tokens: %s", a.rv, a.n_tokens,
		a.msg);
	mc_params q = params(32, UINT32_MAX, "s2");
	q.temperature = 1.0f;
	q.top_p = 0.95f;
	q.seed = 1234;
	REQUIRE(mc_generate(&c, 4, &q, &b, 60000) == 0 && b.n_tokens == 32,
		"sampled without: rv %d, %u tokens: %s", b.rv, b.n_tokens,
		b.msg);
	CHECK(!memcmp(a.tokens, b.tokens, 32 * sizeof *a.tokens),
	      "logprobs changed the sampled tokens");
	int off_top = 0;
	for (uint32_t i = 0; i < a.n_tokens; i++) {
		check_entry(&a.steps[i], PROTO_MAX_TOP, "sampled", i);
		off_top += a.steps[i].token != a.steps[i].top_id[0];
	}
	printf("  sampled: %d of 32 tokens not the likeliest\n", off_top);
	mc_result_fini(&a);
	mc_result_fini(&b);

	/* ---- the reasoning budget's close: forwarded tokens ---- */
	static int32_t close_ids[] = {11, 12, 13};
	p = params(12, 3, "r1");
	p.flags |= PROTO_GEN_THINKING;
	p.budget = 2;
	p.think_close = 999999; /* never sampled: the budget closes */
	p.close_ids = close_ids;
	p.n_close = 3;
	p.n_hidden = 1;
	REQUIRE(mc_generate(&c, 5, &p, &a, 60000) == 0 &&
		    a.finish == PROTO_FINISH_LENGTH,
		"budget: rv %d finish %u: %s", a.rv, a.finish, a.msg);
	/* 2 sampled, the close's last 2 streamed (the first is hidden) */
	REQUIRE(a.n_tokens >= 4, "budget: %u tokens", a.n_tokens);
	CHECK(a.tokens[2] == 12 && a.tokens[3] == 13,
	      "budget: tokens 2, 3 are %d %d", a.tokens[2], a.tokens[3]);
	for (uint32_t i = 0; i < a.n_tokens; i++)
		check_entry(&a.steps[i], 3, "budget", i);
	mc_result_fini(&a);

	mc_close(&c);
	return h_done("test_engined_logprobs");
}
