/* kvdb.h: an LMDB environment the NVMe tiers can trust not to crash
 * cached (`kvdb_`).
 *
 * LMDB trusts its own pages: a data.mdb that a crash of the file system,
 * a bad sector or an operator's `truncate` damaged can make a reader walk
 * off its map (SIGSEGV, SIGBUS past a truncated file's end) or around a
 * cycle. So before the daemon maps an index it is read whole in a child
 * process (read only, no lock file, an alarm of 10 s): every named
 * database, every record. A child that fails (LMDB's MDB_INVALID,
 * MDB_CORRUPTED, MDB_PAGE_NOTFOUND, a version it does not read, a signal,
 * the alarm) marks the index damaged: its data.mdb is renamed to
 * data.mdb.bad (the last one kept, for a post-mortem), lock.mdb goes, and
 * a new empty environment is created; the caller then rebuilds what it
 * can (the disk tier from its files' headers) and says so. A system error
 * that is not damage (EACCES, ENOSPC for a new environment) is returned.
 *
 * Errors: -errno; MOOR_EFORMAT for LMDB's own codes (kvdb_rc).
 */
#ifndef KVDB_H
#define KVDB_H

#include <lmdb.h>
#include <stdint.h>

/* LMDB's return code as ours: 0, -errno, MOOR_ENOSPACE for a full map,
 * MOOR_EFORMAT for the rest. */
int kvdb_rc(int rc);

/* Opens (creating it when absent) the environment in directory `path`
 * with maxdbs named databases and a map of mapsize bytes (MDB_NOTLS).
 * *rebuilt = 1 when the index was found damaged and replaced by an empty
 * one (why names what was wrong: MOOR_ERRLEN). On failure *env is NULL. */
int kvdb_open(const char *path, uint64_t mapsize, unsigned maxdbs,
	      MDB_env **env, int *rebuilt, char *why);

/* The check alone (tests): 0 when the environment at path reads whole, 1
 * when it is damaged (why says how), -errno when it cannot be looked at. */
int kvdb_check(const char *path, unsigned maxdbs, char *why);

#endif
