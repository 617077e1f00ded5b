/* test_run_dir_checked: cached refuses a run directory that group or
 * others may write (where another user could plant a socket or steal a
 * lock), saying which mode it found and what to do, and exits non-zero;
 * the same directory made 0700 is served. (A directory of another user
 * is refused alike: moor_run_dir_check compares the owner with the
 * process's uid.)
 *
 *   test_run_dir_checked CACHED */
#include "t.h"

#include "harness.h"

int main(int argc, char **argv)
{
	REQUIRE(argc == 2, "usage: %s CACHED", argv[0]);
	h_init("rundir", 60);
	const char *run = h_subdir("open");
	REQUIRE(chmod(run, 0777) == 0, "chmod");
	char *a[] = {argv[1], "--run-dir", (char *)run, "--device",
		     (char *)h_device(), H_CACHED_BUDGETS, NULL};
	pid_t pid = h_spawn("cached1", a);
	int st = h_wait_exit(pid, 20);
	CHECK(st >= 0 && WIFEXITED(st) && WEXITSTATUS(st) != 0,
	      "cached on a 0777 run dir: status %d", st);
	CHECK(h_log_has("cached1", "mode 777") &&
		  h_log_has("cached1", "group- or world-writable"),
	      "the refusal does not say why");
	CHECK(!h_exists(run, "cached.sock"), "a socket was made anyway");
	REQUIRE(chmod(run, 0700) == 0, "chmod");
	pid = h_cached(argv[1], run, "cached2");
	CHECK(pid > 0, "cached on the 0700 dir");
	return t_done("test_run_dir_checked");
}
