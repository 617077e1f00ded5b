/* fuzz_decode.c: libFuzzer target for proto_decode.
 *
 * Any input either fails to decode cleanly, or decodes, and then the
 * encoding is canonical: re-encoding gives back the input bytes, and
 * decoding that and encoding again gives the same bytes once more.
 * Sanitizers (address, undefined) catch the reads and leaks. */
#include "proto.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define FUZZ_ASSERT(x)                                                         \
	do {                                                                   \
		if (!(x))                                                      \
			abort();                                               \
	} while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	proto_msg a, b;
	moor_buf e1 = {0}, e2 = {0};
	if (proto_decode(data, size, &a) == 0) {
		FUZZ_ASSERT(proto_encode(&e1, &a) == 0);
		FUZZ_ASSERT(e1.len == size && memcmp(e1.p, data, size) == 0);
		FUZZ_ASSERT(proto_decode(e1.p, e1.len, &b) == 0);
		FUZZ_ASSERT(proto_encode(&e2, &b) == 0);
		FUZZ_ASSERT(e2.len == e1.len &&
			    memcmp(e2.p, e1.p, e1.len) == 0);
		proto_msg_fini(&b);
	}
	proto_msg_fini(&a);
	moor_buf_fini(&e1);
	moor_buf_fini(&e2);
	return 0;
}
