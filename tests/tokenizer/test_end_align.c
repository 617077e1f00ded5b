/* test_end_align: the end alignment (gatewayd/text/endalign.h) on the real
 * Qwen3 tokenizer, alone. Rows are a rendered prompt plus "generated" ids
 * spelled otherwise than the tokenizer spells the same text (one token per
 * character, as a model may choose); copies are the text a client sends
 * back, rendered and tokenized again. Each case checks what the alignment
 * serves: the rows' ids up to the end anchor, then ids whose bytes are the
 * copy's rest, so the served prompt's bytes are the copy's bytes with the
 * hidden spans and left-out reasoning put back; and that a copy with one
 * other non-whitespace byte is served as sent. */
#include <stdlib.h>
#include <string.h>

#include "t.h"

#include "endalign.h"
#include "tok_test.h"
#include "tokenizer.h"

static gw_tok *tok;

typedef struct ids {
	int32_t *v;
	size_t n;
} ids;

static void cat(ids *a, const int32_t *v, size_t n)
{
	a->v = realloc(a->v, (a->n + n + 1) * sizeof *a->v);
	memcpy(a->v + a->n, v, n * sizeof *v);
	a->n += n;
}

/* the tokenizer's own spelling */
static void enc(ids *a, const char *text)
{
	int32_t *v;
	size_t n;
	REQUIRE(gw_tok_encode(tok, text, strlen(text), &v, &n) == 0, "encode");
	cat(a, v, n);
	free(v);
}

/* another spelling of the same text: one token per character */
static void enc_chars(ids *a, const char *text)
{
	for (const char *p = text; *p;) {
		size_t k = 1;
		while ((p[k] & 0xC0) == 0x80)
			k++;
		char c[8] = {0};
		memcpy(c, p, k);
		enc(a, c);
		p += k;
	}
}

static char *dec(const int32_t *v, size_t n)
{
	char *t;
	size_t l;
	REQUIRE(gw_tok_decode(tok, v, n, &t, &l) == 0, "decode");
	return t;
}

static size_t common(const ids *a, const ids *b)
{
	size_t i = 0;
	while (i < a->n && i < b->n && a->v[i] == b->v[i])
		i++;
	return i;
}

/* Aligns copy to rows (end = rows.n) with the marks; checks the served
 * prompt's head is the rows and its bytes are want (the copy's text with
 * what the rows hold and the copy lacks). Returns the pass. */
static int align(const char *name, const ids *rows, const ids *copy,
		 const gw_align_mark *mk, size_t n_mk, int pass2,
		 const char *want, gw_align_out *o)
{
	size_t c = common(rows, copy);
	gw_align_in in = {.tok = tok,
			  .copy = copy->v,
			  .n_copy = copy->n,
			  .common = c,
			  .tail = rows->v + c,
			  .end = rows->n,
			  .marks = mk,
			  .n_marks = n_mk,
			  .reasoning_pass = pass2};
	REQUIRE(c < rows->n, "%s: the copy does not part from the rows",
		name);
	REQUIRE(gw_end_align(&in, o) == 0, "%s: align failed", name);
	if (!o->pass) {
		CHECK(!o->ids && !o->n, "%s: not aligned, yet ids", name);
		return 0;
	}
	CHECK(o->n >= rows->n &&
		  !memcmp(o->ids, rows->v, rows->n * sizeof *rows->v),
	      "%s: the served head is not the rows' ids", name);
	char *got = dec(o->ids, o->n);
	CHECK(want && !strcmp(got, want), "%s: served\n[%s]\nwant\n[%s]",
	      name, got, want ? want : "(null)");
	free(got);
	return o->pass;
}

int main(void)
{
	char err[MOOR_ERRLEN];
	/* the oracles' copy of the tokenizer, or the tiny model's (the same
	 * file, which deploy/setup --from writes from its bundle) */
	const char *tj = tt_src(TT_QWEN "tokenizer.json");
	struct stat st;
	if (stat(tj, &st) != 0)
		tj = tt_src("models/tiny/tokenizer.json");
	if (stat(tj, &st) != 0)
		T_ORACLE_MISSING("the Qwen3 tokenizer is missing (%s, %s): run "
				 "deploy/setup",
				 tt_src(TT_QWEN "tokenizer.json"), tj);
	REQUIRE(gw_tok_load(tj, &tok, err) == 0, "%s", err);
	const char *P = "<|im_start|>user\nTell me about lighthouses."
			"<|im_end|>\n<|im_start|>assistant\n";
	const char *A = "Lighthouses guide ships home, standing tall.";
	const char *NEXT = "<|im_end|>\n<|im_start|>user\nMore, please."
			   "<|im_end|>\n<|im_start|>assistant\n";
	char want[4096], text[4096];
	gw_align_out o;

	/* 1. a respelled answer: every byte the rows' own */
	ids rows = {0}, copy = {0};
	enc(&rows, P);
	size_t g0 = rows.n;
	enc_chars(&rows, A);
	gw_align_mark gen = {g0, rows.n - g0, GW_MARK_GEN};
	snprintf(text, sizeof text, "%s%s%s", P, A, NEXT);
	enc(&copy, text);
	CHECK(common(&rows, &copy) < rows.n, "case 1 is not respelled");
	CHECK(align("respelled", &rows, &copy, &gen, 1, 1, text, &o) == 1,
	      "respelled: pass %d", o.pass);
	CHECK(o.hidden == 0 && o.reasoning == 0, "respelled: nothing put back");
	gw_align_out_fini(&o);

	/* 2. one other byte (a client that edited the answer): as sent */
	free(copy.v);
	copy = (ids){0};
	snprintf(text, sizeof text, "%s%s%s", P,
		 "Lighthouses guide ships home, standing tall!", NEXT);
	enc(&copy, text);
	CHECK(align("edited", &rows, &copy, &gen, 1, 1, NULL, &o) == 0,
	      "edited: aligned");
	gw_align_out_fini(&o);

	/* 3. the end inside a copy token: rows end after "Hel", the copy
	 * spells "Hello" as one token */
	ids r3 = {0}, c3 = {0};
	enc(&r3, P);
	enc_chars(&r3, "Hel");
	snprintf(text, sizeof text, "%sHello there%s", P, NEXT);
	enc(&c3, text);
	CHECK(align("mid-token", &r3, &c3, NULL, 0, 1, text, &o) == 1,
	      "mid-token: pass %d", o.pass);
	gw_align_out_fini(&o);

	/* 4. a hidden close phrase before </think>: the copy lacks it and
	 * its whitespace is the template's (the reasoning trimmed, "\n"
	 * before </think>) */
	const char *PT = "<|im_start|>user\nWhy?<|im_end|>\n"
			 "<|im_start|>assistant\n<think>\n";
	ids r4 = {0}, c4 = {0};
	enc(&r4, PT);
	size_t g4 = r4.n;
	enc_chars(&r4, "Because of the sea.  ");
	size_t h4 = r4.n;
	enc(&r4, "\n\nConsidering the limited time, I have to give the "
		 "solution based on the thinking directly now.\n");
	size_t h4e = r4.n;
	enc(&r4, "</think>\n\n");
	enc_chars(&r4, "The sea.");
	gw_align_mark m4[2] = {{g4, h4 - g4, GW_MARK_GEN},
			       {h4, h4e - h4, GW_MARK_HIDDEN}};
	snprintf(text, sizeof text, "%s%s%s", PT,
		 "Because of the sea.\n</think>\n\nThe sea.", NEXT);
	enc(&c4, text);
	char *hid = dec(r4.v, r4.n);
	snprintf(want, sizeof want, "%s%s", hid, NEXT);
	free(hid);
	CHECK(align("hidden", &r4, &c4, m4, 2, 0, want, &o) == 1,
	      "hidden: pass %d", o.pass);
	CHECK(o.hidden == h4e - h4, "hidden: %zu tokens put back, want %zu",
	      o.hidden, h4e - h4);
	gw_align_out_fini(&o);

	/* 5. reasoning left out: the rows think, the copy renders the
	 * answer with an empty think (Qwen3.8's preserve_thinking) or
	 * without one (Qwen3's history) */
	ids r5 = {0};
	enc(&r5, PT);
	size_t g5 = r5.n;
	enc_chars(&r5, "Because of the sea.");
	enc(&r5, "\n</think>\n\n");
	enc_chars(&r5, "The sea.");
	gw_align_mark m5 = {g5, r5.n - g5, GW_MARK_GEN};
	char *rt = dec(r5.v, r5.n);
	snprintf(want, sizeof want, "%s%s", rt, NEXT);
	free(rt);
	const char *copies5[2] = {
	    "<|im_start|>user\nWhy?<|im_end|>\n<|im_start|>assistant\n"
	    "<think>\n\n</think>\n\nThe sea.",
	    "<|im_start|>user\nWhy?<|im_end|>\n<|im_start|>assistant\n"
	    "The sea."};
	for (int v = 0; v < 2; v++) {
		ids c5 = {0};
		snprintf(text, sizeof text, "%s%s", copies5[v], NEXT);
		enc(&c5, text);
		CHECK(align(v ? "no think" : "empty think", &r5, &c5, &m5, 1,
			    1, want, &o) == 2,
		      "reasoning %d: pass %d", v, o.pass);
		CHECK(o.reasoning > 0, "reasoning %d: none put back", v);
		gw_align_out_fini(&o);
		CHECK(align("first pass alone", &r5, &c5, &m5, 1, 0, NULL,
			    &o) == 0,
		      "reasoning %d: the first pass alone aligned", v);
		gw_align_out_fini(&o);
		free(c5.v);
	}

	/* 6. two answers, the first's reasoning left out with its tags,
	 * the second's emptied */
	ids r6 = {0}, c6 = {0};
	enc(&r6, PT);
	size_t a0 = r6.n;
	enc_chars(&r6, "Hmm.");
	enc(&r6, "\n</think>\n\n");
	enc_chars(&r6, "One.");
	gw_align_mark m6[2] = {{a0, r6.n - a0, GW_MARK_GEN}, {0, 0, 0}};
	enc(&r6, "<|im_end|>\n<|im_start|>user\nAnd?<|im_end|>\n"
		 "<|im_start|>assistant\n<think>\n");
	size_t a1 = r6.n;
	enc_chars(&r6, "Well.");
	enc(&r6, "\n</think>\n\n");
	enc_chars(&r6, "Two.");
	m6[1] = (gw_align_mark){a1, r6.n - a1, GW_MARK_GEN};
	snprintf(text, sizeof text,
		 "<|im_start|>user\nWhy?<|im_end|>\n<|im_start|>assistant\n"
		 "One.<|im_end|>\n<|im_start|>user\nAnd?<|im_end|>\n"
		 "<|im_start|>assistant\n<think>\n\n</think>\n\nTwo.%s",
		 NEXT);
	enc(&c6, text);
	rt = dec(r6.v, r6.n);
	snprintf(want, sizeof want, "%s%s", rt, NEXT);
	free(rt);
	CHECK(align("two regions", &r6, &c6, m6, 2, 1, want, &o) == 2,
	      "two regions: pass %d", o.pass);
	gw_align_out_fini(&o);

	/* 7. bytes that are not UTF-8: the client got U+FFFD */
	int32_t lone = gw_tok_token_id(tok, "\xe4");
	size_t lb = 0;
	const char *lbytes = lone >= 0 ? gw_tok_token_bytes(tok, lone, &lb)
				       : NULL;
	if (lbytes && lb == 1 && (uint8_t)lbytes[0] == 0xe4) {
		ids r7 = {0}, c7 = {0};
		enc(&r7, P);
		enc_chars(&r7, "Odd ");
		cat(&r7, &lone, 1);
		enc_chars(&r7, " bytes.");
		snprintf(text, sizeof text, "%sOdd \xef\xbf\xbd bytes.%s", P,
			 NEXT);
		enc(&c7, text);
		CHECK(align("U+FFFD", &r7, &c7, NULL, 0, 1, text, &o) == 1,
		      "U+FFFD: pass %d", o.pass);
		gw_align_out_fini(&o);
		free(r7.v);
		free(c7.v);
	} else {
		CHECK(0, "no single-byte token for 0xE4 (id %d)", lone);
	}

	/* the normalizer with tags: "caf" "e" | U+0301 "!": the composed
	 * U+00E9 takes the tag of its span's first byte, the rest keep
	 * theirs; NFC text comes back as NULL */
	{
		const char in[] = "cafe\xcc\x81!";
		const uint32_t tg[] = {0, 0, 0, 1, 2, 2, 3};
		char *no;
		uint32_t *nt;
		size_t nn;
		REQUIRE(
		    gw_tok_normalize_tagged(tok, in, 7, tg, &no, &nt, &nn) == 0,
		    "normalize_tagged");
		static const uint32_t want_t[] = {0, 0, 0, 1, 1, 3};
		CHECK(no && nn == 6 && !memcmp(no, "caf\xc3\xa9!", 6) &&
			  !memcmp(nt, want_t, sizeof want_t),
		      "normalize_tagged: %zu bytes", nn);
		free(no);
		free(nt);
		REQUIRE(gw_tok_normalize_tagged(tok, "caf\xc3\xa9", 5, tg, &no,
						&nt, &nn) == 0,
			"normalize_tagged");
		CHECK(!no && !nt && nn == 5, "NFC text: not NULL");
	}

	/* 8. an answer that is not NFC (a model's ids may spell any bytes):
	 * a CJK compatibility ideograph (U+F90C, whose NFC is U+5948),
	 * "e" and a combining acute in two tokens (NFC: U+00E9) and a
	 * Hebrew shin with its dot before its dagesh (NFC puts the dagesh,
	 * class 21, first). The client receives these bytes and sends them
	 * back; the tokenizer normalizes the copy, so no byte of it there is
	 * the rows' own until the rows are compared normalized too. */
	const char *A8 = "Kanji \xef\xa4\x8c, cafe\xcc\x81 and "
			 "\xd7\xa9\xd7\x81\xd6\xbc done.";
	ids r8 = {0}, c8 = {0};
	enc(&r8, P);
	size_t g8 = r8.n;
	int bytes_ok = 1;
	for (const char *q = A8; *q; q++) {
		char one[2] = {*q, 0};
		int32_t id = gw_tok_token_id(tok, one);
		size_t bl = 0;
		const char *bb =
		    id >= 0 ? gw_tok_token_bytes(tok, id, &bl) : NULL;
		if (!bb || bl != 1 || bb[0] != *q)
			bytes_ok = 0;
		else
			cat(&r8, &id, 1);
	}
	CHECK(bytes_ok, "not NFC: a byte with no single-byte token");
	gw_align_mark m8 = {g8, r8.n - g8, GW_MARK_GEN};
	snprintf(text, sizeof text, "%s%s%s", P, A8, NEXT);
	enc(&c8, text);
	rt = dec(c8.v, c8.n);
	CHECK(strcmp(rt, text) != 0, "not NFC: the tokenizer did not "
				     "normalize the copy");
	free(rt);
	CHECK(align("not NFC", &r8, &c8, &m8, 1, 1, text, &o) == 1,
	      "not NFC: pass %d", o.pass);
	gw_align_out_fini(&o);
	/* the same with one other letter: as sent */
	free(c8.v);
	c8 = (ids){0};
	snprintf(text, sizeof text, "%s%s%s", P,
		 "Kanji \xef\xa4\x8c, cafe\xcc\x81 and "
		 "\xd7\xa9\xd7\x81\xd6\xbc dune.",
		 NEXT);
	enc(&c8, text);
	CHECK(align("not NFC, edited", &r8, &c8, &m8, 1, 1, NULL, &o) == 0,
	      "not NFC, edited: aligned (pass %d)", o.pass);
	gw_align_out_fini(&o);
	free(r8.v);
	free(c8.v);

	free(rows.v);
	free(copy.v);
	free(r3.v);
	free(c3.v);
	free(r4.v);
	free(c4.v);
	free(r5.v);
	free(r6.v);
	free(c6.v);
	gw_tok_free(tok);
	return t_done("test_end_align");
}
