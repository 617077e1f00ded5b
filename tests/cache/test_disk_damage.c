/* test_disk_damage: damage under the disk tier costs what it must and no
 * more, with a clear line and never a crash of cached (the made-up
 * architecture of toy.h). Each trial writes A's head (1,200 tokens, a
 * session's first long request: 4 anchors, 37 chunks, grid 32), damages
 * something, and a new cache serves Q (1,150 tokens of A, then others),
 * judged against a cold toy run (a wrong restore served fails the test):
 *   - the index (LMDB's data.mdb) cut to 0 bytes, to half, its two meta
 *     pages overwritten, a page in its middle overwritten, every byte
 *     zeroed: the open reads the index whole in a child process first
 *     (kvdb.h), finds it damaged, moves it aside and rebuilds it from the
 *     files' headers, so nothing is lost: Q resumes from the disk at
 *     1,120, bit for bit, and the stats say index_rebuilt;
 *   - a sweep: a byte flipped at six places of every third page of the
 *     index (every page with MOOR_FAULT_FULL=1), a trial each: no crash,
 *     no wrong restore, from the disk or cold;
 *   - a flipped byte in a chunk's rows: that chunk is lost (Q prefills
 *     cold, bit for bit; hit_failed; the file deleted and written again
 *     by that prefill) and nothing else: Q then resumes from the disk;
 *   - the ledger's data.mdb overwritten: cached opens, the day's count
 *     starts over (logged), the tier writes;
 *   - a full disk, for real: a 4 MiB tmpfs in a mount namespace of a
 *     child's own (skipped where none can be made), filled by another
 *     file after the tiers opened: A's head is not written (the floor is
 *     reported, no .tmp left) and its answer is a cold prefill's; the
 *     drain fails (ENOSPC) with a clear error; once the filler goes B's
 *     head and the drain are written; full again, the drain of B's next
 *     turn is not tried over B's entry (too little room to rewrite it),
 *     which serves that turn from the spill once there is room; C's head
 *     takes the
 *     room of the least valuable files of the tier's own (evicted) and
 *     serves a prompt that shares it, bit for bit;
 *   - the spill under the tier's free-space floor, in a tmpfs of its own:
 *     with the floor over the free space the drain is not made (MOOR_
 *     ENOSPACE, the numbers in its line, floor_binds, no entry left),
 *     nor an eviction's save (said; the request is a cold run's);
 *     with the floor 16 KiB under it, B's drain first removes A's entry
 *     (the least recently used; one line), writes B, keeps the floor,
 *     and B is read back. */
#include <dirent.h>
#include <fcntl.h>
#include <jansson.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cache_int.h"
#include "dfile.h"
#include "moor.h"
#include "mountns.h"
#include "toy.h"

#define G 32
#define NA 1200

static char dir[200];
static int32_t *A, *Q;

static void cfg_of(cache_cfg *cfg, const char *name)
{
	cache_cfg_defaults(cfg);
	snprintf(cfg->arena_prefix, sizeof cfg->arena_prefix, "moor-ddm-%s-%d",
		 name, (int)getpid());
	cfg->device_bytes = 16ull << 20;
	cfg->host_bytes = 16ull << 20;
	cfg->mem_ceiling = cfg->mem_peak = 1ull << 40;
	cfg->resident_bytes = 40 * 1088;
	cfg->store_sessions = 0;
	cfg->store_bytes = 0;
	cfg->spill_codec = 0;
	memcpy(cfg->spill_dir, dir, sizeof dir); /* 200 of its 256 bytes */
	cfg->disk_min_tokens = 256;
	cfg->disk_min_free = 0;
}

static long long st2(cache *c, const char *a, const char *b)
{
	char *s = cache_stats_json(c);
	json_t *r = json_loads(s, 0, NULL);
	free(s);
	REQUIRE(r, "stats");
	json_t *v = json_object_get(json_object_get(r, a), b);
	long long x = json_is_integer(v) ? json_integer_value(v) : -1;
	if (x < 0 && getenv("T_VERBOSE")) {
		char *d = json_dumps(json_object_get(r, a), 0);
		fprintf(stderr, "stats %s: %s\n", a, d ? d : "(none)");
		free(d);
	}
	json_decref(r);
	return x;
}

static void wipe(void)
{
	char p[300];
	snprintf(p, sizeof p, "%s/disk", dir);
	dfile_rm_rf(AT_FDCWD, p);
	snprintf(p, sizeof p, "%s/ledger", dir);
	dfile_rm_rf(AT_FDCWD, p);
	snprintf(p, sizeof p, "%s/sessions", dir);
	dfile_rm_rf(AT_FDCWD, p);
}

static void write_head(const int32_t *ids, const char *session)
{
	cache_cfg cfg;
	cfg_of(&cfg, "w");
	toy_env e;
	toy_open(&e, &cfg, 4096, G);
	toy_turn t;
	REQUIRE(toy_run(&e, ids, NA, session, 4, &t, 0, "head") == 0, "head");
	cache_disk_wait(e.c);
	toy_close(&e);
}

/* A new cache serves Q: 1 from the disk at 1120 (or above, once Q wrote
 * its own head), 0 cold; a wrong restore
 * fails the test. *rebuilt, *failed: the stats after. */
static int judge(const char *what, long long *rebuilt, long long *failed)
{
	cache_cfg cfg;
	cfg_of(&cfg, "j");
	toy_env e;
	toy_open(&e, &cfg, 4096, G);
	toy_turn t;
	int rc = toy_run(&e, Q, NA + 50, "q", 3, &t, 1, what);
	CHECK(rc == 0, "%s: a wrong restore served (%s at %llu)", what,
	      cache_tier_name(t.plan.tier), (unsigned long long)t.plan.start);
	int disk = t.plan.tier == CACHE_TIER_DISK && t.plan.start >= 1120;
	CHECK(disk || t.plan.start == 0, "%s: %s at %llu", what,
	      cache_tier_name(t.plan.tier), (unsigned long long)t.plan.start);
	if (rebuilt)
		*rebuilt = st2(e.c, "disk", "index_rebuilt");
	if (failed)
		*failed = st2(e.c, "disk", "hit_failed");
	cache_disk_wait(e.c);
	toy_close(&e);
	return disk;
}

/* Overwrites [off, off + n) of path with a pattern (or zeros). */
static void smash(const char *path, off_t off, size_t n, int zero)
{
	int fd = open(path, O_RDWR);
	REQUIRE(fd >= 0, "open %s", path);
	uint8_t *b = malloc(n);
	for (size_t i = 0; i < n; i++)
		b[i] = zero ? 0 : (uint8_t)(i * 131 + 17);
	REQUIRE(pwrite(fd, b, n, off) == (ssize_t)n, "pwrite");
	free(b);
	close(fd);
}

static void index_trials(void)
{
	char p[400];
	snprintf(p, sizeof p, "%s/disk/index/data.mdb", dir);
	static const char *const kinds[] = {
	    "cut to 0 bytes", "cut to half", "its meta pages overwritten",
	    "a middle page overwritten", "zeroed"};
	for (int k = 0; k < 5; k++) {
		wipe();
		write_head(A, "s");
		struct stat st;
		REQUIRE(stat(p, &st) == 0, "stat %s", p);
		off_t sz = st.st_size;
		switch (k) {
		case 0:
			REQUIRE(truncate(p, 0) == 0, "truncate");
			break;
		case 1:
			REQUIRE(truncate(p, sz / 2 / 4096 * 4096) == 0,
				"truncate");
			break;
		case 2:
			smash(p, 0, 8192, 0);
			break;
		case 3:
			smash(p, sz / 2 / 4096 * 4096, 4096, 0);
			break;
		case 4:
			smash(p, 0, (size_t)sz, 1);
			break;
		}
		char what[96];
		snprintf(what, sizeof what, "the index %s", kinds[k]);
		long long rb = 0;
		int disk = judge(what, &rb, NULL);
		/* a middle page may be a free one: then nothing is damaged */
		CHECK(disk && (rb == 1 || k == 3),
		      "%s: nothing lost (Q from the disk: %d, rebuilt %lld)",
		      what, disk, rb);
	}
}

/* SQLite's habit: a byte flipped at several places of every page of the
 * index, one trial each (every 3rd page in the suite; MOOR_FAULT_FULL=1:
 * every page): the open never crashes, Q is never served a wrong restore,
 * and the tier serves or prefills cold. */
static void index_sweep(void)
{
	int full = getenv("MOOR_FAULT_FULL") && atoi(getenv("MOOR_FAULT_FULL"));
	char p[400];
	snprintf(p, sizeof p, "%s/disk/index/data.mdb", dir);
	static const int at[] = {0, 16, 40, 100, 2000, 4090};
	long trials = 0, disk = 0;
	for (uint64_t pg = 0;; pg += full ? 1 : 3) {
		wipe();
		write_head(A, "s");
		struct stat st;
		REQUIRE(stat(p, &st) == 0, "stat");
		if ((pg + 1) * 4096 > (uint64_t)st.st_size)
			break;
		for (int k = 0; k < 6; k++) {
			if (k) { /* the head again for the next flip */
				wipe();
				write_head(A, "s");
			}
			int fd = open(p, O_RDWR);
			REQUIRE(fd >= 0, "open");
			uint8_t b;
			off_t o = (off_t)(pg * 4096 + (uint64_t)at[k]);
			REQUIRE(pread(fd, &b, 1, o) == 1, "pread");
			b ^= 0x5a;
			REQUIRE(pwrite(fd, &b, 1, o) == 1, "pwrite");
			close(fd);
			char what[96];
			snprintf(what, sizeof what, "index page %llu byte %d",
				 (unsigned long long)pg, at[k]);
			int dk = judge(what, NULL, NULL);
			if (!dk && getenv("T_VERBOSE"))
				fprintf(stderr, "cold: %s\n", what);
			disk += dk;
			trials++;
		}
	}
	printf("index sweep: %ld trials, %ld served from the disk, the rest "
	       "cold, 0 wrong\n",
	       trials, disk);
	CHECK(trials >= 6, "the sweep ran: %ld", trials);
}

static void chunk_trial(void)
{
	wipe();
	write_head(A, "s");
	char p[600];
	REQUIRE(toy_file_at(dir, 'c', 640, p, sizeof p), "chunk 640");
	struct stat st;
	REQUIRE(stat(p, &st) == 0, "stat");
	smash(p, 4096 + 32 * 4 + 100, 1, 0); /* in the rows, past the ids */
	long long failed = 0;
	int disk = judge("a flipped byte in chunk 640", NULL, &failed);
	CHECK(!disk && failed == 1,
	      "a damaged chunk: Q cold (%d), one failed restore (%lld)", disk,
	      failed);
	/* the other files still read: A's own prompt shares them up to 608
	 * ... and Q's cold prefill wrote its head, which serves it again */
	disk = judge("Q after the rewrite", NULL, NULL);
	CHECK(disk, "the tier serves Q again after the damaged chunk");
}

static void ledger_trial(void)
{
	wipe();
	write_head(A, "s");
	char p[400];
	snprintf(p, sizeof p, "%s/ledger/data.mdb", dir);
	smash(p, 0, 8192, 0);
	cache_cfg cfg;
	cfg_of(&cfg, "l");
	toy_env e;
	toy_open(&e, &cfg, 4096, G);
	CHECK(st2(e.c, "disk_writes", "bytes") == 0,
	      "a damaged ledger starts over: %lld",
	      st2(e.c, "disk_writes", "bytes"));
	toy_turn t;
	REQUIRE(toy_run(&e, Q, NA + 50, "q", 3, &t, 1, "Q, ledger") == 0,
		"Q after a damaged ledger");
	CHECK(t.plan.tier == CACHE_TIER_DISK, "and the tier serves");
	toy_close(&e);
}

/* ---- a full disk: a small tmpfs of a mount namespace of our own ---- */

static int count_tmp(const char *d)
{
	DIR *dp = opendir(d);
	if (!dp)
		return 0;
	struct dirent *e;
	int n = 0;
	while ((e = readdir(dp))) {
		size_t l = strlen(e->d_name);
		n += l > 4 && !strcmp(e->d_name + l - 4, ".tmp");
	}
	closedir(dp);
	return n;
}

static void fill(const char *path)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	REQUIRE(fd >= 0, "filler");
	char *z = calloc(1, 4096);
	while (write(fd, z, 4096) == 4096)
		;
	free(z);
	close(fd);
}

static void full_disk_child(void)
{
	char fs[sizeof dir], filler[400], dd[400];
	REQUIRE(snprintf(fs, sizeof fs, "%s/small", dir) < (int)sizeof fs,
		"path");
	REQUIRE(mkdir(fs, 0700) == 0, "mkdir");
	if (mountns_enter() || mountns_tmpfs(fs, "4m", "0700")) {
		printf("SKIP: the full-disk trial: no mount namespace here\n");
		_exit(77);
	}
	memcpy(dir, fs, sizeof dir); /* the tiers on the tmpfs */
	snprintf(filler, sizeof filler, "%s/filler", fs);
	snprintf(dd, sizeof dd, "%s/disk", fs);

	/* the tiers open, then another program takes every byte */
	cache_cfg cfg;
	cfg_of(&cfg, "f");
	toy_env e;
	toy_open(&e, &cfg, 4096, G);
	fill(filler);
	toy_turn t;
	REQUIRE(toy_run(&e, A, NA, "s", 4, &t, 1, "A, a full disk") == 0,
		"A on a full disk");
	cache_disk_wait(e.c);
	/* the index's own write (the plan's counts) or the floor refuses */
	CHECK(st2(e.c, "disk", "anchors") == 0 &&
		  st2(e.c, "disk", "floor_binds") +
			  st2(e.c, "disk", "index_failed") >=
		      1 &&
		  count_tmp(dd) == 0,
	      "a full disk and nothing of the tier's to give: nothing "
	      "written (%lld anchors), reported (floor %lld, index %lld), "
	      "%d .tmp",
	      st2(e.c, "disk", "anchors"), st2(e.c, "disk", "floor_binds"),
	      st2(e.c, "disk", "index_failed"), count_tmp(dd));
	char err[MOOR_ERRLEN] = "";
	int rc = cache_drain(e.c, err);
	CHECK(rc != 0 && err[0] && st2(e.c, "spill", "save_failed") == 1,
	      "the drain on a full disk fails, clearly: %s",
	      err[0] ? err : moor_strerror(rc));
	toy_close(&e);

	/* room again: both tiers write */
	unlink(filler);
	int32_t *B = toy_ids(NA, 141), *C = toy_ids(NA, 142);
	toy_open(&e, &cfg, 4096, G);
	REQUIRE(toy_run(&e, B, NA, "b", 4, &t, 1, "B, room again") == 0, "B");
	cache_disk_wait(e.c);
	CHECK(st2(e.c, "disk", "anchors") == 4,
	      "room again: B's head is written (%lld anchors)",
	      st2(e.c, "disk", "anchors"));
	err[0] = 0;
	rc = cache_drain(e.c, err);
	CHECK(rc == 0 && st2(e.c, "spill", "saves") == 1, "and the drain: %s",
	      err[0] ? err : moor_strerror(rc));
	toy_close(&e);

	/* full again: B's next turn cannot be drained over B's entry, which
	 * is kept as it was (a save that failed half way would cost it) and
	 * serves that turn once the disk has room */
	int32_t bg[4];
	memcpy(bg, t.gen, sizeof bg);
	int32_t *N2 = toy_ids(200, 144);
	int32_t *B1 = toy_cat(B, NA, bg, 3), *B2 = toy_cat(B1, NA + 3, N2, 200);
	toy_open(&e, &cfg, 4096, G);
	CHECK(e.ho.resident_len == NA + 3, "B read back: %llu",
	      (unsigned long long)e.ho.resident_len);
	fill(filler);
	REQUIRE(toy_run(&e, B2, NA + 203, "b", 4, &t, 1, "B2, full") == 0,
		"B2");
	err[0] = 0;
	rc = cache_drain(e.c, err);
	CHECK(rc == MOOR_ENOSPACE &&
		  st2(e.c, "spill", "save_skipped_room") == 1,
	      "B2's drain on a full disk is not tried over B's entry: %s",
	      err[0] ? err : moor_strerror(rc));
	toy_close(&e);
	unlink(filler);
	toy_open(&e, &cfg, 4096, G);
	REQUIRE(toy_run(&e, B2, NA + 203, "b", 4, &t, 1, "B2 again") == 0,
		"B2 again equals a cold run");
	CHECK(t.plan.tier == CACHE_TIER_SPILL && t.plan.start == NA + 3,
	      "B's entry kept: B2 resumes from the spill at %llu (%s)",
	      (unsigned long long)t.plan.start, cache_tier_name(t.plan.tier));
	toy_close(&e);

	/* full again, with files of the tier's own: the least valuable go
	 * to make room (the seed's rule), the index keeps working */
	toy_open(&e, &cfg, 4096, G);
	fill(filler);
	REQUIRE(toy_run(&e, C, NA, "c", 4, &t, 1, "C, a full disk") == 0, "C");
	cache_disk_wait(e.c);
	CHECK(st2(e.c, "disk", "evicted") >= 1 &&
		  st2(e.c, "disk", "anchors_written") >= 1 &&
		  count_tmp(dd) == 0,
	      "a full disk with the tier's own files: %lld evicted for C's "
	      "%lld anchors",
	      st2(e.c, "disk", "evicted"), st2(e.c, "disk", "anchors_written"));
	toy_close(&e);
	int32_t *N = toy_ids(100, 143);
	int32_t *QC = toy_cat(C, 1150, N, 100);
	toy_part(QC, C, 1150);
	toy_open(&e, &cfg, 4096, G);
	REQUIRE(toy_run(&e, QC, NA + 50, "qc", 3, &t, 1, "QC") == 0,
		"QC equals a cold run");
	CHECK(t.plan.tier == CACHE_TIER_DISK,
	      "what C wrote on the full disk serves: %s at %llu",
	      cache_tier_name(t.plan.tier), (unsigned long long)t.plan.start);
	toy_close(&e);
	fflush(NULL);
	_exit(t_failed ? 1 : 0);
}

static void full_disk_trial(void)
{
	fflush(NULL);
	pid_t p = fork();
	REQUIRE(p >= 0, "fork");
	if (p == 0)
		full_disk_child();
	int st;
	REQUIRE(waitpid(p, &st, 0) == p, "waitpid");
	if (WIFEXITED(st) && WEXITSTATUS(st) == 77)
		return;
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0,
	      "the full-disk trial (status %d%s)",
	      WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st),
	      WIFSIGNALED(st) ? ", a signal" : "");
}

/* The spill under the tier's free-space floor, in a tmpfs of its own:
 * each drain's line is read from the log. */
static int log_has(const char *logf, const char *what)
{
	return t_file_count(logf, what);
}

static uint64_t fs_free(const char *path)
{
	struct statvfs sv;
	REQUIRE(statvfs(path, &sv) == 0, "statvfs %s", path);
	return (uint64_t)sv.f_bavail * sv.f_frsize;
}

static void floor_child(void)
{
	char fs[sizeof dir], logf[sizeof dir + 8];
	REQUIRE(snprintf(fs, sizeof fs, "%s/floor", dir) < (int)sizeof fs,
		"path");
	snprintf(logf, sizeof logf, "%s.log", fs); /* off the tmpfs */
	REQUIRE(mkdir(fs, 0700) == 0, "mkdir");
	if (mountns_enter() || mountns_tmpfs(fs, "4m", "0700")) {
		printf("SKIP: the floor trial: no mount namespace here\n");
		_exit(77);
	}
	memcpy(dir, fs, sizeof dir); /* the spill on the tmpfs */
	int lfd = open(logf, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	REQUIRE(lfd >= 0 && dup2(lfd, 2) == 2, "the log");
	close(lfd);
	moor_log_level = MOOR_LOG_INFO;
	cache_cfg cfg;
	cfg_of(&cfg, "fl");
	cfg.disk_on = 0; /* the spill alone writes */
	cfg.park_bytes = 0;
	toy_env e;
	toy_turn t;
	char err[MOOR_ERRLEN] = "";

	/* a floor above what the file system has: the drain writes nothing,
	 * says so with the numbers and counts it */
	cfg.disk_min_free = 64ull << 20;
	toy_open(&e, &cfg, 4096, G);
	REQUIRE(toy_run(&e, A, NA, "a", 4, &t, 1, "A under the floor") == 0,
		"A");
	int rc = cache_drain(e.c, err);
	CHECK(rc == MOOR_ENOSPACE && strstr(err, "free-space floor binds") &&
		  strstr(err, "GB free, floor 0.067 GB") &&
		  st2(e.c, "spill", "floor_binds") == 1 &&
		  st2(e.c, "spill", "saves") == 0 &&
		  st2(e.c, "spill", "save_failed") == 0 &&
		  st2(e.c, "spill", "entries") == 0 &&
		  st2(e.c, "spill", "min_free") == 64ll << 20,
	      "a floor over the free space: the drain is not made (%s), "
	      "floor_binds %lld, %lld entries",
	      err[0] ? err : moor_strerror(rc),
	      st2(e.c, "spill", "floor_binds"), st2(e.c, "spill", "entries"));
	/* and an eviction: another session's request would write A first;
	 * under the floor it is not written, and the request is served */
	int32_t *E = toy_ids(400, 152);
	toy_part(E, A, 0);
	e.c->cfg.spill_min_tokens = 300;
	REQUIRE(toy_run(&e, E, 400, "e", 4, &t, 1, "E under the floor") == 0,
		"E equals a cold run");
	CHECK(st2(e.c, "spill", "floor_binds") == 2 &&
		  st2(e.c, "spill", "evict_saves") == 0 &&
		  st2(e.c, "spill", "entries") == 0 &&
		  log_has(logf, "[spill] eviction: spill: the free-space "
				"floor binds") == 1,
	      "the eviction under the floor: not written and said "
	      "(floor_binds %lld, evict_saves %lld)",
	      st2(e.c, "spill", "floor_binds"),
	      st2(e.c, "spill", "evict_saves"));
	free(E);
	toy_close(&e);

	/* no floor: A's entry */
	cfg.disk_min_free = 0;
	toy_open(&e, &cfg, 4096, G);
	REQUIRE(toy_run(&e, A, NA, "a", 4, &t, 1, "A") == 0, "A");
	REQUIRE(cache_drain(e.c, err) == 0, "A's drain: %s", err);
	toy_close(&e);

	/* a floor just under the free space: B's drain takes the room of
	 * A's entry, the least recently used, and keeps the floor */
	int32_t *B = toy_ids(400, 151);
	toy_part(B, A, 0);
	toy_open(&e, &cfg, 4096, G);
	REQUIRE(toy_run(&e, B, 400, "b", 4, &t, 1, "B") == 0, "B");
	uint64_t floor = fs_free(fs) - (16u << 10);
	e.c->cfg.disk_min_free = floor; /* after the open's own writes */
	err[0] = 0;
	rc = cache_drain(e.c, err);
	uint64_t after = fs_free(fs);
	CHECK(rc == 0 && st2(e.c, "spill", "saves") == 1 &&
		  st2(e.c, "spill", "floor_evicted") == 1 &&
		  st2(e.c, "spill", "floor_binds") == 0 &&
		  st2(e.c, "spill", "entries") == 1 && after >= floor,
	      "under the floor B's drain removes A's entry first (%s): "
	      "%lld saves, %lld removed, %lld entries, %llu free over a "
	      "floor of %llu",
	      err[0] ? err : moor_strerror(rc), st2(e.c, "spill", "saves"),
	      st2(e.c, "spill", "floor_evicted"), st2(e.c, "spill", "entries"),
	      (unsigned long long)after, (unsigned long long)floor);
	toy_close(&e);
	toy_open(&e, &cfg, 4096, G);
	CHECK(e.ho.resident_len == 403, "B read back: %llu",
	      (unsigned long long)e.ho.resident_len);
	toy_close(&e);
	CHECK(log_has(logf, "1 older entries") == 1,
	      "the removal is said in one line");
	free(B);
	fflush(NULL);
	_exit(t_failed ? 1 : 0);
}

static void floor_trial(void)
{
	fflush(NULL);
	pid_t p = fork();
	REQUIRE(p >= 0, "fork");
	if (p == 0)
		floor_child();
	int st;
	REQUIRE(waitpid(p, &st, 0) == p, "waitpid");
	char lf[sizeof dir + 16];
	snprintf(lf, sizeof lf, "%s/floor.log", dir);
	if (WIFEXITED(st) && WEXITSTATUS(st) == 77)
		return;
	if (!(WIFEXITED(st) && WEXITSTATUS(st) == 0)) {
		char cmd[sizeof lf + 16];
		snprintf(cmd, sizeof cmd, "cat %s >&2", lf);
		(void)!system(cmd);
	}
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0,
	      "the floor trial (status %d%s)",
	      WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st),
	      WIFSIGNALED(st) ? ", a signal" : "");
}

int main(void)
{
	moor_log_level = getenv("T_VERBOSE") ? MOOR_LOG_INFO : MOOR_LOG_ERROR;
	snprintf(dir, sizeof dir, "/tmp/moor-disk-damage-XXXXXX");
	REQUIRE(mkdtemp(dir), "mkdtemp");
	A = toy_ids(NA, 121);
	int32_t *B = toy_ids(100, 122);
	Q = toy_cat(A, 1150, B, 100);
	toy_part(Q, A, 1150);

	wipe();
	write_head(A, "s");
	CHECK(judge("no damage", NULL, NULL), "Q from the disk");
	index_trials();
	index_sweep();
	chunk_trial();
	ledger_trial();
	full_disk_trial();
	floor_trial();
	char cmd[400];
	snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
	(void)!system(cmd);
	free(A);
	free(B);
	free(Q);
	return t_done("test_disk_damage");
}
