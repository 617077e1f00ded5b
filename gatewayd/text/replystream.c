/* replystream.c: a generation read piece by piece into reasoning, content
 * and tool-call events that add up to gw_reply_parse() of the whole text
 * (replystream.h has the contract, toolcall.h the whole-text rules).
 *
 * How it never takes anything back: the raw text is kept whole (buf), and
 * a cursor (pos) walks the part of it that no stop string can still cut
 * (buf[0, avail)). Ahead of the cursor stays only what is not known yet:
 *
 *   START    leading whitespace and a possible "<think>" prefix: whether the
 *            text thinks is decided by its start (toolcall.h);
 *   REASON   a possible "</think>" prefix, and trailing newlines (the split
 *            cuts them at both ends of the reasoning);
 *   CONTENT  a possible "<tool_call>" prefix, and a whole <tool_call> block
 *            until its "</tool_call>" (then gw_toolcall_block decides: calls,
 *            or the tag as content and the scan goes on inside the body, as
 *            gw_toolcalls_parse does).
 *
 * Content's trailing whitespace is consumed into cpend rather than held in
 * buf, because a tool block may be taken out after it: gw_toolcalls_parse
 * joins the content around taken blocks and trims the end of the join only
 * when a call was taken, so whitespace goes out when non-whitespace content
 * follows it, and at the end only if no call was made.
 *
 * Events are queued (their bytes copied into qbuf) and then handed to the
 * callback; a callback's error leaves the rest queued for the next call, so
 * nothing is lost or repeated. The rules hold for valid UTF-8 pieces (what
 * gw_tok_stream hands out); other bytes are carried, never crash, and may
 * parse differently from the whole text. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "moor.h"
#include "replystream.h"
#include "tmpl_int.h"
#include "toolcall.h"

#define NPOS ((size_t)-1)

enum phase { PH_START, PH_REASON, PH_CONTENT, PH_DONE };

struct rs_ev {
	gw_rs_kind kind;
	int index;
	size_t off, len;       /* text in qbuf */
	size_t id_off, nm_off; /* TOOL_START: NUL-terminated in qbuf */
};

struct gw_rs {
	gw_tmpl_family family;
	int think_open;
	const json_t *tools;
	char *id_prefix;
	char **stop;
	size_t *stop_len;
	size_t n_stop, max_stop;
	/* the stop matcher: per stop string its failure function (KMP:
	 * fail[j], the longest proper border of stop[0, j)) and how much of
	 * it the text ends with (matched, < stop_len) */
	size_t **fail;
	size_t *matched;

	moor_buf buf; /* the raw text, stops cut */
	size_t avail; /* buf[0, avail) is past any stop's reach */
	int stopped, finished, err;
	uint64_t stop_work; /* stop bytes compared (gw_rs_stop_work) */

	enum phase ph;
	size_t pos;	  /* buf[0, pos) is accounted for */
	int r_lead;	  /* REASON: no reasoning byte out yet */
	int c_lead;	  /* CONTENT: leading whitespace to drop */
	size_t blk_scan;  /* CONTENT: where to look on for </tool_call> */
	moor_buf cpend;	  /* content whitespace not out yet */
	json_t *calls;	  /* every call taken, in order */
	size_t calls_out; /* of them, queued as events */

	struct rs_ev *q; /* queued events [qhead, nq) */
	size_t nq, qcap, qhead;
	moor_buf qbuf;
};

/* moor_buf keeps p NUL-terminated (p[len] == 0) once anything was put. */
static int b_put(moor_buf *b, const char *s, size_t n)
{
	moor_buf_put(b, s, n);
	return b->err;
}

static size_t find_in(const char *s, size_t from, size_t to, const char *lit)
{
	if (from >= to)
		return NPOS;
	size_t r = mem_find(s + from, to - from, lit);
	return r == NPOS ? NPOS : from + r;
}

/* The longest proper prefix of lit (k bytes) that s (n bytes) ends with. */
static size_t tail_prefix(const char *s, size_t n, const char *lit, size_t k)
{
	for (size_t m = k - 1 < n ? k - 1 : n; m > 0; m--)
		if (memcmp(s + n - m, lit, m) == 0)
			return m;
	return 0;
}

/* ----------------------------------------------------------------- queue */

static int q_add(gw_rs *r, gw_rs_kind kind, int index, const char *a, size_t an,
		 const char *b, size_t bn)
{
	if (r->nq == r->qcap) {
		size_t cap = r->qcap ? 2 * r->qcap : 16;
		struct rs_ev *q = realloc(r->q, cap * sizeof *q);
		if (!q)
			return -ENOMEM;
		r->q = q;
		r->qcap = cap;
	}
	struct rs_ev *e = &r->q[r->nq];
	memset(e, 0, sizeof *e);
	e->kind = kind;
	e->index = index;
	e->off = r->qbuf.len;
	if (b_put(&r->qbuf, a, an) || b_put(&r->qbuf, b, bn))
		return -ENOMEM;
	e->len = an + bn;
	r->nq++;
	return 0;
}

static int q_call(gw_rs *r, size_t i)
{
	const json_t *c = json_array_get(r->calls, i);
	const json_t *fn = json_object_get(c, "function");
	const char *id = json_string_value(json_object_get(c, "id"));
	const json_t *nm = json_object_get(fn, "name");
	const json_t *args = json_object_get(fn, "arguments");
	MOOR_ASSERT(id && json_is_string(nm) && json_is_string(args));
	if (q_add(r, GW_RS_TOOL_START, (int)i, NULL, 0, NULL, 0))
		return -ENOMEM;
	struct rs_ev *e = &r->q[r->nq - 1];
	e->id_off = r->qbuf.len;
	if (b_put(&r->qbuf, id, strlen(id) + 1))
		return -ENOMEM;
	e->nm_off = r->qbuf.len;
	/* a name with a NUL byte is cut there: the event's name is a C
	 * string (the array keeps the whole name) */
	const char *name = json_string_value(nm);
	if (b_put(&r->qbuf, name, strlen(name) + 1))
		return -ENOMEM;
	size_t an;
	const char *a = js_str(args, &an);
	return q_add(r, GW_RS_TOOL_ARGS, (int)i, a, an, NULL, 0);
}

static int q_drain(gw_rs *r, gw_rs_cb cb, void *arg)
{
	while (r->qhead < r->nq) {
		const struct rs_ev *e = &r->q[r->qhead];
		gw_rs_event ev = {e->kind, e->index, r->qbuf.p + e->off,
				  e->len,  NULL,     NULL};
		if (e->kind == GW_RS_TOOL_START) {
			ev.id = r->qbuf.p + e->id_off;
			ev.name = r->qbuf.p + e->nm_off;
		}
		int rc = cb ? cb(arg, &ev) : 0;
		if (rc)
			return rc; /* not taken: handed over again */
		r->qhead++;
	}
	r->qhead = r->nq = 0;
	moor_buf_reset(&r->qbuf);
	return 0;
}

/* --------------------------------------------------------------- content */

/* Content bytes (outside taken blocks) in order: out up to their last
 * non-whitespace, the whitespace after it held in cpend. */
static int content(gw_rs *r, const char *s, size_t n)
{
	if (!n)
		return 0;
	size_t k = js_trim_end(s, n);
	if (k == 0)
		return b_put(&r->cpend, s, n);
	if (q_add(r, GW_RS_CONTENT, 0, r->cpend.p, r->cpend.len, s, k))
		return -ENOMEM;
	moor_buf_reset(&r->cpend);
	return b_put(&r->cpend, s + k, n - k);
}

static int take_calls(gw_rs *r)
{
	for (; r->calls_out < json_array_size(r->calls); r->calls_out++)
		if (q_call(r, r->calls_out))
			return -ENOMEM;
	return 0;
}

/* ----------------------------------------------------------------- parse */

static int is_nl(char c)
{
	return c == '\n' || c == '\r';
}

/* Reasoning bytes buf[pos, end): out but their trailing newlines (left in
 * buf); leading newlines of the reasoning dropped. close: the reasoning
 * ends at end (trailing newlines dropped too). */
static int reasoning(gw_rs *r, size_t end, int close)
{
	const char *s = r->buf.p;
	if (r->r_lead) {
		while (r->pos < end && is_nl(s[r->pos]))
			r->pos++;
		if (r->pos < end)
			r->r_lead = 0;
	}
	size_t e = end;
	while (e > r->pos && is_nl(s[e - 1]))
		e--;
	if (e > r->pos &&
	    q_add(r, GW_RS_REASONING, 0, s + r->pos, e - r->pos, NULL, 0))
		return -ENOMEM;
	r->pos = close ? end : e;
	return 0;
}

/* Walk buf[pos, avail) as far as it is known; fin: nothing more comes. */
static int advance(gw_rs *r, int fin)
{
	const char *s = r->buf.p;
	size_t n = r->avail;
	if (r->family == GW_TMPL_UNKNOWN) {
		if (n > r->pos &&
		    q_add(r, GW_RS_CONTENT, 0, s + r->pos, n - r->pos, NULL, 0))
			return -ENOMEM;
		r->pos = n;
		if (fin)
			r->ph = PH_DONE;
		return 0;
	}
	for (;;) {
		switch (r->ph) {
		case PH_START: {
			size_t lead = js_trim_start(s, n), k = n - lead;
			int opens = k >= 7 && !memcmp(s + lead, "<think>", 7);
			if (!fin && !opens &&
			    (k == 0 ||
			     (k < 7 && !memcmp(s + lead, "<think>", k))))
				return 0;
			r->r_lead = 1;
			if (opens) {
				r->ph = PH_REASON;
				r->pos = lead + 7;
			} else if (r->think_open) {
				r->ph = PH_REASON;
			} else {
				r->ph = PH_CONTENT;
			}
			break;
		}
		case PH_REASON: {
			size_t c = find_in(s, r->pos, n, "</think>");
			if (c != NPOS) {
				if (reasoning(r, c, 1))
					return -ENOMEM;
				r->pos = c + 8;
				r->ph = PH_CONTENT;
				r->c_lead = 1;
				break;
			}
			size_t end = n;
			if (!fin)
				end -= tail_prefix(s + r->pos, n - r->pos,
						   "</think>", 8);
			if (reasoning(r, end, fin))
				return -ENOMEM;
			if (fin)
				r->ph = PH_DONE;
			return 0;
		}
		case PH_CONTENT: {
			if (r->c_lead) {
				r->pos += js_trim_start(s + r->pos, n - r->pos);
				if (r->pos == n && !fin)
					return 0;
				r->c_lead = 0;
			}
			size_t o = find_in(s, r->pos, n, "<tool_call>");
			if (o == NPOS) {
				size_t end = n;
				if (!fin)
					end -=
					    tail_prefix(s + r->pos, n - r->pos,
							"<tool_call>", 11);
				if (content(r, s + r->pos, end - r->pos))
					return -ENOMEM;
				r->pos = end;
				if (!fin)
					return 0;
				/* the end: whitespace trimmed if a call
				 * was taken (gw_toolcalls_parse) */
				if (!json_array_size(r->calls) &&
				    r->cpend.len &&
				    q_add(r, GW_RS_CONTENT, 0, r->cpend.p,
					  r->cpend.len, NULL, 0))
					return -ENOMEM;
				moor_buf_reset(&r->cpend);
				r->ph = PH_DONE;
				return 0;
			}
			if (o > r->pos) {
				if (content(r, s + r->pos, o - r->pos))
					return -ENOMEM;
				r->pos = o;
				r->blk_scan = o + 11;
			}
			size_t body = o + 11;
			if (r->blk_scan < body)
				r->blk_scan = body;
			size_t cl = find_in(s, r->blk_scan, n, "</tool_call>");
			if (cl == NPOS && !fin) {
				/* held whole; look on from where a close
				 * tag could still start */
				r->blk_scan = n >= body + 11 ? n - 11 : body;
				return 0;
			}
			size_t end = cl == NPOS ? n : cl;
			int rc = gw_toolcall_block(
			    r->family, s + body, end - body, cl != NPOS,
			    r->tools, r->id_prefix, r->calls);
			if (rc < 0)
				return rc;
			if (rc == 0) {
				if (take_calls(r))
					return -ENOMEM;
				r->pos = cl == NPOS ? n : cl + 12;
			} else {
				/* not a call: the tag is content, and the
				 * scan goes on inside the body */
				if (content(r, s + o, 11))
					return -ENOMEM;
				r->pos = body;
			}
			r->blk_scan = 0;
			break;
		}
		case PH_DONE:
			return 0;
		}
	}
}

/* ------------------------------------------------------------------ API */

int gw_rs_new(const gw_rs_cfg *cfg, gw_rs **out)
{
	*out = NULL;
	gw_rs *r = calloc(1, sizeof *r);
	if (!r)
		return -ENOMEM;
	r->family = cfg->family;
	r->think_open = cfg->think_open;
	r->tools = cfg->tools;
	r->id_prefix = strdup(cfg->id_prefix ? cfg->id_prefix : "call_");
	r->calls = json_array();
	if (!r->id_prefix || !r->calls || b_put(&r->buf, NULL, 0))
		goto oom;
	if (cfg->n_stop) {
		r->stop = calloc(cfg->n_stop, sizeof *r->stop);
		r->stop_len = calloc(cfg->n_stop, sizeof *r->stop_len);
		if (!r->stop || !r->stop_len)
			goto oom;
	}
	for (size_t i = 0; i < cfg->n_stop; i++) {
		const char *st = cfg->stop[i];
		if (!st || !*st)
			continue;
		r->stop[r->n_stop] = strdup(st);
		if (!r->stop[r->n_stop])
			goto oom;
		r->stop_len[r->n_stop] = strlen(st);
		if (r->stop_len[r->n_stop] > r->max_stop)
			r->max_stop = r->stop_len[r->n_stop];
		r->n_stop++;
	}
	if (r->n_stop) {
		r->fail = calloc(r->n_stop, sizeof *r->fail);
		r->matched = calloc(r->n_stop, sizeof *r->matched);
		if (!r->fail || !r->matched)
			goto oom;
	}
	for (size_t i = 0; i < r->n_stop; i++) {
		const char *p = r->stop[i];
		size_t k = r->stop_len[i];
		size_t *f = r->fail[i] = malloc((k + 1) * sizeof *f);
		if (!f)
			goto oom;
		f[0] = f[1] = 0;
		for (size_t j = 1, q = 0; j < k; j++) {
			while (q && p[j] != p[q])
				q = f[q];
			if (p[j] == p[q])
				q++;
			f[j + 1] = q;
		}
	}
	*out = r;
	return 0;
oom:
	gw_rs_free(r);
	return -ENOMEM;
}

void gw_rs_free(gw_rs *r)
{
	if (!r)
		return;
	for (size_t i = 0; i < r->n_stop; i++) {
		free(r->stop[i]);
		if (r->fail)
			free(r->fail[i]);
	}
	free(r->stop);
	free(r->stop_len);
	free(r->fail);
	free(r->matched);
	free(r->id_prefix);
	moor_buf_fini(&r->buf);
	moor_buf_fini(&r->cpend);
	free(r->q);
	moor_buf_fini(&r->qbuf);
	json_decref(r->calls);
	free(r);
}

/* The first stop string to complete in buf after `from` bytes (the one
 * that ends first; of those ending together the longest): where the text
 * is cut, or NPOS. Each new byte steps every stop string's KMP automaton
 * (matched[i]: how much of stop i the text ends with), so the work is
 * linear in the text whatever the stop strings' lengths: a step's
 * fall-backs are paid for by the bytes that built the match up. */
static size_t stop_cut(gw_rs *r, size_t from)
{
	const char *s = r->buf.p;
	for (size_t e = from; e < r->buf.len; e++) {
		size_t best = 0;
		for (size_t i = 0; i < r->n_stop; i++) {
			const char *p = r->stop[i];
			const size_t *f = r->fail[i];
			size_t q = r->matched[i];
			r->stop_work++;
			while (q && p[q] != s[e]) {
				q = f[q];
				r->stop_work++;
			}
			if (p[q] == s[e])
				q++;
			if (q == r->stop_len[i]) {
				if (q > best)
					best = q;
				q = f[q];
			}
			r->matched[i] = q;
		}
		if (best)
			return e + 1 - best;
	}
	return NPOS;
}

static int finish_text(gw_rs *r)
{
	r->avail = r->buf.len;
	int rc = advance(r, 1);
	if (rc < 0)
		r->err = rc;
	return rc;
}

int gw_rs_push(gw_rs *r, const char *piece, size_t len, gw_rs_cb cb, void *arg)
{
	if (r->err)
		return r->err;
	if (r->finished && !r->stopped)
		return -EINVAL;
	if (r->stopped) {
		int rc = q_drain(r, cb, arg);
		return rc ? rc : GW_RS_STOPPED;
	}
	size_t from = r->buf.len;
	if (b_put(&r->buf, piece, len))
		return r->err = -ENOMEM;
	size_t cut = r->n_stop ? stop_cut(r, from) : NPOS;
	int rc;
	if (cut != NPOS) {
		r->buf.len = cut;
		r->buf.p[cut] = 0;
		r->stopped = r->finished = 1;
		if (finish_text(r))
			return r->err;
		rc = q_drain(r, cb, arg);
		return rc ? rc : GW_RS_STOPPED;
	}
	/* what a stop may still complete: the longest matched prefix */
	size_t hold = 0;
	for (size_t i = 0; i < r->n_stop; i++)
		if (r->matched[i] > hold)
			hold = r->matched[i];
	r->avail = r->buf.len - hold;
	rc = advance(r, 0);
	if (rc < 0)
		return r->err = rc;
	return q_drain(r, cb, arg);
}

int gw_rs_finish(gw_rs *r, gw_rs_cb cb, void *arg)
{
	if (r->err)
		return r->err;
	if (!r->finished) {
		r->finished = 1;
		if (finish_text(r))
			return r->err;
	}
	return q_drain(r, cb, arg);
}

const char *gw_rs_text(const gw_rs *r, size_t *len)
{
	*len = r->buf.len;
	return r->buf.p;
}

int gw_rs_n_tool_calls(const gw_rs *r)
{
	return (int)json_array_size(r->calls);
}

const json_t *gw_rs_tool_calls(const gw_rs *r)
{
	return r->calls;
}

uint64_t gw_rs_stop_work(const gw_rs *r)
{
	return r->stop_work;
}

int gw_rs_stopped(const gw_rs *r)
{
	return r->stopped;
}
