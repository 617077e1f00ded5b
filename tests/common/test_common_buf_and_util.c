/* test_common_buf_and_util: common/'s growable buffer (buf.h) builds what
 * was put, NUL-terminated, across growth; its failures are sticky (every
 * allocation failed in turn, as SQLite's fault sweeps do, leaves an error,
 * no partial result and nothing leaked under ASan); and the helpers of
 * util.h: the run lock excludes a second holder and names a missing
 * directory, the u32 parser takes digits only, the hex printer. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

#include "moor.h"

/* The allocation seam: buf.c's realloc, failing the n-th call when asked. */
static int fail_at, n_calls;
static void *t_realloc(void *p, size_t n)
{
	if (fail_at && ++n_calls == fail_at)
		return NULL;
	return realloc(p, n);
}
#define realloc t_realloc
#include "../../common/buf.c"
#undef realloc
#include "../../common/moor.c"
#include "../../common/util.c"

#include "t.h"

/* What the sweep writes: puts, a long printf that outgrows the first
 * allocation several times, a room written by hand. */
static void write_some(moor_buf *b)
{
	moor_buf_puts(b, "data: ");
	for (int i = 0; i < 200; i++)
		moor_buf_printf(b, "%d,", i);
	char *q = moor_buf_room(b, 3);
	if (q)
		memcpy(q, "end", 3);
	moor_buf_put(b, "\n\n", 2);
}

static void expected(moor_buf *e)
{
	char t[16];
	moor_buf_puts(e, "data: ");
	for (int i = 0; i < 200; i++) {
		snprintf(t, sizeof t, "%d,", i);
		moor_buf_puts(e, t);
	}
	moor_buf_puts(e, "end\n\n");
}

static void test_buf_contents(void)
{
	moor_buf b = {0};
	moor_buf_put(&b, "", 0);
	CHECK(b.p && b.p[0] == 0 && b.len == 0, "a put of 0 bytes allocates");
	moor_buf_fini(&b);
	CHECK(!b.p && !b.len && !b.cap, "fini zeroes");
	moor_buf_fini(&b);
	moor_buf_fini(NULL);

	moor_buf e = {0};
	expected(&e);
	write_some(&b);
	CHECK(!b.err && b.len == e.len && !memcmp(b.p, e.p, e.len) &&
		  b.p[b.len] == 0 && strlen(b.p) == b.len,
	      "contents: %zu bytes, want %zu", b.len, e.len);
	CHECK(b.cap > 256, "grew past the first 256 bytes (cap %zu)", b.cap);

	/* a printf longer than what is left, at once */
	moor_buf c = {0};
	moor_buf_printf(&c, "%0900d|%s", 7, "x");
	CHECK(c.len == 902 && c.p[899] == '7' && c.p[900] == '|' &&
		  c.p[901] == 'x' && c.p[902] == 0,
	      "long printf: len %zu", c.len);
	moor_buf_fini(&c);

	size_t cap = b.cap;
	moor_buf_reset(&b);
	CHECK(b.len == 0 && b.cap == cap && b.p[0] == 0, "reset keeps memory");
	moor_buf_puts(&b, "abc");
	size_t n = 0;
	char *t = moor_buf_take(&b, &n);
	CHECK(t && n == 3 && !strcmp(t, "abc") && !b.p && !b.len,
	      "take hands over the bytes");
	free(t);
	CHECK(moor_buf_take(&b, &n) == NULL && n == 0,
	      "take of an empty buffer is NULL");

	/* an error a user sets (proto's MOOR_ERANGE) is sticky too */
	moor_buf_puts(&b, "keep");
	b.err = MOOR_ERANGE;
	moor_buf_puts(&b, "lost");
	moor_buf_printf(&b, "%s", "lost");
	CHECK(moor_buf_room(&b, 1) == NULL && b.len == 4 &&
		  !strcmp(b.p, "keep") && b.err == MOOR_ERANGE,
	      "puts after an error are no-ops");
	CHECK(moor_buf_take(&b, &n) == NULL && n == 0 && !b.p,
	      "take after an error frees and gives NULL");
	moor_buf_fini(&e);
}

static void test_buf_alloc_failures(void)
{
	moor_buf e = {0};
	expected(&e);
	int k;
	for (k = 1;; k++) {
		moor_buf b = {0};
		fail_at = k;
		n_calls = 0;
		write_some(&b);
		int fired = n_calls >= k;
		fail_at = 0;
		if (!fired) { /* every allocation done: the whole text */
			CHECK(!b.err && b.len == e.len &&
				  !memcmp(b.p, e.p, e.len),
			      "no failure: the contents");
			moor_buf_fini(&b);
			break;
		}
		CHECK(b.err == -ENOMEM, "failure %d: err %d", k, b.err);
		CHECK(!b.p || (b.len < e.len && !memcmp(b.p, e.p, b.len) &&
			       b.p[b.len] == 0),
		      "failure %d: what was written before is intact", k);
		size_t n;
		CHECK(moor_buf_take(&b, &n) == NULL, "failure %d: take", k);
	}
	CHECK(k > 3, "the sweep saw %d allocations", k - 1);
	moor_buf_fini(&e);
}

static void test_run_lock(void)
{
	char dir[] = "/tmp/moor-test-lock-XXXXXX";
	REQUIRE(mkdtemp(dir), "mkdtemp");
	int a = moor_run_lock(dir, "cached");
	CHECK(a >= 0, "first lock: %s", moor_strerror(a));
	int b = moor_run_lock(dir, "cached");
	CHECK(b == -EADDRINUSE, "second holder: %d", b);
	int c = moor_run_lock(dir, "engined");
	CHECK(c >= 0, "another name is another lock");
	if (a >= 0)
		close(a);
	b = moor_run_lock(dir, "cached");
	CHECK(b >= 0, "free again once the first let go: %d", b);
	CHECK(moor_run_lock("/nonexistent-moor-dir", "x") == -ENOENT,
	      "a missing run dir is -ENOENT");
	if (b >= 0)
		close(b);
	if (c >= 0)
		close(c);
	char p[128];
	snprintf(p, sizeof p, "%s/cached.lock", dir);
	unlink(p);
	snprintf(p, sizeof p, "%s/engined.lock", dir);
	unlink(p);
	rmdir(dir);
}

static void test_parse_u32(void)
{
	static const struct {
		const char *s;
		int ok;
		uint32_t v;
	} cs[] = {
	    {"0", 1, 0},	  {"7", 1, 7},
	    {"0042", 1, 42},	  {"4294967295", 1, UINT32_MAX},
	    {"4294967296", 0, 0}, {"99999999999999999999", 0, 0},
	    {"", 0, 0},		  {"-1", 0, 0},
	    {"+1", 0, 0},	  {" 1", 0, 0},
	    {"1 ", 0, 0},	  {"1x", 0, 0},
	    {"0x10", 0, 0},
	};
	for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) {
		uint32_t v = 12345;
		int rv = moor_parse_u32(cs[i].s, &v);
		if (cs[i].ok)
			CHECK(rv == 0 && v == cs[i].v, "'%s': %d %u", cs[i].s,
			      rv, v);
		else
			CHECK(rv == -EINVAL && v == 12345,
			      "'%s' is refused and leaves the output", cs[i].s);
	}
	uint32_t v;
	CHECK(moor_parse_u32(NULL, &v) == -EINVAL, "NULL");
}

static void test_hex(void)
{
	static const uint8_t fp[8] = {0x00, 0x01, 0x7f, 0x80,
				      0xab, 0xcd, 0xef, 0xff};
	char out[17];
	memset(out, 'z', sizeof out);
	moor_hex(fp, 8, out);
	CHECK(!strcmp(out, "00017f80abcdefff"), "hex: %s", out);
	moor_hex(fp, 0, out);
	CHECK(out[0] == 0, "0 bytes: the empty string");

	/* and back, either case; a non-digit or a short string refused */
	uint8_t back[8];
	memset(back, 0x55, sizeof back);
	CHECK(moor_unhex("00017f80abcdefff", 8, back) == 0 &&
		  !memcmp(back, fp, 8),
	      "unhex of moor_hex's text");
	CHECK(moor_unhex("00017F80ABCDEFFF", 8, back) == 0 &&
		  !memcmp(back, fp, 8),
	      "unhex of upper case");
	CHECK(moor_unhex("00017f80abcdefgf", 8, back) == -EINVAL, "a g");
	CHECK(moor_unhex("0001 f80abcdefff", 8, back) == -EINVAL, "a space");
	CHECK(moor_unhex("+1", 1, back) == -EINVAL, "a sign");
	CHECK(moor_unhex("00017f", 8, back) == -EINVAL, "too short");
	CHECK(moor_unhex("", 0, back) == 0, "0 bytes");
}

int main(void)
{
	test_buf_contents();
	test_buf_alloc_failures();
	test_run_lock();
	test_parse_u32();
	test_hex();
	return t_done("test_common_buf_and_util");
}
