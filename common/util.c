/* util.c: the helpers of util.h. */
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/file.h>
#include <unistd.h>

int moor_run_lock(const char *run_dir, const char *name)
{
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
