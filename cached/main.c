/* main.c: cached, the state broker daemon. It owns the cache core (cache.h)
 * and its two arenas, and serves it over NNG:
 *
 *   ipc://RUN/cached.sock  REP  HELLO, PLAN, COMMIT, ABORT   (engined)
 *   ipc://RUN/admin.sock   REP  STATS, CLEAR, PEEK           (moorctl, gw)
 *
 * One thread: the core is single-threaded, so one poll() loop over both
 * sockets' receive descriptors and a signalfd serves one request at a time
 * to completion. A message that is not a well-formed request of this
 * socket's kinds (short, oversized, another version, a type this socket
 * does not serve, a payload that does not decode) is answered PROTO_ERROR
 * naming what was wrong; cached never exits on a request path.
 *
 * The engine: the pipe that last HELLOed is the attached engine, and PLAN,
 * COMMIT and ABORT from any other pipe are refused with -ENOTCONN (an
 * engined that finds cached restarted HELLOs again). A plan left open by an
 * engine that died is aborted before the next HELLO is served, with only
 * the rows it restored counted valid.
 *
 * STATS adds to the core's JSON a "daemon" object and an "engine" object,
 * {"attached", "pid", "window", "grid"}: the last HELLO's pid, window and
 * grid (null before any), and whether that engine's connection is still
 * up (NNG's pipe events, on NNG's thread: one atomic word).
 *
 * PEEK answers what a PLAN of the same ids would (cache_peek): nothing
 * changes, nothing is counted but the message and, if refused, the error.
 *
 * The device arena (--device auto|shm|cuda): shm for the CPU backend, or
 * cudaMalloc'ed on --gpu N and handed to the engine as a CUDA IPC handle
 * (arena_cuda.c); auto takes CUDA when this build has it and the GPU
 * answers. On CUDA the mover's copies run on a stream: every reply on
 * cached.sock waits for them first (cache_sync), so the engine never reads
 * bytes cached is still writing.
 *
 * SIGTERM/SIGINT: the request in hand is answered, then the drain: an open
 * plan is aborted to its start and the resident conversation is written to
 * the session spill (--disk-dir), which the next cached reads back when an
 * engine of the same fingerprint attaches; then the sockets and the arenas'
 * shm objects are unlinked and cached exits 0.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <nng/nng.h>
#include <nng/protocol/reqrep0/rep.h>
#include <xxhash.h>

#include "cache.h"
#include "daemon.h"
#include "moor.h"
#include "net.h"
#include "proto.h"
#include "util.h"

/* ===================================================================== */
/* start, loop, stop                                                     */

static int run_dir_make(const char *dir)
{
	char tmp[PATH_MAX];
	snprintf(tmp, sizeof tmp, "%s", dir);
	for (char *p = tmp + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = 0;
		if (mkdir(tmp, 0700) && errno != EEXIST)
			return -errno;
		*p = '/';
	}
	if (mkdir(tmp, 0700) && errno != EEXIST)
		return -errno;
	struct stat st;
	if (stat(tmp, &st))
		return -errno;
	if (!S_ISDIR(st.st_mode))
		return -ENOTDIR;
	return 0;
}

static int sock_open(cd *d, int w)
{
	if (strlen(d->path[w]) >= sizeof(((struct sockaddr_un *)0)->sun_path)) {
		moor_err("%s: a socket path must be under 108 bytes",
			 d->path[w]);
		return -ENAMETOOLONG;
	}
	if (unlink(d->path[w]) == 0)
		moor_info("replaced a stale %s", d->path[w]);
	int rv = nng_rep0_open(&d->sock[w]);
	if (rv)
		return proto_nng_err(rv);
	d->open[w] = 1;
	if (w == SOCK_ENG)
		nng_pipe_notify(d->sock[w], NNG_PIPE_EV_REM_POST,
				cd_on_pipe_gone, NULL);
	/* Larger than any valid message, so an oversized one still arrives
	 * and is answered (NNG drops the pipe of one over this limit). */
	nng_socket_set_size(d->sock[w], NNG_OPT_RECVMAXSZ,
			    4 * ((size_t)PROTO_HDR_SIZE + PROTO_MAX_PAYLOAD));
	nng_socket_set_ms(d->sock[w], NNG_OPT_SENDTIMEO, 5000);
	/* the socket file is 0600 from its creation (no chmod after) */
	rv = proto_listen_private(d->sock[w], d->url[w]);
	if (rv) {
		moor_err("listen %s: %s", d->url[w], moor_strerror(rv));
		return rv;
	}
	return 0;
}

static int serve(cd *d)
{
	sigset_t set;
	sigemptyset(&set);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGHUP); /* a hangup stops cleanly, as SIGTERM */
	int sfd = signalfd(-1, &set, SFD_CLOEXEC);
	if (sfd < 0)
		return -errno;
	struct pollfd pf[3];
	for (int w = 0; w < 2; w++) {
		int fd;
		int rv = nng_socket_get_int(d->sock[w], NNG_OPT_RECVFD, &fd);
		if (rv) {
			close(sfd);
			return proto_nng_err(rv);
		}
		pf[w] = (struct pollfd){.fd = fd, .events = POLLIN};
	}
	pf[2] = (struct pollfd){.fd = sfd, .events = POLLIN};
	for (;;) {
		if (poll(pf, 3, -1) < 0) {
			if (errno == EINTR)
				continue;
			moor_err("poll: %s", strerror(errno));
			break;
		}
		if (pf[2].revents) {
			struct signalfd_siginfo si;
			if (read(sfd, &si, sizeof si) > 0)
				moor_info("%s: stopping",
					  strsignal((int)si.ssi_signo));
			break;
		}
		for (int w = 0; w < 2; w++) {
			if (!pf[w].revents)
				continue;
			nng_msg *nm;
			int rv =
			    nng_recvmsg(d->sock[w], &nm, NNG_FLAG_NONBLOCK);
			if (rv == NNG_EAGAIN)
				continue;
			if (rv) {
				moor_warn("%s: receive: %s", d->url[w],
					  nng_strerror(rv));
				continue;
			}
			cd_handle(d, w, nm);
			nng_msg_free(nm);
		}
	}
	close(sfd);
	/* NNG drops what a closing socket has not written yet: give the last
	 * reply a moment to leave */
	struct timespec grace = {0, 50 * 1000 * 1000};
	nanosleep(&grace, NULL);
	return 0;
}

int main(int argc, char **argv)
{
	moor_log_set_name("cached");
	static cd d; /* big: the layout and plan scratch */
	d.t_start = moor_now();
	cache_cfg_defaults(&d.cfg);
	const char *prefix = NULL;
	int rc = cd_parse_args(&d, argc, argv, &prefix);
	if (rc)
		return rc == 1 ? 0 : 2;
	if (!d.run_dir[0])
		moor_run_dir_default(d.run_dir, sizeof d.run_dir);

	/* Signals arrive through the signalfd only. */
	sigset_t set;
	sigemptyset(&set);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGHUP); /* a hangup stops cleanly, as SIGTERM */
	sigprocmask(SIG_BLOCK, &set, NULL);
	signal(SIGPIPE, SIG_IGN);

	rc = run_dir_make(d.run_dir);
	if (rc) {
		moor_err("run dir %s: %s", d.run_dir, moor_strerror(rc));
		return 1;
	}
	char real[PATH_MAX];
	if (!realpath(d.run_dir, real)) {
		moor_err("run dir %s: %s", d.run_dir, strerror(errno));
		return 1;
	}
	if (strlen(real) > 90) { /* sun_path holds 108 bytes */
		moor_err("run dir %s: its path must be under 90 bytes", real);
		return 1;
	}
	snprintf(d.run_dir, sizeof d.run_dir, "%s", real);
	static const char *const names[2] = {"cached.sock", "admin.sock"};
	for (int w = 0; w < 2; w++) {
		snprintf(d.path[w], sizeof d.path[w], "%s/%s", d.run_dir,
			 names[w]);
		snprintf(d.url[w], sizeof d.url[w], "ipc://%s", d.path[w]);
	}
	int lk = moor_run_lock(d.run_dir, "cached");
	if (lk < 0) {
		if (lk == -EADDRINUSE)
			moor_err("another cached serves %s", d.run_dir);
		else
			moor_err("%s/cached.lock: %s", d.run_dir,
				 moor_strerror(lk));
		return 1;
	}

	/* The arenas' names follow the run dir, so a cached killed with -9
	 * leaves nothing the next one on that dir does not reclaim. */
	if (prefix)
		snprintf(d.cfg.arena_prefix, sizeof d.cfg.arena_prefix, "%s",
			 prefix);
	else
		snprintf(
		    d.cfg.arena_prefix, sizeof d.cfg.arena_prefix,
		    "moor-%u-%016llx", (unsigned)getuid(),
		    (unsigned long long)XXH64(d.run_dir, strlen(d.run_dir), 0));
	static const char *const kinds[2] = {"dev", "host"};
	for (int k = 0; k < 2; k++) {
		char nm[96];
		snprintf(nm, sizeof nm, "/%s.%s", d.cfg.arena_prefix, kinds[k]);
		if (shm_unlink(nm) == 0)
			moor_info("removed the stale arena %s", nm);
	}

	char err[MOOR_ERRLEN] = "";
	rc = cd_device_pick(&d);
	if (rc || cd_shm_fit(&d))
		return 1;
	rc = cache_new(&d.cfg, &d.c, err);
	if (rc) {
		moor_err("arenas: %s", err[0] ? err : moor_strerror(rc));
		return 1;
	}
	for (int w = 0; w < 2 && !rc; w++)
		rc = sock_open(&d, w);
	if (!rc) {
		cache_arena_info ai;
		cache_arena_info_get(d.c, &ai);
		moor_info("serving %s and %s (pid %d); device arena %s %.1f "
			  "MiB, host arena %s %.1f MiB",
			  d.url[SOCK_ENG], d.url[SOCK_ADMIN], (int)getpid(),
			  ai.dev_name, (double)ai.dev_size / (1 << 20),
			  ai.host_name, (double)ai.host_size / (1 << 20));
		rc = serve(&d);
		/* the drain: the work in flight was answered; what the
		 * resident rows hold goes to the session spill */
		cd_close_open_plan(&d, "the drain");
		double t0 = moor_now();
		/* the disk tier's writer finishes what it was given */
		(void)cache_disk_wait(d.c);
		err[0] = 0;
		int drc = cache_drain(d.c, err);
		if (drc)
			moor_err("drain: %s",
				 err[0] ? err : moor_strerror(drc));
		else if (d.cfg.spill_dir[0])
			moor_info("drain: done in %.0f ms",
				  (moor_now() - t0) * 1e3);
	}
	for (int w = 0; w < 2; w++) {
		if (!d.open[w])
			continue;
		nng_close(d.sock[w]);
		unlink(d.path[w]);
	}
	cache_free(d.c); /* unlinks the arenas */
	if (rc) {
		moor_err("%s", moor_strerror(rc));
		return 1;
	}
	moor_info("stopped");
	return 0;
}
