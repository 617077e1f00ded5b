/* test_shm_room: shm that cannot SIGBUS (issue 13), in a private 32 MiB
 * tmpfs mounted on /dev/shm in a mount namespace of this test's own (skips
 * where no namespace can be made).
 *
 *   - a block the filesystem has no room for is refused (MOOR_ENOSPACE)
 *     when it is allocated: before, arena_alloc handed out sparse pages
 *     and the first write to them was a SIGBUS (the test writes every
 *     block it is given);
 *   - a released block's whole pages go back (the object's st_blocks fall,
 *     arena_returned counts them), and a page shared with a live
 *     neighbour keeps the neighbour's bytes;
 *   - cached (on a 128 MiB /dev/shm) refuses arenas that do not fit,
 *     naming the sizes, and sizes its default arenas to fit (and says
 *     so), then serves and stops cleanly.
 *
 *   test_shm_room CACHED */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "t.h"

#include "arena.h"
#include "harness.h"
#include "moor.h"
#include "mountns.h"

#define MiB (1ull << 20)

static int shm_mount(const char *size)
{
	return mountns_tmpfs("/dev/shm", size, "1777");
}

/* A mount namespace with a 32 MiB tmpfs on /dev/shm; 0 or -1 (skip). */
static int private_shm(void)
{
	if (mountns_enter())
		return -1;
	return shm_mount("32m");
}

static uint64_t blocks_of(const char *name)
{
	char p[128];
	snprintf(p, sizeof p, "/dev/shm%s", name);
	struct stat st;
	return stat(p, &st) ? 0 : (uint64_t)st.st_blocks * 512;
}

static void test_arena(void)
{
	char err[MOOR_ERRLEN] = "";
	arena *a;
	REQUIRE(arena_create("/moor-room.a", 16 * MiB, &a, err) == 0, "%s",
		err);
	/* someone else takes 24 of the 32 MiB */
	int fd = open("/dev/shm/filler", O_RDWR | O_CREAT, 0600);
	REQUIRE(fd >= 0, "filler");
	char *z = calloc(1, MiB);
	for (int i = 0; i < 24; i++)
		REQUIRE(write(fd, z, MiB) == (ssize_t)MiB, "filler write");
	free(z);
	close(fd);
	uint64_t off;
	int rc = arena_alloc(a, 12 * MiB, &off);
	if (rc == 0) /* the old behaviour: this write is a SIGBUS */
		memset((char *)arena_base(a) + off, 1, 12 * MiB);
	CHECK(rc == MOOR_ENOSPACE,
	      "12 MiB with 8 free: %s (wanted the refusal)", moor_strerror(rc));
	CHECK(arena_refused(a) >= 1, "the refusal is not counted");
	uint64_t b0 = blocks_of("/moor-room.a");
	rc = arena_alloc(a, 4 * MiB, &off);
	REQUIRE(rc == 0, "4 MiB with 8 free: %s", moor_strerror(rc));
	memset((char *)arena_base(a) + off, 2, 4 * MiB);
	uint64_t b1 = blocks_of("/moor-room.a");
	CHECK(b1 >= b0 + 4 * MiB, "4 MiB reserved: %llu -> %llu bytes",
	      (unsigned long long)b0, (unsigned long long)b1);
	/* two small blocks sharing a page, after the big one */
	uint64_t s1, s2;
	REQUIRE(arena_alloc(a, 100, &s1) == 0 && arena_alloc(a, 100, &s2) == 0,
		"small blocks");
	memset((char *)arena_base(a) + s2, 0x5a, 100);
	arena_release(a, off);
	uint64_t b2 = blocks_of("/moor-room.a");
	CHECK(b2 + 4 * MiB - 8192 <= b1,
	      "the released 4 MiB did not go back: %llu -> %llu bytes",
	      (unsigned long long)b1, (unsigned long long)b2);
	CHECK(arena_returned(a) >= 4 * MiB - 8192, "returned %llu",
	      (unsigned long long)arena_returned(a));
	arena_release(a, s1);
	int kept = 1;
	for (int i = 0; i < 100; i++)
		kept &= ((unsigned char *)arena_base(a) + s2)[i] == 0x5a;
	CHECK(kept, "releasing a neighbour zeroed a live block's bytes");
	/* room again once the filler is gone (11 MiB: the free extent past
	 * the small block) */
	unlink("/dev/shm/filler");
	rc = arena_alloc(a, 11 * MiB, &off);
	CHECK(rc == 0, "11 MiB with the room back: %s", moor_strerror(rc));
	if (rc == 0)
		memset((char *)arena_base(a) + off, 3, 11 * MiB);
	arena_close(a);
}

/* cached on a 128 MiB /dev/shm (a container's is 64 MiB) */
static void test_cached(const char *cached, const char *run)
{
	REQUIRE(umount("/dev/shm") == 0 && shm_mount("128m") == 0,
		"remount /dev/shm: %s", strerror(errno));
	char rd[200];
	snprintf(rd, sizeof rd, "%s/run", run);
	char *const big[] = {(char *)cached, "--device", "shm", "--run-dir",
			     rd, "--device-gb", "0.5", "--host-gb", "0.25",
			     NULL};
	pid_t p = h_spawn("cached_big", big);
	int st = h_wait_exit(p, 20);
	CHECK(st >= 0 && WIFEXITED(st) && WEXITSTATUS(st) != 0,
	      "cached with 0.75 GiB of arenas on 32 MiB: status %d", st);
	CHECK(h_log_has("cached_big", "the arenas need 0.75 GiB") &&
		  h_log_has("cached_big", "/dev/shm has"),
	      "the refusal does not name the sizes");
	char *const dflt[] = {(char *)cached, "--device", "shm", "--run-dir",
			      rd, NULL};
	p = h_spawn("cached_default", dflt);
	CHECK(h_wait_ready("cached_default", "serving", rd, "admin.sock", p,
			   20) == 0,
	      "cached with its defaults on 32 MiB did not come up");
	CHECK(h_log_has("cached_default", "sized to device"),
	      "cached did not say it sized its arenas");
	kill(p, SIGTERM);
	st = h_wait_exit(p, 20);
	CHECK(st >= 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0,
	      "cached's stop: %d", st);
}

int main(int argc, char **argv)
{
	REQUIRE(argc == 2, "usage: %s CACHED", argv[0]);
	if (private_shm()) {
		printf("test_shm_room: no private mount namespace here (%s): "
		       "skipped\n",
		       strerror(errno));
		return 77;
	}
	const char *run = h_init("shmroom", 60);
	test_arena();
	test_cached(argv[1], run);
	return h_done("test_shm_room");
}
