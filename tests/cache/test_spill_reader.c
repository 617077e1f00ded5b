/* test_spill_reader: the spill's read-back in two stages (a reader thread
 * reads the next file while this one is checked, decoded, summed and
 * copied; the copies on the pool) restores what the serial read-back
 * (MOOR_SPILL_READER=0, MOOR_SPILL_POOLCOPY=0) restores, byte for byte,
 * and fails where it fails. On the made-up architecture of toy.h, a
 * conversation of 3,400 tokens (4 blocks of the spill, 4 anchors, the
 * end), codec on and off:
 *   - the attach's read-back (cache_spill_read_back) in four ways (serial;
 *     the reader; the reader with the mover's copies; serial with the
 *     pool's copies): every view's rows, the sections, every resident
 *     anchor's line and sections, the end anchor's and the ids equal
 *     (memcmp) to the serial path's, and equal to the drained
 *     conversation; the next turn resumes at the end anchor and equals a
 *     cold run;
 *   - a plan's restore (spill_restore: no resident name, the entry
 *     offered) in the same four ways: the turn resumes from the spill at
 *     the end anchor and equals a cold run, and the state after it is the
 *     serial path's;
 *   - a damaged file in the middle (a flipped data byte in r1, a flipped
 *     header byte in r2, r1 cut to half, r2 gone) and a damaged file at
 *     the end (the end's data), serial and with the reader, at the attach
 *     and through a plan: nothing is served (a cold start: resident 0,
 *     or the plan not from the spill), the failure is counted, the entry
 *     is gone from the disk, and the next turn equals a cold run;
 *   - the fault seam's Nth read fails (-EIO), for every N until none
 *     fires, serial and with the reader: the same outcome for each N (the
 *     same tokens read back, or none), never a wrong restore; a failed
 *     read of the entry's manifest or a data file reads nothing back. */
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cache_int.h"
#include "dfile.h"
#include "moor.h"
#include "toy.h"

#include "spill_files.h" /* after toy.h */

#define G 32
#define TAG "sr"
#define NTOK 3400

static char root[128];
static int32_t *A;

enum { M_SERIAL, M_READER, M_READER_MOVER, M_SERIAL_POOL, M_N };
static const char *mode_name[M_N] = {"serial", "reader",
				     "reader, the mover's copies",
				     "serial, the pool's copies"};

static void mode_set(int m)
{
	if (m == M_SERIAL || m == M_SERIAL_POOL)
		setenv("MOOR_SPILL_READER", "0", 1);
	if (m == M_SERIAL || m == M_READER_MOVER)
		setenv("MOOR_SPILL_POOLCOPY", "0", 1);
}

static void mode_unset(void)
{
	unsetenv("MOOR_SPILL_READER");
	unsetenv("MOOR_SPILL_POOLCOPY");
}

/* ---- what a cache holds, serialized ---- */

typedef struct snap {
	uint8_t *b;
	uint64_t n, cap;
} snap;

static void put(snap *s, const void *p, uint64_t n)
{
	if (s->n + n > s->cap) {
		s->cap = (s->n + n) * 2;
		s->b = realloc(s->b, s->cap);
		REQUIRE(s->b, "oom");
	}
	memcpy(s->b + s->n, p, n);
	s->n += n;
}

/* valid, taint, the ids, every view's rows [0, valid), the sections, each
 * resident anchor (line, sections), the end anchor (len, taint,
 * sections) */
static void snap_take(toy_env *e, snap *s)
{
	cache *c = e->c;
	memset(s, 0, sizeof *s);
	put(s, &c->valid, 8);
	put(s, &c->taint, 8);
	put(s, c->res_ids, c->valid * 4);
	uint64_t W = e->lay->window;
	for (uint32_t i = 0; i < e->lay->n_views; i++) {
		uint64_t outer, inner;
		toy_geom(&e->lay->view[i], &outer, &inner);
		uint64_t rb = inner * e->lay->view[i].elt;
		const uint8_t *v = cache_dev_at(c, c->view_off[i]);
		for (uint64_t o = 0; o < outer; o++)
			put(s, v + o * W * rb, c->valid * rb);
	}
	for (uint32_t i = 0; i < e->lay->n_sections; i++)
		put(s, cache_dev_at(c, c->sec_off[i]), e->lay->sec[i].bytes);
	put(s, &c->n_anc, 4);
	for (uint32_t i = 0; i < c->n_anc; i++) {
		put(s, &c->anc[i].line, 8);
		put(s, cache_dev_at(c, c->anc[i].off), c->sec_bytes);
	}
	put(s, &c->end.have, 4);
	if (c->end.have) {
		put(s, &c->end.len, 8);
		put(s, &c->end.taint, 8);
		put(s, cache_dev_at(c, c->end.off), c->sec_bytes);
	}
}

static int snap_same(const snap *a, const snap *b)
{
	return a->n == b->n && !memcmp(a->b, b->b, a->n);
}

/* ---- the entry ---- */

typedef struct conv {
	char dir[200];
	toy_seq truth;
	uint64_t valid;
	int32_t *ids; /* [valid + 40]: the entry's ids, then 40 more */
	char resident[17];
} conv;

/* The conversation drained into root/name. */
static void conv_make(conv *v, const char *name, int codec)
{
	snprintf(v->dir, sizeof v->dir, "%s/%s", root, name);
	toy_env e;
	spill_conv(&e, TAG, v->dir, codec, A, NTOK, G);
	spill_seq_take(&e, &v->truth);
	v->valid = e.c->valid;
	v->ids = toy_cat(e.c->res_ids, v->valid, A + 11, 40);
	char err[MOOR_ERRLEN] = "";
	REQUIRE(cache_drain(e.c, err) == 0, "drain: %s", err);
	toy_close(&e);
	char p[400];
	snprintf(p, sizeof p, "%s/sessions/resident", v->dir);
	int fd = open(p, O_RDONLY);
	REQUIRE(fd >= 0 && read(fd, v->resident, 16) == 16, "%s", p);
	v->resident[16] = 0;
	close(fd);
}

static void conv_free(conv *v)
{
	toy_seq_free(&v->truth);
	free(v->ids);
	dfile_rm_rf(AT_FDCWD, v->dir);
}

/* DIR/sessions/resident names the entry again (a read-back removes it) */
static void resident_put(const conv *v)
{
	char p[400];
	snprintf(p, sizeof p, "%s/sessions/resident", v->dir);
	int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	REQUIRE(fd >= 0 && write(fd, v->resident, 16) == 16, "%s", p);
	close(fd);
}

static void resident_drop(const conv *v)
{
	char p[400];
	snprintf(p, sizeof p, "%s/sessions/resident", v->dir);
	unlink(p);
}

static int entry_there(const conv *v)
{
	char p[400];
	struct stat st;
	snprintf(p, sizeof p, "%s/sessions/%s", v->dir, v->resident);
	return stat(p, &st) == 0;
}

static void open_in(toy_env *e, const conv *v, int codec, const char *name)
{
	cache_cfg cfg;
	spill_cfg(&cfg, TAG, v->dir, name, codec);
	toy_open(e, &cfg, 4096, G);
}

/* The next turn after what a cache holds: 40 more ids; it must equal a
 * cold run (check); *tier and *start: its plan's. */
static void next_turn(toy_env *e, const conv *v, const char *what, int *tier,
		      uint64_t *start)
{
	toy_turn t;
	int rc = toy_run(e, v->ids, v->valid + 40, "s", 3, &t, 1, what);
	CHECK(rc == 0, "%s: the next turn equals a cold run", what);
	*tier = t.plan.tier;
	*start = t.plan.start;
}

/* ---- equal restores ---- */

static void attach_ways(int codec)
{
	conv v;
	conv_make(&v, codec ? "attach-1" : "attach-0", codec);
	snap first = {0}, after_first = {0};
	for (int m = 0; m < M_N; m++) {
		char what[96];
		snprintf(what, sizeof what, "codec %d, attach, %s", codec,
			 mode_name[m]);
		resident_put(&v);
		toy_env e;
		mode_set(m);
		open_in(&e, &v, codec, "b");
		mode_unset();
		CHECK(e.ho.resident_len == v.valid,
		      "%s: read back %llu tokens, want %llu", what,
		      (unsigned long long)e.ho.resident_len,
		      (unsigned long long)v.valid);
		CHECK(toy_equal(e.lay, &e.s, &v.truth, v.valid, what),
		      "%s: every row and section as drained", what);
		CHECK(toy_stat(e.c, "spill", "restores") == 1, "%s: counted",
		      what);
		snap s;
		snap_take(&e, &s);
		if (m == M_SERIAL)
			first = s;
		else
			CHECK(snap_same(&first, &s),
			      "%s: the state is the serial read-back's (%llu "
			      "and %llu bytes)",
			      what, (unsigned long long)first.n,
			      (unsigned long long)s.n);
		int tier;
		uint64_t start;
		next_turn(&e, &v, what, &tier, &start);
		CHECK(tier == CACHE_TIER_END && start == v.valid,
		      "%s: the next turn resumes at the end anchor: %s at %llu",
		      what, cache_tier_name(tier), (unsigned long long)start);
		snap a;
		snap_take(&e, &a);
		if (m == M_SERIAL)
			after_first = a;
		else {
			CHECK(snap_same(&after_first, &a),
			      "%s: the state after the next turn is the serial "
			      "path's",
			      what);
			free(a.b);
		}
		if (m != M_SERIAL)
			free(s.b);
		/* the next turn's save is not wanted: the entry stays the
		 * drained one */
		toy_close(&e);
	}
	free(first.b);
	free(after_first.b);
	conv_free(&v);
}

static void restore_ways(int codec)
{
	conv v;
	conv_make(&v, codec ? "restore-1" : "restore-0", codec);
	snap first = {0};
	for (int m = 0; m < M_N; m++) {
		char what[96];
		snprintf(what, sizeof what, "codec %d, a plan's restore, %s",
			 codec, mode_name[m]);
		resident_drop(&v);
		toy_env e;
		open_in(&e, &v, codec, "c");
		CHECK(e.ho.resident_len == 0, "%s: nothing at the attach",
		      what);
		int tier;
		uint64_t start;
		mode_set(m);
		next_turn(&e, &v, what, &tier, &start);
		mode_unset();
		CHECK(tier == CACHE_TIER_SPILL && start == v.valid,
		      "%s: resumes from the spill at %llu: %s at %llu", what,
		      (unsigned long long)v.valid, cache_tier_name(tier),
		      (unsigned long long)start);
		CHECK(toy_stat(e.c, "spill", "hits") == 1, "%s: a hit", what);
		snap s;
		snap_take(&e, &s);
		if (m == M_SERIAL)
			first = s;
		else {
			CHECK(snap_same(&first, &s),
			      "%s: the state is the serial restore's", what);
			free(s.b);
		}
		toy_close(&e);
	}
	free(first.b);
	conv_free(&v);
}

/* ---- damage ---- */

enum { D_FLIP_DATA, D_FLIP_HDR, D_TORN, D_GONE, D_END_DATA, D_N };
static const char *dmg_name[D_N] = {"r1's data flipped", "r2's header flipped",
				    "r1 cut to half", "r2 gone",
				    "the end's data flipped"};

static void damage(const conv *v, int d)
{
	const char *f = d == D_FLIP_DATA || d == D_TORN ? "r1"
			: d == D_END_DATA		? "end"
							: "r2";
	char p[400];
	snprintf(p, sizeof p, "%s/sessions/%s/%s", v->dir, v->resident, f);
	if (d == D_GONE) {
		REQUIRE(unlink(p) == 0, "unlink %s", p);
		return;
	}
	uint64_t n;
	uint8_t *b = slurp(p, &n);
	REQUIRE(b && n > 400, "%s", p);
	if (d == D_TORN)
		n /= 2;
	else if (d == D_FLIP_HDR)
		b[12] ^= 0x10; /* the header's kind */
	else
		b[n - 100] ^= 0x04; /* in the data */
	int fd = open(p, O_WRONLY | O_TRUNC);
	REQUIRE(fd >= 0 && write(fd, b, n) == (ssize_t)n, "write %s", p);
	close(fd);
	free(b);
}

static void damaged(int codec)
{
	for (int d = 0; d < D_N; d++)
		for (int m = M_SERIAL; m <= M_READER; m++)
			for (int plan = 0; plan < 2; plan++) {
				char what[128];
				snprintf(what, sizeof what,
					 "codec %d, %s, %s, %s", codec,
					 dmg_name[d], mode_name[m],
					 plan ? "a plan's restore" : "attach");
				conv v;
				conv_make(&v, "damaged", codec);
				damage(&v, d);
				if (plan)
					resident_drop(&v);
				toy_env e;
				mode_set(m);
				open_in(&e, &v, codec, "d");
				CHECK(e.ho.resident_len == 0,
				      "%s: nothing read back (%llu tokens)",
				      what,
				      (unsigned long long)e.ho.resident_len);
				int tier;
				uint64_t start;
				next_turn(&e, &v, what, &tier, &start);
				mode_unset();
				CHECK(tier != CACHE_TIER_SPILL,
				      "%s: not served from the spill", what);
				CHECK(toy_stat(e.c, "spill",
					       plan ? "hit_failed"
						    : "restore_failed") == 1,
				      "%s: the failure counted", what);
				CHECK(!entry_there(&v),
				      "%s: the entry is gone from the disk",
				      what);
				toy_close(&e);
				conv_free(&v);
			}
}

/* ---- the fault seam's Nth read ---- */

static int f_nth, f_seen, f_fired;

static int hook(int op, const char *name)
{
	(void)name;
	if (op != DFILE_OP_READ || ++f_seen != f_nth)
		return 0;
	f_fired = 1;
	return -EIO;
}

static void read_faults(void)
{
	conv v;
	conv_make(&v, "faults", 1);
	int n_max = 0, trials = 0, cold = 0;
	for (int n = 1;; n++) {
		uint64_t got[2] = {0, 0};
		int fired[2] = {0, 0};
		for (int m = M_SERIAL; m <= M_READER; m++) {
			char what[96];
			snprintf(what, sizeof what, "read %d fails, %s", n,
				 mode_name[m]);
			if (!entry_there(&v)) { /* the last trial cost it */
				conv_free(&v);
				conv_make(&v, "faults", 1);
			}
			resident_put(&v);
			f_nth = n;
			f_seen = f_fired = 0;
			toy_env e;
			mode_set(m);
			dfile_fault = hook;
			open_in(&e, &v, 1, "f");
			dfile_fault = NULL;
			mode_unset();
			fired[m] = f_fired;
			got[m] = e.ho.resident_len;
			CHECK(got[m] == 0 || (got[m] == v.valid &&
					      toy_equal(e.lay, &e.s, &v.truth,
							v.valid, what)),
			      "%s: a wrong restore served (%llu tokens)", what,
			      (unsigned long long)got[m]);
			cold += f_fired && !got[m];
			toy_close(&e);
			trials++;
		}
		CHECK(fired[0] == fired[1] && got[0] == got[1],
		      "read %d fails: serial %d (%llu tokens), reader %d "
		      "(%llu tokens)",
		      n, fired[0], (unsigned long long)got[0], fired[1],
		      (unsigned long long)got[1]);
		if (!fired[0] && !fired[1])
			break;
		n_max = n;
		REQUIRE(n < 100, "the seam never stops firing");
	}
	/* the index's manifest, the resident name, the manifest, 9 data
	 * files: a failed read of the last two kinds costs the entry (the
	 * first is read again: served whole) */
	CHECK(n_max == 12 && cold >= 2 * 10,
	      "the reads swept: %d, %d read-backs cold", n_max, cold);
	printf("test_spill_reader: %d read faults, %d trials\n", n_max, trials);
	conv_free(&v);
}

int main(void)
{
	moor_log_level = MOOR_LOG_ERROR;
	toy_tmpdir(root, sizeof root, "spill-reader");
	A = toy_ids(NTOK + 64, 23);
	attach_ways(1);
	attach_ways(0);
	restore_ways(1);
	restore_ways(0);
	damaged(1);
	damaged(0);
	read_faults();
	free(A);
	dfile_rm_rf(AT_FDCWD, root);
	return t_done("test_spill_reader");
}
