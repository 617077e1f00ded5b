/* compact.c: compaction as a continuation (the seed's "Compaction as a
 * continuation").
 *
 * opencode's /compact sends its compaction agent's system prompt and ONE
 * user message: "Here is the conversation so far: <conversation> [User]:
 * ... [Assistant]: ... [Tool result]: ... </conversation>" and the summary
 * instructions after it. That text shares nothing with the rows, so served
 * as sent it is read cold. It is served instead as the continuation of the
 * conversation the engine holds for the session: the rows' ids up to the
 * end anchor, the end token the last answer stopped at, then one user turn
 * holding the client's system text and the instructions, thinking off
 * (Qwen's "<think>\n\n</think>\n\n", what the templates write with
 * enable_thinking false). The prefill resumes at the end anchor and reads
 * only that turn.
 *
 * How it is recognised (written down, as the issue asks): a chat request
 * with a session (x-session-id or the body's), no tools, whose messages are
 * system messages and then exactly one user message, the last, whose text
 * holds "<conversation>" and "</conversation>" with at least one "[User]:"
 * line between them. The captured opencode 1.18.33 session
 * (shared/data/clients) holds no compaction; its turns all carry tools and
 * an assistant/tool history, so none of them is taken for one.
 *
 * The real 1.18.33 client's /compact (POST /session/:id/summarize of
 * `opencode serve`, tests/gateway/test_gw_opencode_real.sh) is this shape:
 * one system message, its compaction agent's prompt, and one user message
 * "Here is the conversation so far:\n\n<conversation>\n[User]: ...
 * \n</conversation>\n\n" and the instructions; no tools, no sampling
 * fields, max_tokens the model's output limit, the session's x-session-id.
 *
 * The guard: the first and the last "[User]:" line of the client's history
 * (each up to its end of line) must be in the text of the rows up to the
 * end anchor; any miss, or no end anchor, serves the request as sent.
 *
 * The default text (gw_compact_default): what the preparer writes a summary
 * ahead with before any compaction request has brought the client's own
 * (the seed falls back to the client's text the same way). It is opencode
 * 1.18.33's, byte for byte: the compaction agent's prompt (the bundle's
 * agent "compaction", from its compaction.txt) as the system text, and
 * what SessionCompaction's buildPrompt writes after the history of a
 * session with no earlier summary (a session compacted before also carries
 * the prior summary and other rules: its request brings them). Read from
 * the 1.18.33 binary and checked against the request that client sent
 * (test_gw_opencode_real); the seed names the 1.18.34 text, which this
 * checkout has no copy of. A summary prepared with it is served only to a
 * request whose continuation is the same ids (prepare.c), so another
 * client's text costs nothing but the unused run. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "gw.h"

#define GW_COMPACT_USER "[User]:"

/* opencode 1.18.33: the compaction agent's prompt */
static const char OPENCODE_SYSTEM[] =
    "You are a context summarization agent. You are given a "
    "conversation between a user and an agent. Your goal is to produce "
    "a structured summary matching the format specified so another "
    "coding agent can continue the work.\n"
    "\n"
    "Always follow the exact output structure requested by the user "
    "prompt. Keep every section, preserve exact file paths and "
    "identifiers when known, and prefer terse bullets over paragraphs.\n"
    "\n"
    "Do not continue the conversation. Do not respond to any questions "
    "in the conversation. Only output the structured summary in the "
    "exact format requested by the user prompt. Respond in the same "
    "language as the conversation.\n";

/* opencode 1.18.33: what follows "</conversation>\n\n" in a first
 * compaction's user message */
static const char OPENCODE_INSTRUCTIONS[] =
    "Create a new anchored summary from the conversation history in "
    "the <conversation> tags above so another coding agent can "
    "continue the work.\n"
    "\n"
    "Output exactly the Markdown structure shown inside <template> and "
    "keep the section order unchanged. Do not include the <template> "
    "tags in your response.\n"
    "<template>\n"
    "## Objective\n"
    "- [one or two brief sentences describing what the user is trying "
    "to accomplish]\n"
    "\n"
    "## Important Details\n"
    "- [constraints/preferences, decisions and why, important "
    "facts/assumptions, exact context needed to continue, or \"(none)\"]\n"
    "\n"
    "## Work State\n"
    "### Completed\n"
    "- [finished work, verified facts, or changes made; otherwise "
    "\"(none)\"]\n"
    "\n"
    "### Active\n"
    "- [current work, partial changes, or investigation state; "
    "otherwise \"(none)\"]\n"
    "\n"
    "### Blocked\n"
    "- [blockers, failing commands, or unknowns; otherwise \"(none)\"]\n"
    "\n"
    "## Next Move\n"
    "1. [immediate concrete action, or \"(none)\"]\n"
    "2. [next action if known, or \"(none)\"]\n"
    "\n"
    "## Relevant Files\n"
    "- [file or directory path: why it matters, or \"(none)\"]\n"
    "</template>\n"
    "\n"
    "Rules:\n"
    "- Keep every section, even when empty.\n"
    "- Use terse bullets, not prose paragraphs.\n"
    "- Preserve exact file paths, symbols, commands, error strings, "
    "URLs, and identifiers when known.\n"
    "- Do not mention the summary process or that context was "
    "compacted.";

int gw_compact_default(gw_compact *out)
{
	memset(out, 0, sizeof *out);
	out->is = 1;
	moor_buf_put(&out->system, OPENCODE_SYSTEM, sizeof OPENCODE_SYSTEM - 1);
	moor_buf_put(&out->instructions, OPENCODE_INSTRUCTIONS,
		     sizeof OPENCODE_INSTRUCTIONS - 1);
	if (out->system.err || out->instructions.err) {
		gw_compact_fini(out);
		return -ENOMEM;
	}
	return 0;
}

static const char *msg_text(const json_t *m, moor_buf *b)
{
	const json_t *c = json_object_get(m, "content");
	if (json_is_string(c))
		return json_string_value(c);
	size_t i;
	const json_t *p;
	if (!json_is_array(c))
		return NULL;
	moor_buf_reset(b);
	json_array_foreach(c, i, p)
	{
		const char *t = json_string_value(json_object_get(p, "text"));
		if (t)
			moor_buf_puts(b, t);
	}
	return b->p ? b->p : "";
}

/* A line of s starting at p (after the marker), trimmed; into out. */
static void line_at(const char *p, moor_buf *out)
{
	while (*p == ' ')
		p++;
	size_t n = strcspn(p, "\r\n");
	while (n && (p[n - 1] == ' ' || p[n - 1] == '\t'))
		n--;
	moor_buf_reset(out);
	moor_buf_put(out, p, n);
}

int gw_compact_detect(const json_t *body, const char *session,
		      gw_compact *out)
{
	memset(out, 0, sizeof *out);
	if (!session || !*session)
		return 0;
	const json_t *tools = json_object_get(body, "tools");
	if (json_is_array(tools) && json_array_size(tools))
		return 0;
	const json_t *msgs = json_object_get(body, "messages");
	size_t n = json_array_size(msgs);
	if (n < 1)
		return 0;
	moor_buf tb = {0};
	for (size_t i = 0; i + 1 < n; i++) {
		const json_t *m = json_array_get(msgs, i);
		const char *role = json_string_value(json_object_get(m, "role"));
		if (!role || strcmp(role, "system"))
			goto no;
		const char *t = msg_text(m, &tb);
		if (t) {
			if (out->system.len)
				moor_buf_puts(&out->system, "\n\n");
			moor_buf_puts(&out->system, t);
		}
	}
	const json_t *u = json_array_get(msgs, n - 1);
	const char *role = json_string_value(json_object_get(u, "role"));
	const char *t = role && !strcmp(role, "user") ? msg_text(u, &tb) : NULL;
	const char *a = t ? strstr(t, "<conversation>") : NULL;
	const char *e = a ? strstr(a, "</conversation>") : NULL;
	if (!e)
		goto no;
	const char *first = NULL, *last = NULL;
	for (const char *p = a; (p = strstr(p, GW_COMPACT_USER)) && p < e;
	     p += strlen(GW_COMPACT_USER)) {
		if (!first)
			first = p;
		last = p;
	}
	if (!first)
		goto no;
	line_at(first + strlen(GW_COMPACT_USER), &out->first_user);
	line_at(last + strlen(GW_COMPACT_USER), &out->last_user);
	const char *ins = e + strlen("</conversation>");
	while (*ins == ' ' || *ins == '\n' || *ins == '\r' || *ins == '\t')
		ins++;
	/* the instructions: what follows the history, else what precedes */
	if (*ins)
		moor_buf_puts(&out->instructions, ins);
	else
		moor_buf_put(&out->instructions, t, (size_t)(a - t));
	moor_buf_fini(&tb);
	out->is = 1;
	return 1;
no:
	moor_buf_fini(&tb);
	gw_compact_fini(out);
	return 0;
}

void gw_compact_fini(gw_compact *c)
{
	moor_buf_fini(&c->system);
	moor_buf_fini(&c->instructions);
	moor_buf_fini(&c->first_user);
	moor_buf_fini(&c->last_user);
	memset(c, 0, sizeof *c);
}

static int holds(const char *hay, size_t n, const moor_buf *needle)
{
	return needle->len && memmem(hay, n, needle->p, needle->len);
}

int gw_compact_build(gw_srv *s, const gw_compact *cp, const int32_t *rows,
		     size_t end, int32_t **ids, size_t *n, const char **why)
{
	*ids = NULL;
	*n = 0;
	char *text = NULL;
	size_t tl = 0;
	if (!cp->no_guard) {
		if (gw_tok_decode(s->tok, rows, end, &text, &tl)) {
			*why = "the rows do not decode";
			return 0;
		}
		int ok = holds(text, tl, &cp->first_user) &&
			 holds(text, tl, &cp->last_user);
		free(text);
		if (!ok) {
			*why = "the guard: a user line of the history is not "
			       "in the record";
			return 0;
		}
	}
	moor_buf turn = {0};
	moor_buf_puts(&turn, "<|im_end|>\n<|im_start|>user\n");
	if (cp->system.len) {
		moor_buf_put(&turn, cp->system.p, cp->system.len);
		moor_buf_puts(&turn, "\n\n");
	}
	moor_buf_put(&turn, cp->instructions.p, cp->instructions.len);
	moor_buf_puts(&turn, "<|im_end|>\n<|im_start|>assistant\n"
			     "<think>\n\n</think>\n\n");
	int32_t *t = NULL;
	size_t nt = 0;
	int rv = turn.err ? -ENOMEM
			  : gw_tok_encode(s->tok, turn.p, turn.len, &t, &nt);
	moor_buf_fini(&turn);
	if (rv) {
		*why = "the turn does not tokenize";
		return rv == -ENOMEM ? rv : 0;
	}
	int32_t *o = malloc((end + nt) * sizeof *o);
	if (!o) {
		free(t);
		return -ENOMEM;
	}
	memcpy(o, rows, end * sizeof *o);
	memcpy(o + end, t, nt * sizeof *t);
	free(t);
	*ids = o;
	*n = end + nt;
	return 1;
}
