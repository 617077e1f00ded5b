/* test_arena_cuda: the device arena on CUDA and the CUDA mover (arena.h),
 * on the GPU (skips, saying why, without CUDA or a device).
 *   - a device arena past the GPU's free memory is refused with
 *     MOOR_ENOSPACE and a message naming the GiB free;
 *   - a device arena has an IPC handle (not all zero) on its device and
 *     the offset allocator of any arena;
 *   - copies host -> device -> device -> host, plain and 2D, whose host
 *     side crosses the edge of a registered part (MOOR_REG_PART_KB makes
 *     the parts 64 KiB), give back the bytes a host memcpy gives, after
 *     sync(); a fresh device arena reads as zeros; zero() zeroes;
 *   - a host-to-host copy after device copies sees their bytes (the mover
 *     waits for its stream first);
 *   - a batch (copyv: cudaMemcpy3DBatchAsync where the runtime has it,
 *     the default; MOOR_MOVER_BATCH=0 in the environment tests the
 *     copies one at a time instead) of 2D copies whose host side
 *     crosses parts, a plain run, a pageable
 *     source, device to device and host to host, in and back out, gives
 *     back the same bytes; the mover's counters count its 8 copies and
 *     their bytes, the calls they took (printed: fewer than the pieces
 *     where the runtime batches) and the sync;
 *   - a copyv keeps the order given, though a batch's copies run in no
 *     order (arena_batch.h's rules; each vector one call, the host sides
 *     crossing parts): a bounce filled by a batched copy and read on the
 *     CPU (host to host); a device region copied to pageable memory (a
 *     copy alone) after a batched copy into it; a chain through a bounce
 *     (device -> bounce -> device, both batched); the park's swap (rows
 *     out of a region to a bounce, others into it);
 *   - a new device arena's zeroing is done when arena_cuda_create
 *     returns: 64 KiB copied to the end of a fresh 1 GiB arena by the
 *     mover's stream right away read back whole 20 ms later;
 *   - lanes: rounds that copy in on lane 1 and back out on lane 2 through
 *     one device buffer, ordered only by marks (lane 2 after lane 1's
 *     copy in, lane 1's next copy in after lane 2's copy out), give every
 *     round's bytes back (lanes are streams of their own by default;
 *     MOOR_MOVER_LANES=0 in the environment tests them as one stream);
 *   - the mover knows the device and host arenas by address; a device
 *     buffer it does not know (a second device arena) and pageable memory
 *     are asked of the runtime: copies between them and the arenas, both
 *     ways, round-trip, and so do they through a mover that knows no
 *     device arena (over a host arena of its own);
 *   - a twin of the mover (the disk tier's writer's), called from another
 *     thread, copies device rows out into pageable and registered memory
 *     and syncs its own stream; freeing it leaves the first mover's
 *     registration working (a copy after it still round-trips); a twin of
 *     the memcpy mover is refused; the twin's sum2 (its own partials) of
 *     the rows it copied equals dfile_sum2 of them;
 *   - sum2 (the kernel over device memory): random bytes uploaded into a
 *     device arena of 64 MiB and more, summed at sizes 0, 1, 3, 4, 5, 17,
 *     1000003 and 64 MiB and at offsets 0, 4, 6, 12 (the uint4 loads from
 *     the first 16-byte edge, and bytes alone where src is not 4-byte
 *     aligned), equal dfile_sum2 of the same bytes on the host, by memcmp
 *     of the two uint64 pairs; so do sums in the mover's known device
 *     arena and of host memory (the registered arena, pageable); a
 *     buffer of 0xff bytes whose weighted sum wraps; a sum2 given right
 *     after a copy (h2d on lane 0, and on lane 1 through copyv, no sync
 *     between) sees the copied bytes, and one of host memory right after
 *     a d2h copy into it too; the counters count the sums and their
 *     bytes; and a line of GB/s: sum2 over 64 MiB of device memory
 *     against copying it to the host and summing there (the path it
 *     replaces). */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "arena.h"
#include "dfile.h"
#include "moor.h"
#include "t.h"

#define MB (1ull << 20)

static void fill(uint8_t *p, size_t n, uint32_t seed)
{
	for (size_t i = 0; i < n; i++) {
		seed = seed * 1664525u + 1013904223u;
		p[i] = (uint8_t)(seed >> 24);
	}
}

typedef struct twin_job {
	arena_mover *mv;
	uint8_t *D, *H; /* D + [0, n) holds the bytes to copy out */
	size_t n;
	int rc, pageable_ok, sum_ok;
	char err[MOOR_ERRLEN];
} twin_job;

/* A twin of mv made, used and freed on this thread: D's bytes into a
 * pageable buffer (checked against D's by a registered copy) and into H. */
static void *twin_thread(void *arg)
{
	twin_job *j = arg;
	arena_mover *tw = NULL;
	j->rc = arena_cuda_mover_twin(j->mv, &tw, j->err);
	if (j->rc)
		return NULL;
	char *pg = malloc(j->n);
	if (!pg) {
		j->rc = -1;
		arena_cuda_mover_free(tw);
		return NULL;
	}
	memset(j->H, 0, j->n);
	j->rc = tw->copy(tw->ctx, pg, j->D, j->n);
	if (!j->rc)
		j->rc =
		    tw->copy2d(tw->ctx, j->H, 512, j->D, 512, 512, j->n / 512);
	if (!j->rc)
		j->rc = tw->sync(tw->ctx);
	j->pageable_ok = !j->rc && memcmp(pg, j->H, j->n / 512 * 512) == 0;
	uint64_t got[2], want[2];
	dfile_sum2(pg, j->n, want);
	j->sum_ok = !j->rc && tw->sum2(tw->ctx, j->D, j->n, got) == 0 &&
		    memcmp(got, want, sizeof got) == 0;
	if (j->rc)
		snprintf(j->err, sizeof j->err, "a copy failed (%d)", j->rc);
	free(pg);
	arena_cuda_mover_free(tw);
	return NULL;
}

/* sum2 of n bytes at src by mover m equal to dfile_sum2 of the same bytes
 * at host copy h, by memcmp; what is printed says which case. */
static int sum_eq(arena_mover *m, const void *src, const void *h, size_t n,
		  const char *what, size_t off)
{
	uint64_t got[2] = {1, 1}, want[2];
	int rc = m->sum2(m->ctx, src, n, got);
	dfile_sum2(h, n, want);
	if (rc == 0 && memcmp(got, want, sizeof got) == 0)
		return 1;
	fprintf(stderr,
		"sum2 of %zu bytes at %s + %zu: rc %d, %016llx %016llx; "
		"dfile_sum2 %016llx %016llx\n",
		n, what, off, rc, (unsigned long long)got[0],
		(unsigned long long)got[1], (unsigned long long)want[0],
		(unsigned long long)want[1]);
	return 0;
}

/* sum2 against dfile_sum2 (the list at the top), on mover mv whose
 * device arena is D (4 MiB) and host arena H (4 MiB, registered). */
static void test_sum2(arena_mover *mv, uint8_t *D, uint8_t *H)
{
	char err[MOOR_ERRLEN] = "";
	size_t big = 64 * MB, cap = big + 64;
	arena *sa;
	REQUIRE(arena_cuda_create("/moor-test-dev-sum", 65 * MB, 0, &sa,
				  err) == 0,
		"a device arena for the sums: %s", err);
	uint8_t *S = arena_base(sa), *r = malloc(cap);
	REQUIRE(r, "oom");
	fill(r, cap, 2024);
	REQUIRE(mv->copy(mv->ctx, S, r, cap) == 0 && mv->sync(mv->ctx) == 0,
		"upload %zu random bytes", cap);

	size_t sizes[] = {0, 1, 3, 4, 5, 17, 1000003, 64 * MB};
	size_t offs[] = {0, 4, 6, 12};
	int ok = 1, cases = 0;
	for (size_t a = 0; a < sizeof sizes / sizeof *sizes; a++)
		for (size_t b = 0; b < sizeof offs / sizeof *offs; b++) {
			size_t n = sizes[a], o = offs[b];
			ok &= sum_eq(mv, S + o, r + o, n, "a device arena", o);
			cases++;
		}
	CHECK(ok, "sum2 over device memory = dfile_sum2 (%d cases)", cases);

	/* the mover's own device arena (known by address), and host memory:
	 * the registered arena and pageable */
	int okk = 1;
	CHECK(mv->copy(mv->ctx, D, r, 3 * MB) == 0, "h2d");
	memcpy(H, r + 5, 3 * MB);
	for (size_t o = 0; o < 8; o++) {
		okk &= sum_eq(mv, D + o, r + o, 3 * MB - o - 1, "D", o);
		okk &= sum_eq(mv, H + o, r + 5 + o, 2 * MB + 3, "H", o);
		okk &= sum_eq(mv, r + o, r + o, 1000003, "pageable", o);
	}
	CHECK(okk, "sum2 in the known device arena and of host memory");

	/* 0xff: the weighted sum wraps mod 2^64 (the partials too) */
	memset(r, 0xff, big);
	CHECK(mv->zero(mv->ctx, S, cap) == 0 &&
		  mv->copy(mv->ctx, S, r, big) == 0 &&
		  sum_eq(mv, S, r, big, "0xff", 0) &&
		  sum_eq(mv, S + 4, r + 4, big - 5, "0xff", 4),
	      "sum2 of 0xff bytes, wrapping");

	/* right after a copy, no sync between (from the registered arena:
	 * DMA that runs on after the call): lane 0 (copy), lane 1 (copyv:
	 * its own stream unless MOOR_MOVER_LANES=0), and host memory behind a
	 * d2h copy into it */
	fill(r, 3 * MB, 77);
	memcpy(H, r, 3 * MB);
	arena_copy l1 = {S + 8 * MB, H + MB, 2 * MB, 2 * MB, 2 * MB, 1};
	CHECK(mv->copy(mv->ctx, S + 4 * MB, H, 3 * MB) == 0 &&
		  sum_eq(mv, S + 4 * MB, r, 3 * MB, "after an h2d", 0),
	      "sum2 sees the copy given before it (lane 0)");
	CHECK(mv->copyv(mv->ctx, 1, &l1, 1) == 0 &&
		  sum_eq(mv, S + 8 * MB, r + MB, 2 * MB, "after lane 1", 0),
	      "sum2 sees the copy given before it on lane 1");
	memset(H, 0, 3 * MB);
	CHECK(mv->copy(mv->ctx, H, S + 4 * MB, 3 * MB) == 0 &&
		  sum_eq(mv, H, r, 3 * MB, "host after a d2h", 0),
	      "sum2 of host memory sees the d2h copy before it");

	arena_mover_stats s0, s1;
	mv->stats(mv->ctx, &s0);
	uint64_t x[2];
	CHECK(mv->sum2(mv->ctx, S, 1000, x) == 0 &&
		  mv->sum2(mv->ctx, H, 24, x) == 0,
	      "two sums");
	mv->stats(mv->ctx, &s1);
	CHECK(s1.sums - s0.sums == 2 && s1.sum_bytes - s0.sum_bytes == 1024,
	      "the counters: %llu sums of %llu bytes (want 2, 1024)",
	      (unsigned long long)(s1.sums - s0.sums),
	      (unsigned long long)(s1.sum_bytes - s0.sum_bytes));

	/* GB/s: sum2 over 64 MiB on the device against the path it
	 * replaces (a copy to pageable memory, then dfile_sum2), best of 5 */
	double dev_s = 1e9, host_s = 1e9;
	for (int k = 0; k < 5; k++) {
		double t0 = moor_now();
		int rc = mv->sum2(mv->ctx, S, big, x);
		double t1 = moor_now();
		rc |= mv->copy(mv->ctx, r, S, big) | mv->sync(mv->ctx);
		uint64_t y[2];
		dfile_sum2(r, big, y);
		double t2 = moor_now();
		CHECK(rc == 0 && memcmp(x, y, sizeof x) == 0, "bench round %d",
		      k);
		dev_s = t1 - t0 < dev_s ? t1 - t0 : dev_s;
		host_s = t2 - t1 < host_s ? t2 - t1 : host_s;
	}
	printf("test_arena_cuda: sum2 of 64 MiB of device memory: %.3f ms "
	       "(%.1f GB/s); copy to the host + dfile_sum2: %.3f ms "
	       "(%.1f GB/s)\n",
	       dev_s * 1e3, (double)big / dev_s / 1e9, host_s * 1e3,
	       (double)big / host_s / 1e9);
	free(r);
	arena_close(sa);
}

int main(void)
{
	char err[MOOR_ERRLEN] = "";
	if (arena_cuda_probe(0, err) != 0) {
		printf("test_arena_cuda: skipped: %s\n", err);
		return 77;
	}
	setenv("MOOR_REG_PART_KB", "64", 1);

	arena *big = NULL;
	int rc = arena_cuda_create("/moor-test-big", 1ull << 50, 0, &big, err);
	CHECK(rc == MOOR_ENOSPACE && strstr(err, "GiB free"),
	      "a 1 PiB arena: %d (%s)", rc, err);

	char hn[64];
	snprintf(hn, sizeof hn, "/moor-test-acuda-%d", (int)getpid());
	arena *dev, *host;
	REQUIRE(arena_cuda_create("/moor-test-dev", 4 * MB, 0, &dev, err) == 0,
		"device arena: %s", err);
	REQUIRE(arena_create(hn, 4 * MB, &host, err) == 0, "host arena: %s",
		err);
	uint8_t hd[64] = {0}, zero[64] = {0};
	int device = -1;
	REQUIRE(arena_cuda_handle(dev, hd, &device) == 0, "handle");
	CHECK(device == 0 && memcmp(hd, zero, sizeof hd) != 0,
	      "IPC handle on device %d", device);
	uint64_t o1, o2;
	CHECK(arena_alloc(dev, 100, &o1) == 0 && arena_alloc(dev, 64, &o2) == 0 &&
		  o1 == 0 && o2 == 128,
	      "the allocator over device memory");
	arena_release(dev, o1);
	arena_release(dev, o2);

	arena_mover *mv;
	REQUIRE(arena_cuda_mover_new(0, dev, host, &mv, err) == 0, "mover: %s",
		err);
	uint8_t *H = arena_base(host), *D = arena_base(dev);
	size_t n = 300 * 1024; /* crosses four 64 KiB parts */
	uint8_t *want = malloc(n);
	REQUIRE(want, "oom");
	fill(want, n, 7);

	/* a device arena is all zeros when arena_cuda_create returns: its
	 * zeroing (cudaMemset, the legacy stream: asynchronous to the host,
	 * and waited for by no non-blocking stream) is done, so bytes a
	 * stream of the mover's copies into it right away stay. 1 GiB, so
	 * that the zeroing takes long enough to overtake; the bytes at its
	 * end, where the zeroing ends */
	{
		arena *z;
		size_t zs = 1ull << 30, kz = 64 * 1024;
		REQUIRE(arena_cuda_create("/moor-test-zero", zs, 0, &z, err) ==
			    0,
			"a 1 GiB device arena: %s", err);
		uint8_t *Z = arena_base(z);
		memcpy(H, want, kz);
		CHECK(mv->copy(mv->ctx, Z + zs - kz, H, kz) == 0 &&
			  mv->sync(mv->ctx) == 0,
		      "h2d right after the arena is made");
		usleep(20000); /* whatever zeroing was still to come */
		memset(H + MB, 0, kz);
		CHECK(mv->copy(mv->ctx, H + MB, Z + zs - kz, kz) == 0 &&
			  mv->sync(mv->ctx) == 0 &&
			  memcmp(H + MB, want, kz) == 0,
		      "bytes copied into a new device arena right away stay "
		      "(its zeroing was done before it was handed out)");
		arena_close(z);
	}

	/* a fresh device arena reads as zeros */
	REQUIRE(mv->copy(mv->ctx, H, D, n) == 0 && mv->sync(mv->ctx) == 0,
		"read back");
	int zeros = 1;
	for (size_t i = 0; i < n; i++)
		zeros &= H[i] == 0;
	CHECK(zeros, "a fresh device arena reads as zeros");

	/* host (from 1000 bytes before a part's end) -> device -> device ->
	 * host (another offset) */
	size_t hs = 64 * 1024 - 1000, hd2 = 2 * MB + 12345;
	memcpy(H + hs, want, n);
	CHECK(mv->copy(mv->ctx, D + 4096, H + hs, n) == 0, "h2d");
	CHECK(mv->copy(mv->ctx, D + MB, D + 4096, n) == 0, "d2d");
	CHECK(mv->copy(mv->ctx, H + hd2, D + MB, n) == 0, "d2h");
	CHECK(mv->sync(mv->ctx) == 0, "sync");
	CHECK(memcmp(H + hd2, want, n) == 0, "round trip of %zu bytes", n);

	/* 2D: 40 rows of 5000 bytes, host pitch 7000 (the rows cross parts),
	 * device pitch 5120, back to host pitch 6000 */
	size_t w = 5000, rows = 40, hp = 7000, dp = 5120, bp = 6000;
	memset(H, 0, 3 * MB);
	for (size_t r = 0; r < rows; r++)
		memcpy(H + 100 + r * hp, want + r * w, w);
	CHECK(mv->copy2d(mv->ctx, D, dp, H + 100, hp, w, rows) == 0, "2d h2d");
	CHECK(mv->copy2d(mv->ctx, H + MB, bp, D, dp, w, rows) == 0, "2d d2h");
	CHECK(mv->sync(mv->ctx) == 0, "sync");
	int ok2 = 1;
	for (size_t r = 0; r < rows; r++)
		ok2 &= memcmp(H + MB + r * bp, want + r * w, w) == 0;
	CHECK(ok2, "2D round trip");

	/* zero, then a host-to-host copy that must see the device's bytes
	 * (D + MB holds want from the d2d copy; the 2D rows wrote over
	 * D + 4096's) */
	CHECK(mv->zero(mv->ctx, D + MB, 1000) == 0, "zero");
	CHECK(mv->copy(mv->ctx, H + 2 * MB, D + MB, 2000) == 0, "d2h");
	CHECK(mv->copy(mv->ctx, H + 3 * MB, H + 2 * MB, 2000) == 0, "h2h");
	int okz = 1;
	for (size_t i = 0; i < 1000; i++)
		okz &= H[3 * MB + i] == 0;
	CHECK(okz && memcmp(H + 3 * MB + 1000, want + 1000, 1000) == 0,
	      "zero() and the host copy behind the device copies");

	/* a batch in, a batch out, and one that reads what the last wrote */
	{
		size_t w3 = 5000, r3 = 40, hp3 = 7000, k3 = 100000;
		uint8_t *pg3 = malloc(MB);
		REQUIRE(pg3, "oom");
		memset(H, 0, 4 * MB);
		for (size_t r = 0; r < r3; r++)
			memcpy(H + 100 + r * hp3, want + r * w3, w3);
		memcpy(H + 300000, want, k3);
		memcpy(pg3, want + 1000, k3 / 2);
		arena_copy in[3] = {
		    {D, H + 100, 5120, hp3, w3, r3},
		    {D + 256 * 1024, H + 300000, k3, k3, k3, 1},
		    {D + 400 * 1024, pg3, k3 / 2, k3 / 2, k3 / 2, 1},
		};
		arena_copy out[4] = {
		    {H + MB, D, 6000, 5120, w3, r3},
		    {H + MB + 300000, D + 256 * 1024, k3, k3, k3, 1},
		    {D + 3 * MB, D + 400 * 1024, k3 / 2, k3 / 2, k3 / 2, 1},
		    {H + 2 * MB, H + 300000, k3, k3, k3, 1},
		};
		arena_copy back = {H + MB + 500000, D + 3 * MB, k3 / 2, k3 / 2,
				   k3 / 2, 1};
		arena_mover_stats s0, s1;
		mv->stats(mv->ctx, &s0);
		CHECK(mv->copyv(mv->ctx, 0, in, 3) == 0 &&
			  mv->copyv(mv->ctx, 0, out, 4) == 0 &&
			  mv->copyv(mv->ctx, 0, &back, 1) == 0 &&
			  mv->sync(mv->ctx) == 0,
		      "batches");
		mv->stats(mv->ctx, &s1);
		uint64_t bytes = 2 * w3 * r3 + 3 * k3 + 3 * (k3 / 2);
		CHECK(s1.copies - s0.copies == 8 &&
			  s1.bytes - s0.bytes == bytes &&
			  s1.syncs - s0.syncs == 1 && s1.calls > s0.calls &&
			  s1.issue_s > s0.issue_s && s1.wait_s >= s0.wait_s,
		      "the counters: %llu copies, %llu bytes (want 8, %llu)",
		      (unsigned long long)(s1.copies - s0.copies),
		      (unsigned long long)(s1.bytes - s0.bytes),
		      (unsigned long long)bytes);
		printf("test_arena_cuda: 8 copies in 3 batches (rows across "
		       "64 KiB parts) took %llu calls to the runtime\n",
		       (unsigned long long)(s1.calls - s0.calls));
		int okb = 1;
		for (size_t r = 0; r < r3; r++)
			okb &= memcmp(H + MB + r * 6000, want + r * w3, w3) == 0;
		CHECK(okb, "a batch's 2D copies across parts round-trip");
		CHECK(memcmp(H + MB + 300000, want, k3) == 0 &&
			  memcmp(H + 2 * MB, want, k3) == 0,
		      "a batch's plain runs and its host copy");
		CHECK(memcmp(H + MB + 500000, want + 1000, k3 / 2) == 0,
		      "a pageable source and a device copy, batch after batch");
		free(pg3);
	}

	/* a copyv keeps the order given, though the copies of one batch run
	 * in no order (arena_batch.h's rules). Each vector is one call;
	 * the host side of each copy crosses the 64 KiB parts (pieces) */
	{
		size_t k5 = 100000, w5 = 20000, p5 = 32768;
		uint8_t *pg5 = malloc(k5), *a5 = malloc(k5);
		REQUIRE(pg5 && a5, "oom");
		fill(a5, k5, 21);
		memset(H, 0, 4 * MB);
		memcpy(H, a5, k5); /* A: what goes in */
		memcpy(H + 3 * MB, want, k5);
		CHECK(mv->copy(mv->ctx, D, H + 3 * MB, k5) == 0 &&
			  mv->copy2d(mv->ctx, D + 3 * MB, p5, want, w5, w5,
				     4) == 0 &&
			  mv->sync(mv->ctx) == 0,
		      "D and the rows at D + 3 MB hold want");
		/* a bounce filled by a batched copy, read on the CPU (host
		 * to host) in the same call */
		arena_copy v1[2] = {{H + MB, D, k5, k5, k5, 1},
				    {H + 2 * MB, H + MB, k5, k5, k5, 1}};
		CHECK(mv->copyv(mv->ctx, 0, v1, 2) == 0 &&
			  mv->sync(mv->ctx) == 0 &&
			  memcmp(H + 2 * MB, want, k5) == 0,
		      "a bounce read on the CPU after the batched copy that "
		      "fills it");
		/* a device region to pageable memory (a copy alone) after a
		 * batched copy into it */
		arena_copy v2[2] = {{D + MB, H, k5, k5, k5, 1},
				    {pg5, D + MB, k5, k5, k5, 1}};
		memset(pg5, 0, k5);
		CHECK(mv->copyv(mv->ctx, 0, v2, 2) == 0 &&
			  mv->sync(mv->ctx) == 0 && memcmp(pg5, a5, k5) == 0,
		      "a pageable copy after the batched copy it reads");
		/* a chain through a bounce, both copies batched */
		memset(H + MB, 0, k5);
		arena_copy v3[2] = {{H + MB, D, k5, k5, k5, 1},
				    {D + 2 * MB, H + MB, k5, k5, k5, 1}};
		memset(H + 2 * MB, 0, k5);
		CHECK(mv->copyv(mv->ctx, 0, v3, 2) == 0 &&
			  mv->copy(mv->ctx, H + 2 * MB, D + 2 * MB, k5) == 0 &&
			  mv->sync(mv->ctx) == 0 &&
			  memcmp(H + 2 * MB, want, k5) == 0,
		      "a chain through a bounce in one call");
		/* the park's swap in one vector: 4 rows out of D + 3 MB to a
		 * bounce, A's rows in over them */
		memset(H + MB, 0, 4 * w5);
		arena_copy v4[2] = {{H + MB, D + 3 * MB, w5, p5, w5, 4},
				    {D + 3 * MB, H, p5, w5, w5, 4}};
		memset(pg5, 0, k5);
		CHECK(mv->copyv(mv->ctx, 0, v4, 2) == 0 &&
			  mv->copy2d(mv->ctx, pg5, w5, D + 3 * MB, p5, w5, 4) ==
			      0 &&
			  mv->sync(mv->ctx) == 0 &&
			  memcmp(H + MB, want, 4 * w5) == 0 &&
			  memcmp(pg5, a5, 4 * w5) == 0,
		      "rows out of a region and others into it in one call");
		free(pg5);
		free(a5);
	}

	/* lanes: 8 rounds through the device buffer at D + 3 MB */
	{
		size_t k4 = 64 * 1024;
		memset(H, 0, 4 * MB);
		for (int r = 0; r < 8; r++)
			fill(H + r * k4, k4, 100 + (uint32_t)r);
		uint64_t p1 = 0, p2 = 0;
		int okl = 1;
		for (int r = 0; r < 8 && okl; r++) {
			arena_copy cin = {D + 3 * MB, H + r * k4, k4, k4, k4, 1};
			arena_copy cout = {H + 2 * MB + r * k4, D + 3 * MB,
					   k4, k4, k4, 1};
			okl = (r == 0 || mv->after(mv->ctx, 1, p2) == 0) &&
			      mv->copyv(mv->ctx, 1, &cin, 1) == 0 &&
			      mv->mark(mv->ctx, 1, &p1) == 0 &&
			      mv->after(mv->ctx, 2, p1) == 0 &&
			      mv->copyv(mv->ctx, 2, &cout, 1) == 0 &&
			      mv->mark(mv->ctx, 2, &p2) == 0;
		}
		CHECK(okl && mv->after(mv->ctx, 0, p2) == 0 &&
			  mv->sync(mv->ctx) == 0,
		      "copies on lanes");
		CHECK(memcmp(H + 2 * MB, H, 8 * k4) == 0,
		      "every round through one buffer on two lanes, in order");
	}

	test_sum2(mv, D, H);

	/* pointers outside the arenas the mover knows: a device buffer (a
	 * second device arena) and pageable memory, each way, on this mover
	 * and on one that knows no device arena */
	arena *dev2;
	REQUIRE(arena_cuda_create("/moor-test-dev2", MB, 0, &dev2, err) == 0,
		"a second device arena: %s", err);
	char hn2[64];
	snprintf(hn2, sizeof hn2, "/moor-test-acuda2-%d", (int)getpid());
	arena *host2;
	REQUIRE(arena_create(hn2, MB, &host2, err) == 0, "host arena: %s", err);
	arena_mover *mv0;
	REQUIRE(arena_cuda_mover_new(0, NULL, host2, &mv0, err) == 0,
		"a mover that knows no device arena: %s", err);
	uint8_t *D2 = arena_base(dev2), *pg = malloc(MB);
	REQUIRE(pg, "oom");
	for (int k = 0; k < 2; k++) {
		arena_mover *m = k ? mv0 : mv;
		uint8_t *Hk = k ? (uint8_t *)arena_base(host2) : H + MB;
		size_t m2 = 200 * 1000;
		memset(Hk, 0, m2);
		memset(pg, 0, m2);
		CHECK(m->copy(m->ctx, D2 + 64, want, m2) == 0 &&  /* pg -> D2 */
			  m->copy(m->ctx, D + 2 * MB, D2 + 64, m2) == 0 &&
			  m->copy2d(m->ctx, D2 + MB / 2, 1000, D + 2 * MB, 1000,
				    1000, m2 / 1000) == 0 &&	/* D -> D2 */
			  m->copy(m->ctx, Hk, D2 + MB / 2, m2) == 0 &&
			  m->copy(m->ctx, pg, D2 + 64, m2) == 0 &&  /* -> pg */
			  m->sync(m->ctx) == 0,
		      "copies with an unknown device buffer (mover %d)", k);
		CHECK(memcmp(Hk, want, m2) == 0 && memcmp(pg, want, m2) == 0,
		      "they round-trip (mover %d)", k);
	}
	free(pg);
	arena_cuda_mover_free(mv0);
	arena_close(host2);
	arena_close(dev2);

	/* the twin, on a thread of its own, as the disk writer uses it
	 * (D + MB holds want again; n is 600 rows of 512 bytes) */
	CHECK(mv->copy(mv->ctx, D + MB, want, n) == 0 && mv->sync(mv->ctx) == 0,
	      "h2d from pageable memory");
	twin_job tj = {.mv = mv, .D = D + MB, .H = H + 2 * MB, .n = n};
	pthread_t th;
	REQUIRE(pthread_create(&th, NULL, twin_thread, &tj) == 0, "thread");
	pthread_join(th, NULL);
	CHECK(tj.rc == 0, "twin: %s", tj.err);
	CHECK(tj.pageable_ok && memcmp(H + 2 * MB, want, n) == 0,
	      "the twin's copies from another thread, into pageable and "
	      "registered memory");
	CHECK(tj.sum_ok, "the twin's sum2 on its thread");
	/* the first mover still copies into its registered parts */
	memset(H + 3 * MB, 0, n);
	CHECK(mv->copy(mv->ctx, H + 3 * MB, D + MB, n) == 0 &&
		  mv->sync(mv->ctx) == 0 && memcmp(H + 3 * MB, want, n) == 0,
	      "the first mover after the twin is freed");
	arena_mover *bad = NULL;
	CHECK(arena_cuda_mover_twin(&arena_mover_memcpy, &bad, err) ==
		      MOOR_EUNSUP &&
		  !bad,
	      "a twin of the memcpy mover is refused: %s", err);

	free(want);
	arena_cuda_mover_free(mv);
	arena_close(host);
	arena_close(dev);
	return t_done("test_arena_cuda");
}
