/* eng.h: the engine's model interface (`eng_`).
 *
 * A model adapter turns a checkpoint into a forward pass and describes the
 * state of one sequence to the caches, which know no model:
 *
 *   sections  recurrent tensors that absorb every token (for Qwen3.5 each
 *             GDN layer's delta-rule state and its conv tail), copied whole;
 *   views     position-indexed buffers with a token axis (each attention
 *             layer's K and V), valid up to the sequence's length.
 *
 * The buffers of a sequence (eng_seq) are device pointers that the caller
 * owns: the engine allocates them in tests and one-shot runs, and cached's
 * arena holds them when the daemons run. The engine only computes into them.
 *
 * Prefill runs on a grid of absolute positions (eng_opts.grid, 1,024 by
 * default): a prefill from length b forwards the chunks [b, next line),
 * [line, line + grid), ..., so a resume at a grid line forwards exactly the
 * chunks a cold prefill forwards after it, and its logits, state and rows
 * equal the cold prefill's bit for bit.
 */
#ifndef ENG_H
#define ENG_H

#include <stddef.h>
#include <stdint.h>

#include "ops.h"

#define ENG_NAME_MAX 48
#define ENG_MAX_DIMS 4

/* One recurrent section: `bytes` of `dtype`, shape dims (row-major). */
typedef struct eng_section {
	char name[ENG_NAME_MAX]; /* "gdn.S", "gdn.conv", ... */
	int layer;               /* model layer, or -1 */
	int dtype;               /* kern_dtype */
	int ndim;
	int64_t dims[ENG_MAX_DIMS];
	size_t bytes;
} eng_section;

/* One view: a tensor of `dtype` with dims, one of which (token_axis) is the
 * token axis of length `window`; dims[token_axis] is 1 here and the buffer
 * holds `window` along it. row_bytes is the bytes of one token's slice. */
typedef struct eng_view {
	char name[ENG_NAME_MAX]; /* "attn.K", "attn.V", ... */
	int layer;
	int dtype;
	int ndim;
	int64_t dims[ENG_MAX_DIMS];
	int token_axis;
	size_t row_bytes;
} eng_view;

#define ENG_MAX_SECTIONS 512
#define ENG_MAX_VIEWS 512

typedef struct eng_layout {
	int n_sections;
	eng_section sec[ENG_MAX_SECTIONS];
	int n_views;
	eng_view view[ENG_MAX_VIEWS];
	int64_t window; /* tokens a view holds */
	int grid;       /* prefill grid, tokens */
	size_t section_bytes; /* all sections together */
	size_t row_bytes;     /* one token across all views */
} eng_layout;

/* A sequence's buffers: one device pointer per section and per view, in the
 * layout's order, and the number of tokens the state has absorbed. */
typedef struct eng_seq {
	void **sec;
	void **view;
	int64_t len;
} eng_seq;

enum { ENG_LOAD_SAFETENSORS = 0, ENG_LOAD_DUMMY = 1 };

typedef struct eng_opts {
	int grid;       /* prefill grid (a multiple of 64); 0 = 1024 */
	/* Tokens of one prefill forward (a multiple of the grid; 0 = the
	 * grid on a host backend, 4 chunks on a device): whole chunks between grid lines run this many rows at a
	 * time through the products and the row-wise ops, and a chunk at a
	 * time through the conv, the delta rule and attention, with the
	 * same bits as one chunk a forward (longer products are a device's
	 * faster ones). */
	int span;
	int64_t window; /* max tokens per sequence; 0 = min(max_pos, 32768) */
	int threads;    /* CPU backend threads; 0 = 1 */
	/* ENG_LOAD_DUMMY (vLLM's --load-format dummy): no safetensors are
	 * read; every weight is filled on the backend with seeded uniform
	 * values (fill_random) from config.json's shapes alone, for
	 * benchmarks of shapes whose files cannot be shipped. */
	int load_format;
	uint64_t seed; /* of the dummy weights */
	int progress;  /* log a progress line (bytes, GB/s) while loading */
} eng_opts;

typedef struct eng_model eng_model;

/* The backend an operator names (`--backend auto|cpu|cuda`): auto is CUDA
 * when this build has it and its probe finds `device`, else the CPU
 * backend; a named backend this build lacks, or whose probe fails, is NULL.
 * why (MOOR_ERRLEN) gets the sentence for the start-up log: which backend
 * and why, or why none. */
const kern_ops *eng_backend_pick(const char *name, int device, char *why);

/* Loads DIR (config.json + safetensors) onto the backend. On failure returns
 * a negative code and fills err (naming the file and tensor). The model
 * borrows ops and ctx, which must outlive it. */
int eng_model_load(const char *dir, const kern_ops *ops, kern_ctx *ctx,
		   const eng_opts *opts, eng_model **out, char *err);
void eng_model_free(eng_model *m); /* safe on NULL */

const eng_layout *eng_model_layout(const eng_model *m);
int eng_model_vocab(const eng_model *m);
/* The prefill workspace carved at load (bytes): the same for every prompt
 * length (a forward of `span` tokens; attention reads the views in
 * place). */
size_t eng_model_workspace_bytes(const eng_model *m);
/* Tokens of one prefill forward (eng_opts.span): a caller that prefills
 * a chunk at a time for its progress calls with up to this many. */
int eng_model_span(const eng_model *m);
/* Bytes of weights on the backend, and how long the load took (s). */
uint64_t eng_model_weight_bytes(const eng_model *m);
double eng_model_load_seconds(const eng_model *m);
/* The backend's one-line description (kern_ops.describe). */
void eng_model_describe(const eng_model *m, char *out, size_t n);
int eng_model_eos(const eng_model *m); /* -1 if none */

/* Engine-owned sequence buffers, zeroed (for tests and one-shot runs). */
int eng_seq_alloc(eng_model *m, eng_seq *s);
void eng_seq_free(eng_model *m, eng_seq *s); /* safe on zeroed */
/* Resets the sequence to length 0 (zeroes its sections). */
int eng_seq_reset(eng_model *m, eng_seq *s);

/* KEEP leaves the last token's logits on the device for eng_model_sample
 * (no [vocab] floats cross to the host). */
enum {
	ENG_LOGITS_NONE = 0,
	ENG_LOGITS_LAST = 1,
	ENG_LOGITS_ALL = 2,
	ENG_LOGITS_KEEP = 3,
};

/* Prefills ids[0..n) at positions s->len.. on the grid, advancing s->len.
 * logits (host memory): NONE; LAST, [vocab] for the last token; or ALL,
 * [n, vocab]; KEEP: none to the host (logits NULL). Every id must be below
 * the vocabulary (checked here, on the host: MOOR_ERANGE, nothing run).
 * Fails with MOOR_ERANGE past the window; on failure the sequence's state
 * is undefined from s->len on (the caller restores). The ids are read
 * before the call returns. */
int eng_prefill(eng_model *m, eng_seq *s, const int32_t *ids, int64_t n,
		float *logits, int mode);

/* An anchor slot: when the prefill reaches `line` (the end of a chunk),
 * every section is copied to dst, back to back in the layout's order
 * (layout.section_bytes in all). dst is a device pointer (cached's arena). */
typedef struct eng_slot {
	int64_t line;
	void *dst;
} eng_slot;

/* eng_prefill that also fills the slots whose lines it passes, in order;
 * *n_filled counts the slots filled (a prefix of the list: slots must be in
 * ascending line order; a slot whose line is not a chunk end is left).
 * The slot of a forward's last line is copied on the backend's copy
 * queue, overlapping the next forward's compute; a line inside a forward
 * of several chunks is copied layer by layer on the compute queue as the
 * forward passes it. Either is complete once eng_model_sync() returns
 * (or any call that downloads logits). */
int eng_prefill_slots(eng_model *m, eng_seq *s, const int32_t *ids,
		      int64_t n, float *logits, int mode, const eng_slot *slots,
		      int n_slots, int *n_filled);

/* One decode step (the recurrent form): forwards id at position s->len and
 * writes its logits [vocab] to host memory, or keeps them on the device
 * for eng_model_sample when logits is NULL. On a backend with graphs the
 * step is one graph launch (one graph per length bucket, captured at its
 * first use and kept while the sequence's buffers stay the same). */
int eng_decode(eng_model *m, eng_seq *s, int32_t id, float *logits);

/* Waits for every queue of the model: on return the sequence's buffers and
 * every filled slot hold their bytes, and an error of enqueued work
 * surfaces here. Whoever hands the sequence's memory to another process
 * calls it first (engined before COMMIT and ABORT). */
int eng_model_sync(eng_model *m);

/* ---- sampler ---- */

typedef struct eng_sampling {
	float temperature; /* 0: greedy */
	int top_k;         /* 0: off */
	float top_p;       /* 1: off */
	float min_p;       /* 0: off */
	uint64_t seed;
} eng_sampling;

typedef struct eng_sampler eng_sampler;

/* The sampler holds the parameters, a xoshiro256** stream seeded once
 * (one 64-bit draw per non-greedy pick) and a host scratch for
 * eng_sample. The rule is kern_ops.sample's (ops.h). */
eng_sampler *eng_sampler_new(int vocab, const eng_sampling *p);
void eng_sampler_free(eng_sampler *s);
/* Picks a token from host logits [vocab]. */
int32_t eng_sample(eng_sampler *s, const float *logits);
/* Picks a token from the logits the last prefill (LAST or KEEP) or decode
 * left on the device, on the device: only the id comes back. The same seed
 * and logits give the same tokens as eng_sample. */
int eng_model_sample(eng_model *m, eng_sampler *s, int32_t *out);
/* The logprobs (kern_ops.logprobs: the raw logits' log-softmax) of those
 * same logits, on the device: lp[0] token tok's, then the n_top
 * (<= KERN_LOGPROBS_MAX) likeliest tokens in ids with their values in
 * lp[1..]. Only 2 n_top + 1 values come back. */
int eng_model_logprobs(eng_model *m, int32_t tok, int n_top, float *lp,
		       int32_t *ids);

#endif
