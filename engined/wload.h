/* wload.h: copies a checkpoint's tensors onto a backend fast
 * (`eng_wload_`).
 *
 * A mmapped checkpoint handed to upload() page by page reads at the rate
 * one thread faults pages in and the driver copies pageable memory (a few
 * GB/s). This reader does what the issue's >= 5 GB/s asks instead: the
 * caller first says where each tensor goes (eng_wload_add: a device
 * pointer per tensor, nothing read yet); eng_wload_run then reads the
 * files in large blocks with several threads (pread, O_DIRECT where
 * cfg.direct asks and the file system takes it), into staging blocks of
 * the backend's host_alloc memory when it has one (CUDA: pinned, so the
 * upload is a DMA), and uploads each block while the next ones are read.
 * A loaded byte is the file's byte: the blocks only cut and carry them.
 *
 * The pipeline. The requests are sorted by file and offset and cut into
 * blocks of at most cfg.block bytes (each starting at a 4 KiB-aligned file
 * offset, as O_DIRECT needs); block i is staged in slot i % slots. Reader
 * threads take the next block, wait until its slot is free, read it whole;
 * the caller's thread uploads block i when it is read, on queue i % 2 (the
 * compute and the copy queue), then syncs the other queue, which frees
 * block i - 1's slot. So at most two blocks are in flight to the device
 * and the others are being read; an upload's source (a slot) stays
 * untouched until its queue's sync, as upload() requires.
 *
 * Ownership: the loader borrows ops, ctx and the file names (and, with
 * cfg.mmap, the mappings) of the tensors added (an eng_ckpt's, which must
 * stay open until the run ends);
 * dst pointers are the caller's. eng_wload_free() releases the staging and
 * the file descriptors. One thread uses a loader at a time.
 *
 * Errors: 0 or a negative code; err (MOOR_ERRLEN, may be NULL) names the
 * file and offset of a failed read, or the upload that failed. A file
 * shorter than a tensor's end (it shrank since the checkpoint was opened)
 * is MOOR_ETRUNC. After a failed run the destinations hold any bytes. */
#ifndef ENG_WLOAD_H
#define ENG_WLOAD_H

#include <stddef.h>
#include <stdint.h>

#include "ckpt.h"
#include "ops.h"

typedef struct eng_wload_cfg {
	int threads;  /* reader threads; 0 = 8 */
	size_t block; /* bytes a read, rounded up to 4 KiB; 0 = 32 MiB */
	int slots;    /* staging blocks; 0 = 2 * threads + 2 (at least 3) */
	int direct;   /* O_DIRECT where the file system takes it (a cold
			 read from NVMe; the page cache is faster without) */
	int mmap;     /* the readers copy from the checkpoint's mapping
			 (eng_tensor.data) instead of pread: no syscall a
			 block, a page fault a page instead (which is
			 cheaper depends on the kernel; bench_load says) */
	int progress; /* a log line (GB, GB/s) each second of a run */
} eng_wload_cfg;

typedef struct eng_wload_stats {
	uint64_t bytes;	     /* tensor bytes uploaded */
	uint64_t read_bytes; /* bytes read from files (whole blocks) */
	uint64_t blocks;
	double seconds; /* of the run */
	int pinned;	/* staged in the backend's host_alloc memory */
	int direct;	/* files read with O_DIRECT */
	int files;
} eng_wload_stats;

typedef struct eng_wload eng_wload;

/* A loader for ops/ctx (queues: the context's compute and copy queues).
 * cfg may be NULL (the defaults). */
int eng_wload_new(const kern_ops *ops, kern_ctx *ctx, const eng_wload_cfg *cfg,
		  eng_wload **out);
void eng_wload_free(eng_wload *w); /* safe on NULL */

/* dst[0, t->nbytes) is to get t's bytes at the next run. Nothing is read
 * here; t->file is borrowed until the run. */
int eng_wload_add(eng_wload *w, void *dst, const eng_tensor *t);

/* Reads and uploads every tensor added since the last run; on return both
 * queues are synced (the bytes are on the device). st may be NULL. */
int eng_wload_run(eng_wload *w, eng_wload_stats *st, char *err);

#endif
