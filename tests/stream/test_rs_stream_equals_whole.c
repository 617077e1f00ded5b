/* test_rs_stream_equals_whole: the stream parser's invariant (replystream.h):
 * however a generation is split into pieces, its events add up to
 * gw_reply_parse() of the whole, stop-cut text: the same reasoning bytes,
 * content bytes and tool calls (ids, names, argument strings; json_equal).
 *
 * A corpus of replies (plain text, whitespace at both ends, reasoning with
 * and without the prompt's <think>, unclosed and unopened think, qwen3 JSON
 * calls and qwen3.5 XML calls with typed parameters, malformed blocks, text
 * around calls, stop strings inside reasoning and blocks, multi-byte UTF-8
 * next to tags) is streamed with every split (short texts: every set of
 * split points), and for longer ones every single split point, every pair,
 * one character per piece, and random sets from a fixed seed (with empty
 * pieces); some runs make the callback fail now and then (the stream must
 * hand the event over again). Each reply runs in both tool formats, with
 * and without think_open. Then random tag soups, streamed in random pieces,
 * the same way. */
#include "rs_check.h"

static const char *TOOLS =
    "[{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", "
    "\"parameters\": {\"type\": \"object\", \"properties\": {"
    "\"city\": {\"type\": \"string\"}, \"days\": {\"type\": \"integer\"}, "
    "\"metric\": {\"type\": \"boolean\"}, \"temp\": {\"type\": \"number\"}, "
    "\"opts\": {\"type\": \"object\"}, \"tags\": {\"type\": \"array\"}, "
    "\"note\": {\"type\": [\"null\", \"string\"]}}}}}, "
    "{\"type\": \"function\", \"function\": {\"name\": \"bash\", "
    "\"parameters\": {\"properties\": {\"command\": {\"type\": "
    "\"string\"}, \"limit\": {\"type\": \"integer\"}}}}}]";

#define J_CALL(name, args)                                                    \
	"<tool_call>\n{\"name\": \"" name "\", \"arguments\": " args          \
	"}\n</tool_call>"

static const char *const TEXTS[] = {
    "",
    "Hello, world.",
    "  \n Leading and trailing whitespace \n\n",
    "\n\n",
    " ",
    "a",
    "<",
    "<think",
    "<thin",
    "</think",
    "<tool_c",
    "text then <tool_call",
    "text then </tool_call>",
    "<think>\nLet me think.\n</think>\n\nThe answer is 4.",
    "\n  <think>padded</think>  answer \n",
    "<think>unclosed reasoning\n\n",
    "<think>\n\n",
    "reasoning without an open\n</think>\n\ncontent after",
    "<think></think>",
    "<think>\n\n</think>\n\n",
    "<think>\r\nwindows\r\n</think>\r\n\r\nlines\r\n",
    "a</think>b</think>c",
    "<think>I will use <tool_call> now</think>ok",
    "say <think> later",
    "\xe3\x80\x80<think>ideographic space first</think>\xc2\xa0x\xc2\xa0",
    J_CALL("get_weather", "{\"city\": \"Paris\"}"),
    "Let me check.\n" J_CALL("get_weather", "{\"city\": \"Paris\"}") "\n" J_CALL(
	"bash", "{\"command\": \"ls -la\", \"limit\": 2}") "\n",
    "<think>\nplan\n</think>\n\nA \n" J_CALL("bash", "{}") "\n\nB  \n",
    "A \n" J_CALL("bash", "{}") " \n ",
    "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": }\n</tool_call> "
    "tail",
    "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n",
    "<tool_call>\n{\"arguments\": {}}\n</tool_call>",
    "<tool_call>junk<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n"
    "</tool_call>",
    "<tool_call>\n{\"name\": \"s\", \"arguments\": \"{\\\"x\\\": 1}\"}\n"
    "</tool_call>",
    "<tool_call>\n{\"name\": \"n\", \"arguments\": null}\n</tool_call>",
    "<tool_call>\n{\"name\": \"e\", \"arguments\": {\"\\u0061\": 1}}\n"
    "</tool_call>",
    "<tool_call>\n{\"name\": \"a\", \"arguments\": [1]}\n</tool_call>x",
    "<tool_call></tool_call><tool_call>",
    "</tool_call>" J_CALL("bash", "{}"),
    "<think>\xe6\x80\x9d\xe8\x80\x83\xf0\x9f\xa4\x94</think>"
    "\xe7\xad\x94\xe6\xa1\x88\xf0\x9f\x98\x80" J_CALL(
	"\xc3\xa9", "{\"q\": \"\xe6\x97\xa5\xe6\x9c\xac\"}") "\xf0\x9f\x8e\x89",
    "\xe7\xad\x94\xe6\xa1\x88\xe3\x80\x80" J_CALL("bash", "{}")
	"\xe3\x80\x80",
    "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n"
    "</parameter>\n<parameter=days>\n3\n</parameter>\n<parameter=metric>\n"
    "true\n</parameter>\n<parameter=temp>\n-1.5e2\n</parameter>\n"
    "<parameter=opts>\n{\"a\": [1, 2]}\n</parameter>\n<parameter=note>\n"
    "null\n</parameter>\n</function>\n</tool_call>",
    "Checking.\n\n<tool_call>\n<function=bash>\n<parameter=command>\n"
    "ls\n</parameter>\n</function>\n",
    "<tool_call>\n<function=bash>\n<parameter=command>\nls\n</parameter>\n"
    "</function>\n<function=get_weather>\n<parameter=days>\nmany\n"
    "</parameter>\n</function>\n</tool_call>\nafter",
    "<tool_call>\n<function=bash>\n<parameter=command>\nunfinished",
    "<tool_call>\n<function=>\n</function>\n</tool_call>",
    "<tool_call>\n<function=bash>\n<parameter=command>\necho "
    "\xe4\xbd\xa0\xe5\xa5\xbd\n</parameter>\n</tool_call>\xe5\xa5\xbd",
    "I should run ls.\n</think>\n\nLet me look.\n\n<tool_call>\n"
    "<function=bash>\n<parameter=command>\nls -la\n</parameter>\n"
    "<parameter=limit>\n5\n</parameter>\n</function>\n</tool_call>\n"
    "<tool_call>\n<function=bash>\n<parameter=command>\npwd\n"
    "</parameter>\n</function>\n</tool_call>",
    "<tool_call>\n<function=a>\n</function>\n</tool_call>"
    "<tool_call>\n<function=b>\n</function>\n</tool_call>  ",
};

/* Replies with stop strings (NULL-terminated lists). */
static const struct {
	const char *text;
	const char *stop[4];
} STOPS[] = {
    {"Hello STOP world", {"STOP"}},
    {"STOP at the start", {"STOP"}},
    {"ends with the stop STOP", {"STOP"}},
    {"almost ST", {"STOP"}},
    {"<think>abc END def</think>x", {"END"}},
    {"<think>a</think>b", {"</think>"}},
    {"xxabcdyy", {"abcd", "bc"}},
    {"aaab", {"aab"}},
    {"aaaab then", {"aab", "b t"}},
    {"calling " J_CALL("bash", "{\"command\": \"END\"}") " after",
     {"END"}},
    {"<tool_call>\n<function=bash>\n</function>\nEND\n</tool_call>",
     {"END"}},
    {"<tool_call>\n<function=bash>\n</function>\n</tool_call> and",
     {" and", "nd"}},
    {"\xe5\x8f\xa5\xe5\xad\x90\xe3\x80\x82\xe4\xb8\x8b\xe4\xb8\x80",
     {"\xe3\x80\x82"}},
    {"emoji \xf0\x9f\x9b\x91 stop", {"\xf0\x9f\x9b\x91"}},
    {"text with <to", {"<tool"}},
    {"white   \n", {"\n\n"}},
    {"no stop here", {"", "zzz"}},
};

static size_t n_runs;

/* The char boundaries of text (offsets 1 .. n-1 where a character starts). */
static size_t boundaries(const char *t, size_t n, size_t *b)
{
	size_t k = 0;
	for (size_t i = 1; i < n; i++)
		if (((unsigned char)t[i] & 0xc0) != 0x80)
			b[k++] = i;
	return k;
}

static void splits(const char *what, const gw_rs_cfg *cfg, const char *t)
{
	size_t n = strlen(t);
	size_t *b = malloc((n + 1) * sizeof *b);
	size_t *cuts = malloc((2 * n + 2) * sizeof *cuts);
	REQUIRE(b && cuts, "oom");
	size_t nb = boundaries(t, n, b);
	char name[256];
	snprintf(name, sizeof name, "%s family %d think_open %d", what,
		 (int)cfg->family, cfg->think_open);
	if (nb <= 12) {
		for (size_t m = 0; m < ((size_t)1 << nb); m++) {
			size_t k = 0;
			for (size_t i = 0; i < nb; i++)
				if (m >> i & 1)
					cuts[k++] = b[i];
			rs_check(name, cfg, t, n, cuts, k, m % 7 == 3 ? 3 : 0);
			n_runs++;
		}
		goto out;
	}
	rs_check(name, cfg, t, n, NULL, 0, 0);
	rs_check(name, cfg, t, n, b, nb, 0); /* a character per piece */
	rs_check(name, cfg, t, n, b, nb, 2);
	n_runs += 3;
	for (size_t i = 0; i < nb; i++) {
		rs_check(name, cfg, t, n, b + i, 1, 0);
		n_runs++;
		for (size_t j = i + 1; nb <= 80 && j < nb; j++) {
			cuts[0] = b[i];
			cuts[1] = b[j];
			rs_check(name, cfg, t, n, cuts, 2, 0);
			n_runs++;
		}
	}
	for (int it = 0; it < 300; it++) {
		unsigned p = (unsigned)(rs_rand() % 90) + 5; /* percent */
		size_t k = 0;
		for (size_t i = 0; i < nb; i++) {
			if (rs_rand() % 100 < p)
				cuts[k++] = b[i];
			if (rs_rand() % 50 == 0)
				cuts[k++] = b[i]; /* an empty piece */
		}
		rs_check(name, cfg, t, n, cuts, k, it % 5 == 0 ? 4 : 0);
		n_runs++;
	}
out:
	free(b);
	free(cuts);
}

/* Random soups of tags and text (valid UTF-8), streamed in random pieces
 * at character boundaries. */
static void soups(const json_t *tools)
{
	static const char *bits[] = {
	    "<tool_call>", "</tool_call>", "<function=", "</function>",
	    "<parameter=", "</parameter>", "<think>", "</think>", ">", "\n",
	    "\n\n", " ", "\r", "{", "}", "\"name\"", ":", "\"arguments\"",
	    "\"x\"", ",", "[", "]", "1", "f", "bash", "get_weather", "days",
	    "city", "=", "\xc3\xa9", "\xe3\x80\x80", "\xf0\x9f\x98\x80",
	    "\\", "\"", "null", "<", "</", "<tool", "STOP", "ST",
	    "{\"name\": \"f\", \"arguments\": {}}",
	    "{\"name\": \"bash\", \"arguments\": {\"limit\": 1}}",
	    "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>",
	    "<tool_call>\n<function=bash>\n<parameter=limit>\n3\n"
	    "</parameter>\n</function>\n</tool_call>",
	    "<function=bash>\n", "<parameter=limit>\n", "<parameter=city>"};
	static const char *stops[] = {"STOP", "\n\n\n"};
	char buf[600];
	size_t cuts[1300], calls = 0, stopped = 0;
	for (int it = 0; it < 6000; it++) {
		size_t n = 0;
		int parts = (int)(rs_rand() % 24) + 1;
		for (int k = 0; k < parts; k++) {
			const char *x =
			    bits[rs_rand() % (sizeof bits / sizeof bits[0])];
			size_t l = strlen(x);
			if (n + l >= sizeof buf)
				break;
			memcpy(buf + n, x, l);
			n += l;
		}
		buf[n] = 0;
		gw_rs_cfg cfg = {it & 1 ? GW_TMPL_QWEN3 : GW_TMPL_QWEN3_5,
				 it % 3 == 0,
				 tools,
				 it % 4 ? NULL : "call_soup_",
				 stops,
				 (size_t)(it % 5 == 0 ? 2 : 0)};
		size_t b[600];
		size_t nb = boundaries(buf, n, b);
		for (int rep = 0; rep < 4; rep++) {
			size_t k = 0;
			unsigned p = rep == 0 ? 100 : (unsigned)(rs_rand() % 60);
			for (size_t i = 0; i < nb; i++)
				if (rs_rand() % 100 < p)
					cuts[k++] = b[i];
			char name[64];
			snprintf(name, sizeof name, "soup %d split %d", it, rep);
			rs_check(name, &cfg, buf, n, cuts, k,
				 rep == 3 ? 2 : 0);
			n_runs++;
		}
		rs_out w;
		rs_whole(&cfg, buf, n, &w);
		calls += json_array_size(w.calls);
		stopped += w.stopped;
		rs_out_fini(&w);
	}
	printf("soups: 6000 texts, %zu calls, %zu stopped\n", calls, stopped);
	CHECK(calls > 500 && stopped > 100, "the soups rarely make a call or "
					     "stop: %zu %zu",
	      calls, stopped);
}

int main(void)
{
	json_t *tools = json_loads(TOOLS, 0, NULL);
	REQUIRE(tools, "tools");
	static const gw_tmpl_family fam[] = {GW_TMPL_QWEN3, GW_TMPL_QWEN3_5};
	for (size_t i = 0; i < sizeof TEXTS / sizeof TEXTS[0]; i++) {
		char what[32];
		snprintf(what, sizeof what, "text %zu", i);
		for (int f = 0; f < 2; f++)
			for (int open = 0; open < 2; open++) {
				gw_rs_cfg cfg = {fam[f], open, tools,
						 i % 3 ? NULL : "call_x_",
						 NULL, 0};
				splits(what, &cfg, TEXTS[i]);
			}
	}
	for (size_t i = 0; i < sizeof STOPS / sizeof STOPS[0]; i++) {
		char what[32];
		snprintf(what, sizeof what, "stop case %zu", i);
		size_t ns = 0;
		while (ns < 4 && STOPS[i].stop[ns])
			ns++;
		for (int f = 0; f < 2; f++)
			for (int open = 0; open < 2; open++) {
				gw_rs_cfg cfg = {fam[f], open, tools, NULL,
						 STOPS[i].stop, ns};
				splits(what, &cfg, STOPS[i].text);
			}
	}
	soups(tools);
	printf("%zu streams compared\n", n_runs);
	json_decref(tools);
	return t_done("test_rs_stream_equals_whole");
}
