/* test_disk_faults: bad files and a bad disk cost the disk tier an entry,
 * never an answer, and the tier keeps working:
 *   - a truncated anchor file: the open's check of every record against
 *     its file's header and size drops it, and the prompt it would serve
 *     resumes from the anchor below, bit for bit against a cold prefill;
 *   - a flipped byte in a chunk's rows: cold, bit for bit, the chunk gone;
 *     the cold prefill (a session's first long request) writes it again;
 *   - ENOSPC on every write (the fault seam): nothing indexed, no .tmp
 *     left, the answer bit for bit; with the seam off the next session's
 *     head is written;
 *   - the free-space floor above what the file system has: every file
 *     goes back to the file system, nothing is written, floor_binds is
 *     counted and reported (floor_binding);
 *   - the fence: the writer held after staging the first chunk of F's
 *     head while G (another session) prefills over F's rows: the chunks
 *     not copied yet are dropped (window), F's anchors are not written,
 *     and F after a restart is bit for bit a cold prefill's; held while
 *     F's next turn continues the rows in place, the job writes all of it
 *     and a prompt sharing F's head resumes from it, bit for bit;
 *   - at the open: a .tmp and a file the index does not name (a crash
 *     between the rename and the index) are deleted. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>

#include "cache_int.h"
#include "dfile.h"
#include "eng_harness.h"

static char dir[256];

static void open_h(harness *h, const char *name, uint64_t min_free)
{
	cache_cfg cfg;
	h_cfg_disk(&cfg, name, dir);
	cfg.disk_min_free = min_free;
	h_open(h, "f32_untied", 128, 2048, &cfg);
}

/* The path of the one disk file whose name starts with pre and ends with
 * suf; 0 when there is none. */
static int find_file(const char *pre, const char *suf, char *out, size_t n)
{
	char d[300];
	snprintf(d, sizeof d, "%s/disk", dir);
	DIR *dp = opendir(d);
	REQUIRE(dp, "opendir %s", d);
	struct dirent *e;
	int got = 0;
	while ((e = readdir(dp))) {
		size_t l = strlen(e->d_name), ls = strlen(suf);
		if (!strncmp(e->d_name, pre, strlen(pre)) && l > ls &&
		    !strcmp(e->d_name + l - ls, suf)) {
			snprintf(out, n, "%s/%s", d, e->d_name);
			got++;
		}
	}
	closedir(dp);
	return got;
}

static int count_tmp(void)
{
	char d[300];
	snprintf(d, sizeof d, "%s/disk", dir);
	DIR *dp = opendir(d);
	REQUIRE(dp, "opendir");
	struct dirent *e;
	int n = 0;
	while ((e = readdir(dp))) {
		size_t l = strlen(e->d_name);
		n += l > 4 && !strcmp(e->d_name + l - 4, ".tmp");
	}
	closedir(dp);
	return n;
}

/* Holds the writer at its first chunk write (the chunk already staged)
 * until the test lets it go. */
static volatile int held, release_w;
static int hold_first(int op, const char *name)
{
	if (op == DFILE_OP_WRITE && name[0] == 'c' && !held) {
		held = 1;
		while (!release_w)
			usleep(1000);
	}
	return 0;
}

static void wait_held(void)
{
	for (int i = 0; i < 20000 && !held; i++)
		usleep(1000);
	REQUIRE(held, "the writer never reached its first chunk");
}

static int enospc(int op, const char *name)
{
	if (op == DFILE_OP_WRITE && (name[0] == 'a' || name[0] == 'c') &&
	    name[1] == '-')
		return -ENOSPC;
	return 0;
}

int main(void)
{
	moor_log_level = MOOR_LOG_ERROR;
	snprintf(dir, sizeof dir, "/tmp/moor-disk-faults-XXXXXX");
	REQUIRE(mkdtemp(dir), "mkdtemp");
	harness h;
	h_turn t;
	open_h(&h, "df-1", 0);
	int V = h.V;
	int32_t *A = h_ids(1300, V, 101), *N = h_ids(600, V, 102);
	REQUIRE(h_turn_run(&h, A, 1300, "a", 4, &t) == 0, "A");
	state_free(&t.st);
	cache_disk_wait(h.c);
	CHECK(h_stat(h.c, "disk.anchors") == 4, "A's 4 head anchors");
	h_close(&h);

	/* a truncated anchor */
	char p[600];
	struct stat st;
	REQUIRE(find_file("a-", "-1152", p, sizeof p) == 1, "the anchor 1152");
	REQUIRE(truncate(p, 5000) == 0, "truncate");
	open_h(&h, "df-2", 0);
	int32_t *R2 = h_cat(A, 1200, N, 100);
	h_part(R2, A, 1200, V);
	REQUIRE(h_turn_run(&h, R2, 1300, "r2", 4, &t) == 0, "R2");
	/* the open checks every record against its file's header and size:
	 * the cut anchor goes there, and R2 resumes at the anchor below */
	CHECK(t.plan.tier == CACHE_TIER_DISK && t.plan.start == 1024 &&
		  h_stat(h.c, "disk.orphans") == 1 &&
		  h_stat(h.c, "disk.hit_failed") == 0,
	      "a truncated anchor: dropped at the open, R2 from the anchor "
	      "below (%s at %llu)",
	      cache_tier_name(t.plan.tier), (unsigned long long)t.plan.start);
	h_exact(&h, R2, 1300, &t, "R2 after a truncated anchor");
	state_free(&t.st);
	cache_disk_wait(h.c);
	REQUIRE(stat(p, &st) == 0 || errno == ENOENT, "stat");
	CHECK(access(p, F_OK) != 0 || st.st_size > 5000,
	      "the truncated file is deleted (R2's cold prefill, its "
	      "session's first, writes that line whole again)");
	h_close(&h);

	/* a flipped byte in a chunk's rows */
	REQUIRE(find_file("c-", "-512", p, sizeof p) == 1, "the chunk 512");
	int fd = open(p, O_RDWR);
	REQUIRE(fd >= 0, "open %s", p);
	REQUIRE(fstat(fd, &st) == 0, "stat");
	uint8_t b = 0;
	off_t at = st.st_size - 8192; /* in the rows, past the ids */
	REQUIRE(pread(fd, &b, 1, at) == 1, "pread");
	b ^= 0x10;
	REQUIRE(pwrite(fd, &b, 1, at) == 1, "pwrite");
	close(fd);
	open_h(&h, "df-3", 0);
	int32_t *R3 = h_cat(A, 1000, N + 100, 300);
	h_part(R3, A, 1000, V);
	REQUIRE(h_turn_run(&h, R3, 1300, "r3", 4, &t) == 0, "R3");
	CHECK(t.plan.start == 0 && h_stat(h.c, "disk.hit_failed") == 1,
	      "a damaged chunk: a cold prefill (%s at %llu)",
	      cache_tier_name(t.plan.tier), (unsigned long long)t.plan.start);
	h_exact(&h, R3, 1300, &t, "R3 cold after a damaged chunk");
	state_free(&t.st);
	cache_disk_wait(h.c);
	CHECK(find_file("c-", "-512", p, sizeof p) == 1 &&
		  h_stat(h.c, "disk.chunks_written") >= 1,
	      "the cold prefill wrote the chunk again");
	h_close(&h);
	/* and it serves again, bit for bit */
	open_h(&h, "df-3b", 0);
	REQUIRE(h_turn_run(&h, R3, 1300, "r3b", 4, &t) == 0, "R3 again");
	CHECK(t.plan.tier == CACHE_TIER_DISK && t.plan.start >= 896,
	      "R3 from the disk after the rewrite: %s at %llu",
	      cache_tier_name(t.plan.tier), (unsigned long long)t.plan.start);
	h_exact(&h, R3, 1300, &t, "R3 from the rewritten chunks");
	state_free(&t.st);
	cache_disk_wait(h.c);

	/* ENOSPC on every write */
	long long a0 = h_stat(h.c, "disk.anchors");
	int32_t *W = h_ids(1300, V, 103), *W2 = h_ids(1300, V, 104);
	dfile_fault = enospc;
	REQUIRE(h_turn_run(&h, W, 1300, "w", 4, &t) == 0, "W");
	h_exact(&h, W, 1300, &t, "W under ENOSPC");
	state_free(&t.st);
	cache_disk_wait(h.c);
	dfile_fault = NULL;
	CHECK(h_stat(h.c, "disk.write_failed") >= 1 &&
		  h_stat(h.c, "disk.anchors") == a0 && count_tmp() == 0,
	      "ENOSPC: %lld failures, nothing indexed, no .tmp left",
	      h_stat(h.c, "disk.write_failed"));
	REQUIRE(h_turn_run(&h, W2, 1300, "w2", 4, &t) == 0, "W2");
	state_free(&t.st);
	cache_disk_wait(h.c);
	CHECK(h_stat(h.c, "disk.anchors") == a0 + 4,
	      "the tier keeps working after it: W2's 4 head anchors");
	h_close(&h);

	/* the free-space floor binds */
	open_h(&h, "df-4", 1ull << 62);
	int32_t *X = h_ids(1300, V, 105);
	REQUIRE(h_turn_run(&h, X, 1300, "x", 4, &t) == 0, "X");
	state_free(&t.st);
	cache_disk_wait(h.c);
	CHECK(h_stat(h.c, "disk.floor_binds") >= 1 &&
		  h_stat(h.c, "disk.floor_binding") == 1 &&
		  h_stat(h.c, "disk.anchors_written") == 0 &&
		  h_stat(h.c, "disk.anchors") == 0,
	      "the floor binds (%lld): reported, nothing written, every "
	      "file given back to the file system (%lld anchors left)",
	      h_stat(h.c, "disk.floor_binds"), h_stat(h.c, "disk.anchors"));
	h_close(&h);

	/* the fence: the writer is held after staging A's first chunk; B
	 * (another session, parting at 0) prefills over A's rows; the chunks
	 * not copied by then are dropped, and A's anchors with them */
	open_h(&h, "df-6", 0);
	REQUIRE(cache_clear(h.c, "disk") == 0, "clear");
	int32_t *F = h_ids(1300, V, 106), *G = h_ids(1300, V, 107);
	h_part(G, F, 0, V);
	held = release_w = 0;
	dfile_fault = hold_first;
	REQUIRE(h_turn_run(&h, F, 1300, "f", 4, &t) == 0, "F");
	state_free(&t.st);
	wait_held();
	REQUIRE(h_turn_run(&h, G, 1300, "g", 4, &t) == 0, "G");
	state_free(&t.st);
	release_w = 1;
	cache_disk_wait(h.c);
	dfile_fault = NULL;
	CHECK(h_stat(h.c, "disk.window") >= 1 &&
		  h_stat(h.c, "disk.anchors") == 4,
	      "F's job fenced by G's plan (%lld dropped), only G's 4 head "
	      "anchors written (%lld)",
	      h_stat(h.c, "disk.window"), h_stat(h.c, "disk.anchors"));
	h_close(&h);
	/* what F's job did write holds F's rows: F after a restart is cold
	 * or from the disk, bit for bit either way */
	open_h(&h, "df-7", 0);
	REQUIRE(h_turn_run(&h, F, 1300, "f2", 4, &t) == 0, "F again");
	h_exact(&h, F, 1300, &t, "F after its fenced job");
	state_free(&t.st);
	cache_disk_wait(h.c);
	h_close(&h);
	/* a turn that continues the rows in place leaves the window open */
	open_h(&h, "df-7b", 0);
	REQUIRE(cache_clear(h.c, "disk") == 0, "clear");
	int32_t *F2 = h_cat(F, 1300, G, 200);
	held = release_w = 0;
	dfile_fault = hold_first;
	REQUIRE(h_turn_run(&h, F, 1300, "f3", 4, &t) == 0, "F 3");
	state_free(&t.st);
	wait_held();
	REQUIRE(h_turn_run(&h, F2, 1500, "f3", 4, &t) == 0, "F2");
	state_free(&t.st);
	release_w = 1;
	cache_disk_wait(h.c);
	dfile_fault = NULL;
	CHECK(h_stat(h.c, "disk.anchors") == 4 &&
		  h_stat(h.c, "disk.chunks") == 10,
	      "F's next turn resumed above the job: all 4 anchors and 10 "
	      "chunks written (%lld, %lld)",
	      h_stat(h.c, "disk.anchors"), h_stat(h.c, "disk.chunks"));
	h_close(&h);
	open_h(&h, "df-8", 0);
	int32_t *F4 = h_cat(F, 1200, G + 300, 100);
	h_part(F4, F, 1200, V);
	REQUIRE(h_turn_run(&h, F4, 1300, "f4", 4, &t) == 0, "F4");
	CHECK(t.plan.tier == CACHE_TIER_DISK && t.plan.start == 1152,
	      "F4 from the disk at 1152: %s at %llu",
	      cache_tier_name(t.plan.tier), (unsigned long long)t.plan.start);
	h_exact(&h, F4, 1300, &t, "F4 from the window kept open");
	state_free(&t.st);
	h_close(&h);
	free(F);
	free(F2);
	free(F4);
	free(G);

	/* a crash's leftovers are swept at the open */
	char tp[600], op[600];
	snprintf(tp, sizeof tp, "%s/disk/c-00000000deadbeef-128.tmp", dir);
	snprintf(op, sizeof op, "%s/disk/a-0000000000000001-128", dir);
	for (int i = 0; i < 2; i++) {
		int f = open(i ? op : tp, O_WRONLY | O_CREAT, 0600);
		REQUIRE(f >= 0, "create");
		REQUIRE(write(f, "x", 1) == 1, "write");
		close(f);
	}
	open_h(&h, "df-5", 0);
	CHECK(access(tp, F_OK) != 0 && access(op, F_OK) != 0 &&
		  h_stat(h.c, "disk.orphans") == 1,
	      "the .tmp and the unindexed file are deleted at the open");
	h_close(&h);
	free(A);
	free(N);
	free(R2);
	free(R3);
	free(W);
	free(W2);
	free(X);
	dfile_rm_rf(AT_FDCWD, dir);
	return t_done("test_disk_faults");
}
