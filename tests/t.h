/* t.h: the tiny assertion kit of moor's tests. A failed check prints where
 * and why and counts; t_done() returns the exit status. */
#ifndef MOOR_T_H
#define MOOR_T_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int t_failed;

#define CHECK(cond, ...)                                                      \
	do {                                                                  \
		if (!(cond)) {                                                \
			t_failed++;                                           \
			fprintf(stderr, "%s:%d: check failed: %s: ", __FILE__, \
				__LINE__, #cond);                             \
			fprintf(stderr, __VA_ARGS__);                         \
			fprintf(stderr, "\n");                                \
		}                                                             \
	} while (0)

/* A check whose failure makes the rest of the test meaningless. */
#define REQUIRE(cond, ...)                                                    \
	do {                                                                  \
		if (!(cond)) {                                                \
			fprintf(stderr, "%s:%d: required: %s: ", __FILE__,    \
				__LINE__, #cond);                             \
			fprintf(stderr, __VA_ARGS__);                         \
			fprintf(stderr, "\n");                                \
			exit(1);                                              \
		}                                                             \
	} while (0)

static inline int t_done(const char *name)
{
	if (t_failed)
		fprintf(stderr, "%s: %d check(s) failed\n", name, t_failed);
	else
		printf("%s: ok\n", name);
	return t_failed ? 1 : 0;
}

/* Ends the test as skipped (meson counts exit status 77 as SKIP), with the
 * reason on stdout. */
#define T_SKIP 77
#define SKIP(...)                                                             \
	do {                                                                  \
		printf("skip: ");                                             \
		printf(__VA_ARGS__);                                          \
		printf("\n");                                                 \
		exit(T_SKIP);                                                 \
	} while (0)

/* A test that needs the npm oracles (node, $MOOR_SRC/.oracles) and finds
 * one missing: on a host that has none by design (MOOR_NO_ORACLES=1, which
 * the env.sh of deploy/setup --from exports) it skips, saying what is
 * missing; anywhere else it fails, so a machine where the oracles should be
 * never passes a comparison it did not make. */
#define T_ORACLE_MISSING(...)                                                 \
	do {                                                                  \
		const char *no_ = getenv("MOOR_NO_ORACLES");                  \
		if (no_ && !strcmp(no_, "1")) {                               \
			printf("skip (MOOR_NO_ORACLES=1, a host without the " \
			       "npm oracles): ");                             \
			printf(__VA_ARGS__);                                  \
			printf("\n");                                         \
			exit(T_SKIP);                                         \
		}                                                             \
		fprintf(stderr, "%s:%d: required: ", __FILE__, __LINE__);     \
		fprintf(stderr, __VA_ARGS__);                                 \
		fprintf(stderr, " (on a host set up with deploy/setup --from, " \
				"source .deps/env.sh and these tests skip)\n"); \
		exit(1);                                                      \
	} while (0)

/* The lines of the file at path (a daemon's log) that contain str; -1
 * when it cannot be opened. */
static inline int t_file_count(const char *path, const char *str)
{
	FILE *f = fopen(path, "r");
	if (!f)
		return -1;
	char line[2048];
	int n = 0;
	while (fgets(line, sizeof line, f))
		n += strstr(line, str) != NULL;
	fclose(f);
	return n;
}

/* The source tree's root (meson sets MOOR_SRC for every test). */
static inline const char *t_src(void)
{
	const char *s = getenv("MOOR_SRC");
	return s ? s : ".";
}

#endif
