/* tmpl_qwen35.c: the 248k-token family's chat templates, qwen3_5.jinja,
 * qwen3_6.jinja and qwen3_8.jinja, statement by statement. The three share
 * their structure and differ in four places, named by `struct variant`:
 *
 *   3.5  no preserve_thinking; an assistant's content may carry its own
 *        <think>...</think> (split off when reasoning_content is not a
 *        string); argument values: mappings and arrays through tojson,
 *        the rest through `|string`.
 *   3.6  3.5, plus `preserve_thinking is defined and is true` keeps every
 *        <think>; argument values: strings as they are, the rest tojson.
 *   3.8  no split of <think> in content; preserve_thinking on unless it is
 *        set to anything but true; 3.6's argument printing; the
 *        reasoning_effort system line (enable_thinking absent or true).
 *
 * render_content() is the templates' macro: a string as is, a parts array
 * as its texts and vision placeholders, none as "", anything else raises. */
#include "tmpl_int.h"

struct variant {
	int split_think;      /* '</think>' in content splits it */
	int preserve;	      /* 0 none, 1 opt-in (3.6), 2 opt-out (3.8) */
	int args_string_only; /* only strings print raw (3.6, 3.8) */
	int effort;	      /* reasoning_effort system line (3.8) */
};

static const struct variant V35 = {1, 0, 0, 0};
static const struct variant V36 = {1, 1, 1, 0};
static const struct variant V38 = {0, 2, 1, 1};

struct rc_state {
	const struct tmpl_in *in;
	gw_prompt *info;
	char *err;
};

static int raise(char *err, const char *msg)
{
	if (err)
		moor_errf(err, "%s", msg);
	return MOOR_EFORMAT;
}

static void put_num(moor_buf *b, int v)
{
	js_number(b, (double)v);
}

/* {%- macro render_content(content, do_vision_count,
 *                          is_system_content=false) %} */
static int render_content(struct rc_state *st, const json_t *content,
			  int do_vision_count, int is_system, moor_buf *b)
{
	if (content && json_is_string(content)) {
		js_output(b, content);
		return 0;
	}
	if (!content || json_is_null(content))
		return 0;
	if (!json_is_array(content))
		return raise(st->err, "Unexpected content type.");
	int vision_id = js_truthy(tmpl_kwarg(st->in, "add_vision_id"));
	for (size_t i = 0; i < json_array_size(content); i++) {
		const json_t *item = json_array_get(content, i);
		const json_t *type = json_object_get(item, "type");
		if (json_object_get(item, "image") ||
		    json_object_get(item, "image_url") ||
		    js_is(type, "image")) {
			if (is_system)
				return raise(st->err, "System message cannot "
						      "contain images.");
			if (do_vision_count)
				st->info->images++;
			if (vision_id) {
				moor_buf_puts(b, "Picture ");
				put_num(b, st->info->images);
				moor_buf_puts(b, ": ");
			}
			moor_buf_puts(
			    b, "<|vision_start|><|image_pad|><|vision_end|>");
		} else if (json_object_get(item, "video") ||
			   js_is(type, "video")) {
			if (is_system)
				return raise(st->err, "System message cannot "
						      "contain videos.");
			if (do_vision_count)
				st->info->videos++;
			if (vision_id) {
				moor_buf_puts(b, "Video ");
				put_num(b, st->info->videos);
				moor_buf_puts(b, ": ");
			}
			moor_buf_puts(
			    b, "<|vision_start|><|video_pad|><|vision_end|>");
		} else if (json_object_get(item, "text")) {
			js_output(b, json_object_get(item, "text"));
		} else {
			return raise(st->err,
				     "Unexpected item type in content.");
		}
	}
	return 0;
}

/* render_content(...)|trim into scratch; *out points into scratch. */
static int content_trim(struct rc_state *st, const json_t *content,
			int do_vision_count, int is_system, moor_buf *scratch,
			struct span *out)
{
	scratch->len = 0;
	moor_buf_put(scratch, "", 0);
	int rc =
	    render_content(st, content, do_vision_count, is_system, scratch);
	if (rc)
		return rc;
	if (scratch->err)
		return -ENOMEM;
	struct span s = {scratch->p, scratch->len};
	*out = span_trim(s);
	return 0;
}

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
    "# Tools\n\nYou have access to the following functions:\n\n<tools>";
static const char TOOLS_TAIL[] =
    "\n</tools>\n\nIf you choose to call a function ONLY reply in the "
    "following format with NO suffix:\n\n<tool_call>\n<function="
    "example_function_name>\n<parameter=example_parameter_1>\nvalue_1\n"
    "</parameter>\n<parameter=example_parameter_2>\nThis is the value for "
    "the second parameter\nthat can span\nmultiple lines\n</parameter>\n"
    "</function>\n</tool_call>\n\n<IMPORTANT>\nReminder:\n- Function calls "
    "MUST follow the specified format: an inner <function=...></function> "
    "block must be nested within <tool_call></tool_call> XML tags\n- "
    "Required parameters MUST be specified\n- You may provide optional "
    "reasoning for your function call in natural language BEFORE the "
    "function call, but NOT after\n- If there is no function call "
    "available, answer the question like normal with your current "
    "knowledge and do not tell the user about function calls\n"
    "</IMPORTANT>";

static const char EFFORT_XHIGH[] =
    "Reasoning effort is set to xhigh. Please think carefully through the "
    "task, validate key assumptions, consider plausible alternatives, and "
    "prioritize correctness, consistency, and clarity in the final "
    "answer.";
static const char EFFORT_LOW[] =
    "Reasoning effort is set to low. Keep your thinking brief and focused, "
    "moving directly to the conclusion without unnecessary elaboration.";

/* 'Unexpected reasoning effort ' ~ reasoning_effort ~ '. Supported ...' */
static int effort_error(const json_t *v, char *err)
{
	moor_buf b = {0};
	if (json_is_null(v)) /* jinja: `~` refuses null */
		return raise(err, "Cannot perform operation on null values");
	if (json_is_array(v)) /* jinja has no `in` of an array in a tuple */
		return raise(err, "Unknown operator \"not in\" between "
				  "ArrayValue and TupleValue");
	moor_buf_puts(&b, "Unexpected reasoning effort ");
	if (json_is_object(v))
		moor_buf_puts(&b, "[object Map]"); /* JS's String(new Map()) */
	else
		js_output(&b, v);
	moor_buf_puts(
	    &b, ". Supported types are xhigh (default), medium, and low.");
	int rc = b.err ? b.err : raise(err, b.p);
	moor_buf_fini(&b);
	return rc;
}

/* One parameter's value as the variant prints it. */
static void put_arg(moor_buf *b, const json_t *v, const struct variant *var)
{
	if (var->args_string_only) {
		/* args_value | string if args_value is string
		 *   else args_value | tojson | safe */
		if (json_is_string(v))
			put_str(b, v);
		else
			js_tojson(b, v);
		return;
	}
	/* args_value | tojson | safe if args_value is mapping or
	 *   (args_value is sequence and args_value is not string)
	 *   else args_value | string */
	if (json_is_object(v) || json_is_array(v))
		js_tojson(b, v);
	else if (json_is_null(v))
		moor_buf_puts(b,
			      "null"); /* jinja throws here: see template.h */
	else
		js_output(b, v);
}

static int render(const struct tmpl_in *in, const struct variant *var,
		  moor_buf *b, gw_prompt *info, char *err, moor_buf *scratch)
{
	const struct tmpl_msg *m = in->msgs;
	size_t n = in->n;
	struct rc_state st = {in, info, err};
	struct span c;
	int rc;

	if (n == 0)
		return raise(err, "No messages provided.");

	const json_t *et = tmpl_kwarg(in, "enable_thinking");
	const char *instr = "";
	if (var->effort && (!et || json_is_true(et))) {
		const json_t *eff = tmpl_kwarg(in, "reasoning_effort");
		if (eff && !js_is(eff, "xhigh") && !js_is(eff, "medium") &&
		    !js_is(eff, "low"))
			return effort_error(eff, err);
		if (!eff || js_is(eff, "xhigh"))
			instr = EFFORT_XHIGH;
		else if (js_is(eff, "low"))
			instr = EFFORT_LOW;
	}

	int sys0 = js_is(m[0].role, "system");
	if (js_truthy(in->tools)) {
		moor_buf_puts(b, "<|im_start|>system\n");
		if (instr[0]) {
			moor_buf_puts(b, instr);
			moor_buf_puts(b, "\n\n");
		}
		moor_buf_puts(b, TOOLS_HEAD);
		for (size_t i = 0; i < json_array_size(in->tools); i++) {
			moor_buf_puts(b, "\n");
			js_tojson(b, json_array_get(in->tools, i));
		}
		moor_buf_puts(b, TOOLS_TAIL);
		if (sys0) {
			if ((rc = content_trim(&st, m[0].content, 0, 1, scratch,
					       &c)))
				return rc;
			if (c.n) {
				moor_buf_puts(b, "\n\n");
				put_span(b, c);
			}
		}
		moor_buf_puts(b, "<|im_end|>\n");
	} else if (!var->effort) {
		if (sys0) {
			if ((rc = content_trim(&st, m[0].content, 0, 1, scratch,
					       &c)))
				return rc;
			moor_buf_puts(b, "<|im_start|>system\n");
			put_span(b, c);
			moor_buf_puts(b, "<|im_end|>\n");
		}
	} else {
		c.n = 0;
		if (sys0 &&
		    (rc = content_trim(&st, m[0].content, 0, 1, scratch, &c)))
			return rc;
		if (c.n) {
			moor_buf_puts(b, "<|im_start|>system\n");
			if (instr[0]) {
				moor_buf_puts(b, instr);
				moor_buf_puts(b, "\n\n");
			}
			put_span(b, c);
			moor_buf_puts(b, "<|im_end|>\n");
		} else if (instr[0]) {
			moor_buf_puts(b, "<|im_start|>system\n");
			moor_buf_puts(b, instr);
			moor_buf_puts(b, "<|im_end|>\n");
		}
	}

	/* The last user message that is not a tool response wrapped as one. */
	int multi_step_tool = 1;
	size_t last_query = n - 1;
	for (size_t r = n; r-- > 0;) {
		if (!multi_step_tool || !js_is(m[r].role, "user"))
			continue;
		if ((rc = content_trim(&st, m[r].content, 0, 0, scratch, &c)))
			return rc;
		if (!(span_starts(c, "<tool_response>") &&
		      span_ends(c, "</tool_response>"))) {
			multi_step_tool = 0;
			last_query = r;
		}
	}
	if (multi_step_tool)
		return raise(err, "No user query found in messages.");

	const json_t *pt = tmpl_kwarg(in, "preserve_thinking");
	int preserve = var->preserve == 1   ? pt && json_is_true(pt)
		       : var->preserve == 2 ? !pt || json_is_true(pt)
					    : 0;

	for (size_t i = 0; i < n; i++) {
		const json_t *role = m[i].role;
		info->msg_off[i] = i ? b->len : 0;
		if ((rc = content_trim(&st, m[i].content, 1, 0, scratch, &c)))
			return rc;
		if (js_is(role, "system")) {
			if (i != 0)
				return raise(err, "System message must be at "
						  "the beginning.");
		} else if (js_is(role, "user")) {
			moor_buf_puts(b, "<|im_start|>");
			put_str(b, role);
			moor_buf_puts(b, "\n");
			put_span(b, c);
			moor_buf_puts(b, "<|im_end|>\n");
		} else if (js_is(role, "assistant")) {
			struct span r = {"", 0};
			if (m[i].reasoning) {
				r.p = js_str(m[i].reasoning, &r.n);
			} else if (var->split_think &&
				   mem_find(c.p, c.n, "</think>") !=
				       (size_t)-1) {
				size_t first = mem_find(c.p, c.n, "</think>");
				size_t last = mem_rfind(c.p, c.n, "</think>");
				/* content.split('</think>')[0].rstrip('\n')
				 *  .split('<think>')[-1].lstrip('\n') */
				struct span rr = {c.p, first};
				rr = span_trim_end(rr);
				size_t t = mem_rfind(rr.p, rr.n, "<think>");
				if (t != (size_t)-1) {
					rr.p += t + 7;
					rr.n -= t + 7;
				}
				r = span_trim_start(rr);
				/* content.split('</think>')[-1].lstrip('\n') */
				struct span cc = {c.p + last + 8,
						  c.n - last - 8};
				c = span_trim_start(cc);
			}
			r = span_trim(r);
			moor_buf_puts(b, "<|im_start|>");
			put_str(b, role);
			if (preserve || i > last_query) {
				moor_buf_puts(b, "\n<think>\n");
				put_span(b, r);
				moor_buf_puts(b, "\n</think>\n\n");
			} else {
				moor_buf_puts(b, "\n");
			}
			put_span(b, c);
			const json_t *calls = m[i].calls;
			for (size_t j = 0;
			     js_truthy(calls) && j < json_array_size(calls);
			     j++) {
				const json_t *tc = json_array_get(calls, j);
				const json_t *fn =
				    json_object_get(tc, "function");
				if (fn)
					tc = fn;
				const json_t *name =
				    json_object_get(tc, "name");
				if (j > 0)
					moor_buf_puts(
					    b, "\n<tool_call>\n<function=");
				else if (span_trim(c).n)
					moor_buf_puts(
					    b, "\n\n<tool_call>\n<function=");
				else
					moor_buf_puts(
					    b, "<tool_call>\n<function=");
				put_str(b, name);
				moor_buf_puts(b, ">\n");
				const json_t *args =
				    json_array_get(m[i].args, j);
				const char **keys;
				json_t **vals;
				size_t na;
				if (js_entries(args, &keys, &vals, &na))
					return -ENOMEM;
				for (size_t k = 0; k < na; k++) {
					moor_buf_puts(b, "<parameter=");
					moor_buf_puts(b, keys[k]);
					moor_buf_puts(b, ">\n");
					put_arg(b, vals[k], var);
					moor_buf_puts(b, "\n</parameter>\n");
				}
				free(keys);
				free(vals);
				moor_buf_puts(b, "</function>\n</tool_call>");
			}
			moor_buf_puts(b, "<|im_end|>\n");
		} else if (js_is(role, "tool")) {
			/* loop.previtem and loop.previtem.role != "tool" */
			if (i > 0 && !js_is(m[i - 1].role, "tool"))
				moor_buf_puts(b, "<|im_start|>user");
			moor_buf_puts(b, "\n<tool_response>\n");
			put_span(b, c);
			moor_buf_puts(b, "\n</tool_response>");
			if (i == n - 1 || !js_is(m[i + 1].role, "tool"))
				moor_buf_puts(b, "<|im_end|>\n");
		} else {
			return raise(err, "Unexpected message role.");
		}
	}

	info->think_open = 0;
	info->msg_off[n] = b->len;
	if (in->add_generation_prompt) {
		moor_buf_puts(b, "<|im_start|>assistant\n");
		if (et && json_is_false(et)) {
			moor_buf_puts(b, "<think>\n\n</think>\n\n");
		} else {
			moor_buf_puts(b, "<think>\n");
			info->think_open = 1;
		}
	}
	return 0;
}

int tmpl_render_qwen35(const struct tmpl_in *in, moor_buf *out, gw_prompt *info,
		       char *err)
{
	const struct variant *var = in->family == GW_TMPL_QWEN3_8   ? &V38
				    : in->family == GW_TMPL_QWEN3_6 ? &V36
								    : &V35;
	moor_buf scratch = {0};
	int rc = render(in, var, out, info, err, &scratch);
	moor_buf_fini(&scratch);
	return rc;
}
