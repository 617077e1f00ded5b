/* state.h: test helpers that read a sequence's state back to the host and
 * compare two sequences bit for bit (sections whole, views up to a length). */
#ifndef MOOR_TEST_STATE_H
#define MOOR_TEST_STATE_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "eng.h"
#include "t.h"

/* Host copy of every section and of each view's rows [0, rows). */
typedef struct host_state {
	size_t n;
	unsigned char *bytes;
} host_state;

static inline host_state state_read(const kern_ops *ops, kern_ctx *ctx,
				    const eng_layout *y, const eng_seq *s,
				    int64_t rows)
{
	host_state h = {0};
	h.n = y->section_bytes + y->row_bytes * (size_t)rows;
	h.bytes = malloc(h.n ? h.n : 1);
	REQUIRE(h.bytes, "oom");
	kern_queue *q = ops->queue(ctx, KERN_Q_COMPUTE);
	size_t off = 0;
	for (int i = 0; i < y->n_sections; i++) {
		REQUIRE(ops->download(q, h.bytes + off, s->sec[i],
				      y->sec[i].bytes) == 0,
			"download");
		off += y->sec[i].bytes;
	}
	for (int i = 0; i < y->n_views; i++) {
		size_t n = y->view[i].row_bytes * (size_t)rows;
		REQUIRE(ops->download(q, h.bytes + off, s->view[i], n) == 0,
			"download");
		off += n;
	}
	return h;
}

/* memcmp, naming the first section or view that differs. */
static inline int state_equal(const eng_layout *y, const host_state *a,
			      const host_state *b, int64_t rows,
			      const char *what)
{
	if (a->n != b->n) {
		CHECK(0, "%s: state sizes differ", what);
		return 0;
	}
	size_t off = 0;
	for (int i = 0; i < y->n_sections; i++) {
		if (memcmp(a->bytes + off, b->bytes + off, y->sec[i].bytes)) {
			CHECK(0, "%s: section %s of layer %d differs", what,
			      y->sec[i].name, y->sec[i].layer);
			return 0;
		}
		off += y->sec[i].bytes;
	}
	for (int i = 0; i < y->n_views; i++) {
		size_t rb = y->view[i].row_bytes;
		for (int64_t r = 0; r < rows; r++) {
			if (memcmp(a->bytes + off + rb * r, b->bytes + off + rb * r,
				   rb)) {
				CHECK(0, "%s: view %s of layer %d differs at row %lld",
				      what, y->view[i].name, y->view[i].layer,
				      (long long)r);
				return 0;
			}
		}
		off += rb * rows;
	}
	return 1;
}

static inline void state_free(host_state *h)
{
	free(h->bytes);
	h->bytes = NULL;
}

/* Deterministic ids in [0, V). */
static inline void make_ids(int32_t *ids, int64_t n, int V, uint64_t seed)
{
	uint64_t x = seed * 0x9e3779b97f4a7c15ULL + 1;
	for (int64_t i = 0; i < n; i++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		ids[i] = (int32_t)(x % (uint64_t)V);
	}
}

#endif
