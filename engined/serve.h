/* serve.h: engined's daemon mode (`eng_serve_`): attach to cached, compute
 * into its arenas, serve GENERATE requests on engined.sock.
 *
 * One request runs at a time (side slots come later). A turn:
 *
 *   client --GENERATE--> engined --PLAN--> cached   (restores the state,
 *                                    <--PLAN_OK--    answers start + slots)
 *   engined prefills [start, n) on the grid, filling the slots, then
 *   decodes: one STEP per decode step --> client
 *   engined --COMMIT (n_filled, absorbed ids)--> cached  <--OK--
 *   engined --DONE--> client
 *
 * A failure after the PLAN sends ABORT instead of COMMIT and DONE carries
 * the error. A long prefill sends PROGRESS messages to the client (at most
 * every progress_ms) between PLAN_OK and the first STEP. A GENERATE with
 * PROTO_PLAN_SCRATCH (the gateway's compaction preparer) is planned as a
 * scratch run (cached: cache_scratch_plan), ends with ABORT whatever
 * happens (nothing is committed), and stops at its next prefill chunk or
 * decode step as soon as another GENERATE queues behind it. A CANCEL (or the client's pipe going away) ends the decode at
 * the next step; what the state absorbed is still committed.
 *
 * The sequence's buffers are cached's: every section and view pointer of
 * the eng_seq is the device arena's base plus an offset HELLO_OK gave, so a
 * SIGKILL of engined loses the request in flight and nothing else.
 */
#ifndef ENG_SERVE_H
#define ENG_SERVE_H

#include <stdint.h>

#include "eng.h"

typedef struct eng_serve_cfg {
	const char *model_dir;
	const kern_ops *ops; /* the backend (eng_backend_pick) */
	int device;	     /* its GPU ordinal (device backends) */
	const char *run_dir; /* NULL: moor_run_dir_default */
	eng_opts opts;
	int connect_timeout_s;	/* wait for cached at start: 30 */
	int call_timeout_s;	/* one PLAN/COMMIT/HELLO round trip: 30 */
	int queue_max;		/* requests waiting behind the one running: 64 */
	int test_step_delay_ms; /* test seam: sleep before each decode step */
	/* a long prefill's progress line (log and PROTO_PROGRESS to the
	 * client) at most every progress_ms: 1000; 0: none */
	int progress_ms;
} eng_serve_cfg;

/* Runs the daemon until SIGTERM or SIGINT (the request in flight finishes,
 * queued ones get DONE with -ESHUTDOWN). Returns 0 on a clean stop, or a
 * negative code when it could not start (logged). */
int eng_serve(const eng_serve_cfg *cfg);

/* The 32-byte fingerprint of what computes stored rows (fingerprint.c says
 * what it reads): config.json; the weights by content (every tensor's name,
 * dtype, shape and sha256, in name order across the files, remembered per
 * file by device, inode, size and mtime) or, with dummy weights
 * (opts->load_format ENG_LOAD_DUMMY), the word "dummy" and their seed; the
 * sources that compute rows and the build's arithmetic flags; the grid,
 * the backend's name and contract version and its libraries. Two XXH3-128
 * digests of the same stream under two seeds. err: MOOR_ERRLEN. */
int eng_serve_fingerprint(const char *model_dir, const eng_opts *opts,
			  int grid, const char *backend, uint8_t out[32],
			  char *err);

#endif
