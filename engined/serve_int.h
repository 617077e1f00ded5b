/* serve_int.h: what the files of engined's daemon share (serve.h is the
 * daemon's face). Not for callers outside engined/.
 *
 * The daemon's files, one seam each:
 *   serve.c    threads, the worker loop, the model's load, eng_serve;
 *   attach.c   cached's arenas from HELLO_OK: the device arena imported
 *              through the backend (import_ipc), the sequence's buffers
 *              pointed into it;
 *   link.c     the REQ socket to cached: HELLO, one round trip, ABORT;
 *   clients.c  engined.sock: the receiver thread, the queue, CANCEL;
 *   turn.c     one request: plan, prefill, decode, commit;
 *   fingerprint.c  eng_serve_fingerprint.
 *
 * Threads (serve.c says more): the worker runs requests; the receiver and
 * NNG's pipe callbacks share the queue and the flags with it under `mu`;
 * the running request's cancel flag and the pipe counter are atomics the
 * worker polls once per decode step.
 */
#ifndef ENG_SERVE_INT_H
#define ENG_SERVE_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include <nng/nng.h>

#include "eng.h"
#include "net.h"
#include "outbox.h"
#include "proto.h"
#include "serve.h"

/* A STEP's most entries (turn.c's steps_flush): ENG_STEP_MAX without
 * logprobs (24 bytes each on the wire), ENG_STEP_MAX_LP with them (up to
 * 184): either keeps one STEP under PROTO_MAX_PAYLOAD. pend holds
 * ENG_STEP_MAX. */
#define ENG_STEP_MAX 65536
#define ENG_STEP_MAX_LP 16384

/* A GENERATE waiting or running: the decoded message owns its arrays. */
typedef struct job {
	nng_pipe pipe;
	proto_msg m; /* m.u.gen */
} job;

typedef struct srv {
	const eng_serve_cfg *cfg;
	char run_dir[256];
	char cached_url[300], eng_url[320], eng_path[300];

	const kern_ops *ops;
	kern_ctx *kctx;
	eng_model *model;
	const eng_layout *lay;
	int vocab, eos;
	uint8_t fp[32];

	/* the link to cached (REQ); pipes_added counts pipes NNG attached,
	 * hello_gen is its value at the last good HELLO; attached drops to 0
	 * when a call fails in transport (the next request HELLOs first; the
	 * old arenas stay mapped until that HELLO replaces them); cq_dial
	 * dials cq, again after a call timed out (link.c says why) */
	nng_socket cq;
	proto_dialer *cq_dial;
	atomic_uint pipes_added;
	unsigned hello_gen;
	int attached;
	uint64_t next_id;

	/* cached's arenas: dev_k is the device arena as the backend imported
	 * it (import_ipc: a shm mapping on the CPU, a CUDA IPC mapping on the
	 * GPU); host is the host arena's shm mapping (engined reads none of
	 * it today: cached's mover copies between the two) */
	void *host, *dev_k;
	uint64_t dev_size, host_size;
	eng_seq seq;

	/* clients (PAIR1 poly); every send to them goes through `out` */
	nng_socket cs;
	int cs_open;
	eng_outbox *out;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	job **queue; /* FIFO of queue_max */
	int qn;
	job *cur;
	atomic_int cancel; /* 1: CANCEL; 2: the client went away */
	int stop;
	int exiting; /* the signal thread is woken to end, not by a signal */

	/* worker scratch, allocated once */
	int32_t *gen;		/* [window] tokens the state absorbed */
	eng_slot *slots;	/* [PROTO_MAX_SLOTS] */
	proto_step_entry *pend; /* [ENG_STEP_MAX] steps not sent yet */
	uint32_t n_pend;
	char done_msg[MOOR_ERRLEN]; /* the running request's DONE text */
} srv;

/* serve.c: the stop flag, under mu. */
int srv_stopping(srv *s);

/* attach.c: maps HELLO_OK's arenas (the device arena through the backend's
 * import_ipc) and points s->seq into them, each offset checked against the
 * arena; err: MOOR_ERRLEN. srv_arenas_unmap undoes it (safe when nothing
 * is mapped). */
int srv_arenas_attach(srv *s, const proto_hello_ok *h, char *err);
void srv_arenas_unmap(srv *s);

/* link.c: the REQ socket to cached (dialled without blocking); one round
 * trip (msg, MOOR_ERRLEN or NULL, gets the error's text); HELLO and the
 * attach of its answer; the first attach at start (waits up to
 * connect_timeout_s, -EINTR when stopped); ABORT of the open plan (logged
 * only). */
int srv_cached_open(srv *s);
int srv_cached_call(srv *s, proto_msg *q, proto_msg *rep, char *msg);
int srv_cached_hello(srv *s, char *err);
int srv_cached_attach_first(srv *s);
void srv_cached_abort(srv *s, int n_filled, int64_t valid);

/* clients.c: engined.sock (its lock, listen), the receiver thread's main,
 * a DONE to one client, a job's release (safe on NULL). */
int srv_clients_open(srv *s);
void *srv_receiver_main(void *arg);
void srv_send_done(srv *s, nng_pipe p, uint64_t req, uint32_t finish,
		   int code, const char *msg);
void srv_job_free(job *j);

/* turn.c: runs one request and fills its DONE (d, whose msg points into
 * msg); the worker sends it once the request no longer counts as running. */
void srv_run_job(srv *s, job *j, proto_done *d, char *msg);

#endif
