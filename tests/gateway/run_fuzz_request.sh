#!/bin/sh
# run_fuzz_request.sh SRC OUTDIR MODEL: builds gatewayd/fuzz_request.c (the
# request parser and the tokenizer's input) with clang's libFuzzer plus
# ASan and UBSan into OUTDIR and runs it for ${MOOR_FUZZ_S:-20} seconds,
# seed 1, on a corpus of chat and completion bodies. Without clang this
# FAILS rather than skips: deploy/setup installs clang.
set -u
src=$1
out=$2
model=$3
CLANG=${CLANG:-clang}
secs=${MOOR_FUZZ_S:-20}

if ! command -v "$CLANG" >/dev/null 2>&1; then
	echo "run_fuzz_request.sh: FAIL: '$CLANG' not found (deploy/setup" \
		"installs clang and libclang-rt-dev)" >&2
	exit 1
fi
bin=$out/fuzz_request
# shellcheck disable=SC2046
if ! "$CLANG" -std=gnu11 -D_GNU_SOURCE -g -O1 \
	-fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
	-Wall -Wextra -Wno-unused-parameter \
	-I"$src/gatewayd" -I"$src/gatewayd/text" -I"$src/proto" -I"$src/common" \
	$(pkg-config --cflags libh2o libuv nng jansson libpcre2-8 libutf8proc 2>/dev/null) \
	"$src/gatewayd/fuzz_request.c" "$src/gatewayd/params.c" \
	"$src/gatewayd/limits.c" "$src"/gatewayd/text/*.c \
	"$src/common/moor.c" "$src/common/buf.c" "$src/common/util.c" \
	"$src/common/pool.c" \
	$(pkg-config --libs jansson libpcre2-8 libutf8proc libxxhash) \
	-lpthread -lm -o "$bin"; then
	echo "run_fuzz_request.sh: FAIL: cannot build $bin with $CLANG" >&2
	exit 1
fi

corpus=$out/fuzz-request-corpus
rm -rf "$corpus"
mkdir -p "$corpus" || exit 1
i=0
for b in \
	'{"messages":[{"role":"user","content":"Hello"}],"max_tokens":4}' \
	'{"messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"Hi"},{"role":"assistant","content":"<think>\nx\n</think>\n\nHello"},{"role":"user","content":"And?"}],"stream":true,"stream_options":{"include_usage":true},"stop":["END","\n\n"],"temperature":0,"cache_salt":"t1"}' \
	'{"messages":[{"role":"user","content":"weather?"}],"tools":[{"type":"function","function":{"name":"get","description":"d","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}}],"tool_choice":"auto"}' \
	'{"prompt":"Once upon a time","max_tokens":5,"seed":7}' \
	'{"prompt":[1,2,3,4],"max_tokens":2,"ignore_eos":true}' \
	'{"messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}],"reasoning_budget":8}' \
	'caf\303\251 na\303\257ve \360\237\230\200 \344\275\240\345\245\275 <|im_start|> 12345'; do
	printf '%b' "$b" >"$corpus/seed$i"
	i=$((i + 1))
done

log=$out/fuzz-request.log
MOOR_FUZZ_MODEL=$model "$bin" -max_total_time="$secs" -seed=1 -max_len=8192 \
	-rss_limit_mb=2048 -print_final_stats=1 "$corpus" >"$log" 2>&1
rc=$?
tail -n 15 "$log"
if [ $rc -ne 0 ]; then
	echo "run_fuzz_request.sh: FAIL: the fuzzer found a crash (exit $rc); see $log" >&2
	exit 1
fi
grep -E '^Done [0-9]+ runs' "$log" || {
	echo "run_fuzz_request.sh: FAIL: the fuzzer did not finish" >&2
	exit 1
}
exit 0
