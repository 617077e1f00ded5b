/* mountns.h: a tmpfs of the test's own, in a mount namespace of its own
 * (test_disk_damage's full disk, test_shm_room's small /dev/shm). Where
 * the process is not root a user namespace maps it to root inside; where
 * neither can be made the caller skips that part. Nothing mounted inside
 * propagates back to the machine's mounts. */
#ifndef MOOR_TEST_MOUNTNS_H
#define MOOR_TEST_MOUNTNS_H

#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <unistd.h>

static inline int mountns_write(const char *file, const char *text)
{
	int fd = open(file, O_WRONLY);
	if (fd < 0)
		return -1;
	ssize_t n = write(fd, text, strlen(text));
	close(fd);
	return n == (ssize_t)strlen(text) ? 0 : -1;
}

/* Enters the namespace and makes every mount private; 0, or -1. */
static inline int mountns_enter(void)
{
	uid_t uid = getuid();
	gid_t gid = getgid();
	if (unshare(CLONE_NEWNS)) {
		if (unshare(CLONE_NEWUSER | CLONE_NEWNS))
			return -1;
		char m[64];
		snprintf(m, sizeof m, "0 %u 1", (unsigned)uid);
		mountns_write("/proc/self/setgroups", "deny");
		if (mountns_write("/proc/self/uid_map", m))
			return -1;
		snprintf(m, sizeof m, "0 %u 1", (unsigned)gid);
		if (mountns_write("/proc/self/gid_map", m))
			return -1;
	}
	return mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) ? -1 : 0;
}

/* A tmpfs of `size` ("4m") and `mode` ("0700") at `at` (inside the
 * namespace); 0, or -1 (errno). */
static inline int mountns_tmpfs(const char *at, const char *size,
				const char *mode)
{
	char o[64];
	snprintf(o, sizeof o, "size=%s,mode=%s", size, mode);
	return mount("tmpfs", at, "tmpfs", MS_NOSUID | MS_NODEV, o);
}

#endif
