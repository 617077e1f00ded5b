/* test_tmpl_errors_are_template_messages: where a real template raises
 * (no messages, no user query, a system message not first, an unknown role,
 * images or videos in a system message, content of no known type, an
 * unsupported reasoning effort), gw_tmpl_render returns MOOR_EFORMAT with
 * the very message @huggingface/jinja throws; where a template renders the
 * same request (qwen3 raises nothing) ours renders it equal; requests the
 * gateway refuses before any template (template.h) are refused. Then the
 * gateway's own checks of the OpenAI shape, each with its message, and the
 * one deliberate divergence (qwen3.5 prints a null argument as "null"). */
#include "tmpl_test.h"

static void oracle_cases(void)
{
	json_t *all = tm_oracle("errors", "tmpl-errors.json");
	char err[MOOR_ERRLEN];
	size_t raised = 0, renders = 0, refused = 0;
	for (size_t i = 0; i < json_array_size(all); i++) {
		json_t *c = json_array_get(all, i);
		const char *name =
		    json_string_value(json_object_get(c, "name"));
		gw_tmpl_family f = gw_tmpl_from_name(
		    json_string_value(json_object_get(c, "family")));
		json_t *text = json_object_get(c, "text");
		json_t *error = json_object_get(c, "error");
		gw_tmpl_ctx ctx;
		REQUIRE(gw_tmpl_ctx_from_body(json_object_get(c, "request"),
					      &ctx, err) == 0,
			"%s: %s", name, err);
		gw_prompt p;
		err[0] = 0;
		int rc = gw_tmpl_render(f, &ctx, &p, err);
		if (json_is_string(text)) {
			renders++;
			CHECK(rc == 0, "%s: jinja renders it, we fail: %s",
			      name, err);
			if (!rc &&
			    (p.len != json_string_length(text) ||
			     memcmp(p.text, json_string_value(text), p.len))) {
				tm_diff(stderr, name, p.text, p.len,
					json_string_value(text),
					json_string_length(text));
				CHECK(0, "%s differs", name);
			}
		} else if (json_is_string(error)) {
			raised++;
			CHECK(rc == MOOR_EFORMAT, "%s: rc %d (%s)", name, rc,
			      moor_strerror(rc));
			CHECK(strcmp(err, json_string_value(error)) == 0,
			      "%s: message\n  ours  '%s'\n  jinja '%s'", name,
			      err, json_string_value(error));
		} else {
			refused++;
			CHECK(rc == MOOR_EFORMAT || rc == MOOR_EUNSUP,
			      "%s: the gateway refuses it (%s), we rc %d", name,
			      json_string_value(json_object_get(c, "refused")),
			      rc);
			CHECK(err[0], "%s: no message", name);
		}
		gw_prompt_fini(&p);
	}
	printf("errors: %zu raised by the templates, %zu rendered, %zu "
	       "refused by the gateway\n",
	       raised, renders, refused);
	CHECK(raised >= 40, "only %zu raising cases", raised);
	json_decref(all);
}

/* Render a JSON body; returns rc, fills err and (on success) text. */
static int render(gw_tmpl_family f, const char *body, char *err, char **text)
{
	json_error_t je;
	json_t *b = json_loads(body, JSON_DECODE_INT_AS_REAL, &je);
	REQUIRE(b, "bad test JSON %s: %s", body, je.text);
	gw_tmpl_ctx ctx;
	err[0] = 0;
	int rc = gw_tmpl_ctx_from_body(b, &ctx, err);
	if (!rc) {
		gw_prompt p;
		rc = gw_tmpl_render(f, &ctx, &p, err);
		if (!rc && text)
			*text = strdup(p.text);
		gw_prompt_fini(&p);
	}
	json_decref(b);
	return rc;
}

static void expect_refusal(gw_tmpl_family f, const char *body, int want_rc,
			   const char *want_msg)
{
	char err[MOOR_ERRLEN];
	int rc = render(f, body, err, NULL);
	CHECK(rc == want_rc, "%s %s: rc %d (%s), want %d", gw_tmpl_name(f),
	      body, rc, err, want_rc);
	CHECK(strstr(err, want_msg), "%s %s: message '%s' lacks '%s'",
	      gw_tmpl_name(f), body, err, want_msg);
}

static void gateway_checks(void)
{
	const gw_tmpl_family all[] = {GW_TMPL_QWEN3, GW_TMPL_QWEN3_5,
				      GW_TMPL_QWEN3_6, GW_TMPL_QWEN3_8};
	for (int k = 0; k < 4; k++) {
		gw_tmpl_family f = all[k];
		expect_refusal(f, "{}", MOOR_EFORMAT, "messages: required");
		expect_refusal(f, "{\"messages\": {}}", MOOR_EFORMAT,
			       "messages: must be an array");
		expect_refusal(f, "{\"messages\": [\"hi\"]}", MOOR_EFORMAT,
			       "messages[0]: must be an object");
		expect_refusal(f, "{\"messages\": [{\"content\": \"hi\"}]}",
			       MOOR_EFORMAT, "messages[0].role");
		expect_refusal(f,
			       "{\"messages\": [{\"role\": 1, \"content\": "
			       "\"hi\"}]}",
			       MOOR_EFORMAT, "messages[0].role");
		expect_refusal(f,
			       "{\"messages\": [{\"role\": \"user\", "
			       "\"content\": \"q\"}], \"tools\": {}}",
			       MOOR_EFORMAT, "tools: must be an array");
		expect_refusal(f,
			       "{\"messages\": [{\"role\": \"user\", "
			       "\"content\": \"q\"}], \"chat_template_kwargs\":"
			       " []}",
			       MOOR_EFORMAT, "chat_template_kwargs");
		expect_refusal(f,
			       "{\"messages\": [{\"role\": \"user\", "
			       "\"content\": \"q\"}], "
			       "\"add_generation_prompt\": \"yes\"}",
			       MOOR_EFORMAT, "add_generation_prompt");
		expect_refusal(f,
			       "{\"messages\": [{\"role\": \"user\", "
			       "\"content\": \"q\"}, {\"role\": \"assistant\","
			       " \"content\": \"a\", \"reasoning_content\": "
			       "5}]}",
			       MOOR_EFORMAT, "messages[1].reasoning_content");
		expect_refusal(f,
			       "{\"messages\": [{\"role\": \"user\", "
			       "\"content\": \"q\"}, {\"role\": \"assistant\","
			       " \"tool_calls\": {}}]}",
			       MOOR_EFORMAT, "messages[1].tool_calls: must be");
		expect_refusal(f,
			       "{\"messages\": [{\"role\": \"user\", "
			       "\"content\": \"q\"}, {\"role\": \"assistant\","
			       " \"tool_calls\": [{\"type\": \"function\", "
			       "\"function\": {\"arguments\": \"{}\"}}]}]}",
			       MOOR_EFORMAT, "without a string function name");
		expect_refusal(f,
			       "{\"messages\": [{\"role\": \"user\", "
			       "\"content\": [\"a bare string part\"]}]}",
			       MOOR_EFORMAT, "a part is not an object");
		if (f == GW_TMPL_QWEN3) {
			expect_refusal(f,
				       "{\"messages\": [{\"role\": \"user\", "
				       "\"content\": [{\"type\": "
				       "\"image_url\", \"image_url\": {}}]}]}",
				       MOOR_EUNSUP, "text only");
			expect_refusal(f,
				       "{\"messages\": [{\"role\": \"user\", "
				       "\"content\": 5}]}",
				       MOOR_EFORMAT, "must be a string");
			continue;
		}
		expect_refusal(f,
			       "{\"messages\": [{\"role\": \"user\", "
			       "\"content\": \"q\"}, {\"role\": \"assistant\","
			       " \"tool_calls\": [{\"function\": {\"name\": "
			       "\"f\", \"arguments\": \"{not json\"}}]}]}",
			       MOOR_EFORMAT,
			       "tool_calls[0].function.arguments: "
			       "not valid JSON");
		expect_refusal(f,
			       "{\"messages\": [{\"role\": \"user\", "
			       "\"content\": \"q\"}, {\"role\": \"assistant\","
			       " \"tool_calls\": [{\"function\": {\"name\": "
			       "\"f\", \"arguments\": \"[1, 2]\"}}]}]}",
			       MOOR_EFORMAT, "not a JSON object");
		expect_refusal(f,
			       "{\"messages\": [{\"role\": \"user\", "
			       "\"content\": \"q\"}, {\"role\": \"assistant\","
			       " \"tool_calls\": [{\"function\": {\"name\": "
			       "\"f\", \"arguments\": 7}}]}]}",
			       MOOR_EFORMAT, "must be a JSON object");
	}
	char err[MOOR_ERRLEN], *text = NULL;
	/* qwen3.5: a null argument prints "null" (jinja 0.5.13 throws) */
	int rc =
	    render(GW_TMPL_QWEN3_5,
		   "{\"messages\": [{\"role\": \"user\", \"content\": "
		   "\"q\"}, {\"role\": \"assistant\", \"content\": \"\", "
		   "\"tool_calls\": [{\"function\": {\"name\": \"f\", "
		   "\"arguments\": \"{\\\"x\\\": null, \\\"y\\\": true}\"}}"
		   "]}], \"add_generation_prompt\": false}",
		   err, &text);
	CHECK(rc == 0, "null argument: %s", err);
	CHECK(text && strstr(text, "<parameter=x>\nnull\n</parameter>\n"
				   "<parameter=y>\ntrue\n</parameter>"),
	      "null argument: %s", text ? text : "(none)");
	free(text);
	/* An unknown family is refused, never rendered. */
	json_t *b = json_loads("{\"messages\": []}", 0, NULL);
	gw_tmpl_ctx ctx;
	gw_prompt p;
	gw_tmpl_ctx_from_body(b, &ctx, err);
	CHECK(gw_tmpl_render(GW_TMPL_UNKNOWN, &ctx, &p, err) == MOOR_EUNSUP,
	      "unknown family");
	CHECK(p.text == NULL && p.msg_off == NULL, "zeroed on failure");
	gw_prompt_fini(&p);
	gw_prompt_fini(NULL);
	json_decref(b);
}

int main(void)
{
	tm_require_oracles();
	oracle_cases();
	gateway_checks();
	return t_done("test_tmpl_errors_are_template_messages");
}
