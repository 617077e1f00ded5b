/* test_spill_faults: a fault sweep of the session spill (SQLite's habit),
 * on the made-up architecture of toy.h (so the spill passes a third
 * layout with no edit in cached/).
 *
 * A trial: a cache holds a conversation (2,500 tokens: three spill blocks,
 * anchors, the end anchor), optionally over an older entry of the same
 * session on the disk, and drains while one thing goes wrong:
 *   - the Nth write, fsync or rename fails with ENOSPC or EIO, or the Nth
 *     write is cut short, for every N until no fault fires;
 *   - the drain is killed (SIGKILL, in a child process) at its Nth file
 *     operation, for every N;
 *   - after a good drain, a bit is flipped in every file of the entry at
 *     several places (header, sums, data, the end), or a file is torn (cut
 *     to half its length);
 * then a new cache attaches the same layout and reads back. What it
 * serves must be nothing (a cold start) or the conversation exactly:
 * every section and every view's rows equal to the drained cache's
 * (memcmp), and the next turn resumes at the end anchor and equals a cold
 * toy run's. Wrong restores served: 0. Every failure costs the entry (it
 * is gone from the disk) and the tier keeps working: a drain without a
 * fault then reads back exactly. Over an older entry, a save that fails
 * keeps that entry file for file and byte for byte (a failure before the
 * save's commit: its files landed beside the entry's) or costs it whole
 * (after: the directory is gone), and the sweep sees both.
 *
 * The suite runs every third N of the write faults; MOOR_FAULT_FULL=1 runs
 * every N (the bench target bench_spill_faults). The count of trials is
 * printed. */
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "dfile.h"
#include "moor.h"
#include "toy.h"

#define G 32
#define NTOK 2500

static char dir[256];
static int full;
static long trials, served_exact, served_cold, wrong;

/* ---- the fault seam ---- */
static int f_op, f_err, f_nth, f_seen, f_fired, f_kill;

static int hook(int op, const char *name)
{
	(void)name;
	if (f_kill) {
		if (++f_seen == f_nth) {
			f_fired = 1;
			raise(SIGKILL);
		}
		return 0;
	}
	if (op != f_op)
		return 0;
	if (++f_seen != f_nth)
		return 0;
	f_fired = 1;
	return f_err;
}

static void cfg_of(cache_cfg *cfg, const char *name)
{
	cache_cfg_defaults(cfg);
	snprintf(cfg->arena_prefix, sizeof cfg->arena_prefix, "moor-sf-%s-%d",
		 name, (int)getpid());
	cfg->device_bytes = 16ull << 20;
	cfg->host_bytes = 16ull << 20;
	cfg->mem_ceiling = cfg->mem_peak = 1ull << 40;
	cfg->resident_bytes = 40 * 1088;
	cfg->store_sessions = 0;
	cfg->store_bytes = 0;
	snprintf(cfg->spill_dir, sizeof cfg->spill_dir, "%s", dir);
	cfg->disk_min_free = 0; /* the spill under the tier's floor: none */
}

static long long stat_of(cache *c, const char *tier, const char *name)
{
	char *s = cache_stats_json(c);
	REQUIRE(s, "stats");
	char key[96];
	snprintf(key, sizeof key, "\"%s\":{", tier);
	char *p = strstr(s, key);
	REQUIRE(p, "no %s", tier);
	snprintf(key, sizeof key, "\"%s\":", name);
	char *q = strstr(p, key);
	REQUIRE(q, "no %s.%s", tier, name);
	long long v = strtoll(q + strlen(key), NULL, 10);
	free(s);
	return v;
}

static int32_t *A, *A2, *A3;
static long kept_old, lost_old;

/* ---- the older entry's files ---- */

/* The one entry directory under DIR/sessions (the sweep wipes between
 * trials); 0 when there is none. */
static int the_entry(char *out, size_t n)
{
	char p[300];
	snprintf(p, sizeof p, "%s/sessions", dir);
	DIR *d = opendir(p);
	if (!d)
		return 0;
	struct dirent *e;
	int got = 0;
	while ((e = readdir(d)))
		if (e->d_type == DT_DIR && e->d_name[0] != '.') {
			snprintf(out, n, "%s/%.64s", p, e->d_name);
			got++;
		}
	closedir(d);
	REQUIRE(got <= 1, "%d entries", got);
	return got;
}

typedef struct files_snap {
	int n;
	char name[16][32];
	uint8_t *b[16];
	uint64_t len[16];
} files_snap;

static void snap_take(const char *ed, files_snap *s)
{
	memset(s, 0, sizeof *s);
	DIR *d = opendir(ed);
	REQUIRE(d, "opendir %s", ed);
	struct dirent *e;
	while ((e = readdir(d)))
		if (e->d_name[0] != '.') {
			REQUIRE(s->n < 16, "files");
			snprintf(s->name[s->n++], 32, "%.31s", e->d_name);
		}
	closedir(d);
	qsort(s->name, (size_t)s->n, 32,
	      (int (*)(const void *, const void *))strcmp);
	for (int i = 0; i < s->n; i++) {
		char p[700];
		snprintf(p, sizeof p, "%s/%s", ed, s->name[i]);
		int fd = open(p, O_RDONLY);
		REQUIRE(fd >= 0, "open %s", p);
		struct stat st;
		REQUIRE(fstat(fd, &st) == 0, "stat");
		s->len[i] = (uint64_t)st.st_size;
		s->b[i] = malloc(s->len[i] + 1);
		REQUIRE(s->b[i] &&
			    read(fd, s->b[i], s->len[i]) == (ssize_t)s->len[i],
			"read %s", p);
		close(fd);
	}
}

static void snap_free(files_snap *s)
{
	for (int i = 0; i < s->n; i++)
		free(s->b[i]);
}

static int snap_same(const files_snap *a, const files_snap *b)
{
	if (a->n != b->n)
		return 0;
	for (int i = 0; i < a->n; i++)
		if (strcmp(a->name[i], b->name[i]) || a->len[i] != b->len[i] ||
		    memcmp(a->b[i], b->b[i], a->len[i]))
			return 0;
	return 1;
}
static int32_t gen1[64], gen2[64];

/* The conversation the trials drain: turn 1 (A, 2,400 tokens) and turn 2
 * (A + the answer + 96 tokens): its state, taken whole. */
typedef struct truth {
	toy_seq s;
	uint64_t valid;
} truth;

static void seq_copy(const cache_layout *l, toy_seq *dst, const toy_seq *src)
{
	memcpy(dst->sec[0], src->sec[0], TOY_S0);
	memcpy(dst->sec[1], src->sec[1], TOY_S1);
	for (uint32_t i = 0; i < 3; i++) {
		uint64_t outer, inner;
		toy_geom(&l->view[i], &outer, &inner);
		memcpy(dst->view[i], src->view[i],
		       outer * inner * l->view[i].elt * l->window);
	}
}

/* Opens a cache and runs the conversation to turn `turns` (1 or 2). */
static void conv(toy_env *e, int turns)
{
	cache_cfg cfg;
	cfg_of(&cfg, "a");
	toy_open(e, &cfg, 4096, G);
	toy_turn t;
	REQUIRE(toy_run(e, A, 2400, "s", 4, &t, 0, "turn 1") == 0, "turn 1");
	memcpy(gen1, t.gen, sizeof gen1);
	if (turns < 2)
		return;
	REQUIRE(toy_run(e, A2, 2500, "s", 4, &t, 0, "turn 2") == 0, "turn 2");
	memcpy(gen2, t.gen, sizeof gen2);
}

/* A new cache reads back; what it serves is judged. */
static void judge(const truth *T, const char *what)
{
	cache_cfg cfg;
	cfg_of(&cfg, "b");
	toy_env e;
	toy_open(&e, &cfg, 4096, G);
	uint64_t v = e.ho.resident_len;
	trials++;
	if (v == 0) {
		served_cold++;
		CHECK(stat_of(e.c, "spill", "entries") == 0 ||
			  stat_of(e.c, "spill", "restore_failed") == 0,
		      "%s: a failed restore left its entry", what);
	} else if (v == T->valid && toy_equal(e.lay, &e.s, &T->s, v, what)) {
		served_exact++;
		/* the next turn from the restored end anchor, against cold */
		toy_turn t;
		int32_t *P = toy_cat(A3, 2500 + 4, A + 100, 40);
		int rc = toy_run(&e, P, 2544, "s", 3, &t, 1, what);
		CHECK(rc == 0 && t.plan.tier == CACHE_TIER_END &&
			  t.plan.start == T->valid,
		      "%s: the next turn resumes at the end anchor %llu: %s "
		      "at %llu",
		      what, (unsigned long long)T->valid,
		      cache_tier_name(t.plan.tier),
		      (unsigned long long)t.plan.start);
		free(P);
	} else {
		wrong++;
		CHECK(0, "%s: a wrong restore served (%llu tokens, want %llu)",
		      what, (unsigned long long)v,
		      (unsigned long long)T->valid);
	}
	toy_close(&e);
}

static void wipe(void)
{
	char p[300];
	snprintf(p, sizeof p, "%s/sessions", dir);
	dfile_rm_rf(AT_FDCWD, p);
}

/* The tier still works after whatever a trial left. */
static void still_works(const truth *T, const char *what)
{
	toy_env e;
	conv(&e, 2);
	char err[MOOR_ERRLEN] = "";
	CHECK(cache_drain(e.c, err) == 0, "%s: a clean drain after: %s", what,
	      err);
	toy_close(&e);
	cache_cfg cfg;
	cfg_of(&cfg, "b");
	toy_open(&e, &cfg, 4096, G);
	CHECK(e.ho.resident_len == T->valid &&
		  toy_equal(e.lay, &e.s, &T->s, T->valid, what),
	      "%s: the tier works again", what);
	toy_close(&e);
}

/* Write faults: kind op, error err, every N (every third in the suite). */
static void sweep_errors(const truth *T, int old_entry)
{
	static const int ops[] = {DFILE_OP_WRITE, DFILE_OP_FSYNC,
				  DFILE_OP_RENAME};
	static const int errs[] = {-ENOSPC, -EIO, DFILE_SHORT};
	for (int oi = 0; oi < 3; oi++)
		for (int ei = 0; ei < 3; ei++) {
			if (errs[ei] == DFILE_SHORT && ops[oi] != DFILE_OP_WRITE)
				continue;
			for (int n = 1;; n += full ? 1 : 3) {
				wipe();
				if (old_entry) { /* turn 1's entry on disk */
					toy_env e;
					conv(&e, 1);
					char err[MOOR_ERRLEN];
					REQUIRE(cache_drain(e.c, err) == 0,
						"old entry: %s", err);
					toy_close(&e);
				}
				toy_env e;
				conv(&e, 2);
				char ed[400] = "";
				files_snap old;
				memset(&old, 0, sizeof old);
				if (old_entry) {
					REQUIRE(the_entry(ed, sizeof ed),
						"the older entry");
					snap_take(ed, &old);
				}
				f_op = ops[oi];
				f_err = errs[ei];
				f_nth = n;
				f_seen = f_fired = f_kill = 0;
				dfile_fault = hook;
				char err[MOOR_ERRLEN] = "";
				int rc = cache_drain(e.c, err);
				dfile_fault = NULL;
				long long sf =
				    stat_of(e.c, "spill", "save_failed");
				toy_close(&e);
				char what[96];
				snprintf(what, sizeof what,
					 "op %d err %d n %d old %d", ops[oi],
					 errs[ei], n, old_entry);
				if (f_fired && ops[oi] != DFILE_OP_FSYNC)
					CHECK(rc != 0, "%s: the drain said ok",
					      what);
				/* a failed save over the older entry: kept
				 * whole (its manifest there) or gone whole */
				if (old_entry && sf) {
					char mp[500];
					snprintf(mp, sizeof mp, "%s/manifest",
						 ed);
					struct stat st;
					if (stat(mp, &st) == 0) {
						files_snap now;
						snap_take(ed, &now);
						CHECK(snap_same(&old, &now),
						      "%s: the older entry "
						      "is not as it was",
						      what);
						snap_free(&now);
						kept_old++;
					} else {
						CHECK(stat(ed, &st) != 0,
						      "%s: a failed save "
						      "left a half entry",
						      what);
						lost_old++;
					}
				}
				snap_free(&old);
				judge(T, what);
				if (!f_fired)
					break;
			}
		}
	still_works(T, "after the error sweep");
}

/* SIGKILL at the drain's Nth file operation, for every N. */
static void sweep_kill(const truth *T)
{
	for (int n = 1;; n++) {
		wipe();
		toy_env e;
		conv(&e, 2);
		fflush(NULL);
		pid_t p = fork();
		REQUIRE(p >= 0, "fork");
		if (p == 0) {
			f_kill = 1;
			f_nth = n;
			f_seen = 0;
			dfile_fault = hook;
			char err[MOOR_ERRLEN];
			cache_drain(e.c, err);
			_exit(0); /* ran through: no fault at n */
		}
		int st;
		REQUIRE(waitpid(p, &st, 0) == p, "waitpid");
		toy_close(&e);
		char what[64];
		snprintf(what, sizeof what, "kill -9 at file op %d", n);
		judge(T, what);
		if (WIFEXITED(st))
			break;
	}
}

static const char *const files[] = {"manifest", "r0",	  "r1",	  "r2",
				    "end",	"a2400", "a2496", NULL};

/* A good drain, then damage to one file of the entry. */
static void sweep_damage(const truth *T)
{
	/* flips at np places spread over the file (the suite: 8, the full
	 * sweep: 128), then the torn copy */
	int np = full ? 128 : 8;
	for (int fi = 0; files[fi]; fi++)
		for (int k = 0; k <= np; k++) {
			wipe();
			toy_env e;
			conv(&e, 2);
			char err[MOOR_ERRLEN];
			REQUIRE(cache_drain(e.c, err) == 0, "drain: %s", err);
			toy_close(&e);
			/* the entry's one directory */
			char p[300], ent[700] = "";
			snprintf(p, sizeof p, "%s/sessions", dir);
			int dfd = open(p, O_RDONLY | O_DIRECTORY);
			REQUIRE(dfd >= 0, "sessions");
			char rn[64] = "";
			int rf = openat(dfd, "resident", O_RDONLY);
			REQUIRE(rf >= 0 && read(rf, rn, 16) == 16, "resident");
			close(rf);
			close(dfd);
			snprintf(ent, sizeof ent, "%s/%s/%s", p, rn, files[fi]);
			int fd = open(ent, O_RDWR);
			REQUIRE(fd >= 0, "open %s", ent);
			struct stat st;
			fstat(fd, &st);
			uint64_t sz = (uint64_t)st.st_size;
			char what[128];
			if (k == np) { /* torn */
				REQUIRE(ftruncate(fd, (off_t)(sz / 2)) == 0,
					"truncate");
				snprintf(what, sizeof what, "%s torn", files[fi]);
			} else {
				/* the header and sums first, then the data */
				static const double at[8] = {0.0, 0.03, 0.06,
							     0.2, 0.5, 0.8,
							     0.97, 1.0};
				double f = np == 8 ? at[k]
						   : (double)k / (double)(np - 1);
				uint64_t o = (uint64_t)(f * (double)(sz - 1));
				if (np != 8 && k < 32)
					o = (uint64_t)k * 5 % sz; /* headers */
				uint8_t b;
				REQUIRE(pread(fd, &b, 1, (off_t)o) == 1, "pread");
				b ^= (uint8_t)(1u << (k % 8));
				REQUIRE(pwrite(fd, &b, 1, (off_t)o) == 1, "pwrite");
				snprintf(what, sizeof what,
					 "%s: a bit flipped at byte %llu of "
					 "%llu",
					 files[fi], (unsigned long long)o,
					 (unsigned long long)sz);
			}
			close(fd);
			judge(T, what);
		}
	still_works(T, "after the damage sweep");
}

int main(void)
{
	moor_log_level = MOOR_LOG_ERROR;
	full = getenv("MOOR_FAULT_FULL") && atoi(getenv("MOOR_FAULT_FULL"));
	/* on tmpfs where there is one: the sweep tests the order of the
	 * operations and what a failure leaves, not the drive (an fsync per
	 * file on a shared disk made it 30 s) */
	toy_tmpdir(dir, sizeof dir, "spill-faults");
	A = toy_ids(NTOK, 91);
	/* turn 1: A[0, 2400); turn 2: A[0, 2400) + its 4 tokens + 96 more */
	toy_env e;
	{
		cache_cfg cfg;
		cfg_of(&cfg, "t");
		toy_open(&e, &cfg, 4096, G);
		toy_turn t;
		REQUIRE(toy_run(&e, A, 2400, "s", 4, &t, 1, "t1") == 0, "t1");
		A2 = toy_cat(A, 2400, t.gen, 4);
		int32_t *x = toy_cat(A2, 2404, A + 2404, 96);
		free(A2);
		A2 = x;
		REQUIRE(toy_run(&e, A2, 2500, "s", 4, &t, 1, "t2") == 0, "t2");
		A3 = toy_cat(A2, 2500, t.gen, 4);
		toy_close(&e);
	}
	truth T;
	conv(&e, 2);
	T.valid = 2503;
	CHECK(stat_of(e.c, "resident", "tokens") == 2503, "2503 resident");
	toy_seq_alloc(e.lay, &T.s);
	seq_copy(e.lay, &T.s, &e.s);
	toy_close(&e);

	sweep_errors(&T, 0);
	sweep_errors(&T, 1);
	/* the older entry: failures before the commit keep it, after it
	 * cost it; the sweep sees both */
	CHECK(kept_old > 0 && lost_old > 0,
	      "failed saves over an older entry: %ld kept it, %ld cost it",
	      kept_old, lost_old);
	sweep_kill(&T);
	sweep_damage(&T);

	printf("test_spill_faults: %ld trials: %ld served exactly, %ld cold, "
	       "%ld wrong; failed saves over an older entry: %ld kept it "
	       "whole, %ld cost it\n",
	       trials, served_exact, served_cold, wrong, kept_old, lost_old);
	CHECK(wrong == 0, "wrong restores served: %ld", wrong);
	CHECK(served_exact > 0 && served_cold > 0,
	      "the sweep saw both outcomes");
	toy_seq_free(&T.s);
	free(A);
	free(A2);
	free(A3);
	dfile_rm_rf(AT_FDCWD, dir);
	return t_done("test_spill_faults");
}
