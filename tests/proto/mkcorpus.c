/* mkcorpus: writes the fuzz seed corpus, one valid encoded message of every
 * type in the small sample sizes, into the directory argv[1]. */
#include "moor.h"
#include "proto.h"
#include "samples.h"

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: mkcorpus DIR\n");
		return 2;
	}
	moor_buf b = {0};
	int n = 0;
	for (size_t t = 0; t < N_SAMPLE_TYPES; t++)
		for (int size = S_EMPTY; size < S_MAX; size++) {
			proto_msg m;
			sample_make(&m, sample_types[t], size);
			int rv = proto_encode(&b, &m);
			proto_msg_fini(&m);
			if (rv) {
				fprintf(stderr, "mkcorpus: encode %s: %s\n",
					proto_type_name(sample_types[t]),
					moor_strerror(rv));
				return 1;
			}
			char path[4096];
			snprintf(path, sizeof path, "%s/%s-%s.bin", argv[1],
				 proto_type_name(sample_types[t]),
				 size_names[size]);
			FILE *f = fopen(path, "wb");
			if (!f || fwrite(b.p, 1, b.len, f) != b.len ||
			    fclose(f)) {
				perror(path);
				return 1;
			}
			n++;
		}
	moor_buf_fini(&b);
	printf("mkcorpus: %d messages in %s\n", n, argv[1]);
	return 0;
}
