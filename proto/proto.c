/* proto.c: the wire encoding of proto.h's messages.
 *
 * A bounds-checked writer over a moor_buf (common/buf.h) and a bounds-checked
 * reader over the received bytes, both with a sticky error, and one
 * encode/decode/fini triple per message type in a table indexed by type. Every
 * field goes on the wire in its struct's order, little-endian, built with
 * shifts so the encoding does not depend on the host's byte order.
 *
 * Decoding never trusts a count: an array's count is checked against its
 * PROTO_MAX_* limit and against the bytes left in the payload (count times
 * the smallest wire size of an element) before anything is allocated, so a
 * hostile count costs nothing. Strings are checked against their limit and
 * may not contain a NUL byte (the wire has none, a C string cannot hold
 * one); this also makes the encoding canonical: re-encoding a decoded
 * message gives back the same bytes.
 *
 * Failure: a decode that fails frees what it allocated itself and leaves the
 * union zeroed; out->h keeps the header as read (when 24 bytes were there),
 * so a caller can answer with the same req. proto_msg_fini on it is then a
 * harmless no-op.
 */
#include "proto.h"

#include "moor.h"

#include <stdlib.h>
#include <string.h>

_Static_assert(sizeof(proto_hdr) == PROTO_HDR_SIZE,
	       "proto_hdr is the 24-byte wire header");
_Static_assert(4 + 2 + 2 + 4 + 4 + 8 == PROTO_HDR_SIZE,
	       "header fields: magic, version, type, length, flags, req");
_Static_assert(PROTO_MAX_STR <= UINT16_MAX, "string lengths are u16");
_Static_assert(PROTO_TYPE_MAX <= UINT16_MAX, "types are u16");

/* Least wire bytes of one array element: what the count is checked against
 * before allocating. Names count as their length prefix only. */
#define SECTION_WIRE (2 + 4 + 4 + 4 + 4 * 8 + 8)
#define VIEW_WIRE (2 + 4 + 4 + 4 + 4 * 8 + 4 + 8)
#define SLOT_WIRE (8 + 8)
#define STEP_WIRE (8 + 4 + 4 + 4 + 4) /* without the top list */
#define MAX_NDIM 4 /* dims[4] of sections and views */

/* ---- writer ---- */

static void wr_fail(moor_buf *b, int err)
{
	if (!b->err)
		b->err = err;
}

/* n more bytes at the end of b, or NULL (and b->err set). The buffer never
 * grows past the largest message, so an encode over the limit fails before
 * it allocates much. */
static uint8_t *wr_room(moor_buf *b, size_t n)
{
	if (b->err)
		return NULL;
	if (n > (size_t)PROTO_HDR_SIZE + PROTO_MAX_PAYLOAD - b->len) {
		wr_fail(b, MOOR_ERANGE);
		return NULL;
	}
	return (uint8_t *)moor_buf_room(b, n);
}

static void put_u8(moor_buf *b, uint8_t v)
{
	uint8_t *q = wr_room(b, 1);
	if (q)
		q[0] = v;
}

static void put_u16(moor_buf *b, uint16_t v)
{
	uint8_t *q = wr_room(b, 2);
	if (!q)
		return;
	q[0] = (uint8_t)v;
	q[1] = (uint8_t)(v >> 8);
}

static void put_u32(moor_buf *b, uint32_t v)
{
	uint8_t *q = wr_room(b, 4);
	if (!q)
		return;
	for (int i = 0; i < 4; i++)
		q[i] = (uint8_t)(v >> (8 * i));
}

static void put_u64(moor_buf *b, uint64_t v)
{
	uint8_t *q = wr_room(b, 8);
	if (!q)
		return;
	for (int i = 0; i < 8; i++)
		q[i] = (uint8_t)(v >> (8 * i));
}

static void put_i32(moor_buf *b, int32_t v)
{
	put_u32(b, (uint32_t)v);
}

static void put_i64(moor_buf *b, int64_t v)
{
	put_u64(b, (uint64_t)v);
}

static void put_f32(moor_buf *b, float v)
{
	uint32_t u;
	memcpy(&u, &v, 4);
	put_u32(b, u);
}

static void put_bytes(moor_buf *b, const void *p, size_t n)
{
	uint8_t *q = wr_room(b, n);
	if (q && n)
		memcpy(q, p, n);
}

/* A heap string: u16 length + bytes. NULL encodes as the empty string. */
static void put_str(moor_buf *b, const char *s)
{
	size_t n = s ? strnlen(s, PROTO_MAX_STR + 1) : 0;
	if (n > PROTO_MAX_STR) {
		wr_fail(b, MOOR_ERANGE);
		return;
	}
	put_u16(b, (uint16_t)n);
	put_bytes(b, s, n);
}

/* A fixed-size name: must be NUL-terminated within PROTO_NAME_MAX. */
static void put_name(moor_buf *b, const char name[PROTO_NAME_MAX])
{
	size_t n = strnlen(name, PROTO_NAME_MAX);
	if (n >= PROTO_NAME_MAX) {
		wr_fail(b, MOOR_ERANGE);
		return;
	}
	put_u16(b, (uint16_t)n);
	put_bytes(b, name, n);
}

/* An array's count. Returns whether the elements should follow. */
static int put_count(moor_buf *b, uint32_t n, uint32_t limit, const void *p)
{
	if (n > limit) {
		wr_fail(b, MOOR_ERANGE);
		return 0;
	}
	if (n && !p) {
		wr_fail(b, -EINVAL); /* a count without its array: a bug */
		return 0;
	}
	put_u32(b, n);
	return !b->err;
}

static void put_ndim(moor_buf *b, uint32_t ndim)
{
	if (ndim > MAX_NDIM)
		wr_fail(b, MOOR_ERANGE);
	put_u32(b, ndim);
}

static void put_i32s(moor_buf *b, uint32_t n, uint32_t limit, const int32_t *v)
{
	if (!put_count(b, n, limit, v))
		return;
	for (uint32_t i = 0; i < n && !b->err; i++)
		put_i32(b, v[i]);
}

static void put_u64s(moor_buf *b, uint32_t n, uint32_t limit, const uint64_t *v)
{
	if (!put_count(b, n, limit, v))
		return;
	for (uint32_t i = 0; i < n && !b->err; i++)
		put_u64(b, v[i]);
}

/* ---- reader ---- */

typedef struct rd {
	const uint8_t *p;
	size_t left;
	int err; /* sticky: MOOR_EFORMAT or -ENOMEM */
} rd;

static void rd_fail(rd *r, int err)
{
	if (!r->err)
		r->err = err;
}

static const uint8_t *rd_take(rd *r, size_t n)
{
	if (r->err)
		return NULL;
	if (n > r->left) {
		rd_fail(r, MOOR_EFORMAT);
		return NULL;
	}
	const uint8_t *q = r->p;
	r->p += n;
	r->left -= n;
	return q;
}

static uint8_t get_u8(rd *r)
{
	const uint8_t *q = rd_take(r, 1);
	return q ? q[0] : 0;
}

static uint16_t get_u16(rd *r)
{
	const uint8_t *q = rd_take(r, 2);
	return q ? (uint16_t)(q[0] | (uint16_t)q[1] << 8) : 0;
}

static uint32_t get_u32(rd *r)
{
	const uint8_t *q = rd_take(r, 4);
	uint32_t v = 0;
	if (q)
		for (int i = 0; i < 4; i++)
			v |= (uint32_t)q[i] << (8 * i);
	return v;
}

static uint64_t get_u64(rd *r)
{
	const uint8_t *q = rd_take(r, 8);
	uint64_t v = 0;
	if (q)
		for (int i = 0; i < 8; i++)
			v |= (uint64_t)q[i] << (8 * i);
	return v;
}

static int32_t get_i32(rd *r)
{
	return (int32_t)get_u32(r);
}

static int64_t get_i64(rd *r)
{
	return (int64_t)get_u64(r);
}

static float get_f32(rd *r)
{
	uint32_t u = get_u32(r);
	float f;
	memcpy(&f, &u, 4);
	return f;
}

static void get_bytes(rd *r, void *out, size_t n)
{
	const uint8_t *q = rd_take(r, n);
	if (q)
		memcpy(out, q, n);
}

/* The bytes of a string of at most max bytes, without NULs; NULL on error. */
static const uint8_t *get_strbytes(rd *r, size_t max, uint16_t *n)
{
	*n = get_u16(r);
	if (r->err)
		return NULL;
	if (*n > max) {
		rd_fail(r, MOOR_EFORMAT);
		return NULL;
	}
	const uint8_t *q = rd_take(r, *n);
	if (q && *n && memchr(q, 0, *n)) {
		rd_fail(r, MOOR_EFORMAT);
		return NULL;
	}
	return q;
}

/* A heap string, always allocated (an empty one too) and NUL-terminated. */
static void get_str(rd *r, char **out)
{
	uint16_t n;
	const uint8_t *q = get_strbytes(r, PROTO_MAX_STR, &n);
	if (!q)
		return;
	char *s = malloc((size_t)n + 1);
	if (!s) {
		rd_fail(r, -ENOMEM);
		return;
	}
	memcpy(s, q, n);
	s[n] = 0;
	*out = s;
}

static void get_name(rd *r, char out[PROTO_NAME_MAX])
{
	uint16_t n;
	const uint8_t *q = get_strbytes(r, PROTO_NAME_MAX - 1, &n);
	if (!q)
		return;
	memcpy(out, q, n);
	out[n] = 0;
}

/* An array's count and its zeroed storage of count * mem bytes. The count
 * is checked against limit and against the bytes left (wire bytes at least
 * per element) before the allocation. Returns NULL for 0 elements. */
static void *get_array(rd *r, uint32_t *count, uint32_t limit, size_t wire,
		       size_t mem)
{
	uint32_t n = get_u32(r);
	if (r->err)
		return NULL;
	if (n > limit || (uint64_t)n * wire > r->left) {
		rd_fail(r, MOOR_EFORMAT);
		return NULL;
	}
	*count = n;
	if (!n)
		return NULL;
	void *p = calloc(n, mem);
	if (!p)
		rd_fail(r, -ENOMEM);
	return p;
}

static uint32_t get_ndim(rd *r)
{
	uint32_t ndim = get_u32(r);
	if (ndim > MAX_NDIM)
		rd_fail(r, MOOR_EFORMAT);
	return ndim;
}

static int32_t *get_i32s(rd *r, uint32_t *count, uint32_t limit)
{
	int32_t *v = get_array(r, count, limit, 4, sizeof *v);
	if (v)
		for (uint32_t i = 0; i < *count; i++)
			v[i] = get_i32(r);
	return v;
}

static uint64_t *get_u64s(rd *r, uint32_t *count, uint32_t limit)
{
	uint64_t *v = get_array(r, count, limit, 8, sizeof *v);
	if (v)
		for (uint32_t i = 0; i < *count; i++)
			v[i] = get_u64(r);
	return v;
}

/* ---- payloads, one triple per type ---- */

static void enc_error(moor_buf *b, const proto_msg *m)
{
	const proto_error *e = &m->u.error;
	put_i32(b, e->code);
	put_str(b, e->msg);
}

static void dec_error(rd *r, proto_msg *m)
{
	proto_error *e = &m->u.error;
	e->code = get_i32(r);
	get_str(r, &e->msg);
}

static void fini_error(proto_msg *m)
{
	free(m->u.error.msg);
}

static void enc_section(moor_buf *b, const proto_section *s)
{
	put_name(b, s->name);
	put_i32(b, s->layer);
	put_u32(b, s->dtype);
	put_ndim(b, s->ndim);
	for (int i = 0; i < 4; i++)
		put_i64(b, s->dims[i]);
	put_u64(b, s->bytes);
}

static void dec_section(rd *r, proto_section *s)
{
	get_name(r, s->name);
	s->layer = get_i32(r);
	s->dtype = get_u32(r);
	s->ndim = get_ndim(r);
	for (int i = 0; i < 4; i++)
		s->dims[i] = get_i64(r);
	s->bytes = get_u64(r);
}

static void enc_view(moor_buf *b, const proto_view *v)
{
	put_name(b, v->name);
	put_i32(b, v->layer);
	put_u32(b, v->dtype);
	put_ndim(b, v->ndim);
	for (int i = 0; i < 4; i++)
		put_i64(b, v->dims[i]);
	put_u32(b, v->token_axis);
	put_u64(b, v->row_bytes);
}

static void dec_view(rd *r, proto_view *v)
{
	get_name(r, v->name);
	v->layer = get_i32(r);
	v->dtype = get_u32(r);
	v->ndim = get_ndim(r);
	for (int i = 0; i < 4; i++)
		v->dims[i] = get_i64(r);
	v->token_axis = get_u32(r);
	v->row_bytes = get_u64(r);
}

static void enc_hello(moor_buf *b, const proto_msg *m)
{
	const proto_hello *h = &m->u.hello;
	put_bytes(b, h->fingerprint, sizeof h->fingerprint);
	put_u32(b, h->pid);
	put_u32(b, h->grid);
	put_u64(b, h->window);
	put_u64(b, h->workspace_bytes);
	if (put_count(b, h->n_sections, PROTO_MAX_SECTIONS, h->sec))
		for (uint32_t i = 0; i < h->n_sections && !b->err; i++)
			enc_section(b, &h->sec[i]);
	if (put_count(b, h->n_views, PROTO_MAX_VIEWS, h->view))
		for (uint32_t i = 0; i < h->n_views && !b->err; i++)
			enc_view(b, &h->view[i]);
}

static void dec_hello(rd *r, proto_msg *m)
{
	proto_hello *h = &m->u.hello;
	get_bytes(r, h->fingerprint, sizeof h->fingerprint);
	h->pid = get_u32(r);
	h->grid = get_u32(r);
	h->window = get_u64(r);
	h->workspace_bytes = get_u64(r);
	h->sec = get_array(r, &h->n_sections, PROTO_MAX_SECTIONS, SECTION_WIRE,
			   sizeof *h->sec);
	for (uint32_t i = 0; h->sec && i < h->n_sections && !r->err; i++)
		dec_section(r, &h->sec[i]);
	h->view = get_array(r, &h->n_views, PROTO_MAX_VIEWS, VIEW_WIRE,
			    sizeof *h->view);
	for (uint32_t i = 0; h->view && i < h->n_views && !r->err; i++)
		dec_view(r, &h->view[i]);
}

static void fini_hello(proto_msg *m)
{
	free(m->u.hello.sec);
	free(m->u.hello.view);
}

static void enc_hello_ok(moor_buf *b, const proto_msg *m)
{
	const proto_hello_ok *h = &m->u.hello_ok;
	put_str(b, h->dev_arena);
	put_u64(b, h->dev_size);
	put_str(b, h->host_arena);
	put_u64(b, h->host_size);
	put_u8(b, h->adopted);
	put_u64(b, h->resident_len);
	put_u64s(b, h->n_sec, PROTO_MAX_SECTIONS, h->sec_off);
	put_u64s(b, h->n_view, PROTO_MAX_VIEWS, h->view_off);
	put_u32(b, h->dev_kind);
	put_i32(b, h->dev_device);
	put_bytes(b, h->dev_handle, sizeof h->dev_handle);
}

static void dec_hello_ok(rd *r, proto_msg *m)
{
	proto_hello_ok *h = &m->u.hello_ok;
	get_str(r, &h->dev_arena);
	h->dev_size = get_u64(r);
	get_str(r, &h->host_arena);
	h->host_size = get_u64(r);
	h->adopted = get_u8(r);
	h->resident_len = get_u64(r);
	h->sec_off = get_u64s(r, &h->n_sec, PROTO_MAX_SECTIONS);
	h->view_off = get_u64s(r, &h->n_view, PROTO_MAX_VIEWS);
	h->dev_kind = get_u32(r);
	h->dev_device = get_i32(r);
	/* an unknown dev_kind decodes: the engine refuses it, naming it */
	get_bytes(r, h->dev_handle, sizeof h->dev_handle);
}

static void fini_hello_ok(proto_msg *m)
{
	proto_hello_ok *h = &m->u.hello_ok;
	free(h->dev_arena);
	free(h->host_arena);
	free(h->sec_off);
	free(h->view_off);
}

static void enc_plan(moor_buf *b, const proto_msg *m)
{
	const proto_plan *p = &m->u.plan;
	put_str(b, p->session);
	put_u32(b, p->max_tokens);
	put_u32(b, p->flags);
	put_i32s(b, p->n_ids, PROTO_MAX_IDS, p->ids);
	put_u64(b, p->salt);
	put_u64(b, p->user_at);
}

static void dec_plan(rd *r, proto_msg *m)
{
	proto_plan *p = &m->u.plan;
	get_str(r, &p->session);
	p->max_tokens = get_u32(r);
	p->flags = get_u32(r);
	p->ids = get_i32s(r, &p->n_ids, PROTO_MAX_IDS);
	p->salt = get_u64(r);
	p->user_at = get_u64(r);
}

static void fini_plan(proto_msg *m)
{
	free(m->u.plan.session);
	free(m->u.plan.ids);
}

static void enc_plan_ok(moor_buf *b, const proto_msg *m)
{
	const proto_plan_ok *p = &m->u.plan_ok;
	put_u64(b, p->start);
	put_u64(b, p->cached);
	put_u64(b, p->taint);
	put_u32(b, p->tier);
	put_u64(b, p->mem_held);
	put_u64(b, p->mem_ceiling);
	put_u32(b, p->mem_shed);
	if (put_count(b, p->n_slots, PROTO_MAX_SLOTS, p->slots))
		for (uint32_t i = 0; i < p->n_slots && !b->err; i++) {
			put_u64(b, p->slots[i].line);
			put_u64(b, p->slots[i].offset);
		}
}

static void dec_plan_ok(rd *r, proto_msg *m)
{
	proto_plan_ok *p = &m->u.plan_ok;
	p->start = get_u64(r);
	p->cached = get_u64(r);
	p->taint = get_u64(r);
	p->tier = get_u32(r);
	p->mem_held = get_u64(r);
	p->mem_ceiling = get_u64(r);
	p->mem_shed = get_u32(r);
	p->slots = get_array(r, &p->n_slots, PROTO_MAX_SLOTS, SLOT_WIRE,
			     sizeof *p->slots);
	for (uint32_t i = 0; p->slots && i < p->n_slots; i++) {
		p->slots[i].line = get_u64(r);
		p->slots[i].offset = get_u64(r);
	}
}

static void fini_plan_ok(proto_msg *m)
{
	free(m->u.plan_ok.slots);
}

#define MARK_WIRE 20

static void put_marks(moor_buf *b, uint32_t n, const proto_mark *mk)
{
	if (put_count(b, n, PROTO_MAX_MARKS, mk))
		for (uint32_t i = 0; i < n && !b->err; i++) {
			put_u64(b, mk[i].start);
			put_u64(b, mk[i].len);
			put_u32(b, mk[i].kind);
		}
}

static proto_mark *get_marks(rd *r, uint32_t *n)
{
	proto_mark *mk =
	    get_array(r, n, PROTO_MAX_MARKS, MARK_WIRE, sizeof *mk);
	for (uint32_t i = 0; mk && i < *n; i++) {
		mk[i].start = get_u64(r);
		mk[i].len = get_u64(r);
		mk[i].kind = get_u32(r);
		if (!r->err && (mk[i].kind < PROTO_MARK_GEN ||
				mk[i].kind > PROTO_MARK_HIDDEN ||
				mk[i].len > UINT64_MAX - mk[i].start))
			rd_fail(r, MOOR_EFORMAT);
	}
	return mk;
}

static void enc_commit(moor_buf *b, const proto_msg *m)
{
	const proto_commit *c = &m->u.commit;
	put_u32(b, c->n_filled);
	put_i32s(b, c->n_ids, PROTO_MAX_IDS, c->ids);
	put_marks(b, c->n_marks, c->marks);
}

static void dec_commit(rd *r, proto_msg *m)
{
	proto_commit *c = &m->u.commit;
	c->n_filled = get_u32(r);
	c->ids = get_i32s(r, &c->n_ids, PROTO_MAX_IDS);
	c->marks = get_marks(r, &c->n_marks);
}

static void fini_commit(proto_msg *m)
{
	free(m->u.commit.ids);
	free(m->u.commit.marks);
}

static void enc_abort(moor_buf *b, const proto_msg *m)
{
	put_u32(b, m->u.abort_.n_filled);
	put_u64(b, m->u.abort_.valid);
}

static void dec_abort(rd *r, proto_msg *m)
{
	m->u.abort_.n_filled = get_u32(r);
	m->u.abort_.valid = get_u64(r);
}

static void enc_generate(moor_buf *b, const proto_msg *m)
{
	const proto_generate *g = &m->u.gen;
	put_str(b, g->session);
	put_u32(b, g->max_tokens);
	put_f32(b, g->temperature);
	put_f32(b, g->top_p);
	put_f32(b, g->min_p);
	put_i32(b, g->top_k);
	put_u64(b, g->seed);
	put_u32(b, g->flags);
	put_i32s(b, g->n_ids, PROTO_MAX_IDS, g->ids);
	put_i32s(b, g->n_stop, PROTO_MAX_IDS, g->stop_ids);
	put_u32(b, g->budget);
	put_i32(b, g->think_close);
	put_u32(b, g->n_hidden);
	put_i32s(b, g->n_close, PROTO_MAX_IDS, g->close_ids);
	put_u64(b, g->salt);
	put_u64(b, g->user_at);
	put_u32(b, g->top_logprobs);
	if (g->n_hidden > g->n_close || g->top_logprobs > PROTO_MAX_TOP)
		wr_fail(b, MOOR_ERANGE);
}

static void dec_generate(rd *r, proto_msg *m)
{
	proto_generate *g = &m->u.gen;
	get_str(r, &g->session);
	g->max_tokens = get_u32(r);
	g->temperature = get_f32(r);
	g->top_p = get_f32(r);
	g->min_p = get_f32(r);
	g->top_k = get_i32(r);
	g->seed = get_u64(r);
	g->flags = get_u32(r);
	g->ids = get_i32s(r, &g->n_ids, PROTO_MAX_IDS);
	g->stop_ids = get_i32s(r, &g->n_stop, PROTO_MAX_IDS);
	g->budget = get_u32(r);
	g->think_close = get_i32(r);
	g->n_hidden = get_u32(r);
	g->close_ids = get_i32s(r, &g->n_close, PROTO_MAX_IDS);
	g->salt = get_u64(r);
	g->user_at = get_u64(r);
	g->top_logprobs = get_u32(r);
	if (!r->err &&
	    (g->n_hidden > g->n_close || g->top_logprobs > PROTO_MAX_TOP))
		rd_fail(r, MOOR_EFORMAT);
}

static void fini_generate(proto_msg *m)
{
	free(m->u.gen.session);
	free(m->u.gen.ids);
	free(m->u.gen.stop_ids);
	free(m->u.gen.close_ids);
}

/* STEP has no PROTO_MAX_* of its own: the payload limit bounds it. */
static void enc_step(moor_buf *b, const proto_msg *m)
{
	const proto_step *s = &m->u.step;
	if (put_count(b, s->n, UINT32_MAX, s->e))
		for (uint32_t i = 0; i < s->n && !b->err; i++) {
			put_u64(b, s->e[i].req);
			put_i32(b, s->e[i].token);
			put_u32(b, s->e[i].finish);
			put_f32(b, s->e[i].logprob);
			uint32_t k = s->e[i].n_top;
			if (k > PROTO_MAX_TOP) {
				wr_fail(b, MOOR_ERANGE);
				break;
			}
			put_u32(b, k);
			for (uint32_t t = 0; t < k; t++) {
				put_i32(b, s->e[i].top_id[t]);
				put_f32(b, s->e[i].top_lp[t]);
			}
		}
}

static void dec_step(rd *r, proto_msg *m)
{
	proto_step *s = &m->u.step;
	s->e = get_array(r, &s->n, UINT32_MAX, STEP_WIRE, sizeof *s->e);
	for (uint32_t i = 0; s->e && i < s->n; i++) {
		s->e[i].req = get_u64(r);
		s->e[i].token = get_i32(r);
		s->e[i].finish = get_u32(r);
		s->e[i].logprob = get_f32(r);
		uint32_t k = get_u32(r);
		if (k > PROTO_MAX_TOP) {
			rd_fail(r, MOOR_EFORMAT);
			break;
		}
		s->e[i].n_top = k;
		for (uint32_t t = 0; t < k && !r->err; t++) {
			s->e[i].top_id[t] = get_i32(r);
			s->e[i].top_lp[t] = get_f32(r);
		}
	}
}

static void fini_step(proto_msg *m)
{
	free(m->u.step.e);
}

static void enc_done(moor_buf *b, const proto_msg *m)
{
	const proto_done *d = &m->u.done;
	put_u32(b, d->finish);
	put_i32(b, d->code);
	put_u32(b, d->tier);
	put_u64(b, d->prompt_tokens);
	put_u64(b, d->cached_tokens);
	put_u64(b, d->completion_tokens);
	put_u64(b, d->prefill_us);
	put_u64(b, d->decode_us);
	put_u64(b, d->mem_held);
	put_u64(b, d->mem_ceiling);
	put_u32(b, d->mem_shed);
	put_str(b, d->msg);
}

static void dec_done(rd *r, proto_msg *m)
{
	proto_done *d = &m->u.done;
	d->finish = get_u32(r);
	d->code = get_i32(r);
	d->tier = get_u32(r);
	d->prompt_tokens = get_u64(r);
	d->cached_tokens = get_u64(r);
	d->completion_tokens = get_u64(r);
	d->prefill_us = get_u64(r);
	d->decode_us = get_u64(r);
	d->mem_held = get_u64(r);
	d->mem_ceiling = get_u64(r);
	d->mem_shed = get_u32(r);
	get_str(r, &d->msg);
}

static void fini_done(proto_msg *m)
{
	free(m->u.done.msg);
}

static void enc_cancel(moor_buf *b, const proto_msg *m)
{
	put_u64(b, m->u.cancel.target);
}

static void dec_cancel(rd *r, proto_msg *m)
{
	m->u.cancel.target = get_u64(r);
}

static void enc_progress(moor_buf *b, const proto_msg *m)
{
	const proto_progress *p = &m->u.progress;
	if (p->done > p->total) {
		wr_fail(b, MOOR_ERANGE);
		return;
	}
	put_u64(b, p->done);
	put_u64(b, p->total);
	put_u64(b, p->start);
	put_u32(b, p->tokens_per_s);
	put_u32(b, p->eta_ms);
}

static void dec_progress(rd *r, proto_msg *m)
{
	proto_progress *p = &m->u.progress;
	p->done = get_u64(r);
	p->total = get_u64(r);
	p->start = get_u64(r);
	p->tokens_per_s = get_u32(r);
	p->eta_ms = get_u32(r);
	if (p->done > p->total)
		rd_fail(r, MOOR_EFORMAT);
}

static void enc_credit(moor_buf *b, const proto_msg *m)
{
	if (m->u.credit.n == 0) {
		wr_fail(b, MOOR_ERANGE);
		return;
	}
	put_u32(b, m->u.credit.n);
}

static void dec_credit(rd *r, proto_msg *m)
{
	m->u.credit.n = get_u32(r);
	if (m->u.credit.n == 0)
		rd_fail(r, MOOR_EFORMAT);
}

/* A long text (STATS_OK's JSON): u32 length + bytes, at most
 * PROTO_MAX_TEXT, no NUL inside. */
static void enc_text(moor_buf *b, const proto_msg *m)
{
	const char *s = m->u.text.text;
	size_t n = s ? strnlen(s, PROTO_MAX_TEXT + 1) : 0;
	if (n > PROTO_MAX_TEXT) {
		wr_fail(b, MOOR_ERANGE);
		return;
	}
	put_u32(b, (uint32_t)n);
	put_bytes(b, s, n);
}

static void dec_text(rd *r, proto_msg *m)
{
	uint32_t n = get_u32(r);
	if (r->err)
		return;
	if (n > PROTO_MAX_TEXT) {
		rd_fail(r, MOOR_EFORMAT);
		return;
	}
	const uint8_t *q = rd_take(r, n);
	if (!q && n)
		return;
	if (n && memchr(q, 0, n)) {
		rd_fail(r, MOOR_EFORMAT);
		return;
	}
	char *t = malloc((size_t)n + 1);
	if (!t) {
		rd_fail(r, -ENOMEM);
		return;
	}
	if (n)
		memcpy(t, q, n);
	t[n] = 0;
	m->u.text.text = t;
}

static void fini_text(proto_msg *m)
{
	free(m->u.text.text);
}

int proto_clear_tier_ok(const char *t)
{
	static const char *const names[] = {PROTO_CLEAR_TIERS};
	for (size_t i = 0; t && i < sizeof names / sizeof names[0]; i++)
		if (!strcmp(t, names[i]))
			return 1;
	return 0;
}

static void enc_clear(moor_buf *b, const proto_msg *m)
{
	put_str(b, m->u.clear.tier);
}

static void dec_clear(rd *r, proto_msg *m)
{
	get_str(r, &m->u.clear.tier);
}

static void fini_clear(proto_msg *m)
{
	free(m->u.clear.tier);
}

static void enc_peek(moor_buf *b, const proto_msg *m)
{
	const proto_peek *p = &m->u.peek;
	put_str(b, p->session);
	put_i32s(b, p->n_ids, PROTO_MAX_IDS, p->ids);
	put_u64(b, p->salt);
}

static void dec_peek(rd *r, proto_msg *m)
{
	proto_peek *p = &m->u.peek;
	get_str(r, &p->session);
	p->ids = get_i32s(r, &p->n_ids, PROTO_MAX_IDS);
	p->salt = get_u64(r);
}

static void fini_peek(proto_msg *m)
{
	free(m->u.peek.session);
	free(m->u.peek.ids);
}

static void enc_peek_ok(moor_buf *b, const proto_msg *m)
{
	const proto_peek_ok *p = &m->u.peek_ok;
	put_u32(b, p->tier);
	put_u64(b, p->cached);
	put_u64(b, p->tokens);
	put_u64(b, p->taint);
	put_u64(b, p->restore_bytes);
	put_u64(b, p->read_us);
}

static void dec_peek_ok(rd *r, proto_msg *m)
{
	proto_peek_ok *p = &m->u.peek_ok;
	p->tier = get_u32(r);
	p->cached = get_u64(r);
	p->tokens = get_u64(r);
	p->taint = get_u64(r);
	p->restore_bytes = get_u64(r);
	p->read_us = get_u64(r);
}

static void enc_end_get(moor_buf *b, const proto_msg *m)
{
	const proto_end_get *p = &m->u.end_get;
	put_str(b, p->session);
	put_i32s(b, p->n_ids, PROTO_MAX_IDS, p->ids);
	put_u64(b, p->salt);
}

static void dec_end_get(rd *r, proto_msg *m)
{
	proto_end_get *p = &m->u.end_get;
	get_str(r, &p->session);
	p->ids = get_i32s(r, &p->n_ids, PROTO_MAX_IDS);
	p->salt = get_u64(r);
}

static void fini_end_get(proto_msg *m)
{
	free(m->u.end_get.session);
	free(m->u.end_get.ids);
}


static void enc_end_ok(moor_buf *b, const proto_msg *m)
{
	const proto_end_ok *p = &m->u.end_ok;
	put_u32(b, p->tier);
	put_u64(b, p->common);
	put_u64(b, p->end);
	put_i32s(b, p->n_ids, PROTO_MAX_IDS, p->ids);
	put_marks(b, p->n_marks, p->marks);
}

static void dec_end_ok(rd *r, proto_msg *m)
{
	proto_end_ok *p = &m->u.end_ok;
	p->tier = get_u32(r);
	p->common = get_u64(r);
	p->end = get_u64(r);
	p->ids = get_i32s(r, &p->n_ids, PROTO_MAX_IDS);
	p->marks = get_marks(r, &p->n_marks);
	if (!r->err && (p->common > p->end ||
			(p->common < p->end && p->end - p->common != p->n_ids)))
		rd_fail(r, MOOR_EFORMAT);
}

static void fini_end_ok(proto_msg *m)
{
	free(m->u.end_ok.ids);
	free(m->u.end_ok.marks);
}

/* A type's name and payload functions; NULL functions: nothing to do (an
 * empty payload, or no heap members). A NULL name: an unknown type. */
typedef struct proto_kind {
	const char *name;
	void (*enc)(moor_buf *b, const proto_msg *m);
	void (*dec)(rd *r, proto_msg *m);
	void (*fini)(proto_msg *m);
} proto_kind;

static const proto_kind kinds[PROTO_TYPE_MAX] = {
    [PROTO_ERROR] = {"ERROR", enc_error, dec_error, fini_error},
    [PROTO_OK] = {"OK", NULL, NULL, NULL},
    [PROTO_HELLO] = {"HELLO", enc_hello, dec_hello, fini_hello},
    [PROTO_HELLO_OK] = {"HELLO_OK", enc_hello_ok, dec_hello_ok, fini_hello_ok},
    [PROTO_PLAN] = {"PLAN", enc_plan, dec_plan, fini_plan},
    [PROTO_PLAN_OK] = {"PLAN_OK", enc_plan_ok, dec_plan_ok, fini_plan_ok},
    [PROTO_COMMIT] = {"COMMIT", enc_commit, dec_commit, fini_commit},
    [PROTO_ABORT] = {"ABORT", enc_abort, dec_abort, NULL},
    [PROTO_GENERATE] = {"GENERATE", enc_generate, dec_generate, fini_generate},
    [PROTO_STEP] = {"STEP", enc_step, dec_step, fini_step},
    [PROTO_DONE] = {"DONE", enc_done, dec_done, fini_done},
    [PROTO_CANCEL] = {"CANCEL", enc_cancel, dec_cancel, NULL},
    [PROTO_CREDIT] = {"CREDIT", enc_credit, dec_credit, NULL},
    [PROTO_PROGRESS] = {"PROGRESS", enc_progress, dec_progress, NULL},
    [PROTO_STATS] = {"STATS", NULL, NULL, NULL},
    [PROTO_STATS_OK] = {"STATS_OK", enc_text, dec_text, fini_text},
    [PROTO_CLEAR] = {"CLEAR", enc_clear, dec_clear, fini_clear},
    [PROTO_PEEK] = {"PEEK", enc_peek, dec_peek, fini_peek},
    [PROTO_PEEK_OK] = {"PEEK_OK", enc_peek_ok, dec_peek_ok, NULL},
    [PROTO_END_GET] = {"END_GET", enc_end_get, dec_end_get, fini_end_get},
    [PROTO_END_OK] = {"END_OK", enc_end_ok, dec_end_ok, fini_end_ok},
};

static const proto_kind *kind_of(uint16_t type)
{
	if (type >= PROTO_TYPE_MAX || !kinds[type].name)
		return NULL;
	return &kinds[type];
}

/* ---- the API ---- */

int proto_encode(moor_buf *b, const proto_msg *m)
{
	moor_buf_reset(b);
	const proto_kind *k = kind_of(m->h.type);
	if (!k) {
		b->err = MOOR_ERANGE;
		return b->err;
	}
	put_u32(b, PROTO_MAGIC);
	put_u16(b, PROTO_VERSION);
	put_u16(b, m->h.type);
	put_u32(b, 0); /* length, patched below */
	put_u32(b, m->h.flags);
	put_u64(b, m->h.req);
	if (k->enc)
		k->enc(b, m);
	if (b->err) {
		b->len = 0;
		return b->err;
	}
	uint32_t n = (uint32_t)(b->len - PROTO_HDR_SIZE);
	for (int i = 0; i < 4; i++)
		b->p[8 + i] = (char)(uint8_t)(n >> (8 * i));
	return 0;
}

int proto_peek_hdr(const void *buf, size_t len, proto_hdr *out)
{
	memset(out, 0, sizeof *out);
	if (len < PROTO_HDR_SIZE)
		return MOOR_EFORMAT;
	rd r = {buf, PROTO_HDR_SIZE, 0};
	out->magic = get_u32(&r);
	out->version = get_u16(&r);
	out->type = get_u16(&r);
	out->length = get_u32(&r);
	out->flags = get_u32(&r);
	out->req = get_u64(&r);
	if (out->magic != PROTO_MAGIC)
		return MOOR_EFORMAT;
	if (out->version != PROTO_VERSION)
		return MOOR_EVERSION;
	if (out->length != len - PROTO_HDR_SIZE ||
	    out->length > PROTO_MAX_PAYLOAD)
		return MOOR_EFORMAT;
	return 0;
}

int proto_decode(const void *buf, size_t len, proto_msg *out)
{
	memset(out, 0, sizeof *out);
	int rv = proto_peek_hdr(buf, len, &out->h);
	if (rv)
		return rv;
	const proto_kind *k = kind_of(out->h.type);
	if (!k)
		return MOOR_EFORMAT;
	rd r = {(const uint8_t *)buf + PROTO_HDR_SIZE, out->h.length, 0};
	if (k->dec)
		k->dec(&r, out);
	if (!r.err && r.left)
		r.err = MOOR_EFORMAT; /* bytes after the last field */
	if (r.err) {
		if (k->fini)
			k->fini(out);
		memset(&out->u, 0, sizeof out->u);
	}
	return r.err;
}

void proto_msg_fini(proto_msg *m)
{
	if (!m)
		return;
	const proto_kind *k = kind_of(m->h.type);
	if (k && k->fini)
		k->fini(m);
	memset(&m->u, 0, sizeof m->u);
}

const char *proto_type_name(uint16_t type)
{
	const proto_kind *k = kind_of(type);
	return k ? k->name : "unknown";
}

#define TIER_WORDS(id, v, name, source, word) [v] = {name, source, word},
static const proto_tier_words tier_words[PROTO_TIER_COUNT] = {
    PROTO_TIERS(TIER_WORDS)};
#undef TIER_WORDS

const proto_tier_words *proto_tier(uint32_t tier)
{
	static const proto_tier_words unknown = {"unknown", "none", "none"};
	return tier < PROTO_TIER_COUNT ? &tier_words[tier] : &unknown;
}

const char *proto_tier_name(uint32_t tier)
{
	return proto_tier(tier)->name;
}
