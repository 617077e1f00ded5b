/* test_proto_malformed: malformed input fails cleanly, with the right code
 * and without allocating from an untrusted count.
 *
 * For every type: every truncation, an extra byte, a wrong magic, another
 * version (header still filled in), an unknown type, a length field that
 * disagrees with the buffer, and every u16/u32 of the payload patched to
 * all ones. Then counts over their limits, strings and names over theirs,
 * NULs in strings, ndim over 4, at encode (MOOR_ERANGE) and at decode
 * (MOOR_EFORMAT).
 *
 * Allocations are capped (RLIMIT_AS, or the ASan allocator's own cap under
 * ASan), so a decoder that allocated from a hostile count would get NULL
 * and answer -ENOMEM instead of MOOR_EFORMAT: the checks see it. */
#include "moor.h"
#include "proto.h"
#include "samples.h"
#include "t.h"

#include <sys/resource.h>

#if defined(__SANITIZE_ADDRESS__)
#define T_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define T_ASAN 1
#endif
#endif

#ifdef T_ASAN
const char *__asan_default_options(void);
const char *__asan_default_options(void)
{
	return "allocator_may_return_null=1:max_allocation_size_mb=256";
}
#endif

static void cap_memory(void)
{
#ifndef T_ASAN /* ASan reserves terabytes of shadow: no RLIMIT_AS there */
	struct rlimit rl;
	rlim_t cap = (rlim_t)1 << 30;
	if (getrlimit(RLIMIT_AS, &rl) == 0 && rl.rlim_cur > cap) {
		rl.rlim_cur = cap;
		CHECK(setrlimit(RLIMIT_AS, &rl) == 0, "setrlimit");
	}
#endif
}

/* ---- helpers ---- */

static uint8_t *encode(const proto_msg *m, size_t *len)
{
	moor_buf b = {0};
	int rv = proto_encode(&b, m);
	REQUIRE(rv == 0, "encode %s: %s", proto_type_name(m->h.type),
		moor_strerror(rv));
	*len = b.len;
	return (uint8_t *)b.p; /* the caller frees */
}

static uint8_t *sample_bytes(uint16_t type, int size, size_t *len)
{
	proto_msg m;
	sample_make(&m, type, size);
	uint8_t *p = encode(&m, len);
	proto_msg_fini(&m);
	return p;
}

static void put32(uint8_t *p, size_t off, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[off + i] = (uint8_t)(v >> (8 * i));
}

static void put16(uint8_t *p, size_t off, uint16_t v)
{
	p[off] = (uint8_t)v;
	p[off + 1] = (uint8_t)(v >> 8);
}

static uint32_t get32(const uint8_t *p, size_t off)
{
	return (uint32_t)p[off] | (uint32_t)p[off + 1] << 8 |
	       (uint32_t)p[off + 2] << 16 | (uint32_t)p[off + 3] << 24;
}

static void fix_length(uint8_t *p, size_t len)
{
	put32(p, 8, (uint32_t)(len - PROTO_HDR_SIZE));
}

/* A copy of buf with n bytes of ins (NULL: zeros) inserted at off, the
 * header's length fixed. */
static uint8_t *splice(const uint8_t *buf, size_t len, size_t off,
		       const void *ins, size_t n, size_t *out_len)
{
	uint8_t *p = xmalloc(len + n);
	memcpy(p, buf, off);
	if (ins)
		memcpy(p + off, ins, n);
	memcpy(p + off + n, buf + off, len - off);
	*out_len = len + n;
	fix_length(p, *out_len);
	return p;
}

static int is_zero(const void *p, size_t n)
{
	const uint8_t *q = p;
	for (size_t i = 0; i < n; i++)
		if (q[i])
			return 0;
	return 1;
}

/* Decodes; a failure must leave nothing in the union. If the decode works,
 * re-encoding must give back the same bytes. */
static int decode_rv(const uint8_t *buf, size_t len)
{
	proto_msg d;
	int rv = proto_decode(buf, len, &d);
	if (rv) {
		CHECK(is_zero(&d.u, sizeof d.u), "failed decode left data");
	} else {
		moor_buf b = {0};
		CHECK(proto_encode(&b, &d) == 0 && b.len == len &&
			  !memcmp(b.p, buf, len),
		      "decoded %s does not re-encode to its bytes",
		      proto_type_name(d.h.type));
		moor_buf_fini(&b);
	}
	proto_msg_fini(&d);
	return rv;
}

/* Checks that expr (evaluated once) gives want; fmt names the case. */
#define EXPECT(expr, want, fmt, ...)                                           \
	do {                                                                   \
		int rv_ = (expr);                                              \
		CHECK(rv_ == (want), fmt ": got %d (%s)", ##__VA_ARGS__, rv_,  \
		      moor_strerror(rv_));                                     \
	} while (0)

/* ---- every type ---- */

static void test_type(uint16_t type, int size)
{
	const char *tn = proto_type_name(type);
	const char *sn = size_names[size];
	size_t len;
	uint8_t *ok = sample_bytes(type, size, &len);
	EXPECT(decode_rv(ok, len), 0, "%s/%s valid", tn, sn);
	uint8_t *p = xmalloc(len + 1);

	/* every truncation, as it is and with the length field agreeing (of
	 * the megabyte-sized S_MAX ones: the ends and a stride between) */
	size_t stride = size == S_MAX ? len / 101 + 1 : 1;
	for (size_t k = 0; k < len; k++) {
		if (k > 64 && k + 64 < len && k % stride)
			continue;
		EXPECT(decode_rv(ok, k), MOOR_EFORMAT, "%s/%s cut %zu", tn, sn,
		       k);
		if (k < PROTO_HDR_SIZE)
			continue;
		memcpy(p, ok, k);
		fix_length(p, k);
		EXPECT(decode_rv(p, k), MOOR_EFORMAT, "%s/%s cut %zu+len", tn,
		       sn, k);
	}

	/* one byte too many */
	memcpy(p, ok, len);
	p[len] = 0;
	EXPECT(decode_rv(p, len + 1), MOOR_EFORMAT, "%s/%s +1", tn, sn);
	fix_length(p, len + 1);
	EXPECT(decode_rv(p, len + 1), MOOR_EFORMAT, "%s/%s +1 len", tn, sn);

	/* magic */
	for (int i = 0; i < 4; i++) {
		memcpy(p, ok, len);
		p[i] ^= 0x20;
		EXPECT(decode_rv(p, len), MOOR_EFORMAT, "%s/%s magic", tn, sn);
	}

	/* versions: refused, but the header is there for the answer */
	static const uint16_t versions[] = {0, PROTO_VERSION - 1,
					    PROTO_VERSION + 1, 0xffff};
	for (int i = 0; i < 4; i++) {
		memcpy(p, ok, len);
		put16(p, 4, versions[i]);
		proto_msg d;
		int rv = proto_decode(p, len, &d);
		EXPECT(rv, MOOR_EVERSION, "%s/%s version %u", tn, sn,
		       versions[i]);
		proto_msg want;
		sample_make(&want, type, size);
		CHECK(
		    d.h.type == type && d.h.req == want.h.req &&
			d.h.version == versions[i] && d.h.magic == PROTO_MAGIC,
		    "%s/%s version %u: header not filled", tn, sn, versions[i]);
		CHECK(is_zero(&d.u, sizeof d.u), "version: union");
		proto_msg_fini(&want);
		proto_msg_fini(&d);
	}

	/* unknown types */
	static const uint16_t unknown[] = {0,  3,  9,  16, 36,
					   49, 53, 63, 64, 0xffff};
	for (int i = 0; i < 10; i++) {
		memcpy(p, ok, len);
		put16(p, 6, unknown[i]);
		EXPECT(decode_rv(p, len), MOOR_EFORMAT, "%s/%s type %u", tn, sn,
		       unknown[i]);
	}

	/* the length field disagrees with the buffer */
	uint32_t plen = (uint32_t)(len - PROTO_HDR_SIZE);
	uint32_t lens[] = {plen + 1, plen - 1, 0, 0xffffffffu,
			   PROTO_MAX_PAYLOAD + 1};
	for (int i = 0; i < 5; i++) {
		if (lens[i] == plen)
			continue;
		memcpy(p, ok, len);
		put32(p, 8, lens[i]);
		EXPECT(decode_rv(p, len), MOOR_EFORMAT, "%s/%s length %u", tn,
		       sn, lens[i]);
	}

	/* every u32 and u16 of the payload all ones: counts, lengths and
	 * values; each decodes or fails with EFORMAT, never allocates big */
	if (size != S_MAX)
		for (size_t off = PROTO_HDR_SIZE; off + 2 <= len; off++) {
			memcpy(p, ok, len);
			put16(p, off, 0xffff);
			int rv = decode_rv(p, len);
			CHECK(rv == 0 || rv == MOOR_EFORMAT,
			      "%s/%s u16 ffff at %zu: %s", tn, sn, off,
			      moor_strerror(rv));
			if (off + 4 > len)
				continue;
			memcpy(p, ok, len);
			put32(p, off, 0xffffffffu);
			rv = decode_rv(p, len);
			CHECK(rv == 0 || rv == MOOR_EFORMAT,
			      "%s/%s u32 ffffffff at %zu: %s", tn, sn, off,
			      moor_strerror(rv));
		}
	free(p);
	free(ok);
}

/* ---- counts ---- */

/* Payload offsets of count fields in the S_EMPTY samples (empty strings,
 * empty arrays): also a check of the field order. */
static const struct {
	uint16_t type;
	size_t off;
	uint32_t limit;
} counts[] = {
    {PROTO_HELLO, 56, PROTO_MAX_SECTIONS},
    {PROTO_HELLO, 60, PROTO_MAX_VIEWS},
    {PROTO_HELLO_OK, 29, PROTO_MAX_SECTIONS},
    {PROTO_HELLO_OK, 33, PROTO_MAX_VIEWS},
    {PROTO_PLAN, 10, PROTO_MAX_IDS},
    {PROTO_PLAN_OK, 48, PROTO_MAX_SLOTS}, /* after the memory level */
    {PROTO_COMMIT, 4, PROTO_MAX_IDS},
    {PROTO_GENERATE, 34, PROTO_MAX_IDS},
    {PROTO_GENERATE, 38, PROTO_MAX_IDS},
    {PROTO_STEP, 0, UINT32_MAX},
    {PROTO_PEEK, 2, PROTO_MAX_IDS},
};

static void test_counts_hostile(void)
{
	for (size_t i = 0; i < sizeof counts / sizeof counts[0]; i++) {
		const char *tn = proto_type_name(counts[i].type);
		size_t len, off = PROTO_HDR_SIZE + counts[i].off;
		uint8_t *p = sample_bytes(counts[i].type, S_EMPTY, &len);
		REQUIRE(off + 4 <= len && get32(p, off) == 0,
			"%s: no count at %zu", tn, counts[i].off);
		uint32_t vals[] = {0xffffffffu, 0x80000000u, counts[i].limit,
				   counts[i].limit + 1u, 1};
		for (int v = 0; v < 5; v++) {
			if (vals[v] == 0)
				continue; /* the STEP limit + 1 wraps */
			put32(p, off, vals[v]);
			EXPECT(decode_rv(p, len), MOOR_EFORMAT,
			       "%s count %u at %zu", tn, vals[v],
			       counts[i].off);
		}
		free(p);
	}
}

/* A count one over its limit with all its elements present. */
static void test_counts_over_limit(void)
{
	size_t len, len2;
	uint8_t *p, *q;
	proto_msg m;

	/* PLAN_OK: 1024 slots, then a 1025th */
	p = sample_bytes(PROTO_PLAN_OK, S_MAX, &len);
	EXPECT(decode_rv(p, len), 0, "1024 slots");
	put32(p, PROTO_HDR_SIZE + 28, PROTO_MAX_SLOTS + 1);
	q = splice(p, len, len, NULL, 16, &len2);
	EXPECT(decode_rv(q, len2), MOOR_EFORMAT, "1025 slots");
	free(p);
	free(q);

	/* HELLO_OK: 512 section offsets, then a 513th before n_view */
	memset(&m, 0, sizeof m);
	m.h.type = PROTO_HELLO_OK;
	m.u.hello_ok.n_sec = PROTO_MAX_SECTIONS;
	m.u.hello_ok.sec_off = xmalloc(PROTO_MAX_SECTIONS * 8);
	p = encode(&m, &len);
	EXPECT(decode_rv(p, len), 0, "512 sec_off");
	put32(p, PROTO_HDR_SIZE + 29, PROTO_MAX_SECTIONS + 1);
	q = splice(p, len, len - 4, NULL, 8, &len2);
	EXPECT(decode_rv(q, len2), MOOR_EFORMAT, "513 sec_off");
	free(p);
	free(q);
	proto_msg_fini(&m);

	/* HELLO: 512 sections, a 513th (an empty name: 54 bytes) */
	memset(&m, 0, sizeof m);
	m.h.type = PROTO_HELLO;
	m.u.hello.n_sections = PROTO_MAX_SECTIONS;
	m.u.hello.sec = xmalloc(PROTO_MAX_SECTIONS * sizeof(proto_section));
	p = encode(&m, &len);
	EXPECT(decode_rv(p, len), 0, "512 sections");
	put32(p, PROTO_HDR_SIZE + 56, PROTO_MAX_SECTIONS + 1);
	q = splice(p, len, len - 4, NULL, 54, &len2);
	EXPECT(decode_rv(q, len2), MOOR_EFORMAT, "513 sections");
	free(p);
	free(q);
	proto_msg_fini(&m);

	/* HELLO: 512 views, a 513th (58 bytes) */
	memset(&m, 0, sizeof m);
	m.h.type = PROTO_HELLO;
	m.u.hello.n_views = PROTO_MAX_VIEWS;
	m.u.hello.view = xmalloc(PROTO_MAX_VIEWS * sizeof(proto_view));
	p = encode(&m, &len);
	EXPECT(decode_rv(p, len), 0, "512 views");
	put32(p, PROTO_HDR_SIZE + 60, PROTO_MAX_VIEWS + 1);
	q = splice(p, len, len, NULL, 58, &len2);
	EXPECT(decode_rv(q, len2), MOOR_EFORMAT, "513 views");
	free(p);
	free(q);
	proto_msg_fini(&m);
}

static void test_counts_at_encode(void)
{
	moor_buf b = {0};
	proto_msg m = {0};
	int32_t ids[1];
	uint64_t offs[1];
	proto_slot slots[1];
	proto_section sec[1];
	proto_view view[1];
	memset(sec, 0, sizeof sec);
	memset(view, 0, sizeof view);

#define OVER(type_, field, n_, ptr, ptrval, want)                              \
	do {                                                                   \
		memset(&m, 0, sizeof m);                                       \
		m.h.type = type_;                                              \
		m.u.field.n_ = 0;                                              \
		m.u.field.ptr = ptrval;                                        \
		CHECK(proto_encode(&b, &m) == 0, #field "." #n_ " = 0");       \
		m.u.field.n_ = 1;                                              \
		m.u.field.ptr = NULL;                                          \
		CHECK(proto_encode(&b, &m) == -EINVAL, #n_ " without array");  \
		m.u.field.n_ = want;                                           \
		m.u.field.ptr = ptrval;                                        \
		CHECK(proto_encode(&b, &m) == MOOR_ERANGE,                     \
		      #field "." #n_ " over its limit");                       \
		CHECK(b.len == 0, "no bytes after a failed encode");           \
	} while (0)
	/* only the count is read before the limit check fails */
	OVER(PROTO_HELLO, hello, n_sections, sec, sec, PROTO_MAX_SECTIONS + 1);
	OVER(PROTO_HELLO, hello, n_views, view, view, PROTO_MAX_VIEWS + 1);
	OVER(PROTO_HELLO_OK, hello_ok, n_sec, sec_off, offs,
	     PROTO_MAX_SECTIONS + 1);
	OVER(PROTO_HELLO_OK, hello_ok, n_view, view_off, offs,
	     PROTO_MAX_VIEWS + 1);
	OVER(PROTO_PLAN, plan, n_ids, ids, ids, PROTO_MAX_IDS + 1);
	OVER(PROTO_PLAN_OK, plan_ok, n_slots, slots, slots,
	     PROTO_MAX_SLOTS + 1);
	OVER(PROTO_COMMIT, commit, n_ids, ids, ids, PROTO_MAX_IDS + 1);
	OVER(PROTO_GENERATE, gen, n_ids, ids, ids, PROTO_MAX_IDS + 1);
	OVER(PROTO_GENERATE, gen, n_stop, stop_ids, ids, PROTO_MAX_IDS + 1);
	OVER(PROTO_PEEK, peek, n_ids, ids, ids, PROTO_MAX_IDS + 1);
#undef OVER

	/* STEP has no count limit but the payload's */
	memset(&m, 0, sizeof m);
	m.h.type = PROTO_STEP;
	/* 24 bytes an entry without a top list, after the u32 count */
	m.u.step.n = PROTO_MAX_PAYLOAD / 24 + 1;
	m.u.step.e = xmalloc(m.u.step.n * sizeof(proto_step_entry));
	CHECK(proto_encode(&b, &m) == MOOR_ERANGE, "STEP over 4 MiB");
	m.u.step.n--;
	CHECK(proto_encode(&b, &m) == 0, "STEP under 4 MiB");
	free(m.u.step.e);

	memset(&m, 0, sizeof m);
	static const uint16_t bad[] = {0, 3, 63, 64, 0xffff};
	for (int i = 0; i < 5; i++) {
		m.h.type = bad[i];
		CHECK(proto_encode(&b, &m) == MOOR_ERANGE, "encode type %u",
		      bad[i]);
	}
	moor_buf_fini(&b);
}

/* ---- strings, names, ndim ---- */

static void test_strings_at_encode(void)
{
	char *big = xmalloc(PROTO_MAX_STR + 2);
	memset(big, 'x', PROTO_MAX_STR + 1);
	char *fits = xmalloc(PROTO_MAX_STR + 1);
	memset(fits, 'y', PROTO_MAX_STR);
	moor_buf b = {0};
	proto_msg m;

#define LONG(type_, field)                                                     \
	do {                                                                   \
		memset(&m, 0, sizeof m);                                       \
		m.h.type = type_;                                              \
		m.u.field = fits;                                              \
		CHECK(proto_encode(&b, &m) == 0, #field " of PROTO_MAX_STR");  \
		m.u.field = big;                                               \
		CHECK(proto_encode(&b, &m) == MOOR_ERANGE,                     \
		      #field " over PROTO_MAX_STR");                           \
	} while (0)
	LONG(PROTO_ERROR, error.msg);
	LONG(PROTO_HELLO_OK, hello_ok.dev_arena);
	LONG(PROTO_HELLO_OK, hello_ok.host_arena);
	LONG(PROTO_PLAN, plan.session);
	LONG(PROTO_GENERATE, gen.session);
	LONG(PROTO_DONE, done.msg);
	LONG(PROTO_CLEAR, clear.tier);
	LONG(PROTO_PEEK, peek.session);
#undef LONG

	/* names: 47 bytes and a NUL fit; 48 bytes without a NUL do not */
	proto_section sec;
	proto_view view;
	memset(&m, 0, sizeof m);
	m.h.type = PROTO_HELLO;
	m.u.hello.n_sections = 1;
	m.u.hello.sec = &sec;
	memset(&sec, 0, sizeof sec);
	memset(sec.name, 'n', PROTO_NAME_MAX - 1);
	CHECK(proto_encode(&b, &m) == 0, "section name of 47");
	memset(sec.name, 'n', PROTO_NAME_MAX);
	CHECK(proto_encode(&b, &m) == MOOR_ERANGE, "section name of 48");
	memset(&sec, 0, sizeof sec);
	sec.ndim = 4;
	CHECK(proto_encode(&b, &m) == 0, "section ndim 4");
	sec.ndim = 5;
	CHECK(proto_encode(&b, &m) == MOOR_ERANGE, "section ndim 5");

	m.u.hello.n_sections = 0;
	m.u.hello.n_views = 1;
	m.u.hello.view = &view;
	memset(&view, 0, sizeof view);
	memset(view.name, 'v', PROTO_NAME_MAX);
	CHECK(proto_encode(&b, &m) == MOOR_ERANGE, "view name of 48");
	memset(&view, 0, sizeof view);
	view.ndim = 0xffffffffu;
	CHECK(proto_encode(&b, &m) == MOOR_ERANGE, "view ndim");
	moor_buf_fini(&b);
	free(big);
	free(fits);
}

/* Payload offsets of the u16 string lengths in the S_EMPTY samples. */
static const struct {
	uint16_t type;
	size_t off;
} strs[] = {
    {PROTO_ERROR, 4}, {PROTO_HELLO_OK, 0}, {PROTO_HELLO_OK, 10},
    {PROTO_PLAN, 0},  {PROTO_GENERATE, 0}, {PROTO_DONE, 72},
    {PROTO_CLEAR, 0}, {PROTO_PEEK, 0},
};

/* A copy of the S_EMPTY sample of type whose string at off has n bytes of
 * fill. */
static uint8_t *with_string(uint16_t type, size_t off, size_t n, char fill,
			    size_t *len)
{
	size_t l0;
	uint8_t *p = sample_bytes(type, S_EMPTY, &l0);
	off += PROTO_HDR_SIZE;
	REQUIRE(off + 2 <= l0 && p[off] == 0 && p[off + 1] == 0,
		"%s: no empty string at %zu", proto_type_name(type), off);
	put16(p, off, (uint16_t)n);
	char *fillb = xmalloc(n + 1);
	memset(fillb, fill, n);
	if (n > 2 && fill == 0)
		fillb[0] = 'a'; /* one NUL inside, not only NULs */
	uint8_t *q = splice(p, l0, off + 2, fillb, n, len);
	free(fillb);
	free(p);
	return q;
}

static void test_strings_at_decode(void)
{
	for (size_t i = 0; i < sizeof strs / sizeof strs[0]; i++) {
		const char *tn = proto_type_name(strs[i].type);
		size_t len;
		uint8_t *p;
		p = with_string(strs[i].type, strs[i].off, PROTO_MAX_STR, 's',
				&len);
		EXPECT(decode_rv(p, len), 0, "%s string of %d", tn,
		       PROTO_MAX_STR);
		free(p);
		p = with_string(strs[i].type, strs[i].off, PROTO_MAX_STR + 1,
				's', &len);
		EXPECT(decode_rv(p, len), MOOR_EFORMAT, "%s string of %d", tn,
		       PROTO_MAX_STR + 1);
		free(p);
		p = with_string(strs[i].type, strs[i].off, 0xffff, 's', &len);
		EXPECT(decode_rv(p, len), MOOR_EFORMAT, "%s string of 65535",
		       tn);
		free(p);
		p = with_string(strs[i].type, strs[i].off, 5, 0, &len);
		EXPECT(decode_rv(p, len), MOOR_EFORMAT, "%s NUL in string", tn);
		free(p);
	}

	/* names, in a HELLO with one section, then one with one view */
	proto_section sec;
	proto_view view;
	memset(&sec, 0, sizeof sec);
	memset(&view, 0, sizeof view);
	proto_msg m = {0};
	m.h.type = PROTO_HELLO;
	m.u.hello.n_sections = 1;
	m.u.hello.sec = &sec;
	size_t len, len2, name_off = PROTO_HDR_SIZE + 60, ndim_off;
	for (int v = 0; v < 2; v++) {
		if (v) {
			m.u.hello.n_sections = 0;
			m.u.hello.n_views = 1;
			m.u.hello.view = &view;
			name_off = PROTO_HDR_SIZE + 64;
		}
		ndim_off = name_off + 2 + 4 + 4;
		const char *what = v ? "view" : "section";
		uint8_t *p = encode(&m, &len), *q;
		EXPECT(decode_rv(p, len), 0, "%s", what);
		REQUIRE(get32(p, name_off) == 0, "%s: layout", what);
		char name[PROTO_NAME_MAX + 1];
		memset(name, 'q', sizeof name);
		put16(p, name_off, PROTO_NAME_MAX - 1);
		q = splice(p, len, name_off + 2, name, PROTO_NAME_MAX - 1,
			   &len2);
		EXPECT(decode_rv(q, len2), 0, "%s name of 47", what);
		free(q);
		put16(p, name_off, PROTO_NAME_MAX);
		q = splice(p, len, name_off + 2, name, PROTO_NAME_MAX, &len2);
		EXPECT(decode_rv(q, len2), MOOR_EFORMAT, "%s name of 48", what);
		free(q);
		name[1] = 0;
		put16(p, name_off, 3);
		q = splice(p, len, name_off + 2, name, 3, &len2);
		EXPECT(decode_rv(q, len2), MOOR_EFORMAT, "%s name with NUL",
		       what);
		free(q);
		put16(p, name_off, 0);
		put32(p, ndim_off, 4);
		EXPECT(decode_rv(p, len), 0, "%s ndim 4", what);
		put32(p, ndim_off, 5);
		EXPECT(decode_rv(p, len), MOOR_EFORMAT, "%s ndim 5", what);
		free(p);
	}
}

/* STATS_OK carries a long text: u32 length, at most PROTO_MAX_TEXT. */
static void test_long_text(void)
{
	moor_buf b = {0};
	proto_msg m, d;
	char *big = xmalloc(PROTO_MAX_TEXT + 2);
	memset(big, 'j', PROTO_MAX_TEXT + 1);
	big[PROTO_MAX_TEXT] = 0;
	memset(&m, 0, sizeof m);
	m.h.type = PROTO_STATS_OK;
	m.u.text.text = big;
	CHECK(proto_encode(&b, &m) == 0, "text of PROTO_MAX_TEXT");
	CHECK(proto_decode(b.p, b.len, &d) == 0 &&
		      strlen(d.u.text.text) == PROTO_MAX_TEXT,
	      "text of PROTO_MAX_TEXT decodes");
	proto_msg_fini(&d);
	/* one byte more: refused at decode, patched length */
	uint32_t n = PROTO_MAX_TEXT + 1;
	uint8_t *p = xmalloc(b.len + 1);
	memcpy(p, b.p, b.len);
	p[b.len] = 'j';
	memcpy(p + PROTO_HDR_SIZE, &n, 4); /* little-endian host */
	fix_length(p, b.len + 1);
	EXPECT(decode_rv(p, b.len + 1), MOOR_EFORMAT, "text over the limit");
	free(p);
	big[PROTO_MAX_TEXT] = 'j';
	big[PROTO_MAX_TEXT + 1] = 0;
	CHECK(proto_encode(&b, &m) == MOOR_ERANGE, "text over PROTO_MAX_TEXT");
	free(big);
	moor_buf_fini(&b);
}

/* ---- headers ---- */

static void test_headers(void)
{
	/* a payload over the limit, consistent with its buffer */
	size_t len = PROTO_HDR_SIZE + PROTO_MAX_PAYLOAD + 4;
	uint8_t *p = xmalloc(len);
	raw r;
	raw_hdr(&r, PROTO_STATS_OK, 1);
	memcpy(p, r.p, PROTO_HDR_SIZE);
	fix_length(p, len);
	uint32_t tl = PROTO_MAX_PAYLOAD;
	memcpy(p + PROTO_HDR_SIZE, &tl, 4);
	EXPECT(decode_rv(p, len), MOOR_EFORMAT, "payload over 4 MiB");
	proto_hdr h;
	EXPECT(proto_peek_hdr(p, len, &h), MOOR_EFORMAT, "peek over 4 MiB");
	free(p);

	/* a CREDIT of nothing is malformed (proto.h: n >= 1) */
	raw_hdr(&r, PROTO_CREDIT, 5);
	raw_le(&r, 0, 4);
	raw_end(&r);
	EXPECT(decode_rv(r.p, r.n), MOOR_EFORMAT, "CREDIT of 0");
	proto_msg c0 = {0};
	c0.h.type = PROTO_CREDIT;
	moor_buf cb = {0};
	EXPECT(proto_encode(&cb, &c0), MOOR_ERANGE, "encode a CREDIT of 0");
	moor_buf_fini(&cb);

	/* a STEP entry's top list: at most PROTO_MAX_TOP, and all there */
	for (uint32_t k = PROTO_MAX_TOP; k <= PROTO_MAX_TOP + 1; k++)
		for (int cut = 0; cut <= 1; cut++) {
			raw_hdr(&r, PROTO_STEP, 3);
			raw_le(&r, 1, 4);
			raw_le(&r, 7, 8);
			raw_le(&r, 1, 4);
			raw_le(&r, 0, 4);
			raw_le(&r, 0, 4);
			raw_le(&r, k, 4);
			for (uint32_t t = 0; t < k - (uint32_t)cut; t++) {
				raw_le(&r, t, 4);
				raw_le(&r, 0, 4);
			}
			raw_end(&r);
			EXPECT(decode_rv(r.p, r.n),
			       k <= PROTO_MAX_TOP && !cut ? 0 : MOOR_EFORMAT,
			       "STEP top list of %u%s", k,
			       cut ? ", one pair short" : "");
		}

	raw_hdr(&r, PROTO_CANCEL, 42);
	raw_le(&r, 7, 8);
	raw_end(&r);
	EXPECT(proto_peek_hdr(r.p, r.n, &h), 0, "peek");
	CHECK(h.type == PROTO_CANCEL && h.req == 42 && h.length == 8, "hdr");
	EXPECT(proto_peek_hdr(r.p, r.n - 1, &h), MOOR_EFORMAT, "peek short");
	EXPECT(proto_peek_hdr(r.p, 23, &h), MOOR_EFORMAT, "peek 23 bytes");
	EXPECT(proto_peek_hdr(NULL, 0, &h), MOOR_EFORMAT, "peek nothing");
	proto_msg d;
	EXPECT(proto_decode(NULL, 0, &d), MOOR_EFORMAT, "decode nothing");
	CHECK(is_zero(&d, sizeof d), "nothing decoded: all zero");
	proto_msg_fini(&d);
	/* reserved flags pass through */
	put32(r.p, 12, 0x5a5a5a5au);
	EXPECT(proto_decode(r.p, r.n, &d), 0, "flags");
	CHECK(d.h.flags == 0x5a5a5a5au && d.u.cancel.target == 7, "fields");
	proto_msg_fini(&d);
}

int main(void)
{
	cap_memory();
	for (size_t t = 0; t < N_SAMPLE_TYPES; t++)
		for (int size = S_EMPTY; size < S_NSIZES; size++)
			test_type(sample_types[t], size);
	test_counts_hostile();
	test_counts_over_limit();
	test_counts_at_encode();
	test_strings_at_encode();
	test_strings_at_decode();
	test_long_text();
	test_headers();
	return t_done("test_proto_malformed");
}
