/* salt.c: the cache salt on the keys (salt.h says why at the keys). */
#include "salt.h"

#include <stdio.h>

/* splitmix64's finaliser: every input bit moves about half the output's */
static uint64_t mix64(uint64_t x)
{
	x ^= x >> 30;
	x *= 0xbf58476d1ce4e5b9ull;
	x ^= x >> 27;
	x *= 0x94d049bb133111ebull;
	x ^= x >> 31;
	return x;
}

void cache_salt_ids(int32_t *ids, uint64_t n, uint64_t pos0, uint64_t salt)
{
	if (salt == 0)
		return;
	uint64_t s = mix64(salt);
	for (uint64_t i = 0; i < n; i++) {
		uint64_t k = mix64(s ^ ((pos0 + i) * 0x9e3779b97f4a7c15ull));
		ids[i] = (int32_t)((uint32_t)ids[i] ^ (uint32_t)(k & 0x7fffffffu));
	}
}

const char *cache_salt_session(const char *session, uint64_t salt, char *out,
			       size_t n)
{
	if (salt == 0 || !session || !session[0])
		return session;
	snprintf(out, n, "%016llx:%s", (unsigned long long)salt, session);
	return out;
}
