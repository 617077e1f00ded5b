/* test_cached_bad_messages: a live cached answers truncated, oversized,
 * wrong-type, wrong-version, bad-magic and malformed messages on both its
 * sockets with PROTO_ERROR naming what was wrong, refuses PLAN before HELLO
 * and a HELLO of a nonsense layout, and keeps serving: a valid STATS still
 * works after all of them, and the process is alive.
 *
 * PEEK: refused before any HELLO, on cached.sock, with its ids cut short,
 * a hostile count, bytes left over, no ids and more than the window; after
 * a HELLO of a small layout a valid PEEK answers (cold: tier none, 0
 * cached, no taint, nothing to restore) and changes nothing. STATS'
 * "engine" object: null fields before the HELLO, the HELLO's pid, window
 * and grid after, attached until that connection closes.
 *
 *   test_cached_bad_messages CACHED
 */
#include "t.h"

#include <jansson.h>
#include <nng/nng.h>
#include <nng/protocol/reqrep0/req.h>

#include "harness.h"
#include "net.h"
#include "proto.h"

static nng_socket dial(const char *run, const char *name)
{
	char url[300];
	snprintf(url, sizeof url, "ipc://%s/%s", run, name);
	nng_socket s;
	REQUIRE(nng_req0_open(&s) == 0, "req0");
	REQUIRE(nng_dial(s, url, NULL, 0) == 0, "dial %s", url);
	nng_socket_set_ms(s, NNG_OPT_RECVTIMEO, 10000);
	nng_socket_set_ms(s, NNG_OPT_SENDTIMEO, 10000);
	nng_socket_set_size(s, NNG_OPT_RECVMAXSZ, 64u << 20);
	return s;
}

/* Sends raw bytes, expects a PROTO_ERROR whose text contains want and
 * whose code is code (0: any negative). */
static void expect_error(nng_socket s, const char *what, const void *b,
			 size_t n, int code, const char *want)
{
	nng_msg *m;
	REQUIRE(nng_msg_alloc(&m, n) == 0, "alloc");
	if (n)
		memcpy(nng_msg_body(m), b, n);
	int rv = nng_sendmsg(s, m, 0);
	if (rv) {
		nng_msg_free(m);
		CHECK(0, "%s: send: %s", what, nng_strerror(rv));
		return;
	}
	nng_msg *r;
	rv = nng_recvmsg(s, &r, 0);
	CHECK(rv == 0, "%s: no reply: %s", what, nng_strerror(rv));
	if (rv)
		return;
	proto_msg pm;
	int dc = proto_decode(nng_msg_body(r), nng_msg_len(r), &pm);
	CHECK(dc == 0, "%s: the reply does not decode (%d)", what, dc);
	CHECK(pm.h.type == PROTO_ERROR, "%s: reply %s, want ERROR", what,
	      proto_type_name(pm.h.type));
	if (dc == 0 && pm.h.type == PROTO_ERROR) {
		const char *t = pm.u.error.msg ? pm.u.error.msg : "";
		CHECK(code ? pm.u.error.code == code : pm.u.error.code < 0,
		      "%s: code %d, want %d (%s)", what, pm.u.error.code, code,
		      t);
		CHECK(strstr(t, want) != NULL, "%s: message '%s' lacks '%s'",
		      what, t, want);
		printf("  %-28s -> %s\n", what, t);
	}
	proto_msg_fini(&pm);
	nng_msg_free(r);
}

static size_t encode(const proto_msg *m, uint8_t **out)
{
	moor_buf b = {0};
	REQUIRE(proto_encode(&b, m) == 0, "encode %s",
		proto_type_name(m->h.type));
	*out = (uint8_t *)b.p;
	return b.len;
}

static void put32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static void battery(nng_socket s, const char *sock, int served_type)
{
	char what[96];
	uint8_t junk[10] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
	snprintf(what, sizeof what, "%s truncated", sock);
	expect_error(s, what, junk, sizeof junk, MOOR_EFORMAT, "truncated");
	snprintf(what, sizeof what, "%s empty", sock);
	expect_error(s, what, junk, 0, MOOR_EFORMAT, "truncated");

	/* a valid STATS (or HELLO-less PLAN) as the starting point */
	proto_msg m = {0};
	m.h.type = PROTO_CLEAR;
	m.h.req = 7;
	m.u.clear.tier = "resident";
	uint8_t *b;
	size_t n = encode(&m, &b);

	/* payload shorter than the header says */
	snprintf(what, sizeof what, "%s short payload", sock);
	expect_error(s, what, b, n - 3, MOOR_EFORMAT, "truncated");

	/* wrong version */
	uint8_t *v = malloc(n);
	memcpy(v, b, n);
	v[4] = PROTO_VERSION + 1;
	snprintf(what, sizeof what, "%s wrong version", sock);
	expect_error(s, what, v, n, MOOR_EVERSION, "version");
	/* bad magic */
	memcpy(v, b, n);
	v[0] ^= 0xff;
	snprintf(what, sizeof what, "%s bad magic", sock);
	expect_error(s, what, v, n, MOOR_EFORMAT, "magic");
	/* unknown type */
	memcpy(v, b, n);
	v[6] = 63;
	snprintf(what, sizeof what, "%s unknown type", sock);
	expect_error(s, what, v, n, MOOR_EFORMAT, "type");
	/* malformed payload: the string's length runs past the payload */
	memcpy(v, b, n);
	v[PROTO_HDR_SIZE] = 0xff;
	snprintf(what, sizeof what, "%s malformed payload", sock);
	expect_error(s, what, v, n, MOOR_EFORMAT, "malformed");
	free(v);
	free(b);

	/* oversized: a payload past PROTO_MAX_PAYLOAD */
	size_t big = PROTO_HDR_SIZE + PROTO_MAX_PAYLOAD + 64;
	uint8_t *o = calloc(1, big);
	put32(o, PROTO_MAGIC);
	o[4] = PROTO_VERSION;
	o[6] = PROTO_STATS;
	put32(o + 8, (uint32_t)(big - PROTO_HDR_SIZE));
	snprintf(what, sizeof what, "%s oversized", sock);
	expect_error(s, what, o, big, MOOR_EFORMAT, "oversized");
	free(o);

	/* a well-formed message of a type this socket does not serve */
	proto_msg g = {0};
	int32_t ids[3] = {1, 2, 3};
	g.h.type = served_type == PROTO_STATS ? PROTO_PLAN : PROTO_STATS;
	g.h.req = 9;
	g.u.plan.session = "";
	g.u.plan.n_ids = 3;
	g.u.plan.ids = ids;
	n = encode(&g, &b);
	snprintf(what, sizeof what, "%s wrong type", sock);
	expect_error(s, what, b, n, MOOR_EUNSUP, "not served");
	free(b);
	proto_msg gen = {0};
	gen.h.type = PROTO_GENERATE;
	gen.u.gen.session = "";
	gen.u.gen.n_ids = 3;
	gen.u.gen.ids = ids;
	n = encode(&gen, &b);
	snprintf(what, sizeof what, "%s GENERATE", sock);
	expect_error(s, what, b, n, MOOR_EUNSUP, "not served");
	free(b);
}

static json_t *stats_json(nng_socket adm)
{
	proto_msg q = {0}, rep = {0};
	q.h.type = PROTO_STATS;
	q.h.req = 40;
	int rc = proto_call(adm, &q, &rep, 10000);
	REQUIRE(rc == 0 && rep.h.type == PROTO_STATS_OK && rep.u.text.text,
		"STATS: %d", rc);
	json_t *j = json_loads(rep.u.text.text, 0, NULL);
	REQUIRE(j, "STATS is not JSON");
	proto_msg_fini(&rep);
	return j;
}

/* The "engine" object's fields as text ("null", "true", a number). */
static void engine_is(nng_socket adm, const char *attached, const char *pid,
		      const char *window, const char *grid, const char *what)
{
	json_t *j = stats_json(adm);
	json_t *e = json_object_get(j, "engine");
	CHECK(json_is_object(e), "%s: no engine object", what);
	const char *names[4] = {"attached", "pid", "window", "grid"};
	const char *want[4] = {attached, pid, window, grid};
	for (int i = 0; i < 4; i++) {
		json_t *v = json_object_get(e, names[i]);
		char *t = v ? json_dumps(v, JSON_ENCODE_ANY) : NULL;
		CHECK(t && !strcmp(t, want[i]), "%s: engine.%s is %s, want %s",
		      what, names[i], t ? t : "(absent)", want[i]);
		free(t);
	}
	CHECK(json_object_get(json_object_get(j, "daemon"), "engine"),
	      "%s: daemon.engine is still there", what);
	json_decref(j);
}

static void peek_battery(nng_socket eng, nng_socket adm)
{
	uint8_t *b;
	size_t n;
	int32_t ids[3] = {1, 2, 3};
	proto_msg pk = {0};
	pk.h.type = PROTO_PEEK;
	pk.h.req = 21;
	pk.u.peek.session = "s";
	pk.u.peek.n_ids = 3;
	pk.u.peek.ids = ids;

	engine_is(adm, "false", "null", "null", "null", "before HELLO");
	n = encode(&pk, &b);
	expect_error(adm, "PEEK before HELLO", b, n, MOOR_ERANGE,
		     "no engine attached");
	expect_error(eng, "PEEK on cached.sock", b, n, MOOR_EUNSUP,
		     "not served");
	/* payload: u16 1, 's', u32 count at 3, ids at 7 */
	uint8_t *v = malloc(n + 8);
	memcpy(v, b, n);
	put32(v + PROTO_HDR_SIZE + 3, 5); /* 5 ids, 3 sent */
	expect_error(adm, "PEEK ids cut short", v, n, MOOR_EFORMAT,
		     "malformed PEEK");
	put32(v + PROTO_HDR_SIZE + 3, 0xffffffffu);
	expect_error(adm, "PEEK hostile count", v, n, MOOR_EFORMAT,
		     "malformed PEEK");
	memcpy(v, b, n);
	memset(v + n, 0, 4);
	put32(v + 8, (uint32_t)(n + 4 - PROTO_HDR_SIZE));
	expect_error(adm, "PEEK bytes left over", v, n + 4, MOOR_EFORMAT,
		     "malformed PEEK");
	free(v);
	free(b);

	/* a HELLO of a small layout: one section, one view [T, 4] fp32 */
	proto_msg h = {0};
	proto_section sec = {.name = "s", .bytes = 64};
	proto_view view = {.name = "v",
			   .ndim = 2,
			   .dims = {0, 4},
			   .token_axis = 0,
			   .row_bytes = 16};
	h.h.type = PROTO_HELLO;
	h.h.req = 22;
	h.u.hello.pid = 4242;
	h.u.hello.grid = 64;
	h.u.hello.window = 128;
	h.u.hello.n_sections = 1;
	h.u.hello.sec = &sec;
	h.u.hello.n_views = 1;
	h.u.hello.view = &view;
	proto_msg rep = {0};
	int rc = proto_call(eng, &h, &rep, 10000);
	REQUIRE(rc == 0 && rep.h.type == PROTO_HELLO_OK, "HELLO: %d %s", rc,
		rep.h.type == PROTO_ERROR ? rep.u.error.msg : "");
	proto_msg_fini(&rep);
	engine_is(adm, "true", "4242", "128", "64", "after HELLO");

	pk.u.peek.n_ids = 0;
	pk.u.peek.ids = NULL;
	n = encode(&pk, &b);
	expect_error(adm, "PEEK of no ids", b, n, MOOR_ERANGE, "window");
	free(b);
	int32_t *many = calloc(129, sizeof *many);
	REQUIRE(many, "oom");
	pk.u.peek.n_ids = 129;
	pk.u.peek.ids = many;
	n = encode(&pk, &b);
	expect_error(adm, "PEEK past the window", b, n, MOOR_ERANGE,
		     "the window holds 128");
	free(b);
	free(many);

	/* a valid PEEK, twice; the core's stats do not move */
	json_t *s0 = stats_json(adm);
	pk.u.peek.n_ids = 3;
	pk.u.peek.ids = ids;
	for (int i = 0; i < 2; i++) {
		pk.h.req = 30 + (uint64_t)i;
		rc = proto_call(adm, &pk, &rep, 10000);
		CHECK(rc == 0 && rep.h.type == PROTO_PEEK_OK &&
			  rep.h.req == pk.h.req,
		      "PEEK: %d, %s", rc, proto_type_name(rep.h.type));
		const proto_peek_ok *o = &rep.u.peek_ok;
		CHECK(o->tier == PROTO_TIER_NONE && o->cached == 0 &&
			  o->tokens == 3 && o->taint == UINT64_MAX &&
			  o->restore_bytes == 0,
		      "PEEK of a cold prompt: tier %u cached %llu tokens %llu "
		      "taint %llu restore %llu",
		      o->tier, (unsigned long long)o->cached,
		      (unsigned long long)o->tokens,
		      (unsigned long long)o->taint,
		      (unsigned long long)o->restore_bytes);
		proto_msg_fini(&rep);
	}
	json_t *s1 = stats_json(adm);
	json_object_del(s0, "daemon");
	json_object_del(s1, "daemon");
	char *t0 = json_dumps(s0, JSON_COMPACT | JSON_SORT_KEYS),
	     *t1 = json_dumps(s1, JSON_COMPACT | JSON_SORT_KEYS);
	CHECK(t0 && t1 && !strcmp(t0, t1), "PEEK changed the stats:\n%s\n%s",
	      t0, t1);
	free(t0);
	free(t1);
	json_decref(s0);
	json_decref(s1);
}

int main(int argc, char **argv)
{
	REQUIRE(argc == 2, "usage: %s CACHED", argv[0]);
	const char *run = h_init("badmsg", 120);
	pid_t cd = h_cached(argv[1], run, "cached");
	nng_socket eng = dial(run, "cached.sock"),
		   adm = dial(run, "admin.sock");

	battery(eng, "cached.sock", PROTO_PLAN);
	battery(adm, "admin.sock", PROTO_STATS);

	/* PLAN before HELLO */
	proto_msg m = {0};
	int32_t ids[3] = {1, 2, 3};
	m.h.type = PROTO_PLAN;
	m.h.req = 11;
	m.u.plan.session = "";
	m.u.plan.n_ids = 3;
	m.u.plan.ids = ids;
	uint8_t *b;
	size_t n = encode(&m, &b);
	expect_error(eng, "PLAN before HELLO", b, n, -ENOTCONN, "HELLO");
	free(b);
	/* a HELLO whose view's row is not a whole number of elements */
	proto_msg h = {0};
	proto_section sec = {.name = "s", .bytes = 64};
	proto_view view = {.name = "v",
			   .ndim = 2,
			   .dims = {1, 3},
			   .token_axis = 0,
			   .row_bytes = 7};
	h.h.type = PROTO_HELLO;
	h.h.req = 12;
	h.u.hello.grid = 64;
	h.u.hello.window = 128;
	h.u.hello.n_sections = 1;
	h.u.hello.sec = &sec;
	h.u.hello.n_views = 1;
	h.u.hello.view = &view;
	n = encode(&h, &b);
	expect_error(eng, "HELLO of a bad layout", b, n, MOOR_ERANGE, "layout");
	free(b);
	/* a HELLO whose dims multiply to 2^64 (0 in 64 bits): an error, not a
	 * division by zero (SIGFPE) */
	proto_view wide = {.name = "w",
			   .ndim = 4,
			   .dims = {0, 1 << 24, 1 << 24, 1 << 16},
			   .token_axis = 0,
			   .row_bytes = 8};
	h.h.req = 15;
	h.u.hello.view = &wide;
	n = encode(&h, &b);
	expect_error(eng, "HELLO of dims past 2^64", b, n, MOOR_ERANGE,
		     "multiply");
	free(b);
	h.u.hello.view = &view;
	/* CLEAR of an unknown tier */
	proto_msg c = {0};
	c.h.type = PROTO_CLEAR;
	c.h.req = 13;
	c.u.clear.tier = "bogus";
	n = encode(&c, &b);
	expect_error(adm, "CLEAR bogus", b, n, MOOR_ERANGE, "unknown tier");
	free(b);
	/* a tier name with a newline: the log quotes it on one line */
	c.h.req = 16;
	c.u.clear.tier = "x\ncached: info: cleared all";
	n = encode(&c, &b);
	expect_error(adm, "CLEAR with a newline", b, n, MOOR_ERANGE,
		     "unknown tier");
	free(b);
	CHECK(!h_log_has("cached", "\ncached: info: cleared all") &&
		  h_log_has("cached", "x\\x0acached: info: cleared all"),
	      "the tier's newline reached the log raw (a forged line)");

	peek_battery(eng, adm);

	/* still serving: a valid STATS through proto_call */
	proto_msg q = {0}, rep = {0};
	q.h.type = PROTO_STATS;
	q.h.req = 14;
	int rc = proto_call(adm, &q, &rep, 10000);
	CHECK(rc == 0 && rep.h.type == PROTO_STATS_OK,
	      "STATS after the bad messages: %d, %s", rc,
	      proto_type_name(rep.h.type));
	if (rc == 0 && rep.u.text.text) {
		json_error_t je;
		json_t *j = json_loads(rep.u.text.text, 0, &je);
		CHECK(j && json_is_object(j), "STATS is not a JSON object: %s",
		      rep.u.text.text);
		json_t *errs =
		    json_object_get(json_object_get(j, "daemon"), "errors");
		CHECK(json_integer_value(errs) >= 20,
		      "the daemon counted %lld errors",
		      (long long)json_integer_value(errs));
		json_decref(j);
	}
	proto_msg_fini(&rep);
	CHECK(h_alive(cd), "cached died");
	nng_close(eng);
	/* the engine's connection is gone: attached turns false (NNG's pipe
	 * event comes on its own thread; poll, bounded) */
	int gone = 0;
	for (int i = 0; i < 100 && !gone; i++) {
		json_t *j = stats_json(adm);
		gone = json_is_false(
		    json_object_get(json_object_get(j, "engine"), "attached"));
		json_decref(j);
		if (!gone)
			usleep(20000);
	}
	CHECK(gone, "engine.attached still true after its connection closed");
	engine_is(adm, "false", "4242", "128", "64", "after it left");
	nng_close(adm);

	kill(cd, SIGTERM);
	int st = h_wait_exit(cd, 20);
	CHECK(st >= 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0,
	      "cached on SIGTERM: status %d", st);
	return h_done("test_cached_bad_messages");
}
