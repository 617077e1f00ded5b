/* wload.c: the checkpoint reader of wload.h: blocks read by threads into
 * staging slots, uploaded in order while the next ones are read. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "moor.h"
#include "wload.h"

#define ALIGN 4096u
/* A hole between two tensors of a file up to this is read through rather
 * than starting a new block. */
#define GAP (1u << 20)

typedef struct req {
	void *dst;
	const char *file;
	const uint8_t *map; /* the file's mapping (t->data - t->offset) */
	uint64_t off, n;
} req;

/* The bytes of one request that one block carries. */
typedef struct seg {
	uint32_t req;
	uint64_t at; /* offset into the request (dst) */
	uint64_t n;
	uint64_t in; /* offset into the block */
} seg;

typedef struct blk {
	int file;
	uint64_t start; /* file offset, ALIGN-aligned */
	uint64_t need;	/* bytes the segments use: the read must reach it */
	uint32_t seg0, nseg;
} blk;

typedef struct wfile {
	const char *path;
	const uint8_t *map; /* cfg.mmap: the mapping the readers copy from */
	int fd, dfd; /* buffered; O_DIRECT or -1 */
	int nodirect; /* the file system refused an O_DIRECT read (atomic) */
	uint64_t end; /* the furthest byte a request reads */
} wfile;

struct eng_wload {
	const kern_ops *ops;
	kern_ctx *ctx;
	kern_queue *q[2];
	eng_wload_cfg cfg;
	req *r;
	size_t nr, cap;

	/* one run */
	wfile *f;
	int nf;
	blk *b;
	size_t nb, bcap;
	seg *s;
	size_t ns, scap;
	void **slot; /* [cfg.slots] of cfg.block bytes */
	int pinned;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	size_t next;  /* the next block a reader takes */
	size_t freed; /* blocks whose slot is free again: [0, freed) done */
	int64_t *ready; /* [slots]: the block the slot holds read, or -1 */
	int rc;
	char err[MOOR_ERRLEN];
	uint64_t read_bytes;
};

int eng_wload_new(const kern_ops *ops, kern_ctx *ctx, const eng_wload_cfg *cfg,
		  eng_wload **out)
{
	*out = NULL;
	eng_wload *w = calloc(1, sizeof *w);
	if (!w)
		return -ENOMEM;
	w->ops = ops;
	w->ctx = ctx;
	w->q[0] = ops->queue(ctx, KERN_Q_COMPUTE);
	w->q[1] = ops->queue(ctx, KERN_Q_COPY);
	if (cfg)
		w->cfg = *cfg;
	if (w->cfg.threads <= 0)
		w->cfg.threads = 8;
	if (w->cfg.block == 0)
		w->cfg.block = 32u << 20;
	w->cfg.block = (w->cfg.block + ALIGN - 1) / ALIGN * ALIGN;
	if (w->cfg.slots <= 0)
		w->cfg.slots = 2 * w->cfg.threads + 2;
	if (w->cfg.slots < 3)
		w->cfg.slots = 3;
	*out = w;
	return 0;
}

void eng_wload_free(eng_wload *w)
{
	if (!w)
		return;
	free(w->r);
	free(w);
}

int eng_wload_add(eng_wload *w, void *dst, const eng_tensor *t)
{
	if (!t->nbytes)
		return 0;
	if (!dst || !t->file)
		return MOOR_ERANGE;
	if (w->nr == w->cap) {
		size_t c = w->cap ? 2 * w->cap : 256;
		req *n = realloc(w->r, c * sizeof *n);
		if (!n)
			return -ENOMEM;
		w->r = n;
		w->cap = c;
	}
	w->r[w->nr++] = (req){dst, t->file,
			      (const uint8_t *)t->data - t->offset, t->offset,
			      t->nbytes};
	return 0;
}

/* ---- the plan ---- */

static int req_cmp(const void *a, const void *b)
{
	const req *x = a, *y = b;
	int c = strcmp(x->file, y->file);
	if (c)
		return c;
	return x->off < y->off ? -1 : x->off > y->off;
}

static int push_blk(eng_wload *w, int file, uint64_t start)
{
	if (w->nb == w->bcap) {
		size_t c = w->bcap ? 2 * w->bcap : 256;
		blk *n = realloc(w->b, c * sizeof *n);
		if (!n)
			return -ENOMEM;
		w->b = n;
		w->bcap = c;
	}
	w->b[w->nb++] = (blk){file, start, 0, (uint32_t)w->ns, 0};
	return 0;
}

static int push_seg(eng_wload *w, seg s)
{
	if (w->ns == w->scap) {
		size_t c = w->scap ? 2 * w->scap : 1024;
		seg *n = realloc(w->s, c * sizeof *n);
		if (!n)
			return -ENOMEM;
		w->s = n;
		w->scap = c;
	}
	w->s[w->ns++] = s;
	return 0;
}

static int open_file(eng_wload *w, const char *path, const uint8_t *map,
		     char *err)
{
	wfile *f = &w->f[w->nf];
	f->path = path;
	f->map = map;
	f->dfd = -1;
	f->fd = open(path, O_RDONLY | O_CLOEXEC);
	if (f->fd < 0) {
		int e = errno;
		moor_errf(err, "%s: %s", path, strerror(e));
		return -e;
	}
	/* sequential: the kernel reads ahead in large steps */
	(void)posix_fadvise(f->fd, 0, 0, POSIX_FADV_SEQUENTIAL);
	if (w->cfg.direct)
		f->dfd = open(path, O_RDONLY | O_CLOEXEC | O_DIRECT);
	w->nf++;
	return 0;
}

/* Sorts the requests and cuts them into blocks. */
static int plan(eng_wload *w, char *err)
{
	qsort(w->r, w->nr, sizeof *w->r, req_cmp);
	w->f = calloc(w->nr ? w->nr : 1, sizeof *w->f);
	if (!w->f)
		return -ENOMEM;
	const uint64_t B = w->cfg.block;
	blk *cur = NULL;
	int rc;
	for (size_t i = 0; i < w->nr; i++) {
		const req *r = &w->r[i];
		if (!w->nf || strcmp(w->f[w->nf - 1].path, r->file)) {
			if ((rc = open_file(w, r->file, r->map, err)))
				return rc;
			cur = NULL;
		}
		uint64_t pos = r->off, end = r->off + r->n;
		if (end > w->f[w->nf - 1].end)
			w->f[w->nf - 1].end = end;
		while (pos < end) {
			if (!cur || pos < cur->start || pos >= cur->start + B ||
			    pos > cur->start + cur->need + GAP) {
				if ((rc = push_blk(w, w->nf - 1,
						   pos / ALIGN * ALIGN)))
					return rc;
				cur = &w->b[w->nb - 1];
			}
			uint64_t lim = cur->start + B;
			uint64_t take = (end < lim ? end : lim) - pos;
			if ((rc = push_seg(w, (seg){(uint32_t)i, pos - r->off,
						    take, pos - cur->start})))
				return rc;
			cur->nseg++;
			if (pos + take - cur->start > cur->need)
				cur->need = pos + take - cur->start;
			pos += take;
		}
	}
	/* a file that shrank since the checkpoint was opened: said here, not
	 * found by a reader (or, through the mapping, as a SIGBUS) */
	for (int i = 0; i < w->nf; i++) {
		struct stat st;
		if (fstat(w->f[i].fd, &st) == 0 &&
		    (uint64_t)st.st_size < w->f[i].end) {
			moor_errf(err,
				  "%s: %llu bytes, the tensors need %llu (the "
				  "file is shorter than when it was opened)",
				  w->f[i].path, (unsigned long long)st.st_size,
				  (unsigned long long)w->f[i].end);
			return MOOR_ETRUNC;
		}
	}
	return 0;
}

/* ---- the readers ---- */

static void fail(eng_wload *w, int rc, const char *msg)
{
	pthread_mutex_lock(&w->mu);
	if (!w->rc) {
		w->rc = rc;
		snprintf(w->err, sizeof w->err, "%s", msg);
	}
	pthread_cond_broadcast(&w->cv);
	pthread_mutex_unlock(&w->mu);
}

/* Reads block b into buf: need bytes at least, the aligned length where
 * the file has it. 0, or a negative code with msg. */
static int read_blk(eng_wload *w, const blk *b, char *buf, uint64_t *got,
		    char *msg)
{
	wfile *f = &w->f[b->file];
	if (w->cfg.mmap) {
		/* the mapping covers the file as it was opened: the bytes the
		 * segments need, no more (the file's end may be closer than
		 * the aligned length) */
		memcpy(buf, f->map + b->start, b->need);
		*got = b->need;
		return 0;
	}
	uint64_t len = (b->need + ALIGN - 1) / ALIGN * ALIGN;
	uint64_t done = 0;
	int fd = f->dfd >= 0 && !__atomic_load_n(&f->nodirect, __ATOMIC_RELAXED)
		     ? f->dfd
		     : f->fd;
	while (done < len) {
		ssize_t k = pread(fd, buf + done, (size_t)(len - done),
				  (off_t)(b->start + done));
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0 && errno == EINVAL && fd == f->dfd) {
			/* this file system or offset refuses O_DIRECT: the
			 * buffered descriptor from here on, for every reader */
			__atomic_store_n(&f->nodirect, 1, __ATOMIC_RELAXED);
			fd = f->fd;
			continue;
		}
		if (k < 0) {
			int e = errno;
			moor_errf(msg, "%s: read of %llu bytes at %llu: %s",
				  f->path, (unsigned long long)(len - done),
				  (unsigned long long)(b->start + done),
				  strerror(e));
			return -e;
		}
		if (k == 0)
			break; /* the end of the file */
		done += (uint64_t)k;
	}
	if (done < b->need) {
		moor_errf(msg,
			  "%s: %llu bytes at %llu, the tensors need %llu (the "
			  "file is shorter than when it was opened)",
			  f->path, (unsigned long long)done,
			  (unsigned long long)b->start,
			  (unsigned long long)b->need);
		return MOOR_ETRUNC;
	}
	*got = done;
	return 0;
}

static void *reader(void *arg)
{
	eng_wload *w = arg;
	const size_t S = (size_t)w->cfg.slots;
	for (;;) {
		pthread_mutex_lock(&w->mu);
		size_t i = w->next;
		if (w->rc || i >= w->nb) {
			pthread_mutex_unlock(&w->mu);
			return NULL;
		}
		w->next++;
		/* the slot is free once block i - S is uploaded and synced */
		while (!w->rc && i >= S && w->freed < i - S + 1)
			pthread_cond_wait(&w->cv, &w->mu);
		int stop = w->rc != 0;
		pthread_mutex_unlock(&w->mu);
		if (stop)
			return NULL;
		char msg[MOOR_ERRLEN] = "";
		uint64_t got = 0;
		int rc = read_blk(w, &w->b[i], w->slot[i % S], &got, msg);
		if (rc) {
			fail(w, rc, msg);
			return NULL;
		}
		pthread_mutex_lock(&w->mu);
		w->ready[i % S] = (int64_t)i;
		w->read_bytes += got;
		pthread_cond_broadcast(&w->cv);
		pthread_mutex_unlock(&w->mu);
	}
}

/* ---- the run ---- */

static int slots_alloc(eng_wload *w)
{
	const kern_ops *o = w->ops;
	size_t S = (size_t)w->cfg.slots;
	w->slot = calloc(S, sizeof *w->slot);
	w->ready = malloc(S * sizeof *w->ready);
	if (!w->slot || !w->ready)
		return -ENOMEM;
	w->pinned = o->host_alloc != NULL;
	for (size_t i = 0; i < S; i++) {
		w->ready[i] = -1;
		int rc;
		if (w->pinned) {
			rc = o->host_alloc(w->ctx, w->cfg.block, &w->slot[i]);
		} else {
			rc = posix_memalign(&w->slot[i], ALIGN, w->cfg.block);
			rc = -rc;
		}
		if (rc) {
			w->slot[i] = NULL;
			return rc;
		}
	}
	return 0;
}

static void run_end(eng_wload *w)
{
	if (w->slot) {
		for (int i = 0; i < w->cfg.slots; i++) {
			if (!w->slot[i])
				continue;
			if (w->pinned)
				w->ops->host_free(w->ctx, w->slot[i]);
			else
				free(w->slot[i]);
		}
	}
	free(w->slot);
	free(w->ready);
	w->slot = NULL;
	w->ready = NULL;
	for (int i = 0; i < w->nf; i++) {
		close(w->f[i].fd);
		if (w->f[i].dfd >= 0)
			close(w->f[i].dfd);
	}
	free(w->f);
	free(w->b);
	free(w->s);
	w->f = NULL;
	w->b = NULL;
	w->s = NULL;
	w->nf = 0;
	w->nb = w->ns = w->bcap = w->scap = 0;
	w->nr = 0;
}

static void progress(eng_wload *w, double t0, double *t_log, uint64_t bytes)
{
	double now = moor_now();
	if (!w->cfg.progress || now - *t_log < 1.0)
		return;
	*t_log = now;
	moor_info("loading: %.2f GB of weights in %.1f s (%.2f GB/s)",
		  (double)bytes / 1e9, now - t0,
		  now > t0 ? (double)bytes / 1e9 / (now - t0) : 0.0);
}

int eng_wload_run(eng_wload *w, eng_wload_stats *st, char *err)
{
	double t0 = moor_now(), t_log = t0;
	const kern_ops *o = w->ops;
	uint64_t bytes = 0;
	int rc = plan(w, err);
	if (rc == 0 && w->nb && (rc = slots_alloc(w)))
		moor_errf(err, "staging: %d blocks of %zu bytes: %s",
			  w->cfg.slots, w->cfg.block, moor_strerror(rc));
	if (rc || !w->nb) {
		run_end(w);
		return rc;
	}
	pthread_mutex_init(&w->mu, NULL);
	pthread_cond_init(&w->cv, NULL);
	w->next = w->freed = 0;
	w->rc = 0;
	w->err[0] = 0;
	w->read_bytes = 0;
	int nt = w->cfg.threads;
	if ((size_t)nt > w->nb)
		nt = (int)w->nb;
	pthread_t *th = calloc((size_t)nt, sizeof *th);
	int started = 0;
	if (!th)
		rc = -ENOMEM;
	for (int i = 0; i < nt && !rc; i++) {
		if (pthread_create(&th[i], NULL, reader, w))
			rc = -EAGAIN;
		else
			started++;
	}
	if (rc)
		fail(w, rc, "cannot start the reader threads");
	const size_t S = (size_t)w->cfg.slots;
	for (size_t i = 0; i < w->nb; i++) {
		pthread_mutex_lock(&w->mu);
		while (!w->rc && w->ready[i % S] != (int64_t)i)
			pthread_cond_wait(&w->cv, &w->mu);
		rc = w->rc;
		pthread_mutex_unlock(&w->mu);
		if (rc)
			break;
		const blk *b = &w->b[i];
		kern_queue *q = w->q[i & 1];
		const char *buf = w->slot[i % S];
		for (uint32_t k = 0; k < b->nseg && !rc; k++) {
			const seg *s = &w->s[b->seg0 + k];
			const req *r = &w->r[s->req];
			rc = o->upload(q, kern_at(r->dst, s->at), buf + s->in,
				       s->n);
			bytes += s->n;
		}
		/* block i - 1 went on the other queue: its sync frees it */
		if (rc == 0 && i > 0)
			rc = o->sync(w->q[(i - 1) & 1]);
		if (rc) {
			char msg[MOOR_ERRLEN];
			moor_errf(msg, "upload of %s at %llu: %s",
				  w->f[b->file].path,
				  (unsigned long long)b->start,
				  moor_strerror(rc));
			fail(w, rc, msg);
			break;
		}
		pthread_mutex_lock(&w->mu);
		w->freed = i; /* [0, i) done: block i - 1's slot is free */
		pthread_cond_broadcast(&w->cv);
		pthread_mutex_unlock(&w->mu);
		progress(w, t0, &t_log, bytes);
	}
	/* the last block, and both queues, whatever happened */
	int r0 = o->sync(w->q[0]), r1 = o->sync(w->q[1]);
	pthread_mutex_lock(&w->mu);
	if (!w->rc && (r0 || r1)) {
		w->rc = r0 ? r0 : r1;
		moor_errf(w->err, "upload: %s", moor_strerror(w->rc));
	}
	w->freed = w->nb;
	pthread_cond_broadcast(&w->cv);
	pthread_mutex_unlock(&w->mu);
	for (int i = 0; i < started; i++)
		pthread_join(th[i], NULL);
	free(th);
	rc = w->rc;
	if (rc)
		moor_errf(err, "%s", w->err);
	if (st) {
		memset(st, 0, sizeof *st);
		st->bytes = bytes;
		st->read_bytes = w->read_bytes;
		st->blocks = w->nb;
		st->seconds = moor_now() - t0;
		st->pinned = w->pinned;
		st->files = w->nf;
		for (int i = 0; i < w->nf; i++)
			st->direct += w->f[i].dfd >= 0 && !w->f[i].nodirect;
	}
	pthread_mutex_destroy(&w->mu);
	pthread_cond_destroy(&w->cv);
	run_end(w);
	return rc;
}
