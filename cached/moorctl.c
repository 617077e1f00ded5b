/* moorctl.c: the operators' command for cached's admin socket.
 *
 *   moorctl [--run-dir DIR] [--timeout-ms N] stats
 *       prints every cache's counters and bytes as JSON (indented)
 *   moorctl [--run-dir DIR] [--timeout-ms N] clear [--tier T]
 *       empties one tier (all, resident, end, stash, pin, park, store;
 *       default all)
 *
 * Exit status: 0 done, 1 cached failed or is not reachable, 2 usage.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>
#include <nng/nng.h>
#include <nng/protocol/reqrep0/req.h>

#include "moor.h"
#include "net.h"
#include "proto.h"

static const char *const tiers[] = {"all", "resident", "end",  "stash",
				    "pin", "park",     "store"};

static void usage(FILE *f)
{
	fprintf(f, "usage: moorctl [--run-dir DIR] [--timeout-ms N] stats\n"
		   "       moorctl [--run-dir DIR] [--timeout-ms N] clear "
		   "[--tier all|resident|end|stash|pin|park|store]\n");
}

int main(int argc, char **argv)
{
	moor_log_set_name("moorctl");
	char run_dir[512] = "";
	const char *tier = "all";
	int timeout_ms = 5000;
	static const struct option lo[] = {
	    {"run-dir", 1, 0, 'R'}, {"timeout-ms", 1, 0, 'T'},
	    {"tier", 1, 0, 't'},    {"help", 0, 0, 'h'},
	    {0, 0, 0, 0},
	};
	int o;
	/* "+": options before the command, and the command's after it */
	while ((o = getopt_long(argc, argv, "", lo, NULL)) != -1) {
		switch (o) {
		case 'R':
			snprintf(run_dir, sizeof run_dir, "%s", optarg);
			break;
		case 'T':
			timeout_ms = atoi(optarg);
			break;
		case 't':
			tier = optarg;
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (optind != argc - 1) {
		usage(stderr);
		return 2;
	}
	const char *cmd = argv[optind];
	int is_stats = !strcmp(cmd, "stats"), is_clear = !strcmp(cmd, "clear");
	if (!is_stats && !is_clear) {
		fprintf(stderr, "moorctl: unknown command '%s'\n", cmd);
		usage(stderr);
		return 2;
	}
	if (is_clear) {
		size_t i;
		for (i = 0; i < sizeof tiers / sizeof tiers[0]; i++)
			if (!strcmp(tier, tiers[i]))
				break;
		if (i == sizeof tiers / sizeof tiers[0]) {
			fprintf(stderr,
				"moorctl: unknown tier '%s' (expected all, "
				"resident, end, stash, pin, park or store)\n",
				tier);
			return 2;
		}
	}
	if (timeout_ms <= 0)
		timeout_ms = 5000;
	if (!run_dir[0]) 
		moor_run_dir_default(run_dir, sizeof run_dir);
	char url[600];
	snprintf(url, sizeof url, "ipc://%s/admin.sock", run_dir);

	nng_socket s;
	int rv = nng_req0_open(&s);
	if (rv == 0)
		rv = nng_dial(s, url, NULL, 0);
	if (rv) {
		fprintf(stderr, "moorctl: cached is not reachable at %s: %s\n",
			url, nng_strerror(rv));
		return 1;
	}
	proto_msg q = {0}, rep = {0};
	q.h.req = (uint64_t)getpid();
	if (is_stats) {
		q.h.type = PROTO_STATS;
	} else {
		q.h.type = PROTO_CLEAR;
		q.u.clear.tier = (char *)tier;
	}
	rv = proto_call(s, &q, &rep, timeout_ms);
	int status = 0;
	if (rv) {
		if (rep.h.type == PROTO_ERROR && rep.u.error.msg)
			fprintf(stderr, "moorctl: cached: %s\n",
				rep.u.error.msg);
		else
			fprintf(stderr, "moorctl: %s: %s\n", url,
				moor_strerror(rv));
		status = 1;
	} else if (is_stats) {
		if (rep.h.type != PROTO_STATS_OK || !rep.u.text.text) {
			fprintf(stderr, "moorctl: cached answered %s\n",
				proto_type_name(rep.h.type));
			status = 1;
		} else {
			json_error_t je;
			json_t *j = json_loads(rep.u.text.text, 0, &je);
			char *out = j ? json_dumps(j, JSON_INDENT(2) |
							  JSON_PRESERVE_ORDER)
				      : NULL;
			printf("%s\n", out ? out : rep.u.text.text);
			free(out);
			json_decref(j);
		}
	} else {
		printf("cleared %s\n", tier);
	}
	proto_msg_fini(&rep);
	nng_close(s);
	return status;
}
