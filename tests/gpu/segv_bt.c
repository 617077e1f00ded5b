/* segv_bt.c: an LD_PRELOAD library for a lent GPU host without gdb: on
 * SIGSEGV, SIGBUS or SIGABRT it prints the faulting address, the return
 * addresses of the thread that faulted (each as object+offset, for
 * `addr2line -f -e OBJECT OFFSET`) and exits 139.
 *
 *   gcc -shared -fPIC -O1 -o segv_bt.so tests/gpu/segv_bt.c
 *   LD_PRELOAD=$PWD/segv_bt.so build/tests/cache/test_disk_resume
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <execinfo.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static void on_fault(int sig, siginfo_t *si, void *uc)
{
	(void)uc;
	void *b[64];
	int n = backtrace(b, 64);
	dprintf(2, "segv_bt: signal %d at address %p, %d frames\n", sig,
		si->si_addr, n);
	for (int i = 0; i < n; i++) {
		Dl_info di;
		if (dladdr(b[i], &di) && di.dli_fname)
			dprintf(2, "segv_bt: #%d %s +0x%lx (%s)\n", i, di.dli_fname,
				(unsigned long)((char *)b[i] - (char *)di.dli_fbase),
				di.dli_sname ? di.dli_sname : "?");
		else
			dprintf(2, "segv_bt: #%d %p\n", i, b[i]);
	}
	_exit(139);
}

__attribute__((constructor)) static void segv_bt_init(void)
{
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_sigaction = on_fault;
	sa.sa_flags = SA_SIGINFO | SA_RESETHAND;
	sigaction(SIGSEGV, &sa, NULL);
	sigaction(SIGBUS, &sa, NULL);
	sigaction(SIGABRT, &sa, NULL);
}
