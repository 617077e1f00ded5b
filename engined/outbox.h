/* outbox.h: what engined sends its clients, under flow control
 * (`eng_out_`).
 *
 * engined.sock is a PAIR1 poly socket: each client pipe has a send queue
 * of two messages in NNG 1.5 and a message that does not fit is dropped
 * without a word (a DONE lost so is a request that is never answered). The
 * outbox sends a pipe at most PROTO_CREDIT_INITIAL messages more than the
 * client has confirmed with PROTO_CREDIT (proto.h), so NNG's queue never
 * overflows, and keeps the rest in order in a queue of its own per pipe.
 * Nothing blocks on a client: a client that stops crediting only grows its
 * own queue, which holds at most the replies to requests it sent (one DONE
 * each, an ERROR per malformed message, the STEPs the worker coalesces).
 *
 * Thread-safe: the worker, the receiver and NNG's pipe callbacks call it.
 */
#ifndef ENG_OUTBOX_H
#define ENG_OUTBOX_H

#include <stdint.h>

#include <nng/nng.h>

#include "proto.h"

typedef struct eng_outbox eng_outbox;

/* An outbox on socket s (borrowed; it outlives the outbox). 0 or -ENOMEM. */
int eng_out_new(nng_socket s, eng_outbox **out);
/* Frees what is queued; safe on NULL. */
void eng_out_free(eng_outbox *o);

/* A client pipe came (ADD_POST) or went (REM_POST): a pipe that went
 * loses its queue, and later sends to it are dropped (-EPIPE). */
void eng_out_pipe_add(eng_outbox *o, nng_pipe p);
void eng_out_pipe_rem(eng_outbox *o, nng_pipe p);

/* Queues m for pipe p (encoded now; m is borrowed) and sends what the
 * pipe's credit allows. 0, -EPIPE (the pipe is gone or unknown), an
 * encode error or -ENOMEM. */
int eng_out_send(eng_outbox *o, nng_pipe p, const proto_msg *m);

/* The client of p confirmed n messages: sends what waits. */
void eng_out_credit(eng_outbox *o, nng_pipe p, uint32_t n);

/* Whether p could take a message now (credit left, nothing waiting), so
 * the worker sends a STEP instead of coalescing it with the next. */
int eng_out_ready(eng_outbox *o, nng_pipe p);

/* Waits up to timeout_ms for every queue to empty (at shutdown, so the
 * last DONEs leave before the socket closes). 1: empty, 0: not. */
int eng_out_drain(eng_outbox *o, int timeout_ms);

#endif
