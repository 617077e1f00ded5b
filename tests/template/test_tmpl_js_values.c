/* test_tmpl_js_values: the JavaScript value semantics the templates see
 * through @huggingface/jinja (gatewayd/text/tmpl_int.h): String(x) of a number
 * (the table was printed by node 20: String(x) of each value), tojson's
 * separators, escapes and JSON.parse key order (integer-like keys first),
 * `{{ v }}` output, JavaScript's trim() whitespace set, truthiness. */
#include "t.h"
#include "tmpl_int.h"

static const struct {
	double v;
	const char *js;
} NUMS[] = {
    {0.0000000000000000, "0"},
    {-0.0, "0"},
    {1.0000000000000000, "1"},
    {-1.0000000000000000, "-1"},
    {0.10000000000000001, "0.1"},
    {0.30000000000000004, "0.30000000000000004"},
    {1.5000000000000000, "1.5"},
    {-0.25000000000000000, "-0.25"},
    {1.0000000000000000e21, "1e+21"},
    {1.0000000000000000e20, "100000000000000000000"},
    {1.2345678901234568e20, "123456789012345680000"},
    {9.9999999999999995e-8, "1e-7"},
    {1.4999999999999999e-7, "1.5e-7"},
    {9.9999999999999995e-7, "0.000001"},
    {4.9406564584124654e-324, "5e-324"},
    {1.7976931348623157e308, "1.7976931348623157e+308"},
    {9007199254740992.0, "9007199254740992"},
    {9007199254740994.0, "9007199254740994"},
    {1.2345678901234567e19, "12345678901234567000"},
    {123.45600000000000, "123.456"},
    {-12345000000000.000, "-12345000000000"},
    {0.33333333333333331, "0.3333333333333333"},
    {0.66666666666666663, "0.6666666666666666"},
    {100.00000000000000, "100"},
    {1.0000000000000001e300, "1e+300"},
    {4.3499999999999996, "4.35"},
    {0.00012300000000000001, "0.000123"},
    {1.0000000000000002, "1.0000000000000002"},
    {9.9999999999999992e22, "1e+23"},
    {1.0000000000000000e22, "1e+22"},
    {0.000030000000000000001, "0.00003"},
    {0.000025000000000000001, "0.000025"},
    {-9.9999999999999995e-8, "-1e-7"},
};

static void numbers(void)
{
	for (size_t i = 0; i < sizeof NUMS / sizeof NUMS[0]; i++) {
		moor_buf b = {0};
		js_number(&b, NUMS[i].v);
		CHECK(b.p && !strcmp(b.p, NUMS[i].js), "%.17g: '%s', want '%s'",
		      NUMS[i].v, b.p ? b.p : "", NUMS[i].js);
		moor_buf_fini(&b);
	}
}

static char *tojson_of(const char *json)
{
	json_error_t je;
	json_t *v = json_loads(
	    json, JSON_DECODE_ANY | JSON_ALLOW_NUL | JSON_DECODE_INT_AS_REAL,
	    &je);
	REQUIRE(v, "%s: %s", json, je.text);
	moor_buf b = {0};
	js_tojson(&b, v);
	json_decref(v);
	return b.p;
}

static void tojson(void)
{
	/* jinja's {{ o | tojson }} of JSON.parse of the same text (node) */
	const char *in =
	    "{\"b\":1,\"2\":[1,\"x\\u0001\\u001f\\\"\\\\\\n\\t\\b\\f\\r"
	    "\\/\\u00e9\\ud83d\\ude42<>&\\u2028\"],\"a\":{\"10\":null,"
	    "\"9\":true,\"01\":false,\"-1\":1.5,\"4294967295\":0,"
	    "\"4294967294\":0},\"\":[]}";
	const char *want =
	    "{\"2\": [1, \"x\\u0001\\u001f\\\"\\\\\\n\\t\\b\\f\\r/"
	    "\xc3\xa9\xf0\x9f\x99\x82<>&\xe2\x80\xa8\"], \"b\": 1, \"a\": "
	    "{\"9\": true, \"10\": null, \"4294967294\": 0, \"01\": false, "
	    "\"-1\": 1.5, \"4294967295\": 0}, \"\": []}";
	char *got = tojson_of(in);
	CHECK(!strcmp(got, want), "tojson\n  got  %s\n  want %s", got, want);
	free(got);
	struct {
		const char *in, *want;
	} small[] = {
	    {"[]", "[]"},
	    {"{}", "{}"},
	    {"\"\\u0000\\u007f\"", "\"\\u0000\x7f\""},
	    {"[1.0, -0.0, 1e21, 12345678901234567890]",
	     "[1, 0, 1e+21, 12345678901234567000]"},
	    {"[[[]], {\"a\": {}}]", "[[[]], {\"a\": {}}]"},
	    {"null", "null"},
	    {"true", "true"},
	};
	for (size_t i = 0; i < sizeof small / sizeof small[0]; i++) {
		char *g = tojson_of(small[i].in);
		CHECK(!strcmp(g, small[i].want), "%s: '%s', want '%s'",
		      small[i].in, g, small[i].want);
		free(g);
	}
}

static void output(void)
{
	struct {
		const char *in, *want;
	} cases[] = {
	    {"null", ""},
	    {"\"s\"", "s"},
	    {"2.50", "2.5"},
	    {"false", "false"},
	    {"[1, \"a\"]", "[1, \"a\"]"},
	    {"{\"k\": null}", "{\"k\": null}"},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		json_t *v = json_loads(cases[i].in, JSON_DECODE_ANY, NULL);
		moor_buf b = {0};
		moor_buf_put(&b, "", 0);
		js_output(&b, v);
		CHECK(!strcmp(b.p, cases[i].want), "%s: '%s'", cases[i].in,
		      b.p);
		moor_buf_fini(&b);
		json_decref(v);
	}
	moor_buf b = {0};
	js_output(&b, NULL);
	CHECK(b.len == 0, "absent prints nothing");
	moor_buf_fini(&b);
}

static void trim(void)
{
	/* every code point JavaScript's trim() removes, and some it keeps */
	const char *ws[] = {"\t",	    "\n",	    "\v",
			    "\f",	    "\r",	    " ",
			    "\xc2\xa0",	    "\xe1\x9a\x80", "\xe2\x80\x80",
			    "\xe2\x80\x8a", "\xe2\x80\xa8", "\xe2\x80\xa9",
			    "\xe2\x80\xaf", "\xe2\x81\x9f", "\xe3\x80\x80",
			    "\xef\xbb\xbf"};
	const char *kept[] = {"\xc2\x85", "\xe1\xa0\x8e", "\xe2\x80\x8b", "x",
			      "\xe2\x80\x8b "};
	for (size_t i = 0; i < sizeof ws / sizeof ws[0]; i++) {
		char s[32];
		snprintf(s, sizeof s, "%s%sa%s%s", ws[i], ws[i], ws[i], ws[i]);
		size_t n = strlen(s), a = js_trim_start(s, n);
		size_t e = js_trim_end(s, n);
		CHECK(e - a == 1 && s[a] == 'a', "whitespace %zu: %zu..%zu", i,
		      a, e);
	}
	for (size_t i = 0; i < sizeof kept / sizeof kept[0]; i++) {
		size_t n = strlen(kept[i]);
		CHECK(js_trim_start(kept[i], n) == 0, "kept %zu start", i);
		CHECK(js_trim_end(kept[i], n) == (i == 4 ? n - 1 : n),
		      "kept %zu end", i);
	}
	CHECK(js_trim_start("", 0) == 0 && js_trim_end("", 0) == 0, "empty");
	CHECK(js_trim_start(" \n", 2) == 2 && js_trim_end(" \n", 2) == 0,
	      "all space");
}

static void truthy(void)
{
	const char *no[] = {"null", "false", "0", "0.0", "\"\"", "[]", "{}"};
	const char *yes[] = {"true", "1", "-0.5", "\"0\"", "[0]", "{\"a\":0}"};
	for (size_t i = 0; i < sizeof no / sizeof no[0]; i++) {
		json_t *v = json_loads(no[i], JSON_DECODE_ANY, NULL);
		CHECK(!js_truthy(v), "%s is falsy", no[i]);
		json_decref(v);
	}
	for (size_t i = 0; i < sizeof yes / sizeof yes[0]; i++) {
		json_t *v = json_loads(yes[i], JSON_DECODE_ANY, NULL);
		CHECK(js_truthy(v), "%s is truthy", yes[i]);
		json_decref(v);
	}
	CHECK(!js_truthy(NULL), "absent is falsy");
}

int main(void)
{
	numbers();
	tojson();
	output();
	trim();
	truthy();
	return t_done("test_tmpl_js_values");
}
