#!/bin/bash
# tests/gpu/session.sh PHASE...: one call's work on a lent GPU host (no
# package registry), from a checkout that carries a bundle of
# `deploy/setup --bundle .bundle`. Each phase logs to $OUT/PHASE.log (what
# a call brings back) and prints a short tail; a phase that fails does not
# stop the next. Phases:
#   setup     deploy/setup --from .bundle (build/ with every core, models/tiny)
#   env       a later call on the warm machine: setup's environment, no build
#   suite     meson test --suite gpu --suite kern (the defaults)
#   mover     the GPU suite again with cached's CUDA mover one copy a call
#             on one stream (MOOR_MOVER_BATCH=0 MOOR_MOVER_LANES=0), or with
#             each of MOVER_ENVS (space-separated; VAR=V,VAR=V a run) over
#             MOVER_TESTS (meson test's arguments; default --suite gpu)
#   rt        the kern and golden GPU tests again with MOOR_GDN_RT=0 (the
#             delta rule's first kernels), then bench_kern's delta row
#             with it
#   wg        the kern and golden GPU tests again with MOOR_ATTN_WG=1
#   kern      bench_kern (every op), then its decode rows with MOOR_DEC_MMA=0
#   gpu       bench_gpu at 8k and 32k: the defaults, then MOOR_PDL=0
#             MOOR_DEC_MMA=0 MOOR_DEC_FUSE=0 (the decode step before them),
#             MOOR_PDL=1, MOOR_PF_FUSE=0
#   gpuab     bench_gpu at 8k and 32k: the defaults, then once with each
#             VAR=VALUE of GPU_AB (space-separated)
#   gpulong   bench_gpu at 1k, 8k, 32k, 64k and 128k (the issue's table)
#   segs      prefill attention's segments a piece (MOOR_ATTN_SEGS): bench_kern
#             --only attention, then bench_gpu at 32k and 128k, with each of
#             SEGS_AB (default "2048 1024 512"; 1024 is attn.cu's FL_TARGET)
#   tc        the delta rule on tensor cores (MOOR_GDN_TC=1: intra and
#             k_chunk_tc; 2: the state pass alone; 3: intra, the state
#             pass and the output; 1 in pieces of 8 sub-chunks):
#             bench_kern's delta row, then bench_gpu at 32k and 128k,
#             each against MOOR_GDN_TC=0
#   ct        the delta kernels' variants of the same bits (MOOR_GDN_IT=2:
#             k_intra_tc2; MOOR_GDN_CT=2: k_chunk_tc2): test_kern_backends
#             and test_gdn_tc_emu, bench_kern's delta row for each pair
#             (the defaults first and last), ncu's times of each kernel
#             at the defaults and at both 2, then bench_gpu at 32k and
#             128k, the defaults against both 2
#   pipe      MOOR_GDN_PIPE (the delta rule in pieces on two streams):
#             test_kern_backends (its case_gdn_rt_wide compares the
#             pieces by memcmp), bench_kern's delta row with pieces of 8,
#             4 and 2 sub-chunks, then bench_gpu at 32k and 128k with
#             pieces of 16, 8 and 4 against none
#   golden27  tests/golden/run_golden27.sh (transformers at 27B width)
#   load      bench_load: an 8-layer checkpoint of the 27B's width from /dev/shm
#   restore   bench_restore on CUDA: host arena <-> device GB/s, and the
#             anchor copy of a grid line (144 MiB) under the next chunk's
#             compute (the issue's "hidden" row)
#   ttft      bench_ttft on CUDA with dummy 27B weights at 32k and 128k
#   stack     stack_ttft: the whole stack (deploy/run, HTTP) on CUDA, dummy 27B
#   disk      bench_spill on the host's disk (the drive's O_DIRECT rate
#             beside the disk tier's and the spill's; a 32k head)
#   pf        bench_gpu's decode at 8k with MOOR_GEMV_PF=0, 2, 4, 8 (the
#             GEMV's prefetch passes), MOOR_GEMV_RPW=1, 2, 4 (its rows a
#             warp, every shape) and the decode step before this
#             week's kernels (MOOR_PDL=0 MOOR_DEC_MMA=0 MOOR_DEC_FUSE=0)
#   picks     bench_kern --only picks at 4,096, 1,024 and 100 rows (PICKS_ROWS):
#             cuBLASLt's candidates for each prefill product side by side,
#             what gemm.cu's gemm_tuned was measured with (a '*' marks a
#             candidate whose rows would change their bits)
#   gemv      bench_kern --only gemv (the decode GEMVs, GB/s) with each
#             VAR=VALUE of GEMV_AB (default: the defaults, then
#             MOOR_GEMV_RPW=1, 2, 4)
#   gprof     bench_gpu --profile 1 at 32k (PROF_LEN): the prefill and
#             decode op by op through kern_prof's shim (each op synced),
#             and bench_kern's prefill GEMMs (1,024 rows, TFLOP/s; then
#             4,096 rows, and whether their rows keep their bits)
#   dprof     ncu times the chunked delta rule's kernels (bench_kern
#             --only delta: intra, state pass, output): MOOR_GDN_RT=0,
#             the defaults (or each VAR=VALUE of DPROF_ENVS); and the
#             detail of intra and the state pass
#   dsrc      ncu's full set on the delta rule's kernels (DSRC_KERNELS,
#             default k_intra_tc k_chunk_tc; bench_kern --only delta): their
#             per-instruction pages (SASS, stall samples, executions), their
#             details and gdn.cu's SASS (cuobjdump) in $OUT/dsrc.tgz (one
#             file: a call brings back only so many;
#             tests/gpu/ncu_stalls.py reads a page)
#   eprof     bench_kern --only elem (the prefill's conv, 4-tap and
#             generic, and add + norm at the 27B's width), then ncu's
#             detail of the conv kernels
#   aprof     bench_kern --only decode (decode attention at 8k, 32k and
#             128k keys, GB/s of K and V), then ncu's detail of its split
#             and combine kernels there, each position called twice
#             ($OUT/aprof-detail.txt)
#   prof      ncu times each kernel of one decode step of bench_gpu (27B
#             shapes, 8k history; MOOR_CUPROF_LAUNCH picks the step) and
#             tests/gpu/ncu_sum.py sums them by kernel against the step
#   trained   tests/golden/train_tiny.py trains models/tiny's shape on this
#             host's text for TRAIN_MIN minutes (default 3) into
#             /dev/shm/moor-trained, then bench_spill's part 1 (the codec)
#             on 8,192 tokens: its held-out text on the trained model beside
#             random ids on models/tiny
# Knobs: SESSION_ENV (exported before every phase, e.g. MOOR_GDN_RT=0),
# BENCH_LENS (gpu), BENCH_DECODE (decode steps, default 32).
set -u
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/moor-out}
mkdir -p "$OUT"
B=build
[ -n "${SESSION_ENV:-}" ] && export ${SESSION_ENV?}
t0=$(date +%s)

phase() { # NAME LIMIT_S CMD...
	local name=$1 lim=$2
	shift 2
	echo "=== $name ($(($(date +%s) - t0)) s into the call)"
	local s=$(date +%s)
	timeout --kill-after=10 "$lim" bash -c "$*" >>"$OUT/$name.log" 2>&1
	local rc=$?
	echo "=== $name: exit $rc, $(($(date +%s) - s)) s"
	tail -n "${TAIL:-25}" "$OUT/$name.log"
	return 0
}

gpu27() { # LABEL ENV... : bench_gpu with the env
	local label=$1
	shift
	echo "--- bench_gpu $label"
	env "$@" $B/tests/bench/bench_gpu tests/bench/qwen35-27b --backend cuda \
		--lens "${BENCH_LENS:-8192,32768}" --decode "${BENCH_DECODE:-32}"
}

kdetail() { # NAME ONLY REGEX COUNT KEYS : bench_kern --only ONLY, then
	# ncu's detail of the first COUNT kernels REGEX matches in one more
	# run (into $OUT/NAME-detail.txt), and its lines that match KEYS
	local name=$1 only=$2 rx=$3 count=$4 keys=$5
	local ncu
	ncu=$(command -v ncu || ls /usr/local/cuda*/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | tail -1)
	$B/tests/bench/bench_kern --only "$only"
	$ncu --clock-control none -k regex:"$rx" -c "$count" \
		--section SpeedOfLight --section WarpStateStats --section Occupancy \
		--section LaunchStats --section MemoryWorkloadAnalysis \
		$B/tests/bench/bench_kern --only "$only" --reps 1 >"$OUT/$name-detail.txt" 2>&1
	grep -E "$rx|Duration|Memory Throughput|DRAM Throughput|Registers Per|Achieved Occupancy|$keys" \
		"$OUT/$name-detail.txt" | head -60
}

for p in "$@"; do
	case $p in
	setup)
		phase setup 300 "nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv; \
			MOOR_SKIP_ASAN=1 deploy/setup --from .bundle || \
			{ . .deps/env.sh; export LD_LIBRARY_PATH=\$LIBRARY_PATH; \
			  echo '(again with env.sh and LD_LIBRARY_PATH)'; MOOR_SKIP_ASAN=1 deploy/setup --from .bundle; }"
		# what a build that needed the env needs to run too
		if [ -f .deps/env.sh ]; then
			. .deps/env.sh
			export LD_LIBRARY_PATH=$LIBRARY_PATH
		fi ;;
	env)
		if [ -f .deps/env.sh ]; then
			. .deps/env.sh
			export LD_LIBRARY_PATH=$LIBRARY_PATH
		fi ;;
	suite)
		phase suite ${SUITE_LIMIT:-210} "meson test -C $B --suite gpu --suite kern --num-processes 4 --print-errorlogs; \
			cp $B/meson-logs/testlog.txt $OUT/suite-testlog.txt" ;;
	mover)
		phase mover ${MOVER_LIMIT:-150} "for e in ${MOVER_ENVS:-MOOR_MOVER_LANES=0,MOOR_MOVER_BATCH=0}; do \
			echo \"--- \$e\"; env \${e//,/ } meson test -C $B ${MOVER_TESTS:---suite gpu} \
			--num-processes 4 --print-errorlogs >\$OUT/mover-\${e//[=,]/-}.txt 2>&1; \
			grep -E '^ *[0-9]+/[0-9]+ |^(Ok|Fail|Skipped):' \$OUT/mover-\${e//[=,]/-}.txt; done" ;;
	rt)
		phase rt 120 "MOOR_GDN_RT=0 meson test -C $B test_kern_backends test_kern_deterministic \
			test_golden_transformers_cuda test_prefill_split_exact_tiny_cuda --num-processes 4 \
			--print-errorlogs; MOOR_GDN_RT=0 $B/tests/bench/bench_kern --only delta" ;;
	wg)
		phase wg 120 "MOOR_ATTN_WG=1 meson test -C $B test_golden_transformers_cuda \
			test_prefill_split_exact_tiny_cuda --num-processes 3 --print-errorlogs" ;;
	kern)
		phase kern ${KERN_LIMIT:-150} "for o in attention decode delta; do $B/tests/bench/bench_kern --only \$o; done; \
			MOOR_DEC_MMA=0 $B/tests/bench/bench_kern --only decode" ;;
	gpu)
		phase gpu ${GPU_LIMIT:-180} "$(declare -f gpu27); B=$B; gpu27 default; gpu27 before MOOR_PDL=0 MOOR_DEC_MMA=0 MOOR_DEC_FUSE=0; \
			gpu27 pdl MOOR_PDL=1; gpu27 unfused-prefill MOOR_PF_FUSE=0; \
			[ -n \"\${GPU_WG:-}\" ] && gpu27 wg MOOR_ATTN_WG=1" ;;
	gpuab)
		phase gpuab ${GPU_LIMIT:-180} "$(declare -f gpu27); B=$B; gpu27 default; \
			for e in \${GPU_AB:-}; do gpu27 \$e \$e; done" ;;
	segs)
		phase segs ${SEGS_LIMIT:-480} "$(declare -f gpu27); B=$B; \
			for s in ${SEGS_AB:-2048 1024 512}; do echo \"--- MOOR_ATTN_SEGS=\$s\"; \
			MOOR_ATTN_SEGS=\$s $B/tests/bench/bench_kern --only attention | grep k_flash_wg; done; \
			for s in ${SEGS_AB:-2048 1024 512}; do BENCH_LENS=32768,131072 BENCH_DECODE=4 \
			gpu27 MOOR_ATTN_SEGS=\$s MOOR_ATTN_SEGS=\$s; done" ;;
	tc)
		phase tc ${TC_LIMIT:-300} "$(declare -f gpu27); B=$B; for e in MOOR_GDN_TC=0 MOOR_GDN_TC=1 MOOR_GDN_TC=2 \
			MOOR_GDN_TC=3 MOOR_GDN_TC=1,MOOR_GDN_PIPE=8; do \
			echo \"--- \$e\"; env \${e//,/ } $B/tests/bench/bench_kern --only delta | grep delta_chunked; done; \
			for e in MOOR_GDN_TC=0 MOOR_GDN_TC=1; do BENCH_LENS=32768,131072 BENCH_DECODE=4 \
			gpu27 \$e \$e; done" ;;
	ct)
		phase ct ${CT_LIMIT:-300} "$(declare -f gpu27); B=$B; \
			meson test -C $B test_kern_backends test_gdn_tc_emu --print-errorlogs | grep -E '^ *[0-9]+/[0-9]+ '; \
			grep -E 'delta tc|FAIL|differ' $B/meson-logs/testlog.txt | head -5; \
			for e in MOOR_GDN_IT=1,MOOR_GDN_CT=1 MOOR_GDN_IT=2,MOOR_GDN_CT=1 MOOR_GDN_IT=1,MOOR_GDN_CT=2 \
			MOOR_GDN_IT=2,MOOR_GDN_CT=2 MOOR_GDN_IT=1,MOOR_GDN_CT=1; do \
			echo \"--- \$e\"; env \${e//,/ } $B/tests/bench/bench_kern --only delta | grep delta_chunked; done; \
			NCU=\$(command -v ncu || ls /usr/local/cuda*/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | tail -1); \
			for e in MOOR_GDN_IT=1,MOOR_GDN_CT=1 MOOR_GDN_IT=2,MOOR_GDN_CT=2; do echo \"--- ncu \$e\"; \
			env \${e//,/ } \$NCU --clock-control none --metrics gpu__time_duration.sum --csv --print-units base \
			$B/tests/bench/bench_kern --only delta --reps 2 >/tmp/ct-ncu.csv 2>&1; \
			python3 tests/gpu/ncu_sum.py /tmp/ct-ncu.csv | head -4; done; \
			for e in MOOR_GDN_CT=1 MOOR_GDN_IT=2,MOOR_GDN_CT=2; do \
			BENCH_LENS=32768,131072 BENCH_DECODE=2 gpu27 \$e \${e//,/ }; done" ;;
	gpulong)
		phase gpulong 580 "$(declare -f gpu27); B=$B; BENCH_LENS=1024,8192,32768,65536,131072 gpu27 long" ;;
	pipe)
		phase pipe ${PIPE_LIMIT:-300} "$B/tests/kern/test_kern_backends | grep -E 'delta|FAIL|differ'; \
			for e in MOOR_GDN_PIPE=0 MOOR_GDN_PIPE=8 MOOR_GDN_PIPE=4 MOOR_GDN_PIPE=2; do echo \"--- \$e\"; \
			env \$e $B/tests/bench/bench_kern --only delta | grep delta_chunked; done; \
			$(declare -f gpu27); B=$B; for e in MOOR_GDN_PIPE=0 MOOR_GDN_PIPE=16 MOOR_GDN_PIPE=8 MOOR_GDN_PIPE=4; do \
			BENCH_LENS=32768,131072 gpu27 \$e \$e | grep -E '^---|^ +[0-9]+ [|]'; done" ;;
	golden27)
		phase golden27 580 "tests/golden/run_golden27.sh $B /dev/shm/moor-golden27" ;;
	load)
		phase load 240 "$B/tests/bench/bench_load tests/bench/qwen35-27b --dir /dev/shm/moor-load \
			--layers 8 --backend cuda; rm -rf /dev/shm/moor-load" ;;
	restore)
		phase restore ${RESTORE_LIMIT:-120} "$B/tests/bench/bench_restore --backend cuda" ;;
	ttft)
		phase ttft ${TTFT_LIMIT:-580} "$B/tests/bench/bench_ttft tests/bench/qwen35-27b --backend cuda \
			--load-format dummy --lens ${TTFT_LENS:-32768,131072}" ;;
	stack)
		phase stack ${STACK_LIMIT:-580} "tests/bench/stack_ttft --model tests/bench/qwen35-27b \
			--tokenizer-dir models/tiny --backend cuda --load-format dummy \
			--lens ${STACK_LENS:-32768,131072} --build $B" ;;
	disk)
		phase disk ${DISK_LIMIT:-120} "mkdir -p .bench-disk; MOOR_BENCH_HEAD=\${DISK_HEAD:-32768} \
			$B/tests/bench/bench_spill .bench-disk 16 64 models/tiny; rm -rf .bench-disk" ;;
	pf)
		phase pf ${PF_LIMIT:-120} "$(declare -f gpu27); B=$B; for pf in 0 2 4 8; do \
			BENCH_LENS=8192 gpu27 PF=\$pf MOOR_GEMV_PF=\$pf | grep -E '^---|^ +[0-9]+ [|]'; done; \
			for r in 1 2 4; do BENCH_LENS=8192 gpu27 RPW=\$r MOOR_GEMV_RPW=\$r | grep -E '^---|^ +[0-9]+ [|]'; done; \
			BENCH_LENS=8192 gpu27 before MOOR_PDL=0 MOOR_DEC_MMA=0 MOOR_DEC_FUSE=0 | grep -E '^---|^ +[0-9]+ [|]'" ;;
	picks)
		phase picks ${PICKS_LIMIT:-240} "for r in ${PICKS_ROWS:-4096 1024 100}; do \
			$B/tests/bench/bench_kern --only picks --rows \$r | grep -E '^[|] picks|rror|skipped'; done" ;;
	gemv)
		phase gemv ${GEMV_LIMIT:-120} "for v in ${GEMV_AB:-MOOR_GEMV_PF=2 MOOR_GEMV_RPW=1 MOOR_GEMV_RPW=2 MOOR_GEMV_RPW=4}; do \
			echo \"--- \$v\"; env \$v $B/tests/bench/bench_kern --only gemv | grep '^| matmul'; done" ;;
	gprof)
		phase gprof ${GPROF_LIMIT:-150} "$B/tests/bench/bench_gpu tests/bench/qwen35-27b --backend cuda \
			--lens \${PROF_LEN:-32768} --decode 4 --profile 1; $B/tests/bench/bench_kern --only mm; \
			$B/tests/bench/bench_kern --only rows" ;;
	eprof)
		phase eprof ${EPROF_LIMIT:-120} "$(declare -f kdetail); B=$B; OUT=$OUT; \
			kdetail eprof elem 'conv1d|rmsnorm' 3 'Executed Ipc A'" ;;
	aprof)
		phase aprof ${APROF_LIMIT:-120} "$(declare -f kdetail); B=$B; OUT=$OUT; \
			kdetail aprof decode 'k_split|k_combine' 12 'Waves Per SM'" ;;
	dprof)
		phase dprof ${DPROF_LIMIT:-150} "NCU=\$(command -v ncu || ls /usr/local/cuda*/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | tail -1); \
			for e in ${DPROF_ENVS:-MOOR_GDN_RT=0 MOOR_GDN_RT=1}; do echo \"--- \$e\"; env \$e \$NCU --clock-control none \
			--metrics gpu__time_duration.sum --csv --print-units base \
			$B/tests/bench/bench_kern --only delta --reps 2 >$OUT/dprof-\${e//=/-}.csv 2>&1; \
			python3 tests/gpu/ncu_sum.py $OUT/dprof-\${e//=/-}.csv | head -12; \
			env \$e \$NCU --clock-control none -k regex:'hstate|intra' -c 2 \
			--section SpeedOfLight --section WarpStateStats --section Occupancy \
			--section LaunchStats --section SchedulerStats \
			$B/tests/bench/bench_kern --only delta --reps 1 \
			>$OUT/dprof-detail-\${e//=/-}.txt 2>&1; done" ;;
	dsrc)
		phase dsrc ${DSRC_LIMIT:-150} "NCU=\$(command -v ncu || ls /usr/local/cuda*/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | tail -1); \
			CUOBJ=\$(command -v cuobjdump || ls /usr/local/cuda*/bin/cuobjdump 2>/dev/null | tail -1); \
			rm -rf /tmp/dsrc && mkdir -p /tmp/dsrc && \
			for kn in ${DSRC_KERNELS:-k_intra_tc k_chunk_tc}; do \
			\$NCU --clock-control none --set full -k regex:\$kn -c 1 -o /tmp/dsrc/\$kn \
			$B/tests/bench/bench_kern --only delta --reps 1 >/dev/null 2>&1; \
			\$NCU -i /tmp/dsrc/\$kn.ncu-rep --page source --csv --print-source sass >/tmp/dsrc/\$kn.csv 2>&1; \
			\$NCU -i /tmp/dsrc/\$kn.ncu-rep --page details >/tmp/dsrc/\$kn-details.txt 2>&1; \
			rm -f /tmp/dsrc/\$kn.ncu-rep; wc -l /tmp/dsrc/\$kn.csv; done; \
			\$CUOBJ -sass $B/kernels/cuda/libmoor_kern_cuda.a.p/gdn.cu.o >/tmp/dsrc/gdn.sass 2>&1; \
			tar czf \$OUT/dsrc.tgz -C /tmp dsrc" ;;
	trained)
		phase trained ${TRAINED_LIMIT:-330} "python3 tests/golden/train_tiny.py /dev/shm/moor-trained \
			--minutes ${TRAIN_MIN:-3} --device cuda && mkdir -p /dev/shm/moor-bs && \
			MOOR_BENCH_PARTS=1 $B/tests/bench/bench_spill /dev/shm/moor-bs 16 8192 /dev/shm/moor-trained models/tiny; \
			rm -rf /dev/shm/moor-bs" ;;
	prof)
		phase prof ${PROF_LIMIT:-240} "NCU=\$(command -v ncu || ls /usr/local/cuda*/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | tail -1); echo ncu: \$NCU; \
			MOOR_CUPROF_LAUNCH=4 \$NCU --clock-control none --profile-from-start off \
			--metrics gpu__time_duration.sum --csv --print-units base \
			$B/tests/bench/bench_gpu tests/bench/qwen35-27b \
			--backend cuda --lens \${PROF_LEN:-8192} --decode 8 >$OUT/prof-ncu.csv 2>&1; \
			python3 tests/gpu/ncu_sum.py $OUT/prof-ncu.csv" ;;
	*) echo "session.sh: unknown phase $p" >&2 ;;
	esac
done
echo "=== done, $(($(date +%s) - t0)) s"
