/* moorctl.c: the operators' command for cached's admin socket.
 *
 *   moorctl [--run-dir DIR] [--timeout-ms N] stats
 *       prints every cache's counters and bytes as JSON (indented)
 *   moorctl [--run-dir DIR] [--timeout-ms N] clear [--tier T]
 *       empties one tier (PROTO_CLEAR_TIER_LIST: a tier's name, ram or
 *       all; default ram); cached refuses "spill" or "disk" when it runs
 *       without that tier (exit 1, its reason printed), "all" empties
 *       whichever tiers it has
 *   moorctl [--run-dir DIR] [--timeout-ms N] peek --ids 1,2,3 [--session S]
 *       where a prompt of these key ids would resume, as JSON: {"tier",
 *       "cached" (the start line), "tokens", "taint" (null: none),
 *       "restore_bytes", "read_ms" (the NVMe tiers' read at their measured
 *       rate; 0 for RAM)}; cached changes nothing
 *
 *   moorctl journal --tail [N] --state-dir DIR
 *       the last N (10) lines of gatewayd's journal (DIR/journal.jsonl,
 *       then journal.jsonl.1 for what the rotation moved), one JSON object
 *       a turn; needs no daemon
 *
 * Exit status: 0 done, 1 cached failed or is not reachable, 2 usage.
 */
#include <errno.h>
#include <stdint.h>
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

static void usage(FILE *f)
{
	fprintf(f, "usage: moorctl [--run-dir DIR] [--timeout-ms N] stats\n"
		   "       moorctl [--run-dir DIR] [--timeout-ms N] clear "
		   "[--tier TIER]   (" PROTO_CLEAR_TIER_LIST "; default ram)\n"
		   "       moorctl [--run-dir DIR] [--timeout-ms N] peek "
		   "--ids 1,2,3 [--session S]\n"
		   "       moorctl journal --tail [N] --state-dir DIR\n");
}

/* The last n lines of DIR/journal.jsonl (after its rotated .1). */
static int journal_tail(const char *dir, long n)
{
	size_t cap = 1 << 16, len = 0;
	char *b = malloc(cap);
	int found = 0;
	for (int k = 1; k >= 0 && b; k--) {
		char path[600];
		snprintf(path, sizeof path, "%s/journal.jsonl%s", dir,
			 k ? ".1" : "");
		FILE *f = fopen(path, "rb");
		if (!f) {
			if (errno != ENOENT) {
				fprintf(stderr, "moorctl: %s: %s\n", path,
					strerror(errno));
				free(b);
				return 1;
			}
			continue;
		}
		found = 1;
		for (;;) {
			if (len == cap) {
				char *nb = realloc(b, cap *= 2);
				if (!nb) {
					free(b);
					b = NULL;
					break;
				}
				b = nb;
			}
			size_t r = fread(b + len, 1, cap - len, f);
			if (!r)
				break;
			len += r;
		}
		fclose(f);
	}
	if (!b) {
		fprintf(stderr, "moorctl: out of memory\n");
		return 1;
	}
	if (!found) {
		free(b);
		fprintf(stderr, "moorctl: no journal in %s\n", dir);
		return 1;
	}
	size_t i = len;
	if (i && b[i - 1] == '\n')
		i--;
	for (long seen = 0; i > 0; i--)
		if (b[i - 1] == '\n' && ++seen == n)
			break;
	fwrite(b + i, 1, len - i, stdout);
	free(b);
	return 0;
}

/* One admin call: q's answer into *rep, which the caller releases with
 * proto_msg_fini (on failure too). On failure the reason is printed and 1
 * returned: cached's own words where it refused (a CLEAR of a tier it runs
 * without says which flag left it out). */
static int call(nng_socket s, const char *url, proto_msg *q, proto_msg *rep,
		int timeout_ms)
{
	int rv = proto_call(s, q, rep, timeout_ms);
	if (!rv)
		return 0;
	if (rep->h.type == PROTO_ERROR && rep->u.error.msg)
		fprintf(stderr, "moorctl: cached: %s\n", rep->u.error.msg);
	else
		fprintf(stderr, "moorctl: %s: %s\n", url, moor_strerror(rv));
	return 1;
}

/* "1,2,3" into a heap array; -1 on a bad list. */
static int parse_ids(const char *s, int32_t **out, uint32_t *n)
{
	uint32_t cap = 16, k = 0;
	int32_t *v = malloc(cap * sizeof *v);
	if (!v)
		return -1;
	const char *p = s;
	while (*p) {
		char *end;
		errno = 0;
		long long x = strtoll(p, &end, 10);
		if (end == p || errno || x < INT32_MIN || x > INT32_MAX ||
		    (*end && *end != ',') || k == PROTO_MAX_IDS) {
			free(v);
			return -1;
		}
		if (k == cap) {
			int32_t *w = realloc(v, 2 * cap * sizeof *v);
			if (!w) {
				free(v);
				return -1;
			}
			v = w;
			cap *= 2;
		}
		v[k++] = (int32_t)x;
		p = *end ? end + 1 : end;
		if (*end && !*p) {
			free(v);
			return -1; /* a trailing comma */
		}
	}
	if (!k) {
		free(v);
		return -1;
	}
	*out = v;
	*n = k;
	return 0;
}

int main(int argc, char **argv)
{
	moor_log_set_name("moorctl");
	char run_dir[512] = "";
	const char *tier = "ram", *ids_arg = NULL, *session = NULL;
	int timeout_ms = 5000, tail = 0;
	const char *state_dir = NULL;
	static const struct option lo[] = {
	    {"run-dir", 1, 0, 'R'}, {"timeout-ms", 1, 0, 'T'},
	    {"tier", 1, 0, 't'},    {"help", 0, 0, 'h'},
	    {"ids", 1, 0, 'i'},     {"session", 1, 0, 's'},
	    {"tail", 0, 0, 'L'},    {"state-dir", 1, 0, 'D'},
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
		case 'i':
			ids_arg = optarg;
			break;
		case 's':
			session = optarg;
			break;
		case 'L':
			tail = 1;
			break;
		case 'D':
			state_dir = optarg;
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (optind < argc && !strcmp(argv[optind], "journal")) {
		long n = 10;
		if (optind + 1 < argc) {
			char *e;
			n = strtol(argv[optind + 1], &e, 10);
			if (*e || n <= 0 || optind + 2 != argc) {
				usage(stderr);
				return 2;
			}
		}
		if (!tail || !state_dir) {
			fprintf(stderr, "moorctl: journal needs --tail and "
					"--state-dir DIR\n");
			return 2;
		}
		return journal_tail(state_dir, n);
	}
	if (optind != argc - 1) {
		usage(stderr);
		return 2;
	}
	const char *cmd = argv[optind];
	int is_stats = !strcmp(cmd, "stats"), is_clear = !strcmp(cmd, "clear");
	int is_peek = !strcmp(cmd, "peek");
	if (!is_stats && !is_clear && !is_peek) {
		fprintf(stderr, "moorctl: unknown command '%s'\n", cmd);
		usage(stderr);
		return 2;
	}
	if (is_clear) {
		if (!proto_clear_tier_ok(tier)) {
			fprintf(stderr,
				"moorctl: unknown tier '%s' (expected "
				"one of " PROTO_CLEAR_TIER_LIST ")\n",
				tier);
			return 2;
		}
	}
	int32_t *ids = NULL;
	uint32_t n_ids = 0;
	if (is_peek) {
		if (!ids_arg) {
			fprintf(stderr, "moorctl: peek needs --ids 1,2,3\n");
			return 2;
		}
		if (parse_ids(ids_arg, &ids, &n_ids)) {
			fprintf(stderr,
				"moorctl: --ids '%.64s': expected token ids "
				"separated by commas (1,2,3)\n",
				ids_arg);
			return 2;
		}
		if (session && strlen(session) > PROTO_MAX_STR) {
			fprintf(stderr, "moorctl: --session: over %d bytes\n",
				PROTO_MAX_STR);
			free(ids);
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
		free(ids);
		return 1;
	}
	proto_msg q = {0}, rep = {0};
	q.h.req = (uint64_t)getpid();
	if (is_stats) {
		q.h.type = PROTO_STATS;
	} else if (is_peek) {
		q.h.type = PROTO_PEEK;
		q.u.peek.session = (char *)session;
		q.u.peek.n_ids = n_ids;
		q.u.peek.ids = ids;
	} else {
		q.h.type = PROTO_CLEAR;
		q.u.clear.tier = (char *)tier;
	}
	int status = 0;
	if (call(s, url, &q, &rep, timeout_ms)) {
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
	} else if (is_peek) {
		if (rep.h.type != PROTO_PEEK_OK) {
			fprintf(stderr, "moorctl: cached answered %s\n",
				proto_type_name(rep.h.type));
			status = 1;
		} else {
			const proto_peek_ok *p = &rep.u.peek_ok;
			json_t *j = json_pack(
			    "{s:s, s:I, s:I, s:o, s:I, s:f}", "tier",
			    proto_tier_name(p->tier), "cached",
			    (json_int_t)p->cached, "tokens",
			    (json_int_t)p->tokens, "taint",
			    p->taint == UINT64_MAX
				? json_null()
				: json_integer((json_int_t)p->taint),
			    "restore_bytes", (json_int_t)p->restore_bytes,
			    "read_ms", (double)p->read_us / 1e3);
			char *out = j ? json_dumps(j, JSON_INDENT(2) |
							  JSON_PRESERVE_ORDER)
				      : NULL;
			if (out)
				printf("%s\n", out);
			else
				status = 1;
			free(out);
			json_decref(j);
		}
	} else {
		printf("cleared %s\n", tier);
	}
	free(ids);
	proto_msg_fini(&rep);
	nng_close(s);
	return status;
}
