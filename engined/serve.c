/* serve.c: engined's daemon loop (serve.h).
 *
 * Threads:
 *   main      the worker: attaches to cached, then runs one request at a
 *             time from the queue (plan, prefill, decode, commit);
 *   receiver  reads engined.sock: queues GENERATE, flags CANCEL, answers
 *             malformed messages with PROTO_ERROR and a full queue with a
 *             busy DONE, so the worker never reads the socket;
 *   signals   sigwait for SIGTERM/SIGINT: sets `stop` and wakes the worker.
 * NNG's own threads run the pipe callbacks: a client pipe that goes away
 * cancels its requests, a new pipe to cached (cached restarted) makes the
 * next request HELLO again first.
 *
 * Everything the receiver and the callbacks share with the worker is under
 * `mu`, except the cancel flag of the running request and the pipe counter,
 * which are atomics the worker polls once per decode step.
 */
#include "serve.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <nng/nng.h>
#include <nng/protocol/pair1/pair.h>
#include <nng/protocol/reqrep0/req.h>
#include <xxhash.h>

#include "moor.h"
#include "net.h"
#include "outbox.h"
#include "proto.h"

#ifndef MOOR_VERSION
#define MOOR_VERSION "unknown"
#endif

static int is_transport(int code)
{
	return code < 0 && code > MOOR_EBASE;
}

/* ===================================================================== */
/* run directory, sockets                                                */

/* Takes RUN/<name>.lock for the life of the process (the kernel lets go of
 * it when the process dies, SIGKILL included): held by another process
 * means another daemon of this kind serves the run dir; taken means any
 * socket file left there is stale. Never probed by connecting: a stray
 * connection can stall an NNG listener's next accept. */
static int run_lock(const char *run_dir, const char *name)
{
	char p[320];
	snprintf(p, sizeof p, "%s/%s.lock", run_dir, name);
	int fd = open(p, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (fd < 0)
		return -errno;
	if (flock(fd, LOCK_EX | LOCK_NB)) {
		int e = errno == EWOULDBLOCK ? -EADDRINUSE : -errno;
		close(fd);
		return e;
	}
	return fd; /* kept open until exit */
}

/* ===================================================================== */
/* fingerprint                                                           */

typedef struct fp_state {
	XXH3_state_t *a, *b;
} fp_state;

static void fp_put(fp_state *f, const void *p, size_t n)
{
	XXH3_128bits_update(f->a, p, n);
	XXH3_128bits_update(f->b, p, n);
}

/* A length-prefixed field, so that two fields never run together. */
static void fp_field(fp_state *f, const void *p, size_t n)
{
	uint64_t len = n;
	fp_put(f, &len, sizeof len);
	fp_put(f, p, n);
}

static int name_cmp(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static int fp_file(fp_state *f, const char *path, int header_only, char *err)
{
	FILE *fp = fopen(path, "rb");
	if (!fp) {
		int e = -errno;
		moor_errf(err, "%s: %s", path, strerror(errno));
		return e;
	}
	int rc = 0;
	uint64_t want = UINT64_MAX;
	if (header_only) {
		uint8_t h8[8];
		if (fread(h8, 1, 8, fp) != 8) {
			moor_errf(err, "%s: shorter than a safetensors header",
				  path);
			fclose(fp);
			return MOOR_ETRUNC;
		}
		want = 0;
		for (int i = 7; i >= 0; i--)
			want = want << 8 | h8[i];
		if (want > (100u << 20)) {
			moor_errf(err, "%s: header of %llu bytes", path,
				  (unsigned long long)want);
			fclose(fp);
			return MOOR_EFORMAT;
		}
		fp_put(f, h8, 8);
	}
	char buf[65536];
	uint64_t got = 0;
	while (got < want) {
		size_t k = sizeof buf;
		if (want - got < k)
			k = (size_t)(want - got);
		size_t r = fread(buf, 1, k, fp);
		if (r == 0)
			break;
		fp_put(f, buf, r);
		got += r;
	}
	if (ferror(fp)) {
		moor_errf(err, "%s: read failed", path);
		rc = -EIO;
	} else if (header_only && got != want) {
		moor_errf(err, "%s: header truncated", path);
		rc = MOOR_ETRUNC;
	}
	fclose(fp);
	return rc;
}

int eng_serve_fingerprint(const char *model_dir, int grid, const char *backend,
			  uint8_t out[32], char *err)
{
	fp_state f = {XXH3_createState(), XXH3_createState()};
	char **names = NULL;
	size_t nn = 0, cap = 0;
	int rc = -ENOMEM;
	if (!f.a || !f.b)
		goto done;
	XXH3_128bits_reset_withSeed(f.a, 0x6d6f6f72u);	      /* "moor" */
	XXH3_128bits_reset_withSeed(f.b, 0x66703176ull << 8); /* "fp1v" */
	static const char tag[] = "moor fingerprint v1";
	fp_field(&f, tag, sizeof tag);
	char path[4096];
	snprintf(path, sizeof path, "%s/config.json", model_dir);
	rc = fp_file(&f, path, 0, err);
	if (rc)
		goto done;
	DIR *d = opendir(model_dir);
	if (!d) {
		rc = -errno;
		moor_errf(err, "%s: %s", model_dir, strerror(errno));
		goto done;
	}
	struct dirent *e;
	while ((e = readdir(d))) {
		size_t l = strlen(e->d_name);
		if (l < 12 || strcmp(e->d_name + l - 12, ".safetensors"))
			continue;
		if (nn == cap) {
			cap = cap ? 2 * cap : 8;
			char **n2 = realloc(names, cap * sizeof *names);
			if (!n2) {
				rc = -ENOMEM;
				closedir(d);
				goto done;
			}
			names = n2;
		}
		if (!(names[nn] = strdup(e->d_name))) {
			rc = -ENOMEM;
			closedir(d);
			goto done;
		}
		nn++;
	}
	closedir(d);
	if (nn == 0) {
		moor_errf(err, "%s: no .safetensors file", model_dir);
		rc = MOOR_EMISSING;
		goto done;
	}
	qsort(names, nn, sizeof *names, name_cmp);
	for (size_t i = 0; i < nn; i++) {
		fp_field(&f, names[i], strlen(names[i]));
		snprintf(path, sizeof path, "%s/%s", model_dir, names[i]);
		rc = fp_file(&f, path, 1, err);
		if (rc)
			goto done;
	}
	uint32_t g = (uint32_t)grid, abi = KERN_ABI_VERSION;
	fp_field(&f, &g, sizeof g);
	fp_field(&f, backend, strlen(backend));
	fp_field(&f, &abi, sizeof abi);
	fp_field(&f, MOOR_VERSION, strlen(MOOR_VERSION));
	fp_field(&f, __VERSION__, strlen(__VERSION__)); /* the compiler */
	XXH128_canonical_t ca, cb;
	XXH128_canonicalFromHash(&ca, XXH3_128bits_digest(f.a));
	XXH128_canonicalFromHash(&cb, XXH3_128bits_digest(f.b));
	memcpy(out, ca.digest, 16);
	memcpy(out + 16, cb.digest, 16);
	rc = 0;
done:
	for (size_t i = 0; i < nn; i++)
		free(names[i]);
	free(names);
	XXH3_freeState(f.a);
	XXH3_freeState(f.b);
	return rc;
}

static void hex8(const uint8_t *fp, char out[17])
{
	for (int i = 0; i < 8; i++)
		snprintf(out + 2 * i, 3, "%02x", fp[i]);
}

/* ===================================================================== */
/* state                                                                 */

/* A GENERATE waiting or running: the decoded message owns its arrays. */
typedef struct job {
	nng_pipe pipe;
	proto_msg m; /* m.u.gen */
} job;

typedef struct srv {
	const eng_serve_cfg *cfg;
	char run_dir[256];
	char cached_url[300], eng_url[320], eng_path[300];

	kern_ctx *kctx;
	eng_model *model;
	const eng_layout *lay;
	int vocab, eos;
	uint8_t fp[32];

	/* the link to cached (REQ); pipes_added counts pipes NNG attached,
	 * hello_gen is its value at the last good HELLO */
	nng_socket cq;
	atomic_uint pipes_added;
	unsigned hello_gen;
	int attached;
	uint64_t next_id;

	/* cached's arenas, mapped; dev_k is the device view of dev */
	void *dev, *host, *dev_k;
	uint64_t dev_size, host_size;
	eng_seq seq;

	/* clients (PAIR1 poly); every send to them goes through `out` */
	nng_socket cs;
	int cs_open;
	eng_outbox *out;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	job **queue; /* FIFO of queue_max */
	int qn;
	job *cur;
	atomic_int cancel; /* 1: CANCEL; 2: the client went away */
	int stop;
	int exiting; /* the signal thread is woken to end, not by a signal */

	/* worker scratch, allocated once */
	float *logits;		/* [vocab] */
	int32_t *gen;		/* [window] tokens the state absorbed */
	eng_slot *slots;	/* [PROTO_MAX_SLOTS] */
	proto_step_entry *pend; /* [window + 1] steps not sent yet */
	uint32_t n_pend;
	char done_msg[MOOR_ERRLEN]; /* the running request's DONE text */
} srv;

static int stopping(srv *s)
{
	pthread_mutex_lock(&s->mu);
	int v = s->stop;
	pthread_mutex_unlock(&s->mu);
	return v;
}

/* ===================================================================== */
/* arenas                                                                */

/* Maps the shm object `name` (it must hold at least size bytes). */
static int shm_map(const char *name, uint64_t size, void **out, char *err)
{
	*out = NULL;
	if (name[0] != '/' || strchr(name + 1, '/') || size == 0) {
		moor_errf(err,
			  "arena name '%s' (%llu bytes) is not a shm "
			  "object",
			  name, (unsigned long long)size);
		return MOOR_EFORMAT;
	}
	int fd = shm_open(name, O_RDWR, 0);
	if (fd < 0) {
		int e = -errno;
		moor_errf(err, "shm %s: %s", name, strerror(errno));
		return e;
	}
	struct stat st;
	if (fstat(fd, &st) || (uint64_t)st.st_size < size) {
		moor_errf(err, "shm %s: %lld bytes, HELLO_OK says %llu", name,
			  (long long)st.st_size, (unsigned long long)size);
		close(fd);
		return MOOR_ETRUNC;
	}
	void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	int e = errno;
	close(fd);
	if (p == MAP_FAILED) {
		moor_errf(err, "mmap %s: %s", name, strerror(e));
		return -e;
	}
	*out = p;
	return 0;
}

static void arenas_unmap(srv *s)
{
	const kern_ops *o = &kern_cpu_ops;
	if (s->dev_k && o->unwrap)
		o->unwrap(s->kctx, s->dev_k);
	if (s->dev)
		munmap(s->dev, s->dev_size);
	if (s->host)
		munmap(s->host, s->host_size);
	s->dev = s->host = s->dev_k = NULL;
	s->dev_size = s->host_size = 0;
	s->attached = 0;
}

/* Takes HELLO_OK: maps both arenas and points the sequence's buffers at the
 * offsets, each checked against the arena. */
static int arenas_attach(srv *s, const proto_hello_ok *h, char *err)
{
	const eng_layout *y = s->lay;
	const kern_ops *o = &kern_cpu_ops;
	arenas_unmap(s);
	if ((int)h->n_sec != y->n_sections || (int)h->n_view != y->n_views) {
		moor_errf(err,
			  "HELLO_OK carries %u sections and %u views, "
			  "the layout has %d and %d",
			  h->n_sec, h->n_view, y->n_sections, y->n_views);
		return MOOR_EFORMAT;
	}
	int rc = shm_map(h->dev_arena, h->dev_size, &s->dev, err);
	if (rc)
		return rc;
	s->dev_size = h->dev_size;
	rc = shm_map(h->host_arena, h->host_size, &s->host, err);
	if (rc) {
		arenas_unmap(s);
		return rc;
	}
	s->host_size = h->host_size;
	if (o->wrap_host)
		rc = o->wrap_host(s->kctx, s->dev, s->dev_size, &s->dev_k);
	else
		rc = MOOR_EUNSUP; /* a device arena on the GPU comes later */
	if (rc) {
		moor_errf(err, "device arena: backend %s cannot use it: %s",
			  o->name, moor_strerror(rc));
		arenas_unmap(s);
		return rc;
	}
	for (int i = 0; i < y->n_sections; i++) {
		uint64_t off = h->sec_off[i], n = y->sec[i].bytes;
		if (off > s->dev_size || n > s->dev_size - off) {
			moor_errf(err,
				  "section %d (%s) at %llu+%llu is outside "
				  "the %llu-byte device arena",
				  i, y->sec[i].name, (unsigned long long)off,
				  (unsigned long long)n,
				  (unsigned long long)s->dev_size);
			arenas_unmap(s);
			return MOOR_ERANGE;
		}
		s->seq.sec[i] = kern_at(s->dev_k, off);
	}
	for (int i = 0; i < y->n_views; i++) {
		uint64_t off = h->view_off[i],
			 n = (uint64_t)y->view[i].row_bytes * y->window;
		if (off > s->dev_size || n > s->dev_size - off) {
			moor_errf(err,
				  "view %d (%s) at %llu+%llu is outside "
				  "the %llu-byte device arena",
				  i, y->view[i].name, (unsigned long long)off,
				  (unsigned long long)n,
				  (unsigned long long)s->dev_size);
			arenas_unmap(s);
			return MOOR_ERANGE;
		}
		s->seq.view[i] = kern_at(s->dev_k, off);
	}
	s->seq.len = 0;
	s->attached = 1;
	return 0;
}

/* ===================================================================== */
/* cached                                                                */

static void cached_pipe_cb(nng_pipe p, nng_pipe_ev ev, void *arg)
{
	srv *s = arg;
	(void)p;
	if (ev == NNG_PIPE_EV_ADD_POST)
		atomic_fetch_add(&s->pipes_added, 1);
}

static int cached_open(srv *s)
{
	int rv = nng_req0_open(&s->cq);
	if (rv)
		return proto_nng_err(rv);
	/* A request is never resent behind our back: a PLAN cached served
	 * twice would restore twice. Lost requests time out instead. */
	nng_socket_set_ms(s->cq, NNG_OPT_REQ_RESENDTIME, NNG_DURATION_INFINITE);
	nng_socket_set_ms(s->cq, NNG_OPT_RECONNMINT, 50);
	nng_socket_set_ms(s->cq, NNG_OPT_RECONNMAXT, 500);
	nng_socket_set_size(s->cq, NNG_OPT_RECVMAXSZ,
			    2 * (PROTO_HDR_SIZE + (size_t)PROTO_MAX_PAYLOAD));
	nng_pipe_notify(s->cq, NNG_PIPE_EV_ADD_POST, cached_pipe_cb, s);
	rv = nng_dial(s->cq, s->cached_url, NULL, NNG_FLAG_NONBLOCK);
	return proto_nng_err(rv);
}

/* One round trip to cached; on an error reply, msg gets its text. */
static int cached_call(srv *s, proto_msg *q, proto_msg *rep, char *msg)
{
	q->h.req = ++s->next_id;
	int rc = proto_call(s->cq, q, rep, s->cfg->call_timeout_s * 1000);
	if (rc && msg) {
		if (rep->h.type == PROTO_ERROR && rep->u.error.msg)
			moor_errf(msg, "cached: %s", rep->u.error.msg);
		else if (rc == -ETIMEDOUT)
			moor_errf(msg, "cached did not answer %s within %d s",
				  proto_type_name(q->h.type),
				  s->cfg->call_timeout_s);
		else
			moor_errf(msg, "cached: %s: %s",
				  proto_type_name(q->h.type),
				  moor_strerror(rc));
	}
	return rc;
}

static int cached_hello(srv *s, char *err)
{
	const eng_layout *y = s->lay;
	proto_msg q = {0}, rep = {0};
	q.h.type = PROTO_HELLO;
	proto_hello *h = &q.u.hello;
	memcpy(h->fingerprint, s->fp, 32);
	h->pid = (uint32_t)getpid();
	h->grid = (uint32_t)y->grid;
	h->window = (uint64_t)y->window;
	/* The workspace lives in engined's own memory, not in an arena, but
	 * it is memory of the same box (the CPU backend) or the same device:
	 * the memory policy counts it under mem_peak beside the caches. */
	h->workspace_bytes = eng_model_workspace_bytes(s->model);
	h->n_sections = (uint32_t)y->n_sections;
	h->n_views = (uint32_t)y->n_views;
	h->sec = calloc((size_t)y->n_sections + 1, sizeof *h->sec);
	h->view = calloc((size_t)y->n_views + 1, sizeof *h->view);
	if (!h->sec || !h->view) {
		free(h->sec);
		free(h->view);
		return -ENOMEM;
	}
	for (int i = 0; i < y->n_sections; i++) {
		const eng_section *e = &y->sec[i];
		proto_section *p = &h->sec[i];
		snprintf(p->name, sizeof p->name, "%s", e->name);
		p->layer = e->layer;
		p->dtype = (uint32_t)e->dtype;
		p->ndim = (uint32_t)e->ndim;
		for (int d = 0; d < e->ndim && d < 4; d++)
			p->dims[d] = e->dims[d];
		p->bytes = e->bytes;
	}
	for (int i = 0; i < y->n_views; i++) {
		const eng_view *e = &y->view[i];
		proto_view *p = &h->view[i];
		snprintf(p->name, sizeof p->name, "%s", e->name);
		p->layer = e->layer;
		p->dtype = (uint32_t)e->dtype;
		p->ndim = (uint32_t)e->ndim;
		for (int d = 0; d < e->ndim && d < 4; d++)
			p->dims[d] = e->dims[d];
		p->token_axis = (uint32_t)e->token_axis;
		p->row_bytes = e->row_bytes;
	}
	unsigned gen = atomic_load(&s->pipes_added);
	int rc = cached_call(s, &q, &rep, err);
	free(h->sec);
	free(h->view);
	if (rc == 0 && rep.h.type != PROTO_HELLO_OK) {
		moor_errf(err, "cached answered HELLO with %s",
			  proto_type_name(rep.h.type));
		rc = MOOR_EFORMAT;
	}
	if (rc == 0)
		rc = arenas_attach(s, &rep.u.hello_ok, err);
	if (rc == 0) {
		s->hello_gen = gen;
		moor_info("attached to cached: device arena %s (%.1f MiB), "
			  "host arena %s (%.1f MiB); %s",
			  rep.u.hello_ok.dev_arena,
			  (double)rep.u.hello_ok.dev_size / (1 << 20),
			  rep.u.hello_ok.host_arena,
			  (double)rep.u.hello_ok.host_size / (1 << 20),
			  rep.u.hello_ok.adopted
			      ? "it handed back the state of an earlier "
				"engined"
			      : "fresh sequence buffers");
	}
	proto_msg_fini(&rep);
	return rc;
}

/* At start: waits for cached's socket (bounded by connect_timeout_s), then
 * HELLOs. */
static int cached_attach_first(srv *s)
{
	double deadline = moor_now() + s->cfg->connect_timeout_s;
	double next_log = moor_now() + 0.5; /* quiet while the dial lands */
	char err[MOOR_ERRLEN];
	for (;;) {
		if (stopping(s))
			return -EINTR;
		if (atomic_load(&s->pipes_added) > 0) {
			err[0] = 0;
			int rc = cached_hello(s, err);
			if (rc == 0)
				return 0;
			if (rc != -ETIMEDOUT && rc != -ECONNRESET &&
			    rc != -EPIPE) {
				moor_err("HELLO refused: %s", err);
				return rc;
			}
			moor_warn("HELLO: %s; retrying", err);
		}
		double now = moor_now();
		if (now >= deadline) {
			moor_err("cached is not up at %s after %d s "
				 "(--connect-timeout); start cached first",
				 s->cached_url, s->cfg->connect_timeout_s);
			return -ETIMEDOUT;
		}
		if (now >= next_log) {
			moor_info("waiting for cached at %s (retrying for up "
				  "to %.0f s more)",
				  s->cached_url, deadline - now);
			next_log = now + 5;
		}
		struct timespec ts = {0, 50 * 1000 * 1000};
		nanosleep(&ts, NULL);
	}
}

/* ===================================================================== */
/* clients                                                               */

static void send_done(srv *s, nng_pipe p, uint64_t req, uint32_t finish,
		      int code, const char *msg)
{
	proto_msg d = {0};
	d.h.type = PROTO_DONE;
	d.h.req = req;
	d.u.done.finish = finish;
	d.u.done.code = code;
	d.u.done.msg = (char *)(msg ? msg : "");
	eng_out_send(s->out, p, &d);
}

/* PROTO_ERROR{code, text} with request id req, to pipe p. */
static void send_error(srv *s, nng_pipe p, uint64_t req, int code,
		       const char *fmt, ...) __attribute__((format(printf, 5, 6)));
static void send_error(srv *s, nng_pipe p, uint64_t req, int code,
		       const char *fmt, ...)
{
	char text[MOOR_ERRLEN];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(text, sizeof text, fmt, ap);
	va_end(ap);
	proto_msg m = {0};
	m.h.type = PROTO_ERROR;
	m.h.req = req;
	m.u.error.code = code;
	m.u.error.msg = text;
	eng_out_send(s->out, p, &m);
}

static void job_free(job *j)
{
	if (!j)
		return;
	proto_msg_fini(&j->m);
	free(j);
}

/* Checks a GENERATE before it queues: what can be refused at once is. */
static int gen_check(srv *s, const proto_generate *g, char *msg)
{
	if (g->n_ids == 0) {
		moor_errf(msg, "empty prompt");
		return MOOR_ERANGE;
	}
	if ((int64_t)g->n_ids > s->lay->window) {
		moor_errf(msg,
			  "prompt of %u tokens is longer than the window "
			  "of %lld tokens",
			  g->n_ids, (long long)s->lay->window);
		return MOOR_ERANGE;
	}
	for (uint32_t i = 0; i < g->n_ids; i++)
		if (g->ids[i] < 0 || g->ids[i] >= s->vocab) {
			moor_errf(msg,
				  "token id %d at position %u is outside "
				  "the vocabulary (%d)",
				  g->ids[i], i, s->vocab);
			return MOOR_ERANGE;
		}
	if (!(g->temperature >= 0) || !(g->top_p >= 0) || g->top_p > 1 ||
	    !(g->min_p >= 0) || g->min_p > 1 || g->top_k < 0) {
		moor_errf(msg, "sampling parameters out of range");
		return MOOR_ERANGE;
	}
	return 0;
}

static void on_generate(srv *s, nng_pipe p, proto_msg *m)
{
	char msg[MOOR_ERRLEN];
	int rc = gen_check(s, &m->u.gen, msg);
	if (rc) {
		send_done(s, p, m->h.req, PROTO_FINISH_ERROR, rc, msg);
		proto_msg_fini(m);
		return;
	}
	job *j = calloc(1, sizeof *j);
	if (!j) {
		send_done(s, p, m->h.req, PROTO_FINISH_ERROR, -ENOMEM,
			  "out of memory");
		proto_msg_fini(m);
		return;
	}
	j->pipe = p;
	j->m = *m; /* takes the arrays */
	memset(m, 0, sizeof *m);
	pthread_mutex_lock(&s->mu);
	/* queue_max wait behind the running one (or the next to run) */
	int busy = s->stop || s->qn + (s->cur != NULL) > s->cfg->queue_max;
	int n = s->qn, stop = s->stop;
	if (!busy) {
		s->queue[s->qn++] = j;
		pthread_cond_broadcast(&s->cv);
	}
	pthread_mutex_unlock(&s->mu);
	if (busy) {
		if (stop)
			send_done(s, p, j->m.h.req, PROTO_FINISH_ERROR,
				  -ESHUTDOWN, "engined is shutting down");
		else {
			snprintf(msg, sizeof msg,
				 "busy: %d requests are waiting already", n);
			moor_info("req %llu: refused: %s",
				  (unsigned long long)j->m.h.req, msg);
			send_done(s, p, j->m.h.req, PROTO_FINISH_ERROR, -EBUSY,
				  msg);
		}
		job_free(j);
	}
}

static void on_cancel(srv *s, nng_pipe p, const proto_msg *m)
{
	uint64_t target = m->u.cancel.target;
	job *gone = NULL;
	pthread_mutex_lock(&s->mu);
	if (s->cur && nng_pipe_id(s->cur->pipe) == nng_pipe_id(p) &&
	    s->cur->m.h.req == target) {
		atomic_store(&s->cancel, 1);
	} else {
		for (int i = 0; i < s->qn; i++) {
			job *j = s->queue[i];
			if (nng_pipe_id(j->pipe) == nng_pipe_id(p) &&
			    j->m.h.req == target) {
				gone = j;
				memmove(&s->queue[i], &s->queue[i + 1],
					(size_t)(s->qn - i - 1) *
					    sizeof *s->queue);
				s->qn--;
				break;
			}
		}
	}
	pthread_mutex_unlock(&s->mu);
	/* A CANCEL that finds nothing raced with the DONE: nothing to do. */
	if (gone) {
		moor_info("req %llu: cancelled while it waited",
			  (unsigned long long)target);
		send_done(s, p, target, PROTO_FINISH_CANCEL, 0, "");
		job_free(gone);
	} else {
		moor_debug("CANCEL of req %llu: not waiting, not running",
			   (unsigned long long)target);
	}
}

/* A client pipe went away: its running request stops at the next step,
 * its queued ones are dropped. */
static void client_pipe_cb(nng_pipe p, nng_pipe_ev ev, void *arg)
{
	srv *s = arg;
	if (ev == NNG_PIPE_EV_ADD_POST) {
		eng_out_pipe_add(s->out, p);
		return;
	}
	if (ev != NNG_PIPE_EV_REM_POST)
		return;
	eng_out_pipe_rem(s->out, p);
	job *drop[64];
	int nd = 0;
	pthread_mutex_lock(&s->mu);
	if (s->cur && nng_pipe_id(s->cur->pipe) == nng_pipe_id(p))
		atomic_store(&s->cancel, 2);
	for (int i = 0; i < s->qn;) {
		if (nng_pipe_id(s->queue[i]->pipe) == nng_pipe_id(p) &&
		    nd < 64) {
			drop[nd++] = s->queue[i];
			memmove(&s->queue[i], &s->queue[i + 1],
				(size_t)(s->qn - i - 1) * sizeof *s->queue);
			s->qn--;
		} else {
			i++;
		}
	}
	pthread_mutex_unlock(&s->mu);
	for (int i = 0; i < nd; i++)
		job_free(drop[i]);
}

static void *receiver_main(void *arg)
{
	srv *s = arg;
	for (;;) {
		proto_msg m;
		nng_pipe p;
		int rc = proto_recv(s->cs, &m, &p, -1);
		if (rc == -EPIPE || rc == -EBADF) {
			proto_msg_fini(&m);
			break; /* the socket closed: shutting down */
		}
		if (is_transport(rc)) {
			proto_msg_fini(&m);
			continue;
		}
		if (rc == MOOR_EVERSION) {
			send_error(s, p, m.h.req, MOOR_EVERSION,
					 "protocol version %u; engined speaks "
					 "version %u",
					 m.h.version, PROTO_VERSION);
		} else if (rc) {
			send_error(
			    s, p, m.h.req, rc, "malformed %s message: %s",
			    proto_type_name(m.h.type), moor_strerror(rc));
		} else if (m.h.type == PROTO_GENERATE) {
			on_generate(s, p, &m);
		} else if (m.h.type == PROTO_CANCEL) {
			on_cancel(s, p, &m);
		} else if (m.h.type == PROTO_CREDIT) {
			eng_out_credit(s->out, p, m.u.credit.n);
		} else {
			send_error(s, p, m.h.req, MOOR_EUNSUP,
					 "%s (type %u) is not served on "
					 "engined.sock (GENERATE, CANCEL, "
					 "CREDIT)",
					 proto_type_name(m.h.type), m.h.type);
		}
		proto_msg_fini(&m);
	}
	return NULL;
}

static int clients_open(srv *s)
{
	int lk = run_lock(s->run_dir, "engined");
	if (lk < 0) {
		if (lk == -EADDRINUSE)
			moor_err("another engined serves %s", s->eng_url);
		else
			moor_err("%s/engined.lock: %s", s->run_dir,
				 moor_strerror(lk));
		return lk;
	}
	if (unlink(s->eng_path) == 0)
		moor_info("replaced a stale %s", s->eng_path);
	int rv = nng_pair1_open_poly(&s->cs);
	if (rv)
		return proto_nng_err(rv);
	s->cs_open = 1;
	if ((rv = eng_out_new(s->cs, &s->out)))
		return rv;
	/* A client that stops reading must not stall the engine forever. */
	nng_socket_set_ms(s->cs, NNG_OPT_SENDTIMEO, 2000);
	nng_socket_set_size(s->cs, NNG_OPT_RECVMAXSZ,
			    2 * (PROTO_HDR_SIZE + (size_t)PROTO_MAX_PAYLOAD));
	nng_pipe_notify(s->cs, NNG_PIPE_EV_ADD_POST, client_pipe_cb, s);
	nng_pipe_notify(s->cs, NNG_PIPE_EV_REM_POST, client_pipe_cb, s);
	rv = nng_listen(s->cs, s->eng_url, NULL, 0);
	if (rv) {
		moor_err("listen %s: %s", s->eng_url, nng_strerror(rv));
		return proto_nng_err(rv);
	}
	chmod(s->eng_path, 0600);
	return 0;
}

/* ===================================================================== */
/* one request                                                           */

static int is_stop(const proto_generate *g, int32_t t)
{
	for (uint32_t i = 0; i < g->n_stop; i++)
		if (g->stop_ids[i] == t)
			return 1;
	return 0;
}

static const char *finish_name(uint32_t f)
{
	static const char *const n[] = {"none", "stop", "length", "cancel",
					"error"};
	return f < 5 ? n[f] : "?";
}

static uint64_t us_since(double t)
{
	double d = moor_now() - t;
	return d > 0 ? (uint64_t)(d * 1e6) : 0;
}

/* Sends ABORT for the open plan; failures are logged only (the caller
 * reports the first error). */
static void cached_abort(srv *s, int n_filled, int64_t valid)
{
	proto_msg q = {0}, rep = {0};
	char msg[MOOR_ERRLEN];
	q.h.type = PROTO_ABORT;
	q.u.abort_.n_filled = (uint32_t)n_filled;
	q.u.abort_.valid = valid > 0 ? (uint64_t)valid : 0;
	if (cached_call(s, &q, &rep, msg))
		moor_warn("ABORT: %s", msg);
	proto_msg_fini(&rep);
}

static int plan_check(srv *s, const proto_plan_ok *p, uint64_t n, char *msg)
{
	const eng_layout *y = s->lay;
	if (p->start >= n) {
		moor_errf(msg,
			  "cached planned a start at %llu for a prompt "
			  "of %llu tokens",
			  (unsigned long long)p->start, (unsigned long long)n);
		return MOOR_EFORMAT;
	}
	uint64_t prev = p->start;
	for (uint32_t i = 0; i < p->n_slots; i++) {
		const proto_slot *sl = &p->slots[i];
		if (sl->line <= prev || sl->line > n ||
		    sl->offset > s->dev_size ||
		    y->section_bytes > s->dev_size - sl->offset) {
			moor_errf(msg,
				  "anchor slot %u (line %llu at %llu) is "
				  "out of order or outside the arena",
				  i, (unsigned long long)sl->line,
				  (unsigned long long)sl->offset);
			return MOOR_EFORMAT;
		}
		prev = sl->line;
		s->slots[i].line = (int64_t)sl->line;
		s->slots[i].dst = kern_at(s->dev_k, sl->offset);
	}
	return 0;
}

/* A STEP leaves when the client's pipe can take it (outbox.h: credit
 * left, nothing waiting); until then decode steps pile up in pend and
 * leave together, entries in order, so a client that reads slowly gets
 * fewer, larger STEPs and the engine never waits for it. STEP_MAX entries
 * (16 bytes each on the wire) keep one STEP well under PROTO_MAX_PAYLOAD. */
#define STEP_MAX 65536

static void steps_flush(srv *s, const job *j, int last)
{
	if (s->n_pend == 0)
		return;
	if (!last && s->n_pend < STEP_MAX && !eng_out_ready(s->out, j->pipe))
		return; /* keep them for the next flush */
	proto_msg st = {0};
	st.h.type = PROTO_STEP;
	st.h.req = j->m.h.req;
	st.u.step.n = s->n_pend;
	st.u.step.e = s->pend;
	if (eng_out_send(s->out, j->pipe, &st))
		atomic_store(&s->cancel, 2); /* nobody reads it */
	s->n_pend = 0;
}

/* Runs one request and fills its DONE (d, whose msg points into msg);
 * the worker sends it once the request no longer counts as running. */
static void run_job(srv *s, job *j, proto_done *d, char *msg)
{
	const proto_generate *g = &j->m.u.gen;
	const uint64_t req = j->m.h.req, n = g->n_ids;
	int rc = 0;
	msg[0] = 0;
	memset(d, 0, sizeof *d);
	d->msg = msg;
	d->prompt_tokens = n;

	/* A new pipe to cached since the last HELLO: cached restarted (its
	 * caches are gone) and knows this engine no longer. */
	if (!s->attached || atomic_load(&s->pipes_added) != s->hello_gen) {
		moor_info("cached reconnected: HELLO again");
		rc = cached_hello(s, msg);
		if (rc) {
			moor_warn("HELLO: %s", msg);
			d->finish = PROTO_FINISH_ERROR;
			d->code = rc;
			return;
		}
	}

	proto_msg q = {0}, rep = {0};
	q.h.type = PROTO_PLAN;
	q.u.plan.session = g->session ? g->session : "";
	q.u.plan.max_tokens = g->max_tokens;
	q.u.plan.flags = g->flags & 0xffffu;
	q.u.plan.n_ids = g->n_ids;
	q.u.plan.ids = g->ids;
	rc = cached_call(s, &q, &rep, msg);
	if (rc == -ENOTCONN) { /* cached lost us: attach and plan again */
		proto_msg_fini(&rep);
		moor_info("cached does not know this engine: HELLO again");
		rc = cached_hello(s, msg);
		if (rc == 0)
			rc = cached_call(s, &q, &rep, msg);
	}
	if (rc == 0 && rep.h.type != PROTO_PLAN_OK) {
		moor_errf(msg, "cached answered PLAN with %s",
			  proto_type_name(rep.h.type));
		rc = MOOR_EFORMAT;
	}
	if (rc) {
		moor_warn("req %llu: plan: %s", (unsigned long long)req, msg);
		proto_msg_fini(&rep);
		d->finish = PROTO_FINISH_ERROR;
		d->code = rc;
		return;
	}
	msg[0] = 0; /* a first refusal answered by a re-HELLO is no error */
	const proto_plan_ok po = rep.u.plan_ok;
	rc = plan_check(s, &po, n, msg);
	int n_slots = (int)po.n_slots, n_filled = 0;
	proto_msg_fini(&rep);
	d->tier = po.tier;
	d->cached_tokens = po.start;
	if (rc) {
		cached_abort(s, 0, 0);
		d->finish = PROTO_FINISH_ERROR;
		d->code = rc;
		return;
	}

	/* prefill [start, n) on the grid, filling the anchor slots; a cold
	 * start begins from zeroed recurrent state */
	s->seq.len = (int64_t)po.start;
	if (po.start == 0 && (rc = eng_seq_reset(s->model, &s->seq)) != 0) {
		moor_errf(msg, "reset: %s", moor_strerror(rc));
		goto fail;
	}
	double tp = moor_now();
	rc = eng_prefill_slots(s->model, &s->seq, g->ids + po.start,
			       (int64_t)(n - po.start), s->logits,
			       ENG_LOGITS_LAST, s->slots, n_slots, &n_filled);
	uint64_t prefill_us = us_since(tp);
	if (rc) {
		moor_errf(msg, "prefill at %lld: %s", (long long)s->seq.len,
			  moor_strerror(rc));
		goto fail;
	}

	/* decode: one STEP per step */
	eng_sampling sp = {
	    .temperature = g->temperature,
	    .top_k = g->top_k,
	    .top_p = g->top_p,
	    .min_p = g->min_p,
	    .seed = g->seed,
	};
	eng_sampler *smp = eng_sampler_new(s->vocab, &sp);
	if (!smp) {
		rc = -ENOMEM;
		moor_errf(msg, "sampler: out of memory");
		goto fail;
	}
	int ignore_eos = (g->flags & PROTO_GEN_IGNORE_EOS) != 0;
	uint32_t finish = g->max_tokens == 0 ? PROTO_FINISH_LENGTH : 0;
	uint64_t produced = 0, absorbed = 0;
	double td = moor_now();
	while (!finish) {
		if (atomic_load(&s->cancel)) {
			finish = PROTO_FINISH_CANCEL;
			break;
		}
		if (s->cfg->test_step_delay_ms > 0) {
			struct timespec ts = {
			    s->cfg->test_step_delay_ms / 1000,
			    (s->cfg->test_step_delay_ms % 1000) * 1000000L};
			nanosleep(&ts, NULL);
		}
		int32_t t = eng_sample(smp, s->logits);
		produced++;
		uint32_t f = 0;
		if ((t == s->eos && !ignore_eos) || is_stop(g, t))
			f = PROTO_FINISH_STOP;
		else if (produced >= g->max_tokens ||
			 s->seq.len + 1 > s->lay->window)
			f = PROTO_FINISH_LENGTH;
		s->pend[s->n_pend++] =
		    (proto_step_entry){.req = req, .token = t, .finish = f};
		steps_flush(s, j, f != 0);
		if (f) {
			finish = f;
			break;
		}
		rc = eng_decode(s->model, &s->seq, t, s->logits);
		if (rc) {
			moor_errf(msg, "decode at %lld: %s",
				  (long long)s->seq.len, moor_strerror(rc));
			eng_sampler_free(smp);
			steps_flush(s, j, 1);
			goto fail;
		}
		s->gen[absorbed++] = t;
	}
	steps_flush(s, j, 1); /* a cancel leaves some behind */
	eng_sampler_free(smp);
	uint64_t decode_us = us_since(td);

	/* commit what the state absorbed: every sampled token but a last one
	 * that was never forwarded */
	proto_msg c = {0};
	c.h.type = PROTO_COMMIT;
	c.u.commit.n_filled = (uint32_t)n_filled;
	c.u.commit.n_ids = (uint32_t)absorbed;
	c.u.commit.ids = s->gen;
	char cmsg[MOOR_ERRLEN];
	if (cached_call(s, &c, &rep, cmsg))
		moor_warn("req %llu: commit: %s (the caches keep nothing of "
			  "this turn)",
			  (unsigned long long)req, cmsg);
	proto_msg_fini(&rep);

	d->finish = finish;
	d->completion_tokens = produced;
	d->prefill_us = prefill_us;
	d->decode_us = decode_us;
	moor_info("req %llu: %llu prompt tokens, %llu cached (tier %u), "
		  "%llu forwarded in %.3f s, %llu generated in %.3f s, "
		  "%u anchors filled, finish %s%s",
		  (unsigned long long)req, (unsigned long long)n,
		  (unsigned long long)po.start, po.tier,
		  (unsigned long long)(n - po.start), prefill_us / 1e6,
		  (unsigned long long)produced, decode_us / 1e6, n_filled,
		  finish_name(finish),
		  atomic_load(&s->cancel) == 2 ? " (the client went away)"
					       : "");
	return;

fail:
	moor_warn("req %llu: %s", (unsigned long long)req, msg);
	cached_abort(s, n_filled, s->seq.len);
	d->finish = PROTO_FINISH_ERROR;
	d->code = rc;
}

/* ===================================================================== */
/* signals, main loop                                                    */

static void *signal_main(void *arg)
{
	srv *s = arg;
	sigset_t set;
	sigemptyset(&set);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGINT);
	int sig = 0;
	if (sigwait(&set, &sig))
		return NULL;
	pthread_mutex_lock(&s->mu);
	if (!s->exiting)
		moor_info("%s: finishing the request in flight, then exiting",
			  sig == SIGTERM ? "SIGTERM" : "SIGINT");
	s->stop = 1;
	pthread_cond_broadcast(&s->cv);
	pthread_mutex_unlock(&s->mu);
	return NULL;
}

static void worker_loop(srv *s)
{
	for (;;) {
		pthread_mutex_lock(&s->mu);
		while (!s->stop && s->qn == 0)
			pthread_cond_wait(&s->cv, &s->mu);
		if (s->stop) {
			pthread_mutex_unlock(&s->mu);
			return;
		}
		job *j = s->queue[0];
		memmove(&s->queue[0], &s->queue[1],
			(size_t)(s->qn - 1) * sizeof *s->queue);
		s->qn--;
		s->cur = j;
		atomic_store(&s->cancel, 0);
		pthread_mutex_unlock(&s->mu);

		proto_msg d = {0};
		d.h.type = PROTO_DONE;
		d.h.req = j->m.h.req;
		run_job(s, j, &d.u.done, s->done_msg);

		/* no longer running before the client hears DONE, so its next
		 * request never finds this one in the way */
		pthread_mutex_lock(&s->mu);
		s->cur = NULL;
		pthread_mutex_unlock(&s->mu);
		eng_out_send(s->out, j->pipe, &d);
		job_free(j);
	}
}

static int model_load(srv *s)
{
	const eng_serve_cfg *c = s->cfg;
	kern_config kc = {.threads = c->opts.threads > 0 ? c->opts.threads : 1};
	int rc = kern_cpu_ops.create(&kc, &s->kctx);
	if (rc) {
		moor_err("backend %s: %s", kern_cpu_ops.name,
			 moor_strerror(rc));
		return rc;
	}
	char err[MOOR_ERRLEN] = "";
	double t0 = moor_now();
	rc = eng_model_load(c->model_dir, &kern_cpu_ops, s->kctx, &c->opts,
			    &s->model, err);
	if (rc) {
		moor_err("%s: %s", c->model_dir,
			 err[0] ? err : moor_strerror(rc));
		return rc;
	}
	s->lay = eng_model_layout(s->model);
	s->vocab = eng_model_vocab(s->model);
	s->eos = eng_model_eos(s->model);
	rc = eng_serve_fingerprint(c->model_dir, s->lay->grid,
				   kern_cpu_ops.name, s->fp, err);
	if (rc) {
		moor_err("fingerprint: %s", err);
		return rc;
	}
	char fh[17];
	hex8(s->fp, fh);
	moor_info("loaded %s in %.2f s: %d sections, %d views, window %lld, "
		  "grid %d, fingerprint %s",
		  c->model_dir, moor_now() - t0, s->lay->n_sections,
		  s->lay->n_views, (long long)s->lay->window, s->lay->grid, fh);
	return 0;
}

int eng_serve(const eng_serve_cfg *cfg)
{
	/* Signals go to the signal thread only: block them before any thread
	 * (NNG's included) exists. */
	sigset_t set;
	sigemptyset(&set);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGINT);
	pthread_sigmask(SIG_BLOCK, &set, NULL);
	signal(SIGPIPE, SIG_IGN);

	srv *s = calloc(1, sizeof *s);
	if (!s)
		return -ENOMEM;
	s->cfg = cfg;
	pthread_mutex_init(&s->mu, NULL);
	pthread_cond_init(&s->cv, NULL);
	pthread_t sig_th, rcv_th;
	int rcv_started = 0, rc;
	int sig_started = pthread_create(&sig_th, NULL, signal_main, s) == 0;

	if (cfg->run_dir)
		snprintf(s->run_dir, sizeof s->run_dir, "%s", cfg->run_dir);
	else
		moor_run_dir_default(s->run_dir, sizeof s->run_dir);
	snprintf(s->cached_url, sizeof s->cached_url, "ipc://%s/cached.sock",
		 s->run_dir);
	snprintf(s->eng_path, sizeof s->eng_path, "%s/engined.sock",
		 s->run_dir);
	snprintf(s->eng_url, sizeof s->eng_url, "ipc://%s", s->eng_path);
	if (strlen(s->eng_path) >=
	    sizeof(((struct sockaddr_un *)0)->sun_path)) {
		moor_err("run dir %s: socket paths must be under 108 bytes",
			 s->run_dir);
		rc = -ENAMETOOLONG;
		goto out;
	}

	rc = model_load(s);
	if (rc)
		goto out;
	const eng_layout *y = s->lay;
	s->seq.sec = calloc((size_t)y->n_sections + 1, sizeof *s->seq.sec);
	s->seq.view = calloc((size_t)y->n_views + 1, sizeof *s->seq.view);
	s->logits = malloc((size_t)s->vocab * sizeof *s->logits);
	s->gen = malloc((size_t)y->window * sizeof *s->gen);
	s->slots = calloc(PROTO_MAX_SLOTS, sizeof *s->slots);
	s->pend = calloc((size_t)y->window + 1, sizeof *s->pend);
	s->queue = calloc((size_t)cfg->queue_max + 1, sizeof *s->queue);
	if (!s->seq.sec || !s->seq.view || !s->logits || !s->gen || !s->slots ||
	    !s->pend || !s->queue) {
		rc = -ENOMEM;
		goto out;
	}

	rc = cached_open(s);
	if (rc) {
		moor_err("%s: %s", s->cached_url, moor_strerror(rc));
		goto out;
	}
	rc = cached_attach_first(s);
	if (rc == -EINTR) {
		rc = 0;
		goto out;
	}
	if (rc)
		goto out;

	rc = clients_open(s);
	if (rc)
		goto out;
	if (pthread_create(&rcv_th, NULL, receiver_main, s)) {
		rc = -EAGAIN;
		goto out;
	}
	rcv_started = 1;
	moor_info("serving on %s (pid %d)", s->eng_url, (int)getpid());

	worker_loop(s);

	/* stopping: what waits gets a clear answer */
	pthread_mutex_lock(&s->mu);
	s->stop = 1;
	while (s->qn > 0) {
		job *j = s->queue[--s->qn];
		send_done(s, j->pipe, j->m.h.req, PROTO_FINISH_ERROR,
			  -ESHUTDOWN, "engined is shutting down");
		job_free(j);
	}
	pthread_mutex_unlock(&s->mu);
	/* what waits for credit leaves first (a client that reads gets it in
	 * milliseconds); then NNG, which drops what a closing socket has not
	 * written yet, gets a moment for the last messages */
	if (!eng_out_drain(s->out, 2000))
		moor_warn("a client did not take its last messages in 2 s");
	struct timespec grace = {0, 100 * 1000 * 1000};
	nanosleep(&grace, NULL);
	rc = 0;
out:
	if (s->cs_open) {
		nng_close(s->cs);
		unlink(s->eng_path);
	}
	if (rcv_started)
		pthread_join(rcv_th, NULL);
	eng_out_free(s->out);
	pthread_mutex_lock(&s->mu);
	while (s->qn > 0)
		job_free(s->queue[--s->qn]);
	pthread_mutex_unlock(&s->mu);
	nng_close(s->cq);
	arenas_unmap(s);
	free(s->seq.sec);
	free(s->seq.view);
	free(s->logits);
	free(s->gen);
	free(s->slots);
	free(s->pend);
	free(s->queue);
	eng_model_free(s->model);
	if (s->kctx)
		kern_cpu_ops.destroy(s->kctx);
	if (sig_started) { /* wake it if no signal came, then join it */
		pthread_mutex_lock(&s->mu);
		s->exiting = 1;
		pthread_mutex_unlock(&s->mu);
		pthread_kill(sig_th, SIGTERM);
		pthread_join(sig_th, NULL);
	}
	pthread_mutex_destroy(&s->mu);
	pthread_cond_destroy(&s->cv);
	free(s);
	if (rc == 0)
		moor_info("stopped");
	return rc;
}
