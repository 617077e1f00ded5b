/* test_disk_yields_to_spill: while a session spill save runs, the disk
 * tier's writer starts no file (it waits between two of its files:
 * cache_disk_spill_active, the spill's own I/O path), and it writes the
 * rest once the save is done. On the made-up architecture of toy.h (grid
 * 32), shown by the order of the file operations, with no clock in any
 * check:
 *   - a session's first long request (1,200 tokens) queues the disk
 *     tier's head anchors (4 anchors, 37 chunk files and the anchors'
 *     files); the writer is held at its first file's write;
 *   - the drain begins (its save's first file operation opens the gate);
 *     the writer finishes the file it was in, and from then until the
 *     save has renamed its manifest into place none of its operations
 *     touches another file (the save holds its writer, and the writer
 *     of the spill waits first for the file in flight to finish and then
 *     a while, so that a writer that did not yield would show);
 *   - after the save the disk tier writes every file it had queued (its 4
 *     anchors), and the drained conversation reads back. */
#include <fcntl.h>
#include <jansson.h>
#include <pthread.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dfile.h"
#include "moor.h"
#include "toy.h"

#define G 32
#define NTOK 1200

static char dir[256];
static pthread_t main_th;

typedef struct op_rec {
	int op;
	char name[64];
	int who; /* 0: the test's (the save's) thread, 1: the disk tier's
		  * writer, 2: another (the spill's writer) */
} op_rec;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static op_rec ops[1024];
static int n_ops;
static pthread_t disk_th;
static int have_disk_th, gated, draining, save_on, inflight_done, foreign;
static int start = -1;	  /* the log's index of the save's first operation */
static char inflight[64]; /* the disk tier's file in flight at the gate */

static int is_disk_file(const char *name)
{
	return (name[0] == 'c' || name[0] == 'a') && name[1] == '-';
}

/* Waits on cv until *flag or ms pass, mu held. */
static void wait_for(int *flag, int ms)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += ms / 1000;
	ts.tv_nsec += (long)(ms % 1000) * 1000000L;
	if (ts.tv_nsec >= 1000000000L) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000L;
	}
	while (!*flag && pthread_cond_timedwait(&cv, &mu, &ts) == 0)
		;
}

static int hook(int op, const char *name)
{
	pthread_mutex_lock(&mu);
	pthread_t self = pthread_self();
	int who = pthread_equal(self, main_th)			 ? 0
		  : have_disk_th && pthread_equal(self, disk_th) ? 1
								 : 2;
	if (!have_disk_th && who == 2 && is_disk_file(name)) {
		disk_th = self; /* the disk tier's writer: its first file */
		have_disk_th = 1;
		who = 1;
	}
	if (n_ops < (int)(sizeof ops / sizeof ops[0])) {
		op_rec *r = &ops[n_ops++];
		r->op = op;
		snprintf(r->name, sizeof r->name, "%s", name);
		r->who = who;
	}
	if (who == 0 && draining && !save_on) {
		save_on = 1; /* the save's first file operation */
		start = n_ops - 1;
		pthread_cond_broadcast(&cv);
	}
	if (who == 1) {
		if (!inflight[0]) { /* the gate: held until the save runs */
			snprintf(inflight, sizeof inflight, "%s", name);
			gated = 1;
			pthread_cond_broadcast(&cv);
			wait_for(&save_on, 10000);
		} else if (save_on && !inflight_done && op == DFILE_OP_FSYNC &&
			   !strcmp(name, ".")) {
			inflight_done = 1; /* its file is in place */
			pthread_cond_broadcast(&cv);
		} else if (save_on && !inflight_done &&
			   strcmp(name, inflight)) {
			foreign = 1;
		} else if (inflight_done) {
			foreign = 1; /* a file begun after: seen in the log */
			pthread_cond_broadcast(&cv);
		}
	}
	if (who == 2 && op == DFILE_OP_WRITE && !strcmp(name, "r0.new.tmp")) {
		/* the spill's first file: the disk tier's file in flight
		 * ends first, then a while (a writer that does not yield
		 * would start its next file meanwhile) */
		wait_for(&inflight_done, 10000);
		wait_for(&foreign, 300);
	}
	pthread_mutex_unlock(&mu);
	return 0;
}

int main(void)
{
	moor_log_level = MOOR_LOG_ERROR;
	main_th = pthread_self();
	toy_tmpdir(dir, sizeof dir, "disk-yield");
	int32_t *A = toy_ids(NTOK, 5);
	cache_cfg cfg;
	toy_cfg_disk(&cfg, "dys", "a", dir);
	toy_env e;
	toy_open(&e, &cfg, 4096, G);
	dfile_fault = hook;

	/* the head anchors queued; the writer held at its first file */
	toy_turn t;
	REQUIRE(toy_run(&e, A, NTOK, "s", 4, &t, 0, "turn") == 0, "turn");
	uint64_t valid = (uint64_t)toy_stat(e.c, "resident", "tokens");
	REQUIRE(valid == NTOK + 3, "resident %llu", (unsigned long long)valid);
	toy_seq truth;
	toy_seq_alloc(e.lay, &truth);
	memcpy(truth.sec[0], e.s.sec[0], TOY_S0);
	memcpy(truth.sec[1], e.s.sec[1], TOY_S1);
	for (int i = 0; i < 3; i++) {
		uint64_t outer, inner;
		toy_geom(&e.lay->view[i], &outer, &inner);
		memcpy(truth.view[i], e.s.view[i],
		       outer * inner * e.lay->view[i].elt * e.lay->window);
	}

	/* the drain, while the disk tier's writer is inside its first file
	 * (held there) and has the others to write */
	pthread_mutex_lock(&mu);
	wait_for(&gated, 10000);
	REQUIRE(gated, "the disk tier's writer reached its first file");
	draining = 1;
	pthread_mutex_unlock(&mu);
	char err[MOOR_ERRLEN] = "";
	REQUIRE(cache_drain(e.c, err) == 0, "drain: %s", err);
	REQUIRE(cache_disk_wait(e.c) == 0, "disk wait");
	dfile_fault = NULL;

	/* the log, after every thread is done with it */
	pthread_mutex_lock(&mu);
	/* the save: from its first operation to its manifest's rename */
	int n = n_ops, end = -1, in_window = 0, bad = -1, after = 0,
	    spill_files = 0;
	for (int i = 0; i < n && end < 0; i++)
		if (ops[i].who == 0 && ops[i].op == DFILE_OP_RENAME &&
		    !strcmp(ops[i].name, "manifest"))
			end = i;
	for (int i = 0; i < n; i++) {
		const op_rec *r = &ops[i];
		if (r->who == 2 && strstr(r->name, ".new") &&
		    r->op == DFILE_OP_RENAME)
			spill_files++;
		if (r->who != 1 || start < 0 || i < start)
			continue;
		if (end >= 0 && i > end) {
			after += r->op == DFILE_OP_WRITE;
			continue;
		}
		in_window++;
		if (strcmp(r->name, inflight) && strcmp(r->name, "."))
			bad = bad < 0 ? i : bad;
	}
	char inf[64];
	snprintf(inf, sizeof inf, "%s", inflight);
	int held = have_disk_th, done = inflight_done;
	pthread_mutex_unlock(&mu);

	CHECK(held && inf[0], "the disk tier's writer was held at its first "
			      "file");
	CHECK(start >= 0 && end > start,
	      "the save's operations in the log: %d to %d", start, end);
	CHECK(spill_files == 7,
	      "the save wrote its 7 files (2 blocks, 4 anchors, the end): %d",
	      spill_files);
	CHECK(done, "the disk tier's file in flight (%s) was finished", inf);
	CHECK(bad < 0,
	      "during the save the disk tier's writer touched only the file "
	      "it was in (%s): %s at operation %d",
	      inf, bad >= 0 ? ops[bad].name : "", bad);
	CHECK(in_window == 3,
	      "the file in flight's fsync, rename and directory fsync: %d "
	      "operations",
	      in_window);
	CHECK(after > 0,
	      "the disk tier wrote its other files after the save "
	      "(%d writes)",
	      after);
	CHECK(toy_stat(e.c, "disk", "anchors_written") == 4,
	      "the disk tier wrote its 4 head anchors: %lld",
	      toy_stat(e.c, "disk", "anchors_written"));
	toy_close(&e);

	/* the drained conversation reads back */
	toy_cfg_disk(&cfg, "dys", "b", dir);
	toy_open(&e, &cfg, 4096, G);
	CHECK(e.ho.resident_len == valid &&
		  toy_equal(e.lay, &e.s, &truth, valid, "read back"),
	      "the drained conversation read back: %llu tokens, want %llu",
	      (unsigned long long)e.ho.resident_len, (unsigned long long)valid);
	toy_close(&e);
	toy_seq_free(&truth);
	free(A);
	dfile_rm_rf(AT_FDCWD, dir);
	return t_done("test_disk_yields_to_spill");
}
