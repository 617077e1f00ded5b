/* test_disk_sweep: a fault sweep of the disk tier (SQLite's habit), on the
 * made-up architecture of toy.h (so the tier passes a third layout with no
 * edit in cached/).
 *
 * A trial: a cache writes a head (A, 1,200 tokens, a session's first long
 * request: 4 head anchors and the 37 grid chunks below them, grid 32)
 * while one thing goes wrong in the writer:
 *   - the Nth write, fsync or rename fails with ENOSPC or EIO, or the Nth
 *     write is cut short, for every N until no fault fires;
 *   - the process is killed (SIGKILL, in a child) at the writer's Nth file
 *     operation, for every N;
 *   - after a good write, the Nth read of the restore fails with EIO (on
 *     its reader thread), for every N until none fires;
 *   - after a good write, a bit is flipped in a chunk or an anchor file at
 *     several places (header, sums, ids, rows or sections, the padding),
 *     or the file is torn (cut to half its length);
 * then a new cache serves a prompt that shares 1,150 tokens with A. It
 * must resume from the disk (at 1,120) or start cold, and either way its
 * state and greedy tokens equal a cold toy run's. Wrong restores served:
 * 0; a failed restore is counted (hit_failed) and its file is gone; a file
 * whose header or size the open's check refuses is dropped there (orphans),
 * and a lower line of its chain may serve.
 *
 * The suite runs every 5th N of the write faults and every 4th of the
 * kills; MOOR_FAULT_FULL=1 runs every N and 64 flips a file (the bench
 * target bench_disk_sweep). The count of trials is printed. A killed child
 * never unlinks its arenas: the parent does, and checks at the end that
 * none of its children's is left in /dev/shm. */
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "dfile.h"
#include "moor.h"
#include "toy.h"

#define G 32
#define NA 1200

static char dir[256];
static int full;
static long trials, served_disk, served_cold, wrong, r_trials;
static int32_t *A, *Q;

static volatile int f_op, f_err, f_nth, f_seen, f_fired, f_kill;

static int hook(int op, const char *name)
{
	(void)name;
	if (op == DFILE_OP_READ)
		return 0;
	if (f_kill) {
		if (++f_seen == f_nth) {
			f_fired = 1;
			raise(SIGKILL);
		}
		return 0;
	}
	if (op != f_op || ++f_seen != f_nth)
		return 0;
	f_fired = 1;
	return f_err;
}

/* The arenas' prefix of the cache `name` of process pid. */
static void prefix_of(char *out, size_t n, const char *name, pid_t pid)
{
	snprintf(out, n, "moor-ds-%s-%d", name, (int)pid);
}

static void cfg_of(cache_cfg *cfg, const char *name)
{
	toy_cfg_disk(cfg, "ds", name, dir);
}

static long long stat_of(cache *c, const char *name)
{
	char *s = cache_stats_json(c);
	REQUIRE(s, "stats");
	char *p = strstr(s, "\"disk\":{");
	REQUIRE(p, "no disk");
	char key[96];
	snprintf(key, sizeof key, "\"%s\":", name);
	char *q = strstr(p, key);
	REQUIRE(q, "no disk.%s", name);
	long long v = strtoll(q + strlen(key), NULL, 10);
	free(s);
	return v;
}

static void wipe(void)
{
	char p[300];
	snprintf(p, sizeof p, "%s/disk", dir);
	dfile_rm_rf(AT_FDCWD, p);
}

/* A's head, written through the writer (the hook armed by the caller). */
static void write_head(void)
{
	cache_cfg cfg;
	cfg_of(&cfg, "a");
	toy_env e;
	toy_open(&e, &cfg, 4096, G);
	toy_turn t;
	REQUIRE(toy_run(&e, A, NA, "s", 4, &t, 0, "A") == 0, "A");
	cache_disk_wait(e.c);
	toy_close(&e);
}

/* The fault hook of the judging cache's reads (sweep_reads): the Nth read
 * of a file fails with EIO. Reads run on the restore's reader thread. */
static int (*judge_hook)(int op, const char *name);
static atomic_int r_seen, r_fired;

static int rhook(int op, const char *name)
{
	(void)name;
	if (op != DFILE_OP_READ || atomic_fetch_add(&r_seen, 1) + 1 != f_nth)
		return 0;
	atomic_store(&r_fired, 1);
	return -EIO;
}

/* A new cache serves Q; what it serves is judged against a cold run. */
static void judge(const char *what, int want_disk)
{
	dfile_fault = judge_hook;
	cache_cfg cfg;
	cfg_of(&cfg, "b");
	toy_env e;
	toy_open(&e, &cfg, 4096, G);
	toy_turn t;
	int rc = toy_run(&e, Q, NA + 50, "q", 3, &t, 1, what);
	trials++;
	if (rc) {
		wrong++;
		CHECK(0, "%s: a wrong restore served (%s at %llu)", what,
		      cache_tier_name(t.plan.tier),
		      (unsigned long long)t.plan.start);
	} else if (t.plan.tier == CACHE_TIER_DISK) {
		served_disk++;
		/* a file whose header or size the open's check refused is
		 * gone (orphans): a lower line of the chain serves */
		CHECK(t.plan.start <= 1120 && t.plan.start % G == 0 &&
			  (!want_disk || t.plan.start == 1120 ||
			   stat_of(e.c, "orphans") > 0),
		      "%s: from the disk at %llu", what,
		      (unsigned long long)t.plan.start);
	} else {
		served_cold++;
		CHECK(t.plan.start == 0, "%s: cold", what);
		if (want_disk)
			CHECK(stat_of(e.c, "hit_failed") <= 1,
			      "%s: one failed restore at most", what);
	}
	dfile_fault = NULL;
	cache_disk_wait(e.c);
	toy_close(&e);
}

/* A read of the restore fails (the Nth, for every N until none fires):
 * the entry is lost, never the answer, and nothing wrong is served. */
static void sweep_reads(void)
{
	for (int n = 1;; n += full ? 1 : 5) {
		wipe();
		write_head();
		f_nth = n;
		atomic_store(&r_seen, 0);
		atomic_store(&r_fired, 0);
		judge_hook = rhook;
		char what[64];
		snprintf(what, sizeof what, "read %d fails (EIO)", n);
		judge(what, 0);
		judge_hook = NULL;
		if (!atomic_load(&r_fired))
			break;
		r_trials++;
	}
}

static void sweep_errors(void)
{
	static const int ops[] = {DFILE_OP_WRITE, DFILE_OP_FSYNC,
				  DFILE_OP_RENAME};
	static const int errs[] = {-ENOSPC, -EIO, DFILE_SHORT};
	for (int oi = 0; oi < 3; oi++)
		for (int ei = 0; ei < 3; ei++) {
			if (errs[ei] == DFILE_SHORT &&
			    ops[oi] != DFILE_OP_WRITE)
				continue;
			for (int n = 1;; n += full ? 1 : 5) {
				wipe();
				f_op = ops[oi];
				f_err = errs[ei];
				f_nth = n;
				f_seen = f_fired = f_kill = 0;
				dfile_fault = hook;
				write_head();
				dfile_fault = NULL;
				char what[96];
				snprintf(what, sizeof what, "op %d err %d n %d",
					 ops[oi], errs[ei], n);
				int fired = f_fired;
				judge(what, 0);
				if (!fired)
					break;
			}
		}
}

/* The children sweep_kill forked: none may leave an arena behind. */
static pid_t kids[4096];
static int n_kids;

static int arena_left(pid_t pid)
{
	char pre[64], nm[80];
	int left = 0;
	prefix_of(pre, sizeof pre, "a", pid);
	for (int h = 0; h < 2; h++) {
		snprintf(nm, sizeof nm, "/%s.%s", pre, h ? "host" : "dev");
		int fd = shm_open(nm, O_RDONLY, 0);
		if (fd >= 0) {
			close(fd);
			left++;
		}
	}
	return left;
}

static void sweep_kill(void)
{
	for (int n = 1;; n += full ? 1 : 4) {
		wipe();
		fflush(NULL);
		pid_t p = fork();
		REQUIRE(p >= 0, "fork");
		if (p == 0) {
			f_kill = 1;
			f_nth = n;
			f_seen = 0;
			dfile_fault = hook;
			write_head();
			_exit(0); /* ran through: no fault at n */
		}
		int st;
		REQUIRE(waitpid(p, &st, 0) == p, "waitpid");
		if (n_kids < (int)(sizeof kids / sizeof *kids))
			kids[n_kids++] = p;
		/* a child killed mid-write never unlinked its arenas */
		char pre[64], nm[80];
		prefix_of(pre, sizeof pre, "a", p);
		snprintf(nm, sizeof nm, "/%s.dev", pre);
		shm_unlink(nm);
		snprintf(nm, sizeof nm, "/%s.host", pre);
		shm_unlink(nm);
		char what[64];
		snprintf(what, sizeof what, "kill -9 at file op %d", n);
		judge(what, 0);
		if (WIFEXITED(st))
			break;
	}
}

static void sweep_damage(void)
{
	static const struct {
		char k;
		uint64_t line;
	} files[] = {{'c', 32}, {'c', 640}, {'c', 1120}, {'a', 1120}};
	int np = full ? 64 : 8;
	for (int fi = 0; fi < 4; fi++)
		for (int k = 0; k <= np; k++) {
			wipe();
			write_head();
			char p[600];
			REQUIRE(toy_file_at(dir, files[fi].k, files[fi].line, p,
					    sizeof p),
				"file %c %llu", files[fi].k,
				(unsigned long long)files[fi].line);
			int fd = open(p, O_RDWR);
			REQUIRE(fd >= 0, "open %s", p);
			struct stat st;
			fstat(fd, &st);
			uint64_t sz = (uint64_t)st.st_size;
			char what[160];
			if (k == np) {
				REQUIRE(ftruncate(fd, (off_t)(sz / 2)) == 0,
					"truncate");
				snprintf(what, sizeof what, "%c %llu torn",
					 files[fi].k,
					 (unsigned long long)files[fi].line);
			} else {
				/* the header's fields and sums, the ids, the
				 * rows, the padding */
				static const uint64_t at8[8] = {
				    0, 9, 40, 130, 4100, 4300, 6000, 1u << 30};
				uint64_t o =
				    np == 8 ? at8[k] : (uint64_t)k * 997 % sz;
				if (o >= sz)
					o = sz - 1;
				uint8_t b;
				REQUIRE(pread(fd, &b, 1, (off_t)o) == 1,
					"pread");
				b ^= (uint8_t)(1u << (k % 8));
				REQUIRE(pwrite(fd, &b, 1, (off_t)o) == 1,
					"pwrite");
				snprintf(what, sizeof what,
					 "%c %llu: a bit flipped at byte %llu "
					 "of %llu",
					 files[fi].k,
					 (unsigned long long)files[fi].line,
					 (unsigned long long)o,
					 (unsigned long long)sz);
			}
			close(fd);
			judge(what, 1);
		}
}

int main(void)
{
	moor_log_level = MOOR_LOG_ERROR;
	full = getenv("MOOR_FAULT_FULL") && atoi(getenv("MOOR_FAULT_FULL"));
	/* on tmpfs where there is one (O_DIRECT falls back to fadvise
	 * there): the sweep tests the order of the operations and what a
	 * failure leaves, not the drive */
	toy_tmpdir(dir, sizeof dir, "disk-sweep");
	A = toy_ids(NA, 121);
	int32_t *B = toy_ids(100, 122);
	Q = toy_cat(A, 1150, B, 100);
	toy_part(Q, A, 1150);

	/* a good write serves from the disk */
	wipe();
	write_head();
	judge("no fault", 1);
	CHECK(served_disk == 1, "without a fault Q resumes from the disk");

	sweep_errors();
	sweep_reads();
	CHECK(r_trials >= 2, "the read sweep failed %ld reads", r_trials);
	sweep_kill();
	sweep_damage();
	/* the tier works after all of it */
	wipe();
	write_head();
	long d0 = served_disk;
	judge("after the sweeps", 1);
	CHECK(served_disk == d0 + 1, "the tier works after the sweeps");

	int left = 0;
	for (int i = 0; i < n_kids; i++)
		left += arena_left(kids[i]);
	CHECK(left == 0, "%d arenas of %d killed children left in /dev/shm",
	      left, n_kids);
	printf("test_disk_sweep: %ld trials: %ld from the disk, %ld cold, "
	       "%ld wrong\n",
	       trials, served_disk, served_cold, wrong);
	CHECK(wrong == 0, "wrong restores served: %ld", wrong);
	CHECK(served_disk > 1 && served_cold > 0,
	      "the sweep saw both outcomes");
	free(A);
	free(B);
	free(Q);
	dfile_rm_rf(AT_FDCWD, dir);
	return t_done("test_disk_sweep");
}
