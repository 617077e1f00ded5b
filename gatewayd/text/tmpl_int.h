/* tmpl_int.h: what the template renderers (tmpl_*.c, template.c,
 * toolcall.c, replystream.c) share and nothing else sees: the value semantics
 * of @huggingface/jinja 0.5.13 that the real templates lean on: its `tojson`,
 * its number printing (JavaScript's Number::toString), its string `trim`
 * (JavaScript's whitespace set, which is also what `strip('\n')`,
 * `lstrip('\n')` and `rstrip('\n')` do there: the argument is ignored), the
 * key order of an object parsed by JSON.parse, and truthiness. */
#ifndef GW_TMPL_INT_H
#define GW_TMPL_INT_H

#include <jansson.h>
#include <stddef.h>

#include "buf.h"
#include "template.h"

/* JavaScript's String(x) of a double (shortest round-trip digits; exponent
 * form outside [1e-7, 1e21)); -0 prints as "0". Not finite: "Infinity",
 * "-Infinity", "NaN". */
void js_number(moor_buf *b, double v);

/* @huggingface/jinja's `tojson` (no arguments): separators ", " and ": ",
 * no indent, non-ASCII kept, JSON.stringify's string escapes (", \, \b, \f,
 * \n, \r, \t, other control bytes as \u00xx), keys in JSON.parse order. */
void js_tojson(moor_buf *b, const json_t *v);

/* What `{{ v }}` prints: null prints nothing, a string itself, a number as
 * js_number, a boolean "true"/"false", an array or object as js_tojson. */
void js_output(moor_buf *b, const json_t *v);

/* A string value's bytes (NUL bytes allowed). */
static inline const char *js_str(const json_t *v, size_t *n)
{
	*n = json_string_length(v);
	return json_string_value(v);
}

/* JavaScript's trimStart/trimEnd on UTF-8: the offset of the first byte that
 * is not whitespace, and the length without trailing whitespace. Whitespace is
 * ECMAScript's WhiteSpace and LineTerminator: TAB, LF, VT, FF, CR, SPACE,
 * U+00A0, U+1680, U+2000..U+200A, U+2028, U+2029, U+202F, U+205F, U+3000,
 * U+FEFF (not U+0085, not U+180E). */
size_t js_trim_start(const char *s, size_t n);
size_t js_trim_end(const char *s, size_t n);

/* A byte range into a string: what the renderers pass between steps. */
struct span {
	const char *p;
	size_t n;
};

static inline struct span span_trim(struct span s)
{
	size_t a = js_trim_start(s.p, s.n);
	struct span r = {s.p + a, s.n - a};
	r.n = js_trim_end(r.p, r.n);
	return r;
}

static inline struct span span_trim_start(struct span s)
{
	size_t a = js_trim_start(s.p, s.n);
	struct span r = {s.p + a, s.n - a};
	return r;
}

static inline struct span span_trim_end(struct span s)
{
	s.n = js_trim_end(s.p, s.n);
	return s;
}

/* The offset of the first (mem_find) or last (mem_rfind) occurrence of
 * needle in s, or (size_t)-1. */
size_t mem_find(const char *s, size_t n, const char *needle);
size_t mem_rfind(const char *s, size_t n, const char *needle);

static inline int span_starts(struct span s, const char *lit)
{
	size_t k = strlen(lit);
	return s.n >= k && memcmp(s.p, lit, k) == 0;
}

static inline int span_ends(struct span s, const char *lit)
{
	size_t k = strlen(lit);
	return s.n >= k && memcmp(s.p + s.n - k, lit, k) == 0;
}

/* An object's members in the order JSON.parse gives them to Object.entries:
 * keys that are array indices ("0", "17"; no leading zero, below 2^32 - 1)
 * first, ascending, then the others in insertion order (jansson keeps
 * insertion order). *keys and *vals are malloc'd arrays of *n entries the
 * caller frees with free() (borrowed keys and values); -ENOMEM on failure. */
int js_entries(const json_t *obj, const char ***keys, json_t ***vals,
	       size_t *n);

/* Jinja truthiness of a JSON value (absent is NULL: false). */
int js_truthy(const json_t *v);

/* JSON equality with a string literal (the templates' `x == 'system'`). */
static inline int js_is(const json_t *v, const char *lit)
{
	return v && json_is_string(v) && json_string_length(v) == strlen(lit) &&
	       memcmp(json_string_value(v), lit, strlen(lit)) == 0;
}

/* The renderers. ctx is validated and normalized by template.c first
 * (tmpl_msg views); text goes to out; a template's raise_exception fills err
 * with its message and returns MOOR_EFORMAT. */
struct tmpl_msg {
	const json_t *m;       /* the message object */
	const json_t *role;    /* a string */
	const json_t *content; /* as sent (may be NULL) */
	struct span text;      /* qwen3: content as one string (parts joined) */
	const json_t *reasoning; /* a string or NULL */
	const json_t *calls;	 /* an array or NULL */
	json_t *args;		 /* qwen3.5+: an array of each call's arguments
				    as an object (owned), NULL without calls */
};

struct tmpl_in {
	gw_tmpl_family family;
	const struct tmpl_msg *msgs;
	size_t n;
	const json_t *tools; /* NULL or an array */
	int add_generation_prompt;
	const json_t *kwargs; /* NULL or an object */
};

int tmpl_render_qwen3(const struct tmpl_in *in, moor_buf *out, gw_prompt *info,
		      char *err);
int tmpl_render_qwen35(const struct tmpl_in *in, moor_buf *out, gw_prompt *info,
		       char *err);

static inline const json_t *tmpl_kwarg(const struct tmpl_in *in,
				       const char *name)
{
	return in->kwargs ? json_object_get(in->kwargs, name) : NULL;
}

#endif
