/* loader_test.h: the assertion macros and temp-directory helpers of the
 * loader tests (tests/loader). Header-only: each test is one program. */
#ifndef LOADER_TEST_H
#define LOADER_TEST_H

#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "moor.h"

static int lt_failures;

#define ASSERT(x)                                                             \
	do {                                                                  \
		if (!(x)) {                                                   \
			fprintf(stderr, "%s:%d: ASSERT failed: %s\n",         \
				__FILE__, __LINE__, #x);                      \
			lt_failures++;                                        \
			return;                                               \
		}                                                             \
	} while (0)

/* rc must be `want`; prints both codes and err otherwise. */
#define ASSERT_RC(rc, want, err)                                              \
	do {                                                                  \
		int rc_ = (rc), want_ = (want);                               \
		if (rc_ != want_) {                                           \
			fprintf(stderr,                                       \
				"%s:%d: rc %d (%s), want %d (%s); err: %s\n", \
				__FILE__, __LINE__, rc_, moor_strerror(rc_),  \
				want_, moor_strerror(want_), (err));          \
			lt_failures++;                                        \
			return;                                               \
		}                                                             \
	} while (0)

/* err must contain s. */
#define ASSERT_HAS(err, s)                                                    \
	do {                                                                  \
		if (!strstr((err), (s))) {                                    \
			fprintf(stderr,                                       \
				"%s:%d: error message lacks \"%s\": %s\n",    \
				__FILE__, __LINE__, (s), (err));              \
			lt_failures++;                                        \
			return;                                               \
		}                                                             \
	} while (0)

#define RUN(fn)                                                               \
	do {                                                                  \
		int before_ = lt_failures;                                    \
		fn();                                                         \
		fprintf(stderr, "%s %s\n",                                    \
			lt_failures == before_ ? "ok  " : "FAIL", #fn);       \
	} while (0)

/* A fresh directory under $TMPDIR (or /tmp), into out[4096]. */
static inline void lt_tmpdir(char *out)
{
	const char *t = getenv("TMPDIR");
	snprintf(out, 4096, "%s/moor-loader-XXXXXX", t && *t ? t : "/tmp");
	if (!mkdtemp(out)) {
		perror("mkdtemp");
		exit(2);
	}
}

static inline int lt_rm_one(const char *p, const struct stat *sb, int flag,
		     struct FTW *ftw)
{
	(void)sb;
	(void)flag;
	(void)ftw;
	return remove(p);
}

static inline void lt_rmtree(const char *dir)
{
	nftw(dir, lt_rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

static inline void lt_path(char *out, const char *dir, const char *name)
{
	if (snprintf(out, 4096, "%s/%s", dir, name) >= 4096) {
		fprintf(stderr, "path too long: %s/%s\n", dir, name);
		exit(2);
	}
}

/* Writes len bytes to dir/name; exits on failure (a test bug). */
static inline void lt_write(const char *dir, const char *name, const void *p,
		     size_t len)
{
	char path[4096];
	lt_path(path, dir, name);
	FILE *f = fopen(path, "wb");
	if (!f || fwrite(p, 1, len, f) != len || fclose(f)) {
		perror(path);
		exit(2);
	}
}

static inline void lt_write_str(const char *dir, const char *name, const char *s)
{
	lt_write(dir, name, s, strlen(s));
}

/* The whole of dir/name, malloc'd; *len its size. Exits on failure. */
static inline unsigned char *lt_read(const char *dir, const char *name, size_t *len)
{
	char path[4096];
	lt_path(path, dir, name);
	FILE *f = fopen(path, "rb");
	if (!f) {
		perror(path);
		exit(2);
	}
	fseek(f, 0, SEEK_END);
	long n = ftell(f);
	fseek(f, 0, SEEK_SET);
	unsigned char *b = malloc((size_t)n + 1);
	if (!b || fread(b, 1, (size_t)n, f) != (size_t)n) {
		perror(path);
		exit(2);
	}
	fclose(f);
	*len = (size_t)n;
	return b;
}

/* A safetensors file from a literal header (padded to 8 with spaces) and
 * data_len bytes of data (0xA5); hlen_claim != 0 overrides the length. */
static inline void lt_write_st_raw(const char *dir, const char *name,
			    const char *header, size_t data_len,
			    uint64_t hlen_claim)
{
	size_t jl = strlen(header), hl = (jl + 7) & ~(size_t)7;
	size_t total = 8 + hl + data_len;
	unsigned char *b = malloc(total);
	uint64_t h = hlen_claim ? hlen_claim : hl;
	for (int i = 0; i < 8; i++)
		b[i] = (unsigned char)(h >> (8 * i));
	memcpy(b + 8, header, jl);
	memset(b + 8 + jl, ' ', hl - jl);
	memset(b + 8 + hl, 0xA5, data_len);
	lt_write(dir, name, b, total);
	free(b);
}

static inline int lt_finish(const char *name)
{
	if (lt_failures) {
		fprintf(stderr, "%s: %d failure(s)\n", name, lt_failures);
		return 1;
	}
	fprintf(stderr, "%s: all passed\n", name);
	return 0;
}

#endif
