/* kern_prof: a profiling shim over a backend's vtable, for the benchmarks.
 *
 * kern_prof_wrap(real) returns a copy of real's vtable whose ops each run
 * the real op and then sync its queue, adding the wall time to a row of
 * the op (the GEMMs per shape). Syncing after every op removes the overlap
 * of queued work, so the sum is the ops' own time plus a launch each: fine
 * for finding where a prefill chunk goes (ops of 0.1 ms and up), not for
 * the end-to-end figure. Graphs are turned off (graph_begin NULL): a
 * capture cannot sync. One shim per process. */
#ifndef MOOR_KERN_PROF_H
#define MOOR_KERN_PROF_H

#include <stdio.h>

#include "ops.h"

const kern_ops *kern_prof_wrap(const kern_ops *real);
/* Clears the rows (before the run to be measured). */
void kern_prof_reset(void);
/* Prints the rows, the largest total first, with each one's share. */
void kern_prof_report(FILE *f, const char *title);

#endif
