/* test_tok_stream_decode_whole_chars: the stream decoder, fed token by token,
 * hands out only whole UTF-8 characters, and what it hands out (flush
 * included) is decode() of all the ids: on every corpus string, and on
 * random id sequences full of stray bytes, whose decode() is also checked
 * against HF's (U+FFFD for each maximal invalid subpart). */
#include "tok_test.h"

/* Strict UTF-8: a piece that ends inside a character fails this. */
static int whole_utf8(const uint8_t *s, size_t n)
{
	for (size_t i = 0; i < n;) {
		uint8_t c = s[i];
		size_t k;
		uint8_t lo = 0x80, hi = 0xbf;
		if (c < 0x80) {
			i++;
			continue;
		} else if (c >= 0xc2 && c <= 0xdf) {
			k = 1;
		} else if (c >= 0xe0 && c <= 0xef) {
			k = 2;
			lo = c == 0xe0 ? 0xa0 : 0x80;
			hi = c == 0xed ? 0x9f : 0xbf;
		} else if (c >= 0xf0 && c <= 0xf4) {
			k = 3;
			lo = c == 0xf0 ? 0x90 : 0x80;
			hi = c == 0xf4 ? 0x8f : 0xbf;
		} else {
			return 0;
		}
		if (i + k >= n)
			return 0;
		if (s[i + 1] < lo || s[i + 1] > hi)
			return 0;
		for (size_t j = 2; j <= k; j++)
			if ((s[i + j] & 0xc0) != 0x80)
				return 0;
		i += k + 1;
	}
	return 1;
}

typedef struct buf {
	char *p;
	size_t n, cap;
} buf;

static void put(buf *b, const char *s, size_t n)
{
	if (b->n + n + 1 > b->cap) {
		b->cap = (b->n + n + 1) * 2;
		b->p = realloc(b->p, b->cap);
		REQUIRE(b->p, "out of memory");
	}
	memcpy(b->p + b->n, s, n);
	b->n += n;
}

static size_t pieces_bad;

/* Stream ids through s; returns the concatenation (in b). */
static void stream(gw_tok_stream *s, const int32_t *ids, size_t n, buf *b)
{
	b->n = 0;
	for (size_t i = 0; i < n; i++) {
		const char *p;
		size_t k;
		int rc = gw_tok_stream_push(s, ids[i], &p, &k);
		REQUIRE(rc == 0, "push %d: %s", ids[i], moor_strerror(rc));
		if (!whole_utf8((const uint8_t *)p, k)) {
			if (pieces_bad++ < 5) {
				fprintf(stderr, "piece after id %d of ",
					ids[i]);
				tt_show_ids(stderr, ids, n, 20);
				fprintf(stderr, " splits a character: ");
				tt_show(stderr, p, k, 40);
				fprintf(stderr, "\n");
			}
		}
		put(b, p, k);
	}
	const char *p;
	size_t k;
	gw_tok_stream_flush(s, &p, &k);
	CHECK(whole_utf8((const uint8_t *)p, k), "flush piece");
	put(b, p, k);
}

static uint32_t rnd_state = 12345;
static uint32_t rnd(void)
{
	rnd_state ^= rnd_state << 13;
	rnd_state ^= rnd_state >> 17;
	rnd_state ^= rnd_state << 5;
	return rnd_state;
}

static int32_t byte_tok(gw_tok *tok, int b)
{
	char s[2] = {(char)b, 0};
	int32_t id = gw_tok_token_id(tok, s);
	REQUIRE(id >= 0, "no token for byte %02x", b);
	return id;
}

/* The explicit cases: pieces, one per push, then the flush. */
static void expect(gw_tok *tok, gw_tok_stream *s, const int *bytes_or_ids,
		   size_t n, const char *const *want)
{
	for (size_t i = 0; i <= n; i++) {
		const char *p;
		size_t k;
		if (i < n) {
			int v = bytes_or_ids[i];
			int32_t id = v < 256 ? byte_tok(tok, v) : v;
			gw_tok_stream_push(s, id, &p, &k);
		} else {
			gw_tok_stream_flush(s, &p, &k);
		}
		CHECK(k == strlen(want[i]) && memcmp(p, want[i], k) == 0,
		      "case piece %zu: got %.*s want %s", i, (int)k, p,
		      want[i]);
	}
}

int main(void)
{
	tt_require_oracles();
	const char *tok_json = tt_src(TT_QWEN "tokenizer.json");
	tt_gen_corpus("tok-stream-corpus.json");
	char err[MOOR_ERRLEN];
	gw_tok *tok;
	REQUIRE(gw_tok_load(tok_json, &tok, err) == 0, "load: %s", err);
	gw_tok_stream s;
	REQUIRE(gw_tok_stream_init(&s, tok) == 0, "stream init");

#define FFFD "\xef\xbf\xbd"
	/* 中 = e4 b8 ad, byte by byte; then cut short by 'a'; then by the
	 * end of the stream; stray bytes at once; a special token after a
	 * partial character */
	expect(tok, &s, (int[]){0xe4, 0xb8, 0xad}, 3,
	       (const char *[]){"", "", "\xe4\xb8\xad", ""});
	expect(tok, &s, (int[]){0xe4, 0xb8, 'a'}, 3,
	       (const char *[]){"", "", FFFD "a", ""});
	expect(tok, &s, (int[]){'x', 0xf0, 0x9f}, 3,
	       (const char *[]){"x", "", "", FFFD});
	expect(tok, &s, (int[]){0x80, 0xff, 0xc0, 'b'}, 4,
	       (const char *[]){FFFD, FFFD, FFFD, "b", ""});
	expect(tok, &s, (int[]){0xed, 0xa0, 0x80}, 3, /* a surrogate */
	       (const char *[]){"", FFFD FFFD, FFFD, ""});
	expect(tok, &s, (int[]){0xe4, 151645}, 2,
	       (const char *[]){"", FFFD "<|im_end|>", ""});
	const char *p;
	size_t k;
	CHECK(gw_tok_stream_push(&s, -1, &p, &k) == MOOR_ERANGE && k == 0,
	      "id -1");
	CHECK(gw_tok_stream_push(&s, gw_tok_vocab_size(tok), &p, &k) ==
		  MOOR_ERANGE,
	      "id past the vocabulary");

	/* every corpus string */
	json_t *cj = tt_load_json("tok-stream-corpus.json");
	size_t n;
	tt_str *corpus = tt_strings(cj, &n);
	buf b = {0};
	size_t bad = 0, tokens = 0;
	for (size_t i = 0; i < n; i++) {
		int32_t *ids;
		size_t m;
		REQUIRE(
		    gw_tok_encode(tok, corpus[i].s, corpus[i].n, &ids, &m) == 0,
		    "encode %zu", i);
		char *text;
		size_t tn;
		REQUIRE(gw_tok_decode(tok, ids, m, &text, &tn) == 0, "decode");
		stream(&s, ids, m, &b);
		if (b.n != tn || memcmp(b.p, text, tn) != 0) {
			if (bad++ < 5) {
				fprintf(stderr, "string %zu: stream ", i);
				tt_show(stderr, b.p, b.n, 80);
				fprintf(stderr, " != decode ");
				tt_show(stderr, text, tn, 80);
				fprintf(stderr, "\n");
			}
		}
		tokens += m;
		free(text);
		free(ids);
	}

	/* random id sequences: vocab tokens, added tokens and single bytes
	 * (continuation and lead bytes among them) */
	enum { NSEQ = 3000 };
	json_t *seqs = json_array();
	int32_t *all[NSEQ];
	size_t lens[NSEQ];
	int32_t bytes[256];
	for (int c = 1; c < 256; c++)
		bytes[c] = byte_tok(tok, c);
	for (int q = 0; q < NSEQ; q++) {
		lens[q] = 1 + rnd() % 16;
		all[q] = malloc(lens[q] * sizeof *all[q]);
		json_t *a = json_array();
		for (size_t j = 0; j < lens[q]; j++) {
			uint32_t r = rnd() % 10;
			int32_t id = r < 5   ? (int32_t)(rnd() % 151643)
				     : r < 6 ? 151643 + (int32_t)(rnd() % 26)
					     : bytes[1 + rnd() % 255];
			all[q][j] = id;
			json_array_append_new(a, json_integer(id));
		}
		json_array_append_new(seqs, a);
	}
	REQUIRE(json_dump_file(seqs, "tok-stream-ids.json", JSON_COMPACT) == 0,
		"write ids");
	tt_oracle_decode(tok_json, "tok-stream-ids.json", "tok-stream-hf.json");
	json_t *hf = tt_load_json("tok-stream-hf.json");
	REQUIRE(json_array_size(hf) == NSEQ, "oracle answers");
	size_t bad_hf = 0, bad_rs = 0;
	for (int q = 0; q < NSEQ; q++) {
		char *text;
		size_t tn;
		REQUIRE(gw_tok_decode(tok, all[q], lens[q], &text, &tn) == 0,
			"decode");
		json_t *h = json_array_get(hf, q);
		if (tn != json_string_length(h) ||
		    memcmp(text, json_string_value(h), tn) != 0) {
			if (bad_hf++ < 5) {
				fprintf(stderr, "ids ");
				tt_show_ids(stderr, all[q], lens[q], 20);
				fprintf(stderr, ": decode ");
				tt_show(stderr, text, tn, 80);
				fprintf(stderr, " != hf ");
				tt_show(stderr, json_string_value(h),
					json_string_length(h), 80);
				fprintf(stderr, "\n");
			}
		}
		stream(&s, all[q], lens[q], &b);
		if (b.n != tn || memcmp(b.p, text, tn) != 0)
			bad_rs++;
		free(text);
		free(all[q]);
	}
	CHECK(pieces_bad == 0, "%zu pieces split a character", pieces_bad);
	CHECK(bad == 0, "%zu of %zu corpus strings stream differently", bad, n);
	CHECK(bad_hf == 0, "%zu of %d random id lists decode unlike HF", bad_hf,
	      NSEQ);
	CHECK(bad_rs == 0, "%zu of %d random id lists stream differently",
	      bad_rs, NSEQ);
	printf("streamed %zu corpus strings (%zu tokens) and %d random id "
	       "lists (decode checked against HF)\n",
	       n, tokens, NSEQ);
	json_decref(seqs);
	json_decref(hf);
	json_decref(cj);
	free(corpus);
	free(b.p);
	gw_tok_stream_fini(&s);
	gw_tok_free(tok);
	return t_done("test_tok_stream_decode_whole_chars");
}
