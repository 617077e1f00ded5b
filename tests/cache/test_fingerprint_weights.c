/* test_fingerprint_weights: the engine's fingerprint reads the weights by
 * content and remembers them per file (engined/fingerprint.c):
 *   - a byte changed inside a tensor (the file's size kept) is a new
 *     fingerprint once the memo is not trusted (mtime moved; the header
 *     alone, what v1 read, is the same);
 *   - a start with the memo does not read the weights: with a tensor's
 *     bytes changed behind the memo's back (size and mtime restored) the
 *     fingerprint stays the memo's, and the memo names every tensor;
 *   - the same tensors sharded into two files are the same weights;
 *   - another grid, backend or config.json is another fingerprint; dummy
 *     weights count by their seed, not the files;
 *   - a header whose tensor runs past the file, a header past the file's
 *     end, two files with the same tensor and a folder without weights
 *     are clear errors, never a crash. */
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../../engined/fingerprint.c"
#include "t.h"

static char dir[256];

/* A safetensors file of n F32 tensors, names[i] of count[i] floats whose
 * values are base + i + j / 8. */
static void write_st(const char *path, int n, const char *const *names,
		     const int *count, float base)
{
	char hdr[2048];
	size_t hl = 1;
	uint64_t off = 0;
	snprintf(hdr, sizeof hdr, "{");
	for (int i = 0; i < n; i++) {
		hl = strlen(hdr);
		snprintf(hdr + hl, sizeof hdr - hl,
			 "%s\"%s\":{\"dtype\":\"F32\",\"shape\":[%d],"
			 "\"data_offsets\":[%llu,%llu]}",
			 i ? "," : "", names[i], count[i],
			 (unsigned long long)off,
			 (unsigned long long)(off + 4ull * count[i]));
		off += 4ull * count[i];
	}
	hl = strlen(hdr);
	snprintf(hdr + hl, sizeof hdr - hl, "}");
	hl = strlen(hdr);
	FILE *f = fopen(path, "wb");
	REQUIRE(f, "%s", path);
	uint8_t h8[8];
	for (int i = 0; i < 8; i++)
		h8[i] = (uint8_t)(hl >> (8 * i));
	fwrite(h8, 1, 8, f);
	fwrite(hdr, 1, hl, f);
	for (int i = 0; i < n; i++)
		for (int j = 0; j < count[i]; j++) {
			float v = base + (float)i + (float)j / 8;
			fwrite(&v, 4, 1, f);
		}
	fclose(f);
}

static void write_text(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");
	REQUIRE(f, "%s", path);
	fputs(text, f);
	fclose(f);
}

static int fp_of(const char *d, int grid, const char *backend,
		 const eng_opts *o, uint8_t out[32], char *err)
{
	err[0] = 0;
	return eng_serve_fingerprint(d, o, grid, backend, out, err);
}

static void fp_ok(const char *d, uint8_t out[32])
{
	char err[MOOR_ERRLEN];
	REQUIRE(fp_of(d, 1024, "cpu", NULL, out, err) == 0, "%s: %s", d, err);
}

/* Flips a byte of path at off and puts its mtime back. */
static void flip(const char *path, off_t off, int keep_mtime)
{
	struct stat st;
	REQUIRE(stat(path, &st) == 0, "stat");
	int fd = open(path, O_RDWR);
	REQUIRE(fd >= 0, "open");
	uint8_t b;
	REQUIRE(pread(fd, &b, 1, off) == 1, "pread");
	b ^= 0x40;
	REQUIRE(pwrite(fd, &b, 1, off) == 1, "pwrite");
	close(fd);
	struct timespec ts[2] = {st.st_atim, st.st_mtim};
	if (!keep_mtime)
		ts[1].tv_sec += 10;
	REQUIRE(utimensat(AT_FDCWD, path, ts, 0) == 0, "utimensat");
}

int main(void)
{
	moor_log_level = MOOR_LOG_ERROR;
	snprintf(dir, sizeof dir, "/tmp/moor-fp-XXXXXX");
	REQUIRE(mkdtemp(dir), "mkdtemp");
	char memo[400], m1[300], m2[300], p[400];
	snprintf(memo, sizeof memo, "%s/memo/w.json", dir);
	setenv("MOOR_FP_MEMO", memo, 1);
	snprintf(m1, sizeof m1, "%s/one", dir);
	snprintf(m2, sizeof m2, "%s/two", dir);
	REQUIRE(mkdir(m1, 0700) == 0 && mkdir(m2, 0700) == 0, "mkdir");
	static const char cfg[] = "{\"model_type\":\"toy\"}";
	static const char *const names[3] = {"a.w", "b.w", "c.w"};
	static const int count[3] = {1000, 37, 4096};
	snprintf(p, sizeof p, "%s/config.json", m1);
	write_text(p, cfg);
	snprintf(p, sizeof p, "%s/config.json", m2);
	write_text(p, cfg);
	char w1[400];
	snprintf(w1, sizeof w1, "%s/model.safetensors", m1);
	write_st(w1, 3, names, count, 1.0f);
	/* the same tensors in two shards: c.w, then a.w and b.w */
	snprintf(p, sizeof p, "%s/model-00001-of-00002.safetensors", m2);
	write_st(p, 1, names + 2, count + 2, 3.0f);
	snprintf(p, sizeof p, "%s/model-00002-of-00002.safetensors", m2);
	write_st(p, 2, names, count, 1.0f);

	uint8_t f1[32], f2[32], fx[32];
	fp_ok(m1, f1);
	json_t *mj = json_load_file(memo, 0, NULL);
	size_t nt = 0;
	const char *k;
	json_t *v;
	json_object_foreach(json_object_get(mj, "files"), k, v) nt +=
	    json_object_size(json_object_get(v, "tensors"));
	json_decref(mj);
	CHECK(nt == 3, "the memo holds the 3 tensors' sha256: %zu", nt);
	fp_ok(m2, f2);
	CHECK(!memcmp(f1, f2, 32), "two shards of the same tensors are the "
				   "same weights");

	/* a byte of b.w behind the memo's back: the memo is trusted */
	struct stat st;
	REQUIRE(stat(w1, &st) == 0, "stat");
	off_t data = st.st_size - 4 * (1000 + 37 + 4096);
	flip(w1, data + 4 * 1000 + 5, 1);
	fp_ok(m1, fx);
	CHECK(!memcmp(fx, f1, 32), "a start with the memo reads no weight");
	/* the memo goes: the content counts (v1 read only the header, which
	 * did not change) */
	REQUIRE(unlink(memo) == 0, "unlink memo");
	fp_ok(m1, fx);
	CHECK(memcmp(fx, f1, 32), "a changed tensor byte is a new "
				  "fingerprint");
	/* back, and an mtime that moved: hashed again, the old value */
	flip(w1, data + 4 * 1000 + 5, 0);
	fp_ok(m1, fx);
	CHECK(!memcmp(fx, f1, 32), "the bytes back, a new mtime: rehashed to "
				   "the first fingerprint");
	flip(w1, data + 7, 0);
	fp_ok(m1, fx);
	CHECK(memcmp(fx, f1, 32), "a changed byte of a.w with a new mtime: "
				  "seen through the memo");
	flip(w1, data + 7, 0);

	char err[MOOR_ERRLEN];
	REQUIRE(fp_of(m1, 512, "cpu", NULL, fx, err) == 0, "%s", err);
	CHECK(memcmp(fx, f1, 32), "another grid");
	REQUIRE(fp_of(m1, 1024, "cuda", NULL, fx, err) == 0, "%s", err);
	CHECK(memcmp(fx, f1, 32), "another backend");
	/* a kernel switch that changes prefill's bits counts, by its value;
	 * one that keeps them does not */
	uint8_t e0[32], e1[32], e2[32];
	REQUIRE(fp_of(m1, 1024, "cuda", NULL, e0, err) == 0, "%s", err);
	setenv("MOOR_NORM_V4", "0", 1);
	REQUIRE(fp_of(m1, 1024, "cuda", NULL, e1, err) == 0, "%s", err);
	setenv("MOOR_NORM_V4", "1", 1);
	REQUIRE(fp_of(m1, 1024, "cuda", NULL, e2, err) == 0, "%s", err);
	unsetenv("MOOR_NORM_V4");
	CHECK(memcmp(e0, e1, 32) && memcmp(e1, e2, 32),
	      "MOOR_NORM_V4=0 and =1 are in the fingerprint");
	setenv("MOOR_GDN_RT", "0", 1);
	REQUIRE(fp_of(m1, 1024, "cuda", NULL, e1, err) == 0, "%s", err);
	unsetenv("MOOR_GDN_RT");
	CHECK(!memcmp(e0, e1, 32), "MOOR_GDN_RT (the same bits) is not");
	snprintf(p, sizeof p, "%s/config.json", m2);
	write_text(p, "{\"model_type\":\"toy\",\"x\":1}");
	fp_ok(m2, fx);
	CHECK(memcmp(fx, f1, 32), "another config.json");
	eng_opts o = {.load_format = ENG_LOAD_DUMMY, .seed = 5};
	uint8_t d1[32], d2[32];
	REQUIRE(fp_of(m1, 1024, "cpu", &o, d1, err) == 0, "%s", err);
	o.seed = 6;
	REQUIRE(fp_of(m1, 1024, "cpu", &o, d2, err) == 0, "%s", err);
	CHECK(memcmp(d1, d2, 32) && memcmp(d1, f1, 32),
	      "dummy weights count by their seed");

	/* bad checkpoints: clear errors */
	char m3[300];
	snprintf(m3, sizeof m3, "%s/bad", dir);
	REQUIRE(mkdir(m3, 0700) == 0, "mkdir");
	snprintf(p, sizeof p, "%s/config.json", m3);
	write_text(p, cfg);
	int rc = fp_of(m3, 1024, "cpu", NULL, fx, err);
	CHECK(rc == MOOR_EMISSING && strstr(err, "no .safetensors"),
	      "no weights: %d %s", rc, err);
	snprintf(p, sizeof p, "%s/model.safetensors", m3);
	write_st(p, 3, names, count, 1.0f);
	REQUIRE(truncate(p, 200 + 4 * 1000) == 0, "truncate");
	rc = fp_of(m3, 1024, "cpu", NULL, fx, err);
	CHECK(rc == MOOR_EFORMAT && strstr(err, "past the file"),
	      "a tensor past the file's end: %d %s", rc, err);
	FILE *f = fopen(p, "wb");
	REQUIRE(f, "open");
	uint8_t h8[8] = {0xff, 0xff, 0, 0, 0, 0, 0, 0};
	fwrite(h8, 1, 8, f);
	fwrite("{}", 1, 2, f);
	fclose(f);
	rc = fp_of(m3, 1024, "cpu", NULL, fx, err);
	CHECK(rc == MOOR_EFORMAT && strstr(err, "header"),
	      "a header past the file's end: %d %s", rc, err);
	write_st(p, 3, names, count, 1.0f);
	snprintf(p, sizeof p, "%s/more.safetensors", m3);
	write_st(p, 1, names, count, 1.0f);
	rc = fp_of(m3, 1024, "cpu", NULL, fx, err);
	CHECK(rc == MOOR_EFORMAT && strstr(err, "two files"),
	      "a tensor in two files: %d %s", rc, err);

	char cmd[400];
	snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
	(void)!system(cmd);
	return t_done("test_fingerprint_weights");
}
