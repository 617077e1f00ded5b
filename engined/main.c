/* main.c: engined. Two modes:
 *
 * one-shot, when --prompt-ids is given: loads a model directory, prefills
 * the ids on the grid in its own buffers, decodes and prints the generated
 * ids on stdout;
 *
 *   engined --model DIR --prompt-ids 1,2,3 [--max-tokens N] [--threads N]
 *           [--backend auto|cpu|cuda] [--gpu N]
 *           [--grid N] [--window N] [--temperature T] [--top-k K]
 *           [--top-p P] [--min-p P] [--seed S] [--ignore-eos]
 *           [--load-format auto|safetensors|dummy]
 *
 * the daemon otherwise (serve.h): attaches to cached in the run directory
 * and serves GENERATE requests on its engined.sock.
 *
 *   engined --model DIR [--run-dir DIR] [--threads N] [--grid N]
 *           [--window N] [--connect-timeout S] [--queue N]
 *           [--backend auto|cpu|cuda] [--gpu N]
 *
 * Either mode runs on the backend --backend names (eng_backend_pick); the
 * choice and its reason are the first line of the log.
 */
#include <errno.h>
#include <getopt.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "eng.h"
#include "moor.h"
#include "serve.h"

static void usage(FILE *f)
{
	fprintf(
	    f,
	    "usage: engined --model DIR --prompt-ids ID,ID,... [options]\n"
	    "       engined --model DIR [--run-dir DIR] [daemon options]\n"
	    "one-shot options:\n"
	    "  --max-tokens N    tokens to generate (default 16)\n"
	    "  --threads N       CPU threads (default 1)\n"
	    "  --grid N          prefill grid, a multiple of 64 (default "
	    "1024)\n"
	    "  --window N        tokens per sequence (default 32768)\n"
	    "  --max-num-batched-tokens N\n"
	    "                    tokens of one prefill forward, a multiple of\n"
	    "                    the grid (default: the grid on the CPU, 4\n"
	    "                    grids on a GPU); the same bits\n"
	    "                    whatever it is, longer products are faster\n"
	    "                    on a GPU\n"
	    "  --temperature T   0 = greedy (default 0)\n"
	    "  --top-k K  --top-p P  --min-p P  --seed S\n"
	    "  --ignore-eos      do not stop at the end-of-sequence token\n"
	    "  --backend B       auto (CUDA when built and a GPU is present,\n"
	    "                    else the CPU), cpu or cuda (default auto)\n"
	    "  --gpu N           the CUDA device ordinal (default 0)\n"
	    "  --load-format F   auto or safetensors: the checkpoint's files;\n"
	    "                    dummy: seeded random weights of config.json's\n"
	    "                    shapes, made on the backend (benchmarks of\n"
	    "                    shapes whose files are not here)\n"
	    "daemon options (no --prompt-ids):\n"
	    "  --run-dir DIR         sockets of cached and engined (default\n"
	    "                        $XDG_RUNTIME_DIR/moor or /tmp/moor-$UID)\n"
	    "  --connect-timeout S   wait for cached at start (default 30)\n"
	    "  --call-timeout S      one round trip to cached (default 30)\n"
	    "  --queue N             requests waiting behind the running one\n"
	    "                        (default 64; more are answered busy)\n"
	    "  --progress-ms MS      a long prefill logs its progress (tokens\n"
	    "                        done of total, rate, ETA) and sends it to\n"
	    "                        the client at most this often (default\n"
	    "                        1000; 0: never)\n"
	    "  --threads N  --grid N  --window N  --backend B  --gpu N\n"
	    "  --max-num-batched-tokens N\n"
	    "  --load-format F       as above\n");
}

/* A positive integer flag, or -1. */
static long parse_pos(const char *s)
{
	char *end;
	errno = 0;
	long v = strtol(s, &end, 10);
	if (end == s || *end || errno || v < 0)
		return -1;
	return v;
}

static int parse_ids(const char *s, int32_t **out, int64_t *n)
{
	int64_t cap = 64, k = 0;
	int32_t *ids = malloc((size_t)cap * sizeof *ids);
	if (!ids)
		return -ENOMEM;
	while (*s) {
		char *end;
		errno = 0;
		long v = strtol(s, &end, 10);
		if (end == s || errno || v < 0 || v > INT32_MAX) {
			free(ids);
			return MOOR_EFORMAT;
		}
		if (k == cap) {
			cap *= 2;
			int32_t *n2 = realloc(ids, (size_t)cap * sizeof *ids);
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
	if (k == 0) {
		free(ids);
		return MOOR_EFORMAT;
	}
	*out = ids;
	*n = k;
	return 0;
}

int main(int argc, char **argv)
{
	moor_log_set_name("engined");
	const char *model = NULL, *ids_s = NULL, *backend = "auto";
	int gpu = 0;
	int max_tokens = 16, ignore_eos = 0;
	/* a progress line (GB, GB/s) each second of a long load; seed 1 of
	 * the dummy weights, so two engines of one config compute alike */
	eng_opts o = {.progress = 1, .seed = 1};
	eng_sampling sp = {.temperature = 0, .top_p = 1};
	static const struct option lo[] = {
	    {"model", 1, 0, 'm'},
	    {"prompt-ids", 1, 0, 'p'},
	    {"max-tokens", 1, 0, 'n'},
	    {"threads", 1, 0, 't'},
	    {"grid", 1, 0, 'g'},
	    {"window", 1, 0, 'w'},
	    {"max-num-batched-tokens", 1, 0, 'S'},
	    {"temperature", 1, 0, 'T'},
	    {"top-k", 1, 0, 'k'},
	    {"top-p", 1, 0, 'P'},
	    {"min-p", 1, 0, 'M'},
	    {"seed", 1, 0, 's'},
	    {"ignore-eos", 0, 0, 'e'},
	    {"run-dir", 1, 0, 'R'},
	    {"connect-timeout", 1, 0, 'C'},
	    {"call-timeout", 1, 0, 'L'},
	    {"queue", 1, 0, 'Q'},
	    {"test-step-delay-ms", 1, 0, 'D'},
	    {"progress-ms", 1, 0, 'O'},
	    {"backend", 1, 0, 'B'},
	    {"gpu", 1, 0, 'G'},
	    {"load-format", 1, 0, 'F'},
	    {"help", 0, 0, 'h'},
	    {0, 0, 0, 0},
	};
	eng_serve_cfg sc = {
	    .connect_timeout_s = 30, .call_timeout_s = 30, .queue_max = 64,
	    .progress_ms = 1000};
	int c;
	while ((c = getopt_long(argc, argv, "", lo, NULL)) != -1) {
		switch (c) {
		case 'm':
			model = optarg;
			break;
		case 'p':
			ids_s = optarg;
			break;
		case 'n':
			max_tokens = atoi(optarg);
			break;
		case 't':
			o.threads = atoi(optarg);
			break;
		case 'g':
			o.grid = atoi(optarg);
			break;
		case 'w':
			o.window = atoll(optarg);
			break;
		case 'S':
			o.span = (int)parse_pos(optarg);
			if (o.span <= 0) {
				moor_err("--max-num-batched-tokens %s: expected a "
					 "positive multiple of the grid",
					 optarg);
				return 2;
			}
			break;
		case 'T':
			sp.temperature = strtof(optarg, NULL);
			break;
		case 'k':
			sp.top_k = atoi(optarg);
			break;
		case 'P':
			sp.top_p = strtof(optarg, NULL);
			break;
		case 'M':
			sp.min_p = strtof(optarg, NULL);
			break;
		case 's':
			sp.seed = strtoull(optarg, NULL, 10);
			break;
		case 'e':
			ignore_eos = 1;
			break;
		case 'R':
			sc.run_dir = optarg;
			break;
		case 'C':
			sc.connect_timeout_s = (int)parse_pos(optarg);
			break;
		case 'L':
			sc.call_timeout_s = (int)parse_pos(optarg);
			break;
		case 'Q':
			sc.queue_max = (int)parse_pos(optarg);
			break;
		case 'D':
			sc.test_step_delay_ms = (int)parse_pos(optarg);
			break;
		case 'O':
			sc.progress_ms = (int)parse_pos(optarg);
			break;
		case 'B':
			backend = optarg;
			break;
		case 'G':
			gpu = (int)parse_pos(optarg);
			break;
		case 'F':
			if (!strcmp(optarg, "dummy")) {
				o.load_format = ENG_LOAD_DUMMY;
			} else if (!strcmp(optarg, "safetensors") ||
				   !strcmp(optarg, "auto")) {
				o.load_format = ENG_LOAD_SAFETENSORS;
			} else {
				moor_err("--load-format %s: expected auto, "
					 "safetensors or dummy",
					 optarg);
				return 2;
			}
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (optind < argc) {
		moor_err("unexpected argument '%s'", argv[optind]);
		usage(stderr);
		return 2;
	}
	if (gpu < 0) {
		moor_err("--gpu: expected a device ordinal (0, 1, ...)");
		return 2;
	}
	if (!model || (ids_s && max_tokens < 0)) {
		usage(stderr);
		return 2;
	}
	if (!ids_s) {
		/* The daemon's signals go to its signal thread only (serve.c):
		 * block them before the backend's probe, whose runtime (CUDA)
		 * starts threads that would otherwise take a SIGTERM and die
		 * of it. */
		sigset_t set;
		sigemptyset(&set);
		sigaddset(&set, SIGTERM);
		sigaddset(&set, SIGINT);
		pthread_sigmask(SIG_BLOCK, &set, NULL);
	}
	char why[MOOR_ERRLEN] = "";
	const kern_ops *ops = eng_backend_pick(backend, gpu, why);
	if (!ops) {
		moor_err("%s", why);
		return 2;
	}
	moor_info("%s", why);
	if (!ids_s) {
		if (sc.connect_timeout_s < 0 || sc.call_timeout_s <= 0 ||
		    sc.queue_max < 0 || sc.test_step_delay_ms < 0 ||
		    sc.progress_ms < 0) {
			moor_err("--connect-timeout, --call-timeout, --queue, "
				 "--progress-ms: expected a non-negative number");
			return 2;
		}
		sc.model_dir = model;
		sc.opts = o;
		sc.ops = ops;
		sc.device = gpu;
		return eng_serve(&sc) ? 1 : 0;
	}
	int32_t *ids;
	int64_t n;
	if (parse_ids(ids_s, &ids, &n)) {
		moor_err("--prompt-ids: expected comma-separated token ids");
		return 2;
	}
	kern_config kc = {.threads = o.threads > 0 ? o.threads : 1,
			  .device = gpu};
	kern_ctx *ctx;
	int rc = ops->create(&kc, &ctx);
	if (rc) {
		moor_err("backend %s: %s", ops->name, moor_strerror(rc));
		free(ids);
		return 1;
	}
	char err[MOOR_ERRLEN] = "";
	eng_model *m;
	double t0 = moor_now();
	rc = eng_model_load(model, ops, ctx, &o, &m, err);
	if (rc) {
		moor_err("%s: %s", model, err[0] ? err : moor_strerror(rc));
		ops->destroy(ctx);
		free(ids);
		return 1;
	}
	int V = eng_model_vocab(m), eos = eng_model_eos(m);
	for (int64_t i = 0; i < n; i++) {
		if (ids[i] >= V) {
			moor_err(
			    "--prompt-ids: id %d is outside the vocabulary "
			    "(%d)",
			    ids[i], V);
			rc = MOOR_ERANGE;
		}
	}
	/* The logits stay on the device: each pick runs there (sample())
	 * and only the token id comes back. */
	eng_seq s;
	eng_sampler *smp = eng_sampler_new(V, &sp);
	if (rc == 0 && !smp)
		rc = -ENOMEM;
	if (rc == 0 && (rc = eng_seq_alloc(m, &s)) != 0)
		moor_err("sequence buffers: %s", moor_strerror(rc));
	if (rc == 0) {
		double t1 = moor_now();
		rc = eng_prefill(m, &s, ids, n, NULL, ENG_LOGITS_KEEP);
		double t2 = moor_now();
		int produced = 0;
		while (rc == 0 && produced < max_tokens) {
			int32_t t;
			if ((rc = eng_model_sample(m, smp, &t)) != 0)
				break;
			printf(produced ? " %d" : "%d", t);
			produced++;
			if ((t == eos && !ignore_eos) || produced == max_tokens)
				break;
			rc = eng_decode(m, &s, t, NULL);
		}
		printf("\n");
		double t3 = moor_now();
		if (rc)
			moor_err("forward: %s", moor_strerror(rc));
		else
			moor_info("load %.2fs, prefill %lld tokens %.3fs (%.0f "
				  "tok/s), decode %d tokens %.3fs",
				  t1 - t0, (long long)n, t2 - t1,
				  (double)n / (t2 - t1), produced, t3 - t2);
		eng_seq_free(m, &s);
	}
	eng_sampler_free(smp);
	free(ids);
	eng_model_free(m);
	ops->destroy(ctx);
	return rc ? 1 : 0;
}
