/* fuzz_loader.c: libFuzzer target for what a checkpoint directory hands the
 * loader (issue 13's fuzzing): the first input byte picks the file, the
 * rest is its bytes, written into a private directory and opened as
 * engined opens it:
 *   even: model.safetensors (the 8-byte header length, the JSON header,
 *         the data), through eng_ckpt_open and every tensor's to-f32 read;
 *   odd:  config.json, through qwen35_config_load.
 * Every input must end in a checkpoint or a clean error (a message in
 * err); the sanitizers catch the rest. */
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ckpt.h"
#include "config.h"
#include "moor.h"

#define FUZZ_ASSERT(x)                                                         \
	do {                                                                   \
		if (!(x))                                                      \
			abort();                                               \
	} while (0)

static char dir[64];

static void cleanup(void)
{
	char p[128];
	snprintf(p, sizeof p, "%s/model.safetensors", dir);
	unlink(p);
	snprintf(p, sizeof p, "%s/config.json", dir);
	unlink(p);
	rmdir(dir);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	snprintf(dir, sizeof dir, "/tmp/moor-fuzz-loader-XXXXXX");
	if (!mkdtemp(dir))
		abort();
	atexit(cleanup);
	moor_log_level = MOOR_LOG_ERROR;
	return 0;
}

static void put(const char *name, const uint8_t *p, size_t n)
{
	char path[128];
	snprintf(path, sizeof path, "%s/%s", dir, name);
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	FUZZ_ASSERT(fd >= 0);
	FUZZ_ASSERT(n == 0 || write(fd, p, n) == (ssize_t)n);
	close(fd);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (!size)
		return 0;
	char err[MOOR_ERRLEN] = "";
	if (data[0] % 2 == 0) {
		put("model.safetensors", data + 1, size - 1);
		eng_ckpt *c = NULL;
		if (eng_ckpt_open(dir, &c, err) == 0) {
			for (size_t i = 0; i < eng_ckpt_count(c); i++) {
				const eng_tensor *t = eng_ckpt_at(c, i);
				int64_t n = eng_tensor_numel(t);
				if (n <= 0 || n > (1 << 20))
					continue;
				float *f = malloc((size_t)n * sizeof *f);
				if (f)
					(void)eng_tensor_to_f32(t, f, (size_t)n);
				free(f);
			}
			eng_ckpt_close(c);
		} else {
			FUZZ_ASSERT(err[0]);
		}
	} else {
		put("config.json", data + 1, size - 1);
		qwen35_config cfg;
		if (qwen35_config_load(dir, &cfg, err))
			FUZZ_ASSERT(err[0]);
	}
	return 0;
}
