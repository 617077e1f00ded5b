/* moor_client.c: drives engined through proto/ until the gateway exists:
 * one GENERATE, its STEPs, its DONE.
 *
 *   moor_client [--run-dir DIR] --ids 1,2,3 [--max-tokens N]
 *               [--temperature T] [--top-k K] [--top-p P] [--min-p P]
 *               [--seed S] [--session S] [--stop-ids a,b] [--ignore-eos]
 *               [--no-cache] [--cancel-after N] [--timeout-ms N]
 *
 * Prints the generated ids on one line, then one line
 *   done finish=length code=0 tier=2 prompt=178 cached=157 completion=8
 * Exit status: 0 a DONE came (whatever its finish), 1 none came (timeout,
 * engined went away), 2 usage.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "client.h"
#include "moor.h"
#include "serve.h"

static int parse_ids(const char *s, int32_t **out, uint32_t *n)
{
	uint32_t cap = 64, k = 0;
	int32_t *ids = malloc(cap * sizeof *ids);
	if (!ids)
		return -ENOMEM;
	while (*s) {
		char *end;
		long v = strtol(s, &end, 10);
		if (end == s) {
			free(ids);
			return MOOR_EFORMAT;
		}
		if (k == cap) {
			cap *= 2;
			int32_t *n2 = realloc(ids, cap * sizeof *ids);
			if (!n2) {
				free(ids);
				return -ENOMEM;
			}
			ids = n2;
		}
		ids[k++] = (int32_t)v;
		s = end;
		while (*s == ',' || *s == ' ')
			s++;
	}
	*out = ids;
	*n = k;
	return 0;
}

static const char *const finish_names[] = {"none", "stop", "length", "cancel",
					   "error"};

int main(int argc, char **argv)
{
	moor_log_set_name("moor_client");
	char run_dir[512] = "";
	const char *ids_s = NULL, *stop_s = NULL;
	mc_params p = {.max_tokens = 16, .top_p = 1};
	int timeout_ms = 60000;
	uint32_t cancel_after = 0;
	static const struct option lo[] = {
	    {"run-dir", 1, 0, 'R'},
	    {"ids", 1, 0, 'i'},
	    {"max-tokens", 1, 0, 'n'},
	    {"temperature", 1, 0, 'T'},
	    {"top-k", 1, 0, 'k'},
	    {"top-p", 1, 0, 'P'},
	    {"min-p", 1, 0, 'M'},
	    {"seed", 1, 0, 's'},
	    {"session", 1, 0, 'S'},
	    {"stop-ids", 1, 0, 'x'},
	    {"ignore-eos", 0, 0, 'e'},
	    {"no-cache", 0, 0, 'c'},
	    {"cancel-after", 1, 0, 'C'},
	    {"timeout-ms", 1, 0, 't'},
	    {0, 0, 0, 0},
	};
	int o;
	while ((o = getopt_long(argc, argv, "", lo, NULL)) != -1) {
		switch (o) {
		case 'R':
			snprintf(run_dir, sizeof run_dir, "%s", optarg);
			break;
		case 'i':
			ids_s = optarg;
			break;
		case 'n':
			p.max_tokens = (uint32_t)atoi(optarg);
			break;
		case 'T':
			p.temperature = strtof(optarg, NULL);
			break;
		case 'k':
			p.top_k = atoi(optarg);
			break;
		case 'P':
			p.top_p = strtof(optarg, NULL);
			break;
		case 'M':
			p.min_p = strtof(optarg, NULL);
			break;
		case 's':
			p.seed = strtoull(optarg, NULL, 10);
			break;
		case 'S':
			p.session = optarg;
			break;
		case 'x':
			stop_s = optarg;
			break;
		case 'e':
			p.flags |= PROTO_GEN_IGNORE_EOS;
			break;
		case 'c':
			p.flags |= PROTO_PLAN_NO_CACHE;
			break;
		case 'C':
			cancel_after = (uint32_t)atoi(optarg);
			break;
		case 't':
			timeout_ms = atoi(optarg);
			break;
		default:
			fprintf(stderr, "usage: moor_client [--run-dir DIR] "
					"--ids 1,2,3 [options]\n");
			return 2;
		}
	}
	int32_t *ids = NULL, *stop = NULL;
	if (!ids_s || parse_ids(ids_s, &ids, &p.n_ids) ||
	    (stop_s && parse_ids(stop_s, &stop, &p.n_stop))) {
		fprintf(stderr, "moor_client: --ids: comma-separated ids\n");
		return 2;
	}
	p.ids = ids;
	p.stop_ids = stop;
	if (!run_dir[0]) 
		moor_run_dir_default(run_dir, sizeof run_dir);
	mc_conn c;
	int rv = mc_open(&c, run_dir, timeout_ms);
	if (rv) {
		fprintf(stderr, "moor_client: engined at %s: %s\n", run_dir,
			moor_strerror(rv));
		free(ids);
		free(stop);
		return 1;
	}
	uint64_t req = (uint64_t)getpid();
	mc_result r;
	rv = mc_send_generate(&c, req, &p);
	if (rv == 0)
		rv = mc_wait(&c, req, &r, timeout_ms, cancel_after);
	else
		memset(&r, 0, sizeof r);
	for (uint32_t i = 0; i < r.n_tokens; i++)
		printf(i ? " %d" : "%d", r.tokens[i]);
	printf("\n");
	if (rv == 0)
		printf("done finish=%s code=%d tier=%u prompt=%llu cached=%llu "
		       "completion=%llu%s%s\n",
		       r.finish < 5 ? finish_names[r.finish] : "?", r.code,
		       r.tier, (unsigned long long)r.prompt_tokens,
		       (unsigned long long)r.cached_tokens,
		       (unsigned long long)r.completion_tokens,
		       r.msg[0] ? " msg=" : "", r.msg);
	else
		fprintf(stderr, "moor_client: %s\n",
			r.msg[0] ? r.msg : moor_strerror(rv));
	mc_result_fini(&r);
	mc_close(&c);
	free(ids);
	free(stop);
	return rv ? 1 : 0;
}
