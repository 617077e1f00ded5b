/* test_prefill_split_exact: the grid makes prefill reproducible bit for bit.
 *   - a prompt prefilled in one call equals the same prompt prefilled in
 *     calls split at grid lines: logits of every position, every GDN state
 *     and conv tail, every KV row (memcmp);
 *   - a resume at a grid line from a snapshot of the sections, with the rows
 *     above the line overwritten by another prompt's, equals the cold
 *     prefill (the resident prefix's premise);
 *   - the last-token logits of a LAST prefill equal row n-1 of an ALL one;
 *   - a model whose forwards run 3 chunks at a time (eng_opts.span)
 *     equals the chunk-a-forward model: logits, state and rows, and the
 *     anchor slots at every line, those inside a forward (copied layer by
 *     layer) and those at its end.
 * argv[1]: a model directory; argv[2]: the grid (default 128). */
#include "eng.h"
#include "moor.h"
#include "state.h"
#include "t.h"
#include "tb.h"

int main(int argc, char **argv)
{
	REQUIRE(argc >= 2, "usage: %s MODEL_DIR [GRID]", argv[0]);
	const kern_ops *ops = tb_backend("test_prefill_split_exact");
	int grid = argc > 2 ? atoi(argv[2]) : 128;
	char err[MOOR_ERRLEN] = "";
	kern_config kc = {.threads = 2};
	kern_ctx *ctx;
	REQUIRE(ops->create(&kc, &ctx) == 0, "backend");
	/* a chunk a forward (a device backend's default is 4: D compares) */
	eng_opts o = {.grid = grid, .span = grid, .window = 8 * grid};
	eng_model *m;
	REQUIRE(eng_model_load(argv[1], ops, ctx, &o, &m, err) == 0,
		"load: %s", err);
	const eng_layout *y = eng_model_layout(m);
	int V = eng_model_vocab(m);
	int64_t n = 5 * grid + grid / 2 + 7; /* ends inside a chunk */
	int32_t *ids = malloc(n * sizeof *ids), *other = malloc(n * sizeof *other);
	make_ids(ids, n, V, 1);
	make_ids(other, n, V, 2);
	float *la = malloc((size_t)n * V * 4), *lb = malloc((size_t)n * V * 4),
	      *lc = malloc((size_t)V * 4);
	REQUIRE(ids && other && la && lb && lc, "oom");

	/* A: one call */
	eng_seq a, b;
	REQUIRE(eng_seq_alloc(m, &a) == 0 && eng_seq_alloc(m, &b) == 0, "seq");
	REQUIRE(eng_prefill(m, &a, ids, n, la, ENG_LOGITS_ALL) == 0, "prefill A");
	host_state ha = state_read(ops, ctx, y, &a, n);

	/* B: split at grid lines 2g and 3g (calls of 2g, g, rest) */
	int64_t cut[] = {0, 2 * grid, 3 * grid, n};
	for (int i = 0; i < 3; i++)
		REQUIRE(eng_prefill(m, &b, ids + cut[i], cut[i + 1] - cut[i],
				    lb + (size_t)cut[i] * V, ENG_LOGITS_ALL) == 0,
			"prefill B part %d", i);
	host_state hb = state_read(ops, ctx, y, &b, n);
	CHECK(b.len == n, "length %lld", (long long)b.len);
	CHECK(memcmp(la, lb, (size_t)n * V * 4) == 0,
	      "split prefill: logits differ");
	state_equal(y, &ha, &hb, n, "split prefill");

	/* C: resume at line 4g from a snapshot; rows above the line hold
	 * another prompt's rows first */
	int64_t line = 4 * grid;
	REQUIRE(eng_seq_reset(m, &b) == 0, "reset");
	REQUIRE(eng_prefill(m, &b, ids, line, NULL, ENG_LOGITS_NONE) == 0, "head");
	host_state snap = state_read(ops, ctx, y, &b, 0);
	REQUIRE(eng_seq_reset(m, &b) == 0, "reset");
	REQUIRE(eng_prefill(m, &b, other, n, NULL, ENG_LOGITS_NONE) == 0, "other");
	/* put the head's rows back as the resident prefix keeps them: the
	 * rows below the line are the head's; restore sections from snap */
	kern_queue *q = ops->queue(ctx, KERN_Q_COMPUTE);
	size_t off = 0;
	for (int i = 0; i < y->n_sections; i++) {
		REQUIRE(ops->upload(q, b.sec[i], snap.bytes + off,
				    y->sec[i].bytes) == 0,
			"upload");
		off += y->sec[i].bytes;
	}
	for (int i = 0; i < y->n_views; i++)
		REQUIRE(ops->copy(q, b.view[i], a.view[i],
				  y->view[i].row_bytes * (size_t)line) == 0,
			"copy");
	/* snap's bytes are the uploads' source: valid until this sync */
	REQUIRE(ops->sync(q) == 0, "sync");
	b.len = line;
	REQUIRE(eng_prefill(m, &b, ids + line, n - line, lb + (size_t)line * V,
			    ENG_LOGITS_ALL) == 0,
		"resume");
	host_state hc = state_read(ops, ctx, y, &b, n);
	CHECK(memcmp(la + (size_t)line * V, lb + (size_t)line * V,
		     (size_t)(n - line) * V * 4) == 0,
	      "resume: logits differ");
	state_equal(y, &ha, &hc, n, "resume at a grid line");

	/* LAST equals the last row of ALL: on the CPU backend, whose rows
	 * are independent of the rows around them (ops.h); a device backend
	 * fixes its GEMM per row bucket, and ALL runs the head 8 rows at a
	 * time, so there the two are held to being the same call only */
	REQUIRE(eng_seq_reset(m, &b) == 0, "reset");
	REQUIRE(eng_prefill(m, &b, ids, n, lc, ENG_LOGITS_LAST) == 0, "last");
	if (ops->caps & KERN_CAP_HOST_MEMORY)
		CHECK(memcmp(lc, la + (size_t)(n - 1) * V, (size_t)V * 4) == 0,
		      "LAST logits differ from row n-1 of ALL");
	else
		printf("test_prefill_split_exact: LAST against row n-1 of ALL "
		       "not compared on %s (other row buckets)\n",
		       ops->name);

	/* D: forwards of 3 chunks (span 3g) against a chunk a forward: the
	 * prompt from 0 (forwards [0, 3g), [3g, 5g), then the rest), and
	 * from a line inside a chunk's worth (a resume at 1g: [g, 4g), ...)
	 * with a slot at every line it passes */
	eng_opts o3 = o;
	o3.span = 3 * grid;
	eng_model *m3;
	REQUIRE(eng_model_load(argv[1], ops, ctx, &o3, &m3, err) == 0,
		"load span %d: %s", o3.span, err);
	CHECK(eng_model_span(m3) == 3 * grid, "span %d", eng_model_span(m3));
	eng_seq d;
	REQUIRE(eng_seq_alloc(m3, &d) == 0, "seq");
	REQUIRE(eng_prefill(m3, &d, ids, n, lb, ENG_LOGITS_ALL) == 0,
		"prefill span");
	host_state hd = state_read(ops, ctx, y, &d, n);
	CHECK(memcmp(la, lb, (size_t)n * V * 4) == 0,
	      "span 3g: logits differ from a chunk a forward");
	state_equal(y, &ha, &hd, n, "span 3g");
	state_free(&hd);

	enum { NS = 5 };
	eng_slot sa[NS], sd[NS];
	for (int i = 0; i < NS; i++) {
		sa[i].line = sd[i].line = (int64_t)(i + 1) * grid;
		REQUIRE(ops->alloc(ctx, y->section_bytes, &sa[i].dst) == 0 &&
				ops->alloc(ctx, y->section_bytes, &sd[i].dst) == 0,
			"slot");
	}
	/* the head [0, g) first, so that the slotted prefill starts on a
	 * line with 4 whole chunks and a tail ahead of it */
	int fa = -1, fd = -1;
	REQUIRE(eng_seq_reset(m, &a) == 0 && eng_seq_reset(m3, &d) == 0, "reset");
	REQUIRE(eng_prefill(m, &a, ids, grid, NULL, ENG_LOGITS_NONE) == 0 &&
			eng_prefill(m3, &d, ids, grid, NULL, ENG_LOGITS_NONE) == 0,
		"head");
	REQUIRE(eng_prefill_slots(m, &a, ids + grid, n - grid, lc,
				  ENG_LOGITS_LAST, sa + 1, NS - 1, &fa) == 0,
		"slots, a chunk a forward");
	float *ld = malloc((size_t)V * 4);
	REQUIRE(ld, "oom");
	REQUIRE(eng_prefill_slots(m3, &d, ids + grid, n - grid, ld,
				  ENG_LOGITS_LAST, sd + 1, NS - 1, &fd) == 0,
		"slots, span 3g");
	CHECK(fa == NS - 1 && fd == NS - 1, "slots filled: %d and %d of %d", fa,
	      fd, NS - 1);
	CHECK(memcmp(lc, ld, (size_t)V * 4) == 0, "span 3g: LAST logits differ");
	REQUIRE(eng_model_sync(m) == 0 && eng_model_sync(m3) == 0, "sync");
	unsigned char *ba = malloc(y->section_bytes), *bd = malloc(y->section_bytes);
	REQUIRE(ba && bd, "oom");
	kern_queue *q3 = ops->queue(ctx, KERN_Q_COMPUTE);
	for (int i = 1; i < NS; i++) {
		REQUIRE(ops->download(q3, ba, sa[i].dst, y->section_bytes) == 0 &&
				ops->download(q3, bd, sd[i].dst, y->section_bytes) == 0,
			"download slot");
		/* 2g and 3g lie inside the forward [g, 4g); 4g and 5g end
		 * forwards */
		CHECK(memcmp(ba, bd, y->section_bytes) == 0,
		      "span 3g: the slot at line %lld differs",
		      (long long)sd[i].line);
	}
	for (int i = 0; i < NS; i++) {
		ops->free(ctx, sa[i].dst);
		ops->free(ctx, sd[i].dst);
	}
	free(ba);
	free(bd);
	free(ld);
	eng_seq_free(m3, &d);
	eng_model_free(m3);

	/* a span that is not a multiple of the grid is refused at load */
	o3.span = grid + 64;
	CHECK(eng_model_load(argv[1], ops, ctx, &o3, &m3, err) == MOOR_ERANGE,
	      "span %d loaded", o3.span);

	state_free(&ha);
	state_free(&hb);
	state_free(&hc);
	state_free(&snap);
	eng_seq_free(m, &a);
	eng_seq_free(m, &b);
	free(ids);
	free(other);
	free(la);
	free(lb);
	free(lc);
	eng_model_free(m);
	ops->destroy(ctx);
	return t_done("test_prefill_split_exact");
}
