/* salt.h: a tenant's cache salt applied to the keys of every cache
 * (`cache_salt_`).
 *
 * Why at the keys. Every tier of cached (the rows in place and their
 * anchors, the end anchor, stash, pin, park, state store, the session
 * spill, the disk tier) finds a prompt's state by its token ids: by their
 * prefix-chain hash, then element by element. A salt that only seeded the
 * hash would leave the tiers that compare ids directly (the rows in place,
 * the pin, the park) matching across tenants. So the daemon salts the ids
 * themselves as they enter (PLAN, COMMIT's generated ids, PEEK, END_GET)
 * and unsalts the ids it hands back (END_OK): the core, and every tier in
 * it, sees salted ids only, hashes them from the root of the chain and
 * compares them, and needs no edit to key by tenant.
 *
 * The transform. Salt 0 (PROTO_SALT_NONE) is the identity: an unsalted
 * request keys exactly as before salts existed. Otherwise the id at
 * position i is XORed with k(salt, i), 31 bits of a 64-bit mix of the salt
 * and the position, so a salted id is still a non-negative int32 and
 * applying the transform twice gives the id back. Two requests of the same
 * salt share exactly the prefixes they shared unsalted. Two of different
 * salts agree at a position only where id_a ^ id_b == k(a, i) ^ k(b, i), a
 * chance of 2^-31 per position for ids the tenants do not control through
 * the other's key; the shortest state any tier resumes (a grid chunk, or
 * an end anchor of the few tokens of the shortest chat template) would
 * need all of its positions to agree. The salt itself is a hash of the
 * tenant's cache_salt and key (gatewayd), so k() is not known to another
 * tenant.
 *
 * Sessions. A salted request's session key is qualified by the salt
 * ("<salt hex>:<session>"), so two tenants' equal x-session-id values are
 * two sessions (a spill entry named by one is not the other's). */
#ifndef CACHED_SALT_H
#define CACHED_SALT_H

#include <stddef.h>
#include <stdint.h>

/* ids[i] of the ids at positions [pos0, pos0 + n) salted (or unsalted:
 * the same call), in place. No-op for salt 0. */
void cache_salt_ids(int32_t *ids, uint64_t n, uint64_t pos0, uint64_t salt);

/* The session key of a salted request in out (size n >= 18 +
 * strlen(session)): session itself for salt 0 or no session (NULL or
 * ""), else "<16 hex>:<session>". Returns the key to use (session, or
 * out). */
const char *cache_salt_session(const char *session, uint64_t salt, char *out,
			       size_t n);

#endif
