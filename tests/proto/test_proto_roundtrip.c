/* test_proto_roundtrip: every message type, with arrays of 0, 1, many and
 * the most elements and strings up to PROTO_MAX_STR, encodes and decodes
 * back to equal fields; re-encoding gives the same bytes; the wire layout
 * matches hand-built bytes; the payload limit is exact. */
#include "moor.h"
#include "proto.h"
#include "samples.h"
#include "t.h"

static void test_every_type_every_size(void)
{
	moor_buf b = {0}, b2 = {0};
	for (size_t t = 0; t < N_SAMPLE_TYPES; t++)
		for (int size = 0; size < S_NSIZES; size++) {
			uint16_t type = sample_types[t];
			const char *what = proto_type_name(type);
			proto_msg m, d;
			sample_make(&m, type, size);
			int rv = proto_encode(&b, &m);
			REQUIRE(rv == 0, "%s/%s: encode: %s", what,
				size_names[size], moor_strerror(rv));
			rv = proto_decode(b.p, b.len, &d);
			CHECK(rv == 0, "%s/%s: decode: %s", what,
			      size_names[size], moor_strerror(rv));
			const char *diff = msg_diff(&m, &d);
			CHECK(!diff, "%s/%s: %s differs", what,
			      size_names[size], diff);
			CHECK(d.h.magic == PROTO_MAGIC &&
				  d.h.version == PROTO_VERSION &&
				  d.h.length == b.len - PROTO_HDR_SIZE,
			      "%s/%s: header", what, size_names[size]);
			/* the encoding is canonical */
			rv = proto_encode(&b2, &d);
			CHECK(rv == 0 && b2.len == b.len &&
				  !memcmp(b.p, b2.p, b.len),
			      "%s/%s: re-encoding differs", what,
			      size_names[size]);
			proto_msg_fini(&m);
			proto_msg_fini(&d);
			proto_msg_fini(&d); /* twice is harmless */
		}
	moor_buf_fini(&b);
	moor_buf_fini(&b2);
	moor_buf_fini(&b2);
}

/* Empty strings decode as allocated "" whether sent as NULL or "". */
static void test_empty_strings(void)
{
	moor_buf b = {0};
	proto_msg m = {0}, d;
	m.h.type = PROTO_PLAN;
	m.u.plan.session = "";
	REQUIRE(proto_encode(&b, &m) == 0, "encode");
	REQUIRE(proto_decode(b.p, b.len, &d) == 0, "decode");
	CHECK(d.u.plan.session && d.u.plan.session[0] == 0, "session \"\"");
	CHECK(d.u.plan.n_ids == 0 && d.u.plan.ids == NULL, "no ids");
	proto_msg_fini(&d);
	m.h.type = PROTO_ERROR;
	m.u.error.msg = NULL;
	REQUIRE(proto_encode(&b, &m) == 0, "encode");
	REQUIRE(proto_decode(b.p, b.len, &d) == 0, "decode");
	CHECK(d.u.error.msg && d.u.error.msg[0] == 0, "msg \"\"");
	proto_msg_fini(&d);
	moor_buf_fini(&b);
}

/* Field order and byte order, against bytes built by hand. */
static void test_wire_layout(void)
{
	moor_buf b = {0};
	int32_t ids[] = {1, -2, 0x01020304};
	proto_msg m = {0};
	m.h.type = PROTO_PLAN;
	m.h.req = 0x1122334455667788ull;
	m.u.plan = (proto_plan){.session = "ab",
				.max_tokens = 0x10,
				.flags = PROTO_PLAN_NO_CACHE,
				.n_ids = 3,
				.ids = ids,
				.salt = 0x0102030405060708ull,
				.user_at = 0x1112131415161718ull};
	REQUIRE(proto_encode(&b, &m) == 0, "encode plan");
	static const uint8_t want[] = {
	    0x4d, 0x4f, 0x4f, 0x52, /* "MOOR" */
	    6,	  0,	12,   0,    /* version 6, PLAN */
	    44,	  0,	0,    0,    /* length */
	    0,	  0,	0,    0,    /* flags */
	    0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11, /* req */
	    2,	  0,	'a',  'b',			    /* session */
	    0x10, 0,	0,    0,			    /* max_tokens */
	    1,	  0,	0,    0,			    /* flags */
	    3,	  0,	0,    0,			    /* n_ids */
	    1,	  0,	0,    0,    0xfe, 0xff, 0xff, 0xff, 4, 3, 2, 1,
	    8,	  7,	6,    5,    4,	  3,	2,    1, /* salt */
	    0x18, 0x17, 0x16, 0x15, 0x14, 0x13, 0x12, 0x11, /* user_at */
	};
	CHECK(b.len == sizeof want && !memcmp(b.p, want, sizeof want),
	      "PLAN bytes");

	proto_step_entry e = {.req = 7, .token = -1, .finish = 2};
	memset(&m, 0, sizeof m);
	m.h.type = PROTO_STEP;
	m.u.step = (proto_step){.n = 1, .e = &e};
	REQUIRE(proto_encode(&b, &m) == 0, "encode step");
	raw r;
	raw_hdr(&r, PROTO_STEP, 0);
	raw_le(&r, 1, 4);
	raw_le(&r, 7, 8);
	raw_le(&r, 0xffffffffu, 4);
	raw_le(&r, 2, 4);
	raw_le(&r, 0, 4); /* logprob */
	raw_le(&r, 0, 4); /* n_top */
	raw_end(&r);
	CHECK(b.len == r.n && !memcmp(b.p, r.p, r.n), "STEP bytes");

	/* with logprobs: logprob, n_top, then (id, logprob) pairs */
	e = (proto_step_entry){.req = 7, .token = 5, .logprob = -0.5f,
			       .n_top = 2, .top_id = {5, 9},
			       .top_lp = {-0.5f, -2.0f}};
	REQUIRE(proto_encode(&b, &m) == 0, "encode step with logprobs");
	raw_hdr(&r, PROTO_STEP, 0);
	raw_le(&r, 1, 4);
	raw_le(&r, 7, 8);
	raw_le(&r, 5, 4);
	raw_le(&r, 0, 4);
	raw_le(&r, 0xbf000000u, 4); /* -0.5f */
	raw_le(&r, 2, 4);
	raw_le(&r, 5, 4);
	raw_le(&r, 0xbf000000u, 4);
	raw_le(&r, 9, 4);
	raw_le(&r, 0xc0000000u, 4); /* -2.0f */
	raw_end(&r);
	CHECK(b.len == r.n && !memcmp(b.p, r.p, r.n),
	      "STEP bytes with logprobs");
	e.n_top = PROTO_MAX_TOP + 1;
	CHECK(proto_encode(&b, &m) == MOOR_ERANGE,
	      "STEP with more than PROTO_MAX_TOP alternatives");

	memset(&m, 0, sizeof m);
	m.h.type = PROTO_GENERATE;
	m.u.gen.temperature = 1.0f; /* 0x3f800000 */
	m.u.gen.top_k = -1;
	m.u.gen.user_at = 0x0102030405060708ull;
	REQUIRE(proto_encode(&b, &m) == 0, "encode generate");
	raw_hdr(&r, PROTO_GENERATE, 0);
	raw_le(&r, 0, 2);	   /* session */
	raw_le(&r, 0, 4);	   /* max_tokens */
	raw_le(&r, 0x3f800000, 4); /* temperature */
	raw_le(&r, 0, 4);
	raw_le(&r, 0, 4);
	raw_le(&r, 0xffffffffu, 4); /* top_k */
	raw_le(&r, 0, 8);	    /* seed */
	raw_le(&r, 0, 4);	    /* flags */
	raw_le(&r, 0, 4);	    /* n_ids */
	raw_le(&r, 0, 4);	    /* n_stop */
	raw_le(&r, 0, 4);	    /* budget */
	raw_le(&r, 0, 4);	    /* think_close */
	raw_le(&r, 0, 4);	    /* n_hidden */
	raw_le(&r, 0, 4);	    /* n_close */
	raw_le(&r, 0, 8);	    /* salt */
	raw_le(&r, 0x0102030405060708ull, 8); /* user_at */
	raw_le(&r, 0, 4);		      /* top_logprobs */
	raw_end(&r);
	CHECK(b.len == r.n && !memcmp(b.p, r.p, r.n), "GENERATE bytes");

	/* PEEK: session, ids; PEEK_OK: tier, cached, tokens, taint, bytes,
	 * read_us */
	int32_t pids[] = {7, -1};
	memset(&m, 0, sizeof m);
	m.h.type = PROTO_PEEK;
	m.h.req = 9;
	m.u.peek = (proto_peek){.session = "s", .n_ids = 2, .ids = pids};
	REQUIRE(proto_encode(&b, &m) == 0, "encode peek");
	raw_hdr(&r, PROTO_PEEK, 9);
	raw_le(&r, 1, 2);
	raw_le(&r, 's', 1);
	raw_le(&r, 2, 4);
	raw_le(&r, 7, 4);
	raw_le(&r, 0xffffffffu, 4);
	raw_le(&r, 0, 8); /* salt */
	raw_end(&r);
	CHECK(b.len == r.n && !memcmp(b.p, r.p, r.n), "PEEK bytes");
	CHECK(r.p[6] == 54 && r.p[7] == 0, "PEEK is type 54");

	memset(&m, 0, sizeof m);
	m.h.type = PROTO_PEEK_OK;
	m.u.peek_ok = (proto_peek_ok){.tier = PROTO_TIER_STORE,
				      .cached = 0x0102030405060708ull,
				      .tokens = 3000,
				      .taint = UINT64_MAX,
				      .restore_bytes = 1ull << 33,
				      .read_us = 0x1122334455ull};
	REQUIRE(proto_encode(&b, &m) == 0, "encode peek_ok");
	raw_hdr(&r, PROTO_PEEK_OK, 0);
	raw_le(&r, PROTO_TIER_STORE, 4);
	raw_le(&r, 0x0102030405060708ull, 8);
	raw_le(&r, 3000, 8);
	raw_le(&r, UINT64_MAX, 8);
	raw_le(&r, 1ull << 33, 8);
	raw_le(&r, 0x1122334455ull, 8);
	raw_end(&r);
	CHECK(b.len == r.n && r.n == PROTO_HDR_SIZE + 44 &&
		  !memcmp(b.p, r.p, r.n),
	      "PEEK_OK bytes");
	CHECK(r.p[6] == 55 && r.p[7] == 0, "PEEK_OK is type 55");

	/* Empty payloads: the header alone. */
	memset(&m, 0, sizeof m);
	m.h.type = PROTO_STATS;
	m.h.req = 5;
	REQUIRE(proto_encode(&b, &m) == 0, "encode stats");
	raw_hdr(&r, PROTO_STATS, 5);
	raw_end(&r);
	CHECK(b.len == PROTO_HDR_SIZE && !memcmp(b.p, r.p, r.n), "STATS");
	moor_buf_fini(&b);
}

/* A payload of exactly PROTO_MAX_PAYLOAD is fine; one id more is not. */
static void test_payload_limit(void)
{
	/* session 2 bytes: 2 + 2 + 4 + 4 + 4 + 4n + 8 (salt) + 8 (user_at)
	 * = 4 MiB */
	uint32_t n = (PROTO_MAX_PAYLOAD - 32) / 4;
	int32_t *ids = calloc(n + 1, 4);
	REQUIRE(ids, "alloc");
	for (uint32_t i = 0; i <= n; i++)
		ids[i] = (int32_t)(i * 2654435761u);
	proto_msg m = {0}, d;
	m.h.type = PROTO_PLAN;
	m.u.plan = (proto_plan){.session = "s2", .n_ids = n, .ids = ids};
	moor_buf b = {0};
	int rv = proto_encode(&b, &m);
	REQUIRE(rv == 0, "encode at the limit: %s", moor_strerror(rv));
	CHECK(b.len == PROTO_HDR_SIZE + PROTO_MAX_PAYLOAD, "len %zu", b.len);
	rv = proto_decode(b.p, b.len, &d);
	CHECK(rv == 0, "decode at the limit: %s", moor_strerror(rv));
	CHECK(!msg_diff(&m, &d), "equal");
	proto_msg_fini(&d);
	m.u.plan.n_ids = n + 1;
	rv = proto_encode(&b, &m);
	CHECK(rv == MOOR_ERANGE, "one id over: %s", moor_strerror(rv));
	CHECK(b.len == 0 && b.err == MOOR_ERANGE, "failed encode: empty buf");
	m.u.plan.n_ids = PROTO_MAX_IDS; /* under its count limit, over 4 MiB */
	int32_t *big = calloc(PROTO_MAX_IDS, 4);
	REQUIRE(big, "alloc");
	m.u.plan.ids = big;
	CHECK(proto_encode(&b, &m) == MOOR_ERANGE, "PROTO_MAX_IDS ids");
	/* the buffer is usable again after a failure */
	m.u.plan.n_ids = 3;
	CHECK(proto_encode(&b, &m) == 0 && b.err == 0, "reuse after failure");
	free(big);
	free(ids);
	moor_buf_fini(&b);
}

static void test_names_and_fini(void)
{
	CHECK(!strcmp(proto_type_name(PROTO_PLAN), "PLAN"), "PLAN");
	CHECK(!strcmp(proto_type_name(PROTO_STATS_OK), "STATS_OK"), "S_OK");
	CHECK(!strcmp(proto_type_name(PROTO_ERROR), "ERROR"), "ERROR");
	CHECK(!strcmp(proto_type_name(PROTO_PEEK), "PEEK"), "PEEK");
	CHECK(!strcmp(proto_type_name(PROTO_PEEK_OK), "PEEK_OK"), "PEEK_OK");
	CHECK(!strcmp(proto_type_name(53), "unknown"), "53");
	/* the one tier table (tiers.h): every tier named, the NVMe ones too */
	static const char *const tiers[][3] = {
	    {"none", "none", "none"},	    {"resident", "anchor", "resident"},
	    {"end", "end", "resident"},	    {"pin", "pin", "ram_park"},
	    {"park", "park", "ram_park"},   {"store", "store", "ram_snapshot"},
	    {"stash", "stash", "resident"}, {"spill", "spill", "nvme_spill"},
	    {"disk", "disk", "nvme_disk"}};
	for (uint32_t i = 0; i <= PROTO_TIER_DISK; i++) {
		const proto_tier_words *w = proto_tier(i);
		CHECK(!strcmp(proto_tier_name(i), tiers[i][0]) &&
			  !strcmp(w->source, tiers[i][1]) &&
			  !strcmp(w->tier, tiers[i][2]),
		      "tier %u: %s %s %s", i, w->name, w->source, w->tier);
	}
	CHECK(!strcmp(proto_tier_name(PROTO_TIER_DISK + 1), "unknown") &&
		  !strcmp(proto_tier_name(UINT32_MAX), "unknown") &&
		  !strcmp(proto_tier(UINT32_MAX)->source, "none") &&
		  !strcmp(proto_tier(PROTO_TIER_DISK + 1)->tier, "none"),
	      "tier out of range");
	CHECK(!strcmp(proto_type_name(0), "unknown"), "0");
	CHECK(!strcmp(proto_type_name(3), "unknown"), "3");
	CHECK(!strcmp(proto_type_name(PROTO_TYPE_MAX), "unknown"), "max");
	CHECK(!strcmp(proto_type_name(0xffff), "unknown"), "ffff");
	for (size_t t = 0; t < N_SAMPLE_TYPES; t++)
		CHECK(strcmp(proto_type_name(sample_types[t]), "unknown"),
		      "type %u has a name", sample_types[t]);
	proto_msg z;
	for (size_t t = 0; t < N_SAMPLE_TYPES; t++) {
		memset(&z, 0, sizeof z);
		z.h.type = sample_types[t];
		proto_msg_fini(&z); /* zeroed: nothing to free */
	}
	proto_msg_fini(NULL);
	moor_buf_fini(NULL);
}

int main(void)
{
	test_every_type_every_size();
	test_empty_strings();
	test_wire_layout();
	test_payload_limit();
	test_names_and_fini();
	return t_done("test_proto_roundtrip");
}
