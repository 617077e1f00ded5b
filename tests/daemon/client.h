/* client.h: a client of engined's socket for tests and moor_client
 * (`mc_`): GENERATE, the STEPs of a request, its DONE, CANCEL.
 *
 * The connection notices when engined goes away (its pipe is removed), so
 * a wait ends with -EPIPE within one poll slice instead of running to its
 * timeout.
 */
#ifndef MC_CLIENT_H
#define MC_CLIENT_H

#include <stdatomic.h>
#include <stdint.h>

#include <nng/nng.h>

#include "proto.h"

typedef struct mc_conn {
	nng_socket s;
	atomic_int pipes; /* pipes attached now */
	atomic_int gone;  /* a pipe went away since mc_open */
} mc_conn;

/* Dials ipc://RUN/engined.sock and waits up to timeout_ms for the pipe.
 * The conn must stay at its address while open (pipe callbacks hold it). */
int mc_open(mc_conn *c, const char *run_dir, int timeout_ms);
void mc_close(mc_conn *c);

typedef struct mc_params {
	const int32_t *ids;
	uint32_t n_ids;
	uint32_t max_tokens;
	float temperature, top_p, min_p;
	int32_t top_k;
	uint64_t seed;
	uint32_t flags; /* PROTO_PLAN_*, ENG_GEN_* */
	const char *session;
	const int32_t *stop_ids;
	uint32_t n_stop;
	uint32_t top_logprobs; /* with PROTO_GEN_LOGPROBS in flags */
	/* the reasoning budget (proto_generate's), with PROTO_GEN_THINKING */
	uint32_t budget, n_hidden, n_close;
	int32_t think_close;
	const int32_t *close_ids;
} mc_params;

typedef struct mc_result {
	int rv;		 /* 0: a DONE came; else the wait's error */
	int32_t *tokens; /* heap, the STEPs' tokens in order */
	proto_step_entry *steps; /* heap, the STEPs' entries, as tokens */
	uint32_t n_tokens;
	uint32_t finish; /* DONE's fields */
	int32_t code;
	uint32_t tier;
	uint64_t prompt_tokens, cached_tokens, completion_tokens;
	char msg[512];
} mc_result;

void mc_result_fini(mc_result *r);

int mc_send_generate(mc_conn *c, uint64_t req, const mc_params *p);
/* Confirms one received message to engined (proto.h: PROTO_CREDIT); every
 * reader of engined.sock sends one per message it receives. */
void mc_credit(mc_conn *c);
int mc_send_cancel(mc_conn *c, uint64_t req, uint64_t target);

/* Collects the STEPs of request req until its DONE (messages of other
 * requests are skipped). cancel_after > 0: sends CANCEL once that many
 * tokens came. Returns r->rv: 0, -ETIMEDOUT after timeout_ms, -EPIPE when
 * engined went away, a decode error. */
int mc_wait(mc_conn *c, uint64_t req, mc_result *r, int timeout_ms,
	    uint32_t cancel_after);

/* mc_send_generate + mc_wait. */
int mc_generate(mc_conn *c, uint64_t req, const mc_params *p, mc_result *r,
		int timeout_ms);

#endif
