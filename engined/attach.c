/* attach.c: cached's arenas in engined (serve_int.h). The device arena
 * comes as HELLO_OK says: a shm name (the CPU backend maps it) or a CUDA
 * IPC handle (the CUDA backend opens it); either way through the backend's
 * import_ipc, so this file knows no backend. The host arena is shm, mapped
 * (cached's mover is what copies to and from it). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "moor.h"
#include "serve_int.h"

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

void srv_arenas_unmap(srv *s)
{
	if (s->dev_k)
		s->ops->unimport(s->kctx, s->dev_k);
	if (s->host)
		munmap(s->host, s->host_size);
	s->host = s->dev_k = NULL;
	s->dev_size = s->host_size = 0;
	s->attached = 0;
}

/* Takes HELLO_OK: maps both arenas and points the sequence's buffers at the
 * offsets, each checked against the arena. */
int srv_arenas_attach(srv *s, const proto_hello_ok *h, char *err)
{
	const eng_layout *y = s->lay;
	const kern_ops *o = s->ops;
	srv_arenas_unmap(s);
	if ((int)h->n_sec != y->n_sections || (int)h->n_view != y->n_views) {
		moor_errf(err,
			  "HELLO_OK carries %u sections and %u views, "
			  "the layout has %d and %d",
			  h->n_sec, h->n_view, y->n_sections, y->n_views);
		return MOOR_EFORMAT;
	}
	kern_ipc ipc = {.kind = h->dev_kind,
			.device = h->dev_device,
			.size = h->dev_size};
	_Static_assert((int)PROTO_ARENA_SHM == (int)KERN_IPC_SHM &&
			   (int)PROTO_ARENA_CUDA == (int)KERN_IPC_CUDA &&
			   PROTO_IPC_HANDLE_BYTES == KERN_IPC_HANDLE_BYTES,
		       "proto's arena kinds are ops.h's");
	if (h->dev_kind == PROTO_ARENA_SHM) {
		if (!h->dev_arena ||
		    strlen(h->dev_arena) >= sizeof ipc.name) {
			moor_errf(err, "HELLO_OK: device arena name '%s' is "
				       "not a shm name",
				  h->dev_arena ? h->dev_arena : "");
			return MOOR_EFORMAT;
		}
		snprintf(ipc.name, sizeof ipc.name, "%s", h->dev_arena);
	} else if (h->dev_kind == PROTO_ARENA_CUDA) {
		memcpy(ipc.handle, h->dev_handle, sizeof ipc.handle);
	} else {
		moor_errf(err, "HELLO_OK: device arena of unknown kind %u",
			  h->dev_kind);
		return MOOR_EFORMAT;
	}
	char why[MOOR_ERRLEN] = "";
	double t0 = moor_now();
	int rc = o->import_ipc(s->kctx, &ipc, &s->dev_k, why);
	if (rc) {
		moor_errf(err, "device arena %s: backend %s cannot import it: "
			       "%s",
			  h->dev_arena ? h->dev_arena : "", o->name,
			  why[0] ? why : moor_strerror(rc));
		s->dev_k = NULL;
		return rc;
	}
	s->dev_size = h->dev_size;
	moor_debug("imported the device arena (%s, %.1f MiB) in %.1f ms",
		   h->dev_kind == PROTO_ARENA_CUDA ? "CUDA IPC" : "shm",
		   (double)h->dev_size / (1 << 20), (moor_now() - t0) * 1e3);
	rc = shm_map(h->host_arena, h->host_size, &s->host, err);
	if (rc) {
		srv_arenas_unmap(s);
		return rc;
	}
	s->host_size = h->host_size;
	for (int i = 0; i < y->n_sections; i++) {
		uint64_t off = h->sec_off[i], n = y->sec[i].bytes;
		if (off > s->dev_size || n > s->dev_size - off) {
			moor_errf(err,
				  "section %d (%s) at %llu+%llu is outside "
				  "the %llu-byte device arena",
				  i, y->sec[i].name, (unsigned long long)off,
				  (unsigned long long)n,
				  (unsigned long long)s->dev_size);
			srv_arenas_unmap(s);
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
			srv_arenas_unmap(s);
			return MOOR_ERANGE;
		}
		s->seq.view[i] = kern_at(s->dev_k, off);
	}
	s->seq.len = 0;
	s->attached = 1;
	return 0;
}
