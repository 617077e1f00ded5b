/* flags.c: cached's command line (daemon.h): the options and their
 * values, the device arena's kind (--device), and the arenas' fit against
 * /dev/shm and the machine's memory before any is created. */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "arena.h"
#include "cache.h"
#include "daemon.h"
#include "moor.h"
#include "util.h"

/* ---- flags ---- */

static void usage(FILE *f)
{
	fprintf(
	    f,
	    "usage: cached [--run-dir DIR] [options]\n"
	    "  --run-dir DIR            sockets (default $XDG_RUNTIME_DIR/moor "
	    "or /tmp/moor-$UID)\n"
	    "  --arena-prefix NAME      shm names /NAME.dev, /NAME.host "
	    "(default: from the run dir)\n"
	    "arenas and memory (GiB, fractions allowed):\n"
	    "  --device-gb G  --host-gb G  --mem-ceiling-gb G  "
	    "--mem-peak-gb G\n"
	    "      the arenas (24 and 12 GiB) must fit /dev/shm and the "
	    "memory: sizes given\n"
	    "      that do not are refused; defaults that do not are sized "
	    "to half the room\n"
	    "resident prefix:\n"
	    "  --resident-gb G (2.5)  --resident-keep N (4)  --pin-every N "
	    "(4096)  --pin-upto N (32768)\n"
	    "guest stash:\n"
	    "  --resident-guest-max N (8192)  --guest-margin N (512)  "
	    "--resident-stash-gb G (1)\n"
	    "pin and park:\n"
	    "  --resident-pin-gb G (4)  --pin-anchors N (8)  "
	    "--resident-park-gb G (4)  --park-anchors N (4)\n"
	    "end anchor:  --end-anchor on|off (on)\n"
	    "state store:\n"
	    "  --cache-gb G (CACHE_GB, 2)  --store-entry-gb G (1)  "
	    "--store-boundaries N (1)  --store-sessions on|off (on)\n"
	    "  --unified on|off         the memory limits count both arenas "
	    "(one memory: the CPU backend;\n"
	    "                           default on with a shm device arena, "
	    "off on CUDA)\n"
	    "  --device auto|shm|cuda   the device arena: shm (the CPU "
	    "backend) or cudaMalloc'ed\n"
	    "                           on the GPU (auto: CUDA when built and "
	    "present)\n"
	    "  --gpu N                  the GPU of a CUDA device arena "
	    "(default 0)\n"
	    "NVMe tiers (sizes in GiB; the write budget in GB of 10^9 "
	    "bytes, as drives rate writes):\n"
	    "  --disk-dir DIR           the tiers' directory (the session "
	    "spill in DIR/sessions); default none: off\n"
	    "  --session-spill-gb G (64)  --session-spill-hours N (48)  "
	    "--session-spill-min-tokens N (16384)\n"
	    "  --spill-codec on|off (on: byte planes + zstd)  --codec-threads "
	    "N (8)\n"
	    "  --disk-cache on|off      the disk tier in DIR/disk (on with "
	    "--disk-dir)\n"
	    "  --disk-cache-gb G (16)  --disk-cache-days N (7)  "
	    "--disk-cache-min-free-gb G (50)\n"
	    "                           (the free space the tier and the "
	    "spill leave the file system)\n"
	    "  --disk-cache-admit-after N (2)  --disk-cache-head-anchors N "
	    "(4)  --disk-cache-min-tokens N (4096)\n"
	    "  --disk-write-budget-gb G (200)  the drive writes of a day, GB "
	    "(tier and spill): past it the\n"
	    "                           tier writes nothing and the spill "
	    "the drain and long evictions\n"
	    "                           only; past 1.5 times it the drain "
	    "only (0: no budget)\n"
	    "  --adopt-from FP          read the files of this older "
	    "fingerprint (16 to 64 hex digits)\n"
	    "                           as the attached engine's (recorded "
	    "in DIR/ledger, logged)\n"
	    "  --prefill-tps N (740)    the engine's prefill rate until one "
	    "is measured\n"
	    "  --log-level error|warn|info|debug\n");
}

/* A size of `unit` bytes a G (fractions allowed, at most 2^20 of them). */
static int parse_size(const char *s, double unit, uint64_t *out)
{
	char *end;
	errno = 0;
	double v = strtod(s, &end);
	if (end == s || *end || errno || !(v >= 0) || v > 1 << 20)
		return -1;
	*out = (uint64_t)llround(v * unit);
	return 0;
}

/* Memory and the tiers' sizes: GiB. */
static int parse_gb(const char *s, uint64_t *out)
{
	return parse_size(s, (double)(1ull << 30), out);
}

/* Drive writes: GB of 10^9 bytes, the unit a drive's rated endurance
 * (TBW) is given in and the stats' disk_writes.gb reports. */
static int parse_gb_dec(const char *s, uint64_t *out)
{
	return parse_size(s, 1e9, out);
}

static int parse_onoff(const char *s, int *out)
{
	if (!strcmp(s, "on") || !strcmp(s, "1") || !strcmp(s, "true"))
		*out = 1;
	else if (!strcmp(s, "off") || !strcmp(s, "0") || !strcmp(s, "false"))
		*out = 0;
	else
		return -1;
	return 0;
}

/* In the order of parse_args' option table, which the error message of a
 * bad value indexes. */
enum {
	O_RUN = 256,
	O_PREFIX,
	O_DEV,
	O_HOST,
	O_CEIL,
	O_PEAK,
	O_RES,
	O_KEEP,
	O_PIN_EVERY,
	O_PIN_UPTO,
	O_GUEST,
	O_MARGIN,
	O_STASH,
	O_PIN,
	O_PIN_N,
	O_PARK,
	O_PARK_N,
	O_END,
	O_STORE,
	O_ENTRY,
	O_BOUND,
	O_SESS,
	O_UNIFIED,
	O_DEVICE,
	O_GPU,
	O_DISK_DIR,
	O_SPILL_GB,
	O_SPILL_H,
	O_SPILL_MIN,
	O_CODEC,
	O_CODEC_T,
	O_DISK_ON,
	O_DISK_GB,
	O_DISK_DAYS,
	O_DISK_FREE,
	O_DISK_ADMIT,
	O_DISK_HEAD,
	O_DISK_MIN,
	O_WRITE_BUDGET,
	O_ADOPT,
	O_PREFILL_TPS,
	O_LOG,
	O_HELP,
};

/* --device: where the device arena lives (cfg.dev_cuda), logged. */
int cd_device_pick(cd *d)
{
	const char *m = d->dev_mode ? d->dev_mode : "auto";
	char why[MOOR_ERRLEN] = "";
	int cuda = 0;
	if (!strcmp(m, "cuda")) {
		if (arena_cuda_probe((int)d->gpu, why)) {
			moor_err("--device cuda: %s", why);
			return -1;
		}
		cuda = 1;
	} else if (!strcmp(m, "auto")) {
		cuda = arena_cuda_probe((int)d->gpu, why) == 0;
	}
	d->cfg.dev_cuda = cuda ? (int)d->gpu : -1;
	if (cuda && !d->unified_set)
		d->cfg.unified = 0; /* device memory is not the host's */
	if (cuda)
		moor_info("device arena on CUDA (GPU %u, --device %s)", d->gpu,
			  m);
	else if (!strcmp(m, "auto"))
		moor_info("device arena in shm (--device auto: %s)", why);
	else
		moor_info("device arena in shm (--device shm)");
	return 0;
}

/* The shm arenas against /dev/shm and the machine's memory, before any is
 * created (arena.h: a sparse object past the filesystem's room is a
 * SIGBUS at its first write). Sizes given by flags that do not fit are
 * refused with the numbers; the defaults, when they do not fit, are sized
 * to half of the smaller of the free shm and the memory (the rest is for
 * engined's weights and workspace and the system), device : host 2 : 1,
 * and the log says so. Every block is still reserved when it is allocated
 * (posix_fallocate), so room that others take later is a refused cache. */
int cd_shm_fit(cd *d)
{
	uint64_t fs_free, fs_size, ram;
	int rc = arena_shm_room(&fs_free, &fs_size, &ram);
	if (rc) {
		moor_warn("statvfs /dev/shm: %s: the arenas are not checked "
			  "against its room",
			  moor_strerror(rc));
		return 0;
	}
	cache_cfg *c = &d->cfg;
	int dev_shm = c->dev_cuda < 0;
	const double G = (double)(1u << 30);
	uint64_t room = ram && ram < fs_free ? ram : fs_free;
	uint64_t need = c->host_bytes + (dev_shm ? c->device_bytes : 0);
	int given = d->host_gb_set || (dev_shm && d->dev_gb_set);
	if (need <= fs_free && (!ram || need <= ram))
		return 0;
	if (given) {
		moor_err("the arenas need %.2f GiB of shared memory (device "
			 "%.2f GiB%s, host %.2f GiB) but /dev/shm has %.2f GiB "
			 "free of %.2f GiB and the machine %.2f GiB of memory: "
			 "lower --device-gb / --host-gb, or give /dev/shm more "
			 "room (docker run --shm-size)",
			 need / G, c->device_bytes / G,
			 dev_shm ? "" : " on the GPU, not counted",
			 c->host_bytes / G, fs_free / G, fs_size / G, ram / G);
		return -1;
	}
	uint64_t budget = room / 2 / ARENA_ALIGN * ARENA_ALIGN;
	uint64_t host = dev_shm ? budget / 3 : budget;
	uint64_t dev = dev_shm ? budget - host : c->device_bytes;
	host = host / ARENA_ALIGN * ARENA_ALIGN;
	dev = dev / ARENA_ALIGN * ARENA_ALIGN;
	if (host < (16u << 20) || (dev_shm && dev < (16u << 20))) {
		moor_err("/dev/shm has %.3f GiB free (of %.3f GiB) and the "
			 "machine %.2f GiB of memory: too little for the "
			 "arenas (16 MiB each at least); give /dev/shm more "
			 "room (docker run --shm-size)",
			 fs_free / G, fs_size / G, ram / G);
		return -1;
	}
	moor_info("the default arenas (device %.2f GiB%s, host %.2f GiB) do "
		  "not fit /dev/shm (%.2f GiB free of %.2f GiB) and the "
		  "machine's %.2f GiB: sized to device %.3f GiB, host %.3f GiB "
		  "(half of the smaller; --device-gb / --host-gb choose)",
		  c->device_bytes / G, dev_shm ? "" : " on the GPU",
		  c->host_bytes / G, fs_free / G, fs_size / G, ram / G, dev / G,
		  host / G);
	c->device_bytes = dev;
	c->host_bytes = host;
	return 0;
}

int cd_parse_args(cd *d, int argc, char **argv, const char **prefix)
{
	static const struct option lo[] = {
	    {"run-dir", 1, 0, O_RUN},
	    {"arena-prefix", 1, 0, O_PREFIX},
	    {"device-gb", 1, 0, O_DEV},
	    {"host-gb", 1, 0, O_HOST},
	    {"mem-ceiling-gb", 1, 0, O_CEIL},
	    {"mem-peak-gb", 1, 0, O_PEAK},
	    {"resident-gb", 1, 0, O_RES},
	    {"resident-keep", 1, 0, O_KEEP},
	    {"pin-every", 1, 0, O_PIN_EVERY},
	    {"pin-upto", 1, 0, O_PIN_UPTO},
	    {"resident-guest-max", 1, 0, O_GUEST},
	    {"guest-margin", 1, 0, O_MARGIN},
	    {"resident-stash-gb", 1, 0, O_STASH},
	    {"resident-pin-gb", 1, 0, O_PIN},
	    {"pin-anchors", 1, 0, O_PIN_N},
	    {"resident-park-gb", 1, 0, O_PARK},
	    {"park-anchors", 1, 0, O_PARK_N},
	    {"end-anchor", 1, 0, O_END},
	    {"cache-gb", 1, 0, O_STORE},
	    {"store-entry-gb", 1, 0, O_ENTRY},
	    {"store-boundaries", 1, 0, O_BOUND},
	    {"store-sessions", 1, 0, O_SESS},
	    {"unified", 1, 0, O_UNIFIED},
	    {"device", 1, 0, O_DEVICE},
	    {"gpu", 1, 0, O_GPU},
	    {"disk-dir", 1, 0, O_DISK_DIR},
	    {"session-spill-gb", 1, 0, O_SPILL_GB},
	    {"session-spill-hours", 1, 0, O_SPILL_H},
	    {"session-spill-min-tokens", 1, 0, O_SPILL_MIN},
	    {"spill-codec", 1, 0, O_CODEC},
	    {"codec-threads", 1, 0, O_CODEC_T},
	    {"disk-cache", 1, 0, O_DISK_ON},
	    {"disk-cache-gb", 1, 0, O_DISK_GB},
	    {"disk-cache-days", 1, 0, O_DISK_DAYS},
	    {"disk-cache-min-free-gb", 1, 0, O_DISK_FREE},
	    {"disk-cache-admit-after", 1, 0, O_DISK_ADMIT},
	    {"disk-cache-head-anchors", 1, 0, O_DISK_HEAD},
	    {"disk-cache-min-tokens", 1, 0, O_DISK_MIN},
	    {"disk-write-budget-gb", 1, 0, O_WRITE_BUDGET},
	    {"adopt-from", 1, 0, O_ADOPT},
	    {"prefill-tps", 1, 0, O_PREFILL_TPS},
	    {"log-level", 1, 0, O_LOG},
	    {"help", 0, 0, O_HELP},
	    {0, 0, 0, 0},
	};
	cache_cfg *c = &d->cfg;
	const char *env = getenv("CACHE_GB");
	if (env && env[0] && parse_gb(env, &c->store_bytes)) {
		moor_err("CACHE_GB=%s: expected a number of GiB", env);
		return 2;
	}
	int o;
	uint32_t u;
	while ((o = getopt_long(argc, argv, "", lo, NULL)) != -1) {
		int bad = 0;
		switch (o) {
		case O_RUN:
			snprintf(d->run_dir, sizeof d->run_dir, "%s", optarg);
			break;
		case O_PREFIX:
			*prefix = optarg;
			break;
		case O_DEV:
			bad = parse_gb(optarg, &c->device_bytes);
			d->dev_gb_set = 1;
			break;
		case O_HOST:
			bad = parse_gb(optarg, &c->host_bytes);
			d->host_gb_set = 1;
			break;
		case O_CEIL:
			bad = parse_gb(optarg, &c->mem_ceiling);
			break;
		case O_PEAK:
			bad = parse_gb(optarg, &c->mem_peak);
			break;
		case O_RES:
			bad = parse_gb(optarg, &c->resident_bytes);
			break;
		case O_KEEP:
			bad = moor_parse_u32(optarg, &c->resident_keep);
			break;
		case O_PIN_EVERY:
			bad = moor_parse_u32(optarg, &c->pin_every);
			break;
		case O_PIN_UPTO:
			bad = moor_parse_u32(optarg, &c->pin_upto);
			break;
		case O_GUEST:
			bad = moor_parse_u32(optarg, &c->guest_max);
			break;
		case O_MARGIN:
			bad = moor_parse_u32(optarg, &c->guest_margin);
			break;
		case O_STASH:
			bad = parse_gb(optarg, &c->stash_bytes);
			break;
		case O_PIN:
			bad = parse_gb(optarg, &c->pin_bytes);
			break;
		case O_PIN_N:
			bad = moor_parse_u32(optarg, &c->pin_anchors);
			break;
		case O_PARK:
			bad = parse_gb(optarg, &c->park_bytes);
			break;
		case O_PARK_N:
			bad = moor_parse_u32(optarg, &c->park_anchors);
			break;
		case O_END:
			bad = parse_onoff(optarg, &c->end_anchor);
			break;
		case O_STORE:
			bad = parse_gb(optarg, &c->store_bytes);
			break;
		case O_ENTRY:
			bad = parse_gb(optarg, &c->store_entry_bytes);
			break;
		case O_BOUND:
			bad = moor_parse_u32(optarg, &u);
			c->store_boundaries = (int)u;
			break;
		case O_SESS:
			bad = parse_onoff(optarg, &c->store_sessions);
			break;
		case O_UNIFIED:
			bad = parse_onoff(optarg, &c->unified);
			d->unified_set = 1;
			break;
		case O_DEVICE:
			d->dev_mode = optarg;
			bad = strcmp(optarg, "auto") && strcmp(optarg, "shm") &&
			      strcmp(optarg, "cuda");
			break;
		case O_GPU:
			bad = moor_parse_u32(optarg, &d->gpu);
			break;
		case O_DISK_DIR:
			if (strlen(optarg) >= sizeof c->spill_dir - 16) {
				moor_err("--disk-dir %s: the path must be "
					 "under %zu bytes",
					 optarg, sizeof c->spill_dir - 16);
				return 2;
			}
			snprintf(c->spill_dir, sizeof c->spill_dir, "%s",
				 optarg);
			break;
		case O_SPILL_GB:
			bad = parse_gb(optarg, &c->spill_bytes);
			break;
		case O_SPILL_H:
			bad = moor_parse_u32(optarg, &c->spill_hours);
			break;
		case O_SPILL_MIN:
			bad = moor_parse_u32(optarg, &c->spill_min_tokens);
			break;
		case O_CODEC:
			bad = parse_onoff(optarg, &c->spill_codec);
			break;
		case O_DISK_ON:
			bad = parse_onoff(optarg, &c->disk_on);
			break;
		case O_DISK_GB:
			bad = parse_gb(optarg, &c->disk_bytes);
			break;
		case O_DISK_DAYS:
			bad = moor_parse_u32(optarg, &c->disk_days);
			break;
		case O_DISK_FREE:
			bad = parse_gb(optarg, &c->disk_min_free);
			break;
		case O_DISK_ADMIT:
			bad = moor_parse_u32(optarg, &c->disk_admit_after) ||
			      c->disk_admit_after < 1;
			break;
		case O_DISK_HEAD:
			bad = moor_parse_u32(optarg, &c->disk_head_anchors);
			break;
		case O_DISK_MIN:
			bad = moor_parse_u32(optarg, &c->disk_min_tokens);
			break;
		case O_WRITE_BUDGET:
			bad = parse_gb_dec(optarg, &c->write_budget);
			break;
		case O_ADOPT: {
			uint8_t fp[32];
			uint32_t fn;
			bad = strlen(optarg) >= sizeof c->adopt_from ||
			      cache_fp_parse(optarg, fp, &fn) != 0;
			if (!bad)
				snprintf(c->adopt_from, sizeof c->adopt_from,
					 "%s", optarg);
			break;
		}
		case O_PREFILL_TPS:
			bad = moor_parse_u32(optarg, &c->prefill_tps) ||
			      c->prefill_tps < 1;
			break;
		case O_CODEC_T:
			bad = moor_parse_u32(optarg, &c->codec_threads) ||
			      c->codec_threads < 1 || c->codec_threads > 256;
			break;
		case O_LOG:
			if (!strcmp(optarg, "error"))
				moor_log_level = MOOR_LOG_ERROR;
			else if (!strcmp(optarg, "warn"))
				moor_log_level = MOOR_LOG_WARN;
			else if (!strcmp(optarg, "info"))
				moor_log_level = MOOR_LOG_INFO;
			else if (!strcmp(optarg, "debug"))
				moor_log_level = MOOR_LOG_DEBUG;
			else
				bad = 1;
			break;
		case O_HELP:
			usage(stdout);
			return 1;
		default:
			usage(stderr);
			return 2;
		}
		if (bad) {
			moor_err("--%s %s: expected %s", lo[o - O_RUN].name,
				 optarg,
				 o == O_END || o == O_SESS || o == O_UNIFIED ||
					 o == O_CODEC
				     ? "on or off"
				 : o == O_DEVICE ? "auto, shm or cuda"
				 : o == O_LOG	 ? "a log level"
				 : o == O_ADOPT
				     ? "16 to 64 hex digits of a fingerprint"
				 : o == O_WRITE_BUDGET
				     ? "a number of GB (10^9 bytes)"
				 : strstr(lo[o - O_RUN].name, "-gb")
				     ? "a number of GiB"
				     : "a non-negative integer");
			return 2;
		}
	}
	if (optind < argc) {
		moor_err("unexpected argument '%s'", argv[optind]);
		usage(stderr);
		return 2;
	}
	return 0;
}
