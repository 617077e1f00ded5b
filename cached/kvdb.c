/* kvdb.c: an LMDB environment checked whole in a child process before
 * cached maps it (kvdb.h says why), and replaced when it is damaged. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kvdb.h"
#include "moor.h"

#define KVDB_ALARM_S 10

int kvdb_rc(int rc)
{
	if (rc == 0)
		return 0;
	if (rc > 0)
		return -rc; /* errno */
	return rc == MDB_MAP_FULL ? MOOR_ENOSPACE : MOOR_EFORMAT;
}

/* LMDB's codes that say the file is not a sound environment. */
static int is_damage(int rc)
{
	return rc == MDB_INVALID || rc == MDB_CORRUPTED ||
	       rc == MDB_PAGE_NOTFOUND || rc == MDB_VERSION_MISMATCH ||
	       rc == MDB_BAD_TXN || rc == MDB_INCOMPATIBLE || rc == MDB_PANIC;
}

/* Walks one database whole (with find, every record is also searched for
 * from the root: the named databases); 0, or an LMDB code. */
static int walk_db(MDB_txn *tx, MDB_dbi dbi, int find, uint64_t *sum)
{
	MDB_cursor *cu;
	int rc = mdb_cursor_open(tx, dbi, &cu);
	if (rc)
		return rc;
	MDB_val k, v;
	size_t n = 0;
	while (!(rc = mdb_cursor_get(cu, &k, &v, n ? MDB_NEXT : MDB_FIRST))) {
		/* every byte is touched: a page past the file's end is a
		 * SIGBUS here, in the child, not in cached */
		const unsigned char *p = k.mv_data;
		for (size_t i = 0; i < k.mv_size; i++)
			*sum += p[i];
		p = v.mv_data;
		for (size_t i = 0; i < v.mv_size; i++)
			*sum += p[i];
		/* and found again from the root: a damaged branch page can
		 * leave the leaves whole and every search lost */
		MDB_val k2 = k, v2;
		int r2 = find ? mdb_get(tx, dbi, &k2, &v2) : 0;
		if (find && (r2 || v2.mv_data != v.mv_data)) {
			mdb_cursor_close(cu);
			return r2 && r2 != MDB_NOTFOUND ? r2 : MDB_CORRUPTED;
		}
		n++;
	}
	mdb_cursor_close(cu);
	if (rc != MDB_NOTFOUND)
		return rc;
	MDB_stat st;
	rc = mdb_stat(tx, dbi, &st);
	if (!rc && st.ms_entries != n)
		return MDB_CORRUPTED;
	return rc;
}

/* The child's walk: 0 sound, 1 damaged, 2 a system error (msg says). */
static int walk(const char *path, unsigned maxdbs, char *msg, size_t mn)
{
	char f[600];
	snprintf(f, sizeof f, "%s/data.mdb", path);
	struct stat fs;
	if (stat(f, &fs) < 0) {
		if (errno == ENOENT)
			return 0; /* a new environment */
		snprintf(msg, mn, "data.mdb: %s", strerror(errno));
		return 2;
	}
	/* LMDB writes its two meta pages when it creates a file: a shorter
	 * one is a cut file, which an open would take for a new one (and
	 * the caller's files for orphans) */
	if (fs.st_size < 2 * 4096) {
		snprintf(msg, mn, "truncated: data.mdb is %lld bytes",
			 (long long)fs.st_size);
		return 1;
	}
	MDB_env *env;
	int rc = mdb_env_create(&env);
	if (rc) {
		snprintf(msg, mn, "mdb_env_create: %s", mdb_strerror(rc));
		return 2;
	}
	mdb_env_set_maxdbs(env, maxdbs);
	rc = mdb_env_open(env, path, MDB_RDONLY | MDB_NOLOCK | MDB_NOTLS, 0600);
	if (rc) {
		snprintf(msg, mn, "open: %s", mdb_strerror(rc));
		mdb_env_close(env);
		return rc > 0 && !is_damage(rc) && rc != EINVAL ? 2 : 1;
	}
	MDB_envinfo ei;
	MDB_stat es;
	if (!mdb_env_info(env, &ei) && !mdb_env_stat(env, &es) &&
	    (uint64_t)fs.st_size <
		((uint64_t)ei.me_last_pgno + 1) * es.ms_psize) {
		snprintf(msg, mn, "truncated: %llu bytes, its pages reach %llu",
			 (unsigned long long)fs.st_size,
			 ((unsigned long long)ei.me_last_pgno + 1) *
			     es.ms_psize);
		mdb_env_close(env);
		return 1;
	}
	MDB_txn *tx;
	rc = mdb_txn_begin(env, NULL, MDB_RDONLY, &tx);
	MDB_dbi main_dbi;
	if (!rc)
		rc = mdb_dbi_open(tx, NULL, 0, &main_dbi);
	uint64_t sum = 0;
	/* the free list too (dbi 0): a write reuses the pages it names */
	if (!rc)
		rc = walk_db(tx, 0, 0, &sum);
	if (!rc)
		rc = walk_db(tx, main_dbi, 0, &sum);
	/* the named databases are the main one's keys */
	MDB_cursor *cu = NULL;
	if (!rc)
		rc = mdb_cursor_open(tx, main_dbi, &cu);
	MDB_val k, v;
	int op = MDB_FIRST;
	while (!rc && !(rc = mdb_cursor_get(cu, &k, &v, op))) {
		op = MDB_NEXT;
		char name[256];
		if (k.mv_size == 0 || k.mv_size >= sizeof name)
			continue;
		memcpy(name, k.mv_data, k.mv_size);
		name[k.mv_size] = 0;
		MDB_dbi d;
		int r2 = mdb_dbi_open(tx, name, 0, &d);
		if (r2 == MDB_INCOMPATIBLE || r2 == MDB_NOTFOUND)
			continue; /* a plain record of the main database */
		if (r2) {
			rc = r2;
			break;
		}
		rc = walk_db(tx, d, 1, &sum);
	}
	if (rc == MDB_NOTFOUND)
		rc = 0;
	if (cu)
		mdb_cursor_close(cu);
	if (tx)
		mdb_txn_abort(tx);
	mdb_env_close(env);
	if (rc) {
		snprintf(msg, mn, "walk: %s", mdb_strerror(rc));
		return rc > 0 && !is_damage(rc) ? 2 : 1;
	}
	(void)sum;
	return 0;
}

int kvdb_check(const char *path, unsigned maxdbs, char *why)
{
	int pfd[2];
	if (pipe(pfd) < 0)
		return -errno;
	pid_t pid = fork();
	if (pid < 0) {
		int e = -errno;
		close(pfd[0]);
		close(pfd[1]);
		return e;
	}
	if (pid == 0) {
		close(pfd[0]);
		signal(SIGALRM, SIG_DFL);
		alarm(KVDB_ALARM_S);
		char msg[400] = "";
		int r = walk(path, maxdbs, msg, sizeof msg);
		(void)!write(pfd[1], msg, strlen(msg));
		_exit(r);
	}
	close(pfd[1]);
	char msg[400] = "";
	size_t got = 0;
	for (;;) {
		ssize_t r = read(pfd[0], msg + got, sizeof msg - 1 - got);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			break;
		got += (size_t)r;
	}
	msg[got] = 0;
	close(pfd[0]);
	int st;
	while (waitpid(pid, &st, 0) < 0)
		if (errno != EINTR)
			return -errno;
	if (WIFSIGNALED(st)) {
		int s = WTERMSIG(st);
		moor_errf(why, "%s: reading it whole %s (%s)", path,
			  s == SIGALRM ? "did not end in 10 s"
				       : "crashed the reader",
			  strsignal(s));
		return 1;
	}
	int code = WIFEXITED(st) ? WEXITSTATUS(st) : 2;
	if (code == 1) {
		moor_errf(why, "%s: %s", path, msg);
		return 1;
	}
	if (code) {
		moor_errf(why, "%s: %s", path, msg[0] ? msg : "not readable");
		return -EIO;
	}
	return 0;
}

int kvdb_open(const char *path, uint64_t mapsize, unsigned maxdbs,
	      MDB_env **out, int *rebuilt, char *why)
{
	*out = NULL;
	*rebuilt = 0;
	int rc = kvdb_check(path, maxdbs, why);
	if (rc < 0)
		return rc;
	if (rc == 1) {
		char f[600], bad[620];
		snprintf(f, sizeof f, "%s/data.mdb", path);
		snprintf(bad, sizeof bad, "%s/data.mdb.bad", path);
		if (rename(f, bad) < 0 && errno != ENOENT) {
			int e = -errno;
			moor_errf(why,
				  "%s: damaged, and it cannot be moved "
				  "aside: %s",
				  f, strerror(errno));
			return e;
		}
		snprintf(f, sizeof f, "%s/lock.mdb", path);
		(void)unlink(f);
		*rebuilt = 1;
	}
	MDB_env *env;
	rc = kvdb_rc(mdb_env_create(&env));
	if (rc)
		return rc;
	rc = kvdb_rc(mdb_env_set_maxdbs(env, maxdbs));
	if (!rc)
		rc = kvdb_rc(mdb_env_set_mapsize(env, mapsize));
	if (!rc)
		rc = kvdb_rc(mdb_env_open(env, path, MDB_NOTLS, 0600));
	if (rc) {
		mdb_env_close(env);
		moor_errf(why, "%s: %s%s", path, moor_strerror(rc),
			  *rebuilt ? " (a damaged index was moved aside)" : "");
		return rc;
	}
	*out = env;
	return 0;
}
