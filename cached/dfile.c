/* dfile.c: crash-safe whole-file writes, reads, sweeps and the block sums
 * of the NVMe tiers (dfile.h). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dfile.h"
#include "moor.h"
#include "pool.h"

int (*dfile_fault)(int op, const char *name);

static int fault(int op, const char *name)
{
	return dfile_fault ? dfile_fault(op, name) : 0;
}

static int fail(char *err, int rc, const char *what, const char *name)
{
	if (err)
		moor_errf(err, "%s %s: %s", what, name, moor_strerror(rc));
	return rc;
}

int dfile_sync_dir(int dirfd, char *err)
{
	int rc = fault(DFILE_OP_FSYNC, ".");
	if (!rc && fsync(dirfd) < 0)
		rc = -errno;
	return rc ? fail(err, rc, "fsync of the directory", ".") : 0;
}

static int write_all(int fd, const char *name, const void *p, uint64_t n)
{
	const char *b = p;
	int f = fault(DFILE_OP_WRITE, name);
	if (f < 0)
		return f;
	if (f == DFILE_SHORT) {
		/* half of it lands, then the device refuses */
		uint64_t h = n / 2;
		while (h) {
			ssize_t w = write(fd, b, h);
			if (w <= 0)
				break;
			b += w;
			h -= (uint64_t)w;
		}
		return -EIO;
	}
	while (n) {
		ssize_t w = write(fd, b, n > (1u << 30) ? (1u << 30) : n);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (w == 0)
			return -EIO;
		b += w;
		n -= (uint64_t)w;
	}
	return 0;
}

/* The end of a write to tmp (fd open, rc its outcome so far): fdatasync,
 * the pages dropped (buffered), close, rename over name, the directory
 * fsynced unless no_dir_sync; on failure the .tmp goes. */
static int write_end(int dirfd, int fd, const char *tmp, const char *name,
		     int rc, int direct, int no_dir_sync, char *err)
{
	const char *what = "write";
	if (!rc) {
		what = "fsync";
		rc = fault(DFILE_OP_FSYNC, tmp);
		if (!rc && fdatasync(fd) < 0)
			rc = -errno;
	}
	if (!rc && !direct)
		(void)posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
	if (close(fd) < 0 && !rc)
		rc = -errno;
	if (!rc) {
		what = "rename";
		rc = fault(DFILE_OP_RENAME, name);
		if (!rc && renameat(dirfd, tmp, dirfd, name) < 0)
			rc = -errno;
	}
	if (rc) {
		unlinkat(dirfd, tmp, 0);
		return fail(err, rc, what, tmp);
	}
	return no_dir_sync ? 0 : dfile_sync_dir(dirfd, err);
}

static int tmp_name(char *tmp, size_t cap, const char *name)
{
	return snprintf(tmp, cap, "%s.tmp", name) >= (int)cap ? MOOR_ERANGE : 0;
}

int dfile_write(int dirfd, const char *name, const dfile_part *parts, int n,
		int no_dir_sync, char *err)
{
	char tmp[300];
	if (tmp_name(tmp, sizeof tmp, name))
		return fail(err, MOOR_ERANGE, "write", name);
	int fd =
	    openat(dirfd, tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0)
		return fail(err, -errno, "create", tmp);
	int rc = 0;
	for (int i = 0; i < n && !rc; i++)
		rc = write_all(fd, tmp, parts[i].p, parts[i].n);
	return write_end(dirfd, fd, tmp, name, rc, 0, no_dir_sync, err);
}

/* ---- O_DIRECT where the file system takes it ---- */

static int open_direct(int dirfd, const char *name, int flags, int *direct)
{
	int fd = openat(dirfd, name, flags | O_DIRECT | O_CLOEXEC, 0600);
	*direct = fd >= 0;
	if (fd < 0 && errno == EINVAL)
		fd = openat(dirfd, name, flags | O_CLOEXEC, 0600);
	return fd < 0 ? -errno : fd;
}

static int pwrite_all(int fd, const char *b, uint64_t n)
{
	uint64_t off = 0;
	while (off < n) {
		uint64_t k = n - off;
		ssize_t w = pwrite(fd, b + off, k > (1u << 30) ? (1u << 30) : k,
				   (off_t)off);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return w < 0 ? -errno : -EIO;
		off += (uint64_t)w;
	}
	return 0;
}

int dfile_write_direct(int dirfd, const char *name, void *buf, uint64_t n,
		       int no_dir_sync, int *direct, char *err)
{
	MOOR_ASSERT(((uintptr_t)buf & (DFILE_ALIGN - 1)) == 0);
	char tmp[300];
	if (tmp_name(tmp, sizeof tmp, name))
		return fail(err, MOOR_ERANGE, "write", name);
	int dir,
	    fd = open_direct(dirfd, tmp, O_WRONLY | O_CREAT | O_TRUNC, &dir);
	if (fd < 0)
		return fail(err, fd, "create", tmp);
	if (direct)
		*direct = dir;
	char *b = buf;
	uint64_t len = dir ? dfile_up4k(n) : n;
	memset(b + n, 0, (size_t)(dfile_up4k(n) - n));
	int rc = fault(DFILE_OP_WRITE, tmp);
	if (rc == DFILE_SHORT) {
		/* half of it lands, then the device refuses */
		(void)pwrite_all(fd, b, n / 2 / DFILE_ALIGN * DFILE_ALIGN);
		rc = -EIO;
	}
	if (!rc)
		rc = pwrite_all(fd, b, len);
	/* the padding off again: the file is dfile_write's n bytes */
	if (!rc && len != n && ftruncate(fd, (off_t)n) < 0)
		rc = -errno;
	return write_end(dirfd, fd, tmp, name, rc, dir, no_dir_sync, err);
}

int dfile_read_direct(int dirfd, const char *name, void *buf, uint64_t cap,
		      uint64_t *n, int *direct, char *err)
{
	MOOR_ASSERT(((uintptr_t)buf & (DFILE_ALIGN - 1)) == 0 &&
		    cap % DFILE_ALIGN == 0);
	*n = 0;
	int dir, fd = open_direct(dirfd, name, O_RDONLY, &dir);
	if (fd < 0)
		return fd == -ENOENT ? -ENOENT : fail(err, fd, "open", name);
	if (direct)
		*direct = dir;
	struct stat st;
	int rc = fstat(fd, &st) < 0 ? -errno : fault(DFILE_OP_READ, name);
	uint64_t size = rc ? 0 : (uint64_t)st.st_size;
	if (size > cap)
		size = cap;
	/* O_DIRECT reads whole lines: the last one comes back short, at the
	 * end of the file */
	uint64_t want = dir ? dfile_up4k(size) : size, got = 0;
	char *b = buf;
	while (!rc && got < size) {
		uint64_t k = want - got;
		ssize_t r = pread(fd, b + got, k > (1u << 30) ? (1u << 30) : k,
				  (off_t)got);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			rc = -errno;
		else if (r == 0)
			rc = MOOR_ETRUNC;
		else
			got += (uint64_t)r;
	}
	if (!dir)
		(void)posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
	close(fd);
	if (rc)
		return fail(err, rc, "read", name);
	*n = size;
	return 0;
}

static int read_fd(int fd, const char *name, uint64_t off, void *dst,
		   uint64_t n)
{
	int f = fault(DFILE_OP_READ, name);
	if (f < 0)
		return f;
	char *b = dst;
	while (n) {
		ssize_t r =
		    pread(fd, b, n > (1u << 30) ? (1u << 30) : n, (off_t)off);
		if (r < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (r == 0)
			return MOOR_ETRUNC;
		b += r;
		off += (uint64_t)r;
		n -= (uint64_t)r;
	}
	return 0;
}

int dfile_read(int dirfd, const char *name, uint64_t max, void **out,
	       uint64_t *n, char *err)
{
	*out = NULL;
	*n = 0;
	int fd = openat(dirfd, name, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return errno == ENOENT ? -ENOENT
				       : fail(err, -errno, "open", name);
	struct stat st;
	if (fstat(fd, &st) < 0) {
		int rc = -errno;
		close(fd);
		return fail(err, rc, "stat", name);
	}
	if ((uint64_t)st.st_size > max) {
		close(fd);
		return fail(err, MOOR_EFORMAT, "size of", name);
	}
	void *b = malloc(st.st_size ? (size_t)st.st_size : 1);
	if (!b) {
		close(fd);
		return fail(err, -ENOMEM, "read", name);
	}
	int rc = read_fd(fd, name, 0, b, (uint64_t)st.st_size);
	(void)posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
	close(fd);
	if (rc) {
		free(b);
		return fail(err, rc, "read", name);
	}
	*out = b;
	*n = (uint64_t)st.st_size;
	return 0;
}

int dfile_read_at(int dirfd, const char *name, uint64_t off, void *dst,
		  uint64_t n, char *err)
{
	int fd = openat(dirfd, name, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return fail(err, -errno, "open", name);
	int rc = read_fd(fd, name, off, dst, n);
	(void)posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
	close(fd);
	return rc ? fail(err, rc, "read", name) : 0;
}

static int ends_with(const char *s, const char *suf)
{
	size_t a = strlen(s), b = strlen(suf);
	return a >= b && !strcmp(s + a - b, suf);
}

int dfile_sweep_tmp(int dirfd)
{
	int d2 = dup(dirfd);
	if (d2 < 0)
		return 0;
	DIR *d = fdopendir(d2);
	if (!d) {
		close(d2);
		return 0;
	}
	rewinddir(d);
	int n = 0;
	struct dirent *e;
	while ((e = readdir(d)))
		if (ends_with(e->d_name, ".tmp") &&
		    unlinkat(dirfd, e->d_name, 0) == 0)
			n++;
	closedir(d);
	return n;
}

int dfile_rm_rf(int dirfd, const char *name)
{
	struct stat st;
	if (fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
		return errno == ENOENT ? 0 : -errno;
	if (!S_ISDIR(st.st_mode))
		return unlinkat(dirfd, name, 0) < 0 ? -errno : 0;
	int fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	DIR *d = fdopendir(fd);
	if (!d) {
		close(fd);
		return -errno;
	}
	struct dirent *e;
	while ((e = readdir(d)))
		if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
			(void)dfile_rm_rf(fd, e->d_name);
	closedir(d);
	return unlinkat(dirfd, name, AT_REMOVEDIR) < 0 ? -errno : 0;
}

uint64_t dfile_bytes(int dirfd, const char *name)
{
	struct stat st;
	if (fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
		return 0;
	if (!S_ISDIR(st.st_mode))
		return (uint64_t)st.st_size;
	int fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	DIR *d = fdopendir(fd);
	if (!d) {
		close(fd);
		return 0;
	}
	uint64_t n = 0;
	struct dirent *e;
	while ((e = readdir(d)))
		if (fstatat(fd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
		    S_ISREG(st.st_mode))
			n += (uint64_t)st.st_size;
	closedir(d);
	return n;
}

void dfile_sum2(const void *p, uint64_t n, uint64_t s[2])
{
	const uint8_t *b = p;
	uint64_t a = 0, w = 0, i = 0, nw = n / 4;
	for (; i < nw; i++) {
		uint32_t x;
		memcpy(&x, b + 4 * i, 4);
		a += x;
		w += (i + 1) * (uint64_t)x;
	}
	if (n % 4) {
		uint32_t x = 0;
		memcpy(&x, b + 4 * nw, n % 4);
		a += x;
		w += (nw + 1) * (uint64_t)x;
	}
	s[0] = a;
	s[1] = w;
}

/* A part of dfile_sum2_pieces: its bytes and its word offset in its piece
 * (q), then its own two sums. */
typedef struct sum_part {
	const uint8_t *p;
	uint64_t n, q;
	uint64_t s[2];
} sum_part;

static void sum_task(void *ctx, int i)
{
	sum_part *v = ctx;
	dfile_sum2(v[i].p, v[i].n, v[i].s);
}

#define SUM_PARTS_STACK 256

void dfile_sum2_pieces(const void *p, const uint64_t *len, uint32_t k,
		       uint64_t *s, uint64_t part, struct moor_pool *pool)
{
	if (!part)
		part = DFILE_SUM_PART;
	MOOR_ASSERT(part % 4 == 0);
	const uint8_t *b = p;
	uint64_t np = 0;
	for (uint32_t i = 0; i < k; i++)
		np += (len[i] + part - 1) / part;
	sum_part stack[SUM_PARTS_STACK], *v = stack;
	if (np > SUM_PARTS_STACK && moor_pool_threads(pool) > 1)
		v = malloc(np * sizeof *v);
	if (np <= 1 || moor_pool_threads(pool) <= 1 || !v ||
	    np > (uint64_t)INT32_MAX) {
		/* one thread (or no room for the parts): piece by piece */
		for (uint32_t i = 0; i < k; i++) {
			dfile_sum2(b, len[i], s + 2 * i);
			b += len[i];
		}
		if (v != stack)
			free(v);
		return;
	}
	uint64_t j = 0;
	for (uint32_t i = 0; i < k; i++) {
		for (uint64_t o = 0; o < len[i]; o += part, j++) {
			v[j].p = b + o;
			v[j].n = len[i] - o < part ? len[i] - o : part;
			v[j].q = o / 4;
		}
		b += len[i];
	}
	moor_pool_run(pool, (int)np, sum_task, v);
	j = 0;
	for (uint32_t i = 0; i < k; i++) {
		uint64_t a = 0, w = 0;
		for (uint64_t o = 0; o < len[i]; o += part, j++) {
			a += v[j].s[0];
			w += v[j].s[1] + v[j].q * v[j].s[0];
		}
		s[2 * i] = a;
		s[2 * i + 1] = w;
	}
	if (v != stack)
		free(v);
}
