/* samples.h: a valid message of every type in four sizes, their field-by-
 * field comparison, and a raw little-endian writer independent of proto.c,
 * for the proto tests and the fuzz seed corpus (mkcorpus.c).
 *
 * Every heap member of a sample is malloc'd, so proto_msg_fini frees a
 * sample exactly as it frees a decoded message. */
#ifndef PROTO_SAMPLES_H
#define PROTO_SAMPLES_H

#include "proto.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const uint16_t sample_types[] = {
    PROTO_ERROR,   PROTO_OK,	  PROTO_HELLO, PROTO_HELLO_OK, PROTO_PLAN,
    PROTO_PLAN_OK, PROTO_COMMIT,  PROTO_ABORT, PROTO_GENERATE, PROTO_STEP,
    PROTO_DONE,	   PROTO_CANCEL,  PROTO_STATS, PROTO_STATS_OK, PROTO_CLEAR,
    PROTO_PEEK,	   PROTO_PEEK_OK, PROTO_CREDIT, PROTO_PROGRESS,
};
#define N_SAMPLE_TYPES (sizeof sample_types / sizeof sample_types[0])

/* Arrays of 0, 1, many and the most elements (as far as the payload limit
 * allows); strings empty (NULL where the type has a string: it encodes as
 * empty), short, middling and PROTO_MAX_STR long; names 0, 1, 10, 47. */
enum { S_EMPTY, S_ONE, S_MANY, S_MAX, S_NSIZES };
static const char *const size_names[] = {"empty", "one", "many", "max"};

static uint64_t sample_rng = 88172645463325252ull;

static inline uint64_t rnd(void)
{
	sample_rng ^= sample_rng << 13;
	sample_rng ^= sample_rng >> 7;
	sample_rng ^= sample_rng << 17;
	return sample_rng;
}

static inline void *xmalloc(size_t n)
{
	void *p = calloc(1, n ? n : 1);
	if (!p) {
		fprintf(stderr, "out of memory (%zu bytes)\n", n);
		exit(2);
	}
	return p;
}

static inline uint32_t count_for(int size, uint32_t many, uint32_t max)
{
	static const uint32_t c[] = {0, 1, 0, 0};
	return size == S_MANY ? many : size == S_MAX ? max : c[size];
}

/* A string of n bytes, none NUL, some above 0x7f; NULL for the empty one. */
static inline char *sample_str(int size)
{
	static const size_t n[] = {0, 1, 100, PROTO_MAX_STR};
	if (size == S_EMPTY)
		return NULL;
	char *s = xmalloc(n[size] + 1);
	for (size_t i = 0; i < n[size]; i++)
		s[i] = (char)(1 + (i * 7 + rnd() % 3) % 255);
	return s;
}

static inline void sample_name(char name[PROTO_NAME_MAX], int size)
{
	static const size_t n[] = {0, 1, 10, PROTO_NAME_MAX - 1};
	memset(name, 0, PROTO_NAME_MAX);
	for (size_t i = 0; i < n[size]; i++)
		name[i] = (char)('a' + (i + rnd()) % 26);
}

static inline int32_t *sample_i32s(uint32_t n)
{
	int32_t *v = n ? xmalloc(n * sizeof *v) : NULL;
	for (uint32_t i = 0; i < n; i++)
		v[i] = (int32_t)rnd();
	return v;
}

static inline uint64_t *sample_u64s(uint32_t n)
{
	uint64_t *v = n ? xmalloc(n * sizeof *v) : NULL;
	for (uint32_t i = 0; i < n; i++)
		v[i] = rnd();
	return v;
}

static inline void sample_dims(uint32_t *ndim, int64_t dims[4])
{
	*ndim = (uint32_t)(rnd() % 5);
	for (int i = 0; i < 4; i++)
		dims[i] = (int64_t)rnd();
}

/* Fills m (zeroed first) with a message of type and size. */
static inline void sample_make(proto_msg *m, uint16_t type, int size)
{
	memset(m, 0, sizeof *m);
	sample_rng = 88172645463325252ull + type * 131u + (unsigned)size;
	m->h.type = type;
	m->h.req = rnd();
	m->h.flags = size == S_MAX ? 0xdeadbeefu : 0;
	switch (type) {
	case PROTO_ERROR:
		m->u.error.code = size ? MOOR_EVERSION : -ETIMEDOUT;
		m->u.error.msg = sample_str(size);
		break;
	case PROTO_OK:
	case PROTO_STATS:
		break;
	case PROTO_HELLO: {
		proto_hello *h = &m->u.hello;
		for (int i = 0; i < 32; i++)
			h->fingerprint[i] = (uint8_t)rnd();
		h->pid = (uint32_t)rnd();
		h->grid = 64;
		h->window = rnd();
		h->workspace_bytes = rnd();
		h->n_sections = count_for(size, 7, PROTO_MAX_SECTIONS);
		h->sec = h->n_sections ? xmalloc(h->n_sections * sizeof *h->sec)
				       : NULL;
		for (uint32_t i = 0; i < h->n_sections; i++) {
			proto_section *s = &h->sec[i];
			sample_name(s->name, size);
			s->layer = (int32_t)rnd();
			s->dtype = (uint32_t)rnd();
			sample_dims(&s->ndim, s->dims);
			s->bytes = rnd();
		}
		h->n_views = count_for(size, 5, PROTO_MAX_VIEWS);
		h->view =
		    h->n_views ? xmalloc(h->n_views * sizeof *h->view) : NULL;
		for (uint32_t i = 0; i < h->n_views; i++) {
			proto_view *v = &h->view[i];
			sample_name(v->name, size);
			v->layer = (int32_t)rnd();
			v->dtype = (uint32_t)rnd();
			sample_dims(&v->ndim, v->dims);
			v->token_axis = (uint32_t)rnd();
			v->row_bytes = rnd();
		}
		break;
	}
	case PROTO_HELLO_OK: {
		proto_hello_ok *h = &m->u.hello_ok;
		h->dev_arena = sample_str(size);
		h->dev_size = rnd();
		h->host_arena = sample_str(size);
		h->host_size = rnd();
		h->adopted = (uint8_t)(size == S_MAX ? 0xff : size & 1);
		h->resident_len = rnd();
		h->n_sec = count_for(size, 7, PROTO_MAX_SECTIONS);
		h->sec_off = sample_u64s(h->n_sec);
		h->n_view = count_for(size, 5, PROTO_MAX_VIEWS);
		h->view_off = sample_u64s(h->n_view);
		h->dev_kind = size & 1 ? PROTO_ARENA_CUDA : PROTO_ARENA_SHM;
		h->dev_device = (int32_t)rnd();
		for (size_t i = 0; i < sizeof h->dev_handle; i++)
			h->dev_handle[i] = (uint8_t)rnd();
		break;
	}
	case PROTO_PLAN: {
		proto_plan *p = &m->u.plan;
		p->session = sample_str(size);
		p->max_tokens = (uint32_t)rnd();
		p->flags = size == S_ONE ? PROTO_PLAN_NO_CACHE : 0;
		p->n_ids = count_for(size, 1000, 1u << 19);
		p->ids = sample_i32s(p->n_ids);
		p->salt = size == S_EMPTY ? 0 : rnd();
		p->user_at = size == S_EMPTY ? 0 : rnd();
		break;
	}
	case PROTO_PLAN_OK: {
		proto_plan_ok *p = &m->u.plan_ok;
		p->start = rnd();
		p->cached = p->start;
		p->taint = rnd();
		p->tier = PROTO_TIER_STASH;
		p->mem_held = rnd();
		p->mem_ceiling = rnd();
		p->mem_shed = (uint32_t)rnd();
		p->n_slots = count_for(size, 37, PROTO_MAX_SLOTS);
		p->slots =
		    p->n_slots ? xmalloc(p->n_slots * sizeof *p->slots) : NULL;
		for (uint32_t i = 0; i < p->n_slots; i++) {
			p->slots[i].line = rnd();
			p->slots[i].offset = rnd();
		}
		break;
	}
	case PROTO_COMMIT:
		m->u.commit.n_filled = (uint32_t)rnd();
		m->u.commit.n_ids = count_for(size, 333, 1u << 19);
		m->u.commit.ids = sample_i32s(m->u.commit.n_ids);
		break;
	case PROTO_ABORT:
		m->u.abort_.n_filled = (uint32_t)rnd();
		m->u.abort_.valid = rnd();
		break;
	case PROTO_GENERATE: {
		proto_generate *g = &m->u.gen;
		g->session = sample_str(size);
		g->max_tokens = (uint32_t)rnd();
		if (size == S_MAX) { /* bits, not values, must survive */
			uint32_t nan = 0x7fc00123u;
			memcpy(&g->temperature, &nan, 4);
			g->top_p = -0.0f;
			g->min_p = 1e-38f;
		} else {
			g->temperature = 0.7f;
			g->top_p = 0.95f;
			g->min_p = 0.05f;
		}
		g->top_k = size == S_EMPTY ? -1 : 40;
		g->seed = rnd();
		g->flags = (uint32_t)size;
		g->n_ids = count_for(size, 1000, 1u << 19);
		g->ids = sample_i32s(g->n_ids);
		g->n_stop = count_for(size, 3, 1u << 16);
		g->stop_ids = sample_i32s(g->n_stop);
		g->salt = size == S_EMPTY ? 0 : rnd();
		g->user_at = size == S_EMPTY ? 0 : rnd();
		g->top_logprobs = size == S_MAX ? PROTO_MAX_TOP : 0;
		break;
	}
	case PROTO_STEP: {
		proto_step *s = &m->u.step;
		s->n = count_for(size, 64, 1u << 16);
		s->e = s->n ? xmalloc(s->n * sizeof *s->e) : NULL;
		for (uint32_t i = 0; i < s->n; i++) {
			s->e[i].req = rnd();
			s->e[i].token = (int32_t)rnd();
			s->e[i].finish = (uint32_t)(rnd() % 5);
			/* a top list on every 64th (a full one at S_MAX's
			 * 65,536 entries would pass the payload limit) */
			uint32_t k = i % 64 ? 0 : (uint32_t)(rnd() % 21);
			s->e[i].n_top = k;
			s->e[i].logprob = i % 64 ? 0.0f : -(float)(rnd() % 1000) / 7;
			for (uint32_t t = 0; t < k; t++) {
				s->e[i].top_id[t] = (int32_t)rnd();
				s->e[i].top_lp[t] = -(float)t / 3;
			}
		}
		break;
	}
	case PROTO_DONE: {
		proto_done *d = &m->u.done;
		d->finish = PROTO_FINISH_ERROR;
		d->code = MOOR_EBACKEND;
		d->tier = PROTO_TIER_PIN;
		d->prompt_tokens = rnd();
		d->cached_tokens = rnd();
		d->completion_tokens = rnd();
		d->prefill_us = rnd();
		d->decode_us = rnd();
		d->mem_held = rnd();
		d->mem_ceiling = rnd();
		d->mem_shed = (uint32_t)rnd();
		d->msg = sample_str(size);
		break;
	}
	case PROTO_CANCEL:
		m->u.cancel.target = rnd();
		break;
	case PROTO_CREDIT:
		m->u.credit.n = 1 + (uint32_t)(rnd() % 1000);
		break;
	case PROTO_PROGRESS:
		m->u.progress.total = rnd();
		m->u.progress.done = m->u.progress.total / 2;
		m->u.progress.start = rnd();
		m->u.progress.tokens_per_s = (uint32_t)rnd();
		m->u.progress.eta_ms = (uint32_t)rnd();
		break;
	case PROTO_STATS_OK:
		m->u.text.text = sample_str(size);
		break;
	case PROTO_CLEAR:
		m->u.clear.tier = sample_str(size);
		break;
	case PROTO_PEEK:
		m->u.peek.session = sample_str(size);
		m->u.peek.n_ids = count_for(size, 1000, 1u << 19);
		m->u.peek.ids = sample_i32s(m->u.peek.n_ids);
		m->u.peek.salt = size == S_EMPTY ? 0 : rnd();
		break;
	case PROTO_PEEK_OK: {
		proto_peek_ok *p = &m->u.peek_ok;
		p->tier = size == S_MAX ? 0xffffffffu : (uint32_t)size;
		p->cached = rnd();
		p->tokens = rnd();
		p->taint = size == S_EMPTY ? UINT64_MAX : rnd();
		p->restore_bytes = rnd();
		p->read_us = size == S_EMPTY ? 0 : rnd();
		break;
	}
	}
}

/* ---- comparison: NULL of the first differing field, else its name ---- */

static inline int str_eq(const char *a, const char *b)
{
	return strcmp(a ? a : "", b ? b : "") == 0;
}

#define DIFF(cond, what)                                                       \
	do {                                                                   \
		if (!(cond))                                                   \
			return what;                                           \
	} while (0)
#define ARR_EQ(n, a, b) ((n) == 0 || memcmp((a), (b), (n) * sizeof *(a)) == 0)

static inline const char *section_diff(const proto_section *a,
				       const proto_section *b)
{
	DIFF(strcmp(a->name, b->name) == 0, "section.name");
	DIFF(a->layer == b->layer, "section.layer");
	DIFF(a->dtype == b->dtype, "section.dtype");
	DIFF(a->ndim == b->ndim, "section.ndim");
	DIFF(memcmp(a->dims, b->dims, sizeof a->dims) == 0, "section.dims");
	DIFF(a->bytes == b->bytes, "section.bytes");
	return NULL;
}

static inline const char *view_diff(const proto_view *a, const proto_view *b)
{
	DIFF(strcmp(a->name, b->name) == 0, "view.name");
	DIFF(a->layer == b->layer, "view.layer");
	DIFF(a->dtype == b->dtype, "view.dtype");
	DIFF(a->ndim == b->ndim, "view.ndim");
	DIFF(memcmp(a->dims, b->dims, sizeof a->dims) == 0, "view.dims");
	DIFF(a->token_axis == b->token_axis, "view.token_axis");
	DIFF(a->row_bytes == b->row_bytes, "view.row_bytes");
	return NULL;
}

static inline const char *msg_diff(const proto_msg *a, const proto_msg *b)
{
	DIFF(a->h.type == b->h.type, "h.type");
	DIFF(a->h.req == b->h.req, "h.req");
	DIFF(a->h.flags == b->h.flags, "h.flags");
	switch (a->h.type) {
	case PROTO_ERROR:
		DIFF(a->u.error.code == b->u.error.code, "error.code");
		DIFF(str_eq(a->u.error.msg, b->u.error.msg), "error.msg");
		break;
	case PROTO_HELLO: {
		const proto_hello *x = &a->u.hello, *y = &b->u.hello;
		DIFF(!memcmp(x->fingerprint, y->fingerprint, 32),
		     "fingerprint");
		DIFF(x->pid == y->pid, "hello.pid");
		DIFF(x->grid == y->grid, "hello.grid");
		DIFF(x->window == y->window, "hello.window");
		DIFF(x->workspace_bytes == y->workspace_bytes, "workspace");
		DIFF(x->n_sections == y->n_sections, "hello.n_sections");
		for (uint32_t i = 0; i < x->n_sections; i++) {
			const char *d = section_diff(&x->sec[i], &y->sec[i]);
			DIFF(!d, d);
		}
		DIFF(x->n_views == y->n_views, "hello.n_views");
		for (uint32_t i = 0; i < x->n_views; i++) {
			const char *d = view_diff(&x->view[i], &y->view[i]);
			DIFF(!d, d);
		}
		break;
	}
	case PROTO_HELLO_OK: {
		const proto_hello_ok *x = &a->u.hello_ok, *y = &b->u.hello_ok;
		DIFF(str_eq(x->dev_arena, y->dev_arena), "dev_arena");
		DIFF(x->dev_size == y->dev_size, "dev_size");
		DIFF(str_eq(x->host_arena, y->host_arena), "host_arena");
		DIFF(x->host_size == y->host_size, "host_size");
		DIFF(x->adopted == y->adopted, "adopted");
		DIFF(x->resident_len == y->resident_len, "resident_len");
		DIFF(x->n_sec == y->n_sec, "n_sec");
		DIFF(ARR_EQ(x->n_sec, x->sec_off, y->sec_off), "sec_off");
		DIFF(x->n_view == y->n_view, "n_view");
		DIFF(ARR_EQ(x->n_view, x->view_off, y->view_off), "view_off");
		DIFF(x->dev_kind == y->dev_kind, "dev_kind");
		DIFF(x->dev_device == y->dev_device, "dev_device");
		DIFF(!memcmp(x->dev_handle, y->dev_handle, sizeof x->dev_handle),
		     "dev_handle");
		break;
	}
	case PROTO_PLAN: {
		const proto_plan *x = &a->u.plan, *y = &b->u.plan;
		DIFF(str_eq(x->session, y->session), "plan.session");
		DIFF(x->max_tokens == y->max_tokens, "plan.max_tokens");
		DIFF(x->flags == y->flags, "plan.flags");
		DIFF(x->n_ids == y->n_ids, "plan.n_ids");
		DIFF(ARR_EQ(x->n_ids, x->ids, y->ids), "plan.ids");
		DIFF(x->salt == y->salt, "plan.salt");
		DIFF(x->user_at == y->user_at, "plan.user_at");
		break;
	}
	case PROTO_PLAN_OK: {
		const proto_plan_ok *x = &a->u.plan_ok, *y = &b->u.plan_ok;
		DIFF(x->start == y->start, "start");
		DIFF(x->cached == y->cached, "cached");
		DIFF(x->taint == y->taint, "taint");
		DIFF(x->tier == y->tier, "tier");
		DIFF(x->mem_held == y->mem_held && x->mem_ceiling == y->mem_ceiling &&
			 x->mem_shed == y->mem_shed,
		     "plan_ok.mem");
		DIFF(x->n_slots == y->n_slots, "n_slots");
		for (uint32_t i = 0; i < x->n_slots; i++) {
			DIFF(x->slots[i].line == y->slots[i].line, "slot.line");
			DIFF(x->slots[i].offset == y->slots[i].offset,
			     "slot.offset");
		}
		break;
	}
	case PROTO_COMMIT: {
		const proto_commit *x = &a->u.commit, *y = &b->u.commit;
		DIFF(x->n_filled == y->n_filled, "commit.n_filled");
		DIFF(x->n_ids == y->n_ids, "commit.n_ids");
		DIFF(ARR_EQ(x->n_ids, x->ids, y->ids), "commit.ids");
		break;
	}
	case PROTO_ABORT:
		DIFF(a->u.abort_.n_filled == b->u.abort_.n_filled, "n_filled");
		DIFF(a->u.abort_.valid == b->u.abort_.valid, "abort.valid");
		break;
	case PROTO_GENERATE: {
		const proto_generate *x = &a->u.gen, *y = &b->u.gen;
		DIFF(str_eq(x->session, y->session), "gen.session");
		DIFF(x->max_tokens == y->max_tokens, "gen.max_tokens");
		DIFF(!memcmp(&x->temperature, &y->temperature, 4), "temp");
		DIFF(!memcmp(&x->top_p, &y->top_p, 4), "top_p");
		DIFF(!memcmp(&x->min_p, &y->min_p, 4), "min_p");
		DIFF(x->top_k == y->top_k, "top_k");
		DIFF(x->seed == y->seed, "seed");
		DIFF(x->flags == y->flags, "gen.flags");
		DIFF(x->n_ids == y->n_ids, "gen.n_ids");
		DIFF(ARR_EQ(x->n_ids, x->ids, y->ids), "gen.ids");
		DIFF(x->n_stop == y->n_stop, "gen.n_stop");
		DIFF(ARR_EQ(x->n_stop, x->stop_ids, y->stop_ids), "stop_ids");
		DIFF(x->salt == y->salt, "gen.salt");
		DIFF(x->user_at == y->user_at, "gen.user_at");
		DIFF(x->top_logprobs == y->top_logprobs, "gen.top_logprobs");
		break;
	}
	case PROTO_STEP:
		DIFF(a->u.step.n == b->u.step.n, "step.n");
		for (uint32_t i = 0; i < a->u.step.n; i++) {
			const proto_step_entry *x = &a->u.step.e[i],
					       *y = &b->u.step.e[i];
			DIFF(x->req == y->req, "step.req");
			DIFF(x->token == y->token, "step.token");
			DIFF(x->finish == y->finish, "step.finish");
			DIFF(!memcmp(&x->logprob, &y->logprob, 4), "step.logprob");
			DIFF(x->n_top == y->n_top, "step.n_top");
			DIFF(!memcmp(x->top_id, y->top_id, x->n_top * 4) &&
				 !memcmp(x->top_lp, y->top_lp, x->n_top * 4),
			     "step.top");
		}
		break;
	case PROTO_DONE: {
		const proto_done *x = &a->u.done, *y = &b->u.done;
		DIFF(x->finish == y->finish, "done.finish");
		DIFF(x->code == y->code, "done.code");
		DIFF(x->tier == y->tier, "done.tier");
		DIFF(x->prompt_tokens == y->prompt_tokens, "prompt_tokens");
		DIFF(x->cached_tokens == y->cached_tokens, "cached_tokens");
		DIFF(x->completion_tokens == y->completion_tokens,
		     "completion_tokens");
		DIFF(x->prefill_us == y->prefill_us, "prefill_us");
		DIFF(x->decode_us == y->decode_us, "decode_us");
		DIFF(x->mem_held == y->mem_held && x->mem_ceiling == y->mem_ceiling &&
			 x->mem_shed == y->mem_shed,
		     "done.mem");
		DIFF(str_eq(x->msg, y->msg), "done.msg");
		break;
	}
	case PROTO_CANCEL:
		DIFF(a->u.cancel.target == b->u.cancel.target, "target");
		break;
	case PROTO_PROGRESS:
		DIFF(a->u.progress.done == b->u.progress.done &&
			 a->u.progress.total == b->u.progress.total &&
			 a->u.progress.start == b->u.progress.start &&
			 a->u.progress.tokens_per_s ==
			     b->u.progress.tokens_per_s &&
			 a->u.progress.eta_ms == b->u.progress.eta_ms,
		     "progress");
		break;
	case PROTO_CREDIT:
		DIFF(a->u.credit.n == b->u.credit.n, "credit.n");
		break;
	case PROTO_STATS_OK:
		DIFF(str_eq(a->u.text.text, b->u.text.text), "text");
		break;
	case PROTO_CLEAR:
		DIFF(str_eq(a->u.clear.tier, b->u.clear.tier), "clear.tier");
		break;
	case PROTO_PEEK: {
		const proto_peek *x = &a->u.peek, *y = &b->u.peek;
		DIFF(str_eq(x->session, y->session), "peek.session");
		DIFF(x->n_ids == y->n_ids, "peek.n_ids");
		DIFF(ARR_EQ(x->n_ids, x->ids, y->ids), "peek.ids");
		DIFF(x->salt == y->salt, "peek.salt");
		break;
	}
	case PROTO_PEEK_OK: {
		const proto_peek_ok *x = &a->u.peek_ok, *y = &b->u.peek_ok;
		DIFF(x->tier == y->tier, "peek_ok.tier");
		DIFF(x->cached == y->cached, "peek_ok.cached");
		DIFF(x->tokens == y->tokens, "peek_ok.tokens");
		DIFF(x->taint == y->taint, "peek_ok.taint");
		DIFF(x->restore_bytes == y->restore_bytes, "restore_bytes");
		DIFF(x->read_us == y->read_us, "peek_ok.read_us");
		break;
	}
	}
	return NULL;
}

/* ---- a raw little-endian writer, for hand-built wire bytes ---- */

typedef struct raw {
	uint8_t p[1024];
	size_t n;
} raw;

static inline void raw_le(raw *r, uint64_t v, int bytes)
{
	for (int i = 0; i < bytes; i++)
		r->p[r->n++] = (uint8_t)(v >> (8 * i));
}

/* The header of a message whose payload follows; raw_end sets length. */
static inline void raw_hdr(raw *r, uint16_t type, uint64_t req)
{
	r->n = 0;
	raw_le(r, PROTO_MAGIC, 4);
	raw_le(r, PROTO_VERSION, 2);
	raw_le(r, type, 2);
	raw_le(r, 0, 4);
	raw_le(r, 0, 4);
	raw_le(r, req, 8);
}

static inline void raw_end(raw *r)
{
	uint32_t n = (uint32_t)(r->n - PROTO_HDR_SIZE);
	for (int i = 0; i < 4; i++)
		r->p[8 + i] = (uint8_t)(n >> (8 * i));
}

#endif
