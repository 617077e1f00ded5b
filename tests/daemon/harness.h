/* harness.h: processes for the daemon tests (`h_`). Each test gets a temp
 * run directory, spawns cached and engined into it with their logs in
 * files there, and every spawned process is killed at exit, on a failed
 * REQUIRE, on the test's time bound (SIGALRM) and, through
 * PR_SET_PDEATHSIG, when the test itself dies. A failed test prints the
 * logs. Include once, after t.h.
 *
 * The backend: engined gets --backend MOOR_TEST_BACKEND (tb.h; cpu when
 * unset) and cached the device arena that goes with it (--device shm, or
 * cuda under MOOR_TEST_BACKEND=cuda), so a test runs the same pair on a
 * GPU host and on a CPU one.
 */
#ifndef MOOR_HARNESS_H
#define MOOR_HARNESS_H

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "moor.h"
#include "tb.h"

#define H_MAX_PROCS 32

static struct {
	pid_t pid[H_MAX_PROCS];
	char log[H_MAX_PROCS][300];
	int n;
	char dir[128];
	int bound_s;
	int done; /* h_done ran: the test got to its end */
} h_;

static inline int h_rm_one(const char *p, const struct stat *st, int fl,
			   struct FTW *f)
{
	(void)st;
	(void)fl;
	(void)f;
	return remove(p);
}

/* SIGTERM first, so a cached unlinks its arenas; SIGKILL what is left
 * after a second. */
static inline void h_kill_all(void)
{
	for (int i = 0; i < h_.n; i++)
		if (h_.pid[i] > 0)
			kill(h_.pid[i], SIGTERM);
	double end = moor_now() + 1;
	for (int i = 0; i < h_.n; i++) {
		if (h_.pid[i] <= 0)
			continue;
		while (waitpid(h_.pid[i], NULL, WNOHANG) == 0 &&
		       moor_now() < end) {
			struct timespec ts = {0, 5 * 1000 * 1000};
			nanosleep(&ts, NULL);
		}
		kill(h_.pid[i], SIGKILL);
		waitpid(h_.pid[i], NULL, 0);
		h_.pid[i] = 0;
	}
}

/* The arenas a cached killed with -9 left: the names its log gives. */
static inline void h_unlink_arenas(void)
{
	for (int i = 0; i < h_.n; i++) {
		FILE *f = fopen(h_.log[i], "r");
		if (!f)
			continue;
		char line[2048];
		while (fgets(line, sizeof line, f)) {
			const char *k = line;
			while ((k = strstr(k, " arena /"))) {
				char nm[96];
				if (sscanf(k, " arena %95s", nm) == 1)
					shm_unlink(nm);
				k += 7;
			}
		}
		fclose(f);
	}
}

static inline void h_dump_logs(void)
{
	for (int i = 0; i < h_.n; i++) {
		FILE *f = fopen(h_.log[i], "r");
		if (!f)
			continue;
		fprintf(stderr, "---- %s ----\n", h_.log[i]);
		char line[1024];
		while (fgets(line, sizeof line, f))
			fputs(line, stderr);
		fclose(f);
	}
}

static inline void h_cleanup(void)
{
	h_kill_all();
	h_unlink_arenas();
	if (t_failed || !h_.done)
		h_dump_logs();
	if (h_.dir[0] && !getenv("MOOR_KEEP_TMP"))
		nftw(h_.dir, h_rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

static inline void h_alarm(int sig)
{
	(void)sig;
	static const char m[] = "harness: the test ran past its time bound\n";
	write(2, m, sizeof m - 1);
	for (int i = 0; i < h_.n; i++)
		if (h_.pid[i] > 0)
			kill(h_.pid[i], SIGKILL);
	_exit(1);
}

/* The test's exit status (t_done); the logs are printed if it failed. */
static inline int h_done(const char *name)
{
	h_.done = 1;
	return t_done(name);
}

/* Makes the temp run dir, arms the time bound (seconds). */
static inline const char *h_init(const char *name, int bound_s)
{
	snprintf(h_.dir, sizeof h_.dir, "/tmp/moor-%s-XXXXXX", name);
	if (!mkdtemp(h_.dir)) {
		perror("mkdtemp");
		exit(1);
	}
	atexit(h_cleanup);
	signal(SIGALRM, h_alarm);
	signal(SIGPIPE, SIG_IGN);
	h_.bound_s = bound_s;
	alarm((unsigned)bound_s);
	return h_.dir;
}

/* A subdirectory of the temp dir (another run dir). */
static inline const char *h_subdir(const char *sub)
{
	static char p[8][160];
	static int k;
	char *o = p[k++ & 7];
	snprintf(o, 160, "%s/%s", h_.dir, sub);
	mkdir(o, 0700);
	return o;
}

/* Spawns argv (NULL-terminated) with stdout and stderr appended to
 * DIR/<logname>.log. Returns the pid. */
static inline pid_t h_spawn(const char *logname, char *const argv[])
{
	REQUIRE(h_.n < H_MAX_PROCS, "too many processes");
	char log[300];
	snprintf(log, sizeof log, "%s/%s.log", h_.dir, logname);
	pid_t parent = getpid();
	pid_t pid = fork();
	REQUIRE(pid >= 0, "fork: %s", strerror(errno));
	if (pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (getppid() != parent)
			_exit(127);
		int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0600);
		if (fd >= 0) {
			dup2(fd, 1);
			dup2(fd, 2);
			close(fd);
		}
		sigset_t none;
		sigemptyset(&none);
		sigprocmask(SIG_SETMASK, &none, NULL);
		signal(SIGPIPE, SIG_DFL);
		alarm(0);
		execv(argv[0], argv);
		fprintf(stderr, "exec %s: %s\n", argv[0], strerror(errno));
		_exit(127);
	}
	h_.pid[h_.n] = pid;
	snprintf(h_.log[h_.n], sizeof h_.log[0], "%s", log);
	h_.n++;
	return pid;
}

static inline void h_forget(pid_t pid)
{
	for (int i = 0; i < h_.n; i++)
		if (h_.pid[i] == pid)
			h_.pid[i] = 0;
}

/* Waits up to timeout_s for pid to exit; returns its wait status, or -1. */
static inline int h_wait_exit(pid_t pid, double timeout_s)
{
	double end = moor_now() + timeout_s;
	for (;;) {
		int st;
		pid_t r = waitpid(pid, &st, WNOHANG);
		if (r == pid) {
			h_forget(pid);
			return st;
		}
		if (r < 0 || moor_now() > end)
			return -1;
		struct timespec ts = {0, 5 * 1000 * 1000};
		nanosleep(&ts, NULL);
	}
}

/* kill -9 and reap. */
static inline void h_kill9(pid_t pid)
{
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
	h_forget(pid);
}

static inline int h_alive(pid_t pid)
{
	return waitpid(pid, NULL, WNOHANG) == 0;
}

/* 1 when the log file of logname contains s. */
static inline int h_log_has(const char *logname, const char *s)
{
	char log[300];
	snprintf(log, sizeof log, "%s/%s.log", h_.dir, logname);
	FILE *f = fopen(log, "r");
	if (!f)
		return 0;
	char line[2048];
	int found = 0;
	while (!found && fgets(line, sizeof line, f))
		found = strstr(line, s) != NULL;
	fclose(f);
	return found;
}

static inline int h_exists(const char *dir, const char *name)
{
	char p[256];
	snprintf(p, sizeof p, "%s/%s", dir, name);
	return access(p, F_OK) == 0;
}

/* Polls until logname's log says `ready` and DIR/name exists, while pid
 * lives. (Never by connecting to the socket: a stray connection can stall
 * an NNG listener's next accept.) The log must be fresh: one logname per
 * process. */
static inline int h_wait_ready(const char *logname, const char *ready,
			       const char *dir, const char *name, pid_t pid,
			       double timeout_s)
{
	double end = moor_now() + timeout_s;
	while (moor_now() < end) {
		if (h_log_has(logname, ready) && h_exists(dir, name))
			return 0;
		if (pid > 0 && !h_alive(pid)) {
			h_forget(pid);
			return -ECHILD;
		}
		struct timespec ts = {0, 5 * 1000 * 1000};
		nanosleep(&ts, NULL);
	}
	return -ETIMEDOUT;
}

/* The small budgets every daemon test runs under. */
#define H_CACHED_BUDGETS                                                       \
	"--device-gb", "0.25", "--host-gb", "0.25", "--mem-ceiling-gb",        \
	    "0.25", "--mem-peak-gb", "0.25", "--resident-gb", "0.05",          \
	    "--resident-stash-gb", "0.02", "--resident-pin-gb", "0.02",        \
	    "--resident-park-gb", "0.02", "--cache-gb", "0.05",                \
	    "--store-entry-gb", "0.02"

/* cached's --device for MOOR_TEST_BACKEND. */
static inline const char *h_device(void)
{
	return tb_cuda() ? "cuda" : "shm";
}

/* Starts cached on run and waits for both sockets. */
static inline pid_t h_cached(const char *exe, const char *run,
			     const char *logname)
{
	char *argv[] = {(char *)exe,	     "--run-dir", (char *)run,
			"--device",	     (char *)h_device(),
			H_CACHED_BUDGETS, NULL};
	pid_t pid = h_spawn(logname, argv);
	REQUIRE(h_wait_ready(logname, "serving", run, "admin.sock", pid, 20) ==
		    0,
		"cached did not come up on %s", run);
	return pid;
}

/* Starts engined on run (extra args NULL-terminated) and waits for it. */
static inline pid_t h_engined(const char *exe, const char *model,
			      const char *run, const char *logname, ...)
{
	char *argv[32] = {(char *)exe,	   "--model",	(char *)model,
			  "--run-dir",	   (char *)run, "--connect-timeout",
			  "20",		   "--backend", (char *)tb_name(),
			  NULL};
	int k = 9;
	va_list ap;
	va_start(ap, logname);
	const char *a;
	while ((a = va_arg(ap, const char *)) && k < 31)
		argv[k++] = (char *)a;
	va_end(ap);
	argv[k] = NULL;
	pid_t pid = h_spawn(logname, argv);
	REQUIRE(h_wait_ready(logname, "serving on", run, "engined.sock", pid,
			     60) == 0,
		"engined did not come up on %s", run);
	return pid;
}

#endif
