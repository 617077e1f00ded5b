/* sum_ref.h: dfile_sum2's two sums from their definition (dfile.h), a
 * byte at a time: the reference test_arena and test_spill_sums_parts
 * check the real ones against. */
#ifndef SUM_REF_H
#define SUM_REF_H

#include <stdint.h>

/* s[0] = sum of the little-endian 32-bit words w_i of p[0, n) (the last
 * one padded with zeros), s[1] = sum of (i + 1) w_i, both mod 2^64 */
static inline void sum2_ref(const uint8_t *p, uint64_t n, uint64_t s[2])
{
	s[0] = s[1] = 0;
	for (uint64_t i = 0; 4 * i < n; i++) {
		uint64_t x = 0;
		for (uint64_t k = 0; k < 4 && 4 * i + k < n; k++)
			x |= (uint64_t)p[4 * i + k] << (8 * k);
		s[0] += x;
		s[1] += (i + 1) * x;
	}
}

#endif
