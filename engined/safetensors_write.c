/* safetensors_write.c: the safetensors writer of safetensors_write.h, and an
 * atomic file write (temp file, fsync, rename, fsync of the directory). */
#include "safetensors_write.h"

#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "moor.h"
#include "ops.h"

#define ST_NDIM_MAX 8

/* ---- fault seam ---------------------------------------------------------- */

static int fault_n;

void st_fault_set(int nth)
{
	fault_n = nth;
}

/* True when the current step is the one chosen to fail. */
static int fault_hit(void)
{
	return fault_n > 0 && --fault_n == 0;
}

/* ---- atomic write -------------------------------------------------------- */

struct piece {
	const void *p;
	size_t len;
};

static int write_all(int fd, const void *buf, size_t len)
{
	const char *p = buf;
	while (len) {
		if (fault_hit())
			return -ENOSPC;
		size_t chunk = len < (1u << 30) ? len : (1u << 30);
		ssize_t w = write(fd, p, chunk);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		p += w;
		len -= (size_t)w;
	}
	return 0;
}

static int fsync_dir_of(const char *path)
{
	char dir[4096];
	const char *slash = strrchr(path, '/');
	if (!slash)
		snprintf(dir, sizeof dir, ".");
	else if (slash == path)
		snprintf(dir, sizeof dir, "/");
	else
		snprintf(dir, sizeof dir, "%.*s", (int)(slash - path), path);
	int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	int rc = 0;
	if (fault_hit())
		rc = -EIO;
	else if (fsync(fd) < 0)
		rc = -errno;
	close(fd);
	return rc;
}

/* Writes the pieces to path atomically. On failure before the rename PATH
 * is untouched and the temporary is gone; if only the final fsync of the
 * directory fails, PATH holds the new file but may not survive a crash. */
static int atomic_write(const char *path, const struct piece *pc, size_t n,
			char *err)
{
	size_t pl = strlen(path);
	char *tmp = malloc(pl + 16);
	if (!tmp) {
		moor_errf(err, "%s: out of memory", path);
		return -ENOMEM;
	}
	memcpy(tmp, path, pl);
	memcpy(tmp + pl, ".tmp.XXXXXX", 12);
	int fd = mkstemp(tmp);
	if (fd < 0) {
		int e = errno;
		moor_errf(err, "%s: creating a temporary file: %s", path,
			  strerror(e));
		free(tmp);
		return -e;
	}
	const char *what = "write";
	int rc = 0;
	(void)fchmod(fd, 0644);
	for (size_t i = 0; i < n && !rc; i++)
		rc = write_all(fd, pc[i].p, pc[i].len);
	if (!rc) {
		what = "fsync";
		if (fault_hit())
			rc = -EIO;
		else if (fsync(fd) < 0)
			rc = -errno;
	}
	if (close(fd) < 0 && !rc) {
		what = "close";
		rc = -errno;
	}
	if (!rc) {
		what = "rename";
		if (fault_hit())
			rc = -EIO;
		else if (rename(tmp, path) < 0)
			rc = -errno;
	}
	if (rc) {
		moor_errf(err, "%s: %s of %s: %s", path, what, tmp,
			  strerror(-rc));
		unlink(tmp);
		free(tmp);
		return rc;
	}
	free(tmp);
	if ((rc = fsync_dir_of(path)))
		moor_errf(err, "%s: fsync of its directory: %s", path,
			  strerror(-rc));
	return rc;
}

int st_write_file(const char *path, const void *data, size_t len, char *err)
{
	struct piece p = {data, len};
	return atomic_write(path, &p, 1, err);
}

/* ---- safetensors --------------------------------------------------------- */

static const char *dtype_string(const st_entry *e, size_t *elsize)
{
	static const struct {
		const char *name;
		size_t size;
	} other[] = {
	    {"F64", 8},	 {"I64", 8},  {"U64", 8},     {"I32", 4},
	    {"U32", 4},	 {"I16", 2},  {"U16", 2},     {"I8", 1},
	    {"U8", 1},	 {"BOOL", 1}, {"F8_E4M3", 1}, {"F8_E5M2", 1},
	    {"BF16", 2}, {"F16", 2},  {"F32", 4},
	};
	if (e->dtype_name) {
		for (size_t i = 0; i < sizeof other / sizeof other[0]; i++)
			if (!strcmp(e->dtype_name, other[i].name)) {
				*elsize = other[i].size;
				return other[i].name;
			}
		return NULL;
	}
	switch (e->dtype) {
	case KERN_BF16:
		*elsize = 2;
		return "BF16";
	case KERN_F16:
		*elsize = 2;
		return "F16";
	case KERN_F32:
		*elsize = 4;
		return "F32";
	}
	return NULL;
}

int64_t st_entry_nbytes(const st_entry *e)
{
	size_t es;
	if (!dtype_string(e, &es) || e->ndim < 0 || e->ndim > ST_NDIM_MAX)
		return -1;
	int64_t n = (int64_t)es;
	for (int i = 0; i < e->ndim; i++) {
		if (e->shape[i] < 0 ||
		    (e->shape[i] && n > INT64_MAX / e->shape[i]))
			return -1;
		n *= e->shape[i];
	}
	return n;
}

static int cmp_entry(const void *a, const void *b)
{
	const st_entry *x = *(const st_entry *const *)a;
	const st_entry *y = *(const st_entry *const *)b;
	return strcmp(x->name, y->name);
}

int st_write(const char *path, const st_entry *entries, size_t n, char *err)
{
	int rc = 0;
	const st_entry **ord = malloc((n ? n : 1) * sizeof *ord);
	struct piece *pc = malloc((n + 2) * sizeof *pc);
	json_t *root = json_object(), *meta = json_object();
	char *hdr = NULL;
	if (!ord || !pc || !root || !meta)
		goto oom;
	for (size_t i = 0; i < n; i++)
		ord[i] = &entries[i];
	qsort(ord, n, sizeof *ord, cmp_entry);
	if (json_object_set_new(meta, "format", json_string("pt")) ||
	    json_object_set(root, "__metadata__", meta))
		goto oom;
	uint64_t off = 0;
	for (size_t i = 0; i < n; i++) {
		const st_entry *e = ord[i];
		size_t es;
		const char *ds = dtype_string(e, &es);
		int64_t nb = st_entry_nbytes(e);
		if (!e->name || !ds || nb < 0 ||
		    !strcmp(e->name, "__metadata__") ||
		    (i && !strcmp(e->name, ord[i - 1]->name)) ||
		    (nb && !e->data)) {
			moor_errf(err,
				  "%s: tensor %s: bad entry (dtype, shape, "
				  "data or duplicate name)",
				  path, e->name ? e->name : "(null)");
			rc = MOOR_ERANGE;
			goto out;
		}
		json_t *t = json_object(), *sh = json_array(),
		       *of = json_array();
		if (!t || !sh || !of) {
			json_decref(t);
			json_decref(sh);
			json_decref(of);
			goto oom;
		}
		int bad = json_object_set_new(t, "dtype", json_string(ds));
		for (int d = 0; d < e->ndim; d++)
			bad |= json_array_append_new(sh,
						     json_integer(e->shape[d]));
		bad |= json_array_append_new(of, json_integer((json_int_t)off));
		off += (uint64_t)nb;
		bad |= json_array_append_new(of, json_integer((json_int_t)off));
		bad |= json_object_set_new(t, "shape", sh);
		bad |= json_object_set_new(t, "data_offsets", of);
		bad |= json_object_set_new(root, e->name, t);
		if (bad)
			goto oom;
		pc[i + 2] = (struct piece){e->data, (size_t)nb};
	}
	char *js = json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER);
	if (!js)
		goto oom;
	size_t jl = strlen(js), hl = (jl + 7) & ~(size_t)7;
	hdr = malloc(8 + hl);
	if (!hdr) {
		free(js);
		goto oom;
	}
	for (int i = 0; i < 8; i++)
		hdr[i] = (char)((uint64_t)hl >> (8 * i));
	memcpy(hdr + 8, js, jl);
	memset(hdr + 8 + jl, ' ', hl - jl);
	free(js);
	pc[0] = (struct piece){hdr, 8 + hl};
	pc[1] = (struct piece){NULL, 0};
	rc = atomic_write(path, pc, n + 2, err);
	goto out;
oom:
	moor_errf(err, "%s: out of memory", path);
	rc = -ENOMEM;
out:
	free(hdr);
	json_decref(meta);
	json_decref(root);
	free(pc);
	free(ord);
	return rc;
}
