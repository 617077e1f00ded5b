#!/bin/sh
# run_fuzz_cached.sh SRC OUTDIR MKCORPUS: builds cached/fuzz_cached.c (the
# daemon's handler over every message it accepts, HELLO included) with
# clang's libFuzzer plus ASan and UBSan into OUTDIR and runs it for
# ${MOOR_FUZZ_S:-20} seconds, seed 1, on a corpus of one valid message of
# every type (tests/proto's mkcorpus) alone and in sequences. Without clang
# this FAILS rather than skips: deploy/setup installs clang.
set -u
src=$1
out=$2
mkcorpus=$3
CLANG=${CLANG:-clang}
secs=${MOOR_FUZZ_S:-20}
if ! command -v "$CLANG" >/dev/null 2>&1; then
	echo "run_fuzz_cached.sh: FAIL: '$CLANG' not found (deploy/setup" \
		"installs clang and libclang-rt-dev)" >&2
	exit 1
fi
bin=$out/fuzz_cached
# shellcheck disable=SC2046
if ! "$CLANG" -std=gnu11 -D_GNU_SOURCE -g -O1 \
	-fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
	-Wall -Wextra -Wno-unused-parameter -Wno-unused-function \
	-I"$src/cached" -I"$src/proto" -I"$src/common" \
	$(pkg-config --cflags jansson libxxhash libzstd lmdb 2>/dev/null) \
	"$src/cached/fuzz_cached.c" "$src/cached/handlers.c" \
	"$src/cached/replies.c" "$src/cached/salt.c" "$src/cached/arena.c" \
	"$src/cached/arena_nocuda.c" "$src/cached/cache.c" \
	"$src/cached/planner.c" "$src/cached/resident.c" "$src/cached/stash.c" \
	"$src/cached/span.c" "$src/cached/pin.c" "$src/cached/park.c" \
	"$src/cached/store.c" "$src/cached/budget.c" "$src/cached/dfile.c" \
	"$src/cached/spill.c" "$src/cached/codec.c" "$src/cached/disk.c" \
	"$src/cached/kvdb.c" "$src/cached/ledger.c" "$src/cached/stats.c" \
	"$src/cached/tiers.c" \
	"$src/proto/proto.c" "$src/proto/net.c" \
	"$src/common/moor.c" "$src/common/buf.c" "$src/common/util.c" \
	"$src/common/pool.c" \
	$(pkg-config --libs jansson libxxhash libzstd lmdb) -lnng \
	-lpthread -lm -o "$bin"; then
	echo "run_fuzz_cached.sh: FAIL: cannot build $bin with $CLANG" >&2
	exit 1
fi
msgs=$out/fuzz-cached-msgs
corpus=$out/fuzz-cached-corpus
rm -rf "$msgs" "$corpus"
mkdir -p "$msgs" "$corpus" || exit 1
"$mkcorpus" "$msgs" >/dev/null || exit 1
python3 - "$msgs" "$corpus" <<'PY' || exit 1
import os, struct, sys
src, dst = sys.argv[1:3]
eng = ("HELLO", "PLAN", "COMMIT", "ABORT")
adm = ("STATS", "CLEAR", "PEEK", "END_GET")
recs = {}
for f in sorted(os.listdir(src)):
    t = f.split("-")[0]
    b = open(os.path.join(src, f), "rb").read()[:65535]
    w = 0 if t in eng else 1
    rec = bytes([w]) + struct.pack("<H", len(b)) + b
    recs.setdefault(t, []).append(rec)
    open(os.path.join(dst, f), "wb").write(rec)
seq = []
for t in ("HELLO", "PLAN", "COMMIT", "PLAN", "ABORT", "PEEK", "END_GET", "STATS", "CLEAR"):
    seq += recs.get(t, [])[:1]
open(os.path.join(dst, "sequence"), "wb").write(b"".join(seq))
PY
log=$out/fuzz-cached.log
"$bin" -max_total_time="$secs" -seed=1 -max_len=65536 -rss_limit_mb=2048 \
	-print_final_stats=1 "$corpus" >"$log" 2>&1
rc=$?
tail -n 12 "$log"
if [ $rc -ne 0 ]; then
	echo "run_fuzz_cached.sh: FAIL: the fuzzer found a crash (exit $rc); see $log" >&2
	exit 1
fi
grep -E '^Done [0-9]+ runs' "$log" || {
	echo "run_fuzz_cached.sh: FAIL: the fuzzer did not finish" >&2
	exit 1
}
exit 0
