/* test_spill_direct: the session spill's files written and read with
 * O_DIRECT (dfile_write_direct, dfile_read_direct) are the files the
 * buffered path wrote, and either reads back bit for bit:
 *   - dfile: a buffer of 0, 1, 104, 4095, 4096, 4097, 3 lines + 5 and
 *     1 MiB + 13 bytes written by dfile_write_direct is dfile_write's file
 *     byte for byte (the 4 KiB padding cut off again), in a directory on
 *     the disk (/tmp: O_DIRECT where the file system takes it) and on
 *     /dev/shm (where it may be refused: the buffered fallback); read back
 *     whole by dfile_read_direct, a cap shorter than the file reads up to
 *     the cap, an absent file is -ENOENT; the fault seam sees one write,
 *     the fsync, the rename and the directory's fsync, a short write
 *     leaves no file and no .tmp;
 *   - the spill (the made-up architecture of toy.h, 4 blocks, 4 anchors
 *     and the end), codec on and off: a conversation drained with the old
 *     buffered write (MOOR_SPILL_DIRECT=0: what a cached before this
 *     change left on the disk) and again with O_DIRECT: every file equal
 *     byte for byte (the manifest but its time and its sum); each entry
 *     read back by a new cache through the O_DIRECT reader: every row and
 *     section equal (memcmp) to the drained conversation, and the next
 *     turn resumes at the end anchor. */
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cache_int.h"
#include "dfile.h"
#include "moor.h"
#include "toy.h"
#include "spill_files.h"

#define G 32
#define TAG "sd" /* its arenas' names */
#define NTOK 3400 /* 4 blocks of the spill, the last partial */

static char root[256];
static int32_t *A;

/* ---- the fault seam as a recorder ---- */

static int n_ops, ops[16], f_short;

static int hook(int op, const char *name)
{
	(void)name;
	if (n_ops < 16)
		ops[n_ops] = op;
	n_ops++;
	return f_short && op == DFILE_OP_WRITE ? DFILE_SHORT : 0;
}

/* ---- dfile ---- */

static void dfile_in(const char *base)
{
	char d[300];
	snprintf(d, sizeof d, "%s/dfile", base);
	REQUIRE(mkdir(d, 0700) == 0, "mkdir %s", d);
	int dfd = open(d, O_RDONLY | O_DIRECTORY);
	REQUIRE(dfd >= 0, "open %s", d);
	static const uint64_t sizes[] = {
	    0, 1, 104, 4095, 4096, 4097, 3 * 4096 + 5, (1 << 20) + 13};
	uint64_t max = (1 << 20) + 13;
	uint8_t *src = malloc(max), *buf = aligned_alloc(4096, dfile_up4k(max));
	uint8_t *back = aligned_alloc(4096, dfile_up4k(max));
	REQUIRE(src && buf && back, "memory");
	for (uint64_t i = 0; i < max; i++)
		src[i] = (uint8_t)(i * 2654435761u >> 13);
	int direct = -1;
	for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
		uint64_t n = sizes[k];
		memset(buf, 0xa5, dfile_up4k(max)); /* not zero past n */
		memcpy(buf, src, n);
		char err[MOOR_ERRLEN] = "";
		n_ops = 0;
		dfile_fault = hook;
		int rc =
		    dfile_write_direct(dfd, "new", buf, n, 0, &direct, err);
		dfile_fault = NULL;
		CHECK(rc == 0, "%s: %llu bytes: %s", d, (unsigned long long)n,
		      err);
		CHECK(n_ops == 4 && ops[0] == DFILE_OP_WRITE &&
			  ops[1] == DFILE_OP_FSYNC &&
			  ops[2] == DFILE_OP_RENAME && ops[3] == DFILE_OP_FSYNC,
		      "%llu bytes: one write, the fsync, the rename and the "
		      "directory's fsync (%d operations)",
		      (unsigned long long)n, n_ops);
		dfile_part p = {src, n};
		REQUIRE(dfile_write(dfd, "old", &p, 1, 0, err) == 0, "%s", err);
		char pa[400], pb[400];
		snprintf(pa, sizeof pa, "%s/new", d);
		snprintf(pb, sizeof pb, "%s/old", d);
		uint64_t la = 0, lb = 0;
		uint8_t *a = slurp(pa, &la), *b = slurp(pb, &lb);
		REQUIRE(a && b, "both files");
		CHECK(la == n && lb == n && !memcmp(a, b, n),
		      "%llu bytes: the O_DIRECT file (%llu bytes) is the "
		      "buffered one (%llu)",
		      (unsigned long long)n, (unsigned long long)la,
		      (unsigned long long)lb);
		free(a);
		free(b);
		uint64_t got = 0;
		const char *names[2] = {"new", "old"};
		for (int f = 0; f < 2; f++) {
			memset(back, 0x5a, dfile_up4k(max));
			rc =
			    dfile_read_direct(dfd, names[f], back,
					      dfile_up4k(max), &got, NULL, err);
			CHECK(rc == 0 && got == n && !memcmp(back, src, n),
			      "%llu bytes: %s read back (%llu): %s",
			      (unsigned long long)n, names[f],
			      (unsigned long long)got, err);
		}
		if (n > 4096) { /* a cap under the file's size */
			rc = dfile_read_direct(dfd, "new", back, 4096, &got,
					       NULL, err);
			CHECK(rc == 0 && got == 4096 &&
				  !memcmp(back, src, 4096),
			      "read up to the cap: %d, %llu", rc,
			      (unsigned long long)got);
		}
	}
	uint64_t got = 7;
	CHECK(dfile_read_direct(dfd, "absent", back, 4096, &got, NULL, NULL) ==
		      -ENOENT &&
		  got == 0,
	      "an absent file: -ENOENT");
	/* a short write: -EIO, the file as it was, no .tmp */
	memcpy(buf, src, max);
	f_short = 1;
	n_ops = 0;
	dfile_fault = hook;
	char err[MOOR_ERRLEN] = "";
	int rc = dfile_write_direct(dfd, "new", buf, max, 0, NULL, err);
	dfile_fault = NULL;
	f_short = 0;
	struct stat st;
	CHECK(rc == -EIO && fstatat(dfd, "new.tmp", &st, 0) != 0 &&
		  fstatat(dfd, "new", &st, 0) == 0 &&
		  (uint64_t)st.st_size == sizes[7],
	      "a short write: -EIO (%d), no .tmp, the file as it was", rc);
	printf("# %s: O_DIRECT %s\n", d,
	       direct ? "taken" : "refused (buffered)");
	close(dfd);
	free(src);
	free(buf);
	free(back);
}

/* ---- the spill ---- */

/* A conversation drained into dir (direct: the O_DIRECT write, else the
 * old buffered one); *truth: its rows and sections. */
static uint64_t drain_into(const char *dir, int codec, int direct,
			   toy_seq *truth)
{
	toy_env e;
	spill_conv(&e, TAG, dir, codec, A, NTOK, G);
	spill_seq_take(&e, truth);
	uint64_t valid = e.c->valid;
	char err[MOOR_ERRLEN] = "";
	if (!direct)
		setenv("MOOR_SPILL_DIRECT", "0", 1);
	int rc = cache_drain(e.c, err);
	unsetenv("MOOR_SPILL_DIRECT");
	REQUIRE(rc == 0, "%s: drain: %s", dir, err);
	toy_close(&e);
	return valid;
}

/* The entry in dir read back by a new cache (the O_DIRECT reader). */
static void read_back(const char *dir, int codec, const toy_seq *truth,
		      uint64_t valid, const char *what)
{
	toy_env e;
	cache_cfg cfg;
	spill_cfg(&cfg, TAG, dir, "b", codec);
	toy_open(&e, &cfg, 4096, G);
	CHECK(e.ho.resident_len == valid,
	      "%s: read back %llu tokens, want %llu", what,
	      (unsigned long long)e.ho.resident_len, (unsigned long long)valid);
	CHECK(toy_equal(e.lay, &e.s, truth, valid, what),
	      "%s: every row and section read back as drained", what);
	toy_turn t;
	int32_t *ids = toy_cat(e.c->res_ids, valid, A + 7, 40);
	int rc = toy_run(&e, ids, valid + 40, "s", 3, &t, 1, "next turn");
	CHECK(rc == 0 && t.plan.tier == CACHE_TIER_END && t.plan.start == valid,
	      "%s: the next turn resumes at the end anchor %llu: %s at %llu",
	      what, (unsigned long long)valid, cache_tier_name(t.plan.tier),
	      (unsigned long long)t.plan.start);
	free(ids);
	toy_close(&e);
}

static void old_and_new(int codec)
{
	char dold[300], dnew[300], what[64];
	snprintf(dold, sizeof dold, "%s/old-%d", root, codec);
	snprintf(dnew, sizeof dnew, "%s/new-%d", root, codec);
	toy_seq t_old, t_new;
	uint64_t v_old = drain_into(dold, codec, 0, &t_old);
	uint64_t v_new = drain_into(dnew, codec, 1, &t_new);
	snprintf(what, sizeof what, "codec %d", codec);
	int files = same_files(dold, dnew, what);
	CHECK(files == 9, "%s: %d data files, want 9", what, files);
	snprintf(what, sizeof what, "codec %d, the old buffered files", codec);
	read_back(dold, codec, &t_old, v_old, what);
	snprintf(what, sizeof what, "codec %d, the O_DIRECT files", codec);
	read_back(dnew, codec, &t_new, v_new, what);
	toy_seq_free(&t_old);
	toy_seq_free(&t_new);
}

int main(void)
{
	moor_log_level = MOOR_LOG_ERROR;
	snprintf(root, sizeof root, "/tmp/moor-spill-direct-XXXXXX");
	REQUIRE(mkdtemp(root), "mkdtemp");
	dfile_in(root);
	struct stat sst;
	char shm[256] = "";
	if (stat("/dev/shm", &sst) == 0 && access("/dev/shm", W_OK) == 0) {
		snprintf(shm, sizeof shm, "/dev/shm/moor-spill-direct-XXXXXX");
		REQUIRE(mkdtemp(shm), "mkdtemp");
		dfile_in(shm);
	}
	A = toy_ids(NTOK + 64, 17);
	old_and_new(1);
	old_and_new(0);
	free(A);
	dfile_rm_rf(AT_FDCWD, root);
	if (shm[0])
		dfile_rm_rf(AT_FDCWD, shm);
	return t_done("test_spill_direct");
}
