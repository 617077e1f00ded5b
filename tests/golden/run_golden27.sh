#!/bin/sh
# run_golden27.sh BUILD_DIR [OUTDIR]: issue 10's golden check at 27B width,
# on the GPU host (python3 with torch + transformers 5.17 and a CUDA GPU;
# BUILD_DIR a build of this tree with -Dcuda=enabled).
#
#   1. tests/golden/make_golden.py --width27b OUTDIR --device cuda: a
#      Qwen3.5 checkpoint of 27B width with 4 layers (L L L F, random bf16
#      weights, 8.1 GB), transformers' logits of a 2,048-token prefill and
#      32 greedy steps (golden.bin, 2.1 GB), and its own chunked-vs-one-shot
#      floor (floor.json);
#   2. BUILD_DIR/tests/engine/golden_check OUTDIR --backend cuda: our engine
#      on the same files, the table, exit 1 on a miss.
#
# First the same two steps at a small width (--small, OUTDIR-small, a few
# seconds) to try the path; GOLDEN27_SMALL=0 leaves that out. OUTDIR
# defaults to /dev/shm/moor-golden27 (the gpu suite's golden_check_27b_cuda
# reads it there). Extra arguments for make_golden.py: GOLDEN27_ARGS (e.g.
# --allow-kernels where fla is installed). Disk: about 10.3 GB in OUTDIR.
# Exit status: golden_check's at 27B width (0 ok, 1 a miss), or the first
# failing step's.
set -u
[ $# -ge 1 ] || { echo "usage: $0 BUILD_DIR [OUTDIR]" >&2; exit 2; }
B=$1
OUT=${2:-/dev/shm/moor-golden27}
SRC=$(cd "$(dirname "$0")/../.." && pwd)
CHECK=$B/tests/engine/golden_check
PY=${PYTHON:-python3}
[ -x "$CHECK" ] || { echo "$0: no $CHECK: build first (meson setup $B -Dcuda=enabled; ninja -C $B)" >&2; exit 2; }

run() {
	echo "+ $*"
	"$@"
}

need=12000000 # KiB: 8.1 GB checkpoint + 2.1 GB golden.bin + the small run, and room
mkdir -p "$(dirname "$OUT")"
free=$(df -Pk "$(dirname "$OUT")" | awk 'NR == 2 { print $4 }')
if [ "${free:-0}" -lt "$need" ]; then
	echo "$0: $(dirname "$OUT") has ${free:-?} KiB free, needs $need" >&2
	exit 2
fi
run "$PY" -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__, 'cuda', torch.cuda.is_available())" || exit 2
run nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv || true

small_rc=skipped
if [ "${GOLDEN27_SMALL:-1}" != 0 ]; then
	echo "=== small width (the path, in seconds)"
	t0=$(date +%s)
	# shellcheck disable=SC2086
	if run "$PY" "$SRC/tests/golden/make_golden.py" --width27b "$OUT-small" --small --device cuda ${GOLDEN27_ARGS:-}; then
		run "$CHECK" "$OUT-small" --backend cuda
		small_rc=$?
	else
		small_rc=make_golden-failed
	fi
	echo "=== small width: golden_check exit $small_rc, $(($(date +%s) - t0)) s"
fi

echo "=== 27B width, 4 layers"
t0=$(date +%s)
# shellcheck disable=SC2086
run "$PY" "$SRC/tests/golden/make_golden.py" --width27b "$OUT" --device cuda --prompt 2048 --decode 32 ${GOLDEN27_ARGS:-} || {
	echo "=== make_golden.py failed (exit $?) after $(($(date +%s) - t0)) s"
	exit 1
}
t1=$(date +%s)
echo "=== make_golden.py: $((t1 - t0)) s"
run ls -l "$OUT"
echo "+ floor.json's floor:"
sed -n '/"floor": {/,/}/p' "$OUT/floor.json"
run "$CHECK" "$OUT" --backend cuda
rc=$?
t2=$(date +%s)
echo "=== golden_check: exit $rc, $((t2 - t1)) s; small width: $small_rc"
run du -sh "$OUT" "$OUT-small"
exit $rc
