/* test_gw_nofile: gatewayd fits --max-conns to its descriptor limit
 * (main.c: fit_nofile). Under a hard RLIMIT_NOFILE of 300 (inherited from
 * this test) and the default --max-conns 4096, gatewayd says it serves at
 * most 236 connections (300 less GW_FDS_SPARE); with 236 connections held
 * open the next one is answered 503 too_many_connections (before: the
 * accept failed with EMFILE and the client was dropped unanswered); once
 * they close, /health is 200 again. */
#include <sys/resource.h>

#include "t.h"

#include "gwtest.h"
#include "harness.h"

#define HARD 300
#define SERVED (HARD - 64)

int main(int argc, char **argv)
{
	struct rlimit rl = {HARD, HARD};
	REQUIRE(setrlimit(RLIMIT_NOFILE, &rl) == 0, "setrlimit: %s",
		strerror(errno));
	gt_stack(argc, argv, "gwnofile", 120, NULL, NULL, NULL);
	char want[96];
	snprintf(want, sizeof want, "serving at most %d connections", SERVED);
	CHECK(h_log_has("gatewayd1", want), "gatewayd's log lacks '%s'", want);
	static int fd[SERVED];
	int opened = 0;
	for (int i = 0; i < SERVED; i++) {
		fd[i] = gt_connect(gt_.port);
		opened += fd[i] >= 0;
	}
	CHECK(opened == SERVED, "%d of %d connections opened", opened, SERVED);
	usleep(300 * 1000); /* accepted */
	int x = gt_connect(gt_.port);
	REQUIRE(x >= 0, "connect");
	char *raw;
	size_t n;
	gt_read_all(x, &raw, &n, 10);
	close(x);
	CHECK(raw && strstr(raw, "503") && strstr(raw, "too_many_connections"),
	      "connection %d past the limit: %.200s", SERVED + 1,
	      raw ? raw : "(nothing)");
	free(raw);
	for (int i = 0; i < SERVED; i++)
		if (fd[i] >= 0)
			close(fd[i]);
	CHECK(gt_wait_health(gt_.port, 200, 20) == 200,
	      "not green after the connections closed");
	return h_done("test_gw_nofile");
}
