/* tmpl_util.c: the JavaScript value semantics of @huggingface/jinja that the
 * template renderers need (see tmpl_int.h): number printing,
 * tojson, whitespace trimming, JSON.parse key order, truthiness. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tmpl_int.h"

/* --------------------------------------------------------------- numbers */

/* ECMAScript Number::toString(10): the shortest digits that round-trip
 * (the smallest precision whose correctly rounded %e reads back equal),
 * then decimal notation for exponents in [-7, 21), exponent notation
 * otherwise ("1e+21", "1.5e-7"). */
void js_number(moor_buf *b, double v)
{
	if (isnan(v)) {
		moor_buf_puts(b, "NaN");
		return;
	}
	if (isinf(v)) {
		moor_buf_puts(b, v < 0 ? "-Infinity" : "Infinity");
		return;
	}
	if (v == 0) {
		moor_buf_puts(b, "0"); /* String(-0) is "0" */
		return;
	}
	char e[40];
	for (int p = 0; p < 17; p++) {
		snprintf(e, sizeof e, "%.*e", p, v);
		if (strtod(e, NULL) == v)
			break;
	}
	/* e is [-]d[.ddd]e[+-]xx: digits and exponent. */
	char digits[24];
	int k = 0, neg = 0;
	const char *q = e;
	if (*q == '-') {
		neg = 1;
		q++;
	}
	for (; *q && *q != 'e'; q++)
		if (*q >= '0' && *q <= '9')
			digits[k++] = *q;
	int x = atoi(q + 1);
	while (k > 1 && digits[k - 1] == '0')
		k--;
	digits[k] = 0;
	int n = x + 1; /* the value is 0.digits * 10^n */
	char out[64];
	int o = 0;
	if (neg)
		out[o++] = '-';
	if (k <= n && n <= 21) {
		memcpy(out + o, digits, (size_t)k);
		o += k;
		for (int i = 0; i < n - k; i++)
			out[o++] = '0';
	} else if (0 < n && n <= 21) {
		memcpy(out + o, digits, (size_t)n);
		o += n;
		out[o++] = '.';
		memcpy(out + o, digits + n, (size_t)(k - n));
		o += k - n;
	} else if (-6 < n && n <= 0) {
		out[o++] = '0';
		out[o++] = '.';
		for (int i = 0; i < -n; i++)
			out[o++] = '0';
		memcpy(out + o, digits, (size_t)k);
		o += k;
	} else {
		out[o++] = digits[0];
		if (k > 1) {
			out[o++] = '.';
			memcpy(out + o, digits + 1, (size_t)(k - 1));
			o += k - 1;
		}
		o += snprintf(out + o, sizeof out - (size_t)o, "e%c%d",
			      n - 1 < 0 ? '-' : '+', abs(n - 1));
	}
	moor_buf_put(b, out, (size_t)o);
}

static double num_value(const json_t *v)
{
	/* JSON.parse reads every number as a double; an integer that jansson
	 * kept exact rounds the same way the decimal literal would. */
	return json_is_integer(v) ? (double)json_integer_value(v)
				  : json_real_value(v);
}

/* ------------------------------------------------------------------ json */

static void js_json_string(moor_buf *b, const char *s, size_t n)
{
	static const char hex[] = "0123456789abcdef";
	size_t run = 0;
	moor_buf_put(b, "\"", 1);
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];
		const char *esc = NULL;
		char u[7];
		if (c == '"')
			esc = "\\\"";
		else if (c == '\\')
			esc = "\\\\";
		else if (c == '\b')
			esc = "\\b";
		else if (c == '\f')
			esc = "\\f";
		else if (c == '\n')
			esc = "\\n";
		else if (c == '\r')
			esc = "\\r";
		else if (c == '\t')
			esc = "\\t";
		else if (c < 0x20) {
			u[0] = '\\';
			u[1] = 'u';
			u[2] = '0';
			u[3] = '0';
			u[4] = hex[c >> 4];
			u[5] = hex[c & 15];
			u[6] = 0;
			esc = u;
		}
		if (!esc)
			continue;
		moor_buf_put(b, s + run, i - run);
		moor_buf_puts(b, esc);
		run = i + 1;
	}
	moor_buf_put(b, s + run, n - run);
	moor_buf_put(b, "\"", 1);
}

void js_tojson(moor_buf *b, const json_t *v)
{
	switch (json_typeof(v)) {
	case JSON_NULL:
		moor_buf_puts(b, "null");
		return;
	case JSON_TRUE:
		moor_buf_puts(b, "true");
		return;
	case JSON_FALSE:
		moor_buf_puts(b, "false");
		return;
	case JSON_INTEGER:
	case JSON_REAL: {
		double d = num_value(v);
		if (!isfinite(d))
			moor_buf_puts(b, "null"); /* JSON.stringify(Infinity) */
		else
			js_number(b, d);
		return;
	}
	case JSON_STRING: {
		size_t n;
		const char *s = js_str(v, &n);
		js_json_string(b, s, n);
		return;
	}
	case JSON_ARRAY: {
		moor_buf_put(b, "[", 1);
		for (size_t i = 0; i < json_array_size(v); i++) {
			if (i)
				moor_buf_put(b, ", ", 2);
			js_tojson(b, json_array_get(v, i));
		}
		moor_buf_put(b, "]", 1);
		return;
	}
	case JSON_OBJECT: {
		const char **keys;
		json_t **vals;
		size_t n;
		if (js_entries(v, &keys, &vals, &n)) {
			b->err = -ENOMEM;
			return;
		}
		moor_buf_put(b, "{", 1);
		for (size_t i = 0; i < n; i++) {
			if (i)
				moor_buf_put(b, ", ", 2);
			js_json_string(b, keys[i], strlen(keys[i]));
			moor_buf_put(b, ": ", 2);
			js_tojson(b, vals[i]);
		}
		moor_buf_put(b, "}", 1);
		free(keys);
		free(vals);
		return;
	}
	}
}

void js_output(moor_buf *b, const json_t *v)
{
	if (!v || json_is_null(v))
		return;
	if (json_is_string(v)) {
		size_t n;
		const char *s = js_str(v, &n);
		moor_buf_put(b, s, n);
	} else if (json_is_number(v)) {
		js_number(b, num_value(v));
	} else {
		js_tojson(b, v);
	}
}

/* ------------------------------------------------------------ whitespace */

/* The code point at s (n > 0 bytes left) and its length; a malformed byte
 * reads as itself (jansson hands us valid UTF-8, so only for safety). */
static unsigned cp_at(const unsigned char *s, size_t n, size_t *len)
{
	unsigned c = s[0];
	if (c < 0x80 || n < 2) {
		*len = 1;
		return c;
	}
	if ((c & 0xe0) == 0xc0) {
		*len = 2;
		return ((c & 0x1f) << 6) | (s[1] & 0x3f);
	}
	if ((c & 0xf0) == 0xe0 && n >= 3) {
		*len = 3;
		return ((c & 0x0f) << 12) | ((s[1] & 0x3f) << 6) |
		       (s[2] & 0x3f);
	}
	if ((c & 0xf8) == 0xf0 && n >= 4) {
		*len = 4;
		return ((c & 0x07) << 18) | ((s[1] & 0x3f) << 12) |
		       ((s[2] & 0x3f) << 6) | (s[3] & 0x3f);
	}
	*len = 1;
	return c;
}

static int js_space(unsigned c)
{
	return (c >= 0x09 && c <= 0x0d) || c == 0x20 || c == 0xa0 ||
	       c == 0x1680 || (c >= 0x2000 && c <= 0x200a) || c == 0x2028 ||
	       c == 0x2029 || c == 0x202f || c == 0x205f || c == 0x3000 ||
	       c == 0xfeff;
}

size_t js_trim_start(const char *s, size_t n)
{
	const unsigned char *u = (const unsigned char *)s;
	size_t i = 0;
	while (i < n) {
		size_t l;
		if (!js_space(cp_at(u + i, n - i, &l)))
			break;
		i += l;
	}
	return i;
}

size_t js_trim_end(const char *s, size_t n)
{
	const unsigned char *u = (const unsigned char *)s;
	while (n > 0) {
		size_t st = n - 1; /* back to the lead byte */
		while (st > 0 && (u[st] & 0xc0) == 0x80 && n - st < 4)
			st--;
		size_t l;
		unsigned c = cp_at(u + st, n - st, &l);
		if (st + l != n || !js_space(c))
			break;
		n = st;
	}
	return n;
}

size_t mem_find(const char *s, size_t n, const char *needle)
{
	size_t k = strlen(needle);
	if (k > n)
		return (size_t)-1;
	for (size_t i = 0; i + k <= n; i++)
		if (s[i] == needle[0] && memcmp(s + i, needle, k) == 0)
			return i;
	return (size_t)-1;
}

size_t mem_rfind(const char *s, size_t n, const char *needle)
{
	size_t k = strlen(needle);
	if (k > n)
		return (size_t)-1;
	for (size_t i = n - k + 1; i-- > 0;)
		if (s[i] == needle[0] && memcmp(s + i, needle, k) == 0)
			return i;
	return (size_t)-1;
}

/* ------------------------------------------------------------- key order */

/* An array index in ECMAScript's sense: a canonical decimal below 2^32-1. */
static int array_index(const char *k, unsigned long long *out)
{
	if (!k[0] || (k[0] == '0' && k[1]))
		return 0;
	unsigned long long v = 0;
	for (const char *p = k; *p; p++) {
		if (*p < '0' || *p > '9')
			return 0;
		v = v * 10 + (unsigned)(*p - '0');
		if (v >= 4294967295ull)
			return 0;
	}
	*out = v;
	return 1;
}

struct ent {
	const char *key;
	json_t *val;
	unsigned long long idx;
	size_t pos;
	int is_idx;
};

static int ent_cmp(const void *a, const void *b)
{
	const struct ent *x = a, *y = b;
	if (x->is_idx != y->is_idx)
		return x->is_idx ? -1 : 1;
	if (x->is_idx)
		return x->idx < y->idx ? -1 : x->idx > y->idx;
	return x->pos < y->pos ? -1 : x->pos > y->pos;
}

int js_entries(const json_t *obj, const char ***keys, json_t ***vals, size_t *n)
{
	size_t cnt = json_object_size(obj), i = 0;
	*keys = NULL;
	*vals = NULL;
	*n = 0;
	struct ent *e = calloc(cnt ? cnt : 1, sizeof *e);
	const char **k = malloc((cnt ? cnt : 1) * sizeof *k);
	json_t **v = malloc((cnt ? cnt : 1) * sizeof *v);
	if (!e || !k || !v) {
		free(e);
		free(k);
		free(v);
		return -ENOMEM;
	}
	const char *key;
	json_t *val;
	int any_idx = 0;
	json_object_foreach((json_t *)obj, key, val)
	{
		e[i].key = key;
		e[i].val = val;
		e[i].pos = i;
		e[i].is_idx = array_index(key, &e[i].idx);
		any_idx |= e[i].is_idx;
		i++;
	}
	if (any_idx)
		qsort(e, cnt, sizeof *e, ent_cmp);
	for (i = 0; i < cnt; i++) {
		k[i] = e[i].key;
		v[i] = e[i].val;
	}
	free(e);
	*keys = k;
	*vals = v;
	*n = cnt;
	return 0;
}

int js_truthy(const json_t *v)
{
	if (!v)
		return 0;
	switch (json_typeof(v)) {
	case JSON_NULL:
	case JSON_FALSE:
		return 0;
	case JSON_TRUE:
		return 1;
	case JSON_INTEGER:
	case JSON_REAL:
		return num_value(v) != 0; /* NaN cannot come from JSON */
	case JSON_STRING:
		return json_string_length(v) > 0;
	case JSON_ARRAY:
		return json_array_size(v) > 0;
	case JSON_OBJECT:
		return json_object_size(v) > 0;
	}
	return 0;
}
