/* util.c: the helpers of util.h. */
#include "util.h"

#include "moor.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

int moor_run_dir_check(const char *run_dir, char *err)
{
	struct stat st;
	if (stat(run_dir, &st)) {
		int e = errno;
		moor_errf(err, "run dir %s: %s", run_dir, strerror(e));
		return -e;
	}
	if (!S_ISDIR(st.st_mode)) {
		moor_errf(err, "run dir %s is not a directory", run_dir);
		return -ENOTDIR;
	}
	/* sockets and locks in a directory another user owns, or may write,
	 * can be replaced under us (a fake engined.sock, a stolen lock) */
	if (st.st_uid != geteuid()) {
		moor_errf(err,
			  "run dir %s belongs to uid %u, not to this process "
			  "(uid %u)",
			  run_dir, (unsigned)st.st_uid, (unsigned)geteuid());
		return -EPERM;
	}
	if (st.st_mode & 022) {
		moor_errf(err,
			  "run dir %s has mode %03o: it must not be group- or "
			  "world-writable (chmod go-w)",
			  run_dir, (unsigned)(st.st_mode & 0777));
		return -EPERM;
	}
	return 0;
}

int moor_run_lock(const char *run_dir, const char *name)
{
	char err[MOOR_ERRLEN];
	int rc = moor_run_dir_check(run_dir, err);
	if (rc) {
		moor_err("%s", err);
		return rc;
	}
	char p[4096];
	int n = snprintf(p, sizeof p, "%s/%s.lock", run_dir, name);
	if (n < 0 || (size_t)n >= sizeof p)
		return -ENAMETOOLONG;
	int fd = open(p, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (fd < 0)
		return -errno;
	if (flock(fd, LOCK_EX | LOCK_NB)) {
		int e = errno == EWOULDBLOCK ? -EADDRINUSE : -errno;
		close(fd);
		return e;
	}
	return fd;
}

int moor_parse_u32(const char *s, uint32_t *out)
{
	uint64_t v = 0;
	if (!s || !*s)
		return -EINVAL;
	for (const char *c = s; *c; c++) {
		if (*c < '0' || *c > '9')
			return -EINVAL;
		v = v * 10 + (uint64_t)(*c - '0');
		if (v > UINT32_MAX)
			return -EINVAL;
	}
	*out = (uint32_t)v;
	return 0;
}

static int hexval(int ch)
{
	if (ch >= '0' && ch <= '9')
		return ch - '0';
	if (ch >= 'a' && ch <= 'f')
		return ch - 'a' + 10;
	if (ch >= 'A' && ch <= 'F')
		return ch - 'A' + 10;
	return -1;
}

int moor_unhex(const char *s, size_t n, void *out)
{
	unsigned char *b = out;
	for (size_t i = 0; i < n; i++) {
		int hi = hexval(s[2 * i]);
		int lo = hi < 0 ? -1 : hexval(s[2 * i + 1]);
		if (lo < 0)
			return -EINVAL;
		b[i] = (unsigned char)(hi << 4 | lo);
	}
	return 0;
}

void moor_hex(const void *p, size_t n, char *out)
{
	static const char d[] = "0123456789abcdef";
	const unsigned char *b = p;
	for (size_t i = 0; i < n; i++) {
		out[2 * i] = d[b[i] >> 4];
		out[2 * i + 1] = d[b[i] & 15];
	}
	out[2 * n] = 0;
}
