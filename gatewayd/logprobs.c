/* logprobs.c: a generation's logprobs kept and written in OpenAI's shapes
 * (logprobs.h says which and why). */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "logprobs.h"
#include "moor.h"

uint64_t gw_lp_fault_at;
static uint64_t lp_adds; /* gw_lp_add's calls, for the seam */

void gw_lp_fini(gw_lp *lp)
{
	moor_buf_fini(&lp->toks);
	moor_buf_fini(&lp->alts);
	memset(lp, 0, sizeof *lp);
}

void gw_lp_drop(gw_lp *lp)
{
	/* by hand, not moor_buf_reset: that would clear a sticky err */
	lp->toks.len = 0;
	lp->alts.len = 0;
	lp->n = 0;
}

int gw_lp_add(gw_lp *lp, const proto_step_entry *e, uint32_t top)
{
	uint32_t k = e->n_top < top ? e->n_top : top;
	if (k > PROTO_MAX_TOP)
		k = PROTO_MAX_TOP;
	size_t at = lp->alts.len / sizeof(gw_lp_alt);
	if (lp->toks.err || lp->alts.err || at + k > UINT32_MAX)
		return -ENOMEM;
	if (gw_lp_fault_at && ++lp_adds == gw_lp_fault_at) {
		lp->alts.err = -ENOMEM; /* as a failed growth: sticky */
		return -ENOMEM;
	}
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

/* ---- what a token can cost ----------------------------------------------- */

/* The most one id's text costs as a JSON string (quotes included) and as
 * a bytes list, from its bytes: a byte below 0x20 is at most \u00XX (6),
 * a quote or backslash 2, a byte of 0x80 up at most a U+FFFD of its own
 * (3, when it is part of no whole character of the token alone), any
 * other 1; the list is each byte's digits and the commas between. */
static void id_cost(const gw_tok *tok, int32_t id, uint64_t *str,
		    uint64_t *list)
{
	size_t len;
	const char *b = gw_tok_token_bytes(tok, id, &len);
	*str = 2;
	*list = 0;
	for (size_t i = 0; b && i < len; i++) {
		uint8_t c = (uint8_t)b[i];
		*str += c < 0x20		? 6
			: c == '"' || c == '\\' ? 2
			: c >= 0x80		? 3
						: 1;
		*list += (c >= 100 ? 3 : c >= 10 ? 2 : 1) + (i > 0);
	}
}

/* What gw_lp_write writes besides its items: a chat's {"content":[ and
 * ],"refusal":null}, a completion's four lists' keys and brackets (68),
 * with room. */
#define LP_ENVELOPE 80
/* A chat entry's bytes besides its token's string, logprob and bytes
 * list, and its alternatives (chat_write): {"token":, ,"logprob":,
 * ,"bytes":[, ], ,"top_logprobs":[, ]} and its comma; an alternative's
 * ({"token":...]} and its comma). */
#define LP_CHAT_TOK 51
#define LP_CHAT_ALT 33
/* A completion token's bytes besides its string and logprob and its
 * dict's keys (completion_write): the commas after its string and its
 * logprob, its dict's braces and comma, its text_offset (20 digits at
 * most) and comma; a dict key's, besides its string and logprob: the
 * colon and the comma. */
#define LP_CMPL_TOK 26
#define LP_CMPL_KEY 2

/* A bound of what gw_lp_write writes for entries [from, to): each id at
 * its most (id_cost), each logprob at GW_LP_NUM_MAX. */
static size_t write_bound(const gw_lp *lp, const gw_tok *tok, int chat,
			  size_t from, size_t to)
{
	const gw_lp_alt *alts = (const gw_lp_alt *)lp->alts.p;
	uint64_t b = LP_ENVELOPE, s, l;
	for (size_t i = from; i < to; i++) {
		const gw_lp_tok *t = gw_lp_at(lp, i);
		id_cost(tok, t->token, &s, &l);
		b += chat ? LP_CHAT_TOK + GW_LP_NUM_MAX + s + l
			  : LP_CMPL_TOK + GW_LP_NUM_MAX + s + LP_CMPL_KEY +
				GW_LP_NUM_MAX + s;
		for (uint32_t k = 0; k < t->n_top; k++) {
			id_cost(tok, alts[t->top_at + k].id, &s, &l);
			b += chat ? LP_CHAT_ALT + GW_LP_NUM_MAX + s + l
				  : LP_CMPL_KEY + GW_LP_NUM_MAX + s;
		}
	}
	return b < SIZE_MAX / 2 ? (size_t)b : SIZE_MAX / 2;
}

/* x into the descending list top[0, k) of the k largest so far */
static void keep_top(uint64_t *top, uint32_t k, uint64_t x)
{
	if (!k || x <= top[k - 1])
		return;
	uint32_t i = k - 1;
	for (; i > 0 && top[i - 1] < x; i--)
		top[i] = top[i - 1];
	top[i] = x;
}

uint64_t gw_lp_token_bytes(const gw_tok *tok, uint32_t top)
{
	if (top > PROTO_MAX_TOP)
		top = PROTO_MAX_TOP;
	/* the costliest ids: a chat item's string and list, a completion
	 * item's string */
	uint64_t chat[PROTO_MAX_TOP + 1] = {0}, str[PROTO_MAX_TOP + 1] = {0};
	uint32_t k = top ? top : 1;
	for (int32_t id = 0; id < gw_tok_vocab_size(tok); id++) {
		uint64_t s, l;
		id_cost(tok, id, &s, &l);
		keep_top(chat, k, s + l);
		keep_top(str, k, s);
	}
	/* as write_bound: the sampled token the costliest id, its
	 * alternatives the top costliest; a completion's dict has the
	 * sampled token's key and top more */
	uint64_t c = LP_CHAT_TOK + GW_LP_NUM_MAX + chat[0];
	for (uint32_t i = 0; i < top; i++)
		c += LP_CHAT_ALT + GW_LP_NUM_MAX + chat[i];
	uint64_t t = LP_CMPL_TOK + GW_LP_NUM_MAX + str[0];
	for (uint32_t i = 0; i <= top; i++)
		t += LP_CMPL_KEY + GW_LP_NUM_MAX + str[i > 0 ? i - 1 : 0];
	return sizeof(gw_lp_tok) + (uint64_t)top * sizeof(gw_lp_alt) +
	       (c > t ? c : t);
}

/* ---- splicing ----------------------------------------------------------- */

#define LP_NULL_LEN 4 /* null */

/* Where the null of dump[0, n)'s "logprobs":null starts (logprobs.h:
 * gw_lp_splice says why the search is sound). */
static size_t null_at(const char *dump, size_t n)
{
	static const char key[] = "\"logprobs\":null";
	const size_t kl = sizeof key - 1;
	const char *at = memmem(dump, n, key, kl);
	MOOR_ASSERT(at); /* the caller's dump has its choice's key */
	return (size_t)(at - dump) + kl - LP_NULL_LEN;
}

int gw_lp_splice(moor_buf *out, const char *dump, size_t n, const char *lp,
		 size_t lp_len)
{
	size_t head = null_at(dump, n);
	moor_buf_put(out, dump, head);
	moor_buf_put(out, lp, lp_len);
	moor_buf_put(out, dump + head + LP_NULL_LEN, n - head - LP_NULL_LEN);
	return out->err;
}

int gw_lp_splice_into(moor_buf *out, const char *dump, size_t n,
		      const gw_lp *lp, const gw_tok *tok, int chat, size_t from,
		      size_t to)
{
	MOOR_ASSERT(!out->err);
	size_t was = out->len, head = null_at(dump, n);
	/* room for all of it first, so out grows once and is not copied as
	 * it grows (a copy is a second reply while realloc moves it): a
	 * bound's room past what is written is never touched, and a block
	 * that large is a mapping of its own (gatewayd's malloc_limits) */
	if (moor_buf_room(out, n + write_bound(lp, tok, chat, from, to))) {
		out->len = was; /* reserved, not written */
		out->p[was] = 0;
	}
	moor_buf_put(out, dump, head);
	int rv =
	    out->err ? out->err : gw_lp_write(lp, tok, chat, from, to, out);
	if (!rv) {
		moor_buf_put(out, dump + head + LP_NULL_LEN,
			     n - head - LP_NULL_LEN);
		rv = out->err;
	}
	if (rv) {
		/* cut back by hand (buf.h: the fields are public; a put that
		 * failed wrote nothing, so p holds was bytes and more) */
		out->len = was;
		if (out->p)
			out->p[was] = 0;
		out->err = 0;
	}
	return rv;
}
