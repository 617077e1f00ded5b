/* tb.h: the backend the engine, cache, daemon and golden tests run on
 * (`tb_`): MOOR_TEST_BACKEND names it, "cpu" when unset; the GPU suite
 * (meson test --suite gpu) sets it to "cuda". A backend this build lacks,
 * or whose device is absent, skips the test (exit 77, meson's skip) with a
 * line that says why. Include after t.h. */
#ifndef MOOR_TB_H
#define MOOR_TB_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "moor.h"
#include "ops.h"

/* The name MOOR_TEST_BACKEND gives ("cpu" when unset or empty). */
static inline const char *tb_name(void)
{
	const char *n = getenv("MOOR_TEST_BACKEND");
	return n && n[0] ? n : "cpu";
}

/* 1 when the tests run on CUDA. */
static inline int tb_cuda(void)
{
	return strcmp(tb_name(), "cuda") == 0;
}

/* The backend, or exit 77 with a line naming the test and the reason. */
static inline const kern_ops *tb_backend(const char *test)
{
	const char *n = tb_name();
	const kern_ops *o = kern_backend(n);
	if (!o) {
		printf("%s: skipped: MOOR_TEST_BACKEND=%s, and this build has "
		       "no such backend (a CUDA build: -Dcuda=enabled)\n",
		       test, n);
		exit(77);
	}
	char err[MOOR_ERRLEN] = "";
	if (o->probe && o->probe(0, err) != 0) {
		printf("%s: skipped: MOOR_TEST_BACKEND=%s: no usable device "
		       "(%s)\n",
		       test, n, err);
		exit(77);
	}
	return o;
}

#endif
