/* daemon.h: what the files of the cached daemon share (`cd_`): its state
 * and the calls between its parts. Not the cache core's (cache.h): the
 * daemon wraps the core in NNG.
 *
 *   main.c      the essay, the sockets, the loop, start and stop
 *   flags.c     the command line: options, their values, the arenas'
 *               fit against /dev/shm, the device arena's kind
 *   handlers.c  one handler a message type, and the dispatch (cd_handle)
 *   replies.c   the replies: OK, ERROR, and what a message that did not
 *               decode is told (cd_reply_bad)
 *
 * One thread runs every handler (main.c's loop); only cd_eng_pipe_live is
 * written from NNG's thread too (the pipe callback). */
#ifndef CACHED_DAEMON_H
#define CACHED_DAEMON_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include <nng/nng.h>

#include "cache.h"
#include "proto.h"

enum { SOCK_ENG = 0, SOCK_ADMIN = 1 };

typedef struct cd {
	cache *c;
	cache_cfg cfg;
	char run_dir[256];
	char path[2][300];
	char url[2][320];
	nng_socket sock[2];
	int open[2];
	double t_start;

	/* the attached engine */
	uint32_t eng_pipe; /* nng_pipe id; 0: none */
	uint32_t eng_pid;
	uint64_t eng_window;
	uint32_t eng_grid;
	uint8_t fp[32];
	int have_fp;
	int plan_open;
	int plan_scratch; /* the open plan is a scratch run's */
	uint64_t plan_start;
	uint64_t plan_n, plan_salt; /* the open plan's prompt, its salt */
	char salted_session[PROTO_MAX_STR + 20];

	/* --device, --gpu; whether --unified was given */
	const char *dev_mode;
	uint32_t gpu;
	int unified_set;
	int dev_gb_set, host_gb_set; /* the arena sizes were given */

	/* counters */
	uint64_t n_msgs, n_errors, n_hello, n_plan, n_commit, n_abort, n_peek;
	uint64_t n_scratch; /* scratch runs planned (the compaction preparer) */

	/* big scratch, carved once */
	cache_layout lay;
	cache_hello_out ho;
	cache_plan_out po;
	uint64_t sec_off[CACHE_MAX_SECTIONS], view_off[CACHE_MAX_VIEWS];
	proto_slot slots[CACHE_MAX_SLOTS];
} cd;

/* The attached engine's pipe while its connection is up; 0 once it is
 * gone. Written by the HELLO handler and by NNG's pipe callback. */
extern _Atomic uint32_t cd_eng_pipe_live;
void cd_on_pipe_gone(nng_pipe p, nng_pipe_ev ev, void *arg);

/* ---- replies.c ---- */
/* Sends m on socket w (logged when it cannot be sent). On the engine's
 * socket it waits for the mover first (cache_sync): the engine never
 * reads bytes cached is still writing. */
int cd_send(cd *d, int w, proto_msg *m);
void cd_reply_ok(cd *d, int w, uint64_t req);
void cd_reply_err(cd *d, int w, uint64_t req, int code, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
/* Answers a message of len bytes that did not decode (rc), or one over
 * the largest a message may be, saying why: oversized, short, another
 * magic or version, truncated, an unknown type, a malformed payload. */
void cd_reply_bad(cd *d, int w, const uint8_t *b, size_t len, int rc);

/* ---- handlers.c ---- */
/* One message of socket w: decoded, checked against what w serves,
 * handled, answered (never an exit). */
void cd_handle(cd *d, int w, nng_msg *nm);
/* A plan left open (the engine died, a new one attaches, the drain):
 * aborted to its start. */
void cd_close_open_plan(cd *d, const char *why);

/* ---- flags.c ---- */
/* 0: go on; 1: --help was printed; 2: a bad flag (said). *prefix: the
 * --arena-prefix given, else untouched. */
int cd_parse_args(cd *d, int argc, char **argv, const char **prefix);
int cd_device_pick(cd *d);
int cd_shm_fit(cd *d);

#endif
