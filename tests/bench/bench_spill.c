/* bench_spill: the NVMe tiers' figures on this machine, in one run.
 *   1. The codec (byte planes + zstd frames, cached/codec.c) on real rows:
 *      a prefill of T tokens on each model given, then its KV rows (every
 *      view's rows [0, T)) and its recurrent states (every section) encoded
 *      and decoded apart: the bytes saved (the goal: 35% or more)
 *      and MB/s of each way on THREADS threads.
 *   2. The drive: a file of S MiB written with O_DIRECT (+ fdatasync) and
 *      read back with O_DIRECT, against the tiers' own path (dfile_write:
 *      .tmp + fdatasync + rename + directory fsync, dfile_read_at through
 *      the page cache with DONTNEED), in GB/s and as ratios (the goal: 90%
 *      of the O_DIRECT read rate).
 * Usage: bench_spill DIR THREADS T MODEL_DIR... (DIR: where the files go,
 * on the drive to measure). */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "codec.h"
#include "dfile.h"
#include "eng.h"
#include "kernels/ops.h"
#include "moor.h"

static void die(const char *what, int rc, const char *err)
{
	fprintf(stderr, "bench_spill: %s: %s %s\n", what, moor_strerror(rc),
		err ? err : "");
	exit(1);
}

static void codec_row(const char *model, const char *what, const void *p,
		      uint64_t n, moor_pool *pool)
{
	void *e = malloc(codec_bound(n)), *d = malloc(n ? n : 1);
	if (!e || !d)
		die("oom", -ENOMEM, NULL);
	uint64_t en;
	double t0 = moor_now();
	int rc = codec_encode(p, n, e, &en, pool);
	double t1 = moor_now();
	if (!rc)
		rc = codec_decode(e, en, d, n, pool);
	double t2 = moor_now();
	if (rc || memcmp(p, d, n))
		die("codec round trip", rc ? rc : MOOR_EFORMAT, what);
	printf("  %-14s %-12s %12llu %12llu %7.1f%% %9.0f %9.0f\n", model, what,
	       (unsigned long long)n, (unsigned long long)en,
	       100.0 * (1.0 - (double)en / (double)n),
	       (double)n / (t1 - t0) / 1e6, (double)n / (t2 - t1) / 1e6);
	free(e);
	free(d);
}

static void model_rows(const char *dir, int threads, int64_t T,
		       moor_pool *pool)
{
	char err[MOOR_ERRLEN] = "";
	kern_ctx *ctx;
	kern_config kc = {.threads = threads};
	int rc = kern_backend("cpu")->create(&kc, &ctx);
	if (rc)
		die("backend", rc, NULL);
	eng_opts o = {.grid = 1024, .window = T + 64, .threads = threads};
	eng_model *m;
	if ((rc = eng_model_load(dir, kern_backend("cpu"), ctx, &o, &m, err)))
		die("load", rc, err);
	const eng_layout *y = eng_model_layout(m);
	eng_seq s;
	if ((rc = eng_seq_alloc(m, &s)))
		die("seq", rc, NULL);
	int V = eng_model_vocab(m);
	int32_t *ids = malloc((size_t)T * 4);
	float *lg = malloc((size_t)V * 4);
	uint64_t x = 12345;
	for (int64_t i = 0; i < T; i++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		ids[i] = (int32_t)(x % (uint64_t)V);
	}
	if ((rc = eng_prefill(m, &s, ids, T, lg, ENG_LOGITS_LAST)))
		die("prefill", rc, NULL);
	kern_queue *q = kern_backend("cpu")->queue(ctx, KERN_Q_COMPUTE);
	uint64_t kv = 0, st = 0;
	for (int i = 0; i < y->n_views; i++)
		kv += y->view[i].row_bytes * (uint64_t)T;
	for (int i = 0; i < y->n_sections; i++)
		st += y->sec[i].bytes;
	uint8_t *kvb = malloc(kv), *stb = malloc(st);
	uint64_t o1 = 0;
	for (int i = 0; i < y->n_views; i++) {
		uint64_t n = y->view[i].row_bytes * (uint64_t)T;
		kern_backend("cpu")->download(q, kvb + o1, s.view[i], n);
		o1 += n;
	}
	o1 = 0;
	for (int i = 0; i < y->n_sections; i++) {
		kern_backend("cpu")->download(q, stb + o1, s.sec[i], y->sec[i].bytes);
		o1 += y->sec[i].bytes;
	}
	const char *name = strrchr(dir, '/') ? strrchr(dir, '/') + 1 : dir;
	codec_row(name, "KV rows", kvb, kv, pool);
	codec_row(name, "states", stb, st, pool);
	free(kvb);
	free(stb);
	free(ids);
	free(lg);
	eng_seq_free(m, &s);
	eng_model_free(m);
	kern_backend("cpu")->destroy(ctx);
}

static double gbps(uint64_t n, double s)
{
	return (double)n / s / 1e9;
}

static void drive(const char *dir, uint64_t mib)
{
	uint64_t n = mib << 20;
	void *b;
	if (posix_memalign(&b, 4096, n))
		die("oom", -ENOMEM, NULL);
	uint64_t x = 77;
	for (uint64_t i = 0; i < n / 8; i++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		((uint64_t *)b)[i] = x;
	}
	char p[600];
	snprintf(p, sizeof p, "%s/bench-odirect", dir);
	int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC | O_DIRECT, 0600);
	int direct = fd >= 0;
	if (!direct) /* a file system that refuses O_DIRECT (tmpfs) */
		fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	if (fd < 0)
		die("open", -errno, p);
	double t0 = moor_now();
	if (write(fd, b, n) != (ssize_t)n || fdatasync(fd))
		die("write", -errno, p);
	double w_raw = moor_now() - t0;
	close(fd);
	fd = open(p, O_RDONLY | (direct ? O_DIRECT : 0));
	if (!direct)
		posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
	t0 = moor_now();
	if (read(fd, b, n) != (ssize_t)n)
		die("read", -errno, p);
	double r_raw = moor_now() - t0;
	close(fd);
	unlink(p);

	int dfd = open(dir, O_RDONLY | O_DIRECTORY);
	char err[MOOR_ERRLEN] = "";
	dfile_part part = {b, n};
	t0 = moor_now();
	int rc = dfile_write(dfd, "bench-tier", &part, 1, 0, err);
	double w_t = moor_now() - t0;
	if (rc)
		die("dfile_write", rc, err);
	t0 = moor_now();
	rc = dfile_read_at(dfd, "bench-tier", 0, b, n, err);
	double r_t = moor_now() - t0;
	if (rc)
		die("dfile_read_at", rc, err);
	unlinkat(dfd, "bench-tier", 0);
	close(dfd);
	printf("drive (%s, %llu MiB, %s):\n", dir, (unsigned long long)mib,
	       direct ? "O_DIRECT" : "no O_DIRECT here: buffered + fadvise");
	printf("  %-28s %8s %8s\n", "", "write", "read");
	printf("  %-28s %8.2f %8.2f GB/s\n", "the drive (O_DIRECT)",
	       gbps(n, w_raw), gbps(n, r_raw));
	printf("  %-28s %8.2f %8.2f GB/s\n", "the tiers' path (dfile)",
	       gbps(n, w_t), gbps(n, r_t));
	printf("  %-28s %7.0f%% %7.0f%%\n", "tier / drive", 100 * w_raw / w_t,
	       100 * r_raw / r_t);
	free(b);
}

int main(int argc, char **argv)
{
	if (argc < 5) {
		fprintf(stderr, "usage: %s DIR THREADS T MODEL_DIR...\n",
			argv[0]);
		return 2;
	}
	int threads = atoi(argv[2]);
	int64_t T = atoll(argv[3]);
	moor_pool *pool = threads > 1 ? moor_pool_new(threads) : NULL;
	printf("codec: byte planes + zstd 1 in %llu MiB frames, %d thread(s), "
	       "a prefill of %lld random tokens\n",
	       (unsigned long long)(CODEC_FRAME >> 20), threads, (long long)T);
	printf("  %-14s %-12s %12s %12s %8s %9s %9s\n", "model", "what",
	       "bytes", "encoded", "saved", "enc MB/s", "dec MB/s");
	for (int i = 4; i < argc; i++)
		model_rows(argv[i], threads, T, pool);
	fflush(stdout);
	drive(argv[1], 512);
	moor_pool_free(pool);
	return 0;
}
