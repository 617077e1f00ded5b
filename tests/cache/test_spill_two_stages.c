/* test_spill_two_stages: the session spill's save in two stages (the save's
 * thread encodes a file while a writer thread of its own writes the one
 * before, spill.c) keeps every bit and every rule of the serial save, on
 * the made-up architecture of toy.h (4 blocks, 4 anchors and the end go
 * round the two slots):
 *   - the same files: a conversation drained through the two stages and
 *     again serially (MOOR_SPILL_WRITER=0) into another directory, codec
 *     on and off: every file equal byte for byte (the manifest but its
 *     time and its sum), the file operations in the same order, the data
 *     files' on the writer thread (serial: on the save's own);
 *   - the stages overlap: with the writer held inside block 0's write,
 *     the save's thread copies block 1 out of the live rows (a mover that
 *     looks at what it copies; no clock in the check);
 *   - the entry the two stages wrote, read back by a new cache: every
 *     row and section equal (memcmp) to the drained conversation, and the
 *     next turn resumes at the end anchor and equals a cold run;
 *   - a write error in the middle (ENOSPC at the writer's first file while
 *     the encoder is a file ahead), over an older entry of the same
 *     conversation: the drain says which file and why, nothing is written
 *     after it, and the older entry (its manifest and every file) is as
 *     it was and reads back bit for bit; the next drain writes the new
 *     one (error_keeps_old). */
#include <fcntl.h>
#include <pthread.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cache_int.h"
#include "defer_mover.h"
#include "dfile.h"
#include "moor.h"
#include "toy.h"
#include "spill_files.h"

#define G 32
#define TAG "s2" /* its arenas' names */
#define NTOK 3400 /* 4 blocks of the spill, the last partial */

static char root[256];
static pthread_t main_th;

/* ---- the fault seam as a recorder (and a gate) ---- */

typedef struct op_rec {
	int op;
	char name[48];
	int on_main; /* called on the save's own thread */
} op_rec;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static op_rec ops[512];
static int n_ops;
/* the gate: the writer held at its first write of file gate_file until
 * the save's thread has copied the row at `row` out of the live buffers
 * (copied), or 10 s (a hang, not a timing); then that write fails with
 * gate_err (0: it runs) */
static char gate_file[48];
static int gate_on, gate_saw, gate_err, copied;
static const uint8_t *row; /* view 0's first byte of a row, live */

static int hook(int op, const char *name)
{
	pthread_mutex_lock(&mu);
	if (n_ops < (int)(sizeof ops / sizeof ops[0])) {
		op_rec *r = &ops[n_ops++];
		r->op = op;
		snprintf(r->name, sizeof r->name, "%s", name);
		r->on_main = pthread_equal(pthread_self(), main_th);
	}
	int rc = 0;
	if (gate_on && op == DFILE_OP_WRITE && !strcmp(name, gate_file)) {
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_sec += 10;
		while (!copied && pthread_cond_timedwait(&cv, &mu, &ts) == 0)
			;
		gate_saw = copied;
		gate_on = 0; /* once */
		rc = gate_err;
	}
	pthread_mutex_unlock(&mu);
	return rc;
}

static void gate_set(const char *file, const toy_env *e, uint64_t line, int err)
{
	uint64_t outer, inner;
	toy_geom(&e->lay->view[0], &outer, &inner);
	pthread_mutex_lock(&mu);
	snprintf(gate_file, sizeof gate_file, "%s", file);
	row = e->dev + e->ho.view_off[0] + line * inner * e->lay->view[0].elt;
	gate_on = 1;
	gate_err = err;
	gate_saw = copied = 0;
	pthread_mutex_unlock(&mu);
}

/* whether the gate opened on the copy (after the drain) */
static int gate_done(void)
{
	pthread_mutex_lock(&mu);
	int saw = gate_saw;
	gate_on = 0;
	pthread_mutex_unlock(&mu);
	return saw;
}

/* A mover that copies as memcpy does and says when a copy reads `row`
 * (its block leaving the live buffers). */
static int w_copy2d(void *ctx, void *dst, size_t dp, const void *src, size_t sp,
		    size_t w, size_t h)
{
	(void)ctx;
	int hit = 0;
	for (size_t r = 0; r < h; r++)
		hit |= (const uint8_t *)src + r * sp <= row &&
		       row < (const uint8_t *)src + r * sp + w;
	if (hit) {
		pthread_mutex_lock(&mu);
		copied = 1;
		pthread_cond_broadcast(&cv);
		pthread_mutex_unlock(&mu);
	}
	for (size_t r = 0; r < h; r++)
		memcpy((char *)dst + r * dp, (const char *)src + r * sp, w);
	return 0;
}

static int w_copy(void *ctx, void *dst, const void *src, size_t n)
{
	return w_copy2d(ctx, dst, n, src, n, n, 1);
}

static int w_zero(void *ctx, void *dst, size_t n)
{
	(void)ctx;
	memset(dst, 0, n);
	return 0;
}

static const arena_mover watch_mover = {
    .name = "watch", .copy = w_copy, .copy2d = w_copy2d, .zero = w_zero};

/* ---- the conversation ---- */

static int32_t *A;

static void drain(toy_env *e, int serial, const char *what)
{
	char err[MOOR_ERRLEN] = "";
	if (serial)
		setenv("MOOR_SPILL_WRITER", "0", 1);
	int rc = cache_drain(e->c, err);
	unsetenv("MOOR_SPILL_WRITER");
	REQUIRE(rc == 0, "%s: drain: %s", what, err);
}

/* The ops of one drain (the recorder's), copied out. */
static int take_ops(op_rec *out)
{
	pthread_mutex_lock(&mu);
	int n = n_ops;
	if (out)
		memcpy(out, ops, (size_t)n * sizeof *ops);
	n_ops = 0;
	pthread_mutex_unlock(&mu);
	return n;
}

/* A data file's operation on the writer's side: NAME.new's (the commit's
 * renames of NAME.new to NAME are the save's own thread's). */
static int is_data(const char *name)
{
	return strstr(name, ".new") != NULL;
}

static void same_as_serial(int codec)
{
	char da[300], db[300], what[64];
	snprintf(da, sizeof da, "%s/two-%d", root, codec);
	snprintf(db, sizeof db, "%s/serial-%d", root, codec);
	snprintf(what, sizeof what, "codec %d", codec);
	static op_rec o2[512], o1[512];
	toy_env e;
	spill_conv(&e, TAG, da, codec, A, NTOK, G);
	take_ops(o2);
	drain(&e, 0, what);
	int n2 = take_ops(o2);
	toy_close(&e);
	spill_conv(&e, TAG, db, codec, A, NTOK, G);
	take_ops(o1);
	drain(&e, 1, what);
	int n1 = take_ops(o1);
	toy_close(&e);
	int files = same_files(da, db, what);
	/* 4 blocks, 4 anchors and the end, through the two slots */
	CHECK(files == 9, "%s: %d data files, want 9", what, files);
	CHECK(n1 == n2, "%s: %d file operations serial, %d in two stages", what,
	      n1, n2);
	int data2 = 0, data1 = 0;
	for (int i = 0; i < n1 && i < n2; i++) {
		CHECK(o1[i].op == o2[i].op && !strcmp(o1[i].name, o2[i].name),
		      "%s: operation %d: %d %s serial, %d %s in two stages",
		      what, i, o1[i].op, o1[i].name, o2[i].op, o2[i].name);
		if (is_data(o2[i].name)) {
			data2 += !o2[i].on_main;
			data1 += o1[i].on_main;
			CHECK(!o2[i].on_main && o1[i].on_main,
			      "%s: %s on the writer thread (two stages) and on "
			      "the save's (serial)",
			      what, o2[i].name);
		}
	}
	/* a file: one write (its header, sums and data as one aligned
	 * buffer, O_DIRECT), an fsync and a rename to NAME.new; with
	 * MOOR_SPILL_DIRECT=0 a write of each of its 3 parts */
	const char *dv = getenv("MOOR_SPILL_DIRECT");
	int per = dv && !strcmp(dv, "0") ? 5 : 3;
	CHECK(data2 == per * files && data1 == per * files,
	      "%s: the data files' operations: %d and %d, want %d", what, data2,
	      data1, per * files);
}

/* The writer held in block 0's write; the save's thread copies block 1
 * meanwhile. Then the entry read back, bit for bit, and the next turn. */
static void overlap_and_back(void)
{
	char d[300];
	snprintf(d, sizeof d, "%s/overlap", root);
	toy_env e;
	spill_conv(&e, TAG, d, 1, A, NTOK, G);
	toy_seq truth; /* the conversation as drained */
	spill_seq_take(&e, &truth);
	uint64_t valid = e.c->valid;
	const arena_mover *mv0 = e.c->mv;
	e.c->mv = &watch_mover;
	gate_set("r0.new.tmp", &e, 1024, 0);
	drain(&e, 0, "overlap");
	e.c->mv = mv0;
	CHECK(gate_done(), "block 1 left the live rows while the writer was in "
			   "block 0's write (the stages overlap)");
	toy_close(&e);

	/* a new cache reads the entry back at its attach */
	cache_cfg cfg;
	spill_cfg(&cfg, TAG, d, "b", 1);
	toy_open(&e, &cfg, 4096, G);
	CHECK(e.ho.resident_len == valid, "read back %llu tokens, want %llu",
	      (unsigned long long)e.ho.resident_len, (unsigned long long)valid);
	CHECK(toy_equal(e.lay, &e.s, &truth, valid, "read back"),
	      "every row and section read back as drained");
	toy_turn t;
	/* the next turn: the conversation's ids (the prompt and the 3
	 * tokens of its answer the turn absorbed) and 40 more */
	int32_t *ids = toy_cat(e.c->res_ids, valid, A + 7, 40);
	int rc = toy_run(&e, ids, valid + 40, "s", 3, &t, 1, "next turn");
	CHECK(rc == 0 && t.plan.tier == CACHE_TIER_END && t.plan.start == valid,
	      "the next turn resumes at the end anchor %llu: %s at %llu",
	      (unsigned long long)valid, cache_tier_name(t.plan.tier),
	      (unsigned long long)t.plan.start);
	free(ids);
	toy_close(&e);
	toy_seq_free(&truth);
}

/* Every file of entry directory e: names (sorted) and bytes. */
typedef struct snapshot {
	int n;
	char name[32][32];
	uint8_t *b[32];
	uint64_t len[32];
} snapshot;

static void snap(const char *e, snapshot *s)
{
	s->n = list_files(e, s->name, 32);
	for (int i = 0; i < s->n; i++) {
		char p[1400];
		snprintf(p, sizeof p, "%s/%s", e, s->name[i]);
		s->b[i] = slurp(p, &s->len[i]);
		REQUIRE(s->b[i], "%s", p);
	}
}

static void snap_free(snapshot *s)
{
	for (int i = 0; i < s->n; i++)
		free(s->b[i]);
}

/* A write error in the middle of a save in two stages, over an older entry
 * of the same conversation: the older entry (2,703 tokens: 3 blocks) is
 * on the disk; the conversation grows to 3,403 (blocks 0 and 1 kept,
 * block 2 rewritten, block 3 new, new anchors and end). The writer's first
 * file (r2.new) is held until block 3 has left the live rows (the encoder
 * a file ahead), then fails with ENOSPC. The drain reports it (the file,
 * the error, the entry kept); nothing is written after it; the entry's
 * directory is file for file and byte for byte what it was (its manifest
 * first) and reads back as the older conversation, bit for bit; a drain
 * without the fault then writes the new one, which reads back. */
static void error_keeps_old(void)
{
	char d[300], ed[300];
	snprintf(d, sizeof d, "%s/error", root);
	toy_env e;
	cache_cfg cfg;
	spill_cfg(&cfg, TAG, d, "a", 1);
	toy_open(&e, &cfg, 4096, G);
	toy_turn t;
	REQUIRE(toy_run(&e, A, NTOK - 700, "s", 4, &t, 0, "turn 1") == 0,
		"turn 1");
	uint64_t v1 = e.c->valid;
	toy_seq t1;
	spill_seq_take(&e, &t1);
	drain(&e, 0, "older entry");
	toy_close(&e);
	entry_dir(d, ed, sizeof ed);
	char rn[17];
	snprintf(rn, sizeof rn, "%s", strrchr(ed, '/') + 1);
	snapshot before;
	snap(ed, &before);
	CHECK(before.n == 9,
	      "the older entry: %d files (3 blocks, 4 anchors, the end, the "
	      "manifest)",
	      before.n);

	/* a new cache reads it back and the conversation grows */
	spill_cfg(&cfg, TAG, d, "b", 1);
	toy_open(&e, &cfg, 4096, G);
	REQUIRE(e.ho.resident_len == v1, "read back %llu",
		(unsigned long long)e.ho.resident_len);
	int32_t *ids = toy_cat(e.c->res_ids, v1, A + v1, NTOK - v1);
	REQUIRE(toy_run(&e, ids, NTOK, "s", 4, &t, 0, "turn 2") == 0, "turn 2");
	CHECK(t.plan.tier == CACHE_TIER_END && t.plan.start == v1,
	      "turn 2 resumes at %llu", (unsigned long long)v1);
	uint64_t v2 = e.c->valid;
	toy_seq t2;
	spill_seq_take(&e, &t2);

	const arena_mover *mv0 = e.c->mv;
	e.c->mv = &watch_mover;
	gate_set("r2.new.tmp", &e, 3072, -ENOSPC);
	take_ops(NULL);
	char err[MOOR_ERRLEN] = "";
	int rc = cache_drain(e.c, err);
	static op_rec o[512];
	int n = take_ops(o);
	e.c->mv = mv0;
	CHECK(gate_done(), "block 3 left the live rows while the writer was "
			   "in block 2's write");
	CHECK(rc == -ENOSPC, "the drain failed with ENOSPC: %s",
	      moor_strerror(rc));
	CHECK(strstr(err, "r2.new") && strstr(err, moor_strerror(-ENOSPC)) &&
		  strstr(err, "kept as it was"),
	      "the error names the file, the error and the entry kept: %s",
	      err);
	int after = 0, failed_at = -1;
	for (int i = 0; i < n; i++) {
		if (failed_at < 0 && o[i].op == DFILE_OP_WRITE &&
		    !strcmp(o[i].name, "r2.new.tmp"))
			failed_at = i;
		else if (failed_at >= 0 && o[i].op != DFILE_OP_READ)
			after++;
	}
	CHECK(failed_at >= 0 && after == 0,
	      "nothing written after the failed file (%d operations)", after);
	CHECK(e.c->spill.k.save_failed == 1, "save_failed %llu",
	      (unsigned long long)e.c->spill.k.save_failed);
	snapshot now;
	snap(ed, &now);
	int same = now.n == before.n;
	for (int i = 0; same && i < now.n; i++)
		same = !strcmp(now.name[i], before.name[i]) &&
		       now.len[i] == before.len[i] &&
		       !memcmp(now.b[i], before.b[i], now.len[i]);
	CHECK(same, "the older entry's files (its manifest first) are as they "
		    "were, and no other");
	snap_free(&now);

	/* the older entry reads back as it was written, bit for bit */
	{
		char p[400];
		snprintf(p, sizeof p, "%s/sessions/resident", d);
		int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0600);
		REQUIRE(fd >= 0 && write(fd, rn, 16) == 16, "%s", p);
		close(fd);
		toy_env f;
		spill_cfg(&cfg, TAG, d, "c", 1);
		toy_open(&f, &cfg, 4096, G);
		CHECK(f.ho.resident_len == v1 &&
			  toy_equal(f.lay, &f.s, &t1, v1, "older entry"),
		      "the older entry read back: %llu tokens, want %llu",
		      (unsigned long long)f.ho.resident_len,
		      (unsigned long long)v1);
		toy_close(&f);
	}

	/* and the tier works on: the same drain without the fault */
	drain(&e, 0, "after the error");
	toy_close(&e);
	spill_cfg(&cfg, TAG, d, "d", 1);
	toy_open(&e, &cfg, 4096, G);
	CHECK(e.ho.resident_len == v2 &&
		  toy_equal(e.lay, &e.s, &t2, v2, "after the error"),
	      "the grown conversation read back: %llu tokens, want %llu",
	      (unsigned long long)e.ho.resident_len, (unsigned long long)v2);
	toy_close(&e);
	free(ids);
	snap_free(&before);
	toy_seq_free(&t1);
	toy_seq_free(&t2);
}

int main(void)
{
	moor_log_level = MOOR_LOG_ERROR;
	main_th = pthread_self();
	toy_tmpdir(root, sizeof root, "spill-two");
	A = toy_ids(NTOK + 64, 17);
	dfile_fault = hook;
	same_as_serial(1);
	same_as_serial(0);
	overlap_and_back();
	error_keeps_old();
	dfile_fault = NULL;
	free(A);
	dfile_rm_rf(AT_FDCWD, root);
	return t_done("test_spill_two_stages");
}
