/* test_spill_sums_in_place: the session spill checks a block or anchor the
 * old manifest holds by the mover's sum2 where its bytes are, and copies it
 * off the device only when it changed (spill.c, "the sums where the bytes
 * are"), writing what the staged path wrote, byte for byte. On the made-up
 * architecture of toy.h in two shapes: its own (toy.b one run a block,
 * toy.a and toy.c 2 and 15 runs: staged as before) and "runs" (every view
 * token axis first, as qwen35's K and V: every block summed in place).
 * Each conversation runs twice side by side, the mover's sums on and off
 * (MOOR_SPILL_DEVSUMS=0, the staged path), through a mover that, like the
 * CUDA one, copies only at sync() and sums only after every earlier copy,
 * and that counts the bytes it copies out of the live rows:
 *   - a turn that changes only the last block (3,403 tokens, then 43
 *     more: blocks 0-2 as they were): the drain copies out of the live
 *     rows block 3 alone ("runs"; the own shape: block 3 and the staged
 *     views' part of blocks 0-2), writes block 3 and no other block, and
 *     counts 3 blocks unread ("runs"; 0 the own shape) and every kept
 *     anchor unread; the staged path copies all 4 blocks and sums nothing
 *     by the mover;
 *   - a block whose ids did not move but whose bytes did (a byte of block
 *     1 flipped in the live rows of toy.b) and an anchor whose bytes did:
 *     both found changed by the sums in place, copied out and written;
 *   - after every drain, every file of the two entries equal byte for byte
 *     (the manifest but its time and its sum): the same sums, the same
 *     files;
 *   - the entry read back by a new cache, every row and section equal
 *     (memcmp) to the drained conversation; after the first incremental
 *     drain the next turn resumes at the end anchor and equals a cold
 *     run. */
#include <fcntl.h>
#include <jansson.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cache_int.h"
#include "defer_mover.h"
#include "dfile.h"
#include "moor.h"
#include "toy.h"
#include "spill_files.h"

#define G 32
#define TAG "sp" /* its arenas' names */
#define NTOK 3400 /* 4 blocks of the spill, the last partial */
#define MORE 40

static char root[256];

/* ---- the data files a drain wrote (the fault seam as a recorder) ---- */

static char wrote[64][48];
static int n_wrote;

static int hook(int op, const char *name)
{
	/* a data file's first write: NAME.new.tmp (dfile_write's) */
	const char *t = strstr(name, ".new.tmp");
	if (op == DFILE_OP_WRITE && t && n_wrote < 64) {
		int dup = 0;
		for (int i = 0; i < n_wrote; i++)
			dup |= !strncmp(wrote[i], name, (size_t)(t - name)) &&
			       wrote[i][t - name] == 0;
		if (!dup)
			snprintf(wrote[n_wrote++], 48, "%.*s", (int)(t - name),
				 name);
	}
	return 0;
}

static int wrote_file(const char *name)
{
	for (int i = 0; i < n_wrote; i++)
		if (!strcmp(wrote[i], name))
			return 1;
	return 0;
}

/* ---- a deferring mover with sum2, counting ---- */

typedef struct cmover {
	defer q;	      /* copies run at sync */
	const uint8_t *lo[3]; /* the live rows of each view */
	uint64_t len[3];
	uint64_t live_bytes; /* copied out of the live rows */
	uint64_t sums, sum_bytes;
	uint64_t early; /* sums asked with copies queued (run first) */
} cmover;

static int c_copy2d(void *ctx, void *dst, size_t dp, const void *src, size_t sp,
		    size_t w, size_t h)
{
	cmover *m = ctx;
	const uint8_t *s = src;
	for (int v = 0; v < 3; v++)
		if (s >= m->lo[v] && s < m->lo[v] + m->len[v])
			m->live_bytes += (uint64_t)w * h;
	return d_copy2d(&m->q, dst, dp, src, sp, w, h);
}

static int c_copy(void *ctx, void *dst, const void *src, size_t n)
{
	return c_copy2d(ctx, dst, n, src, n, n, 1);
}

static int c_zero(void *ctx, void *dst, size_t n)
{
	return d_zero(&((cmover *)ctx)->q, dst, n);
}

static int c_sync(void *ctx)
{
	return d_sync(&((cmover *)ctx)->q);
}

/* arena.h's contract: every earlier copy done first, then the sums */
static int c_sum2(void *ctx, const void *src, size_t n, uint64_t out[2])
{
	cmover *m = ctx;
	m->early += m->q.n != 0;
	int rc = d_sync(&m->q);
	if (rc)
		return rc;
	m->sums++;
	m->sum_bytes += n;
	dfile_sum2(src, n, out);
	return 0;
}

static arena_mover cm_of(cmover *m)
{
	return (arena_mover){.name = "counting",
			     .ctx = m,
			     .copy = c_copy,
			     .copy2d = c_copy2d,
			     .zero = c_zero,
			     .sync = c_sync,
			     .sum2 = c_sum2};
}

/* ---- the conversation ---- */

typedef struct side {
	toy_env e;
	cmover m;
	arena_mover mv;
	char dir[300];
	int devsums;
} side;

/* toy_open, in the toy's own shape or every view's token axis first */
static void open_env(toy_env *e, const cache_cfg *cfg, int runs)
{
	char err[MOOR_ERRLEN];
	memset(e, 0, sizeof *e);
	e->lay = malloc(sizeof *e->lay);
	REQUIRE(e->lay, "oom");
	toy_layout(e->lay, 4096, G, 7);
	if (runs) { /* [T, 2, 24], [T, 7], [T, 3, 5] */
		cache_view *v = e->lay->view;
		v[0].dims[1] = 2;
		v[0].dims[0] = 0;
		v[0].token_axis = 0;
		v[2].dims[2] = 5;
		v[2].dims[1] = 3;
		v[2].dims[0] = 0;
		v[2].token_axis = 0;
	}
	REQUIRE(cache_new(cfg, &e->c, err) == 0, "cache_new: %s", err);
	REQUIRE(cache_hello(e->c, e->lay, &e->ho, err) == 0, "hello: %s", err);
	e->dev = cache_dev_base(e->c);
	toy_seq_arena(&e->s, e->dev, &e->ho);
	toy_seq_alloc(e->lay, &e->cold);
}

static uint64_t view_rowb(const cache_layout *l, int v)
{
	uint64_t outer, inner;
	toy_geom(&l->view[v], &outer, &inner);
	return outer * inner * l->view[v].elt;
}

static void side_open(side *s, const char *tag, int runs, int codec,
		      int devsums)
{
	snprintf(s->dir, sizeof s->dir, "%s/%s-%s", root, tag,
		 devsums ? "in-place" : "staged");
	s->devsums = devsums;
	cache_cfg cfg;
	spill_cfg(&cfg, TAG, s->dir, devsums ? "on" : "off", codec);
	open_env(&s->e, &cfg, runs);
	memset(&s->m, 0, sizeof s->m);
	for (int v = 0; v < 3; v++) {
		s->m.lo[v] = s->e.dev + s->e.ho.view_off[v];
		s->m.len[v] = 4096 * view_rowb(s->e.lay, v);
	}
	s->mv = cm_of(&s->m);
}

static void side_close(side *s)
{
	toy_close(&s->e);
	free(s->m.q.q);
}

/* spill.NAME of the stats JSON */
static long long stat_of(cache *c, const char *name)
{
	long long v = toy_stat(c, "spill", name);
	REQUIRE(v >= 0, "no spill.%s in the stats", name);
	return v;
}

typedef struct counts {
	long long written, kept, unread, a_written, a_kept, a_unread;
	uint64_t live, sums;
} counts;

static void counts_of(side *s, counts *k)
{
	cache *c = s->e.c;
	k->written = stat_of(c, "blocks_written");
	k->kept = stat_of(c, "blocks_kept");
	k->unread = stat_of(c, "blocks_unread");
	k->a_written = stat_of(c, "anchors_written");
	k->a_kept = stat_of(c, "anchors_kept");
	k->a_unread = stat_of(c, "anchors_unread");
	k->live = s->m.live_bytes;
	k->sums = s->m.sums;
}

/* A drain of s; d: what it did (counters' change); the data files it
 * wrote in wrote[]. */
static void drain(side *s, counts *d, const char *what)
{
	counts a, b;
	counts_of(s, &a);
	char err[MOOR_ERRLEN] = "";
	if (!s->devsums)
		setenv("MOOR_SPILL_DEVSUMS", "0", 1);
	n_wrote = 0;
	/* the counting mover for the drain alone: toy_run hands the arena
	 * to its engine without the daemon's sync (replies.c) */
	const arena_mover *mv0 = s->e.c->mv;
	s->e.c->mv = &s->mv;
	int rc = cache_drain(s->e.c, err);
	s->e.c->mv = mv0;
	unsetenv("MOOR_SPILL_DEVSUMS");
	REQUIRE(rc == 0, "%s: drain: %s", what, err);
	CHECK(s->m.q.n == 0, "%s: the drain left %zu copies unsynced", what,
	      s->m.q.n);
	counts_of(s, &b);
	d->written = b.written - a.written;
	d->kept = b.kept - a.kept;
	d->unread = b.unread - a.unread;
	d->a_written = b.a_written - a.a_written;
	d->a_kept = b.a_kept - a.a_kept;
	d->a_unread = b.a_unread - a.a_unread;
	d->live = b.live - a.live;
	d->sums = b.sums - a.sums;
}

/* A copy of e's live sections and rows (toy_seq_free). */
static void seq_take(const toy_env *e, toy_seq *out)
{
	toy_seq_alloc(e->lay, out);
	memcpy(out->sec[0], e->s.sec[0], TOY_S0);
	memcpy(out->sec[1], e->s.sec[1], TOY_S1);
	for (int i = 0; i < 3; i++)
		memcpy(out->view[i], e->s.view[i],
		       view_rowb(e->lay, i) * e->lay->window);
}

/* A new cache on dir reads the drained entry back: bit for bit; next: the
 * next turn (40 more ids) resumes at the end anchor and equals a cold
 * run. */
static void read_back(const char *dir, int runs, int codec,
		      const toy_seq *truth, uint64_t valid, const int32_t *more,
		      int next, const char *what)
{
	cache_cfg cfg;
	spill_cfg(&cfg, TAG, dir, "rd", codec);
	toy_env e;
	open_env(&e, &cfg, runs);
	CHECK(e.ho.resident_len == valid,
	      "%s: read back %llu tokens, want %llu", what,
	      (unsigned long long)e.ho.resident_len, (unsigned long long)valid);
	CHECK(toy_equal(e.lay, &e.s, truth, valid, what),
	      "%s: every row and section read back as drained", what);
	if (next) {
		toy_turn t;
		int32_t *ids = toy_cat(e.c->res_ids, valid, more, 40);
		int rc = toy_run(&e, ids, valid + 40, "s", 3, &t, 1, what);
		CHECK(rc == 0 && t.plan.tier == CACHE_TIER_END &&
			  t.plan.start == valid,
		      "%s: the next turn resumes at the end anchor %llu and "
		      "equals a cold run: %s at %llu (rc %d)",
		      what, (unsigned long long)valid,
		      cache_tier_name(t.plan.tier),
		      (unsigned long long)t.plan.start, rc);
		free(ids);
	}
	toy_close(&e);
}

static int32_t *A, *B, *C;

/* One shape: its two sides in step, checked after every drain. */
static void shape(const char *tag, int runs, int codec)
{
	side on, off;
	side_open(&on, tag, runs, codec, 1);
	side_open(&off, tag, runs, codec, 0);
	side *sd[2] = {&on, &off};
	const cache_layout *l = on.e.lay;
	uint64_t rb = 0, rb_staged = 0; /* bytes a row: all, staged */
	for (int v = 0; v < 3; v++) {
		rb += view_rowb(l, v);
		if (on.e.c->vg[v].outer > 1)
			rb_staged += view_rowb(l, v);
	}
	CHECK(rb == on.e.c->row_bytes, "%s: %llu bytes a row", tag,
	      (unsigned long long)rb);
	CHECK(!runs || rb_staged == 0, "%s: every view one run", tag);
	CHECK(runs || (rb_staged && rb_staged < rb),
	      "%s: views of one run and of several", tag);
	counts d[2];
	char what[96];

	/* turn 1 and the first drain: everything written */
	for (int i = 0; i < 2; i++) {
		toy_turn t;
		REQUIRE(toy_run(&sd[i]->e, A, NTOK, "s", 4, &t, 1, "turn 1") ==
			    0,
			"%s: turn 1", tag);
		drain(sd[i], &d[i], "drain 1");
	}
	uint64_t v1 = on.e.c->valid;
	REQUIRE(v1 == NTOK + 3, "valid %llu", (unsigned long long)v1);
	snprintf(what, sizeof what, "%s, drain 1", tag);
	CHECK(same_files(on.dir, off.dir, what) > 0, "%s: no data file", what);
	CHECK(d[0].written == 4 && d[1].written == 4 && d[0].unread == 0,
	      "%s: 4 blocks written: %lld and %lld", what, d[0].written,
	      d[1].written);

	/* turn 2 moves only block 3: 43 rows more */
	uint64_t v2 = 0;
	for (int i = 0; i < 2; i++) {
		toy_turn t;
		toy_env *e = &sd[i]->e;
		int32_t *ids = toy_cat(e->c->res_ids, v1, B, MORE);
		REQUIRE(toy_run(e, ids, v1 + MORE, "s", 4, &t, 1, "turn 2") ==
			    0,
			"%s: turn 2", tag);
		REQUIRE(t.plan.tier == CACHE_TIER_END && t.plan.start == v1,
			"%s: turn 2 resumes at %llu", tag,
			(unsigned long long)v1);
		free(ids);
		v2 = e->c->valid;
		drain(sd[i], &d[i], "drain 2");
		CHECK(d[i].written == 1 && d[i].kept == 3 && wrote_file("r3") &&
			  !wrote_file("r0") && !wrote_file("r1") &&
			  !wrote_file("r2"),
		      "%s, drain 2 (%s): block 3 written (%d), 3 kept: %lld "
		      "written, %lld kept",
		      tag, sd[i]->devsums ? "in place" : "staged",
		      wrote_file("r3"), d[i].written, d[i].kept);
	}
	REQUIRE(v2 == v1 + MORE + 3 && v2 / 1024 == 3, "valid %llu",
		(unsigned long long)v2);
	snprintf(what, sizeof what, "%s, drain 2", tag);
	CHECK(same_files(on.dir, off.dir, what) > 0, "%s: no data file", what);
	uint64_t r3 = v2 - 3072;
	/* in place: block 3 whole, and the staged views of blocks 0-2 */
	uint64_t want = r3 * rb + 3 * 1024 * rb_staged;
	CHECK(d[0].live == want,
	      "%s: in place, %llu bytes copied out of the live rows, want "
	      "%llu (block 3: %llu rows)",
	      what, (unsigned long long)d[0].live, (unsigned long long)want,
	      (unsigned long long)r3);
	CHECK(d[0].unread == (runs ? 3 : 0), "%s: %lld blocks unread, want %d",
	      what, d[0].unread, runs ? 3 : 0);
	CHECK(d[0].sums > 0 && on.m.early == 0,
	      "%s: %llu sums by the mover (%llu asked before a sync)", what,
	      (unsigned long long)d[0].sums, (unsigned long long)on.m.early);
	CHECK(d[0].a_kept > 0 && d[0].a_unread == d[0].a_kept &&
		  d[1].a_kept == d[0].a_kept &&
		  d[1].a_written == d[0].a_written,
	      "%s: anchors kept %lld (unread %lld), staged %lld", what,
	      d[0].a_kept, d[0].a_unread, d[1].a_kept);
	CHECK(d[1].live == v2 * rb && d[1].sums == 0 && d[1].unread == 0 &&
		  d[1].a_unread == 0,
	      "%s: staged, %llu bytes copied (want %llu), %llu sums by the "
	      "mover",
	      what, (unsigned long long)d[1].live,
	      (unsigned long long)(v2 * rb), (unsigned long long)d[1].sums);
	toy_seq t2;
	seq_take(&on.e, &t2);
	read_back(on.dir, runs, codec, &t2, v2, C, 1, what);

	/* block 1's bytes move under the same ids (a byte of toy.b, one run
	 * in both shapes), and an anchor the old manifest holds: found by
	 * the sums in place, copied out and written */
	uint64_t line = 0;
	for (int i = 0; i < 2; i++) {
		toy_env *e = &sd[i]->e;
		uint64_t ib = view_rowb(e->lay, 1);
		e->s.view[1][1500 * ib + 3] ^= 0x40;
		cache *c = e->c;
		int k = -1; /* the oldest of the newest 4 below the end */
		for (int j = (int)c->n_anc - 1, seen = 0; j >= 0 && seen < 4;
		     j--)
			if (c->anc[j].line <= c->valid) {
				k = j;
				seen++;
			}
		REQUIRE(k >= 0, "an anchor");
		line = c->anc[k].line;
		((uint8_t *)cache_dev_at(c, c->anc[k].off))[5] ^= 0x21;
		drain(sd[i], &d[i], "drain 3");
		char an[32];
		snprintf(an, sizeof an, "a%llu", (unsigned long long)line);
		CHECK(d[i].written == 1 && d[i].kept == 3 && wrote_file("r1") &&
			  wrote_file(an) && !wrote_file("r3") &&
			  d[i].a_written == 1,
		      "%s, drain 3 (%s): block 1 and anchor %s written, "
		      "nothing else: %lld blocks, %lld anchors written",
		      tag, sd[i]->devsums ? "in place" : "staged", an,
		      d[i].written, d[i].a_written);
	}
	snprintf(what, sizeof what, "%s, drain 3", tag);
	CHECK(same_files(on.dir, off.dir, what) > 0, "%s: no data file", what);
	/* in place: block 1 whole, the staged views of blocks 0, 2, 3 */
	want = 1024 * rb + (2 * 1024 + r3) * rb_staged;
	CHECK(d[0].live == want && d[0].unread == (runs ? 3 : 0),
	      "%s: in place, %llu bytes copied out of the live rows, want "
	      "%llu; %lld unread",
	      what, (unsigned long long)d[0].live, (unsigned long long)want,
	      d[0].unread);
	toy_seq t3;
	seq_take(&on.e, &t3);
	read_back(on.dir, runs, codec, &t3, v2, NULL, 0, what);
	read_back(off.dir, runs, codec, &t3, v2, NULL, 0, what);
	toy_seq_free(&t2);
	toy_seq_free(&t3);
	side_close(&on);
	side_close(&off);
}

int main(void)
{
	moor_log_level = MOOR_LOG_ERROR;
	toy_tmpdir(root, sizeof root, "spill-sums");
	A = toy_ids(NTOK + 64, 31);
	B = toy_ids(MORE + 8, 32);
	C = toy_ids(48, 33);
	dfile_fault = hook;
	shape("runs", 1, 0);
	shape("own", 0, 1);
	dfile_fault = NULL;
	free(A);
	free(B);
	free(C);
	dfile_rm_rf(AT_FDCWD, root);
	return t_done("test_spill_sums_in_place");
}
