/* test_cached_flags: cached's command line (cached/flags.c, included) for
 * the NVMe tiers' sizes: the day's write budget is read in GB of 10^9
 * bytes (the unit drives rate their writes in, and the stats'
 * disk_writes.gb), 200 GB by default, fractions allowed; a bad value is
 * refused (exit status 2); the tiers' sizes and the arenas stay GiB. */
#include "flags.c"
#include "t.h"

static int parse(cd *d, int argc, char **argv)
{
	const char *prefix = NULL;
	memset(d, 0, sizeof *d);
	cache_cfg_defaults(&d->cfg);
	optind = 0; /* getopt_long starts over (glibc) */
	return cd_parse_args(d, argc, argv, &prefix);
}

int main(void)
{
	moor_log_level = MOOR_LOG_ERROR;
	unsetenv("CACHE_GB");
	static cd d;
	char *a0[] = {"cached", NULL};
	CHECK(parse(&d, 1, a0) == 0, "no flags");
	CHECK(d.cfg.write_budget == 200000000000ull,
	      "the default budget is 200 GB: %llu",
	      (unsigned long long)d.cfg.write_budget);

	char *a1[] = {"cached", "--disk-write-budget-gb", "1.5", NULL};
	CHECK(parse(&d, 3, a1) == 0, "1.5");
	CHECK(d.cfg.write_budget == 1500000000ull, "1.5 GB: %llu",
	      (unsigned long long)d.cfg.write_budget);

	char *a2[] = {"cached", "--disk-write-budget-gb", "0", NULL};
	CHECK(parse(&d, 3, a2) == 0 && d.cfg.write_budget == 0, "0: none");

	char *a3[] = {"cached", "--disk-write-budget-gb", "-1", NULL};
	CHECK(parse(&d, 3, a3) == 2, "-1 refused");
	char *a4[] = {"cached", "--disk-write-budget-gb", "2x", NULL};
	CHECK(parse(&d, 3, a4) == 2, "2x refused");

	/* the tiers' own sizes are GiB, as the memory flags */
	char *a5[] = {"cached", "--disk-cache-gb", "2", "--session-spill-gb",
		      "0.5",	"--device-gb",	   "1", NULL};
	CHECK(parse(&d, 7, a5) == 0, "sizes");
	CHECK(d.cfg.disk_bytes == 2ull << 30 &&
		  d.cfg.spill_bytes == 1ull << 29 &&
		  d.cfg.device_bytes == 1ull << 30,
	      "GiB: %llu %llu %llu", (unsigned long long)d.cfg.disk_bytes,
	      (unsigned long long)d.cfg.spill_bytes,
	      (unsigned long long)d.cfg.device_bytes);
	return t_done("test_cached_flags");
}
