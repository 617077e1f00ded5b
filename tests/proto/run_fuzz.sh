#!/bin/sh
# run_fuzz.sh SRC OUTDIR MKCORPUS: builds proto/fuzz_decode.c with clang's
# libFuzzer (plus ASan and UBSan) into OUTDIR and runs it for 20 seconds,
# seed 1, on a corpus of one valid message of every type. Without clang
# this FAILS rather than skips: deploy/setup installs clang.
set -u
src=$1
out=$2
mkcorpus=$3
CLANG=${CLANG:-clang}

if ! command -v "$CLANG" >/dev/null 2>&1; then
	echo "run_fuzz.sh: FAIL: '$CLANG' not found; the proto fuzz test needs" \
		"clang with libFuzzer (clang, libclang-rt-dev; deploy/setup" \
		"installs them)" >&2
	exit 1
fi

bin=$out/fuzz_decode
if ! "$CLANG" -std=gnu11 -D_GNU_SOURCE -g -O1 \
	-fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
	-Wall -Wextra -Wno-unused-parameter \
	-I"$src/proto" -I"$src/common" \
	"$src/proto/fuzz_decode.c" "$src/proto/proto.c" "$src/common/moor.c" \
	"$src/common/buf.c" \
	-lm -o "$bin"; then
	echo "run_fuzz.sh: FAIL: cannot build $bin with $CLANG" \
		"-fsanitize=fuzzer (is libclang-rt-dev installed?)" >&2
	exit 1
fi

corpus=$out/fuzz-corpus
rm -rf "$corpus"
mkdir -p "$corpus" || exit 1
"$mkcorpus" "$corpus" || exit 1

log=$out/fuzz.log
"$bin" -max_total_time=20 -seed=1 -max_len=16384 -print_final_stats=1 \
	"$corpus" >"$log" 2>&1
rc=$?
tail -n 25 "$log"
if [ $rc -ne 0 ]; then
	echo "run_fuzz.sh: FAIL: the fuzzer found a crash (exit $rc); see $log" >&2
	exit 1
fi
grep -E '^Done [0-9]+ runs' "$log" || {
	echo "run_fuzz.sh: FAIL: the fuzzer did not finish" >&2
	exit 1
}
exit 0
