#!/bin/sh
# run_fuzz_loader.sh SRC OUTDIR MODEL: builds engined/fuzz_loader.c
# (safetensors headers and config.json) with clang's libFuzzer plus ASan
# and UBSan into OUTDIR and runs it for ${MOOR_FUZZ_S:-20} seconds, seed 1,
# on a corpus of the tiny model's config.json and small safetensors files.
# Without clang this FAILS rather than skips: deploy/setup installs clang.
set -u
src=$1
out=$2
model=$3
CLANG=${CLANG:-clang}
secs=${MOOR_FUZZ_S:-20}
if ! command -v "$CLANG" >/dev/null 2>&1; then
	echo "run_fuzz_loader.sh: FAIL: '$CLANG' not found (deploy/setup" \
		"installs clang and libclang-rt-dev)" >&2
	exit 1
fi
bin=$out/fuzz_loader
# shellcheck disable=SC2046
if ! "$CLANG" -std=gnu11 -D_GNU_SOURCE -g -O1 \
	-fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
	-Wall -Wextra -Wno-unused-parameter \
	-I"$src/engined" -I"$src/kernels" -I"$src/common" \
	$(pkg-config --cflags jansson 2>/dev/null) \
	"$src/engined/fuzz_loader.c" "$src/engined/ckpt.c" \
	"$src/engined/config.c" "$src/common/moor.c" "$src/common/buf.c" \
	"$src/common/util.c" \
	$(pkg-config --libs jansson) -lpthread -lm -o "$bin"; then
	echo "run_fuzz_loader.sh: FAIL: cannot build $bin with $CLANG" >&2
	exit 1
fi
corpus=$out/fuzz-loader-corpus
rm -rf "$corpus"
mkdir -p "$corpus" || exit 1
{ printf '\001'; cat "$model/config.json"; } >"$corpus/config" || exit 1
python3 - "$corpus" <<'PY' || exit 1
import json, struct, sys
d = sys.argv[1]
def st(name, tensors):
    hdr, off, data = {"__metadata__": {"format": "pt"}}, 0, b""
    for n, (dt, shape, size) in tensors.items():
        hdr[n] = {"dtype": dt, "shape": shape, "data_offsets": [off, off + size]}
        data += bytes(range(size % 256)) * (size // 256) + bytes(size % 256)
        off += size
    h = json.dumps(hdr).encode()
    open(d + "/" + name, "wb").write(b"\0" + struct.pack("<Q", len(h)) + h + data[:off])
st("st_f32", {"a.weight": ("F32", [2, 2], 16)})
st("st_mixed", {"a": ("BF16", [4], 8), "b": ("F16", [2, 3], 12), "c": ("F32", [1], 4)})
PY
log=$out/fuzz-loader.log
"$bin" -max_total_time="$secs" -seed=1 -max_len=8192 -print_final_stats=1 \
	"$corpus" >"$log" 2>&1
rc=$?
tail -n 12 "$log"
if [ $rc -ne 0 ]; then
	echo "run_fuzz_loader.sh: FAIL: the fuzzer found a crash (exit $rc); see $log" >&2
	exit 1
fi
grep -E '^Done [0-9]+ runs' "$log" || {
	echo "run_fuzz_loader.sh: FAIL: the fuzzer did not finish" >&2
	exit 1
}
exit 0
