/* test_proto_nng: proto messages over real NNG sockets on ipc:// in a
 * temporary directory.
 *
 * REQ/REP: proto_call gets its reply; a PROTO_ERROR reply returns its code
 * with the message kept; a peer of another version is answered with
 * MOOR_EVERSION and the same req, and the server keeps serving; a slow
 * answer and a missing peer time out within the bound, and the late reply
 * does not confuse the next call. PAIR1 poly: two dialers, each reply
 * routed back to the pipe its request came on. */
#include "moor.h"
#include "net.h"
#include "proto.h"
#include "t.h"

#include <nng/protocol/pair1/pair.h>
#include <nng/protocol/reqrep0/rep.h>
#include <nng/protocol/reqrep0/req.h>

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char dir[64];

static void url(char *out, size_t n, const char *name)
{
	snprintf(out, n, "ipc://%s/%s", dir, name);
}

static void sock_path_unlink(const char *name)
{
	char p[128];
	snprintf(p, sizeof p, "%s/%s", dir, name);
	unlink(p);
}

/* ---- a REP server: PLAN -> PLAN_OK, STATS -> STATS_OK, CLEAR -> OK
 * (CLEAR "slow" after 500 ms), anything else -> PROTO_ERROR ---- */

static void *rep_main(void *arg)
{
	nng_socket s = *(nng_socket *)arg;
	for (;;) {
		proto_msg m, r = {0};
		nng_pipe pipe;
		int rv = proto_recv(s, &m, &pipe, -1);
		if (rv == -EPIPE)
			break; /* closed: the test is over */
		if (rv) {
			proto_send_error(s, pipe, m.h.req, rv,
					 "cannot read a %s (version %u): %s",
					 proto_type_name(m.h.type), m.h.version,
					 moor_strerror(rv));
			proto_msg_fini(&m);
			continue;
		}
		r.h.req = m.h.req;
		proto_slot slot = {0};
		switch (m.h.type) {
		case PROTO_PLAN:
			r.h.type = PROTO_PLAN_OK;
			r.u.plan_ok.start = m.u.plan.n_ids;
			r.u.plan_ok.cached = m.u.plan.n_ids;
			r.u.plan_ok.tier = PROTO_TIER_RESIDENT;
			slot.line = m.u.plan.max_tokens;
			slot.offset = 4096;
			r.u.plan_ok.n_slots = 1;
			r.u.plan_ok.slots = &slot;
			break;
		case PROTO_STATS:
			r.h.type = PROTO_STATS_OK;
			r.u.text.text = "{\"hits\":1}";
			break;
		case PROTO_CLEAR:
			if (!strcmp(m.u.clear.tier, "slow"))
				usleep(500 * 1000);
			r.h.type = PROTO_OK;
			break;
		default:
			proto_send_error(s, pipe, m.h.req, MOOR_EUNSUP,
					 "unexpected %s",
					 proto_type_name(m.h.type));
			proto_msg_fini(&m);
			continue;
		}
		rv = proto_send(s, &r, pipe);
		if (rv)
			fprintf(stderr, "rep: send: %s\n", moor_strerror(rv));
		proto_msg_fini(&m);
	}
	return NULL;
}

static void test_reqrep(void)
{
	char u[128];
	url(u, sizeof u, "cached.sock");
	nng_socket rep, req;
	REQUIRE(nng_rep0_open(&rep) == 0, "rep open");
	REQUIRE(proto_nng_err(nng_listen(rep, u, NULL, 0)) == 0, "listen %s",
		u);
	pthread_t th;
	REQUIRE(pthread_create(&th, NULL, rep_main, &rep) == 0, "thread");
	REQUIRE(nng_req0_open(&req) == 0, "req open");
	int rv = proto_nng_err(nng_dial(req, u, NULL, 0));
	REQUIRE(rv == 0, "dial: %s", moor_strerror(rv));

	/* a call */
	int32_t ids[] = {5, 6, 7};
	proto_msg q = {0}, r;
	q.h.type = PROTO_PLAN;
	q.h.req = 1001;
	q.u.plan = (proto_plan){
	    .session = "s", .max_tokens = 9, .n_ids = 3, .ids = ids};
	rv = proto_call(req, &q, &r, 2000);
	CHECK(rv == 0, "PLAN: %s", moor_strerror(rv));
	CHECK(r.h.type == PROTO_PLAN_OK && r.h.req == 1001, "PLAN_OK, req");
	CHECK(r.u.plan_ok.start == 3 && r.u.plan_ok.n_slots == 1 &&
		  r.u.plan_ok.slots[0].line == 9 &&
		  r.u.plan_ok.slots[0].offset == 4096,
	      "PLAN_OK fields");
	proto_msg_fini(&r);

	/* an error reply: its code, its message kept */
	memset(&q, 0, sizeof q);
	q.h.type = PROTO_COMMIT;
	q.h.req = 1002;
	rv = proto_call(req, &q, &r, 2000);
	CHECK(rv == MOOR_EUNSUP, "COMMIT: %d %s", rv, moor_strerror(rv));
	CHECK(r.h.type == PROTO_ERROR && r.h.req == 1002 && r.u.error.msg &&
		  strstr(r.u.error.msg, "COMMIT"),
	      "error reply kept: %s", r.u.error.msg ? r.u.error.msg : "-");
	proto_msg_fini(&r);

	/* a peer of another version: refused with the same req */
	{
		moor_buf b = {0};
		memset(&q, 0, sizeof q);
		q.h.type = PROTO_STATS;
		q.h.req = 1003;
		REQUIRE(proto_encode(&b, &q) == 0, "encode");
		b.p[4] = PROTO_VERSION + 1;
		rv = proto_nng_err(nng_send(req, b.p, b.len, 0));
		CHECK(rv == 0, "raw send: %s", moor_strerror(rv));
		rv = proto_recv(req, &r, NULL, 2000);
		CHECK(rv == 0, "recv: %s", moor_strerror(rv));
		CHECK(r.h.type == PROTO_ERROR && r.h.req == 1003 &&
			  r.u.error.code == MOOR_EVERSION,
		      "version refused: type %u req %llu code %d", r.h.type,
		      (unsigned long long)r.h.req, r.u.error.code);
		char vs[32];
		snprintf(vs, sizeof vs, "version %d", PROTO_VERSION + 1);
		CHECK(r.u.error.msg && strstr(r.u.error.msg, vs),
		      "names the version: %s",
		      r.u.error.msg ? r.u.error.msg : "-");
		proto_msg_fini(&r);
		moor_buf_fini(&b);
	}

	/* a slow answer times out within the bound */
	memset(&q, 0, sizeof q);
	q.h.type = PROTO_CLEAR;
	q.h.req = 1004;
	q.u.clear.tier = "slow";
	double t0 = moor_now();
	rv = proto_call(req, &q, &r, 100);
	double dt = moor_now() - t0;
	CHECK(rv == -ETIMEDOUT, "slow CLEAR: %s", moor_strerror(rv));
	CHECK(dt >= 0.09 && dt < 0.6, "timed out after %.3f s", dt);
	proto_msg_fini(&r);

	/* the server still serves, and its late OK is not taken as ours */
	memset(&q, 0, sizeof q);
	q.h.type = PROTO_STATS;
	q.h.req = 1005;
	rv = proto_call(req, &q, &r, 3000);
	CHECK(rv == 0, "STATS after timeout: %s", moor_strerror(rv));
	CHECK(r.h.type == PROTO_STATS_OK && r.h.req == 1005 && r.u.text.text &&
		  !strcmp(r.u.text.text, "{\"hits\":1}"),
	      "STATS_OK after timeout: type %s", proto_type_name(r.h.type));
	proto_msg_fini(&r);

	/* an encode error is returned before anything is sent */
	int32_t one = 1;
	memset(&q, 0, sizeof q);
	q.h.type = PROTO_PLAN;
	q.u.plan.n_ids = PROTO_MAX_IDS + 1;
	q.u.plan.ids = &one;
	CHECK(proto_call(req, &q, &r, 1000) == MOOR_ERANGE, "encode error");
	proto_msg_fini(&r);

	nng_close(req);
	nng_close(rep);
	pthread_join(th, NULL);
	sock_path_unlink("cached.sock");

	/* closed sockets: -EPIPE */
	memset(&q, 0, sizeof q);
	q.h.type = PROTO_OK;
	CHECK(proto_send(req, &q, (nng_pipe)NNG_PIPE_INITIALIZER) == -EPIPE,
	      "send on a closed socket");
	CHECK(proto_recv(req, &r, NULL, 10) == -EPIPE,
	      "recv on a closed socket");
}

/* No peer at all: the request waits in REQ's queue, the call times out. */
static void test_no_peer_times_out(void)
{
	char u[128];
	url(u, sizeof u, "nobody.sock");
	nng_socket req;
	REQUIRE(nng_req0_open(&req) == 0, "req open");
	int rv = proto_nng_err(nng_dial(req, u, NULL, 0));
	CHECK(rv == -ECONNREFUSED || rv == -ENOENT, "dial nothing: %s",
	      moor_strerror(rv));
	REQUIRE(nng_dial(req, u, NULL, NNG_FLAG_NONBLOCK) == 0, "dial bg");
	proto_msg q = {0}, r;
	q.h.type = PROTO_STATS;
	double t0 = moor_now();
	rv = proto_call(req, &q, &r, 150);
	double dt = moor_now() - t0;
	CHECK(rv == -ETIMEDOUT, "no peer: %s", moor_strerror(rv));
	CHECK(dt >= 0.14 && dt < 0.65, "timed out after %.3f s", dt);
	proto_msg_fini(&r);
	nng_close(req);
}

/* ---- PAIR1 poly: one listener, two dialers ---- */

static void test_pair_poly(void)
{
	char u[128];
	url(u, sizeof u, "engined.sock");
	nng_socket srv, cli[2];
	REQUIRE(nng_pair1_open_poly(&srv) == 0, "poly open");
	REQUIRE(nng_listen(srv, u, NULL, 0) == 0, "listen");
	for (int i = 0; i < 2; i++) {
		REQUIRE(nng_pair1_open(&cli[i]) == 0, "pair open");
		REQUIRE(nng_dial(cli[i], u, NULL, 0) == 0, "dial");
	}

	/* nothing queued: a zero timeout returns at once */
	proto_msg m;
	double t0 = moor_now();
	int rv = proto_recv(srv, &m, NULL, 0);
	CHECK(rv == -ETIMEDOUT && moor_now() - t0 < 0.2, "empty poll: %s",
	      moor_strerror(rv));

	for (int round = 0; round < 10; round++) {
		nng_pipe from[2] = {NNG_PIPE_INITIALIZER, NNG_PIPE_INITIALIZER};
		int32_t ids[2] = {0};
		for (int i = 0; i < 2; i++) {
			int32_t id = round * 10 + i;
			proto_msg g = {0};
			g.h.type = PROTO_GENERATE;
			g.h.req = (uint64_t)(100 * round + i);
			g.u.gen.n_ids = 1;
			g.u.gen.ids = &id;
			rv = proto_send(cli[i], &g,
					(nng_pipe)NNG_PIPE_INITIALIZER);
			CHECK(rv == 0, "client %d send: %s", i,
			      moor_strerror(rv));
		}
		/* the server learns each request's pipe */
		for (int k = 0; k < 2; k++) {
			nng_pipe p;
			rv = proto_recv(srv, &m, &p, 2000);
			REQUIRE(rv == 0, "server recv: %s", moor_strerror(rv));
			REQUIRE(m.h.type == PROTO_GENERATE &&
				    m.u.gen.n_ids == 1,
				"GENERATE");
			int i = (int)(m.h.req % 100);
			REQUIRE(i == 0 || i == 1, "req %llu",
				(unsigned long long)m.h.req);
			from[i] = p;
			ids[i] = m.u.gen.ids[0];
			CHECK(nng_pipe_id(p) > 0, "pipe id");
			proto_msg_fini(&m);
		}
		CHECK(nng_pipe_id(from[0]) != nng_pipe_id(from[1]),
		      "two pipes");
		/* answer in the other order, to the right pipes */
		for (int k = 1; k >= 0; k--) {
			proto_step_entry e = {.req =
						  (uint64_t)(100 * round + k),
					      .token = ids[k] + 1000,
					      .finish = PROTO_FINISH_NONE};
			proto_msg s = {0};
			s.h.type = PROTO_STEP;
			s.u.step.n = 1;
			s.u.step.e = &e;
			CHECK(proto_send(srv, &s, from[k]) == 0, "step send");
			proto_msg d = {0};
			d.h.type = PROTO_DONE;
			d.h.req = e.req;
			d.u.done.finish = PROTO_FINISH_STOP;
			d.u.done.completion_tokens = 1;
			CHECK(proto_send(srv, &d, from[k]) == 0, "done send");
		}
		for (int i = 0; i < 2; i++) {
			rv = proto_recv(cli[i], &m, NULL, 2000);
			CHECK(rv == 0 && m.h.type == PROTO_STEP &&
				  m.u.step.n == 1 &&
				  m.u.step.e[0].req ==
				      (uint64_t)(100 * round + i) &&
				  m.u.step.e[0].token == round * 10 + i + 1000,
			      "client %d round %d: its STEP", i, round);
			proto_msg_fini(&m);
			rv = proto_recv(cli[i], &m, NULL, 2000);
			CHECK(rv == 0 && m.h.type == PROTO_DONE &&
				  m.h.req == (uint64_t)(100 * round + i),
			      "client %d round %d: its DONE", i, round);
			proto_msg_fini(&m);
		}
	}
	/* and no strays */
	for (int i = 0; i < 2; i++)
		CHECK(proto_recv(cli[i], &m, NULL, 50) == -ETIMEDOUT,
		      "client %d: nothing more", i);

	/* a malformed message still tells the server its pipe and header */
	{
		moor_buf b = {0};
		proto_msg c = {0};
		c.h.type = PROTO_CANCEL;
		c.h.req = 77;
		REQUIRE(proto_encode(&b, &c) == 0, "encode");
		REQUIRE(nng_send(cli[1], b.p, b.len - 1, 0) == 0, "raw send");
		nng_pipe p;
		rv = proto_recv(srv, &m, &p, 2000);
		CHECK(rv == MOOR_EFORMAT && m.h.req == 77 &&
			  m.h.type == PROTO_CANCEL && nng_pipe_id(p) > 0,
		      "malformed: %s req %llu", moor_strerror(rv),
		      (unsigned long long)m.h.req);
		proto_msg_fini(&m);
		CHECK(proto_send_error(srv, p, m.h.req, rv, "bad %s",
				       "cancel") == 0,
		      "send_error");
		rv = proto_recv(cli[1], &m, NULL, 2000);
		CHECK(rv == 0 && m.h.type == PROTO_ERROR && m.h.req == 77 &&
			  m.u.error.code == MOOR_EFORMAT &&
			  !strcmp(m.u.error.msg, "bad cancel"),
		      "error routed back");
		proto_msg_fini(&m);
		moor_buf_fini(&b);
	}

	/* a message queued is taken with a zero timeout */
	{
		proto_msg c = {0};
		c.h.type = PROTO_CANCEL;
		c.u.cancel.target = 5;
		CHECK(proto_send(cli[0], &c, (nng_pipe)NNG_PIPE_INITIALIZER) ==
			  0,
		      "send");
		rv = -ETIMEDOUT;
		for (int tries = 0; tries < 2000 && rv == -ETIMEDOUT; tries++) {
			rv = proto_recv(srv, &m, NULL, 0);
			if (rv == -ETIMEDOUT)
				usleep(1000);
		}
		CHECK(rv == 0 && m.h.type == PROTO_CANCEL &&
			  m.u.cancel.target == 5,
		      "polled: %s", moor_strerror(rv));
		proto_msg_fini(&m);
	}

	/* a long error text is cut to PROTO_MAX_STR, not refused */
	{
		nng_pipe p;
		proto_msg c = {0};
		c.h.type = PROTO_STATS;
		CHECK(proto_send(cli[0], &c, (nng_pipe)NNG_PIPE_INITIALIZER) ==
			  0,
		      "send");
		REQUIRE(proto_recv(srv, &m, &p, 2000) == 0, "recv");
		proto_msg_fini(&m);
		char *big = calloc(1, 3 * PROTO_MAX_STR);
		REQUIRE(big, "alloc");
		memset(big, 'e', 3 * PROTO_MAX_STR - 1);
		CHECK(proto_send_error(srv, p, 9, -EIO, "%s", big) == 0,
		      "long error");
		rv = proto_recv(cli[0], &m, NULL, 2000);
		CHECK(rv == 0 && m.h.type == PROTO_ERROR &&
			  strlen(m.u.error.msg) == PROTO_MAX_STR,
		      "error text cut");
		proto_msg_fini(&m);
		free(big);
	}

	for (int i = 0; i < 2; i++)
		nng_close(cli[i]);
	nng_close(srv);
	sock_path_unlink("engined.sock");
}

static void test_err_map(void)
{
	CHECK(proto_nng_err(0) == 0, "0");
	CHECK(proto_nng_err(NNG_ETIMEDOUT) == -ETIMEDOUT, "timedout");
	CHECK(proto_nng_err(NNG_ECLOSED) == -EPIPE, "closed");
	CHECK(proto_nng_err(NNG_ECONNREFUSED) == -ECONNREFUSED, "refused");
	CHECK(proto_nng_err(NNG_ENOMEM) == -ENOMEM, "nomem");
	CHECK(proto_nng_err(NNG_EADDRINUSE) == -EADDRINUSE, "inuse");
	CHECK(proto_nng_err(NNG_ENOENT) == -ENOENT, "noent");
	CHECK(proto_nng_err(NNG_EPROTO) == -EIO, "proto -> EIO");
	CHECK(proto_nng_err(NNG_EINTERNAL) == -EIO, "internal -> EIO");
	CHECK(proto_nng_err(NNG_ESYSERR | EACCES) == -EACCES, "syserr");
}

/* An ipc socket is 0600 from its creation, whatever the umask (cached
 * and engined listen so): a plain nng_listen under umask 0 makes it
 * group- and world-writable, which the daemons then chmod'ed by path. */
static void test_listen_private(void)
{
	char u[128], p[128];
	mode_t old = umask(0);
	struct stat st;
	nng_socket a, b;
	url(u, sizeof u, "plain.sock");
	snprintf(p, sizeof p, "%s/plain.sock", dir);
	REQUIRE(nng_rep0_open(&a) == 0, "open");
	REQUIRE(nng_listen(a, u, NULL, 0) == 0, "listen");
	REQUIRE(stat(p, &st) == 0, "stat %s", p);
	CHECK((st.st_mode & 077) != 0, "umask 0: a plain listen made %03o",
	      (unsigned)(st.st_mode & 0777));
	nng_close(a);
	unlink(p);
	url(u, sizeof u, "private.sock");
	snprintf(p, sizeof p, "%s/private.sock", dir);
	REQUIRE(nng_rep0_open(&b) == 0, "open");
	int rv = proto_listen_private(b, u);
	REQUIRE(rv == 0, "listen private: %s", moor_strerror(rv));
	REQUIRE(stat(p, &st) == 0, "stat %s", p);
	CHECK((st.st_mode & 0777) == 0600, "a private listen made %03o",
	      (unsigned)(st.st_mode & 0777));
	CHECK(umask(old) == 0, "the umask was not restored");
	nng_close(b);
	unlink(p);
}

int main(void)
{
	strcpy(dir, "/tmp/moor-proto-XXXXXX");
	REQUIRE(mkdtemp(dir), "mkdtemp");
	test_err_map();
	test_reqrep();
	test_no_peer_times_out();
	test_pair_poly();
	test_listen_private();
	rmdir(dir);
	return t_done("test_proto_nng");
}
