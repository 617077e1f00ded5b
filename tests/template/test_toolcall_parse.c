/* test_toolcall_parse: the reasoning split and both tool-call formats read
 * back from model output (gatewayd/text/toolcall.h): well-formed calls with ids
 * and JSON-string arguments, parameter values converted by the schema's
 * types, malformed output (unclosed tags, invalid JSON, no <function=...>,
 * invalid UTF-8) left as content, a prompt plus a generation re-rendering
 * as the prompt followed by that generation (qwen3 and qwen3.5), and 20,000
 * random tag soups that never crash and keep every byte accounted for. */
#include "t.h"
#include "template.h"
#include "toolcall.h"

static int eq(const char *s, size_t n, const char *want)
{
	if (!s)
		return want == NULL || !*want;
	return want && n == strlen(want) && memcmp(s, want, n) == 0;
}

static void split(const char *text, int open, const char *reasoning,
		  const char *content)
{
	gw_think_split sp;
	gw_think_split_text(text, strlen(text), open, &sp);
	CHECK(sp.has_reasoning == (reasoning != NULL),
	      "'%s' open %d: has_reasoning %d", text, open, sp.has_reasoning);
	if (reasoning)
		CHECK(eq(text + sp.reasoning_off, sp.reasoning_len, reasoning),
		      "'%s': reasoning '%.*s', want '%s'", text,
		      (int)sp.reasoning_len, text + sp.reasoning_off,
		      reasoning);
	CHECK(eq(text + sp.content_off, sp.content_len, content),
	      "'%s': content '%.*s', want '%s'", text, (int)sp.content_len,
	      text + sp.content_off, content);
}

static void think_split(void)
{
	/* the prompt opened <think> (qwen3.5+) */
	split("Let me think.\n</think>\n\nThe answer.", 1, "Let me think.",
	      "The answer.");
	split("still thinking when it stopped", 1,
	      "still thinking when it stopped", "");
	split("<think>\nrepeated open\n</think>\n\nc", 1, "repeated open", "c");
	split("\n</think>\n\n", 1, "", "");
	split("", 1, "", "");
	split("a</think>b</think>c", 1, "a", "b</think>c");
	/* the model opens it (qwen3) */
	split("<think>\nplan\n</think>\n\nanswer", 0, "plan", "answer");
	split("\n  <think>padded</think>  answer ", 0, "padded", "answer ");
	split("<think>unclosed: cut short while thinking", 0,
	      "unclosed: cut short while thinking", "");
	split("plain answer", 0, NULL, "plain answer");
	split("", 0, NULL, "");
	/* </think> the text did not open (nor the prompt): content */
	split("an answer</think>more", 0, NULL, "an answer</think>more");
	split("answer mentioning <think> later", 0, NULL,
	      "answer mentioning <think> later");
}

/* Parse content with family f; check the rest and the calls' names and
 * arguments (want: "name", "args", ... NULL). */
static void calls(gw_tmpl_family f, const char *content, const json_t *tools,
		  const char *rest, ...)
{
	json_t *c;
	char *r;
	size_t rn;
	int rc = gw_toolcalls_parse(f, content, strlen(content), tools, NULL,
				    &c, &r, &rn);
	REQUIRE(rc == 0, "parse");
	CHECK(eq(r, rn, rest), "%s '%s': rest '%.*s', want '%s'",
	      gw_tmpl_name(f), content, (int)rn, r ? r : "", rest);
	va_list ap;
	va_start(ap, rest);
	size_t k = 0;
	for (;; k++) {
		const char *name = va_arg(ap, const char *);
		if (!name)
			break;
		const char *args = va_arg(ap, const char *);
		json_t *call = json_array_get(c, k);
		json_t *fn = json_object_get(call, "function");
		char id[32];
		snprintf(id, sizeof id, "call_%zu", k);
		CHECK(call, "%s: call %zu missing", content, k);
		if (!call)
			continue;
		CHECK(!strcmp(json_string_value(json_object_get(call, "id")),
			      id) &&
			  !strcmp(
			      json_string_value(json_object_get(call, "type")),
			      "function"),
		      "call %zu id/type", k);
		CHECK(!strcmp(json_string_value(json_object_get(fn, "name")),
			      name),
		      "call %zu name %s, want %s", k,
		      json_string_value(json_object_get(fn, "name")), name);
		const char *a =
		    json_string_value(json_object_get(fn, "arguments"));
		CHECK(a && !strcmp(a, args),
		      "call %zu arguments\n  got  %s\n"
		      "  want %s",
		      k, a ? a : "(none)", args);
		/* arguments are always JSON text of an object */
		json_t *parsed = a ? json_loads(a, 0, NULL) : NULL;
		CHECK(json_is_object(parsed),
		      "call %zu: arguments not an "
		      "object: %s",
		      k, a ? a : "");
		json_decref(parsed);
	}
	va_end(ap);
	CHECK(json_array_size(c) == k, "%s: %zu calls, want %zu", content,
	      json_array_size(c), k);
	CHECK((c == NULL) == (k == 0), "calls NULL iff none");
	json_decref(c);
	free(r);
}

static void qwen3_calls(void)
{
	const gw_tmpl_family F = GW_TMPL_QWEN3;
	calls(F,
	      "Let me look.\n<tool_call>\n{\"name\": \"bash\", \"arguments\": "
	      "{\"command\": \"ls -la\"}}\n</tool_call>",
	      NULL, "Let me look.", "bash", "{\"command\": \"ls -la\"}", NULL);
	/* the model's own bytes of the arguments, whatever their spacing */
	calls(F,
	      "<tool_call>\n{\"name\":\"a\",\"arguments\":{\"x\":1,\"y\":[1, "
	      "{\"z\":\"\\u00e9\"}]}}\n</tool_call>\n<tool_call>\n{\"name\": "
	      "\"b\", \"arguments\": {}}\n</tool_call>",
	      NULL, "", "a", "{\"x\":1,\"y\":[1, {\"z\":\"\\u00e9\"}]}", "b",
	      "{}", NULL);
	calls(F,
	      "<tool_call>\n{\"arguments\": {\"k\": \"v\"}, \"name\": \"rev\"}"
	      "\n</tool_call>",
	      NULL, "", "rev", "{\"k\": \"v\"}", NULL);
	calls(F,
	      "<tool_call>\n{\"name\": \"s\", \"arguments\": \"{\\\"x\\\": "
	      "1}\"}\n</tool_call>",
	      NULL, "", "s", "{\"x\": 1}", NULL);
	/* scalars and nesting before "arguments" */
	calls(F,
	      "<tool_call>\n{\"n\": 1.5e3 , \"t\":true,\"s\": \"a\\\"}\", "
	      "\"o\": {\"arguments\": 0}, \"name\": \"f\", \"arguments\": "
	      "{\"b\": false}}\n</tool_call>",
	      NULL, "", "f", "{\"b\": false}", NULL);
	calls(F, "<tool_call>\n{\"name\": \"noargs\"}\n</tool_call>", NULL, "",
	      "noargs", "{}", NULL);
	calls(F,
	      "<tool_call>\n{\"name\": \"esc\", \"argu\\u006dents\": {\"a\":1}}"
	      "\n</tool_call>",
	      NULL, "", "esc", "{\"a\": 1}", NULL);
	/* malformed: left as content */
	calls(F,
	      "x <tool_call>\n{\"name\": \"a\", \"arguments\": {</tool_call> y",
	      NULL,
	      "x <tool_call>\n{\"name\": \"a\", \"arguments\": "
	      "{</tool_call> y",
	      NULL);
	calls(F, "<tool_call>\n{\"name\": \"a\", \"arguments\": {}}", NULL,
	      "<tool_call>\n{\"name\": \"a\", \"arguments\": {}}", NULL);
	calls(F, "<tool_call>\n{\"arguments\": {}}\n</tool_call>", NULL,
	      "<tool_call>\n{\"arguments\": {}}\n</tool_call>", NULL);
	calls(
	    F,
	    "<tool_call>\n{\"name\": \"a\", \"arguments\": [1]}\n</tool_call>",
	    NULL,
	    "<tool_call>\n{\"name\": \"a\", \"arguments\": [1]}\n"
	    "</tool_call>",
	    NULL);
	calls(F, "<tool_call>[1, 2]</tool_call>", NULL,
	      "<tool_call>[1, 2]</tool_call>", NULL);
	/* one good, one bad: the bad one stays */
	calls(F,
	      "a\n<tool_call>\n{\"name\": \"ok\", \"arguments\": {}}\n"
	      "</tool_call>\n<tool_call>\nnot json\n</tool_call>",
	      NULL, "a\n\n<tool_call>\nnot json\n</tool_call>", "ok", "{}",
	      NULL);
	calls(F, "no calls at all", NULL, "no calls at all", NULL);
	calls(F, "", NULL, "", NULL);
	calls(F, "  \n", NULL, "  \n", NULL);
	/* qwen3 does not read the XML format */
	calls(F, "<tool_call>\n<function=f>\n</function>\n</tool_call>", NULL,
	      "<tool_call>\n<function=f>\n</function>\n</tool_call>", NULL);
}

static void xml_calls(void)
{
	json_t *tools = json_loads(
	    "[{\"type\": \"function\", \"function\": {\"name\": \"t\", "
	    "\"parameters\": {\"type\": \"object\", \"properties\": {"
	    "\"s\": {\"type\": \"string\"}, \"i\": {\"type\": \"integer\"}, "
	    "\"n\": {\"type\": \"number\"}, \"b\": {\"type\": \"boolean\"}, "
	    "\"o\": {\"type\": \"object\"}, \"a\": {\"type\": \"array\"}, "
	    "\"sn\": {\"type\": [\"string\", \"null\"]}, "
	    "\"in\": {\"type\": [\"null\", \"integer\"]}, "
	    "\"e\": {\"enum\": [\"x\"], \"type\": \"ENUM\"}}}}}]",
	    0, NULL);
	REQUIRE(tools, "tools JSON");
	const gw_tmpl_family F = GW_TMPL_QWEN3_5;
	calls(F,
	      "Checking.\n\n<tool_call>\n<function=t>\n"
	      "<parameter=s>\n42\n</parameter>\n"
	      "<parameter=i>\n7\n</parameter>\n"
	      "<parameter=n>\n1.5\n</parameter>\n"
	      "<parameter=b>\nTrue\n</parameter>\n"
	      "<parameter=o>\n{\"k\": [1, \"v\"]}\n</parameter>\n"
	      "<parameter=a>\n[1, 2]\n</parameter>\n"
	      "<parameter=sn>\nplain\n</parameter>\n"
	      "<parameter=in>\n-3\n</parameter>\n"
	      "<parameter=e>\n08\n</parameter>\n"
	      "<parameter=unknown>\n5\n</parameter>\n"
	      "</function>\n</tool_call>",
	      tools, "Checking.", "t",
	      "{\"s\": \"42\", \"i\": 7, \"n\": 1.5, \"b\": true, \"o\": "
	      "{\"k\": [1, \"v\"]}, \"a\": [1, 2], \"sn\": \"plain\", \"in\": "
	      "-3, \"e\": \"08\", \"unknown\": \"5\"}",
	      NULL);
	/* values that do not parse as their type stay strings; null is
	 * null; a number without '.' or 'e' is an integer */
	calls(F,
	      "<tool_call>\n<function=t>\n<parameter=i>\n5x\n</parameter>\n"
	      "<parameter=n>\n2\n</parameter>\n<parameter=b>\nyes\n"
	      "</parameter>\n<parameter=o>\n{broken\n</parameter>\n"
	      "<parameter=s>\nNULL\n</parameter>\n<parameter=a>\nnan\n"
	      "</parameter>\n</function>\n</tool_call>",
	      tools, "", "t",
	      "{\"i\": \"5x\", \"n\": 2, \"b\": \"yes\", \"o\": \"{broken\", "
	      "\"s\": null, \"a\": \"nan\"}",
	      NULL);
	calls(
	    F,
	    "<tool_call>\n<function=t>\n<parameter=b>\n FALSE \n</parameter>\n"
	    "<parameter=n>\n-2.5e-3\n</parameter>\n<parameter=i>\n 12 \n"
	    "</parameter>\n<parameter=n>\n0x10\n</parameter>\n</function>\n"
	    "</tool_call>",
	    tools, "", "t", "{\"b\": false, \"n\": \"0x10\", \"i\": 12}", NULL);
	/* multi-line values keep their inner newlines, lose one at each end */
	calls(F,
	      "<tool_call>\n<function=write>\n<parameter=content>\n\nline 1\n"
	      "line 2\n\n</parameter>\n</function>\n</tool_call>",
	      tools, "", "write", "{\"content\": \"\\nline 1\\nline 2\\n\"}",
	      NULL);
	/* two calls; no </parameter> before the next parameter; no final
	 * </tool_call> */
	calls(F,
	      "<tool_call>\n<function=a>\n<parameter=x>\n1\n<parameter=y>\n2"
	      "\n</parameter>\n</function>\n</tool_call>\n<tool_call>\n"
	      "<function=b>\n</function>",
	      NULL, "", "a", "{\"x\": \"1\", \"y\": \"2\"}", "b", "{}", NULL);
	/* truncated inside a function: left as content */
	calls(F, "<tool_call>\n<function=a>\n<parameter=x>\n1", NULL,
	      "<tool_call>\n<function=a>\n<parameter=x>\n1", NULL);
	calls(F, "<tool_call>\n{\"name\": \"json\"}\n</tool_call>", NULL,
	      "<tool_call>\n{\"name\": \"json\"}\n</tool_call>", NULL);
	calls(F, "<tool_call>\n<function=>\n</function>\n</tool_call>", NULL,
	      "<tool_call>\n<function=>\n</function>\n</tool_call>", NULL);
	calls(F, "text <tool_call>", NULL, "text <tool_call>", NULL);
	/* a closed block whose function lacks </function> */
	calls(F,
	      "<tool_call>\n<function=c>\n<parameter=p>\nv\n</parameter>\n"
	      "</tool_call>",
	      NULL, "", "c", "{\"p\": \"v\"}", NULL);
	/* invalid UTF-8 is left as it is */
	calls(F, "\xff<tool_call>\n<function=a>\n</function>\n</tool_call>",
	      NULL, "\xff<tool_call>\n<function=a>\n</function>\n</tool_call>",
	      NULL);
	json_decref(tools);

	/* ids take the caller's prefix */
	json_t *c;
	char *r;
	size_t rn;
	const char *two =
	    "<tool_call>\n<function=a>\n</function>\n</tool_call>"
	    "<tool_call>\n<function=b>\n</function>\n</tool_call>";
	REQUIRE(gw_toolcalls_parse(F, two, strlen(two), NULL, "call_r9_", &c,
				   &r, &rn) == 0,
		"parse");
	CHECK(!strcmp(json_string_value(
			  json_object_get(json_array_get(c, 1), "id")),
		      "call_r9_1") &&
		  r == NULL && rn == 0,
	      "id prefix");
	json_decref(c);
}

/* A prompt, then the model's output, re-rendered with the parsed reply as
 * the last assistant turn, is the prompt followed by the output. */
static void round_trip(gw_tmpl_family f, const char *output,
		       const char *tools_json)
{
	char err[MOOR_ERRLEN];
	json_t *tools = json_loads(tools_json, 0, NULL);
	json_t *msgs = json_pack("[{s:s,s:s}]", "role", "user", "content",
				 "list the files");
	gw_tmpl_ctx ctx = {msgs, tools, 1, NULL};
	gw_prompt p;
	REQUIRE(gw_tmpl_render(f, &ctx, &p, err) == 0, "prompt: %s", err);
	gw_reply rep;
	REQUIRE(gw_reply_parse(f, output, strlen(output), p.think_open, tools,
			       "call_", &rep) == 0,
		"reply");
	CHECK(rep.tool_calls && rep.reasoning, "%s: parsed %p %p",
	      gw_tmpl_name(f), (void *)rep.tool_calls, (void *)rep.reasoning);
	json_t *a =
	    json_pack("{s:s,s:s%,s:s%,s:O}", "role", "assistant", "content",
		      rep.content ? rep.content : "", rep.content_len,
		      "reasoning_content", rep.reasoning, rep.reasoning_len,
		      "tool_calls", rep.tool_calls);
	REQUIRE(a, "assistant message");
	json_array_append_new(msgs, a);
	ctx.add_generation_prompt = 0;
	gw_prompt q;
	REQUIRE(gw_tmpl_render(f, &ctx, &q, err) == 0, "again: %s", err);
	size_t on = strlen(output);
	int ok = q.len == p.len + on + 11 && !memcmp(q.text, p.text, p.len) &&
		 !memcmp(q.text + p.len, output, on) &&
		 !memcmp(q.text + p.len + on, "<|im_end|>\n", 11);
	CHECK(ok, "%s: prompt + output does not re-render:\n%s\n---\n%s",
	      gw_tmpl_name(f), q.text, output);
	gw_prompt_fini(&p);
	gw_prompt_fini(&q);
	gw_reply_fini(&rep);
	json_decref(msgs);
	json_decref(tools);
}

/* Random soups of tags and text: no crash, and the rest holds only bytes of
 * the input in order (a subsequence). */
static void tag_soup(void)
{
	static const char *bits[] = {"<tool_call>",
				     "</tool_call>",
				     "<function=",
				     "</function>",
				     "<parameter=",
				     "</parameter>",
				     "<think>",
				     "</think>",
				     ">",
				     "\n",
				     "{",
				     "}",
				     "\"name\"",
				     ":",
				     "\"arguments\"",
				     "\"x\"",
				     ",",
				     "[",
				     "]",
				     "1",
				     "f",
				     "é",
				     "\xe2\x82",
				     "\\",
				     "\"",
				     " ",
				     "null",
				     "{\"name\": \"f\", \"arguments\": {}}"};
	json_t *tools = json_loads("[{\"function\": {\"name\": \"f\", "
				   "\"parameters\": {\"properties\": {\"x\": "
				   "{\"type\": \"integer\"}}}}}]",
				   0, NULL);
	uint64_t s = 0x9e3779b97f4a7c15ull;
	char buf[512];
	size_t calls_total = 0;
	for (int it = 0; it < 20000; it++) {
		size_t n = 0;
		int parts = (int)(s >> 60) + 1;
		for (int k = 0; k < parts * 3; k++) {
			s ^= s << 13;
			s ^= s >> 7;
			s ^= s << 17;
			const char *b =
			    bits[s % (sizeof bits / sizeof bits[0])];
			size_t l = strlen(b);
			if (n + l >= sizeof buf)
				break;
			memcpy(buf + n, b, l);
			n += l;
		}
		gw_tmpl_family f = it & 1 ? GW_TMPL_QWEN3 : GW_TMPL_QWEN3_8;
		gw_reply r;
		REQUIRE(gw_reply_parse(f, buf, n, it % 3 == 0, tools, NULL,
				       &r) == 0,
			"soup %d", it);
		calls_total += json_array_size(r.tool_calls);
		size_t j = 0;
		for (size_t i = 0; i < r.content_len; i++) {
			while (j < n && buf[j] != r.content[i])
				j++;
			if (j == n)
				break;
			j++;
		}
		CHECK(r.content_len == 0 || j <= n, "soup %d: rest", it);
		CHECK(r.reasoning_len <= n && r.content_len <= n,
		      "soup %d: sizes", it);
		gw_reply_fini(&r);
	}
	printf("tag soup: 20000 outputs, %zu calls parsed\n", calls_total);
	CHECK(calls_total > 0, "the soup never made a call");
	json_decref(tools);
}

int main(void)
{
	think_split();
	qwen3_calls();
	xml_calls();
	round_trip(GW_TMPL_QWEN3,
		   "<think>\nI should run ls -la.\n</think>\n\nLet me look.\n"
		   "<tool_call>\n{\"name\": \"bash\", \"arguments\": "
		   "{\"command\":\"ls -la\",\"n\": 2}}\n</tool_call>\n"
		   "<tool_call>\n{\"name\": \"bash\", \"arguments\": {}}\n"
		   "</tool_call>",
		   "[{\"type\": \"function\", \"function\": {\"name\": "
		   "\"bash\", \"parameters\": {}}}]");
	round_trip(GW_TMPL_QWEN3_5,
		   "I should run ls -la.\n</think>\n\nLet me look.\n\n"
		   "<tool_call>\n<function=bash>\n<parameter=command>\nls -la\n"
		   "</parameter>\n<parameter=limit>\n5\n</parameter>\n"
		   "<parameter=opts>\n{\"a\": [1, true]}\n</parameter>\n"
		   "</function>\n</tool_call>\n<tool_call>\n<function=bash>\n"
		   "<parameter=command>\npwd\n</parameter>\n</function>\n"
		   "</tool_call>",
		   "[{\"type\": \"function\", \"function\": {\"name\": "
		   "\"bash\", \"parameters\": {\"properties\": {\"command\": "
		   "{\"type\": \"string\"}, \"limit\": {\"type\": \"integer\"},"
		   " \"opts\": {\"type\": \"object\"}}}}}]");
	round_trip(GW_TMPL_QWEN3_8,
		   "Plan.\n</think>\n\n<tool_call>\n<function=bash>\n"
		   "<parameter=command>\necho \"hi\"\n</parameter>\n"
		   "</function>\n</tool_call>",
		   "[{\"type\": \"function\", \"function\": {\"name\": "
		   "\"bash\", \"parameters\": {\"properties\": {\"command\": "
		   "{\"type\": \"string\"}}}}}]");
	tag_soup();
	gw_reply_fini(NULL);
	return t_done("test_toolcall_parse");
}
