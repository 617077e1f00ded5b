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

int dfile_write(int dirfd, const char *name, const dfile_part *parts, int n,
		int no_dir_sync, char *err)
{
	char tmp[300];
	if (snprintf(tmp, sizeof tmp, "%s.tmp", name) >= (int)sizeof tmp)
		return fail(err, MOOR_ERANGE, "write", name);
	int fd = openat(dirfd, tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC,
			0600);
	if (fd < 0)
		return fail(err, -errno, "create", tmp);
	int rc = 0;
	const char *what = "write";
	for (int i = 0; i < n && !rc; i++)
		rc = write_all(fd, tmp, parts[i].p, parts[i].n);
	if (!rc) {
		what = "fsync";
		rc = fault(DFILE_OP_FSYNC, tmp);
		if (!rc && fdatasync(fd) < 0)
			rc = -errno;
	}
	if (!rc)
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

static int read_fd(int fd, const char *name, uint64_t off, void *dst,
		   uint64_t n)
{
	int f = fault(DFILE_OP_READ, name);
	if (f < 0)
		return f;
	char *b = dst;
	while (n) {
		ssize_t r = pread(fd, b, n > (1u << 30) ? (1u << 30) : n,
				  (off_t)off);
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
