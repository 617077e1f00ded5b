/* test_gw_openai_sdk: the openai npm SDK (.oracles/node_modules/openai, in
 * node) against the running stack: a non-streamed chat, the same streamed
 * (one id, same text, usage), chats with tools (a request with tools, a
 * history with a call and its result, streamed), logprobs (a chat's,
 * whole and streamed alike; a legacy completion's), a follow-up turn whose
 * usage shows cached tokens, the SDK's typed errors from our error shape,
 * the model list. The script is openai_sdk.mjs; node is $NODE or node. A
 * machine without node or the oracles fails this test, unless it has none
 * by design (MOOR_NO_ORACLES=1: it skips, saying so).
 *
 *   test_gw_openai_sdk CACHED ENGINED GATEWAYD MODEL_DIR
 */
#include "t.h"

#include "gwtest.h"
#include "harness.h"

int main(int argc, char **argv)
{
	const char *node =
	    getenv("NODE") && *getenv("NODE") ? getenv("NODE") : "node";
	char pkg[600], script[600], port[16], cmd[700];
	snprintf(pkg, sizeof pkg,
		 "%s/.oracles/node_modules/openai/package.json", t_src());
	if (access(pkg, R_OK) != 0)
		T_ORACLE_MISSING("the openai SDK is missing (%s): run "
				 "deploy/setup",
				 pkg);
	snprintf(cmd, sizeof cmd, "'%s' --version >/dev/null 2>&1", node);
	if (system(cmd) != 0)
		T_ORACLE_MISSING("node is missing (%s)", node);
	gt_stack(argc, argv, "gwsdk", 180, NULL, NULL, NULL);
	snprintf(script, sizeof script, "%s/tests/gateway/openai_sdk.mjs",
		 t_src());
	snprintf(port, sizeof port, "%d", gt_.port);
	/* node found on PATH: run through /usr/bin/env */
	char *av[] = {"/usr/bin/env", (char *)node,    script,
		      port,	      (char *)t_src(), NULL};
	pid_t pid = h_spawn("node", av);
	int st = h_wait_exit(pid, 120);
	CHECK(st >= 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0,
	      "the SDK script failed (status %d)", st);
	CHECK(h_log_has("node", "openai sdk: ok"), "the script did not finish");

	{
		char log[300];
		snprintf(log, sizeof log, "%s/node.log", gt_.run);
		FILE *f = fopen(log, "r");
		char line[1024];
		while (f && fgets(line, sizeof line, f))
			fputs(line, stdout);
		if (f)
			fclose(f);
	}
	return h_done("test_gw_openai_sdk");
}
