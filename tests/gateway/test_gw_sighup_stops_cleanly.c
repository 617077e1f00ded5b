/* test_gw_sighup_stops_cleanly: SIGHUP (a closed terminal, a stray
 * `kill -HUP`) stops each daemon the way SIGTERM does: gatewayd, engined
 * and cached each exit 0 and leave no socket file behind. Before, SIGHUP's
 * default action killed them on the spot (no drain, stale sockets). */
#include <signal.h>
#include <stdlib.h>

#include "t.h"

#include "gwtest.h"
#include "harness.h"

static void hup(pid_t pid, const char *name, const char *sock)
{
	REQUIRE(kill(pid, SIGHUP) == 0, "kill %s", name);
	int st = h_wait_exit(pid, 30);
	CHECK(st >= 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0,
	      "%s on SIGHUP: status %d (%s)", name, st,
	      st >= 0 && WIFSIGNALED(st) ? "killed by a signal" : "exit");
	if (sock)
		CHECK(!h_exists(gt_.run, sock), "%s left %s behind", name,
		      sock);
}

int main(int argc, char **argv)
{
	gt_stack(argc, argv, "gwhup", 120, NULL, NULL, NULL);
	hup(gt_.gw, "gatewayd", NULL);
	hup(gt_.ed, "engined", "engined.sock");
	hup(gt_.cd, "cached", "cached.sock");
	return t_done("test_gw_sighup_stops_cleanly");
}
