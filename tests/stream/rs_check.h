/* rs_check.h: what the stream parser tests share: running a gw_rs stream
 * over given pieces and collecting its events, the whole-text answer the
 * events must add up to (gw_reply_parse of the stop-cut text, or the cut
 * text itself in raw mode), the comparison, and the checks on the events
 * themselves (order, indices, ids, whole characters, nothing empty). */
#ifndef RS_CHECK_H
#define RS_CHECK_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "replystream.h"
#include "t.h"
#include "toolcall.h"

/* A growing byte string. */
typedef struct rs_str {
	char *p;
	size_t n, cap;
} rs_str;

static void rs_put(rs_str *s, const char *p, size_t n)
{
	if (s->n + n + 1 > s->cap) {
		s->cap = (s->n + n + 1) * 2;
		s->p = realloc(s->p, s->cap);
		REQUIRE(s->p, "oom");
	}
	if (n)
		memcpy(s->p + s->n, p, n);
	s->n += n;
	s->p[s->n] = 0;
}

/* What a stream (or the whole-text parse) says about one generation. */
typedef struct rs_out {
	rs_str reasoning, content, text;
	json_t *calls; /* an array, maybe empty */
	int stopped;
	int n_events;
	const char *bad; /* the first broken event rule, or NULL */
	int phase;	 /* 0 reasoning, 1 after (content or tools) */
	int fail_every;	 /* the callback fails every n-th call (0: never) */
	int n_cb;
	const char *id_prefix;
} rs_out;

static void rs_out_fini(rs_out *o)
{
	free(o->reasoning.p);
	free(o->content.p);
	free(o->text.p);
	json_decref(o->calls);
	memset(o, 0, sizeof *o);
}

/* Whether s is whole, valid UTF-8. */
static int rs_utf8(const char *s, size_t n)
{
	const unsigned char *u = (const unsigned char *)s;
	for (size_t i = 0; i < n;) {
		unsigned c = u[i];
		size_t k = c < 0x80 ? 1
			   : (c >= 0xc2 && c <= 0xdf) ? 2
			   : (c & 0xf0) == 0xe0	      ? 3
			   : (c >= 0xf0 && c <= 0xf4) ? 4
						      : 0;
		if (!k || i + k > n)
			return 0;
		for (size_t j = 1; j < k; j++)
			if ((u[i + j] & 0xc0) != 0x80)
				return 0;
		i += k;
	}
	return 1;
}

#define RS_CB_FAIL 77

static int rs_cb(void *arg, const gw_rs_event *ev)
{
	rs_out *o = arg;
	o->n_cb++;
	if (o->fail_every && o->n_cb % o->fail_every == 0)
		return RS_CB_FAIL; /* not taken: it comes again */
	o->n_events++;
	if (!o->calls)
		o->calls = json_array();
	size_t nc = json_array_size(o->calls);
	switch (ev->kind) {
	case GW_RS_REASONING:
		if (o->phase && !o->bad)
			o->bad = "reasoning after content or a tool call";
		if (!ev->len && !o->bad)
			o->bad = "an empty reasoning event";
		rs_put(&o->reasoning, ev->text, ev->len);
		break;
	case GW_RS_CONTENT:
		o->phase = 1;
		if (!ev->len && !o->bad)
			o->bad = "an empty content event";
		rs_put(&o->content, ev->text, ev->len);
		break;
	case GW_RS_TOOL_START: {
		o->phase = 1;
		char id[200];
		snprintf(id, sizeof id, "%s%zu",
			 o->id_prefix ? o->id_prefix : "call_", nc);
		if ((size_t)ev->index != nc && !o->bad)
			o->bad = "a tool call index out of order";
		if ((!ev->id || strcmp(ev->id, id)) && !o->bad)
			o->bad = "a tool call id that is not prefix + index";
		if (!ev->name && !o->bad)
			o->bad = "a tool call without a name";
		json_t *c = json_pack("{s:s,s:s,s:{s:s,s:s}}", "id",
				      ev->id ? ev->id : "", "type", "function",
				      "function", "name",
				      ev->name ? ev->name : "", "arguments",
				      "");
		REQUIRE(c && !json_array_append_new(o->calls, c), "oom");
		break;
	}
	case GW_RS_TOOL_ARGS: {
		if ((nc == 0 || (size_t)ev->index != nc - 1) && !o->bad)
			o->bad = "arguments of a call that is not the last "
				 "started";
		if (nc == 0)
			break;
		json_t *fn = json_object_get(json_array_get(o->calls, nc - 1),
					     "function");
		const json_t *a = json_object_get(fn, "arguments");
		rs_str s = {0};
		rs_put(&s, json_string_value(a), json_string_length(a));
		rs_put(&s, ev->text, ev->len);
		json_object_set_new(fn, "arguments", json_stringn(s.p, s.n));
		free(s.p);
		break;
	}
	default:
		if (!o->bad)
			o->bad = "an unknown event kind";
	}
	if ((ev->kind != GW_RS_TOOL_START && !rs_utf8(ev->text, ev->len)) &&
	    !o->bad)
		o->bad = "an event that splits a character";
	return 0;
}

/* A push or finish, called again while the callback fails (each failure
 * leaves the event queued: the retry hands it over). */
static int rs_retry(gw_rs *r, const char *p, size_t n, int fin, rs_out *o)
{
	int rc;
	int tries = 0;
	do {
		rc = fin ? gw_rs_finish(r, rs_cb, o)
			 : gw_rs_push(r, tries ? NULL : p, tries ? 0 : n,
				      rs_cb, o);
		tries++;
	} while (rc == RS_CB_FAIL && tries < 1000);
	return rc;
}

/* Stream text through a new gw_rs in pieces ending at cuts[0..ncut) (byte
 * offsets, ascending, each <= n; the last piece runs to n). */
static void rs_stream(const gw_rs_cfg *cfg, const char *text, size_t n,
		      const size_t *cuts, size_t ncut, int fail_every,
		      rs_out *o)
{
	memset(o, 0, sizeof *o);
	o->calls = json_array();
	o->fail_every = fail_every;
	o->id_prefix = cfg->id_prefix;
	gw_rs *r;
	REQUIRE(gw_rs_new(cfg, &r) == 0, "gw_rs_new");
	size_t at = 0;
	int stopped = 0;
	for (size_t i = 0; i <= ncut && !stopped; i++) {
		size_t e = i < ncut ? cuts[i] : n;
		int rc = rs_retry(r, text + at, e - at, 0, o);
		if (rc == GW_RS_STOPPED)
			stopped = 1;
		else if (rc != 0 && !o->bad)
			o->bad = "a push failed";
		at = e;
	}
	if (stopped) {
		/* later pushes are ignored */
		if (gw_rs_push(r, "x", 1, rs_cb, o) != GW_RS_STOPPED &&
		    !o->bad)
			o->bad = "a push after the stop is not STOPPED";
	}
	if (rs_retry(r, NULL, 0, 1, o) != 0 && !o->bad)
		o->bad = "finish failed";
	size_t tl;
	const char *t = gw_rs_text(r, &tl);
	rs_put(&o->text, t, tl);
	o->stopped = gw_rs_stopped(r);
	if (o->stopped != stopped && !o->bad)
		o->bad = "gw_rs_stopped differs from the push's answer";
	if ((size_t)gw_rs_n_tool_calls(r) != json_array_size(o->calls) &&
	    !o->bad)
		o->bad = "gw_rs_n_tool_calls differs from the events";
	if (!json_equal(gw_rs_tool_calls(r), o->calls) && !o->bad)
		o->bad = "gw_rs_tool_calls differs from the events";
	gw_rs_free(r);
}

/* The stop cut, written from the rule (the stop that completes first; of
 * those ending at one byte, the longest), without the stream's code. */
static size_t rs_ref_cut(const char *t, size_t n, const char *const *stop,
			 size_t n_stop, int *stopped)
{
	*stopped = 0;
	for (size_t e = 1; e <= n; e++) {
		size_t best = 0;
		for (size_t i = 0; i < n_stop; i++) {
			size_t k = strlen(stop[i]);
			if (k && k <= e && k > best &&
			    !memcmp(t + e - k, stop[i], k))
				best = k;
		}
		if (best) {
			*stopped = 1;
			return e - best;
		}
	}
	return n;
}

/* The whole-text answer. */
static void rs_whole(const gw_rs_cfg *cfg, const char *text, size_t n,
		     rs_out *o)
{
	memset(o, 0, sizeof *o);
	size_t cut = rs_ref_cut(text, n, cfg->stop, cfg->n_stop, &o->stopped);
	rs_put(&o->text, text, cut);
	if (cfg->family == GW_TMPL_UNKNOWN) {
		rs_put(&o->content, text, cut);
		o->calls = json_array();
		return;
	}
	gw_reply rep;
	REQUIRE(gw_reply_parse(cfg->family, text, cut, cfg->think_open,
			       cfg->tools, cfg->id_prefix, &rep) == 0,
		"gw_reply_parse");
	rs_put(&o->reasoning, rep.reasoning, rep.reasoning_len);
	rs_put(&o->content, rep.content, rep.content_len);
	o->calls = rep.tool_calls ? json_incref(rep.tool_calls) : json_array();
	gw_reply_fini(&rep);
}

static int rs_same(const rs_str *a, const rs_str *b)
{
	return a->n == b->n && (a->n == 0 || !memcmp(a->p, b->p, a->n));
}

static void rs_show(FILE *f, const char *s, size_t n)
{
	fputc('"', f);
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];
		if (c == '\n')
			fputs("\\n", f);
		else if (c == '"' || c == '\\')
			fprintf(f, "\\%c", c);
		else if (c < 0x20)
			fprintf(f, "\\x%02x", c);
		else
			fputc(c, f);
	}
	fputc('"', f);
}

static int rs_report_left = 8;

/* Compare a stream's answer with the whole text's; on a mismatch print
 * the case (at most a few) and count a failure. Returns 1 when equal. */
static int rs_compare(const char *what, const char *text, size_t n,
		      const size_t *cuts, size_t ncut, const rs_out *s,
		      const rs_out *w)
{
	const char *diff = s->bad;
	if (!diff && !rs_same(&s->text, &w->text))
		diff = "gw_rs_text";
	if (!diff && s->stopped != w->stopped)
		diff = "stopped";
	if (!diff && !rs_same(&s->reasoning, &w->reasoning))
		diff = "reasoning";
	if (!diff && !rs_same(&s->content, &w->content))
		diff = "content";
	if (!diff && !json_equal(s->calls, w->calls))
		diff = "tool calls";
	CHECK(!diff, "%s: %s", what, diff ? diff : "");
	if (diff && rs_report_left-- > 0) {
		fprintf(stderr, "  text ");
		rs_show(stderr, text, n);
		fprintf(stderr, "\n  cuts");
		for (size_t i = 0; i < ncut; i++)
			fprintf(stderr, " %zu", cuts[i]);
		fprintf(stderr, "\n  reasoning stream ");
		rs_show(stderr, s->reasoning.p, s->reasoning.n);
		fprintf(stderr, "\n            whole  ");
		rs_show(stderr, w->reasoning.p, w->reasoning.n);
		fprintf(stderr, "\n  content   stream ");
		rs_show(stderr, s->content.p, s->content.n);
		fprintf(stderr, "\n            whole  ");
		rs_show(stderr, w->content.p, w->content.n);
		char *a = json_dumps(s->calls, JSON_COMPACT);
		char *b = json_dumps(w->calls, JSON_COMPACT);
		fprintf(stderr, "\n  calls     stream %s\n            whole  %s\n",
			a, b);
		free(a);
		free(b);
	}
	return !diff;
}

/* Stream text with the given cuts and compare with the whole text. */
static int rs_check(const char *what, const gw_rs_cfg *cfg, const char *text,
		    size_t n, const size_t *cuts, size_t ncut, int fail_every)
{
	rs_out s, w;
	rs_stream(cfg, text, n, cuts, ncut, fail_every, &s);
	rs_whole(cfg, text, n, &w);
	int ok = rs_compare(what, text, n, cuts, ncut, &s, &w);
	rs_out_fini(&s);
	rs_out_fini(&w);
	return ok;
}

/* A fixed-seed generator (xorshift64). */
static uint64_t rs_seed = 0x2545f4914f6cdd1dull;
static uint64_t rs_rand(void)
{
	rs_seed ^= rs_seed << 13;
	rs_seed ^= rs_seed >> 7;
	rs_seed ^= rs_seed << 17;
	return rs_seed;
}

#endif
