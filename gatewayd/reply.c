/* reply.c: the generation's tokens turned into the OpenAI reply: each
 * token decoded to text (whole UTF-8 characters), pushed through the stream
 * parser (replystream: reasoning, content, tool calls, stop strings), and
 * at the DONE the whole reply (chat.completion / text_completion) or the
 * stream's end (sse.c); the usage object; an engine error as HTTP.
 *
 * Choices written down:
 *   - finish_reason: "stop" for an eos / stop id / stop string, "length" at
 *     max_tokens or the window, "tool_calls" when the reply carried calls.
 *   - A stop string ends the text where it matched (replystream) and the
 *     generation is cancelled at once; the usage counts what engined
 *     generated until the cancel took effect.
 *   - Stop ids: <|im_end|>, <|endoftext|> and generation_config.json's
 *     eos_token_id(s); the token that stopped is not text. ignore_eos
 *     (vLLM's extension) sends none of them (they are all eos-like) and
 *     sets PROTO_GEN_IGNORE_EOS; stop strings still apply.
 *   - logprobs (logprobs.h): every token that reaches the text has an
 *     entry, kept before its piece goes through the stream parser (so a
 *     streamed chunk its text makes carries it): not the token that
 *     stopped the generation, the one where a stop string matched and
 *     none after it. One that cannot be kept (no memory) cancels the
 *     generation and the request ends with an error, never a reply whose
 *     logprobs miss tokens.
 *   - The non-streamed reply is gw_reply_parse of the text the stream
 *     parser kept (stop strings cut): by replystream's contract the same
 *     reasoning, content and calls the streamed deltas add up to.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gw.h"
#include "toolcall.h"

/* ---- tokens ------------------------------------------------------------- */

static void push_piece(gw_job *j, const char *piece, size_t len)
{
	if (j->stopped || !len)
		return;
	int rv = gw_rs_push(j->rs, piece, len, gw_sse_event, j);
	if (rv == GW_RS_STOPPED) {
		j->stopped = 1;
		gw_job_cancel(j);
	}
}

void gw_reply_token(gw_job *j, const proto_step_entry *e)
{
	if (j->have_done)
		return;
	gw_rc_record(j, e);
	if (!j->n_tokens++) {
		j->t_first = moor_now();
		gw_metrics_ttft(j->s, j->t_first - j->t_start);
	}
	if (j->p.stream && j->req)
		gw_sse_start(j);
	/* the token that stopped the generation (eos, a stop id) is not
	 * text; after a logprob that could not be kept no text is: the
	 * request ends with an error */
	if (e->finish == PROTO_FINISH_STOP || j->stopped || j->lp_failed)
		return;
	/* a token of the output has its logprobs, kept before its piece
	 * goes through the stream parser so that the chunk its text makes
	 * carries them (the one where a stop string matches too); one that
	 * cannot be kept stops the text before its piece, so no chunk
	 * carries text without its entry */
	if (j->p.logprobs && gw_lp_add(&j->lp, e, j->p.top_logprobs)) {
		j->lp_failed = 1;
		gw_job_cancel(j);
		gw_sse_flush(j);
		return;
	}
	const char *piece;
	size_t len;
	if (gw_tok_stream_push(&j->ts, e->token, &piece, &len) == 0) {
		if (j->p.logprobs)
			gw_lp_text(&j->lp, piece, len);
		push_piece(j, piece, len);
	}
	gw_sse_flush(j);
}

/* ---- the end ------------------------------------------------------------ */

/* prompt_tokens is the client's count (its copy as the template renders
 * and the tokenizer splits it); cached and reread are in the positions of
 * the prompt the engine read, which the end alignment may have respelled
 * (the rows' tokens) and given back its hidden spans (injected). */
json_t *gw_reply_usage(const gw_job *j)
{
	const proto_done *d = &j->dn;
	uint64_t client = j->n_client ? j->n_client : d->prompt_tokens;
	json_t *u = json_object();
	json_object_set_new(u, "prompt_tokens", json_integer((json_int_t)client));
	json_object_set_new(u, "completion_tokens",
			    json_integer((json_int_t)d->completion_tokens));
	json_object_set_new(
	    u, "total_tokens",
	    json_integer((json_int_t)(client + d->completion_tokens)));
	/* a compaction served as a continuation: the client's prompt less
	 * what was forwarded (the seed's rule; its prompt shares no token
	 * with the rows, whose count is in usage.moor) */
	uint64_t fwd = d->prompt_tokens > d->cached_tokens
			   ? d->prompt_tokens - d->cached_tokens
			   : 0;
	uint64_t cached_c =
	    j->continuation ? (client > fwd ? client - fwd : 0)
	    : d->cached_tokens < client ? d->cached_tokens
					: client;
	json_t *det = json_object();
	json_object_set_new(det, "cached_tokens",
			    json_integer((json_int_t)cached_c));
	json_object_set_new(u, "prompt_tokens_details", det);
	json_t *m = json_object();
	json_object_set_new(
	    m, "tier",
	    json_string(j->from_cache ? "response_cache"
				      : proto_tier(d->tier)->tier));
	json_object_set_new(
	    m, "source",
	    json_string(j->from_cache ? "response_cache"
			: j->prepared	  ? "prepared"
			: j->continuation && d->tier == PROTO_TIER_END
			    ? "continuation"
			    : proto_tier(d->tier)->source));
	json_object_set_new(m, "cached",
			    json_integer((json_int_t)d->cached_tokens));
	uint64_t reread = d->prompt_tokens > d->cached_tokens
			      ? d->prompt_tokens - d->cached_tokens
			      : 0;
	json_object_set_new(m, "reread", json_integer((json_int_t)reread));
	json_object_set_new(m, "prompt_read",
			    json_integer((json_int_t)d->prompt_tokens));
	json_object_set_new(m, "injected",
			    json_integer((json_int_t)j->injected));
	json_object_set_new(m, "aligned", json_integer(j->align_pass));
	/* the parts of the prompt the engine read: system, tools, history,
	 * injected (hidden spans put back), images (none: text only) */
	uint64_t rd = d->prompt_tokens, head = j->p.n_system + j->p.n_tools;
	uint64_t hist = rd > head + j->injected ? rd - head - j->injected : 0;
	json_t *pt = json_object();
	json_object_set_new(pt, "system",
			    json_integer((json_int_t)j->p.n_system));
	json_object_set_new(pt, "tools", json_integer((json_int_t)j->p.n_tools));
	json_object_set_new(pt, "history", json_integer((json_int_t)hist));
	json_object_set_new(pt, "injected",
			    json_integer((json_int_t)j->injected));
	json_object_set_new(pt, "images", json_integer(0));
	json_object_set_new(m, "parts", pt);
	json_object_set_new(u, "moor", m);
	return u;
}

const char *gw_reply_finish_name(const gw_job *j, int n_calls)
{
	if (j->stopped)
		return "stop";
	if (j->dn.finish == PROTO_FINISH_LENGTH)
		return "length";
	if (n_calls > 0)
		return "tool_calls";
	return "stop";
}

/* An engine error as HTTP: status, type, Retry-After. */
static void error_of(int code, int *status, const char **type, int *retry)
{
	*retry = 0;
	*type = "server_error";
	if (code == MOOR_ERANGE) {
		*status = 400;
		*type = "invalid_request_error";
	} else if (code == -ETIME) { /* the job's deadline (gw_jobs_tick) */
		*status = 504;
	} else if (code == -EBUSY || code == -ESHUTDOWN ||
		   code == MOOR_ENOSPACE || code == -EPIPE ||
		   code == -ETIMEDOUT) {
		*status = 503;
		*retry = 1;
	} else {
		*status = 500;
	}
}

/* The whole reply's dump t (NULL: no memory) sent with the logprobs in
 * place of its choice's null; what cannot be written is a 500, never a
 * reply without them. Its memory is one copy of the logprobs' text: it
 * is written into the body, the entries are freed, and h2o takes the
 * body as it is (limits.c counts it). */
static void reply_logprobs(gw_job *j, const char *t)
{
	moor_buf body = {0};
	int rv = !t ? -ENOMEM
		    : gw_lp_splice_into(&body, t, strlen(t), &j->lp, j->s->tok,
					j->kind == GW_KIND_CHAT, 0, j->lp.n);
	gw_lp_fini(&j->lp);
	if (rv) {
		gw_metrics_count(j->s, j->route, 500);
		gw_send_error(j->req, 500, "server_error", NULL, NULL, 0,
			      "out of memory writing the logprobs");
	} else {
		gw_metrics_count(j->s, j->route, 200);
		gw_send_json_take(j->req, 200, &body);
	}
	moor_buf_fini(&body);
}

static void reply_whole(gw_job *j)
{
	gw_srv *s = j->s;
	size_t tl;
	const char *text = gw_rs_text(j->rs, &tl);
	json_t *o = json_object();
	json_object_set_new(o, "id", json_string(j->id));
	json_object_set_new(o, "object",
			    json_string(j->kind == GW_KIND_CHAT
					    ? "chat.completion"
					    : "text_completion"));
	json_object_set_new(o, "created", json_integer(j->created));
	json_object_set_new(o, "model", json_string(s->cfg.served));
	json_t *c = json_object();
	json_object_set_new(c, "index", json_integer(0));
	int n_calls = 0;
	if (j->kind == GW_KIND_CHAT) {
		gw_reply r = {0};
		char prefix[64];
		snprintf(prefix, sizeof prefix, "call_%.12s_",
			 j->id + strlen(j->id) - 12);
		int rv =
		    gw_reply_parse(j->p.family, text ? text : "", tl,
				   j->p.think_open, j->p.tools, prefix, &r);
		json_t *msg = json_object();
		json_object_set_new(msg, "role", json_string("assistant"));
		if (rv == 0) {
			json_object_set_new(
			    msg, "content",
			    r.content ? json_stringn(r.content, r.content_len)
				      : (r.tool_calls ? json_null()
						      : json_string("")));
			if (r.reasoning)
				json_object_set_new(
				    msg, "reasoning_content",
				    json_stringn(r.reasoning, r.reasoning_len));
			if (r.tool_calls) {
				n_calls = (int)json_array_size(r.tool_calls);
				json_object_set(msg, "tool_calls",
						r.tool_calls);
			}
		} else {
			json_object_set_new(msg, "content",
					    json_stringn(text ? text : "", tl));
		}
		gw_reply_fini(&r);
		json_object_set_new(c, "message", msg);
	} else {
		json_object_set_new(c, "text",
				    json_stringn(text ? text : "", tl));
	}
	/* logprobs asked: spliced in for the null below (gw_lp_splice) */
	json_object_set_new(c, "logprobs", json_null());
	json_object_set_new(c, "finish_reason",
			    json_string(gw_reply_finish_name(j, n_calls)));
	json_t *a = json_array();
	json_array_append_new(a, c);
	json_object_set_new(o, "choices", a);
	json_object_set_new(o, "usage", gw_reply_usage(j));
	gw_journal_turn(j, gw_reply_finish_name(j, n_calls));
	char *t = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER);
	json_decref(o);
	if (j->p.logprobs) {
		reply_logprobs(j, t);
		free(t);
		return;
	}
	gw_metrics_count(s, j->route, 200);
	gw_send_json(j->req, 200, t ? t : "{}", t ? strlen(t) : 2);
	free(t);
}

void gw_reply_finish(gw_job *j)
{
	gw_srv *s = j->s;
	const proto_done *d = &j->dn;
	if (j->route == GW_ROUTE_PREWARM) {
		gw_prewarm_done(j);
		gw_admit_leave(j);
		gw_job_unref(j); /* the engine's */
		return;
	}
	if (j->lp_failed && d->finish != PROTO_FINISH_ERROR) {
		/* logprobs were asked and one could not be kept: no reply
		 * that lacks some */
		j->dn.finish = PROTO_FINISH_ERROR;
		j->dn.code = -ENOMEM;
		snprintf(j->err_msg, sizeof j->err_msg,
			 "out of memory keeping the logprobs");
	}
	if (d->finish != PROTO_FINISH_ERROR) {
		const char *piece;
		size_t len;
		if (j->ts_init && !gw_tok_stream_flush(&j->ts, &piece, &len))
			push_piece(j, piece, len);
		if (j->rs)
			gw_rs_finish(j->rs, gw_sse_event, j);
	}
	gw_admit_leave(j); /* the next waiting request's turn */
	if (!j->req) {
		gw_job_unref(j); /* the engine's */
		return;
	}
	if (d->finish == PROTO_FINISH_ERROR) {
		int status, retry;
		const char *type;
		error_of(d->code, &status, &type, &retry);
		const char *msg =
		    j->err_msg[0] ? j->err_msg : moor_strerror(d->code);
		gw_metrics_count(s, j->route, status);
		if (j->started) { /* the 200 is out: an error event */
			gw_sse_error(j, type, msg);
			gw_sse_flush(j);
		} else {
			gw_send_error(j->req, status, type, NULL, NULL, retry,
				      "%s", msg);
		}
	} else if (j->p.stream) {
		gw_journal_turn(j, gw_reply_finish_name(j, j->n_tool_calls));
		gw_sse_start(j);
		gw_sse_end(j);
		gw_metrics_count(s, j->route, 200);
		gw_sse_flush(j);
	} else {
		reply_whole(j);
	}
	gw_job_unref(j); /* the engine's */
}
