/* bench_restore: how fast a resume's bytes move, through the ops.h vtable
 * alone (no backend's own code here), on whichever backend runs it.
 *
 *   bench_restore [--backend auto|cpu|cuda] [--sizes MIB,...] [--pieces N]
 *                 [--reps N] [--mm T,N,K] [--mm-reps N]
 *
 * Part 1, a table of GB/s for each size (MiB; default 1,16,144 on the CPU,
 * 16,144,1024,4096 on a device: the 27B's sections are 144 MiB, its KV rows
 * 64 KiB a token, 1 GiB at 16k):
 *
 *   restore shm -> dev    the host arena as cached maps it (a POSIX shm
 *                         object; on CUDA pageable unless the mover
 *                         registered it) into the device arena: the park's
 *                         and the pin's restore, upload() on the copy queue
 *                         and sync()
 *   restore pin -> dev    the same from host_alloc() memory (CUDA: pinned,
 *                         the rate of the registered host arena; the row is
 *                         absent on a backend without host_alloc)
 *   restore N pieces      shm -> dev in --pieces uploads of size / N (the
 *                         27B's 48 GDN sections of 3 MiB each at 144 MiB),
 *                         one sync: what a per-section restore costs
 *   save dev -> shm       the other way (a park, a pin), download()
 *   save dev -> pin       from the device into host_alloc() memory
 *   anchor dev -> dev     copy() within the device arena (an anchor slot)
 *
 * The device arena is what the engine computes into: on a host-memory
 * backend (the CPU) a shm object imported with import_ipc(), as engined
 * maps cached's; elsewhere alloc() (cached's cudaMalloc, which the engine
 * imports by IPC handle, is the same kind of memory). Each figure is the
 * best of --reps (default 5) runs: the machine is shared. Each path's
 * bytes are checked once against the source (memcmp on the host).
 *
 * Part 2, the anchor copy per grid line against compute: the sections of a
 * line (--sizes' largest that is at most 144 MiB) copied into an anchor
 * slot on the copy queue while the compute queue runs the next chunk
 * (--mm-reps matmuls of T x K by N x K bf16; default 1024,17408,5120 x 16
 * on a device, 64,768,256 x 64 on the CPU). Reports compute alone (C),
 * copy alone (X), both with the copy ordered after the first half of the
 * compute by an event (B), and the share of the copy hidden, (C + X - B) /
 * X. A backend with one queue for both kinds (the CPU) runs them in order:
 * nothing is hidden, and the line says so. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "moor.h"
#include "ops.h"

#define MIB ((size_t)1 << 20)
#define MAX_SIZES 16

static const kern_ops *O;
static kern_ctx *C;
static kern_queue *QC, *QX; /* compute, copy */

#define CK(call)                                                               \
	do {                                                                   \
		int rc_ = (call);                                              \
		if (rc_) {                                                     \
			fprintf(stderr, "bench_restore: %s:%d: %s: %s\n",      \
				__FILE__, __LINE__, #call,                     \
				moor_strerror(rc_));                           \
			exit(1);                                               \
		}                                                              \
	} while (0)

/* ---- memory ---- */

/* A shm object of n bytes mapped shared, its name kept for import_ipc
 * (unlinked by shm_done). Pages touched (a restore reads a filled arena). */
typedef struct shm_buf {
	char name[KERN_IPC_NAME_MAX];
	void *p;
	size_t n;
} shm_buf;

static int shm_make(shm_buf *b, const char *tag, size_t n)
{
	snprintf(b->name, sizeof b->name, "/moor-bench-restore-%d-%s",
		 (int)getpid(), tag);
	b->n = n;
	int fd = shm_open(b->name, O_CREAT | O_EXCL | O_RDWR, 0600);
	if (fd < 0)
		return -errno;
	if (ftruncate(fd, (off_t)n)) {
		int e = -errno;
		close(fd);
		shm_unlink(b->name);
		return e;
	}
	b->p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	int e = errno;
	close(fd);
	if (b->p == MAP_FAILED) {
		b->p = NULL;
		shm_unlink(b->name);
		return -e;
	}
	return 0;
}

static void shm_done(shm_buf *b)
{
	if (b->p) {
		munmap(b->p, b->n);
		shm_unlink(b->name);
	}
	b->p = NULL;
}

static void fill(void *p, size_t n, uint64_t seed)
{
	uint64_t *w = p, x = seed | 1;
	for (size_t i = 0; i < n / 8; i++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		w[i] = x;
	}
	memset((char *)p + n / 8 * 8, 0x5a, n % 8);
}

/* The device arena: shm imported on a host-memory backend, else alloc(). */
typedef struct dev_buf {
	shm_buf shm;
	void *p;
	int imported;
} dev_buf;

static void dev_make(dev_buf *d, const char *tag, size_t n)
{
	memset(d, 0, sizeof *d);
	if (O->caps & KERN_CAP_HOST_MEMORY) {
		CK(shm_make(&d->shm, tag, n));
		kern_ipc h = {.kind = KERN_IPC_SHM, .size = n};
		memcpy(h.name, d->shm.name, sizeof h.name);
		char err[MOOR_ERRLEN] = "";
		int rc = O->import_ipc(C, &h, &d->p, err);
		if (rc) {
			fprintf(stderr, "bench_restore: import_ipc: %s\n", err);
			exit(1);
		}
		d->imported = 1;
		/* the arena's pages exist before a restore writes them */
		memset(d->shm.p, 0, n);
		return;
	}
	CK(O->alloc(C, n, &d->p));
	CK(O->zero(QX, d->p, n));
	CK(O->sync(QX));
}

static void dev_done(dev_buf *d)
{
	if (d->imported)
		O->unimport(C, d->p);
	else
		O->free(C, d->p);
	shm_done(&d->shm);
	d->p = NULL;
}

/* ---- part 1 ---- */

enum path {
	P_SHM_DEV,
	P_PIN_DEV,
	P_PIECES,
	P_DEV_SHM,
	P_DEV_PIN,
	P_DEV_DEV,
	NPATH
};

static const char *const path_name[NPATH] = {
    "restore shm -> dev", "restore pin -> dev", "restore in pieces",
    "save dev -> shm",	  "save dev -> pin",	"anchor dev -> dev"};

struct bufs {
	shm_buf hs;	/* host arena (source of restores, target of saves) */
	void *pin;	/* host_alloc, or NULL */
	dev_buf d, d2;	/* device arena: live sequence, anchor slot */
	uint8_t *check; /* host buffer the checks download into */
};

/* One run of a path over n bytes; returns seconds. */
static double run_path(struct bufs *b, int path, size_t n, int pieces)
{
	double t0 = moor_now();
	switch (path) {
	case P_SHM_DEV:
		CK(O->upload(QX, b->d.p, b->hs.p, n));
		CK(O->sync(QX));
		break;
	case P_PIN_DEV:
		CK(O->upload(QX, b->d.p, b->pin, n));
		CK(O->sync(QX));
		break;
	case P_PIECES: {
		size_t per = n / (size_t)pieces;
		for (int i = 0; i < pieces; i++) {
			size_t off = (size_t)i * per;
			size_t len = i == pieces - 1 ? n - off : per;
			CK(O->upload(QX, kern_at(b->d.p, off),
				     (const char *)b->hs.p + off, len));
		}
		CK(O->sync(QX));
		break;
	}
	case P_DEV_SHM:
		CK(O->download(QX, b->hs.p, b->d.p, n));
		break;
	case P_DEV_PIN:
		CK(O->download(QX, b->pin, b->d.p, n));
		break;
	case P_DEV_DEV:
		CK(O->copy(QX, b->d2.p, b->d.p, n));
		CK(O->sync(QX));
		break;
	}
	return moor_now() - t0;
}

/* The bytes a path moved equal its source's: 0 when they do. */
static int check_path(struct bufs *b, int path, size_t n, const void *want)
{
	const void *got = NULL;
	switch (path) {
	case P_SHM_DEV:
	case P_PIN_DEV:
	case P_PIECES:
		CK(O->download(QX, b->check, b->d.p, n));
		got = b->check;
		break;
	case P_DEV_SHM:
		got = b->hs.p;
		break;
	case P_DEV_PIN:
		got = b->pin;
		break;
	case P_DEV_DEV:
		CK(O->download(QX, b->check, b->d2.p, n));
		got = b->check;
		break;
	}
	return memcmp(got, want, n) != 0;
}

static int part1(const size_t *sizes, int ns, int pieces, int reps)
{
	size_t maxn = 0;
	for (int i = 0; i < ns; i++)
		maxn = sizes[i] > maxn ? sizes[i] : maxn;
	struct bufs b = {0};
	CK(shm_make(&b.hs, "host", maxn));
	if (O->host_alloc)
		CK(O->host_alloc(C, maxn, &b.pin));
	dev_make(&b.d, "dev", maxn);
	dev_make(&b.d2, "slot", maxn);
	uint8_t *ref = malloc(maxn);
	b.check = malloc(maxn);
	if (!ref || !b.check) {
		fprintf(stderr, "bench_restore: out of memory (%zu MiB)\n",
			maxn / MIB);
		return 1;
	}
	printf("%-20s", "path \\ MiB");
	for (int i = 0; i < ns; i++)
		printf(" %10zu", sizes[i] / MIB);
	printf("   (GB/s, best of %d)\n", reps);
	int bad = 0;
	double best_pin = 0;
	for (int path = 0; path < NPATH; path++) {
		if ((path == P_PIN_DEV || path == P_DEV_PIN) && !b.pin)
			continue;
		if (path == P_PIECES)
			printf("restore %-3d pieces  ", pieces);
		else
			printf("%-20s", path_name[path]);
		for (int i = 0; i < ns; i++) {
			size_t n = sizes[i];
			/* the source of this path, filled afresh */
			uint64_t seed =
			    0x9e3779b97f4a7c15ull * (uint64_t)(path + 1) + n;
			fill(ref, n, seed);
			switch (path) {
			case P_SHM_DEV:
			case P_PIECES:
				memcpy(b.hs.p, ref, n);
				break;
			case P_PIN_DEV:
				memcpy(b.pin, ref, n);
				break;
			default: /* the device holds the source */
				CK(O->upload(QX, b.d.p, ref, n));
				CK(O->sync(QX));
			}
			double best = 1e30;
			for (int r = 0; r < reps; r++) {
				double t = run_path(&b, path, n, pieces);
				best = t < best ? t : best;
				if (r == 0 && check_path(&b, path, n, ref)) {
					fprintf(stderr,
						"bench_restore: %s of %zu MiB: "
						"the bytes differ from the "
						"source\n",
						path_name[path], n / MIB);
					bad = 1;
				}
			}
			double gbs = (double)n / best / 1e9;
			if (path == P_PIN_DEV && gbs > best_pin)
				best_pin = gbs;
			printf(" %10.2f", gbs);
			fflush(stdout);
		}
		printf("\n");
	}
	if (b.pin)
		printf("restore from the pinned host arena: best %.1f GB/s "
		       "(goal >= 50, PCIe measured 55: x%.2f of the goal)\n",
		       best_pin, best_pin / 50.0);
	else
		printf("no host_alloc on this backend: the host arena is the "
		       "device's own memory kind (restores are memcpy)\n");
	free(ref);
	free(b.check);
	dev_done(&b.d);
	dev_done(&b.d2);
	if (b.pin)
		O->host_free(C, b.pin);
	shm_done(&b.hs);
	return bad;
}

/* ---- part 2 ---- */

struct mm {
	int T, N, K, reps;
	void *x, *w, *y;
};

static void mm_enqueue(const struct mm *m, int from, int to)
{
	for (int i = from; i < to; i++)
		CK(O->matmul(QC, m->y, m->N, m->x, m->K, m->w, KERN_BF16, m->T,
			     m->N, m->K, KERN_ACT_BF16));
}

static int part2(size_t n, struct mm *m, int reps)
{
	kern_limits lim = {.rows = m->T,
			   .width = m->K > m->N ? m->K : m->N,
			   .window = 1,
			   .q_heads = 1,
			   .head_dim = 1,
			   .vocab = 1};
	if (O->reserve)
		CK(O->reserve(C, &lim));
	CK(O->alloc(C, (size_t)m->T * m->K * 4, &m->x));
	CK(O->alloc(C, (size_t)m->N * m->K * 2, &m->w));
	CK(O->alloc(C, (size_t)m->T * m->N * 4, &m->y));
	CK(O->fill_random(QC, m->x, KERN_F32, (size_t)m->T * m->K, 1, -1, 1));
	CK(O->fill_random(QC, m->w, KERN_BF16, (size_t)m->N * m->K, 2, -0.05f,
			  0.05f));
	CK(O->sync(QC));
	dev_buf live, slot;
	dev_make(&live, "line", n);
	dev_make(&slot, "anchor", n);
	kern_event *ev;
	CK(O->event_new(C, &ev));
	mm_enqueue(m, 0, 1); /* warm (a first GEMM may pick its plan) */
	CK(O->sync(QC));

	double tc = 1e30, tx = 1e30, tb = 1e30;
	for (int r = 0; r < reps; r++) {
		double t0 = moor_now();
		mm_enqueue(m, 0, m->reps);
		CK(O->sync(QC));
		double t1 = moor_now();
		CK(O->copy(QX, slot.p, live.p, n));
		CK(O->sync(QX));
		double t2 = moor_now();
		/* the line's state is final after the first half: the copy
		 * waits for it there, the second half runs on */
		mm_enqueue(m, 0, m->reps / 2);
		CK(O->record(QC, ev));
		CK(O->wait(QX, ev));
		CK(O->copy(QX, slot.p, live.p, n));
		mm_enqueue(m, m->reps / 2, m->reps);
		CK(O->sync(QX));
		CK(O->sync(QC));
		double t3 = moor_now();
		tc = t1 - t0 < tc ? t1 - t0 : tc;
		tx = t2 - t1 < tx ? t2 - t1 : tx;
		tb = t3 - t2 < tb ? t3 - t2 : tb;
	}
	double hidden = (tc + tx - tb) / tx;
	hidden = hidden < 0 ? 0 : hidden > 1 ? 1 : hidden;
	printf("\nanchor copy per grid line: %zu MiB of sections into an "
	       "anchor slot, the next chunk %d matmuls of %dx%d by %dx%d "
	       "bf16\n",
	       n / MIB, m->reps, m->T, m->K, m->N, m->K);
	printf("%-34s %10s\n", "", "ms");
	printf("%-34s %10.3f\n", "compute alone (C)", 1e3 * tc);
	printf("%-34s %10.3f   (%.2f GB/s)\n", "copy alone (X)", 1e3 * tx,
	       (double)n / tx / 1e9);
	printf("%-34s %10.3f\n", "both, copy after half (B)", 1e3 * tb);
	if (QC == QX)
		printf("hidden (C + X - B) / X: one queue on this backend: the "
		       "copy runs in order with compute, none of it hidden "
		       "(measured %.0f%%)\n",
		       100 * hidden);
	else
		printf("hidden (C + X - B) / X: %.0f%% of the copy (goal: all "
		       "of it under the next chunk's compute)\n",
		       100 * hidden);
	O->event_free(C, ev);
	dev_done(&live);
	dev_done(&slot);
	O->free(C, m->x);
	O->free(C, m->w);
	O->free(C, m->y);
	return 0;
}

/* ---- main ---- */

static int parse_list(const char *s, long *out, int max)
{
	int n = 0;
	while (*s && n < max) {
		char *end;
		long v = strtol(s, &end, 10);
		if (end == s || v <= 0)
			return -1;
		out[n++] = v;
		s = *end == ',' ? end + 1 : end;
		if (*end && *end != ',')
			return -1;
	}
	return *s ? -1 : n;
}

static int usage(const char *argv0)
{
	fprintf(stderr,
		"usage: %s [--backend auto|cpu|cuda] [--sizes MIB,...] "
		"[--pieces N] [--reps N] [--mm T,N,K] [--mm-reps N]\n",
		argv0);
	return 2;
}

int main(int argc, char **argv)
{
	const char *backend = "auto";
	long sz[MAX_SIZES], mmv[3] = {0};
	int ns = 0, pieces = 48, reps = 5, mm_reps = 0, have_mm = 0;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (!v)
			return usage(argv[0]);
		if (!strcmp(a, "--backend"))
			backend = v;
		else if (!strcmp(a, "--sizes")) {
			if ((ns = parse_list(v, sz, MAX_SIZES)) <= 0)
				return usage(argv[0]);
		} else if (!strcmp(a, "--pieces"))
			pieces = atoi(v);
		else if (!strcmp(a, "--reps"))
			reps = atoi(v);
		else if (!strcmp(a, "--mm")) {
			if (parse_list(v, mmv, 3) != 3)
				return usage(argv[0]);
			have_mm = 1;
		} else if (!strcmp(a, "--mm-reps"))
			mm_reps = atoi(v);
		else
			return usage(argv[0]);
		i++;
	}
	if (pieces < 1 || reps < 1 || mm_reps < 0)
		return usage(argv[0]);
	char why[MOOR_ERRLEN] = "";
	O = !strcmp(backend, "auto") ? kern_backend_auto(0, why)
				     : kern_backend(backend);
	if (!O) {
		fprintf(stderr,
			"bench_restore: no backend '%s' in this build\n",
			backend);
		return 1;
	}
	kern_config kc = {.threads = 2, .device = 0};
	CK(O->create(&kc, &C));
	QC = O->queue(C, KERN_Q_COMPUTE);
	QX = O->queue(C, KERN_Q_COPY);
	char desc[256];
	O->describe(C, desc, sizeof desc);
	printf("bench_restore: %s%s%s; %s\n", desc, why[0] ? "; " : "", why,
	       QC == QX ? "one queue for compute and copies"
			: "a compute queue and a copy queue");

	int dev = !(O->caps & KERN_CAP_HOST_MEMORY);
	if (!ns) {
		const long dflt[2][4] = {{1, 16, 144}, {16, 144, 1024, 4096}};
		ns = dev ? 4 : 3;
		memcpy(sz, dflt[dev], sizeof dflt[dev]);
	}
	size_t sizes[MAX_SIZES], line = 0;
	for (int i = 0; i < ns; i++) {
		sizes[i] = (size_t)sz[i] * MIB;
		if (sizes[i] <= 144 * MIB && sizes[i] > line)
			line = sizes[i];
	}
	if (!line)
		line = sizes[0];
	struct mm m = {.T = dev ? 1024 : 64,
		       .N = dev ? 17408 : 768,
		       .K = dev ? 5120 : 256,
		       .reps = dev ? 16 : 64};
	if (have_mm) {
		m.T = (int)mmv[0];
		m.N = (int)mmv[1];
		m.K = (int)mmv[2];
	}
	if (mm_reps)
		m.reps = mm_reps;
	if (m.reps < 2)
		m.reps = 2;

	int rc = part1(sizes, ns, pieces, reps);
	rc |= part2(line, &m, reps);
	O->destroy(C);
	return rc;
}
