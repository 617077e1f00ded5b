/* test_tmpl_renders_equal_jinja: for 150 generated requests per template
 * family (cases.js, a fixed seed: system or not, multi-turn, tools with and
 * without calls, several calls, consecutive tool responses,
 * reasoning_content and </think> in content, the template variables,
 * parts arrays, empty contents, unicode and JavaScript whitespace at the
 * edges), our rendering equals @huggingface/jinja's of the real template,
 * byte for byte. The first mismatch of each family is shown with its
 * request. */
#include "tmpl_test.h"

static const char *FAMILIES[] = {"qwen3", "qwen3.5", "qwen3.6", "qwen3.8"};

int main(void)
{
	tm_require_oracles();
	json_t *all = tm_oracle("cases", "tmpl-cases.json");
	size_t rendered[4] = {0}, equal[4] = {0}, shown[4] = {0};
	char err[MOOR_ERRLEN];

	for (size_t i = 0; i < json_array_size(all); i++) {
		json_t *c = json_array_get(all, i);
		const char *fam =
		    json_string_value(json_object_get(c, "family"));
		const char *name =
		    json_string_value(json_object_get(c, "name"));
		json_t *text = json_object_get(c, "text");
		gw_tmpl_family f = gw_tmpl_from_name(fam);
		REQUIRE(f != GW_TMPL_UNKNOWN, "family %s", fam);
		int k = 0;
		while (strcmp(FAMILIES[k], fam))
			k++;
		REQUIRE(json_is_string(text), "%s: jinja did not render it: %s",
			name, json_string_value(json_object_get(c, "error")));
		rendered[k]++;

		gw_tmpl_ctx ctx;
		int rc = gw_tmpl_ctx_from_body(json_object_get(c, "request"),
					       &ctx, err);
		REQUIRE(rc == 0, "%s: ctx: %s", name, err);
		gw_prompt p;
		rc = gw_tmpl_render(f, &ctx, &p, err);
		size_t wn = json_string_length(text);
		const char *want = json_string_value(text);
		if (rc) {
			CHECK(0, "%s: render failed: %s (%s)", name,
			      moor_strerror(rc), err);
			continue;
		}
		if (p.len == wn && memcmp(p.text, want, wn) == 0) {
			equal[k]++;
		} else if (shown[k]++ == 0) {
			tm_diff(stderr, name, p.text, p.len, want, wn);
			char *req = json_dumps(json_object_get(c, "request"),
					       JSON_ENSURE_ASCII);
			fprintf(stderr, "  request %s\n", req);
			free(req);
		}
		/* message offsets are in order and inside the text */
		for (size_t m = 0; m < p.n_msgs; m++)
			CHECK(p.msg_off[m] <= p.msg_off[m + 1], "%s: msg_off",
			      name);
		CHECK(p.msg_off[p.n_msgs] <= p.len, "%s: msg_off end", name);
		gw_prompt_fini(&p);
	}
	for (int k = 0; k < 4; k++) {
		printf("%s: %zu of %zu requests render equal to jinja\n",
		       FAMILIES[k], equal[k], rendered[k]);
		CHECK(rendered[k] >= 100, "%s: only %zu requests", FAMILIES[k],
		      rendered[k]);
		CHECK(equal[k] == rendered[k], "%s: %zu differ", FAMILIES[k],
		      rendered[k] - equal[k]);
	}
	json_decref(all);
	return t_done("test_tmpl_renders_equal_jinja");
}
