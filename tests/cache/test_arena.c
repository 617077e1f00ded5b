/* test_arena: the shm arena and its allocator, a second mapping by name,
 * and cache_view_copy for every token axis.
 *   - blocks are 64-byte aligned and rounded; used bytes add up;
 *   - first fit reuses a hole; neighbours coalesce on release in any order;
 *   - exhaustion is MOOR_ENOSPACE, and nothing changes;
 *   - a second mapping (arena_map by name) sees the owner's bytes both ways;
 *     creating an existing name is -EEXIST; a closed owner unlinks it;
 *   - cache_view_copy equals an element-by-element reference copy for token
 *     axes 0, 1, 2 and 3, between windows of different lengths;
 *   - the memcpy mover's sum2 equals dfile_sum2 and a reference written
 *     from the definition (words assembled byte by byte, little-endian,
 *     the tail zero-padded), by memcmp of the two uint64 pairs, on random
 *     buffers of odd sizes at odd addresses; on 1, 2, 3 words the sums
 *     are the numbers worked by hand; on 2^20 words of 0xffffffff the
 *     weighted sum wraps mod 2^64 as the closed form says. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "arena.h"
#include "cache.h"
#include "dfile.h"
#include "moor.h"
#include "sum_ref.h"
#include "t.h"

static void test_alloc(void)
{
	char name[64], err[MOOR_ERRLEN];
	snprintf(name, sizeof name, "/moor-test-arena-%d", (int)getpid());
	arena *a;
	REQUIRE(arena_create(name, 64 * 100, &a, err) == 0, "create: %s", err);
	uint64_t o[8];
	REQUIRE(arena_alloc(a, 1, &o[0]) == 0, "alloc 1");
	REQUIRE(arena_alloc(a, 65, &o[1]) == 0, "alloc 65");
	REQUIRE(arena_alloc(a, 64, &o[2]) == 0, "alloc 64");
	CHECK(o[0] == 0 && o[1] == 64 && o[2] == 192, "offsets %llu %llu %llu",
	      (unsigned long long)o[0], (unsigned long long)o[1],
	      (unsigned long long)o[2]);
	for (int i = 0; i < 3; i++)
		CHECK(o[i] % ARENA_ALIGN == 0, "alignment");
	CHECK(arena_used(a) == 64 + 128 + 64, "used %llu",
	      (unsigned long long)arena_used(a));
	CHECK(arena_block_size(a, o[1]) == 128, "block size");
	CHECK(arena_alloc(a, 0, &o[3]) == MOOR_ERANGE, "0 bytes");

	/* a hole: first fit takes it again */
	arena_release(a, o[1]);
	CHECK(arena_used(a) == 128, "used after release");
	REQUIRE(arena_alloc(a, 100, &o[3]) == 0, "alloc into the hole");
	CHECK(o[3] == 64, "first fit reuses the hole at 64, got %llu",
	      (unsigned long long)o[3]);
	/* a block that does not fit the hole goes after */
	arena_release(a, o[3]);
	REQUIRE(arena_alloc(a, 200, &o[4]) == 0, "alloc 200");
	CHECK(o[4] == 256, "200 bytes after the hole, got %llu",
	      (unsigned long long)o[4]);

	/* exhaustion, then nothing changed */
	uint64_t used = arena_used(a), x;
	CHECK(arena_alloc(a, 64 * 100, &x) == MOOR_ENOSPACE, "too big");
	CHECK(arena_alloc(a, 64 * 200, &x) == MOOR_ENOSPACE, "over the size");
	CHECK(arena_used(a) == used, "exhaustion changed nothing");
	uint64_t big = arena_largest_free(a);
	REQUIRE(arena_alloc(a, big, &o[5]) == 0, "the largest free extent");
	CHECK(arena_alloc(a, 64 * 3, &x) == MOOR_ENOSPACE,
	      "only the hole of 128 is left");
	REQUIRE(arena_alloc(a, 128, &o[6]) == 0, "the hole");
	CHECK(arena_alloc(a, 1, &x) == MOOR_ENOSPACE, "full");
	CHECK(arena_used(a) == arena_size(a), "all used");

	/* coalescing: release in an order that merges left, right, both */
	arena_release(a, o[2]);
	arena_release(a, o[0]);
	arena_release(a, o[6]); /* between o[0] and o[2]: merges both sides */
	CHECK(arena_largest_free(a) == 256, "merged to 256, got %llu",
	      (unsigned long long)arena_largest_free(a));
	arena_release(a, o[5]);
	arena_release(a, o[4]);
	CHECK(arena_used(a) == 0 && arena_blocks(a) == 0, "empty");
	CHECK(arena_largest_free(a) == arena_size(a), "one extent again");

	/* many small blocks, every other released, then re-merged */
	uint64_t m[100];
	for (int i = 0; i < 100; i++)
		REQUIRE(arena_alloc(a, 64, &m[i]) == 0, "small %d", i);
	for (int i = 0; i < 100; i += 2)
		arena_release(a, m[i]);
	CHECK(arena_largest_free(a) == 64, "fragmented");
	CHECK(arena_alloc(a, 65, &x) == MOOR_ENOSPACE, "no extent of 128");
	for (int i = 1; i < 100; i += 2)
		arena_release(a, m[i]);
	CHECK(arena_largest_free(a) == arena_size(a), "coalesced");
	arena_close(a);
}

static void test_map(void)
{
	char name[64], err[MOOR_ERRLEN];
	snprintf(name, sizeof name, "/moor-test-map-%d", (int)getpid());
	arena *a, *b, *b2;
	REQUIRE(arena_create(name, 1 << 20, &a, err) == 0, "create: %s", err);
	CHECK(arena_create(name, 1 << 20, &b, err) == -EEXIST,
	      "a second create of one name is -EEXIST");
	uint64_t off;
	REQUIRE(arena_alloc(a, 4096, &off) == 0, "alloc");
	unsigned char *p = (unsigned char *)arena_base(a) + off;
	for (int i = 0; i < 4096; i++)
		p[i] = (unsigned char)(i * 7 + 3);
	REQUIRE(arena_map(name, &b, err) == 0, "map: %s", err);
	REQUIRE(arena_map(name, &b2, err) == 0, "map again: %s", err);
	CHECK(arena_size(b) == arena_size(a), "mapped size");
	CHECK(arena_base(b) != arena_base(a), "another mapping");
	CHECK(memcmp((char *)arena_base(b) + off, p, 4096) == 0,
	      "the mapping sees the owner's bytes");
	((unsigned char *)arena_base(b2))[off + 5] = 0xab;
	CHECK(p[5] == 0xab, "the owner sees the mapping's bytes");
	CHECK(arena_alloc(b, 64, &off) == MOOR_EUNSUP,
	      "a mapping has no allocator");
	arena_close(b);
	arena_close(b2);
	arena_close(a);
	CHECK(arena_map(name, &b, err) == -ENOENT,
	      "the owner's close unlinks the name");
	CHECK(arena_create("no-slash", 64, &b, err) == MOOR_ERANGE,
	      "a name without '/'");
}

/* element (idx[0..ndim)) of a buffer laid out with dims, the token axis
 * of length win */
static size_t elt_off(const cache_view *v, const int64_t *idx, uint64_t win)
{
	size_t o = 0;
	for (uint32_t d = 0; d < v->ndim; d++) {
		uint64_t len = d == v->token_axis ? win : (uint64_t)v->dims[d];
		o = o * len + (size_t)idx[d];
	}
	return o * v->elt;
}

static void test_view_copy_axis(uint32_t ndim, uint32_t ta, uint32_t elt)
{
	cache_view v = {0};
	snprintf(v.name, sizeof v.name, "t%u", ta);
	v.elt = elt;
	v.ndim = ndim;
	int64_t shape[4] = {3, 2, 5, 4};
	for (uint32_t d = 0; d < ndim; d++)
		v.dims[d] = shape[d];
	v.token_axis = ta;
	v.dims[ta] = 0; /* ignored */
	uint64_t sw = 37, dw = 23, sr = 9, dr = 4, n = 13;
	size_t per = elt;
	for (uint32_t d = 0; d < ndim; d++)
		if (d != ta)
			per *= (size_t)v.dims[d];
	size_t sbytes = per * sw, dbytes = per * dw;
	unsigned char *src = malloc(sbytes), *dst = malloc(dbytes),
		      *ref = malloc(dbytes);
	REQUIRE(src && dst && ref, "oom");
	for (size_t i = 0; i < sbytes; i++)
		src[i] = (unsigned char)(i * 131 + 17);
	memset(dst, 0x5a, dbytes);
	memset(ref, 0x5a, dbytes);
	/* reference: every element of rows [sr, sr + n) */
	int64_t idx[4] = {0};
	for (;;) {
		if ((uint64_t)idx[ta] < n) {
			int64_t si[4], di[4];
			memcpy(si, idx, sizeof si);
			memcpy(di, idx, sizeof di);
			si[ta] += (int64_t)sr;
			di[ta] += (int64_t)dr;
			memcpy(ref + elt_off(&v, di, dw),
			       src + elt_off(&v, si, sw), elt);
		}
		uint32_t d = ndim;
		while (d-- > 0) {
			int64_t len = d == ta ? (int64_t)n : v.dims[d];
			if (++idx[d] < len)
				break;
			idx[d] = 0;
		}
		if (d == UINT32_MAX)
			break;
	}
	cache_view_copy(&v, dst, dw, dr, src, sw, sr, n);
	CHECK(memcmp(dst, ref, dbytes) == 0,
	      "cache_view_copy, token axis %u of %u dims, elt %u", ta, ndim,
	      elt);
	free(src);
	free(dst);
	free(ref);
}

static void test_sum2(void)
{
	const arena_mover *m = &arena_mover_memcpy;
	REQUIRE(m->sum2, "the memcpy mover has sum2");
	size_t cap = (1 << 22) + 64;
	uint8_t *buf = malloc(cap);
	REQUIRE(buf, "oom");
	uint32_t seed = 12345;
	for (size_t i = 0; i < cap; i++) {
		seed = seed * 1664525u + 1013904223u;
		buf[i] = (uint8_t)(seed >> 24);
	}
	/* odd sizes at odd offsets (a padded tail of 1, 2, 3 bytes) */
	size_t sizes[] = {0, 1, 2, 3, 4, 5, 7, 63, 1021, 4097, 65537,
			  1000003, 1 << 22};
	size_t offs[] = {0, 1, 3, 4, 6, 64};
	int ok = 1, cases = 0;
	for (size_t a = 0; a < sizeof sizes / sizeof *sizes; a++)
		for (size_t b = 0; b < sizeof offs / sizeof *offs; b++) {
			size_t n = sizes[a], o = offs[b];
			uint64_t got[2] = {1, 1}, want[2], ref[2];
			int rc = m->sum2(m->ctx, buf + o, n, got);
			dfile_sum2(buf + o, n, want);
			sum2_ref(buf + o, n, ref);
			cases++;
			if (rc || memcmp(got, want, sizeof got) ||
			    memcmp(got, ref, sizeof got)) {
				ok = 0;
				fprintf(stderr,
					"sum2 of %zu bytes at +%zu: rc %d, "
					"%016llx %016llx; dfile_sum2 %016llx "
					"%016llx; reference %016llx %016llx\n",
					n, o, rc, (unsigned long long)got[0],
					(unsigned long long)got[1],
					(unsigned long long)want[0],
					(unsigned long long)want[1],
					(unsigned long long)ref[0],
					(unsigned long long)ref[1]);
			}
		}
	CHECK(ok, "the memcpy mover's sum2 = dfile_sum2 = the definition "
		  "(%d cases)", cases);

	/* by hand: words 1, 2 and a tail byte 3: a = 6, w = 1 + 4 + 9 */
	uint8_t h[9] = {1, 0, 0, 0, 2, 0, 0, 0, 3};
	uint64_t s[2];
	CHECK(m->sum2(m->ctx, h, 9, s) == 0 && s[0] == 6 && s[1] == 14,
	      "1, 2, 3: %llu %llu (want 6 14)", (unsigned long long)s[0],
	      (unsigned long long)s[1]);
	/* little-endian: bytes 01 02 03 04 are the word 0x04030201 */
	uint8_t le[4] = {1, 2, 3, 4};
	CHECK(m->sum2(m->ctx, le, 4, s) == 0 && s[0] == 0x04030201 &&
		  s[1] == 0x04030201,
	      "little-endian word");
	/* N = 2^20 words of 2^32 - 1: w = (2^32 - 1) N (N + 1) / 2 mod 2^64
	 * (past 2^64: it wraps) */
	uint64_t nw = 1 << 20;
	memset(buf, 0xff, 4 * nw);
	uint64_t full = 0xffffffffull;
	unsigned __int128 wf =
	    (unsigned __int128)full * (nw * (nw + 1) / 2);
	CHECK(wf >> 64 != 0, "the case wraps");
	CHECK(m->sum2(m->ctx, buf, 4 * nw, s) == 0 && s[0] == full * nw &&
		  s[1] == (uint64_t)wf,
	      "2^20 words of 0xffffffff: %016llx %016llx",
	      (unsigned long long)s[0], (unsigned long long)s[1]);
	free(buf);
}

int main(void)
{
	moor_log_level = MOOR_LOG_WARN;
	test_alloc();
	test_map();
	test_sum2();
	test_view_copy_axis(1, 0, 4);
	test_view_copy_axis(2, 0, 4);
	test_view_copy_axis(2, 1, 2);
	test_view_copy_axis(3, 0, 2);
	test_view_copy_axis(3, 1, 2);
	test_view_copy_axis(3, 2, 1);
	test_view_copy_axis(4, 3, 4);
	test_view_copy_axis(4, 1, 1);
	return t_done("test_arena");
}
