/* test_gw_tiny_ends_answers: the tiny model ends its answers (moor-mktiny's
 * end-token bias). Through the stack, 16 one-turn chats of different
 * prompts, greedy, max_tokens 300: most end with finish "stop" before
 * max_tokens, their median length is a few dozen tokens (not 1, not 300),
 * the stop is the end token (no text after it), and the same requests
 * with ignore_eos still run to max_tokens (finish "length"). Greedy runs
 * are deterministic, so the counts are the same on every run; the bounds
 * leave room for a model change that keeps the bias's meaning. */
#include <stdlib.h>

#include "t.h"

#include "gwtest.h"
#include "harness.h"

#define N_PROMPTS 16
#define MAX_TOKENS 300

static const char *const prompts[N_PROMPTS] = {
    "Hello",
    "Tell me a story.",
    "What is the weather in Oslo today?",
    "Write a python function that sorts a list of numbers.",
    "Why is the sky blue?",
    "Summarise the plot of Hamlet in three sentences.",
    "Generate a short title for this conversation.",
    "List five fruits.",
    "Translate 'good morning' into French.",
    "Explain recursion to a child.",
    "What is 17 times 23?",
    "Give me a haiku about the sea.",
    "How do I undo the last git commit?",
    "Name a famous dragon.",
    "Is a tomato a fruit or a vegetable?",
    "Describe the colour red without naming it.",
};

static int cmp_int(const void *a, const void *b)
{
	int x = *(const int *)a, y = *(const int *)b;
	return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
	gt_stack(argc, argv, "gwends", 300, NULL, NULL, NULL);
	int len[N_PROMPTS], n_stop = 0, n_empty = 0;
	for (int i = 0; i < N_PROMPTS; i++) {
		char *body = gt_chat_body(prompts[i], MAX_TOKENS, NULL);
		gt_resp r = gt_post(gt_.port, "/v1/chat/completions", body);
		free(body);
		REQUIRE(r.status == 200, "chat %d: %d %s", i, r.status, r.body);
		json_t *o = gt_json(&r);
		const char *fin = gt_str(o, "choices.0.finish_reason");
		if (!fin)
			fin = "(none)";
		const char *content = gt_str(o, "choices.0.message.content");
		len[i] = (int)gt_int(o, "usage.completion_tokens");
		CHECK((!strcmp(fin, "stop") || !strcmp(fin, "length")),
		      "chat %d: finish %s", i, fin);
		if (!strcmp(fin, "stop")) {
			n_stop++;
			CHECK(len[i] < MAX_TOKENS, "chat %d: stop at %d", i,
			      len[i]);
			CHECK(!content || !strstr(content, "<|im_end|>"),
			      "chat %d: the end token is not text", i);
		} else {
			CHECK(len[i] == MAX_TOKENS, "chat %d: length at %d", i,
			      len[i]);
		}
		n_empty += !content || !*content;
		printf("chat %2d: %-6s %3d tokens\n", i, fin, len[i]);
		json_decref(o);
		gt_resp_fini(&r);
	}
	int sorted[N_PROMPTS];
	memcpy(sorted, len, sizeof sorted);
	qsort(sorted, N_PROMPTS, sizeof *sorted, cmp_int);
	int median = (sorted[N_PROMPTS / 2 - 1] + sorted[N_PROMPTS / 2]) / 2;
	printf("%d of %d ended before %d tokens; median %d tokens, %d empty\n",
	       n_stop, N_PROMPTS, MAX_TOKENS, median, n_empty);
	CHECK(n_stop >= 12, "only %d of %d answers ended", n_stop, N_PROMPTS);
	CHECK(median >= 8 && median <= 120,
	      "median answer %d tokens: not a few dozen", median);
	CHECK(n_empty <= 3, "%d answers ended before any text", n_empty);

	/* ignore_eos: the bias does not stop a request that asked to go on */
	char *body = gt_chat_body(prompts[1], 64, "\"ignore_eos\":true");
	gt_resp r = gt_post(gt_.port, "/v1/chat/completions", body);
	free(body);
	json_t *o = gt_json(&r);
	CHECK(r.status == 200 && gt_str(o, "choices.0.finish_reason") &&
		  !strcmp(gt_str(o, "choices.0.finish_reason"), "length") &&
		  gt_int(o, "usage.completion_tokens") == 64,
	      "ignore_eos: %s", r.body);
	json_decref(o);
	gt_resp_fini(&r);
	return h_done("test_gw_tiny_ends_answers");
}
