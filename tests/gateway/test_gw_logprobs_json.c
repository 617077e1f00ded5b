/* test_gw_logprobs_json: a generation's logprobs written in OpenAI's shapes
 * (gatewayd/logprobs.h) with no server, on the tiny model's tokenizer and
 * made-up STEP entries, so that what engined on the tiny model never
 * gives is checked too: a chat entry's token, logprob, bytes and
 * top_logprobs; a byte-level piece of a character ("中" as its three
 * bytes) is U+FFFD in "token" and its exact byte in "bytes"; -inf, NaN
 * and a logprob below -9999 are -9999.0 and a logprob is written exactly
 * (the float's double); the top list is cut at the request's count; a
 * completion's tokens, token_logprobs, top_logprobs dicts (the sampled
 * token first, then the likeliest, a key kept once, logprobs 0: the
 * sampled token alone) and text_offset in characters (the split "中"'s
 * three pieces at its offset, the token after it one further); ranges
 * [from, to) that add up to the whole; an id that names no token; the
 * text: strings escaped, numbers as Python prints the float's double, a
 * completion key holding a NUL apart from the empty one, the splice into
 * a reply whose content holds the key's text. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "logprobs.h"
#include "t.h"

static gw_tok *tok;

/* The id whose bytes are the one byte b. */
static int32_t byte_id(uint8_t b)
{
	for (int32_t id = 0; id < gw_tok_vocab_size(tok); id++) {
		size_t n;
		const char *p = gw_tok_token_bytes(tok, id, &n);
		if (p && n == 1 && (uint8_t)p[0] == b)
			return id;
	}
	REQUIRE(0, "no token of the byte 0x%02x", b);
	return -1;
}

static int32_t id_of(const char *text)
{
	int32_t id = gw_tok_token_id(tok, text);
	REQUIRE(id >= 0, "no token '%s'", text);
	return id;
}

/* Keeps an entry as reply.c does: gw_lp_add, then the token's decoded
 * piece into the text count. */
static void feed(gw_lp *lp, gw_tok_stream *ts, int32_t token, float logprob,
		 uint32_t top, uint32_t n_top, const int32_t *ids,
		 const float *lps)
{
	proto_step_entry e = {
	    .token = token, .logprob = logprob, .n_top = n_top};
	for (uint32_t i = 0; i < n_top; i++) {
		e.top_id[i] = ids[i];
		e.top_lp[i] = lps[i];
	}
	REQUIRE(gw_lp_add(lp, &e, top) == 0, "gw_lp_add");
	const char *piece;
	size_t len;
	if (gw_tok_stream_push(ts, token, &piece, &len) == 0)
		gw_lp_text(lp, piece, len);
}

/* gw_lp_write of [from, to) parsed back; its text in *text (malloc'd)
 * when text is not NULL. */
static json_t *lp_json(const gw_lp *lp, int chat, size_t from, size_t to,
		       char **text)
{
	moor_buf b = {0};
	REQUIRE(gw_lp_write(lp, tok, chat, from, to, &b) == 0, "gw_lp_write");
	json_error_t je;
	json_t *o = json_loadb(b.p, b.len, JSON_ALLOW_NUL, &je);
	CHECK(o, "not JSON (%s): %s", je.text, b.p);
	if (text)
		*text = moor_buf_take(&b, NULL);
	moor_buf_fini(&b);
	return o;
}

static const char *str_at(const json_t *a, size_t i, const char *k)
{
	const json_t *v = json_array_get(a, i);
	return json_string_value(k ? json_object_get(v, k) : v);
}

static double num(const json_t *v)
{
	return json_is_real(v) ? json_real_value(v) : NAN;
}

static void test_chat(void)
{
	const int32_t hello = id_of("Hello"), world = id_of(" world");
	const int32_t b0 = byte_id(0xe4), b1 = byte_id(0xb8),
		      b2 = byte_id(0xad);
	const int32_t im_end = id_of("<|im_end|>");
	gw_lp lp = {0};
	gw_tok_stream ts;
	REQUIRE(gw_tok_stream_init(&ts, tok) == 0, "stream");
	const int32_t ids[3] = {hello, world, im_end};
	const float lps[3] = {-0.25f, -INFINITY, -12345.0f};
	/* "Hello" with 3 alternatives asked, engined sent 3 */
	feed(&lp, &ts, hello, -0.25f, 3, 3, ids, lps);
	/* "中" in three byte-level pieces; 2 asked, 3 sent: 2 kept */
	feed(&lp, &ts, b0, -1.5f, 2, 3, ids, lps);
	feed(&lp, &ts, b1, -INFINITY, 2, 3, ids, lps);
	feed(&lp, &ts, b2, NAN, 2, 0, NULL, NULL);
	feed(&lp, &ts, world, -0.1f, 2, 1, ids + 1, lps + 1);
	REQUIRE(lp.n == 5, "5 entries kept, %zu", lp.n);

	char *t;
	json_t *o = lp_json(&lp, 1, 0, lp.n, &t);
	REQUIRE(o, "chat json");
	printf("chat: %s\n", t);
	const json_t *c = json_object_get(o, "content");
	CHECK(json_is_array(c) && json_array_size(c) == 5, "content: %s", t);
	CHECK(json_object_get(o, "refusal") &&
		  json_is_null(json_object_get(o, "refusal")),
	      "refusal null");
	CHECK(!strcmp(str_at(c, 0, "token"), "Hello"), "token 0");
	CHECK(num(json_object_get(json_array_get(c, 0), "logprob")) == -0.25,
	      "logprob 0");
	/* a float's double, exactly: -0.1f is not -0.1 */
	CHECK(num(json_object_get(json_array_get(c, 4), "logprob")) ==
		  (double)-0.1f,
	      "logprob 4 %.17g",
	      num(json_object_get(json_array_get(c, 4), "logprob")));
	/* the pieces of 中: U+FFFD each, their own byte */
	static const uint8_t zh[3] = {0xe4, 0xb8, 0xad};
	for (size_t i = 1; i <= 3; i++) {
		const json_t *e = json_array_get(c, i);
		CHECK(str_at(c, i, "token") &&
			  !strcmp(str_at(c, i, "token"), "\xef\xbf\xbd"),
		      "piece %zu token '%s'", i, str_at(c, i, "token"));
		const json_t *by = json_object_get(e, "bytes");
		CHECK(json_is_array(by) && json_array_size(by) == 1 &&
			  json_integer_value(json_array_get(by, 0)) ==
			      zh[i - 1],
		      "piece %zu bytes", i);
	}
	CHECK(num(json_object_get(json_array_get(c, 2), "logprob")) == -9999.0,
	      "-inf is -9999.0");
	CHECK(num(json_object_get(json_array_get(c, 3), "logprob")) == -9999.0,
	      "NaN is -9999.0");
	CHECK(strstr(t, "-9999.0") && !strstr(t, "inf") && !strstr(t, "nan"),
	      "no infinity in the text: %s", t);
	/* bytes of "Hello" */
	const json_t *by = json_object_get(json_array_get(c, 0), "bytes");
	CHECK(json_array_size(by) == 5 &&
		  json_integer_value(json_array_get(by, 0)) == 'H' &&
		  json_integer_value(json_array_get(by, 4)) == 'o',
	      "bytes of Hello");
	/* the top lists: as many as asked, as sent, the floor for -inf and
	 * below -9999, a special token's text */
	const json_t *t0 =
	    json_object_get(json_array_get(c, 0), "top_logprobs");
	CHECK(json_array_size(t0) == 3, "top 0 has 3");
	CHECK(!strcmp(str_at(t0, 0, "token"), "Hello") &&
		  !strcmp(str_at(t0, 1, "token"), " world") &&
		  !strcmp(str_at(t0, 2, "token"), "<|im_end|>"),
	      "top 0 tokens");
	CHECK(num(json_object_get(json_array_get(t0, 1), "logprob")) ==
		      -9999.0 &&
		  num(json_object_get(json_array_get(t0, 2), "logprob")) ==
		      -9999.0,
	      "top 0: -inf and -12345 are -9999.0");
	CHECK(json_array_size(
		  json_object_get(json_array_get(t0, 2), "bytes")) == 10,
	      "<|im_end|>'s bytes are its text's 10");
	CHECK(json_array_size(
		  json_object_get(json_array_get(c, 1), "top_logprobs")) == 2,
	      "2 asked of 3 sent: 2");
	CHECK(json_array_size(
		  json_object_get(json_array_get(c, 3), "top_logprobs")) == 0,
	      "none sent: []");
	for (size_t i = 0; i < 5; i++) {
		const json_t *e = json_array_get(c, i);
		CHECK(json_object_size(e) == 4 && json_object_get(e, "token") &&
			  json_object_get(e, "logprob") &&
			  json_object_get(e, "bytes") &&
			  json_object_get(e, "top_logprobs"),
		      "entry %zu has token, logprob, bytes, top_logprobs", i);
	}

	/* ranges that add up to the whole, as streamed chunks do */
	json_t *all = json_array();
	size_t cuts[] = {0, 0, 2, 2, 4, 5};
	for (size_t k = 0; k + 1 < sizeof cuts / sizeof *cuts; k++) {
		json_t *part = lp_json(&lp, 1, cuts[k], cuts[k + 1], NULL);
		REQUIRE(part, "part");
		json_array_extend(all, json_object_get(part, "content"));
		json_decref(part);
	}
	CHECK(json_equal(all, c), "the ranges concatenated are the whole");
	json_decref(all);
	free(t);
	json_decref(o);
	gw_tok_stream_fini(&ts);
	gw_lp_fini(&lp);
	gw_lp_fini(&lp); /* twice: zeroed is fine */
}

static void test_completion(void)
{
	const int32_t hello = id_of("Hello"), world = id_of(" world"),
		      comma = id_of(",");
	const int32_t b0 = byte_id(0xe4), b1 = byte_id(0xb8),
		      b2 = byte_id(0xad);
	gw_lp lp = {0};
	gw_tok_stream ts;
	REQUIRE(gw_tok_stream_init(&ts, tok) == 0, "stream");
	/* logprobs 2: the sampled token is not among the likeliest */
	const int32_t top_a[2] = {world, comma};
	const float lp_a[2] = {-0.5f, -1.0f};
	feed(&lp, &ts, hello, -2.0f, 2, 2, top_a, lp_a);
	/* the sampled token among them: a key once */
	const int32_t top_b[2] = {comma, world};
	const float lp_b[2] = {-0.25f, -INFINITY};
	feed(&lp, &ts, comma, -0.25f, 2, 2, top_b, lp_b);
	/* 中 in pieces (two ids of one text, U+FFFD: a key once) */
	const int32_t top_c[2] = {b1, b0};
	const float lp_c[2] = {-0.5f, -0.75f};
	feed(&lp, &ts, b0, -0.75f, 2, 2, top_c, lp_c);
	feed(&lp, &ts, b1, -1.0f, 2, 0, NULL, NULL);
	feed(&lp, &ts, b2, -1.0f, 2, 0, NULL, NULL);
	feed(&lp, &ts, world, -3.0f, 0, 2, top_a, lp_a); /* logprobs 0 */
	char *t;
	json_t *o = lp_json(&lp, 0, 0, lp.n, &t);
	REQUIRE(o, "completion json");
	printf("completion: %s\n", t);
	CHECK(json_object_size(o) == 4, "four lists");
	const json_t *tk = json_object_get(o, "tokens"),
		     *tl = json_object_get(o, "token_logprobs"),
		     *tp = json_object_get(o, "top_logprobs"),
		     *to = json_object_get(o, "text_offset");
	CHECK(json_array_size(tk) == 6 && json_array_size(tl) == 6 &&
		  json_array_size(tp) == 6 && json_array_size(to) == 6,
	      "6 each: %s", t);
	CHECK(!strcmp(str_at(tk, 0, NULL), "Hello") &&
		  !strcmp(str_at(tk, 1, NULL), ",") &&
		  !strcmp(str_at(tk, 2, NULL), "\xef\xbf\xbd") &&
		  !strcmp(str_at(tk, 5, NULL), " world"),
	      "tokens");
	CHECK(num(json_array_get(tl, 0)) == -2.0 &&
		  num(json_array_get(tl, 5)) == -3.0,
	      "token_logprobs");
	/* the sampled token first, then the likeliest */
	const json_t *d0 = json_array_get(tp, 0);
	const char *k0 = json_object_iter_key(json_object_iter((json_t *)d0));
	CHECK(json_object_size(d0) == 3 && k0 && !strcmp(k0, "Hello") &&
		  num(json_object_get(d0, "Hello")) == -2.0 &&
		  num(json_object_get(d0, " world")) == -0.5 &&
		  num(json_object_get(d0, ",")) == -1.0,
	      "dict 0: %s", t);
	const json_t *d1 = json_array_get(tp, 1);
	CHECK(json_object_size(d1) == 2 &&
		  num(json_object_get(d1, ",")) == -0.25 &&
		  num(json_object_get(d1, " world")) == -9999.0,
	      "dict 1: the sampled token once, -inf the floor");
	const json_t *d2 = json_array_get(tp, 2);
	CHECK(json_object_size(d2) == 1 &&
		  num(json_object_get(d2, "\xef\xbf\xbd")) == -0.75,
	      "dict 2: one U+FFFD key, the sampled token's logprob");
	const json_t *d5 = json_array_get(tp, 5);
	CHECK(json_object_size(d5) == 1 &&
		  num(json_object_get(d5, " world")) == -3.0,
	      "logprobs 0: the sampled token alone");
	/* "Hello,中 world": H0 ,5 中6 (its three pieces) " world" 7 */
	static const long long want[6] = {0, 5, 6, 6, 6, 7};
	for (size_t i = 0; i < 6; i++)
		CHECK(json_integer_value(json_array_get(to, i)) == want[i],
		      "text_offset %zu: %lld, want %lld", i,
		      (long long)json_integer_value(json_array_get(to, i)),
		      want[i]);
	/* empty range: four empty lists */
	json_t *e = lp_json(&lp, 0, 3, 3, NULL);
	CHECK(e && json_array_size(json_object_get(e, "tokens")) == 0 &&
		  json_is_array(json_object_get(e, "text_offset")),
	      "an empty range");
	json_decref(e);
	free(t);
	json_decref(o);

	/* an id that names no token: "" and no bytes */
	gw_lp bad = {0};
	proto_step_entry be = {.token = gw_tok_vocab_size(tok) + 7,
			       .logprob = -1};
	REQUIRE(gw_lp_add(&bad, &be, 0) == 0, "add");
	json_t *b = lp_json(&bad, 1, 0, 1, NULL);
	CHECK(b &&
		  !strcmp(str_at(json_object_get(b, "content"), 0, "token"),
			  "") &&
		  json_array_size(json_object_get(
		      json_array_get(json_object_get(b, "content"), 0),
		      "bytes")) == 0,
	      "an unknown id");
	json_decref(b);
	gw_lp_fini(&bad);
	gw_tok_stream_fini(&ts);
	gw_lp_fini(&lp);
}

/* The text itself: strings escaped (a quote, a backslash, a newline, the
 * byte 0 and 0x1f), the numbers as Python prints the float's double, a
 * completion key holding a NUL kept apart from the empty one; the splice
 * into a dump whose content holds the key's text (escaped there). */
static void test_text(void)
{
	const int32_t q = byte_id('"'), bs = byte_id('\\'), nl = byte_id('\n'),
		      nul = byte_id(0), us = byte_id(0x1f);
	gw_lp lp = {0};
	gw_tok_stream ts;
	REQUIRE(gw_tok_stream_init(&ts, tok) == 0, "stream");
	const int32_t alt[1] = {nul};
	const float alt_lp[1] = {-2.0f};
	feed(&lp, &ts, q, -0.1f, 1, 1, alt, alt_lp);
	feed(&lp, &ts, bs, -0.25f, 1, 0, NULL, NULL);
	feed(&lp, &ts, nl, -INFINITY, 1, 0, NULL, NULL);
	feed(&lp, &ts, nul, -1.0f, 1, 0, NULL, NULL);
	feed(&lp, &ts, us, 0.0f, 1, 0, NULL, NULL);
	feed(&lp, &ts, us, -0.8152264356613159f, 1, 0, NULL, NULL);
	char *t;
	json_t *o = lp_json(&lp, 1, 0, lp.n, &t);
	printf("text: %s\n", t);
	CHECK(strstr(t, "{\"token\":\"\\\"\",\"logprob\":-0.10000000149011612,"
			"\"bytes\":[34],"),
	      "a quote, -0.1f: %s", t);
	CHECK(strstr(t, "{\"token\":\"\\\\\",\"logprob\":-0.25,\"bytes\":[92]"),
	      "a backslash, -0.25: %s", t);
	CHECK(
	    strstr(t, "{\"token\":\"\\n\",\"logprob\":-9999.0,\"bytes\":[10]"),
	    "a newline, -inf: %s", t);
	CHECK(
	    strstr(t, "{\"token\":\"\\u0000\",\"logprob\":-1.0,\"bytes\":[0]"),
	    "the byte 0, -1: %s", t);
	CHECK(
	    strstr(t, "{\"token\":\"\\u001f\",\"logprob\":0.0,\"bytes\":[31]"),
	    "0x1f, 0: %s", t);
	/* the fewest digits that read back (%.17g: -0.81522643566131592) */
	CHECK(strstr(t, "\"logprob\":-0.8152264356613159,"),
	      "Python's repr of the double: %s", t);
	const json_t *c = json_object_get(o, "content");
	CHECK(json_string_length(
		  json_object_get(json_array_get(c, 3), "token")) == 1,
	      "the byte 0's token parses back as one byte");
	free(t);
	json_decref(o);
	/* a completion: the byte 0's text and "" are two keys */
	gw_lp lq = {0};
	const int32_t two[2] = {nul, gw_tok_vocab_size(tok) + 3};
	const float two_lp[2] = {-1.0f, -2.0f};
	feed(&lq, &ts, q, -0.5f, 2, 2, two, two_lp);
	/* (jansson reads no NUL in a key: the text is checked) */
	moor_buf kt = {0};
	REQUIRE(gw_lp_write(&lq, tok, 0, 0, 1, &kt) == 0, "write");
	printf("keys: %s\n", kt.p);
	CHECK(strstr(kt.p, "[{\"\\\"\":-0.5,\"\\u0000\":-1.0,\"\":-2.0}]"),
	      "keys \"\\\"\", \"\\u0000\" and \"\": %s", kt.p);
	moor_buf_fini(&kt);
	gw_lp_fini(&lq);

	/* the splice: the choice's null, not the text in the content */
	json_t *r = json_pack("{s:[{s:i,s:{s:s},s:n,s:s}]}", "choices", "index",
			      0, "message", "content", "\"logprobs\":null",
			      "logprobs", "finish_reason", "stop");
	char *rd = json_dumps(r, JSON_COMPACT | JSON_PRESERVE_ORDER);
	json_decref(r);
	moor_buf lpt = {0}, out = {0};
	REQUIRE(gw_lp_write(&lp, tok, 1, 0, 2, &lpt) == 0, "write");
	REQUIRE(gw_lp_splice(&out, rd, strlen(rd), lpt.p, lpt.len) == 0,
		"splice");
	printf("spliced: %s\n", out.p);
	json_t *sp = json_loadb(out.p, out.len, JSON_ALLOW_NUL, NULL);
	const json_t *ch = json_array_get(json_object_get(sp, "choices"), 0);
	CHECK(
	    sp &&
		!strcmp(json_string_value(json_object_get(
			    json_object_get(ch, "message"), "content")),
			"\"logprobs\":null") &&
		json_array_size(json_object_get(json_object_get(ch, "logprobs"),
						"content")) == 2 &&
		!strcmp(json_string_value(json_object_get(ch, "finish_reason")),
			"stop"),
	    "the splice: %s", out.p);
	json_decref(sp);
	free(rd);
	moor_buf_fini(&lpt);
	moor_buf_fini(&out);
	gw_tok_stream_fini(&ts);
	gw_lp_fini(&lp);
}

int main(void)
{
	char path[4096], err[MOOR_ERRLEN];
	snprintf(path, sizeof path, "%s/models/tiny/tokenizer.json", t_src());
	REQUIRE(gw_tok_load(path, &tok, err) == 0,
		"%s (deploy/setup writes models/tiny)", err);
	test_chat();
	test_completion();
	test_text();
	gw_tok_free(tok);
	return t_done("test_gw_logprobs_json");
}
