/* logprobs.c: a generation's logprobs kept and written in OpenAI's shapes
 * (logprobs.h says which and why). */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "logprobs.h"
#include "moor.h"

void gw_lp_fini(gw_lp *lp)
{
	moor_buf_fini(&lp->toks);
	moor_buf_fini(&lp->alts);
	memset(lp, 0, sizeof *lp);
}

int gw_lp_add(gw_lp *lp, const proto_step_entry *e, uint32_t top)
{
	uint32_t k = e->n_top < top ? e->n_top : top;
	if (k > PROTO_MAX_TOP)
		k = PROTO_MAX_TOP;
	size_t at = lp->alts.len / sizeof(gw_lp_alt);
	if (lp->toks.err || lp->alts.err || at + k > UINT32_MAX)
		return -ENOMEM;
	gw_lp_alt *a = (gw_lp_alt *)moor_buf_room(&lp->alts, k * sizeof *a);
	gw_lp_tok *t =
	    a ? (gw_lp_tok *)moor_buf_room(&lp->toks, sizeof *t) : NULL;
	if (!t) {
		lp->alts.err = -ENOMEM; /* sticky for both */
		return -ENOMEM;
	}
	for (uint32_t i = 0; i < k; i++) {
		a[i].id = e->top_id[i];
		a[i].lp = e->top_lp[i];
	}
	*t = (gw_lp_tok){.token = e->token,
			 .logprob = e->logprob,
			 .n_top = k,
			 .top_at = (uint32_t)at,
			 .char_at = lp->chars};
	lp->n++;
	return 0;
}

void gw_lp_text(gw_lp *lp, const char *piece, size_t len)
{
	for (size_t i = 0; i < len; i++)
		if (((uint8_t)piece[i] & 0xc0) != 0x80) /* a character's lead */
			lp->chars++;
}

const gw_lp_tok *gw_lp_at(const gw_lp *lp, size_t i)
{
	return (const gw_lp_tok *)lp->toks.p + i;
}

/* ---- writing ------------------------------------------------------------ */

/* What writing needs besides lp: a decoder of one token's text, its
 * buffer, and a completion dict's keys so far. */
typedef struct lp_wr {
	const gw_tok *tok;
	moor_buf *out;
	gw_tok_stream ts;
	moor_buf text;	 /* the token's text (decode) */
	const char *raw; /* the token's bytes (borrowed from tok) */
	size_t raw_len;
	moor_buf keys; /* a dict's keys so far: (size_t length, bytes)... */
} lp_wr;

/* A logprob: the float's double in the fewest of 15, 16 or 17 digits that
 * read back as that double (exact; Python's repr of it, so what vLLM
 * writes, where 15 are not fewer than its shortest), ".0" where that reads
 * as an integer; not finite or below the floor: the floor. */
static void put_num(moor_buf *b, float x)
{
	double d = isfinite(x) && x >= GW_LP_FLOOR ? (double)x : GW_LP_FLOOR;
	char t[40];
	int n = 0;
	for (int prec = 15; prec <= 17; prec++) {
		n = snprintf(t, sizeof t, "%.*g", prec, d);
		if (strtod(t, NULL) == d)
			break;
	}
	moor_buf_put(b, t, (size_t)n);
	if (!strpbrk(t, ".eE"))
		moor_buf_put(b, ".0", 2);
}

/* s[0, n) (UTF-8) as a JSON string. */
static void put_str(moor_buf *b, const char *s, size_t n)
{
	moor_buf_put(b, "\"", 1);
	size_t run = 0; /* bytes that go as they are, from s + i - run */
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];
		if (c >= 0x20 && c != '"' && c != '\\') {
			run++;
			continue;
		}
		moor_buf_put(b, s + i - run, run);
		run = 0;
		if (c == '"' || c == '\\') {
			char e[2] = {'\\', (char)c};
			moor_buf_put(b, e, 2);
		} else if (c == '\n') {
			moor_buf_put(b, "\\n", 2);
		} else if (c == '\t') {
			moor_buf_put(b, "\\t", 2);
		} else if (c == '\r') {
			moor_buf_put(b, "\\r", 2);
		} else {
			moor_buf_printf(b, "\\u%04x", c);
		}
	}
	moor_buf_put(b, s + n - run, run);
	moor_buf_put(b, "\"", 1);
}

/* id's own text into w->text (U+FFFD for what is not UTF-8 alone), its
 * bytes in w->raw. */
static void decode(lp_wr *w, int32_t id)
{
	moor_buf_reset(&w->text);
	moor_buf_put(&w->text, "", 0);
	w->raw = gw_tok_token_bytes(w->tok, id, &w->raw_len);
	const char *piece;
	size_t len;
	if (!w->raw || gw_tok_stream_push(&w->ts, id, &piece, &len)) {
		w->raw_len = 0;
		return;
	}
	moor_buf_put(&w->text, piece, len);
	/* the push's piece is in the stream's buffer, which the flush
	 * overwrites: it was copied first */
	gw_tok_stream_flush(&w->ts, &piece, &len);
	moor_buf_put(&w->text, piece, len);
}

/* {"token","logprob","bytes" of id, lp, without the closing brace */
static void chat_one(lp_wr *w, int32_t id, float lp)
{
	moor_buf *b = w->out;
	decode(w, id);
	moor_buf_puts(b, "{\"token\":");
	put_str(b, w->text.p, w->text.len);
	moor_buf_puts(b, ",\"logprob\":");
	put_num(b, lp);
	moor_buf_puts(b, ",\"bytes\":[");
	for (size_t i = 0; i < w->raw_len; i++)
		moor_buf_printf(b, i ? ",%u" : "%u", (uint8_t)w->raw[i]);
	moor_buf_put(b, "]", 1);
}

static void chat_write(lp_wr *w, const gw_lp *lp, size_t from, size_t to)
{
	const gw_lp_alt *alts = (const gw_lp_alt *)lp->alts.p;
	moor_buf *b = w->out;
	moor_buf_puts(b, "{\"content\":[");
	for (size_t i = from; i < to; i++) {
		const gw_lp_tok *t = gw_lp_at(lp, i);
		if (i > from)
			moor_buf_put(b, ",", 1);
		chat_one(w, t->token, t->logprob);
		moor_buf_puts(b, ",\"top_logprobs\":[");
		for (uint32_t k = 0; k < t->n_top; k++) {
			if (k)
				moor_buf_put(b, ",", 1);
			chat_one(w, alts[t->top_at + k].id,
				 alts[t->top_at + k].lp);
			moor_buf_put(b, "}", 1);
		}
		moor_buf_puts(b, "]}");
	}
	moor_buf_puts(b, "],\"refusal\":null}");
}

/* "text":lp into a completion's dict unless the text is a key already
 * (first: whether it is the dict's first key) */
static void dict_put(lp_wr *w, int32_t id, float lp, int first)
{
	decode(w, id);
	if (first)
		moor_buf_reset(&w->keys);
	for (size_t at = 0; at < w->keys.len;) {
		size_t kl;
		memcpy(&kl, w->keys.p + at, sizeof kl);
		at += sizeof kl;
		if (kl == w->text.len && !memcmp(w->keys.p + at, w->text.p, kl))
			return;
		at += kl;
	}
	/* each key as its length and its bytes (a token's text may hold a
	 * NUL: the byte 0's token) */
	moor_buf_put(&w->keys, &w->text.len, sizeof w->text.len);
	moor_buf_put(&w->keys, w->text.p, w->text.len);
	moor_buf *b = w->out;
	if (!first)
		moor_buf_put(b, ",", 1);
	put_str(b, w->text.p, w->text.len);
	moor_buf_put(b, ":", 1);
	put_num(b, lp);
}

static void completion_write(lp_wr *w, const gw_lp *lp, size_t from, size_t to)
{
	const gw_lp_alt *alts = (const gw_lp_alt *)lp->alts.p;
	moor_buf *b = w->out;
	moor_buf_puts(b, "{\"tokens\":[");
	for (size_t i = from; i < to; i++) {
		if (i > from)
			moor_buf_put(b, ",", 1);
		decode(w, gw_lp_at(lp, i)->token);
		put_str(b, w->text.p, w->text.len);
	}
	moor_buf_puts(b, "],\"token_logprobs\":[");
	for (size_t i = from; i < to; i++) {
		if (i > from)
			moor_buf_put(b, ",", 1);
		put_num(b, gw_lp_at(lp, i)->logprob);
	}
	/* the sampled token first, then the likeliest (vLLM's order) */
	moor_buf_puts(b, "],\"top_logprobs\":[");
	for (size_t i = from; i < to; i++) {
		const gw_lp_tok *t = gw_lp_at(lp, i);
		moor_buf_puts(b, i > from ? ",{" : "{");
		dict_put(w, t->token, t->logprob, 1);
		for (uint32_t k = 0; k < t->n_top; k++)
			dict_put(w, alts[t->top_at + k].id,
				 alts[t->top_at + k].lp, 0);
		moor_buf_put(b, "}", 1);
	}
	moor_buf_puts(b, "],\"text_offset\":[");
	for (size_t i = from; i < to; i++)
		moor_buf_printf(b, i > from ? ",%llu" : "%llu",
				(unsigned long long)gw_lp_at(lp, i)->char_at);
	moor_buf_puts(b, "]}");
}

int gw_lp_write(const gw_lp *lp, const gw_tok *tok, int chat, size_t from,
		size_t to, moor_buf *out)
{
	MOOR_ASSERT(from <= to && to <= lp->n);
	lp_wr w = {.tok = tok, .out = out};
	int rv = gw_tok_stream_init(&w.ts, tok);
	if (rv)
		return rv;
	if (chat)
		chat_write(&w, lp, from, to);
	else
		completion_write(&w, lp, from, to);
	rv = w.text.err ? w.text.err : w.keys.err ? w.keys.err : out->err;
	gw_tok_stream_fini(&w.ts);
	moor_buf_fini(&w.text);
	moor_buf_fini(&w.keys);
	return rv;
}

int gw_lp_splice(moor_buf *out, const char *dump, size_t n, const char *lp,
		 size_t lp_len)
{
	static const char key[] = "\"logprobs\":null";
	const size_t kl = sizeof key - 1, vl = 4; /* null */
	const char *at = memmem(dump, n, key, kl);
	MOOR_ASSERT(at); /* the caller's dump has its choice's key */
	size_t head = (size_t)(at - dump) + kl - vl;
	moor_buf_put(out, dump, head);
	moor_buf_put(out, lp, lp_len);
	moor_buf_put(out, dump + head + vl, n - head - vl);
	return out->err;
}
