/* test_gw_logprobs_bound: what a generation's logprobs hold and cost
 * (gatewayd/logprobs.h), with no server, on the tiny model's tokenizer:
 *
 *   - a stream's entries dropped after each chunk (gw_lp_drop): 4,000
 *     tokens of 5 alternatives in chunks of 1 to 7 entries write, chunk
 *     by chunk, exactly what the same entries kept whole write (the
 *     chunks' lists concatenated, a chat's and a completion's,
 *     text_offset of the whole text included), while the buffers never
 *     hold more than the largest chunk's entries;
 *   - gw_lp_splice_into writes what gw_lp_write then gw_lp_splice write,
 *     byte for byte, after what the buffer held;
 *   - gw_lp_token_bytes bounds what the writer really writes for the
 *     costliest tokens: every id's own text and bytes measured through
 *     gw_lp_write, alone and as an alternative, the costliest token with
 *     the top costliest alternatives, for 0, 1, 5 and 20 alternatives, in
 *     both shapes, stays under it, and not by more than a third;
 *   - the fault seam: with gw_lp_fault_at 3 the third gw_lp_add fails
 *     with -ENOMEM and every later one on that lp too (sticky), the two
 *     before stay and are written; another lp is unaffected, and the seam
 *     fires once. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "logprobs.h"
#include "t.h"

static gw_tok *tok;

/* An entry of token with alternatives ids[0, n). */
static proto_step_entry entry(int32_t token, float lp, uint32_t n,
			      const int32_t *ids)
{
	proto_step_entry e = {.token = token, .logprob = lp, .n_top = n};
	for (uint32_t i = 0; i < n; i++) {
		e.top_id[i] = ids[i];
		e.top_lp[i] = lp - 0.25f * (float)(i + 1);
	}
	return e;
}

/* Keeps e as reply.c does (the entry, then its piece's characters). */
static void keep(gw_lp *lp, gw_tok_stream *ts, const proto_step_entry *e,
		 uint32_t top)
{
	REQUIRE(gw_lp_add(lp, e, top) == 0, "gw_lp_add");
	const char *piece;
	size_t len;
	if (gw_tok_stream_push(ts, e->token, &piece, &len) == 0)
		gw_lp_text(lp, piece, len);
}

static json_t *written(const gw_lp *lp, int chat, size_t from, size_t to)
{
	moor_buf b = {0};
	REQUIRE(gw_lp_write(lp, tok, chat, from, to, &b) == 0, "gw_lp_write");
	json_error_t je;
	json_t *o = json_loadb(b.p, b.len, JSON_ALLOW_NUL, &je);
	REQUIRE(o, "not JSON (%s at %d): %.*s", je.text, je.position, 80,
		b.p + (je.position > 40 ? je.position - 40 : 0));
	moor_buf_fini(&b);
	return o;
}

/* The lists of o appended to those of all. */
static void extend(json_t *all, const json_t *o)
{
	const char *k;
	json_t *v;
	json_object_foreach((json_t *)o, k, v)
	{
		if (!json_is_array(v))
			continue;
		json_t *a = json_object_get(all, k);
		if (!a)
			json_object_set_new(all, k, json_array());
		json_array_extend(json_object_get(all, k), v);
	}
}

/* A pseudo-random id of the vocabulary (the byte-level ones, split
 * characters included), not the NUL byte's (jansson reads no NUL in a
 * key, as a completion's dict has) */
static int32_t some_id(uint64_t *x)
{
	for (;;) {
		*x = *x * 6364136223846793005ull + 1442695040888963407ull;
		int32_t id =
		    (int32_t)((*x >> 33) % (uint64_t)gw_tok_vocab_size(tok));
		size_t n;
		const char *p = gw_tok_token_bytes(tok, id, &n);
		if (!p || !memchr(p, 0, n))
			return id;
	}
}

static void test_drop(int chat)
{
	enum { N = 4000, TOP = 5 };
	gw_lp whole = {0}, part = {0};
	gw_tok_stream tw, tp;
	REQUIRE(gw_tok_stream_init(&tw, tok) == 0 &&
		    gw_tok_stream_init(&tp, tok) == 0,
		"stream init");
	json_t *chunks = json_object();
	uint64_t x = 42;
	size_t pending = 0, most = 0, most_cap = 0, chunk = 1;
	for (size_t i = 0; i < N; i++) {
		int32_t ids[TOP];
		for (int k = 0; k < TOP; k++)
			ids[k] = some_id(&x);
		proto_step_entry e =
		    entry(some_id(&x), -(float)(i % 97) / 8, TOP, ids);
		keep(&whole, &tw, &e, TOP);
		keep(&part, &tp, &e, TOP);
		if (++pending == chunk || i == N - 1) {
			json_t *o = written(&part, chat, 0, part.n);
			extend(chunks, o);
			json_decref(o);
			if (part.n > most)
				most = part.n;
			size_t cap = part.toks.cap + part.alts.cap;
			if (cap > most_cap)
				most_cap = cap;
			gw_lp_drop(&part);
			CHECK(part.n == 0 && part.toks.len == 0 &&
				  part.alts.len == 0,
			      "gw_lp_drop left %zu entries", part.n);
			pending = 0;
			chunk = chunk % 7 + 1;
		}
	}
	CHECK(part.chars == whole.chars, "the character counts %llu, %llu",
	      (unsigned long long)part.chars, (unsigned long long)whole.chars);
	json_t *all = written(&whole, chat, 0, whole.n);
	json_object_del(all, "refusal");
	CHECK(json_equal(all, chunks),
	      "%s: the chunks' lists differ from the whole's",
	      chat ? "chat" : "completion");
	/* what the largest chunk's entries need, each buffer doubling past
	 * its need from 256 bytes */
	size_t need = most * (sizeof(gw_lp_tok) + TOP * sizeof(gw_lp_alt));
	printf("%s: %d entries in chunks of at most %zu; the buffers held at "
	       "most %zu bytes, the whole %zu\n",
	       chat ? "chat" : "completion", N, most, most_cap,
	       whole.toks.cap + whole.alts.cap);
	CHECK(most_cap <= 2 * need + 512,
	      "a stream's buffers grew to %zu bytes for chunks of %zu entries",
	      most_cap, most);
	json_decref(all);
	json_decref(chunks);
	gw_tok_stream_fini(&tw);
	gw_tok_stream_fini(&tp);
	gw_lp_fini(&whole);
	gw_lp_fini(&part);
}

static void test_splice_into(void)
{
	gw_lp lp = {0};
	gw_tok_stream ts;
	REQUIRE(gw_tok_stream_init(&ts, tok) == 0, "stream init");
	uint64_t x = 7;
	for (int i = 0; i < 50; i++) {
		int32_t ids[5];
		for (int k = 0; k < 5; k++)
			ids[k] = some_id(&x);
		proto_step_entry e = entry(some_id(&x), -1.5f, 5, ids);
		keep(&lp, &ts, &e, 5);
	}
	static const char dump[] =
	    "{\"id\":\"x\",\"choices\":[{\"index\":0,\"text\":"
	    "\"\\\"logprobs\\\""
	    ":null\",\"logprobs\":null,\"finish_reason\":\"stop\"}]}";
	for (int chat = 0; chat < 2; chat++) {
		moor_buf a = {0}, b = {0}, t = {0};
		moor_buf_puts(&a, "data: ");
		REQUIRE(gw_lp_write(&lp, tok, chat, 3, 41, &t) == 0, "write");
		REQUIRE(gw_lp_splice(&a, dump, strlen(dump), t.p, t.len) == 0,
			"splice");
		moor_buf_puts(&b, "data: ");
		REQUIRE(gw_lp_splice_into(&b, dump, strlen(dump), &lp, tok,
					  chat, 3, 41) == 0,
			"splice_into");
		CHECK(a.len == b.len && !memcmp(a.p, b.p, a.len),
		      "splice_into differs from write + splice (%s)",
		      chat ? "chat" : "completion");
		moor_buf_fini(&a);
		moor_buf_fini(&b);
		moor_buf_fini(&t);
	}
	gw_tok_stream_fini(&ts);
	gw_lp_fini(&lp);
}

/* The bytes gw_lp_write writes for one entry of token with alternatives
 * ids[0, n), less the envelope (the same call with no entry). */
static size_t one_entry(int chat, int32_t token, uint32_t n, const int32_t *ids)
{
	gw_lp lp = {0};
	proto_step_entry e = entry(token, -1.2345678e-5f, n, ids);
	REQUIRE(gw_lp_add(&lp, &e, n) == 0, "add");
	moor_buf b = {0}, z = {0};
	REQUIRE(gw_lp_write(&lp, tok, chat, 0, 1, &b) == 0 &&
		    gw_lp_write(&lp, tok, chat, 0, 0, &z) == 0,
		"write");
	size_t len = b.len - z.len;
	moor_buf_fini(&b);
	moor_buf_fini(&z);
	gw_lp_fini(&lp);
	return len;
}

/* i into the descending top[0, k) by cost[] */
static void rank(int32_t *top, size_t k, const size_t *cost, int32_t i)
{
	for (size_t j = 0; j < k; j++)
		if (top[j] == i)
			return; /* distinct ids */
	if (cost[i] <= cost[top[k - 1]])
		return;
	size_t j = k - 1;
	for (; j > 0 && cost[top[j - 1]] < cost[i]; j--)
		top[j] = top[j - 1];
	top[j] = i;
}

static void test_token_bytes(void)
{
	int32_t V = gw_tok_vocab_size(tok);
	size_t *alone = calloc((size_t)V, sizeof *alone),
	       *as_alt = calloc((size_t)V, sizeof *as_alt);
	REQUIRE(alone && as_alt, "oom");
	static const uint32_t tops[] = {0, 1, 5, 20};
	size_t real[2][4];
	for (int chat = 0; chat < 2; chat++) {
		/* every id measured: alone, and what it adds as an
		 * alternative (of a token whose own text is one byte) */
		const int32_t base = 0;
		size_t base_len = one_entry(chat, base, 0, NULL);
		int32_t top[20] = {0}, worst = 0;
		for (int32_t id = 0; id < V; id++) {
			alone[id] = one_entry(chat, id, 0, NULL);
			as_alt[id] = one_entry(chat, base, 1, &id) - base_len;
			if (alone[id] > alone[worst])
				worst = id;
		}
		for (int32_t id = 0; id < V; id++)
			rank(top, 20, as_alt, id);
		for (int t = 0; t < 4; t++)
			real[chat][t] = one_entry(chat, worst, tops[t], top);
	}
	for (int t = 0; t < 4; t++) {
		uint32_t n = tops[t];
		uint64_t bound = gw_lp_token_bytes(tok, n) - sizeof(gw_lp_tok) -
				 n * sizeof(gw_lp_alt);
		size_t most = real[1][t] > real[0][t] ? real[1][t] : real[0][t];
		printf("%u alternatives: the costliest entry writes %zu bytes "
		       "(chat), %zu (completion); the bound %llu\n",
		       n, real[1][t], real[0][t], (unsigned long long)bound);
		/* and an entry's separators: a comma in a chat's one list, in
		 * each of a completion's four */
		CHECK(real[1][t] + 1 <= bound && real[0][t] + 4 <= bound,
		      "top %u: %zu and %zu bytes written, bound %llu", n,
		      real[1][t], real[0][t], (unsigned long long)bound);
		CHECK(bound <= most + most / 3,
		      "top %u: the bound %llu is loose for %zu", n,
		      (unsigned long long)bound, most);
	}
	free(alone);
	free(as_alt);
}

static void test_fault(void)
{
	gw_lp a = {0}, b = {0};
	int32_t ids[3] = {1, 2, 3};
	proto_step_entry e = entry(100, -1, 3, ids);
	gw_lp_fault_at = 3;
	CHECK(gw_lp_add(&a, &e, 3) == 0 && gw_lp_add(&a, &e, 3) == 0,
	      "the first two adds");
	CHECK(gw_lp_add(&a, &e, 3) == -ENOMEM, "the third add did not fail");
	CHECK(gw_lp_add(&a, &e, 3) == -ENOMEM, "the failure is not sticky");
	CHECK(a.n == 2, "%zu entries kept, want 2", a.n);
	gw_lp_drop(&a);
	CHECK(gw_lp_add(&a, &e, 3) == -ENOMEM, "a drop cleared the failure");
	CHECK(gw_lp_add(&b, &e, 3) == 0 && gw_lp_add(&b, &e, 3) == 0 &&
		  gw_lp_add(&b, &e, 3) == 0 && b.n == 3,
	      "another lp, past the seam's call");
	json_t *o = written(&b, 1, 0, b.n);
	CHECK(json_array_size(json_object_get(o, "content")) == 3,
	      "the other lp's entries");
	json_decref(o);
	gw_lp_fault_at = 0;
	gw_lp_fini(&a);
	gw_lp_fini(&b);
}

int main(void)
{
	char path[4096], err[MOOR_ERRLEN];
	snprintf(path, sizeof path, "%s/models/tiny/tokenizer.json", t_src());
	REQUIRE(gw_tok_load(path, &tok, err) == 0,
		"%s (deploy/setup writes models/tiny)", err);
	test_drop(1);
	test_drop(0);
	test_splice_into();
	test_token_bytes();
	test_fault();
	gw_tok_free(tok);
	return t_done("test_gw_logprobs_bound");
}
