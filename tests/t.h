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

/* The source tree's root (meson sets MOOR_SRC for every test). */
static inline const char *t_src(void)
{
	const char *s = getenv("MOOR_SRC");
	return s ? s : ".";
}

#endif
