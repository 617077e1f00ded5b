/* toolcall.c: the reasoning split and the two tool-call formats read back
 * from a generation (toolcall.h has the rules). */
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "tmpl_int.h"
#include "toolcall.h"

#define NPOS ((size_t)-1)

static size_t find_from(const char *s, size_t n, size_t from, const char *lit)
{
	if (from > n)
		return NPOS;
	size_t r = mem_find(s + from, n - from, lit);
	return r == NPOS ? NPOS : from + r;
}

/* ------------------------------------------------------------- reasoning */

static void cut_newlines(const char *s, size_t *off, size_t *len)
{
	while (*len && (s[*off] == '\n' || s[*off] == '\r')) {
		(*off)++;
		(*len)--;
	}
	while (*len &&
	       (s[*off + *len - 1] == '\n' || s[*off + *len - 1] == '\r'))
		(*len)--;
}

void gw_think_split_text(const char *text, size_t len, int think_open,
			 gw_think_split *out)
{
	memset(out, 0, sizeof *out);
	size_t lead = js_trim_start(text, len);
	size_t open = NPOS, body = 0;
	if (len - lead >= 7 && memcmp(text + lead, "<think>", 7) == 0) {
		open = lead;
		body = lead + 7;
	}
	if (!think_open && open == NPOS) {
		out->content_off = 0; /* a later </think> is content too */
		out->content_len = len;
		return;
	}
	size_t close = find_from(text, len, body, "</think>");
	out->has_reasoning = 1;
	out->reasoning_off = body;
	out->reasoning_len = (close == NPOS ? len : close) - body;
	cut_newlines(text, &out->reasoning_off, &out->reasoning_len);
	if (close == NPOS) {
		out->content_off = len;
		return;
	}
	size_t c = close + 8;
	c += js_trim_start(text + c, len - c);
	out->content_off = c;
	out->content_len = len - c;
}

/* ---------------------------------------------------------- JSON format */

/* The end of the JSON value that starts at s[i] (valid JSON: jansson read
 * it already), or NPOS. */
static size_t json_value_end(const char *s, size_t n, size_t i)
{
	int depth = 0;
	while (i < n) {
		char c = s[i];
		if (c == '"') {
			for (i++; i < n && s[i] != '"'; i++)
				if (s[i] == '\\')
					i++;
			i++;
			if (depth == 0)
				return i;
			continue;
		}
		if (c == '{' || c == '[')
			depth++;
		else if (c == '}' || c == ']') {
			if (--depth == 0)
				return i + 1;
			if (depth < 0)
				return i;
		} else if (depth == 0 &&
			   (c == ',' || isspace((unsigned char)c)))
			return i;
		i++;
	}
	return depth == 0 ? n : NPOS;
}

static size_t skip_ws(const char *s, size_t n, size_t i)
{
	while (i < n && isspace((unsigned char)s[i]))
		i++;
	return i;
}

/* The bytes of the top-level member "arguments" of the object text s. */
static int find_arguments(const char *s, size_t n, size_t *off, size_t *len)
{
	size_t i = skip_ws(s, n, 0);
	if (i >= n || s[i] != '{')
		return 0;
	i++;
	for (;;) {
		i = skip_ws(s, n, i);
		if (i >= n || s[i] != '"')
			return 0;
		size_t ks = i + 1, ke = json_value_end(s, n, i);
		if (ke == NPOS)
			return 0;
		i = skip_ws(s, n, ke);
		if (i >= n || s[i] != ':')
			return 0;
		i = skip_ws(s, n, i + 1);
		size_t ve = json_value_end(s, n, i);
		if (ve == NPOS)
			return 0;
		if (ke - 1 - ks == 9 && memcmp(s + ks, "arguments", 9) == 0) {
			*off = i;
			*len = ve - i;
			return 1; /* a later duplicate would win in jansson:
				     we take the first; rare enough */
		}
		i = skip_ws(s, n, ve);
		if (i < n && s[i] == ',') {
			i++;
			continue;
		}
		return 0;
	}
}

static json_t *new_call(const char *id_prefix, size_t idx, const char *name,
			size_t name_len, const char *args, size_t args_len)
{
	char id[160];
	snprintf(id, sizeof id, "%s%zu", id_prefix ? id_prefix : "call_", idx);
	json_t *fn = json_pack("{s:s%,s:s%}", "name", name, name_len,
			       "arguments", args, args_len);
	if (!fn)
		return NULL;
	return json_pack("{s:s,s:s,s:o}", "id", id, "type", "function",
			 "function", fn);
}

/* One <tool_call> body in the qwen3 format, or NULL if it does not parse
 * (*oom set on allocation failure). */
static json_t *parse_json_call(const char *s, size_t n, const char *id_prefix,
			       size_t idx, int *oom)
{
	json_error_t je;
	json_t *o = json_loadb(s, n, JSON_DECODE_INT_AS_REAL, &je);
	json_t *call = NULL;
	if (!o)
		return NULL;
	const json_t *name = json_object_get(o, "name");
	const json_t *args = json_object_get(o, "arguments");
	size_t aoff, alen;
	if (!json_is_string(name))
		goto out;
	if (!args || json_is_null(args)) {
		call = new_call(id_prefix, idx, json_string_value(name),
				json_string_length(name), "{}", 2);
	} else if (json_is_string(args)) {
		call =
		    new_call(id_prefix, idx, json_string_value(name),
			     json_string_length(name), json_string_value(args),
			     json_string_length(args));
	} else if (json_is_object(args) && find_arguments(s, n, &aoff, &alen)) {
		call = new_call(id_prefix, idx, json_string_value(name),
				json_string_length(name), s + aoff, alen);
	} else if (json_is_object(args)) {
		/* a key spelled with escapes: the bytes are not found, print
		 * the object as tojson does */
		moor_buf ab = {0};
		js_tojson(&ab, args);
		if (!ab.err)
			call = new_call(id_prefix, idx, json_string_value(name),
					json_string_length(name), ab.p, ab.len);
		moor_buf_fini(&ab);
	} else {
		goto out; /* arguments that are not an object */
	}
	if (!call)
		*oom = 1;
out:
	json_decref(o);
	return call;
}

/* ----------------------------------------------------------- XML format */

/* The schema type of parameter p of tool `name`, lower-cased into buf; ""
 * when the schema does not name it. */
static const char *param_type(const json_t *tools, const char *name,
			      size_t name_len, const char *p, size_t p_len,
			      char *buf, size_t cap, int *known)
{
	*known = 0;
	buf[0] = 0;
	for (size_t i = 0; json_is_array(tools) && i < json_array_size(tools);
	     i++) {
		const json_t *t = json_array_get(tools, i);
		const json_t *fn = json_object_get(t, "function");
		if (!fn)
			fn = t;
		const json_t *tn = json_object_get(fn, "name");
		if (!json_is_string(tn) || json_string_length(tn) != name_len ||
		    memcmp(json_string_value(tn), name, name_len) != 0)
			continue;
		const json_t *props = json_object_get(
		    json_object_get(fn, "parameters"), "properties");
		const char *k;
		const json_t *v;
		json_object_foreach((json_t *)props, k, v)
		{
			if (strlen(k) != p_len || memcmp(k, p, p_len) != 0)
				continue;
			*known = 1;
			const json_t *ty = json_object_get(v, "type");
			if (json_is_array(ty)) {
				const json_t *pick = NULL;
				for (size_t j = 0; j < json_array_size(ty); j++)
					if (!js_is(json_array_get(ty, j),
						   "null")) {
						pick = json_array_get(ty, j);
						break;
					}
				ty = pick;
			}
			const char *s = json_is_string(ty)
					    ? json_string_value(ty)
					    : "string";
			size_t o = 0;
			for (; s[o] && o + 1 < cap; o++)
				buf[o] = (char)tolower((unsigned char)s[o]);
			buf[o] = 0;
			return buf;
		}
		return buf;
	}
	return buf;
}

static int starts(const char *s, const char *lit)
{
	return strncmp(s, lit, strlen(lit)) == 0;
}

/* A parameter value converted by its schema type (toolcall.h). */
static json_t *convert_value(const char *v, size_t n, const char *type,
			     int known)
{
	if (n == 4 && strncasecmp(v, "null", 4) == 0)
		return json_null();
	if (!known || !strcmp(type, "string") || !strcmp(type, "str") ||
	    !strcmp(type, "text") || !strcmp(type, "varchar") ||
	    !strcmp(type, "char") || !strcmp(type, "enum"))
		return json_stringn(v, n);
	size_t a = js_trim_start(v, n);
	size_t e = js_trim_end(v, n);
	char tmp[64];
	int fits = e > a && e - a < sizeof tmp;
	if (fits) {
		memcpy(tmp, v + a, e - a);
		tmp[e - a] = 0;
	}
	if (starts(type, "int") || starts(type, "uint") ||
	    starts(type, "long") || starts(type, "short") ||
	    starts(type, "unsigned")) {
		char *end;
		errno = 0;
		long long x = fits ? strtoll(tmp, &end, 10) : 0;
		if (fits && !*end && !errno && !isspace((unsigned char)tmp[0]))
			return json_integer(x);
		return json_stringn(v, n);
	}
	if (starts(type, "num") || starts(type, "float")) {
		char *end;
		double d = fits ? strtod(tmp, &end) : 0;
		if (!fits || *end || !isfinite(d) ||
		    strpbrk(tmp, "xXnN")) /* no hex, inf, nan */
			return json_stringn(v, n);
		if (strpbrk(tmp, ".eE") || fabs(d) >= 9007199254740992.0)
			return json_real(d);
		return json_integer((json_int_t)d);
	}
	if (!strcmp(type, "boolean") || !strcmp(type, "bool") ||
	    !strcmp(type, "binary")) {
		if (fits && !strcasecmp(tmp, "true"))
			return json_true();
		if (fits && !strcasecmp(tmp, "false"))
			return json_false();
		return json_stringn(v, n);
	}
	json_error_t je;
	json_t *j = json_loadb(v, n, JSON_DECODE_ANY, &je);
	return j ? j : json_stringn(v, n);
}

/* The calls of one <tool_call> block body (s, n) in the XML format,
 * appended to calls: 0 when at least one parsed, 1 when none did (the
 * block stays content), -ENOMEM. closed: the block had its </tool_call>,
 * so a function may end there without its </function>. */
static int parse_xml_block(const char *s, size_t n, int closed,
			   const json_t *tools, const char *id_prefix,
			   json_t *calls)
{
	size_t i = 0, before = json_array_size(calls);
	for (;;) {
		size_t f = find_from(s, n, i, "<function=");
		if (f == NPOS)
			break;
		size_t ns = f + 10;
		size_t gt = find_from(s, n, ns, ">");
		if (gt == NPOS)
			break;
		size_t fend = find_from(s, n, gt + 1, "</function>");
		size_t next_fn = find_from(s, n, gt + 1, "<function=");
		int fclosed =
		    fend != NPOS && (next_fn == NPOS || fend < next_fn);
		if (!fclosed) {
			if (!closed)
				break; /* truncated: left as content */
			fend = next_fn != NPOS ? next_fn : n;
		}
		struct span name = {s + ns, gt - ns};
		name = span_trim(name);
		if (name.n == 0 || memchr(name.p, '\n', name.n))
			break;
		json_t *args = json_object();
		if (!args)
			return -ENOMEM;
		size_t p = gt + 1;
		for (;;) {
			size_t ps = find_from(s, fend, p, "<parameter=");
			if (ps == NPOS)
				break;
			size_t pgt = find_from(s, fend, ps + 11, ">");
			if (pgt == NPOS)
				break;
			size_t ve = find_from(s, fend, pgt + 1, "</parameter>");
			size_t nx = find_from(s, fend, pgt + 1, "<parameter=");
			size_t stop = ve;
			if (stop == NPOS || (nx != NPOS && nx < stop))
				stop = nx != NPOS ? nx : fend;
			struct span pn = {s + ps + 11, pgt - ps - 11};
			pn = span_trim(pn);
			const char *v = s + pgt + 1;
			size_t vn = stop - pgt - 1;
			if (vn && v[0] == '\n') {
				v++;
				vn--;
			}
			if (vn && v[vn - 1] == '\n')
				vn--;
			char tbuf[64];
			int known;
			const char *type =
			    param_type(tools, name.p, name.n, pn.p, pn.n, tbuf,
				       sizeof tbuf, &known);
			json_t *val = convert_value(v, vn, type, known);
			if (!val ||
			    json_object_setn_new(args, pn.p, pn.n, val)) {
				json_decref(args);
				return -ENOMEM;
			}
			p = stop == ve ? ve + 12 : stop;
		}
		moor_buf ab = {0};
		js_tojson(&ab, args);
		json_decref(args);
		json_t *call = ab.err
				   ? NULL
				   : new_call(id_prefix, json_array_size(calls),
					      name.p, name.n, ab.p, ab.len);
		moor_buf_fini(&ab);
		if (!call || json_array_append_new(calls, call))
			return -ENOMEM;
		i = fclosed ? fend + 11 : fend;
	}
	return json_array_size(calls) > before ? 0 : 1;
}

/* Whether s is valid UTF-8 (jansson takes nothing else; a decoder hands
 * us valid text, anything else is left as content). */
static int utf8_valid(const char *s, size_t n)
{
	const unsigned char *u = (const unsigned char *)s;
	for (size_t i = 0; i < n;) {
		unsigned c = u[i];
		size_t k = c < 0x80		      ? 1
			   : (c >= 0xc2 && c <= 0xdf) ? 2
			   : (c & 0xf0) == 0xe0	      ? 3
			   : (c >= 0xf0 && c <= 0xf4) ? 4
						      : 0;
		if (!k || i + k > n)
			return 0;
		unsigned cp = k == 1 ? c : c & (0xff >> (k + 1));
		for (size_t j = 1; j < k; j++) {
			if ((u[i + j] & 0xc0) != 0x80)
				return 0;
			cp = (cp << 6) | (u[i + j] & 0x3f);
		}
		if ((k == 3 &&
		     (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff))) ||
		    (k == 4 && (cp < 0x10000 || cp > 0x10ffff)))
			return 0;
		i += k;
	}
	return 1;
}

int gw_toolcall_block(gw_tmpl_family f, const char *body, size_t n, int closed,
		      const json_t *tools, const char *id_prefix, json_t *calls)
{
	if (!utf8_valid(body, n))
		return 1;
	if (gw_tmpl_xml_tools(f))
		return parse_xml_block(body, n, closed, tools, id_prefix,
				       calls);
	if (!closed)
		return 1;
	int oom = 0;
	json_t *c =
	    parse_json_call(body, n, id_prefix, json_array_size(calls), &oom);
	if (oom)
		return -ENOMEM;
	if (!c)
		return 1;
	return json_array_append_new(calls, c) ? -ENOMEM : 0;
}

int gw_toolcalls_parse(gw_tmpl_family f, const char *s, size_t n,
		       const json_t *tools, const char *id_prefix,
		       json_t **calls_out, char **rest, size_t *rest_len)
{
	*calls_out = NULL;
	*rest = NULL;
	*rest_len = 0;
	json_t *calls = json_array();
	moor_buf b = {0};
	if (!calls)
		return -ENOMEM;
	int oom = 0;
	size_t i = utf8_valid(s, n) ? 0 : n;
	while (i < n) {
		size_t open = find_from(s, n, i, "<tool_call>");
		if (open == NPOS)
			break;
		size_t body = open + 11;
		size_t close = find_from(s, n, body, "</tool_call>");
		/* a block is its body up to </tool_call>; an unclosed one
		 * runs to the end (the XML format may omit the close when the
		 * generation stopped right after </function>) */
		size_t end = close == NPOS ? n : close;
		size_t after = close == NPOS ? n : close + 12;
		int rc =
		    gw_toolcall_block(f, s + body, end - body, close != NPOS,
				      tools, id_prefix, calls);
		if (rc < 0) {
			oom = 1;
			break;
		}
		if (rc == 0) {
			moor_buf_put(&b, s + i, open - i);
			i = after;
		} else {
			/* not a call: keep the tag and look further on */
			moor_buf_put(&b, s + i, body - i);
			i = body;
		}
	}
	if (i == n && !b.len && !json_array_size(calls))
		moor_buf_put(&b, s,
			     n); /* nothing taken (or not UTF-8): as is */
	else if (i < n)
		moor_buf_put(&b, s + i, n - i);
	if (oom || b.err) {
		json_decref(calls);
		moor_buf_fini(&b);
		return -ENOMEM;
	}
	size_t len = b.len;
	if (json_array_size(calls) > 0) {
		len = js_trim_end(b.p ? b.p : "", b.len);
		if (js_trim_start(b.p ? b.p : "", len) == len)
			len = 0;
		*calls_out = calls;
	} else {
		json_decref(calls);
	}
	if (len == 0) {
		moor_buf_fini(&b);
		return 0;
	}
	b.p[len] = 0;
	*rest = b.p;
	*rest_len = len;
	return 0;
}

static char *dup_bytes(const char *s, size_t n)
{
	char *p = malloc(n + 1);
	if (p) {
		memcpy(p, s, n);
		p[n] = 0;
	}
	return p;
}

int gw_reply_parse(gw_tmpl_family f, const char *text, size_t len,
		   int think_open, const json_t *tools, const char *id_prefix,
		   gw_reply *out)
{
	memset(out, 0, sizeof *out);
	gw_think_split sp;
	gw_think_split_text(text, len, think_open, &sp);
	if (sp.has_reasoning) {
		out->reasoning =
		    dup_bytes(text + sp.reasoning_off, sp.reasoning_len);
		out->reasoning_len = sp.reasoning_len;
		if (!out->reasoning)
			return -ENOMEM;
	}
	int rc = gw_toolcalls_parse(f, text + sp.content_off, sp.content_len,
				    tools, id_prefix, &out->tool_calls,
				    &out->content, &out->content_len);
	if (rc)
		gw_reply_fini(out);
	return rc;
}

void gw_reply_fini(gw_reply *r)
{
	if (!r)
		return;
	free(r->reasoning);
	free(r->content);
	json_decref(r->tool_calls);
	memset(r, 0, sizeof *r);
}
