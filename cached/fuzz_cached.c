/* fuzz_cached.c: libFuzzer target for every message cached accepts (issue
 * 13's fuzzing), through the daemon's own handler (handlers.c's
 * cd_handle(), linked with replies.c) on a real cache core with small shm
 * arenas: HELLO (its layout), PLAN, COMMIT, ABORT on the engine's socket,
 * STATS, CLEAR, PEEK, END_GET on the admin socket. An input is a sequence of
 * records [socket byte][u16 LE length][message bytes], so a HELLO can be
 * followed by the plans and commits it makes possible; every message comes
 * "from" one engine pipe. Replies go nowhere (REP sockets with no peer). cached
 * never exits on a request path: an abort, a crash or a sanitizer report
 * is the finding. */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include <nng/nng.h>
#include <nng/protocol/reqrep0/rep.h>

#include "daemon.h"
#include "moor.h"

static cd D;

static void fuzz_fini(void)
{
	cache_free(D.c);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	moor_log_level = MOOR_LOG_ERROR;
	cache_cfg_defaults(&D.cfg);
	snprintf(D.cfg.arena_prefix, sizeof D.cfg.arena_prefix,
		 "moor-fuzz-cached-%d", (int)getpid());
	D.cfg.dev_cuda = -1;
	D.cfg.device_bytes = D.cfg.host_bytes = 32u << 20;
	D.cfg.mem_ceiling = D.cfg.mem_peak = 64u << 20;
	char err[MOOR_ERRLEN] = "";
	if (cache_new(&D.cfg, &D.c, err)) {
		fprintf(stderr, "fuzz_cached: %s\n", err);
		abort();
	}
	for (int w = 0; w < 2; w++) {
		if (nng_rep0_open(&D.sock[w]))
			abort();
		nng_socket_set_ms(D.sock[w], NNG_OPT_SENDTIMEO, 0);
		D.open[w] = 1;
	}
	atexit(fuzz_fini);
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	while (size >= 3) {
		int w = data[0] & 1;
		size_t n = (size_t)data[1] | (size_t)data[2] << 8;
		data += 3;
		size -= 3;
		if (n > size)
			n = size;
		nng_msg *nm;
		if (nng_msg_alloc(&nm, 0))
			abort();
		if (n && nng_msg_append(nm, data, n))
			abort();
		nng_pipe p = NNG_PIPE_INITIALIZER;
		p.id = 1;
		nng_msg_set_pipe(nm, p);
		cd_handle(&D, w, nm);
		nng_msg_free(nm);
		data += n;
		size -= n;
	}
	return 0;
}
