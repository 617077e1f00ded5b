/* bench_spill: the NVMe tiers' figures on this machine, in one run.
 *   1. The codec (byte planes + zstd frames, cached/codec.c) on real rows:
 *      a prefill of T tokens on each model given, then its KV rows (every
 *      view's rows [0, T)) and its recurrent states (every section) encoded
 *      and decoded apart: the bytes saved (the goal: 35% or more)
 *      and MB/s of each way on THREADS threads; beside them what their
 *      bytes' order-0 statistics allow (entropy_row: each byte plane's
 *      entropy, the top 16 bits' as one symbol, a view or a section at a
 *      time), which says which bits are noise. The prompt is
 *      the first T ids of MODEL_DIR/bench_ids.i32 (little-endian int32;
 *      held-out text, tests/golden/train_tiny.py writes one) where it
 *      exists, else random ids; the rows say which.
 *   2. The drive: a file of S MiB written with O_DIRECT (+ fdatasync) and
 *      read back with O_DIRECT, the best of 3 of two ways (one 64 MiB
 *      request at a time, and 4 threads of 8 MiB requests: the drive's
 *      best, several requests in flight), against the tiers' dfile path
 *      buffered (dfile_write: .tmp + fdatasync + rename + directory fsync,
 *      dfile_read_at through the page cache with DONTNEED) and O_DIRECT
 *      (dfile_write_direct, dfile_read_direct: the spill's), in GB/s and
 *      as ratios.
 *   3. The tiers themselves, in the same run, on a conversation of the
 *      27B's shape (16 attention layers of 4 KV heads of 256, bf16: 64 KiB
 *      of rows a token; 48 delta-rule states of 48 x 128 x 128 fp32 and
 *      their conv tails: about 150 MiB of sections), bf16- and fp32-like
 *      bytes (narrow exponents, random mantissas), a head of HEAD tokens
 *      (MOOR_BENCH_HEAD, default 4096): the disk tier's writer (the head's
 *      chunks and anchors) and its restore in a new cache (a kill -9 of
 *      cached: no drain), then the spill's drain and its read-back at the
 *      next attach; GB/s of the bytes the drive moved and of the bytes the
 *      engine gets (the codec shrinks the spill's), and the drive-side
 *      rates beside the O_DIRECT ones of part 2 and as a share of them
 *      (the disk tier's restore: 90% of the drive's read, issue 11); the
 *      drive's read is measured again after part 3 and the ratios take
 *      the better of the two. The restores' own breakdown (reads, waits,
 *      checks, copies) is in their log lines ([disk] restored). The
 *      spill's save side by side: its encoder's work alone (the drain's
 *      blocks and section files copied out, summed and encoded, each on
 *      THREADS threads as the save does; the codec's calls of it alone,
 *      and the same files
 *      decoded back: the codec's two ways on the 27B's bytes) and its
 *      writer's alone (those files written with dfile_write, buffered,
 *      and dfile_write_direct, O_DIRECT, the best of 3 each), then the
 *      drain serial (MOOR_SPILL_WRITER=0: encode then write, file after
 *      file) and in its two stages (the writer thread writes a file while
 *      the next is encoded), buffered (MOOR_SPILL_DIRECT=0, the save of
 *      before) and O_DIRECT, and O_DIRECT with the copies on the
 *      daemon's thread (MOOR_SPILL_POOLCOPY=0), the best of 3 each; the
 *      saves' own split is in their log lines ([spill] saved: encoder,
 *      writer, waits, files O_DIRECT). Last the read-back at a new
 *      cache's attach in three ways, the best of 3 each: serial
 *      (MOOR_SPILL_READER=0 MOOR_SPILL_POOLCOPY=0: read, check, decode,
 *      sum and copy file after file), the reader alone (it reads the next
 *      file while this one is checked; MOOR_SPILL_POOLCOPY=0) and the
 *      reader with the copies on the pool (the default), against the
 *      drive's O_DIRECT read; their split is in their log lines ([spill]
 *      read back: reads, waits for the reader, decode, sums, copies).
 * Usage: bench_spill DIR THREADS T MODEL_DIR... (DIR: where the files go,
 * on the drive to measure). MOOR_BENCH_PARTS (default "123") picks the
 * parts that run, e.g. "1" for the codec alone. */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cache.h"
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
	int rc = codec_encode(p, n, e, &en, pool, NULL);
	double t1 = moor_now();
	if (!rc)
		rc = codec_decode(e, en, d, n, pool, NULL);
	double t2 = moor_now();
	if (rc || memcmp(p, d, n))
		die("codec round trip", rc ? rc : MOOR_EFORMAT, what);
	printf("  %-14s %-22s %12llu %12llu %7.1f%% %9.0f %9.0f\n", model, what,
	       (unsigned long long)n, (unsigned long long)en,
	       100.0 * (1.0 - (double)en / (double)n),
	       (double)n / (t1 - t0) / 1e6, (double)n / (t2 - t1) / 1e6);
	free(e);
	free(d);
}

/* Order-0 entropy, in bits a symbol, of n symbols counted in h[k]. */
static double entropy0(const uint64_t *h, uint64_t k, uint64_t n)
{
	double e = 0.0;
	for (uint64_t i = 0; i < k; i++)
		if (h[i]) {
			double p = (double)h[i] / (double)n;
			e -= p * log2(p);
		}
	return e;
}

/* A part of a buffer for entropy_row: a view's rows, a section. */
typedef struct ent_part {
	const uint8_t *p;
	uint64_t n;
} ent_part;

/* Beside the codec's row, what its bytes' order-0 statistics allow: each
 * part apart, as little-endian words of w bytes (2: bf16 rows, 4: fp32
 * states), the entropy of each byte plane (high to low; printed averaged
 * over the parts by their words) and of the word's top 16 bits as one
 * symbol (sign, exponent, high mantissa). A coder of each part's order-0
 * statistics spends the top 16 bits' entropy and the lower planes' a word:
 * the estimate printed. zstd's tables adapt within a part and find
 * repeats, so it can pass the estimate (it is not a bound); the planes say
 * which bits are noise: a plane at 8 bits a byte shrinks under no coder
 * that does not know how the values were computed. */
static void entropy_row(const char *model, const char *what, const ent_part *pt,
			int np, int w)
{
	uint64_t *h16 = malloc(65536 * 8), words = 0;
	double bits = 0.0, pl[4] = {0};
	if (!h16)
		die("oom", -ENOMEM, NULL);
	for (int k = 0; k < np; k++) {
		uint64_t nw = pt[k].n / (uint64_t)w, hb[4][256] = {{0}};
		if (!nw)
			continue;
		memset(h16, 0, 65536 * 8);
		for (uint64_t i = 0; i < nw; i++) {
			const uint8_t *x = pt[k].p + i * (uint64_t)w;
			for (int b = 0; b < w; b++)
				hb[b][x[b]]++;
			h16[(unsigned)x[w - 1] << 8 | x[w - 2]]++;
		}
		double e = entropy0(h16, 65536, nw);
		for (int b = 0; b < w; b++) {
			double eb = entropy0(hb[w - 1 - b], 256, nw);
			pl[b] += eb * (double)nw;
			if (b >= 2)
				e += eb;
		}
		bits += e * (double)nw;
		words += nw;
	}
	printf("  %-14s %-22s order-0 bits a plane (high to low):", model,
	       what);
	for (int b = 0; b < w; b++)
		printf(" %.2f", words ? pl[b] / (double)words : 0.0);
	printf("; coded by its parts' top 16 bits and lower planes: %.1f%% "
	       "saved\n",
	       words ? 100.0 * (1.0 - bits / (8.0 * w * (double)words)) : 0.0);
	free(h16);
}

static void model_rows(const char *dir, int threads, int64_t T, moor_pool *pool)
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
	if (!ids || !lg)
		die("oom", -ENOMEM, NULL);
	/* held-out text where the model dir has some (a trained model's rows
	 * are not a random model's), else random ids */
	char p[600];
	snprintf(p, sizeof p, "%s/bench_ids.i32", dir);
	FILE *f = fopen(p, "rb");
	int text = f != NULL;
	if (!f && errno != ENOENT)
		die("open", -errno, p);
	if (text) {
		size_t got = fread(ids, 4, (size_t)T, f);
		fclose(f);
		if (got != (size_t)T)
			die("bench_ids.i32 holds fewer ids than T", MOOR_ETRUNC,
			    p);
		for (int64_t i = 0; i < T; i++) /* LE file, LE hosts */
			if (ids[i] < 0 || ids[i] >= V)
				die("bench_ids.i32 holds an id outside the "
				    "vocab",
				    MOOR_ERANGE, p);
	} else {
		uint64_t x = 12345;
		for (int64_t i = 0; i < T; i++) {
			x ^= x << 13;
			x ^= x >> 7;
			x ^= x << 17;
			ids[i] = (int32_t)(x % (uint64_t)V);
		}
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
		kern_backend("cpu")->download(q, stb + o1, s.sec[i],
					      y->sec[i].bytes);
		o1 += y->sec[i].bytes;
	}
	const char *name = strrchr(dir, '/') ? strrchr(dir, '/') + 1 : dir;
	codec_row(name, text ? "KV rows, text" : "KV rows, random ids", kvb, kv,
		  pool);
	codec_row(name, text ? "states, text" : "states, random ids", stb, st,
		  pool);
	ent_part *pt = malloc(
	    (size_t)(y->n_views > y->n_sections ? y->n_views : y->n_sections) *
	    sizeof *pt);
	if (!pt)
		die("oom", -ENOMEM, NULL);
	o1 = 0;
	for (int i = 0; i < y->n_views; i++) {
		pt[i] =
		    (ent_part){kvb + o1, y->view[i].row_bytes * (uint64_t)T};
		o1 += pt[i].n;
	}
	entropy_row(name, "KV rows, order-0", pt, y->n_views, 2);
	o1 = 0;
	for (int i = 0; i < y->n_sections; i++) {
		pt[i] = (ent_part){stb + o1, y->sec[i].bytes};
		o1 += pt[i].n;
	}
	entropy_row(name, "states, order-0", pt, y->n_sections, 4);
	free(pt);
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

/* The drive's O_DIRECT rates (part 2), for part 3's ratios: the best of
 * part 2 and of the read measured again after part 3. */
static double drive_w, drive_r;

/* Pieces of `piece` bytes of buf[0, n) to or from fd at the same offsets,
 * by `threads` threads each taking the next piece: that many in flight. */
typedef struct drive_io {
	int fd, wr;
	char *b;
	uint64_t n, piece;
	_Atomic uint64_t next;
} drive_io;

static void *drive_th(void *arg)
{
	drive_io *io = arg;
	for (;;) {
		uint64_t o = atomic_fetch_add(&io->next, io->piece);
		if (o >= io->n)
			break;
		uint64_t k = io->n - o < io->piece ? io->n - o : io->piece;
		ssize_t r = io->wr ? pwrite(io->fd, io->b + o, k, (off_t)o)
				   : pread(io->fd, io->b + o, k, (off_t)o);
		if (r != (ssize_t)k)
			die(io->wr ? "write" : "read", -errno, NULL);
	}
	return NULL;
}

static void drive_io_run(int fd, int wr, void *b, uint64_t n, int threads,
			 uint64_t piece)
{
	drive_io io = {.fd = fd, .wr = wr, .b = b, .n = n, .piece = piece};
	atomic_init(&io.next, 0);
	pthread_t th[16];
	for (int i = 0; i < threads; i++)
		if (pthread_create(&th[i], NULL, drive_th, &io))
			die("thread", -EAGAIN, NULL);
	for (int i = 0; i < threads; i++)
		pthread_join(th[i], NULL);
}

/* The ways part 2 reads and writes the drive: one 64 MiB request at a time
 * (the kernel splits it into many in flight), and four threads of 8 MiB
 * pieces (the disk tier's restore). The drive's rate is the best. */
static const struct {
	int threads;
	uint64_t piece;
} drive_ways[] = {{1, 64ull << 20}, {4, 8ull << 20}};
#define N_WAYS (sizeof drive_ways / sizeof drive_ways[0])

/* The best read of p (n bytes, written), of 3 of each way, in seconds;
 * *way: which. */
static double drive_read(const char *p, void *b, uint64_t n, int direct,
			 int *way)
{
	double best = 1e30;
	for (int rep = 0; rep < 3; rep++)
		for (unsigned w = 0; w < N_WAYS; w++) {
			int fd = open(p, O_RDONLY | (direct ? O_DIRECT : 0));
			if (fd < 0)
				die("open", -errno, p);
			if (!direct)
				posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
			double t0 = moor_now();
			drive_io_run(fd, 0, b, n, drive_ways[w].threads,
				     drive_ways[w].piece);
			double r = moor_now() - t0;
			close(fd);
			if (r < best) {
				best = r;
				*way = (int)w;
			}
		}
	return best;
}

static const char *way_name(int w, char *buf, size_t n)
{
	snprintf(buf, n, "%d x %llu MiB", drive_ways[w].threads,
		 (unsigned long long)(drive_ways[w].piece >> 20));
	return buf;
}

/* n bytes (a multiple of 8) of xorshift from seed: random, so that a
 * drive that compresses reads no constant faster */
static void fill_random(void *b, uint64_t n, uint64_t x)
{
	for (uint64_t i = 0; i < n / 8; i++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		((uint64_t *)b)[i] = x;
	}
}

static void drive(const char *dir, uint64_t mib)
{
	uint64_t n = mib << 20;
	void *b;
	if (posix_memalign(&b, 4096, n))
		die("oom", -ENOMEM, NULL);
	fill_random(b, n, 77);
	char p[600];
	snprintf(p, sizeof p, "%s/bench-odirect", dir);
	/* the best of 3 of each way: the drive's rate, not one run's luck */
	double w_raw = 1e30, r_raw;
	int direct = 1, w_way = 0, r_way = 0;
	for (int rep = 0; rep < 3; rep++)
		for (unsigned w = 0; w < N_WAYS; w++) {
			int fd = open(
			    p, O_WRONLY | O_CREAT | O_TRUNC | O_DIRECT, 0600);
			direct = fd >= 0;
			if (!direct) /* a file system that refuses O_DIRECT
					(tmpfs) */
				fd =
				    open(p, O_WRONLY | O_CREAT | O_TRUNC, 0600);
			if (fd < 0)
				die("open", -errno, p);
			double t0 = moor_now();
			drive_io_run(fd, 1, b, n, drive_ways[w].threads,
				     drive_ways[w].piece);
			if (fdatasync(fd))
				die("fdatasync", -errno, p);
			double t = moor_now() - t0;
			close(fd);
			if (t < w_raw) {
				w_raw = t;
				w_way = (int)w;
			}
		}
	r_raw = drive_read(p, b, n, direct, &r_way);
	unlink(p);

	int dfd = open(dir, O_RDONLY | O_DIRECTORY);
	char err[MOOR_ERRLEN] = "";
	dfile_part part = {b, n};
	double t0 = moor_now();
	int rc = dfile_write(dfd, "bench-tier", &part, 1, 0, err);
	double w_t = moor_now() - t0;
	if (rc)
		die("dfile_write", rc, err);
	/* the written pages out of the page cache: the read is the drive's */
	int tfd = openat(dfd, "bench-tier", O_RDONLY);
	if (tfd >= 0) {
		posix_fadvise(tfd, 0, 0, POSIX_FADV_DONTNEED);
		close(tfd);
	}
	t0 = moor_now();
	rc = dfile_read_at(dfd, "bench-tier", 0, b, n, err);
	double r_t = moor_now() - t0;
	if (rc)
		die("dfile_read_at", rc, err);
	unlinkat(dfd, "bench-tier", 0);
	/* the spill's path: dfile_write_direct, dfile_read_direct (O_DIRECT
	 * where taken) */
	int wd = 0, rd = 0;
	t0 = moor_now();
	rc = dfile_write_direct(dfd, "bench-spill", b, n, 0, &wd, err);
	double wd_t = moor_now() - t0;
	if (rc)
		die("dfile_write_direct", rc, err);
	uint64_t got;
	t0 = moor_now();
	rc = dfile_read_direct(dfd, "bench-spill", b, n, &got, &rd, err);
	double rd_t = moor_now() - t0;
	if (rc || got != n)
		die("dfile_read_direct", rc ? rc : MOOR_ETRUNC, err);
	unlinkat(dfd, "bench-spill", 0);
	close(dfd);
	char wn[32], rn[32];
	printf("drive (%s, %llu MiB, %s; the best of 3 of 1 x 64 MiB and 4 x "
	       "8 MiB requests in flight: write %s, read %s):\n",
	       dir, (unsigned long long)mib,
	       direct ? "O_DIRECT" : "no O_DIRECT here: buffered + fadvise",
	       way_name(w_way, wn, sizeof wn), way_name(r_way, rn, sizeof rn));
	printf("  %-28s %8s %8s\n", "", "write", "read");
	printf("  %-28s %8.2f %8.2f GB/s\n", "the drive (O_DIRECT)",
	       gbps(n, w_raw), gbps(n, r_raw));
	printf("  %-28s %8.2f %8.2f GB/s\n", "dfile, buffered", gbps(n, w_t),
	       gbps(n, r_t));
	printf("  %-28s %8.2f %8.2f GB/s%s\n", "dfile, O_DIRECT (spill)",
	       gbps(n, wd_t), gbps(n, rd_t),
	       wd && rd ? "" : " (refused here: buffered + fadvise)");
	printf("  %-28s %7.0f%% %7.0f%%\n", "buffered / drive",
	       100 * w_raw / w_t, 100 * r_raw / r_t);
	printf("  %-28s %7.0f%% %7.0f%%\n", "O_DIRECT dfile / drive",
	       100 * w_raw / wd_t, 100 * r_raw / rd_t);
	drive_w = gbps(n, w_raw);
	drive_r = gbps(n, r_raw);
	free(b);
}

/* ---- 3. the tiers on a 27B-shaped conversation ---- */

#define T27_ATT 16			   /* attention layers */
#define T27_KV 4			   /* KV heads */
#define T27_HD 256			   /* head dim */
#define T27_GDN 48			   /* delta-rule layers */
#define T27_CONV (2 * 16 * 128 + 48 * 128) /* conv channels */

static void t27_layout(cache_layout *l, uint64_t window)
{
	memset(l, 0, sizeof *l);
	l->n_sections = 2;
	snprintf(l->sec[0].name, CACHE_NAME_MAX, "gdn.S");
	l->sec[0].bytes = (uint64_t)T27_GDN * 48 * 128 * 128 * 4;
	snprintf(l->sec[1].name, CACHE_NAME_MAX, "gdn.conv");
	l->sec[1].layer = 1;
	l->sec[1].bytes = (uint64_t)T27_GDN * T27_CONV * 3 * 4;
	l->n_views = 2;
	for (int i = 0; i < 2; i++) {
		cache_view *v = &l->view[i];
		snprintf(v->name, CACHE_NAME_MAX, i ? "V" : "K");
		v->layer = i;
		v->elt = 2;
		v->ndim = 3;
		v->dims[0] = T27_ATT * T27_KV; /* [layers x heads, T, hd] */
		v->dims[2] = T27_HD;
		v->token_axis = 1;
	}
	l->window = window;
	l->grid = 1024;
	memset(l->fingerprint, 0x27, sizeof l->fingerprint);
}

/* bf16-like (elt 2: a narrow exponent byte, a random one) or fp32-like
 * (elt 4) values: what the codec's byte planes see in real rows. */
static void fill_like(uint8_t *p, uint64_t n, int elt, uint64_t *x)
{
	for (uint64_t i = 0; i + (uint64_t)elt <= n; i += (uint64_t)elt) {
		*x ^= *x << 13;
		*x ^= *x >> 7;
		*x ^= *x << 17;
		uint8_t hi = (uint8_t)(0x3b + (*x >> 40) % 6) |
			     (uint8_t)((*x >> 60) & 1 ? 0x80 : 0);
		if (elt == 2) {
			p[i] = (uint8_t)*x;
			p[i + 1] = hi;
		} else {
			memcpy(p + i, x, 3);
			p[i + 3] = hi;
		}
	}
}

static uint64_t stat_of(cache *c, const char *obj, const char *k)
{
	char *s = cache_stats_json(c);
	json_t *o = json_loads(s, 0, NULL);
	free(s);
	json_t *v = json_object_get(json_object_get(o, obj), k);
	uint64_t r = json_is_integer(v) ? (uint64_t)json_integer_value(v) : 0;
	json_decref(o);
	return r;
}

static double stat_real(cache *c, const char *obj, const char *k)
{
	char *s = cache_stats_json(c);
	json_t *o = json_loads(s, 0, NULL);
	free(s);
	double r =
	    json_number_value(json_object_get(json_object_get(o, obj), k));
	json_decref(o);
	return r;
}

typedef struct t27 {
	cache *c;
	cache_layout *lay;
	cache_hello_out ho;
	double t_commit; /* moor_now() as the last turn's commit began */
	double commit_s; /* and how long it took */
} t27;

static void t27_open(t27 *t, const cache_cfg *cfg, uint64_t window)
{
	char err[MOOR_ERRLEN] = "";
	int rc = cache_new(cfg, &t->c, err);
	if (rc)
		die("cache_new", rc, err);
	t27_layout(t->lay, window);
	if ((rc = cache_hello(t->c, t->lay, &t->ho, err)))
		die("hello", rc, err);
}

/* A turn as an engine runs it, with made-up bytes: the rows [start, n)
 * and every slot's sections written, then 8 generated ids committed. */
static void t27_turn(t27 *t, const int32_t *ids, uint64_t n,
		     const char *session, uint64_t *x, cache_plan_out *p)
{
	char err[MOOR_ERRLEN] = "";
	cache_req r = {.ids = ids, .n = n, .session = session, .max_tokens = 8};
	int rc = cache_plan(t->c, &r, p, err);
	if (rc)
		die("plan", rc, err);
	uint8_t *base = cache_dev_base(t->c);
	const cache_layout *l = t->lay;
	for (uint32_t i = 0; i < l->n_views; i++) {
		uint64_t inner = T27_HD * 2, w = l->window;
		for (uint64_t o = 0; o < (uint64_t)l->view[i].dims[0]; o++)
			fill_like(base + t->ho.view_off[i] +
				      (o * w + p->start) * inner,
				  (n - p->start) * inner, 2, x);
	}
	for (uint32_t j = 0; j < p->n_slots; j++)
		fill_like(base + p->slots[j].offset,
			  cache_layout_section_bytes(l), 4, x);
	for (uint32_t i = 0; i < l->n_sections; i++)
		fill_like(base + t->ho.sec_off[i], l->sec[i].bytes, 4, x);
	int32_t gen[8] = {1, 2, 3, 4, 5, 6, 7, 8};
	t->t_commit = moor_now();
	if ((rc = cache_commit(t->c, p->n_slots, gen, 7)))
		die("commit", rc, NULL);
	t->commit_s = moor_now() - t->t_commit;
}

/* A row of part 3: the tier's drive-side GB/s beside the drive's own
 * (ref) and their ratio. */
static void t27_row(const char *what, uint64_t file_b, uint64_t raw_b, double s,
		    double ref)
{
	printf("  %-36s %9.1f %8.3f %8.2f %8.2f %8.2f %6.0f%%\n", what,
	       (double)file_b / 1048576.0, s, gbps(file_b, s), gbps(raw_b, s),
	       ref, 100 * gbps(file_b, s) / ref);
}

/* The drive's read again (part 2's file and ways), after part 3: a
 * shared drive's rate drifts within a run, and the ratios take the best
 * of the two. */
static double drive_again(const char *dir, uint64_t mib)
{
	uint64_t n = mib << 20;
	void *b;
	if (posix_memalign(&b, 4096, n))
		die("oom", -ENOMEM, NULL);
	fill_random(b, n, 78); /* random bytes, as part 2's */
	char p[600];
	snprintf(p, sizeof p, "%s/bench-odirect", dir);
	int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC | O_DIRECT, 0600),
	    direct = fd >= 0;
	if (!direct)
		fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	if (fd < 0)
		die("open", -errno, p);
	drive_io_run(fd, 1, b, n, 1, 64ull << 20);
	if (fdatasync(fd))
		die("fdatasync", -errno, p);
	close(fd);
	int way;
	double r = drive_read(p, b, n, direct, &way);
	unlink(p);
	free(b);
	return gbps(n, r);
}

/* A view's rows [a, a + r) out of the live buffers into its place in a
 * staged block, a run of r rows an outer index, the runs on the pool (as
 * the save copies them on a host-mapped arena, spill.c's host copies) */
typedef struct run_cp {
	uint8_t *dst;
	const uint8_t *src;
	uint64_t dpitch, spitch, n;
} run_cp;

static void run_task(void *ctx, int q)
{
	const run_cp *j = ctx;
	memcpy(j->dst + (uint64_t)q * j->dpitch,
	       j->src + (uint64_t)q * j->spitch, j->n);
}

/* The session spill's save in its two stages apart, on the bytes a drain
 * of this conversation writes (valid tokens: its blocks of 1,024 rows, and
 * na files of sections): the encoder's alone (each block copied out of the
 * live rows view by view, summed, encoded, each on the pool: what the
 * save's thread does; *codec_s: its codec_encode calls alone), then the
 * writer's alone (the encoded files written with dfile_write, an fdatasync
 * each, and one directory fsync at the end, into DIR/bench-stages), then the
 * files decoded back one after another (*dec_s: the codec_decode calls
 * of a read-back, nothing else). *raw_b: the bytes encoded; *file_b:
 * written. */
static void stages_apart(const char *dir, t27 *t, uint64_t valid, uint64_t na,
			 moor_pool *pool, double *enc_s, double *codec_s,
			 double *dec_s, double *wr_s, double *wrd_s,
			 uint64_t *raw_b, uint64_t *file_b)
{
	const cache_layout *l = t->lay;
	uint64_t rowb = cache_layout_row_bytes(l),
		 secb = cache_layout_section_bytes(l);
	uint64_t nb = (valid + 1023) / 1024, nf = nb + na;
	uint64_t big = 1024 * rowb > secb ? 1024 * rowb : secb;
	uint8_t *stage = malloc(big), *base = cache_dev_base(t->c);
	uint8_t **enc = calloc(nf, sizeof *enc), *dec = malloc(big);
	uint64_t *en = calloc(nf, sizeof *en), *rn = calloc(nf, sizeof *rn);
	if (!stage || !enc || !en || !dec || !rn)
		die("oom", -ENOMEM, NULL);
	codec_ws ws = {0};
	*raw_b = *file_b = 0;
	/* every buffer's pages mapped before the clock starts, as the save's
	 * are (its slots and the codec's planes are kept between saves):
	 * random bytes for the warm-up's encode, which zstd does not shrink,
	 * so that it writes the whole of the codec's scratch (zeros encoded
	 * to a few bytes a frame left it unmapped, and the first block and
	 * the first sections were encoded at a third of the rate of the
	 * others: 590 and 680 MB/s against 1.8 to 1.9 GB/s on 2 threads) */
	memset(stage, 0, big);
	fill_random(stage, big, 79);
	uint64_t cap = dfile_up4k(codec_bound(big));
	for (uint64_t f = 0; f < nf; f++) {
		/* aligned, as the save's slots are (O_DIRECT) */
		if (posix_memalign((void **)&enc[f], DFILE_ALIGN, cap))
			die("oom", -ENOMEM, NULL);
		memset(enc[f], 0, cap);
	}
	memset(dec, 0, big);
	if (codec_encode(stage, big, enc[0], &en[0], pool, &ws) ||
	    codec_decode(enc[0], en[0], dec, big, pool, &ws))
		die("codec", MOOR_EFORMAT, NULL);
	*codec_s = 0;
	double t0 = moor_now();
	for (uint64_t f = 0; f < nf; f++) {
		uint64_t n;
		const uint8_t *src = stage;
		if (f < nb) { /* a block: view by view, [outer, rows, inner] */
			uint64_t a = f * 1024,
				 r = valid - a < 1024 ? valid - a : 1024, o = 0;
			for (uint32_t v = 0; v < l->n_views; v++) {
				/* K and V alike: [64, window, 512 B] */
				uint64_t vb = rowb / l->n_views,
					 inner = T27_HD * 2;
				run_cp j = {
				    stage + o,
				    base + t->ho.view_off[v] + a * inner,
				    r * inner, l->window * inner, r * inner};
				moor_pool_run(pool, T27_ATT * T27_KV, run_task,
					      &j);
				uint64_t s2[2], len = r * vb;
				dfile_sum2_pieces(stage + o, &len, 1, s2, 0,
						  pool);
				o += r * vb;
			}
			n = o;
		} else { /* the live sections stand for each anchor's */
			src = base + t->ho.sec_off[0];
			n = secb;
			uint64_t s2[2 * 2], len[2];
			for (uint32_t i = 0; i < l->n_sections; i++)
				len[i] = l->sec[i].bytes;
			dfile_sum2_pieces(src, len, l->n_sections, s2, 0, pool);
		}
		double c0 = moor_now();
		int rc = codec_encode(src, n, enc[f], &en[f], pool, &ws);
		*codec_s += moor_now() - c0;
		if (rc)
			die("codec", rc, NULL);
		rn[f] = n;
		*raw_b += n;
		*file_b += en[f];
	}
	*enc_s = moor_now() - t0;
	t0 = moor_now();
	for (uint64_t f = 0; f < nf; f++) {
		int rc = codec_decode(enc[f], en[f], dec, rn[f], pool, &ws);
		if (rc)
			die("codec_decode", rc, NULL);
	}
	*dec_s = moor_now() - t0;
	char p[600], err[MOOR_ERRLEN] = "";
	snprintf(p, sizeof p, "%s/bench-stages", dir);
	if (mkdir(p, 0700) && errno != EEXIST)
		die("mkdir", -errno, p);
	int dfd = open(p, O_RDONLY | O_DIRECTORY);
	if (dfd < 0)
		die("open", -errno, p);
	/* O_DIRECT (dfile_write_direct, the spill's) and buffered
	 * (dfile_write, before) in turn, the best of 3 each */
	*wr_s = *wrd_s = 1e30;
	for (int k = 0; k < 6; k++) {
		int direct = !(k & 1);
		t0 = moor_now();
		for (uint64_t f = 0; f < nf; f++) {
			char fn[32];
			snprintf(fn, sizeof fn, "f%llu", (unsigned long long)f);
			dfile_part part = {enc[f], en[f]};
			int rc = direct
				     ? dfile_write_direct(dfd, fn, enc[f],
							  en[f], 1, NULL, err)
				     : dfile_write(dfd, fn, &part, 1, 1, err);
			if (rc)
				die("dfile_write", rc, err);
		}
		int rc = dfile_sync_dir(dfd, err);
		double s = moor_now() - t0;
		if (rc)
			die("fsync", rc, err);
		double *best = direct ? wrd_s : wr_s;
		if (s < *best)
			*best = s;
	}
	close(dfd);
	dfile_rm_rf(AT_FDCWD, p);
	for (uint64_t f = 0; f < nf; f++)
		free(enc[f]);
	free(enc);
	free(en);
	free(rn);
	free(dec);
	free(stage);
	codec_ws_fini(&ws);
}

/* A drain of the resident conversation into an empty spill (so that every
 * block is written), serial (MOOR_SPILL_WRITER=0: the save of before,
 * encode then write, block after block) or through the save's two stages:
 * its seconds, the bytes written and the raw bytes encoded. */
static double drain_once(t27 *t, int serial, int buffered, int mover_cp,
			 uint64_t *file_b, uint64_t *raw_b, uint64_t *files)
{
	char err[MOOR_ERRLEN] = "";
	(void)cache_clear(t->c, "spill");
	uint64_t b0 = stat_of(t->c, "spill", "bytes_written"),
		 r0 = stat_of(t->c, "spill", "codec_raw"),
		 f0 = stat_of(t->c, "spill", "blocks_written") +
		      stat_of(t->c, "spill", "anchors_written");
	if (serial)
		setenv("MOOR_SPILL_WRITER", "0", 1);
	if (buffered)
		setenv("MOOR_SPILL_DIRECT", "0", 1);
	if (mover_cp)
		setenv("MOOR_SPILL_POOLCOPY", "0", 1);
	int rc = cache_drain(t->c, err);
	unsetenv("MOOR_SPILL_WRITER");
	unsetenv("MOOR_SPILL_DIRECT");
	unsetenv("MOOR_SPILL_POOLCOPY");
	if (rc)
		die("drain", rc, err);
	*file_b = stat_of(t->c, "spill", "bytes_written") - b0;
	*raw_b = stat_of(t->c, "spill", "codec_raw") - r0;
	*files = stat_of(t->c, "spill", "blocks_written") +
		 stat_of(t->c, "spill", "anchors_written") - f0;
	return stat_real(t->c, "spill", "last_save_ms") / 1e3;
}

static void tiers(const char *dir, int threads, moor_pool *pool)
{
	uint64_t H = getenv("MOOR_BENCH_HEAD")
			 ? strtoull(getenv("MOOR_BENCH_HEAD"), NULL, 10)
			 : 4096;
	H = H < 1024 ? 1024 : H / 1024 * 1024;
	uint64_t n1 = H + 64, n2 = H + 128, window = H + 512;
	cache_cfg cfg;
	cache_cfg_defaults(&cfg);
	snprintf(cfg.arena_prefix, sizeof cfg.arena_prefix, "moor-bsp-%d",
		 (int)getpid());
	cache_layout lay;
	t27_layout(&lay, window);
	uint64_t secb = cache_layout_section_bytes(&lay),
		 rowb = cache_layout_row_bytes(&lay);
	/* live rows and sections, an anchor per grid line, the end anchor */
	cfg.device_bytes = window * rowb + (H / 1024 + 4) * (secb + (1 << 20));
	cfg.host_bytes = 64ull << 20;
	cfg.mem_ceiling = cfg.mem_peak = 1ull << 40;
	cfg.resident_bytes = (H / 1024 + 1) * (secb + (1 << 20));
	cfg.store_bytes = 0;
	cfg.store_sessions = 0;
	cfg.disk_min_free = 0;
	cfg.disk_min_tokens = 1024;
	/* no engine measures a prefill rate here: a slow one, so that the
	 * disk tier's read always beats it (a loaded machine's first restore
	 * can measure a read rate that loses to 740 tokens a second) */
	cfg.prefill_tps = 50;
	cfg.codec_threads = (uint32_t)(threads > 0 ? threads : 1);
	snprintf(cfg.spill_dir, sizeof cfg.spill_dir, "%s/bench-tiers-%d", dir,
		 (int)getpid());
	int32_t *ids = malloc(n2 * sizeof *ids);
	for (uint64_t i = 0; i < n2; i++)
		ids[i] = (int32_t)(i * 7919 % 150000);
	uint64_t x = 99;
	t27 t = {.lay = &lay};
	cache_plan_out *p = malloc(sizeof *p);
	if (!p)
		die("oom", -ENOMEM, NULL);

	/* the disk tier: session A's first long request writes its head */
	t27_open(&t, &cfg, window);
	t27_turn(&t, ids, n1, "A", &x, p);
	cache_disk_wait(t.c);
	/* from the commit (which stages the anchors and queues the job; the
	 * writer runs meanwhile) to the last file: the first of a process
	 * (every page fresh), then another session's head in the same cache
	 * (B: another prompt of the same length), the steady state */
	double w_s = moor_now() - t.t_commit, commit_s = t.commit_s, t0;
	uint64_t w_b = stat_of(t.c, "disk", "bytes_written");
	int32_t *idb = malloc(n1 * sizeof *idb);
	if (!idb)
		die("oom", -ENOMEM, NULL);
	for (uint64_t i = 0; i < n1; i++)
		idb[i] = (int32_t)(i * 104729 % 150000 + 1);
	t27_turn(&t, idb, n1, "B", &x, p);
	cache_disk_wait(t.c);
	double w2_s = moor_now() - t.t_commit, commit2_s = t.commit_s;
	uint64_t w2_b = stat_of(t.c, "disk", "bytes_written") - w_b;
	free(idb);
	cache_free(t.c);

	/* a kill -9 of cached: a new cache, no drain; session C shares the
	 * head and resumes from the disk */
	t27_open(&t, &cfg, window);
	ids[n1] = 4242; /* C parts from A after the head */
	t0 = moor_now();
	t27_turn(&t, ids, n2, "C", &x, p);
	uint64_t r_b = stat_of(t.c, "disk", "bytes_read");
	double r_s = stat_real(t.c, "disk", "last_restore_ms") / 1e3;
	if (p->tier != CACHE_TIER_DISK || !r_b || r_s <= 0)
		die("the disk tier did not serve the head", MOOR_ERANGE,
		    cache_tier_name(p->tier));
	uint64_t start = p->start;
	/* again into pages the first restore touched (a cached that has
	 * served: the live buffers and an anchor's block are mapped), after
	 * the RAM caches are emptied; the best of 3 (sessions D, E, F) */
	uint64_t r2_b = 0;
	double r2_s = 1e30;
	for (int i = 0; i < 3; i++) {
		uint64_t b0 = stat_of(t.c, "disk", "bytes_read");
		(void)cache_clear(t.c, "ram");
		ids[n1] = 4343 + i;
		const char *sn[] = {"D", "E", "F"};
		t27_turn(&t, ids, n2, sn[i], &x, p);
		uint64_t b = stat_of(t.c, "disk", "bytes_read") - b0;
		double sec = stat_real(t.c, "disk", "last_restore_ms") / 1e3;
		if (p->tier != CACHE_TIER_DISK || !b)
			die("the disk tier did not serve the head again",
			    MOOR_ERANGE, cache_tier_name(p->tier));
		if (sec < r2_s) {
			r2_s = sec;
			r2_b = b;
		}
	}

	/* the drain (a planned stop) and the read-back at the next attach:
	 * the save's two stages apart (the encoder's work alone, the
	 * writer's alone), then the drain serial and through the stages,
	 * three times each in turn (a drive's rate drifts: the best of each);
	 * the last drain's entry is read back */
	uint64_t valid = stat_of(t.c, "resident", "tokens");
	uint64_t sw_b = 0, sw_raw = 0, sw_files = 0, se_b = 0, se_raw = 0,
		 se_files = 0, st_raw = 0, st_b = 0;
	double sw_s = 1e30, se_s = 1e30, sb_s = 1e30, enc_s = 0, wr_s = 0,
	       cenc_s = 0, cdec_s = 0, wrd_s = 0;
	uint64_t sb_b = 0, sb_raw = 0, sm_b = 0, sm_raw = 0;
	double sm_s = 1e30;
	{
		uint64_t fb, rb, nf;
		/* a drain first, for the count of files it writes (and the
		 * pages every later one finds mapped) */
		(void)drain_once(&t, 0, 0, 0, &fb, &rb, &nf);
		uint64_t nb = (valid + 1023) / 1024;
		stages_apart(dir, &t, valid, nf > nb ? nf - nb : 0, pool,
			     &enc_s, &cenc_s, &cdec_s, &wr_s, &wrd_s, &st_raw,
			     &st_b);
		for (int rep = 0; rep < 3; rep++)
			for (int serial = 3; serial >= 0; serial--) {
				/* 3: two stages, O_DIRECT, the mover's copies
				 * (MOOR_SPILL_POOLCOPY=0); 2: two stages,
				 * buffered (MOOR_SPILL_DIRECT=0); 1: serial;
				 * 0: two stages, O_DIRECT */
				double s =
				    drain_once(&t, serial == 1, serial == 2,
					       serial == 3, &fb, &rb, &nf);
				if (serial == 3 && s < sm_s) {
					sm_s = s;
					sm_b = fb;
					sm_raw = rb;
				} else if (serial == 2 && s < sb_s) {
					sb_s = s;
					sb_b = fb;
					sb_raw = rb;
				} else if (serial == 1 && s < se_s) {
					se_s = s;
					se_b = fb;
					se_raw = rb;
					se_files = nf;
				} else if (!serial && s < sw_s) {
					sw_s = s;
					sw_b = fb;
					sw_raw = rb;
					sw_files = nf;
				}
			}
	}
	cache_free(t.c);
	/* the read-back at the next attach (a new cache: the live buffers,
	 * the staging buffer and the codec's fresh, as a new cached's) in
	 * three ways, in turn, the best of 3 each: serial
	 * (MOOR_SPILL_READER=0 and MOOR_SPILL_POOLCOPY=0: each file read,
	 * then checked, decoded, summed and copied by the mover, one after
	 * another), the reader alone (it reads the next file while this one
	 * is checked; MOOR_SPILL_POOLCOPY=0) and the reader with the copies
	 * on the pool (the default); a drain after each puts the entry back
	 * as the resident one (its files unchanged: the manifest alone
	 * written) */
	uint64_t rb_b[3] = {0, 0, 0}, resident = 0;
	double rb_s[3] = {1e30, 1e30, 1e30}, back_s = 0;
	for (int rep = 0; rep < 3; rep++)
		for (int way = 0; way < 3; way++) {
			if (way == 0)
				setenv("MOOR_SPILL_READER", "0", 1);
			if (way < 2)
				setenv("MOOR_SPILL_POOLCOPY", "0", 1);
			t0 = moor_now();
			t27_open(&t, &cfg, window);
			double b = moor_now() - t0;
			unsetenv("MOOR_SPILL_READER");
			unsetenv("MOOR_SPILL_POOLCOPY");
			uint64_t rb = stat_of(t.c, "spill", "bytes_read");
			double s =
			    stat_real(t.c, "spill", "last_restore_ms") / 1e3;
			if (!t.ho.resident_len || !rb)
				die("the spill read nothing back", MOOR_ERANGE,
				    NULL);
			resident = t.ho.resident_len;
			if (s < rb_s[way]) {
				rb_s[way] = s;
				rb_b[way] = rb;
				if (way == 2)
					back_s = b;
			}
			char err[MOOR_ERRLEN] = "";
			int rc = cache_drain(t.c, err);
			if (rc)
				die("drain", rc, err);
			cache_free(t.c);
		}
	uint64_t sr_raw = sw_raw; /* the entry the drain wrote, read whole */
	printf("the tiers (%s), a 27B-shaped conversation: %.1f MiB of rows "
	       "a 1,024-token chunk, %.1f MiB of sections; head %llu\n",
	       cfg.spill_dir, (double)(1024 * rowb) / 1048576.0,
	       (double)secb / 1048576.0, (unsigned long long)H);
	double again = drive_again(dir, 512);
	printf("  (the drive's read again after the tiers: %.2f GB/s, before "
	       "%.2f; the read ratios take the best)\n",
	       again, drive_r);
	if (again > drive_r)
		drive_r = again;
	printf("  %-36s %9s %8s %8s %8s %8s %7s\n", "", "MiB file", "s", "GB/s",
	       "raw GB/s", "drive", "/drive");
	t27_row("disk tier: write (first)", w_b, w_b, w_s, drive_w);
	t27_row("disk tier: write (next)", w2_b, w2_b, w2_s, drive_w);
	printf("    (from the commit to the last file; the commits themselves, "
	       "the anchors staged: %.3f s and %.3f s)\n",
	       commit_s, commit2_s);
	t27_row("disk tier: restore (new cached)", r_b, r_b, r_s, drive_r);
	t27_row("disk tier: restore (warm, best of 3)", r2_b, r2_b, r2_s,
		drive_r);
	printf("    (resumed at %llu of %llu)\n", (unsigned long long)start,
	       (unsigned long long)n2);
	t27_row("spill: encoder alone", st_b, st_raw, enc_s, drive_w);
	t27_row("spill: codec alone, encode", st_b, st_raw, cenc_s, drive_w);
	t27_row("spill: codec alone, decode", st_b, st_raw, cdec_s, drive_r);
	printf(
	    "    (the codec's calls of the encoder alone, and the same files "
	    "decoded back one after another: zstd 1 in %llu KiB frames on "
	    "%d threads; the encoder's rest, copies and sums on the pool: "
	    "%.3f s)\n",
	    (unsigned long long)(CODEC_FRAME >> 10), threads, enc_s - cenc_s);
	t27_row("spill: writer alone, buffered", st_b, st_raw, wr_s, drive_w);
	t27_row("spill: writer alone, O_DIRECT", st_b, st_raw, wrd_s, drive_w);
	t27_row("spill: drain, serial (O_DIRECT)", se_b, se_raw, se_s, drive_w);
	t27_row("spill: drain, two stages, buffered", sb_b, sb_raw, sb_s,
		drive_w);
	t27_row("spill: drain, two stages, O_DIRECT", sw_b, sw_raw, sw_s,
		drive_w);
	t27_row("spill: drain, the same, mover's copies", sm_b, sm_raw, sm_s,
		drive_w);
	printf("    (the encoder: copies, sums, codec on %d threads; the "
	       "writer: the encoded files by dfile_write (buffered) and "
	       "dfile_write_direct (O_DIRECT), the best of 3 each; the "
	       "drains: the best of 3 each, %llu files each (%llu serial), "
	       "buffered: MOOR_SPILL_DIRECT=0; the stages one after the "
	       "other would take %.3f s, overlapped at best the slower, "
	       "%.3f s; serial / two stages: %.2fx; buffered / O_DIRECT "
	       "drain: %.2fx; the mover's copies (MOOR_SPILL_POOLCOPY=0) / "
	       "the pool's: %.2fx)\n",
	       threads, (unsigned long long)sw_files,
	       (unsigned long long)se_files, enc_s + wrd_s,
	       enc_s > wrd_s ? enc_s : wrd_s, se_s / sw_s, sb_s / sw_s,
	       sm_s / sw_s);
	t27_row("spill: read-back, serial", rb_b[0], sr_raw, rb_s[0], drive_r);
	t27_row("spill: read-back, reader", rb_b[1], sr_raw, rb_s[1], drive_r);
	t27_row("spill: read-back, reader + pool copies", rb_b[2], sr_raw,
		rb_s[2], drive_r);
	printf("    (%llu tokens back, codec on, the best of 3 each; the "
	       "codec saved %.1f%% of the spill's bytes; serial / reader + "
	       "pool copies: %.2fx; the attach took %.3f s; the split of "
	       "each in its log line, [spill] read back: reads, waits, "
	       "decode, sums, copies)\n",
	       (unsigned long long)resident,
	       sw_raw ? 100.0 * (1.0 - (double)sw_b / (double)sw_raw) : 0.0,
	       rb_s[0] / rb_s[2], back_s);
	dfile_rm_rf(AT_FDCWD, cfg.spill_dir);
	free(p);
	free(ids);
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
	const char *parts = getenv("MOOR_BENCH_PARTS");
	if (!parts)
		parts = "123";
	if (strchr(parts, '1')) {
		printf("codec: byte planes + zstd 1 in %llu KiB frames, %d "
		       "thread(s), a prefill of %lld tokens (bench_ids.i32's "
		       "text where the model has one, else random ids)\n",
		       (unsigned long long)(CODEC_FRAME >> 10), threads,
		       (long long)T);
		printf("  %-14s %-22s %12s %12s %8s %9s %9s\n", "model", "what",
		       "bytes", "encoded", "saved", "enc MB/s", "dec MB/s");
		for (int i = 4; i < argc; i++)
			model_rows(argv[i], threads, T, pool);
		fflush(stdout);
	}
	if (strchr(parts, '2')) {
		drive(argv[1], 512);
		fflush(stdout);
	}
	if (strchr(parts, '3'))
		tiers(argv[1], threads, pool);
	moor_pool_free(pool);
	return 0;
}
