/* test_spill_sums_parts: dfile_sum2_pieces (the spill's sums on the pool,
 * dfile.h) is dfile_sum2 bit for bit, whatever the parts and the threads:
 *   - dfile_sum2 itself against its definition written out (the 32-bit
 *     little-endian words, the last zero-padded; s[0] = sum w_i,
 *     s[1] = sum (i + 1) w_i mod 2^64) on sizes 0 to 67 and a few large;
 *   - random buffers of odd sizes at odd addresses, cut in 1 to 5 pieces
 *     of odd lengths (so a piece starts inside a word of the buffer: each
 *     piece's words are its own, as k dfile_sum2 calls see them), summed
 *     in parts of 4, 8, 12, 4,100 bytes and the default 1 MiB, on no pool
 *     and pools of 2, 3 and 5 threads: memcmp with the pieces' dfile_sum2;
 *   - words whose weighted sum wraps (every byte 0xff, 64 MiB + 3 bytes:
 *     (i + 1) * 0xffffffff summed past 2^64), in parts of 4 KiB and 1 MiB
 *     on 3 threads;
 *   - a part that ends inside a word is never made: part sizes are
 *     multiples of 4 (the combination's premise), so the only short word
 *     is a piece's last, zero-padded as dfile_sum2 pads it. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dfile.h"
#include "moor.h"
#include "pool.h"
#include "sum_ref.h"
#include "t.h"

static uint64_t rng = 0x243f6a8885a308d3ull;

static uint64_t next(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng;
}

static void pieces_vs_serial(const uint8_t *p, const uint64_t *len, uint32_t k,
			     uint64_t part, moor_pool *pool, const char *what)
{
	uint64_t want[10], got[10];
	const uint8_t *q = p;
	for (uint32_t i = 0; i < k; i++) {
		dfile_sum2(q, len[i], want + 2 * i);
		q += len[i];
	}
	memset(got, 0xa5, sizeof got);
	dfile_sum2_pieces(p, len, k, got, part, pool);
	CHECK(!memcmp(want, got, 2 * k * 8),
	      "%s: %u pieces, parts of %llu, %d threads", what, k,
	      (unsigned long long)part, moor_pool_threads(pool));
}

int main(void)
{
	/* dfile_sum2 is its definition */
	static uint8_t small[4096 + 64];
	for (size_t i = 0; i < sizeof small; i++)
		small[i] = (uint8_t)next();
	for (uint64_t n = 0; n < 68; n++)
		for (uint64_t a = 0; a < 4; a++) {
			uint64_t s[2], d[2];
			dfile_sum2(small + a, n, s);
			sum2_ref(small + a, n, d);
			CHECK(!memcmp(s, d, 16), "dfile_sum2 of %llu at +%llu",
			      (unsigned long long)n, (unsigned long long)a);
		}
	{
		uint64_t s[2], d[2];
		dfile_sum2(small + 1, 4096 + 61, s);
		sum2_ref(small + 1, 4096 + 61, d);
		CHECK(!memcmp(s, d, 16), "dfile_sum2 of 4,157 bytes");
	}

	moor_pool *pools[4] = {NULL, moor_pool_new(2), moor_pool_new(3),
			       moor_pool_new(5)};
	REQUIRE(pools[1] && pools[2] && pools[3], "pools");
	const uint64_t parts[] = {4, 8, 12, 4100, 0};
	uint64_t big = (3ull << 20) + 4096;
	uint8_t *buf = malloc(big + 8);
	REQUIRE(buf, "oom");
	for (uint64_t i = 0; i < big + 8; i++)
		buf[i] = (uint8_t)next();
	int trials = 0;
	for (int t = 0; t < 60; t++) {
		/* sizes: tiny (parts of 4 bytes stay cheap), then up to
		 * 3 MiB for the default parts */
		uint64_t total = t < 40 ? next() % 20000 : next() % big;
		uint32_t k = 1 + (uint32_t)(next() % 5);
		uint64_t len[5], left = total;
		for (uint32_t i = 0; i + 1 < k; i++) {
			len[i] = left ? next() % (left + 1) : 0;
			len[i] |= len[i] && !(len[i] & 1) ? 1 : 0; /* odd */
			if (len[i] > left)
				len[i] = left;
			left -= len[i];
		}
		len[k - 1] = left;
		const uint8_t *p = buf + 1 + next() % 7; /* odd addresses too */
		for (int pi = 0; pi < 4; pi++)
			for (size_t q = 0; q < sizeof parts / sizeof *parts;
			     q++) {
				if (total > 20000 && parts[q] &&
				    parts[q] < 4096)
					continue; /* millions of tasks */
				char what[64];
				snprintf(what, sizeof what, "trial %d (%llu B)",
					 t, (unsigned long long)total);
				pieces_vs_serial(p, len, k, parts[q], pools[pi],
						 what);
				trials++;
			}
	}
	free(buf);

	/* the weighted sum wraps: every word 0xffffffff */
	uint64_t n = (64ull << 20) + 3;
	uint8_t *ff = malloc(n);
	REQUIRE(ff, "oom");
	memset(ff, 0xff, n);
	uint64_t s[2], d[2];
	dfile_sum2(ff, n, s);
	uint64_t nw = n / 4;
	/* by hand: a = nw * 0xffffffff + 0xffffff (the short last word),
	 * w = 0xffffffff * nw (nw + 1) / 2 + (nw + 1) * 0xffffff */
	unsigned __int128 w128 =
	    (unsigned __int128)0xffffffffull * nw * (nw + 1) / 2;
	uint64_t want_a = nw * 0xffffffffull + 0xffffffull;
	uint64_t want_w = (uint64_t)w128 + (nw + 1) * 0xffffffull;
	CHECK(s[0] == want_a && s[1] == want_w,
	      "dfile_sum2 of 0xff bytes wraps as the definition says");
	CHECK((unsigned __int128)0xffffffffull * nw * (nw + 1) / 2 >
		  (unsigned __int128)UINT64_MAX,
	      "the weighted sum does wrap");
	dfile_sum2_pieces(ff, &n, 1, d, 4096, pools[2]);
	CHECK(!memcmp(s, d, 16), "wrapping sums in parts of 4 KiB");
	dfile_sum2_pieces(ff, &n, 1, d, 0, pools[2]);
	CHECK(!memcmp(s, d, 16), "wrapping sums in parts of 1 MiB");
	free(ff);
	for (int i = 0; i < 4; i++)
		moor_pool_free(pools[i]);
	printf("test_spill_sums_parts: %d comparisons\n", trials);
	return t_done("test_spill_sums_parts");
}
