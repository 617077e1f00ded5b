/* sse.c: the streamed reply (stream: true): the 200 with text/event-stream
 * once, one `data: {chunk}` frame per event of the stream parser (a chat
 * delta of role, reasoning_content, content or tool_calls; a completion's
 * text), then the finish chunk, the usage chunk when stream_options asked
 * for it, and `data: [DONE]`. With logprobs asked, the entries of the
 * tokens received since the last chunk ride on the next choice chunk (not
 * the role's), the rest on the finish chunk (pend_choice). A long
 * prefill's progress (engined's PROGRESS) comes before the first token as
 * an SSE comment line,
 * `: progress DONE/TOTAL tokens (cached N), R tokens/s, eta S s`, which
 * SSE clients skip; it starts the response. Frames wait in the job's pend
 * buffer while h2o sends the previous ones (one h2o_send in flight; its
 * proceed callback sends the rest), so a burst of tokens costs one write.
 * The send is of the job's wire buffer: pend's bytes, the two buffers
 * swapped at each send, so a stream holds what waits and what is being
 * sent, never what went before (a copy of each send on the request's pool
 * would stay there to the stream's end: ~1 byte of RSS a byte streamed).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gw.h"

static void pend_json(gw_job *j, json_t *o) /* takes o */
{
	char *t = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER);
	json_decref(o);
	if (!t)
		return;
	moor_buf_put(&j->pend, "data: ", 6);
	moor_buf_puts(&j->pend, t);
	moor_buf_put(&j->pend, "\n\n", 2);
	free(t);
}

static json_t *chunk_head(gw_job *j)
{
	json_t *o = json_object();
	json_object_set_new(o, "id", json_string(j->id));
	json_object_set_new(o, "object",
			    json_string(j->kind == GW_KIND_CHAT
					    ? "chat.completion.chunk"
					    : "text_completion"));
	json_object_set_new(o, "created", json_integer(j->created));
	json_object_set_new(o, "model", json_string(j->s->cfg.served));
	return o;
}

/* One choice chunk: a chat delta (taken) or a completion text; carry: it
 * may carry logprobs (every chunk but the role's). With logprobs asked it
 * carries the entries of the tokens received since the last chunk that
 * carried some (a chunk of held-back text may carry none: empty lists), so
 * the chunks' lists concatenated are the whole reply's, and drops them
 * (gw_lp_drop: the stream keeps only entries not yet sent); one that
 * cannot be written (no memory) goes with null, its entries on the next
 * chunk. */
static void pend_choice(gw_job *j, json_t *delta, const char *text, size_t len,
			const char *finish, int carry)
{
	json_t *o = chunk_head(j);
	json_t *c = json_object();
	json_object_set_new(c, "index", json_integer(0));
	if (j->kind == GW_KIND_CHAT)
		json_object_set_new(c, "delta", delta);
	else
		json_object_set_new(c, "text",
				    json_stringn(text ? text : "", len));
	json_object_set_new(c, "logprobs", json_null());
	json_object_set_new(c, "finish_reason",
			    finish ? json_string(finish) : json_null());
	json_t *a = json_array();
	json_array_append_new(a, c);
	json_object_set_new(o, "choices", a);
	if (!j->p.logprobs || !carry) {
		pend_json(j, o);
		return;
	}
	char *t = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER);
	json_decref(o);
	if (!t)
		return;
	moor_buf_put(&j->pend, "data: ", 6);
	/* written straight into pend; a pend that already failed is
	 * lost as it was (gw_sse_flush) */
	if (j->pend.err ||
	    gw_lp_splice_into(&j->pend, t, strlen(t), &j->lp, j->s->tok,
			      j->kind == GW_KIND_CHAT, 0, j->lp.n))
		moor_buf_puts(&j->pend, t);
	else
		gw_lp_drop(&j->lp);
	moor_buf_put(&j->pend, "\n\n", 2);
	free(t);
}

void gw_sse_flush(gw_job *j)
{
	if (!j->req || j->sending || j->final_sent)
		return;
	int final = j->have_done;
	if (!j->pend.len && !final)
		return;
	h2o_req_t *req = j->req;
	/* pend goes out as it is and the last send's buffer, which h2o no
	 * longer reads (its proceed came, or none was sent), takes pend's
	 * place; a frame that did not fit (no memory) is lost, the stream
	 * goes on */
	moor_buf sent = j->wire;
	j->wire = j->pend;
	j->pend = sent;
	moor_buf_reset(&j->pend);
	h2o_iovec_t b = h2o_iovec_init(j->wire.p ? j->wire.p : "", j->wire.len);
	j->sending = 1;
	j->t_send = moor_now();
	if (final)
		j->final_sent = 1;
	h2o_send(req, &b, 1,
		 final ? H2O_SEND_STATE_FINAL : H2O_SEND_STATE_IN_PROGRESS);
}

void gw_sse_proceed(h2o_generator_t *g, h2o_req_t *req)
{
	gw_anchor *a = (gw_anchor *)g;
	gw_job *j = a->job;
	if (!j)
		return;
	j->sending = 0;
	gw_sse_flush(j);
}

void gw_sse_start(gw_job *j)
{
	if (j->started || !j->req)
		return;
	j->started = 1;
	h2o_req_t *req = j->req;
	req->res.status = 200;
	req->res.reason = "OK";
	h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_CONTENT_TYPE,
		       NULL, H2O_STRLIT("text/event-stream"));
	h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_CACHE_CONTROL,
		       NULL, H2O_STRLIT("no-cache"));
	h2o_start_response(req, &j->anchor->gen);
	if (j->kind == GW_KIND_CHAT) {
		json_t *d = json_object();
		json_object_set_new(d, "role", json_string("assistant"));
		json_object_set_new(d, "content", json_string(""));
		pend_choice(j, d, NULL, 0, NULL, 0);
	}
}

int gw_sse_event(void *arg, const gw_rs_event *ev)
{
	gw_job *j = arg;
	if (!j->p.stream || !j->req)
		return 0;
	if (j->kind != GW_KIND_CHAT) {
		if (ev->kind == GW_RS_CONTENT && ev->len)
			pend_choice(j, NULL, ev->text, ev->len, NULL, 1);
		return 0;
	}
	json_t *d = json_object();
	switch (ev->kind) {
	case GW_RS_REASONING:
		json_object_set_new(d, "reasoning_content",
				    json_stringn(ev->text, ev->len));
		break;
	case GW_RS_CONTENT:
		json_object_set_new(d, "content",
				    json_stringn(ev->text, ev->len));
		break;
	case GW_RS_TOOL_START: {
		json_t *fn = json_object();
		json_object_set_new(fn, "name", json_string(ev->name));
		json_object_set_new(fn, "arguments", json_string(""));
		json_t *c = json_object();
		json_object_set_new(c, "index", json_integer(ev->index));
		json_object_set_new(c, "id", json_string(ev->id));
		json_object_set_new(c, "type", json_string("function"));
		json_object_set_new(c, "function", fn);
		json_t *a = json_array();
		json_array_append_new(a, c);
		json_object_set_new(d, "tool_calls", a);
		j->n_tool_calls++;
		break;
	}
	case GW_RS_TOOL_ARGS: {
		json_t *fn = json_object();
		json_object_set_new(fn, "arguments",
				    json_stringn(ev->text, ev->len));
		json_t *c = json_object();
		json_object_set_new(c, "index", json_integer(ev->index));
		json_object_set_new(c, "function", fn);
		json_t *a = json_array();
		json_array_append_new(a, c);
		json_object_set_new(d, "tool_calls", a);
		break;
	}
	default:
		json_decref(d);
		return 0;
	}
	pend_choice(j, d, NULL, 0, NULL, 1);
	return 0;
}

void gw_sse_end(gw_job *j)
{
	if (j->kind == GW_KIND_CHAT)
		pend_choice(j, json_object(), NULL, 0,
			    gw_reply_finish_name(j, j->n_tool_calls), 1);
	else
		pend_choice(j, NULL, "", 0, gw_reply_finish_name(j, 0), 1);
	if (j->p.include_usage) {
		json_t *o = chunk_head(j);
		json_object_set_new(o, "choices", json_array());
		json_object_set_new(o, "usage", gw_reply_usage(j));
		pend_json(j, o);
	}
	moor_buf_puts(&j->pend, "data: [DONE]\n\n");
}

void gw_sse_progress(gw_job *j, const proto_progress *p)
{
	if (!j->p.stream || !j->req || j->have_done)
		return;
	gw_sse_start(j);
	char line[192];
	int n = snprintf(line, sizeof line,
			 ": progress %llu/%llu tokens (cached %llu), %u "
			 "tokens/s, eta %.1f s\n\n",
			 (unsigned long long)p->done,
			 (unsigned long long)p->total,
			 (unsigned long long)p->start, p->tokens_per_s,
			 p->eta_ms / 1e3);
	if (n > 0 && (size_t)n < sizeof line)
		moor_buf_put(&j->pend, line, (size_t)n);
	gw_sse_flush(j);
}

void gw_sse_error(gw_job *j, const char *type, const char *msg)
{
	json_t *e = json_object();
	json_object_set_new(e, "message", json_string(msg));
	json_object_set_new(e, "type", json_string(type));
	json_object_set_new(e, "param", json_null());
	json_object_set_new(e, "code", json_null());
	json_t *o = json_object();
	json_object_set_new(o, "error", e);
	pend_json(j, o);
	moor_buf_puts(&j->pend, "data: [DONE]\n\n");
}
